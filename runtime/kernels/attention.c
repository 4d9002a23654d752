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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fastmath.h"
#include "kernels.h"

static inline float dot(const float *a, const float *b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t d = 0; d < n; d++) s += a[d] * b[d];
  return s;
}

/* xt[d * RT_ATTN_BLOCK + j] = x[(t0 + j) * ld + d]: a key block transposed, so that the scores of
 * one query against the block are a loop over j that vectorises (no horizontal sums). */
static void transpose_block(const float *x, int64_t ld, int64_t t0, int64_t nt, int64_t hd, float *xt) {
  for (int64_t j = 0; j < nt; j++)
    for (int64_t d = 0; d < hd; d++) xt[d * RT_ATTN_BLOCK + j] = x[(t0 + j) * ld + d];
  int64_t nt16 = (nt + 15) / 16 * 16; /* scores() reads whole 16-column groups: zero the tail */
  for (int64_t d = 0; d < hd; d++)
    for (int64_t j = nt; j < nt16; j++) xt[d * RT_ATTN_BLOCK + j] = 0.0f;
}

/* 16 floats in one AVX-512 register (two AVX2 ones), unaligned loads allowed. Spelled out with
 * GCC vector types: left to itself the vectoriser picked the strided loop and used gathers. */
typedef float v16 __attribute__((vector_size(64), aligned(4), may_alias));

/* s[j] = scale * q . k_j for j < nt (rounded up to 16; kt has RT_ATTN_BLOCK columns), from the
 * transposed block. */
static inline void scores(const float *qr, const float *kt, int64_t nt, int64_t hd, float scale, float *s) {
  for (int64_t j0 = 0; j0 < nt; j0 += 16) {
    v16 a = {0};
    for (int64_t d = 0; d < hd; d++) a += qr[d] * *(const v16 *)(kt + d * RT_ATTN_BLOCK + j0);
    *(v16 *)(s + j0) = a * scale;
  }
}

/* acc[d] = acc[d] * corr + sum_j p[j] x[j * ld + d] for j < nt: d in 16-wide register chunks. */
static inline void accum_rows(float *acc, float corr, const float *p, const float *x, int64_t ld, int64_t nt,
                              int64_t hd) {
  int64_t d0 = 0;
  for (; d0 + 16 <= hd; d0 += 16) {
    v16 a = *(v16 *)(acc + d0) * corr;
    for (int64_t j = 0; j < nt; j++) a += p[j] * *(const v16 *)(x + j * ld + d0);
    *(v16 *)(acc + d0) = a;
  }
  for (; d0 < hd; d0++) {
    float a = acc[d0] * corr;
    for (int64_t j = 0; j < nt; j++) a += p[j] * x[j * ld + d0];
    acc[d0] = a;
  }
}

static void check_hd(int64_t hd) {
  if (hd > RT_ATTN_MAX_HD) { /* guards the stack buffers; larger heads need a larger RT_ATTN_MAX_HD */
    fprintf(stderr, "shardrt: attention head dim %lld > RT_ATTN_MAX_HD (%d)\n", (long long)hd, RT_ATTN_MAX_HD);
    abort();
  }
}

