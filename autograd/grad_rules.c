/*
 * grad_rules.c — one gradient rule per differentiable op of graph/ops.def
 * (the table at the end, indexed by op; tests/test_grad_rules.c fails for
 * a DIFF op without one). A rule returns the contribution of cotangent g
 * to one input, in the sizes of the view that input was read through,
 * built from ordinary lazy ops so that it fuses like any other node.
 * Rules read the inputs (grad_input); a rule may read the node's own
 * result (grad_output) only while grad_has_output says it is still there
 * (a forced result may have been overwritten in place since, its inputs
 * cannot), and must fall back to its inputs otherwise.
 * Formulas and their NaN handling are Torch's (derivatives.yaml, 1.13).
 */
#include <math.h>

#include "autograd.h"

#define X0 grad_input(in, 0)
#define X1 grad_input(in, 1)

static kiln_tensor *zero_like(const kiln_tensor *g) { return kiln_scalar(kiln_dtype_of(g), 0); }
/* where(cond, g, 0): no NaN of g leaks where cond is false. */
static kiln_tensor *keep(kiln_tensor *cond, kiln_tensor *g) { return kiln_where(cond, g, zero_like(g)); }
static kiln_tensor *one_minus(kiln_tensor *t) { return kiln_add_scalar(kiln_neg(t), 1); }

/* ------------------------------------------------------------- unary */

static kiln_tensor *r_neg(grad_inputs *in, int k, kiln_tensor *g) { return kiln_neg(g); }
static kiln_tensor *r_abs(grad_inputs *in, int k, kiln_tensor *g) { return kiln_mul(g, kiln_sign(X0)); }
/* The result while it is there (grad_has_output), else f(input): the
 * rules below read it as Torch does, instead of computing f again. */
static kiln_tensor *result_or(grad_inputs *in, kiln_tensor *(*f)(kiln_tensor *)) {
  return grad_has_output(in->n) ? grad_output(in) : f(X0);
}

static kiln_tensor *r_exp(grad_inputs *in, int k, kiln_tensor *g) { return kiln_mul(g, result_or(in, kiln_exp)); }
static kiln_tensor *r_expm1(grad_inputs *in, int k, kiln_tensor *g) { return kiln_mul(g, kiln_exp(X0)); }
static kiln_tensor *r_exp2(grad_inputs *in, int k, kiln_tensor *g) {
  return kiln_mul(g, kiln_mul_scalar(kiln_exp2(X0), M_LN2));
}
static kiln_tensor *r_log(grad_inputs *in, int k, kiln_tensor *g) { return kiln_div(g, X0); }
static kiln_tensor *r_log2(grad_inputs *in, int k, kiln_tensor *g) { return kiln_div(g, kiln_mul_scalar(X0, M_LN2)); }
static kiln_tensor *r_log1p(grad_inputs *in, int k, kiln_tensor *g) { return kiln_div(g, kiln_add_scalar(X0, 1)); }
static kiln_tensor *r_sqrt(grad_inputs *in, int k, kiln_tensor *g) {
  return kiln_div(g, kiln_mul_scalar(result_or(in, kiln_sqrt), 2));
}
static kiln_tensor *r_rsqrt(grad_inputs *in, int k, kiln_tensor *g) {
  kiln_tensor *x = X0;
  return kiln_mul(g, kiln_mul_scalar(kiln_div(kiln_rsqrt(x), x), -0.5));
}
static kiln_tensor *r_reciprocal(grad_inputs *in, int k, kiln_tensor *g) {
  kiln_tensor *x = X0;
  return kiln_neg(kiln_div(g, kiln_mul(x, x)));
}
static kiln_tensor *r_sin(grad_inputs *in, int k, kiln_tensor *g) { return kiln_mul(g, kiln_cos(X0)); }
static kiln_tensor *r_cos(grad_inputs *in, int k, kiln_tensor *g) { return kiln_neg(kiln_mul(g, kiln_sin(X0))); }
static kiln_tensor *r_tan(grad_inputs *in, int k, kiln_tensor *g) {
  kiln_tensor *t = kiln_tan(X0);
  return kiln_mul(g, kiln_add_scalar(kiln_mul(t, t), 1));
}
static kiln_tensor *r_tanh(grad_inputs *in, int k, kiln_tensor *g) { /* Torch's tanh_backward */
  kiln_tensor *t = result_or(in, kiln_tanh);
  return kiln_mul(g, one_minus(kiln_mul(t, t)));
}
static kiln_tensor *r_sigmoid(grad_inputs *in, int k, kiln_tensor *g) { /* Torch's sigmoid_backward */
  kiln_tensor *s = result_or(in, kiln_sigmoid);
  return kiln_mul(g, kiln_mul(s, one_minus(s)));
}
/* Torch's threshold_backward(g, relu(x), 0): 0 where relu(x) <= 0, else
 * g — so a NaN input passes the gradient, as in Torch. It reads the
 * result (contiguous) rather than the input (often a strided view, e.g. a
 * conv's GEMM output plus bias); relu(x) <= 0 exactly where x <= 0, NaN
 * included (relu keeps NaN), so the input serves when the result is gone. */
