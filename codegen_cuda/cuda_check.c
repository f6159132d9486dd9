/*
 * cuda_check.c — confirms that the CUDA toolchain accepts a kernel's
 * generated code, on machines with a toolkit but no GPU: print the
 * kernel (cuda_print.c), compile it with NVRTC (cuda_nvrtc.c) and, for a
 * PTX target, assemble the PTX with ptxas for the matching sm_XX.
 *
 * ptxas runs as a child process (posix_spawn, no shell): the PTX goes to a
 * temporary file under $TMPDIR (default /tmp), its output to another, and
 * both are removed afterwards. The ptxas used is
 * /usr/local/cuda/bin/ptxas when present, else `ptxas` on PATH.
 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_backend.h"
#include "graph.h"

extern char **environ;

/* A temporary file "<dir>/kiln_<what>_XXXXXX<suffix>"; fd or -1. */
static int temp_file(char *path, size_t len, const char *what, const char *suffix) {
  const char *dir = getenv("TMPDIR");
  snprintf(path, len, "%s/kiln_%s_XXXXXX%s", dir && *dir ? dir : "/tmp", what, suffix);
  return mkstemps(path, (int)strlen(suffix));
}

/* Up to len-1 bytes of the file at fd (from its start) into buf. */
static void read_back(int fd, char *buf, size_t len) {
  ssize_t n = pread(fd, buf, len - 1, 0);
  buf[n > 0 ? n : 0] = 0;
}

/* Runs ptxas for `sm` (e.g. "sm_90") on the PTX text; KILN_OK when it
 * accepts it, else KILN_ERR_COMPILE (or KILN_ERR_DEVICE when ptxas cannot
 * be run) with its output in err. */
static int run_ptxas(const char *ptx, size_t len, const char *sm, const char *name, char *err, size_t errlen) {
  char ptx_path[512], log_path[512];
  int ptx_fd = temp_file(ptx_path, sizeof ptx_path, "ptx", ".ptx");
  int log_fd = ptx_fd >= 0 ? temp_file(log_path, sizeof log_path, "ptxas", ".log") : -1;
  if (ptx_fd < 0 || log_fd < 0) {
    snprintf(err, errlen, "ptxas check of %s: cannot create a temporary file: %s", name, strerror(errno));
    if (ptx_fd >= 0) close(ptx_fd), unlink(ptx_path);
    return KILN_ERR_IO;
  }
  while (len > 0 && ptx[len - 1] == 0) len--; /* NVRTC's PTX size counts the NUL */
  int st = KILN_OK;
  if (!graph_write_all(ptx_fd, ptx, len)) {
    snprintf(err, errlen, "ptxas check of %s: cannot write %s: %s", name, ptx_path, strerror(errno));
    st = KILN_ERR_IO;
  }
  const char *ptxas = access("/usr/local/cuda/bin/ptxas", X_OK) == 0 ? "/usr/local/cuda/bin/ptxas" : "ptxas";
  char arch_opt[48];
  snprintf(arch_opt, sizeof arch_opt, "-arch=%s", sm);
  char *argv[] = {(char *)ptxas, arch_opt, "-o", "/dev/null", ptx_path, NULL};
  posix_spawn_file_actions_t fa;
  pid_t pid = 0;
  int rc = -1;
  if (st == KILN_OK && posix_spawn_file_actions_init(&fa) == 0) {
    posix_spawn_file_actions_adddup2(&fa, log_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
    rc = posix_spawnp(&pid, ptxas, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      snprintf(err, errlen, "ptxas check of %s: cannot run %s: %s", name, ptxas, strerror(rc));
      st = KILN_ERR_DEVICE;
    }
  }
  if (st == KILN_OK) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      char log[1024];
      read_back(log_fd, log, sizeof log);
      int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      /* 127: the child could not exec ptxas (posix_spawnp may report it this way) */
      st = code == 127 ? KILN_ERR_DEVICE : KILN_ERR_COMPILE;
      snprintf(err, errlen, "ptxas %s rejected the PTX of %s (exit %d):\n%s", arch_opt, name, code, log);
    }
  }
  close(ptx_fd);
  close(log_fd);
  unlink(ptx_path);
  unlink(log_path);
  return st;
}

int cuda_check_source(const char *src, const char *name, const char *arch, char *err, size_t errlen) {
  char *img = NULL;
  size_t len = 0;
  char file[112];
  snprintf(file, sizeof file, "%s.cu", name);
  int st = cuda_nvrtc_compile(src, file, arch, &img, &len, err, errlen);
  if (st == KILN_OK && strncmp(arch, "compute_", 8) == 0) {
    char sm[40];
    snprintf(sm, sizeof sm, "sm_%s", arch + 8);
    st = run_ptxas(img, len, sm, name, err, errlen);
  }
  free(img);
  return st;
}

int cuda_check_kernel(const kir_kernel *k, const char *arch, char *err, size_t errlen) {
  char *src = NULL;
  int st = cuda_print_kernel(k, NULL, &src, err, errlen);
  if (st == KILN_OK) st = cuda_check_source(src, k->name, arch, err, errlen);
  free(src);
  return st;
}
