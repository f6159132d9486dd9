#!/usr/bin/env bash
# fuzz.sh — builds the libFuzzer harnesses of tests/fuzz (clang-19; the
# library with -fsanitize=fuzzer-no-link,address,undefined, each harness
# with -fsanitize=fuzzer) in build-fuzz/, then runs each for a bounded time
# over a fresh copy of its corpus (tests/fuzz/corpus/<name>, whose crash-*
# files are regression inputs) and fails on any crash, leak, timeout or
# mismatch. Prints the executions of each harness (libFuzzer's stats).
#
#   scripts/fuzz.sh                  every harness (npy, safetensors, program, and
#                                    onnx where protoc-c is installed)
#   scripts/fuzz.sh program npy      only these
#
# Environment: FUZZ_SECONDS per harness (default 60); FUZZ_CI=1 makes the
# run repeatable, as CI runs it: seed 1 and a fixed number of executions
# per harness (npy 2,000,000, safetensors 1,500,000, program 6,000; about
# a minute each here; onnx 300,000), FUZZ_SECONDS x 3 only a cap; FUZZ_ARGS extra
# libFuzzer arguments (e.g. "-seed=1"); KILN_BUILD_DIR (default
# build-fuzz); KILN_JOBS build parallelism (default 2); KILN_SKIP_SETUP=1
# skips scripts/setup.sh. A finding is left in <build>/fuzz-work/<name>/
# (crash-*, leak-*, timeout-*, oom-*); docs/testing.md says how to replay
# it and keep it in the corpus.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${KILN_BUILD_DIR:-$ROOT/build-fuzz}
JOBS=${KILN_JOBS:-2}
SECONDS_EACH=${FUZZ_SECONDS:-60}
HARNESSES=("$@")
if ((${#HARNESSES[@]} == 0)); then
  HARNESSES=(npy safetensors program)
  # the ONNX loader's harness exists where the ONNX layer builds (protobuf-c)
  if command -v protoc-c >/dev/null 2>&1; then HARNESSES+=(onnx); fi
fi
for h in "${HARNESSES[@]}"; do
  case "$h" in
    npy|safetensors|program|onnx) ;;
    -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "fuzz.sh: unknown harness $h (npy, safetensors, program, onnx)" >&2; exit 2 ;;
  esac
done

if [[ "${KILN_SKIP_SETUP:-0}" != 1 ]]; then
  bash "$ROOT/scripts/setup.sh"
fi
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
# The fuzzers compile thousands of one-off kernels: no on-disk kernel
# cache (docs/cache.md) unless KILN_CACHE_DIR is set.
export KILN_CACHE_DIR=${KILN_CACHE_DIR-}

echo "== configure $BUILD (clang-19, KILN_FUZZ=ON)"
# (warnings: the harnesses build with -Werror; the library's gate is gcc's)
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_C_COMPILER=clang-19 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON \
  -DKILN_WERROR=OFF -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_EXAMPLES=OFF -DKILN_BUILD_BENCH=OFF >/dev/null
echo "== build (-j$JOBS)"
targets=()
for h in "${HARNESSES[@]}"; do targets+=(--target "fuzz_$h"); done
cmake --build "$BUILD" -j"$JOBS" "${targets[@]}"

# detect_odr_violation=0: libLLVM and the JIT-ed kernels are not
# instrumented (as in scripts/test.sh --asan). Leaks are checked by
# libFuzzer after inputs that allocate more than they free.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:detect_odr_violation=0:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Per-harness libFuzzer options: a dictionary for the file formats; for
# programs, room for longer programs and a timeout well above the slowest
# seed (each input compiles kernels under ASan).
harness_args() {
  case "$1" in
    npy) echo "-dict=$ROOT/tests/fuzz/npy.dict" ;;
    safetensors) echo "-dict=$ROOT/tests/fuzz/safetensors.dict" ;;
    program) echo "-max_len=512 -timeout=120 -rss_limit_mb=4096" ;;
    onnx) echo "-max_len=4096" ;;
  esac
}

# FUZZ_CI=1: seed 1 and a fixed number of executions per harness, so a
# commit's CI run explores the same inputs every time.
limits() {
  if [[ "${FUZZ_CI:-0}" != 1 ]]; then
    echo "-max_total_time=$SECONDS_EACH"
    return
  fi
  local runs
  case "$1" in
    npy) runs=2000000 ;;
    safetensors) runs=1500000 ;;
    program) runs=6000 ;;
    onnx) runs=300000 ;;
  esac
  echo "-seed=1 -runs=$runs -max_total_time=$((SECONDS_EACH * 3))"
}

status=0
summary=()
for h in "${HARNESSES[@]}"; do
  work="$BUILD/fuzz-work/$h"
  rm -rf "$work"
  mkdir -p "$work/corpus"
  cp "$ROOT/tests/fuzz/corpus/$h/"* "$work/corpus/"
  seeds=$(ls "$work/corpus" | wc -l)
  log="$work/fuzz.log"
  echo "== fuzz_$h: $(limits "$h") over $seeds corpus inputs (log: $log)"
  # shellcheck disable=SC2046 # word splitting of the option lists is wanted
  set +e
  "$BUILD/tests/fuzz/fuzz_$h" $(limits "$h") -print_final_stats=1 \
    -artifact_prefix="$work/" $(harness_args "$h") ${FUZZ_ARGS:-} "$work/corpus" >"$log" 2>&1
  rc=$?
  set -e
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  findings=$(find "$work" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
  if ((rc != 0)) || [[ -n "$findings" ]]; then
    status=1
    echo "fuzz_$h FAILED (exit $rc); the end of its log:"
    grep -v '^    #[0-9]* 0x[0-9a-f]* in fuzzer::' "$log" | tail -40
    for f in $findings; do echo "  finding: $f"; done
    summary+=("fuzz_$h: FAILED after ${runs:-?} executions (${rate:-?}/s); findings in $work")
  else
    secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
    summary+=("fuzz_$h: ${runs:-?} executions in ${secs:-?} s (${rate:-?}/s), corpus $seeds -> $(ls "$work/corpus" | wc -l) inputs")
  fi
done

echo "== fuzz summary"
for line in "${summary[@]}"; do echo "$line"; done
exit $status
