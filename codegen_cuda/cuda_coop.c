/*
 * cuda_coop.c — plans the cooperative form of a reduction kernel
 * (cuda_coop.h; docs/cuda.md, "The generated code"), and the launch rule
 * that follows from it (cuda_backend.h).
 *
 * In that form one block of threads computes one index of the parallel
 * range (blocks step over the range by gridDim.x). The body of the
 * parallel range — or, in a kernel without one (a whole-tensor
 * reduction), the whole kernel on block 0 — is a "uniform level": every
 * thread of the block runs it in step, so barriers there are reached by
 * all. Each RANGE met at a uniform level is classified:
 *  - REDUCE: it sets accumulators defined before it, each only through
 *    ACC_SET(acc, op(acc, x)) with op a combine (ADD, MUL, XOR, MAX, MIN,
 *    AND, OR; float ADD and MUL only when marked reassoc), the
 *    accumulator read nowhere else in the loop, the update used only by
 *    its ACC_SET, and no STORE inside. Its iterations are split over the
 *    threads, then each accumulator is combined across the block;
 *  - UNIFORM: it sets no accumulator defined before it but contains a
 *    loop that does (a row reduction inside a kept dim): all threads run
 *    it, and its body is a uniform level again;
 *  - STRIDED: it sets no accumulator defined before it and holds no
 *    reduction: its iterations are independent (an epilogue over the
 *    row), split over the threads;
 *    An arg reduction (argmax/argmin: a value and an index accumulator
 *    updated by compare-and-select, arg_form) is a REDUCE loop too, its
 *    pair combined by value, NaN first, ties to the smaller index;
 *  - anything else (a scan storing its running values) keeps the whole
 *    kernel in the one-thread-per-output form.
 * A REDUCE loop whose body is exactly one RANGE, recursively (a reduction
 * over several dims), is flattened into one index over the product of
 * the extents, so all threads share the work whatever the dims' sizes.
 * The form applies to splittable kernels and to kernels without a
 * parallel range, when they contain at least one REDUCE loop of
 * CUDA_COOP_MIN_EXTENT elements or more (shorter rows: a thread per output
 * does better than a warp of mostly idle lanes).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_coop.h"
#include "cuda_vec.h"

bool cuda_coop_idempotent(kir_op op) { return op == KIR_MAX || op == KIR_MIN || op == KIR_AND || op == KIR_OR; }

static bool is_combine(kir_op op) {
  return op == KIR_ADD || op == KIR_MUL || op == KIR_XOR || cuda_coop_idempotent(op);
}

/* Scratch of one plan, per uop: acc_in, the REDUCE loop (RANGE index)
 * that sets it as an accumulator; upd_in, the accumulator it updates; -1
 * if none. */
typedef struct scratch {
  int *acc_in, *upd_in;
} scratch;

/* True when ACC_SET s inside loop [r, e] is acc = op(acc, x), x not acc,
 * with the update computed inside the loop. */
static bool combine_form(const kir_kernel *k, int s, int r, int e) {
  int acc = k->uops[s].src[0], u = k->uops[s].src[1];
  if (u <= r || u >= e) return false;
  const kir_uop *x = &k->uops[u];
  if (!is_combine(x->op) || (x->src[0] == acc) == (x->src[1] == acc)) return false;
  bool fp = x->type == KIR_F32 || x->type == KIR_F64;
  return !fp || x->reassoc || cuda_coop_idempotent(x->op);
}

/* True when every earlier ACC_SET in loop r of the accumulator that
 * ACC_SET i sets uses the same combine op (the block combines with one). */
static bool same_op_as_before(const kir_kernel *k, int r, int i) {
  int acc = k->uops[i].src[0];
  kir_op op = k->uops[k->uops[i].src[1]].op;
  for (int j = r + 1; j < i; j++)
    if (k->uops[j].op == KIR_ACC_SET && k->uops[j].src[0] == acc && k->uops[k->uops[j].src[1]].op != op) return false;
  return true;
}

/* True when loop r sets an accumulator defined before it. */
static bool sets_outer(const kir_kernel *k, const cuda_coop *p, int r) {
  for (int i = r + 1; i < p->end[r]; i++)
    if (k->uops[i].op == KIR_ACC_SET && k->uops[i].src[0] < r) return true;
  return false;
}

