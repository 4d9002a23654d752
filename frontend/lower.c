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

void fe_warn_unread_one(const Binding *b) {
  if (!b->assigned || b->read || b->v.kind != V_TENSOR || b->name[0] == '_') return;
  warning_at(b->set_at, "`%s` is assigned but never read: what computes this value is dropped", b->name);
  note("read it (e.g. `x = x + ...` to carry it), or name it `_%s` to keep it unused", b->name);
}

void fe_warn_unread(Scope *s, const char *except) {
  /* newest first: report in source order */
  int n = 0;
  for (Binding *b = s->vars; b; b = b->next) n++;
  for (int i = n - 1; i >= 0; i--) {
    Binding *b = s->vars;
    for (int k = 0; k < i; k++) b = b->next;
    if (!except || strcmp(b->name, except) != 0) fe_warn_unread_one(b);
  }
}
