/* runtime/cuda/ops.c — rt_cu_* (cuda_ops.h): dispatch to the rank's device backend, and the CUDA
 * backend's launches, copies and fills on its compute stream. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/bootstrap.h"
#include "cu_cuda.h"
#include "cuda/cuda_ops.h"
#include "dtype.h"

/* ---- the API the generated code calls ---- */

void rt_cu_launch(RtCtx *ctx, int k, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                  unsigned smem, void **args) {
  RtCuDev *d = rt_cu_dev(ctx);
  const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  if ((uint64_t)gx * gy * gz == 0 || (uint64_t)bx * by * bz == 0) return; /* nothing to run */
  d->ops->launch(d->be, k, grid, block, smem, args);
}

void rt_cu_matmul(RtCtx *ctx, void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t batch, int64_t m,
                  int64_t n, int64_t k, int ta, int tb, int b_batched, float alpha, float beta) {
  RtCuDev *d = rt_cu_dev(ctx);
  if ((ab_dt != RT_F32 && ab_dt != RT_BF16) || (y_dt != RT_F32 && y_dt != RT_BF16))
    rt_fatal(1, "rt_cu_matmul: dtypes %d x %d -> %d: only f32 and bf16 are supported", ab_dt, ab_dt, y_dt);
  size_t ys = y_dt == RT_BF16 ? 2 : 4, es = ab_dt == RT_BF16 ? 2 : 4;
  if ((uintptr_t)y % ys || (uintptr_t)a % es || (uintptr_t)b % es) /* a GPU faults on these; say which */
    rt_fatal(1, "rt_cu_matmul: a pointer is not aligned to its element (y %p of %zu bytes, a %p and b %p of %zu)", y, ys,
             a, b, es);
  if (batch <= 0 || m <= 0 || n <= 0) return;
  if (k <= 0) { /* an empty sum: y = beta * y (cuBLASLt takes no k = 0) */
    if (beta == 0.0f)
      d->ops->zero(d->be, y, batch * m * n * (y_dt == RT_BF16 ? 2 : 4));
    else if (beta != 1.0f)
      rt_fatal(1, "rt_cu_matmul: k = 0 with beta %g is not supported", (double)beta);
    return;
  }
  (void)d->ops->matmul(d->be, y, y_dt, a, b, ab_dt, batch, m, n, k, ta, tb, b_batched, alpha, beta, NULL);
}

void rt_cu_matmul_pair(RtCtx *ctx, void *y0, void *y1, int y_dt, const void *a, const void *b0, const void *b1, int ab_dt,
                       int64_t m, int64_t n, int64_t k, int ta, int tb) {
  RtCuDev *d = rt_cu_dev(ctx);
  size_t ys = y_dt == RT_BF16 ? 2 : 4, es = ab_dt == RT_BF16 ? 2 : 4;
  ptrdiff_t db = (const char *)b1 - (const char *)b0, dy = (char *)y1 - (char *)y0;
  if (d->ops->matmul_pair && m > 0 && n > 0 && k > 0 && db % (ptrdiff_t)es == 0 && dy % (ptrdiff_t)ys == 0 &&
      (db > 0) == (dy > 0) && db != 0 && dy != 0 && (uintptr_t)y0 % ys == 0 && (uintptr_t)y1 % ys == 0 &&
      (uintptr_t)a % es == 0 && (uintptr_t)b0 % es == 0 && (uintptr_t)b1 % es == 0 &&
      (ab_dt == RT_F32 || ab_dt == RT_BF16) && (y_dt == RT_F32 || y_dt == RT_BF16)) {
    int none = db > 0 ? d->ops->matmul_pair(d->be, y0, y_dt, a, b0, ab_dt, m, n, k, ta, tb, db / (ptrdiff_t)es, dy / (ptrdiff_t)ys)
                      : d->ops->matmul_pair(d->be, y1, y_dt, a, b1, ab_dt, m, n, k, ta, tb, -db / (ptrdiff_t)es, -dy / (ptrdiff_t)ys);
    if (!none) return;
  }
  /* strides one batched GEMM cannot take (opposite directions: passes/hfuse.c pairs none such), or no algorithm for
   * the batch (cuBLASLt's heuristic found none): two GEMMs */
  rt_cu_matmul(ctx, y0, y_dt, a, b0, ab_dt, 1, m, n, k, ta, tb, 0, 1.0f, 0.0f);
  rt_cu_matmul(ctx, y1, y_dt, a, b1, ab_dt, 1, m, n, k, ta, tb, 0, 1.0f, 0.0f);
}

