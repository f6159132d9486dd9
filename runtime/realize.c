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
 *
 * Backends (backend.h): each kernel is compiled, loaded and launched by
 * the backend that runs its root node (rt_backend_for: llvm for CPU
 * nodes, cuda for KILN_CUDA ones on the real device, cuda-emu for every
 * node while it is selected), and each output buffer comes from the
 * memory of its node's device (rt_buffer_alloc). An input whose buffer
 * is on the other device is copied over for the run (a CPU 0-d scalar
 * read by a CUDA op; the copy of kiln_to_device when it must gather a
 * strided view). A copy that only moves a whole buffer between devices
 * (kiln_to_device of a contiguous tensor) is one transfer, no kernel.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "device.h"
#include "gemm_epilogue.h"
#include "passes.h"
#include "pool.h"
#include "rt_internal.h"

/* KILN_FUSE=0 runs one kernel per node (read once; tests may override). */
static atomic_int_fast64_t fusion = GRAPH_ENV_UNREAD;

void rt_set_fusion(int enabled) {
  atomic_store_explicit(&fusion, enabled < 0 ? GRAPH_ENV_UNREAD : enabled, memory_order_relaxed);
}

static int64_t read_fusion(void) {
  const char *e = getenv("KILN_FUSE");
  return !(e && strcmp(e, "0") == 0);
}

static bool fusion_enabled(void) { return graph_env_once(&fusion, read_fusion); }

/* Simplifies a collected plan (with fusion on); when that changed the
 * graph, collects it again (under a new plan id), so dead nodes drop out,
 * and returns true. */
static bool simplify(graph_node *const *roots, int n, pass_plan *p, bool *oom) {
  graph_node **dropped = NULL;
  int n_dropped = fusion_enabled() ? pass_simplify(p, roots, n, &dropped) : 0;
  if (n_dropped > 0) {
    *oom = !pass_plan_collect(p, roots, n);
    for (int i = 0; i < n_dropped; i++) graph_node_release(dropped[i]); /* none is in the new plan */
  }
  free(dropped);
  return n_dropped > 0;
}

int rt_plan(graph_node *const *roots, int n, bool passes, pass_plan *p) {
  pass_plan_init(p);
  bool oom = !pass_plan_collect(p, roots, n);
  if (!oom && passes) simplify(roots, n, p, &oom);
  if (oom) {
    pass_plan_free(p);
    return KILN_ERR_OOM;
  }
  if (passes) pass_fuse(p, roots, n, fusion_enabled());
  return KILN_OK;
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
  graph_buffer *copy = NULL;
  int st = rt_buffer_copy_to(old->buffer, old->buffer->device, &copy, err, errlen);
  if (st != KILN_OK) {
    graph_buffer_release(copy);
    return st;
  }
  graph_buffer *mine = old->buffer;
  old->buffer = copy;
  graph_buffer_release(mine); /* still held by the ASSIGN's output */
  return KILN_OK;
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
  return rt_buffer_alloc(n->device, bytes, out, err, errlen);
}

/* Kernel buffers: bufs[] as passes.h lays them out (bufs[1], bufs[2], the
 * argument arrays, NULL: they stay in the binding), with the input
 * buffers on the kernel's device (staged: copies to release). */
typedef struct kernel_args {
  const graph_buffer *bufs[3 + PASS_MAX_INPUTS];
  graph_buffer *staged[PASS_MAX_INPUTS];
} kernel_args;

static void release_args(kernel_args *a, int n_inputs) {
  for (int i = 0; i < n_inputs; i++) graph_buffer_release(a->staged[i]);
}

