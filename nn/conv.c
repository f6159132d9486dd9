/*
 * conv.c — convolution and transposed convolution (kiln_conv,
 * kiln_conv_transpose), 1-, 2- and 3-D, with groups, stride, padding and
 * dilation: torch.nn.functional.conv{1,2,3}d / conv_transpose{1,2,3}d.
 *
 * Both are compositions of graph nodes, so they fuse with what is around
 * them and get their gradients from the rules of their parts:
 *
 *   conv: x [N, C, *S] is zero-padded (a fresh [N, C, *P] storage whose
 *   interior is written by one kernel; none when there is no padding).
 *   Its windows are a view (as_strided, no copy):
 *       [G, C/G, *K, N, *Out]   strides (C/G·c, c, d·s_sp ..., n, stride·s_sp ...)
 *   reshaped to the column matrix [G, C/G·ΠK, N·ΠOut] — a lazy copy
 *   (kiln_reshape) that is never written when the generated GEMM runs
 *   the product: implicit GEMM. The fuser leaves that copy pending and
 *   the GEMM's packing reads its panels straight from the padded input
 *   through the window view, split as [G] · [C/G, *K] · [N, *Out]
 *   (graph/view_split.c, runtime/gemm_pack.c). Under OpenBLAS
 *   (KILN_GEMM=blas, the cuda backends) the copy is realized as before:
 *   im2col, a generated gather kernel. The weight [O, C/G, *K] is read
 *   as [G, O/G, C/G·ΠK]; one GEMM per group gives
 *   [G, O/G, N·ΠOut], plus the bias viewed [G, O/G, 1], which is
 *   [N, O, *Out] through a permuted view; whatever elementwise op reads
 *   the result (an activation, pooling) reads the GEMM's output through
 *   that view. The bias is added before the view so that its gradient
 *   is a row sum of the output gradient in the GEMM's layout: the
 *   output gradient (relu' and the pooling's, NCHW) is then read only by
 *   the reshape copy to [G, O/G, N·ΠOut], which the fuser writes with
 *   it fused in (fuse.c, packs_through), so both GEMMs of the backward
 *   and the bias's sum read contiguous rows.
 *
 *   conv_transpose: the GEMM W^T·x gives columns [G, Co/G·ΠK, N·ΠIn];
 *   they are added into the output through the same window view of its
 *   storage (col2im: the adjoint of a conv's window read, grad_view_add:
 *   for stride 1 one kernel summing the columns' shifted slices, else
 *   one strided add per kernel offset), and the padding is cropped (a view).
 *
 * The weight's gradient comes from the GEMM (columns^T: the same pending
 * copy, read through transposed; the output gradient as [G, O/G,
 * N·ΠOut] is another reshape copy, read through as A when the gradient
 * is a buffer, written when it is an elementwise chain), the input's from
 * the transposed GEMM and the adjoint of the window view — a
 * conv_transpose, as it should be (it keeps that adjoint: the col2im
 * add is no copy of the columns but their sum).
 */
#include <stdio.h>
#include <string.h>

#include "nn_internal.h"

/* The parameters of one call, checked. */
typedef struct conv_args {
  int nd;
  int64_t stride[3], pad[3], dil[3], outpad[3], k[3];
  int64_t groups;
} conv_args;

static bool read_params(conv_args *a, int nd, const int64_t *stride, const int64_t *padding, const int64_t *dilation,
                        const int64_t *output_padding, int64_t groups, const char *fn) {
  if (nd < 1 || nd > 3) {
    api_error(KILN_ERR_ARG, fn, "nd must be 1, 2 or 3, got %d", nd);
    return false;
  }
  a->nd = nd;
  a->groups = groups;
  if (groups < 1) {
    api_error(KILN_ERR_ARG, fn, "groups must be positive, got %lld", (long long)groups);
    return false;
  }
  for (int i = 0; i < nd; i++) {
    a->stride[i] = stride ? stride[i] : 1;
    a->pad[i] = padding ? padding[i] : 0;
    a->dil[i] = dilation ? dilation[i] : 1;
    a->outpad[i] = output_padding ? output_padding[i] : 0;
    const char *bad = a->stride[i] < 1 ? "stride must be positive"
                      : a->pad[i] < 0  ? "padding must not be negative"
                      : a->dil[i] < 1  ? "dilation must be positive"
                                       : NULL;
    if (bad) {
      api_error(KILN_ERR_ARG, fn, "%s (stride %lld, padding %lld, dilation %lld at spatial dim %d)", bad,
                (long long)a->stride[i], (long long)a->pad[i], (long long)a->dil[i], i);
      return false;
    }
    if (a->outpad[i] < 0 || (a->outpad[i] >= a->stride[i] && a->outpad[i] >= a->dil[i])) {
      api_error(KILN_ERR_ARG, fn, "output padding %lld must be smaller than either stride (%lld) or dilation (%lld)",
                (long long)a->outpad[i], (long long)a->stride[i], (long long)a->dil[i]);
      return false;
    }
  }
  return true;
}

