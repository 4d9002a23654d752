/* runtime/kernels/ref.c — the naive references of runtime/kernels (see ref.h). */
#include "ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void rt_gemm_ref(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; p++) {
        double a = ta ? A[p * lda + i] : A[i * lda + p];
        double b = tb ? B[j * ldb + p] : B[p * ldb + j];
        acc += a * b;
      }
      double c = beta != 0.0f ? (double)beta * C[i * ldc + j] : 0.0;
      C[i * ldc + j] = (float)(alpha * acc + c);
    }
}

void rt_matmul_ref(int64_t batch, int64_t bbatch, int64_t m, int64_t n, int64_t k, int ta, int tb, const float *A,
                   const float *B, float beta, float *y) {
  for (int64_t i = 0; i < batch; i++)
    rt_gemm_ref(ta, tb, m, n, k, 1.0f, A + i * m * k, ta ? m : k, B + (i % bbatch) * k * n, tb ? k : n, beta,
                y + i * m * n, n);
}

void rt_linear_fwd_ref(int64_t rows, int64_t k, int64_t n, int tw, const float *x, const float *W,
                       const float *bias, float *y) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < n; j++) {
      double acc = bias ? bias[j] : 0.0;
      for (int64_t p = 0; p < k; p++) acc += (double)x[r * k + p] * (tw ? W[j * k + p] : W[p * n + j]);
      y[r * n + j] = (float)acc;
    }
}

void rt_linear_dw_ref(int64_t rows, int64_t k, int64_t n, int tw, const float *x, const float *dy, float beta,
                      float *dW) {
  for (int64_t p = 0; p < k; p++)
    for (int64_t j = 0; j < n; j++) {
      double acc = 0.0;
      for (int64_t r = 0; r < rows; r++) acc += (double)x[r * k + p] * dy[r * n + j];
      float *o = tw ? &dW[j * k + p] : &dW[p * n + j];
      *o = (float)(acc + (beta != 0.0f ? (double)beta * *o : 0.0));
    }
}

void rt_linear_dx_ref(int64_t rows, int64_t k, int64_t n, int tw, const float *dy, const float *W, float beta,
                      float *dx) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t p = 0; p < k; p++) {
      double acc = 0.0;
      for (int64_t j = 0; j < n; j++) acc += (double)dy[r * n + j] * (tw ? W[j * k + p] : W[p * n + j]);
      float *o = &dx[r * k + p];
      *o = (float)(acc + (beta != 0.0f ? (double)beta * *o : 0.0));
    }
}

void rt_sum_rows_ref(int64_t rows, int64_t cols, const float *x, float beta, float *y) {
  for (int64_t c = 0; c < cols; c++) {
    double acc = beta != 0.0f ? (double)beta * y[c] : 0.0;
    for (int64_t r = 0; r < rows; r++) acc += x[r * cols + c];
    y[c] = (float)acc;
  }
}

double rt_sum_ref(int64_t n, const float *x) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; i++) acc += x[i];
  return acc;
}

double rt_sumsq_ref(int64_t n, const float *x) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; i++) acc += (double)x[i] * x[i];
  return acc;
}

/* ---- activations ----------------------------------------------------------------------------- */

static const double GELU_C = 0.79788456080286535588; /* sqrt(2/pi) */

void rt_gelu_fwd_ref(int64_t n, const float *x, float *y) {
  for (int64_t i = 0; i < n; i++) {
    double v = x[i];
    y[i] = (float)(0.5 * v * (1.0 + tanh(GELU_C * (v + 0.044715 * v * v * v))));
  }
}

void rt_gelu_bwd_ref(int64_t n, const float *x, const float *dy, float *dx) {
  for (int64_t i = 0; i < n; i++) {
    double v = x[i], t = tanh(GELU_C * (v + 0.044715 * v * v * v));
    double d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * 0.044715 * v * v);
    dx[i] = (float)(dy[i] * d);
  }
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

