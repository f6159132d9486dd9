/*
 * linalg.c — matrix products with NumPy's matmul semantics: 1-D operands
 * gain a dim for the product and lose it after, leading (batch) dims
 * broadcast.
 *
 * F32 and F64 products are one MATMUL node, run on the CPU by Kiln's
 * generated GEMM (runtime/gemm.c) or OpenBLAS (runtime/blas.c), as
 * KILN_GEMM or the auto rule picks (runtime/matmul_host.c): operands are
 * passed as views, so a transposed view is a transpose flag or a
 * strided pack, not a copy. F16 and BF16 products are the same MATMUL
 * in F32 (their operands converted to F32 copies, the result converted
 * back: F32 accumulation, as Torch's CPU kernels). Integer products are a
 * generated kernel: a broadcast multiply fused into a sum over K (in
 * I64, then converted back as Torch's result dtype).
 * Elementwise readers of the product (bias, activation, scale) fuse into
 * one epilogue kernel, or into the generated GEMM's stores when it runs
 * the product (runtime/gemm_fused.c). F32/F64 products of KILN_CUDA
 * tensors are the same MATMUL node, run by cuBLAS when it loads on the
 * real device (runtime/blas.c; an operand BLAS cannot take as it is is
 * copied contiguous first), else by the tiled GEMM kernel
 * (runtime/cuda_gemm_run.c; also under cuda-emu), F16/BF16 ones in F32
 * likewise; integer ones take the generated kernel path on the device. Operands on different devices
 * are KILN_ERR_DEVICE.
 */
#include "ops.h"
#include "runtime.h"

/* Operands as views with the 1-D cases made 2-D. */
typedef struct mm_shape {
  graph_view a, b;     /* [..., M, K] and [..., K, N] */
  bool drop_m, drop_n; /* a or b was 1-D: remove that dim from the result */
  int ndim;            /* result dims before dropping */
  int64_t sizes[KILN_MAX_DIMS];
} mm_shape;

static graph_view as_matrix(const graph_view *v, bool row) {
  graph_view m = *v;
  if (v->ndim != 1) return m;
  m.ndim = 2;
  int at = row ? 0 : 1; /* new size-1 dim: rows of a, or columns of b */
  m.sizes[1 - at] = v->sizes[0];
  m.strides[1 - at] = v->strides[0];
  m.sizes[at] = 1;
  m.strides[at] = 0;
  return m;
}

static bool shape_error(const kiln_tensor *a, const kiln_tensor *b, const char *fn, const char *why) {
  char sa[256], sb[256];
  api_error(KILN_ERR_SHAPE, fn, "sizes %s and %s: %s", api_fmt_sizes(sa, sizeof sa, a->view.ndim, a->view.sizes),
            api_fmt_sizes(sb, sizeof sb, b->view.ndim, b->view.sizes), why);
  return false;
}

/* Batch dims of a and b broadcast; a and b become views of
 * [batch..., M, K] and [batch..., K, N]. */
static bool broadcast_batch(mm_shape *s, const kiln_tensor *a, const kiln_tensor *b, const char *fn) {
  int na = s->a.ndim - 2, nb = s->b.ndim - 2, n = na > nb ? na : nb;
  int64_t batch[KILN_MAX_DIMS];
  for (int d = 0; d < n; d++) {
    int64_t x = d - (n - na) >= 0 ? s->a.sizes[d - (n - na)] : 1;
    int64_t y = d - (n - nb) >= 0 ? s->b.sizes[d - (n - nb)] : 1;
    if (x != y && x != 1 && y != 1) return shape_error(a, b, fn, "batch dims cannot be broadcast");
    batch[d] = x == 1 ? y : x;
  }
  int64_t M = s->a.sizes[na], K = s->a.sizes[na + 1], N = s->b.sizes[nb + 1];
  int64_t full[KILN_MAX_DIMS];
  for (int d = 0; d < n; d++) full[d] = batch[d];
  full[n] = M, full[n + 1] = K;
  graph_view_broadcast(&s->a, n + 2, full, &s->a); /* cannot fail: sizes checked */
  full[n] = K, full[n + 1] = N;
  graph_view_broadcast(&s->b, n + 2, full, &s->b);
  s->ndim = n + 2;
  for (int d = 0; d < n; d++) s->sizes[d] = batch[d];
  s->sizes[n] = M, s->sizes[n + 1] = N;
  return api_check_sizes(s->ndim, s->sizes, fn); /* [n, 1] @ [1, n] of expanded operands */
}

