/*
 * extern.c — runs graph nodes of kind EXTERN: ops computed by a library
 * (OpenBLAS for MATMUL) or a plain C loop (SCATTER: runtime/index.c)
 * instead of a generated kernel. The fusion pass
 * materializes their inputs; an input that is still pending here (an
 * inlined FULL or ARANGE source) is realized first. The output is a new
 * contiguous buffer of the node's sizes.
 *
 * A MATMUL on the real device runs through cuBLAS on device memory
 * (rt_cublas_matmul, when rt_cublas_can_run). Everything else runs on the
 * host whatever the node's device: inputs on KILN_CUDA are read through
 * host copies (swapped into the input nodes for the call), and a
 * KILN_CUDA node's result is uploaded (docs/cuda.md: index_add_'s
 * SCATTER, or a MATMUL recorded for cuBLAS that cuBLAS cannot run now).
 */
#include <cblas.h>
#include <stdio.h>

#include "device.h"
#include "pool.h"
#include "runtime.h"

/* OpenBLAS uses as many threads as Kiln's pool (KILN_NUM_THREADS,
 * kiln_set_num_threads); set before each call only when it changed. */
static void match_blas_threads(void) {
  static _Atomic int blas_threads;
  int want = rt_pool_threads();
  if (blas_threads != want) {
    openblas_set_num_threads(want);
    blas_threads = want;
  }
}

/* Name, flops and bytes of one run, as the profiler reports them. */
static void describe(const graph_node *n, bool cublas, kiln_kernel_record *r, char *name, size_t len) {
  if (n->op != GRAPH_OP_MATMUL) { /* index loops */
    int64_t esz = graph_dtypes[n->dtype].size;
    snprintf(name, len, "loop_%s_%lld", graph_ops[n->op].name, (long long)n->numel);
    *r = (kiln_kernel_record){.name = name,
                              .backend = "loop",
                              .n_ops = 1,
                              .numel = n->numel,
                              .bytes_read = n->numel * esz,
                              .bytes_written = n->numel * esz,
                              .run_ns = r->run_ns,
                              .cache_hit = true,
                              .threads = 1};
    return;
  }
  int nd = n->ndim, esz = graph_dtypes[n->dtype].size;
  int64_t m = n->sizes[nd - 2], nn = n->sizes[nd - 1], k = n->inputs[0].view.sizes[nd - 1];
  int64_t batches = nd > 2 ? n->numel / (m * nn > 0 ? m * nn : 1) : 1;
  if (m * nn == 0) batches = 0;
  snprintf(name, len, "%s_%cgemm_%lldx%lldx%lld", cublas ? "cublas" : "blas", n->dtype == KILN_F64 ? 'd' : 's',
           (long long)m, (long long)nn, (long long)k);
  r->name = name;
  r->backend = cublas ? "cublas" : "blas";
  r->n_ops = 1;
  r->numel = n->numel;
  r->flops = 2 * batches * m * nn * k;
  r->bytes_read = (graph_view_numel(&n->inputs[0].view) + graph_view_numel(&n->inputs[1].view)) * esz;
  r->bytes_written = n->numel * esz;
  r->cache_hit = true; /* nothing to compile */
  r->threads = cublas ? 1 : openblas_get_num_threads();
}

static int dispatch(graph_node *n, graph_buffer *out, char *err, size_t errlen) {
  switch (n->op) {
  case GRAPH_OP_MATMUL: return rt_blas_matmul(n, out, err, errlen);
  case GRAPH_OP_SCATTER: return rt_index_scatter(n, out, err, errlen);
  default:
    snprintf(err, errlen, "op %s has no extern implementation", graph_ops[n->op].name);
    return KILN_ERR_UNSUPPORTED;
  }
}

/* Gives each input on the device a host copy for the call: its device
 * buffer moves to saved[i] (NULL when it was already on the host). */
static int inputs_to_host(graph_node *n, graph_buffer **saved, char *err, size_t errlen) {
  int st = KILN_OK;
  for (int i = 0; i < n->n_inputs && st == KILN_OK; i++) {
    graph_node *in = n->inputs[i].node;
    saved[i] = NULL;
    if (in->buffer->device == KILN_CPU) continue;
    graph_buffer *host = NULL;
    st = rt_buffer_copy_to(in->buffer, KILN_CPU, &host, err, errlen);
    if (st != KILN_OK) {
      graph_buffer_release(host);
      break;
    }
    saved[i] = in->buffer;
    in->buffer = host;
  }
  return st;
}

static void inputs_back(graph_node *n, graph_buffer **saved) {
  for (int i = n->n_inputs - 1; i >= 0; i--)
    if (saved[i]) {
      graph_buffer_release(n->inputs[i].node->buffer);
      n->inputs[i].node->buffer = saved[i];
    }
}

/* Computes n on the host into *out (a new host buffer). */
static int run_on_host(graph_node *n, graph_buffer **out, int64_t *t0, int64_t *t1, char *err, size_t errlen) {
  int64_t bytes = n->numel * graph_dtypes[n->dtype].size;
  *out = graph_buffer_alloc(bytes);
  if (!*out) {
    snprintf(err, errlen, "out of memory allocating %lld bytes", (long long)bytes);
    return KILN_ERR_OOM;
  }
  graph_buffer *saved[GRAPH_MAX_INPUTS] = {0};
  int st = inputs_to_host(n, saved, err, errlen);
  if (n->op == GRAPH_OP_MATMUL) match_blas_threads();
  *t0 = rt_now_ns();
  if (st == KILN_OK) st = dispatch(n, *out, err, errlen);
  *t1 = rt_now_ns();
  inputs_back(n, saved);
  return st;
}

/* A MATMUL through cuBLAS into *out (a new device buffer). */
static int run_on_device(graph_node *n, graph_buffer **out, int64_t *t0, int64_t *t1, char *err, size_t errlen) {
  int st = rt_device_alloc(n->numel * graph_dtypes[n->dtype].size, out, err, errlen);
  *t0 = rt_now_ns();
  if (st == KILN_OK) st = rt_cublas_matmul(n, *out, err, errlen);
  *t1 = rt_now_ns();
  return st;
}

int rt_run_extern(graph_node *n, char *err, size_t errlen) {
  for (int i = 0; i < n->n_inputs; i++) {
    graph_node *in = n->inputs[i].node;
    int st = in->buffer ? KILN_OK : rt_realize(&in, 1, err, errlen);
    if (st != KILN_OK) return st;
  }
  graph_buffer *out = NULL;
  int64_t t0 = 0, t1 = 0;
  bool cublas = rt_cublas_can_run(n);
  int st = cublas ? run_on_device(n, &out, &t0, &t1, err, errlen) : run_on_host(n, &out, &t0, &t1, err, errlen);
  if (st == KILN_OK && n->device == KILN_CUDA && !cublas) {
    graph_buffer *dev = NULL;
    st = rt_buffer_copy_to(out, KILN_CUDA, &dev, err, errlen);
    graph_buffer_release(out);
    out = dev;
  }
  if (st != KILN_OK) {
    graph_buffer_release(out);
    return st;
  }
  if (rt_debug_level() >= 1 || rt_profiling()) {
    kiln_kernel_record r = {.run_ns = t1 - t0};
    char name[96];
    describe(n, cublas, &r, name, sizeof name);
    if (rt_debug_level() >= 1) rt_debug_kernel(&r, n->ndim, n->sizes);
    if (rt_profiling()) rt_profile_add(&r, t0, NULL, 0);
  }
  graph_node_set_buffer(n, out);
  return KILN_OK;
}
