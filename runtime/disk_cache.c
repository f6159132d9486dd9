/*
 * disk_cache.c — compiled CPU kernels kept on disk between processes
 * (docs/cache.md). One file per kernel under KILN_CACHE_DIR (default
 * $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; "" turns it off):
 *
 *   <32 hex digits>.kc = header | full key | object file
 *   header  = "KILNKC01", key_len (u64), obj_len (u64), checksum (u64)
 *
 * The full key is the in-memory cache's key (the kernel IR's uop bytes,
 * the written flags, the path byte) followed by the identity of the code
 * generator: target triple, host CPU and features, LLVM version, vector
 * width (llvm_target_id), Kiln's version and the build id of the binary
 * Kiln is linked into (without one: that file's size and mtime). The file
 * name is two 64-bit FNV-1a hashes of the full key; an entry is used only
 * when its whole key equals the wanted one and its checksum (FNV-1a 64
 * over key and object) and lengths are right, so a corrupt, truncated,
 * foreign or stale entry is a miss: the kernel is compiled again and the
 * entry replaced. Nothing read from disk is trusted before those checks.
 *
 * Writes go to a temporary file in the same directory, then rename(2):
 * readers see the old entry or the whole new one, never part of one. A
 * hit sets the file's mtime to now (futimens), so eviction — oldest mtime
 * first, when this process's writes take the directory past
 * KILN_CACHE_MAX_BYTES (default 256 MiB) — removes the least recently used.
 *
 * Every failure (unwritable directory, short read, full disk) falls back to
 * compiling; none is an error of the force. The code's symbol is derived
 * from the file name, so the object loads under the same name it was
 * compiled with, and a second load of the same code in one process reuses
 * the linked code (llvm_load_object).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_internal.h"

#ifndef KILN_VERSION_STRING
#define KILN_VERSION_STRING "unknown"
#endif

enum { HEADER = 32 };
static const char magic[8] = {'K', 'I', 'L', 'N', 'K', 'C', '0', '1'};

/* The settings, read once (rt_disk_cache_reset reads them again). */
static pthread_mutex_t dc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  bool read, on;
  char *dir;     /* malloc'ed */
  char *ident;   /* code generator identity (see above), malloc'ed */
  int64_t max_bytes;
  int64_t bytes; /* the directory's size as of the last scan plus our writes; -1 unknown */
} dc;
static atomic_uint_fast64_t tmp_counter;

/* ------------------------------------------------------------ hashing */

/* 64-bit FNV-1a (Fowler, Noll, Vo), from `h`. */
static uint64_t fnv1a(uint64_t h, const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/* The second name hash: FNV-1a over the bytes backwards, another basis. */
static uint64_t fnv1a_back(const unsigned char *p, size_t n) {
  uint64_t h = 0x84222325cbf29ce4ull ^ n;
  for (size_t i = n; i-- > 0;) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/* ---------------------------------------------------------- identity */

/* dl_iterate_phdr callback: the GNU build id of the object that contains
 * the address in d->want, hex-encoded into d->hex. */
typedef struct build_id_search {
  uintptr_t want;
  char hex[2 * 64 + 1];
} build_id_search;

static void note_build_id(const ElfW(Nhdr) * n, const char *end, build_id_search *d) {
  while ((const char *)(n + 1) <= end) {
    const char *name = (const char *)(n + 1), *desc = name + ((n->n_namesz + 3) & ~3u);
    if (desc + n->n_descsz > end) return;
    if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
      for (unsigned i = 0; i < n->n_descsz && i < 64; i++) snprintf(d->hex + 2 * i, 3, "%02x", (unsigned char)desc[i]);
      return;
    }
    n = (const ElfW(Nhdr) *)(desc + ((n->n_descsz + 3) & ~3u));
  }
}

static int find_build_id(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  build_id_search *d = arg;
  bool mine = false;
  for (int i = 0; i < info->dlpi_phnum && !mine; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    mine = ph->p_type == PT_LOAD && d->want >= lo && d->want < lo + ph->p_memsz;
  }
  if (!mine) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE) continue;
    const char *start = (const char *)(info->dlpi_addr + ph->p_vaddr);
    note_build_id((const ElfW(Nhdr) *)start, start + ph->p_memsz, d);
  }
  return 1;
}

