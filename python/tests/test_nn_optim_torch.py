"""kiln.nn modules and kiln.optim optimizers against torch.nn / torch.optim
with the same weights: forward values, gradients, optimizer trajectories,
state_dict round trips through safetensors, and kiln.profile."""
import json

import numpy as np
import pytest
from hypothesis import given, strategies as st

import kiln
from kiln import nn
from conftest import examples, torch_or_skip

torch = torch_or_skip()
tnn = torch.nn


def copy_params(km, tm):
    """Torch module tm gets kiln module km's parameters and buffers."""
    with torch.no_grad():
        for (kn, kt), (tn, tt) in zip(km.state_dict().items(),
                                      tm.state_dict().items()):
            assert kn == tn and kt.shape == tuple(tt.shape)
            tt.copy_(torch.from_numpy(kt.numpy().copy()))


def close(k, t, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(k.numpy(), t.detach().numpy(), rtol=rtol,
                               atol=atol)


def build(seed):
    kiln.manual_seed(seed)
    km = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4),
                       nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                       nn.Linear(4 * 3 * 3, 5))
    tm = tnn.Sequential(tnn.Conv2d(2, 4, 3, padding=1), tnn.BatchNorm2d(4),
                        tnn.ReLU(), tnn.MaxPool2d(2), tnn.Flatten(),
                        tnn.Linear(4 * 3 * 3, 5))
    copy_params(km, tm)
    return km, tm


@examples(8)
@given(st.integers(0, 1000), st.booleans())
def test_cnn_forward_backward_matches_torch(seed, training):
    km, tm = build(seed)
    km.train(training)
    tm.train(training)
    x = np.random.default_rng(seed).standard_normal((3, 2, 6, 6))
    x = x.astype(np.float32)
    y = np.array([0, 4, 2])
    kl = nn.CrossEntropyLoss()(km(kiln.tensor(x)), kiln.tensor(y))
    tl = tnn.CrossEntropyLoss()(tm(torch.tensor(x)), torch.tensor(y))
    close(kl, tl)
    kl.backward()
    tl.backward()
    for kp, tp in zip(km.parameters(), tm.parameters()):
        close(kp.grad, tp.grad, rtol=1e-3, atol=1e-5)
    close(km[1].running_mean, tm[1].running_mean)
    close(km[1].running_var, tm[1].running_var)


def test_default_init_ranges_follow_torch():
    lin = nn.Linear(50, 20)
    w = lin.weight.numpy()
    bound = 1 / np.sqrt(50)           # kaiming_uniform(a=sqrt(5)) bound
    assert np.abs(w).max() <= bound + 1e-7 and np.abs(w).max() > 0.8 * bound
    assert np.abs(lin.bias.numpy()).max() <= bound + 1e-7


def test_embedding_dropout_and_losses():
    emb = nn.Embedding(6, 3)
    temb = tnn.Embedding(6, 3)
    copy_params(emb, temb)
    idx = [[1, 5], [0, 0]]
    close(emb(kiln.tensor(idx)), temb(torch.tensor(idx)))
    d = nn.Dropout(0.5)
    x = kiln.ones(1000)
    kept = d(x).numpy()
    assert set(np.unique(kept)) <= {0.0, 2.0} and 300 < (kept > 0).sum() < 700
    d.eval()
    np.testing.assert_array_equal(d(x).numpy(), 1.0)
    a = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)
    for kl, tl in [(nn.MSELoss(), tnn.MSELoss()), (nn.L1Loss(), tnn.L1Loss()),
                   (nn.MSELoss("sum"), tnn.MSELoss(reduction="sum"))]:
        close(kl(kiln.tensor(a), kiln.tensor(b)),
              tl(torch.tensor(a), torch.tensor(b)))
    close(nn.BCEWithLogitsLoss()(kiln.tensor(a), kiln.tensor((b > 0).astype(np.float32))),
          tnn.BCEWithLogitsLoss()(torch.tensor(a),
                                  torch.tensor((b > 0).astype(np.float32))))


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_optimizer_trajectory_matches_torch(name):
    kwargs = {"SGD": dict(lr=0.1, momentum=0.9, weight_decay=0.01),
              "Adam": dict(lr=0.05, weight_decay=0.01),
              "AdamW": dict(lr=0.05)}[name]
    w0 = np.random.default_rng(3).standard_normal((3, 4))
    kw = kiln.tensor(w0, requires_grad=True, dtype=kiln.float64)
    tw = torch.tensor(w0, requires_grad=True)
    kopt = getattr(kiln.optim, name)([kw], **kwargs)
    topt = getattr(torch.optim, name)([tw], **kwargs)
    target = np.linspace(-1, 1, 12).reshape(3, 4)
    for _ in range(5):
        kopt.zero_grad()
        ((kw - kiln.tensor(target)) ** 2).sum().backward()
        kopt.step()
        topt.zero_grad()
        ((tw - torch.tensor(target)) ** 2).sum().backward()
        topt.step()
    close(kw, tw, rtol=1e-10, atol=1e-12)


def test_state_dicts_round_trip(tmp_path):
    km, _ = build(7)
    path = tmp_path / "model.safetensors"
    kiln.save(km.state_dict(), path)
    other, _ = build(8)
    other.load_state_dict(kiln.load(path))
    for (n1, a), (n2, b) in zip(km.state_dict().items(),
                                other.state_dict().items()):
        assert n1 == n2
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(KeyError):
        other.load_state_dict({"nope": kiln.zeros(1)})
    # an optimizer restored from its state continues bit-exactly
    w = kiln.tensor([1.0, -2.0], requires_grad=True)
    opt = kiln.optim.Adam([w], lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        (w ** 2).sum().backward()
        opt.step()
    state = opt.state_dict()
    assert float(state["step"]) == 2.0
    saved = w.detach().clone().force()
    opt.zero_grad()
    (w ** 2).sum().backward()
    opt.step()
    expect = w.numpy().copy()
    w2 = kiln.tensor(saved.numpy(), requires_grad=True)
    opt2 = kiln.optim.Adam([w2], lr=0.1)
    opt2.load_state_dict(state)
    (w2 ** 2).sum().backward()
    opt2.step()
    np.testing.assert_array_equal(w2.numpy(), expect)
    opt2.lr = 0.5
    assert opt2.lr == 0.5


def test_profile(tmp_path):
    x = kiln.randn(64, 64)
    with kiln.profile() as p:
        (x @ x + 1).relu().sum().force()
    assert len(p) >= 1
    table = str(p)
    assert "kernel runs" in table and "GB/s" in table
    trace = tmp_path / "trace.json"
    p.write_trace(trace)
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert any(e.get("cat") == "kernel" for e in events)
