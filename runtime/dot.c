/*
 * dot.c — the graph of pending work in Graphviz DOT, before or after the
 * passes (kiln_graph_write_dot).
 *
 * Before: every pending node the requested tensors need, its inputs, and
 * the realized buffers and inlined sources (FULL, ARANGE) it reads. An
 * edge is labelled with the view it reads when that view is not simply
 * the producer's contiguous layout (a transpose, broadcast, narrow, ...).
 *
 * After: what rt_realize would run. Each kernel is a cluster named like
 * its profiler record; inside it, its root and every producer fused into
 * it. A producer fused into two kernels is recomputed by both, so it is
 * drawn once in each cluster. Library calls (matmul) are clusters of one.
 * Node ids: "n<pos>" for a node at schedule position pos, "k<root>_n<pos>"
 * for a fused copy inside kernel <root>, "p<address>" for nodes outside
 * the schedule.
 */
#include <stdio.h>
#include <stdlib.h>

#include "passes.h"
#include "rt_internal.h"

/* A node is in the schedule when it is pending and not an inlined source. */
static bool scheduled(const pass_plan *p, const graph_node *n) { return !n->buffer && pass_pos(p, n) >= 0; }

static void node_id(const pass_plan *p, char *buf, size_t len, const graph_node *n, int kernel) {
  if (!scheduled(p, n) && kernel >= 0) snprintf(buf, len, "k%d_p%p", kernel, (const void *)n);
  else if (!scheduled(p, n)) snprintf(buf, len, "p%p", (const void *)n);
  else if (kernel >= 0) snprintf(buf, len, "k%d_n%d", kernel, pass_pos(p, n));
  else snprintf(buf, len, "n%d", pass_pos(p, n));
}

static void shape(FILE *f, int ndim, const int64_t *sizes) {
  char buf[400];
  fputs(rt_fmt_sizes(buf, sizeof buf, ndim, sizes), f);
}

/* The node's box: op, dtype, shape (and the value of a fill). */
static void declare(FILE *f, const graph_node *n, const char *id) {
  fprintf(f, "  \"%s\" [label=\"", id);
  if (n->buffer) fprintf(f, "buffer");
  else fprintf(f, "%s", graph_ops[n->op].name);
  if (!n->buffer && n->op == GRAPH_OP_FULL) fprintf(f, " %g", graph_attr_scalar(n));
  fprintf(f, "\\n%s ", graph_dtypes[n->dtype].name);
  shape(f, n->ndim, n->sizes);
  fprintf(f, "\"%s];\n", n->buffer ? ", style=filled, fillcolor=\"#dddddd\"" : "");
}

/* Edge src -> dst, labelled with the view unless it is the plain one. */
static void edge(FILE *f, const char *src, const char *dst, const graph_node *in, const graph_view *v) {
  fprintf(f, "  \"%s\" -> \"%s\"", src, dst);
  bool plain = v->offset == 0 && graph_view_is_contiguous(v) && graph_view_numel(v) == in->numel;
  if (!plain) {
    fprintf(f, " [label=\"");
    shape(f, v->ndim, v->sizes);
    fprintf(f, " strides ");
    shape(f, v->ndim, v->strides);
    fprintf(f, " +%lld\", fontsize=8]", (long long)v->offset);
  }
  fprintf(f, ";\n");
}

/* -------------------------------------------------- before the passes */

static void write_before(FILE *f, const pass_plan *p) {
  char id[64], src[64];
  for (int i = 0; i < p->n; i++) {
    graph_node *x = p->order[i];
    node_id(p, id, sizeof id, x, -1);
    declare(f, x, id);
    for (int j = 0; j < x->n_inputs; j++) {
      const graph_node *in = x->inputs[j].node;
      node_id(p, src, sizeof src, in, -1);
      if (!scheduled(p, in)) declare(f, in, src); /* repeats are harmless in DOT */
      edge(f, src, id, in, &x->inputs[j].view);
    }
  }
}

/* --------------------------------------------------- after the passes */

static bool inside(const pass_plan *p, const graph_node *in) {
  return !in->buffer && (pass_fused(p, in) || pass_is_inlined(in));
}

/* A kernel of the fused graph: its root (at schedule position k) and the
 * producers fused into it, each listed once. */
typedef struct dot_kernel {
  const pass_plan *p;
  int k;
  const graph_node *members[256];
  int n_members;
} dot_kernel;

