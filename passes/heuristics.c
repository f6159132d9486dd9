/*
 * heuristics.c — the optimisation choices of one kernel, as data: before
 * a kernel is lowered, pass_choose_opts fills its options record
 * (pass_opts, passes.h) from the plan, the kernel's group and the
 * settings (KILN_STREAM_BYTES), and lowering reads only the record. A
 * choice left off lowers the plain loop nest; every choice computes the
 * same values (it changes loop order, unrolling, tiling or how stores
 * reach memory, never what is stored).
 *
 * KILN_OPTS forces choices for every kernel ("unroll=0,stream=1": keys
 * below, parsed once; a bad item is ignored with one line on stderr), so
 * the effect of each is measurable; pass_opts_override replaces it from a
 * test. A forced choice applies where the kernel can take it (tiles need
 * two dims of a tile, unrolling a short dim, ...); elsewhere the record
 * keeps the heuristic's value. KILN_DEBUG=2 prints each lowered kernel's
 * record in one line. Measurements behind each threshold are in
 * docs/internals.md (Forcing, Streaming stores, Transposed reads, Column
 * reductions).
 *
 * The group is walked here as lowering walks it (lower.c walk): the
 * producers computed inside the kernel (fused, or stored by it), each
 * once, producers first.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pass_internal.h"

/* -------------------------------------------------------- thresholds */

/* An innermost dim of at most UNROLL_INNER elements, under one of at
 * least UNROLL_ROW, is unrolled: the dim above becomes the innermost
 * loop and vectorizes (a gradient through 2x2 pooling windows loops over
 * [.., 14, 2, 14, 2]: LLVM unrolled the loops of 2 but left the rows of
 * 14 scalar). Its reads and writes of pairs are masked interleaved
 * groups (llvm_jit.c), so the pooled conv2 rows of 7 gain too: they ran
 * slower unrolled while the pairs were gathers and scatters. */
#define UNROLL_INNER 4
#define UNROLL_ROW 7 /* shorter rows fill too few lanes of a masked vector (not measured below 7) */

/* A reduction of at most UNROLL_REDUCE elements per output, inside a
 * kept loop of at least UNROLL_ROW, is unrolled: its terms are added in
 * the loop's order (the same sum, rounded the same way), and the
 * innermost kept loop, now the innermost loop, vectorizes (max pooling's
 * 2x2 windows: a loop of 2 in a loop of 2 inside the row of outputs ran
 * scalar; the pooled conv2 rows of 7 too, since pairs are masked
 * interleaved groups). */
#define UNROLL_REDUCE 16

/* Skewed tiles: row bands a group (the CPU backend keeps a band's last
 * source rows for the next column block, a slot per band: 32 KiB of F32
 * a group). Faster than 16 since the tile got cheaper (trials of 16, 32,
 * 64, 128: docs/internals.md, Transposed reads). */
#define SKEW_BANDS 32
#define BANDS_MAX 64 /* a forced value: the slots live on the stack */

/* Column reductions (lower_columns.c): blocks of up to COL_MAX columns
 * (8 KiB of F64 accumulators, in L1), at least COL_MIN when split for
 * parallelism, the general path below COL_FEWEST columns; with fewer
 * than COL_SPLIT kept rows the columns split into up to COL_SPLIT blocks,
 * so the pool has work for each thread. A pass adds ROW_GROUP rows (8
 * sequential 4 KiB runs of F32: the read roofline on bench/ row W3b,
 * where 4 and 16 rows, and 512-column blocks, were slower). */
#define COL_MAX 1024
#define COL_MIN 32
#define COL_FEWEST 16
#define COL_SPLIT 4
#define ROW_GROUP 8
#define ROWS_MAX 64 /* a forced value: rows a pass, unrolled */

/* Scans: neighbouring scans along a unit-stride last dim run together,
 * so a scan down the columns reads whole cache lines. */
#define SCAN_LANES PASS_SCAN_LANES_MAX

/* ------------------------------------------------------------ settings */

