/*
 * extern.c — runs graph nodes of kind EXTERN: ops computed by a library
 * (OpenBLAS for MATMUL) or a plain C loop (ARGSORT, MODE:
 * runtime/sort_loops.c) instead of a generated kernel. The fusion pass
 * materializes their inputs; an input that is still pending here (an
 * inlined FULL or ARANGE source, a reshape copy the fuser left for the
 * GEMM to read through) is realized first, unless the generated GEMM
 * reads through it (gemm_pack.c). The output is a new contiguous buffer
 * of the node's sizes.
 *
 * Each extern op is one row: its host function and its profiler record.
 * MATMUL, ARGSORT and MODE are built in (`builtin` below); any other
 * EXTERN op runs only once a layer above registered its row
 * (rt_extern_register: the collectives do it from kiln_dist_init), and
 * forcing one before that is KILN_ERR_UNSUPPORTED. Registered rows are
 * written once, under a mutex, and published by an atomic flag, so a
 * force on another thread reads a whole row or none.
 *
 * MATMUL is the contraction of the backend that runs the node
 * (backend.h: OpenBLAS on the host for llvm and cuda-emu; cuBLAS on
 * device memory for cuda when it can run the product). Everything else
 * runs on the host whatever the node's device (rt_extern_on_host):
 * inputs on KILN_CUDA are read through host copies (never swapped into
 * the input nodes, which other threads may read), and a KILN_CUDA node's
 * result is uploaded (docs/cuda.md: also a MATMUL recorded for cuBLAS
 * that cuBLAS cannot run now).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "backend.h"
#include "device.h"
#include "pool.h"
#include "rt_internal.h"

/* Name, flops and bytes of a sort loop (ARGSORT, MODE): rows of len
 * elements along dim, about len * log2(len) comparisons each. */
static void describe_sort(const graph_node *n, bool on_device, kiln_kernel_record *r, char *name, size_t len) {
  const graph_view *v = &n->inputs[0].view;
  int64_t in = graph_view_numel(v), row = v->sizes[(int)graph_attr_scalar(n)], lg = 1;
  while (lg < 62 && (1LL << lg) < row) lg++;
  snprintf(name, len, "loop_%s_%lld", graph_ops[n->op].name, (long long)in);
  *r = (kiln_kernel_record){.name = name,
                            .backend = "loop",
                            .n_ops = 1,
                            .numel = in,
                            .bytes_read = in * graph_dtypes[n->inputs[0].node->dtype].size,
                            .bytes_written = n->numel * 8,
                            .flops = in * lg,
                            .run_ns = r->run_ns,
                            .cache_hit = true,
                            .threads = rt_sort_last_threads()};
}

/* Name, flops and bytes of a GEMM: cuBLAS, or on the host what
 * rt_matmul_host ran — the generated GEMM (gemm_MxNxK, gemm_f64_MxNxK;
 * backend "llvm") or OpenBLAS (blas_sgemm_MxNxK, blas_dgemm_...). */
static void describe_gemm(const graph_node *n, bool cublas, kiln_kernel_record *r, char *name, size_t len) {
  int nd = n->ndim, esz = graph_dtypes[n->dtype].size;
  int64_t m = n->sizes[nd - 2], nn = n->sizes[nd - 1], k = n->inputs[0].view.sizes[nd - 1];
  int64_t batches = nd > 2 ? n->numel / (m * nn > 0 ? m * nn : 1) : 1;
  if (m * nn == 0) batches = 0;
  bool jit = false;
  int threads = cublas ? 1 : rt_matmul_host_last(&jit);
  bool f64 = n->dtype == KILN_F64;
  if (jit)
    snprintf(name, len, "gemm_%s%lldx%lldx%lld", f64 ? "f64_" : "", (long long)m, (long long)nn, (long long)k);
  else
    snprintf(name, len, "%s_%cgemm_%lldx%lldx%lld", cublas ? "cublas" : "blas", f64 ? 'd' : 's', (long long)m,
             (long long)nn, (long long)k);
  r->name = name;
  r->backend = cublas ? "cublas" : jit ? "llvm" : "blas";
  r->n_ops = 1;
  r->numel = n->numel;
  r->flops = 2 * batches * m * nn * k;
  r->bytes_read = (graph_view_numel(&n->inputs[0].view) + graph_view_numel(&n->inputs[1].view)) * esz;
  r->bytes_written = n->numel * esz;
  r->compile_ns = jit ? rt_gemm_last_compile_ns() : 0; /* the micro-kernel, at its first use */
  r->load_ns = jit ? rt_gemm_last_load_ns() : 0;        /* or loaded from the disk cache then */
  r->cache_hit = r->compile_ns == 0;
  r->threads = threads;
}