static kiln_tensor *r_relu(grad_inputs *in, int k, kiln_tensor *g) {
  kiln_tensor *y = grad_has_output(in->n) ? grad_output(in) : X0;
  return kiln_where(kiln_le_scalar(y, 0), zero_like(g), g);
}
static kiln_tensor *r_gelu(grad_inputs *in, int k, kiln_tensor *g) {
  kiln_tensor *x = X0;
  kiln_tensor *cdf = kiln_mul_scalar(kiln_add_scalar(kiln_erf(kiln_mul_scalar(x, M_SQRT1_2)), 1), 0.5);
  kiln_tensor *pdf = kiln_mul_scalar(kiln_exp(kiln_mul_scalar(kiln_mul(x, x), -0.5)), 0.5 * M_2_SQRTPI * M_SQRT1_2);
  return kiln_mul(g, kiln_add(cdf, kiln_mul(x, pdf)));
}
static kiln_tensor *r_silu(grad_inputs *in, int k, kiln_tensor *g) {
  kiln_tensor *x = X0, *s = kiln_sigmoid(x);
  return kiln_mul(g, kiln_mul(s, kiln_add_scalar(kiln_mul(x, one_minus(s)), 1)));
}
static kiln_tensor *r_erf(grad_inputs *in, int k, kiln_tensor *g) {
  kiln_tensor *x = X0;
  return kiln_mul(g, kiln_mul_scalar(kiln_exp(kiln_neg(kiln_mul(x, x))), M_2_SQRTPI));
}
/* asin ... atanh: Torch's formulas (derivatives.yaml), e.g. asin:
 * g * rsqrt(1 - x*x): inf at |x| = 1, NaN beyond, as Torch. */
static kiln_tensor *sq(kiln_tensor *x) { return kiln_mul(x, x); }
static kiln_tensor *r_asin(grad_inputs *in, int k, kiln_tensor *g) {
  return kiln_mul(g, kiln_rsqrt(one_minus(sq(X0))));
}
static kiln_tensor *r_acos(grad_inputs *in, int k, kiln_tensor *g) {
  return kiln_neg(kiln_mul(g, kiln_rsqrt(one_minus(sq(X0)))));
}
static kiln_tensor *r_atan(grad_inputs *in, int k, kiln_tensor *g) { return kiln_div(g, kiln_add_scalar(sq(X0), 1)); }
static kiln_tensor *r_sinh(grad_inputs *in, int k, kiln_tensor *g) { return kiln_mul(g, kiln_cosh(X0)); }
static kiln_tensor *r_cosh(grad_inputs *in, int k, kiln_tensor *g) { return kiln_mul(g, kiln_sinh(X0)); }
static kiln_tensor *r_asinh(grad_inputs *in, int k, kiln_tensor *g) {
  return kiln_mul(g, kiln_rsqrt(kiln_add_scalar(sq(X0), 1)));
}
static kiln_tensor *r_acosh(grad_inputs *in, int k, kiln_tensor *g) {
  return kiln_mul(g, kiln_rsqrt(kiln_add_scalar(sq(X0), -1)));
}
static kiln_tensor *r_atanh(grad_inputs *in, int k, kiln_tensor *g) { return kiln_div(g, one_minus(sq(X0))); }
/* Torch: the gradient passes where lo <= x <= hi (a NaN bound is none). */
static kiln_tensor *r_clamp(grad_inputs *in, int k, kiln_tensor *g) {
  double lo = graph_attr_scalar(in->n), hi = graph_attr_scalar2(in->n);
  kiln_tensor *x = X0, *m = kiln_eq(x, x); /* false at NaN */
  if (!isnan(lo)) m = kiln_logical_and(m, kiln_ge_scalar(x, lo));
  if (!isnan(hi)) m = kiln_logical_and(m, kiln_le_scalar(x, hi));
  return keep(m, g);
}
/* Casts between float dtypes: grad.c converts to the input's dtype. */
static kiln_tensor *r_same(grad_inputs *in, int k, kiln_tensor *g) { return g; }

