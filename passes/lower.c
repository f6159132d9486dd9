/*
 * lower.c — lowers one kernel (a materialized root node plus the pending
 * producers fused into it) to kernel IR.
 *
 * Loop nests follow the root: elementwise and cast roots loop over their
 * sizes, reductions over the input's kept dims then its reduced dims (a
 * column reduction over blocks of columns: lower_columns.c),
 * ASSIGN over the storage (copy, unless in place) then the region. A value
 * is produced by value_at(node, index): a fused producer is computed at
 * the index its reader's view names (map_index turns the reader's view
 * into the producer's multi-index, by matching strides when the view is a
 * permutation / broadcast / narrowing of the producer, else by div/mod of
 * the flat index); anything else is an external read through a parameter.
 * Each fused value is rounded to its node's dtype, so fusion changes no
 * result compared with one kernel per node (KILN_FUSE=0).
 *
 * External reads are collected by a walk before the loops open, so their
 * offsets and fill values are loaded once at kernel entry. The
 * optimisation choices (unrolling, tiles, streaming stores, column
 * blocks, the row kernels' spill, scan lanes, scatter slabs) are the
 * kernel's options record, filled by heuristics.c before it is lowered;
 * this file only follows them (and opens a written region's loops in the
 * order of its strides: write_order).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lower_ctx.h"
#include "semantics.h"


bool pass_is_inlined(const graph_node *n) {
  return !n->buffer && (n->op == GRAPH_OP_FULL || n->op == GRAPH_OP_ARANGE);
}

bool pass_whole_write(const graph_node *n) {
  if (n->op != GRAPH_OP_ASSIGN) return false;
  graph_view r = graph_attr_region(n);
  return r.offset == 0 && graph_view_numel(&r) == n->numel && graph_view_is_contiguous(&r);
}

int64_t pass_parallel_extent(const kir_kernel *k) {
  for (int i = 0; i < k->n_uops; i++)
    if (k->uops[i].op == KIR_RANGE && k->uops[i].parallel) return k->uops[i].ival;
  return 0;
}

/* Computed inside this kernel: fused, or stored by it (multi-output). */
static bool is_fused(const lower_ctx *c, const graph_node *n) { return pass_computed_in(c->plan, n, c->host); }

/* ------------------------------------------------------------ indexing */

/* off + sum(idx[d] * stride[d]) over dims with an index; idx[d] = -1 (no
 * loop) contributes nothing. `off` is a KIR_INDEX uop or -1 for 0. */
static int view_index(kir_kernel *k, const graph_view *v, const int *idx, int off) {
  int r = -1;
  for (int d = 0; d < v->ndim; d++) {
    if (idx[d] < 0 || v->strides[d] == 0 || v->sizes[d] == 1) continue;
    int term = idx[d];
    if (v->strides[d] != 1) term = pass_alu2(k, KIR_MUL, term, kir_const_i(k, KIR_INDEX, v->strides[d]));
    r = r < 0 ? term : pass_alu2(k, KIR_ADD, r, term);
  }
  if (off < 0 && r < 0) return kir_const_i(k, KIR_INDEX, 0);
  if (off >= 0) r = r < 0 ? off : pass_alu2(k, KIR_ADD, r, off);
  return r;
}

/* The producer's coordinates when the reader's view walks it dim by dim:
 * every non-broadcast reader dim steps inside one producer dim (its
 * stride a multiple of that dim's contiguous stride, less than the next
 * outer one's), the offset splits into per-dim starts, and no producer
 * coordinate can leave its dim. Several reader dims may step in one
 * producer dim (a reshape that splits it: [N, C, H·W] read as [N, C, H,
 * W]); that coordinate is then the sum of their terms — the exact mixed-
 * radix split of the flat index, without a division. */
typedef struct shape {
  int ndim;
  const int64_t *sizes;
} shape;

/* The producer dim reader stride `stride` steps in: the innermost j of
 * size > 1 with cs[j] dividing it and stride / cs[j] < sizes[j]; -1 for
 * none. */
static int stepped_dim(const shape *src, const int64_t *cs, int64_t stride) {
  for (int j = src->ndim - 1; j >= 0; j--)
    if (src->sizes[j] > 1 && stride % cs[j] == 0 && stride / cs[j] < src->sizes[j]) return j;
  return -1;
}

static bool map_by_strides(kir_kernel *k, const graph_view *v, const shape *src, const int *idx, int *out) {
  int64_t cs[KILN_MAX_DIMS], start[KILN_MAX_DIMS], reach[KILN_MAX_DIMS], off = v->offset;
  graph_contiguous_strides(src->ndim, src->sizes, cs);
  for (int j = 0; j < src->ndim; j++) {
    start[j] = src->sizes[j] > 1 ? off / cs[j] : 0;
    off -= start[j] * cs[j];
    reach[j] = start[j];
    if (start[j] >= (src->sizes[j] > 1 ? src->sizes[j] : 1)) return false;
  }
  if (off != 0) return false;
  int pick[KILN_MAX_DIMS];
  for (int d = 0; d < v->ndim; d++) {
    pick[d] = -1;
    if (v->sizes[d] == 1 || v->strides[d] == 0) continue;
    if (v->strides[d] < 0 || (pick[d] = stepped_dim(src, cs, v->strides[d])) < 0) return false;
    reach[pick[d]] += (v->sizes[d] - 1) * (v->strides[d] / cs[pick[d]]);
  }
  for (int j = 0; j < src->ndim; j++)
    if (reach[j] >= (src->sizes[j] > 1 ? src->sizes[j] : 1)) return false;
  for (int j = 0; j < src->ndim; j++) out[j] = -1;
  for (int d = 0; d < v->ndim; d++) {
    if (pick[d] < 0) continue;
    int j = pick[d];
    int64_t step = v->strides[d] / cs[j];
    int term = step == 1 ? idx[d] : pass_alu2(k, KIR_MUL, idx[d], kir_const_i(k, KIR_INDEX, step));
    out[j] = out[j] < 0 ? term : pass_alu2(k, KIR_ADD, out[j], term);
  }
  for (int j = 0; j < src->ndim; j++) {
    if (out[j] < 0) out[j] = kir_const_i(k, KIR_INDEX, start[j]);
    else if (start[j]) out[j] = pass_alu2(k, KIR_ADD, out[j], kir_const_i(k, KIR_INDEX, start[j]));
  }
  return true;
}

/* The producer's coordinates when each reader dim walks a run of
 * adjacent producer dims of its own (a reshape that merges them: [N, C,
 * 14, 2, 14, 2] read as [N, C, 28, 28]): coordinate j of the run is
 * (idx · step / inner) % size[j], inner the product of the run's sizes
 * inside j — divisions of one small index by small constants, which
 * vectorize, instead of splitting the flat index. No offset, no
 * negative strides, no producer dim walked by two reader dims. */
static bool map_by_runs(kir_kernel *k, const graph_view *v, const shape *src, const int *idx, int *out) {
  int64_t cs[KILN_MAX_DIMS];
  bool taken[KILN_MAX_DIMS] = {false};
  if (v->offset != 0) return false;
  graph_contiguous_strides(src->ndim, src->sizes, cs);
  for (int j = 0; j < src->ndim; j++) out[j] = -1;
  for (int d = 0; d < v->ndim; d++) {
    if (v->sizes[d] == 1 || v->strides[d] == 0) continue;
    int j = v->strides[d] > 0 ? stepped_dim(src, cs, v->strides[d]) : -1;
    if (j < 0) return false;
    int64_t step = v->strides[d] / cs[j], top = (v->sizes[d] - 1) * step, inner = 1;
    int q = step == 1 ? idx[d] : pass_alu2(k, KIR_MUL, idx[d], kir_const_i(k, KIR_INDEX, step));
    for (; j >= 0 && top / inner > 0; j--) {
      if (src->sizes[j] == 1) continue;
      if (taken[j]) return false;
      taken[j] = true;
      int c = inner == 1 ? q : pass_alu2(k, KIR_DIV, q, kir_const_i(k, KIR_INDEX, inner));
      if (top / inner >= src->sizes[j]) c = pass_alu2(k, KIR_MOD, c, kir_const_i(k, KIR_INDEX, src->sizes[j]));
      out[j] = c;
      inner *= src->sizes[j];
    }
    if (top / inner > 0) return false;
  }
  for (int j = 0; j < src->ndim; j++)
    if (out[j] < 0) out[j] = kir_const_i(k, KIR_INDEX, 0);
  return true;
}

/* The producer's multi-index [src->ndim] for the reader's index `idx`
 * through view v of a contiguous layout of the producer's sizes `src`
 * (its output; or a whole write's region, the same layout as its
 * storage). */
static void map_index(kir_kernel *k, const graph_view *v, const shape *src, const int *idx, int *out) {
  if (map_by_strides(k, v, src, idx, out) || map_by_runs(k, v, src, idx, out)) return;
  /* general case: split the flat index (a reshape of a strided view) */
  int flat = view_index(k, v, idx, v->offset ? kir_const_i(k, KIR_INDEX, v->offset) : -1);
  int64_t cs[KILN_MAX_DIMS];
  graph_contiguous_strides(src->ndim, src->sizes, cs);
  bool outermost = true;
  for (int j = 0; j < src->ndim; j++) {
    if (src->sizes[j] <= 1) {
      out[j] = kir_const_i(k, KIR_INDEX, 0);
      continue;
    }
    int q = cs[j] == 1 ? flat : pass_alu2(k, KIR_DIV, flat, kir_const_i(k, KIR_INDEX, cs[j]));
    out[j] = outermost ? q : pass_alu2(k, KIR_MOD, q, kir_const_i(k, KIR_INDEX, src->sizes[j]));
    outermost = false;
  }
}

/* ------------------------------------------------------ growing state */

/* Room for element n of the array at *arrp (elements of `size`,
 * capacity *cap), doubling it when full; false, with c->oom set, when it
 * cannot allocate. (ROOM takes the array itself.) */
static bool room(lower_ctx *c, void *arrp, size_t size, int n, int *cap) {
  if (n < *cap) return true;
  int want = *cap ? 2 * *cap : 32;
  void *old, *grown;
  memcpy(&old, arrp, sizeof old);
  grown = graph_realloc(old, size * (size_t)want);
  if (!grown) {
    c->oom = true;
    return false;
  }
  memcpy(arrp, &grown, sizeof grown);
  *cap = want;
  return true;
}
#define ROOM(c, arr, n, cap) room((c), &(arr), sizeof *(arr), (n), &(cap))

