/* passes/epilogue_hoist.c — the CUDA target's residual adds moved up to the GEMM that may take them
 * (passes/epilogue.c's EPI_RESIDUAL), a step of passes/fuse.c before it forms its groups.
 *
 * An add r = x + y (or y + x) of three values of one type, where y is the output of a MATMUL of the
 * same graph that epilogue_gemm_form accepts and the add alone reads y (no result of the graph),
 * moves up to just after that matmul when nodes lie between: the backward's
 * dX = dG Wg^T + dU Wu^T is matmul, the weight gradient's matmul, matmul, add; moved, the second
 * GEMM accumulates onto the first one's result as it stores it. Where both operands are such
 * outputs, the later matmul's is y (x must exist when its GEMM runs). Legal only when
 *   - x is defined before the matmul, or is a value entering the graph (an ARG, PARAM, STATE or
 *     INPUT node, which computes nothing: it moves up with the add);
 *   - every node between belongs to the add's pipeline stage (and the matmul does), and none is a
 *     collective, a SEND / RECV or owns a region body (their order is the schedule's).
 * Nodes compute values only (SSA): no node between reads r, so moving the add earlier changes no
 * value. Memory stays about even: r is born where y dies. The memory plan then places r as
 * written there, and pass_epilogue decides (by placement) whether the GEMM takes it.
 */
#include "passes.h"

/* The position of v's definition in g at or before `before` (-1: none, e.g. defined outside g). */
static int def_pos(const Graph *g, const Value *v, int before) {
  for (int q = before; q >= 0; q--)
    if (g->nodes[q] == v->def) return q;
  return -1;
}

/* Moves node j of g to position to (< j), shifting those between one place on. */
static void move_up(Graph *g, int j, int to) {
  Node *n = g->nodes[j];
  for (int q = j; q > to; q--) g->nodes[q] = g->nodes[q - 1];
  g->nodes[to] = n;
  ir_touch(g);
}

/* Whether the add may be moved over n. */
static bool passable(const Node *n, uint64_t stages) {
  return !n->body && !(ir_ops[n->op].flags & F_COLL) && n->op != OP_SEND && n->op != OP_RECV && ir_node_stages(n) == stages;
}

/* Moves the add at j when it may; true when it moved. */
static bool hoist(Graph *g, int j) {
  Node *a = g->nodes[j];
  if (a->op != OP_ADD || a->nin != 2 || a->in[0] == a->in[1] || a->out[0]->host) return false;
  if (!ir_same_type(a->in[0], a->out[0]) || !ir_same_type(a->in[1], a->out[0])) return false;
  int p[2] = {def_pos(g, a->in[0], j - 1), def_pos(g, a->in[1], j - 1)}, o = -1;
  for (int k = 0; k < 2; k++) /* y: the later matmul's output */
    if (p[k] >= 0 && g->nodes[p[k]]->op == OP_MATMUL && (o < 0 || p[k] > p[o])) o = k;
  if (o < 0) return false;
  int i = p[o], px = p[1 - o];
  const Node *mm = g->nodes[i];
  const Value *y = a->in[o], *x = a->in[1 - o];
  uint64_t st = ir_node_stages(a);
  if (!epilogue_gemm_form(mm) || ir_node_stages(mm) != st || x->host || ir_is_result(g, y) || ir_count_uses_deep(g, y) != 1)
    return false;
  if (px > i && !ir_enters(g->nodes[px])) return false; /* x is computed after the matmul */
  int next = i + 1;
  while (next < j && ir_enters(g->nodes[next])) next++;
  if (next == j) return false; /* already the GEMM's next node */
  for (int q = i + 1; q < j; q++)
    if (!ir_enters(g->nodes[q]) && !passable(g->nodes[q], st)) return false;
  int at = i + 1;
  if (px > i) move_up(g, px, at++);
  move_up(g, j, at);
  return true;
}

void epilogue_hoist_adds(Graph *g) {
  for (int j = 0; j < g->nnodes; j++) {
    if (g->nodes[j]->body) epilogue_hoist_adds(g->nodes[j]->body);
    (void)hoist(g, j);
  }
}
