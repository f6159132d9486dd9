/*
 * profile.c — the public profiler API over the runtime's kernel records:
 * the records themselves, the table kiln_profile_print writes, and the
 * Chrome trace-event file (written with jansson, so names are escaped as
 * JSON requires).
 *
 * The table has one row per kernel name (the name says what was fused and
 * the shape, so it is stable across runs), sorted by total run time.
 * Interned names make "same kernel" a pointer comparison.
 */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "runtime.h"

KILN_API void kiln_profile_begin(void) { rt_profile_begin(); }
KILN_API void kiln_profile_end(void) { rt_profile_end(); }
KILN_API int kiln_profile_count(void) { return rt_profile_count(); }

KILN_API int kiln_profile_get(int i, kiln_kernel_record *out) {
  if (!out) return api_error(KILN_ERR_ARG, "kiln_profile_get", "out is NULL");
  if (!rt_profile_get(i, out))
    return api_error(KILN_ERR_INDEX, "kiln_profile_get", "record %d out of range [0, %d)", i, rt_profile_count());
  return KILN_OK;
}

/* ------------------------------------------------------------ table */

/* One row of the table: every run of one kernel. */
typedef struct profile_row {
  const char *name, *backend;
  int64_t calls, run_ns, compile_ns, compiles, bytes, flops;
  int n_ops;
} profile_row;

static int by_name(const void *a, const void *b) {
  const kiln_kernel_record *x = a, *y = b;
  if (x->name != y->name) return (uintptr_t)x->name < (uintptr_t)y->name ? -1 : 1;
  return strcmp(x->backend, y->backend);
}

