/*
 * gemm_fused.c — a matmul and its elementwise epilogue run as one
 * kernel: the generated GEMM applies the chain the fuser left after the
 * product (passes/gemm_chain.c: bias, relu, scale, residual) to each
 * tile in registers and stores the chain's result, so the product is
 * never written to memory and read back by an epilogue kernel.
 *
 * A group that is not such a chain (GELU, a cast, several operands)
 * goes to gemm_group.c, which runs the fuser's kernel itself per tile.
 *
 * realize.c calls rt_gemm_fused_run at each MATMUL's position in the
 * schedule, before running it as an extern op, on the generated GEMM
 * (llvm) or the tiled GEMM kernel (cuda-emu, and cuda where cuBLAS is
 * absent: cuda_gemm_run.c). The plan is not changed:
 * the product stays materialized and the epilogue a kernel of its own in
 * the fusion decisions (and the schedule cache); this run only sets the
 * epilogue root's buffer early, so its kernel does not run, and leaves
 * the product pending, as a fused node is left (a later request
 * recomputes it). When the product does not run on a GEMM that fuses —
 * KILN_GEMM=blas or OpenBLAS by the auto rule, cuBLAS on the cuda
 * backend, an operand on another device than the product —
 * nothing happens here and both run as planned, with
 * the same values up to the rounding of the sums (the epilogue's own
 * arithmetic is the kernels': one rounding per op, in T).
 */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "device.h"
#include "gemm_epilogue.h"
#include "rt_internal.h"

/* The inputs of x are realized, they and the epilogue's root on x's
 * device. */
static bool on_its_device(const graph_node *x, const pass_gemm_epilogue *pe) {
  if (pe->root->device != x->device) return false;
  for (int i = 0; i < x->n_inputs; i++) {
    const graph_buffer *b = x->inputs[i].node->buffer;
    if (!b || b->device != x->device) return false;
  }
  return true;
}

/* Elements a view reads once each: a broadcast dim (stride 0) reads its
 * elements again. */
static int64_t distinct(const graph_view *v) {
  int64_t n = 1;
  for (int d = 0; d < v->ndim; d++) n *= v->strides[d] ? v->sizes[d] : 1;
  return n;
}

void rt_gemm_fused_report(const graph_node *x, const char *suffix, int n_ops, int64_t read, int64_t compile_ns,
                          const rt_extern_run *run) {
  int esz = graph_dtypes[x->dtype].size;
  int nd = x->ndim;
  int64_t m = x->sizes[nd - 2], nn = x->sizes[nd - 1], k = x->inputs[0].view.sizes[nd - 1];
  char name[160];
  snprintf(name, sizeof name, "%sgemm_%s%lldx%lldx%lld_%s", run->tiled ? "cuda_" : "", x->dtype == KILN_F64 ? "f64_" : "",
           (long long)m, (long long)nn, (long long)k, suffix);
  read += graph_view_numel(&x->inputs[0].view) + graph_view_numel(&x->inputs[1].view);
  kiln_kernel_record r = {.name = name, .backend = "llvm", .n_ops = 1 + n_ops, .numel = x->numel,
                          .flops = 2 * (x->numel / (m * nn)) * m * nn * k + n_ops * x->numel,
                          .bytes_read = read * esz, .bytes_written = x->numel * esz, .run_ns = run->t1 - run->t0,
                          .compile_ns = compile_ns, .threads = 1};
  if (run->tiled) { /* the tiled GEMM kernel (cuda_gemm_run.c), as extern.c names it */
    r.backend = rt_backend_for(x)->name;
  } else { /* the generated GEMM: its micro-kernel's compile or load */
    r.compile_ns += rt_gemm_last_compile_ns();
    r.threads = rt_gemm_last_threads();
  }
  r.cache_hit = r.compile_ns == 0;
  if (r.cache_hit && !run->tiled) r.load_ns = rt_gemm_last_load_ns(); /* the micro-kernel, from the disk cache */
  if (rt_debug_level() >= 1) rt_debug_kernel(&r, x->ndim, x->sizes);
  if (rt_profiling()) rt_profile_add(&r, run->t0, NULL, 0);
}

/* The chain pe (with its operands epi) fused into x's GEMM. */
static int run_chain(graph_node *x, const rt_backend *be, const pass_gemm_epilogue *pe, const rt_gemm_epi *epi,
                     bool *done, char *err, size_t errlen) {
  graph_buffer *out = NULL;
  int st = rt_buffer_alloc(pe->root->device, pe->root->numel * graph_dtypes[pe->root->dtype].size, &out, err, errlen);
  rt_extern_run run = {0};
  if (st == KILN_OK) st = be->contract_epilogue(x, epi, out, &run, err, errlen);
  if (st != KILN_OK) {
    graph_buffer_release(out);
    return st == KILN_ERR_UNSUPPORTED ? KILN_OK : st;
  }
  if (rt_debug_level() >= 1 || rt_profiling()) {
    char suffix[64];
    int64_t read = 0;
    rt_gemm_epi_name(epi, suffix, sizeof suffix);
    for (int s = 0; s < pe->n_steps; s++)
      if (pe->step[s].arg && pe->step[s].arg->buffer) read += distinct(&pe->step[s].view);
    rt_gemm_fused_report(x, suffix, pe->n_steps, read, 0, &run);
  }
  graph_node_set_buffer(pe->root, out);
  *done = true;
  return KILN_OK;
}

int rt_gemm_fused_run(const pass_plan *p, int at, graph_node *const *roots, int n_roots, bool *done, char *err,
                      size_t errlen) {
  *done = false;
  graph_node *x = p->order[at];
  const rt_backend *be = rt_backend_for(x);
  if (!be->contract_epilogue || x->ndim < 2) return KILN_OK;
  if (x->inputs[0].view.sizes[x->ndim - 1] == 0 || x->numel == 0) return KILN_OK; /* nothing to fuse into */
  pass_gemm_epilogue pe;
  rt_gemm_epi epi;
  if (pass_gemm_epilogue_of(p, at, roots, n_roots, &pe) && on_its_device(x, &pe) && rt_gemm_epi_of(&pe, x, &epi))
    return run_chain(x, be, &pe, &epi, done, err, errlen);
  return rt_gemm_group_run(p, at, roots, n_roots, done, err, errlen);
}
