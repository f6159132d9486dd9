/*
 * kernel_cache.c — compiled kernels keyed by the canonical text of their
 * kernel IR (kir_to_string) and the backend. A hit costs a hash and a
 * string compare, no LLVM work. Open addressing, guarded by a mutex.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

typedef struct cache_entry {
  uint64_t hash;
  char *key; /* NULL = empty slot */
  llvm_kernel_fn fn;
} cache_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cache_entry *slots;
static size_t n_slots, n_used;
static int64_t compiles;

int64_t rt_compile_count(void) { return compiles; }

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static cache_entry *find_slot(cache_entry *tab, size_t cap, uint64_t h, const char *key) {
  for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1))
    if (!tab[i].key || (tab[i].hash == h && strcmp(tab[i].key, key) == 0)) return &tab[i];
}

static bool grow(void) {
  size_t cap = n_slots ? n_slots * 2 : 256;
  cache_entry *tab = calloc(cap, sizeof *tab);
  if (!tab) return false;
  for (size_t i = 0; i < n_slots; i++)
    if (slots[i].key) *find_slot(tab, cap, slots[i].hash, slots[i].key) = slots[i];
  free(slots);
  slots = tab;
  n_slots = cap;
  return true;
}

static void cache_free_all(void) {
  for (size_t i = 0; i < n_slots; i++) free(slots[i].key);
  free(slots);
  slots = NULL;
  n_slots = n_used = 0;
  llvm_shutdown();
}

int rt_kernel_get(const kir_kernel *k, llvm_kernel_fn *fn, bool *cache_hit, char *err, size_t errlen) {
  char *key = kir_to_string(k);
  if (!key) return KILN_ERR_OOM;
  uint64_t h = fnv1a(key);
  pthread_mutex_lock(&cache_lock);
  static bool registered;
  if (!registered) registered = atexit(cache_free_all) == 0;
  int st = KILN_OK;
  if ((n_used + 1) * 2 > n_slots && !grow()) st = KILN_ERR_OOM;
  cache_entry *e = st == KILN_OK ? find_slot(slots, n_slots, h, key) : NULL;
  if (e && e->key) {
    *fn = e->fn;
    *cache_hit = true;
    free(key);
  } else if (e) {
    st = llvm_compile(k, fn, NULL, err, errlen);
    if (st == KILN_OK) {
      *e = (cache_entry){h, key, *fn};
      n_used++;
      compiles++;
      *cache_hit = false;
      key = NULL;
    }
    free(key);
  } else {
    free(key);
  }
  pthread_mutex_unlock(&cache_lock);
  return st;
}
