/* codegen/cuda_kernels_attn.c — the attention kernels' emitters (codegen/cuda_kernels.h): the
 * tensor-core kernels of runtime/cuda/kernels/shardk_flash.cuh in the tiles of cuda_flash_cfg.c, the
 * CUDA-core ones of shardk_attn.cuh, the ring blocks (on either, as the whole sequence's attention) and their
 * merge (cp). */
#include "cuda_kernels_int.h"

#include <stdio.h>
#include <string.h>

#include "diag.h"

/* ---- attention ----------------------------------------------------------------------------------- */

/* threads per row: a power of two <= hd/16 dividing hd (each thread holds hd/TPR dims) */
static int attn_tpr(int64_t hd) {
  int t = 1;
  while (t * 2 <= 8 && t * 2 * 16 <= hd && hd % (t * 2) == 0) t *= 2;
  return t;
}

static void attn_check(int64_t H, int64_t KV, int64_t hd) {
  if (KV < 1 || H % KV != 0) die("cuda_kernels: sdpa with %lld heads and %lld kv heads", (long long)H, (long long)KV);
  if (hd > 256) die("cuda_kernels: sdpa head dim %lld > 256", (long long)hd);
}

/* Tensor-core attention (shardk_flash.cuh): bf16 with a head dim a multiple of 16 up to 128, tiles by
 * flash_cfg; the whole sequence's and ring attention's blocks alike (ir_attn_flash decides, for the cost model
 * too). Other cases run the CUDA-core kernels of shardk_attn.cuh. */
static int attn_flash(DType dt, int64_t hd) { return ir_attn_flash(dt, hd); }

/* The operands' row strides (CuAttnLd; 0: contiguous), resolved: H hd for q, o, dout, dq; KV hd for the rest. */
static CuAttnLd attn_ld(const CuAttnLd *ld, int64_t H, int64_t KV, int64_t hd) {
  CuAttnLd r = ld ? *ld : (CuAttnLd){0};
  int64_t qw = H * hd, kw = KV * hd;
  r.q = r.q ? r.q : qw, r.o = r.o ? r.o : qw, r.dout = r.dout ? r.dout : qw, r.dq = r.dq ? r.dq : qw;
  r.k = r.k ? r.k : kw, r.v = r.v ? r.v : kw, r.dk = r.dk ? r.dk : kw, r.dv = r.dv ? r.dv : kw;
  return r;
}
/* the bytes an operand of rows rows of w elements at row stride ld spans */
static int64_t span(int64_t rows, int64_t w, int64_t ld, DType dt) { return ((rows - 1) * ld + w) * ir_dtype_size(dt); }
static CuFlashCfg flash_cfg(const CuK *k, int64_t hd) { return k->flash ? *k->flash : cuk_flash_cfg(hd); }
/* a tensor-core attention kernel `which`: sk::name<S, H, KV, hd, causal, c's tiles, tail>(args) over `rows`
 * rows (queries; dK/dV: keys), c's rows a block, with c's minimum blocks per SM and its dynamic shared memory */
static const char *flash_launch(CuK *k, const Args *g, const char *name, int which, const CuFlashTile *c, int64_t S,
                                int64_t rows, int64_t H, int64_t KV, int64_t hd, int causal, int64_t gy, int64_t gz,
                                const char *tail, const char *args) {
  k->minb = c->minb;
  const char *l = ck_simple_smem(k, g, cdiv(rows, 16 * c->mt * c->w), gy, gz, 32 * c->w, 1, cuk_flash_smem(which, hd, c),
                         arena_printf(k->a, "sk::%s<%lldLL, %lld, %lld, %lld, %s, %d, %d, %d, %s%s>(%s);", name,
                                      (long long)S, (long long)H, (long long)KV, (long long)hd,
                                      causal ? "true" : "false", c->bt, c->mt, c->w, c->rs ? "true" : "false", tail,
                                      args));
  k->minb = 0;
  return l;
}
/* ... over the whole sequence (S queries and keys) */
static const char *flash_one(CuK *k, const Args *g, const char *name, int which, const CuFlashTile *c, int64_t S,
                             int64_t H, int64_t KV, int64_t hd, int causal, int64_t gy, int64_t gz, const char *args) {
  return flash_launch(k, g, name, which, c, S, S, H, KV, hd, causal, gy, gz, "", args);
}

/* the attention forward on wgmma (shardk_wgmma.cuh; warp-specialized: shardk_wgmma_ws.cuh) in tiles t: grid
 * (S / 64 nwg, H, B) */
