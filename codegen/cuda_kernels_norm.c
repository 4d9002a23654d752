/* codegen/cuda_kernels_norm.c — the CUDA kernels of LayerNorm and RMSNorm, forward and backward
 * (runtime/cuda/kernels/shardk_norm.cuh; codegen/cuda_kernels.h). bf16 rows of D a multiple of 256: a warp per
 * row in 16-byte vectors; the backward (D up to 2048) by warps streaming their rows, its weight gradients from
 * per-block partials summed by a second launch (column sums). Other shapes: a block per row, the partials' column
 * sums a second launch too. Deterministic throughout: fixed orders, no float atomics. Every backward form may add the
 * residual gradient's carry to dx as it stores it (res, parameter p5: passes/fuse_normres.c). */
#include "cuda_kernels_int.h"

static const char *norm_fwd(CuK *k, const char *fn, const char *y, const char *x, DType xdt, const char *w,
                            const char *b, DType wdt, int64_t rows, int64_t d, double eps) {
  int nt = ck_row_threads(d);
  int nper = (int)cdiv(d, nt);
  Args g = {.np = b ? 4 : 3, .p = {y, x, w, b}};
  const char *xt = ck_ctype(xdt), *wt = ck_ctype(wdt);
  const char *call =
      b ? arena_printf(k->a,
                       "sk::%s<%s, %s, %lldLL, %d, %d>((%s *)p0, (const %s *)p1, (const %s *)p2, (const %s *)p3, %s);",
                       fn, xt, wt, (long long)d, nt, nper, xt, xt, wt, wt, ck_fl(k, eps))
        : arena_printf(k->a, "sk::%s<%s, %s, %lldLL, %d, %d>((%s *)p0, (const %s *)p1, (const %s *)p2, %s);", fn,
                       xt, wt, (long long)d, nt, nper, xt, xt, wt, ck_fl(k, eps));
  return ck_simple(k, &g, rows, 1, 1, nt, 1, call);
}

/* a warp per row, 16-byte vectors (shardk_norm.cuh norm_vec) */
static const char *norm_vec(CuK *k, int ln, const char *y, const char *x, const char *w, const char *b, DType wdt,
                            int64_t rows, int64_t d, double eps) {
  Args g = {.np = 4, .p = {y, x, w, ln ? b : w}}; /* (RMSNorm reads no bias) */
  const char *wt = ck_ctype(wdt);
  return ck_simple(k, &g, cdiv(rows, 8), 1, 1, 256, 1,
                   arena_printf(k->a,
                                "sk::norm_vec<%s, %s, %lldLL, %lldLL>((sk::bf16 *)p0, (const sk::bf16 *)p1, (const %s *)p2, "
                                "(const %s *)p3, %s);",
                                ln ? "true" : "false", wt, (long long)rows, (long long)d, wt, wt, ck_fl(k, eps)));
}

const char *cuk_layernorm(CuK *k, const char *y, const char *x, DType xdt, const char *w, const char *b, DType wdt,
                          int64_t rows, int64_t d, double eps) {
  if (xdt == DT_BF16 && (wdt == DT_BF16 || wdt == DT_F32) && d % 256 == 0 && d <= 1024)
    return norm_vec(k, 1, y, x, w, b, wdt, rows, d, eps);
  return norm_fwd(k, "layernorm", y, x, xdt, w, b, wdt, rows, d, eps);
}

const char *cuk_rmsnorm(CuK *k, const char *y, const char *x, DType xdt, const char *w, DType wdt, int64_t rows,
                        int64_t d, double eps) {
  if (k->variant != CUK_VAR_MAIN && xdt == DT_BF16 && (wdt == DT_BF16 || wdt == DT_F32) && d % 256 == 0 && d <= 2048)
    return norm_vec(k, 0, y, x, w, NULL, wdt, rows, d, eps);
  return norm_fwd(k, "rmsnorm", y, x, xdt, w, NULL, wdt, rows, d, eps);
}

/* The backward kernels' carry the kernel adds to dx, or none: their last template argument (RES, shardk_norm.cuh
 * with_res), then their res argument (parameter p5, or nullptr). */
static const char *res_flag(const char *res) { return res ? "true" : "false"; }
static const char *res_arg(CuK *k, const char *res, DType dt) {
  return res ? arena_printf(k->a, "(const %s *)p5", ck_ctype(dt)) : "nullptr";
}

/* The warps a row of the backward by norm_bwd_ring: 1 for D a multiple of 256 up to 1024, 2 for D a multiple of 512
 * up to 2048 (Llama's 2048: one warp's 64 columns a lane would need 255 registers and spill, ptxas -v for sm_90; two
 * warps of 32: 122 registers RMSNorm, 128 LayerNorm, no spills); 0: not by the ring. */
