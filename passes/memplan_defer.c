/* passes/memplan_defer.c — where a loop body's deferred reduce-scatter is waited (Node.defer_wait).
 *
 * passes/zero_defer.c leaves a backward loop's gradient reduce-scatter unread in its iteration: its
 * result is a stacked output written in place into the iteration's row. Such a scatter
 * (memplan_defers_wait) is not waited at its iteration's end: its input stays live through the whole
 * body (plan_graph widens its interval, so nothing else shares its bytes), and the next iteration
 * waits for it before the first node that writes those bytes again (its producers', placed in it);
 * the last iteration's right after the loop. The scatter of iteration i thereby overlaps iteration
 * i + 1's backward up to where the layer's packed gradient is made again. codegen/emit.c emits the
 * waits there, passes/cost.c times them there.
 *
 * A loop that `zb_w hold(N)` cut (passes/recompute_split.c: Node.cont, the loop over the rows run next)
 * continues in its cont: where memplan_defer_next pairs a deferred scatter of the first loop with the
 * same one of the second, both scatters' inputs take the same bytes, held at the enclosing graph from the
 * first loop through the second (plan_graph: an interval of their own, not in either body's block), and the
 * first loop's last iteration's scatter is waited in the second's first iteration before the node that
 * writes those bytes again (Node.defer_last), as one loop's next iteration would; its readers (the lifted
 * unpacking, passes/zero_defer.c) go after the second loop.
 */
#include "memplan.h"

#include "commreport.h"
#include "memplan_pack.h"
#include "memplan_views.h"
#include "passes.h"
#include "zero.h"

static int64_t vbytes(const Value *v) { return ir_numel(&v->shape) * ir_dtype_size(v->dtype); }

bool memplan_defers_wait(const Node *n) {
  const Graph *b = n->graph;
  const Node *r = b->owner;
  if (n->op != OP_REDUCE_SCATTER || !ir_comm_async(n) || !zero_defer_loop(r) || ir_node_stages(n))
    return false;
  const Value *x = n->in[0], *y = n->out[0];
  if (x->def->graph != b || x->def->op == OP_ARG) return false;
  for (int i = 0; i < b->nnodes; i++)
    for (int j = 0; j < b->nodes[i]->nin; j++)
      if (b->nodes[i]->in[j] == y) return false; /* read in its iteration */
  bool stacked = false;
  for (int k = 0; k < b->nresults; k++)
    if (b->results[k] == y) {
      if (k < r->a.ncarry) return false; /* a carry: read by the next iteration */
      stacked = true;
    }
  return stacked;
}

/* The index of deferred scatter s among its body's (body order), and the count of them. */
static int deferred_index(const Graph *b, const Node *s, int *count) {
  int k = -1, c = 0;
  for (int i = 0; i < b->nnodes; i++)
    if (memplan_defers_wait(b->nodes[i])) {
      if (b->nodes[i] == s) k = c;
      c++;
    }
  *count = c;
  return k;
}


/* A deferred scatter's input the plan may hold outside its body: made by a node of its own place (not a view, a folded
 * cast, a column concat, a stacked result) and read by the scatter alone. */
static bool holdable(const Node *s) {
  const Value *x = s->in[0];
  const Node *d = x->def;
  const Graph *b = s->graph;
  if (x->host || memplan_is_view(d) || d->cast_folded || memplan_col_concat(d) || ir_is_result(b, x)) return false;
  for (int i = 0; i < b->nnodes; i++) {
    const Node *n = b->nodes[i];
    for (int j = 0; j < n->nin; j++)
      if (n->in[j] == x && n != s) return false;
    if (n->body && ir_reads_deep(n->body, x)) return false;
  }
  return true;
}

Node *memplan_defer_next(const Node *s) {
  if (!memplan_defers_wait(s)) return NULL;
  const Graph *b = s->graph;
  const Node *r = b->owner, *c = r->cont;
  const Graph *g = r->graph;
  if (!c || c->graph != g || c->op != OP_REPEAT || !c->body || ir_node_stages(c) != ir_node_stages(r)) return NULL;
  int n1, n2, k = deferred_index(b, s, &n1);
  const Value *y = NULL; /* s's row of r's stacked output: read by nothing up to the wait in c */
  for (int q = r->a.ncarry; q < b->nresults; q++)
    if (b->results[q] == s->out[0]) y = r->out[q];
  if (k < 0 || !y || !holdable(s)) return NULL;
  Node *s2 = NULL;
  for (int i = 0, at = 0; i < c->body->nnodes && !s2; i++)
    if (memplan_defers_wait(c->body->nodes[i]) && at++ == k) s2 = c->body->nodes[i];
  deferred_index(c->body, s2, &n2);
  if (!s2 || n2 != n1 || !holdable(s2) || s2->in[0]->dtype != s->in[0]->dtype ||
      ir_numel(&s2->in[0]->shape) != ir_numel(&s->in[0]->shape))
    return NULL;
  int i = 0;
  while (i < g->nnodes && g->nodes[i] != r) i++;
  for (i++; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++)
      if (n->in[j] == y) return NULL;
    if (n->body && ir_reads_deep(n->body, y)) return NULL;
    if (n == c) return s2;
  }
  return NULL;
}

