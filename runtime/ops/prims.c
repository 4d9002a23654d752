/* runtime/ops/prims.c — the IR's compute primitives on the tuned kernels (runtime/kernels). */
#include "prims.h"

#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"
#include "par.h"

size_t rt_norm_ws_bytes(int64_t rows, int64_t d) { return rt_norm_workspace_bytes(rows, d); }
size_t rt_rope_ws_bytes(int64_t S, int64_t hd) { return rt_rope_workspace_bytes(S, hd); }
size_t rt_cross_entropy_ws_bytes(int64_t n) { return rt_xent_workspace_bytes(n); }

void rt_embed_f32(float *y, const float *table, const int32_t *idx, int64_t n, int64_t d, int64_t V) {
  for (int64_t i = 0; i < n; i++)
    if (idx[i] < 0 || idx[i] >= V) {
      fprintf(stderr, "shardrt: embed: token id %d at position %lld is outside the table of %lld rows\n", idx[i],
              (long long)i, (long long)V);
      exit(1);
    }
  rt_embed_fwd(n, V, d, table, idx, y);
}

void rt_embed_bwd_f32(float *dtable, const int32_t *idx, const float *dy, int64_t n, int64_t d, int64_t V) {
  rt_embed_bwd(n, V, d, idx, dy, 0, dtable);
}

void rt_layernorm_f32(float *y, const float *x, const float *w, const float *b, int64_t rows, int64_t d, float eps) {
  rt_layernorm_fwd(rows, d, eps, x, w, b, y, NULL, NULL);
}

void rt_layernorm_bwd_f32(float *dx, float *dw, float *db, const float *x, const float *w, const float *dy,
                          int64_t rows, int64_t d, float eps, void *ws) {
  rt_layernorm_bwd(rows, d, eps, x, w, dy, dx, dw, db, 0.0f, ws);
}

void rt_rmsnorm_f32(float *y, const float *x, const float *w, int64_t rows, int64_t d, float eps) {
  rt_rmsnorm_fwd(rows, d, eps, x, w, y, NULL);
}

void rt_rmsnorm_bwd_f32(float *dx, float *dw, const float *x, const float *w, const float *dy, int64_t rows,
                        int64_t d, float eps, void *ws) {
  rt_rmsnorm_bwd(rows, d, eps, x, w, dy, dx, dw, 0.0f, ws);
}

void rt_rope_f32(float *y, const float *x, int64_t B, int64_t S, int64_t H, int64_t hd, double theta,
                 int64_t start, int inverse, void *ws) {
  rt_rope(B, S, H, hd, theta, start, inverse, x, y, ws);
}

void rt_sdpa_f32(float *o, float *lse, const float *q, const float *k, const float *v, int64_t B, int64_t S,
                 int64_t H, int64_t KV, int64_t hd, int causal, int64_t ldq, int64_t ldk, int64_t ldv,
                 int64_t ldo) {
  rt_sdpa_fwd_ld(B, S, S, H, KV, hd, causal, q, k, v, o, lse, &(RtAttnLd){.q = ldq, .k = ldk, .v = ldv, .o = ldo});
}

void rt_sdpa_bwd_f32(float *dq, float *dk, float *dv, const float *q, const float *k, const float *v,
                     const float *o, const float *lse, const float *dout, int64_t B, int64_t S, int64_t H,
                     int64_t KV, int64_t hd, int causal, int64_t ldq, int64_t ldk, int64_t ldv, int64_t ldo,
                     int64_t lddo, int64_t lddq, int64_t lddk, int64_t lddv) {
  rt_sdpa_bwd_ld(B, S, S, H, KV, hd, causal, q, k, v, o, lse, dout, dq, dk, dv,
                 &(RtAttnLd){ldq, ldk, ldv, ldo, lddo, lddq, lddk, lddv});
}

