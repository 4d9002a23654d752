/* runtime/kernels/attention.c — causal / full scaled dot-product attention with grouped-query
 * heads, forward (o, lse) and backward (dq, dk, dv), memory-efficient: FlashAttention-2's tiling on
 * the CPU, blocks of RT_ATTN_BLOCK (64) query rows against blocks of 64 keys, every product of two
 * blocks a register-blocked micro-kernel (rt_attn_gemm, attention_tile.c: a tile of C in vector
 * registers over the whole sum, the vector width chosen at compile time).
 *
 * Forward, a task per (batch, head, query block): the query block transposed once (Q^T); per key
 * block S^T = K Q^T (keys as rows, read in place), then the online softmax along the vector, over
 * query rows (running max m, running sum l, accumulator rescaled by e^(m_old - m_new)), then
 * O += P V into the block's [64, hd] accumulator; o = O / l, lse = m + log l at the end.
 * Backward (FlashAttention-2's equations, recomputing P = exp(s - lse) from the saved lse,
 * D_i = do_i . o_i), a task per (batch, kv head), its key blocks in turn, against every query block
 * of its heads that sees them:
 *   S = Q K^T, dP = dO V^T (from the key / value block transposed); dS = P (dP - D) scale;
 *   dV_blk += P^T dO;  dK_blk += dS^T Q (held for the key block, written once);  dq += dS K.
 * Each dk/dv/dq row has one owner (dq: the task of its kv head), and every sum runs in an order
 * fixed by the shapes: the same bits for any thread count. Causal: the rows and keys that no
 * position sees are skipped by block; within a block, P and dS are zeroed past a row's last key.
 * Operands whose head dim is not a whole number of vectors are copied into padded blocks. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_tile.h"
#include "fastmath.h"
#include "kernels.h"

enum { NB = RT_ATTN_BLOCK };

static inline float dot(const float *a, const float *b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t d = 0; d < n; d++) s += a[d] * b[d];
  return s;
}

/* xt[d * NB + j] = x[j * ld + d] for j < nt, 0 up to the next whole vector: a block of rows
 * transposed, the B operand of a product with the rows along the vector: Q^T of the forward's
 * S^T = K Q^T, K^T and V^T of the backward's S = Q K^T and dP = dO V^T. */
static void transpose_block(const float *x, int64_t ld, int64_t nt, int64_t hd, float *xt) {
  for (int64_t j = 0; j < nt; j++)
    for (int64_t d = 0; d < hd; d++) xt[d * NB + j] = x[j * ld + d];
  for (int64_t d = 0; d < hd; d++)
    for (int64_t j = nt; j < rt_attn_vpad(nt); j++) xt[d * NB + j] = 0.0f;
}

/* xb[j * hdp + d] = x[j * ld + d] for j < n, d < hd, 0 for hd <= d < hdp: rows padded to whole
 * vectors, the B operand of P V, dS K, P^T dO, dS^T Q. */
static void pad_rows(const float *x, int64_t ld, int64_t n, int64_t hd, int64_t hdp, float *xb) {
  for (int64_t j = 0; j < n; j++) {
    memcpy(xb + j * hdp, x + j * ld, (size_t)hd * sizeof(float));
    for (int64_t d = hd; d < hdp; d++) xb[j * hdp + d] = 0.0f;
  }
}

/* A thread's blocks (one allocation per parallel region, a few hundred KiB at hd 256). */
static float *attn_ws(int64_t nfloats) {
  size_t bytes = ((size_t)nfloats * sizeof(float) + 63) / 64 * 64;
  float *p = aligned_alloc(64, bytes);
  if (!p) {
    fprintf(stderr, "shardrt: attention: out of memory for a %zu-byte workspace\n", bytes);
    abort();
  }
  return p;
}

