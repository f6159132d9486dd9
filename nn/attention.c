/*
 * attention.c — kiln_scaled_dot_product_attention (Torch 2's
 * torch.nn.functional.scaled_dot_product_attention) and its causal mask.
 *
 * Without dropout, on the host, it records the fused attention
 * (ops_attention: an ATTENTION node, runtime/attention_kernels.c; its
 * gradient the fused backward), so no [..., L, S] buffer is made forward
 * or backward (docs/internals.md, "Attention"); is_causal is then an
 * attribute of the node. Otherwise (dropout, CUDA tensors, or
 * KILN_ATTENTION=unfused) it records the composition:
 *
 *   s = matmul(q, transpose(k, -2, -1))      [..., L, S]
 *   s = s * scale                            (a scalar mul)
 *   s = s + mask          (float mask)   or
 *   s = where(keep, s, -inf)  (BOOL mask, or is_causal's keep = j <= i)
 *   p = softmax(s, -1)                       (amax, sub, exp, sum, div)
 *   p = dropout(p)                           (only when dropout_p > 0)
 *   o = matmul(p, v)                         [..., L, Ev]
 *
 * which runs as a GEMM, one row kernel for scale, mask and softmax (the
 * fusion pass's row fusion), and a GEMM — or, without dropout, is found
 * by the fusion pass as a hand-written attention would be
 * (graph/attention_pattern.c). The causal mask costs no memory: keep =
 * col <= row over arange(L) [L, 1] and arange(S) [1, S], a lazy BOOL
 * expression that fuses into the row kernel reading the scores (no
 * [L, S] buffer is made for it). Gradients come from the parts' rules
 * (matmul, where, softmax's ops), so q, k, v and a float mask are
 * differentiable either way.
 *
 * Torch 2 semantics: a BOOL mask keeps where true (a row with nothing kept
 * gives NaN, as Torch's math path); a float mask is added; the mask
 * broadcasts to [..., L, S] without growing it; scale 0 means 1/sqrt(E);
 * dropout (always on when dropout_p > 0, as Torch's function) draws from
 * Kiln's generator through kiln_dropout. F16/BF16 compute in F32 and round
 * once.
 */
#include <math.h>

#include "nn_internal.h"

#define SDPA "kiln_scaled_dot_product_attention"

/* The broadcast of the batch dims (all but the last two) of the n views
 * into out [*nb]; false with KILN_ERR_SHAPE naming q, k, v. */
static bool batch_broadcast(kiln_tensor *const *ts, int n, int64_t *out, int *nb) {
  static const char *names[] = {"q", "k", "v"};
  int m = 0;
  for (int i = 0; i < n; i++) m = ts[i]->view.ndim - 2 > m ? ts[i]->view.ndim - 2 : m;
  for (int d = 0; d < m; d++) out[d] = 1;
  for (int i = 0; i < n; i++) {
    const graph_view *v = &ts[i]->view;
    int b = v->ndim - 2;
    for (int d = 0; d < b; d++) {
      int64_t *o = &out[m - b + d], s = v->sizes[d];
      if (s == *o || s == 1) continue;
      if (*o == 1) {
        *o = s;
        continue;
      }
      char buf[256];
      api_error(KILN_ERR_SHAPE, SDPA, "the batch dims of %s (sizes %s) do not broadcast with the others'", names[i],
                api_fmt_sizes(buf, sizeof buf, v->ndim, v->sizes));
      return false;
    }
  }
  *nb = m;
  return true;
}

/* q [..., L, E], k [..., S, E], v [..., S, Ev]: ranks, matching sizes, one
 * float dtype. */
