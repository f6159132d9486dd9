/*
 * cuda_emu_run.h — the cuda-emu launcher (cuda_emu_run.c): runs one launch
 * of an emulated kernel on the calling OS thread, block after block, with
 * the threads of a cooperative block as fibers that switch at barriers and
 * warp shuffles. The host build of every kernel calls it through the
 * table below, whose address cuda_emu.c stores in the kernel's
 * `kiln_emu_api` after dlopen (the emulation header declares the same
 * layout). Internal to codegen_cuda/.
 */
#ifndef KILN_CUDA_EMU_RUN_H
#define KILN_CUDA_EMU_RUN_H

#include <stdint.h>

/* One CUDA thread of the kernel: sets blockIdx.x = b, threadIdx.x = t,
 * gridDim.x = grid, blockDim.x = block and runs the kernel body with the
 * launch's arguments (ctx). */
typedef void (*cuda_emu_thread_fn)(void *ctx, unsigned b, unsigned t, unsigned grid, unsigned block);

typedef struct cuda_emu_api {
  /* Runs the launch of rule (kind, extent, block) over [start, end):
   * cuda_launch_rule_shape's grid and block; GRID_STRIDE(_VEC) and ONE_THREAD
   * kernels thread after thread as plain calls, BLOCK_PER_INDEX and
   * ONE_BLOCK kernels block after block with fibers. */
  void (*launch)(int kind, long long extent, unsigned block, long long start, long long end, cuda_emu_thread_fn fn,
                 void *ctx);
  /* __syncthreads(): the calling fiber waits until every thread of its
   * block arrived. */
  void (*sync)(void);
  /* A warp shuffle: the calling lane offers `bits` and receives those of
   * lane src_lane (0..31) of its warp, once every lane of the warp
   * arrived; mask must name every lane of the warp. */
  unsigned long long (*shfl)(unsigned mask, unsigned long long bits, unsigned src_lane);
} cuda_emu_api;

extern const cuda_emu_api cuda_emu_launcher;

/* Launches of cooperative kernels (BLOCK_PER_INDEX, ONE_BLOCK) run so far
 * by this process (for tests). */
int64_t cuda_emu_cooperative_launches(void);

#endif /* KILN_CUDA_EMU_RUN_H */