static int by_total(const void *a, const void *b) {
  const profile_row *x = a, *y = b;
  if (x->run_ns != y->run_ns) return x->run_ns > y->run_ns ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Groups the records (sorted in place by name) into rows [return]. */
static int group_rows(kiln_kernel_record *recs, int n, profile_row *rows) {
  qsort(recs, (size_t)n, sizeof *recs, by_name);
  int n_rows = 0;
  for (int i = 0; i < n; i++) {
    const kiln_kernel_record *r = &recs[i];
    profile_row *row = &rows[n_rows - 1];
    if (!n_rows || row->name != r->name || strcmp(row->backend, r->backend) != 0) {
      row = &rows[n_rows++];
      *row = (profile_row){.name = r->name, .backend = r->backend, .n_ops = r->n_ops};
    }
    row->calls++;
    row->run_ns += r->run_ns;
    row->compile_ns += r->compile_ns;
    row->compiles += !r->cache_hit;
    row->bytes += r->bytes_read + r->bytes_written;
    row->flops += r->flops;
  }
  qsort(rows, (size_t)n_rows, sizeof *rows, by_total);
  return n_rows;
}

static void print_row(FILE *f, int width, const profile_row *r, double wall_ns) {
  double ns = r->run_ns > 0 ? (double)r->run_ns : 1.0;
  char ops[16] = "";
  if (r->n_ops > 0) snprintf(ops, sizeof ops, "%d", r->n_ops);
  fprintf(f, "%-*s %-7s %4s %7lld %10.3f %10.2f %8.2f %8.2f %6.1f %5lld %9.2f\n", width, r->name, r->backend, ops,
          (long long)r->calls, r->run_ns / 1e6, r->run_ns / 1e3 / (double)r->calls, (double)r->bytes / ns,
          (double)r->flops / ns, 100.0 * (double)r->run_ns / wall_ns, (long long)r->compiles, r->compile_ns / 1e6);
}

static void print_table(FILE *f, const rt_profile_snapshot_t *s, profile_row *rows, int n_rows) {
  double wall_ns = s->end_ns > s->begin_ns ? (double)(s->end_ns - s->begin_ns) : 1.0;
  profile_row total = {.name = "total", .backend = ""};
  for (int i = 0; i < n_rows; i++) {
    total.calls += rows[i].calls;
    total.run_ns += rows[i].run_ns;
    total.compile_ns += rows[i].compile_ns;
    total.compiles += rows[i].compiles;
    total.bytes += rows[i].bytes;
    total.flops += rows[i].flops;
  }
  fprintf(f, "kiln profile: %lld kernel runs of %d kernels, %.3f ms in kernels, %.3f ms wall (%.1f%%), %lld compiled\n",
          (long long)total.calls, n_rows, total.run_ns / 1e6, wall_ns / 1e6, 100.0 * (double)total.run_ns / wall_ns,
          (long long)total.compiles);
  int width = 24; /* the name column fits the longest name */
  for (int i = 0; i < n_rows; i++) {
    int len = (int)strlen(rows[i].name);
    if (len > width) width = len;
  }
  fprintf(f, "%-*s %-7s %4s %7s %10s %10s %8s %8s %6s %5s %9s\n", width, "kernel", "backend", "ops", "calls",
          "total ms", "mean us", "GB/s", "GFLOP/s", "%wall", "comp", "comp ms");
  for (int i = 0; i < n_rows; i++) print_row(f, width, &rows[i], wall_ns);
  if (n_rows > 1) print_row(f, width, &total, wall_ns);
}

KILN_API int kiln_profile_print(FILE *f) {
  if (!f) return api_error(KILN_ERR_ARG, "kiln_profile_print", "f is NULL");
  rt_profile_snapshot_t s;
  if (!rt_profile_snapshot(&s)) return api_error(KILN_ERR_OOM, "kiln_profile_print", "out of memory");
  profile_row *rows = graph_malloc(sizeof *rows * (size_t)(s.n_records ? s.n_records : 1));
  if (!rows) {
    rt_profile_snapshot_free(&s);
    return api_error(KILN_ERR_OOM, "kiln_profile_print", "out of memory");
  }
  print_table(f, &s, rows, group_rows(s.records, s.n_records, rows));
  free(rows);
  rt_profile_snapshot_free(&s);
  if (ferror(f)) return api_error(KILN_ERR_IO, "kiln_profile_print", "write error");
  return KILN_OK;
}

/* ------------------------------------------------------------ trace */

/* Trace-event times are in microseconds from the profile's begin. */
static double trace_us(const rt_profile_snapshot_t *s, int64_t ns) { return (double)(ns - s->begin_ns) / 1e3; }

static json_t *trace_args(const kiln_kernel_record *r) {
  return json_pack("{s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:b, s:i, s:I}", "backend", r->backend, "ops", r->n_ops,
                   "numel", (json_int_t)r->numel, "bytes_read", (json_int_t)r->bytes_read, "bytes_written",
                   (json_int_t)r->bytes_written, "flops", (json_int_t)r->flops, "compile_ns",
                   (json_int_t)r->compile_ns, "cache_hit", r->cache_hit, "threads", r->threads, "load_ns",
                   (json_int_t)r->load_ns);
}

static json_t *trace_event(const rt_profile_snapshot_t *s, const rt_profile_event *e) {
  static const char *cat[] = {[RT_EVENT_KERNEL] = "kernel", [RT_EVENT_CHUNK] = "chunk",
                              [RT_EVENT_COMPILE] = "compile"};
  char name[128];
  snprintf(name, sizeof name, e->kind == RT_EVENT_COMPILE ? "compile %s" : "%s", e->name);
  json_t *ev = json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i}", "name", name, "cat", cat[e->kind], "ph", "X", "ts",
                         trace_us(s, e->start_ns), "dur", (double)(e->end_ns - e->start_ns) / 1e3, "pid", 1, "tid",
                         e->tid);
  if (ev && e->kind == RT_EVENT_KERNEL && json_object_set_new(ev, "args", trace_args(&s->records[e->record])) != 0) {
    json_decref(ev);
    return NULL;
  }
  return ev;
}

/* A metadata event naming thread tid's track. */
static json_t *thread_name_event(int tid) {
  char name[48];
  const char *given = rt_thread_name(tid);
  if (!given) snprintf(name, sizeof name, "thread %d", tid);
  return json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M", "pid", 1, "tid", tid, "args",
                   "name", given ? given : name);
}