static int ring_h(int64_t d) { return d % 256 == 0 && d <= 1024 ? 1 : d % 512 == 0 && d <= 2048 ? 2 : 0; }

/* The backward by norm_bwd_ring (bf16, D as ring_h says): 8 warps a block (8 / H rows at once), up to 264 blocks (two
 * an SM on a 132-SM H100 / H200: one wave; 256 at 8192 rows) or fewer for fewer rows (at least 2 rows a warp), rings of up to 4 rows within
 * 99 KiB of shared memory a block (what sm_86 / sm_89 allow; two blocks an SM on sm_90: D 768 4 rows, D 1024 2, D 2048
 * 2 halves a warp), dw / db by a colsum launch of the blocks' partials (on the H100 of 2026-11-27 faster than their
 * sums over the blocks inside the first launch, by arrival counters: docs/performance.md). Bytes at RMSNorm [8192, 2048] (Llama 509M): x, dy read and dx written, 100.7 MB = the floor (23.7 us at
 * the H200's 4,247 GB/s); the partials 256 x 8 KiB = 2.1 MB written and read back in L2 (2 % over). */
static const char *norm_bwd_ring(CuK *k, int ln, const char *dx, const char *res, const char *dw, const char *db, const char *x,
                                 const char *w, DType wdt, const char *dy, int64_t rows, int64_t d, double eps) {
  const int W = 8, H = ring_h(d), X = H > 1 ? 16 * W : 0; /* X: the row sums' exchange (H > 1) */
  const int S = (int)imax(2, imin(4, (99 * 1024 - 4 * d - X) / (W * 4 * d / H)));
  /* up to 264 blocks (at least 2 rows a warp), then as few as give every warp the same passes (8192 rows: 256) */
  const int64_t P0 = imax(1, imin(cdiv(rows, 2 * W / H), 264)), P = cdiv(rows, W / H * cdiv(rows, W / H * P0));
  const int64_t m = ln ? 2 * d : d;
  const int64_t smem = 4 * d + (int64_t)W * S * 4 * d / H + X;
  ck_need_ws(k, P * m * 4);
  const char *wt = ck_ctype(wdt);
  Args g = {.np = res ? 6 : 5, .p = {dx, ck_ws_at(k, 0), x, w, dy, res}};
  k->minb = 2; /* two blocks an SM: 128 registers a thread */
  const char *l1 = ck_simple_smem(
      k, &g, P, 1, 1, 32 * W, 1, smem,
      arena_printf(k->a,
                   "sk::norm_bwd_ring<%s, %s, %lldLL, %lldLL, %d, %d, %d, %d, %s>((sk::bf16 *)p0, %s, (float *)p1, "
                   "(const sk::bf16 *)p2, (const %s *)p3, (const sk::bf16 *)p4, %s);",
                   ln ? "true" : "false", wt, (long long)rows, (long long)d, (int)P, W, S, H, res_flag(res),
                   res_arg(k, res, DT_BF16), wt, ck_fl(k, eps)));
  k->minb = 0;
  if (!ln) return ck_cat(k, l1, ck_colsum_launch(k, dw, wdt, ck_ws_at(k, 0), DT_F32, P, d, d, 1, 1.0));
  Args g3 = {.np = 3, .p = {dw, db, ck_ws_at(k, 0)}}; /* dw (blockIdx.z 0) and db (1) in one launch */
  int id = ck_begin(k, &g3, 256);
  ck_out(k, "  if (blockIdx.z == 0) %s\n  else %s\n", ck_colsum_call(k, wdt, DT_F32, P, d, 2 * d, 1, 32, 1.0, "p0", "p2"),
         ck_colsum_call(k, wdt, DT_F32, P, d, 2 * d, 1, 32, 1.0, "p1", arena_printf(k->a, "((float *)p2 + %lldLL)", (long long)d)));
  return ck_cat(k, l1, ck_end(k, id, &g3, cdiv(d / 4, 8), 1, 2, 8, 32, 1));
}

