/* passes/shard.c — data, tensor and sequence parallelism by sharding propagation (the pass;
 * its rules are shard_rules.c and shard_tp.c, its machinery shard_core.c, see shard_internal.h).
 *
 * Input: the whole step graph (forward, backward, optimizer) on logical shapes.
 * Output: one SPMD per-rank program: every Value.shape is the rank's local shape,
 * Value.sharding says how it relates to the logical tensor, and the collectives
 * that make the per-rank program compute the logical one are explicit nodes.
 *
 * How. Nodes are visited in order (bodies of REPEATs when their node is reached).
 * Each op has a rule that, from its inputs' shardings, picks the output's sharding
 * and redistributes inputs where they disagree; redistribution (`redist`) is the
 * one place collectives come from:
 *   Partial(a) -> split on d over a  reduce_scatter      (sp: row-parallel output)
 *   Partial(a) -> not split by a     all_reduce          (one per Megatron block)
 *   split on d -> not split          all_gather
 *   not split  -> split on d         shard_slice         (free: a local slice)
 * Nothing names layers. Seeds are few: token inputs split their batch dim over dp;
 * a parameter's sharding is chosen where it is first used —
 *   - matmul weight, activation not split on k: columns over tp (its output is
 *     split, the elementwise ops after it keep that), in `blocks` equal blocks when
 *     the output is later cut in equal slices (a fused QKV keeps each rank's q, k
 *     and v heads together);
 *   - matmul weight, activation split on k over tp: rows (the output is Partial: one
 *     all-reduce settles a Megatron MLP or attention block);
 *   - embedding table indexed by tokens: rows over tp (vocab-parallel; the output is
 *     Partial); a table indexed by positions stays replicated;
 *   - anything else (norm weights, biases after a row split, ...): replicated or the
 *     other operand's sharding.
 * Backward and optimizer need no rules of their own: they are matmuls, reductions
 * and elementwise ops too, so a replicated weight's gradient computed from replicated
 * activations is replicated (never double-counted), a gradient summed over a batch
 * split by dp is Partial(dp) — settled by the all-reduce that is data parallelism —
 * and a norm's gradient computed on sequence shards is Partial(tp).
 * Cross-entropy over vocab-split (or row-split) logits becomes ce_max, an all-reduce
 * max, ce_sums, an all-reduce sum, ce_loss and ce_grad: the logits are never gathered.
 *
 * Sequence parallelism (plan `sp`): a tp-Partial value with a sequence dim is settled
 * by reduce-scatter along that dim instead of all-reduce, so norms, residuals and
 * dropout-free elementwise work run on sequence shards; the next column-split matmul
 * finds tp on both its activation's sequence dim and its weight's columns and
 * all-gathers the activation (the same in backward). Under cp the sequence dim is already split
 * over cp: sp splits each cp rank's part again over tp (Sharding.inner, `reads_inner` below).
 */
#include <string.h>

#include "plan_options.h"
#include "shard_internal.h"

static void rewrite_graph(Sh *s, Graph *g);

/* REPEAT: carries keep their input's sharding (results are redistributed to it),
 * stacked inputs lose their leading dim, ys gain it. */
