/*
 * cuda_coop.h — the cooperative (block-per-output) form of reduction
 * kernels: which loops of a kernel run on all threads of a block in step,
 * which are split over the block's threads, and which are reductions whose
 * per-thread partials are combined across the block (cuda_coop.c). The
 * printer (cuda_print.c) prints from this plan and the launch rule
 * (cuda_backend.h) sizes the block from it, so both agree. Internal to
 * codegen_cuda/.
 */
#ifndef KILN_CUDA_COOP_H
#define KILN_CUDA_COOP_H

#include <stdbool.h>
#include <stdint.h>

#include "kir.h"

/* Role of a RANGE uop (its END takes the same role). */
typedef enum cuda_loop_role {
  CUDA_LOOP_SEQ = 0,  /* a plain loop: every thread runs every iteration
                         (inside a per-thread loop, or not cooperative) */
  CUDA_LOOP_UNIFORM,  /* all threads of the block run it in step: it
                         contains cooperative loops */
  CUDA_LOOP_STRIDED,  /* iterations independent: split over the threads
                         (threadIdx.x, step blockDim.x) */
  CUDA_LOOP_REDUCE,   /* updates accumulators defined before it with a
                         combine op: split over the threads, then each
                         accumulator is combined across the block */
  CUDA_LOOP_FLAT,     /* perfectly nested in a REDUCE loop: folded into its
                         flattened index */
} cuda_loop_role;

/* The shortest reduction (elements per output) worth a cooperative block. */
enum { CUDA_COOP_MIN_EXTENT = 16 };

/* An arg reduction in a REDUCE loop: its value and index accumulators. */
typedef struct cuda_coop_arg {
  int val, idx; /* -1: not an arg reduction */
  bool max;     /* argmax (else argmin) */
} cuda_coop_arg;

typedef struct cuda_coop {
  bool on;          /* the kernel takes the cooperative form */
  int parallel;     /* uop index of the parallel RANGE, -1 if none */
  unsigned block;   /* threads per block chosen from reduce_extent */
  int64_t reduce_extent; /* largest trip count of a REDUCE loop (flattened) */
  uint8_t *role;    /* per uop: a cuda_loop_role for RANGE uops */
  int *end;         /* per uop: for a RANGE, the index of its END */
  int64_t *div;     /* per uop: REDUCE and FLAT: the product of the
                       extents of the loops flattened inside it (its
                       index is flat / div % extent) */
  int *root;        /* per uop: FLAT: its REDUCE loop */
  cuda_coop_arg *arg; /* per uop: REDUCE: an arg reduction (val >= 0) */
  bool has_arg;     /* some REDUCE loop is an arg reduction */
} cuda_coop;

/* Plans kernel k (which passed kir_verify). KILN_OK with p->on telling
 * whether the cooperative form applies, or KILN_ERR_OOM. Free with
 * cuda_coop_free (also after an error). */
int cuda_coop_plan(const kir_kernel *k, cuda_coop *p);
void cuda_coop_free(cuda_coop *p);

/* True when combining x with itself gives x (MAX, MIN, AND, OR): every
 * thread may start from the accumulator's initial value. Otherwise (ADD,
 * MUL, XOR) only thread 0 does and the others start from the identity. */
bool cuda_coop_idempotent(kir_op op);

#endif /* KILN_CUDA_COOP_H */
