/*
 * fashion_data.c — the Fashion-MNIST examples' shared loader and helpers
 * (fashion_data.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "fashion_data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "kiln/kiln.h"

#define IMG FASHION_IMG
#define CLS FASHION_CLASSES

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads a whole gzip file into a malloc'ed buffer; NULL with a message. */
static unsigned char *read_gz(const char *prog, const char *path, size_t *len) {
  gzFile f = gzopen(path, "rb");
  if (!f) {
    fprintf(stderr, "%s: cannot open %s: %s (install Debian's dataset-fashion-mnist, or pass --data DIR)\n", prog,
            path, strerror(errno));
    return NULL;
  }
  size_t cap = 1 << 20, n = 0;
  unsigned char *buf = malloc(cap);
  int got = 0;
  while (buf && (got = gzread(f, buf + n, (unsigned)(cap - n))) > 0) {
    n += (size_t)got;
    if (n == cap) {
      unsigned char *bigger = realloc(buf, cap *= 2);
      if (!bigger) free(buf);
      buf = bigger;
    }
  }
  int err = 0;
  const char *msg = gzerror(f, &err); /* owned by f: print before gzclose */
  bool bad = !buf || got < 0 || (err != Z_OK && err != Z_STREAM_END);
  if (bad && buf) fprintf(stderr, "%s: corrupt or truncated file: %s\n", prog, msg); /* msg names the file */
  if (!buf) fprintf(stderr, "%s: out of memory reading %s\n", prog, path);
  gzclose(f);
  if (bad) {
    free(buf);
    return NULL;
  }
  *len = n;
  return buf;
}

/* Checks an IDX header: magic (type 0x08 = u8, ndim), sizes, and that the
 * payload is exactly what the sizes say. Returns the item count or -1. */
static int64_t idx_check(const char *prog, const char *path, const unsigned char *p, size_t len, int ndim, const uint32_t *dims) {
  size_t header = 4 + 4 * (size_t)ndim;
  if (len < header || be32(p) != (uint32_t)(0x0800 | ndim)) {
    fprintf(stderr, "%s: %s is not an IDX file of %d-D u8 data\n", prog, path, ndim);
    return -1;
  }
  size_t items = be32(p + 4), per = 1;
  for (int d = 1; d < ndim; d++) {
    if (be32(p + 4 + 4 * d) != dims[d]) {
      fprintf(stderr, "%s: %s: dim %d is %u, expected %u\n", prog, path, d, be32(p + 4 + 4 * d), dims[d]);
      return -1;
    }
    per *= dims[d];
  }
  if (len - header != items * per) {
    fprintf(stderr, "%s: %s: %zu data bytes, header says %zu (truncated?)\n", prog, path, len - header,
            items * per);
    return -1;
  }
  return (int64_t)items;
}

bool fashion_load(const char *prog, const char *dir, const char *prefix, dataset *ds) {
  char ipath[1024], lpath[1024];
  snprintf(ipath, sizeof ipath, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
  snprintf(lpath, sizeof lpath, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
  size_t ilen = 0, llen = 0;
  unsigned char *img = read_gz(prog, ipath, &ilen), *lab = img ? read_gz(prog, lpath, &llen) : NULL;
  int64_t ni = img && lab ? idx_check(prog, ipath, img, ilen, 3, (uint32_t[]){0, 28, 28}) : -1;
  int64_t nl = ni >= 0 ? idx_check(prog, lpath, lab, llen, 1, (uint32_t[]){0}) : -1;
  bool ok = ni >= 0 && nl >= 0;
  if (ok && ni != nl) {
    fprintf(stderr, "%s: %s has %lld images but %s has %lld labels\n", prog, ipath, (long long)ni, lpath,
            (long long)nl);
    ok = false;
  }
  if (ok) {
    ds->n = ni;
    ds->images = malloc(sizeof(float) * (size_t)(ni * IMG));
    ds->labels = malloc(sizeof(int64_t) * (size_t)ni);
    ok = ds->images && ds->labels;
    for (int64_t i = 0; ok && i < ni * IMG; i++) ds->images[i] = img[16 + i] / 255.0f;
    for (int64_t i = 0; ok && i < ni; i++) {
      ds->labels[i] = lab[8 + i];
      if (ds->labels[i] >= CLS) {
        fprintf(stderr, "%s: %s: label %lld of item %lld is not a class\n", prog, lpath,
                (long long)ds->labels[i], (long long)i);
        ok = false;
      }
    }
  }
  free(img);
  free(lab);
  return ok;
}

void fashion_free(dataset *ds) {
  free(ds->images);
  free(ds->labels);
  *ds = (dataset){0};
}

void fashion_pixel_moments(const dataset *ds, double *mean, double *std) {
  int64_t n = ds->n * IMG;
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < n; i++) sum += ds->images[i];
  double m = n ? sum / (double)n : 0;
  for (int64_t i = 0; i < n; i++) sq += (ds->images[i] - m) * (ds->images[i] - m);
  *mean = m;
  *std = n ? sqrt(sq / (double)n) : 0;
}

void fashion_standardize(dataset *ds, double mean, double std) {
  for (int64_t i = 0; i < ds->n * IMG; i++) ds->images[i] = (float)((ds->images[i] - mean) / std);
}

uint64_t fashion_rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void fashion_shuffle(int64_t *perm, int64_t n, uint64_t *rng) {
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(fashion_rng_next(rng) % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

double fashion_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int fashion_count_compiles(void) {
  int n = 0;
  kiln_kernel_record r;
  for (int i = 0; i < kiln_profile_count(); i++)
    if (kiln_profile_get(i, &r) == KILN_OK && !r.cache_hit) n++;
  return n;
}

void fashion_print_stats(int epoch) {
  kiln_engine_stats s;
  if (kiln_engine_stats_get(&s) != KILN_OK) return;
  printf("stats: epoch %d rss_mib %.1f live_nodes %lld live_buffers %lld pending_nodes %lld history_weight %lld "
         "allocator_cached_mib %.1f kernels_cached %lld schedules_cached %lld kernels_compiled %lld\n",
         epoch, (double)s.rss_bytes / (1 << 20), (long long)s.live_nodes, (long long)s.live_buffers,
         (long long)s.pending_nodes, (long long)s.history_weight, (double)s.allocator_cached_bytes / (1 << 20),
         (long long)s.kernels_cached, (long long)s.schedules_cached, (long long)s.kernels_compiled);
  fflush(stdout);
}

int fashion_report_profile(const char *prog, const char *trace) {
  printf("\nprofile of the last epoch (training steps; evaluation not included):\n");
  kiln_profile_print(stdout);
  if (!trace) return KILN_OK;
  int st = kiln_profile_write_trace(trace);
  if (st != KILN_OK) fprintf(stderr, "%s: %s\n", prog, kiln_last_error());
  else printf("trace of the last epoch: %s\n", trace);
  return st;
}
