/* codegen/cuda_kernels.h — the CUDA kernels of a program: one emitter per kernel family.
 *
 * Each emitter appends one kernel to the program's CUDA source — `extern "C" __global__ kN`,
 * N its index (0, 1, ...), a thin wrapper over a template of runtime/cuda/kernels/shardk.cuh
 * with every shape baked in as a compile-time constant — and returns the host C statement
 * (one line, ending in ';') that launches it on the rank's compute stream: a call of
 * rt_cu_launch (runtime/cuda/cuda_ops.h) with the grid and block its template expects.
 * Pointer arguments are host C expressions for device addresses (their C type is char *),
 * e.g. "(M + 4096 + i0 * 1024)"; the returned statement may use `ctx` and `WS` (the start of
 * the kernel scratch, see cuk_workspace). DTypes: DT_F32 or DT_BF16 for float tensors (the
 * math is fp32 inside every kernel; bf16 is only storage), DT_I32 for ids/targets.
 *
 * Semantics are the IR's (ir/ops.def); shapes as the CPU prims (runtime/ops/prims.h).
 * Kernels that reduce over rows (norm weight gradients, sums) are deterministic: no
 * floating-point atomics, the same bits run to run.
 */
#ifndef SHARDC_CUDA_KERNELS_H
#define SHARDC_CUDA_KERNELS_H

#include <stdint.h>

#include "arena.h"
#include "ir.h"

typedef struct CuK CuK;

CuK *cuk_new(Arena *a);
/* The CUDA source so far: `#include "shardk.cuh"` and the kernels k0 .. k{count-1}. */
const char *cuk_source(const CuK *k);
int cuk_count(const CuK *k);
/* Bytes of scratch (at WS) the emitted launches need: the max over them. */
int64_t cuk_workspace(const CuK *k);
/* The first CUK_WS_FLAGS bytes of WS are the device error flag: an int at WS + 0, 0 while all
 * is well, else CUK_ERR_* (set by the kernels; the runtime reads it back, reports, and clears
 * it; it must be 0 at start). Kernels' own scratch starts at WS + CUK_WS_FLAGS. A launch
 * statement may hold several rt_cu_launch calls on its one line (two-pass reductions). */
#define CUK_WS_FLAGS 256
/* Ints at WS + CUK_WS_COUNTERS up to WS + CUK_WS_FLAGS: the arrival counters of the reductions done in one launch
 * (shardk.cuh tree_sum): 0 at start and between kernels (the last block to arrive at one resets it); kernels run one
 * at a time on the stream, so each may use them all. */
#define CUK_WS_COUNTERS 64
#define CUK_MAX_COUNTERS ((CUK_WS_FLAGS - CUK_WS_COUNTERS) / 4)
#define CUK_ERR_EMBED_ID 1 /* an embedding id outside [0, V) (unsharded embed) */
#define CUK_ERR_TARGET 2   /* a cross-entropy target >= len */

/* The bytes-bound kernels' variants, for the kernel benchmark to time side by side (cuda_kernels_gpu with
 * SHARDK_BYTES_SWEEP=1; every variant is checked by cuda_kernels_emu): CUK_VAR_DEFAULT is what the compiler emits;
 * CUK_VAR_MAIN the kernels before the one-launch rewrite (issue 17: reduce_to's colsum in two launches; RMSNorm's
 * forward by blocks; rope a thread per angle). The norms' backward is one form in both: the ring with a colsum launch
 * for dw / db (CUK_VAR_TWO_LAUNCH, its dw / db in a second launch, beat the in-kernel tree and CUK_VAR_MAIN's block per
 * row / layernorm_bwd_vec at every shape on the H100 of 2026-11-27; both losers deleted).
 * CUK_VAR_ONE: the kernels still below 60 % there, rebuilt (codegen/cuda_kernels_bytes.c, built and checked, not yet
 * timed): the embedding backward in one launch without a sort, column sums with one level of arrivals, the embedding
 * forward and the transpose in 16-byte vectors; every other kernel as the default. */
