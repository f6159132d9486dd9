#!/usr/bin/env bash
# test.sh — builds Kiln and runs every test (C unit tests and the NumPy
# differential tests) through CTest.
#
#   scripts/test.sh            Release-with-debug-info build in build/
#   scripts/test.sh --asan     ASan+UBSan build in build-asan/ (also KILN_ASAN=1)
#   scripts/test.sh --tsan     ThreadSanitizer build (clang-19) in build-tsan/:
#                              builds and runs the multi-thread tests only
#   scripts/test.sh --fuzz     libFuzzer harnesses (clang-19, ASan+UBSan) in
#                              build-fuzz/, FUZZ_SECONDS (60) each: scripts/fuzz.sh
#   scripts/test.sh -- ARGS    extra arguments for ctest (e.g. -R numpy_diff);
#                              with --fuzz, the harnesses to run (e.g. program)
#
# Environment: KILN_BUILD_DIR overrides the build directory; KILN_JOBS the
# parallelism (default 2); KILN_SKIP_SETUP=1 skips scripts/setup.sh.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ASAN=${KILN_ASAN:-0}
TSAN=0
FUZZ=0
CTEST_ARGS=()
while (($#)); do
  case "$1" in
    --asan) ASAN=1 ;;
    --tsan) TSAN=1 ;;
    --fuzz) FUZZ=1 ;;
    --) shift; CTEST_ARGS+=("$@"); break ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "test.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
JOBS=${KILN_JOBS:-2}

if [[ "${KILN_SKIP_SETUP:-0}" != 1 ]]; then
  bash "$ROOT/scripts/setup.sh"
fi

if [[ "$FUZZ" == 1 ]]; then
  # libFuzzer: its own build (build-fuzz/) and runs, in scripts/fuzz.sh.
  KILN_SKIP_SETUP=1 exec bash "$ROOT/scripts/fuzz.sh" "${CTEST_ARGS[@]}"
fi

CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_WERROR=ON)
TARGETS=()
if [[ "$TSAN" == 1 ]]; then
  # ThreadSanitizer: the tests that force from several threads (the rest
  # of the suite is single-threaded; ASan covers it). clang-19 from
  # scripts/setup.sh; TSan reports fail the test (exitcode 66).
  BUILD=${KILN_BUILD_DIR:-$ROOT/build-tsan}
  # (warnings are gcc's gate, in the other builds: clang warns differently)
  CMAKE_ARGS+=(-DCMAKE_C_COMPILER=clang-19 -DKILN_TSAN=ON -DKILN_WERROR=OFF -DKILN_BUILD_BENCH=OFF
    -DKILN_BUILD_EXAMPLES=OFF)
  TARGETS=(--target test_threads)
  ((${#CTEST_ARGS[@]})) || CTEST_ARGS=(-R '^threads$')
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:exitcode=66:second_deadlock_stack=1:suppressions=$ROOT/tests/tsan.supp}
  export KILN_TEST_THREAD_ITERS=${KILN_TEST_THREAD_ITERS:-40}
elif [[ "$ASAN" == 1 ]]; then
  BUILD=${KILN_BUILD_DIR:-$ROOT/build-asan}
  CMAKE_ARGS+=(-DKILN_SANITIZE=ON -DKILN_BUILD_BENCH=OFF)
  # detect_leaks: LeakSanitizer checks every test program at exit.
  # detect_odr_violation=0: libLLVM and the JIT-ed modules are not
  # instrumented; ASan's ODR check misfires on symbols both define.
  # UBSan: report with a stack trace and fail the test.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:detect_odr_violation=0:abort_on_error=0:strict_string_checks=1:check_initialization_order=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
else
  BUILD=${KILN_BUILD_DIR:-$ROOT/build}
fi

echo "== configure $BUILD (${CMAKE_ARGS[*]})"
cmake -S "$ROOT" -B "$BUILD" "${CMAKE_ARGS[@]}"
echo "== build (-j$JOBS)"
cmake --build "$BUILD" -j"$JOBS" "${TARGETS[@]}"
echo "== ctest"
ctest --test-dir "$BUILD" --output-on-failure -j"$JOBS" "${CTEST_ARGS[@]}"