/* Appends one metadata event per thread that has an event; false on OOM. */
static bool add_thread_names(json_t *list, const rt_profile_snapshot_t *s) {
  int max_tid = 0;
  for (int i = 0; i < s->n_events; i++)
    if (s->events[i].tid > max_tid) max_tid = s->events[i].tid;
  bool *seen = graph_calloc((size_t)max_tid + 1, 1);
  if (!seen) return false;
  bool ok = true;
  for (int i = 0; i < s->n_events; i++) seen[s->events[i].tid] = true;
  for (int t = 1; t <= max_tid && ok; t++)
    if (seen[t]) ok = json_array_append_new(list, thread_name_event(t)) == 0;
  free(seen);
  return ok;
}

static json_t *trace_json(const rt_profile_snapshot_t *s) {
  json_t *list = json_array();
  bool ok = list && add_thread_names(list, s);
  for (int i = 0; i < s->n_events && ok; i++) ok = json_array_append_new(list, trace_event(s, &s->events[i])) == 0;
  json_t *root = ok ? json_pack("{s:o, s:s}", "traceEvents", list, "displayTimeUnit", "ms") : NULL;
  if (!root) json_decref(list);
  return root;
}

KILN_API int kiln_profile_write_trace(const char *path) {
  static const char fn[] = "kiln_profile_write_trace";
  if (!path) return api_error(KILN_ERR_ARG, fn, "path is NULL");
  rt_profile_snapshot_t s;
  if (!rt_profile_snapshot(&s)) return api_error(KILN_ERR_OOM, fn, "out of memory");
  json_t *root = trace_json(&s);
  rt_profile_snapshot_free(&s);
  if (!root) return api_error(KILN_ERR_OOM, fn, "out of memory building the trace");
  FILE *f = fopen(path, "w");
  if (!f) {
    int e = errno;
    json_decref(root);
    return api_error(KILN_ERR_IO, fn, "cannot open %s: %s", path, strerror(e));
  }
  int rc = json_dumpf(root, f, JSON_COMPACT);
  json_decref(root);
  if (fclose(f) != 0 || rc != 0) {
    remove(path);
    return api_error(KILN_ERR_IO, fn, "write error on %s", path);
  }
  return KILN_OK;
}

/* -------------------------------------------------------------- DOT */

KILN_API int kiln_graph_write_dot(kiln_tensor *const *ts, int n, const char *path, int flags) {
  static const char fn[] = "kiln_graph_write_dot";
  int st = api_check_list(ts, n, "tensor", fn);
  if (st != KILN_OK) return st;
  if (!path) return api_error(KILN_ERR_ARG, fn, "path is NULL");
  if (flags & ~KILN_DOT_AFTER_PASSES) return api_error(KILN_ERR_ARG, fn, "unknown flags 0x%x", (unsigned)flags);
  graph_node **nodes = graph_malloc(sizeof *nodes * (size_t)(n > 0 ? n : 1));
  if (!nodes) return api_error(KILN_ERR_OOM, fn, "out of memory");
  for (int i = 0; i < n; i++) {
    if (!ts[i]) {
      free(nodes);
      return api_error(KILN_ERR_ARG, fn, "tensor %d is NULL", i);
    }
    nodes[i] = api_version(ts[i]);
    if (!nodes[i]) {
      free(nodes);
      return api_status();
    }
  }
  FILE *f = fopen(path, "w");
  if (!f) {
    int e = errno;
    free(nodes);
    return api_error(KILN_ERR_IO, fn, "cannot open %s: %s", path, strerror(e));
  }
  char err[256];
  st = rt_write_dot(nodes, n, (flags & KILN_DOT_AFTER_PASSES) != 0, f, err, sizeof err);
  free(nodes);
  if (fclose(f) != 0 && st == KILN_OK) {
    st = KILN_ERR_IO;
    snprintf(err, sizeof err, "write error on %s", path);
  }
  if (st != KILN_OK) {
    remove(path);
    return api_error((kiln_status)st, fn, "%s", err);
  }
  return KILN_OK;
}