static const char *wg_one(CuK *k, const Args *g, const CuWgTile *t, int64_t S, int64_t H, int64_t KV, int64_t hd,
                          int causal, int64_t B, const char *lds) {
  if (t->ws)
    return ck_simple_smem(k, g, cdiv(S, 64 * t->nwg), H, B, cuk_wg_threads(t), 1, cuk_wg_smem(hd, t),
                          arena_printf(k->a,
                                       "sk::flash_fwd_ws<%lldLL, %lld, %lld, %lld, %s, %d, %d, %d>((sk::bf16 *)p0, "
                                       "(float *)p1, (const sk::bf16 *)p2, (const sk::bf16 *)p3, (const sk::bf16 *)p4%s);",
                                       (long long)S, (long long)H, (long long)KV, (long long)hd,
                                       causal ? "true" : "false", t->bk, t->nwg, t->ws, lds));
  return ck_simple_smem(k, g, cdiv(S, 64 * t->nwg), H, B, cuk_wg_threads(t), 1, cuk_wg_smem(hd, t),
                        arena_printf(k->a,
                                     "sk::flash_fwd_wg<%lldLL, %lld, %lld, %lld, %s, %d, %d, %s>((sk::bf16 *)p0, "
                                     "(float *)p1, (const sk::bf16 *)p2, (const sk::bf16 *)p3, (const sk::bf16 *)p4%s);",
                                     (long long)S, (long long)H, (long long)KV, (long long)hd, causal ? "true" : "false",
                                     t->bk, t->nwg, t->pipe ? "true" : "false", lds));
}

/* the pointer arguments of the backward's kernels (dQ, dK/dV; shardk_flash.cuh, shardk_wgmma_bwd.cuh) */
#define FLASH_Q_ARGS                                                                                               \
  "(sk::bf16 *)p0, (float *)p1, (const sk::bf16 *)p2, (const sk::bf16 *)p3, (const sk::bf16 *)p4, "                \
  "(const sk::bf16 *)p5, (const float *)p6, (const sk::bf16 *)p7"
#define FLASH_KV_ARGS                                                                                              \
  "(sk::bf16 *)p0, (sk::bf16 *)p1, (const sk::bf16 *)p2, (const sk::bf16 *)p3, (const sk::bf16 *)p4, "             \
  "(const float *)p5, (const float *)p6, (const sk::bf16 *)p7"

/* the attention backward's kernel `which` (1 dK/dV, 2 dQ) on wgmma (shardk_wgmma_bwd.cuh) in tiles t: grid
 * (S / 64 nwg, KV or H, B); lds: the operands' row strides in the kernel's order (", ldA, ..."; dK/dV: dk, dv,
 * q, k, v, dout; dQ: dq, q, k, v, o, dout), as the mma.sync kernels take them */
static const char *wgb_one(CuK *k, const Args *g, int which, const CuWgBwdTile *t, int64_t S, int64_t H, int64_t KV,
                           int64_t hd, int causal, int64_t B, const char *lds, const char *args) {
  const char *tmpl = arena_printf(k->a, "<%lldLL, %lld, %lld, %lld, %s, %d, %d%s>", (long long)S, (long long)H,
                                  (long long)KV, (long long)hd, causal ? "true" : "false", t->bt, t->nwg,
                                  t->pipe ? ", true" : "");
  const char *call = arena_printf(k->a, "sk::%s%s(%s%s);", which == 1 ? "flash_bwd_kv_wg" : "flash_bwd_q_wg", tmpl,
                                  args ? args : which == 1 ? FLASH_KV_ARGS : FLASH_Q_ARGS, lds);
  return ck_simple_smem(k, g, cdiv(S, 64 * t->nwg), which == 1 ? KV : H, B, 128 * t->nwg, 1,
                        cuk_wg_bwd_smem(which, hd, t), call);
}

/* The backward's unified pointers (the pair key's candidates and the one-kernel form take them all): p0 dq,
 * p1 dk, p2 dv, p3 q, p4 k, p5 v, p6 o, p7 lse, p8 dout, p9 D, p10 the f32 dQ accumulator, p11 its counters
 * (the last three in the workspace: bwd_ws); the two kernels' arguments in those terms. */
#define BWD_U_Q                                                                                                    \
  "(sk::bf16 *)p0, (float *)p9, (const sk::bf16 *)p3, (const sk::bf16 *)p4, (const sk::bf16 *)p5, "                \
  "(const sk::bf16 *)p6, (const float *)p7, (const sk::bf16 *)p8"
#define BWD_U_KV                                                                                                   \
  "(sk::bf16 *)p1, (sk::bf16 *)p2, (const sk::bf16 *)p3, (const sk::bf16 *)p4, (const sk::bf16 *)p5, "             \
  "(const float *)p7, (const float *)p9, (const sk::bf16 *)p8"

/* The one-kernel backward (shardk_wgmma_bwd1.cuh) in tiles t on g's unified pointers: D and the counters
 * zeroed (flash_bwd1_pre, grid (S / 64, H, B)), then flash_bwd1_wg (grid (S / 64 nwg, KV, B)); *pre: the first
 * one's kernel (k->last the second's). lds: dq, dk, dv, q, k, v, dout's row strides (", ldA, ..."). */
