/*
 * kiln_mpi.c — libkiln_mpi.so, the MPI plugin: the only code compiled
 * against mpi.h. libkiln dlopens it at run time (runtime/dist.c), so one
 * libkiln serves machines with and without MPI (docs/distributed.md).
 *
 * The plugin exports one table, kiln_mpi_plugin_v1 (runtime/dist_plugin.h).
 * Every data movement is a nonblocking MPI call completed by polling
 * MPI_Test until a deadline: a collective that does not complete within
 * the timeout prints which collective, on which rank, it waited for, and
 * calls MPI_Abort on the communicator (the job ends; MPI 4.1 cannot
 * recover a communicator with a lost peer). Communicators use
 * MPI_ERRORS_RETURN, so an MPI error is a status, not an abort.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdint.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../dist_plugin.h"

static MPI_Datatype mpi_type(int dt) {
  switch (dt) {
    case RT_MPI_I8: return MPI_INT8_T;
    case RT_MPI_U8: return MPI_UINT8_T;
    case RT_MPI_I16: return MPI_INT16_T;
    case RT_MPI_I32: return MPI_INT32_T;
    case RT_MPI_I64: return MPI_INT64_T;
    case RT_MPI_F32: return MPI_FLOAT;
    case RT_MPI_F64: return MPI_DOUBLE;
    default: return MPI_BYTE;
  }
}

static MPI_Op mpi_op(int op) {
  switch (op) {
    case RT_MPI_MAX: return MPI_MAX;
    case RT_MPI_MIN: return MPI_MIN;
    case RT_MPI_PROD: return MPI_PROD;
    default: return MPI_SUM;
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void mpi_message(int code, char *err, size_t len) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(code, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", code);
  snprintf(err, len, "%s", s);
}

/* Completes *req by polling until timeout_s seconds have passed; then
 * reports `what` and aborts the job (the documented exception to "Kiln
 * never aborts": a peer that never arrives cannot be recovered). */
static int wait_deadline(MPI_Comm comm, MPI_Request *req, MPI_Status *status, double timeout_s, const char *what,
                         char *err, size_t len) {
  double start = now_s(), deadline = start + timeout_s;
  struct timespec nap = {0, 20000}; /* after the first ms: 20 us, growing to 1 ms */
  for (;;) {
    int done = 0, rc = MPI_Test(req, &done, status);
    if (rc != MPI_SUCCESS) {
      mpi_message(rc, err, len);
      return -1;
    }
    if (done) return 0;
    if (now_s() > deadline) {
      int rank = -1, size = 0;
      MPI_Comm_rank(comm, &rank);
      MPI_Comm_size(comm, &size);
      fprintf(stderr,
              "kiln: %s did not complete within KILN_DIST_TIMEOUT=%g s on rank %d of %d (a peer is slow, gone, "
              "or issued a different collective); aborting the job with MPI_Abort\n",
              what, timeout_s, rank, size);
      fflush(stderr);
      MPI_Abort(comm, 3);
    }
    if (now_s() - start < 1e-3) { /* the first ms: poll, yielding the core to a peer rank that shares it */
      sched_yield();
      continue;
    }
    nanosleep(&nap, NULL);
    if (nap.tv_nsec < 1000000) nap.tv_nsec *= 2;
  }
}

/* MPI was initialized here (not by the program, before Kiln): finalize
 * ends it then, and only then. */
static int initialized_here;

static int km_init(int *rank, int *size, void **world, char *err, size_t len) {
  int inited = 0, provided = 0;
  MPI_Initialized(&inited);
  if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    snprintf(err, len, "MPI_Init_thread failed");
    return -1;
  }
  initialized_here = !inited;
  MPI_Comm *c = malloc(sizeof *c);
  if (!c) return -1;
  MPI_Comm_dup(MPI_COMM_WORLD, c);
  MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
  MPI_Comm_rank(*c, rank);
  MPI_Comm_size(*c, size);
  *world = c;
  return 0;
}

static int km_finalize(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  return fin || !initialized_here ? 0 : MPI_Finalize();
}