/* input [N, C, *S] or [C, *S] (then *batched is false) and weight
 * [w0, w1, *K], both float of one dtype, bias [bias_len] of it or NULL. */
static bool check_tensors(kiln_tensor *input, kiln_tensor *weight, kiln_tensor *bias, conv_args *a, bool *batched,
                          const char *fn) {
  if (!api_check(input, fn, "input") || !api_check(weight, fn, "weight")) return false;
  if (bias && !api_check(bias, fn, "bias")) return false;
  int nd = a->nd, in = input->view.ndim;
  if (in != nd + 1 && in != nd + 2) {
    api_error(KILN_ERR_SHAPE, fn, "expected a %d-D (unbatched) or %d-D (batched) input for %d spatial dims, got %d-D",
              nd + 1, nd + 2, nd, in);
    return false;
  }
  if (weight->view.ndim != nd + 2) {
    api_error(KILN_ERR_SHAPE, fn, "expected a %d-D weight, got %d-D", nd + 2, weight->view.ndim);
    return false;
  }
  *batched = in == nd + 2;
  kiln_dtype dt = input->storage->dtype;
  if (!graph_is_float(dt)) {
    api_error(KILN_ERR_DTYPE, fn, "needs a float input, got %s", graph_dtypes[dt].name);
    return false;
  }
  if (weight->storage->dtype != dt || (bias && bias->storage->dtype != dt)) {
    api_error(KILN_ERR_DTYPE, fn, "input (%s), weight (%s) and bias (%s) must have the same dtype", graph_dtypes[dt].name,
              graph_dtypes[weight->storage->dtype].name, bias ? graph_dtypes[bias->storage->dtype].name : "none");
    return false;
  }
  for (int i = 0; i < nd; i++) a->k[i] = weight->view.sizes[2 + i];
  return true;
}

/* x [N, C, *S] zero-padded by a->pad: a fresh contiguous storage, or x
 * itself when there is no padding. New reference. */
static kiln_tensor *zero_pad(kiln_tensor *x, const conv_args *a) {
  bool any = false;
  for (int i = 0; i < a->nd; i++) any = any || a->pad[i] > 0;
  if (!any) return kiln_retain(x);
  int nd = x->view.ndim;
  int64_t sizes[KILN_MAX_DIMS];
  memcpy(sizes, x->view.sizes, sizeof *sizes * (size_t)nd);
  for (int i = 0; i < a->nd; i++) sizes[2 + i] += 2 * a->pad[i];
  kiln_tensor *z = kiln_zeros(x->storage->dtype, nd, sizes), *inner = z;
  kiln_scope_begin();
  for (int i = 0; i < a->nd && inner; i++) inner = kiln_narrow(inner, 2 + i, a->pad[i], x->view.sizes[2 + i]);
  int st = inner ? kiln_copy_(inner, x) : api_status();
  kiln_scope_end();
  if (st != KILN_OK) {
    kiln_release(z);
    return NULL;
  }
  return z;
}

/* The window view [G, C/G, *K, N, *Out] of p ([N, C, *P], any strides):
 * element (g, c, k, n, o) is p[n, g·C/G + c, o·stride + k·dil]. */
static graph_view windows(const graph_view *p, const conv_args *a, const int64_t *out) {
  int nd = a->nd, j = 0;
  int64_t cg = p->sizes[1] / a->groups;
  graph_view w = {.ndim = 2 * nd + 3, .offset = p->offset};
  w.sizes[j] = a->groups, w.strides[j++] = cg * p->strides[1];
  w.sizes[j] = cg, w.strides[j++] = p->strides[1];
  for (int i = 0; i < nd; i++) w.sizes[j] = a->k[i], w.strides[j++] = a->dil[i] * p->strides[2 + i];
  w.sizes[j] = p->sizes[0], w.strides[j++] = p->strides[0];
  for (int i = 0; i < nd; i++) w.sizes[j] = out[i], w.strides[j++] = a->stride[i] * p->strides[2 + i];
  return w;
}

