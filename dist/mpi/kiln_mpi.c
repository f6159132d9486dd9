/*
 * kiln_mpi.c — libkiln_mpi.so, the MPI plugin: the only code compiled
 * against mpi.h. libkiln dlopens it at run time (dist/collectives_run.c), so one
 * libkiln serves machines with and without MPI (docs/distributed.md).
 *
 * The plugin exports one table, kiln_mpi_plugin_v1 (dist/dist_plugin.h).
 * Every data movement is MPI's blocking call under a deadline kept by a
 * watchdog thread: a collective that does not complete within the
 * timeout prints which collective, on which rank, it waited for, and
 * calls MPI_Abort on the communicator (the job ends; MPI 4.1 cannot
 * recover a communicator with a lost peer). Communicators use
 * MPI_ERRORS_RETURN, so an MPI error is a status, not an abort.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../dist_plugin.h"

static MPI_Datatype mpi_type(int dt) {
  switch (dt) {
    case DIST_MPI_I8: return MPI_INT8_T;
    case DIST_MPI_U8: return MPI_UINT8_T;
    case DIST_MPI_I16: return MPI_INT16_T;
    case DIST_MPI_I32: return MPI_INT32_T;
    case DIST_MPI_I64: return MPI_INT64_T;
    case DIST_MPI_F32: return MPI_FLOAT;
    case DIST_MPI_F64: return MPI_DOUBLE;
    default: return MPI_BYTE;
  }
}

static MPI_Op mpi_op(int op) {
  switch (op) {
    case DIST_MPI_MAX: return MPI_MAX;
    case DIST_MPI_MIN: return MPI_MIN;
    case DIST_MPI_PROD: return MPI_PROD;
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

/* ------------------------------------------------------------ watchdog
 * Every data call is MPI's blocking one (Open MPI's tuned collectives:
 * its nonblocking ones, libnbc, run other, slower algorithms; see the
 * kiln MAX column of bench/allreduce.c and docs/distributed.md). A watchdog thread enforces the deadline:
 * before a call, the calling thread publishes what it waits for and when
 * it must end; the watchdog wakes every WATCH_NS, and when a call is past
 * its deadline it reports it and aborts the job (the documented
 * exception to "Kiln never aborts": a peer that never arrives cannot be
 * recovered on MPI 4.1). A call costs two atomic stores, no syscall. */
#define WATCH_NS 50000000L /* 50 ms */

static struct {
  pthread_once_t once;
  bool running;
  _Atomic double deadline; /* 0: no call in flight */
  _Atomic(MPI_Comm *) comm;
  double timeout_s;
  int rank, size;
  char what[192];
} watch = {.once = PTHREAD_ONCE_INIT};

/* Runs on the watchdog thread while the calling thread blocks in MPI,
 * and makes one MPI call: MPI_Abort. The MPI standard only promises that
 * from the thread level MPI_THREAD_MULTIPLE; Open MPI's MPI_Abort has the
 * runtime kill the job from any thread, which the hang test
 * (tests/run_mpi.sh hang) checks. */
static void report_and_abort(MPI_Comm c) {
  fprintf(stderr,
          "kiln: %s did not complete within KILN_DIST_TIMEOUT=%g s on rank %d of %d (a peer is slow, gone, "
          "or issued a different collective); aborting the job with MPI_Abort\n",
          watch.what, watch.timeout_s, watch.rank, watch.size);
  fflush(stderr);
  MPI_Abort(c, 3);
}

static void *watchdog(void *arg) {
  (void)arg;
  struct timespec nap = {0, WATCH_NS};
  for (;;) {
    nanosleep(&nap, NULL);
    double d = atomic_load(&watch.deadline);
    if (d > 0 && now_s() > d) report_and_abort(*atomic_load(&watch.comm));
  }
  return NULL;
}

static void start_watchdog(void) {
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  watch.running = pthread_create(&t, &a, watchdog, NULL) == 0;
  pthread_attr_destroy(&a);
}

