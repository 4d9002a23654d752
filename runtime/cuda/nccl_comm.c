/* runtime/cuda/nccl_comm.c — NCCL communicators, streams and events for RtGroup (see nccl_comm.h). */
#include "nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"

#ifndef CUDA_CHECK
#define CUDA_CHECK(call)                                                                                   \
  do {                                                                                                     \
    cudaError_t cuda_check_rc_ = (call);                                                                   \
    if (cuda_check_rc_ != cudaSuccess)                                                                     \
      rt_fatal(RT_EXIT_COMM, "%s:%d: %s failed: %s", __FILE__, __LINE__, #call,                           \
               cudaGetErrorString(cuda_check_rc_));                                                        \
  } while (0)
#endif
#ifndef NCCL_CHECK
#define NCCL_CHECK(call)                                                                                   \
  do {                                                                                                     \
    ncclResult_t nccl_check_rc_ = (call);                                                                  \
    if (nccl_check_rc_ != ncclSuccess)                                                                     \
      rt_fatal(RT_EXIT_COMM, "%s:%d: %s failed: %s", __FILE__, __LINE__, #call,                           \
               ncclGetErrorString(nccl_check_rc_));                                                        \
  } while (0)
#endif

typedef struct {
  ncclComm_t comm;       /* one per group */
  cudaStream_t stream;   /* communication stream */
  cudaStream_t compute;  /* stream the operations wait for (0: legacy default) */
  float *scratch;        /* one float on the device, for barriers */
  int device;            /* the CUDA device its streams are on (the watchdog's thread sets it: nccl_state) */
} NcclGroup;

typedef struct {
  cudaEvent_t ready; /* recorded on the compute stream at start */
  cudaEvent_t done;  /* recorded on the comm stream after the operation */
} NcclReq;

static ncclDataType_t nccl_dtype(RtDType dt) { return dt == RT_F32 ? ncclFloat32 : ncclBfloat16; }
static ncclRedOp_t nccl_op(RtRedOp op) { return op == RT_SUM ? ncclSum : op == RT_AVG ? ncclAvg : ncclMax; }

