/*
 * dist.c — the collectives' API (kiln/dist.h): argument checks, packing
 * (a lazy contiguous copy, which the fusion pass turns into the kernel
 * that writes the send buffer), and the extern nodes of graph/ops.def
 * that dist/collectives_run.c runs over MPI.
 *
 * Ordering: each group remembers its last recorded collective
 * (kiln_group.last); the next one takes it as an extra input, an edge
 * that carries no value, so a force of any collective first runs the
 * earlier ones of its group still pending, and every rank issues them in
 * recorded order. Sends and receives are not in that chain: MPI matches
 * them by source and tag, and a receive recorded before a send of the
 * same rank must not have to complete first. MEAN is SUM and a lazy multiplication by 1/size;
 * F16/BF16 reduce in F32. A group of size 1 needs no MPI: every collective
 * is a lazy copy.
 */
#include <stdlib.h>
#include <string.h>

#include "collectives.h"
#include "groups.h"
#include "runtime.h"

static bool group_ok(const kiln_group *g, const char *fn) {
  if (dist_group_valid(g)) return true;
  api_error(KILN_ERR_ARG, fn, g ? "bad group (not from kiln_dist_init/kiln_group_split, or used after "
                                  "kiln_dist_finalize)"
                                : "group is NULL");
  return false;
}

static bool op_ok(kiln_reduce_op op, const kiln_tensor *t, const char *fn) {
  if ((unsigned)op > KILN_REDUCE_PROD) {
    api_error(KILN_ERR_ARG, fn, "unknown reduction %d", (int)op);
    return false;
  }
  if (op == KILN_REDUCE_MEAN && t && !graph_is_float(t->storage->dtype)) {
    api_error(KILN_ERR_DTYPE, fn, "KILN_REDUCE_MEAN needs a float dtype, got %s", graph_dtypes[t->storage->dtype].name);
    return false;
  }
  return true;
}

static dist_reduce rt_reduce_of(kiln_reduce_op op) {
  switch (op) {
    case KILN_REDUCE_MAX: return DIST_REDUCE_MAX;
    case KILN_REDUCE_MIN: return DIST_REDUCE_MIN;
    case KILN_REDUCE_PROD: return DIST_REDUCE_PROD;
    default: return DIST_REDUCE_SUM;
  }
}

int kiln_dist_init(const char *backend, kiln_group **world) {
  static const char fn[] = "kiln_dist_init";
  if (!world) return api_error(KILN_ERR_ARG, fn, "world is NULL");
  char err[768];
  int st = dist_init(backend, world, err, sizeof err);
  return st == KILN_OK ? KILN_OK : api_error((kiln_status)st, fn, "%s", err);
}

/* Runs g's pending collectives (its last one, and through the ordering
 * edges every earlier one). */
static int flush_group(kiln_group *g, const char *fn) {
  graph_node *last = g->last;
  if (!last || last->buffer || last->overwritten) return KILN_OK;
  char err[768];
  int st = rt_realize(&last, 1, err, sizeof err);
  return st == KILN_OK ? KILN_OK : api_error((kiln_status)st, fn, "%s", err);
}

int kiln_dist_finalize(void) {
  static const char fn[] = "kiln_dist_finalize";
  int st = KILN_OK;
  for (int i = 0, n = dist_group_count(); i < n; i++) {
    int s = flush_group(dist_group_by_id(i), fn);
    if (st == KILN_OK) st = s;
  }
  char err[512];
  int s = dist_finalize(err, sizeof err);
  if (s != KILN_OK) api_error((kiln_status)s, fn, "%s", err);
  return st != KILN_OK ? st : s;
}

int kiln_group_rank(const kiln_group *g) { return group_ok(g, "kiln_group_rank") ? g->rank : -1; }
int kiln_group_size(const kiln_group *g) { return group_ok(g, "kiln_group_size") ? g->size : -1; }

int kiln_group_split(kiln_group *g, int color, int key, kiln_group **out) {
  static const char fn[] = "kiln_group_split";
  if (!group_ok(g, fn)) return api_status();
  if (!out) return api_error(KILN_ERR_ARG, fn, "out is NULL");
  int st = flush_group(g, fn); /* a collective over g: after g's pending ones */
  if (st != KILN_OK) return st;
  char err[512];
  st = dist_split(g, color, key, out, err, sizeof err);
  return st == KILN_OK ? KILN_OK : api_error((kiln_status)st, fn, "%s", err);
}

