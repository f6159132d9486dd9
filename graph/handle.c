/*
 * handle.c — type-stable slots for the public API's objects (handle.h).
 *
 * A kind's region is reserved at its first allocation: readable and
 * writable, not backed (MAP_NORESERVE) until touched, the largest size the
 * address space grants from max_bytes down. It is cut into chunks of
 * SLOTS_PER_CHUNK slots (at least a page); a chunk's first slot is its
 * header (how many of its slots are not yet freed, its state, its link in
 * the quarantine), the others hold one object each after a slot header
 * (magic, death code). A thread takes a whole chunk and hands its slots
 * out in order; the last free of a chunk's slots puts the chunk at the
 * tail of the kind's quarantine, a FIFO; a chunk is taken from its head
 * again only while more than `quarantine[kind]` chunks wait behind it.
 * The memory is never returned: returning it and touching fresh pages
 * costs a page fault per page (about 12 us on the CI machines' VMs, more
 * than recording an op), so the quarantine bounds it instead; fresh
 * memory is populated POPULATE_BYTES at a time (MADV_POPULATE_WRITE).
 */
#include "handle.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
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
/* Fresh memory is populated this much at a time: one call instead of a
 * page fault per page (12 us each on the CI VMs, 1.2 us per page so). */
#define POPULATE_BYTES ((size_t)256 << 10)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels say EINVAL and pages fault in */
#endif
#define NO_CHUNK SIZE_MAX

typedef struct slot_head {
  _Atomic uint32_t magic; /* LIVE_MAGIC + kind, DEAD_MAGIC + kind, or 0 (never used) */
  int32_t death;
  uint64_t pad;
} slot_head;

typedef struct chunk_head {
  atomic_int unfreed; /* slots not yet freed (handed out or still to be) */
  size_t next_dead;   /* the next chunk in the quarantine (offset), or NO_CHUNK */
} chunk_head;

_Static_assert(sizeof(slot_head) == SLOT_HEAD, "slot header size");

#define LIVE_MAGIC 0x4b4c5600u
#define DEAD_MAGIC 0x4b445600u

typedef struct region {
  pthread_mutex_t lock;
  _Atomic uintptr_t base; /* 0 until reserved; published after slot/chunk */
  size_t bytes, slot, chunk; /* slot and chunk: powers of two */
  size_t next;             /* the next chunk never handed out (under lock) */
  size_t populated;        /* bytes from base populated (under lock) */
  _Atomic size_t high;     /* offsets below it have been handed out */
  size_t dead_head, dead_tail; /* the quarantine: dead chunks, oldest first */
  long long n_dead;
  atomic_llong live;
} region;

/* The most address space a kind may use: live objects and the quarantine
 * fit in far less. */
static const size_t max_bytes[GRAPH_HANDLE_KINDS] = {
    [GRAPH_HANDLE_TENSOR] = (size_t)1 << 40, [GRAPH_HANDLE_STORAGE] = (size_t)1 << 38,
    [GRAPH_HANDLE_OPTIMIZER] = (size_t)1 << 32, [GRAPH_HANDLE_ONNX_MODEL] = (size_t)1 << 32};

/* Dead chunks that wait before one is reused (handle.h's window): 2 MiB of
 * tensor slots (256 chunks of 15 tensors in 512-byte slots) and 1 MiB of
 * storages (256 of 63 in 64-byte slots); the other kinds are few. The
 * window costs fresh memory while it fills: recording an op from Python
 * took 1.6 us over the first 20,000 ops with 256 tensor chunks, 2.8 us
 * with 512 and 3-4 us with 1,024 (bench/python_record.py, 1.5 us before
 * the slots). */
const long long graph_handle_quarantine[GRAPH_HANDLE_KINDS] = {
    [GRAPH_HANDLE_TENSOR] = 256, [GRAPH_HANDLE_STORAGE] = 256, [GRAPH_HANDLE_OPTIMIZER] = 16,
    [GRAPH_HANDLE_ONNX_MODEL] = 16};

#define REGION_INIT {.lock = PTHREAD_MUTEX_INITIALIZER, .dead_head = NO_CHUNK, .dead_tail = NO_CHUNK}
static region regions[GRAPH_HANDLE_KINDS] = {REGION_INIT, REGION_INIT, REGION_INIT, REGION_INIT};

/* each thread's chunk per kind: slots [next, end) are still to hand out */
typedef struct tcache {
  char *next, *end;
} tcache;
static _Thread_local tcache caches[GRAPH_HANDLE_KINDS];

