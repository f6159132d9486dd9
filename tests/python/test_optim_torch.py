"""Optimizers, learning-rate schedules and clip_grad_norm_ vs PyTorch 1.13
(Debian python3-torch), the oracle for optimizers (DESIGN.md).

The same random F64 parameters and gradients go through Kiln's kiln_sgd /
kiln_adam / kiln_rmsprop / kiln_adagrad and torch.optim.SGD / Adam / AdamW
/ RMSprop / Adagrad for STEPS steps (the learning rate changed half way,
as a scheduler would); parameters are compared
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
    ("rmsprop", dict(lr=1e-2)),
    ("rmsprop", dict(lr=1e-2, alpha=0.9, eps=1e-6, weight_decay=0.05)),
    ("rmsprop", dict(lr=1e-2, momentum=0.9)),
    ("rmsprop", dict(lr=5e-3, centered=True, eps=1e-4)),
    ("rmsprop", dict(lr=5e-3, alpha=0.8, momentum=0.5, centered=True, weight_decay=0.01)),
    ("adagrad", dict(lr=1e-1)),
    ("adagrad", dict(lr=1e-1, lr_decay=0.05, weight_decay=0.02)),
    ("adagrad", dict(lr=5e-2, initial_accumulator_value=0.3, eps=1e-6)),
]

def make_pair(kind, cfg, kparams, tparams):
    if kind == "rmsprop":
        return K.rmsprop(kparams, **cfg), torch.optim.RMSprop(tparams, **cfg)
    if kind == "adagrad":
        return K.adagrad(kparams, **cfg), torch.optim.Adagrad(tparams, **cfg)
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


@pytest.mark.parametrize("kind,cfg", [CONFIGS[3], CONFIGS[5], CONFIGS[7], CONFIGS[12], CONFIGS[14]],
                         ids=["sgd-nesterov", "adam", "adamw", "rmsprop", "adagrad"])
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


SCHEDULES = [
    ("step", dict(step_size=3, gamma=0.5)),
    ("step", dict(step_size=1, gamma=0.9)),
    ("cosine", dict(T_max=10, eta_min=0.0)),
    ("cosine", dict(T_max=7, eta_min=0.01)),
    ("linear", dict(start_factor=0.1, end_factor=1.0, total_iters=5)),
    ("linear", dict(start_factor=1.0, end_factor=0.25, total_iters=8)),
]


def kiln_lr(kind, base, step, cfg):
    if kind == "step":
        return K.lr_step(base, step, cfg["step_size"], cfg["gamma"])
    if kind == "cosine":
        return K.lr_cosine(base, step, cfg["T_max"], cfg["eta_min"])
    return K.lr_linear(base, step, cfg["start_factor"], cfg["end_factor"],
                       cfg["total_iters"])


@pytest.mark.parametrize("index", range(len(SCHEDULES)),
                         ids=[f"{k}-{i}" for i, (k, _) in enumerate(SCHEDULES)])
def test_lr_schedules_vs_torch(index):
    """kiln_lr_* at every step equals the Torch scheduler's get_last_lr()
    after that many scheduler steps (past T_max and total_iters too)."""
    kind, cfg = SCHEDULES[index]
    base = 0.3
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=base)
    cls = {"step": torch.optim.lr_scheduler.StepLR,
           "cosine": torch.optim.lr_scheduler.CosineAnnealingLR,
           "linear": torch.optim.lr_scheduler.LinearLR}[kind]
    sched = cls(opt, **cfg)
    for step in range(25):
        want = sched.get_last_lr()[0]
        got = kiln_lr(kind, base, step, cfg)
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15), (kind, step)
        opt.step()
        sched.step()


def test_lr_schedule_errors():
    cases = [(lambda: K.lr_step(0.1, -1, 3, 0.5), "step -1"),
             (lambda: K.lr_step(0.1, 0, 0, 0.5), "step_size 0"),
             (lambda: K.lr_cosine(-0.1, 0, 3, 0.0), "base_lr -0.1"),
             (lambda: K.lr_cosine(0.1, 0, 0, 0.0), "t_max 0"),
             (lambda: K.lr_linear(0.1, 0, 0.0, 1.0, 5), "start_factor 0"),
             (lambda: K.lr_linear(0.1, 0, 0.5, 1.5, 5), "end_factor 1.5"),
             (lambda: K.lr_linear(0.1, 0, 0.5, 1.0, 0), "total_iters 0")]
    for f, text in cases:
        with pytest.raises(K.KilnError) as e:
            f()
        assert e.value.status == K.ERR_ARG and text in e.value.message, text


def test_rmsprop_adagrad_errors_and_state():
    p = K.from_numpy(np.zeros(3))
    for f, text in [(lambda: K.rmsprop([p], 0.1, alpha=-0.5), "alpha = -0.5"),
                    (lambda: K.rmsprop([p], 0.1, momentum=float("nan")), "momentum = nan"),
                    (lambda: K.adagrad([p], 0.1, lr_decay=-1.0), "lr_decay = -1"),
                    (lambda: K.adagrad([p], 0.1, initial_accumulator_value=float("inf")),
                     "initial_accumulator_value = inf")]:
        with pytest.raises(K.KilnError) as e:
            f()
        assert e.value.status == K.ERR_ARG and text in e.value.message, text


@pytest.mark.parametrize("kind,cfg", [CONFIGS[12], CONFIGS[14], CONFIGS[15]],
                         ids=["rmsprop-centered-momentum", "adagrad-decay", "adagrad-initial"])
def test_save_load_resumes(kind, cfg, tmp_path):
    """Saved after 3 steps and loaded into a fresh optimizer, the next
    steps equal those of the optimizer that went on; another kind's state
    is refused."""
    rng = np.random.default_rng(11)
    init = [rng.standard_normal(s) for s in SHAPES]
    grads = [[rng.standard_normal(s) for s in SHAPES] for _ in range(6)]
    a = [K.from_numpy(x) for x in init]
    ka, _ = make_pair(kind, cfg, a, [torch.tensor(x, requires_grad=True) for x in init])
    for g in grads[:3]:
        ka.step([K.from_numpy(x) for x in g])
    path = str(tmp_path / "opt.safetensors")
    ka.save(path)
    b = [K.from_numpy(x.to_numpy()) for x in a]
    kb, _ = make_pair(kind, cfg, b, [torch.tensor(x, requires_grad=True) for x in init])
    kb.load(path)
    for g in grads[3:]:
        ka.step([K.from_numpy(x) for x in g])
        kb.step([K.from_numpy(x) for x in g])
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.to_numpy(), y.to_numpy())
    other = K.sgd([K.from_numpy(x) for x in init], 0.1)
    with pytest.raises(K.KilnError) as e:
        other.load(path)
    assert e.value.status == K.ERR_ARG and "cannot be loaded into SGD" in e.value.message
    ka.free(), kb.free(), other.free()
