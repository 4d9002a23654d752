/* passes/cost.h — the cost model: one rank's predicted time per optimizer step, from the compiled
 * per-rank program (after the pipeline), the device and the links.
 *
 * An analysis (docs/planner.md): it reads Module.graph, Module.mesh, Module.pipe and the topology
 * and changes nothing. Every number comes from the program the trainer would run:
 *   - each op's time: GEMMs (matmul) max(FLOPs / gemm rate, bytes / bandwidth), attention (sdpa,
 *     its ring blocks) FLOPs / attention rate (causal: half the score matrix), their backwards at
 *     their own rate with their work per score element, every other kernel its bytes read and
 *     written / bandwidth; plus a per-kernel overhead. On the CUDA target the kernels are the ones
 *     codegen/target_cuda.c launches: a GEMM's epilogue computes the nodes passes/epilogue.c gave it
 *     (their bytes the GEMM's, after its main loop), the fused cross-entropy's backward is its
 *     forward's pass, a node of several kernels (the attention backward, the embedding gradient)
 *     costs each one's overhead. Local
 *     (per-rank) shapes, repeat bodies times their count, so recompute's clones count as they run;
 *   - each collective: the ring algorithm over its group (ir/commreport.c's factors): latency per
 *     ring step plus bus bytes / the link's bandwidth, the link in node or across nodes by the
 *     mesh; across nodes the node's network is shared by the node's rings of that axis;
 *   - overlap: the collectives the trainer runs asynchronously (ir_comm_async: dp gradient buckets,
 *     ZeRO-2 scatters, ZeRO-3 gathers) go on a communication channel and are waited at their first
 *     reader, a device's `overlap` fraction of them hidden behind compute (the CPU's collectives
 *     are progressed by the computing core itself: no overlap); the others block;
 *   - the pipeline: each stage simulated alone (its predicated nodes), which gives each schedule
 *     instruction's time (its nodes, Node.instr), what the stage runs between instructions, and
 *     each transfer's (its bytes over the pp link: the latency on the wire, the bytes / bandwidth
 *     on the receiver); the schedule played with them (pipe_sched_play): the bubble, and the step
 *     the latest stage's end of its last instruction plus what follows it (cost_pipe);
 *   - offload (plan `offload`, passes/zero_offload.c): the copies' times on the host link (a
 *     channel per direction, cost_copy_time: latency + bytes / the link's bandwidth) and the host's
 *     nodes (the update, the casts) at the host's memory bandwidth (cost_host_time) on the host's
 *     own clock, at the places passes/offload_sched.c gives them: a download issued where the
 *     schedule starts it (the step's start, after the node that makes its value, row by row at the
 *     end of each iteration of the loop that makes a stacked gradient), the host waiting for it at
 *     its to_host, an upload issued at its to_device once the host got there, the device waiting
 *     for it at its first reader (or at the step's end); a device node starts no earlier than the
 *     host enqueued it (after the host work before it in the program). With `offload_sync 1` (the
 *     trainer's SHARDRT_OFFLOAD_SYNC=1) every copy blocks the device and the host where it starts.
 * The device's rates are the topology's figures at fixed efficiencies (cost_device_defaults) or a
 * measured profile (bench_calibrate's file, cost_profile_read).
 */
#ifndef SHARDC_COST_H
#define SHARDC_COST_H

#include <stdio.h>

#include "module.h"
#include "ops/kern_count.h"
#include "pipe_sched.h"

typedef struct {
  double latency_s;   /* per ring step */
  double bytes_per_s; /* in node: per rank; across nodes: per node (shared by its rings) */
} CostLink;

/* The CPU target's C elementwise kernels (runtime/ops/ops.c) by loop, where the loop's arithmetic,
 * not memory, bounds the time: scalar flat or bias loops, loops that compute each element's
 * broadcast index (division per dim), reductions through such indices, libm tanhf (tanh, gelu)
 * and expf / logf (exp, log, sigmoid, silu); the cross-entropy's row kernel per logit (its forward and backward
 * in one pass, runtime/kernels/xent.c or the LLVM row kernel: max, exp-sum, and exp again for the gradient). */
typedef enum { COST_EL_FLAT, COST_EL_INDEXED, COST_EL_REDUCE, COST_EL_TANH, COST_EL_EXP, COST_EL_XENT, COST_EL_COUNT } CostElem;

