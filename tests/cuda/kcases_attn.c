/* tests/cuda/kcases_attn.c — the kernel cases of attention (the CUDA-core and tensor-core kernels, every
 * tile candidate, the wgmma forward and backward) and of ring attention's pieces (context parallelism); the rest
 * and the driver in kcases.c, whose header comment states the tolerances. */
#include "kcases.h"

#include "kcases_int.h"

#include "cu_internal.h" /* rt_cu_tune_agree: the autotuning's check (runtime/cuda/tune_check.c) */
#include "dtype.h"
#include "kernels.h" /* rt_attn_block_fwd / bwd: the CPU kernels of ring attention's blocks */

/* ---- attention ------------------------------------------------------------------------------------------------ */

/* The compiled tiles' outputs of an attention case (attn_case with cfg NULL fills them), which each other
 * candidate of cuk_flash_variants must match on the same inputs within the autotuning's check
 * (runtime/cuda/tune_check.c, with cuk_flash_check's terms and roundings): what a trainer's first call
 * compares before it may time a candidate. The backward is compared from the default's o and lse, so
 * that each kernel sees the same inputs, as at the check. */
typedef struct {
  float *o, *l, *dq, *dk, *dv;
} AttnOut;

/* The check on got against def (floats holding dt's values): expect() with the largest error/tolerance. */
static void tune_agree(KC *c, const char *what, const float *def, const float *got, int64_t n, DType dt,
                       long long terms, int rounds) {
  size_t es = dt == DT_BF16 ? 2 : 4;
  unsigned char *d = malloc((size_t)n * es + 2), *g = malloc((size_t)n * es + 2);
  for (int64_t i = 0; i < n; i++) {
    if (dt == DT_BF16) {
      uint16_t x = rt_f32_to_bf16_ref(def[i]), y = rt_f32_to_bf16_ref(got[i]); /* exact: they hold bf16 values */
      memcpy(d + 2 * i, &x, 2), memcpy(g + 2 * i, &y, 2);
    } else {
      memcpy(d + 4 * i, &def[i], 4), memcpy(g + 4 * i, &got[i], 4);
    }
  }
  RtCuAgree a;
  int ok = rt_cu_tune_agree(d, g, dt == DT_BF16 ? RT_BF16 : RT_F32, n, terms, rounds, &a);
  expect(c, arena_printf(c->a, "%s: the autotuning's check, |diff| / tolerance %.2g (largest |diff| %.3g)", what,
                         a.ratio, a.max_err),
         ok);
  free(d), free(g);
}

/* Where set, attn_case's forward outputs are another tile's on the same inputs: the first case to run fills
 * it, the next ones must give the same bits (a warp-specialized forward tile against the pipelined flash_fwd_wg
 * tile of its bk and nwg: the same products in the same order, on the emulator whose wgmma sums k in order). */
static AttnOut *fwd_same;
static const char *fwd_same_of;

/* One attention case: forward, backward twice (the same bits), against the CPU references; tensor-core
 * tiles cfg (NULL: the compiler's choice). io (NULL: none): cfg NULL fills it with the outputs; else the
 * outputs are checked against it (AttnOut). fwd_only: the forward alone (a forward tile candidate whose
 * backward is the default's, already checked on these inputs). */
