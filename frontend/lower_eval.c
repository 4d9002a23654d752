/* frontend/lower_eval.c — the lowering's recursive core: an expression may call a layer, whose body
 * is statements, whose parts are expressions. Here is only that recursion: evaluating expressions
 * (names, operators' operands, calls), expanding layer calls into CALL bodies, and the statements —
 * constants (and -D overrides of the model's constants), inputs, parameters (dotted names,
 * initializers), assignments, `if` (decided at compile time) and `repeat`, lowered once into a
 * REPEAT node's body (names the body assigns that hold tensors before it are carried, tensors it
 * reads from outside are captured). What the evaluated values become is below it: operators
 * (lower_ops.c), primitives (lower_prim.c), argument matching (lower_args.c), nodes (lower_emit.c).
 */
#include <math.h>
#include <string.h>

#include "diag.h"
#include "infer.h"
#include "lower.h"

#define MAX_CALL_DEPTH 32 /* layer calls open at once */
#define MAX_NESTING 100   /* blocks open at once */

static const LayerDecl *find_layer(Lower *L, const char *name) {
  for (int i = 0; i < L->fe->layers.n; i++) {
    const LayerDecl *ld = L->fe->layers.v[i];
    if (strcmp(ld->name, name) == 0) return ld;
  }
  return NULL;
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
    b->read = true;
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
    v.str = e->name;
    v.layer = ld;
    v.prim = ld ? NULL : p;
    return v;
  }
  error_at(e->loc, "unknown name `%s`", e->name);
  hint_name(L, s, e->name, false);
  return fe_none_val;
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
  return fe_binary(L, s, e->op, a, b, e->loc);
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
      fn.str = e->name;
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
      if (!fe_match_pattern(L, ls, ld, lp, v.t, vl)) {
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
  fe_warn_unread(ls, NULL);

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

static bool eval_shape(Lower *L, Scope *s, const PtrVec *dims, SrcLoc loc, Shape *out) {
  if (dims->n > IR_MAX_RANK) {
    error_at(loc, "a tensor has at most %d dims, got %d", IR_MAX_RANK, dims->n);
    return false;
  }
  int64_t d[IR_MAX_RANK];
  int16_t sym[IR_MAX_RANK];
  int64_t numel = 1;
  for (int i = 0; i < dims->n; i++) {
    const Expr *e = dims->v[i];
    Val v = fe_eval(L, s, e);
    if (!fe_need_int(L, &v, "a dimension", e->loc, 1, MAX_DIM, &d[i])) return false;
    sym[i] = (int16_t)v.sym;
    numel *= d[i];
    if (numel > MAX_NUMEL) {
      error_at(e->loc, "tensor too large (more than 2^50 elements)");
      return false;
    }
  }
  *out = ir_shape(dims->n, d);
  for (int i = 0; i < dims->n; i++) out->sym[i] = sym[i];
  return true;
}

static const char *const init_names[] = {"zeros", "ones", "normal", "uniform", "constant"};

static bool eval_init(Lower *L, Scope *s, const Expr *e, Attrs *at) {
  at->init = INIT_NORMAL;
  at->init_a = 0;
  at->init_b = 0.02;
  if (!e) return true;
  const char *name = e->kind == E_IDENT || e->kind == E_CALL ? e->name : NULL;
  int k = -1;
  for (int i = 0; name && i < 5; i++)
    if (strcmp(name, init_names[i]) == 0) k = i;
  if (k < 0) {
    if (name) {
      error_at(e->loc, "unknown initializer `%s` (zeros, ones, normal(mean, std), uniform(low, high), constant(value))", name);
      const char *h = diag_nearest(name, init_names, 5);
      if (h) note("did you mean `%s`?", h);
    } else {
      error_at(e->loc, "expected an initializer: zeros, ones, normal(mean, std), uniform(low, high) or constant(value)");
    }
    return false;
  }
  static const InitKind kinds[] = {INIT_ZEROS, INIT_ONES, INIT_NORMAL, INIT_UNIFORM, INIT_CONST};
  at->init = kinds[k];
  static const char *const pn[3][2] = {{"mean", "std"}, {"low", "high"}, {"value", NULL}};
  int np = k == 2 || k == 3 ? 2 : k == 4 ? 1 : 0;
  if (np == 0) {
    if (e->kind == E_CALL && e->args.n) {
      error_at(e->loc, "`%s` takes no arguments", name);
      return false;
    }
    return true;
  }
  if (e->kind != E_CALL) {
    error_at(e->loc, "`%s` needs arguments: %s(%s%s%s)", name, name, pn[k - 2][0], np > 1 ? ", " : "",
             np > 1 ? pn[k - 2][1] : "");
    return false;
  }
  Val *argv = ARENA_ARRAY(L->a, Val, e->args.n + 1);
  for (int i = 0; i < e->args.n; i++) argv[i] = fe_eval(L, s, ((Arg *)e->args.v[i])->value);
  Bound b;
  memset(&b, 0, sizeof b);
  if (!fe_bind_args(L, name, pn[k - 2], np, np, e, &b, argv)) return false;
  if (!fe_need_num(L, &b.v[0], arena_printf(L->a, "`%s`", pn[k - 2][0]), b.loc[0], &at->init_a)) return false;
  if (np > 1 && !fe_need_num(L, &b.v[1], arena_printf(L->a, "`%s`", pn[k - 2][1]), b.loc[1], &at->init_b)) return false;
  if (k == 2 && at->init_b < 0) {
    error_at(b.loc[1], "`std` must not be negative, got %g", at->init_b);
    return false;
  }
  if (k == 3 && at->init_b < at->init_a) { /* (was accepted: values drawn from (high, low]) */
    error_at(b.loc[1], "`high` %g is below `low` %g", at->init_b, at->init_a);
    return false;
  }
  return true;
}

static void define(Lower *L, Scope *s, const char *name, Val v, bool is_const, SrcLoc loc) {
  Binding *b = fe_find_local(s, name);
  if (b) {
    error_at(loc, "`%s` is already defined", name);
    if (b->loc.file) note("the first definition is at %s:%d:%d", b->loc.file, b->loc.line, b->loc.col);
    return;
  }
  fe_bind(L, s, name, v, is_const, loc);
}

static void assign(Lower *L, Scope *s, const char *name, Val v, SrcLoc loc) {
  Scope *where = NULL;
  Binding *b = fe_lookup_fn(s, name, &where);
  if (!b && s->kind == SC_MODEL) { /* the file's global constants */
    bool crossed;
    b = fe_lookup(s, name, &crossed);
    where = L->global;
  }
  if (b && b->is_const) {
    error_at(loc, "cannot assign to the constant `%s`", name);
    return;
  }
  if (b && where == s) {
    if (v.kind != V_NONE) fe_warn_unread_one(b);
    b->v = v;
    b->assigned = true, b->read = false, b->set_at = loc;
    return;
  }
  if (b && b->v.kind != V_NONE) { /* an outer non-tensor: a repeat body runs once at compile time */
    error_at(loc, "`%s` (%s) cannot change inside `repeat`: only tensors are carried between iterations", name,
             fe_describe(L, &b->v));
    return;
  }
  Binding *nb = fe_bind(L, s, name, v, false, loc);
  nb->assigned = true, nb->set_at = loc;
}

static void lower_const(Lower *L, Scope *s, const Stmt *st) {
  for (int i = 0; i < st->names.n; i++) {
    const char *name = st->names.v[i];
    SrcLoc loc = *(SrcLoc *)st->name_locs.v[i];
    Val v = fe_eval(L, s, st->values.v[i]);
    if (s->kind == SC_MODEL || s->kind == SC_GLOBAL) {
      vec_push(L->a, &L->fe->const_names, (void *)name);
      for (int d = 0; d < L->fe->opt->ndefines; d++) {
        const FeDefine *fd = &L->fe->opt->defines[d];
        if (strcmp(fd->key, name) != 0) continue;
        L->fe->define_used[d] = true;
        double x;
        if (strcmp(fd->value, "true") == 0 || strcmp(fd->value, "false") == 0) {
          v = fe_bool_val(fd->value[0] == 't');
        } else if (fe_parse_number(fd->value, &x)) {
          Val o = v;
          v = fe_num_val(x, x == floor(x));
          if (o.kind == V_NUM && o.is_int && !v.is_int) v.is_int = false;
        } else {
          error_at(fe_define_loc(L->fe, d, true), "-D %s=%s: the constant `%s` needs a number", fd->key, fd->value,
                   name);
          v = fe_none_val;
        }
      }
    }
    if (v.kind != V_NUM && v.kind != V_BOOL && v.kind != V_NONE && v.kind != V_STR) {
      error_at(loc, "the constant `%s` must be a number or a boolean, got %s", name, fe_describe(L, &v));
      v = fe_none_val;
    }
    if (v.kind == V_NUM && (strcmp(name, "batch") == 0 || strcmp(name, "seq") == 0))
      v.sym = name[0] == 'b' ? 0 : 1;
    if (v.kind == V_NUM && strcmp(name, "seq") == 0 && s->kind == SC_MODEL && v.is_int && v.num >= 1 && v.num < 1e12) {
      if (L->m->recipe.seq == 0) L->m->recipe.seq = (int64_t)v.num;
      else if (L->m->recipe.seq != (int64_t)v.num)
        error_at(loc, "the model's `seq` is %g but the train block's is %lld (use one, or -D seq=N for both)", v.num,
                 (long long)L->m->recipe.seq);
    }
    define(L, s, name, v, true, loc);
  }
}

static const char *const dtype_names[] = {"f32", "bf16", "f16", "f64", "i32", "i64"};

static const DType dtypes[] = {DT_F32, DT_BF16, DT_F16, DT_F64, DT_I32, DT_I64};

static void lower_input(Lower *L, Scope *s, const Stmt *st) {
  if (s->kind != SC_MODEL) {
    error_at(st->loc, "`input` belongs in the model block, not in a %s", s->kind == SC_LAYER ? "layer" : "repeat");
    return;
  }
  DType dt = DT_F32;
  if (st->dtype) {
    int k = -1;
    for (int i = 0; i < 6; i++)
      if (strcmp(st->dtype, dtype_names[i]) == 0) k = i;
    if (k < 0) {
      error_at(st->dtype_loc, "unknown dtype `%s` (f32, bf16, f16, f64, i32, i64)", st->dtype);
      const char *h = diag_nearest(st->dtype, dtype_names, 6);
      if (h) note("did you mean `%s`?", h);
      fe_bind(L, s, st->name, fe_none_val, false, st->loc);
      return;
    }
    dt = dtypes[k];
  }
  Shape sh;
  if (!eval_shape(L, s, &st->dims, st->loc, &sh)) {
    fe_bind(L, s, st->name, fe_none_val, false, st->loc);
    return;
  }
  Attrs at = {0};
  at.name = st->name;
  Value *v = fe_emit_typed(L, s, OP_INPUT, 0, NULL, &at, dt, sh, st->loc);
  if (v) v->name = st->name;
  define(L, s, st->name, fe_tensor_val(v), false, st->loc);
}

static void lower_param(Lower *L, Scope *s, const Stmt *st) {
  Shape sh;
  Attrs at = {0};
  bool ok = eval_shape(L, s, &st->dims, st->loc, &sh);
  ok = eval_init(L, s, st->init, &at) && ok;
  if (!ok) {
    if (!fe_find_local(s, st->name)) fe_bind(L, s, st->name, fe_none_val, false, st->loc);
    return;
  }
  at.name = arena_printf(L->a, "%s%s", s->prefix, st->name);
  Value *v = fe_emit_typed(L, s, OP_PARAM, 0, NULL, &at, DT_F32, sh, st->loc);
  if (v) v->name = at.name;
  define(L, s, st->name, fe_tensor_val(v), false, st->loc);
}

static void lower_assign(Lower *L, Scope *s, const Stmt *st) {
  Val v = fe_eval(L, s, st->value);
  int n = st->names.n;
  if (v.kind == V_TUPLE && n == 1) {
    error_at(st->value->loc, "this gives %d values; name each: `a, b = ...`", v.n);
    v = fe_none_val;
  } else if (n > 1 && v.kind != V_NONE && (v.kind != V_TUPLE || v.n != n)) {
    error_at(st->value->loc, "%d names on the left but the right side gives %s", n,
             v.kind == V_TUPLE ? arena_printf(L->a, "%d values", v.n) : "one value");
    v = fe_none_val;
  }
  for (int i = 0; i < n; i++) {
    Val vi = n == 1 ? v : v.kind == V_TUPLE ? v.items[i] : fe_none_val;
    assign(L, s, st->names.v[i], vi, *(SrcLoc *)st->name_locs.v[i]);
  }
}

/* Names a block assigns, including inside nested if and repeat blocks. */
static void collect_assigned(Lower *L, const PtrVec *stmts, PtrVec *out) {
  for (int i = 0; i < stmts->n; i++) {
    const Stmt *st = stmts->v[i];
    if (st->kind == S_ASSIGN) {
      for (int j = 0; j < st->names.n; j++) {
        bool seen = false;
        for (int k = 0; k < out->n && !seen; k++) seen = strcmp(out->v[k], st->names.v[j]) == 0;
        if (!seen) vec_push(L->a, out, st->names.v[j]);
      }
    } else if (st->kind == S_IF) {
      collect_assigned(L, &st->body, out);
      collect_assigned(L, &st->els, out);
    } else if (st->kind == S_REPEAT) {
      collect_assigned(L, &st->body, out);
    }
  }
}

static void lower_repeat(Lower *L, Scope *s, const Stmt *st) {
  Val cv = fe_eval(L, s, st->value);
  int64_t count;
  if (!fe_need_int(L, &cv, "the repeat count", st->value->loc, 1, 1 << 20, &count)) count = 0;
  const char *rname = fe_instance_name(L, s, st->name ? st->name : "blocks");

  Region *r = ARENA_NEW(L->a, Region);
  r->body = ir_graph_new(L->a, s->g);
  r->outer = s->region;
  r->outer_g = s->g;
  Scope *bs = fe_new_scope(L, SC_REPEAT, s, r->body, arena_printf(L->a, "%s%s.", s->prefix, rname));
  bs->region = r;

  /* Carried values: tensors the body assigns that exist before it. */
  PtrVec names = {0}, carried = {0}, inits = {0};
  collect_assigned(L, &st->body, &names);
  for (int i = 0; i < names.n; i++) {
    Binding *b = fe_lookup_fn(s, names.v[i], NULL);
    if (!b || b->v.kind != V_TENSOR) continue;
    b->read = true; /* the carry's initial value */
    Value *init = fe_use(L, s, b->v.t);
    Node *arg = ir_add_arg(r->body, init->dtype, init->shape, names.v[i]);
    arg->loc = st->loc;
    fe_bind(L, bs, names.v[i], fe_tensor_val(arg->out[0]), false, st->loc);
    vec_push(L->a, &carried, names.v[i]);
    vec_push(L->a, &inits, init);
  }
  int nc = carried.n;
  if (count < 1) { /* refused above: the body is not evaluated (its expressions may divide by the count) */
    for (int i = 0; i < nc; i++) assign(L, s, carried.v[i], fe_none_val, st->loc);
    return;
  }
  fe_lower_block(L, bs, &st->body);
  if (L->returned) {
    L->returned = false;
    error_at(st->loc, "`return` inside `repeat`");
  }

  bool ok = count > 0;
  for (int i = 0; i < nc && ok; i++) {
    Binding *b = fe_find_local(bs, carried.v[i]);
    b->read = true; /* carried out of the body */
    Value *init = inits.v[i];
    if (b->v.kind != V_TENSOR) {
      if (b->v.kind != V_NONE)
        error_at(b->loc, "`%s` enters the repeat as a tensor but leaves it as %s", (char *)carried.v[i],
                 fe_describe(L, &b->v));
      ok = false;
      break;
    }
    Value *out = fe_use(L, bs, b->v.t);
    if (out->dtype != init->dtype || !ir_shape_eq(&out->shape, &init->shape)) {
      error_at(b->loc, "`%s` enters the repeat as %s%s but the body leaves it as %s%s; a carried value keeps its type",
               (char *)carried.v[i], ir_dtype_name(init->dtype), fe_shape_str(L, &init->shape),
               ir_dtype_name(out->dtype), fe_shape_str(L, &out->shape));
      ok = false;
      break;
    }
    ir_add_result(r->body, out, carried.v[i]);
  }
  if (!ok) {
    for (int i = 0; i < nc; i++) assign(L, s, carried.v[i], fe_none_val, st->loc);
    return;
  }
  fe_warn_unread(bs, NULL); /* a body's value neither carried nor read: its computation is dropped */
  int nin = nc + r->cap_from.n;
  Value **ins = ARENA_ARRAY(L->a, Value *, nin + 1);
  for (int i = 0; i < nc; i++) ins[i] = inits.v[i];
  for (int i = 0; i < r->cap_from.n; i++) ins[nc + i] = r->cap_from.v[i];
  /* Inputs are already in s->g: build the node directly (fe_make_node() would re-capture nothing). */
  Node *n = ir_node_new(s->g, OP_REPEAT, nin, ins, nc, st->loc);
  n->body = r->body;
  r->body->owner = n;
  n->a.name = rname;
  n->a.count = count;
  n->a.ncarry = nc;
  n->a.nxs = 0;
  bool inf = ir_infer(n);
  for (int i = 0; i < nc; i++) assign(L, s, carried.v[i], inf ? fe_tensor_val(n->out[i]) : fe_none_val, st->loc);
}

void fe_lower_stmt(Lower *L, Scope *s, const Stmt *st) {
  switch (st->kind) {
  case S_CONST: lower_const(L, s, st); break;
  case S_INPUT: lower_input(L, s, st); break;
  case S_PARAM:
    if (s->kind == SC_GLOBAL) error_at(st->loc, "`param` belongs in a model or a layer");
    else lower_param(L, s, st);
    break;
  case S_ASSIGN: lower_assign(L, s, st); break;
  case S_REPEAT: lower_repeat(L, s, st); break;
  case S_RETURN: {
    Scope *f = s;
    while (f->kind == SC_REPEAT) f = f->parent;
    if (f->kind != SC_LAYER) {
      error_at(st->loc, "`return` outside a layer");
      break;
    }
    if (s->kind == SC_REPEAT) {
      error_at(st->loc, "`return` inside `repeat`");
      break;
    }
    Val v = fe_none_val;
    if (st->values.n == 1) {
      v = fe_eval(L, s, st->values.v[0]);
    } else {
      v.kind = V_TUPLE;
      v.n = st->values.n;
      v.items = ARENA_ARRAY(L->a, Val, v.n);
      for (int i = 0; i < v.n; i++) v.items[i] = fe_eval(L, s, st->values.v[i]);
    }
    L->ret = v;
    L->returned = true;
    break;
  }
  case S_IF: {
    Val c = fe_eval(L, s, st->value);
    bool b;
    if (c.kind == V_NUM) b = c.num != 0;
    else if (!fe_need_bool(L, &c, "the condition of `if`", st->value->loc, &b)) break;
    fe_lower_block(L, s, b ? &st->body : &st->els);
    break;
  }
  }
}

void fe_lower_block(Lower *L, Scope *s, const PtrVec *stmts) {
  if (++L->nesting > MAX_NESTING) {
    if (stmts->n) error_at(((Stmt *)stmts->v[0])->loc, "blocks nested too deeply (more than %d)", MAX_NESTING);
    L->nesting--;
    return;
  }
  for (int i = 0; i < stmts->n && !L->returned; i++) fe_lower_stmt(L, s, stmts->v[i]);
  L->nesting--;
}
