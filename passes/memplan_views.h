/* passes/memplan_views.h — the memory plan's column views (memplan_views.c), which memplan.c places. */
#ifndef SHARDC_MEMPLAN_VIEWS_H
#define SHARDC_MEMPLAN_VIEWS_H

#include <stdbool.h>
#include <stdint.h>

#include "ir.h"

/* Whether slice n is a column view of its input (no copy: its readers take the row stride). */
bool memplan_col_slice(const Node *n);
/* Whether concat n's inputs are written by their producers into their column slots (no copy). */
bool memplan_col_concat(const Node *n);
/* The byte offset of a column view from its tensor's: slice n's own, or concat n's input i. */
int64_t memplan_col_at(const Node *n, int i);

/* Whether slice n takes whole rows (dim 0) of a contiguous value: a row view of it unless memplan.c keeps a copy. */
bool memplan_row_slice(const Node *n);
/* The byte offset of view n from its input's: a column view's first column, a row view's first row; 0 else. */
int64_t memplan_view_at(const Node *n);

/* A view that shares its input's memory (a reshape, a cast to its own dtype, a slice's rows,
 * a column view): no bytes of its own, no copy. */
bool memplan_is_view(const Node *n);
/* Cuts the fusion groups where the placement would make their one kernel race (memplan_groups.c). */
void memplan_cut_groups(Graph *g);

#endif
