/* passes/stage.c — pipeline stages: the layers split over the `pp` mesh axis.
 *
 * Runs after accum (the micro-step is one `repeat accum` region; with pp > 1 it makes one even
 * for a single micro-batch) and before pipe (passes/pipe.c), which runs the micro-step's parts
 * on their stages by the schedule. Here:
 *   - the layers: the micro-step's forward `repeat` and its backward (`.grad`, reverse) over L
 *     layers become L / pp iterations on each stage (uneven stages, `pp N layers(a, b, ..)`: the
 *     largest count, the stacks split `S(pp)@0/stages` padded to it, the counts in the mesh's
 *     stage_rows; pipe.c runs each stage's loops for its own count): the stacked layer parameters, their
 *     gradients, optimizer states and updates, and the stacked activations between the two
 *     loops are split over pp on their leading dim (`S(pp)@0`), so stage s holds layers
 *     [s L/pp, (s+1) L/pp) — the same SPMD program on every stage, each on its own layers
 *     (interleaved, v chunks: `S(pp)@0/vB`, the v blocks of L/(pp v) layers ir_block_index gives
 *     stage s: chunks c pp + s, c < v; uneven virtual stages: `S(pp)@0/stages`, each stage's v chunks
 *     c padded to the largest count of the stages' chunks c, the mesh's stage_rows per virtual stage and
 *     stage_chunks v);
 *   - the clip's sums of squares over a split gradient are partial over pp: one all-reduce
 *     completes them (as for ZeRO-2 over dp);
 *   - the embedding (what the forward loop's carried input is made of) is the first stage's,
 *     the head and the loss the last's (pipe.c predicates them); parameters outside the layers
 *     are held on the stages reading them (passes/pipe_class.c's pipe_owned_params, passes/pipe_owners.c), their
 *     gradients whole there (a tied embedding's: exchanged between the first and the last).
 *   - the split: even, as written (`pp N layers(a, b, ..)`), or `pp N layers(balanced)`: the one
 *     passes/pipe_balance.c balances by the cost model's time and memory per layer, computed here for
 *     every plan but the interleaved (Module.pipe_balance: the plan prints it, as a suggestion unless
 *     applied; with interleaving over the pp v virtual stages).
 * Errors: pp (interleaved: pp v) not dividing the layers (without `layers(..)`), counts of another
 * number than pp (or pp v), not adding up, a stage of fewer layers than its chunks, 1F1B
 * with fewer micro-batches than stages, a micro-step without exactly one layer loop pair. Context
 * parallelism needs nothing here: its ring's sends and receives (or all-to-alls) are over cp, whose
 * groups lie inside one stage. ZeRO-3
 * (passes/zero.c, after pipe) stores each stage's layers split over dp and gathers them in every
 * instruction's loops, as it does for one micro-step.
 */
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "passes.h"
#include "pipe_sched.h"
#include "plan_options.h"
#include "ptrmap.h"

static SrcLoc at_opt(const Module *m, PlanOpt o) {
  return m->plan.opt_loc[o].file ? m->plan.opt_loc[o] : m->plan.loc;
}

Node *stage_accum_region(Graph *g) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_REPEAT && g->nodes[i]->a.name && strcmp(g->nodes[i]->a.name, "accum") == 0) return g->nodes[i];
  return NULL;
}

/* The micro-step's forward and backward layer loops: its only REPEATs. */
bool stage_layer_loops(Graph *body, Node **fwd, Node **bwd) {
  *fwd = *bwd = NULL;
  int n = 0;
  for (int i = 0; i < body->nnodes; i++) {
    Node *x = body->nodes[i];
    if (x->op != OP_REPEAT) continue;
    n++;
    if (x->a.reverse) *bwd = x;
    else *fwd = x;
  }
  return n == 2 && *fwd && *bwd && (*fwd)->a.count == (*bwd)->a.count;
}

typedef struct {
  PtrMap split; /* values split over pp on dim 0 */
  int64_t L, per; /* per: layers per stage (uneven stages: the largest count, each stage's block padded to it) */
  int blocks;   /* interleaved: v blocks (stage s holds layers of chunks c pp + s); uneven: RT_BLOCKS_STAGES; else 0 */
  bool changed;
} St;

static bool is_split(St *s, const Value *v) {
  intptr_t x;
  return ptrmap_get(&s->split, v, &x);
}

static void split(St *s, Value *v) {
  if (is_split(s, v)) return;
  if (v->shape.rank < 1 || v->shape.dim[0] != s->L) die("stage: value %%%d has no leading dim of %lld", v->id, (long long)s->L);
  v->shape.dim[0] = s->per;
  v->shape.sym[0] = -1;
  v->sharding.split[0] = RT_AX_PP;
  v->sharding.blocks[0] = s->blocks;
  ptrmap_put(&s->split, v, 1);
  s->changed = true;
}

