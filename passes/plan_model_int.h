/* passes/plan_model_int.h — what plan_model.c and plan_model_pp.c (the pipeline schedules' profiles)
 * share; not for other passes. */
#pragma once

#include "plan_model.h"
#include "pipe_sched.h"

/* A schedule's loads in flight at one stage and position (plan_model_pp.c's header says what they count). */
typedef struct {
  int a, b, h; /* b (zb): backwards whose weight gradients (W) have not run */
  int last;              /* the last stage's (it holds the logits) */
  int first;             /* the first stage's (it holds the embedding tables) */
  int stage;             /* the stage's (uneven stages: priced with its own layers) */
} PpLoad;
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
  PipeSched s;            /* the lists */
  PipeStep *order;        /* pipe_sched_check's order of them */
  PpLoad *load;
  int *inflight;          /* [pp]: the most micro-batches in flight per stage (pipe_sched_inflight) */
  PpPlay *plays;          /* the lists played with the times met */
  struct PpProfile *next;
};

/* x (a stage time over a middle stage's forward) rounded as the profiles' keys are. */
double pp_round(double x);
/* The lists of a schedule as the pipe pass makes them, their loads in flight and, with play, their play
 * with the stage times key (memoised in pm). */
const PpPlay *pp_profile(PlanModel *pm, PipeSchedule kind, int pp, int M, int v, const double *key,
                         const double *list_key, const PpProfile **prof, bool play);
void pp_profiles_free(PlanModel *pm);
