/*
 * plan.c — collecting a force's pending nodes into its plan (plan.h).
 *
 * An iterative post-order DFS from the roots over pending inputs (never
 * recursive: a million-node chain cannot overflow the C stack). A node is
 * marked visited by giving it the plan's id and its position; the marks
 * of an earlier plan never match a new id, so nothing is reset between
 * forces, and nodes outside the pending set are never touched.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "passes.h"
#include "plan.h"

static atomic_uint_fast64_t next_plan_id = 1;

/* Pending inputs this node needs realized before its kernel runs. */
static bool needs(const graph_node *in) { return in && !in->buffer && !pass_is_inlined(in); }

static bool grow(pass_plan *p) {
  int cap = p->cap ? p->cap * 2 : 64;
  graph_node **order = graph_realloc(p->order, sizeof *order * (size_t)cap);
  if (!order) return false;
  p->order = order;
  pass_entry *e = graph_realloc(p->e, sizeof *e * (size_t)cap);
  if (!e) return false;
  p->e = e;
  p->cap = cap;
  return true;
}

/* Appends x at the next position, undecided. */
static bool append(pass_plan *p, graph_node *x) {
  if (p->n == p->cap && !grow(p)) return false;
  int i = p->n++;
  p->order[i] = x;
  p->e[i] = (pass_entry){.host = -1, .stores = -1, .store_next = -1};
  x->plan_pos = i;
  return true;
}

/* Pushes x on the plan's DFS stack, of *depth entries. */
static bool push(pass_plan *p, int *depth, graph_node *x) {
  if (*depth == p->stack_cap) {
    int cap = p->stack_cap ? p->stack_cap * 2 : 64;
    graph_node **items = graph_realloc(p->stack, sizeof *items * (size_t)cap);
    if (!items) return false;
    p->stack = items;
    p->stack_cap = cap;
  }
  p->stack[(*depth)++] = x;
  return true;
}

/* ------------------------------------------ arrays kept between forces */

/* One finished plan's arrays per thread (empty: cap 0), freed when the
 * thread exits. */
static _Thread_local pass_plan spare;
static pthread_key_t spare_owner;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;

static void free_arrays(pass_plan *p) {
  free(p->order);
  free(p->e);
  free(p->stack);
  *p = (pass_plan){0};
}

static void free_spare(void *unused) { free_arrays(&spare); }
static void make_spare_owner(void) { pthread_key_create(&spare_owner, free_spare); }

void pass_plan_init(pass_plan *p) {
  *p = spare;
  spare = (pass_plan){0};
  p->n = 0;
  p->held = false;
}

/* A node is visited once it carries the plan's id; its position is set
 * when it is appended (after all its pending inputs). */
bool pass_plan_collect(pass_plan *p, graph_node *const *roots, int n_roots) {
  if (p->held) { /* collected again: the old nodes are not held any more */
    for (int i = 0; i < p->n; i++)
      if (p->e[i].held) graph_node_release(p->order[i]);
    p->held = false;
  }
  p->n = 0;
  p->id = atomic_fetch_add_explicit(&next_plan_id, 1, memory_order_relaxed);
  int depth = 0;
  bool ok = true;
  for (int r = 0; r < n_roots && ok; r++) {
    if (!roots[r] || roots[r]->buffer || roots[r]->plan_id == p->id) continue; /* a requested fill too */
    roots[r]->plan_id = p->id;
    roots[r]->plan_pos = -1;
    ok = push(p, &depth, roots[r]);
    while (ok && depth > 0) {
      graph_node *top = p->stack[depth - 1];
      graph_node *next = NULL;
      for (int i = 0; i < top->n_inputs && !next; i++) {
        graph_node *in = top->inputs[i].node;
        if (needs(in) && in->plan_id != p->id) next = in;
      }
      if (next) {
        next->plan_id = p->id;
        next->plan_pos = -1;
        ok = push(p, &depth, next);
      } else {
        depth--;
        ok = append(p, top);
      }
    }
  }
  return ok;
}

void pass_plan_remark(const pass_plan *p) {
  for (int i = 0; i < p->n; i++) {
    graph_node *x = p->order[i];
    if (!p->e[i].held || x->buffer) continue;
    x->plan_id = p->id;
    x->plan_pos = i;
  }
}

/* Consumers come after their pending inputs (post-order), so one pass
 * from the end marks everything reachable from the nodes at >= from,
 * reading only nodes that are alive: those, and inputs of live nodes. */
void pass_plan_hold(pass_plan *p, int from) {
  if (p->held) return;
  for (int i = p->n - 1; i >= 0; i--) {
    graph_node *x = p->order[i];
    if (i >= from) p->e[i].held = true;
    if (!p->e[i].held) continue;
    graph_node_retain(x);
    for (int k = 0; k < x->n_inputs; k++) {
      int at = pass_pos(p, x->inputs[k].node);
      if (at >= 0 && at < i) p->e[at].held = true;
    }
  }
  p->held = true;
}

void pass_plan_free(pass_plan *p) {
  if (p->held)
    for (int i = 0; i < p->n; i++)
      if (p->e[i].held) graph_node_release(p->order[i]);
  if (spare.cap || spare.stack_cap || !p->cap) {
    free_arrays(p);
    return;
  }
  pthread_once(&spare_once, make_spare_owner);
  spare = (pass_plan){.order = p->order, .e = p->e, .cap = p->cap, .stack = p->stack, .stack_cap = p->stack_cap};
  pthread_setspecific(spare_owner, &spare);
  *p = (pass_plan){0};
}
