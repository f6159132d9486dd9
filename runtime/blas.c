/*
 * blas.c — the MATMUL extern op through OpenBLAS (cblas_sgemm/dgemm, and
 * gemv when one side is a vector).
 *
 * Each operand is a strided view [batch..., rows, cols]. A matrix whose
 * column stride is 1 is passed row-major as it is (leading dimension = its
 * row stride); one whose row stride is 1 is passed as a transpose flag with
 * its column stride as leading dimension (a transposed view costs no
 * copy). Only a matrix with neither layout is packed into a contiguous
 * scratch buffer first. Batch dims (broadcast ones have stride 0) are a
 * loop of GEMM calls; the output is contiguous [batch..., M, N].
 */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

/* How one operand matrix goes to BLAS. */
typedef struct blas_mat {
  const char *base; /* element [0, 0] of batch 0 */
  int64_t rows, cols, s_row, s_col;
  CBLAS_TRANSPOSE trans;
  int64_t ld;
  bool pack; /* neither layout: copy each batch's matrix first */
} blas_mat;

static int64_t max1(int64_t x) { return x > 1 ? x : 1; }

/* Chooses the layout of a rows×cols matrix with strides (s_row, s_col).
 * A size-1 dim's stride is free, so it never blocks a layout. */
static void choose_layout(blas_mat *m) {
  if ((m->cols == 1 || m->s_col == 1) && (m->rows == 1 || m->s_row >= max1(m->cols))) {
    m->trans = CblasNoTrans;
    m->ld = m->rows == 1 ? max1(m->cols) : m->s_row;
  } else if ((m->rows == 1 || m->s_row == 1) && (m->cols == 1 || m->s_col >= max1(m->rows))) {
    m->trans = CblasTrans;
    m->ld = m->cols == 1 ? max1(m->rows) : m->s_col;
  } else {
    m->pack = true;
    m->trans = CblasNoTrans;
    m->ld = max1(m->cols);
  }
}

static blas_mat operand(const graph_input *in) {
  const graph_view *v = &in->view;
  int nd = v->ndim, esz = graph_dtypes[in->node->dtype].size;
  blas_mat m = {.base = (const char *)in->node->buffer->data + v->offset * esz,
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
                 int64_t m, int64_t n, int64_t k) {
  if (f64)
    cblas_dgemm(CblasRowMajor, a->trans, b->trans, (blasint)m, (blasint)n, (blasint)k, 1.0, pa, (blasint)a->ld,
                pb, (blasint)b->ld, 0.0, c, (blasint)max1(n));
  else
    cblas_sgemm(CblasRowMajor, a->trans, b->trans, (blasint)m, (blasint)n, (blasint)k, 1.0f, pa,
                (blasint)a->ld, pb, (blasint)b->ld, 0.0f, c, (blasint)max1(n));
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

/* One product: gemv when either side is a vector with a usable stride,
 * else gemm. */
static void product(bool f64, const blas_mat *a, const void *pa, const blas_mat *b, const void *pb, void *c,
                    int64_t m, int64_t n, int64_t k) {
  if (n == 1 && !a->pack && !b->pack && (k == 1 || b->s_row != 0)) {
    gemv(f64, a, pa, pb, k == 1 ? 1 : b->s_row, c, 1); /* c[m] = A b */
  } else if (m == 1 && !a->pack && !b->pack && (k == 1 || a->s_col != 0)) {
    blas_mat bt = transposed(b); /* c[n] = B^T a */
    gemv(f64, &bt, pb, pa, k == 1 ? 1 : a->s_col, c, 1);
  } else {
    gemm(f64, a, pa, b, pb, c, m, n, k);
  }
}

/* Element offset of batch number `i` (row-major over the batch dims) in a
 * view whose first nb dims are the batch dims. */
static int64_t batch_offset(const graph_view *v, int nb, int64_t i) {
  int64_t off = 0;
  for (int d = nb - 1; d >= 0; d--) {
    off += (i % v->sizes[d]) * v->strides[d];
    i /= v->sizes[d];
  }
  return off;
}

int rt_blas_matmul(graph_node *n, graph_buffer *out, char *err, size_t errlen) {
  bool f64 = n->dtype == KILN_F64;
  int esz = graph_dtypes[n->dtype].size, nd = n->ndim, nb = nd - 2;
  int64_t m = n->sizes[nd - 2], nn = n->sizes[nd - 1], k = n->inputs[0].view.sizes[nd - 1];
  int64_t batches = 1;
  for (int d = 0; d < nb; d++) batches *= n->sizes[d];
  if (m > INT32_MAX || nn > INT32_MAX || k > INT32_MAX) {
    snprintf(err, errlen, "matmul of %lldx%lld by %lldx%lld exceeds BLAS's 32-bit sizes", (long long)m,
             (long long)k, (long long)k, (long long)nn);
    return KILN_ERR_UNSUPPORTED;
  }
  if (k == 0) {
    memset(out->data, 0, (size_t)(n->numel * esz));
    return KILN_OK;
  }
  blas_mat a = operand(&n->inputs[0]), b = operand(&n->inputs[1]);
  char *scratch = NULL;
  if (a.pack || b.pack) {
    scratch = malloc((size_t)((a.pack ? m * k : 0) + (b.pack ? k * nn : 0)) * (size_t)esz);
    if (!scratch) {
      snprintf(err, errlen, "out of memory packing a matmul operand");
      return KILN_ERR_OOM;
    }
  }
  for (int64_t i = 0; i < batches && m > 0 && nn > 0; i++) {
    const char *pa = a.base + batch_offset(&n->inputs[0].view, nb, i) * esz;
    const char *pb = b.base + batch_offset(&n->inputs[1].view, nb, i) * esz;
    if (a.pack) pack(&a, pa, scratch, esz), pa = scratch;
    if (b.pack) pack(&b, pb, scratch + (a.pack ? m * k * esz : 0), esz), pb = scratch + (a.pack ? m * k * esz : 0);
    product(f64, &a, pa, &b, pb, (char *)out->data + i * m * nn * esz, m, nn, k);
  }
  free(scratch);
  return KILN_OK;
}
