/* passes/wshadow.c — the `wshadow` pass: where compute's bf16 copy of the weights comes from.
 *
 * Under `precision bf16` on the CUDA target (passes/precision.c) the f32 parameters are the master
 * weights and compute reads a bf16 CAST of each. Left alone, passes/wcast.c makes that cast one
 * layer at a time inside every layer loop that reads it: each micro-step reads 4 B and writes 2 B per
 * parameter twice (the forward and the backward loop), for the memory of one layer's copy. Here, the
 * decision (made once, for the whole plan, and printed by `shardc plan`):
 *   - persistent: every parameter's cast becomes a STATE "bf16:<param>" of the cast's type and
 *     sharding (ir_copy_source names its parameter), read by every use the cast had, and the step
 *     writes it as the cast of the updated parameter, right after its update (result
 *     "next:bf16:<param>": codegen/cuda_kernels.c computes it in the update's own kernel). The same
 *     bits: the same rounding of the same f32 values, made once per optimizer step instead of per loop
 *     and micro-step. It is derived, not checkpointed: the interpreter and the trainer (its tensor
 *     kind RT_T_COPY) make it by one cast of the parameter at start, on resume and after loading
 *     weights. It costs 2 B per parameter per rank of persistent memory;
 *   - per layer: today's casts, left for passes/wcast.c.
 * `weight_copy auto` (the default) takes persistent unless the driver's choice against the device's memory,
 * made together with `defer_waits auto` (replan.c, auto_memory: the plan with both where it fits, else the
 * faster of each alone that fits, else neither), dropped it (Plan.fit.wcopy.total over .cap: the
 * plan with it did not fit; Plan.fit.wcopy.lost: it fit alone, the deferred waits alone were faster);
 * `weight_copy persistent | per_layer`
 * chooses by hand, and is refused where it cannot be applied.
 *
 * Runs after shard (the cast's per-rank type and sharding are the copy's) and before accum (the
 * micro-step's region captures the copy like a parameter; the update and the new cast stay outside
 * it: once per optimizer step). With ZeRO 1 / 2 the update is on a shard: passes/zero_master.c then
 * stores the f32 parameter split (the master shard), the cast reads the updated shard and an
 * all-gather of the bf16 shards writes the copy (half the bytes of gathering the f32 parameter, which
 * zero.c does where that does not apply, the cast then reading the gathered parameter). Not under ZeRO-3 (its layer loops
 * gather the bf16 copy's rows of a split cast already) nor pipeline stages (their casts stay per step).
 * With `offload` the copy is what lets the f32 parameter leave the device: passes/zero_offload.c makes it the
 * host's master and the host casts and uploads the copy (under ZeRO-3 it turns the split cast into
 * such a copy itself).
 */
#include <string.h>

#include "diag.h"
#include "fit.h"
#include "passes.h"
#include "zero.h"

static bool bf16_weights(const Module *m) {
  return m->target == TARGET_CUDA && m->has_recipe && m->recipe.precision == PREC_BF16;
}

/* The parameter's update (adamw_update / sgd_update reading p as its parameter), or NULL. */
static Node *update_of(const Graph *g, const Value *p) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if ((n->op == OP_ADAMW_UPDATE || n->op == OP_SGD_UPDATE) && n->in[0] == p) return n;
  }
  return NULL;
}

/* Whether node c is the bf16 cast of an updated f32 parameter of the top graph. */
static bool weight_cast(const Graph *g, const Node *c) {
  return c->op == OP_CAST && c->in[0]->def->op == OP_PARAM && c->in[0]->dtype == DT_F32 &&
         c->out[0]->dtype == DT_BF16 && update_of(g, c->in[0]);
}

static int position(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  die("wshadow: node not in its graph");
}

