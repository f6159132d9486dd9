/*
 * handle.c — type-stable slots for the public API's objects (handle.h).
 *
 * A kind's region is reserved at its first allocation: readable and
 * writable, not backed (MAP_NORESERVE) until touched, aligned to BLOCK
 * bytes, the largest size the address space grants from max_bytes down.
 * It is cut into chunks of SLOTS_PER_CHUNK slots (at least a page); a
 * chunk's first slot is its header (a mark that it was handed out, how
 * many of its slots are not yet freed, its link in the quarantine), the
 * others hold one object each after a slot header (magic, death code). A
 * thread takes a whole chunk and hands its slots out in order; chunks
 * are taken in address order and never twice (until the region wraps,
 * below).
 *
 * The last free of a chunk's slots puts it at the tail of the kind's
 * quarantine, a FIFO; the chunk that then has more than quarantine[kind]
 * chunks behind it leaves for a batch of PENDING chunks whose memory is
 * returned at once (MADV_DONTNEED): read again, it is zero, which
 * state_of reports as dead, how no longer known. A block (BLOCK bytes,
 * one huge page) is returned whole when its last chunk is, so the kernel
 * frees its page table too. Fresh memory is populated a block at a time,
 * as a transparent huge page (MADV_HUGEPAGE, MADV_POPULATE_WRITE): one
 * call instead of a fault per 4 KiB page (12 us each on the CI machines'
 * VMs, more than recording an op).
 *
 * When the region is used up, chunks whose memory was returned are taken
 * again, oldest address first: from then on a handle stale since before
 * the wrap may alias a new object (handle.h).
 */
#include "handle.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fault.h"

#if defined(__SANITIZE_ADDRESS__)
#define HANDLE_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HANDLE_LSAN 1
#endif
#endif
#ifdef HANDLE_LSAN
#include <sanitizer/lsan_interface.h>
#endif

#define SLOT_HEAD 16u       /* the slot header before each object */
#define SLOTS_PER_CHUNK 16u /* at least; the first is the chunk header */
#define MIN_REGION ((size_t)1 << 24)
#define BLOCK ((size_t)2 << 20) /* an x86-64 huge page: populated, and at best returned, whole */
#define PENDING 64              /* chunks returned to the system in one batch */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels say EINVAL and pages fault in */
#endif
#define NO_CHUNK SIZE_MAX

typedef struct slot_head {
  _Atomic uint32_t magic; /* LIVE_MAGIC + kind, DEAD_MAGIC + kind, or 0 (not handed out, or returned) */
  int32_t death;
  uint64_t pad;
} slot_head;

typedef struct chunk_head {
  _Atomic uint32_t taken; /* CHUNK_MAGIC from its taking to its return (then 0) */
  atomic_int unfreed;     /* slots not yet freed (handed out or still to be) */
  size_t next_dead;       /* the next chunk in the quarantine (offset), or NO_CHUNK */
} chunk_head;

_Static_assert(sizeof(slot_head) == SLOT_HEAD, "slot header size");

#define LIVE_MAGIC 0x4b4c5600u
#define DEAD_MAGIC 0x4b445600u
#define CHUNK_MAGIC 0x4b434800u

typedef struct region {
  pthread_mutex_t lock;
  _Atomic uintptr_t base; /* 0 until reserved; published after slot/chunk */
  size_t bytes, slot, chunk; /* slot and chunk: powers of two, chunk <= BLOCK */
  size_t next;             /* the next chunk never handed out (under lock) */
  size_t populated;        /* bytes from base populated (under lock) */
  _Atomic size_t high;     /* offsets below it have been handed out */
  size_t dead_head, dead_tail; /* the quarantine: dead chunks, oldest first */
  long long n_dead;
  size_t pending[PENDING]; /* chunks out of the quarantine, to return */
  int n_pending;
  uint16_t *returned;      /* per block: its chunks returned (until the wrap) */
  bool wrapped;            /* every chunk was handed out once */
  size_t scan;             /* after the wrap: where to look for a returned chunk */
  _Atomic size_t released; /* bytes returned to the system and not taken again */
  atomic_llong live;
} region;

/* The most address space a kind may use (a kind's slots are handed out
 * once each, so this bounds how many objects a process makes before the
 * wrap): 2^36 tensors in 512-byte slots, 2^35 storages in 64-byte ones. */
