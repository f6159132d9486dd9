/*
 * cuda_gemm_run.c — MATMUL through the tiled GEMM kernels
 * (codegen_cuda/cuda_gemm.c, docs/cuda.md "The tiled GEMM"): on the cuda
 * backend where cuBLAS cannot run the product, and on cuda-emu, where
 * they run from the same CUDA C on the CPU. The node's operands become a
 * cuda_gemm_spec read in place (offsets, row, column and batch strides);
 * one build per variant and backend is kept for the process; the
 * product's parameter array goes beside the operands (device memory on
 * a GPU), and one launch covers its tiles.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_backend.h"
#include "cuda_emu_run.h"
#include "cuda_launch.h"
#include "device.h"
#include "matmul_dims.h"
#include "rt_internal.h"

/* The stride s with batch number i (row-major over the first nb dims of
 * v) at offset i·s, when one exists (dims of size 1 aside, each stride
 * is s times the batches inside it; all 0 for a broadcast operand). */
static bool batch_stride(const graph_view *v, int nb, int64_t *s) {
  int64_t inner = 1;
  bool have = false;
  *s = 0;
  for (int d = nb - 1; d >= 0; d--) {
    if (v->sizes[d] == 1) continue;
    if (!have) {
      if (v->strides[d] % inner) return false;
      *s = v->strides[d] / inner;
      have = true;
    } else if (v->strides[d] != *s * inner) {
      return false;
    }
    inner *= v->sizes[d];
  }
  return true;
}

bool rt_cuda_gemm_spec_of(const graph_node *n, cuda_gemm_spec *s) {
  if (n->op != GRAPH_OP_MATMUL || (n->dtype != KILN_F32 && n->dtype != KILN_F64)) return false;
  if (!n->inputs[0].node->buffer || !n->inputs[1].node->buffer) return false; /* a read-through operand */
  mm_dims d = mm_dims_of(n);
  if (d.m < 1 || d.nn < 1 || d.batches < 1) return false;
  const graph_view *a = &n->inputs[0].view, *b = &n->inputs[1].view;
  int nd = n->ndim;
  *s = (cuda_gemm_spec){.f64 = n->dtype == KILN_F64, .batch = d.batches, .m = d.m, .n = d.nn, .k = d.k,
                        .a_off = a->offset, .a_m = a->strides[nd - 2], .a_k = a->strides[nd - 1],
                        .b_off = b->offset, .b_k = b->strides[nd - 2], .b_n = b->strides[nd - 1],
                        .c_b = d.m * d.nn, .c_m = d.nn, .c_n = 1};
  return batch_stride(a, d.nb, &s->a_b) && batch_stride(b, d.nb, &s->b_b) && cuda_gemm_spec_ok(s);
}

/* The builds, per variant (index: f64·4 + a_along_k·2 + b_along_k). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static cuda_emu_fn emu_built[8];
static rt_cuda_kernel dev_built[8];
static bool dev_loaded[8];

static int variant_index(cuda_gemm_variant v) { return v.f64 * 4 + v.a_along_k * 2 + v.b_along_k; }

/* One launch of s's kernel under cuda-emu over its tiles: bufs are A, B,
 * C and the parameter array. */
static int run_emu(cuda_gemm_variant v, void *const bufs[4], int64_t tiles, char *err, size_t errlen) {
  int i = variant_index(v), st = KILN_OK;
  pthread_mutex_lock(&lock);
  if (!emu_built[i]) {
    char *src = NULL;
    cuda_launch_rule rule;
    cuda_gemm_launch_rule(&rule);
    st = cuda_gemm_print(v, "kiln_emu_kernel", &src, err, errlen);
    if (st == KILN_OK)
      st = cuda_emu_compile_source("kiln_gemm", src, 4, &rule, &rt_cuda_emu_launcher, &emu_built[i], err, errlen);
    free(src);
  }
  cuda_emu_fn fn = emu_built[i];
  pthread_mutex_unlock(&lock);
  if (st == KILN_OK) fn(bufs, 0, tiles);
  return st;
}

/* The same on the device: the parameter array is copied to device memory
 * for the launch. */
static int run_device(cuda_gemm_variant v, void *const bufs[4], int64_t tiles, char *err, size_t errlen) {
  int i = variant_index(v), st = KILN_OK;
  pthread_mutex_lock(&lock);
  if (!dev_loaded[i]) {
    st = rt_cuda_gemm_load(v, &dev_built[i], err, errlen);
    dev_loaded[i] = st == KILN_OK;
  }
  const rt_cuda_kernel *ck = &dev_built[i];
  pthread_mutex_unlock(&lock);
  size_t bytes = CUDA_GEMM_NPARAMS * sizeof(int64_t);
  cu_deviceptr params = 0;
  if (st == KILN_OK) st = rt_cuda_buffer_alloc(bytes, &params, err, errlen);
  if (st == KILN_OK) st = rt_cuda_copy_to_device(params, bufs[3], bytes, err, errlen);
  cu_deviceptr dev[4] = {rt_cuda_dptr(bufs[0]), rt_cuda_dptr(bufs[1]), rt_cuda_dptr(bufs[2]), params};
  if (st == KILN_OK) st = rt_cuda_kernel_launch(ck, dev, 4, 0, tiles, NULL, err, errlen);
  if (params) rt_cuda_buffer_free(params);
  return st;
}

int rt_cuda_gemm_contract(graph_node *n, const cuda_gemm_spec *s, bool emu, graph_buffer **out, rt_extern_run *run,
                          char *err, size_t errlen) {
  int64_t p[CUDA_GEMM_NPARAMS];
  int st = cuda_gemm_params(s, p, err, errlen);
  if (st == KILN_OK) st = rt_buffer_alloc(n->device, n->numel * graph_dtypes[n->dtype].size, out, err, errlen);
  run->on_device = true;
  run->tiled = true;
  run->t0 = rt_now_ns();
  if (st == KILN_OK) {
    void *const bufs[4] = {n->inputs[0].node->buffer->data, n->inputs[1].node->buffer->data, (*out)->data, p};
    cuda_gemm_variant v = cuda_gemm_variant_of(s);
    int64_t tiles = cuda_gemm_tiles(s);
    st = emu ? run_emu(v, bufs, tiles, err, errlen) : run_device(v, bufs, tiles, err, errlen);
  }
  run->t1 = rt_now_ns();
  return st;
}
