/*
 * dist.c — process groups and the collective extern ops over MPI, loaded
 * at run time: libkiln dlopens libkiln_mpi.so (dist/mpi/kiln_mpi.c, the
 * one file compiled against mpi.h), as device.c dlopens the CUDA driver,
 * so a libkiln built or run without MPI works with groups of size 1.
 *
 * Where the plugin comes from, first found: $KILN_MPI_PLUGIN (a path; a
 * path that does not load makes "mpi" fail — for tests), the directory
 * of the libkiln in use, the build tree's (KILN_MPI_PLUGIN_BUILD), then
 * the loader's search path.
 *
 * Every collective first exchanges a small descriptor (op, reduction,
 * dtype, sizes, root) with one allgather, so ranks that disagree get
 * KILN_ERR_SHAPE, each naming its own and the other's, instead of a hang
 * or a truncated buffer. Float SUM and PROD are reduced here in rank
 * order (an alltoall of blocks, a rank-order sum of this rank's block,
 * an allgather: a ring all-reduce's traffic), so every rank and every
 * run gets bit-identical values whatever algorithm Open MPI picks
 * (docs/distributed.md). Integer
 * and bool reductions, MAX and MIN are exact in any order: MPI reduces
 * them.
 *
 * The runtime reaches the collectives only through the rows dist_init
 * registers in its table of extern ops (rt_extern_register, runtime.h):
 * it never names this file, which can therefore sit above it.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives.h"
#include "dist_plugin.h"
#include "groups.h"
#include "runtime.h"

static const dist_mpi_plugin *plugin;
static void *plugin_handle;
static struct kiln_group **groups; /* [n_groups]: NULL once freed */
static int n_groups;
static bool finalized;

static atomic_int_fast64_t timeout_s = GRAPH_ENV_UNREAD;
static int64_t read_timeout(void) { return graph_env_int("KILN_DIST_TIMEOUT", 1, 300, "seconds"); }
double dist_timeout(void) { return (double)graph_env_once(&timeout_s, read_timeout); }

bool dist_active(void) { return n_groups > 0 && !finalized; }
bool dist_finalized(void) { return finalized; }

/* ------------------------------------------------------------ loading */

static void *try_open(const char *path, char *why, size_t len) {
  void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL); /* global: Open MPI's components need libmpi's symbols */
  if (!h) snprintf(why, len, "%s", dlerror());
  return h;
}

/* The plugin beside the libkiln (or program) this code is part of. */
static void *open_beside_libkiln(char *why, size_t len) {
  Dl_info info;
  if (!dladdr((void *)&dist_init, &info) || !info.dli_fname) return NULL;
  const char *slash = strrchr(info.dli_fname, '/');
  if (!slash) return NULL;
  char path[4096];
  snprintf(path, sizeof path, "%.*s/libkiln_mpi.so", (int)(slash - info.dli_fname), info.dli_fname);
  return try_open(path, why, len);
}

static int load_plugin(char *err, size_t errlen) {
  if (plugin) return KILN_OK;
  char why[512] = "libkiln_mpi.so was not built (CMake found no MPI)";
  const char *env = getenv("KILN_MPI_PLUGIN");
  void *h = NULL;
  if (env && *env) {
    h = try_open(env, why, sizeof why);
  } else {
    h = open_beside_libkiln(why, sizeof why);
#ifdef KILN_MPI_PLUGIN_BUILD
    if (!h) h = try_open(KILN_MPI_PLUGIN_BUILD, why, sizeof why);
#endif
    if (!h) h = try_open("libkiln_mpi.so", why, sizeof why);
  }
  const dist_mpi_plugin *p = h ? dlsym(h, "kiln_mpi_plugin_v1") : NULL;
  if (h && (!p || p->version != DIST_MPI_PLUGIN_VERSION)) {
    snprintf(why, sizeof why, "libkiln_mpi.so has no kiln_mpi_plugin_v1 table of version %d", DIST_MPI_PLUGIN_VERSION);
    dlclose(h);
    h = NULL;
  }
  if (!h) {
    snprintf(err, errlen, "MPI is not available: %s", why);
    return KILN_ERR_UNSUPPORTED;
  }
  plugin_handle = h;
  plugin = p;
  return KILN_OK;
}

