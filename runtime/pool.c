/*
 * pool.c — the CPU thread pool behind rt_pool_run (see pool.h).
 *
 * Threads: the caller runs chunk 0; worker i (1 ≤ i < threads) runs chunk
 * i. Workers start lazily at the first parallel run, are stopped and
 * joined when the thread count changes and at process exit (atexit), so
 * sanitizers see no leaked threads. They block all signals.
 *
 * Publishing a job: the caller, holding run_lock (one parallel run at a
 * time, also held while resizing), writes `job`, sets `pending` to the
 * number of worker chunks, then bumps `gen` under `lock` and broadcasts
 * `wake`. `gen` packs a sequence number (high bits) and the job's chunk
 * count (low 16 bits), so a worker learns from one atomic load whether it
 * has a chunk; only workers with a chunk read `job`, and the caller waits
 * for exactly those (`pending` → 0) before it returns, so `job` is never
 * rewritten while read. Memory order: gen release/acquire publishes job;
 * the pending decrement (acq_rel) publishes each worker's kernel writes.
 *
 * Waiting: idle workers spin on `gen` for SPIN_NS, then sleep on `wake`
 * (gen is re-checked under `lock`, so no wake-up is lost); the caller
 * spins on `pending` for SPIN_NS, then sleeps on `done`, which the worker
 * that finishes last signals. Spins pause PAUSE_SPINS times, then
 * sched_yield, so a loaded machine is not made worse by spinning. The
 * reasoning: a run that follows the last one closely (back to back, or
 * after kiln's own bookkeeping between kernels) finds its workers still
 * spinning and costs a fraction of a wake-up from sleep; on a saturated
 * machine the yield keeps spinning threads from taking the CPU the others
 * need. The per-kernel overhead this feeds into is bench/'s W8run row
 * (bench/README.md); time an empty kernel on 2 threads there before
 * changing SPIN_NS or PAUSE_SPINS.
 *
 * Calls that leave the cores to others (MPI collectives: the library's
 * progress and peer ranks) run under rt_pool_hold: it takes run_lock, so
 * such a call and a parallel kernel never run at once, and sets `held`,
 * which sends spinning workers to sleep at once; the next job wakes
 * them. OpenBLAS does not: it runs single-threaded on the pool's own
 * threads (runtime/blas.c).
 *
 * Threshold: RT_POOL_MIN_WORK = 32 K elements touched. Through kiln's JIT
 * (y = x*x + x, F32) two threads start to win at about that size, and win
 * more the larger the kernel; below it the kernel is too short for the
 * gain to pay for a wake-up of sleeping workers. Time y = x*x + x on 1
 * and 2 threads with bench/ (bench/README.md) before moving it.
 *
 * Placement: a worker that finds itself on the CPU the caller published
 * the job from (sched_getcpu) binds itself to the CPUs the process was
 * allowed when the workers started, minus that one, before it runs its
 * chunk; the chunks then run side by side instead of taking turns on one
 * CPU. Schedulers that place a woken thread on its waker's CPU do that to
 * a sleeping worker: on the 2-vCPU VMs Kiln is benchmarked on, both
 * chunks of a 16 MiB row sum ran on one vCPU in every run, and a kernel
 * took as long on 2 threads as on 1 (docs/internals.md, "Threads").
 * A worker never binds itself when that leaves no CPU (a process
 * restricted to one) or when the pool has more threads than the process
 * has CPUs (bound workers could not spread over the caller's CPU then),
 * and rebinds when the caller later moves onto its CPU.
 *
 * fork: a child forgets the parent's workers (they do not exist there)
 * and starts its own on its first parallel run.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"
#include "rt_internal.h"

#define SPIN_NS 50000          /* spin this long before sleeping (ns) */
#define PAUSE_SPINS 200        /* pause-hint spins before yielding */
#define CHUNK_BITS 16          /* low bits of gen: chunk count of the job */
#define CHUNK_MASK ((UINT64_C(1) << CHUNK_BITS) - 1)

typedef struct pool_job {
  llvm_kernel_fn fn;
  void *const *bufs;
  int64_t extent;
  int n_chunks;
  rt_pool_span *spans; /* [n_chunks] timed when not NULL (profiling) */
  int caller_cpu;      /* where the caller published it; -1: unknown, or no worker may move */
} pool_job;

