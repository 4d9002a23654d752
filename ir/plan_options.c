/* ir/plan_options.c — the table of plan options and whether the compiler applies them (see
 * plan_options.h). When a pass lands, set its row's `applied` (and its tests prove it). */
#include "plan_options.h"

#include <stdio.h>
#include <string.h>

#include "diag.h"

typedef struct {
  const char *key;     /* the plan field, as written */
  bool applied;        /* a pass applies it today */
  const char *what;    /* what it asks for, in words */
  const char *instead; /* the neutral value: what to write until its pass lands */
} OptRow;

static const OptRow rows[PLAN_OPT_COUNT] = {
    [PLAN_OPT_PP] = {"pp", true, "pipeline parallelism", "pp 1"},
    [PLAN_OPT_CP] = {"cp", true, "context parallelism", "cp 1"},
    [PLAN_OPT_ZERO] = {"zero", true, "ZeRO sharding over dp", "zero 0"},
    [PLAN_OPT_OFFLOAD] = {"offload", true, "optimizer state offloaded to the host", "offload off"},
    [PLAN_OPT_RECOMPUTE] = {"recompute", true, "activation recompute", "recompute none"},
    [PLAN_OPT_MICROBATCHES] = {"microbatches", true, "pipeline micro-batching", "microbatches 1"},
    [PLAN_OPT_SCHEDULE] = {"schedule", true, "a pipeline schedule", "schedule 1f1b"},
    [PLAN_OPT_CP_MODE] = {"cp_mode", true, "all-to-all (Ulysses) context parallelism", "cp_mode ring"},
    [PLAN_OPT_WEIGHT_COPY] = {"weight_copy", true, "the weights' bf16 copy chosen by hand", "weight_copy auto"},
    [PLAN_OPT_COALESCE] = {"coalesce", true, "ZeRO-2/3's collectives coalesced by hand", "coalesce auto"},
    [PLAN_OPT_DEFER_WAITS] = {"defer_waits", true, "ZeRO-2/3's scatter waits deferred by hand", "defer_waits auto"},
    [PLAN_OPT_ZB_W] = {"zb_w", true, "zb's W under recompute chosen by hand", "zb_w auto"},
};

const char *const ir_cp_mode_names[2] = {"ring", "all2all"};
const char *const ir_weight_copy_names[3] = {"auto", "persistent", "per_layer"};
const char *const ir_coalesce_names[3] = {"auto", "on", "off"}; /* Plan.coalesce's order */
const char *const ir_defer_waits_names[3] = {"auto", "on", "off"}; /* Plan.defer_waits's order */
const char *const ir_zb_w_names[3] = {"auto", "hold", "recompute"}; /* Plan.zb_w's order */

PlanOpt ir_plan_opt_of_key(const char *key) {
  if (strcmp(key, "interleave") == 0) return PLAN_OPT_SCHEDULE;
  for (int o = 0; o < PLAN_OPT_COUNT; o++)
    if (strcmp(rows[o].key, key) == 0) return (PlanOpt)o;
  return PLAN_OPT_COUNT;
}

bool ir_plan_opt_applied(PlanOpt o) { return o < PLAN_OPT_COUNT && rows[o].applied; }

bool ir_plan_opt_is_set(const Plan *p, PlanOpt o) {
  switch (o) {
  case PLAN_OPT_PP: return p->pp > 1;
  case PLAN_OPT_CP: return p->cp > 1;
  case PLAN_OPT_ZERO: return p->zero > 0;
  case PLAN_OPT_OFFLOAD: return p->offload;
  case PLAN_OPT_RECOMPUTE: return p->recompute != RECOMPUTE_NONE;
  case PLAN_OPT_MICROBATCHES: return p->microbatches > 1;
  case PLAN_OPT_SCHEDULE: return p->schedule != SCHED_1F1B || p->interleave > 1;
  case PLAN_OPT_CP_MODE: return p->cp_mode != CP_RING;
  case PLAN_OPT_WEIGHT_COPY: return p->weight_copy != WCOPY_AUTO;
  case PLAN_OPT_COALESCE: return p->coalesce != COALESCE_AUTO;
  case PLAN_OPT_DEFER_WAITS: return p->defer_waits != DEFER_AUTO;
  case PLAN_OPT_ZB_W: return p->zb_w != ZBW_AUTO;
  case PLAN_OPT_COUNT: break;
  }
  die("plan option %d", (int)o);
}

void ir_plan_opt_format(const Plan *p, PlanOpt o, char *buf, size_t cap) {
  static const char *const rc[] = {"none", "full", "selective"}; /* RecomputeKind order */
  static const char *const sc[] = {"gpipe", "1f1b", "interleaved", "zb"};
  switch (o) {
  case PLAN_OPT_PP: snprintf(buf, cap, "pp %d", p->pp); return;
  case PLAN_OPT_CP: snprintf(buf, cap, "cp %d", p->cp); return;
  case PLAN_OPT_ZERO: snprintf(buf, cap, "zero %d", p->zero); return;
  case PLAN_OPT_OFFLOAD: snprintf(buf, cap, "offload %s", p->offload ? "on" : "off"); return;
  case PLAN_OPT_RECOMPUTE: snprintf(buf, cap, "recompute %s", rc[p->recompute]); return;
  case PLAN_OPT_MICROBATCHES: snprintf(buf, cap, "microbatches %d", p->microbatches); return;
  case PLAN_OPT_SCHEDULE:
    if (p->schedule == SCHED_INTERLEAVED) snprintf(buf, cap, "schedule interleaved(v: %d)", p->interleave);
    else snprintf(buf, cap, "schedule %s", sc[p->schedule]);
    return;
  case PLAN_OPT_CP_MODE: snprintf(buf, cap, "cp_mode %s", ir_cp_mode_names[p->cp_mode]); return;
  case PLAN_OPT_WEIGHT_COPY: snprintf(buf, cap, "weight_copy %s", ir_weight_copy_names[p->weight_copy]); return;
  case PLAN_OPT_COALESCE: snprintf(buf, cap, "coalesce %s", ir_coalesce_names[p->coalesce]); return;
  case PLAN_OPT_DEFER_WAITS: snprintf(buf, cap, "defer_waits %s", ir_defer_waits_names[p->defer_waits]); return;
  case PLAN_OPT_ZB_W:
    if (p->zb_w == ZBW_HOLD && p->zb_w_layers > 0) snprintf(buf, cap, "zb_w hold(%d)", p->zb_w_layers);
    else snprintf(buf, cap, "zb_w %s", ir_zb_w_names[p->zb_w]);
    return;
  case PLAN_OPT_COUNT: break;
  }
  die("plan option %d", (int)o);
}

bool ir_plan_check_applied(const Plan *p) {
  bool ok = true;
  for (int o = 0; o < PLAN_OPT_COUNT; o++) {
    if (rows[o].applied || !ir_plan_opt_is_set(p, (PlanOpt)o)) continue;
    char have[64];
    ir_plan_opt_format(p, (PlanOpt)o, have, sizeof have);
    const char *sp = strchr(rows[o].instead, ' ');
    /* (where it was written: in the file, or a -D's value, DIAG_CMDLINE) */
    error_at(p->opt_loc[o], "`%s`: %s is not implemented in shardc yet", have, rows[o].what);
    note("write `%s` (or -D %.*s=%s) until it is; shardc refuses a plan option it would ignore", rows[o].instead,
         (int)(sp - rows[o].instead), rows[o].instead, sp + 1);
    ok = false;
  }
  return ok;
}