static bool plan(mm_shape *s, const kiln_tensor *a, const kiln_tensor *b, const char *fn) {
  if (a->view.ndim == 0 || b->view.ndim == 0) return shape_error(a, b, fn, "0-d operands have no matrix product");
  s->a = as_matrix(&a->view, true);
  s->b = as_matrix(&b->view, false);
  s->drop_m = a->view.ndim == 1;
  s->drop_n = b->view.ndim == 1;
  int64_t ka = s->a.sizes[s->a.ndim - 1], kb = s->b.sizes[s->b.ndim - 2];
  if (ka != kb) {
    char why[96];
    snprintf(why, sizeof why, "inner dims differ (%lld and %lld)", (long long)ka, (long long)kb);
    return shape_error(a, b, fn, why);
  }
  if (s->a.ndim > KILN_MAX_DIMS - 1 || s->b.ndim > KILN_MAX_DIMS - 1)
    return shape_error(a, b, fn, "too many dims for a generated product");
  return broadcast_batch(s, a, b, fn);
}

/* kiln_tensor over t's storage with view v (a temporary, untracked). */
static kiln_tensor *with_view(kiln_tensor *t, const graph_view *v, const char *fn) { return api_view(t, v, fn); }

/* An operand needs its own contiguous copy: another dtype, or (on the
 * device, where cuBLAS packs nothing) a layout BLAS cannot take. */
static bool needs_copy(const kiln_tensor *t, const graph_view *v, kiln_dtype dtype) {
  return t->storage->dtype != dtype || (t->storage->device == KILN_CUDA && rt_blas_view_needs_copy(v));
}

/* BLAS path (OpenBLAS, or cuBLAS for KILN_CUDA tensors): operands
 * converted to dtype (or copied) when needed, one MATMUL node. */
static kiln_tensor *blas_product(kiln_tensor *a, kiln_tensor *b, const mm_shape *s, kiln_dtype dtype, const char *fn) {
  kiln_tensor *ops[2] = {a, b}, *cast[2] = {NULL, NULL};
  const graph_view *views[2] = {&s->a, &s->b};
  graph_view cv[2];
  for (int i = 0; i < 2; i++) {
    cv[i] = *views[i];
    if (!needs_copy(ops[i], views[i], dtype)) continue;
    /* convert the operand's own view (before broadcasting), then re-broadcast */
    cast[i] = ops_copy_contiguous(ops[i], dtype, fn);
    if (!cast[i]) break;
    graph_view m = as_matrix(&cast[i]->view, i == 0);
    graph_view_broadcast(&m, s->ndim, views[i]->sizes, &cv[i]);
    ops[i] = cast[i];
  }
  kiln_tensor *out = NULL;
  if ((ops[0]->storage->dtype == dtype) && (ops[1]->storage->dtype == dtype)) {
    graph_node *n = graph_node_new(GRAPH_OP_MATMUL, dtype, s->ndim, s->sizes);
    if (n) n->cdtype = dtype;
    if (n && api_add_input(n, ops[0], &cv[0]) && api_add_input(n, ops[1], &cv[1])) out = api_tensor_from_node(n, fn);
    else if (n) graph_node_release(n);
    else api_error(KILN_ERR_OOM, fn, "out of memory");
  }
  kiln_release(cast[0]);
  kiln_release(cast[1]);
  return out;
}

