/*
 * cuda_emu_run.c — runs one launch of a cuda-emu kernel on the calling OS
 * thread with the launch shape of the real device (cuda_launch_rule_shape),
 * so blockIdx/threadIdx/blockDim/gridDim, barriers and warp shuffles
 * behave as on a GPU.
 *
 * Kernels without block cooperation (GRID_STRIDE, GRID_STRIDE_VEC,
 * ONE_THREAD) run thread after thread as plain calls: they never wait
 * for each other. A
 * cooperative kernel (BLOCK_PER_INDEX, ONE_BLOCK) runs block after block;
 * each thread of the block is a fiber with its own stack, and a scheduler
 * on the OS thread's own stack resumes, in thread order, every fiber that
 * can run, until each has reached a barrier, a shuffle or its end (a
 * fiber that stops switches straight to the next runnable one):
 *  - __syncthreads(): released when every thread of the block is there;
 *  - a warp shuffle: each lane writes its value into the warp's exchange
 *    slot and waits; when all lanes of the warp are there they resume and
 *    read the source lane's slot. Slots are double-buffered by the lane's
 *    shuffle count: a lane can run at most one shuffle ahead of the
 *    others, so the slot it writes next is one nobody still reads;
 *  - when nothing can be released but some threads still wait (a barrier
 *    or shuffle not reached by all: a deadlock on a GPU), the launch stops
 *    the process with a message saying so, rather than hang.
 * `__shared__` variables are thread_local in the host build: the blocks of
 * one OS thread run one at a time, so that is per-block storage.
 *
 * Fibers switch with a few instructions of x86-64 assembly (callee-saved
 * registers and the stack pointer; no signal mask, unlike swapcontext);
 * other machines use ucontext. Stacks (64 KiB each, under a guard page)
 * are mapped once per OS thread, grown to the largest block seen, reused
 * by every launch and unmapped when the thread exits.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_emu_run.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

enum { STACK = 64 * 1024, GUARD = 4096, MAX_BLOCK = 1024 };
enum { F_READY, F_SYNC, F_SHFL, F_DONE };

typedef struct fiber {
#if defined(__x86_64__)
  void *sp; /* saved stack pointer while switched out */
#else
  ucontext_t uc;
#endif
  int state;
  unsigned tid, shuffles;
} fiber;

/* The block running on this OS thread. */
typedef struct block_run {
  fiber *f;
  unsigned n, b, grid;
  cuda_emu_thread_fn fn;
  void *ctx;
  fiber *cur;
#if defined(__x86_64__)
  void *sched_sp;
#else
  ucontext_t sched;
#endif
  unsigned long long slot[2][MAX_BLOCK];
} block_run;

/* This OS thread's fibers and stacks (cap of each). */
typedef struct fiber_pool {
  char *stacks;
  fiber *f;
  unsigned cap;
  block_run run;
} fiber_pool;

static _Thread_local fiber_pool *pool;
static _Atomic int64_t coop_launches;
static _Thread_local block_run *running;
static pthread_key_t pool_key;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static void pool_release(void *p) {
  fiber_pool *fp = p;
  if (fp->stacks) munmap(fp->stacks, (size_t)fp->cap * (STACK + GUARD));
  free(fp->f);
  free(fp);
}

static void pool_key_init(void) { pthread_key_create(&pool_key, pool_release); }

static _Noreturn void misuse(const char *what) {
  fprintf(stderr, "kiln: cuda-emu: %s\n", what);
  abort();
}

/* The pool with room for n fibers (n <= MAX_BLOCK), or NULL. */
static fiber_pool *pool_for(unsigned n) {
  if (!pool) {
    pthread_once(&pool_once, pool_key_init);
    pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pthread_setspecific(pool_key, pool);
  }
  if (pool->cap >= n) return pool;
  size_t one = STACK + GUARD, bytes = (size_t)n * one;
  char *s = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  fiber *f = calloc(n, sizeof *f);
  if (s == MAP_FAILED || !f) {
    if (s != MAP_FAILED) munmap(s, bytes);
    free(f);
    return NULL;
  }
  for (unsigned i = 0; i < n; i++) mprotect(s + i * one, GUARD, PROT_NONE); /* overflow faults */
  if (pool->stacks) munmap(pool->stacks, (size_t)pool->cap * one);
  free(pool->f);
  pool->stacks = s;
  pool->f = f;
  pool->cap = n;
  return pool;
}

