#!/usr/bin/env python3
"""char_transformer.py — the transformer job (examples/char_transformer.c)
in PyTorch 1.13 eager, for bench/transformer_job.sh: the same corpus,
tokens, split, model, initialisation rule, batches, optimizer, schedule,
clipping and validation, and the same output lines ("step k/N  loss ...",
"epoch ...  validation loss ...", "final validation loss X", "training
tokens/s Y (...)").

What is the same exactly: the text (the files of /usr/share/games/fortunes
without a dot in their name, in name order), the vocabulary (the bytes that
occur, in byte order), the held-out last tenth, the training windows
(splitmix64 of --seed, as the C program draws them), the validation windows
(spread evenly), the learning rate of each step. What differs: the
random initial weights (Torch's generator; the same distributions) and the
order of floating-point sums. Torch 1.13 has no
F.scaled_dot_product_attention: attention is softmax(q kᵀ / sqrt(d/H) with
the causal mask as -inf) v, as its math path.

  char_transformer.py [--steps N] [--seed S] [--batch B] [--context T]
                      [--layers L] [--heads H] [--dim D] [--lr X]
                      [--epoch-steps N] [--eval-batches N] [--threads N]
                      [--data DIR_OR_FILE]
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

M64 = (1 << 64) - 1


def splitmix(state):
    """(new state, value): splitmix64, as examples/char_transformer.c."""
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def read_corpus(path):
    if not os.path.isdir(path):
        return open(path, "rb").read()
    parts = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if "." not in name and os.path.isfile(full) and not os.path.islink(full):
            parts.append(open(full, "rb").read())
    return b"".join(parts)


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def attention(self, x, causal):
        B, T, d = x.shape
        q, k, v = (h.view(B, T, self.heads, d // self.heads).transpose(1, 2)
                   for h in self.qkv(x).split(d, dim=2))
        s = q @ k.transpose(-2, -1) * (1 / math.sqrt(d // self.heads))
        s = s.masked_fill(~causal[:T, :T], float("-inf"))
        y = torch.softmax(s, -1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, d))

    def forward(self, x, causal):
        x = x + self.attention(self.ln1(x), causal)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, vocab, o):
        super().__init__()
        self.wte = torch.nn.Parameter(torch.randn(vocab, o.dim) * 0.02)
        self.wpe = torch.nn.Parameter(torch.randn(o.context, o.dim) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(o.dim, o.heads) for _ in range(o.layers))
        self.ln_f = torch.nn.LayerNorm(o.dim)
        for b in self.blocks:  # normal(0, 0.02) matrices, zero biases, as the C program
            for lin in (b.qkv, b.proj, b.fc1, b.fc2):
                torch.nn.init.normal_(lin.weight, 0, 0.02)
                torch.nn.init.zeros_(lin.bias)
        self.register_buffer("causal", torch.ones(o.context, o.context, dtype=torch.bool).tril())

    def forward(self, tokens):
        T = tokens.shape[1]
        x = F.embedding(tokens, self.wte) + self.wpe[:T]
        for b in self.blocks:
            x = b(x, self.causal)
        return F.linear(self.ln_f(x), self.wte)  # tied


def lr_at(o, step):
    w = max(o.steps // 20, 1)
    if step < w:
        return o.lr * (step + 1) / w
    span = o.steps - w - 1 if o.steps - w > 1 else 1
    eta = o.lr / 10
    return eta + (o.lr - eta) * (1 + math.cos(math.pi * (step - w) / span)) / 2


def batch(ids, starts, T):
    idx = torch.tensor(starts)[:, None] + torch.arange(T + 1)[None, :]
    w = ids[idx]
    return w[:, :-1], w[:, 1:]


def loss_of(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


@torch.no_grad()
def validate(model, ids, n_train, o):
    B, T, n = o.batch, o.context, o.eval_batches * o.batch
    span = len(ids) - n_train - T - 1
    total = 0.0
    for i in range(o.eval_batches):
        starts = [n_train + (i * B + b) * span // n for b in range(B)]
        total += loss_of(model, *batch(ids, starts, T)).item()
    return total / o.eval_batches


def main():
    p = argparse.ArgumentParser()
    for name, default in [("steps", 2000), ("seed", 1), ("batch", 32), ("context", 128), ("layers", 4),
                          ("heads", 4), ("dim", 128), ("epoch_steps", 0), ("eval_batches", 20),
                          ("threads", os.cpu_count())]:
        p.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--data", default="/usr/share/games/fortunes")
    o = p.parse_args()
    torch.set_num_threads(o.threads)
    torch.manual_seed(o.seed)
    text = read_corpus(o.data)
    vocab = sorted(set(text))
    lut = torch.zeros(256, dtype=torch.long)
    lut[torch.tensor(vocab)] = torch.arange(len(vocab))
    ids = lut[torch.frombuffer(bytearray(text), dtype=torch.uint8).long()]
    n_train = len(text) - len(text) // 10
    if not o.epoch_steps:
        o.epoch_steps = max(n_train // (o.batch * o.context), 1)
    print(f"corpus {o.data}: {len(text)} bytes, {len(vocab)} distinct, PyTorch {torch.__version__}, "
          f"{o.threads} threads; GPT {o.layers} layers, {o.heads} heads, d {o.dim}, context {o.context}, "
          f"batch {o.batch}, {o.steps} steps")
    model = GPT(len(vocab), o)
    opt = torch.optim.AdamW(model.parameters(), lr=o.lr, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01)
    rng, tokens, train_time, first, val = o.seed, o.batch * o.context, 0.0, 0.0, float("nan")
    t0 = time.perf_counter()
    for s in range(o.steps):
        starts = []
        for _ in range(o.batch):
            rng, r = splitmix(rng)
            starts.append(r % (n_train - o.context - 1))
        ts = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(o, s)
        loss = loss_of(model, *batch(ids, starts, o.context))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        lv = loss.item()
        dt = time.perf_counter() - ts
        if s == 0:
            first = dt
        else:
            train_time += dt
        print(f"step {s + 1}/{o.steps}  loss {lv:.4f}  lr {lr_at(o, s):.2e}  {tokens / dt:.0f} tokens/s")
        sys.stdout.flush()
        if (s + 1) % o.epoch_steps == 0 or s + 1 == o.steps:
            val = validate(model, ids, n_train, o)
            print(f"epoch {(s + o.epoch_steps) // o.epoch_steps}  step {s + 1}  validation loss {val:.4f}  "
                  f"elapsed {time.perf_counter() - t0:.1f} s")
    rate = tokens * (o.steps - 1) / train_time if o.steps > 1 else float("nan")
    print(f"final validation loss {val:.4f}")
    print(f"training tokens/s {rate:.0f} (steps 2..{o.steps} of {tokens} tokens in {train_time:.1f} s; "
          f"step 1 took {first:.1f} s)")


if __name__ == "__main__":
    main()
