/*
 * fashion_cnn.c — the CNN job: trains a small convolutional network on
 * Fashion-MNIST through Kiln's C API only,
 *
 *   conv(1->32, 3x3, pad 1) - ReLU - max-pool 2 - conv(32->64, 3x3, pad 1) -
 *   ReLU - max-pool 2 - linear(3136->128) - ReLU - dropout 0.25 -
 *   linear(128->10),
 *
 * with the cross-entropy loss, gradients from kiln_grad and Adam (lr 1e-3)
 * from kiln_adam: torch.nn.functional's layers and torch.optim.Adam. The
 * images are standardized with the training set's pixel mean and standard
 * deviation (torchvision's Normalize; about one point of test accuracy
 * after 3 epochs over [0, 1] pixels, in PyTorch as in Kiln).
 *
 *   fashion_cnn [--epochs N] [--seed S] [--batch B] [--lr X]
 *               [--data DIR] [--trace FILE] [--steps N] [--stats]
 *
 * Same options and per-epoch output as the MLP job (fashion_mnist.c):
 * loss, train and test accuracy, images/s, kernels compiled per epoch, and
 * after training the profile table of the last epoch (--trace writes it
 * as a Chrome trace). --steps stops each epoch after N steps (for a quick
 * look at the speed; bench/peers.py times PyTorch on the same network).
 * --stats prints what the engine holds after every epoch, as the MLP's.
 *
 * Each convolution is a window view of its zero-padded input gathered
 * into columns (im2col, one kernel) and one OpenBLAS GEMM; its bias and
 * ReLU fuse into the max-pool's kernels, which read the GEMM's output. After the
 * first step every kernel is a cache hit. Deterministic for a given seed
 * and thread count (KILN_NUM_THREADS).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fashion_data.h"
#include "kiln/kiln.h"

#define IMG FASHION_IMG
#define CLS FASHION_CLASSES
#define C1 32
#define C2 64
#define FLAT (C2 * 7 * 7)
#define HID 128
#define N_PARAMS 8

typedef struct options {
  int epochs, batch;
  int64_t steps; /* per epoch, 0 = all */
  uint64_t seed;
  double lr;
  const char *data_dir;
  const char *trace;
  bool stats; /* --stats: kiln_engine_stats_get after every epoch */
} options;

/* ---------------------------------------------------------------- model */

typedef struct model {
  kiln_tensor *p[N_PARAMS]; /* conv1 w [32,1,3,3] b, conv2 w [64,32,3,3] b, fc1 w [128,3136] b, fc2 w [10,128] b */
  kiln_optimizer *opt;
} model;

/* Uniform in [-bound, bound), bound = 1/sqrt(fan_in): PyTorch's default
 * initialization of conv and linear weights and biases. */
static kiln_tensor *param(int ndim, const int64_t *sizes, int64_t fan_in) {
  kiln_scope_begin();
  double bound = 1.0 / sqrt((double)fan_in);
  kiln_tensor *u = kiln_rand(KILN_F32, ndim, sizes);
  kiln_tensor *p = kiln_contiguous(kiln_sub_scalar(kiln_mul_scalar(u, 2 * bound), bound));
  kiln_keep(p);
  kiln_scope_end();
  return p;
}

static bool model_init(model *m, const options *o) {
  m->p[0] = param(4, (int64_t[]){C1, 1, 3, 3}, 9);
  m->p[1] = param(1, (int64_t[]){C1}, 9);
  m->p[2] = param(4, (int64_t[]){C2, C1, 3, 3}, C1 * 9);
  m->p[3] = param(1, (int64_t[]){C2}, C1 * 9);
  m->p[4] = param(2, (int64_t[]){HID, FLAT}, FLAT);
  m->p[5] = param(1, (int64_t[]){HID}, FLAT);
  m->p[6] = param(2, (int64_t[]){CLS, HID}, HID);
  m->p[7] = param(1, (int64_t[]){CLS}, HID);
  if (kiln_realize_many(m->p, N_PARAMS) != KILN_OK) return false;
  m->opt = kiln_adam(m->p, N_PARAMS, o->lr, 0.9, 0.999, 1e-8, 0, false);
  return m->opt != NULL;
}

static void model_free(model *m) {
  kiln_optimizer_free(m->opt);
  for (int i = 0; i < N_PARAMS; i++) kiln_release(m->p[i]);
}

