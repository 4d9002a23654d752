/* frontend/lower_call.c — calls: matching arguments to parameters (for
 * primitives, initializers and layers), and layer calls. A layer call is lowered
 * into its own body graph, in a scope that sees only its arguments and the
 * model's constants, and becomes a CALL node (pass_inline expands it).
 */
#include <string.h>

#include "diag.h"
#include "infer.h"
#include "lower.h"

#define MAX_CALL_DEPTH 32 /* layer calls open at once */

/* ---- argument matching --------------------------------------------------------- */
bool fe_match_args(const char *what, const char *fname, const char *const *pnames, int np, const Expr *call,
                   const Val *argv, Val *v, SrcLoc *loc, bool *given) {
  bool ok = true;
  int pos = 0;
  for (int i = 0; i < call->args.n; i++) {
    const Arg *a = call->args.v[i];
    int k;
    if (!a->name) {
      k = pos++;
      if (k >= np) {
        error_at(a->loc, "`%s` takes %d argument%s, got %d", fname, np, np == 1 ? "" : "s", call->args.n);
        return false;
      }
    } else {
      for (k = 0; k < np; k++)
        if (strcmp(pnames[k], a->name) == 0) break;
      if (k == np) {
        error_at(a->loc, "%s has no argument `%s`", what, a->name);
        const char *h = diag_nearest(a->name, pnames, np);
        if (h) note("did you mean `%s`?", h);
        ok = false;
        continue;
      }
    }
    if (given[k]) {
      error_at(a->loc, "argument `%s` of `%s` is given twice", pnames[k], fname);
      ok = false;
      continue;
    }
    given[k] = true;
    v[k] = argv[i];
    loc[k] = a->value->loc;
  }
  return ok;
}

bool fe_bind_args(Lower *L, const char *fname, const char *const *pnames, int np, int nreq, const Expr *call,
                  Bound *out, Val *argv) {
  bool ok = fe_match_args(arena_printf(L->a, "`%s`", fname), fname, pnames, np, call, argv, out->v, out->loc, out->given);
  for (int k = 0; k < np && ok; k++)
    if (out->given[k] && out->v[k].kind == V_NONE) ok = false;
  for (int k = 0; k < nreq && ok; k++)
    if (!out->given[k]) {
      error_at(call->loc, "`%s` is missing its argument `%s`", fname, pnames[k]);
      ok = false;
    }
  return ok;
}

/* ---- layer calls ---------------------------------------------------------------------- */
static bool match_pattern(Lower *L, Scope *ls, const LayerDecl *ld, const LayerParam *lp, Value *t, SrcLoc loc) {
  const Shape *sh = &t->shape;
  int np = lp->pattern.n, ell = -1;
  for (int i = 0; i < np; i++)
    if (((DimPat *)lp->pattern.v[i])->kind == PAT_ELLIPSIS) {
      if (ell >= 0) {
        error_at(((DimPat *)lp->pattern.v[i])->loc, "at most one `...` in a shape pattern");
        return false;
      }
      ell = i;
    }
  const char *pat = "[";
  for (int i = 0; i < np; i++) {
    const DimPat *d = lp->pattern.v[i];
    const char *w = d->kind == PAT_NAME ? d->name : d->kind == PAT_NUM ? arena_printf(L->a, "%g", d->num) : "...";
    pat = arena_printf(L->a, "%s%s%s", pat, i ? ", " : "", w);
  }
  pat = arena_printf(L->a, "%s]", pat);
  int fixed = ell >= 0 ? np - 1 : np;
  if (ell >= 0 ? sh->rank < fixed : sh->rank != fixed) {
    error_at(loc, "argument `%s` of `%s` has shape %s (rank %d) but the layer expects %s (rank %s%d)", lp->name,
             ld->name, fe_shape_str(L, sh), sh->rank, pat, ell >= 0 ? ">= " : "", fixed);
    return false;
  }
  for (int i = 0; i < np; i++) {
    const DimPat *d = lp->pattern.v[i];
    if (d->kind == PAT_ELLIPSIS) continue;
    int di = ell >= 0 && i > ell ? sh->rank - (np - i) : i;
    int64_t got = sh->dim[di];
    if (d->kind == PAT_NUM) {
      if ((double)got != d->num) {
        error_at(loc, "argument `%s` of `%s` has shape %s but the layer expects %s: dim %d is %lld, not %g", lp->name,
                 ld->name, fe_shape_str(L, sh), pat, di, (long long)got, d->num);
        return false;
      }
      continue;
    }
    if (strcmp(d->name, "_") == 0) continue;
    Binding *b = fe_find_local(ls, d->name);
    if (b) {
      if (b->v.kind == V_NUM && b->v.num != (double)got) {
        error_at(loc, "argument `%s` of `%s` has shape %s but `%s` is already %g", lp->name, ld->name,
                 fe_shape_str(L, sh), d->name, b->v.num);
        return false;
      }
      continue;
    }
    Val v = fe_num_val((double)got, true);
    v.sym = sh->sym[di];
    fe_bind(L, ls, d->name, v, true, d->loc);
  }
  return true;
}

