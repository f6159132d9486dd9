/*
 * schedule.c — the schedule cache: forcing a graph with the same
 * structure, shapes and dtypes as before (new data) skips the passes.
 *
 * The key of a schedule is the byte serialization of everything fusion
 * and lowering read: per pending node in post-order its op, dtypes,
 * sizes and attributes, and per input which node it reads (a position in
 * the schedule, or an external node numbered by first use: a realized
 * buffer, or a pending FULL/ARANGE source) through which view (offset
 * included), and the backend (llvm or cuda-emu) whose entry points it
 * holds. Not in the key: buffer contents and the values of pending
 * FULL sources, which reach a kernel as arguments.
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
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "runtime.h"

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
static int64_t cached_bytes, hits;

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
  unsigned char *p = realloc(k->p, cap);
  if (!p) {
    k->oom = true;
    return false;
  }
  k->p = p;
  k->cap = cap;
  return true;
}

/* Appends n bytes (inlined: the key is built field by field, every force). */
static inline void put(keybuf *k, const void *x, size_t n) {
  if (k->len + n > k->cap && !grow_key(k, n)) return;
  memcpy(k->p + k->len, x, n);
  k->len += n;
}

static void put_i64(keybuf *k, int64_t x) { put(k, &x, sizeof x); }

static void put_view(keybuf *k, const graph_view *v) {
  put_i64(k, v->ndim);
  put_i64(k, v->offset);
  put(k, v->sizes, sizeof *v->sizes * (size_t)v->ndim);
  put(k, v->strides, sizeof *v->strides * (size_t)v->ndim);
}

/* An input not in the schedule: numbered by first use (sched_mark =
 * ext_epoch, sched_pos = its number) and described once. */
static int64_t external_ref(keybuf *k, graph_node *in, int ext_epoch, int *n_ext) {
  if (in->sched_mark == ext_epoch) return -1 - (int64_t)in->sched_pos;
  in->sched_mark = ext_epoch;
  in->sched_pos = (*n_ext)++;
  int64_t desc[4] = {in->buffer ? -1 : (int64_t)in->op, in->dtype, in->numel, in->device};
  put(k, desc, sizeof desc);
  if (!in->buffer && in->op == GRAPH_OP_ARANGE) { /* compiled into the kernel */
    put(k, &in->attr.scalar, sizeof(double));
    put(k, &in->attr.scalar2, sizeof(double));
  }
  return -1 - (int64_t)in->sched_pos;
}

static void put_node(keybuf *k, graph_node *n, int order_epoch, int ext_epoch, int *n_ext) {
  int64_t where = n->device == KILN_CUDA ? 1 + rt_device_next_is_real() : 0; /* CPU, emulated or real device */
  int64_t head[7] = {n->op, n->dtype, n->cdtype, n->ndim, n->n_inputs, n->numel, where};
  put(k, head, sizeof head);
  put(k, n->sizes, sizeof *n->sizes * (size_t)n->ndim);
  put(k, &n->attr.scalar, sizeof(double)); /* compiled in for CLAMP and materialized sources */
  put(k, &n->attr.scalar2, sizeof(double));
  put_i64(k, n->attr.reduce_mask);
  if (n->op == GRAPH_OP_ASSIGN) put_view(k, &n->attr.region);
  for (int i = 0; i < n->n_inputs; i++) {
    graph_node *in = n->inputs[i].node;
    bool in_order = in->sched_mark == order_epoch && !in->buffer;
    put_i64(k, in_order ? in->sched_pos : external_ref(k, in, ext_epoch, n_ext));
    put_view(k, &n->inputs[i].view);
  }
}

/* The key is built in a per-thread buffer that is kept between forces
 * (no allocation on a hit); rt_schedule_insert copies it. */
static _Thread_local keybuf key_buf;
static pthread_key_t key_owner;
static pthread_once_t key_owner_once = PTHREAD_ONCE_INIT;

