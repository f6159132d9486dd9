#!/usr/bin/python3
"""peers.py -- times kiln_bench's workloads in NumPy and PyTorch.

Run by kiln_bench (through /usr/bin/python3, where Debian's python3-numpy
and python3-torch live) with the same sizes; it prints one line per figure:

    result PEER ID SECONDS RUNS     e.g.  result numpy W1 0.0123 15
    note TEXT                       e.g.  note torch not installed

SECONDS is the median of RUNS timed runs after one warm-up; RUNS fills
--budget seconds, clamped to [3, --max-runs] (W8: at least 20 runs, up to
4096, like kiln_bench). Each run allocates its result as user code would.
NumPy runs as is; PyTorch with torch.set_num_threads(2), using its native
softmax and layer_norm (the fused kernels a Kiln user would compare with).
CNN (PyTorch only, run by bench/cnn_job.sh) is one training step of
examples/fashion_cnn.c's network: forward, cross-entropy, backward, Adam.
G1-G4 are the GEMM rows (bench/gemm.c): np.matmul / torch.matmul of the
same shapes and transposed views, G4 relu(a @ b + bias).
Keep the computations in step with bench/workloads.c and bench/gemm.c.
"""
import argparse
import statistics
import sys
import time

K1_POINTS, K1_K = 20000, 8  # bench/workloads.c K1
CNN_BATCH = 128  # examples/fashion_cnn.c's batch (bench/cnn_job.sh)


def timeit(fn, budget, max_runs, min_runs=3):
    fn()  # warm-up
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    runs = max(min_runs, min(max_runs, int(budget / first) if first > 0 else max_runs))
    samples = [first]
    for _ in range(runs - 1):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), len(samples)


def gemm_shapes(a):
    """The GEMM rows' products as (M, N, K, A read transposed, B read
    transposed, relu(. + bias) epilogue): bench/gemm.c's shapes."""
    g, cols, b = a.gemm, a.conv_cols, a.mlp_batch
    return {"G1": (g, g, g, False, False, False), "G2": (64, cols, 288, False, False, False),
            "G3a": (b, 256, 784, False, False, False), "G3b": (784, 256, b, True, False, False),
            "G3c": (b, 784, 256, False, True, False), "G4": (g, g, g, False, False, True)}


def gemm_workloads(rand, matmul, relu, a):
    """Closures timing each GEMM row with a peer's rand, matmul and relu;
    a transposed operand is the transpose (.T, a view) of its stored matrix."""
    def make(m, n, k, ta, tb, epi):
        def mk():
            x = rand(k, m).T if ta else rand(m, k)
            y = rand(n, k).T if tb else rand(k, n)
            bias = rand(n) - 0.5
            if epi:
                return lambda: relu(matmul(x, y) + bias)
            return lambda: matmul(x, y)
        return mk
    return {wid: make(*shape) for wid, shape in gemm_shapes(a).items()}


def numpy_workloads(np, a):
    rng = np.random.default_rng(1234)

    def rand(*shape):
        return rng.random(shape, dtype=np.float32)

    n, sq, (lr, lc), tiny, chain = a.n, a.sq, a.ln, a.tiny, a.chain
    w = {}

    def w1():
        x = [rand(n) for _ in range(4)]
        return lambda: np.maximum(x[0] * x[1] + x[2], 0) * (1 / (1 + np.exp(-x[3])))

    def w2():
        y0 = rand(n)

        def f():
            y = y0
            for _ in range(10):
                y = np.tanh(y * np.float32(1.0001) + np.float32(0.5))
            return y
        return f

    def w3a():
        x = rand(n)
        return lambda: x.sum()

    def w3b():
        x = rand(sq, sq)
        return lambda: x.sum(axis=0)

    def w3c():
        x = rand(sq, sq)
        return lambda: x.sum(axis=1)

    def w4():
        x = rand(sq, sq)

        def f():
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)
        return f

    def w5():
        x = rand(lr, lc)

        def f():
            xc = x - x.mean(axis=-1, keepdims=True)
            var = (xc * xc).mean(axis=-1, keepdims=True)
            return xc * (1 / np.sqrt(var + np.float32(1e-5)))
        return f

    def w7():
        x, b = rand(sq, sq), rand(sq)
        return lambda: np.add(x.T, b[None, :], order="C")  # row-major result, as Kiln's

    def w7r():  # a ragged size: (sq - 1)^2
        x, b = rand(sq - 1, sq - 1), rand(sq - 1)
        return lambda: np.add(x.T, b[None, :], order="C")

    def w7b():  # batched: [4, sq/2, sq/2], the last two dims swapped
        h = sq // 2
        x, b = rand(4, h, h), rand(h)
        return lambda: np.add(x.transpose(0, 2, 1), b[None, :], order="C")

    def w8():
        x = rand(tiny)

        def f():
            y = x
            for i in range(chain):
                k = i % 4
                if k == 0:
                    y = y * np.float32(1.0001)
                elif k == 1:
                    y = y + x
                elif k == 2:
                    y = np.tanh(y)
                else:
                    y = y - np.float32(0.25)
            return y
        return f

    def k1():  # one k-means step, as workloads.c build_k1
        x, c = rand(K1_POINTS, 2), rand(K1_K, 2)

        def f():
            d = ((x[:, None, :] - c[None, :, :]) ** 2).sum(-1)
            a = d.argmin(1)
            sums = np.zeros((K1_K, 2), np.float32)
            counts = np.zeros(K1_K, np.float32)
            np.add.at(sums, a, x)
            np.add.at(counts, a, np.float32(1))
            return sums / np.maximum(counts, 1)[:, None]
        return f

    w.update(W1=w1, W2=w2, W3a=w3a, W3b=w3b, W3c=w3c, W4=w4, W5=w5, W7=w7, W7r=w7r, W7b=w7b, K1=k1, W8=w8)
    w.update(gemm_workloads(rand, np.matmul, lambda t: np.maximum(t, 0), a))
    return w


