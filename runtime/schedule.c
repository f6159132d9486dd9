/*
 * schedule.c — the schedule cache: forcing a graph with the same
 * structure, shapes and dtypes as before (new data) skips the passes.
 *
 * The key of a schedule is the byte serialization of everything fusion
 * and lowering read: per pending node in post-order its op, dtypes,
 * sizes and attributes, and per input which node it reads (a position in
 * the plan, or an external node numbered by first use: a realized
 * buffer, or a pending FULL/ARANGE source) through which view (offset
 * included), and per node its device and the backend whose entry point
 * runs it (rt_backend_for). Building the key writes no realized node:
 * realized inputs are numbered in a table of the key builder's own
 * (other threads' forces may read them at the same time); a pending fill
 * or arange source, one of the force's own pending nodes, carries its
 * number in its plan mark. Not in the key: buffer contents and the
 * values of pending FULL sources, which reach a kernel as arguments.
 *
 * A cached schedule holds the fusion decisions and, per kernel, the
 * compiled entry point and its binding with the slots it was bound from
 * (pass_slot), so a hit rebinds each kernel to the new nodes
 * (pass_rebind) instead of lowering it. A kernel whose in-place decision
 * differs at run time is lowered again. Entries are never freed before
 * exit (so a running schedule cannot lose its entry); past
 * RT_SCHED_MAX_BYTES of entries new schedules are no longer cached.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "rt_internal.h"

#define RT_SCHED_MAX_BYTES (256ll << 20)

struct rt_schedule {
  uint64_t hash;
  unsigned char *key;
  size_t len;
  int n_order;
  rt_decision *decided; /* [n_order] */
  int *kernel_at;  /* [n_order]: index into kernels, or -1 */
  int n_kernels;
  rt_sched_kernel *kernels;
};

static pthread_mutex_t sched_lock = PTHREAD_MUTEX_INITIALIZER;
static rt_schedule **slots;
static size_t n_slots, n_used;
static int64_t cached_bytes;
static atomic_int_fast64_t hits;

/* ------------------------------------------------------------------ key */

typedef struct keybuf {
  unsigned char *p;
  size_t len, cap;
  bool oom;
} keybuf;

/* Grows the buffer to hold n more bytes; false (and oom set) on failure. */
static __attribute__((noinline)) bool grow_key(keybuf *k, size_t n) {
  if (k->oom) return false;
  size_t cap = k->cap ? k->cap * 2 : 4096;
  while (cap < k->len + n) cap *= 2;
  unsigned char *p = graph_realloc(k->p, cap);
  if (!p) {
    k->oom = true;
    return false;
  }
  k->p = p;
  k->cap = cap;
  return true;
}

/* The encoding is compact (most fields are one byte, a view that is the
 * plain contiguous view of its node is one tag byte) because the key is
 * built, hashed and compared on every force: W8 of bench/ forces 100
 * nodes per call. Space for a whole node is reserved once (node_bound),
 * so the field writes below are unchecked appends through a cursor. */
_Static_assert(GRAPH_OP_COUNT < 255 && KILN_MAX_DIMS < 256, "ops, dtypes and ranks are one key byte");
#define VIEW_BOUND (2 + 8 + 16 * KILN_MAX_DIMS)
#define ATTR_BOUND (3 + GRAPH_ATTR_BYTES)
#define EXT_BOUND (4 + 8 + 8 * KILN_MAX_DIMS + ATTR_BOUND)

static size_t node_bound(const graph_node *n) {
  return 6 + 8 * KILN_MAX_DIMS + ATTR_BOUND + (size_t)n->n_inputs * (4 + VIEW_BOUND + EXT_BOUND);
}

static inline unsigned char *put(unsigned char *w, const void *x, size_t n) {
  memcpy(w, x, n);
  return w + n;
}

static inline unsigned char *put_u8(unsigned char *w, int64_t x) {
  *w = (unsigned char)x;
  return w + 1;
}

static inline unsigned char *put_i32(unsigned char *w, int32_t x) { return put(w, &x, sizeof x); }

