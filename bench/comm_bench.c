/* bench/comm_bench.c — bus bandwidth of shardrt's collectives next to OpenMPI's, same run.
 *
 *   mpirun --allow-run-as-root --oversubscribe --mca pml ob1 -np N comm_bench [max_bytes [min_bytes [ops]]]
 *
 * ops: a comma list of all_reduce, reduce_scatter, all_gather, all_reduce_v (default all).
 *
 * For each size (min .. max, x4) and op it times shardrt and the matching MPI call
 * (MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather) on the same buffers, fp32 sum.
 * all_reduce_v is rt_all_reduce_v over a gradient-bucket-like set of separately allocated
 * members (big ones with small ones between) against MPI_Allreduce of one contiguous
 * buffer of the same size; its "member" column is shardrt with one rt_all_reduce per member.
 * COMM_BENCH_ALT adds an "alt" column: shardrt with other settings, timed in the same
 * rounds: "ring" (direct reads, mailboxes, streaming, the hierarchical path and gather-and-fold off) or
 * "NAME=VALUE[,NAME=VALUE]" for rt_comm_tune (direct_min, direct_push, direct_chunk, mbox_max, hier, gather_max,
 * mbox_stream, stream_chunk, stream_ring, stream_min, mbox_ag_max, stream_max, hier_ar_max, hier_rs_max,
 * hier_ag_max, rail_ar_min, rail_rs_min, rail_ag_min).
 * Before timing, shardrt measures its own thresholds (rt_comm_autotune, as the trainer
 * does; COMM_BENCH_TUNE=0 skips it, SHARDRT_MBOX_MAX / SHARDRT_HIER* fix the values); a NAME
 * the alt column does not set keeps the runtime's (tuned) value there too.
 * The implementations alternate over COMM_BENCH_ROUNDS (default 5) rounds of
 * COMM_BENCH_ROUND_MS (default 40 ms; every round runs at least 2 calls);
 * time = the slowest rank's mean over a round, best round of each.
 * Bus bandwidth (NCCL's convention): all-reduce 2(n-1)/n * S / t, reduce-scatter and
 * all-gather (n-1)/n * S / t, S = the full buffer in bytes. ratio = MPI time / shardrt time.
 * COMM_BENCH_MEM=shm allocates shardrt's buffers with rt_comm_mem_alloc, memory the local
 * peers map, as the compiled trainer does; MPI keeps buffers from malloc (on memfd memory
 * its single-copy path measured slower). The default, "malloc", gives both the same
 * malloc'd buffers.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

enum { OP_AR, OP_RS, OP_AG, OP_ARV, NOPS };
static const char *const op_names[NOPS] = {"all_reduce", "reduce_scatter", "all_gather", "all_reduce_v"};
enum { IMPL_OURS, IMPL_MPI, IMPL_RING, IMPL_MEMBER, NIMPL };

/* all_reduce_v members: sizes in elements and buffers. */
#define MAXMEM 64
static int nmem;
static size_t mcount[MAXMEM];
static void *mbuf[MAXMEM];
#define MAXTUNE 18
static const char *tune_names[MAXTUNE] = {"direct_min",  "direct_push", "direct_chunk", "mbox_max",    "hier",
                                          "gather_max",  "mbox_stream", "stream_chunk", "stream_ring", "stream_min",
                                          "mbox_ag_max", "stream_max",  "hier_ar_max",  "hier_rs_max", "hier_ag_max",
                                          "rail_ar_min", "rail_rs_min", "rail_ag_min"};
static size_t tune_default[MAXTUNE], tune_alt[MAXTUNE]; /* the runtime's settings (tuned) and the alt column's */

static void apply(RtComm *c, const size_t *v) {
  for (int i = 0; i < MAXTUNE; i++) rt_comm_tune(c, tune_names[i], v[i]);
}
static double round_s = 0.04;    /* seconds per round (COMM_BENCH_ROUND_MS) */
static RtComm *mem_comm;         /* non-NULL: shardrt's buffers from rt_comm_mem_alloc (COMM_BENCH_MEM=shm) */
static float *mpi_a, *mpi_b;     /* MPI's buffers (malloc) */

static void *buf_alloc(size_t bytes) { return mem_comm ? rt_comm_mem_alloc(mem_comm, bytes) : malloc(bytes); }
static void buf_free(void *p) {
  if (mem_comm) rt_comm_mem_free(mem_comm, p);
  else free(p);
}

/* Splits count elements like a gradient bucket: a big member (count/5), a small one (1000),
 * a middling one (count/11), repeated; the last takes the rest. */
static void plan_members(size_t count) {
  static const size_t div[3] = {5, 0, 11};
  size_t left = count;
  nmem = 0;
  for (int k = 0; left > 0 && nmem < MAXMEM - 1; k++) {
    size_t want = div[k % 3] ? count / div[k % 3] : 1000;
    if (want == 0) want = 1;
    if (want > left) want = left;
    mcount[nmem++] = want;
    left -= want;
  }
  if (left) mcount[nmem++] = left;
}

