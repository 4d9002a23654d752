/* frontend/lower_model.c — the model block to m->graph: the layers' names checked, the file's
 * constants and the model's statements lowered (lower_eval.c), its `loss` the graph's result.
 */
#include <string.h>

#include "diag.h"
#include "lower.h"

/* ---- the model ------------------------------------------------------------------------- */
void fe_lower(Fe *fe) {
  Lower L;
  memset(&L, 0, sizeof L);
  L.fe = fe;
  L.a = fe->a;
  L.m = fe->m;
  L.ret = fe_none_val;
  Module *m = fe->m;
  m->graph = ir_graph_new(fe->a, NULL);
  m->name = fe->model->name ? fe->model->name : "model";

  for (int i = 0; i < fe->layers.n; i++) {
    const LayerDecl *ld = fe->layers.v[i];
    if (fe_find_prim(ld->name)) error_at(ld->loc, "`%s` is a primitive; give the layer another name", ld->name);
    for (int j = 0; j < i; j++) {
      const LayerDecl *o = fe->layers.v[j];
      if (strcmp(o->name, ld->name) == 0) {
        error_at(ld->loc, "layer `%s` is defined twice", ld->name);
        note("the first definition is at %s:%d:%d", o->loc.file, o->loc.line, o->loc.col);
        break;
      }
    }
  }

  L.global = fe_new_scope(&L, SC_GLOBAL, NULL, m->graph, "");
  for (int i = 0; i < fe->consts.n; i++) fe_lower_stmt(&L, L.global, fe->consts.v[i]);
  L.model = fe_new_scope(&L, SC_MODEL, L.global, m->graph, "");
  fe_lower_block(&L, L.model, &fe->model->body);

  Binding *loss = fe_find_local(L.model, "loss");
  if (!loss) {
    if (diag_errors() == fe->errors0)
      error_at(fe->model->loc, "model `%s` defines no `loss` (e.g. `loss = cross_entropy(logits, targets)`)", m->name);
    return;
  }
  if (diag_errors() == fe->errors0) fe_warn_unread(L.model, "loss");
  if (loss->v.kind == V_NONE) return;
  if (loss->v.kind != V_TENSOR || loss->v.t->shape.rank != 0) {
    error_at(loss->loc, "`loss` must be a scalar tensor, got %s", fe_describe(&L, &loss->v));
    return;
  }
  ir_add_result(m->graph, loss->v.t, "loss");
}
