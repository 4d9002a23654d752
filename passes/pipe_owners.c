/* passes/pipe_owners.c — under pipeline parallelism, what only some stages need runs (and is held)
 * on those stages only.
 *
 * pipe_own (called by passes/pipe.c): a parameter outside the layers whose readers are one stage's
 * instructions (the first stage's embedding tables, the last stage's head and final norm) becomes
 * that stage's, one read on two stages (a tied embedding: the first and the last) theirs: its
 * PARAM and its optimizer STATEs are predicated on them (Node.stage; Node.stageset for two), so
 * the memory plan places them among those stages' values (other stages' bytes at the same
 * offsets) and the trainer initialises, checkpoints and loads them on those stages' ranks only
 * (RtTensor.stages). Its gradient is not summed over pp (pipe.c: whole on its one stage, or
 * exchanged between its two), so the clip's sum of squares of it is taken on the first of them
 * and summed over pp, counted once.
 *
 * pass_owners (after zero, before fuse): every node of the step that runs on every rank but whose
 * outputs only one stage needs runs on that stage (Node.stage): a backward walk from the results
 * (a result "next:X" or "grad:X" of a parameter or state X held on one stage is needed there, the
 * rest everywhere) giving each value the stages whose nodes read it. What it moves: the owned
 * parameter's bf16 cast, its gradient's running sums, its update (written back in place on the
 * owner), its data-parallel all-reduce (asynchronous: waited on the same stages, codegen/emit.c's
 * Wait.on), ZeRO's slices and gathers of it. Not moved: regions, pipeline transfers and
 * collectives over pp. A parameter whose write-back would then run on other stages than its
 * owner's is a compiler bug (it would write into another stage's bytes).
 */
#include <string.h>

#include "diag.h"
#include "passes.h"
#include "ptrmap.h"

/* n on the stages of mask `stages` (one: Node.stage; several: Node.stageset). */
static void put_on(Node *n, uint64_t stages) {
  if (stages & (stages - 1)) n->stageset = stages;
  else n->stage = __builtin_ctzll(stages) + 1;
}

void pipe_own(Graph *g, Node *update, uint64_t stages) {
  put_on(update->in[0]->def, stages);
  for (int j = 2; j < update->nin; j++)
    if (update->in[j]->def->op == OP_STATE) put_on(update->in[j]->def, stages);
  int stage = __builtin_ctzll(stages); /* the clip: the gradient's sum of squares on the first owner (counted
                                          once), zeros elsewhere, summed over pp */
  Value *gv = update->in[1];
  for (int i = 0; i < g->nnodes; i++) {
    Node *q = g->nodes[i];
    if (q->op != OP_SUMSQ || q->in[0] != gv || ir_node_stages(q)) continue;
    q->stage = stage + 1;
    Value *s = q->out[0];
    Node *ar = ir_node_new(g, OP_ALL_REDUCE, 1, &s, 1, q->loc);
    ar->a.mesh_axis = RT_AX_PP;
    ar->a.reduce = RED_SUM;
    ar->out[0]->dtype = s->dtype;
    ar->out[0]->shape = s->shape;
    ar->out[0]->sharding = s->sharding;
    s->sharding.partial |= (uint8_t)(1u << RT_AX_PP);
    ir_replace_uses(g, s, ar->out[0]);
    ar->in[0] = s;
    for (int r = 0; r < g->nresults; r++)
      if (g->results[r] == s) g->results[r] = ar->out[0];
    ir_move_last(g, i + 1);
  }
}

/* The sum of x between stages a and b (each holding its part, a tied embedding's gradient: the
 * lookup's on the first stage, the head's on the last): each sends its part to the other (tags
 * tag, tag + 1) and adds the two in the same order (a's + b's: the same bits on both); the sum is
 * the two stages' (Node.stageset), each taking its own (stage_select). */
