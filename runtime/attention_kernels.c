/*
 * attention_kernels.c — the fused attention kernels: ATTENTION and
 * ATTENTION_BWD (graph/ops.def), and a hand-written attention's last
 * matmul (rt_attention_matmul): softmax(q·kᵀ·scale + mask)·v and its
 * gradients, computed block by block so that the [L, S] scores never
 * exist (docs/internals.md, "Attention").
 *
 * Forward, one pool item per (batch, block of br queries; br about 64,
 * a multiple of the micro-kernel's MR): the block's scores against BC
 * keys at a time (S = Q_i·K_jᵀ, a product through the generated
 * micro-kernel over packed panels: rt_gemm_block_panels), scaled and
 * masked in place, then an online softmax — each row keeps its running
 * maximum m and sum l; a new block with a larger maximum rescales the
 * row's sum and its output accumulator by exp(m_old − m_new) — and the
 * accumulator gets P_ij·V_j (a second product). At the end O = acc / l
 * (and, when asked, the rows' log-sum-exp m + log l).
 *
 * Backward (FlashAttention-2's recomputation): the rows' log-sum-exp
 * first (the forward's sweep without v), then P_ij = exp(S_ij − lse_i)
 * is recomputed per block, dV_j += P_ijᵀ·dO_i, dS = P ∘ (dO_i·V_jᵀ −
 * D_i)·scale with D = rowsum(dO ∘ O) given, dK_j += dS_ijᵀ·Q_i and
 * dQ_i += dS_ij·K_j. With at least as many batches as threads an item
 * is a batch (one sweep); else one item per (batch, key block) makes
 * dK_j and dV_j and one per (batch, query block) dQ_i, so no two items
 * write one element and no atomics are needed. Every sum runs in a fixed
 * order: results do not depend on the thread count. Causal masks skip
 * the blocks they mask whole.
 *
 * Each pool chunk packs a batch's operands once as the micro-kernel's
 * panels (Kᵀ and V; for the backward also Q and dO, and Vᵀ, Q, K as the
 * products read them) and keeps a few [br, BC] blocks: O((L + S)·(E +
 * Ev)) per thread besides inputs and results. Rows with no key kept (a
 * BOOL mask false throughout) give NaN, as Torch's math attention.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "device.h"
#include "matmul_dims.h"
#include "pool.h"
#include "rt_internal.h"

enum { BC = 64 }; /* keys per block: a multiple of every NR (the packed Kᵀ's panels start at block starts) */

/* The parts of a chunk's scratch: the blocks one item works on — scores
 * or P and dS [br, BC], the accumulator, the rows' m and l, a block
 * packed as A panels, Q_i packed — then the current batch's operands
 * packed once as the micro-kernel's panels: Kᵀ and V (K-dim S) for the
 * forward; Q and dO as A panels, Vᵀ, and dO, Q, K as B panels over their
 * rows for the backward. */
enum att_part { P_S, P_DS, P_ACC, P_ML, P_BLK, P_QI, P_KT, P_VB, P_QA, P_DOA, P_VT, P_DOB, P_QB, P_KB, P_COUNT };

/* The job: one attention (rt_attention) and where its kernels write. */
typedef struct att_job {
  rt_attention a;
  rt_gemm_block g;
  int esz;
  int64_t br; /* queries per block: about 64, a multiple of MR and even (the packed Q's panels start at block starts) */
  char *out;  /* forward: O [B, L, Ev]; backward: dQ [B, L, E], then d(kv) [B, S, E + Ev] */
  char *lse;  /* [B, L]: the forward writes it when not NULL; the backward computes it first */
  int64_t off[P_COUNT + 1]; /* byte offsets of the parts (layout), then the scratch's size */
  atomic_bool oom;
} att_job;

static const char *at(const rt_attention_operand *o, int nb, int64_t i, int64_t r, int64_t c, int esz) {
  return o->base + (mm_batch_offset(o->view, nb, i) + r * o->rs + c * o->cs) * esz;
}

static int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }

/* Operand i of n read from data: its view's offset applied, and shifted
 * by `col` columns. */
