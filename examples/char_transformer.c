/*
 * char_transformer.c — the transformer job: a character-level GPT trained
 * on plain English text through Kiln's C API only.
 *
 * Corpus: the fortune cookies of Debian's `fortunes` package (every file
 * of /usr/share/games/fortunes without a dot in its name — the .dat
 * indexes and .u8 links are skipped — in name order, concatenated: about
 * 2.5 MB of English; scripts/setup.sh installs it). Tokens are the bytes
 * that occur, numbered in byte order; the last tenth of the text is the
 * held-out validation split.
 *
 * Model (GPT-2's block, pre-norm), defaults 4 layers, 4 heads, d = 128,
 * context T = 128:
 *
 *   x = wte[tokens] + wpe[0..T)                        [B, T, d]
 *   per layer: x += proj(attention(ln1(x)))            causal, heads of d/H
 *              x += fc2(gelu_tanh(fc1(ln2(x))))        d -> 4d -> d
 *   logits = ln_f(x) · wteᵀ                            [B, T, V] (weights tied)
 *
 * attention: q, k, v = split(linear(x, w_qkv [3d, d])), each viewed
 * [B, T, H, d/H] and transposed to [B, H, T, d/H];
 * kiln_scaled_dot_product_attention(q, k, v, NULL, 0, is_causal = true,
 * 0); the heads transposed back and merged to [B, T, d]. The causal mask
 * allocates nothing (a comparison of positions fused into the softmax's
 * kernel). Weight tying: wte is passed to kiln_embedding and to the
 * output kiln_linear; kiln_grad sums the two gradients.
 *
 * Training: cross entropy of the next byte at every position, AdamW
 * (kiln_adam with decoupled weight decay: lr 1e-3, betas 0.9/0.99, eps
 * 1e-8, weight decay 0.01 on every parameter), gradients clipped to norm
 * 1, the learning rate warmed up linearly over the first 5 % of the steps
 * (at least 1), then a cosine down to lr/10 at the last step. Batches are
 * B random windows of T + 1 bytes of the training split (splitmix64 of
 * --seed). Initialisation: normal(0, 0.02) for the embeddings and
 * matrices, zero biases, unit layer-norm weights (nanoGPT's, without its
 * scaled projections). bench/char_transformer.py is the same model and
 * setup in PyTorch.
 *
 *   char_transformer [--steps N] [--seed S] [--batch B] [--context T]
 *                    [--layers L] [--heads H] [--dim D] [--lr X]
 *                    [--epoch-steps N] [--eval-batches N] [--sample N]
 *                    [--data DIR_OR_FILE]
 *
 * Output: one line per step (loss, learning rate, tokens/s), the
 * validation loss after each epoch (--epoch-steps steps, default one pass
 * over the training split's tokens) and at the end (on --eval-batches
 * batches of B windows spread evenly over the validation split), the
 * training tokens/s over the steps after the first (which compiles the
 * kernels; evaluation excluded), and --sample bytes sampled from the
 * model (temperature 1) after a prompt from the validation text (a `|`
 * marks where the model takes over). Deterministic for a given seed and thread count.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kiln/kiln.h"

#define MAX_LAYERS 16
#define PER_LAYER 12 /* ln1 w b, qkv w b, proj w b, ln2 w b, fc1 w b, fc2 w b */
#define MAX_PARAMS (4 + MAX_LAYERS * PER_LAYER)

typedef struct options {
  int64_t steps, epoch_steps, batch, context, layers, heads, dim, eval_batches, sample;
  uint64_t seed;
  double lr;
  const char *data;
} options;

/* --------------------------------------------------------------- corpus */

typedef struct corpus {
  unsigned char *text; /* the concatenated files */
  int64_t n, n_train;  /* bytes; the first n_train are the training split */
  int64_t *ids;        /* token of each byte [n] */
  int vocab;
  unsigned char byte_of[256]; /* token -> byte */
} corpus;

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Appends the file at path to c->text (grown as needed). */
static bool append_file(corpus *c, const char *path, int64_t *cap) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "char_transformer: cannot open %s\n", path);
    return false;
  }
  size_t got;
  unsigned char buf[65536];
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
    if (c->n + (int64_t)got > *cap) {
      *cap = 2 * (c->n + (int64_t)got);
      unsigned char *t = realloc(c->text, (size_t)*cap);
      if (!t) {
        fclose(f);
        return false;
      }
      c->text = t;
    }
    memcpy(c->text + c->n, buf, got);
    c->n += (int64_t)got;
  }
  bool ok = !ferror(f);
  fclose(f);
  return ok;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The files of dir without a dot in their name, sorted; or path itself. */