/* Generated-kernel path: sum over K of a[..., M, 1, K] * b[..., 1, N, K]
 * in the accumulation dtype, converted to dtype. */
static kiln_tensor *kernel_product(kiln_tensor *a, kiln_tensor *b, const mm_shape *s, kiln_dtype dtype,
                                   const char *fn) {
  int nd = s->ndim;
  graph_view va = s->a, vb = s->b; /* -> [..., M, N, K] */
  va.ndim = vb.ndim = nd + 1;
  va.sizes[nd] = s->a.sizes[nd - 1], va.strides[nd] = s->a.strides[nd - 1];
  va.sizes[nd - 1] = s->sizes[nd - 1], va.strides[nd - 1] = 0;
  vb.sizes[nd] = s->b.sizes[nd - 2], vb.strides[nd] = s->b.strides[nd - 2];
  vb.sizes[nd - 2] = s->sizes[nd - 2], vb.strides[nd - 2] = 0;
  vb.sizes[nd - 1] = s->b.sizes[nd - 1], vb.strides[nd - 1] = s->b.strides[nd - 1];
  kiln_dtype acc = dtype == KILN_F64 ? KILN_F64 : graph_is_float(dtype) ? KILN_F32 : dtype;
  kiln_tensor *ta = with_view(a, &va, fn), *tb = with_view(b, &vb, fn);
  kiln_tensor *ca = kiln_to_dtype(ta, acc), *cb = kiln_to_dtype(tb, acc);
  kiln_tensor *prod = kiln_mul(ca, cb);
  int last = nd;
  kiln_tensor *sum = kiln_sum(prod, 1, &last, false);
  kiln_tensor *out = sum ? kiln_to_dtype(sum, dtype) : NULL;
  kiln_release(ta), kiln_release(tb), kiln_release(ca), kiln_release(cb);
  kiln_release(prod), kiln_release(sum);
  return out;
}

/* F16/BF16: the operands converted to F32 (copies the GEMM reads), one
 * F32 MATMUL (F32 accumulation, as the generated kernel path sums), its
 * result converted back to dtype (a cast the product's epilogue takes). */
static kiln_tensor *half_product(kiln_tensor *a, kiln_tensor *b, const mm_shape *s, kiln_dtype dtype,
                                 const char *fn) {
  kiln_tensor *p = blas_product(a, b, s, KILN_F32, fn);
  kiln_tensor *out = p ? kiln_to_dtype(p, dtype) : NULL;
  kiln_release(p);
  return out;
}

/* The result without the dims added for 1-D operands. */
static kiln_tensor *drop_dims(kiln_tensor *r, const mm_shape *s, const char *fn) {
  if (!r || (!s->drop_m && !s->drop_n)) return r;
  graph_view v = r->view;
  int nd = v.ndim, keep = 0;
  for (int d = 0; d < nd; d++) {
    if ((d == nd - 2 && s->drop_m) || (d == nd - 1 && s->drop_n)) continue;
    v.sizes[keep] = r->view.sizes[d];
    v.strides[keep++] = r->view.strides[d];
  }
  v.ndim = keep;
  kiln_tensor *out = with_view(r, &v, fn);
  kiln_release(r);
  return out;
}

static kiln_tensor *product(kiln_tensor *a, kiln_tensor *b, const char *fn) {
  mm_shape s;
  if (!plan(&s, a, b, fn)) return NULL;
  kiln_dtype dtype = graph_promote(a->storage->dtype, b->storage->dtype);
  if (dtype == KILN_BOOL) {
    api_error(KILN_ERR_DTYPE, fn, "not supported for bool tensors");
    return NULL;
  }
  kiln_device da = a->storage->device, db = b->storage->device;
  if (da != db) {
    api_device_mismatch(fn, da, db);
    return NULL;
  }
  api_untracked_begin();
  bool blas = dtype == KILN_F32 || dtype == KILN_F64, half = dtype == KILN_F16 || dtype == KILN_BF16;
  kiln_tensor *r = blas ? blas_product(a, b, &s, dtype, fn) : half ? half_product(a, b, &s, dtype, fn)
                                                                   : kernel_product(a, b, &s, dtype, fn);
  r = drop_dims(r, &s, fn);
  api_untracked_end();
  return api_track(r);
}

