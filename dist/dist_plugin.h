/*
 * dist_plugin.h — the table libkiln_mpi.so (dist/mpi/kiln_mpi.c)
 * exports as `kiln_mpi_plugin_v1` and dist/collectives_run.c loads with dlsym.
 * Plain C types only: libkiln never includes mpi.h. Communicators are
 * opaque pointers (an MPI_Comm the plugin allocated). Counts are int (MPI's
 * count type): callers check that sizes fit. Every data call blocks until
 * done or until timeout_s seconds have passed, then reports `what` on
 * stderr and aborts the job (MPI_Abort). Returns 0, or -1 with the MPI
 * error's text in err.
 */
#ifndef KILN_DIST_PLUGIN_H
#define KILN_DIST_PLUGIN_H

#include <stddef.h>
#include <stdlib.h>

#define DIST_MPI_PLUGIN_VERSION 2

/* Element types of the reducing calls. */
enum { DIST_MPI_I8, DIST_MPI_U8, DIST_MPI_I16, DIST_MPI_I32, DIST_MPI_I64, DIST_MPI_F32, DIST_MPI_F64 };
/* Reductions. */
enum { DIST_MPI_SUM, DIST_MPI_MAX, DIST_MPI_MIN, DIST_MPI_PROD };

#define KILN_MPI_EXPORT __attribute__((visibility("default")))

typedef struct dist_mpi_plugin {
  int version; /* DIST_MPI_PLUGIN_VERSION */
  /* MPI_Init_thread (unless already initialized); *world: a duplicate of
   * MPI_COMM_WORLD. */
  int (*init)(int *rank, int *size, void **world, char *err, size_t len);
  /* MPI_Finalize, when init started MPI (a program that initialized MPI
   * itself finalizes it) */
  int (*finalize)(void);
  /* MPI_Comm_split; color < 0: this rank joins no group (*out NULL). */
  int (*split)(void *comm, int color, int key, void **out, int *rank, int *size, char *err, size_t len);
  void (*free)(void *comm);
  int (*allreduce)(void *comm, const void *in, void *out, int count, int dt, int op, double timeout_s,
                   const char *what, char *err, size_t len);
  /* every rank contributes `bytes`; out holds size * bytes, in rank order.
   * in NULL: in place (MPI_IN_PLACE), this rank's block already at
   * out + rank * bytes */
  int (*allgather)(void *comm, const void *in, void *out, int bytes, double timeout_s, const char *what, char *err,
                   size_t len);
  /* in: size * count elements; out: this rank's reduced block of count */
  int (*reduce_scatter)(void *comm, const void *in, void *out, int count, int dt, int op, double timeout_s,
                        const char *what, char *err, size_t len);
  int (*bcast)(void *comm, void *buf, int bytes, int root, double timeout_s, const char *what, char *err,
               size_t len);
  int (*send)(void *comm, const void *buf, int bytes, int dst, int tag, double timeout_s, const char *what,
              char *err, size_t len);
  /* *got: the bytes the message held (≤ bytes; more is an MPI error) */
  int (*recv)(void *comm, void *buf, int bytes, int src, int tag, int *got, double timeout_s, const char *what,
              char *err, size_t len);
  void (*abort)(void *comm, int code);
  /* every rank sends block k (`bytes` at in + k * bytes) to rank k; out
   * holds the blocks received, in rank order (size * bytes) */
  int (*alltoall)(void *comm, const void *in, void *out, int bytes, double timeout_s, const char *what, char *err,
                  size_t len);
} dist_mpi_plugin;

#endif /* KILN_DIST_PLUGIN_H */
