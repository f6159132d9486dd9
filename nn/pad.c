/*
 * pad.c — kiln_pad: Torch's nn.functional.pad (1.13) in its four modes,
 * constant, reflect, replicate and circular, as one GATHER node.
 *
 * Every mode maps an output coordinate j of a padded dim (left pad l,
 * input size n) to a source coordinate from i = j - l:
 *   constant   i itself when 0 <= i < n, else the fill value;
 *   reflect    -i for i < 0, 2 (n - 1) - i for i >= n (one reflection:
 *              Torch requires l, r < n);
 *   replicate  i clamped to [0, n - 1];
 *   circular   the cropped core (negative pads crop first, as Torch's
 *              _pad_circular does) wrapped: core start + (j - max(l, 0))
 *              mod core length (Torch: a pad of at most n).
 * The host computes the source position of every element of the padded
 * dims' block (the row-major flat index into the input's last dims,
 * flattened into one: a view when they merge, else a lazy copy), and the
 * result is a gather from those dims with that index, broadcast over the
 * leading dims — one kernel, which fuses into its readers. Constant mode
 * crops negative pads with narrow first and selects the fill value with a
 * where over a host-computed mask. The gradient is the gather's (a
 * scatter-add, a generated parallel kernel) and the where's: nothing of
 * its own.
 *
 * Errors follow Torch 1.13's checks (PadNd.cpp, the reflection /
 * replication / circular kernels); messages name kiln_pad and the values.
 */
#include <math.h>
#include <stdlib.h>

#include "nn_internal.h"

static const char *const mode_names[] = {"constant", "reflect", "replicate", "circular"};

static int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

/* Source coordinate of output coordinate j of a dim of size n padded by
 * (l, r) in mode m; -1 for a constant mode's fill. */
static int64_t source_of(kiln_pad_mode m, int64_t j, int64_t n, int64_t l, int64_t r) {
  int64_t i = j - l;
  switch (m) {
  case KILN_PAD_CONSTANT: return i >= 0 && i < n ? i : -1;
  case KILN_PAD_REFLECT:
    if (i < 0) i = -i;
    return i >= n ? 2 * (n - 1) - i : i;
  case KILN_PAD_REPLICATE: return i < 0 ? 0 : i >= n ? n - 1 : i;
  default: {
    int64_t lo = imax(-l, 0), core = n - lo - imax(-r, 0), k = (j - imax(l, 0)) % core;
    return lo + (k < 0 ? k + core : k);
  }
  }
}

/* Checks one padded dim d (size n, pads l and r) under mode m: Torch's
 * rules, and an output size that fits. Sets *out. */
static bool check_dim(kiln_pad_mode m, const kiln_tensor *t, int d, int64_t l, int64_t r, int64_t *out,
                      const char *fn) {
  int64_t n = t->view.sizes[d];
  char s[256];
  api_fmt_sizes(s, sizeof s, t->view.ndim, t->view.sizes);
  if (__builtin_add_overflow(n, l, out) || __builtin_add_overflow(*out, r, out)) {
    api_error(KILN_ERR_ARG, fn, "padding (%lld, %lld) of dim %d overflows", (long long)l, (long long)r, d);
    return false;
  }
  if (m == KILN_PAD_REFLECT && (l >= n || r >= n)) {
    api_error(KILN_ERR_ARG, fn,
              "reflect padding (%lld, %lld) of dim %d must be less than its size (input sizes %s; Torch: "
              "\"Padding size should be less than the corresponding input dimension\")",
              (long long)l, (long long)r, d, s);
    return false;
  }
  if (m == KILN_PAD_CIRCULAR && (l > n || r > n)) {
    api_error(KILN_ERR_ARG, fn,
              "circular padding (%lld, %lld) of dim %d of size %lld wraps around more than once (input sizes %s)",
              (long long)l, (long long)r, d, (long long)n, s);
    return false;
  }
  if (*out < 0) {
    api_error(KILN_ERR_SHAPE, fn, "padding (%lld, %lld) of dim %d of size %lld gives output size %lld (input sizes %s)",
              (long long)l, (long long)r, d, (long long)n, (long long)*out, s);
    return false;
  }
  if (m == KILN_PAD_CIRCULAR && *out > 0 && n - imax(-l, 0) - imax(-r, 0) <= 0) {
    api_error(KILN_ERR_SHAPE, fn,
              "circular padding (%lld, %lld) of dim %d of size %lld crops every element and wraps nothing (input "
              "sizes %s; Torch reads uninitialized memory here)",
              (long long)l, (long long)r, d, (long long)n, s);
    return false;
  }
  return true;
}

/* Torch 1.13's rules on the input's rank for the non-constant modes: 2,
 * 4 or 6 pads (1, 2 or 3 dims) of an input with one or two more dims
 * (circular: exactly two more: a batch and a channel dim), whose dims
 * after the first are non-empty (reflect, replicate). */
