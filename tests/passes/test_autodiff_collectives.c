/* tests/passes/test_autodiff_collectives.c — autodiff through collectives on 2 simulated tp ranks.
 *
 * Graphs that already hold collectives (row-parallel matmul + all_reduce; reduce_scatter then
 * a sharded loss summed by all_reduce; all_gather of a sharded param) are differentiated under
 * the replicated-loss convention documented in passes/autodiff.c, run by the interpreter on
 * 2 tp ranks, and each rank's gradient block, assembled into the logical gradient, must match
 * central differences of the logical params within 1e-6 * max(1, |grad|). Every rank must see
 * the same loss.
 */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "diag.h"
#include "passes.h"
#include "tb.h"

#define D DT_F64
#define TOL 1e-6
#define TP 2

static int fails;

static Value *sharded_param(Graph *g, const char *name, Shape local, int dim) {
  Value *p = tb_param(g, name, D, local, INIT_NORMAL, 0, 1);
  p->sharding.split[dim] = RT_AX_TP;
  return p;
}

static Shape logical_of(const Value *v) {
  Shape s = v->shape;
  for (int d = 0; d < s.rank; d++)
    if (v->sharding.split[d] == RT_AX_TP) s.dim[d] *= TP;
  return s;
}

/* Rank r's local block of v, written into the logical tensor t (or read from it). */
static void block(const Value *v, int r, Tensor *logical, double *local, bool to_logical) {
  int64_t n = ir_numel(&v->shape);
  for (int64_t i = 0; i < n; i++) {
    int64_t rem = i, li = 0, mul = 1;
    for (int d = v->shape.rank - 1; d >= 0; d--) {
      int64_t c = rem % v->shape.dim[d];
      rem /= v->shape.dim[d];
      if (v->sharding.split[d] == RT_AX_TP) c += r * v->shape.dim[d];
      li += c * mul;
      mul *= logical->shape.dim[d];
    }
    if (to_logical) logical->data[li] = local[i];
    else local[i] = logical->data[li];
  }
}

static double loss_of(Interp *it) {
  if (!interp_step(it)) die("interp_step");
  double l0 = interp_get(it, 0, "loss")->data[0];
  for (int r = 1; r < TP; r++) {
    double lr = interp_get(it, r, "loss")->data[0];
    if (fabs(lr - l0) > 1e-12 * fmax(1, fabs(l0))) {
      fprintf(stderr, "FAIL: rank %d loss %.15g differs from rank 0's %.15g\n", r, lr, l0);
      fails++;
    }
  }
  return l0;
}

static void check(const char *label, Module *m, Tensor rt) {
  if (!pass_autodiff(m) || !ir_verify(m->graph, "autodiff")) {
    fprintf(stderr, "FAIL %s: autodiff/verify\n", label);
    fails++;
    return;
  }
  Graph *g = m->graph;
  MeshMap tp;
  if (!rt_mesh_init(&tp, 1, 1, 1, TP, TP)) abort();
  Interp *it = interp_new(g, &tp, 7);
  interp_set_input(it, -1, "r", &rt);
  for (int i = 0; i < g->nnodes; i++) {
    Node *pn = g->nodes[i];
    if (pn->op != OP_PARAM) continue;
    Value *p = pn->out[0];
    loss_of(it);
    Shape ls = logical_of(p);
    Tensor grad = tensor_new(D, ls), x = tensor_new(D, ls);
    char gname[64];
    snprintf(gname, sizeof gname, "grad:%s", pn->a.name);
    for (int rk = 0; rk < TP; rk++) {
      block(p, rk, &grad, interp_get(it, rk, gname)->data, true);
      block(p, rk, &x, interp_get(it, rk, pn->a.name)->data, true);
    }
    double worst = 0;
    for (int64_t e = 0; e < ir_numel(&ls); e++) {
      double x0 = x.data[e], h = 1e-5 * fmax(1, fabs(x0));
      x.data[e] = x0 + h;
      interp_set_state(it, -1, pn->a.name, &x);
      double lp = loss_of(it);
      x.data[e] = x0 - h;
      interp_set_state(it, -1, pn->a.name, &x);
      double lm = loss_of(it);
      x.data[e] = x0;
      interp_set_state(it, -1, pn->a.name, &x);
      double fd = (lp - lm) / (2 * h), err = fabs(fd - grad.data[e]) / fmax(1, fabs(grad.data[e]));
      worst = fmax(worst, err);
      if (!(err <= TOL)) {
        fprintf(stderr, "FAIL %s: d loss / d %s[%lld]: autodiff %.12g, finite differences %.12g\n", label, pn->a.name,
                (long long)e, grad.data[e], fd);
        fails++;
      }
    }
    printf("  %-16s %-4s %3lld entries on %d ranks, worst rel err %.2e\n", label, pn->a.name, (long long)ir_numel(&ls),
           TP, worst);
    tensor_free(&grad);
    tensor_free(&x);
  }
  interp_free(it);
}