/* A MATMUL the tiled GEMM kernel ran (cuda_gemm_run.c): cuda_gemm_MxNxK
 * (cuda_gemm_f64_...), the backend's name. */
static void describe_tiled(const graph_node *n, kiln_kernel_record *r, char *name, size_t len) {
  describe_gemm(n, true, r, name, len);
  int nd = n->ndim;
  snprintf(name, len, "cuda_gemm_%s%lldx%lldx%lld", n->dtype == KILN_F64 ? "f64_" : "", (long long)n->sizes[nd - 2],
           (long long)n->sizes[nd - 1], (long long)n->inputs[0].view.sizes[nd - 1]);
  r->backend = rt_backend_for(n)->name;
}

/* One extern op's row: `host` runs it on host memory (MATMUL's is NULL:
 * it runs through its backend's contraction entry), `describe` fills
 * its profiler record, `hold` runs it under rt_pool_hold (idle pool
 * workers sleep rather than spin meanwhile: MPI progress and peer ranks
 * share the cores). */
typedef struct extern_impl {
  rt_extern_fn host;
  rt_extern_describe_fn describe;
  bool hold;
} extern_impl;

/* The built-in rows. A new library call or host loop inside the runtime
 * is one row and its functions; the layers above register theirs. */
static const struct {
  graph_op op;
  extern_impl impl;
} builtin[] = {
    {GRAPH_OP_MATMUL, {NULL, describe_gemm, false}},
    {GRAPH_OP_ARGSORT, {rt_sort_argsort, describe_sort, false}},
    {GRAPH_OP_MODE, {rt_sort_mode, describe_sort, false}},
    {GRAPH_OP_ATTENTION, {rt_attention_forward, rt_attention_describe, false}},
    {GRAPH_OP_ATTENTION_BWD, {rt_attention_backward, rt_attention_describe, false}},
};

static pthread_mutex_t register_lock = PTHREAD_MUTEX_INITIALIZER;
static extern_impl registered[GRAPH_OP_COUNT]; /* written once under register_lock, before its flag */
static atomic_bool is_registered[GRAPH_OP_COUNT];

static const extern_impl *builtin_of(graph_op op) {
  for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++)
    if (builtin[i].op == op) return &builtin[i].impl;
  return NULL;
}

static const extern_impl *impl_of(graph_op op) {
  const extern_impl *x = builtin_of(op);
  if (x || (unsigned)op >= GRAPH_OP_COUNT) return x;
  return atomic_load_explicit(&is_registered[op], memory_order_acquire) ? &registered[op] : NULL;
}

int rt_extern_register(graph_op op, rt_extern_fn host, rt_extern_describe_fn describe, bool hold, char *err,
                       size_t errlen) {
  if ((unsigned)op >= GRAPH_OP_COUNT || graph_ops[op].kind != GRAPH_EXTERN || !host || !describe) {
    snprintf(err, errlen, "rt_extern_register: op %d is not an extern op, or a function is NULL", (int)op);
    return KILN_ERR_ARG;
  }
  if (builtin_of(op)) {
    snprintf(err, errlen, "rt_extern_register: %s is built into the runtime", graph_ops[op].name);
    return KILN_ERR_ARG;
  }
  pthread_mutex_lock(&register_lock);
  int st = KILN_OK;
  extern_impl *row = &registered[op];
  if (!atomic_load_explicit(&is_registered[op], memory_order_relaxed)) {
    *row = (extern_impl){host, describe, hold};
    atomic_store_explicit(&is_registered[op], true, memory_order_release);
  } else if (row->host != host || row->describe != describe || row->hold != hold) {
    snprintf(err, errlen, "rt_extern_register: %s already has another runner", graph_ops[op].name);
    st = KILN_ERR_ARG;
  }
  pthread_mutex_unlock(&register_lock);
  return st;
}