/* ------------------------------------------------------------ binary */

static kiln_tensor *r_sub(grad_inputs *in, int k, kiln_tensor *g) { return k == 0 ? g : kiln_neg(g); }
static kiln_tensor *r_mul(grad_inputs *in, int k, kiln_tensor *g) { return kiln_mul(g, grad_input(in, 1 - k)); }
static kiln_tensor *r_div(grad_inputs *in, int k, kiln_tensor *g) {
  kiln_tensor *b = X1;
  if (k == 0) return kiln_div(g, b);
  return kiln_neg(kiln_div(kiln_mul(g, X0), kiln_mul(b, b)));
}
/* Torch: d/da is 0 where b == 0; d/db is 0 where a == 0 and b >= 0. */
static kiln_tensor *r_pow(grad_inputs *in, int k, kiln_tensor *g) {
  kiln_tensor *a = X0, *b = X1;
  if (k == 0) return keep(kiln_ne_scalar(b, 0), kiln_mul(g, kiln_mul(b, kiln_pow(a, kiln_sub_scalar(b, 1)))));
  kiln_tensor *d = kiln_mul(g, kiln_mul(kiln_pow(a, b), kiln_log(a)));
  return keep(kiln_logical_not(kiln_logical_and(kiln_eq_scalar(a, 0), kiln_ge_scalar(b, 0))), d);
}
/* Torch: ties split the gradient evenly; the smaller (larger) side gets 0. */
static kiln_tensor *extremum(grad_inputs *in, int k, kiln_tensor *g, bool max) {
  kiln_tensor *a = grad_input(in, k), *b = grad_input(in, 1 - k);
  kiln_tensor *loses = max ? kiln_lt(a, b) : kiln_gt(a, b);
  kiln_tensor *split = kiln_where(kiln_eq(a, b), kiln_mul_scalar(g, 0.5), g);
  return keep(kiln_logical_not(loses), split);
}
static kiln_tensor *r_maximum(grad_inputs *in, int k, kiln_tensor *g) { return extremum(in, k, g, true); }
static kiln_tensor *r_minimum(grad_inputs *in, int k, kiln_tensor *g) { return extremum(in, k, g, false); }
static kiln_tensor *r_fmod(grad_inputs *in, int k, kiln_tensor *g) {
  return k == 0 ? g : kiln_neg(kiln_mul(g, kiln_trunc(kiln_div(X0, X1))));
}
static kiln_tensor *r_remainder(grad_inputs *in, int k, kiln_tensor *g) {
  return k == 0 ? g : kiln_neg(kiln_mul(g, kiln_floor(kiln_div(X0, X1))));
}
static kiln_tensor *r_atan2(grad_inputs *in, int k, kiln_tensor *g) {
  kiln_tensor *a = X0, *b = X1;
  kiln_tensor *d = kiln_add(kiln_mul(a, a), kiln_mul(b, b));
  return k == 0 ? kiln_div(kiln_mul(g, b), d) : kiln_neg(kiln_div(kiln_mul(g, a), d));
}
static kiln_tensor *r_where(grad_inputs *in, int k, kiln_tensor *g) {
  kiln_tensor *c = X0;
  return kiln_where(c, k == 1 ? g : zero_like(g), k == 1 ? zero_like(g) : g);
}

/* -------------------------------------------------------- reductions */

static int reduced_dims(const graph_node *n, int *dims) {
  uint32_t mask = graph_attr_reduce_mask(n);
  int nd = 0;
  for (int d = 0; d < n->inputs[0].view.ndim; d++)
    if (mask & (1u << d)) dims[nd++] = d;
  return nd;
}

static kiln_tensor *r_sum(grad_inputs *in, int k, kiln_tensor *g) {
  const graph_view *v = &in->n->inputs[0].view;
  return kiln_expand(g, v->ndim, v->sizes);
}

