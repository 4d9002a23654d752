/* passes/zero.h — the `zero` pass's pieces shared between its files (passes/zero.c, zero_sums.c). */
#ifndef SHARDC_ZERO_H
#define SHARDC_ZERO_H

#include "ir.h"

/* to: from's type with dim d split dp ways over dp. */
void zero_split_type(Value *to, const Value *from, int d, int dp);
/* A sum all-reduce over dp alone. */
bool zero_is_dp_sum(const Node *n);
/* Removes member k (input and output) from a variadic all-reduce; the node goes when none is left. */
void zero_drop_member(Graph *g, Node *ar, int k);
/* ZeRO-2/3 under accumulation (passes/zero_sums.c): the layer gradient gr (output of the peeled
 * backward loop R2 in g, sharded along d) is summed as dp shards, each micro-step's reduce-scattered
 * inside its backward loop. Returns gr retyped as the shard, or NULL (nothing changed). */
Value *zero_scatter_sums(Graph *g, Node *R2, Value *gr, int d, int dp);
/* The same for a gradient all-reduced at the top (gr: the all-reduce's output in g): the
 * embedding's, the head's, the final norm's. Returns the shard that stands for gr, or NULL. */
Value *zero_scatter_sums_top(Graph *g, Value *gr, int d, int dp);
/* Groups the dp reduce-scatters of body b into runs of up to cap bytes, each where its last is ready. */
void zero_group_scatters(Graph *b, int64_t cap);

#endif