/* Every attribute (graph_node.attr: scalars compiled in for CLAMP and
 * materialized sources, the reduce mask, ASSIGN's region): its length in
 * one byte (255: two more bytes hold it), then its bytes. Most nodes have
 * none and cost the length byte alone. */
static inline unsigned char *put_attrs(unsigned char *w, const graph_node *n) {
  if (n->attr_len == 0) return put_u8(w, 0);
  if (n->attr_len < 255) {
    w = put_u8(w, n->attr_len);
  } else {
    w = put_u8(w, 255);
    w = put(w, &n->attr_len, sizeof n->attr_len);
  }
  return put(w, n->attr, n->attr_len);
}

static unsigned char *put_full_view(unsigned char *w, const graph_view *v) {
  w = put_u8(w, v->ndim);
  w = put(w, &v->offset, sizeof v->offset);
  w = put(w, v->sizes, sizeof *v->sizes * (size_t)v->ndim);
  return put(w, v->strides, sizeof *v->strides * (size_t)v->ndim);
}

/* True when v is exactly the contiguous view of in's [sizes] at offset 0
 * (strides of size-1 dims included), so tag 0 alone describes it. */
static bool is_plain_view(const graph_view *v, const graph_node *in) {
  if (v->ndim != in->ndim || v->offset != 0) return false;
  int64_t stride = 1;
  for (int d = v->ndim - 1; d >= 0; d--) {
    if (v->sizes[d] != in->sizes[d] || v->strides[d] != stride) return false;
    stride *= in->sizes[d] > 1 ? in->sizes[d] : 1;
  }
  return true;
}

static unsigned char *put_view(unsigned char *w, const graph_view *v, const graph_node *in) {
  if (in && is_plain_view(v, in)) return put_u8(w, 0);
  return put_full_view(put_u8(w, 1), v);
}

/* External inputs (not in the plan) numbered by first use, in an
 * open-addressing table keyed by node address. */
typedef struct ext_table {
  const graph_node **nodes; /* [cap], NULL = free */
  int32_t *number;          /* [cap]: the node's number */
  int32_t *slot;            /* [cap / 2]: where entry i sits (clearing touches only those) */
  int cap, n;               /* n entries in the table */
  int32_t next;             /* numbers given: the table's and the pending sources' */
  bool oom;
} ext_table;

static size_t ext_hash(const graph_node *x, int cap) {
  uint64_t h = (uint64_t)(uintptr_t)x * UINT64_C(0x9E3779B97F4A7C15);
  return (size_t)(h >> 32) & (size_t)(cap - 1);
}

static bool ext_grow(ext_table *t) {
  int cap = t->cap ? t->cap * 2 : 64;
  const graph_node **nodes = graph_calloc((size_t)cap, sizeof *nodes);
  int32_t *number = graph_malloc(sizeof *number * (size_t)cap), *slot = graph_malloc(sizeof *slot * (size_t)(cap / 2));
  int n_moved = 0;
  if (!nodes || !number || !slot) {
    free(nodes);
    free(number);
    free(slot);
    return false;
  }
  for (int i = 0; i < t->cap; i++) {
    if (!t->nodes[i]) continue;
    size_t j = ext_hash(t->nodes[i], cap);
    while (nodes[j]) j = (j + 1) & (size_t)(cap - 1);
    nodes[j] = t->nodes[i];
    number[j] = t->number[i];
    slot[n_moved++] = (int32_t)j;
  }
  free(t->nodes);
  free(t->number);
  free(t->slot);
  t->nodes = nodes;
  t->number = number;
  t->slot = slot;
  t->cap = cap;
  return true;
}

/* x's number; a node not seen yet gets the next one (*fresh). */
static int32_t ext_find(ext_table *t, const graph_node *x, bool *fresh) {
  *fresh = false;
  if ((t->n + 1) * 2 > t->cap && !ext_grow(t)) {
    t->oom = true;
    return 0;
  }
  size_t j = ext_hash(x, t->cap);
  for (; t->nodes[j]; j = (j + 1) & (size_t)(t->cap - 1))
    if (t->nodes[j] == x) return t->number[j];
  t->nodes[j] = x;
  t->slot[t->n++] = (int32_t)j;
  t->number[j] = t->next++;
  *fresh = true;
  return t->number[j];
}

