/* tests/codegen/test_ce_parts.c — the cross-entropy-in-parts kernels (runtime/kernels/ce.c)
 * against their naive references (ref.c), and composed over a simulated vocab split against
 * the fused cross-entropy (xent.c) of the whole logits.
 *
 * Tolerances: ce_max is exact (a max); ce_sums, ce_grad use rt_fexp (relative error < 2e-7) and
 * fp32 sums of up to V terms: |rel| <= 2e-5 against the double references; ce_loss sums in
 * double like its reference: |rel| <= 1e-6. Composed over a 3-way split, the mean loss and the
 * gradients against rt_xent_fwd_bwd_ref: loss |rel| <= 1e-5, gradients |err| <= 1e-5 * max|g|.
 * Thread independence: 1 and 2 threads give identical bits.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/ref.h"

static int failures;

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double urand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) * 0x1p-53;
}

static float *fbuf(int64_t n) {
  float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
  if (!p) exit(2);
  return p;
}

static void check(const char *what, const float *got, const float *want, int64_t n, double atol, double rtol) {
  int64_t bad = 0, wi = 0;
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - (double)want[i]), lim = atol + rtol * fabs((double)want[i]);
    if (!(e <= lim) && !(isinf(got[i]) && got[i] == want[i])) {
      if (e / lim > worst || !bad) worst = e / lim, wi = i;
      bad++;
    }
  }
  if (bad) {
    failures++;
    printf("FAIL %-36s %lld/%lld outside atol %.1e rtol %.1e; worst [%lld] got %.9g want %.9g\n", what, (long long)bad,
           (long long)n, atol, rtol, (long long)wi, got[wi], want[wi]);
  } else {
    printf("ok   %-36s n=%lld (atol %.1e, rtol %.1e)\n", what, (long long)n, atol, rtol);
  }
}

/* One shard: columns [lo, lo + V) of logits x [N, VL]; the logical valid vocabulary is len. */
static void test_parts(int64_t N, int64_t V, int64_t lo, int64_t len) {
  int64_t nv = len - lo < 0 ? 0 : len - lo > V ? V : len - lo;
  float *x = fbuf(N * V), *m = fbuf(N), *mr = fbuf(N), *st = fbuf(2 * N), *str = fbuf(2 * N);
  float *d = fbuf(N * V), *dr = fbuf(N * V), out[2], outr[2];
  int32_t *t = calloc((size_t)N, sizeof *t);
  for (int64_t i = 0; i < N * V; i++) x[i] = (float)(12 * urand() - 6);
  for (int64_t r = 0; r < N; r++) t[r] = (int32_t)(urand() * len);
  t[1] = -1, t[2] = (int32_t)(lo < len ? lo : len - 1), t[3] = (int32_t)(nv > 0 ? lo + nv - 1 : 0);
  for (int64_t r = 0; r < N; r++)
    for (int64_t j = nv; j < V; j++) x[r * V + j] = 1e4f; /* padding must not count */
  char what[96];
  rt_ce_max(N, V, nv, x, m);
  rt_ce_max_ref(N, V, nv, x, mr);
  snprintf(what, sizeof what, "ce_max lo=%lld nv=%lld", (long long)lo, (long long)nv);
  check(what, m, mr, N, 0, 0);
  if (nv == 0) /* a shard of padding only: the sums still need a finite max (the all-reduced one) */
    for (int64_t r = 0; r < N; r++) m[r] = mr[r] = 1.0f;
  rt_ce_sums(N, V, nv, lo, x, t, m, st);
  rt_ce_sums_ref(N, V, nv, lo, x, t, mr, str);
  snprintf(what, sizeof what, "ce_sums lo=%lld nv=%lld", (long long)lo, (long long)nv);
  check(what, st, str, 2 * N, 1e-30, 2e-5);
  for (int64_t r = 0; r < N; r++) st[2 * r] += 0.5f, str[2 * r] += 0.5f; /* other shards' share: keeps log finite */
  int64_t e1 = rt_ce_loss(N, len, st, m, t, out), e2 = rt_ce_loss_ref(N, len, str, mr, t, outr);
  if (e1 != -1 || e2 != -1) failures++, printf("FAIL ce_loss reported a bad target\n");
  snprintf(what, sizeof what, "ce_loss lo=%lld nv=%lld", (long long)lo, (long long)nv);
  check(what, out, outr, 2, 0, 1e-6);
  rt_ce_grad(N, V, nv, lo, x, t, m, st, 0.37f, d);
  rt_ce_grad_ref(N, V, nv, lo, x, t, mr, str, 0.37f, dr);
  snprintf(what, sizeof what, "ce_grad lo=%lld nv=%lld", (long long)lo, (long long)nv);
  check(what, d, dr, N * V, 1e-9, 2e-5);
  float *xi = fbuf(N * V);
  memcpy(xi, x, (size_t)(N * V) * sizeof(float));
  rt_ce_grad(N, V, nv, lo, xi, t, m, st, 0.37f, xi); /* in place */
  check("ce_grad in place", xi, d, N * V, 0, 0);
  t[5] = (int32_t)len; /* out of range target */
  if (rt_ce_loss(N, len, st, m, t, out) != 5) failures++, printf("FAIL ce_loss missed target %lld >= len\n", (long long)len);
  /* thread independence */
  float *d1 = fbuf(N * V), *st1 = fbuf(2 * N);
  t[5] = 0;
  rt_set_threads(1);
  rt_ce_sums(N, V, nv, lo, x, t, m, st1);
  rt_ce_grad(N, V, nv, lo, x, t, m, str, 0.37f, d1);
  rt_set_threads(2);
  rt_ce_sums(N, V, nv, lo, x, t, m, st);
  rt_ce_grad(N, V, nv, lo, x, t, m, str, 0.37f, d);
  if (memcmp(d1, d, (size_t)(N * V) * sizeof(float)) || memcmp(st1, st, (size_t)(2 * N) * sizeof(float)))
    failures++, printf("FAIL ce parts differ between 1 and 2 threads\n");
  free(x), free(m), free(mr), free(st), free(str), free(d), free(dr), free(t), free(xi), free(d1), free(st1);
}

