/* passes/shape.c — pass_shape: re-infers and checks every node's output dtypes and shapes.
 *
 * Walks the top graph in order and every region body before its owner (a REPEAT's
 * or CALL's outputs are inferred from its body's results), calling ir_infer on each
 * node. ir_infer reports user-caused mismatches at the node's source location;
 * the pass keeps going so one run reports every independent error, but stops
 * descending into a body whose arguments could not be typed.
 */
#include "passes.h"

#include "diag.h"
#include "infer.h"

/* Returns the number of nodes that failed. */
static int shape_graph(Graph *g) {
  int bad = 0;
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->body) {
      int inner = shape_graph(n->body);
      bad += inner;
      if (inner) continue; /* the region's own signature check would only repeat the error */
    }
    if (!ir_infer(n)) bad++;
  }
  return bad;
}

bool pass_shape(Module *m) {
  if (!m || !m->graph) die("pass_shape: no graph");
  int before = diag_errors();
  int bad = shape_graph(m->graph);
  return bad == 0 && diag_errors() == before;
}
