/* tests/passes/test_fuse_sumsq.c — the gradient clip's sums of squares in the concat's kernel (passes/fuse_sumsq.c).
 *
 * A built graph: a SUMSQ whose input the plan gives to a value written before the concat stays out, the other joins.
 * Real models through the whole pipeline. For the CUDA target, in every plan: each SUMSQ marked sumsq_fused is read
 * by one [1] reshape that the clip's concat (marked too) alone reads, in the same graph and stage, and
 * fuse_sumsq_piece finds it at that piece; its gradient (a folded cast's bf16 source) is f32 or bf16 in device
 * memory, and no node from the SUMSQ to the concat owns a body or writes a byte of it (the kernel reads it at the
 * concat's place). Which pieces join:
 *   - one rank (tiny f32, tiny bf16, Llama with 2 layers): every piece, bf16 gradients read as they are under bf16;
 *   - tp 2: exactly the pieces of replicated gradients; the tp-partial ones reach the concat through their
 *     all-reduce and stay as they are;
 *   - ZeRO 2 over dp 2: none (the shards' sums are all-reduced together first);
 *   - pp 2: the pieces no all-reduce over pp completes;
 *   - the CPU target: nothing marked.
 */
#include <stdio.h>
#include <string.h>

#include "diag.h"
#include "frontend.h"
#include "memplan.h"
#include "passes.h"
#include "pipeline.h"
#include "tb_compile.h"
#include "tb.h"

static int failures; /* CHECK (tests/check.h, through tb.h) counts here */


static bool meets(const Value *a, const Value *b) {
  int64_t al, ah, bl, bh;
  return tb_span(a, &al, &ah) && tb_span(b, &bl, &bh) && al < bh && bl < ah;
}

static int position(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  return -1;
}

/* Whether v is a SUMSQ's result, reshaped or all-reduced (an all-reduce's output k: its input k) on the way. */
static bool from_sumsq(const Value *v) {
  while (v->def->op == OP_RESHAPE || v->def->op == OP_ALL_REDUCE) v = v->def->in[v->def->op == OP_RESHAPE ? 0 : v->idx];
  return v->def->op == OP_SUMSQ;
}

typedef struct {
  int pieces;    /* pieces of the clip's concats */
  int members;   /* of which a fused sum of squares */
  int replicated; /* pieces that are the [1] reshape of a SUMSQ (no all-reduce between) */
  int bf16;      /* members reading a bf16 gradient */
  int marked;    /* SUMSQs marked, anywhere */
} Count;

static void count_marked(const Graph *g, Count *k) {
  for (int i = 0; i < g->nnodes; i++) {
    if (g->nodes[i]->body) count_marked(g->nodes[i]->body, k);
    k->marked += g->nodes[i]->op == OP_SUMSQ && g->nodes[i]->a.sumsq_fused;
  }
}