/* x [B, 1, 28, 28] -> logits [B, 10]. */
static kiln_tensor *forward(const model *m, kiln_tensor *x, bool training) {
  int64_t pad[] = {1, 1}, two[] = {2, 2};
  kiln_tensor *h = kiln_relu(kiln_conv(x, m->p[0], m->p[1], 2, NULL, pad, NULL, 1));
  h = kiln_max_pool(h, 2, two, two, NULL, NULL, false);
  h = kiln_relu(kiln_conv(h, m->p[2], m->p[3], 2, NULL, pad, NULL, 1));
  h = kiln_max_pool(h, 2, two, two, NULL, NULL, false);
  h = kiln_flatten(h, 1, -1);
  h = kiln_relu(kiln_linear(h, m->p[4], m->p[5]));
  h = kiln_dropout(h, 0.25, training);
  return kiln_linear(h, m->p[6], m->p[7]);
}

typedef struct step_out {
  double loss;
  int64_t correct;
} step_out;

/* One Adam step on a batch: x [B, 1, 28, 28], labels [B] (I64). */
static int train_step(model *m, kiln_tensor *x, kiln_tensor *labels, step_out *out) {
  kiln_scope_begin();
  kiln_tensor *logits = forward(m, x, true);
  kiln_tensor *loss = kiln_cross_entropy(logits, labels, KILN_REDUCTION_MEAN, 0);
  kiln_tensor *correct = kiln_sum(kiln_eq(kiln_argmax(logits, -1, false), labels), 0, NULL, false);
  kiln_tensor *grads[N_PARAMS];
  int st = kiln_grad(&loss, NULL, 1, m->p, N_PARAMS, grads);
  if (st == KILN_OK) st = kiln_optimizer_step(m->opt, grads);
  kiln_tensor *force[N_PARAMS + 2] = {loss, correct};
  memcpy(force + 2, m->p, sizeof m->p);
  if (st == KILN_OK) st = kiln_realize_many(force, N_PARAMS + 2);
  if (st == KILN_OK) {
    out->loss = kiln_item(loss);
    out->correct = (int64_t)kiln_item(correct);
  }
  kiln_scope_end();
  return st == KILN_OK ? kiln_last_status() : st;
}

/* Correct predictions over a dataset, in batches of 500 (no dropout). */
static int64_t evaluate(const model *m, const dataset *ds) {
  int64_t correct = 0;
  for (int64_t start = 0; start < ds->n; start += 500) {
    int64_t b = ds->n - start < 500 ? ds->n - start : 500;
    kiln_scope_begin();
    kiln_tensor *x = kiln_from_data(KILN_F32, 4, (int64_t[]){b, 1, 28, 28}, ds->images + start * IMG);
    kiln_tensor *y = kiln_from_data(KILN_I64, 1, (int64_t[]){b}, ds->labels + start);
    kiln_tensor *logits = forward(m, x, false);
    correct += (int64_t)kiln_item(kiln_sum(kiln_eq(kiln_argmax(logits, -1, false), y), 0, NULL, false));
    kiln_scope_end();
  }
  return correct;
}

/* ------------------------------------------------------------- training */

/* One epoch over the shuffled training set (or its first o->steps
 * batches); *seen counts the images trained on. */
static int train_epoch(model *m, const dataset *tr, const options *o, int64_t *perm, uint64_t *rng, float *xb,
                       int64_t *yb, double *loss, int64_t *correct, int64_t *seen) {
  fashion_shuffle(perm, tr->n, rng);
  *loss = 0;
  *correct = *seen = 0;
  int64_t steps = 0;
  for (int64_t start = 0; start + o->batch <= tr->n && (!o->steps || steps < o->steps); start += o->batch, steps++) {
    for (int64_t i = 0; i < o->batch; i++) {
      memcpy(xb + i * IMG, tr->images + perm[start + i] * IMG, sizeof(float) * IMG);
      yb[i] = tr->labels[perm[start + i]];
    }
    kiln_scope_begin();
    kiln_tensor *x = kiln_from_data(KILN_F32, 4, (int64_t[]){o->batch, 1, 28, 28}, xb);
    kiln_tensor *y = kiln_from_data(KILN_I64, 1, (int64_t[]){o->batch}, yb);
    step_out so;
    int st = train_step(m, x, y, &so);
    kiln_scope_end();
    if (st != KILN_OK) return st;
    *loss += so.loss;
    *correct += so.correct;
    *seen += o->batch;
  }
  *loss /= steps ? (double)steps : 1;
  return KILN_OK;
}

