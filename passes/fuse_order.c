/* passes/fuse_order.c — before the fusion groups are formed (passes/fuse.c, CUDA target): elementwise
 * nodes moved next to the elementwise nodes they feed or read, over the GEMMs between, so that
 * one group (one kernel) can take them.
 *
 * passes/fuse.c groups only consecutive nodes; in a transformer's MLP a GEMM sits between the
 * elementwise parts (SwiGLU: `s = silu(x @ w_gate); u = x @ w_up; h = s * u`, and its backward's two
 * muls and silu_bwd around the gate's and the up projection's GEMMs). In each graph (region bodies
 * too, each on its own) three sweeps, each deterministic:
 *   1. hoist (first to last): an elementwise node c moves up to just after the elementwise node p that
 *      defines the last of its inputs, when p may share c's group (elementwise, c's shape and stage)
 *      and every node between is movable over (below); the ARGs between that c reads move just before p.
 *   2. sink (last to first): an elementwise node p moves down to just before the first node r that
 *      reads it, when r may share p's group and every node between is movable over.
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

static bool enters(const Node *n) { return n->op == OP_ARG || n->op == OP_PARAM || n->op == OP_STATE || n->op == OP_INPUT; }

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

/* Whether n (or a node of its body) reads v. */
static bool reads(const Node *n, const Value *v) {
  for (int k = 0; k < n->nin; k++)
    if (n->in[k] == v) return true;
  if (n->body)
    for (int i = 0; i < n->body->nnodes; i++)
      if (reads(n->body->nodes[i], v)) return true;
  return false;
}

/* The position of the computing node before position i of g, or -1. */
static int prev_op(const Graph *g, int i) {
  while (--i >= 0 && enters(g->nodes[i])) {
  }
  return i;
}

/* Whether node i of g is computed with the node before it by one kernel: it neither moves nor gets
 * a node put in front of it. (A GEMM's epilogue may take two nodes: a bias add, then a GELU or a
 * residual add reading it.) */
static bool pinned(const Graph *g, int i) {
  const Node *n = g->nodes[i];
  int at = prev_op(g, i);
  if (at < 0 || g->nodes[at]->nout < 1 || !reads(n, g->nodes[at]->out[0])) return false;
  const Node *p = g->nodes[at];
  bool epi = n->op == OP_ADD || n->op == OP_GELU;
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

static bool is_result(const Graph *g, const Value *v) {
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == v) return true;
  return false;
}

/* The bytes of the inputs of the node at i that die there: computed in g, no result, read by no later node. */
static int64_t dying_inputs(const Graph *g, int i) {
  const Node *n = g->nodes[i];
  int64_t sum = 0;
  for (int k = 0; k < n->nin; k++) {
    const Value *v = n->in[k];
    bool dies = v->def->graph == g && !enters(v->def) && !v->host && !is_result(g, v);
    for (int j = 0; j < k && dies; j++) dies = n->in[j] != v; /* counted once */
    for (int q = i + 1; q < g->nnodes && dies; q++) dies = !reads(g->nodes[q], v);
    if (dies) sum += bytes(v);
  }
  return sum;
}

/* Moves the node at `from` to position `to`, shifting those between one place. */
static void move(Graph *g, int from, int to) {
  Node *n = g->nodes[from];
  if (from > to)
    for (int q = from; q > to; q--) g->nodes[q] = g->nodes[q - 1];
  else
    for (int q = from; q < to; q++) g->nodes[q] = g->nodes[q + 1];
  g->nodes[to] = n;
}

static int position(const Graph *g, const Node *n, int from, int to) {
  for (int q = from; q < to; q++)
    if (g->nodes[q] == n) return q;
  return -1;
}

static bool may_move(const Graph *g, int i) {
  const Node *n = g->nodes[i];
  return ew(n) && !(n->op == OP_CAST && n->in[0]->dtype == n->out[0]->dtype) && !pinned(g, i);
}

/* The next computing node after position i of g (g->nnodes: none). */
static int next_op(const Graph *g, int i) {
  while (++i < g->nnodes && enters(g->nodes[i])) {
  }
  return i;
}

static bool hoist(Graph *g, int j) {
  Node *c = g->nodes[j];
  if (!may_move(g, j)) return false;
  int i = -1;
  for (int k = 0; k < c->nin; k++) {
    const Node *d = c->in[k]->def;
    int at = d->graph == g && !enters(d) ? position(g, d, 0, j) : -1;
    if (at > i) i = at;
  }
  if (i < 0) return false;
  const Node *p = g->nodes[i];
  int nx = next_op(g, i); /* c's successor there */
  bool before = compat(p, c) && !pinned(g, i), after = nx < j && compat(g->nodes[nx], c) && !pinned(g, nx);
  if ((!before && !after) || (nx < j && pinned(g, nx))) return false;
  if (p->op == OP_MATMUL && (c->op == OP_ADD || c->op == OP_GELU || c->op == OP_GELU_BWD) && reads(c, p->out[0]))
    return false; /* c would be the GEMM's epilogue there, out of its group */
  bool between = false; /* a node between that ends a group */
  for (int q = i + 1; q < j; q++) {
    const Node *n = g->nodes[q];
    if (enters(n) && n->op != OP_ARG && reads(c, n->out[0])) return false;
    if (!enters(n) && !passable(n, c)) return false;
    between |= !enters(n) && !compat(n, c);
  }
  if (!between || bytes(c->out[0]) > dying_inputs(g, j)) return false;
  for (int q = i + 1; q < j; q++) /* the ARGs c reads, before p (which stays next to c) */
    if (g->nodes[q]->op == OP_ARG && reads(c, g->nodes[q]->out[0])) move(g, q, i++);
  move(g, j, i + 1);
  return true;
}

static bool sink(Graph *g, int i) {
  Node *p = g->nodes[i];
  if (!may_move(g, i)) return false;
  int j = i + 1;
  while (j < g->nnodes && !reads(g->nodes[j], p->out[0])) j++;
  if (j == g->nnodes || !compat(p, g->nodes[j]) || pinned(g, j)) return false;
  bool between = false;
  for (int q = i + 1; q < j; q++) {
    if (!enters(g->nodes[q]) && !passable(g->nodes[q], p)) return false;
    between |= !enters(g->nodes[q]) && !compat(g->nodes[q], p);
  }
  if (!between || dying_inputs(g, i) > bytes(p->out[0])) return false;
  move(g, i, j - 1);
  return true;
}

static void close_gaps(Graph *g) {
  for (int k = 1; k < g->nnodes; k++) {
    if (g->nodes[k]->op != OP_ARG) continue;
    int a = k - 1, b = next_op(g, k);
    while (a >= 0 && enters(g->nodes[a])) a--;
    if (a < 0 || b == g->nnodes || !compat(g->nodes[a], g->nodes[b])) continue;
    int s = a;
    while (s > 0 && compat(g->nodes[s - 1], g->nodes[a])) s--;
    move(g, k, s);
  }
}

void fuse_order(Graph *g) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) fuse_order(g->nodes[i]->body);
  for (bool moved = true; moved;) { /* nodes only rise: a move can let an earlier node rise next sweep */
    moved = false;
    for (int j = 0; j < g->nnodes; j++) moved |= hoist(g, j);
  }
  for (bool moved = true; moved;) { /* then only sink */
    moved = false;
    for (int i = g->nnodes - 1; i >= 0; i--) moved |= sink(g, i);
  }
  close_gaps(g);
}
