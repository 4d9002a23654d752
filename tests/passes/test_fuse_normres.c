/* tests/passes/test_fuse_normres.c — the norms' backward that add the residual gradient themselves
 * (passes/fuse_normres.c, CUDA target, after the memory plan).
 *
 * Built graphs: dx, dw, db = layernorm_bwd(x, w, dy); r = add(carry, dx), with dy an input (its bytes
 * persistent; the carry computed, r planned over it: the pair fuses) and with the carry an input and dy
 * computed just before, dead after the norm's backward (the plan gives r dy's bytes: the kernel would store
 * r over the dy it still reads, so the pair stays apart); dx read by another node too: no fusion; the CPU
 * target: nothing marked. In every graph the pair is marked exactly
 * when r meets none of x, w, dy, dw, db and meets the carry only as its very tensor, checked from the
 * plan's offsets here (tb_span), not by the pass's own helpers.
 * Real models through the whole pipeline (tiny f32 and bf16, tiny tp=2 + sp bf16, tiny dp=2 ZeRO 3 bf16 with 2
 * accumulation micro-steps (two backward loops; the f32 casts of dw and db between the norm's backward and its
 * add: the add moved up), Llama-3-8B with 2 layers):
 * each layer loop body's two norms' backward take the add after them (2 pairs a loop), the pairs are
 * what fuse_normres_partner says both ways, with the same placement rule, and the add is in no group.
 */
#include <stdio.h>
#include <string.h>

#include "diag.h"
#include "frontend.h"
#include "passes.h"
#include "pipeline.h"
#include "tb_compile.h"
#include "tb.h"

static int failures; /* CHECK (tests/check.h, through tb.h) counts here */

static bool meets(const Value *a, const Value *b) {
  int64_t al, ah, bl, bh;
  return tb_span(a, &al, &ah) && tb_span(b, &bl, &bh) && al < bh && bl < ah;
}

/* r may be the carry's very tensor (same offset, shape and element size), else must not meet it. */
static bool carry_ok(const Value *r, const Value *c) {
  if (c->def->op != OP_ARG && r->offset == c->offset && r->stride == c->stride && ir_shape_eq(&r->shape, &c->shape) &&
      ir_dtype_size(r->dtype) == ir_dtype_size(c->dtype))
    return true;
  return !meets(r, c);
}

/* Whether the kernel may store r = dx + carry while it reads x, w, dy and the carry (the rule, from the plan). */
static bool placement_ok(const Node *nb, const Node *add) {
  const Value *r = add->out[0], *carry = add->in[add->in[0] == nb->out[0] ? 1 : 0];
  for (int k = 0; k < nb->nin; k++)
    if (meets(r, nb->in[k])) return false;
  for (int k = 1; k < nb->nout; k++)
    if (meets(r, nb->out[k])) return false;
  return carry_ok(r, carry);
}

static bool is_norm_bwd(const Node *n) { return n->op == OP_LAYERNORM_BWD || n->op == OP_RMSNORM_BWD; }

/* Checks every norm's backward of g (and its bodies); returns how many add the residual gradient. */
static int check_pairs(const Graph *g, const char *label) {
  int count = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body) count += check_pairs(n->body, label);
    if (n->op == OP_ADD && n->a.normres) {
      int p = fuse_normres_partner(g, i);
      CHECK(p >= 0 && p < i && fuse_normres_partner(g, p) == i, "%s: the add at %d has no norm's backward", label, i);
    }
    if (!is_norm_bwd(n) || !n->a.normres) continue;
    int j = fuse_normres_partner(g, i);
    CHECK(j > i && fuse_normres_partner(g, j) == i, "%s: the norm's backward at %d has no add", label, i);
    if (j <= i) continue;
    count++;
    const Node *add = g->nodes[j];
    for (int q = i + 1; q < j; q++) CHECK(g->nodes[q]->op == OP_ARG, "%s: a computing node between the pair", label);
    CHECK(add->op == OP_ADD && add->group == 0 && ir_count_uses_deep(g, n->out[0]) == 1,
          "%s: the add: %s in group %d, dx read %d times", label, ir_ops[add->op].name, add->group,
          ir_count_uses_deep(g, n->out[0]));
    CHECK(placement_ok(n, add), "%s: the norm's backward at %d would store %%%d over what it reads", label, i,
          add->out[0]->id);
  }
  return count;
}

/* x, w, dy -> layernorm_bwd -> add(carry, dx); dy an input or computed (tanh of an input) just before;
 * dx also read by a sum (shared) or not. Returns whether the pair was marked; *ok: the placement rule. */
