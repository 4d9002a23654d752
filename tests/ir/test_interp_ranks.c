/* tests/ir/test_interp_ranks.c — REPEAT scan and CALL semantics, step semantics (next:<name>),
 * sharded parameter initialisation, and collectives / send-recv on 2 and 4 simulated ranks.
 * All values here are exact in fp64, so equality is exact unless stated. */
#include "testutil.h"

static Value *t_state(Graph *g, OpKind op, const char *name, Shape s, InitKind init, double a, double b) {
  Attrs at = {0};
  at.name = name;
  at.init = init;
  at.init_a = a;
  at.init_b = b;
  return ir_emit(g, op, 0, NULL, DT_F32, s, &at, NOLOC);
}

/* repeat 3: c' = c * w + x_t; y_t = c'. w captured through an argument, or directly when direct. */
static void test_repeat(Arena *A, bool reverse, bool direct) {
  Graph *g = ir_graph_new(A, NULL);
  Value *c0 = t_input(g, "c", DT_F32, S(1, 2)), *xs = t_input(g, "xs", DT_F32, S(2, 3, 2)),
        *w = t_input(g, "w", DT_F32, S(1, 2));
  Value *ins[3] = {c0, xs, w};
  Node *rep = ir_node_new(g, OP_REPEAT, direct ? 2 : 3, ins, 2, NOLOC);
  rep->a.count = 3;
  rep->a.ncarry = 1;
  rep->a.nxs = 1;
  rep->a.reverse = reverse;
  rep->a.name = "blocks";
  Graph *b = ir_graph_new(A, g);
  b->owner = rep;
  rep->body = b;
  Value *c = ir_add_arg(b, DT_F32, S(1, 2), "c")->out[0];
  Value *x = ir_add_arg(b, DT_F32, S(1, 2), "x")->out[0];
  Value *wb = direct ? w : ir_add_arg(b, DT_F32, S(1, 2), "w")->out[0];
  Value *cn = t_op2(b, OP_ADD, t_op2(b, OP_MUL, c, wb, NULL), x, NULL);
  ir_add_result(b, cn, "c");
  ir_add_result(b, cn, "y");
  CHECK(ir_infer(rep));
  CHECK(ir_shape_eq(&rep->out[0]->shape, &(Shape){1, {2}, {0}}));
  CHECK(ir_shape_eq(&rep->out[1]->shape, &(Shape){2, {3, 2}, {0}}));
  ir_add_result(g, rep->out[0], "c_final");
  ir_add_result(g, rep->out[1], "ys");
  CHECK(ir_verify(g, "test"));
  Tensor tc = t_tensor(DT_F32, S(1, 2), (double[]){1, 1}), tx = t_tensor(DT_F32, S(2, 3, 2), (double[]){1, 0, 0, 1, 2, 2}),
         tw = t_tensor(DT_F32, S(1, 2), (double[]){2, 3});
  const char *names[] = {"c", "xs", "w"};
  const Tensor *vals[] = {&tc, &tx, &tw};
  Tensor o[2];
  CHECK(interp_eval(g, 3, names, vals, o));
  double fwd_c[] = {14, 32}, fwd_y[] = {3, 3, 6, 10, 14, 32};
  double rev_c[] = {17, 48}, rev_y[] = {17, 48, 8, 16, 4, 5};
  for (int i = 0; i < 2; i++) CHECK(o[0].data[i] == (reverse ? rev_c : fwd_c)[i]);
  for (int i = 0; i < 6; i++) CHECK(o[1].data[i] == (reverse ? rev_y : fwd_y)[i]);
  CHECK(o[1].shape.rank == 2 && o[1].shape.dim[0] == 3);
  tensor_free(&o[0]);
  tensor_free(&o[1]);
  tensor_free(&tc);
  tensor_free(&tx);
  tensor_free(&tw);
}

