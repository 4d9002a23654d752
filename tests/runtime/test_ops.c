/* tests/runtime/test_ops.c — the generic elementwise ops (runtime/ops/ops.c: rt_unary_f32,
 * rt_binary_f32, whose loops are runtime/kernels/glue.c) against naive double references written
 * here with libm (exp, log, tanh, sqrt).
 *
 * Shapes are odd on purpose: 1, 7, 17 and 100003 elements (vector bodies and scalar tails, one
 * thread and several), a bias over rows of 17 and of 1, a per-row column [r, 1] (the general
 * broadcast path), scalars on either side, both operands scalars, and the output written over an
 * input (in place).
 *
 * Also rt_reduce_to_f32, bitwise against the summation order it promises (test_reduce_to).
 *
 * Tolerance (f32): |got - ref| <= 1e-6 (1 + |ref|) per element. The kernels' e^x is a degree-6
 * polynomial (relative error < 2e-7, runtime/kernels/fastmath.h), tanh and sigmoid are built on it
 * (absolute error ~1e-7), and each f32 op rounds (6e-8); a GELU chains a handful of them. Exits 1
 * on any element beyond it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

#define TOL 1e-6

static int failures;
static unsigned rng = 777;
static float rnd(float lo, float hi) {
  rng = rng * 1103515245u + 12345u;
  return lo + (hi - lo) * (float)((rng >> 8) & 0xffff) / 65535.0f;
}
static float *buf(int64_t n, float lo, float hi) {
  float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
  if (!p) abort();
  for (int64_t i = 0; i < n; i++) p[i] = rnd(lo, hi);
  return p;
}
static int64_t numel(const RtShape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n *= s->dim[i];
  return n;
}

static void check(const char *what, int64_t n, const float *got, const double *want) {
  int64_t bad = 0, at = -1;
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs(got[i] - want[i]) / (1 + fabs(want[i]));
    if (!(e <= TOL)) bad++, at = at < 0 ? i : at;
    if (e > worst) worst = e;
  }
  printf("%-36s n=%-7lld worst %.2e%s\n", what, (long long)n, worst, bad ? "  FAIL" : "");
  if (bad) {
    printf("  %lld beyond %.0e; first at %lld: got %.9g, want %.9g\n", (long long)bad, TOL, (long long)at, got[at],
           want[at]);
    failures++;
  }
}

static double unary_ref(int op, double v, double s) {
  switch (op) {
  case RT_NEG: return -v;
  case RT_SCALE: return s * v;
  case RT_ADD_SCALAR: return v + s;
  case RT_EXP: return exp(v);
  case RT_LOG: return log(v);
  case RT_SQRT: return sqrt(v);
  case RT_RSQRT: return 1 / sqrt(v);
  case RT_TANH: return tanh(v);
  case RT_SIGMOID: return 1 / (1 + exp(-v));
  case RT_RELU: return v > 0 ? v : 0;
  case RT_GELU: return 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  case RT_SILU: return v / (1 + exp(-v));
  default: return v;
  }
}

static void test_unary(void) {
  static const char *names[] = {"neg", "scale", "add_scalar", "exp", "log", "sqrt", "rsqrt",
                                "tanh", "sigmoid", "relu", "gelu", "silu", "copy"};
  static const int64_t ns[] = {1, 7, 17, 100003};
  for (int op = RT_NEG; op <= RT_COPY; op++)
    for (int k = 0; k < 4; k++) {
      int64_t n = ns[k];
      int positive = op == RT_LOG || op == RT_SQRT || op == RT_RSQRT;
      float *x = buf(n, positive ? 0.01f : -9.0f, 9.0f), *y = buf(n, 0, 0), s = 0.37f;
      double *want = malloc((size_t)n * sizeof(double));
      for (int64_t i = 0; i < n; i++) want[i] = unary_ref(op, x[i], s);
      rt_unary_f32(op, y, x, n, s);
      char what[64];
      snprintf(what, sizeof what, "unary %s", names[op]);
      check(what, n, y, want);
      if (k == 3) { /* in place */
        rt_unary_f32(op, x, x, n, s);
        snprintf(what, sizeof what, "unary %s, in place", names[op]);
        check(what, n, x, want);
      }
      free(x), free(y), free(want);
    }
}

/* The broadcast index of output element i into an operand of shape s (numpy rules). */
static int64_t bindex(const RtShape *out, const RtShape *s, int64_t i) {
  int64_t idx = 0, stride = 1;
  for (int d = out->rank - 1; d >= 0; d--) {
    int64_t c = i % out->dim[d];
    i /= out->dim[d];
    int sd = d - (out->rank - s->rank);
    if (sd < 0) continue;
    if (s->dim[sd] != 1) idx += c * stride;
    stride *= s->dim[sd];
  }
  return idx;
}

static double binary_ref(int op, double a, double b) {
  float fa = (float)a, fb = (float)b;
  switch (op) {
  case RT_ADD: return a + b;
  case RT_SUB: return a - b;
  case RT_MUL: return a * b;
  case RT_DIV: return a / b;
  case RT_MAXIMUM: return fa > fb ? a : b;
  default: return fa < fb ? a : b;
  }
}