static int64_t prod(const int64_t *v, int n) {
  int64_t r = 1;
  for (int i = 0; i < n; i++) r *= v[i];
  return r;
}

/* [G, O/G, N·ΠOut] (a GEMM's output) as [N, O, *Out] (a view). */
static kiln_tensor *gemm_to_nchw(kiln_tensor *y, int64_t n, int64_t o, const conv_args *a, const int64_t *out) {
  int nd = a->nd;
  int64_t split[KILN_MAX_DIMS] = {a->groups, o / a->groups, n}, merged[KILN_MAX_DIMS] = {n, o};
  int perm[KILN_MAX_DIMS] = {2, 0, 1};
  for (int i = 0; i < nd; i++) split[3 + i] = out[i], merged[2 + i] = out[i], perm[3 + i] = 3 + i;
  kiln_tensor *v = kiln_permute(kiln_view(y, nd + 3, split), nd + 3, perm);
  return kiln_reshape(v, nd + 2, merged);
}

/* y [N, O, *Out] + bias viewed [1, O, 1, ...]. */
static kiln_tensor *add_bias(kiln_tensor *y, kiln_tensor *bias, int nd) {
  if (!bias) return y;
  int64_t shape[KILN_MAX_DIMS] = {1, kiln_numel(bias)};
  for (int i = 0; i < nd; i++) shape[2 + i] = 1;
  return kiln_add(y, kiln_view(bias, nd + 2, shape));
}

static kiln_tensor *conv_impl(kiln_tensor *x, kiln_tensor *weight, kiln_tensor *bias, const conv_args *a,
                              const char *fn) {
  int nd = a->nd;
  int64_t n = x->view.sizes[0], c = x->view.sizes[1], o = weight->view.sizes[0], g = a->groups, out[3] = {0};
  if (c % g || o % g || weight->view.sizes[1] != c / g) {
    api_error(KILN_ERR_SHAPE, fn,
              "weight [%lld, %lld, ...] does not fit %lld input channels in %lld groups (expected [O, %lld, ...] with O "
              "divisible by groups)",
              (long long)o, (long long)weight->view.sizes[1], (long long)c, (long long)g, (long long)(c / g));
    return NULL;
  }
  if (bias && (bias->view.ndim != 1 || bias->view.sizes[0] != o)) {
    api_error(KILN_ERR_SHAPE, fn, "bias must be [%lld]", (long long)o);
    return NULL;
  }
  for (int i = 0; i < nd; i++) {
    int64_t padded = x->view.sizes[2 + i] + 2 * a->pad[i], span = a->dil[i] * (a->k[i] - 1) + 1;
    if (a->k[i] < 1 || span > padded) {
      api_error(KILN_ERR_SHAPE, fn, "kernel size %lld (dilated: %lld) exceeds the padded input size %lld at spatial dim %d",
                (long long)a->k[i], (long long)span, (long long)padded, i);
      return NULL;
    }
    out[i] = (padded - span) / a->stride[i] + 1;
  }
  kiln_tensor *p = zero_pad(x, a);
  if (!p) return NULL;
  graph_view wv = windows(&p->view, a, out);
  int64_t cols_shape[3] = {g, c / g * prod(a->k, nd), n * prod(out, nd)};
  int64_t w_shape[3] = {g, o / g, c / g * prod(a->k, nd)};
  kiln_tensor *win = kiln_as_strided(p, wv.ndim, wv.sizes, wv.strides, wv.offset);
  kiln_tensor *cols = kiln_reshape(win, 3, cols_shape);
  kiln_tensor *y = kiln_matmul(kiln_reshape(weight, 3, w_shape), cols);
  kiln_release(p);
  if (bias) y = kiln_add(y, kiln_view(bias, 3, (int64_t[]){g, o / g, 1}));
  return gemm_to_nchw(y, n, o, a, out);
}

