/* passes/passes.h — every pass's entry point. The order lives in pipeline.c. */
#ifndef SHARDC_PASSES_H
#define SHARDC_PASSES_H

#include "module.h"

/* Each returns false when it reported user errors (diag_errors() > 0). */
bool pass_inline(Module *m);    /* expands CALLs, hoists layer params in repeats to stacked params */
bool pass_shape(Module *m);     /* re-infers and checks every shape and dtype */
bool pass_precision(Module *m); /* bf16 mixed precision on the CUDA target: bf16 compute, f32 master weights */
bool pass_autodiff(Module *m);  /* appends the backward graph: results "grad:<param>" */
bool pass_optimizer(Module *m); /* appends clipping, lr, the update: results "next:<state>" */
bool pass_shard(Module *m);     /* data, tensor and sequence parallelism: the per-rank SPMD program */
bool pass_wshadow(Module *m);   /* bf16 compute: the weights' bf16 copies kept, written by the update (or cast per layer) */
/* Whether the plan may hold the weights' persistent bf16 copies at all (bf16 on the CUDA target, no
 * pipeline stages, not ZeRO-3 over dp): where `weight_copy auto` has a choice to make. */
bool wshadow_may_persist(const Module *m);
/* `weight_copy auto`'s why from Plan.fit (Module.wcopy.why where why_fit): made again by the driver where it
 * reuses a compile with new figures that decide the same (replan.c). */
const char *wshadow_auto_why(Module *m);
bool pass_accum(Module *m);     /* gradient accumulation: the micro-step in a `repeat accum` region summing the gradients */
bool pass_peel(Module *m);      /* accumulation with dp: the last micro-step after the region, its backward overlapping the reduction */
bool pass_sums(Module *m);      /* accumulation: each micro-step's layer gradients added to the sums inside the backward loop */
/* (passes/sums.c; passes/peel.c too) the backward loop yielding `grad` adds it to `sum` per layer,
 * scaled by mean's factor when not NULL: the loop's new output, or NULL when it does not apply */
Value *loop_sum(Graph *g, Value *sum, Value *grad, const Node *add, const Node *mean);
/* loop_sum's fold, for a caller that knows g reads grad (a repeat's stacked output) nowhere else
 * (passes/pipe_fold.c): cast (NULL, or a cast node of any graph: its attributes) is applied per
 * layer in the loop before the add, and the add is at loc; sum NULL: the loop yields the (cast)
 * gradient itself, a sum's first term. */
Value *loop_sum_in(Graph *g, Value *sum, Value *grad, const Node *cast, SrcLoc loc, const Node *mean);
bool pass_gemm_cast(Module *m); /* CPU target, precision bf16: each weight's bf16 copy cast once per step for its GEMMs */
bool pass_wcast(Module *m);     /* bf16 compute: a stacked weight's bf16 copy made per layer inside the loops reading it */
bool pass_stage(Module *m);     /* pipeline stages: the layers split over pp (plan pp) */
bool pass_pipe(Module *m);      /* the pipeline schedule (GPipe, 1F1B) unrolled into per-stage instructions with send/recv */
bool pass_grad_buckets(Module *m); /* data-parallel gradient all-reduces: into the backward loop, bucketed */
/* `zb_w auto`'s why from Plan.fit (Module.zbw.why where why_fit), as wshadow_auto_why. */
const char *recompute_zbw_auto_why(Module *m);
bool pass_recompute(Module *m); /* plan recompute full|selective: backward loops recompute their block's activations */
bool pass_zero(Module *m);      /* ZeRO (plan `zero N`): optimizer state, gradients, parameters sharded over dp
                                   (passes/zero.c; ZeRO-3's gathers zero_gather.c, accumulation's sums zero_sums.c) */
bool pass_zero_defer(Module *m);    /* ZeRO-2/3: a backward loop's scatters' readers moved after the loop (passes/zero_defer.c) */
bool pass_zero_late(Module *m);     /* pp, zb, ZeRO-2/3: a non-layer gradient's dp scatter after B issued after its stage's W loop (passes/zero_late.c) */
bool pass_zero_coalesce(Module *m); /* ZeRO-3: the gathers issued at one point as one all-gather; ZeRO-2/3: a loop body's scatters as one (passes/zero_coalesce.c) */
bool pass_owners(Module *m);    /* pipeline: nodes only one stage needs predicated on it (passes/pipe_owners.c) */
bool pass_fuse(Module *m);      /* groups consecutive elementwise nodes over one shape (Node.group) */
/* shardc --no-fuse (passes/fuse_off.c): whether fusion k is on for m (every one is, but those turned off). */
static inline bool fuse_on(const Module *m, FuseKind k) { return !(m->no_fuse >> k & 1u); }
/* The comma list of names (residual, swiglu, normres, epilogue, groups, ce, sumsq, all) into *bits;
 * false after reporting an unknown name, with the valid ones. */
bool fuse_off_parse(const char *list, unsigned *bits);
const char *fuse_off_name(FuseKind k); /* --no-fuse's word for k */
/* (passes/fuse_order.c, CUDA target, before the grouping) elementwise nodes of g and its bodies moved next to
 * the elementwise nodes they feed or read, over the GEMMs between, where the stages, the kernels and memory allow */
void fuse_order(Graph *g);
bool pass_memplan(Module *m);   /* places every value at an offset in one allocation per rank; cuts fusion
                                   groups where a member would overwrite bytes its group still reads */