static void run_once(int op, int impl, RtGroup *g, float *a, float *b, size_t count, int n) {
  size_t per = count / (size_t)n;
  if (impl == IMPL_MPI) {
    a = mpi_a;
    b = mpi_b;
    if (op == OP_AR || op == OP_ARV) MPI_Allreduce(MPI_IN_PLACE, a, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (op == OP_RS) MPI_Reduce_scatter_block(a, b, (int)per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (op == OP_AG) MPI_Allgather(a, (int)per, MPI_FLOAT, b, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
    return;
  }
  if (op == OP_AR) rt_all_reduce(g, a, a, count, RT_F32, RT_SUM);
  if (op == OP_RS) rt_reduce_scatter(g, a, b, count, RT_F32, RT_SUM);
  if (op == OP_AG) rt_all_gather(g, a, b, count, RT_F32);
  if (op == OP_ARV) {
    if (impl == IMPL_MEMBER)
      for (int i = 0; i < nmem; i++) rt_all_reduce(g, mbuf[i], mbuf[i], mcount[i], RT_F32, RT_SUM);
    else
      rt_all_reduce_v(g, mbuf, mcount, nmem, RT_F32, RT_SUM);
  }
}

/* Seconds per call of `iters` back-to-back calls, slowest rank. */
static double time_iters(int op, int impl, RtGroup *g, float *a, float *b, size_t count, int n, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; i++) run_once(op, impl, g, a, b, count, n);
  double t = (MPI_Wtime() - t0) / iters;
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return t;
}

/* Iterations for about `secs` seconds of one implementation (at least 2, at most 2000). */
static int calibrate(int op, int impl, RtGroup *g, float *a, float *b, size_t count, int n, double secs) {
  run_once(op, impl, g, a, b, count, n); /* warm-up */
  double one = time_iters(op, impl, g, a, b, count, n, 1);
  int iters = one > 0 ? (int)(secs / one) : 2000;
  return iters < 2 ? 2 : iters > 2000 ? 2000 : iters;
}

/* The machine is shared: the implementations alternate over `rounds` rounds of ~40 ms
 * each and each keeps its best round (the round least disturbed by other load). */
static void time_all(int op, const bool *use, RtComm *c, RtGroup *g, float *a, float *b, size_t count, int n,
                     int rounds, double *t) {
  int iters[NIMPL] = {0};
  for (int k = 0; k < NIMPL; k++) {
    t[k] = 0;
    if (!use[k]) continue;
    apply(c, k == IMPL_RING ? tune_alt : tune_default);
    iters[k] = calibrate(op, k, g, a, b, count, n, round_s);
    t[k] = 1e30;
  }
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < NIMPL; k++) {
      if (!use[k]) continue;
      apply(c, k == IMPL_RING ? tune_alt : tune_default);
      double x = time_iters(op, k, g, a, b, count, n, iters[k]);
      if (x < t[k]) t[k] = x;
    }
  apply(c, tune_default);
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
  const char *ops = argc > 3 ? argv[3] : "all_reduce,reduce_scatter,all_gather,all_reduce_v";
  if (min_bytes < 1024) min_bytes = 1024;
  const char *re = getenv("COMM_BENCH_ROUNDS");
  int rounds = re && atoi(re) > 0 ? atoi(re) : 5;
  const char *rm = getenv("COMM_BENCH_ROUND_MS");
  if (rm && atof(rm) > 0) round_s = atof(rm) / 1000.0;
  bool alt_set[MAXTUNE] = {false};
  const char *alt = getenv("COMM_BENCH_ALT");
  bool with_ring = alt && *alt;
  if (with_ring && strcmp(alt, "ring") == 0) {
    static const int off[5] = {0, 3, 4, 5, 6}; /* direct_min SIZE_MAX; mbox_max, hier, gather_max, mbox_stream 0 */
    for (int k = 0; k < 5; k++) {
      tune_alt[off[k]] = k == 0 ? SIZE_MAX : 0;
      alt_set[off[k]] = true;
    }
  } else if (with_ring) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", alt);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
      char *eq = strchr(tok, '=');
      int i = 0;
      if (eq) *eq = 0;
      while (i < MAXTUNE && strcmp(tune_names[i], tok) != 0) i++;
      if (!eq || i == MAXTUNE) {
        fprintf(stderr, "comm_bench: COMM_BENCH_ALT is ring or NAME=VALUE[,...] (");
        for (int k = 0; k < MAXTUNE; k++) fprintf(stderr, "%s%s", k ? ", " : "", tune_names[k]);
        fprintf(stderr, ")\n");
        return 1;
      }
      tune_alt[i] = (size_t)strtoull(eq + 1, NULL, 0);
      alt_set[i] = true;
    }
  }
  RtComm *c = rt_comm_init(&boot, NULL);
  RtGroup *g = rt_group_world(c);
  int n = boot.world;
  const char *mem = getenv("COMM_BENCH_MEM");
  if (mem && *mem && strcmp(mem, "shm") != 0 && strcmp(mem, "malloc") != 0) {
    fprintf(stderr, "comm_bench: COMM_BENCH_MEM is shm or malloc\n");
    return 1;
  }
  if (mem && strcmp(mem, "shm") == 0) mem_comm = c;
  const char *tune = getenv("COMM_BENCH_TUNE");
  if (!(tune && strcmp(tune, "0") == 0)) rt_comm_autotune(c, mem_comm != NULL);
  /* the runtime's settings as it reads and measures them; the alt column differs where it says */
  for (int i = 0; i < MAXTUNE; i++) {
    if (!rt_comm_tuned(c, tune_names[i], &tune_default[i])) {
      fprintf(stderr, "comm_bench: the runtime has no setting %s\n", tune_names[i]);
      return 1;
    }
    if (!alt_set[i]) tune_alt[i] = tune_default[i];
  }
  float *a = buf_alloc(max_bytes), *b = buf_alloc(max_bytes);
  if (!a || !b) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  mpi_a = mem_comm ? malloc(max_bytes) : a;
  mpi_b = mem_comm ? malloc(max_bytes) : b;
  if (!mpi_a || !mpi_b) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < max_bytes / 4; i++) a[i] = b[i] = mpi_a[i] = mpi_b[i] = (float)(i % 7) * 1e-3f;
  if (boot.rank == 0) {
    printf("# buffers: shardrt %s, MPI malloc\n", mem_comm ? "rt_comm_mem_alloc (shm, mapped by the peers)" : "malloc");
    printf("# comm_bench: %d ranks, shardrt provider %s, fp32 sum; busbw in GB/s, time in us (slowest rank, best "
           "of %d alternating rounds of %.0f ms)\n",
           n, rt_comm_provider(c), rounds, round_s * 1e3);
    printf("# bytes: mbox_max %zu, hier_max ar %zu rs %zu ag %zu, rail_min ar %zu rs %zu ag %zu%s\n", tune_default[3],
           tune_default[12], tune_default[13], tune_default[14], tune_default[15], tune_default[16], tune_default[17],
           tune && strcmp(tune, "0") == 0 ? "" : " (after rt_comm_autotune)");
    if (with_ring) printf("# alt column: %s\n", alt);
    printf("%-14s %10s %11s %10s %11s %10s %6s %11s\n", "op", "bytes", "shardrt_us", "shardrt_bw", "mpi_us", "mpi_bw",
           "ratio", with_ring ? "alt/member" : "member_us");
  }
  for (int op = 0; op < NOPS; op++) {
    char want[40];
    snprintf(want, sizeof want, ",%s,", op_names[op]);
    char list[256];
    snprintf(list, sizeof list, ",%s,", ops);
    if (!strstr(list, want)) continue;
    for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      size_t count = bytes / 4;
      double factor = op == OP_AR || op == OP_ARV ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
      bool use[NIMPL] = {true, true, with_ring && op != OP_ARV, op == OP_ARV};
      void *pool = NULL; /* shm: the members are carved from one region, like the trainer's arena */
      if (op == OP_ARV) {
        plan_members(count);
        size_t pool_at = 0, pool_bytes = count * 4 + (size_t)nmem * 256;
        if (mem_comm && !(pool = buf_alloc(pool_bytes))) {
          fprintf(stderr, "out of memory\n");
          return 1;
        }
        for (int i = 0; i < nmem; i++) {
          if (pool) { /* 64-byte aligned, a gap of 64 bytes after each (as between planned tensors) */
            mbuf[i] = (char *)pool + pool_at;
            pool_at += (mcount[i] * 4 + 127) / 64 * 64;
          } else mbuf[i] = buf_alloc(mcount[i] * 4);
          if (!mbuf[i]) {
            fprintf(stderr, "out of memory\n");
            return 1;
          }
          for (size_t j = 0; j < mcount[i]; j++) ((float *)mbuf[i])[j] = (float)(j % 5) * 1e-3f;
        }
      }
      double t[NIMPL];
      time_all(op, use, c, g, a, b, count, n, rounds, t);
      if (op == OP_ARV && pool) buf_free(pool);
      else if (op == OP_ARV)
        for (int i = 0; i < nmem; i++) buf_free(mbuf[i]);
      if (boot.rank == 0) {
        printf("%-14s %10zu %11.2f %10.3f %11.2f %10.3f %6.2f", op_names[op], bytes, t[IMPL_OURS] * 1e6,
               factor * (double)bytes / t[IMPL_OURS] / 1e9, t[IMPL_MPI] * 1e6,
               factor * (double)bytes / t[IMPL_MPI] / 1e9, t[IMPL_MPI] / t[IMPL_OURS]);
        if (use[IMPL_RING]) printf(" %11.2f", t[IMPL_RING] * 1e6);
        if (use[IMPL_MEMBER]) printf(" %11.2f", t[IMPL_MEMBER] * 1e6);
        printf("\n");
      }
      fflush(stdout);
    }
  }
  if (mem_comm) {
    free(mpi_a);
    free(mpi_b);
  }
  buf_free(a);
  buf_free(b);
  if (boot.rank == 0)
    printf("# rank 0: %.1f MB of direct collectives went through mappings of the peers' memory\n",
           (double)rt_comm_mapped_bytes(c) / 1e6);
  rt_comm_free(c);
  rt_boot_free(&boot);
  return 0;
}
