/* tests/passes/test_autodiff_model.c — pass_autodiff on whole models, against finite differences.
 *
 *  gpt:   a tiny GPT-2 (token + position embeddings, 2 layers in one REPEAT with layernorm,
 *         causal sdpa attention, a GELU MLP, a final layernorm, the head tied to the token
 *         embedding, cross-entropy over a padded vocabulary);
 *  llama: a tiny Llama block stack (RMSNorm, grouped-query attention with RoPE, SwiGLU MLP,
 *         untied head).
 * Both are built with the IR builder, differentiated, verified, shape-checked against
 * ir_infer, and run in the fp64 interpreter: 24 sampled entries of every parameter's
 * gradient must match central differences within 1e-6 * max(1, |grad|). The backward must
 * keep the layers as one region: exactly two REPEATs (forward and backward) in the top graph.
 */
#include <stdio.h>
#include <string.h>

#include "diag.h"
#include "passes.h"
#include "tb.h"

#define D DT_F64
#define TOL 1e-6

enum { B = 2, S = 4, L = 2 };

static Value *P(Graph *g, const char *name, Shape s, double mean, double std) {
  return tb_param(g, name, D, s, INIT_NORMAL, mean, std);
}

static Value *add(Graph *g, Value *a, Value *b) { return tb_op2(g, OP_ADD, a, b, NULL); }
static Value *mul(Graph *g, Value *a, Value *b) { return tb_op2(g, OP_MUL, a, b, NULL); }
static Value *mm(Graph *g, Value *a, Value *b) { return tb_op2(g, OP_MATMUL, a, b, NULL); }
static Value *slice(Graph *g, Value *x, int axis, int start, int len) {
  Attrs a = {.axis = axis, .start = start, .len = len};
  return tb_op1(g, OP_SLICE, x, &a);
}
static Value *layernorm(Graph *g, Value *x, Value *w, Value *b) {
  Value *in[3] = {x, w, b};
  Attrs a = {.eps = 1e-5};
  return tb_op(g, OP_LAYERNORM, 3, in, &a);
}
static Value *rmsnorm(Graph *g, Value *x, Value *w) {
  Value *in[2] = {x, w};
  Attrs a = {.eps = 1e-5};
  return tb_op(g, OP_RMSNORM, 2, in, &a);
}
static Value *sdpa(Graph *g, Value *q, Value *k, Value *v, int heads, int kv) {
  Value *in[3] = {q, k, v};
  Attrs a = {.heads = heads, .kv_heads = kv, .causal = true};
  return tb_node(g, OP_SDPA, 3, in, 2, &a)->out[0];
}
static Value *arg(Graph *body, Value *stacked) { /* a body argument for one slice of a stacked param */
  Shape s = stacked->shape;
  for (int i = 0; i + 1 < s.rank; i++) {
    s.dim[i] = s.dim[i + 1];
    s.sym[i] = s.sym[i + 1];
  }
  s.rank--;
  return ir_add_arg(body, stacked->dtype, s, stacked->name)->out[0];
}

static void feed_tokens(TbFeed *f, int V) {
  f[0] = (TbFeed){"tokens", tb_randint(tb_shape(2, B, S), 3, 0, V)};
  f[1] = (TbFeed){"targets", tb_randint(tb_shape(2, B, S), 4, 0, V)};
}

static Value *embed_tokens(Graph *g, Value *wte, Value **targets) {
  Value *tok = tb_input(g, "tokens", DT_I32, tb_shape(2, B, S));
  *targets = tb_input(g, "targets", DT_I32, tb_shape(2, B, S));
  return tb_op2(g, OP_EMBED, wte, tok, NULL);
}

