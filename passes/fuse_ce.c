/* passes/fuse_ce.c — the cross-entropy's forward and backward in one kernel.
 *
 * loss = cross_entropy(logits, targets) and, later in the same graph, dlogits =
 * cross_entropy_bwd(logits, targets, dloss) both read every logit; one kernel per row can find the
 * row's max and sum once and write the row's loss and gradient (runtime/cuda/kernels/shardk.cuh
 * ce_fused_rows; on the CPU runtime/kernels/xent.c or the LLVM row kernel, codegen/target_llvm.c),
 * so the logits are read by one kernel, not two. Both nodes get Attrs.fused_bwd;
 * the forward's kernel computes the backward where the entry point runs both (the step), and the
 * backward then emits nothing.
 *
 * Runs after the memory plan: dlogits is now written at the forward's place, earlier than planned.
 * That is safe when its bytes meet no value the nodes from the forward up to the backward read or
 * write (the logits excepted when dlogits is their very tensor, updated in place: each row is read
 * before it is overwritten, and nothing between reads the logits then). dloss must exist by then:
 * defined before the forward, or a constant between them (its bytes meeting nothing the nodes it
 * moves past use), which moves to just before the forward. Nodes with region bodies between them:
 * no fusion. Both targets emit the pair fused (the interpreter runs the nodes as they are).
 */
#include "diag.h"
#include "memplan.h"
#include "passes.h"
#include "placed.h"

static bool pair(const Node *f, const Node *b) {
  return f->op == OP_CROSS_ENTROPY && b->op == OP_CROSS_ENTROPY_BWD && b->in[0] == f->in[0] && b->in[1] == f->in[1] &&
         b->a.len == f->a.len && ir_node_stages(b) == ir_node_stages(f);
}

int fuse_ce_partner(const Graph *g, int i) {
  const Node *n = g->nodes[i];
  if (!n->a.fused_bwd) return -1;
  for (int j = 0; j < g->nnodes; j++)
    if (g->nodes[j]->a.fused_bwd && (n->op == OP_CROSS_ENTROPY ? pair(n, g->nodes[j]) : pair(g->nodes[j], n))) return j;
  return -1;
}

static int position(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  return -1;
}

/* Fuses the forward at f with its backward if the placement allows; returns whether it did. */
static bool try_fuse(Graph *g, int f) {
  Node *fw = g->nodes[f], *bw = NULL;
  int b = f + 1;
  for (; b < g->nnodes; b++) {
    if (g->nodes[b]->body) return false;
    if (pair(fw, g->nodes[b])) break;
  }
  if (b == g->nnodes) return false;
  bw = g->nodes[b];
  const Value *dl = bw->out[0], *logits = fw->in[0], *dloss = bw->in[2];
  if (dl->host || logits->host || placed_meets_node(dl, fw, logits) || memplan_clobbers(dl, logits)) return false;
  int p = dloss->def->graph == g ? position(g, dloss->def) : -1;
  if (p > f) { /* defined between: a constant that may move before the forward */
    if (dloss->def->op != OP_CONST || dloss->host) return false;
    for (int q = f; q < p; q++)
      if (placed_meets_node(dloss, g->nodes[q], NULL)) return false;
  }
  if (!placed_write_early(g, dl, f, NULL)) return false;
  if (p > f) {
    Node *cn = g->nodes[p];
    for (int q = p; q > f; q--) g->nodes[q] = g->nodes[q - 1];
    g->nodes[f] = cn;
    ir_touch(g);
  }
  fw->a.fused_bwd = bw->a.fused_bwd = true;
  return true;
}

static void fuse_ce_graph(Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->body) fuse_ce_graph(n->body);
    if (n->op == OP_CROSS_ENTROPY && try_fuse(g, i) && g->nodes[i] != n) i++; /* a constant moved before it */
  }
}

bool pass_fuse_ce(Module *m) {
  if (!m->memplan) die("fuse_ce: the memory plan has not run");
  if (!fuse_on(m, FUSE_CE)) return true; /* shardc --no-fuse ce (CUDA target) */
  fuse_ce_graph(m->graph);
  return true;
}