static bool check_rank(const kiln_tensor *t, int n_pad, kiln_pad_mode mode, const char *fn) {
  int nd = t->view.ndim, nsp = n_pad / 2;
  char s[256];
  api_fmt_sizes(s, sizeof s, nd, t->view.sizes);
  if (nsp < 1 || nsp > 3 || (nd != nsp + 1 && nd != nsp + 2)) {
    api_error(KILN_ERR_UNSUPPORTED, fn,
              "%s padding takes 2, 4 or 6 pads of a 2-D to 5-D input with one or two dims before the padded ones; "
              "got %d pads for sizes %s",
              mode_names[mode], n_pad, s);
    return false;
  }
  if (mode == KILN_PAD_CIRCULAR && nd != nsp + 2) {
    api_error(KILN_ERR_SHAPE, fn, "circular padding of a %d-D input needs %d pads (a batch and a channel dim first), got %d",
              nd, 2 * (nd - 2), n_pad);
    return false;
  }
  if (mode != KILN_PAD_CIRCULAR)
    for (int d = 1; d < nd; d++)
      if (t->view.sizes[d] == 0) {
        api_error(KILN_ERR_SHAPE, fn, "%s padding needs non-empty dims after the first, got sizes %s",
                  mode_names[mode], s);
        return false;
      }
  return true;
}

static bool check_args(kiln_tensor *t, int n_pad, const int64_t *pad, kiln_pad_mode mode, double value,
                       const char *fn) {
  if (!api_check(t, fn, "input")) return false;
  if ((unsigned)mode > KILN_PAD_CIRCULAR) {
    api_error(KILN_ERR_ARG, fn, "unknown mode %d", (int)mode);
    return false;
  }
  if (n_pad < 0 || (n_pad > 0 && !pad)) {
    api_error(KILN_ERR_ARG, fn, "bad pad list (n_pad %d, pad %s)", n_pad, pad ? "given" : "NULL");
    return false;
  }
  if (n_pad % 2) {
    api_error(KILN_ERR_ARG, fn, "padding length %d must be divisible by 2", n_pad);
    return false;
  }
  if (n_pad / 2 > t->view.ndim) {
    api_error(KILN_ERR_ARG, fn, "padding length %d too large for a %d-D input", n_pad, t->view.ndim);
    return false;
  }
  if (mode != KILN_PAD_CONSTANT && value != 0) {
    api_error(KILN_ERR_ARG, fn, "padding mode \"%s\" doesn't take a value (got %g)", mode_names[mode], value);
    return false;
  }
  if (mode != KILN_PAD_CONSTANT && !check_rank(t, n_pad, mode, fn)) return false;
  if (mode == KILN_PAD_CONSTANT && !graph_is_float(t->storage->dtype) && !isfinite(value)) {
    api_error(KILN_ERR_ARG, fn, "value %g cannot be converted to %s", value, graph_dtypes[t->storage->dtype].name);
    return false;
  }
  return true;
}

/* The gather from the last ndim - d0 dims of x (flattened) at the host
 * positions src [q] (and, in constant mode, value where valid[q] is
 * false), viewed as out_sizes. */
static kiln_tensor *gather_block(kiln_tensor *x, int d0, int64_t q, const int64_t *src, const bool *valid,
                                 double value, const int64_t *out_sizes, const char *fn) {
  int nd = x->view.ndim;
  kiln_tensor *flat = kiln_flatten(x, d0, nd - 1);
  kiln_tensor *ix = ops_host_const(KILN_I64, q, src, x, fn);
  if (!flat || !ix) return NULL;
  graph_view iv = {.ndim = d0 + 1, .offset = ix->view.offset};
  for (int d = 0; d < d0; d++) iv.sizes[d] = x->view.sizes[d];
  iv.sizes[d0] = q;
  iv.strides[d0] = ix->view.strides[0];
  kiln_tensor *y = ops_gather(flat, &flat->view, d0, ix, &iv, fn);
  if (valid) {
    kiln_tensor *mask = ops_host_const(KILN_BOOL, q, valid, x, fn);
    y = kiln_where(mask, y, kiln_scalar(x->storage->dtype, value));
  }
  return kiln_view(y, nd, out_sizes);
}

/* x padded in dims [d0, ndim) by lr[d] = (left, right) under mode m
 * (constant: pads already >= 0). */
