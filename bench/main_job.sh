#!/usr/bin/env bash
# main_job.sh [BUILD_DIR] [EPOCHS] — the main job's training throughput with
# kiln_grad + kiln_sgd against the hand-written backward pass and update
# (fashion_mnist --manual), same seed, measured in this one run,
# alternating the two so that machine load hits both alike. Prints each
# epoch's images/s and test accuracy, and the ratio autodiff / manual of
# the best epoch of each (epoch 1 includes compilation; with EPOCHS ≥ 2 the
# best epoch is a warm one).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
EPOCHS=${2:-2}
BIN=$BUILD/examples/fashion_mnist
[[ -x $BIN ]] || { echo "main_job.sh: $BIN not built (cmake --build $BUILD --target fashion_mnist)" >&2; exit 1; }

best() { sed -n 's/^epoch .* \([0-9]*\) images\/s .*/\1/p' | sort -n | tail -1; }
acc() { sed -n 's/^final test accuracy \(.*\)%$/\1/p'; }

declare -A rate accuracy
for mode in autodiff manual autodiff manual; do
  flag=$([[ $mode == manual ]] && echo --manual || true)
  out=$("$BIN" --epochs "$EPOCHS" --seed 1 $flag)
  r=$(best <<<"$out")
  [[ -z ${rate[$mode]:-} || $r -gt ${rate[$mode]} ]] && rate[$mode]=$r
  accuracy[$mode]=$(acc <<<"$out")
  grep '^epoch' <<<"$out" | sed "s/^/$mode: /"
done
printf '%-9s %12s %10s\n' mode images/s "test acc"
for mode in autodiff manual; do printf '%-9s %12s %9s%%\n' "$mode" "${rate[$mode]}" "${accuracy[$mode]}"; done
awk -v a="${rate[autodiff]}" -v m="${rate[manual]}" 'BEGIN { printf "autodiff / manual throughput: %.2f\n", a / m }'
