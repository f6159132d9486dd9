#!/usr/bin/env bash
# transformer_job.sh [BUILD_DIR] [STEPS] — the transformer job
# (examples/char_transformer.c: a character-level GPT, 4 layers, 4 heads,
# d 128, context 128, batch 32, AdamW with warm-up and cosine, on Debian's
# fortunes) against the same model and setup in PyTorch 1.13 eager
# (bench/char_transformer.py: same text, split, batches, schedule,
# clipping and validation windows; Torch's own initial weights), in this
# one run, with the same thread count. Both train STEPS steps (default
# 300) and evaluate once at the end. Prints each one's training tokens/s
# (steps 2..STEPS: the first step, which compiles Kiln's kernels, is
# left out of both) and final validation loss, and their ratios (the
# issue's targets: tokens/s >= 2 x PyTorch's, validation loss within 2 %).
# Extra model options: TRANSFORMER_ARGS (e.g. "--layers 2 --dim 64").
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
STEPS=${2:-300}
BIN=$BUILD/examples/char_transformer
[[ -x $BIN ]] || { echo "transformer_job.sh: $BIN not built (cmake --build $BUILD --target char_transformer)" >&2; exit 1; }
THREADS=${KILN_NUM_THREADS:-$(nproc)}
# shellcheck disable=SC2206
ARGS=(--steps "$STEPS" --epoch-steps "$STEPS" --seed 1 ${TRANSFORMER_ARGS:-})

rate() { sed -n 's/^training tokens\/s \([0-9.]*\) .*/\1/p'; }
val() { sed -n 's/^final validation loss \([0-9.]*\)$/\1/p'; }
kout=$(KILN_NUM_THREADS=$THREADS "$BIN" "${ARGS[@]}" --sample 0)
tout=$(/usr/bin/python3 "$ROOT/bench/char_transformer.py" "${ARGS[@]}" --threads "$THREADS") ||
  { echo "transformer_job.sh: PyTorch did not run (python3-torch missing?)" >&2; exit 1; }
kr=$(rate <<<"$kout") kv=$(val <<<"$kout") tr=$(rate <<<"$tout") tv=$(val <<<"$tout")
[[ -n $kr && -n $kv && -n $tr && -n $tv ]] || { echo "transformer_job.sh: unexpected output" >&2; exit 1; }
head -2 <<<"$kout"
printf 'threads %s, %s steps\n' "$THREADS" "$STEPS"
printf '%-22s %12s %16s\n' "" "tokens/s" "validation loss"
printf '%-22s %12s %16s\n' "Kiln" "$kr" "$kv"
printf '%-22s %12s %16s\n' "PyTorch 1.13 eager" "$tr" "$tv"
awk -v kr="$kr" -v tr="$tr" -v kv="$kv" -v tv="$tv" \
  'BEGIN { printf "Kiln / PyTorch: tokens/s %.2f, validation loss %+.2f %%\n", kr / tr, 100 * (kv - tv) / tv }'