/* Inputs on another device than the kernel's are staged there first. */
static int bind_args(const graph_node *n, pass_binding *b, graph_buffer *out, graph_buffer *const *outs, kernel_args *a,
                     char *err, size_t errlen) {
  a->bufs[0] = out;
  a->bufs[1] = NULL;
  a->bufs[2] = NULL;
  for (int j = 0; j < b->n_outputs; j++) a->bufs[3 + j] = outs[j];
  memset(a->staged, 0, sizeof a->staged);
  int st = KILN_OK;
  for (int i = 0; i < b->n_inputs && st == KILN_OK; i++) {
    graph_buffer *buf = b->inputs[i]->buffer;
    if (buf->device != n->device) st = rt_buffer_copy_to(buf, n->device, &a->staged[i], err, errlen);
    a->bufs[3 + b->n_outputs + i] = a->staged[i] ? a->staged[i] : buf;
  }
  return st;
}

/* A kernel ready to run: lowered and compiled now, or from a cached
 * schedule (then hit is true and nothing was lowered). */
typedef struct ready_kernel {
  rt_sched_kernel k; /* pos, in_place, split, extent, backend, code, name, binding */
  bool hit;
  int64_t compile_ns;
  int64_t load_ns; /* > 0: loaded from the disk cache (hit is true) */
} ready_kernel;

/* The profiler record and KILN_DEBUG line of one run that started at t0. */
static void report(const graph_node *n, const ready_kernel *rk, int threads, int64_t t0, int64_t t1,
                   const rt_pool_span *spans, int n_spans) {
  const pass_binding *b = &rk->k.binding;
  kiln_kernel_record r = {.name = rk->k.name, .backend = rk->k.backend->name, .n_ops = b->n_ops,
                          .cache_hit = rk->hit, .threads = threads, .compile_ns = rk->hit ? 0 : rk->compile_ns, .load_ns = rk->load_ns,
                          .run_ns = t1 - t0, .bytes_read = b->bytes_read};
  pass_kernel_cost cost = pass_kernel_cost_of(n, rk->k.in_place, b->n_ops);
  r.numel = cost.numel;
  r.flops = cost.flops;
  r.bytes_written = cost.written * graph_dtypes[n->dtype].size;
  for (int j = 0; j < b->n_outputs; j++)
    r.bytes_written += b->outputs[j]->numel * graph_dtypes[b->outputs[j]->dtype].size;
  if (rt_debug_level() >= 1) rt_debug_kernel(&r, n->ndim, n->sizes);
  if (rt_profiling()) rt_profile_add(&r, t0, spans, n_spans);
}

/* What one rt_realize call is doing: the schedule and whether it can be
 * cached (no fallback changed its fusion decisions while it ran). */
typedef struct compile_job compile_job;

typedef struct sched_run {
  pass_plan *plan;
  bool cacheable;
  const rt_schedule *cached;
  rt_sched_kernel *kernels; /* lowered this run, for the cache */
  int n_kernels, cap_kernels;
  compile_job *jobs; /* kernels lowered and compiled before the run */
  int n_jobs;
  int *job_at;       /* [order size]: index into jobs, or -1 */
  bool fell_back;    /* a lowering fallback realized nodes of the plan */
  int status;        /* a KILN_DEBUG_CACHE mismatch (KILN_ERR_COMPILE), else KILN_OK */
  graph_node *const *roots; /* the requested nodes [n_roots] */
  int n_roots;
} sched_run;

static int lower(graph_node *n, bool in_place, kir_kernel *k, pass_binding *b, sched_run *run, char *err,
                 size_t errlen);

/* A lowering fallback's nested force of nodes [n], while the kernel at
 * plan position `from` is lowered: it realizes nodes of the plan, which
 * then drop their inputs, so the plan holds the nodes it may still read
 * (pass_plan_hold: those still to run and what they reach; earlier ones
 * may be freed already), marks them back afterwards, and neither caches
 * this schedule nor uses bindings made before (fell_back). */
static _Atomic int64_t fallbacks;

int64_t rt_lowering_fallbacks(void) { return atomic_load_explicit(&fallbacks, memory_order_relaxed); }

