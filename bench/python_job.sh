#!/usr/bin/env bash
# python_job.sh [BUILD_DIR] [EPOCHS] — issue 33's job figure: the CNN
# training job (Fashion-MNIST, seed 1, batch 128, Adam) run by the C
# example (examples/fashion_cnn.c) and by the Python package
# (examples/python/fashion_cnn.py, the same network, draws and schedule),
# back to back in this one run, EPOCHS each (default 3, the full job).
# Prints each epoch's images/s, the job's images/s (images over training
# seconds, the harmonic mean of the epochs), the final test accuracies and
# Python / C. The host's load changes the figures of both: run it on a
# quiet machine, and compare the epochs line by line.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
EPOCHS=${2:-3}
BIN=$BUILD/examples/fashion_cnn
[[ -x $BIN ]] || { echo "python_job.sh: $BIN not built (cmake --build $BUILD --target fashion_cnn)" >&2; exit 1; }
LIB=$BUILD/libkiln.so
[[ -e $LIB ]] || { echo "python_job.sh: $LIB not built (-DBUILD_SHARED_LIBS default)" >&2; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$BIN" --epochs "$EPOCHS" --seed 1 | tee "$out/c.txt"
PYTHONPATH=$ROOT/python KILN_LIBRARY=$LIB /usr/bin/python3 "$ROOT/examples/python/fashion_cnn.py" \
  --epochs "$EPOCHS" --seed 1 | tee "$out/py.txt"

rates() { sed -n 's/^epoch .* \([0-9][0-9]*\) images\/s .*/\1/p' "$1" | tr '\n' ' '; }
job() { awk '{ for (i = 1; i <= NF; i++) s += 1 / $i } END { printf "%.0f", NF / s }' <<<"$(rates "$1")"; }
acc() { sed -n 's/^final test accuracy \([0-9.]*\)%.*/\1/p' "$1"; }
c=$(job "$out/c.txt")
py=$(job "$out/py.txt")
echo
printf '%-8s %-24s %10s %14s\n' "" "images/s per epoch" "job" "test accuracy"
printf '%-8s %-24s %10s %13s%%\n' C "$(rates "$out/c.txt")" "$c" "$(acc "$out/c.txt")"
printf '%-8s %-24s %10s %13s%%\n' Python "$(rates "$out/py.txt")" "$py" "$(acc "$out/py.txt")"
awk -v p="$py" -v c="$c" 'BEGIN { printf "Python / C images/s: %.2f\n", p / c }'
