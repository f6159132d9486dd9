/*
 * fashion_mnist.c — Kiln's main job: trains an MLP 784-256-10 (ReLU) on
 * Fashion-MNIST with softmax cross-entropy and mini-batch SGD with
 * momentum, through Kiln's C API only. Gradients come from kiln_grad and
 * the update from kiln_sgd (torch.optim.SGD's rule).
 *
 *   fashion_mnist [--epochs N] [--seed S] [--batch B] [--lr X]
 *                 [--data DIR] [--trace FILE] [--manual] [--stats]
 *
 * --stats prints what the engine holds after every epoch
 * (kiln_engine_stats_get: RSS, live nodes and buffers, caches), which
 * scripts/soak.sh checks stays bounded.
 * --manual trains with the hand-written backward pass and update instead
 * (the same mathematics written out: it shows what kiln_grad records, and
 * bench/main_job.sh compares the two throughputs in one run).
 *
 * After training it prints the profile table of the last epoch (every
 * kernel run: calls, time, GB/s, share of the epoch's wall time); --trace
 * also writes that epoch as a Chrome trace (open it in Perfetto).
 *
 * Data: the IDX files of Debian's dataset-fashion-mnist package
 * (/usr/share/datasets/fashion-mnist/, gzip-compressed), read with zlib
 * (examples/common/fashion_data.c).
 *
 * Every step builds the same graph on new data: the matmuls read
 * transposed views (no copies), the bias is a broadcast read, the ReLU
 * mask and the softmax cross-entropy's backward fuse into their
 * neighbours, and the parameter updates are in-place writes into the
 * parameters' storages. After the first step every kernel is a cache
 * hit; the program counts compiles per epoch to show it. Deterministic
 * for a given seed and thread count (KILN_NUM_THREADS).
 *
 * Data-parallel under mpirun (docs/distributed.md): `mpirun -n P
 * fashion_mnist` shards each global batch of B images into P slices of
 * B / P (every rank draws the same shuffle and takes its slice), averages
 * the gradients with kiln_all_reduce_ (MEAN, bucketed, fused into the
 * update), and checks at the end that the parameters are bit-identical on
 * every rank. Rank 0 prints. Without mpirun it runs on one process.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fashion_data.h"
#include "kiln/kiln.h"

#define IMG FASHION_IMG
#define HID 256
#define CLS FASHION_CLASSES

static kiln_group *world; /* kiln_dist_init(NULL): size 1 without mpirun */
static int rank, nranks;

typedef struct options {
  int epochs, batch;
  uint64_t seed;
  double lr, momentum;
  const char *data_dir;
  const char *trace; /* Chrome trace of the last epoch, or NULL */
  bool manual;       /* hand-written backward and update */
  bool stats;        /* --stats: kiln_engine_stats_get after every epoch */
} options;

/* ---------------------------------------------------------------- model */

typedef struct model {
  kiln_tensor *w1, *b1, *w2, *b2; /* [784,256] [256] [256,10] [10] */
  kiln_tensor *v[4];              /* --manual: momentum buffers, same shapes */
  kiln_optimizer *opt;            /* otherwise: kiln_sgd over the four */
} model;

static kiln_tensor *param(int ndim, const int64_t *sizes, double scale) {
  kiln_scope_begin();
  kiln_tensor *p = scale ? kiln_contiguous(kiln_mul_scalar(kiln_randn(KILN_F32, ndim, sizes), scale))
                         : kiln_zeros(KILN_F32, ndim, sizes);
  kiln_keep(p);
  kiln_scope_end();
  return p;
}

static bool model_init(model *m, const options *o) {
  m->w1 = param(2, (int64_t[]){IMG, HID}, 1.4142 / 28.0); /* He: sqrt(2 / 784) */
  m->b1 = param(1, (int64_t[]){HID}, 0);
  m->w2 = param(2, (int64_t[]){HID, CLS}, 1.4142 / 16.0); /* sqrt(2 / 256) */
  m->b2 = param(1, (int64_t[]){CLS}, 0);
  kiln_tensor *ps[4] = {m->w1, m->b1, m->w2, m->b2};
  for (int i = 0; i < 4; i++) m->v[i] = o->manual ? kiln_zeros(KILN_F32, kiln_dim(ps[i]), kiln_sizes(ps[i])) : NULL;
  m->opt = o->manual ? NULL : kiln_sgd(ps, 4, o->lr, o->momentum, 0, false);
  return o->manual || m->opt;
}

static void model_free(model *m) {
  kiln_optimizer_free(m->opt);
  kiln_release(m->w1), kiln_release(m->b1), kiln_release(m->w2), kiln_release(m->b2);
  for (int i = 0; i < 4; i++) kiln_release(m->v[i]);
}

