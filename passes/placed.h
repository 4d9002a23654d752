/* passes/placed.h — what the passes after the memory plan (epilogue.c, fuse_ce.c) ask of a placed
 * graph before they let a kernel write a value at another place in the program than planned. */
#ifndef SHARDC_PLACED_H
#define SHARDC_PLACED_H

#include "ir.h"

/* Whether a's and b's bytes meet over their graphs' iterations (memplan_span; ARGs and unplaced
 * values meet nothing). */
bool placed_meets(const Value *a, const Value *b);
/* Whether w's bytes meet a value node n reads or writes other than skip (NULL: none). */
bool placed_meets_node(const Value *w, const Node *n, const Value *skip);
/* Whether w may be written at position from instead of its definition's, later in g: no node in
 * between has a region body or reads or writes bytes of w's (skip: a value that is never written). */
bool placed_write_early(const Graph *g, const Value *w, int from, const Value *skip);

#endif
