/* passes/peel.c — the `peel` pass: the last micro-step of gradient accumulation runs outside its
 * region, so the data-parallel gradient reduction overlaps its backward.
 *
 * After `accum`, the gradients' dp all-reduces read the mean of each running sum after the
 * `repeat accum xk` region: every byte of communication waits for the last micro-step's whole
 * backward. With dp > 1 this pass runs the region k-1 times and the k-th micro-step after it, a
 * copy of the body at the top level (the layer loops copied too), whose inputs are the region's
 * outputs (the sums so far) and row k-1 of the per-step inputs. Its sums `sum + g` feed the means
 * in place of the region's outputs. A layer's gradient comes out of the copied backward loop
 * stacked; that loop now also reads the sum so far as a stacked input and yields, per layer,
 * `(sum_l + g_l) / k` — so the all-reduce reads the loop's stacked output, and `buckets` moves it
 * into the loop right after the layer's gradient, as without accumulation: layer l's gradients are
 * reduced while layer l-1's backward runs. The other gradients' sums (embedding, final norm, the
 * head) are ready where the last micro-step computes them, and `buckets` starts their all-reduce
 * there. The arithmetic is the region's: the same adds in the same order, the same scale.
 */
#include <string.h>

#include "diag.h"
#include "passes.h"
#include "ptrmap.h"

typedef struct {
  Graph *g;    /* the top graph */
  PtrMap map;  /* body value -> its copy (or the value standing for it) */
} Peel;

static Value *mapped(const Peel *p, Value *v) {
  intptr_t c;
  return ptrmap_get(&p->map, v, &c) ? (Value *)c : v; /* unmapped: read from an enclosing graph */
}

static void copy_type(Value *to, const Value *from) {
  to->dtype = from->dtype;
  to->shape = from->shape;
  to->sharding = from->sharding;
  to->name = from->name;
}

static Graph *copy_body(Peel *p, const Graph *src, Graph *parent);

/* A copy of n appended to g, reading the copies of its inputs. */
static Node *copy_node(Peel *p, Graph *g, const Node *n) {
  Value **in = ARENA_ARRAY(g->arena, Value *, n->nin + 1);
  for (int j = 0; j < n->nin; j++) in[j] = mapped(p, n->in[j]);
  Node *c = ir_node_new(g, n->op, n->nin, in, n->nout, n->loc);
  c->a = n->a;
  for (int k = 0; k < n->nout; k++) {
    copy_type(c->out[k], n->out[k]);
    ptrmap_put(&p->map, n->out[k], (intptr_t)c->out[k]);
  }
  if (n->body) {
    c->body = copy_body(p, n->body, g);
    c->body->owner = c;
  }
  return c;
}

static Graph *copy_body(Peel *p, const Graph *src, Graph *parent) {
  Graph *b = ir_graph_new(parent->arena, parent);
  for (int k = 0; k < src->nargs; k++) {
    const Value *a = src->args[k]->out[0];
    Node *an = ir_add_arg(b, a->dtype, a->shape, a->name);
    an->out[0]->sharding = a->sharding;
    ptrmap_put(&p->map, a, (intptr_t)an->out[0]);
  }
  for (int i = 0; i < src->nnodes; i++)
    if (src->nodes[i]->op != OP_ARG) copy_node(p, b, src->nodes[i]);
  for (int r = 0; r < src->nresults; r++)
    ir_add_result(b, mapped(p, src->results[r]), src->result_names ? src->result_names[r] : NULL);
  return b;
}

bool pass_peel(Module *m) {
  Graph *g = m->graph;
  if (m->batch.accum <= 1 || !m->mesh || m->mesh->dim[RT_AX_DP] <= 1) return true;
  if (m->mesh->dim[RT_AX_PP] > 1) return true; /* the pipeline schedule (stage, pipe) owns the micro-steps */
  int at = -1;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_REPEAT && g->nodes[i]->a.name && strcmp(g->nodes[i]->a.name, "accum") == 0) at = i;
  if (at < 0) die("peel: no accumulation region");
  Node *r = g->nodes[at];
  Graph *body = r->body;
  int64_t k = r->a.count;
  int nc = r->a.ncarry, nx = r->a.nxs;
  Peel p = {g, {0}};
  /* the copy's inputs: the sums so far, row k-1 of the per-step inputs */
  int n0 = g->nnodes;
  for (int c = 0; c < nc; c++) ptrmap_put(&p.map, body->args[c]->out[0], (intptr_t)r->out[c]);
  for (int q = 0; q < nx; q++) {
    Value *a = body->args[nc + q]->out[0];
    ptrmap_put(&p.map, a, (intptr_t)ir_stacked_row(g, r->in[nc + q], k - 1, a, r->loc));
  }
  for (int i = 0; i < body->nnodes; i++)
    if (body->nodes[i]->op != OP_ARG) copy_node(&p, g, body->nodes[i]);
  r->a.count = k - 1;
  /* the region reads rows 0 .. k-2 (a stacked input's leading dim is the iteration count) */
  Value **lead = ARENA_ARRAY(g->arena, Value *, nx + 1);
  int n1 = g->nnodes;
  for (int q = 0; q < nx; q++) {
    Value *x = r->in[nc + q];
    Attrs sa = {0};
    sa.axis = 0;
    sa.len = k - 1;
    Shape sh = x->shape;
    sh.dim[0] = k - 1;
    lead[q] = ir_emit(g, OP_SLICE, 1, &x, x->dtype, sh, &sa, r->loc);
    lead[q]->sharding = x->sharding;
  }
  /* the copy runs right after the region, the region's row slices right before it */
  int nnew = n1 - n0;
  Node **fresh = ARENA_ARRAY(g->arena, Node *, g->nnodes + 1);
  memcpy(fresh, g->nodes, (size_t)g->nnodes * sizeof(Node *));
  int w = 0;
  for (int i = 0; i < at; i++) g->nodes[w++] = fresh[i];
  for (int i = n1; i < n1 + nx; i++) g->nodes[w++] = fresh[i];
  g->nodes[w++] = r;
  for (int i = n0; i < n1; i++) g->nodes[w++] = fresh[i];
  for (int i = at + 1; i < n0; i++) g->nodes[w++] = fresh[i];
  if (w != g->nnodes || nnew < 0) die("peel: lost nodes");
  for (int q = 0; q < nx; q++) r->in[nc + q] = lead[q];
  /* each mean reads the last micro-step's sum; a layer's, from inside the copied backward loop */
  for (int c = 0; c < nc; c++) {
    Value *out = r->out[c], *fin = mapped(&p, body->results[c]);
    Node *mean = NULL;
    for (int i = 0; i < g->nnodes && !mean; i++)
      if (g->nodes[i]->op == OP_SCALE && g->nodes[i]->in[0] == out) mean = g->nodes[i];
    if (!mean) die("peel: carry %d has no mean", c);
    Node *add = fin->def;
    Value *grad = add->op == OP_ADD && add->graph == g ? (add->in[0] == out ? add->in[1] : add->in[0]) : NULL;
    Value *looped = grad && ir_count_uses(g, fin) == 0 ? loop_sum(g, out, grad, add, mean) : NULL;
    if (looped) {
      ir_replace_uses(g, mean->out[0], looped);
      for (int i = 0; i < g->nresults; i++)
        if (g->results[i] == mean->out[0]) g->results[i] = looped;
      ir_drop_node(g, mean); /* the top-level add and scale are dead now */
      ir_drop_node(g, add);
      continue;
    }
    mean->in[0] = fin;
  }
  ptrmap_free(&p.map);
  return true; /* (the order is topological by construction: the copy follows the region) */
}
