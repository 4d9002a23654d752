/* tests/passes/test_autodiff_ops.c — pass_autodiff against central finite differences, op by op.
 *
 * For every primitive with a backward (F_GRAD in ir/ops.def) and for REPEAT, a small
 * graph y = op(params...) gets the loss sum(y * r) with a fixed random r, is
 * differentiated, verified, shape-checked against ir_infer, and run in the fp64
 * interpreter: every entry of every parameter's gradient must match the central
 * difference (h = 1e-5 * max(1, |x|)) within 1e-6 * max(1, |grad|).
 */
#include <stdio.h>
#include <string.h>

#include "diag.h"
#include "passes.h"
#include "tb.h"

#define D DT_F64
#define TOL 1e-6
#define H 1e-5

typedef struct {
  TbFeed feeds[8];
  int nfeed;
} Feeds;

static Value *normal(Graph *g, const char *name, Shape s) { return tb_param(g, name, D, s, INIT_NORMAL, 0, 1); }
static Value *positive(Graph *g, const char *name, Shape s) { return tb_param(g, name, D, s, INIT_UNIFORM, 0.5, 2); }

static Value *unary(Graph *g, OpKind op, Value *x, double scalar) {
  Attrs a = {.scalar = scalar};
  return tb_op1(g, op, x, &a);
}

/* ---- cases: each returns y ------------------------------------------------- */
#define CASE(name) static Value *name(Graph *g, Feeds *f)

