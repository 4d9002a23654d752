/* tests/runtime/test_gemm_bf16.c — rt_matmul_bf16 (runtime/ops/gemm_dnnl.c, `precision bf16` on
 * the CPU target) against a naive double reference on the bf16-rounded inputs. Label: kernels.
 *
 * Every transpose pair, odd shapes, batched and shared B (B broadcast over A's batch, with and
 * without A^T), K up to 3072 (GPT-2's MLP). The reference rounds A and B to bf16 by arithmetic
 * (rt_f32_to_bf16_ref) and sums their products in double. Tolerance: the products of two bf16
 * values are exact in f32, so the only errors are the f32 accumulation's and the f32 store's; any
 * order of summing K terms is within (K - 1) u sum|a b| of the exact sum (u = 2^-24), plus u |y|
 * for the store:   |y - ref| <= K u sum_k |a_ik b_kj| + u |ref|   (rigorous, not a fit).
 * An f32 GEMM on the unrounded inputs misses it by 2^-9 relative on one product, which the
 * one-element case below (K = 1, a = 1 + 2^-10) catches exactly. On a CPU with avx512_bf16 the
 * oneDNN build must run oneDNN's avx512_core_bf16 kernels (the implementation's name is checked).
 * rt_matmul_bf16_in with either operand or both given in bf16 (rounded by rt_cvt_f32_bf16 before
 * the call, as the compiled step's weight copies) must give bitwise the same result.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/ref.h"
#include "ops.h"

static int g_fail;

static float bf(float x) {
  uint16_t h = rt_f32_to_bf16_ref(x);
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float urand(void) { /* uniform in [-1, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 4503599627370496.0 - 1.0);
}

static void check(int64_t batch, int64_t m, int64_t n, int64_t k, int ta, int tb, int b_batched) {
  int64_t bb = b_batched ? batch : 1;
  float *a = malloc(sizeof(float) * (size_t)(batch * m * k)), *b = malloc(sizeof(float) * (size_t)(bb * k * n));
  float *y = malloc(sizeof(float) * (size_t)(batch * m * n)), *y2 = malloc(sizeof(float) * (size_t)(batch * m * n));
  for (int64_t i = 0; i < batch * m * k; i++) a[i] = urand() * 3.0f;
  for (int64_t i = 0; i < bb * k * n; i++) b[i] = urand() * 0.5f;
  rt_matmul_bf16(y, a, b, batch, m, n, k, ta, tb, b_batched);
  rt_matmul_bf16(y2, a, b, batch, m, n, k, ta, tb, b_batched); /* the cached primitive */
  double worst = 0; /* the largest error as a fraction of the bound */
  int64_t bad = 0;
  for (int64_t p = 0; p < batch; p++) {
    const float *A = a + p * m * k, *B = b + (p % bb) * k * n;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = 0, sa = 0;
        for (int64_t l = 0; l < k; l++) {
          double x = bf(ta ? A[l * m + i] : A[i * k + l]), w = bf(tb ? B[j * k + l] : B[l * n + j]);
          s += x * w;
          sa += fabs(x * w);
        }
        double got = y[(p * m + i) * n + j];
        double tol = (double)k * ldexp(1.0, -24) * sa + ldexp(1.0, -24) * fabs(s) + 1e-30;
        double e = fabs(got - s) / tol;
        if (e > worst) worst = e;
        if (!(e <= 1.0) && bad++ < 3)
          printf("     [%lld,%lld,%lld] got %.9g want %.9g (tol %.3g)\n", (long long)p, (long long)i, (long long)j,
                 got, s, tol);
      }
  }
  int same = memcmp(y, y2, sizeof(float) * (size_t)(batch * m * n)) == 0;
  /* an operand given in bf16 (the compiled step's once-per-step copy, rt_cvt_f32_bf16): bitwise the
   * same as rounding it in the call, for A, B and both */
  uint16_t *a16 = malloc(2 * (size_t)(batch * m * k)), *b16 = malloc(2 * (size_t)(bb * k * n));
  rt_cvt_f32_bf16(batch * m * k, a, a16);
  rt_cvt_f32_bf16(bb * k * n, b, b16);
  int pre_same = 1;
  for (int w = 1; w < 4; w++) {
    memset(y2, 0xff, sizeof(float) * (size_t)(batch * m * n));
    rt_matmul_bf16_in(y2, w & 1 ? (const void *)a16 : a, w & 1, w & 2 ? (const void *)b16 : b, (w & 2) != 0, batch, m, n,
                      k, ta, tb, b_batched);
    pre_same &= memcmp(y, y2, sizeof(float) * (size_t)(batch * m * n)) == 0;
  }
  free(a16);
  free(b16);
  /* y = c + the product (passes/gacc.c: the weight gradient accumulated into its running sum): in
   * place and from c elsewhere, the same bits; each within the product's bound plus c's rounding */
  float *c = malloc(sizeof(float) * (size_t)(batch * m * n)), *y3 = malloc(sizeof(float) * (size_t)(batch * m * n));
  for (int64_t i = 0; i < batch * m * n; i++) y2[i] = c[i] = urand() * (float)k;
  rt_matmul_bf16_acc_in(y2, y2, a, 0, b, 0, batch, m, n, k, ta, tb, b_batched);
  memset(y3, 0xff, sizeof(float) * (size_t)(batch * m * n));
  rt_matmul_bf16_acc_in(y3, c, a, 0, b, 0, batch, m, n, k, ta, tb, b_batched);
  int acc_same = memcmp(y2, y3, sizeof(float) * (size_t)(batch * m * n)) == 0;
  int64_t acc_bad = 0;
  for (int64_t p = 0; p < batch; p++) {
    const float *A = a + p * m * k, *B = b + (p % bb) * k * n;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        int64_t at = (p * m + i) * n + j;
        double s = c[at], sa = fabs(c[at]);
        for (int64_t l = 0; l < k; l++) {
          double x = bf(ta ? A[l * m + i] : A[i * k + l]), w = bf(tb ? B[j * k + l] : B[l * n + j]);
          s += x * w;
          sa += fabs(x * w);
        }
        double tol = (double)(k + 1) * ldexp(1.0, -24) * sa + ldexp(1.0, -24) * fabs(s) + 1e-30;
        if (!(fabs(y2[at] - s) <= tol) && acc_bad++ < 3)
          printf("     acc [%lld,%lld,%lld] got %.9g want %.9g (tol %.3g)\n", (long long)p, (long long)i, (long long)j,
                 y2[at], s, tol);
      }
  }
  free(c);
  free(y3);
  bad += acc_bad;
  same &= acc_same;
  char name[96];
  snprintf(name, sizeof name, "b%lld %lldx%lldx%lld ta%d tb%d %s", (long long)batch, (long long)m, (long long)n,
           (long long)k, ta, tb, b_batched ? "batched B" : "shared B");
  if (bad || !same || !pre_same) {
    printf("FAIL %-40s %lld outside the bound%s%s\n", name, (long long)bad, same ? "" : "; second run differs",
           pre_same ? "" : "; a bf16 operand differs from rounding in the call");
    g_fail = 1;
  } else {
    printf("ok   %-40s max err %.3f of the bound\n", name, worst);
  }
  free(a);
  free(b);
  free(y);
  free(y2);
}

