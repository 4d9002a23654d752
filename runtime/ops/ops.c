/* runtime/ops/ops.c — generic CPU kernels for the IR's shape and elementwise ops. */
#include "ops.h"
#include "reduce_kind.h"

#include "kernels/kernels.h"

#include <string.h>

/* Row-major strides of `s` aligned to the rank of `out`: broadcast dims get stride 0. */
static void bcast_strides(const RtShape *out, const RtShape *s, int64_t *st) {
  int off = out->rank - s->rank;
  int64_t acc = 1;
  for (int i = out->rank - 1; i >= 0; i--) {
    int j = i - off;
    if (j < 0) {
      st[i] = 0;
    } else {
      st[i] = s->dim[j] == 1 && out->dim[i] != 1 ? 0 : acc;
      acc *= s->dim[j];
    }
  }
}

static int64_t numel(const RtShape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n *= s->dim[i];
  return n;
}

/* Whether s, without its leading 1s, is the trailing dims of out (a bias broadcast over rows). */
static int trailing(const RtShape *out, const RtShape *s) {
  int first = 0;
  while (first < s->rank && s->dim[first] == 1) first++;
  int off = out->rank - s->rank;
  if (off + first < 0) return 0;
  for (int d = first; d < s->rank; d++)
    if (s->dim[d] != out->dim[off + d]) return 0;
  return 1;
}

static inline float bin(int op, float a, float b) {
  switch (op) {
  case RT_ADD: return a + b;
  case RT_SUB: return a - b;
  case RT_MUL: return a * b;
  case RT_DIV: return a / b;
  case RT_MAXIMUM: return a > b ? a : b;
  default: return a < b ? a : b;
  }
}

void rt_binary_f32(int op, float *y, const RtShape *ys, const float *a, const RtShape *as, const float *b,
                   const RtShape *bs) {
  int64_t n = numel(ys), na = numel(as), nb = numel(bs);
  if (n == 0) return;
  int64_t inner = ys->rank ? ys->dim[ys->rank - 1] : 1;
  /* each operand: the output's shape, a trailing vector of `inner` (a bias) or one value */
  int abc = na == n ? RT_BC_FULL : na == 1 ? RT_BC_SCALAR : na == inner && trailing(ys, as) ? RT_BC_ROW : -1;
  int bbc = nb == n ? RT_BC_FULL : nb == 1 ? RT_BC_SCALAR : nb == inner && trailing(ys, bs) ? RT_BC_ROW : -1;
  if (abc >= 0 && bbc >= 0 && (abc == RT_BC_FULL || bbc == RT_BC_FULL)) {
    rt_ew_binary(op, n, inner, a, abc, b, bbc, y);
    return;
  }
  int64_t sa[RT_OPS_MAX_RANK], sb[RT_OPS_MAX_RANK];
  bcast_strides(ys, as, sa);
  bcast_strides(ys, bs, sb);
#pragma omp parallel for if (n > 65536) schedule(static)
  for (int64_t i = 0; i < n; i++) {
    int64_t rem = i, ia = 0, ib = 0;
    for (int d = ys->rank - 1; d >= 0; d--) {
      int64_t c = rem % ys->dim[d];
      rem /= ys->dim[d];
      ia += c * sa[d];
      ib += c * sb[d];
    }
    y[i] = bin(op, a[ia], b[ib]);
  }
}

void rt_unary_f32(int op, float *y, const float *x, int64_t n, float s) { rt_ew_unary(op, n, x, s, y); }

void rt_gelu_bwd_f32(float *dx, const float *x, const float *dy, int64_t n) { rt_gelu_bwd(n, x, dy, dx); }

void rt_silu_bwd_f32(float *dx, const float *x, const float *dy, int64_t n) { rt_silu_bwd(n, x, dy, dx); }