/* Ties share the gradient evenly (Torch's amax/amin). */
static kiln_tensor *r_extremum(grad_inputs *in, int k, kiln_tensor *g) {
  int dims[KILN_MAX_DIMS], nd = reduced_dims(in->n, dims);
  kiln_tensor *x = X0;
  kiln_tensor *m = in->n->op == GRAPH_OP_AMAX ? kiln_amax(x, nd, dims, true) : kiln_amin(x, nd, dims, true);
  kiln_tensor *hit = kiln_to_dtype(kiln_eq(x, m), kiln_dtype_of(g));
  return kiln_div(kiln_mul(g, hit), kiln_sum(hit, nd, dims, true));
}

/* t reversed along dim (a gather with a descending index). */
static kiln_tensor *flip(kiln_tensor *t, int dim) {
  int64_t n = kiln_size(t, dim);
  return kiln_index_select(t, dim, kiln_arange(KILN_I64, (double)n - 1, -1, -1));
}

/* Products of the elements before each one along the last dim. */
static kiln_tensor *exclusive_cumprod(kiln_tensor *t) {
  int nd = kiln_dim(t);
  int64_t n = kiln_size(t, nd - 1), sizes[KILN_MAX_DIMS];
  memcpy(sizes, kiln_sizes(t), sizeof(int64_t) * (size_t)nd);
  sizes[nd - 1] = 1;
  kiln_tensor *one = kiln_ones(kiln_dtype_of(t), nd, sizes);
  if (n == 1) return one;
  kiln_tensor *parts[2] = {one, kiln_narrow(kiln_cumprod(t, nd - 1), nd - 1, 0, n - 1)};
  return kiln_cat(parts, 2, nd - 1);
}

/* d prod / d x_i = product of the others: exclusive products from the
 * left times from the right (exact with zeros, unlike prod / x). */
static kiln_tensor *r_prod(grad_inputs *in, int k, kiln_tensor *g) {
  int dims[KILN_MAX_DIMS], nd = reduced_dims(in->n, dims), perm[KILN_MAX_DIMS], inv[KILN_MAX_DIMS], np = 0;
  kiln_tensor *x = X0;
  int ndim = kiln_dim(x);
  uint32_t mask = graph_attr_reduce_mask(in->n);
  for (int d = 0; d < ndim; d++)
    if (!(mask & (1u << d))) perm[np++] = d;
  int64_t flat[KILN_MAX_DIMS], r = 1;
  for (int d = 0; d < np; d++) flat[d] = kiln_size(x, perm[d]);
  for (int i = 0; i < nd; i++) r *= kiln_size(x, perm[np++] = dims[i]);
  flat[ndim - nd] = r;
  for (int d = 0; d < ndim; d++) inv[perm[d]] = d;
  kiln_tensor *xr = kiln_reshape(kiln_permute(x, ndim, perm), ndim - nd + 1, flat);
  kiln_tensor *others = kiln_mul(exclusive_cumprod(xr), flip(exclusive_cumprod(flip(xr, -1)), -1));
  int64_t psz[KILN_MAX_DIMS];
  for (int d = 0; d < ndim; d++) psz[d] = kiln_size(x, perm[d]);
  kiln_tensor *back = kiln_permute(kiln_reshape(others, ndim, psz), ndim, inv);
  return kiln_mul(g, back);
}

/* ------------------------------------------------------------- scans */

static int scan_dim(const graph_node *n) {
  uint32_t m = graph_attr_reduce_mask(n);
  int d = 0;
  while (!(m & 1u) && d < 31) m >>= 1, d++;
  return d;
}

/* t's reversed cumsum along d: r_i = sum_{j >= i} t_j. */
static kiln_tensor *rev_cumsum(kiln_tensor *t, int d) { return flip(kiln_cumsum(flip(t, d), d), d); }

static kiln_tensor *r_cumsum(grad_inputs *in, int k, kiln_tensor *g) { return rev_cumsum(g, scan_dim(in->n)); }

/* Largest scanned length whose cumprod gradient is computed exactly, as
 * the n x n products of all elements but one; longer scans use
 * cumprod_long_grad. */
#define CUMPROD_EXACT_MAX 1024

