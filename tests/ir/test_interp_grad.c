/* tests/ir/test_interp_grad.c — every backward op against central finite differences of its
 * forward op, in fp64: L = sum(fwd(x) * r) for a fixed random r; dL/dx by (L(x+h) - L(x-h)) / 2h
 * with h = 1e-5 must equal bwd(x, r) within 1e-6 relative (|err| <= 1e-6 * max(1, |grad|)). */
#include "testutil.h"

#define H 1e-5
#define TOL 1e-6

typedef struct {
  const char *names[8]; /* input names, "r" last */
  Tensor vals[8];       /* their values */
  int n;                /* inputs */
} Inputs;

static double eval_scalar(const Graph *g, const Inputs *in) {
  const Tensor *p[8];
  for (int i = 0; i < in->n; i++) p[i] = &in->vals[i];
  Tensor out[4];
  if (!interp_eval(g, in->n, in->names, p, out)) {
    fprintf(stderr, "evaluation failed\n");
    exit(2);
  }
  double v = out[0].data[0];
  for (int i = 0; i < g->nresults; i++) tensor_free(&out[i]);
  return v;
}

/* Compares `analytic` with finite differences of the loss graph in input `which`. */
static void fd_check(const char *what, const Graph *loss, Inputs *in, int which, const Tensor *analytic) {
  Tensor *x = &in->vals[which];
  CHECK(ir_shape_eq(&x->shape, &analytic->shape));
  int bad = 0;
  for (int64_t i = 0; i < ir_numel(&x->shape); i++) {
    double x0 = x->data[i];
    x->data[i] = x0 + H;
    double lp = eval_scalar(loss, in);
    x->data[i] = x0 - H;
    double lm = eval_scalar(loss, in);
    x->data[i] = x0;
    double fd = (lp - lm) / (2 * H), an = analytic->data[i];
    if (!(fabs(fd - an) <= TOL * fmax(1.0, fabs(an)))) {
      if (bad++ < 5) fprintf(stderr, "%s: d/d%s[%lld]: analytic %.12g, finite difference %.12g\n", what,
                             in->names[which], (long long)i, an, fd);
      t_failures++;
    }
  }
}

/* Adds sum(y * r) as result 0 of g, with r an INPUT "r" of y's shape. */
static void add_loss(Graph *g, Value *y) {
  Value *r = t_input(g, "r", DT_F64, y->shape);
  ir_add_result(g, t_op1(g, OP_SUM, t_op2(g, OP_MUL, y, r, NULL), NULL), "L");
}

static void inputs_free(Inputs *in) {
  for (int i = 0; i < in->n; i++) tensor_free(&in->vals[i]);
}

static Tensor rnd(Shape s, unsigned seed) {
  Tensor t = tensor_new(DT_F64, s);
  t_fill(&t, seed);
  return t;
}

/* Runs the backward graph bg (inputs in->names) and returns its results in outs. */
static void eval_bwd(const Graph *bg, const Inputs *in, Tensor *outs) {
  const Tensor *p[8];
  for (int i = 0; i < in->n; i++) p[i] = &in->vals[i];
  if (!interp_eval(bg, in->n, in->names, p, outs)) {
    fprintf(stderr, "backward evaluation failed\n");
    exit(2);
  }
}

static void test_act(Arena *A, OpKind fwd, OpKind bwd) {
  Shape s = S(2, 3, 4);
  Graph *lg = ir_graph_new(A, NULL), *bg = ir_graph_new(A, NULL);
  add_loss(lg, t_op1(lg, fwd, t_input(lg, "x", DT_F64, s), NULL));
  Value *x = t_input(bg, "x", DT_F64, s), *r = t_input(bg, "r", DT_F64, s);
  ir_add_result(bg, t_op2(bg, bwd, x, r, NULL), "dx");
  Inputs in = {{"x", "r"}, {rnd(s, 1), rnd(s, 2)}, 2};
  for (int i = 0; i < 12; i++) in.vals[0].data[i] *= 3;
  Tensor dx;
  eval_bwd(bg, &in, &dx);
  fd_check(ir_ops[bwd].name, lg, &in, 0, &dx);
  tensor_free(&dx);
  inputs_free(&in);
}

