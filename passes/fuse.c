/*
 * fuse.c — fusion decisions: which pending nodes of a schedule are
 * computed inside their readers' kernels (node->fused) and which get a
 * kernel and a buffer of their own (materialized).
 *
 * The cost function, in order:
 *  1. Requested nodes, in-place writes (ASSIGN) and sources are
 *     materialized: they are kernel roots. A reduction over a suffix of
 *     its input's dims (rows) is fused: its readers' kernel computes it
 *     once per row before using it (row fusion: softmax, layer norm,
 *     variance become one kernel per block of rows). Other reductions are
 *     materialized.
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
 *     the library reads buffers. So is a gather's source (it is read at
 *     data-dependent positions, maybe several times); a gather itself is
 *     elementwise over its result: its index fuses into it, and it fuses
 *     into its readers. Its elementwise readers fuse as usual, so
 *     bias, activation and scale become one epilogue kernel. A scan
 *     (cumsum, cumprod) is a root; elementwise producers fuse into it,
 *     but one that depends on a fused row reduction is materialized (a
 *     scan kernel has no row loop).
 *  6. A kernel may read at most PASS_MAX_INPUTS buffers, have at most
 *     PASS_MAX_EDGES external reads (each takes an argument: an offset or
 *     a fill value) and PASS_MAX_GROUP nodes: when a group would exceed
 *     one of them, its fused inputs are materialized. (Lowering still
 *     checks its own limits and falls back the same way at run time.)
 *  7. Multi-output kernels: a materialized elementwise node p (requested,
 *     or read by several readers, one of them after r) whose value a later
 *     elementwise kernel r of the same sizes can compute — r reads p through its plain
 *     contiguous view, or reads a buffer p reads too — is computed and
 *     stored by r's kernel (p->store_host = r) instead of a kernel of its
 *     own, so the loop over their shared inputs runs once: two forced
 *     results of one loop (`a+b`, `a*b`) read a and b once, and `y =
 *     exp(x)` forced with `z = y*2` writes y and z from one kernel. Only
 *     when nothing between p and r in the schedule reads p (r's kernel
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
 */
#include <stdlib.h>
#include <string.h>

#include "lower.h"

/* Fuses into its readers as one value per index (a gather too: its index
 * fuses into it, its source is a buffer, rule 5). */
static bool is_elementwise(const graph_node *n) { return graph_op_is_elementwise(n->op); }

/* Rule 3's "plain arithmetic, comparisons or selects": ops.def's CHEAP. */
static bool cheap_op(graph_op op) { return graph_op_is_cheap(op); }

/* Cheap including everything already fused into it (inputs are decided
 * first, in post-order, so their flags are final). */
