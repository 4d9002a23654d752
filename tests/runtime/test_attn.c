/* tests/runtime/test_attn.c — the CPU attention (runtime/kernels/attention.c: rt_sdpa_fwd / bwd and
 * their strided _ld forms) against the naive references (ref.h) on odd shapes: S not a multiple
 * of the 64-row block, S < T and S > T causal, GQA and multi-query, one token, head dims that are
 * not a whole number of vector registers (the padded blocks); the strided calls bitwise equal to
 * the contiguous ones; the backward reference against central finite differences of the forward
 * reference. Built twice: test_attn against libshardrt, test_attn_vw16 with attention.c compiled
 * in at AVX-512's tiling (RT_ATTN_VW=16) whatever the machine. (Thread-count independence:
 * test_kernels misc; ring attention's block kernels: test_ring_kernels.)
 *
 *   test_attn      exits non-zero after printing every mismatch summary
 */
#include "kernels/kernels.h"
#include "kernels/ref.h"
#include "kcheck.h"

typedef struct {
  int64_t B, S, T, H, KV, hd;
  int causal;
  float *q, *k, *v, *o, *lse, *r;
} AttnCtx;

static double attn_loss(void *p) {
  AttnCtx *c = p;
  rt_sdpa_fwd_ref(c->B, c->S, c->T, c->H, c->KV, c->hd, c->causal, c->q, c->k, c->v, c->o, c->lse);
  return dotd(c->o, c->r, c->B * c->S * c->H * c->hd);
}

/* The scale of rounding in the sdpa backward: for each gradient, the largest over its elements of
 * the sum of |terms| that enter it (in double, from the reference's P = exp(s - lse)):
 *   dv_t = sum_s P_st dO_s                          -> sum_s P_st |dO_s|
 *   dq_s = scale sum_t P_st (dO_s.v_t - dO_s.o_s) k_t -> scale sum_t P_st (|dO_s|.|v_t| + |dO_s|.|o_s|) |k_t|
 *   dk_t = scale sum_s P_st (dO_s.v_t - dO_s.o_s) q_s -> likewise with |q_s|
 * A float kernel's error is a small multiple of eps times these, whatever the gradient's own size:
 * with one key (T = 1) the exact dq and dk are zero while the kernel returns rounding noise, and a
 * tolerance scaled by the (zero) gradient would collapse. */
static void sdpa_bwd_mag(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal,
                         const float *q, const float *k, const float *v, const float *o, const float *lse,
                         const float *dout, double mag[3] /* dq, dk, dv */) {
  int64_t qC = H * hd, kC = KV * hd, nq = B * S * qC, nk = B * T * kC;
  double scale = 1.0 / sqrt((double)hd);
  double *mq = calloc((size_t)nq, sizeof(double)), *mk = calloc((size_t)nk, sizeof(double)),
         *mv = calloc((size_t)nk, sizeof(double));
  if (!mq || !mk || !mv) exit(2);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t s = 0; s < S; s++) {
        int64_t qi = (b * S + s) * qC + h * hd, tend = causal ? (s + 1 < T ? s + 1 : T) : T;
        double Dabs = 0.0;
        for (int64_t d = 0; d < hd; d++) Dabs += fabs((double)dout[qi + d] * o[qi + d]);
        for (int64_t t = 0; t < tend; t++) {
          int64_t ki = (b * T + t) * kC + h / (H / KV) * hd;
          double sc = 0.0, dPabs = 0.0;
          for (int64_t d = 0; d < hd; d++) {
            sc += (double)q[qi + d] * k[ki + d];
            dPabs += fabs((double)dout[qi + d] * v[ki + d]);
          }
          double P = exp(sc * scale - lse[(b * H + h) * S + s]), dS = P * (dPabs + Dabs) * scale;
          for (int64_t d = 0; d < hd; d++) {
            mv[ki + d] += P * fabs((double)dout[qi + d]);
            mq[qi + d] += dS * fabs((double)k[ki + d]);
            mk[ki + d] += dS * fabs((double)q[qi + d]);
          }
        }
      }
  mag[0] = mag[1] = mag[2] = 0.0;
  for (int64_t i = 0; i < nq; i++) mag[0] = fmax(mag[0], mq[i]);
  for (int64_t i = 0; i < nk; i++) mag[1] = fmax(mag[1], mk[i]), mag[2] = fmax(mag[2], mv[i]);
  free(mq), free(mk), free(mv);
}