bool pass_gacc(Module *m);     /* gradient accumulation fusion: a weight-gradient GEMM accumulates into the running sum (beta 1) */
/* Whether the CUDA target's kernel fusions below (epilogue, fuse_normres, hfuse) apply to m: on any
 * other target they change nothing, and the pipeline neither runs them nor verifies the IR after
 * them (passes/pipeline.c); each pass returns at once where this is false. */
static inline bool pass_cuda_fusions_apply(const Module *m) { return m->target == TARGET_CUDA; }
bool pass_epilogue(Module *m); /* CUDA target: a matmul's bias add, and a GELU or residual add after it, into its GEMM */
bool pass_fuse_ce(Module *m);  /* CUDA target: a cross-entropy's forward and backward in one kernel (Attrs.fused_bwd) */
bool pass_fuse_normres(Module *m); /* CUDA target: the add of the residual gradient in the norm's backward kernel (Attrs.normres) */
bool pass_hfuse(Module *m);     /* CUDA target: sibling GEMMs (one A, two weights) as one batched launch (Attrs.hfuse) */
bool pass_fuse_sumsq(Module *m); /* CUDA target: the clip's sums of squares in the kernel of the concat they feed (Attrs.sumsq_fused) */
bool pass_verify(Module *m);    /* every rank's collectives match its group peers' (dies on a mismatch: a compiler bug) */
/* The positions in g of the nodes the matmul at i computes in its GEMM's epilogue (Attrs.epilogue of
 * them: the bias add, then a GELU or a residual add; argument nodes may lie between); returns how many. */
int epilogue_nodes(const Graph *g, int i, int at[2]);
/* Attrs.epilogue beyond 1 (bias) and 2 (+ GELU or residual): GELU's backward of the matmul's output,
 * a later node (and the bias gradient, the REDUCE_SUM right after it); EPI_RESIDUAL: the add right
 * after it, r = x + y with no bias (x, y's type, the GEMM's C: D = AB + C). */
enum { EPI_DGELU = 3, EPI_DGELU_BGRAD = 4, EPI_RESIDUAL = 5 };
static inline bool epi_dgelu(int e) { return e == EPI_DGELU || e == EPI_DGELU_BGRAD; }
/* Whether the matmul mm is one GEMM whose result an epilogue may take (f32 or bf16, the last dim a
 * multiple of 8, in device memory); what follows it and where values lie decide the rest. */
bool epilogue_gemm_form(const Node *mm);
/* CUDA target, before the fusion groups (passes/fuse.c's pre-step): moves each add of a matmul's
 * output (read by it alone) and a value of its type up to just after that matmul, over the nodes
 * between, where legal (passes/epilogue_hoist.c), so that the GEMM may take it (EPI_RESIDUAL). */
void epilogue_hoist_adds(Graph *g);
/* The position of the matmul whose GEMM computes the node at i of g as a later epilogue node
 * (GELU's backward, its bias gradient), or -1. */
int epilogue_gemm(const Graph *g, int i);
/* The position of the matmul whose GEMM computes the node at i of g in its epilogue, an earlier node
 * (the bias add, a GELU or residual add after it) or a later one (epilogue_gemm's), or -1; from
 * epilogue_nodes, as codegen/target_cuda.c's emit_matmul_ep: the cost model's kernels (passes/cost.c). */
int epilogue_owner(const Graph *g, int i);
/* Before the memory plan: the nodes after the matmul at i of g that its GEMM may compute as far as
 * the ops, types and stages allow (positions: at; at most 2), how many. The memory plan keeps
 * every value they and the matmul read alive through the last of them, so that the GEMM may store
 * their results while it reads (passes/epilogue.c then checks the placement). */
int epilogue_reach(const Graph *g, const PtrMap *uses, int i, int at[2]);
/* The position in g of the node paired with the cross-entropy (forward or backward) at i by
 * passes/fuse_ce.c; -1 when it is not fused. */
int fuse_ce_partner(const Graph *g, int i);
/* passes/fuse_normres.c: the position in g of the add the norm's backward at i computes, or of the norm's backward
 * that computes the add at i (both Attrs.normres); -1 for any other node. */
int fuse_normres_partner(const Graph *g, int i);
/* passes/hfuse.c: the position of the matmul whose batched GEMM computes the matmul at i (Attrs.hfuse 2: the
 * node right before it, hfuse 1); -1 for any other node. */
int hfuse_leader(const Graph *g, int i);
/* passes/hfuse.c, called by the memory plan once it has placed everything (CUDA target): of two sibling GEMMs whose
 * weights and outputs lie one way round and the other, the places of the weights (what their rows are of) or else of
 * the outputs exchanged, with whatever lies inside them, so that one strided batch takes the pair (the pass checks it
 * again after). */
void hfuse_order_copies(Module *m);
/* passes/fuse_sumsq.c: the SUMSQ whose sum of squares the concat's kernel computes as its piece i, or NULL
 * (the piece is then copied as in any concat). */
const Node *fuse_sumsq_piece(const Node *cat, int i);
/* Whether n is a SUMSQ that a concat's kernel computes (or the RESHAPE of one): it emits nothing itself. */
bool fuse_sumsq_member(const Node *n);
/* A fusion group's limits: at most this many nodes, and values read from outside the group. */
enum { FUSE_MAX_NODES = 32, FUSE_MAX_INPUTS = 32 };

#endif
