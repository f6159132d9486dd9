"""pytest set-up for the kiln package's tests.

The package is imported from python/ (this checkout) unless an installed
one is asked for with KILN_TEST_INSTALLED=1. Hypothesis runs derandomized,
without deadline or database; KILN_TEST_SCALE multiplies max_examples.
Torch-dependent modules call torch_or_skip(): without torch they skip,
unless KILN_TEST_EXPECT_TORCH=1 (CI), where they fail.
"""
import os
import sys

import pytest
from hypothesis import HealthCheck, settings

if os.environ.get("KILN_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(os.path.dirname(
        os.path.abspath(__file__)), os.pardir))

SCALE = float(os.environ.get("KILN_TEST_SCALE", "1"))


def examples(n):
    """hypothesis settings for a test that should try about n examples."""
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None,
                    derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def torch_or_skip():
    """The torch module; skips the calling module without it (fails under
    KILN_TEST_EXPECT_TORCH=1)."""
    try:
        import torch
        return torch
    except ImportError as e:
        msg = f"PyTorch cannot be imported ({e}): Torch comparisons skipped"
        if os.environ.get("KILN_TEST_EXPECT_TORCH") == "1":
            pytest.fail(msg + " and KILN_TEST_EXPECT_TORCH=1 requires them",
                        pytrace=False)
        pytest.skip(msg, allow_module_level=True)


@pytest.fixture(autouse=True)
def _no_pending_error():
    """Every test ends with no Kiln error left uncleared: the package
    turns each one into an exception and clears it."""
    import kiln
    yield
    status = kiln._lib.kiln_last_status()
    msg = kiln._lib.kiln_last_error()
    kiln._lib.kiln_clear_error()
    assert status == 0, f"a Kiln error was left pending: {msg}"
