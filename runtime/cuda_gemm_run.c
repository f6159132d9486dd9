/*
 * cuda_gemm_run.c — MATMUL through the tiled GEMM kernels
 * (codegen_cuda/cuda_gemm.c, docs/cuda.md "The tiled GEMM"): on the cuda
 * backend where cuBLAS cannot run the product, and on cuda-emu, where
 * they run from the same CUDA C on the CPU. The node's operands become a
 * cuda_gemm_spec read in place (offsets, row, column and batch strides);
 * one build per variant and backend is kept for the process; the
 * product's parameter array goes beside the operands (device memory on
 * a GPU), and one launch covers its tiles. A product whose elementwise
 * consumers the fuser left as a chain (gemm_fused.c: bias, relu, scale,
 * residual) runs with that chain as the kernel's epilogue
 * (rt_cuda_gemm_contract_epi), as the generated CPU GEMM does.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_emu_run.h"
#include "cuda_launch.h"
#include "device.h"
#include "gemm_epilogue.h"
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

/* A variant's key among the builds: its fields packed into 32 bits. */
static uint32_t variant_key(cuda_gemm_variant v) {
  uint32_t k = (uint32_t)v.f64 | (uint32_t)v.a_along_k << 1 | (uint32_t)v.b_along_k << 2 | (uint32_t)v.n_epi << 3;
  for (int i = 0; i < v.n_epi; i++) k |= (uint32_t)(v.epi_op[i] << 2 | v.epi_operand[i]) << (6 + 6 * i);
  return k;
}

/* The builds of the process, one per variant and backend, behind lock:
 * a cuda-emu build's entry, or a device build. */
typedef struct build {
  uint32_t key;
  bool emu;
  cuda_emu_fn fn;
  rt_cuda_kernel dev;
} build;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static build *builds;
static int n_builds, cap_builds;

/* The build of v (emu: under cuda-emu), built at its first use; NULL on
 * an error (err set, st the code). Called with lock held. */
static const build *build_of(cuda_gemm_variant v, bool emu, int *st, char *err, size_t errlen) {
  uint32_t key = variant_key(v);
  for (int i = 0; i < n_builds; i++)
    if (builds[i].key == key && builds[i].emu == emu) return &builds[i];
  if (n_builds == cap_builds) {
    int cap = cap_builds ? 2 * cap_builds : 8;
    build *grown = realloc(builds, (size_t)cap * sizeof *grown);
    if (!grown) {
      snprintf(err, errlen, "cuda tiled GEMM: out of memory");
      *st = KILN_ERR_OOM;
      return NULL;
    }
    builds = grown, cap_builds = cap;
  }
  build b = {.key = key, .emu = emu};
  if (emu) {
    char *src = NULL;
    cuda_launch_rule rule;
    cuda_gemm_launch_rule(&rule);
    *st = cuda_gemm_print(v, "kiln_emu_kernel", &src, err, errlen);
    if (*st == KILN_OK)
      *st = cuda_emu_compile_source("kiln_gemm", src, cuda_gemm_n_buffers(v), &rule, &rt_cuda_emu_launcher, &b.fn,
                                    err, errlen);
    free(src);
  } else {
    *st = rt_cuda_gemm_load(v, &b.dev, err, errlen);
  }
  if (*st != KILN_OK) return NULL;
  builds[n_builds] = b;
  return &builds[n_builds++];
}

/* One launch of s's kernel over its tiles: bufs are A, B, C, the
 * parameter array (host memory) and the epilogue's operands; under
 * cuda-emu (emu) or on the device, where the parameter array is copied
 * to device memory for the launch. */
static int launch(cuda_gemm_variant v, bool emu, void *const *bufs, int64_t tiles, char *err, size_t errlen) {
  int st = KILN_OK, nb = cuda_gemm_n_buffers(v);
  pthread_mutex_lock(&lock);
  const build *b = build_of(v, emu, &st, err, errlen);
  build copy = b ? *b : (build){0}; /* (builds may move when another variant is added) */
  pthread_mutex_unlock(&lock);
  if (st != KILN_OK) return st;
  if (emu) {
    copy.fn(bufs, 0, tiles);
    return KILN_OK;
  }
  size_t bytes = CUDA_GEMM_NPARAMS * sizeof(int64_t);
  cu_deviceptr params = 0, dev[4 + CUDA_GEMM_EPI_MAX];
  st = rt_cuda_buffer_alloc(bytes, &params, err, errlen);
  if (st == KILN_OK) st = rt_cuda_copy_to_device(params, bufs[3], bytes, err, errlen);
  for (int i = 0; i < nb; i++) dev[i] = i == 3 ? params : rt_cuda_dptr(bufs[i]);
  if (st == KILN_OK) st = rt_cuda_kernel_launch(&copy.dev, dev, nb, 0, tiles, NULL, err, errlen);
  if (params) rt_cuda_buffer_free(params);
  return st;
}