typedef struct {
  char source[160];    /* where the figures come from: "topology p4d_x128 defaults", "profile FILE" */
  double gemm_flops;   /* FLOP/s per rank for large GEMMs at the plan's compute precision */
  double gemm_half_flops; /* a GEMM of this many FLOPs runs at half gemm_flops (rate f / (f + half)); 0: flat */
  double gemm_out_s;   /* seconds per output element on top of the FLOPs (the BLAS's pass over C: its beta scaling,
                          the micro-kernel's stores; what makes a small-k GEMM slow); 0: none */
  double gemm_in_s;    /* seconds per operand element on top (the BLAS packing A and B); 0: none */
  double gemm_cold_bytes_per_s; /* a GEMM operand read from another loop's stack (a saved activation, B's hand-off
                                   to W: out of the caches by then) costs its bytes at this rate on top; 0: not
                                   modelled (the defaults: calibrate measures it) */
  double attn_flops;   /* FLOP/s per rank for attention (sdpa, attn_block; their backwards at attn_bwd_ratio x) */
  double attn_score_flops; /* the forward's work per score element (its online softmax) beyond its FLOPs, in FLOPs
                              at its rate (0: none) */
  double attn_bwd_ratio; /* the backward's rate over the forward's (1: the same) */
  double attn_bwd_score_flops; /* the backward's work per score element (its softmax again) beyond its FLOPs, in
                                  FLOPs at its rate (0: none) */
  double bytes_per_s;  /* bytes read + written per second by bandwidth-bound kernels */
  double op_overhead_s; /* per kernel call (launch, dispatch, loop overhead) */
  double overlap;      /* fraction (0..1) of an asynchronous collective hidden behind compute */
  CostLink link[2];    /* [0] inside a node, [1] across nodes */
  double peak_flops;   /* the device's peak at the plan's precision: MFU's denominator */
  double elem_s[COST_EL_COUNT]; /* seconds per element of those loops (0: bandwidth only, the GPU's) */
  double llvm_elem_s[COST_EL_COUNT]; /* the LLVM-built kernels' (codegen/target_llvm.c, Module.cpu_llvm_kernels): a
                                        flat or bias loop, gelu / tanh, exp (cost_elem_llvm); the other loops are
                                        the C kernels' in both trainers (elem_s) */
  CostLink host_link;  /* host <-> device (PCIe), per direction (the two directions run at once): latency per
                          copy, bytes/s */
  double host_bytes_per_s; /* bytes read + written per second by the host's kernels (plan offload's update on
                              the CPU, its threads together) */
  double offload_sync; /* 1: every offload copy synchronous where it starts (SHARDRT_OFFLOAD_SYNC=1); 0: overlapped */
  double time_spread;  /* how much a block of work of time_spread_s seconds varies from run to run on this machine
                          (robust coefficient of variation, wall clock: its own jitter and its co-runners'); the
                          pipeline's bubble is the median over plays with the instructions' times spread so
                          (pipe_sched_play_spread); 0: none, each instruction takes its time */
  double time_spread_s;
} CostDevice;

typedef struct {
  double gemm_s, attn_s, mem_s, overhead_s; /* kernel time per rank per step, by kind */
  double compute_s;       /* their sum (the busiest stage's under pp) */
  double last_s[4];       /* the last stage's gemm, attn, mem, overhead seconds under pp (else the rank's): the
                             stage the analytic model's compute figures describe (plan_model.c calibrates on them) */
  double comm_s[2];       /* collective time per step in node [0] and across nodes [1] */
  double comm_async_s;    /* the part of comm_s run asynchronously */
  double exposed_comm_s;  /* communication not hidden behind compute (critical path - compute) */
  double host_s;          /* plan offload: the host's work per step (its update, casts), on its own clock */
  double d2h_s, h2d_s;    /* plan offload: copy time per step on the host link, device -> host and back */
  double d2h_bytes, h2d_bytes; /* their bytes */
  double d2h_copies, h2d_copies; /* and how many copies (a stacked gradient's rows each one) */
  double offload_exposed_s; /* the step's time over what it would be with free copies and host work */
  double bubble;          /* pipeline idle fraction (0 without pp) */
  double bubble_s;        /* seconds of it per step */
  double step_s;          /* predicted seconds per optimizer step */
  int64_t tokens;         /* tokens per optimizer step, every rank */
  int64_t kernels;        /* kernel calls per step per rank */
  int64_t kernels_by[RT_KC_COUNT]; /* ... by class (runtime/ops/kern_count.h: GEMM, attention, bandwidth-bound) */
  double gemm_flop;       /* the matmul nodes' FLOPs per step per rank (cost_gemm_flop; recomputed ones too) */
  double gemm_calls, last_gemm_calls; /* ... the GEMMs that pay a launch's fixed time (cost_gemm_launches), the
                                         busiest stage's and (plan_model_init.c's calibration) the last's */
  double tokens_per_s;
  double mfu;             /* model FLOPs per token (training) x tokens/s / (world x peak) */
} CostReport;

/* The CUDA target's kernels for node n at position pos of its graph (-1: not known: one), as
 * codegen/target_cuda.c emits them after the passes that fuse (passes/cost_cuda.c): 0 where another
 * node's kernel computes it, -1 where it runs as copies and no kernel (a concat, slice, pad: rt_cu_copy_block; a shard slice),
 * else how many it launches; *extra: the bytes its kernel moves beyond n's
 * own operands (a GEMM's epilogue's, the fused cross-entropy's gradient). */
int cost_cuda_kernels(const Node *n, int pos, double *extra);
/* A member of a CUDA fusion group at pos of its graph: the bytes its kernel does not move for it that reading
 * each input and writing its output would (the inputs a member defines aside: passes/cost.c skips those): an
 * input from outside that an earlier member read (the kernel loads it once), its output when no node outside
 * the group reads it and it is no result (uses: cost_cuda_group_uses; kept in registers: codegen/cg.c cg_ew_run stores only what is
 * read outside). 0 for a node in no group. */
