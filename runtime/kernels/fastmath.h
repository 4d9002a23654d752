/* runtime/kernels/fastmath.h — vectorisable fp32 exp / tanh / sigmoid for the kernels (private).
 *
 * libm's expf/tanhf are scalar calls that stop loops from vectorising; these are plain arithmetic
 * the compiler turns into SIMD. rt_fexp: range reduction x = k ln2 + r, |r| <= ln2/2, degree-6
 * Taylor polynomial (relative error < 2e-7 on the clamped range [-87.3, 88]), 2^k built in the
 * exponent bits. Inputs below -87.3 give ~1e-38 instead of a denormal / 0.
 */
#ifndef SHARDRT_FASTMATH_H
#define SHARDRT_FASTMATH_H

#include <math.h>
#include <stdint.h>

static inline float rt_fexp(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.0f ? 88.0f : x;
  /* k = round(x / ln2) by the 1.5 * 2^23 trick (floorf does not vectorise without -fno-trapping-math) */
  float kf = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - kf * 0.693145751953125f; /* ln2 split in two for an exact product */
  r = r - kf * 1.42860682030941723212e-6f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  union {
    int32_t i;
    float f;
  } s;
  s.i = ((int32_t)kf + 127) << 23;
  return p * s.f;
}

/* tanh(x) = 1 - 2 / (e^{2x} + 1): absolute error ~1e-7 (relative error grows near 0). */
static inline float rt_ftanh(float x) { return 1.0f - 2.0f / (rt_fexp(2.0f * x) + 1.0f); }

static inline float rt_fsigmoid(float x) { return 1.0f / (1.0f + rt_fexp(-x)); }

#define RT_GELU_C 0.7978845608028654f /* sqrt(2 / pi) */
#define RT_GELU_A 0.044715f

#endif
