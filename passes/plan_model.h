/* passes/plan_model.h — the plan search's analytic model: one candidate's memory per rank by class
 * and its step time, from the model's sizes and the candidate's knobs, without compiling it
 * (docs/planner.md, "The analytic model").
 *
 * The sizes come from the base module (the file's own plan, compiled once): the layer count (the
 * top `repeat`), the sequence, the hidden size, the vocabulary, the parameters inside and outside the
 * layers (logical bytes, as the checkpoint counts them) and the optimizer state's ratio to them.
 * Memory mirrors what the memory plan keeps (fp32 master parameters and gradient sums, the compute
 * precision's activations per micro-batch per layer under each recompute mode, the logits, the
 * pipeline's forwards in flight); under ZeRO-2/3 the gradient is reduce-scattered layer by layer,
 * so one layer's unreduced gradient is live at a time (the compiler's plan for that; the compiled
 * plan, which confirms the top candidates, may still hold more). Time: GEMM and attention FLOPs at
 * the device's rates, bandwidth-bound bytes and kernel calls, each scaled once so that the base
 * plan's analytic figures equal its compiled cost model's (the calibration absorbs the target's
 * constant factors); tp collectives block, dp/ZeRO ones overlap the backward of the last
 * micro-step (ZeRO-3's gathers the whole step); under pp the schedule's lists as the pipe pass makes
 * them (zb's with the model's stage times: pipe_sched_make_timed) played with the model's per-stage F,
 * B (and W): the embedding on the first stage, the head and loss on the last, the merges between
 * instructions, the transfers over the link (plan_pp_play), memoised by pp, micro-batches, chunks and
 * those times rounded; the step is that makespan, then the update and the dp collectives not hidden.
 * Plan offload (the base's: the search keeps it): the compiled base's copies and host bytes per byte
 * of its updated shard, scaled to the candidate's shard and priced by the cost model's rules
 * (cost_copy_time, cost_host_time); plan_offload_time says what of them the step waits for. */
#ifndef SHARDC_PLAN_MODEL_H
#define SHARDC_PLAN_MODEL_H

#include "cost.h"
#include "memplan.h"
#include "pipe_sched.h"
#include "module.h"

struct PlanCand;
typedef struct PpProfile PpProfile; /* a pipeline schedule's loads in flight (plan_model.c) */

enum { PLAN_LAYER_TENSORS = 32 };
typedef struct {
  double numel;               /* elements a layer */
  double out;                 /* a matrix's output features (its last dimension), else 0 */
  bool split, mat, early;     /* split by tp; a matrix; read before the layer's attention */
  bool norm;                  /* read by a norm (its gain or bias), not a GEMM's bias */
} PlanLayerTensor;
typedef struct {
  int layers;
  double seq, d, vocab;       /* tokens per sequence, hidden size, vocabulary (padded) */
  double cb;                  /* bytes per element at the compute precision */
  double pl_split, pl_rep;    /* f32 bytes of one layer's parameters split by tp / not */
  double po_split, po_rep;    /* the same outside the layers (embeddings, final norm) */
  double pe_split[2], pe_rep[2]; /* of those, what pp's first stage holds [0] (the embedding tables) and
                                    its last [1] (the head, the final norm; a tied embedding: both) */
  double pl_mat;              /* one layer's matrix parameters (elements): 6 x FLOPs per token */
  int nl_mat;                 /* one layer's matrix parameters (tensors): GEMMs that accumulate their gradients */
  double rc_gemm;             /* full recompute: the share of a layer's forward GEMM FLOPs it runs again, all but its last
                                 matrix's (whose output only the residual sum reads; the backward reads its input:
                                 passes/recompute.c): Llama-3-405B 0.73, GPT 8 / 12 (the compiled GEMM time rc none -> full:
                                 x 1.243 and 1.222, where 4 / 3 was taken) */
  double rc_epi;              /* ... and those GEMMs' price per FLOP against the layer's (their epilogues' bytes: GPT-2's
                                 forward stores its bias, GELU and residual in them, 1.09), from the base (1: none) */
  double qkv;                 /* the outputs of the matrices read before the attention (Q, K, V: d + 2 kv, a GPT's
                                 3 d), logical; 3 d where not found: ring attention's dQ, dK, dV summed per block */
  double attn_fwd;            /* the forward's share of a layer's attention time, as passes/cost_op.c prices the two at the
                                 model's head dim (recompute runs it again: hd 128 0.284, GPT-2's 64 0.234 on a GPU; it
                                 was taken as 1 / 7 of the time again, and F as a third of it under pp) */
  double gemm_calls;          /* one layer's GEMM launches a micro-batch, forward and backward without recompute
                                 (each pays the device's fixed time): the base plan's compiled (plan_model_init.c) */
  /* one layer's parameters in the order its forward first reads them (the backward makes their gradients
   * in the reverse order, and ZeRO-2/3 reduce-scatters them so): elements, split by tp, a matrix (else a
   * norm's gain), read before the layer's attention; nlt 0: not found in the base (no timing by them) */
  int nlt;
  bool tied;                  /* a table outside the layers read on both pp ends (a tied embedding and head) */
  PlanLayerTensor lt[PLAN_LAYER_TENSORS];
  double state_ratio;         /* optimizer state bytes per parameter byte */
  double capacity;            /* the device's bytes per rank (memplan_capacity of the base; <= 0: unknown):
                                 `defer_waits auto`'s decision (plan_model_estimate) */
  int ntensors;               /* parameter tensors (optimizer kernels) */
  double k_gemm, k_attn, k_mem, k_kern; /* calibration: compiled / analytic at the base plan */
  double k_bal[5];            /* ... and of the balance's figures (PlanEstimate.bal_f, _b, _f0, _b0, _fl): the stage
                                 pass's at a pipelined base (PipeBalance: its cost model before fusion) / the model's */
  double off_d2h, off_h2d, off_host; /* plan offload: the base plan's compiled bytes downloaded, uploaded and
                                        read + written by the host per byte of its shard (CostReport) */
  double off_copies[2];       /* ... and its copies per step (device -> host, host -> device), all stages' */
  PpProfile *profiles;        /* the schedules' loads met so far, by schedule, pp, micro-batches, chunks */
  PpProfile **ptab;           /* ... by the hash of that key (pp_profile; a search meets thousands: GPT-3's
                                 ranking 3,000+, each a candidate's lookup) */
  int ptab_cap, ptab_n;
  struct PpZbFixed *zb_fixed; /* zb's lists that do not depend on the times, by pp and micro-batches (pp_lists: made
                                 once, not for each of the thousands of stage times a search meets) */
  struct PpSplit **splits;    /* the balanced splits made so far, by their (rounded) figures (plan_model_balance) */
} PlanModel;

