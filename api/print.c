/*
 * print.c — kiln_print and kiln_to_string in Torch7's format
 * (torch7/Tensor.lua: Storage__printformat, Tensor__printMatrix).
 *
 * One format is chosen for the whole tensor, as Torch7 does:
 *  - every finite value an integer: "%{e+1}d" where e = digits of the
 *    largest magnitude (float dtypes with e > 9 use "%11.4e");
 *  - else, with emin/emax = floor(log10(|x|)) + 1 of the smallest/largest
 *    magnitude: emax - emin > 4 → "%11.4e"; emax > 5 or < 0 → "%7.4f"
 *    with a common scale 10^(emax-1) printed first as "1e-03 *"; else
 *    "%{emax+6}.4f" ("%7.4f" when emax is 0).
 * 1-d: one value per line. 2-d: rows of values separated by one space,
 * cut into blocks of "Columns a to b" to fit 80 columns. ≥3-d: each 2-d
 * slice headed "(i,j,.,.) = " and indented by one space. Then a footer
 * "[kiln.FloatTensor of size 4x5]".
 *
 * Kiln's choices where Torch7 has no rule (Torch7 had neither 0-d tensors
 * nor empty tensors with sizes, and was 1-based):
 *  - slice indices and column numbers are 0-based, and ≥3-d slices come in
 *    row-major order (the order kiln_read returns), as PyTorch's legacy
 *    printing did;
 *  - a 0-d tensor prints its value like a 1-element 1-d tensor, then
 *    "[kiln.FloatTensor of size ()]";
 *  - an empty tensor prints only its footer, e.g. "[kiln.FloatTensor of
 *    size 2x0]";
 *  - integer and bool dtypes always print exact integers (Torch7 went
 *    through double and switched to %e past 10^9);
 *  - nan/inf take no part in choosing the format and print as "nan",
 *    "inf", "-inf" right-aligned in the column width.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"

typedef struct print_fmt {
  char conv;    /* 'd' integer, 'f' fixed, 'e' exponent */
  int width;    /* Torch7's sz */
  double scale; /* values are divided by it; 1 when none */
} print_fmt;

/* The elements in row-major order: exact integers for integer and bool
 * dtypes (ints), doubles otherwise (reals). */
typedef struct print_values {
  bool is_int;
  int64_t n;
  int64_t *ints;
  double *reals;
} print_values;

/* ------------------------------------------------------------ reading */

static void values_free(print_values *pv) {
  free(pv->ints);
  free(pv->reals);
}

static int values_read(kiln_tensor *t, print_values *pv, const char *fn) {
  kiln_dtype d = t->storage->dtype;
  size_t esize = (size_t)graph_dtypes[d].size;
  *pv = (print_values){.is_int = !graph_is_float(d), .n = graph_view_numel(&t->view)};
  size_t n = (size_t)(pv->n > 0 ? pv->n : 1);
  unsigned char *raw = graph_malloc(n * esize);
  if (pv->is_int) pv->ints = graph_malloc(n * sizeof *pv->ints);
  else pv->reals = graph_malloc(n * sizeof *pv->reals);
  if (!raw || (!pv->ints && !pv->reals)) {
    free(raw);
    values_free(pv);
    return api_error(KILN_ERR_OOM, fn, "out of memory reading %lld elements", (long long)pv->n);
  }
  int st = pv->n > 0 ? kiln_read(t, raw, n * esize) : KILN_OK;
  for (int64_t i = 0; st == KILN_OK && i < pv->n; i++) {
    const unsigned char *p = raw + (size_t)i * esize;
    if (d == KILN_I64) memcpy(&pv->ints[i], p, sizeof(int64_t));
    else if (pv->is_int) pv->ints[i] = (int64_t)graph_load_scalar(d, p);
    else pv->reals[i] = graph_load_scalar(d, p);
  }
  free(raw);
  if (st != KILN_OK) values_free(pv);
  return st;
}

/* ------------------------------------------------------------- format */