static size_t max_bytes[GRAPH_HANDLE_KINDS] = {
    [GRAPH_HANDLE_TENSOR] = (size_t)1 << 45, [GRAPH_HANDLE_STORAGE] = (size_t)1 << 41,
    [GRAPH_HANDLE_OPTIMIZER] = (size_t)1 << 34, [GRAPH_HANDLE_ONNX_MODEL] = (size_t)1 << 34,
    [GRAPH_HANDLE_TEST] = (size_t)1 << 34};

/* Dead chunks whose death codes are kept (handle.h): 256 chunks of 15
 * tensors in 512-byte slots (2 MiB) and of 63 storages in 64-byte ones
 * (1 MiB); the other kinds are few. */
const long long graph_handle_quarantine[GRAPH_HANDLE_KINDS] = {
    [GRAPH_HANDLE_TENSOR] = 256, [GRAPH_HANDLE_STORAGE] = 256, [GRAPH_HANDLE_OPTIMIZER] = 16,
    [GRAPH_HANDLE_ONNX_MODEL] = 16, [GRAPH_HANDLE_TEST] = 16};

#define REGION_INIT {.lock = PTHREAD_MUTEX_INITIALIZER, .dead_head = NO_CHUNK, .dead_tail = NO_CHUNK}
static region regions[GRAPH_HANDLE_KINDS] = {REGION_INIT, REGION_INIT, REGION_INIT, REGION_INIT, REGION_INIT};

/* each thread's chunk per kind: slots [next, end) are still to hand out */
typedef struct tcache {
  char *next, *end;
} tcache;
static _Thread_local tcache caches[GRAPH_HANDLE_KINDS];

static char *base_of(const region *r) { return (char *)atomic_load_explicit(&r->base, memory_order_relaxed); }

static chunk_head *chunk_of(const region *r, const void *p) {
  uintptr_t base = atomic_load_explicit(&r->base, memory_order_relaxed);
  size_t off = (size_t)((uintptr_t)p - base);
  return (chunk_head *)(base + (off & ~(r->chunk - 1)));
}

/* Address space for `bytes` and its per-block counters, base aligned to
 * BLOCK; NULL when refused. */
static char *map_region(size_t bytes, uint16_t **returned) {
  size_t counters = bytes / BLOCK * sizeof(uint16_t);
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  void *p = mmap(NULL, bytes + BLOCK, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) return NULL;
  void *c = counters ? mmap(NULL, counters, PROT_READ | PROT_WRITE, flags, -1, 0) : NULL;
  if (c == MAP_FAILED) {
    munmap(p, bytes + BLOCK);
    return NULL;
  }
  *returned = c;
  return (char *)(((uintptr_t)p + BLOCK - 1) & ~(uintptr_t)(BLOCK - 1));
}

static bool reserve(region *r, graph_handle_kind k, size_t size) {
  size_t slot = 64;
  while (slot < size + SLOT_HEAD) slot <<= 1;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t chunk = slot * SLOTS_PER_CHUNK > page ? slot * SLOTS_PER_CHUNK : page;
  if (chunk > BLOCK) return false; /* objects of over 128 KiB: none */
  for (size_t bytes = max_bytes[k]; bytes >= MIN_REGION; bytes >>= 1) {
    char *base = map_region(bytes, &r->returned);
    if (!base) continue;
    r->bytes = bytes;
    r->slot = slot;
    r->chunk = chunk;
    atomic_store_explicit(&r->base, (uintptr_t)base, memory_order_release);
    return true;
  }
  return false;
}

/* Returns the pending chunks' memory: runs of adjacent chunks in one
 * call each, a block whose every chunk is returned in one call for the
 * whole block. Under r->lock. */
static int cmp_offset(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return (x > y) - (x < y);
}

static void return_pending(region *r) {
  char *base = base_of(r);
  size_t per_block = BLOCK / r->chunk, run = 0, run_bytes = 0;
  qsort(r->pending, (size_t)r->n_pending, sizeof r->pending[0], cmp_offset);
  for (int i = 0; i <= r->n_pending; i++) {
    size_t off = i < r->n_pending ? r->pending[i] : NO_CHUNK;
    bool whole = false;
    if (off != NO_CHUNK && !r->wrapped) whole = ++r->returned[off / BLOCK] == per_block;
    if (run_bytes && (off != run + run_bytes || whole)) {
      (void)madvise(base + run, run_bytes, MADV_DONTNEED);
      run_bytes = 0;
    }
    if (whole) (void)madvise(base + off / BLOCK * BLOCK, BLOCK, MADV_DONTNEED);
    else if (off != NO_CHUNK) {
      if (!run_bytes) run = off;
      run_bytes += r->chunk;
    }
  }
  atomic_fetch_add_explicit(&r->released, (size_t)r->n_pending * r->chunk, memory_order_relaxed);
  r->n_pending = 0;
}