/* Outputs of at least this many bytes (KILN_STREAM_BYTES; 0: none) are
 * written with streaming stores: they do not stay in the caches anyway,
 * and a cached store first reads every line it writes. 64 MiB: bench/'s
 * 64 MiB outputs (W1, W7) ran faster streamed, its 32 MiB output (W5),
 * which a repeated run finds in the cache, slower (bench/README.md to
 * measure again before changing it). */
static int64_t read_stream_bytes(void) {
  const char *e = getenv("KILN_STREAM_BYTES");
  int64_t bytes = e ? atoll(e) : INT64_C(64) << 20;
  return bytes < 0 ? 0 : bytes;
}

static int64_t stream_bytes(void) {
  static atomic_int_fast64_t bytes = GRAPH_ENV_UNREAD;
  return graph_env_once(&bytes, read_stream_bytes);
}

/* ----------------------------------------------------------- overrides */

/* KILN_OPTS's keys: a boolean choice (0 or 1) or a positive count. */
typedef enum force_key { F_UNROLL, F_TILE, F_SKEW, F_STREAM, F_COLUMNS, F_SPILL, F_LANES, F_SLABS, F_BANDS, F_ROWS, F_COUNT } force_key;

static const struct {
  const char *name;
  int max; /* 1: a boolean */
} force_keys[F_COUNT] = {
    [F_UNROLL] = {"unroll", 1}, [F_TILE] = {"tile", 1},       [F_SKEW] = {"skew", 1},   [F_STREAM] = {"stream", 1},
    [F_COLUMNS] = {"columns", 1}, [F_SPILL] = {"spill", 1},   [F_LANES] = {"lanes", 1}, [F_SLABS] = {"slabs", 1},
    [F_BANDS] = {"bands", BANDS_MAX}, [F_ROWS] = {"colrows", ROWS_MAX},
};

/* The forced value of each key, -1 where the heuristic decides. */
typedef struct forced {
  int v[F_COUNT];
} forced;

static forced overrides;
static pthread_once_t overrides_once = PTHREAD_ONCE_INIT;

/* Parses one "key=value" item of length len (blanks around the key and
 * the value allowed) into f; false when it is not one. */
static bool parse_item(const char *item, size_t len, forced *f) {
  const char *eq = memchr(item, '=', len), *s = item;
  if (!eq) return false;
  const char *key_end = eq;
  while (s < key_end && (*s == ' ' || *s == '\t')) s++;
  while (key_end > s && (key_end[-1] == ' ' || key_end[-1] == '\t')) key_end--;
  for (int key = 0; key < F_COUNT; key++) {
    size_t n = strlen(force_keys[key].name);
    if ((size_t)(key_end - s) != n || strncmp(s, force_keys[key].name, n) != 0) continue;
    char value[24];
    size_t vlen = len - (size_t)(eq + 1 - item);
    int64_t v;
    if (vlen >= sizeof value) return false;
    memcpy(value, eq + 1, vlen);
    value[vlen] = 0;
    if (!graph_env_parse_int(value, force_keys[key].max == 1 ? 0 : 1, &v) || v > force_keys[key].max) return false;
    f->v[key] = (int)v;
    return true;
  }
  return false;
}

/* Parses spec (items separated by commas) into *f; each bad item is
 * reported on stderr (as from `source`) and ignored. Returns the number
 * of bad items. */
static int parse_spec(const char *spec, forced *f, const char *source) {
  for (int key = 0; key < F_COUNT; key++) f->v[key] = -1;
  int bad = 0;
  for (const char *s = spec; spec && *s;) {
    size_t len = strcspn(s, ","), blanks = strspn(s, " \t");
    if (blanks < len && !parse_item(s, len, f)) { /* (empty items are skipped) */
      bad++;
      fprintf(stderr,
              "kiln: %s item \"%.*s\" is not one of unroll, tile, skew, stream, columns, spill, lanes, slabs "
              "(=0 or 1), bands=1..%d or colrows=1..%d; ignored\n",
              source, (int)len, s, BANDS_MAX, ROWS_MAX);
    }
    s += len + (s[len] == ',');
  }
  return bad;
}

