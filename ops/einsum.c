/*
 * einsum.c — kiln_einsum (Torch 1.13's torch.einsum): an Einstein-summation
 * equation over n operands, lowered to the ops that exist:
 *
 *  1. parse: subscripts per operand ("ij,jk->ik"; letters a-z, A-Z and one
 *     "..." each; spaces ignored); without "->" the output is "..." then
 *     the letters that appear once, in Torch's order (A-Z before a-z);
 *  2. per operand: a letter repeated within it takes the diagonal (a
 *     strided view, kiln_as_strided); a letter in no other operand and not
 *     in the output is summed out; size-1 dims broadcast (kiln_expand) to
 *     the size the other operands give that letter;
 *  3. left to right, the result so far and the next operand contract as
 *     one batched matmul: permuted to [batch, M, K] @ [batch, K, N] (batch:
 *     letters in both still needed later; K: letters in both that are not;
 *     M, N: each side's own letters) and reshaped back — so every
 *     contraction runs on the GEMM path, with its gradient;
 *  4. the result is permuted to the output's order.
 *
 * Ellipsis dims are right-aligned across operands and broadcast like
 * elementwise ops; an explicit output without "..." sums them out (as
 * Torch). Labels: A-Z are 0-25, a-z 26-51, ellipsis dims 52 and up.
 */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

#define N_LETTERS 52
#define N_LABELS (N_LETTERS + KILN_MAX_DIMS)
#define MAX_OPERANDS 64

typedef struct {
  int n;                     /* dims */
  int label[KILN_MAX_DIMS];  /* label of each dim */
} term;

typedef struct {
  int n_ops;
  term in[MAX_OPERANDS];
  term out;
  int n_ell;                 /* ellipsis dims (the most any operand has) */
  int64_t size[N_LABELS];    /* each label's size (1 until a dim says more) */
} equation;

static int letter_label(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return 26 + c - 'a';
  return -1;
}

static char label_char(int l) { return l < 26 ? (char)('A' + l) : l < N_LETTERS ? (char)('a' + l - 26) : '.'; }

/* One term's subscripts from s[0..len): letters into letters[], *ell the
 * position of "..." among them (-1 if none). */
static bool parse_term(const char *s, size_t len, int *letters, int *n, int *ell, const char *fn) {
  *n = 0, *ell = -1;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == ' ') continue;
    if (s[i] == '.') {
      if (*ell >= 0 || i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.') {
        api_error(KILN_ERR_ARG, fn, "'.' must come as one \"...\" per operand (equation term \"%.*s\")", (int)len, s);
        return false;
      }
      *ell = *n, i += 2;
      continue;
    }
    int l = letter_label(s[i]);
    if (l < 0) {
      api_error(KILN_ERR_ARG, fn, "invalid subscript '%c' (letters a-z and A-Z only)", s[i]);
      return false;
    }
    if (*n == KILN_MAX_DIMS) {
      api_error(KILN_ERR_ARG, fn, "more than %d subscripts in one term", KILN_MAX_DIMS);
      return false;
    }
    letters[(*n)++] = l;
  }
  return true;
}

/* Operand i's labels: its letters with the ellipsis dims (right-aligned
 * among the equation's n_ell) in place of "...". */
static bool operand_term(equation *e, int i, const kiln_tensor *t, const int *letters, int n, int ell,
                         const char *fn) {
  int nd = t->view.ndim, ne = nd - n;
  if (ne < 0 || (ell < 0 && ne != 0)) {
    api_error(KILN_ERR_SHAPE, fn, "operand %d has %d dims but its subscripts name %d%s", i, nd, n,
              ell < 0 ? " and no \"...\"" : "");
    return false;
  }
  term *tm = &e->in[i];
  tm->n = nd;
  for (int d = 0, k = 0; d < nd; d++) {
    if (ell >= 0 && d >= ell && d < ell + ne) tm->label[d] = N_LETTERS + KILN_MAX_DIMS - ne + (d - ell);
    else tm->label[d] = letters[k++];
  }
  if (ne > e->n_ell) e->n_ell = ne;
  return true;
}