/* Forward pass to logits [B, 10]; the hidden pre-activation and
 * activation are returned for the hand-written backward pass. */
static kiln_tensor *forward(const model *m, kiln_tensor *x, kiln_tensor **h_pre, kiln_tensor **h) {
  *h_pre = kiln_add(kiln_matmul(x, m->w1), m->b1);
  *h = kiln_relu(*h_pre);
  return kiln_add(kiln_matmul(*h, m->w2), m->b2);
}

/* --manual: v = momentum * v + g; p -= lr * v (in-place writes). They
 * go through detached views, as PyTorch's update under torch.no_grad():
 * the new values keep no recipe, so the step's graph is let go (a plain
 * write would keep the recipes of the last writes for kiln_grad). */
static void sgd(kiln_tensor *p, kiln_tensor *v, kiln_tensor *g, const options *o) {
  kiln_copy_(kiln_detach(v), kiln_add(kiln_mul_scalar(v, o->momentum), g));
  kiln_copy_(kiln_detach(p), kiln_sub(p, kiln_mul_scalar(v, o->lr)));
}

/* --manual: the gradients of the mean cross-entropy, written out. */
static void manual_grads(const model *m, kiln_tensor *x, kiln_tensor *h_pre, kiln_tensor *h, kiln_tensor *logp,
                         kiln_tensor *onehot, kiln_tensor **grads) {
  int first = 0;
  kiln_tensor *dlogits = kiln_div_scalar(kiln_sub(kiln_exp(logp), onehot), (double)kiln_size(x, 0));
  kiln_tensor *dh = kiln_matmul(dlogits, kiln_t(m->w2));
  kiln_tensor *dh_pre = kiln_mul(dh, kiln_gt_scalar(h_pre, 0)); /* ReLU mask */
  grads[0] = kiln_matmul(kiln_t(x), dh_pre), grads[1] = kiln_sum(dh_pre, 1, &first, false);
  grads[2] = kiln_matmul(kiln_t(h), dlogits), grads[3] = kiln_sum(dlogits, 1, &first, false);
}

typedef struct step_out {
  double loss;
  int64_t correct;
} step_out;

/* One SGD step on a batch: x [B, 784], labels [B] (I64). */
static int train_step(model *m, kiln_tensor *x, kiln_tensor *labels, const options *o, step_out *out) {
  kiln_scope_begin();
  int64_t b = kiln_size(x, 0);
  kiln_tensor *h_pre, *h, *logits = forward(m, x, &h_pre, &h);
  kiln_tensor *logp = kiln_log_softmax(logits, -1);
  kiln_tensor *classes = kiln_unsqueeze(kiln_arange(KILN_I64, 0, CLS, 1), 0);
  kiln_tensor *onehot = kiln_to_dtype(kiln_eq(classes, kiln_unsqueeze(labels, 1)), KILN_F32);
  kiln_tensor *loss = kiln_div_scalar(kiln_neg(kiln_sum(kiln_mul(onehot, logp), 0, NULL, false)), (double)b);
  kiln_tensor *correct = kiln_sum(kiln_eq(kiln_argmax(logits, -1, false), labels), 0, NULL, false);
  kiln_tensor *grads[4], *ps[4] = {m->w1, m->b1, m->w2, m->b2};
  int st = KILN_OK;
  if (o->manual) {
    manual_grads(m, x, h_pre, h, logp, onehot, grads);
    st = kiln_all_reduce_(grads, 4, KILN_REDUCE_MEAN, world);
    for (int i = 0; i < 4; i++) sgd(ps[i], m->v[i], grads[i], o);
  } else {
    st = kiln_grad(&loss, NULL, 1, ps, 4, grads);
    /* data-parallel: the mean of the ranks' gradients (a no-op on one) */
    if (st == KILN_OK) st = kiln_all_reduce_(grads, 4, KILN_REDUCE_MEAN, world);
    if (st == KILN_OK) st = kiln_optimizer_step(m->opt, grads);
  }
  kiln_tensor *force[] = {m->w1, m->b1, m->w2, m->b2, loss, correct, m->v[0], m->v[1], m->v[2], m->v[3]};
  if (st == KILN_OK) st = kiln_realize_many(force, o->manual ? 10 : 6);
  if (st == KILN_OK) {
    out->loss = kiln_item(loss);
    out->correct = (int64_t)kiln_item(correct);
  }
  kiln_scope_end();
  return st == KILN_OK ? kiln_last_status() : st;
}

