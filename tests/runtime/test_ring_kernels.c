/* tests/runtime/test_ring_kernels.c — ring attention's CPU kernels (rt_attn_block_fwd / bwd,
 * rt_attn_combine, rt_rope_at) against the naive whole-sequence references (kernels/ref.c).
 *
 * A sequence of S tokens is cut in 2 cp chunks, rank c holding chunks c and 2 cp - 1 - c (zigzag,
 * passes/shard_cp.c). For every rank: attention of its queries over every rank's key block
 * (attn_block at global positions), combined by log-sum-exp, must give the reference sdpa's rows
 * (o within 1e-5 + 1e-4 relative, lse within 1e-5); the backward blocks, given the whole o and
 * lse, summed over blocks (dq) and over ranks (dk, dv), must give the reference's gradients within
 * 2e-5 of their largest element; rope_at at the zigzag positions must give the reference rope's
 * rows within 1e-6. Exits non-zero on any mismatch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/ref.h"

static int fails;
static uint64_t rng = 88172645463325252ull;

static float *fbuf(int64_t n, double lo, double hi) {
  float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!p) exit(2);
  for (int64_t i = 0; i < n; i++) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    p[i] = (float)(lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0);
  }
  return p;
}

static void check(const char *what, const float *got, const float *want, int64_t n, double atol, double rtol) {
  int64_t bad = 0, wi = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)want[i]);
    if (!(d <= atol + rtol * fabs((double)want[i])) && !(isinf(got[i]) && got[i] == want[i])) {
      if (!bad) wi = i;
      bad++;
    }
  }
  printf("%s %-44s %lld / %lld off", bad ? "FAIL" : "ok  ", what, (long long)bad, (long long)n);
  if (bad) printf(" (first at %lld: %g vs %g)", (long long)wi, got[wi], want[wi]);
  printf("\n");
  if (bad) fails++;
}

static double maxabs(const float *x, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
  return m;
}

/* Global position of local row l of rank c (zigzag, chunks of `per`). */
static int32_t zpos(int cp, int c, int64_t per, int64_t l) {
  return (int32_t)(l < per ? c * per + l : (2 * cp - 1 - c) * per + l - per);
}

/* rows [B, S, C] of x at rank c's positions -> y [B, S / cp, C] */
static void take(const float *x, float *y, int64_t B, int64_t S, int64_t C, int cp, int c) {
  int64_t n = S / cp, per = n / 2;
  for (int64_t b = 0; b < B; b++)
    for (int64_t l = 0; l < n; l++) memcpy(y + (b * n + l) * C, x + (b * S + zpos(cp, c, per, l)) * C, (size_t)C * 4);
}

/* y [B, S, C] rows at rank c's positions += x [B, S / cp, C] */
static void put_add(const float *x, float *y, int64_t B, int64_t S, int64_t C, int cp, int c) {
  int64_t n = S / cp, per = n / 2;
  for (int64_t b = 0; b < B; b++)
    for (int64_t l = 0; l < n; l++)
      for (int64_t j = 0; j < C; j++) y[(b * S + zpos(cp, c, per, l)) * C + j] += x[(b * n + l) * C + j];
}

