/* tests/ir/test_interp_ops.c — the interpreter's forward ops against hand-computed values and
 * naive references written here. Tolerance: 1e-12 relative unless stated (fp64 throughout). */
#include "testutil.h"

#define TOL 1e-12

/* Evaluates a graph whose INPUTs are named "x0", "x1", ...; returns result 0 (caller frees). */
static bool run(Graph *g, int n, const Tensor *vals, Tensor *out) {
  const char *names[8] = {"x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7"};
  const Tensor *ptrs[8];
  for (int i = 0; i < n; i++) ptrs[i] = &vals[i];
  Tensor outs[4] = {0};
  bool ok = interp_eval(g, n, names, ptrs, outs);
  if (ok) {
    *out = outs[0];
    for (int i = 1; i < g->nresults; i++) tensor_free(&outs[i]);
  }
  return ok;
}

static void check_vals(const Tensor *t, int n, const double *want, double tol) {
  CHECK(ir_numel(&t->shape) == n);
  for (int i = 0; i < n && i < ir_numel(&t->shape); i++) CHECK_NEAR(t->data[i], want[i], tol);
}

static void test_elementwise(Arena *A) {
  Graph *g = ir_graph_new(A, NULL);
  Value *a = t_input(g, "x0", DT_F32, S(2, 2, 3)), *b = t_input(g, "x1", DT_F32, S(1, 3));
  Value *y = t_op2(g, OP_ADD, a, b, NULL);
  CHECK(ir_shape_eq(&y->shape, &a->shape));
  ir_add_result(g, y, "y");
  Tensor in[2] = {t_tensor(DT_F32, S(2, 2, 3), (double[]){1, 2, 3, 4, 5, 6}),
                  t_tensor(DT_F32, S(1, 3), (double[]){10, 20, 30})};
  Tensor out;
  CHECK(run(g, 2, in, &out));
  check_vals(&out, 6, (double[]){11, 22, 33, 14, 25, 36}, TOL);
  tensor_free(&out);
  tensor_free(&in[0]);
  tensor_free(&in[1]);

  /* unary ops at a few points (reference values computed independently). */
  struct {
    OpKind op;
    double x, y;
  } cases[] = {
      {OP_GELU, 1.0, 0.8411919906082768},  {OP_GELU, -0.5, -0.15428599017485606},
      {OP_SILU, 1.0, 0.7310585786300049},  {OP_SIGMOID, 0.0, 0.5},
      {OP_RELU, -2.0, 0.0},                {OP_RELU, 3.0, 3.0},
      {OP_TANH, 0.5, 0.46211715726000974}, {OP_RSQRT, 4.0, 0.5},
      {OP_LOG, M_E, 1.0},                  {OP_EXP, 0.0, 1.0},
      {OP_NEG, 2.0, -2.0},                 {OP_SQRT, 9.0, 3.0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    Graph *h = ir_graph_new(A, NULL);
    Value *x = t_input(h, "x0", DT_F32, S(0));
    ir_add_result(h, t_op1(h, cases[i].op, x, NULL), "y");
    Tensor tx = t_tensor(DT_F32, S(0), &cases[i].x), ty;
    CHECK(run(h, 1, &tx, &ty));
    if (fabs(ty.data[0] - cases[i].y) > 1e-12)
      fprintf(stderr, "op %s(%g) = %.17g\n", ir_ops[cases[i].op].name, cases[i].x, ty.data[0]);
    CHECK_NEAR(ty.data[0], cases[i].y, 1e-12);
    tensor_free(&tx);
    tensor_free(&ty);
  }

  /* scale, add_scalar, and casts with round-to-nearest-even. */
  struct {
    OpKind op;
    DType dt;
    double scalar, x, y;
  } c2[] = {
      {OP_SCALE, DT_F64, 3.0, 2.0, 6.0},
      {OP_ADD_SCALAR, DT_F64, 0.5, 2.0, 2.5},
      {OP_CAST, DT_BF16, 0, 1.00390625, 1.0},           /* tie -> even */
      {OP_CAST, DT_BF16, 0, 1.01171875, 1.015625},      /* tie -> even (up) */
      {OP_CAST, DT_BF16, 0, 1.005, 1.0078125},          /* nearest */
      {OP_CAST, DT_F16, 0, 1.0 + 0x1.0p-11, 1.0},       /* tie -> even */
      {OP_CAST, DT_F32, 0, 0.1, 0.100000001490116119384765625},
      {OP_CAST, DT_I32, 0, 2.5, 2.0},
      {OP_CAST, DT_I32, 0, 3.5, 4.0},
  };
  for (size_t i = 0; i < sizeof c2 / sizeof c2[0]; i++) {
    Graph *h = ir_graph_new(A, NULL);
    Value *x = t_input(h, "x0", DT_F64, S(0));
    Node *n = ir_node_new(h, c2[i].op, 1, &x, 1, NOLOC);
    n->a.scalar = c2[i].scalar;
    n->out[0]->dtype = c2[i].dt;
    CHECK(ir_infer(n));
    CHECK(n->out[0]->dtype == c2[i].dt);
    ir_add_result(h, n->out[0], "y");
    Tensor tx = t_tensor(DT_F64, S(0), &c2[i].x), ty;
    CHECK(run(h, 1, &tx, &ty));
    CHECK(ty.data[0] == c2[i].y);
    tensor_free(&tx);
    tensor_free(&ty);
  }
}

static void test_matmul(Arena *A) {
  double a[] = {1, 2, 3, 4, 2, 4, 6, 8}, b[] = {5, 6, 7, 8};
  struct {
    bool ta, tb;
    double y[4];
  } cases[] = {{0, 0, {19, 22, 43, 50}}, {1, 0, {26, 30, 38, 44}}, {0, 1, {17, 23, 39, 53}}};
  for (int c = 0; c < 3; c++) {
    Graph *g = ir_graph_new(A, NULL);
    Value *x = t_input(g, "x0", DT_F32, S(3, 2, 2, 2)), *w = t_input(g, "x1", DT_F32, S(2, 2, 2));
    Attrs at = {0};
    at.ta = cases[c].ta;
    at.tb = cases[c].tb;
    Value *y = t_op2(g, OP_MATMUL, x, w, &at);
    CHECK(ir_shape_eq(&y->shape, &(Shape){3, {2, 2, 2}, {0}}));
    ir_add_result(g, y, "y");
    Tensor in[2] = {t_tensor(DT_F32, S(3, 2, 2, 2), a), t_tensor(DT_F32, S(2, 2, 2), b)}, out;
    CHECK(run(g, 2, in, &out));
    for (int i = 0; i < 4; i++) {
      CHECK_NEAR(out.data[i], cases[c].y[i], TOL);
      CHECK_NEAR(out.data[4 + i], 2 * cases[c].y[i], TOL); /* second batch is 2A; B broadcast */
    }
    tensor_free(&out);
    tensor_free(&in[0]);
    tensor_free(&in[1]);
  }
  { /* a third input accumulates (passes/gacc.c): y = C + A^T B */
    Graph *g = ir_graph_new(A, NULL);
    Value *x = t_input(g, "x0", DT_F32, S(2, 2, 2)), *w = t_input(g, "x1", DT_F32, S(2, 2, 2)),
          *c = t_input(g, "x2", DT_F32, S(2, 2, 2));
    Node *n = ir_node_new(g, OP_MATMUL, 3, (Value *[]){x, w, c}, 1, (SrcLoc){0});
    n->a.ta = true;
    CHECK(ir_infer(n) && n->out[0]->dtype == DT_F32);
    ir_add_result(g, n->out[0], "y");
    Tensor in[3] = {t_tensor(DT_F32, S(2, 2, 2), a), t_tensor(DT_F32, S(2, 2, 2), b),
                    t_tensor(DT_F32, S(2, 2, 2), (double[]){1, -1, 0.5, 100})},
           out;
    CHECK(run(g, 3, in, &out));
    double want[] = {26 + 1, 30 - 1, 38 + 0.5, 44 + 100};
    for (int i = 0; i < 4; i++) CHECK_NEAR(out.data[i], want[i], TOL);
    tensor_free(&out);
    for (int i = 0; i < 3; i++) tensor_free(&in[i]);
  }
  { /* cb: the leading dims contracted too, y[m, n] = sum_b sum_k A[b, k, m] B[b, k, n] (a weight's gradient under
     * cp), against the sum written out */
    Graph *g = ir_graph_new(A, NULL);
    Value *x = t_input(g, "x0", DT_F32, S(3, 2, 3, 2)), *w = t_input(g, "x1", DT_F32, S(3, 2, 3, 4));
    Attrs at = {0};
    at.ta = at.cb = true;
    Value *y = t_op2(g, OP_MATMUL, x, w, &at);
    CHECK(ir_shape_eq(&y->shape, &(Shape){2, {2, 4}, {0}}));
    ir_add_result(g, y, "y");
    double av[12], bv[24];
    for (int i = 0; i < 12; i++) av[i] = 0.5 * i - 2;
    for (int i = 0; i < 24; i++) bv[i] = (i % 7) - 3.25;
    Tensor in[2] = {t_tensor(DT_F32, S(3, 2, 3, 2), av), t_tensor(DT_F32, S(3, 2, 3, 4), bv)}, out;
    CHECK(run(g, 2, in, &out));
    for (int m = 0; m < 2; m++)
      for (int n = 0; n < 4; n++) {
        double s = 0;
        for (int b = 0; b < 2; b++)
          for (int k = 0; k < 3; k++) s += av[(b * 3 + k) * 2 + m] * bv[(b * 3 + k) * 4 + n];
        CHECK_NEAR(out.data[m * 4 + n], s, TOL);
      }
    tensor_free(&out);
    for (int i = 0; i < 2; i++) tensor_free(&in[i]);
  }
}

static void test_embed_norms(Arena *A) {
  { /* embed, and an out-of-range id is a runtime error */
    Graph *g = ir_graph_new(A, NULL);
    Value *t = t_input(g, "x0", DT_F32, S(2, 3, 2)), *ix = t_input(g, "x1", DT_I32, S(1, 2));
    Value *y = t_op2(g, OP_EMBED, t, ix, NULL);
    CHECK(y->shape.rank == 2 && y->shape.dim[1] == 2);
    ir_add_result(g, y, "y");
    Tensor in[2] = {t_tensor(DT_F32, S(2, 3, 2), (double[]){0, 1, 10, 11, 20, 21}),
                    t_tensor(DT_I32, S(1, 2), (double[]){2, 0})},
           out;
    CHECK(run(g, 2, in, &out));
    check_vals(&out, 4, (double[]){20, 21, 0, 1}, 0);
    tensor_free(&out);
    in[1].data[1] = 3;
    fprintf(stderr, "(expected runtime error follows)\n");
    CHECK(!run(g, 2, in, &out));
    tensor_free(&in[0]);
    tensor_free(&in[1]);
  }
  { /* layernorm: biased variance */
    Graph *g = ir_graph_new(A, NULL);
    Value *x = t_input(g, "x0", DT_F32, S(2, 1, 4)), *w = t_input(g, "x1", DT_F32, S(1, 4)),
          *b = t_input(g, "x2", DT_F32, S(1, 4));
    Value *in3[3] = {x, w, b};
    Attrs at = {0};
    at.eps = 0;
    ir_add_result(g, t_node(g, OP_LAYERNORM, 3, in3, 1, &at)->out[0], "y");
    Tensor in[3] = {t_tensor(DT_F32, S(2, 1, 4), (double[]){1, 2, 3, 4}),
                    t_tensor(DT_F32, S(1, 4), (double[]){2, 2, 2, 2}),
                    t_tensor(DT_F32, S(1, 4), (double[]){1, 1, 1, 1})},
           out;
    CHECK(run(g, 3, in, &out));
    double k = 1.0 / sqrt(1.25);
    check_vals(&out, 4, (double[]){1 - 3 * k, 1 - k, 1 + k, 1 + 3 * k}, TOL);
    tensor_free(&out);
    for (int i = 0; i < 3; i++) tensor_free(&in[i]);
  }
  { /* rmsnorm */
    Graph *g = ir_graph_new(A, NULL);
    Value *x = t_input(g, "x0", DT_F32, S(1, 2)), *w = t_input(g, "x1", DT_F32, S(1, 2));
    Attrs at = {0};
    at.eps = 0.5;
    ir_add_result(g, t_op2(g, OP_RMSNORM, x, w, &at), "y");
    Tensor in[2] = {t_tensor(DT_F32, S(1, 2), (double[]){3, 4}), t_tensor(DT_F32, S(1, 2), (double[]){1, 2})}, out;
    CHECK(run(g, 2, in, &out));
    check_vals(&out, 2, (double[]){3 / sqrt(13.0), 8 / sqrt(13.0)}, TOL); /* mean(x^2) + eps = 13 */
    tensor_free(&out);
    tensor_free(&in[0]);
    tensor_free(&in[1]);
  }
}

static void test_rope(Arena *A) {
  /* x[1, 3, 4], heads 1, hd 4: pairs (0, 2) and (1, 3); angles (pos + start) * theta^(-2i/4). */
  double theta = 100.0;
  int start = 1;
  Graph *g = ir_graph_new(A, NULL);
  Value *x = t_input(g, "x0", DT_F32, S(3, 1, 3, 4));
  Attrs at = {0};
  at.heads = 1;
  at.theta = theta;
  at.start = start;
  Value *y = t_op1(g, OP_ROPE, x, &at);
  Attrs inv = at;
  inv.inverse = true;
  Value *back = t_op1(g, OP_ROPE, y, &inv);
  ir_add_result(g, y, "y");
  ir_add_result(g, back, "back");
  Tensor tx = tensor_new(DT_F32, S(3, 1, 3, 4));
  t_fill(&tx, 7);
  const char *names[] = {"x0"};
  const Tensor *vals[] = {&tx};
  Tensor outs[2];
  CHECK(interp_eval(g, 1, names, vals, outs));
  for (int s = 0; s < 3; s++)
    for (int i = 0; i < 2; i++) {
      double ang = (s + start) * pow(theta, -2.0 * i / 4.0);
      const double *xp = tx.data + s * 4;
      CHECK_NEAR(outs[0].data[s * 4 + i], xp[i] * cos(ang) - xp[i + 2] * sin(ang), TOL);
      CHECK_NEAR(outs[0].data[s * 4 + i + 2], xp[i + 2] * cos(ang) + xp[i] * sin(ang), TOL);
    }
  for (int i = 0; i < 12; i++) CHECK_NEAR(outs[1].data[i], tx.data[i], TOL);
  tensor_free(&tx);
  tensor_free(&outs[0]);
  tensor_free(&outs[1]);
}

/* Naive attention written independently: materialise the full score matrix, mask with -inf. */
static void naive_sdpa(const Tensor *q, const Tensor *k, const Tensor *v, int H, int KV, bool causal, double *o,
                       double *lse) {
  int B = (int)q->shape.dim[0], Sq = (int)q->shape.dim[1], hd = (int)q->shape.dim[2] / H;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      int kh = h * KV / H;
      for (int i = 0; i < Sq; i++) {
        double sc[16], mx = -INFINITY, z = 0;
        for (int j = 0; j < Sq; j++) {
          double d = 0;
          for (int c = 0; c < hd; c++)
            d += q->data[(b * Sq + i) * H * hd + h * hd + c] * k->data[(b * Sq + j) * KV * hd + kh * hd + c];
          sc[j] = causal && j > i ? -INFINITY : d / sqrt((double)hd);
          if (sc[j] > mx) mx = sc[j];
        }
        for (int j = 0; j < Sq; j++) z += exp(sc[j] - mx);
        lse[(b * H + h) * Sq + i] = mx + log(z);
        for (int c = 0; c < hd; c++) {
          double acc = 0;
          for (int j = 0; j < Sq; j++) acc += exp(sc[j] - mx) / z * v->data[(b * Sq + j) * KV * hd + kh * hd + c];
          o[(b * Sq + i) * H * hd + h * hd + c] = acc;
        }
      }
    }
}

