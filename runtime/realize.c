/*
 * realize.c — turns pending version nodes into buffers: collects the
 * pending nodes a request needs (post-order, so producers run first),
 * lowers each to one kernel, compiles it through the cache, allocates its
 * output and runs it.
 *
 * In-place writes: an ASSIGN whose old version is realized and read by
 * nobody else (node and buffer referenced once) writes its region straight
 * into the old buffer; otherwise it copies the old contents first.
 * Inlined sources (pending FULL/ARANGE) are computed inside their readers'
 * kernels and never get a buffer of their own unless requested.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lower.h"
#include "pool.h"
#include "runtime.h"

static int sched_epoch;

int rt_debug_level(void) {
  static int level = -1;
  if (level < 0) {
    const char *e = getenv("KILN_DEBUG");
    level = e ? atoi(e) : 0;
  }
  return level;
}

/* KILN_FUSE=0 runs one kernel per node (read once; tests may override). */
static int fusion = -1;

void rt_set_fusion(int enabled) { fusion = enabled; }

static bool fusion_enabled(void) {
  if (fusion < 0) {
    const char *e = getenv("KILN_FUSE");
    fusion = !(e && strcmp(e, "0") == 0);
  }
  return fusion;
}


typedef struct node_list {
  graph_node **items;
  int n, cap;
} node_list;

static bool list_push(node_list *l, graph_node *x) {
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 64;
    graph_node **items = realloc(l->items, sizeof *items * (size_t)cap);
    if (!items) return false;
    l->items = items;
    l->cap = cap;
  }
  l->items[l->n++] = x;
  return true;
}

/* Pending inputs this node needs realized before its kernel runs. */
static bool needs(const graph_node *in) { return in && !in->buffer && !pass_is_inlined(in); }

/* Iterative post-order DFS from the roots: `order` receives each pending
 * node after all the pending nodes it reads. */
static bool collect(graph_node *const *roots, int n, node_list *order) {
  node_list stack = {0};
  int epoch = ++sched_epoch;
  bool ok = true;
  for (int r = 0; r < n && ok; r++) {
    if (!roots[r] || roots[r]->buffer || roots[r]->sched_mark == epoch) continue;
    roots[r]->sched_mark = epoch;
    ok = list_push(&stack, roots[r]);
    while (ok && stack.n > 0) {
      graph_node *top = stack.items[stack.n - 1];
      graph_node *next = NULL;
      for (int i = 0; i < top->n_inputs && !next; i++) {
        graph_node *in = top->inputs[i].node;
        if (needs(in) && in->sched_mark != epoch) next = in;
      }
      if (next) {
        next->sched_mark = epoch;
        ok = list_push(&stack, next);
      } else {
        stack.n--;
        ok = list_push(order, top);
      }
    }
  }
  free(stack.items);
  return ok;
}

/* An ASSIGN writes into its old version's buffer whenever that buffer
 * belongs to the old version alone. If other pending readers still need
 * the old contents, they get a private copy first (copy-on-write), so the
 * storage keeps one buffer for its lifetime: pointers from kiln_data and
 * from_blob memory see every write. */
static bool can_write_in_place(const graph_node *n) {
  const graph_node *old = n->inputs[0].node;
  return n->op == GRAPH_OP_ASSIGN && old->buffer && old->buffer->refcount == 1;
}

static int detach_old_readers(graph_node *old, char *err, size_t errlen) {
  if (old->refcount == 1) return KILN_OK;
  graph_buffer *copy = graph_buffer_alloc(old->buffer->bytes);
  if (!copy) {
    snprintf(err, errlen, "out of memory copying %lld bytes", (long long)old->buffer->bytes);
    return KILN_ERR_OOM;
  }
  memcpy(copy->data, old->buffer->data, (size_t)old->buffer->bytes);
  graph_buffer *mine = old->buffer;
  old->buffer = copy;
  graph_buffer_release(mine); /* still held by the ASSIGN's output */
  return KILN_OK;
}

