/* runtime/cuda/coll_dev.c — the generated program's collectives on device memory.
 *
 * A multi-rank CUDA program calls the same runtime/ops/coll.h functions as a CPU program;
 * rt_cuda_device's open registers rt_cu_coll_device with them, so that:
 *   - their copies and the packing of non-contiguous chunks (a gather or scatter along an
 *     inner axis, fused `blocks` layouts) are device copies on the compute stream
 *     (rt_cu_copy, rt_cu_copy_block: cudaMemcpy2DAsync, one per run of a member's chunk);
 *   - on a GPU (the CUDA backend), each mesh axis of degree > 1 has its own NCCL group, with
 *     the members of the trainer's host group over that axis (ctx->groups[1 << axis], which
 *     stays on libfabric for the trainer's host-memory work: checkpoints, dumps, sampling).
 *     A collective is enqueued on the group's comm stream after an event on the compute
 *     stream, and the compute stream waits for its `done` event: the host never blocks on it,
 *     and the data-parallel bucket all-reduce (rt_coll_all_reduce_start) overlaps the rest of
 *     backward until rt_coll_wait orders the compute stream after it;
 *   - context parallelism's ring hops and all-to-alls (dev_exchange) are one grouped NCCL send /
 *     recv call on the comm stream; a hop started before the block it overlaps runs there while
 *     the compute stream goes on, and rt_coll_shift_wait makes the compute stream wait for it;
 *   - on the emulated device, device memory is host memory: the collectives run on the host
 *     groups (libfabric) and complete before they return, as on the CPU target.
 */
#include <cuda_runtime.h>
#include <stdio.h>

#include "cu_internal.h"
#include "cuda_ops.h"
#include "nccl_comm.h"

static void dev_copy(RtCtx *ctx, void *dst, const void *src, int64_t bytes) { rt_cu_copy(ctx, dst, src, bytes); }

static RtGroup *dev_group(RtCtx *ctx, int axis) {
  RtCuDev *d = rt_cu_dev(ctx);
  if (axis == RT_AX_GROUP(RT_MESH_DP | RT_MESH_CP)) return d->dpcp;
  return axis >= 0 && axis < RT_AX_COUNT ? d->groups[axis] : NULL;
}

static int dev_then(RtCtx *ctx, RtReq *q) {
  RtCuDev *d = rt_cu_dev(ctx);
  return d->stream && rt_nccl_then(q, d->stream);
}

/* A send's copy: stream-ordered device memory on a GPU (released after the send finished, so after
 * the comm stream read it); NULL on the emulated device (its memory is the host's: coll.c copies
 * on the host). */
static void *dev_alloc(RtCtx *ctx, int64_t bytes) {
  RtCuDev *d = rt_cu_dev(ctx);
  if (!d->stream) return NULL;
  void *p = NULL;
  if (cudaMallocAsync(&p, (size_t)bytes, (cudaStream_t)d->stream) != cudaSuccess)
    rt_fatal(1, "CUDA: cannot allocate %lld bytes for a pipeline send", (long long)bytes);
  return p;
}

static void dev_release(RtCtx *ctx, void *p) { cudaFreeAsync(p, (cudaStream_t)rt_cu_dev(ctx)->stream); }

/* context parallelism's ring hops and all-to-alls: NCCL's grouped send / recv on a GPU, NULL on the
 * emulated device (its groups are the host's: coll.c exchanges host memory) */
static void *dev_exchange(RtCtx *ctx, RtGroup *g, int n, const int *to, const void *const *send, const int *from,
                          void *const *recv, const int64_t *bytes) {
  return rt_cu_dev(ctx)->stream ? rt_nccl_exchange(g, n, to, send, from, recv, bytes) : NULL;
}

static void dev_exchange_then(RtCtx *ctx, void *h) { rt_nccl_exchange_then(h, rt_cu_dev(ctx)->stream); }

const RtCollDevice rt_cu_coll_device = {.copy = dev_copy,
                                        .copy_block = rt_cu_copy_block,
                                        .group = dev_group,
                                        .then = dev_then,
                                        .alloc = dev_alloc,
                                        .release = dev_release,
                                        .exchange = dev_exchange,
                                        .exchange_then = dev_exchange_then};

int rt_cu_nccl_open(RtCtx *ctx, RtCuDev *dev) {
  static const char *const names[RT_AX_COUNT] = {[RT_AX_DP] = "dp (nccl)", [RT_AX_PP] = "pp (nccl)",
                                                 [RT_AX_CP] = "cp (nccl)", [RT_AX_TP] = "tp (nccl)"};
  RtComm *comm = ctx->comm;
  if (!comm) return 0; /* one process */
  /* each axis of degree > 1, then dp x cp when both are (RT_AX_COUNT: the gradient all-reduce's group) */
  for (int axis = 0; axis <= RT_AX_COUNT; axis++) {
    bool dpcp = axis == RT_AX_COUNT;
    if (dpcp && !(ctx->groups[RT_MESH_DP] && ctx->groups[RT_MESH_CP])) continue;
    RtGroup *host = ctx->groups[dpcp ? RT_MESH_DP | RT_MESH_CP : 1u << axis];
    if (!host) continue; /* degree 1: the same on every rank */
    int n = rt_group_size(host), members[1024];
    if (n > (int)(sizeof members / sizeof members[0])) {
      rt_cu_error("NCCL: the %s group has %d members (at most 1024 supported)", rt_group_name(host), n);
      return -1;
    }
    for (int i = 0; i < n; i++) members[i] = rt_group_member(host, i);
    RtGroup *g = rt_group_new(comm, members, n, dpcp ? "dp*cp (nccl)" : names[axis]);
    if (!g) rt_fatal(1, "NCCL: rank %d is not a member of its own %s group", ctx->rank, rt_group_name(host));
    /* collective over the world: every rank makes the same calls, axis by axis */
    if (!rt_group_use_nccl(comm, g)) {
      rt_group_free(g);
      rt_cu_error("rank %d: cannot set up NCCL for the %s group (see above): a multi-rank CUDA program needs a "
                  "GPU per rank (SHARDRT_DEVICE=emu runs it on the CPU emulation instead)",
                  ctx->rank, rt_group_name(host));
      return -1;
    }
    rt_nccl_set_compute_stream(g, dev->stream);
    if (dpcp) dev->dpcp = g;
    else dev->groups[axis] = g;
  }
  return 0;
}

void rt_cu_nccl_close(RtCuDev *dev) {
  for (int axis = 0; axis < RT_AX_COUNT; axis++)
    if (dev->groups[axis]) rt_group_free(dev->groups[axis]), dev->groups[axis] = NULL;
  if (dev->dpcp) rt_group_free(dev->dpcp), dev->dpcp = NULL;
}
