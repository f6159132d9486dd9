#!/usr/bin/env bash
# run_cuda_emu.sh — the whole C test suite with KILN_BACKEND=cuda-emu: every
# kernel is printed as CUDA C, compiled by NVRTC for sm_80 and compute_90
# (+ ptxas sm_90), zero failures allowed, and run on the CPU from the same
# source built by the host C++ compiler (docs/cuda.md, "cuda-emu").
# Then the NumPy suite (numpy_diff) under cuda-emu at KILN_TEST_SCALE=0.1.
# Usage: tests/run_cuda_emu.sh [build dir] [extra ctest args for the C suite...]
# Without a CUDA toolkit (no ptxas) it prints "cuda-emu skipped: no CUDA
# toolkit" and exits 77 (ctest: skipped). Run by ctest as cuda_emu_suite.
# Each test prints its cuda-emu summary to stderr; the totals are printed
# at the end.
set -uo pipefail
build=${1:-build}
shift || true
ptxas=/usr/local/cuda/bin/ptxas
if [[ ! -x $ptxas ]] && ! command -v ptxas >/dev/null; then
  echo "cuda-emu skipped: no CUDA toolkit"
  exit 77
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
# numpy: the NumPy suite (run separately); the scripted checks (install,
# profiling output that names the llvm backend, main job, bench) test other
# things; *_unfused: the same programs again with fusion off (the
# scheduler, not the backend; the gradient checks also skip their forced
# and fusion-switched runs here, tests/grad_check.h); alloc_faults and
# limits: the allocation-failure walk empties the kernel caches before
# each of ~1,700 runs, and the limits test sums 2^32 elements — they test
# the allocator and the runtime's limits, not the backend, and under
# cuda-emu (a NVRTC + host compile per kernel, emulated threads) they
# would take hours. cpu_target and the *_avx2 and *_gemm_jit runs pin the
# llvm backend's CPU or its host GEMM, which cuda-emu does not use (the
# same tests already run once here with the defaults); gemm_epilogue tests
# the epilogues the llvm backend fuses into its GEMM's micro-kernel
# (cuda-emu runs them as kernels of their own, as test_nn and test_linalg
# check here). Also left out, as their subject is not the CUDA backend or
# they check it already: cuda_codegen (every kernel it makes goes through
# NVRTC and ptxas in the plain run; under cuda-emu each would be checked
# and host-compiled again), kir_llvm, disk_cache and stream (the LLVM
# backend's code, on-disk cache and streaming stores), the layering and
# README checks, gemm_tune_smoke (the host GEMM's tuner), the ONNX and
# Python package tests and char_transformer (programs over the same ops
# the C tests cover here, each hundreds of kernels).
# The tests are independent processes (NVRTC and host-compiler bound): one
# per core.
jobs=${KILN_EMU_JOBS:-$(nproc)}
KILN_BACKEND=cuda-emu ctest --test-dir "$build" --output-on-failure -V -j"$jobs" \
  -E 'numpy|cuda_emu_suite|main_job|bench|install|profiling|onnx|python_package|char_transformer|^cuda_codegen$|^kir_llvm$|^disk_cache$|^stream$|^layering|^readme_packages$|^gemm_tune_smoke$|_unfused$|_avx2$|_gemm_jit$|^cpu_target$|^gemm_epilogue$|^alloc_faults$|^limits$' "$@" >"$log" 2>&1
status=$?
grep -E '^[0-9]+% tests passed|^Total Test time|^The following tests FAILED|^[[:space:]]+[0-9]+ - .*\(' "$log"
# Then the NumPy suite under cuda-emu at a small scale (KILN_EMU_NUMPY_SCALE,
# default 0.1; 0 skips it), when the build has it.
np_scale=${KILN_EMU_NUMPY_SCALE:-0.1}
if [[ $np_scale != 0 ]] && ctest --test-dir "$build" -N -R '^numpy_diff$' | grep -q 'numpy_diff'; then
  echo "cuda-emu: NumPy suite at KILN_TEST_SCALE=$np_scale"
  KILN_BACKEND=cuda-emu KILN_TEST_SCALE=$np_scale ctest --test-dir "$build" --output-on-failure -V -R '^numpy_diff$' \
    >>"$log" 2>&1 || status=1
  grep -E '^[0-9]+: =+ .*(passed|failed).* in ' "$log" | tail -1
fi
awk '/kiln: cuda-emu: / { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/) { n[$(i+1)] += $i } }
     END { printf "cuda-emu totals: %d kernels, %d toolchain checks (NVRTC sm_80, NVRTC compute_90 + ptxas sm_90), %d failed, %d host-compiled, %d F16/BF16 on LLVM, %d cooperative\n", n["kernels,"], n["toolchain"], n["failed;"], n["compiled"], n["F16/BF16"], n["cooperative"] }' "$log"
if grep -q 'cuda-emu: .* [1-9][0-9]* failed' "$log"; then
  echo "cuda-emu: toolchain check failures:"; grep -E 'failed' "$log" | grep -i 'nvrtc\|ptxas' | head -20; status=1
fi
# (test_threads prints each thread's first error as "thread N: what: message")
if ((status)); then grep -E '^\s*[0-9]+: \[  (ERROR|FAILED) |^\s*[0-9]+: \[   LINE|^\s*[0-9]+: thread [0-9]+: ' "$log" | head -40; fi
echo "cuda-emu wall time $(( $(date +%s) - start )) s"
exit $status
