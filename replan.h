/* replan.h — the driver's compiles of the command line's source again, with a few -D overrides, on
 * a fresh Module, silently: the fit check's re-planning of its knobs (passes/fit.h), the plan
 * search's confirmations (passes/plan_search.h), `--compare`'s columns; and what the driver decides
 * for any plan from first compiles of it (replan_inputs): zb's list times (Plan.sched_times) and
 * `layers(balanced)` against the device's memory (Plan.stage_fixed, stage_cap), the same for the
 * command line's plan and every re-planned one. Modules stay in the given arena (the diagnostics
 * keep pointers to their source texts). */
#ifndef SHARDC_REPLAN_H
#define SHARDC_REPLAN_H

#include <stdint.h>
#include <stdio.h>

#include "cost.h"
#include "frontend.h"
#include "module.h"
#include "pipeline.h"
#include "plan_compare.h"
#include "plan_search.h"

typedef struct {
  Arena *arena;
  const char *input;    /* the .model path */
  const FeOptions *fo;  /* the command line's front-end options (its --profile among them) */
  Target target;
  unsigned no_fuse;     /* --no-fuse (Module.no_fuse) */
} Replan;

/* The source compiled again with the overrides kv[0..n) ("key=value") into arena a, its plan's
 * inputs decided (replan_inputs; `weight_copy auto`, `defer_waits auto` and `zb_w auto` from this compile:
 * planned again with the combination auto_memory's rule picks where the plan with all does not fit),
 * planned (pipeline_run, no
 * per-pass verify), its diagnostics written to diag; NULL when it did not compile. The error count
 * is reset after. */
Module *replan_compile(Replan *r, Arena *a, const char *const *kv, int n, FILE *diag);
/* m, compiled by the front end with the overrides kv: zb's list times (the cost model's, from two
 * small quiet compiles) and `layers(balanced)`'s memory figures (from a quiet compile of the split
 * by time), set in m->plan before its passes run. The checks' compiles (the split's, auto_memory's)
 * go to an arena of their own, freed before it returns (the figures stay in a); the split's is
 * auto_memory's first where it sets no figures (the same inputs). */
void replan_inputs(Replan *r, Arena *a, const char *const *kv, int n, Module *m);
/* The plan's own compile: replan_inputs (no overrides), then m's passes (pipeline_run with po), or in their place
 * the check compile replan_inputs made with the same inputs (stage_memory's, or auto_memory's first: the plan with
 * the auto choices unmeasured, where the figures decided leave each as it was taken there), its figures set, the
 * memory report's whys made from them and its passes' diagnostics written again (the front end's are m's own):
 * the plan compiled once where nothing changed (Llama-3-405B pp 16 x cp 2: 2 compiles -> 1). Not with po's dumps,
 * pass times or hook. Returns the module compiled (m, or the check's, in keep, an empty arena: the caller's to free),
 * NULL where the passes reported errors. */
Module *replan_plan(Replan *r, Arena *a, Module *m, const PipelineOptions *po, Arena *keep);
/* The plan search's base (passes/plan_search.c: its analytic model is calibrated there), m as compiled by the
 * front end: its `weight_copy auto`, `defer_waits auto` and `zb_w auto` chosen as its build chooses them
 * (replan.c, auto_memory: against the device's memory), then its passes (pipeline_run with po). A pipeline
 * whose micro-batches exceed 4 pp is compiled at 4 pp of them (the global batch cut to match; the search's own
 * is SearchOptions.global), and quietly at 2 pp into *fewer (else NULL: the calibration's second point,
 * SearchOptions.fewer). Returns the module compiled (m, or the one at fewer micro-batches, in a), NULL where
 * the passes reported errors. */
Module *replan_search_base(Replan *r, Arena *a, Module *m, const PipelineOptions *po, Module **fewer);
/* The fit check's re-plan (FitReplan): the memory plan's total with the overrides, -1 when it does
 * not compile. ctx: a Replan. */
int64_t replan_total(void *ctx, const char *const *kv, int n);

/* `--no-fuse` kinds that change nothing in m (a compile with the kind on gives the same final IR):
 * a note for each one named, or one note when `all` turned off nothing. A compile per kind named. */
void replan_fuse_noop_notes(Replan *r, Arena *a, const Module *m);

/* ---- many plans (replan_many.c) ---- */

/* The plan search's evaluation of candidates (PlanEvalFn, passes/plan_search.h): each compiled
 * (replan_compile, ctx a Replan) and measured in a child process, the result sent back through a
 * pipe; a compile over limit_s of CPU time is stopped and the candidate refused. */
void replan_search_eval(void *ctx, const CostDevice *dev, PlanJob *jobs, int njobs, double limit_s);

/* --mesh-svg, --memory-svg, --compare-svg: the pictures' paths (NULL: none). */
typedef struct {
  const char *mesh, *memory, *compare;
} ReplanSvg;

/* One picture (passes/plan_svg.c; flag names which) written to path; false after an error. */
bool replan_write_svg(const char *path, const char *flag, const Module *m, const CompareCol *cols, int n);

/* `plan --compare SPEC` (passes/plan_compare.c): each variant compiled, measured with the device
 * figures of its own topology (and the profile), printed side by side; the exit code. */
int replan_compare(Replan *r, const char *spec, const char *profile, double storage_Bps, const ReplanSvg *svg);

#endif
