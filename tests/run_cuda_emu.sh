#!/usr/bin/env bash
# run_cuda_emu.sh — C tests with KILN_BACKEND=cuda-emu (a chosen set that
# covers every kind of kernel; KILN_EMU_FULL=1: the whole suite): every
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
# Which C tests: under cuda-emu each kernel costs a NVRTC compile for two
# targets, a ptxas run and a host C++ compile (about half a second), so
# the whole suite takes about 25 minutes of CI's 2 cores. By default it
# runs a chosen set that covers every kind of kernel the CUDA backend
# prints once: cuda_emu, cuda_device and cuda_runtime (the backend's own
# tests: launch, memory, streams, cooperative kernels), ops (every op of
# the op table, forward), views, index, scatter_kernel, sort, masks, math,
# algebra, reads, inplace, creation_values (views, gathers and scatters,
# in-place writes through shared storage, reductions and scans), linalg
# and schedule (contractions and multi-kernel schedules) and pool. The
# programs built over those ops (grad_*, nn*, conv*, fusion, tiles, losses,
# optim, attention: 40 to 365 s each here) run with KILN_EMU_FULL=1, which
# runs every C test but these: numpy (the NumPy suite, run below); the
# scripted checks (install, profiling output that names the llvm backend,
# main job, bench); *_unfused (the scheduler, not the backend);
# alloc_faults and limits (the allocator's and the runtime's limits: hours
# under cuda-emu); cpu_target, *_avx2, *_gemm_jit and gemm_epilogue (the
# llvm backend's CPU pinning and its host GEMM); cuda_codegen (every
# kernel it makes goes through NVRTC and ptxas in the plain run); kir_llvm,
# disk_cache and stream (the LLVM backend's code, on-disk cache and
# streaming stores); the layering and README checks, gemm_tune_smoke; the
# ONNX and Python package tests and char_transformer (programs over the
# same ops, each hundreds of kernels).
# The tests are independent processes (NVRTC and host-compiler bound): one
# per core.
jobs=${KILN_EMU_JOBS:-$(nproc)}
if [[ ${KILN_EMU_FULL:-0} == 1 ]]; then
  select=(-E 'numpy|cuda_emu_suite|main_job|bench|install|profiling|onnx|python_package|char_transformer|^cuda_codegen$|^kir_llvm$|^disk_cache$|^stream$|^layering|^readme_packages$|^gemm_tune_smoke$|_unfused$|_avx2$|_gemm_jit$|^cpu_target$|^gemm_epilogue$|^alloc_faults$|^limits$')
else
  select=(-R '^(cuda_emu|cuda_device|cuda_runtime|ops|views|index|scatter_kernel|sort|masks|math|algebra|reads|inplace|creation_values|linalg|schedule|pool)$')
fi
KILN_BACKEND=cuda-emu ctest --test-dir "$build" --output-on-failure -V -j"$jobs" "${select[@]}" "$@" >"$log" 2>&1
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
