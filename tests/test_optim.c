/*
 * test_optim.c — optimizers (kiln_sgd, kiln_adam) and kiln_clip_grad_norm_:
 * F64 values over several steps against a reference loop written here in
 * plain C doubles (torch.optim's update rules, in Torch's order of
 * operations), state buffers, parameters that are views, the kernels one
 * step runs, detached updates (no recipe kept), save/load resuming a run
 * bit-exactly, error paths (nothing recorded, opt unchanged), and clipping
 * by the 2-, 1- and inf-norms. tests/python/test_optim_torch.py compares
 * with torch.optim and torch.nn.utils.clip_grad_norm_ themselves.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "nn_internal.h"
#include "kiln/kiln.h"
#include "rt_internal.h"
#include "test_util.h"

#define N 6 /* parameter elements: sizes [2, 3] */
#define STEPS 5

static const int64_t sizes[2] = {2, 3};

/* ------------------------------------------------------------ reference */

typedef struct cfg {
  bool adam;
  double lr, momentum, weight_decay;
  bool nesterov;
  double beta1, beta2, eps;
  bool decoupled;
} cfg;

typedef struct ref_state {
  double p[N], s0[N], s1[N]; /* s0: momentum_buffer / exp_avg, s1: exp_avg_sq */
  int t;
} ref_state;

/* Gradient element i at step t (from 1): fixed, varied. */
static double grad_value(int t, int i) { return sin(1.0 + 0.7 * i + 1.3 * t) * (1 + 0.25 * t); }

static void ref_init(ref_state *r) {
  memset(r, 0, sizeof *r);
  for (int i = 0; i < N; i++) r->p[i] = 0.5 - 0.3 * i;
}

/* torch.optim.SGD._single_tensor_sgd (dampening 0). */
static void ref_sgd(const cfg *c, ref_state *r, const double *g0) {
  for (int i = 0; i < N; i++) {
    double g = g0[i];
    if (c->weight_decay != 0) g = g + c->weight_decay * r->p[i];
    if (c->momentum != 0) {
      r->s0[i] = r->t == 1 ? g : r->s0[i] * c->momentum + g;
      g = c->nesterov ? g + c->momentum * r->s0[i] : r->s0[i];
    }
    r->p[i] = r->p[i] + -c->lr * g;
  }
}

/* torch.optim.Adam / AdamW._single_tensor_adam(w) (amsgrad off). */
static void ref_adam(const cfg *c, ref_state *r, const double *g0) {
  double bc1 = 1 - pow(c->beta1, r->t), bc2 = 1 - pow(c->beta2, r->t);
  double step_size = c->lr / bc1, bc2_sqrt = sqrt(bc2);
  for (int i = 0; i < N; i++) {
    double g = g0[i], p = r->p[i];
    if (c->decoupled) p = p * (1 - c->lr * c->weight_decay);
    else if (c->weight_decay != 0) g = g + c->weight_decay * p;
    r->s0[i] = r->s0[i] * c->beta1 + g * (1 - c->beta1);
    r->s1[i] = r->s1[i] * c->beta2 + (g * (1 - c->beta2)) * g;
    double denom = sqrt(r->s1[i]) / bc2_sqrt + c->eps;
    r->p[i] = p + (-step_size * r->s0[i]) / denom;
  }
}

static void ref_step(const cfg *c, ref_state *r) {
  double g[N];
  r->t++;
  for (int i = 0; i < N; i++) g[i] = grad_value(r->t, i);
  if (c->adam) ref_adam(c, r, g);
  else ref_sgd(c, r, g);
}

/* ------------------------------------------------------------- helpers */

static kiln_tensor *f64(const double *v) {
  kiln_tensor *t = kiln_from_data(KILN_F64, 2, sizes, v);
  assert_non_null(t);
  return t;
}

static kiln_tensor *grad_at(int t) {
  double g[N];
  for (int i = 0; i < N; i++) g[i] = grad_value(t, i);
  return f64(g);
}

static kiln_optimizer *make_opt(const cfg *c, kiln_tensor *const *params, int n) {
  kiln_optimizer *o = c->adam ? kiln_adam(params, n, c->lr, c->beta1, c->beta2, c->eps, c->weight_decay, c->decoupled)
                              : kiln_sgd(params, n, c->lr, c->momentum, c->weight_decay, c->nesterov);
  expect_no_error();
  assert_non_null(o);
  return o;
}

/* got [n] within a relative 1e-13 of want (an absolute 1e-15 near 0). */
static void expect_close(const double *got, const double *want, int n) {
  for (int i = 0; i < n; i++) {
    double tol = 1e-13 * fabs(want[i]) + 1e-15;
    if (!(fabs(got[i] - want[i]) <= tol)) fail_msg("element %d: got %.17g, want %.17g", i, got[i], want[i]);
  }
}