static void free_state(lower_ctx *c) {
  free(c->seen);
  free(c->memo);
  free(c->rows);
  free(c->row_value);
}

/* The group does not fit one kernel: `limit` (a passes.h limit, named) of
 * `max` `what` is exceeded. Lowering stops with KILN_ERR_UNSUPPORTED; the
 * runtime then materializes the group's producers. */
static void over_limit(lower_ctx *c, int max, const char *what, const char *limit) {
  if (c->unfit) return;
  snprintf(c->why, sizeof c->why, "more than %d %s (%s)", max, what, limit);
  c->unfit = c->why;
}

/* Lowering stops: the group does not fit, or memory ran out. */
static bool stopped(const lower_ctx *c) { return c->unfit || c->oom; }

/* ------------------------------------------------------ external reads */

static bool seen(lower_ctx *c, const graph_node *n) {
  for (int i = 0; i < c->n_seen; i++)
    if (c->seen[i] == n) return true;
  if (!ROOM(c, c->seen, c->n_seen, c->cap_seen)) return true; /* (out of memory: stops) */
  c->seen[c->n_seen++] = n;
  return false;
}

/* A merged copy of a node (merge_loops.c) carries its original's position. */
static pass_slot slot_of(const lower_ctx *c, const graph_node *consumer, int input) {
  return (pass_slot){.pos = pass_pos(c->plan, consumer), .input = input};
}

/* The buffer param for input `input` of n (one per distinct node). */
static int input_param(lower_ctx *c, const graph_node *n, int input) {
  const graph_node *src = n->inputs[input].node;
  for (int i = 0; i < c->b->n_inputs; i++)
    if (c->b->inputs[i] == src) return c->input_param[i];
  if (c->b->n_inputs + c->b->n_outputs == PASS_MAX_INPUTS) {
    over_limit(c, PASS_MAX_INPUTS, "buffers besides the output", "PASS_MAX_INPUTS");
    return -1;
  }
  int i = c->b->n_inputs++;
  c->b->inputs[i] = src;
  c->b->input_slot[i] = slot_of(c, n, input);
  c->input_param[i] = kir_param(c->k, kir_type_of(src->dtype), false);
  return c->input_param[i];
}

/* Distinct elements a view touches (stride-0 dims count once). */
static int64_t touched(const graph_view *v) {
  int64_t e = 1;
  for (int d = 0; d < v->ndim; d++)
    if (v->strides[d] != 0) e *= v->sizes[d];
  return graph_view_numel(v) == 0 ? 0 : e;
}

/* An int64 kernel argument (loaded at entry, as KIR_INDEX), or -1 when
 * the argument array is full (lower_ctx.h). */
int lower_int_arg(lower_ctx *c, int64_t value) {
  if (c->b->n_args == PASS_MAX_ARGS) {
    over_limit(c, PASS_MAX_ARGS, "int64 arguments", "PASS_MAX_ARGS");
    return -1;
  }
  c->b->args[c->b->n_args] = value;
  c->b->arg_slot[c->b->n_args] = (pass_slot){.pos = -1};
  int u = kir_load(c->k, c->args, kir_const_i(c->k, KIR_INDEX, c->b->n_args++));
  return pass_cast_to(c->k, KIR_INDEX, u);
}

/* A pending FULL's value converted to its dtype (exactly representable
 * there), as it travels in the argument arrays: integers and bool in the
 * int64 array (I64 bit-exact beyond 2^53), floats in the F64 array. */
static bool fill_value(const graph_node *src, int64_t *iv, double *fv) {
  unsigned char tmp[8];
  graph_store_scalar(src->dtype, tmp, graph_attr_scalar(src));
  *fv = graph_load_scalar(src->dtype, tmp);
  if (src->dtype == KILN_I64) memcpy(iv, tmp, 8);
  else *iv = graph_is_float(src->dtype) ? 0 : (int64_t)*fv; /* a float fill may be inf or NaN: no int cast */
  return graph_is_float(src->dtype);
}

/* The value of the pending FULL read by input `input` of n, as a kernel
 * argument in registers, so the kernel computes what a materialized FULL
 * would hold and one compiled kernel serves every fill value. */
static int scalar_arg(lower_ctx *c, const graph_node *n, int input) {
  const graph_node *src = n->inputs[input].node;
  int64_t iv;
  double fv;
  bool is_float = fill_value(src, &iv, &fv);
  int *count = is_float ? &c->b->n_fargs : &c->b->n_args;
  if (*count == PASS_MAX_ARGS) {
    over_limit(c, PASS_MAX_ARGS, is_float ? "F64 arguments" : "int64 arguments", "PASS_MAX_ARGS");
    return -1;
  }
  if (is_float) c->b->fargs[*count] = fv, c->b->farg_slot[*count] = slot_of(c, n, input);
  else c->b->args[*count] = iv, c->b->arg_slot[*count] = slot_of(c, n, input);
  int u = kir_load(c->k, is_float ? c->fargs : c->args, kir_const_i(c->k, KIR_INDEX, (*count)++));
  return pass_cast_to(c->k, kir_compute_type(kir_type_of(src->dtype)), u);
}

void pass_rebind(pass_binding *b, graph_node *const *order) {
  for (int j = 0; j < b->n_outputs; j++) b->outputs[j] = order[b->output_pos[j]];
  for (int i = 0; i < b->n_inputs; i++) b->inputs[i] = order[b->input_slot[i].pos]->inputs[b->input_slot[i].input].node;
  int64_t iv;
  double fv;
  for (int i = 0; i < b->n_args; i++) {
    pass_slot s = b->arg_slot[i];
    if (s.pos >= 0 && !fill_value(order[s.pos]->inputs[s.input].node, &iv, &fv)) b->args[i] = iv;
  }
  for (int i = 0; i < b->n_fargs; i++) {
    pass_slot s = b->farg_slot[i];
    if (s.pos >= 0 && fill_value(order[s.pos]->inputs[s.input].node, &iv, &fv)) b->fargs[i] = fv;
  }
}

static bool slot_valid(pass_slot s, const uint8_t *n_inputs, int n, bool fixed_ok) {
  if (s.pos < 0) return fixed_ok && s.pos == -1;
  return s.pos < n && s.input >= 0 && s.input < n_inputs[s.pos];
}

bool pass_binding_valid(const pass_binding *b, const uint8_t *n_inputs, int n) {
  bool ok = b->n_outputs >= 0 && b->n_outputs <= PASS_MAX_OUTPUTS && b->n_inputs >= 0 &&
            b->n_inputs + b->n_outputs <= PASS_MAX_INPUTS && b->n_args >= 0 && b->n_args <= PASS_MAX_ARGS &&
            b->n_fargs >= 0 && b->n_fargs <= PASS_MAX_ARGS;
  for (int j = 0; ok && j < b->n_outputs; j++) ok = b->output_pos[j] >= 0 && b->output_pos[j] < n;
  for (int i = 0; ok && i < b->n_inputs; i++) ok = slot_valid(b->input_slot[i], n_inputs, n, false);
  for (int i = 0; ok && i < b->n_args; i++) ok = slot_valid(b->arg_slot[i], n_inputs, n, true);
  for (int i = 0; ok && i < b->n_fargs; i++) ok = slot_valid(b->farg_slot[i], n_inputs, n, false);
  return ok;
}

static void add_edge(lower_ctx *c, const graph_node *n, int i) {
  const graph_node *src = n->inputs[i].node;
  if (c->n_edges == PASS_MAX_ARGS) { /* fusion keeps groups within PASS_MAX_EDGES */
    over_limit(c, PASS_MAX_ARGS, "external reads", "PASS_MAX_ARGS");
    return;
  }
  edge *e = &c->edges[c->n_edges++];
  *e = (edge){.consumer = n, .input = i, .param = -1, .offset = -1, .scalar = -1};
  if (src->op == GRAPH_OP_FULL && !src->buffer) {
    e->scalar = scalar_arg(c, n, i);
    return;
  }
  if (src->op != GRAPH_OP_ARANGE || src->buffer) {
    e->param = input_param(c, n, i);
    c->b->bytes_read += touched(&n->inputs[i].view) * graph_dtypes[src->dtype].size;
  }
  e->offset = lower_int_arg(c, n->inputs[i].view.offset);
}

static void name_op(lower_ctx *c, const graph_node *n) {
  c->b->n_ops++;
  if (c->name_len > 60) return;
  c->name[c->name_len++] = '_';
  for (const char *p = graph_ops[n->op].name; *p && c->name_len < 70; p++) c->name[c->name_len++] = (char)(*p | 0x20);
  c->name[c->name_len] = 0;
}

/* Walks the fused group below n (producers first, for the name), adding
 * an edge for every external read. */
static void walk(lower_ctx *c, const graph_node *n, bool skip_first) {
  for (int i = skip_first ? 1 : 0; i < n->n_inputs && !stopped(c); i++) {
    const graph_node *src = n->inputs[i].node;
    if (!is_fused(c, src)) add_edge(c, n, i);
    else if (!seen(c, src)) {
      walk(c, src, false);
      if (graph_ops[src->op].kind != GRAPH_REDUCE) continue;
      int cap = c->cap_rows; /* rows and row_value grow together */
      if (ROOM(c, c->rows, c->n_rows, cap) && ROOM(c, c->row_value, c->n_rows, c->cap_rows))
        c->rows[c->n_rows++] = src;
    }
  }
  name_op(c, n);
}

static const edge *find_edge(const lower_ctx *c, const graph_node *n, int i) {
  for (int e = 0; e < c->n_edges; e++)
    if (c->edges[e].consumer == n && c->edges[e].input == i) return &c->edges[e];
  return NULL;
}

/* ------------------------------------------------------------- values */