static void read_overrides(void) { parse_spec(getenv("KILN_OPTS"), &overrides, "KILN_OPTS"); }

static const forced *current_overrides(void) {
  pthread_once(&overrides_once, read_overrides);
  return &overrides;
}

bool pass_opts_override(const char *spec) {
  pthread_once(&overrides_once, read_overrides);
  forced f;
  if (parse_spec(spec, &f, "pass_opts_override") > 0) return false;
  overrides = f;
  return true;
}

/* The choice: the heuristic's `wanted` (a subset of `possible`), or the
 * forced value where the kernel can take it. */
static bool pick(const forced *f, force_key key, bool possible, bool wanted) {
  return f->v[key] < 0 ? wanted : f->v[key] && possible;
}

/* ---------------------------------------------------------- the group */

/* What the heuristics read of a kernel's group (walked as lower.c's
 * walk): the fused reductions, producers first, and whether an external
 * buffer read walks the root's last two dims transposed. */
typedef struct facts {
  const pass_plan *p;
  const graph_node *root, *host;
  const graph_node **seen; /* [cap] nodes walked */
  int n_seen, cap;
  const graph_node **rows; /* [cap_rows] */
  int n_rows, cap_rows;
  bool transposed;
  bool oom;
} facts;

static bool add_to(facts *f, const graph_node ***arr, int *n, int *cap, const graph_node *x) {
  if (*n == *cap) {
    int want = *cap ? 2 * *cap : 32;
    const graph_node **grown = graph_realloc(*arr, sizeof *grown * (size_t)want);
    if (!grown) {
      f->oom = true;
      return false;
    }
    *arr = grown;
    *cap = want;
  }
  (*arr)[(*n)++] = x;
  return true;
}

static bool was_seen(facts *f, const graph_node *n) {
  for (int i = 0; i < f->n_seen; i++)
    if (f->seen[i] == n) return true;
  return !add_to(f, &f->seen, &f->n_seen, &f->cap, n); /* (out of memory: stop there) */
}

/* An external read of a buffer with unit stride along the root's
 * second-to-last dim and a larger one along its last: row by row, the
 * kernel would read it with a large stride. */
static bool transposed_read(const graph_node *root, const graph_node *src, const graph_view *v) {
  int nd = root->ndim;
  return !pass_is_inlined(src) && nd >= 2 && v->ndim == nd && v->strides[nd - 2] == 1 && v->strides[nd - 1] > 1;
}

static void walk(facts *f, const graph_node *n, bool skip_first) {
  for (int i = skip_first ? 1 : 0; i < n->n_inputs && !f->oom; i++) {
    const graph_node *src = n->inputs[i].node;
    if (!pass_computed_in(f->p, src, f->host)) {
      f->transposed = f->transposed || transposed_read(f->root, src, &n->inputs[i].view);
    } else if (!was_seen(f, src)) {
      walk(f, src, false);
      if (graph_ops[src->op].kind == GRAPH_REDUCE) add_to(f, &f->rows, &f->n_rows, &f->cap_rows, src);
    }
  }
}

/* The results the host stores besides its own (passes.h: binding
 * outputs, in this order), at most PASS_MAX_OUTPUTS (more: the kernel
 * does not fit). Returns their count. */
static int stored(const pass_plan *p, const graph_node *host, const graph_node **out) {
  int at = pass_pos(p, host), n = 0;
  for (int s = at >= 0 ? p->e[at].stores : -1; s >= 0 && n < PASS_MAX_OUTPUTS; s = p->e[s].store_next)
    out[n++] = p->order[s];
  return n;
}

/* ------------------------------------------------------------- choices */

/* Every read of e in n's fused group (row values aside) is at n's own
 * index: the path from n to e is plain reads of nodes of n's sizes.
 * *found: the group reads e at all. Deeper than 16 levels it gives up
 * (no spill: the kernel recomputes, as it would without this choice). */
