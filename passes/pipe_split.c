/* passes/pipe_split.c — the zero-bubble schedule's split of a backward layer loop (passes/pipe.c).
 *
 * A backward `repeat` over the layers computes, per layer, the gradient of its input (the carried
 * value, which the stage before waits for) and the gradients of its weights (stacked outputs,
 * which nothing waits for until the step's end). ZB-H1 runs them apart: B, the input gradients
 * only, as soon as it can, and W, the weight gradients, where the stage would otherwise idle.
 * pipe_split_backward cuts the loop R in two reverse loops over the same layers:
 *   Rb  R's body without what only the weight gradients need; its outputs: the carry, and
 *       stacked per layer the values the weight gradients read from it (the hand-off), and the
 *       weight gradients it makes itself (a norm's, made with its input's gradient);
 *   Rw  no carry; reads the stacked inputs of R its nodes read (not those B alone reads: held to W for
 *       nothing) and the hand-off; yields R's other stacked outputs.
 * Every node is a clone of one of R's body (the same op, attributes, shapes and shardings), each
 * computed once, so the gradients are bit-identical to R's.
 */
#include <stdlib.h>

#include "clone.h"
#include "diag.h"
#include "passes.h"
#include "pipe_sched.h"
#include "ptrmap.h"


static bool in_list(Value *const *l, int n, const Value *v) {
  for (int i = 0; i < n; i++)
    if (l[i] == v) return true;
  return false;
}

static void mark(const Graph *g, const Value *v, bool *on) {
  const Node *d = v->def;
  if (d->graph != g || d->op == OP_ARG) return;
  int i = 0;
  while (g->nodes[i] != d) i++;
  if (on[i]) return;
  on[i] = true;
  for (int j = 0; j < d->nin; j++) mark(g, d->in[j], on);
}

/* A send has no output: nothing reached from the results marks it. Each send goes with its receive
 * (the next recv of the same axis and tag, from the opposite offset: shard_cp.c's ring hops), into
 * the loop of that receive's readers, with what it sends; repeated until nothing more is marked
 * (a send's data may come from another hop). Without it the split dropped every ring hop of the
 * backward loop (cp ring x zb: a recv with no send on the peer rank). */
static void mark_sends(const Graph *g, bool *on) {
  for (bool more = true; more;) {
    more = false;
    for (int i = 0; i < g->nnodes; i++) {
      const Node *s = g->nodes[i];
      if (s->op != OP_SEND || on[i]) continue;
      for (int k = i + 1; k < g->nnodes; k++) {
        const Node *r = g->nodes[k];
        if (r->op != OP_RECV || r->a.mesh_axis != s->a.mesh_axis || r->a.tag != s->a.tag || r->a.start != -s->a.start)
          continue;
        if (on[k]) {
          on[i] = more = true;
          mark(g, s->in[0], on);
        }
        break;
      }
    }
  }
}

static Node *clone(Graph *dst, const Node *d, PtrMap *memo) {
  Value **in = ARENA_ARRAY(dst->arena, Value *, d->nin + 1);
  for (int j = 0; j < d->nin; j++) {
    intptr_t got;
    in[j] = ptrmap_get(memo, d->in[j], &got) ? (Value *)got : d->in[j];
  }
  if (d->body) die("pipe: a region inside the backward layer loop (zb cannot split it)");
  return ir_clone_node(dst, d, in, memo);
}

static Node *arg_like(Graph *b, const Value *v, PtrMap *memo) {
  Node *a = ir_add_arg(b, v->dtype, v->shape, v->name);
  a->out[0]->sharding = v->sharding;
  ptrmap_put(memo, v, (intptr_t)a->out[0]);
  return a;
}

static Sharding stacked_sharding(Sharding h) {
  return ir_sharding_shift(h, 1);
}