static void attn_case(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal) {
  char tag[96], name[160];
  snprintf(tag, sizeof tag, "B%lld S%lld T%lld H%lld KV%lld hd%lld%s", (long long)B, (long long)S, (long long)T,
           (long long)H, (long long)KV, (long long)hd, causal ? " causal" : "");
  int64_t nq = B * S * H * hd, nk = B * T * KV * hd, nl = B * H * S;
  float *q = fbuf(nq, -2, 2), *k = fbuf(nk, -2, 2), *v = fbuf(nk, -1, 1), *dout = fbuf(nq, -1, 1);
  float *o = fbuf(nq, 0, 0), *orf = fbuf(nq, 0, 0), *lse = fbuf(nl, 0, 0), *lser = fbuf(nl, 0, 0);
  rt_sdpa_fwd(B, S, T, H, KV, hd, causal, q, k, v, o, lse);
  rt_sdpa_fwd_ref(B, S, T, H, KV, hd, causal, q, k, v, orf, lser);
  snprintf(name, sizeof name, "sdpa o   %s", tag);
  check(name, o, orf, nq, 1e-5, 1e-4);
  snprintf(name, sizeof name, "sdpa lse %s", tag);
  check(name, lse, lser, nl, 1e-5, 1e-5);
  float *dq = fbuf(nq, 9, 9), *dk = fbuf(nk, 9, 9), *dv = fbuf(nk, 9, 9);
  float *dqr = fbuf(nq, 0, 0), *dkr = fbuf(nk, 0, 0), *dvr = fbuf(nk, 0, 0);
  rt_sdpa_bwd(B, S, T, H, KV, hd, causal, q, k, v, orf, lser, dout, dq, dk, dv);
  rt_sdpa_bwd_ref(B, S, T, H, KV, hd, causal, q, k, v, orf, lser, dout, dqr, dkr, dvr);
  /* |got - want| <= max(2e-5 max|want|, 4 eps mag): relative to the gradient's size, with a floor
   * at the rounding the inputs allow (sdpa_bwd_mag), so that a gradient that is zero by
   * construction (one key: dq = dk = 0) is not held to zero. Where the gradient is not zero by
   * construction (T > 1, or dv), the limit must also reject the kernel's result bent by 1e-3. */
  double mag[3];
  sdpa_bwd_mag(B, S, T, H, KV, hd, causal, q, k, v, orf, lser, dout, mag);
  const float *got[3] = {dq, dk, dv}, *want[3] = {dqr, dkr, dvr};
  const char *gname[3] = {"dq", "dk", "dv"};
  for (int g = 0; g < 3; g++) {
    int64_t n = g ? nk : nq;
    double mx = 0.0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs((double)want[g][i]));
    double atol = fmax(2e-5 * mx, 4.0 * FLT_EPSILON * mag[g]);
    snprintf(name, sizeof name, "sdpa %s  %s", gname[g], tag);
    check(name, got[g], want[g], n, atol, 0.0);
    if (T > 1 || g == 2) {
      snprintf(name, sizeof name, "sdpa %s  %s bent", gname[g], tag);
      check_power(name, got[g], want[g], n, atol, 0.0, 1e-3);
    }
  }
  free(q), free(k), free(v), free(dout), free(o), free(orf), free(lse), free(lser);
  free(dq), free(dk), free(dv), free(dqr), free(dkr), free(dvr);
}

/* The strided entry points (rt_sdpa_*_ld: q, k, v read out of a fused [B, S, (H + 2 KV) hd] qkv, dq,
 * dk, dv written into a dqkv of the same layout, o and dout at a wider stride) against the
 * contiguous ones: the same sums in the same order, so the same bits; dqkv's gaps untouched. */