/* Records collective `op` of g over packed x (contiguous; NULL for RECV)
 * with result dtype/sizes; ordered after g's previous collective. New
 * untracked tensor (or NULL, error set). */
static kiln_tensor *record(graph_op op, kiln_tensor *x, kiln_dtype dt, int ndim, const int64_t *sizes, double scalar,
                           uint32_t tag, kiln_group *g, const char *fn) {
  graph_node *n = graph_node_new(op, dt, ndim, sizes);
  if (!n) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  n->cdtype = dt;
  graph_attr_set_scalar(n, scalar);
  graph_attr_set_scalar2(n, g->id);
  graph_attr_set_reduce_mask(n, tag);
  if (x && !api_add_input(n, x, &x->view)) {
    graph_node_release(n);
    return NULL;
  }
  bool p2p = op == GRAPH_OP_SEND || op == GRAPH_OP_RECV; /* matched by (source, tag), not by order */
  graph_node *prev = p2p ? NULL : g->last;
  if (prev && !prev->buffer && !prev->overwritten) {
    graph_view one = {.ndim = 0}; /* one element: only the edge matters */
    graph_node_add_input(n, prev, &one);
    n->inputs[n->n_inputs - 1].order_only = true;
  }
  n->device = x ? x->storage->device : KILN_CPU; /* not the ordering edge's */
  graph_node_retain(n);
  kiln_tensor *out = api_tensor_from_node(n, fn);
  if (!out) {
    graph_node_release(n);
    return NULL;
  }
  if (p2p) {
    graph_node_release(n);
    return out;
  }
  graph_node_release(g->last);
  g->last = n;
  return out;
}

/* t packed for sending: contiguous, in dtype wd. New untracked ref. */
static kiln_tensor *pack(kiln_tensor *t, kiln_dtype wd, const char *fn) {
  if (t->storage->dtype == wd && graph_view_is_contiguous(&t->view)) return kiln_retain(t);
  return ops_copy_contiguous(t, wd, fn);
}

/* The dtype a reduction runs in: F32 for F16/BF16. */
static kiln_dtype reduce_dtype(kiln_dtype d) { return graph_compute_dtype(d); }

/* r scaled for MEAN and converted back to dtype d (untracked; consumes r). */
static kiln_tensor *finish(kiln_tensor *r, kiln_reduce_op op, int size, kiln_dtype d) {
  if (r && op == KILN_REDUCE_MEAN) {
    kiln_tensor *m = kiln_mul_scalar(r, 1.0 / size);
    kiln_release(r);
    r = m;
  }
  if (r && r->storage->dtype != d) {
    kiln_tensor *c = kiln_to_dtype(r, d);
    kiln_release(r);
    r = c;
  }
  return r;
}

kiln_tensor *kiln_all_reduce(kiln_tensor *t, kiln_reduce_op op, kiln_group *g) {
  static const char fn[] = "kiln_all_reduce";
  if (!api_check(t, fn, "t") || !group_ok(g, fn) || !op_ok(op, t, fn)) return NULL;
  if (g->size == 1) return kiln_clone(t);
  api_untracked_begin();
  kiln_dtype d = t->storage->dtype, wd = reduce_dtype(d);
  kiln_tensor *x = pack(t, wd, fn), *r = NULL;
  if (x) r = record(GRAPH_OP_ALL_REDUCE, x, wd, x->view.ndim, x->view.sizes, rt_reduce_of(op), 0, g, fn);
  kiln_release(x);
  r = finish(r, op, g->size, d);
  api_untracked_end();
  return api_track(r);
}

/* perm moving dim d to the front (front) or back from the front. */
static void move_perm(int nd, int d, bool front, int *perm) {
  for (int i = 0; i < nd; i++) {
    if (front) perm[i] = i == 0 ? d : i <= d ? i - 1 : i;
    else perm[i] = i < d ? i + 1 : i == d ? 0 : i;
  }
}

