/* tests/ir/test_infer_verify.c — shape-rule diagnostics (exact text) and the verifier
 * catching malformed graphs. */
#include "diag.h"
#include "testutil.h"

static char *diag_text;
static size_t diag_len;
static FILE *diag_f;
static Diag captured;
static Diag *outer;

static void capture(void) {
  diag_f = open_memstream(&diag_text, &diag_len);
  if (!diag_f) exit(2);
  diag_init(&captured, diag_f, 0);
  outer = diag_enter(&captured);
}

/* Stops capturing and compares with want. */
static void expect_diag(const char *want) {
  fflush(diag_f);
  if (strcmp(diag_text, want) != 0) {
    fprintf(stderr, "diagnostic differs:\n  got:  %s  want: %s", diag_text, want);
    t_failures++;
  }
  fclose(diag_f);
  free(diag_text);
  diag_text = NULL;
  diag_leave(outer);
  diag_free(&captured);
}

static const SrcLoc L = {"m.model", 14, 9};

static void expect_infer_error(Graph *g, OpKind op, int nin, Value **in, int nout, const Attrs *a, Shape preset,
                               const char *want) {
  Node *n = ir_node_new(g, op, nin, in, nout, L);
  if (a) n->a = *a;
  n->out[0]->shape = preset;
  capture();
  CHECK(!ir_infer(n));
  expect_diag(want);
}

static void test_infer_errors(Arena *A) {
  Graph *g = ir_graph_new(A, NULL);
  Value *x = t_input(g, "x", DT_F32, S(3, 4, 64, 768)), *w = t_input(g, "w", DT_F32, S(2, 512, 3072));
  expect_infer_error(g, OP_MATMUL, 2, (Value *[]){x, w}, 1, NULL, S(0),
                     "m.model:14:9: error: matmul: inner dimensions differ: [4, 64, 768] @ [512, 3072] (768 vs 512)\n");
  /* the accumulator (passes/gacc.c): the product's shape; 2 or 3 inputs */
  Value *xa = t_input(g, "xa", DT_F32, S(2, 4, 8)), *dy = t_input(g, "dy", DT_F32, S(2, 4, 3));
  Value *sum = t_input(g, "sum", DT_F32, S(2, 3, 8));
  Attrs ta = {0};
  ta.ta = true;
  expect_infer_error(g, OP_MATMUL, 3, (Value *[]){xa, dy, sum}, 1, &ta, S(0),
                     "m.model:14:9: error: matmul: the accumulator is [3, 8], the product [8, 3]\n");
  Attrs cbt = {0}; /* cb (the leading dims contracted too) takes A^T @ B of one leading shape */
  cbt.ta = cbt.tb = cbt.cb = true;
  Value *xc = t_input(g, "xc", DT_F32, S(3, 2, 4, 8)), *dc = t_input(g, "dc", DT_F32, S(3, 2, 3, 4));
  expect_infer_error(g, OP_MATMUL, 2, (Value *[]){xc, dc}, 1, &cbt, S(0),
                     "m.model:14:9: error: matmul: contracting the leading dims (cb) takes A^T @ B of one leading shape, "
                     "not [2, 4, 8]^T @ [2, 3, 4]^T\n");
  expect_infer_error(g, OP_MATMUL, 4, (Value *[]){xa, dy, sum, sum}, 1, &ta, S(0),
                     "m.model:14:9: error: matmul: takes 2 inputs (A, B) or 3 (A, B and the accumulator C), not 4\n");
  Value *a = t_input(g, "a", DT_F32, S(2, 4, 64)), *b = t_input(g, "b", DT_F32, S(1, 32));
  expect_infer_error(g, OP_ADD, 2, (Value *[]){a, b}, 1, NULL, S(0),
                     "m.model:14:9: error: add: shapes cannot be broadcast: [4, 64] and [32] (64 vs 32)\n");
  Attrs at = {0};
  at.heads = 12;
  at.kv_heads = 5;
  expect_infer_error(g, OP_SDPA, 3, (Value *[]){x, x, x}, 2, &at, S(0),
                     "m.model:14:9: error: sdpa: heads (12) must be a positive multiple of kv_heads (5)\n");
  at.heads = 10;
  at.kv_heads = 10;
  expect_infer_error(g, OP_SDPA, 3, (Value *[]){x, x, x}, 2, &at, S(0),
                     "m.model:14:9: error: sdpa: hidden size 768 of q [4, 64, 768] is not divisible by heads (10)\n");
  Value *lg = t_input(g, "lg", DT_F32, S(3, 4, 64, 100)), *tg = t_input(g, "tg", DT_I32, S(2, 4, 63));
  expect_infer_error(g, OP_CROSS_ENTROPY, 2, (Value *[]){lg, tg}, 1, NULL, S(0),
                     "m.model:14:9: error: cross_entropy: targets [4, 63] do not match logits [4, 64, 100] "
                     "(expected the logits' shape without the last dim)\n");
  Value *r = t_input(g, "r", DT_F32, S(2, 2, 3));
  expect_infer_error(g, OP_RESHAPE, 1, &r, 1, NULL, S(2, 4, 2),
                     "m.model:14:9: error: reshape: cannot reshape [2, 3] (6 elements) to [4, 2] (8 elements)\n");
  expect_infer_error(g, OP_EMBED, 2, (Value *[]){w, r}, 1, NULL, S(0),
                     "m.model:14:9: error: embed: indices must be an integer tensor, got f32[2, 3]\n");
  Attrs sl = {0};
  sl.axis = 1;
  sl.start = 2;
  sl.len = 2;
  expect_infer_error(g, OP_SLICE, 1, &r, 1, &sl, S(0), "m.model:14:9: error: slice: [2:4] out of bounds for axis 1 of [2, 3]\n");
  Value *ln_w = t_input(g, "lnw", DT_F32, S(1, 767));
  expect_infer_error(g, OP_LAYERNORM, 3, (Value *[]){x, ln_w, ln_w}, 1, NULL, S(0),
                     "m.model:14:9: error: layernorm: weight must be [768] to match input [4, 64, 768], got [767]\n");

  /* a REPEAT whose body argument does not match the carried input */
  Node *rep = ir_node_new(g, OP_REPEAT, 1, &a, 1, L);
  rep->a.count = 2;
  rep->a.ncarry = 1;
  rep->a.name = "blocks";
  Graph *body = ir_graph_new(A, g);
  body->owner = rep;
  rep->body = body;
  Value *arg = ir_add_arg(body, DT_F32, S(2, 4, 32), "x")->out[0];
  ir_add_result(body, arg, NULL);
  capture();
  CHECK(!ir_infer(rep));
  expect_diag("m.model:14:9: error: repeat blocks: input 0 is f32[4, 64] but the body's argument 0 is f32[4, 32]\n");

  /* a few successful inferences: symbols survive, dtypes follow the rules */
  Shape sx = S(3, 4, 64, 768);
  sx.sym[0] = 0;
  Value *xs = t_input(g, "xs", DT_BF16, sx), *wm = t_input(g, "wm", DT_BF16, S(2, 768, 3072));
  Value *y = t_op2(g, OP_MATMUL, xs, wm, NULL);
  CHECK(y->shape.rank == 3 && y->shape.dim[2] == 3072 && y->shape.sym[0] == 0 && y->dtype == DT_BF16);
  Value *bb = t_input(g, "bb", DT_F32, S(1, 3072));
  Value *z = t_op2(g, OP_ADD, y, bb, NULL);
  CHECK(z->dtype == DT_F32 && ir_shape_eq(&z->shape, &y->shape) && z->shape.sym[0] == 0);
  Attrs q = {0};
  q.heads = 12;
  q.kv_heads = 4;
  Value *k = t_input(g, "k", DT_F32, S(3, 4, 64, 256));
  Node *sd = t_node(g, OP_SDPA, 3, (Value *[]){x, k, k}, 2, &q);
  CHECK(ir_shape_eq(&sd->out[0]->shape, &x->shape) && ir_shape_eq(&sd->out[1]->shape, &(Shape){3, {4, 12, 64}, {0}}));
}

