/* runtime/schedule.h — the learning-rate schedule, one definition for the compiler (ir_lr_at,
 * the interpreter's oracle) and the trainer (the lr it feeds each step).
 *
 * Pure C, no allocation. Steps are 0-based: s = 0 is the first step of a run of `steps`.
 *   warmup  s < warmup:            lr * (s + 1) / warmup (linear, reaching lr at the last warmup step)
 *   decay   warmup <= s < steps:   t = (s - warmup) / (steps - 1 - warmup), from 0 at the first
 *                                  step after warmup to 1 at the last step (s = steps - 1)
 *           constant: lr   linear: min + (lr - min)(1 - t)   cosine: min + (lr - min)(1 + cos(pi t)) / 2
 *   after   s >= steps - 1:        t = 1 (min_lr for linear and cosine, lr for constant)
 * So the last step of the schedule (step `steps` counted from 1) runs at min_lr.
 */
#ifndef SHARDRT_SCHEDULE_H
#define SHARDRT_SCHEDULE_H

#include <stdint.h>

enum { RT_LR_CONSTANT, RT_LR_LINEAR, RT_LR_COSINE }; /* = the IR's LrScheduleKind */

/* The learning rate of 0-based step s of a `steps`-step schedule. */
double rt_lr_at(int schedule /* RT_LR_* */, double lr, double min_lr, int64_t warmup, int64_t steps, int64_t s);

#endif
