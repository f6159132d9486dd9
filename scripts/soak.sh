#!/usr/bin/env bash
# soak.sh — long runs lose nothing: the soak test (not part of CI; about
# 10 minutes on a 2-core host, longer on a loaded one).
#
#   scripts/soak.sh [--mlp-epochs N] [--cnn-epochs N]   (defaults 50 and 5)
#
# 1. The MLP main job for 50 epochs and the CNN job for 5, each with
#    --stats (kiln_engine_stats_get after every epoch) and the on-disk
#    kernel cache on, in a private directory. After epoch 1 nothing may
#    grow: live nodes, live buffers, pending nodes, the autodiff history,
#    the kernels and schedules cached and the kernels compiled stay at
#    most their epoch-1 values; the RSS and the allocator's cache at most
#    10 % + 32 MiB above them.
# 2. The disk cache stays within KILN_CACHE_MAX_BYTES (set to 64 MiB
#    here), and a second MLP run over the same cache writes no new entry.
# 3. An MPI job whose rank 1 is killed amid a run of all-reduces
#    (tests/run_mpi.sh kill): every other rank ends, with a clear error,
#    within the timeout.
#
# Builds what it runs in build/ (KILN_BUILD_DIR overrides). Exits 0 when
# every check holds; prints each failed check and exits 1 otherwise.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${KILN_BUILD_DIR:-$ROOT/build}
mlp_epochs=50 cnn_epochs=5
while (($#)); do
  case "$1" in
    --mlp-epochs) mlp_epochs=$2; shift ;;
    --cnn-epochs) cnn_epochs=$2; shift ;;
    -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "soak.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j"${KILN_JOBS:-2}" --target fashion_mnist fashion_cnn test_dist >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export KILN_CACHE_DIR=$work/cache KILN_CACHE_MAX_BYTES=$((64 << 20))
failed=0

# The stats lines of a log: after epoch 1, every counter at most its
# epoch-1 value (RSS and allocator cache: +10 % + 32 MiB).
check_bounded() {
  local name=$1 log=$2
  /usr/bin/python3 - "$name" "$log" <<'PY' || failed=1
import sys
name, log = sys.argv[1], sys.argv[2]
rows = []
for line in open(log):
    if line.startswith("stats: "):
        f = line.split()[1:]
        rows.append({f[i]: float(f[i + 1]) for i in range(0, len(f) - 1, 2)})
if len(rows) < 2:
    sys.exit(f"{name}: {len(rows)} stats lines: the run failed or was too short")
first, bad = rows[0], []
for r in rows[1:]:
    for k, v in r.items():
        if k == "epoch":
            continue
        limit = first[k] * 1.10 + 32 if k in ("rss_mib", "allocator_cached_mib") else first[k]
        if v > limit:
            bad.append(f"epoch {int(r['epoch'])}: {k} {v:g} > {limit:g} (epoch 1: {first[k]:g})")
last = rows[-1]
print(f"{name}: {len(rows)} epochs; epoch 1 -> {int(last['epoch'])}: " +
      ", ".join(f"{k} {first[k]:g} -> {last[k]:g}" for k in first if k != "epoch"))
if bad:
    print(f"FAIL {name}: grew after epoch 1:\n  " + "\n  ".join(bad[:20]))
    sys.exit(1)
PY
}

cache_bytes() { du -sb "$KILN_CACHE_DIR" 2>/dev/null | cut -f1; }

echo "== MLP main job, $mlp_epochs epochs"
"$BUILD/examples/fashion_mnist" --epochs "$mlp_epochs" --stats >"$work/mlp.log" 2>&1 || { failed=1; tail -5 "$work/mlp.log"; }
grep -E '^epoch (1|'"$mlp_epochs"')/' "$work/mlp.log" || true
check_bounded mlp "$work/mlp.log"

echo "== CNN job, $cnn_epochs epochs"
"$BUILD/examples/fashion_cnn" --epochs "$cnn_epochs" --stats >"$work/cnn.log" 2>&1 || { failed=1; tail -5 "$work/cnn.log"; }
grep -E '^epoch (1|'"$cnn_epochs"')/' "$work/cnn.log" || true
check_bounded cnn "$work/cnn.log"

echo "== disk cache"
before=$(cache_bytes) files_before=$(find "$KILN_CACHE_DIR" -type f | wc -l)
"$BUILD/examples/fashion_mnist" --epochs 1 >"$work/mlp2.log" 2>&1 || { failed=1; tail -5 "$work/mlp2.log"; }
after=$(cache_bytes) files_after=$(find "$KILN_CACHE_DIR" -type f | wc -l)
echo "disk cache: $before bytes in $files_before files after both jobs; $after bytes in $files_after files after a second MLP run (limit $KILN_CACHE_MAX_BYTES)"
if ((before > KILN_CACHE_MAX_BYTES || after > KILN_CACHE_MAX_BYTES)); then
  echo "FAIL disk cache: over KILN_CACHE_MAX_BYTES"; failed=1
fi
if ((files_after > files_before)); then
  echo "FAIL disk cache: the second MLP run wrote $((files_after - files_before)) new entries"; failed=1
fi

echo "== MPI: rank 1 killed amid all-reduces"
rc=0
bash "$ROOT/tests/run_mpi.sh" kill 2 "$BUILD/tests/test_dist" >"$work/mpi.log" 2>&1 || rc=$?
tail -1 "$work/mpi.log"
if ((rc == 77)); then
  echo "(skipped: no mpirun)"
elif ((rc != 0)); then
  cat "$work/mpi.log"; failed=1
fi

if ((failed)); then
  echo "soak: FAILED"
  exit 1
fi
echo "soak: every check held"