Value *pipe_pair_sum(Graph *g, Value *x, int a, int b, int tag, int pp, SrcLoc loc) {
  Value *got[2];
  for (int k = 0; k < 2; k++) { /* k 0: a sends to b; k 1: b to a */
    int from = k ? b : a, to = k ? a : b;
    Node *s = ir_node_new(g, OP_SEND, 1, &x, 0, loc);
    s->a.mesh_axis = RT_AX_PP;
    s->a.start = to - from;
    s->a.tag = tag + k;
    s->stage = from + 1;
  }
  for (int k = 0; k < 2; k++) { /* k 0: a receives b's part; k 1: b receives a's */
    int at = k ? b : a, from = k ? a : b;
    Node *r = ir_node_new(g, OP_RECV, 0, NULL, 1, loc);
    r->a.mesh_axis = RT_AX_PP;
    r->a.start = from - at;
    r->a.tag = k ? tag : tag + 1;
    r->stage = at + 1;
    r->out[0]->dtype = x->dtype;
    r->out[0]->shape = x->shape;
    r->out[0]->sharding = x->sharding;
    got[k] = r->out[0];
  }
  Value *on_a[2] = {x, got[0]}, *on_b[2] = {got[1], x};
  Value *sa = ir_emit(g, OP_ADD, 2, on_a, x->dtype, x->shape, NULL, loc);
  Value *sb = ir_emit(g, OP_ADD, 2, on_b, x->dtype, x->shape, NULL, loc);
  sa->def->stage = a + 1;
  sb->def->stage = b + 1;
  sa->sharding = sb->sharding = x->sharding;
  Value **each = ARENA_ARRAY(g->arena, Value *, pp);
  for (int s = 0; s < pp; s++) each[s] = s == b ? sb : sa; /* (another stage's input: never read) */
  Value *y = ir_emit(g, OP_STAGE_SELECT, pp, each, x->dtype, x->shape, NULL, loc);
  y->def->stageset = 1ull << a | 1ull << b;
  y->sharding = x->sharding;
  return y;
}

/* The source (PARAM or STATE) named name in g, or NULL. */
static const Node *source_named(const Graph *g, const char *name) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if ((n->op == OP_PARAM || n->op == OP_STATE) && n->a.name && strcmp(n->a.name, name) == 0) return n;
  }
  return NULL;
}


/* Whether n may run on a subset of the stages: a computation, or a collective inside a stage
 * (dp, cp, tp: its group's ranks share their pp coordinate; an asynchronous one is waited on the
 * same stages, codegen/emit.c's Wait.on). */
static bool movable(const Node *n) {
  if ((ir_ops[n->op].flags & F_SOURCE) || n->op == OP_ARG || n->body || n->op == OP_SEND || n->op == OP_RECV)
    return false;
  if (ir_ops[n->op].flags & F_COLL) return n->a.mesh_axis != RT_AX_PP && !(n->a.mesh_with & (1u << RT_AX_PP));
  return true;
}

static void need_or(PtrMap *need, const Value *v, uint64_t bits) {
  intptr_t x = 0;
  ptrmap_get(need, v, &x);
  ptrmap_put(need, v, (intptr_t)((uint64_t)x | bits));
}

static uint64_t need_of(const PtrMap *need, const Value *v) {
  intptr_t x = 0;
  ptrmap_get(need, v, &x);
  return (uint64_t)x;
}

/* Every value of g that body (or a body in it) reads: needed on the stages in `run`. */
static void need_captures(const Graph *g, const Graph *body, PtrMap *need, uint64_t run) {
  for (int i = 0; i < body->nnodes; i++) {
    const Node *x = body->nodes[i];
    for (int j = 0; j < x->nin; j++)
      if (x->in[j]->def->graph == g) need_or(need, x->in[j], run);
    if (x->body) need_captures(g, x->body, need, run);
  }
}

/* The walk back from the results: need[value] the stages whose nodes read it; with apply, a
 * movable node some stages alone need runs on those. */