static void attn_ld_case(int64_t B, int64_t S, int64_t H, int64_t KV, int64_t hd) {
  const int64_t W = (H + 2 * KV) * hd, nq = B * S * H * hd, nk = B * S * KV * hd, nl = B * H * S, ldo = H * hd + 3;
  float *qkv = fbuf(B * S * W, -2, 2), *dob = fbuf(B * S * ldo, -1, 1), *q = fbuf(nq, 0, 0), *k = fbuf(nk, 0, 0),
        *v = fbuf(nk, 0, 0), *dout = fbuf(nq, 0, 0);
  for (int64_t t = 0; t < B * S; t++) {
    memcpy(q + t * H * hd, qkv + t * W, (size_t)(H * hd) * 4);
    memcpy(k + t * KV * hd, qkv + t * W + H * hd, (size_t)(KV * hd) * 4);
    memcpy(v + t * KV * hd, qkv + t * W + (H + KV) * hd, (size_t)(KV * hd) * 4);
    memcpy(dout + t * H * hd, dob + t * ldo, (size_t)(H * hd) * 4);
  }
  float *o = fbuf(nq, 0, 0), *lse = fbuf(nl, 0, 0), *os = fbuf(B * S * ldo, 7, 7), *lses = fbuf(nl, 0, 0);
  float *dq = fbuf(nq, 0, 0), *dk = fbuf(nk, 0, 0), *dv = fbuf(nk, 0, 0), *dqkv = fbuf(B * S * W, 7, 7);
  const RtAttnLd ld = {.q = W, .k = W, .v = W, .o = ldo, .dout = ldo, .dq = W, .dk = W, .dv = W};
  rt_sdpa_fwd(B, S, S, H, KV, hd, 1, q, k, v, o, lse);
  rt_sdpa_fwd_ld(B, S, S, H, KV, hd, 1, qkv, qkv + H * hd, qkv + (H + KV) * hd, os, lses, &ld);
  rt_sdpa_bwd(B, S, S, H, KV, hd, 1, q, k, v, o, lse, dout, dq, dk, dv);
  rt_sdpa_bwd_ld(B, S, S, H, KV, hd, 1, qkv, qkv + H * hd, qkv + (H + KV) * hd, os, lses, dob, dqkv,
                 dqkv + H * hd, dqkv + (H + KV) * hd, &ld);
  int64_t bad = 0;
  for (int64_t t = 0; t < B * S; t++) {
    bad += memcmp(o + t * H * hd, os + t * ldo, (size_t)(H * hd) * 4) != 0 || os[t * ldo + H * hd] != 7.0f;
    bad += memcmp(dq + t * H * hd, dqkv + t * W, (size_t)(H * hd) * 4) != 0;
    bad += memcmp(dk + t * KV * hd, dqkv + t * W + H * hd, (size_t)(KV * hd) * 4) != 0;
    bad += memcmp(dv + t * KV * hd, dqkv + t * W + (H + KV) * hd, (size_t)(KV * hd) * 4) != 0;
  }
  bad += memcmp(lse, lses, (size_t)nl * 4) != 0;
  char name[96];
  snprintf(name, sizeof name, "sdpa _ld B%lld S%lld H%lld KV%lld hd%lld", (long long)B, (long long)S, (long long)H,
           (long long)KV, (long long)hd);
  if (bad) {
    g_fail = 1;
    printf("FAIL %-34s %lld rows differ from the contiguous call\n", name, (long long)bad);
  } else {
    printf("ok   %-34s bitwise equal to the contiguous call\n", name);
  }
  free(qkv), free(dob), free(q), free(k), free(v), free(dout), free(o), free(lse), free(os), free(lses);
  free(dq), free(dk), free(dv), free(dqkv);
}

static void test_attn(void) {
  attn_case(2, 133, 133, 6, 2, 40, 1); /* S not a multiple of the block, GQA 3:1 */
  attn_case(2, 133, 133, 6, 2, 40, 0);
  attn_case(1, 70, 70, 4, 4, 64, 1);   /* MHA */
  attn_case(1, 37, 150, 4, 1, 16, 1);  /* S < T, multi-query */
  attn_case(1, 37, 150, 4, 1, 16, 0);
  attn_case(3, 1, 1, 2, 2, 8, 1);      /* one token */
  attn_case(1, 100, 70, 2, 1, 12, 1);  /* S > T; hd not a whole number of vectors (padded blocks) */
  attn_case(1, 45, 45, 3, 3, 20, 0);   /* hd 20: one and a half AVX2 vectors */
  attn_ld_case(2, 70, 4, 2, 16);       /* strided operands, whole vectors (read in place) */
  attn_ld_case(1, 33, 2, 1, 12);       /* strided operands, padded copies */

  /* the backward reference against FD of the forward reference: loss = <o, r> */
  AttnCtx c = {1, 9, 9, 4, 2, 6, 1, NULL, NULL, NULL, NULL, NULL, NULL};
  int64_t nq = 9 * 4 * 6, nk = 9 * 2 * 6;
  c.q = fbuf(nq, -1, 1), c.k = fbuf(nk, -1, 1), c.v = fbuf(nk, -1, 1), c.o = fbuf(nq, 0, 0);
  c.lse = fbuf(36, 0, 0), c.r = fbuf(nq, -1, 1);
  float *dq = fbuf(nq, 0, 0), *dk = fbuf(nk, 0, 0), *dv = fbuf(nk, 0, 0);
  attn_loss(&c);
  rt_sdpa_bwd_ref(1, 9, 9, 4, 2, 6, 1, c.q, c.k, c.v, c.o, c.lse, c.r, dq, dk, dv);
  check_fd("sdpa bwd ref dq vs FD", attn_loss, &c, c.q, nq, dq, 80, 1e-3, 2e-3);
  check_fd("sdpa bwd ref dk vs FD", attn_loss, &c, c.k, nk, dk, 80, 1e-3, 2e-3);
  check_fd("sdpa bwd ref dv vs FD", attn_loss, &c, c.v, nk, dv, 80, 1e-3, 2e-3);
  free(c.q), free(c.k), free(c.v), free(c.o), free(c.lse), free(c.r), free(dq), free(dk), free(dv);
}

int main(void) {
  rt_set_threads(2); /* the CI machine's cores; exercises the parallel paths */
  test_attn();
  if (g_fail) printf("test_attn: FAILED\n");
  return g_fail ? 1 : 0;
}
