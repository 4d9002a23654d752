/* ir/plan_options.h — which plan options the compiler applies: one table, one check.
 *
 * An option the language accepts is applied by a pass or refused with an error at the plan
 * field, never ignored. The table in plan_options.c says, per option, whether a pass applies
 * it today; a pass that lands flips its row. The fit check (passes/fit.c) offers only
 * knobs whose option is applied.
 */
#ifndef SHARDC_IR_PLAN_OPTIONS_H
#define SHARDC_IR_PLAN_OPTIONS_H

#include <stddef.h>

#include "module.h"

/* The option a plan key sets ("zero", "offload", "interleave" (a part of schedule), ...), or
 * PLAN_OPT_COUNT for a key the table does not cover (tp, dp, sp, bucket, ...). */
PlanOpt ir_plan_opt_of_key(const char *key);

/* Whether the compiler applies option o (any value of it). */
bool ir_plan_opt_applied(PlanOpt o);

/* Whether the plan asks for o: a value other than the one that does nothing (pp 1, zero 0, ...). */
bool ir_plan_opt_is_set(const Plan *p, PlanOpt o);

/* Writes the option as the plan would spell it ("zero 1", "recompute selective") into buf. */
void ir_plan_opt_format(const Plan *p, PlanOpt o, char *buf, size_t cap);

/* The spellings of CpMode, in its order: "ring", "all2all". */
extern const char *const ir_cp_mode_names[2];
/* The spellings of WeightCopy, in its order: "auto", "persistent", "per_layer". */
extern const char *const ir_weight_copy_names[3];
extern const char *const ir_coalesce_names[3];    /* `coalesce`'s words, Plan.coalesce's order */
extern const char *const ir_defer_waits_names[3]; /* `defer_waits`'s words, Plan.defer_waits's order */
extern const char *const ir_zb_w_names[3];        /* `zb_w`'s words, Plan.zb_w's order */

/* Reports an error at each option the plan asks for that the compiler does not apply, with what
 * to write instead. Returns false when it reported one. */
bool ir_plan_check_applied(const Plan *p);

#endif