/* x [N, Ci, *In] -> [N, Co, *Out]; weight [Ci, Co/G, *K]. */
static kiln_tensor *conv_transpose_impl(kiln_tensor *x, kiln_tensor *weight, kiln_tensor *bias, const conv_args *a,
                                        const char *fn) {
  int nd = a->nd;
  int64_t n = x->view.sizes[0], ci = x->view.sizes[1], g = a->groups, co = weight->view.sizes[1] * g;
  int64_t full[3] = {0}, out[3] = {0}, in[3] = {0};
  if (ci % g || weight->view.sizes[0] != ci) {
    api_error(KILN_ERR_SHAPE, fn, "weight [%lld, %lld, ...] does not fit %lld input channels in %lld groups (expected [%lld, Co/groups, ...])",
              (long long)weight->view.sizes[0], (long long)weight->view.sizes[1], (long long)ci, (long long)g, (long long)ci);
    return NULL;
  }
  if (bias && (bias->view.ndim != 1 || bias->view.sizes[0] != co)) {
    api_error(KILN_ERR_SHAPE, fn, "bias must be [%lld]", (long long)co);
    return NULL;
  }
  for (int i = 0; i < nd; i++) {
    in[i] = x->view.sizes[2 + i];
    full[i] = (in[i] - 1) * a->stride[i] + a->dil[i] * (a->k[i] - 1) + 1 + a->outpad[i];
    out[i] = full[i] - 2 * a->pad[i];
    if (a->k[i] < 1 || out[i] < 1) {
      api_error(KILN_ERR_SHAPE, fn, "the output size at spatial dim %d would be %lld (input %lld, kernel %lld, padding %lld)",
                i, (long long)out[i], (long long)in[i], (long long)a->k[i], (long long)a->pad[i]);
      return NULL;
    }
  }
  kiln_scope_begin();
  /* columns [G, Co/G·ΠK, N·ΠIn] = W^T x per group */
  int64_t wg[3] = {g, ci / g, co / g * prod(a->k, nd)}, xs[KILN_MAX_DIMS] = {n, g, ci / g, prod(in, nd)};
  int64_t xg[3] = {g, ci / g, n * prod(in, nd)};
  int perm[4] = {1, 2, 0, 3};
  kiln_tensor *wt = kiln_transpose(kiln_reshape(weight, 3, wg), 1, 2);
  kiln_tensor *xm = kiln_reshape(kiln_permute(kiln_reshape(x, 4, xs), 4, perm), 3, xg);
  kiln_tensor *cols = kiln_matmul(wt, xm);
  /* col2im: added into the full output [N, Co, *Full] through its window view */
  int64_t fsizes[KILN_MAX_DIMS] = {n, co};
  for (int i = 0; i < nd; i++) fsizes[2 + i] = full[i];
  graph_view fv = graph_view_contiguous(nd + 2, fsizes);
  graph_view wv = windows(&fv, a, in);
  kiln_tensor *y = cols ? grad_view_add(x->storage->dtype, prod(fsizes, nd + 2), &wv, cols, fn) : NULL;
  y = kiln_view(y, nd + 2, fsizes);
  for (int i = 0; i < nd && y; i++) y = kiln_narrow(y, 2 + i, a->pad[i], out[i]);
  y = add_bias(y, bias, nd);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

/* Runs impl on input with a batch dim (added and removed when missing). */
static kiln_tensor *batched_call(kiln_tensor *input, kiln_tensor *weight, kiln_tensor *bias, const conv_args *a,
                                 bool batched,
                                 kiln_tensor *(*impl)(kiln_tensor *, kiln_tensor *, kiln_tensor *, const conv_args *,
                                                      const char *),
                                 const char *fn) {
  kiln_scope_begin();
  kiln_tensor *x = batched ? input : kiln_unsqueeze(input, 0);
  kiln_tensor *y = x ? impl(x, weight, bias, a, fn) : NULL;
  if (y && !batched) y = kiln_squeeze_dim(y, 0);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

KILN_API kiln_tensor *kiln_conv(kiln_tensor *input, kiln_tensor *weight, kiln_tensor *bias, int nd,
                                const int64_t *stride, const int64_t *padding, const int64_t *dilation,
                                int64_t groups) {
  const char *fn = "kiln_conv";
  conv_args a;
  bool batched;
  if (!read_params(&a, nd, stride, padding, dilation, NULL, groups, fn)) return NULL;
  if (!check_tensors(input, weight, bias, &a, &batched, fn)) return NULL;
  return batched_call(input, weight, bias, &a, batched, conv_impl, fn);
}

KILN_API kiln_tensor *kiln_conv_transpose(kiln_tensor *input, kiln_tensor *weight, kiln_tensor *bias, int nd,
                                          const int64_t *stride, const int64_t *padding,
                                          const int64_t *output_padding, int64_t groups, const int64_t *dilation) {
  const char *fn = "kiln_conv_transpose";
  conv_args a;
  bool batched;
  if (!read_params(&a, nd, stride, padding, dilation, output_padding, groups, fn)) return NULL;
  if (!check_tensors(input, weight, bias, &a, &batched, fn)) return NULL;
  return batched_call(input, weight, bias, &a, batched, conv_transpose_impl, fn);
}
