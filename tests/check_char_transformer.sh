#!/usr/bin/env bash
# check_char_transformer.sh CHAR_TRANSFORMER — a smoke run of the
# transformer job (examples/char_transformer.c) on a small model (2
# layers, d 64, context 32, batch 8, 40 steps): the loss falls (the mean
# of the last 5 steps at least 0.5 nats below the first step's, which is
# about log(vocabulary)), the validation loss is printed after each epoch
# and is finite and below the first loss, the rate and a sample are
# printed. Skips (77) outside CI when Debian's fortunes is not installed.
set -euo pipefail
BIN=$1
DATA=/usr/share/games/fortunes
if [[ ! -d $DATA && -z "${CI:-}" ]]; then
  echo "char_transformer skipped: $DATA missing (run scripts/setup.sh)"
  exit 77
fi
out=$("$BIN" --steps 40 --batch 8 --context 32 --layers 2 --dim 64 --heads 4 --lr 3e-3 \
  --epoch-steps 20 --eval-batches 2 --sample 40 --seed 2)
echo "$out"
first=$(sed -n 's/^step 1\/40  loss \([0-9.]*\) .*/\1/p' <<<"$out")
last5=$(sed -n 's/^step \(3[6-9]\|40\)\/40  loss \([0-9.]*\) .*/\2/p' <<<"$out" | awk '{ s += $1 } END { if (NR == 5) print s / 5 }')
vals=$(grep -c '^epoch [12]  step [24]0  validation loss [0-9.]*' <<<"$out" || true)
val=$(sed -n 's/^final validation loss \([0-9.]*\)$/\1/p' <<<"$out")
[[ -n "$first" && -n "$last5" && -n "$val" ]] || { echo "FAIL: unexpected output"; exit 1; }
[[ "$vals" == 2 ]] || { echo "FAIL: $vals validation lines, expected 2 (one per epoch)"; exit 1; }
awk -v f="$first" -v l="$last5" 'BEGIN { exit !(l <= f - 0.5) }' ||
  { echo "FAIL: the loss did not fall: step 1 $first, mean of steps 36-40 $last5"; exit 1; }
awk -v f="$first" -v v="$val" 'BEGIN { exit !(v < f) }' ||
  { echo "FAIL: validation loss $val not below the first loss $first"; exit 1; }
grep -q '^training tokens/s [0-9]' <<<"$out" || { echo "FAIL: no rate"; exit 1; }
grep -q '^sample ' <<<"$out" || { echo "FAIL: no sample"; exit 1; }
# a missing corpus is a clear error, not a crash
if "$BIN" --data /nonexistent --steps 1 2>err.txt; then echo "FAIL: missing corpus accepted"; exit 1; fi
grep -q "cannot open /nonexistent" err.txt || { cat err.txt; echo "FAIL: message"; exit 1; }
rm -f err.txt
echo "char_transformer: loss $first -> $last5 (mean of the last 5 steps), validation $val"