static bool read_corpus(corpus *c, const char *path) {
  int64_t cap = 0;
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "char_transformer: cannot open %s (install Debian's fortunes: scripts/setup.sh)\n", path);
    return false;
  }
  if (!S_ISDIR(st.st_mode)) return append_file(c, path, &cap);
  DIR *d = opendir(path);
  if (!d) return false;
  char *names[512];
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) && n < 512;)
    if (!strchr(e->d_name, '.')) names[n++] = strdup(e->d_name);
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, by_name);
  bool ok = true;
  for (int i = 0; i < n; i++) {
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", path, names[i]);
    if (ok && stat(full, &st) == 0 && S_ISREG(st.st_mode)) ok = append_file(c, full, &cap);
    free(names[i]);
  }
  return ok;
}

/* Tokens: the bytes that occur, in byte order; the last tenth is held out. */
static bool tokenize(corpus *c) {
  int id_of[256];
  bool seen[256] = {false};
  for (int64_t i = 0; i < c->n; i++) seen[c->text[i]] = true;
  c->vocab = 0;
  for (int b = 0; b < 256; b++)
    if (seen[b]) c->byte_of[c->vocab] = (unsigned char)b, id_of[b] = c->vocab++;
  c->ids = malloc(sizeof *c->ids * (size_t)c->n);
  if (!c->ids) return false;
  for (int64_t i = 0; i < c->n; i++) c->ids[i] = id_of[c->text[i]];
  c->n_train = c->n - c->n / 10;
  return true;
}

/* ---------------------------------------------------------------- model */

typedef struct model {
  const options *o;
  int n_params;
  kiln_tensor *p[MAX_PARAMS]; /* wte [V, d], wpe [T, d], per layer PER_LAYER, ln_f w b */
  kiln_tensor *positions;     /* I64 [T]: 0..T-1 */
  kiln_optimizer *opt;
} model;

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* normal(0, 0.02) (std > 0), zeros (std == 0) or ones (std < 0) of sizes
 * [rows, cols] (cols 0: a vector [rows]); realized and contiguous. */
static kiln_tensor *param(int64_t rows, int64_t cols, double std) {
  int64_t sizes[2] = {rows, cols};
  int nd = cols ? 2 : 1;
  kiln_scope_begin();
  kiln_tensor *p = std > 0 ? kiln_mul_scalar(kiln_randn(KILN_F32, nd, sizes), std)
                           : kiln_full(KILN_F32, nd, sizes, std < 0 ? 1 : 0);
  p = kiln_contiguous(p);
  kiln_keep(p);
  kiln_scope_end();
  return p;
}

static bool model_init(model *m, const options *o, int vocab) {
  int64_t d = o->dim;
  int k = 0;
  m->o = o;
  m->p[k++] = param(vocab, d, 0.02);
  m->p[k++] = param(o->context, d, 0.02);
  for (int64_t l = 0; l < o->layers; l++) {
    m->p[k++] = param(d, 0, -1), m->p[k++] = param(d, 0, 0);              /* ln1 */
    m->p[k++] = param(3 * d, d, 0.02), m->p[k++] = param(3 * d, 0, 0);    /* qkv */
    m->p[k++] = param(d, d, 0.02), m->p[k++] = param(d, 0, 0);            /* proj */
    m->p[k++] = param(d, 0, -1), m->p[k++] = param(d, 0, 0);              /* ln2 */
    m->p[k++] = param(4 * d, d, 0.02), m->p[k++] = param(4 * d, 0, 0);    /* fc1 */
    m->p[k++] = param(d, 4 * d, 0.02), m->p[k++] = param(d, 0, 0);        /* fc2 */
  }
  m->p[k++] = param(d, 0, -1), m->p[k++] = param(d, 0, 0); /* ln_f */
  m->n_params = k;
  m->positions = kiln_arange(KILN_I64, 0, (double)o->context, 1);
  if (kiln_realize_many(m->p, k) != KILN_OK) return false;
  m->opt = kiln_adam(m->p, k, o->lr, 0.9, 0.99, 1e-8, 0.01, true);
  return m->opt != NULL;
}

static void model_free(model *m) {
  kiln_optimizer_free(m->opt);
  for (int i = 0; i < m->n_params; i++) kiln_release(m->p[i]);
  kiln_release(m->positions);
}