/* The parts over a K-way split (max and sums reduced across shards as the all-reduces would)
 * equal the fused cross-entropy of the whole logits. */
static void test_composed(int64_t N, int64_t VL, int K, int64_t len) {
  int64_t V = VL / K;
  float *x = fbuf(N * VL), *dref = fbuf(N * VL), *d = fbuf(N * VL);
  int32_t *t = calloc((size_t)N, sizeof *t);
  for (int64_t i = 0; i < N * VL; i++) x[i] = (float)(10 * urand() - 5);
  for (int64_t r = 0; r < N; r++) t[r] = r % 7 == 3 ? -1 : (int32_t)(urand() * len);
  float Lref = rt_xent_fwd_bwd_ref(N, VL, len, x, t, 1.0f, dref);
  float *xs = fbuf(N * V), *m = fbuf(N), *mk = fbuf(N), *st = fbuf(2 * N), *stk = fbuf(2 * N), *dk = fbuf(N * V);
  for (int64_t r = 0; r < N; r++) m[r] = -INFINITY;
  for (int k = 0; k < K; k++) { /* all-reduce max */
    for (int64_t r = 0; r < N; r++) memcpy(xs + r * V, x + r * VL + k * V, (size_t)V * sizeof(float));
    int64_t lo = k * V, nv = len - lo < 0 ? 0 : len - lo > V ? V : len - lo;
    rt_ce_max(N, V, nv, xs, mk);
    for (int64_t r = 0; r < N; r++) m[r] = mk[r] > m[r] ? mk[r] : m[r];
  }
  for (int k = 0; k < K; k++) { /* all-reduce sum */
    for (int64_t r = 0; r < N; r++) memcpy(xs + r * V, x + r * VL + k * V, (size_t)V * sizeof(float));
    int64_t lo = k * V, nv = len - lo < 0 ? 0 : len - lo > V ? V : len - lo;
    rt_ce_sums(N, V, nv, lo, xs, t, m, stk);
    for (int64_t i = 0; i < 2 * N; i++) st[i] += stk[i];
  }
  float out[2];
  rt_ce_loss(N, len, st, m, t, out);
  float L = out[0] / out[1];
  check("composed loss vs fused xent", &L, &Lref, 1, 0, 1e-5);
  for (int k = 0; k < K; k++) {
    for (int64_t r = 0; r < N; r++) memcpy(xs + r * V, x + r * VL + k * V, (size_t)V * sizeof(float));
    int64_t lo = k * V, nv = len - lo < 0 ? 0 : len - lo > V ? V : len - lo;
    rt_ce_grad(N, V, nv, lo, xs, t, m, st, 1.0f / out[1], dk);
    for (int64_t r = 0; r < N; r++) memcpy(d + r * VL + k * V, dk + r * V, (size_t)V * sizeof(float));
  }
  double mx = 0;
  for (int64_t i = 0; i < N * VL; i++) mx = fmax(mx, fabs(dref[i]));
  check("composed grads vs fused xent", d, dref, N * VL, 1e-5 * mx, 0);
  free(x), free(dref), free(d), free(t), free(xs), free(m), free(mk), free(st), free(stk), free(dk);
}

int main(void) {
  rt_set_threads(2);
  test_parts(37, 515, 0, 1000);    /* a full shard */
  test_parts(37, 515, 515, 1000);  /* a shard ending in padding */
  test_parts(9, 64, 128, 100);     /* a shard of padding only */
  test_parts(21, 333, 333, 0 + 666); /* len = the whole logical vocab */
  test_composed(29, 1032, 3, 1000);
  test_composed(16, 256, 2, 256);
  if (failures) printf("test_ce_parts: %d FAILED\n", failures);
  return failures ? 1 : 0;
}
