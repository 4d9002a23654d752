/* passes/accum.c — gradient accumulation: `accum` micro-steps, one optimizer step.
 *
 * When Module.batch.accum > 1 (ir/mesh.c: batch = micro_batch x dp x accum), the per-rank
 * micro-step — every non-source node the loss and the gradients need, data-parallel
 * reductions of the gradients excluded — moves into a `repeat accum` region:
 *   - its xs are the per-step inputs it reads (tokens, targets), now [accum, ...] (iteration i
 *     reads micro-batch i; the dims after the first keep their shardings);
 *   - its carries are the values the rest of the step reads from it (the loss, each gradient
 *     before its all-reduces), summed over the micro-steps from zeros;
 *   - outside, each sum is scaled by 1/accum: the mean over micro-steps, which is the big
 *     batch's mean when every micro-step holds as many counted targets.
 * Parameters and other sources stay outside (the body reads them directly). The dp all-reduces
 * and the optimizer stay after the region: the gradients are reduced once per optimizer step.
 * Runs after shard (per-rank shapes, collectives placed) and before buckets, which leaves an
 * all-reduce of a carried sum where it is (after the loop).
 */
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "passes.h"

static bool is_source(const Node *n) { return (ir_ops[n->op].flags & F_SOURCE) != 0; }

/* The value the micro-step makes for a result: a gradient before its all-reduces (over dp, and
 * over tp after it for a gradient sequence parallelism leaves partial): sums over ranks commute
 * with the sum over micro-steps, so they run once, after the loop. */
static Value *micro_value(Value *v) {
  while (v->def->op == OP_ALL_REDUCE && v->def->a.reduce == RED_SUM) v = v->def->in[v->idx];
  return v;
}

typedef struct {
  Graph *g;
  bool *moved;  /* by node id: in the micro-step */
} Acc;

static void mark(Acc *s, Value *v) {
  Node *n = v->def;
  if (n->graph != s->g || is_source(n) || s->moved[n->id]) return;
  s->moved[n->id] = true;
  for (int j = 0; j < n->nin; j++) mark(s, n->in[j]);
  /* values a nested body captures from g are inputs of the region too */
  if (n->body)
    for (int b = 0; b < n->body->nnodes; b++) {
      Node *x = n->body->nodes[b];
      for (int j = 0; j < x->nin; j++)
        if (x->in[j]->def->graph == s->g) mark(s, x->in[j]);
    }
}

static bool reads(const Node *n, const Value *v) {
  for (int j = 0; j < n->nin; j++)
    if (n->in[j] == v) return true;
  if (n->body)
    for (int b = 0; b < n->body->nnodes; b++)
      if (reads(n->body->nodes[b], v)) return true;
  return false;
}

static Shape stacked(Shape s, int64_t k) {
  if (s.rank + 1 > IR_MAX_RANK) die("accum: rank too large");
  for (int d = s.rank; d > 0; d--) s.dim[d] = s.dim[d - 1], s.sym[d] = s.sym[d - 1];
  s.dim[0] = k;
  s.sym[0] = -1;
  s.rank++;
  return s;
}

static Sharding stacked_sharding(Sharding h) {
  return ir_sharding_shift(h, 1);
}

