/*
 * fuse.c — fusion decisions: which pending nodes of a schedule are
 * computed inside their readers' kernels (the plan's `fused`) and which
 * get a kernel and a buffer of their own (materialized).
 *
 * The cost function, in order:
 *  1. Requested nodes, in-place writes (ASSIGN) and sources are
 *     materialized: they are kernel roots (a whole-buffer write may
 *     still run inside a later kernel, rule 7). A reduction over a suffix of
 *     its input's dims (rows) is fused: its readers' kernel computes it
 *     once per row before using it (row fusion: softmax, layer norm,
 *     variance become one kernel per block of rows). Other reductions are
 *     materialized. A kernel walks one set of rows, along its root's
 *     leading dims: a fused input that needs row reductions over other
 *     rows than its reader's reduction, or a kernel root that cannot walk
 *     its fused inputs' rows (rows of two reductions, a root shaped
 *     otherwise than the rows — a loss gradient flattened to [B·C] —, an
 *     in-place write), or a row value read through a reshape or a
 *     transpose, is materialized (fit_rows, materialize_row_reshapes), so
 *     lowering never has to fall back at run time for rows (a schedule
 *     whose lowering falls back is re-planned at every force).
 *  2. An elementwise node read by one reader in the schedule is fused
 *     (a reader reading it twice through the same view reads it once):
 *     recomputing it costs nothing, materializing it costs a write and a
 *     read of its whole output.
 *  3. An elementwise node read by several readers is fused only when it is
 *     cheap — its own op and everything fused into it are plain arithmetic,
 *     comparisons or selects (CHEAP in graph/ops.def) — since
 *     each reader recomputes it — or when it depends on a fused reduction:
 *     then it is recomputed from a row that is still in cache, which beats
 *     writing and re-reading the whole tensor. Otherwise it is
 *     materialized once.
 *  4. A node read through a broadcast view (a stride-0 dim of size > 1) is
 *     fused only when cheap or row-dependent (per-row values are loop
 *     invariant in the inner loop and hoisted by the compiler).
 *  5. The inputs of an extern op (BLAS matmul, scatter) are materialized:
 *     the library reads buffers. Except a CPU matmul's operand that is a
 *     reshape copy the generated GEMM can pack from the copy's input
 *     (implicit GEMM, runtime/gemm_pack.c: a convolution's im2col
 *     columns): its input is materialized and the copy is not written
 *     (the runtime realizes it after all if OpenBLAS runs the product);
 *     unless that input is elementwise, of the copy's size and read by
 *     the copy alone: then the copy is written, its input fused into it
 *     (packs_through). So is a gather's source (it is read at
 *     data-dependent positions, maybe several times); a gather itself is
 *     elementwise over its result: its index fuses into it, and it fuses
 *     into its readers. Its elementwise readers fuse as usual, so
 *     bias, activation and scale become one epilogue kernel. A scan
 *     (cumsum, cumprod) is a root; elementwise producers fuse into it,
 *     but one that depends on a fused row reduction is materialized (a
 *     scan kernel has no row loop). So is a scatter-add (its index and
 *     its source fuse into it, read once per index element).
 *  6. A kernel may read at most PASS_MAX_INPUTS buffers, have at most
 *     PASS_MAX_EDGES external reads (each takes an argument: an offset or
 *     a fill value) and PASS_MAX_GROUP nodes: when a group would exceed
 *     one of them, its fused inputs are materialized. (Lowering still
 *     checks its own limits and falls back the same way at run time.)
 *  7. Multi-output kernels: a materialized elementwise node p (requested,
 *     or read by several readers, one of them after r) whose value a later
 *     elementwise kernel r of the same sizes can compute — r reads p
 *     through its plain contiguous view, or reads a buffer p reads too —
 *     is computed and stored by r's kernel (p's plan entry: host = r's
 *     position) instead of a kernel of its own, so the loop over their shared inputs runs once: two forced
 *     results of one loop (`a+b`, `a*b`) read a and b once, and `y =
 *     exp(x)` forced with `z = y*2` writes y and z from one kernel.
 *     A whole-buffer write p (an ASSIGN whose region is its storage's
 *     whole contiguous extent: pass_whole_write) takes part as an
 *     elementwise node of its region's sizes: its value is elementwise
 *     over the region and it never reads its old version. It is stored
 *     by a later elementwise kernel or write kernel r whose loop (its
 *     sizes; a write's region's) has those sizes and that reads p, or
 *     computes a node of p's value or reads one of its buffers — an
 *     optimizer's parameter write r reads the new momentum p: one kernel
 *     writes both, the momentum computed once, in registers. A write is a
 *     storage's version, so it is always stored (never just recomputed).
 *     The runtime writes it in place under the same rule as its own
 *     kernel would (realize.c), else into a new buffer: the kernel writes
 *     every element either way. Not into r when r overwrites p (p is r's
 *     old version: the storage keeps one buffer only when p is written
 *     there first). A write through a strided or partial view is not
 *     whole and keeps its kernel.
 *     Only when nothing between p and r in the schedule reads p (r's kernel
 *     runs at r's position, so p's buffer exists only from there on),
 *     both are on one device, neither is row-fused, r is stored by no
 *     other kernel, and r stores
 *     at most PASS_MAX_OUTPUTS nodes. The host is the last such kernel
 *     before p's first reader, at most HOST_WINDOW positions ahead, so
 *     siblings gather in one kernel (a+b, a-b, a*b: one kernel). A p that
 *     stores others already hands them on to its host when no kernel in
 *     between reads them (a chain: exp(a), exp(a)*2 + b and a comparison
 *     of both, forced together, are one kernel).
 * Fused nodes are never realized; a later request recomputes them from
 * their inputs, which they keep alive.
 *
 * Every decision and every count is written to the force's plan
 * (plan.h), never to the nodes, and only for the plan's own nodes: an
 * input outside the plan (a realized buffer, maybe read by other threads'
 * forces too) is read and never written.
 */