void rt_silu_fwd_ref(int64_t n, const float *x, float *y) {
  for (int64_t i = 0; i < n; i++) y[i] = (float)(x[i] * sigmoid(x[i]));
}

void rt_silu_bwd_ref(int64_t n, const float *x, const float *dy, float *dx) {
  for (int64_t i = 0; i < n; i++) {
    double s = sigmoid(x[i]);
    dx[i] = (float)(dy[i] * (s + x[i] * s * (1.0 - s)));
  }
}

void rt_swiglu_fwd_ref(int64_t n, const float *gate, const float *up, float *y) {
  for (int64_t i = 0; i < n; i++) y[i] = (float)(gate[i] * sigmoid(gate[i]) * up[i]);
}

void rt_swiglu_bwd_ref(int64_t n, const float *gate, const float *up, const float *dy, float *dgate, float *dup) {
  for (int64_t i = 0; i < n; i++) {
    double g = gate[i], s = sigmoid(g);
    dgate[i] = (float)((double)dy[i] * up[i] * (s + g * s * (1.0 - s)));
    dup[i] = (float)((double)dy[i] * g * s);
  }
}

/* ---- embedding ------------------------------------------------------------------------------- */

void rt_embed_fwd_ref(int64_t n, int64_t V, int64_t D, const float *table, const int32_t *idx, float *y) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t c = 0; c < D; c++) y[i * D + c] = idx[i] >= 0 && idx[i] < V ? table[idx[i] * D + c] : 0.0f;
}

void rt_embed_bwd_ref(int64_t n, int64_t V, int64_t D, const int32_t *idx, const float *dy, int accumulate,
                      float *dtable) {
  for (int64_t r = 0; r < V; r++)
    for (int64_t c = 0; c < D; c++) {
      double acc = accumulate ? dtable[r * D + c] : 0.0;
      for (int64_t i = 0; i < n; i++)
        if (idx[i] == r) acc += dy[i * D + c];
      dtable[r * D + c] = (float)acc;
    }
}

/* ---- normalisation --------------------------------------------------------------------------- */

static void stats_ref(const float *x, int64_t D, double eps, int rms, double *mean, double *rstd) {
  double m = 0.0, var = 0.0;
  if (!rms) {
    for (int64_t c = 0; c < D; c++) m += x[c];
    m /= (double)D;
  }
  for (int64_t c = 0; c < D; c++) var += (x[c] - m) * (x[c] - m);
  *mean = m;
  *rstd = 1.0 / sqrt(var / (double)D + eps);
}

void rt_layernorm_fwd_ref(int64_t rows, int64_t D, float eps, const float *x, const float *w, const float *b,
                          float *y, float *mean, float *rstd) {
  for (int64_t r = 0; r < rows; r++) {
    double m, rs;
    stats_ref(x + r * D, D, eps, 0, &m, &rs);
    for (int64_t c = 0; c < D; c++) y[r * D + c] = (float)((x[r * D + c] - m) * rs * w[c] + b[c]);
    if (mean) mean[r] = (float)m;
    if (rstd) rstd[r] = (float)rs;
  }
}

static void norm_bwd_ref(int64_t rows, int64_t D, float eps, int rms, const float *x, const float *w,
                         const float *dy, float *dx, float *dw, float *db, float beta) {
  double *aw = calloc((size_t)D, sizeof(double)), *ab = calloc((size_t)D, sizeof(double));
  if (!aw || !ab) abort();
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * D, *dr = dy + r * D;
    double m, rs, sg = 0.0, sgx = 0.0;
    stats_ref(xr, D, eps, rms, &m, &rs);
    for (int64_t c = 0; c < D; c++) {
      double xh = (xr[c] - m) * rs, g = (double)dr[c] * w[c];
      sg += g;
      sgx += g * xh;
      aw[c] += dr[c] * xh;
      ab[c] += dr[c];
    }
    double mg = rms ? 0.0 : sg / (double)D;
    for (int64_t c = 0; c < D; c++)
      dx[r * D + c] = (float)(rs * ((double)dr[c] * w[c] - mg - (xr[c] - m) * rs * sgx / (double)D));
  }
  for (int64_t c = 0; c < D; c++) {
    dw[c] = (float)(aw[c] + (beta != 0.0f ? (double)beta * dw[c] : 0.0));
    if (db) db[c] = (float)(ab[c] + (beta != 0.0f ? (double)beta * db[c] : 0.0));
  }
  free(aw);
  free(ab);
}