/* "<llvm_target_id> kiln-<version> build-<id>": what besides the kernel IR
 * the code depends on. KILN_CACHE_TEST_VERSION replaces the version (for
 * tests). The build id changes with every rebuild of Kiln (or of the
 * program it is linked into statically), so code from an older Kiln is
 * never loaded. */
static char *identity(void) {
  char *target = llvm_target_id();
  if (!target) return NULL;
  build_id_search d = {.want = (uintptr_t)&dc, .hex = ""};
  dl_iterate_phdr(find_build_id, &d);
  Dl_info info;
  struct stat st;
  /* linked without a build id: the binary's size and mtime instead */
  if (!d.hex[0] && dladdr(&dc, &info) && info.dli_fname && stat(info.dli_fname, &st) == 0)
    snprintf(d.hex, sizeof d.hex, "file-%lld-%lld.%09ld", (long long)st.st_size, (long long)st.st_mtim.tv_sec,
             st.st_mtim.tv_nsec);
  const char *version = getenv("KILN_CACHE_TEST_VERSION");
  if (!version) version = KILN_VERSION_STRING;
  size_t n = strlen(target) + strlen(version) + strlen(d.hex) + 32;
  char *id = malloc(n);
  if (id) snprintf(id, n, "%s kiln-%s build-%s", target, version, d.hex);
  free(target);
  return id;
}

/* ---------------------------------------------------------- settings */

static void disable(const char *why, const char *dir) {
  int e = errno;
  if (rt_debug_level() >= 1)
    fprintf(stderr, "kiln: disk cache off: %s%s%s%s%s\n", why, dir ? " " : "", dir ? dir : "", e ? ": " : "",
            e ? strerror(e) : "");
  dc.on = false;
}

/* rt_disk_cache_set_dir's choice (malloc'ed; NULL: the environment's). */
static char *dir_override;

/* The directory: rt_disk_cache_set_dir's, else $KILN_CACHE_DIR, else
 * $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln (malloc'ed); NULL when off
 * or unknown. */
static char *cache_dir(void) {
  const char *env = dir_override ? dir_override : getenv("KILN_CACHE_DIR");
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (env) return *env ? graph_strdup(env) : NULL;
  const char *base = xdg && xdg[0] == '/' ? xdg : home && *home ? home : NULL;
  if (!base) return NULL;
  size_t n = strlen(base) + 16;
  char *dir = malloc(n);
  if (dir) snprintf(dir, n, "%s%s", base, base == xdg ? "/kiln" : "/.cache/kiln");
  return dir;
}

/* mkdir -p dir (mode 0755). */
static bool make_dirs(char *dir) {
  for (char *p = dir + 1;; p++) {
    if (*p && *p != '/') continue;
    char c = *p;
    *p = 0;
    bool ok = mkdir(dir, 0755) == 0 || errno == EEXIST;
    *p = c;
    if (!ok) return false;
    if (!c) break;
  }
  struct stat st;
  return stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Can a file be created in dir? (Also under root, where access(2) says
 * yes to a read-only directory on a read-only file system.) */
static bool writable(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/.probe-%ld", dir, (long)getpid());
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644); /* a stale probe of a reused pid is fine */
  if (fd < 0) return false;
  close(fd);
  unlink(path);
  return true;
}

/* Under dc_lock: reads the settings once. */
static void read_settings(void) {
  if (dc.read) return;
  dc.read = true;
  dc.on = false;
  dc.bytes = -1;
  dc.dir = cache_dir();
  if (!dc.dir) return; /* KILN_CACHE_DIR="" or no home: off, silently */
  errno = 0;
  if (!make_dirs(dc.dir)) {
    disable("cannot create", dc.dir);
    return;
  }
  if (!writable(dc.dir)) {
    disable("cannot write to", dc.dir);
    return;
  }
  dc.max_bytes = graph_env_int("KILN_CACHE_MAX_BYTES", 1, (int64_t)256 << 20, "bytes");
  dc.ident = identity();
  errno = 0;
  if (!dc.ident) {
    disable("cannot identify the host target", NULL);
    return;
  }
  dc.on = true;
}