void memplan_held_pairs(Graph *g, int i, Intervals *p) {
  Node *n = g->nodes[i];
  for (int j = 0; j < n->body->nnodes; j++) {
    Node *s = n->body->nodes[j];
    Node *s2 = memplan_defer_next(s);
    if (!s2 || s->in[0]->offset == MEMPLAN_HELD || s2->in[0]->offset == MEMPLAN_HELD) continue;
    int end = i + 1;
    while (end < g->nnodes && g->nodes[end] != n->cont) end++;
    Interval *it = memplan_add_interval(p, NULL, vbytes(s->in[0]), i, MEM_ACT);
    it->end = end;
    it->stage = n->stage, it->set = n->stageset;
    it->held[0] = s->in[0], it->held[1] = s2->in[0];
    s->in[0]->offset = s2->in[0]->offset = MEMPLAN_HELD;
    s->defer_last = s2;
  }
}

void memplan_place_held(const Intervals *p, int64_t base, MemPlan *mp) {
  for (int i = 0; i < p->n; i++)
    for (int k = 0; k < 2 && p->iv[i].held[0]; k++) {
      Value *x = p->iv[i].held[k];
      x->offset = base + p->iv[i].offset;
      x->stride = 0;
      x->mclass = p->iv[i].mclass;
      mp->nvalues++;
    }
}

/* Whether deferred scatter n's input has bytes of its own in the body and its result is written in place
 * into its row of the loop's stacked output (nothing copies it there at the iteration's end). */
static bool placed(const Node *n) {
  const Value *x = n->in[0], *y = n->out[0];
  if (x->offset < 0 || x->stride || x->host || x->last_in) return false;
  const Graph *b = n->graph;
  const Node *r = b->owner;
  for (int k = r->a.ncarry; k < b->nresults; k++)
    if (b->results[k] == y && (y->offset != r->out[k]->offset || y->stride != vbytes(y))) return false;
  return true;
}

/* The first of g's nodes before upto writing bytes [lo, hi) (values with a place of their own), else upto. */
static int first_writer(const Graph *g, int64_t lo, int64_t hi, int upto) {
  for (int j = 0; j < upto; j++) {
    const Node *w = g->nodes[j];
    if (ir_enters(w)) continue;
    for (int o = 0; o < w->nout; o++) {
      const Value *v = w->out[o];
      if (v->offset < 0 || v->stride || v->host || v->last_in) continue;
      if (v->offset < hi && v->offset + vbytes(v) > lo) return j;
    }
  }
  return upto;
}

static int position_in(const Node *n) {
  int i = 0;
  while (n->graph->nodes[i] != n) i++;
  return i;
}

/* Sets defer_wait of the deferred scatters of g's loop bodies (nested too), once every offset is final;
 * not on: none (each waited at its iteration's end). */
void memplan_defer_waits(Graph *g, bool on) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->body) memplan_defer_waits(n->body, on);
    const Node *s2 = n->defer_last; /* (the pair the plan held in one place: memplan_held_pairs) */
    n->defer_wait = n->defer_last = NULL;
    if (!on || !memplan_defers_wait(n) || !placed(n)) continue; /* (else waited at the iteration's end, codegen/emit.c) */
    const Value *x = n->in[0];
    /* the first node writing x's bytes: at the latest x's producer */
    n->defer_wait = g->nodes[first_writer(g, x->offset, x->offset + vbytes(x), i)];
    /* the last iteration's: in the loop continuing this one, where its scatter's input (held in the same bytes) is made */
    if (s2 && placed(s2) && s2->in[0]->offset == x->offset)
      n->defer_last = s2->graph->nodes[first_writer(s2->graph, x->offset, x->offset + vbytes(x), position_in(s2))];
  }
}
