/* passes/cost_llvm.h — which nodes of a CPU trainer the LLVM-built kernels run, and how many calls each makes
 * (Module.cpu_llvm_kernels: main.c's --cpu-kernels decision). codegen/target_llvm.c emits its kernels by these
 * answers and passes/cost.c counts and prices the trainer's kernel calls by the same: one elementwise kernel for
 * a fusion group (passes/fuse.c) whose members and outside inputs it can index, one per elementwise node
 * otherwise, its own kernels for AdamW, the norms (the backward: three) and the cross-entropy; the C kernels'
 * calls for the rest. */
#ifndef SHARDC_COST_LLVM_H
#define SHARDC_COST_LLVM_H

#include <stdbool.h>
#include <stdint.h>

#include "ir.h"

enum { LLK_MAX_EW = 32 }; /* members and outside inputs of one elementwise kernel */

/* How an elementwise kernel indexes one of its inputs, given the output's flat index i = r * inner + j. */
typedef enum {
  LLK_FULL,   /* the output's shape: [i] */
  LLK_SCALAR, /* one element: [0] */
  LLK_ROW,    /* the output's trailing dims (a bias): [j] */
  LLK_COL,    /* the output's leading dims (a per-row value): [r] */
} LlkIndex;

/* How the run reads an input of shape X for its output shape S: by the output's index, one element, by column
 * (X is S's trailing dims), by row (S's leading dims); *inner: the row length it implies (0: none). false when
 * X broadcasts in another way. */
bool llk_index_of(const Shape *S, const Shape *X, LlkIndex *how, int64_t *inner);

/* Whether one LLVM kernel runs the elementwise run mem[0 .. n) (one node, or a fusion group's members in order)
 * reading ext[0 .. next) from outside: f32 throughout, each input indexable against the first member's output
 * with one row length. idx (NULL: not wanted): how each input is indexed; *inner (NULL: not wanted): the row
 * length (0: a flat loop). */
bool llk_ew_run_ok(const Node *const *mem, int n, const Value *const *ext, int next, LlkIndex *idx, int64_t *inner);

/* The LLVM kernels' calls for node n outside an elementwise run: 1 for AdamW, a norm's forward and the
 * cross-entropy; 3 for a norm's backward (the rows' statistics, the weight's gradients, the input's); -1 where
 * they do not run it (another op, or not f32: the C kernels'). */
int llk_node_calls(const Node *n);

#endif