/* Correct predictions over a dataset, in batches of 1000. */
static int64_t evaluate(const model *m, const dataset *ds) {
  int64_t correct = 0;
  for (int64_t start = 0; start < ds->n; start += 1000) {
    int64_t b = ds->n - start < 1000 ? ds->n - start : 1000;
    kiln_scope_begin();
    kiln_tensor *x = kiln_from_data(KILN_F32, 2, (int64_t[]){b, IMG}, ds->images + start * IMG);
    kiln_tensor *y = kiln_from_data(KILN_I64, 1, (int64_t[]){b}, ds->labels + start);
    kiln_tensor *h_pre, *h, *logits = forward(m, x, &h_pre, &h);
    correct += (int64_t)kiln_item(kiln_sum(kiln_eq(kiln_argmax(logits, -1, false), y), 0, NULL, false));
    kiln_scope_end();
  }
  return correct;
}

/* ------------------------------------------------------------- training */

/* The epoch's statistics over every rank: the mean loss and the total
 * of correct predictions. */
static int sum_over_ranks(double *loss, int64_t *correct) {
  kiln_scope_begin();
  double v[2] = {*loss / nranks, (double)*correct};
  kiln_tensor *all = kiln_all_reduce(kiln_from_data(KILN_F64, 1, (int64_t[]){2}, v), KILN_REDUCE_SUM, world);
  int st = kiln_read(all, v, sizeof v);
  kiln_scope_end();
  *loss = v[0];
  *correct = (int64_t)v[1];
  return st;
}

/* True when every element of p (F32) is the same, bit for bit, on every
 * rank: the MAX and MIN over the ranks of its bits (read as I32) equal
 * its own. */
static bool same_on_all_ranks(kiln_tensor *p) {
  int64_t n = kiln_numel(p);
  float *host = malloc(sizeof *host * (size_t)n);
  if (!host || kiln_read(p, host, sizeof *host * (size_t)n) != KILN_OK) {
    free(host);
    return false;
  }
  kiln_scope_begin();
  kiln_tensor *bits = kiln_from_data(KILN_I32, 1, &n, host); /* the same bytes */
  kiln_tensor *hi = kiln_all_reduce(bits, KILN_REDUCE_MAX, world), *lo = kiln_all_reduce(bits, KILN_REDUCE_MIN, world);
  kiln_tensor *same = kiln_logical_and(kiln_eq(hi, bits), kiln_eq(lo, bits));
  bool ok = kiln_item(kiln_all(same, 0, NULL, false)) != 0 && kiln_last_status() == KILN_OK;
  kiln_scope_end();
  free(host);
  return ok;
}

/* One epoch over the shuffled training set. */
static int train_epoch(model *m, const dataset *tr, const options *o, int64_t *perm, uint64_t *rng,
                       float *xb, int64_t *yb, double *loss, int64_t *correct) {
  fashion_shuffle(perm, tr->n, rng);
  *loss = 0;
  *correct = 0;
  int64_t steps = 0;
  int64_t lb = o->batch / nranks, first = rank * lb; /* this rank's slice of each batch */
  for (int64_t start = 0; start + o->batch <= tr->n; start += o->batch, steps++) {
    for (int64_t i = 0; i < lb; i++) {
      memcpy(xb + i * IMG, tr->images + perm[start + first + i] * IMG, sizeof(float) * IMG);
      yb[i] = tr->labels[perm[start + first + i]];
    }
    kiln_scope_begin();
    kiln_tensor *x = kiln_from_data(KILN_F32, 2, (int64_t[]){lb, IMG}, xb);
    kiln_tensor *y = kiln_from_data(KILN_I64, 1, (int64_t[]){lb}, yb);
    step_out so;
    int st = train_step(m, x, y, o, &so);
    kiln_scope_end();
    if (st != KILN_OK) return st;
    *loss += so.loss;
    *correct += so.correct;
  }
  *loss /= steps ? (double)steps : 1;
  return nranks > 1 ? sum_over_ranks(loss, correct) : KILN_OK;
}

