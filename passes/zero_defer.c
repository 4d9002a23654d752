/* passes/zero_defer.c — the `zdefer` pass: a backward layer loop's gradient reduce-scatters no longer
 * waited inside the iteration that issues them.
 *
 * Under ZeRO-2/3 each backward layer-loop iteration reduce-scatters its layer's gradients
 * asynchronously (passes/zero.c, zero_sums.c; packed into runs by zero_group_scatters, coalesced by
 * passes/zero_coalesce.c). What reads a scatter's result in the body — the slices (and reshapes) that
 * unpack a packed run into the layer's gradient shards, and under gradient accumulation the adds of
 * those shards to the running sums (stacked inputs of the loop) — made the iteration wait for the
 * scatter (and every collective queued before it on the channel) at its end: a 405B layer's 35 ms
 * (docs/planner.md, "The backward loops' waits and Meta's plan").
 *
 * Those readers are row-local: row i of the loop's stacked outputs is a slice / reshape / add / scale
 * (the last micro-step's mean) / cast of row i of the scatter's result and row i of stacked inputs. This pass yields the scatter's
 * result itself as a new stacked output of the loop (written in place into its row: nothing reads it
 * in the body) and applies the same slices, reshapes and adds once after the loop, to the whole stacks
 * (a slice along axis a of a row is one along a + 1 of the stack). The iteration no longer reads what
 * it scattered; the scatter of iteration i overlaps iteration i + 1's backward, and the loop's last
 * one is waited after the loop, where its stacked output is read.
 *
 * Which scatters: zero_defers_scatters (the one decision, which passes/plan_model.c's stall model asks
 * too): ZeRO >= 2 over a group of more than one rank, no pipeline (the stages' instructions hold the
 * loops there). A scatter whose body readers are anything else (a loop, a capture, a carry) stays.
 * Cost: the stacked result ([count, 1, N] f32, the loop's gradient shards: what the unpacked ys hold
 * too) is live from the loop to the unpacking after it; the unpacking is one copy of it.
 */
#include <string.h>

#include "commreport.h"
#include "diag.h"
#include "passes.h"
#include "ptrmap.h"
#include "zero.h"

bool zero_defers_scatters(int zero, int group, int pp) { return zero >= 2 && group > 1 && pp <= 1; }

/* The ops this pass lifts out of a body onto the stacks: row-local, and the same op (a slice one axis
 * later) on a stack. */
static bool liftable(const Node *n) {
  return (n->op == OP_SLICE && n->nin == 1) || n->op == OP_RESHAPE || (n->op == OP_ADD && n->nin == 2) ||
         n->op == OP_SCALE || n->op == OP_CAST;
}

/* Whether a node of g or of a body nested in it reads a value in set. */
static bool reads_set(const Graph *g, const PtrMap *set) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++)
      if (ptrmap_get(set, n->in[j], NULL)) return true;
    if (n->body && reads_set(n->body, set)) return true;
  }
  return false;
}

static void replace_deep(Graph *g, Value *from, Value *to) {
  ir_replace_uses(g, from, to);
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) replace_deep(g->nodes[i]->body, from, to);
}

static int position(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  die("zdefer: node not in its graph");
}


/* The stacked value standing for body value v after loop r: mapped, or a stacked input's. */
static Value *outer_of(const Node *r, const PtrMap *map, Value *v) {
  intptr_t o;
  if (ptrmap_get(map, v, &o)) return (Value *)o;
  return r->in[v->def->a.index];
}

/* Drops the loop's stacked outputs (and their body results) marked in drop. */
static void drop_outputs(Node *r, const bool *drop) {
  Graph *b = r->body;
  int k = 0;
  for (int i = 0; i < r->nout; i++) {
    if (drop[i]) continue;
    r->out[k] = r->out[i];
    r->out[k]->idx = k;
    b->results[k] = b->results[i];
    if (b->result_names) b->result_names[k] = b->result_names[i];
    k++;
  }
  r->nout = k;
  b->nresults = k;
  ir_touch(r->graph);
  ir_touch(b);
}

/* Defers the reduce-scatter s of loop r's body; false (nothing changed) where its readers are not all
 * liftable or it has none. */