enum { CUK_VAR_DEFAULT, CUK_VAR_MAIN, CUK_VAR_ONE, CUK_NVARIANTS };
extern const char *const cuk_variant_names[CUK_NVARIANTS];
/* The variant of the kernels k emits from now on. */
void cuk_set_variant(CuK *k, int v);
/* The grid y the kernels that loop over their row tiles launch with at most (default and at most 65535, CUDA's
 * limit: the transposes); a test's smaller one runs those loops at small sizes. */
void cuk_set_grid_y_max(CuK *k, int64_t n);

/* ---- fused elementwise chains ----
 * One kernel computes a chain of elementwise ops at every index of `shape` (numpy
 * broadcasting of smaller inputs) and stores the ops named in out[]; intermediates stay
 * in registers. Ops: the F_EW ops of ir/ops.def (ADD .. SILU_BWD, CAST) and OP_CONST (no
 * operands, value `scalar`). Each op's result has dtype `dt` (rounded to it when bf16). */
#define CUK_MAX_EW 32
typedef struct {
  OpKind op;
  int in[2];     /* operands: >= 0 an earlier op of the chain, < 0 the chain input -1 - in[i] */
  double scalar; /* SCALE, ADD_SCALAR, CONST */
  DType dt;      /* its result's dtype */
} CuEwOp;
typedef struct {
  const char *ptr; /* device address */
  DType dt;
  Shape shape;     /* broadcasts to the chain's shape */
} CuEwIn;
typedef struct {
  Shape shape;                      /* the index space: every output has this shape */
  int nin, nops, nout;
  CuEwIn in[CUK_MAX_EW];
  CuEwOp ops[CUK_MAX_EW];
  int out_op[CUK_MAX_EW];           /* the op each output stores */
  const char *out_ptr[CUK_MAX_EW];  /* where (device address); dtype: that op's dt */
} CuEwChain;
const char *cuk_elementwise(CuK *k, const CuEwChain *c);

/* ---- data movement ---- */
const char *cuk_iota(CuK *k, const char *y, int64_t n, int64_t start);                     /* i32 */
/* y[b, c, r] = x[b, r, c] for b < batch, x [batch, rows, cols]. */
const char *cuk_transpose(CuK *k, const char *y, const char *x, DType dt, int64_t batch, int64_t rows, int64_t cols);
/* REDUCE_SUM: y (shape ys) = x (shape xs) summed over its broadcast dims (fp32 accumulation). */
const char *cuk_reduce_to(CuK *k, const char *y, DType ydt, const Shape *ys, const char *x, DType xdt, const Shape *xs);

/* ---- embeddings: table [V, d] holds logical rows [row0, row0 + V) (row0: a host C int64
 * expression, "0" unless vocab-parallel); ids outside give zero rows (sharded) — with
 * row0 "0" and sharded 0, ids outside [0, V) are a device-side error flag in WS ---- */
const char *cuk_embed(CuK *k, const char *y, DType ydt, const char *table, DType tdt, const char *idx, int64_t n,
                      int64_t d, int64_t V, const char *row0);
/* dtable = 0, then dtable[id - row0] += dy[i] for ids in range (deterministic). */
const char *cuk_embed_bwd(CuK *k, const char *dtable, DType tdt, const char *idx, const char *dy, DType dydt,
                          int64_t n, int64_t d, int64_t V, const char *row0);

/* ---- norms over the last dim d of [rows, d]; w, b: [d] ---- */
const char *cuk_layernorm(CuK *k, const char *y, const char *x, DType xdt, const char *w, const char *b, DType wdt,
                          int64_t rows, int64_t d, double eps);
const char *cuk_layernorm_bwd(CuK *k, const char *dx, const char *res, const char *dw, const char *db, const char *x,
                              DType xdt, const char *w, DType wdt, const char *dy, int64_t rows, int64_t d, double eps);
const char *cuk_rmsnorm(CuK *k, const char *y, const char *x, DType xdt, const char *w, DType wdt, int64_t rows,
                        int64_t d, double eps);
const char *cuk_rmsnorm_bwd(CuK *k, const char *dx, const char *res, const char *dw, const char *x, DType xdt,
                            const char *w, DType wdt, const char *dy, int64_t rows, int64_t d, double eps);