/* The value a pending source node holds at flat element `idx`. */
static int source_value(kir_kernel *k, const graph_node *src, int idx) {
  if (src->op == GRAPH_OP_FULL) {
    unsigned char tmp[8];
    graph_store_scalar(src->dtype, tmp, graph_attr_scalar(src)); /* round as a cast does */
    return pass_cst(k, kir_compute_type(kir_type_of(src->dtype)), graph_load_scalar(src->dtype, tmp));
  }
  /* ARANGE: start + i * step, computed in F64 then converted; in index
   * arithmetic when the dtype is an integer and every value is an exact
   * integer that fits it (the same values, without two conversions an
   * element: the positions and tap numbers pooling and view adjoints
   * build from aranges) */
  double start = graph_attr_scalar(src), step = graph_attr_scalar2(src);
  double bound = src->dtype == KILN_I64 ? 0x1p53 : 0x1p31;
  if ((src->dtype == KILN_I64 || src->dtype == KILN_I32) && start == floor(start) && step == floor(step) &&
      fabs(start) + fabs(step) * (double)src->numel < bound) {
    int x = pass_alu2(k, KIR_MUL, idx, kir_const_i(k, KIR_INDEX, (int64_t)step));
    x = pass_alu2(k, KIR_ADD, x, kir_const_i(k, KIR_INDEX, (int64_t)start));
    return pass_to_register(k, pass_cast_to(k, kir_type_of(src->dtype), x));
  }
  int x = kir_cast(k, KIR_F64, idx);
  x = pass_alu2(k, KIR_MUL, x, kir_const_f(k, KIR_F64, graph_attr_scalar2(src)));
  x = pass_alu2(k, KIR_ADD, x, kir_const_f(k, KIR_F64, graph_attr_scalar(src)));
  return pass_to_register(k, pass_cast_to(k, kir_type_of(src->dtype), x));
}

static int value_at(lower_ctx *c, const graph_node *n, const int *idx);

/* A fused reduction's value for the current row: valid only when the
 * reader walks the row loops identically (same ranges, contiguous kept
 * dims) and broadcasts the reduced ones. Anything else marks the group as
 * not fitting, and the runtime materializes the reduction instead. */
static int row_read(lower_ctx *c, const graph_node *q, const graph_view *v, const int *idx) {
  int r = -1;
  for (int i = 0; i < c->n_rows; i++)
    if (c->rows[i] == q) r = c->row_value[i];
  /* q's own shape (its reduced dims of size 1), or only its kept dims (a
   * reduction with keepdim = false: ops/reduce.c's view without them) */
  bool ok = r >= 0 && v->offset == 0 && q->ndim >= c->n_outer && (v->ndim == q->ndim || v->ndim == c->n_outer);
  int64_t cs[KILN_MAX_DIMS];
  graph_contiguous_strides(q->ndim, q->sizes, cs);
  for (int d = 0; ok && d < v->ndim; d++) {
    if (d < c->n_outer)
      ok = v->sizes[d] == q->sizes[d] && (v->sizes[d] == 1 || (v->strides[d] == cs[d] && idx[d] == c->outer[d]));
    else
      ok = q->sizes[d] == 1 && (v->strides[d] == 0 || v->sizes[d] == 1);
  }
  if (!ok) {
    if (!c->unfit) c->unfit = "a fused reduction read other than along its rows";
    return pass_cst(c->k, kir_compute_type(kir_type_of(q->dtype)), 0);
  }
  return r;
}

static int written_value(lower_ctx *c, const graph_node *x, const int *ridx);

/* Input i of n at n's index idx (in n's iteration dims). */
int lower_input_at(lower_ctx *c, const graph_node *n, int i, const int *idx) {
  const graph_node *src = n->inputs[i].node;
  const graph_view *v = &n->inputs[i].view;
  if (is_fused(c, src) && graph_ops[src->op].kind == GRAPH_REDUCE) return row_read(c, src, v, idx);
  if (is_fused(c, src) && src->op == GRAPH_OP_ASSIGN) { /* a whole write this kernel stores */
    graph_view reg = graph_attr_region(src);
    int ridx[KILN_MAX_DIMS];
    map_index(c->k, v, &(shape){reg.ndim, reg.sizes}, idx, ridx);
    return written_value(c, src, ridx);
  }
  if (is_fused(c, src)) {
    int sidx[KILN_MAX_DIMS];
    map_index(c->k, v, &(shape){src->ndim, src->sizes}, idx, sidx);
    return value_at(c, src, sidx);
  }
  const edge *e = find_edge(c, n, i);
  if (e->scalar >= 0) return e->scalar;
  if (src == c->gemm_x && c->gemm_i >= 0) { /* a GEMM's block (lower_gemm.c): read at the root's own element */
    int at = pass_alu2(c->k, KIR_ADD, pass_alu2(c->k, KIR_MUL, c->gemm_i, kir_const_i(c->k, KIR_INDEX, c->gemm_ld)),
                       c->gemm_j);
    return pass_to_register(c->k, kir_load(c->k, e->param, at));
  }
  int flat = view_index(c->k, v, idx, e->offset);
  if (e->param < 0) return source_value(c->k, src, flat);
  return pass_to_register(c->k, kir_load(c->k, e->param, flat));
}

/* A value already computed for n at the same index uops (ndim of them),
 * or -1. Fused nodes read by several readers at one index are computed
 * once. */
static int memo_find(const lower_ctx *c, const graph_node *n, const int *idx, int ndim) {
  for (int m = 0; m < c->n_memo; m++)
    if (c->memo[m].n == n && memcmp(c->memo[m].idx, idx, sizeof(int) * (size_t)ndim) == 0) return c->memo[m].value;
  return -1;
}

static int memo_add(lower_ctx *c, const graph_node *n, const int *idx, int ndim, int value) {
  if (ROOM(c, c->memo, c->n_memo, c->cap_memo)) { /* (out of memory: lowering fails) */
    c->memo[c->n_memo].n = n;
    memcpy(c->memo[c->n_memo].idx, idx, sizeof(int) * (size_t)ndim);
    c->memo[c->n_memo++].value = value;
  }
  return value;
}

static int compute_at(lower_ctx *c, const graph_node *n, const int *idx);

int lower_value_at(lower_ctx *c, const graph_node *n, const int *idx) { return value_at(c, n, idx); }

/* An elementwise node's value at its index idx, rounded to its dtype. */
static int value_at(lower_ctx *c, const graph_node *n, const int *idx) {
  int v = memo_find(c, n, idx, n->ndim);
  if (v >= 0) return v;
  if (n == c->spill && c->spill_stored) { /* written at this index by the reduction pass */
    graph_view flat = graph_view_contiguous(n->ndim, n->sizes);
    int loaded = pass_to_register(c->k, kir_load(c->k, c->out, view_index(c->k, &flat, idx, -1)));
    return memo_add(c, n, idx, n->ndim, loaded);
  }
  return memo_add(c, n, idx, n->ndim, compute_at(c, n, idx));
}

/* A whole write's new value at index ridx of its region (which is its
 * storage's contiguous layout): its value input there, rounded to its
 * dtype as its buffer would hold it. Computed once per index, so the
 * kernel that stores the write and reads it uses one register. */
static int written_value(lower_ctx *c, const graph_node *x, const int *ridx) {
  int ndim = graph_attr_region(x).ndim;
  int v = memo_find(c, x, ridx, ndim);
  if (v >= 0) return v;
  v = pass_to_register(c->k, pass_cast_to(c->k, kir_type_of(x->dtype), lower_input_at(c, x, 1, ridx)));
  return memo_add(c, x, ridx, ndim, v);
}

/* Torch converts tensor operands to the op's dtype first: when that is F16
 * or BF16, an operand of another dtype is rounded to it before arithmetic
 * (which then runs in F32). Scalars — fill values and operands broadcast
 * from a single element, as 0-d tensors are — stay exact. */
static int half_operand(lower_ctx *c, const graph_node *n, int i, int v) {
  const graph_node *src = n->inputs[i].node;
  const graph_view *view = &n->inputs[i].view;
  bool half = n->cdtype == KILN_F16 || n->cdtype == KILN_BF16;
  bool scalar = true; /* every stride 0: one element broadcast */
  for (int d = 0; d < view->ndim; d++) scalar = scalar && view->strides[d] == 0;
  scalar = scalar || (!src->buffer && src->op == GRAPH_OP_FULL);
  bool is_cond = n->op == GRAPH_OP_WHERE && i == 0;
  if (!half || scalar || is_cond || src->dtype == n->cdtype) return v;
  return pass_to_register(c->k, pass_cast_to(c->k, kir_type_of(n->cdtype), v));
}

/* GATHER at idx: the index (maybe fused) at idx, then the source read at
 * idx with dim replaced by it. The API checked every index against the
 * size; the load is clamped into [0, size) all the same, so no value can
 * make a kernel read outside the source's view. */
static int gather_at(lower_ctx *c, const graph_node *n, const int *idx) {
  kir_kernel *k = c->k;
  int dim = (int)graph_attr_scalar(n), sidx[KILN_MAX_DIMS];
  int64_t size = n->inputs[0].view.sizes[dim];
  int i = pass_cast_to(k, KIR_INDEX, lower_input_at(c, n, 1, idx));
  i = pass_alu2(k, KIR_MAX, i, kir_const_i(k, KIR_INDEX, 0));
  i = pass_alu2(k, KIR_MIN, i, kir_const_i(k, KIR_INDEX, size > 0 ? size - 1 : 0));
  for (int d = 0; d < n->ndim; d++) sidx[d] = d == dim ? i : idx[d];
  return pass_to_register(k, pass_cast_to(k, kir_type_of(n->dtype), lower_input_at(c, n, 0, sidx)));
}

static int compute_at(lower_ctx *c, const graph_node *n, const int *idx) {
  kir_kernel *k = c->k;
  if (n->op == GRAPH_OP_GATHER) return gather_at(c, n, idx);
  kir_type t = kir_compute_type(kir_type_of(n->cdtype));
  int v[GRAPH_MAX_INPUTS];
  for (int i = 0; i < n->n_inputs; i++) v[i] = half_operand(c, n, i, lower_input_at(c, n, i, idx));
  int res = -1;
  switch (graph_ops[n->op].kind) {
  case GRAPH_CAST: res = v[0]; break;
  case GRAPH_UNARY: res = pass_op_unary(k, n->op, pass_cast_to(k, t, v[0]), n); break;
  case GRAPH_BINARY: res = pass_op_binary(k, n->op, pass_cast_to(k, t, v[0]), pass_cast_to(k, t, v[1])); break;
  case GRAPH_TERNARY:
    res = pass_where(k, pass_cast_to(k, KIR_BOOL, v[0]), pass_cast_to(k, t, v[1]), pass_cast_to(k, t, v[2]));
    break;
  case GRAPH_SOURCE: {
    graph_view flat = graph_view_contiguous(n->ndim, n->sizes);
    res = source_value(k, n, view_index(k, &flat, idx, -1));
    break;
  }
  default: break;
  }
  if (res < 0) return -1;
  return pass_to_register(k, pass_cast_to(k, kir_type_of(n->dtype), res));
}

