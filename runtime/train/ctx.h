/* runtime/train/ctx.h — RtCtx: the runtime's per-rank state handed to the generated step
 * functions (program.h declares it opaque; generated code that needs a field includes this).
 *
 * Filled by rt_train_main before the first call. A single process is rank 0 of 1 with every
 * parallel coordinate 0 of 1 and no groups. Under a launcher (runtime/comm/) the coordinates
 * come from the program's mesh (Megatron's order, runtime/mesh.h) and groups[mask] is this
 * rank's group over the mesh axes in mask (RT_MESH_TP, RT_MESH_DP | RT_MESH_TP, ...): the
 * collectives of the generated code (runtime/ops/coll.h) run on groups[1 << mesh_axis].
 */
#ifndef SHARDRT_TRAIN_CTX_H
#define SHARDRT_TRAIN_CTX_H

#include <stdint.h>

struct RtCtx {
  int rank, world;      /* this process in the job: 0..world-1, processes */
  int local_rank;       /* index among the processes on this host */
  int dp_rank, dp_size; /* data-parallel coordinate: slice of the global batch, replicas */
  int tp_rank, tp_size; /* tensor-parallel coordinate (1 group of 1 today) */
  int pp_rank, pp_size; /* pipeline stage, stages */
  int cp_rank, cp_size; /* context-parallel coordinate */
  int threads;          /* compute threads the kernels may use (--threads) */
  int64_t step;         /* 1-based step being run; 0 outside training (eval at start, sampling) */
  void *comm;           /* RtComm * when multi-rank; NULL in a single process */
  void *groups[16];     /* RtGroup * per mesh-axis mask; NULL where the group has one member */
  void *mesh;           /* const MeshMap * of the program's mesh when multi-rank; NULL otherwise */
  double comm_s;        /* seconds spent in the generated code's collectives (coll.h), accumulated */
  void *kernels;        /* kernel library state (thread pool, workspace); owner sets and frees it */
  void *user;           /* free for the program (hand-written test programs) */
  void *trace;          /* RtTrace * (runtime/ops/trace.h) under the trainer's --trace, else NULL */
  char *host_mem;       /* a device program's host allocation (RtProgram.host_bytes, plan offload); NULL: none */
};

#endif