typedef struct pool_state {
  pthread_mutex_t run_lock; /* one parallel run or resize at a time */
  pthread_mutex_t lock;     /* with wake/done: sleeping and waking */
  pthread_cond_t wake, done;
  pthread_t *workers;       /* [n_workers] */
  int n_workers;            /* running workers, chunk ids 1..n_workers */
  bool started;             /* start attempted for this thread count */
  bool closed;              /* after exit: run everything inline */
  uint64_t spawn_gen;       /* gen when the workers started */
  cpu_set_t allowed;        /* the caller's CPUs when the workers started */
  bool can_move;            /* allowed has two CPUs or more, and one for each thread */
  pool_job job;             /* under run_lock; read by workers with a chunk */
  atomic_int threads;       /* requested count; 0 until initialised */
  atomic_uint_fast64_t gen; /* seq << CHUNK_BITS | n_chunks */
  atomic_int pending;       /* worker chunks of the job not finished */
  atomic_bool quit;         /* set with a gen bump: workers exit */
  atomic_bool held;         /* rt_pool_hold: idle workers sleep, not spin */
} pool_state;

static pool_state P = {.run_lock = PTHREAD_MUTEX_INITIALIZER,
                       .lock = PTHREAD_MUTEX_INITIALIZER,
                       .wake = PTHREAD_COND_INITIALIZER,
                       .done = PTHREAD_COND_INITIALIZER};
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
/* True on workers, and on the caller while it runs its chunk: a kernel
 * that calls back into the pool runs inline instead of deadlocking. */
static _Thread_local bool in_pool;

/* ------------------------------------------------------------ helpers */


/* One step of a spin wait: PAUSE_SPINS CPU pause hints, then
 * sched_yield, so that on a loaded machine a spinning thread hands its
 * CPU to the thread it waits for instead of holding it for SPIN_NS. */
