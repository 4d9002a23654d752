/* runtime/cuda/cu_cuda.h — the CUDA backend's state (internal to runtime/cuda/: device.c, ops.c). */
#ifndef SHARDRT_CU_CUDA_H
#define SHARDRT_CU_CUDA_H

#include <cuda_runtime.h>

#include "cu_internal.h"

/* Every CUDA runtime call is checked; a failure after open ends the process naming the call. */
#define CU_CHECK(call)                                                                                   \
  do {                                                                                                   \
    cudaError_t cu_check_rc_ = (call);                                                                   \
    if (cu_check_rc_ != cudaSuccess) rt_cu_cuda_fail(#call, cu_check_rc_, __FILE__, __LINE__);           \
  } while (0)

_Noreturn void rt_cu_cuda_fail(const char *what, cudaError_t rc, const char *file, int line);

typedef struct {
  int device, ndev;          /* the device used, devices visible */
  char name[256];            /* its name */
  int major, minor;          /* compute capability */
  size_t total_mem;          /* bytes */
  int sm_count;              /* multiprocessors */
  cudaStream_t stream;       /* the compute stream */
  cudaLibrary_t lib;         /* the program's kernels */
  cudaKernel_t *kern;        /* [nk]: k0 .. k{nk-1} */
  unsigned *smem_max;        /* [nk]: dynamic shared memory bytes the kernel was allowed (48 KiB default) */
  int nk;                    /* kernels */
  char *base;                /* the allocation */
  int64_t bytes;             /* its size */
  RtCuGemm *gemm;            /* cuBLASLt state */
  double peak;               /* measured bf16 FLOP/s (0: not yet) */
  char arch[32];             /* "sm_90": what the kernels were built for */
  int from_cache;            /* 1: the kernels came from the cubin cache */
  int attn_tune;             /* the attention's tile candidates compiled (SHARDRT_ATTN_AUTOTUNE, attn_tune.c) */
  cudaEvent_t tev[2];        /* their timing (created at the first) */
  double compile_s;          /* seconds NVRTC took (0 from the cache) */
  int graphs;                /* 1: the training step is recorded as a CUDA graph and replayed */
  int replays;               /* calls of replay */
  cudaGraphExec_t graph;     /* the recorded step (NULL: not yet) */
  cudaStream_t copy;         /* plan offload: the copy stream of copy_start (NULL: none yet) */
  cudaEvent_t issued;        /* recorded on the compute stream at each copy_start, waited by the copy stream */
  cudaEvent_t *ev;           /* [nev]: the copies' slots (created at their first copy) */
  int nev;
} CudaBe;

/* ops.c: the CUDA operations of the backend table. */
void rt_cu_cuda_launch(void *be, int k, const unsigned grid[3], const unsigned block[3], unsigned smem, void **args);
/* the attention autotuning's (cu_internal.h RtCuOps) */
double rt_cu_cuda_time_launch(void *be, int k, const unsigned grid[3], const unsigned block[3], unsigned smem,
                              void **args);
void *rt_cu_cuda_scratch(void *be, int64_t bytes);
void rt_cu_cuda_scratch_free(void *be, void *p);
int rt_cu_cuda_capturing(void *be);
void rt_cu_cuda_copy(void *be, void *dst, const void *src, int64_t bytes, int kind);
void rt_cu_cuda_zero(void *be, void *dst, int64_t bytes);
void rt_cu_cuda_copy2d(void *be, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                       size_t height);
void rt_cu_cuda_sync(void *be);
void rt_cu_cuda_copy_start(void *be, void *dst, const void *src, int64_t bytes, int kind, int slot);
void rt_cu_cuda_host_wait(void *be, int slot);
void rt_cu_cuda_device_wait(void *be, int slot);
void rt_cu_cuda_copies_close(CudaBe *c); /* the copy stream and the slots' events, after a sync */
void rt_cu_cuda_replay(void *be, void (*fn)(char *M, RtCtx *ctx), char *M, RtCtx *ctx);
int rt_cu_cuda_matmul_pair(void *be, void *y0, int y_dt, const void *a, const void *b0, int ab_dt, int64_t m, int64_t n,
                           int64_t k, int ta, int tb, int64_t sb, int64_t sy);
int rt_cu_cuda_matmul(void *be, void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t batch, int64_t m,
                       int64_t n, int64_t k, int ta, int tb, int b_batched, float alpha, float beta, const RtCuEpi *ep);

#endif