static bool reads_in_place(const facts *f, const graph_node *n, const graph_node *e, int depth, bool *found) {
  for (int i = 0; i < n->n_inputs; i++) {
    const graph_node *in = n->inputs[i].node;
    if (!pass_computed_in(f->p, in, f->host) || graph_ops[in->op].kind == GRAPH_REDUCE) continue;
    bool same = in->ndim == n->ndim && !memcmp(in->sizes, n->sizes, sizeof *n->sizes * (size_t)n->ndim);
    if (!same || !pass_plain_view(&n->inputs[i].view, in)) { /* read at another index: must not reach e */
      bool below = false;
      if (in == e || depth >= 16 || !reads_in_place(f, in, e, depth + 1, &below) || below) return false;
      continue;
    }
    if (in == e) *found = true;
    else if (depth >= 16 || !reads_in_place(f, in, e, depth + 1, found)) return false;
  }
  return true;
}

/* Softmax computes exp(x - max) in the sum pass and again in the
 * epilogue. An expensive fused input of a row reduction that the root
 * reads at its own index, with the root's dtype and sizes, can instead
 * be stored into the output by the reduction pass and loaded back by the
 * epilogue, which then overwrites it: one exp per element, bit-identical
 * values (the stored value is the rounded one). Returns its plan
 * position, -1 for none; `cheap_too`: a cheap input qualifies (forced).
 * Not for a reduction root, and not on KILN_CUDA: the CUDA printer's
 * cooperative form (one block per row) takes reduction loops without
 * stores, and recomputing is cheap there. Row kernels are never merged
 * (merge_loops.c), so the position names the node lowering walks. */
static int spill_candidate(const facts *f, bool cheap_too) {
  const graph_node *root = f->root;
  if (graph_ops[root->op].kind == GRAPH_REDUCE || !graph_is_float(root->dtype) || f->host->device == KILN_CUDA)
    return -1;
  for (int i = f->n_rows - 1; i >= 0; i--) {
    const graph_node *e = f->rows[i]->inputs[0].node;
    const graph_view *v = &f->rows[i]->inputs[0].view;
    bool elementwise = graph_op_is_pointwise(e->op);
    bool same = e->ndim == root->ndim && !memcmp(e->sizes, root->sizes, sizeof *e->sizes * (size_t)e->ndim);
    bool found = false;
    int at = pass_pos(f->p, e);
    bool cheap = at >= 0 && f->p->e[at].fuse_cheap;
    if (at >= 0 && pass_computed_in(f->p, e, f->host) && elementwise && (!cheap || cheap_too) &&
        e->dtype == root->dtype && same && pass_plain_view(v, e) && reads_in_place(f, root, e, 0, &found) && found)
      return at;
  }
  return -1;
}

/* Elements per output of reduction q, when its loops may be unrolled
 * (not argmax/argmin: their update keeps an index), else 0. *row: the
 * innermost kept dim's size. */
static int64_t reduce_terms(const graph_node *q, int64_t *row) {
  const graph_view *v = &q->inputs[0].view;
  uint32_t mask = graph_attr_reduce_mask(q);
  int64_t terms = 1;
  *row = 0;
  if (q->op == GRAPH_OP_ARGMAX || q->op == GRAPH_OP_ARGMIN) return 0;
  for (int d = 0; d < v->ndim; d++) {
    if (mask & (1u << d)) terms *= v->sizes[d];
    else if (v->sizes[d] > 1) *row = v->sizes[d];
  }
  return terms;
}

/* The reductions of a kernel (the root, or its fused rows) share their
 * input's sizes and reduced dims (lower.c lower_rows), so one count
 * serves all of them but argmax/argmin. */