static void read_f64(kiln_tensor *t, double *out, int n) {
  assert_int_equal(kiln_read(t, out, sizeof *out * (size_t)n), KILN_OK);
}

/* The optimizer's state buffer k of parameter 0 against want. */
static void expect_state(kiln_optimizer *o, int k, const double *want) {
  kiln_tensor *s = nn_optimizer_state(o, 0, k);
  assert_non_null(s);
  assert_true(kiln_is_contiguous(s));
  double got[N];
  read_f64(s, got, N);
  expect_close(got, want, N);
}

/* STEPS steps of c on a [2, 3] F64 parameter, forced after each, against
 * the reference; the lr is halved before the last step. */
static void run_against_reference(const cfg *c) {
  ref_state r;
  ref_init(&r);
  kiln_tensor *p = f64(r.p);
  kiln_optimizer *o = make_opt(c, &p, 1);
  for (int t = 1; t <= STEPS; t++) {
    if (t == STEPS) {
      cfg half = *c;
      half.lr = c->lr / 2;
      assert_int_equal(kiln_optimizer_set_lr(o, half.lr), KILN_OK);
      assert_true(kiln_optimizer_lr(o) == half.lr);
      ref_step(&half, &r);
    } else {
      ref_step(c, &r);
    }
    kiln_tensor *g = grad_at(t);
    assert_int_equal(kiln_optimizer_step(o, &g), KILN_OK);
    kiln_release(g);
    if (t % 2) { /* odd steps force the state with the parameter, even ones only the parameter */
      kiln_tensor *ts[3] = {p, nn_optimizer_state(o, 0, 0), nn_optimizer_state(o, 0, 1)};
      assert_int_equal(kiln_realize_many(ts, 1 + (c->adam ? 2 : c->momentum != 0)), KILN_OK);
    }
    double got[N];
    read_f64(p, got, N);
    expect_close(got, r.p, N);
  }
  if (c->adam || c->momentum != 0) expect_state(o, 0, r.s0);
  if (c->adam) expect_state(o, 1, r.s1);
  assert_null(nn_optimizer_state(o, 0, c->adam ? 2 : 1));
  kiln_optimizer_free(o);
  kiln_release(p);
  expect_no_error();
}

/* ------------------------------------------------------------- values */

static void sgd_values(void **state) {
  (void)state;
  run_against_reference(&(cfg){.lr = 0.1});
  run_against_reference(&(cfg){.lr = 0.1, .momentum = 0.9});
  run_against_reference(&(cfg){.lr = 0.05, .momentum = 0.8, .nesterov = true});
  run_against_reference(&(cfg){.lr = 0.1, .weight_decay = 0.01});
  run_against_reference(&(cfg){.lr = 0.1, .momentum = 0.9, .weight_decay = 0.05, .nesterov = true});
}