/* Causal multi-head self-attention of x [B, T, d]: [B, T, d]. */
static kiln_tensor *attention(const model *m, kiln_tensor *x, kiln_tensor *const *p) {
  int64_t B = kiln_size(x, 0), T = kiln_size(x, 1), d = m->o->dim, H = m->o->heads;
  kiln_tensor *qkv = kiln_linear(x, p[0], p[1]); /* [B, T, 3d] */
  kiln_tensor *h[3];
  for (int i = 0; i < 3; i++) /* [B, T, d] -> [B, T, H, d/H] -> [B, H, T, d/H] */
    h[i] = kiln_transpose(kiln_view(kiln_narrow(qkv, 2, i * d, d), 4, (int64_t[]){B, T, H, d / H}), 1, 2);
  kiln_tensor *y = kiln_scaled_dot_product_attention(h[0], h[1], h[2], NULL, 0, true, 0);
  y = kiln_reshape(kiln_transpose(y, 1, 2), 3, (int64_t[]){B, T, d}); /* heads merged */
  return kiln_linear(y, p[2], p[3]);
}

/* tokens I64 [B, T] -> logits [B, T, V]. */
static kiln_tensor *forward(const model *m, kiln_tensor *tokens) {
  int64_t T = kiln_size(tokens, 1);
  kiln_tensor *pos = kiln_narrow(m->positions, 0, 0, T);
  kiln_tensor *x = kiln_add(kiln_embedding(m->p[0], tokens), kiln_embedding(m->p[1], pos));
  for (int64_t l = 0; l < m->o->layers; l++) {
    kiln_tensor *const *p = m->p + 2 + l * PER_LAYER;
    x = kiln_add(x, attention(m, kiln_layer_norm(x, 1, p[0], p[1], 1e-5), p + 2));
    kiln_tensor *h = kiln_linear(kiln_layer_norm(x, 1, p[6], p[7], 1e-5), p[8], p[9]);
    x = kiln_add(x, kiln_linear(kiln_gelu_tanh(h), p[10], p[11]));
  }
  kiln_tensor *const *f = m->p + m->n_params - 2;
  return kiln_linear(kiln_layer_norm(x, 1, f[0], f[1], 1e-5), m->p[0], NULL); /* tied: wte */
}

/* Mean cross entropy of logits [B, T, V] against targets I64 [B, T]. */
static kiln_tensor *loss_of(kiln_tensor *logits, kiln_tensor *targets) {
  int64_t n = kiln_numel(targets), V = kiln_size(logits, 2);
  return kiln_cross_entropy(kiln_reshape(logits, 2, (int64_t[]){n, V}), kiln_reshape(targets, 1, &n),
                            KILN_REDUCTION_MEAN, 0);
}

/* Inputs and next-byte targets of the windows starting at starts [B]. */
static void make_batch(const corpus *c, const int64_t *starts, int64_t B, int64_t T, kiln_tensor **x,
                       kiln_tensor **y) {
  int64_t *buf = malloc(sizeof *buf * (size_t)(2 * B * T));
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      buf[b * T + t] = c->ids[starts[b] + t];
      buf[B * T + b * T + t] = c->ids[starts[b] + t + 1];
    }
  *x = kiln_from_data(KILN_I64, 2, (int64_t[]){B, T}, buf);
  *y = kiln_from_data(KILN_I64, 2, (int64_t[]){B, T}, buf + B * T);
  free(buf);
}

/* Warm-up over the first 5 % of the steps, then a cosine to lr/10. */
static double lr_at(const options *o, int64_t step) {
  int64_t w = o->steps / 20 > 1 ? o->steps / 20 : 1;
  if (step < w) return o->lr * (double)(step + 1) / (double)w;
  int64_t span = o->steps - w > 1 ? o->steps - w - 1 : 1;
  return kiln_lr_cosine(o->lr, step - w, span, o->lr / 10);
}

/* One AdamW step on the batch at starts; *loss gets its loss. */
static int train_step(model *m, const corpus *c, const int64_t *starts, int64_t step, double *loss) {
  const options *o = m->o;
  kiln_scope_begin();
  kiln_tensor *x, *y, *grads[MAX_PARAMS];
  make_batch(c, starts, o->batch, o->context, &x, &y);
  kiln_tensor *l = loss_of(forward(m, x), y);
  int st = kiln_grad(&l, NULL, 1, m->p, m->n_params, grads);
  if (st == KILN_OK) st = kiln_clip_grad_norm_(grads, m->n_params, 1.0, 2.0, NULL);
  if (st == KILN_OK) st = kiln_optimizer_set_lr(m->opt, lr_at(o, step));
  if (st == KILN_OK) st = kiln_optimizer_step(m->opt, grads);
  kiln_tensor *force[MAX_PARAMS + 1] = {l};
  memcpy(force + 1, m->p, sizeof *m->p * (size_t)m->n_params);
  if (st == KILN_OK) st = kiln_realize_many(force, m->n_params + 1);
  if (st == KILN_OK) st = kiln_item_f64(l, loss);
  kiln_scope_end();
  return st;
}

