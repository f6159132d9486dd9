/*
 * cuda_emu_run.h — the cuda-emu launcher (cuda_emu_run.c): runs one launch
 * of an emulated kernel on the calling OS thread, block after block, with
 * the threads of a cooperative block as fibers that switch at barriers and
 * warp shuffles. The host build of every kernel (codegen_cuda/cuda_emu.c)
 * calls it through a table of the layout cuda_emu_api (cuda_backend.h)
 * whose address the runtime hands to cuda_emu_compile, which stores it in
 * the build's `kiln_emu_api` after dlopen: the generated code never names
 * it. Internal to runtime/ (and white-box tests).
 */
#ifndef KILN_RT_CUDA_EMU_RUN_H
#define KILN_RT_CUDA_EMU_RUN_H

#include <stdint.h>

#include "cuda_backend.h"

/** The launcher: launch, __syncthreads and warp shuffles (cuda_emu_api's
 *  fields say what each does). */
extern const cuda_emu_api rt_cuda_emu_launcher;

/** Launches of cooperative kernels (BLOCK_PER_INDEX, ONE_BLOCK) run so far
 *  by this process (for tests). */
int64_t rt_cuda_emu_cooperative_launches(void);

#endif /* KILN_RT_CUDA_EMU_RUN_H */