static void ring_case(int64_t B, int64_t S, int64_t H, int64_t KV, int64_t hd, int causal, int cp) {
  char tag[96], name[160];
  snprintf(tag, sizeof tag, "cp%d B%lld S%lld H%lld KV%lld hd%lld%s", cp, (long long)B, (long long)S, (long long)H,
           (long long)KV, (long long)hd, causal ? " causal" : "");
  int64_t qC = H * hd, kC = KV * hd, nq = B * S * qC, nk = B * S * kC, nl = B * H * S, n = S / cp;
  float *q = fbuf(nq, -2, 2), *k = fbuf(nk, -2, 2), *v = fbuf(nk, -1, 1), *dout = fbuf(nq, -1, 1);
  float *o = fbuf(nq, 0, 0), *lse = fbuf(nl, 0, 0), *dq = fbuf(nq, 0, 0), *dk = fbuf(nk, 0, 0), *dv = fbuf(nk, 0, 0);
  rt_sdpa_fwd_ref(B, S, S, H, KV, hd, causal, q, k, v, o, lse);
  rt_sdpa_bwd_ref(B, S, S, H, KV, hd, causal, q, k, v, o, lse, dout, dq, dk, dv);
  float *go = calloc((size_t)nq, 4), *glse = calloc((size_t)nl, 4), *gdq = calloc((size_t)nq, 4),
        *gdk = calloc((size_t)nk, 4), *gdv = calloc((size_t)nk, 4);
  float *lq = fbuf(B * n * qC, 0, 0), *lk = fbuf(B * n * kC, 0, 0), *lv = fbuf(B * n * kC, 0, 0);
  float *lo = fbuf(B * n * qC, 0, 0), *llse = fbuf(B * H * n, 0, 0), *bo = fbuf(B * n * qC, 0, 0),
        *blse = fbuf(B * H * n, 0, 0), *ldo = fbuf(B * n * qC, 0, 0), *wo = fbuf(B * n * qC, 0, 0),
        *wlse = fbuf(B * H * n, 0, 0), *bdq = fbuf(B * n * qC, 0, 0), *bdk = fbuf(B * n * kC, 0, 0),
        *bdv = fbuf(B * n * kC, 0, 0), *ldq = fbuf(B * n * qC, 0, 0);
  int32_t *qpos = malloc((size_t)n * 4), *kpos = malloc((size_t)n * 4);
  if (!go || !glse || !gdq || !gdk || !gdv || !qpos || !kpos) exit(2);
  for (int c = 0; c < cp; c++) {
    take(q, lq, B, S, qC, cp, c);
    take(dout, ldo, B, S, qC, cp, c);
    for (int64_t l = 0; l < n; l++) qpos[l] = zpos(cp, c, n / 2, l);
    for (int j = 0; j < cp; j++) { /* the ring's order: own block first, then c - 1, c - 2, ... */
      int r = ((c - j) % cp + cp) % cp;
      take(k, lk, B, S, kC, cp, r);
      take(v, lv, B, S, kC, cp, r);
      for (int64_t l = 0; l < n; l++) kpos[l] = zpos(cp, r, n / 2, l);
      rt_attn_block_fwd(B, n, n, H, KV, hd, causal, lq, lk, lv, qpos, kpos, j ? bo : lo, j ? blse : llse);
      if (j) rt_attn_combine(B, n, H, hd, lo, llse, bo, blse, lo, llse);
    }
    put_add(lo, go, B, S, qC, cp, c);
    for (int64_t b = 0; b < B; b++) /* lse [B, H, S]: rows at positions along the last dim */
      for (int64_t h = 0; h < H; h++)
        for (int64_t l = 0; l < n; l++) glse[(b * H + h) * S + qpos[l]] = llse[(b * H + h) * n + l];
    /* backward, with the reference's whole o and lse at this rank's rows */
    take(o, wo, B, S, qC, cp, c);
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t l = 0; l < n; l++) wlse[(b * H + h) * n + l] = lse[(b * H + h) * S + qpos[l]];
    memset(ldq, 0, (size_t)(B * n * qC) * 4);
    for (int r = 0; r < cp; r++) {
      take(k, lk, B, S, kC, cp, r);
      take(v, lv, B, S, kC, cp, r);
      for (int64_t l = 0; l < n; l++) kpos[l] = zpos(cp, r, n / 2, l);
      rt_attn_block_bwd(B, n, n, H, KV, hd, causal, lq, lk, lv, wo, wlse, ldo, qpos, kpos, bdq, bdk, bdv);
      for (int64_t i = 0; i < B * n * qC; i++) ldq[i] += bdq[i];
      put_add(bdk, gdk, B, S, kC, cp, r);
      put_add(bdv, gdv, B, S, kC, cp, r);
    }
    put_add(ldq, gdq, B, S, qC, cp, c);
  }
  snprintf(name, sizeof name, "ring o   %s", tag);
  check(name, go, o, nq, 1e-5, 1e-4);
  snprintf(name, sizeof name, "ring lse %s", tag);
  check(name, glse, lse, nl, 1e-5, 1e-5);
  const float *got[3] = {gdq, gdk, gdv}, *want[3] = {dq, dk, dv};
  const char *gn[3] = {"dq", "dk", "dv"};
  for (int g = 0; g < 3; g++) {
    int64_t m = g ? nk : nq;
    snprintf(name, sizeof name, "ring %s  %s", gn[g], tag);
    check(name, got[g], want[g], m, 2e-5 * maxabs(want[g], m), 0.0);
  }
  /* rope_at at rank 1's positions = the reference rope's rows there */
  float *ry = fbuf(nq, 0, 0), *lx = fbuf(B * n * qC, 0, 0), *ly = fbuf(B * n * qC, 0, 0), *want_r = fbuf(B * n * qC, 0, 0);
  void *ws = malloc(rt_rope_workspace_bytes(n, hd));
  rt_rope_ref(B, S, H, hd, 10000.0, 0, 0, q, ry);
  take(q, lx, B, S, qC, cp, 1);
  take(ry, want_r, B, S, qC, cp, 1);
  for (int64_t l = 0; l < n; l++) qpos[l] = zpos(cp, 1, n / 2, l);
  rt_rope_at(B, n, H, hd, 10000.0, 0, 0, qpos, lx, ly, ws);
  snprintf(name, sizeof name, "rope_at  %s", tag);
  check(name, ly, want_r, B * n * qC, 1e-6, 1e-5);
  free(ry), free(lx), free(ly), free(want_r), free(ws);
  free(q), free(k), free(v), free(dout), free(o), free(lse), free(dq), free(dk), free(dv);
  free(go), free(glse), free(gdq), free(gdk), free(gdv), free(lq), free(lk), free(lv), free(lo), free(llse), free(bo);
  free(blse), free(ldo), free(wo), free(wlse), free(bdq), free(bdk), free(bdv), free(ldq), free(qpos), free(kpos);
}

int main(void) {
  ring_case(2, 136, 6, 2, 40, 1, 2); /* chunks of 34: not a multiple of the kernel's 64-key block; GQA 3:1 */
  ring_case(2, 136, 6, 2, 40, 0, 2);
  ring_case(1, 256, 4, 4, 32, 1, 4); /* MHA */
  ring_case(1, 256, 4, 1, 16, 0, 4);
  ring_case(1, 200, 2, 1, 12, 1, 2); /* hd 12: the kernels' padded blocks at zigzag positions */
  if (fails) {
    printf("%d check(s) failed\n", fails);
    return 1;
  }
  printf("ring attention kernels equal the whole-sequence references\n");
  return 0;
}