CASE(c_add) { return tb_op2(g, OP_ADD, normal(g, "a", tb_shape(2, 2, 3)), normal(g, "b", tb_shape(1, 3)), NULL); }
CASE(c_sub) { return tb_op2(g, OP_SUB, normal(g, "a", tb_shape(3, 2, 1, 3)), normal(g, "b", tb_shape(2, 4, 3)), NULL); }
CASE(c_mul) { return tb_op2(g, OP_MUL, normal(g, "a", tb_shape(2, 2, 3)), normal(g, "b", tb_shape(2, 2, 1)), NULL); }
CASE(c_mul_same) { Value *a = normal(g, "a", tb_shape(2, 2, 3)); return tb_op2(g, OP_MUL, a, a, NULL); }
CASE(c_div) { return tb_op2(g, OP_DIV, normal(g, "a", tb_shape(2, 2, 3)), positive(g, "b", tb_shape(1, 3)), NULL); }
CASE(c_neg) { return unary(g, OP_NEG, normal(g, "x", tb_shape(2, 3, 4)), 0); }
CASE(c_scale) { return unary(g, OP_SCALE, normal(g, "x", tb_shape(2, 3, 4)), 2.5); }
CASE(c_add_scalar) { return unary(g, OP_ADD_SCALAR, normal(g, "x", tb_shape(2, 3, 4)), 0.3); }
CASE(c_exp) { return unary(g, OP_EXP, normal(g, "x", tb_shape(2, 3, 4)), 0); }
CASE(c_log) { return unary(g, OP_LOG, positive(g, "x", tb_shape(2, 3, 4)), 0); }
CASE(c_sqrt) { return unary(g, OP_SQRT, positive(g, "x", tb_shape(2, 3, 4)), 0); }
CASE(c_rsqrt) { return unary(g, OP_RSQRT, positive(g, "x", tb_shape(2, 3, 4)), 0); }
CASE(c_tanh) { return unary(g, OP_TANH, normal(g, "x", tb_shape(2, 3, 4)), 0); }
CASE(c_sigmoid) { return unary(g, OP_SIGMOID, normal(g, "x", tb_shape(2, 3, 4)), 0); }
CASE(c_relu) { return unary(g, OP_RELU, normal(g, "x", tb_shape(2, 3, 4)), 0); }
CASE(c_gelu) { return unary(g, OP_GELU, normal(g, "x", tb_shape(2, 3, 4)), 0); }
CASE(c_silu) { return unary(g, OP_SILU, normal(g, "x", tb_shape(2, 3, 4)), 0); }
CASE(c_cast) {
  Value *x = tb_param(g, "x", DT_F32, tb_shape(2, 3, 4), INIT_NORMAL, 0, 1);
  Value *y = tb_shaped(g, OP_CAST, 1, &x, D, x->shape, NULL);
  return tb_op2(g, OP_MUL, y, y, NULL);
}
CASE(c_reshape) {
  Value *x = normal(g, "x", tb_shape(2, 2, 6));
  return tb_shaped(g, OP_RESHAPE, 1, &x, D, tb_shape(3, 3, 2, 2), NULL);
}
CASE(c_transpose) { return tb_op1(g, OP_TRANSPOSE, normal(g, "x", tb_shape(3, 2, 3, 4)), NULL); }
CASE(c_slice) {
  Attrs a = {.axis = 1, .start = 1, .len = 2};
  return tb_op1(g, OP_SLICE, normal(g, "x", tb_shape(3, 2, 4, 3)), &a);
}
CASE(c_split) { /* slices tiling x (one unused) plus another use of x: joined by a concat */
  Value *x = normal(g, "x", tb_shape(3, 2, 2, 6));
  Attrs a0 = {.axis = 2, .start = 0, .len = 1}, a1 = {.axis = 2, .start = 1, .len = 3}, a2 = {.axis = 2, .start = 4, .len = 2};
  Value *s0 = tb_op1(g, OP_SLICE, x, &a0), *s1 = tb_op1(g, OP_SLICE, x, &a1);
  (void)tb_op1(g, OP_SLICE, x, &a2);
  Value *t = tb_op2(g, OP_MUL, tb_op1(g, OP_EXP, s1, NULL), s0, NULL);
  Value *u = tb_op1(g, OP_TANH, x, NULL);
  Attrs r = {.axis = 2, .start = 2, .len = 3};
  return tb_op2(g, OP_ADD, t, tb_op1(g, OP_SLICE, u, &r), NULL);
}
CASE(c_pad) {
  Attrs a = {.axis = 1, .start = 1, .len = 5};
  return tb_op1(g, OP_PAD, normal(g, "x", tb_shape(2, 2, 3)), &a);
}
CASE(c_concat) {
  Attrs a = {.axis = 1};
  Value *in[3] = {normal(g, "a", tb_shape(2, 2, 2)), normal(g, "b", tb_shape(2, 2, 3)), normal(g, "c", tb_shape(2, 2, 1))};
  return tb_op(g, OP_CONCAT, 3, in, &a);
}
CASE(c_reduce_sum) {
  Value *x = normal(g, "x", tb_shape(3, 2, 3, 4));
  return tb_shaped(g, OP_REDUCE_SUM, 1, &x, D, tb_shape(2, 3, 1), NULL);
}
CASE(c_broadcast_to) {
  Value *x = normal(g, "x", tb_shape(2, 3, 1));
  return tb_shaped(g, OP_BROADCAST_TO, 1, &x, D, tb_shape(3, 2, 3, 4), NULL);
}
static Value *mm(Graph *g, Shape sa, Shape sb, bool ta, bool tb) {
  Attrs a = {.ta = ta, .tb = tb};
  return tb_op2(g, OP_MATMUL, normal(g, "A", sa), normal(g, "B", sb), &a);
}
CASE(c_mm) { return mm(g, tb_shape(2, 3, 4), tb_shape(2, 4, 5), false, false); }
CASE(c_mm_ta) { return mm(g, tb_shape(2, 4, 3), tb_shape(2, 4, 5), true, false); }
CASE(c_mm_tb) { return mm(g, tb_shape(2, 3, 4), tb_shape(2, 5, 4), false, true); }
CASE(c_mm_tatb) { return mm(g, tb_shape(2, 4, 3), tb_shape(2, 5, 4), true, true); }
CASE(c_mm_fold) { return mm(g, tb_shape(3, 2, 3, 4), tb_shape(2, 4, 5), false, false); }
CASE(c_mm_fold_tb) { return mm(g, tb_shape(3, 2, 3, 4), tb_shape(2, 5, 4), false, true); }
CASE(c_mm_bcast_ta) { return mm(g, tb_shape(3, 2, 4, 3), tb_shape(2, 4, 5), true, false); }
CASE(c_mm_batched) { return mm(g, tb_shape(3, 2, 3, 4), tb_shape(3, 2, 4, 5), false, false); }
CASE(c_mm_batched_tatb) { return mm(g, tb_shape(3, 2, 4, 3), tb_shape(3, 2, 5, 4), true, true); }
CASE(c_mm_bcast_lead) { return mm(g, tb_shape(4, 2, 2, 3, 4), tb_shape(3, 2, 4, 5), false, false); }
CASE(c_embed) {
  Value *idx = tb_input(g, "idx", DT_I32, tb_shape(2, 2, 3));
  f->feeds[f->nfeed++] = (TbFeed){"idx", tb_randint(idx->shape, 5, 0, 4)}; /* repeats rows */
  return tb_op2(g, OP_EMBED, normal(g, "table", tb_shape(2, 7, 4)), idx, NULL);
}
CASE(c_layernorm) {
  Value *in[3] = {normal(g, "x", tb_shape(3, 2, 3, 5)), tb_param(g, "w", D, tb_shape(1, 5), INIT_NORMAL, 1, 0.2),
                  normal(g, "b", tb_shape(1, 5))};
  Attrs a = {.eps = 1e-5};
  return tb_op(g, OP_LAYERNORM, 3, in, &a);
}
CASE(c_rmsnorm) {
  Value *in[2] = {normal(g, "x", tb_shape(3, 2, 3, 5)), tb_param(g, "w", D, tb_shape(1, 5), INIT_NORMAL, 1, 0.2)};
  Attrs a = {.eps = 1e-5};
  return tb_op(g, OP_RMSNORM, 2, in, &a);
}
CASE(c_rope) {
  Attrs a = {.heads = 2, .theta = 10000, .start = 0};
  return tb_op1(g, OP_ROPE, normal(g, "x", tb_shape(3, 2, 4, 8)), &a);
}
CASE(c_rope_inv) {
  Attrs a = {.heads = 2, .theta = 100, .start = 3, .inverse = true};
  return tb_op1(g, OP_ROPE, normal(g, "x", tb_shape(3, 2, 4, 8)), &a);
}
static Value *sdpa(Graph *g, int B, int S, int Hq, int KV, int hd, bool causal) {
  Value *in[3] = {normal(g, "q", tb_shape(3, B, S, Hq * hd)), normal(g, "k", tb_shape(3, B, S, KV * hd)),
                  normal(g, "v", tb_shape(3, B, S, KV * hd))};
  Attrs a = {.heads = Hq, .kv_heads = KV, .causal = causal};
  return tb_node(g, OP_SDPA, 3, in, 2, &a)->out[0];
}
CASE(c_sdpa_causal) { return sdpa(g, 2, 4, 2, 2, 4, true); }
CASE(c_sdpa_full) { return sdpa(g, 1, 5, 2, 2, 3, false); }
CASE(c_sdpa_gqa) { return sdpa(g, 2, 5, 4, 2, 2, true); }
CASE(c_cross_entropy) {
  Value *t = tb_input(g, "targets", DT_I32, tb_shape(2, 2, 3));
  Tensor tt = tb_randint(t->shape, 9, 0, 5);
  tt.data[4] = -1; /* ignored position */
  f->feeds[f->nfeed++] = (TbFeed){"targets", tt};
  Attrs a = {.len = 5}; /* the sixth logit is vocabulary padding */
  return tb_op2(g, OP_CROSS_ENTROPY, normal(g, "logits", tb_shape(3, 2, 3, 6)), t, &a);
}
CASE(c_sum) { return tb_op1(g, OP_SUM, normal(g, "x", tb_shape(2, 3, 4)), NULL); }
CASE(c_mean) { return tb_op1(g, OP_MEAN, normal(g, "x", tb_shape(2, 3, 4)), NULL); }
CASE(c_all_reduce) {
  Attrs a = {.mesh_axis = RT_AX_TP, .reduce = RED_SUM};
  return tb_op1(g, OP_ALL_REDUCE, normal(g, "x", tb_shape(2, 3, 4)), &a);
}
CASE(c_reduce_scatter) {
  Value *x = normal(g, "x", tb_shape(2, 3, 4));
  Attrs a = {.mesh_axis = RT_AX_TP, .axis = 1};
  return tb_shaped(g, OP_REDUCE_SCATTER, 1, &x, D, x->shape, &a);
}
CASE(c_all_gather) {
  Value *x = normal(g, "x", tb_shape(2, 3, 4));
  Attrs a = {.mesh_axis = RT_AX_DP, .axis = 0};
  return tb_shaped(g, OP_ALL_GATHER, 1, &x, D, x->shape, &a);
}