/* dx, dw, db take the dtypes of x, w, w; dy that of x. res: NULL, or the residual gradient's carry (x's dtype and
 * shape) the kernel adds to dx as it stores it, with the bits of dx stored and then added (passes/fuse_normres.c,
 * shardk_norm.cuh with_res); dx may be res's very
 * tensor, but meets none of x, w, dy. */

/* ---- rotary embedding, x/y [B, S, H*hd] ---- */
const char *cuk_rope(CuK *k, const char *y, const char *x, DType dt, int64_t B, int64_t S, int64_t H, int64_t hd,
                     double theta, int64_t start, int inverse);
/* rope_at: row s at position pos[s] + start (pos: int32 [S], a zigzag chunk pair's positions) */
const char *cuk_rope_at(CuK *k, const char *y, const char *x, const char *pos, DType dt, int64_t B, int64_t S,
                        int64_t H, int64_t hd, double theta, int64_t start, int inverse);

/* ---- attention (flash-style: online softmax, never the [S, S] scores in memory) ----
 * q/o [B, S, H*hd], k/v [B, S, KV*hd], lse f32 [B, H, S]; dq/dk/dv like q/k/v. Each token-major operand
 * may be a column slice of a wider tensor (memplan's strided views: q, k, v read out of the fused QKV,
 * dq, dk, dv written into dqkv): ld gives its row stride in elements (0 or a NULL ld: contiguous, H*hd
 * or KV*hd); the tensor-core kernels want it a multiple of 8 (ir_row_stride_ok). */
typedef struct {
  int64_t q, k, v, o, dout, dq, dk, dv;
} CuAttnLd;
const char *cuk_sdpa(CuK *k, const char *o, const char *lse, const char *q, const char *kk, const char *v, DType dt,
                     int64_t B, int64_t S, int64_t H, int64_t KV, int64_t hd, int causal, const CuAttnLd *ld);
const char *cuk_sdpa_bwd(CuK *k, const char *dq, const char *dk, const char *dv, const char *q, const char *kk,
                         const char *v, const char *o, const char *lse, const char *dout, DType dt, int64_t B,
                         int64_t S, int64_t H, int64_t KV, int64_t hd, int causal, const CuAttnLd *ld);
/* The tensor-core attention's tiles (bf16, hd a multiple of 16 up to 128; runtime/cuda/kernels/shardk_flash.cuh):
 * per kernel, mt m-tiles of 16 rows per warp (queries; keys in dK/dV), w warps per block (16 mt w rows)
 * and bt rows of the tile streamed through shared memory (keys; queries in dK/dV). */
typedef struct {
  int mt, w, bt;
  int minb; /* blocks per SM asked of ptxas (__launch_bounds__' second argument: fewer registers), 0: none */
  int rs;   /* 1: the warps' own rows (Q; Q and dO in dQ; K and V in dK/dV) in shared memory, not registers */
} CuFlashTile;
typedef struct {
  CuFlashTile fwd, kv, q; /* forward, dK/dV, dQ */
} CuFlashCfg;
/* The configuration the compiler emits for head dim hd (codegen/cuda_flash_cfg.c: the one place to
 * change after a measurement). */
CuFlashCfg cuk_flash_cfg(int64_t hd);
/* The candidates for head dim hd, the first being cuk_flash_cfg(hd): swept by the kernel benchmark
 * (SHARDK_ATTN_SWEEP=1) and each checked by cuda_kernels_emu. Returns how many (at most max). */
int cuk_flash_variants(int64_t hd, CuFlashCfg *v, int max);
/* The bytes of dynamic shared memory kernel `which` (0 forward, 1 dK/dV, 2 dQ) in tiles t takes at head
 * dim hd (runtime/cuda/kernels/shardk_flash_smem.cuh: the kernels' layout), what its launch gives. */