/* A pipelined candidate's stage times, over a middle stage's F of one chunk (rounded to 1/8): its B
 * (zb: without W), W (zb), the first stage's F and B more (the embedding), the last stage's F more
 * (the head and loss) and its B more (uneven: its own layers), the merge of a finished micro-batch between a stage's instructions, and each
 * receive's latency and bytes over the link. */
enum { PK_B, PK_W, PK_F0, PK_B0, PK_FL, PK_BL, PK_MERGE, PK_LAT, PK_RECV, PP_KEYS };

typedef struct {
  double cls[MEM_COUNT]; /* bytes per rank at the peak, by class */
  double total;          /* their sum */
  MemClass largest;
  double gemm_s, attn_s, mem_s, kern_s, compute_s;
  double zfold_s;        /* of mem_s: ZeRO-2/3's packing of the layer gradients under pp (not calibrated) */
  double tp_s, dp_s, exposed_s; /* blocking collectives, asynchronous ones, exposed communication */
  double shard;          /* f32 bytes of the parameters a rank updates (its tp x pp share over ZeRO's group) */
  double host_s, d2h_s, h2d_s, offload_s; /* plan offload: the host's update, the copies each way, their
                                             time the step adds (plan_offload_time) */
  double bubble, step_s;
  double zb_b, zb_w;     /* pp: the B and W times over F its lists are made and played with (rounded; W: zb) */
  double pp_key[PP_KEYS]; /* pp: the stage times (above) the schedule is played with */
  double pp_span_s, pp_busy_s; /* pp: the played makespan; the last stage's instructions and work between */
  /* pp: what the stage pass's balance (passes/pipe_balance.c) splits the layers by, per rank: one layer's
   * forward and backward seconds per micro-batch, the embedding's forward and backward, the head's and
   * loss's; one layer's activations kept per micro-batch, the head's; one layer's parameters, gradients
   * and optimizer states */
  double bal_f, bal_b, bal_f0, bal_b0, bal_fl, bal_act, bal_head, bal_bytes;
  bool defer;            /* the backward loops' scatter waits deferred (ZeRO-2/3, pp too: zero_defers_scatters;
                            `defer_waits`: zero_defer_taken, auto with this estimate's memory against the capacity) */
  bool zbw_hold;          /* zb under recompute: W holds B's recomputed GEMM inputs (`zb_w`: auto where this
                            estimate's memory with them is within the capacity), else recomputes them */
  bool wcopy;             /* the weights' persistent bf16 copies (plan_param_share; `weight_copy auto`'s dropped where
                            the plan does not fit, as the driver's auto_memory) */
  int zbw_layers;         /* ... for the last zbw_layers layers of each stage only (hold(N), or auto's largest that
                            fits where the whole hold does not); 0: all */
  int nsplit;            /* layers(balanced) (PlanCand.bal): the (virtual) stages of split; else 0 */
  short split[64];       /* their layers (RT_MAX_STAGES) */
} PlanEstimate;