/* Mean loss over eval_batches batches of windows spread evenly over the
 * validation split. */
static int validate(const model *m, const corpus *c, double *loss) {
  const options *o = m->o;
  int64_t B = o->batch, T = o->context, n = o->eval_batches * B, span = c->n - c->n_train - T - 1;
  int64_t *starts = malloc(sizeof *starts * (size_t)B);
  double sum = 0;
  int st = KILN_OK;
  for (int64_t i = 0; i < o->eval_batches && st == KILN_OK; i++) {
    for (int64_t b = 0; b < B; b++) starts[b] = c->n_train + (i * B + b) * span / n;
    kiln_scope_begin();
    kiln_tensor *x, *y;
    make_batch(c, starts, B, T, &x, &y);
    double l = 0;
    st = kiln_item_f64(loss_of(forward(m, x), y), &l);
    sum += l;
    kiln_scope_end();
  }
  free(starts);
  *loss = sum / (double)o->eval_batches;
  return st;
}

/* Prints n bytes sampled after a prompt of the validation text. One
 * window of T tokens is run each time (the same shape: no new kernels);
 * positions after the last token do not reach it (causal). */
static int sample(const model *m, const corpus *c, int64_t n, uint64_t *rng) {
  int64_t T = m->o->context, len = T / 4 > 0 ? T / 4 : 1;
  int64_t *win = malloc(sizeof *win * (size_t)T);
  memcpy(win, c->ids + c->n_train, sizeof *win * (size_t)len);
  printf("\nsample (prompt from the validation text, then %lld bytes from the model):\n", (long long)n);
  for (int64_t i = 0; i < len; i++) putchar(c->byte_of[win[i]]);
  printf("|"); /* where the model takes over */
  float *probs = malloc(sizeof *probs * (size_t)c->vocab);
  int st = KILN_OK;
  for (int64_t i = 0; i < n && st == KILN_OK; i++) {
    for (int64_t t = len; t < T; t++) win[t] = 0;
    kiln_scope_begin();
    kiln_tensor *x = kiln_from_data(KILN_I64, 2, (int64_t[]){1, T}, win);
    kiln_tensor *p = kiln_softmax(kiln_select(kiln_select(forward(m, x), 0, 0), 0, len - 1), -1);
    st = kiln_read(p, probs, sizeof *probs * (size_t)c->vocab);
    kiln_scope_end();
    double u = (double)(splitmix(rng) >> 11) / (double)(1ULL << 53), acc = 0;
    int tok = c->vocab - 1;
    for (int v = 0; v < c->vocab; v++)
      if ((acc += probs[v]) > u) {
        tok = v;
        break;
      }
    putchar(c->byte_of[tok]);
    if (len == T) memmove(win, win + 1, sizeof *win * (size_t)(T - 1)), len--;
    win[len++] = tok;
  }
  printf("\n");
  free(win), free(probs);
  return st;
}

/* ------------------------------------------------------------- training */

static int train(const options *o, const corpus *c) {
  kiln_manual_seed(o->seed);
  uint64_t rng = o->seed;
  model m = {0};
  if (!model_init(&m, o, c->vocab)) {
    fprintf(stderr, "char_transformer: %s\n", kiln_last_error());
    return 1;
  }
  int64_t *starts = malloc(sizeof *starts * (size_t)o->batch), tokens = o->batch * o->context;
  double train_time = 0, first = 0, val = NAN, t0 = seconds();
  int st = KILN_OK;
  for (int64_t s = 0; s < o->steps && st == KILN_OK; s++) {
    for (int64_t b = 0; b < o->batch; b++) starts[b] = (int64_t)(splitmix(&rng) % (uint64_t)(c->n_train - o->context - 1));
    double ts = seconds(), loss = 0;
    st = train_step(&m, c, starts, s, &loss);
    double dt = seconds() - ts;
    if (s == 0) first = dt; /* compiles the kernels: not in the rate */
    else train_time += dt;
    if (st != KILN_OK) break;
    printf("step %lld/%lld  loss %.4f  lr %.2e  %.0f tokens/s\n", (long long)s + 1, (long long)o->steps, loss,
           lr_at(o, s), (double)tokens / dt);
    fflush(stdout);
    bool last = s + 1 == o->steps;
    if ((s + 1) % o->epoch_steps == 0 || last) {
      st = validate(&m, c, &val);
      if (st == KILN_OK)
        printf("epoch %lld  step %lld  validation loss %.4f  elapsed %.1f s\n", (long long)((s + 1 + o->epoch_steps - 1) / o->epoch_steps),
               (long long)s + 1, val, seconds() - t0);
      fflush(stdout);
    }
  }
  if (st == KILN_OK) {
    printf("final validation loss %.4f\ntraining tokens/s %.0f (steps 2..%lld of %lld tokens in %.1f s; step 1, "
           "which compiles the kernels, took %.1f s)\n",
           val, o->steps > 1 ? (double)(tokens * (o->steps - 1)) / train_time : NAN, (long long)o->steps,
           (long long)tokens, train_time, first);
    if (o->sample > 0) st = sample(&m, c, o->sample, &rng);
  }
  if (st != KILN_OK) fprintf(stderr, "char_transformer: training failed: %s\n", kiln_last_error());
  model_free(&m);
  free(starts);
  return st == KILN_OK ? 0 : 1;
}