void rt_layernorm_bwd_ref(int64_t rows, int64_t D, float eps, const float *x, const float *w, const float *dy,
                          float *dx, float *dw, float *db, float beta) {
  norm_bwd_ref(rows, D, eps, 0, x, w, dy, dx, dw, db, beta);
}

void rt_rmsnorm_fwd_ref(int64_t rows, int64_t D, float eps, const float *x, const float *w, float *y,
                        float *rstd) {
  for (int64_t r = 0; r < rows; r++) {
    double m, rs;
    stats_ref(x + r * D, D, eps, 1, &m, &rs);
    for (int64_t c = 0; c < D; c++) y[r * D + c] = (float)(x[r * D + c] * rs * w[c]);
    if (rstd) rstd[r] = (float)rs;
  }
}

void rt_rmsnorm_bwd_ref(int64_t rows, int64_t D, float eps, const float *x, const float *w, const float *dy,
                        float *dx, float *dw, float beta) {
  norm_bwd_ref(rows, D, eps, 1, x, w, dy, dx, dw, NULL, beta);
}

/* ---- RoPE ------------------------------------------------------------------------------------ */

void rt_rope_ref(int64_t B, int64_t S, int64_t H, int64_t hd, double theta, int64_t start, int inverse,
                 const float *x, float *y) {
  int64_t half = hd / 2, C = H * hd;
  for (int64_t b = 0; b < B; b++)
    for (int64_t s = 0; s < S; s++)
      for (int64_t h = 0; h < H; h++) {
        const float *xp = x + (b * S + s) * C + h * hd;
        float *yp = y + (b * S + s) * C + h * hd;
        for (int64_t i = 0; i < half; i++) {
          double ang = (inverse ? -1.0 : 1.0) * (double)(s + start) * pow(theta, -2.0 * (double)i / (double)hd);
          yp[i] = (float)(xp[i] * cos(ang) - xp[i + half] * sin(ang));
          yp[i + half] = (float)(xp[i + half] * cos(ang) + xp[i] * sin(ang));
        }
      }
}

/* ---- attention: the full score row, materialised ------------------------------------------- */

static double score_ref(const float *a, const float *b, int64_t hd) {
  double acc = 0.0;
  for (int64_t d = 0; d < hd; d++) acc += (double)a[d] * b[d];
  return acc / sqrt((double)hd);
}

void rt_sdpa_fwd_ref(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal,
                     const float *q, const float *k, const float *v, float *o, float *lse) {
  int64_t qC = H * hd, kC = KV * hd;
  double *p = malloc((size_t)(T > 0 ? T : 1) * sizeof(double));
  if (!p) abort();
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      int64_t kh = h / (H / KV);
      for (int64_t s = 0; s < S; s++) {
        const float *qr = q + (b * S + s) * qC + h * hd;
        int64_t tend = causal ? (s + 1 < T ? s + 1 : T) : T;
        double mx = -INFINITY, sum = 0.0;
        for (int64_t t = 0; t < tend; t++) {
          p[t] = score_ref(qr, k + (b * T + t) * kC + kh * hd, hd);
          mx = p[t] > mx ? p[t] : mx;
        }
        for (int64_t t = 0; t < tend; t++) sum += exp(p[t] - mx);
        double L = tend > 0 ? mx + log(sum) : -INFINITY;
        lse[(b * H + h) * S + s] = (float)L;
        for (int64_t d = 0; d < hd; d++) {
          double acc = 0.0;
          for (int64_t t = 0; t < tend; t++) acc += exp(p[t] - L) * v[(b * T + t) * kC + kh * hd + d];
          o[(b * S + s) * qC + h * hd + d] = (float)acc;
        }
      }
    }
  free(p);
}