static void debug_line(const graph_node *n, const kir_kernel *k, bool hit, int64_t ns) {
  fprintf(stderr, "kiln: %-40s llvm  numel %-10lld %8.3f ms%s\n", k->name, (long long)n->numel, ns / 1e6,
          hit ? "" : "  (compiled)");
}

/* KILN_DEBUG=3: the kernel IR, printed before the kernel runs. */
static void debug_ir(const kir_kernel *k) {
  char *txt = kir_to_string(k);
  if (txt) fprintf(stderr, "kiln: kernel IR of %s\n%s\n", k->name, txt);
  free(txt);
}

/* The output buffer of n: the old version's buffer for an in-place
 * ASSIGN (after giving other readers their copy), else a new one. */
static int output_buffer(graph_node *n, bool in_place, graph_buffer **out, char *err, size_t errlen) {
  int64_t bytes = n->numel * graph_dtypes[n->dtype].size;
  if (in_place) {
    graph_node *old = n->inputs[0].node;
    *out = graph_buffer_retain(old->buffer);
    return detach_old_readers(old, err, errlen);
  }
  *out = graph_buffer_alloc(bytes);
  if (*out) return KILN_OK;
  snprintf(err, errlen, "out of memory allocating %lld bytes", (long long)bytes);
  return KILN_ERR_OOM;
}

/* Kernel arguments: bufs[] as lower.h lays them out. */
typedef struct kernel_args {
  void *bufs[3 + PASS_MAX_INPUTS];
} kernel_args;

static void bind_args(pass_binding *b, graph_buffer *out, kernel_args *a) {
  a->bufs[0] = out->data;
  a->bufs[1] = b->args;
  a->bufs[2] = b->fargs;
  for (int i = 0; i < b->n_inputs; i++) a->bufs[3 + i] = b->inputs[i]->buffer->data;
}

static void profile(const graph_node *n, const kir_kernel *k, const pass_binding *b, bool hit, bool in_place,
                    int threads, int64_t compile_ns, int64_t run_ns) {
  kiln_kernel_record r = {.name = k->name, .backend = "llvm", .n_ops = b->n_ops, .cache_hit = hit,
                          .threads = threads, .compile_ns = hit ? 0 : compile_ns, .run_ns = run_ns,
                          .bytes_read = b->bytes_read};
  bool assign = n->op == GRAPH_OP_ASSIGN;
  r.numel = assign ? graph_view_numel(&n->attr.region) : n->numel;
  r.bytes_written = (assign && in_place ? r.numel : n->numel) * graph_dtypes[n->dtype].size;
  int64_t per_elem = b->n_ops - (assign ? 1 : 0);
  r.flops = graph_ops[n->op].kind == GRAPH_REDUCE ? graph_view_numel(&n->inputs[0].view) * b->n_ops
                                                  : r.numel * (per_elem > 0 ? per_elem : 0);
  rt_profile_add(&r);
}

/* True when every STORE of k lies inside its parallel range and no
 * accumulator lives across it, so chunks of that range write disjoint
 * elements and may run on several threads. (A non-in-place ASSIGN copies
 * the old contents in a parallel loop, then writes the region in a serial
 * loop after it: not splittable.) */
static bool splittable(const kir_kernel *k) {
  int par = -1, end = -1;
  for (int i = 0; i < k->n_uops; i++) {
    const kir_uop *u = &k->uops[i];
    if (par < 0 && u->op == KIR_RANGE && u->parallel) par = i;
    else if (par >= 0 && end < 0 && u->op == KIR_END && u->src[0] == par) end = i;
    else if (u->op == KIR_STORE && (par < 0 || end >= 0)) return false;
    else if (u->op == KIR_ACC_SET && u->src[0] < par) return false;
  }
  return par >= 0;
}

/* Runs k over its parallel range on the pool; returns the threads used.
 * Work per item is the elements one iteration of the parallel range
 * touches: output elements (or region elements of an in-place ASSIGN),
 * or for a reduction the input elements it reads. */
