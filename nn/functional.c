/*
 * nn_functional.c — torch.nn.functional (1.13) layers and activations
 * composed from lazy graph ops: leaky_relu, elu, selu, softplus,
 * gelu's tanh form, softsign, prelu, glu, pixel_shuffle, embedding,
 * linear and dropout. The losses are in loss.c.
 *
 * Every op is written as a user would write it from Kiln's public ops, so
 * it fuses (an activation is one elementwise kernel, or folds into its
 * producer's or consumer's kernel) and kiln_grad differentiates it with
 * the existing rules (autograd/grad_rules.c): no op of its own in
 * graph/ops.def. Float inputs only, as Torch's kernels (BOOL and integers
 * are KILN_ERR_DTYPE); F16/BF16 compute in F32 and round once at the end,
 * as nn.c does.
 *
 * Branches are where(cond, a, b) over both sides. Where the side not
 * taken can overflow (exp of a large x in elu and softplus), its argument
 * is replaced by 0 there first: where's gradient sends 0 to the side not
 * taken, and 0 * inf would be NaN. The conditions are Torch's (x > 0 for
 * leaky_relu, elu, prelu; x * beta > threshold for softplus), so the
 * gradient at the kink is Torch's too (the negative side's at x == 0).
 *
 * embedding and dropout read or make data on the host at call time: the
 * indices are forced and range-checked (ops_index_check, as the index ops:
 * an error records nothing), dropout's mask is drawn from Kiln's generator
 * (creation.c, kiln_manual_seed) into a buffer now; the values stay lazy.
 */
#include <math.h>

#include "nn_internal.h"

/* Arguments b (named arg) has a's dtype, as Torch requires. */
static bool check_same_dtype(const kiln_tensor *a, const kiln_tensor *b, const char *an, const char *bn,
                             const char *fn) {
  kiln_dtype da = a->storage->dtype, db = b->storage->dtype;
  if (da == db) return true;
  api_error(KILN_ERR_DTYPE, fn, "%s dtype %s and %s dtype %s differ (convert one with kiln_to_dtype)", an,
            graph_dtypes[da].name, bn, graph_dtypes[db].name);
  return false;
}

/* A 0-d tensor of x's dtype holding v. */
static kiln_tensor *constant(kiln_tensor *x, double v) { return kiln_scalar(kiln_dtype_of(x), v); }

/* ---------------------------------------------------------- activations */

typedef kiln_tensor *(*act_body)(kiln_tensor *x, const double *p);