/* Torch's O(n) cumprod gradient along d, exact with zeros: with z the
 * first zero of a scan, grad_i = revcumsum(g * out)_i / x_i for i < z
 * (x_i != 0 there); grad_z = revcumsum(g * cumprod(x with x_z = 1))_z;
 * and 0 after z (every product through z is 0). */
static kiln_tensor *cumprod_long_grad(kiln_tensor *x, kiln_tensor *g, int d) {
  kiln_dtype dt = kiln_dtype_of(x);
  kiln_tensor *one = kiln_scalar(dt, 1), *zero = kiln_scalar(dt, 0);
  kiln_tensor *is0 = kiln_eq_scalar(x, 0), *seen = kiln_cumsum(is0, d); /* zeros up to i (I64) */
  kiln_tensor *before = kiln_eq_scalar(seen, 0), *first = kiln_logical_and(is0, kiln_eq_scalar(seen, 1));
  kiln_tensor *a = kiln_div(rev_cumsum(kiln_mul(g, kiln_cumprod(x, d)), d), kiln_where(before, x, one));
  kiln_tensor *b = rev_cumsum(kiln_mul(g, kiln_cumprod(kiln_where(first, one, x), d)), d);
  return kiln_where(before, a, kiln_where(first, b, zero));
}

static kiln_tensor *r_cumprod(grad_inputs *in, int k, kiln_tensor *g) {
  int d = scan_dim(in->n);
  kiln_tensor *x = X0;
  int64_t n = kiln_size(x, d);
  if (n > CUMPROD_EXACT_MAX) return cumprod_long_grad(x, g, d);
  kiln_tensor *xt = kiln_transpose(x, d, -1), *gt = kiln_transpose(g, d, -1);
  kiln_tensor *i = kiln_arange(KILN_I64, 0, (double)n, 1);
  kiln_tensor *row = kiln_view(i, 2, (int64_t[]){1, n}), *col = kiln_view(i, 2, (int64_t[]){n, 1});
  /* T[..., k, i] = x_i for i != k, 1 at i == k; P = cumprod over i */
  kiln_tensor *t = kiln_where(kiln_eq(row, col), kiln_scalar(kiln_dtype_of(x), 1), kiln_unsqueeze(xt, -2));
  kiln_tensor *p = kiln_cumprod(t, -1);
  /* grad_k = sum_{j >= k} g_j P[k, j] */
  kiln_tensor *terms = keep(kiln_ge(row, col), kiln_mul(p, kiln_unsqueeze(gt, -2)));
  return kiln_transpose(kiln_sum(terms, 1, (int[]){-1}, false), d, -1);
}

/* ---------------------------------------------------- writes, BLAS, index */

/* g over a storage of its own, flat and contiguous from offset 0, so a
 * region (absolute offsets) can be addressed in it. */
static kiln_tensor *own_flat(kiln_tensor *g, int64_t numel) {
  const graph_view *v = &g->view;
  if (v->offset == 0 && graph_view_is_contiguous(v) && g->storage->numel == numel) return g;
  return kiln_clone(g);
}

/* old: everything but the written region; value: the region. */
static kiln_tensor *r_assign(grad_inputs *in, int k, kiln_tensor *g) {
  graph_view r = graph_attr_region(in->n);
  if (k == 1) return kiln_as_strided(own_flat(g, in->n->numel), r.ndim, r.sizes, r.strides, r.offset);
  kiln_tensor *z = kiln_clone(g);
  int st = kiln_fill_(kiln_as_strided(z, r.ndim, r.sizes, r.strides, r.offset), 0);
  return st == KILN_OK ? z : NULL;
}

/* True when v walks its last two dims column-major (a transposed view of
 * a row-major matrix: a linear layer's weight read as W^T). */
static bool column_major(const graph_view *v) {
  int d = v->ndim - 2;
  return d >= 0 && v->sizes[d] > 1 && v->sizes[d + 1] > 1 && v->strides[d] == 1 && v->strides[d + 1] >= v->sizes[d];
}

/* gA = g B^T, gB = A^T g. An operand read column-major gets its gradient
 * as the transpose of the transposed product (gB = (g^T A)^T), so the
 * product is written in the layout of what the operand views: a linear
 * layer's weight gradient lands row-major, as the weight, and the
 * optimizer's update reads it in order (Torch: grad_weight =
 * grad_output.t().mm(input)). The same products, the same values. */
