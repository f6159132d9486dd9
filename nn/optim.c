/*
 * optim.c — optimizers: kiln_sgd (torch.optim.SGD, dampening 0),
 * kiln_adam (torch.optim.Adam, or AdamW with decoupled weight decay;
 * amsgrad and maximize off), kiln_rmsprop (torch.optim.RMSprop) and
 * kiln_adagrad (torch.optim.Adagrad), their step, learning rate, save and
 * load.
 *
 * A step records, per parameter, the update as ordinary lazy ops over the
 * parameter, its gradient and its state buffers, then writes the results
 * back with kiln_copy_ — state buffers first, the parameter last — so
 * nothing is forced: the next force of a parameter runs its update, one
 * kernel writing the parameter and its state (the state's writes are
 * whole-buffer writes of the parameter's sizes: passes/fuse.c rule 7
 * lets the parameter's kernel store them). Every
 * value is read through a kiln_detach handle and every write is marked
 * no_grad (ops_write_detached): no gradient flows through an update, and a
 * realized update keeps no recipe, so a parameter's previous value and the
 * graph that computed its gradient are let go once the update has run.
 *
 * Scalars that depend on the step (Adam's bias corrections) are computed
 * on the host in double, as torch.optim does in Python, and enter the
 * graph as scalar constants: one step's graph differs from the last only
 * in constants. The update is computed in the parameter's dtype (a
 * gradient of another float dtype is converted first), with Torch's order
 * of operations:
 *   SGD:  g += wd p;  b = mu b + g (b = g at step 1);
 *         g = nesterov ? g + mu b : b;  p += -lr g
 *   Adam: g += wd p (Adam) | p *= 1 - lr wd (AdamW);
 *         m = b1 m + (1 - b1) g;  v = b2 v + ((1 - b2) g) g;
 *         p += ((-lr / (1 - b1^t)) m) / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *   RMSprop: g += wd p;  s = a s + (1 - a) g g;
 *         centered: ga = a ga + (1 - a) g, d = sqrt(s - ga ga) + eps,
 *         else d = sqrt(s) + eps;
 *         momentum mu > 0: b = mu b + g / d, p += -lr b;  else p += -lr g / d
 *   Adagrad: g += wd p;  clr = lr / (1 + (t - 1) lr_decay) (host);
 *         s = s + g g;  p += -clr g / (sqrt(s) + eps)
 * State buffers are contiguous, of the parameter's sizes, dtype and
 * device, made at the first step (zeros — Adagrad's sum
 * initial_accumulator_value —; SGD's is written with g then).
 *
 * Saved state (kiln_optimizer_save) is a safetensors file of 0-d F64
 * entries "kind", "n_params", "step", "lr" and one per hyper-parameter
 * (named as below), plus "state.<j>.<buffer>" for parameter j's buffers
 * (torch's names: momentum_buffer; exp_avg, exp_avg_sq; square_avg,
 * momentum_buffer, grad_avg; sum) once a step ran.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_internal.h"

#define OPT_MAX_HYPER 5
#define OPT_MAX_STATE 3

typedef enum opt_kind { OPT_SGD = 1, OPT_ADAM = 2, OPT_RMSPROP = 3, OPT_ADAGRAD = 4 } opt_kind;

/* hyper[] indices */
enum { SGD_MOMENTUM, SGD_WEIGHT_DECAY, SGD_NESTEROV };
enum { ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ADAM_WEIGHT_DECAY, ADAM_DECOUPLED };
enum { RMS_ALPHA, RMS_EPS, RMS_WEIGHT_DECAY, RMS_MOMENTUM, RMS_CENTERED };
enum { ADAGRAD_LR_DECAY, ADAGRAD_WEIGHT_DECAY, ADAGRAD_INITIAL, ADAGRAD_EPS };

typedef struct opt_kind_info {
  const char *name;
  int n_hyper;
  const char *hyper[OPT_MAX_HYPER]; /* names, as saved */
  const char *state[OPT_MAX_STATE]; /* buffer names, as saved (RMSprop: those it has, in this order) */
} opt_kind_info;

static const opt_kind_info kinds[] = {
    [OPT_SGD] = {"SGD", 3, {"momentum", "weight_decay", "nesterov"}, {"momentum_buffer"}},
    [OPT_ADAM] = {"Adam", 5, {"beta1", "beta2", "eps", "weight_decay", "decoupled_weight_decay"},
                  {"exp_avg", "exp_avg_sq"}},
    [OPT_RMSPROP] = {"RMSprop", 5, {"alpha", "eps", "weight_decay", "momentum", "centered"},
                     {"square_avg", "momentum_buffer", "grad_avg"}},
    [OPT_ADAGRAD] = {"Adagrad", 4, {"lr_decay", "weight_decay", "initial_accumulator_value", "eps"}, {"sum"}},
};