int64_t cuk_flash_smem(int which, int64_t hd, const CuFlashTile *t);
/* The tiles of the tensor-core attentions k emits from now on (NULL: cuk_flash_cfg). */
void cuk_set_flash_cfg(CuK *k, const CuFlashCfg *c);
/* The attention forward on Hopper's warpgroup MMA (runtime/cuda/kernels/shardk_wgmma.cuh; bf16, hd 64
 * or 128; built for sm_90a only, a trap elsewhere): bk keys a streamed tile, nwg warpgroups of 64 query
 * rows a block, pipe: the pipelined order. cuk_wg_variants: the candidates for hd (codegen/cuda_wgmma_cfg.c; 0 for other head
 * dims); cuk_wg_smem: the bytes of dynamic shared memory a tile needs; cuk_set_flash_wg: the forward of
 * every attention k emits from now on that it can take runs it (NULL: the mma.sync kernels). */
typedef struct {
  int bk, nwg;
  int pipe; /* 1: FlashAttention-3's order inside a warpgroup (tile j's S and softmax under tile j - 1's P V) */
  int ws;   /* > 0: warp-specialized (shardk_wgmma_ws.cuh flash_fwd_ws): a producer warpgroup more, nwg consumer
             * warpgroups in ping-pong (the pipelined order each), a ring of ws stages of K and V */
} CuWgTile;
int cuk_wg_variants(int64_t hd, CuWgTile *v, int max);
int64_t cuk_wg_smem(int64_t hd, const CuWgTile *t);
/* its threads a block (128 a warpgroup, the producer's too), and its name in the autotuning's candidates and
 * reports: "wg<bk>x<nwg>" ("p" after it: pipelined) or "ws<bk>x<nwg>x<stages>" */
int cuk_wg_threads(const CuWgTile *t);
const char *cuk_wg_tag(const CuWgTile *t, char *buf, size_t n);
void cuk_set_flash_wg(CuK *k, const CuWgTile *t);
/* The attention backward on wgmma (runtime/cuda/kernels/shardk_wgmma_bwd.cuh; bf16, hd 64 or 128; sm_90a
 * only): kernel `which` (1 dK/dV, 2 dQ) with nwg warpgroups of 64 rows a block (keys in dK/dV, queries in
 * dQ) and bt rows a streamed tile (queries in dK/dV, keys in dQ). cuk_wg_bwd_variants: the candidates
 * (codegen/cuda_wgmma_cfg.c; 0 for other head dims), each emitted with the autotuning as a "wg<bt>x<nwg>"
 * candidate of its kernel ("p" at the end when pipelined); cuk_wg_bwd_smem: their dynamic shared memory;
 * cuk_set_flash_wg_bwd: the dK/dV (kv) and dQ (q) kernels of every attention backward k emits from now on
 * that can take them (NULL: the mma.sync kernel). */
typedef struct {
  int bt, nwg;
  int pipe; /* 1: tile j's S^T and dP^T (dQ: S and dP) issued with tile j - 1's dV and dK (dQ) products */
} CuWgBwdTile;
int cuk_wg_bwd_variants(int which, int64_t hd, CuWgBwdTile *v, int max);
int64_t cuk_wg_bwd_smem(int which, int64_t hd, const CuWgBwdTile *t);
void cuk_set_flash_wg_bwd(CuK *k, const CuWgBwdTile *kv, const CuWgBwdTile *q);
/* The attention backward in one kernel on wgmma (runtime/cuda/kernels/shardk_wgmma_bwd1.cuh; bf16, hd 64 or
 * 128; sm_90a only): flash_bwd_kv_wg's blocks of nwg warpgroups (bt 64 queries a streamed tile) also add dQ
 * into an f32 accumulator in the workspace, in a fixed order, after a small kernel of D = rowsum(dO o O).
 * cuk_wg_bwd1_variants: its candidates (codegen/cuda_wgmma_cfg.c), with the autotuning the "wgf<bt>x<nwg>"
 * candidates of the backward's pair key "flash_bwd" (beside the two kernels, cuda_kernels_attn.c);
 * cuk_wg_bwd1_smem: their dynamic shared memory; cuk_set_flash_wg_bwd1: every attention backward k emits
 * from now on that can take it runs it (NULL: the two kernels). */