#include <stdlib.h>
#include <string.h>

#include "pass_internal.h"

/* Fuses into its readers as one value per index (a gather too: its index
 * fuses into it, its source is a buffer, rule 5). */
/* Cheap including everything already fused into it (inputs are decided
 * first, in post-order, so their flags are final). */
static bool cheap(const pass_plan *p, int i) {
  const graph_node *n = p->order[i];
  if (!graph_op_is_cheap(n->op)) return false; /* rule 3: ops.def's CHEAP */
  for (int j = 0; j < n->n_inputs; j++) {
    const graph_node *in = n->inputs[j].node;
    if (pass_fused(p, in) && !p->e[pass_pos(p, in)].fuse_cheap) return false;
  }
  return true;
}

/* A reduction over the last dims of its input, keeping the leading ones. */
static bool row_reduction(const graph_node *n) {
  if (graph_ops[n->op].kind != GRAPH_REDUCE) return false;
  int nd = n->inputs[0].view.ndim;
  uint32_t mask = graph_attr_reduce_mask(n), all = nd ? (uint32_t)((1ull << nd) - 1) : 0;
  if (mask == 0) return false;
  uint32_t low = mask & (~mask + 1); /* lowest reduced dim */
  return mask == (all & ~(low - 1));
}

/* The plan entry of a fused pending input, or NULL. */
static pass_entry *fused_entry(pass_plan *p, const graph_node *in) {
  return pass_fused(p, in) ? &p->e[pass_pos(p, in)] : NULL;
}

static bool depends_on_rows(pass_plan *p, const graph_node *n) {
  for (int i = 0; i < n->n_inputs; i++) {
    const pass_entry *e = fused_entry(p, n->inputs[i].node);
    if (e && e->row_dep) return true;
  }
  return false;
}

static bool broadcast_read(const graph_view *v) {
  for (int d = 0; d < v->ndim; d++)
    if (v->strides[d] == 0 && v->sizes[d] > 1) return true;
  return false;
}

/* The size of n's group (n and the producers fused into it), exactly as
 * the lowering walks it: each fused node once however many paths reach
 * it (a pooling chain reads its running maximum twice a tap: counted
 * per path, the count doubles a tap), an edge per read of a node outside
 * the group (a buffer, a fill or an arange: each takes a kernel
 * argument), a buffer per distinct node read. */
typedef struct group_count {
  const pass_plan *p;
  int *stamp; /* [p->n]: the walk that counted the entry */
  int walk;
  int32_t reads, edges, nodes;
  const graph_node *bufs[PASS_MAX_INPUTS + 1]; /* the distinct ones, until past the limit
                                                  (the count then only needs to exceed it) */
} group_count;

