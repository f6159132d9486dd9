#!/usr/bin/env bash
# attention_job.sh [BUILD_DIR] [N...] — attention forward + backward (F32,
# batch 1, 8 heads, d 64; issue 35's rows) in Kiln (bench/attention.c,
# kiln_scaled_dot_product_attention and kiln_grad) and in PyTorch 1.13
# eager (bench/attention.py, the explicit softmax formulation), in this
# one run, one process per row and side (the peak resident size only
# grows), with the same thread count. N defaults to 512 and 2048 (8192
# needs several GiB for PyTorch and Kiln's unfused run: pass it
# explicitly). Prints each one's median time and the memory its run
# added above the inputs — Kiln's fused kernels, Kiln's composition
# (KILN_ATTENTION=unfused) and PyTorch — and the ratios of Kiln's fused
# run to PyTorch's (issue 35's targets: ≥ 2 × PyTorch's speed at
# N = 2048, ≤ 1/10 of its peak memory at N = 8192).
# ATTN_ARGS adds options to both (e.g. "--causal", "--reps 3").
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
shift || true
NS=("$@")
((${#NS[@]})) || NS=(512 2048)
BIN=$BUILD/bench/attention_bench
[[ -x $BIN ]] || { echo "attention_job.sh: $BIN not built (cmake --build $BUILD --target attention_bench)" >&2; exit 1; }
THREADS=${KILN_NUM_THREADS:-$(nproc)}
# shellcheck disable=SC2206
ARGS=(${ATTN_ARGS:-})
ms() { sed -n 's/.*fwd+bwd \([0-9.]*\) ms.*/\1/p'; }
mib() { sed -n 's/.*, \([0-9-]*\) MiB above the inputs$/\1/p'; }
printf 'threads %s, batch 1, 8 heads, d 64 %s\n' "$THREADS" "${ATTN_ARGS:-}"
printf '%6s %10s %10s %10s %8s %10s %10s %10s %10s\n' N "Kiln ms" "unfused" "Torch ms" speedup \
  "Kiln MiB" "unfused" "Torch MiB" "mem ratio"
for n in "${NS[@]}"; do
  k=$(KILN_NUM_THREADS=$THREADS "$BIN" --n "$n" "${ARGS[@]}")
  u=$(KILN_ATTENTION=unfused KILN_NUM_THREADS=$THREADS "$BIN" --n "$n" "${ARGS[@]}")
  t=$(/usr/bin/python3 "$ROOT/bench/attention.py" --n "$n" --threads "$THREADS" "${ARGS[@]}") ||
    { echo "attention_job.sh: PyTorch did not run (python3-torch missing?)" >&2; exit 1; }
  awk -v n="$n" -v km="$(ms <<<"$k")" -v um="$(ms <<<"$u")" -v tm="$(ms <<<"$t")" -v kb="$(mib <<<"$k")" \
    -v ub="$(mib <<<"$u")" -v tb="$(mib <<<"$t")" \
    'BEGIN { printf "%6d %10.1f %10.1f %10.1f %8.2f %10d %10d %10d %10.3f\n", n, km, um, tm, tm / km, kb, ub, tb,
             (tb > 0 ? kb / tb : 0) }'
done