/* Ellipsis labels are numbered from the right end (N_LABELS - 1 is the
 * last ellipsis dim): the output's "..." lists the last n_ell of them. */
static bool parse_output(equation *e, const char *s, size_t len, const int *count, const char *fn) {
  int letters[KILN_MAX_DIMS], n, ell;
  if (!parse_term(s, len, letters, &n, &ell, fn)) return false;
  term *o = &e->out;
  o->n = 0;
  bool seen[N_LABELS] = {false};
  for (int k = 0; k <= n; k++) {
    if (k == ell)
      for (int j = 0; j < e->n_ell && o->n < KILN_MAX_DIMS; j++) o->label[o->n++] = N_LABELS - e->n_ell + j;
    if (k == n) break;
    int l = letters[k];
    if (!count[l] || seen[l]) {
      api_error(KILN_ERR_ARG, fn,
                !count[l] ? "output subscript %c does not appear in any operand" : "output subscript %c appears twice",
                label_char(l));
      return false;
    }
    seen[l] = true;
    if (o->n == KILN_MAX_DIMS) {
      api_error(KILN_ERR_ARG, fn, "more than %d output dims", KILN_MAX_DIMS);
      return false;
    }
    o->label[o->n++] = l;
  }
  return true;
}

/* Torch's implicit output: "..." first, then the letters used once. */
static void implicit_output(equation *e, const int *count) {
  term *o = &e->out;
  o->n = 0;
  for (int j = 0; j < e->n_ell; j++) o->label[o->n++] = N_LABELS - e->n_ell + j;
  for (int l = 0; l < N_LETTERS && o->n < KILN_MAX_DIMS; l++)
    if (count[l] == 1) o->label[o->n++] = l;
}

static bool parse(equation *e, const char *eq, kiln_tensor *const *ts, int n, const char *fn) {
  const char *arrow = strstr(eq, "->"), *end = arrow ? arrow : eq + strlen(eq);
  int count[N_LABELS] = {0}, i = 0;
  for (const char *s = eq; i <= n; i++) {
    const char *comma = memchr(s, ',', (size_t)(end - s));
    const char *stop = comma ? comma : end;
    if (i == n) {
      api_error(KILN_ERR_ARG, fn, "equation \"%s\" has more terms than the %d operands", eq, n);
      return false;
    }
    int letters[KILN_MAX_DIMS], nl, ell;
    if (!parse_term(s, (size_t)(stop - s), letters, &nl, &ell, fn) ||
        !operand_term(e, i, ts[i], letters, nl, ell, fn))
      return false;
    if (!comma) break;
    s = comma + 1;
  }
  if (i != n - 1) {
    api_error(KILN_ERR_ARG, fn, "equation \"%s\" has %d terms for %d operands", eq, i + 1, n);
    return false;
  }
  e->n_ops = n;
  for (int k = 0; k < n; k++) {
    term *t = &e->in[k];
    for (int d = 0; d < t->n; d++) count[t->label[d]]++; /* 'ii' counts twice: its trace */
  }
  if (arrow) return parse_output(e, arrow + 2, strlen(arrow + 2), count, fn);
  implicit_output(e, count);
  return true;
}

/* ------------------------------------------------------------ compute */

/* The sizes each label takes: equal across operands, or 1 (broadcast);
 * a label repeated within an operand (a diagonal) needs equal sizes there. */