kiln_tensor *kiln_all_gather(kiln_tensor *t, int dim, kiln_group *g) {
  static const char fn[] = "kiln_all_gather";
  if (!api_check(t, fn, "t") || !group_ok(g, fn)) return NULL;
  int nd = t->view.ndim;
  if (nd == 0) {
    api_error(KILN_ERR_ARG, fn, "t is 0-d: there is no dim to concatenate along");
    return NULL;
  }
  int d = api_wrap_dim(dim, nd, fn);
  if (d < 0) return NULL;
  if (nd + 1 > KILN_MAX_DIMS) {
    api_error(KILN_ERR_SHAPE, fn, "t has %d dims: gathering needs one more than KILN_MAX_DIMS allows", nd);
    return NULL;
  }
  if (g->size == 1) return kiln_clone(t);
  api_untracked_begin();
  kiln_tensor *x = pack(t, t->storage->dtype, fn), *r = NULL, *out = NULL;
  int64_t sizes[KILN_MAX_DIMS + 1] = {g->size};
  memcpy(sizes + 1, t->view.sizes, sizeof(int64_t) * (size_t)nd);
  if (x) r = record(GRAPH_OP_ALL_GATHER, x, t->storage->dtype, nd + 1, sizes, 0, 0, g, fn);
  if (r) { /* [P, s0, ..] -> [s0, .., P, s_d, ..] -> [s0, .., P * s_d, ..] */
    int perm[KILN_MAX_DIMS];
    int64_t cat[KILN_MAX_DIMS];
    move_perm(nd + 1, d, false, perm);
    for (int i = 0; i < nd; i++) cat[i] = i == d ? (int64_t)g->size * t->view.sizes[i] : t->view.sizes[i];
    kiln_tensor *p = kiln_permute(r, nd + 1, perm);
    out = p ? kiln_reshape(p, nd, cat) : NULL;
    kiln_release(p);
  }
  kiln_release(x);
  kiln_release(r);
  api_untracked_end();
  return api_track(out);
}

kiln_tensor *kiln_reduce_scatter(kiln_tensor *t, kiln_reduce_op op, int dim, kiln_group *g) {
  static const char fn[] = "kiln_reduce_scatter";
  if (!api_check(t, fn, "t") || !group_ok(g, fn) || !op_ok(op, t, fn)) return NULL;
  int nd = t->view.ndim;
  if (nd == 0) {
    api_error(KILN_ERR_ARG, fn, "t is 0-d: there is no dim to scatter along");
    return NULL;
  }
  int d = api_wrap_dim(dim, nd, fn);
  if (d < 0) return NULL;
  if (t->view.sizes[d] % g->size != 0) {
    api_error(KILN_ERR_SHAPE, fn, "size %lld of dim %d is not divisible by the group size %d",
              (long long)t->view.sizes[d], d, g->size);
    return NULL;
  }
  if (g->size == 1) return kiln_clone(t);
  api_untracked_begin();
  kiln_dtype dt = t->storage->dtype, wd = reduce_dtype(dt);
  int perm[KILN_MAX_DIMS];
  move_perm(nd, d, true, perm);
  kiln_tensor *front = kiln_permute(t, nd, perm), *x = front ? pack(front, wd, fn) : NULL, *r = NULL, *out = NULL;
  if (x) {
    int64_t sizes[KILN_MAX_DIMS];
    memcpy(sizes, x->view.sizes, sizeof(int64_t) * (size_t)nd);
    sizes[0] /= g->size;
    r = record(GRAPH_OP_REDUCE_SCATTER, x, wd, nd, sizes, rt_reduce_of(op), 0, g, fn);
  }
  if (r) {
    move_perm(nd, d, false, perm);
    out = finish(kiln_permute(r, nd, perm), op, g->size, dt);
  }
  kiln_release(front);
  kiln_release(x);
  kiln_release(r);
  api_untracked_end();
  return api_track(out);
}

kiln_tensor *kiln_broadcast(kiln_tensor *t, int root, kiln_group *g) {
  static const char fn[] = "kiln_broadcast";
  if (!api_check(t, fn, "t") || !group_ok(g, fn)) return NULL;
  if (root < 0 || root >= g->size) {
    api_error(KILN_ERR_ARG, fn, "root %d is out of range for a group of size %d", root, g->size);
    return NULL;
  }
  if (g->size == 1) return kiln_clone(t);
  api_untracked_begin();
  kiln_tensor *x = pack(t, t->storage->dtype, fn), *r = NULL;
  if (x) r = record(GRAPH_OP_BROADCAST, x, t->storage->dtype, x->view.ndim, x->view.sizes, root, 0, g, fn);
  kiln_release(x);
  api_untracked_end();
  return api_track(r);
}