static int train(const options *o, const dataset *tr, const dataset *te) {
  kiln_manual_seed(o->seed);
  uint64_t rng = o->seed;
  model m = {0};
  if (!model_init(&m, o)) {
    fprintf(stderr, "fashion_cnn: %s\n", kiln_last_error());
    return 1;
  }
  int64_t *perm = malloc(sizeof *perm * (size_t)tr->n), *yb = malloc(sizeof *yb * (size_t)o->batch);
  float *xb = malloc(sizeof *xb * (size_t)(o->batch * IMG));
  if (!perm || !yb || !xb) {
    fprintf(stderr, "fashion_cnn: out of memory\n");
    return 1;
  }
  for (int64_t i = 0; i < tr->n; i++) perm[i] = i;
  double t0 = fashion_seconds(), acc = 0;
  int st = KILN_OK;
  for (int e = 1; e <= o->epochs && st == KILN_OK; e++) {
    kiln_profile_begin(); /* the table printed at the end covers the last epoch */
    double te0 = fashion_seconds(), loss;
    int64_t correct, seen;
    st = train_epoch(&m, tr, o, perm, &rng, xb, yb, &loss, &correct, &seen);
    double dt = fashion_seconds() - te0;
    kiln_profile_end();
    if (st != KILN_OK) break;
    int compiles = fashion_count_compiles();
    acc = (double)evaluate(&m, te) / (double)te->n;
    printf("epoch %d/%d  loss %.4f  train acc %.2f%%  test acc %.2f%%  %.0f images/s  elapsed %.1f s  "
           "(%d kernels compiled this epoch)\n",
           e, o->epochs, loss, 100.0 * correct / (double)(seen ? seen : 1), 100.0 * acc, seen / dt,
           fashion_seconds() - t0, compiles);
    fflush(stdout);
    if (o->stats) fashion_print_stats(e);
  }
  if (st != KILN_OK) fprintf(stderr, "fashion_cnn: training failed: %s\n", kiln_last_error());
  else printf("final test accuracy %.2f%%\n", 100.0 * acc);
  if (st == KILN_OK) st = fashion_report_profile("fashion_cnn", o->trace);
  model_free(&m);
  free(perm), free(yb), free(xb);
  return st == KILN_OK ? 0 : 1;
}

/* ------------------------------------------------------------------ main */

static int usage(const char *msg) {
  fprintf(stderr, "fashion_cnn: %s\nusage: fashion_cnn [--epochs N] [--seed S] [--batch B] [--lr X] "
                  "[--data DIR] [--trace FILE] [--steps N] [--stats]\n", msg);
  return 2;
}

static int parse(int argc, char **argv, options *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--stats")) {
      o->stats = true;
      continue;
    }
    if (!v) return usage("missing value after an option");
    if (!strcmp(a, "--epochs")) o->epochs = atoi(v);
    else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--batch")) o->batch = atoi(v);
    else if (!strcmp(a, "--lr")) o->lr = atof(v);
    else if (!strcmp(a, "--steps")) o->steps = atoll(v);
    else if (!strcmp(a, "--data")) o->data_dir = v;
    else if (!strcmp(a, "--trace")) o->trace = v;
    else return usage("unknown option");
    i++;
  }
  if (o->epochs < 1 || o->batch < 1 || !(o->lr > 0) || o->steps < 0)
    return usage("epochs, batch and lr must be positive, steps not negative");
  return 0;
}

int main(int argc, char **argv) {
  options o = {.epochs = 3, .batch = 128, .seed = 1, .lr = 1e-3, .data_dir = FASHION_DIR};
  int bad = parse(argc, argv, &o);
  if (bad) return bad;
  dataset tr = {0}, te = {0};
  if (!fashion_load("fashion_cnn", o.data_dir, "train", &tr) || !fashion_load("fashion_cnn", o.data_dir, "t10k", &te))
    return 1;
  double mean, std;
  fashion_pixel_moments(&tr, &mean, &std);
  fashion_standardize(&tr, mean, std);
  fashion_standardize(&te, mean, std);
  printf("Fashion-MNIST: %lld training and %lld test images, standardized with the training set's pixel mean "
         "%.4f and std %.4f; CNN conv32-pool-conv64-pool-fc128-fc10, batch %d, Adam lr %g, seed %llu\n",
         (long long)tr.n, (long long)te.n, mean, std, o.batch, o.lr, (unsigned long long)o.seed);
  int rc = train(&o, &tr, &te);
  fashion_free(&tr), fashion_free(&te);
  return rc;
}
