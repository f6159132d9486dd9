/*
 * cuda_flat_kernel.h — a hand-built flat elementwise kernel (the shape the
 * CUDA printer vectorises, codegen_cuda/cuda_vec.c), shared by
 * test_cuda_codegen.c (its printed form) and test_cuda_emu.c (its values).
 *
 * Params: p0 out F32 [n] (written), p1 args I64 [1] (args[0] = off),
 * p2 a F32 [n + off + 4], p3 q I32 [n + off] (written). For i < n:
 *   v = max(a[i + off] * a[i] + a[4 + i], 0) * a[0]
 *   out[i] = v;  q[i + off] = (int32) trunc(v)
 * off is loaded from the argument buffer at entry (as view offsets are);
 * 4 is an index constant; a[0] is a broadcast scalar, read per element.
 */
#ifndef KILN_TEST_CUDA_FLAT_KERNEL_H
#define KILN_TEST_CUDA_FLAT_KERNEL_H

#include "kir.h"

static inline void build_flat(kir_kernel *k, int64_t n) {
  kir_init(k, "flat");
  int out = kir_param(k, KIR_F32, true);
  int args = kir_param(k, KIR_I64, false);
  int a = kir_param(k, KIR_F32, false);
  int q = kir_param(k, KIR_I32, true);
  int off = kir_cast(k, KIR_INDEX, kir_load(k, args, kir_const_i(k, KIR_INDEX, 0)));
  int i = kir_range(k, n, true);
  int at_off = kir_alu(k, KIR_ADD, KIR_INDEX, i, off, -1);
  int x = kir_load(k, a, at_off);
  int y = kir_load(k, a, i);
  int z = kir_load(k, a, kir_alu(k, KIR_ADD, KIR_INDEX, kir_const_i(k, KIR_INDEX, 4), i, -1));
  int s = kir_load(k, a, kir_const_i(k, KIR_INDEX, 0));
  int v = kir_alu(k, KIR_ADD, KIR_F32, kir_alu(k, KIR_MUL, KIR_F32, x, y, -1), z, -1);
  v = kir_alu(k, KIR_MAX, KIR_F32, v, kir_const_f(k, KIR_F32, 0), -1);
  v = kir_alu(k, KIR_MUL, KIR_F32, v, s, -1);
  kir_store(k, out, i, v);
  kir_store(k, q, kir_alu(k, KIR_ADD, KIR_INDEX, i, off, -1), kir_cast(k, KIR_I32, v));
  kir_end(k, i);
}

#endif /* KILN_TEST_CUDA_FLAT_KERNEL_H */