static kiln_tensor *pad_block(kiln_tensor *x, int d0, int64_t (*lr)[2], kiln_pad_mode m, double value,
                              const char *fn) {
  const graph_view *v = &x->view;
  int nd = v->ndim;
  int64_t out[KILN_MAX_DIMS], q = 1;
  for (int d = 0; d < nd; d++) out[d] = d < d0 ? v->sizes[d] : v->sizes[d] + lr[d][0] + lr[d][1];
  for (int d = d0; d < nd; d++)
    if (__builtin_mul_overflow(q, out[d], &q)) {
      api_error(KILN_ERR_ARG, fn, "padded block too large");
      return NULL;
    }
  int64_t *src = malloc(sizeof *src * (size_t)(q ? q : 1));
  bool *valid = m == KILN_PAD_CONSTANT ? malloc(sizeof *valid * (size_t)(q ? q : 1)) : NULL;
  if (!src || (m == KILN_PAD_CONSTANT && !valid)) {
    free(src);
    free(valid);
    api_error(KILN_ERR_OOM, fn, "out of memory for an index of %lld elements", (long long)q);
    return NULL;
  }
  int64_t j[KILN_MAX_DIMS] = {0};
  for (int64_t e = 0; e < q; e++) {
    int64_t at = 0;
    bool ok = true;
    for (int d = d0; d < nd; d++) {
      int64_t i = source_of(m, j[d], v->sizes[d], lr[d][0], lr[d][1]);
      if (i < 0) ok = false, i = 0;
      at = at * v->sizes[d] + i;
    }
    src[e] = ok ? at : 0;
    if (valid) valid[e] = ok;
    for (int d = nd - 1; d >= d0 && ++j[d] == out[d]; d--) j[d] = 0;
  }
  kiln_tensor *y = gather_block(x, d0, q, src, valid, value, out, fn);
  free(src);
  free(valid);
  return y;
}

KILN_API kiln_tensor *kiln_pad(kiln_tensor *input, int n_pad, const int64_t *pad, kiln_pad_mode mode, double value) {
  const char *fn = "kiln_pad";
  if (!check_args(input, n_pad, pad, mode, value, fn)) return NULL;
  int nd = input->view.ndim;
  int64_t lr[KILN_MAX_DIMS][2] = {{0}}, out[KILN_MAX_DIMS];
  for (int d = 0; d < nd; d++) out[d] = input->view.sizes[d];
  for (int i = 0; i < n_pad / 2; i++) {
    int d = nd - 1 - i;
    lr[d][0] = pad[2 * i];
    lr[d][1] = pad[2 * i + 1];
    if (!check_dim(mode, input, d, lr[d][0], lr[d][1], &out[d], fn)) return NULL;
  }
  /* constant: with any positive pad, Torch 1.13 wants every dim the pads
   * cover non-empty (it only crops, to any size, when none is positive) */
  bool grows = false;
  for (int i = 0; i < n_pad; i++) grows = grows || pad[i] > 0;
  for (int i = 0; mode == KILN_PAD_CONSTANT && grows && i < n_pad / 2; i++)
    if (out[nd - 1 - i] < 1) {
      api_error(KILN_ERR_SHAPE, fn,
                "padding (%lld, %lld) of dim %d of size %lld gives output size %lld; with a positive pad elsewhere "
                "every padded dim must stay non-empty (Torch)",
                (long long)pad[2 * i], (long long)pad[2 * i + 1], nd - 1 - i, (long long)input->view.sizes[nd - 1 - i],
                (long long)out[nd - 1 - i]);
      return NULL;
    }
  /* reflect, replicate: Torch 1.13 wants a non-empty output in 1-D, and
   * in 2-D and 3-D one non-empty padded dim (its check is an "or") */
  bool some = false;
  for (int i = 0; i < n_pad / 2; i++) some = some || out[nd - 1 - i] >= 1;
  if ((mode == KILN_PAD_REFLECT || mode == KILN_PAD_REPLICATE) && !some) {
    char a[256];
    api_error(KILN_ERR_SHAPE, fn, "%s padding of an input of sizes %s gives an empty output (output size 0)",
              mode_names[mode], api_fmt_sizes(a, sizeof a, nd, input->view.sizes));
    return NULL;
  }
  kiln_dtype dt = input->storage->dtype;
  if (!api_check_sizes(nd, out, fn)) return NULL;
  kiln_scope_begin(); /* owns the intermediates */
  kiln_tensor *x = input, *y = NULL;
  if (mode == KILN_PAD_CONSTANT) /* crop the negative pads */
    for (int d = 0; d < nd && x; d++) {
      int64_t lo = imax(-lr[d][0], 0), hi = imax(-lr[d][1], 0);
      if (lo || hi) x = kiln_narrow(x, d, lo, x->view.sizes[d] - lo - hi);
      lr[d][0] = imax(lr[d][0], 0);
      lr[d][1] = imax(lr[d][1], 0);
    }
  int d0 = nd;
  for (int d = nd - 1; d >= 0; d--)
    if (lr[d][0] || lr[d][1]) d0 = d;
  int64_t numel_in = x ? graph_view_numel(&x->view) : 0, numel_out = 1;
  for (int d = 0; d < nd; d++) numel_out *= out[d];
  if (!x) y = NULL;
  else if (numel_out == 0 || numel_in == 0) /* nothing to read: zeros (constant mode, an empty input) */
    y = kiln_full(dt, nd, out, mode == KILN_PAD_CONSTANT ? value : 0);
  else if (d0 == nd)
    y = ops_copy_contiguous(x, dt, fn); /* Torch returns a new tensor */
  else
    y = pad_block(x, d0, lr, mode, value, fn);
  kiln_keep(y);
  kiln_scope_end();
  return y;
}