bool pipe_split_backward(Graph *outer, Node *R, Node **rb, Node **rw) {
  Graph *g = R->body;
  int nc = R->a.ncarry, nx = R->a.nxs, n = g->nnodes;
  bool *bset = calloc((size_t)n + 1, sizeof(bool)), *wset = calloc((size_t)n + 1, sizeof(bool));
  if (!bset || !wset) die("out of memory");
  for (int c = 0; c < nc; c++) mark(g, g->results[c], bset);
  for (int r = nc; r < g->nresults; r++) mark(g, g->results[r], wset);
  mark_sends(g, bset);
  mark_sends(g, wset);
  for (int i = 0; i < n; i++) wset[i] = wset[i] && !bset[i];
  /* the hand-off: what W reads that B makes, or the carry argument */
  Value **h = ARENA_ARRAY(outer->arena, Value *, 1);
  int nh = 0, caph = 1;
  for (int i = 0; i < n; i++) {
    if (!wset[i]) continue;
    const Node *x = g->nodes[i];
    for (int j = 0; j < x->nin; j++) {
      Value *u = x->in[j];
      bool from_b = false;
      if (u->def->graph == g && u->def->op == OP_ARG) from_b = u->def->a.index < nc;
      else if (u->def->graph == g)
        for (int k = 0; k < n; k++) from_b |= g->nodes[k] == u->def && bset[k];
      if (!from_b || in_list(h, nh, u)) continue;
      arena_grow(outer->arena, (void **)&h, &caph, nh + 1, sizeof(Value *));
      h[nh++] = u;
    }
  }
  /* a weight gradient B makes itself: B yields it (after the hand-off; W reads it only if its
   * nodes do), so that B's loop can add it to the stage's sum (passes/pipe_fold.c) */
  int nhw = nh; /* the hand-off W reads: h[0 .. nhw) */
  char *own = calloc((size_t)g->nresults + 1, 1); /* result r: B's (at h[own_at[r]]) */
  int *own_at = calloc((size_t)g->nresults + 1, sizeof(int));
  if (!own || !own_at) die("out of memory");
  for (int r = nc; r < g->nresults; r++) {
    Value *u = g->results[r];
    bool from_b = u->def->graph == g && (u->def->op == OP_ARG ? u->def->a.index < nc : false);
    for (int k = 0; k < n && !from_b; k++) from_b = g->nodes[k] == u->def && bset[k];
    if (!from_b) continue;
    own[r] = 1;
    int k = 0;
    while (k < nh && h[k] != u) k++;
    if (k == nh) {
      arena_grow(outer->arena, (void **)&h, &caph, nh + 1, sizeof(Value *));
      h[nh++] = u;
    }
    own_at[r] = k;
  }
  /* Rb: R's arguments, the B nodes; yields the carry and the hand-off */
  PtrMap mb = {0}, mw = {0};
  Graph *bb = ir_graph_new(outer->arena, outer);
  for (int a = 0; a < g->nargs; a++) arg_like(bb, g->args[a]->out[0], &mb);
  for (int i = 0; i < n; i++)
    if (bset[i] && g->nodes[i]->op != OP_ARG) clone(bb, g->nodes[i], &mb);
  for (int r = 0; r < nc + nh; r++) {
    intptr_t got;
    Value *v = r < nc ? g->results[r] : h[r - nc];
    ir_add_result(bb, ptrmap_get(&mb, v, &got) ? (Value *)got : v, NULL);
  }
  Node *B = ir_node_new(outer, OP_REPEAT, R->nin, R->in, nc + nh, R->loc);
  B->a = R->a;
  B->body = bb;
  bb->owner = B;
  for (int c = 0; c < nc; c++) {
    B->out[c]->dtype = R->out[c]->dtype;
    B->out[c]->shape = R->out[c]->shape;
    B->out[c]->sharding = R->out[c]->sharding;
  }
  for (int k = 0; k < nh; k++) {
    Value *o = B->out[nc + k];
    o->dtype = h[k]->dtype;
    o->shape = ir_stacked_shape(h[k]->shape, R->a.count);
    o->sharding = stacked_sharding(h[k]->sharding);
  }
  /* Rw: the xs of R its nodes read and the hand-off as xs, R's captured values; the W nodes; yields R's other ys.
   * An x of R that B alone reads (the layer's input, the attention's inputs, under `recompute none` all but the
   * weight-gradient GEMMs' inputs) W does not take: its stack is freed after B, not held to W. */
  bool *wx = calloc((size_t)nx + 1, sizeof(bool));
  if (!wx) die("out of memory");
  for (int i = 0; i < n; i++)
    for (int j = 0; wset[i] && j < g->nodes[i]->nin; j++) {
      const Node *d = g->nodes[i]->in[j]->def;
      if (d->graph == g && d->op == OP_ARG && d->a.index >= nc && d->a.index < nc + nx) wx[d->a.index - nc] = true;
    }
  for (int r = nc; r < g->nresults; r++) { /* (an x yielded as it is, by W) */
    const Node *d = g->results[r]->def;
    if (!own[r] && d->graph == g && d->op == OP_ARG && d->a.index >= nc && d->a.index < nc + nx) wx[d->a.index - nc] = true;
  }
  int nwx = 0;
  for (int i = 0; i < nx; i++) nwx += wx[i];
  Graph *wb = ir_graph_new(outer->arena, outer);
  int nin = nwx + nhw + (R->nin - nc - nx);
  Value **win = ARENA_ARRAY(outer->arena, Value *, nin + 1);
  int q = 0;
  for (int i = nc; i < nc + nx; i++) {
    if (!wx[i - nc]) continue;
    win[q++] = R->in[i];
    arg_like(wb, g->args[i]->out[0], &mw);
  }
  free(wx);
  for (int k = 0; k < nhw; k++) {
    win[q++] = B->out[nc + k];
    arg_like(wb, h[k], &mw);
  }
  for (int i = nc + nx; i < R->nin; i++) {
    win[q++] = R->in[i];
    arg_like(wb, g->args[i]->out[0], &mw);
  }
  for (int i = 0; i < n; i++)
    if (wset[i] && g->nodes[i]->op != OP_ARG) clone(wb, g->nodes[i], &mw);
  int nw = 0, *w_at = calloc((size_t)g->nresults + 1, sizeof(int)); /* result r: W's output w_at[r] */
  if (!w_at) die("out of memory");
  for (int r = nc; r < g->nresults; r++) {
    intptr_t got;
    if (own[r]) continue;
    if (!ptrmap_get(&mw, g->results[r], &got)) die("pipe: a weight gradient of the backward loop has no value in W");
    ir_add_result(wb, (Value *)got, NULL);
    w_at[r] = nw++;
  }
  Node *W = ir_node_new(outer, OP_REPEAT, nin, win, nw, R->loc);
  W->a = R->a;
  W->a.ncarry = 0;
  W->a.nxs = nwx + nhw;
  W->body = wb;
  wb->owner = W;
  for (int r = nc; r < R->nout; r++) {
    if (own[r]) continue;
    W->out[w_at[r]]->dtype = R->out[r]->dtype;
    W->out[w_at[r]]->shape = R->out[r]->shape;
    W->out[w_at[r]]->sharding = R->out[r]->sharding;
  }
  ptrmap_free(&mb);
  ptrmap_free(&mw);
  free(bset);
  free(wset);
  /* in the outer graph: R's place, B then W; R's readers read theirs */
  Value **to = malloc(((size_t)R->nout + 1) * sizeof *to);
  if (!to) die("pipe: out of memory");
  for (int r = 0; r < R->nout; r++) to[r] = r < nc ? B->out[r] : own[r] ? B->out[nc + own_at[r]] : W->out[w_at[r]];
  free(own);
  free(own_at);
  free(w_at);
  ir_replace_uses_many(outer, R->nout, R->out, to);
  free(to);
  int pos = 0;
  while (outer->nodes[pos] != R) pos++;
  /* ir_node_new appended B and W at the end: move them to R's place */
  outer->nnodes -= 2;
  outer->nodes[pos] = B;
  arena_grow(outer->arena, (void **)&outer->nodes, &outer->capnodes, outer->nnodes + 1, sizeof(Node *));
  for (int i = outer->nnodes; i > pos + 1; i--) outer->nodes[i] = outer->nodes[i - 1];
  outer->nodes[pos + 1] = W;
  outer->nnodes++;
  ir_touch(outer);
  *rb = B;
  *rw = W;
  return true;
}