static bool check_qkv(kiln_tensor *q, kiln_tensor *k, kiln_tensor *v) {
  kiln_tensor *ts[3] = {q, k, v};
  static const char *names[] = {"q", "k", "v"};
  char a[256], b[256];
  for (int i = 0; i < 3; i++) {
    if (ts[i]->view.ndim < 2) {
      api_error(KILN_ERR_SHAPE, SDPA, "%s must have at least 2 dims [..., %s], got sizes %s", names[i],
                i == 0 ? "L, E" : i == 1 ? "S, E" : "S, Ev",
                api_fmt_sizes(a, sizeof a, ts[i]->view.ndim, ts[i]->view.sizes));
      return false;
    }
    if (!nn_check_float(ts[i], SDPA, names[i])) return false;
  }
  for (int i = 1; i < 3; i++) {
    if (ts[i]->storage->dtype == q->storage->dtype) continue;
    api_error(KILN_ERR_DTYPE, SDPA, "q dtype %s and %s dtype %s differ", graph_dtypes[q->storage->dtype].name,
              names[i], graph_dtypes[ts[i]->storage->dtype].name);
    return false;
  }
  const graph_view *qv = &q->view, *kv = &k->view, *vv = &v->view;
  if (qv->sizes[qv->ndim - 1] != kv->sizes[kv->ndim - 1]) {
    api_error(KILN_ERR_SHAPE, SDPA, "q sizes %s and k sizes %s differ in their last dim (E)",
              api_fmt_sizes(a, sizeof a, qv->ndim, qv->sizes), api_fmt_sizes(b, sizeof b, kv->ndim, kv->sizes));
    return false;
  }
  if (kv->sizes[kv->ndim - 2] != vv->sizes[vv->ndim - 2]) {
    api_error(KILN_ERR_SHAPE, SDPA, "k sizes %s and v sizes %s differ in their dim -2 (S)",
              api_fmt_sizes(a, sizeof a, kv->ndim, kv->sizes), api_fmt_sizes(b, sizeof b, vv->ndim, vv->sizes));
    return false;
  }
  return true;
}

/* The mask is BOOL or q's dtype and broadcasts to scores [*sizes] (n
 * dims) without growing them. */
static bool check_mask(const kiln_tensor *mask, kiln_dtype dtype, int n, const int64_t *sizes) {
  kiln_dtype md = mask->storage->dtype;
  if (md != KILN_BOOL && md != dtype) {
    api_error(KILN_ERR_DTYPE, SDPA, "attn_mask dtype %s must be bool or q's dtype %s", graph_dtypes[md].name,
              graph_dtypes[dtype].name);
    return false;
  }
  const graph_view *m = &mask->view;
  bool ok = m->ndim <= n;
  for (int d = 0; ok && d < m->ndim; d++) {
    int64_t s = m->sizes[d], w = sizes[n - m->ndim + d];
    ok = s == w || s == 1;
  }
  if (ok) return true;
  char a[256], b[256];
  api_error(KILN_ERR_SHAPE, SDPA, "attn_mask sizes %s do not broadcast to the attention scores' sizes %s",
            api_fmt_sizes(a, sizeof a, m->ndim, m->sizes), api_fmt_sizes(b, sizeof b, n, sizes));
  return false;
}

/* BOOL [L, S]: j <= i (Torch's ones(L, S).tril()), lazy, on like's
 * device. Scope-owned. */
static kiln_tensor *causal_keep(int64_t L, int64_t S, const kiln_tensor *like) {
  kiln_tensor *row = kiln_view(kiln_arange(KILN_I64, 0, (double)L, 1), 2, (int64_t[]){L, 1});
  kiln_tensor *col = kiln_view(kiln_arange(KILN_I64, 0, (double)S, 1), 2, (int64_t[]){1, S});
  kiln_tensor *keep = kiln_le(col, row);
  if (keep && keep->storage->device != like->storage->device) keep = kiln_to_device(keep, like->storage->device);
  return keep;
}

/* The composition of the file comment, inside the caller's scope. x is
 * widened q, k, v; mask already checked. */