void rt_rope_at_f32(float *y, const float *x, const int32_t *pos, int64_t B, int64_t S, int64_t H, int64_t hd,
                    double theta, int64_t start, int inverse, void *ws) {
  rt_rope_at(B, S, H, hd, theta, start, inverse, pos, x, y, ws);
}

void rt_attn_block_f32(float *o, float *lse, const float *q, const float *k, const float *v, const int32_t *qpos,
                       const int32_t *kpos, int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd,
                       int causal) {
  rt_attn_block_fwd(B, S, T, H, KV, hd, causal, q, k, v, qpos, kpos, o, lse);
}

void rt_attn_block_bwd_f32(float *dq, float *dk, float *dv, const float *q, const float *k, const float *v,
                           const float *o, const float *lse, const float *dout, const int32_t *qpos,
                           const int32_t *kpos, int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd,
                           int causal) {
  rt_attn_block_bwd(B, S, T, H, KV, hd, causal, q, k, v, o, lse, dout, qpos, kpos, dq, dk, dv);
}

void rt_attn_combine_f32(float *o, float *lse, const float *o1, const float *lse1, const float *o2,
                         const float *lse2, int64_t B, int64_t S, int64_t H, int64_t hd) {
  rt_attn_combine(B, S, H, hd, o1, lse1, o2, lse2, o, lse);
}

void rt_cross_entropy_f32(float *loss, const float *logits, const int32_t *targets, int64_t n, int64_t V,
                          int64_t len, void *ws) {
  loss[0] = rt_xent_fwd_bwd(n, V, len, logits, targets, 0.0f, NULL, ws);
}

void rt_cross_entropy_bwd_f32(float *dlogits, const float *logits, const int32_t *targets, const float *dloss,
                              int64_t n, int64_t V, int64_t len, void *ws) {
  rt_xent_fwd_bwd(n, V, len, logits, targets, dloss[0], dlogits, ws);
}

void rt_cross_entropy_fused_f32(float *loss, float *dlogits, const float *logits, const int32_t *targets,
                                const float *dloss, int64_t n, int64_t V, int64_t len, void *ws) {
  loss[0] = rt_xent_fwd_bwd(n, V, len, logits, targets, dloss[0], dlogits, ws);
}

void rt_xent_rows_f32(void (*rows)(int64_t, int64_t, void **), float *loss, float *dlogits, const float *logits,
                      const int32_t *targets, const float *dloss, int64_t n, int64_t V, void *ws) {
  double *rowloss = (double *)ws; /* as rt_xent_fwd_bwd: [n], summed in row order */
  int64_t count = 0;
  for (int64_t r = 0; r < n; r++) count += targets[r] >= 0;
  float g = dlogits && count > 0 ? dloss[0] / (float)count : 0.0f;
  void *p[] = {(void *)logits, (void *)targets, rowloss, dlogits, &g};
  rt_par_for(rows, n, n * V, p);
  if (!loss) return;
  double total = 0.0;
  for (int64_t r = 0; r < n; r++) total += rowloss[r];
  loss[0] = count > 0 ? (float)(total / (double)count) : 0.0f;
}

void rt_adamw_f32(float *p, const float *g, float *m, float *v, const float *hyper, int64_t n, float beta1,
                  float beta2, float eps, float weight_decay) {
  rt_adamw(n, p, g, m, v, hyper[0], hyper[1], (double)hyper[2], beta1, beta2, eps, weight_decay);
}

void rt_adamw_f32_copy(float *p, const float *g, float *m, float *v, const float *hyper, int64_t n, float beta1,
                       float beta2, float eps, float weight_decay, uint16_t *copy) {
  rt_adamw_copy(n, p, g, m, v, hyper[0], hyper[1], (double)hyper[2], beta1, beta2, eps, weight_decay, copy);
}

void rt_sgd_f32(float *p, const float *g, float *m, const float *hyper, int64_t n, float momentum,
                float weight_decay) {
  rt_sgd(n, p, g, m, hyper[0], hyper[1], momentum, weight_decay);
}
