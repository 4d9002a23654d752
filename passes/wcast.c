/* passes/wcast.c — the `wcast` pass: the bf16 copy of a stacked weight is made one layer at a time,
 * inside each layer loop that reads it, instead of for every layer before the loops.
 *
 * Under bf16 compute (passes/precision.c) a stacked weight `[layers, ...]` f32 is cast to bf16 once
 * per micro-step and the forward and the backward loop read the bf16 stack row by row: 2 B x the
 * layers' P_rank alive from the forward to the end of the backward (GPT-3 175B at tp 8: 40.5 GiB,
 * most of what recompute leaves). Here each loop reads the f32 stack instead and casts its row at
 * the top of its body (one layer's bf16 copy, a transient of the body). The same bits: the cast is
 * the same, done once per loop instead of once per micro-step (a pass over the weights per loop,
 * cheap beside the layer's matmuls). Not under ZeRO-3, whose layer loops gather the bf16 copy's
 * rows already (the loops would gather the f32 rows instead: twice the bytes). Where passes/wshadow.c
 * keeps persistent bf16 copies of the weights (`weight_copy`, decided per plan) there is no cast left
 * to move: compute reads the copies; this pass moves the casts of a plan that keeps none.
 */
#include <string.h>

#include "passes.h"
#include "zero.h"

/* Whether every use of v in g is a stacked input (xs, row by row: no `next`) of a repeat of g. */
static bool read_as_rows(const Graph *g, const Value *v) {
  for (int r = 0; r < g->nresults; r++)
    if (g->results[r] == v) return false;
  int uses = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++) {
      if (n->in[j] != v) continue;
      if (n->op != OP_REPEAT || j < n->a.ncarry || j >= n->a.ncarry + n->a.nxs || n->body->args[j]->a.next)
        return false;
      uses++;
    }
  }
  return uses > 0;
}

/* Repeat n reads the f32 stack w as input j (for its bf16 copy): its body casts the row. */
static void cast_in_body(Node *n, int j, Value *w, const Node *cast) {
  Graph *b = n->body;
  Value *a = b->args[j]->out[0];
  n->in[j] = w;
  Value *c = ir_emit(b, OP_CAST, 1, &a, a->dtype, a->shape, &cast->a, cast->loc);
  c->sharding = a->sharding;
  c->name = a->name;
  a->dtype = w->dtype; /* the row of the f32 stack */
  Node *cn = c->def;
  ir_replace_uses(b, a, c);
  cn->in[0] = a;
  int at = 0; /* right after the argument's node */
  while (at < b->nnodes && b->nodes[at] != a->def) at++;
  if (at < b->nnodes && a->shape.rank == 1) {
    /* a bias row: the argument and its cast at the top of the body, so that nothing lies between a
     * matmul and its bias add that a GEMM epilogue could not compute first (passes/epilogue.c) */
    Node *an = b->nodes[at];
    memmove(&b->nodes[1], &b->nodes[0], sizeof(Node *) * (size_t)at);
    b->nodes[0] = an;
    at = 0;
  }
  ir_move_last(b, at + 1);
}

static void wcast_graph(Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->body) wcast_graph(n->body);
    if (n->op != OP_CAST || n->in[0]->dtype != DT_F32 || n->out[0]->dtype != DT_BF16) continue;
    Value *w = n->in[0], *x = n->out[0];
    if (w->shape.rank < 2 || !read_as_rows(g, x)) continue;
    for (int k = i + 1; k < g->nnodes; k++) {
      Node *r = g->nodes[k];
      for (int j = 0; j < r->nin; j++)
        if (r->in[j] == x) cast_in_body(r, j, w, n);
    }
    ir_drop_node(g, n);
    i--;
  }
}

bool pass_wcast(Module *m) {
  /* the CPU target's casts (passes/gemm_cast.c) are its GEMM operands, made once per step on
   * purpose (its activations are f32: the memory is the 2 B per parameter of the copy) */
  if (m->target != TARGET_CUDA) return true;
  if (m->mesh && m->mesh->dim[RT_AX_PP] > 1) return true; /* (the pipeline's stages: left as they are) */
  /* ZeRO-3 keeps the bf16 copy split over its group and gathers it per layer (passes/zero.c: the gather
   * moves past the cast, half the bytes of the f32 shard): already a layer at a time */
  if (zero_splits_params(m)) return true;
  wcast_graph(m->graph);
  return true;
}