/* Started by mpirun/mpiexec (Open MPI, MPICH/PMI, PMIx launchers). */
static bool under_launcher(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

/* ------------------------------------------------------------- groups */

static struct kiln_group *group_add(void *comm, int rank, int size) {
  struct kiln_group **g2 = realloc(groups, sizeof *groups * (size_t)(n_groups + 1));
  struct kiln_group *g = calloc(1, sizeof *g);
  if (!g2 || !g) {
    free(g);
    if (g2) groups = g2;
    return NULL;
  }
  groups = g2;
  *g = (struct kiln_group){.id = n_groups, .comm = comm, .rank = rank, .size = size};
  groups[n_groups++] = g;
  return g;
}

struct kiln_group *dist_group_by_id(int id) {
  return !finalized && id >= 0 && id < n_groups ? groups[id] : NULL;
}

bool dist_group_valid(const struct kiln_group *g) {
  if (!g || finalized) return false;
  for (int i = 0; i < n_groups; i++)
    if (groups[i] == g) return true;
  return false;
}

int dist_group_count(void) { return finalized ? 0 : n_groups; }

/* Name and bytes of a collective's profiler record: "mpi_all_reduce_4096". */
static void describe_collective(const graph_node *n, bool on_device, kiln_kernel_record *r, char *name, size_t len) {
  (void)on_device;
  char op[32];
  snprintf(op, sizeof op, "%s", graph_ops[n->op].name);
  for (char *c = op; *c; c++) *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
  bool recv = n->op == GRAPH_OP_RECV;
  int64_t in = recv ? 0 : graph_view_numel(&n->inputs[0].view);
  int in_size = graph_dtypes[recv ? n->dtype : n->inputs[0].node->dtype].size; /* SEND's result is one U8 */
  snprintf(name, len, "mpi_%s_%lld", op, (long long)(in ? in : n->numel));
  *r = (kiln_kernel_record){.name = name,
                            .backend = "mpi",
                            .n_ops = 1,
                            .numel = n->numel,
                            .bytes_read = in * in_size,
                            .bytes_written = n->numel * graph_dtypes[n->dtype].size,
                            .run_ns = r->run_ns,
                            .cache_hit = true,
                            .threads = 1};
}

/* The collectives' rows in the runtime's table of extern ops (extern.c):
 * registered by every dist_init (registering again does nothing), so
 * collective nodes, which need a group, always find theirs. They run
 * under rt_pool_hold: MPI's progress and the peer ranks get the cores. */
static int register_collectives(char *err, size_t errlen) {
  static const graph_op ops[] = {GRAPH_OP_ALL_REDUCE, GRAPH_OP_ALL_GATHER, GRAPH_OP_REDUCE_SCATTER,
                                 GRAPH_OP_BROADCAST,  GRAPH_OP_SEND,       GRAPH_OP_RECV};
  int st = KILN_OK;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0] && st == KILN_OK; i++)
    st = rt_extern_register(ops[i], dist_run, describe_collective, true, err, errlen);
  return st;
}

int dist_init(const char *backend, struct kiln_group **world, char *err, size_t errlen) {
  if (finalized) {
    snprintf(err, errlen, "called after kiln_dist_finalize (MPI cannot be initialized twice)");
    return KILN_ERR_ARG;
  }
  int registered = register_collectives(err, errlen);
  if (registered != KILN_OK) return registered;
  if (!backend) backend = "auto";
  bool want_mpi = strcmp(backend, "mpi") == 0, is_auto = strcmp(backend, "auto") == 0;
  if (!want_mpi && !is_auto && strcmp(backend, "none") != 0) {
    snprintf(err, errlen, "unknown backend \"%s\" (expected \"mpi\", \"none\" or \"auto\")", backend);
    return KILN_ERR_ARG;
  }
  if (n_groups > 0) { /* already initialized: the same world */
    bool has_mpi = groups[0]->comm != NULL;
    if (want_mpi && !has_mpi) {
      snprintf(err, errlen, "already initialized with backend \"none\"");
      return KILN_ERR_ARG;
    }
    *world = groups[0];
    return KILN_OK;
  }
  bool use_mpi = want_mpi || (is_auto && under_launcher());
  if (use_mpi) {
    int st = load_plugin(err, errlen);
    if (st != KILN_OK && want_mpi) return st;
    if (st != KILN_OK) /* N copies of a size-1 job would be silently wrong: say so */
      fprintf(stderr, "kiln: started by mpirun, but %s; kiln_dist_init(\"auto\") runs this rank as a group of size 1\n",
              err);
    use_mpi = st == KILN_OK;
  }
  void *comm = NULL;
  int rank = 0, size = 1;
  if (use_mpi && plugin->init(&rank, &size, &comm, err, errlen) != 0) return KILN_ERR_UNSUPPORTED;
  *world = group_add(comm, rank, size);
  if (!*world) {
    snprintf(err, errlen, "out of memory");
    return KILN_ERR_OOM;
  }
  return KILN_OK;
}