static bool stacked(St *s, const Value *v) { return v->shape.rank >= 1 && v->shape.dim[0] == s->L; }

/* One node outside the layer loops: what reads a split value makes split values (elementwise
 * ops, updates, collectives per tensor); a sum of squares of one becomes partial over pp. */
static void propagate(St *s, Node *n, Value ***partial, int *np, int *capp, Arena *a) {
  if (n->op == OP_REPEAT || n->op == OP_PARAM || n->op == OP_INPUT) return;
  if (n->op == OP_SUMSQ || n->op == OP_SUM) {
    if (is_split(s, n->in[0]) && !(n->out[0]->sharding.partial & (1u << RT_AX_PP))) {
      n->out[0]->sharding.partial |= (uint8_t)(1u << RT_AX_PP);
      arena_grow(a, (void **)partial, capp, *np + 1, sizeof(Value *));
      (*partial)[(*np)++] = n->out[0];
    }
    return;
  }
  if (n->op == OP_ALL_REDUCE) {
    for (int k = 0; k < n->nin; k++)
      if (is_split(s, n->in[k])) split(s, n->out[k]);
    return;
  }
  bool any = false;
  for (int j = 0; j < n->nin; j++) any |= is_split(s, n->in[j]);
  for (int k = 0; k < n->nout; k++) any |= is_split(s, n->out[k]);
  if (!any) return;
  int rank = -1;
  for (int j = 0; j < n->nin; j++)
    if (is_split(s, n->in[j])) rank = n->in[j]->shape.rank;
  for (int j = 0; j < n->nin; j++)
    if (!is_split(s, n->in[j]) && stacked(s, n->in[j]) && n->in[j]->shape.rank == rank) {
      OpKind d = n->in[j]->def->op; /* a source is split here; a computed value by its own node (next sweep) */
      if (d == OP_CONST || d == OP_STATE || d == OP_PARAM || d == OP_ARG) split(s, n->in[j]);
    }
  for (int k = 0; k < n->nout; k++)
    if (!is_split(s, n->out[k]) && stacked(s, n->out[k]) && n->out[k]->shape.rank == rank) split(s, n->out[k]);
}

/* The plan's `pp N layers(a, b, ..)`: one count per stage, covering the layer loop's L layers, into
 * vc[pp v], the layers of each virtual stage k = c pp + s (chunk c of stage s; without interleaving,
 * v = 1, stage s). With `schedule interleaved(v: V)` the counts are pp (each stage's, split over its
 * v chunks as evenly as possible, the earlier chunks taking one more where v does not divide it:
 * stage_chunk_rule) or pp v (each virtual stage's, in that order). An even split is what the pass
 * does anyway; an uneven one is applied (RT_BLOCKS_STAGES: each chunk of the layer stacks padded to
 * the largest count of the stages' chunks c). */
static void stage_chunk_rule(int n, int v, int *out) {
  for (int c = 0; c < v; c++) out[c] = n / v + (c < n % v ? 1 : 0);
}

static bool stage_override(const Module *m, const Node *F, int64_t L, int pp, int v, int *vc) {
  const Plan *p = &m->plan;
  const char *name = F->a.name ? F->a.name : "?";
  int64_t sum = 0;
  for (int s = 0; s < p->nstage_layers; s++) sum += p->stage_layers[s];
  if (p->nstage_layers != pp && (v == 1 || p->nstage_layers != pp * v)) {
    if (v > 1) {
      error_at(p->stage_layers_loc, "`layers(..)` gives %d counts, the plan has pp %d stages of %d chunks: write pp "
               "= %d counts or pp x v = %d", p->nstage_layers, pp, v, pp, pp * v);
      note("%d counts: each stage's layers, split over its %d chunks; %d: each virtual stage's, chunk c of stage s "
           "at c x %d + s", pp, v, pp * v, pp);
      note_at(at_opt(m, PLAN_OPT_SCHEDULE), "the interleaved schedule's %d chunks per stage", v);
    } else {
      error_at(p->stage_layers_loc, "`layers(..)` gives %d stages, the plan has pp %d", p->nstage_layers, pp);
      note("write one layer count per stage");
    }
    return false;
  }
  if (sum != L) {
    error_at(p->stage_layers_loc, "`layers(..)` %s: its stages hold %lld layers, `repeat %s` has %lld (%s:%d)",
             sum < L ? "does not cover all the layers" : "holds more layers than there are", (long long)sum, name,
             (long long)L, F->loc.file ? F->loc.file : "?", F->loc.line);
    note("the counts must add up to %lld", (long long)L);
    return false;
  }
  if (p->nstage_layers == pp * v) { /* each virtual stage's (v = 1: each stage's) */
    for (int k = 0; k < pp * v; k++) vc[k] = p->stage_layers[k];
    return true;
  }
  for (int st = 0; st < pp; st++) { /* each stage's, over its chunks */
    int n = p->stage_layers[st], part[PLAN_MAX_STAGE_LAYERS];
    if (n < v) {
      error_at(p->stage_layer_loc[st].file ? p->stage_layer_loc[st] : p->stage_layers_loc,
               "`layers(..)`: stage %d holds %d layers, fewer than its %d chunks of the interleaved schedule (a chunk "
               "needs at least 1)", st, n, v);
      note("give every stage at least %d layers, or write each virtual stage's count (pp x v = %d of them)", v, pp * v);
      note_at(at_opt(m, PLAN_OPT_SCHEDULE), "the interleaved schedule's %d chunks per stage", v);
      return false;
    }
    stage_chunk_rule(n, v, part);
    for (int c = 0; c < v; c++) vc[c * pp + st] = part[c];
  }
  return true;
}

