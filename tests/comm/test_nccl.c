/* tests/comm/test_nccl.c — the NCCL backend on one rank (one GPU): every operation of
 * comm.h on device buffers, against the host reference. Exits 77 (skipped) without a GPU.
 * Tolerance: exact (one rank: every collective is a copy, avg divides by 1).
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "cuda/nccl_comm.h"

#define CK(call)                                                                            \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

int main(int argc, char **argv) {
  RtBoot boot;
  if (!rt_boot_init(&boot, &argc, &argv)) return 1;
  RtComm *c = rt_comm_init(&boot, NULL);
  int me = boot.rank;
  RtGroup *g = rt_group_new(c, &me, 1, "gpu");
  if (!rt_group_use_nccl(c, g)) {
    printf("test_nccl: skipped (no usable GPU)\n");
    return 77;
  }
  int fails = 0;
  const size_t n = 1000003;
  float *h = malloc(n * 4), *back = malloc(n * 4);
  for (size_t i = 0; i < n; i++) h[i] = (float)(i % 13) - 6.0f;
  float *d0, *d1;
  CK(cudaMalloc((void **)&d0, n * 4));
  CK(cudaMalloc((void **)&d1, n * 4));
  for (int op = 0; op < 6; op++) {
    CK(cudaMemcpy(d0, h, n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(d1, 0, n * 4));
    RtReq *q = NULL;
    switch (op) {
    case 0: q = rt_all_reduce_start(g, d0, d1, n, RT_F32, RT_SUM); break;
    case 1: q = rt_all_reduce_start(g, d0, d1, n, RT_F32, RT_AVG); break;
    case 2: q = rt_reduce_scatter_start(g, d0, d1, n, RT_F32, RT_MAX); break;
    case 3: q = rt_all_gather_start(g, d0, d1, n, RT_F32); break;
    case 4: q = rt_all_reduce_start(g, d0, d1, n / 2, RT_BF16, RT_SUM); break; /* one rank: a copy */
    case 5: CK(cudaMemcpy(d1, h, n * 4, cudaMemcpyHostToDevice)); q = rt_broadcast_start(g, d1, n, RT_F32, 0); break;
    }
    rt_wait(q);
    CK(cudaMemcpy(back, d1, n * 4, cudaMemcpyDeviceToHost));
    size_t check = op == 4 ? n / 2 : n; /* elements; op 4 moved n / 2 bf16 values, n bytes */
    if (op == 4 ? memcmp(back, h, check * 2) != 0 : memcmp(back, h, check * 4) != 0) {
      fprintf(stderr, "test_nccl: op %d: result differs from the input\n", op);
      fails++;
    }
  }
  { /* a bucket (rt_all_reduce_v): three members, one empty, as one request in one NCCL group; a
     * second stream waits for it on the device (rt_nccl_then) and copies the last member out */
    CK(cudaMemcpy(d0, h, n * 4, cudaMemcpyHostToDevice));
    void *bufs[3] = {d0, d0 + n / 3, d0 + n / 3};
    size_t counts[3] = {n / 3, 0, n - n / 3};
    RtReq *q = rt_all_reduce_v_start(g, bufs, counts, 3, RT_F32, RT_SUM);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (!rt_nccl_then(q, s)) {
      fprintf(stderr, "test_nccl: the bucket all-reduce is not an NCCL request\n");
      fails++;
    }
    CK(cudaMemcpyAsync(d1, d0, n * 4, cudaMemcpyDeviceToDevice, s));
    CK(cudaStreamSynchronize(s));
    rt_wait(q);
    CK(cudaStreamDestroy(s));
    CK(cudaMemcpy(back, d1, n * 4, cudaMemcpyDeviceToHost));
    if (memcmp(back, h, n * 4) != 0) {
      fprintf(stderr, "test_nccl: bucket all-reduce: result differs from the input\n");
      fails++;
    }
  }
  rt_barrier(g);
  CK(cudaFree(d0));
  CK(cudaFree(d1));
  free(h);
  free(back);
  rt_group_free(g);
  rt_comm_free(c);
  rt_boot_free(&boot);
  if (fails) return 1;
  printf("test_nccl: ok\n");
  return 0;
}