int dist_split(struct kiln_group *g, int color, int key, struct kiln_group **out, char *err, size_t errlen) {
  *out = NULL;
  void *comm = NULL;
  int rank = 0, size = 1;
  if (g->comm) {
    if (plugin->split(g->comm, color, key, &comm, &rank, &size, err, errlen) != 0) return KILN_ERR_DEVICE;
    if (!comm) return KILN_OK;
  } else if (color < 0) {
    return KILN_OK;
  }
  *out = group_add(comm, rank, size);
  if (*out) return KILN_OK;
  if (plugin && comm) plugin->free(comm);
  snprintf(err, errlen, "out of memory");
  return KILN_ERR_OOM;
}

int dist_finalize(char *err, size_t errlen) {
  if (finalized) return KILN_OK;
  bool mpi = n_groups > 0 && groups[0]->comm;
  for (int i = n_groups - 1; i >= 0; i--) {
    if (!groups[i]) continue;
    graph_node_release(groups[i]->last);
    if (plugin) plugin->free(groups[i]->comm);
    free(groups[i]);
  }
  free(groups);
  groups = NULL;
  n_groups = 0;
  finalized = true;
  if (mpi && plugin->finalize() != 0) {
    snprintf(err, errlen, "MPI_Finalize failed");
    return KILN_ERR_DEVICE;
  }
  return KILN_OK;
}

/* --------------------------------------------------------- collectives */

/* What every rank checks it agrees on before a collective moves data. */
typedef struct dist_desc {
  int32_t op, reduce, dtype, ndim, extra, pad;
  int64_t sizes[KILN_MAX_DIMS];
} dist_desc;

static const char *reduce_name(int r) {
  static const char *names[] = {"sum", "max", "min", "prod"};
  return r >= 0 && r < 4 ? names[r] : "?";
}

static void fmt_desc(const dist_desc *d, char *buf, size_t len) {
  char sz[256];
  api_fmt_sizes(sz, sizeof sz, d->ndim, d->sizes);
  const char *op = d->op >= 0 && d->op < GRAPH_OP_COUNT ? graph_ops[d->op].name : "?";
  const char *dt = graph_dtype_valid((kiln_dtype)d->dtype) ? graph_dtypes[d->dtype].name : "?";
  if (d->op == GRAPH_OP_ALL_REDUCE || d->op == GRAPH_OP_REDUCE_SCATTER)
    snprintf(buf, len, "%s(%s) of %s %s", op, reduce_name(d->reduce), dt, sz);
  else if (d->op == GRAPH_OP_BROADCAST)
    snprintf(buf, len, "%s(root %d) of %s %s", op, d->extra, dt, sz);
  else
    snprintf(buf, len, "%s of %s %s", op, dt, sz);
}

static dist_desc desc_of(const graph_node *n) {
  const graph_view *v = &n->inputs[0].view;
  dist_desc d = {.op = (int32_t)n->op, .dtype = (int32_t)n->dtype, .ndim = v->ndim};
  if (n->op == GRAPH_OP_ALL_REDUCE || n->op == GRAPH_OP_REDUCE_SCATTER) d.reduce = (int32_t)graph_attr_scalar(n);
  if (n->op == GRAPH_OP_BROADCAST) d.extra = (int32_t)graph_attr_scalar(n);
  memcpy(d.sizes, v->sizes, sizeof(int64_t) * (size_t)v->ndim);
  return d;
}

/* One allgather of the descriptors: KILN_ERR_SHAPE on every rank when
 * any differs (all ranks see the same table, so all fail together). */