static void check_hd(int64_t hd) {
  if (hd > RT_ATTN_MAX_HD) { /* kernels.h's limit (the blocks are sized by hd, on the heap) */
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
  const int64_t grp = H / KV, ldq = ld.q, ldk = ld.k, ldv = ld.v, ldo = ld.o, hdp = rt_attn_vpad(hd);
  const int direct = hd == hdp; /* whole vectors: P V reads V's rows in place, else from a padded copy */
  const float scale = 1.0f / sqrtf((float)hd);
  const int64_t nqb = (S + NB - 1) / NB;
#pragma omp parallel
  {
    /* qt: the query block transposed; st: scores, then probabilities, key-major (S^T); vb: the value
     * block padded; oacc: the rows' unnormalised o; per row: running max, sum, visible keys */
    float *qt = attn_ws(hd * NB + NB * NB + 2 * NB * hdp + 5 * NB);
    float *st = qt + hd * NB, *vb = st + NB * NB, *oacc = vb + NB * hdp, *mrow = oacc + NB * hdp, *lrow = mrow + NB,
          *bm = lrow + NB, *corr = bm + NB, *lsum = corr + NB;
    int32_t nts[NB];
#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t qb = 0; qb < nqb; qb++) {
          const int64_t kh = h / grp, s0 = qb * NB, n = S - s0 < NB ? S - s0 : NB, nqp = rt_attn_vpad(n);
          const float *kbase = k + b * T * ldk + kh * hd, *vbase = v + b * T * ldv + kh * hd;
          transpose_block(q + (b * S + s0) * ldq + h * hd, ldq, n, hd, qt);
          for (int64_t r = 0; r < NB; r++) mrow[r] = -INFINITY, lrow[r] = 0.0f;
          memset(oacc, 0, (size_t)(n * hdp) * sizeof(float));
          const int64_t tmax = key_end(causal, T, qpos, kpos, s0 + n - 1); /* keys any row sees */
          for (int64_t t0 = 0; t0 < tmax; t0 += NB) {
            const int64_t ntb = tmax - t0 < NB ? tmax - t0 : NB;
            int64_t r0 = n; /* rows r0.. see a key of the block (key_end grows with s) */
            for (int64_t r = NB - 1; r >= 0; r--) {
              int64_t nt = r < n ? key_end(causal, T, qpos, kpos, s0 + r) - t0 : 0;
              nts[r] = (int32_t)(nt < 0 ? 0 : nt > ntb ? ntb : nt);
              if (nts[r] > 0) r0 = r;
            }
            if (r0 == n) continue;
            const int64_t c0 = r0 / RT_ATTN_VW * RT_ATTN_VW; /* the columns (rows of q) computed */
            const float *vblk = vbase + t0 * ldv;
            if (!direct) pad_rows(vblk, ldv, ntb, hd, hdp, vb);
            /* S^T = K Q^T, keys as rows: the softmax below runs along the vector, over query rows */
            rt_attn_gemm(ntb, nqp - c0, hd, kbase + t0 * ldk, ldk, 1, qt + c0, NB, st + c0, NB, 0);
            for (int64_t r = c0; r < nqp; r++) bm[r] = -INFINITY, lsum[r] = 0.0f;
            for (int64_t j = 0; j < ntb; j++) {
              const float *sj = st + j * NB;
#pragma omp simd
              for (int64_t r = c0; r < nqp; r++) {
                float x = (int32_t)j < nts[r] ? sj[r] : -INFINITY;
                bm[r] = x > bm[r] ? x : bm[r];
              }
            }
#pragma omp simd
            for (int64_t r = c0; r < nqp; r++) { /* the online softmax's new max; mrow -inf first: corr ~0 x 0 */
              float mn = nts[r] > 0 && bm[r] * scale > mrow[r] ? bm[r] * scale : mrow[r];
              corr[r] = nts[r] > 0 ? rt_fexp(mrow[r] - mn) : 1.0f;
              mrow[r] = mn;
            }
            for (int64_t j = 0; j < ntb; j++) {
              float *sj = st + j * NB;
#pragma omp simd
              for (int64_t r = c0; r < nqp; r++) {
                float e = rt_fexp(sj[r] * scale - mrow[r]);
                e = (int32_t)j < nts[r] ? e : 0.0f;
                sj[r] = e;
                lsum[r] += e;
              }
            }
            for (int64_t r = r0; r < n; r++) {
              lrow[r] = lrow[r] * corr[r] + lsum[r];
              float *orow = oacc + r * hdp;
              const float c = corr[r];
              for (int64_t d = 0; d < hdp; d++) orow[d] *= c;
            }
            /* O += P V: P(r, j) = st[j NB + r] */
            rt_attn_gemm(n - r0, hdp, ntb, st + r0, 1, NB, direct ? vblk : vb, direct ? ldv : hdp, oacc + r0 * hdp,
                         hdp, 1);
          }
          for (int64_t r = 0; r < n; r++) {
            const float l = lrow[r], inv = l > 0.0f ? 1.0f / l : 0.0f;
            float *orow = o + (b * S + s0 + r) * ldo + h * hd;
            for (int64_t d = 0; d < hd; d++) orow[d] = oacc[r * hdp + d] * inv;
            lse[(b * H + h) * S + s0 + r] = l > 0.0f ? mrow[r] + logf(l) : -INFINITY;
          }
        }
    free(qt);
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

/* The first query row that sees key t0 (key_end grows with s), S if none. */
static int64_t first_row(int causal, int64_t S, int64_t T, const int32_t *qpos, const int32_t *kpos, int64_t t0) {
  if (!causal) return 0;
  int64_t lo = 0, hi = S;
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (key_end(causal, T, qpos, kpos, mid) > t0) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

static void attn_bwd(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal, const float *q,
                     const float *k, const float *v, const float *o, const float *lse, const float *dout,
                     const int32_t *qpos, const int32_t *kpos, float *dq, float *dk, float *dv, const RtAttnLd *ld0) {
  check_hd(hd);
  const RtAttnLd ld = resolve_ld(ld0, H, KV, hd);
  const int64_t grp = H / KV, ldq = ld.q, ldk = ld.k, ldv = ld.v, ldo = ld.o, lddo = ld.dout, lddq = ld.dq,
                lddk = ld.dk, lddv = ld.dv, hdp = rt_attn_vpad(hd);
  const int direct = hd == hdp; /* whole vectors: the products read q, dO, K rows in place, else padded copies */
  const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel
  {
    /* kt, vt: the key / value block transposed; kb: the key block; dkb, dvb: its gradients; qp, dop:
     * a block of query / output-gradient rows; dqt: their dq from this key block; p, ds: P and dS;
     * Dall: D = dO . o of the group's rows (FlashAttention-2's D_i, once per task) */
    float *kt = attn_ws(2 * hd * NB + 6 * NB * hdp + 2 * NB * NB + grp * S);
    float *vt = kt + hd * NB, *kb = vt + hd * NB, *dkb = kb + NB * hdp, *dvb = dkb + NB * hdp, *qp = dvb + NB * hdp,
          *dop = qp + NB * hdp, *dqt = dop + NB * hdp, *p = dqt + NB * hdp, *ds = p + NB * NB, *Dall = ds + NB * NB;
    int64_t nts[NB];
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int64_t b = 0; b < B; b++)
      for (int64_t kh = 0; kh < KV; kh++) {
        const float *kbase = k + b * T * ldk + kh * hd, *vbase = v + b * T * ldv + kh * hd;
        for (int64_t h = kh * grp; h < (kh + 1) * grp; h++)
          for (int64_t s = 0; s < S; s++) {
            memset(dq + (b * S + s) * lddq + h * hd, 0, (size_t)hd * sizeof(float));
            Dall[(h - kh * grp) * S + s] = dot(dout + (b * S + s) * lddo + h * hd, o + (b * S + s) * ldo + h * hd, hd);
          }
        for (int64_t t0 = 0; t0 < T; t0 += NB) {
          const int64_t ntb = T - t0 < NB ? T - t0 : NB, nvb = rt_attn_vpad(ntb);
          transpose_block(kbase + t0 * ldk, ldk, ntb, hd, kt);
          transpose_block(vbase + t0 * ldv, ldv, ntb, hd, vt);
          if (!direct) pad_rows(kbase + t0 * ldk, ldk, ntb, hd, hdp, kb);
          memset(dkb, 0, (size_t)(2 * NB * hdp) * sizeof(float)); /* dkb and dvb */
          const int64_t sfirst = first_row(causal, S, T, qpos, kpos, t0);
          for (int64_t h = kh * grp; h < (kh + 1) * grp; h++)
            for (int64_t sb = sfirst; sb < S; sb += NB) {
              const int64_t n = S - sb < NB ? S - sb : NB;
              for (int64_t r = 0; r < n; r++) {
                const int64_t s = sb + r, nt = key_end(causal, T, qpos, kpos, s) - t0;
                nts[r] = nt < 0 ? 0 : nt > ntb ? ntb : nt;
                const float *dor = dout + (b * S + s) * lddo + h * hd;
                if (!direct) {
                  pad_rows(q + (b * S + s) * ldq + h * hd, 0, 1, hd, hdp, qp + r * hdp);
                  pad_rows(dor, 0, 1, hd, hdp, dop + r * hdp);
                }
              }
              const float *qr = direct ? q + (b * S + sb) * ldq + h * hd : qp,
                          *dor = direct ? dout + (b * S + sb) * lddo + h * hd : dop,
                          *kr = direct ? kbase + t0 * ldk : kb;
              const int64_t lq = direct ? ldq : hdp, ldo_ = direct ? lddo : hdp, lk = direct ? ldk : hdp;
              rt_attn_gemm(n, nvb, hd, qr, lq, 1, kt, NB, p, NB, 0);     /* S = Q K^T */
              rt_attn_gemm(n, nvb, hd, dor, ldo_, 1, vt, NB, ds, NB, 0); /* dP = dO V^T */
              for (int64_t r = 0; r < n; r++) {
                float *pr = p + r * NB, *dsr = ds + r * NB;
                const int64_t nt = nts[r];
                const float L = lse[(b * H + h) * S + sb + r], D = Dall[(h - kh * grp) * S + sb + r];
#pragma omp simd
                for (int64_t j = 0; j < nvb; j++) {
                  float e = rt_fexp(pr[j] * scale - L), pj = j < nt ? e : 0.0f;
                  pr[j] = pj;
                  dsr[j] = pj * (dsr[j] - D) * scale; /* dS, scaled for dq and dk */
                }
              }
              rt_attn_gemm(ntb, hdp, n, p, 1, NB, dor, ldo_, dvb, hdp, 1); /* dV += P^T dO */
              rt_attn_gemm(ntb, hdp, n, ds, 1, NB, qr, lq, dkb, hdp, 1);   /* dK += dS^T Q */
              rt_attn_gemm(n, hdp, ntb, ds, NB, 1, kr, lk, dqt, hdp, 0);   /* this block's dQ = dS K */
              for (int64_t r = 0; r < n; r++) {
                float *dqr = dq + (b * S + sb + r) * lddq + h * hd;
                for (int64_t d = 0; d < hd; d++) dqr[d] += dqt[r * hdp + d];
              }
            }
          for (int64_t j = 0; j < ntb; j++) {
            memcpy(dk + (b * T + t0 + j) * lddk + kh * hd, dkb + j * hdp, (size_t)hd * sizeof(float));
            memcpy(dv + (b * T + t0 + j) * lddv + kh * hd, dvb + j * hdp, (size_t)hd * sizeof(float));
          }
        }
      }
    free(kt);
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
