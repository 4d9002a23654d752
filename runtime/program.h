/* runtime/program.h — what a generated trainer hands the runtime.
 *
 * shardc's codegen emits C that defines one RtProgram (tables of tensors with
 * their offsets in the rank's one allocation, and the step functions) and a
 * main() that calls rt_train_main(). Everything else — flags, data, the
 * training loop, logging, checkpoints, sampling — is the runtime's.
 */
#ifndef SHARDRT_PROGRAM_H
#define SHARDRT_PROGRAM_H

#include <stdint.h>

#include "dtype.h"    /* RT_F32, RT_BF16, ... (the IR's DType order) */
#include "schedule.h" /* RT_LR_* */
enum { RT_INIT_ZEROS, RT_INIT_ONES, RT_INIT_NORMAL, RT_INIT_UNIFORM, RT_INIT_CONST }; /* = InitKind */
/* RT_T_COPY: a parameter's persistent bf16 copy (the compiler's STATE "bf16:<param>"): derived from
 * its parameter tensors[copy_of] by a cast at start and whenever weights are loaded (a parameter
 * stored split over the ZeRO group, the copy whole: from the gathered parameter), written by the
 * step's update (or the all-gather of the updated shards' casts); never checkpointed, dumped or
 * initialised on its own */
enum { RT_T_PARAM, RT_T_STATE, RT_T_INPUT, RT_T_RESULT, RT_T_COPY };
enum { RT_OPT_SGD, RT_OPT_ADAMW };
enum { RT_NONFINITE_STOP, RT_NONFINITE_SKIP }; /* = the IR's NonfiniteAction */

#define RT_MAX_RANK 6

/* How a tensor of a multi-rank program is split over the device mesh (the IR's Sharding):
 * the tensor's dims are the LOCAL (per-rank) ones; dim d of the logical tensor is
 * dims[d] * degree(split[d]) * degree(inner[d]) long, and local index l on the rank with
 * coordinate c along split[d] (ic along inner[d]) is logical index
 * rt_sharded_index(dims[d], blocks[d], degree, c, inner degree, ic, l) (runtime/mesh.h; without
 * an inner split, rt_block_index(dims[d], blocks[d], degree, c, l)).
 * All zeros (sharded == 0) is the replicated tensor: every rank holds the whole of it. */
typedef struct {
  int sharded;             /* 1: split[], blocks[] and inner[] apply; 0: replicated */
  int split[RT_MAX_RANK];  /* per dim: the mesh axis (RT_AX_*) that splits it, -1 none */
  int blocks[RT_MAX_RANK]; /* per split dim: equal blocks, each split over the axis (0 or 1: one) */
  int inner[RT_MAX_RANK];  /* per split dim: a second mesh axis splitting the local extent again, contiguously,
                              -1 none; only under a contiguous split (blocks 0 or 1): ZeRO's shards over the
                              dp x cp group (passes/zero.c) */
} RtSharding;

typedef struct {
  const char *name;         /* logical name: "wte", "blocks.attention.w_qkv", "adam_m:wte", "tokens", "loss", "grad:wte" */
  int kind;                 /* RT_T_* */
  int dtype;                /* RT_* dtype */
  int rank;                 /* number of dims */
  int64_t dims[RT_MAX_RANK];
  int64_t offset;           /* bytes from the rank's base */
  int stacked;              /* 1: dim 0 indexes layers of a repeat; checkpoints name slices "blocks.3.attention.w_qkv" */
  int init;                 /* RT_INIT_* (params) */
  double init_a, init_b;    /* normal(mean a, std b), uniform(a, b), const a */
  RtSharding shard;         /* split over the mesh (multi-rank programs); zeros: replicated */
  int host;                 /* 1: a device program's tensor in its host allocation (plan offload): offset is
                               from rt_ctx_host_mem, not from the device allocation */
  uint64_t stages;          /* pipeline parallelism: the pp coordinates whose ranks hold it (bit per stage: a
                               parameter outside the layers, its state and gradient on the stages reading it;
                               its bytes are other values' elsewhere); 0: every rank (rt_tensor_held) */
  int copy_of;              /* RT_T_COPY: the index in the table of the parameter it is the bf16 copy of */
} RtTensor;

typedef struct {
  int optimizer;            /* RT_OPT_* */
  double lr, min_lr;        /* peak and final learning rate */
  int lr_schedule;          /* RT_LR_* */
  int64_t warmup;           /* steps */
  int64_t steps;            /* default --steps */
  uint64_t seed;            /* default --seed */
  double grad_clip;         /* 0: off */
  const char *data, *val;   /* default --data / --val (may be NULL) */
  int64_t ckpt_every;       /* steps; 0: only at the end when --save-to is given */
  const char *ckpt_dir;
  int ckpt_keep;
  int on_nonfinite;         /* RT_NONFINITE_*: skip: the step's update is gated on finite gradients */
  int64_t max_skips;        /* skip: consecutive skipped steps after which the run stops */
} RtRecipe;

