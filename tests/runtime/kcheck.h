/* tests/runtime/kcheck.h — the checks shared by test_kernels.c and test_attn.c: random buffers,
 * elementwise comparisons with stated tolerances (and that they reject a result bent by a given
 * relative error), bitwise equality, central finite differences. Failures set g_fail. */
#ifndef SHARDC_TESTS_KCHECK_H
#define SHARDC_TESTS_KCHECK_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_fail = 0;

/* ---- helpers --------------------------------------------------------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static inline double urand(void) { /* [0, 1) */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) * 0x1p-53;
}
static inline float *fbuf(int64_t n, double lo, double hi) {
  float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  for (int64_t i = 0; i < n; i++) p[i] = (float)(lo + (hi - lo) * urand());
  return p;
}
static inline float *fcopy(const float *x, int64_t n) {
  float *p = fbuf(n, 0, 0);
  memcpy(p, x, (size_t)n * sizeof(float));
  return p;
}
static inline void *wsbuf(size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) exit(2);
  return p;
}

/* Elements outside |got - want| <= atol + rtol * |want|; the worst one (by error / limit) in *wi. */
static inline int64_t count_bad(const float *got, const float *want, int64_t n, double atol, double rtol, int64_t *wi) {
  double worst = 0;
  int64_t bad = 0;
  *wi = -1;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - (double)want[i]), lim = atol + rtol * fabs((double)want[i]);
    if (!(e <= lim)) {
      bad++;
      if (*wi < 0 || e / lim > worst) {
        worst = e / lim;
        *wi = i;
      }
    }
  }
  return bad;
}

/* |got - want| <= atol + rtol * |want| for every element. */
static inline void check(const char *what, const float *got, const float *want, int64_t n, double atol, double rtol) {
  int64_t wi, bad = count_bad(got, want, n, atol, rtol, &wi);
  if (bad) {
    g_fail = 1;
    printf("FAIL %-34s %lld/%lld outside atol %.1e rtol %.1e; worst [%lld] got %.9g want %.9g\n", what,
           (long long)bad, (long long)n, atol, rtol, (long long)wi, got[wi], want[wi]);
  } else {
    printf("ok   %-34s n=%lld (atol %.1e, rtol %.1e)\n", what, (long long)n, atol, rtol);
  }
}

/* The power of a check: got perturbed by a relative `rel` (got * (1 + rel)) must fail it. A
 * tolerance that lets such an error through cannot catch a real bug. */
static inline void check_power(const char *what, const float *got, const float *want, int64_t n, double atol,
                               double rtol, double rel) {
  float *bent = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!bent) exit(2);
  for (int64_t i = 0; i < n; i++) bent[i] = (float)((double)got[i] * (1.0 + rel));
  int64_t wi, bad = count_bad(bent, want, n, atol, rtol, &wi);
  if (!bad) {
    g_fail = 1;
    printf("FAIL %-34s a relative error of %.0e passes atol %.1e rtol %.1e\n", what, rel, atol, rtol);
  } else {
    printf("ok   %-34s a relative error of %.0e fails %lld/%lld\n", what, rel, (long long)bad, (long long)n);
  }
  free(bent);
}

/* Scaled check for gradients: |got - want| <= tol * max(1e-3, max |want|). */
static inline void check_scaled(const char *what, const float *got, const float *want, int64_t n, double tol) {
  double mx = 1e-3;
  for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs((double)want[i]));
  check(what, got, want, n, tol * mx, 0.0);
}

static inline void check_bits(const char *what, const void *a, const void *b, size_t bytes) {
  if (memcmp(a, b, bytes)) {
    g_fail = 1;
    printf("FAIL %-34s differs bitwise between 1 and 2 threads\n", what);
  } else {
    printf("ok   %-34s bitwise equal with 1 and 2 threads\n", what);
  }
}

static inline void check_scalar(const char *what, double got, double want, double atol, double rtol) {
  float g = (float)got, w = (float)want;
  if (!(fabs(got - want) <= atol + rtol * fabs(want))) {
    g_fail = 1;
    printf("FAIL %-34s got %.9g want %.9g (atol %.1e rtol %.1e)\n", what, got, want, atol, rtol);
  } else {
    (void)g;
    (void)w;
    printf("ok   %-34s %.9g (atol %.1e, rtol %.1e)\n", what, got, atol, rtol);
  }
}

/* Finite differences: for a scalar function f of a float array, central differences at `npts`
 * random entries, compared with the analytic gradient g. L is evaluated in double. */
typedef double (*LossFn)(void *ctx);
static inline void check_fd(const char *what, LossFn f, void *ctx, float *x, int64_t n, const float *g, int npts,
                            double h, double tol) {
  float *num = fbuf(npts, 0, 0), *ana = fbuf(npts, 0, 0);
  double mx = 1e-3;
  for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs((double)g[i]));
  for (int p = 0; p < npts; p++) {
    int64_t i = (int64_t)(urand() * (double)n);
    float x0 = x[i];
    x[i] = (float)(x0 + h);
    double xp = x[i], lp = f(ctx);
    x[i] = (float)(x0 - h);
    double xm = x[i], lm = f(ctx);
    x[i] = x0;
    num[p] = (float)((lp - lm) / (xp - xm));
    ana[p] = g[i];
  }
  check(what, ana, num, npts, tol * mx, 0.0);
  free(num);
  free(ana);
}

static inline double dotd(const float *a, const float *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
  return s;
}


#endif