static void ext_clear(ext_table *t) {
  for (int i = 0; i < t->n; i++) t->nodes[t->slot[i]] = NULL;
  t->n = t->next = 0;
  t->oom = false;
}

/* The number of an input not in the plan, by first use; *fresh when
 * this is its first use. A realized buffer (which other threads' forces
 * may read too) is looked up in the key builder's table; a pending fill
 * or arange source is one of this force's own pending nodes, so it
 * carries its number itself (plan_id = the plan's, plan_pos = -2 -
 * number: never a position). */
static int32_t external_number(const pass_plan *p, graph_node *in, ext_table *ext, bool *fresh) {
  if (in->buffer) return ext_find(ext, in, fresh);
  *fresh = in->plan_id != p->id;
  if (*fresh) {
    in->plan_id = p->id;
    in->plan_pos = -2 - ext->next++;
  }
  return -2 - in->plan_pos;
}

/* An input not in the plan: numbered by first use and described once,
 * with its sizes (a plain view of it refers to them). */
static unsigned char *external_ref(unsigned char *w, const pass_plan *p, graph_node *in, ext_table *ext,
                                   int32_t *ref) {
  bool fresh;
  int32_t number = external_number(p, in, ext, &fresh);
  if (fresh) {
    w = put_u8(w, in->buffer ? 255 : in->op);
    w = put_u8(w, in->dtype);
    w = put_u8(w, in->device);
    w = put_u8(w, in->ndim);
    w = put(w, &in->numel, sizeof in->numel);
    w = put(w, in->sizes, sizeof *in->sizes * (size_t)in->ndim);
    if (!in->buffer && in->op == GRAPH_OP_ARANGE) { /* compiled into the kernel */
      w = put_attrs(w, in);
    }
  }
  *ref = -1 - number;
  return w;
}

static void put_node(keybuf *k, const pass_plan *p, const graph_node *n, ext_table *ext) {
  size_t bound = node_bound(n);
  if (k->len + bound > k->cap && !grow_key(k, bound)) return;
  unsigned char *w = k->p + k->len;
  /* its device and the backend whose entry point runs it (backend.h): the cached code is that one's */
  int where = (int)n->device << 4 | rt_backend_for(n)->key;
  unsigned char head[6] = {(unsigned char)n->op, (unsigned char)n->dtype, (unsigned char)n->cdtype,
                           (unsigned char)n->ndim, (unsigned char)n->n_inputs, (unsigned char)where};
  w = put(w, head, sizeof head);
  w = put(w, n->sizes, sizeof *n->sizes * (size_t)n->ndim);
  w = put_attrs(w, n);
  for (int i = 0; i < n->n_inputs; i++) {
    graph_node *in = n->inputs[i].node;
    int32_t ref = in->buffer ? -1 : pass_pos(p, in);
    if (ref < 0) w = external_ref(w, p, in, ext, &ref);
    w = put_i32(w, ref);
    w = put_view(w, &n->inputs[i].view, in);
  }
  k->len = (size_t)(w - k->p);
}

/* The key is built in a per-thread buffer that is kept between forces
 * (no allocation on a hit), with a per-thread table of external inputs;
 * rt_schedule_insert copies the key. */
static _Thread_local keybuf key_buf;
static _Thread_local ext_table key_ext;
static pthread_key_t key_owner;
static pthread_once_t key_owner_once = PTHREAD_ONCE_INIT;

static void free_key_ext(void) {
  free(key_ext.nodes);
  free(key_ext.number);
  free(key_ext.slot);
  key_ext = (ext_table){0};
}

static void free_key_buf(void *p) {
  free(p);
  free_key_ext();
}
static void make_key_owner(void) { pthread_key_create(&key_owner, free_key_buf); }