double cost_cuda_group_unmoved(const Node *n, int pos, const PtrMap *uses);
/* What cost_cuda_group_unmoved reads: how many nodes read each value of m (ir_use_counts), plus one per
 * graph yielding it. */
void cost_cuda_group_uses(const Module *m, PtrMap *uses);

/* The device from m's topology (no topology: a generic CPU core), at the efficiencies of cost.c. */
void cost_device_defaults(const Module *m, CostDevice *d);
/* Whether the LLVM kernels run loop el (the rest are the C kernels' whatever --cpu-kernels says). */
bool cost_elem_llvm(CostElem el);
/* Seconds per element of loop el in m's trainer: the LLVM kernels' where it runs them (Module.cpu_llvm_kernels,
 * the one decision main.c makes for codegen too), else the C kernels'. */
double cost_elem_s(const Module *m, const CostDevice *d, CostElem el);
/* Overrides d's figures with those a profile file gives (passes/cost_profile.c; format in
 * docs/planner.md). Reports `file:line:col` errors and returns false on a bad file. */
bool cost_profile_read(const char *path, CostDevice *d);

/* Plan offload's prices, one rule for the cost model's timeline and the planner's analytic model
 * (passes/plan_model.c): seconds of one copy of `bytes` over the host link (one direction), and of
 * host kernels reading and writing `bytes` in all. */
double cost_copy_time(const CostDevice *d, double bytes);
double cost_host_time(const CostDevice *d, double bytes);

/* The pipeline's predicted timeline (m->pipe, after pipeline_run): its schedule, each instruction's
 * times from the cost model (sched's lists; docs/pipeline.md "The predicted timeline"), each
 * instruction's start, the bubble as the trainer's --trace measures it. Heap: cost_pipe_free. */
typedef struct CostPipe {
  PipeSched sched;
  PipeTimes t;       /* dur, pre, lat, recv per instruction */
  double **start;    /* [pp][len]: from the step's start */
  double *stage_end; /* [pp]: the end of each stage's last instruction */
  double *tail;      /* [pp]: what each stage runs after it (the sums over pp, the clip, the update) */
  double span;       /* first instruction's start to the last one's end */
  double bubble;     /* 1 - the instructions' time / (pp x span); with the device's time_spread, the median
                        over plays with the times spread (pipe_sched_play_spread) */
  double bubble_steady; /* the bubble of the times as they are (= bubble without a spread) */
  double spread, spread_s; /* the device's time_spread and its block (0: none) */
  double step_s;     /* the latest stage_end + tail (+ what the spread adds to the median makespan) */
} CostPipe;
/* False (nothing filled) without a pipeline. */
bool cost_pipe(const Module *m, const CostDevice *d, CostPipe *cp);
void cost_pipe_free(CostPipe *cp);

/* One rank's seconds for nodes[0..n) run in order (a region: its body times its count), by the same
 * rules as the step's (kernels, blocking collectives, asynchronous ones waited at the end), before
 * or after any pass: the stage pass weighs the layers with it (passes/pipe_balance.c). */
double cost_nodes_time(const Module *m, const CostDevice *d, const Node *const *nodes, int n);
/* cost_nodes_time's clock at the end: the compute stream's time and when each communication channel (in node,
 * across nodes) is free; full: every iteration of each loop simulated instead of two, the rest extrapolated (the
 * extrapolation's check: tests/passes/test_cost_loop.c). */
typedef struct {
  double t, chan[2];
} CostClock;
void cost_nodes_clock(const Module *m, const CostDevice *d, const Node *const *nodes, int n, bool full, CostClock *out);
/* The kernel calls per step of each pipeline stage's ranks (one row without a pipeline), by class: what the
 * cost model counts (CostReport.kernels_by is the busiest stage's), which the trainer checks its own against
 * (codegen/emit_kcount.c writes them as RtProgram.kern_plan). out: m->pipe ? m->pipe->pp : 1 rows; gemm_flop
 * (NULL: not wanted): as many, each stage's matmul FLOPs a step (CostReport.gemm_flop: RtProgram.gemm_flop_plan). */
void cost_stage_kernels(const Module *m, const CostDevice *d, int64_t (*out)[RT_KC_COUNT], double *gemm_flop);
/* Predicts m's step (after pipeline_run). */
void cost_estimate(const Module *m, const CostDevice *d, CostReport *r);
/* `shardc plan --cost`: the prediction and its parts. */
void cost_print(FILE *f, const Module *m, const CostDevice *d, const CostReport *r);
/* "12.3 ms", "1.25 s", "850 us" */
const char *cost_human_time(char *buf, size_t size, double s);
/* A rate (tokens/s) to 4 digits with a k / M / G prefix: "74.05 k" (was %.4g: "7.405e+04"). */
const char *cost_human_rate(char *buf, size_t size, double x);

#endif
