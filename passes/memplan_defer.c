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
 */
#include "memplan.h"

#include "commreport.h"
#include "passes.h"

static int64_t vbytes(const Value *v) { return ir_numel(&v->shape) * ir_dtype_size(v->dtype); }

bool memplan_defers_wait(const Node *n) {
  const Graph *b = n->graph;
  const Node *r = b->owner;
  if (n->op != OP_REDUCE_SCATTER || !ir_comm_async(n) || !r || r->op != OP_REPEAT || r->a.count < 2 || ir_node_stages(n))
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

/* Sets defer_wait of the deferred scatters of g's loop bodies (nested too), once every offset is final;
 * not on: none (each waited at its iteration's end). */
void memplan_defer_waits(Graph *g, bool on) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->body) memplan_defer_waits(n->body, on);
    n->defer_wait = NULL;
    if (!on || !memplan_defers_wait(n) || !placed(n)) continue; /* (else waited at the iteration's end, codegen/emit.c) */
    const Value *x = n->in[0];
    int64_t lo = x->offset, hi = lo + vbytes(x);
    int at = i; /* the first node writing x's bytes: at the latest x's producer */
    for (int j = 0; j < i && at == i; j++) {
      const Node *w = g->nodes[j];
      if (ir_enters(w)) continue;
      for (int o = 0; o < w->nout; o++) {
        const Value *v = w->out[o];
        if (v->offset < 0 || v->stride || v->host || v->last_in) continue;
        if (v->offset < hi && v->offset + vbytes(v) > lo) at = j;
      }
    }
    n->defer_wait = g->nodes[at];
  }
}
