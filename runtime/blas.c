/*
 * blas.c — the MATMUL extern op through OpenBLAS (cblas_sgemm/dgemm, and
 * gemv when one side is a vector) on the host, and through cuBLAS
 * (cuda_blas.h) for KILN_CUDA nodes on the real device.
 *
 * Each operand is a strided view [batch..., rows, cols]. A matrix whose
 * column stride is 1 is passed row-major as it is (leading dimension = its
 * row stride); one whose row stride is 1 is passed as a transpose flag with
 * its column stride as leading dimension (a transposed view costs no
 * copy). Only a matrix with neither layout is packed into a contiguous
 * scratch buffer first. Batch dims (broadcast ones have stride 0) are a
 * loop of GEMM calls; the output is contiguous [batch..., M, N].
 *
 * On the host the product runs on Kiln's pool, OpenBLAS one thread per
 * call: the batches, or (one batch) blocks of 16 of C's longer side, one
 * block per pool thread, each one OpenBLAS call on its block's rows of
 * op(A) or columns of op(B) (docs/internals.md: OpenBLAS's own threads
 * spun in sched_yield after every call, taking a core from the kernels
 * that followed). A part that packs has its own scratch.
 *
 * cuBLAS is column-major: a row-major matrix with leading dimension ld is
 * the column-major matrix of its transpose with the same ld, so the
 * row-major C = A·B is the column-major C^T = B^T·A^T — operands swapped,
 * each keeping its transpose flag and leading dimension, ldc = N. On the
 * device nothing is packed: ops/linalg.c makes an operand that needs it
 * contiguous first (rt_blas_view_needs_copy). One batch dim (bmm, and a
 * broadcast one of stride 0) is one strided-batched call; more are a loop.
 */
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_blas.h"
#include "device.h"
#include "matmul_dims.h"
#include "pool.h"
#include "rt_internal.h"

/* How one operand matrix goes to BLAS. */
typedef struct blas_mat {
  const char *base; /* element [0, 0] of batch 0 */
  int64_t rows, cols, s_row, s_col;
  CBLAS_TRANSPOSE trans;
  int64_t ld;
  bool pack; /* neither layout: copy each batch's matrix first */
} blas_mat;

/* Chooses the layout of a rows×cols matrix with strides (s_row, s_col).
 * A size-1 dim's stride is free, so it never blocks a layout. */
static void choose_layout(blas_mat *m) {
  if ((m->cols == 1 || m->s_col == 1) && (m->rows == 1 || m->s_row >= mm_max1(m->cols))) {
    m->trans = CblasNoTrans;
    m->ld = m->rows == 1 ? mm_max1(m->cols) : m->s_row;
  } else if ((m->rows == 1 || m->s_row == 1) && (m->cols == 1 || m->s_col >= mm_max1(m->rows))) {
    m->trans = CblasTrans;
    m->ld = m->cols == 1 ? mm_max1(m->rows) : m->s_col;
  } else {
    m->pack = true;
    m->trans = CblasNoTrans;
    m->ld = mm_max1(m->cols);
  }
}

/* Operand `in` of a matmul whose buffer holds `data` (NULL: its layout
 * only). */
static blas_mat operand(const graph_input *in, const void *data) {
  const graph_view *v = &in->view;
  int nd = v->ndim, esz = graph_dtypes[in->node->dtype].size;
  blas_mat m = {.base = data ? (const char *)data + v->offset * esz : NULL,
                .rows = v->sizes[nd - 2], .cols = v->sizes[nd - 1],
                .s_row = v->strides[nd - 2], .s_col = v->strides[nd - 1]};
  choose_layout(&m);
  return m;
}

/* Copies matrix m at base into dst, row-major contiguous. */
static void pack(const blas_mat *m, const char *base, char *dst, int esz) {
  for (int64_t r = 0; r < m->rows; r++)
    for (int64_t c = 0; c < m->cols; c++)
      memcpy(dst + (r * m->cols + c) * esz, base + (r * m->s_row + c * m->s_col) * esz, (size_t)esz);
}