/* After the wrap: the next chunk whose memory was returned, from r->scan
 * on. Under r->lock. */
static bool take_returned(region *r, size_t *off) {
  char *base = base_of(r);
  for (size_t n = 0; n < r->bytes / r->chunk; n++) {
    size_t at = r->scan;
    r->scan = at + r->chunk < r->bytes ? at + r->chunk : 0;
    if (!atomic_load_explicit(&((chunk_head *)(base + at))->taken, memory_order_relaxed)) {
      *off = at;
      atomic_fetch_sub_explicit(&r->released, r->chunk, memory_order_relaxed);
      return true;
    }
  }
  return false;
}

/* The offset of a chunk no one uses: the next one never handed out, else
 * (the region used up) one whose memory was returned. Under r->lock. */
static bool next_chunk(region *r, size_t *off) {
  if (r->next + r->chunk > r->bytes) {
    r->wrapped = true;
    if (r->n_pending) return_pending(r);
    return take_returned(r, off);
  }
  if (r->next + r->chunk > r->populated) {
    size_t n = BLOCK < r->bytes - r->next ? BLOCK : r->bytes - r->next;
    /* hints: without THP 4 KiB pages, without POPULATE a fault each;
     * (the part of the region in use only, for khugepaged's scans) */
    (void)madvise(base_of(r) + r->next, n, MADV_HUGEPAGE);
    (void)madvise(base_of(r) + r->next, n, MADV_POPULATE_WRITE);
    r->populated = r->next + n;
  }
  *off = r->next;
  r->next += r->chunk;
  atomic_store_explicit(&r->high, r->next, memory_order_release);
  return true;
}

/* The objects point to heap blocks (a tensor to its storage's nodes):
 * under AddressSanitizer, LeakSanitizer scans the chunks in use as it
 * scans the heap. */
static void lsan_scan(void *chunk, size_t bytes, bool on) {
#ifdef HANDLE_LSAN
  if (on) __lsan_register_root_region(chunk, bytes);
  else __lsan_unregister_root_region(chunk, bytes);
#else
  (void)chunk, (void)bytes, (void)on;
#endif
}

static bool take_chunk(region *r, graph_handle_kind k, size_t size, tcache *c) {
  pthread_mutex_lock(&r->lock);
  bool ok = atomic_load_explicit(&r->base, memory_order_relaxed) || reserve(r, k, size);
  size_t off = 0;
  ok = ok && size + SLOT_HEAD <= r->slot && next_chunk(r, &off);
  if (ok) {
    char *base = base_of(r);
    chunk_head *ch = (chunk_head *)(base + off);
    atomic_store_explicit(&ch->unfreed, (int)(r->chunk / r->slot) - 1, memory_order_relaxed);
    atomic_store_explicit(&ch->taken, CHUNK_MAGIC, memory_order_relaxed);
    c->next = base + off + r->slot;
    c->end = base + off + r->chunk;
    lsan_scan(ch, r->chunk, true);
  }
  pthread_mutex_unlock(&r->lock);
  return ok;
}

/* A chunk whose every slot is freed joins the quarantine; the oldest one
 * beyond its length leaves it to have its memory returned. */
static void chunk_died(region *r, graph_handle_kind k, chunk_head *ch) {
  pthread_mutex_lock(&r->lock);
  lsan_scan(ch, r->chunk, false);
  char *base = base_of(r);
  size_t off = (size_t)((char *)ch - base);
  ch->next_dead = NO_CHUNK;
  if (r->dead_tail == NO_CHUNK) r->dead_head = off;
  else ((chunk_head *)(base + r->dead_tail))->next_dead = off;
  r->dead_tail = off;
  if (++r->n_dead > graph_handle_quarantine[k]) {
    size_t old = r->dead_head;
    r->dead_head = ((chunk_head *)(base + old))->next_dead;
    r->n_dead--;
    r->pending[r->n_pending++] = old;
    if (r->n_pending == PENDING) return_pending(r);
  }
  pthread_mutex_unlock(&r->lock);
}

static void chunk_unref(region *r, graph_handle_kind k, chunk_head *ch, int n) {
  if (atomic_fetch_sub_explicit(&ch->unfreed, n, memory_order_acq_rel) == n) chunk_died(r, k, ch);
}

