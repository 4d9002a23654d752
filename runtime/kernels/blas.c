/* runtime/kernels/blas.c — thread policy, GEMM through CBLAS, and the machine's measured peak. */
#include "kernels.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Whichever BLAS is linked provides one of these; the others stay NULL. */
void openblas_set_num_threads(int n) __attribute__((weak));
char *openblas_get_config(void) __attribute__((weak));
int openblas_get_parallel(void) __attribute__((weak));
void bli_thread_set_num_threads(long n) __attribute__((weak));

static int g_threads = 0; /* threads set by rt_set_threads; 0: not set yet */

void rt_set_threads(int n) {
  if (n <= 0) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    n = c > 0 ? (int)c : 1;
  }
  g_threads = n;
  omp_set_num_threads(n);
  omp_set_dynamic(0);
  if (openblas_set_num_threads) openblas_set_num_threads(n);
  if (bli_thread_set_num_threads) bli_thread_set_num_threads(n);
}

int rt_get_threads(void) { return g_threads > 0 ? g_threads : omp_get_max_threads(); }

const char *rt_blas_name(void) {
  static char buf[256];
  if (openblas_get_config) {
    int par = openblas_get_parallel ? openblas_get_parallel() : -1;
    snprintf(buf, sizeof buf, "%s (%s)", openblas_get_config(),
             par == 2 ? "openmp" : par == 1 ? "pthreads" : par == 0 ? "sequential" : "?");
    return buf;
  }
  if (bli_thread_set_num_threads) return "BLIS";
  return "unknown";
}

/* ---- GEMM ------------------------------------------------------------------------------------ */

void rt_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
             const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
              (int)k, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

void rt_matmul(int64_t batch, int64_t bbatch, int64_t m, int64_t n, int64_t k, int ta, int tb, const float *A,
               const float *B, float beta, float *y) {
  int64_t lda = ta ? m : k, ldb = tb ? k : n;
  if (bbatch == 1 && !ta) { /* shared B: one (batch*m) x k GEMM */
    rt_gemm(0, tb, batch * m, n, k, 1.0f, A, lda, B, ldb, beta, y, n);
    return;
  }
  for (int64_t i = 0; i < batch; i++)
    rt_gemm(ta, tb, m, n, k, 1.0f, A + i * m * k, lda, B + (i % bbatch) * k * n, ldb, beta, y + i * m * n, n);
}

void rt_linear_fwd(int64_t rows, int64_t k, int64_t n, int tw, const float *x, const float *W, const float *bias,
                   float *y) {
  float beta = 0.0f;
  if (bias) { /* y = bias broadcast, then y += x @ W: the bias costs one pass over y */
#pragma omp parallel for schedule(static) if (rows * n > 32768)
    for (int64_t r = 0; r < rows; r++)
      for (int64_t j = 0; j < n; j++) y[r * n + j] = bias[j];
    beta = 1.0f;
  }
  rt_gemm(0, tw, rows, n, k, 1.0f, x, k, W, tw ? k : n, beta, y, n);
}

void rt_linear_dw(int64_t rows, int64_t k, int64_t n, int tw, const float *x, const float *dy, float beta,
                  float *dW) {
  if (tw) /* dW (n, k) = dy^T @ x */
    rt_gemm(1, 0, n, k, rows, 1.0f, dy, n, x, k, beta, dW, k);
  else /* dW (k, n) = x^T @ dy */
    rt_gemm(1, 0, k, n, rows, 1.0f, x, k, dy, n, beta, dW, n);
}

void rt_linear_dx(int64_t rows, int64_t k, int64_t n, int tw, const float *dy, const float *W, float beta,
                  float *dx) {
  /* dx[rows, k] = dy[rows, n] @ W^T when W is (k, n); @ W when W is (n, k) */
  rt_gemm(0, !tw, rows, k, n, 1.0f, dy, n, W, tw ? k : n, beta, dx, k);
}

/* ---- peak ------------------------------------------------------------------------------------ */

static double thread_cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 16 independent accumulators hide the FMA latency (4 cycles x 2 pipes on Zen 4 / Intel).
 * Each iteration: 16 vector FMAs of W lanes. Returns FLOPs done. */
