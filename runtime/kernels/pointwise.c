/* runtime/kernels/pointwise.c — elementwise ops, reductions, activations, embedding, norms,
 * optimizers and bf16 conversion (RoPE: rope.c). Plain loops written for the vectoriser; OpenMP over rows
 * or fixed chunks. */
#include <math.h>
#include <string.h>

#include "dtype.h" /* rt_bf16_of: the one f32 -> bf16 rounding */
#include "fastmath.h"
#include "kernels.h"

/* Parallelise a loop only when it is worth a fork/join (~a few microseconds). */
#define PAR_MIN 32768

/* ---- elementwise ----------------------------------------------------------------------------- */

void rt_add(int64_t n, const float *a, const float *b, float *y) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void rt_mul(int64_t n, const float *a, const float *b, float *y) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i];
}

void rt_scale(int64_t n, float s, const float *x, float *y) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++) y[i] = s * x[i];
}

void rt_axpy(int64_t n, float s, const float *x, float *y) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++) y[i] += s * x[i];
}

void rt_add_bcast(int64_t rows, int64_t cols, const float *a, const float *b, float *y) {
#pragma omp parallel for schedule(static) if (rows * cols > PAR_MIN)
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) y[r * cols + c] = a[r * cols + c] + b[c];
}

void rt_mul_bcast(int64_t rows, int64_t cols, const float *a, const float *b, float *y) {
#pragma omp parallel for schedule(static) if (rows * cols > PAR_MIN)
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) y[r * cols + c] = a[r * cols + c] * b[c];
}

/* Column sums: threads own column blocks, rows added in order (deterministic). */
#define COLBLK 64
void rt_sum_rows(int64_t rows, int64_t cols, const float *x, float beta, float *y) {
  int64_t nblk = (cols + COLBLK - 1) / COLBLK;
#pragma omp parallel for schedule(static) if (rows * cols > PAR_MIN)
  for (int64_t cb = 0; cb < nblk; cb++) {
    int64_t c0 = cb * COLBLK, c1 = c0 + COLBLK < cols ? c0 + COLBLK : cols;
    float acc[COLBLK];
    for (int64_t c = c0; c < c1; c++) acc[c - c0] = beta != 0.0f ? beta * y[c] : 0.0f;
    for (int64_t r = 0; r < rows; r++) {
      const float *xr = x + r * cols;
      for (int64_t c = c0; c < c1; c++) acc[c - c0] += xr[c];
    }
    for (int64_t c = c0; c < c1; c++) y[c] = acc[c - c0];
  }
}

/* Sums over fixed chunks (a function of n only) in double, combined in chunk order. */
#define MAXCHUNKS 256
static double chunked_sum(int64_t n, const float *x, int squares) {
  if (n <= 0) return 0.0;
  int64_t csz = (n + MAXCHUNKS - 1) / MAXCHUNKS;
  if (csz < 4096) csz = 4096;
  int64_t nch = (n + csz - 1) / csz;
  double part[MAXCHUNKS];
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
  for (int64_t c = 0; c < nch; c++) {
    int64_t i0 = c * csz, i1 = i0 + csz < n ? i0 + csz : n;
    double acc = 0.0;
    for (int64_t i = i0; i < i1; i += 1024) { /* float inner blocks vectorise; double outer sum */
      int64_t j1 = i + 1024 < i1 ? i + 1024 : i1;
      float f = 0.0f;
      if (squares) {
#pragma omp simd reduction(+ : f)
        for (int64_t j = i; j < j1; j++) f += x[j] * x[j];
      } else {
#pragma omp simd reduction(+ : f)
        for (int64_t j = i; j < j1; j++) f += x[j];
      }
      acc += f;
    }
    part[c] = acc;
  }
  double s = 0.0;
  for (int64_t c = 0; c < nch; c++) s += part[c];
  return s;
}

double rt_sum(int64_t n, const float *x) { return chunked_sum(n, x, 0); }
double rt_sumsq(int64_t n, const float *x) { return chunked_sum(n, x, 1); }

/* ---- activations ----------------------------------------------------------------------------- */

void rt_gelu_fwd(int64_t n, const float *x, float *y) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    float v = x[i];
    float t = rt_ftanh(RT_GELU_C * (v + RT_GELU_A * v * v * v));
    y[i] = 0.5f * v * (1.0f + t);
  }
}

void rt_gelu_bwd(int64_t n, const float *x, const float *dy, float *dx) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    float v = x[i];
    float t = rt_ftanh(RT_GELU_C * (v + RT_GELU_A * v * v * v));
    float du = RT_GELU_C * (1.0f + 3.0f * RT_GELU_A * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

void rt_silu_fwd(int64_t n, const float *x, float *y) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * rt_fsigmoid(x[i]);
}

/* silu'(x) = s (1 + x (1 - s)), s = sigmoid(x) */
void rt_silu_bwd(int64_t n, const float *x, const float *dy, float *dx) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    float s = rt_fsigmoid(x[i]);
    dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
  }
}