/* ---- GPT ------------------------------------------------------------------- */
static void build_gpt(Module *m) {
  enum { V = 11, VP = 12, C = 8, HEADS = 2, HID = 16 };
  Graph *g = m->graph;
  Value *wte = P(g, "wte", tb_shape(2, VP, C), 0, 0.5), *wpe = P(g, "wpe", tb_shape(2, S, C), 0, 0.5);
  Value *targets;
  Value *x = embed_tokens(g, wte, &targets);
  Attrs io = {.start = 0};
  Value *pos = tb_shaped(g, OP_IOTA, 0, NULL, DT_I32, tb_shape(1, S), &io);
  x = add(g, x, tb_op2(g, OP_EMBED, wpe, pos, NULL));
  Value *st[12] = {
      P(g, "h.ln1_w", tb_shape(2, L, C), 1, 0.2),        P(g, "h.ln1_b", tb_shape(2, L, C), 0, 0.2),
      P(g, "h.w_qkv", tb_shape(3, L, C, 3 * C), 0, 0.4), P(g, "h.b_qkv", tb_shape(2, L, 3 * C), 0, 0.2),
      P(g, "h.w_o", tb_shape(3, L, C, C), 0, 0.4),       P(g, "h.b_o", tb_shape(2, L, C), 0, 0.2),
      P(g, "h.ln2_w", tb_shape(2, L, C), 1, 0.2),        P(g, "h.ln2_b", tb_shape(2, L, C), 0, 0.2),
      P(g, "h.w_fc", tb_shape(3, L, C, HID), 0, 0.4),    P(g, "h.b_fc", tb_shape(2, L, HID), 0, 0.2),
      P(g, "h.w_proj", tb_shape(3, L, HID, C), 0, 0.4),  P(g, "h.b_proj", tb_shape(2, L, C), 0, 0.2),
  };
  Graph *body = ir_graph_new(g->arena, g);
  Value *bx = ir_add_arg(body, D, x->shape, "x")->out[0];
  Value *a[12];
  for (int i = 0; i < 12; i++) a[i] = arg(body, st[i]);
  Value *h = layernorm(body, bx, a[0], a[1]);
  Value *qkv = add(body, mm(body, h, a[2]), a[3]);
  Value *o = sdpa(body, slice(body, qkv, 2, 0, C), slice(body, qkv, 2, C, C), slice(body, qkv, 2, 2 * C, C), HEADS, HEADS);
  Value *x1 = add(body, bx, add(body, mm(body, o, a[4]), a[5]));
  Value *h2 = layernorm(body, x1, a[6], a[7]);
  Value *f = tb_op1(body, OP_GELU, add(body, mm(body, h2, a[8]), a[9]), NULL);
  ir_add_result(body, add(body, x1, add(body, mm(body, f, a[10]), a[11])), NULL);
  Value *in[13] = {x};
  memcpy(in + 1, st, sizeof st);
  x = tb_repeat(g, body, 13, in, L, 1, 12, "h")->out[0];
  Value *hf = layernorm(g, x, P(g, "lnf_w", tb_shape(1, C), 1, 0.2), P(g, "lnf_b", tb_shape(1, C), 0, 0.2));
  Attrs tb = {.tb = true};
  Value *logits = tb_op2(g, OP_MATMUL, hf, wte, &tb);
  Attrs ce = {.len = V};
  ir_add_result(g, tb_op2(g, OP_CROSS_ENTROPY, logits, targets, &ce), "loss");
}