#define FMA_LOOP(W)                                                                                        \
  typedef float v##W __attribute__((vector_size(4 * W)));                                                  \
  v##W acc[16], a, b;                                                                                      \
  for (int j = 0; j < 16; j++)                                                                             \
    for (int l = 0; l < W; l++) acc[j][l] = 1.0f + 0.001f * (float)(j + l);                                \
  for (int l = 0; l < W; l++) {                                                                            \
    a[l] = 0.999999f;                                                                                      \
    b[l] = 1e-7f;                                                                                          \
  }                                                                                                        \
  for (int64_t i = 0; i < iters; i++) {                                                                    \
    __asm__ volatile("" : "+v"(a));                                                                        \
    for (int j = 0; j < 16; j++) acc[j] = acc[j] * a + b;                                                  \
  }                                                                                                        \
  float s = 0;                                                                                             \
  for (int j = 0; j < 16; j++)                                                                             \
    for (int l = 0; l < W; l++) s += acc[j][l];                                                            \
  *sink = s;                                                                                               \
  return 2.0 * 16 * W * (double)iters;

__attribute__((target("avx512f,fma"))) static double fma_avx512(int64_t iters, float *sink) { FMA_LOOP(16) }
__attribute__((target("avx2,fma"))) static double fma_avx2(int64_t iters, float *sink) { FMA_LOOP(8) }

static double fma_run(int64_t iters, float *sink) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return fma_avx512(iters, sink);
  return fma_avx2(iters, sink);
}

double rt_measure_peak_flops(int threads, double seconds) {
  if (threads <= 0) threads = rt_get_threads();
  if (seconds <= 0) seconds = 0.2;
  /* calibrate on one thread: iterations for ~seconds/4 (doubling from 2^16 until a run takes 2 ms: about
   * 4 ms in all, where growing by 4x to 20 ms spent up to 0.1 s of every trainer's start) */
  float sink = 0;
  int64_t iters = 1 << 16;
  for (;;) {
    double t0 = now_s();
    fma_run(iters, &sink);
    double t = now_s() - t0;
    if (t > 0.002 || iters > ((int64_t)1 << 40)) {
      iters = (int64_t)((double)iters * (seconds / 4) / (t > 1e-9 ? t : 1e-9)) + 1;
      break;
    }
    iters *= 2;
  }
  /* Each thread's FLOPs over its own CPU time (CLOCK_THREAD_CPUTIME_ID), summed: what the threads
   * do while they run, so a machine shared with other work (time-sliced cores) does not lower the
   * peak, which would put MFU over 100 % (wall-clock: 0.1 s at load 5 measured a third of it). Two
   * threads on one core's hyperthreads, or more threads than cores, share the core's units while
   * each one's CPU time runs: each measures its share. Best of 4. */
  double best = 0;
  for (int rep = 0; rep < 4; rep++) {
    double rate = 0;
#pragma omp parallel num_threads(threads) reduction(+ : rate)
    {
      float s = 0;
      double c0 = thread_cpu_s(), flops = fma_run(iters, &s), c = thread_cpu_s() - c0;
      rate += flops / (c > 1e-9 ? c : 1e-9);
      if (s == 12345.0f) sink += s; /* keeps the result alive */
    }
    if (rate > best) best = rate;
  }
  if (sink == 54321.0f) fprintf(stderr, "?\n");
  return best;
}

double rt_measure_sgemm_flops(int threads, int64_t n) {
  if (n <= 0) n = 2048;
  int saved = rt_get_threads();
  if (threads > 0) rt_set_threads(threads);
  float *A = malloc((size_t)(n * n) * sizeof(float)), *B = malloc((size_t)(n * n) * sizeof(float)),
        *C = malloc((size_t)(n * n) * sizeof(float));
  double best = 0;
  if (A && B && C) {
    for (int64_t i = 0; i < n * n; i++) {
      A[i] = (float)(i % 7) * 0.1f;
      B[i] = (float)(i % 5) * 0.1f;
      C[i] = 0;
    }
    for (int rep = 0; rep < 3; rep++) {
      double t0 = now_s();
      rt_gemm(0, 0, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
      double t = now_s() - t0;
      if (rep > 0 && 2.0 * n * n * n / t > best) best = 2.0 * (double)n * n * n / t;
    }
  }
  free(A);
  free(B);
  free(C);
  if (threads > 0) rt_set_threads(saved);
  return best;
}