static kiln_tensor *attend(kiln_tensor *q, kiln_tensor *k, kiln_tensor *v, kiln_tensor *mask, double dropout_p,
                           bool is_causal, double scale) {
  int64_t L = q->view.sizes[q->view.ndim - 2], S = k->view.sizes[k->view.ndim - 2];
  kiln_tensor *s = kiln_mul_scalar(kiln_matmul(q, kiln_transpose(k, -2, -1)), scale);
  kiln_tensor *keep = is_causal ? causal_keep(L, S, q) : mask && mask->storage->dtype == KILN_BOOL ? mask : NULL;
  if (keep) s = kiln_where(keep, s, kiln_scalar(kiln_dtype_of(s), -INFINITY));
  else if (mask) s = kiln_add(s, nn_widen(mask));
  kiln_tensor *p = kiln_softmax(s, -1);
  if (dropout_p > 0) p = kiln_dropout(p, dropout_p, true);
  return kiln_matmul(p, v);
}

/* The fused kernel runs it (ops_attention): no dropout, all on the
 * host (a CUDA tensor runs the composition, as device kernels). */
static bool fused(const kiln_tensor *q, const kiln_tensor *k, const kiln_tensor *v, const kiln_tensor *mask,
                  double dropout_p) {
  bool host = q->storage->device == KILN_CPU && k->storage->device == KILN_CPU && v->storage->device == KILN_CPU;
  return dropout_p == 0 && host && (!mask || mask->storage->device == KILN_CPU) && graph_attention_fused();
}

KILN_API kiln_tensor *kiln_scaled_dot_product_attention(kiln_tensor *q, kiln_tensor *k, kiln_tensor *v,
                                                        kiln_tensor *attn_mask, double dropout_p, bool is_causal,
                                                        double scale) {
  if (!api_check(q, SDPA, "q") || !api_check(k, SDPA, "k") || !api_check(v, SDPA, "v")) return NULL;
  if (!attn_mask && kiln_last_status() != KILN_OK) return NULL; /* a NULL mask, but not after an error */
  if (attn_mask && !api_check(attn_mask, SDPA, "attn_mask")) return NULL;
  if (!check_qkv(q, k, v)) return NULL;
  if (!(dropout_p >= 0 && dropout_p < 1)) {
    api_error(KILN_ERR_ARG, SDPA, "dropout_p = %g must be in [0, 1)", dropout_p);
    return NULL;
  }
  if (!isfinite(scale)) {
    api_error(KILN_ERR_ARG, SDPA, "scale %g must be finite (0 means 1/sqrt(E))", scale);
    return NULL;
  }
  if (attn_mask && is_causal) {
    api_error(KILN_ERR_ARG, SDPA, "attn_mask and is_causal are exclusive: pass one (Torch raises too)");
    return NULL;
  }
  int64_t sizes[KILN_MAX_DIMS];
  int nb = 0;
  if (!batch_broadcast((kiln_tensor *[]){q, k, v}, 3, sizes, &nb)) return NULL;
  sizes[nb] = q->view.sizes[q->view.ndim - 2];
  sizes[nb + 1] = k->view.sizes[k->view.ndim - 2];
  kiln_dtype dtype = q->storage->dtype;
  if (attn_mask && !check_mask(attn_mask, dtype, nb + 2, sizes)) return NULL;
  if (scale == 0) scale = 1 / sqrt((double)q->view.sizes[q->view.ndim - 1]);
  kiln_scope_begin(); /* owns the intermediates */
  kiln_tensor *o;
  if (fused(q, k, v, attn_mask, dropout_p)) {
    kiln_tensor *m = attn_mask && attn_mask->storage->dtype != KILN_BOOL ? nn_widen(attn_mask) : attn_mask;
    o = ops_attention(nn_widen(q), nn_widen(k), nn_widen(v), m, is_causal, scale, nb, sizes, SDPA);
  } else {
    o = attend(nn_widen(q), nn_widen(k), nn_widen(v), attn_mask, dropout_p, is_causal, scale);
  }
  o = kiln_to_dtype(o, dtype);
  kiln_keep(o);
  kiln_scope_end();
  return o;
}
