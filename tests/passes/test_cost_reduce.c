/* tests/passes/test_cost_reduce.c — the CPU cost model prices a sum by the loop the runtime runs for it
 * (runtime/ops/reduce_kind.h, one decision for both): x f32 [16, 32, 512] summed to its last dim (a bias's
 * gradient), to its trailing dims [32, 512] (a position embedding's, or the ring attention's blocks under cp:
 * contiguous rows) and to [16, 1, 512] (through strides, an index per element). The bias's and the trailing
 * sum's loops are contiguous: the same time for the same elements; the strided one slower. The trailing sum
 * was priced as the strided loop (10 ns an element): tiny at cp 2 had 25 ms of bandwidth-bound kernels a step
 * predicted for 8.4 (the step 33.7 ms for ~20 measured). */
#include <math.h>
#include <stdio.h>

#include "cost.h"
#include "cost_op.h"
#include "diag.h"
#include "ops/reduce_kind.h"
#include "tb.h"

static int failures; /* CHECK (tests/check.h, through tb.h) counts here */

static double sum_time(const Module *m, const CostDevice *d, Graph *g, Value *x, Shape to) {
  Value *y = tb_shaped(g, OP_REDUCE_SUM, 1, &x, DT_F32, to, &(Attrs){0});
  TimeKind kind;
  return cost_op_time(m, d, y->def, false, 0, &kind);
}

int main(void) {
  Arena ar;
  arena_init(&ar);
  Module *m = tb_module(&ar, "cost_reduce");
  CostDevice d;
  cost_device_defaults(m, &d);
  Graph *g = m->graph;
  Shape xs = tb_shape(3, 16, 32, 512), bias = tb_shape(1, 512), trail = tb_shape(2, 32, 512),
        strided = tb_shape(3, 16, 1, 512);
  CHECK(rt_reduce_kind(xs.rank, xs.dim, bias.rank, bias.dim) == RT_REDUCE_BIAS, "bias kind");
  CHECK(rt_reduce_kind(xs.rank, xs.dim, trail.rank, trail.dim) == RT_REDUCE_TRAILING, "trailing kind");
  CHECK(rt_reduce_kind(xs.rank, xs.dim, strided.rank, strided.dim) == RT_REDUCE_GENERAL, "general kind");
  CHECK(rt_reduce_kind(xs.rank, xs.dim, xs.rank, xs.dim) == RT_REDUCE_COPY, "copy kind");
  Value *x = tb_input(g, "x", DT_F32, xs);
  double tb = sum_time(m, &d, g, x, bias), tt = sum_time(m, &d, g, x, trail), ts = sum_time(m, &d, g, x, strided);
  CHECK(tt <= tb * 1.05 + 1e-9, "the trailing sum %.3g s, the bias's %.3g s: both contiguous rows", tt, tb);
  CHECK(ts > 3 * tt, "the strided sum %.3g s, the trailing one's %.3g s: an index per element", ts, tt);
  printf("sum of f32 [16, 32, 512]: to [512] %.1f us, to [32, 512] %.1f us, to [16, 1, 512] %.1f us\n", tb * 1e6,
         tt * 1e6, ts * 1e6);
  arena_free(&ar);
  return failures ? 1 : 0;
}