static bool built(bool dy_input, bool carry_input, bool shared, Target target, bool *ok) {
  Arena a;
  arena_init(&a);
  Module *m = tb_module(&a, "normres");
  m->target = target;
  Graph *g = m->graph;
  Shape s = tb_shape(2, 16, 64);
  Value *x = tb_input(g, "x", DT_F32, s), *d0 = tb_input(g, "d0", DT_F32, s), *c0 = tb_input(g, "c0", DT_F32, s);
  Value *w = tb_param(g, "w", DT_F32, tb_shape(1, 64), INIT_ONES, 0, 0);
  Value *carry = carry_input ? c0 : tb_op1(g, OP_EXP, c0, NULL);
  Value *dy = dy_input ? d0 : tb_op1(g, OP_TANH, d0, NULL);
  Attrs at = {.eps = 1e-5};
  Node *nb = tb_node(g, OP_LAYERNORM_BWD, 3, (Value *[]){x, w, dy}, 3, &at);
  Value *r = tb_op2(g, OP_ADD, carry, nb->out[0], NULL);
  Value *l = tb_op1(g, OP_SUM, r, NULL);
  l = tb_op2(g, OP_ADD, l, tb_op1(g, OP_SUM, nb->out[1], NULL), NULL);
  l = tb_op2(g, OP_ADD, l, tb_op1(g, OP_SUM, nb->out[2], NULL), NULL);
  if (shared) l = tb_op2(g, OP_ADD, l, tb_op1(g, OP_SUM, nb->out[0], NULL), NULL);
  ir_add_result(g, l, "loss");
  CHECK(pass_memplan(m), "pass_memplan failed");
  CHECK(pass_fuse_normres(m), "pass_fuse_normres failed");
  *ok = placement_ok(nb, r->def);
  bool marked = nb->a.normres;
  CHECK(marked == r->def->a.normres, "the norm's backward and its add marked differently");
  CHECK(!marked || check_pairs(g, "built") == 1, "the built pair does not check");
  arena_free(&a);
  return marked;
}

static void built_graphs(void) {
  bool ok;
  bool in = built(true, false, false, TARGET_CUDA, &ok);
  CHECK(in && ok, "dy an input: marked %d, placement %d (want both)", in, ok);
  bool dead = built(false, true, false, TARGET_CUDA, &ok);
  CHECK(!ok, "dy dead after the norm's backward was meant to give r its bytes (the rule's other side)");
  CHECK(dead == ok, "dy dead after the norm's backward: marked %d, placement %d", dead, ok);
  CHECK(!built(true, false, true, TARGET_CUDA, &ok), "dx read by another node: marked");
  CHECK(!built(true, false, false, TARGET_CPU, &ok), "the CPU target: marked");
}

static void model(const char *label, const char *file, const FeDefine *defs, int ndefs, int world, int want) {
  Arena a;
  arena_init(&a);
  Module *m = tb_compile_model(&a, file, defs, ndefs, world, TARGET_CUDA);
  CHECK(m, "%s: does not compile, or a pass failed", label);
  if (!m) return;
  int n = check_pairs(m->graph, label);
  CHECK(n == want, "%s: %d norms' backward add the residual gradient, want %d", label, n, want);
  printf("%s: %d norms' backward add the residual gradient\n", label, n);
  arena_free(&a);
}

int main(void) {
  built_graphs();
  const char *tiny = SHARDC_MODELS_DIR "/tiny.model";
  FeDefine one[] = {{"dp", "1"}}, bf16[] = {{"dp", "1"}, {"precision", "bf16"}};
  FeDefine tp[] = {{"dp", "1"}, {"tp", "2"}, {"sp", "on"}, {"precision", "bf16"}};
  FeDefine llama[] = {{"tp", "1"}, {"dp", "1"}, {"sp", "off"}, {"layers", "2"}, {"seq", "64"}, {"micro_batch", "1"},
                      {"batch", "1"}};
  model("tiny f32", tiny, one, 1, 1, 2);
  model("tiny bf16", tiny, bf16, 2, 1, 2);
  model("tiny tp=2 sp bf16", tiny, tp, 4, 2, 2);
  /* ZeRO 3 over dp 2 with 2 accumulation micro-steps (the last peeled: two backward loops): the f32 casts of dw and
   * db lie between each norm's backward and its add, which moves up */
  FeDefine z3[] = {{"dp", "2"}, {"zero", "3"}, {"precision", "bf16"}, {"micro_batch", "2"}, {"batch", "8"}};
  model("tiny dp=2 zero=3 accum 2 bf16", tiny, z3, 5, 2, 4);
  model("llama3-8b", SHARDC_MODELS_DIR "/llama3-8b.model", llama, 7, 1, 2);
  if (failures) fprintf(stderr, "test_fuse_normres: %d failures\n", failures);
  else printf("test_fuse_normres: ok\n");
  return failures ? 1 : 0;
}
