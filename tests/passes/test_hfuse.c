/* tests/passes/test_hfuse.c — sibling GEMMs as one batched launch (passes/hfuse.c).
 *
 * A built graph (CUDA target, one rank): two matmuls of one A with weights of one shape, side by side, pair
 * (hfuse 1 and 2, hfuse_leader finds the first); so do two with an unrelated node between (the second rises
 * over it); not one whose weight is made between the two, nor weights of two widths, nor a matmul reading
 * another A; the CPU target and `--no-fuse hfuse` mark nothing. In every pair the weights' and the outputs'
 * distances point the same way (the memory plan exchanged the two weights where the outputs lay the other
 * way round: hfuse_order_copies), and the persistent values still never overlap.
 * Real models through the whole pipeline: the Llama shape pairs its k / v and gate / up projections in the
 * forward loop (2 pairs, the query's wider GEMM alone), in bf16 (the weights' bf16 copies) and f32 (the
 * parameters), under tp 2 as well; in the backward loop only weight gradients (X^T dY of one X) pair, where
 * the plan put their gradients and outputs one way round; GPT-2's one QKV GEMM has no sibling. Every marked
 * pair is checked: adjacent, one A (the same bytes), weights and outputs of one shape, outputs meeting
 * neither A nor the other's weight nor each other. Under pp 2 zb the stage's weights are transient bf16 casts and the
 * forward's outputs stacks laid out the other way round: the weights' places are traded, and the pairs stay.
 */
#include <stdio.h>
#include <string.h>

#include "diag.h"
#include "frontend.h"
#include "memplan.h"
#include "memplan_views.h"
#include "passes.h"
#include "pipeline.h"
#include "tb.h"
#include "tb_compile.h"

static int failures; /* CHECK (tests/check.h, through tb.h) counts here */

static bool meets(const Value *a, const Value *b) {
  int64_t al, ah, bl, bh;
  return tb_span(a, &al, &ah) && tb_span(b, &bl, &bh) && al < bh && bl < ah;
}

static bool same_shape(const Value *a, const Value *b) { return ir_shape_eq(&a->shape, &b->shape) && a->dtype == b->dtype; }

static const Value *bytes_of(const Value *v) {
  while (v->def->op == OP_RESHAPE && memplan_is_view(v->def)) v = v->def->in[0];
  return v;
}

/* Checks every pair in g (and its bodies); counts the pairs (pairs[1]: in a reverse loop, the backward), and the
 * marks that are not in one. */
static void check_pairs(const Graph *g, const char *label, int *pairs, int *stray) {
  bool bwd = g->owner && g->owner->op == OP_REPEAT && g->owner->a.reverse;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body) check_pairs(n->body, label, pairs, stray);
    if (n->op != OP_MATMUL || !n->a.hfuse) continue;
    if (n->a.hfuse == 2) {
      *stray += hfuse_leader(g, i) != i - 1;
      continue;
    }
    if (i + 1 >= g->nnodes || hfuse_leader(g, i + 1) != i) {
      ++*stray;
      continue;
    }
    const Node *q = g->nodes[i + 1];
    ++pairs[bwd];
    CHECK(q->op == OP_MATMUL && bytes_of(q->in[0]) == bytes_of(n->in[0]) && same_shape(q->in[0], n->in[0]) &&
              q->nin == 2 && n->nin == 2,
          "%s: a pair not of one A", label);
    CHECK(!bwd || (n->a.ta && !n->a.tb), "%s: a backward pair that is no weight gradient (X^T dY)", label);
    CHECK(same_shape(n->in[1], q->in[1]) && same_shape(n->out[0], q->out[0]) && n->in[1] != q->in[1],
          "%s: a pair's weights or outputs of two shapes", label);
    CHECK(!n->a.epilogue && !q->a.epilogue && n->a.ta == q->a.ta && n->a.tb == q->a.tb, "%s: a pair with an epilogue",
          label);
    CHECK(!meets(q->out[0], n->in[0]) && !meets(q->out[0], n->in[1]) && !meets(q->out[0], n->out[0]) &&
              !meets(n->out[0], q->in[1]),
          "%s: a pair's outputs meet what the batch reads or writes", label);
  }
}

