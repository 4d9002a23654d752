/* codegen/emit_int.h — what emit.c and emit_coll.c (the collectives) share; not for other files. */
#pragma once

#include "cg.h"

/* Queues the wait of node n's asynchronous collective (tag) at node `at` of its graph: emitted before the
 * first reader of its outputs (emit.c). */
void add_wait(Cg *c, const Node *n, int at, int tag);
/* The C condition under which an all_gather `skiplast` runs (its loop not on the last iteration);
 * NULL for every other node. */
const char *skip_cond(Cg *c, const Node *n);
/* Whether n talks to other ranks (a collective, a transfer, a rank-dependent op). */
bool is_multi_rank_op(const Node *n);
/* The SEND that pairs with the RECV at position i of g (a ring shift), or NULL. */
const Node *send_of(const Graph *g, int i);
void emit_all_reduce(Cg *c, Node *n);
/* ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, BROADCAST and SHARD_SLICE. */
void emit_collective(Cg *c, const Node *n);
/* SEND + RECV: a pipeline transfer, or a ring shift started at the RECV. */
void emit_p2p(Cg *c, Node *n);