/* The memory plan's allocation over its peak that the analytic memory is taken to (passes/plan_search.c's
 * fit by the model, and `defer_waits auto`'s here): 1.0025 without pp, 1.011 under it (docs/planner.md,
 * "The fragmentation allowance"). */
double plan_ana_frag(int pp);
/* Reads the sizes from base and calibrates the time against base's compiled cost model. */
void plan_model_init(PlanModel *pm, const Module *base, const CostDevice *dev);
/* The same, base compiled at fewer micro-batches than its plan's `accum` (the plan search's base:
 * replan_search_base): base's compiled figures and those of `fewer` (the plan at fewer still, its auto choices
 * base's) extrapolated to accum: a stage's work a step is affine in its micro-batches (per step, and per
 * micro-batch). fewer NULL, or accum not over base's: plan_model_init. */
void plan_model_init_at(PlanModel *pm, const Module *base, const Module *fewer, int64_t accum, const CostDevice *dev);
/* How many ranks ZeRO shards c's optimizer state (and gradients, parameters) over: dp, and under
 * cp the dp x cp group (passes/zero.c; cp alone at dp 1). */
double plan_zero_group(const struct PlanCand *c);
/* A rank's device bytes of parameters per f32 byte of its tp x pp share, under plan c: the f32 masters
 * (ZeRO-3: split), or, where the weights' bf16 copies may be persistent (passes/wshadow.c: the CUDA
 * target under bf16, no pipeline stages below ZeRO-3), the copies beside the masters (ZeRO 1 / 2 then
 * store the masters split, passes/zero_master.c; offload keeps them on the host, passes/zero_offload.c).
 * *persistent: whether that variant is taken (`weight_copy auto`: the smaller; the compile decides
 * whether it fits). One rule for plan_model_estimate and the search's memory bound. */
double plan_param_share(const Module *base, const struct PlanCand *c, double cb, bool *persistent);
/* Plan offload's time added to a step of device work compute_s: downloads d2h_s overlapped with that
 * work, then the host's update host_s (it needs every gradient: the clip's norm) with the uploads h2d_s
 * beside it, n tensors in turn (the last one's upload after its update); sync (offload_sync): every
 * copy and the update in turn. The analytic form of passes/cost.c's timeline. */
double plan_offload_time(double compute_s, double d2h_s, double host_s, double h2d_s, int n, bool sync);
/* Candidate c's split balanced by the stage pass's rule (pipe_balance_split) with the analytic figures
 * of e (c's estimate, its stages even) into n[pp x chunks]; *better (may be NULL): where the stages
 * divide the layers, whether that split beats the even one as the plan's suggestion has it
 * (pipe_balance_better). False: no split (more stages than layers, or than RT_MAX_STAGES). */
bool plan_model_balance(PlanModel *pm, const struct PlanCand *c, const PlanEstimate *e, int64_t *n, bool *better);
/* Candidate c's analytic memory and time; c->bal: with the layers split by plan_model_balance, the
 * slowest (virtual) stage's layers on every stage but the first's and the last's own (their F and the
 * first's B: the last's B is a full stage's), the activations in flight of the largest stage's (chunk's)
 * layers, and every stage's parameters, gradients and optimizer state padded to the largest stage
 * (interleaved: chunk c to the largest chunk c), as the compiled program holds them (passes/stage.c). */
void plan_model_estimate(PlanModel *pm, const Module *base, const CostDevice *dev, const struct PlanCand *c,
                         PlanEstimate *e);
void plan_model_free(PlanModel *pm);
/* The lists of a schedule as the pipe pass makes them (pipe_sched_make_timed, zb's from the stage
 * times key), played with key's times (units of a middle stage's F): returns the makespan; *lists (may
 * be NULL: freed), *busy_last (the last stage's instructions and work between), *bubble (the idle
 * fraction, as pipe_sched_play's). */
double plan_pp_play(PipeSchedule kind, int pp, int M, int v, const double *key, PipeSched *lists, double *busy_last,
                    double *bubble);

#endif