static void gemm(bool f64, const blas_mat *a, const void *pa, const blas_mat *b, const void *pb, void *c,
                 int64_t ldc, int64_t m, int64_t n, int64_t k) {
  if (f64)
    cblas_dgemm(CblasRowMajor, a->trans, b->trans, (blasint)m, (blasint)n, (blasint)k, 1.0, pa, (blasint)a->ld,
                pb, (blasint)b->ld, 0.0, c, (blasint)ldc);
  else
    cblas_sgemm(CblasRowMajor, a->trans, b->trans, (blasint)m, (blasint)n, (blasint)k, 1.0f, pa,
                (blasint)a->ld, pb, (blasint)b->ld, 0.0f, c, (blasint)ldc);
}

/* y = op(M) x where M is stored with layout mm (rows×cols as the
 * operand, so op(M) is rows×cols) and x has element stride incx. */
static void gemv(bool f64, const blas_mat *mm, const void *pm, const void *x, int64_t incx, void *y, int64_t incy) {
  /* stored matrix: NoTrans → rows×cols; Trans → cols×rows */
  int64_t sr = mm->trans == CblasNoTrans ? mm->rows : mm->cols, sc = mm->trans == CblasNoTrans ? mm->cols : mm->rows;
  if (f64)
    cblas_dgemv(CblasRowMajor, mm->trans, (blasint)sr, (blasint)sc, 1.0, pm, (blasint)mm->ld, x, (blasint)incx, 0.0,
                y, (blasint)incy);
  else
    cblas_sgemv(CblasRowMajor, mm->trans, (blasint)sr, (blasint)sc, 1.0f, pm, (blasint)mm->ld, x, (blasint)incx,
                0.0f, y, (blasint)incy);
}

/* The transpose of m's layout (a k×n matrix seen as n×k). */
static blas_mat transposed(const blas_mat *m) {
  blas_mat t = *m;
  t.rows = m->cols;
  t.cols = m->rows;
  t.trans = m->trans == CblasNoTrans ? CblasTrans : CblasNoTrans;
  return t;
}

/* One product into c (row stride ldc): gemv when either side is a vector
 * with a usable stride, else gemm. a and b describe the whole operands
 * (their rows, cols: gemv's shape); m, n, k the block computed. */
static void product(bool f64, const blas_mat *a, const void *pa, const blas_mat *b, const void *pb, void *c,
                    int64_t ldc, int64_t m, int64_t n, int64_t k) {
  if (n == 1 && !a->pack && !b->pack && (k == 1 || b->s_row != 0)) {
    blas_mat ab = *a; /* c[m] = A b, down a column of C */
    ab.rows = m;
    gemv(f64, &ab, pa, pb, k == 1 ? 1 : b->s_row, c, ldc);
  } else if (m == 1 && !a->pack && !b->pack && (k == 1 || a->s_col != 0)) {
    blas_mat bt = transposed(b); /* c[n] = B^T a, along a row of C */
    bt.rows = n;
    gemv(f64, &bt, pb, pa, k == 1 ? 1 : a->s_col, c, 1);
  } else {
    gemm(f64, a, pa, b, pb, c, ldc, m, n, k);
  }
}

static bool fits_int(const mm_dims *d) { return d->m <= INT32_MAX && d->nn <= INT32_MAX && d->k <= INT32_MAX; }

/* A host product split over Kiln's pool (file comment): each item is
 * one batch (batches > 1) or one block of C's rows or columns. */
typedef struct split_job {
  const graph_node *n;
  bool f64;
  mm_dims d;
  blas_mat a, b;
  char *out;
  enum { BY_BATCH, BY_ROWS, BY_COLS } by;
  int64_t block;     /* rows or columns per item */
  atomic_bool oom;   /* a part could not allocate its packing scratch */
} split_job;

static _Thread_local int last_threads = 1;

/* Batch i's operands: the matrices themselves, or packed into scratch. */
static void batch_operands(const split_job *j, int64_t i, char *scratch, const char **pa, const char **pb) {
  const mm_dims *d = &j->d;
  *pa = j->a.base + mm_batch_offset(&j->n->inputs[0].view, d->nb, i) * d->esz;
  *pb = j->b.base + mm_batch_offset(&j->n->inputs[1].view, d->nb, i) * d->esz;
  char *sb = scratch + (j->a.pack ? d->m * d->k * d->esz : 0);
  if (j->a.pack) pack(&j->a, *pa, scratch, d->esz), *pa = scratch;
  if (j->b.pack) pack(&j->b, *pb, sb, d->esz), *pb = sb;
}

