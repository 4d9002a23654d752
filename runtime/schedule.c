/* runtime/schedule.c — see schedule.h. */
#include "schedule.h"

#include <math.h>

double rt_lr_at(int schedule, double lr, double min_lr, int64_t warmup, int64_t steps, int64_t s) {
  if (warmup > 0 && s < warmup) return lr * (double)(s + 1) / (double)warmup;
  int64_t span = steps - 1 - warmup; /* decay steps after the first post-warmup one */
  double t = span > 0 ? (double)(s - warmup) / (double)span : 1.0;
  if (t > 1) t = 1;
  switch (schedule) {
  case RT_LR_CONSTANT: return lr;
  case RT_LR_LINEAR: return min_lr + (lr - min_lr) * (1.0 - t);
  case RT_LR_COSINE: return min_lr + (lr - min_lr) * 0.5 * (1.0 + cos(3.14159265358979323846 * t));
  }
  return lr;
}