static rt_attention_operand operand(const graph_node *n, int i, const void *data, int64_t col) {
  const graph_view *v = &n->inputs[i].view;
  int esz = graph_dtypes[n->inputs[i].node->dtype].size, nd = v->ndim;
  int64_t rs = v->strides[nd - 2], cs = v->strides[nd - 1];
  return (rt_attention_operand){.base = (const char *)data + (v->offset + col * cs) * esz, .view = v, .rs = rs,
                                .cs = cs};
}

/* The sizes, scale and mask kind of node n (ATTENTION or ATTENTION_BWD:
 * graph/ops.def), no operand. */
static rt_attention dims_of(const graph_node *n) {
  const graph_view *qv = &n->inputs[0].view, *kvv = &n->inputs[1].view;
  int nd = qv->ndim;
  rt_attention a = {.dtype = n->dtype, .nb = nd - 2, .batches = 1, .L = qv->sizes[nd - 2], .S = kvv->sizes[nd - 2],
                    .E = (int64_t)graph_attr_scalar2(n), .scale = graph_attr_scalar(n),
                    .kind = (int)graph_attr_reduce_mask(n)};
  a.Ev = kvv->sizes[nd - 1] - a.E;
  for (int d = 0; d < a.nb; d++) a.batches *= qv->sizes[d];
  return a;
}

/* The attention of node n over host data in[]: q (or the backward's
 * rows: q, dO and D side by side), k and v (kv's two parts), the mask. */
static rt_attention attention_of(const graph_node *n, const void *const *in) {
  rt_attention a = dims_of(n);
  a.q = operand(n, 0, in[0], 0);
  a.k = operand(n, 1, in[1], 0);
  a.v = operand(n, 1, in[1], a.E);
  if (n->op == GRAPH_OP_ATTENTION_BWD) {
    a.dout = operand(n, 0, in[0], a.E);
    a.dsum = operand(n, 0, in[0], a.E + a.Ev);
  }
  if (a.kind == GRAPH_ATTENTION_MASK) {
    a.mask = operand(n, 2, in[2], 0);
    a.bool_mask = n->inputs[2].node->dtype == KILN_BOOL;
  }
  return a;
}

static int64_t max64(int64_t x, int64_t y) { return x > y ? x : y; }
static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* The chunk scratch's layout into j->off: with `bwd` the backward's
 * parts, else the forward's (and the log-sum-exp pass's); 0 bytes for a
 * part not needed. */
static void layout(att_job *j, bool bwd) {
  const rt_attention *a = &j->a;
  int64_t mr = j->g.spec.mr, nr = j->g.spec.nr, br = j->br, big = max64(br, BC), n[P_COUNT] = {0};
  n[P_S] = br * BC, n[P_ACC] = big * (a->E + a->Ev), n[P_ML] = 2 * br, n[P_BLK] = round_up(big, mr) * big;
  n[P_KT] = round_up(a->S, nr) * a->E;
  if (!bwd) {
    n[P_QI] = round_up(br, mr) * a->E, n[P_VB] = round_up(a->Ev, nr) * a->S;
  } else {
    n[P_DS] = br * BC, n[P_QA] = round_up(a->L, mr) * a->E, n[P_DOA] = round_up(a->L, mr) * a->Ev;
    n[P_VT] = round_up(a->S, nr) * a->Ev, n[P_DOB] = round_up(a->Ev, nr) * a->L;
    n[P_QB] = round_up(a->E, nr) * a->L, n[P_KB] = round_up(a->E, nr) * a->S;
  }
  j->off[0] = 0;
  for (int i = 0; i < P_COUNT; i++) j->off[i + 1] = j->off[i] + round_up(n[i] * j->esz, 64);
}

static int job_init(att_job *j, const rt_attention *a, void *out, void *lse, char *err, size_t errlen) {
  *j = (att_job){.a = *a, .esz = graph_dtypes[a->dtype].size, .out = out, .lse = lse};
  atomic_init(&j->oom, false);
  int st = rt_gemm_block_init(&j->g, a->dtype, err, errlen);
  if (st != KILN_OK) return st;
  int64_t mr = j->g.spec.mr, step = mr % 2 ? 2 * mr : mr;
  j->br = round_up(64, step);
  if (BC % j->g.spec.nr == 0) return KILN_OK;
  snprintf(err, errlen, "the attention kernel needs a micro-kernel whose NR divides %d, not %d", BC, j->g.spec.nr);
  return KILN_ERR_UNSUPPORTED;
}

