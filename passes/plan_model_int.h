/* passes/plan_model_int.h — what plan_model.c (the estimate), plan_model_init.c (the figures from the base plan),
 * plan_model_pp.c (the pipeline schedules' profiles, zb's hand-off, the balanced split) and plan_model_zero.c
 * (ZeRO's dp collectives) share; not for other passes. */
#pragma once

#include "plan_model.h"
#include "pipe_sched.h"

/* A schedule's loads in flight at one stage and position (plan_model_pp.c's header says what they count). */
typedef struct {
  int a, b, h; /* b (zb): backwards whose weight gradients (W) have not run */
  int fresh;   /* zb: 1 where the stage's last instruction was a B (of b, the one whose input the plan has not freed
                  yet: at its end B's hand-off and what only it read of its forward's activations are both live) */
  int last;              /* the last stage's */
  int lastf;             /* the last stage's, its last instruction the last virtual stage's F: its head's work (the
                            logits in f32, the final norm) live beside these loads (after a B or a W it is not) */
  int first;             /* the first stage's (it holds the embedding tables) */
  int stage;             /* the stage's (uneven stages: priced with its own layers) */
  short ac[PIPE_LOAD_CHUNKS]; /* interleaved: of a, each chunk's forwards (uneven chunks: each with its layers) */
} PpLoad;
/* How the head's and embedding's gradients are held between instructions: a tied table's on every stage, as the
 * loads count them (h: merged once every stage has run the micro-batch); an untied model's merged into its stage's
 * sum as the instruction making it has run (passes/pipe_class.c's maker merges): none held, but under ZeRO-2/3 the
 * head's on the last stage, its reduce-scatter over dp waited on a micro-batch later (passes/zero_late.c), and
 * under zb the embedding's on the first, after that stage's W */
typedef enum { GRADS_MERGED, GRADS_SCATTERED, GRADS_SCATTERED_ZB, GRADS_TIED } GradsHeld;
static inline int pp_grads_held(const PpLoad *l, GradsHeld k) {
  return k == GRADS_TIED ? l->h : k == GRADS_SCATTERED_ZB ? l->first + l->last : k == GRADS_SCATTERED ? l->last : 0;
}
typedef struct PpPlay {
  double key[PP_KEYS];    /* the stage times the lists were played with, over a middle stage's F (pp_key) */
  double bubble;          /* the idle fraction, as the cost model's timeline has it */
  double span, busy;      /* the makespan and the last stage's instructions and work between (units of F) */
  struct PpPlay *next;
} PpPlay;
struct PpProfile {
  PipeSchedule kind;
  int pp, M, v, n;       /* n: loads (each stage's Pareto set, in stage order) */
  double lkey[PP_KEYS];   /* zb: the stage times its lists were made with (key[0 .. PK_MERGE) to 1/8 of F); else 0 */
  short lay[RT_MAX_STAGES]; /* zb over uneven stages: each stage's layers, its F, B and W scaled by them over the
                               largest's (the pipe pass's lists are made with each stage's own times); else 0 */
  PipeSched s;            /* the lists */
  int nlast[6];           /* the last stage's instructions: F, B, W, the last chunk's F and B, merges (pp_busy_exact) */
  PipeStep *order;        /* pipe_sched_check's order of them */
  PpLoad *load;
  int *inflight;          /* [pp]: the most micro-batches in flight per stage (pipe_sched_inflight) */
  int *cload, *ncload;    /* interleaved: each chunk's forwards at each stage's peaks (PipeBalance.cload); else NULL */
  PpPlay *plays;          /* the lists played with the times met */
  struct PpProfile *next;
  uint64_t hash;          /* of the key above (kind, pp, M, v, lkey, lay): PlanModel.ptab's */
  struct PpProfile *hnext; /* the next in its ptab bucket */
};

/* x (a stage time over a middle stage's forward) rounded as the profiles' keys are. */
double pp_round(double x);
/* The lists of a schedule as the pipe pass makes them, their loads in flight and, with play, their play
 * with the stage times key (memoised in pm); zb's over uneven stages lay[pp] (NULL: even) with each stage's. */
const PpPlay *pp_profile(PlanModel *pm, PipeSchedule kind, int pp, int M, int v, const double *key,
                         const double *list_key, const int64_t *lay, const PpProfile **prof, bool play);
/* The last stage's busy time (units of F) of profile p's lists with the stage times key unrounded: the play's span
 * (with the rounded key) scaled by it over the play's busy (plan_model.c). */
double pp_busy_exact(const PpProfile *p, const double *key);
void pp_profiles_free(PlanModel *pm);
void pp_splits_free(PlanModel *pm);
/* `layers(balanced)` against the device's memory (replan.c's stage_memory, pipe_balance_calibrate) on the
 * model's figures: n the time-balanced split (plan_model_balance on e, the even estimate), tot its stages'
 * bytes by the model; where the largest does not fit cap at frag (or is the first stage's), n becomes the
 * fastest split whose every stage fits, each stage's bytes beyond the balance's own model held. True where
 * n changed. */