static void test_call(Arena *A) {
  Graph *g = ir_graph_new(A, NULL);
  Value *a = t_input(g, "a", DT_F32, S(1, 2)), *bv = t_input(g, "b", DT_F32, S(1, 2));
  Node *call = ir_node_new(g, OP_CALL, 2, (Value *[]){a, bv}, 2, NOLOC);
  call->a.name = "f";
  Graph *b = ir_graph_new(A, g);
  b->owner = call;
  call->body = b;
  Value *x = ir_add_arg(b, DT_F32, S(1, 2), "x")->out[0], *y = ir_add_arg(b, DT_F32, S(1, 2), "y")->out[0];
  ir_add_result(b, t_op2(b, OP_MUL, x, y, NULL), NULL);
  ir_add_result(b, t_op2(b, OP_ADD, x, y, NULL), NULL);
  CHECK(ir_infer(call));
  ir_add_result(g, call->out[0], "p");
  ir_add_result(g, call->out[1], "s");
  CHECK(ir_verify(g, "test"));
  Tensor ta = t_tensor(DT_F32, S(1, 2), (double[]){2, 3}), tb = t_tensor(DT_F32, S(1, 2), (double[]){5, 7});
  const char *names[] = {"a", "b"};
  const Tensor *vals[] = {&ta, &tb};
  Tensor o[2];
  CHECK(interp_eval(g, 2, names, vals, o));
  CHECK(o[0].data[0] == 10 && o[0].data[1] == 21 && o[1].data[0] == 7 && o[1].data[1] == 10);
  tensor_free(&o[0]);
  tensor_free(&o[1]);
  tensor_free(&ta);
  tensor_free(&tb);
}

/* PARAM p (ones), result next:p = p + 1, loss = sum(p * x): two steps. */
static void test_steps(Arena *A) {
  Graph *g = ir_graph_new(A, NULL);
  Value *p = t_state(g, OP_PARAM, "p", S(1, 2), INIT_ONES, 0, 0);
  Value *x = t_input(g, "x", DT_F32, S(1, 2));
  ir_add_result(g, t_op1(g, OP_SUM, t_op2(g, OP_MUL, p, x, NULL), NULL), "loss");
  Attrs one = {0};
  one.scalar = 1;
  ir_add_result(g, t_op1(g, OP_ADD_SCALAR, p, &one), "next:p");
  Interp *it = interp_new(g, NULL, 1);
  fprintf(stderr, "(expected runtime error follows)\n");
  CHECK(!interp_step(it)); /* x not set */
  Tensor tx = t_tensor(DT_F32, S(1, 2), (double[]){1, 2});
  interp_set_input(it, -1, "x", &tx);
  CHECK(interp_step(it));
  CHECK(interp_get(it, 0, "loss")->data[0] == 3);
  CHECK(interp_step(it));
  CHECK(interp_get(it, 0, "loss")->data[0] == 6);
  CHECK(interp_get(it, 0, "p")->data[0] == 3); /* "p" names the PARAM's current value */
  CHECK(interp_get(it, 0, "nope") == NULL);
  Tensor tp = t_tensor(DT_F32, S(1, 2), (double[]){10, 10});
  interp_set_state(it, -1, "p", &tp);
  CHECK(interp_step(it));
  CHECK(interp_get(it, 0, "loss")->data[0] == 30);
  tensor_free(&tp);
  tensor_free(&tx);
  interp_free(it);
}

