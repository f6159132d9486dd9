/*
 * gemm_epilogue.c — the operands of a fused GEMM epilogue
 * (gemm_epilogue.h): made from the fuser's chain (rt_gemm_epi_of),
 * addressed per tile for the micro-kernel (rt_gemm_epi_tile), named for
 * the profile (rt_gemm_epi_name).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gemm_epilogue.h"
#include "matmul_dims.h"
#include "rt_internal.h"

static unsigned char epi_op(graph_op op, bool swapped) {
  switch (op) {
  case GRAPH_OP_ADD: return LLVM_GEMM_EPI_ADD;
  case GRAPH_OP_SUB: return swapped ? LLVM_GEMM_EPI_RSUB : LLVM_GEMM_EPI_SUB;
  case GRAPH_OP_MUL: return LLVM_GEMM_EPI_MUL;
  case GRAPH_OP_DIV: return swapped ? LLVM_GEMM_EPI_RDIV : LLVM_GEMM_EPI_DIV;
  case GRAPH_OP_MAXIMUM: return LLVM_GEMM_EPI_MAXIMUM;
  case GRAPH_OP_MINIMUM: return LLVM_GEMM_EPI_MINIMUM;
  default: return LLVM_GEMM_EPI_RELU;
  }
}

/* Step s takes the fill value v, as T. */
static void set_value(rt_gemm_epi *e, int s, double v, int esz) {
  float f = (float)v;
  if (esz == 4) memcpy(e->value[s], &f, 4);
  else memcpy(e->value[s], &v, 8);
  e->base[s] = (const char *)e->value[s];
  e->step[s].arg = LLVM_GEMM_ARG_SCALAR;
}

/* Appends op with the fill value v (CLAMP's bounds); false when full. */
static bool add_value_step(rt_gemm_epi *e, unsigned char op, double v, int esz) {
  if (e->n == LLVM_GEMM_EPI_MAX) return false;
  e->step[e->n].op = op;
  set_value(e, e->n++, v, esz);
  return true;
}

/* Where the operand of step s varies (the stride of a dim of size 1
 * does not matter: it counts as 0, the operand does not vary along it). */
static bool classify(rt_gemm_epi *e, int s, const graph_view *v) {
  int m = v->ndim - 2, n = v->ndim - 1; /* the matrix dims: a view's last two */
  int64_t sm = v->sizes[m] == 1 ? 0 : v->strides[m], sn = v->sizes[n] == 1 ? 0 : v->strides[n];
  if (sn != 0 && sn != 1) return false;
  e->sm[s] = sm;
  e->sn[s] = sn;
  e->step[s].arg = sm == 0 ? (sn == 0 ? LLVM_GEMM_ARG_SCALAR : LLVM_GEMM_ARG_ROW)
                           : (sn == 0 ? LLVM_GEMM_ARG_COL : LLVM_GEMM_ARG_TILE);
  return true;
}

bool rt_gemm_epi_of(const pass_gemm_epilogue *pe, const graph_node *x, rt_gemm_epi *e) {
  int esz = graph_dtypes[x->dtype].size;
  memset(e, 0, sizeof *e);
  e->esz = esz;
  e->nb = x->ndim - 2;
  for (int i = 0; i < pe->n_steps; i++) {
    const pass_gemm_step *st = &pe->step[i];
    if (st->op == GRAPH_OP_CLAMP) { /* max(x, lo) then min(., hi), a NaN bound left out (semantics.c) */
      if (!isnan(st->lo) && !add_value_step(e, LLVM_GEMM_EPI_MAXIMUM, st->lo, esz)) return false;
      if (!isnan(st->hi) && !add_value_step(e, LLVM_GEMM_EPI_MINIMUM, st->hi, esz)) return false;
      continue;
    }
    if (e->n == LLVM_GEMM_EPI_MAX) return false;
    int s = e->n++;
    e->step[s].op = epi_op(st->op, st->swapped);
    if (st->op == GRAPH_OP_RELU) continue;
    const graph_node *o = st->arg;
    if (!o->buffer) { /* an inlined FULL: its fill value, typed */
      set_value(e, s, graph_attr_scalar(o), esz);
      continue;
    }
    if (o->buffer->device != x->device || !classify(e, s, &st->view)) return false;
    e->base[s] = (const char *)o->buffer->data + st->view.offset * esz;
    e->batch[s] = st->view;
    e->batched[s] = e->nb > 0;
  }
  return true;
}