/* Rows [r0, r1) or columns [c0, c1) of batch i's C. */
static void block_product(const split_job *j, const char *pa, const char *pb, char *c, int64_t lo, int64_t hi) {
  const mm_dims *d = &j->d;
  int64_t ldc = mm_max1(d->nn), esz = d->esz;
  if (j->by == BY_ROWS) {
    const char *sa = pa + lo * (j->a.trans == CblasNoTrans ? j->a.ld : 1) * esz;
    product(j->f64, &j->a, sa, &j->b, pb, c + lo * ldc * esz, ldc, hi - lo, d->nn, d->k);
  } else if (j->by == BY_COLS) {
    const char *sb = pb + lo * (j->b.trans == CblasNoTrans ? 1 : j->b.ld) * esz;
    product(j->f64, &j->a, pa, &j->b, sb, c + lo * esz, ldc, d->m, hi - lo, d->k);
  } else {
    product(j->f64, &j->a, pa, &j->b, pb, c, ldc, d->m, d->nn, d->k);
  }
}

static void split_part(void *const *bufs, int64_t start, int64_t end) {
  split_job *j = bufs[0];
  const mm_dims *d = &j->d;
  char *scratch = NULL;
  if (j->a.pack || j->b.pack) {
    scratch = graph_malloc((size_t)((j->a.pack ? d->m * d->k : 0) + (j->b.pack ? d->k * d->nn : 0)) * (size_t)d->esz);
    if (!scratch) {
      atomic_store(&j->oom, true);
      return;
    }
  }
  if (j->by == BY_BATCH) {
    for (int64_t i = start; i < end; i++) {
      const char *pa, *pb;
      batch_operands(j, i, scratch, &pa, &pb);
      block_product(j, pa, pb, j->out + i * d->m * d->nn * d->esz, 0, 0);
    }
  } else {
    const char *pa, *pb;
    batch_operands(j, 0, scratch, &pa, &pb);
    int64_t ext = j->by == BY_ROWS ? d->m : d->nn, lo = start * j->block, hi = end * j->block;
    block_product(j, pa, pb, j->out, lo, hi < ext ? hi : ext);
  }
  free(scratch);
}

/* How the product is split: batches when there are several, else C's
 * longer side in blocks of 16 (a 64-byte line of F32 columns), one block
 * run per pool thread. */
static int64_t plan_split(split_job *j) {
  const mm_dims *d = &j->d;
  if (d->batches > 1) {
    j->by = BY_BATCH;
    j->block = 1;
    return d->batches;
  }
  int64_t threads = rt_pool_threads();
  j->by = d->nn >= d->m ? BY_COLS : BY_ROWS;
  int64_t ext = j->by == BY_COLS ? d->nn : d->m;
  j->block = ((ext + threads - 1) / threads + 15) / 16 * 16;
  return (ext + j->block - 1) / j->block;
}

static void set_single_thread(void) { openblas_set_num_threads(1); }

int rt_blas_matmul(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen) {
  static pthread_once_t single = PTHREAD_ONCE_INIT;
  pthread_once(&single, set_single_thread); /* Kiln's pool runs the parts */
  mm_dims d = mm_dims_of(n);
  if (!fits_int(&d)) {
    snprintf(err, errlen, "matmul of %lldx%lld by %lldx%lld exceeds BLAS's 32-bit sizes", (long long)d.m,
             (long long)d.k, (long long)d.k, (long long)d.nn);
    return KILN_ERR_UNSUPPORTED;
  }
  last_threads = 1;
  if (d.k == 0) {
    memset(out->data, 0, (size_t)(n->numel * d.esz));
    return KILN_OK;
  }
  if (d.m == 0 || d.nn == 0 || d.batches == 0) return KILN_OK;
  split_job j = {.n = n, .f64 = n->dtype == KILN_F64, .d = d, .a = operand(&n->inputs[0], in[0]),
                 .b = operand(&n->inputs[1], in[1]), .out = out->data};
  atomic_init(&j.oom, false);
  int64_t items = plan_split(&j);
  /* cost: multiply-adds / 16 per item, so a product under ~0.5 M of them runs inline */
  double macs = (double)d.m * (double)d.nn * (double)d.k / (double)items / 16.0;
  int64_t cost = macs > 1e15 ? INT64_C(1000000000000000) : (int64_t)macs + 1;
  void *bufs[1] = {&j};
  last_threads = rt_pool_run(split_part, bufs, items, cost);
  if (!atomic_load(&j.oom)) return KILN_OK;
  snprintf(err, errlen, "out of memory packing a matmul operand");
  return KILN_ERR_OOM;
}

