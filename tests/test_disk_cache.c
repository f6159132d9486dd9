/*
 * test_disk_cache.c — the on-disk kernel cache (runtime/disk_cache.c,
 * docs/cache.md) across processes. The test runs itself as a child
 * (`--child`: a fixed workload whose values it checks, then one line of
 * counts on stdout) under different KILN_CACHE_DIR settings, and damages
 * the directory between runs: a warm directory compiles nothing; a
 * corrupt, truncated or foreign entry is rebuilt with the right values;
 * two children filling one directory at once both get right values; an
 * unusable directory turns the cache off with a KILN_DEBUG line; another
 * CPU or Kiln version misses; the generated GEMM's micro-kernel
 * (KILN_GEMM=jit) is an entry like the fused kernels; the directory stays under
 * KILN_CACHE_MAX_BYTES, the least recently used entries going first.
 *
 * ctest runs every test with KILN_CACHE_DIR empty; each child here gets a
 * directory of its own (mkdtemp) and KILN_BACKEND=llvm (only LLVM kernels
 * are cached on disk).
 */
#define _GNU_SOURCE /* popen, mkdtemp, pread, utimensat */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kiln/kiln.h"
#include "rt_internal.h"

enum { PATHLEN = 512 };

/* ------------------------------------------------------------ child */

/* sum(exp(0.5 * (tanh(0.001 x) + 1))) and sum(x * x) over x = 0..4095
 * (F64); with gemm, also a product through the generated GEMM (the
 * child runs with KILN_GEMM=jit): a [48, 40] · b [40, 56] of small
 * integers, exact in F32. */
static bool child_values(bool gemm) {
  double want1 = 0, want2 = 0;
  for (int i = 0; i < 4096; i++) {
    want1 += exp(0.5 * (tanh(0.001 * i) + 1));
    want2 += (double)i * i;
  }
  kiln_scope_begin();
  kiln_tensor *x = kiln_arange(KILN_F64, 0, 4096, 1);
  kiln_tensor *y = kiln_add_scalar(kiln_tanh(kiln_mul_scalar(x, 0.001)), 1);
  kiln_tensor *s1 = kiln_sum(kiln_exp(kiln_mul_scalar(y, 0.5)), 0, NULL, false);
  kiln_tensor *s2 = kiln_sum(kiln_mul(x, x), 0, NULL, false);
  double got1 = 0, got2 = 0;
  bool ok = kiln_realize(y) == KILN_OK && kiln_item_f64(s1, &got1) == KILN_OK && kiln_item_f64(s2, &got2) == KILN_OK;
  if (gemm) {
    enum { M = 48, K = 40, N = 56 };
    float a[M * K], b[K * N], c[M * N];
    for (int i = 0; i < M * K; i++) a[i] = (float)(i % 7 - 3);
    for (int i = 0; i < K * N; i++) b[i] = (float)(i % 5 - 2);
    kiln_tensor *ta = kiln_from_data(KILN_F32, 2, (int64_t[]){M, K}, a);
    kiln_tensor *tb = kiln_from_data(KILN_F32, 2, (int64_t[]){K, N}, b);
    ok = ok && kiln_read(kiln_matmul(ta, tb), c, sizeof c) == KILN_OK;
    for (int i = 0; ok && i < M; i++)
      for (int j = 0; ok && j < N; j++) {
        double want = 0;
        for (int k = 0; k < K; k++) want += (double)a[i * K + k] * b[k * N + j];
        ok = c[i * N + j] == want;
      }
  }
  kiln_scope_end();
  return ok && fabs(got1 - want1) < 1e-9 * want1 && got2 == want2;
}

/* Prints "values compiles misses disk_hits records": whether the values
 * were right, kernels and GEMM micro-kernels compiled, records that were
 * not cache hits, records loaded from disk (load_ns > 0, which must be
 * hits with compile_ns 0). Run twice, the workload leaves the GEMM out:
 * forgetting the kernels leaves the micro-kernels in memory. */
static int child_main(bool twice) {
  bool values = true;
  if (twice) {
    /* the same kernels again in this process after forgetting them: the
     * disk cache's code is linked already (the same symbols), and reused */
    values = child_values(false);
    rt_schedule_cache_clear();
    rt_kernel_cache_clear();
  }
  kiln_profile_begin();
  values = child_values(!twice) && values;
  kiln_profile_end();
  int misses = 0, disk = 0, gemm_records = 0, n = kiln_profile_count();
  for (int i = 0; i < n; i++) {
    kiln_kernel_record r;
    if (kiln_profile_get(i, &r) != KILN_OK) return 2;
    misses += !r.cache_hit;
    gemm_records += strncmp(r.name, "gemm_", 5) == 0 && strcmp(r.backend, "llvm") == 0;
    if (r.load_ns > 0 && (!r.cache_hit || r.compile_ns != 0)) values = false;
    disk += r.load_ns > 0;
  }
  if (gemm_records != !twice) values = false; /* the product ran through the generated GEMM */
  long long compiles = (long long)rt_compile_count() + llvm_gemm_compiled();
  printf("%d %lld %d %d %d\n", values, compiles, misses, disk, n);
  return 0;
}