static void test_sdpa(Arena *A) {
  { /* hand case: q = 0 gives uniform weights: causal o = running mean of v, lse = log(count) */
    Graph *g = ir_graph_new(A, NULL);
    Value *q = t_input(g, "x0", DT_F32, S(3, 1, 3, 1)), *k = t_input(g, "x1", DT_F32, S(3, 1, 3, 1)),
          *v = t_input(g, "x2", DT_F32, S(3, 1, 3, 1));
    Attrs at = {0};
    at.heads = at.kv_heads = 1;
    at.causal = true;
    Node *n = t_node(g, OP_SDPA, 3, (Value *[]){q, k, v}, 2, &at);
    CHECK(n->out[1]->dtype == DT_F32 && ir_shape_eq(&n->out[1]->shape, &(Shape){3, {1, 1, 3}, {0}}));
    ir_add_result(g, n->out[0], "o");
    ir_add_result(g, n->out[1], "lse");
    Tensor tq = t_tensor(DT_F32, S(3, 1, 3, 1), (double[]){0, 0, 0}),
           tk = t_tensor(DT_F32, S(3, 1, 3, 1), (double[]){5, -1, 2}),
           tv = t_tensor(DT_F32, S(3, 1, 3, 1), (double[]){1, 2, 3});
    const char *names[] = {"x0", "x1", "x2"};
    const Tensor *vals[] = {&tq, &tk, &tv};
    Tensor outs[2];
    CHECK(interp_eval(g, 3, names, vals, outs));
    check_vals(&outs[0], 3, (double[]){1, 1.5, 2}, TOL);
    check_vals(&outs[1], 3, (double[]){0, log(2.0), log(3.0)}, TOL);
    tensor_free(&outs[0]);
    tensor_free(&outs[1]);
    tensor_free(&tq);
    tensor_free(&tk);
    tensor_free(&tv);
  }
  /* GQA (H 4, KV 2, hd 3) and MHA, causal and not, against the naive reference. */
  int cfg[][3] = {{4, 2, 1}, {4, 2, 0}, {2, 2, 1}, {4, 1, 1}};
  for (int c = 0; c < 4; c++) {
    int H = cfg[c][0], KV = cfg[c][1], B = 2, Sq = 5, hd = 3;
    Graph *g = ir_graph_new(A, NULL);
    Value *q = t_input(g, "x0", DT_F32, S(3, B, Sq, H * hd)), *k = t_input(g, "x1", DT_F32, S(3, B, Sq, KV * hd)),
          *v = t_input(g, "x2", DT_F32, S(3, B, Sq, KV * hd));
    Attrs at = {0};
    at.heads = H;
    at.kv_heads = KV;
    at.causal = cfg[c][2];
    Node *n = t_node(g, OP_SDPA, 3, (Value *[]){q, k, v}, 2, &at);
    ir_add_result(g, n->out[0], "o");
    ir_add_result(g, n->out[1], "lse");
    Tensor tq = tensor_new(DT_F32, q->shape), tk = tensor_new(DT_F32, k->shape), tv = tensor_new(DT_F32, v->shape);
    t_fill(&tq, 1 + c);
    t_fill(&tk, 11 + c);
    t_fill(&tv, 21 + c);
    for (int i = 0; i < ir_numel(&tq.shape); i++) tq.data[i] *= 3; /* sharper softmax */
    const char *names[] = {"x0", "x1", "x2"};
    const Tensor *vals[] = {&tq, &tk, &tv};
    Tensor outs[2];
    CHECK(interp_eval(g, 3, names, vals, outs));
    double o[2 * 5 * 12], lse[2 * 4 * 5];
    naive_sdpa(&tq, &tk, &tv, H, KV, at.causal, o, lse);
    check_vals(&outs[0], B * Sq * H * hd, o, 1e-12);
    check_vals(&outs[1], B * H * Sq, lse, 1e-12);
    tensor_free(&outs[0]);
    tensor_free(&outs[1]);
    tensor_free(&tq);
    tensor_free(&tk);
    tensor_free(&tv);
  }
}

