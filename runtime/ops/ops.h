/* runtime/ops/ops.h — the generic ("glue") CPU kernels generated code calls for
 * the IR's shape and elementwise ops: broadcasting binaries, unaries, reductions
 * to a shape, slices, pads, concatenation, transposes, fills, batched matmul.
 * Semantics are those of ir/ops.def; the reference interpreter is the oracle. fp32.
 */
#ifndef SHARDRT_OPS_H
#define SHARDRT_OPS_H

#include <stdint.h>

#define RT_OPS_MAX_RANK 6

typedef struct {
  int rank;
  int64_t dim[RT_OPS_MAX_RANK];
} RtShape;

enum { RT_ADD, RT_SUB, RT_MUL, RT_DIV, RT_MAXIMUM, RT_MINIMUM };
enum {
  RT_NEG, RT_SCALE, RT_ADD_SCALAR, RT_EXP, RT_LOG, RT_SQRT, RT_RSQRT,
  RT_TANH, RT_SIGMOID, RT_RELU, RT_GELU, RT_SILU, RT_COPY
};

/* y = a op b with numpy broadcasting; y has shape ys (the broadcast shape). */
void rt_binary_f32(int op, float *y, const RtShape *ys, const float *a, const RtShape *as, const float *b,
                   const RtShape *bs);
/* y = op(x) (scalar for RT_SCALE / RT_ADD_SCALAR); y may equal x. */
void rt_unary_f32(int op, float *y, const float *x, int64_t n, float scalar);
/* Their loops (runtime/kernels/glue.c, built with the kernels' flags): y = op(x) over n elements;
 * y = a op b over n elements where each operand is read per element, per column of rows of
 * `inner` (a bias) or as one value. y may equal a full operand. */
enum { RT_BC_FULL, RT_BC_ROW, RT_BC_SCALAR };
void rt_ew_unary(int op, int64_t n, const float *x, float scalar, float *y);
void rt_ew_binary(int op, int64_t n, int64_t inner, const float *a, int abc, const float *b, int bbc, float *y);
/* y = dy * gelu'(x) / dy * silu'(x). */
void rt_gelu_bwd_f32(float *dx, const float *x, const float *dy, int64_t n);
void rt_silu_bwd_f32(float *dx, const float *x, const float *dy, int64_t n);
/* Sums x (shape xs) down to ys: dims of size 1 or missing on the left are summed. */
void rt_reduce_to_f32(float *y, const RtShape *ys, const float *x, const RtShape *xs);
/* Broadcasts x (shape xs) to ys. */
void rt_broadcast_to_f32(float *y, const RtShape *ys, const float *x, const RtShape *xs);
/* Copies a block: for o < outer, y[o, ystart : ystart + len, :] = x[o, xstart : xstart + len, :]
 * where the middle dims are ydim / xdim long and rows are `inner` elements. Works for any
 * element size via `esize` bytes. */
void rt_copy_block(void *y, int64_t ydim, int64_t ystart, const void *x, int64_t xdim, int64_t xstart,
                   int64_t outer, int64_t len, int64_t inner, int esize);
/* y[b] = x[b]^T for b < batch, x[b] is m × n. */
void rt_transpose_f32(float *y, const float *x, int64_t batch, int64_t m, int64_t n);
void rt_fill_f32(float *y, int64_t n, float v);
void rt_iota_i32(int32_t *y, int64_t n, int64_t start);
/* Scalars: y[0] = sum / mean / sum of squares of x[0..n). Accumulates in double. */
void rt_sum_f32(float *y, const float *x, int64_t n);
void rt_mean_f32(float *y, const float *x, int64_t n);
void rt_sumsq_f32(float *y, const float *x, int64_t n);
/* y[b] = op(A[b]) @ op(B[b or 0]): A is (batch, m, k) (or (batch, k, m) when ta), B is (k, n)
 * (or (n, k) when tb), batched when b_batched, else shared. C = A @ B of (batch, m, n). */
void rt_matmul_f32(float *y, const float *a, const float *b, int64_t batch, int64_t m, int64_t n, int64_t k,
                   int ta, int tb, int b_batched);
/* y = c + op(A) @ op(B), the GEMM accumulating (beta 1) into y; c copied into y first when it lives
 * elsewhere (passes/gacc.c: gradient accumulation's running sum, y normally c itself). */
void rt_matmul_acc_f32(float *y, const float *c, const float *a, const float *b, int64_t batch, int64_t m, int64_t n,
                       int64_t k, int ta, int tb, int b_batched);
/* The same under `precision bf16` (runtime/ops/gemm_dnnl.c): A and B rounded to bf16, f32
 * accumulation and result; through oneDNN's bf16 matmul when built with it. */
void rt_matmul_bf16(float *y, const float *a, const float *b, int64_t batch, int64_t m, int64_t n, int64_t k,
                    int ta, int tb, int b_batched);
/* The same with either operand given in bf16 already (a_bf16 / b_bf16: a uint16_t array of bf16
 * codes, read as it is), the other f32 (rounded here); rt_matmul_bf16 is both f32. */
void rt_matmul_bf16_in(float *y, const void *a, int a_bf16, const void *b, int b_bf16, int64_t batch, int64_t m,
                       int64_t n, int64_t k, int ta, int tb, int b_batched);
/* y = c + the product of rt_matmul_bf16_in (f32 accumulation into y: oneDNN's sum post-op, or the
 * f32 GEMM's beta 1); c copied into y first when it lives elsewhere (passes/gacc.c). */
void rt_matmul_bf16_acc_in(float *y, const float *c, const void *a, int a_bf16, const void *b, int b_bf16, int64_t batch,
                           int64_t m, int64_t n, int64_t k, int ta, int tb, int b_batched);
/* The FLOPs (2 x batch x m x n x k each) the rt_matmul_* entry points above have run in this process, every
 * thread's: what the trainer reports a step against the plan's FLOPs (runtime/train/log.c). */
uint64_t rt_matmul_flops(void);
void rt_matmul_count(int64_t batch, int64_t m, int64_t n, int64_t k);
/* The implementation this thread's last rt_matmul_bf16 ran (oneDNN's name, e.g.
 * "brg:avx512_core_bf16"), or a sentence when built without oneDNN. */
const char *rt_matmul_bf16_impl(void);

#endif