/* ---- Llama ----------------------------------------------------------------- */
static void build_llama(Module *m) {
  enum { V = 13, HQ = 4, KV = 2, HD = 4, C = HQ * HD, HID = 24 };
  Graph *g = m->graph;
  Value *wte = P(g, "tok_emb", tb_shape(2, V, C), 0, 0.5);
  Value *targets;
  Value *x = embed_tokens(g, wte, &targets);
  Value *st[9] = {
      P(g, "l.rms1", tb_shape(2, L, C), 1, 0.2),         P(g, "l.wq", tb_shape(3, L, C, C), 0, 0.3),
      P(g, "l.wk", tb_shape(3, L, C, KV * HD), 0, 0.3),  P(g, "l.wv", tb_shape(3, L, C, KV * HD), 0, 0.3),
      P(g, "l.wo", tb_shape(3, L, C, C), 0, 0.3),        P(g, "l.rms2", tb_shape(2, L, C), 1, 0.2),
      P(g, "l.w_gate", tb_shape(3, L, C, HID), 0, 0.3),  P(g, "l.w_up", tb_shape(3, L, C, HID), 0, 0.3),
      P(g, "l.w_down", tb_shape(3, L, HID, C), 0, 0.3),
  };
  Graph *body = ir_graph_new(g->arena, g);
  Value *bx = ir_add_arg(body, D, x->shape, "x")->out[0];
  Value *a[9];
  for (int i = 0; i < 9; i++) a[i] = arg(body, st[i]);
  Value *h = rmsnorm(body, bx, a[0]);
  Attrs rq = {.heads = HQ, .theta = 10000}, rk = {.heads = KV, .theta = 10000};
  Value *q = tb_op1(body, OP_ROPE, mm(body, h, a[1]), &rq);
  Value *k = tb_op1(body, OP_ROPE, mm(body, h, a[2]), &rk);
  Value *o = sdpa(body, q, k, mm(body, h, a[3]), HQ, KV);
  Value *x1 = add(body, bx, mm(body, o, a[4]));
  Value *h2 = rmsnorm(body, x1, a[5]);
  Value *sw = mul(body, tb_op1(body, OP_SILU, mm(body, h2, a[6]), NULL), mm(body, h2, a[7]));
  ir_add_result(body, add(body, x1, mm(body, sw, a[8])), NULL);
  Value *in[10] = {x};
  memcpy(in + 1, st, sizeof st);
  x = tb_repeat(g, body, 10, in, L, 1, 9, "layers")->out[0];
  Value *hf = rmsnorm(g, x, P(g, "norm", tb_shape(1, C), 1, 0.2));
  Value *logits = mm(g, hf, P(g, "head", tb_shape(2, C, V), 0, 0.5));
  Attrs ce = {.len = V};
  ir_add_result(g, tb_op2(g, OP_CROSS_ENTROPY, logits, targets, &ce), "loss");
}

static int run(const char *name, void (*build)(Module *), int V) {
  Arena arena;
  arena_init(&arena);
  Module *m = tb_module(&arena, name);
  build(m);
  int fails = 0;
  if (!pass_autodiff(m) || !ir_verify(m->graph, "autodiff")) {
    fprintf(stderr, "FAIL %s: autodiff or verify\n", name);
    arena_free(&arena);
    return 1;
  }
  int nrep = 0;
  for (int i = 0; i < m->graph->nnodes; i++) {
    Node *n = m->graph->nodes[i];
    if (n->op != OP_REPEAT) continue;
    nrep++;
    int64_t per_layer = 0;
    for (int j = n->a.ncarry; j < n->nout; j++) per_layer += ir_numel(&n->out[j]->shape) / n->a.count;
    printf("  %s: repeat %s: %d inputs, %d outputs, %lld stacked elements per layer%s\n", name, n->a.name, n->nin,
           n->nout, (long long)per_layer, n->a.reverse ? " (reverse)" : "");
  }
  if (nrep != 2) {
    fprintf(stderr, "FAIL %s: %d REPEATs after autodiff, want 2 (forward, backward)\n", name, nrep);
    fails++;
  }
  fails += tb_shapes_stable(m);
  TbFeed f[2];
  feed_tokens(f, V);
  fails += tb_fd_check(m, 2, f, 24, 1e-5, TOL, 0, name);
  tensor_free(&f[0].t);
  tensor_free(&f[1].t);
  arena_free(&arena);
  return fails;
}

int main(void) {
  int fails = run("gpt", build_gpt, 11) + run("llama", build_llama, 13);
  printf("%d failures (tolerance: |fd - grad| <= %g * max(1, |grad|))\n", fails, TOL);
  return fails ? 1 : 0;
}