/* An epilogue GEMM through the backend: 1 when it ran; 0 when the backend has no algorithm for the
 * epilogue (nothing done). */
static int epi_ran(RtCuDev *d, void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t m, int64_t n,
                   int64_t k, int ta, int tb, const RtCuEpi *ep) {
  return !d->ops->matmul(d->be, y, y_dt, a, b, ab_dt, 1, m, n, k, ta, tb, 1, 1.0f, 0.0f, ep);
}

/* The note, once for this GEMM (where) and epilogue, that the device had no algorithm for epi and
 * what runs instead. */
static void epi_note(RtCtx *ctx, RtCuDev *d, const char *where, int64_t m, int64_t n, int64_t k, int ta, int tb,
                     int ab_dt, const char *epi, const char *instead) {
  if (!where) where = "(unnamed)";
  enum { NOTED_MAX = 256 };
  static struct { const char *where, *epi; } noted[NOTED_MAX];
  static int nnoted;
  for (int i = 0; i < nnoted; i++)
    if (strcmp(noted[i].where, where) == 0 && strcmp(noted[i].epi, epi) == 0) return;
  if (nnoted < NOTED_MAX) noted[nnoted++].where = where, noted[nnoted - 1].epi = epi;
  fprintf(stderr,
          "note: rank %d: %s has no algorithm for the GEMM at %s (m %lld, n %lld, k %lld, ta %d, tb %d, %s) with "
          "epilogue %s; it runs as %s\n",
          ctx->rank, d->ops->name[0] == 'c' ? "cuBLASLt" : "the emulated device", where, (long long)m, (long long)n,
          (long long)k, ta, tb, ab_dt == RT_BF16 ? "bf16" : "f32", epi, instead);
}

static int matmul_epi(RtCtx *ctx, RtCuDev *d, const char *where, void *y, int y_dt, const void *a, const void *b,
                      int ab_dt, int64_t m, int64_t n, int64_t k, int ta, int tb, const RtCuEpi *ep) {
  if (epi_ran(d, y, y_dt, a, b, ab_dt, m, n, k, ta, tb, ep)) return 1;
  epi_note(ctx, d, where, m, n, k, ta, tb, ab_dt, rt_cu_epi_name(ep), "the plain GEMM and the elementwise kernels");
  return 0;
}

/* SHARDRT_GEMM_BGRAD: 1 for "fused" (cuBLASLt's DGELU_BGRAD first), 0 for "split" (the default:
 * DGELU first, the caller's column reduction for the bias gradient). */
static int bgrad_fused(void) {
  const char *v = getenv("SHARDRT_GEMM_BGRAD");
  if (!v || !*v || strcmp(v, "split") == 0) return 0;
  if (strcmp(v, "fused") == 0) return 1;
  rt_fatal(1, "SHARDRT_GEMM_BGRAD=%s: want split (GELU's backward in the GEMM, the bias gradient by the program's "
           "column reduction: the default) or fused (cuBLASLt's DGELU_BGRAD)", v);
}

int rt_cu_matmul_ep(RtCtx *ctx, const char *where, void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t m, int64_t n,
                     int64_t k, int ta, int tb, const void *bias, const void *c, void *aux) {
  RtCuDev *d = rt_cu_dev(ctx);
  if ((ab_dt != RT_F32 && ab_dt != RT_BF16) || (y_dt != RT_F32 && y_dt != RT_BF16))
    rt_fatal(1, "rt_cu_matmul_ep: dtypes %d x %d -> %d: only f32 and bf16 are supported", ab_dt, ab_dt, y_dt);
  size_t ys = y_dt == RT_BF16 ? 2 : 4, es = ab_dt == RT_BF16 ? 2 : 4;
  if ((!bias && (!c || aux)) || (uintptr_t)y % ys || (uintptr_t)a % es || (uintptr_t)b % es || (uintptr_t)bias % ys ||
      (uintptr_t)c % ys || (uintptr_t)aux % ys)
    rt_fatal(1, "rt_cu_matmul_ep: neither a bias nor a residual alone, or a pointer not aligned to its element (y %p, a %p, b %p, bias %p, c %p, "
             "aux %p)", y, a, b, bias, c, aux);
  if (aux && c) rt_fatal(1, "rt_cu_matmul_ep: GELU (aux) and a residual (c) together are not supported");
  if (m <= 0 || n <= 0 || k <= 0) rt_fatal(1, "rt_cu_matmul_ep: empty GEMM %lld x %lld x %lld", (long long)m, (long long)n, (long long)k);
  const RtCuEpi ep = {bias, c, aux, 0, NULL};
  return matmul_epi(ctx, d, where, y, y_dt, a, b, ab_dt, m, n, k, ta, tb, &ep);
}