/* A scan: carry x[2,3], stacked W[4,3,3] and b[4,3], captured c[3] (passed) and s[2,3] (read directly);
 * x' = tanh(x @ W_i + b_i + c) * s; ys = x' * x. y = final x + sum over layers of ys. */
static Value *scan(Graph *g, bool reverse, bool nested) {
  Value *x0 = normal(g, "x0", tb_shape(2, 2, 3));
  Value *W = nested ? normal(g, "W", tb_shape(4, 4, 2, 3, 3)) : normal(g, "W", tb_shape(3, 4, 3, 3));
  Value *b = normal(g, "b", tb_shape(2, 4, 3));
  Value *c = normal(g, "c", tb_shape(1, 3));
  Value *s = normal(g, "s", tb_shape(2, 2, 3));
  Graph *body = ir_graph_new(g->arena, g);
  Value *x = ir_add_arg(body, D, tb_shape(2, 2, 3), "x")->out[0];
  Value *Wi = ir_add_arg(body, D, nested ? tb_shape(3, 2, 3, 3) : tb_shape(2, 3, 3), "W")->out[0];
  Value *bi = ir_add_arg(body, D, tb_shape(1, 3), "b")->out[0];
  Value *ci = ir_add_arg(body, D, tb_shape(1, 3), "c")->out[0];
  Value *h;
  if (nested) { /* inner scan over the two halves of this layer's W */
    Graph *inner = ir_graph_new(g->arena, body);
    Value *hx = ir_add_arg(inner, D, tb_shape(2, 2, 3), "h")->out[0];
    Value *Wj = ir_add_arg(inner, D, tb_shape(2, 3, 3), "Wj")->out[0];
    Value *hc = ir_add_arg(inner, D, tb_shape(1, 3), "c")->out[0];
    Value *t = tb_op2(inner, OP_ADD, tb_op2(inner, OP_MATMUL, hx, Wj, NULL), hc, NULL);
    t = tb_op2(inner, OP_MUL, tb_op1(inner, OP_TANH, t, NULL), s, NULL); /* s read directly */
    ir_add_result(inner, t, NULL);
    ir_add_result(inner, tb_op2(inner, OP_MUL, t, t, NULL), NULL);
    Value *iin[3] = {x, Wi, ci};
    Node *ir = tb_repeat(body, inner, 3, iin, 2, 1, 1, "inner");
    ir->a.reverse = reverse;
    Attrs sm = {0};
    Value *ys = tb_shaped(body, OP_REDUCE_SUM, 1, &ir->out[1], D, tb_shape(2, 2, 3), &sm);
    h = tb_op2(body, OP_ADD, tb_op2(body, OP_ADD, ir->out[0], bi, NULL), ys, NULL);
  } else {
    h = tb_op2(body, OP_ADD, tb_op2(body, OP_MATMUL, x, Wi, NULL), bi, NULL);
    h = tb_op2(body, OP_ADD, h, ci, NULL);
    h = tb_op2(body, OP_MUL, tb_op1(body, OP_TANH, h, NULL), s, NULL);
  }
  ir_add_result(body, h, NULL);
  ir_add_result(body, tb_op2(body, OP_MUL, h, x, NULL), NULL);
  Value *in[4] = {x0, W, b, c};
  Node *r = tb_repeat(g, body, 4, in, 4, 1, 2, "layers");
  r->a.reverse = reverse;
  Attrs sm = {0};
  Value *ys = tb_shaped(g, OP_REDUCE_SUM, 1, &r->out[1], D, tb_shape(2, 2, 3), &sm);
  return tb_op2(g, OP_ADD, r->out[0], ys, NULL);
}
CASE(c_repeat) { return scan(g, false, false); }
CASE(c_repeat_reverse) { return scan(g, true, false); }
CASE(c_repeat_nested) { return scan(g, false, true); }