/* The keys query row s sees: t < key_end (positions increasing; NULL: row indices). */
static inline int64_t key_end(int causal, int64_t T, const int32_t *qpos, const int32_t *kpos, int64_t s) {
  if (!causal) return T;
  if (!qpos) return s + 1 < T ? s + 1 : T;
  int64_t lo = 0, hi = T;
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (kpos[mid] <= qpos[s]) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* The row strides, 0 resolved: H hd for q, o, dout, dq; KV hd for k, v, dk, dv. */
static RtAttnLd resolve_ld(const RtAttnLd *ld, int64_t H, int64_t KV, int64_t hd) {
  RtAttnLd r = ld ? *ld : (RtAttnLd){0};
  const int64_t qw = H * hd, kw = KV * hd;
  r.q = r.q ? r.q : qw, r.o = r.o ? r.o : qw, r.dout = r.dout ? r.dout : qw, r.dq = r.dq ? r.dq : qw;
  r.k = r.k ? r.k : kw, r.v = r.v ? r.v : kw, r.dk = r.dk ? r.dk : kw, r.dv = r.dv ? r.dv : kw;
  return r;
}

static void attn_fwd(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal, const float *q,
                     const float *k, const float *v, const int32_t *qpos, const int32_t *kpos, float *o, float *lse,
                     const RtAttnLd *ld0);
static void attn_bwd(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal, const float *q,
                     const float *k, const float *v, const float *o, const float *lse, const float *dout,
                     const int32_t *qpos, const int32_t *kpos, float *dq, float *dk, float *dv, const RtAttnLd *ld0);

void rt_sdpa_fwd(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal, const float *q,
                 const float *k, const float *v, float *o, float *lse) {
  attn_fwd(B, S, T, H, KV, hd, causal, q, k, v, NULL, NULL, o, lse, NULL);
}
void rt_sdpa_fwd_ld(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal, const float *q,
                    const float *k, const float *v, float *o, float *lse, const RtAttnLd *ld) {
  attn_fwd(B, S, T, H, KV, hd, causal, q, k, v, NULL, NULL, o, lse, ld);
}
void rt_attn_block_fwd(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal,
                       const float *q, const float *k, const float *v, const int32_t *qpos, const int32_t *kpos,
                       float *o, float *lse) {
  attn_fwd(B, S, T, H, KV, hd, causal, q, k, v, qpos, kpos, o, lse, NULL);
}

static void attn_fwd(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal, const float *q,
                     const float *k, const float *v, const int32_t *qpos, const int32_t *kpos, float *o, float *lse,
                     const RtAttnLd *ld0) {
  check_hd(hd);
  const RtAttnLd ld = resolve_ld(ld0, H, KV, hd);
  const int64_t grp = H / KV, ldq = ld.q, ldk = ld.k, ldv = ld.v, ldo = ld.o;
  const float scale = 1.0f / sqrtf((float)hd);
  const int64_t nqb = (S + RT_ATTN_BLOCK - 1) / RT_ATTN_BLOCK;
  float *ms = lse; /* running max per row, kept in lse until the end; l in a local array */
#pragma omp parallel for collapse(3) schedule(dynamic, 1)
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t qb = 0; qb < nqb; qb++) {
        const int64_t kh = h / grp, s0 = qb * RT_ATTN_BLOCK;
        const int64_t s1 = s0 + RT_ATTN_BLOCK < S ? s0 + RT_ATTN_BLOCK : S;
        const float *kbase = k + b * T * ldk + kh * hd, *vbase = v + b * T * ldv + kh * hd;
        float kt[RT_ATTN_MAX_HD * RT_ATTN_BLOCK] __attribute__((aligned(64)));
        float sc[RT_ATTN_BLOCK], ls[RT_ATTN_BLOCK];
        float *mrow = ms + (b * H + h) * S;
        for (int64_t s = s0; s < s1; s++) {
          mrow[s] = -INFINITY;
          ls[s - s0] = 0.0f;
          memset(o + (b * S + s) * ldo + h * hd, 0, (size_t)hd * sizeof(float));
        }
        int64_t tmax = key_end(causal, T, qpos, kpos, s1 - 1); /* keys any row of the block sees */
        for (int64_t t0 = 0; t0 < tmax; t0 += RT_ATTN_BLOCK) {
          int64_t ntb = tmax - t0 < RT_ATTN_BLOCK ? tmax - t0 : RT_ATTN_BLOCK;
          transpose_block(kbase, ldk, t0, ntb, hd, kt);
          for (int64_t s = s0; s < s1; s++) {
            int64_t tend = key_end(causal, T, qpos, kpos, s);
            int64_t nt = tend - t0 < ntb ? tend - t0 : ntb;
            if (nt <= 0) continue;
            const float *qr = q + (b * S + s) * ldq + h * hd;
            float *acc = o + (b * S + s) * ldo + h * hd; /* o accumulates unnormalised */
            scores(qr, kt, nt, hd, scale, sc);
            float bm = -INFINITY;
            for (int64_t j = 0; j < nt; j++) bm = sc[j] > bm ? sc[j] : bm;
            float m = mrow[s], mn = bm > m ? bm : m;
            float corr = rt_fexp(m - mn); /* m = -inf on the first block: corr ~ 0 times zeros */
            float l = ls[s - s0] * corr;
#pragma omp simd reduction(+ : l)
            for (int64_t j = 0; j < nt; j++) {
              sc[j] = rt_fexp(sc[j] - mn);
              l += sc[j];
            }
            accum_rows(acc, corr, sc, vbase + t0 * ldv, ldv, nt, hd);
            ls[s - s0] = l;
            mrow[s] = mn;
          }
        }
        for (int64_t s = s0; s < s1; s++) {
          float l = ls[s - s0], inv = l > 0.0f ? 1.0f / l : 0.0f;
          float *orow = o + (b * S + s) * ldo + h * hd;
          for (int64_t d = 0; d < hd; d++) orow[d] *= inv;
          mrow[s] = l > 0.0f ? mrow[s] + logf(l) : -INFINITY;
        }
      }
}

void rt_sdpa_bwd(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal, const float *q,
                 const float *k, const float *v, const float *o, const float *lse, const float *dout, float *dq,
                 float *dk, float *dv) {
  attn_bwd(B, S, T, H, KV, hd, causal, q, k, v, o, lse, dout, NULL, NULL, dq, dk, dv, NULL);
}
void rt_sdpa_bwd_ld(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal, const float *q,
                    const float *k, const float *v, const float *o, const float *lse, const float *dout, float *dq,
                    float *dk, float *dv, const RtAttnLd *ld) {
  attn_bwd(B, S, T, H, KV, hd, causal, q, k, v, o, lse, dout, NULL, NULL, dq, dk, dv, ld);
}
void rt_attn_block_bwd(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal,
                       const float *q, const float *k, const float *v, const float *o, const float *lse,
                       const float *dout, const int32_t *qpos, const int32_t *kpos, float *dq, float *dk, float *dv) {
  attn_bwd(B, S, T, H, KV, hd, causal, q, k, v, o, lse, dout, qpos, kpos, dq, dk, dv, NULL);
}