static void rule_repeat(Sh *s, Node *n) {
  Graph *b = n->body;
  int nc = n->a.ncarry, nx = n->a.nxs;
  for (int i = 0; i < n->nin; i++) {
    Value *x = n->in[i];
    Node *arg = b->args[i];
    Value *av = arg->out[0];
    VInfo *xi = shard_info(s, x), *ai = shard_info(s, av);
    if (i < nc) shard_decide_repl(s, x);
    x = n->in[i] = shard_settle(s, x);
    xi = shard_info(s, x);
    if (xi->undecided) { /* a parameter: decided where the body first uses it */
      ai->undecided = true;
      ai->param = xi->param;
      ai->via = x;
      ai->lead = xi->lead + (i >= nc && i < nc + nx ? 1 : 0);
      continue;
    }
    Sharding h = x->sharding;
    if (i >= nc && i < nc + nx) {
      if (h.split[0] >= 0) x = n->in[i] = shard_gather_dim(s, x, 0);
      h = ir_sharding_shift(x->sharding, -1);
      for (int d = 0; d + 1 < IR_MAX_RANK; d++) ai->role[d] = xi->role[d + 1];
    } else {
      memcpy(ai->role, xi->role, sizeof ai->role);
    }
    av->sharding = h;
    av->shape = shard_local_of(s, av->shape, &h);
  }
  rewrite_graph(s, b);
  /* carries: back to the argument's sharding; ys: anything, stacked */
  Graph *saved = s->g;
  s->g = b;
  for (int i = 0; i < b->nresults; i++) {
    Value *y = shard_sub(s, b->results[i]);
    if (i < nc) {
      Value *av = b->args[i]->out[0];
      y = shard_redist(s, y, av->sharding);
    }
    b->results[i] = y;
  }
  s->g = saved;
  for (int i = 0; i < n->nout; i++) {
    Value *y = b->results[i];
    Sharding h = y->sharding;
    if (i >= nc) {
      h = ir_sharding_shift(h, 1);
      for (int d = IR_MAX_RANK - 1; d > 0; d--) shard_info(s, n->out[i])->role[d] = shard_info(s, y)->role[d - 1];
    } else {
      memcpy(shard_info(s, n->out[i])->role, shard_info(s, y)->role, sizeof shard_info(s, y)->role);
    }
    shard_set_out(s, n, i, h);
  }
}

/* The rules that carry an inner split (Sharding.inner: sp's tp inside cp's sequence chunks) from
 * their inputs to their outputs; every other op is given its inputs with the inner splits gathered,
 * as sp gathers the sequence before a column-parallel matmul. */
static bool reads_inner(OpKind op, unsigned fl) {
  if (fl & F_EW) return true;
  switch (op) {
  case OP_REDUCE_SUM: case OP_BROADCAST_TO: case OP_SUM: case OP_MEAN: case OP_SUMSQ:
  case OP_LAYERNORM: case OP_RMSNORM: case OP_LAYERNORM_BWD: case OP_RMSNORM_BWD: case OP_REPEAT:
    return true;
  default: return false;
  }
}

static void rewrite_node(Sh *s, Node *n) {
  s->loc = n->loc;
  for (int i = 0; i < n->nin; i++) n->in[i] = shard_sub(s, n->in[i]);
  unsigned fl = ir_ops[n->op].flags;
  if (!(fl & F_SOURCE) && !reads_inner(n->op, fl))
    for (int i = 0; i < n->nin; i++) n->in[i] = shard_gather_inner(s, n->in[i]);
  if (fl & F_SOURCE) {
    if (n->op == OP_ARG) return; /* set by the enclosing REPEAT */
    shard_rule_source(s, n);
    return;
  }
  if (fl & F_EW) {
    shard_rule_ew(s, n);
    return;
  }
  switch (n->op) {
  case OP_MATMUL: shard_rule_matmul(s, n); return;
  case OP_RESHAPE: shard_rule_reshape(s, n); return;
  case OP_TRANSPOSE: shard_rule_transpose(s, n); return;
  case OP_SLICE: case OP_PAD: shard_rule_slice_pad(s, n); return;
  case OP_CONCAT: shard_rule_concat(s, n); return;
  case OP_REDUCE_SUM: case OP_BROADCAST_TO: shard_rule_reduce_bcast(s, n); return;
  case OP_SUM: case OP_MEAN: case OP_SUMSQ: shard_rule_full_reduce(s, n); return;
  case OP_LAYERNORM: case OP_RMSNORM: case OP_LAYERNORM_BWD: case OP_RMSNORM_BWD: shard_rule_norm(s, n); return;
  case OP_ROPE: shard_rule_rope(s, n); return;
  case OP_SDPA: case OP_SDPA_BWD: shard_rule_sdpa(s, n); return;
  case OP_EMBED: shard_rule_embed(s, n); return;
  case OP_EMBED_BWD: shard_rule_embed_bwd(s, n); return;
  case OP_CROSS_ENTROPY: shard_rule_ce(s, n); return;
  case OP_CROSS_ENTROPY_BWD: shard_rule_ce_bwd(s, n); return;
  case OP_SGD_UPDATE: case OP_ADAMW_UPDATE: shard_rule_update(s, n); return;
  case OP_REPEAT: rule_repeat(s, n); return;
  default:
    die("shard: no sharding rule for %s", ir_ops[n->op].name);
  }
}