static void count_buffer(group_count *g, const graph_node *in) {
  for (int i = 0; i < g->reads; i++)
    if (g->bufs[i] == in) return;
  if (g->reads <= PASS_MAX_INPUTS) g->bufs[g->reads] = in;
  g->reads++;
}

static void count_group(group_count *g, const graph_node *n) {
  g->nodes++;
  for (int i = 0; i < n->n_inputs; i++) {
    const graph_node *in = n->inputs[i].node;
    if (pass_fused(g->p, in)) {
      int at = pass_pos(g->p, in);
      if (g->stamp[at] != g->walk) g->stamp[at] = g->walk, count_group(g, in);
      continue;
    }
    g->edges++;
    if (!pass_is_inlined(in)) count_buffer(g, in);
  }
}

/* Materializes `in` (when it is one of p's nodes). */
static void unfuse(pass_plan *p, const graph_node *in) {
  int at = pass_pos(p, in);
  if (at >= 0) p->e[at].fused = p->e[at].row_dep = false;
}

void pass_unfuse_inputs(pass_plan *p, const graph_node *n) {
  for (int i = 0; i < n->n_inputs; i++) {
    int at = pass_pos(p, n->inputs[i].node);
    if (at >= 0) p->e[at].fused = false;
  }
}

void pass_unstore(pass_plan *p, const graph_node *n) {
  int at = pass_pos(p, n);
  if (at < 0) return;
  for (int s = p->e[at].stores, next; s >= 0; s = next) {
    next = p->e[s].store_next;
    p->e[s].host = p->e[s].store_next = -1;
  }
  p->e[at].stores = -1;
}

/* Input j of n repeats an earlier input (same node, same view): one
 * read, since the kernel computes a fused value once per index. */
static bool read_before(const graph_node *n, int j) {
  const graph_input *b = &n->inputs[j];
  for (int k = 0; k < j; k++) {
    const graph_input *a = &n->inputs[k];
    if (a->node == b->node && a->view.ndim == b->view.ndim && a->view.offset == b->view.offset &&
        !memcmp(a->view.sizes, b->view.sizes, sizeof *a->view.sizes * (size_t)a->view.ndim) &&
        !memcmp(a->view.strides, b->view.strides, sizeof *a->view.strides * (size_t)a->view.ndim))
      return true;
  }
  return false;
}

static bool is_root(const graph_node *n, graph_node *const *roots, int n_roots) {
  for (int i = 0; i < n_roots; i++)
    if (roots[i] == n) return true;
  return false;
}

/* ------------------------------------------------- rule 7: multi-output */

#define HOST_WINDOW 64

static bool on_its_device(const graph_node *n) {
  for (int j = 0; j < n->n_inputs; j++)
    if (n->inputs[j].node->device != n->device) return false;
  return true;
}

/* An elementwise kernel root whose inputs are all on its device (not a
 * transfer between devices). */
static bool plain_kernel(pass_plan *p, int i) {
  const graph_node *n = p->order[i];
  return graph_op_is_pointwise(n->op) && on_its_device(n) && !n->buffer && !p->e[i].fused &&
         !depends_on_rows(p, n);
}

/* An in-place write kernel (ASSIGN root) whose inputs are all on its
 * device and whose value needs no fused row reduction. */
static bool write_kernel(pass_plan *p, int i) {
  const graph_node *n = p->order[i];
  return n->op == GRAPH_OP_ASSIGN && on_its_device(n) && !n->buffer && !p->e[i].fused && !depends_on_rows(p, n);
}

/* A kernel root another kernel may compute and store: an elementwise
 * one, or a whole-buffer write (its value is elementwise over its
 * region, its old version is not read). */
static bool storable(pass_plan *p, int i) {
  return plain_kernel(p, i) || (write_kernel(p, i) && pass_whole_write(p->order[i]));
}

/* order[j]'s kernel can store x: an elementwise kernel stores either
 * kind; a write kernel stores whole writes — not the write it
 * overwrites (x its old version: x's storage keeps one buffer only when
 * x is written there first). */
static bool can_host(pass_plan *p, int j, const graph_node *x) {
  if (plain_kernel(p, j)) return true;
  return x->op == GRAPH_OP_ASSIGN && write_kernel(p, j) && p->order[j]->inputs[0].node != x;
}

/* a and b loop over the same sizes: an ASSIGN over its region's, any
 * other kernel root over its own. */
