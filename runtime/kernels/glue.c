/* runtime/kernels/glue.c — the loops of the generic elementwise ops (runtime/ops/ops.c's
 * rt_unary_f32 and rt_binary_f32): the op chosen once per call, outside the loop, each loop a
 * plain one the vectoriser turns into SIMD (this file has the kernels' -O3 -march=native), and
 * e^x, tanh and sigmoid the kernels' own (fastmath.h: the same polynomial the GELU kernels and the
 * LLVM-generated kernels use), not libm's scalar calls. */
#include <math.h>

#include "fastmath.h"
#include "kernels.h"
#include "ops.h"

#define PAR_MIN 32768 /* as pointwise.c: a fork/join only when it is worth a few microseconds */

/* One loop per op: `for i < n: y[i] = EXPR(x[i])`. */
#define UNARY(EXPR)                                                                                            \
  do {                                                                                                         \
    _Pragma("omp parallel for simd schedule(static) if (n > PAR_MIN)") for (int64_t i = 0; i < n; i++) {       \
      float v = x[i];                                                                                          \
      y[i] = (EXPR);                                                                                           \
    }                                                                                                          \
  } while (0)

void rt_ew_unary(int op, int64_t n, const float *x, float s, float *y) {
  switch (op) {
  case RT_NEG: UNARY(-v); break;
  case RT_SCALE: UNARY(s * v); break;
  case RT_ADD_SCALAR: UNARY(v + s); break;
  case RT_EXP: UNARY(rt_fexp(v)); break;
  case RT_LOG: UNARY(logf(v)); break;
  case RT_SQRT: UNARY(sqrtf(v)); break;
  case RT_RSQRT: UNARY(1.0f / sqrtf(v)); break;
  case RT_TANH: UNARY(rt_ftanh(v)); break;
  case RT_SIGMOID: UNARY(rt_fsigmoid(v)); break;
  case RT_RELU: UNARY(v > 0 ? v : 0); break;
  case RT_GELU: UNARY(0.5f * v * (1.0f + rt_ftanh(RT_GELU_C * (v + RT_GELU_A * v * v * v)))); break;
  case RT_SILU: UNARY(v * rt_fsigmoid(v)); break;
  default: UNARY(v); break; /* a copy */
  }
}

/* One row's loop for each op, with A and B the operands' expressions at column j. */
#define ROW(EXPR) _Pragma("omp simd") for (int64_t j = 0; j < len; j++) yr[j] = (EXPR)
#define BY_OP(A, B)                                                                                            \
  switch (op) {                                                                                                \
  case RT_ADD: ROW((A) + (B)); break;                                                                       \
  case RT_SUB: ROW((A) - (B)); break;                                                                       \
  case RT_MUL: ROW((A) * (B)); break;                                                                       \
  case RT_DIV: ROW((A) / (B)); break;                                                                       \
  case RT_MAXIMUM: ROW((A) > (B) ? (A) : (B)); break;                                                       \
  default: ROW((A) < (B) ? (A) : (B)); break;                                                                  \
  }

/* The rows of one binary op; an operand is read per element (RT_BC_FULL), per column (RT_BC_ROW:
 * a bias of `inner` elements) or as one value (RT_BC_SCALAR). */
static void binary_row(int op, int64_t len, const float *ar, float av, int abc, const float *br, float bv, int bbc,
                       float *yr) {
  if (abc != RT_BC_SCALAR && bbc != RT_BC_SCALAR) {
    BY_OP(ar[j], br[j]);
  } else if (abc == RT_BC_SCALAR && bbc != RT_BC_SCALAR) {
    BY_OP(av, br[j]);
  } else if (abc != RT_BC_SCALAR) {
    BY_OP(ar[j], bv);
  } else {
    BY_OP(av, bv);
  }
}

void rt_ew_binary(int op, int64_t n, int64_t inner, const float *a, int abc, const float *b, int bbc, float *y) {
  if (n <= 0) return;
  /* rows of `inner` when an operand is a bias; else flat blocks, so the threads split the work */
  if (abc != RT_BC_ROW && bbc != RT_BC_ROW) inner = 8192;
  int64_t rows = (n + inner - 1) / inner;
  float av = abc == RT_BC_SCALAR ? a[0] : 0.0f, bv = bbc == RT_BC_SCALAR ? b[0] : 0.0f;
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    int64_t off = r * inner, len = n - off < inner ? n - off : inner;
    binary_row(op, len, a + (abc == RT_BC_FULL ? off : 0), av, abc, b + (bbc == RT_BC_FULL ? off : 0), bv, bbc,
               y + off);
  }
}