/* Digits of |v| (1 for 0), exact for all of int64. */
static int digits(int64_t v) {
  uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  int n = 1;
  while (m >= 10) {
    m /= 10;
    n++;
  }
  return n;
}

static print_fmt int_format(const print_values *pv) {
  int e = 1;
  for (int64_t i = 0; i < pv->n; i++) {
    int k = digits(pv->ints[i]);
    if (k > e) e = k;
  }
  return (print_fmt){'d', e + 1, 1.0};
}

/* floor(log10(a)) + 1, or 1 for 0 (Torch7's expMin/expMax). */
static int exponent(double a) { return a != 0 ? (int)floor(log10(a)) + 1 : 1; }

static print_fmt real_format(const print_values *pv) {
  bool int_mode = true, any = false;
  double amin = 0, amax = 0;
  for (int64_t i = 0; i < pv->n; i++) {
    double x = pv->reals[i];
    if (!isfinite(x)) continue;
    if (x != ceil(x)) int_mode = false;
    double a = fabs(x);
    amin = !any || a < amin ? a : amin;
    amax = !any || a > amax ? a : amax;
    any = true;
  }
  int emin = exponent(amin), emax = exponent(amax);
  if (int_mode) return emax > 9 ? (print_fmt){'e', 11, 1.0} : (print_fmt){'d', emax + 1, 1.0};
  if (emax - emin > 4) {
    int w = (abs(emax) > 99 || abs(emin) > 99) ? 12 : 11;
    return (print_fmt){'e', w, 1.0};
  }
  if (emax > 5 || emax < 0) {
    double scale = pow(10.0, emax - 1);
    return (print_fmt){'f', 7, scale};
  }
  return (print_fmt){'f', emax == 0 ? 7 : emax + 6, 1.0};
}

/* The format, widened so that "nan", "inf" and "-inf" fit. */
static print_fmt choose_format(const print_values *pv) {
  if (pv->is_int) return int_format(pv);
  print_fmt f = real_format(pv);
  for (int64_t i = 0; i < pv->n; i++) {
    double x = pv->reals[i];
    int w = isnan(x) ? 3 : isinf(x) ? (x < 0 ? 4 : 3) : 0;
    if (w > f.width) f.width = w;
  }
  return f;
}

/* ------------------------------------------------------------- output */