void rt_reduce_to_f32(float *y, const RtShape *ys, const float *x, const RtShape *xs) {
  int64_t n = numel(xs), ny = numel(ys);
  int64_t inner = ys->rank ? ys->dim[ys->rank - 1] : 1;
  RtReduceKind kind = rt_reduce_kind(xs->rank, xs->dim, ys->rank, ys->dim); /* (the cost model prices the same) */
  if (kind == RT_REDUCE_COPY) {
    memcpy(y, x, (size_t)n * sizeof(float));
    return;
  }
  if (kind == RT_REDUCE_BIAS) { /* bias grads */
    /* each column summed in double over the rows in order; a block of columns at a time, row by row
     * (contiguous, vectorised) rather than one column at a time down the rows (strided) */
    enum { CB = 256 };
    int64_t rows = n / inner, nblk = (inner + CB - 1) / CB;
#pragma omp parallel for if (n > 65536) schedule(static)
    for (int64_t b = 0; b < nblk; b++) {
      int64_t c0 = b * CB, c1 = c0 + CB < inner ? c0 + CB : inner;
      double acc[CB];
      for (int64_t c = c0; c < c1; c++) acc[c - c0] = 0;
      for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * inner;
#pragma omp simd
        for (int64_t c = c0; c < c1; c++) acc[c - c0] += xr[c];
      }
      for (int64_t c = c0; c < c1; c++) y[c] = (float)acc[c - c0];
    }
    return;
  }
  if (kind == RT_REDUCE_TRAILING) { /* y is x's trailing dims (a position embedding's grad): in f32, in order */
    int64_t outer = n / ny;
#pragma omp parallel for if (n > 65536) schedule(static)
    for (int64_t j0 = 0; j0 < ny; j0 += 1024) {
      int64_t j1 = j0 + 1024 < ny ? j0 + 1024 : ny;
      for (int64_t j = j0; j < j1; j++) y[j] = 0;
      for (int64_t o = 0; o < outer; o++)
#pragma omp simd
        for (int64_t j = j0; j < j1; j++) y[j] += x[o * ny + j];
    }
    return;
  }
  /* general: accumulate in double through the broadcast strides of y within x's shape */
  int64_t sy[RT_OPS_MAX_RANK];
  bcast_strides(xs, ys, sy);
  for (int64_t j = 0; j < ny; j++) y[j] = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t rem = i, iy = 0;
    for (int d = xs->rank - 1; d >= 0; d--) {
      int64_t c = rem % xs->dim[d];
      rem /= xs->dim[d];
      iy += c * sy[d];
    }
    y[iy] += x[i];
  }
}

void rt_broadcast_to_f32(float *y, const RtShape *ys, const float *x, const RtShape *xs) {
  int64_t n = numel(ys);
  int64_t sx[RT_OPS_MAX_RANK];
  bcast_strides(ys, xs, sx);
#pragma omp parallel for if (n > 65536) schedule(static)
  for (int64_t i = 0; i < n; i++) {
    int64_t rem = i, ix = 0;
    for (int d = ys->rank - 1; d >= 0; d--) {
      int64_t c = rem % ys->dim[d];
      rem /= ys->dim[d];
      ix += c * sx[d];
    }
    y[i] = x[ix];
  }
}

void rt_copy_block(void *y, int64_t ydim, int64_t ystart, const void *x, int64_t xdim, int64_t xstart,
                   int64_t outer, int64_t len, int64_t inner, int esize) {
  size_t row = (size_t)(len * inner * esize);
#pragma omp parallel for if (outer * len * inner > 65536) schedule(static)
  for (int64_t o = 0; o < outer; o++)
    memcpy((char *)y + ((o * ydim + ystart) * inner) * esize, (const char *)x + ((o * xdim + xstart) * inner) * esize,
           row);
}

void rt_transpose_f32(float *y, const float *x, int64_t batch, int64_t m, int64_t n) {
  for (int64_t b = 0; b < batch; b++) {
    const float *xb = x + b * m * n;
    float *yb = y + b * m * n;
#pragma omp parallel for if (m * n > 65536) schedule(static)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) yb[j * m + i] = xb[i * n + j];
  }
}

void rt_fill_f32(float *y, int64_t n, float v) {
  for (int64_t i = 0; i < n; i++) y[i] = v;
}

void rt_iota_i32(int32_t *y, int64_t n, int64_t start) {
  for (int64_t i = 0; i < n; i++) y[i] = (int32_t)(start + i);
}

void rt_sum_f32(float *y, const float *x, int64_t n) { y[0] = (float)rt_sum(n, x); }

void rt_mean_f32(float *y, const float *x, int64_t n) { y[0] = (float)(n ? rt_sum(n, x) / (double)n : 0.0); }

void rt_sumsq_f32(float *y, const float *x, int64_t n) { y[0] = (float)rt_sumsq(n, x); }

static uint64_t matmul_flops; /* every thread's (rt_par_for may run GEMMs on several) */

uint64_t rt_matmul_flops(void) { return __atomic_load_n(&matmul_flops, __ATOMIC_RELAXED); }

void rt_matmul_count(int64_t batch, int64_t m, int64_t n, int64_t k) {
  __atomic_fetch_add(&matmul_flops, (uint64_t)(2 * batch * m * n * k), __ATOMIC_RELAXED);
}

void rt_matmul_f32(float *y, const float *a, const float *b, int64_t batch, int64_t m, int64_t n, int64_t k,
                   int ta, int tb, int b_batched) {
  rt_matmul_count(batch, m, n, k);
  rt_matmul(batch, b_batched ? batch : 1, m, n, k, ta, tb, a, b, 0.0f, y);
}

void rt_matmul_acc_f32(float *y, const float *c, const float *a, const float *b, int64_t batch, int64_t m, int64_t n,
                       int64_t k, int ta, int tb, int b_batched) {
  if (y != c) memmove(y, c, (size_t)(batch * m * n) * sizeof(float));
  rt_matmul_count(batch, m, n, k);
  rt_matmul(batch, b_batched ? batch : 1, m, n, k, ta, tb, a, b, 1.0f, y);
}