bool rt_disk_cache_on(void) {
  pthread_mutex_lock(&dc_lock);
  read_settings();
  bool on = dc.on;
  pthread_mutex_unlock(&dc_lock);
  return on;
}

/* Under dc_lock: forget the settings (read again at the next use). */
static void forget(void) {
  free(dc.dir);
  free(dc.ident);
  memset(&dc, 0, sizeof dc);
}

void rt_disk_cache_reset(void) {
  pthread_mutex_lock(&dc_lock);
  forget();
  pthread_mutex_unlock(&dc_lock);
}

void rt_disk_cache_set_dir(const char *dir) {
  pthread_mutex_lock(&dc_lock);
  forget();
  free(dir_override);
  /* plain malloc: not an allocation the fault-injection walk counts */
  dir_override = dir ? malloc(strlen(dir) + 1) : NULL;
  if (dir_override) strcpy(dir_override, dir);
  pthread_mutex_unlock(&dc_lock);
}

/* ----------------------------------------------------------- entries */

/* What one lookup needs: the full key, the file's path, the symbol. */
typedef struct entry_name {
  unsigned char *key; /* full key, malloc'ed */
  size_t key_len;
  char path[4096];
  char sym[64];
} entry_name;

static bool name_entry(const unsigned char *key, size_t len, entry_name *e) {
  pthread_mutex_lock(&dc_lock);
  size_t id_len = dc.ident ? strlen(dc.ident) + 1 : 0;
  e->key = id_len ? malloc(len + id_len) : NULL;
  if (e->key) {
    memcpy(e->key, key, len);
    memcpy(e->key + len, dc.ident, id_len);
    e->key_len = len + id_len;
    char hex[33];
    snprintf(hex, sizeof hex, "%016llx%016llx", (unsigned long long)fnv1a(0xcbf29ce484222325ull, e->key, e->key_len),
             (unsigned long long)fnv1a_back(e->key, e->key_len));
    snprintf(e->path, sizeof e->path, "%s/%s.kc", dc.dir, hex);
    snprintf(e->sym, sizeof e->sym, "kiln_dc_%s", hex);
  }
  pthread_mutex_unlock(&dc_lock);
  return e->key != NULL;
}

static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static uint64_t checksum(const unsigned char *key, size_t key_len, const unsigned char *obj, size_t obj_len) {
  return fnv1a(fnv1a(0xcbf29ce484222325ull, key, key_len), obj, obj_len);
}

/* The whole file fd (size bytes) into a malloc'ed buffer, or NULL. */
static unsigned char *read_all(int fd, size_t size) {
  unsigned char *buf = malloc(size ? size : 1);
  size_t got = 0;
  while (buf && got < size) {
    ssize_t r = read(fd, buf + got, size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      free(buf);
      return NULL;
    }
    got += (size_t)r;
  }
  return buf;
}

/* Why the entry's bytes buf [size] are not e's entry, or NULL when they
 * are (then *obj, *obj_len point into buf). */
static const char *check_entry(const unsigned char *buf, size_t size, const entry_name *e, const unsigned char **obj,
                               size_t *obj_len) {
  if (size < HEADER || memcmp(buf, magic, sizeof magic) != 0) return "not a kernel entry";
  uint64_t key_len = get_u64(buf + 8), olen = get_u64(buf + 16);
  if (key_len > size || olen > size || HEADER + key_len + olen != size) return "truncated";
  if (key_len != e->key_len || memcmp(buf + HEADER, e->key, key_len) != 0) return "another kernel's or target's";
  if (checksum(buf + HEADER, key_len, buf + HEADER + key_len, olen) != get_u64(buf + 24)) return "bad checksum";
  *obj = buf + HEADER + key_len;
  *obj_len = (size_t)olen;
  return NULL;
}

/* A verified entry's object into llvm_load_object; true on success. The
 * file's mtime becomes now (least recently used = oldest mtime). */