static void attn_case(KC *c, int64_t B, int64_t S, int64_t H, int64_t KV, int64_t hd, int causal, DType dt,
                      const CuFlashCfg *cfg, const char *cname, AttnOut *io, int fwd_only) {
  int64_t nq = B * S * H * hd, nk = B * S * KV * hd, nl = B * H * S;
  float *q = fvec(c, nq, 1.0f), *k = fvec(c, nk, 1.0f), *v = fvec(c, nk, 1.0f), *dout = fvec(c, nq, 1.0f);
  round_to(dt, q, nq);
  round_to(dt, k, nk);
  round_to(dt, v, nk);
  round_to(dt, dout, nq);
  KT tq = kt_new(c, dt, nq), tk = kt_new(c, dt, nk), tv = kt_new(c, dt, nk), to = kt_new(c, dt, nq),
     tl = kt_new(c, DT_F32, nl), tdo = kt_new(c, dt, nq), tdq = kt_new(c, dt, nq), tdk = kt_new(c, dt, nk),
     tdv = kt_new(c, dt, nk), tdq2 = kt_new(c, dt, nq), tdk2 = kt_new(c, dt, nk), tdv2 = kt_new(c, dt, nk);
  kt_put(c, tq, q);
  kt_put(c, tk, k);
  kt_put(c, tv, v);
  kt_put(c, tdo, dout);
  cuk_set_flash_cfg(c->k, cfg);
  run(c, cuk_sdpa(c->k, P(c, to), P(c, tl), P(c, tq), P(c, tk), P(c, tv), dt, B, S, H, KV, hd, causal, NULL));
  if (!fwd_only) {
    run(c, cuk_sdpa_bwd(c->k, P(c, tdq), P(c, tdk), P(c, tdv), P(c, tq), P(c, tk), P(c, tv), P(c, to), P(c, tl),
                        P(c, tdo), dt, B, S, H, KV, hd, causal, NULL));
    run(c, cuk_sdpa_bwd(c->k, P(c, tdq2), P(c, tdk2), P(c, tdv2), P(c, tq), P(c, tk), P(c, tv), P(c, to), P(c, tl),
                        P(c, tdo), dt, B, S, H, KV, hd, causal, NULL));
  }
  KT to0 = to, tl0 = tl, tdq0 = tdq, tdk0 = tdk, tdv0 = tdv;
  if (io && cfg && !fwd_only) { /* the candidate's backward from the default's o and lse */
    to0 = kt_new(c, dt, nq), tl0 = kt_new(c, DT_F32, nl), tdq0 = kt_new(c, dt, nq), tdk0 = kt_new(c, dt, nk),
    tdv0 = kt_new(c, dt, nk);
    if (io->o) kt_put(c, to0, io->o), kt_put(c, tl0, io->l);
    run(c, cuk_sdpa_bwd(c->k, P(c, tdq0), P(c, tdk0), P(c, tdv0), P(c, tq), P(c, tk), P(c, tv), P(c, to0), P(c, tl0),
                        P(c, tdo), dt, B, S, H, KV, hd, causal, NULL));
  }
  cuk_set_flash_cfg(c->k, NULL);
  if (!c->be) return;
  const char *tag = arena_printf(c->a, "B %lld S %lld H %lld KV %lld hd %lld%s %s%s", (long long)B, (long long)S,
                                 (long long)H, (long long)KV, (long long)hd, causal ? " causal" : "", dn(dt), cname);
  if (io && !cfg) {
    io->o = kt_get(c, to), io->l = kt_get(c, tl);
    io->dq = kt_get(c, tdq), io->dk = kt_get(c, tdk), io->dv = kt_get(c, tdv);
  } else if (io && io->o) {
    long long tm[3][2];
    int rd[3][2];
    for (int w = 0; w < 3; w++) cuk_flash_check(w, S, H, KV, hd, tm[w], rd[w]);
    tune_agree(c, arena_printf(c->a, "sdpa o %s", tag), io->o, kt_get(c, to), nq, dt, tm[0][0], rd[0][0]);
    tune_agree(c, arena_printf(c->a, "sdpa lse %s", tag), io->l, kt_get(c, tl), nl, DT_F32, tm[0][1], rd[0][1]);
    if (!fwd_only) tune_agree(c, arena_printf(c->a, "sdpa_bwd dq %s", tag), io->dq, kt_get(c, tdq0), nq, dt, tm[2][0], rd[2][0]);
    if (!fwd_only) tune_agree(c, arena_printf(c->a, "sdpa_bwd dk %s", tag), io->dk, kt_get(c, tdk0), nk, dt, tm[1][0], rd[1][0]);
    if (!fwd_only) tune_agree(c, arena_printf(c->a, "sdpa_bwd dv %s", tag), io->dv, kt_get(c, tdv0), nk, dt, tm[1][1], rd[1][1]);
  }
  float *ro = arena_alloc(c->a, (size_t)nq * 4), *rl = arena_alloc(c->a, (size_t)nl * 4),
        *rdq = arena_alloc(c->a, (size_t)nq * 4), *rdk = arena_alloc(c->a, (size_t)nk * 4),
        *rdv = arena_alloc(c->a, (size_t)nk * 4);
  rt_sdpa_fwd_ref(B, S, S, H, KV, hd, causal, q, k, v, ro, rl);
  float *go = kt_get(c, to);
  double rt = tol(dt), at = dt == DT_BF16 ? 1e-2 : 1e-5;
  cmp(c, arena_printf(c->a, "sdpa o %s", tag), go, ro, nq, rt, at);
  cmp(c, arena_printf(c->a, "sdpa lse %s", tag), kt_get(c, tl), rl, nl, 1e-5, dt == DT_BF16 ? 1e-3 : 1e-5);
  if (fwd_same && !fwd_same->o) fwd_same->o = go, fwd_same->l = kt_get(c, tl);
  else if (fwd_same)
    expect(c, arena_printf(c->a, "sdpa o and lse %s: the same bits as %s", tag, fwd_same_of),
           !memcmp(go, fwd_same->o, (size_t)nq * 4) && !memcmp(kt_get(c, tl), fwd_same->l, (size_t)nl * 4));
  if (fwd_only) return;
  /* the backward from the device's own o (as the trainer runs it), in the reference's precision */
  float *gl = kt_get(c, tl);
  rt_sdpa_bwd_ref(B, S, S, H, KV, hd, causal, q, k, v, go, gl, dout, rdq, rdk, rdv);
  cmp(c, arena_printf(c->a, "sdpa_bwd dq %s", tag), kt_get(c, tdq), rdq, nq, rt, at * 4);
  cmp(c, arena_printf(c->a, "sdpa_bwd dk %s", tag), kt_get(c, tdk), rdk, nk, rt, at * 4);
  cmp(c, arena_printf(c->a, "sdpa_bwd dv %s", tag), kt_get(c, tdv), rdv, nk, rt, at * 4);
  expect(c, arena_printf(c->a, "sdpa_bwd deterministic %s", tag),
         memcmp(kt_get(c, tdq), kt_get(c, tdq2), (size_t)nq * 4) == 0 &&
             memcmp(kt_get(c, tdk), kt_get(c, tdk2), (size_t)nk * 4) == 0 &&
             memcmp(kt_get(c, tdv), kt_get(c, tdv2), (size_t)nk * 4) == 0);
}

/* The one-kernel backward's counters (shardk_wgmma_bwd1.cuh) after a case: all back at 0, else a contributor
 * miscounted (or one never came). */
static void bwd1_counters_zero(KC *c, int64_t B, int64_t S, int64_t H, int64_t hd, const char *what) {
  if (!c->be) return;
  int64_t at, n;
  cuk_bwd1_ws(B, S, H, hd, NULL, &at, &n);
  int32_t *h = malloc((size_t)n * 4);
  c->be->d2h(h, c->ws + at, (size_t)n * 4);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) bad += h[i] != 0;
  expect(c, arena_printf(c->a, "%s: its %lld counters back at 0 (%lld not)", what, (long long)n, (long long)bad),
         bad == 0);
  free(h);
}

/* columns [c0, c0 + w) of the rows of x (row stride ld) as a contiguous [rows, w] */
static float *cols_of(KC *c, const float *x, int64_t rows, int64_t ld, int64_t c0, int64_t w) {
  float *r = arena_alloc(c->a, (size_t)(rows * w) * 4 + 4);
  for (int64_t i = 0; i < rows; i++) memcpy(r + i * w, x + i * ld + c0, (size_t)w * 4);
  return r;
}
/* whether columns [c0, ld) of every row of x still hold the sentinel v */
static int cols_are(const float *x, int64_t rows, int64_t ld, int64_t c0, float v) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = c0; j < ld; j++)
      if (x[i * ld + j] != v) return 0;
  return 1;
}

/* An attention case on strided operands (memplan's views, docs/memory.md): q, k, v column slices of one
 * fused [B, S, W] tensor at columns 0, H hd and (H + KV) hd, W = (H + 2 KV) hd + 8 (a row stride above
 * the three widths together); o and dO at row stride H hd + 8; dq, dk, dv written into the same slots of
 * a fused [B, S, W] gradient whose other columns (and o's) hold a sentinel the kernels must leave alone.
 * Against the CPU references, as attn_case; fwd_only: the forward alone, as there. */
