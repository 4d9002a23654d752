/* runtime/comm/reduce.c — host reductions in fp32, bf16 conversion.
 *
 * Built with the CPU kernels' optimisation (-O3, -march=native where SHARDC_NATIVE: see
 * runtime/CMakeLists.txt) so the folds vectorise: the small collectives' time is mostly the
 * fold (a 4 KiB all-reduce's 1024 scalar adds were a third of it). Every loop is elementwise,
 * so the vector code gives the scalar code's bits. dst is a, b, or overlaps neither (every
 * caller), so no iteration reads what another wrote: `ivdep` spares the overlap checks. */
#include <math.h>
#include <string.h>

#include "dtype.h"
#include "comm.h"

uint16_t rt_f32_to_bf16(float f) { return rt_bf16_of(f); }

float rt_bf16_to_f32(uint16_t h) { return rt_f32_of_bf16(h); }

static void reduce_f32(float *dst, const float *a, const float *b, size_t n, RtRedOp op, float scale) {
  if (op == RT_MAX) {
#pragma GCC ivdep
    for (size_t i = 0; i < n; i++) dst[i] = a[i] > b[i] || isnan(a[i]) ? a[i] : b[i];
  } else if (scale != 1.0f) {
#pragma GCC ivdep
    for (size_t i = 0; i < n; i++) dst[i] = (a[i] + b[i]) * scale;
  } else {
#pragma GCC ivdep
    for (size_t i = 0; i < n; i++) dst[i] = a[i] + b[i];
  }
}

static void reduce_bf16(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n, RtRedOp op, float scale) {
  /* Blocks of 256 through fp32 so the inner loops vectorise. */
  float fa[256], fb[256];
  for (size_t i0 = 0; i0 < n; i0 += 256) {
    size_t m = n - i0 < 256 ? n - i0 : 256;
    for (size_t i = 0; i < m; i++) fa[i] = rt_bf16_to_f32(a[i0 + i]);
    for (size_t i = 0; i < m; i++) fb[i] = rt_bf16_to_f32(b[i0 + i]);
    reduce_f32(fa, fa, fb, m, op, scale);
#pragma GCC ivdep
    for (size_t i = 0; i < m; i++) dst[i0 + i] = rt_f32_to_bf16(fa[i]);
  }
}

void rt_reduce(void *dst, const void *a, const void *b, size_t count, RtDType dt, RtRedOp op, float scale) {
  if (dt == RT_F32)
    reduce_f32(dst, a, b, count, op, scale);
  else
    reduce_bf16(dst, a, b, count, op, scale);
}

void rt_scale_dt(void *buf, size_t count, RtDType dt, float scale) {
  if (dt == RT_F32) {
    float *f = buf;
    for (size_t i = 0; i < count; i++) f[i] *= scale;
    return;
  }
  uint16_t *h = buf;
  for (size_t i = 0; i < count; i++) h[i] = rt_f32_to_bf16(rt_bf16_to_f32(h[i]) * scale);
}