int rt_cu_matmul_dgelu(RtCtx *ctx, const char *where, void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t m, int64_t n,
                        int64_t k, int ta, int tb, const void *pre, void *dbias) {
  RtCuDev *d = rt_cu_dev(ctx);
  size_t ys = y_dt == RT_BF16 ? 2 : 4, es = ab_dt == RT_BF16 ? 2 : 4;
  if ((ab_dt != RT_F32 && ab_dt != RT_BF16) || (y_dt != RT_F32 && y_dt != RT_BF16) || !pre ||
      (uintptr_t)y % ys || (uintptr_t)a % es || (uintptr_t)b % es || (uintptr_t)pre % ys || (uintptr_t)dbias % ys)
    rt_fatal(1, "rt_cu_matmul_dgelu: dtypes %d -> %d, or a pointer missing or not aligned to its element (y %p, a %p, "
             "b %p, pre %p, dbias %p)", ab_dt, y_dt, y, a, b, pre, dbias);
  if (m <= 0 || n <= 0 || k <= 0) rt_fatal(1, "rt_cu_matmul_dgelu: empty GEMM %lld x %lld x %lld", (long long)m, (long long)n, (long long)k);
  /* GELU's backward with its bias gradient, one decision here: cuBLASLt's DGELU_BGRAD sums the bias
   * gradient in a separate reduction kernel of its own, measured slow (GPT-2's [16384, 3072] on an
   * H200: 344 us, against a bytes floor of 24 us), so by default the GEMM runs with DGELU and
   * the caller sums the columns (RT_CU_EP_NO_BGRAD); SHARDRT_GEMM_BGRAD=fused prefers DGELU_BGRAD.
   * Where the device has no algorithm for the preferred epilogue the other is tried, then none. */
  const RtCuEpi bg = {NULL, NULL, (void *)pre, 1, dbias}, dg = {NULL, NULL, (void *)pre, 1, NULL};
  if (!dbias) return matmul_epi(ctx, d, where, y, y_dt, a, b, ab_dt, m, n, k, ta, tb, &dg);
  int fused = bgrad_fused();
  const RtCuEpi *order[2] = {fused ? &bg : &dg, fused ? &dg : &bg};
  for (int i = 0; i < 2; i++)
    if (epi_ran(d, y, y_dt, a, b, ab_dt, m, n, k, ta, tb, order[i])) {
      if (i) epi_note(ctx, d, where, m, n, k, ta, tb, ab_dt, rt_cu_epi_name(order[0]),
                      order[i]->dbias ? "the GEMM with epilogue DGELU_BGRAD" : "the GEMM with epilogue DGELU and the bias gradient's kernels");
      return order[i]->dbias ? RT_CU_EP_ALL : RT_CU_EP_NO_BGRAD;
    }
  epi_note(ctx, d, where, m, n, k, ta, tb, ab_dt, "DGELU_BGRAD or DGELU", "the plain GEMM and the elementwise kernels");
  return RT_CU_EP_NONE;
}

void rt_cu_copy(RtCtx *ctx, void *dst, const void *src, int64_t bytes) {
  RtCuDev *d = rt_cu_dev(ctx);
  if (bytes > 0 && dst != src) d->ops->copy(d->be, dst, src, bytes, RT_CU_D2D);
}

void rt_cu_zero(RtCtx *ctx, void *dst, int64_t bytes) {
  RtCuDev *d = rt_cu_dev(ctx);
  if (bytes > 0) d->ops->zero(d->be, dst, bytes);
}