/* s (with its epilogue's operands ebuf, one per step) into out, timed. */
static int run(graph_node *n, const cuda_gemm_spec *s, const void *const *ebuf, bool emu, graph_buffer *out,
               rt_extern_run *r, char *err, size_t errlen) {
  int64_t p[CUDA_GEMM_NPARAMS];
  int st = cuda_gemm_params(s, p, err, errlen);
  r->on_device = true;
  r->tiled = true;
  r->t0 = rt_now_ns();
  if (st == KILN_OK) {
    void *bufs[4 + CUDA_GEMM_EPI_MAX] = {n->inputs[0].node->buffer->data, n->inputs[1].node->buffer->data, out->data,
                                         p};
    for (int i = 0; i < s->n_epi; i++) bufs[4 + i] = (void *)ebuf[i];
    st = launch(cuda_gemm_variant_of(s), emu, bufs, cuda_gemm_tiles(s), err, errlen);
  }
  r->t1 = rt_now_ns();
  return st;
}

int rt_cuda_gemm_contract(graph_node *n, const cuda_gemm_spec *s, bool emu, graph_buffer **out, rt_extern_run *run_,
                          char *err, size_t errlen) {
  int st = rt_buffer_alloc(n->device, n->numel * graph_dtypes[n->dtype].size, out, err, errlen);
  if (st != KILN_OK) return st;
  return run(n, s, NULL, emu, *out, run_, err, errlen);
}

/* The tiled GEMM's operation for the micro-kernel's step op. */
static unsigned char epi_op(unsigned char op) {
  switch (op) {
  case LLVM_GEMM_EPI_ADD: return CUDA_GEMM_EPI_ADD;
  case LLVM_GEMM_EPI_SUB: return CUDA_GEMM_EPI_SUB;
  case LLVM_GEMM_EPI_RSUB: return CUDA_GEMM_EPI_RSUB;
  case LLVM_GEMM_EPI_MUL: return CUDA_GEMM_EPI_MUL;
  case LLVM_GEMM_EPI_DIV: return CUDA_GEMM_EPI_DIV;
  case LLVM_GEMM_EPI_RDIV: return CUDA_GEMM_EPI_RDIV;
  case LLVM_GEMM_EPI_RELU: return CUDA_GEMM_EPI_RELU;
  case LLVM_GEMM_EPI_MAXIMUM: return CUDA_GEMM_EPI_MAXIMUM;
  default: return CUDA_GEMM_EPI_MINIMUM;
  }
}

/* epi's steps into s, each operand's data (offset applied) in ebuf:
 * false when a realized operand's batches no single stride steps. */
static bool epi_steps(const rt_gemm_epi *epi, cuda_gemm_spec *s, const void *ebuf[CUDA_GEMM_EPI_MAX]) {
  s->n_epi = epi->n;
  for (int i = 0; i < epi->n; i++) {
    cuda_gemm_epi_step *st = &s->epi[i];
    *st = (cuda_gemm_epi_step){.op = epi_op(epi->step[i].op)};
    ebuf[i] = NULL;
    if (epi->step[i].arg == LLVM_GEMM_ARG_NONE) continue;
    if (rt_gemm_epi_is_fill(epi, i)) {
      float f;
      if (epi->esz == 4) memcpy(&f, epi->value[i], 4), st->value = f;
      else memcpy(&st->value, epi->value[i], 8);
      st->operand = CUDA_GEMM_OPND_VALUE;
      continue;
    }
    st->operand = CUDA_GEMM_OPND_BUFFER;
    st->sm = epi->sm[i], st->sn = epi->sn[i];
    if (epi->batched[i] && !batch_stride(&epi->batch[i], epi->nb, &st->sb)) return false;
    ebuf[i] = epi->base[i];
  }
  return true;
}

int rt_cuda_gemm_contract_epi(graph_node *n, const rt_gemm_epi *epi, bool emu, graph_buffer *out,
                              rt_extern_run *run_, char *err, size_t errlen) {
  cuda_gemm_spec s;
  const void *ebuf[CUDA_GEMM_EPI_MAX];
  if (epi->after || !rt_cuda_gemm_spec_of(n, &s) || !epi_steps(epi, &s, ebuf) || !cuda_gemm_spec_ok(&s))
    return KILN_ERR_UNSUPPORTED;
  return run(n, &s, ebuf, emu, out, run_, err, errlen);
}
