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
 *
 * Readers of recipes across threads: kiln_grad walks the recipes of
 * realized values, which other threads may share (kiln.h's thread rules),
 * while any thread's enqueue evicts. So a walk holds the history
 * (graph_history_hold) and eviction runs only while no walk does: an
 * enqueue during one marks the eviction pending, the last walk out runs
 * it, and new walks wait for it meanwhile. A recipe is thus never dropped
 * under a walk, by construction, and the queue stays bounded however the
 * walks overlap.
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
  weight -= n->hist_weight;
  n->hist_queued = false; /* last: a thread freeing n reads it unlocked */
}

void graph_history_forget(graph_node *n) {
  if (!n->hist_queued) return;
  pthread_mutex_lock(&lock);
  if (n->hist_queued) unlink_locked(n);
  pthread_mutex_unlock(&lock);
}

/* A reference to n unless it is being freed (count already 0). The
 * queue holds no reference: this is the one place that takes one from a
 * count it does not hold, so an orphan's last reference is dropped with
 * a real decrement (graph_node_release), never by graph_unref's shortcut. */
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
    if (try_retain(h)) n = h; /* before unlinking: once unlinked, a node
                                 being freed may go at once */
    unlink_locked(h);
  }
  pthread_mutex_unlock(&lock);
  return n;
}

/* The walks that hold the history (graph_history_hold) and the eviction,
 * which runs only while none does: `readers` counts the threads inside a
 * hold; `pending` says an eviction was skipped for them (the last one out
 * runs it, and new holds wait until it is done, so walks that keep
 * overlapping cannot put it off for ever); `evicting` that one runs now
 * (holds wait for it). A thread's nested holds count once (hold_depth).
 * Holds are taken with no other lock of the engine held (kiln_grad's
 * entry), so waiting in one cannot close a cycle. */
static pthread_mutex_t walk_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t walk_cond = PTHREAD_COND_INITIALIZER;
static int readers;
static bool pending, evicting;
static _Thread_local int hold_depth;

/* Lets the oldest recipes go while the queue weighs more than the budget. */
static void drop_over_budget(void) {
  int64_t budget = graph_history_budget();
  for (graph_node *old; (old = pop_over_budget(budget));) {
    graph_node_drop_history(old);
    graph_node_release(old);
  }
}

/* Called with walk_lock held and evicting set by the caller: evicts
 * (unlocked), again while an eviction was skipped meanwhile, then lets
 * waiting holds in. */
static void run_eviction_locked(void) {
  do {
    pending = false;
    pthread_mutex_unlock(&walk_lock);
    drop_over_budget();
    pthread_mutex_lock(&walk_lock);
  } while (pending && readers == 0);
  evicting = false;
  pthread_cond_broadcast(&walk_cond);
}

/* Evicts now, or leaves it to the last walk out (or to the eviction
 * already running, which loops once more). */
static void evict(void) {
  pthread_mutex_lock(&walk_lock);
  if (readers > 0 || evicting || hold_depth > 0) {
    pending = true;
  } else {
    evicting = true;
    run_eviction_locked();
  }
  pthread_mutex_unlock(&walk_lock);
}

void graph_history_hold(void) {
  if (hold_depth++ > 0) return;
  pthread_mutex_lock(&walk_lock);
  while (pending || evicting) pthread_cond_wait(&walk_cond, &walk_lock);
  readers++;
  pthread_mutex_unlock(&walk_lock);
}

void graph_history_unhold(void) {
  if (--hold_depth > 0) return;
  pthread_mutex_lock(&walk_lock);
  if (--readers == 0 && pending && !evicting) {
    evicting = true;
    run_eviction_locked();
  }
  pthread_mutex_unlock(&walk_lock);
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
