/* bench/bench_buf.h — the GEMM benches' operands: n floats uniform in [-0.5, 0.5] (rand()), or exit. */
#ifndef SHARDC_BENCH_BUF_H
#define SHARDC_BENCH_BUF_H

#include <stdio.h>
#include <stdlib.h>

static inline float *bench_rand_buf(size_t n) {
  float *p = malloc(n * sizeof *p);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) p[i] = (float)((double)rand() / RAND_MAX - 0.5);
  return p;
}

#endif