/* ------------------------------------------------------- row work */

/* The rows of a block are processed BC elements wide (columns past a
 * short block's end hold -inf: exp gives 0 there). F32 rows are loops the
 * compiler vectorizes (this file is built with -O3), in a clone per ISA
 * the host may have, picked at load time (target_clones; the products
 * are the JIT's micro-kernel; sanitizer builds have the baseline's
 * alone); F64 rows go through libm's exp. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define ATT_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define ATT_SANITIZED 1
#endif
/* No clones in sanitizer builds: their ifunc resolvers run while the
 * library is relocated, before a sanitizer's runtime starts (TSan then
 * crashes at load). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(ATT_SANITIZED)
#define ROW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ROW_CLONES
#endif

enum { LANES = 16 }; /* partial sums per row: a fixed order, whatever the ISA */

/* e^x: Cody and Waite's reduction x = n·ln 2 + r, |r| ≤ ln 2 / 2, and
 * Cephes' degree-7 polynomial for e^r (at most 1.02 ulp from e^x on
 * [-87, 0], checked ad hoc against double exp),
 * scaled by 2^n through the exponent bits; 0 below -87.3 (where expf is
 * subnormal), +inf above 88, NaN for NaN. Branch-free: it vectorizes. */
static inline __attribute__((always_inline)) float fexp(float x) {
  float xc = x < -87.33654f ? -87.33654f : x > 88.0f ? 88.0f : x;
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  float y = p * scale;
  y = x < -87.33654f ? 0.0f : y;
  y = x > 88.0f ? INFINITY : y;
  return x != x ? x : y;
}

/* The row's largest element (NaN ignored; -inf when none). */
ROW_CLONES static float row_max_f32(const float *x) {
  float m[LANES];
  for (int k = 0; k < LANES; k++) m[k] = -INFINITY;
  for (int c = 0; c < BC; c += LANES)
    for (int k = 0; k < LANES; k++) m[k] = x[c + k] > m[k] ? x[c + k] : m[k];
  float t = -INFINITY;
  for (int k = 0; k < LANES; k++) t = m[k] > t ? m[k] : t;
  return t;
}

/* x = exp(x − sub) over the row; returns its sum. */
ROW_CLONES static float exp_sum_f32(float *restrict x, float sub) {
  float part[LANES] = {0};
  for (int c = 0; c < BC; c++) x[c] = fexp(x[c] - sub);
  for (int c = 0; c < BC; c += LANES)
    for (int k = 0; k < LANES; k++) part[k] += x[c + k];
  float t = 0;
  for (int k = 0; k < LANES; k++) t += part[k];
  return t;
}

/* p = exp(p − lse), ds = p ∘ (ds − d)·scale over the row. */
ROW_CLONES static void grad_row_f32(float *restrict p, float *restrict ds, float lse, float d, float scale) {
  for (int c = 0; c < BC; c++) {
    p[c] = fexp(p[c] - lse);
    ds[c] = p[c] * (ds[c] - d) * scale;
  }
}

static double row_max_f64(const double *x) {
  double t = -INFINITY;
  for (int c = 0; c < BC; c++) t = x[c] > t ? x[c] : t;
  return t;
}

static double exp_sum_f64(double *x, double sub) {
  double sum = 0;
  for (int c = 0; c < BC; c++) sum += x[c] = exp(x[c] - sub);
  return sum;
}

static void grad_row_f64(double *p, double *ds, double lse, double d, double scale) {
  for (int c = 0; c < BC; c++) {
    p[c] = exp(p[c] - lse);
    ds[c] = p[c] * (ds[c] - d) * scale;
  }
}

#define ATT_T float
#define ATT_LOG logf
#define ATT_SFX f32
#include "attention_kernels_impl.h"
#define ATT_T double
#define ATT_LOG log
#define ATT_SFX f64
#include "attention_kernels_impl.h"

/* Runs chunk over items on the pool (each chunk allocates the scratch
 * of j's layout). */