static const char *wgf_one(CuK *k, const Args *g, const CuWgBwdTile *t, int64_t S, int64_t H, int64_t KV, int64_t hd,
                           int causal, int64_t B, const char *lds, long long ldo, long long lddo, int *pre) {
  const char *l1 = ck_simple(k, g, cdiv(S, 64), H, B, 256, 1,
                             arena_printf(k->a,
                                          "sk::flash_bwd1_pre<%lldLL, %lld, %lld>((float *)p9, (int *)p11, (const "
                                          "sk::bf16 *)p6, (const sk::bf16 *)p8, %lldLL, %lldLL);",
                                          (long long)S, (long long)H, (long long)hd, ldo, lddo));
  *pre = k->last;
  const char *l2 = ck_simple_smem(
      k, g, cdiv(S, 64 * t->nwg), KV, B, 128 * t->nwg, 1, cuk_wg_bwd1_smem(hd, t),
      arena_printf(k->a,
                   "sk::flash_bwd1_wg<%lldLL, %lld, %lld, %lld, %s, %d>((sk::bf16 *)p0, (sk::bf16 *)p1, (sk::bf16 *)p2, "
                   "(const sk::bf16 *)p3, (const sk::bf16 *)p4, (const sk::bf16 *)p5, (const float *)p7, (const float "
                   "*)p9, (const sk::bf16 *)p8, (float *)p10, (int *)p11%s);",
                   (long long)S, (long long)H, (long long)KV, (long long)hd, causal ? "true" : "false", t->nwg, lds));
  return ck_cat(k, l1, l2);
}

int64_t cuk_bwd1_ws(int64_t B, int64_t S, int64_t H, int64_t hd, int64_t *acc, int64_t *cnt, int64_t *ncnt) {
  const int64_t a = (B * H * S * 4 + 255) / 256 * 256, c = a + B * S * H * hd * 4;
  if (acc) *acc = CUK_WS_FLAGS + a;
  if (cnt) *cnt = CUK_WS_FLAGS + c;
  if (ncnt) *ncnt = B * H * cdiv(S, 64);
  return c + B * H * cdiv(S, 64) * 4;
}

/* The workspace of the backward: D (B H S floats) at 0, then (the one-kernel form, fused) cuk_bwd1_ws's; the
 * pointers into d, acc, cnt. */
static void bwd_ws(CuK *k, int64_t B, int64_t S, int64_t H, int64_t hd, int fused, const char **d, const char **acc,
                   const char **cnt) {
  int64_t a, c;
  const int64_t end = cuk_bwd1_ws(B, S, H, hd, &a, &c, NULL);
  ck_need_ws(k, fused ? end : B * H * S * 4);
  *d = ck_ws_at(k, 0), *acc = ck_ws_at(k, a - CUK_WS_FLAGS), *cnt = ck_ws_at(k, c - CUK_WS_FLAGS);
}

/* The kernel `which` (0 forward, 1 dK/dV, 2 dQ) of the attention: in flash_cfg's tiles, or with
 * cuk_set_attn_tune the candidates of cuk_flash_variants (those with distinct tiles for this kernel; the
 * first compiled always, the others under SK_ATTN_TUNE) launched by rt_cu_launch_tuned. bytes[i]: the
 * bytes pointer argument i spans; the first two arguments are the kernel's outputs, outs what the
 * runtime's check of a candidate against the default needs of them (RtCuTuneOut, flash_outs); wlds the
 * forward's row strides as the wgmma candidates take them. */
static const char *flash_kernel(CuK *k, const Args *g, const char *name, int which, int64_t S, int64_t H, int64_t KV,
                                int64_t hd, int causal, int64_t gy, int64_t gz, const int64_t *bytes, const char *args,
                                const char *outs, const char *wlds) {
  CuFlashCfg v[16];
  int nv = k->attn_tune && !k->flash ? cuk_flash_variants(hd, v, 16) : 0;
  if (nv == 0) v[0] = flash_cfg(k, hd), nv = 1;
  CuFlashTile t[16];
  int nt = 0;
  const char *cands = "";
  for (int i = 0; i < nv; i++) {
    CuFlashTile c = which == 0 ? v[i].fwd : which == 1 ? v[i].kv : v[i].q;
    int seen = 0;
    for (int j = 0; j < nt && !seen; j++) seen = !memcmp(&t[j], &c, sizeof c);
    if (seen) continue;
    t[nt++] = c;
    k->guard = i > 0;
    const char *l = flash_one(k, g, name, which, &c, S, H, KV, hd, causal, gy, gz, args);
    k->guard = 0;
    if (nv == 1) return l;
    int id = k->last;
    cands = arena_printf(k->a, "%s%s{%d, %lld, %d, \"%dx%dx%d/%d%s\", %lld}", cands, nt > 1 ? ", " : "", id,
                         (long long)cdiv(S, 16 * c.mt * c.w), 32 * c.w, c.mt, c.w, c.bt, c.minb, c.rs ? "s" : "",
                         (long long)cuk_flash_smem(which, hd, &c));
  }
  /* also the wgmma tiles (offered by the runtime on sm_90a only: RtCuOps.wgmma; tiles "wg...") */
  CuWgTile w[16];
  CuWgBwdTile wb[8];
  int tuned = k->attn_tune && !k->flash;
  int nw = !tuned ? 0 : which == 0 ? cuk_wg_variants(hd, w, 16) : cuk_wg_bwd_variants(which, hd, wb, 8);
  for (int i = 0; i < nw; i++) {
    k->guard = 1;
    if (which == 0) wg_one(k, g, &w[i], S, H, KV, hd, causal, gz, wlds);
    else wgb_one(k, g, which, &wb[i], S, H, KV, hd, causal, gz, wlds, NULL);
    k->guard = 0;
    char tag[32];
    if (which == 0)
      cands = arena_printf(k->a, "%s, {%d, %lld, %d, \"%s\", %lld}", cands, k->last, (long long)cdiv(S, 64 * w[i].nwg),
                           cuk_wg_threads(&w[i]), cuk_wg_tag(&w[i], tag, sizeof tag), (long long)cuk_wg_smem(hd, &w[i]));
    else
      cands = arena_printf(k->a, "%s, {%d, %lld, %d, \"wg%dx%d%s\", %lld}", cands, k->last,
                           (long long)cdiv(S, 64 * wb[i].nwg), 128 * wb[i].nwg, wb[i].bt, wb[i].nwg,
                           wb[i].pipe ? "p" : "",
                           (long long)cuk_wg_bwd_smem(which, hd, &wb[i]));
  }
  nt += nw;
  if (nt == 1) return flash_one(k, g, name, which, &t[0], S, H, KV, hd, causal, gy, gz, args); /* reuses the kernel */
  const char *ptrs = "", *sizes = "";
  for (int i = 0; i < g->np; i++) {
    ptrs = arena_printf(k->a, "%s%s&(char *){%s}", ptrs, i ? ", " : "", g->p[i]);
    sizes = arena_printf(k->a, "%s%s%lldLL", sizes, i ? ", " : "", (long long)bytes[i]);
  }
  return arena_printf(k->a,
                      "rt_cu_launch_tuned(ctx, \"%s S %lld H %lld KV %lld hd %lld%s B %lld\", %d, (const RtCuTileCand[]){%s}, "
                      "%lld, %lld, %d, (void *[]){%s}, (const long long[]){%s}, 2, (const RtCuTuneOut[]){%s});",
                      name, (long long)S, (long long)H, (long long)KV, (long long)hd, causal ? " causal" : "",
                      (long long)gz, nt, cands, (long long)gy, (long long)gz, g->np, ptrs, sizes, outs);
}

