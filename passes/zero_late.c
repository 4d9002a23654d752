/* passes/zero_late.c — the `zlate` pass: under pp and ZeRO-2/3, a non-layer parameter's gradient
 * reduce-scatter over dp (top level: the embedding's, stage 0's B; passes/zero_sums.c scatter_chain) is
 * issued after its stage's next backward layer loop when that loop is zb's W (a weight-gradient loop:
 * reverse, no carry) scattering over dp, not before it: W's per-layer scatters, waited in or after the
 * loop, no longer queue behind it on the dp channel (Llama-3-8B dp 256 pp 4 zb z2: 1,002 MiB, ~21 ms,
 * ahead of stage 0's W). Its reader (the running sum's add, before or after the loop) moves to just before that
 * add's own first reader, so the wait falls a micro-batch later; so does the last stage's head gradient's add,
 * which follows the F making it (in every schedule). Order only: the same nodes, the same values
 * (docs/pipeline.md, "Under recompute"; tests/passes/test_pp_equiv_zlate.c).
 */
#include <string.h>

#include "passes.h"
#include "zero.h"

static bool scatters_dp(const Graph *b, int axis) {
  for (int j = 0; j < b->nnodes; j++) {
    const Node *s = b->nodes[j];
    if (s->op == OP_REDUCE_SCATTER && s->a.mesh_axis == axis) return true;
    if (s->op == OP_REPEAT && scatters_dp(s->body, axis)) return true;
  }
  return false;
}

static int pos_of(const Graph *g, const Node *n, int from) {
  for (int i = from; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  return -1;
}

/* moves node at position from to position to (to > from: it lands after what was at to) */
static void move_node(Graph *g, int from, int to) {
  Node *n = g->nodes[from];
  if (to > from) memmove(&g->nodes[from], &g->nodes[from + 1], (size_t)(to - from) * sizeof(Node *));
  else memmove(&g->nodes[to + 1], &g->nodes[to], (size_t)(from - to) * sizeof(Node *));
  g->nodes[to] = n;
}

/* the first position after i of a node reading n's output (g->nnodes: none, or a result) */
static int first_reader(const Graph *g, const Node *n, int i) {
  for (int k = i + 1; k < g->nnodes; k++) {
    const Node *r = g->nodes[k];
    for (int j = 0; j < r->nin; j++)
      if (r->in[j]->def == n) return k;
  }
  return g->nnodes;
}

bool pass_zero_late(Module *m) {
  if (!m->mesh || m->mesh->dim[RT_AX_PP] <= 1 || m->plan.zero < 2) return true;
  Graph *g = m->graph;
  int axis = RT_AX_DP;
  bool moved = false;
  for (int i = 0; i < g->nnodes; i++) {
    Node *s = g->nodes[i];
    if (s->op != OP_REDUCE_SCATTER || s->a.mesh_axis != axis || s->stage <= 0 || s->stageset) continue;
    int rd = first_reader(g, s, i);
    if (rd >= g->nnodes) continue;
    Node *r = g->nodes[rd];
    if (r->op != OP_ADD || r->stage != s->stage) continue;
    /* only right after the stage's backward loop (B) and before its next loop when that is zb's W
     * (reverse, no carry: the weight gradients) and scatters over dp */
    int b = -1, w = -1;
    for (int k = i - 1; k >= 0 && b < 0; k--)
      if (g->nodes[k]->op == OP_REPEAT && g->nodes[k]->stage == s->stage) b = k;
    for (int k = i + 1; k < g->nnodes && w < 0; k++)
      if (g->nodes[k]->op == OP_REPEAT && g->nodes[k]->stage == s->stage) w = k;
    const Node *wl = w >= 0 ? g->nodes[w] : NULL;
    if (b < 0 || !g->nodes[b]->a.reverse || g->nodes[b]->a.ncarry == 0 || !wl || !wl->a.reverse || wl->a.ncarry != 0 ||
        !scatters_dp(wl->body, axis)) {
      /* the last stage's head (passes/pipe_class.c's maker merges: its gradient's add right after the F making it):
       * the add (its wait) alone, to just before its own first reader, the next micro-batch's, one gradient held
       * till then (Llama-3-8B dp 256 tp 2+sp pp 4 zb z2: waiting in the F, 57.4 ms where it is 50.9, the step 2.58 s;
       * deferred 2.48 s). (The first stage's embedding, after its B, waits there as before: the gradient held a
       * micro-batch more is beside that stage's most activations, Llama-3-405B dp 32 tp 8+sp pp 8 1f1b z2's
       * balanced split found none that fits with it.) */
      int rr = first_reader(g, r, rd);
      if (s->stage == m->mesh->dim[RT_AX_PP] && rr < g->nnodes && rr - 1 > rd) move_node(g, rd, rr - 1), moved = true;
      continue;
    }
    /* the add may run before the loop (passes/pipe_class.c's maker merges: the embedding's, right after its B):
     * then it goes past the loop too, which its own first reader must allow */
    int rr0 = first_reader(g, r, rd);
    if (rd < w && rr0 <= w) continue;
    move_node(g, i, w); /* s now right after the loop */
    int at = pos_of(g, r, rd < w ? rd - 1 : w);
    if (at < w) move_node(g, at, w), at = w; /* (before the loop: now just after s) */
    int rr = first_reader(g, r, at);
    if (rr < g->nnodes && rr - 1 > at) move_node(g, at, rr - 1);
    i--; /* the node now at i is new */
    moved = true;
  }
  if (moved) ir_touch(g);
  return true;
}