static bool peer_ok(const kiln_group *g, int peer, int tag, const char *what, const char *fn) {
  if (peer < 0 || peer >= g->size || peer == g->rank) {
    api_error(KILN_ERR_ARG, fn, "%s %d is out of range or this rank (rank %d of a group of size %d)", what, peer,
              g->rank, g->size);
    return false;
  }
  if (tag < 0) {
    api_error(KILN_ERR_ARG, fn, "tag %d is negative", tag);
    return false;
  }
  return true;
}

int kiln_send(kiln_tensor *t, int dst, int tag, kiln_group *g) {
  static const char fn[] = "kiln_send";
  if (!api_check(t, fn, "t")) return api_status();
  if (!group_ok(g, fn) || !peer_ok(g, dst, tag, "dst", fn)) return api_status();
  api_untracked_begin();
  int64_t one = 1;
  kiln_tensor *x = pack(t, t->storage->dtype, fn), *r = NULL;
  if (x) r = record(GRAPH_OP_SEND, x, KILN_U8, 1, &one, dst, (uint32_t)tag, g, fn);
  /* SEND's "result" is one byte; the node's dtype is the data's */
  int st = r ? kiln_realize(r) : api_status();
  kiln_release(x);
  kiln_release(r);
  api_untracked_end();
  return st;
}

kiln_tensor *kiln_recv(kiln_dtype dtype, int ndim, const int64_t *sizes, int src, int tag, kiln_group *g) {
  static const char fn[] = "kiln_recv";
  if (!group_ok(g, fn) || !api_check_dtype(dtype, fn) || !api_check_sizes(ndim, sizes, fn) ||
      !peer_ok(g, src, tag, "src", fn))
    return NULL;
  return record(GRAPH_OP_RECV, NULL, dtype, ndim, sizes, src, (uint32_t)tag, g, fn); /* tracked by record */
}

/* ----------------------------------------------------------- gradients */

kiln_tensor *dist_grad(const graph_node *n, kiln_tensor *g) {
  static const char fn[] = "kiln_grad";
  kiln_group *grp = dist_group_by_id((int)graph_attr_scalar2(n));
  if (!grp) {
    api_error(KILN_ERR_ARG, fn, "the group of a %s on the gradient path is gone (kiln_dist_finalize ran)",
              graph_ops[n->op].name);
    return NULL;
  }
  int r = (int)graph_attr_scalar(n);
  if ((n->op == GRAPH_OP_ALL_REDUCE || n->op == GRAPH_OP_REDUCE_SCATTER) && r != DIST_REDUCE_SUM) {
    api_error(KILN_ERR_UNSUPPORTED, fn, "no gradient for %s with reduction %s (only SUM and MEAN)",
              graph_ops[n->op].name, r == DIST_REDUCE_MAX ? "MAX" : r == DIST_REDUCE_MIN ? "MIN" : "PROD");
    return NULL;
  }
  switch (n->op) {
    case GRAPH_OP_ALL_REDUCE: return kiln_all_reduce(g, KILN_REDUCE_SUM, grp);
    case GRAPH_OP_REDUCE_SCATTER: return kiln_all_gather(g, 0, grp);
    case GRAPH_OP_ALL_GATHER: return kiln_select(kiln_reduce_scatter(g, KILN_REDUCE_SUM, 0, grp), 0, 0);
    case GRAPH_OP_BROADCAST: {
      kiln_tensor *sum = kiln_all_reduce(g, KILN_REDUCE_SUM, grp); /* recorded on every rank */
      return grp->rank == r ? sum : kiln_zeros(kiln_dtype_of(g), kiln_dim(g), kiln_sizes(g));
    }
    default:
      api_error(KILN_ERR_UNSUPPORTED, fn, "no gradient rule for op %s", graph_ops[n->op].name);
      return NULL;
  }
}

/* ------------------------------------------------ bucketed, in place */