/* The top graph's persistent values (parameters, state, inputs) overlap none of each other on a rank. */
static void check_persistent(const Graph *g, const char *label) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *a = g->nodes[i];
    if ((a->op != OP_PARAM && a->op != OP_STATE && a->op != OP_INPUT) || a->out[0]->host) continue;
    for (int j = i + 1; j < g->nnodes; j++) {
      const Node *b = g->nodes[j];
      if ((b->op != OP_PARAM && b->op != OP_STATE && b->op != OP_INPUT) || b->out[0]->host) continue;
      uint64_t sa = ir_node_stages(a), sb = ir_node_stages(b);
      if (sa && sb && !(sa & sb)) continue; /* (two pipeline stages' own: other ranks', passes/pipe_owners.c) */
      CHECK(!meets(a->out[0], b->out[0]), "%s: persistent %%%d and %%%d overlap", label, a->out[0]->id, b->out[0]->id);
    }
  }
}

static int plan(const char *label, const char *file, const FeDefine *defs, int ndefs, int world, Target target) {
  Arena a;
  arena_init(&a);
  Module *m = tb_compile_model(&a, file, defs, ndefs, world, target);
  CHECK(m, "%s: does not compile, or a pass failed", label);
  if (!m) return -1;
  int pairs[2] = {0, 0}, stray = 0;
  check_pairs(m->graph, label, pairs, &stray);
  check_persistent(m->graph, label);
  CHECK(stray == 0, "%s: %d matmuls marked outside a pair", label, stray);
  printf("%s: %d sibling pairs in the forward, %d in the backward\n", label, pairs[0], pairs[1]);
  arena_free(&a);
  return pairs[0];
}

/* The built graph: returns how many matmuls are marked; checks the pair where one is expected. */
static int built(Target target, unsigned no_fuse, bool expect_pair) {
  Arena a;
  arena_init(&a);
  Module *m = tb_module(&a, "hfuse");
  m->target = target;
  m->no_fuse = no_fuse;
  Graph *g = m->graph;
  Shape xs = tb_shape(2, 8, 16), ws = tb_shape(2, 16, 32), narrow = tb_shape(2, 16, 24);
  Value *x = tb_input(g, "x", DT_F32, xs), *x2 = tb_input(g, "x2", DT_F32, xs);
  Value *w[7];
  for (int i = 0; i < 7; i++) w[i] = tb_param(g, arena_printf(&a, "w%d", i), DT_F32, i == 5 ? narrow : ws, INIT_ZEROS, 0, 0);
  Value *y0 = tb_op2(g, OP_MATMUL, x, w[0], NULL), *y1 = tb_op2(g, OP_MATMUL, x, w[1], NULL); /* a pair */
  Value *z0 = tb_op2(g, OP_MATMUL, x, w[2], NULL), *t = tb_op1(g, OP_TANH, x, NULL);
  Value *z1 = tb_op2(g, OP_MATMUL, x, w[3], NULL); /* a pair with z0: rises over the tanh */
  Value *v0 = tb_op2(g, OP_MATMUL, x, w[6], NULL), *e = tb_op1(g, OP_TANH, w[4], NULL);
  Value *v1 = tb_op2(g, OP_MATMUL, x, e, NULL);    /* its weight made between: stays */
  Value *z2 = tb_op2(g, OP_MATMUL, x, w[5], NULL); /* 24 wide */
  Value *z3 = tb_op2(g, OP_MATMUL, x2, w[4], NULL); /* another A */
  Value *outs[] = {y0, y1, z0, t, z1, v0, v1, z2, z3};
  for (int i = 0; i < 9; i++) ir_add_result(g, outs[i], arena_printf(&a, "r%d", i));
  CHECK(pass_memplan(m), "built: pass_memplan failed");
  CHECK(pass_hfuse(m), "built: pass_hfuse failed");
  int marked = 0;
  for (int i = 0; i < g->nnodes; i++) marked += g->nodes[i]->a.hfuse != 0;
  int p0 = tb_pos_of(g, y0->def), p1 = tb_pos_of(g, y1->def);
  if (expect_pair) {
    CHECK(y0->def->a.hfuse == 1 && y1->def->a.hfuse == 2 && hfuse_leader(g, p1) == p0 && hfuse_leader(g, p0) < 0,
          "built: the two matmuls side by side are no pair (%d, %d)", y0->def->a.hfuse, y1->def->a.hfuse);
    int q0 = tb_pos_of(g, z0->def), q1 = tb_pos_of(g, z1->def);
    CHECK(z0->def->a.hfuse == 1 && z1->def->a.hfuse == 2 && q1 == q0 + 1 && tb_pos_of(g, t->def) > q1,
          "built: the matmul after the tanh did not rise to its sibling (%d at %d, %d at %d)", z0->def->a.hfuse, q0,
          z1->def->a.hfuse, q1);
    CHECK(!v0->def->a.hfuse && !v1->def->a.hfuse && !z2->def->a.hfuse && !z3->def->a.hfuse,
          "built: a matmul whose weight is made between, of another width or another A is marked");
    CHECK(marked == 4, "built: %d matmuls marked, the two pairs' 4 expected", marked);
    int64_t db = w[1]->offset - w[0]->offset, dy = y1->offset - y0->offset;
    CHECK(db && dy && (db > 0) == (dy > 0), "built: the weights' distance %lld and the outputs' %lld point two ways",
          (long long)db, (long long)dy);
    int pairs[2] = {0, 0}, stray = 0;
    check_pairs(g, "built", pairs, &stray);
    CHECK(pairs[0] == 2 && stray == 0, "built: %d pairs, %d stray marks", pairs[0], stray);
    check_persistent(g, "built");
  }
  arena_free(&a);
  return marked;
}