static void attn_case_strided(KC *c, int64_t B, int64_t S, int64_t H, int64_t KV, int64_t hd, int causal, DType dt,
                              const char *cname, int fwd_only) {
  const int64_t n = B * S, qw = H * hd, kw = KV * hd, W = qw + 2 * kw + 8, lo = qw + 8, nl = B * H * S;
  const int64_t es = ir_dtype_size(dt);
  const float sent = 7.0f; /* exact in bf16 */
  float *f = fvec(c, n * W, 1.0f), *dof = fvec(c, n * lo, 1.0f), *fill = arena_alloc(c->a, (size_t)(n * W) * 4);
  round_to(dt, f, n * W);
  round_to(dt, dof, n * lo);
  for (int64_t i = 0; i < n * W; i++) fill[i] = sent;
  float *q = cols_of(c, f, n, W, 0, qw), *k = cols_of(c, f, n, W, qw, kw), *v = cols_of(c, f, n, W, qw + kw, kw),
        *dout = cols_of(c, dof, n, lo, 0, qw);
  KT tf = kt_new(c, dt, n * W), to = kt_new(c, dt, n * lo), tl = kt_new(c, DT_F32, nl), tdo = kt_new(c, dt, n * lo),
     tg = kt_new(c, dt, n * W);
  kt_put(c, tf, f);
  kt_put(c, tdo, dof);
  kt_put(c, to, fill);
  kt_put(c, tg, fill);
  const char *Q = P(c, tf), *K = arena_printf(c->a, "(b%d + %lld)", tf.id, (long long)(qw * es)),
             *V = arena_printf(c->a, "(b%d + %lld)", tf.id, (long long)((qw + kw) * es)), *DQ = P(c, tg),
             *DK = arena_printf(c->a, "(b%d + %lld)", tg.id, (long long)(qw * es)),
             *DV = arena_printf(c->a, "(b%d + %lld)", tg.id, (long long)((qw + kw) * es));
  CuAttnLd ld = {.q = W, .k = W, .v = W, .o = lo, .dout = lo, .dq = W, .dk = W, .dv = W};
  run(c, cuk_sdpa(c->k, P(c, to), P(c, tl), Q, K, V, dt, B, S, H, KV, hd, causal, &ld));
  if (!fwd_only) run(c, cuk_sdpa_bwd(c->k, DQ, DK, DV, Q, K, V, P(c, to), P(c, tl), P(c, tdo), dt, B, S, H, KV, hd, causal, &ld));
  if (!c->be) return;
  const char *tag = arena_printf(c->a, "B %lld S %lld H %lld KV %lld hd %lld%s %s strided%s", (long long)B, (long long)S,
                                 (long long)H, (long long)KV, (long long)hd, causal ? " causal" : "", dn(dt), cname);
  float *go = kt_get(c, to), *gg = kt_get(c, tg), *gl = kt_get(c, tl);
  float *o = cols_of(c, go, n, lo, 0, qw);
  float *ro = arena_alloc(c->a, (size_t)(n * qw) * 4), *rl = arena_alloc(c->a, (size_t)nl * 4),
        *rdq = arena_alloc(c->a, (size_t)(n * qw) * 4), *rdk = arena_alloc(c->a, (size_t)(n * kw) * 4),
        *rdv = arena_alloc(c->a, (size_t)(n * kw) * 4);
  rt_sdpa_fwd_ref(B, S, S, H, KV, hd, causal, q, k, v, ro, rl);
  double rt = tol(dt), at = dt == DT_BF16 ? 1e-2 : 1e-5;
  cmp(c, arena_printf(c->a, "sdpa o %s", tag), o, ro, n * qw, rt, at);
  cmp(c, arena_printf(c->a, "sdpa lse %s", tag), gl, rl, nl, 1e-5, dt == DT_BF16 ? 1e-3 : 1e-5);
  expect(c, arena_printf(c->a, "sdpa o's other columns untouched %s", tag), cols_are(go, n, lo, qw, sent));
  if (fwd_only) return;
  rt_sdpa_bwd_ref(B, S, S, H, KV, hd, causal, q, k, v, o, gl, dout, rdq, rdk, rdv);
  cmp(c, arena_printf(c->a, "sdpa_bwd dq %s", tag), cols_of(c, gg, n, W, 0, qw), rdq, n * qw, rt, at * 4);
  cmp(c, arena_printf(c->a, "sdpa_bwd dk %s", tag), cols_of(c, gg, n, W, qw, kw), rdk, n * kw, rt, at * 4);
  cmp(c, arena_printf(c->a, "sdpa_bwd dv %s", tag), cols_of(c, gg, n, W, qw + kw, kw), rdv, n * kw, rt, at * 4);
  expect(c, arena_printf(c->a, "sdpa_bwd dqkv's other columns untouched %s", tag), cols_are(gg, n, W, qw + 2 * kw, sent));
}

/* Strided operands on every attention kernel: the CUDA-core ones (f32, bf16 hd 24), the tensor-core ones in
 * each tile candidate (registers and RS: shared-memory rows), the wgmma forward in each of its tiles. */