/* ------------------------------------------------------------------ main */

static int usage(const char *msg) {
  fprintf(stderr, "char_transformer: %s\nusage: char_transformer [--steps N] [--seed S] [--batch B] "
                  "[--context T] [--layers L] [--heads H] [--dim D] [--lr X] [--epoch-steps N] "
                  "[--eval-batches N] [--sample N] [--data DIR_OR_FILE]\n", msg);
  return 2;
}

static int parse(int argc, char **argv, options *o) {
  static const char *names[] = {"--steps", "--epoch-steps", "--batch", "--context", "--layers",
                                "--heads", "--dim", "--eval-batches", "--sample"};
  int64_t *vals[] = {&o->steps, &o->epoch_steps, &o->batch, &o->context, &o->layers,
                     &o->heads, &o->dim, &o->eval_batches, &o->sample};
  for (int i = 1; i < argc; i += 2) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) return usage("missing value after an option");
    int k = 0;
    while (k < 9 && strcmp(a, names[k])) k++;
    if (k < 9) *vals[k] = atoll(v);
    else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--lr")) o->lr = atof(v);
    else if (!strcmp(a, "--data")) o->data = v;
    else return usage("unknown option");
  }
  if (o->steps < 1 || o->batch < 1 || o->context < 2 || o->layers < 1 || o->layers > MAX_LAYERS ||
      o->heads < 1 || o->dim < 1 || o->dim % o->heads || o->eval_batches < 1 || o->sample < 0 ||
      o->epoch_steps < 0 || !(o->lr > 0))
    return usage("steps, batch, layers (<= 16), heads, dim (a multiple of heads), eval-batches and lr must be "
                 "positive, context >= 2, sample and epoch-steps not negative");
  return 0;
}

int main(int argc, char **argv) {
  options o = {.steps = 2000, .batch = 32, .context = 128, .layers = 4, .heads = 4, .dim = 128,
               .eval_batches = 20, .sample = 300, .seed = 1, .lr = 1e-3, .data = "/usr/share/games/fortunes"};
  int bad = parse(argc, argv, &o);
  if (bad) return bad;
  corpus c = {0};
  if (!read_corpus(&c, o.data) || !tokenize(&c)) return 1;
  if (c.n - c.n_train < 2 * (o.context + 1)) {
    fprintf(stderr, "char_transformer: %s holds %lld bytes: too few for context %lld\n", o.data, (long long)c.n,
            (long long)o.context);
    return 1;
  }
  if (!o.epoch_steps) o.epoch_steps = c.n_train / (o.batch * o.context) > 0 ? c.n_train / (o.batch * o.context) : 1;
  printf("corpus %s: %lld bytes, %d distinct (the vocabulary), %lld for training, %lld held out\n"
         "GPT: %lld layers, %lld heads, d %lld, context %lld, batch %lld; AdamW lr %g (warm-up, cosine), "
         "%lld steps, %lld per epoch, seed %llu\n",
         o.data, (long long)c.n, c.vocab, (long long)c.n_train, (long long)(c.n - c.n_train), (long long)o.layers,
         (long long)o.heads, (long long)o.dim, (long long)o.context, (long long)o.batch, o.lr, (long long)o.steps,
         (long long)o.epoch_steps, (unsigned long long)o.seed);
  int rc = train(&o, &c);
  free(c.text), free(c.ids);
  return rc;
}
