/* runtime/dtype.h — element types: the one table shared by libshardrt, the compiler (ir/ir.h's
 * DType is made from the same list, DT_x == RT_x) and the programs codegen writes (RT_x). */
#ifndef SHARDRT_DTYPE_H
#define SHARDRT_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* X(id, name, bytes per element, is a float type), in enum order. */
#define RT_DTYPES(X)           \
  X(F32, "f32", 4, 1)          \
  X(BF16, "bf16", 2, 1)        \
  X(F16, "f16", 2, 1)          \
  X(F64, "f64", 8, 1)          \
  X(I32, "i32", 4, 0)          \
  X(I64, "i64", 8, 0)

typedef enum {
#define RT_DTYPE(id, name, size, is_float) RT_##id,
  RT_DTYPES(RT_DTYPE)
#undef RT_DTYPE
  RT_DTYPE_COUNT
} RtDType;

size_t rt_dtype_size(RtDType dt);      /* bytes per element (0: not a dtype) */
const char *rt_dtype_name(RtDType dt); /* "f32", "bf16", ... ("?" otherwise) */
int rt_dtype_is_float(RtDType dt);     /* 1: a floating-point type */

/* f32 -> bf16, the one rounding every host-side cast uses (nearest, ties to even; a NaN stays a quiet
 * NaN), inline so that vectorized loops keep it (runtime/kernels); and bf16 -> f32, exact. */
static inline uint16_t rt_bf16_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline float rt_f32_of_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

#endif