/* ----------------------------------------------------------- parent */

typedef struct child_out {
  int values, misses, disk, records;
  long long compiles;
} child_out;

static char self[PATHLEN];

/* Starts this program as a child with env(1) arguments `env` (options
 * such as -u NAME first, then NAME=value assignments), stderr to errfile (or /dev/null). */
static bool twice; /* children run their workload twice (child_main) */

static FILE *start_child(const char *env, const char *errfile) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "env %s KILN_BACKEND=llvm KILN_GEMM=jit '%s' --child %s 2>'%s'", env, self,
           twice ? "twice" : "", errfile ? errfile : "/dev/null");
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  return p;
}

static child_out finish_child(FILE *p) {
  child_out o = {0};
  int got = fscanf(p, "%d %lld %d %d %d", &o.values, &o.compiles, &o.misses, &o.disk, &o.records);
  int status = pclose(p);
  assert_int_equal(got, 5);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_int_equal(o.values, 1);
  assert_true(o.records > 0);
  return o;
}

static child_out run_child(const char *env) { return finish_child(start_child(env, NULL)); }

/* "KILN_CACHE_DIR='<dir>' <more>" */
static child_out run_in(const char *dir, const char *more) {
  char env[1024];
  snprintf(env, sizeof env, "KILN_CACHE_DIR='%s' %s", dir, more ? more : "");
  return run_child(env);
}

static void assert_cold(child_out o) {
  assert_true(o.compiles > 0);
  assert_int_equal(o.misses, o.compiles);
  assert_int_equal(o.disk, 0);
}

static void assert_warm(child_out o, long long cold_compiles) {
  assert_int_equal(o.compiles, 0);
  assert_int_equal(o.misses, 0);
  assert_int_equal(o.disk, cold_compiles);
}

static void make_dir(char *buf) {
  strcpy(buf, "/tmp/kiln_disk_cache_XXXXXX");
  assert_non_null(mkdtemp(buf));
}

/* The paths of dir's entries (*.kc), up to max; their count. */
static int entries(const char *dir, char paths[][PATHLEN], int max) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *de; d && (de = readdir(d)) && n < max;) {
    size_t len = strlen(de->d_name);
    if (len > 3 && strcmp(de->d_name + len - 3, ".kc") == 0) snprintf(paths[n++], PATHLEN, "%s/%s", dir, de->d_name);
  }
  if (d) closedir(d);
  return n;
}

/* Files in dir whose name starts with prefix (any prefix: all files). */
static int count_files(const char *dir, const char *prefix, long long *bytes) {
  DIR *d = opendir(dir);
  int n = 0;
  if (bytes) *bytes = 0;
  for (struct dirent *de; d && (de = readdir(d));) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    if (strncmp(de->d_name, prefix, strlen(prefix)) != 0) continue;
    struct stat st;
    char path[PATHLEN];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    if (stat(path, &st) == 0 && bytes) *bytes += st.st_size;
    n++;
  }
  if (d) closedir(d);
  return n;
}