static void check_graph(const Graph *g, const char *label, Count *k) {
  for (int c = 0; c < g->nnodes; c++) {
    const Node *cat = g->nodes[c];
    if (cat->body) check_graph(cat->body, label, k);
    if (cat->op != OP_CONCAT) continue;
    bool clip = false; /* a concat of sums of squares, through [1] reshapes and all-reduces */
    for (int i = 0; i < cat->nin; i++) clip |= from_sumsq(cat->in[i]);
    if (!clip) {
      CHECK(!cat->a.sumsq_fused, "%s: a concat of no sums of squares is marked", label);
      continue;
    }
    int mine = 0;
    for (int i = 0; i < cat->nin; i++) {
      k->pieces++;
      const Value *p = cat->in[i];
      bool direct = p->def->op == OP_RESHAPE && p->def->in[0]->def->op == OP_SUMSQ;
      k->replicated += direct;
      const Node *s = fuse_sumsq_piece(cat, i);
      if (!s) {
        CHECK(!direct || !p->def->in[0]->def->a.sumsq_fused, "%s: a marked SUMSQ's piece is not found", label);
        continue;
      }
      mine++;
      k->members++;
      const Node *r = p->def;
      CHECK(direct && r->in[0]->def == s && ir_numel(&p->shape) == 1, "%s: piece %d is no [1] reshape of its SUMSQ", label, i);
      CHECK(s->graph == g && r->graph == g, "%s: piece %d's SUMSQ in another graph", label, i);
      CHECK(ir_node_stages(s) == ir_node_stages(cat) && ir_node_stages(r) == ir_node_stages(cat),
            "%s: piece %d in another pipeline stage than its concat", label, i);
      CHECK(ir_count_uses_deep(g, s->out[0]) == 1 && ir_count_uses_deep(g, p) == 1,
            "%s: piece %d's sum or reshape has other readers", label, i);
      const Value *x = ir_unfold_cast(s->in[0]);
      CHECK((x->dtype == DT_F32 || x->dtype == DT_BF16) && !x->host && x->offset >= 0,
            "%s: piece %d reads a %s gradient%s", label, i, ir_dtype_name(x->dtype), x->host ? " in host memory" : "");
      k->bf16 += x->dtype == DT_BF16;
      int at = position(g, s);
      CHECK(at >= 0 && at < c, "%s: piece %d's SUMSQ is not before the concat", label, i);
      for (int q = at + 1; q < c; q++) {
        const Node *n = g->nodes[q];
        CHECK(!n->body, "%s: a region between piece %d's SUMSQ and the concat", label, i);
        for (int o = 0; o < n->nout; o++)
          CHECK(!meets(x, n->out[o]), "%s: %%%d, written between piece %d's SUMSQ and the concat, meets its gradient %%%d",
                label, n->out[o]->id, i, x->id);
      }
    }
    CHECK(cat->a.sumsq_fused == (mine > 0), "%s: the concat is %smarked with %d members", label,
          cat->a.sumsq_fused ? "" : "not ", mine);
  }
}

/* Compiles file with defs for target; checks the plan and returns what it counted. */
static Count plan(const char *label, const char *file, const FeDefine *defs, int ndefs, int world, Target target) {
  Count k = {0};
  Arena a;
  arena_init(&a);
  Module *m = tb_compile_model(&a, file, defs, ndefs, world, target);
  CHECK(m, "%s: does not compile, or a pass failed", label);
  if (!m) return k;
  check_graph(m->graph, label, &k);
  count_marked(m->graph, &k);
  CHECK(k.marked == k.members, "%s: %d SUMSQs marked, %d found at their concats", label, k.marked, k.members);
  printf("%s: %d of %d pieces in the kernel (%d bf16 gradients), %d replicated\n", label, k.members, k.pieces, k.bf16,
         k.replicated);
  arena_free(&a);
  return k;
}

/* A built graph where the plan puts a value written between a SUMSQ and the concat over that SUMSQ's input (dead
 * after it in the IR): the sum may not move to the concat, so that piece stays as it is; the other joins. */
static void built_graph(void) {
  Arena a;
  arena_init(&a);
  Module *m = tb_module(&a, "fuse_sumsq");
  m->target = TARGET_CUDA;
  Graph *g = m->graph;
  Shape s = tb_shape(1, 1024), one = tb_shape(1, 1);
  Value *in = tb_input(g, "in", DT_F32, s), *in2 = tb_input(g, "in2", DT_F32, s);
  Value *x = tb_op1(g, OP_TANH, in, NULL);
  Value *sx = tb_shaped(g, OP_SUMSQ, 1, &x, DT_F32, ir_scalar_shape(), NULL);
  Value *rx = tb_shaped(g, OP_RESHAPE, 1, &sx, DT_F32, one, NULL);
  Value *w = tb_op1(g, OP_EXP, in2, NULL); /* x is dead: the plan may give w its bytes */
  Value *sw = tb_shaped(g, OP_SUMSQ, 1, &w, DT_F32, ir_scalar_shape(), NULL);
  Value *rw = tb_shaped(g, OP_RESHAPE, 1, &sw, DT_F32, one, NULL);
  Value *pieces[2] = {rx, rw};
  Attrs cat = {.axis = 0};
  Value *all = tb_shaped(g, OP_CONCAT, 2, pieces, DT_F32, tb_shape(1, 2), &cat);
  ir_add_result(g, tb_op1(g, OP_SUM, all, NULL), "loss");
  CHECK(pass_memplan(m), "pass_memplan failed");
  CHECK(meets(w, x), "the plan was meant to put w over x's dead bytes: x at %lld, w at %lld", (long long)x->offset,
        (long long)w->offset);
  CHECK(pass_fuse_sumsq(m), "pass_fuse_sumsq failed");
  CHECK(!sx->def->a.sumsq_fused && fuse_sumsq_piece(all->def, 0) == NULL,
        "built: the SUMSQ whose input a later node overwrites is fused");
  CHECK(sw->def->a.sumsq_fused && fuse_sumsq_piece(all->def, 1) == sw->def && all->def->a.sumsq_fused,
        "built: the SUMSQ with nothing written over its input between is not fused");
  arena_free(&a);
}

