#!/usr/bin/env bash
# check_main_job.sh FASHION_MNIST — runs the main job for two epochs and
# checks its output: test accuracy ≥ 80 % after the first epoch (chance is
# 10 %), 0 kernels compiled in epoch 2, and the same final accuracy on a
# second run with the same seed (determinism). Skips (77) outside CI when
# the dataset is not installed.
set -euo pipefail
BIN=$1
DATA=/usr/share/datasets/fashion-mnist
if [[ ! -f $DATA/train-images-idx3-ubyte.gz && -z "${CI:-}" ]]; then
  echo "main_job skipped: $DATA missing (run scripts/setup.sh)"
  exit 77
fi
out=$("$BIN" --epochs 2 --seed 3)
echo "$out"
acc1=$(sed -n 's/^epoch 1\/2 .*test acc \([0-9.]*\)%.*/\1/p' <<<"$out")
compiled2=$(sed -n 's/^epoch 2\/2 .*(\([0-9]*\) kernels compiled this epoch).*/\1/p' <<<"$out")
final=$(sed -n 's/^final test accuracy \(.*\)%$/\1/p' <<<"$out")
[[ -n "$acc1" && -n "$compiled2" && -n "$final" ]] || { echo "FAIL: unexpected output"; exit 1; }
awk -v a="$acc1" 'BEGIN { exit !(a >= 80) }' || { echo "FAIL: epoch 1 test accuracy $acc1% < 80%"; exit 1; }
[[ "$compiled2" == 0 ]] || { echo "FAIL: $compiled2 kernels compiled in epoch 2"; exit 1; }
again=$("$BIN" --epochs 2 --seed 3 | sed -n 's/^final test accuracy \(.*\)%$/\1/p')
[[ "$again" == "$final" ]] || { echo "FAIL: not deterministic: $final% then $again%"; exit 1; }
# a missing data directory is a clear error, not a crash
if "$BIN" --data /nonexistent 2>err.txt; then echo "FAIL: missing data accepted"; exit 1; fi
grep -q "cannot open /nonexistent/train-images-idx3-ubyte.gz" err.txt || { cat err.txt; echo "FAIL: message"; exit 1; }
# a truncated file is a clear error too
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -c 100000 $DATA/train-images-idx3-ubyte.gz >"$tmp/train-images-idx3-ubyte.gz"
cp $DATA/train-labels-idx1-ubyte.gz "$tmp/"
if "$BIN" --data "$tmp" 2>err.txt; then echo "FAIL: truncated data accepted"; exit 1; fi
grep -q "corrupt or truncated file: .*train-images-idx3-ubyte.gz: unexpected end of file" err.txt || { cat err.txt; echo "FAIL: message"; exit 1; }
echo "main_job: epoch 1 test accuracy $acc1%, final $final%, 0 compiles in epoch 2, deterministic"