/* The forward's o sums S keys' bf16-rounded probabilities times V, each probability from an hd-long score
 * (S + hd terms, 1 rounding); its lse sums the unrounded probabilities (S + hd, 0). dQ sums S keys' dS K,
 * dK a GQA group's S H/KV queries' dS Q, dV their P dO, dS and P rounded to bf16 first, each from an
 * hd-long score and an hd-long dO . V (+ 2 hd, 1); D = rowsum(dO o O) sums hd products (hd, 0). */
void cuk_flash_check(int which, int64_t S, int64_t H, int64_t KV, int64_t hd, long long terms[2], int rounds[2]) {
  int64_t grp = S * (H / KV) + 2 * hd; /* the queries of a GQA group */
  if (which == 0) terms[0] = terms[1] = S + hd, rounds[0] = 1, rounds[1] = 0;
  else if (which == 1) terms[0] = terms[1] = grp, rounds[0] = rounds[1] = 1;
  else terms[0] = S + 2 * hd, terms[1] = hd, rounds[0] = 1, rounds[1] = 0;
}

/* The kernel's two outputs as the launch tells the check (RtCuTuneOut): bf16 o/dq/dk/dv, f32 lse/D;
 * slice0 / slice1: the output is a column slice of a wider tensor (its row stride more than its width). */
static const char *flash_outs(CuK *k, int which, int64_t S, int64_t H, int64_t KV, int64_t hd, int slice0, int slice1) {
  long long terms[2];
  int rounds[2];
  cuk_flash_check(which, S, H, KV, hd, terms, rounds);
  const char *t1 = which == 1 ? "RT_BF16" : "RT_F32"; /* dK/dV: two bf16 outputs; else o / dq and f32 lse / D */
  return arena_printf(k->a, "{RT_BF16, %lldLL, %d, %d}, {%s, %lldLL, %d, %d}", terms[0], rounds[0], slice0, t1, terms[1],
                      rounds[1], slice1);
}

/* The keys of an attention (CuAttnKeys): all S of the sequence (qpos NULL), or a ring attention
 * block's T keys with the rows' global positions. Its extra template argument (the CUDA-core kernels'),
 * and its kernel arguments appended to g (every kernel's). */
static const char *keys_tmpl(CuK *k, const CuAttnKeys *ks) {
  return ks->qpos ? arena_printf(k->a, ", %lldLL", (long long)ks->T) : "";
}
static const char *keys_args(CuK *k, const CuAttnKeys *ks, Args *g) {
  if (!ks->qpos) return "";
  g->p[g->np++] = ks->qpos;
  g->p[g->np++] = ks->kpos;
  return arena_printf(k->a, ", (const int *)p%d, (const int *)p%d", g->np - 2, g->np - 1);
}

/* A ring block's tensor-core kernel `which` (0 forward, 1 dK/dV, 2 dQ: shardk_flash.cuh with POS, T keys at
 * ks's positions) in the compiled tiles (flash_cfg: the whole sequence's; not autotuned, and never the wgmma
 * kernels); args: the pointer casts and row strides, the positions appended here. */
static const char *flash_ring(CuK *k, Args *g, const char *name, int which, int64_t S, const CuAttnKeys *ks,
                               int64_t H, int64_t KV, int64_t hd, int causal, int64_t gy, int64_t B, const char *args) {
  const CuFlashCfg c = flash_cfg(k, hd);
  const CuFlashTile *t = which == 0 ? &c.fwd : which == 1 ? &c.kv : &c.q;
  const char *pa = keys_args(k, ks, g);
  return flash_launch(k, g, name, which, t, S, which == 1 ? ks->T : S, H, KV, hd, causal, gy, B,
                      arena_printf(k->a, ", true, %lldLL", (long long)ks->T), arena_printf(k->a, "%s%s", args, pa));
}