static void backoff(unsigned i) {
  if (i > PAUSE_SPINS) {
    sched_yield();
    return;
  }
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Chunk c of n over [0, extent): the first extent % n chunks get one
 * extra item. Depends only on (extent, n, c): deterministic. */
static void chunk_bounds(int64_t extent, int n, int c, int64_t *start, int64_t *end) {
  int64_t base = extent / n, rem = extent % n;
  *start = c * base + (c < rem ? c : rem);
  *end = *start + base + (c < rem ? 1 : 0);
}

/* Threads worth using: 1 below RT_POOL_MIN_WORK, else one per
 * RT_POOL_MIN_WORK / 2 of work, at most `threads` and `extent`. */
static int plan_threads(int64_t extent, int64_t cost_per_item, int threads) {
  if (extent < 2 || threads < 2) return 1;
  int64_t cost = cost_per_item > 1 ? cost_per_item : 1;
  int64_t work = cost > INT64_MAX / extent ? INT64_MAX : extent * cost;
  if (work < RT_POOL_MIN_WORK) return 1;
  int64_t t = work / (RT_POOL_MIN_WORK / 2);
  if (t > threads) t = threads;
  if (t > extent) t = extent;
  return (int)t;
}

/* ------------------------------------------------------------ workers */

/* Worker side of Placement (top of file): off the caller's CPU. */
static void leave_caller_cpu(void) {
  int caller = P.job.caller_cpu;
  if (!P.can_move || caller < 0 || caller >= CPU_SETSIZE || sched_getcpu() != caller) return;
  cpu_set_t set = P.allowed;
  CPU_CLR(caller, &set);
  if (CPU_COUNT(&set) > 0) pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void run_chunk(int c) {
  int64_t start, end;
  if (c > 0) leave_caller_cpu();
  chunk_bounds(P.job.extent, P.job.n_chunks, c, &start, &end);
  rt_pool_span *span = P.job.spans ? &P.job.spans[c] : NULL;
  if (span) span->start_ns = rt_now_ns();
  P.job.fn(P.job.bufs, start, end);
  if (span) {
    span->end_ns = rt_now_ns();
    span->tid = rt_thread_id();
  }
}

/* Next gen after `seen`: spin for SPIN_NS, then sleep on `wake`. */
static uint64_t wait_for_job(uint64_t seen) {
  int64_t t0 = 0;
  for (unsigned i = 1;; i++) {
    uint64_t g = atomic_load_explicit(&P.gen, memory_order_acquire);
    if (g != seen) return g;
    if (atomic_load_explicit(&P.held, memory_order_relaxed)) break; /* a library call needs the cores */
    if (i % 64 == 0) {
      int64_t t = rt_now_ns();
      if (!t0) t0 = t;
      else if (t - t0 > SPIN_NS) break;
    }
    backoff(i);
  }
  uint64_t g;
  pthread_mutex_lock(&P.lock);
  while ((g = atomic_load_explicit(&P.gen, memory_order_acquire)) == seen) pthread_cond_wait(&P.wake, &P.lock);
  pthread_mutex_unlock(&P.lock);
  return g;
}

static void finish_chunk(void) {
  if (atomic_fetch_sub_explicit(&P.pending, 1, memory_order_acq_rel) != 1) return;
  pthread_mutex_lock(&P.lock);
  pthread_cond_signal(&P.done);
  pthread_mutex_unlock(&P.lock);
}

static void *worker_main(void *arg) {
  int id = (int)(intptr_t)arg;
  uint64_t seen = P.spawn_gen; /* written before pthread_create */
  in_pool = true;
  rt_thread_set_name("pool worker %d", id);
  for (;;) {
    seen = wait_for_job(seen);
    if (atomic_load_explicit(&P.quit, memory_order_acquire)) return NULL;
    if (id < (int)(seen & CHUNK_MASK)) {
      run_chunk(id);
      finish_chunk();
    }
  }
}

/* Bumps the sequence number, sets the chunk count, wakes sleepers. */
static void publish(int n_chunks) {
  pthread_mutex_lock(&P.lock);
  uint64_t seq = (atomic_load_explicit(&P.gen, memory_order_relaxed) >> CHUNK_BITS) + 1;
  atomic_store_explicit(&P.gen, seq << CHUNK_BITS | (uint64_t)n_chunks, memory_order_release);
  pthread_cond_broadcast(&P.wake);
  pthread_mutex_unlock(&P.lock);
}

/* ------------------------------------------------ start/stop (run_lock) */

static bool spawn(int id) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old); /* inherited by the worker */
  int rc = pthread_create(&P.workers[id - 1], NULL, worker_main, (void *)(intptr_t)id);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return rc == 0;
}

/* Starts up to n workers; fewer (even none) if creation fails. */
static void start_workers(int n) {
  P.started = true;
  P.n_workers = 0;
  P.workers = n > 0 ? malloc(sizeof *P.workers * (size_t)n) : NULL;
  if (!P.workers) return;
  P.spawn_gen = atomic_load_explicit(&P.gen, memory_order_relaxed);
  P.can_move = sched_getaffinity(0, sizeof P.allowed, &P.allowed) == 0 && CPU_COUNT(&P.allowed) > 1 &&
               n + 1 <= CPU_COUNT(&P.allowed);
  atomic_store(&P.quit, false);
  while (P.n_workers < n && spawn(P.n_workers + 1)) P.n_workers++;
}

static void stop_workers(void) {
  if (P.n_workers > 0) {
    atomic_store(&P.quit, true);
    publish(0);
    for (int i = 0; i < P.n_workers; i++) pthread_join(P.workers[i], NULL);
  }
  free(P.workers);
  P.workers = NULL;
  P.n_workers = 0;
  P.started = false;
}

static void shutdown_at_exit(void) {
  pthread_mutex_lock(&P.run_lock);
  stop_workers();
  P.closed = true;
  pthread_mutex_unlock(&P.run_lock);
}

/* fork: hold run_lock across it so no job is in flight; the child then
 * drops the parent's workers and resets the wait objects. */
static void fork_prepare(void) { pthread_mutex_lock(&P.run_lock); }
static void fork_parent(void) { pthread_mutex_unlock(&P.run_lock); }
static void fork_child(void) {
  free(P.workers);
  P.workers = NULL;
  P.n_workers = 0;
  P.started = false;
  P.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
  P.wake = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
  P.done = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
  pthread_mutex_unlock(&P.run_lock);
}

/* KILN_NUM_THREADS as a positive integer (surrounding blanks allowed), or
 * 0 when it is unset or anything else. */
