/* passes/precision.c — pass_precision: bf16 mixed precision (recipe `precision bf16`).
 *
 * Runs on the forward graph, before autodiff, so that the backward is derived from the
 * mixed-precision forward (a cast's gradient is a cast back). On the CUDA target:
 *   - every non-scalar f32 value a compute node reads becomes bf16 through one CAST placed
 *     right before its first reader in that graph: the f32 parameters stay the master
 *     weights (the optimizer updates them and their Adam moments in f32), compute reads a
 *     bf16 copy, and each parameter's gradient is cast back to f32 where it leaves the
 *     cast;
 *   - float constants become bf16; every other node's dtype follows from its inputs
 *     (ir_infer), so activations are bf16 end to end;
 *   - what stays f32: scalars (the loss and whatever combines it), the outputs the op
 *     table fixes to f32 (cross-entropy's loss, attention's log-sum-exp), and, after
 *     autodiff and the optimizer, gradients, their norm and the update.
 * Kernels do their math in fp32 and round only what they store (runtime/cuda/kernels).
 *
 * On the CPU target (f32 kernels) the graph stays f32: `precision bf16` there means bf16 GEMMs
 * (codegen/target_cpu.c: inputs rounded to bf16, f32 accumulation, runtime/ops/gemm_dnnl.c) with
 * f32 activations, with a warning saying so.
 */
#include "passes.h"

#include <string.h>

#include "diag.h"
#include "infer.h"

typedef struct {
  Value *from, *to;
} CastMemo;

typedef struct {
  Graph *g;
  CastMemo *memo;
  int nmemo, capmemo;
} Casts;

static Value *to_bf16(Casts *c, Value *v, int pos) {
  for (int i = 0; i < c->nmemo; i++)
    if (c->memo[i].from == v) return c->memo[i].to;
  Graph *g = c->g;
  Value *y = ir_emit(g, OP_CAST, 1, &v, DT_BF16, v->shape, NULL, v->def->loc);
  y->sharding = v->sharding;
  if (v->name) y->name = arena_printf(g->arena, "%s.bf16", v->name);
  ir_move_last(g, pos);
  arena_grow(g->arena, (void **)&c->memo, &c->capmemo, c->nmemo + 1, sizeof(CastMemo));
  c->memo[c->nmemo++] = (CastMemo){v, y};
  return y;
}

static bool needs_cast(const Value *v) { return v->dtype == DT_F32 && v->shape.rank > 0; }

static void lower_graph(Graph *g) {
  Casts c = {.g = g};
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    unsigned fl = ir_ops[n->op].flags;
    if (n->op == OP_CONST) {
      if (n->out[0]->dtype == DT_F32) n->out[0]->dtype = DT_BF16;
      continue;
    }
    if (fl & F_SOURCE) continue; /* params and inputs keep their dtype: the master copy */
    if (n->op == OP_CAST) continue; /* the user's own casts mean what they say */
    for (int k = 0; k < n->nin; k++) {
      if (!needs_cast(n->in[k])) continue;
      n->in[k] = to_bf16(&c, n->in[k], i);
      i++; /* the cast went before n */
    }
    if (n->op == OP_REPEAT) {
      Graph *b = n->body;
      for (int k = 0; k < b->nargs; k++) { /* carries, slices and captures take the new dtypes */
        Value *a = b->args[k]->out[0];
        a->dtype = n->in[k]->dtype;
      }
      lower_graph(b);
    }
    if (!ir_infer(n)) die("precision: %s no longer types after bf16 inputs", ir_ops[n->op].name);
  }
}

bool pass_precision(Module *m) {
  if (!m || !m->graph) die("pass_precision: no graph");
  if (!m->has_recipe || m->recipe.precision != PREC_BF16) return true;
  if (m->target != TARGET_CUDA) {
    warning_at(m->recipe.precision_loc.file ? m->recipe.precision_loc : m->recipe.loc, "precision bf16 on the CPU target: bf16 GEMMs, f32 activations and other ops (bf16 activations are the CUDA target's: --target cuda)");
    return true;
  }
  lower_graph(m->graph);
  return true;
}