static int km_split(void *comm, int color, int key, void **out, int *rank, int *size, char *err, size_t len) {
  MPI_Comm *c = malloc(sizeof *c);
  if (!c) return -1;
  int rc = MPI_Comm_split(*(MPI_Comm *)comm, color < 0 ? MPI_UNDEFINED : color, key, c);
  if (rc != MPI_SUCCESS) {
    mpi_message(rc, err, len);
    free(c);
    return -1;
  }
  if (*c == MPI_COMM_NULL) {
    free(c);
    *out = NULL;
    return 0;
  }
  MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
  MPI_Comm_rank(*c, rank);
  MPI_Comm_size(*c, size);
  *out = c;
  return 0;
}

static void km_free(void *comm) {
  if (!comm) return;
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Comm_free((MPI_Comm *)comm);
  free(comm);
}

/* Starts a request with `start`'s return code, then waits for it. */
#define RUN(call)                                                      \
  do {                                                                 \
    MPI_Request req;                                                   \
    MPI_Status st;                                                     \
    int rc_ = (call);                                                  \
    if (rc_ != MPI_SUCCESS) {                                          \
      mpi_message(rc_, err, len);                                      \
      return -1;                                                       \
    }                                                                  \
    return wait_deadline(c, &req, &st, timeout, what, err, len);       \
  } while (0)

static int km_allreduce(void *comm, const void *in, void *out, int count, int dt, int op, double timeout,
                        const char *what, char *err, size_t len) {
  MPI_Comm c = *(MPI_Comm *)comm;
  RUN(MPI_Iallreduce(in, out, count, mpi_type(dt), mpi_op(op), c, &req));
}

static int km_allgather(void *comm, const void *in, void *out, int bytes, double timeout, const char *what,
                        char *err, size_t len) {
  MPI_Comm c = *(MPI_Comm *)comm;
  RUN(MPI_Iallgather(in, bytes, MPI_BYTE, out, bytes, MPI_BYTE, c, &req));
}

static int km_alltoall(void *comm, const void *in, void *out, int bytes, double timeout, const char *what,
                       char *err, size_t len) {
  MPI_Comm c = *(MPI_Comm *)comm;
  RUN(MPI_Ialltoall(in, bytes, MPI_BYTE, out, bytes, MPI_BYTE, c, &req));
}

static int km_reduce_scatter(void *comm, const void *in, void *out, int count, int dt, int op, double timeout,
                             const char *what, char *err, size_t len) {
  MPI_Comm c = *(MPI_Comm *)comm;
  RUN(MPI_Ireduce_scatter_block(in, out, count, mpi_type(dt), mpi_op(op), c, &req));
}

static int km_bcast(void *comm, void *buf, int bytes, int root, double timeout, const char *what, char *err,
                    size_t len) {
  MPI_Comm c = *(MPI_Comm *)comm;
  RUN(MPI_Ibcast(buf, bytes, MPI_BYTE, root, c, &req));
}

static int km_send(void *comm, const void *buf, int bytes, int dst, int tag, double timeout, const char *what,
                   char *err, size_t len) {
  MPI_Comm c = *(MPI_Comm *)comm;
  RUN(MPI_Isend(buf, bytes, MPI_BYTE, dst, tag, c, &req));
}

/* Receives exactly `bytes`: a longer message is MPI's truncation error, a
 * shorter one is reported with its size (*got). */
static int km_recv(void *comm, void *buf, int bytes, int src, int tag, int *got, double timeout, const char *what,
                   char *err, size_t len) {
  MPI_Comm c = *(MPI_Comm *)comm;
  MPI_Request req;
  MPI_Status st;
  int rc = MPI_Irecv(buf, bytes, MPI_BYTE, src, tag, c, &req);
  if (rc != MPI_SUCCESS) {
    mpi_message(rc, err, len);
    return -1;
  }
  if (wait_deadline(c, &req, &st, timeout, what, err, len) != 0) return -1;
  MPI_Get_count(&st, MPI_BYTE, got);
  return 0;
}

static void km_abort(void *comm, int code) { MPI_Abort(comm ? *(MPI_Comm *)comm : MPI_COMM_WORLD, code); }

KILN_MPI_EXPORT const rt_mpi_plugin kiln_mpi_plugin_v1 = {
    .version = RT_MPI_PLUGIN_VERSION,
    .init = km_init,
    .finalize = km_finalize,
    .split = km_split,
    .free = km_free,
    .allreduce = km_allreduce,
    .allgather = km_allgather,
    .reduce_scatter = km_reduce_scatter,
    .bcast = km_bcast,
    .send = km_send,
    .recv = km_recv,
    .abort = km_abort,
    .alltoall = km_alltoall,
};
