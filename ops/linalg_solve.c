/*
 * linalg_solve.c — kiln_linalg_solve and kiln_linalg_inv
 * (torch.linalg.solve, torch.linalg.inv; declared in kiln/nn.h) as one
 * lazy extern op, SOLVE (graph/ops.def), run by LAPACK's ?gesv from
 * OpenBLAS (LU with partial pivoting, then two triangular solves; the
 * library Kiln already links for matmul). In the op-recording layer, so
 * that the gradient rule (autograd/, the layer above) can record solves.
 *
 * The op's runner is registered with the runtime (rt_extern_register) at
 * the first call, as the collectives register theirs. It solves each
 * batch's system in turn on host copies in LAPACK's column-major order
 * (a and b transposed in, x transposed out). A singular matrix (an exact
 * zero pivot, LAPACK's info > 0) fails the force with KILN_ERR_ARG.
 * inv(a) is solve(a, I) with the identity expanded to a's batch. The
 * gradient rule (autograd/grad_rules.c r_solve) is Torch's: gB =
 * solve(a^T, g), gA = -gB x^T, so inverses and solves differentiate to
 * any order.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "runtime.h"

/* LAPACK (Fortran ABI, in OpenBLAS): solves a x = b for n x n a and
 * n x nrhs b, column-major, in place; ipiv [n] the pivots. */
void dgesv_(const int *n, const int *nrhs, double *a, const int *lda, int *ipiv, double *b, const int *ldb, int *info);
void sgesv_(const int *n, const int *nrhs, float *a, const int *lda, int *ipiv, float *b, const int *ldb, int *info);

/* [n, n] and [n, k] of batch b of node sn's inputs, solved into out. */
static int solve_one(bool f64, int n, int k, const char *a, const char *b, char *out, int64_t batch, char *err,
                     size_t errlen) {
  size_t es = f64 ? sizeof(double) : sizeof(float);
  char *wa = malloc(es * (size_t)n * (size_t)n + 1), *wb = malloc(es * (size_t)n * (size_t)k + 1);
  int *piv = malloc(sizeof *piv * (size_t)n + 1), info = 0, lda = n > 1 ? n : 1;
  if (!wa || !wb || !piv) {
    free(wa), free(wb), free(piv);
    snprintf(err, errlen, "kiln_linalg_solve: out of memory");
    return KILN_ERR_OOM;
  }
  for (int i = 0; i < n; i++) /* row-major in, column-major work */
    for (int j = 0; j < n; j++) memcpy(wa + es * ((size_t)j * n + i), a + es * ((size_t)i * n + j), es);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < k; j++) memcpy(wb + es * ((size_t)j * n + i), b + es * ((size_t)i * k + j), es);
  if (f64) dgesv_(&n, &k, (double *)wa, &lda, piv, (double *)wb, &lda, &info);
  else sgesv_(&n, &k, (float *)wa, &lda, piv, (float *)wb, &lda, &info);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < k; j++) memcpy(out + es * ((size_t)i * k + j), wb + es * ((size_t)j * n + i), es);
  free(wa), free(wb), free(piv);
  if (info == 0) return KILN_OK;
  snprintf(err, errlen,
           "kiln_linalg_solve: the matrix of batch %lld is singular (U(%d,%d) is exactly zero: LAPACK ?gesv info %d)",
           (long long)batch, info, info, info);
  return KILN_ERR_ARG;
}