static kiln_tensor *r_matmul(grad_inputs *in, int k, kiln_tensor *g) {
  bool flip = column_major(&in->n->inputs[k].view);
  if (k == 0)
    return flip ? kiln_transpose(kiln_matmul(X1, kiln_transpose(g, -1, -2)), -1, -2)
                : kiln_matmul(g, kiln_transpose(X1, -1, -2));
  return flip ? kiln_transpose(kiln_matmul(kiln_transpose(g, -1, -2), X0), -1, -2)
              : kiln_matmul(kiln_transpose(X0, -1, -2), g);
}

/* src's gradient: g added back at the gathered positions. */
static kiln_tensor *r_gather(grad_inputs *in, int k, kiln_tensor *g) {
  const graph_input *src = &in->n->inputs[0], *ix = &in->n->inputs[1];
  return grad_scatter_add(src->node->dtype, src->view.ndim, src->view.sizes, (int)graph_attr_scalar(in->n), ix->node,
                          &ix->view, g);
}

/* Scatter-add partials [C, *t sizes] (ops.def SCATTER): src element c
 * went to row chunk(c) = c / L (c row-major, L = ceil(N / C)) at c with
 * c[dim] = index[c], so it gets g there: a gather from g with the chunk
 * folded into dim (g's dim C moved next to dim and merged with it, the
 * index shifted by chunk(c) * size(dim)). */
static kiln_tensor *r_scatter(grad_inputs *in, int k, kiln_tensor *g) {
  const graph_node *n = in->n;
  const graph_view *iv = &n->inputs[1].view;
  kiln_tensor *index = X1;
  if (k != 0 || !index || !g) return NULL;
  int nd = n->ndim - 1, dim = (int)graph_attr_scalar(n), perm[KILN_MAX_DIMS];
  int64_t chunks = n->sizes[0], total = graph_view_numel(iv), len = (total + chunks - 1) / chunks;
  int64_t merged[KILN_MAX_DIMS];
  if (chunks == 1) {
    kiln_tensor *g0 = kiln_select(g, 0, 0);
    return g0 ? ops_gather(g0, &g0->view, dim, index, iv, "kiln_grad") : NULL;
  }
  for (int d = 0, j = 0; d < nd; d++) {
    if (d == dim) perm[j++] = 0;
    perm[j++] = d + 1;
    merged[d] = n->sizes[d + 1] * (d == dim ? chunks : 1);
  }
  kiln_tensor *gm = kiln_reshape(kiln_permute(g, nd + 1, perm), nd, merged);
  kiln_tensor *pos = ops_move_like(kiln_view(kiln_arange(KILN_F64, 0, (double)total, 1), nd, iv->sizes), g, "kiln_grad");
  kiln_tensor *chunk = kiln_to_dtype(kiln_floor(kiln_div_scalar(pos, (double)len)), KILN_I64);
  kiln_tensor *at = kiln_add(index, kiln_mul_scalar(chunk, (double)n->sizes[dim + 1]));
  return gm && at ? ops_gather(gm, &gm->view, dim, at, &at->view, "kiln_grad") : NULL;
}

/* A collective's gradient is another collective (dist/collectives.c). */
static kiln_tensor *r_collective(grad_inputs *in, int k, kiln_tensor *g) { return dist_grad(in->n, g); }

/* X = solve(A, B): gB = solve(A^T, g), gA = -gB X^T (Torch's
 * linalg_solve_backward), X read back, or solved again when the result
 * is gone. */
static kiln_tensor *r_solve(grad_inputs *in, int k, kiln_tensor *g) {
  kiln_tensor *gb = kiln_linalg_solve(kiln_transpose(X0, -1, -2), g);
  if (k == 1) return gb;
  kiln_tensor *x = grad_has_output(in->n) ? grad_output(in) : kiln_linalg_solve(X0, X1);
  return kiln_neg(kiln_matmul(gb, kiln_transpose(x, -1, -2)));
}

/* q's, kv's (the ATTENTION_BWD node both share) or a float mask's. */
static kiln_tensor *r_attention(grad_inputs *in, int k, kiln_tensor *g) {
  kiln_tensor *x[3] = {X0, X1, grad_n_inputs(in->n) > 2 ? grad_input(in, 2) : NULL};
  kiln_tensor *fwd = grad_has_output(in->n) ? grad_output(in) : NULL;
  return ops_attention_grad(in->n, x, fwd, g, &in->joint, k, "kiln_grad");
}