void rt_cu_copy_block(RtCtx *ctx, void *dst, int64_t dst_dim, int64_t dst_at, const void *src, int64_t src_dim,
                      int64_t src_at, int64_t outer, int64_t len, int64_t inner, int es) {
  RtCuDev *d = rt_cu_dev(ctx);
  size_t row = (size_t)(inner * es), width = (size_t)len * row;
  if (outer <= 0 || width == 0) return;
  char *dp = (char *)dst + (size_t)dst_at * row;
  const char *sp = (const char *)src + (size_t)src_at * row;
  size_t dpitch = (size_t)dst_dim * row, spitch = (size_t)src_dim * row;
  if (outer == 1 || (dpitch == width && spitch == width))
    d->ops->copy(d->be, dp, sp, (int64_t)(width * (size_t)outer), RT_CU_D2D);
  else
    d->ops->copy2d(d->be, dp, dpitch, sp, spitch, width, (size_t)outer);
}

void rt_cu_put(RtCtx *ctx, void *dst, const void *host_src, int64_t bytes) {
  RtCuDev *d = rt_cu_dev(ctx);
  if (bytes > 0) d->ops->copy(d->be, dst, host_src, bytes, RT_CU_H2D_ASYNC);
}

/* SHARDRT_OFFLOAD_SYNC=1: every offload copy synchronous where it is issued (the device's work
 * before it, then the copy, done when the call returns), as before the copies overlapped the
 * compute: the same program without the overlap, to measure what the overlap gains. */
static int offload_sync(void) {
  static int v = -1;
  if (v < 0) {
    v = rt_env_switch("SHARDRT_OFFLOAD_SYNC", false);
  }
  return v;
}

void rt_cu_to_host_start(RtCtx *ctx, void *host_dst, const void *src, int64_t bytes, int slot) {
  RtCuDev *d = rt_cu_dev(ctx);
  if (bytes <= 0) return;
  if (offload_sync()) d->ops->copy(d->be, host_dst, src, bytes, RT_CU_D2H);
  else d->ops->copy_start(d->be, host_dst, src, bytes, RT_CU_D2H, slot);
}

void rt_cu_to_device_start(RtCtx *ctx, void *dst, const void *host_src, int64_t bytes, int slot) {
  RtCuDev *d = rt_cu_dev(ctx);
  if (bytes <= 0) return;
  if (offload_sync()) d->ops->copy(d->be, dst, host_src, bytes, RT_CU_H2D);
  else d->ops->copy_start(d->be, dst, host_src, bytes, RT_CU_H2D, slot);
}

void rt_cu_host_wait(RtCtx *ctx, int slot) {
  RtCuDev *d = rt_cu_dev(ctx);
  if (!offload_sync()) d->ops->host_wait(d->be, slot);
}

void rt_cu_device_wait(RtCtx *ctx, int slot) {
  RtCuDev *d = rt_cu_dev(ctx);
  if (!offload_sync()) d->ops->device_wait(d->be, slot);
}

/* ---- the CUDA backend ---- */

/* Lets kernel k have smem bytes of dynamic shared memory: above 48 KiB a kernel must opt in, once (its
 * attribute stays set for the largest launch so far). */
static cudaError_t allow_smem(CudaBe *c, int k, unsigned smem) {
  if (smem <= c->smem_max[k]) return cudaSuccess;
  cudaError_t rc =
      cudaKernelSetAttributeForDevice(c->kern[k], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem, c->device);
  if (rc == cudaSuccess) c->smem_max[k] = smem;
  return rc;
}

void rt_cu_cuda_launch(void *be, int k, const unsigned grid[3], const unsigned block[3], unsigned smem, void **args) {
  CudaBe *c = be;
  if (k < 0 || k >= c->nk) rt_fatal(1, "CUDA: launch of kernel k%d: the program has %d kernels", k, c->nk);
  if (!c->kern[k])
    rt_fatal(1, "CUDA: kernel k%d is an attention tile candidate, compiled only with SHARDRT_ATTN_AUTOTUNE=1", k);
  cudaError_t arc = allow_smem(c, k, smem);
  if (arc != cudaSuccess)
    rt_fatal(1, "CUDA: kernel k%d: cannot allow %u bytes of dynamic shared memory: %s", k, smem, cudaGetErrorString(arc));
  dim3 g = {grid[0], grid[1], grid[2]}, b = {block[0], block[1], block[2]};
  cudaError_t rc = cudaLaunchKernel((const void *)c->kern[k], g, b, args, smem, c->stream);
  if (rc != cudaSuccess)
    rt_fatal(1, "CUDA: launch of kernel k%d (grid %u x %u x %u, block %u x %u x %u, %u bytes of shared memory) "
                "failed: %s (%s)",
             k, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, cudaGetErrorName(rc),
             cudaGetErrorString(rc));
  if (rt_env_switch("SHARDRT_CUDA_SYNC", false)) { /* debugging: find the kernel that faults (=0 turned it on) */
    rc = cudaStreamSynchronize(c->stream);
    if (rc != cudaSuccess) rt_fatal(1, "CUDA: kernel k%d failed: %s (%s)", k, cudaGetErrorName(rc), cudaGetErrorString(rc));
  }
}

