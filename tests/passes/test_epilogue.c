/* tests/passes/test_epilogue.c — the residual epilogue without a bias (passes/epilogue.c, EPI_RESIDUAL)
 * and the move of its add up to the GEMM (passes/epilogue_hoist.c), on a built Llama-like graph for
 * the CUDA target (bf16 [16, 32] activations, no biases):
 *   forward:  h = o @ w_o; r = x + h                      (the residual add: absorbed)
 *             p = x @ w_p; keep = p; q = x + p            (p read twice: not absorbed)
 *   backward: a1 = g1 @ w_g^T; dw_g = g1^T @ x;           (dX = dG Wg^T + dU Wu^T with the weight
 *             a2 = g2 @ w_u^T; dw_u = g2^T @ x; s = a1 + a2   gradients' GEMMs between)
 *             a3 = g1 @ w_g^T; t = tanh(x); u = a3 + t    (t computed after a3's matmul: not moved)
 * pass_fuse moves s up to just after a2's matmul (over dw_u's GEMM) and leaves u; after the memory
 * plan pass_epilogue gives h's and a2's matmuls EPI_RESIDUAL (a2's GEMM accumulates onto a1) and no
 * other; the cost model's kernels (cost_cuda_kernels) then drop the adds and charge the GEMM the
 * read of its C. Placement: with r moved over w_o's bytes (the GEMM's B) or half an element row over
 * x's (its C), or over o's (its A: x's bytes when x is A too), the epilogue is refused; over x's
 * very bytes (in place) it is taken.
 */
#include <stdio.h>

#include "cost.h"
#include "memplan.h"
#include "passes.h"
#include "placed.h"
#include "tb.h"

static int failures; /* CHECK (tests/check.h, through tb.h) counts here */

static Value *mm(Graph *g, Value *a, Value *b, bool ta, bool tb) {
  Attrs at = {0};
  at.ta = ta;
  at.tb = tb;
  return tb_op2(g, OP_MATMUL, a, b, &at);
}

static int pos(const Graph *g, const Value *v) { return tb_pos_of(g, v->def); }

static void reepilogue(Module *m) { CHECK(pass_epilogue(m), "pass_epilogue failed"); }