bool pass_accum(Module *m) {
  int64_t k = m->batch.accum;
  if (k <= 1 && !(m->mesh && m->mesh->dim[RT_AX_PP] > 1)) return true; /* pp: one micro-batch is a region too */
  Graph *g = m->graph;
  Acc s = {g, calloc((size_t)g->next_node_id + 1, sizeof(bool))};
  if (!s.moved) die("out of memory");
  for (int r = 0; r < g->nresults; r++) {
    const char *nm = g->result_names ? g->result_names[r] : NULL;
    if (nm && (strcmp(nm, "loss") == 0 || strncmp(nm, "grad:", 5) == 0)) mark(&s, micro_value(g->results[r]));
  }
  /* the carries: micro-step values read outside it */
  Value **carry = ARENA_ARRAY(m->arena, Value *, 1);
  int nc = 0, capc = 1;
  Value **xin = ARENA_ARRAY(m->arena, Value *, 1); /* the inputs it reads: its xs */
  int nx = 0, capx = 1;
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (s.moved[n->id]) {
      for (int j = 0; j < n->nin; j++) {
        Value *u = n->in[j];
        if (u->def->op != OP_INPUT) continue;
        bool seen = false;
        for (int q = 0; q < nx; q++) seen |= xin[q] == u;
        if (seen) continue;
        arena_grow(m->arena, (void **)&xin, &capx, nx + 1, sizeof(Value *));
        xin[nx++] = u;
      }
      continue;
    }
    for (int o = 0; o < i; o++) {
      Node *d = g->nodes[o];
      if (!s.moved[d->id]) continue;
      for (int q = 0; q < d->nout; q++) {
        Value *v = d->out[q];
        bool seen = false;
        for (int c = 0; c < nc; c++) seen |= carry[c] == v;
        if (seen || !reads(n, v)) continue;
        arena_grow(m->arena, (void **)&carry, &capc, nc + 1, sizeof(Value *));
        carry[nc++] = v;
      }
    }
  }
  for (int r = 0; r < g->nresults; r++) {
    Value *v = g->results[r];
    if (v->def->graph != g || !s.moved[v->def->id]) continue;
    bool seen = false;
    for (int c = 0; c < nc; c++) seen |= carry[c] == v;
    if (seen) continue;
    arena_grow(m->arena, (void **)&carry, &capc, nc + 1, sizeof(Value *));
    carry[nc++] = v;
  }
  for (int c = 0; c < nc; c++)
    if (!ir_dtype_is_float(carry[c]->dtype)) die("accum: a micro-step value read after it is not a float");
  for (int q = 0; q < nx; q++)
    for (int i = 0; i < g->nnodes; i++)
      if (!s.moved[g->nodes[i]->id] && reads(g->nodes[i], xin[q]))
        die("accum: input %s is read outside the micro-step", xin[q]->def->a.name);

  /* the body: carries' and xs' arguments, the micro-step's nodes in order, the sums */
  Graph *body = ir_graph_new(m->arena, g);
  SrcLoc L = body->nnodes ? body->nodes[0]->loc : m->recipe.loc; /* set below, once the nodes are moved */
  Value **cargs = ARENA_ARRAY(m->arena, Value *, nc + 1);
  for (int c = 0; c < nc; c++) {
    Node *a = ir_add_arg(body, carry[c]->dtype, carry[c]->shape, "sum");
    a->out[0]->sharding = carry[c]->sharding;
    cargs[c] = a->out[0];
  }
  Value **xargs = ARENA_ARRAY(m->arena, Value *, nx + 1);
  for (int q = 0; q < nx; q++) {
    Node *a = ir_add_arg(body, xin[q]->dtype, xin[q]->shape, xin[q]->def->a.name);
    a->out[0]->sharding = xin[q]->sharding;
    xargs[q] = a->out[0];
  }
  Node **keep = ARENA_ARRAY(m->arena, Node *, g->nnodes + 1);
  int nkeep = 0;
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (!s.moved[n->id]) {
      keep[nkeep++] = n;
      continue;
    }
    n->graph = body;
    n->id = body->next_node_id++;
    for (int q = 0; q < n->nout; q++) n->out[q]->id = body->next_value_id++;
    if (n->body) n->body->parent = body;
    arena_grow(body->arena, (void **)&body->nodes, &body->capnodes, body->nnodes + 1, sizeof(Node *));
    body->nodes[body->nnodes++] = n;
  }
  free(s.moved);
  /* the region and its sums are where the loss is made: a model location, which the IR text keeps */
  for (int r = 0; r < g->nresults; r++)
    if (g->result_names && g->result_names[r] && strcmp(g->result_names[r], "loss") == 0) L = g->results[r]->def->loc;
  for (int q = 0; q < nx; q++) ir_replace_uses(body, xin[q], xargs[q]);
  for (int c = 0; c < nc; c++) {
    Value *in[2] = {cargs[c], carry[c]};
    Value *sum = ir_emit(body, OP_ADD, 2, in, carry[c]->dtype, carry[c]->shape, NULL, L);
    sum->sharding = carry[c]->sharding;
    ir_add_result(body, sum, NULL);
  }

  /* the outer graph: the inputs, what does not depend on the micro-step, the region, the
   * means, then the rest (the dp all-reduces, the optimizer) */
  g->nodes = NULL;
  g->nnodes = g->capnodes = 0;
  bool *late = calloc((size_t)nkeep + 1, sizeof(bool));
  if (!late) die("out of memory");
  for (int i = 0; i < nkeep; i++) {
    Node *n = keep[i];
    for (int c = 0; c < nc && !late[i]; c++) late[i] = reads(n, carry[c]);
    for (int o = 0; o < i && !late[i]; o++)
      if (late[o])
        for (int q = 0; q < keep[o]->nout && !late[i]; q++) late[i] = reads(n, keep[o]->out[q]);
  }
  /* inputs: the micro-step's become [accum, ...]; the others (lr, step) stay */
  Value **ins = ARENA_ARRAY(m->arena, Value *, nc + nx + 1);
  for (int i = 0; i < nkeep; i++) {
    Node *n = keep[i];
    if (n->op != OP_INPUT) continue;
    int q = 0;
    while (q < nx && xin[q] != n->out[0]) q++;
    if (q < nx) {
      n->out[0]->shape = stacked(n->out[0]->shape, k);
      n->out[0]->sharding = stacked_sharding(n->out[0]->sharding);
    }
    arena_grow(g->arena, (void **)&g->nodes, &g->capnodes, g->nnodes + 1, sizeof(Node *));
    g->nodes[g->nnodes++] = n;
  }
  for (int i = 0; i < nkeep; i++) {
    if (late[i] || keep[i]->op == OP_INPUT) continue;
    arena_grow(g->arena, (void **)&g->nodes, &g->capnodes, g->nnodes + 1, sizeof(Node *));
    g->nodes[g->nnodes++] = keep[i];
  }
  for (int c = 0; c < nc; c++) {
    Attrs za = {0};
    za.scalar = 0;
    Value *z = ir_emit(g, OP_CONST, 0, NULL, carry[c]->dtype, carry[c]->shape, &za, L);
    z->sharding = carry[c]->sharding;
    ins[c] = z;
  }
  for (int q = 0; q < nx; q++) ins[nc + q] = xin[q];
  Node *r = ir_node_new(g, OP_REPEAT, nc + nx, ins, nc, L);
  r->body = body;
  body->owner = r;
  r->a.count = k;
  r->a.ncarry = nc;
  r->a.nxs = nx;
  r->a.name = "accum";
  Value **mean = ARENA_ARRAY(m->arena, Value *, nc + 1);
  for (int c = 0; c < nc; c++) {
    r->out[c]->dtype = carry[c]->dtype;
    r->out[c]->shape = carry[c]->shape;
    r->out[c]->sharding = carry[c]->sharding;
    Attrs sa = {0};
    sa.scalar = 1.0 / (double)k;
    mean[c] = ir_emit(g, OP_SCALE, 1, &r->out[c], carry[c]->dtype, carry[c]->shape, &sa, L);
    mean[c]->sharding = carry[c]->sharding;
  }
  for (int i = 0; i < nkeep; i++) {
    if (!late[i]) continue;
    Node *n = keep[i];
    for (int j = 0; j < n->nin; j++)
      for (int c = 0; c < nc; c++)
        if (n->in[j] == carry[c]) n->in[j] = mean[c];
    if (n->body)
      for (int c = 0; c < nc; c++) ir_replace_uses(n->body, carry[c], mean[c]);
    arena_grow(g->arena, (void **)&g->nodes, &g->capnodes, g->nnodes + 1, sizeof(Node *));
    g->nodes[g->nnodes++] = n;
  }
  free(late);
  for (int i = 0; i < g->nresults; i++)
    for (int c = 0; c < nc; c++)
      if (g->results[i] == carry[c]) g->results[i] = mean[c];
  return true;
}