static void rewrite_graph(Sh *s, Graph *g) {
  Graph *saved_g = s->g;
  Node **saved_old = s->old;
  int saved_nold = s->nold;
  Node **old = g->nodes;
  int nold = g->nnodes;
  g->nodes = NULL;
  g->nnodes = g->capnodes = 0;
  s->g = g;
  s->old = old;
  s->nold = nold;
  for (int i = 0; i < nold; i++) {
    Node *n = old[i];
    rewrite_node(s, n);
    if (n->op == OP_COUNT) continue; /* replaced by the values it was rewritten into */
    arena_grow(g->arena, (void **)&g->nodes, &g->capnodes, g->nnodes + 1, sizeof(Node *));
    g->nodes[g->nnodes++] = n;
  }
  s->g = saved_g;
  s->old = saved_old;
  s->nold = saved_nold;
}

/* Every local shape must be what the op's rule infers from its local inputs: a
 * mismatch is a bug in this pass, reported as such. */
static void check_shapes(Graph *g) {
  ir_remove_dead(g);
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->body) check_shapes(n->body);
    Shape before[8];
    int k = n->nout < 8 ? n->nout : 8;
    for (int j = 0; j < k; j++) before[j] = n->out[j]->shape;
    if (!ir_infer(n)) die("shard: %s: local shapes do not check", ir_ops[n->op].name);
    for (int j = 0; j < k; j++)
      if (!ir_shape_eq(&before[j], &n->out[j]->shape))
        die("shard: %s output %d: the pass made one local shape, the op infers another", ir_ops[n->op].name, j);
  }
}

bool pass_shard(Module *m) {
  if (!m->mesh) die("shard: the mesh is not resolved");
  Sh s = {0};
  s.m = m;
  s.a = m->arena;
  s.ok = true;
  for (int a = 0; a < RT_AX_COUNT; a++) s.deg[a] = m->mesh->dim[a];
  s.sp = m->plan.sp && s.deg[RT_AX_TP] > 1;
  /* an option of an axis of degree 1 applies to nothing: said, as zero's at dp 1 (was: kept without a word) */
  if (m->plan.sp && !s.sp)
    note_at(m->plan.loc, "sp on: sequence parallelism splits the sequence over tp, and the plan has tp 1: nothing to "
            "split");
  if (m->plan.cp_mode != CP_RING && s.deg[RT_AX_CP] < 2)
    note_at(m->plan.opt_loc[PLAN_OPT_CP_MODE], "cp_mode %s: the plan has cp 1: no context parallelism to run", ir_cp_mode_names[m->plan.cp_mode]);
  bool any = false;
  for (int a = 0; a < RT_AX_COUNT; a++) any |= s.deg[a] > 1;
  if (!any) return true; /* one rank: the program is the graph */
  Graph *g = m->graph;
  s.max_tp = m->mesh->devices_per_node > 1 ? m->mesh->devices_per_node : 64;
  if (s.deg[RT_AX_TP] > 1) shard_scan_attention(&s, g);
  rewrite_graph(&s, g);
  s.g = g;
  s.loc = (SrcLoc){0};
  for (int i = 0; i < g->nresults; i++) g->results[i] = shard_settle(&s, shard_sub(&s, g->results[i]));
  /* parameters nobody read (and their casts nobody decided): replicated */
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_PARAM || g->nodes[i]->op == OP_STATE || g->nodes[i]->op == OP_CAST)
      shard_decide_repl(&s, g->nodes[i]->out[0]);
  bool ok = s.ok && diag_errors() == 0;
  if (ok) check_shapes(g); /* after a user error (a sequence cp does not split) the local shapes were never made */
  ptrmap_free(&s.info);
  ptrmap_free(&s.memo);
  ptrmap_free(&s.subst);
  ptrmap_free(&s.ce);
  ptrmap_free(&s.embed);
  ptrmap_free(&s.attn_repl);
  ptrmap_free(&s.cp_pos);
  return ok;
}