void rt_swiglu_fwd(int64_t n, const float *gate, const float *up, float *y) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++) y[i] = gate[i] * rt_fsigmoid(gate[i]) * up[i];
}

void rt_swiglu_bwd(int64_t n, const float *gate, const float *up, const float *dy, float *dgate, float *dup) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    float g = gate[i], s = rt_fsigmoid(g), d = dy[i], u = up[i];
    dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
    dup[i] = d * g * s;
  }
}

/* ---- embedding ------------------------------------------------------------------------------- */

void rt_embed_fwd(int64_t n, int64_t V, int64_t D, const float *table, const int32_t *idx, float *y) {
#pragma omp parallel for schedule(static) if (n * D > PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    int64_t t = idx[i];
    if (t >= 0 && t < V)
      memcpy(y + i * D, table + t * D, (size_t)D * sizeof(float));
    else
      memset(y + i * D, 0, (size_t)D * sizeof(float));
  }
}

void rt_embed_bwd(int64_t n, int64_t V, int64_t D, const int32_t *idx, const float *dy, int accumulate,
                  float *dtable) {
  if (!accumulate) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < V; r++) memset(dtable + r * D, 0, (size_t)D * sizeof(float));
  }
  int64_t nblk = (D + COLBLK - 1) / COLBLK;
#pragma omp parallel for schedule(static) if (n * D > PAR_MIN)
  for (int64_t cb = 0; cb < nblk; cb++) {
    int64_t c0 = cb * COLBLK, c1 = c0 + COLBLK < D ? c0 + COLBLK : D;
    for (int64_t i = 0; i < n; i++) {
      int64_t t = idx[i];
      if (t < 0 || t >= V) continue;
      float *dst = dtable + t * D;
      const float *src = dy + i * D;
      for (int64_t c = c0; c < c1; c++) dst[c] += src[c];
    }
  }
}

/* ---- normalisation --------------------------------------------------------------------------- */

size_t rt_norm_workspace_bytes(int64_t rows, int64_t D) { return (size_t)(2 * rows) * sizeof(float) + 64; }

/* Row statistics (two passes, vector float partial sums): mean and 1/sqrt(var + eps); RMSNorm:
 * mean 0 and 1/sqrt(mean(x^2) + eps). */
static void row_stats(const float *x, int64_t D, float eps, int rms, float *mean_out, float *rstd_out) {
  float s = 0.0f, ss = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < D; c++) s += x[c];
  float m = rms ? 0.0f : s / (float)D;
#pragma omp simd reduction(+ : ss)
  for (int64_t c = 0; c < D; c++) ss += (x[c] - m) * (x[c] - m);
  *mean_out = m;
  *rstd_out = 1.0f / sqrtf(ss / (float)D + eps);
}

void rt_layernorm_fwd(int64_t rows, int64_t D, float eps, const float *x, const float *w, const float *b,
                      float *y, float *mean, float *rstd) {
#pragma omp parallel for schedule(static) if (rows * D > PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * D;
    float *yr = y + r * D;
    float m, rs;
    row_stats(xr, D, eps, 0, &m, &rs);
    for (int64_t c = 0; c < D; c++) yr[c] = (xr[c] - m) * rs * w[c] + b[c];
    if (mean) mean[r] = m;
    if (rstd) rstd[r] = rs;
  }
}

/* dw[c] (+)= sum_r dy[r,c] xhat[r,c]; db[c] (+)= sum_r dy[r,c] (db may be NULL). Threads own
 * column blocks; rows in order. */
static void norm_param_grads(int64_t rows, int64_t D, const float *x, const float *dy, const float *mean,
                             const float *rstd, float *dw, float *db, float beta) {
  int64_t nblk = (D + COLBLK - 1) / COLBLK;
#pragma omp parallel for schedule(static) if (rows * D > PAR_MIN)
  for (int64_t cb = 0; cb < nblk; cb++) {
    int64_t c0 = cb * COLBLK, c1 = c0 + COLBLK < D ? c0 + COLBLK : D;
    float aw[COLBLK] = {0}, ab[COLBLK] = {0};
    for (int64_t r = 0; r < rows; r++) {
      const float *xr = x + r * D, *dr = dy + r * D;
      float m = mean[r], rs = rstd[r];
      for (int64_t c = c0; c < c1; c++) {
        aw[c - c0] += dr[c] * (xr[c] - m) * rs;
        ab[c - c0] += dr[c];
      }
    }
    for (int64_t c = c0; c < c1; c++) {
      dw[c] = beta != 0.0f ? beta * dw[c] + aw[c - c0] : aw[c - c0];
      if (db) db[c] = beta != 0.0f ? beta * db[c] + ab[c - c0] : ab[c - c0];
    }
  }
}