typedef struct RtCtx RtCtx; /* the runtime's per-rank state: threads, rank, groups */

/* A GPU backend: where a device program's memory lives and how the host reaches it (defined
 * by runtime/device.h; implemented by runtime/cuda/: CUDA, or its CPU emulation). */
typedef struct RtDevice RtDevice;

/* The kernels of a device program (emitted by codegen/cuda_kernels.c, shapes baked in). */
typedef struct {
  const char *source;       /* CUDA C: includes "shardk.cuh", defines extern "C" kernels k0 .. k{nkernels-1} */
  int nkernels;             /* kernels in source */
} RtCudaCode;

typedef struct {
  const char *model;        /* model name */
  const char *source;       /* the .model path it was compiled from */
  int64_t mem_bytes;        /* the planned allocation */
  int64_t (*workspace_bytes)(void); /* kernel scratch, placed right after mem_bytes: allocate mem_bytes + this */
  int64_t mem_peak;         /* the planned peak of live bytes */
  int64_t host_bytes;       /* a device program's host allocation (plan offload: the optimizer step's tensors); 0: none */
  int mesh[4];              /* degrees the program was compiled for, by RT_AX_* (dp, pp, cp, tp); 0 counts as 1 */
  int64_t batch, seq;       /* per-rank rows B and sequence length T of the step's "tokens" (B: every micro-step's) */
  int64_t global_batch;     /* sequences per optimizer step over every replica: micro_batch x dp x accum (the recipe's
                               batch, decided by the compiler; 0 in programs written by hand: the tokens' logical rows) */
  int64_t micro_batch, accum; /* sequences per rank per micro-step; micro-steps per optimizer step */
  int64_t vocab;            /* valid vocabulary size (tokens must be < vocab) */
  int64_t vocab_padded;     /* logits' last dim */
  int byte_level;           /* 1: the data is raw bytes and samples print as text */
  int64_t nparams;          /* parameter count */
  double flops_per_token;   /* training FLOPs (forward + backward) per token */
  int ntensors;
  const RtTensor *tensors;  /* params, states, inputs ("tokens", "targets", "lr", "step"), results ("loss", "grad_norm", "grad:*") */
  int64_t logits_offset;    /* bytes: f32 [rows, seq, vocab_padded] after `logits` runs (rows: batch, or one micro-batch's
                               under accumulation or a pipeline: its logits entry runs one micro-batch's forward); -1: none */
  const RtTensor *logits_tensor; /* multi-rank: the logits' local dims and sharding (NULL: as above) */
  RtRecipe recipe;
  void (*step)(char *mem, RtCtx *ctx);   /* forward, backward and update; reads the inputs, writes "loss" and updates state */
  void (*eval)(char *mem, RtCtx *ctx);   /* forward to "loss" only; no update */
  void (*logits)(char *mem, RtCtx *ctx); /* forward to the logits only (sampling) */
  const RtDevice *device;   /* NULL: a CPU program, mem is host memory; else mem lives on this device (--target cuda) */
  const RtCudaCode *cuda;   /* a device program's kernels; NULL for a CPU program */
  const int *stage_rows;    /* uneven pipeline stages: the layers of each pp stage (the dims split RT_BLOCKS_STAGES,
                               runtime/mesh.h; interleaved: of each virtual stage); NULL: none */
  int stage_chunks;         /* ... interleaved: the chunks per stage (the mesh's stage_chunks); 0: one */
  const int64_t *coll_plan;  /* the plan's collectives per step of each pipeline stage's ranks (ir/commreport.h):
                               [coll_plan_stages][RT_CC_ROWS][RT_CK_COUNT] pairs (count, bytes) as runtime/ops/coll_count.h
                               counts them; the trainer checks its counts against its stage's; NULL: none */
  int coll_plan_stages;     /* 1 without a pipeline */
  const int64_t *kern_plan; /* the plan's kernel calls per step of each pipeline stage's ranks by class
                               (passes/cost.c): [kern_plan_stages][RT_KC_COUNT] as runtime/ops/kern_count.h counts
                               them; the trainer checks its counts against its stage's; NULL: none */
  int kern_plan_stages;     /* 1 without a pipeline */
  const double *gemm_flop_plan; /* [kern_plan_stages]: the plan's matmul FLOPs a step of each stage's ranks
                                   (passes/cost.c), which the CPU trainer checks its rt_matmul_flops against; NULL: none */
} RtProgram;

/* The host allocation of a device program with host_bytes (zeroed, pinned on a GPU); NULL without. */
char *rt_ctx_host_mem(RtCtx *ctx);

/* Runs the trainer: parses the flags (--data, --val, --steps, --seed, --batch, --init-from,
 * --save-to, --resume, --log, --eval-every, --sample, --help, ...), allocates mem_bytes,
 * initialises, trains, logs, checkpoints, samples. Returns the process exit status. */
int rt_train_main(int argc, char **argv, const RtProgram *p);

#endif