int cuk_wg_bwd1_variants(int64_t hd, CuWgBwdTile *v, int max);
int64_t cuk_wg_bwd1_smem(int64_t hd, const CuWgBwdTile *t);
void cuk_set_flash_wg_bwd1(CuK *k, const CuWgBwdTile *t);
/* Its workspace after D's B H S floats: the f32 dQ accumulator [B, S, H, hd] at WS + *acc and *ncnt int
 * counters at WS + *cnt (0 between calls: the last contributor of each sets it back); returns the bytes
 * of scratch (after the flags) the backward needs with it. */
int64_t cuk_bwd1_ws(int64_t B, int64_t S, int64_t H, int64_t hd, int64_t *acc, int64_t *cnt, int64_t *ncnt);
/* on: with cuk_flash_cfg's tiles (no cuk_set_flash_cfg), each tensor-core attention kernel is also
 * emitted in the other tiles of cuk_flash_variants (each inside `#ifdef SK_ATTN_TUNE`: compiled only
 * when the runtime autotunes them) and launched by rt_cu_launch_tuned (runtime/cuda/cuda_ops.h), which
 * picks the fastest at its first call. Off (the default): one kernel, rt_cu_launch. */
void cuk_set_attn_tune(CuK *k, int on);
/* What the autotuning's check (runtime/cuda/tune_check.c) is told of the two outputs of the tensor-core
 * attention kernel `which` (0 forward: o, lse; 1 dK/dV: dk, dv; 2 dQ: dq, D): each one's fp32
 * accumulation length (terms) and values rounded to bf16 on the way (rounds). The one place these are
 * decided: the emitted launches carry them (RtCuTuneOut), tests/cuda's variant cases use them. */
void cuk_flash_check(int which, int64_t S, int64_t H, int64_t KV, int64_t hd, long long terms[2], int rounds[2]);
/* Ring attention's pieces (context parallelism, ops.def ATTN_BLOCK, ATTN_BLOCK_BWD, ATTN_COMBINE):
 * q over a block of T keys (k/v [B, T, KV*hd]) whose rows' global positions are qpos int32 [S] and
 * kpos int32 [T] (causal: key j visible to query i when kpos[j] <= qpos[i]); a row that sees no key
 * gets o 0, lse -inf; the backward takes the whole attention's o and lse. On the kernels the whole
 * sequence's attention would take (ir_attn_flash): the tensor-core ones of shardk_flash.cuh at positions
 * (the compiled tiles, never wgmma) in bf16 at their head dims, else the CUDA-core ones (shardk_attn.cuh).
 * The combine merges two (o, lse) by log-sum-exp (o may alias o1 or o2, lse lse1 or lse2). */
typedef struct {
  int64_t T;              /* keys */
  const char *qpos, *kpos; /* device addresses of the positions */
} CuAttnKeys;
const char *cuk_attn_block(CuK *k, const char *o, const char *lse, const char *q, const char *kk, const char *v,
                           DType dt, int64_t B, int64_t S, const CuAttnKeys *ks, int64_t H, int64_t KV, int64_t hd,
                           int causal);
const char *cuk_attn_block_bwd(CuK *k, const char *dq, const char *dk, const char *dv, const char *q, const char *kk,
                               const char *v, const char *o, const char *lse, const char *dout, DType dt, int64_t B,
                               int64_t S, const CuAttnKeys *ks, int64_t H, int64_t KV, int64_t hd, int causal);
const char *cuk_attn_combine(CuK *k, const char *o, const char *lse, const char *o1, const char *lse1, const char *o2,
                             const char *lse2, DType dt, int64_t B, int64_t S, int64_t H, int64_t hd);

/* ---- cross-entropy over logits [n, V] (len: valid columns, 0 = all); loss, dloss: f32 scalars ---- */
const char *cuk_cross_entropy(CuK *k, const char *loss, const char *logits, DType ldt, const char *targets, int64_t n,
                              int64_t V, int64_t len);
const char *cuk_cross_entropy_bwd(CuK *k, const char *dlogits, const char *logits, DType ldt, const char *targets,
                                  const char *dloss, int64_t n, int64_t V, int64_t len);
