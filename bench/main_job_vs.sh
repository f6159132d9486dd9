#!/usr/bin/env bash
# main_job_vs.sh BASE_BUILD [BUILD_DIR] [RUNS] — the main job's training
# throughput in this build against another build of Kiln (BASE_BUILD, a
# build directory of an earlier commit with fashion_mnist built: issue
# 32's baseline is adf93ec^, the last commit before the generated GEMM).
# Runs `fashion_mnist --epochs 3 --seed 1` RUNS times (default 5) in each,
# alternating so that machine load hits both alike, and prints each
# pair's best-epoch images/s, their ratio, and the medians' ratio.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BASE=${1:?usage: main_job_vs.sh BASE_BUILD [BUILD_DIR] [RUNS]}
BUILD=${2:-$ROOT/build}
RUNS=${3:-5}
for b in "$BASE" "$BUILD"; do
  [[ -x $b/examples/fashion_mnist ]] || { echo "main_job_vs.sh: $b/examples/fashion_mnist not built" >&2; exit 1; }
done

best() { "$1/examples/fashion_mnist" --epochs 3 --seed 1 | sed -n 's/^epoch .* \([0-9]*\) images\/s .*/\1/p' | sort -n | tail -1; }

base=() new=()
printf '%-4s %12s %12s %7s\n' run base this ratio
for ((r = 1; r <= RUNS; r++)); do
  b=$(best "$BASE") n=$(best "$BUILD")
  base+=("$b") new+=("$n")
  awk -v r="$r" -v b="$b" -v n="$n" 'BEGIN { printf "%-4d %12d %12d %7.2f\n", r, b, n, n / b }'
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mb=$(median "${base[@]}") mn=$(median "${new[@]}")
awk -v b="$mb" -v n="$mn" 'BEGIN { printf "medians: base %d, this %d images/s: %.2f x\n", b, n, n / b }'