/* Publishes the call about to block (timeout_s from now). Without a
 * watchdog thread (it could not start), calls block without a deadline. */
static void watch_begin(MPI_Comm *c, double timeout_s, const char *what) {
  pthread_once(&watch.once, start_watchdog);
  if (!watch.running) return;
  snprintf(watch.what, sizeof watch.what, "%s", what);
  watch.timeout_s = timeout_s;
  MPI_Comm_rank(*c, &watch.rank);
  MPI_Comm_size(*c, &watch.size);
  atomic_store(&watch.comm, c);
  atomic_store(&watch.deadline, now_s() + timeout_s);
}

static void watch_end(void) { atomic_store(&watch.deadline, 0.0); }

/* Runs one blocking MPI call under the watchdog; an MPI error is -1 with
 * its text in err. */
#define RUN(call)                                  \
  do {                                             \
    watch_begin(c, timeout, what);                 \
    int rc_ = (call);                              \
    watch_end();                                   \
    if (rc_ == MPI_SUCCESS) return 0;              \
    mpi_message(rc_, err, len);                    \
    return -1;                                     \
  } while (0)

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

static int km_allreduce(void *comm, const void *in, void *out, int count, int dt, int op, double timeout,
                        const char *what, char *err, size_t len) {
  MPI_Comm *c = comm;
  RUN(MPI_Allreduce(in, out, count, mpi_type(dt), mpi_op(op), *c));
}

static int km_allgather(void *comm, const void *in, void *out, int bytes, double timeout, const char *what,
                        char *err, size_t len) {
  MPI_Comm *c = comm;
  RUN(MPI_Allgather(in ? in : MPI_IN_PLACE, bytes, MPI_BYTE, out, bytes, MPI_BYTE, *c));
}

static int km_alltoall(void *comm, const void *in, void *out, int bytes, double timeout, const char *what,
                       char *err, size_t len) {
  MPI_Comm *c = comm;
  RUN(MPI_Alltoall(in, bytes, MPI_BYTE, out, bytes, MPI_BYTE, *c));
}

static int km_reduce_scatter(void *comm, const void *in, void *out, int count, int dt, int op, double timeout,
                             const char *what, char *err, size_t len) {
  MPI_Comm *c = comm;
  RUN(MPI_Reduce_scatter_block(in, out, count, mpi_type(dt), mpi_op(op), *c));
}

static int km_bcast(void *comm, void *buf, int bytes, int root, double timeout, const char *what, char *err,
                    size_t len) {
  MPI_Comm *c = comm;
  RUN(MPI_Bcast(buf, bytes, MPI_BYTE, root, *c));
}

static int km_send(void *comm, const void *buf, int bytes, int dst, int tag, double timeout, const char *what,
                   char *err, size_t len) {
  MPI_Comm *c = comm;
  RUN(MPI_Send(buf, bytes, MPI_BYTE, dst, tag, *c));
}

/* Receives exactly `bytes`: a longer message is MPI's truncation error, a
 * shorter one is reported with its size (*got). */
static int km_recv(void *comm, void *buf, int bytes, int src, int tag, int *got, double timeout, const char *what,
                   char *err, size_t len) {
  MPI_Comm *c = comm;
  MPI_Status st;
  watch_begin(c, timeout, what);
  int rc = MPI_Recv(buf, bytes, MPI_BYTE, src, tag, *c, &st);
  watch_end();
  if (rc != MPI_SUCCESS) {
    mpi_message(rc, err, len);
    return -1;
  }
  MPI_Get_count(&st, MPI_BYTE, got);
  return 0;
}

static void km_abort(void *comm, int code) { MPI_Abort(comm ? *(MPI_Comm *)comm : MPI_COMM_WORLD, code); }

KILN_MPI_EXPORT const dist_mpi_plugin kiln_mpi_plugin_v1 = {
    .version = DIST_MPI_PLUGIN_VERSION,
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
