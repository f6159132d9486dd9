#!/usr/bin/env bash
# cnn_job.sh [BUILD_DIR] [STEPS] — the CNN job's training throughput
# (examples/fashion_cnn.c: conv-pool-conv-pool-fc-dropout-fc, batch 128,
# Adam) against PyTorch 1.13 eager on the same network, batch and thread
# count (bench/peers.py's CNN: one training step, median of runs), in
# this one run. Kiln trains STEPS steps (default 150) of one epoch; its
# images/s is the epoch's figure, which includes the first step's
# compilation (compiles are printed; a warm disk cache would not pay it),
# so the second line gives the figure without the first 10 steps.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
STEPS=${2:-150}
BIN=$BUILD/examples/fashion_cnn
[[ -x $BIN ]] || { echo "cnn_job.sh: $BIN not built (cmake --build $BUILD --target fashion_cnn)" >&2; exit 1; }
THREADS=${KILN_NUM_THREADS:-$(nproc)}

rate() { sed -n 's/^epoch .* \([0-9]*\) images\/s .*/\1/p' | tail -1; }
warm=$(KILN_NUM_THREADS=$THREADS "$BIN" --epochs 1 --steps 10 --seed 1 | rate)
full=$(KILN_NUM_THREADS=$THREADS "$BIN" --epochs 1 --steps "$STEPS" --seed 1 | rate)
# images/s past the first 10 steps: (STEPS - 10) batches in (t_full - t_10)
kiln=$(awk -v s="$STEPS" -v f="$full" -v w="$warm" 'BEGIN { b = 128; tf = s * b / f; tw = 10 * b / w;
  printf "%.0f", (s - 10) * b / (tf - tw) }')
# PyTorch twice: as installed, and with glibc's malloc keeping what it
# frees (blocks up to 32 MiB from the heap, the heap never trimmed), so
# its activations do not fault in fresh pages every step (~10 us a page
# on these VMs: PyTorch's step swings with it). The ratio is against the
# faster of the two.
torch_rate() {
  local s
  s=$("$@" /usr/bin/python3 "$ROOT/bench/peers.py" --only CNN --budget 5 --max-runs 40 |
    awk '$1 == "result" && $2 == "torch" { print $4 }')
  [[ -n $s ]] || { echo "cnn_job.sh: PyTorch did not run (python3-torch missing?)" >&2; exit 1; }
  awk -v t="$s" 'BEGIN { printf "%.0f", 128 / t }'
}
torch=$(torch_rate env)
torch_kept=$(torch_rate env GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=17179869184)
best=$((torch > torch_kept ? torch : torch_kept))
printf 'threads %s, batch 128\n' "$THREADS"
printf '%-40s %10s\n' "" images/s
printf '%-40s %10s\n' "Kiln, epoch of $STEPS steps" "$full"
printf '%-40s %10s\n' "Kiln, past the first 10" "$kiln"
printf '%-40s %10s\n' "PyTorch 1.13 eager" "$torch"
printf '%-40s %10s\n' "PyTorch 1.13 eager, malloc keeps memory" "$torch_kept"
awk -v k="$kiln" -v t="$best" 'BEGIN { printf "Kiln / PyTorch (the faster): %.2f\n", k / t }'