static int realize_first(sched_run *run, int from, graph_node *const *nodes, int n, char *err, size_t errlen) {
  atomic_fetch_add_explicit(&fallbacks, 1, memory_order_relaxed);
  run->cacheable = false;
  run->fell_back = true;
  pass_plan_hold(run->plan, from);
  int st = rt_realize(nodes, n, err, errlen);
  pass_plan_remark(run->plan);
  return st;
}

/* A multi-output kernel that cannot be lowered: the nodes it would store
 * run as kernels of their own first, then n is lowered alone. */
static int lower_alone(graph_node *n, bool in_place, kir_kernel *k, pass_binding *b, sched_run *run, char *err,
                       size_t errlen) {
  const pass_plan *p = run->plan;
  graph_node *stored[PASS_MAX_OUTPUTS];
  int n_stored = 0, at = pass_pos(p, n);
  for (int s = p->e[at].stores; s >= 0 && n_stored < PASS_MAX_OUTPUTS; s = p->e[s].store_next)
    stored[n_stored++] = p->order[s];
  pass_unstore(run->plan, n);
  int st = realize_first(run, at, stored, n_stored, err, errlen);
  return st == KILN_OK ? lower(n, in_place, k, b, run, err, errlen) : st;
}

/* Lowers n's kernel; a group too big for one kernel loses its fused
 * inputs (they run as kernels of their own first) and is lowered again. */
static int lower(graph_node *n, bool in_place, kir_kernel *k, pass_binding *b, sched_run *run, char *err,
                 size_t errlen) {
  pass_plan *p = run->plan;
  int st = pass_lower_node(p, n, in_place, k, b, err, errlen);
  if (st != KILN_ERR_UNSUPPORTED) return st;
  if (p->e[pass_pos(p, n)].stores >= 0) return lower_alone(n, in_place, k, b, run, err, errlen);
  bool had_fused = false;
  for (int i = 0; i < n->n_inputs; i++) had_fused |= pass_fused(p, n->inputs[i].node);
  if (!had_fused) return st;
  pass_unfuse_inputs(p, n);
  graph_node *inputs[GRAPH_MAX_INPUTS];
  for (int i = 0; i < n->n_inputs; i++) inputs[i] = n->inputs[i].node;
  st = realize_first(run, pass_pos(p, n), inputs, n->n_inputs, err, errlen);
  return st == KILN_OK ? lower(n, in_place, k, b, run, err, errlen) : st;
}

static void remember(sched_run *run, const rt_sched_kernel *k) {
  if (!run->cacheable) return;
  if (run->n_kernels == run->cap_kernels) {
    int cap = run->cap_kernels ? run->cap_kernels * 2 : 16;
    rt_sched_kernel *ks = graph_realloc(run->kernels, sizeof *ks * (size_t)cap);
    if (!ks) {
      run->cacheable = false;
      return;
    }
    run->kernels = ks;
    run->cap_kernels = cap;
  }
  run->kernels[run->n_kernels++] = *k;
}

/* What the kernel IR of a lowered kernel tells the runtime. */
static void describe(const graph_node *n, const kir_kernel *k, int pos, bool in_place, ready_kernel *rk) {
  rk->k.pos = pos;
  rk->k.backend = rt_backend_for(n);
  rk->k.code = (rt_code){0};
  rk->k.in_place = in_place;
  rk->k.extent = pass_parallel_extent(k);
  rk->k.split = kir_splittable(k);
  snprintf(rk->k.name, sizeof rk->k.name, "%s", k->name);
}

/* Compiles k (or finds it in the kernel cache) into rk. */
static int compile(const kir_kernel *k, ready_kernel *rk, char *err, size_t errlen) {
  int64_t t0 = rt_now_ns();
  rk->load_ns = 0;
  int st = rt_kernel_get(rk->k.backend, k, &rk->k.code, &rk->hit, &rk->load_ns, err, errlen);
  int64_t t1 = rt_now_ns();
  rk->compile_ns = t1 - t0;
  if (st == KILN_OK && !rk->hit && rt_profiling()) rt_profile_compile(rk->k.name, t0, t1);
  return st;
}