static bool same_loop(const graph_node *a, const graph_node *b) {
  graph_view ra, rb;
  int na = a->ndim, nb = b->ndim;
  const int64_t *sa = a->sizes, *sb = b->sizes;
  if (a->op == GRAPH_OP_ASSIGN) ra = graph_attr_region(a), na = ra.ndim, sa = ra.sizes;
  if (b->op == GRAPH_OP_ASSIGN) rb = graph_attr_region(b), nb = rb.ndim, sb = rb.sizes;
  return na == nb && !memcmp(sa, sb, sizeof *sa * (size_t)na);
}

static bool reads(const graph_node *r, const graph_node *x) {
  for (int i = 0; i < r->n_inputs; i++)
    if (r->inputs[i].node == x) return true;
  return false;
}

/* The multi-output pass's state: the plan, kernel_span's first/last
 * positions, and what the candidate host's kernel reads (mark_reads).
 * A host's group reads at most PASS_MAX_EDGES nodes from outside the
 * plan (an edge each: fit_kernel_limits ran first and keeps every group
 * within it), so ext never fills: the cap is the kernel-size contract,
 * not a limit of its own. */
#define EXT_MAX PASS_MAX_EDGES
typedef struct outputs {
  pass_plan *p;
  int *first, *last; /* [n] each */
  int *read;         /* [n]: the walk whose group reads (or fuses) the plan node */
  int *seen;         /* [n]: the walk that visited a node of a stored node's group */
  int walk;
  int n_ext;
  const graph_node *ext[EXT_MAX]; /* nodes outside the plan the group reads */
} outputs;

static void mark_group(outputs *o, const graph_node *r) {
  for (int i = 0; i < r->n_inputs; i++) {
    const graph_node *in = r->inputs[i].node;
    int at = pass_pos(o->p, in);
    if (at < 0) {
      if (!pass_is_inlined(in) && o->n_ext < EXT_MAX) o->ext[o->n_ext++] = in; /* (always room: see EXT_MAX) */
      continue;
    }
    if (o->read[at] == o->walk) continue;
    o->read[at] = o->walk;
    if (pass_fused(o->p, in)) mark_group(o, in);
  }
}

/* Marks what r's kernel reads: r's inputs and, through the producers
 * fused into r, theirs, each fused node visited once (linear in the
 * group's size however deep it is: an optimizer's update reads its
 * state 7 or more levels down). */
static void mark_reads(outputs *o, const graph_node *r) {
  o->walk++;
  o->n_ext = 0;
  mark_group(o, r);
}

/* n is read in the group mark_reads marked last. */
static bool marked(const outputs *o, const graph_node *n) {
  int at = pass_pos(o->p, n);
  if (at >= 0) return o->read[at] == o->walk;
  for (int i = 0; i < o->n_ext; i++)
    if (o->ext[i] == n) return true;
  return false;
}

/* The marked group computes or reads a node of v's group (v and the
 * producers fused into it) or a buffer that group reads. */
static bool group_meets(outputs *o, const graph_node *v) {
  if (pass_is_inlined(v)) return false;
  if (marked(o, v)) return true;
  int at = pass_pos(o->p, v);
  if (!pass_fused(o->p, v) || o->seen[at] == o->walk) return false;
  o->seen[at] = o->walk;
  for (int i = 0; i < v->n_inputs; i++)
    if (group_meets(o, v->inputs[i].node)) return true;
  return false;
}

/* r's kernel reads x, or reads a buffer x reads. A whole write reads
 * only its value: r computes a node of that value's group too (it is
 * fused into both), or reads a buffer the group reads. */
static bool shares_loop(outputs *o, const graph_node *x, const graph_node *r) {
  mark_reads(o, r);
  if (marked(o, x)) return true;
  if (x->op == GRAPH_OP_ASSIGN) return group_meets(o, x->inputs[1].node);
  for (int i = 0; i < x->n_inputs; i++) {
    const graph_node *in = x->inputs[i].node;
    if (!pass_is_inlined(in) && !pass_fused(o->p, in) && marked(o, in)) return true;
  }
  return false;
}

static int n_stores(const pass_plan *p, int host) {
  int count = 0;
  for (int s = p->e[host].stores; s >= 0; s = p->e[s].store_next) count++;
  return count;
}

static void store_in(pass_plan *p, int x, int host) {
  p->e[x].host = host;
  p->e[x].store_next = p->e[host].stores;
  p->e[host].stores = x;
}