/* Cast node c of parameter p becomes the STATE "bf16:<p>"; the update's result is cast into it. */
static void make_persistent(Graph *g, Node *c) {
  Value *p = c->in[0], *x = c->out[0];
  const char *name = p->def->a.name;
  Attrs sa = {.name = arena_printf(g->arena, "bf16:%s", name)};
  for (int i = 0; i < g->nnodes; i++) /* a second cast of the same parameter (written by hand): the same copy */
    if (g->nodes[i]->op == OP_STATE && strcmp(g->nodes[i]->a.name, sa.name) == 0) {
      ir_replace_uses(g, x, g->nodes[i]->out[0]);
      ir_drop_node(g, c);
      return;
    }
  Value *s = ir_emit(g, OP_STATE, 0, NULL, DT_BF16, x->shape, &sa, p->def->loc);
  s->sharding = x->sharding;
  s->name = x->name;
  s->def->stage = p->def->stage;
  s->def->stageset = p->def->stageset;
  ir_move_last(g, position(g, c));
  ir_replace_uses(g, x, s);
  ir_drop_node(g, c);
  Node *u = update_of(g, p);
  Value *np = u->out[0];
  Value *y = ir_emit(g, OP_CAST, 1, &np, DT_BF16, x->shape, &c->a, u->loc);
  y->sharding = x->sharding;
  ir_move_last(g, position(g, u) + 1);
  ir_add_result(g, y, arena_printf(g->arena, "next:bf16:%s", name));
}

/* Where a hand-written choice cannot be applied: the error at the option. */
static bool refuse(const Module *m, const char *why) {
  SrcLoc at = m->plan.opt_loc[PLAN_OPT_WEIGHT_COPY];
  const char *v = m->plan.weight_copy == WCOPY_PERSISTENT ? "persistent" : "per_layer";
  error_at(at, "`weight_copy %s`: %s", v, why); /* (in the file, or a -D's value: DIAG_CMDLINE) */
  note("leave `weight_copy` out (auto) to let shardc choose");
  return false;
}

bool wshadow_may_persist(const Module *m) {
  const MeshMap *mm = m->mesh;
  return bf16_weights(m) && !(mm && mm->dim[RT_AX_PP] > 1) && !zero_splits_params(m);
}

static double mib(double b) { return b / (1 << 20); }

/* `weight_copy auto`'s why, from the driver's figures (Plan.fit.wcopy) and the copy's bytes (m->wcopy.bytes): the
 * pass's, and the driver's again where it reuses a compile with new figures (replan.c). */
const char *wshadow_auto_why(Module *m) {
  return fit_auto_why(m, m->plan.fit.wcopy,
                      arena_printf(m->arena, "the persistent copy (%.1f MiB)", mib((double)m->wcopy.bytes)), "it fits", "it");
}

bool pass_wshadow(Module *m) {
  memset(&m->wcopy, 0, sizeof m->wcopy);
  WeightCopy want = m->plan.weight_copy;
  if (!bf16_weights(m)) {
    if (want != WCOPY_AUTO)
      return refuse(m, "the weights' bf16 copy is made under `precision bf16` on the CUDA target (--target cuda); "
                       "this plan has none");
    return true;
  }
  Graph *g = m->graph;
  int64_t bytes = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (weight_cast(g, g->nodes[i])) bytes += ir_numel(&g->nodes[i]->out[0]->shape) * ir_dtype_size(DT_BF16);
  m->wcopy.bytes = bytes;
  const Plan *p = &m->plan;
  if (!wshadow_may_persist(m) && m->mesh->dim[RT_AX_PP] > 1) {
    if (want != WCOPY_AUTO) return refuse(m, "not with pipeline stages yet (each stage casts its weights once a step)");
    m->wcopy.why = "pipeline stages: each stage casts its weights at the top of the step";
    return true;
  }
  if (!wshadow_may_persist(m)) { /* ZeRO-3 over its group (dp, dp x cp, cp alone at dp 1) */
    if (want == WCOPY_PERSISTENT)
      return refuse(m, "zero 3 splits the parameters over dp (cp at dp 1) and gathers each layer's bf16 rows where it is read");
    m->wcopy.why = "zero 3: each layer's bf16 rows gathered (from a split copy) where they are read";
    return true;
  }
  bool unfit = fit_figure_over((double)p->fit.wcopy.total, p->fit.wcopy.cap);
  if (want == WCOPY_PER_LAYER) m->wcopy.why = "weight_copy per_layer (the plan)";
  else if (want == WCOPY_PERSISTENT) m->wcopy.why = "weight_copy persistent (the plan)";
  else m->wcopy.why = wshadow_auto_why(m), m->wcopy.why_fit = true;
  if (want == WCOPY_PER_LAYER || (want == WCOPY_AUTO && (unfit || p->fit.wcopy.lost)))
    return true; /* passes/wcast.c's casts */
  m->wcopy.persistent = true;
  for (int i = 0; i < g->nnodes; i++)
    if (weight_cast(g, g->nodes[i])) make_persistent(g, g->nodes[i--]);
  return true;
}