/* The SOLVE runner: every batch in turn. */
static int run_solve(const graph_node *nd, const void *const *in, graph_buffer *out, char *err, size_t errlen) {
  bool f64 = nd->dtype == KILN_F64;
  size_t es = f64 ? sizeof(double) : sizeof(float);
  int n = (int)nd->sizes[nd->ndim - 2], k = (int)nd->sizes[nd->ndim - 1];
  int64_t per = (int64_t)n * k, batches = per ? nd->numel / per : 0;
  const char *a = (const char *)in[0] + es * (size_t)nd->inputs[0].view.offset;
  const char *b = (const char *)in[1] + es * (size_t)nd->inputs[1].view.offset;
  for (int64_t i = 0; i < batches && n > 0; i++) {
    int st = solve_one(f64, n, k, a + es * (size_t)(i * n * n), b + es * (size_t)(i * per),
                       (char *)out->data + es * (size_t)(i * per), i, err, errlen);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

static void describe_solve(const graph_node *nd, bool on_device, kiln_kernel_record *r, char *name, size_t len) {
  (void)on_device;
  int64_t n = nd->sizes[nd->ndim - 2], k = nd->sizes[nd->ndim - 1], per = n * k;
  int64_t batches = per ? nd->numel / per : 0, es = graph_dtypes[nd->dtype].size;
  snprintf(name, len, "lapack_%cgesv_%lldx%lld", nd->dtype == KILN_F64 ? 'd' : 's', (long long)n, (long long)k);
  r->name = name;
  r->backend = "lapack";
  r->n_ops = 1;
  r->numel = nd->numel;
  r->flops = batches * (2 * n * n * n / 3 + 2 * n * n * k);
  r->bytes_read = batches * (n * n + per) * es;
  r->bytes_written = nd->numel * es;
  r->cache_hit = true;
  r->threads = 1;
}

static pthread_once_t register_once = PTHREAD_ONCE_INIT;
static int register_status;
static char register_err[256];

static void register_solve(void) {
  register_status = rt_extern_register(GRAPH_OP_SOLVE, run_solve, describe_solve, false, register_err,
                                       sizeof register_err);
}

/* t has a float dtype; else KILN_ERR_DTYPE. */
static bool check_float(const kiln_tensor *t, const char *arg, const char *fn) {
  kiln_dtype d = t->storage->dtype;
  if (graph_is_float(d)) return true;
  api_error(KILN_ERR_DTYPE, fn, "%s needs a float dtype, got %s (convert with kiln_to_dtype)", arg,
            graph_dtypes[d].name);
  return false;
}

/* t in its compute dtype (F32 for F16/BF16), contiguous. */
static kiln_tensor *widen(kiln_tensor *t) {
  return kiln_contiguous(kiln_to_dtype(t, graph_compute_dtype(kiln_dtype_of(t))));
}

/* Checks a [*, n, n] and b [*, n, k] (the same batch sizes; b [*, n]
 * when vector) of one float dtype. */
static bool check_solve(kiln_tensor *a, kiln_tensor *b, bool vector, const char *fn) {
  if (!check_float(a, "A", fn) || !check_float(b, "B", fn)) return false;
  const graph_view *av = &a->view, *bv = &b->view;
  char s1[256], s2[256];
  api_fmt_sizes(s1, sizeof s1, av->ndim, av->sizes);
  api_fmt_sizes(s2, sizeof s2, bv->ndim, bv->sizes);
  if (av->ndim < 2 || av->sizes[av->ndim - 1] != av->sizes[av->ndim - 2]) {
    api_error(KILN_ERR_SHAPE, fn, "A must be a batch of square matrices [*, n, n], got sizes %s", s1);
    return false;
  }
  bool ok = bv->ndim == av->ndim - (vector ? 1 : 0);
  for (int d = 0; ok && d < av->ndim - 1; d++) ok = bv->sizes[d] == av->sizes[d];
  if (!ok) {
    api_error(KILN_ERR_SHAPE, fn, "B sizes %s do not match A sizes %s (expected [*, n, k] or [*, n] with A's batch)",
              s2, s1);
    return false;
  }
  if (a->storage->dtype != b->storage->dtype) {
    api_error(KILN_ERR_DTYPE, fn, "A dtype %s and B dtype %s differ", graph_dtypes[a->storage->dtype].name,
              graph_dtypes[b->storage->dtype].name);
    return false;
  }
  return true;
}

/* The SOLVE node of contiguous a, b (compute dtype): [*, n, k]. */
static kiln_tensor *solve_node(kiln_tensor *a, kiln_tensor *b, const char *fn) {
  graph_node *n = graph_node_new(GRAPH_OP_SOLVE, kiln_dtype_of(b), b->view.ndim, b->view.sizes);
  if (!n) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  if (!api_add_input(n, a, &a->view) || !api_add_input(n, b, &b->view)) {
    graph_node_release(n);
    return NULL;
  }
  return api_tensor_from_node(n, fn);
}

KILN_API kiln_tensor *kiln_linalg_solve(kiln_tensor *A, kiln_tensor *B) {
  const char *fn = "kiln_linalg_solve";
  if (!api_check(A, fn, "A") || !api_check(B, fn, "B")) return NULL;
  bool vector = B->view.ndim == A->view.ndim - 1; /* Torch: B is a batch of vectors */
  if (!check_solve(A, B, vector, fn)) return NULL;
  pthread_once(&register_once, register_solve);
  if (register_status != KILN_OK) {
    api_error(register_status, fn, "%s", register_err);
    return NULL;
  }
  kiln_dtype dt = A->storage->dtype;
  kiln_scope_begin(); /* owns the intermediates */
  kiln_tensor *a = widen(A), *b = widen(vector ? kiln_unsqueeze(B, -1) : B);
  kiln_tensor *x = a && b ? solve_node(a, b, fn) : NULL;
  if (x && vector) x = kiln_squeeze_dim(x, -1);
  x = kiln_to_dtype(x, dt);
  kiln_keep(x);
  kiln_scope_end();
  return x;
}

KILN_API kiln_tensor *kiln_linalg_inv(kiln_tensor *A) {
  const char *fn = "kiln_linalg_inv";
  if (!api_check(A, fn, "A") || !check_float(A, "A", fn)) return NULL;
  const graph_view *v = &A->view;
  if (v->ndim < 2 || v->sizes[v->ndim - 1] != v->sizes[v->ndim - 2]) {
    char s[256];
    api_error(KILN_ERR_SHAPE, fn, "A must be a batch of square matrices [*, n, n], got sizes %s",
              api_fmt_sizes(s, sizeof s, v->ndim, v->sizes));
    return NULL;
  }
  int64_t n = v->sizes[v->ndim - 1];
  kiln_scope_begin();
  api_untracked_begin();
  kiln_tensor *eye = ops_move_like(kiln_eye(A->storage->dtype, n, n), A, fn);
  api_untracked_end();
  kiln_tensor *x = eye ? kiln_linalg_solve(A, kiln_expand(api_track(eye), v->ndim, v->sizes)) : NULL;
  kiln_keep(x);
  kiln_scope_end();
  return x;
}