static int run_items(att_job *j, llvm_kernel_fn chunk, int64_t items, double macs_per_item, char *err,
                     size_t errlen) {
  if (items <= 0) return KILN_OK;
  void *bufs[1] = {j};
  int64_t cost = macs_per_item / 16 > 1e15 ? INT64_C(1000000000000000) : (int64_t)(macs_per_item / 16) + 1;
  rt_pool_run(chunk, bufs, items, cost);
  if (!atomic_load(&j->oom)) return KILN_OK;
  snprintf(err, errlen, "out of memory allocating the attention kernel's blocks");
  return KILN_ERR_OOM;
}

int rt_attention_run(const rt_attention *a, void *out, void *lse, char *err, size_t errlen) {
  att_job j;
  int st = job_init(&j, a, out, lse, err, errlen);
  if (st != KILN_OK) return st;
  layout(&j, false);
  double macs = (double)j.br * (double)a->S * (double)(a->E + a->Ev);
  bool f64 = a->dtype == KILN_F64;
  return run_items(&j, f64 ? fwd_chunk_f64 : fwd_chunk_f32, a->batches * ((a->L + j.br - 1) / j.br), macs, err,
                   errlen);
}

int rt_attention_forward(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen) {
  rt_attention a = attention_of(n, in);
  return rt_attention_run(&a, out->data, NULL, err, errlen);
}

int rt_attention_backward(const graph_node *n, const void *const *in, graph_buffer *out, char *err,
                          size_t errlen) {
  rt_attention a = attention_of(n, in);
  att_job j;
  graph_buffer *lse = graph_buffer_alloc(a.batches * a.L * graph_dtypes[a.dtype].size);
  int st = lse ? job_init(&j, &a, out->data, lse->data, err, errlen) : KILN_ERR_OOM;
  if (!lse) snprintf(err, errlen, "out of memory allocating the attention backward's row statistics");
  bool f64 = a.dtype == KILN_F64;
  int64_t qb = st == KILN_OK ? (a.L + j.br - 1) / j.br : 0;
  if (st == KILN_OK) { /* the rows' log-sum-exp first: the forward's sweep without its products with v */
    layout(&j, false);
    double macs = (double)j.br * (double)a.S * (double)a.E;
    st = run_items(&j, f64 ? lse_chunk_f64 : lse_chunk_f32, a.batches * qb, macs, err, errlen);
  }
  if (st == KILN_OK) layout(&j, true);
  if (st == KILN_OK && a.batches >= rt_pool_threads()) { /* a batch per item: one sweep, P made once */
    double macs = (double)a.L * (double)a.S * (double)(3 * a.E + 2 * a.Ev);
    st = run_items(&j, f64 ? batch_chunk_f64 : batch_chunk_f32, a.batches, macs, err, errlen);
  } else if (st == KILN_OK) { /* dK and dV per key block, then dQ per query block */
    double macs = (double)BC * (double)a.L * (double)(2 * a.E + 2 * a.Ev);
    st = run_items(&j, f64 ? dkv_chunk_f64 : dkv_chunk_f32, a.batches * ((a.S + BC - 1) / BC), macs, err, errlen);
    macs = (double)j.br * (double)a.S * (double)(2 * a.E + a.Ev);
    if (st == KILN_OK) st = run_items(&j, f64 ? dq_chunk_f64 : dq_chunk_f32, a.batches * qb, macs, err, errlen);
  }
  graph_buffer_release(lse);
  return st;
}

/* ------------------------------------- a hand-written attention's matmul */

/* Edge e of a planned attention as a kernel operand (the view's offset
 * applied; its rows and columns swapped with `transpose`). */
static rt_attention_operand edge_operand(const graph_input *e, bool transpose) {
  const graph_view *v = &e->view;
  int nd = v->ndim, esz = graph_dtypes[e->node->dtype].size;
  int64_t rs = v->strides[nd - 2], cs = v->strides[nd - 1];
  return (rt_attention_operand){.base = (const char *)e->node->buffer->data + v->offset * esz, .view = v,
                                .rs = transpose ? cs : rs, .cs = transpose ? rs : cs};
}

/* The profiler record of a's forward (bwd false) or backward kernel
 * that read bytes_read and wrote numel elements: attention_BxLxSxE
 * (attention_bwd_...; f64_ after the op for F64), the multiply-adds of
 * its products counted as flops (2 each). */