/* body(widened t, p), rounded to t's dtype: checks, scope, F16/BF16. */
static kiln_tensor *activation(kiln_tensor *t, act_body body, const double *p, const char *fn) {
  if (!api_check(t, fn, "t") || !nn_check_float(t, fn, "t")) return NULL;
  kiln_dtype dtype = t->storage->dtype;
  kiln_scope_begin(); /* owns the intermediates */
  kiln_tensor *y = kiln_to_dtype(body(nn_widen(t), p), dtype);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

/* x > 0 ? x : x * slope */
static kiln_tensor *leaky_body(kiln_tensor *x, const double *p) {
  return kiln_where(kiln_gt_scalar(x, 0), x, kiln_mul_scalar(x, p[0]));
}

/* x > 0 ? x * scale : expm1(x) * alpha * scale (p = alpha, scale) */
static kiln_tensor *elu_body(kiln_tensor *x, const double *p) {
  kiln_tensor *pos = kiln_gt_scalar(x, 0);
  kiln_tensor *neg = kiln_where(pos, constant(x, 0), x); /* expm1 of no large x */
  kiln_tensor *e = kiln_mul_scalar(kiln_expm1(neg), p[0] * p[1]);
  return kiln_where(pos, p[1] == 1 ? x : kiln_mul_scalar(x, p[1]), e);
}

/* x * beta > threshold ? x : log1p(exp(x * beta)) / beta (p = beta, threshold) */
static kiln_tensor *softplus_body(kiln_tensor *x, const double *p) {
  kiln_tensor *xb = p[0] == 1 ? x : kiln_mul_scalar(x, p[0]);
  kiln_tensor *lin = kiln_gt_scalar(xb, p[1]);
  kiln_tensor *safe = kiln_where(lin, constant(x, 0), xb); /* exp of no large x */
  kiln_tensor *soft = kiln_log1p(kiln_exp(safe));
  if (p[0] != 1) soft = kiln_div_scalar(soft, p[0]);
  return kiln_where(lin, x, soft);
}

/* 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), Torch's
 * approximate='tanh' (aten GeluKernel: kBeta = sqrt(2) * 2 / sqrt(pi) / 2) */
static kiln_tensor *gelu_tanh_body(kiln_tensor *x, const double *p) {
  (void)p;
  const double beta = 0.79788456080286535587989211986876, kappa = 0.044715;
  kiln_tensor *inner = kiln_mul_scalar(kiln_add(x, kiln_mul_scalar(kiln_mul(kiln_mul(x, x), x), kappa)), beta);
  return kiln_mul(kiln_mul_scalar(x, 0.5), kiln_add_scalar(kiln_tanh(inner), 1));
}

/* x / (1 + |x|) */
static kiln_tensor *softsign_body(kiln_tensor *x, const double *p) {
  (void)p;
  return kiln_div(x, kiln_add_scalar(kiln_abs(x), 1));
}

KILN_API kiln_tensor *kiln_leaky_relu(kiln_tensor *t, double negative_slope) {
  return activation(t, leaky_body, (double[]){negative_slope}, "kiln_leaky_relu");
}

KILN_API kiln_tensor *kiln_elu(kiln_tensor *t, double alpha) {
  return activation(t, elu_body, (double[]){alpha, 1.0}, "kiln_elu");
}

/* Torch's constants (torch/nn/functional.py, aten Activation.cpp). */
#define SELU_ALPHA 1.6732632423543772848170429916717
#define SELU_SCALE 1.0507009873554804934193349852946

KILN_API kiln_tensor *kiln_selu(kiln_tensor *t) {
  return activation(t, elu_body, (double[]){SELU_ALPHA, SELU_SCALE}, "kiln_selu");
}

KILN_API kiln_tensor *kiln_softplus(kiln_tensor *t, double beta, double threshold) {
  return activation(t, softplus_body, (double[]){beta, threshold}, "kiln_softplus");
}

KILN_API kiln_tensor *kiln_gelu_tanh(kiln_tensor *t) { return activation(t, gelu_tanh_body, NULL, "kiln_gelu_tanh"); }

KILN_API kiln_tensor *kiln_softsign(kiln_tensor *t) { return activation(t, softsign_body, NULL, "kiln_softsign"); }

/* ---------------------------------------------------- prelu, glu, shuffle */

KILN_API kiln_tensor *kiln_prelu(kiln_tensor *t, kiln_tensor *weight) {
  const char *fn = "kiln_prelu";
  if (!api_check(t, fn, "t") || !api_check(weight, fn, "weight")) return NULL;
  if (!nn_check_float(t, fn, "t") || !check_same_dtype(t, weight, "t", "weight", fn)) return NULL;
  int nd = t->view.ndim;
  char s[256];
  if (weight->view.ndim > 1) {
    api_error(KILN_ERR_SHAPE, fn, "weight must be 0-d or 1-D, got sizes %s",
              api_fmt_sizes(s, sizeof s, weight->view.ndim, weight->view.sizes));
    return NULL;
  }
  int64_t channels = nd >= 2 ? t->view.sizes[1] : 1, /* 0-d and 1-D: one channel */
          nw = graph_view_numel(&weight->view);
  if (nw != 1 && nw != channels) {
    api_error(KILN_ERR_SHAPE, fn, "weight has %lld elements but t (sizes %s) has %lld channels (dim 1); expected 1 or %lld",
              (long long)nw, api_fmt_sizes(s, sizeof s, nd, t->view.sizes), (long long)channels, (long long)channels);
    return NULL;
  }
  kiln_dtype dtype = t->storage->dtype;
  kiln_scope_begin();
  /* weight [C] read as [C, 1, ..., 1] against t's dims 1.. (or as one value) */
  int64_t ws[KILN_MAX_DIMS];
  int wnd = nw == 1 ? 0 : nd - 1;
  for (int d = 0; d < wnd; d++) ws[d] = d == 0 ? nw : 1;
  kiln_tensor *x = nn_widen(t), *w = nn_widen(kiln_reshape(weight, wnd, ws));
  kiln_tensor *y = kiln_where(kiln_gt_scalar(x, 0), x, kiln_mul(w, x));
  y = kiln_to_dtype(y, dtype);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

KILN_API kiln_tensor *kiln_glu(kiln_tensor *t, int dim) {
  const char *fn = "kiln_glu";
  if (!api_check(t, fn, "t") || !nn_check_float(t, fn, "t")) return NULL;
  if (t->view.ndim == 0) {
    api_error(KILN_ERR_SHAPE, fn, "t is 0-d: there is no dim to halve");
    return NULL;
  }
  int d = api_wrap_dim(dim, t->view.ndim, fn);
  if (d < 0) return NULL;
  int64_t n = t->view.sizes[d];
  if (n % 2 != 0) {
    api_error(KILN_ERR_SHAPE, fn, "halving dim %d must be of even size, but it is of size %lld", d, (long long)n);
    return NULL;
  }
  kiln_dtype dtype = t->storage->dtype;
  kiln_scope_begin();
  kiln_tensor *x = nn_widen(t);
  kiln_tensor *y = kiln_mul(kiln_narrow(x, d, 0, n / 2), kiln_sigmoid(kiln_narrow(x, d, n / 2, n / 2)));
  y = kiln_to_dtype(y, dtype);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

/* [*, C*r*r, H, W] -> view [*, C, r, r, H, W] -> permute [*, C, H, r, W, r]
 * -> reshape [*, C, H*r, W*r] (the one copy, unless r == 1). Any dtype:
 * elements only move. */
KILN_API kiln_tensor *kiln_pixel_shuffle(kiln_tensor *t, int64_t upscale_factor) {
  const char *fn = "kiln_pixel_shuffle";
  if (!api_check(t, fn, "t")) return NULL;
  int nd = t->view.ndim, L = nd - 3;
  int64_t r = upscale_factor;
  if (nd < 3) {
    api_error(KILN_ERR_SHAPE, fn, "t must have at least 3 dims [*, C, H, W], got %d", nd);
    return NULL;
  }
  if (r <= 0 || r > (int64_t)1 << 31) {
    api_error(KILN_ERR_ARG, fn, "upscale_factor %lld must be positive (and at most 2^31)", (long long)r);
    return NULL;
  }
  const int64_t *sz = t->view.sizes;
  if (sz[L] % (r * r) != 0) {
    api_error(KILN_ERR_SHAPE, fn, "channels (dim %d, size %lld) are not divisible by upscale_factor^2 = %lld", L,
              (long long)sz[L], (long long)(r * r));
    return NULL;
  }
  if (nd + 2 > KILN_MAX_DIMS) {
    api_error(KILN_ERR_SHAPE, fn, "t has %d dims; at most %d are supported", nd, KILN_MAX_DIMS - 2);
    return NULL;
  }
  int64_t split[KILN_MAX_DIMS], out[KILN_MAX_DIMS];
  int perm[KILN_MAX_DIMS];
  for (int d = 0; d < L; d++) split[d] = out[d] = sz[d], perm[d] = d;
  int64_t c = sz[L] / (r * r), h = sz[L + 1], w = sz[L + 2];
  split[L] = c, split[L + 1] = r, split[L + 2] = r, split[L + 3] = h, split[L + 4] = w;
  perm[L] = L, perm[L + 1] = L + 3, perm[L + 2] = L + 1, perm[L + 3] = L + 4, perm[L + 4] = L + 2;
  out[L] = c, out[L + 1] = h * r, out[L + 2] = w * r;
  if (!api_check_sizes(nd, out, fn)) return NULL;
  kiln_scope_begin();
  kiln_tensor *y = kiln_reshape(kiln_permute(kiln_reshape(t, nd + 2, split), nd + 2, perm), nd, out);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

/* ---------------------------------------------------- embedding, linear */

KILN_API kiln_tensor *kiln_embedding(kiln_tensor *weight, kiln_tensor *indices) {
  const char *fn = "kiln_embedding";
  if (!api_check(weight, fn, "weight") || !api_check(indices, fn, "indices")) return NULL;
  char s[256];
  if (weight->view.ndim != 2) {
    api_error(KILN_ERR_SHAPE, fn, "weight must be 2-D [num_embeddings, embedding_dim], got sizes %s",
              api_fmt_sizes(s, sizeof s, weight->view.ndim, weight->view.sizes));
    return NULL;
  }
  kiln_dtype it = indices->storage->dtype;
  if (it != KILN_I64 && it != KILN_I32) {
    api_error(KILN_ERR_DTYPE, fn, "indices dtype %s is not i64 or i32", graph_dtypes[it].name);
    return NULL;
  }
  int ni = indices->view.ndim;
  if (ni + 1 > KILN_MAX_DIMS) {
    api_error(KILN_ERR_SHAPE, fn, "indices have %d dims; at most %d are supported", ni, KILN_MAX_DIMS - 1);
    return NULL;
  }
  if (!ops_index_check(indices, fn, 0, weight->view.sizes[0], false)) return NULL;
  int64_t n = graph_view_numel(&indices->view), dsz = weight->view.sizes[1], out[KILN_MAX_DIMS];
  for (int d = 0; d < ni; d++) out[d] = indices->view.sizes[d];
  out[ni] = dsz;
  kiln_scope_begin();
  /* the indices as a column [n, 1] spread over [n, D] (stride 0 along D) */
  kiln_tensor *flat = ni == 1 ? indices : kiln_reshape(indices, 1, &n), *y = NULL;
  if (flat) {
    graph_view iv = {.ndim = 2, .sizes = {n, dsz}, .strides = {flat->view.strides[0], 0}, .offset = flat->view.offset};
    kiln_tensor *g = ops_gather(weight, &weight->view, 0, flat, &iv, fn);
    y = g ? kiln_view(g, ni + 1, out) : NULL;
  }
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

KILN_API kiln_tensor *kiln_linear(kiln_tensor *input, kiln_tensor *weight, kiln_tensor *bias) {
  const char *fn = "kiln_linear";
  if (!api_check(input, fn, "input") || !api_check(weight, fn, "weight")) return NULL;
  if (!bias && kiln_last_status() != KILN_OK) return NULL; /* a NULL bias, but not after an error */
  if (bias && !api_check(bias, fn, "bias")) return NULL;
  if (!nn_check_float(input, fn, "input") || !check_same_dtype(input, weight, "input", "weight", fn)) return NULL;
  if (bias && !check_same_dtype(input, bias, "input", "bias", fn)) return NULL;
  char a[256], b[256];
  const graph_view *iv = &input->view, *wv = &weight->view;
  if (wv->ndim != 2) {
    api_error(KILN_ERR_SHAPE, fn, "weight must be 2-D [out_features, in_features], got sizes %s",
              api_fmt_sizes(a, sizeof a, wv->ndim, wv->sizes));
    return NULL;
  }
  if (iv->ndim == 0 || iv->sizes[iv->ndim - 1] != wv->sizes[1]) {
    api_error(KILN_ERR_SHAPE, fn, "input sizes %s do not end in in_features %lld of weight sizes %s",
              api_fmt_sizes(a, sizeof a, iv->ndim, iv->sizes), (long long)wv->sizes[1],
              api_fmt_sizes(b, sizeof b, wv->ndim, wv->sizes));
    return NULL;
  }
  int64_t nout = wv->sizes[0];
  if (bias && (bias->view.ndim > 1 || (bias->view.ndim == 1 && bias->view.sizes[0] != nout && bias->view.sizes[0] != 1))) {
    api_error(KILN_ERR_SHAPE, fn, "bias sizes %s are not [%lld] (out_features of weight)",
              api_fmt_sizes(a, sizeof a, bias->view.ndim, bias->view.sizes), (long long)nout);
    return NULL;
  }
  int nd = iv->ndim;
  int64_t out[KILN_MAX_DIMS], rows[2] = {1, wv->sizes[1]}; /* [N, in]: no -1, in may be 0 */
  for (int d = 0; d < nd - 1; d++) out[d] = iv->sizes[d], rows[0] *= iv->sizes[d];
  out[nd - 1] = nout;
  kiln_dtype dtype = input->storage->dtype;
  kiln_scope_begin();
  /* [*, in] as one matrix [N, in] (a view when the layout allows): one GEMM
   * with weight's transpose as a view, the bias added in its epilogue.
   * F16/BF16: an F32 GEMM and bias, rounded once (as Torch's addmm). */
  kiln_tensor *x = nd > 2 ? kiln_reshape(input, 2, rows) : input;
  kiln_tensor *y = kiln_matmul(nn_widen(x), kiln_t(nn_widen(weight)));
  if (bias) y = kiln_add(y, nn_widen(bias));
  y = kiln_to_dtype(y, dtype);
  if (nd > 2) y = kiln_view(y, nd, out);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

/* ------------------------------------------------------------- dropout */

KILN_API kiln_tensor *kiln_dropout(kiln_tensor *input, double p, bool training) {
  const char *fn = "kiln_dropout";
  if (!api_check(input, fn, "input")) return NULL;
  if (!(p >= 0 && p <= 1)) {
    api_error(KILN_ERR_ARG, fn, "dropout probability p = %g must be in [0, 1]", p);
    return NULL;
  }
  if (!nn_check_float(input, fn, "input")) return NULL;
  if (!training || p == 0) return api_track(kiln_retain(input)); /* the identity: the same values */
  kiln_dtype dtype = input->storage->dtype, cd = graph_compute_dtype(dtype);
  kiln_scope_begin();
  kiln_tensor *x = nn_widen(input), *noise;
  if (p == 1) { /* Torch: input * 0 (NaN and inf stay NaN) */
    noise = constant(x, 0);
  } else {
    /* kept with probability 1 - p, scaled by 1 / (1 - p) as Torch's
     * bernoulli_(1 - p).div_(1 - p) */
    kiln_tensor *u = kiln_rand(cd, input->view.ndim, input->view.sizes);
    if (u && u->storage->device != input->storage->device) u = kiln_to_device(u, input->storage->device);
    noise = kiln_div_scalar(kiln_to_dtype(kiln_lt_scalar(u, 1 - p), cd), 1 - p);
  }
  kiln_tensor *y = kiln_to_dtype(kiln_mul(x, noise), dtype);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}