/* A PARAM split over tp holds, on each rank, its block of the logical tensor. */
static void test_sharded_init(Arena *A) {
  Graph *g1 = ir_graph_new(A, NULL), *g2 = ir_graph_new(A, NULL);
  t_state(g1, OP_PARAM, "w", S(2, 4, 6), INIT_NORMAL, 0, 0.02);
  Value *w2 = t_state(g2, OP_PARAM, "w", S(2, 2, 6), INIT_NORMAL, 0, 0.02); /* rows split by tp */
  w2->sharding.split[0] = RT_AX_TP;
  Value *x2 = t_input(g2, "x", DT_F32, S(2, 2, 6));
  x2->sharding.split[0] = RT_AX_TP;
  ir_add_result(g2, x2, "xr");
  MeshMap dp2tp2;
  CHECK(rt_mesh_init(&dp2tp2, 2, 1, 1, 2, 4));
  Interp *a = interp_new(g1, NULL, 42), *b = interp_new(g2, &dp2tp2, 42);
  CHECK(interp_nranks(b) == 4);
  const Tensor *full = interp_get(a, 0, "w");
  CHECK(full && fabs(full->data[0]) > 0 && fabs(full->data[0]) < 0.2);
  for (int r = 0; r < 4; r++) {
    const Tensor *blk = interp_get(b, r, "w");
    int tp = interp_coord(b, r, RT_AX_TP);
    CHECK(blk->shape.dim[0] == 2);
    for (int i = 0; i < 12; i++) CHECK(blk->data[i] == full->data[tp * 12 + i]);
  }
  Tensor logical = tensor_new(DT_F32, S(2, 4, 6));
  for (int i = 0; i < 24; i++) logical.data[i] = i;
  interp_set_input(b, -1, "x", &logical); /* the logical tensor: each rank takes its block */
  CHECK(interp_step(b));
  for (int r = 0; r < 4; r++) CHECK(interp_get(b, r, "xr")->data[0] == 12 * interp_coord(b, r, RT_AX_TP));
  tensor_free(&logical);
  interp_free(a);
  interp_free(b);
}

static Value *coll(Graph *g, OpKind op, Value *x, int axis, ReduceOp red, int tensor_axis, Shape out, int64_t start) {
  Node *n = ir_node_new(g, op, 1, &x, 1, NOLOC);
  n->a.mesh_axis = axis;
  n->a.reduce = red;
  n->a.axis = tensor_axis;
  n->a.start = start;
  n->out[0]->shape = out;
  CHECK(ir_infer(n));
  return n->out[0];
}

static void test_collectives_2x2(Arena *A) {
  Graph *g = ir_graph_new(A, NULL);
  Value *x = t_input(g, "x", DT_F32, S(1, 2));
  ir_add_result(g, coll(g, OP_ALL_REDUCE, x, RT_AX_TP, RED_SUM, 0, S(0), 0), "ar_tp");
  ir_add_result(g, coll(g, OP_ALL_REDUCE, x, RT_AX_DP, RED_SUM, 0, S(0), 0), "ar_dp");
  ir_add_result(g, coll(g, OP_ALL_REDUCE, x, RT_AX_TP, RED_AVG, 0, S(0), 0), "avg_tp");
  ir_add_result(g, coll(g, OP_ALL_REDUCE, x, RT_AX_DP, RED_MAX, 0, S(0), 0), "max_dp");
  ir_add_result(g, coll(g, OP_ALL_GATHER, x, RT_AX_TP, 0, 0, S(1, 4), 0), "ag_tp");
  ir_add_result(g, coll(g, OP_REDUCE_SCATTER, x, RT_AX_TP, 0, 0, S(1, 1), 0), "rs_tp");
  ir_add_result(g, coll(g, OP_BROADCAST, x, RT_AX_DP, 0, 0, S(0), 1), "bc_dp");
  Node *ai = ir_node_new(g, OP_AXIS_INDEX, 0, NULL, 1, NOLOC);
  ai->a.mesh_axis = RT_AX_DP;
  CHECK(ir_infer(ai) && ai->out[0]->dtype == DT_I32);
  ir_add_result(g, ai->out[0], "dp_index");
  CHECK(ir_verify(g, "test"));
  MeshMap dp2tp2;
  CHECK(rt_mesh_init(&dp2tp2, 2, 1, 1, 2, 4));
  Interp *it = interp_new(g, &dp2tp2, 0);
  for (int r = 0; r < 4; r++) {
    Tensor t = t_tensor(DT_F32, S(1, 2), (double[]){r + 1, 10 * (r + 1)});
    interp_set_input(it, r, "x", &t);
    tensor_free(&t);
  }
  CHECK(interp_step(it));
  for (int r = 0; r < 4; r++) {
    int tp = interp_coord(it, r, RT_AX_TP), dp = interp_coord(it, r, RT_AX_DP);
    CHECK(tp == r % 2 && dp == r / 2); /* tp innermost */
    double tsum = dp == 0 ? 3 : 7, dsum = tp == 0 ? 4 : 6;
    const Tensor *t = interp_get(it, r, "ar_tp");
    CHECK(t->data[0] == tsum && t->data[1] == 10 * tsum);
    CHECK(interp_get(it, r, "ar_dp")->data[0] == dsum);
    CHECK(interp_get(it, r, "avg_tp")->data[1] == 10 * tsum / 2);
    CHECK(interp_get(it, r, "max_dp")->data[0] == 3 + tp);
    const Tensor *ag = interp_get(it, r, "ag_tp");
    int r0 = 2 * dp;
    CHECK(ag->shape.dim[0] == 4 && ag->data[0] == r0 + 1 && ag->data[1] == 10 * (r0 + 1) && ag->data[2] == r0 + 2 &&
          ag->data[3] == 10 * (r0 + 2));
    const Tensor *rs = interp_get(it, r, "rs_tp");
    CHECK(rs->shape.dim[0] == 1 && rs->data[0] == (tp == 0 ? tsum : 10 * tsum));
    CHECK(interp_get(it, r, "bc_dp")->data[0] == 2 + tp + 1); /* dp coordinate 1's value */
    CHECK(interp_get(it, r, "dp_index")->data[0] == dp);
  }
  interp_free(it);
}

