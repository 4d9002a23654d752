/* codegen/cuda_kernels_ce.c — the cross-entropy kernels' emitters (codegen/cuda_kernels.h): whole
 * rows, forward and backward and fused (runtime/cuda/kernels/shardk_ce.cuh), and the vocab-parallel
 * parts. */
#include "cuda_kernels_int.h"

#include <stdio.h>
#include <string.h>

#include "diag.h"

/* ---- cross-entropy ---------------------------------------------------------------------------------- */

#define CE_NT 256
/* ce_fused_rows_smem: threads, 16-byte vectors each keeps in registers, and the most shared memory the rest may
 * take (96 KiB: a block fits the 99 KiB of sm_86 / sm_89; two per SM on sm_90's 228 KiB at GPT-2's V: 82 KiB) */
#define CE_SMEM_NT 512
#define CE_SMEM_KR 2
#define CE_SMEM_MAX (96 * 1024)

/* The mean loss over the rows with a target, from the row losses `rows` (a workspace slice). */
static const char *ce_loss_mean(CuK *k, const char *loss, const char *rows, const char *targets, int64_t n) {
  Args g = {.np = 3, .p = {loss, rows, targets}};
  return ck_simple(k, &g, 1, 1, 1, CE_NT, 1,
                arena_printf(k->a,
                             "sk::ce_mean<%lldLL, %d>((float *)p0, (const float *)p1, (const int *)p2, "
                             "(const float *)0, (float *)0);",
                             (long long)n, CE_NT));
}

const char *cuk_cross_entropy(CuK *k, const char *loss, const char *logits, DType ldt, const char *targets, int64_t n,
                              int64_t V, int64_t len) {
  ck_need_ws(k, n * 4);
  const char *t = ck_ctype(ldt);
  Args g1 = {.np = 4, .p = {ck_ws_at(k, 0), logits, targets, "WS"}};
  const char *l1 = ck_simple(k, &g1, n, 1, 1, CE_NT, 1,
                          arena_printf(k->a,
                                       "sk::ce_rows<%s, %lldLL, %lldLL, %d>((float *)p0, (const %s *)p1, (const int *)p2, "
                                       "(int *)p3);",
                                       t, (long long)V, (long long)len, CE_NT, t));
  const char *l2 = ce_loss_mean(k, loss, ck_ws_at(k, 0), targets, n);
  return ck_cat(k, l1, l2);
}

/* The gradient's scale (dloss over the rows with a target) into the workspace at 0. */
static const char *ce_grad_scale(CuK *k, const char *targets, const char *dloss, int64_t n) {
  Args g1 = {.np = 3, .p = {targets, dloss, ck_ws_at(k, 0)}};
  return ck_simple(k, &g1, 1, 1, 1, CE_NT, 1,
                arena_printf(k->a,
                             "sk::ce_mean<%lldLL, %d>((float *)0, (const float *)0, (const int *)p0, "
                             "(const float *)p1, (float *)p2);",
                             (long long)n, CE_NT));
}

const char *cuk_cross_entropy_bwd(CuK *k, const char *dlogits, const char *logits, DType ldt, const char *targets,
                                  const char *dloss, int64_t n, int64_t V, int64_t len) {
  ck_need_ws(k, 4);
  const char *t = ck_ctype(ldt);
  const char *l1 = ce_grad_scale(k, targets, dloss, n);
  Args g2 = {.np = 4, .p = {dlogits, logits, targets, ck_ws_at(k, 0)}};
  const char *l2 = ck_simple(k, &g2, n, 1, 1, CE_NT, 1,
                          arena_printf(k->a,
                                       "sk::ce_bwd_rows<%s, %lldLL, %lldLL, %d>((%s *)p0, (const %s *)p1, "
                                       "(const int *)p2, (const float *)p3);",
                                       t, (long long)V, (long long)len, CE_NT, t, t));
  return ck_cat(k, l1, l2);
}