static bool nccl_start(RtReq *q) {
  NcclGroup *ng = q->g->backend_state;
  NcclReq *r = calloc(1, sizeof *r);
  if (!r) rt_fatal(RT_EXIT_COMM, "out of memory");
  CUDA_CHECK(cudaEventCreateWithFlags(&r->ready, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(r->ready, ng->compute));
  CUDA_CHECK(cudaStreamWaitEvent(ng->stream, r->ready, 0));
  int n = q->g->n, me = q->g->me;
  size_t es = rt_dtype_size(q->dt);
  ncclDataType_t dt = nccl_dtype(q->dt);
  const char *send = q->send;
  char *recv = q->recv;
  switch (q->op) {
  case RT_OP_ALL_REDUCE:
    if (q->nbufs > 0) { /* a bucket (rt_all_reduce_v): its members in place, one group, so one launch */
      if (q->count == 0) { /* (no member has elements: a barrier keeps every member's sequence in step) */
        NCCL_CHECK(ncclAllReduce(ng->scratch, ng->scratch, 1, ncclFloat32, ncclSum, ng->comm, ng->stream));
        break;
      }
      NCCL_CHECK(ncclGroupStart());
      for (int i = 0; i < q->nbufs; i++) {
        size_t len = q->bufstart[i + 1] - q->bufstart[i];
        if (len) NCCL_CHECK(ncclAllReduce(q->bufs[i], q->bufs[i], len, dt, nccl_op(q->redop), ng->comm, ng->stream));
      }
      NCCL_CHECK(ncclGroupEnd());
    } else if (q->count) {
      NCCL_CHECK(ncclAllReduce(send, recv, q->count, dt, nccl_op(q->redop), ng->comm, ng->stream));
    }
    break;
  case RT_OP_REDUCE_SCATTER:
    if (q->count == 0) break;
    if (q->count % (size_t)n == 0) {
      NCCL_CHECK(ncclReduceScatter(send, recv, q->count / (size_t)n, dt, nccl_op(q->redop), ng->comm, ng->stream));
    } else { /* uneven blocks: one reduce per block, to its owner */
      NCCL_CHECK(ncclGroupStart());
      for (int i = 0; i < n; i++) {
        size_t off, len;
        rt_block(q->count, n, i, &off, &len);
        NCCL_CHECK(ncclReduce(send + off * es, i == me ? recv : NULL, len, dt, nccl_op(q->redop), i, ng->comm,
                              ng->stream));
      }
      NCCL_CHECK(ncclGroupEnd());
    }
    break;
  case RT_OP_ALL_GATHER:
    if (q->count == 0) break;
    if (q->count % (size_t)n == 0) {
      NCCL_CHECK(ncclAllGather(send, recv, q->count / (size_t)n, dt, ng->comm, ng->stream));
    } else { /* uneven blocks: every member broadcasts its own */
      NCCL_CHECK(ncclGroupStart());
      for (int i = 0; i < n; i++) {
        size_t off, len;
        rt_block(q->count, n, i, &off, &len);
        NCCL_CHECK(ncclBroadcast(i == me ? send : NULL, recv + off * es, len, dt, i, ng->comm, ng->stream));
      }
      NCCL_CHECK(ncclGroupEnd());
    }
    break;
  case RT_OP_BROADCAST:
    if (q->count) NCCL_CHECK(ncclBroadcast(recv, recv, q->count, dt, q->root, ng->comm, ng->stream));
    break;
  case RT_OP_BARRIER:
    NCCL_CHECK(ncclAllReduce(ng->scratch, ng->scratch, 1, ncclFloat32, ncclSum, ng->comm, ng->stream));
    break;
  case RT_OP_SEND:
    if (q->count) NCCL_CHECK(ncclSend(send, q->count, ncclUint8, q->peer, ng->comm, ng->stream));
    break;
  case RT_OP_RECV:
    if (q->count) NCCL_CHECK(ncclRecv(recv, q->count, ncclUint8, q->peer, ng->comm, ng->stream));
    break;
  case RT_OP_COUNT: free(r); return false; /* (its events: the process ends, rt_fatal) */
  }
  CUDA_CHECK(cudaEventRecord(r->done, ng->stream));
  pthread_mutex_lock(&q->c->lock); /* (published whole to the watchdog, which reads q->gpu under the lock) */
  q->gpu = r;
  pthread_mutex_unlock(&q->c->lock);
  return true;
}

/* The watchdog's question (RtGroupBackend.state), on its own thread: queued while the compute stream has not
 * reached the point q was enqueued at (its `ready` event), done once its `done` event is; running between. An
 * event query that fails says nothing here (running: timed as before; the host's own calls report the error). */
static RtDevState nccl_state(RtReq *q) {
  NcclReq *r = q->gpu;
  if (!r) return RT_DEV_QUEUED; /* (its start is still being enqueued) */
  static _Thread_local int current = -1;
  NcclGroup *ng = q->g->backend_state;
  if (current != ng->device && cudaSetDevice(ng->device) == cudaSuccess) current = ng->device;
  if (cudaEventQuery(r->done) == cudaSuccess) return RT_DEV_DONE;
  cudaError_t rc = cudaEventQuery(r->ready);
  return rc == cudaErrorNotReady ? RT_DEV_QUEUED : RT_DEV_RUNNING;
}

static bool nccl_test(RtReq *q) {
  NcclReq *r = q->gpu;
  cudaError_t rc = cudaEventQuery(r->done);
  if (rc == cudaErrorNotReady) {
    /* Surface asynchronous NCCL errors (a peer gone, a network failure) instead of spinning. */
    NcclGroup *ng = q->g->backend_state;
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(ng->comm, &async));
    if (async != ncclSuccess) {
      char what[256];
      rt_describe_req(q, what, sizeof what);
      ncclCommAbort(ng->comm);
      rt_fatal(RT_EXIT_COMM, "NCCL error in %s: %s; a peer may have died", what, ncclGetErrorString(async));
    }
    return false;
  }
  CUDA_CHECK(rc);
  return true;
}

static void nccl_finish(RtReq *q) {
  NcclReq *r = q->gpu;
  if (!r) return;
  CUDA_CHECK(cudaEventDestroy(r->ready));
  CUDA_CHECK(cudaEventDestroy(r->done));
  free(r);
  q->gpu = NULL;
}

