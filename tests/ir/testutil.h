/* tests/ir/testutil.h — small helpers for the IR tests: graph building, tensors, checks. */
#ifndef SHARDC_TESTS_IR_TESTUTIL_H
#define SHARDC_TESTS_IR_TESTUTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer.h"
#include "interp.h"
#include "ir.h"

#define T_UNUSED __attribute__((unused))
static int t_failures;

#define CHECK(cond)                                                                \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);     \
      t_failures++;                                                                \
    }                                                                              \
  } while (0)

/* |a - b| <= tol * max(1, |b|) */
#define CHECK_NEAR(a, b, tol)                                                                     \
  do {                                                                                            \
    double a_ = (a), b_ = (b);                                                                    \
    if (!(fabs(a_ - b_) <= (tol) * fmax(1.0, fabs(b_)))) {                                        \
      fprintf(stderr, "%s:%d: %s = %.17g, expected %.17g (tol %g)\n", __FILE__, __LINE__, #a, a_, \
              b_, (double)(tol));                                                                 \
      t_failures++;                                                                               \
    }                                                                                             \
  } while (0)

static T_UNUSED int t_done(const char *name) {
  if (t_failures) {
    fprintf(stderr, "%s: %d check(s) failed\n", name, t_failures);
    return 1;
  }
  printf("%s: ok\n", name);
  return 0;
}

static T_UNUSED Shape S(int rank, ...) {
  int64_t d[IR_MAX_RANK] = {0};
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) d[i] = va_arg(ap, int);
  va_end(ap);
  return ir_shape(rank, d);
}

static const SrcLoc NOLOC = {0};

static T_UNUSED Value *t_input(Graph *g, const char *name, DType dt, Shape s) {
  Attrs a = {0};
  a.name = name;
  return ir_emit(g, OP_INPUT, 0, NULL, dt, s, &a, NOLOC);
}

/* A node with inputs and attrs, shapes inferred; aborts the test if inference fails. */
static T_UNUSED Node *t_node(Graph *g, OpKind op, int nin, Value *const *in, int nout, const Attrs *a) {
  Node *n = ir_node_new(g, op, nin, in, nout, NOLOC);
  if (a) n->a = *a;
  if (!ir_infer(n)) {
    fprintf(stderr, "t_node: inference failed for %s\n", ir_ops[op].name);
    exit(2);
  }
  return n;
}

static T_UNUSED Value *t_op1(Graph *g, OpKind op, Value *x, const Attrs *a) { return t_node(g, op, 1, &x, 1, a)->out[0]; }
static T_UNUSED Value *t_op2(Graph *g, OpKind op, Value *x, Value *y, const Attrs *a) {
  Value *in[2] = {x, y};
  return t_node(g, op, 2, in, 1, a)->out[0];
}
/* A CALL of one argument in g, its body returning neg(arg), appended to g. */
static T_UNUSED Node *t_call(Arena *A, Graph *g, Value *a) {
  Node *call = ir_node_new(g, OP_CALL, 1, &a, 1, NOLOC);
  call->a.name = "f";
  Graph *body = ir_graph_new(A, g);
  body->owner = call;
  call->body = body;
  Value *x = ir_add_arg(body, DT_F32, S(1, 4), "x")->out[0];
  ir_add_result(body, t_op1(body, OP_NEG, x, NULL), NULL);
  CHECK(ir_infer(call));
  return call;
}

static T_UNUSED Tensor t_tensor(DType dt, Shape s, const double *v) {
  Tensor t = tensor_new(dt, s);
  if (v) memcpy(t.data, v, sizeof(double) * (size_t)ir_numel(&s));
  return t;
}

/* Deterministic pseudo-random fill in [-1, 1). */
static T_UNUSED void t_fill(Tensor *t, unsigned seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (int64_t i = 0; i < ir_numel(&t->shape); i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t->data[i] = (double)(x >> 11) * 0x1.0p-52 - 1.0;
  }
}

#endif