struct kiln_optimizer {
  opt_kind kind;
  int n;                /* parameters */
  int n_state;          /* state buffers per parameter (SGD without momentum: 0) */
  kiln_tensor **params; /* [n], each holding a reference */
  kiln_tensor **state;  /* [n * n_state]: parameter j's k-th at j * n_state + k;
                           all NULL before the first step */
  const char *state_names[OPT_MAX_STATE]; /* buffer k's name */
  int64_t step;         /* steps recorded (Adam's t of the last one) */
  double lr;
  double hyper[OPT_MAX_HYPER]; /* in kinds[kind].hyper's order */
};

/* ------------------------------------------------------------ creation */

/* x >= 0 (NaN is not). */
static bool check_nonneg(double x, const char *name, const char *fn) {
  if (x >= 0) return true;
  api_error(KILN_ERR_ARG, fn, "%s = %g must be >= 0", name, x);
  return false;
}

static bool check_beta(double b, const char *name, const char *fn) {
  if (b >= 0 && b < 1) return true;
  api_error(KILN_ERR_ARG, fn, "%s = %g must be in [0, 1)", name, b);
  return false;
}

/* The same handle, or another over the same storage with the same view. */
static bool same_param(const kiln_tensor *a, const kiln_tensor *b) { return a == b || kiln_is_set_to(a, b); }

static bool check_param(kiln_tensor *const *params, int j, const char *fn) {
  char arg[32];
  snprintf(arg, sizeof arg, "params[%d]", j);
  kiln_tensor *p = params[j];
  if (!api_check(p, fn, arg)) return false;
  kiln_dtype d = p->storage->dtype;
  if (!graph_is_float(d)) {
    api_error(KILN_ERR_DTYPE, fn, "parameter %d has dtype %s; parameters must be float tensors", j,
              graph_dtypes[d].name);
    return false;
  }
  if (!ops_check_writable(p, fn)) return false;
  for (int i = 0; i < j; i++)
    if (same_param(params[i], p)) {
      api_error(KILN_ERR_ARG, fn, "parameter %d repeats parameter %d (same storage and view)", j, i);
      return false;
    }
  return true;
}

static bool check_params(kiln_tensor *const *params, int n, const char *fn) {
  if (api_check_list(params, n, "parameter", fn) != KILN_OK) return false;
  if (n < 1) {
    api_error(KILN_ERR_ARG, fn, "needs at least one parameter (n = %d)", n);
    return false;
  }
  for (int j = 0; j < n; j++)
    if (!check_param(params, j, fn)) return false;
  return true;
}

