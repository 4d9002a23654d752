/* bench/kernels_bench.c — the CPU kernels of libshardrt on GPT-2 124M shapes (B=4, T=64, C=768,
 * 12 heads, 12 layers, vocab 50257 padded to 50304): the machine's measured fp32 peak, each
 * kernel's time, and the per-step sum (kernel time x calls per step) that bounds a CPU trainer's
 * step time from below, with the MFU it would give.
 *
 *   bench_kernels [threads] [reps]     (defaults: 2 threads, 10 reps; reports the best run)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "ops/ops.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *buf(int64_t n, float scale) {
  float *p = aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64));
  if (!p) {
    fprintf(stderr, "bench_kernels: out of memory\n");
    exit(1);
  }
  uint64_t s = 88172645463325252ull;
  for (int64_t i = 0; i < n; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    p[i] = scale * ((float)(s >> 40) * 0x1p-24f - 0.5f);
  }
  return p;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int g_reps = 10;
static double g_step_s = 0, g_step_flops = 0;

/* Runs `body` reps times (after one warm-up), prints the median; adds median * per_step to the
 * step estimate. flops: per call (0: a memory-bound kernel, prints GB/s from bytes instead). */
#define BENCH(name, per_step, flops, bytes, body)                                                          \
  do {                                                                                                     \
    double ts_[64];                                                                                        \
    body;                                                                                                  \
    for (int r_ = 0; r_ < g_reps; r_++) {                                                                  \
      double t0_ = now_s();                                                                                \
      body;                                                                                                \
      ts_[r_] = now_s() - t0_;                                                                             \
    }                                                                                                      \
    qsort(ts_, (size_t)g_reps, sizeof(double), cmpd);                                                      \
    double t_ = ts_[0]; /* best: the machine is shared, slower runs measure the neighbours */                                                                           \
    if ((flops) > 0)                                                                                       \
      printf("  %-44s %9.3f ms  %7.1f GFLOP/s  x%-3d\n", name, 1e3 * t_, (flops) / t_ * 1e-9, per_step);   \
    else                                                                                                   \
      printf("  %-44s %9.3f ms  %7.1f GB/s     x%-3d\n", name, 1e3 * t_, (bytes) / t_ * 1e-9, per_step);   \
    g_step_s += t_ * (per_step);                                                                           \
    g_step_flops += (flops) * (per_step);                                                                  \
  } while (0)

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  g_reps = argc > 2 ? atoi(argv[2]) : 10;
  if (g_reps < 1) g_reps = 1;
  if (g_reps > 64) g_reps = 64;
  rt_set_threads(threads);
  printf("BLAS: %s\n", rt_blas_name());
  for (int th = 1; th <= threads; th++)
    printf("fp32 FMA peak, %d thread%s: %7.1f GFLOP/s (FMA loop)  %7.1f GFLOP/s (sgemm 2048^3)\n", th,
           th > 1 ? "s" : " ", rt_measure_peak_flops(th, 0.3) * 1e-9, rt_measure_sgemm_flops(th, 2048) * 1e-9);
  rt_set_threads(threads);
  double peak = rt_measure_peak_flops(threads, 0.3);

  const int64_t B = 4, T = 64, C = 768, H = 12, L = 12, V = 50257, Vp = 50304, BT = B * T, hd = C / H;
  const int64_t nparams = Vp * C + 1024 * C + L * (12 * C * C + 13 * C) + 2 * C; /* llm.c's 124,475,904 */
  printf("\nGPT-2 124M, B=%lld T=%lld, %d threads; best of %d (xN = calls per training step)\n", (long long)B,
         (long long)T, threads, g_reps);
  float *x = buf(BT * 4 * C, 1), *y = buf(BT * 4 * C, 1), *dy = buf(BT * 4 * C, 1), *dx = buf(BT * 4 * C, 1);
  float *w = buf(C * 4 * C, 0.05f), *dw = buf(C * 4 * C, 0), *bias = buf(4 * C, 1), *db = buf(4 * C, 0);
  float *wte = buf(Vp * C, 0.05f), *dwte = buf(Vp * C, 0), *logits = buf(BT * Vp, 4);
  float *qkv = buf(BT * 3 * C, 1), *q = buf(BT * C, 1), *k = buf(BT * C, 1), *v = buf(BT * C, 1);
  float *o = buf(BT * C, 1), *lse = buf(B * H * T, 0), *dq = buf(BT * C, 0), *dk = buf(BT * C, 0),
        *dv = buf(BT * C, 0);
  float *p = buf(nparams, 0.02f), *g = buf(nparams, 0.01f), *m = buf(nparams, 0), *vv = buf(nparams, 0);
  memset(vv, 0, (size_t)nparams * 4);
  int32_t *tok = malloc((size_t)BT * sizeof(int32_t));
  if (!tok) return 1;
  for (int64_t i = 0; i < BT; i++) tok[i] = (int32_t)((i * 7919) % V);
  size_t wsb = rt_norm_workspace_bytes(BT, C) + rt_xent_workspace_bytes(BT) + rt_rope_workspace_bytes(T, hd);
  void *ws = aligned_alloc(64, (wsb + 63) / 64 * 64);
  if (!ws) return 1;
  (void)qkv;

  printf(" GEMMs (forward, then backward dx and dW):\n");
  const struct {
    const char *name;
    int64_t k, n;
    int tw;
    int per_step;
  } lin[] = {{"qkv      256x768 @ 768x2304", C, 3 * C, 0, (int)L},
             {"attn out 256x768 @ 768x768", C, C, 0, (int)L},
             {"fc       256x768 @ 768x3072", C, 4 * C, 0, (int)L},
             {"fc proj  256x3072 @ 3072x768", 4 * C, C, 0, (int)L},
             {"lm head  256x768 @ wte^T (50304)", C, Vp, 1, 1}};
  for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
    int64_t kk = lin[i].k, nn = lin[i].n;
    const float *W = lin[i].tw ? wte : w;
    float *dW = lin[i].tw ? dwte : dw;
    float *out = lin[i].tw ? logits : y;
    double f = 2.0 * BT * kk * nn;
    char nm[96];
    snprintf(nm, sizeof nm, "%s fwd", lin[i].name);
    BENCH(nm, lin[i].per_step, f, 0, rt_linear_fwd(BT, kk, nn, lin[i].tw, x, W, lin[i].tw ? NULL : bias, out));
    snprintf(nm, sizeof nm, "%s dx", lin[i].name);
    BENCH(nm, lin[i].per_step, f, 0, rt_linear_dx(BT, kk, nn, lin[i].tw, lin[i].tw ? logits : dy, W, 0.0f, dx));
    snprintf(nm, sizeof nm, "%s dW", lin[i].name);
    BENCH(nm, lin[i].per_step, f, 0, rt_linear_dw(BT, kk, nn, lin[i].tw, x, lin[i].tw ? logits : dy, 0.0f, dW));
  }
  double gemm_s = g_step_s, gemm_flops = g_step_flops;

  printf(" other kernels:\n");
  double act = (double)BT * C * 4;
  BENCH("layernorm fwd 256x768", 2 * (int)L + 1, 0, 3 * act, rt_layernorm_fwd(BT, C, 1e-5f, x, w, bias, y, NULL, NULL));
  BENCH("layernorm bwd 256x768", 2 * (int)L + 1, 0, 5 * act,
        rt_layernorm_bwd(BT, C, 1e-5f, x, w, dy, dx, dw, db, 1.0f, ws));
  BENCH("gelu fwd 256x3072", (int)L, 0, 8 * act, rt_gelu_fwd(BT * 4 * C, x, y));
  BENCH("gelu bwd 256x3072", (int)L, 0, 12 * act, rt_gelu_bwd(BT * 4 * C, x, dy, dx));
  BENCH("bias grad sum_rows 256x3072", 2 * (int)L, 0, 4 * act, rt_sum_rows(BT, 4 * C, dy, 1.0f, db));
  /* what the compiled trainer calls for a bias's and the position embedding's gradient (x0: counted
   * once, in the line above) */
  BENCH("bias grad rt_reduce_to_f32 256x3072 (trainer)", 0, 0, 4 * act,
        rt_reduce_to_f32(db, &(RtShape){1, {4 * C}}, dy, &(RtShape){3, {B, T, 4 * C}}));
  BENCH("wpe grad rt_reduce_to_f32 4x64x768 (trainer)", 0, 0, act,
        rt_reduce_to_f32(y, &(RtShape){2, {T, C}}, dy, &(RtShape){3, {B, T, C}}));
  BENCH("residual add 256x768", 2 * (int)L + 2 * (int)L, 0, 3 * act, rt_add(BT * C, x, dy, y));
  /* attention on q, k, v laid out [B, T, C] (the codegen slices qkv) */
  double attf = 4.0 * B * H * T * T * hd / 2; /* causal: half of QK^T and PV */
  BENCH("attention fwd B4 T64 H12 hd64 causal", (int)L, attf, 0, rt_sdpa_fwd(B, T, T, H, H, hd, 1, q, k, v, o, lse));
  BENCH("attention bwd", (int)L, 2 * attf, 0, rt_sdpa_bwd(B, T, T, H, H, hd, 1, q, k, v, o, lse, dy, dq, dk, dv));
  BENCH("xent fwd+bwd in place 256x50304 (len 50257)", 1, 0, 2.0 * BT * Vp * 4,
        rt_xent_fwd_bwd(BT, Vp, V, logits, tok, 1.0f, logits, ws));
  BENCH("embed fwd 256 tokens (wte + wpe)", 2, 0, 2.0 * BT * C * 4, rt_embed_fwd(BT, Vp, C, wte, tok, y));
  BENCH("embed bwd 256 tokens (accumulate)", 2, 0, 3.0 * BT * C * 4, rt_embed_bwd(BT, Vp, C, tok, dy, 1, dwte));
  BENCH("rope 4x64, 12 heads hd 64 (Llama's q, k; x0)", 0, 0, 2 * act, /* (not in GPT-2: outside the step's sum) */
        rt_rope(B, T, H, hd, 10000.0, 0, 0, x, y, (char *)ws + rt_norm_workspace_bytes(BT, C) + rt_xent_workspace_bytes(BT)));
  BENCH("sumsq of all grads (124M)", 1, 0, 4.0 * nparams, rt_sumsq(nparams, g));
  BENCH("AdamW over 124M params", 1, 0, 7.0 * 4 * nparams,
        rt_adamw(nparams, p, g, m, vv, 1e-4f, 1.0f, 1, 0.9f, 0.95f, 1e-8f, 0.0f));

  /* model FLOPs per step: 6 N per token plus attention (llm.c / PaLM convention: 12 L T C per token) */
  double model_flops = (6.0 * (double)nparams + 12.0 * L * T * C) * (double)BT;
  printf("\n GEMMs per step: %.1f ms (%.1f GFLOP, %.1f GFLOP/s)\n", 1e3 * gemm_s, gemm_flops * 1e-9,
         gemm_flops / gemm_s * 1e-9);
  printf(" kernel sum per step: %.1f ms (non-GEMM %.1f ms)\n", 1e3 * g_step_s, 1e3 * (g_step_s - gemm_s));
  printf(" model FLOPs per step %.1f GFLOP; at the kernel sum: %.0f tokens/s, MFU %.1f %% of %.1f GFLOP/s\n",
         model_flops * 1e-9, (double)BT / g_step_s, 100.0 * model_flops / g_step_s / peak, peak * 1e-9);
  free(x), free(y), free(dy), free(dx), free(w), free(dw), free(bias), free(db), free(wte), free(dwte);
  free(logits), free(qkv), free(q), free(k), free(v), free(o), free(lse), free(dq), free(dk), free(dv);
  free(p), free(g), free(m), free(vv), free(tok), free(ws);
  return 0;
}
