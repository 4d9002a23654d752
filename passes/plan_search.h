/* passes/plan_search.h — `shardc plan --search`: the plans for a model and a topology, ranked by
 * an analytic model and confirmed by the compiler (docs/planner.md).
 *
 * Candidates: dp x tp x pp x cp (their product the world) x sp x zero x recompute x micro-batch
 * (x schedule with pp), the global batch kept; with pp, `layers(balanced)` stages where pp (x chunks)
 * does not divide the layers, and beside the even ones where the balanced split beats them
 * (pipe_balance_better, on the analytic figures: plan_model_balance). Every candidate goes through the analytic model
 * (passes/plan_model.c: memory per rank by class, step time), which orders them: those it fits,
 * fastest first. The top few are then compiled in full by the driver (the same source plus -D
 * overrides, on a fresh arena, a child process each): their memory is the memory plan's, judged by
 * the fit check's rule (fit_plan_fits), and their time the cost model's on the program they
 * compiled; the ranked table holds only those. A candidate the model puts over the capacity (past
 * its tolerance) is not compiled, nor one whose memory a compiled one dominates and which did not
 * fit, nor one like three the compiler refused; the confirmation stops after `confirm` compiles or
 * the time budget.
 */
#ifndef SHARDC_PLAN_SEARCH_H
#define SHARDC_PLAN_SEARCH_H

#include <stdio.h>

#include "cost.h"
#include "memplan.h"
#include "module.h"
#include "plan_model.h"

enum { SEARCH_KV = 12, SEARCH_KV_LEN = 40 };
/* The most (virtual) stages of an uneven (`layers(balanced)`) candidate: more are not searched (their
 * schedules' plays are the analytic model's cost; the compiler takes up to RT_MAX_STAGES). */
enum { SEARCH_UNEVEN_MAX = 32 };

/* Evaluates candidates: the driver compiles the source with each one's extra overrides ("key=value"),
 * silently, and fills it with plan_cand_measure (or status CAND_INVALID and err). The driver runs
 * each compile in a child process with a time limit (one that takes too long is refused like a
 * compile error) so that nothing of it stays behind; a batch's children run at once. */
typedef struct PlanCand PlanCand;
/* One candidate to evaluate: its n overrides in kv. The driver evaluates a batch of them at once
 * (one child process each: SearchOptions.jobs). */
typedef struct {
  PlanCand *c;
  int n;
  const char *kv[SEARCH_KV];
  char buf[SEARCH_KV][SEARCH_KV_LEN];
} PlanJob;
/* limit_s: CPU seconds each compile of the batch may take (over it: refused, timed_out). */
typedef void (*PlanEval)(void *ctx, const CostDevice *dev, PlanJob *jobs, int njobs, double limit_s);
enum { SEARCH_JOBS_MAX = 32 };

/* CAND_SLOW: not compiled, since the compiler refused three candidates like it with one message
 * (its numbers aside; like: the same on every knob on which those agree, pp > 1 and cp > 1 alike),
 * or a candidate of its pp, cp and sp degrees took too long to compile (an unrolled pipeline
 * schedule or ring of many micro-steps: the same is true of its siblings). */
/* CAND_BOUND: not compiled, since its parameters and optimizer state alone (the base plan's logical
 * bytes over the candidate's tp x pp, and dp where ZeRO shards them: a lower bound of the memory
 * plan's persistent bytes) exceed the capacity. */
/* CAND_ANALYTIC: not compiled, since the analytic model (passes/plan_model.c) puts it over the
 * capacity by more than its memory tolerance. */
typedef enum { CAND_UNSEEN, CAND_FITS, CAND_NOFIT, CAND_INVALID, CAND_DOMINATED, CAND_SLOW, CAND_BOUND, CAND_ANALYTIC } CandStatus;

struct PlanCand {
  int tp, pp, cp, dp, zero, mb, v; /* v: interleaved chunks */
  int64_t accum;                   /* micro-steps (pipeline micro-batches) per step */
  bool sp;
  bool bal;                        /* pp N layers(balanced) (`-D pp_layers=balanced`); else even stages */
  RecomputeKind rec;
  PipeSchedule sched;
  double est_s;                    /* the analytic step (ana.step_s) that orders the search */
  PlanEstimate ana;                /* the analytic model's memory and time (passes/plan_model.c) */
  bool ana_fits;                   /* its analytic memory fits the capacity */
  bool near;                       /* over the capacity by the model, within its error band (ANA_MEM_TOL), and
                                    * faster by it than the best it fits: confirmed by compiling, in step order */
  double bound;                    /* bytes per rank its parameters and optimizer state need at least */
  double bound_pshare;             /* of which the parameters' device share (plan_param_share), 1: the f32 masters */
  CandStatus status;
  double mem_total, capacity;      /* bytes per rank (memory plan), and what it must fit */
  int64_t by_class[MEM_COUNT];     /* bytes live at the peak, by class */
  MemClass largest;
  CostReport cost;
  char err[160];                   /* CAND_INVALID: the compiler's first error */
  bool timed_out;                  /* CAND_INVALID: its compile ran out of time */
  int nstages;                     /* compiled, uneven stages: the (virtual) stages of stage_rows; else 0 */
  short stage_rows[64];            /* their layers as compiled (MeshMap.stage_rows) */
};