static void walk(Graph *g, uint64_t all, PtrMap *need, bool apply) {
  for (int r = 0; r < g->nresults; r++) {
    const char *nm = g->result_names ? g->result_names[r] : NULL;
    uint64_t bits = all;
    if (nm && (!strncmp(nm, "next:", 5) || !strncmp(nm, "grad:", 5))) {
      const Node *src = source_named(g, nm + 5);
      if (src && ir_node_stages(src)) bits = ir_node_stages(src);
    }
    need_or(need, g->results[r], bits);
  }
  for (int i = g->nnodes - 1; i >= 0; i--) {
    Node *n = g->nodes[i];
    uint64_t run = all;
    if (ir_node_stages(n)) {
      run = ir_node_stages(n);
    } else if (movable(n)) {
      run = 0;
      for (int k = 0; k < n->nout; k++) run |= need_of(need, n->out[k]);
      if (!run || run == all) run = all;
      else if (apply && !(run & (run - 1))) n->stage = __builtin_ctzll(run) + 1; /* one stage needs it */
      else if (apply) n->stageset = run;                                            /* some stages */
    }
    for (int j = 0; j < n->nin; j++)
      if (n->in[j]->def->graph == g) need_or(need, n->in[j], n->op == OP_STAGE_SELECT ? run & (1ull << j) : run);
    if (n->body) need_captures(g, n->body, need, run);
  }
}

/* A collective over a stage's group (dp: a bucket of gradients) whose outputs different stages
 * need becomes one per set of stages, so that each runs where its outputs are needed. */
static void split_collectives(Graph *g, PtrMap *need, uint64_t all) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->op != OP_ALL_REDUCE || n->nin != n->nout || n->nin < 2 || ir_node_stages(n) || !movable(n)) continue;
    uint64_t first = need_of(need, n->out[0]) ? need_of(need, n->out[0]) : all;
    bool mixed = false;
    for (int k = 1; k < n->nout; k++) mixed |= (need_of(need, n->out[k]) ? need_of(need, n->out[k]) : all) != first;
    if (!mixed) continue;
    bool *done = ARENA_ARRAY(g->arena, bool, n->nout);
    Value **in = ARENA_ARRAY(g->arena, Value *, n->nin);
    int *which = ARENA_ARRAY(g->arena, int, n->nin), at = i;
    for (int k = 0; k < n->nout; k++) {
      if (done[k]) continue;
      uint64_t mk = need_of(need, n->out[k]) ? need_of(need, n->out[k]) : all;
      int cnt = 0;
      for (int q = k; q < n->nout; q++)
        if (!done[q] && (need_of(need, n->out[q]) ? need_of(need, n->out[q]) : all) == mk) {
          done[q] = true;
          which[cnt] = q;
          in[cnt++] = n->in[q];
        }
      Node *part = ir_node_new(g, OP_ALL_REDUCE, cnt, in, cnt, n->loc);
      part->a = n->a;
      for (int q = 0; q < cnt; q++) {
        Value *y = part->out[q], *old = n->out[which[q]];
        y->dtype = old->dtype;
        y->shape = old->shape;
        y->sharding = old->sharding;
        y->name = old->name;
        ir_replace_uses(g, old, y);
        for (int r = 0; r < g->nresults; r++)
          if (g->results[r] == old) g->results[r] = y;
      }
      ir_move_last(g, at++);
    }
    ir_drop_node(g, n);
    i = at - 1;
  }
}

bool pass_owners(Module *m) {
  int pp = m->mesh ? m->mesh->dim[RT_AX_PP] : 1;
  if (pp <= 1 || pp > 64) return true;
  Graph *g = m->graph;
  uint64_t all = pp == 64 ? ~0ull : (1ull << pp) - 1;
  PtrMap need = {0};
  walk(g, all, &need, false);
  split_collectives(g, &need, all);
  ptrmap_free(&need);
  need = (PtrMap){0};
  walk(g, all, &need, true);
  ptrmap_free(&need);
  /* a write-back into a source held on one stage runs on that stage only */
  for (int r = 0; r < g->nresults; r++) {
    const char *nm = g->result_names ? g->result_names[r] : NULL;
    const Node *src = nm && !strncmp(nm, "next:", 5) ? source_named(g, nm + 5) : NULL;
    const Node *w = g->results[r]->def;
    if (src && ir_node_stages(src) && w != src && ir_node_stages(w) != ir_node_stages(src))
      die("owners: %s, held on pipeline stages 0x%llx, is written by a %s of stages 0x%llx", nm + 5,
          (unsigned long long)ir_node_stages(src), ir_ops[w->op].name, (unsigned long long)ir_node_stages(w));
  }
  return true;
}