void rt_sdpa_bwd_ref(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal,
                     const float *q, const float *k, const float *v, const float *o, const float *lse,
                     const float *dout, float *dq, float *dk, float *dv) {
  int64_t qC = H * hd, kC = KV * hd;
  double scale = 1.0 / sqrt((double)hd);
  double *adq = calloc((size_t)(B * S * qC), sizeof(double)), *adk = calloc((size_t)(B * T * kC), sizeof(double)),
         *adv = calloc((size_t)(B * T * kC), sizeof(double));
  if (!adq || !adk || !adv) abort();
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      int64_t kh = h / (H / KV);
      for (int64_t s = 0; s < S; s++) {
        int64_t qi = (b * S + s) * qC + h * hd;
        double L = lse[(b * H + h) * S + s], Di = 0.0;
        for (int64_t d = 0; d < hd; d++) Di += (double)dout[qi + d] * o[qi + d];
        int64_t tend = causal ? (s + 1 < T ? s + 1 : T) : T;
        for (int64_t t = 0; t < tend; t++) {
          int64_t ki = (b * T + t) * kC + kh * hd;
          double P = exp(score_ref(q + qi, k + ki, hd) - L), dP = 0.0;
          for (int64_t d = 0; d < hd; d++) dP += (double)dout[qi + d] * v[ki + d];
          double dS = P * (dP - Di) * scale;
          for (int64_t d = 0; d < hd; d++) {
            adv[ki + d] += P * dout[qi + d];
            adq[qi + d] += dS * k[ki + d];
            adk[ki + d] += dS * q[qi + d];
          }
        }
      }
    }
  for (int64_t i = 0; i < B * S * qC; i++) dq[i] = (float)adq[i];
  for (int64_t i = 0; i < B * T * kC; i++) {
    dk[i] = (float)adk[i];
    dv[i] = (float)adv[i];
  }
  free(adq);
  free(adk);
  free(adv);
}

/* ---- cross-entropy --------------------------------------------------------------------------- */

float rt_xent_fwd_bwd_ref(int64_t N, int64_t V, int64_t len, const float *logits, const int32_t *targets,
                          float dloss, float *dlogits) {
  int64_t count = 0;
  for (int64_t r = 0; r < N; r++) count += targets[r] >= 0;
  double total = 0.0;
  for (int64_t r = 0; r < N; r++) {
    const float *x = logits + r * V;
    int64_t t = targets[r];
    if (dlogits)
      for (int64_t j = 0; j < V; j++) dlogits[r * V + j] = 0.0f;
    if (t < 0) continue;
    double mx = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < len; j++) mx = x[j] > mx ? x[j] : mx;
    for (int64_t j = 0; j < len; j++) sum += exp(x[j] - mx);
    double L = mx + log(sum);
    total += L - x[t];
    if (dlogits)
      for (int64_t j = 0; j < len; j++)
        dlogits[r * V + j] = (float)((double)dloss * (exp(x[j] - L) - (j == t ? 1.0 : 0.0)) / (double)count);
  }
  return count > 0 ? (float)(total / (double)count) : 0.0f;
}

/* ---- cross-entropy in parts ------------------------------------------------------------------- */

void rt_ce_max_ref(int64_t N, int64_t V, int64_t nv, const float *logits, float *m) {
  for (int64_t r = 0; r < N; r++) {
    double mx = -INFINITY;
    for (int64_t j = 0; j < nv; j++) mx = logits[r * V + j] > mx ? logits[r * V + j] : mx;
    m[r] = (float)mx;
  }
}