/* first[k] / last[k]: the earliest and latest schedule positions at
 * which order[k]'s value is computed — its own for a kernel root, else
 * the kernels its fused readers run in (readers come after producers in
 * post-order, so a reader's range is final before its inputs'). */
static void kernel_span(const pass_plan *p, int *first, int *last) {
  int n = p->n;
  for (int k = 0; k < n; k++) {
    first[k] = p->e[k].fused ? n : k;
    last[k] = p->e[k].fused ? -1 : k;
  }
  for (int k = n - 1; k >= 0; k--)
    for (int i = 0; i < p->order[k]->n_inputs; i++) {
      const graph_node *in = p->order[k]->inputs[i].node;
      int at = pass_pos(p, in);
      if (!pass_fused(p, in) || at >= k) continue;
      if (first[k] < first[at]) first[at] = first[k];
      if (last[k] > last[at]) last[at] = last[k];
    }
}

/* The host for x = order[i]: the last kernel that can store it before
 * x's value is first needed from a buffer. *later: some kernel after the
 * host reads x. */
static int find_host(outputs *o, int i, bool *later) {
  pass_plan *p = o->p;
  graph_node *x = p->order[i];
  int n = p->n, host = -1;
  int needed = n, latest = -1, seen = 0; /* the first and last positions whose kernels read x */
  for (int j = i + 1; j < n && j <= i + HOST_WINDOW; j++) {
    graph_node *r = p->order[j];
    bool same = r->device == x->device && same_loop(r, x);
    if (j <= needed && same && can_host(p, j, x) && p->e[j].host < 0 && n_stores(p, j) < PASS_MAX_OUTPUTS &&
        shares_loop(o, x, r))
      host = j;
    if (!reads(r, x)) continue;
    seen++;
    if (o->first[j] < needed) needed = o->first[j];
    if (o->last[j] > latest) latest = o->last[j];
  }
  if (host > needed) host = -1;
  /* a reader beyond the window comes after the host too */
  *later = host >= 0 && (latest > host || seen < p->e[i].n_consumers);
  return host;
}

/* x (position at) already stores other nodes and is to be stored by
 * host: they move along when the host has room for all, can store each
 * of them, and no kernel before the host other than x's reads one of
 * them from its buffer (what x's kernel computed, the host computes
 * inline). */
static bool stores_can_move(outputs *o, int at, int host) {
  pass_plan *p = o->p;
  if (n_stores(p, host) + 1 + n_stores(p, at) > PASS_MAX_OUTPUTS) return false;
  for (int s = p->e[at].stores; s >= 0; s = p->e[s].store_next) {
    if (!can_host(p, host, p->order[s])) return false;
    for (int j = s + 1; j < host; j++) {
      bool in_x = j == at || p->e[j].host == at || (o->first[j] == at && o->last[j] == at);
      if (reads(p->order[j], p->order[s]) && !in_x && o->first[j] < host) return false;
    }
  }
  return true;
}

static void plan_outputs(pass_plan *p, graph_node *const *roots, int n_roots) {
  int n = p->n;
  if (n <= 0) return;
  outputs *o = graph_malloc(sizeof *o);
  int *spans = graph_malloc(sizeof *spans * (size_t)n * 4);
  if (!o || !spans) { /* no multi-output kernels: nothing is lost */
    free(o);
    free(spans);
    return;
  }
  *o = (outputs){.p = p, .first = spans, .last = spans + n, .read = spans + 2 * n, .seen = spans + 3 * n};
  for (int k = 0; k < n; k++) o->read[k] = o->seen[k] = 0;
  kernel_span(p, o->first, o->last);
  for (int i = 0; i < n; i++) {
    if (!storable(p, i) || p->e[i].host >= 0) continue;
    bool later;
    int host = find_host(o, i, &later);
    /* an elementwise node needs a buffer only when requested or read
     * after the host; a write is a storage's version: always */
    bool kept = later || p->order[i]->op == GRAPH_OP_ASSIGN || is_root(p->order[i], roots, n_roots);
    if (host < 0 || !kept) continue;
    if (p->e[i].stores >= 0 && !stores_can_move(o, i, host)) continue;
    for (int s = p->e[i].stores, next; s >= 0; s = next) { /* a chain: x's stores go to the host too */
      next = p->e[s].store_next;
      store_in(p, s, host);
    }
    p->e[i].stores = -1;
    store_in(p, i, host);
  }
  free(spans);
  free(o);
}