static void attn_bwd(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal, const float *q,
                     const float *k, const float *v, const float *o, const float *lse, const float *dout,
                     const int32_t *qpos, const int32_t *kpos, float *dq, float *dk, float *dv, const RtAttnLd *ld0) {
  check_hd(hd);
  const RtAttnLd ld = resolve_ld(ld0, H, KV, hd);
  const int64_t grp = H / KV, ldq = ld.q, ldk = ld.k, ldv = ld.v, ldo = ld.o, lddo = ld.dout, lddq = ld.dq,
                lddk = ld.dk, lddv = ld.dv;
  const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int64_t b = 0; b < B; b++)
    for (int64_t kh = 0; kh < KV; kh++) {
      const float *kbase = k + b * T * ldk + kh * hd, *vbase = v + b * T * ldv + kh * hd;
      float *dkbase = dk + b * T * lddk + kh * hd, *dvbase = dv + b * T * lddv + kh * hd;
      float kt[RT_ATTN_MAX_HD * RT_ATTN_BLOCK] __attribute__((aligned(64)));
      float vt[RT_ATTN_MAX_HD * RT_ATTN_BLOCK] __attribute__((aligned(64)));
      float P[RT_ATTN_BLOCK], dP[RT_ATTN_BLOCK];
      for (int64_t t = 0; t < T; t++) {
        memset(dkbase + t * lddk, 0, (size_t)hd * sizeof(float));
        memset(dvbase + t * lddv, 0, (size_t)hd * sizeof(float));
      }
      for (int64_t h = kh * grp; h < (kh + 1) * grp; h++)
        for (int64_t s = 0; s < S; s++) memset(dq + (b * S + s) * lddq + h * hd, 0, (size_t)hd * sizeof(float));
      for (int64_t t0 = 0; t0 < T; t0 += RT_ATTN_BLOCK) {
        int64_t ntb = T - t0 < RT_ATTN_BLOCK ? T - t0 : RT_ATTN_BLOCK;
        transpose_block(kbase, ldk, t0, ntb, hd, kt);
        transpose_block(vbase, ldv, t0, ntb, hd, vt);
        for (int64_t h = kh * grp; h < (kh + 1) * grp; h++)
          for (int64_t s = causal && !qpos ? (t0 < S ? t0 : S) : 0; s < S; s++) { /* causal: rows s >= t0 see the block */
            int64_t tend = key_end(causal, T, qpos, kpos, s);
            int64_t nt = tend - t0 < ntb ? tend - t0 : ntb;
            if (nt <= 0) continue;
            const float *qr = q + (b * S + s) * ldq + h * hd, *orow = o + (b * S + s) * ldo + h * hd,
                        *dor = dout + (b * S + s) * lddo + h * hd;
            float *dqr = dq + (b * S + s) * lddq + h * hd;
            float L = lse[(b * H + h) * S + s];
            float Di = dot(dor, orow, hd);
            scores(qr, kt, nt, hd, scale, P);
            scores(dor, vt, nt, hd, 1.0f, dP);
#pragma omp simd
            for (int64_t j = 0; j < nt; j++) {
              float p = rt_fexp(P[j] - L);
              P[j] = p;
              dP[j] = p * (dP[j] - Di) * scale; /* dS */
            }
            accum_rows(dqr, 1.0f, dP, kbase + t0 * ldk, ldk, nt, hd); /* dq += dS K */
            for (int64_t j = 0; j < nt; j++) {
              float *dkr = dkbase + (t0 + j) * lddk, *dvr = dvbase + (t0 + j) * lddv;
              const float p = P[j], ds = dP[j];
#pragma omp simd
              for (int64_t d = 0; d < hd; d++) {
                dvr[d] += p * dor[d];
                dkr[d] += ds * qr[d];
              }
            }
          }
      }
    }
}

void rt_attn_combine(int64_t B, int64_t S, int64_t H, int64_t hd, const float *o1, const float *lse1,
                     const float *o2, const float *lse2, float *o, float *lse) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t s = 0; s < S; s++) {
        int64_t li = (b * H + h) * S + s, at = (b * S + s) * H * hd + h * hd;
        float a = lse1[li], c = lse2[li], m = a > c ? a : c;
        if (m == -INFINITY) {
          lse[li] = -INFINITY;
          for (int64_t d = 0; d < hd; d++) o[at + d] = 0.0f;
          continue;
        }
        float ea = expf(a - m), ec = expf(c - m), l = m + logf(ea + ec), w1 = ea / (ea + ec), w2 = ec / (ea + ec);
        for (int64_t d = 0; d < hd; d++) o[at + d] = w1 * o1[at + d] + w2 * o2[at + d];
        lse[li] = l;
      }
}