static void fill_record(const rt_attention *a, bool bwd, int64_t bytes_read, int64_t numel, kiln_kernel_record *r,
                        char *name, size_t len) {
  snprintf(name, len, "attention_%s%s%lldx%lldx%lldx%lld", bwd ? "bwd_" : "", a->dtype == KILN_F64 ? "f64_" : "",
           (long long)a->batches, (long long)a->L, (long long)a->S, (long long)a->E);
  /* forward: S and P·V; backward: S for the log-sum-exp, then S, dP, dV,
   * dK and dQ once each (the two-sweep schedule for few batches makes S
   * and dP once more: not counted) */
  int64_t macs = a->batches * a->L * a->S * (bwd ? 4 * a->E + 2 * a->Ev : a->E + a->Ev);
  if (a->kind == GRAPH_ATTENTION_CAUSAL) macs /= 2; /* about half the blocks */
  *r = (kiln_kernel_record){.name = name,
                            .backend = "llvm",
                            .n_ops = 1,
                            .numel = numel,
                            .bytes_read = bytes_read,
                            .bytes_written = numel * graph_dtypes[a->dtype].size,
                            .flops = 2 * macs,
                            .run_ns = r->run_ns,
                            .cache_hit = true,
                            .threads = rt_pool_threads()};
}

void rt_attention_describe(const graph_node *n, bool on_device, kiln_kernel_record *r, char *name, size_t len) {
  int64_t in = 0;
  for (int i = 0; i < n->n_inputs; i++)
    in += graph_view_numel(&n->inputs[i].view) * graph_dtypes[n->inputs[i].node->dtype].size;
  rt_attention a = dims_of(n);
  fill_record(&a, n->op == GRAPH_OP_ATTENTION_BWD, in, n->numel, r, name, len);
}

/* The record of a hand-written attention's forward run from t0 to t1. */
static void record(const rt_attention *a, int64_t t0, int64_t t1, int64_t numel) {
  if (rt_debug_level() < 1 && !rt_profiling()) return;
  char name[96];
  kiln_kernel_record r = {.run_ns = t1 - t0};
  int64_t bytes_read = a->batches * (a->L * a->E + a->S * (a->E + a->Ev)) * graph_dtypes[a->dtype].size;
  fill_record(a, false, bytes_read, numel, &r, name, sizeof name);
  if (rt_debug_level() >= 1) rt_debug_kernel(&r, 0, NULL);
  if (rt_profiling()) rt_profile_add(&r, t0, NULL, 0);
}

int rt_attention_matmul(graph_node *o, const graph_attention *m, char *err, size_t errlen) {
  const graph_input *edges[] = {m->q, m->kt, m->v, m->mask};
  for (int i = 0; i < 4; i++) {
    graph_node *x = edges[i] ? edges[i]->node : NULL;
    int st = !x || x->buffer ? KILN_OK : rt_realize(&x, 1, err, errlen); /* a leaf the chain would have fused */
    if (st != KILN_OK) return st;
  }
  int nd = o->ndim;
  const graph_view *qv = &m->q->view, *vv = &m->v->view;
  rt_attention a = {.dtype = o->dtype, .nb = nd - 2, .batches = 1, .L = qv->sizes[nd - 2],
                    .S = vv->sizes[nd - 2], .E = qv->sizes[nd - 1], .Ev = vv->sizes[nd - 1], .scale = m->scale,
                    .kind = m->kind, .q = edge_operand(m->q, false), .k = edge_operand(m->kt, true),
                    .v = edge_operand(m->v, false)};
  for (int d = 0; d < a.nb; d++) a.batches *= o->sizes[d];
  if (m->mask) {
    a.mask = edge_operand(m->mask, false);
    a.bool_mask = m->mask->node->dtype == KILN_BOOL;
  }
  graph_buffer *out = NULL;
  int st = rt_buffer_alloc(KILN_CPU, o->numel * graph_dtypes[o->dtype].size, &out, err, errlen);
  int64_t t0 = rt_now_ns();
  if (st == KILN_OK) st = rt_attention_run(&a, out->data, NULL, err, errlen);
  if (st != KILN_OK) {
    graph_buffer_release(out);
    return st;
  }
  record(&a, t0, rt_now_ns(), o->numel);
  graph_node_set_buffer(o, out);
  return KILN_OK;
}