/* ------------------------------------------------------------ the pass */

/* Rules 1-3: fused row reductions and elementwise nodes. */
static void decide_fusion(pass_plan *p, graph_node *const *roots, int n_roots) {
  for (int i = 0; i < p->n; i++) {
    graph_node *x = p->order[i];
    pass_entry *e = &p->e[i];
    if (is_root(x, roots, n_roots)) continue;
    if (row_reduction(x)) {
      e->fused = e->row_dep = true;
      continue;
    }
    if (!graph_op_is_elementwise(x->op)) continue;
    e->row_dep = depends_on_rows(p, x);
    e->fuse_cheap = cheap(p, i);
    e->fused = e->n_consumers <= 1 || e->fuse_cheap || e->row_dep;
  }
}

/* A fused node's row reductions over different rows (fit_rows). */
static const graph_node MIXED_ROWS;

/* Row reductions fit the kernel they are fused into (lower.c, lower_rows,
 * which otherwise fails and makes the runtime materialize them at run
 * time, for every force: such a schedule is never cached). A kernel walks
 * one set of rows: a reduction's fused input that needs others (a row
 * reduction itself, or elementwise nodes over one: sum(log_softmax(x) *
 * y) over all elements) is materialized; so are the row-carrying fused
 * inputs of a kernel root that needs rows of different reductions, whose
 * shape does not fit its rows (pass_rows_fit: a loss gradient flattened
 * to [B·C] over rows of [B, C]), or whose kind has no row loop (an
 * in-place write, a scan, a scatter-add). */
static bool row_kind(graph_kind k) {
  return k == GRAPH_SOURCE || k == GRAPH_UNARY || k == GRAPH_BINARY || k == GRAPH_TERNARY || k == GRAPH_CAST ||
         k == GRAPH_GATHER;
}

/* The rows x's fused inputs need: NULL for none, one of their row
 * reductions when they all reduce the same rows (pass_same_rows),
 * MIXED_ROWS when not (rows[at]: the same for each fused input). */
static const graph_node *inputs_rows(const pass_plan *p, const graph_node **rows, const graph_node *x) {
  const graph_node *r = NULL;
  for (int j = 0; j < x->n_inputs; j++) {
    int at = pass_pos(p, x->inputs[j].node);
    const graph_node *q = at >= 0 && p->e[at].fused ? rows[at] : NULL;
    if (!q || q == r) continue;
    r = !r && q != &MIXED_ROWS ? q : r && q != &MIXED_ROWS && pass_same_rows(q, r) ? r : &MIXED_ROWS;
  }
  return r;
}

/* The root x (kind k) cannot walk the rows r its fused inputs need. */
static bool root_misfits(const graph_node *x, graph_kind k, const graph_node *r) {
  int n_outer;
  bool full;
  return r == &MIXED_ROWS || !row_kind(k) || !pass_rows_fit(x, r, &n_outer, &full);
}

/* One pass over the plan, producers first; true when it materialized a
 * node (which may be a root now, after its position: fit_rows passes
 * again). A misfit root's fused input that holds row values only (no
 * more elements than its row reduction's result: an optimizer's step
 * over a bias gradient, a row sum read as [O]) has the reduction
 * materialized instead of itself, so the chain over it stays one
 * kernel rather than one kernel per node (each node in turn a root that
 * misfits the rows). */
static bool fit_rows_once(pass_plan *p, const graph_node **rows) {
  bool changed = false;
  for (int i = 0; i < p->n; i++) {
    const graph_node *x = p->order[i];
    graph_kind k = graph_ops[x->op].kind;
    if (k == GRAPH_REDUCE) {
      for (int j = 0; j < x->n_inputs; j++) {
        const graph_node *in = x->inputs[j].node;
        int at = pass_pos(p, in);
        if (at < 0 || !pass_fused(p, in)) continue;
        const graph_node *r = row_reduction(in) ? in : rows[at];
        if (r && (r == &MIXED_ROWS || !pass_same_rows(r, x))) unfuse(p, in), changed = true;
      }
    } else if (!p->e[i].fused && k != GRAPH_EXTERN) {
      const graph_node *r = inputs_rows(p, rows, x);
      if (r && root_misfits(x, k, r))
        for (int j = 0; j < x->n_inputs; j++) {
          const graph_node *in = x->inputs[j].node;
          int at = pass_pos(p, in);
          if (at < 0 || !p->e[at].fused || !rows[at]) continue;
          /* an input of no more elements than its row reduction's result
           * holds row values only (a bias gradient's optimizer step): the
           * reduction is materialized, not the chain over it */
          bool values = rows[at] != &MIXED_ROWS && in->numel <= rows[at]->numel;
          unfuse(p, values ? rows[at] : in), changed = true;
        }
    }
    rows[i] = !p->e[i].fused ? NULL : row_reduction(x) ? x : inputs_rows(p, rows, x);
  }
  return changed;
}