static bool label_sizes(equation *e, kiln_tensor *const *ts, const char *fn) {
  for (int l = 0; l < N_LABELS; l++) e->size[l] = -1;
  for (int i = 0; i < e->n_ops; i++)
    for (int d = 0; d < e->in[i].n; d++) {
      int l = e->in[i].label[d], first = -1;
      for (int d2 = 0; d2 < d && first < 0; d2++)
        if (e->in[i].label[d2] == l) first = d2;
      int64_t s = ts[i]->view.sizes[d], *have = &e->size[l];
      if (first >= 0) { /* repeated in operand i */
        int64_t s0 = ts[i]->view.sizes[first];
        if (s == s0) continue;
        api_error(KILN_ERR_SHAPE, fn, "subscript %c is repeated in operand %d with sizes %lld and %lld",
                  label_char(l), i, (long long)s0, (long long)s);
        return false;
      }
      if (*have < 0 || *have == 1) *have = s;
      else if (s != 1 && s != *have) {
        api_error(KILN_ERR_SHAPE, fn, "subscript %c has size %lld in operand %d but %lld in an earlier one",
                  label_char(l), (long long)s, i, (long long)*have);
        return false;
      }
    }
  return true;
}

typedef struct {
  kiln_tensor *t; /* in the caller's scope */
  term tm;        /* its labels, each once */
} operand;

/* Operand t with labels tm: the diagonal of repeated labels (a view). */
static operand diagonal(kiln_tensor *t, const term *tm) {
  operand r = {t, {0, {0}}};
  int64_t sizes[KILN_MAX_DIMS], strides[KILN_MAX_DIMS];
  bool repeated = false;
  for (int d = 0; d < tm->n; d++) {
    int k = 0;
    while (k < r.tm.n && r.tm.label[k] != tm->label[d]) k++;
    if (k < r.tm.n) {
      strides[k] += t->view.strides[d], repeated = true;
      continue;
    }
    r.tm.label[r.tm.n] = tm->label[d], sizes[r.tm.n] = t->view.sizes[d], strides[r.tm.n++] = t->view.strides[d];
  }
  if (repeated) r.t = kiln_as_strided(t, r.tm.n, sizes, strides, t->view.offset);
  return r;
}

/* Is label l used by an operand after `after` or by the output? */
static bool needed(const equation *e, int l, int after) {
  for (int d = 0; d < e->out.n; d++)
    if (e->out.label[d] == l) return true;
  for (int i = after + 1; i < e->n_ops; i++)
    for (int d = 0; d < e->in[i].n; d++)
      if (e->in[i].label[d] == l) return true;
  return false;
}

static int find(const term *tm, int l) {
  for (int d = 0; d < tm->n; d++)
    if (tm->label[d] == l) return d;
  return -1;
}

/* Sums out operand i's labels that no other operand and not the output
 * use (seen: labels of the operands before i), then expands its size-1
 * dims to the labels' sizes. */
static operand prepare(const equation *e, int i, operand o, const bool *seen) {
  int dims[KILN_MAX_DIMS], nsum = 0;
  term kept = {0, {0}};
  for (int d = 0; d < o.tm.n; d++) {
    int l = o.tm.label[d];
    if (!seen[l] && !needed(e, l, i)) dims[nsum++] = d;
    else kept.label[kept.n++] = l;
  }
  if (nsum) o.t = kiln_sum(o.t, nsum, dims, false);
  o.tm = kept;
  int64_t sizes[KILN_MAX_DIMS];
  bool expand = false;
  for (int d = 0; o.t && d < kept.n; d++) {
    sizes[d] = e->size[kept.label[d]];
    expand = expand || sizes[d] != o.t->view.sizes[d];
  }
  if (expand && o.t) o.t = kiln_expand(o.t, kept.n, sizes);
  return o;
}

/* t permuted to labels order[n] (all of t's) and reshaped to the products
 * of the groups of sizes group[3] (dims per group). */
static kiln_tensor *arrange(const operand *o, const int *order, int n, const int *group, const equation *e) {
  int perm[KILN_MAX_DIMS];
  for (int d = 0; d < n; d++) perm[d] = find(&o->tm, order[d]);
  kiln_tensor *p = kiln_permute(o->t, n, perm);
  int64_t sizes[3];
  for (int g = 0, d = 0; g < 3; g++) {
    sizes[g] = 1;
    for (int k = 0; k < group[g]; k++) sizes[g] *= e->size[order[d++]];
  }
  return p ? kiln_reshape(p, 3, sizes) : NULL;
}