static void attn_strided_cases(KC *c, int variants, int wgmma) {
  attn_case_strided(c, 2, 37, 4, 2, 16, 1, DT_F32, "", 0);
  attn_case_strided(c, 1, 33, 2, 1, 24, 1, DT_BF16, "", 0);
  const struct {
    int64_t B, S, H, KV, hd;
    int causal;
  } fc[] = {{2, 70, 4, 2, 64, 1}, {1, 77, 4, 2, 128, 1}, {1, 50, 2, 1, 128, 0}};
  for (size_t t = 0; t < sizeof fc / sizeof fc[0]; t++) {
    CuFlashCfg v[16];
    int nv = variants ? cuk_flash_variants(fc[t].hd, v, 16) : 0;
    attn_case_strided(c, fc[t].B, fc[t].S, fc[t].H, fc[t].KV, fc[t].hd, fc[t].causal, DT_BF16, "", 0);
    for (int i = 1; i < nv; i++) {
      cuk_set_flash_cfg(c->k, &v[i]);
      attn_case_strided(c, fc[t].B, fc[t].S, fc[t].H, fc[t].KV, fc[t].hd, fc[t].causal, DT_BF16,
                        arena_printf(c->a, " tiles %d", i), 0);
      cuk_set_flash_cfg(c->k, NULL);
    }
    CuWgTile w[16];
    int nw = variants && wgmma ? cuk_wg_variants(fc[t].hd, w, 16) : 0;
    for (int i = 0; i < nw; i++) {
      char tag[32];
      if (w[i].ws && i != nw - 1) continue; /* warp-specialized: one tile is enough here (its cost on the emulator) */
      cuk_set_flash_wg(c->k, &w[i]);
      attn_case_strided(c, fc[t].B, fc[t].S, fc[t].H, fc[t].KV, fc[t].hd, fc[t].causal, DT_BF16,
                        arena_printf(c->a, " wgmma %s", cuk_wg_tag(&w[i], tag, sizeof tag)), 1);
      cuk_set_flash_wg(c->k, NULL);
    }
    CuWgBwdTile wkv[8], wq[8]; /* the backward on wgmma: each dK/dV tile with a dQ tile, as kc_cases_attention */
    int nkv = nw ? cuk_wg_bwd_variants(1, fc[t].hd, wkv, 8) : 0, nq = nw ? cuk_wg_bwd_variants(2, fc[t].hd, wq, 8) : 0;
    for (int i = 0; i < (nkv > nq ? nkv : nq); i++) {
      const CuWgBwdTile *a = &wkv[i % nkv], *b = &wq[i % nq];
      cuk_set_flash_wg_bwd(c->k, a, b);
      attn_case_strided(c, fc[t].B, fc[t].S, fc[t].H, fc[t].KV, fc[t].hd, fc[t].causal, DT_BF16,
                        arena_printf(c->a, " wgmma bwd dK/dV %dx%d%s dQ %dx%d%s", a->bt, a->nwg, a->pipe ? "p" : "",
                                     b->bt, b->nwg, b->pipe ? "p" : ""), 0);
      cuk_set_flash_wg_bwd(c->k, NULL, NULL);
    }
    CuWgBwdTile f[4]; /* the one-kernel backward: one of its tiles a case, by turns */
    int nf = nw ? cuk_wg_bwd1_variants(fc[t].hd, f, 4) : 0;
    if (nf) {
      const CuWgBwdTile *a = &f[t % (size_t)nf];
      const char *name = arena_printf(c->a, " wgmma bwd1 %dx%d", a->bt, a->nwg);
      cuk_set_flash_wg_bwd1(c->k, a);
      attn_case_strided(c, fc[t].B, fc[t].S, fc[t].H, fc[t].KV, fc[t].hd, fc[t].causal, DT_BF16, name, 0);
      bwd1_counters_zero(c, fc[t].B, fc[t].S, fc[t].H, fc[t].hd, name);
      cuk_set_flash_wg_bwd1(c->k, NULL);
    }
  }
}

static int flash_variants = 1;
void kc_flash_variants(int on) { flash_variants = on; }
static int wgmma_on = 1;
void kc_wgmma(int on) { wgmma_on = on; }

void kc_cases_attention(KC *c) {
  struct {
    int64_t B, S, H, KV, hd;
    int causal;
    DType dt;
    int variants; /* also every other tile configuration of the tensor-core kernels (cuk_flash_variants) */
  } ac[] = {{2, 37, 4, 2, 16, 1, DT_F32, 0},  {1, 40, 2, 1, 64, 0, DT_F32, 0},  {1, 45, 4, 1, 16, 1, DT_F32, 0},
            /* bf16, head dim a multiple of 16: tensor cores (partial tiles, GQA, both tile sizes; S 300 and 200:
             * several tiles of 128 rows, the last partial) */
            {1, 33, 2, 2, 32, 1, DT_BF16, 1}, {2, 70, 4, 2, 64, 1, DT_BF16, 1}, {1, 50, 2, 1, 128, 0, DT_BF16, 1},
            {1, 77, 4, 2, 128, 1, DT_BF16, 1}, {1, 300, 2, 1, 64, 1, DT_BF16, 1}, {1, 99, 4, 2, 64, 0, DT_BF16, 1},
            {1, 200, 2, 1, 128, 1, DT_BF16, 1},
            /* bf16, head dim 24: the CUDA-core kernels */
            {1, 33, 2, 1, 24, 1, DT_BF16, 0}};
  for (size_t t = 0; t < sizeof ac / sizeof ac[0]; t++) {
    CuFlashCfg v[16];
    int nv = ac[t].variants && flash_variants ? cuk_flash_variants(ac[t].hd, v, 16) : 0;
    uint64_t rng = c->rng; /* every candidate on the default's inputs */
    AttnOut io = {0};
    attn_case(c, ac[t].B, ac[t].S, ac[t].H, ac[t].KV, ac[t].hd, ac[t].causal, ac[t].dt, NULL, "", nv > 1 ? &io : NULL, 0);
    for (int i = 1; i < nv; i++) {
      c->rng = rng;
      attn_case(c, ac[t].B, ac[t].S, ac[t].H, ac[t].KV, ac[t].hd, ac[t].causal, ac[t].dt, &v[i],
                arena_printf(c->a, " tiles %d", i), &io, 0);
    }
    /* the forward on Hopper's wgmma (shardk_wgmma.cuh, shardk_wgmma_ws.cuh), each of its tiles, on the default's
     * inputs; a warp-specialized tile also against the pipelined tile of its bk and nwg (the same bits) */
    CuWgTile w[16];
    AttnOut same[16] = {{0}};
    int nw = ac[t].dt == DT_BF16 && flash_variants && wgmma_on ? cuk_wg_variants(ac[t].hd, w, 16) : 0;
    for (int i = 0; i < nw; i++) {
      char tag[32], of[32];
      for (int j = 0; j < nw; j++)
        if (w[j].pipe && !w[j].ws && w[j].bk == w[i].bk && w[j].nwg == w[i].nwg && (j == i || (w[i].ws && j < i)))
          fwd_same = &same[j], fwd_same_of = cuk_wg_tag(&w[j], of, sizeof of);
      c->rng = rng;
      cuk_set_flash_wg(c->k, &w[i]);
      /* the forward alone (its backward is the default's); with the default's outputs at hand (nv > 1), the
       * autotuning's check too */
      attn_case(c, ac[t].B, ac[t].S, ac[t].H, ac[t].KV, ac[t].hd, ac[t].causal, ac[t].dt, nv > 1 ? &v[0] : NULL,
                arena_printf(c->a, " wgmma %s", cuk_wg_tag(&w[i], tag, sizeof tag)), nv > 1 ? &io : NULL, 1);
      cuk_set_flash_wg(c->k, NULL);
      fwd_same = NULL;
    }
    /* the backward on wgmma (shardk_wgmma_bwd.cuh): each dK/dV tile with a dQ tile (the i-th of each list,
     * the shorter one's tiles again), the forward the default's */
    CuWgBwdTile wkv[8], wq[8];
    int nkv = nw ? cuk_wg_bwd_variants(1, ac[t].hd, wkv, 8) : 0, nq = nw ? cuk_wg_bwd_variants(2, ac[t].hd, wq, 8) : 0;
    for (int i = 0; i < (nkv > nq ? nkv : nq); i++) {
      const CuWgBwdTile *a = &wkv[i % nkv], *b = &wq[i % nq];
      c->rng = rng;
      cuk_set_flash_wg_bwd(c->k, a, b);
      attn_case(c, ac[t].B, ac[t].S, ac[t].H, ac[t].KV, ac[t].hd, ac[t].causal, ac[t].dt, nv > 1 ? &v[0] : NULL,
                arena_printf(c->a, " wgmma bwd dK/dV %dx%d%s dQ %dx%d%s", a->bt, a->nwg, a->pipe ? "p" : "", b->bt, b->nwg,
                             b->pipe ? "p" : ""),
                nv > 1 ? &io : NULL, 0);
      cuk_set_flash_wg_bwd(c->k, NULL, NULL);
    }
    /* the backward in one kernel (shardk_wgmma_bwd1.cuh), each of its tiles, the forward the default's: twice
     * the same bits, against the reference and the default's outputs, its counters back at 0 */
    CuWgBwdTile f[4];
    int nf = nw ? cuk_wg_bwd1_variants(ac[t].hd, f, 4) : 0;
    for (int i = 0; i < nf; i++) {
      c->rng = rng;
      const char *name = arena_printf(c->a, " wgmma bwd1 %dx%d", f[i].bt, f[i].nwg);
      cuk_set_flash_wg_bwd1(c->k, &f[i]);
      attn_case(c, ac[t].B, ac[t].S, ac[t].H, ac[t].KV, ac[t].hd, ac[t].causal, ac[t].dt, nv > 1 ? &v[0] : NULL, name,
                nv > 1 ? &io : NULL, 0);
      bwd1_counters_zero(c, ac[t].B, ac[t].S, ac[t].H, ac[t].hd, name);
      cuk_set_flash_wg_bwd1(c->k, NULL);
    }
  }
  attn_strided_cases(c, flash_variants, wgmma_on);
}

