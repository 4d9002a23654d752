/* runtime/kernels/attention.c — causal / full scaled dot-product attention with grouped-query
 * heads, forward (o, lse) and backward (dq, dk, dv), memory-efficient.
 *
 * Forward: one query row at a time against key blocks of RT_ATTN_BLOCK, with the online softmax
 * (running max m, running sum l, accumulator rescaled by e^(m_old - m_new)); a thread holds one
 * block of scores and one hd-long accumulator. Backward (FlashAttention-2's equations, recomputing
 * P = exp(s - lse) from the saved lse, D_i = do_i . o_i):
 *   dv_j += P_ij do_i;  dP_ij = do_i . v_j;  dS_ij = P_ij (dP_ij - D_i);
 *   dq_i += scale dS_ij k_j;  dk_j += scale dS_ij q_i.
 * Parallel over (batch, kv head) so each dk/dv/dq row has one owner. */
#include <math.h>
#include <string.h>

#include "fastmath.h"
#include "kernels.h"

static inline float dot(const float *a, const float *b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t d = 0; d < n; d++) s += a[d] * b[d];
  return s;
}

void rt_sdpa_fwd(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal, const float *q,
                 const float *k, const float *v, float *o, float *lse) {
  const int64_t grp = H / KV, qC = H * hd, kC = KV * hd;
  const float scale = 1.0f / sqrtf((float)hd);
  const int64_t nqb = (S + RT_ATTN_BLOCK - 1) / RT_ATTN_BLOCK;
#pragma omp parallel for collapse(3) schedule(dynamic, 1)
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t qb = 0; qb < nqb; qb++) {
        const int64_t kh = h / grp;
        const float *kbase = k + b * T * kC + kh * hd, *vbase = v + b * T * kC + kh * hd;
        float sc[RT_ATTN_BLOCK], acc[RT_ATTN_MAX_HD];
        int64_t s1 = (qb + 1) * RT_ATTN_BLOCK < S ? (qb + 1) * RT_ATTN_BLOCK : S;
        for (int64_t s = qb * RT_ATTN_BLOCK; s < s1; s++) {
          const float *qr = q + (b * S + s) * qC + h * hd;
          float *orow = o + (b * S + s) * qC + h * hd;
          int64_t tend = causal ? (s + 1 < T ? s + 1 : T) : T;
          float m = -INFINITY, l = 0.0f;
          for (int64_t d = 0; d < hd; d++) acc[d] = 0.0f;
          for (int64_t t0 = 0; t0 < tend; t0 += RT_ATTN_BLOCK) {
            int64_t nt = tend - t0 < RT_ATTN_BLOCK ? tend - t0 : RT_ATTN_BLOCK;
            float bm = -INFINITY;
            for (int64_t j = 0; j < nt; j++) {
              sc[j] = scale * dot(qr, kbase + (t0 + j) * kC, hd);
              bm = sc[j] > bm ? sc[j] : bm;
            }
            float mn = bm > m ? bm : m;
            float corr = rt_fexp(m - mn); /* m = -inf on the first block: corr ~ 0, acc and l are 0 */
            l *= corr;
            for (int64_t d = 0; d < hd; d++) acc[d] *= corr;
            for (int64_t j = 0; j < nt; j++) {
              float p = rt_fexp(sc[j] - mn);
              l += p;
              const float *vr = vbase + (t0 + j) * kC;
              for (int64_t d = 0; d < hd; d++) acc[d] += p * vr[d];
            }
            m = mn;
          }
          float inv = l > 0.0f ? 1.0f / l : 0.0f;
          for (int64_t d = 0; d < hd; d++) orow[d] = acc[d] * inv;
          lse[(b * H + h) * S + s] = l > 0.0f ? m + logf(l) : -INFINITY;
        }
      }
}

void rt_sdpa_bwd(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal, const float *q,
                 const float *k, const float *v, const float *o, const float *lse, const float *dout, float *dq,
                 float *dk, float *dv) {
  const int64_t grp = H / KV, qC = H * hd, kC = KV * hd;
  const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int64_t b = 0; b < B; b++)
    for (int64_t kh = 0; kh < KV; kh++) {
      const float *kbase = k + b * T * kC + kh * hd, *vbase = v + b * T * kC + kh * hd;
      float *dkbase = dk + b * T * kC + kh * hd, *dvbase = dv + b * T * kC + kh * hd;
      for (int64_t t = 0; t < T; t++) {
        memset(dkbase + t * kC, 0, (size_t)hd * sizeof(float));
        memset(dvbase + t * kC, 0, (size_t)hd * sizeof(float));
      }
      float dqa[RT_ATTN_MAX_HD];
      for (int64_t h = kh * grp; h < (kh + 1) * grp; h++)
        for (int64_t s = 0; s < S; s++) {
          const float *qr = q + (b * S + s) * qC + h * hd, *orow = o + (b * S + s) * qC + h * hd,
                      *dor = dout + (b * S + s) * qC + h * hd;
          float *dqr = dq + (b * S + s) * qC + h * hd;
          float L = lse[(b * H + h) * S + s];
          int64_t tend = causal ? (s + 1 < T ? s + 1 : T) : T;
          float Di = dot(dor, orow, hd);
          for (int64_t d = 0; d < hd; d++) dqa[d] = 0.0f;
          for (int64_t t = 0; t < tend; t++) {
            const float *kr = kbase + t * kC, *vr = vbase + t * kC;
            float P = rt_fexp(scale * dot(qr, kr, hd) - L);
            float dP = dot(dor, vr, hd);
            float dS = P * (dP - Di) * scale;
            float *dkr = dkbase + t * kC, *dvr = dvbase + t * kC;
            for (int64_t d = 0; d < hd; d++) {
              dvr[d] += P * dor[d];
              dqa[d] += dS * kr[d];
              dkr[d] += dS * qr[d];
            }
          }
          for (int64_t d = 0; d < hd; d++) dqr[d] = dqa[d];
        }
    }
}