/* Ends this thread's chunk early: its slots not handed out count as freed. */
static void drop_rest(graph_handle_kind k, tcache *c) {
  region *r = &regions[k];
  int n = (int)((size_t)(c->end - c->next) / r->slot);
  chunk_head *ch = chunk_of(r, c->next);
  c->next = c->end = NULL;
  chunk_unref(r, k, ch, n);
}

/* A thread that ends gives the rest of its chunks back, so they can die. */
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static void thread_exit(void *unused) {
  (void)unused;
  for (int k = 0; k < GRAPH_HANDLE_KINDS; k++)
    if (caches[k].next != caches[k].end) drop_rest((graph_handle_kind)k, &caches[k]);
}
static void make_exit_key(void) { pthread_key_create(&exit_key, thread_exit); }

void *graph_handle_alloc(graph_handle_kind k, size_t size) {
  if (graph_fault_hit(GRAPH_FAULT_HOST)) return NULL;
  region *r = &regions[k];
  tcache *c = &caches[k];
  if (c->next == c->end) {
    if (!c->next) {
      pthread_once(&exit_once, make_exit_key);
      pthread_setspecific(exit_key, (void *)1);
    }
    if (!take_chunk(r, k, size, c)) return NULL;
  }
  slot_head *h = (slot_head *)c->next;
  c->next += r->slot;
  h->death = 0;
  atomic_store_explicit(&h->magic, LIVE_MAGIC + (uint32_t)k, memory_order_release);
  atomic_fetch_add_explicit(&r->live, 1, memory_order_relaxed);
  return (char *)h + SLOT_HEAD;
}

void graph_handle_free(graph_handle_kind k, void *p, int death) {
  if (!p) return;
  region *r = &regions[k];
  slot_head *h = (slot_head *)((char *)p - SLOT_HEAD);
  memset(p, 0, r->slot - SLOT_HEAD); /* nothing stale for LeakSanitizer, or for a reuse after the wrap */
  h->death = death;
  atomic_store_explicit(&h->magic, DEAD_MAGIC + (uint32_t)k, memory_order_release);
  atomic_fetch_sub_explicit(&r->live, 1, memory_order_relaxed);
  chunk_unref(r, k, chunk_of(r, h), 1);
}

graph_handle_state graph_handle_state_of(graph_handle_kind k, const void *p, int *death) {
  const region *r = &regions[k];
  uintptr_t base = atomic_load_explicit(&r->base, memory_order_acquire), a = (uintptr_t)p;
  if (!base || a < base + SLOT_HEAD) return GRAPH_HANDLE_FOREIGN;
  size_t off = (size_t)(a - base - SLOT_HEAD); /* of the slot */
  if (off >= atomic_load_explicit(&r->high, memory_order_acquire) || (off & (r->slot - 1)) || (off & (r->chunk - 1)) == 0)
    return GRAPH_HANDLE_FOREIGN;
  const slot_head *h = (const slot_head *)(base + off);
  uint32_t m = atomic_load_explicit(&h->magic, memory_order_acquire);
  if (m == LIVE_MAGIC + (uint32_t)k) return GRAPH_HANDLE_LIVE;
  if (m == DEAD_MAGIC + (uint32_t)k) {
    if (death) *death = h->death;
    return GRAPH_HANDLE_DEAD;
  }
  /* 0: a slot of a chunk in use not handed out yet, or a returned chunk's */
  if (atomic_load_explicit(&chunk_of(r, h)->taken, memory_order_relaxed)) return GRAPH_HANDLE_FOREIGN;
  if (death) *death = GRAPH_HANDLE_DEATH_UNKNOWN;
  return GRAPH_HANDLE_DEAD;
}

size_t graph_handle_bytes(graph_handle_kind k) {
  return atomic_load_explicit(&regions[k].high, memory_order_relaxed);
}

size_t graph_handle_resident(graph_handle_kind k) {
  const region *r = &regions[k];
  size_t high = atomic_load_explicit(&r->high, memory_order_relaxed);
  size_t released = atomic_load_explicit(&r->released, memory_order_relaxed);
  return high > released ? high - released : 0;
}

long long graph_handle_live(graph_handle_kind k) {
  return atomic_load_explicit(&regions[k].live, memory_order_relaxed);
}

bool graph_handle_limit(graph_handle_kind k, size_t bytes) {
  region *r = &regions[k];
  pthread_mutex_lock(&r->lock);
  bool ok = !atomic_load_explicit(&r->base, memory_order_relaxed) && bytes >= MIN_REGION;
  if (ok) max_bytes[k] = bytes;
  pthread_mutex_unlock(&r->lock);
  return ok;
}
