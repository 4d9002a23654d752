/* tests/passes/test_frontend_model.c — models/tiny.model through the front end, then autodiff.
 *
 * fe_compile + pass_inline + pass_shape + pass_autodiff on the bundled tiny GPT, shrunk with
 * -D overrides (d 16, seq 8, heads 2, batch 2) so the fp64 interpreter runs it quickly; every
 * param gets normal(0, 0.3) noise on its initial value; 6 sampled entries of every param's
 * gradient must match central differences within 1e-6 * max(1, |grad|). Then pass_optimizer:
 * one AdamW update per param, weight decay only on the per-layer matrices.
 */
#include <stdio.h>
#include <string.h>

#include "diag.h"
#include "frontend.h"
#include "passes.h"
#include "tb.h"

#define TOL 1e-6

int main(void) {
  Arena arena;
  arena_init(&arena);
  static const FeDefine defs[] = {{"d", "16"}, {"seq", "8"}, {"heads", "2"}, {"batch", "2"}, {"micro_batch", "2"}, {"dp", "1"}};
  FeOptions o = {.defines = defs, .ndefines = 6, .world = 1};
  Module *m = fe_compile(&arena, SHARDC_MODELS_DIR "/tiny.model", &o);
  if (!m) {
    fprintf(stderr, "FAIL: fe_compile\n");
    return 1;
  }
  if (!pass_inline(m) || !pass_shape(m) || !pass_autodiff(m) || !ir_verify(m->graph, "autodiff")) {
    fprintf(stderr, "FAIL: inline/shape/autodiff/verify\n");
    return 1;
  }
  int fails = tb_shapes_stable(m);
  int nrep = 0, nparam = 0;
  for (int i = 0; i < m->graph->nnodes; i++) {
    nrep += m->graph->nodes[i]->op == OP_REPEAT;
    nparam += m->graph->nodes[i]->op == OP_PARAM;
  }
  if (nrep != 2) {
    fprintf(stderr, "FAIL: %d REPEATs after autodiff, want 2\n", nrep);
    fails++;
  }
  TbFeed f[2] = {{"tokens", tb_randint(tb_shape(2, 2, 8), 11, 0, 256)}, {"targets", tb_randint(tb_shape(2, 2, 8), 12, 0, 256)}};
  fails += tb_fd_check(m, 2, f, 6, 1e-5, TOL, 0.3, "tiny.model");
  tensor_free(&f[0].t);
  tensor_free(&f[1].t);

  if (!pass_optimizer(m) || !ir_verify(m->graph, "optimizer")) {
    fprintf(stderr, "FAIL: optimizer/verify\n");
    fails++;
  } else {
    int nupd = 0;
    for (int i = 0; i < m->graph->nnodes; i++) {
      Node *n = m->graph->nodes[i];
      if (n->op != OP_ADAMW_UPDATE) continue;
      nupd++;
      const Value *p = n->in[0];
      bool stacked = false;
      for (int j = 0; j < m->graph->nnodes; j++) {
        Node *r = m->graph->nodes[j];
        for (int k = r->a.ncarry; r->op == OP_REPEAT && k < r->a.ncarry + r->a.nxs; k++) stacked |= r->in[k] == p;
      }
      bool matrix = p->shape.rank - stacked >= 2;
      if (n->a.weight_decay != (matrix ? m->recipe.weight_decay : 0.0)) {
        fprintf(stderr, "FAIL: %s (rank %d%s) has weight decay %g\n", p->def->a.name, p->shape.rank,
                stacked ? ", stacked" : "", n->a.weight_decay);
        fails++;
      }
    }
    if (nupd != nparam) {
      fprintf(stderr, "FAIL: %d updates for %d params\n", nupd, nparam);
      fails++;
    }
    printf("  tiny.model: %d params, %d AdamW updates\n", nparam, nupd);
  }
  arena_free(&arena);
  printf("%d failures (tolerance: |fd - grad| <= %g * max(1, |grad|))\n", fails, TOL);
  return fails ? 1 : 0;
}