const char *cuk_cross_entropy_fused(CuK *k, const char *loss, const char *dlogits, const char *logits, DType ldt,
                                    const char *targets, const char *dloss, int64_t n, int64_t V, int64_t len) {
  ck_need_ws(k, 64 + n * 4); /* the gradient's scale at 0, the row losses from 64 */
  const char *t = ck_ctype(ldt);
  const char *l1 = ce_grad_scale(k, targets, dloss, n);
  Args g2 = {.np = 6, .p = {dlogits, ck_ws_at(k, 64), logits, targets, ck_ws_at(k, 0), "WS"}};
  int64_t smem = 16 * imax(0, cdiv(len > 0 ? len : V, 8) - CE_SMEM_KR * CE_SMEM_NT);
  if (ldt == DT_BF16 && V % 8 == 0 && smem <= CE_SMEM_MAX) { /* the row in shared memory: the logits read once */
    const char *l2 = ck_simple_smem(k, &g2, n, 1, 1, CE_SMEM_NT, 1, smem,
                                 arena_printf(k->a,
                                              "sk::ce_fused_rows_smem<%lldLL, %lldLL, %d, %d, 4>((sk::bf16 *)p0, (float *)p1, "
                                              "(const sk::bf16 *)p2, (const int *)p3, (const float *)p4, (int *)p5);",
                                              (long long)V, (long long)len, CE_SMEM_NT, CE_SMEM_KR));
    return ck_cat(k, ck_cat(k, l1, l2), ce_loss_mean(k, loss, ck_ws_at(k, 64), targets, n));
  }
  const char *l2 = ck_simple(k, &g2, n, 1, 1, CE_NT, 1,
                          arena_printf(k->a,
                                       "sk::ce_fused_rows<%s, %lldLL, %lldLL, %d>((%s *)p0, (float *)p1, (const %s *)p2, "
                                       "(const int *)p3, (const float *)p4, (int *)p5);",
                                       t, (long long)V, (long long)len, CE_NT, t, t));
  const char *l3 = ce_loss_mean(k, loss, ck_ws_at(k, 64), targets, n);
  return ck_cat(k, ck_cat(k, l1, l2), l3);
}

const char *cuk_ce_max(CuK *k, const char *m, const char *logits, DType ldt, int64_t n, int64_t V, int64_t len,
                       const char *col0) {
  const char *t = ck_ctype(ldt);
  Args g = {.np = 2, .nl = 1, .p = {m, logits}, .l = {col0}};
  return ck_simple(k, &g, n, 1, 1, CE_NT, 1,
                arena_printf(k->a, "sk::ce_max<%s, %lldLL, %lldLL, %d>((float *)p0, (const %s *)p1, l0);", t,
                             (long long)V, (long long)len, CE_NT, t));
}

const char *cuk_ce_sums(CuK *k, const char *st, const char *logits, DType ldt, const char *targets, const char *m,
                        int64_t n, int64_t V, int64_t len, const char *col0) {
  const char *t = ck_ctype(ldt);
  Args g = {.np = 4, .nl = 1, .p = {st, logits, targets, m}, .l = {col0}};
  return ck_simple(k, &g, n, 1, 1, CE_NT, 1,
                arena_printf(k->a,
                             "sk::ce_sums<%s, %lldLL, %lldLL, %d>((float *)p0, (const %s *)p1, (const int *)p2, "
                             "(const float *)p3, l0);",
                             t, (long long)V, (long long)len, CE_NT, t));
}

const char *cuk_ce_loss(CuK *k, const char *outp, const char *st, const char *m, const char *targets, int64_t n,
                        int64_t len) {
  Args g = {.np = 5, .p = {outp, st, m, targets, "WS"}};
  return ck_simple(k, &g, 1, 1, 1, CE_NT, 1,
                arena_printf(k->a,
                             "sk::ce_loss<%lldLL, %lldLL, %d>((float *)p0, (const float *)p1, (const float *)p2, "
                             "(const int *)p3, (int *)p4);",
                             (long long)n, (long long)len, CE_NT));
}

const char *cuk_ce_grad(CuK *k, const char *dlogits, const char *logits, DType ldt, const char *targets, const char *m,
                        const char *st, const char *scale, int64_t n, int64_t V, int64_t len, const char *col0) {
  const char *t = ck_ctype(ldt);
  Args g = {.np = 6, .nl = 1, .p = {dlogits, logits, targets, m, st, scale}, .l = {col0}};
  return ck_simple(k, &g, n, 1, 1, CE_NT, 1,
                arena_printf(k->a,
                             "sk::ce_grad<%s, %lldLL, %lldLL, %d>((%s *)p0, (const %s *)p1, (const int *)p2, "
                             "(const float *)p3, (const float *)p4, (const float *)p5, l0);",
                             t, (long long)V, (long long)len, CE_NT, t, t));
}

