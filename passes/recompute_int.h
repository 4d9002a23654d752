/* passes/recompute_int.h — what passes/recompute.c and recompute_split.c share. */
#ifndef SHARDC_RECOMPUTE_INT_H
#define SHARDC_RECOMPUTE_INT_H

#include "ir.h"
#include "ptrmap.h"

/* The forward REPEAT whose stacked outputs B reads as stacked inputs (the same count, the other
 * direction), or NULL. */
Node *rc_forward_of(const Node *B);
/* zb's W loop (passes/pipe_split.c) paired with forward F: the B loop, of the same forward, whose
 * stacked outputs (the hand-off) W reads; else NULL. */
Node *rc_b_of_w(const Node *W, const Node *F);
/* `zb_w hold(N)` (recompute_split.c): each zb triple of g's layer loops (F, B, W) over more than
 * hold layers cut into two, over its first C - hold layers and its last hold; the lo parts' B and W
 * loops put in lo (their W recomputes, the others hold). Returns the loops split. */
int recompute_split_hold(Graph *g, int64_t hold, PtrMap *lo);

#endif
