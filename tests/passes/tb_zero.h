/* tests/passes/tb_zero.h — ZeRO-2/3 under pipeline parallelism, checked on a compiled plan. */
#ifndef SHARDC_TESTS_TB_ZERO_H
#define SHARDC_TESTS_TB_ZERO_H

#include "module.h"

/* m (pp > 1, M micro-batches) under zero >= 2 and dp > 1, as on even stages (passes/zero.c,
 * passes/zero_sums.c): every backward loop reduce-scatters its layer's gradient over dp (at least M of
 * them), no reduce-scatter or gather before the update of a stage's whole stack (split over pp); under
 * zero 3 the top level's gathered parameters (an all-gather's output and the slices, reshapes and
 * casts of it, each to its last reader) live at once at most two layers' f32 weights and the largest
 * other parameter's (the embedding). Prints a FAIL line per broken check; returns their count (0 for
 * any other plan). */
int tb_check_zero_pp(const Module *m, int64_t M, const char *what);
/* The dp reduce-scatters inside the bodies of g's loops (ZeRO-2/3: each micro-batch's layer gradients
 * reduce-scattered in its backward loop), the top level's not counted. */
int tb_dp_scatters_in_loops(const Graph *g);
/* The most dp reduce-scatters in one innermost loop body of g (a layer's backward). */
int tb_dp_most_scatters_in_a_loop(const Graph *g);
/* m under zero 2 or 3 with `coalesce on` (passes/zero_coalesce.c), dp > 1: each layer loop's body
 * reduce-scatters its layer's gradients in one at most (before: one per bucket, and one per gradient
 * split along a later dim) and, under zero 3, gathers its layer's split parameters in one dp
 * all-gather at most (before: one per split tensor). Returns FAIL lines. */
int tb_check_zero_coalesced(const Module *m, const char *what);

/* m under zero >= 2, dp > 1 (passes/zero_defer.c; under pp the stages' B, zb: W, instructions' loops): no
 * backward loop iteration (a loop of two layers or more) reads what its dp reduce-scatters return (they are
 * waited in the next iteration, or after the loop), and where the memory plan ran each has its wait placed
 * (Node.defer_wait); under `defer_waits off` none has (each waited in its own iteration). Returns FAIL
 * lines (0 for any other plan). */
int tb_check_scatters_deferred(const Module *m, const char *what);

/* m under pp, zb and zero >= 2, dp > 1 (passes/zero_late.c): the top level's dp reduce-scatters of a
 * non-layer gradient (each micro-batch's embedding gradient on the first stage) issued right after their
 * stage's W loop: want of them, and none still issued before the W loop that follows it (its next loop).
 * Returns FAIL lines. */
int tb_check_zero_late(const Module *m, int want, const char *what);

#endif