/* ---- ring attention's pieces (context parallelism) ------------------------------------------------------------- */

static void block_cases(KC *c);

/* rows [B, n, C] of x [B, N, C] in the zigzag chunks `ch` (two of four chunks of N / 4 rows) <-> a
 * contiguous [B, N / 2, C]; to_part: x -> part, else part -> x */
static void zz_rows(float *x, float *part, int64_t B, int64_t N, int64_t C, const int *ch, int to_part) {
  int64_t q = N / 4;
  for (int64_t b = 0; b < B; b++)
    for (int j = 0; j < 2; j++)
      for (int64_t r = 0; r < q; r++) {
        float *xr = x + (b * N + ch[j] * q + r) * C, *pr = part + (b * 2 * q + j * q + r) * C;
        if (to_part) memcpy(pr, xr, (size_t)C * 4);
        else memcpy(xr, pr, (size_t)C * 4);
      }
}

/* The sequence of N tokens in four chunks, cp = 2 zigzag: rank 0 holds chunks {0, 3}, rank 1 {1, 2}.
 * Rank 0's queries (rope_at at their positions; attention over its own keys and then rank 1's,
 * merged in place) against the whole-sequence references: rope, sdpa's o and lse of those rows, and
 * the backward of the two blocks (dq summed, dk / dv of each block's rows) against sdpa_bwd with dO
 * zero outside rank 0's rows. */