static const struct {
  const char *name;
  Value *(*build)(Graph *, Feeds *);
} cases[] = {
    {"add", c_add}, {"sub", c_sub}, {"mul", c_mul}, {"mul_same", c_mul_same}, {"div", c_div},
    {"neg", c_neg}, {"scale", c_scale}, {"add_scalar", c_add_scalar}, {"exp", c_exp}, {"log", c_log},
    {"sqrt", c_sqrt}, {"rsqrt", c_rsqrt}, {"tanh", c_tanh}, {"sigmoid", c_sigmoid}, {"relu", c_relu},
    {"gelu", c_gelu}, {"silu", c_silu}, {"cast", c_cast}, {"reshape", c_reshape}, {"transpose", c_transpose},
    {"slice", c_slice}, {"split", c_split}, {"pad", c_pad}, {"concat", c_concat}, {"reduce_sum", c_reduce_sum},
    {"broadcast_to", c_broadcast_to}, {"matmul", c_mm}, {"matmul_ta", c_mm_ta}, {"matmul_tb", c_mm_tb},
    {"matmul_tatb", c_mm_tatb}, {"matmul_fold", c_mm_fold}, {"matmul_fold_tb", c_mm_fold_tb},
    {"matmul_bcast_ta", c_mm_bcast_ta}, {"matmul_batched", c_mm_batched},
    {"matmul_bat_tatb", c_mm_batched_tatb}, {"matmul_bcast_ld", c_mm_bcast_lead}, {"embed", c_embed},
    {"layernorm", c_layernorm}, {"rmsnorm", c_rmsnorm}, {"rope", c_rope}, {"rope_inverse", c_rope_inv},
    {"sdpa_causal", c_sdpa_causal}, {"sdpa_full", c_sdpa_full}, {"sdpa_gqa", c_sdpa_gqa},
    {"cross_entropy", c_cross_entropy}, {"sum", c_sum}, {"mean", c_mean}, {"all_reduce", c_all_reduce},
    {"reduce_scatter", c_reduce_scatter}, {"all_gather", c_all_gather}, {"repeat", c_repeat},
    {"repeat_reverse", c_repeat_reverse}, {"repeat_nested", c_repeat_nested},
};