static void remove_dir(const char *dir) {
  char cmd[PATHLEN];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

static long long file_size(const char *path) {
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  return st.st_size;
}

/* ------------------------------------------------------------ tests */

/* A second process loads every kernel from disk and compiles nothing. */
static void warm_run_compiles_nothing(void **state) {
  (void)state;
  char dir[64];
  make_dir(dir);
  child_out cold = run_in(dir, NULL);
  assert_cold(cold);
  char paths[64][PATHLEN];
  assert_int_equal(entries(dir, paths, 64), cold.compiles);
  assert_warm(run_in(dir, NULL), cold.compiles);
  assert_int_equal(count_files(dir, ".tmp-", NULL), 0);
  remove_dir(dir);
}

/* Kernels forgotten by the in-memory cache (rt_kernel_cache_clear) and
 * needed again in the same process come back from disk, linked once:
 * cold, the second round loads what the first compiled; warm, both load. */
static void same_process_reloads(void **state) {
  (void)state;
  char dir[64];
  make_dir(dir);
  twice = true;
  child_out cold = run_in(dir, NULL);
  assert_int_equal(cold.compiles, cold.disk); /* compiled in round 1, loaded in round 2 */
  assert_int_equal(cold.misses, 0);
  assert_true(cold.disk > 0);
  child_out warm = run_in(dir, NULL);
  assert_int_equal(warm.compiles, 0);
  assert_int_equal(warm.disk, cold.disk);
  twice = false;
  remove_dir(dir);
}

/* How an entry is damaged. */
typedef enum damage { FLIP_LAST, FLIP_MIDDLE, TRUNCATE, FOREIGN, GARBAGE } damage;

static void damage_entries(const char *dir, damage how) {
  char paths[64][PATHLEN];
  int n = entries(dir, paths, 64);
  assert_true(n >= 2);
  /* FOREIGN: each entry's file gets the next entry's (valid) bytes */
  char *first = NULL;
  size_t first_len = 0;
  for (int i = 0; i < n; i++) {
    long long size = file_size(paths[i]);
    if (how == FLIP_LAST || how == FLIP_MIDDLE) {
      int fd = open(paths[i], O_RDWR);
      off_t at = how == FLIP_LAST ? size - 1 : size / 2;
      unsigned char c;
      assert_int_equal(pread(fd, &c, 1, at), 1);
      c ^= 0x40;
      assert_int_equal(pwrite(fd, &c, 1, at), 1);
      close(fd);
    } else if (how == TRUNCATE) {
      assert_int_equal(truncate(paths[i], size / 2), 0);
    } else if (how == GARBAGE) {
      FILE *f = fopen(paths[i], "wb");
      fputs("not a kernel", f);
      fclose(f);
    } else if (i == 0) {
      FILE *f = fopen(paths[0], "rb");
      first = malloc((size_t)size);
      first_len = fread(first, 1, (size_t)size, f);
      fclose(f);
    }
  }
  if (how != FOREIGN) return;
  for (int i = 0; i < n; i++) {
    char cmd[9000];
    if (i + 1 < n) snprintf(cmd, sizeof cmd, "cp '%s' '%s'", paths[i + 1], paths[i]);
    else snprintf(cmd, sizeof cmd, "true");
    assert_int_equal(system(cmd), 0);
  }
  FILE *f = fopen(paths[n - 1], "wb");
  fwrite(first, 1, first_len, f);
  fclose(f);
  free(first);
}

/* Every damaged entry is a miss: compiled again, right values, and
 * replaced (the run after compiles nothing). */
static void damaged_entries_are_rebuilt(void **state) {
  (void)state;
  for (damage how = FLIP_LAST; how <= GARBAGE; how++) {
    char dir[64];
    make_dir(dir);
    child_out cold = run_in(dir, NULL);
    damage_entries(dir, how);
    child_out again = run_in(dir, NULL);
    assert_int_equal(again.compiles, cold.compiles);
    assert_int_equal(again.disk, 0);
    assert_warm(run_in(dir, NULL), cold.compiles);
    remove_dir(dir);
  }
}

/* Two processes filling one directory at once both compute right values
 * (finish_child checks them), and leave whole entries. */
static void concurrent_fill(void **state) {
  (void)state;
  for (int round = 0; round < 3; round++) {
    char dir[64], env[200];
    make_dir(dir);
    snprintf(env, sizeof env, "KILN_CACHE_DIR='%s'", dir);
    FILE *a = start_child(env, NULL), *b = start_child(env, NULL);
    child_out oa = finish_child(a), ob = finish_child(b);
    assert_int_equal(oa.compiles + oa.disk, ob.compiles + ob.disk);
    child_out warm = run_in(dir, NULL);
    assert_int_equal(warm.compiles, 0);
    assert_int_equal(count_files(dir, ".tmp-", NULL), 0);
    remove_dir(dir);
  }
}

static bool file_has(const char *path, const char *text) {
  FILE *f = fopen(path, "r");
  char line[1024];
  bool found = false;
  while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, text) != NULL;
  if (f) fclose(f);
  return found;
}

/* A directory that cannot be created or written turns the cache off: the
 * child computes (and compiles) as without it, and says why under
 * KILN_DEBUG. */
static void unusable_dir_disables(void **state) {
  (void)state;
  char dir[64], ro[128], errfile[128], env[512];
  make_dir(dir);
  snprintf(errfile, sizeof errfile, "%s/stderr.txt", dir);
  /* root writes into a 0555 directory: then a read-only file system's */
  snprintf(ro, sizeof ro, "%s/ro", dir);
  assert_int_equal(mkdir(ro, 0555), 0);
  const char *cases[][2] = {{"/proc/kiln-no-such-dir/x", "disk cache off: cannot create"},
                            {geteuid() == 0 ? "/proc/self" : ro, "disk cache off: cannot write to"}};
  for (int i = 0; i < 2; i++) {
    snprintf(env, sizeof env, "KILN_DEBUG=1 KILN_CACHE_DIR='%s'", cases[i][0]);
    child_out o = finish_child(start_child(env, errfile));
    assert_cold(o);
    if (!file_has(errfile, cases[i][1])) fail_msg("no \"%s\" in the child's stderr", cases[i][1]);
  }
  assert_int_equal(count_files(ro, "", NULL), 0);
  remove_dir(dir);
}