static void test_norm(Arena *A, bool layer) {
  Shape xs = S(3, 2, 3, 5), ws = S(1, 5);
  Attrs at = {0};
  at.eps = 1e-5;
  Graph *lg = ir_graph_new(A, NULL), *bg = ir_graph_new(A, NULL);
  Value *x = t_input(lg, "x", DT_F64, xs), *w = t_input(lg, "w", DT_F64, ws), *b = t_input(lg, "b", DT_F64, ws);
  Value *y = layer ? t_node(lg, OP_LAYERNORM, 3, (Value *[]){x, w, b}, 1, &at)->out[0] : t_op2(lg, OP_RMSNORM, x, w, &at);
  add_loss(lg, y);
  x = t_input(bg, "x", DT_F64, xs);
  w = t_input(bg, "w", DT_F64, ws);
  t_input(bg, "b", DT_F64, ws);
  Value *r = t_input(bg, "r", DT_F64, xs);
  Node *n = t_node(bg, layer ? OP_LAYERNORM_BWD : OP_RMSNORM_BWD, 3, (Value *[]){x, w, r}, layer ? 3 : 2, &at);
  for (int i = 0; i < n->nout; i++) ir_add_result(bg, n->out[i], NULL);
  Inputs in = {{"x", "w", "b", "r"}, {rnd(xs, 3), rnd(ws, 4), rnd(ws, 5), rnd(xs, 6)}, 4};
  Tensor d[3];
  eval_bwd(bg, &in, d);
  const char *nm = layer ? "layernorm_bwd" : "rmsnorm_bwd";
  for (int i = 0; i < n->nout; i++) {
    fd_check(nm, lg, &in, i, &d[i]);
    tensor_free(&d[i]);
  }
  inputs_free(&in);
}

static void test_sdpa(Arena *A, int heads, int kv, bool causal) {
  int B = 2, Sq = 4, hd = 2;
  Shape qs = S(3, B, Sq, heads * hd), ks = S(3, B, Sq, kv * hd);
  Attrs at = {0};
  at.heads = heads;
  at.kv_heads = kv;
  at.causal = causal;
  Graph *lg = ir_graph_new(A, NULL), *bg = ir_graph_new(A, NULL);
  Value *q = t_input(lg, "q", DT_F64, qs), *k = t_input(lg, "k", DT_F64, ks), *v = t_input(lg, "v", DT_F64, ks);
  add_loss(lg, t_node(lg, OP_SDPA, 3, (Value *[]){q, k, v}, 2, &at)->out[0]);
  q = t_input(bg, "q", DT_F64, qs);
  k = t_input(bg, "k", DT_F64, ks);
  v = t_input(bg, "v", DT_F64, ks);
  Value *r = t_input(bg, "r", DT_F64, qs);
  Node *f = t_node(bg, OP_SDPA, 3, (Value *[]){q, k, v}, 2, &at);
  Node *n = t_node(bg, OP_SDPA_BWD, 6, (Value *[]){q, k, v, f->out[0], f->out[1], r}, 3, &at);
  for (int i = 0; i < 3; i++) ir_add_result(bg, n->out[i], NULL);
  Inputs in = {{"q", "k", "v", "r"}, {rnd(qs, 7), rnd(ks, 8), rnd(ks, 9), rnd(qs, 10)}, 4};
  for (int i = 0; i < ir_numel(&qs); i++) in.vals[0].data[i] *= 2;
  Tensor d[3];
  eval_bwd(bg, &in, d);
  for (int i = 0; i < 3; i++) {
    fd_check("sdpa_bwd", lg, &in, i, &d[i]);
    tensor_free(&d[i]);
  }
  inputs_free(&in);
}