double rt_cu_cuda_time_launch(void *be, int k, const unsigned grid[3], const unsigned block[3], unsigned smem,
                              void **args) {
  CudaBe *c = be;
  if (k < 0 || k >= c->nk || !c->kern[k]) return -1;
  if (allow_smem(c, k, smem) != cudaSuccess) { /* more than this GPU gives a block: not a candidate here */
    (void)cudaGetLastError();
    return -1;
  }
  for (int i = 0; i < 2; i++)
    if (!c->tev[i]) CU_CHECK(cudaEventCreate(&c->tev[i]));
  dim3 g = {grid[0], grid[1], grid[2]}, b = {block[0], block[1], block[2]};
  CU_CHECK(cudaEventRecord(c->tev[0], c->stream));
  if (cudaLaunchKernel((const void *)c->kern[k], g, b, args, smem, c->stream) != cudaSuccess) {
    (void)cudaGetLastError(); /* e.g. too many resources requested: not a candidate here */
    return -1;
  }
  CU_CHECK(cudaEventRecord(c->tev[1], c->stream));
  CU_CHECK(cudaEventSynchronize(c->tev[1]));
  float ms = 0;
  CU_CHECK(cudaEventElapsedTime(&ms, c->tev[0], c->tev[1]));
  return 1e-3 * ms;
}

void *rt_cu_cuda_scratch(void *be, int64_t bytes) {
  CudaBe *c = be;
  void *p = NULL;
  if (cudaMallocAsync(&p, (size_t)bytes, c->stream) != cudaSuccess) { /* stream-ordered: no device-wide sync */
    (void)cudaGetLastError();
    return NULL;
  }
  return p;
}

void rt_cu_cuda_scratch_free(void *be, void *p) {
  CudaBe *c = be;
  CU_CHECK(cudaFreeAsync(p, c->stream));
}

int rt_cu_cuda_capturing(void *be) {
  CudaBe *c = be;
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  CU_CHECK(cudaStreamIsCapturing(c->stream, &cs));
  return cs != cudaStreamCaptureStatusNone;
}

void rt_cu_cuda_copy(void *be, void *dst, const void *src, int64_t bytes, int kind) {
  CudaBe *c = be;
  switch (kind) {
  case RT_CU_D2D: CU_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToDevice, c->stream)); break;
  case RT_CU_H2D_ASYNC: /* pageable source: staged before the call returns */
    CU_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyHostToDevice, c->stream));
    break;
  case RT_CU_H2D:
    CU_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyHostToDevice, c->stream));
    CU_CHECK(cudaStreamSynchronize(c->stream));
    break;
  case RT_CU_D2H:
    CU_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToHost, c->stream));
    CU_CHECK(cudaStreamSynchronize(c->stream));
    break;
  }
}

void rt_cu_cuda_zero(void *be, void *dst, int64_t bytes) {
  CudaBe *c = be;
  CU_CHECK(cudaMemsetAsync(dst, 0, (size_t)bytes, c->stream));
}

void rt_cu_cuda_copy2d(void *be, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                       size_t height) {
  CudaBe *c = be;
  CU_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice, c->stream));
}

void rt_cu_cuda_sync(void *be) {
  CudaBe *c = be;
  CU_CHECK(cudaStreamSynchronize(c->stream));
}

/* Plan offload's copies: on the copy stream, after an event on the compute stream (the work
 * enqueued before the call: what wrote the source, or last read the destination); the slot's
 * event recorded after the copy (re-recorded by each copy of the slot: a wait covers them all,
 * the copy stream being in order). */
