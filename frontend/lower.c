/* frontend/lower.c — the model block, evaluated into the IR's top graph.
 *
 * Constants, dims and layer options are evaluated at compile time; tensor
 * expressions become nodes (ir_infer checks each as it is made, so shape errors
 * point at the expression). A layer call becomes a CALL node whose body holds
 * that call's instance of the layer (its PARAM nodes inside); `repeat` becomes a
 * REPEAT node: names the body assigns that hold tensors before it are carried,
 * tensors it reads from outside are captured, and the body is lowered once.
 *
 * Names: a parameter's name is its dotted path, e.g. `blocks.attention.w_qkv`:
 * the repeat's name (`as NAME`, default `blocks`), the layer instance, the
 * parameter. A layer (or repeat) used again in the same scope gets a numbered
 * instance name: `layernorm`, `layernorm_2`, `layernorm_3`.
 *
 * This file holds the values, the scopes and fe_lower; lower.h lists the others.
 */
#include <math.h>
#include <string.h>

#include "diag.h"
#include "lower.h"

/* ---- values ------------------------------------------------------------------ */
const Val fe_none_val = {V_NONE, 0, false, -1, NULL, NULL, NULL, NULL, NULL, 0};

Val fe_num_val(double x, bool is_int) {
  Val v = fe_none_val;
  v.kind = V_NUM;
  v.num = x;
  v.is_int = is_int && x == floor(x) && fabs(x) < 9007199254740992.0;
  return v;
}

Val fe_bool_val(bool b) {
  Val v = fe_none_val;
  v.kind = V_BOOL;
  v.num = b;
  return v;
}

Val fe_tensor_val(Value *t) {
  Val v = fe_none_val;
  v.kind = t ? V_TENSOR : V_NONE;
  v.t = t;
  return v;
}

/* ---- scopes ------------------------------------------------------------------ */
struct Counter {
  const char *name; /* the instance name's base: a layer's or a repeat's */
  int n;            /* instances given out so far */
  Counter *next;    /* the scope's other counters */
};

Scope *fe_new_scope(Lower *L, ScopeKind k, Scope *parent, Graph *g, const char *prefix) {
  Scope *s = ARENA_NEW(L->a, Scope);
  s->kind = k;
  s->parent = parent;
  s->g = g;
  s->prefix = prefix;
  return s;
}

Binding *fe_find_local(Scope *s, const char *name) {
  for (Binding *b = s->vars; b; b = b->next)
    if (strcmp(b->name, name) == 0) return b;
  return NULL;
}

Binding *fe_lookup(Scope *s, const char *name, bool *crossed) {
  *crossed = false;
  for (; s; s = s->parent) {
    Binding *b = fe_find_local(s, name);
    if (b) return b;
    if (s->kind == SC_LAYER) *crossed = true;
  }
  return NULL;
}

Binding *fe_lookup_fn(Scope *s, const char *name, Scope **where) {
  for (; s; s = s->parent) {
    Binding *b = fe_find_local(s, name);
    if (b) {
      if (where) *where = s;
      return b;
    }
    if (s->kind == SC_LAYER || s->kind == SC_MODEL) break;
  }
  return NULL;
}

Binding *fe_bind(Lower *L, Scope *s, const char *name, Val v, bool is_const, SrcLoc loc) {
  Binding *b = ARENA_NEW(L->a, Binding);
  b->name = name;
  b->v = v;
  b->is_const = is_const;
  b->loc = loc;
  b->next = s->vars;
  s->vars = b;
  return b;
}

const char *fe_instance_name(Lower *L, Scope *s, const char *base) {
  for (Counter *c = s->counters; c; c = c->next)
    if (strcmp(c->name, base) == 0) return arena_printf(L->a, "%s_%d", base, ++c->n);
  Counter *c = ARENA_NEW(L->a, Counter);
  c->name = base;
  c->n = 1;
  c->next = s->counters;
  s->counters = c;
  return base;
}

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
  if (loss->v.kind == V_NONE) return;
  if (loss->v.kind != V_TENSOR || loss->v.t->shape.rank != 0) {
    error_at(loss->loc, "`loss` must be a scalar tensor, got %s", fe_describe(&L, &loss->v));
    return;
  }
  ir_add_result(m->graph, loss->v.t, "loss");
}