bool pass_stage(Module *m) {
  int pp = m->mesh ? m->mesh->dim[RT_AX_PP] : 1;
  if (m->mesh) { /* even unless `layers(..)` says not */
    memset(m->mesh->stage_rows, 0, sizeof m->mesh->stage_rows);
    m->mesh->stage_chunks = 0;
  }
  if (pp <= 1 && (m->plan.nstage_layers || m->plan.stage_balanced)) {
    error_at(m->plan.stage_layers_loc, "`layers(..)` splits the layers over pipeline stages: pp 1 has one stage");
    note("write pp 2 or more, or leave `layers(..)` out");
    return false;
  }
  if (pp <= 1) {
    if (m->plan.schedule != SCHED_1F1B) { /* said, as zero's at dp 1 (was: kept without a word) */
      char have[64];
      ir_plan_opt_format(&m->plan, PLAN_OPT_SCHEDULE, have, sizeof have);
      note_at(m->plan.opt_loc[PLAN_OPT_SCHEDULE], "%s: the plan has one pipeline stage (pp 1): no pipeline to schedule", have);
    }
    return true;
  }
  /* (cp: the shard pass made each layer's ring, or all-to-alls, over cp; a stage's cp ranks share
   * its pp coordinate, so every instruction's ring runs among its own stage's ranks) */
  if (m->plan.schedule == SCHED_1F1B && m->batch.accum < pp) { /* its warm-up needs pp micro-batches in flight */
    error_at(at_opt(m, PLAN_OPT_MICROBATCHES),
             "the 1f1b schedule needs at least pp = %d micro-batches per step, this plan has %lld", pp,
             (long long)m->batch.accum);
    note("write microbatches %d (or a batch of micro_batch x dp x %d), or schedule gpipe", pp, pp);
    return false;
  }
  Graph *g = m->graph;
  Node *A = stage_accum_region(g), *F = NULL, *B = NULL;
  if (!A || !stage_layer_loops(A->body, &F, &B)) {
    error_at(at_opt(m, PLAN_OPT_PP), "pp %d: the model's layers must be one `repeat` (found no single layer loop to "
             "split into stages)", pp);
    return false;
  }
  int64_t L = F->a.count;
  int v = m->plan.schedule == SCHED_INTERLEAVED ? m->plan.interleave : 1, nv = pp * v;
  if (m->plan.schedule == SCHED_INTERLEAVED && m->batch.accum % pp != 0) { /* (interleave 1 too: pipe_sched_make) */
    error_at(at_opt(m, PLAN_OPT_MICROBATCHES),
             "the interleaved schedule runs micro-batches in groups of pp = %d: this plan has %lld micro-batches", pp,
             (long long)m->batch.accum);
    note("write a multiple of %d micro-batches, or schedule 1f1b", pp);
    return false;
  }
  if ((m->plan.nstage_layers || m->plan.stage_balanced) && nv > RT_MAX_STAGES) {
    error_at(m->plan.stage_layers_loc, "`layers(..)`: uneven stages are at most %d %sstages, this plan has %d",
             RT_MAX_STAGES, v > 1 ? "virtual " : "", nv);
    return false;
  }
  int counts[RT_MAX_STAGES] = {0}, ncounts = 0; /* the layers of each virtual stage (v = 1: stage) */
  if (m->plan.nstage_layers) {
    if (!stage_override(m, F, L, pp, v, counts)) return false;
    ncounts = nv;
  }
  /* the layers' time and memory per (virtual) stage, and the split balanced by them (applied by
   * `layers(balanced)`, else printed as a suggestion) */
  if (!(m->pipe_balance = pipe_balance_make(m, A, F, B, pp, v))) return false;
  if (m->plan.stage_balanced) {
    if (!m->pipe_balance->split) {
      error_at(m->plan.stage_layers_loc, "`layers(balanced)`: pp %d%s has more %sstages than the %lld layers of `repeat %s`",
               pp, v > 1 ? " x v" : "", v > 1 ? "virtual " : "", (long long)L, F->a.name ? F->a.name : "?");
      note("every %sstage needs at least one layer: pick pp%s of at most %lld", v > 1 ? "virtual " : "", v > 1 ? " x v" : "",
           (long long)L);
      return false;
    }
    ncounts = nv;
    for (int k = 0; k < nv; k++) counts[k] = (int)m->pipe_balance->split[k];
  }
  bool uneven = false;
  int64_t most = 0;
  for (int k = 0; k < ncounts; k++) {
    uneven |= counts[k] != counts[0];
    if (counts[k] > most) most = counts[k];
  }
  if (!uneven && v > 1 && L % ((int64_t)nv) != 0) {
    error_at(at_opt(m, PLAN_OPT_SCHEDULE),
             "the interleaved schedule cuts the %lld layers of `repeat %s` in pp x v = %d chunks: it does not divide them",
             (long long)L, F->a.name ? F->a.name : "?", nv);
    note("pick pp x v dividing %lld, write the layers of each stage or chunk, `pp %d layers(..)`, or `pp %d "
         "layers(balanced)`", (long long)L, pp, pp);
    return false;
  }
  if (!uneven && L % pp != 0) {
    error_at(at_opt(m, PLAN_OPT_PP), "pp %d does not divide the %lld layers of `repeat %s` (%s:%d)", pp, (long long)L,
             F->a.name ? F->a.name : "?", F->loc.file ? F->loc.file : "?", F->loc.line);
    note("pick pp dividing %lld, or write each stage's layer count, `pp %d layers(..)`, or `pp %d layers(balanced)`",
         (long long)L, pp, pp);
    return false;
  }
  /* the stacks' local rows: L / pp; uneven, every stage's v chunks, chunk c padded to the largest count of
   * the chunks c (runtime/mesh.h) */
  St s = {.L = L, .per = !uneven ? L / pp : v > 1 ? rt_stage_local_rows(counts, pp, v) : most,
          .blocks = uneven ? RT_BLOCKS_STAGES : v > 1 ? v : 0};
  if (uneven) { /* the layout of the stacks' dim 0 (runtime/mesh.h): the interpreter, codegen and the runtime read it */
    for (int k = 0; k < nv; k++) m->mesh->stage_rows[k] = counts[k];
    m->mesh->stage_chunks = v > 1 ? v : 0;
  }
  F->a.count = B->a.count = s.per;
  Node *loops[2] = {F, B};
  for (int l = 0; l < 2; l++) {
    Node *r = loops[l];
    for (int i = r->a.ncarry; i < r->a.ncarry + r->a.nxs; i++) split(&s, r->in[i]);
    for (int k = r->a.ncarry; k < r->nout; k++) split(&s, r->out[k]);
  }
  Value **partial = ARENA_ARRAY(m->arena, Value *, 1);
  int np = 0, capp = 1;
  Graph *gs[2] = {A->body, g};
  do {
    s.changed = false;
    for (int q = 0; q < 2; q++)
      for (int i = 0; i < gs[q]->nnodes; i++) propagate(&s, gs[q]->nodes[i], &partial, &np, &capp, m->arena);
    for (int c = 0; c < A->a.ncarry; c++) { /* the micro-step's sums: initial value, argument, result, output */
      Value *vs[4] = {A->in[c], A->body->args[c]->out[0], A->body->results[c], A->out[c]};
      bool any = false;
      for (int k = 0; k < 4; k++) any |= is_split(&s, vs[k]);
      if (any)
        for (int k = 0; k < 4; k++) split(&s, vs[k]);
    }
  } while (s.changed);
  ptrmap_free(&s.split);
  if (np) { /* the clip: each stage's sums of squares of its layers' gradients, summed over pp */
    Node *ar = ir_node_new(g, OP_ALL_REDUCE, np, partial, np, partial[0]->def->loc);
    ar->a.mesh_axis = RT_AX_PP;
    ar->a.reduce = RED_SUM;
    for (int k = 0; k < np; k++) {
      ar->out[k]->dtype = partial[k]->dtype;
      ar->out[k]->shape = partial[k]->shape;
      ar->out[k]->sharding = partial[k]->sharding;
      ar->out[k]->sharding.partial &= (uint8_t)~(1u << RT_AX_PP);
      for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->nin; j++)
          if (g->nodes[i]->in[j] == partial[k] && g->nodes[i] != ar) g->nodes[i]->in[j] = ar->out[k];
      for (int i = 0; i < g->nresults; i++)
        if (g->results[i] == partial[k]) g->results[i] = ar->out[k];
    }
    ir_topo_sort(g);
  }
  return true;
}