static long env_threads(const char *e) {
  if (!e) return 0;
  char *end;
  errno = 0;
  long n = strtol(e, &end, 10);
  while (*end == ' ' || *end == '\t' || *end == '\n') end++;
  return end == e || *end || errno || n < 1 ? 0 : n;
}

static void pool_init(void) {
  const char *e = getenv("KILN_NUM_THREADS");
  long n = env_threads(e);
  if (n < 1) n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  if (n > RT_POOL_MAX_THREADS) n = RT_POOL_MAX_THREADS;
  /* the library prints nothing else unless KILN_DEBUG asks: a setting the
   * user made that is ignored is worth one line */
  if (e && env_threads(e) < 1)
    fprintf(stderr, "kiln: KILN_NUM_THREADS=%s is not a positive integer; using %ld threads\n", e, n);
  atomic_store(&P.threads, (int)n);
  atexit(shutdown_at_exit); /* if it fails, workers just outlive main */
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* ------------------------------------------------------------ public */

int rt_pool_threads(void) {
  pthread_once(&init_once, pool_init);
  return atomic_load_explicit(&P.threads, memory_order_relaxed);
}

void rt_pool_hold(void) {
  pthread_once(&init_once, pool_init);
  pthread_mutex_lock(&P.run_lock);
  atomic_store_explicit(&P.held, true, memory_order_relaxed);
}

void rt_pool_release(void) {
  atomic_store_explicit(&P.held, false, memory_order_relaxed);
  pthread_mutex_unlock(&P.run_lock);
}

void rt_pool_set_threads(int n) {
  if (n < 1) return;
  if (n > RT_POOL_MAX_THREADS) n = RT_POOL_MAX_THREADS;
  pthread_once(&init_once, pool_init);
  pthread_mutex_lock(&P.run_lock);
  if (n != atomic_load(&P.threads)) {
    stop_workers();
    atomic_store(&P.threads, n);
  }
  pthread_mutex_unlock(&P.run_lock);
}

/* Caller side of a parallel run over n chunks (n - 1 ≤ n_workers). */
static void run_parallel(llvm_kernel_fn fn, void *const *bufs, int64_t extent, int n, rt_pool_span *spans) {
  P.job = (pool_job){.fn = fn, .bufs = bufs, .extent = extent, .n_chunks = n, .spans = spans,
                     .caller_cpu = P.can_move ? sched_getcpu() : -1};
  atomic_store_explicit(&P.pending, n - 1, memory_order_relaxed);
  publish(n);
  in_pool = true;
  run_chunk(0);
  in_pool = false;
  int64_t t0 = rt_now_ns();
  for (unsigned i = 1; atomic_load_explicit(&P.pending, memory_order_acquire) > 0; i++) {
    if (i % 64 == 0 && rt_now_ns() - t0 > SPIN_NS) break;
    backoff(i);
  }
  pthread_mutex_lock(&P.lock);
  while (atomic_load_explicit(&P.pending, memory_order_acquire) > 0) pthread_cond_wait(&P.done, &P.lock);
  pthread_mutex_unlock(&P.lock);
}

int rt_pool_run_timed(llvm_kernel_fn fn, void *const *bufs, int64_t extent, int64_t cost_per_item,
                      rt_pool_span *spans, int *n_spans) {
  int n = in_pool ? 1 : plan_threads(extent, cost_per_item, rt_pool_threads());
  if (n_spans) *n_spans = 0;
  if (n > 1) {
    pthread_mutex_lock(&P.run_lock);
    if (!P.started && !P.closed) start_workers(atomic_load(&P.threads) - 1);
    if (n > P.n_workers + 1) n = P.n_workers + 1;
    if (n > 1) run_parallel(fn, bufs, extent, n, spans);
    pthread_mutex_unlock(&P.run_lock);
    if (n > 1) {
      if (n_spans && spans) *n_spans = n;
      return n;
    }
  }
  fn(bufs, 0, extent);
  return 1;
}

int rt_pool_run(llvm_kernel_fn fn, void *const *bufs, int64_t extent, int64_t cost_per_item) {
  return rt_pool_run_timed(fn, bufs, extent, cost_per_item, NULL, NULL);
}