static void adam_values(void **state) {
  (void)state;
  cfg c = {.adam = true, .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
  run_against_reference(&c);
  c.weight_decay = 0.1; /* L2: added to the gradient */
  run_against_reference(&c);
  c.decoupled = true;   /* AdamW */
  run_against_reference(&c);
  run_against_reference(&(cfg){.adam = true, .lr = 0.3, .beta1 = 0.5, .beta2 = 0.7, .eps = 0.1, .decoupled = true});
}

/* A parameter that is a transposed view of part of a storage: the update
 * is written through the view and the rest of the storage is kept. */
static void view_parameter(void **state) {
  (void)state;
  double base[10];
  for (int i = 0; i < 10; i++) base[i] = i;
  kiln_scope_begin();
  kiln_tensor *all = kiln_from_data(KILN_F64, 1, (int64_t[]){10}, base);
  kiln_tensor *p = kiln_t(kiln_view(kiln_narrow(all, 0, 2, 6), 2, (int64_t[]){3, 2})); /* [2, 3], strides [1, 2] */
  kiln_tensor *g = kiln_t(kiln_view(kiln_arange(KILN_F64, 1, 7, 1), 2, (int64_t[]){3, 2}));
  kiln_optimizer *o = kiln_sgd(&p, 1, 0.5, 0.9, 0, false);
  assert_non_null(o);
  for (int t = 0; t < 2; t++) assert_int_equal(kiln_optimizer_step(o, &g), KILN_OK);
  /* element (i, j) of p is base[2 + 2 j + i]; its grad is 1 + 2 j + i; after
   * two steps p -= 0.5 g + 0.5 (1.9 g) = 1.45 g */
  double got[10], want[10];
  read_f64(all, got, 10);
  for (int k = 0; k < 10; k++) want[k] = k >= 2 && k < 8 ? k - 1.45 * (k - 1) : k;
  expect_close(got, want, 10);
  kiln_optimizer_free(o);
  kiln_scope_end();
  expect_no_error();
}

/* ------------------------------------------------ kernels and detaching */

/* Kernels a steady-state step runs for one parameter, its state forced
 * with it (kiln_realize_many on the parameter and its buffers). */
static int kernels_per_step(const cfg *c, int n_state) {
  int64_t big[1] = {4096};
  kiln_manual_seed(3);
  kiln_tensor *p = kiln_randn(KILN_F32, 1, big), *g = kiln_randn(KILN_F32, 1, big);
  assert_int_equal(kiln_realize(p), KILN_OK);
  assert_int_equal(kiln_realize(g), KILN_OK);
  kiln_optimizer *o = make_opt(c, &p, 1);
  int count = 0;
  for (int t = 0; t < 3; t++) {
    assert_int_equal(kiln_optimizer_step(o, &g), KILN_OK);
    kiln_tensor *ts[3] = {p, nn_optimizer_state(o, 0, 0), nn_optimizer_state(o, 0, 1)};
    kiln_profile_begin();
    assert_int_equal(kiln_realize_many(ts, 1 + n_state), KILN_OK);
    kiln_profile_end();
    count = kiln_profile_count();
  }
  if (getenv("KILN_TEST_VERBOSE")) {
    printf("%s: %d kernels per parameter update\n", c->adam ? "adam" : c->momentum != 0 ? "sgd+momentum" : "sgd",
           count);
    kiln_profile_print(stdout);
  }
  kiln_optimizer_free(o);
  kiln_release(p);
  kiln_release(g);
  return count;
}

/* One kernel per parameter update: the parameter's write stores the
 * state buffers' writes too (whole-buffer writes of the parameter's
 * sizes, passes/fuse.c rule 7), each in place, the new state computed
 * once in registers. */
static void kernels(void **state) {
  (void)state;
  rt_set_fusion(1); /* also under KILN_FUSE=0 */
  int k = kernels_per_step(&(cfg){.lr = 0.1}, 0);
  assert_int_equal(k, 1);
  k = kernels_per_step(&(cfg){.lr = 0.1, .momentum = 0.9}, 1);
  assert_int_equal(k, 1);
  k = kernels_per_step(&(cfg){.lr = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-4}, 1);
  assert_int_equal(k, 1);
  k = kernels_per_step(&(cfg){.adam = true, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}, 2);
  assert_int_equal(k, 1);
  k = kernels_per_step(&(cfg){.adam = true, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                              .weight_decay = 1e-2, .decoupled = true},
                       2);
  assert_int_equal(k, 1);
  rt_set_fusion(-1); /* back to the environment's setting */
}

/* A step records no_grad writes: forced, the parameter's new version keeps
 * no recipe (the gradient's graph and the old value are let go), and
 * nothing is forced by the step itself. */
static void detached_update(void **state) {
  (void)state;
  double v[N] = {1, 2, 3, 4, 5, 6};
  kiln_tensor *p = f64(v), *x = f64(v);
  assert_int_equal(kiln_realize(p), KILN_OK);
  kiln_tensor *e = kiln_exp(x), *g = kiln_mul(e, x); /* pending, differentiable */
  kiln_optimizer *o = kiln_adam(&p, 1, 0.1, 0.9, 0.99, 1e-8, 0, false);
  int64_t pending = graph_pending_count();
  assert_int_equal(kiln_optimizer_step(o, &g), KILN_OK);
  graph_node *ver = p->storage->version;
  assert_null(ver->buffer); /* lazy */
  assert_true(ver->no_grad);
  assert_true(graph_pending_count() > pending);
  assert_true(nn_optimizer_state(o, 0, 0)->storage->version->no_grad);
  assert_true(nn_optimizer_state(o, 0, 1)->storage->version->no_grad);
  assert_int_equal(kiln_realize(p), KILN_OK);
  ver = p->storage->version;
  assert_non_null(ver->buffer);
  assert_int_equal(ver->n_inputs, 0);
  assert_int_equal(ver->n_hist, 0); /* no recipe */
  assert_false(ver->hist_dropped);
  kiln_optimizer_free(o);
  kiln_release(g);
  kiln_release(e);
  kiln_release(x);
  kiln_release(p);
  expect_no_error();
}

/* A write forced as it is recorded (the auto-realize limit) keeps no
 * recipe either. */
static void detached_update_forced(void **state) {
  (void)state;
  double v[N] = {1, 2, 3, 4, 5, 6};
  kiln_tensor *p = f64(v), *g = f64(v);
  kiln_optimizer *o = kiln_sgd(&p, 1, 0.5, 0.9, 0, false);
  api_set_auto_realize_limit(0);
  kiln_tensor *pad = kiln_neg(g); /* pending throughout: with it, more than 1 node is pending at every op */
  api_set_auto_realize_limit(1); /* every op and write forces what it records */
  for (int t = 0; t < 2; t++) assert_int_equal(kiln_optimizer_step(o, &g), KILN_OK);
  api_set_auto_realize_limit(-1); /* back to the default */
  assert_null(pad->storage->version->buffer);
  kiln_release(pad);
  kiln_tensor *b = nn_optimizer_state(o, 0, 0);
  graph_node *vers[2] = {p->storage->version, b->storage->version};
  for (int i = 0; i < 2; i++) {
    assert_non_null(vers[i]->buffer);
    assert_true(vers[i]->no_grad);
    assert_int_equal(vers[i]->n_hist, 0);
    assert_false(vers[i]->hist_dropped);
  }
  double got[N], want[N];
  read_f64(p, got, N);
  for (int i = 0; i < N; i++) want[i] = v[i] - 1.45 * v[i]; /* as in view_parameter */
  expect_close(got, want, N);
  kiln_optimizer_free(o);
  kiln_release(g);
  kiln_release(p);
  expect_no_error();
}

/* A step inside an open scope leaves nothing in it (the scope owns no
 * tensor afterwards: closing it releases nothing the optimizer uses). */
static void step_in_scope(void **state) {
  (void)state;
  cfg c = {.adam = true, .lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
  ref_state r;
  ref_init(&r);
  kiln_tensor *p = f64(r.p);
  kiln_optimizer *o = make_opt(&c, &p, 1);
  for (int t = 1; t <= 3; t++) {
    kiln_scope_begin();
    kiln_tensor *g = grad_at(t);
    assert_int_equal(kiln_optimizer_step(o, &g), KILN_OK);
    kiln_scope_end();
    ref_step(&c, &r);
  }
  double got[N];
  read_f64(p, got, N);
  expect_close(got, r.p, N);
  kiln_optimizer_free(o);
  kiln_release(p);
}

/* ------------------------------------------------------ save and load */

static char dir[64];

static int make_dir(void **state) {
  (void)state;
  strcpy(dir, "/tmp/kiln_test_optim_XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static const char *path_of(const char *name) {
  static char buf[4][256];
  static int next;
  char *b = buf[next++ % 4];
  snprintf(b, 256, "%s/%s", dir, name);
  return b;
}

#define NP 2 /* parameters of the resume test */

/* Gradient of parameter j at step t (F32, [2, 3] and [4]). */
static kiln_tensor *resume_grad(int j, int t) {
  float v[N];
  for (int i = 0; i < N; i++) v[i] = (float)grad_value(t + 3 * j, i);
  return j == 0 ? kiln_from_data(KILN_F32, 2, sizes, v) : kiln_from_data(KILN_F32, 1, (int64_t[]){4}, v);
}

static void steps(kiln_optimizer *o, int from, int to) {
  for (int t = from; t < to; t++) {
    kiln_scope_begin();
    kiln_tensor *g[NP] = {resume_grad(0, t), resume_grad(1, t)};
    assert_int_equal(kiln_optimizer_step(o, g), KILN_OK);
    kiln_scope_end();
  }
}

static void read_params(kiln_tensor *const *ps, float *out) {
  assert_int_equal(kiln_read(ps[0], out, sizeof(float) * N), KILN_OK);
  assert_int_equal(kiln_read(ps[1], out + N, sizeof(float) * 4), KILN_OK);
}

/* k steps, save (parameters and optimizer), more steps; then a new run
 * loads both and takes the same further steps: bit-identical. */
static void resume(const cfg *c, int k, int more) {
  const char *params_path = path_of("params.safetensors"), *opt_path = path_of("opt.safetensors");
  float init[N] = {0.5f, -1, 2, 0.25f, -0.125f, 3};
  kiln_tensor *ps[NP] = {kiln_from_data(KILN_F32, 2, sizes, init), kiln_from_data(KILN_F32, 1, (int64_t[]){4}, init)};
  kiln_optimizer *o = make_opt(c, ps, NP);
  steps(o, 0, k);
  assert_int_equal(kiln_save_safetensors(params_path, NP, (const char *[]){"w", "b"}, ps), KILN_OK);
  assert_int_equal(kiln_optimizer_save(o, opt_path), KILN_OK);
  steps(o, k, k + more);
  float want[N + 4], got[N + 4];
  read_params(ps, want);

  kiln_tensor *qs[NP] = {kiln_load_safetensor(params_path, "w"), kiln_load_safetensor(params_path, "b")};
  cfg c2 = *c;
  c2.lr = 12345; /* restored from the file */
  kiln_optimizer *o2 = make_opt(&c2, qs, NP);
  assert_int_equal(kiln_optimizer_load(o2, opt_path), KILN_OK);
  assert_true(kiln_optimizer_lr(o2) == c->lr);
  steps(o2, k, k + more);
  read_params(qs, got);
  assert_memory_equal(got, want, sizeof got);
  for (int s = 0; s < (c->adam ? 2 : c->momentum != 0); s++) {
    float a[N], b[N];
    assert_int_equal(kiln_read(nn_optimizer_state(o, 0, s), a, sizeof a), KILN_OK);
    assert_int_equal(kiln_read(nn_optimizer_state(o2, 0, s), b, sizeof b), KILN_OK);
    assert_memory_equal(a, b, sizeof a);
  }
  for (int j = 0; j < NP; j++) kiln_release(ps[j]), kiln_release(qs[j]);
  kiln_optimizer_free(o);
  kiln_optimizer_free(o2);
  expect_no_error();
}

static void save_load_resume(void **state) {
  (void)state;
  resume(&(cfg){.adam = true, .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01,
                .decoupled = true},
         3, 4);
  resume(&(cfg){.lr = 0.1, .momentum = 0.9, .nesterov = true}, 2, 3);
  resume(&(cfg){.lr = 0.1}, 2, 2);
  resume(&(cfg){.adam = true, .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}, 0, 3); /* before any step */
}

/* A failed load leaves the optimizer as it was: the steps it takes next
 * are those of an optimizer that never tried. */
static void expect_unchanged_after(kiln_optimizer *o, kiln_tensor *p, const cfg *c, ref_state *r) {
  assert_true(kiln_optimizer_lr(o) == c->lr);
  kiln_tensor *g = grad_at(r->t + 1);
  assert_int_equal(kiln_optimizer_step(o, &g), KILN_OK);
  kiln_release(g);
  ref_step(c, r);
  double got[N];
  read_f64(p, got, N);
  expect_close(got, r->p, N);
}

static void load_errors(void **state) {
  (void)state;
  cfg adam = {.adam = true, .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
  ref_state r;
  ref_init(&r);
  kiln_tensor *p = f64(r.p);
  kiln_optimizer *o = make_opt(&adam, &p, 1);
  expect_unchanged_after(o, p, &adam, &r); /* one step taken */

  /* files to load: another kind, other hyper-parameters, other sizes,
   * other dtype, two parameters, not an optimizer state */
  double other[8] = {0};
  kiln_tensor *p6 = f64(other), *p4 = kiln_from_data(KILN_F64, 1, (int64_t[]){6}, other);
  kiln_tensor *pf = kiln_to_dtype(p6, KILN_F32), *g6 = f64(other), *g4 = kiln_from_data(KILN_F64, 1, (int64_t[]){6}, other);
  kiln_tensor *gf = kiln_to_dtype(g6, KILN_F32);
  struct {
    kiln_optimizer *o;
    kiln_tensor *g;
    const char *name;
  } files[] = {
      {kiln_sgd(&p6, 1, 0.1, 0.9, 0, false), g6, "sgd"},
      {kiln_adam(&p6, 1, 1e-2, 0.8, 0.999, 1e-8, 0, false), g6, "beta1"},
      {kiln_adam(&p6, 1, 1e-2, 0.9, 0.999, 1e-8, 0, true), g6, "adamw"},
      {kiln_adam(&p4, 1, 1e-2, 0.9, 0.999, 1e-8, 0, false), g4, "sizes"},
      {kiln_adam(&pf, 1, 1e-2, 0.9, 0.999, 1e-8, 0, false), gf, "dtype"},
      {kiln_adam((kiln_tensor *[]){p6, p4}, 2, 1e-2, 0.9, 0.999, 1e-8, 0, false), NULL, "count"},
  };
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    assert_non_null(files[i].o);
    kiln_tensor *gs[2] = {files[i].g ? files[i].g : g6, g4};
    assert_int_equal(kiln_optimizer_step(files[i].o, gs), KILN_OK);
    assert_int_equal(kiln_optimizer_save(files[i].o, path_of(files[i].name)), KILN_OK);
  }
  assert_int_equal(kiln_optimizer_load(o, path_of("sgd")), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_optimizer_load", "the state of SGD cannot be loaded into Adam", NULL);
  assert_int_equal(kiln_optimizer_load(o, path_of("adamw")), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_optimizer_load", "decoupled_weight_decay is 1", NULL);
  assert_int_equal(kiln_optimizer_load(o, path_of("beta1")), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "beta1 is 0.80000000000000004 in the saved state but 0.90000000000000002", NULL);
  assert_int_equal(kiln_optimizer_load(o, path_of("sizes")), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "state.0.exp_avg has sizes [6] but parameter 0 has sizes [2, 3]", NULL);
  assert_int_equal(kiln_optimizer_load(o, path_of("dtype")), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "state.0.exp_avg has dtype f32 but parameter 0 has dtype f64", NULL);
  assert_int_equal(kiln_optimizer_load(o, path_of("count")), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "the state is for 2 parameters but the optimizer has 1", NULL);
  assert_int_equal(kiln_optimizer_load(o, path_of("missing")), KILN_ERR_IO);
  expect_error(KILN_ERR_IO, "missing", NULL);
  assert_int_equal(kiln_save_safetensors(path_of("plain"), 1, (const char *[]){"w"}, &p6), KILN_OK);
  assert_int_equal(kiln_optimizer_load(o, path_of("plain")), KILN_ERR_IO);
  expect_error(KILN_ERR_IO, "not an optimizer state: no entry \"kind\"", NULL);
  assert_int_equal(kiln_optimizer_load(NULL, path_of("sgd")), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_optimizer_load", "opt", NULL);
  assert_int_equal(kiln_optimizer_load(o, NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "path", NULL);
  assert_int_equal(kiln_optimizer_save(o, NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_optimizer_save", "path", NULL);
  assert_int_equal(kiln_optimizer_save(NULL, path_of("x")), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "opt", NULL);
  expect_unchanged_after(o, p, &adam, &r);

  for (size_t i = 0; i < sizeof files / sizeof *files; i++) kiln_optimizer_free(files[i].o);
  kiln_release(p6), kiln_release(p4), kiln_release(pf), kiln_release(g6), kiln_release(g4), kiln_release(gf);
  kiln_optimizer_free(o);
  kiln_release(p);
  expect_no_error();
}

/* ---------------------------------------------------------- errors */

static void creation_errors(void **state) {
  (void)state;
  kiln_scope_begin(); /* owns the intermediates */
  double v[N] = {0};
  kiln_tensor *p = f64(v), *q = f64(v), *i32 = kiln_zeros(KILN_I32, 1, (int64_t[]){3});
  kiln_tensor *same = kiln_view(p, 2, sizes); /* another handle, same storage and view */
  kiln_tensor *expanded = kiln_expand(kiln_zeros(KILN_F64, 1, (int64_t[]){1}), 1, (int64_t[]){4});
  kiln_tensor *two[2] = {p, q};
  assert_null(kiln_sgd(NULL, 1, 0.1, 0, 0, false));
  expect_error(KILN_ERR_ARG, "kiln_sgd", "the parameter list is NULL (n = 1)", NULL);
  assert_null(kiln_sgd(two, 0, 0.1, 0, 0, false));
  expect_error(KILN_ERR_ARG, "kiln_sgd", "needs at least one parameter (n = 0)", NULL);
  assert_null(kiln_sgd(two, -1, 0.1, 0, 0, false));
  expect_error(KILN_ERR_ARG, "n = -1 is negative", NULL);
  assert_null(kiln_sgd((kiln_tensor *[]){p, NULL}, 2, 0.1, 0, 0, false));
  expect_error(KILN_ERR_ARG, "argument params[1] is NULL", NULL);
  assert_null(kiln_sgd((kiln_tensor *[]){p, q, p}, 3, 0.1, 0, 0, false));
  expect_error(KILN_ERR_ARG, "parameter 2 repeats parameter 0", NULL);
  assert_null(kiln_adam((kiln_tensor *[]){p, same}, 2, 0.1, 0.9, 0.999, 1e-8, 0, false));
  expect_error(KILN_ERR_ARG, "kiln_adam", "parameter 1 repeats parameter 0", NULL);
  assert_null(kiln_sgd(&i32, 1, 0.1, 0, 0, false));
  expect_error(KILN_ERR_DTYPE, "parameter 0 has dtype i32", NULL);
  assert_null(kiln_sgd(&expanded, 1, 0.1, 0, 0, false));
  expect_error(KILN_ERR_ARG, "kiln_sgd", "stride 0", NULL);
  assert_null(kiln_sgd(two, 2, -0.1, 0, 0, false));
  expect_error(KILN_ERR_ARG, "lr = -0.1 must be >= 0", NULL);
  assert_null(kiln_sgd(two, 2, NAN, 0, 0, false));
  expect_error(KILN_ERR_ARG, "lr = nan must be >= 0", NULL);
  assert_null(kiln_sgd(two, 2, 0.1, -0.5, 0, false));
  expect_error(KILN_ERR_ARG, "momentum = -0.5 must be >= 0", NULL);
  assert_null(kiln_sgd(two, 2, 0.1, 0, -1, false));
  expect_error(KILN_ERR_ARG, "weight_decay = -1 must be >= 0", NULL);
  assert_null(kiln_sgd(two, 2, 0.1, 0, 0, true));
  expect_error(KILN_ERR_ARG, "nesterov needs a momentum > 0", NULL);
  assert_null(kiln_adam(two, 2, 0.1, 1, 0.999, 1e-8, 0, false));
  expect_error(KILN_ERR_ARG, "kiln_adam", "beta1 = 1 must be in [0, 1)", NULL);
  assert_null(kiln_adam(two, 2, 0.1, 0.9, -0.1, 1e-8, 0, false));
  expect_error(KILN_ERR_ARG, "beta2 = -0.1 must be in [0, 1)", NULL);
  assert_null(kiln_adam(two, 2, 0.1, 0.9, 0.999, -1e-8, 0, false));
  expect_error(KILN_ERR_ARG, "eps = -1e-08 must be >= 0", NULL);
  assert_null(kiln_adam(two, 2, 0.1, 0.9, 0.999, 1e-8, -2, true));
  expect_error(KILN_ERR_ARG, "weight_decay = -2 must be >= 0", NULL);
  kiln_optimizer_free(NULL);
  assert_true(isnan(kiln_optimizer_lr(NULL)));
  expect_error(KILN_ERR_ARG, "kiln_optimizer_lr", NULL);
  assert_int_equal(kiln_optimizer_set_lr(NULL, 1), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_optimizer_set_lr", NULL);
  kiln_release(p), kiln_release(q), kiln_release(i32), kiln_release(same), kiln_release(expanded);
  kiln_scope_end();
}

/* A failed step records nothing and changes no state: later steps match
 * the reference as if it had not been tried. */
static void step_errors(void **state) {
  (void)state;
  kiln_scope_begin(); /* owns the intermediates */
  cfg c = {.lr = 0.1, .momentum = 0.9};
  ref_state r;
  ref_init(&r);
  kiln_tensor *p = f64(r.p);
  kiln_optimizer *o = make_opt(&c, &p, 1);
  graph_node *before = p->storage->version;
  double z[N] = {0};
  kiln_tensor *bad_size = kiln_zeros(KILN_F64, 1, (int64_t[]){6}), *bad_dtype = kiln_zeros(KILN_I64, 2, sizes);
  kiln_tensor *f32 = kiln_to_dtype(f64(z), KILN_F32), *null = NULL;
  assert_int_equal(kiln_optimizer_step(NULL, &f32), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_optimizer_step", "opt", NULL);
  assert_int_equal(kiln_optimizer_step(o, NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "the grad list is NULL (n = 1)", NULL);
  assert_int_equal(kiln_optimizer_step(o, &null), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "argument grads[0] is NULL", NULL);
  assert_int_equal(kiln_optimizer_step(o, &bad_size), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "grad 0 has sizes [6] but parameter 0 has sizes [2, 3]", NULL);
  assert_int_equal(kiln_optimizer_step(o, &bad_dtype), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "grad 0 has dtype i64", NULL);
  assert_int_equal(kiln_optimizer_set_lr(o, -1), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "lr = -1 must be >= 0", NULL);
  assert_true(p->storage->version == before); /* nothing recorded */
  assert_null(nn_optimizer_state(o, 0, 0));  /* no state made */
  for (int t = 1; t <= 3; t++) {
    kiln_tensor *g = grad_at(t);
    assert_int_equal(kiln_optimizer_step(o, &g), KILN_OK);
    kiln_release(g);
    ref_step(&c, &r);
  }
  /* a grad of another float dtype is converted to the parameter's */
  assert_int_equal(kiln_optimizer_step(o, &f32), KILN_OK);
  r.t++;
  ref_sgd(&c, &r, z);
  double got[N];
  read_f64(p, got, N);
  expect_close(got, r.p, N);
  /* the parameter resized behind the optimizer's back */
  assert_int_equal(kiln_resize_(p, 1, (int64_t[]){6}), KILN_OK);
  assert_int_equal(kiln_optimizer_step(o, &bad_size), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "parameter 0 has sizes [6] but its momentum_buffer has sizes [2, 3]", NULL);
  kiln_optimizer_free(o);
  kiln_release(p), kiln_release(bad_size), kiln_release(bad_dtype), kiln_release(f32);
  kiln_scope_end();
}

/* -------------------------------------------------- clip_grad_norm_ */

static void clip_values(void **state) {
  (void)state;
  double a[N] = {3, -4, 0, 1, 2, -2}, b[3] = {0.5, -6, 1};
  for (int inf = 0; inf < 2; inf++) {
    double p = inf ? INFINITY : 2, max_norm = 2;
    double total = 0;
    for (int i = 0; i < N; i++) total = inf ? fmax(total, fabs(a[i])) : total + a[i] * a[i];
    for (int i = 0; i < 3; i++) total = inf ? fmax(total, fabs(b[i])) : total + b[i] * b[i];
    if (!inf) total = sqrt(total);
    double coef = fmin(1 / (total + 1e-6) * max_norm, 1);
    kiln_tensor *ga = f64(a), *gb = kiln_from_data(KILN_F64, 1, (int64_t[]){3}, b), *tn = NULL;
    kiln_tensor *view = kiln_narrow(gb, 0, 0, 3); /* a view: written through */
    assert_int_equal(kiln_clip_grad_norm_((kiln_tensor *[]){ga, view}, 2, max_norm, p, &tn), KILN_OK);
    assert_null(ga->storage->version->buffer); /* lazy */
    assert_true(ga->storage->version->no_grad);
    assert_int_equal(kiln_dtype_of(tn), KILN_F64);
    assert_int_equal(kiln_dim(tn), 0);
    double got_total, wa[N], wb[3], ga_v[N], gb_v[3];
    assert_int_equal(kiln_item_f64(tn, &got_total), KILN_OK);
    assert_float_equal(got_total, total, 1e-14 * total);
    for (int i = 0; i < N; i++) wa[i] = a[i] * coef;
    for (int i = 0; i < 3; i++) wb[i] = b[i] * coef;
    read_f64(ga, ga_v, N);
    read_f64(gb, gb_v, 3);
    expect_close(ga_v, wa, N);
    expect_close(gb_v, wb, 3);
    kiln_release(ga), kiln_release(gb), kiln_release(view), kiln_release(tn);
  }
  /* below max_norm: unchanged; F32 grads give an F32 total */
  float small[3] = {0.1f, 0.2f, -0.2f};
  kiln_tensor *g = kiln_from_data(KILN_F32, 1, (int64_t[]){3}, small), *tn = NULL;
  assert_int_equal(kiln_clip_grad_norm_(&g, 1, 1.0, 2, &tn), KILN_OK);
  assert_int_equal(kiln_dtype_of(tn), KILN_F32);
  assert_float_equal(kiln_item(tn), 0.3, 1e-7);
  float got[3];
  assert_int_equal(kiln_read(g, got, sizeof got), KILN_OK);
  assert_memory_equal(got, small, sizeof got);
  kiln_release(tn);
  /* p = 1 norm, total_norm NULL */
  assert_int_equal(kiln_clip_grad_norm_(&g, 1, 0.25, 1, NULL), KILN_OK);
  assert_int_equal(kiln_read(g, got, sizeof got), KILN_OK);
  double coef = 1 / (0.5 + 1e-6) * 0.25;
  for (int i = 0; i < 3; i++) assert_float_equal(got[i], small[i] * coef, 1e-7);
  /* no grads: total 0 */
  tn = NULL;
  assert_int_equal(kiln_clip_grad_norm_(NULL, 0, 1, 2, &tn), KILN_OK);
  assert_float_equal(kiln_item(tn), 0, 0);
  kiln_release(tn);
  kiln_release(g);
  expect_no_error();
}

static void clip_errors(void **state) {
  (void)state;
  kiln_scope_begin(); /* owns the intermediates */
  kiln_tensor *g = kiln_zeros(KILN_F32, 1, (int64_t[]){3}), *i = kiln_zeros(KILN_I32, 1, (int64_t[]){3});
  kiln_tensor *e = kiln_expand(kiln_zeros(KILN_F32, 1, (int64_t[]){1}), 1, (int64_t[]){3}), *tn = NULL;
  assert_int_equal(kiln_clip_grad_norm_(NULL, 1, 1, 2, &tn), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_clip_grad_norm_", "the grad list is NULL (n = 1)", NULL);
  assert_int_equal(kiln_clip_grad_norm_((kiln_tensor *[]){g, NULL}, 2, 1, 2, &tn), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "argument grads[1] is NULL", NULL);
  assert_int_equal(kiln_clip_grad_norm_(&g, 1, -1, 2, &tn), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "max_norm = -1 must be >= 0", NULL);
  assert_int_equal(kiln_clip_grad_norm_(&g, 1, 1, 0, &tn), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "norm_type = 0 must be > 0", NULL);
  assert_int_equal(kiln_clip_grad_norm_(&g, 1, 1, NAN, &tn), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "norm_type = nan", NULL);
  assert_int_equal(kiln_clip_grad_norm_(&i, 1, 1, 2, &tn), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "grad 0 has dtype i32", NULL);
  assert_int_equal(kiln_clip_grad_norm_(&e, 1, 1, 2, &tn), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "stride 0", NULL);
  assert_null(tn); /* untouched on error */
  kiln_release(g), kiln_release(i), kiln_release(e);
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sgd_values),
      cmocka_unit_test(adam_values),
      cmocka_unit_test(view_parameter),
      cmocka_unit_test(kernels),
      cmocka_unit_test(detached_update),
      cmocka_unit_test(detached_update_forced),
      cmocka_unit_test(step_in_scope),
      cmocka_unit_test(save_load_resume),
      cmocka_unit_test(load_errors),
      cmocka_unit_test(creation_errors),
      cmocka_unit_test(step_errors),
      cmocka_unit_test(clip_values),
      cmocka_unit_test(clip_errors),
  };
  return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