static int agree(struct kiln_group *g, const graph_node *n, const char *what, char *err, size_t errlen) {
  dist_desc mine = desc_of(n);
  dist_desc *all = calloc((size_t)g->size, sizeof *all);
  if (!all) {
    snprintf(err, errlen, "out of memory");
    return KILN_ERR_OOM;
  }
  int st = KILN_OK;
  if (plugin->allgather(g->comm, &mine, all, (int)sizeof mine, dist_timeout(), what, err, errlen) != 0) {
    st = KILN_ERR_DEVICE;
  } else {
    for (int r = 0; r < g->size; r++) {
      if (memcmp(&all[r], &all[0], sizeof mine) == 0) continue;
      char a[384], b[384];
      int other = memcmp(&all[r], &mine, sizeof mine) != 0 ? r : 0;
      fmt_desc(&mine, a, sizeof a);
      fmt_desc(&all[other], b, sizeof b);
      snprintf(err, errlen, "ranks disagree on a collective: rank %d has %s, rank %d has %s", g->rank, a, other, b);
      st = KILN_ERR_SHAPE;
      break;
    }
  }
  free(all);
  return st;
}

static int mpi_dtype(kiln_dtype d) {
  switch (d) {
    case KILN_I8: return DIST_MPI_I8;
    case KILN_BOOL:
    case KILN_U8: return DIST_MPI_U8;
    case KILN_I16: return DIST_MPI_I16;
    case KILN_I32: return DIST_MPI_I32;
    case KILN_I64: return DIST_MPI_I64;
    case KILN_F64: return DIST_MPI_F64;
    default: return DIST_MPI_F32;
  }
}

/* The MPI reduction for r on dtype d: on BOOL, SUM is MAX (or) and PROD
 * is MIN (and). */
static int mpi_reduce(int r, kiln_dtype d) {
  if (d == KILN_BOOL && r == DIST_REDUCE_SUM) return DIST_MPI_MAX;
  if (d == KILN_BOOL && r == DIST_REDUCE_PROD) return DIST_MPI_MIN;
  return r == DIST_REDUCE_MAX ? DIST_MPI_MAX : r == DIST_REDUCE_MIN ? DIST_MPI_MIN : r == DIST_REDUCE_PROD ? DIST_MPI_PROD : DIST_MPI_SUM;
}

/* o[i] = x[i] op y[i] for i < count, in blocks of 16 that GCC's -O2
 * vectorizer takes (a fixed trip count, no aliasing); x may be o. */
#define COMBINE(T, OP, NAME)                                                        \
  static void NAME##_into(T *restrict o, const T *restrict x, const T *restrict y, int64_t count) { \
    int64_t i = 0;                                                                  \
    for (; i + 16 <= count; i += 16)                                                \
      for (int j = 0; j < 16; j++) o[i + j] = x[i + j] OP y[i + j];                 \
    for (; i < count; i++) o[i] = x[i] OP y[i];                                     \
  }                                                                                 \
  static void NAME##_acc(T *restrict o, const T *restrict y, int64_t count) {       \
    int64_t i = 0;                                                                  \
    for (; i + 16 <= count; i += 16)                                                \
      for (int j = 0; j < 16; j++) o[i + j] = o[i + j] OP y[i + j];                 \
    for (; i < count; i++) o[i] = o[i] OP y[i];                                     \
  }                                                                                 \
  static void NAME(void *o, const void *x, const void *y, int64_t count) {          \
    if (o == x) NAME##_acc(o, y, count);                                            \
    else NAME##_into(o, x, y, count);                                               \
  }
COMBINE(float, +, add_f32)
COMBINE(float, *, mul_f32)
COMBINE(double, +, add_f64)
COMBINE(double, *, mul_f64)

/* out[i] = op over ranks k = 0..size-1, in rank order, of
 * all[k * stride + i] for i < count (F32 or F64; out does not overlap
 * all). Rank by rank over the whole block: each element still sees rank
 * 0, then 1, ..., and every pass is one vectorized stream. */
static void reduce_in_order(kiln_dtype d, int r, const void *all, int64_t stride, int64_t count, int size,
                            void *out) {
  int esz = graph_dtypes[d].size;
  if (size == 1) memcpy(out, all, (size_t)(count * esz));
  for (int k = 1; k < size; k++) {
    const void *x = k == 1 ? all : out, *y = (const char *)all + k * stride * esz;
    if (d == KILN_F32) (r == DIST_REDUCE_PROD ? mul_f32 : add_f32)(out, x, y, count);
    else (r == DIST_REDUCE_PROD ? mul_f64 : add_f64)(out, x, y, count);
  }
}

static bool rank_ordered(kiln_dtype d, int r) {
  return (d == KILN_F32 || d == KILN_F64) && (r == DIST_REDUCE_SUM || r == DIST_REDUCE_PROD);
}

