/* ir/print.h — the text printer behind `--dump-ir`, and Graphviz output.
 *
 * Format (deterministic; golden files are made from it):
 *   %N : f32[batch=4, seq=64, 768]{S(tp)@2, P(dp)} = op(%a, %b)  attr=value ...   # file:line:col
 * Values are numbered in print order (unique across nested bodies). A dim bound to a symbol
 * prints as sym=value. Shardings print only when not replicated: S(axis)@dim for a dim split
 * over a mesh axis, P(axis) for a partial sum still owed over an axis. Region ops print
 * their body indented between braces, inputs grouped `carry | xs | captured` for repeat,
 * and end with `yield`. The module printer adds a header (model, topology, plan, recipe), the
 * graph's results, a parameter table grouped by layer path, and FLOPs per token.
 */
#ifndef SHARDC_PRINT_H
#define SHARDC_PRINT_H

#include <stdio.h>

#include "module.h"

/* The header, the rank classes, the graph (with_ir; else one line that counts its nodes), then the
 * parameter table, FLOPs and communication reports (`shardc plan` without and with --ir). */
void ir_print_module(FILE *f, const Module *m, bool with_ir);
/* Its first lines: `module NAME` and the topology, plan and recipe (what ir/read.c reads back). */
void ir_print_module_header(FILE *f, const Module *m);
/* How a location's file is shown: the path after models/ (or its last part). */
const char *ir_loc_file_name(const char *file);
/* The graph alone (dumps after single passes); symbols print as plain numbers. */
void ir_print_graph(FILE *f, const Graph *g);
/* The same, with the module's dim symbols. */
void ir_print_graph_syms(FILE *f, const Graph *g, const Module *m);
/* Graphviz: one node per op, REPEAT/CALL bodies as clusters. */
void ir_print_dot(FILE *f, const Module *m);

/* A value's logical shape: its local dims times the degree of the mesh axis splitting each. */
Shape ir_logical_shape(const Module *m, const Value *v);
/* Trainable parameters, logical (unsharded) count: every PARAM, times the counts of enclosing repeats. */
int64_t ir_param_count(const Module *m);
/* Model FLOPs per token (ir/flops.c): matmuls 2*m*n*k, attention QK^T and AV (4*S*T*hd per head, unmasked count)
 * in the forward graph (the nodes the loss depends on); training = 3 x forward. */
double ir_flops_per_token(const Module *m, bool training);
/* Tokens one optimizer step trains on, over every rank (the targets of the loss's cross-entropies). */
int64_t ir_tokens_per_step(const Module *m);
/* Both of the above from one walk of the program: returns the training FLOPs per token. */
double ir_training_flops(const Module *m, int64_t *tokens_per_step);

#endif