static void test_ce(Arena *A) {
  Shape ls = S(2, 4, 6), ts = S(1, 4);
  Attrs at = {0};
  at.len = 5; /* one padded vocabulary column */
  Graph *lg = ir_graph_new(A, NULL), *bg = ir_graph_new(A, NULL);
  Value *l = t_input(lg, "logits", DT_F64, ls), *t = t_input(lg, "t", DT_I32, ts);
  add_loss(lg, t_op2(lg, OP_CROSS_ENTROPY, l, t, &at));
  l = t_input(bg, "logits", DT_F64, ls);
  t = t_input(bg, "t", DT_I32, ts);
  Value *r = t_input(bg, "r", DT_F64, S(0));
  ir_add_result(bg, t_node(bg, OP_CROSS_ENTROPY_BWD, 3, (Value *[]){l, t, r}, 1, &at)->out[0], NULL);
  Inputs in = {{"logits", "t", "r"}, {rnd(ls, 11), t_tensor(DT_I32, ts, (double[]){4, -1, 0, 2}),
                                      t_tensor(DT_F64, S(0), (double[]){1.7})}, 3};
  Tensor d;
  eval_bwd(bg, &in, &d);
  fd_check("cross_entropy_bwd", lg, &in, 0, &d);
  for (int row = 0; row < 4; row++) CHECK(d.data[row * 6 + 5] == 0); /* zero past len */
  for (int c = 0; c < 6; c++) CHECK(d.data[6 + c] == 0);            /* ignored target row */
  tensor_free(&d);
  inputs_free(&in);
}

static void test_embed(Arena *A) {
  Shape tsh = S(2, 5, 3), is = S(2, 2, 3), ys = S(3, 2, 3, 3);
  Graph *lg = ir_graph_new(A, NULL), *bg = ir_graph_new(A, NULL);
  add_loss(lg, t_op2(lg, OP_EMBED, t_input(lg, "table", DT_F64, tsh), t_input(lg, "idx", DT_I32, is), NULL));
  Value *ix = t_input(bg, "idx", DT_I32, is), *r = t_input(bg, "r", DT_F64, ys);
  t_input(bg, "table", DT_F64, tsh);
  Value *d = ir_emit(bg, OP_EMBED_BWD, 2, (Value *[]){ix, r}, DT_F64, tsh, NULL, NOLOC);
  CHECK(ir_infer(d->def));
  ir_add_result(bg, d, NULL);
  Inputs in = {{"table", "idx", "r"}, {rnd(tsh, 12), t_tensor(DT_I32, is, (double[]){1, 3, 1, 4, 1, 0}), rnd(ys, 13)}, 3};
  Tensor dt;
  eval_bwd(bg, &in, &dt);
  fd_check("embed_bwd", lg, &in, 0, &dt);
  tensor_free(&dt);
  inputs_free(&in);
}

/* rope's adjoint is rope with inverse = true. */
static void test_rope(Arena *A) {
  Shape xs = S(3, 2, 3, 8);
  Attrs at = {0};
  at.heads = 2;
  at.theta = 10000;
  at.start = 2;
  Graph *lg = ir_graph_new(A, NULL), *bg = ir_graph_new(A, NULL);
  add_loss(lg, t_op1(lg, OP_ROPE, t_input(lg, "x", DT_F64, xs), &at));
  t_input(bg, "x", DT_F64, xs);
  Attrs inv = at;
  inv.inverse = true;
  ir_add_result(bg, t_op1(bg, OP_ROPE, t_input(bg, "r", DT_F64, xs), &inv), NULL);
  Inputs in = {{"x", "r"}, {rnd(xs, 14), rnd(xs, 15)}, 2};
  Tensor d;
  eval_bwd(bg, &in, &d);
  fd_check("rope inverse (adjoint)", lg, &in, 0, &d);
  tensor_free(&d);
  inputs_free(&in);
}

int main(void) {
  Arena A;
  arena_init(&A);
  test_act(&A, OP_GELU, OP_GELU_BWD);
  test_act(&A, OP_SILU, OP_SILU_BWD);
  test_norm(&A, true);
  test_norm(&A, false);
  test_sdpa(&A, 2, 2, true);
  test_sdpa(&A, 4, 2, true);
  test_sdpa(&A, 2, 1, false);
  test_ce(&A);
  test_embed(&A);
  test_rope(&A);
  arena_free(&A);
  return t_done("test_interp_grad");
}