int main(void) {
  {
    Arena a;
    arena_init(&a);
    Module *m = tb_module(&a, "all_reduce");
    Graph *g = m->graph;
    Value *yp = tb_op2(g, OP_MATMUL, sharded_param(g, "A", tb_shape(2, 3, 2), 1), sharded_param(g, "x", tb_shape(2, 2, 1), 0), NULL);
    Attrs ar = {.mesh_axis = RT_AX_TP, .reduce = RED_SUM};
    Value *y = tb_op1(g, OP_TANH, tb_op1(g, OP_ALL_REDUCE, yp, &ar), NULL);
    Value *r = tb_input(g, "r", D, y->shape);
    ir_add_result(g, tb_op1(g, OP_SUM, tb_op2(g, OP_MUL, y, r, NULL), NULL), "loss");
    Tensor rt = tb_randn(D, y->shape, 3, 1);
    check("all_reduce", m, rt);
    tensor_free(&rt);
    arena_free(&a);
  }
  {
    Arena a;
    arena_init(&a);
    Module *m = tb_module(&a, "reduce_scatter");
    Graph *g = m->graph;
    Value *yp = tb_op2(g, OP_MATMUL, sharded_param(g, "A", tb_shape(2, 4, 2), 1), sharded_param(g, "x", tb_shape(2, 2, 1), 0), NULL);
    Attrs rs = {.mesh_axis = RT_AX_TP, .axis = 0};
    Value *y = tb_shaped(g, OP_REDUCE_SCATTER, 1, &yp, D, tb_shape(2, 4 / TP, 1), &rs);
    y = tb_op1(g, OP_TANH, y, NULL);
    Value *r = tb_input(g, "r", D, y->shape);
    r->sharding.split[0] = RT_AX_TP;
    Value *l = tb_op1(g, OP_SUM, tb_op2(g, OP_MUL, y, r, NULL), NULL);
    Attrs ar = {.mesh_axis = RT_AX_TP, .reduce = RED_SUM};
    ir_add_result(g, tb_op1(g, OP_ALL_REDUCE, l, &ar), "loss");
    Tensor rt = tb_randn(D, tb_shape(2, 4, 1), 4, 1); /* logical */
    check("reduce_scatter", m, rt);
    tensor_free(&rt);
    arena_free(&a);
  }
  {
    Arena a;
    arena_init(&a);
    Module *m = tb_module(&a, "all_gather");
    Graph *g = m->graph;
    Value *x = sharded_param(g, "x", tb_shape(2, 2, 3), 0);
    Attrs ag = {.mesh_axis = RT_AX_TP, .axis = 0};
    Value *y = tb_op1(g, OP_TANH, tb_shaped(g, OP_ALL_GATHER, 1, &x, D, tb_shape(2, 4, 3), &ag), NULL);
    Value *r = tb_input(g, "r", D, y->shape);
    ir_add_result(g, tb_op1(g, OP_SUM, tb_op2(g, OP_MUL, y, r, NULL), NULL), "loss");
    Tensor rt = tb_randn(D, y->shape, 5, 1);
    check("all_gather", m, rt);
    tensor_free(&rt);
    arena_free(&a);
  }
  printf("%d failures (tolerance: |fd - grad| <= %g * max(1, |grad|))\n", fails, TOL);
  return fails ? 1 : 0;
}
