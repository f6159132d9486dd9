/*
 * kernel_cache.c — compiled kernels keyed by their kernel IR: the bytes
 * of the uop array (builders zero every uop, padding included, so equal
 * kernels have equal bytes; the name is not part of it) and which params
 * are written. A hit costs a word-wise hash and a memcmp, no LLVM work and
 * no formatting. Open addressing, guarded by a mutex that is not held
 * while a kernel compiles.
 *
 * Under the "cuda-emu" backend a miss compiles through the CUDA path
 * instead (cuda_emu_compile: CUDA C, NVRTC/ptxas check, host C++ build),
 * with the same calling convention; the key's last byte says which path
 * built the entry, so switching backends never reuses the other's code.
 * F16/BF16 kernels, which the emulator does not build, are checked and
 * then compiled by LLVM. Kernels for tensors on the real CUDA device
 * (rt_kernel_get_device) are NVRTC builds loaded on the device, cached
 * under the same key with a third path byte; they stay loaded until exit.
 * A miss on the LLVM path first asks the on-disk cache (disk_cache.c),
 * which loads code an earlier process compiled, or compiles and stores.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_emu_run.h"
#include "device.h"
#include "rt_internal.h"

/* Which path built an entry: the key's last byte. */
enum { PATH_LLVM = 0, PATH_EMU = 1, PATH_DEVICE = 2 };

typedef struct cache_entry {
  uint64_t hash;
  unsigned char *key; /* NULL = empty slot */
  size_t len;
  llvm_kernel_fn fn; /* PATH_LLVM, PATH_EMU */
  void *dev;         /* PATH_DEVICE: rt_device_kernel_load's handle */
} cache_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cache_entry *slots;
static size_t n_slots, n_used;
static int64_t compiles;

int64_t rt_compile_count(void) { return compiles; }

/* The key bytes of k (malloc'ed), or NULL on OOM. */
static unsigned char *kernel_key(const kir_kernel *k, int path, size_t *len) {
  size_t uops = (size_t)k->n_uops * sizeof *k->uops, flags = (size_t)k->n_params;
  unsigned char *key = graph_malloc(uops + flags + 1);
  if (!key) return NULL;
  memcpy(key, k->uops, uops);
  for (int p = 0; p < k->n_params; p++) key[uops + (size_t)p] = k->param_written[p];
  key[uops + flags] = (unsigned char)path;
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

/* Every entry (device builds unloaded). */
static void free_entries(void) {
  for (size_t i = 0; i < n_slots; i++) {
    free(slots[i].key);
    rt_device_kernel_free(slots[i].dev);
  }
  free(slots);
  slots = NULL;
  n_slots = n_used = 0;
}

static void cache_free_all(void) {
  free_entries();
  llvm_shutdown();
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
  if (!registered) registered = atexit(cache_free_all) == 0;
  if ((n_used + 1) * 2 > n_slots && !grow()) return NULL;
  return find_slot(slots, n_slots, h, key, len);
}

/* KILN_DEBUG=4 on the CUDA paths: the CUDA C of each kernel built. */
static void debug_cuda_source(const kir_kernel *k) {
  char *src = NULL, msg[256];
  if (cuda_print_kernel(k, NULL, &src, msg, sizeof msg) == KILN_OK) fprintf(stderr, "kiln: CUDA C of %s\n%s\n", k->name, src);
  free(src);
}

/* Builds k by `path` into *e (fn or dev). LLVM builds go through the
 * disk cache when it is on (then *load_ns > 0 says the code came from
 * disk, compiled by an earlier process); the other paths are not stored
 * on disk (docs/cache.md). */
static int build(const kir_kernel *k, int path, const unsigned char *key, size_t len, cache_entry *e,
                 int64_t *load_ns, char *err, size_t errlen) {
  if (path != PATH_LLVM && rt_debug_level() >= 4) debug_cuda_source(k);
  if (path == PATH_DEVICE) return rt_device_kernel_load(k, &e->dev, err, errlen);
  int st = path == PATH_EMU ? cuda_emu_compile(k, &rt_cuda_emu_launcher, &e->fn, err, errlen) : KILN_OK;
  if (st == KILN_OK && !e->fn) {
    char *ir = NULL; /* KILN_DEBUG=4 prints the LLVM IR of each compiled kernel */
    char **want_ir = rt_debug_level() >= 4 ? &ir : NULL;
    int64_t t0 = rt_now_ns(); /* a load's time: settings, JIT creation, read, check, link */
    st = path == PATH_LLVM && rt_disk_cache_on() ? rt_disk_kernel(k, key, len, &e->fn, load_ns, want_ir, err, errlen)
                                                  : llvm_compile(k, &e->fn, want_ir, err, errlen);
    if (*load_ns > 0) *load_ns = rt_now_ns() - t0;
    if (ir) fprintf(stderr, "kiln: LLVM IR of %s\n%s\n", k->name, ir);
    free(ir);
  }
  if (st == KILN_OK && path == PATH_LLVM) rt_cuda_check(k); /* KILN_CUDA_CHECK: the GPU backend's code, checked */
  return st;
}

/* A miss compiles without holding the lock, so kernels compile in
 * parallel; when two threads compile the same kernel, the first to
 * finish is cached and both use it (a device build that loses the race
 * is unloaded). */
static int oom(const kir_kernel *k, char *err, size_t errlen) {
  snprintf(err, errlen, "out of memory looking kernel %s up", k->name);
  return KILN_ERR_OOM;
}

static int get(const kir_kernel *k, int path, cache_entry *out, bool *cache_hit, int64_t *load_ns, char *err,
               size_t errlen) {
  *load_ns = 0;
  size_t len = 0;
  unsigned char *key = kernel_key(k, path, &len);
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
  cache_entry mine = {h, NULL, len, NULL, NULL};
  int st = build(k, path, key, len, &mine, load_ns, err, errlen);
  if (st != KILN_OK) {
    free(key);
    return st;
  }
  pthread_mutex_lock(&cache_lock);
  e = lookup(h, key, len);
  if (e && e->key) {
    rt_device_kernel_free(mine.dev); /* another thread finished first */
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

int rt_kernel_get(const kir_kernel *k, llvm_kernel_fn *fn, bool *cache_hit, int64_t *load_ns, char *err,
                  size_t errlen) {
  cache_entry e;
  int64_t loaded;
  int st = get(k, rt_backend_is_emu() ? PATH_EMU : PATH_LLVM, &e, cache_hit, &loaded, err, errlen);
  if (st == KILN_OK) *fn = e.fn;
  if (load_ns) *load_ns = st == KILN_OK ? loaded : 0;
  return st;
}

int rt_kernel_get_device(const kir_kernel *k, void **handle, bool *cache_hit, char *err, size_t errlen) {
  cache_entry e;
  int64_t loaded;
  int st = get(k, PATH_DEVICE, &e, cache_hit, &loaded, err, errlen);
  if (st == KILN_OK) *handle = e.dev;
  return st;
}
