/* passes/fuse_sumsq.c — the gradient clip's sums of squares in one kernel (CUDA target).
 *
 * passes/optimizer.c takes the global gradient norm as sum(concat(reshape(sumsq(g_i), [1]) ...)):
 * a SUMSQ per gradient, each a two-launch reduction on the CUDA target, and a one-element copy per
 * piece into the concat. This pass lets the concat's kernel compute them instead: one launch reads
 * every member's gradient through a pointer table (shapes baked, bf16 or f32, widened to f32) and
 * writes each sum of squares straight into its element of the concat's output
 * (runtime/cuda/kernels/shardk.cuh sumsq_multi_part: the same partial sums and the same final order
 * as the SUMSQ's own kernel, so the same bits). The members' SUMSQ and RESHAPE then emit nothing and
 * the concat copies only its other pieces.
 *
 * A piece of a concat (axis 0, f32, rank 1, in device memory) joins when it is the [1] RESHAPE of a
 * SUMSQ, both in the concat's graph and pipeline stage, the SUMSQ's f32 result read by that reshape
 * alone and the reshape's by the concat alone (neither a graph result), and the gradient it reads
 * (the bf16 source of a folded cast, ir_unfold_cast) f32 or bf16 in device memory. The sums are now
 * taken at the concat's place, not at the SUMSQ's: so, after the memory plan, a member also needs
 * every node from its SUMSQ to the concat to own no region body and to write no byte of its gradient
 * (outputs, packing scratch). Sums of squares that an all-reduce completes first (tp- or
 * pp-partial, ZeRO's shards reduced together) feed the concat through that all-reduce: they stay
 * as they are, and so do sharding and the interpreter, which runs the nodes as written.
 */
#include "diag.h"
#include "memplan.h"
#include "passes.h"
#include "placed.h"

/* Whether n is the one reader of v: the only read of v in g and the bodies below it. */
static bool only_reader(const Graph *g, const Value *v, const Node *n) {
  int reads = 0;
  for (int k = 0; k < n->nin; k++) reads += n->in[k] == v;
  return reads == 1 && ir_count_uses_deep(g, v) == 1;
}

static int position(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  return -1;
}

/* Whether node q writes a byte of x: one of its outputs or its packing scratch meets x. */
static bool writes_over(const Node *q, const Value *x) {
  for (int k = 0; k < q->nout; k++)
    if (placed_meets(x, q->out[k])) return true;
  int64_t lo, hi;
  return q->scratch_bytes > 0 && memplan_span(x, &lo, &hi) && lo < q->scratch_at + q->scratch_bytes &&
         q->scratch_at < hi;
}

/* The SUMSQ whose sum of squares the concat cat (at position c of g) may compute as its piece p, or NULL. */
static Node *member(const Graph *g, const Node *cat, int c, const Value *p) {
  Node *r = p->def, *s = r->in[0]->def;
  if (r->op != OP_RESHAPE || r->graph != g || p->shape.rank != 1 || p->shape.dim[0] != 1) return NULL;
  if (s->op != OP_SUMSQ || s->graph != g || s->out[0]->dtype != DT_F32 || s->out[0]->host || p->host) return NULL;
  if (ir_node_stages(s) != ir_node_stages(cat) || ir_node_stages(r) != ir_node_stages(cat)) return NULL;
  if (ir_is_result(g, s->out[0]) || ir_is_result(g, p) || !only_reader(g, s->out[0], r) || !only_reader(g, p, cat)) return NULL;
  const Value *x = ir_unfold_cast(s->in[0]);
  int64_t lo, hi;
  if ((x->dtype != DT_F32 && x->dtype != DT_BF16) || x->host || !memplan_span(x, &lo, &hi)) return NULL;
  int at = position(g, s);
  if (at < 0 || at > c) return NULL;
  for (int q = at + 1; q < c; q++)
    if (g->nodes[q]->body || writes_over(g->nodes[q], x)) return NULL;
  return s;
}

/* Every mark cleared (an IR read back may carry them: this pass decides them again, or none for the CPU target). */
static void clear_graph(Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    g->nodes[i]->a.sumsq_fused = false;
    if (g->nodes[i]->body) clear_graph(g->nodes[i]->body);
  }
}

static void fuse_graph(Graph *g) {
  for (int c = 0; c < g->nnodes; c++) {
    Node *cat = g->nodes[c];
    if (cat->body) fuse_graph(cat->body);
    const Value *y = cat->out[0];
    if (cat->op != OP_CONCAT || cat->a.axis != 0 || y->dtype != DT_F32 || y->shape.rank != 1 || y->host || y->offset < 0)
      continue;
    for (int i = 0; i < cat->nin; i++) {
      Node *s = member(g, cat, c, cat->in[i]);
      if (s) s->a.sumsq_fused = cat->a.sumsq_fused = true;
    }
  }
}

const Node *fuse_sumsq_piece(const Node *cat, int i) {
  if (cat->op != OP_CONCAT || !cat->a.sumsq_fused) return NULL;
  const Node *r = cat->in[i]->def, *s = r->nin ? r->in[0]->def : NULL;
  return r->op == OP_RESHAPE && s && s->op == OP_SUMSQ && s->a.sumsq_fused ? s : NULL;
}

bool fuse_sumsq_member(const Node *n) {
  if (n->op == OP_RESHAPE) n = n->in[0]->def;
  return n->op == OP_SUMSQ && n->a.sumsq_fused;
}

bool pass_fuse_sumsq(Module *m) {
  clear_graph(m->graph);
  if (m->target != TARGET_CUDA || !fuse_on(m, FUSE_SUMSQ)) return true;
  if (!m->memplan) die("fuse_sumsq: the memory plan has not run");
  fuse_graph(m->graph);
  return true;
}