static int cpu_has(const char *flag) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return 0;
  char line[8192];
  int has = 0;
  while (!has && fgets(line, sizeof line, f))
    if (!strncmp(line, "flags", 5)) {
      char *p = line;
      size_t n = strlen(flag);
      while ((p = strstr(p, flag)))
        if ((p[-1] == ' ' || p[-1] == '\t') && (p[n] == ' ' || p[n] == '\n')) {
          has = 1;
          break;
        } else {
          p += n;
        }
    }
  fclose(f);
  return has;
}

int main(void) {
  rt_set_threads(2);
  static const int64_t shapes[][4] = {/* batch, m, n, k */
                                      {1, 1, 1, 1},   {1, 7, 13, 5},    {1, 33, 65, 129}, {1, 127, 3, 257},
                                      {3, 5, 9, 17},  {2, 64, 64, 64},  {1, 64, 96, 3072}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        check(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], ta, tb, 0);
        if (shapes[s][0] > 1) check(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], ta, tb, 1);
      }
  /* the inputs are rounded to bf16: (1 + 2^-10) * 1 is 1 in bf16 (an f32 GEMM gives 1 + 2^-10) */
  float a1 = 1.0f + 0x1p-10f, b1 = 1.0f, y1 = 0;
  rt_matmul_bf16(&y1, &a1, &b1, 1, 1, 1, 1, 0, 0, 0);
  if (y1 != 1.0f) {
    printf("FAIL inputs rounded to bf16: (1 + 2^-10) * 1 = %.9g, want 1\n", y1);
    g_fail = 1;
  } else {
    printf("ok   inputs rounded to bf16\n");
  }
  const char *impl = rt_matmul_bf16_impl();
  printf("     implementation: %s\n", impl);
  int dnnl = strncmp(impl, "f32 sgemm", 9) != 0;
  if (dnnl && cpu_has("avx512_bf16") && !strstr(impl, "avx512_core_bf16")) {
    printf("FAIL the CPU has avx512_bf16 but oneDNN ran %s\n", impl);
    g_fail = 1;
  }
  if (g_fail) printf("test_gemm_bf16: FAILED\n");
  return g_fail;
}