static int too_big(int64_t bytes, char *err, size_t errlen) {
  if (bytes <= INT_MAX) return KILN_OK;
  snprintf(err, errlen, "a message of %lld bytes is more than MPI's int count allows (split the tensor)",
           (long long)bytes);
  return KILN_ERR_UNSUPPORTED;
}

/* Float SUM/PROD in rank order, moving what a ring all-reduce moves: the
 * input [size blocks of `block` elements] goes through one alltoall, so
 * each rank holds every rank's copy of its own block; it reduces them in
 * rank order into `mine` (block elements). Every element is then
 * op(rank 0's, rank 1's, ...) as computed on any rank: bit-identical. */
static int alltoall_reduce(struct kiln_group *g, const graph_node *n, const void *in, int64_t block, void *mine,
                           const char *what, char *err, size_t errlen) {
  int esz = graph_dtypes[n->dtype].size;
  int st = too_big(block * esz * g->size, err, errlen);
  if (st != KILN_OK) return st;
  /* from the caching allocator: a fresh malloc of a large block would be
   * zeroed by the kernel page by page on every call */
  graph_buffer *got = graph_buffer_alloc(block * esz * g->size + 1);
  if (!got) {
    snprintf(err, errlen, "out of memory receiving %lld bytes", (long long)(block * esz * g->size));
    return KILN_ERR_OOM;
  }
  if (plugin->alltoall(g->comm, in, got->data, (int)(block * esz), dist_timeout(), what, err, errlen) != 0)
    st = KILN_ERR_DEVICE;
  else
    reduce_in_order(n->dtype, (int)graph_attr_scalar(n), got->data, block, block, g->size, mine);
  graph_buffer_release(got);
  return st;
}

/* All-reduce in rank order: alltoall_reduce of blocks of ⌈numel / size⌉
 * (the input padded to size whole blocks when it does not divide) into
 * this rank's block of the result, then an allgather in place. */
static int ordered_all_reduce(struct kiln_group *g, const graph_node *n, const void *in, void *out, const char *what,
                              char *err, size_t errlen) {
  int esz = graph_dtypes[n->dtype].size;
  int64_t numel = n->numel, block = (numel + g->size - 1) / g->size, padded = block * g->size;
  int st = too_big(padded * esz, err, errlen);
  if (st != KILN_OK) return st;
  bool pad = padded != numel;
  graph_buffer *src = pad ? graph_buffer_alloc(padded * esz) : NULL, *dst = pad ? graph_buffer_alloc(padded * esz) : NULL;
  if (pad && (!src || !dst)) {
    st = KILN_ERR_OOM;
    snprintf(err, errlen, "out of memory for an all-reduce of %lld bytes", (long long)(padded * esz));
  } else {
    if (pad) {
      memcpy(src->data, in, (size_t)(numel * esz));
      memset((char *)src->data + numel * esz, 0, (size_t)((padded - numel) * esz));
    }
    char *result = pad ? dst->data : out;
    st = alltoall_reduce(g, n, pad ? src->data : in, block, result + g->rank * block * esz, what, err, errlen);
    if (st == KILN_OK &&
        plugin->allgather(g->comm, NULL, result, (int)(block * esz), dist_timeout(), what, err, errlen) != 0)
      st = KILN_ERR_DEVICE;
    if (st == KILN_OK && pad) memcpy(out, dst->data, (size_t)(numel * esz));
  }
  if (src) graph_buffer_release(src);
  if (dst) graph_buffer_release(dst);
  return st;
}

static int run_all_reduce(struct kiln_group *g, const graph_node *n, const void *in, void *out, const char *what,
                          char *err, size_t errlen) {
  int r = (int)graph_attr_scalar(n);
  if (rank_ordered(n->dtype, r)) return ordered_all_reduce(g, n, in, out, what, err, errlen);
  int st = too_big(n->numel * graph_dtypes[n->dtype].size, err, errlen);
  if (st == KILN_OK && plugin->allreduce(g->comm, in, out, (int)n->numel, mpi_dtype(n->dtype), mpi_reduce(r, n->dtype),
                                         dist_timeout(), what, err, errlen) != 0)
    st = KILN_ERR_DEVICE;
  return st;
}

