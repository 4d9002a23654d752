/* bench/attn_bench.c — the CPU attention (rt_sdpa_fwd / rt_sdpa_bwd, causal) at a few shapes, 1 to
 * N threads, against sgemm at 1024^3 on the same threads (docs/performance.md, "CPU attention,
 * register-blocked"). FLOPs: forward 4 B H S T hd, halved for causal (QK^T and PV); backward 2.5x
 * the forward (S recomputed, dP, dV, dK, dQ), as bench/calibrate.c counts them.
 *
 *   bench_attn [threads] [reps] [shape ...]   (defaults: 2 threads, 5 reps, every shape; the best run)
 *
 * A shape is an index into the table below or B,S,H,KV,hd (e.g. 4,512,4,4,16: tiny at seq 512). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *buf(int64_t n, float scale, uint64_t seed) {
  float *p = malloc((size_t)n * sizeof(float));
  if (!p) {
    fprintf(stderr, "bench_attn: out of memory\n");
    exit(1);
  }
  for (int64_t i = 0; i < n; i++) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    p[i] = scale * ((float)(seed >> 40) * 0x1p-24f - 0.5f);
  }
  return p;
}

typedef struct {
  int64_t B, S, H, KV, hd;
} Shape;

static void run(const Shape *sp, int th, int reps) {
  int64_t B = sp->B, S = sp->S, H = sp->H, KV = sp->KV, hd = sp->hd;
  int64_t nq = B * S * H * hd, nk = B * S * KV * hd;
  float *q = buf(nq, 2, 1), *k = buf(nk, 2, 2), *v = buf(nk, 1, 3), *dout = buf(nq, 1, 4), *o = buf(nq, 0, 5);
  float *lse = buf(B * H * S, 0, 6), *dq = buf(nq, 0, 7), *dk = buf(nk, 0, 8), *dv = buf(nk, 0, 9);
  double fl = 4.0 * (double)(B * H * S * S * hd) / 2, tf = 1e30, tb = 1e30;
  rt_sdpa_fwd(B, S, S, H, KV, hd, 1, q, k, v, o, lse); /* warm-up, and the backward's o, lse */
  rt_sdpa_bwd(B, S, S, H, KV, hd, 1, q, k, v, o, lse, dout, dq, dk, dv);
  for (int r = 0; r < reps; r++) {
    double t0 = now_s();
    rt_sdpa_fwd(B, S, S, H, KV, hd, 1, q, k, v, o, lse);
    double t1 = now_s();
    rt_sdpa_bwd(B, S, S, H, KV, hd, 1, q, k, v, o, lse, dout, dq, dk, dv);
    double t2 = now_s();
    tf = t1 - t0 < tf ? t1 - t0 : tf, tb = t2 - t1 < tb ? t2 - t1 : tb;
  }
  char nm[64];
  snprintf(nm, sizeof nm, "B%lld S%lld H%lld KV%lld hd%lld", (long long)B, (long long)S, (long long)H, (long long)KV,
           (long long)hd);
  printf("%-26s %3d %9.3f %9.2f %9.3f %9.2f\n", nm, th, tf * 1e3, fl / tf * 1e-9, tb * 1e3, 2.5 * fl / tb * 1e-9);
  free(q), free(k), free(v), free(dout), free(o), free(lse), free(dq), free(dk), free(dv);
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 5;
  if (threads < 1) threads = 1;
  if (reps < 1) reps = 1;
  static const Shape table[] = {{8, 64, 4, 4, 16}, {1, 128, 4, 4, 32}, {4, 1024, 12, 12, 64}, {2, 512, 16, 8, 128}};
  enum { NT = sizeof table / sizeof table[0] };
  Shape shp[64];
  int n = 0;
  for (int i = 3; i < argc && n < 64; i++) {
    long long a[5];
    char end;
    int got = sscanf(argv[i], "%lld,%lld,%lld,%lld,%lld%c", &a[0], &a[1], &a[2], &a[3], &a[4], &end);
    if (got == 5 && a[0] > 0 && a[1] > 0 && a[2] > 0 && a[3] > 0 && a[4] > 0 && a[2] % a[3] == 0) {
      shp[n++] = (Shape){a[0], a[1], a[2], a[3], a[4]};
    } else if (got == 1 && a[0] >= 0 && a[0] < NT && !strchr(argv[i], ',')) {
      shp[n++] = table[a[0]];
    } else {
      fprintf(stderr, "bench_attn: shape '%s': want an index below %d or B,S,H,KV,hd (H a multiple of KV)\n", argv[i],
              NT);
      return 2;
    }
  }
  if (!n)
    for (; n < NT; n++) shp[n] = table[n];
  printf("%-26s %3s %9s %9s %9s %9s\n", "shape (causal)", "thr", "fwd ms", "GFLOP/s", "bwd ms", "GFLOP/s");
  for (int th = 1; th <= threads; th++) {
    rt_set_threads(th);
    printf("sgemm 1024^3, %d thread%s: %.1f GFLOP/s\n", th, th > 1 ? "s" : "", rt_measure_sgemm_flops(th, 1024) * 1e-9);
    for (int i = 0; i < n; i++) run(&shp[i], th, reps);
  }
  return 0;
}
