/* ir/module.c — plan and recipe defaults, the learning-rate schedule. */
#include "module.h"

#include "schedule.h"

#include <math.h>
#include <string.h>

const char *const ir_link_names[LINK_COUNT] = {"none", "nvlink", "pcie", "efa", "infiniband", "ethernet", "shm"};

void ir_plan_defaults(Plan *p) {
  memset(p, 0, sizeof *p);
  p->dp = 0; /* auto */
  p->tp = p->pp = p->cp = 1;
  p->microbatches = 1;
  p->schedule = SCHED_1F1B;
  p->interleave = 1;
  p->bucket_bytes = 25 << 20;
}

const char *const ir_recipe_num_names[RNUM_COUNT] = {"lr",  "grad_clip", "weight_decay", "eps",
                                                     "momentum", "min_lr", "beta1", "beta2"};

void ir_recipe_defaults(Recipe *r) {
  memset(r, 0, sizeof *r);
  r->batch = 0; /* not given */
  r->micro_batch = 1;
  r->optimizer = OPT_ADAMW;
  r->lr = 3e-4;
  r->beta1 = 0.9;
  r->beta2 = 0.999;
  r->eps = 1e-8;
  r->weight_decay = 0.0;
  r->lr_schedule = LR_CONSTANT;
  r->precision = PREC_F32;
  r->steps = 100;
  r->ckpt_keep = 1;
  r->seed = 1337;
  r->on_nonfinite = NONFINITE_STOP;
  r->max_skips = 5;
}

_Static_assert((int)LR_CONSTANT == RT_LR_CONSTANT && (int)LR_LINEAR == RT_LR_LINEAR && (int)LR_COSINE == RT_LR_COSINE,
               "LrScheduleKind and runtime/schedule.h agree");

double ir_lr_at(const Recipe *r, int64_t step) {
  return rt_lr_at((int)r->lr_schedule, r->lr, r->min_lr, r->warmup, r->steps, step);
}