static bool cheap(const graph_node *n) {
  if (!cheap_op(n->op)) return false;
  for (int i = 0; i < n->n_inputs; i++) {
    const graph_node *in = n->inputs[i].node;
    if (!in->buffer && in->fused && !in->fuse_cheap) return false;
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

static bool depends_on_rows(const graph_node *n) {
  for (int i = 0; i < n->n_inputs; i++) {
    const graph_node *in = n->inputs[i].node;
    if (!in->buffer && in->fused && in->row_dep) return true;
  }
  return false;
}

static bool broadcast_read(const graph_view *v) {
  for (int d = 0; d < v->ndim; d++)
    if (v->strides[d] == 0 && v->sizes[d] > 1) return true;
  return false;
}

/* External buffer reads of n's group, from its fused inputs' counts (an
 * upper bound: a leaf shared by two paths counts twice). */
static int external_reads(const graph_node *n) {
  int count = 0;
  for (int i = 0; i < n->n_inputs; i++) {
    const graph_node *in = n->inputs[i].node;
    if (pass_is_inlined(in)) continue; /* fill values and aranges: no buffer */
    count += (!in->buffer && in->fused) ? in->fuse_reads : 1;
  }
  return count;
}

/* External edges (reads of buffers, fills and aranges: each takes a
 * kernel argument) and nodes of n's group, upper bounds as above. */
static void group_size(const graph_node *n, int *edges, int *nodes) {
  *edges = 0;
  *nodes = 1;
  for (int i = 0; i < n->n_inputs; i++) {
    const graph_node *in = n->inputs[i].node;
    bool fused = !in->buffer && in->fused;
    *edges += fused ? in->fuse_edges : 1;
    *nodes += fused ? in->fuse_nodes : 0;
  }
}

void pass_unfuse_inputs(graph_node *n) {
  for (int i = 0; i < n->n_inputs; i++) n->inputs[i].node->fused = false;
}

void pass_unstore(graph_node *n) {
  for (graph_node *s = n->stores, *next; s; s = next) {
    next = s->store_next;
    s->store_host = s->store_next = NULL;
  }
  n->stores = NULL;
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

/* An elementwise kernel root whose inputs are all on its device (not a
 * transfer between devices). */
static bool plain_kernel(const graph_node *n) {
  bool pointwise = graph_op_is_pointwise(n->op);
  for (int i = 0; pointwise && i < n->n_inputs; i++) pointwise = n->inputs[i].node->device == n->device;
  return pointwise && !n->buffer && !n->fused && !depends_on_rows(n);
}

static bool reads(const graph_node *r, const graph_node *x) {
  for (int i = 0; i < r->n_inputs; i++)
    if (r->inputs[i].node == x) return true;
  return false;
}

/* r, or a producer fused into r (up to GROUP_DEPTH levels down), reads x. */
#define GROUP_DEPTH 6
static bool group_reads(const graph_node *r, const graph_node *x, int depth) {
  for (int i = 0; i < r->n_inputs; i++) {
    const graph_node *in = r->inputs[i].node;
    if (in == x) return true;
    if (!in->buffer && in->fused && depth < GROUP_DEPTH && group_reads(in, x, depth + 1)) return true;
  }
  return false;
}

/* r's kernel reads p, or reads a buffer p reads. */
static bool shares_loop(const graph_node *p, const graph_node *r) {
  if (group_reads(r, p, 0)) return true;
  for (int i = 0; i < p->n_inputs; i++) {
    const graph_node *in = p->inputs[i].node;
    if (!pass_is_inlined(in) && !(!in->buffer && in->fused) && group_reads(r, in, 0)) return true;
  }
  return false;
}

static int n_stores(const graph_node *host) {
  int count = 0;
  for (const graph_node *s = host->stores; s; s = s->store_next) count++;
  return count;
}

static void store_in(graph_node *p, graph_node *host) {
  p->store_host = host;
  p->store_next = host->stores;
  host->stores = p;
}

/* first[k] / last[k]: the earliest and latest schedule positions at
 * which order[k]'s value is computed — its own for a kernel root, else
 * the kernels its fused readers run in (readers come after producers in
 * post-order, so a reader's range is final before its inputs'). */
static void kernel_span(graph_node *const *order, int n, int *first, int *last) {
  for (int k = 0; k < n; k++) {
    first[k] = order[k]->fused ? n : k;
    last[k] = order[k]->fused ? -1 : k;
  }
  for (int k = n - 1; k >= 0; k--)
    for (int i = 0; i < order[k]->n_inputs; i++) {
      const graph_node *in = order[k]->inputs[i].node;
      int at = in->sched_pos;
      if (in->buffer || !in->fused || at < 0 || at >= k || order[at] != in) continue;
      if (first[k] < first[at]) first[at] = first[k];
      if (last[k] > last[at]) last[at] = last[k];
    }
}

/* The host for p = order[i]: the last kernel that can store it before
 * p's value is first needed from a buffer. *later: some kernel after the
 * host reads p. */
static graph_node *find_host(graph_node *const *order, int n, int i, const int *first, const int *last, bool *later) {
  graph_node *p = order[i], *host = NULL;
  int needed = n, latest = -1, seen = 0; /* the first and last positions whose kernels read p */
  for (int j = i + 1; j < n && j <= i + HOST_WINDOW; j++) {
    graph_node *r = order[j];
    bool same = r->device == p->device && r->ndim == p->ndim &&
                !memcmp(r->sizes, p->sizes, sizeof *p->sizes * (size_t)p->ndim);
    if (j <= needed && same && plain_kernel(r) && !r->store_host && n_stores(r) < PASS_MAX_OUTPUTS &&
        shares_loop(p, r))
      host = r;
    if (!reads(r, p)) continue;
    seen++;
    if (first[j] < needed) needed = first[j];
    if (last[j] > latest) latest = last[j];
  }
  if (host && host->sched_pos > needed) host = NULL;
  /* a reader beyond the window comes after the host too */
  *later = host && (latest > host->sched_pos || seen < p->n_consumers);
  return host;
}

/* p already stores other nodes (p->stores) and is to be stored by host:
 * they move along when the host has room for all and no kernel before the
 * host other than p's reads one of them from its buffer (what p's kernel
 * computed, the host computes inline). */
static bool stores_can_move(graph_node *const *order, const int *first, const int *last, const graph_node *p,
                            const graph_node *host) {
  if (n_stores(host) + 1 + n_stores(p) > PASS_MAX_OUTPUTS) return false;
  int at = p->sched_pos;
  for (const graph_node *s = p->stores; s; s = s->store_next)
    for (int j = s->sched_pos + 1; j < host->sched_pos; j++) {
      bool in_p = order[j] == p || order[j]->store_host == p || (first[j] == at && last[j] == at);
      if (reads(order[j], s) && !in_p && first[j] < host->sched_pos) return false;
    }
  return true;
}

static void plan_outputs(graph_node *const *order, int n, graph_node *const *roots, int n_roots) {
  if (n <= 0) return;
  int *first = malloc(sizeof *first * (size_t)n * 2);
  if (!first) return; /* no multi-output kernels: nothing is lost */
  int *last = first + n;
  kernel_span(order, n, first, last);
  for (int i = 0; i < n; i++) {
    graph_node *p = order[i];
    if (!plain_kernel(p) || p->store_host) continue;
    bool later;
    graph_node *host = find_host(order, n, i, first, last, &later);
    if (!host || !(later || is_root(p, roots, n_roots))) continue;
    if (p->stores && !stores_can_move(order, first, last, p, host)) continue;
    for (graph_node *s = p->stores, *next; s; s = next) { /* a chain: p's stores go to the host too */
      next = s->store_next;
      store_in(s, host);
    }
    p->stores = NULL;
    store_in(p, host);
  }
  free(first);
}

void pass_fuse(graph_node *const *order, int n, graph_node *const *roots, int n_roots, bool enabled) {
  for (int i = 0; i < n; i++) {
    order[i]->store_host = order[i]->stores = order[i]->store_next = NULL;
    order[i]->fused = false;
    order[i]->row_dep = false;
    order[i]->fuse_cheap = false;
    order[i]->n_consumers = 0;
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < order[i]->n_inputs; j++)
      if (!read_before(order[i], j)) order[i]->inputs[j].node->n_consumers++;
  if (!enabled) return;
  for (int i = 0; i < n; i++) {
    graph_node *x = order[i];
    if (is_root(x, roots, n_roots)) continue;
    if (row_reduction(x)) {
      x->fused = x->row_dep = true;
      continue;
    }
    if (!is_elementwise(x)) continue;
    x->row_dep = depends_on_rows(x);
    x->fuse_cheap = cheap(x);
    x->fused = x->n_consumers <= 1 || x->fuse_cheap || x->row_dep;
  }
  /* a row reduction read by a reduction over other rows is materialized */
  for (int i = 0; i < n; i++) {
    if (graph_ops[order[i]->op].kind != GRAPH_REDUCE) continue;
    for (int j = 0; j < order[i]->n_inputs; j++) {
      graph_node *in = order[i]->inputs[j].node;
      if (in->fused && row_reduction(in) && !pass_same_rows(in, order[i])) in->fused = in->row_dep = false;
    }
  }
  /* rule 5: extern ops read buffers; so does a gather's source; scans read no row values;
   * a producer on another device than its reader is materialized there, and so is the
   * copy that reads it (kiln_to_device: one transfer, runtime/realize.c) */
  for (int i = 0; i < n; i++) {
    graph_kind k = graph_ops[order[i]->op].kind;
    for (int j = 0; j < order[i]->n_inputs; j++) {
      graph_node *in = order[i]->inputs[j].node;
      if (in->device == order[i]->device) continue;
      in->fused = in->row_dep = false;
      if (k == GRAPH_CAST) order[i]->fused = order[i]->row_dep = false;
    }
    if (k == GRAPH_GATHER) order[i]->inputs[0].node->fused = false;
    if (k == GRAPH_EXTERN)
      for (int j = 0; j < order[i]->n_inputs; j++) order[i]->inputs[j].node->fused = false;
    if (k == GRAPH_SCAN)
      for (int j = 0; j < order[i]->n_inputs; j++) {
        graph_node *in = order[i]->inputs[j].node;
        if (in->row_dep) in->fused = in->row_dep = false;
      }
  }
  /* rule 4: a broadcast read of an expensive fused producer */
  for (int i = 0; i < n; i++)
    for (int j = 0; j < order[i]->n_inputs; j++) {
      graph_node *in = order[i]->inputs[j].node;
      bool keep = in->fuse_cheap || in->row_dep;
      if (in->fused && !in->buffer && broadcast_read(&order[i]->inputs[j].view) && !keep) in->fused = false;
    }
  /* rule 6, producers first so each group's count is final when read */
  for (int i = 0; i < n; i++) {
    graph_node *x = order[i];
    x->fuse_reads = external_reads(x);
    group_size(x, &x->fuse_edges, &x->fuse_nodes);
    if (x->fuse_reads > PASS_MAX_INPUTS || x->fuse_edges > PASS_MAX_EDGES || x->fuse_nodes > PASS_MAX_GROUP) {
      pass_unfuse_inputs(x);
      x->fuse_reads = x->fuse_edges = x->n_inputs;
      x->fuse_nodes = 1;
    }
  }
  plan_outputs(order, n, roots, n_roots);
}