void kc_cases_ring(KC *c) {
  struct {
    int64_t B, N, H, KV, hd;
    int causal;
    DType dt;
  } rc[] = {{2, 40, 4, 2, 16, 1, DT_F32}, {1, 48, 2, 1, 32, 0, DT_F32}, {1, 40, 4, 2, 32, 1, DT_BF16}};
  static const int own[2] = {0, 3}, other[2] = {1, 2};
  for (size_t t = 0; t < sizeof rc / sizeof rc[0]; t++) {
    int64_t B = rc[t].B, N = rc[t].N, H = rc[t].H, KV = rc[t].KV, hd = rc[t].hd, S = N / 2, qC = H * hd, kC = KV * hd;
    int causal = rc[t].causal;
    DType dt = rc[t].dt;
    int64_t nq = B * N * qC, nk = B * N * kC, nl = B * H * N, sq = nq / 2, sk = nk / 2, sl = nl / 2;
    float *q = fvec(c, nq, 1.0f), *k = fvec(c, nk, 1.0f), *v = fvec(c, nk, 1.0f), *dout = fvec(c, nq, 1.0f);
    round_to(dt, q, nq), round_to(dt, k, nk), round_to(dt, v, nk), round_to(dt, dout, nq);
    for (int64_t b = 0; b < B; b++) /* dO zero outside rank 0's rows */
      for (int64_t r = N / 4; r < 3 * N / 4; r++) memset(dout + (b * N + r) * qC, 0, (size_t)qC * 4);
    float *q0 = fvec(c, sq, 0), *do0 = fvec(c, sq, 0), *k0 = fvec(c, sk, 0), *v0 = fvec(c, sk, 0), *k1 = fvec(c, sk, 0),
          *v1 = fvec(c, sk, 0);
    zz_rows(q, q0, B, N, qC, own, 1), zz_rows(dout, do0, B, N, qC, own, 1);
    zz_rows(k, k0, B, N, kC, own, 1), zz_rows(v, v0, B, N, kC, own, 1);
    zz_rows(k, k1, B, N, kC, other, 1), zz_rows(v, v1, B, N, kC, other, 1);
    int32_t pos0[256], pos1[256];
    for (int64_t j = 0; j < S; j++) {
      pos0[j] = (int32_t)(own[j / (N / 4)] * (N / 4) + j % (N / 4));
      pos1[j] = (int32_t)(other[j / (N / 4)] * (N / 4) + j % (N / 4));
    }
    KT tq = kt_new(c, dt, sq), tk0 = kt_new(c, dt, sk), tv0 = kt_new(c, dt, sk), tk1 = kt_new(c, dt, sk),
       tv1 = kt_new(c, dt, sk), tp0 = kt_new(c, DT_I32, S), tp1 = kt_new(c, DT_I32, S), to = kt_new(c, dt, sq),
       tl = kt_new(c, DT_F32, sl), to1 = kt_new(c, dt, sq), tl1 = kt_new(c, DT_F32, sl), tdo = kt_new(c, dt, sq),
       tr = kt_new(c, dt, sq), tdq[2], tdk[2], tdv[2];
    for (int i = 0; i < 2; i++) tdq[i] = kt_new(c, dt, sq), tdk[i] = kt_new(c, dt, sk), tdv[i] = kt_new(c, dt, sk);
    kt_put(c, tq, q0), kt_put(c, tk0, k0), kt_put(c, tv0, v0), kt_put(c, tk1, k1), kt_put(c, tv1, v1);
    kt_put(c, tdo, do0), kt_put_i32(c, tp0, pos0), kt_put_i32(c, tp1, pos1);
    CuAttnKeys ks[2] = {{S, P(c, tp0), P(c, tp0)}, {S, P(c, tp0), P(c, tp1)}};
    run(c, cuk_rope_at(c->k, P(c, tr), P(c, tq), P(c, tp0), dt, B, S, H, hd, 10000.0, 0, 0));
    run(c, cuk_attn_block(c->k, P(c, to), P(c, tl), P(c, tq), P(c, tk0), P(c, tv0), dt, B, S, &ks[0], H, KV, hd, causal));
    run(c, cuk_attn_block(c->k, P(c, to1), P(c, tl1), P(c, tq), P(c, tk1), P(c, tv1), dt, B, S, &ks[1], H, KV, hd, causal));
    run(c, cuk_attn_combine(c->k, P(c, to), P(c, tl), P(c, to), P(c, tl), P(c, to1), P(c, tl1), dt, B, S, H, hd));
    for (int i = 0; i < 2; i++)
      run(c, cuk_attn_block_bwd(c->k, P(c, tdq[i]), P(c, tdk[i]), P(c, tdv[i]), P(c, tq), P(c, i ? tk1 : tk0),
                                P(c, i ? tv1 : tv0), P(c, to), P(c, tl), P(c, tdo), dt, B, S, &ks[i], H, KV, hd, causal));
    if (!c->be) continue;
    const char *tag = arena_printf(c->a, "B %lld N %lld H %lld KV %lld hd %lld%s %s", (long long)B, (long long)N,
                                   (long long)H, (long long)KV, (long long)hd, causal ? " causal" : "", dn(dt));
    double rt = tol(dt), at = dt == DT_BF16 ? 1e-2 : 1e-5;
    float *ref = fvec(c, nq, 0), *part = fvec(c, sq, 0);
    rt_rope_ref(B, N, H, hd, 10000.0, 0, 0, q, ref);
    zz_rows(ref, part, B, N, qC, own, 1);
    cmp(c, arena_printf(c->a, "rope_at %s", tag), kt_get(c, tr), part, sq, rt, at);
    float *ro = fvec(c, nq, 0), *rl = fvec(c, nl, 0), *rlp = fvec(c, sl, 0);
    rt_sdpa_fwd_ref(B, N, N, H, KV, hd, causal, q, k, v, ro, rl);
    zz_rows(ro, part, B, N, qC, own, 1);
    float *go = kt_get(c, to), *gl = kt_get(c, tl);
    cmp(c, arena_printf(c->a, "ring o %s", tag), go, part, sq, rt, at);
    zz_rows(rl, rlp, B * H, N, 1, own, 1); /* lse [B, H, N]: rows of each (b, h) */
    cmp(c, arena_printf(c->a, "ring lse %s", tag), gl, rlp, sl, 1e-5, dt == DT_BF16 ? 1e-3 : 1e-5);
    /* the backward from the device's o and lse on rank 0's rows (as the trainer runs it) */
    zz_rows(ro, go, B, N, qC, own, 0), zz_rows(rl, gl, B * H, N, 1, own, 0);
    float *rdq = fvec(c, nq, 0), *rdk = fvec(c, nk, 0), *rdv = fvec(c, nk, 0), *kp = fvec(c, sk, 0);
    rt_sdpa_bwd_ref(B, N, N, H, KV, hd, causal, q, k, v, ro, rl, dout, rdq, rdk, rdv);
    float *dq = kt_get(c, tdq[0]), *dq1 = kt_get(c, tdq[1]);
    for (int64_t i = 0; i < sq; i++) dq[i] += dq1[i];
    zz_rows(rdq, part, B, N, qC, own, 1);
    cmp(c, arena_printf(c->a, "ring dq %s", tag), dq, part, sq, rt, at * 4);
    for (int i = 0; i < 2; i++) {
      zz_rows(rdk, kp, B, N, kC, i ? other : own, 1);
      cmp(c, arena_printf(c->a, "ring dk block %d %s", i, tag), kt_get(c, tdk[i]), kp, sk, rt, at * 4);
      zz_rows(rdv, kp, B, N, kC, i ? other : own, 1);
      cmp(c, arena_printf(c->a, "ring dv block %d %s", i, tag), kt_get(c, tdv[i]), kp, sk, rt, at * 4);
    }
  }
  block_cases(c);
}


/* ---- ring attention's blocks on their own ---------------------------------------------------------------------- */

/* Whether the source emitted so far holds sk::<name><S, H, KV, hd, causal, ...> ending in ", true, T>": the block on
 * the tensor-core kernels at positions (shardk_flash.cuh's POS). */
static int emitted_pos(KC *c, const char *name, int64_t S, int64_t H, int64_t KV, int64_t hd, int causal, int64_t T) {
  const char *src = cuk_source(c->k), *head = arena_printf(c->a, "sk::%s<%lldLL, %lld, %lld, %lld, %s, ", name,
                                                           (long long)S, (long long)H, (long long)KV, (long long)hd,
                                                           causal ? "true" : "false"),
             *tail = arena_printf(c->a, ", true, %lldLL>(", (long long)T);
  for (const char *at = strstr(src, head); at; at = strstr(at + 1, head)) {
    const char *end = strchr(at, ';'), *t = strstr(at, tail);
    if (end && t && t < end) return 1;
  }
  return 0;
}

