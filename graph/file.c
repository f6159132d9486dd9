/*
 * file.c — small POSIX file helpers shared by the layers that write files
 * (runtime/disk_cache.c, codegen_cuda/cuda_check.c).
 */
#include <errno.h>
#include <unistd.h>

#include "graph.h"

bool graph_write_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}
