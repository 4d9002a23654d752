/* runtime/ops/reduce_kind.h — which loop rt_reduce_to_f32 (ops.c) runs for a sum of x[xr dims] to
 * y[yr dims]: decided here once, for the runtime and for the CPU cost model (passes/cost_op.c), which
 * prices each loop at its own rate. */
#ifndef SHARDRT_REDUCE_KIND_H
#define SHARDRT_REDUCE_KIND_H

#include <stdint.h>

typedef enum {
  RT_REDUCE_COPY,     /* as many elements: a copy */
  RT_REDUCE_BIAS,     /* y is x's last dim (a bias's gradient): column blocks, row by row, in double */
  RT_REDUCE_TRAILING, /* y is x's trailing dims (a position embedding's gradient): contiguous rows, in f32 */
  RT_REDUCE_GENERAL   /* through the broadcast strides, an index computed per element */
} RtReduceKind;

static inline RtReduceKind rt_reduce_kind(int xr, const int64_t *xd, int yr, const int64_t *yd) {
  int64_t n = 1, ny = 1;
  for (int d = 0; d < xr; d++) n *= xd[d];
  for (int d = 0; d < yr; d++) ny *= yd[d];
  int64_t inner = yr ? yd[yr - 1] : 1;
  if (ny == n) return RT_REDUCE_COPY;
  if (yr >= 1 && ny == inner && xr >= 1 && xd[xr - 1] == inner) return RT_REDUCE_BIAS;
  if (ny == 0 || n % ny != 0) return RT_REDUCE_GENERAL;
  int first = 0; /* y's dims past its leading 1s are x's last ones */
  while (first < yr && yd[first] == 1) first++;
  int off = xr - yr;
  if (off + first < 0) return RT_REDUCE_GENERAL;
  for (int d = first; d < yr; d++)
    if (yd[d] != xd[off + d]) return RT_REDUCE_GENERAL;
  return RT_REDUCE_TRAILING;
}

#endif