static const char *attn_fwd(CuK *k, const char *o, const char *lse, const char *q, const char *kk, const char *v,
                            DType dt, int64_t B, int64_t S, const CuAttnKeys *ks, int64_t H, int64_t KV, int64_t hd,
                            int causal, const CuAttnLd *ld0) {
  attn_check(H, KV, hd);
  CuAttnLd ld = attn_ld(ld0, H, KV, hd);
  const char *lds = arena_printf(k->a, ", %lldLL, %lldLL, %lldLL, %lldLL", (long long)ld.o, (long long)ld.q,
                                 (long long)ld.k, (long long)ld.v);
  if (attn_flash(dt, hd) && ks->qpos) /* a ring block (context parallelism) */
    return flash_ring(k, &(Args){.np = 5, .p = {o, lse, q, kk, v}}, "flash_fwd", 0, S, ks, H, KV, hd, causal, H, B,
                       arena_printf(k->a, "(sk::bf16 *)p0, (float *)p1, (const sk::bf16 *)p2, (const sk::bf16 *)p3, "
                                          "(const sk::bf16 *)p4%s", lds));
  if (k->wg && attn_flash(dt, hd) && !ks->qpos && (hd == 64 || hd == 128)) /* Hopper's wgmma (shardk_wgmma.cuh) */
    return wg_one(k, &(Args){.np = 5, .p = {o, lse, q, kk, v}}, k->wg, S, H, KV, hd, causal, B, lds);
  if (attn_flash(dt, hd) && !ks->qpos) {
    Args g = {.np = 5, .p = {o, lse, q, kk, v}};
    int64_t n = B * S, qw = H * hd, kw = KV * hd, nl = B * H * S * 4;
    return flash_kernel(k, &g, "flash_fwd", 0, S, H, KV, hd, causal, H, B,
                        (const int64_t[]){span(n, qw, ld.o, dt), nl, span(n, qw, ld.q, dt), span(n, kw, ld.k, dt),
                                          span(n, kw, ld.v, dt)},
                        arena_printf(k->a, "(sk::bf16 *)p0, (float *)p1, (const sk::bf16 *)p2, (const sk::bf16 *)p3, "
                                           "(const sk::bf16 *)p4%s", lds),
                        flash_outs(k, 0, S, H, KV, hd, ld.o != qw, 0), lds);
  }
  int tpr = attn_tpr(hd), bq = 256 / tpr > 64 ? 64 : 256 / tpr, bk = hd <= 128 ? 32 : 16;
  const char *t = ck_ctype(dt);
  Args g = {.np = 5, .p = {o, lse, q, kk, v}};
  const char *pa = keys_args(k, ks, &g);
  return ck_simple(k, &g, cdiv(S, bq), H, B, bq * tpr, 1,
                arena_printf(k->a,
                             "sk::sdpa_fwd<%s, %lldLL, %lld, %lld, %lld, %s, %d, %d, %d%s>((%s *)p0, (float *)p1, "
                             "(const %s *)p2, (const %s *)p3, (const %s *)p4%s%s);",
                             t, (long long)S, (long long)H, (long long)KV, (long long)hd, causal ? "true" : "false", bq,
                             bk, tpr, keys_tmpl(k, ks), t, t, t, t, lds, pa));
}

const char *cuk_sdpa(CuK *k, const char *o, const char *lse, const char *q, const char *kk, const char *v, DType dt,
                     int64_t B, int64_t S, int64_t H, int64_t KV, int64_t hd, int causal, const CuAttnLd *ld) {
  return attn_fwd(k, o, lse, q, kk, v, dt, B, S, &(CuAttnKeys){.T = S}, H, KV, hd, causal, ld);
}

const char *cuk_attn_block(CuK *k, const char *o, const char *lse, const char *q, const char *kk, const char *v,
                           DType dt, int64_t B, int64_t S, const CuAttnKeys *ks, int64_t H, int64_t KV, int64_t hd,
                           int causal) {
  return attn_fwd(k, o, lse, q, kk, v, dt, B, S, ks, H, KV, hd, causal, NULL);
}