static chunk_head *chunk_of(const region *r, const void *p) {
  uintptr_t base = atomic_load_explicit(&r->base, memory_order_relaxed);
  size_t off = (size_t)((uintptr_t)p - base);
  return (chunk_head *)(base + (off & ~(r->chunk - 1)));
}

static bool reserve(region *r, graph_handle_kind k, size_t size) {
  size_t slot = 64;
  while (slot < size + SLOT_HEAD) slot <<= 1;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t chunk = slot * SLOTS_PER_CHUNK > page ? slot * SLOTS_PER_CHUNK : page;
  for (size_t bytes = max_bytes[k]; bytes >= MIN_REGION; bytes >>= 1) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) continue;
    r->bytes = bytes - bytes % chunk;
    r->slot = slot;
    r->chunk = chunk;
    atomic_store_explicit(&r->base, (uintptr_t)p, memory_order_release);
    return true;
  }
  return false;
}

/* The offset of a chunk no one uses: the oldest dead one once enough wait
 * behind it, else the next one never handed out. Under r->lock. */
static bool next_chunk(region *r, graph_handle_kind k, size_t *off) {
  char *base = (char *)atomic_load_explicit(&r->base, memory_order_relaxed);
  if (r->n_dead > graph_handle_quarantine[k]) {
    *off = r->dead_head;
    r->dead_head = ((chunk_head *)(base + *off))->next_dead;
    if (r->dead_head == NO_CHUNK) r->dead_tail = NO_CHUNK;
    r->n_dead--;
    return true;
  }
  if (r->next + r->chunk > r->bytes) return false;
  if (r->next + r->chunk > r->populated) {
    size_t n = POPULATE_BYTES > r->chunk ? POPULATE_BYTES : r->chunk;
    if (n > r->bytes - r->next) n = r->bytes - r->next;
    (void)madvise(base + r->next, n, MADV_POPULATE_WRITE); /* a hint: pages fault in without it */
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
  ok = ok && size + SLOT_HEAD <= r->slot && next_chunk(r, k, &off);
  if (ok) {
    char *base = (char *)atomic_load_explicit(&r->base, memory_order_relaxed);
    chunk_head *ch = (chunk_head *)(base + off);
    atomic_store_explicit(&ch->unfreed, (int)(r->chunk / r->slot) - 1, memory_order_relaxed);
    c->next = base + off + r->slot;
    c->end = base + off + r->chunk;
    lsan_scan(ch, r->chunk, true);
  }
  pthread_mutex_unlock(&r->lock);
  return ok;
}

static void chunk_died(region *r, chunk_head *ch) {
  pthread_mutex_lock(&r->lock);
  lsan_scan(ch, r->chunk, false);
  char *base = (char *)atomic_load_explicit(&r->base, memory_order_relaxed);
  size_t off = (size_t)((char *)ch - base);
  ch->next_dead = NO_CHUNK;
  if (r->dead_tail == NO_CHUNK) r->dead_head = off;
  else ((chunk_head *)(base + r->dead_tail))->next_dead = off;
  r->dead_tail = off;
  r->n_dead++;
  pthread_mutex_unlock(&r->lock);
}

static void chunk_unref(region *r, chunk_head *ch, int n) {
  if (atomic_fetch_sub_explicit(&ch->unfreed, n, memory_order_acq_rel) == n) chunk_died(r, ch);
}

/* Ends this thread's chunk early: its slots not handed out count as freed. */
static void drop_rest(region *r, tcache *c) {
  int n = (int)((size_t)(c->end - c->next) / r->slot);
  chunk_head *ch = chunk_of(r, c->next);
  c->next = c->end = NULL;
  chunk_unref(r, ch, n);
}

/* A thread that ends gives the rest of its chunks back, so they can die. */
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static void thread_exit(void *unused) {
  (void)unused;
  for (int k = 0; k < GRAPH_HANDLE_KINDS; k++)
    if (caches[k].next != caches[k].end) drop_rest(&regions[k], &caches[k]);
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
  memset(p, 0, r->slot - SLOT_HEAD); /* zero for its next object; nothing stale for LeakSanitizer */
  h->death = death;
  atomic_store_explicit(&h->magic, DEAD_MAGIC + (uint32_t)k, memory_order_release);
  atomic_fetch_sub_explicit(&r->live, 1, memory_order_relaxed);
  chunk_unref(r, chunk_of(r, h), 1);
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
  return GRAPH_HANDLE_FOREIGN; /* a slot not handed out yet */
}

size_t graph_handle_bytes(graph_handle_kind k) {
  return atomic_load_explicit(&regions[k].high, memory_order_relaxed);
}

long long graph_handle_live(graph_handle_kind k) {
  return atomic_load_explicit(&regions[k].live, memory_order_relaxed);
}