void rt_ce_sums_ref(int64_t N, int64_t V, int64_t nv, int64_t lo, const float *logits, const int32_t *targets,
                    const float *m, float *st) {
  for (int64_t r = 0; r < N; r++) {
    double s = 0.0;
    for (int64_t j = 0; j < nv; j++) s += exp((double)logits[r * V + j] - (double)m[r]);
    int64_t t = (int64_t)targets[r] - lo;
    st[2 * r] = (float)s;
    st[2 * r + 1] = t >= 0 && t < nv ? logits[r * V + t] : 0.0f;
  }
}

int64_t rt_ce_loss_ref(int64_t N, int64_t len, const float *st, const float *m, const int32_t *targets, float *out) {
  double loss = 0.0, count = 0.0;
  for (int64_t r = 0; r < N; r++) {
    if (targets[r] < 0) continue;
    if (len > 0 && targets[r] >= len) return r;
    loss += log((double)st[2 * r]) + (double)m[r] - (double)st[2 * r + 1];
    count += 1.0;
  }
  out[0] = (float)loss;
  out[1] = (float)count;
  return -1;
}

void rt_ce_grad_ref(int64_t N, int64_t V, int64_t nv, int64_t lo, const float *logits, const int32_t *targets,
                    const float *m, const float *st, float scale, float *dlogits) {
  for (int64_t r = 0; r < N; r++)
    for (int64_t j = 0; j < V; j++) {
      double d = 0.0;
      if (targets[r] >= 0 && j < nv)
        d = (double)scale * (exp((double)logits[r * V + j] - (double)m[r]) / (double)st[2 * r] -
                             (j == (int64_t)targets[r] - lo ? 1.0 : 0.0));
      dlogits[r * V + j] = (float)d;
    }
}

/* ---- optimizers ------------------------------------------------------------------------------ */

void rt_adamw_ref(int64_t n, float *p, const float *g, float *m, float *v, float lr, float gscale, double step,
                  float beta1, float beta2, float eps, float weight_decay) {
  if (!isfinite(gscale)) return;
  for (int64_t i = 0; i < n; i++) {
    double gi = (double)gscale * g[i];
    double mi = beta1 * (double)m[i] + (1.0 - beta1) * gi;
    double vi = beta2 * (double)v[i] + (1.0 - beta2) * gi * gi;
    double mh = mi / (1.0 - pow(beta1, step)), vh = vi / (1.0 - pow(beta2, step));
    p[i] = (float)(p[i] - lr * (mh / (sqrt(vh) + eps) + weight_decay * (double)p[i]));
    m[i] = (float)mi;
    v[i] = (float)vi;
  }
}

void rt_sgd_ref(int64_t n, float *p, const float *g, float *m, float lr, float gscale, float momentum,
                float weight_decay) {
  if (!isfinite(gscale)) return;
  for (int64_t i = 0; i < n; i++) {
    double gi = (double)gscale * g[i] + (double)weight_decay * p[i];
    double mi = (double)momentum * m[i] + gi;
    m[i] = (float)mi;
    p[i] = (float)(p[i] - lr * mi);
  }
}

/* ---- bf16 ------------------------------------------------------------------------------------ */

uint16_t rt_f32_to_bf16_ref(float x) {
  if (isnan(x)) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)((u >> 16) | 0x0040u);
  }
  /* candidates: truncation toward zero, and the next bf16 away from zero */
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if (isinf(x)) return (uint16_t)(u >> 16);
  uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
  float flo, fhi;
  memcpy(&flo, &lo, sizeof flo);
  memcpy(&fhi, &hi, sizeof fhi);
  double dlo = fabs((double)x - (double)flo), dhi = fabs((double)fhi - (double)x);
  /* past the largest bf16 (0x1.fep127): the midpoint 0x1.ffp127 and above round to inf */
  if (isinf(fhi)) dhi = fabs((double)x) >= 0x1.ffp127 ? 0.0 : INFINITY;
  uint32_t pick = dlo < dhi ? lo : dhi < dlo ? hi : (((lo >> 16) & 1u) ? hi : lo);
  return (uint16_t)(pick >> 16);
}
