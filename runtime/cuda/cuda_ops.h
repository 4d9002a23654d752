/* runtime/cuda/cuda_ops.h — what a trainer generated for `--target cuda` calls.
 *
 * The rank's one allocation `M` (mem_bytes + workspace) lives in GPU memory; every pointer
 * below is a device address inside it. Everything is enqueued, in program order, on the
 * rank's compute stream; nothing here synchronises the host (the trainer does, when it
 * reads a result back). Kernels are the program's own (RtCudaCode: extern "C" k0 .. kN-1,
 * emitted by codegen/cuda_kernels.c with shapes baked in, compiled by NVRTC at start for the
 * GPU found, cubins cached on disk); GEMMs go to cuBLASLt.
 *
 * The same API has a second implementation, the emulated device (SHARDRT_DEVICE=emu): host
 * memory, the program's kernels compiled by the host C++ compiler and run by the CPU
 * emulator of runtime/cuda/kernels/sk_emu.h, GEMMs by the CPU BLAS — so the whole CUDA
 * path runs and is tested on machines without a GPU.
 */
#ifndef SHARDRT_CUDA_OPS_H
#define SHARDRT_CUDA_OPS_H

#include <stdint.h>

#include "program.h"

/* The int at the start of the kernel scratch (M + mem_bytes) collects errors the kernels find
 * (codegen/cuda_kernels.h CUK_WS_FLAGS, CUK_ERR_*): the trainer reads it after every step. */
#define RT_CU_ERR_EMBED_ID 1 /* an embedding id outside its table */
#define RT_CU_ERR_TARGET 2   /* a cross-entropy target outside the vocabulary */

/* Launches kernel k of the program (extern "C" name "k<k>") on the compute stream with the
 * given grid, block and dynamic shared memory (bytes); args[i] points at the i-th argument.
 * A launch error is fatal and names the kernel. */
void rt_cu_launch(RtCtx *ctx, int k, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                  unsigned smem, void **args);

/* A kernel with several tile configurations (the tensor-core attention, codegen/cuda_kernels_attn.c):
 * candidate i is kernel cand[i].k with grid (cand[i].gx, gy, gz) and block (cand[i].bx, 1, 1), tiles
 * cand[i].tiles (its name in the record); cand[0] is the compiled default (the only one compiled
 * unless SHARDRT_ATTN_AUTOTUNE is on). args: nargs pointers (device addresses of bytes[i] bytes), the
 * first nout of them written. key names the kernel and its shapes. With the autotuning on, the first
 * launch of a key outside a graph capture takes the tiles an earlier run on this GPU model and toolkit
 * recorded (when they are a candidate), or checks every candidate against the default (outs) and times
 * those that agree on these operands (an output that overlaps an input goes to scratch), keeps the
 * fastest and records it (runtime/cuda/attn_tune.c). */
typedef struct {
  int k;
  long long gx;
  unsigned bx;
  const char *tiles;
  unsigned smem; /* bytes of dynamic shared memory */
} RtCuTileCand;
/* The candidates the device runs (attn_tune.c): all, less the attention's wgmma ones (tiles "wg..." and "ws...",
 * built for sm_90a only) unless wgmma (RtCuOps.wgmma) and SHARDRT_ATTN_WGMMA is not 0; at most max,
 * into out. Returns how many. */
int rt_cu_tile_avail(const RtCuTileCand *cand, int n, int wgmma, RtCuTileCand *out, int max);
/* What the autotuning's check needs of output i (outs[i], i < nout): before a candidate may be timed,
 * its outputs are compared with the default's on the same operands (runtime/cuda/tune_check.c): dt its
 * element type (RT_*, runtime/dtype.h), terms the fp32 accumulation length of an element, rounds the
 * intermediate values rounded to bf16 on its way. A candidate outside the tolerance is refused. */
typedef struct {
  int dt;
  long long terms;
  int rounds;
  int slice; /* a column slice of a wider tensor (row stride above its width; memplan's strided views): its
              * bytes span its neighbours' columns, so the candidates write a scratch copy, never the tensor */
} RtCuTuneOut;
void rt_cu_launch_tuned(RtCtx *ctx, const char *key, int ncand, const RtCuTileCand *cand, long long gy, long long gz,
                        int nargs, void **args, const long long *bytes, int nout, const RtCuTuneOut *outs);
/* As rt_cu_launch_tuned, with candidates of two launches, where the caller runs its own form of the default
 * (the backward's pair key "flash_bwd", codegen/cuda_kernels_attn.c: candidate 0 the two kernels' compiled
 * defaults, while the caller launches the two kernels' own tuned keys; the others the one-kernel form):
 * candidate i is kernel pre[i].k with grid (pre[i].gx, pre_gy, gz) and block (pre[i].bx, 1, 1), then cand[i]
 * as above, on the same arguments. Returns 0 when the default is chosen (or is the only candidate the
 * device runs), launching nothing; else 1, the chosen candidate launched. The check and the timing run
 * candidate 0 as given (its two launches' times added). */
int rt_cu_launch_tuned_or(RtCtx *ctx, const char *key, int ncand, const RtCuTileCand *cand, const RtCuTileCand *pre,
                          long long pre_gy, long long gy, long long gz, int nargs, void **args, const long long *bytes,
                          int nout, const RtCuTuneOut *outs);