static int run_kernel(const graph_node *n, const kir_kernel *k, bool in_place, llvm_kernel_fn fn,
                      void *const *bufs) {
  int64_t extent = pass_parallel_extent(k);
  if (extent == 0 || !splittable(k)) {
    fn(bufs, 0, extent);
    return 1;
  }
  int64_t work = n->numel;
  if (graph_ops[n->op].kind == GRAPH_REDUCE) work = graph_view_numel(&n->inputs[0].view);
  else if (n->op == GRAPH_OP_ASSIGN && in_place) work = graph_view_numel(&n->attr.region);
  return rt_pool_run(fn, bufs, extent, work / extent);
}

/* Lowers n's kernel; a group too big for one kernel loses its fused
 * inputs (they run as kernels of their own first) and is lowered again. */
static int lower(graph_node *n, bool in_place, kir_kernel *k, pass_binding *b, char *err, size_t errlen) {
  int st = pass_lower_node(n, in_place, k, b, err, errlen);
  if (st != KILN_ERR_UNSUPPORTED) return st;
  bool had_fused = false;
  for (int i = 0; i < n->n_inputs; i++) had_fused |= !n->inputs[i].node->buffer && n->inputs[i].node->fused;
  if (!had_fused) return st;
  pass_unfuse_inputs(n);
  graph_node *inputs[GRAPH_MAX_INPUTS];
  for (int i = 0; i < n->n_inputs; i++) inputs[i] = n->inputs[i].node;
  st = rt_realize(inputs, n->n_inputs, err, errlen);
  return st == KILN_OK ? lower(n, in_place, k, b, err, errlen) : st;
}

static int run_node(graph_node *n, char *err, size_t errlen) {
  bool in_place = can_write_in_place(n);
  kir_kernel k;
  pass_binding b;
  int st = lower(n, in_place, &k, &b, err, errlen);
  if (st != KILN_OK) return st;
  in_place = in_place && can_write_in_place(n);
  llvm_kernel_fn fn;
  bool hit = false;
  int64_t t0 = rt_now_ns();
  st = rt_kernel_get(&k, &fn, &hit, err, errlen);
  int64_t t1 = rt_now_ns();
  graph_buffer *out = NULL;
  if (st == KILN_OK) st = output_buffer(n, in_place, &out, err, errlen);
  if (st == KILN_OK) {
    kernel_args a;
    bind_args(&b, out, &a);
    if (rt_debug_level() >= 3) debug_ir(&k);
    int64_t t2 = rt_now_ns();
    int threads = run_kernel(n, &k, in_place, fn, a.bufs);
    int64_t t3 = rt_now_ns();
    if (rt_debug_level() >= 1) debug_line(n, &k, hit, t3 - t2);
    if (rt_profiling()) profile(n, &k, &b, hit, in_place, threads, t1 - t0, t3 - t2);
    graph_node_set_buffer(n, out);
    out = NULL;
  }
  graph_buffer_release(out);
  kir_free(&k);
  return st;
}

int rt_realize(graph_node *const *nodes, int n, char *err, size_t errlen) {
  rt_alloc_install();
  node_list order = {0};
  if (!collect(nodes, n, &order)) {
    free(order.items);
    snprintf(err, errlen, "out of memory scheduling %d nodes", n);
    return KILN_ERR_OOM;
  }
  /* No retains needed: running a node drops only its inputs, which come
   * earlier in post-order; every node still to run is held by a consumer
   * still to run or by a root (held by the caller). */
  pass_fuse(order.items, order.n, nodes, n, fusion_enabled());
  int st = KILN_OK;
  for (int i = 0; i < order.n && st == KILN_OK; i++) {
    graph_node *x = order.items[i];
    if (x->buffer || x->fused) continue;
    st = graph_ops[x->op].kind == GRAPH_EXTERN ? rt_run_extern(x, err, errlen) : run_node(x, err, errlen);
  }
  free(order.items);
  return st;
}