static cudaEvent_t slot_event(CudaBe *c, int slot) {
  if (slot < 0) rt_fatal(1, "CUDA: offload copy slot %d", slot);
  if (slot >= c->nev) {
    int n = slot + 64;
    cudaEvent_t *ev = realloc(c->ev, sizeof *ev * (size_t)n);
    if (!ev) rt_fatal(1, "out of memory");
    for (int i = c->nev; i < n; i++) CU_CHECK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
    c->ev = ev;
    c->nev = n;
  }
  return c->ev[slot];
}

void rt_cu_cuda_copy_start(void *be, void *dst, const void *src, int64_t bytes, int kind, int slot) {
  CudaBe *c = be;
  if (!c->copy) {
    CU_CHECK(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking));
    CU_CHECK(cudaEventCreateWithFlags(&c->issued, cudaEventDisableTiming));
  }
  cudaEvent_t done = slot_event(c, slot);
  CU_CHECK(cudaEventRecord(c->issued, c->stream));
  CU_CHECK(cudaStreamWaitEvent(c->copy, c->issued, 0));
  CU_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, kind == RT_CU_D2H ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                           c->copy));
  CU_CHECK(cudaEventRecord(done, c->copy));
}

void rt_cu_cuda_host_wait(void *be, int slot) {
  CudaBe *c = be;
  if (slot < c->nev) CU_CHECK(cudaEventSynchronize(c->ev[slot]));
}

void rt_cu_cuda_device_wait(void *be, int slot) {
  CudaBe *c = be;
  if (slot < c->nev) CU_CHECK(cudaStreamWaitEvent(c->stream, c->ev[slot], 0));
}

void rt_cu_cuda_copies_close(CudaBe *c) {
  if (!c->copy) return;
  CU_CHECK(cudaStreamSynchronize(c->copy));
  for (int i = 0; i < c->nev; i++) CU_CHECK(cudaEventDestroy(c->ev[i]));
  CU_CHECK(cudaEventDestroy(c->issued));
  CU_CHECK(cudaStreamDestroy(c->copy));
  free(c->ev);
  c->ev = NULL, c->nev = 0, c->copy = NULL;
}

/* The training step as a CUDA graph: the compiled step launches the same kernels, GEMMs and copies on
 * the same addresses every time, so after one plain run (which creates the GEMM plans) the second run
 * is recorded from the compute stream and every later one replays it: one launch instead of hundreds,
 * no host launch gaps. A step that cannot be recorded runs kernel by kernel, with a note. */
void rt_cu_cuda_replay(void *be, void (*fn)(char *M, RtCtx *ctx), char *M, RtCtx *ctx) {
  CudaBe *c = be;
  if (!c->graphs || ++c->replays == 1) {
    fn(M, ctx);
    return;
  }
  if (!c->graph) {
    cudaGraph_t g = NULL;
    CU_CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    fn(M, ctx);
    cudaError_t rc = cudaStreamEndCapture(c->stream, &g);
    if (rc == cudaSuccess) rc = cudaGraphInstantiate(&c->graph, g, 0);
    if (g) (void)cudaGraphDestroy(g);
    if (rc != cudaSuccess) {
      (void)cudaGetLastError();
      c->graph = NULL;
      c->graphs = 0;
      fprintf(stderr, "note: the training step could not be recorded as a CUDA graph (%s); it runs kernel by kernel\n",
              cudaGetErrorString(rc));
      fn(M, ctx);
      return;
    }
  }
  CU_CHECK(cudaGraphLaunch(c->graph, c->stream));
}

int rt_cu_cuda_matmul_pair(void *be, void *y0, int y_dt, const void *a, const void *b0, int ab_dt, int64_t m, int64_t n,
                           int64_t k, int ta, int tb, int64_t sb, int64_t sy) {
  CudaBe *c = be;
  return rt_cu_gemm_run_pair(c->gemm, y0, y_dt, a, b0, ab_dt, m, n, k, ta, tb, sb, sy);
}

int rt_cu_cuda_matmul(void *be, void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t batch, int64_t m,
                      int64_t n, int64_t k, int ta, int tb, int b_batched, float alpha, float beta, const RtCuEpi *ep) {
  CudaBe *c = be;
  return rt_cu_gemm_run(c->gemm, y, y_dt, a, b, ab_dt, batch, m, n, k, ta, tb, b_batched, alpha, beta, ep);
}
