/* bench/gacc_kernels.c — one layer's weight-gradient GEMMs under gradient accumulation, before and
 * after passes/gacc.c, on one thread: the GEMM into a temporary and then the sum's add
 * (rt_matmul beta 0, rt_add) against the GEMM accumulating into the sum (rt_matmul beta 1).
 *
 * A transformer layer of width d has 4 weights: [d, 3d], [d, d], [d, 4d], [4d, d]; dW = x^T dy over
 * `rows` tokens of a micro-step (k = rows). The two forms alternate ROUNDS times, each REPS layers;
 * printed per (d, rows): the median microseconds a layer and after / before.
 *
 *   bench_gacc_kernels [rounds] [reps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_buf.h"
#include "kernels/kernels.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

enum { MAX_ROUNDS = 64 };

/* One layer's 4 weight gradients added to their sums: fused or not. */
static void layer(int64_t d, int64_t rows, float *const *x, float *const *dy, float *const *sum, float *tmp, int fused) {
  const int64_t in[4] = {d, d, d, 4 * d}, out[4] = {3 * d, d, 4 * d, d};
  for (int w = 0; w < 4; w++) {
    if (fused) {
      rt_matmul(1, 1, in[w], out[w], rows, 1, 0, x[w], dy[w], 1.0f, sum[w]);
    } else {
      rt_matmul(1, 1, in[w], out[w], rows, 1, 0, x[w], dy[w], 0.0f, tmp);
      rt_add(in[w] * out[w], sum[w], tmp, sum[w]);
    }
  }
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 9, reps = argc > 2 ? atoi(argv[2]) : 20;
  if (rounds < 1 || rounds > MAX_ROUNDS || reps < 1) {
    fprintf(stderr, "usage: bench_gacc_kernels [rounds 1..%d] [reps]\n", MAX_ROUNDS);
    return 2;
  }
  rt_set_threads(1);
  static const int64_t dims[][2] = {{64, 64}, {256, 64}, {768, 64}, {768, 512}};
  printf("%-16s %12s %12s %8s\n", "d, rows", "before us", "after us", "ratio");
  for (size_t c = 0; c < sizeof dims / sizeof dims[0]; c++) {
    int64_t d = dims[c][0], rows = dims[c][1];
    const int64_t in[4] = {d, d, d, 4 * d}, out[4] = {3 * d, d, 4 * d, d};
    float *x[4], *dy[4], *sum[4], *tmp = bench_rand_buf((size_t)(4 * d * d));
    for (int w = 0; w < 4; w++) {
      x[w] = bench_rand_buf((size_t)(rows * in[w]));
      dy[w] = bench_rand_buf((size_t)(rows * out[w]));
      sum[w] = bench_rand_buf((size_t)(in[w] * out[w]));
    }
    double t[2][MAX_ROUNDS];
    layer(d, rows, x, dy, sum, tmp, 0); /* warm */
    layer(d, rows, x, dy, sum, tmp, 1);
    for (int r = 0; r < rounds; r++)
      for (int f = 0; f < 2; f++) {
        double t0 = now();
        for (int i = 0; i < reps; i++) layer(d, rows, x, dy, sum, tmp, f);
        t[f][r] = (now() - t0) / reps * 1e6;
      }
    double ratio[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) ratio[r] = t[1][r] / t[0][r];
    qsort(t[0], (size_t)rounds, sizeof(double), cmp);
    qsort(t[1], (size_t)rounds, sizeof(double), cmp);
    qsort(ratio, (size_t)rounds, sizeof(double), cmp);
    char name[32];
    snprintf(name, sizeof name, "%lld, %lld", (long long)d, (long long)rows);
    printf("%-16s %12.1f %12.1f %8.3f\n", name, t[0][rounds / 2], t[1][rounds / 2], ratio[rounds / 2]);
    for (int w = 0; w < 4; w++) {
      free(x[w]);
      free(dy[w]);
      free(sum[w]);
    }
    free(tmp);
  }
  return 0;
}
