/* passes/fuse_order.c — before the fusion groups are formed (passes/fuse.c, CUDA target): elementwise
 * nodes moved next to the elementwise nodes they feed or read, over the GEMMs between, so that
 * one group (one kernel) can take them.
 *
 * passes/fuse.c groups only consecutive nodes; in a transformer's MLP a GEMM sits between the
 * elementwise parts (SwiGLU: `s = silu(x @ w_gate); u = x @ w_up; h = s * u`, and its backward's two
 * muls and silu_bwd around the gate's and the up projection's GEMMs). In each graph (region bodies
 * too, each on its own) three sweeps, each deterministic:
 *   1. hoist (first to last, repeated until nothing moves: a rise can leave an earlier node's input
 *      dying where it is read): an elementwise node c moves up to just after the node p that defines
 *      the last of its inputs, when p or the node after p may share c's group (elementwise over c's
 *      shape, c's stage) and every node between is movable over (below); the ARGs between that c
 *      reads move just before p.
 *   2. sink (last to first, repeated until nothing moves): an elementwise node p moves down to just
 *      before the first node r that reads it, when r may share p's group and every node between is
 *      movable over.
 *   A move crosses at least one node that would end the group (else the nodes group already) and at
 *   most FUSE_ORDER_SPAN positions.
 *   3. ARGs (a region's inputs: no inputs, no code, no memory of their own) that lie between two
 *      elementwise nodes that may share a group move up to just before the run the first belongs to.
 * A node is moved over only nodes of its own pipeline stage and schedule instruction (Node.instr),
 * never over a region-owning node, a collective, a send or receive, plan offload's copies or a host
 * node. Nodes another kernel computes with the node right before them stay where they are, and
 * nothing moves in between: an add or GELU right after the GEMM it reads (passes/epilogue.c's
 * epilogues), a GELU_BWD right after its GEMM (the DGELU epilogue, put there by fuse.c), a cast right
 * after the non-elementwise node it reads (an update's bf16 copy: ir_update_casts_copy).
 * Memory: a move never lengthens the live bytes between the old and the new place: a hoisted c only
 * when what it writes is at most what dies at c (the inputs no later node reads), a sunk p only
 * when the inputs that die at p are at most what it writes.
 */
#include "passes.h"

/* How far a node moves at most (positions): SwiGLU's moves span a dozen nodes; the bound keeps the pass
 * linear in the graph's size (a pipeline's unrolled top graph holds tens of thousands of nodes). */
enum { FUSE_ORDER_SPAN = 64 };

typedef struct {
  Graph *g;
  PtrMap last; /* Value* defined in g -> the node of g reading it last (itself or in its body); -1: g yields it */
  bool counted; /* last is built (when first needed) */
} Order;

/* What passes/fuse.c may put in a group (elementwise, one device output, no folded cast). */
static bool ew(const Node *n) {
  if (n->nout != 1 || n->out[0]->host || ir_cast_folded(n)) return false;
  return n->op == OP_CONST || n->op == OP_BROADCAST_TO || (ir_ops[n->op].flags & F_EW) != 0;
}

/* Whether a and b may be members of one group: elementwise over one shape, one stage, one instruction. */
static bool compat(const Node *a, const Node *b) {
  return ew(a) && ew(b) && ir_shape_eq(&a->out[0]->shape, &b->out[0]->shape) && ir_node_stages(a) == ir_node_stages(b) &&
         a->instr == b->instr;
}

/* Whether n reads v itself (not in a body). */
static bool reads(const Node *n, const Value *v) {
  for (int k = 0; k < n->nin; k++)
    if (n->in[k] == v) return true;
  return false;
}

/* The position of the computing node before position i of g, or -1. */
static int prev_op(const Graph *g, int i) {
  while (--i >= 0 && ir_enters(g->nodes[i])) {
  }
  return i;
}

/* Whether node i of g is computed with the node before it by one kernel: it neither moves nor gets
 * a node put in front of it. (A GEMM's epilogue may take two nodes: a bias add, then a GELU or a
 * residual add reading it.) */