/* y[batch][m, n] = alpha * op(A)[m, k] op(B)[k, n] + beta * y, all row-major (the IR's MATMUL):
 * A is [batch, m, k] ([batch, k, m] when ta), B is [batch?, k, n] ([.., n, k] when tb), with
 * B shared by every batch entry unless b_batched. ab_dt: RT_F32 or RT_BF16 (A and B);
 * y_dt: RT_F32 or RT_BF16; accumulation is fp32 (exact fp32 for f32 inputs, no TF32). */
void rt_cu_matmul(RtCtx *ctx, void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t batch, int64_t m,
                  int64_t n, int64_t k, int ta, int tb, int b_batched, float alpha, float beta);

/* Two sibling GEMMs that share A (passes/hfuse.c): y0 = op(A) op(b0) and y1 = op(A) op(b1), each [m, n]
 * from [m, k] (no batch), as one strided-batched cuBLASLt GEMM (B's and y's strides: the pointers'
 * distances, A's 0) where both distances point the same way (the pass checks that the plan makes them
 * so); otherwise as two GEMMs (the same numbers: each y is the GEMM's own). */
void rt_cu_matmul_pair(RtCtx *ctx, void *y0, void *y1, int y_dt, const void *a, const void *b0, const void *b1, int ab_dt,
                       int64_t m, int64_t n, int64_t k, int ta, int tb);

/* One GEMM with a cuBLASLt epilogue (passes/epilogue.c): with acc = op(A)[m, k] op(B)[k, n] in
 * fp32 and t = acc + bias[j] (bias: [n]; NULL: t = acc, only with c: the residual alone, cuBLASLt's
 * epilogue DEFAULT with C and beta 1), per element
 *   aux != NULL: aux[i, j] = t and y[i, j] = gelu(t) (tanh form; aux is the pre-activation the
 *                GELU backward reads);
 *   c != NULL:   y[i, j] = c[i, j] + t (a residual; c may be y itself);
 *   else         y[i, j] = t.
 * bias, c and aux have y's dtype; t is rounded once, when stored. Returns 1; 0 when the device has
 * no algorithm for this epilogue (cuBLASLt's heuristic found none; nothing was done, and the
 * first time for `where` and this epilogue a note said so): the caller then runs the plain GEMM
 * and the nodes the epilogue stands for. `where` names the GEMM (the source line). */
int rt_cu_matmul_ep(RtCtx *ctx, const char *where, void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t m, int64_t n,
                     int64_t k, int ta, int tb, const void *bias, const void *c, void *aux);

/* What rt_cu_matmul_ep / rt_cu_matmul_dgelu did. */
enum {
  RT_CU_EP_NONE = 0,     /* nothing: no algorithm for the epilogue (the caller runs the plain GEMM and the nodes) */
  RT_CU_EP_ALL = 1,      /* everything asked */
  RT_CU_EP_NO_BGRAD = 2, /* rt_cu_matmul_dgelu: y, not the bias gradient (the caller sums y's columns) */
};

/* One GEMM with cuBLASLt's DGELU epilogue (passes/epilogue.c), GELU's backward: with acc as above,
 * y[i, j] = gelu'(pre[i, j]) * acc (pre: the forward's pre-activation, y's dtype); and unless dbias
 * is NULL, dbias[j] = the sum over i of y[i, j] (the bias gradient). Returns RT_CU_EP_ALL when it
 * did both, RT_CU_EP_NO_BGRAD when it computed y only and left the bias gradient to the caller (the
 * default where cuBLASLt's DGELU_BGRAD is slower than a column reduction: SHARDRT_GEMM_BGRAD, ops.c),
 * RT_CU_EP_NONE (nothing, after a note) when the device has no algorithm for DGELU(_BGRAD). */
int rt_cu_matmul_dgelu(RtCtx *ctx, const char *where, void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t m, int64_t n,
                        int64_t k, int ta, int tb, const void *pre, void *dbias);

/* Device-to-device copies and fills on the compute stream. */
void rt_cu_copy(RtCtx *ctx, void *dst, const void *src, int64_t bytes);
void rt_cu_zero(RtCtx *ctx, void *dst, int64_t bytes);
/* rt_copy_block on the device: for o < outer, copies len * inner elements of es bytes from
 * src + (o * src_dim + src_at) * inner * es to dst + (o * dst_dim + dst_at) * inner * es. */
void rt_cu_copy_block(RtCtx *ctx, void *dst, int64_t dst_dim, int64_t dst_at, const void *src, int64_t src_dim,
                      int64_t src_at, int64_t outer, int64_t len, int64_t inner, int es);
/* Plan offload (codegen's to_host / to_device, where passes/offload_sched.c puts them): copies
 * between the device and the program's host allocation (RtProgram.host_bytes, rt_ctx_host_mem,
 * pinned) on a copy stream beside the compute stream. A copy starts after the device work enqueued
 * before the call and ends its slot (an event: the program numbers them); rt_cu_host_wait returns
 * once the slot's copies are done (the host may read a download's bytes), rt_cu_device_wait orders
 * the compute stream after them (an upload's readers) without blocking the host.
 * SHARDRT_OFFLOAD_SYNC=1 makes every copy synchronous where it starts (no overlap). */
void rt_cu_to_host_start(RtCtx *ctx, void *host_dst, const void *src, int64_t bytes, int slot);
void rt_cu_to_device_start(RtCtx *ctx, void *dst, const void *host_src, int64_t bytes, int slot);
void rt_cu_host_wait(RtCtx *ctx, int slot);
void rt_cu_device_wait(RtCtx *ctx, int slot);
/* Writes a host value to the device (AXIS_INDEX, small constants); enqueued like the rest. */
void rt_cu_put(RtCtx *ctx, void *dst, const void *host_src, int64_t bytes);

#endif