static void nccl_group_free(void *state) {
  NcclGroup *ng = state;
  if (!ng) return;
  CUDA_CHECK(cudaStreamSynchronize(ng->stream));
  NCCL_CHECK(ncclCommDestroy(ng->comm));
  CUDA_CHECK(cudaStreamDestroy(ng->stream));
  CUDA_CHECK(cudaFree(ng->scratch));
  free(ng);
}

static const RtGroupBackend nccl_backend = {.name = "nccl",
                                           .start = nccl_start,
                                           .test = nccl_test,
                                           .finish = nccl_finish,
                                           .group_free = nccl_group_free,
                                           .state = nccl_state};

bool rt_group_use_nccl(RtComm *c, RtGroup *g) {
  int ndev = 0;
  cudaError_t rc = cudaGetDeviceCount(&ndev);
  bool usable = rc == cudaSuccess && ndev > 0;
  if (!usable) {
    fprintf(stderr, "shardrt: rank %d: no usable GPU for NCCL: %s\n", c->rank,
            rc == cudaErrorInsufficientDriver ? "no CUDA driver (is this a GPU machine?)"
            : rc != cudaSuccess               ? cudaGetErrorString(rc)
                                              : "no CUDA device");
  }
  /* Every rank takes part in the exchange, usable or not, so nobody waits forever. */
  typedef struct {
    ncclUniqueId id;
    int ok;
  } Slot;
  Slot mine;
  memset(&mine, 0, sizeof mine);
  mine.ok = usable;
  if (usable && g && g->me == 0) NCCL_CHECK(ncclGetUniqueId(&mine.id));
  Slot *all = calloc((size_t)c->world, sizeof *all);
  if (!all) rt_fatal(RT_EXIT_COMM, "out of memory");
  rt_boot_allgather(&c->boot, &mine, all, sizeof mine);
  bool all_ok = true;
  for (int i = 0; i < c->world; i++) all_ok &= all[i].ok != 0;
  if (!all_ok || !g) {
    free(all);
    return all_ok;
  }
  NcclGroup *ng = calloc(1, sizeof *ng);
  if (!ng) rt_fatal(RT_EXIT_COMM, "out of memory");
  CUDA_CHECK(cudaGetDevice(&ng->device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&ng->stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaMalloc((void **)&ng->scratch, sizeof(float)));
  NCCL_CHECK(ncclCommInitRank(&ng->comm, g->n, all[g->ranks[0]].id, g->me));
  free(all);
  g->backend = &nccl_backend;
  g->backend_state = ng;
  return true;
}

void rt_nccl_set_compute_stream(RtGroup *g, void *stream) {
  if (g && g->backend == &nccl_backend) ((NcclGroup *)g->backend_state)->compute = (cudaStream_t)stream;
}

bool rt_nccl_then(RtReq *q, void *stream) {
  if (!q->g || q->g->backend != &nccl_backend) return false;
  NcclReq *r = q->gpu;
  if (r) CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)stream, r->done, 0));
  return true;
}

void *rt_nccl_exchange(RtGroup *g, int n, const int *to, const void *const *send, const int *from, void *const *recv,
                       const int64_t *bytes) {
  if (!g || g->backend != &nccl_backend) return NULL;
  NcclGroup *ng = g->backend_state;
  cudaEvent_t ready, done;
  CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(ready, ng->compute));
  CUDA_CHECK(cudaStreamWaitEvent(ng->stream, ready, 0));
  NCCL_CHECK(ncclGroupStart());
  for (int i = 0; i < n; i++) {
    if (bytes[i] <= 0) continue;
    NCCL_CHECK(ncclRecv(recv[i], (size_t)bytes[i], ncclUint8, from[i], ng->comm, ng->stream));
    NCCL_CHECK(ncclSend(send[i], (size_t)bytes[i], ncclUint8, to[i], ng->comm, ng->stream));
  }
  NCCL_CHECK(ncclGroupEnd());
  CUDA_CHECK(cudaEventRecord(done, ng->stream));
  CUDA_CHECK(cudaEventDestroy(ready)); /* released once the comm stream passed it */
  return done;
}

void rt_nccl_exchange_then(void *ev, void *stream) {
  CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)ev, 0));
  CUDA_CHECK(cudaEventDestroy((cudaEvent_t)ev)); /* released once the device passed the wait */
}
