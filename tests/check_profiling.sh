#!/usr/bin/env bash
# check_profiling.sh PROFILE_FUSION QUICKSTART — the profiling outputs as a
# user meets them: profile_fusion's DOT files render with Graphviz's dot,
# its trace is valid JSON with one "kernel" event per run in its table,
# and KILN_DEBUG levels 1-4 print what API.md says (a line per kernel,
# the schedule, the kernel IR, the LLVM IR). Outside CI a machine without
# dot or python3 skips (77).
set -euo pipefail
PF=$1
QS=$2
for tool in dot /usr/bin/python3; do
  if ! command -v "$tool" >/dev/null; then
    [[ -n "${CI:-}" ]] && { echo "FAIL: $tool missing (scripts/setup.sh installs it)"; exit 1; }
    echo "profiling check skipped: $tool missing (run scripts/setup.sh)"
    exit 77
  fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

out=$("$PF" --out "$tmp" --n 100000 --rows 64 --cols 256)
echo "$out"
for g in before after; do
  dot -Tsvg "$tmp/profile_fusion_$g.dot" -o "$tmp/$g.svg"
  grep -q "<svg" "$tmp/$g.svg" || { echo "FAIL: dot rendered no SVG for $g"; exit 1; }
done
grep -q 'subgraph cluster_' "$tmp/profile_fusion_after.dot" || { echo "FAIL: no kernel clusters"; exit 1; }
# the table's total row counts the runs; the trace has one kernel event each
runs=$(awk '/^kiln profile:/ { print $3 }' <<<"$out")
/usr/bin/python3 - "$tmp/profile_fusion_trace.json" "$runs" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
kernels = [e for e in events if e.get("cat") == "kernel"]
assert len(kernels) == int(sys.argv[2]), (len(kernels), sys.argv[2])
assert all(e["ph"] == "X" and e["dur"] >= 0 and "args" in e for e in kernels)
assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in events)
assert any(e.get("cat") == "compile" for e in events)
print(f"trace: {len(kernels)} kernel events, {len(events)} events in all")
PY

# KILN_DEBUG levels
dbg=$(KILN_DEBUG=1 "$QS" 2>&1 >/dev/null)
grep -Eq '^kiln: E_[a-z_]+_[0-9x]+ +llvm +[0-9]+ ops \[[0-9, ]+\] .* ms .* GB/s .* GFLOP/s' <<<"$dbg" || { echo "$dbg"; echo "FAIL: level 1 line"; exit 1; }
! grep -q 'kiln: schedule:' <<<"$dbg" || { echo "FAIL: level 1 printed a schedule"; exit 1; }
! grep -q 'kiln: options ' <<<"$dbg" || { echo "FAIL: level 1 printed kernel options"; exit 1; }
dbg=$(KILN_DEBUG=2 "$QS" 2>&1 >/dev/null)
grep -q '^kiln: schedule: [0-9]* pending nodes -> [0-9]* kernels' <<<"$dbg" || { echo "FAIL: level 2 schedule"; exit 1; }
grep -Eq '^kiln: options E_[a-z_]+_[0-9x]+: elementwise unroll=[0-9]+ tile=[01]' <<<"$dbg" || { echo "FAIL: level 2 kernel options"; exit 1; }
! grep -q 'kernel IR of' <<<"$dbg" || { echo "FAIL: level 2 printed kernel IR"; exit 1; }
dbg=$(KILN_DEBUG=3 "$QS" 2>&1 >/dev/null)
grep -q '^kiln: kernel IR of ' <<<"$dbg" || { echo "FAIL: level 3 kernel IR"; exit 1; }
! grep -q 'LLVM IR of' <<<"$dbg" || { echo "FAIL: level 3 printed LLVM IR"; exit 1; }
dbg=$(KILN_DEBUG=4 "$QS" 2>&1 >/dev/null)
grep -q '^kiln: LLVM IR of ' <<<"$dbg" && grep -q '^define ' <<<"$dbg" || { echo "FAIL: level 4 LLVM IR"; exit 1; }
# under cuda-emu (when the CUDA toolkit is here), level 4 prints the CUDA C
if [[ -x /usr/local/cuda/bin/ptxas ]] || command -v ptxas >/dev/null; then
  dbg=$(KILN_BACKEND=cuda-emu KILN_DEBUG=4 "$QS" 2>&1 >/dev/null)
  grep -q '^kiln: CUDA C of ' <<<"$dbg" && grep -q '^extern "C" __global__ void ' <<<"$dbg" ||
    { echo "$dbg" | head -20; echo "FAIL: level 4 CUDA C under cuda-emu"; exit 1; }
fi
echo "profiling: DOT renders, trace valid, KILN_DEBUG levels 1-4 as documented"
