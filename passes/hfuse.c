/* passes/hfuse.c — the `hfuse` pass (CUDA target): sibling GEMMs, one launch.
 *
 * Llama's layer reads one activation with several weights: k = x @ w_k and v = x @ w_v (both [d, kv]),
 * and SwiGLU's g = x @ w_gate and u = x @ w_up (both [d, ffn]). Two such matmuls right after each
 * other (the same A value, no accumulator, no epilogue, weights of one shape that are not batched, the
 * same transposes, outputs of one shape and dtype) become one strided-batched GEMM: the first gets
 * Attrs.hfuse 1 and launches both (rt_cu_matmul_pair: batch 2, A's stride 0, B's and y's strides the
 * distances between the two weights' and the two outputs' bytes, which the memory plan fixed), the
 * second gets 2 and emits nothing. The batch's tiles fill the GPU as one GEMM of twice the width: one
 * launch and one last-wave tail instead of two (the cost model's 16.4 us per GEMM, passes/cost.c).
 *
 * The weights and outputs stay where the plan put them: no concatenated copy, no column views, no
 * change to the update, the checkpoint or any other target. So the pass declines only where the two
 * GEMMs could not run as one at the first one's place:
 *   - a node between them (they must be adjacent: fuse_order's schedule already puts SwiGLU's and the
 *     attention's siblings side by side), or either one in a fusion group, another pipeline stage or
 *     instruction;
 *   - a batched B or a transposed A over batch dims (the GEMM is not one [m, k] x [k, n]);
 *   - a value in host memory (plan offload's optimizer step);
 *   - bytes that meet: the second output is written with the first, so it must meet neither A, nor the
 *     first weight, nor the first output, and the first output must not meet the second weight.
 * Nothing here depends on ZeRO, tp or the weight copy: the weights are whatever the GEMMs read (the
 * persistent bf16 copies, a layer's own cast, ZeRO-3's gathered rows, a tp shard), and the strides are
 * the pointers' distances at run time (where they point opposite ways, or on the emulated device, the
 * runtime runs two GEMMs: the same numbers). The query's GEMMs only, q = x @ w_q, stay apart (its width
 * differs from k's and v's: no uniform batch). `shardc --no-fuse hfuse` turns it off.
 */
#include "diag.h"
#include "memplan.h"
#include "passes.h"
#include "placed.h"

static bool same_shape(const Shape *a, const Shape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dim[i] != b->dim[i]) return false;
  return true;
}

static bool one_gemm(const Node *n) {
  if (n->op != OP_MATMUL || n->nin != 2 || n->a.epilogue || n->a.hfuse || n->group) return false;
  const Value *a = n->in[0], *b = n->in[1];
  if (b->shape.rank != 2 || (n->a.ta && a->shape.rank != 2) || a->shape.rank < 2) return false;
  return !a->host && !b->host && !n->out[0]->host && a->dtype == b->dtype;
}

static bool siblings(const Node *p, const Node *q) {
  const Value *b0 = p->in[1], *b1 = q->in[1], *y0 = p->out[0], *y1 = q->out[0];
  if (!one_gemm(p) || !one_gemm(q) || p->in[0] != q->in[0] || b0 == b1) return false;
  if (p->a.ta != q->a.ta || p->a.tb != q->a.tb || b0->dtype != b1->dtype || !same_shape(&b0->shape, &b1->shape)) return false;
  if (y0->dtype != y1->dtype || !same_shape(&y0->shape, &y1->shape)) return false;
  if (ir_node_stages(p) != ir_node_stages(q) || p->instr != q->instr) return false;
  /* y1 is written with y0, before q's place: it must meet nothing p reads or writes, nor y0 b1 */
  return !placed_meets(y1, p->in[0]) && !placed_meets(y1, b0) && !placed_meets(y1, y0) && !placed_meets(y0, b1);
}

int hfuse_leader(const Graph *g, int i) {
  if (i <= 0 || i >= g->nnodes || g->nodes[i]->a.hfuse != 2) return -1;
  return g->nodes[i - 1]->a.hfuse == 1 ? i - 1 : -1;
}

static void hfuse_graph(Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->body) hfuse_graph(n->body);
    if (i + 1 < g->nnodes && siblings(n, g->nodes[i + 1])) {
      n->a.hfuse = 1;
      g->nodes[i + 1]->a.hfuse = 2;
      i++;
    }
  }
}

bool pass_hfuse(Module *m) {
  if (m->target != TARGET_CUDA) return true;
  if (!m->memplan) die("hfuse: the memory plan has not run");
  if (!fuse_on(m, FUSE_HFUSE)) return true; /* shardc --no-fuse hfuse */
  hfuse_graph(m->graph);
  return true;
}
