/*
 * attention_plan.c — the fusion pass's attention decision (pass_attention,
 * docs/internals.md "Attention"): an attention written out of ordinary
 * ops (graph_attention_match) runs as the fused attention kernel when
 * nothing else in the force reads its intermediates. Its chain — the
 * scores' product, scale, mask, softmax — is then marked computed inside
 * its reader (fused) and never runs: the last matmul's extern run
 * (runtime/attention_kernels.c, rt_attention_matmul) computes o from q,
 * k, v and the mask with an online softmax, and no [L, S] buffer exists.
 * The chain stays in the graph as o's recipe (kiln_grad reads it; a
 * tensor the user holds on an intermediate still computes when forced).
 */
#include "passes.h"

static bool is_root(const graph_node *n, graph_node *const *roots, int n_roots) {
  for (int i = 0; i < n_roots; i++)
    if (roots[i] == n) return true;
  return false;
}

/* Reads of chain node c by the chain and o (one per distinct edge, as
 * pass_fuse counts consumers). */
static int chain_reads(const graph_attention *m, const graph_node *c) {
  int reads = 0;
  for (int i = -1; i < m->n_chain; i++) {
    const graph_node *r = i < 0 ? m->o : m->chain[i];
    for (int j = 0; j < r->n_inputs; j++) reads += r->inputs[j].node == c;
  }
  return reads;
}

/* Every chain node is pending in p, on the host, no root, read by the
 * chain and o alone, and in no multi-output kernel. */
static bool private_chain(const pass_plan *p, const graph_attention *m, graph_node *const *roots, int n_roots) {
  for (int i = 0; i < m->n_chain; i++) {
    const graph_node *c = m->chain[i];
    int at = pass_pos(p, c);
    if (c->buffer || at < 0 || c->device != KILN_CPU || is_root(c, roots, n_roots)) return false;
    if (p->e[at].n_consumers != chain_reads(m, c) || p->e[at].host >= 0 || p->e[at].stores >= 0) return false;
  }
  return true;
}

void pass_attention(pass_plan *p, graph_node *const *roots, int n_roots) {
  for (int i = 0; i < p->n; i++) {
    graph_node *o = p->order[i];
    graph_attention m;
    if (o->op != GRAPH_OP_MATMUL || o->buffer || o->device != KILN_CPU || !graph_attention_match(o, &m) ||
        !private_chain(p, &m, roots, n_roots))
      continue;
    for (int c = 0; c < m.n_chain; c++) p->e[pass_pos(p, m.chain[c])].fused = true;
  }
}

bool pass_attention_planned(const pass_plan *p, graph_node *o, graph_attention *m) {
  if (o->op != GRAPH_OP_MATMUL || o->buffer || o->device != KILN_CPU || !graph_attention_match(o, m)) return false;
  for (int c = 0; c < m->n_chain; c++)
    if (!pass_fused(p, m->chain[c])) return false;
  return true;
}