void rt_gemm_epi_batch(const rt_gemm_epi *e, int64_t i, rt_gemm_epi *out) {
  *out = *e; /* a fill value's base still points into e */
  for (int s = 0; s < e->n; s++)
    if (e->batched[s]) out->base[s] = e->base[s] + mm_batch_offset(&e->batch[s], e->nb, i) * e->esz;
}

void rt_gemm_epi_tile(const rt_gemm_epi *e, int64_t r0, int64_t c0, int64_t rows, int64_t cols, int mr, int nr,
                      int esz, char *scratch, llvm_gemm_epi_args *out) {
  bool edge = rows < mr || cols < nr;
  for (int s = 0; s < e->n; s++) {
    int arg = e->step[s].arg;
    int64_t sm = e->sm[s], sn = e->sn[s];
    const char *at = e->base[s] ? e->base[s] + (r0 * sm + c0 * sn) * esz : NULL;
    out->ptr[s] = at;
    out->ld[s] = sm;
    if (!edge || arg == LLVM_GEMM_ARG_NONE || arg == LLVM_GEMM_ARG_SCALAR) continue;
    char *d = scratch + (size_t)s * LLVM_GEMM_MAX_MR * LLVM_GEMM_MAX_NR * 8;
    int64_t n_rows = arg == LLVM_GEMM_ARG_ROW ? 1 : rows, n_cols = arg == LLVM_GEMM_ARG_COL ? 1 : cols;
    int64_t ld = arg == LLVM_GEMM_ARG_COL ? 1 : nr; /* the copy's stride between rows */
    memset(d, 0, (size_t)((arg == LLVM_GEMM_ARG_ROW ? nr : arg == LLVM_GEMM_ARG_COL ? mr : mr * nr) * esz));
    for (int64_t r = 0; r < n_rows; r++)
      for (int64_t c = 0; c < n_cols; c++) memcpy(d + (r * ld + c) * esz, at + (r * sm + c * sn) * esz, (size_t)esz);
    out->ptr[s] = d;
    out->ld[s] = ld;
  }
}

void rt_gemm_epi_name(const rt_gemm_epi *e, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (int s = 0; s < e->n && at < len; s++) {
    int op = e->step[s].op, arg = e->step[s].arg;
    bool vec = arg == LLVM_GEMM_ARG_ROW || arg == LLVM_GEMM_ARG_COL;
    const char *w = op == LLVM_GEMM_EPI_RELU                                ? "relu"
                    : op == LLVM_GEMM_EPI_MAXIMUM                            ? "max"
                    : op == LLVM_GEMM_EPI_MINIMUM                            ? "min"
                    : op == LLVM_GEMM_EPI_ADD && vec                         ? "bias"
                    : op == LLVM_GEMM_EPI_ADD && arg == LLVM_GEMM_ARG_TILE   ? "res"
                    : op == LLVM_GEMM_EPI_MUL && arg == LLVM_GEMM_ARG_SCALAR ? "scale"
                    : op == LLVM_GEMM_EPI_ADD                                ? "add"
                    : op == LLVM_GEMM_EPI_MUL                                ? "mul"
                    : op == LLVM_GEMM_EPI_SUB || op == LLVM_GEMM_EPI_RSUB    ? "sub"
                                                                             : "div";
    int k = snprintf(buf + at, len - at, "%s%s", s ? "_" : "", w);
    if (k < 0) break;
    at += (size_t)k;
  }
}
