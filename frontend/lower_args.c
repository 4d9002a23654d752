/* frontend/lower_args.c — calls' arguments: matched to parameters (primitives, initializers,
 * layers) by position and name, and a layer's shape patterns bound to its arguments' shapes.
 */
#include <string.h>

#include "diag.h"
#include "lower.h"

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

/* ---- shape patterns --------------------------------------------------------------- */
bool fe_match_pattern(Lower *L, Scope *ls, const LayerDecl *ld, const LayerParam *lp, Value *t, SrcLoc loc) {
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