/* Both in one pass over the logits (passes/fuse_ce.c): the loss and dlogits (which may be logits). */
const char *cuk_cross_entropy_fused(CuK *k, const char *loss, const char *dlogits, const char *logits, DType ldt,
                                    const char *targets, const char *dloss, int64_t n, int64_t V, int64_t len);
/* The vocab-parallel parts (ops.def CE_MAX .. CE_GRAD); col0: host C int64 expression, the
 * logical column of local column 0 ("0" when not sharded). m, st, out: f32. */
const char *cuk_ce_max(CuK *k, const char *m, const char *logits, DType ldt, int64_t n, int64_t V, int64_t len,
                       const char *col0);
const char *cuk_ce_sums(CuK *k, const char *st, const char *logits, DType ldt, const char *targets, const char *m,
                        int64_t n, int64_t V, int64_t len, const char *col0);
const char *cuk_ce_loss(CuK *k, const char *out, const char *st, const char *m, const char *targets, int64_t n,
                        int64_t len);
const char *cuk_ce_grad(CuK *k, const char *dlogits, const char *logits, DType ldt, const char *targets, const char *m,
                        const char *st, const char *scale, int64_t n, int64_t V, int64_t len, const char *col0);

/* ---- reductions to an f32 scalar (deterministic) ---- */
const char *cuk_sum(CuK *k, const char *y, const char *x, DType xdt, int64_t n);
const char *cuk_mean(CuK *k, const char *y, const char *x, DType xdt, int64_t n);
const char *cuk_sumsq(CuK *k, const char *y, const char *x, DType xdt, int64_t n);
/* Many sums of squares in one launch (the gradient clip's, passes/fuse_sumsq.c): y[in[i].at] (f32) = the sum of
 * squares of in[i].x (n elements of xdt, f32 or bf16, widened to f32), each the bits cuk_sumsq writes (the same
 * chunks and orders); one launch per CUK_SUMSQ_MULTI tensors (the arrival counters: one a tensor). */
#define CUK_SUMSQ_MULTI 32
/* The most arguments a kernel of these emitters takes, all its launches passing the pointers first, then the int64s:
 * pointers, an elementwise chain's inputs and outputs (CUK_MAX_EW each) or cuk_sumsq_multi's y, parts, counters and
 * CUK_SUMSQ_MULTI tensors; int64s, 4. CUDA takes a kernel's parameters in a 4 KiB constant bank (every architecture
 * and toolkit; 32 KiB from Volta with CUDA 12.1): 544 bytes of it; the emulator (sk_emu.h) has no limit. */
#define CUK_MAX_PTR_ARGS (2 * CUK_MAX_EW > 3 + CUK_SUMSQ_MULTI ? 2 * CUK_MAX_EW : 3 + CUK_SUMSQ_MULTI)
#define CUK_MAX_INT_ARGS 4
#define CUK_MAX_ARGS (CUK_MAX_PTR_ARGS + CUK_MAX_INT_ARGS)
_Static_assert(CUK_MAX_ARGS * 8 <= 4096, "a kernel's parameters fit CUDA's 4 KiB");
typedef struct {
  const char *x; /* device address */
  DType xdt;
  int64_t n;  /* elements */
  int64_t at; /* the element of y written */
} CuSumsqIn;
const char *cuk_sumsq_multi(CuK *k, const char *y, int n, const CuSumsqIn *in);

/* ---- optimizer updates, in place (p, m, v updated where they are; hyper: f32 device
 * array as in ops.def); p f32 master weights, g of gdt, moments f32; copy (NULL: none): where
 * the update also stores the updated p rounded to bf16 (the persistent copy, passes/wshadow.c; left
 * as it is by a skipped step, as p is) ---- */
const char *cuk_adamw(CuK *k, const char *p, const char *g, DType gdt, const char *m, const char *v,
                      const char *hyper, int64_t n, double beta1, double beta2, double eps, double wd, const char *copy);
const char *cuk_sgd(CuK *k, const char *p, const char *g, DType gdt, const char *m, const char *hyper, int64_t n,
                    double momentum, double wd, const char *copy);

#endif