/* In REDUCE candidate r (its accumulators and updates stamped in sc):
 * every use of an accumulator is its update or ACC_SET, and every use of
 * an update is its ACC_SET. */
static bool only_updates(const kir_kernel *k, const cuda_coop *p, const scratch *sc, int r) {
  for (int j = r + 1; j < p->end[r]; j++) {
    const kir_uop *u = &k->uops[j];
    bool set = u->op == KIR_ACC_SET;
    for (int a = 0; a < 3; a++) {
      int s = u->src[a];
      if (s < 0) continue;
      if (sc->acc_in[s] == r && !(set && a == 0) && sc->upd_in[j] != s) return false;
      if (sc->upd_in[s] >= 0 && !(set && a == 1 && u->src[0] == sc->upd_in[s])) return false;
    }
  }
  return true;
}

/* ------------------------------------------------- argmax / argmin */

/* True when uop u is op(a, b). */
static bool is_op(const kir_kernel *k, int u, kir_op op, int a, int b) {
  return u >= 0 && k->uops[u].op == op && k->uops[u].src[0] == a && k->uops[u].src[1] == b;
}

/* An arg reduction's update (passes/lower.c, arg_update) in loop r:
 *    b = CMPLT(A, v) (argmax) or CMPLT(v, A) (argmin), for floats
 *        OR(b, AND(CMPNE(v, v), CMPEQ(A, A))) (the first NaN wins);
 *    I = WHERE(b, CAST(r), I);  A = WHERE(b, v, A)
 * with value accumulator A and index accumulator I defined before r, read
 * nowhere else in the loop, and nothing else depending on them. Fills *a. */
static bool arg_form(const kir_kernel *k, const cuda_coop *p, int r, cuda_coop_arg *a) {
  int e = p->end[r], sets[2], n = 0;
  for (int i = r + 1; i < e; i++) {
    const kir_uop *u = &k->uops[i];
    if (u->op == KIR_STORE) return false;
    if (u->op == KIR_ACC_SET && u->src[0] < r) {
      if (n == 2) return false;
      sets[n++] = i;
    }
  }
  if (n != 2) return false;
  int s_i = sets[0], s_a = sets[1];
  const kir_uop *w = &k->uops[k->uops[s_i].src[1]];
  if (w->op != KIR_WHERE || k->uops[w->src[1]].op != KIR_CAST || k->uops[w->src[1]].src[0] != r) {
    s_i = sets[1];
    s_a = sets[0];
  }
  int I = k->uops[s_i].src[0], A = k->uops[s_a].src[0], wi = k->uops[s_i].src[1], wa = k->uops[s_a].src[1];
  const kir_uop *ui = &k->uops[wi], *ua = &k->uops[wa];
  if (ui->op != KIR_WHERE || ua->op != KIR_WHERE || ui->src[0] != ua->src[0] || ui->src[2] != I || ua->src[2] != A)
    return false;
  int c = ui->src[1], v = ua->src[1], b = ui->src[0];
  if (k->uops[c].op != KIR_CAST || k->uops[c].src[0] != r || k->uops[I].type != KIR_I64 || v == A) return false;
  bool fp = k->uops[A].type == KIR_F32 || k->uops[A].type == KIR_F64;
  int cmp = b, eq = -1, fn = -1;
  if (fp) { /* OR(cmp, AND(CMPNE(v, v), CMPEQ(A, A))) */
    if (k->uops[b].op != KIR_OR) return false;
    cmp = k->uops[b].src[0];
    fn = k->uops[b].src[1];
    if (k->uops[fn].op != KIR_AND) return false;
    int ne = k->uops[fn].src[0];
    eq = k->uops[fn].src[1];
    if (!is_op(k, ne, KIR_CMPNE, v, v) || !is_op(k, eq, KIR_CMPEQ, A, A)) return false;
  }
  if (is_op(k, cmp, KIR_CMPLT, A, v)) a->max = true;
  else if (is_op(k, cmp, KIR_CMPLT, v, A)) a->max = false;
  else return false;
  /* only the update depends on A and I */
  const int dep[] = {A, I, cmp, eq, fn, b, wi, wa}, ok[] = {cmp, eq, fn, b, wi, wa, s_i, s_a};
  for (int j = r + 1; j < e; j++)
    for (int x = 0; x < 3; x++) {
      int src = k->uops[j].src[x];
      bool from_dep = false, allowed = false;
      for (int d = 0; d < 8; d++) from_dep |= src >= 0 && src == dep[d], allowed |= j == ok[d];
      if (from_dep && !allowed) return false;
    }
  a->val = A;
  a->idx = I;
  return true;
}