/* ------------------------------------------------------------ switching */

#if defined(__x86_64__)
/* cuda_emu_switch(save, to): saves the callee-saved registers on the
 * current stack and the stack pointer in *save, then resumes the stack
 * `to` (as saved by an earlier switch, or prepared by fiber_prepare).
 * cuda_emu_trampoline: a new fiber's first return lands here, with the
 * fiber in r12. */
void cuda_emu_switch(void **save, void *to) __attribute__((visibility("hidden")));
void cuda_emu_fiber_main(fiber *f) __attribute__((visibility("hidden"), noreturn));
__asm__(".text\n"
        ".p2align 4\n"
        ".globl cuda_emu_switch\n"
        ".hidden cuda_emu_switch\n"
        ".type cuda_emu_switch,@function\n"
        "cuda_emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size cuda_emu_switch, .-cuda_emu_switch\n"
        ".p2align 4\n"
        "cuda_emu_trampoline:\n"
        "  movq %r12, %rdi\n"
        "  call cuda_emu_fiber_main\n"
        "  ud2\n");
void cuda_emu_trampoline(void) __asm__("cuda_emu_trampoline");

/* Lays out a new fiber's stack so that the first switch to it pops
 * dummy registers (r12 = f) and returns into the trampoline with a
 * 16-byte aligned stack. */
static void fiber_prepare(fiber *f, char *stack_lo) {
  uintptr_t top = ((uintptr_t)stack_lo + STACK) & ~(uintptr_t)15;
  void **sp = (void **)(top - 8 - 6 * sizeof(void *));
  memset(sp, 0, 6 * sizeof(void *));
  sp[3] = f;                           /* r12 */
  sp[6] = (void *)cuda_emu_trampoline; /* return address */
  f->sp = sp;
}

static void to_fiber(block_run *r, fiber *f) { cuda_emu_switch(&r->sched_sp, f->sp); }
static void to_scheduler(block_run *r, fiber *f) { cuda_emu_switch(&f->sp, r->sched_sp); }
static void fiber_to_fiber(fiber *from, fiber *to) { cuda_emu_switch(&from->sp, to->sp); }
#else
void cuda_emu_fiber_main(fiber *f) __attribute__((noreturn));
static void fiber_entry(unsigned hi, unsigned lo) {
  cuda_emu_fiber_main((fiber *)(((uintptr_t)hi << 32) | lo));
}
static void fiber_prepare(fiber *f, char *stack_lo) {
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = stack_lo;
  f->uc.uc_stack.ss_size = STACK;
  f->uc.uc_link = NULL;
  uintptr_t p = (uintptr_t)f;
  makecontext(&f->uc, (void (*)(void))fiber_entry, 2, (unsigned)(p >> 32), (unsigned)p);
}
static void to_fiber(block_run *r, fiber *f) { swapcontext(&r->sched, &f->uc); }
static void to_scheduler(block_run *r, fiber *f) { swapcontext(&f->uc, &r->sched); }
static void fiber_to_fiber(fiber *from, fiber *to) { swapcontext(&from->uc, &to->uc); }
#endif

/* Fiber f has stopped (waiting or done): the next runnable fiber of this
 * pass in thread order runs, directly (one switch instead of two through
 * the scheduler), else the scheduler does. */
static void yield(block_run *r, fiber *f) {
  for (unsigned t = f->tid + 1; t < r->n; t++)
    if (r->f[t].state == F_READY) {
      r->cur = &r->f[t];
      fiber_to_fiber(f, r->cur);
      return;
    }
  to_scheduler(r, f);
}

/* A fiber's life: its thread of the kernel, then away for good. */
void cuda_emu_fiber_main(fiber *f) {
  block_run *r = running;
  r->fn(r->ctx, r->b, f->tid, r->grid, r->n);
  f->state = F_DONE;
  yield(r, f);
  misuse("a finished fiber was resumed");
}

/* ----------------------------------------------------------- scheduler */

/* Lets waiting threads go: whole warps at a shuffle, then the block at a
 * barrier. False when nothing can go. */