/* Knobs the user pinned with -D: the search keeps the file's (resolved) value for them. */
typedef enum { PIN_TP, PIN_PP, PIN_CP, PIN_DP, PIN_SP, PIN_ZERO, PIN_RECOMPUTE, PIN_MICRO, PIN_SCHEDULE, PIN_COUNT } SearchPin;
extern const char *const plan_search_pin_keys[PIN_COUNT]; /* "tp", "pp", ..., "micro_batch", "schedule" */

typedef struct {
  bool pinned[PIN_COUNT];
  int top;          /* rows to print (default 10) */
  double budget_s;  /* CPU seconds (the search's and its compiles') for the whole search (0: 8 s) */
  double compile_limit_s; /* CPU seconds one compile may take (0: the budget left over the batch, at least 1) */
  int jobs;         /* candidates compiled at once (0: 1) */
  int confirm;      /* candidates compiled at most to confirm the analytic ranking (0: top + 2 x jobs) */
  int64_t global;   /* the global batch the candidates split (0: the base's; the base may be compiled at fewer
                     * micro-batches than the plan's: replan_search_base) */
  const Module *fewer;        /* then the base at fewer still, or NULL: the calibration's second point
                               * (plan_model_init_at) */
} SearchOptions;

typedef struct {
  PlanCand *cand;   /* every candidate (malloc'd; plan_search_free) */
  int n;
  int *rank;        /* indices of the fitting ones, fastest first */
  int nranked;
  int compiled, nofit, invalid, dominated, unseen, slow, bound;
  int indivisible;       /* candidates dropped since pp (x interleaved chunks) exceeds the layers (or RT_MAX_STAGES uneven) */
  int balanced;          /* candidates with layers(balanced): their stages do not divide the layers, or the split beats even */
  int ana_fit, ana_over; /* candidates the analytic model fits / puts over the capacity (not compiled) */
  int near;              /* candidates just over it by the model and faster than its best fit (PlanCand.near) */
  int closest;           /* with no analytic fit: the candidate whose analytic memory is nearest the capacity (-1) */
  double analytic_s;     /* seconds the analytic model took over every candidate */
  double cpu_seconds;    /* CPU seconds of the whole search, its compiles included */
  PlanModel model;
  int bound_broken; /* compiled plans whose memory is under their bound (a bug of the bound: printed) */
  double param_bytes, state_bytes; /* logical, every rank's together (the memory bound's numerators) */
  double capacity;  /* bytes per rank a plan must fit (0: unknown) */
  bool budget_hit;
  double seconds;   /* the search's wall-clock time */
  int64_t global;   /* the global batch (sequences a step) every candidate splits */
  CostDevice dev;
} SearchResult;

/* Searches the plans of base's model on base's world and topology (base: the module as compiled
 * from the file's own plan, perhaps at fewer micro-batches: o->global). dev: the device figures
 * (defaults or a profile). */
void plan_search(const Module *base, const CostDevice *dev, PlanEval eval, void *ctx, const SearchOptions *o,
                 SearchResult *r);
/* A compiled candidate's figures: memory (fit_plan_fits, the memory plan's classes), the cost
 * model's prediction, status CAND_FITS or CAND_NOFIT. */
void plan_cand_measure(const Module *m, const CostDevice *dev, PlanCand *c);
/* The overrides that select candidate c ("tp=8", "dp=auto", ...): n of them into kv. */
int plan_cand_overrides(const PlanCand *c, char kv[SEARCH_KV][SEARCH_KV_LEN]);
/* "tp 8 sp . dp 16 zero 1 rec sel mb 2 (x4)" */
void plan_cand_label(const PlanCand *c, char *buf, size_t cap);
/* The ranked table (the top rows), why each loses to the best, and what was dropped. */
void plan_search_print(FILE *f, const Module *base, const SearchResult *r, int top);
void plan_search_free(SearchResult *r);

#endif