/* A new optimizer over params [n] (checked), holding a reference to each. */
static kiln_optimizer *opt_new(opt_kind kind, kiln_tensor *const *params, int n, double lr, const double *hyper,
                               int n_state, const char *fn) {
  kiln_optimizer *o = graph_handle_alloc(GRAPH_HANDLE_OPTIMIZER, sizeof *o);
  if (o) {
    o->params = calloc((size_t)n, sizeof *o->params);
    o->state = calloc((size_t)n * (size_t)n_state + 1, sizeof *o->state);
  }
  if (!o || !o->params || !o->state) {
    if (o) {
      free(o->params);
      free(o->state);
    }
    graph_handle_free(GRAPH_HANDLE_OPTIMIZER, o, 0);
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  o->kind = kind;
  o->n = n;
  o->n_state = n_state;
  o->lr = lr;
  memcpy(o->hyper, hyper, sizeof *hyper * (size_t)kinds[kind].n_hyper);
  for (int k = 0; k < n_state; k++) o->state_names[k] = kinds[kind].state[k];
  for (int j = 0; j < n; j++) o->params[j] = kiln_retain(params[j]);
  return o;
}

KILN_API kiln_optimizer *kiln_sgd(kiln_tensor *const *params, int n, double lr, double momentum,
                                  double weight_decay, bool nesterov) {
  const char *fn = "kiln_sgd";
  if (!check_params(params, n, fn) || !check_nonneg(lr, "lr", fn) || !check_nonneg(momentum, "momentum", fn) ||
      !check_nonneg(weight_decay, "weight_decay", fn))
    return NULL;
  if (nesterov && momentum == 0) {
    api_error(KILN_ERR_ARG, fn, "nesterov needs a momentum > 0 (momentum = 0)");
    return NULL;
  }
  double hyper[] = {[SGD_MOMENTUM] = momentum, [SGD_WEIGHT_DECAY] = weight_decay, [SGD_NESTEROV] = nesterov};
  return opt_new(OPT_SGD, params, n, lr, hyper, momentum != 0, fn);
}

KILN_API kiln_optimizer *kiln_adam(kiln_tensor *const *params, int n, double lr, double beta1, double beta2,
                                   double eps, double weight_decay, bool decoupled_weight_decay) {
  const char *fn = "kiln_adam";
  if (!check_params(params, n, fn) || !check_nonneg(lr, "lr", fn) || !check_beta(beta1, "beta1", fn) ||
      !check_beta(beta2, "beta2", fn) || !check_nonneg(eps, "eps", fn) ||
      !check_nonneg(weight_decay, "weight_decay", fn))
    return NULL;
  double hyper[] = {[ADAM_BETA1] = beta1,
                    [ADAM_BETA2] = beta2,
                    [ADAM_EPS] = eps,
                    [ADAM_WEIGHT_DECAY] = weight_decay,
                    [ADAM_DECOUPLED] = decoupled_weight_decay};
  return opt_new(OPT_ADAM, params, n, lr, hyper, 2, fn);
}

KILN_API kiln_optimizer *kiln_rmsprop(kiln_tensor *const *params, int n, double lr, double alpha, double eps,
                                      double weight_decay, double momentum, bool centered) {
  const char *fn = "kiln_rmsprop";
  if (!check_params(params, n, fn) || !check_nonneg(lr, "lr", fn) || !check_nonneg(alpha, "alpha", fn) ||
      !check_nonneg(eps, "eps", fn) || !check_nonneg(weight_decay, "weight_decay", fn) ||
      !check_nonneg(momentum, "momentum", fn))
    return NULL;
  double hyper[] = {[RMS_ALPHA] = alpha,
                    [RMS_EPS] = eps,
                    [RMS_WEIGHT_DECAY] = weight_decay,
                    [RMS_MOMENTUM] = momentum,
                    [RMS_CENTERED] = centered};
  int n_state = 1 + (momentum > 0) + centered;
  kiln_optimizer *o = opt_new(OPT_RMSPROP, params, n, lr, hyper, n_state, fn);
  if (o && centered) o->state_names[n_state - 1] = "grad_avg"; /* after momentum_buffer, if any */
  return o;
}

KILN_API kiln_optimizer *kiln_adagrad(kiln_tensor *const *params, int n, double lr, double lr_decay,
                                      double weight_decay, double initial_accumulator_value, double eps) {
  const char *fn = "kiln_adagrad";
  if (!check_params(params, n, fn) || !check_nonneg(lr, "lr", fn) || !check_nonneg(lr_decay, "lr_decay", fn) ||
      !check_nonneg(weight_decay, "weight_decay", fn) ||
      !check_nonneg(initial_accumulator_value, "initial_accumulator_value", fn) || !check_nonneg(eps, "eps", fn))
    return NULL;
  if (isinf(initial_accumulator_value)) {
    api_error(KILN_ERR_ARG, fn, "initial_accumulator_value = %g must be finite", initial_accumulator_value);
    return NULL;
  }
  double hyper[] = {[ADAGRAD_LR_DECAY] = lr_decay,
                    [ADAGRAD_WEIGHT_DECAY] = weight_decay,
                    [ADAGRAD_INITIAL] = initial_accumulator_value,
                    [ADAGRAD_EPS] = eps};
  return opt_new(OPT_ADAGRAD, params, n, lr, hyper, 1, fn);
}

static void release_state(kiln_optimizer *o) {
  for (int k = 0; k < o->n * o->n_state; k++) {
    kiln_release(o->state[k]);
    o->state[k] = NULL;
  }
}

/* A live optimizer, or KILN_ERR_ARG (NULL, freed, or not one). */
static bool check_opt(const kiln_optimizer *opt, const char *fn) {
  return api_check_handle(GRAPH_HANDLE_OPTIMIZER, opt, fn, "opt");
}

KILN_API void kiln_optimizer_free(kiln_optimizer *opt) {
  if (!opt || !check_opt(opt, "kiln_optimizer_free")) return;
  release_state(opt);
  for (int j = 0; j < opt->n; j++) kiln_release(opt->params[j]);
  free(opt->state);
  free(opt->params);
  graph_handle_free(GRAPH_HANDLE_OPTIMIZER, opt, 0);
}

KILN_API int kiln_optimizer_set_lr(kiln_optimizer *opt, double lr) {
  const char *fn = "kiln_optimizer_set_lr";
  if (!check_opt(opt, fn)) return api_status();
  if (!check_nonneg(lr, "lr", fn)) return KILN_ERR_ARG;
  opt->lr = lr;
  return KILN_OK;
}

KILN_API double kiln_optimizer_lr(const kiln_optimizer *opt) {
  return check_opt(opt, "kiln_optimizer_lr") ? opt->lr : NAN;
}

kiln_tensor *nn_optimizer_state(const kiln_optimizer *opt, int j, int k) {
  bool live = graph_handle_state_of(GRAPH_HANDLE_OPTIMIZER, opt, NULL) == GRAPH_HANDLE_LIVE;
  if (!live || j < 0 || j >= opt->n || k < 0 || k >= opt->n_state) return NULL;
  return opt->state[j * opt->n_state + k];
}

/* ---------------------------------------------------------------- step */

static bool same_sizes(const graph_view *a, const graph_view *b) {
  return a->ndim == b->ndim && !memcmp(a->sizes, b->sizes, sizeof *a->sizes * (size_t)a->ndim);
}

/* Parameter j's state buffer k still fits it (the parameter may have been
 * resized or set_ to another storage since). */
static bool check_state(const kiln_optimizer *o, int j, int k, const char *fn) {
  const kiln_tensor *p = o->params[j], *s = o->state[j * o->n_state + k];
  if (!s) return true;
  const char *name = o->state_names[k];
  char a[256], b[256];
  if (!same_sizes(&s->view, &p->view)) {
    api_error(KILN_ERR_SHAPE, fn, "parameter %d has sizes %s but its %s has sizes %s", j,
              api_fmt_sizes(a, sizeof a, p->view.ndim, p->view.sizes), name,
              api_fmt_sizes(b, sizeof b, s->view.ndim, s->view.sizes));
    return false;
  }
  if (s->storage->dtype != p->storage->dtype) {
    api_error(KILN_ERR_DTYPE, fn, "parameter %d has dtype %s but its %s has dtype %s", j,
              graph_dtypes[p->storage->dtype].name, name, graph_dtypes[s->storage->dtype].name);
    return false;
  }
  if (s->storage->device != p->storage->device) {
    api_device_mismatch(fn, p->storage->device, s->storage->device);
    return false;
  }
  return true;
}

static bool check_grad(const kiln_optimizer *o, int j, const kiln_tensor *g, const char *fn) {
  char arg[32], a[256], b[256];
  snprintf(arg, sizeof arg, "grads[%d]", j);
  if (!api_check(g, fn, arg)) return false;
  const kiln_tensor *p = o->params[j];
  if (!same_sizes(&g->view, &p->view)) {
    api_error(KILN_ERR_SHAPE, fn, "grad %d has sizes %s but parameter %d has sizes %s", j,
              api_fmt_sizes(a, sizeof a, g->view.ndim, g->view.sizes), j,
              api_fmt_sizes(b, sizeof b, p->view.ndim, p->view.sizes));
    return false;
  }
  if (!graph_is_float(g->storage->dtype)) {
    api_error(KILN_ERR_DTYPE, fn, "grad %d has dtype %s; gradients must be float tensors", j,
              graph_dtypes[g->storage->dtype].name);
    return false;
  }
  if (g->storage->device != p->storage->device) {
    api_device_mismatch(fn, p->storage->device, g->storage->device);
    return false;
  }
  for (int k = 0; k < o->n_state; k++)
    if (!check_state(o, j, k, fn)) return false;
  return true;
}

/* State buffers for every parameter (first step): zeros, Adagrad's sum
 * initial_accumulator_value. */
static int alloc_state(kiln_optimizer *o, const char *fn) {
  double v = o->kind == OPT_ADAGRAD ? o->hyper[ADAGRAD_INITIAL] : 0;
  api_untracked_begin(); /* the optimizer owns them */
  for (int j = 0; j < o->n; j++) {
    const kiln_tensor *p = o->params[j];
    for (int k = 0; k < o->n_state; k++) {
      kiln_tensor *z = kiln_full(p->storage->dtype, p->view.ndim, p->view.sizes, v);
      z = ops_move_like(z, p, fn);
      if (!z) {
        api_untracked_end();
        release_state(o);
        return api_status();
      }
      o->state[j * o->n_state + k] = z;
    }
  }
  api_untracked_end();
  return KILN_OK;
}

/* grad read for the update: detached, in the parameter's dtype. */
static kiln_tensor *grad_in(kiln_tensor *grad, const kiln_tensor *p) {
  return kiln_to_dtype(kiln_detach(grad), p->storage->dtype);
}

/* torch.optim.SGD's _single_tensor_sgd for parameter j (dampening 0). */
static int sgd_update(kiln_optimizer *o, int j, kiln_tensor *grad) {
  double mu = o->hyper[SGD_MOMENTUM], wd = o->hyper[SGD_WEIGHT_DECAY];
  kiln_tensor *p = o->params[j], *pd = kiln_detach(p), *g = grad_in(grad, p);
  if (wd != 0) g = kiln_add(g, kiln_mul_scalar(pd, wd));
  if (mu != 0) {
    kiln_tensor *b = o->state[j];
    kiln_tensor *nb = o->step == 1 ? g : kiln_add(kiln_mul_scalar(kiln_detach(b), mu), g);
    int st = ops_write_detached(b, nb);
    if (st != KILN_OK) return st;
    g = o->hyper[SGD_NESTEROV] != 0 ? kiln_add(g, kiln_mul_scalar(nb, mu)) : nb;
  }
  return ops_write_detached(p, kiln_add(pd, kiln_mul_scalar(g, -o->lr)));
}

/* torch.optim.Adam's / AdamW's _single_tensor_adam(w) for parameter j
 * (amsgrad off), at step o->step. */
static int adam_update(kiln_optimizer *o, int j, kiln_tensor *grad) {
  const double *h = o->hyper;
  double b1 = h[ADAM_BETA1], b2 = h[ADAM_BETA2], wd = h[ADAM_WEIGHT_DECAY], t = (double)o->step;
  kiln_tensor *p = o->params[j], *pd = kiln_detach(p), *g = grad_in(grad, p);
  if (h[ADAM_DECOUPLED] != 0) pd = kiln_mul_scalar(pd, 1 - o->lr * wd);
  else if (wd != 0) g = kiln_add(g, kiln_mul_scalar(pd, wd));
  kiln_tensor *m = o->state[2 * j], *v = o->state[2 * j + 1];
  kiln_tensor *nm = kiln_add(kiln_mul_scalar(kiln_detach(m), b1), kiln_mul_scalar(g, 1 - b1));
  kiln_tensor *nv = kiln_add(kiln_mul_scalar(kiln_detach(v), b2), kiln_mul(kiln_mul_scalar(g, 1 - b2), g));
  int st = ops_write_detached(m, nm);
  if (st == KILN_OK) st = ops_write_detached(v, nv);
  if (st != KILN_OK) return st;
  double step_size = o->lr / (1 - pow(b1, t)), bc2_sqrt = sqrt(1 - pow(b2, t));
  kiln_tensor *denom = kiln_add_scalar(kiln_div_scalar(kiln_sqrt(nv), bc2_sqrt), h[ADAM_EPS]);
  return ops_write_detached(p, kiln_add(pd, kiln_div(kiln_mul_scalar(nm, -step_size), denom)));
}

/* torch.optim.RMSprop's _single_tensor_rmsprop for parameter j
 * (maximize off). */
static int rmsprop_update(kiln_optimizer *o, int j, kiln_tensor *grad) {
  const double *h = o->hyper;
  double a = h[RMS_ALPHA], mu = h[RMS_MOMENTUM], wd = h[RMS_WEIGHT_DECAY];
  kiln_tensor *p = o->params[j], *pd = kiln_detach(p), *g = grad_in(grad, p);
  kiln_tensor **st = o->state + j * o->n_state; /* square_avg[, momentum_buffer][, grad_avg] */
  if (wd != 0) g = kiln_add(g, kiln_mul_scalar(pd, wd));
  kiln_tensor *ns = kiln_add(kiln_mul_scalar(kiln_detach(st[0]), a), kiln_mul_scalar(kiln_mul(g, g), 1 - a));
  int rc = ops_write_detached(st[0], ns);
  if (rc != KILN_OK) return rc;
  kiln_tensor *avg;
  if (h[RMS_CENTERED] != 0) {
    kiln_tensor *ga = st[o->n_state - 1];
    kiln_tensor *nga = kiln_add(kiln_mul_scalar(kiln_detach(ga), a), kiln_mul_scalar(g, 1 - a));
    if ((rc = ops_write_detached(ga, nga)) != KILN_OK) return rc;
    avg = kiln_sqrt(kiln_sub(ns, kiln_mul(nga, nga)));
  } else {
    avg = kiln_sqrt(ns);
  }
  avg = kiln_add_scalar(avg, h[RMS_EPS]);
  if (mu > 0) {
    kiln_tensor *nb = kiln_add(kiln_mul_scalar(kiln_detach(st[1]), mu), kiln_div(g, avg));
    if ((rc = ops_write_detached(st[1], nb)) != KILN_OK) return rc;
    return ops_write_detached(p, kiln_add(pd, kiln_mul_scalar(nb, -o->lr)));
  }
  return ops_write_detached(p, kiln_add(pd, kiln_mul_scalar(kiln_div(g, avg), -o->lr)));
}

/* torch.optim.Adagrad's _single_tensor_adagrad for parameter j (dense,
 * maximize off), at step o->step. */
static int adagrad_update(kiln_optimizer *o, int j, kiln_tensor *grad) {
  const double *h = o->hyper;
  double wd = h[ADAGRAD_WEIGHT_DECAY], clr = o->lr / (1 + (double)(o->step - 1) * h[ADAGRAD_LR_DECAY]);
  kiln_tensor *p = o->params[j], *pd = kiln_detach(p), *g = grad_in(grad, p), *s = o->state[j];
  if (wd != 0) g = kiln_add(g, kiln_mul_scalar(pd, wd));
  kiln_tensor *ns = kiln_add(kiln_detach(s), kiln_mul(g, g));
  int rc = ops_write_detached(s, ns);
  if (rc != KILN_OK) return rc;
  kiln_tensor *std = kiln_add_scalar(kiln_sqrt(ns), h[ADAGRAD_EPS]);
  return ops_write_detached(p, kiln_add(pd, kiln_mul_scalar(kiln_div(g, std), -clr)));
}

static int update(kiln_optimizer *o, int j, kiln_tensor *grad) {
  switch (o->kind) {
  case OPT_SGD: return sgd_update(o, j, grad);
  case OPT_ADAM: return adam_update(o, j, grad);
  case OPT_RMSPROP: return rmsprop_update(o, j, grad);
  case OPT_ADAGRAD: return adagrad_update(o, j, grad);
  }
  return api_error(KILN_ERR_ARG, "kiln_optimizer_step", "unknown optimizer kind %d", (int)o->kind);
}

KILN_API int kiln_optimizer_step(kiln_optimizer *opt, kiln_tensor *const *grads) {
  const char *fn = "kiln_optimizer_step";
  if (!check_opt(opt, fn)) return api_status();
  int st = api_check_list(grads, opt->n, "grad", fn);
  if (st != KILN_OK) return st;
  for (int j = 0; j < opt->n; j++)
    if (!check_grad(opt, j, grads[j], fn)) return api_status();
  if (opt->step == 0 && (st = alloc_state(opt, fn)) != KILN_OK) return st;
  opt->step++;
  kiln_scope_begin(); /* owns the intermediates */
  for (int j = 0; j < opt->n && st == KILN_OK; j++)
    st = update(opt, j, grads[j]);
  kiln_scope_end();
  return st;
}

/* ------------------------------------------------------- save and load */

#define OPT_MAX_SCALARS (4 + OPT_MAX_HYPER)

/* The 0-d entries of a saved state: names and values. */
typedef struct opt_scalars {
  int n;
  const char *names[OPT_MAX_SCALARS];
  double values[OPT_MAX_SCALARS];
} opt_scalars;

static void scalars_of(const kiln_optimizer *o, opt_scalars *s) {
  const opt_kind_info *k = &kinds[o->kind];
  const char *names[] = {"kind", "n_params", "step", "lr"};
  double values[] = {o->kind, o->n, (double)o->step, o->lr};
  s->n = 0;
  for (int i = 0; i < 4; i++) {
    s->names[s->n] = names[i];
    s->values[s->n++] = values[i];
  }
  for (int i = 0; i < k->n_hyper; i++) {
    s->names[s->n] = k->hyper[i];
    s->values[s->n++] = o->hyper[i];
  }
}

/* Entries of a file saved from o now: the scalars, then the buffers. */
static int n_entries(const kiln_optimizer *o, int64_t step) {
  opt_scalars s;
  scalars_of(o, &s);
  return s.n + (step > 0 ? o->n * o->n_state : 0);
}

/* "state.<j>.<buffer>" for state index k, in buf. */
static const char *state_name(const kiln_optimizer *o, int k, char *buf, size_t len) {
  snprintf(buf, len, "state.%d.%s", k / o->n_state, o->state_names[k % o->n_state]);
  return buf;
}

#define OPT_NAME_LEN 64

KILN_API int kiln_optimizer_save(kiln_optimizer *opt, const char *path) {
  const char *fn = "kiln_optimizer_save";
  if (!check_opt(opt, fn)) return api_status();
  if (!path) return api_error(KILN_ERR_ARG, fn, "argument path is NULL");
  int n = n_entries(opt, opt->step);
  const char **names = calloc((size_t)n, sizeof *names);
  kiln_tensor **ts = calloc((size_t)n, sizeof *ts);
  char *buf = calloc((size_t)n, OPT_NAME_LEN);
  if (!names || !ts || !buf) {
    free(names), free(ts), free(buf);
    return api_error(KILN_ERR_OOM, fn, "out of memory");
  }
  opt_scalars s;
  scalars_of(opt, &s);
  kiln_scope_begin(); /* owns the scalars */
  for (int i = 0; i < s.n; i++) {
    names[i] = s.names[i];
    ts[i] = kiln_scalar(KILN_F64, s.values[i]);
  }
  for (int k = 0; s.n + k < n; k++) {
    names[s.n + k] = state_name(opt, k, buf + (size_t)k * OPT_NAME_LEN, OPT_NAME_LEN);
    ts[s.n + k] = opt->state[k];
  }
  int st = kiln_save_safetensors(path, n, names, ts);
  kiln_scope_end();
  free(names), free(ts), free(buf);
  return st;
}

/* A loaded file: entries by name. */
typedef struct opt_file {
  const char *path;
  int n;
  char **names;
  kiln_tensor **ts;
} opt_file;

/* Entry name, looked for first at position hint, where Kiln's writer puts
 * it (so a load with many parameters is not quadratic), then anywhere. */
static kiln_tensor *file_get(const opt_file *f, const char *name, int hint) {
  if (hint >= 0 && hint < f->n && !strcmp(f->names[hint], name)) return f->ts[hint];
  for (int i = 0; i < f->n; i++)
    if (!strcmp(f->names[i], name)) return f->ts[i];
  return NULL;
}

/* The 0-d F64 entry name's value, or false (KILN_ERR_IO: not an optimizer
 * state file). */
static bool file_scalar(const opt_file *f, const char *name, int hint, double *out, const char *fn) {
  kiln_tensor *t = file_get(f, name, hint);
  if (!t) {
    api_error(KILN_ERR_IO, fn, "%s: not an optimizer state: no entry \"%s\"", f->path, name);
    return false;
  }
  if (t->view.ndim != 0 || t->storage->dtype != KILN_F64) {
    api_error(KILN_ERR_IO, fn, "%s: not an optimizer state: \"%s\" is not a 0-d F64 tensor", f->path, name);
    return false;
  }
  return kiln_item_f64(t, out) == KILN_OK;
}

static const char *kind_name(double kind, double decoupled) {
  if (kind == OPT_ADAM) return decoupled != 0 ? "AdamW" : "Adam";
  if (kind == OPT_SGD || kind == OPT_RMSPROP || kind == OPT_ADAGRAD) return kinds[(int)kind].name;
  return "an unknown optimizer";
}

/* The file's kind, parameter count and hyper-parameters are o's; its step
 * and lr are valid (*step, *lr). */
static int check_scalars(const kiln_optimizer *o, const opt_file *f, int64_t *step, double *lr, const char *fn) {
  opt_scalars s;
  scalars_of(o, &s);
  double v[OPT_MAX_SCALARS];
  if (!file_scalar(f, "kind", 0, &v[0], fn)) return api_status();
  if (v[0] != o->kind) {
    double dec = 0;
    if (v[0] == OPT_ADAM && !file_scalar(f, "decoupled_weight_decay", -1, &dec, fn)) return api_status();
    return api_error(KILN_ERR_ARG, fn, "%s: the state of %s cannot be loaded into %s", f->path, kind_name(v[0], dec),
                     kind_name(o->kind, o->kind == OPT_ADAM ? o->hyper[ADAM_DECOUPLED] : 0));
  }
  for (int i = 1; i < s.n; i++)
    if (!file_scalar(f, s.names[i], i, &v[i], fn)) return api_status();
  if (v[1] != o->n)
    return api_error(KILN_ERR_SHAPE, fn, "%s: the state is for %g parameters but the optimizer has %d", f->path, v[1],
                     o->n);
  if (!(v[2] >= 0 && v[2] <= 9007199254740992.0 && v[2] == floor(v[2])) || !(v[3] >= 0))
    return api_error(KILN_ERR_IO, fn, "%s: invalid step %g or lr %g", f->path, v[2], v[3]);
  for (int i = 4; i < s.n; i++)
    if (v[i] != s.values[i])
      return api_error(KILN_ERR_ARG, fn, "%s: %s is %.17g in the saved state but %.17g in this optimizer", f->path,
                       s.names[i], v[i], s.values[i]);
  *step = (int64_t)v[2];
  *lr = v[3];
  return KILN_OK;
}

/* Saved buffer k fits parameter k / n_state. */
static int check_buffer(const kiln_optimizer *o, const opt_file *f, int k, kiln_tensor **out, const char *fn) {
  char name[OPT_NAME_LEN], a[256], b[256];
  state_name(o, k, name, sizeof name);
  kiln_tensor *t = file_get(f, name, n_entries(o, 0) + k);
  const kiln_tensor *p = o->params[k / o->n_state];
  if (!t) return api_error(KILN_ERR_IO, fn, "%s: not an optimizer state: no entry \"%s\"", f->path, name);
  if (!same_sizes(&t->view, &p->view))
    return api_error(KILN_ERR_SHAPE, fn, "%s: %s has sizes %s but parameter %d has sizes %s", f->path, name,
                     api_fmt_sizes(a, sizeof a, t->view.ndim, t->view.sizes), k / o->n_state,
                     api_fmt_sizes(b, sizeof b, p->view.ndim, p->view.sizes));
  if (t->storage->dtype != p->storage->dtype)
    return api_error(KILN_ERR_DTYPE, fn, "%s: %s has dtype %s but parameter %d has dtype %s", f->path, name,
                     graph_dtypes[t->storage->dtype].name, k / o->n_state, graph_dtypes[p->storage->dtype].name);
  *out = t;
  return KILN_OK;
}

/* Checks every entry of f against o; *step, *lr and bufs [n * n_state]
 * (borrowed from f) receive the state to install. */
static int check_file(const kiln_optimizer *o, const opt_file *f, int64_t *step, double *lr, kiln_tensor **bufs,
                      const char *fn) {
  int st = check_scalars(o, f, step, lr, fn);
  if (st != KILN_OK) return st;
  int want = n_entries(o, *step);
  for (int k = 0; *step > 0 && k < o->n * o->n_state && st == KILN_OK; k++) st = check_buffer(o, f, k, &bufs[k], fn);
  if (st == KILN_OK && f->n != want)
    st = api_error(KILN_ERR_IO, fn, "%s: not an optimizer state of %s: %d entries where %d were expected", f->path,
                   kinds[o->kind].name, f->n, want);
  return st;
}

/* Installs bufs (or none, for step 0) as o's state, on the parameters'
 * devices. */
static int install(kiln_optimizer *o, int64_t step, double lr, kiln_tensor **bufs, const char *fn) {
  int count = step > 0 ? o->n * o->n_state : 0;
  for (int k = 0; k < count; k++) {
    bufs[k] = ops_move_like(kiln_retain(bufs[k]), o->params[k / o->n_state], fn);
    if (!bufs[k]) {
      for (int i = 0; i < k; i++) kiln_release(bufs[i]);
      return api_status();
    }
  }
  release_state(o);
  for (int k = 0; k < count; k++) o->state[k] = bufs[k];
  o->step = step;
  o->lr = lr;
  return KILN_OK;
}

KILN_API int kiln_optimizer_load(kiln_optimizer *opt, const char *path) {
  const char *fn = "kiln_optimizer_load";
  if (!check_opt(opt, fn)) return api_status();
  if (!path) return api_error(KILN_ERR_ARG, fn, "argument path is NULL");
  opt_file f = {.path = path};
  int st = kiln_load_safetensors(path, &f.n, &f.names, &f.ts);
  if (st != KILN_OK) return st;
  kiln_tensor **bufs = calloc((size_t)opt->n * (size_t)opt->n_state + 1, sizeof *bufs);
  int64_t step = 0;
  double lr = 0;
  if (!bufs) st = api_error(KILN_ERR_OOM, fn, "out of memory");
  if (st == KILN_OK) st = check_file(opt, &f, &step, &lr, bufs, fn);
  if (st == KILN_OK) {
    api_untracked_begin(); /* the optimizer owns the buffers */
    st = install(opt, step, lr, bufs, fn);
    api_untracked_end();
  }
  free(bufs);
  kiln_safetensors_free(f.n, f.names, f.ts);
  return st;
}