Val fe_call_layer(Lower *L, Scope *s, const LayerDecl *ld, const Expr *call, Val *argv) {
  SrcLoc loc = call->loc;
  for (int i = 0; i < L->active.n; i++)
    if (L->active.v[i] == ld) {
      error_at(loc, "layer `%s` calls itself (through %d call%s); layers cannot be recursive", ld->name,
               L->active.n - i, L->active.n - i == 1 ? "" : "s");
      return fe_none_val;
    }
  if (L->active.n >= MAX_CALL_DEPTH) {
    error_at(loc, "layer calls nested more than %d deep", MAX_CALL_DEPTH);
    return fe_none_val;
  }
  int np = ld->params.n;
  const char **pnames = ARENA_ARRAY(L->a, const char *, np + 1);
  for (int i = 0; i < np; i++) pnames[i] = ((LayerParam *)ld->params.v[i])->name;
  /* Bind arguments (any number of parameters: arrays, not a Bound). */
  Val *bv = ARENA_ARRAY(L->a, Val, np + 1);
  SrcLoc *bl = ARENA_ARRAY(L->a, SrcLoc, np + 1);
  bool *given = ARENA_ARRAY(L->a, bool, np + 1);
  bool ok = fe_match_args(arena_printf(L->a, "layer `%s`", ld->name), ld->name, pnames, np, call, argv, bv, bl, given);
  for (int k = 0; k < np && ok; k++) {
    const LayerParam *lp = ld->params.v[k];
    if (!given[k] && !lp->def) {
      error_at(loc, "`%s` is missing its argument `%s`", ld->name, lp->name);
      ok = false;
    }
  }
  if (!ok) return fe_none_val;

  const char *inst = fe_instance_name(L, s, ld->name);
  Graph *body = ir_graph_new(L->a, s->g);
  Scope *ls = fe_new_scope(L, SC_LAYER, L->model, body, arena_printf(L->a, "%s%s.", s->prefix, inst));
  PtrVec inputs = {0};
  for (int k = 0; k < np && ok; k++) {
    const LayerParam *lp = ld->params.v[k];
    Val v = given[k] ? bv[k] : fe_eval(L, ls, lp->def);
    SrcLoc vl = given[k] ? bl[k] : loc;
    if (v.kind == V_NONE) {
      ok = false;
      break;
    }
    if (lp->has_pattern) {
      if (v.kind != V_TENSOR) {
        error_at(vl, "argument `%s` of `%s` must be a tensor, got %s", lp->name, ld->name, fe_describe(L, &v));
        ok = false;
        break;
      }
      if (!match_pattern(L, ls, ld, lp, v.t, vl)) {
        ok = false;
        break;
      }
    }
    if (v.kind == V_TENSOR && v.t->def->graph != body) { /* a default computed in the body stays there */
      Value *outer = fe_use(L, s, v.t);
      Node *arg = ir_add_arg(body, outer->dtype, outer->shape, lp->name);
      arg->loc = lp->loc;
      vec_push(L->a, &inputs, outer);
      v = fe_tensor_val(arg->out[0]);
    }
    if (fe_find_local(ls, lp->name)) {
      error_at(lp->loc, "`%s` names both an argument and a dim of a shape pattern", lp->name);
      ok = false;
      break;
    }
    fe_bind(L, ls, lp->name, v, false, lp->loc);
  }
  if (!ok) return fe_none_val;

  vec_push(L->a, &L->active, (void *)ld);
  bool saved_returned = L->returned;
  Val saved_ret = L->ret;
  L->returned = false;
  L->ret = fe_none_val;
  int errors = diag_errors();
  fe_lower_block(L, ls, &ld->body);
  Val ret = L->ret;
  bool returned = L->returned;
  L->returned = saved_returned;
  L->ret = saved_ret;
  L->active.n--;
  if (diag_errors() != errors) { /* the body's errors may be in another file: say which call led there */
    note_at(loc, "in the call of layer `%s` here", ld->name);
    return fe_none_val;
  }
  if (!returned) {
    error_at(ld->loc, "layer `%s` ends without `return`", ld->name);
    return fe_none_val;
  }

  /* Tensor results become the CALL's outputs; other values pass through. */
  int nr = ret.kind == V_TUPLE ? ret.n : 1;
  Val *rv = ret.kind == V_TUPLE ? ret.items : &ret;
  Val *outv = ARENA_ARRAY(L->a, Val, nr);
  int nt = 0;
  for (int i = 0; i < nr; i++) {
    if (rv[i].kind == V_NONE) return fe_none_val;
    if (rv[i].kind == V_TENSOR) {
      ir_add_result(body, fe_use(L, ls, rv[i].t), NULL);
      nt++;
    }
  }
  Node *n = ir_node_new(s->g, OP_CALL, inputs.n, (Value **)inputs.v, nt, loc);
  n->body = body;
  body->owner = n;
  n->a.name = inst;
  if (!ir_infer(n)) return fe_none_val;
  int t = 0;
  for (int i = 0; i < nr; i++) outv[i] = rv[i].kind == V_TENSOR ? fe_tensor_val(n->out[t++]) : rv[i];
  if (nr == 1) return outv[0];
  Val tup = fe_none_val;
  tup.kind = V_TUPLE;
  tup.n = nr;
  tup.items = outv;
  return tup;
}