/* Registers this thread's buffer so it is freed when the thread exits. */
static void own_key_buf(void) {
  pthread_once(&key_owner_once, make_key_owner);
  pthread_setspecific(key_owner, key_buf.p);
}

const unsigned char *rt_schedule_key(const pass_plan *p, graph_node *const *roots, int n_roots, bool fusion,
                                     size_t *len) {
  keybuf *k = &key_buf;
  unsigned char *before = k->p;
  k->len = 0;
  k->oom = false;
  ext_clear(&key_ext);
  size_t head_bytes = 12 + 4 * (size_t)n_roots;
  if (head_bytes > k->cap && !grow_key(k, head_bytes)) return NULL;
  unsigned char *w = put_i32(k->p, p->n);
  w = put_i32(w, n_roots);
  w = put_u8(w, fusion);
  for (int r = 0; r < n_roots; r++) w = put_i32(w, roots[r] && !roots[r]->buffer ? pass_pos(p, roots[r]) : -1);
  k->len = (size_t)(w - k->p);
  for (int i = 0; i < p->n; i++) put_node(k, p, p->order[i], &key_ext);
  if (k->p != before) own_key_buf();
  *len = k->len;
  return k->oom || key_ext.oom ? NULL : k->p;
}

/* ---------------------------------------------------------------- table */

static rt_schedule **find_slot(rt_schedule **tab, size_t cap, uint64_t h, const unsigned char *key, size_t len) {
  for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1)) {
    rt_schedule *s = tab[i];
    if (!s || (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0)) return &tab[i];
  }
}

static bool grow(void) {
  size_t cap = n_slots ? n_slots * 2 : 64;
  rt_schedule **tab = graph_calloc(cap, sizeof *tab);
  if (!tab) return false;
  for (size_t i = 0; i < n_slots; i++)
    if (slots[i]) *find_slot(tab, cap, slots[i]->hash, slots[i]->key, slots[i]->len) = slots[i];
  free(slots);
  slots = tab;
  n_slots = cap;
  return true;
}

static void free_schedule(rt_schedule *s) {
  if (!s) return;
  free(s->key);
  free(s->decided);
  free(s->kernel_at);
  free(s->kernels);
  free(s);
}

static void free_entries(void) {
  for (size_t i = 0; i < n_slots; i++) free_schedule(slots[i]);
  free(slots);
  slots = NULL;
  n_slots = n_used = 0;
  cached_bytes = 0;
}

/* At exit: every entry, and the exiting thread's key buffer (another
 * thread's buffer is freed by the thread-exit handler below). */
static void free_all(void) {
  if (key_buf.p) pthread_setspecific(key_owner, NULL);
  free(key_buf.p);
  key_buf = (keybuf){0};
  free_key_ext();
  free_entries();
}

void rt_schedule_cache_clear(void) {
  pthread_mutex_lock(&sched_lock);
  free_entries();
  pthread_mutex_unlock(&sched_lock);
}

const rt_schedule *rt_schedule_find(const unsigned char *key, size_t len) {
  uint64_t h = rt_hash_bytes(key, len);
  pthread_mutex_lock(&sched_lock);
  rt_schedule *s = n_slots ? *find_slot(slots, n_slots, h, key, len) : NULL;
  if (s) atomic_fetch_add_explicit(&hits, 1, memory_order_relaxed);
  pthread_mutex_unlock(&sched_lock);
  return s;
}

void rt_decisions_get(const pass_plan *p, rt_decision *d) {
  for (int i = 0; i < p->n; i++)
    d[i] = (rt_decision){.fused = p->e[i].fused, .host = p->e[i].host, .n_inputs = (uint8_t)p->order[i]->n_inputs};
}

void rt_schedule_apply(const rt_schedule *s, pass_plan *p) {
  for (int i = 0; i < s->n_order; i++) {
    p->e[i].fused = s->decided[i].fused;
    p->e[i].host = p->e[i].stores = p->e[i].store_next = -1;
  }
  for (int i = s->n_order - 1; i >= 0; i--) {
    int host = s->decided[i].host;
    if (host < 0) continue;
    p->e[i].host = host;
    p->e[i].store_next = p->e[host].stores;
    p->e[host].stores = i;
  }
}

