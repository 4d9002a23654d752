/* runtime/ops/prims.h — the op-level entry points generated code calls for the IR's
 * compute primitives (ir/ops.def). Each forwards to the tuned kernels of
 * runtime/kernels/ with the IR's layout; fp32.
 */
#ifndef SHARDRT_PRIMS_H
#define SHARDRT_PRIMS_H

#include <stddef.h>
#include <stdint.h>

/* Scratch the ops below need, given the shapes (the generated program takes the max over its
 * nodes and the trainer allocates it after the planned memory). */
size_t rt_norm_ws_bytes(int64_t rows, int64_t d);
size_t rt_rope_ws_bytes(int64_t S, int64_t hd);
size_t rt_cross_entropy_ws_bytes(int64_t n);

/* y[i, :] = table[idx[i], :], i < n; ids outside [0, V) are an error (reported, exit). */
void rt_embed_f32(float *y, const float *table, const int32_t *idx, int64_t n, int64_t d, int64_t V);
/* dtable = 0; dtable[idx[i], :] += dy[i, :]. */
void rt_embed_bwd_f32(float *dtable, const int32_t *idx, const float *dy, int64_t n, int64_t d, int64_t V);
void rt_layernorm_f32(float *y, const float *x, const float *w, const float *b, int64_t rows, int64_t d, float eps);
void rt_layernorm_bwd_f32(float *dx, float *dw, float *db, const float *x, const float *w, const float *dy,
                          int64_t rows, int64_t d, float eps, void *ws);
void rt_rmsnorm_f32(float *y, const float *x, const float *w, int64_t rows, int64_t d, float eps);
void rt_rmsnorm_bwd_f32(float *dx, float *dw, const float *x, const float *w, const float *dy, int64_t rows,
                        int64_t d, float eps, void *ws);
/* x, y: [B, S, H*hd]. */
void rt_rope_f32(float *y, const float *x, int64_t B, int64_t S, int64_t H, int64_t hd, double theta,
                 int64_t start, int inverse, void *ws);
/* q: [B, S, H*hd], k, v: [B, S, KV*hd] -> o: [B, S, H*hd], lse: [B, H, S]. ld*: the row strides of q, k,
 * v, o (and dq, dk, dv) in elements, 0 for contiguous (a column slice of the fused QKV / dqkv: memplan's
 * strided views, RtAttnLd); the backward's o and dout likewise. */
void rt_sdpa_f32(float *o, float *lse, const float *q, const float *k, const float *v, int64_t B, int64_t S,
                 int64_t H, int64_t KV, int64_t hd, int causal, int64_t ldq, int64_t ldk, int64_t ldv,
                 int64_t ldo);
void rt_sdpa_bwd_f32(float *dq, float *dk, float *dv, const float *q, const float *k, const float *v,
                     const float *o, const float *lse, const float *dout, int64_t B, int64_t S, int64_t H,
                     int64_t KV, int64_t hd, int causal, int64_t ldq, int64_t ldk, int64_t ldv, int64_t ldo,
                     int64_t lddo, int64_t lddq, int64_t lddk, int64_t lddv);
/* Ring attention's pieces (ops.def rope_at, attn_block, attn_block_bwd, attn_combine): positions
 * pos / qpos [S], kpos [T] strictly increasing; k, v [B, T, KV*hd]. */
void rt_rope_at_f32(float *y, const float *x, const int32_t *pos, int64_t B, int64_t S, int64_t H, int64_t hd,
                    double theta, int64_t start, int inverse, void *ws);
void rt_attn_block_f32(float *o, float *lse, const float *q, const float *k, const float *v, const int32_t *qpos,
                       const int32_t *kpos, int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd,
                       int causal);
void rt_attn_block_bwd_f32(float *dq, float *dk, float *dv, const float *q, const float *k, const float *v,
                           const float *o, const float *lse, const float *dout, const int32_t *qpos,
                           const int32_t *kpos, int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd,
                           int causal);
void rt_attn_combine_f32(float *o, float *lse, const float *o1, const float *lse1, const float *o2,
                         const float *lse2, int64_t B, int64_t S, int64_t H, int64_t hd);
/* loss[0] = mean over targets >= 0 of -log softmax(logits[i, :len])[t]; logits [n, V]. */
void rt_cross_entropy_f32(float *loss, const float *logits, const int32_t *targets, int64_t n, int64_t V,
                          int64_t len, void *ws);
void rt_cross_entropy_bwd_f32(float *dlogits, const float *logits, const int32_t *targets, const float *dloss,
                              int64_t n, int64_t V, int64_t len, void *ws);
/* The forward and the backward in one pass over the logits (passes/fuse_ce.c): loss[0] as
 * rt_cross_entropy_f32 and dlogits as rt_cross_entropy_bwd_f32 (dlogits may be the logits). */
void rt_cross_entropy_fused_f32(float *loss, float *dlogits, const float *logits, const int32_t *targets,
                                const float *dloss, int64_t n, int64_t V, int64_t len, void *ws);
/* The same through a row kernel built by LLVM (codegen/llvm_kernels.h, LlkXent; the generated program
 * passes it as rows): loss[0] (loss may be NULL) and, when dlogits is not NULL (rows built with bwd),
 * dlogits; rt_par_for splits the rows, the losses are summed in row order (thread-count independent).
 * ws: rt_cross_entropy_ws_bytes(n). */
void rt_xent_rows_f32(void (*rows)(int64_t, int64_t, void **), float *loss, float *dlogits, const float *logits,
                      const int32_t *targets, const float *dloss, int64_t n, int64_t V, void *ws);
/* In place; hyper = (lr, gscale, step). */
void rt_adamw_f32(float *p, const float *g, float *m, float *v, const float *hyper, int64_t n, float beta1,
                  float beta2, float eps, float weight_decay);
/* rt_adamw_f32, and copy = the updated p in bf16 (plan offload under bf16: the host's upload). */
void rt_adamw_f32_copy(float *p, const float *g, float *m, float *v, const float *hyper, int64_t n, float beta1,
                       float beta2, float eps, float weight_decay, uint16_t *copy);
/* In place; hyper = (lr, gscale). */
void rt_sgd_f32(float *p, const float *g, float *m, const float *hyper, int64_t n, float momentum,
                float weight_decay);

#endif