/* lse against its reference: the rows the reference gives -inf (no key seen) exactly -inf, the others by cmp */
static void cmp_lse(KC *c, const char *what, float *got, float *ref, int64_t n, double atol) {
  int64_t bad = 0, none = 0;
  for (int64_t i = 0; i < n; i++)
    if (isinf(ref[i]) && ref[i] < 0) {
      none++;
      bad += !(isinf(got[i]) && got[i] < 0);
      got[i] = ref[i] = 0;
    }
  expect(c, arena_printf(c->a, "%s: the %lld rows that see no key at -inf (%lld not)", what, (long long)none, (long long)bad),
         bad == 0);
  cmp(c, what, got, ref, n, 1e-5, atol);
}

/* whether the rows r of x [B, R, C] (R rows a batch) with zero[r] set are all exactly 0 */
static int rows_zero(const float *x, int64_t B, int64_t R, int64_t C, const char *zero) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t r = 0; r < R; r++)
      for (int64_t j = 0; zero[r] && j < C; j++)
        if (x[(b * R + r) * C + j] != 0.0f) return 0;
  return 1;
}

/* One ring block (attn_block, attn_block_bwd) of S queries at positions qp over T keys at kp (increasing), against
 * the CPU kernels (rt_attn_block_fwd / bwd) on the same values: the forward, then the backward from a whole
 * attention's o and lse (random o; lse = log(e^lse_block + e^x), x in [-1, 1]: what the other blocks add) run twice
 * (the same bits). Rows that see no key: o and dq exactly 0, lse -inf; keys no row sees: dk and dv exactly 0. bf16
 * with a tensor-core head dim must be emitted on the tensor-core kernels (ir_attn_flash), else the CUDA-core ones. */
static void block_case(KC *c, const char *name, int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd,
                       int causal, DType dt, const int32_t *qp, const int32_t *kp, const char *cname) {
  int64_t nq = B * S * H * hd, nk = B * T * KV * hd, nl = B * H * S;
  float *q = fvec(c, nq, 1.0f), *k = fvec(c, nk, 1.0f), *v = fvec(c, nk, 1.0f), *dout = fvec(c, nq, 1.0f),
        *og = fvec(c, nq, 1.0f), *x = fvec(c, nl, 1.0f);
  round_to(dt, q, nq), round_to(dt, k, nk), round_to(dt, v, nk), round_to(dt, dout, nq), round_to(dt, og, nq);
  KT tq = kt_new(c, dt, nq), tk = kt_new(c, dt, nk), tv = kt_new(c, dt, nk), tqp = kt_new(c, DT_I32, S),
     tkp = kt_new(c, DT_I32, T), to = kt_new(c, dt, nq), tl = kt_new(c, DT_F32, nl), tog = kt_new(c, dt, nq),
     tlg = kt_new(c, DT_F32, nl), tdo = kt_new(c, dt, nq), tdq[2], tdk[2], tdv[2];
  for (int i = 0; i < 2; i++) tdq[i] = kt_new(c, dt, nq), tdk[i] = kt_new(c, dt, nk), tdv[i] = kt_new(c, dt, nk);
  kt_put(c, tq, q), kt_put(c, tk, k), kt_put(c, tv, v), kt_put(c, tdo, dout), kt_put(c, tog, og);
  kt_put_i32(c, tqp, qp), kt_put_i32(c, tkp, kp);
  CuAttnKeys ks = {T, P(c, tqp), P(c, tkp)};
  run(c, cuk_attn_block(c->k, P(c, to), P(c, tl), P(c, tq), P(c, tk), P(c, tv), dt, B, S, &ks, H, KV, hd, causal));
  float *ro = fvec(c, nq, 0), *rl = fvec(c, nl, 0);
  rt_attn_block_fwd(B, S, T, H, KV, hd, causal, q, k, v, qp, kp, ro, rl);
  float *lg = fvec(c, nl, 0); /* the whole attention's lse, on the host: the device's backward reads it */
  for (int64_t i = 0; i < nl; i++) {
    double a = rl[i], m = a > x[i] ? a : x[i];
    lg[i] = (float)(m + log(exp(a - m) + exp(x[i] - m)));
  }
  kt_put(c, tlg, lg);
  for (int i = 0; i < 2; i++)
    run(c, cuk_attn_block_bwd(c->k, P(c, tdq[i]), P(c, tdk[i]), P(c, tdv[i]), P(c, tq), P(c, tk), P(c, tv), P(c, tog),
                              P(c, tlg), P(c, tdo), dt, B, S, &ks, H, KV, hd, causal));
  if (!c->be) return;
  const char *tag = arena_printf(c->a, "%s B %lld S %lld T %lld H %lld KV %lld hd %lld%s %s%s", name, (long long)B,
                                 (long long)S, (long long)T, (long long)H, (long long)KV, (long long)hd,
                                 causal ? " causal" : "", dn(dt), cname);
  const int tc = ir_attn_flash(dt, hd);
  expect(c, arena_printf(c->a, "attn_block %s: on the %s kernels", tag, tc ? "tensor-core" : "CUDA-core"),
         tc ? emitted_pos(c, "flash_fwd", S, H, KV, hd, causal, T) && emitted_pos(c, "flash_bwd_q", S, H, KV, hd, causal, T) &&
                  emitted_pos(c, "flash_bwd_kv", S, H, KV, hd, causal, T)
            : !!strstr(cuk_source(c->k), arena_printf(c->a, "sk::sdpa_fwd<%s, %lldLL, %lld, %lld, %lld,", dt == DT_F32 ? "float" : "sk::bf16",
                                                      (long long)S, (long long)H, (long long)KV, (long long)hd)));
  char *qnone = arena_alloc(c->a, (size_t)S + 1), *knone = arena_alloc(c->a, (size_t)T + 1);
  int64_t nqn = 0, nkn = 0;
  for (int64_t i = 0; i < S; i++) nqn += qnone[i] = causal && kp[0] > qp[i];
  for (int64_t j = 0; j < T; j++) nkn += knone[j] = causal && qp[S - 1] < kp[j];
  double rt = tol(dt), at = dt == DT_BF16 ? 1e-2 : 1e-5;
  float *go = kt_get(c, to);
  cmp(c, arena_printf(c->a, "attn_block o %s", tag), go, ro, nq, rt, at);
  expect(c, arena_printf(c->a, "attn_block o %s: the %lld rows that see no key exactly 0", tag, (long long)nqn),
         rows_zero(go, B, S, H * hd, qnone));
  cmp_lse(c, arena_printf(c->a, "attn_block lse %s", tag), kt_get(c, tl), rl, nl, dt == DT_BF16 ? 1e-3 : 1e-5);
  float *rdq = fvec(c, nq, 0), *rdk = fvec(c, nk, 0), *rdv = fvec(c, nk, 0);
  rt_attn_block_bwd(B, S, T, H, KV, hd, causal, q, k, v, og, lg, dout, qp, kp, rdq, rdk, rdv);
  float *dq = kt_get(c, tdq[0]), *dk = kt_get(c, tdk[0]), *dv = kt_get(c, tdv[0]);
  cmp(c, arena_printf(c->a, "attn_block_bwd dq %s", tag), dq, rdq, nq, rt, at * 4);
  cmp(c, arena_printf(c->a, "attn_block_bwd dk %s", tag), dk, rdk, nk, rt, at * 4);
  cmp(c, arena_printf(c->a, "attn_block_bwd dv %s", tag), dv, rdv, nk, rt, at * 4);
  expect(c, arena_printf(c->a, "attn_block_bwd %s: dq 0 on the %lld rows that see no key, dk and dv on the %lld keys no row sees",
                         tag, (long long)nqn, (long long)nkn),
         rows_zero(dq, B, S, H * hd, qnone) && rows_zero(dk, B, T, KV * hd, knone) && rows_zero(dv, B, T, KV * hd, knone));
  expect(c, arena_printf(c->a, "attn_block_bwd deterministic %s", tag),
         !memcmp(dq, kt_get(c, tdq[1]), (size_t)nq * 4) && !memcmp(dk, kt_get(c, tdk[1]), (size_t)nk * 4) &&
             !memcmp(dv, kt_get(c, tdv[1]), (size_t)nk * 4));
}