static int unroll_reduce(const facts *f, const forced *force) {
  for (int i = -1; i < f->n_rows; i++) {
    const graph_node *q = i < 0 ? f->root : f->rows[i];
    if (graph_ops[q->op].kind != GRAPH_REDUCE) continue;
    int64_t row, terms = reduce_terms(q, &row);
    if (terms <= 0) continue;
    bool possible = terms <= UNROLL_REDUCE;
    return pick(force, F_UNROLL, possible, possible && row >= UNROLL_ROW) ? (int)terms : 0;
  }
  return 0;
}

/* The column block width for reduction n, 0 for the general path. The
 * pattern: the input's last dim kept, something reduced, not an
 * argmax/argmin, not a KILN_CUDA tensor (a LOCAL is per thread, so a
 * block would be one GPU thread's work; the general path spreads the
 * outputs over threads or blocks). The heuristic adds: unit stride along
 * the last dim, at least COL_FEWEST columns. Blocks are as even as can
 * be (the last one, shifted back, overlaps its neighbour by fewer
 * columns than there are blocks). */
static int64_t column_block(const graph_node *n, const forced *force) {
  const graph_view *v = &n->inputs[0].view;
  int last = v->ndim - 1;
  uint32_t mask = graph_attr_reduce_mask(n);
  bool arg = n->op == GRAPH_OP_ARGMAX || n->op == GRAPH_OP_ARGMIN;
  if (arg || n->device == KILN_CUDA || last < 1 || (mask & (1u << last)) || mask == 0) return 0;
  int64_t cols = v->sizes[last], kept = 1;
  if (!pick(force, F_COLUMNS, cols > 0, v->strides[last] == 1 && cols >= COL_FEWEST)) return 0;
  for (int d = 0; d < last; d++)
    if (!(mask & (1u << d))) kept *= v->sizes[d];
  int64_t blocks = (cols + COL_MAX - 1) / COL_MAX;
  if (kept < COL_SPLIT && blocks < COL_SPLIT) {
    int64_t split = cols / COL_MIN < COL_SPLIT ? cols / COL_MIN : COL_SPLIT;
    if (split > blocks) blocks = split;
  }
  return (cols + blocks - 1) / blocks;
}

/* Elementwise roots: unrolling a short innermost dim, or tiles. Tiles
 * when an external read walks the last two dims transposed (bench row
 * W7: the source is read as KIR_TILE sequential streams and transposed
 * in registers), both dims at least two tiles. A size that is not a
 * multiple of the tile shifts the last tile back over its neighbour,
 * which stores some elements twice, with the same value: so never when
 * the kernel also writes in place (a stored whole write), where the
 * second pass could read what the first stored. A last dim that is not
 * a multiple of KIR_TILE takes skewed tiles (every store a whole,
 * aligned vector: W7r). */
static void choose_elementwise(const facts *f, const graph_node *const *outs, int n_outs, const forced *force,
                               pass_opts *o) {
  const graph_node *r = f->root;
  int nd = r->ndim;
  int64_t inner = nd >= 2 ? r->sizes[nd - 1] : 0, rows = nd >= 2 ? r->sizes[nd - 2] : 0;
  bool short_inner = inner > 1 && inner <= UNROLL_INNER;
  if (pick(force, F_UNROLL, short_inner, short_inner && rows >= UNROLL_ROW)) {
    o->unroll_inner = (int)inner;
    return;
  }
  bool writes = false;
  for (int j = 0; j < n_outs; j++) writes = writes || outs[j]->op == GRAPH_OP_ASSIGN;
  bool fits = nd >= 2 && !writes && rows >= KIR_TILE && inner >= KIR_TILE;
  o->tile = pick(force, F_TILE, fits, fits && rows >= 2 * KIR_TILE && inner >= 2 * KIR_TILE && f->transposed);
  bool ragged = inner % KIR_TILE != 0;
  o->skew = o->tile && pick(force, F_SKEW, ragged && inner >= 2 * KIR_TILE, ragged);
  if (o->skew) o->skew_bands = force->v[F_BANDS] > 0 ? force->v[F_BANDS] : SKEW_BANDS;
}