/* ------------------------------------------------------------ kernels */

/* The loop the pool splits: the outermost one, or below leading loops
 * of one iteration the first longer one (a batch of 1: [1, 64, 56, 56]
 * ran on one thread). */
static void open_ranges(kir_kernel *k, int ndim, const int64_t *sizes, int *ranges) {
  int par = 0;
  while (par + 1 < ndim && sizes[par] == 1) par++;
  for (int d = 0; d < ndim; d++) ranges[d] = kir_range(k, sizes[d], d == par);
}

void lower_close_ranges(kir_kernel *k, int ndim, const int *ranges) {
  for (int d = ndim - 1; d >= 0; d--)
    if (ranges[d] >= 0) kir_end(k, ranges[d]);
}

/* Stores n's value at its contiguous index, streaming when the options
 * say so (its buffer is a fresh allocation, 64-byte aligned, as kir.h
 * requires), but in the edge nests of skewed tiles (plain_stores). */
static void store_node(lower_ctx *c, const graph_node *n, int param, const int *ranges, int value, bool stream) {
  graph_view flat = graph_view_contiguous(n->ndim, n->sizes);
  int idx = view_index(c->k, &flat, ranges, -1);
  value = pass_cast_to(c->k, kir_type_of(n->dtype), value);
  if (stream && !c->plain_stores) kir_store_streaming(c->k, param, idx, value);
  else kir_store(c->k, param, idx, value);
}

void lower_store_contiguous(lower_ctx *c, const int *ranges, int value) {
  store_node(c, c->root, c->out, ranges, value, c->opts->stream);
}

/* The further results of a multi-output kernel, at the loop index
 * `ranges` (the root's sizes, or its region's for an in-place write:
 * theirs too, fuse.c rule 7). An elementwise result goes to its
 * contiguous index, a whole write to its region's, which is the same
 * element of its storage; its buffer may be its old version's (written
 * in place, maybe not 64-byte aligned), so its stores are plain. */
static int store_outputs(lower_ctx *c, const int *ranges) {
  for (int j = 0; j < c->b->n_outputs; j++) {
    const graph_node *s = c->b->outputs[j];
    if (s->op == GRAPH_OP_ASSIGN) {
      graph_view reg = graph_attr_region(s);
      int v = written_value(c, s, ranges);
      kir_store(c->k, c->store_param[j], view_index(c->k, &reg, ranges, -1), pass_cast_to(c->k, kir_type_of(s->dtype), v));
      continue;
    }
    int v = value_at(c, s, ranges);
    if (v < 0) return KILN_ERR_UNSUPPORTED;
    store_node(c, s, c->store_param[j], ranges, v, c->opts->stream_outputs >> j & 1);
  }
  return KILN_OK;
}

/* First index of tile b along a dim of `size`: b * TILE, the last tile
 * shifted back to end at size. */
static int tile_base(kir_kernel *k, int b, int64_t size) {
  int base = pass_alu2(k, KIR_MUL, b, kir_const_i(k, KIR_INDEX, KIR_TILE));
  if (size % KIR_TILE == 0) return base;
  return pass_alu2(k, KIR_MIN, base, kir_const_i(k, KIR_INDEX, size - KIR_TILE));
}

/* The value of the root and the further outputs at `ranges`, stored. */
static int store_all(lower_ctx *c, const int *ranges) {
  int res = value_at(c, c->root, ranges);
  if (res < 0) return KILN_ERR_UNSUPPORTED;
  lower_store_contiguous(c, ranges, res);
  return store_outputs(c, ranges);
}

/* Skewed tiles for a last dim W that is not a multiple of KIR_TILE.
 * Plain tiles would write each row's KIR_TILE elements across two cache
 * lines, each line partly, in two column-block passes far apart, and
 * could not stream. Here row ti of column block m (1 <= m <= W/TILE - 1)
 * takes columns [L + off, L + off + TILE), L = TILE*(m-1) and off in
 * [1, TILE] chosen so that the row's chunk starts at a multiple of TILE
 * of the flat output (off = TILE - (X & (TILE-1)), X the flat index of
 * column L): every store of the interior is a whole aligned vector and
 * may stream. Row ti's source rows lie in [L, L + 2*TILE)
 * (kir_tile_skew). Loops: groups of up to SKEW_BANDS row bands (the
 * parallel range when there is no batch dim), column blocks, the bands
 * of the group, the tile: the source rows [L + TILE, L + 2*TILE) a band
 * reads are the ones it reads first at the next column block, a few
 * tiles later, and the CPU backend keeps them (kir.h). Reading them
 * again instead cost about as much as the aligned stores saved (16-row
 * bands of the source, 4095 floats apart, conflict in the caches).
 * Bands start at multiples of TILE (so X & (TILE-1) depends on ti alone
 * in a 2-D kernel, and LLVM folds each row's offset); the last
 * rows % TILE rows are left to a plain loop nest. The interior covers
 * columns [TILE, TILE*(W/TILE - 1) + 1) of every row at least; the edge
 * columns [0, TILE) and [TILE*(W/TILE-1) + 1, W) are written by another
 * (both: store_edge, after the group's tiles, source reads contiguous
 * along its rows). Elements two nests cover are stored twice with the
 * same value (so, like all tiles, not for in-place kernels).
 * docs/internals.md "Transposed reads" has the measurements; the
 * options choose them and SKEW_BANDS (heuristics.c). */

/* Stores the root (and further outputs) at rows outer + ro and columns
 * col, in a plain loop nest over `n_cols` x `n_rows` (columns outside:
 * the transposed source is read along its rows), plain stores. */
static int store_edge(lower_ctx *c, int *ranges, int64_t n_cols, int64_t n_rows, int col_base, int64_t col_jump,
                      int row_base, int64_t row_max, int64_t col_max) {
  kir_kernel *k = c->k;
  int nd = c->root->ndim;
  int e = kir_range(k, n_cols, false), rr = kir_range(k, n_rows, false);
  int col = pass_alu2(k, KIR_ADD, col_base, e);
  if (col_jump) { /* the left edge's TILE columns, then the right edge */
    int left = pass_cmp(k, KIR_CMPLT, e, kir_const_i(k, KIR_INDEX, KIR_TILE));
    col = pass_where(k, left, e, pass_alu2(k, KIR_ADD, e, kir_const_i(k, KIR_INDEX, col_jump)));
  }
  ranges[nd - 1] = pass_alu2(k, KIR_MIN, col, kir_const_i(k, KIR_INDEX, col_max));
  ranges[nd - 2] = pass_alu2(k, KIR_MIN, pass_alu2(k, KIR_ADD, row_base, rr), kir_const_i(k, KIR_INDEX, row_max));
  c->n_memo = 0; /* values of another nest are out of scope here */
  c->plain_stores = true;
  int st = store_all(c, ranges);
  c->plain_stores = false;
  kir_end(k, rr);
  kir_end(k, e);
  return st;
}

static int lower_skewed(lower_ctx *c, int *ranges, int *loops, int n_loops) {
  kir_kernel *k = c->k;
  const graph_node *r = c->root;
  int nd = r->ndim, t = KIR_TILE, tj;
  int64_t rows = r->sizes[nd - 2], cols = r->sizes[nd - 1], blocks = cols / t - 1, bands = rows / t;
  int64_t per = bands < c->opts->skew_bands ? bands : c->opts->skew_bands, groups = (bands + per - 1) / per;
  graph_view flat = graph_view_contiguous(nd, r->sizes);
  int bg = loops[n_loops++] = kir_range(k, groups, nd == 2);
  int bj = kir_range(k, blocks, false), bb = kir_range(k, per, false);
  int band = pass_alu2(k, KIR_ADD, pass_alu2(k, KIR_MUL, bg, kir_const_i(k, KIR_INDEX, per)), bb);
  band = pass_alu2(k, KIR_MIN, band, kir_const_i(k, KIR_INDEX, bands - 1));
  int i0 = pass_alu2(k, KIR_MUL, band, kir_const_i(k, KIR_INDEX, t));
  int col0 = pass_alu2(k, KIR_MUL, bj, kir_const_i(k, KIR_INDEX, t));
  int ti = kir_range_tile(k, &tj);
  ranges[nd - 2] = pass_alu2(k, KIR_ADD, i0, ti);
  ranges[nd - 1] = col0;
  int x = pass_alu2(k, KIR_AND, view_index(k, &flat, ranges, -1), kir_const_i(k, KIR_INDEX, t - 1));
  int off = kir_tile_skew(k, pass_alu2(k, KIR_SUB, kir_const_i(k, KIR_INDEX, t), x));
  ranges[nd - 1] = pass_alu2(k, KIR_ADD, pass_alu2(k, KIR_ADD, col0, off), tj);
  int st = store_all(c, ranges);
  kir_end(k, tj);
  kir_end(k, ti);
  kir_end(k, bb);
  kir_end(k, bj);
  /* the group's rows at the edge columns: TILE on the left, W - TILE*blocks - 1 on the right */
  int zero = kir_const_i(k, KIR_INDEX, 0);
  int row0 = pass_alu2(k, KIR_MUL, bg, kir_const_i(k, KIR_INDEX, per * t));
  if (st >= 0) st = store_edge(c, ranges, cols - t * blocks - 1 + t, per * t, zero, t * blocks + 1 - t, row0, bands * t - 1, cols - 1);
  /* the last rows % TILE rows, every column, a slice of the columns a group */
  int64_t slice = (cols + groups - 1) / groups;
  int col_base = pass_alu2(k, KIR_MUL, bg, kir_const_i(k, KIR_INDEX, slice));
  if (st >= 0 && rows % t)
    st = store_edge(c, ranges, slice, rows % t, col_base, 0, kir_const_i(k, KIR_INDEX, bands * t), rows - 1, cols - 1);
  lower_close_ranges(k, n_loops, loops);
  return st;
}

/* The elementwise kernel with its innermost dim unrolled (the options'
 * unroll_inner): loops over the others, the value and every output
 * stored at each index of the last dim in turn. */