static bool pinned(const Graph *g, int i) {
  const Node *n = g->nodes[i];
  bool epi = n->op == OP_ADD || n->op == OP_GELU;
  if (!epi && n->op != OP_GELU_BWD && n->op != OP_CAST) return false;
  int at = prev_op(g, i);
  if (at < 0 || g->nodes[at]->nout < 1 || !reads(n, g->nodes[at]->out[0])) return false;
  const Node *p = g->nodes[at];
  if (p->op == OP_MATMUL) return epi || n->op == OP_GELU_BWD;
  int m = prev_op(g, at); /* p a bias add right after its GEMM */
  if (epi && p->op == OP_ADD && m >= 0 && g->nodes[m]->op == OP_MATMUL && reads(p, g->nodes[m]->out[0])) return true;
  return n->op == OP_CAST && !ew(p);
}

/* Whether a node of stage and instruction like n's may move over q. */
static bool passable(const Node *q, const Node *n) {
  if (q->body || (ir_ops[q->op].flags & F_COLL) || q->op == OP_SEND || q->op == OP_RECV || q->op == OP_TO_HOST ||
      q->op == OP_TO_DEVICE)
    return false;
  for (int o = 0; o < q->nout; o++)
    if (q->out[o]->host) return false;
  return ir_node_stages(q) == ir_node_stages(n) && q->instr == n->instr;
}

static int64_t bytes(const Value *v) { return ir_numel(&v->shape) * ir_dtype_size(v->dtype); }

/* Records reader as the last reader so far of what n and its body read (values of o->g). */
static void note_reads(Order *o, const Node *n, const Node *reader) {
  for (int k = 0; k < n->nin; k++)
    if (n->in[k]->def->graph == o->g) ptrmap_put(&o->last, n->in[k], (intptr_t)reader);
  for (int i = 0; n->body && i < n->body->nnodes; i++) note_reads(o, n->body->nodes[i], reader);
}

static void count_last(Order *o) {
  const Graph *g = o->g;
  for (int i = 0; i < g->nnodes; i++) note_reads(o, g->nodes[i], g->nodes[i]);
  for (int i = 0; i < g->nresults; i++) ptrmap_put(&o->last, g->results[i], -1);
  o->counted = true;
}

/* The bytes of the inputs of n that die there: computed in g, no result, read by no later node. */
static int64_t dying_inputs(Order *o, const Node *n) {
  if (!o->counted) count_last(o);
  int64_t sum = 0;
  for (int k = 0; k < n->nin; k++) {
    const Value *v = n->in[k];
    intptr_t last = 0;
    bool dies = v->def->graph == o->g && !ir_enters(v->def) && !v->host && ptrmap_get(&o->last, v, &last) &&
                last == (intptr_t)n;
    for (int j = 0; j < k && dies; j++) dies = n->in[j] != v; /* counted once */
    if (dies) sum += bytes(v);
  }
  return sum;
}

/* Moves the node at `from` to position `to`, shifting those between one place; the positions follow. */
static void move(Order *o, int from, int to) {
  Graph *g = o->g;
  Node *n = g->nodes[from];
  if (from > to)
    for (int q = from; q > to; q--) g->nodes[q] = g->nodes[q - 1];
  else
    for (int q = from; q < to; q++) g->nodes[q] = g->nodes[q + 1];
  g->nodes[to] = n;
  ir_touch(g);
}

static bool may_move(const Graph *g, int i) {
  const Node *n = g->nodes[i];
  return ew(n) && !(n->op == OP_CAST && n->in[0]->dtype == n->out[0]->dtype) && !pinned(g, i);
}

