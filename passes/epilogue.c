/* passes/epilogue.c — GEMM epilogues on the CUDA target: a matmul and the elementwise nodes right
 * after it that cuBLASLt can compute as the GEMM stores its result (rt_cu_matmul_ep).
 *
 * A MATMUL y = op(A) B that is one GEMM (B a matrix, A not transposed when it has batch dims, so
 * the batch folds into the rows), followed by (only argument nodes between, which compute nothing)
 *   h = y + b   (b: [n], y's last dim, a multiple of 8, y's dtype; y read by nothing else)
 * gets Attrs.epilogue = 1: the GEMM stores h and y is never written. If the next node is
 *   g = gelu(h)            the GEMM stores g and h (the pre-activation, cuBLASLt's GELU_AUX_BIAS), or
 *   r = x + h or h + x     (x: y's shape and dtype; h read by nothing else) the GEMM stores r with
 *                          x as its C (beta 1: D = AB + C + bias),
 * it gets 2. Runs after the memory plan, because the GEMM now writes those values while it reads A,
 * B and b: an epilogue is taken only where what it stores meets none of them (nor each other; r
 * may be x's very bytes, updated index for index). The nodes absorbed leave their fusion group;
 * the rest of that group stays one group if it still may run as one kernel (it reads what was
 * absorbed from memory now: memplan_clobbers), else runs node by node.
 *
 * The other targets ignore it (the pass marks nothing for them): the CPU target runs the nodes.
 */
#include "ir.h"
#include "diag.h"
#include "memplan.h"
#include "passes.h"

enum { EPI_LD_MULTIPLE = 8 }; /* cuBLASLt's bias / aux leading dimension */

static bool is_result(const Graph *g, const Value *v) {
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == v) return true;
  return false;
}

/* v is read once, by the node after its definition, and is no result of its graph. */
static bool read_once(const Graph *g, const Value *v) { return !is_result(g, v) && ir_count_uses_deep(g, v) == 1; }

static bool meets(const Value *a, const Value *b) {
  int64_t al, ah, bl, bh;
  if (!memplan_span(a, &al, &ah) || !memplan_span(b, &bl, &bh)) return false;
  return al < bh && bl < ah;
}

/* The GEMM may store w while reading the matmul's operands and the bias. */
static bool free_to_store(const Node *mm, const Value *bias, const Value *w) {
  return !w->host && !meets(w, mm->in[0]) && !meets(w, mm->in[1]) && !meets(w, bias);
}

static bool same_type(const Value *a, const Value *b) { return a->dtype == b->dtype && ir_shape_eq(&a->shape, &b->shape); }

/* A node that computes nothing: a value entering the graph (emit.c emits nothing for it). */
static bool enters(const Node *n) { return n->op == OP_ARG || n->op == OP_PARAM || n->op == OP_STATE || n->op == OP_INPUT; }

/* The position of the first node after i that computes something (g->nnodes: none). */
static int next_op(const Graph *g, int i) {
  int j = i + 1;
  while (j < g->nnodes && enters(g->nodes[j])) j++;
  return j;
}

int epilogue_nodes(const Graph *g, int i, int at[2]) {
  int e = g->nodes[i]->a.epilogue;
  for (int k = 0, p = i; k < e; k++) at[k] = p = next_op(g, p);
  return e;
}

/* How many nodes after the matmul at i its GEMM computes: 0, 1 or 2 (their positions: at). */
static int epilogue_of(const Graph *g, int i, int at[2]) {
  const Node *mm = g->nodes[i];
  if (mm->op != OP_MATMUL) return 0;
  const Value *y = mm->out[0], *A = mm->in[0], *B = mm->in[1];
  int ra = A->shape.rank;
  if (B->shape.rank != 2 || (ra > 2 && mm->a.ta) || A->dtype != B->dtype) return 0; /* not one GEMM */
  if (y->dtype != DT_F32 && y->dtype != DT_BF16) return 0;
  int64_t n = y->shape.dim[y->shape.rank - 1];
  if (n % EPI_LD_MULTIPLE || y->host || !read_once(g, y)) return 0;
  if ((at[0] = next_op(g, i)) >= g->nnodes) return 0;
  const Node *add = g->nodes[at[0]];
  if (add->op != OP_ADD || add->stage != mm->stage || add->in[0] == add->in[1]) return 0;
  const Value *bias = add->in[0] == y ? add->in[1] : add->in[1] == y ? add->in[0] : NULL, *h = add->out[0];
  if (!bias || bias->shape.rank != 1 || bias->shape.dim[0] != n || bias->dtype != y->dtype || bias->host) return 0;
  if (!same_type(h, y) || !free_to_store(mm, bias, h)) return 0;
  if ((at[1] = next_op(g, at[0])) >= g->nnodes) return 1;
  const Node *e = g->nodes[at[1]];
  if (e->stage != mm->stage || !same_type(e->out[0], h) || !free_to_store(mm, bias, e->out[0])) return 1;
  if (e->op == OP_GELU && e->in[0] == h && !meets(e->out[0], h)) return 2;
  if (e->op == OP_ADD && e->in[0] != e->in[1] && (e->in[0] == h || e->in[1] == h) && read_once(g, h)) {
    const Value *x = e->in[0] == h ? e->in[1] : e->in[0];
    if (same_type(x, h) && !x->host && !memplan_clobbers(e->out[0], x)) return 2;
  }
  return 1;
}

/* Nodes [from, end) of one former group, the e absorbed ones (at) gone: one group still, or none. */
static void regroup(Graph *g, int from, const int *at, int e) {
  int id = g->nodes[from]->group, end = from;
  if (!id) return;
  while (end < g->nnodes && g->nodes[end]->group == id) end++;
  bool ok = end - from >= 2;
  for (int j = from; j < end && ok; j++)
    for (int a = 0; a < e; a++)
      if (memplan_clobbers(g->nodes[j]->out[0], g->nodes[at[a]]->out[0])) ok = false;
  if (!ok)
    for (int k = from; k < end; k++) g->nodes[k]->group = 0;
}

static void epilogue_graph(Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->body) epilogue_graph(n->body);
    int at[2];
    n->a.epilogue = epilogue_of(g, i, at);
    int e = n->a.epilogue;
    if (!e) continue;
    int last = at[e - 1], old = g->nodes[last]->group;
    for (int k = 0; k < e; k++) g->nodes[at[k]]->group = 0;
    if (old && last + 1 < g->nnodes && g->nodes[last + 1]->group == old) regroup(g, last + 1, at, e);
    i = last;
  }
}

bool pass_epilogue(Module *m) {
  if (m->target == TARGET_CUDA && !m->memplan) die("epilogue: the memory plan has not run");
  if (m->target == TARGET_CUDA) epilogue_graph(m->graph);
  return true;
}
