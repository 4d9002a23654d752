/* bench/sgemm_peak.c — the fp32 ceiling of this machine for a training step: OpenBLAS sgemm on large
 * square matrices (where packing and threading overheads vanish), the FMA-loop peak of the cores,
 * and the bf16 dot-product (AVX512_BF16 vdpbf16ps) peak when the CPU has it, for 1 .. threads
 * threads; then the shortest step those rates allow for a step of `gflop` GFLOP of GEMMs.
 *
 *   bench_sgemm_peak [threads=2] [gflop=190] [reps=5]
 *
 * Numbers and their reading: docs/performance.md ("Where the CPU step goes").
 */
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void openblas_set_num_threads(int n) __attribute__((weak));

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void set_threads(int n) {
  omp_set_num_threads(n);
  if (openblas_set_num_threads) openblas_set_num_threads(n);
}

/* Best GFLOP/s of C = A B, n x n x n, over reps calls after a warm-up. */
static double sgemm_gflops(int n, int reps) {
  size_t nn = (size_t)n * (size_t)n;
  float *A = malloc(nn * sizeof *A), *B = malloc(nn * sizeof *B), *C = malloc(nn * sizeof *C);
  if (!A || !B || !C) {
    fprintf(stderr, "bench_sgemm_peak: out of memory for n = %d\n", n);
    exit(1);
  }
  for (size_t i = 0; i < nn; i++) A[i] = (float)(i % 7) * 0.1f, B[i] = (float)(i % 5) * 0.1f, C[i] = 0.0f;
  double best = 1e30;
  for (int r = 0; r <= reps; r++) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
    double t = now() - t0;
    if (r > 0 && t < best) best = t;
  }
  free(A), free(B), free(C);
  return 2.0 * (double)n * n * n / best * 1e-9;
}

#ifdef __AVX512F__
enum { CHAINS = 16, ITERS = 400000000 }; /* ~0.1 s per thread at the peak: thread start-up does not count */

/* FLOP/s of independent 512-bit FMA chains on every thread (2 FLOP per lane). */
static double fma_gflops(void) {
  double t0 = now();
  float sink = 0.0f;
#pragma omp parallel reduction(+ : sink)
  {
    __m512 acc[CHAINS], a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
    for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < ITERS / CHAINS; i++)
#pragma GCC unroll 16 /* the chains in registers, not on the stack */
      for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    for (int c = 0; c < CHAINS; c++) sink += _mm512_reduce_add_ps(acc[c]);
  }
  double t = now() - t0;
  if (sink == 12345.0f) printf(" ");
  return (double)omp_get_max_threads() * (ITERS / CHAINS) * CHAINS * 16 * 2 / t * 1e-9;
}
#else
static double fma_gflops(void) { return 0.0; } /* built without AVX-512 (SHARDC_NATIVE off): not measured */
#endif

#if defined(__AVX512F__) && defined(__AVX512BF16__)
/* FLOP/s of independent vdpbf16ps chains (32 bf16 products summed pairwise into 16 f32 lanes: 64 FLOP). */
static double bf16_gflops(void) {
  double t0 = now();
  float sink = 0.0f;
#pragma omp parallel reduction(+ : sink)
  {
    __m512 acc[CHAINS];
    __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
    for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < ITERS / CHAINS; i++)
#pragma GCC unroll 16
      for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_dpbf16_ps(acc[c], a, a);
    for (int c = 0; c < CHAINS; c++) sink += _mm512_reduce_add_ps(acc[c]);
  }
  double t = now() - t0;
  if (sink == 12345.0f) printf(" ");
  return (double)omp_get_max_threads() * (ITERS / CHAINS) * CHAINS * 32 * 2 / t * 1e-9;
}
#endif

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  double gflop = argc > 2 ? atof(argv[2]) : 190.0;
  int reps = argc > 3 ? atoi(argv[3]) : 5;
  if (threads < 1 || gflop <= 0 || reps < 1) {
    fprintf(stderr, "usage: bench_sgemm_peak [threads>=1] [gflop>0] [reps>=1]\n");
    return 2;
  }
  static const int sizes[] = {1024, 2048, 3072, 4096};
  double best_sgemm = 0, fma = 0, bf16 = 0;
  for (int th = 1; th <= threads; th++) {
    set_threads(th);
    printf("threads=%d\n", th);
    double best = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      double g = sgemm_gflops(sizes[i], reps);
      printf("  sgemm %4d^3                    %7.1f GFLOP/s\n", sizes[i], g);
      if (g > best) best = g;
    }
    fma = fma_gflops(); /* best of two: the first also starts the threads */
    double again = fma_gflops();
    if (again > fma) fma = again;
    if (fma > 0) printf("  fp32 FMA loop (512-bit)        %7.1f GFLOP/s\n", fma);
#if defined(__AVX512F__) && defined(__AVX512BF16__)
    bf16 = bf16_gflops();
    again = bf16_gflops();
    if (again > bf16) bf16 = again;
    printf("  bf16 dot loop (vdpbf16ps)      %7.1f GFLOP/s\n", bf16);
#endif
    best_sgemm = best;
  }
  printf("a step of %.0f GFLOP at %d threads takes at least:\n", gflop, threads);
  printf("  %7.0f ms at the best sgemm rate (%.1f GFLOP/s)\n", gflop / best_sgemm * 1e3, best_sgemm);
  if (fma > 0) printf("  %7.0f ms at the fp32 FMA peak (%.1f GFLOP/s)\n", gflop / fma * 1e3, fma);
  if (bf16 > 0) printf("  %7.0f ms at the bf16 dot-product peak (%.1f GFLOP/s)\n", gflop / bf16 * 1e3, bf16);
  return 0;
}
