/* tests/cuda/flash_sweep.c — see flash_sweep.h. Shapes: B 8, T 1024, causal, GPT-2's H 12, hd 64, and
 * the 509M Llama shape's H 16, KV 8, hd 128. Every candidate first runs the forward and the backward
 * of the timed kernels at B 1 (the batch is only the grid) against rt_sdpa_fwd_ref / rt_sdpa_bwd_ref
 * (bf16 tolerance 1e-2 relative, absolute 1e-2 forward and 4e-2 backward, as kcases.c), then is
 * timed: one line per candidate with each kernel's microseconds and TFLOP/s (causal FLOPs: forward
 * 4 B H T^2 hd / 2; dK/dV 4 matmuls, dQ 3, the whole backward counted as 5, the usual 2.5x the
 * forward), and forward + backward together (3.5x the forward's FLOPs over both times: issue 17's
 * 300 TFLOP/s). */
#include "flash_sweep.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "ref.h"

#define NV 16

static float bfr(float x) {
  uint32_t u = (uint32_t)rt_f32_to_bf16_ref(x) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* n values in [-1, 1) rounded to bf16: host floats, and their bf16 bits on the device at d */
static float *rnd(int64_t n, uint64_t *st, const SweepHost *h, void *d) {
  float *v = malloc((size_t)n * 4);
  uint16_t *b = malloc((size_t)n * 2);
  for (int64_t i = 0; i < n; i++) {
    *st = *st * 6364136223846793005ULL + 1442695040888963407ULL;
    v[i] = bfr((float)((double)(*st >> 11) / 9007199254740992.0 * 2.0 - 1.0));
    b[i] = rt_f32_to_bf16_ref(v[i]);
  }
  h->h2d(d, b, (size_t)n * 2);
  free(b);
  return v;
}

/* device bf16 [n] -> host floats */
static float *get_bf(const SweepHost *h, const void *d, int64_t n) {
  uint16_t *b = malloc((size_t)n * 2);
  float *v = malloc((size_t)n * 4);
  h->d2h(b, d, (size_t)n * 2);
  for (int64_t i = 0; i < n; i++) {
    uint32_t u = (uint32_t)b[i] << 16;
    memcpy(&v[i], &u, 4);
  }
  free(b);
  return v;
}

/* |got - ref| <= rt |ref| + at everywhere; prints the worst when not */
static int close_to(const char *what, const float *got, const float *ref, int64_t n, double rt, double at) {
  int64_t bad = 0, worst = 0;
  double we = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - ref[i]), lim = rt * fabs(ref[i]) + at;
    if (!(e <= lim)) bad++;
    if (!(e <= we)) we = e, worst = i;
  }
  if (bad) printf("    %s: %lld of %lld outside tolerance, worst |diff| %.3g at %lld (got %g, ref %g)\n", what,
                  (long long)bad, (long long)n, we, (long long)worst, got[worst], ref[worst]);
  return bad == 0;
}

/* the launches of a statement, one statement each ("rt_cu_launch(...);" each) */
static int split(Arena *a, const char *stmt, const char **out, int max) {
  int n = 0;
  const char *p = strstr(stmt, "rt_cu_launch(");
  while (p && n < max) {
    const char *q = strstr(p + 1, "rt_cu_launch(");
    size_t len = q ? (size_t)(q - p) : strlen(p);
    char *s = arena_alloc(a, len + 1);
    memcpy(s, p, len);
    s[len] = 0;
    out[n++] = s;
    p = q;
  }
  return n;
}

static int kernel_of(const char *launch) {
  int id = -1;
  sscanf(launch, "rt_cu_launch(ctx, %d,", &id);
  return id;
}