static void test_cross_entropy(Arena *A) {
  Graph *g = ir_graph_new(A, NULL);
  Value *l = t_input(g, "x0", DT_F32, S(3, 1, 3, 4)), *t = t_input(g, "x1", DT_I32, S(2, 1, 3));
  Attrs at = {0};
  at.len = 3; /* last logit is vocabulary padding */
  Value *y = t_op2(g, OP_CROSS_ENTROPY, l, t, &at);
  CHECK(y->shape.rank == 0 && y->dtype == DT_F32);
  ir_add_result(g, y, "loss");
  Tensor in[2] = {t_tensor(DT_F32, S(3, 1, 3, 4), (double[]){0, 0, 0, 100, 1, 2, 3, 100, 9, 9, 9, 9}),
                  t_tensor(DT_I32, S(2, 1, 3), (double[]){1, 2, -1})},
         out;
  CHECK(run(g, 2, in, &out));
  double l0 = log(3.0), l1 = log(exp(1) + exp(2) + exp(3)) - 3;
  CHECK_NEAR(out.data[0], (l0 + l1) / 2, TOL);
  tensor_free(&out);
  in[1].data[0] = 3; /* a target in the padding is an error */
  fprintf(stderr, "(expected runtime error follows)\n");
  CHECK(!run(g, 2, in, &out));
  tensor_free(&in[0]);
  tensor_free(&in[1]);
}