static void gather(dot_kernel *g, const graph_node *x) {
  if (graph_ops[x->op].kind == GRAPH_EXTERN) return; /* a library call reads buffers */
  for (int j = 0; j < x->n_inputs; j++) {
    const graph_node *in = x->inputs[j].node;
    if (!inside(g->p, in)) continue;
    bool seen = false;
    for (int d = 0; d < g->n_members && !seen; d++) seen = g->members[d] == in;
    if (seen || g->n_members == 256) continue;
    g->members[g->n_members++] = in;
    gather(g, in);
  }
}

/* The input edges of x (a member of g, or its root when is_root); inputs
 * outside every kernel (buffers) are declared here, at the top level, so
 * DOT does not pull them into the cluster. */
static void write_edges(FILE *f, const dot_kernel *g, const graph_node *x, bool is_root) {
  char id[64], src[64];
  node_id(g->p, id, sizeof id, x, is_root ? -1 : g->k);
  for (int j = 0; j < x->n_inputs; j++) {
    const graph_node *in = x->inputs[j].node;
    bool member = graph_ops[x->op].kind != GRAPH_EXTERN && inside(g->p, in);
    node_id(g->p, src, sizeof src, in, member ? g->k : -1);
    if (!member && !scheduled(g->p, in)) declare(f, in, src);
    edge(f, src, id, in, &x->inputs[j].view);
  }
}

/* The cluster label: the kernel's name as lowering gives it. */
static void kernel_label(FILE *f, const pass_plan *p, const graph_node *x) {
  if (graph_ops[x->op].kind == GRAPH_EXTERN) {
    fprintf(f, "library call (%s)", graph_ops[x->op].name);
    return;
  }
  kir_kernel k;
  pass_binding b;
  char err[256];
  if (pass_lower_node(p, x, false, &k, &b, err, sizeof err) == KILN_OK) {
    fprintf(f, "%s", k.name);
    kir_free(&k);
  } else {
    fprintf(f, "%s (split at run time: too many inputs for one kernel)", graph_ops[x->op].name);
  }
}

/* The members of the kernel rooted at x (position i): its producers and,
 * for a multi-output kernel, the results it also stores and theirs. */
static void gather_kernel(dot_kernel *g, const pass_plan *p, int i) {
  *g = (dot_kernel){.p = p, .k = i};
  gather(g, p->order[i]);
  for (int s = p->e[i].stores; s >= 0; s = p->e[s].store_next) gather(g, p->order[s]);
}

/* Clusters first (only their nodes inside them), then every edge at the
 * top level: a node an edge names inside a cluster would join it. A
 * result a multi-output kernel stores is drawn inside that kernel under
 * its own id (no other kernel computes it). */
static void write_after(FILE *f, const pass_plan *p) {
  char id[64];
  dot_kernel g;
  for (int i = 0; i < p->n; i++) {
    graph_node *x = p->order[i];
    if (!pass_is_kernel_root(p, i)) continue;
    fprintf(f, "  subgraph cluster_%d {\n  label=\"", i);
    kernel_label(f, p, x);
    fprintf(f, "\";\n  style=rounded; color=\"#4070c0\";\n");
    gather_kernel(&g, p, i);
    node_id(p, id, sizeof id, x, -1);
    declare(f, x, id);
    for (int s = p->e[i].stores; s >= 0; s = p->e[s].store_next) {
      node_id(p, id, sizeof id, p->order[s], -1);
      declare(f, p->order[s], id);
    }
    for (int m = 0; m < g.n_members; m++) {
      node_id(p, id, sizeof id, g.members[m], i);
      declare(f, g.members[m], id);
    }
    fprintf(f, "  }\n");
  }
  for (int i = 0; i < p->n; i++) {
    if (!pass_is_kernel_root(p, i)) continue;
    gather_kernel(&g, p, i);
    write_edges(f, &g, p->order[i], true);
    for (int s = p->e[i].stores; s >= 0; s = p->e[s].store_next) write_edges(f, &g, p->order[s], true);
    for (int m = 0; m < g.n_members; m++) write_edges(f, &g, g.members[m], false);
  }
}

int rt_write_dot(graph_node *const *roots, int n, bool after_passes, FILE *f, char *err, size_t errlen) {
  pass_plan p;
  int st = rt_plan(roots, n, after_passes, &p);
  if (st != KILN_OK) {
    snprintf(err, errlen, "out of memory planning %d tensors", n);
    return st;
  }
  fprintf(f, "digraph kiln {\n  label=\"kiln: %d pending nodes, %s\";\n  labelloc=t;\n", p.n,
          after_passes ? "after the passes (clusters are kernels)" : "before the passes");
  fprintf(f, "  node [shape=box, fontname=\"monospace\", fontsize=10];\n");
  if (after_passes) write_after(f, &p);
  else write_before(f, &p);
  fprintf(f, "}\n");
  pass_plan_free(&p);
  return KILN_OK;
}