static int train(const options *o, const dataset *tr, const dataset *te) {
  kiln_manual_seed(o->seed);
  uint64_t rng = o->seed;
  model m;
  if (!model_init(&m, o)) {
    fprintf(stderr, "fashion_mnist: %s\n", kiln_last_error());
    return 1;
  }
  int64_t *perm = malloc(sizeof *perm * (size_t)tr->n), *yb = malloc(sizeof *yb * (size_t)o->batch);
  float *xb = malloc(sizeof *xb * (size_t)(o->batch * IMG));
  if (!perm || !yb || !xb) {
    fprintf(stderr, "fashion_mnist: out of memory\n");
    return 1;
  }
  for (int64_t i = 0; i < tr->n; i++) perm[i] = i;
  double t0 = fashion_seconds();
  int64_t seen = (tr->n / o->batch) * o->batch;
  double acc = 0;
  int st = KILN_OK;
  for (int e = 1; e <= o->epochs && st == KILN_OK; e++) {
    kiln_profile_begin(); /* the table printed at the end covers the last epoch */
    double te0 = fashion_seconds(), loss;
    int64_t correct;
    st = train_epoch(&m, tr, o, perm, &rng, xb, yb, &loss, &correct);
    double dt = fashion_seconds() - te0;
    kiln_profile_end();
    if (st != KILN_OK) break;
    int compiles = fashion_count_compiles();
    if (rank != 0) continue; /* rank 0 evaluates and prints */
    acc = (double)evaluate(&m, te) / (double)te->n;
    printf("epoch %d/%d  loss %.4f  train acc %.2f%%  test acc %.2f%%  %.0f images/s  elapsed %.1f s  "
           "(%d kernels compiled this epoch)\n",
           e, o->epochs, loss, 100.0 * correct / (double)seen, 100.0 * acc, seen / dt, fashion_seconds() - t0, compiles);
    fflush(stdout);
    if (o->stats) fashion_print_stats(e);
  }
  if (st != KILN_OK) fprintf(stderr, "fashion_mnist: training failed on rank %d: %s\n", rank, kiln_last_error());
  if (st == KILN_OK && nranks > 1) {
    kiln_tensor *ps[4] = {m.w1, m.b1, m.w2, m.b2};
    bool same = true;
    for (int i = 0; i < 4; i++) same = same_on_all_ranks(ps[i]) && same;
    if (rank == 0) printf("parameters %s on all %d ranks\n", same ? "bit-identical" : "DIFFER", nranks);
    if (!same) st = KILN_ERR_SHAPE;
  }
  if (st == KILN_OK && rank == 0) printf("final test accuracy %.2f%%\n", 100.0 * acc);
  if (st == KILN_OK && rank == 0) st = fashion_report_profile("fashion_mnist", o->trace);
  model_free(&m);
  free(perm), free(yb), free(xb);
  return st == KILN_OK ? 0 : 1;
}

/* ------------------------------------------------------------------ main */

static int usage(const char *msg) {
  fprintf(stderr, "fashion_mnist: %s\nusage: fashion_mnist [--epochs N] [--seed S] [--batch B] [--lr X] "
                  "[--data DIR] [--trace FILE] [--manual] [--stats]\n", msg);
  return 2;
}

static int parse(int argc, char **argv, options *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--manual") || !strcmp(a, "--stats")) {
      if (!strcmp(a, "--manual")) o->manual = true;
      else o->stats = true;
      continue;
    }
    if (!v) return usage("missing value after an option");
    if (!strcmp(a, "--epochs")) o->epochs = atoi(v);
    else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--batch")) o->batch = atoi(v);
    else if (!strcmp(a, "--lr")) o->lr = atof(v);
    else if (!strcmp(a, "--data")) o->data_dir = v;
    else if (!strcmp(a, "--trace")) o->trace = v;
    else return usage("unknown option");
    i++;
  }
  if (o->epochs < 1 || o->batch < 1 || !(o->lr > 0)) return usage("epochs, batch and lr must be positive");
  return 0;
}

int main(int argc, char **argv) {
  options o = {.epochs = 5, .batch = 128, .seed = 1, .lr = 0.05, .momentum = 0.9,
               .data_dir = FASHION_DIR};
  int bad = parse(argc, argv, &o);
  if (bad) return bad;
  if (kiln_dist_init(NULL, &world) != KILN_OK) {
    fprintf(stderr, "fashion_mnist: %s\n", kiln_last_error());
    return 1;
  }
  rank = kiln_group_rank(world);
  nranks = kiln_group_size(world);
  if (o.batch % nranks != 0) return usage("the batch must be divisible by the number of ranks");
  dataset tr = {0}, te = {0};
  if (!fashion_load("fashion_mnist", o.data_dir, "train", &tr) || !fashion_load("fashion_mnist", o.data_dir, "t10k", &te))
    return 1;
  if (rank == 0)
    printf("Fashion-MNIST: %lld training and %lld test images; MLP 784-256-10, batch %d, lr %g, momentum %g, "
           "seed %llu, %s%s\n",
           (long long)tr.n, (long long)te.n, o.batch, o.lr, o.momentum, (unsigned long long)o.seed,
           o.manual ? "hand-written backward" : "kiln_grad + kiln_sgd", nranks > 1 ? ", data-parallel" : "");
  if (rank == 0 && nranks > 1) printf("%d ranks, %d images each per step\n", nranks, o.batch / nranks);
  int rc = train(&o, &tr, &te);
  if (kiln_dist_finalize() != KILN_OK) rc = 1;
  fashion_free(&tr), fashion_free(&te);
  return rc;
}