static int lower_unrolled_inner(lower_ctx *c) {
  const graph_node *r = c->root;
  int ranges[KILN_MAX_DIMS], nd = r->ndim;
  open_ranges(c->k, nd - 1, r->sizes, ranges);
  for (int64_t e = 0; e < c->opts->unroll_inner; e++) {
    ranges[nd - 1] = kir_const_i(c->k, KIR_INDEX, e);
    int st = store_all(c, ranges);
    if (st != KILN_OK) return st;
  }
  lower_close_ranges(c->k, nd - 1, ranges);
  return KILN_OK;
}

/* Loops over the root's sizes; with tiles (the options' tile), the last
 * two dims run as KIR_TILE x KIR_TILE blocks: the loop over column blocks
 * (j) outside the one over row blocks (i), so the transposed source,
 * contiguous along i, is read as KIR_TILE sequential streams (the
 * hardware prefetcher follows them), and its reads become vector loads
 * and an in-register transpose (kir_range_tile). A size that is not a
 * multiple of the tile shifts the last tile back over its neighbour
 * (tile_base): those elements are stored twice, with the same value. */
static int lower_elementwise(lower_ctx *c) {
  const graph_node *r = c->root;
  kir_kernel *k = c->k;
  int ranges[KILN_MAX_DIMS] = {0}, nd = r->ndim, loops[KILN_MAX_DIMS + 2], n_loops = 0; /* (= {0}: gcc -O3 cannot see open_ranges fill it) */
  if (c->opts->unroll_inner) return lower_unrolled_inner(c);
  if (!c->opts->tile) {
    open_ranges(k, nd, r->sizes, ranges);
    for (int d = 0; d < nd; d++) loops[n_loops++] = ranges[d];
  } else {
    int64_t rows = r->sizes[nd - 2], cols = r->sizes[nd - 1], t = KIR_TILE;
    for (int d = 0; d < nd - 2; d++) loops[n_loops++] = ranges[d] = kir_range(k, r->sizes[d], d == 0);
    if (c->opts->skew) return lower_skewed(c, ranges, loops, n_loops);
    int bj = loops[n_loops++] = kir_range(k, (cols + t - 1) / t, nd == 2);
    int bi = loops[n_loops++] = kir_range(k, (rows + t - 1) / t, false);
    int i0 = tile_base(k, bi, rows), j0 = tile_base(k, bj, cols), tj;
    int ti = loops[n_loops++] = kir_range_tile(k, &tj);
    loops[n_loops++] = tj;
    ranges[nd - 2] = pass_alu2(k, KIR_ADD, i0, ti);
    ranges[nd - 1] = pass_alu2(k, KIR_ADD, j0, tj);
  }
  int res = value_at(c, r, ranges);
  if (res < 0) return KILN_ERR_UNSUPPORTED;
  lower_store_contiguous(c, ranges, res);
  int st = store_outputs(c, ranges);
  lower_close_ranges(k, n_loops, loops);
  return st;
}

/* Identity of a reduction in accumulator type t. */
int lower_reduce_init(kir_kernel *k, graph_op op, kir_type t) {
  bool fl = kir_is_float(t);
  int bits = kir_types[t].bits;
  bool sgn = kir_types[t].is_signed;
  switch (op) {
  case GRAPH_OP_SUM: return pass_cst(k, t, 0);
  case GRAPH_OP_PROD: return pass_cst(k, t, 1);
  case GRAPH_OP_AMAX: case GRAPH_OP_ARGMAX:
    if (t == KIR_BOOL) return kir_const_f(k, t, 0);
    if (fl) return kir_const_f(k, t, -INFINITY);
    if (!sgn) return kir_const_i(k, t, 0);
    return kir_const_i(k, t, bits == 64 ? INT64_MIN : -(INT64_C(1) << (bits - 1)));
  default: /* AMIN, ARGMIN */
    if (t == KIR_BOOL) return kir_const_f(k, t, 1);
    if (fl) return kir_const_f(k, t, INFINITY);
    if (bits == 64) return kir_const_i(k, t, INT64_MAX);
    return kir_const_i(k, t, (INT64_C(1) << (bits - (sgn ? 1 : 0))) - 1);
  }
}

kir_op lower_reduce_alu(graph_op op, kir_type t) {
  switch (op) {
  case GRAPH_OP_SUM: return KIR_ADD;
  case GRAPH_OP_PROD: return KIR_MUL;
  case GRAPH_OP_AMAX: return t == KIR_BOOL ? KIR_OR : KIR_MAX;
  default: return t == KIR_BOOL ? KIR_AND : KIR_MIN;
  }
}

/* acc = op(acc, x), marked reassociable so the backend can vectorise it. */
static void reduce_update(kir_kernel *k, graph_op op, int acc, int x) {
  kir_type t = pass_type_of(k, acc);
  int upd = kir_alu(k, lower_reduce_alu(op, t), t, acc, x, -1);
  kir_set_reassoc(k, upd);
  kir_acc_set(k, acc, upd);
}

kir_type lower_reduce_acc_type(const graph_node *n) {
  kir_type in = kir_type_of(n->inputs[0].node->dtype);
  if (n->op == GRAPH_OP_SUM || n->op == GRAPH_OP_PROD) return graph_is_float(n->dtype) ? KIR_F64 : KIR_I64;
  if (n->op == GRAPH_OP_ARGMAX || n->op == GRAPH_OP_ARGMIN) return kir_compute_type(in);
  return kir_compute_type(kir_type_of(n->dtype));
}

/* Argmax/argmin update: take the new element when strictly better, or when
 * it is the first NaN (NaN counts as the extreme, as in Torch). */
static void arg_update(kir_kernel *k, graph_op op, int acc, int acc_idx, int v, int r) {
  int better = op == GRAPH_OP_ARGMAX ? pass_cmp(k, KIR_CMPLT, acc, v) : pass_cmp(k, KIR_CMPLT, v, acc);
  kir_type t = pass_type_of(k, v);
  if (kir_is_float(t)) {
    int first_nan = pass_alu2(k, KIR_AND, pass_cmp(k, KIR_CMPNE, v, v), pass_cmp(k, KIR_CMPEQ, acc, acc));
    better = pass_alu2(k, KIR_OR, better, first_nan);
  }
  kir_acc_set(k, acc_idx, pass_where(k, better, kir_cast(k, KIR_I64, r), acc_idx));
  kir_acc_set(k, acc, pass_where(k, better, v, acc));
}

/* q's input at ranges (its kept dims set), cast to the accumulator type
 * t; stored for the epilogue when it is the spill (the caller sets
 * spill_stored once every term is stored: until then the spill's value
 * is computed, not loaded). */
static int reduce_term(lower_ctx *c, const graph_node *q, int *ranges, kir_type t) {
  kir_kernel *k = c->k;
  int in = lower_input_at(c, q, 0, ranges);
  if (q->inputs[0].node == c->spill) { /* keep it for the epilogue: the root's dtype and sizes */
    graph_view flat = graph_view_contiguous(c->spill->ndim, c->spill->sizes);
    kir_store(k, c->out, view_index(k, &flat, ranges, -1), pass_cast_to(k, kir_type_of(c->spill->dtype), in));
  }
  return pass_cast_to(k, t, in);
}

/* The unrolled reduction (the options' unroll_reduce): terms e = 0, 1,
 * ... in row-major order over the masked dims, each at constant indices
 * there, added in the loop's order (the same sum). */
static int unrolled_reduce(lower_ctx *c, const graph_node *q, int *ranges, kir_type t, int64_t terms) {
  kir_kernel *k = c->k;
  const graph_view *v = &q->inputs[0].view;
  uint32_t mask = graph_attr_reduce_mask(q);
  int acc = lower_reduce_init(k, q->op, t);
  for (int64_t e = 0; e < terms; e++) {
    for (int64_t d = v->ndim - 1, rest = e; d >= 0; d--)
      if (mask & (1u << d)) ranges[d] = kir_const_i(k, KIR_INDEX, rest % v->sizes[d]), rest /= v->sizes[d];
    acc = kir_alu(k, lower_reduce_alu(q->op, t), t, acc, reduce_term(c, q, ranges, t), -1);
  }
  for (int d = 0; d < v->ndim; d++)
    if (mask & (1u << d)) ranges[d] = -1;
  c->spill_stored = c->spill_stored || q->inputs[0].node == c->spill;
  return acc;
}

/* The reduction q over its masked dims, inside loops that already range
 * over its kept dims (ranges[d] set for every kept d). Returns its value
 * rounded to q's dtype (for argmax/argmin, the index). */
static int emit_reduce(lower_ctx *c, const graph_node *q, int *ranges) {
  kir_kernel *k = c->k;
  const graph_view *v = &q->inputs[0].view;
  uint32_t mask = graph_attr_reduce_mask(q);
  bool is_arg = q->op == GRAPH_OP_ARGMAX || q->op == GRAPH_OP_ARGMIN;
  kir_type t = lower_reduce_acc_type(q);
  int64_t terms = is_arg ? 0 : c->opts->unroll_reduce; /* the kernel's reductions share their sizes */
  if (terms) return pass_to_register(k, pass_cast_to(k, kir_type_of(q->dtype), unrolled_reduce(c, q, ranges, t, terms)));
  int red_dim = -1;
  int acc = kir_acc(k, t, lower_reduce_init(k, q->op, t));
  int acc_idx = is_arg ? kir_acc(k, KIR_I64, kir_const_i(k, KIR_I64, 0)) : -1;
  for (int d = 0; d < v->ndim; d++)
    if (mask & (1u << d)) ranges[red_dim = d] = kir_range(k, v->sizes[d], false);
  int x = reduce_term(c, q, ranges, t);
  c->spill_stored = c->spill_stored || q->inputs[0].node == c->spill;
  if (is_arg) arg_update(k, q->op, acc, acc_idx, x, ranges[red_dim]);
  else reduce_update(k, q->op, acc, x);
  for (int d = v->ndim - 1; d >= 0; d--)
    if (mask & (1u << d)) {
      kir_end(k, ranges[d]);
      ranges[d] = -1;
    }
  c->n_memo = 0; /* values of the closed loops are out of scope */
  return pass_to_register(k, pass_cast_to(k, kir_type_of(q->dtype), is_arg ? acc_idx : acc));
}

/* Opens the loops over the kept (leading) dims of view v under mask; the
 * parallel one is the first kept loop of more than one iteration (or
 * the last kept one), as open_ranges'. */
static void open_kept(lower_ctx *c, const graph_view *v, uint32_t mask, int *ranges) {
  int par = -1;
  for (int d = 0; d < v->ndim; d++)
    if (!(mask & (1u << d)) && (par < 0 || v->sizes[par] == 1)) par = d;
  for (int d = 0; d < v->ndim; d++) {
    ranges[d] = -1;
    if (mask & (1u << d)) continue;
    ranges[d] = kir_range(c->k, v->sizes[d], d == par);
  }
}