int rt_blas_last_threads(void) { return last_threads; }

/* ------------------------------------------- cuBLAS (KILN_CUDA nodes) */

bool rt_blas_view_needs_copy(const graph_view *v) {
  int nd = v->ndim;
  blas_mat m = {.rows = v->sizes[nd - 2], .cols = v->sizes[nd - 1], .s_row = v->strides[nd - 2],
                .s_col = v->strides[nd - 1]};
  choose_layout(&m);
  return m.pack;
}

bool rt_cublas_can_run(const graph_node *n) {
  if (n->op != GRAPH_OP_MATMUL || n->device != KILN_CUDA || (n->dtype != KILN_F32 && n->dtype != KILN_F64)) return false;
  mm_dims d = mm_dims_of(n);
  if (!fits_int(&d)) return false;
  for (int i = 0; i < 2; i++) {
    const graph_input *in = &n->inputs[i];
    if (!in->node->buffer || !rt_backend_cuda.owns(in->node->buffer)) return false;
    blas_mat m = operand(in, in->node->buffer->data);
    if (m.pack || m.ld > INT32_MAX) return false;
  }
  return rt_cuda_blas_available(NULL, 0);
}

static cu_deviceptr dev_ptr(const char *p) { return (cu_deviceptr)(uintptr_t)p; }

/* Row-major C = A·B as cuBLAS's column-major C^T = B^T·A^T (file comment). */
static rt_cuda_gemm swapped(bool f64, const blas_mat *a, const blas_mat *b, const mm_dims *d) {
  return (rt_cuda_gemm){.f64 = f64, .trans_a = b->trans == CblasTrans, .trans_b = a->trans == CblasTrans,
                        .m = (int)d->nn, .n = (int)d->m, .k = (int)d->k, .lda = (int)b->ld, .ldb = (int)a->ld,
                        .ldc = (int)mm_max1(d->nn), .batch = 1};
}

/* K = 0: the product is zeros (uploaded; the device has no memset here). */
static int upload_zeros(graph_buffer *out, char *err, size_t errlen) {
  void *z = graph_calloc(1, (size_t)(out->bytes > 0 ? out->bytes : 1));
  if (!z) {
    snprintf(err, errlen, "out of memory");
    return KILN_ERR_OOM;
  }
  int st = rt_device_upload(out, z, out->bytes, err, errlen);
  free(z);
  return st;
}

int rt_cublas_matmul(graph_node *n, graph_buffer *out, char *err, size_t errlen) {
  mm_dims d = mm_dims_of(n);
  if (d.k == 0) return upload_zeros(out, err, errlen);
  if (d.m == 0 || d.nn == 0 || d.batches == 0) return KILN_OK;
  const graph_view *va = &n->inputs[0].view, *vb = &n->inputs[1].view;
  blas_mat a = operand(&n->inputs[0], n->inputs[0].node->buffer->data);
  blas_mat b = operand(&n->inputs[1], n->inputs[1].node->buffer->data);
  rt_cuda_gemm g = swapped(n->dtype == KILN_F64, &a, &b, &d);
  const char *c = out->data;
  if (d.nb == 1 && d.batches > 1) { /* one strided-batched call */
    g.a = dev_ptr(b.base), g.b = dev_ptr(a.base), g.c = dev_ptr(c);
    g.stride_a = vb->strides[0], g.stride_b = va->strides[0], g.stride_c = d.m * d.nn;
    g.batch = (int)d.batches;
    return d.batches <= INT32_MAX ? rt_cuda_blas_gemm(&g, err, errlen) : KILN_ERR_UNSUPPORTED;
  }
  int st = KILN_OK;
  for (int64_t i = 0; i < d.batches && st == KILN_OK; i++) {
    g.a = dev_ptr(b.base + mm_batch_offset(vb, d.nb, i) * d.esz);
    g.b = dev_ptr(a.base + mm_batch_offset(va, d.nb, i) * d.esz);
    g.c = dev_ptr(c + i * d.m * d.nn * d.esz);
    st = rt_cuda_blas_gemm(&g, err, errlen);
  }
  return st;
}