static bool hoist(Order *o, int j) {
  Graph *g = o->g;
  Node *c = g->nodes[j];
  if (!may_move(g, j)) return false;
  int i = -1; /* the position of the last input's computing node */
  for (int k = 0; k < c->nin; k++) {
    const Node *d = c->in[k]->def;
    if (d->graph != g || ir_enters(d)) continue;
    int at = j - 1;
    while (at >= 0 && j - at <= FUSE_ORDER_SPAN && g->nodes[at] != d) at--;
    if (at >= 0 && j - at <= FUSE_ORDER_SPAN && at > i) i = at; /* (one further back is not the last) */
  }
  if (i < 0) return false;
  const Node *p = g->nodes[i];
  int nx = ir_next_computing(g, i); /* c's successor there */
  bool before = compat(p, c) && !pinned(g, i), after = nx < j && compat(g->nodes[nx], c) && !pinned(g, nx);
  if ((!before && !after) || (nx < j && pinned(g, nx))) return false;
  if (p->op == OP_MATMUL && (c->op == OP_ADD || c->op == OP_GELU || c->op == OP_GELU_BWD) && reads(c, p->out[0]))
    return false; /* c would be the GEMM's epilogue there, out of its group */
  bool between = false; /* a node between that ends a group */
  for (int q = i + 1; q < j; q++) {
    const Node *n = g->nodes[q];
    if (ir_enters(n) && n->op != OP_ARG && reads(c, n->out[0])) return false;
    if (!ir_enters(n) && !passable(n, c)) return false;
    between |= !ir_enters(n) && !compat(n, c);
  }
  if (!between || bytes(c->out[0]) > dying_inputs(o, c)) return false;
  for (int q = i + 1; q < j; q++) /* the ARGs c reads, before p (which stays next to c) */
    if (g->nodes[q]->op == OP_ARG && reads(c, g->nodes[q]->out[0])) move(o, q, i++);
  move(o, j, i + 1);
  for (int k = 0; k < c->nin; k++) { /* c read its inputs last: now a node it rose over may */
    intptr_t last = 0;
    if (!ptrmap_get(&o->last, c->in[k], &last) || last != (intptr_t)c) continue;
    for (int q = i + 2; q <= j; q++)
      if (reads(g->nodes[q], c->in[k])) ptrmap_put(&o->last, c->in[k], (intptr_t)g->nodes[q]);
  }
  return true;
}

static bool sink(Order *o, int i) {
  Graph *g = o->g;
  Node *p = g->nodes[i];
  if (!may_move(g, i)) return false;
  int j = i + 1;
  bool between = false; /* a node between that ends a group */
  for (; j < g->nnodes && j - i <= FUSE_ORDER_SPAN && !reads(g->nodes[j], p->out[0]); j++) {
    const Node *q = g->nodes[j];
    if (!ir_enters(q) && !passable(q, p)) return false; /* (a region: it might read p in its body) */
    between |= !ir_enters(q) && !compat(q, p);
  }
  if (j == g->nnodes || j - i > FUSE_ORDER_SPAN || !compat(p, g->nodes[j]) || pinned(g, j)) return false;
  if (!between || dying_inputs(o, p) > bytes(p->out[0])) return false;
  move(o, i, j - 1);
  for (int k = 0; k < p->nin; k++) { /* p now reads its inputs after the nodes it sank past */
    intptr_t last = 0;
    if (!ptrmap_get(&o->last, p->in[k], &last) || last == -1 || last == (intptr_t)p) continue;
    for (int q = i; q < j - 1; q++) /* (a last reader before p's old place cannot be: p read it later) */
      if (last == (intptr_t)g->nodes[q]) ptrmap_put(&o->last, p->in[k], (intptr_t)p);
  }
  return true;
}

static void close_gaps(Order *o) {
  Graph *g = o->g;
  for (int k = 1; k < g->nnodes; k++) {
    if (g->nodes[k]->op != OP_ARG) continue;
    int a = k - 1, b = ir_next_computing(g, k);
    while (a >= 0 && ir_enters(g->nodes[a])) a--;
    if (a < 0 || b == g->nnodes || !compat(g->nodes[a], g->nodes[b])) continue;
    int s = a;
    while (s > 0 && a - s < FUSE_ORDER_SPAN && compat(g->nodes[s - 1], g->nodes[a])) s--;
    move(o, k, s);
  }
}

void fuse_order(Graph *g) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) fuse_order(g->nodes[i]->body);
  Order o = {.g = g};
  for (bool moved = true; moved;) { /* nodes only rise: a move can let an earlier node rise next sweep */
    moved = false;
    for (int j = 0; j < g->nnodes; j++) moved |= hoist(&o, j);
  }
  for (bool moved = true; moved;) { /* then only sink */
    moved = false;
    for (int i = g->nnodes - 1; i >= 0; i--) moved |= sink(&o, i);
  }
  close_gaps(&o);
  ptrmap_free(&o.last);
}
