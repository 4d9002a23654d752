/* runtime/kernels/kernels.h — the CPU compute kernels of libshardrt, one per compute op of
 * ir/ops.def (forward and backward), fp32.
 *
 * Conventions for every kernel:
 *   - buffers are fp32, row-major, contiguous, with the dims given explicitly (int64_t);
 *     token ids / targets are int32_t;
 *   - no kernel allocates: a kernel that needs scratch takes `ws`, a caller-provided workspace of
 *     at least rt_<kernel>_workspace_bytes(...) bytes (64-byte aligned is best); the compiler's
 *     memory plan sizes it;
 *   - the semantics are exactly the op comments in ir/ops.def (ir/interp.c evaluates the same
 *     definitions in fp64); ref.h holds naive double-accumulating references of every kernel;
 *   - results of the non-BLAS kernels do not depend on the thread count (reductions use fixed
 *     partitions combined in a fixed order; gradients that scatter — embedding, attention dk/dv —
 *     are owned by one thread); the GEMMs are deterministic for a fixed thread count; so a run is
 *     bit-reproducible on a given machine, BLAS and thread count;
 *   - an output may alias an input only where a kernel says so.
 *
 * Threads: the kernels use OpenMP; GEMMs go to the OpenMP build of OpenBLAS (shares the same
 * thread pool, see docs/performance.md). rt_set_threads(n) sets both; nothing else changes it.
 */
#ifndef SHARDRT_KERNELS_H
#define SHARDRT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* ---- threads and machine -------------------------------------------------------------------- */

/* Sets the thread count of the kernels (OpenMP) and of the BLAS to n (n <= 0: the number of
 * online CPUs). Call once at start, before any kernel. */
void rt_set_threads(int n);
int rt_get_threads(void);
/* The BLAS linked in: "OpenBLAS 0.3.21 ... (openmp)", "BLIS", or "unknown". */
const char *rt_blas_name(void);
/* Measures the machine's fp32 FMA peak with `threads` threads (each running an unrolled
 * AVX-512 or AVX2 FMA loop for about `seconds`), in FLOP/s (an FMA counts as 2 FLOPs). */
double rt_measure_peak_flops(int threads, double seconds);
/* The same peak reached through a large sgemm (2048^3 by default when n <= 0): the practical
 * ceiling. FLOP/s. */
double rt_measure_sgemm_flops(int threads, int64_t n);

/* ---- GEMM (BLAS) ----------------------------------------------------------------------------- */

/* C[m, n] = alpha * op(A)[m, k] @ op(B)[k, n] + beta * C, op = transpose when ta / tb.
 * A is (m, k) or (k, m) when ta, with leading dimension lda; likewise B, C. */
