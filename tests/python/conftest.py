"""Shared pytest set-up for the NumPy differential tests.

Hypothesis runs derandomized (the same examples on every run, so CI is
deterministic) with no deadline (each example JIT-compiles kernels) and no
example database. KILN_TEST_SCALE (default 1) multiplies every test's
max_examples: e.g. KILN_TEST_SCALE=10 for a long local run, 0.3 for a
quick one.
"""
import os
import sys

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SCALE = float(os.environ.get("KILN_TEST_SCALE", "1"))


def examples(n):
    """hypothesis settings for a test that should try about n examples."""
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None,
                    derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


@pytest.fixture(autouse=True)
def _no_pending_error():
    """Every test starts and ends with no Kiln error recorded."""
    import kiln_ctypes as K
    K.lib.kiln_clear_error()
    yield
    status = K.lib.kiln_last_status()
    msg = K.last_error()
    K.lib.kiln_clear_error()
    assert status == 0, f"test left a Kiln error behind: {msg}"


def import_torch(what):
    """The torch module, for the Torch differential tests of `what` (e.g.
    "gradient"). Without it the calling module is skipped, with a message;
    under KILN_TEST_EXPECT_TORCH=1 (.ci/run sets it) a missing torch fails
    the run instead, so CI cannot pass with these tests silently skipped
    (as KILN_TEST_EXPECT_DEVICE does for the CUDA device)."""
    try:
        import torch
        return torch
    except ImportError as e:
        msg = (f"PyTorch cannot be imported by {sys.executable} ({e}; Debian "
               f"python3-torch, installed by scripts/setup.sh): the {what} "
               "Torch differential tests cannot run")
        if os.environ.get("KILN_TEST_EXPECT_TORCH") == "1":
            pytest.fail(msg + " and KILN_TEST_EXPECT_TORCH=1 requires them",
                        pytrace=False)
        pytest.skip(msg, allow_module_level=True)


def run_in_child(code, timeout=120):
    """Runs Python `code` (which may `import kiln_ctypes as K`) in a child
    interpreter with the same environment, so a crash in Kiln (a trap, or a
    sanitizer abort) fails one test instead of the whole suite. Returns the
    CompletedProcess (stdout/stderr as text)."""
    import subprocess
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=timeout,
                          cwd=os.path.dirname(os.path.abspath(__file__)))