/* Lowers and compiles n's kernel into rk. */
static int prepare(graph_node *n, int pos, sched_run *run, ready_kernel *rk, char *err, size_t errlen) {
  bool in_place = can_write_in_place(n);
  kir_kernel k;
  int st = lower(n, in_place, &k, &rk->k.binding, run, err, errlen);
  if (st != KILN_OK) return st;
  if (in_place && !can_write_in_place(n)) run->cacheable = false;
  describe(n, &k, pos, in_place && can_write_in_place(n), rk);
  st = compile(&k, rk, err, errlen);
  if (st == KILN_OK && rt_debug_level() >= 3) debug_ir(&k);
  kir_free(&k);
  if (st == KILN_OK) remember(run, &rk->k);
  return st;
}

/* ------------------------------------------------- parallel compiling */

/* A kernel of a new schedule lowered up front, compiled with the others
 * on the pool's threads before the schedule runs. */
struct compile_job {
  kir_kernel k;
  ready_kernel rk;
  int status; /* KILN_OK when compiled */
  int same_as; /* an earlier job with the same code (compiled once), or -1 */
};

static void compile_jobs(void *const *bufs, int64_t start, int64_t end) {
  compile_job *jobs = bufs[0];
  char err[512];
  for (int64_t i = start; i < end; i++)
    if (jobs[i].same_as < 0) jobs[i].status = compile(&jobs[i].k, &jobs[i].rk, err, sizeof err);
}

/* Jobs whose code an earlier job compiles take its entry point (as a
 * cache hit) instead of compiling the same code on another thread. */
static void find_same_code(compile_job *jobs, int n) {
  for (int j = 0; j < n; j++) {
    jobs[j].same_as = -1;
    for (int i = 0; i < j && jobs[j].same_as < 0; i++)
      if (jobs[i].same_as < 0 && jobs[i].rk.k.backend == jobs[j].rk.k.backend &&
          kir_same_code(&jobs[i].k, &jobs[j].k))
        jobs[j].same_as = i;
  }
}

static void share_same_code(compile_job *jobs, int n) {
  for (int j = 0; j < n; j++) {
    const compile_job *src = jobs[j].same_as >= 0 ? &jobs[jobs[j].same_as] : NULL;
    if (!src) continue;
    jobs[j].status = src->status;
    jobs[j].rk.k.code = src->rk.k.code;
    jobs[j].rk.hit = true;
    jobs[j].rk.compile_ns = 0;
    jobs[j].rk.load_ns = 0;
  }
}

/* A copy that only moves a buffer to the other device: a CAST to the same
 * dtype reading all of its (realized, or materialized earlier in the
 * schedule) input in order. Runs as one transfer, never a kernel. */
static bool is_transfer(const graph_node *n) {
  if (n->op != GRAPH_OP_CAST) return false;
  const graph_node *in = n->inputs[0].node;
  const graph_view *v = &n->inputs[0].view;
  return in->device != n->device && !pass_is_inlined(in) && in->dtype == n->dtype && in->numel == n->numel &&
         v->offset == 0 && graph_view_is_contiguous(v);
}

static bool needs_kernel(const pass_plan *p, int i) {
  const graph_node *x = p->order[i];
  return pass_is_kernel_root(p, i) && graph_ops[x->op].kind != GRAPH_EXTERN && !is_transfer(x);
}

/* Lowers every kernel of a schedule whose structure is new and compiles
 * them in parallel, so its first force costs about the longest compile
 * per thread instead of their sum. Kernels that cannot be lowered up
 * front (their group is too big: the run's fallback handles them) are
 * left out; nothing here is required for correctness. */