static bool load_entry(const entry_name *e, llvm_kernel_fn *fn) {
  int fd = open(e->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  unsigned char *buf = fstat(fd, &st) == 0 && st.st_size >= 0 && st.st_size <= dc.max_bytes
                           ? read_all(fd, (size_t)st.st_size)
                           : NULL;
  const unsigned char *obj = NULL;
  size_t obj_len = 0;
  const char *bad = buf ? check_entry(buf, (size_t)st.st_size, e, &obj, &obj_len) : "unreadable";
  char err[256] = "";
  if (!bad && llvm_load_object(obj, obj_len, e->sym, fn, err, sizeof err) != KILN_OK) bad = err;
  if (!bad) futimens(fd, NULL);
  else if (rt_debug_level() >= 1) fprintf(stderr, "kiln: disk cache: %s ignored (%s); compiling\n", e->path, bad);
  close(fd);
  free(buf);
  return !bad;
}

/* ---------------------------------------------------------- eviction */

typedef struct dir_file {
  struct timespec mtime;
  off_t size;
  char name[72];
} dir_file;

static int older_first(const void *a, const void *b) {
  const struct timespec *x = &((const dir_file *)a)->mtime, *y = &((const dir_file *)b)->mtime;
  return x->tv_sec != y->tv_sec ? (x->tv_sec < y->tv_sec ? -1 : 1)
                                : (x->tv_nsec < y->tv_nsec ? -1 : x->tv_nsec > y->tv_nsec);
}

/* The cache's files in dir into *files (entries, and temporary files an
 * hour old, left by a process that died mid-write); their total size. */
static int64_t list_files(const char *dir, dir_file **files, size_t *n) {
  DIR *d = opendir(dir);
  int64_t total = 0;
  size_t cap = 0;
  *files = NULL;
  *n = 0;
  for (struct dirent *de; d && (de = readdir(d));) {
    size_t len = strlen(de->d_name);
    bool entry = len == 35 && strcmp(de->d_name + 32, ".kc") == 0, tmp = strncmp(de->d_name, ".tmp-", 5) == 0;
    struct stat st;
    if ((!entry && !tmp) || len >= sizeof (*files)->name || fstatat(dirfd(d), de->d_name, &st, 0) != 0) continue;
    if (tmp && st.st_mtime > time(NULL) - 3600) continue;
    if (*n == cap) {
      dir_file *more = realloc(*files, (cap = cap ? 2 * cap : 64) * sizeof **files);
      if (!more) break;
      *files = more;
    }
    dir_file *f = &(*files)[(*n)++];
    f->mtime = st.st_mtim;
    f->size = st.st_size;
    memcpy(f->name, de->d_name, len + 1);
    total += st.st_size;
  }
  if (d) closedir(d);
  return total;
}

/* Removes the least recently used files until the directory holds at
 * most max bytes; returns what it then holds. */
static int64_t evict(const char *dir, int64_t max) {
  dir_file *files;
  size_t n;
  int64_t total = list_files(dir, &files, &n);
  if (total > max) qsort(files, n, sizeof *files, older_first);
  for (size_t i = 0; i < n && total > max; i++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, files[i].name);
    if (unlink(path) == 0) total -= files[i].size;
  }
  free(files);
  return total;
}

/* After a write of `added` bytes: evicts when the directory may be over
 * the bound (scanned at this process's first write, then counted). */
static void account(int64_t added) {
  pthread_mutex_lock(&dc_lock);
  if (dc.bytes >= 0) dc.bytes += added;
  if (dc.bytes < 0 || dc.bytes > dc.max_bytes) dc.bytes = evict(dc.dir, dc.max_bytes);
  pthread_mutex_unlock(&dc_lock);
}

/* ------------------------------------------------------------ writes */

/* Writes e's entry (object obj [obj_len]) atomically: temporary file,
 * then rename over any old entry. */
static void store_entry(const entry_name *e, const void *obj, size_t obj_len) {
  size_t size = HEADER + e->key_len + obj_len;
  if ((int64_t)size > dc.max_bytes) return;
  unsigned char *buf = malloc(size);
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%.*s.tmp-%ld-%llu", (int)(strrchr(e->path, '/') + 1 - e->path), e->path,
           (long)getpid(), (unsigned long long)atomic_fetch_add(&tmp_counter, 1));
  int fd = buf ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644) : -1;
  bool ok = fd >= 0;
  if (ok) {
    memcpy(buf, magic, sizeof magic);
    put_u64(buf + 8, e->key_len);
    put_u64(buf + 16, obj_len);
    put_u64(buf + 24, checksum(e->key, e->key_len, obj, obj_len));
    memcpy(buf + HEADER, e->key, e->key_len);
    memcpy(buf + HEADER + e->key_len, obj, obj_len);
    ok = graph_write_all(fd, buf, size);
    ok = close(fd) == 0 && ok;
    ok = ok && rename(tmp, e->path) == 0;
  }
  int why = errno;
  if (!ok && fd >= 0) unlink(tmp);
  if (!ok && rt_debug_level() >= 1)
    fprintf(stderr, "kiln: disk cache: cannot write %s: %s\n", e->path, buf ? strerror(why) : "out of memory");
  free(buf);
  if (ok) account((int64_t)size);
}