static const char *attn_bwd(CuK *k, const char *dq, const char *dk, const char *dv, const char *q, const char *kk,
                            const char *v, const char *o, const char *lse, const char *dout, DType dt, int64_t B,
                            int64_t S, const CuAttnKeys *ks, int64_t H, int64_t KV, int64_t hd, int causal,
                            const CuAttnLd *ld0) {
  attn_check(H, KV, hd);
  CuAttnLd ld = attn_ld(ld0, H, KV, hd);
  const long long Ldq = ld.q, Ldk = ld.k, Ldv = ld.v, Ldo = ld.o, Lddo = ld.dout, Lddq = ld.dq, Lddk = ld.dk, Lddv = ld.dv;
  int tpr = attn_tpr(hd), bq = 256 / tpr > 64 ? 64 : 256 / tpr, bk = hd <= 128 ? 32 : 16;
  const char *t = ck_ctype(dt), *cz = causal ? "true" : "false";
  const char *D, *unused_acc, *unused_cnt;
  bwd_ws(k, B, S, H, hd, 0, &D, &unused_acc, &unused_cnt);
  if (attn_flash(dt, hd) && ks->qpos) { /* a ring block: dQ first (it stores D = rowsum(dO o O)), then dK/dV */
    const char *qlds = arena_printf(k->a, ", %lldLL, %lldLL, %lldLL, %lldLL, %lldLL, %lldLL", Lddq, Ldq, Ldk, Ldv, Ldo, Lddo);
    const char *kvlds = arena_printf(k->a, ", %lldLL, %lldLL, %lldLL, %lldLL, %lldLL, %lldLL", Lddk, Lddv, Ldq, Ldk, Ldv,
                                     Lddo);
    const char *lq = flash_ring(k, &(Args){.np = 8, .p = {dq, D, q, kk, v, o, lse, dout}}, "flash_bwd_q", 2, S, ks, H,
                                 KV, hd, causal, H, B, arena_printf(k->a, "%s%s", FLASH_Q_ARGS, qlds));
    const char *lkv = flash_ring(k, &(Args){.np = 8, .p = {dk, dv, q, kk, v, lse, D, dout}}, "flash_bwd_kv", 1, S, ks,
                                  H, KV, hd, causal, KV, B, arena_printf(k->a, "%s%s", FLASH_KV_ARGS, kvlds));
    return ck_cat(k, lq, lkv);
  }
  if (attn_flash(dt, hd) && !ks->qpos) { /* dQ first: it stores D = rowsum(dO o O), which dK/dV reads */
    int64_t n = B * S, qw = H * hd, kw = KV * hd, nl = B * H * S * 4;
    Args gq = {.np = 8, .p = {dq, D, q, kk, v, o, lse, dout}};
    Args gkv = {.np = 8, .p = {dk, dv, q, kk, v, lse, D, dout}};
    const char *qlds = arena_printf(k->a, ", %lldLL, %lldLL, %lldLL, %lldLL, %lldLL, %lldLL", Lddq, Ldq, Ldk, Ldv, Ldo, Lddo);
    const char *kvlds = arena_printf(k->a, ", %lldLL, %lldLL, %lldLL, %lldLL, %lldLL, %lldLL", Lddk, Lddv, Ldq, Ldk, Ldv,
                                     Lddo);
    const int wg = hd == 64 || hd == 128; /* on Hopper's wgmma where set (shardk_wgmma_bwd.cuh) */
    CuWgBwdTile f[4]; /* the one-kernel form: set (cuk_set_flash_wg_bwd1), or the pair key's candidates */
    const int nf = !wg ? 0
                   : k->wgf ? 1
                   : k->attn_tune && !k->flash && !k->wgq && !k->wgkv ? cuk_wg_bwd1_variants(hd, f, 4)
                                                                      : 0;
    const char *acc = NULL, *cnt = NULL;
    if (nf) bwd_ws(k, B, S, H, hd, 1, &D, &acc, &cnt);
    Args gu = {.np = 12, .p = {dq, dk, dv, q, kk, v, o, lse, dout, D, acc, cnt}};
    const char *flds = arena_printf(k->a, ", %lldLL, %lldLL, %lldLL, %lldLL, %lldLL, %lldLL, %lldLL", Lddq, Lddk, Lddv,
                                    Ldq, Ldk, Ldv, Lddo);
    int pre;
    if (k->wgf) return wgf_one(k, &gu, k->wgf, S, H, KV, hd, causal, B, flds, Ldo, Lddo, &pre);
    const char *lq =
        wg && k->wgq
            ? wgb_one(k, &gq, 2, k->wgq, S, H, KV, hd, causal, B, qlds, NULL)
            : flash_kernel(k, &gq, "flash_bwd_q", 2, S, H, KV, hd, causal, H, B,
                           (const int64_t[]){span(n, qw, Lddq, dt), nl, span(n, qw, Ldq, dt), span(n, kw, Ldk, dt),
                                             span(n, kw, Ldv, dt), span(n, qw, Ldo, dt), nl, span(n, qw, Lddo, dt)},
                           arena_printf(k->a, "%s%s", FLASH_Q_ARGS, qlds), flash_outs(k, 2, S, H, KV, hd, Lddq != qw, 0),
                           qlds);
    const char *lkv =
        wg && k->wgkv
            ? wgb_one(k, &gkv, 1, k->wgkv, S, H, KV, hd, causal, B, kvlds, NULL)
            : flash_kernel(k, &gkv, "flash_bwd_kv", 1, S, H, KV, hd, causal, KV, B,
                           (const int64_t[]){span(n, kw, Lddk, dt), span(n, kw, Lddv, dt), span(n, qw, Ldq, dt),
                                             span(n, kw, Ldk, dt), span(n, kw, Ldv, dt), nl, nl, span(n, qw, Lddo, dt)},
                           arena_printf(k->a, "%s%s", FLASH_KV_ARGS, kvlds),
                           flash_outs(k, 1, S, H, KV, hd, Lddk != kw, Lddv != kw), kvlds);
    if (!nf) return ck_cat(k, lq, lkv);
    /* The pair key "flash_bwd": candidate 0 the two kernels' compiled defaults (on the unified pointers), the
     * others the one-kernel form in each tile, D's kernel before it (rt_cu_launch_tuned_or's pre). Its choice 0
     * runs the two kernels' own keys (lq, lkv: each tuned on its own); another, the one-kernel form. */
    CuFlashCfg c0 = flash_cfg(k, hd);
    k->guard = 1;
    flash_one(k, &gu, "flash_bwd_q", 2, &c0.q, S, H, KV, hd, causal, H, B, arena_printf(k->a, "%s%s", BWD_U_Q, qlds));
    const int qid = k->last;
    flash_one(k, &gu, "flash_bwd_kv", 1, &c0.kv, S, H, KV, hd, causal, KV, B,
              arena_printf(k->a, "%s%s", BWD_U_KV, kvlds));
    const char *cands = arena_printf(k->a, "{%d, %lld, %d, \"two\", %lld}", k->last,
                                     (long long)cdiv(S, 16 * c0.kv.mt * c0.kv.w), 32 * c0.kv.w,
                                     (long long)cuk_flash_smem(1, hd, &c0.kv));
    const char *pres = arena_printf(k->a, "{%d, %lld, %d, \"two\", %lld}", qid, (long long)cdiv(S, 16 * c0.q.mt * c0.q.w),
                                    32 * c0.q.w, (long long)cuk_flash_smem(2, hd, &c0.q));
    /* the two kernels on wgmma too, the i-th dQ tile before the i-th dK/dV tile (the shorter list's again; the
     * pairs the sweep times): the one-kernel form must beat the fastest two-kernel pair, not the mma.sync
     * defaults (the two keys tune their kernels apart only when the pair key keeps "two") */
    CuWgBwdTile pk[8], pq[8];
    const int npk = cuk_wg_bwd_variants(1, hd, pk, 8), npq = cuk_wg_bwd_variants(2, hd, pq, 8),
              npair = npk > npq ? npk : npq;
    for (int i = 0; i < npair; i++) {
      const CuWgBwdTile *tq = &pq[i % npq], *tk = &pk[i % npk];
      wgb_one(k, &gu, 2, tq, S, H, KV, hd, causal, B, qlds, BWD_U_Q);
      const int qk = k->last;
      wgb_one(k, &gu, 1, tk, S, H, KV, hd, causal, B, kvlds, BWD_U_KV);
      const char *name = arena_printf(k->a, "wgq%dx%d%s+kv%dx%d%s", tq->bt, tq->nwg, tq->pipe ? "p" : "", tk->bt,
                                      tk->nwg, tk->pipe ? "p" : "");
      cands = arena_printf(k->a, "%s, {%d, %lld, %d, \"%s\", %lld}", cands, k->last, (long long)cdiv(S, 64 * tk->nwg),
                           128 * tk->nwg, name, (long long)cuk_wg_bwd_smem(1, hd, tk));
      pres = arena_printf(k->a, "%s, {%d, %lld, %d, \"%s\", %lld}", pres, qk, (long long)cdiv(S, 64 * tq->nwg),
                          128 * tq->nwg, name, (long long)cuk_wg_bwd_smem(2, hd, tq));
    }
    for (int i = 0; i < nf; i++) {
      wgf_one(k, &gu, &f[i], S, H, KV, hd, causal, B, flds, Ldo, Lddo, &pre);
      const char *name = arena_printf(k->a, "wgf%dx%d", f[i].bt, f[i].nwg);
      cands = arena_printf(k->a, "%s, {%d, %lld, %d, \"%s\", %lld}", cands, k->last, (long long)cdiv(S, 64 * f[i].nwg),
                           128 * f[i].nwg, name, (long long)cuk_wg_bwd1_smem(hd, &f[i]));
      pres = arena_printf(k->a, "%s, {%d, %lld, 256, \"%s\", 0}", pres, pre, (long long)cdiv(S, 64), name);
    }
    k->guard = 0;
    const int64_t bytes[12] = {span(n, qw, Lddq, dt), span(n, kw, Lddk, dt), span(n, kw, Lddv, dt), span(n, qw, Ldq, dt),
                               span(n, kw, Ldk, dt),  span(n, kw, Ldv, dt),  span(n, qw, Ldo, dt),  nl,
                               span(n, qw, Lddo, dt), nl,                    n * qw * 4,            B * H * cdiv(S, 64) * 4};
    const char *ptrs = "", *sizes = "";
    for (int i = 0; i < 12; i++) {
      ptrs = arena_printf(k->a, "%s%s&(char *){%s}", ptrs, i ? ", " : "", gu.p[i]);
      sizes = arena_printf(k->a, "%s%s%lldLL", sizes, i ? ", " : "", (long long)bytes[i]);
    }
    long long tq[2], tkv[2];
    int rq[2], rkv[2];
    cuk_flash_check(2, S, H, KV, hd, tq, rq);
    cuk_flash_check(1, S, H, KV, hd, tkv, rkv);
    const char *outs = arena_printf(k->a, "{RT_BF16, %lldLL, %d, %d}, {RT_BF16, %lldLL, %d, %d}, {RT_BF16, %lldLL, %d, %d}",
                                    tq[0], rq[0], Lddq != qw, tkv[0], rkv[0], Lddk != kw, tkv[1], rkv[1], Lddv != kw);
    return arena_printf(k->a,
                        "if (!rt_cu_launch_tuned_or(ctx, \"flash_bwd S %lld H %lld KV %lld hd %lld%s B %lld\", %d, "
                        "(const RtCuTileCand[]){%s}, (const RtCuTileCand[]){%s}, %lld, %lld, %lld, 12, (void *[]){%s}, "
                        "(const long long[]){%s}, 3, (const RtCuTuneOut[]){%s})) { %s }",
                        (long long)S, (long long)H, (long long)KV, (long long)hd, causal ? " causal" : "", (long long)B,
                        1 + npair + nf, cands, pres, (long long)H, (long long)KV, (long long)B, ptrs, sizes, outs,
                        ck_cat(k, lq, lkv));
  }
  Args g1 = {.np = 3, .p = {D, o, dout}};
  const char *l1 = ck_simple(k, &g1, cdiv(S, bq), H, B, bq * tpr, 1,
                          arena_printf(k->a,
                                       "sk::sdpa_bwd_dot<%s, %lldLL, %lld, %lld, %d, %d>((float *)p0, (const %s *)p1, "
                                       "(const %s *)p2, %lldLL, %lldLL);",
                                       t, (long long)S, (long long)H, (long long)hd, bq, tpr, t, t, Ldo, Lddo));
  Args g2 = {.np = 8, .p = {dk, dv, q, kk, v, lse, D, dout}};
  const char *pa2 = keys_args(k, ks, &g2), *tk = keys_tmpl(k, ks);
  const char *l2 = ck_simple(
      k, &g2, cdiv(ks->T, bq), KV, B, bq * tpr, 1,
      arena_printf(k->a,
                   "sk::sdpa_bwd_kv<%s, %lldLL, %lld, %lld, %lld, %s, %d, %d, %d%s>((%s *)p0, (%s *)p1, (const %s *)p2, "
                   "(const %s *)p3, (const %s *)p4, (const float *)p5, (const float *)p6, (const %s *)p7, %lldLL, "
                   "%lldLL, %lldLL, %lldLL, %lldLL, %lldLL%s);",
                   t, (long long)S, (long long)H, (long long)KV, (long long)hd, cz, bq, bk, tpr, tk, t, t, t, t, t, t,
                   Lddk, Lddv, Ldq, Ldk, Ldv, Lddo, pa2));
  Args g3 = {.np = 7, .p = {dq, q, kk, v, lse, D, dout}};
  const char *pa3 = keys_args(k, ks, &g3);
  const char *l3 = ck_simple(
      k, &g3, cdiv(S, bq), H, B, bq * tpr, 1,
      arena_printf(k->a,
                   "sk::sdpa_bwd_q<%s, %lldLL, %lld, %lld, %lld, %s, %d, %d, %d%s>((%s *)p0, (const %s *)p1, (const %s *)p2, "
                   "(const %s *)p3, (const float *)p4, (const float *)p5, (const %s *)p6, %lldLL, %lldLL, %lldLL, "
                   "%lldLL, %lldLL%s);",
                   t, (long long)S, (long long)H, (long long)KV, (long long)hd, cz, bq, bk, tpr, tk, t, t, t, t, t, Lddq,
                   Ldq, Ldk, Ldv, Lddo, pa3));
  return ck_cat(k, ck_cat(k, l1, l2), l3);
}

