"""torch.nn.init's Kaiming and Xavier initialisers (nn/init.c) against
PyTorch 1.13's own formulas: the gain from torch.nn.init.calculate_gain,
the fan from torch.nn.init._calculate_correct_fan /
_calculate_fan_in_and_fan_out, over linear and conv shapes, both modes,
every nonlinearity. Kiln's generator is not Torch's, so the samples are
checked statistically: a uniform's largest |x| within 0.1% of Torch's
bound (never above it), its variance within 8 standard errors; a
normal's variance within 8 standard errors of Torch's std^2 — a wrong
gain or fan is at least 20% off. Skips with torch absent.
"""
import numpy as np
import pytest

from conftest import import_torch  # noqa: E402

torch = import_torch("init")
import torch.nn.init as I  # noqa: E402

import kiln_ctypes as K  # noqa: E402

SHAPES = [(256, 512), (512, 128), (64, 32, 5, 5), (16, 48, 3, 3, 3)]
GAINS = [("linear", None), ("sigmoid", None), ("tanh", None), ("relu", None),
         ("leaky_relu", 0.0), ("leaky_relu", 0.2), ("leaky_relu", 0.5), ("selu", None)]


def samples(shape, fill):
    k = K.zeros(K.F64, list(shape))
    assert fill(k) == K.OK
    return k.to_numpy().reshape(-1)


def check_uniform(x, bound, what):
    n = x.size
    assert np.max(np.abs(x)) <= bound * (1 + 1e-12), what
    assert np.max(np.abs(x)) >= 0.999 * bound, what
    var = bound ** 2 / 3
    assert abs(x.var() / var - 1) < 8 * np.sqrt(0.8 / n), what


def check_normal(x, std, what):
    assert abs(x.var() / std ** 2 - 1) < 8 * np.sqrt(2 / x.size), what
    assert abs(x.mean()) < 6 * std / np.sqrt(x.size), what


def test_gains_are_torchs():
    for name, param in GAINS:
        want = I.calculate_gain(name, param)
        got = K.calculate_gain(K.NONLINEARITY[name], 0.01 if param is None else param)
        assert got == pytest.approx(want, rel=1e-15), name


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mode", ["fan_in", "fan_out"])
def test_kaiming(shape, mode):
    K.manual_seed(sum(shape))
    fan = I._calculate_correct_fan(torch.empty(shape), mode)
    kmode = K.FAN_IN if mode == "fan_in" else K.FAN_OUT
    for name, a in GAINS:
        a = 0.0 if a is None else a
        std = I.calculate_gain(name, a) / np.sqrt(fan)
        nl = K.NONLINEARITY[name]
        x = samples(shape, lambda k: K.kaiming_uniform_(k, a, kmode, nl))
        check_uniform(x, np.sqrt(3) * std, f"kaiming_uniform_ {shape} {mode} {name}({a})")
        x = samples(shape, lambda k: K.kaiming_normal_(k, a, kmode, nl))
        check_normal(x, std, f"kaiming_normal_ {shape} {mode} {name}({a})")


@pytest.mark.parametrize("shape", SHAPES)
def test_xavier(shape):
    K.manual_seed(7 + sum(shape))
    fan_in, fan_out = I._calculate_fan_in_and_fan_out(torch.empty(shape))
    for gain in [1.0, 5 / 3, np.sqrt(2)]:
        std = gain * np.sqrt(2.0 / (fan_in + fan_out))
        check_uniform(samples(shape, lambda k: K.xavier_uniform_(k, gain)), np.sqrt(3) * std,
                      f"xavier_uniform_ {shape} {gain}")
        check_normal(samples(shape, lambda k: K.xavier_normal_(k, gain)), std,
                     f"xavier_normal_ {shape} {gain}")
