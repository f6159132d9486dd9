/*
 * gemm_group.c — a general elementwise group after a matmul (GELU, SiLU,
 * sigmoid, tanh, exp, a cast to another float dtype, binary ops with
 * operands of any view: docs/internals.md, "The generated GEMM") run as
 * the GEMM's tile epilogue.
 *
 * The epilogue kernel the fuser made (passes/gemm_chain.c,
 * pass_gemm_group_of, says it qualifies) is lowered again by the kernel
 * lowering, over an MC×NR block of the product (pass_lower_gemm_tile;
 * MC the driver's row blocking), and compiled like every kernel (the
 * kernel cache, the disk cache). For the last KC block the GEMM driver
 * stores each column panel's tiles into a block in L1 instead of C, and
 * calls the kernel on it (rt_gemm_epi's after hook) with the block's
 * corner in its argument array: the kernel reads the product there and
 * writes the group's result, so the product is never stored to memory
 * nor read back (one call per MR × NR tile instead of per panel cost 5 %
 * more on GELU over 2048² × 64, one thread). The product's buffer holds
 * only the earlier KC blocks' sums of a split K, and is released when
 * the run ends. The values are the unfused kernels': the same lowering,
 * one rounding per node.
 *
 * What does not qualify, or does not run on the generated GEMM
 * (KILN_GEMM=blas, OpenBLAS by the auto rule, a device operand), runs as
 * planned: the product, then its epilogue kernel.
 */
#include <string.h>

#include "backend.h"
#include "device.h"
#include "gemm_epilogue.h"
#include "rt_internal.h"

/* What each tile's call needs: the kernels (fn[0] over NR columns,
 * fn[1] over the N mod NR of the last tile column), their buffers
 * (bufs[1], the argument array, is set per call), their int64 arguments
 * with the tile's corner at coord, coord + 1 (the two kernels bind
 * alike: the same group, walked the same way). Shared read-only by the
 * pool's threads. */
typedef struct group_call {
  llvm_kernel_fn fn[2];
  int64_t mr, nr, esz; /* the kernels' rows (the blocking's MC), fn[0]'s columns (the block's row stride) */
  int x_slot[PASS_MAX_INPUTS], n_x; /* the bufs the product binds to (its block, per call) */
  void *bufs[3 + PASS_MAX_OUTPUTS + PASS_MAX_INPUTS];
  int n_bufs, n_args, coord, n_ops;
  int64_t args[PASS_MAX_ARGS];
  double fargs[PASS_MAX_ARGS];
} group_call;

/* rt_gemm_after_fn: the group over the rows × cols block at (r0, c0), by
 * the kernel for its width, `mr` rows a call. */
static void after_block(void *ctx, int64_t r0, int64_t c0, int64_t rows, int64_t cols, const void *block) {
  const group_call *g = ctx;
  int64_t args[PASS_MAX_ARGS];
  void *bufs[3 + PASS_MAX_OUTPUTS + PASS_MAX_INPUTS];
  memcpy(args, g->args, sizeof args[0] * (size_t)g->n_args);
  memcpy(bufs, g->bufs, sizeof bufs[0] * (size_t)g->n_bufs);
  args[g->coord + 1] = c0;
  bufs[1] = args;
  for (int64_t done = 0; done < rows; done += g->mr) {
    args[g->coord] = r0 + done;
    for (int s = 0; s < g->n_x; s++) bufs[g->x_slot[s]] = (char *)block + done * g->nr * g->esz; /* its rows i·NR */
    g->fn[cols < g->nr](bufs, 0, rows - done < g->mr ? rows - done : g->mr);
  }
}

/* The kernel's buffers: root's out, the argument arrays, each input's
 * data (the product's: its block, set per call). False when an input is
 * not a realized host buffer. */
static bool bind(group_call *g, const pass_binding *b, const graph_node *x, void *out) {
  g->bufs[0] = out;
  g->bufs[1] = NULL;
  g->bufs[2] = g->fargs;
  g->n_bufs = 3 + b->n_inputs;
  g->n_x = 0;
  for (int i = 0; i < b->n_inputs; i++) {
    const graph_node *in = b->inputs[i];
    if (in != x && (!in->buffer || in->buffer->device != KILN_CPU)) return false;
    if (in == x) g->x_slot[g->n_x++] = 3 + i;
    g->bufs[3 + i] = in == x ? NULL : in->buffer->data;
  }
  memcpy(g->args, b->args, sizeof g->args[0] * (size_t)b->n_args);
  memcpy(g->fargs, b->fargs, sizeof g->fargs[0] * (size_t)b->n_fargs);
  g->n_args = b->n_args;
  g->n_ops = b->n_ops;
  return true;
}

/* The ops of kernel name `name` (E_mul_erf_add_64x96: "mul_erf_add"). */
static void ops_of(const char *name, char *buf, size_t len) {
  const char *start = strchr(name, '_'), *end = strrchr(name, '_');
  size_t n = start && end > start ? (size_t)(end - start - 1) : 0;
  if (n >= len) n = len - 1;
  memcpy(buf, start ? start + 1 : name, n);
  buf[n] = '\0';
}