/* The role of loop r met at a uniform level, or -1 when the cooperative
 * form cannot take it. */
static int classify(const kir_kernel *k, cuda_coop *p, scratch *sc, int r) {
  int e = p->end[r];
  bool sets = false, store = false, nested = false;
  for (int i = r + 1; i < e; i++) {
    const kir_uop *u = &k->uops[i];
    if (u->op == KIR_STORE) store = true;
    if (u->op == KIR_ACC_SET && u->src[0] < r) {
      if (!combine_form(k, i, r, e) || !same_op_as_before(k, r, i))
        return arg_form(k, p, r, &p->arg[r]) ? CUDA_LOOP_REDUCE : -1;
      sets = true;
      sc->acc_in[u->src[0]] = r;
      sc->upd_in[u->src[1]] = u->src[0];
    } else if (u->op == KIR_RANGE && sets_outer(k, p, i)) {
      nested = true;
    }
  }
  if (sets) return store || !only_updates(k, p, sc, r) ? -1 : CUDA_LOOP_REDUCE;
  return nested ? CUDA_LOOP_UNIFORM : CUDA_LOOP_STRIDED;
}

/* Folds the chain of RANGEs perfectly nested in REDUCE loop r into it
 * (FLAT), while the product of the extents stays small; sets div[] (the
 * product of the chain's extents inside each) and returns the product of
 * all of them (the flattened trip count). */
static int64_t flatten(const kir_kernel *k, cuda_coop *p, int r) {
  int last = r;
  int64_t total = k->uops[r].ival;
  while (total > 0 && last + 1 < k->n_uops && k->uops[last + 1].op == KIR_RANGE &&
         p->end[last + 1] == p->end[last] - 1) {
    int64_t ext = k->uops[last + 1].ival;
    if (ext <= 0 || total > (INT64_C(1) << 62) / ext) break;
    total *= ext;
    last++;
    p->role[last] = CUDA_LOOP_FLAT;
    p->root[last] = r;
  }
  int64_t div = 1;
  for (int i = last; i >= r; i--) {
    p->div[i] = div;
    div *= k->uops[i].ival;
  }
  return total;
}

/* Classifies the loops of one uniform level, uops [lo, hi); the number of
 * REDUCE loops found, or -1 when the form does not apply. */
static int plan_level(const kir_kernel *k, cuda_coop *p, scratch *sc, int lo, int hi) {
  int n = 0;
  for (int i = lo; i < hi; i++) {
    if (k->uops[i].op != KIR_RANGE) continue;
    int role = classify(k, p, sc, i);
    if (role < 0) return -1;
    p->role[i] = (uint8_t)role;
    if (role == CUDA_LOOP_UNIFORM) {
      int m = plan_level(k, p, sc, i + 1, p->end[i]);
      if (m < 0) return -1;
      n += m;
    } else if (role == CUDA_LOOP_REDUCE) {
      int64_t trip = k->uops[i].ival;
      if (p->arg[i].val >= 0) p->div[i] = 1, p->has_arg = true; /* the index is the loop's own */
      else trip = flatten(k, p, i);
      if (trip > p->reduce_extent) p->reduce_extent = trip;
      n++;
    }
    i = p->end[i];
  }
  return n;
}

void cuda_coop_free(cuda_coop *p) {
  free(p->role);
  free(p->end);
  free(p->div);
  free(p->root);
  free(p->arg);
  memset(p, 0, sizeof *p);
  p->parallel = -1;
}

/* Threads per block for a reduction of `extent` elements per output: one
 * warp for short rows, else 128 or 256 (at least ~4 elements a thread). */
static unsigned block_for(int64_t extent) { return extent <= 64 ? 32u : extent <= 512 ? 128u : 256u; }