int rt_schedule_decisions(const rt_schedule *s, const rt_decision **d) {
  *d = s->decided;
  return s->n_order;
}

const rt_sched_kernel *rt_schedule_kernel(const rt_schedule *s, int pos) {
  int k = s->kernel_at[pos];
  return k >= 0 ? &s->kernels[k] : NULL;
}

static rt_schedule *build(unsigned char *key, size_t len, const rt_decision *decided, int n,
                          const rt_sched_kernel *ks, int nk) {
  rt_schedule *s = graph_calloc(1, sizeof *s);
  if (!s) return NULL;
  s->decided = graph_malloc(sizeof *s->decided * (size_t)(n ? n : 1));
  s->kernel_at = graph_malloc(sizeof *s->kernel_at * (size_t)(n ? n : 1));
  s->kernels = graph_malloc(sizeof *s->kernels * (size_t)(nk ? nk : 1));
  if (!s->decided || !s->kernel_at || !s->kernels) {
    free_schedule(s);
    return NULL;
  }
  s->key = key;
  s->len = len;
  s->hash = rt_hash_bytes(key, len);
  s->n_order = n;
  s->n_kernels = nk;
  for (int i = 0; i < n; i++) {
    s->decided[i] = decided[i];
    s->kernel_at[i] = -1;
  }
  for (int i = 0; i < nk; i++) {
    s->kernels[i] = ks[i];
    s->kernel_at[ks[i].pos] = i;
  }
  return s;
}

/* Every position and slot of the entry lies inside its schedule. */
static bool entry_valid(const rt_decision *decided, int n, const rt_sched_kernel *ks, int nk) {
  uint8_t *n_inputs = graph_malloc((size_t)(n ? n : 1));
  bool ok = n_inputs != NULL && nk <= n;
  for (int i = 0; ok && i < n; i++) {
    n_inputs[i] = decided[i].n_inputs;
    ok = decided[i].host >= -1 && decided[i].host < n && decided[i].host != i;
  }
  for (int i = 0; ok && i < nk; i++)
    ok = ks[i].pos >= 0 && ks[i].pos < n && pass_binding_valid(&ks[i].binding, n_inputs, n);
  free(n_inputs);
  return ok;
}

void rt_schedule_insert(const unsigned char *key_bytes, size_t len, const rt_decision *decided, int n,
                        const rt_sched_kernel *ks, int nk) {
  if (!entry_valid(decided, n, ks, nk)) return;
  unsigned char *key = graph_malloc(len ? len : 1);
  if (!key) return;
  memcpy(key, key_bytes, len);
  static bool registered;
  int64_t bytes = (int64_t)len + (int64_t)n * (int64_t)(sizeof *decided + 4) + (int64_t)nk * (int64_t)sizeof *ks;
  pthread_mutex_lock(&sched_lock);
  if (!registered) registered = atexit(free_all) == 0;
  rt_schedule *s = NULL;
  bool room = cached_bytes + bytes <= RT_SCHED_MAX_BYTES && ((n_used + 1) * 2 <= n_slots || grow());
  if (room) s = build(key, len, decided, n, ks, nk);
  if (s) {
    rt_schedule **slot = find_slot(slots, n_slots, s->hash, key, len);
    if (*slot) {
      free_schedule(s); /* another thread cached it first */
    } else {
      *slot = s;
      n_used++;
      cached_bytes += bytes;
    }
  } else {
    free(key);
  }
  pthread_mutex_unlock(&sched_lock);
}

int64_t rt_schedule_hits(void) { return atomic_load_explicit(&hits, memory_order_relaxed); }

void rt_schedule_cache_size(int64_t *entries, int64_t *bytes) {
  pthread_mutex_lock(&sched_lock);
  *entries = (int64_t)n_used;
  *bytes = cached_bytes;
  pthread_mutex_unlock(&sched_lock);
}
