#!/usr/bin/env bash
# check_onnx_cli.sh — kiln-onnx-run end to end: libonnx-testdata's
# node/test_add model (x + y -> sum, [3, 4, 5] float) on .npy inputs
# written by NumPy, its output compared with NumPy's sum; --profile prints
# the profile table; and the error paths (usage: exit 2; a missing model,
# a wrong number of inputs, a missing input: exit 1 with a message on
# stderr). Skips (77) without the test data or NumPy.
# Usage: check_onnx_cli.sh KILN_ONNX_RUN DATA_DIR PYTHON
set -uo pipefail
tool=$1 data=$2 py=$3
model=$data/node/test_add/model.onnx
[[ -f $model ]] || { echo "SKIP: no $model (libonnx-testdata)"; exit 77; }
"$py" -c 'import numpy' 2>/dev/null || { echo "SKIP: $py lacks numpy"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$py" - "$tmp" <<'PY' || fail "writing inputs"
import sys, numpy as np
rng = np.random.default_rng(0)
for name in "xy":
    np.save(f"{sys.argv[1]}/{name}.npy", rng.standard_normal((3, 4, 5)).astype(np.float32))
PY

out=$("$tool" "$model" -o "$tmp" --profile "$tmp/x.npy" "$tmp/y.npy" 2>"$tmp/err") || fail "run: $(cat "$tmp/err")"
grep -q "$tmp/sum.npy" <<<"$out" || fail "the output path is not printed: $out"
grep -qi 'kernel' <<<"$out" || fail "--profile printed no table: $out"
"$py" - "$tmp" <<'PY' || fail "sum.npy differs from NumPy's x + y"
import sys, numpy as np
d = sys.argv[1]
got, want = np.load(f"{d}/sum.npy"), np.load(f"{d}/x.npy") + np.load(f"{d}/y.npy")
assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape)
assert np.array_equal(got, want)
PY

"$tool" >/dev/null 2>"$tmp/err"; rc=$?
[[ $rc == 2 ]] && grep -q usage "$tmp/err" || fail "no arguments: exit $rc, stderr: $(cat "$tmp/err")"
"$tool" "$tmp/none.onnx" "$tmp/x.npy" >/dev/null 2>"$tmp/err"; rc=$?
[[ $rc == 1 ]] && grep -q 'kiln_onnx_load' "$tmp/err" || fail "missing model: exit $rc, stderr: $(cat "$tmp/err")"
"$tool" "$model" "$tmp/x.npy" >/dev/null 2>"$tmp/err"; rc=$?
[[ $rc == 1 ]] && grep -q 'takes 2 inputs' "$tmp/err" || fail "one input: exit $rc, stderr: $(cat "$tmp/err")"
"$tool" "$model" "$tmp/x.npy" "$tmp/nope.npy" >/dev/null 2>"$tmp/err"; rc=$?
[[ $rc == 1 ]] && grep -q 'nope.npy' "$tmp/err" || fail "missing input: exit $rc, stderr: $(cat "$tmp/err")"
echo "kiln-onnx-run: outputs, --profile and errors as documented"