static void test_shape_ops(Arena *A) {
  Graph *g = ir_graph_new(A, NULL);
  Value *x = t_input(g, "x0", DT_F32, S(2, 2, 3)); /* [[1 2 3] [4 5 6]] */
  Attrs sl = {0};
  sl.axis = 1;
  sl.start = 1;
  sl.len = 2;
  Value *s = t_op1(g, OP_SLICE, x, &sl); /* [[2 3] [5 6]] */
  Attrs pd = {0};
  pd.axis = 0;
  pd.start = 1;
  pd.len = 3;
  Value *p = t_op1(g, OP_PAD, s, &pd); /* [[0 0] [2 3] [5 6]] */
  Attrs cc = {0};
  cc.axis = 1;
  Value *c = t_node(g, OP_CONCAT, 2, (Value *[]){x, x}, 1, &cc)->out[0]; /* [2, 6] */
  Value *tr = t_op1(g, OP_TRANSPOSE, x, NULL);                            /* [[1 4] [2 5] [3 6]] */
  Value *rs = ir_emit(g, OP_REDUCE_SUM, 1, &x, DT_F32, S(1, 3), NULL, NOLOC); /* [5 7 9] */
  CHECK(ir_infer(rs->def));
  Value *rs2 = ir_emit(g, OP_REDUCE_SUM, 1, &x, DT_F32, S(2, 2, 1), NULL, NOLOC); /* [[6] [15]] */
  CHECK(ir_infer(rs2->def));
  Value *bc = ir_emit(g, OP_BROADCAST_TO, 1, &rs2, DT_F32, S(2, 2, 2), NULL, NOLOC); /* [[6 6] [15 15]] */
  CHECK(ir_infer(bc->def));
  Value *rh = ir_emit(g, OP_RESHAPE, 1, &x, DT_F32, S(2, 3, 2), NULL, NOLOC);
  CHECK(ir_infer(rh->def));
  Value *sm = t_op1(g, OP_SUM, x, NULL), *mn = t_op1(g, OP_MEAN, x, NULL), *sq = t_op1(g, OP_SUMSQ, x, NULL);
  Value *all[] = {s, p, c, tr, rs, rs2, bc, rh, sm, mn, sq};
  for (int i = 0; i < 11; i++) ir_add_result(g, all[i], NULL);
  Tensor tx = t_tensor(DT_F32, S(2, 2, 3), (double[]){1, 2, 3, 4, 5, 6});
  const char *names[] = {"x0"};
  const Tensor *vals[] = {&tx};
  Tensor o[11];
  CHECK(interp_eval(g, 1, names, vals, o));
  check_vals(&o[0], 4, (double[]){2, 3, 5, 6}, 0);
  check_vals(&o[1], 6, (double[]){0, 0, 2, 3, 5, 6}, 0);
  check_vals(&o[2], 12, (double[]){1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}, 0);
  check_vals(&o[3], 6, (double[]){1, 4, 2, 5, 3, 6}, 0);
  check_vals(&o[4], 3, (double[]){5, 7, 9}, 0);
  check_vals(&o[5], 2, (double[]){6, 15}, 0);
  check_vals(&o[6], 4, (double[]){6, 6, 15, 15}, 0);
  check_vals(&o[7], 6, (double[]){1, 2, 3, 4, 5, 6}, 0);
  CHECK(o[7].shape.dim[0] == 3);
  check_vals(&o[8], 1, (double[]){21}, 0);
  check_vals(&o[9], 1, (double[]){3.5}, TOL);
  check_vals(&o[10], 1, (double[]){91}, 0);
  for (int i = 0; i < 11; i++) tensor_free(&o[i]);
  tensor_free(&tx);
}