static void fit_rows(pass_plan *p) {
  const graph_node **rows = calloc((size_t)p->n + 1, sizeof *rows);
  if (!rows) return; /* (out of memory: lowering still falls back) */
  while (fit_rows_once(p, rows)) {
  }
  free(rows);
}

/* v reads src along src's own rows: dropping src's size-1 dims and v's
 * dims of size 1 or stride 0 (a broadcast), the two have the same sizes
 * in order and v steps each dim with src's contiguous stride, from
 * offset 0 — src's plain view, a broadcast of its size-1 dims (a row
 * value over its row), or its view without them (keepdim = false). A
 * reshape or a transpose is not: its index does not walk src's rows. */
static bool reads_along_rows(const graph_view *v, const graph_node *src) {
  int64_t cs[KILN_MAX_DIMS];
  graph_contiguous_strides(src->ndim, src->sizes, cs);
  if (v->offset != 0) return false;
  int d = 0;
  for (int s = 0; s < src->ndim; s++) {
    if (src->sizes[s] == 1) continue;
    while (d < v->ndim && (v->sizes[d] == 1 || v->strides[d] == 0)) d++;
    if (d == v->ndim || v->sizes[d] != src->sizes[s] || v->strides[d] != cs[s]) return false;
    d++;
  }
  while (d < v->ndim && (v->sizes[d] == 1 || v->strides[d] == 0)) d++;
  return d == v->ndim;
}

/* A fused node whose value needs fused row reductions (one, or nodes
 * over one) read through a view that does not walk its rows — a
 * flattening reshape of a loss gradient, a transpose — is materialized:
 * the reader's kernel computes row values only along its own row loops
 * (lower.c, row_read). */
static void materialize_row_reshapes(pass_plan *p) {
  for (int i = 0; i < p->n; i++) {
    const graph_node *x = p->order[i];
    for (int j = 0; j < x->n_inputs; j++) {
      pass_entry *e = fused_entry(p, x->inputs[j].node);
      if (e && e->row_dep && !reads_along_rows(&x->inputs[j].view, x->inputs[j].node)) unfuse(p, x->inputs[j].node);
    }
  }
}

/* After row reductions were materialized, the nodes that were fused
 * only because they depended on one are decided again (producers first,
 * so each input's flags are final): a stale row dependence would keep an
 * expensive node with several readers fused. */
static void refresh_row_deps(pass_plan *p) {
  for (int i = 0; i < p->n; i++) {
    pass_entry *e = &p->e[i];
    const graph_node *x = p->order[i];
    if (!e->row_dep || row_reduction(x)) continue;
    e->row_dep = depends_on_rows(p, x);
    e->fuse_cheap = cheap(p, i);
    e->fused = e->fused && (e->n_consumers <= 1 || e->fuse_cheap || e->row_dep);
  }
}

/* A CPU MATMUL's operand that the generated GEMM can pack from the
 * input of a pending reshape copy (implicit GEMM: a convolution's im2col
 * columns; runtime/gemm_pack.c): a CAST of the same dtype on the CPU whose
 * reader's view splits over its input view (graph_view_split), whose
 * input is a buffer (not an inlined source) and is materialized anyway
 * or no bigger than the copy. Not an elementwise input of the copy's
 * size that only the copy reads (a convolution's output gradient,
 * relu' times the pooling's, read as [O, N·ΠOut] by both of its GEMMs
 * and the bias gradient's row sum): materializing it would write the
 * same bytes as the copy, in the layout the GEMMs read through (NCHW
 * planes, one pack run per plane), so the copy is written instead, its
 * input fused into it: contiguous rows for the packs and the sum. */