int cuda_coop_plan(const kir_kernel *k, cuda_coop *p) {
  memset(p, 0, sizeof *p);
  p->parallel = -1;
  p->block = 1;
  size_t n = k->n_uops > 0 ? (size_t)k->n_uops : 1;
  p->role = calloc(n, 1);
  p->end = malloc(n * sizeof *p->end);
  p->div = calloc(n, sizeof *p->div);
  p->root = malloc(n * sizeof *p->root);
  p->arg = malloc(n * sizeof *p->arg);
  scratch sc = {malloc(n * sizeof(int)), malloc(n * sizeof(int))};
  int st = KILN_OK;
  if (!p->role || !p->end || !p->div || !p->root || !p->arg || !sc.acc_in || !sc.upd_in) {
    st = KILN_ERR_OOM;
    goto done;
  }
  for (int i = 0; i < k->n_uops; i++) {
    p->end[i] = p->root[i] = sc.acc_in[i] = sc.upd_in[i] = -1;
    p->arg[i] = (cuda_coop_arg){-1, -1, false};
    if (k->uops[i].op == KIR_END) p->end[k->uops[i].src[0]] = i;
    if (p->parallel < 0 && k->uops[i].op == KIR_RANGE && k->uops[i].parallel) p->parallel = i;
  }
  if (p->parallel >= 0 && !kir_splittable(k)) goto done;
  for (int i = 0; i < k->n_uops; i++) /* a LOCAL is per thread: not shared by a block */
    if (k->uops[i].op == KIR_LOCAL) goto done;
  int lo = p->parallel >= 0 ? p->parallel + 1 : 0, hi = p->parallel >= 0 ? p->end[p->parallel] : k->n_uops;
  if (plan_level(k, p, &sc, lo, hi) > 0 && p->reduce_extent >= CUDA_COOP_MIN_EXTENT) {
    p->on = true;
    p->block = block_for(p->reduce_extent);
  } else {
    memset(p->role, 0, n);
  }
done:
  free(sc.acc_in);
  free(sc.upd_in);
  return st;
}

/* --------------------------------------------------------- launch rule */

enum { GRID_STRIDE_BLOCK = 256, MAX_GRID = 65535 };

int cuda_kernel_launch_rule(const kir_kernel *k, cuda_launch_rule *r) {
  cuda_coop p;
  int st = cuda_coop_plan(k, &p);
  memset(r, 0, sizeof *r);
  r->block = 1;
  if (st == KILN_OK) {
    for (int i = 0; i < k->n_uops; i++)
      if (k->uops[i].op == KIR_RANGE && k->uops[i].parallel) {
        r->extent = k->uops[i].ival;
        break;
      }
    if (p.on) {
      r->kind = p.parallel >= 0 ? CUDA_LAUNCH_BLOCK_PER_INDEX : CUDA_LAUNCH_ONE_BLOCK;
      r->block = p.block;
    } else if (cuda_kernel_splittable(k)) {
      cuda_vec v; /* the printer's test: splittable, not cooperative */
      st = cuda_vec_plan(k, true, &v);
      r->kind = v.on ? CUDA_LAUNCH_GRID_STRIDE_VEC : CUDA_LAUNCH_GRID_STRIDE;
      cuda_vec_free(&v);
      r->block = GRID_STRIDE_BLOCK;
    } else {
      r->kind = CUDA_LAUNCH_ONE_THREAD;
    }
  }
  if (st != KILN_OK) r->kind = CUDA_LAUNCH_ONE_THREAD, r->block = 1;
  cuda_coop_free(&p);
  return st;
}

void cuda_launch_rule_shape(const cuda_launch_rule *r, int64_t start, int64_t end, cuda_launch_shape *out) {
  int64_t lo = start > 0 ? start : 0, hi = end < r->extent ? end : r->extent;
  int64_t n = hi > lo ? hi - lo : 0;
  int64_t grid = 1;
  if (r->kind == CUDA_LAUNCH_GRID_STRIDE) grid = (n + r->block - 1) / r->block;
  else if (r->kind == CUDA_LAUNCH_GRID_STRIDE_VEC) grid = (n + 4 * r->block - 1) / (4 * r->block);
  else if (r->kind == CUDA_LAUNCH_BLOCK_PER_INDEX) grid = n;
  out->grid = (unsigned)(grid < 1 ? 1 : grid > MAX_GRID ? MAX_GRID : grid);
  out->block = r->block;
  out->shared_bytes = 0;
}

int cuda_kernel_launch_shape(const kir_kernel *k, int64_t start, int64_t end, cuda_launch_shape *out) {
  cuda_launch_rule r;
  int st = cuda_kernel_launch_rule(k, &r);
  cuda_launch_rule_shape(&r, start, end, out);
  return st;
}
