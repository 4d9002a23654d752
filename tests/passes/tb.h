/* tests/passes/tb.h — a tiny graph builder and the finite-difference checker shared by the pass tests. */
#ifndef SHARDC_TESTS_TB_H
#define SHARDC_TESTS_TB_H

#include "interp.h"
#include "module.h"
#include "../check.h" /* CHECK */

/* A fresh module with an empty top graph, default plan and recipe. */
Module *tb_module(Arena *a, const char *name);

Value *tb_param(Graph *g, const char *name, DType dt, Shape s, InitKind init, double a, double b);
Value *tb_input(Graph *g, const char *name, DType dt, Shape s);
/* A node with one output typed by ir_infer (dies on an inference error). */
Value *tb_op(Graph *g, OpKind op, int nin, Value *const *in, const Attrs *a);
Value *tb_op1(Graph *g, OpKind op, Value *x, const Attrs *a);
Value *tb_op2(Graph *g, OpKind op, Value *x, Value *y, const Attrs *a);
/* Ops whose output shape the builder states (reshape, reduce_sum, broadcast_to, const, iota). */
Value *tb_shaped(Graph *g, OpKind op, int nin, Value *const *in, DType dt, Shape s, const Attrs *a);
/* A multi-output node typed by ir_infer. */
Node *tb_node(Graph *g, OpKind op, int nin, Value *const *in, int nout, const Attrs *a);
/* REPEAT over `body` (built by the caller with ir_add_arg and ir_add_result). */
Node *tb_repeat(Graph *g, Graph *body, int nin, Value *const *in, int64_t count, int ncarry, int nxs,
                const char *name);

Shape tb_shape(int rank, ...); /* dims as int */

/* Deterministic pseudo-random tensors for inputs. */
Tensor tb_randn(DType dt, Shape s, uint64_t seed, double scale);
Tensor tb_randint(Shape s, uint64_t seed, int64_t lo, int64_t hi);

/* ---- a memory plan's facts (the memplan tests) ---- */

/* Position of node n in g (-1: not there). */
int tb_pos_of(const Graph *g, const Node *n);
/* The last position of g reading v (g->nnodes when v is a result; its def's position when unread). */
int tb_last_use(const Graph *g, const Value *v);
/* Bytes of v's tensor. */
int64_t tb_bytes_of(const Value *v);
/* The bytes v occupies over every iteration of its graph (a stacked value: offset + i x stride):
 * [lo, hi); false for ARGs and unplaced values (the memory plan's layout, read independently of it). */
bool tb_span(const Value *v, int64_t *lo, int64_t *hi);

/* ---- equivalence of a partitioned program with the single-rank one (the *_equiv tests) ---- */

/* Two training steps of ref (one rank) and of the partitioned pm on the same batch (ptok / ptgt: how
 * pm's inputs hold it, e.g. split into micro-steps), compared after each by tb_compare_runs (label
 * and what name the case). Returns the failures (an interpreter error is one). */
int tb_equiv_steps(const Module *ref, const Module *pm, const Tensor *tok, const Tensor *tgt, const Tensor *ptok,
                   const Tensor *ptgt, const char *label, const char *what, double tol, bool replicas);

/* A fresh interpreter of m holding from's parameters and optimizer state, not the weights' bf16 copies
 * (derived again from the parameters, as a resumed trainer does): a resume. *missing (if non-NULL):
 * how many of m's parameters and states `from` lacks (left at m's initialization). */
Interp *tb_resumed(const Module *m, const Interp *from, int *missing);
/* tb_equiv_steps with pm's second step started from the single rank's state after the first (tb_resumed):
 * each step compared from the same state (bf16, where run-on copies may round a step apart).
 * An AdamW parameter's next value that misses tol is compared instead with the single rank's update
 * (its own ADAMW_UPDATE node, evaluated by the interpreter in fp64 from the state both programs started
 * the step from) applied to the partitioned program's gradient, within the same tol: AdamW's step
 * lr * m / (sqrt(v) + eps) has slope up to lr / eps in a gradient element of size ~eps, so an error in a
 * small element, within tol of its tensor's largest (which the gradient's own comparison bounds), can
 * move that element's update by far more than tol of the parameter (fuzz_plans seed 10926460: a
 * gradient element 2.3e-6 off by 4e-9, 1.3e-8 of its tensor, moves the parameter 2.6e-6, 2.64e-4 of it).
 * The loss, gradients, moments and f32 comparisons are unchanged; the replay first reproduces the
 * single rank's own update from its own gradient (else it is not used). */
int tb_equiv_steps_resumed(const Module *ref, const Module *pm, const Tensor *tok, const Tensor *tgt,
                           const Tensor *ptok, const Tensor *ptgt, const char *label, const char *what, double tol,
                           bool replicas);

/* tb_equiv_steps with pm's inputs the same batch split into m micro-steps: tok / tgt [B, S] viewed as
 * [m, B / m, S] (the accumulation and pipeline programs' inputs). */
int tb_equiv_micro(const Module *ref, const Module *pm, const Tensor *tok, const Tensor *tgt, int64_t m,
                   const char *label, const char *what, double tol, bool replicas);

#define TB_LR 1e-2 /* the learning rate tb_feed_step feeds */
/* Sets a training step's inputs on every rank: tokens, targets, lr = TB_LR, step (where the program has one). */
void tb_feed_step(Interp *it, const Tensor *tok, const Tensor *tgt, int step);
/* max |ref - t| / max |ref| (the absolute difference when ref is 0); infinity when shapes differ. */
double tb_rel_err(const Tensor *ref, const Tensor *t);
/* Compares every named result of ref's graph (run by ri) with the partitioned run pi, logically:
 * relative error <= tol and, with spread, the spread between replicas <= tol (relative to the
 * tensor's scale); prints one summary line. Returns the number of failures. */
int tb_compare_runs(const Graph *ref, const Interp *ri, const Interp *pi, const char *what, int step, double tol,
                    bool spread);

typedef struct {
  const char *name; /* INPUT name */
  Tensor t;         /* its value */
} TbFeed;

/* Records every value's dtype and shape, runs pass_shape, and counts differences:
 * checks that the shapes a pass set by hand agree with ir_infer. */
int tb_shapes_stable(Module *m);

/* With jitter > 0, every param first gets normal(0, jitter) noise added to its initial value
 * (so small-init models have gradients of a useful size).
 * Runs the graph once (after pass_autodiff) and compares each PARAM's "grad:<name>" with
 * central differences of "loss" at up to `per_param` entries; |fd - grad| must be
 * <= tol * max(1, |grad|), and must not be zero everywhere. Prints a line per param; returns the number of failures. */
int tb_fd_check(Module *m, int nfeed, const TbFeed *feeds, int per_param, double h, double tol, double jitter,
                const char *label);

#endif