static void prefetch(sched_run *run, int n) {
  int count = 0;
  for (int i = 0; i < n; i++) count += needs_kernel(run->plan, i);
  if (count < 2 || rt_pool_threads() < 2 || rt_debug_level() >= 3) return;
  run->jobs = graph_malloc(sizeof *run->jobs * (size_t)count);
  run->job_at = graph_malloc(sizeof *run->job_at * (size_t)n);
  if (!run->jobs || !run->job_at) { /* no prefetch: each kernel compiles when it runs */
    free(run->jobs);
    free(run->job_at);
    run->jobs = NULL;
    run->job_at = NULL;
    return;
  }
  int n_jobs = 0;
  char err[512];
  for (int i = 0; i < n; i++) {
    graph_node *x = run->plan->order[i];
    run->job_at[i] = -1;
    if (!needs_kernel(run->plan, i)) continue;
    compile_job *j = &run->jobs[n_jobs];
    bool in_place = can_write_in_place(x);
    if (pass_lower_node(run->plan, x, in_place, &j->k, &j->rk.k.binding, err, sizeof err) != KILN_OK) continue;
    describe(x, &j->k, i, in_place, &j->rk);
    j->status = KILN_ERR_UNSUPPORTED;
    run->job_at[i] = n_jobs++;
  }
  find_same_code(run->jobs, n_jobs);
  void *bufs[1] = {run->jobs};
  rt_pool_run(compile_jobs, bufs, n_jobs, RT_POOL_MIN_WORK);
  share_same_code(run->jobs, n_jobs);
  for (int i = 0; i < n_jobs; i++) kir_free(&run->jobs[i].k);
  run->n_jobs = n_jobs;
}

/* The prefetched kernel for n, when it compiled, its in-place decision
 * still holds and no fallback ran since (a fallback realizes nodes, which
 * then drop their inputs: bindings made before may name freed nodes). */
static bool from_prefetch(graph_node *n, int pos, sched_run *run, ready_kernel *rk) {
  int j = run->job_at && !run->fell_back ? run->job_at[pos] : -1;
  if (j < 0 || run->jobs[j].status != KILN_OK || run->jobs[j].rk.k.in_place != can_write_in_place(n)) return false;
  *rk = run->jobs[j].rk;
  remember(run, &rk->k);
  return true;
}

/* The cached kernel for n when the in-place decision still matches and
 * no fallback ran since (the cached bindings are rebound through the
 * inputs of the plan's nodes, which a realized node no longer has). With
 * KILN_DEBUG_CACHE=1 the kernel is also lowered again and compared. */
static bool from_cache(graph_node *n, int pos, sched_run *run, ready_kernel *rk, char *err, size_t errlen) {
  const rt_sched_kernel *ck = run->cached && !run->fell_back ? rt_schedule_kernel(run->cached, pos) : NULL;
  if (!ck || ck->in_place != can_write_in_place(n)) return false;
  rk->k = *ck;
  pass_rebind(&rk->k.binding, run->plan->order);
  rk->hit = true;
  rk->compile_ns = 0;
  rk->load_ns = 0;
  if (rt_debug_cache()) run->status = rt_check_cached_kernel(run->plan, n, &rk->k, err, errlen);
  return true;
}

/* Buffers for a multi-output kernel's extra results. A whole-buffer
 * write among them (fuse.c rule 7) goes into its old version's buffer
 * under the same rule as a write's own kernel (can_write_in_place; the
 * old version's other readers get their copy first, before the inputs
 * are bound), else into a new buffer: the kernel writes every element
 * either way, so its code does not depend on the choice. */
static int extra_outputs(const pass_binding *b, graph_buffer **outs, char *err, size_t errlen) {
  for (int j = 0; j < b->n_outputs; j++) {
    outs[j] = NULL;
    graph_node *s = (graph_node *)b->outputs[j];
    int st = output_buffer(s, can_write_in_place(s), &outs[j], err, errlen);
    if (st != KILN_OK) {
      for (int i = 0; i <= j; i++) graph_buffer_release(outs[i]);
      return st;
    }
  }
  return KILN_OK;
}