const char *cuk_sdpa_bwd(CuK *k, const char *dq, const char *dk, const char *dv, const char *q, const char *kk,
                         const char *v, const char *o, const char *lse, const char *dout, DType dt, int64_t B,
                         int64_t S, int64_t H, int64_t KV, int64_t hd, int causal, const CuAttnLd *ld) {
  return attn_bwd(k, dq, dk, dv, q, kk, v, o, lse, dout, dt, B, S, &(CuAttnKeys){.T = S}, H, KV, hd, causal, ld);
}

const char *cuk_attn_block_bwd(CuK *k, const char *dq, const char *dk, const char *dv, const char *q, const char *kk,
                               const char *v, const char *o, const char *lse, const char *dout, DType dt, int64_t B,
                               int64_t S, const CuAttnKeys *ks, int64_t H, int64_t KV, int64_t hd, int causal) {
  return attn_bwd(k, dq, dk, dv, q, kk, v, o, lse, dout, dt, B, S, ks, H, KV, hd, causal, NULL);
}

const char *cuk_attn_combine(CuK *k, const char *o, const char *lse, const char *o1, const char *lse1, const char *o2,
                             const char *lse2, DType dt, int64_t B, int64_t S, int64_t H, int64_t hd) {
  Args g = {.np = 6, .p = {o, lse, o1, lse1, o2, lse2}};
  const char *t = ck_ctype(dt);
  return ck_simple(k, &g, ck_stride_grid(B * H * S), 1, 1, 256, 1,
                arena_printf(k->a,
                             "sk::attn_combine<%s, %lldLL, %lldLL, %lld, %lld>((%s *)p0, (float *)p1, (const %s *)p2, "
                             "(const float *)p3, (const %s *)p4, (const float *)p5);",
                             t, (long long)B, (long long)S, (long long)H, (long long)hd, t, t, t));
}

