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
 * Without a bias (Llama), the add right after the matmul
 *   r = x + y or y + x     (x: y's shape and dtype, not in host memory; y read by nothing else)
 * gets EPI_RESIDUAL (5): the GEMM stores r with x as its C (beta 1: D = AB + C, cuBLASLt's epilogue
 * DEFAULT, no bias pointer), r meeting neither A nor B and x only as its very bytes. x may be an
 * earlier GEMM's output: the backward's dX = dG Wg^T + dU Wu^T is the later GEMM accumulating onto
 * the earlier one's result. passes/epilogue_hoist.c has moved such an add up to just after its
 * matmul where a node (a weight gradient's GEMM) lay between.
 *
 * Backward: a MATMUL whose output only dh = gelu_bwd(pre, y) reads gets 3 (cuBLASLt's DGELU: the
 * GEMM stores dh, reading pre as its aux), or 4 when the REDUCE_SUM of dh to [n] follows it (the
 * bias gradient: DGELU_BGRAD, rt_cu_matmul_dgelu). passes/fuse.c has moved those nodes up to just
 * after the GEMM; whatever lies between, the GEMM writes them early only where no node in between
 * uses their bytes (placed_write_early).
 *
 * The memory plan (CUDA target) keeps what the matmul and the nodes its GEMM may absorb read alive
 * through the last of them (epilogue_reach: epilogue_of without the placement checks), so that those
 * checks rarely fail: a transient operand (passes/wcast.c's bf16 weight row) would otherwise give
 * its bytes to a value the GEMM stores.
 *
 * The other targets ignore it (the pass marks nothing for them): the CPU target runs the nodes.
 * `shardc --no-fuse epilogue` marks nothing either, `--no-fuse residual` no EPI_RESIDUAL (the memory
 * plan's epilogue_reach still keeps the operands alive as for them: a little memory, no time).
 */
#include "diag.h"
#include "ir.h"
#include "memplan.h"
#include "passes.h"
#include "placed.h"

enum { EPI_LD_MULTIPLE = 8 }; /* cuBLASLt's bias / aux leading dimension */

/* v is read by one node, and is no result of its graph (uses: ir_use_counts of the module's graph;
 * v is defined in g, so its count is g's and its bodies'). */
static bool read_once(const Graph *g, const PtrMap *uses, const Value *v) {
  intptr_t c = 0;
  ptrmap_get(uses, v, &c);
  return !ir_is_result(g, v) && c == 1;
}

/* The GEMM may store w while reading the matmul's operands and the bias. */
static bool free_to_store(const Node *mm, const Value *bias, const Value *w) {
  return !w->host && !placed_meets(w, mm->in[0]) && !placed_meets(w, mm->in[1]) && !placed_meets(w, bias);
}

/* The position of the node after i that reads v (g->nnodes: none). */
static int reader(const Graph *g, int i, const Value *v) {
  for (int j = i + 1; j < g->nnodes; j++)
    for (int k = 0; k < g->nodes[j]->nin; k++)
      if (g->nodes[j]->in[k] == v) return j;
  return g->nnodes;
}

int epilogue_nodes(const Graph *g, int i, int at[2]) {
  int e = g->nodes[i]->a.epilogue;
  if (epi_dgelu(e)) { /* GELU's backward, later; then its bias gradient */
    at[0] = reader(g, i, g->nodes[i]->out[0]);
    if (e == EPI_DGELU_BGRAD) at[1] = ir_next_computing(g, at[0]);
    return e - EPI_DGELU + 1;
  }
  int count = e == EPI_RESIDUAL ? 1 : e; /* the residual add alone, or the bias add and what follows it */
  for (int k = 0, p = i; k < count; k++) at[k] = p = ir_next_computing(g, p);
  return count;
}

static int position(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  return -1;
}

int epilogue_gemm(const Graph *g, int i) {
  const Node *n = g->nodes[i], *gb = n;
  if (n->op == OP_REDUCE_SUM) gb = n->in[0]->def;
  if (gb->op != OP_GELU_BWD || gb->graph != g) return -1;
  const Node *mm = gb->in[1]->def;
  if (mm->op != OP_MATMUL || mm->graph != g || !epi_dgelu(mm->a.epilogue)) return -1;
  int p = position(g, mm), at[2], e = epilogue_nodes(g, p, at);
  for (int k = 0; k < e; k++)
    if (at[k] == i) return p;
  return -1;
}

int epilogue_owner(const Graph *g, int i) {
  int p = epilogue_gemm(g, i);
  if (p >= 0) return p;
  const Node *n = g->nodes[i];
  if (n->op != OP_ADD && n->op != OP_GELU) return -1;
  for (int j = i - 1, ops = 0; j >= 0 && ops < 2; j--) { /* the matmul is one or two computing nodes back */
    const Node *mm = g->nodes[j];
    if (ir_enters(mm)) continue;
    if (mm->op == OP_MATMUL && mm->a.epilogue > 0 && !epi_dgelu(mm->a.epilogue)) {
      int at[2], e = epilogue_nodes(g, j, at);
      for (int k = 0; k < e; k++)
        if (at[k] == i) return j;
      return -1;
    }
    ops++;
  }
  return -1;
}

/* GELU's backward of the matmul at i (whose output only it reads) as its GEMM's epilogue, the bias
 * gradient right after it too where possible: EPI_DGELU, EPI_DGELU_BGRAD or 0 (positions: at). Without
 * `placed` only what the ops, types and stages allow (before the memory plan: epilogue_reach). */
static int dgelu_of(const Graph *g, int i, int at[2], bool placed) {
  const Node *mm = g->nodes[i];
  const Value *y = mm->out[0];
  int j = reader(g, i, y);
  if (j == g->nnodes) return 0;
  const Node *gb = g->nodes[j];
  if (gb->op != OP_GELU_BWD || gb->in[1] != y || gb->in[0] == y || ir_node_stages(gb) != ir_node_stages(mm)) return 0;
  if (gb->group && g->nodes[j - 1]->group == gb->group) return 0; /* inside a fusion group */
  const Value *pre = gb->in[0], *dh = gb->out[0];
  if (!ir_same_type(pre, y) || !ir_same_type(dh, y) || pre->host || dh->host) return 0;
  /* the GEMM reads pre as it stores dh: pre must be made before it, not between it and GELU's backward (a zb B loop
   * under recompute full recomputes the forward, pre among it, after the matmul of the incoming gradient: the GEMM
   * read the bytes of the micro-batch before) */
  for (int k = i + 1; k < j; k++)
    if (g->nodes[k] == pre->def) return 0;
  if (placed && (!free_to_store(mm, pre, dh) || !placed_write_early(g, dh, i, NULL))) return 0;
  at[0] = j;
  int r = ir_next_computing(g, j);
  if (r >= g->nnodes) return EPI_DGELU;
  const Node *rs = g->nodes[r];
  const Value *db = rs->out[0];
  int64_t n = y->shape.dim[y->shape.rank - 1];
  if (rs->op != OP_REDUCE_SUM || rs->in[0] != dh || ir_node_stages(rs) != ir_node_stages(mm) || db->shape.rank != 1 ||
      db->shape.dim[0] != n || db->dtype != y->dtype || db->host)
    return EPI_DGELU;
  if (placed && (!free_to_store(mm, pre, db) || placed_meets(db, dh) || !placed_write_early(g, db, i, y)))
    return EPI_DGELU;
  at[1] = r;
  return EPI_DGELU_BGRAD;
}

bool epilogue_gemm_form(const Node *mm) {
  if (mm->op != OP_MATMUL || mm->nin != 2) return false; /* (an accumulating GEMM, passes/gacc.c: none) */
  const Value *y = mm->out[0], *A = mm->in[0], *B = mm->in[1];
  if (B->shape.rank != 2 || (A->shape.rank > 2 && mm->a.ta) || A->dtype != B->dtype) return false; /* not one GEMM */
  if (y->dtype != DT_F32 && y->dtype != DT_BF16) return false;
  return y->shape.dim[y->shape.rank - 1] % EPI_LD_MULTIPLE == 0 && !y->host;
}

/* r = x + y (the add right after the matmul of y, no bias) as its GEMM's epilogue, x as cuBLASLt's C
 * (beta 1): EPI_RESIDUAL or 0. x has y's type; with `placed`, r meets neither operand of the GEMM
 * and x only as its very bytes (updated index for index). */
static int residual_of(const Node *mm, const Value *x, const Value *r, bool placed) {
  const Value *y = mm->out[0];
  if (!ir_same_type(x, y) || !ir_same_type(r, y) || x->host || r->host) return 0;
  if (placed && (placed_meets(r, mm->in[0]) || placed_meets(r, mm->in[1]) || memplan_clobbers(r, x))) return 0;
  return EPI_RESIDUAL;
}

/* How many nodes after the matmul at i its GEMM computes: 0, 1 or 2 (their positions: at), or
 * GELU's backward (dgelu_of). Without `placed`, as far as the ops, types and stages allow. */
static int epilogue_of(const Graph *g, const PtrMap *uses, int i, int at[2], bool placed, bool residual) {
  const Node *mm = g->nodes[i];
  if (!epilogue_gemm_form(mm)) return 0;
  const Value *y = mm->out[0];
  int64_t n = y->shape.dim[y->shape.rank - 1];
  if (!read_once(g, uses, y)) return 0;
  if ((at[0] = ir_next_computing(g, i)) >= g->nnodes) return 0;
  const Node *add = g->nodes[at[0]];
  if (add->op != OP_ADD) return dgelu_of(g, i, at, placed);
  if (ir_node_stages(add) != ir_node_stages(mm) || add->in[0] == add->in[1]) return 0;
  const Value *bias = add->in[0] == y ? add->in[1] : add->in[1] == y ? add->in[0] : NULL, *h = add->out[0];
  if (!bias) return 0;
  if (bias->shape.rank != 1 || bias->shape.dim[0] != n || bias->dtype != y->dtype || bias->host)
    return residual ? residual_of(mm, bias, h, placed) : 0; /* no bias: y's residual, or nothing */
  if (!ir_same_type(h, y) || (placed && !free_to_store(mm, bias, h))) return 0;
  if ((at[1] = ir_next_computing(g, at[0])) >= g->nnodes) return 1;
  const Node *e = g->nodes[at[1]];
  if (ir_node_stages(e) != ir_node_stages(mm) || !ir_same_type(e->out[0], h) || (placed && !free_to_store(mm, bias, e->out[0]))) return 1;
  if (e->op == OP_GELU && e->in[0] == h && !(placed && placed_meets(e->out[0], h))) return 2;
  if (e->op == OP_ADD && e->in[0] != e->in[1] && (e->in[0] == h || e->in[1] == h) && read_once(g, uses, h)) {
    const Value *x = e->in[0] == h ? e->in[1] : e->in[0];
    if (ir_same_type(x, h) && !x->host && !(placed && memplan_clobbers(e->out[0], x))) return 2;
  }
  return 1;
}

int epilogue_reach(const Graph *g, const PtrMap *uses, int i, int at[2]) {
  int e = epilogue_of(g, uses, i, at, false, true); /* (the memory plan's: --no-fuse or not) */
  return epi_dgelu(e) ? e - EPI_DGELU + 1 : e == EPI_RESIDUAL ? 1 : e;
}

/* Nodes [from, end) of one former group, the e absorbed ones (at) gone: one group still, or none. */
static void regroup(Graph *g, int from, const int *at, int e) {
  if (!g->nodes[from]->group) return;
  int end = ir_group_end(g, from);
  bool ok = end - from >= 2;
  for (int j = from; j < end && ok; j++)
    for (int a = 0; a < e; a++)
      if (memplan_clobbers(g->nodes[j]->out[0], g->nodes[at[a]]->out[0])) ok = false;
  if (!ok)
    for (int k = from; k < end; k++) g->nodes[k]->group = 0;
}

static void epilogue_graph(Graph *g, const PtrMap *uses, bool residual) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->body) epilogue_graph(n->body, uses, residual);
    int at[2];
    n->a.epilogue = epilogue_of(g, uses, i, at, true, residual);
    if (!n->a.epilogue) continue;
    int e = epilogue_nodes(g, i, at), last = epi_dgelu(n->a.epilogue) ? at[0] : at[e - 1], old = g->nodes[last]->group;
    for (int k = 0; k < e; k++) g->nodes[at[k]]->group = 0;
    if (old && last + 1 < g->nnodes && g->nodes[last + 1]->group == old) regroup(g, last + 1, at, epi_dgelu(n->a.epilogue) ? 1 : e);
    if (!epi_dgelu(n->a.epilogue)) i = last; /* GELU's backward lies later: the nodes between are visited */
  }
}

bool pass_epilogue(Module *m) {
  if (pass_cuda_fusions_apply(m) && !m->memplan) die("epilogue: the memory plan has not run");
  if (!pass_cuda_fusions_apply(m) || !fuse_on(m, FUSE_EPILOGUE)) return true; /* (shardc --no-fuse epilogue) */
  PtrMap uses = {0}; /* the pass changes no node's inputs: counted once */
  ir_use_counts(m->graph, &uses);
  epilogue_graph(m->graph, &uses, fuse_on(m, FUSE_RESIDUAL));
  ptrmap_free(&uses);
  return true;
}
