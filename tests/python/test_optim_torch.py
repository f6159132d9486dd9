"""Optimizers and clip_grad_norm_ vs PyTorch 1.13 (Debian python3-torch),
the oracle for optimizers (DESIGN.md).

The same random F64 parameters and gradients go through Kiln's kiln_sgd /
kiln_adam and torch.optim.SGD / Adam / AdamW for STEPS steps (the learning
rate changed half way, as a scheduler would); parameters are compared
after every step with rtol 1e-6 (measured: at most 2e-14, on elements
near 0 — Torch's vectorised add uses FMA where Kiln may round twice). F32
runs are compared with rtol 1e-5 (measured: at most 3e-6). kiln_clip_grad_norm_ is compared with torch.nn.utils.clip_grad_norm_
for the 2-, 1- and inf-norms. Skipped with a message when torch cannot be
imported.
"""
import numpy as np
import pytest

import kiln_ctypes as K

from conftest import import_torch  # noqa: E402

torch = import_torch("optimizer")

STEPS = 12
SHAPES = [(3, 4), (7,), (2, 3, 2), ()]
RTOL = {K.F64: 1e-6, K.F32: 1e-5}
ATOL = {K.F64: 1e-12, K.F32: 1e-6}   # elements that pass near 0
NP_OF = {K.F64: np.float64, K.F32: np.float32}

CONFIGS = [
    ("sgd", dict(lr=0.1)),
    ("sgd", dict(lr=0.1, momentum=0.9)),
    ("sgd", dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
    ("sgd", dict(lr=0.05, momentum=0.8, weight_decay=0.02, nesterov=True)),
    ("adam", dict(lr=1e-2)),
    ("adam", dict(lr=3e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05)),
    ("adamw", dict(lr=1e-2, weight_decay=0.01)),
    ("adamw", dict(lr=5e-2, betas=(0.5, 0.9), eps=1e-3, weight_decay=0.1)),
]

def make_pair(kind, cfg, kparams, tparams):
    if kind == "sgd":
        return (K.sgd(kparams, cfg["lr"], cfg.get("momentum", 0.0),
                      cfg.get("weight_decay", 0.0),
                      cfg.get("nesterov", False)),
                torch.optim.SGD(tparams, **cfg))
    wd = cfg.get("weight_decay", 0.0)
    opt = K.adam(kparams, cfg["lr"], cfg.get("betas", (0.9, 0.999)),
                 cfg.get("eps", 1e-8), wd, kind == "adamw")
    tcfg = dict(cfg, weight_decay=wd)
    cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
    return opt, cls(tparams, **tcfg)


def rel_diff(got, want):
    scale = np.maximum(np.abs(want), 1e-300)
    return float(np.max(np.abs(got - want) / scale)) if want.size else 0.0


def run(kind, cfg, dtype, seed):
    rng = np.random.default_rng(seed)
    npd = NP_OF[dtype]
    init = [rng.standard_normal(s).astype(npd) for s in SHAPES]
    kparams = [K.from_numpy(x, dtype) for x in init]
    tparams = [torch.tensor(x, requires_grad=True) for x in init]
    kopt, topt = make_pair(kind, cfg, kparams, tparams)
    worst = 0.0
    for step in range(STEPS):
        if step == STEPS // 2:
            kopt.lr = cfg["lr"] / 3
            for group in topt.param_groups:
                group["lr"] = cfg["lr"] / 3
            assert kopt.lr == cfg["lr"] / 3
        grads = [np.asarray(rng.standard_normal(s) * 2, dtype=npd)
                 for s in SHAPES]
        kopt.step([K.from_numpy(g, dtype) for g in grads])
        for p, g in zip(tparams, grads):
            p.grad = torch.tensor(g)
        topt.step()
        for kp, tp in zip(kparams, tparams):
            want = tp.detach().numpy()
            got = kp.to_numpy()
            np.testing.assert_allclose(got, want, rtol=RTOL[dtype],
                                       atol=ATOL[dtype], err_msg=f"step {step}")
            worst = max(worst, rel_diff(got.astype(np.float64),
                                        want.astype(np.float64)))
    kopt.free()
    return worst


@pytest.mark.parametrize("index", range(len(CONFIGS)),
                         ids=[f"{k}-{i}" for i, (k, _) in enumerate(CONFIGS)])
def test_optimizer_f64_vs_torch(index):
    kind, cfg = CONFIGS[index]
    worst = run(kind, cfg, K.F64, seed=index)
    print(f"\n{kind} {cfg}: max relative difference vs torch {worst:.3g}")
    assert worst <= 1e-6


@pytest.mark.parametrize("kind,cfg", [CONFIGS[3], CONFIGS[5], CONFIGS[7]],
                         ids=["sgd-nesterov", "adam", "adamw"])
def test_optimizer_f32_vs_torch(kind, cfg):
    worst = run(kind, cfg, K.F32, seed=7)
    print(f"\n{kind} F32 {cfg}: max relative difference vs torch "
          f"{worst:.3g}")


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_vs_torch(norm_type, max_norm):
    rng = np.random.default_rng(3)
    grads = [rng.standard_normal(s) for s in SHAPES]
    kg = [K.from_numpy(g, K.F64) for g in grads]
    total = K.clip_grad_norm_(kg, max_norm, norm_type)
    tparams = [torch.zeros(s, dtype=torch.float64) for s in SHAPES]
    for p, g in zip(tparams, grads):
        p.grad = torch.tensor(g)
    ttotal = torch.nn.utils.clip_grad_norm_(tparams, max_norm, norm_type)
    assert total.dtype == K.F64
    np.testing.assert_allclose(total.to_numpy(), ttotal.numpy(), rtol=1e-12)
    for k, p in zip(kg, tparams):
        np.testing.assert_allclose(k.to_numpy(), p.grad.numpy(), rtol=1e-12,
                                   atol=1e-300)


def test_errors_raise():
    p = K.from_numpy(np.zeros(3))
    with pytest.raises(K.KilnError) as e:
        K.sgd([p], -1.0)
    assert e.value.status == K.ERR_ARG and "lr = -1" in e.value.message
    opt = K.adam([p], 1e-3)
    with pytest.raises(K.KilnError) as e:
        opt.step([K.from_numpy(np.zeros(4))])
    assert e.value.status == K.ERR_SHAPE
    with pytest.raises(K.KilnError) as e:
        K.clip_grad_norm_([p], 1.0, 0.0)
    assert e.value.status == K.ERR_ARG
    opt.free()