static bool check_dims(const kiln_tensor *t, int want, const char *fn, const char *arg) {
  if (t->view.ndim == want) return true;
  api_error(KILN_ERR_SHAPE, fn, "%s must be %d-D, got %d-D", arg, want, t->view.ndim);
  return false;
}

static bool check2(const kiln_tensor *a, const kiln_tensor *b, int da, int db, const char *fn) {
  if (!api_check(a, fn, "a") || !api_check(b, fn, "b")) return false;
  return check_dims(a, da, fn, "a") && check_dims(b, db, fn, "b");
}

KILN_API kiln_tensor *kiln_matmul(kiln_tensor *a, kiln_tensor *b) {
  if (!api_check(a, "kiln_matmul", "a") || !api_check(b, "kiln_matmul", "b")) return NULL;
  return product(a, b, "kiln_matmul");
}

KILN_API kiln_tensor *kiln_mm(kiln_tensor *a, kiln_tensor *b) {
  return check2(a, b, 2, 2, "kiln_mm") ? product(a, b, "kiln_mm") : NULL;
}

KILN_API kiln_tensor *kiln_mv(kiln_tensor *a, kiln_tensor *x) {
  return check2(a, x, 2, 1, "kiln_mv") ? product(a, x, "kiln_mv") : NULL;
}

KILN_API kiln_tensor *kiln_dot(kiln_tensor *a, kiln_tensor *b) {
  return check2(a, b, 1, 1, "kiln_dot") ? product(a, b, "kiln_dot") : NULL;
}

KILN_API kiln_tensor *kiln_bmm(kiln_tensor *a, kiln_tensor *b) {
  const char *fn = "kiln_bmm";
  if (!check2(a, b, 3, 3, fn)) return NULL;
  if (a->view.sizes[0] != b->view.sizes[0]) {
    shape_error(a, b, fn, "batch sizes differ");
    return NULL;
  }
  return product(a, b, fn);
}

/* bias must broadcast to [M, N] without adding dims. */
static bool check_bias(const kiln_tensor *bias, int64_t m, int64_t n, const char *fn) {
  int64_t sizes[2] = {m, n};
  graph_view out;
  if (bias->view.ndim <= 2 && graph_view_broadcast(&bias->view, 2, sizes, &out)) return true;
  char sb[256], so[256];
  api_error(KILN_ERR_SHAPE, fn, "bias of sizes %s cannot be broadcast to %s",
            api_fmt_sizes(sb, sizeof sb, bias->view.ndim, bias->view.sizes), api_fmt_sizes(so, sizeof so, 2, sizes));
  return false;
}

KILN_API kiln_tensor *kiln_addmm(kiln_tensor *bias, kiln_tensor *a, kiln_tensor *b, double beta, double alpha) {
  const char *fn = "kiln_addmm";
  if (!api_check(bias, fn, "bias") || !check2(a, b, 2, 2, fn)) return NULL;
  if (!check_bias(bias, a->view.sizes[0], b->view.sizes[1], fn)) return NULL;
  api_untracked_begin();
  kiln_tensor *p = product(a, b, fn), *out = NULL;
  kiln_tensor *scaled = p && alpha != 1.0 ? kiln_mul_scalar(p, alpha) : kiln_retain(p);
  if (beta == 0.0) { /* Torch: the bias is ignored (NaN/inf in it too) */
    out = kiln_retain(scaled);
  } else if (scaled) {
    kiln_tensor *bb = beta != 1.0 ? kiln_mul_scalar(bias, beta) : kiln_retain(bias);
    out = kiln_add(scaled, bb);
    kiln_release(bb);
  }
  kiln_release(p);
  kiln_release(scaled);
  api_untracked_end();
  return api_track(out);
}