static Graph *valid_graph(Arena *A, Node **mid) {
  Graph *g = ir_graph_new(A, NULL);
  Value *a = t_input(g, "a", DT_F32, S(1, 4));
  Value *b = t_op1(g, OP_EXP, a, NULL);
  Value *c = t_op2(g, OP_ADD, a, b, NULL);
  ir_add_result(g, c, "c");
  *mid = b->def;
  return g;
}

static void test_verify(Arena *A) {
  fprintf(stderr, "(expected verifier messages follow)\n");
  Node *mid;
  Graph *g = valid_graph(A, &mid);
  CHECK(ir_verify(g, "test"));

  g = valid_graph(A, &mid); /* use before definition */
  Node *t = g->nodes[1];
  g->nodes[1] = g->nodes[2];
  g->nodes[2] = t;
  CHECK(!ir_verify(g, "swap"));

  g = valid_graph(A, &mid); /* arity */
  mid->nin = 2;
  mid->in = (Value *[]){mid->in[0], mid->in[0]};
  CHECK(!ir_verify(g, "arity"));

  g = valid_graph(A, &mid); /* sharding on a dim past the rank, and an unknown axis */
  mid->out[0]->sharding.split[3] = RT_AX_TP;
  CHECK(!ir_verify(g, "sharding"));
  g = valid_graph(A, &mid);
  mid->out[0]->sharding.split[0] = 9;
  CHECK(!ir_verify(g, "axis"));

  g = valid_graph(A, &mid); /* duplicate source names */
  t_input(g, "a", DT_F32, S(1, 4));
  CHECK(!ir_verify(g, "dup"));

  g = valid_graph(A, &mid); /* NULL result */
  ir_add_result(g, mid->out[0], "x");
  g->results[1] = NULL;
  CHECK(!ir_verify(g, "null result"));

  g = valid_graph(A, &mid); /* broken output back-link */
  mid->out[0]->idx = 1;
  CHECK(!ir_verify(g, "backlink"));

  /* a region value used outside its body; an ARG with a wrong index */
  g = ir_graph_new(A, NULL);
  Value *a = t_input(g, "a", DT_F32, S(1, 4));
  Node *call = t_call(A, g, a);
  Graph *body = call->body;
  Value *inner = body->results[0];
  ir_add_result(g, call->out[0], "y");
  CHECK(ir_verify(g, "ok region"));
  Value *leak = t_op1(g, OP_EXP, inner, NULL);
  CHECK(!ir_verify(g, "scope"));
  g->nnodes--; /* drop the leaking node */
  (void)leak;
  CHECK(ir_verify(g, "ok again"));
  body->args[0]->a.index = 3;
  CHECK(!ir_verify(g, "arg index"));
}

