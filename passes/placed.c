/* passes/placed.c — questions about a placed graph (passes/placed.h). */
#include "placed.h"

#include "memplan.h"

bool placed_meets(const Value *a, const Value *b) {
  int64_t al, ah, bl, bh;
  if (!memplan_span(a, &al, &ah) || !memplan_span(b, &bl, &bh)) return false;
  return al < bh && bl < ah;
}

bool placed_meets_node(const Value *w, const Node *n, const Value *skip) {
  for (int k = 0; k < n->nin; k++)
    if (n->in[k] != skip && placed_meets(w, n->in[k])) return true;
  for (int k = 0; k < n->nout; k++)
    if (n->out[k] != skip && placed_meets(w, n->out[k])) return true;
  return false;
}

bool placed_write_early(const Graph *g, const Value *w, int from, const Value *skip) {
  int to = -1;
  for (int i = from + 1; i < g->nnodes && to < 0; i++)
    if (g->nodes[i] == w->def) to = i;
  if (to < 0) return false;
  for (int q = from + 1; q < to; q++)
    if (g->nodes[q]->body || placed_meets_node(w, g->nodes[q], skip)) return false;
  return true;
}