/* Streaming stores, for n's buffer of at least stream_bytes(). A tiled
 * kernel writes each cache line of its output whole, but KIR_TILE rows
 * apart: plain stores first read every line, and the reads fight the
 * source's streams, so it streams from an eighth of the limit (bench row
 * W7). Plain tiles over a last dim that is not a multiple of KIR_TILE
 * never stream (their rows do not start vector-aligned: kir.h). */
static bool streams(const pass_opts *o, const graph_node *n, const graph_node *root, const forced *force) {
  int64_t limit = stream_bytes();
  if (o->tile) limit /= 8;
  bool ragged_tiles = o->tile && !o->skew && root->sizes[root->ndim - 1] % KIR_TILE != 0;
  return pick(force, F_STREAM, !ragged_tiles, limit > 0 && n->numel * graph_dtypes[n->dtype].size >= limit);
}

static void choose_scan(const graph_node *n, const forced *force, pass_opts *o) {
  const graph_view *v = &n->inputs[0].view;
  uint32_t mask = graph_attr_reduce_mask(n);
  int last = v->ndim - 1, s = -1;
  for (int d = 0; d < v->ndim; d++)
    if (mask & (1u << d)) s = d;
  bool fits = s >= 0 && s != last && v->sizes[last] % SCAN_LANES == 0 && v->sizes[last] > 0;
  o->scan_lanes = pick(force, F_LANES, fits, fits && v->strides[last] == 1) ? SCAN_LANES : 1;
}

/* Scatter-add into one chunk along a dim other than 0: target slabs
 * along dim 0 are disjoint, so they run in parallel (the same sums: each
 * slab adds its index elements in the chunk's order). */
static void choose_scatter(const graph_node *n, const forced *force, pass_opts *o) {
  int dim = (int)graph_attr_scalar(n);
  bool fits = n->sizes[0] == 1 && dim > 0;
  o->scatter_slabs = pick(force, F_SLABS, fits, fits && n->sizes[1] > 1);
}

int pass_choose_opts(const pass_plan *p, const graph_node *root, const graph_node *host, bool in_place,
                     pass_opts *o) {
  const forced *force = current_overrides();
  *o = (pass_opts){.spill = -1, .scan_lanes = 1};
  facts f = {.p = p, .root = root, .host = host};
  const graph_node *outs[PASS_MAX_OUTPUTS];
  int n_outs = stored(p, host, outs);
  graph_kind kind = graph_ops[root->op].kind;
  for (int j = 0; j < n_outs && !f.oom; j++)
    if (!was_seen(&f, outs[j])) walk(&f, outs[j], outs[j]->op == GRAPH_OP_ASSIGN);
  bool skips_old = kind == GRAPH_ASSIGN && (in_place || pass_whole_write(root));
  walk(&f, root, skips_old);
  if (f.oom) {
    free(f.seen);
    free(f.rows);
    return KILN_ERR_OOM;
  }
  bool elementwise = kind == GRAPH_SOURCE || kind == GRAPH_UNARY || kind == GRAPH_BINARY || kind == GRAPH_TERNARY ||
                     kind == GRAPH_CAST || kind == GRAPH_GATHER;
  if (f.n_rows > 0 && (elementwise || kind == GRAPH_REDUCE)) {
    o->path = PASS_PATH_ROWS;
    o->unroll_reduce = unroll_reduce(&f, force);
    o->spill = force->v[F_SPILL] < 0 ? spill_candidate(&f, false) : force->v[F_SPILL] ? spill_candidate(&f, true) : -1;
  } else if (elementwise) {
    o->path = PASS_PATH_ELEMENTWISE;
    choose_elementwise(&f, outs, n_outs, force, o);
  } else if (kind == GRAPH_REDUCE) {
    o->path = PASS_PATH_REDUCE;
    o->column_block = column_block(root, force);
    if (o->column_block) o->column_rows = force->v[F_ROWS] > 0 ? force->v[F_ROWS] : ROW_GROUP;
    else o->unroll_reduce = unroll_reduce(&f, force);
  } else if (kind == GRAPH_SCAN) {
    o->path = PASS_PATH_SCAN;
    choose_scan(root, force, o);
  } else if (kind == GRAPH_SCATTER) {
    o->path = PASS_PATH_SCATTER;
    choose_scatter(root, force, o);
  } else {
    o->path = PASS_PATH_ASSIGN;
  }
  /* stores: the root's where its lowering stores through store_node,
   * the further outputs' (elementwise ones: a stored write may be its
   * old version's buffer, not 64-byte aligned) */
  bool root_streams = o->path == PASS_PATH_ELEMENTWISE || o->path == PASS_PATH_REDUCE ||
                      (o->path == PASS_PATH_ROWS && o->spill < 0);
  o->stream = root_streams && streams(o, root, root, force);
  for (int j = 0; j < n_outs; j++)
    if (outs[j]->op != GRAPH_OP_ASSIGN && streams(o, outs[j], root, force)) o->stream_outputs |= 1u << j;
  free(f.seen);
  free(f.rows);
  return KILN_OK;
}