/* the positions of zigzag rank r of cp over n = 2 chunks of n / 2 tokens: chunks r and 2 cp - 1 - r */
static int32_t *zz_pos(KC *c, int64_t n, int cp, int r) {
  int32_t *p = arena_alloc(c->a, (size_t)n * 4);
  for (int64_t i = 0; i < n; i++) p[i] = (int32_t)(i < n / 2 ? r * (n / 2) + i : (2 * cp - 1 - r) * (n / 2) + i - n / 2);
  return p;
}
/* n positions a i + b */
static int32_t *lin_pos(KC *c, int64_t n, int a, int b) {
  int32_t *p = arena_alloc(c->a, (size_t)n * 4);
  for (int64_t i = 0; i < n; i++) p[i] = (int32_t)(a * i + b);
  return p;
}

/* Ring blocks of every kind a zigzag split makes, and others: a diagonal block (a rank's own keys), a rank's
 * queries over a later rank's keys (half of its rows see no key, the others every key) and over an earlier
 * rank's (half of the keys seen by no row), blocks fully masked and fully visible, S != T at odd lengths with
 * positions interleaved (partial tiles everywhere, rows that see nothing), without the causal mask, several
 * blocks of rows and keys (cp 4, B 2); GQA; bf16 at head dims 32, 64, 128 (the tensor-core kernels, the marked
 * cases in the last tile candidate of cuk_flash_variants too) and f32 (the CUDA-core kernels). */
static void block_cases(KC *c) {
  const struct {
    const char *name;
    int64_t B, S, T, H, KV, hd;
    int causal;
    DType dt;
    int32_t *qp, *kp;
    int variants;
  } bc[] = {
      {"diagonal", 1, 48, 48, 4, 2, 64, 1, DT_BF16, zz_pos(c, 48, 2, 0), zz_pos(c, 48, 2, 0), 1},
      {"rank 0 over rank 1", 1, 48, 48, 4, 2, 64, 1, DT_BF16, zz_pos(c, 48, 2, 0), zz_pos(c, 48, 2, 1), 1},
      {"rank 1 over rank 0", 1, 48, 48, 4, 2, 64, 1, DT_BF16, zz_pos(c, 48, 2, 1), zz_pos(c, 48, 2, 0), 1},
      {"fully masked", 1, 33, 40, 2, 1, 32, 1, DT_BF16, lin_pos(c, 33, 1, 0), lin_pos(c, 40, 1, 1000), 0},
      {"fully visible", 1, 40, 33, 2, 1, 32, 1, DT_BF16, lin_pos(c, 40, 1, 1000), lin_pos(c, 33, 1, 0), 0},
      {"interleaved", 1, 37, 53, 2, 1, 128, 1, DT_BF16, lin_pos(c, 37, 3, 0), lin_pos(c, 53, 2, 5), 1},
      {"not causal", 1, 45, 70, 2, 2, 128, 0, DT_BF16, lin_pos(c, 45, 1, 0), lin_pos(c, 70, 1, 100), 0},
      {"cp 4 rank 1 over rank 2", 2, 140, 140, 4, 1, 64, 1, DT_BF16, zz_pos(c, 140, 4, 1), zz_pos(c, 140, 4, 2), 0},
      {"cp 4 rank 3 over rank 0", 1, 150, 150, 2, 1, 64, 1, DT_BF16, zz_pos(c, 150, 4, 3), zz_pos(c, 150, 4, 0), 0},
      {"interleaved", 1, 37, 53, 4, 2, 32, 1, DT_F32, lin_pos(c, 37, 3, 0), lin_pos(c, 53, 2, 5), 0},
  };
  for (size_t t = 0; t < sizeof bc / sizeof bc[0]; t++) {
    CuFlashCfg v[16];
    int nv = bc[t].variants && flash_variants ? cuk_flash_variants(bc[t].hd, v, 16) : 0;
    block_case(c, bc[t].name, bc[t].B, bc[t].S, bc[t].T, bc[t].H, bc[t].KV, bc[t].hd, bc[t].causal, bc[t].dt, bc[t].qp,
               bc[t].kp, "");
    /* codegen emits the blocks in the compiled default's tiles only (they are not autotuned): each case marked
     * runs again in the last candidate alone (its dK/dV with K and V resident, `rs`; other key and query
     * tiles), which keeps the positional masks checked across tile shapes without compiling every candidate */
    for (int i = nv > 1 ? nv - 1 : nv; i < nv; i++) {
      cuk_set_flash_cfg(c->k, &v[i]);
      block_case(c, bc[t].name, bc[t].B, bc[t].S, bc[t].T, bc[t].H, bc[t].KV, bc[t].hd, bc[t].causal, bc[t].dt, bc[t].qp,
                 bc[t].kp, arena_printf(c->a, " tiles %d", i));
      cuk_set_flash_cfg(c->k, NULL);
    }
  }
}