/* out = x [nx] then y [ny] then z [nz]. */
static void concat3(int *out, const int *x, int nx, const int *y, int ny, const int *z, int nz) {
  memcpy(out, x, sizeof(int) * (size_t)nx);
  memcpy(out + nx, y, sizeof(int) * (size_t)ny);
  memcpy(out + nx + ny, z, sizeof(int) * (size_t)nz);
}

/* a (the result so far) times operand b, contracting the labels in both
 * that no later operand nor the output needs: one batched matmul. */
static operand contract(const equation *e, int bi, const operand *a, const operand *b) {
  int batch[KILN_MAX_DIMS], con[KILN_MAX_DIMS], ao[KILN_MAX_DIMS], bo[KILN_MAX_DIMS];
  int nb = 0, nc = 0, na = 0, nbo = 0;
  for (int d = 0; d < a->tm.n; d++) {
    int l = a->tm.label[d];
    if (find(&b->tm, l) < 0) ao[na++] = l;
    else if (needed(e, l, bi)) batch[nb++] = l;
    else con[nc++] = l;
  }
  for (int d = 0; d < b->tm.n; d++)
    if (find(&a->tm, b->tm.label[d]) < 0) bo[nbo++] = b->tm.label[d];
  int oa[KILN_MAX_DIMS], ob[KILN_MAX_DIMS];
  concat3(oa, batch, nb, ao, na, con, nc);
  concat3(ob, batch, nb, con, nc, bo, nbo);
  operand r = {NULL, {nb + na + nbo, {0}}};
  kiln_tensor *x = arrange(a, oa, nb + na + nc, (int[]){nb, na, nc}, e);
  kiln_tensor *y = arrange(b, ob, nb + nc + nbo, (int[]){nb, nc, nbo}, e);
  kiln_tensor *m = x && y ? kiln_matmul(x, y) : NULL;
  int64_t sizes[KILN_MAX_DIMS];
  concat3(r.tm.label, batch, nb, ao, na, bo, nbo);
  for (int d = 0; d < r.tm.n; d++) sizes[d] = e->size[r.tm.label[d]];
  r.t = m ? kiln_reshape(m, r.tm.n, sizes) : NULL;
  return r;
}

static kiln_tensor *evaluate(const equation *e, kiln_tensor *const *ts) {
  bool seen[N_LABELS] = {false};
  operand acc = {NULL, {0, {0}}};
  for (int i = 0; i < e->n_ops; i++) {
    operand o = prepare(e, i, diagonal(ts[i], &e->in[i]), seen);
    for (int d = 0; d < e->in[i].n; d++) seen[e->in[i].label[d]] = true;
    if (!o.t) return NULL;
    acc = i == 0 ? o : contract(e, i, &acc, &o);
    if (!acc.t) return NULL;
  }
  int perm[KILN_MAX_DIMS];
  for (int d = 0; d < e->out.n; d++) perm[d] = find(&acc.tm, e->out.label[d]);
  return kiln_permute(acc.t, e->out.n, perm);
}

KILN_API kiln_tensor *kiln_einsum(const char *eq, kiln_tensor *const *operands, int n) {
  const char *fn = "kiln_einsum";
  if (!eq) {
    api_error(KILN_ERR_ARG, fn, "equation is NULL");
    return NULL;
  }
  if (n < 1 || n > MAX_OPERANDS) {
    api_error(KILN_ERR_ARG, fn, "needs 1 to %d operands, got %d", MAX_OPERANDS, n);
    return NULL;
  }
  if (api_check_list(operands, n, "tensor", fn) != KILN_OK) return NULL;
  for (int i = 0; i < n; i++)
    if (!api_check(operands[i], fn, "operand")) return NULL;
  equation *e = calloc(1, sizeof *e);
  if (!e) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  kiln_tensor *r = NULL;
  if (parse(e, eq, operands, n, fn) && label_sizes(e, operands, fn)) {
    kiln_scope_begin();
    r = kiln_keep(evaluate(e, operands));
    kiln_scope_end();
  }
  free(e);
  return r;
}