static void free_key_buf(void *p) { free(p); }
static void make_key_owner(void) { pthread_key_create(&key_owner, free_key_buf); }

/* Registers this thread's buffer so it is freed when the thread exits. */
static void own_key_buf(void) {
  pthread_once(&key_owner_once, make_key_owner);
  pthread_setspecific(key_owner, key_buf.p);
}

const unsigned char *rt_schedule_key(graph_node *const *order, int n, graph_node *const *roots, int n_roots,
                                     bool fusion, int order_epoch, int ext_epoch, size_t *len) {
  keybuf *k = &key_buf;
  unsigned char *before = k->p;
  k->len = 0;
  k->oom = false;
  int n_ext = 0;
  int64_t head[3] = {n, fusion, rt_backend_is_emu()}; /* a schedule holds one backend's entry points */
  put(k, head, sizeof head);
  for (int r = 0; r < n_roots; r++) {
    bool in_order = roots[r] && !roots[r]->buffer && roots[r]->sched_mark == order_epoch;
    put_i64(k, in_order ? roots[r]->sched_pos : -1);
  }
  for (int i = 0; i < n; i++) put_node(k, order[i], order_epoch, ext_epoch, &n_ext);
  if (k->p != before) own_key_buf();
  *len = k->len;
  return k->oom ? NULL : k->p;
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
  rt_schedule **tab = calloc(cap, sizeof *tab);
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

/* At exit: every entry, and the exiting thread's key buffer (another
 * thread's buffer is freed by the thread-exit handler below). */
static void free_all(void) {
  if (key_buf.p) pthread_setspecific(key_owner, NULL);
  free(key_buf.p);
  key_buf = (keybuf){0};
  for (size_t i = 0; i < n_slots; i++) free_schedule(slots[i]);
  free(slots);
  slots = NULL;
  n_slots = n_used = 0;
}

const rt_schedule *rt_schedule_find(const unsigned char *key, size_t len) {
  uint64_t h = rt_hash_bytes(key, len);
  pthread_mutex_lock(&sched_lock);
  rt_schedule *s = n_slots ? *find_slot(slots, n_slots, h, key, len) : NULL;
  if (s) hits++;
  pthread_mutex_unlock(&sched_lock);
  return s;
}

void rt_decisions_get(graph_node *const *order, int n, rt_decision *d) {
  for (int i = 0; i < n; i++)
    d[i] = (rt_decision){.fused = order[i]->fused, .host = order[i]->store_host ? order[i]->store_host->sched_pos : -1};
}

void rt_schedule_apply(const rt_schedule *s, graph_node *const *order) {
  for (int i = 0; i < s->n_order; i++) {
    order[i]->fused = s->decided[i].fused;
    order[i]->store_host = order[i]->stores = order[i]->store_next = NULL;
  }
  for (int i = s->n_order - 1; i >= 0; i--) {
    if (s->decided[i].host < 0) continue;
    graph_node *p = order[i], *host = order[s->decided[i].host];
    p->store_host = host;
    p->store_next = host->stores;
    host->stores = p;
  }
}

const rt_sched_kernel *rt_schedule_kernel(const rt_schedule *s, int pos) {
  int k = s->kernel_at[pos];
  return k >= 0 ? &s->kernels[k] : NULL;
}

static rt_schedule *build(unsigned char *key, size_t len, const rt_decision *decided, int n,
                          const rt_sched_kernel *ks, int nk) {
  rt_schedule *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->decided = malloc(sizeof *s->decided * (size_t)(n ? n : 1));
  s->kernel_at = malloc(sizeof *s->kernel_at * (size_t)(n ? n : 1));
  s->kernels = malloc(sizeof *s->kernels * (size_t)(nk ? nk : 1));
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

void rt_schedule_insert(const unsigned char *key_bytes, size_t len, const rt_decision *decided, int n,
                        const rt_sched_kernel *ks, int nk) {
  unsigned char *key = malloc(len ? len : 1);
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

int64_t rt_schedule_hits(void) { return hits; }