/* The candidates of head dim hd at B, T 1024, H heads, KV kv heads, causal; returns the failed checks. */
static int sweep_shape(const SweepHost *h, int64_t hd, int64_t B, int64_t H, int64_t KV) {
  Arena a;
  arena_init(&a);
  CuK *k = cuk_new(&a);
  const int64_t T = 1024, cB = 1; /* the check: the timed kernels at B 1 */
  CuFlashCfg v[NV];
  int nv = cuk_flash_variants(hd, v, NV);
  /* the check's buffers and the timed ones (bf16; lse f32): 0 q, 1 k, 2 v, 3 dout, 4 o, 5 dq, 6 dk, 7 dv, 8 lse */
  size_t cq = (size_t)cB * T * H * hd, ck = (size_t)cB * T * KV * hd, tq = (size_t)B * T * H * hd,
         tk = (size_t)B * T * KV * hd;
  void *cd[9], *td[9];
  const char *cn[9], *tn[9];
  for (int i = 0; i < 9; i++) {
    int kv = i == 1 || i == 2 || i == 6 || i == 7;
    cn[i] = h->buf(&a, i == 8 ? (size_t)cB * H * T * 4 : (kv ? ck : cq) * 2, &cd[i]);
    tn[i] = h->buf(&a, i == 8 ? (size_t)B * H * T * 4 : (kv ? tk : tq) * 2, &td[i]);
  }
  CuWgTile wt[NV]; /* on sm_90a, after the mma.sync rows: the wgmma forward's tiles, with the first row's backward */
  int nw = h->wgmma ? cuk_wg_variants(hd, wt, NV) : 0;
  /* ... then the wgmma backward's: the i-th dK/dV tile with the i-th dQ tile (the shorter list's again), with
   * the first row's forward */
  CuWgBwdTile bk[NV], bq[NV];
  int nbk = h->wgmma ? cuk_wg_bwd_variants(1, hd, bk, NV) : 0, nbq = h->wgmma ? cuk_wg_bwd_variants(2, hd, bq, NV) : 0;
  int nwb = nbk > nbq ? nbk : nbq;
  /* ... then the backward in one kernel (shardk_wgmma_bwd1.cuh) in each of its tiles, with the first row's forward:
   * its two launches are D's (flash_bwd1_pre, in the dQ columns) and the fused kernel (the dK/dV columns, its
   * TFLOP/s of the whole backward's 5 units) */
  CuWgBwdTile bf[NV];
  int nf = h->wgmma ? cuk_wg_bwd1_variants(hd, bf, NV) : 0, nr = nv + nw + nwb + nf;
  const char *cf[3 * NV], *cb[3 * NV], *tf[3 * NV], *tb[3 * NV];
  for (int i = 0; i < nr; i++) {
    cuk_set_flash_cfg(k, &v[i < nv ? i : 0]);
    cuk_set_flash_wg(k, i < nv || i >= nv + nw ? NULL : &wt[i - nv]);
    int j = i - nv - nw;
    cuk_set_flash_wg_bwd(k, j >= 0 && j < nwb ? &bk[j % nbk] : NULL, j >= 0 && j < nwb ? &bq[j % nbq] : NULL);
    cuk_set_flash_wg_bwd1(k, j >= nwb ? &bf[j - nwb] : NULL);
    cf[i] = cuk_sdpa(k, cn[4], cn[8], cn[0], cn[1], cn[2], DT_BF16, cB, T, H, KV, hd, 1, NULL);
    cb[i] = cuk_sdpa_bwd(k, cn[5], cn[6], cn[7], cn[0], cn[1], cn[2], cn[4], cn[8], cn[3], DT_BF16, cB, T, H, KV, hd, 1, NULL);
    tf[i] = cuk_sdpa(k, tn[4], tn[8], tn[0], tn[1], tn[2], DT_BF16, B, T, H, KV, hd, 1, NULL);
    tb[i] = cuk_sdpa_bwd(k, tn[5], tn[6], tn[7], tn[0], tn[1], tn[2], tn[4], tn[8], tn[3], DT_BF16, B, T, H, KV, hd, 1, NULL);
  }
  cuk_set_flash_wg(k, NULL);
  cuk_set_flash_wg_bwd(k, NULL, NULL);
  cuk_set_flash_wg_bwd1(k, NULL);
  char *ws = h->alloc((size_t)cuk_workspace(k));
  h->load(cuk_source(k));
  uint64_t st = 4242;
  float *q = rnd((int64_t)cq, &st, h, cd[0]), *kk = rnd((int64_t)ck, &st, h, cd[1]), *vv = rnd((int64_t)ck, &st, h, cd[2]),
        *dout = rnd((int64_t)cq, &st, h, cd[3]);
  for (int i = 0; i < 4; i++) free(rnd((int64_t)(i == 1 || i == 2 ? tk : tq), &st, h, td[i]));
  int64_t nl = cB * H * T;
  float *ro = malloc(cq * 4), *rl = malloc((size_t)nl * 4), *rdq = malloc(cq * 4), *rdk = malloc(ck * 4),
        *rdv = malloc(ck * 4);
  rt_sdpa_fwd_ref(cB, T, T, H, KV, hd, 1, q, kk, vv, ro, rl);
  /* the backward's reference from the reference o rounded to bf16 (the kernels read a bf16 o) */
  float *rob = malloc(cq * 4);
  for (size_t i = 0; i < cq; i++) rob[i] = bfr(ro[i]);
  rt_sdpa_bwd_ref(cB, T, T, H, KV, hd, 1, q, kk, vv, rob, rl, dout, rdq, rdk, rdv);
  const double fa = 4.0 * (double)B * H * T * T * hd / 2;
  printf("\nattention tile sweep: bf16 B%lld T%lld H%lld KV%lld hd%lld causal; tiles (m-tiles a warp, warps, streamed "
         "rows, min blocks per SM; s: the warps' own rows in shared memory), regs/local bytes per thread, us, TFLOP/s\n",
         (long long)B, (long long)T, (long long)H, (long long)KV, (long long)hd);
  printf("%-3s %-16s %18s %-16s %18s %-16s %18s %9s %8s %8s %s\n", "#", "fwd", "", "dK/dV", "", "dQ", "", "bwd us",
         "TFLOP/s", "fwd+bwd", "check");
  int fails = 0;
  for (int i = 0; i < nr; i++) {
    const CuFlashCfg *c = &v[i < nv ? i : 0];
    /* check: the forward, then the backward from the reference's o (bf16) and lse, as its reference */
    h->run(cf[i], ws);
    float *go = get_bf(h, cd[4], (int64_t)cq), *gl = malloc((size_t)nl * 4);
    h->d2h(gl, cd[8], (size_t)nl * 4);
    int ok = close_to("o", go, ro, (int64_t)cq, 1e-2, 1e-2) & close_to("lse", gl, rl, nl, 1e-5, 1e-3);
    uint16_t *ob = malloc(cq * 2);
    for (size_t j = 0; j < cq; j++) ob[j] = rt_f32_to_bf16_ref(ro[j]);
    h->h2d(cd[4], ob, cq * 2);
    h->h2d(cd[8], rl, (size_t)nl * 4);
    free(ob);
    h->run(cb[i], ws);
    float *gq = get_bf(h, cd[5], (int64_t)cq), *gk = get_bf(h, cd[6], (int64_t)ck), *gv = get_bf(h, cd[7], (int64_t)ck);
    ok &= close_to("dq", gq, rdq, (int64_t)cq, 1e-2, 4e-2) & close_to("dk", gk, rdk, (int64_t)ck, 1e-2, 4e-2) &
          close_to("dv", gv, rdv, (int64_t)ck, 1e-2, 4e-2);
    free(go), free(gl), free(gq), free(gk), free(gv);
    fails += !ok;
    /* time: the forward, each backward kernel, the whole backward */
    const char *bl[4]; /* the backward's launches: dQ (and D), then dK / dV */
    int nb = split(&a, tb[i], bl, 4);
    double uf = h->time_us(tf[i], ws), ub = h->time_us(tb[i], ws);
    double uq = nb == 2 ? h->time_us(bl[0], ws) : 0, ukv = nb == 2 ? h->time_us(bl[1], ws) : 0;
    int rf, lf, rk, lk, rq, lq;
    h->attrs(kernel_of(tf[i]), &rf, &lf);
    h->attrs(nb == 2 ? kernel_of(bl[1]) : -1, &rk, &lk);
    h->attrs(nb == 2 ? kernel_of(bl[0]) : -1, &rq, &lq);
    const int j = i - nv - nw, fu = j >= nwb; /* fu: the one-kernel backward */
    const char *fl = i < nv || j >= 0 ? arena_printf(&a, "(%d,%d,%3d,%d%s)", c->fwd.mt, c->fwd.w, c->fwd.bt,
                                                     c->fwd.minb, c->fwd.rs ? "s" : "")
                                      : wt[i - nv].ws ? arena_printf(&a, "ws(%d,%d,%d)", wt[i - nv].bk, wt[i - nv].nwg,
                                                                     wt[i - nv].ws)
                                      : arena_printf(&a, "wg(%d,%d%s)", wt[i - nv].bk, wt[i - nv].nwg,
                                                     wt[i - nv].pipe ? ",p" : "");
    const char *kl = j < 0   ? arena_printf(&a, "(%d,%d,%3d,%d%s)", c->kv.mt, c->kv.w, c->kv.bt, c->kv.minb,
                                            c->kv.rs ? "s" : "")
                     : fu    ? arena_printf(&a, "wgf(%d,%d)", bf[j - nwb].bt, bf[j - nwb].nwg)
                             : arena_printf(&a, "wg(%d,%d%s)", bk[j % nbk].bt, bk[j % nbk].nwg, bk[j % nbk].pipe ? ",p" : "");
    const char *ql = j < 0 ? arena_printf(&a, "(%d,%d,%3d,%d%s)", c->q.mt, c->q.w, c->q.bt, c->q.minb, c->q.rs ? "s" : "")
                     : fu  ? "D"
                           : arena_printf(&a, "wg(%d,%d%s)", bq[j % nbq].bt, bq[j % nbq].nwg, bq[j % nbq].pipe ? ",p" : "");
    printf("%-3d %-12s %3d/%-3d %7.1f %6.1f  %-12s %3d/%-3d %7.1f %6.1f  %-12s %3d/%-3d "
           "%7.1f %6.1f %9.1f %8.1f %8.1f %s\n",
           i, fl, rf, lf, uf, fa / (uf * 1e-6) / 1e12, kl, rk, lk, ukv, (fu ? 2.5 : 2) * fa / (ukv * 1e-6) / 1e12, ql, rq,
           lq, uq, fu ? 0.0 : 1.5 * fa / (uq * 1e-6) / 1e12, ub, 2.5 * fa / (ub * 1e-6) / 1e12,
           3.5 * fa / ((uf + ub) * 1e-6) / 1e12, ok ? "ok" : "FAIL");
    fflush(stdout);
  }
  printf("(the first line is what the compiler emits: codegen/cuda_flash_cfg.c%s%s%s)\n",
         nw ? "; wg(keys a tile, warpgroups): the forward on wgmma, codegen/cuda_wgmma_cfg.c, with line 0's backward; "
              "ws(keys a tile, consumer warpgroups, stages): the same warp-specialized (shardk_wgmma_ws.cuh)"
            : "",
         nwb ? "; dK/dV and dQ wg(streamed rows a tile, warpgroups): the backward on wgmma, with line 0's forward" : "",
         nf ? "; wgf(streamed rows, warpgroups): the backward in one kernel (its TFLOP/s: the whole backward's), D its "
              "first launch"
            : "");
  free(q), free(kk), free(vv), free(dout), free(ro), free(rl), free(rdq), free(rdk), free(rdv), free(rob);
  h->free(ws);
  arena_free(&a);
  return fails;
}

int flash_sweep(const SweepHost *h) {
  return sweep_shape(h, 64, 8, 12, 12) /* GPT-2 124M */ + sweep_shape(h, 128, 8, 16, 8) /* the 509M Llama shape */;
}