static int lower_reduce(lower_ctx *c) {
  const graph_node *n = c->root;
  if (c->opts->column_block) return lower_columns(c, c->opts->column_block);
  int ranges[KILN_MAX_DIMS];
  open_kept(c, &n->inputs[0].view, graph_attr_reduce_mask(n), ranges);
  lower_store_contiguous(c, ranges, emit_reduce(c, n, ranges));
  lower_close_ranges(c->k, n->inputs[0].view.ndim, ranges);
  return KILN_OK;
}

bool pass_same_rows(const graph_node *a, const graph_node *b) {
  const graph_view *va = &a->inputs[0].view, *vb = &b->inputs[0].view;
  if (graph_attr_reduce_mask(a) != graph_attr_reduce_mask(b) || va->ndim != vb->ndim) return false;
  for (int d = 0; d < va->ndim; d++)
    if (va->sizes[d] != vb->sizes[d]) return false;
  return true;
}

bool pass_rows_fit(const graph_node *root, const graph_node *q, int *n_outer_out, bool *full) {
  const graph_view *v = &q->inputs[0].view;
  int n_outer = 0;
  while (n_outer < v->ndim && !(graph_attr_reduce_mask(q) & (1u << n_outer))) n_outer++;
  *n_outer_out = n_outer;
  *full = false;
  if (graph_ops[root->op].kind == GRAPH_REDUCE) return pass_same_rows(root, q);
  if (root->ndim == n_outer && n_outer < v->ndim) {
    for (int d = 0; d < n_outer; d++)
      if (root->sizes[d] != v->sizes[d]) return false;
    return true;
  }
  if (root->ndim != v->ndim) return false;
  bool all_full = true, all_one = true;
  for (int d = 0; d < v->ndim; d++) {
    if (d < n_outer && root->sizes[d] != v->sizes[d]) return false;
    if (d >= n_outer) {
      all_full &= root->sizes[d] == v->sizes[d];
      all_one &= root->sizes[d] == 1;
    }
  }
  *full = all_full;
  return all_full || all_one;
}

/* Row fusion: for each block of leading indices (a row), every fused
 * reduction runs over the row, then the root consumes the row values —
 * one pass over memory for softmax, layer norm, variance, logsumexp. */
static int lower_rows(lower_ctx *c) {
  const graph_node *root = c->root, *q0 = c->rows[0];
  const graph_view *v = &q0->inputs[0].view;
  bool full = false;
  for (int i = 1; i < c->n_rows; i++)
    if (!pass_same_rows(c->rows[i], q0)) return KILN_ERR_UNSUPPORTED;
  if (!pass_rows_fit(root, q0, &c->n_outer, &full)) return KILN_ERR_UNSUPPORTED;
  int ranges[KILN_MAX_DIMS];
  if (full && graph_ops[root->op].kind != GRAPH_REDUCE && c->opts->spill >= 0)
    c->spill = c->plan->order[c->opts->spill]; /* kept in the output for the epilogue */
  open_kept(c, v, graph_attr_reduce_mask(q0), ranges);
  for (int d = 0; d < c->n_outer; d++) c->outer[d] = ranges[d];
  for (int i = 0; i < c->n_rows; i++) c->row_value[i] = emit_reduce(c, c->rows[i], ranges);
  int value;
  if (graph_ops[root->op].kind == GRAPH_REDUCE) {
    value = emit_reduce(c, root, ranges);
  } else if (full) {
    for (int d = c->n_outer; d < v->ndim; d++) ranges[d] = kir_range(c->k, v->sizes[d], false);
    value = value_at(c, root, ranges);
  } else {
    int idx[KILN_MAX_DIMS];
    for (int d = 0; d < v->ndim; d++) idx[d] = d < c->n_outer ? ranges[d] : kir_const_i(c->k, KIR_INDEX, 0);
    value = value_at(c, root, idx);
  }
  if (stopped(c) || value < 0) return KILN_ERR_UNSUPPORTED;
  lower_store_contiguous(c, ranges, value);
  lower_close_ranges(c->k, v->ndim, ranges);
  return KILN_OK;
}

/* Scan (cumsum, cumprod) along one dim: loops over the other dims (the
 * first of them parallel, so rows of the scan split across threads), then
 * a sequential loop over the scanned dim with one accumulator, storing
 * the running value at every element. Floats accumulate in F64, integers
 * and bool in I64 (exact, wrapping as int64), as sums and products do;
 * the update is not reassociable: element i depends on every j < i.
 *
 * With the options' scan_lanes > 1 (the last dim is not the scanned one
 * and a multiple of it), that many neighbouring scans run together (one
 * accumulator each, loops: the other kept dims, blocks of the last dim,
 * the scanned dim, the lanes), so a scan down the columns reads whole
 * cache lines instead of one element per line. Each element sees the
 * same sequence of updates either way. */
static int lower_scan(lower_ctx *c) {
  const graph_node *n = c->root;
  kir_kernel *k = c->k;
  const graph_view *v = &n->inputs[0].view;
  uint32_t mask = graph_attr_reduce_mask(n);
  int ranges[KILN_MAX_DIMS], s = -1, last = v->ndim - 1;
  for (int d = 0; d < v->ndim; d++)
    if (mask & (1u << d)) s = d;
  if (s < 0) return KILN_ERR_UNSUPPORTED;
  graph_op red = n->op == GRAPH_OP_CUMSUM ? GRAPH_OP_SUM : GRAPH_OP_PROD;
  kir_type t = graph_is_float(n->dtype) ? KIR_F64 : KIR_I64;
  graph_view out = graph_view_contiguous(n->ndim, n->sizes);
  bool lanes = c->opts->scan_lanes > 1;
  int n_lanes = lanes ? c->opts->scan_lanes : 1, acc[PASS_SCAN_LANES_MAX], block = -1, base = -1;
  if (!lanes) {
    open_kept(c, v, mask, ranges);
  } else {
    bool first = true;
    for (int d = 0; d < last; d++) {
      ranges[d] = -1;
      if (d == s) continue;
      ranges[d] = kir_range(k, v->sizes[d], first);
      first = false;
    }
    block = kir_range(k, v->sizes[last] / n_lanes, first);
    base = pass_alu2(k, KIR_MUL, block, kir_const_i(k, KIR_INDEX, n_lanes));
  }
  for (int u = 0; u < n_lanes; u++) acc[u] = kir_acc(k, t, lower_reduce_init(k, red, t));
  ranges[s] = kir_range(k, v->sizes[s], false);
  for (int u = 0; u < n_lanes; u++) {
    if (lanes) ranges[last] = pass_alu2(k, KIR_ADD, base, kir_const_i(k, KIR_INDEX, u));
    int x = pass_cast_to(k, t, lower_input_at(c, n, 0, ranges));
    int upd = kir_alu(k, lower_reduce_alu(red, t), t, acc[u], x, -1);
    kir_acc_set(k, acc[u], upd);
    int value = pass_to_register(k, pass_cast_to(k, kir_type_of(n->dtype), upd));
    kir_store(k, c->out, view_index(k, &out, ranges, -1), pass_cast_to(k, kir_type_of(n->dtype), value));
  }
  kir_end(k, ranges[s]);
  ranges[s] = -1;
  c->n_memo = 0; /* values of the closed loop are out of scope */
  if (lanes) {
    kir_end(k, block);
    ranges[last] = -1;
  }
  lower_close_ranges(k, v->ndim, ranges);
  return stopped(c) ? KILN_ERR_UNSUPPORTED : KILN_OK;
}

/* Scatter-add into chunk partials (ops.def SCATTER): the root is [C, *t
 * sizes]; the parallel loop runs over its C rows. Row c is zeroed, then
 * takes the index elements [c*L, c*L + L) (L = ceil(N / C), row-major
 * over the index's sizes), each added at its destination in order: every
 * row is written by one thread only, so the sum of a destination within
 * a chunk is the sequential loop's, and the chunks are fixed by the sizes
 * (never by the thread count). Elements past N (the last chunk's tail)
 * add 0 at a clamped position; the index is clamped into [0, size) as a
 * gather's is, so no value can make the kernel write outside its row.
 * The source and the index are read at the element's coordinates:
 * producers fused into them are computed there, once per element. */
/* Adds src at idx (the index's coordinates; the scatter dim's replaced by
 * the index value, clamped into the target) into out at row + the
 * target's offset; `mask`, when >= 0, zeroes the value. */
static void scatter_one(lower_ctx *c, const int *idx, int row, int first, int mask) {
  const graph_node *n = c->root;
  kir_kernel *k = c->k;
  const graph_view *iv = &n->inputs[1].view;
  int nd = iv->ndim, dim = (int)graph_attr_scalar(n);
  int64_t size = n->sizes[1 + dim], ts[KILN_MAX_DIMS];
  graph_contiguous_strides(n->ndim - 1, n->sizes + 1, ts);
  int at = pass_cast_to(k, KIR_INDEX, lower_input_at(c, n, 1, idx));
  at = pass_alu2(k, KIR_MAX, at, kir_const_i(k, KIR_INDEX, 0));
  at = pass_alu2(k, KIR_MIN, at, kir_const_i(k, KIR_INDEX, size > 0 ? size - 1 : 0));
  int dest = row;
  for (int d = first; d < nd; d++) {
    int coord = d == dim ? at : idx[d];
    dest = pass_alu2(k, KIR_ADD, dest, ts[d] == 1 ? coord : pass_alu2(k, KIR_MUL, coord, kir_const_i(k, KIR_INDEX, ts[d])));
  }
  int v = pass_cast_to(k, kir_type_of(n->dtype), lower_input_at(c, n, 0, idx));
  if (mask >= 0) v = pass_where(k, mask, v, pass_cst(k, kir_type_of(n->dtype), 0));
  int old = pass_to_register(k, kir_load(k, c->out, dest));
  kir_store(k, c->out, dest, pass_alu2(k, KIR_ADD, old, v));
}

/* One chunk, scattering along a dim other than 0: target slabs along dim
 * 0 are disjoint, so the slabs run in parallel (each zeroed, then the
 * index elements of its dim-0 coordinate added in order — the order one
 * chunk adds them in, so the same sums). Index dim 0 may be shorter than
 * the target's: the slabs past it stay zero (their values masked). */