int main(void) {
  built(TARGET_CUDA, 0, true);
  CHECK(built(TARGET_CPU, 0, false) == 0, "built: the CPU target marked a pair");
  CHECK(built(TARGET_CUDA, 1u << FUSE_HFUSE, false) == 0, "built: --no-fuse hfuse marked a pair");

  const char *llama = SHARDC_MODELS_DIR "/llama3-8b.model";
  FeDefine one[] = {{"tp", "1"}, {"dp", "1"}, {"sp", "off"}, {"layers", "2"}, {"seq", "64"}, {"micro_batch", "1"},
                    {"batch", "1"}, {"d", "256"}, {"heads", "4"}, {"kv_heads", "2"}, {"ffn", "512"}, {"vocab", "512"},
                    {"precision", "bf16"}, {"recompute", "none"}};
  int n = plan("llama bf16", llama, one, 14, 1, TARGET_CUDA);
  CHECK(n == 2, "llama bf16: %d pairs, k / v and gate / up expected", n);
  one[12].value = "f32";
  n = plan("llama f32", llama, one, 14, 1, TARGET_CUDA);
  CHECK(n == 2, "llama f32: %d pairs, k / v and gate / up expected", n);
  one[12].value = "bf16";
  one[13].value = "selective";
  n = plan("llama bf16 selective recompute", llama, one, 14, 1, TARGET_CUDA);
  CHECK(n == 2, "llama bf16, selective recompute: %d pairs, k / v and gate / up expected", n);
  FeDefine tp[] = {{"tp", "2"}, {"dp", "1"}, {"sp", "on"}, {"layers", "2"}, {"seq", "64"}, {"micro_batch", "1"},
                   {"batch", "1"}, {"d", "256"}, {"heads", "4"}, {"kv_heads", "2"}, {"ffn", "512"}, {"vocab", "512"},
                   {"precision", "bf16"}};
  n = plan("llama bf16 tp 2", llama, tp, 13, 2, TARGET_CUDA);
  CHECK(n == 2, "llama bf16 tp 2: %d pairs, the shards' k / v and gate / up expected", n);
  /* pp 2 zero-bubble, selective recompute: the forward's k / v and gate / up outputs are stacks the packing lays out the
   * other way round from the stage's weight rows (bf16 casts of the pp-split parameters, transient): the plan trades
   * the two weights' places (hfuse_order_copies), so the pairs do not depend on the layout's order (main declined all 16:
   * 474 kernel calls, 458 paired) */
  FeDefine zb[] = {{"tp", "1"}, {"dp", "1"}, {"sp", "off"}, {"layers", "4"}, {"seq", "64"}, {"micro_batch", "1"},
                   {"batch", "4"}, {"d", "256"}, {"heads", "4"}, {"kv_heads", "2"}, {"ffn", "512"}, {"vocab", "512"},
                   {"precision", "bf16"}, {"recompute", "selective"}, {"pp", "2"}, {"schedule", "zb"}, {"zero", "2"}};
  n = plan("llama bf16 pp 2 zb selective", llama, zb, 17, 2, TARGET_CUDA);
  CHECK(n == 16, "llama bf16 pp 2 zb, selective recompute: %d forward pairs, each stage's k / v and gate / up in each of"
                 " its 4 forwards expected", n);
  n = plan("llama on the CPU target", llama, one, 14, 1, TARGET_CPU);
  CHECK(n == 0, "llama, CPU target: %d pairs", n);
  FeDefine gpt[] = {{"dp", "1"}, {"layers", "2"}, {"seq", "64"}, {"micro_batch", "1"}, {"batch", "1"},
                    {"precision", "bf16"}};
  n = plan("gpt2 bf16", SHARDC_MODELS_DIR "/gpt2-124m.model", gpt, 6, 1, TARGET_CUDA);
  CHECK(n == 0, "gpt2: %d pairs (its QKV is one GEMM already, its MLP has one up projection)", n);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("test_hfuse: ok\n");
  return 0;
}
