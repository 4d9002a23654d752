/* passes/zero.c — the `zero` pass: ZeRO stage 1 (plan `zero 1`), optimizer state sharded over dp.
 *
 * Runs after `buckets`: the gradients reaching the update are already whole (all-reduced over
 * dp, in buckets, overlapped with backward), so the gradient norm for clipping is the global one
 * and stays untouched. For every parameter update (adamw_update / sgd_update of the top graph)
 * this pass picks the shard dim d: the first dim of the parameter's (per-tp-rank) shape that
 * tp does not split and that dp divides. Then
 *
 *     ps  = shard_slice(p)  over dp along d      (this rank's 1/dp of the parameter)
 *     gs  = shard_slice(g)  over dp along d      (and of its gradient: no communication)
 *     ps', m', v' = adamw_update(ps, gs, m, v)   m, v: STATE values of 1/dp the size, S(dp)@d
 *     p'  = all_gather(ps') over dp along d      (every rank's parameter rebuilt)
 *
 * so each rank keeps and updates 1/dp of the Adam moments (SGD's momentum), the update costs
 * 1/dp of the flops, and one all-gather of the parameter replaces nothing (plain dp sends no
 * parameters): per step, ZeRO-1 adds the parameter bytes x (dp - 1) / dp of traffic per rank.
 * The states are ordinary sharded tensors (S(dp)@d), so checkpoints stay logical: the runtime
 * gathers them whole (runtime/train/dist.c), and a zero-1 checkpoint resumes under zero 0 and
 * back. A parameter with no such dim (every dim tp-split or not a multiple of dp: e.g. [2, 34]
 * under dp 4) keeps its state whole and updates replicated, as under zero 0 (listed by
 * --dump-ir's note); this is exact, it only forgoes the saving on that tensor.
 *
 * Memory per rank (memplan): optimizer state 2 P / dp (AdamW, f32 P parameters' bytes) instead
 * of 2 P; parameters and gradients unchanged.
 */
#include <string.h>

#include "diag.h"
#include "passes.h"

/* The first dim of v's shape that no mesh axis splits and that dp divides, else -1. */
static int shard_dim(const Value *v, int dp) {
  for (int d = 0; d < v->shape.rank; d++)
    if (v->sharding.split[d] < 0 && v->shape.dim[d] >= dp && v->shape.dim[d] % dp == 0) return d;
  return -1;
}

static int position(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  die("zero: node not in its graph");
}

/* v's type with dim d split dp ways over dp. */
static void split_type(Value *to, const Value *from, int d, int dp) {
  to->dtype = from->dtype;
  to->shape = from->shape;
  to->shape.dim[d] = from->shape.dim[d] / dp;
  to->sharding = from->sharding;
  to->sharding.split[d] = RT_AX_DP;
  to->sharding.blocks[d] = 0;
}

/* y = shard_slice(x) over dp along d, placed at pos. */
static Value *slice_at(Graph *g, Value *x, int d, int dp, int pos, SrcLoc loc) {
  Node *s = ir_node_new(g, OP_SHARD_SLICE, 1, &x, 1, loc);
  s->a.mesh_axis = RT_AX_DP;
  s->a.axis = d;
  split_type(s->out[0], x, d, dp);
  ir_move_last(g, pos);
  return s->out[0];
}

/* True when v (a STATE or CONST source) is read by `u` only: its type may change in place. */
static bool only_reader(const Graph *g, const Value *v, const Node *u) {
  if (v->def->op != OP_STATE && v->def->op != OP_CONST) return false;
  for (int i = 0; i < g->nnodes; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++)
      if (g->nodes[i]->in[j] == v && g->nodes[i] != u) return false;
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == v) return false;
  return true;
}

/* Shards one update u (adamw_update: p, g, m, v, hyper; sgd_update: p, g, m, hyper). */
static bool shard_update(Graph *g, Node *u, int dp) {
  Value *p = u->in[0];
  int nstate = u->op == OP_ADAMW_UPDATE ? 2 : 1;
  int d = shard_dim(p, dp);
  if (d < 0 || p->def->op != OP_PARAM) return false;
  if (!ir_shape_eq(&u->in[1]->shape, &p->shape) || u->in[1]->sharding.split[d] >= 0) return false;
  for (int k = 0; k < nstate; k++)
    if (!only_reader(g, u->in[2 + k], u) || !ir_shape_eq(&u->in[2 + k]->shape, &p->shape)) return false;
  int pos = position(g, u);
  u->in[0] = slice_at(g, p, d, dp, pos++, u->loc);
  u->in[1] = slice_at(g, u->in[1], d, dp, pos++, u->loc);
  for (int k = 0; k < nstate; k++) {
    Value *s = u->in[2 + k];
    Value old = *s;
    split_type(s, &old, d, dp); /* the STATE itself is 1/dp: memplan allots 1/dp */
  }
  for (int k = 0; k < u->nout; k++) {
    Value old = *u->out[k];
    split_type(u->out[k], &old, d, dp);
  }
  Value *ps = u->out[0];
  Node *ag = ir_node_new(g, OP_ALL_GATHER, 1, &ps, 1, u->loc);
  ag->a.mesh_axis = RT_AX_DP;
  ag->a.axis = d;
  ag->out[0]->dtype = p->dtype;
  ag->out[0]->shape = p->shape;
  ag->out[0]->sharding = p->sharding;
  ir_move_last(g, pos + 1);
  /* next:<param> (and any other reader of the updated parameter) takes the gathered one */
  for (int i = 0; i < g->nnodes; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++)
      if (g->nodes[i]->in[j] == ps && g->nodes[i] != ag) g->nodes[i]->in[j] = ag->out[0];
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == ps) g->results[i] = ag->out[0];
  return true;
}

bool pass_zero(Module *m) {
  int stage = m->plan.zero;
  int dp = m->mesh ? m->mesh->dim[RT_AX_DP] : 1;
  if (stage <= 0 || dp <= 1) return true;
  if (stage > 1) {
    error_at(m->plan.loc, "zero %d: ZeRO stage %d is not implemented yet (zero 1 shards the optimizer state; use zero 0 or 1)",
             stage, stage);
    return false;
  }
  Graph *g = m->graph;
  int n = g->nnodes;
  Node **updates = ARENA_ARRAY(g->arena, Node *, n + 1);
  int nu = 0;
  for (int i = 0; i < n; i++)
    if (g->nodes[i]->op == OP_ADAMW_UPDATE || g->nodes[i]->op == OP_SGD_UPDATE) updates[nu++] = g->nodes[i];
  for (int i = 0; i < nu; i++) shard_update(g, updates[i], dp);
  return true;
}