static void test_ring_4(Arena *A) {
  Graph *g = ir_graph_new(A, NULL);
  Value *x = t_input(g, "x", DT_F32, S(1, 1));
  ir_add_result(g, coll(g, OP_ALL_REDUCE, x, RT_AX_TP, RED_SUM, 0, S(0), 0), "sum");
  Node *s = ir_node_new(g, OP_SEND, 1, &x, 0, NOLOC);
  s->a.mesh_axis = RT_AX_TP;
  s->a.start = 1;
  s->a.tag = 7;
  Node *rv = ir_node_new(g, OP_RECV, 0, NULL, 1, NOLOC);
  rv->a.mesh_axis = RT_AX_TP;
  rv->a.start = -1;
  rv->a.tag = 7;
  rv->out[0]->shape = S(1, 1);
  CHECK(ir_infer(s) && ir_infer(rv));
  ir_add_result(g, rv->out[0], "from_left");
  CHECK(ir_verify(g, "test"));
  MeshMap tp4;
  CHECK(rt_mesh_init(&tp4, 1, 1, 1, 4, 4));
  Interp *it = interp_new(g, &tp4, 0);
  for (int r = 0; r < 4; r++) {
    Tensor t = t_tensor(DT_F32, S(1, 1), (double[]){r + 1});
    interp_set_input(it, r, "x", &t);
    tensor_free(&t);
  }
  CHECK(interp_step(it));
  for (int r = 0; r < 4; r++) {
    CHECK(interp_get(it, r, "sum")->data[0] == 10);
    CHECK(interp_get(it, r, "from_left")->data[0] == (r + 3) % 4 + 1);
  }
  interp_free(it);
}

int main(void) {
  Arena A;
  arena_init(&A);
  test_repeat(&A, false, false);
  test_repeat(&A, true, false);
  test_repeat(&A, false, true);
  test_call(&A);
  test_steps(&A);
  test_sharded_init(&A);
  test_collectives_2x2(&A);
  test_ring_4(&A);
  arena_free(&A);
  return t_done("test_interp_ranks");
}
