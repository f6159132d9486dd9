/*
 * debug.c — KILN_DEBUG output on stderr. Level 1: a line per kernel run
 * (name, backend, ops fused, shape, time, GB/s, GFLOP/s); 2: also the
 * schedule of every realize; 3: also the kernel IR of each kernel
 * (realize.c); 4: also the LLVM IR of each compiled kernel
 * (backend_llvm.c), or its CUDA C on the CUDA backends (backend_cuda.c,
 * backend_emu.c). The level is read once from the environment.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cuda_backend.h"
#include "rt_internal.h"

static int64_t read_level(void) {
  const char *e = getenv("KILN_DEBUG");
  return e ? atoi(e) : 0;
}

int rt_debug_level(void) {
  static atomic_int_fast64_t level = GRAPH_ENV_UNREAD;
  return (int)graph_env_once(&level, read_level);
}

void rt_debug_cuda_source(const kir_kernel *k) {
  char *src = NULL, msg[256];
  if (cuda_print_kernel(k, NULL, &src, msg, sizeof msg) == KILN_OK)
    fprintf(stderr, "kiln: CUDA C of %s\n%s\n", k->name, src);
  free(src);
}

const char *rt_fmt_sizes(char *buf, size_t len, int ndim, const int64_t *sizes) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < ndim && used < len; d++)
    used += (size_t)snprintf(buf + used, len - used, d ? ", %lld" : "%lld", (long long)sizes[d]);
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}

void rt_debug_kernel(const kiln_kernel_record *r, int ndim, const int64_t *sizes) {
  char shape[160];
  double ns = r->run_ns > 0 ? (double)r->run_ns : 1.0;
  char compiled[48] = "";
  if (!r->cache_hit) snprintf(compiled, sizeof compiled, "  (compiled in %.1f ms)", r->compile_ns / 1e6);
  else if (r->load_ns > 0) snprintf(compiled, sizeof compiled, "  (loaded from disk in %.2f ms)", r->load_ns / 1e6);
  fprintf(stderr, "kiln: %-44s %-5s %3d ops %-16s %9.3f ms %8.2f GB/s %8.2f GFLOP/s %2d thr%s\n", r->name,
          r->backend, r->n_ops, rt_fmt_sizes(shape, sizeof shape, ndim, sizes), r->run_ns / 1e6,
          (double)(r->bytes_read + r->bytes_written) / ns, (double)r->flops / ns, r->threads, compiled);
}

/* Appends the ops fused below n (inputs first) to the line; seen[] keeps
 * a node shared by two producers from being listed twice. */
static void list_fused(const pass_plan *p, const graph_node *n, const graph_node **seen, int *n_seen, int max_seen) {
  for (int i = 0; i < n->n_inputs; i++) {
    const graph_node *in = n->inputs[i].node;
    if (!pass_fused(p, in)) continue;
    bool dup = false;
    for (int s = 0; s < *n_seen && !dup; s++) dup = seen[s] == in;
    if (dup || *n_seen == max_seen) continue;
    seen[(*n_seen)++] = in;
    list_fused(p, in, seen, n_seen, max_seen);
    fprintf(stderr, " %s", graph_ops[in->op].name);
  }
}

void rt_debug_schedule(const pass_plan *p, bool cache_hit) {
  int kernels = 0, externs = 0, n = p->n;
  for (int i = 0; i < n; i++) {
    const graph_node *x = p->order[i];
    if (!pass_is_kernel_root(p, i)) continue;
    if (graph_ops[x->op].kind == GRAPH_EXTERN) externs++;
    else kernels++;
  }
  fprintf(stderr, "kiln: schedule: %d pending nodes -> %d kernels, %d library calls%s\n", n, kernels, externs,
          cache_hit ? " (schedule cache hit)" : "");
  for (int i = 0; i < n; i++) {
    const graph_node *x = p->order[i];
    if (!pass_is_kernel_root(p, i)) continue;
    char shape[160];
    fprintf(stderr, "kiln:   %3d %-10s %-5s %s", i, graph_ops[x->op].name, graph_dtypes[x->dtype].name,
            rt_fmt_sizes(shape, sizeof shape, x->ndim, x->sizes));
    const graph_node *seen[64];
    int n_seen = 0;
    if (graph_ops[x->op].kind != GRAPH_EXTERN) {
      fprintf(stderr, "  fuses:");
      list_fused(p, x, seen, &n_seen, 64);
      if (!n_seen) fprintf(stderr, " -");
    }
    if (p->e[i].stores >= 0) fprintf(stderr, "  stores:");
    for (int s = p->e[i].stores; s >= 0; s = p->e[s].store_next)
      fprintf(stderr, " %s@%d", graph_ops[p->order[s]->op].name, s);
    fprintf(stderr, "\n");
  }
}