static int lower_scatter_slabs(lower_ctx *c) {
  const graph_node *n = c->root;
  kir_kernel *k = c->k;
  const graph_view *iv = &n->inputs[1].view;
  int nd = iv->ndim, idx[KILN_MAX_DIMS];
  int64_t slabs = n->sizes[1], slab = slabs > 0 ? n->numel / slabs : 0;
  int t0 = kir_range(k, slabs, true);
  int row = pass_alu2(k, KIR_MUL, t0, kir_const_i(k, KIR_INDEX, slab));
  int z = kir_range(k, slab, false);
  kir_store(k, c->out, pass_alu2(k, KIR_ADD, row, z), pass_cst(k, kir_type_of(n->dtype), 0));
  kir_end(k, z);
  if (graph_view_numel(iv) > 0) {
    idx[0] = pass_alu2(k, KIR_MIN, t0, kir_const_i(k, KIR_INDEX, iv->sizes[0] - 1));
    int valid = pass_cmp(k, KIR_CMPLT, t0, kir_const_i(k, KIR_INDEX, iv->sizes[0]));
    open_ranges(k, nd - 1, iv->sizes + 1, idx + 1);
    scatter_one(c, idx, row, 1, valid);
    lower_close_ranges(k, nd - 1, idx + 1);
  }
  kir_end(k, t0);
  c->n_memo = 0;
  return stopped(c) ? KILN_ERR_UNSUPPORTED : KILN_OK;
}

static int lower_scatter(lower_ctx *c) {
  const graph_node *n = c->root;
  kir_kernel *k = c->k;
  const graph_view *iv = &n->inputs[1].view;
  int nd = iv->ndim, idx[KILN_MAX_DIMS];
  if (c->opts->scatter_slabs) return lower_scatter_slabs(c);
  int64_t total = graph_view_numel(iv), chunks = n->sizes[0], row_len = n->numel / (chunks > 0 ? chunks : 1);
  int64_t len = chunks > 0 ? (total + chunks - 1) / chunks : 0;
  int ch = kir_range(k, chunks, true);
  int row = pass_alu2(k, KIR_MUL, ch, kir_const_i(k, KIR_INDEX, row_len));
  int z = kir_range(k, row_len, false);
  kir_store(k, c->out, pass_alu2(k, KIR_ADD, row, z), pass_cst(k, kir_type_of(n->dtype), 0));
  kir_end(k, z);
  if (total > 0 && len > 0) {
    int i = kir_range(k, len, false);
    int e = pass_alu2(k, KIR_ADD, pass_alu2(k, KIR_MUL, ch, kir_const_i(k, KIR_INDEX, len)), i);
    int valid = pass_cmp(k, KIR_CMPLT, e, kir_const_i(k, KIR_INDEX, total));
    int rem = pass_alu2(k, KIR_MIN, e, kir_const_i(k, KIR_INDEX, total - 1));
    for (int d = nd - 1; d >= 0; d--) { /* e's coordinates in the index's sizes */
      idx[d] = d == 0 ? rem : pass_alu2(k, KIR_MOD, rem, kir_const_i(k, KIR_INDEX, iv->sizes[d]));
      if (d > 0) rem = pass_alu2(k, KIR_DIV, rem, kir_const_i(k, KIR_INDEX, iv->sizes[d]));
    }
    scatter_one(c, idx, row, 0, valid);
    kir_end(k, i);
  }
  kir_end(k, ch);
  c->n_memo = 0; /* values of the closed loops are out of scope */
  return stopped(c) ? KILN_ERR_UNSUPPORTED : KILN_OK;
}

/* The order in which the loops over a written region open: by decreasing
 * stride, so the innermost loop writes with the smallest stride (unit
 * stride through a transposed destination, x.t().copy_(y)) — when that
 * order walks each element once (every stride at least the next one's
 * stride times its size), else the region's own dim order. Size-1 dims go
 * outermost. Each element gets the same value either way. */
static void write_order(const graph_view *reg, int *perm) {
  int nd = reg->ndim;
  int64_t key[KILN_MAX_DIMS];
  for (int d = 0; d < nd; d++) {
    perm[d] = d;
    key[d] = reg->sizes[d] == 1 ? INT64_MAX : reg->strides[d];
  }
  for (int i = 1; i < nd; i++) /* stable insertion sort, decreasing key */
    for (int j = i; j > 0 && key[perm[j - 1]] < key[perm[j]]; j--) {
      int t = perm[j];
      perm[j] = perm[j - 1];
      perm[j - 1] = t;
    }
  for (int i = 0; i + 1 < nd; i++) {
    int a = perm[i], b = perm[i + 1];
    if (reg->sizes[a] == 1) continue;
    if (reg->strides[b] <= 0 || reg->strides[a] < reg->strides[b] * reg->sizes[b]) {
      for (int d = 0; d < nd; d++) perm[d] = d;
      return;
    }
  }
}

/* The leading dims of a partial write's region that tile its result's
 * buffer: the first of more than one element steps by a slab of
 * numel / size elements, each next one by a slab of the one before's,
 * size-1 dims anywhere among them. Their *slabs index combinations each
 * own *slab_len consecutive elements, and the region's other dims stay
 * inside the slab they start in: the region lies in the buffer with
 * non-negative strides, so its offset plus its inner extent is less than
 * a slab, whatever offset a rebound schedule gives it (kiln_pad's
 * interior: the batch and channel dims). 0 when no dim tiles. */
static int tiling_dims(const graph_node *n, const graph_view *reg, int64_t *slabs, int64_t *slab_len) {
  int j = 0;
  int64_t len = n->numel, count = 1;
  for (int d = 0; d < reg->ndim; d++)
    if (reg->strides[d] < 0) return 0;
  for (; j < reg->ndim; j++) {
    int64_t size = reg->sizes[j];
    if (size == 1) continue;
    if (size < 1 || reg->strides[j] * size != len) break;
    len = reg->strides[j], count *= size;
  }
  *slabs = count, *slab_len = len;
  return count > 1 ? j : 0;
}

/* A partial write into a new buffer: the old contents, then the region,
 * in one loop over the slabs of tiling_dims (each parallel index copies
 * its slab, then writes its part of the region: the leading coordinates
 * come from the slab's index), or, where no dim tiles, a parallel copy
 * and then a serial region loop. ranges: the region's coordinates found
 * here, -1 for those the caller opens; *slab: the slab loop, or -1. */
static void assign_over_slabs(lower_ctx *c, const graph_view *reg, int *ranges, int *slab) {
  const graph_node *n = c->root;
  kir_kernel *k = c->k;
  int64_t slabs = 1, len = n->numel;
  int lead = tiling_dims(n, reg, &slabs, &len);
  for (int d = 0; d < reg->ndim; d++) ranges[d] = -1;
  *slab = lead > 0 ? kir_range(k, slabs, true) : -1;
  int r = kir_range(k, len, lead == 0);
  int f = lead == 0 ? r : pass_alu2(k, KIR_ADD, pass_alu2(k, KIR_MUL, *slab, kir_const_i(k, KIR_INDEX, len)), r);
  kir_store(k, c->out, f, pass_cast_to(k, kir_type_of(n->dtype), lower_input_at(c, n, 0, &f)));
  kir_end(k, r);
  c->n_memo = 0;
  int rem = *slab, outer = 0;
  while (outer < lead && reg->sizes[outer] == 1) outer++;
  for (int d = lead - 1; d >= 0; d--) {
    int64_t size = reg->sizes[d];
    if (size == 1) {
      ranges[d] = kir_const_i(k, KIR_INDEX, 0);
      continue;
    }
    ranges[d] = d == outer ? rem : pass_alu2(k, KIR_MOD, rem, kir_const_i(k, KIR_INDEX, size));
    if (d != outer) rem = pass_alu2(k, KIR_DIV, rem, kir_const_i(k, KIR_INDEX, size));
  }
}

/* New version = old contents with the region overwritten by the value.
 * The region's offset is the last argument. A whole write overwrites
 * every element: in place or not, its old contents are never read, and
 * its region loop is the parallel one; so is an in-place write's. A
 * partial write into a new buffer copies the old contents first
 * (assign_over_slabs). Results it stores besides its own (multi-output)
 * are stored in the region loop. */
static int lower_assign(lower_ctx *c, bool in_place, int region_off) {
  const graph_node *n = c->root;
  kir_kernel *k = c->k;
  bool whole = pass_whole_write(n), copy = !in_place && !whole;
  graph_view region = graph_attr_region(n);
  const graph_view *reg = &region;
  int ranges[KILN_MAX_DIMS] = {0}, perm[KILN_MAX_DIMS]; /* {0}: GCC cannot bound a decoded ndim */
  int slab = -1, opened[KILN_MAX_DIMS], n_opened = 0;
  if (copy) assign_over_slabs(c, reg, ranges, &slab);
  write_order(reg, perm);
  for (int i = 0; i < reg->ndim; i++) {
    int d = perm[i];
    if (copy && ranges[d] >= 0) continue; /* a leading coordinate of the slab */
    ranges[d] = kir_range(k, reg->sizes[d], !copy && n_opened == 0);
    opened[n_opened++] = ranges[d];
  }
  int val = lower_input_at(c, n, 1, ranges);
  kir_store(k, c->out, view_index(k, reg, ranges, region_off), pass_cast_to(k, kir_type_of(n->dtype), val));
  int st = store_outputs(c, ranges);
  for (int i = n_opened - 1; i >= 0; i--) kir_end(k, opened[i]);
  if (slab >= 0) kir_end(k, slab);
  return st;
}

/* The extra outputs of a multi-output kernel (PARAM 3 + j), walked
 * before the root's group so their external reads join the kernel's. A
 * stored write must be a whole one (its value is elementwise over its
 * region); its old version is not read. */
static void add_outputs(lower_ctx *c) {
  const pass_plan *p = c->plan;
  int at = pass_pos(p, c->host);
  for (int s = at >= 0 ? p->e[at].stores : -1; s >= 0 && !stopped(c); s = p->e[s].store_next) {
    const graph_node *x = p->order[s];
    if (c->b->n_outputs == PASS_MAX_OUTPUTS) {
      over_limit(c, PASS_MAX_OUTPUTS, "stored results", "PASS_MAX_OUTPUTS");
      break;
    }
    if (x->op == GRAPH_OP_ASSIGN && !pass_whole_write(x)) {
      c->unfit = "a stored write that is not a whole-buffer write";
      break;
    }
    int j = c->b->n_outputs++;
    c->b->outputs[j] = p->order[s];
    c->b->output_pos[j] = s;
    c->store_param[j] = kir_param(c->k, kir_type_of(p->order[s]->dtype), true);
  }
  for (int j = 0; j < c->b->n_outputs && !stopped(c); j++)
    if (!seen(c, c->b->outputs[j])) walk(c, c->b->outputs[j], c->b->outputs[j]->op == GRAPH_OP_ASSIGN);
}