int main(void) {
  Arena a;
  arena_init(&a);
  Module *m = tb_module(&a, "epilogue");
  m->target = TARGET_CUDA;
  Graph *g = m->graph;
  Shape act = tb_shape(2, 16, 32), wide = tb_shape(2, 16, 64);
  Value *o = tb_input(g, "o", DT_BF16, act), *x = tb_input(g, "x", DT_BF16, act), *g1 = tb_input(g, "g1", DT_BF16, wide), *g2 = tb_input(g, "g2", DT_BF16, wide);
  Value *w_o = tb_input(g, "w_o", DT_BF16, tb_shape(2, 32, 32)), *w_p = tb_input(g, "w_p", DT_BF16, tb_shape(2, 32, 32));
  Value *w_g = tb_input(g, "w_g", DT_BF16, tb_shape(2, 32, 64)), *w_u = tb_input(g, "w_u", DT_BF16, tb_shape(2, 32, 64));
  Value *h = mm(g, o, w_o, false, false);
  Value *r = tb_op2(g, OP_ADD, x, h, NULL);
  Value *p = mm(g, x, w_p, false, false);
  Value *q = tb_op2(g, OP_ADD, x, p, NULL);
  Value *a1 = mm(g, g1, w_g, false, true);
  Value *dwg = mm(g, g1, x, true, false);
  Value *a2 = mm(g, g2, w_u, false, true);
  Value *dwu = mm(g, g2, x, true, false);
  Value *s = tb_op2(g, OP_ADD, a1, a2, NULL);
  Value *a3 = mm(g, g1, w_g, false, true);
  Value *t = tb_op1(g, OP_TANH, x, NULL);
  Value *u = tb_op2(g, OP_ADD, a3, t, NULL);
  ir_add_result(g, r, "r");
  ir_add_result(g, p, "keep");
  ir_add_result(g, q, "q");
  ir_add_result(g, s, "s");
  ir_add_result(g, dwg, "dw_g");
  ir_add_result(g, dwu, "dw_u");
  ir_add_result(g, u, "u");

  CHECK(pass_fuse(m), "pass_fuse failed");
  CHECK(pos(g, s) == pos(g, a2) + 1 && pos(g, dwu) == pos(g, s) + 1,
        "s = a1 + a2 not moved up to a2's matmul over dw_u's: at %d, a2 %d, dw_u %d", pos(g, s), pos(g, a2), pos(g, dwu));
  CHECK(pos(g, u) == pos(g, t) + 1 && pos(g, t) == pos(g, a3) + 1, "u = a3 + tanh(x) moved above tanh(x)");
  CHECK(pos(g, r) == pos(g, h) + 1 && pos(g, q) == pos(g, p) + 1, "the forward's adds moved");
  CHECK(pass_memplan(m), "pass_memplan failed");
  reepilogue(m);
  const Node *nodes[] = {h->def, p->def, a1->def, dwg->def, a2->def, dwu->def, a3->def};
  const int want[] = {EPI_RESIDUAL, 0, 0, 0, EPI_RESIDUAL, 0, 0};
  const char *names[] = {"h = o @ w_o", "p (read twice)", "a1 (x of the later GEMM)", "dw_g", "a2", "dw_u", "a3 (t after it)"};
  for (int k = 0; k < 7; k++)
    CHECK(nodes[k]->a.epilogue == want[k], "%s: epilogue %d, want %d", names[k], nodes[k]->a.epilogue, want[k]);
  int at[2];
  CHECK(epilogue_nodes(g, pos(g, a2), at) == 1 && at[0] == pos(g, s) && epilogue_owner(g, pos(g, s)) == pos(g, a2),
        "a2's epilogue is not the add s");
  CHECK(epilogue_owner(g, pos(g, r)) == pos(g, h) && epilogue_owner(g, pos(g, q)) < 0 && epilogue_owner(g, pos(g, u)) < 0,
        "epilogue_owner: r %d (want %d), q %d, u %d", epilogue_owner(g, pos(g, r)), pos(g, h), epilogue_owner(g, pos(g, q)),
        epilogue_owner(g, pos(g, u)));

  /* the cost model: no kernel for an absorbed add, the GEMM's extra bytes are its C's read */
  double extra = -1, bytes = 16 * 32 * 2;
  CHECK(cost_cuda_kernels(s->def, pos(g, s), &extra) == 0, "the absorbed add s still costs a kernel");
  CHECK(cost_cuda_kernels(a2->def, pos(g, a2), &extra) == 1 && extra == bytes, "a2's GEMM: extra %g bytes, want %g (a1's read)",
        extra, bytes);
  CHECK(cost_cuda_kernels(q->def, pos(g, q), &extra) == 1, "the add q (not absorbed) costs no kernel");

  /* placement: r over the GEMM's B is refused; over x's very bytes taken; half a row over x's refused */
  int64_t planned = r->offset;
  r->offset = w_o->offset;
  reepilogue(m);
  CHECK(h->def->a.epilogue == 0 && a2->def->a.epilogue == EPI_RESIDUAL, "r over w_o's bytes: h's epilogue %d, want 0",
        h->def->a.epilogue);
  r->offset = x->offset;
  reepilogue(m);
  CHECK(h->def->a.epilogue == EPI_RESIDUAL, "r over x's very bytes (in place): epilogue %d, want %d", h->def->a.epilogue,
        EPI_RESIDUAL);
  r->offset = x->offset + 16 * 2; /* (o lies before x: r meets x and what follows it, not the GEMM's A or B) */
  CHECK(!placed_meets(r, o) && !placed_meets(r, w_o), "the shifted r meets the GEMM's operands");
  reepilogue(m);
  CHECK(h->def->a.epilogue == 0, "r over half of x's rows, shifted: epilogue %d, want 0", h->def->a.epilogue);
  r->offset = o->offset;
  reepilogue(m);
  CHECK(h->def->a.epilogue == 0, "r over o's bytes, the GEMM's A: epilogue %d, want 0", h->def->a.epilogue);
  r->offset = planned;
  reepilogue(m);
  CHECK(h->def->a.epilogue == EPI_RESIDUAL, "r at its planned place: epilogue %d", h->def->a.epilogue);

  /* other targets: nothing moved, nothing absorbed */
  Module *c = tb_module(&a, "cpu");
  Graph *cg = c->graph;
  Value *cx = tb_input(cg, "x", DT_F32, act), *cg1 = tb_input(cg, "g1", DT_F32, wide), *cw = tb_input(cg, "w", DT_F32, tb_shape(2, 32, 64));
  Value *c1 = mm(cg, cg1, cw, false, true), *c2 = mm(cg, cg1, cw, false, true), *cd = mm(cg, cg1, cx, true, false);
  Value *cs = tb_op2(cg, OP_ADD, c1, c2, NULL);
  ir_add_result(cg, cs, "s");
  ir_add_result(cg, cd, "dw");
  CHECK(pass_fuse(c) && pos(cg, cs) == pos(cg, cd) + 1, "the CPU target's add moved");
  CHECK(pass_memplan(c) && pass_epilogue(c) && c2->def->a.epilogue == 0, "the CPU target got an epilogue");
  arena_free(&a);
  if (failures) fprintf(stderr, "test_epilogue: %d failures\n", failures);
  else printf("test_epilogue: ok\n");
  return failures ? 1 : 0;
}