static void norm_stats(int64_t rows, int64_t D, float eps, int rms, const float *x, float *mean, float *rstd) {
#pragma omp parallel for schedule(static) if (rows * D > PAR_MIN)
  for (int64_t r = 0; r < rows; r++) row_stats(x + r * D, D, eps, rms, &mean[r], &rstd[r]);
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w, xhat = (x - mean) rstd; RMSNorm has no
 * mean(g) term (and mean = 0). Parameter grads first, so dx may overwrite dy. */
static void norm_bwd(int64_t rows, int64_t D, float eps, int rms, const float *x, const float *w, const float *dy,
                     float *dx, float *dw, float *db, float beta, void *ws) {
  float *mean = (float *)ws, *rstd = mean + rows;
  norm_stats(rows, D, eps, rms, x, mean, rstd);
  norm_param_grads(rows, D, x, dy, mean, rstd, dw, db, beta);
#pragma omp parallel for schedule(static) if (rows * D > PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * D, *dr = dy + r * D;
    float *dxr = dx + r * D;
    float m = mean[r], rs = rstd[r];
    float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
    for (int64_t c = 0; c < D; c++) {
      float g = dr[c] * w[c];
      sg += g;
      sgx += g * (xr[c] - m) * rs;
    }
    float mg = rms ? 0.0f : sg / (float)D, mgx = sgx / (float)D;
    for (int64_t c = 0; c < D; c++) dxr[c] = rs * (dr[c] * w[c] - mg - (xr[c] - m) * rs * mgx);
  }
}

void rt_layernorm_bwd(int64_t rows, int64_t D, float eps, const float *x, const float *w, const float *dy,
                      float *dx, float *dw, float *db, float beta, void *ws) {
  norm_bwd(rows, D, eps, 0, x, w, dy, dx, dw, db, beta, ws);
}

void rt_rmsnorm_fwd(int64_t rows, int64_t D, float eps, const float *x, const float *w, float *y, float *rstd) {
#pragma omp parallel for schedule(static) if (rows * D > PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * D;
    float *yr = y + r * D;
    float m, rs;
    row_stats(xr, D, eps, 1, &m, &rs);
    for (int64_t c = 0; c < D; c++) yr[c] = xr[c] * rs * w[c];
    if (rstd) rstd[r] = rs;
  }
}

void rt_rmsnorm_bwd(int64_t rows, int64_t D, float eps, const float *x, const float *w, const float *dy,
                    float *dx, float *dw, float beta, void *ws) {
  norm_bwd(rows, D, eps, 1, x, w, dy, dx, dw, NULL, beta, ws);
}

/* ---- optimizers ------------------------------------------------------------------------------ */

/* One element of AdamW (rt_adamw and rt_adamw_copy: the same arithmetic, the same bits). */
static inline float adamw_1(float p, float g, float *m, float *v, float lr, float gscale, float bc1, float bc2,
                            float beta1, float beta2, float eps, float weight_decay) {
  float gi = gscale * g;
  float mi = beta1 * *m + (1.0f - beta1) * gi;
  float vi = beta2 * *v + (1.0f - beta2) * gi * gi;
  *m = mi;
  *v = vi;
  return p - lr * (mi * bc1 / (sqrtf(vi * bc2) + eps) + weight_decay * p);
}

void rt_adamw(int64_t n, float *p, const float *g, float *m, float *v, float lr, float gscale, double step,
              float beta1, float beta2, float eps, float weight_decay) {
  if (!isfinite(gscale)) return; /* a skipped step (passes/optimizer.c: on_nonfinite skip) */
  float bc1 = (float)(1.0 / (1.0 - pow((double)beta1, step)));
  float bc2 = (float)(1.0 / (1.0 - pow((double)beta2, step)));
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++)
    p[i] = adamw_1(p[i], g[i], &m[i], &v[i], lr, gscale, bc1, bc2, beta1, beta2, eps, weight_decay);
}

void rt_adamw_copy(int64_t n, float *p, const float *g, float *m, float *v, float lr, float gscale, double step,
                   float beta1, float beta2, float eps, float weight_decay, uint16_t *copy) {
  if (!isfinite(gscale)) { /* a skipped step: the copy of the parameter as it is */
    rt_cvt_f32_bf16(n, p, copy);
    return;
  }
  float bc1 = (float)(1.0 / (1.0 - pow((double)beta1, step)));
  float bc2 = (float)(1.0 / (1.0 - pow((double)beta2, step)));
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    float pi = adamw_1(p[i], g[i], &m[i], &v[i], lr, gscale, bc1, bc2, beta1, beta2, eps, weight_decay);
    p[i] = pi;
    copy[i] = rt_bf16_of(pi);
  }
}

void rt_sgd(int64_t n, float *p, const float *g, float *m, float lr, float gscale, float momentum,
            float weight_decay) {
  if (!isfinite(gscale)) return; /* a skipped step */
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    float gi = gscale * g[i] + weight_decay * p[i];
    float mi = momentum * m[i] + gi;
    m[i] = mi;
    p[i] -= lr * mi;
  }
}

/* ---- bf16 ------------------------------------------------------------------------------------ */

void rt_cvt_f32_bf16(int64_t n, const float *x, uint16_t *y) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++) y[i] = rt_bf16_of(x[i]);
}

void rt_cvt_bf16_f32(int64_t n, const uint16_t *x, float *y) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++) y[i] = rt_f32_of_bf16(x[i]);
}