static int run_reduce_scatter(struct kiln_group *g, const graph_node *n, const void *in, void *out, const char *what,
                              char *err, size_t errlen) {
  int r = (int)graph_attr_scalar(n);
  int64_t block = n->numel, total = graph_view_numel(&n->inputs[0].view);
  if (rank_ordered(n->dtype, r)) return alltoall_reduce(g, n, in, block, out, what, err, errlen);
  int st = too_big(total * graph_dtypes[n->dtype].size, err, errlen);
  if (st == KILN_OK && plugin->reduce_scatter(g->comm, in, out, (int)block, mpi_dtype(n->dtype), mpi_reduce(r, n->dtype),
                                              dist_timeout(), what, err, errlen) != 0)
    st = KILN_ERR_DEVICE;
  return st;
}

static int run_p2p(struct kiln_group *g, const graph_node *n, const void *in, void *out, const char *what, char *err,
                   size_t errlen) {
  int peer = (int)graph_attr_scalar(n), tag = (int)graph_attr_reduce_mask(n);
  int64_t bytes = n->op == GRAPH_OP_SEND
                      ? graph_view_numel(&n->inputs[0].view) * graph_dtypes[n->inputs[0].node->dtype].size
                      : n->numel * graph_dtypes[n->dtype].size;
  int st = too_big(bytes, err, errlen);
  if (st != KILN_OK) return st;
  if (n->op == GRAPH_OP_SEND) {
    *(unsigned char *)out = 0;
    return plugin->send(g->comm, in, (int)bytes, peer, tag, dist_timeout(), what, err, errlen) ? KILN_ERR_DEVICE : KILN_OK;
  }
  int got = 0;
  if (plugin->recv(g->comm, out, (int)bytes, peer, tag, &got, dist_timeout(), what, err, errlen) != 0) {
    size_t k = strlen(err);
    snprintf(err + k, errlen - k, " (receiving %lld bytes from rank %d, tag %d: was the message larger?)",
             (long long)bytes, peer, tag);
    return KILN_ERR_SHAPE;
  }
  if (got == bytes) return KILN_OK;
  snprintf(err, errlen, "the message from rank %d (tag %d) held %d bytes, %lld expected", peer, tag, got,
           (long long)bytes);
  return KILN_ERR_SHAPE;
}

int dist_run(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen) {
  int id = (int)graph_attr_scalar2(n);
  struct kiln_group *g = !finalized && id >= 0 && id < n_groups ? groups[id] : NULL;
  if (!g || !g->comm) {
    snprintf(err, errlen, "the group of this collective is gone (kiln_dist_finalize ran)");
    return KILN_ERR_ARG;
  }
  static _Thread_local unsigned long long issued;
  char what[192];
  snprintf(what, sizeof what, "collective #%llu (%s)", ++issued, graph_ops[n->op].name);
  int esz = graph_dtypes[n->op == GRAPH_OP_RECV ? n->dtype : n->inputs[0].node->dtype].size; /* input's */
  const char *src = n->op == GRAPH_OP_RECV ? NULL : (const char *)in[0] + n->inputs[0].view.offset * esz;
  if (n->op == GRAPH_OP_SEND || n->op == GRAPH_OP_RECV) return run_p2p(g, n, src, out->data, what, err, errlen);
  int st = agree(g, n, what, err, errlen);
  if (st != KILN_OK) return st;
  int64_t bytes = graph_view_numel(&n->inputs[0].view) * esz;
  switch (n->op) {
    case GRAPH_OP_ALL_REDUCE: return run_all_reduce(g, n, src, out->data, what, err, errlen);
    case GRAPH_OP_REDUCE_SCATTER: return run_reduce_scatter(g, n, src, out->data, what, err, errlen);
    case GRAPH_OP_ALL_GATHER:
      st = too_big(bytes, err, errlen);
      if (st == KILN_OK && plugin->allgather(g->comm, src, out->data, (int)bytes, dist_timeout(), what, err, errlen))
        st = KILN_ERR_DEVICE;
      return st;
    case GRAPH_OP_BROADCAST:
      st = too_big(bytes, err, errlen);
      if (st != KILN_OK) return st;
      if (g->rank == (int)graph_attr_scalar(n)) memcpy(out->data, src, (size_t)bytes);
      return plugin->bcast(g->comm, out->data, (int)bytes, (int)graph_attr_scalar(n), dist_timeout(), what, err,
                           errlen) ? KILN_ERR_DEVICE : KILN_OK;
    default:
      snprintf(err, errlen, "op %s is not a collective", graph_ops[n->op].name);
      return KILN_ERR_UNSUPPORTED;
  }
}
