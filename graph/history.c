/*
 * history.c — the recipes of forced values no tensor shows any more
 * (docs/autodiff.md, "What a forced value keeps").
 *
 * A realized node keeps its recipe (graph_node_settle) so that forcing a
 * value changes no gradient. When no tensor shows the value any more —
 * its storage was freed, or a later write superseded that version — it
 * is an orphan: only the recipes and pending work that read it hold it,
 * and a gradient may still flow through it. Orphans that keep a recipe
 * wait here, oldest first, each weighing its buffer and its share of the
 * pending nodes its force left in recipes; while they weigh more than the
 * budget (KILN_HISTORY_BYTES, default 64 MiB), the oldest lets its recipe
 * go (graph_node_drop_history: kiln_grad through it is then an error that
 * says so). So a loop that forces and releases its state for ever keeps a
 * bounded history, and gradients through recent forced values are exact.
 *
 * One lock guards the queue. A node leaves it when freed, when its recipe
 * is dropped, or when evicted; eviction drops the recipe outside the lock
 * (releasing inputs may free queued nodes, which take the lock).
 */
#include <pthread.h>

#include "graph.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static graph_node *head, *tail; /* oldest first */
static int64_t weight;          /* of the queued nodes */
static atomic_int_fast64_t budget_env = GRAPH_ENV_UNREAD;
static _Atomic int64_t budget_set = -1; /* graph_history_set_budget; -1: the environment's */

static int64_t read_budget(void) { return graph_env_int("KILN_HISTORY_BYTES", 0, INT64_C(64) << 20, "bytes"); }

int64_t graph_history_budget(void) {
  int64_t b = atomic_load(&budget_set);
  return b >= 0 ? b : graph_env_once(&budget_env, read_budget);
}


int64_t graph_history_weight(void) {
  pthread_mutex_lock(&lock);
  int64_t w = weight;
  pthread_mutex_unlock(&lock);
  return w;
}

static void unlink_locked(graph_node *n) {
  if (n->hist_prev) n->hist_prev->hist_next = n->hist_next;
  else head = n->hist_next;
  if (n->hist_next) n->hist_next->hist_prev = n->hist_prev;
  else tail = n->hist_prev;
  n->hist_prev = n->hist_next = NULL;
  n->hist_queued = false;
  weight -= n->hist_weight;
}

void graph_history_forget(graph_node *n) {
  if (!n->hist_queued) return;
  pthread_mutex_lock(&lock);
  if (n->hist_queued) unlink_locked(n);
  pthread_mutex_unlock(&lock);
}

/* A reference to n unless it is being freed (count already 0). */
static bool try_retain(graph_node *n) {
  int c = atomic_load(&n->refcount);
  while (c > 0)
    if (atomic_compare_exchange_weak(&n->refcount, &c, c + 1)) return true;
  return false;
}

/* The oldest queued node, unlinked and retained, while the queue weighs
 * more than the budget; NULL when it does not. */
static graph_node *pop_over_budget(int64_t budget) {
  graph_node *n = NULL;
  pthread_mutex_lock(&lock);
  while (!n && head && weight > budget) {
    graph_node *h = head;
    unlink_locked(h);
    if (try_retain(h)) n = h;
  }
  pthread_mutex_unlock(&lock);
  return n;
}

/* Lets the oldest recipes go while the queue weighs more than the budget. */
static void evict(void) {
  int64_t budget = graph_history_budget();
  for (graph_node *old; (old = pop_over_budget(budget));) {
    graph_node_drop_history(old);
    graph_node_release(old);
  }
}

void graph_history_set_budget(int64_t bytes) {
  atomic_store(&budget_set, bytes < 0 ? -1 : bytes);
  evict();
}

static void enqueue(graph_node *n) {
  if (n->hist_queued || !n->n_hist || !(n->buffer || n->overwritten)) return;
  n->hist_weight = (int64_t)sizeof *n * (1 + n->hist_share) + (n->buffer ? n->buffer->bytes : 0);
  pthread_mutex_lock(&lock);
  n->hist_prev = tail, n->hist_next = NULL;
  if (tail) tail->hist_next = n;
  else head = n;
  tail = n;
  n->hist_queued = true;
  weight += n->hist_weight;
  pthread_mutex_unlock(&lock);
  evict();
}

void graph_node_orphan(graph_node *n) {
  /* (a count of 1 is the caller's, about to be released: n is freed) */
  if (!n || n->orphan || atomic_load(&n->refcount) == 1) return;
  n->orphan = true;
  enqueue(n);
}

void graph_history_settled(graph_node *n) {
  if (n->orphan) enqueue(n);
}