bool plan_model_balance_fit(PlanModel *pm, const struct PlanCand *c, const PlanEstimate *e, const double *tot,
                            double frag, double cap, int64_t *n);
/* Interleaved uneven stages (n[nv], nv = pp x chunks): each stage's heaviest load of pr's, its activations (a
 * layer's of one micro-batch over the chunks, a; each chunk's forwards in flight with its own layers), zb's hold s
 * with the stage's chunks' mean layers, the head's gradient h,
 * the head's activations head and the end stages' parameters ends[2] x their bytes per element pe, into
 * x[pp]; the largest of them, *peak its load's index. (plan_model_balance_fit's per-stage bytes; plan_model_pp.c) */
double pp_stage_loads_v(const struct PpProfile *pr, const int64_t *n, int nv, int pp, double a, double s, double h, GradsHeld held,
                        double head, const double *ends, double pe, double *x, int *peak);
/* zb: what B hands W a layer, in hidden states per token on a rank (tp, sp as the plan has them), and
 * under recompute r what B's recompute made that W reads (plan_model_pp.c says how each is counted). */
double zb_handoff_units(const PlanModel *pm, double tp, bool sp);
double zb_held_units(const PlanModel *pm, RecomputeKind r);
double zb_freed_units(const PlanModel *pm, RecomputeKind r, double kept, double unheld, double *rep);
double sel_act_units(const PlanModel *pm, bool a2a);
double none_act_units(const PlanModel *pm);

/* plan_model_estimate's e again for the split n (n[k] layers on (virtual) stage k), with e's decisions (its
 * deferred waits, zb's hold): plan_model_init.c's calibration at the base plan's own uneven split. */
void plan_model_estimate_split(PlanModel *pm, const Module *base, const CostDevice *dev, const struct PlanCand *c,
                               const int64_t *n, PlanEstimate *e);

/* A ring collective of `bytes` over n ranks moving `factor` x bytes x (n-1)/n: bandwidth and latency. */
static inline double ring_s(double bytes, double factor, int n, double bw, double lat) {
  if (n <= 1 || bw <= 0) return 0;
  return factor * bytes * (n - 1) / n / bw + factor * (n - 1) * lat;
}

/* The plan's bucket bytes (`bucket`; 25 MiB by default, as passes/zero.c and passes/grad_buckets.c take it). */
static inline double bucket_bytes(const Module *base) {
  return base->plan.bucket_bytes > 0 ? (double)base->plan.bucket_bytes : (double)(25 << 20);
}

/* plan_model_zero.c: one layer's ZeRO-2/3 gradient reduce-scatters in a backward layer loop, timed on
 * the dp channel (`coal`: coalesced, passes/zero_coalesce.c); false without a tensor list. */
bool layer_scatters(const PlanModel *pm, const struct PlanCand *c, double cap, int n, double bw, double lat, double front,
                    double rec, double ab, double b, bool coal, double *count, double *all, double *packed, double *end);
/* Whether passes/zero_coalesce.c coalesces a backward body's k scatters of a layer (its decision,
 * zero_coalesce_pays); *bcopy_s: the copies' seconds in `points` bodies. */
bool scatters_coalesce(const Module *base, const CostDevice *dev, int k, int n, double lat, double p_layer,
                       double exposed, bool defer, double points, double *bcopy_s);
/* ZeRO-3 under pp: the dp collectives outside the stages' layer loops, not hidden (plan_model_zero.c): the
 * head's gathers and its gradient's scatter in the last stage's F (*fl), the embedding's gather in the first
 * stage's F (*f0) and its gradient's scatter after its B (*b0). */
void zero3_pp_edges(const PlanModel *pm, const struct PlanCand *c, int n, double bw, double lat, double *f0, double *b0,
                    double *fl);
/* pp 1 under ZeRO-3: the peak's bytes beside the layers' stacks, the loss's or the backward's first layer's
 * (plan_model_zero.c says which are counted). */
double zero3_pp1_peak(const PlanModel *pm, const struct PlanCand *c, double unit, double none_l, double kept_l, double ring,
                      double head, double headg, double gather, double lgrad, bool *at_loss);
/* A backward layer loop's iteration stalled on its layer's gradient reduce-scatters (pp 1's loop and the
 * stages' B, zb: W, loops): the seconds beyond its compute b. */
double scatter_stall(const PlanModel *pm, const Module *base, const CostDevice *dev, const struct PlanCand *c, int n, double bw,
                     double lat, double p_layer, double b, double bc, double rec, double ab, double front, bool defer,
                     double iters, double points, double *bcopy_s, double *tail);
/* ZeRO-3's dp (dp x cp) collectives' seconds a step (and their copies, flat buffer, a gather point's time). */
double zero3_coll_s(const PlanModel *pm, const Module *base, const CostDevice *dev, const struct PlanCand *c, double p_rank,
                    double p_layer, double lst, int n, double bw, double lat, double hide, bool defer, double body,
                    bool front, double iters, double *copy_s, double *bcopy_s, double *flat, double *gather_pt);