/* The tile kernel for root over `cols` columns, compiled (or from the
 * kernel cache) into *fn; with bind, *g bound to out and the
 * ops' names in ops. KILN_ERR_UNSUPPORTED when it does not lower or
 * bind (the run keeps its kernels). */
static int tile_kernel(const pass_plan *p, graph_node *x, const graph_node *root, int64_t mr, int64_t cols,
                       bool bind_it, group_call *g, llvm_kernel_fn *fn, void *out, char *ops, size_t ops_len,
                       int64_t *compile_ns, char *err, size_t errlen) {
  kir_kernel k;
  pass_binding b;
  int coord = -1;
  int st = pass_lower_gemm_tile(p, root, x, mr, cols, g->nr, &k, &b, &coord, err, errlen);
  if (st != KILN_OK) return st == KILN_ERR_OOM ? st : KILN_ERR_UNSUPPORTED;
  rt_code code = {0};
  bool hit = false;
  int64_t t0 = rt_now_ns();
  if (b.n_outputs > 0 || (bind_it && !bind(g, &b, x, out)) || (!bind_it && coord != g->coord))
    st = KILN_ERR_UNSUPPORTED;
  else st = rt_kernel_get(rt_backend_for(x), &k, &code, &hit, NULL, err, errlen);
  int64_t t1 = rt_now_ns();
  if (st == KILN_OK && !hit) {
    *compile_ns += t1 - t0;
    if (rt_profiling()) rt_profile_compile(k.name, t0, t1);
  }
  if (bind_it) g->coord = coord, ops_of(k.name, ops, ops_len);
  kir_free(&k);
  *fn = code.fn;
  return st;
}

/* The tile kernels for root (the tail one when N is not a multiple of
 * NR), *g bound. */
static int prepare(const pass_plan *p, graph_node *x, const graph_node *root, group_call *g, void *out, char *ops,
                   size_t ops_len, int64_t *compile_ns, char *err, size_t errlen) {
  llvm_gemm_spec spec;
  if (llvm_gemm_choose_rows(x->dtype, x->sizes[0], &spec, err, errlen) != KILN_OK) return KILN_ERR_UNSUPPORTED;
  int64_t n = x->sizes[1], tail = n % spec.nr;
  g->mr = rt_gemm_blocking_for(spec.mr, spec.nr, graph_dtypes[x->dtype].size).mc; /* the driver's blocks */
  g->nr = spec.nr;
  g->esz = graph_dtypes[x->dtype].size;
  int st = tile_kernel(p, x, root, g->mr, g->nr, true, g, &g->fn[0], out, ops, ops_len, compile_ns, err, errlen);
  g->fn[1] = g->fn[0]; /* (never called without a tail) */
  if (st == KILN_OK && tail)
    st = tile_kernel(p, x, root, g->mr, tail, false, g, &g->fn[1], out, ops, ops_len, compile_ns, err, errlen);
  return st;
}

int rt_gemm_group_run(const pass_plan *p, int at, graph_node *const *roots, int n_roots, bool *done, char *err,
                      size_t errlen) {
  *done = false;
  graph_node *x = p->order[at], *root = NULL;
  const rt_backend *be = rt_backend_for(x);
  /* (the selection first: a product on OpenBLAS lowers and compiles nothing here) */
  if (!be->epilogue_hooks || !rt_gemm_selected(x) || !pass_gemm_group_of(p, at, roots, n_roots, &root))
    return KILN_OK;
  if (x->device != KILN_CPU || root->device != KILN_CPU) return KILN_OK;
  for (int i = 0; i < x->n_inputs; i++)
    if (!x->inputs[i].node->buffer || x->inputs[i].node->buffer->device != KILN_CPU) return KILN_OK;
  graph_buffer *out = NULL, *prod = NULL;
  int st = rt_buffer_alloc(KILN_CPU, root->numel * graph_dtypes[root->dtype].size, &out, err, errlen);
  if (st == KILN_OK) st = rt_buffer_alloc(KILN_CPU, x->numel * graph_dtypes[x->dtype].size, &prod, err, errlen);
  group_call g;
  char ops[96] = "";
  int64_t compile_ns = 0;
  if (st == KILN_OK) st = prepare(p, x, root, &g, out->data, ops, sizeof ops, &compile_ns, err, errlen);
  rt_gemm_epi epi = {.esz = graph_dtypes[x->dtype].size, .after = after_block, .after_ctx = &g};
  rt_extern_run run = {0};
  if (st == KILN_OK) st = be->contract_epilogue(x, &epi, prod, &run, err, errlen);
  graph_buffer_release(prod);
  if (st != KILN_OK) {
    graph_buffer_release(out);
    return st == KILN_ERR_UNSUPPORTED ? KILN_OK : st;
  }
  if (rt_debug_level() >= 1 || rt_profiling()) rt_gemm_fused_report(x, ops, g.n_ops, 0, compile_ns, &run);
  graph_node_set_buffer(root, out);
  *done = true;
  return KILN_OK;
}