static bool packs_through(const pass_plan *p, const graph_node *x, int j) {
  const graph_node *c = x->inputs[j].node, *src = c->inputs[0].node;
  if (x->op != GRAPH_OP_MATMUL || x->device != KILN_CPU || (x->dtype != KILN_F32 && x->dtype != KILN_F64)) return false;
  if (c->buffer || c->op != GRAPH_OP_CAST || c->device != KILN_CPU) return false;
  if (src->dtype != c->dtype || src->device != KILN_CPU || pass_is_inlined(src)) return false;
  if (pass_fused(p, src) && src->numel > c->numel) return false;
  if (pass_fused(p, src) && graph_op_is_pointwise(src->op) && src->numel == c->numel &&
      p->e[pass_pos(p, src)].n_consumers == 1)
    return false; /* computed for the copy alone: written once, in the GEMM's layout */
  graph_split_view s;
  return graph_view_split(&x->inputs[j].view, &c->inputs[0].view, &s);
}

/* Rule 5: extern ops read buffers; so does a gather's source; scans and
 * scatter-adds read no row values; a producer on another device than its reader is
 * materialized there, and so is the copy that reads it (kiln_to_device:
 * one transfer, runtime/realize.c). */
static void materialize_for_readers(pass_plan *p) {
  for (int i = 0; i < p->n; i++) {
    const graph_node *x = p->order[i];
    graph_kind k = graph_ops[x->op].kind;
    for (int j = 0; j < x->n_inputs; j++) {
      const graph_node *in = x->inputs[j].node;
      if (in->device == x->device) continue;
      unfuse(p, in);
      if (k == GRAPH_CAST) p->e[i].fused = p->e[i].row_dep = false;
    }
    if (k == GRAPH_GATHER) unfuse(p, x->inputs[0].node);
    if (k == GRAPH_EXTERN)
      for (int j = 0; j < x->n_inputs; j++) /* the GEMM reads the copy's input: that is the buffer */
        unfuse(p, packs_through(p, x, j) ? x->inputs[j].node->inputs[0].node : x->inputs[j].node);
    if (k == GRAPH_SCAN || k == GRAPH_SCATTER)
      for (int j = 0; j < x->n_inputs; j++) {
        int at = pass_pos(p, x->inputs[j].node);
        if (at >= 0 && p->e[at].row_dep) unfuse(p, x->inputs[j].node);
      }
  }
}

/* Rule 4: a broadcast read of an expensive fused producer. */
static void materialize_broadcast_reads(pass_plan *p) {
  for (int i = 0; i < p->n; i++) {
    const graph_node *x = p->order[i];
    for (int j = 0; j < x->n_inputs; j++) {
      pass_entry *e = fused_entry(p, x->inputs[j].node);
      if (e && broadcast_read(&x->inputs[j].view) && !e->fuse_cheap && !e->row_dep) e->fused = false;
    }
  }
}

/* Rule 6, producers first so each group's count is final when read (a
 * group's walk stops at its materialized inputs). */
static void fit_kernel_limits(pass_plan *p) {
  group_count g = {.p = p, .stamp = calloc((size_t)p->n + 1, sizeof(int))};
  for (int i = 0; i < p->n; i++) {
    const graph_node *x = p->order[i];
    g.walk++;
    g.reads = g.edges = g.nodes = 0;
    if (g.stamp) count_group(&g, x);
    if (!g.stamp || g.reads > PASS_MAX_INPUTS || g.edges > PASS_MAX_EDGES || g.nodes > PASS_MAX_GROUP)
      pass_unfuse_inputs(p, x); /* (out of memory: no group) */
  }
  free(g.stamp);
}

void pass_fuse(pass_plan *p, graph_node *const *roots, int n_roots, bool enabled) {
  for (int i = 0; i < p->n; i++)
    p->e[i] = (pass_entry){.replace = p->e[i].replace, .host = -1, .stores = -1, .store_next = -1};
  for (int i = 0; i < p->n; i++)
    for (int j = 0; j < p->order[i]->n_inputs; j++) {
      int at = pass_pos(p, p->order[i]->inputs[j].node);
      if (at >= 0 && !read_before(p->order[i], j)) p->e[at].n_consumers++;
    }
  if (!enabled) return;
  decide_fusion(p, roots, n_roots);
  materialize_row_reshapes(p);
  fit_rows(p);
  refresh_row_deps(p);
  materialize_for_readers(p);
  refresh_row_deps(p);
  materialize_broadcast_reads(p);
  fit_kernel_limits(p);
  plan_outputs(p, roots, n_roots);
  pass_attention(p, roots, n_roots);
}