int pass_kernel_opts(const pass_plan *p, const graph_node *n, bool in_place, pass_opts *o) {
  pass_merged merged;
  bool oom = false;
  int at = pass_pos(p, n);
  bool stores = at >= 0 && p->e[at].stores >= 0;
  bool merge = !stores && pass_merge_loops(p, n, &merged, &oom);
  if (oom) return KILN_ERR_OOM;
  int st = pass_choose_opts(p, merge ? merged.root : n, n, in_place, o);
  if (merge) pass_merged_free(&merged);
  return st;
}

/* --------------------------------------------------------------- print */

static const char *const path_names[] = {
    [PASS_PATH_ELEMENTWISE] = "elementwise", [PASS_PATH_ROWS] = "rows",       [PASS_PATH_REDUCE] = "reduce",
    [PASS_PATH_SCAN] = "scan",               [PASS_PATH_SCATTER] = "scatter", [PASS_PATH_ASSIGN] = "write",
};

void pass_opts_format(const pass_opts *o, char *buf, size_t len) {
  size_t n = 0;
#define PUT(...) (n += (size_t)snprintf(buf + n, n < len ? len - n : 0, __VA_ARGS__))
  PUT("%s", path_names[o->path]);
  switch (o->path) {
  case PASS_PATH_ELEMENTWISE:
    PUT(" unroll=%d tile=%d", o->unroll_inner, o->tile);
    if (o->tile) PUT(" skew=%d", o->skew);
    if (o->skew) PUT(" bands=%d", o->skew_bands);
    break;
  case PASS_PATH_ROWS: PUT(" unroll=%d spill=%d", o->unroll_reduce, o->spill); break;
  case PASS_PATH_REDUCE:
    PUT(" columns=%lld", (long long)o->column_block);
    if (o->column_block) PUT(" colrows=%d", o->column_rows);
    else PUT(" unroll=%d", o->unroll_reduce);
    break;
  case PASS_PATH_SCAN: PUT(" lanes=%d", o->scan_lanes); break;
  case PASS_PATH_SCATTER: PUT(" slabs=%d", o->scatter_slabs); break;
  default: break;
  }
  if (o->path != PASS_PATH_SCAN && o->path != PASS_PATH_SCATTER && o->path != PASS_PATH_ASSIGN)
    PUT(" stream=%d", o->stream);
  if (o->stream_outputs) PUT(" stream_outputs=0x%x", o->stream_outputs);
#undef PUT
  if (len && n >= len) buf[len - 1] = 0;
}

static int64_t read_debug_level(void) {
  const char *e = getenv("KILN_DEBUG");
  return e ? atoi(e) : 0;
}

void pass_opts_debug(const pass_opts *o, const char *kernel) {
  static atomic_int_fast64_t level = GRAPH_ENV_UNREAD;
  if (graph_env_once(&level, read_debug_level) < 2) return;
  char line[160];
  pass_opts_format(o, line, sizeof line);
  fprintf(stderr, "kiln: options %s: %s\n", kernel, line);
}
