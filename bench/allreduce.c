/*
 * allreduce.c — kiln_bench_allreduce: the bus bandwidth of Kiln's
 * all-reduce beside a plain MPI_Allreduce on the same buffers, for F32
 * messages of 4 KiB to 64 MiB (docs/distributed.md). Run under mpirun:
 *
 *   mpirun -n 2 --oversubscribe --mca btl self,vader build/bench/kiln_bench_allreduce [--quick]
 *
 * Bus bandwidth (GB/s, 10^9 bytes) = bytes * 2 (P - 1) / P / time, the
 * convention of nccl-tests: what each rank's link moves in a ring
 * all-reduce, so figures compare across rank counts. Columns: MPI_SUM is
 * MPI_Allreduce itself; kiln SUM is kiln_all_reduce(SUM) forced (an
 * alltoall of blocks, a rank-order sum of each rank's block, an allgather:
 * bit-identical on every rank); kiln
 * MAX goes through MPI_Allreduce (Kiln's overhead alone: the node, the
 * agreement exchange). Rank 0 prints. Each iteration runs the three
 * after a barrier, interleaved; a figure is the median over iterations
 * of the slowest rank's time, so a burst of load from elsewhere (two
 * ranks busy-polling on two cores are sensitive to it) moves it little.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"

static int iterations(int64_t bytes, bool quick) {
  int64_t it = (quick ? 8 : 64) * (1 << 20) / (bytes > 0 ? bytes : 1);
  return (int)(it < 3 ? 3 : it > 200 ? 200 : it);
}

/* One timed run of each variant: after a barrier, so every rank starts
 * together. */
static double run_mpi(const float *in, float *out, int64_t n) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return MPI_Wtime() - t0;
}

static double run_kiln(kiln_tensor *x, kiln_reduce_op op, kiln_group *g) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  kiln_tensor *y = kiln_all_reduce(x, op, g);
  if (kiln_realize(y) != KILN_OK) fprintf(stderr, "kiln_bench_allreduce: %s\n", kiln_last_error());
  kiln_release(y);
  return MPI_Wtime() - t0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median over iterations of the slowest rank's time (t [iters] is
 * this rank's; overwritten). */
static double median_of_slowest(double *t, int iters) {
  MPI_Allreduce(MPI_IN_PLACE, t, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  qsort(t, (size_t)iters, sizeof *t, cmp_double);
  return t[iters / 2];
}

/* Times MPI_Allreduce, Kiln SUM and Kiln MAX on x's data, interleaved
 * (iteration i runs all three), so that load from other processes falls
 * on all three alike; median of each. */
static void time_all(kiln_tensor *x, const float *in, float *out, int64_t n, kiln_group *g, int iters,
                     double sec[3]) {
  double *t = malloc(sizeof *t * 3 * (size_t)iters);
  run_mpi(in, out, n); /* warm up: first touches, the schedule cache */
  run_kiln(x, KILN_REDUCE_SUM, g);
  run_kiln(x, KILN_REDUCE_MAX, g);
  for (int i = 0; i < iters; i++) {
    t[i] = run_mpi(in, out, n);
    t[iters + i] = run_kiln(x, KILN_REDUCE_SUM, g);
    t[2 * iters + i] = run_kiln(x, KILN_REDUCE_MAX, g);
  }
  for (int k = 0; k < 3; k++) sec[k] = median_of_slowest(t + k * iters, iters);
  free(t);
}

int main(int argc, char **argv) {
  bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  kiln_group *world;
  if (kiln_dist_init("mpi", &world) != KILN_OK) {
    fprintf(stderr, "kiln_bench_allreduce: %s\n", kiln_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int64_t max_bytes = quick ? 256 << 10 : 64 << 20;
  float *in = malloc((size_t)max_bytes), *out = malloc((size_t)max_bytes);
  for (int64_t i = 0; i < max_bytes / 4; i++) in[i] = (float)((i + rank) % 7);
  if (rank == 0) {
    printf("all-reduce bus bandwidth, %d ranks, F32 (GB/s = bytes * 2(P-1)/P / time)\n", size);
    printf("%10s %6s %12s %12s %12s %10s %10s %10s %8s %8s\n", "bytes", "iters", "MPI_SUM us", "kiln SUM us",
           "kiln MAX us", "MPI GB/s", "SUM GB/s", "MAX GB/s", "SUM/MPI", "MAX/MPI");
  }
  for (int64_t bytes = 4 << 10; bytes <= max_bytes; bytes *= 4) {
    int64_t n = bytes / 4;
    int iters = iterations(bytes, quick);
    kiln_tensor *x = kiln_from_data(KILN_F32, 1, &n, in);
    kiln_realize(x);
    double sec[3];
    time_all(x, in, out, n, world, iters, sec);
    double tm = sec[0], ts = sec[1], tx = sec[2];
    kiln_release(x);
    double bus = (double)bytes * 2.0 * (size - 1) / size / 1e9;
    if (rank == 0)
      printf("%10lld %6d %12.1f %12.1f %12.1f %10.2f %10.2f %10.2f %8.2f %8.2f\n", (long long)bytes, iters, tm * 1e6,
             ts * 1e6, tx * 1e6, bus / tm, bus / ts, bus / tx, ts / tm, tx / tm);
  }
  free(in);
  free(out);
  kiln_dist_finalize(); /* the program started MPI: Kiln leaves it running */
  MPI_Finalize();
  return 0;
}