/* The extra results become their nodes' buffers (before the root's, whose
 * realization may drop the last reference to one of them). */
static void set_extra_outputs(const pass_binding *b, graph_buffer *const *outs) {
  for (int j = 0; j < b->n_outputs; j++) {
    graph_node *s = graph_node_retain((graph_node *)b->outputs[j]);
    graph_node_set_buffer(s, outs[j]);
    graph_node_release(s);
  }
}

/* Launches rk's kernel through its backend over the whole parallel
 * range; *t0 and *t1 are its start and end when timed (the end from
 * the device's own clock when it has one). */
static int launch(const graph_node *n, const ready_kernel *rk, const kernel_args *a, bool timed, rt_pool_span *spans,
                  rt_launch_result *res, int64_t *t0, int64_t *t1, char *err, size_t errlen) {
  const rt_sched_kernel *k = &rk->k;
  const pass_binding *b = &k->binding;
  rt_launch l = {.code = &k->code, .bufs = a->bufs, .n_bufs = 3 + b->n_outputs + b->n_inputs, .args = b->args,
                 .fargs = b->fargs, .n_args = b->n_args, .n_fargs = b->n_fargs, .extent = k->extent,
                 .split = k->split, .spans = spans};
  if (k->split && k->extent > 0) l.grain = pass_kernel_cost_of(n, k->in_place, b->n_ops).work / k->extent;
  *t0 = timed ? rt_now_ns() : 0; /* else no clock is read */
  int st = k->backend->launch(&l, res, err, errlen);
  *t1 = res->device_ns >= 0 ? *t0 + res->device_ns : timed ? rt_now_ns() : 0;
  return st;
}

static int execute(graph_node *n, ready_kernel *rk, char *err, size_t errlen) {
  graph_buffer *out = NULL, *outs[PASS_MAX_OUTPUTS];
  int st = output_buffer(n, rk->k.in_place, &out, err, errlen);
  int n_outs = 0; /* extra outputs held */
  if (st == KILN_OK) st = extra_outputs(&rk->k.binding, outs, err, errlen);
  if (st == KILN_OK) n_outs = rk->k.binding.n_outputs;
  kernel_args a;
  memset(a.staged, 0, sizeof a.staged);
  if (st == KILN_OK) st = bind_args(n, &rk->k.binding, out, outs, &a, err, errlen);
  static _Thread_local rt_pool_span spans[RT_POOL_MAX_THREADS];
  bool timed = rt_debug_level() >= 1 || rt_profiling();
  rt_launch_result res = {.threads = 1, .n_spans = 0, .device_ns = -1};
  int64_t t0 = 0, t1 = 0;
  if (st == KILN_OK) st = launch(n, rk, &a, timed, rt_profiling() ? spans : NULL, &res, &t0, &t1, err, errlen);
  release_args(&a, rk->k.binding.n_inputs);
  if (st != KILN_OK) {
    graph_buffer_release(out);
    for (int j = 0; j < n_outs; j++) graph_buffer_release(outs[j]);
    return st;
  }
  if (timed) report(n, rk, res.threads, t0, t1, spans, res.n_spans);
  set_extra_outputs(&rk->k.binding, outs);
  graph_node_set_buffer(n, out);
  return KILN_OK;
}

/* Runs a transfer: one host <-> device copy, reported as a kernel named
 * copy_h2d_<bytes> or copy_d2h_<bytes>. */