/* KILN_CACHE_DIR="" is off (nothing under $HOME/.cache); unset, the cache
 * lives in $XDG_CACHE_HOME/kiln. */
static void default_and_empty_dir(void **state) {
  (void)state;
  char home[64], env[512], sub[128];
  make_dir(home);
  snprintf(env, sizeof env, "-u XDG_CACHE_HOME KILN_CACHE_DIR= HOME='%s'", home);
  assert_cold(run_child(env));
  assert_int_equal(count_files(home, "", NULL), 0);
  snprintf(env, sizeof env, "-u KILN_CACHE_DIR XDG_CACHE_HOME='%s'", home);
  child_out cold = run_child(env);
  assert_cold(cold);
  snprintf(sub, sizeof sub, "%s/kiln", home);
  char paths[64][PATHLEN];
  assert_int_equal(entries(sub, paths, 64), cold.compiles);
  assert_warm(run_child(env), cold.compiles);
  remove_dir(home);
}

/* Code built for another CPU (features; a CPU KILN_CPU pins) or by another
 * Kiln version is not loaded; the entries of each live side by side. */
static void other_cpu_or_version_misses(void **state) {
  (void)state;
  char dir[64];
  make_dir(dir);
  child_out cold = run_in(dir, NULL);
  assert_cold(cold);
  assert_cold(run_in(dir, "KILN_CACHE_TEST_CPU='other-cpu +avx512f'"));
  assert_cold(run_in(dir, "KILN_CACHE_TEST_VERSION=9.9.9"));
  child_out avx2 = run_in(dir, "KILN_CPU=x86-64-v3"); /* a pinned CPU is another CPU */
  assert_cold(avx2);
  assert_warm(run_in(dir, NULL), cold.compiles);
  assert_warm(run_in(dir, "KILN_CACHE_TEST_VERSION=9.9.9"), cold.compiles);
  assert_warm(run_in(dir, "KILN_CPU=x86-64-v3"), avx2.compiles);
  remove_dir(dir);
}

/* A hit makes an entry recently used (mtime now); past
 * KILN_CACHE_MAX_BYTES the least recently used entries go first. */
static void lru_eviction(void **state) {
  (void)state;
  char dir[64], paths[64][PATHLEN], more[128];
  make_dir(dir);
  child_out cold = run_in(dir, NULL);
  long long total;
  int n = count_files(dir, "", &total);
  assert_int_equal(n, cold.compiles);
  entries(dir, paths, 64);
  struct timespec old[2] = {{.tv_sec = 978307200}, {.tv_sec = 978307200}}; /* 2001-01-01 */
  for (int i = 0; i < n; i++) assert_int_equal(utimensat(AT_FDCWD, paths[i], old, 0), 0);
  assert_warm(run_in(dir, NULL), cold.compiles);
  struct stat st;
  for (int i = 0; i < n; i++) {
    assert_int_equal(stat(paths[i], &st), 0);
    assert_true(st.st_mtime > time(NULL) - 3600);
  }
  /* version 9.9.9's entries are as large as 0.1.0's: with room for one
   * set, the newer set stays and the older goes */
  snprintf(more, sizeof more, "KILN_CACHE_TEST_VERSION=9.9.9 KILN_CACHE_MAX_BYTES=%lld", total);
  assert_cold(run_in(dir, more));
  long long after;
  count_files(dir, "", &after);
  assert_true(after <= total);
  assert_warm(run_in(dir, more), cold.compiles);
  assert_true(run_in(dir, NULL).compiles > 0); /* evicted */
  remove_dir(dir);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return child_main(argc > 2 && strcmp(argv[2], "twice") == 0);
  const char *backend = getenv("KILN_BACKEND");
  if (backend && *backend && strcmp(backend, "llvm") != 0) {
    printf("skipped: the disk cache holds LLVM kernels only (KILN_BACKEND=%s)\n", backend);
    return 0;
  }
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return 1;
  self[len] = 0;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(warm_run_compiles_nothing), cmocka_unit_test(same_process_reloads),
      cmocka_unit_test(damaged_entries_are_rebuilt),
      cmocka_unit_test(concurrent_fill),           cmocka_unit_test(unusable_dir_disables),
      cmocka_unit_test(default_and_empty_dir),     cmocka_unit_test(other_cpu_or_version_misses),
      cmocka_unit_test(lru_eviction)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