static const char *norm_bwd(CuK *k, int ln, const char *dx, const char *res, const char *dw, const char *db, const char *x, DType xdt,
                            const char *w, DType wdt, const char *dy, int64_t rows, int64_t d, double eps) {
  /* every variant: the ring (CUK_VAR_MAIN's block per row and layernorm_bwd_vec lost to it on the H100, issue 17) */
  if (xdt == DT_BF16 && (wdt == DT_BF16 || wdt == DT_F32) && ring_h(d))
    return norm_bwd_ring(k, ln, dx, res, dw, db, x, w, wdt, dy, rows, d, eps);
  int nt = ck_row_threads(d);
  int nper = (int)cdiv(d, nt);
  int64_t P = imax(1, imin(rows, 256));
  int64_t m = ln ? 2 * d : d;
  ck_need_ws(k, P * m * 4);
  const char *xt = ck_ctype(xdt), *wt = ck_ctype(wdt);
  Args g = {.np = res ? 6 : 5, .p = {dx, ck_ws_at(k, 0), x, w, dy, res}};
  /* a warp per row (shardk_norm.cuh layernorm_bwd_warp), else a block per row (norm_bwd_block): the template up to
   * its carry flag */
  const bool warp = ln && d % 32 == 0 && d <= 1024;
  const char *t = warp ? arena_printf(k->a, "layernorm_bwd_warp<%s, %s, %lldLL, %lldLL, %d", xt, wt, (long long)rows,
                                      (long long)d, (int)P)
                       : arena_printf(k->a, "norm_bwd_block<%s, %s, %s, %lldLL, %lldLL, %d, %d, %d",
                                      ln ? "true" : "false", xt, wt, (long long)rows, (long long)d, nt, nper, (int)P);
  const char *l1 = ck_simple(k, &g, P, 1, 1, warp ? 256 : nt, 1,
                             arena_printf(k->a,
                                          "sk::%s, %s>((%s *)p0, %s, (float *)p1, (const %s *)p2, (const %s *)p3, "
                                          "(const %s *)p4, %s);",
                                          t, res_flag(res), xt, res_arg(k, res, xdt), xt, wt, xt, ck_fl(k, eps)));
  /* stage 2: column sums of the parts; dw and db are the two halves of a [P, 2d] part array */
  Args g2 = {.np = 2, .p = {dw, ck_ws_at(k, 0)}};
  const char *l2 = NULL;
  if (d % 4 == 0 && ln) { /* the parts' column sums (shardk.cuh colsum): dw (blockIdx.z 0) and db (1) in one launch */
    Args g3 = {.np = 3, .p = {dw, db, ck_ws_at(k, 0)}};
    int id = ck_begin(k, &g3, 256);
    ck_out(k, "  if (blockIdx.z == 0) %s\n  else %s\n", ck_colsum_call(k, wdt, DT_F32, P, d, 2 * d, 1, 32, 1.0, "p0", "p2"),
        ck_colsum_call(k, wdt, DT_F32, P, d, 2 * d, 1, 32, 1.0, "p1",
                    arena_printf(k->a, "((float *)p2 + %lldLL)", (long long)d)));
    l2 = ck_end(k, id, &g3, cdiv(d / 4, 8), 1, 2, 8, 32, 1);
  } else if (d % 4 == 0) {
    l2 = ck_colsum_launch(k, dw, wdt, ck_ws_at(k, 0), DT_F32, P, d, d, 1, 1.0);
  } else if (ln) {
    /* one kernel over 2d columns would need dw and db adjacent: sum each half separately */
    int id = ck_begin(k, &(Args){.np = 3, .p = {dw, db, ck_ws_at(k, 0)}}, 256);
    ck_out(k, "  long long j = (long long)blockIdx.x * 256 + threadIdx.x;\n");
    ck_out(k, "  if (j >= %lldLL) return;\n", (long long)(2 * d));
    ck_out(k, "  float acc = 0.0f;\n  for (long long p = 0; p < %lldLL; p++) acc += ((const float *)p2)[p * %lldLL + j];\n",
        (long long)P, (long long)(2 * d));
    ck_out(k, "  if (j < %lldLL) sk::st((%s *)p0 + j, acc); else sk::st((%s *)p1 + (j - %lldLL), acc);\n", (long long)d,
        wt, wt, (long long)d);
    l2 = ck_end(k, id, &(Args){.np = 3, .p = {dw, db, ck_ws_at(k, 0)}}, cdiv(2 * d, 256), 1, 1, 256, 1, 1);
  } else {
    l2 = ck_simple(k, &g2, cdiv(d, 256), 1, 1, 256, 1,
                arena_printf(k->a, "sk::sum_parts<%s, %lldLL, %lldLL>((%s *)p0, (const float *)p1, 1.0f);", wt,
                             (long long)d, (long long)P, wt));
  }
  return ck_cat(k, l1, l2);
}

const char *cuk_layernorm_bwd(CuK *k, const char *dx, const char *res, const char *dw, const char *db, const char *x,
                              DType xdt, const char *w, DType wdt, const char *dy, int64_t rows, int64_t d, double eps) {
  return norm_bwd(k, 1, dx, res, dw, db, x, xdt, w, wdt, dy, rows, d, eps);
}

const char *cuk_rmsnorm_bwd(CuK *k, const char *dx, const char *res, const char *dw, const char *x, DType xdt,
                            const char *w, DType wdt, const char *dy, int64_t rows, int64_t d, double eps) {
  return norm_bwd(k, 0, dx, res, dw, NULL, x, xdt, w, wdt, dy, rows, d, eps);
}
