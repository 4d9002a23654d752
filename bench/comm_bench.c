/* bench/comm_bench.c — bus bandwidth of shardrt's collectives next to OpenMPI's, same run.
 *
 *   mpirun --allow-run-as-root --oversubscribe --mca pml ob1 -np N comm_bench [max_bytes [min_bytes [ops]]]
 *
 * ops: a comma list of all_reduce, reduce_scatter, all_gather (default all three).
 *
 * For each size (1 KiB .. max, x4) and op it times shardrt (libfabric ring) and the
 * matching MPI call (MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather) on the
 * same buffers, fp32 sum. The two alternate over COMM_BENCH_ROUNDS (default 5) rounds of
 * ~40 ms; time = the slowest rank's mean over a round, best round of each.
 * Bus bandwidth (NCCL's convention): all-reduce 2(n-1)/n * S / t, reduce-scatter and
 * all-gather (n-1)/n * S / t, S = the full buffer in bytes.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

enum { OP_AR, OP_RS, OP_AG, NOPS };
static const char *const op_names[NOPS] = {"all_reduce", "reduce_scatter", "all_gather"};

static void run_once(int op, bool mpi, RtGroup *g, float *a, float *b, size_t count, int n) {
  size_t per = count / (size_t)n;
  if (mpi) {
    if (op == OP_AR) MPI_Allreduce(MPI_IN_PLACE, a, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (op == OP_RS) MPI_Reduce_scatter_block(a, b, (int)per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (op == OP_AG) MPI_Allgather(a, (int)per, MPI_FLOAT, b, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
  } else {
    if (op == OP_AR) rt_all_reduce(g, a, a, count, RT_F32, RT_SUM);
    if (op == OP_RS) rt_reduce_scatter(g, a, b, count, RT_F32, RT_SUM);
    if (op == OP_AG) rt_all_gather(g, a, b, count, RT_F32);
  }
}

/* Seconds per call of `iters` back-to-back calls, slowest rank. */
static double time_iters(int op, bool mpi, RtGroup *g, float *a, float *b, size_t count, int n, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; i++) run_once(op, mpi, g, a, b, count, n);
  double t = (MPI_Wtime() - t0) / iters;
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return t;
}

/* Iterations for about `secs` seconds of one implementation (at least 2, at most 2000). */
static int calibrate(int op, bool mpi, RtGroup *g, float *a, float *b, size_t count, int n, double secs) {
  run_once(op, mpi, g, a, b, count, n); /* warm-up */
  double one = time_iters(op, mpi, g, a, b, count, n, 1);
  int iters = one > 0 ? (int)(secs / one) : 2000;
  return iters < 2 ? 2 : iters > 2000 ? 2000 : iters;
}

/* The machine is shared: shardrt and MPI alternate over `rounds` rounds of ~40 ms each
 * and each keeps its best round (the round least disturbed by other load). */
static void time_pair(int op, RtGroup *g, float *a, float *b, size_t count, int n, int rounds, double *ts, double *tm) {
  int is = calibrate(op, false, g, a, b, count, n, 0.04), im = calibrate(op, true, g, a, b, count, n, 0.04);
  *ts = *tm = 1e30;
  for (int r = 0; r < rounds; r++) {
    double x = time_iters(op, false, g, a, b, count, n, is);
    double y = time_iters(op, true, g, a, b, count, n, im);
    if (x < *ts) *ts = x;
    if (y < *tm) *tm = y;
  }
}

int main(int argc, char **argv) {
  RtBoot boot;
  if (!rt_boot_init(&boot, &argc, &argv)) return 1;
  if (boot.launcher == RT_LAUNCH_SINGLE) {
    fprintf(stderr, "comm_bench: run it under mpirun -np 2 (or 4)\n");
    return 1;
  }
  size_t max_bytes = argc > 1 ? (size_t)strtoull(argv[1], NULL, 0) : (size_t)256 << 20;
  size_t min_bytes = argc > 2 ? (size_t)strtoull(argv[2], NULL, 0) : 1024;
  const char *ops = argc > 3 ? argv[3] : "all_reduce,reduce_scatter,all_gather";
  if (min_bytes < 1024) min_bytes = 1024;
  const char *re = getenv("COMM_BENCH_ROUNDS");
  int rounds = re && atoi(re) > 0 ? atoi(re) : 5;
  RtComm *c = rt_comm_init(&boot, NULL);
  RtGroup *g = rt_group_world(c);
  int n = boot.world;
  float *a = malloc(max_bytes), *b = malloc(max_bytes);
  if (!a || !b) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < max_bytes / 4; i++) a[i] = b[i] = (float)(i % 7) * 1e-3f;
  if (boot.rank == 0) {
    printf("# comm_bench: %d ranks, shardrt provider %s, fp32 sum; busbw in GB/s, time in us (slowest rank, best "
           "of %d alternating rounds)\n",
           n, rt_comm_provider(c), rounds);
    printf("%-15s %10s %12s %10s %12s %10s %7s\n", "op", "bytes", "shardrt_us", "shardrt_bw", "mpi_us", "mpi_bw",
           "ratio");
  }
  for (int op = 0; op < NOPS; op++) {
    if (!strstr(ops, op_names[op])) continue;
    for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      size_t count = bytes / 4;
      double factor = op == OP_AR ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
      double ts, tm;
      time_pair(op, g, a, b, count, n, rounds, &ts, &tm);
      if (boot.rank == 0)
        printf("%-15s %10zu %12.1f %10.3f %12.1f %10.3f %7.2f\n", op_names[op], bytes, ts * 1e6,
               factor * (double)bytes / ts / 1e9, tm * 1e6, factor * (double)bytes / tm / 1e9, tm / ts);
      fflush(stdout);
    }
  }
  free(a);
  free(b);
  rt_comm_free(c);
  rt_boot_free(&boot);
  return 0;
}