/* ------------------------------------------------------------- table */

static const grad_rule_fn rules[GRAPH_OP_COUNT] = {
    [GRAPH_OP_CAST] = r_same,         [GRAPH_OP_NEG] = r_neg,       [GRAPH_OP_ABS] = r_abs,
    [GRAPH_OP_EXP] = r_exp,           [GRAPH_OP_EXP2] = r_exp2,     [GRAPH_OP_LOG] = r_log,
    [GRAPH_OP_LOG2] = r_log2,         [GRAPH_OP_LOG1P] = r_log1p,   [GRAPH_OP_EXPM1] = r_expm1,
    [GRAPH_OP_SQRT] = r_sqrt,         [GRAPH_OP_RSQRT] = r_rsqrt,   [GRAPH_OP_RECIPROCAL] = r_reciprocal,
    [GRAPH_OP_SIN] = r_sin,           [GRAPH_OP_COS] = r_cos,       [GRAPH_OP_TAN] = r_tan,
    [GRAPH_OP_TANH] = r_tanh,         [GRAPH_OP_SIGMOID] = r_sigmoid, [GRAPH_OP_RELU] = r_relu,
    [GRAPH_OP_GELU] = r_gelu,         [GRAPH_OP_SILU] = r_silu,     [GRAPH_OP_ERF] = r_erf,
    [GRAPH_OP_ASIN] = r_asin,         [GRAPH_OP_ACOS] = r_acos,     [GRAPH_OP_ATAN] = r_atan,
    [GRAPH_OP_SINH] = r_sinh,         [GRAPH_OP_COSH] = r_cosh,     [GRAPH_OP_ASINH] = r_asinh,
    [GRAPH_OP_ACOSH] = r_acosh,       [GRAPH_OP_ATANH] = r_atanh,
    [GRAPH_OP_CLAMP] = r_clamp,       [GRAPH_OP_ADD] = r_same,      [GRAPH_OP_SUB] = r_sub,
    [GRAPH_OP_MUL] = r_mul,           [GRAPH_OP_DIV] = r_div,       [GRAPH_OP_POW] = r_pow,
    [GRAPH_OP_MAXIMUM] = r_maximum,   [GRAPH_OP_MINIMUM] = r_minimum, [GRAPH_OP_FMOD] = r_fmod,
    [GRAPH_OP_REMAINDER] = r_remainder, [GRAPH_OP_ATAN2] = r_atan2, [GRAPH_OP_WHERE] = r_where,
    [GRAPH_OP_SUM] = r_sum,           [GRAPH_OP_PROD] = r_prod,     [GRAPH_OP_AMAX] = r_extremum,
    [GRAPH_OP_AMIN] = r_extremum,     [GRAPH_OP_CUMSUM] = r_cumsum, [GRAPH_OP_CUMPROD] = r_cumprod,
    [GRAPH_OP_ASSIGN] = r_assign,     [GRAPH_OP_MATMUL] = r_matmul, [GRAPH_OP_GATHER] = r_gather,
    [GRAPH_OP_SCATTER] = r_scatter,   [GRAPH_OP_ALL_REDUCE] = r_collective,
    [GRAPH_OP_ALL_GATHER] = r_collective, [GRAPH_OP_REDUCE_SCATTER] = r_collective,
    [GRAPH_OP_BROADCAST] = r_collective, [GRAPH_OP_SOLVE] = r_solve,
    [GRAPH_OP_ATTENTION] = r_attention,
};

grad_rule_fn grad_rule_of(graph_op op) { return (unsigned)op < GRAPH_OP_COUNT ? rules[op] : NULL; }

bool grad_edge(const graph_node *n, int k) {
  const graph_node *in = n->inputs[k].node;
  if (n->no_grad || !in || n->inputs[k].no_grad || n->inputs[k].order_only || !graph_is_float(in->dtype) ||
      !graph_is_float(n->dtype))
    return false;
  if (n->opaque) return true; /* followed so that kiln_grad can say it has no derivative */
  if (!graph_op_is_differentiable(n->op)) return false;
  if (n->op == GRAPH_OP_WHERE && k == 0) return false;
  return !((n->op == GRAPH_OP_GATHER || n->op == GRAPH_OP_SCATTER) && k == 1); /* the index */
}
