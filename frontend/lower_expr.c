/* frontend/lower_expr.c — expressions: numbers and booleans are computed at
 * compile time, tensor expressions become nodes in the current scope's graph
 * (captured into each enclosing repeat body they are used in); calls go to
 * lower_prim.c or lower_call.c.
 */
#include <math.h>
#include <string.h>

#include "diag.h"
#include "infer.h"
#include "lower.h"

static const LayerDecl *find_layer(Lower *L, const char *name) {
  for (int i = 0; i < L->fe->layers.n; i++) {
    const LayerDecl *ld = L->fe->layers.v[i];
    if (strcmp(ld->name, name) == 0) return ld;
  }
  return NULL;
}

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
  case V_FUNC: return arena_printf(L->a, "the function `%s`", v->prim ? fe_prim_name(v->prim) : v->layer->name);
  case V_TUPLE: return arena_printf(L->a, "%d values", v->n);
  case V_LIST: return "a list";
  }
  return "?";
}

/* Every name visible from s, plus layers and primitives, for "did you mean" hints. */
static void hint_name(Lower *L, Scope *s, const char *name, bool funcs) {
  PtrVec c = {0};
  for (Scope *p = s; p; p = p->parent)
    for (Binding *b = p->vars; b; b = b->next) vec_push(L->a, &c, (void *)b->name);
  for (int i = 0; i < L->fe->layers.n; i++) vec_push(L->a, &c, (void *)((LayerDecl *)L->fe->layers.v[i])->name);
  if (funcs) fe_push_prim_names(L, &c);
  if (!funcs) {
    vec_push(L->a, &c, "batch");
    vec_push(L->a, &c, "seq");
  }
  const char *h = diag_nearest(name, (const char *const *)c.v, c.n);
  if (h) note("did you mean `%s`?", h);
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

/* ---- evaluation ------------------------------------------------------------------------ */
static Val call_func(Lower *L, Scope *s, Val fn, const Expr *call) {
  Val *argv = ARENA_ARRAY(L->a, Val, call->args.n + 1);
  bool bad = false;
  for (int i = 0; i < call->args.n; i++) {
    argv[i] = fe_eval(L, s, ((Arg *)call->args.v[i])->value);
    bad |= argv[i].kind == V_NONE;
  }
  if (bad) return fe_none_val;
  if (fn.prim) return fe_call_prim(L, s, fn.prim, call, argv);
  return fe_call_layer(L, s, fn.layer, call, argv);
}

static Val eval_ident(Lower *L, Scope *s, const Expr *e) {
  bool crossed;
  Binding *b = fe_lookup(s, e->name, &crossed);
  if (b) {
    if (crossed && b->v.kind == V_TENSOR) {
      error_at(e->loc, "`%s` is a tensor of the model; a layer sees only its arguments and the model's constants", e->name);
      return fe_none_val;
    }
    return b->v;
  }
  if (strcmp(e->name, "batch") == 0) {
    /* the logical graph holds one micro-step of every data-parallel replica (micro x dp); the shard
     * pass splits it */
    Val v = fe_num_val((double)(L->m->batch.global / L->m->batch.accum), true);
    v.sym = 0;
    return v;
  }
  if (strcmp(e->name, "seq") == 0) {
    if (L->m->recipe.seq <= 0) {
      error_at(e->loc, "`seq` is not set: define `const seq = ...` in the model or `seq N` in the train block");
      return fe_none_val;
    }
    Val v = fe_num_val((double)L->m->recipe.seq, true);
    v.sym = 1;
    return v;
  }
  const LayerDecl *ld = find_layer(L, e->name);
  const Prim *p = fe_find_prim(e->name);
  if (ld || p) {
    Val v = fe_none_val;
    v.kind = V_FUNC;
    v.layer = ld;
    v.prim = ld ? NULL : p;
    return v;
  }
  error_at(e->loc, "unknown name `%s`", e->name);
  hint_name(L, s, e->name, false);
  return fe_none_val;
}

static Val arith(Lower *L, int op, Val a, Val b, SrcLoc loc) {
  double x = a.num, y = b.num;
  switch (op) {
  case '+': return fe_num_val(x + y, a.is_int && b.is_int);
  case '-': return fe_num_val(x - y, a.is_int && b.is_int);
  case '*': return fe_num_val(x * y, a.is_int && b.is_int);
  case '/':
    if (y == 0) {
      error_at(loc, "division by zero");
      return fe_none_val;
    }
    return fe_num_val(x / y, a.is_int && b.is_int && fmod(x, y) == 0);
  case 'p': {
    if (!a.is_int || !b.is_int || x < 0 || y < 1) {
      error_at(loc, "`pad` needs a non-negative integer and a positive multiple, got %g pad %g", x, y);
      return fe_none_val;
    }
    double r = ceil(x / y) * y;
    return fe_num_val(r, true);
  }
  case '<': return fe_bool_val(x < y);
  case '>': return fe_bool_val(x > y);
  case 'l': return fe_bool_val(x <= y);
  case 'g': return fe_bool_val(x >= y);
  case 'e': return fe_bool_val(x == y);
  case 'n': return fe_bool_val(x != y);
  }
  unreachable();
}

static const char *op_text(int op) {
  switch (op) {
  case 'p': return "pad";
  case 'l': return "<=";
  case 'g': return ">=";
  case 'e': return "==";
  case 'n': return "!=";
  case '+': return "+";
  case '-': return "-";
  case '*': return "*";
  case '/': return "/";
  case '@': return "@";
  case '<': return "<";
  case '>': return ">";
  }
  return "?";
}

/* An operand of `@` written as transpose(x): lowered as a transposed matmul operand. */
static bool is_transpose_call(Scope *s, const Expr *e) {
  bool crossed;
  return e->kind == E_CALL && strcmp(e->name, "transpose") == 0 && e->args.n == 1 &&
         !((Arg *)e->args.v[0])->name && !fe_lookup(s, "transpose", &crossed);
}

static Val eval_matmul(Lower *L, Scope *s, const Expr *e) {
  Attrs at = {0};
  const Expr *ea = e->a, *eb = e->b;
  if (is_transpose_call(s, ea)) {
    at.ta = true;
    ea = ((Arg *)ea->args.v[0])->value;
  }
  if (is_transpose_call(s, eb)) {
    at.tb = true;
    eb = ((Arg *)eb->args.v[0])->value;
  }
  Val a = fe_eval(L, s, ea), b = fe_eval(L, s, eb);
  if (a.kind == V_NONE || b.kind == V_NONE) return fe_none_val;
  if (a.kind != V_TENSOR || b.kind != V_TENSOR) {
    error_at(e->loc, "`@` needs two tensors, got %s and %s", fe_describe(L, &a), fe_describe(L, &b));
    return fe_none_val;
  }
  Value *in[2] = {a.t, b.t};
  return fe_tensor_val(fe_emit(L, s, OP_MATMUL, 2, in, &at, e->loc));
}

static Val eval_bin(Lower *L, Scope *s, const Expr *e) {
  if (e->op == '@') return eval_matmul(L, s, e);
  Val a = fe_eval(L, s, e->a), b = fe_eval(L, s, e->b);
  if (a.kind == V_NONE || b.kind == V_NONE) return fe_none_val;
  int op = e->op;
  if (a.kind == V_NUM && b.kind == V_NUM) return arith(L, op, a, b, e->loc);
  if ((op == 'e' || op == 'n') && a.kind == V_BOOL && b.kind == V_BOOL)
    return fe_bool_val((a.num == b.num) == (op == 'e'));
  bool ta = a.kind == V_TENSOR, tb = b.kind == V_TENSOR;
  bool arith_op = op == '+' || op == '-' || op == '*' || op == '/';
  if (!arith_op || !((ta && (tb || b.kind == V_NUM)) || (tb && a.kind == V_NUM))) {
    error_at(e->loc, "`%s` cannot combine %s and %s", op_text(op), fe_describe(L, &a), fe_describe(L, &b));
    return fe_none_val;
  }
  if (ta && tb) {
    OpKind k = op == '+' ? OP_ADD : op == '-' ? OP_SUB : op == '*' ? OP_MUL : OP_DIV;
    return fe_tensor_val(fe_emit2(L, s, k, a.t, b.t, e->loc));
  }
  Attrs at = {0};
  if (ta) { /* tensor op number */
    double y = b.num;
    switch (op) {
    case '+': at.scalar = y; return fe_tensor_val(fe_emit1(L, s, OP_ADD_SCALAR, a.t, &at, e->loc));
    case '-': at.scalar = -y; return fe_tensor_val(fe_emit1(L, s, OP_ADD_SCALAR, a.t, &at, e->loc));
    case '*': at.scalar = y; return fe_tensor_val(fe_emit1(L, s, OP_SCALE, a.t, &at, e->loc));
    default:
      if (y == 0) {
        error_at(e->loc, "division by zero");
        return fe_none_val;
      }
      at.scalar = 1.0 / y;
      return fe_tensor_val(fe_emit1(L, s, OP_SCALE, a.t, &at, e->loc));
    }
  }
  double x = a.num; /* number op tensor */
  switch (op) {
  case '+': at.scalar = x; return fe_tensor_val(fe_emit1(L, s, OP_ADD_SCALAR, b.t, &at, e->loc));
  case '*': at.scalar = x; return fe_tensor_val(fe_emit1(L, s, OP_SCALE, b.t, &at, e->loc));
  case '-': {
    Value *n = fe_emit1(L, s, OP_NEG, b.t, NULL, e->loc);
    if (!n) return fe_none_val;
    at.scalar = x;
    return fe_tensor_val(fe_emit1(L, s, OP_ADD_SCALAR, n, &at, e->loc));
  }
  default: {
    Value *c = fe_const_tensor(L, s, x, e->loc);
    return c ? fe_tensor_val(fe_emit2(L, s, OP_DIV, c, b.t, e->loc)) : fe_none_val;
  }
  }
}

Val fe_eval(Lower *L, Scope *s, const Expr *e) {
  switch (e->kind) {
  case E_ERROR: return fe_none_val; /* refused by the parser, reported there */
  case E_NUM: return fe_num_val(e->num, e->is_int);
  case E_BOOL: return fe_bool_val(e->num != 0);
  case E_STR: {
    Val v = fe_none_val;
    v.kind = V_STR;
    v.str = e->name;
    return v;
  }
  case E_IDENT: return eval_ident(L, s, e);
  case E_BIN: return eval_bin(L, s, e);
  case E_NEG: {
    Val a = fe_eval(L, s, e->a);
    if (a.kind == V_NUM) {
      Val r = fe_num_val(-a.num, a.is_int);
      return r;
    }
    if (a.kind == V_TENSOR) return fe_tensor_val(fe_emit1(L, s, OP_NEG, a.t, NULL, e->loc));
    if (a.kind != V_NONE) error_at(e->loc, "`-` cannot negate %s", fe_describe(L, &a));
    return fe_none_val;
  }
  case E_NOT: {
    Val a = fe_eval(L, s, e->a);
    bool b;
    if (!fe_need_bool(L, &a, "the operand of `not`", e->loc, &b)) return fe_none_val;
    return fe_bool_val(!b);
  }
  case E_CALL: {
    bool crossed;
    Binding *b = fe_lookup(s, e->name, &crossed);
    Val fn = fe_none_val;
    if (b) {
      if (b->v.kind == V_NONE) return fe_none_val;
      if (b->v.kind != V_FUNC) {
        error_at(e->loc, "`%s` is %s, not a function", e->name, fe_describe(L, &b->v));
        return fe_none_val;
      }
      fn = b->v;
    } else {
      const LayerDecl *ld = find_layer(L, e->name);
      const Prim *p = ld ? NULL : fe_find_prim(e->name);
      if (!ld && !p) {
        error_at(e->loc, "unknown function `%s`", e->name);
        hint_name(L, s, e->name, true);
        /* still evaluate the arguments for their own errors */
        for (int i = 0; i < e->args.n; i++) fe_eval(L, s, ((Arg *)e->args.v[i])->value);
        return fe_none_val;
      }
      fn.kind = V_FUNC;
      fn.layer = ld;
      fn.prim = p;
    }
    return call_func(L, s, fn, e);
  }
  case E_LIST:
  case E_TUPLE: {
    Val v = fe_none_val;
    v.kind = e->kind == E_LIST ? V_LIST : V_TUPLE;
    v.n = e->items.n;
    v.items = ARENA_ARRAY(L->a, Val, v.n + 1);
    for (int i = 0; i < v.n; i++) {
      v.items[i] = fe_eval(L, s, e->items.v[i]);
      if (v.items[i].kind == V_NONE) return fe_none_val;
    }
    return v;
  }
  }
  unreachable();
}
