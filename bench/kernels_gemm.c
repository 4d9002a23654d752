/* bench/kernels_gemm.c — sgemm GFLOP/s on GPT-2 124M shapes (B=4, T=64 → 256 rows).
 *
 * Built once per BLAS (bench_gemm_openblas, bench_gemm_openblas_omp, bench_gemm_blis, see
 * bench/kernels.cmake) so the libraries can be compared on the same source. Also runs an
 * "interleaved" test: a GEMM followed by an OpenMP elementwise loop, repeated, which exposes a
 * BLAS whose private thread pool keeps spinning while our OpenMP threads want the cores.
 *
 *   usage: bench_gemm_X [reps]
 */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_buf.h"

void openblas_set_num_threads(int n) __attribute__((weak));
void bli_thread_set_num_threads(long n) __attribute__((weak));

static void set_threads(int n) {
  omp_set_num_threads(n);
  if (openblas_set_num_threads) openblas_set_num_threads(n);
  if (bli_thread_set_num_threads) bli_thread_set_num_threads(n);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
  const char *name; /* what the GEMM is in the model */
  int ta, tb;       /* transposes of A and B */
  int m, n, k;      /* C[m, n] = op(A)[m, k] op(B)[k, n] */
} Shape;

static const Shape SHAPES[] = {
    {"qkv fwd      256x768 @ 768x2304", 0, 0, 256, 2304, 768},
    {"attn proj    256x768 @ 768x768", 0, 0, 256, 768, 768},
    {"fc fwd       256x768 @ 768x3072", 0, 0, 256, 3072, 768},
    {"fc proj      256x3072 @ 3072x768", 0, 0, 256, 768, 3072},
    {"lm head      256x768 @ (50304x768)^T", 0, 1, 256, 50304, 768},
    {"lm head dx   256x50304 @ 50304x768", 0, 0, 256, 768, 50304},
    {"lm head dW   (256x50304)^T @ 256x768", 1, 0, 50304, 768, 256},
    {"qkv dx       256x2304 @ (768x2304)^T", 0, 1, 256, 768, 2304},
    {"qkv dW       (256x768)^T @ 256x2304", 1, 0, 768, 2304, 256},
    {"fc dW        (256x768)^T @ 256x3072", 1, 0, 768, 3072, 256},
};

static double bench_one(const Shape *s, int reps) {
  size_t am = s->ta ? (size_t)s->k : (size_t)s->m, an = s->ta ? (size_t)s->m : (size_t)s->k;
  size_t bm = s->tb ? (size_t)s->n : (size_t)s->k, bn = s->tb ? (size_t)s->k : (size_t)s->n;
  float *A = bench_rand_buf(am * an), *B = bench_rand_buf(bm * bn), *C = bench_rand_buf((size_t)s->m * s->n);
  double best = 1e30;
  for (int r = 0; r < reps + 1; r++) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, s->m,
                s->n, s->k, 1.0f, A, (int)an, B, (int)bn, 0.0f, C, s->n);
    double t = now() - t0;
    if (r > 0 && t < best) best = t; /* first call warms up */
  }
  free(A);
  free(B);
  free(C);
  return 2.0 * s->m * s->n * s->k / best * 1e-9;
}

/* GEMM then an OpenMP loop over a buffer of the output's size, repeated: total time. */
static double bench_interleaved(int reps) {
  const int m = 256, n = 3072, k = 768;
  float *A = bench_rand_buf((size_t)m * k), *B = bench_rand_buf((size_t)k * n), *C = bench_rand_buf((size_t)m * n);
  float *D = bench_rand_buf((size_t)m * n);
  double t0 = now();
  for (int r = 0; r < reps; r++) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, A, k, B, n, 0.0f, C, n);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)m * n; i++) D[i] = D[i] * 0.5f + C[i] * 1e-3f;
  }
  double t = now() - t0;
  free(A);
  free(B);
  free(C);
  free(D);
  return t / reps;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 5;
  for (int th = 1; th <= 2; th++) {
    set_threads(th);
    printf("threads=%d\n", th);
    double flops = 0, secs = 0;
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
      const Shape *s = &SHAPES[i];
      double g = bench_one(s, reps);
      printf("  %-40s %7.1f GFLOP/s\n", s->name, g);
      flops += 2.0 * s->m * s->n * s->k;
      secs += 2.0 * s->m * s->n * s->k / (g * 1e9);
    }
    printf("  %-40s %7.1f GFLOP/s\n", "all shapes (flop-weighted)", flops / secs * 1e-9);
    printf("  %-40s %7.3f ms\n", "interleaved gemm(256x768x3072)+omp loop", 1e3 * bench_interleaved(20));
  }
  return 0;
}
