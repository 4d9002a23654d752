/* bench/gemm_bf16.c — the CPU target's GEMM under `precision bf16` (rt_matmul_bf16: oneDNN's bf16
 * matmul, the f32 -> bf16 rounding of both operands included) against the f32 one (rt_matmul_f32:
 * OpenBLAS sgemm), alternating on GPT-2 124M's shapes at B=4, T=64 (256 rows), the calls the
 * trainer makes (transposes as flags). Prints each one's best GFLOP/s over `reps` and the ratio;
 * and the sum of the listed calls x their count per step (12 layers, the head once).
 *
 *   bench_gemm_bf16 [threads=2] [reps=5]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/kernels.h"
#include "ops.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
  const char *name;
  int ta, tb, m, n, k, per_step; /* C[m, n] = op(A)[m, k] op(B)[k, n]; calls per step */
} Gemm;

static const Gemm G[] = {
    {"qkv fwd    256x768 @ 768x2304", 0, 0, 256, 2304, 768, 12},
    {"fc fwd     256x768 @ 768x3072", 0, 0, 256, 3072, 768, 12},
    {"fc proj    256x3072 @ 3072x768", 0, 0, 256, 768, 3072, 12},
    {"qkv dx     256x2304 @ (768x2304)^T", 0, 1, 256, 768, 2304, 12},
    {"fc dW      (256x768)^T @ 256x3072", 1, 0, 768, 3072, 256, 12},
    {"lm head    256x768 @ (50304x768)^T", 0, 1, 256, 50304, 768, 1},
    {"head dx    256x50304 @ 50304x768", 0, 0, 256, 768, 50304, 1},
    {"head dW    (256x50304)^T @ 256x768", 1, 0, 50304, 768, 256, 1},
};

static float *buf(size_t n) {
  float *p = malloc(n * sizeof *p);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) p[i] = (float)((double)rand() / RAND_MAX - 0.5);
  return p;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 5;
  rt_set_threads(threads);
  double tf = 0, tb = 0;
  printf("%-38s %9s %9s %7s\n", "shape", "f32 GF/s", "bf16 GF/s", "ratio");
  for (size_t s = 0; s < sizeof G / sizeof G[0]; s++) {
    const Gemm *g = &G[s];
    float *a = buf((size_t)g->m * g->k), *b = buf((size_t)g->k * g->n), *y = buf((size_t)g->m * g->n);
    double best[2] = {1e30, 1e30};
    for (int r = 0; r <= reps; r++) /* r = 0 warms up (the primitive's creation) */
      for (int v = 0; v < 2; v++) {
        double t0 = now();
        (v ? rt_matmul_bf16 : rt_matmul_f32)(y, a, b, 1, g->m, g->n, g->k, g->ta, g->tb, 0);
        double t = now() - t0;
        if (r > 0 && t < best[v]) best[v] = t;
      }
    double fl = 2.0 * g->m * g->n * g->k;
    printf("%-38s %9.1f %9.1f %7.2f\n", g->name, fl / best[0] / 1e9, fl / best[1] / 1e9, best[0] / best[1]);
    tf += g->per_step * best[0];
    tb += g->per_step * best[1];
    free(a);
    free(b);
    free(y);
  }
  printf("the calls above x their count per step (a subset of the step's GEMMs): f32 %.0f ms, bf16 %.0f ms, %.2fx\n",
         1e3 * tf, 1e3 * tb, tf / tb);
  printf("bf16 implementation: %s\n", rt_matmul_bf16_impl());
  return 0;
}
