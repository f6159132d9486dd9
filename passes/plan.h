/*
 * plan.h — the per-force plan: everything the scheduler decides for one
 * force (positions, consumer counts, simplifier redirects, fusion and
 * multi-output decisions) lives here, never in fields of graph_nodes.
 *
 * A plan holds the pending nodes one force needs, in post-order
 * (producers first). A node finds its entry through two fields, plan_id
 * and plan_pos, which collect (and the schedule key, for the pending
 * sources it numbers) writes on the pending nodes of its own force only;
 * a realized node, or a pending node of another force, is never written.
 * The id is unique in the process (an atomic counter), so a stale plan_id
 * of an earlier force can never match. Several threads forcing at once
 * therefore share no scheduler state: by kiln.h's thread rules their
 * pending sets are disjoint, and what they share (realized inputs) is
 * only read.
 */
#ifndef KILN_PLAN_H
#define KILN_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "graph.h"

/** The scheduler's state for the node at one plan position. */
typedef struct pass_entry {
  graph_node *replace;          /* simplifier: readers read this instead */
  bool replace_no_grad;         /* ... through a bypassed DETACH: the
                                   readers' new edges carry no gradient */
  int32_t n_consumers;          /* distinct reads by nodes of this plan */
  int32_t host;                 /* multi-output: position of the kernel that
                                   stores it, -1 for none */
  int32_t stores, store_next;   /* a host's stored nodes, as a list of
                                   positions (-1 ends it) */
  bool fused;                   /* computed inside its readers' kernels */
  bool row_dep;                 /* depends on a fused row reduction */
  bool fuse_cheap;              /* it and its fused inputs are cheap */
  bool held;                    /* pass_plan_hold took a reference */
} pass_entry;

typedef struct pass_plan {
  uint64_t id;        /* unique per collect */
  int n, cap;
  graph_node **order; /* [n] pending nodes, producers first */
  pass_entry *e;      /* [n] */
  bool held;          /* pass_plan_hold ran: the entries marked held hold a reference */
  graph_node **stack; /* collect's DFS stack [stack_cap] */
  int stack_cap;
} pass_plan;

/** An empty plan, reusing the arrays a finished plan of this thread left
 *  (pass_plan_free keeps one set per thread), so a repeated force
 *  allocates nothing. */
void pass_plan_init(pass_plan *p);
/** Collects the pending nodes roots [n_roots] need (not inlined sources)
 *  into p, in post-order, under a new id; entries start undecided
 *  (nothing fused, no host). p may hold an earlier collect (it is reset).
 *  False on OOM. */
bool pass_plan_collect(pass_plan *p, graph_node *const *roots, int n_roots);
/** Retains (once) the nodes of p that the force may still read: those at
 *  positions >= from (still to run: each is held by a consumer still to
 *  run or by a root) and every node of p they reach through pending
 *  inputs, so a nested force on this thread (a lowering fallback), which
 *  realizes some of them and drops their inputs, frees none that p still
 *  points at. A node before `from` that none of them reaches may have
 *  been freed already (its last reader ran): it is not touched. Released
 *  by pass_plan_free. */
void pass_plan_hold(pass_plan *p, int from);
/** Marks p's held nodes that are still pending as p's again (after a
 *  nested force on this thread collected some of them under its own
 *  plan). Only after pass_plan_hold. */
void pass_plan_remark(const pass_plan *p);
/** Drops the references pass_plan_hold took and frees p's arrays (or
 *  keeps them for the thread's next plan). p is empty afterwards. */
void pass_plan_free(pass_plan *p);

/** Position of n in p, or a negative number when n is not one of p's
 *  nodes (a pending source the schedule key numbered carries p's id and
 *  plan_pos <= -2). */
static inline int pass_pos(const pass_plan *p, const graph_node *n) {
  return n->plan_id == p->id ? n->plan_pos : -1;
}

/** n is pending and computed inside its readers' kernels (decided by
 *  pass_fuse for p). */
static inline bool pass_fused(const pass_plan *p, const graph_node *n) {
  int at = pass_pos(p, n);
  return !n->buffer && at >= 0 && p->e[at].fused;
}

/** The host position that stores n (multi-output), or -1. */
static inline int pass_host(const pass_plan *p, const graph_node *n) {
  int at = pass_pos(p, n);
  return !n->buffer && at >= 0 ? p->e[at].host : -1;
}

/** Runs a kernel of its own at its position: pending, not fused, not
 *  stored by another kernel. */
static inline bool pass_is_kernel_root(const pass_plan *p, int i) {
  return !p->order[i]->buffer && !p->e[i].fused && p->e[i].host < 0;
}

#endif /* KILN_PLAN_H */