/* What the verifier finds through its table of checked outputs (ir/verify.c in_scope_seen) and its
 * one-walk value check (value_ok), each way a read can be out of scope and a sharding wrong: each
 * must still fail, and the reads in scope pass. */
static void test_verify_scopes(Arena *A) {
  Graph *g = ir_graph_new(A, NULL);
  Value *a = t_input(g, "a", DT_F32, S(1, 4));
  Node *c1 = t_call(A, g, a), *c2 = t_call(A, g, a);
  Value *late = t_op1(g, OP_EXP, c2->out[0], NULL); /* after both regions */
  ir_add_result(g, late, "y");
  Value *e = t_op1(c2->body, OP_EXP, a, NULL); /* a capture of a, defined before the region: fine */
  CHECK(ir_verify(g, "capture"));
  Node *en = e->def;
  en->in[0] = c1->body->results[0]; /* a value of the sibling body */
  CHECK(!ir_verify(g, "sibling body"));
  en->in[0] = late; /* an outer value defined after the region */
  CHECK(!ir_verify(g, "outer value after the region"));
  en->in[0] = c2->out[0]; /* the region's own output */
  CHECK(!ir_verify(g, "the owner's output"));
  en->in[0] = c1->out[0]; /* an earlier region's output: fine */
  CHECK(ir_verify(g, "earlier region"));
  /* a region inside the body reading the top graph's input (two levels out): fine */
  Node *inner = t_call(A, c2->body, e);
  Value *deep = t_op1(inner->body, OP_EXP, a, NULL);
  CHECK(ir_verify(g, "nested capture"));
  deep->def->in[0] = late; /* two levels out, after the outer region */
  CHECK(!ir_verify(g, "nested, after the region"));
  deep->def->in[0] = a;
  /* a value whose node is no longer listed: its node dropped from the graph */
  Value *gone = t_op1(g, OP_EXP, a, NULL);
  g->nnodes--;
  en->in[0] = gone;
  CHECK(!ir_verify(g, "dropped node"));
  en->in[0] = a;
  CHECK(ir_verify(g, "fine again"));

  /* shardings: a mesh axis splitting two dims; an inner split over its outer axis; blocks that do
   * not divide the dim; then a well-formed inner split (cp outer, tp inner) */
  Value *v = t_input(g, "w", DT_F32, S(2, 4, 8));
  CHECK(ir_verify(g, "a rank-2 input"));
  v->sharding.split[0] = RT_AX_TP;
  v->sharding.split[1] = RT_AX_TP;
  CHECK(!ir_verify(g, "one axis, two dims"));
  v->sharding.split[1] = -1;
  v->sharding.inner[0] = RT_AX_TP;
  CHECK(!ir_verify(g, "inner over the outer axis"));
  v->sharding.inner[0] = -1;
  v->sharding.blocks[1] = 3;
  v->sharding.split[1] = RT_AX_DP;
  CHECK(!ir_verify(g, "blocks not dividing"));
  v->sharding.blocks[1] = 0;
  v->sharding.split[1] = RT_AX_CP;
  v->sharding.inner[1] = RT_AX_TP;
  CHECK(!ir_verify(g, "inner axis used by another dim"));
  v->sharding.split[0] = -1;
  CHECK(ir_verify(g, "cp with tp inside"));
}

int main(void) {
  Arena A;
  arena_init(&A);
  test_infer_errors(&A);
  test_verify(&A);
  test_verify_scopes(&A);
  arena_free(&A);
  return t_done("test_infer_verify");
}