/* Host data of each input: its buffer, or a host copy of it (staged[i],
 * released by the caller) for a buffer on the device; for a MATMUL
 * operand the generated GEMM reads through a pending reshape copy
 * (gemm_pack.c), the buffer of the copy's input. No node is written:
 * inputs may be realized data other threads read too. */
static int host_inputs(const graph_node *n, const void **in, graph_buffer **staged, char *err, size_t errlen) {
  int st = KILN_OK;
  for (int i = 0; i < n->n_inputs && st == KILN_OK; i++) {
    const graph_node *x = n->inputs[i].node;
    const graph_buffer *b = x->buffer ? x->buffer : x->inputs[0].node->buffer;
    staged[i] = NULL;
    if (b->device != KILN_CPU) st = rt_buffer_copy_to(b, KILN_CPU, &staged[i], err, errlen);
    in[i] = staged[i] ? staged[i]->data : b->data;
  }
  return st;
}

/* Computes n with fn on the host into *out (a new host buffer). */
static int run_on_host(rt_extern_fn fn, bool hold, graph_node *n, graph_buffer **out, rt_extern_run *run, char *err,
                       size_t errlen) {
  int st = rt_buffer_alloc(KILN_CPU, n->numel * graph_dtypes[n->dtype].size, out, err, errlen);
  if (st != KILN_OK) return st;
  const void *in[GRAPH_MAX_INPUTS] = {0};
  graph_buffer *staged[GRAPH_MAX_INPUTS] = {0};
  st = host_inputs(n, in, staged, err, errlen);
  if (hold) rt_pool_hold(); /* the library's threads or peers get the cores: no parallel kernel meanwhile */
  run->t0 = rt_now_ns();
  if (st == KILN_OK) st = fn(n, in, *out, err, errlen);
  run->t1 = rt_now_ns();
  if (hold) rt_pool_release();
  for (int i = 0; i < n->n_inputs; i++) graph_buffer_release(staged[i]);
  return st;
}

int rt_extern_on_host(graph_node *n, rt_extern_fn fn, bool hold, graph_buffer **out, rt_extern_run *run, char *err,
                      size_t errlen) {
  run->on_device = false;
  graph_buffer *host = NULL;
  int st = run_on_host(fn, hold, n, &host, run, err, errlen);
  if (st == KILN_OK && n->device == KILN_CUDA) {
    graph_buffer *dev = NULL;
    st = rt_buffer_copy_to(host, KILN_CUDA, &dev, err, errlen);
    graph_buffer_release(host);
    host = dev;
  }
  *out = host;
  return st;
}

int rt_run_extern(graph_node *n, char *err, size_t errlen) {
  for (int i = 0; i < n->n_inputs; i++) {
    graph_node *in = n->inputs[i].node;
    bool through = n->op == GRAPH_OP_MATMUL && rt_gemm_reads_through(n, i); /* implicit GEMM: gemm_pack.c */
    int st = in->buffer || through ? KILN_OK : rt_realize(&in, 1, err, errlen);
    if (st != KILN_OK) return st;
  }
  const extern_impl *x = impl_of(n->op);
  if (!x) {
    snprintf(err, errlen,
             "extern op %s has no runner: none was registered (rt_extern_register; the collectives register "
             "theirs at kiln_dist_init)",
             graph_ops[n->op].name);
    return KILN_ERR_UNSUPPORTED;
  }
  graph_buffer *out = NULL;
  rt_extern_run run = {0};
  int st = n->op == GRAPH_OP_MATMUL ? rt_backend_for(n)->contract(n, &out, &run, err, errlen)
                                    : rt_extern_on_host(n, x->host, x->hold, &out, &run, err, errlen);
  if (st != KILN_OK) {
    graph_buffer_release(out);
    return st;
  }
  if (rt_debug_level() >= 1 || rt_profiling()) {
    kiln_kernel_record r = {.run_ns = run.t1 - run.t0};
    char name[96];
    if (run.tiled) describe_tiled(n, &r, name, sizeof name);
    else x->describe(n, run.on_device, &r, name, sizeof name);
    if (rt_debug_level() >= 1) rt_debug_kernel(&r, n->ndim, n->sizes);
    if (rt_profiling()) rt_profile_add(&r, run.t0, NULL, 0);
  }
  graph_node_set_buffer(n, out);
  return KILN_OK;
}