static bool defer_one(Node *r, Node *s) {
  Graph *b = r->body, *g = r->graph;
  int nc = r->a.ncarry, nx = r->a.nxs, at = position(b, s);
  PtrMap made = {0};  /* the body values the lifted nodes stand for */
  ptrmap_put(&made, s->out[0], 1);
  Node **lift = ARENA_ARRAY(g->arena, Node *, b->nnodes + 1);
  int nl = 0;
  bool ok = true;
  for (int i = at + 1; i < b->nnodes && ok; i++) {
    Node *n = b->nodes[i];
    bool reads = false;
    for (int j = 0; j < n->nin; j++) reads |= ptrmap_get(&made, n->in[j], NULL);
    if (n->body && reads_set(n->body, &made)) ok = false;
    if (!reads || !ok) continue;
    if (!liftable(n)) {
      ok = false;
      break;
    }
    for (int j = 0; j < n->nin; j++) { /* every other operand a row of a stacked input */
      Value *u = n->in[j];
      if (ptrmap_get(&made, u, NULL)) continue;
      int k = u->def->op == OP_ARG && u->def->graph == b ? u->def->a.index : -1;
      if (k < nc || k >= nc + nx || u->def->a.next) ok = false;
    }
    lift[nl++] = n;
    ptrmap_put(&made, n->out[0], 1);
  }
  for (int k = 0; k < b->nresults && ok; k++) /* yielded: only as stacked outputs */
    if (k < nc && ptrmap_get(&made, b->results[k], NULL)) ok = false;
  if (!ok || nl == 0) {
    ptrmap_free(&made);
    return false;
  }
  /* the scatter's result stacked; its readers applied to the stacks after the loop */
  PtrMap map = {0}; /* body value -> its stack after the loop */
  ptrmap_put(&map, s->out[0], (intptr_t)ir_repeat_add_stacked(r, s->out[0]));
  int pos = position(g, r) + 1;
  for (int i = 0; i < nl; i++) {
    Node *n = lift[i];
    Value *in[2];
    for (int j = 0; j < n->nin; j++) in[j] = outer_of(r, &map, n->in[j]);
    Attrs a = n->a;
    if (n->op == OP_SLICE) a.axis++;
    Value *y = n->out[0];
    Value *o = ir_emit(g, n->op, n->nin, in, y->dtype, ir_stacked_shape(y->shape, r->a.count), &a, n->loc);
    o->sharding = ir_sharding_shift(y->sharding, 1);
    o->def->stage = r->stage;
    o->def->stageset = r->stageset;
    o->def->instr = r->instr;
    ir_move_last(g, pos++);
    ptrmap_put(&map, y, (intptr_t)o);
  }
  /* the loop's stacked outputs the lifted nodes made: their stacks instead */
  bool *drop = ARENA_ARRAY(g->arena, bool, r->nout + 1);
  memset(drop, 0, sizeof(bool) * (size_t)(r->nout + 1));
  for (int k = nc; k < b->nresults - 1; k++) {
    intptr_t o;
    if (!ptrmap_get(&map, b->results[k], &o) || b->results[k] == s->out[0]) continue;
    replace_deep(g, r->out[k], (Value *)o);
    drop[k] = true;
  }
  drop_outputs(r, drop);
  for (int i = nl - 1; i >= 0; i--) ir_drop_node(b, lift[i]);
  ptrmap_free(&map);
  ptrmap_free(&made);
  return true;
}

static void defer_graph(Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *r = g->nodes[i];
    if (!r->body) continue;
    defer_graph(r->body);
    if (r->op != OP_REPEAT) continue;
    for (int j = 0; j < r->body->nnodes; j++) {
      Node *s = r->body->nodes[j];
      if (s->op == OP_REDUCE_SCATTER && ir_comm_async(s)) defer_one(r, s);
    }
  }
}

bool pass_zero_defer(Module *m) {
  if (!m->mesh || !zero_defers_scatters(m->plan.zero, zero_group(m->mesh).deg, m->mesh->dim[RT_AX_PP])) return true;
  defer_graph(m->graph);
  return true;
}
