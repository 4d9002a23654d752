/* passes/memplan_views.h — the memory plan's column views (memplan_views.c), which memplan.c places. */
#ifndef SHARDC_MEMPLAN_VIEWS_H
#define SHARDC_MEMPLAN_VIEWS_H

#include <stdbool.h>
#include <stdint.h>

#include "ir.h"
#include "memplan_pack.h"
#include "ptrmap.h"

/* Whether slice n is a column view of its input (no copy: its readers take the row stride). */
bool memplan_col_slice(const Node *n);
/* Whether concat n's inputs are written by their producers into their column slots (no copy). */
bool memplan_col_concat(const Node *n);
/* From hold to its release (nested holds count), the two above index each graph's reads once instead of
 * scanning it per question: for a stretch that changes no node's inputs, results nor bodies (memplan.c's
 * placement). */
void memplan_views_hold(void);
void memplan_views_release(void);
/* The byte offset of a column view from its tensor's: slice n's own, or concat n's input i. */
int64_t memplan_col_at(const Node *n, int i);

/* Whether slice n takes whole rows (dim 0) of a contiguous value: a row view of it unless memplan.c keeps a copy. */
bool memplan_row_slice(const Node *n);
/* The byte offset of view n from its input's: a column view's first column, a row view's first row; 0 else. */
int64_t memplan_view_at(const Node *n);
/* Whether the memory plan placed row slice n at its rows of its input's bytes (a row view: codegen copies
 * nothing, the cost model charges nothing). */
bool memplan_row_viewed(const Node *n);

/* Rows in place (memplan_views.c): whether n (a concat or pad along dim 0, a stage_select) may have its
 * inputs written into its rows; the byte offset of input i there. */
bool memplan_rows_node(const Node *n, const PtrMap *uses /* ir_use_counts of n's graph */);
int64_t memplan_rows_at(const Node *n, int i);
/* Whether the plan placed input i of n in its rows of n's output (its producer wrote it there: no copy). */
bool memplan_row_placed(const Node *n, int i);
/* After the in-place aliases (root: interval -> the one merged into, slot: value id -> 1 + interval): each
 * rows-in-place node's inputs' intervals placed with its output's (Interval.with, .delta: memplan_pack's
 * groups), the output's from past the node (a pad's: from it, which writes the rows around its input). */
void memplan_rows_group(const Graph *g, Interval *iv, int niv, const int *root, const int *slot, Arena *tmp);

/* A view that shares its input's memory (a reshape, a cast to its own dtype, a slice's rows,
 * a column view): no bytes of its own, no copy. */
bool memplan_is_view(const Node *n);
/* A value a fusion group (passes/fuse.c) reads from outside and broadcasts (a bias, a norm's weight: fewer elements
 * than the group's shape) lives through the group's last member: each index of its one kernel reads it, so a member
 * placed over its bytes would cut the group (memplan_cut_groups), for the few bytes of a vector. */
void memplan_keep_group_reads(const Graph *g, const int *slot, Interval *iv);
/* Cuts the fusion groups where the placement would make their one kernel race (memplan_groups.c). */
void memplan_cut_groups(Graph *g);

#endif