static int run_transfer(graph_node *n, char *err, size_t errlen) {
  const graph_buffer *src = n->inputs[0].node->buffer;
  graph_buffer *out = NULL;
  int64_t t0 = rt_now_ns();
  int st = rt_buffer_copy_to(src, n->device, &out, err, errlen);
  int64_t t1 = rt_now_ns();
  if (st != KILN_OK) {
    graph_buffer_release(out);
    return st;
  }
  if (rt_debug_level() >= 1 || rt_profiling()) {
    const graph_buffer *dev = n->device == KILN_CUDA ? out : src;
    char name[64];
    snprintf(name, sizeof name, "copy_%s_%lld", n->device == KILN_CUDA ? "h2d" : "d2h", (long long)src->bytes);
    kiln_kernel_record r = {.name = name, .backend = rt_buffer_backend(dev)->name, .n_ops = 1,
                            .numel = n->numel, .bytes_read = src->bytes, .bytes_written = src->bytes,
                            .run_ns = t1 - t0, .cache_hit = true, .threads = 1};
    if (rt_debug_level() >= 1) rt_debug_kernel(&r, n->ndim, n->sizes);
    if (rt_profiling()) rt_profile_add(&r, t0, NULL, 0);
  }
  graph_node_set_buffer(n, out);
  return KILN_OK;
}

/* The last matmul of a hand-written attention the fusion pass planned
 * (passes/attention_plan.c: its chain never runs); a MATMUL whose elementwise
 * epilogue its GEMM applies (gemm_fused.c: the epilogue kernel's result
 * is computed here, its kernel skipped; not in the unfused mode); else
 * the extern op. */
static int run_extern(graph_node *n, int pos, sched_run *run, char *err, size_t errlen) {
  graph_attention m;
  if (fusion_enabled() && pass_attention_planned(run->plan, n, &m)) return rt_attention_matmul(n, &m, err, errlen);
  bool done = false;
  if (n->op == GRAPH_OP_MATMUL && fusion_enabled()) {
    int st = rt_gemm_fused_run(run->plan, pos, run->roots, run->n_roots, &done, err, errlen);
    if (st != KILN_OK || done) return st;
  }
  return rt_run_extern(n, err, errlen);
}

static int run_node(graph_node *n, int pos, sched_run *run, char *err, size_t errlen) {
  if (graph_ops[n->op].kind == GRAPH_EXTERN) return run_extern(n, pos, run, err, errlen);
  if (is_transfer(n) && n->inputs[0].node->buffer) return run_transfer(n, err, errlen);
  ready_kernel rk;
  if (!from_cache(n, pos, run, &rk, err, errlen) && !from_prefetch(n, pos, run, &rk)) {
    int st = prepare(n, pos, run, &rk, err, errlen);
    if (st != KILN_OK) return st;
  }
  return run->status != KILN_OK ? run->status : execute(n, &rk, err, errlen);
}

/* rt_realize calls made while a schedule runs (a lowering fallback, an
 * extern op's pending inputs) on this thread. */
static _Thread_local int nesting;

/* The schedule cache serves outermost schedules only (the key lives in a
 * per-thread buffer) and is skipped at KILN_DEBUG >= 3 (the kernel IR is
 * printed as it is lowered). */
static bool use_schedule_cache(void) { return nesting == 0 && rt_debug_level() < 3; }

/* Looks the plan up in the schedule cache (run->cached). */
static const unsigned char *find_schedule(graph_node *const *nodes, int n, sched_run *run, size_t *key_len) {
  const unsigned char *key = rt_schedule_key(run->plan, nodes, n, fusion_enabled(), key_len);
  run->cached = key ? rt_schedule_find(key, *key_len) : NULL;
  return key;
}

/* The schedule cache is looked up before simplification: a hit means the
 * graph has the structure of one that simplification left unchanged (a
 * schedule is cached under the key of the graph fusion ran on), so it is
 * skipped. That is exact: which rewrites apply depends on the structure
 * alone, except the identities x*1, x/1, x-0 on fill values, which are
 * not in the key and compute the same values unrewritten. On a miss the
 * graph is simplified and, when that changed it, looked up again. */