int main(int argc, char **argv) {
  int fails = 0, ran = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (argc > 1 && strcmp(argv[1], cases[i].name) != 0) continue;
    Arena arena;
    arena_init(&arena);
    Module *m = tb_module(&arena, cases[i].name);
    Graph *g = m->graph;
    Feeds f = {.nfeed = 0};
    Value *y = cases[i].build(g, &f);
    Value *r = tb_input(g, "r", D, y->shape);
    f.feeds[f.nfeed++] = (TbFeed){"r", tb_randn(D, y->shape, 77, 1.0)};
    Value *yr = tb_op2(g, OP_MUL, y, r, NULL);
    ir_add_result(g, tb_op1(g, OP_SUM, yr, NULL), "loss");
    int f0 = fails;
    if (!pass_autodiff(m)) {
      fprintf(stderr, "FAIL %s: pass_autodiff\n", cases[i].name);
      fails++;
    } else if (!ir_verify(g, "autodiff")) {
      fprintf(stderr, "FAIL %s: ir_verify\n", cases[i].name);
      fails++;
    } else {
      fails += tb_shapes_stable(m);
      if (fails == f0) fails += tb_fd_check(m, f.nfeed, f.feeds, 64, H, TOL, 0, cases[i].name);
    }
    for (int k = 0; k < f.nfeed; k++) tensor_free(&f.feeds[k].t);
    arena_free(&arena);
    ran++;
  }
  printf("%d cases, %d failures (tolerance: |fd - grad| <= %g * max(1, |grad|), h = %g * max(1, |x|))\n", ran, fails,
         TOL, H);
  return fails || ran == 0 ? 1 : 0;
}