/* ------------------------------------------------- the table of kinds */

static int root_elementwise(lower_ctx *c, bool in_place) { return lower_elementwise(c); }
static int root_reduce(lower_ctx *c, bool in_place) { return lower_reduce(c); }
static int root_scan(lower_ctx *c, bool in_place) { return lower_scan(c); }
static int root_scatter(lower_ctx *c, bool in_place) { return lower_scatter(c); }

static int root_assign(lower_ctx *c, bool in_place) {
  int off = lower_int_arg(c, graph_attr_region(c->root).offset);
  return off < 0 ? KILN_ERR_UNSUPPORTED : lower_assign(c, in_place, off);
}

/* What the elements of a kernel's work are: its output's, the input it
 * reduces, or the region an in-place write covers. */
typedef enum kernel_cost { COST_OUTPUT, COST_INPUT, COST_REGION, COST_SCATTER } kernel_cost;

/* How a kernel root of each kind is lowered, named and costed: one row
 * per graph_kind, so a new kind of kernel is one row and its lowering
 * function. `lower` runs after the group was walked (external reads
 * bound); NULL: never a generated kernel (extern ops run in the runtime).
 * `prefix` starts the kernel's name; `rows`: it may consume fused row
 * reductions (lower_rows); `outputs`: it may store further results
 * (multi-output, fuse.c rule 7); `skips_old`: in place, or when it
 * writes every element (pass_whole_write), it does not read its first
 * input (the old version it writes into). */
typedef struct kind_rules {
  char prefix;
  int (*lower)(lower_ctx *c, bool in_place);
  bool rows, outputs, skips_old;
  kernel_cost cost;
} kind_rules;

static const kind_rules kinds[GRAPH_KIND_COUNT] = {
    [GRAPH_SOURCE] = {'S', root_elementwise, true, false, false, COST_OUTPUT},
    [GRAPH_UNARY] = {'E', root_elementwise, true, true, false, COST_OUTPUT},
    [GRAPH_BINARY] = {'E', root_elementwise, true, true, false, COST_OUTPUT},
    [GRAPH_TERNARY] = {'E', root_elementwise, true, true, false, COST_OUTPUT},
    [GRAPH_CAST] = {'C', root_elementwise, true, true, false, COST_OUTPUT},
    [GRAPH_GATHER] = {'G', root_elementwise, true, false, false, COST_OUTPUT},
    [GRAPH_REDUCE] = {'R', root_reduce, true, false, false, COST_INPUT},
    [GRAPH_SCAN] = {'P', root_scan, false, false, false, COST_OUTPUT},
    [GRAPH_ASSIGN] = {'A', root_assign, false, true, true, COST_REGION},
    [GRAPH_SCATTER] = {'I', root_scatter, false, false, false, COST_SCATTER},
    [GRAPH_EXTERN] = {'X', NULL, false, false, false, COST_OUTPUT},
};

pass_kernel_cost pass_kernel_cost_of(const graph_node *n, bool in_place, int n_ops) {
  kernel_cost cost = kinds[graph_ops[n->op].kind].cost;
  pass_kernel_cost r = {.numel = n->numel, .written = n->numel, .work = n->numel};
  int64_t per_elem = n_ops;
  if (cost == COST_REGION) {
    graph_view region = graph_attr_region(n);
    r.numel = graph_view_numel(&region);
    if (in_place) r.written = r.work = r.numel;
    per_elem = n_ops - 1; /* the write itself */
  }
  r.flops = r.numel * (per_elem > 0 ? per_elem : 0);
  if (cost == COST_INPUT) {
    r.work = graph_view_numel(&n->inputs[0].view);
    r.flops = r.work * n_ops;
  }
  if (cost == COST_SCATTER) { /* zero the partials, then one add per index element */
    int64_t elems = graph_view_numel(&n->inputs[1].view);
    r.work = n->numel + elems;
    r.flops = elems * n_ops;
  }
  return r;
}

static int lower_root(lower_ctx *c, bool in_place) {
  const graph_node *n = c->root;
  const kind_rules *rules = &kinds[graph_ops[n->op].kind];
  c->out = kir_param(c->k, kir_type_of(n->dtype), true);
  c->args = kir_param(c->k, KIR_I64, false);
  c->fargs = kir_param(c->k, KIR_F64, false);
  add_outputs(c);
  if (c->b->n_outputs > 0 && !rules->outputs) return KILN_ERR_UNSUPPORTED;
  walk(c, n, rules->skips_old && (in_place || pass_whole_write(n)));
  if (stopped(c)) return KILN_ERR_UNSUPPORTED;
  if (c->gemm_x) return c->n_rows == 0 && !c->b->n_outputs && rules->lower == root_elementwise ? lower_gemm_tile(c)
                                                                                                : KILN_ERR_UNSUPPORTED;
  if (c->n_rows > 0) return rules->rows && !c->b->n_outputs ? lower_rows(c) : KILN_ERR_UNSUPPORTED;
  return rules->lower(c, in_place);
}

/* The kernel's name, as the profiler and KILN_DEBUG show it: its kind
 * (the table's prefix: E elementwise, R reduction or row-fused, P scan
 * (cumsum, cumprod), A in-place write, C cast, S source, G gather, I
 * scatter-add into partials), the
 * ops it computes (producers first) and the root's sizes, e.g.
 * E_mul_add_relu_16777216 or R_amax_sub_exp_sum_div_4096x4096. */
static void finish_name(lower_ctx *c, const graph_node *n) {
  char kind = c->n_rows > 0 ? 'R' : kinds[graph_ops[n->op].kind].prefix; /* a row-fused kernel reduces rows */
  int len = snprintf(c->k->name, sizeof c->k->name, "%c%s", kind, c->name);
  for (int d = 0; d < n->ndim && len < 90; d++)
    len += snprintf(c->k->name + len, sizeof c->k->name - (size_t)len, d ? "x%lld" : "_%lld", (long long)n->sizes[d]);
}

/* The end of a lowering with status st: k freed and the message in err
 * on failure, else k named. */
static int finish(lower_ctx *c, const graph_node *n, int st, char *err, size_t errlen) {
  kir_kernel *k = c->k;
  free_state(c);
  if (k->oom || c->oom) st = KILN_ERR_OOM; /* whatever failed after an append could not allocate */
  if (st == KILN_ERR_OOM) snprintf(err, errlen, "out of memory lowering op %s", graph_ops[n->op].name);
  else if (st != KILN_OK)
    snprintf(err, errlen, "cannot lower op %s (%s%s%s)", graph_ops[n->op].name, graph_status_name(st),
             c->unfit ? ": " : "", c->unfit ? c->unfit : "");
  if (st != KILN_OK) {
    kir_free(k);
    return st;
  }
  finish_name(c, n); /* named after the graph's shape, merged or not */
  return KILN_OK;
}

/* No output of the kernel (its root, the further results it stores) is an
 * ASSIGN, the only kind that may write in place (realize.c): a kernel
 * with one keeps the loop order lowering gave it, and only a kernel
 * without one writes fresh buffers alone (kir_mark_fresh_outputs). */
static bool writes_no_assign(const graph_node *n, const pass_binding *b) {
  if (n->op == GRAPH_OP_ASSIGN) return false;
  for (int j = 0; j < b->n_outputs; j++)
    if (b->outputs[j]->op == GRAPH_OP_ASSIGN) return false;
  return true;
}

int pass_lower_node(const pass_plan *p, const graph_node *n, bool in_place, kir_kernel *k, pass_binding *b, char *err,
                    size_t errlen) {
  kir_init(k, "");
  memset(b, 0, sizeof *b);
  pass_merged merged; /* the loop nest over merged dims, when it has any to merge */
  bool not_kernel = n->op == GRAPH_OP_BUFFER || !kinds[graph_ops[n->op].kind].lower;
  int at = pass_pos(p, n);
  bool stores = at >= 0 && p->e[at].stores >= 0;
  bool merge_oom = false;
  bool merge = !not_kernel && !stores && pass_merge_loops(p, n, &merged, &merge_oom);
  pass_opts opts;
  lower_ctx c = {.k = k, .plan = p, .root = merge ? merged.root : n, .host = n, .b = b, .opts = &opts, .oom = merge_oom};
  int st = not_kernel ? KILN_ERR_ARG : merge_oom ? KILN_ERR_OOM : pass_choose_opts(p, c.root, n, in_place, &opts);
  if (st == KILN_OK) st = lower_root(&c, in_place);
  if (st == KILN_OK && writes_no_assign(n, b)) {
    pass_order_loops(k);
    kir_mark_fresh_outputs(k);
  }
  if (merge) pass_merged_free(&merged);
  st = finish(&c, n, st, err, errlen);
  if (st == KILN_OK) pass_opts_debug(&opts, k->name);
  return st;
}

int pass_lower_gemm_tile(const pass_plan *p, const graph_node *root, const graph_node *x, int64_t mr, int64_t nr,
                         int64_t ld, kir_kernel *k, pass_binding *b, int *coord_arg, char *err, size_t errlen) {
  kir_init(k, "");
  memset(b, 0, sizeof *b);
  pass_opts opts = {.path = PASS_PATH_ELEMENTWISE}; /* the plain loop nest: lower_gemm_tile chooses nothing */
  lower_ctx c = {.k = k, .plan = p, .root = root, .host = root, .b = b, .opts = &opts, .gemm_x = x, .gemm_mr = mr,
                 .gemm_nr = nr, .gemm_ld = ld, .gemm_arg = -1, .gemm_i = -1, .gemm_j = -1};
  bool ok = root->op != GRAPH_OP_BUFFER && kinds[graph_ops[root->op].kind].lower == root_elementwise && x->ndim == 2;
  int st = finish(&c, root, ok ? lower_root(&c, false) : KILN_ERR_ARG, err, errlen);
  *coord_arg = c.gemm_arg;
  return st;
}
