/*
 * cuda_vec.h — the vector (float4 / int4) form of flat elementwise
 * kernels (cuda_vec.c): which loads and stores of a grid-stride kernel
 * may move 4 consecutive elements at once, and the lines the printer
 * (cuda_print.c) adds around its per-element code for them. Internal to
 * codegen_cuda/.
 */
#ifndef KILN_CUDA_VEC_H
#define KILN_CUDA_VEC_H

#include <stdbool.h>

#include "kir.h"

typedef struct cuda_vec {
  bool on;    /* the kernel takes the vector form */
  int range;  /* uop index of the parallel RANGE, -1 if none */
  int end;    /* uop index of its END */
  bool *wide; /* per uop: a LOAD / STORE moved as a float4 / int4 */
} cuda_vec;

/* Plans kernel k (which passed kir_verify; `split`: it is splittable and
 * not cooperative). KILN_OK with v->on telling whether the vector form
 * applies, or KILN_ERR_OOM. Free with cuda_vec_free (also after an error). */
int cuda_vec_plan(const kir_kernel *k, bool split, cuda_vec *v);
void cuda_vec_free(cuda_vec *v);

/* Printed after the parallel range's `v<r>_lo, v<r>_hi` line, at
 * indentation `depth`: the alignment check, `v<r>_vn` (how many indices
 * from v<r>_lo the vector loop covers, a multiple of 4, 0 when unaligned),
 * the loop over groups of 4 indices, its wide loads, and the opening of
 * the loop over its 4 lanes, which defines v<r>. The printer then prints
 * the range's body (the per-element code, with cuda_vec_put_load /
 * cuda_vec_put_store for the wide uops) at depth + 2, and closes with
 * cuda_vec_close. */
void cuda_vec_open(const kir_kernel *k, const cuda_vec *v, kir_strbuf *b, int depth);
/* The right-hand side of wide LOAD i in a lane: its lane of the group. */
void cuda_vec_put_load(const kir_kernel *k, kir_strbuf *b, int i);
/* Wide STORE i in a lane, a whole statement: the value into its lane. */
void cuda_vec_put_store(const kir_kernel *k, kir_strbuf *b, int i);
/* Closes the lane loop, stores each wide STORE's group, closes the group
 * loop. */
void cuda_vec_close(const kir_kernel *k, const cuda_vec *v, kir_strbuf *b, int depth);

#endif /* KILN_CUDA_VEC_H */
