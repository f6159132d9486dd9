/*
 * kernel_cache.c — compiled kernels keyed by their kernel IR and backend:
 * the bytes of the uop array (builders zero every uop, padding included,
 * so equal kernels have equal bytes; the name is not part of it), which
 * params are written, and last the backend's key byte (backend.h), so
 * one backend's code never serves another (switching backends compiles
 * again). A hit costs a word-wise hash and a memcmp, no compiler work and
 * no formatting. Open addressing, guarded by a mutex that is not held
 * while a kernel compiles.
 *
 * A miss calls the backend's compile: LLVM (through the on-disk cache,
 * disk_cache.c, which loads code an earlier process compiled, or
 * compiles and stores), the cuda-emu host build, or an NVRTC build loaded
 * on the device. Entries stay until exit (or rt_kernel_cache_clear),
 * when the backend's unload frees what it loaded.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "rt_internal.h"

typedef struct cache_entry {
  uint64_t hash;
  unsigned char *key; /* NULL = empty slot */
  size_t len;
  const rt_backend *backend; /* which compiled it: its unload frees code */
  rt_code code;
} cache_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cache_entry *slots;
static size_t n_slots, n_used;
static int64_t compiles;

int64_t rt_compile_count(void) { return compiles; }

int64_t rt_kernel_cache_entries(void) {
  pthread_mutex_lock(&cache_lock);
  int64_t n = (int64_t)n_used;
  pthread_mutex_unlock(&cache_lock);
  return n;
}

/* The key bytes of k for backend b (malloc'ed), or NULL on OOM. */
static unsigned char *kernel_key(const kir_kernel *k, const rt_backend *b, size_t *len) {
  size_t uops = (size_t)k->n_uops * sizeof *k->uops, flags = (size_t)k->n_params;
  unsigned char *key = graph_malloc(uops + flags + 1);
  if (!key) return NULL;
  memcpy(key, k->uops, uops);
  for (int p = 0; p < k->n_params; p++) key[uops + (size_t)p] = k->param_written[p];
  key[uops + flags] = b->key;
  *len = uops + flags + 1;
  return key;
}

/* Four independent multiply-xorshift lanes over 32-byte blocks (a single
 * chain runs at one multiply latency per 8 bytes, and the schedule cache
 * hashes a key covering every pending node on every force: see
 * bench/README.md, row W8run), then the tail, then the lanes folded. */
static uint64_t mix(uint64_t h, uint64_t w) {
  h = (h ^ w) * 0xff51afd7ed558ccdull;
  return h ^ (h >> 32);
}

uint64_t rt_hash_bytes(const unsigned char *p, size_t len) {
  uint64_t h[4] = {0x9e3779b97f4a7c15ull ^ len, 0xc2b2ae3d27d4eb4full, 0x165667b19e3779f9ull, 0x27d4eb2f165667c5ull};
  size_t i = 0;
  for (; i + 32 <= len; i += 32)
    for (int l = 0; l < 4; l++) {
      uint64_t w;
      memcpy(&w, p + i + 8 * l, 8);
      h[l] = mix(h[l], w);
    }
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h[0] = mix(h[0], w);
  }
  for (; i < len; i++) h[0] = (h[0] ^ p[i]) * 0x100000001b3ull;
  return mix(mix(mix(h[0], h[1]), h[2]), h[3]);
}

static cache_entry *find_slot(cache_entry *tab, size_t cap, uint64_t h, const unsigned char *key, size_t len) {
  for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1))
    if (!tab[i].key || (tab[i].hash == h && tab[i].len == len && memcmp(tab[i].key, key, len) == 0))
      return &tab[i];
}

static bool grow(void) {
  size_t cap = n_slots ? n_slots * 2 : 256;
  cache_entry *tab = graph_calloc(cap, sizeof *tab);
  if (!tab) return false;
  for (size_t i = 0; i < n_slots; i++)
    if (slots[i].key) *find_slot(tab, cap, slots[i].hash, slots[i].key, slots[i].len) = slots[i];
  free(slots);
  slots = tab;
  n_slots = cap;
  return true;
}

/* Every entry, its code unloaded. */
static void free_entries(void) {
  for (size_t i = 0; i < n_slots; i++) {
    if (slots[i].key) slots[i].backend->unload(&slots[i].code);
    free(slots[i].key);
  }
  free(slots);
  slots = NULL;
  n_slots = n_used = 0;
}

void rt_kernel_cache_clear(void) {
  pthread_mutex_lock(&cache_lock);
  free_entries();
  pthread_mutex_unlock(&cache_lock);
}

/* Under cache_lock: the entry for key (NULL slot content = absent), NULL
 * when the table cannot grow. */
static cache_entry *lookup(uint64_t h, const unsigned char *key, size_t len) {
  static bool registered;
  if (!registered) registered = atexit(free_entries) == 0;
  if ((n_used + 1) * 2 > n_slots && !grow()) return NULL;
  return find_slot(slots, n_slots, h, key, len);
}

/* A miss compiles without holding the lock, so kernels compile in
 * parallel; when two threads compile the same kernel, the first to
 * finish is cached and both use it (the build that loses the race is
 * unloaded). */
static int oom(const kir_kernel *k, char *err, size_t errlen) {
  snprintf(err, errlen, "out of memory looking kernel %s up", k->name);
  return KILN_ERR_OOM;
}

static int get(const rt_backend *b, const kir_kernel *k, cache_entry *out, bool *cache_hit, int64_t *load_ns,
               char *err, size_t errlen) {
  *load_ns = 0;
  size_t len = 0;
  unsigned char *key = kernel_key(k, b, &len);
  if (!key) return oom(k, err, errlen);
  uint64_t h = rt_hash_bytes(key, len);
  pthread_mutex_lock(&cache_lock);
  cache_entry *e = lookup(h, key, len);
  bool hit = e && e->key;
  if (hit) *out = *e;
  pthread_mutex_unlock(&cache_lock);
  if (!e) {
    free(key);
    return oom(k, err, errlen);
  }
  *cache_hit = hit;
  if (hit) {
    free(key);
    return KILN_OK;
  }
  cache_entry mine = {.hash = h, .len = len, .backend = b};
  int st = b->compile(k, key, len, &mine.code, load_ns, err, errlen);
  if (st != KILN_OK) {
    free(key);
    return st;
  }
  pthread_mutex_lock(&cache_lock);
  e = lookup(h, key, len);
  if (e && e->key) {
    b->unload(&mine.code); /* another thread finished first */
    mine = *e;
  } else if (e) {
    mine.key = key;
    *e = mine;
    n_used++;
    compiles += *load_ns == 0; /* loads from disk are not compiles */
    key = NULL;
  } /* else no room to cache it: still usable */
  pthread_mutex_unlock(&cache_lock);
  *out = mine;
  *cache_hit = *load_ns > 0;
  free(key);
  return KILN_OK;
}

int rt_kernel_get(const rt_backend *b, const kir_kernel *k, rt_code *code, bool *cache_hit, int64_t *load_ns,
                  char *err, size_t errlen) {
  cache_entry e;
  int64_t loaded;
  int st = get(b, k, &e, cache_hit, &loaded, err, errlen);
  if (st == KILN_OK) *code = e.code;
  if (load_ns) *load_ns = st == KILN_OK ? loaded : 0;
  return st;
}