int main(void) {
  built_graph();
  const char *tiny = SHARDC_MODELS_DIR "/tiny.model";
  FeDefine one[] = {{"dp", "1"}}, bf16[] = {{"dp", "1"}, {"precision", "bf16"}};
  FeDefine tp[] = {{"dp", "1"}, {"tp", "2"}, {"sp", "on"}, {"precision", "bf16"}};
  FeDefine zero[] = {{"seq", "32"}, {"micro_batch", "4"}, {"dp", "2"}, {"zero", "2"}};
  FeDefine pp[] = {{"layers", "4"}, {"micro_batch", "2"}, {"batch", "8"}, {"dp", "1"}, {"pp", "2"}};
  FeDefine llama[] = {{"tp", "1"}, {"dp", "1"}, {"sp", "off"}, {"layers", "2"}, {"seq", "64"}, {"micro_batch", "1"},
                      {"batch", "1"}, {"precision", "bf16"}};
  Count k = plan("tiny f32", tiny, one, 1, 1, TARGET_CUDA);
  CHECK(k.pieces > 2 && k.members == k.pieces && k.bf16 == 0, "tiny f32: %d of %d pieces, %d bf16", k.members, k.pieces,
        k.bf16);
  k = plan("tiny bf16", tiny, bf16, 2, 1, TARGET_CUDA);
  CHECK(k.pieces > 2 && k.members == k.pieces && k.bf16 > 0, "tiny bf16: %d of %d pieces, %d bf16", k.members, k.pieces,
        k.bf16);
  k = plan("llama3-8b bf16", SHARDC_MODELS_DIR "/llama3-8b.model", llama, 8, 1, TARGET_CUDA);
  CHECK(k.pieces > 2 && k.members == k.pieces && k.bf16 > 0, "llama: %d of %d pieces", k.members, k.pieces);
  k = plan("tiny tp=2 sp bf16", tiny, tp, 4, 2, TARGET_CUDA);
  CHECK(k.members == k.replicated && k.members > 0 && k.members < k.pieces, "tp 2: %d of %d pieces, %d replicated",
        k.members, k.pieces, k.replicated);
  k = plan("tiny zero 2 dp 2", tiny, zero, 4, 2, TARGET_CUDA);
  CHECK(k.pieces > 2 && k.members == 0 && k.replicated == 0, "zero 2: %d of %d pieces", k.members, k.pieces);
  k = plan("tiny pp 2", tiny, pp, 5, 2, TARGET_CUDA);
  CHECK(k.members == k.replicated && k.members > 0 && k.members < k.pieces, "pp 2: %d of %d pieces, %d replicated",
        k.members, k.pieces, k.replicated);
  k = plan("tiny bf16, CPU target", tiny, bf16, 2, 1, TARGET_CPU);
  CHECK(k.pieces > 2 && k.marked == 0, "the CPU target: %d SUMSQs marked", k.marked);
  if (failures) fprintf(stderr, "test_fuse_sumsq: %d failures\n", failures);
  else printf("test_fuse_sumsq: ok\n");
  return failures ? 1 : 0;
}