static bool plan(graph_node *const *nodes, int n, sched_run *run, const unsigned char **key, size_t *key_len) {
  if (!pass_plan_collect(run->plan, nodes, n)) return false;
  if (run->cacheable) *key = find_schedule(nodes, n, run, key_len);
  if (run->cached) {
    run->cacheable = false; /* nothing new to cache */
    return true;
  }
  bool oom = false;
  if (simplify(nodes, n, run->plan, &oom) && run->cacheable && !oom) *key = find_schedule(nodes, n, run, key_len);
  run->cacheable = run->cacheable && *key && !run->cached;
  return !oom;
}

/* Fusion decisions: the cached schedule's, or pass_fuse's (then kept in
 * *decided for the cache, before running frees nodes). */
static void decide(graph_node *const *nodes, int n, sched_run *run, rt_decision **decided, char *err, size_t errlen) {
  pass_plan *p = run->plan;
  if (run->cached) {
    rt_schedule_apply(run->cached, p);
    if (rt_debug_cache())
      run->status = rt_check_cached_decisions(run->cached, p, nodes, n, fusion_enabled(), err, errlen);
    return;
  }
  pass_fuse(p, nodes, n, fusion_enabled());
  *decided = run->cacheable ? graph_malloc(sizeof **decided * (size_t)(p->n ? p->n : 1)) : NULL;
  if (*decided) rt_decisions_get(p, *decided);
  run->cacheable = *decided != NULL;
  prefetch(run, p->n);
}

/* After the outermost force: every node it realized lets go of the inputs
 * no gradient needs (graph_node_settle), in plan order, so a release
 * frees only nodes at earlier positions, already visited; the nodes left
 * pending (computed inside kernels, and the fills they read inline) are
 * recipe now, no longer counted as pending work (graph_node_retire),
 * when the force ran. */
static void settle(const pass_plan *p, bool ran) {
  int64_t realized = 0;
  for (int i = 0; i < p->n; i++) realized += p->order[i]->buffer != NULL;
  int64_t share = realized ? (p->n - realized) / realized : 0; /* pending nodes each recipe may hold */
  for (int i = 0; i < p->n; i++) {
    graph_node *n = p->order[i];
    if (n->buffer) {
      n->hist_share = share; /* the plan holds only nodes pending when it was collected */
      graph_node_settle(n);
    }
    if (!ran) continue; /* a failed force leaves its work pending */
    graph_node_retire(n);
    for (int k = 0; k < n->n_inputs + n->n_hist; k++) graph_node_retire(n->inputs[k].node); /* fills read inline */
  }
}

int rt_realize(graph_node *const *nodes, int n, char *err, size_t errlen) {
  int ready = rt_backend_ready(err, errlen);
  if (ready != KILN_OK) return ready;
  rt_alloc_install();
  pass_plan p;
  pass_plan_init(&p);
  sched_run run = {.plan = &p, .cacheable = use_schedule_cache(), .roots = nodes, .n_roots = n};
  size_t key_len = 0;
  const unsigned char *key = NULL;
  if (!plan(nodes, n, &run, &key, &key_len)) {
    pass_plan_free(&p);
    snprintf(err, errlen, "out of memory scheduling %d nodes", n);
    return KILN_ERR_OOM;
  }
  /* No retains needed: a node realized during the force keeps its inputs
   * until the force ends (settle), so no node of the plan is freed while
   * the plan runs, nested lowering fallbacks included. */
  rt_decision *decided = NULL;
  decide(nodes, n, &run, &decided, err, errlen);
  if (rt_debug_level() >= 2) rt_debug_schedule(&p, run.cached != NULL);
  int st = run.status;
  nesting++;
  for (int i = 0; i < p.n && st == KILN_OK; i++)
    if (pass_is_kernel_root(&p, i)) st = run_node(p.order[i], i, &run, err, errlen);
  nesting--;
  if (!nesting) settle(&p, st == KILN_OK);
  if (st == KILN_OK && run.cacheable) rt_schedule_insert(key, key_len, decided, p.n, run.kernels, run.n_kernels);
  free(decided);
  free(run.jobs);
  free(run.job_at);
  free(run.kernels);
  pass_plan_free(&p);
  return st;
}
