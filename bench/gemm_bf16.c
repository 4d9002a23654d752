/* bench/gemm_bf16.c — the CPU target's GEMM under `precision bf16` (rt_matmul_bf16: oneDNN's bf16
 * matmul, the f32 -> bf16 rounding of both operands included) against the f32 one (rt_matmul_f32:
 * OpenBLAS sgemm), alternating on GPT-2 124M's shapes at B=4, T=64 (256 rows), the calls the
 * trainer makes (transposes as flags); with a weight operand given in bf16 (the once-per-step copy),
 * and with that copy transposed for the B^T shapes. Prints each one's best GFLOP/s over `reps` and
 * the sum of the calls x their count per step (12 layers, the head once).
 *
 *   bench_gemm_bf16 [threads=2] [reps=5]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/kernels.h"
#include "ops.h"
#include "bench_buf.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
  const char *name;
  int ta, tb, m, n, k, per_step; /* C[m, n] = op(A)[m, k] op(B)[k, n]; calls per step */
  int wb;                        /* B is a weight (its bf16 copy made once per step: passes/gemm_cast.c) */
} Gemm;

/* Every GEMM of the GPT-2 124M step at B=4, T=64 (per layer x 12, the head once). */
static const Gemm G[] = {
    {"qkv fwd    256x768 @ 768x2304", 0, 0, 256, 2304, 768, 12, 1},
    {"attn proj  256x768 @ 768x768", 0, 0, 256, 768, 768, 12, 1},
    {"fc fwd     256x768 @ 768x3072", 0, 0, 256, 3072, 768, 12, 1},
    {"fc proj    256x3072 @ 3072x768", 0, 0, 256, 768, 3072, 12, 1},
    {"qkv dx     256x2304 @ (768x2304)^T", 0, 1, 256, 768, 2304, 12, 1},
    {"aproj dx   256x768 @ (768x768)^T", 0, 1, 256, 768, 768, 12, 1},
    {"fc dx      256x3072 @ (768x3072)^T", 0, 1, 256, 768, 3072, 12, 1},
    {"fcproj dx  256x768 @ (3072x768)^T", 0, 1, 256, 3072, 768, 12, 1},
    {"qkv dW     (256x768)^T @ 256x2304", 1, 0, 768, 2304, 256, 12, 0},
    {"aproj dW   (256x768)^T @ 256x768", 1, 0, 768, 768, 256, 12, 0},
    {"fc dW      (256x768)^T @ 256x3072", 1, 0, 768, 3072, 256, 12, 0},
    {"fcproj dW  (256x3072)^T @ 256x768", 1, 0, 3072, 768, 256, 12, 0},
    {"lm head    256x768 @ (50304x768)^T", 0, 1, 256, 50304, 768, 1, 1},
    {"head dx    256x50304 @ 50304x768", 0, 0, 256, 768, 50304, 1, 1},
    {"head dW    (256x50304)^T @ 256x768", 1, 0, 50304, 768, 256, 1, 0},
};

/* Columns: f32 (OpenBLAS); bf16 rounding both operands in the call (the step before
 * passes/gemm_cast.c); bf16 with a weight B given in bf16 (its copy made once per step); and, for
 * B^T (tb), with the copy stored transposed (B as k x n, tb = 0: the layout a transposing cast would
 * write). Variants alternate per repetition; best of `reps`. */
enum { F32, BF16, BF16_W, BF16_WT, NV };

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 5;
  rt_set_threads(threads);
  double tot[NV] = {0};
  printf("%-38s %8s %8s %8s %8s  (GFLOP/s; '-': B is no weight)\n", "shape", "f32", "bf16", "bf16 w16", "w16 B^T");
  for (size_t s = 0; s < sizeof G / sizeof G[0]; s++) {
    const Gemm *g = &G[s];
    size_t nb = (size_t)g->k * g->n;
    float *a = bench_rand_buf((size_t)g->m * g->k), *b = bench_rand_buf(nb), *y = bench_rand_buf((size_t)g->m * g->n);
    uint16_t *b16 = malloc(nb * 2), *bt16 = malloc(nb * 2);
    rt_cvt_f32_bf16((int64_t)nb, b, b16);
    /* B^T's copy: stored (n, k) when tb, written as (k, n) */
    int64_t rows = g->tb ? g->n : g->k, cols = g->tb ? g->k : g->n;
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++) bt16[j * rows + i] = b16[i * cols + j];
    double best[NV];
    for (int v = 0; v < NV; v++) best[v] = 1e30;
    for (int r = 0; r <= reps; r++) /* r = 0 warms up (the primitive's creation) */
      for (int v = 0; v < NV; v++) {
        if ((v == BF16_W && !g->wb) || (v == BF16_WT && (!g->wb || !g->tb))) continue;
        double t0 = now();
        if (v == F32) rt_matmul_f32(y, a, b, 1, g->m, g->n, g->k, g->ta, g->tb, 0);
        else if (v == BF16) rt_matmul_bf16(y, a, b, 1, g->m, g->n, g->k, g->ta, g->tb, 0);
        else if (v == BF16_W) rt_matmul_bf16_in(y, a, 0, b16, 1, 1, g->m, g->n, g->k, g->ta, g->tb, 0);
        else rt_matmul_bf16_in(y, a, 0, bt16, 1, 1, g->m, g->n, g->k, g->ta, 0, 0);
        double t = now() - t0;
        if (r > 0 && t < best[v]) best[v] = t;
      }
    double fl = 2.0 * g->m * g->n * g->k;
    printf("%-38s", g->name);
    for (int v = 0; v < NV; v++) {
      if (best[v] < 1e30) printf(" %8.1f", fl / best[v] / 1e9);
      else printf(" %8s", "-");
    }
    /* the step per variant: a weight's copy where B is one; the transposed copy only where faster */
    double w = best[BF16_W] < 1e30 ? best[BF16_W] : best[BF16];
    tot[F32] += g->per_step * best[F32];
    tot[BF16] += g->per_step * best[BF16];
    tot[BF16_W] += g->per_step * w;
    tot[BF16_WT] += g->per_step * (best[BF16_WT] < w ? best[BF16_WT] : w);
    printf("\n");
    free(a);
    free(b);
    free(y);
    free(b16);
    free(bt16);
  }
  printf("the step's GEMMs (each x its count): f32 %.0f ms, bf16 %.0f ms, bf16 w16 %.0f ms, w16 + B^T where faster %.0f ms\n",
         1e3 * tot[F32], 1e3 * tot[BF16], 1e3 * tot[BF16_W], 1e3 * tot[BF16_WT]);
  printf("bf16 implementation: %s\n", rt_matmul_bf16_impl());
  return 0;
}