static int64_t read_bucket_bytes(void) {
  return graph_env_int("KILN_DIST_BUCKET_BYTES", 1, 25 << 20, "bytes");
}

/* KILN_DIST_BUCKET_BYTES (default 25 MiB): the most a bucket packs. */
static int64_t bucket_bytes(void) {
  static atomic_int_fast64_t slot = GRAPH_ENV_UNREAD;
  return graph_env_once(&slot, read_bucket_bytes);
}

/* One bucket: ts [n] (one dtype) flattened, concatenated, all-reduced,
 * and each written back from its slice of the result. */
static int reduce_bucket(kiln_tensor *const *ts, int n, kiln_reduce_op op, kiln_group *g, const char *fn) {
  kiln_tensor **flat = calloc((size_t)n, sizeof *flat);
  if (!flat) return api_error(KILN_ERR_OOM, fn, "out of memory");
  int st = KILN_OK;
  int64_t minus1 = -1;
  for (int i = 0; i < n && st == KILN_OK; i++) {
    flat[i] = kiln_reshape(ts[i], 1, &minus1);
    if (!flat[i]) st = api_status();
  }
  kiln_tensor *packed = st == KILN_OK ? (n == 1 ? kiln_retain(flat[0]) : kiln_cat(flat, n, 0)) : NULL;
  kiln_tensor *sum = packed ? kiln_all_reduce(packed, op, g) : NULL;
  if (!sum) st = api_status();
  int64_t at = 0;
  for (int i = 0; i < n && st == KILN_OK; i++) {
    int64_t k = kiln_numel(ts[i]);
    kiln_tensor *piece = kiln_narrow(sum, 0, at, k);
    kiln_tensor *shaped = piece ? kiln_view(piece, ts[i]->view.ndim, ts[i]->view.sizes) : NULL;
    st = shaped ? kiln_copy_(ts[i], shaped) : api_status();
    kiln_release(piece);
    kiln_release(shaped);
    at += k;
  }
  for (int i = 0; i < n; i++) kiln_release(flat[i]);
  free(flat);
  kiln_release(packed);
  kiln_release(sum);
  return st;
}

/* Checks every argument of kiln_all_reduce_ before anything is recorded. */
static int check_all(kiln_tensor *const *ts, int n, kiln_reduce_op op, kiln_group *g, const char *fn) {
  int st = api_check_list(ts, n, "tensor", fn);
  if (st != KILN_OK) return st;
  if (!group_ok(g, fn) || !op_ok(op, NULL, fn)) return api_status();
  for (int i = 0; i < n; i++) {
    char arg[32];
    snprintf(arg, sizeof arg, "ts[%d]", i);
    if (!api_check(ts[i], fn, arg) || !op_ok(op, ts[i], fn) || !ops_check_writable(ts[i], fn)) return api_status();
  }
  return KILN_OK;
}

int kiln_all_reduce_(kiln_tensor *const *ts, int n, kiln_reduce_op op, kiln_group *g) {
  static const char fn[] = "kiln_all_reduce_";
  int st = check_all(ts, n, op, g, fn);
  if (st != KILN_OK || g->size == 1) return st; /* size 1: every reduction is the identity */
  bool *done = calloc((size_t)n + 1, sizeof *done);
  kiln_tensor **bucket = calloc((size_t)n + 1, sizeof *bucket);
  if (!done || !bucket) {
    free(done);
    free(bucket);
    return api_error(KILN_ERR_OOM, fn, "out of memory");
  }
  api_untracked_begin();
  /* Buckets in list order: the first tensor not yet done opens one, and
   * the later tensors of its dtype join while it has room. */
  for (int i = 0; i < n && st == KILN_OK; i++) {
    if (done[i]) continue;
    kiln_dtype d = ts[i]->storage->dtype;
    int k = 0;
    int64_t bytes = 0;
    for (int j = i; j < n; j++) {
      int64_t b = kiln_numel(ts[j]) * graph_dtypes[d].size;
      if (done[j] || ts[j]->storage->dtype != d || (k > 0 && bytes + b > bucket_bytes())) continue;
      bucket[k++] = ts[j];
      bytes += b;
      done[j] = true;
    }
    st = reduce_bucket(bucket, k, op, g, fn);
  }
  api_untracked_end();
  free(done);
  free(bucket);
  return st;
}