static void put_value(FILE *f, const print_fmt *fm, const print_values *pv, int64_t i) {
  if (pv->is_int) {
    fprintf(f, "%*lld", fm->width, (long long)pv->ints[i]);
    return;
  }
  double x = pv->reals[i];
  if (!isfinite(x)) {
    fprintf(f, "%*s", fm->width, isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
    return;
  }
  x = x / fm->scale + 0.0; /* + 0.0: -0 prints as 0, as Lua's %d did */
  if (fm->conv == 'd') fprintf(f, "%*.0f", fm->width, x);
  else if (fm->conv == 'e') fprintf(f, "%*.4e", fm->width, x);
  else fprintf(f, "%*.4f", fm->width, x);
}

/* Torch7's 1-d layout: an optional scale line, then one value a line. */
static void print_vector(FILE *f, const print_fmt *fm, const print_values *pv) {
  if (fm->scale != 1.0) fprintf(f, "%g *\n", fm->scale);
  for (int64_t i = 0; i < pv->n; i++) {
    put_value(f, fm, pv, i);
    fputc('\n', f);
  }
}

/* One row of columns [first, last] of the matrix starting at element base. */
static void print_row(FILE *f, const print_fmt *fm, const print_values *pv, int64_t base, int64_t first,
                      int64_t last) {
  for (int64_t c = first; c <= last; c++) {
    put_value(f, fm, pv, base + c);
    fputc(c == last ? '\n' : ' ', f);
  }
}

/* Torch7's Tensor__printMatrix for the rows × cols matrix at element base. */
static void print_matrix(FILE *f, const print_fmt *fm, const print_values *pv, int64_t base, int64_t rows,
                         int64_t cols, const char *indent) {
  int64_t per_line = (80 - (int64_t)strlen(indent)) / (fm->width + 1);
  if (per_line < 1) per_line = 1;
  const char *row_indent = fm->scale != 1.0 ? " " : "";
  fputs(indent, f);
  for (int64_t first = 0; first < cols; first += per_line) {
    int64_t last = (first + per_line < cols ? first + per_line : cols) - 1;
    if (per_line < cols) {
      if (first != 0) fprintf(f, "\n%s", indent); /* Torch7 left later blocks unindented */
      fprintf(f, "Columns %lld to %lld\n%s", (long long)first, (long long)last, indent);
    }
    if (fm->scale != 1.0) fprintf(f, "%g *\n %s", fm->scale, indent);
    for (int64_t r = 0; r < rows; r++) {
      print_row(f, fm, pv, base + r * cols, first, last);
      if (r != rows - 1) fprintf(f, "%s%s", indent, row_indent);
    }
  }
}

/* ≥3-d: each trailing 2-d slice, in row-major order, headed by its
 * leading indices. */
static void print_slices(FILE *f, const print_fmt *fm, const print_values *pv, const graph_view *v) {
  int lead = v->ndim - 2;
  int64_t rows = v->sizes[v->ndim - 2], cols = v->sizes[v->ndim - 1];
  int64_t idx[KILN_MAX_DIMS] = {0};
  for (int64_t base = 0; base < pv->n; base += rows * cols) {
    if (base > 0) fputc('\n', f);
    fputc('(', f);
    for (int d = 0; d < lead; d++) fprintf(f, "%lld,", (long long)idx[d]);
    fputs(".,.) = \n", f);
    print_matrix(f, fm, pv, base, rows, cols, " ");
    for (int d = lead - 1; d >= 0 && ++idx[d] == v->sizes[d]; d--) idx[d] = 0;
  }
}

static void print_footer(FILE *f, kiln_dtype d, const graph_view *v) {
  fprintf(f, "[kiln.%sTensor of size ", graph_dtypes[d].torch_name);
  if (v->ndim == 0) fputs("()", f);
  for (int i = 0; i < v->ndim; i++) fprintf(f, i ? "x%lld" : "%lld", (long long)v->sizes[i]);
  fputs("]\n", f);
}

/* Reads t's values first, so that nothing is written on error. */
static int print_to(kiln_tensor *t, FILE *f, const char *fn) {
  print_values pv;
  int st = values_read(t, &pv, fn);
  if (st != KILN_OK) return st;
  const graph_view *v = &t->view;
  print_fmt fm = choose_format(&pv);
  if (pv.n > 0) {
    if (v->ndim <= 1) print_vector(f, &fm, &pv);
    else if (v->ndim == 2) print_matrix(f, &fm, &pv, 0, v->sizes[0], v->sizes[1], "");
    else print_slices(f, &fm, &pv, v);
  }
  print_footer(f, t->storage->dtype, v);
  values_free(&pv);
  return KILN_OK;
}

KILN_API int kiln_print(kiln_tensor *t, FILE *f) {
  if (!api_check(t, "kiln_print", "t")) return api_status();
  if (!f) return api_error(KILN_ERR_ARG, "kiln_print", "argument f is NULL");
  int st = print_to(t, f, "kiln_print");
  if (st == KILN_OK && ferror(f)) return api_error(KILN_ERR_IO, "kiln_print", "write error");
  return st;
}

KILN_API char *kiln_to_string(kiln_tensor *t) {
  static const char fn[] = "kiln_to_string";
  if (!api_check(t, fn, "t")) return NULL;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) {
    api_error(KILN_ERR_OOM, fn, "out of memory");
    return NULL;
  }
  int st = print_to(t, f, fn);
  bool bad = fclose(f) != 0;
  if (st == KILN_OK && !bad) return buf;
  free(buf);
  if (st == KILN_OK) api_error(KILN_ERR_OOM, fn, "out of memory");
  return NULL;
}
