/* passes/fit.h — does the plan fit the device? The check `shardc plan` and `shardc build` run
 * after the pipeline, and the knobs that would bring a plan that does not fit under.
 *
 * Each knob's number comes from planning the module again with that knob changed (the driver's
 * `replan`: the same source and options plus a few -D overrides, on a fresh Module), never from a
 * formula. Knobs are a table in fit.c; a knob whose plan option the compiler does not apply yet
 * (ir/plan_options.c) is named but not planned.
 */
#ifndef SHARDC_FIT_H
#define SHARDC_FIT_H

#include "module.h"

/* Plans the module again with n extra overrides ("key=value"); returns the rank's planned total
 * bytes (MemPlan.total), or -1 when that plan is not valid. Reports nothing. */
typedef int64_t (*FitReplan)(void *ctx, const char *const *kv, int n);

/* Whether m's planned memory (MemPlan.total) fits the rank's capacity (memplan_capacity; true when
 * unknown). *total and *capacity (may be NULL) get the two figures: the fit check's, and the plan
 * search's (passes/plan_search.c). */
bool fit_plan_fits(const Module *m, double *total, double *capacity);

/* When m has a topology and its plan's total exceeds the device's memory: an error at the plan
 * naming the total, the device's memory and the largest class, then one note per knob with the
 * total it plans to. Returns false when it reported that error. */
bool fit_check(const Module *m, FitReplan replan, void *ctx);

/* A --target cuda plan on a topology without a GPU (`cpu x N`): a note at the topology that the fit
 * check and the cost model use its CPU's figures (memplan_capacity, cost_device_defaults), what the
 * trainer checks at start instead, and a GPU topology to plan against. Nothing otherwise. */
void fit_note_target(const Module *m);
/* Why m->target (given: by --target, else the default, cpu): the plan header's words. The default
 * stays cpu on a topology of GPUs (the recorded CPU runs of the bundled GPU models, docs/performance.md,
 * build it so), and says that --target cuda plans for them. Returns buf. */
const char *fit_target_why(const Module *m, bool given, char *buf, size_t n);
/* Whether m's topology has GPUs the default target (cpu) leaves unused. */
bool fit_target_gpus_unused(const Module *m, bool given);

/* Whether a memory auto choice's figure (the planned total per rank with it, Plan.fit.*.total, and the device's
 * memory, .cap; 0: not measured) is over the device: the one rule for wshadow, zero_defer and recompute's
 * reports and the driver's (replan.c). */
static inline bool fit_figure_over(double total, double cap) {
  return total > 0 && cap > 0 && total > cap;
}

/* used / cap as the reports print it (the plan's capacity line, --compare's fits row): whole percent,
 * "<1%" above zero ("fits (0% of it)" was), and one decimal within 1 of 100 (a plan that fits never
 * reads 100%, one that does not never 100% either). */
const char *fit_share(char *buf, size_t n, double used, double cap);

/* The memory-dependent auto choices the driver decides together (replan.c, auto_memory), as Plan.fit.kept's
 * bits; fit_auto_kept: those of `kept` named for the memory report ("the persistent weight copies", "the
 * deferred waits", "the zb W hold", joined with "and"), in m's arena. */
enum { AUTO_MEM_COPIES = 1, AUTO_MEM_DEFER = 2, AUTO_MEM_HOLD = 4 };
const char *fit_auto_kept(Module *m, unsigned kept);

/* A memory auto choice's why from its figure f (Plan.fit.*), the one text for wshadow's, zero_defer's and
 * recompute's (and the driver's again where it reuses a compile: replan.c): `over` names the choice in "the plan
 * with ... needs", `alone` is "it fits" / "they fit", `with` ends "planned with ..." ("it", "them", "the hold"). */
const char *fit_auto_why(Module *m, FitFigure f, const char *over, const char *alone, const char *with);

#endif
