/* frontend/lower_emit.c — what every lowering file builds with: nodes in the current scope's
 * graph (values captured into each enclosing repeat body they are used in), values described for
 * messages, and value checks that report a value of the wrong kind.
 */
#include <math.h>
#include <string.h>

#include "diag.h"
#include "infer.h"
#include "lower.h"

/* ---- diagnostics helpers ---------------------------------------------------------- */
const char *fe_shape_str(Lower *L, const Shape *s) {
  const char *r = "[";
  for (int i = 0; i < s->rank; i++) r = arena_printf(L->a, "%s%s%lld", r, i ? ", " : "", (long long)s->dim[i]);
  return arena_printf(L->a, "%s]", r);
}

const char *fe_describe(Lower *L, const Val *v) {
  switch (v->kind) {
  case V_NONE: return "an invalid value";
  case V_NUM: return arena_printf(L->a, "the number %g", v->num);
  case V_BOOL: return v->num ? "true" : "false";
  case V_STR: return "a string";
  case V_TENSOR: return arena_printf(L->a, "a tensor %s%s", ir_dtype_name(v->t->dtype), fe_shape_str(L, &v->t->shape));
  case V_FUNC: return arena_printf(L->a, "the function `%s`", v->str);
  case V_TUPLE: return arena_printf(L->a, "%d values", v->n);
  case V_LIST: return "a list";
  }
  return "?";
}

/* ---- tensors in graphs ------------------------------------------------------------- */
/* Makes v usable in graph g (of region r): captures it through each enclosing repeat. */
static Value *use_in(Lower *L, Graph *g, Region *r, Value *v) {
  if (v->def->graph == g) return v;
  if (!r) die("lower: value %d is not reachable from this graph", v->id);
  Value *outer = use_in(L, r->outer_g, r->outer, v);
  for (int i = 0; i < r->cap_from.n; i++)
    if (r->cap_from.v[i] == outer) return r->cap_to.v[i];
  Node *arg = ir_add_arg(r->body, outer->dtype, outer->shape, outer->name);
  arg->loc = outer->def->loc;
  vec_push(L->a, &r->cap_from, outer);
  vec_push(L->a, &r->cap_to, arg->out[0]);
  return arg->out[0];
}

Value *fe_use(Lower *L, Scope *s, Value *v) { return use_in(L, s->g, s->region, v); }

Node *fe_make_node(Lower *L, Scope *s, OpKind op, int nin, Value **ins, int nout, const Attrs *at, SrcLoc loc) {
  Value *in2[16] = {0};
  Value **pin = nin <= 16 ? in2 : ARENA_ARRAY(L->a, Value *, nin);
  for (int i = 0; i < nin; i++) pin[i] = fe_use(L, s, ins[i]);
  Node *n = ir_node_new(s->g, op, nin, pin, nout, loc);
  if (at) n->a = *at;
  return n;
}

Value *fe_emit(Lower *L, Scope *s, OpKind op, int nin, Value **ins, const Attrs *at, SrcLoc loc) {
  Node *n = fe_make_node(L, s, op, nin, ins, 1, at, loc);
  return ir_infer(n) ? n->out[0] : NULL;
}

Value *fe_emit1(Lower *L, Scope *s, OpKind op, Value *x, const Attrs *at, SrcLoc loc) {
  return fe_emit(L, s, op, 1, &x, at, loc);
}

Value *fe_emit2(Lower *L, Scope *s, OpKind op, Value *a, Value *b, SrcLoc loc) {
  Value *in[2] = {a, b};
  return fe_emit(L, s, op, 2, in, NULL, loc);
}

Value *fe_emit_typed(Lower *L, Scope *s, OpKind op, int nin, Value **ins, const Attrs *at, DType dt, Shape sh,
                         SrcLoc loc) {
  Node *n = fe_make_node(L, s, op, nin, ins, 1, at, loc);
  n->out[0]->dtype = dt;
  n->out[0]->shape = sh;
  return ir_infer(n) ? n->out[0] : NULL;
}

Value *fe_const_tensor(Lower *L, Scope *s, double x, SrcLoc loc) {
  Attrs at = {0};
  at.scalar = x;
  return fe_emit_typed(L, s, OP_CONST, 0, NULL, &at, DT_F32, ir_scalar_shape(), loc);
}

/* ---- value checks -------------------------------------------------------------------- */
Value *fe_need_tensor(Lower *L, const Val *v, const char *what, SrcLoc loc) {
  if (v->kind == V_TENSOR) return v->t;
  if (v->kind != V_NONE) error_at(loc, "%s must be a tensor, got %s", what, fe_describe(L, v));
  return NULL;
}

bool fe_need_num(Lower *L, const Val *v, const char *what, SrcLoc loc, double *out) {
  if (v->kind == V_NUM && isfinite(v->num)) {
    *out = v->num;
    return true;
  }
  if (v->kind == V_NUM) error_at(loc, "%s is not a finite number", what);
  else if (v->kind != V_NONE) error_at(loc, "%s must be a number, got %s", what, fe_describe(L, v));
  return false;
}

bool fe_need_int(Lower *L, const Val *v, const char *what, SrcLoc loc, int64_t lo, int64_t hi, int64_t *out) {
  double x;
  if (!fe_need_num(L, v, what, loc, &x)) return false;
  if (x != floor(x)) {
    error_at(loc, "%s must be a whole number, got %g", what, x);
    return false;
  }
  if (x < (double)lo || x > (double)hi) {
    if (hi == MAX_DIM && lo == 1) error_at(loc, "%s must be a positive integer below 2^40, got %g", what, x);
    else error_at(loc, "%s must be between %lld and %lld, got %g", what, (long long)lo, (long long)hi, x);
    return false;
  }
  *out = (int64_t)x;
  return true;
}

bool fe_need_bool(Lower *L, const Val *v, const char *what, SrcLoc loc, bool *out) {
  if (v->kind == V_BOOL) {
    *out = v->num != 0;
    return true;
  }
  if (v->kind != V_NONE) error_at(loc, "%s must be true or false, got %s", what, fe_describe(L, v));
  return false;
}