static void binary_case(const char *what, RtShape ys, RtShape as, RtShape bs, int inplace) {
  static const char *names[] = {"add", "sub", "mul", "div", "maximum", "minimum"};
  int64_t n = numel(&ys), na = numel(&as), nb = numel(&bs);
  for (int op = RT_ADD; op <= RT_MINIMUM; op++) {
    float *a = buf(na, -3, 3), *b = buf(nb, op == RT_DIV ? 0.5f : -3, 3), *y = buf(n, 0, 0);
    double *want = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) want[i] = binary_ref(op, a[bindex(&ys, &as, i)], b[bindex(&ys, &bs, i)]);
    float *out = inplace ? a : y;
    rt_binary_f32(op, out, &ys, a, &as, b, &bs);
    char w[96];
    snprintf(w, sizeof w, "%s %s", names[op], what);
    check(w, n, out, want);
    free(a), free(b), free(y), free(want);
  }
}

static RtShape shp(int rank, int64_t d0, int64_t d1, int64_t d2) { return (RtShape){rank, {d0, d1, d2}}; }

static void test_binary(void) {
  static const int64_t ns[] = {1, 7, 17, 100003};
  for (int k = 0; k < 4; k++) {
    RtShape s = shp(1, ns[k], 0, 0);
    binary_case("full, full", s, s, s, 0);
    binary_case("scalar, full", s, shp(0, 0, 0, 0), s, 0);
    binary_case("full, scalar", s, s, shp(1, 1, 0, 0), 0);
  }
  binary_case("full, full, in place", shp(1, 100003, 0, 0), shp(1, 100003, 0, 0), shp(1, 100003, 0, 0), 1);
  binary_case("[37,17] + bias [17]", shp(2, 37, 17, 0), shp(2, 37, 17, 0), shp(1, 17, 0, 0), 0);
  binary_case("[3000,37] + bias [1,37], in place", shp(2, 3000, 37, 0), shp(2, 3000, 37, 0), shp(2, 1, 37, 0), 1);
  binary_case("bias [17] + [37,17]", shp(2, 37, 17, 0), shp(1, 17, 0, 0), shp(2, 37, 17, 0), 0);
  binary_case("[5,1] rows of 1 + bias [1]", shp(2, 5, 1, 0), shp(2, 5, 1, 0), shp(1, 1, 0, 0), 0);
  binary_case("[6,6] + column [6,1]", shp(2, 6, 6, 0), shp(2, 6, 6, 0), shp(2, 6, 1, 0), 0);
  binary_case("[4,3,5] + [3,1]", shp(3, 4, 3, 5), shp(3, 4, 3, 5), shp(2, 3, 1, 0), 0);
  binary_case("scalar, scalar", shp(0, 0, 0, 0), shp(0, 0, 0, 0), shp(0, 0, 0, 0), 0);
}

/* rt_reduce_to_f32 (a broadcast's gradient) against the order it promises, bitwise: a bias (y = x's
 * last dim) summed per column in double over the rows in order; y = x's trailing dims (a position
 * embedding) and the general path summed in f32 in x's order. Column blocks with tails (300 > 256),
 * threads (196608 elements), leading 1s in y, a per-row column (the general path). */
static void reduce_case(const char *what, RtShape ys, RtShape xs) {
  int64_t n = numel(&xs), ny = numel(&ys), inner = ys.dim[ys.rank - 1];
  float *x = buf(n, -2, 2), *y = buf(ny, 0, 0), *want = buf(ny, 0, 0);
  int64_t first = 0; /* ys's dims without leading 1s, right-aligned to xs */
  while (first < ys.rank && ys.dim[first] == 1) first++;
  int bias = ny == inner && xs.dim[xs.rank - 1] == inner;
  if (bias) {
    for (int64_t c = 0; c < inner; c++) {
      double acc = 0;
      for (int64_t r = 0; r < n / inner; r++) acc += x[r * inner + c];
      want[c] = (float)acc;
    }
  } else {
    for (int64_t i = 0; i < n; i++) { /* x's index i -> y's: the dims y keeps, by broadcasting */
      int64_t rem = i, iy = 0, mul = 1;
      for (int d = xs.rank - 1; d >= 0; d--) {
        int64_t c = rem % xs.dim[d], dy = d - (xs.rank - ys.rank);
        rem /= xs.dim[d];
        if (dy >= 0 && ys.dim[dy] != 1) iy += c * mul;
        if (dy >= 0) mul *= ys.dim[dy];
      }
      want[iy] += x[i];
    }
  }
  rt_reduce_to_f32(y, &ys, x, &xs);
  int64_t bad = 0;
  for (int64_t j = 0; j < ny; j++) bad += memcmp(&y[j], &want[j], sizeof(float)) != 0;
  printf("reduce_to %-26s n=%-7lld %s\n", what, (long long)n, bad ? "FAIL" : "bitwise equal");
  if (bad) failures++;
  free(x), free(y), free(want);
}

static void test_reduce_to(void) {
  reduce_case("bias [5,17] -> [17]", shp(1, 17, 0, 0), shp(2, 5, 17, 0));
  reduce_case("bias [3,300] -> [300]", shp(1, 300, 0, 0), shp(2, 3, 300, 0));
  reduce_case("bias [4,64,768] -> [768]", shp(1, 768, 0, 0), shp(3, 4, 64, 768));
  reduce_case("trailing [4,64,768] -> [64,768]", shp(2, 64, 768, 0), shp(3, 4, 64, 768));
  reduce_case("trailing [2,3,5] -> [1,3,5]", shp(3, 1, 3, 5), shp(3, 2, 3, 5));
  reduce_case("general [7,17] -> [7,1]", shp(2, 7, 1, 0), shp(2, 7, 17, 0));
}

int main(void) {
  test_unary();
  test_binary();
  test_reduce_to();
  if (failures) printf("test_ops: %d failing cases\n", failures);
  return failures ? 1 : 0;
}