static bool release(block_run *r) {
  bool any = false;
  for (unsigned w = 0; w < r->n; w += 32) {
    unsigned lanes = r->n - w < 32 ? r->n - w : 32, at = 0;
    for (unsigned l = 0; l < lanes; l++) at += r->f[w + l].state == F_SHFL;
    if (at != lanes) continue;
    for (unsigned l = 0; l < lanes; l++) r->f[w + l].state = F_READY;
    any = true;
  }
  if (any) return true;
  unsigned at = 0;
  for (unsigned t = 0; t < r->n; t++) at += r->f[t].state == F_SYNC;
  if (at != r->n) return false;
  for (unsigned t = 0; t < r->n; t++) r->f[t].state = F_READY;
  return true;
}

/* Stops the process: threads of the block wait for others that will never
 * come (some finished, or wait elsewhere). */
static _Noreturn void deadlock(const block_run *r) {
  unsigned n[4] = {0};
  for (unsigned t = 0; t < r->n; t++) n[r->f[t].state]++;
  char msg[256];
  snprintf(msg, sizeof msg,
           "block %u of %u (%u threads): %u at __syncthreads, %u at a warp shuffle, %u finished: a barrier or "
           "shuffle that not every thread reaches (a deadlock on a GPU)",
           r->b, r->grid, r->n, n[F_SYNC], n[F_SHFL], n[F_DONE]);
  misuse(msg);
}

static void run_block(block_run *r) {
  for (unsigned t = 0; t < r->n; t++) {
    fiber *f = &r->f[t];
    f->state = F_READY;
    f->tid = t;
    f->shuffles = 0;
    fiber_prepare(f, pool->stacks + (size_t)t * (STACK + GUARD) + GUARD);
  }
  for (;;) {
    for (unsigned t = 0; t < r->n; t++)
      if (r->f[t].state == F_READY) {
        r->cur = &r->f[t];
        to_fiber(r, r->cur);
      }
    if (release(r)) continue;
    unsigned done = 0;
    for (unsigned t = 0; t < r->n; t++) done += r->f[t].state == F_DONE;
    if (done == r->n) return;
    deadlock(r);
  }
}

static void emu_launch(int kind, long long extent, unsigned block, long long start, long long end,
                       cuda_emu_thread_fn fn, void *ctx) {
  cuda_launch_rule rule = {.kind = (cuda_launch_kind)kind, .extent = extent, .block = block};
  cuda_launch_shape s;
  cuda_launch_rule_shape(&rule, start, end, &s);
  if (kind != CUDA_LAUNCH_BLOCK_PER_INDEX && kind != CUDA_LAUNCH_ONE_BLOCK) {
    for (unsigned b = 0; b < s.grid; b++)
      for (unsigned t = 0; t < s.block; t++) fn(ctx, b, t, s.grid, s.block);
    return;
  }
  coop_launches++;
  if (s.block > MAX_BLOCK || s.block % 32 != 0) misuse("a cooperative block must be a multiple of 32 threads, at most 1024");
  if (running) misuse("a launch inside a running block");
  if (!pool_for(s.block)) misuse("cannot map the fibers' stacks");
  block_run *r = &pool->run;
  r->f = pool->f;
  r->n = s.block;
  r->grid = s.grid;
  r->fn = fn;
  r->ctx = ctx;
  running = r;
  for (unsigned b = 0; b < s.grid; b++) {
    r->b = b;
    run_block(r);
  }
  running = NULL;
}

/* The running fiber, or a stop when there is none (a barrier or shuffle in
 * a kernel launched without cooperation). */
static fiber *current(const char *what) {
  if (!running || !running->cur) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s in a kernel launched without block cooperation", what);
    misuse(msg);
  }
  return running->cur;
}

static void emu_sync(void) {
  fiber *f = current("__syncthreads()");
  f->state = F_SYNC;
  yield(running, f);
}

static unsigned long long emu_shfl(unsigned mask, unsigned long long bits, unsigned src_lane) {
  fiber *f = current("a warp shuffle");
  block_run *r = running;
  unsigned base = f->tid & ~31u, lanes = r->n - base < 32 ? r->n - base : 32;
  unsigned want = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  if ((mask & want) != want) misuse("a warp shuffle whose mask leaves out lanes of the warp");
  unsigned g = f->shuffles++ & 1;
  r->slot[g][f->tid] = bits;
  f->state = F_SHFL;
  yield(r, f);
  unsigned src = base + (src_lane & 31u);
  return r->slot[g][src < r->n ? src : f->tid];
}

const cuda_emu_api rt_cuda_emu_launcher = {emu_launch, emu_sync, emu_shfl};

int64_t rt_cuda_emu_cooperative_launches(void) { return coop_launches; }