static void test_optimizers(Arena *A) {
  { /* sgd: g' = 0.5*2 + 0.1*1 = 1.1; m' = 0.9*0.5 + 1.1 = 1.55; p' = 1 - 0.1*1.55 */
    Graph *g = ir_graph_new(A, NULL);
    Value *p = t_input(g, "x0", DT_F32, S(1, 1)), *gr = t_input(g, "x1", DT_F32, S(1, 1)),
          *m = t_input(g, "x2", DT_F32, S(1, 1)), *h = t_input(g, "x3", DT_F32, S(1, 2));
    Attrs at = {0};
    at.momentum = 0.9;
    at.weight_decay = 0.1;
    Node *n = t_node(g, OP_SGD_UPDATE, 4, (Value *[]){p, gr, m, h}, 2, &at);
    ir_add_result(g, n->out[0], "p");
    ir_add_result(g, n->out[1], "m");
    Tensor in[4] = {t_tensor(DT_F32, S(1, 1), (double[]){1}), t_tensor(DT_F32, S(1, 1), (double[]){2}),
                    t_tensor(DT_F32, S(1, 1), (double[]){0.5}), t_tensor(DT_F32, S(1, 2), (double[]){0.1, 0.5})};
    const char *names[] = {"x0", "x1", "x2", "x3"};
    const Tensor *vals[] = {&in[0], &in[1], &in[2], &in[3]};
    Tensor o[2];
    CHECK(interp_eval(g, 4, names, vals, o));
    CHECK_NEAR(o[0].data[0], 0.845, TOL);
    CHECK_NEAR(o[1].data[0], 1.55, TOL);
    for (int i = 0; i < 4; i++) tensor_free(&in[i]);
    tensor_free(&o[0]);
    tensor_free(&o[1]);
  }
  { /* adamw, step 2: m' = 0.9*0.1 + 0.1*2 = 0.29, v' = 0.999*0.01 + 0.001*4 = 0.01399;
       p' = 1 - 0.1 * (0.29/(1-0.81) / (sqrt(0.01399/(1-0.998001)) + 1e-8) + 0.1 * 1) */
    Graph *g = ir_graph_new(A, NULL);
    Value *p = t_input(g, "x0", DT_F32, S(1, 1)), *gr = t_input(g, "x1", DT_F32, S(1, 1)),
          *m = t_input(g, "x2", DT_F32, S(1, 1)), *v = t_input(g, "x3", DT_F32, S(1, 1)),
          *h = t_input(g, "x4", DT_F32, S(1, 3));
    Attrs at = {0};
    at.beta1 = 0.9;
    at.beta2 = 0.999;
    at.eps = 1e-8;
    at.weight_decay = 0.1;
    Node *n = t_node(g, OP_ADAMW_UPDATE, 5, (Value *[]){p, gr, m, v, h}, 3, &at);
    for (int i = 0; i < 3; i++) ir_add_result(g, n->out[i], NULL);
    Tensor in[5] = {t_tensor(DT_F32, S(1, 1), (double[]){1}), t_tensor(DT_F32, S(1, 1), (double[]){4}),
                    t_tensor(DT_F32, S(1, 1), (double[]){0.1}), t_tensor(DT_F32, S(1, 1), (double[]){0.01}),
                    t_tensor(DT_F32, S(1, 3), (double[]){0.1, 0.5, 2})};
    const char *names[] = {"x0", "x1", "x2", "x3", "x4"};
    const Tensor *vals[] = {&in[0], &in[1], &in[2], &in[3], &in[4]};
    Tensor o[3];
    CHECK(interp_eval(g, 5, names, vals, o));
    CHECK_NEAR(o[1].data[0], 0.29, TOL);
    CHECK_NEAR(o[2].data[0], 0.01399, TOL);
    CHECK_NEAR(o[0].data[0], 1 - 0.1 * (0.29 / 0.19 / (sqrt(0.01399 / (1 - 0.998001)) + 1e-8) + 0.1), TOL);
    for (int i = 0; i < 3; i++) tensor_free(&o[i]);
    /* gscale NaN or Inf (on_nonfinite skip's gate, passes/optimizer.c): p, m, v unchanged, even
       with a NaN gradient */
    const double gates[2] = {NAN, INFINITY};
    for (int k = 0; k < 2; k++) {
      in[1].data[0] = NAN;
      in[4].data[1] = gates[k];
      CHECK(interp_eval(g, 5, names, vals, o));
      CHECK(o[0].data[0] == 1 && o[1].data[0] == 0.1 && o[2].data[0] == 0.01);
      for (int i = 0; i < 3; i++) tensor_free(&o[i]);
    }
    for (int i = 0; i < 5; i++) tensor_free(&in[i]);
  }
  { /* sgd with a NaN gscale: p, m unchanged */
    Graph *g = ir_graph_new(A, NULL);
    Value *p = t_input(g, "x0", DT_F32, S(1, 2)), *gr = t_input(g, "x1", DT_F32, S(1, 2)),
          *m = t_input(g, "x2", DT_F32, S(1, 2)), *h = t_input(g, "x3", DT_F32, S(1, 2));
    Attrs at = {0};
    at.momentum = 0.9;
    at.weight_decay = 0.1;
    Node *n = t_node(g, OP_SGD_UPDATE, 4, (Value *[]){p, gr, m, h}, 2, &at);
    for (int i = 0; i < 2; i++) ir_add_result(g, n->out[i], NULL);
    Tensor in[4] = {t_tensor(DT_F32, S(1, 2), (double[]){1, 2}), t_tensor(DT_F32, S(1, 2), (double[]){NAN, 3}),
                    t_tensor(DT_F32, S(1, 2), (double[]){0.5, -0.5}), t_tensor(DT_F32, S(1, 2), (double[]){0.1, NAN})};
    const char *names[] = {"x0", "x1", "x2", "x3"};
    const Tensor *vals[] = {&in[0], &in[1], &in[2], &in[3]};
    Tensor o[2];
    CHECK(interp_eval(g, 4, names, vals, o));
    CHECK(o[0].data[0] == 1 && o[0].data[1] == 2 && o[1].data[0] == 0.5 && o[1].data[1] == -0.5);
    for (int i = 0; i < 4; i++) tensor_free(&in[i]);
    for (int i = 0; i < 2; i++) tensor_free(&o[i]);
  }
}

int main(void) {
  Arena A;
  arena_init(&A);
  test_elementwise(&A);
  test_matmul(&A);
  test_embed_norms(&A);
  test_rope(&A);
  test_sdpa(&A);
  test_cross_entropy(&A);
  test_shape_ops(&A);
  test_optimizers(&A);
  arena_free(&A);
  return t_done("test_interp_ops");
}
