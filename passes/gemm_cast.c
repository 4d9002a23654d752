/* passes/gemm_cast.c — the `gemmcast` pass: on the CPU target under `precision bf16`, the bf16
 * copy of each weight a GEMM reads is made once per step and every GEMM reads it.
 *
 * The CPU target's `precision bf16` keeps the graph f32 (passes/precision.c) and runs every matmul
 * on bf16-rounded operands (rt_matmul_bf16, runtime/ops/gemm_dnnl.c). Rounding inside each call
 * rounds a weight twice per step (its forward GEMM and its dx GEMM: a read of 4 B and a write of
 * 2 B per parameter each time; the tied embedding's head three times). Here, after autodiff and the
 * optimizer, every matmul operand that is a parameter — read directly, or as the row of a stacked
 * parameter inside a layer loop whose row is read by matmuls only — reads one CAST to bf16 of the
 * parameter instead, placed before its first reader (one per parameter, shared by the forward and
 * the backward loop, as on the CUDA target: passes/precision.c). The cast is a value of the graph:
 * the memory plan places it (2 B per parameter, alive from the step's first GEMM to its last), the
 * interpreter rounds it, codegen emits one rt_cvt_f32_bf16 for it and the GEMM's bf16 operand
 * skips the rounding (rt_matmul_bf16_in). The same bits as rounding per call: the same rounding
 * (rt_cvt_f32_bf16) of the same values, read by the same GEMMs (tests/passes/test_gemm_cast.c,
 * tests/runtime/test_gemm_bf16.c). The parameters themselves stay f32 for everything else (the
 * embedding's gather, the update). passes/wcast.c, which moves such casts into the loop bodies for
 * memory on the CUDA target, leaves the CPU target's alone: one cast per step is the point here.
 */
#include "passes.h"

#include "diag.h"
#include "infer.h"

typedef struct {
  Value *from, *to;
} Cast;

typedef struct {
  Graph *g;
  Cast *cast;
  int n, cap;
} Memo;

/* The bf16 copy of parameter p, cast before node position *pos of the top graph (made once; *pos
 * moves to the reader's new position). */
static Value *cast_of(Memo *c, Value *p, int *pos) {
  for (int i = 0; i < c->n; i++)
    if (c->cast[i].from == p) return c->cast[i].to;
  Graph *g = c->g;
  Value *y = ir_emit(g, OP_CAST, 1, &p, DT_BF16, p->shape, NULL, p->def->loc);
  y->sharding = p->sharding;
  if (p->name) y->name = arena_printf(g->arena, "%s.bf16", p->name);
  ir_move_last(g, *pos);
  (*pos)++; /* the reader moved down by one */
  arena_grow(g->arena, (void **)&c->cast, &c->cap, c->n + 1, sizeof(Cast));
  c->cast[c->n++] = (Cast){p, y};
  return y;
}

static bool is_weight(const Value *v) {
  return v->def && v->def->op == OP_PARAM && v->dtype == DT_F32 && v->shape.rank >= 2;
}

/* Whether the body value o is (the row of) a weight repeat rep reads, or already bf16. */
static bool weight_arg(const Node *rep, const Value *o) {
  if (o->dtype != DT_F32) return true;
  const Graph *b = rep->body;
  if (o->def->op != OP_ARG) return false;
  for (int k = rep->a.ncarry; k < b->nargs; k++)
    if (b->args[k] == o->def) return is_weight(rep->in[k]);
  return false;
}

/* Whether every use of a in repeat rep's body is a matmul operand whose other operand is an f32
 * activation or gradient (no weight: the product stays f32), and a is no result of the body. */
static bool read_by_gemms_only(const Node *rep, const Value *a) {
  const Graph *b = rep->body;
  for (int r = 0; r < b->nresults; r++)
    if (b->results[r] == a) return false;
  int uses = 0;
  for (int i = 0; i < b->nnodes; i++) {
    const Node *n = b->nodes[i];
    for (int j = 0; j < n->nin; j++) {
      if (n->in[j] != a) continue;
      if (n->op != OP_MATMUL || weight_arg(rep, n->in[1 - j])) return false;
      uses++;
    }
  }
  return uses > 0;
}

/* Re-types the matmuls of body b that read a (now bf16): their results stay f32 (the other
 * operand is f32: read_by_gemms_only). */
static void retype_readers(Graph *b, const Value *a) {
  for (int i = 0; i < b->nnodes; i++) {
    Node *n = b->nodes[i];
    if (n->op != OP_MATMUL || (n->in[0] != a && n->in[1] != a)) continue;
    if (!ir_infer(n) || n->out[0]->dtype != DT_F32) die("gemmcast: a matmul no longer gives f32 after its bf16 weight");
  }
}

bool pass_gemm_cast(Module *m) {
  if (m->target != TARGET_CPU || !m->has_recipe || m->recipe.precision != PREC_BF16) return true;
  Graph *g = m->graph;
  Memo c = {.g = g};
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->op == OP_MATMUL) {
      for (int j = 0; j < 2; j++) {
        if (is_weight(n->in[j]) && n->in[1 - j]->dtype == DT_F32) {
          n->in[j] = cast_of(&c, n->in[j], &i);
          if (!ir_infer(n) || n->out[0]->dtype != DT_F32) die("gemmcast: a matmul no longer gives f32 after its bf16 weight");
        }
      }
      continue;
    }
    if (n->op != OP_REPEAT) continue;
    Graph *b = n->body;
    for (int j = n->a.ncarry; j < n->nin; j++) { /* stacked inputs (read row by row) and captures */
      Node *an = b->args[j];
      Value *a = an->out[0];
      if (an->a.next || !is_weight(n->in[j]) || !read_by_gemms_only(n, a)) continue;
      n->in[j] = cast_of(&c, n->in[j], &i);
      a->dtype = DT_BF16;
      retype_readers(b, a);
    }
  }
  return true;
}