void rt_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
             const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* IR MATMUL: y[.., m, n] = sum_k A[.., m, k] B[.., k, n] (A^T / B^T on the last two dims when
 * ta / tb). A has `batch` matrices; B has `bbatch` (1 <= bbatch, batch % bbatch == 0: B's leading
 * dims are a right-aligned, broadcast suffix of A's; matrix i of A meets matrix i % bbatch of B).
 * When bbatch == 1 and !ta the batch folds into one (batch*m) x k GEMM. beta: 0 writes y,
 * 1 accumulates into it. */
void rt_matmul(int64_t batch, int64_t bbatch, int64_t m, int64_t n, int64_t k, int ta, int tb, const float *A,
               const float *B, float beta, float *y);

/* Linear layer forward: y[rows, n] = x[rows, k] @ W + bias, with W (k, n), or (n, k) when tw
 * (e.g. the tied LM head x @ wte^T). bias[n] may be NULL. */
void rt_linear_fwd(int64_t rows, int64_t k, int64_t n, int tw, const float *x, const float *W, const float *bias,
                   float *y);
/* Weight gradient, summing over all rows (batch and sequence): dW (k, n) [or (n, k) when tw]
 * = x^T @ dy [or dy^T @ x]; beta 0 writes, 1 accumulates. */
void rt_linear_dw(int64_t rows, int64_t k, int64_t n, int tw, const float *x, const float *dy, float beta,
                  float *dW);
/* Input gradient: dx[rows, k] = dy[rows, n] @ W^T [or @ W when tw]; beta 0 writes, 1 accumulates. */
void rt_linear_dx(int64_t rows, int64_t k, int64_t n, int tw, const float *dy, const float *W, float beta,
                  float *dx);

/* ---- elementwise and reductions ------------------------------------------------------------- */

/* Residual adds, bias adds, scaling. The _bcast forms broadcast a trailing vector b[cols] over
 * rows (biases); y may alias a. */
void rt_add(int64_t n, const float *a, const float *b, float *y);            /* y = a + b, y may alias a or b */
void rt_mul(int64_t n, const float *a, const float *b, float *y);            /* y = a * b, may alias */
void rt_scale(int64_t n, float s, const float *x, float *y);                 /* y = s * x, may alias */
void rt_axpy(int64_t n, float s, const float *x, float *y);                  /* y += s * x */
void rt_add_bcast(int64_t rows, int64_t cols, const float *a, const float *b, float *y); /* y[r,c] = a[r,c] + b[c] */
void rt_mul_bcast(int64_t rows, int64_t cols, const float *a, const float *b, float *y); /* y[r,c] = a[r,c] * b[c] */
/* Bias gradient: y[c] = beta * y[c] + sum_r x[r, c]. */
void rt_sum_rows(int64_t rows, int64_t cols, const float *x, float beta, float *y);
/* Scalars accumulated in double over fixed chunks (thread-count independent). */
double rt_sum(int64_t n, const float *x);
double rt_sumsq(int64_t n, const float *x); /* gradient clipping: sum of squares */

/* ---- activations --------------------------------------------------------------------------- */

/* GELU, tanh form: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). y may alias x. */
void rt_gelu_fwd(int64_t n, const float *x, float *y);
/* dx = dy * gelu'(x). dx may alias dy. */
void rt_gelu_bwd(int64_t n, const float *x, const float *dy, float *dx);
/* SiLU: y = x * sigmoid(x); dx = dy * silu'(x). Aliasing as for GELU. */
void rt_silu_fwd(int64_t n, const float *x, float *y);
void rt_silu_bwd(int64_t n, const float *x, const float *dy, float *dx);
/* SwiGLU product: y = silu(gate) * up; backward dgate = dy * up * silu'(gate), dup = dy * silu(gate).
 * dgate / dup may alias dy. */
void rt_swiglu_fwd(int64_t n, const float *gate, const float *up, float *y);
void rt_swiglu_bwd(int64_t n, const float *gate, const float *up, const float *dy, float *dgate, float *dup);

/* ---- embedding ----------------------------------------------------------------------------- */

/* y[i, :] = table[idx[i], :] for i < n; table is (V, D). An index outside [0, V) gives a zero
 * row (the data loader rejects such tokens before they get here). */
void rt_embed_fwd(int64_t n, int64_t V, int64_t D, const float *table, const int32_t *idx, float *y);
/* dtable[V, D] (+)= scatter-add of dy[i, :] at idx[i]; accumulate 0 zeroes dtable first.
 * Deterministic: threads own column slices, rows are added in order i = 0..n-1. */
void rt_embed_bwd(int64_t n, int64_t V, int64_t D, const int32_t *idx, const float *dy, int accumulate,
                  float *dtable);

/* ---- normalisation ------------------------------------------------------------------------- */

/* LayerNorm over the last dim: y = (x - mean) / sqrt(var + eps) * w + b, biased variance.
 * mean / rstd [rows] are optional outputs (NULL: not written). */
void rt_layernorm_fwd(int64_t rows, int64_t D, float eps, const float *x, const float *w, const float *b,
                      float *y, float *mean, float *rstd);
/* Backward from (x, w, dy) (statistics recomputed): dx [rows, D], dw [D], db [D] (beta 0 writes
 * dw/db, 1 accumulates; dx is always written). dx may alias dy. ws: rt_norm_workspace_bytes. */
size_t rt_norm_workspace_bytes(int64_t rows, int64_t D);
void rt_layernorm_bwd(int64_t rows, int64_t D, float eps, const float *x, const float *w, const float *dy,
                      float *dx, float *dw, float *db, float beta, void *ws);
/* RMSNorm: y = x / sqrt(mean(x^2) + eps) * w; rstd [rows] optional output. */
void rt_rmsnorm_fwd(int64_t rows, int64_t D, float eps, const float *x, const float *w, float *y, float *rstd);
/* Backward: dx, dw (beta as for LayerNorm). dx may alias dy. ws: rt_norm_workspace_bytes. */
void rt_rmsnorm_bwd(int64_t rows, int64_t D, float eps, const float *x, const float *w, const float *dy,
                    float *dx, float *dw, float beta, void *ws);

/* ---- rotary embedding ---------------------------------------------------------------------- */

/* x, y [B, S, H*hd] (hd even): for each head, pairs (i, i + hd/2), i < hd/2, are rotated by
 * angle (s + start) * theta^(-2i/hd) (by its negative when inverse; the inverse is the adjoint,
 * i.e. the backward). y may alias x. ws: rt_rope_workspace_bytes (the cos/sin table, computed
 * in double). */
size_t rt_rope_workspace_bytes(int64_t S, int64_t hd);
void rt_rope(int64_t B, int64_t S, int64_t H, int64_t hd, double theta, int64_t start, int inverse,
             const float *x, float *y, void *ws);
/* The same with row s at position pos[s] + start (rope_at: a zigzag chunk pair's rows). */
void rt_rope_at(int64_t B, int64_t S, int64_t H, int64_t hd, double theta, int64_t start, int inverse,
                const int32_t *pos, const float *x, float *y, void *ws);

/* ---- attention ----------------------------------------------------------------------------- */

/* Scaled dot-product attention, grouped-query: q [B, S, H*hd], k, v [B, T, KV*hd] (H % KV == 0;
 * query head h uses kv head h / (H / KV)), scale 1/sqrt(hd); causal: query s sees keys t <= s.
 * o [B, S, H*hd] = softmax(q k^T * scale + mask) v per head; lse [B, H, S] = log-sum-exp of each
 * scaled score row (-inf for a row that sees no key; its o row is 0). FlashAttention-2's tiling:
 * blocks of RT_ATTN_BLOCK query rows against blocks of RT_ATTN_BLOCK keys with an online softmax,
 * each block product register-blocked (attention.c, attention_tile.c), so a thread holds a
 * 64 x 64 block of scores, never the T x T matrix. No caller workspace: each thread of the
 * parallel region allocates its blocks once (forward about (3 hd + 64) x 64 floats, backward
 * (8 hd + 128) x 64 + S H / KV: 64 KiB and 160 KiB at hd 64). o must not alias q, k, v.
 * hd <= RT_ATTN_MAX_HD (larger aborts with a message). */
#define RT_ATTN_BLOCK 64
#define RT_ATTN_MAX_HD 256
/* The score elements per (batch, head) these kernels compute for S queries against T keys (row
 * indices as positions): S T, or causal, each block of query rows against every key up to its
 * last row's, the diagonal's blocks whole (masked after): 64^2 n (n + 1) / 2 for S = T = 64 n,
 * not S^2 / 2. The CPU cost model's count (passes/cost.c) and bench_calibrate's. */
static inline double rt_attn_scores(int64_t S, int64_t T, int causal) {
  if (!causal) return (double)S * (double)T;
  double n = 0;
  for (int64_t s0 = 0; s0 < S; s0 += RT_ATTN_BLOCK) {
    int64_t rows = S - s0 < RT_ATTN_BLOCK ? S - s0 : RT_ATTN_BLOCK, keys = s0 + rows < T ? s0 + rows : T;
    n += (double)rows * (double)keys;
  }
  return n;
}
void rt_sdpa_fwd(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal, const float *q,
                 const float *k, const float *v, float *o, float *lse);
/* Backward from (q, k, v, o, lse, do) -> dq [B, S, H*hd], dk, dv [B, T, KV*hd] (written, not
 * accumulated). Parallel over (batch, kv head): the thread that owns a kv head also owns the
 * dq of its query heads, so no two threads touch the same output. */
void rt_sdpa_bwd(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal, const float *q,
                 const float *k, const float *v, const float *o, const float *lse, const float *dout, float *dq,
                 float *dk, float *dv);

/* The same on strided operands (a column slice of a wider tensor, memplan's views: q, k, v read out of
 * the fused QKV, dq, dk, dv written into dqkv): each token-major operand's row stride in elements, 0 (or
 * a NULL ld) for contiguous (H*hd for q, o, dout, dq; KV*hd for k, v, dk, dv). */
typedef struct {
  int64_t q, k, v, o, dout, dq, dk, dv;
} RtAttnLd;
void rt_sdpa_fwd_ld(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal, const float *q,
                    const float *k, const float *v, float *o, float *lse, const RtAttnLd *ld);
void rt_sdpa_bwd_ld(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal, const float *q,
                    const float *k, const float *v, const float *o, const float *lse, const float *dout, float *dq,
                    float *dk, float *dv, const RtAttnLd *ld);

/* Ring attention's pieces (context parallelism): attention of q over one block of keys whose
 * global positions are kpos [T], the queries' qpos [S], both strictly increasing (a zigzag chunk
 * pair is); causal: key t is visible to query s when kpos[t] <= qpos[s]. NULL positions are the
 * row indices (rt_sdpa_fwd / bwd). A row that sees no key: o 0, lse -inf. The backward takes o
 * and lse of the whole attention (every block combined) and writes this block's dq, dk, dv. */
void rt_attn_block_fwd(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal,
                       const float *q, const float *k, const float *v, const int32_t *qpos, const int32_t *kpos,
                       float *o, float *lse);
void rt_attn_block_bwd(int64_t B, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal,
                       const float *q, const float *k, const float *v, const float *o, const float *lse,
                       const float *dout, const int32_t *qpos, const int32_t *kpos, float *dq, float *dk, float *dv);
/* Two attentions of the same queries over disjoint keys merged by log-sum-exp: lse = log(e^lse1 +
 * e^lse2), o = e^(lse1 - lse) o1 + e^(lse2 - lse) o2 per head ([B, S, H*hd], lse [B, H, S]); o may
 * alias o1 or o2, lse lse1 or lse2. */
void rt_attn_combine(int64_t B, int64_t S, int64_t H, int64_t hd, const float *o1, const float *lse1,
                     const float *o2, const float *lse2, float *o, float *lse);

/* ---- softmax cross-entropy (fused with its backward) --------------------------------------- */

/* logits [N, V] (V = the padded row length), valid vocab `len` <= V (logits past len ignored),
 * targets [N] (< 0: position ignored). Returns the mean over counted positions of
 * -log softmax(logits[:len])[target] (0 when none counts). When dlogits != NULL it also writes
 * dlogits = dloss * (softmax - onehot) / count, zero past len and on ignored rows; dlogits may
 * alias logits (in place). ws: rt_xent_workspace_bytes. */
size_t rt_xent_workspace_bytes(int64_t N);
float rt_xent_fwd_bwd(int64_t N, int64_t V, int64_t len, const float *logits, const int32_t *targets,
                      float dloss, float *dlogits, void *ws);

/* ---- cross-entropy in parts (vocab-parallel; ops.def CE_*) ---------------------------------- */

/* logits [N, V] are columns [lo, lo + V) of the logical vocabulary; the first nv (0 <= nv <= V)
 * are valid (below the unpadded vocabulary), the rest ignored. targets [N] are logical ids
 * (< 0: row ignored). m [N], st [N, 2] as in ops.def. dlogits may alias logits (in place). */
void rt_ce_max(int64_t N, int64_t V, int64_t nv, const float *logits, float *m); /* -inf when nv == 0 */
void rt_ce_sums(int64_t N, int64_t V, int64_t nv, int64_t lo, const float *logits, const int32_t *targets,
                const float *m, float *st);
/* out[2] = (sum over rows with target >= 0 of log st[r, 0] + m[r] - st[r, 1], their count), summed in
 * row order in double. Returns -1, or the first row whose target is >= len (len > 0) — nothing written. */
int64_t rt_ce_loss(int64_t N, int64_t len, const float *st, const float *m, const int32_t *targets, float *out);
/* dlogits = scale * (exp(l - m) / st[r, 0] - onehot(target - lo)) on valid columns of rows with
 * target >= 0, else 0. */
void rt_ce_grad(int64_t N, int64_t V, int64_t nv, int64_t lo, const float *logits, const int32_t *targets,
                const float *m, const float *st, float scale, float *dlogits);

/* ---- optimizers (in place) ----------------------------------------------------------------- */

/* AdamW (ops.def ADAMW_UPDATE): g' = gscale*g; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
 * p -= lr (m/(1-b1^step) / (sqrt(v/(1-b2^step)) + eps) + wd p). step >= 1. Both optimizers leave
 * p and the state unchanged when gscale is NaN / Inf (a skipped step). */
void rt_adamw(int64_t n, float *p, const float *g, float *m, float *v, float lr, float gscale, double step,
              float beta1, float beta2, float eps, float weight_decay);
/* rt_adamw, and copy = the updated p rounded to bf16 (rt_cvt_f32_bf16's rounding; a skipped step: p's):
 * plan offload's host update writing the weights' bf16 copy it uploads (passes/zero_offload.c). */
void rt_adamw_copy(int64_t n, float *p, const float *g, float *m, float *v, float lr, float gscale, double step,
                   float beta1, float beta2, float eps, float weight_decay, uint16_t *copy);
/* SGD with momentum (ops.def SGD_UPDATE): g' = gscale*g + wd*p; m = momentum*m + g'; p -= lr*m. */
void rt_sgd(int64_t n, float *p, const float *g, float *m, float lr, float gscale, float momentum,
            float weight_decay);

/* ---- bf16 ---------------------------------------------------------------------------------- */

/* fp32 -> bf16 with round-to-nearest-even (NaN stays a quiet NaN); bf16 -> fp32 is exact.
 * Arrays; the scalar forms rt_f32_to_bf16 / rt_bf16_to_f32 live in comm/comm.h. */
void rt_cvt_f32_bf16(int64_t n, const float *x, uint16_t *y);
void rt_cvt_bf16_f32(int64_t n, const uint16_t *x, float *y);

#endif