/* ------------------------------------------------------------ kernels */

/* Compiles the code of a missed entry under symbol sym, with a copy of
 * its object file for the entry. */
typedef int (*compile_fn)(void *ctx, const char *sym, llvm_kernel_fn *fn, void **obj, size_t *obj_len, char *err,
                          size_t errlen);

/* The code stored under key [len] (loaded: *loaded), else compiled by
 * compile and stored; compiled without storing when the entry cannot be
 * named. */
static int disk_code(const unsigned char *key, size_t len, compile_fn compile, void *ctx, llvm_kernel_fn *fn,
                     bool *loaded, char *err, size_t errlen) {
  entry_name e;
  *loaded = false;
  if (!name_entry(key, len, &e)) return compile(ctx, NULL, fn, NULL, NULL, err, errlen);
  if (load_entry(&e, fn)) {
    *loaded = true;
    free(e.key);
    return KILN_OK;
  }
  void *obj = NULL;
  size_t obj_len = 0;
  int st = compile(ctx, e.sym, fn, &obj, &obj_len, err, errlen);
  if (st == KILN_OK) store_entry(&e, obj, obj_len);
  free(obj);
  free(e.key);
  return st;
}

typedef struct kernel_job {
  const kir_kernel *k;
  char **ir_text;
} kernel_job;

static int compile_kernel(void *ctx, const char *sym, llvm_kernel_fn *fn, void **obj, size_t *obj_len, char *err,
                          size_t errlen) {
  const kernel_job *j = ctx;
  return sym ? llvm_compile_object(j->k, sym, fn, j->ir_text, obj, obj_len, err, errlen)
             : llvm_compile(j->k, fn, j->ir_text, err, errlen);
}

int rt_disk_kernel(const kir_kernel *k, const unsigned char *key, size_t len, llvm_kernel_fn *fn, int64_t *load_ns,
                   char **ir_text, char *err, size_t errlen) {
  kernel_job j = {k, ir_text};
  bool loaded;
  int64_t t0 = rt_now_ns();
  int st = disk_code(key, len, compile_kernel, &j, fn, &loaded, err, errlen);
  *load_ns = loaded ? rt_now_ns() - t0 : 0;
  if (loaded && *load_ns <= 0) *load_ns = 1;
  return st;
}

/* ---------------------------------------------------- GEMM micro-kernels */

static int compile_gemm(void *ctx, const char *sym, llvm_kernel_fn *fn, void **obj, size_t *obj_len, char *err,
                        size_t errlen) {
  llvm_gemm_fn g = NULL;
  int st = llvm_gemm_compile(ctx, sym, &g, obj, obj_len, err, errlen);
  if (st == KILN_OK) memcpy(fn, &g, sizeof g); /* one function pointer type to another, as bytes */
  return st;
}

int rt_disk_gemm(const llvm_gemm_spec *s, llvm_gemm_fn *out, bool *compiled, char *err, size_t errlen) {
  if (!rt_disk_cache_on()) {
    *compiled = true;
    return llvm_gemm_compile(s, NULL, out, NULL, NULL, err, errlen);
  }
  unsigned char key[LLVM_GEMM_KEY_MAX];
  size_t len = llvm_gemm_key(s, key);
  llvm_kernel_fn fn = NULL;
  bool loaded;
  int st = disk_code(key, len, compile_gemm, (void *)s, &fn, &loaded, err, errlen);
  if (st == KILN_OK) memcpy(out, &fn, sizeof fn);
  *compiled = !loaded;
  return st;
}
