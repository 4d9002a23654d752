/* runtime/kernels/ref.h — naive reference of every kernel in kernels.h: the textbook loops, one
 * thread, double accumulation, libm's exp/tanh. Same arguments and semantics as the fast kernel
 * of the same name without "_ref"; no aliasing allowed. Tests compare the two; the backward
 * references are themselves checked against finite differences of the forward references. */
#ifndef SHARDRT_KERNELS_REF_H
#define SHARDRT_KERNELS_REF_H

#include <stdint.h>

void rt_gemm_ref(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
void rt_matmul_ref(int64_t batch, int64_t bbatch, int64_t m, int64_t n, int64_t k, int ta, int tb, const float *A,
                   const float *B, float beta, float *y);
void rt_linear_fwd_ref(int64_t rows, int64_t k, int64_t n, int tw, const float *x, const float *W,
                       const float *bias, float *y);
void rt_linear_dw_ref(int64_t rows, int64_t k, int64_t n, int tw, const float *x, const float *dy, float beta,
                      float *dW);
void rt_linear_dx_ref(int64_t rows, int64_t k, int64_t n, int tw, const float *dy, const float *W, float beta,
                      float *dx);
void rt_sum_rows_ref(int64_t rows, int64_t cols, const float *x, float beta, float *y);
double rt_sum_ref(int64_t n, const float *x);
double rt_sumsq_ref(int64_t n, const float *x);

void rt_gelu_fwd_ref(int64_t n, const float *x, float *y);
void rt_gelu_bwd_ref(int64_t n, const float *x, const float *dy, float *dx);
void rt_silu_fwd_ref(int64_t n, const float *x, float *y);
void rt_silu_bwd_ref(int64_t n, const float *x, const float *dy, float *dx);
void rt_swiglu_fwd_ref(int64_t n, const float *gate, const float *up, float *y);
void rt_swiglu_bwd_ref(int64_t n, const float *gate, const float *up, const float *dy, float *dgate, float *dup);

void rt_embed_fwd_ref(int64_t n, int64_t V, int64_t D, const float *table, const int32_t *idx, float *y);
void rt_embed_bwd_ref(int64_t n, int64_t V, int64_t D, const int32_t *idx, const float *dy, int accumulate,
                      float *dtable);

void rt_layernorm_fwd_ref(int64_t rows, int64_t D, float eps, const float *x, const float *w, const float *b,
                          float *y, float *mean, float *rstd);
void rt_layernorm_bwd_ref(int64_t rows, int64_t D, float eps, const float *x, const float *w, const float *dy,
                          float *dx, float *dw, float *db, float beta);
void rt_rmsnorm_fwd_ref(int64_t rows, int64_t D, float eps, const float *x, const float *w, float *y,
                        float *rstd);
void rt_rmsnorm_bwd_ref(int64_t rows, int64_t D, float eps, const float *x, const float *w, const float *dy,
                        float *dx, float *dw, float beta);

void rt_rope_ref(int64_t B, int64_t S, int64_t H, int64_t hd, double theta, int64_t start, int inverse,
                 const float *x, float *y);

void rt_sdpa_fwd_ref(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal,
                     const float *q, const float *k, const float *v, float *o, float *lse);
void rt_sdpa_bwd_ref(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal,
                     const float *q, const float *k, const float *v, const float *o, const float *lse,
                     const float *dout, float *dq, float *dk, float *dv);

float rt_xent_fwd_bwd_ref(int64_t N, int64_t V, int64_t len, const float *logits, const int32_t *targets,
                          float dloss, float *dlogits);

void rt_ce_max_ref(int64_t N, int64_t V, int64_t nv, const float *logits, float *m);
void rt_ce_sums_ref(int64_t N, int64_t V, int64_t nv, int64_t lo, const float *logits, const int32_t *targets,
                    const float *m, float *st);
int64_t rt_ce_loss_ref(int64_t N, int64_t len, const float *st, const float *m, const int32_t *targets, float *out);
void rt_ce_grad_ref(int64_t N, int64_t V, int64_t nv, int64_t lo, const float *logits, const int32_t *targets,
                    const float *m, const float *st, float scale, float *dlogits);

void rt_adamw_ref(int64_t n, float *p, const float *g, float *m, float *v, float lr, float gscale, double step,
                  float beta1, float beta2, float eps, float weight_decay);
void rt_sgd_ref(int64_t n, float *p, const float *g, float *m, float lr, float gscale, float momentum,
                float weight_decay);

/* bf16 by arithmetic rather than bit tricks: the nearest bf16 value, ties to the even mantissa. */
uint16_t rt_f32_to_bf16_ref(float x);

#endif