def torch_workloads(torch, a):
    torch.manual_seed(1234)

    def rand(*shape):
        return torch.rand(*shape, dtype=torch.float32)

    n, sq, (lr, lc), tiny, chain = a.n, a.sq, a.ln, a.tiny, a.chain
    w = {}

    def w1():
        x = [rand(n) for _ in range(4)]
        return lambda: torch.relu(x[0] * x[1] + x[2]) * torch.sigmoid(x[3])

    def w2():
        y0 = rand(n)

        def f():
            y = y0
            for _ in range(10):
                y = torch.tanh(y * 1.0001 + 0.5)
            return y
        return f

    def w3a():
        x = rand(n)
        return lambda: x.sum()

    def w3b():
        x = rand(sq, sq)
        return lambda: x.sum(0)

    def w3c():
        x = rand(sq, sq)
        return lambda: x.sum(1)

    def w4():
        x = rand(sq, sq)
        return lambda: torch.softmax(x, dim=-1)

    def w5():
        x = rand(lr, lc)
        return lambda: torch.nn.functional.layer_norm(x, (lc,), eps=1e-5)

    def w7():
        x, b = rand(sq, sq), rand(sq)

        def f():  # row-major result, as Kiln's (a plain add would keep x.T's layout)
            out = torch.empty(sq, sq)
            return torch.add(x.t(), b[None, :], out=out)
        return f

    def w7r():
        m = sq - 1
        x, b = rand(m, m), rand(m)

        def f():
            out = torch.empty(m, m)
            return torch.add(x.t(), b[None, :], out=out)
        return f

    def w7b():
        h = sq // 2
        x, b = rand(4, h, h), rand(h)

        def f():
            out = torch.empty(4, h, h)
            return torch.add(x.transpose(1, 2), b[None, :], out=out)
        return f

    def w8():
        x = rand(tiny)

        def f():
            y = x
            for i in range(chain):
                k = i % 4
                if k == 0:
                    y = y * 1.0001
                elif k == 1:
                    y = y + x
                elif k == 2:
                    y = torch.tanh(y)
                else:
                    y = y - 0.25
            return y
        return f

    def k1():
        x, c = rand(K1_POINTS, 2), rand(K1_K, 2)
        ones = torch.ones(K1_POINTS)

        def f():
            d = ((x[:, None, :] - c[None, :, :]) ** 2).sum(-1)
            a = d.argmin(1)
            sums = torch.zeros(K1_K, 2).index_add_(0, a, x)
            counts = torch.zeros(K1_K).index_add_(0, a, ones)
            return sums / counts.clamp(min=1)[:, None]
        return f

    def cnn():  # one training step of examples/fashion_cnn.c's network
        nn = torch.nn
        torch.manual_seed(1)
        model = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Dropout(0.25),
            nn.Linear(128, 10))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x = rand(CNN_BATCH, 1, 28, 28)
        y = torch.randint(0, 10, (CNN_BATCH,))

        def f():
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss.item()
        return f

    w.update(W1=w1, W2=w2, W3a=w3a, W3b=w3b, W3c=w3c, W4=w4, W5=w5, W7=w7, W7r=w7r, W7b=w7b, K1=k1, W8=w8, CNN=cnn)
    w.update(gemm_workloads(rand, torch.matmul, torch.relu, a))
    return w


def run(peer, workloads, args):
    for wid in args.only.split(","):
        make = workloads.get(wid)
        if make is None and wid == "CNN":
            continue  # PyTorch only
        if make is None:
            print(f"note {peer}: unknown workload {wid}", flush=True)
            continue
        fn = make()
        if wid == "W8":
            sec, runs = timeit(fn, args.budget / 2, 4096, min_runs=20)
        else:
            sec, runs = timeit(fn, args.budget, args.max_runs)
        del fn
        print(f"result {peer} {wid} {sec:.9g} {runs}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="W1,W2,W3a,W3b,W3c,W4,W5,W7,W7r,W7b,K1,W8")
    p.add_argument("--n", type=int, default=1 << 24)
    p.add_argument("--sq", type=int, default=4096)
    p.add_argument("--ln", type=int, nargs=2, default=[8192, 1024])
    p.add_argument("--tiny", type=int, default=1000)
    p.add_argument("--chain", type=int, default=100)
    p.add_argument("--gemm", type=int, default=2048)
    p.add_argument("--conv-cols", type=int, default=128 * 14 * 14)
    p.add_argument("--mlp-batch", type=int, default=128)
    p.add_argument("--budget", type=float, default=2.0)
    p.add_argument("--max-runs", type=int, default=15)
    args = p.parse_args()

    try:
        import numpy
    except ImportError:
        print(f"note numpy not installed for {sys.executable} (apt-get install python3-numpy)", flush=True)
    else:
        run("numpy", numpy_workloads(numpy, args), args)

    try:
        import torch
    except ImportError:
        print(f"note torch not installed for {sys.executable} (apt-get install python3-torch)", flush=True)
    else:
        torch.set_num_threads(2)
        run("torch", torch_workloads(torch, args), args)


if __name__ == "__main__":
    main()
