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
 */
#include <math.h>
#include <string.h>

#include "diag.h"
#include "fe.h"
#include "infer.h"

#define MAX_NESTING 100
#define MAX_CALL_DEPTH 32
#define MAX_DIM ((int64_t)1 << 40)
#define MAX_NUMEL ((int64_t)1 << 50)

/* ---- values ------------------------------------------------------------------ */
typedef enum { V_NONE, V_NUM, V_BOOL, V_STR, V_TENSOR, V_FUNC, V_TUPLE, V_LIST } ValKind;

typedef struct Prim Prim;
typedef struct Val Val;
struct Val {
  ValKind kind;  /* V_NONE: the result of an error already reported */
  double num;    /* V_NUM, V_BOOL */
  bool is_int;   /* V_NUM */
  int sym;       /* V_NUM: symbolic dim index (batch, seq) or -1 */
  const char *str;
  Value *t;      /* V_TENSOR */
  const Prim *prim;       /* V_FUNC: a primitive, or */
  const LayerDecl *layer; /* V_FUNC: a layer */
  Val *items;    /* V_TUPLE, V_LIST */
  int n;
};

static const Val none_val = {V_NONE, 0, false, -1, NULL, NULL, NULL, NULL, NULL, 0};

static Val num_val(double x, bool is_int) {
  Val v = none_val;
  v.kind = V_NUM;
  v.num = x;
  v.is_int = is_int && x == floor(x) && fabs(x) < 9007199254740992.0;
  return v;
}

static Val bool_val(bool b) {
  Val v = none_val;
  v.kind = V_BOOL;
  v.num = b;
  return v;
}

static Val tensor_val(Value *t) {
  Val v = none_val;
  v.kind = t ? V_TENSOR : V_NONE;
  v.t = t;
  return v;
}

/* ---- scopes ------------------------------------------------------------------ */
typedef struct Binding Binding;
struct Binding {
  const char *name;
  Val v;
  bool is_const;
  SrcLoc loc;
  Binding *next;
};

typedef struct Region Region;
struct Region {
  Graph *body;
  Region *outer;   /* region of the enclosing graph, NULL when that is not a repeat body */
  Graph *outer_g;
  PtrVec cap_from; /* Value*: captured values, in outer_g */
  PtrVec cap_to;   /* Value*: the body ARGs standing for them */
};

typedef struct Counter Counter;
struct Counter {
  const char *name;
  int n;
  Counter *next;
};

typedef enum { SC_GLOBAL, SC_MODEL, SC_LAYER, SC_REPEAT } ScopeKind;

typedef struct Scope Scope;
struct Scope {
  ScopeKind kind;
  Scope *parent;
  Graph *g;          /* where nodes made in this scope go */
  Region *region;    /* SC_REPEAT */
  Binding *vars;
  Counter *counters; /* instance names given out in this scope */
  const char *prefix; /* dotted path of this scope's parameters, e.g. "blocks.attention." */
};

typedef struct {
  Fe *fe;
  Arena *a;
  Module *m;
  Scope *global, *model;
  PtrVec active;   /* LayerDecl*: calls being expanded, for recursion */
  int nesting;
  bool returned;   /* a `return` ran in the layer being expanded */
  Val ret;
} Lower;

static Scope *new_scope(Lower *L, ScopeKind k, Scope *parent, Graph *g, const char *prefix) {
  Scope *s = ARENA_NEW(L->a, Scope);
  s->kind = k;
  s->parent = parent;
  s->g = g;
  s->prefix = prefix;
  return s;
}

static Binding *find_local(Scope *s, const char *name) {
  for (Binding *b = s->vars; b; b = b->next)
    if (strcmp(b->name, name) == 0) return b;
  return NULL;
}

/* Looks a name up from s outwards; *crossed is set when the binding lies beyond a layer's scope. */
static Binding *lookup(Scope *s, const char *name, bool *crossed) {
  *crossed = false;
  for (; s; s = s->parent) {
    Binding *b = find_local(s, name);
    if (b) return b;
    if (s->kind == SC_LAYER) *crossed = true;
  }
  return NULL;
}

/* Looks a name up within the current function (the layer or the model), not beyond. */
static Binding *lookup_fn(Scope *s, const char *name, Scope **where) {
  for (; s; s = s->parent) {
    Binding *b = find_local(s, name);
    if (b) {
      if (where) *where = s;
      return b;
    }
    if (s->kind == SC_LAYER || s->kind == SC_MODEL) break;
  }
  return NULL;
}

static Binding *bind(Lower *L, Scope *s, const char *name, Val v, bool is_const, SrcLoc loc) {
  Binding *b = ARENA_NEW(L->a, Binding);
  b->name = name;
  b->v = v;
  b->is_const = is_const;
  b->loc = loc;
  b->next = s->vars;
  s->vars = b;
  return b;
}

static const char *instance_name(Lower *L, Scope *s, const char *base) {
  for (Counter *c = s->counters; c; c = c->next)
    if (strcmp(c->name, base) == 0) return arena_printf(L->a, "%s_%d", base, ++c->n);
  Counter *c = ARENA_NEW(L->a, Counter);
  c->name = base;
  c->n = 1;
  c->next = s->counters;
  s->counters = c;
  return base;
}

/* ---- primitives ------------------------------------------------------------------ */
typedef enum {
  P_MATMUL, P_EMBED, P_LAYER_NORM, P_RMS_NORM, P_UNARY, P_BINARY, P_ROPE, P_SDPA, P_CE, P_SPLIT,
  P_CONCAT, P_RESHAPE, P_TRANSPOSE, P_POSITIONS, P_REDUCE,
} PrimKind;

struct Prim {
  const char *name;
  PrimKind kind;
  OpKind op;
  int nreq;                  /* required parameters (the first nreq) */
  const char *params[6];     /* NULL-terminated */
};

static const Prim prims[] = {
    {"matmul", P_MATMUL, OP_MATMUL, 2, {"a", "b", "ta", "tb"}},
    {"embed", P_EMBED, OP_EMBED, 2, {"table", "indices"}},
    {"layer_norm", P_LAYER_NORM, OP_LAYERNORM, 3, {"x", "weight", "bias", "eps"}},
    {"rms_norm", P_RMS_NORM, OP_RMSNORM, 2, {"x", "weight", "eps"}},
    {"gelu", P_UNARY, OP_GELU, 1, {"x"}},
    {"silu", P_UNARY, OP_SILU, 1, {"x"}},
    {"relu", P_UNARY, OP_RELU, 1, {"x"}},
    {"exp", P_UNARY, OP_EXP, 1, {"x"}},
    {"log", P_UNARY, OP_LOG, 1, {"x"}},
    {"sqrt", P_UNARY, OP_SQRT, 1, {"x"}},
    {"rsqrt", P_UNARY, OP_RSQRT, 1, {"x"}},
    {"tanh", P_UNARY, OP_TANH, 1, {"x"}},
    {"sigmoid", P_UNARY, OP_SIGMOID, 1, {"x"}},
    {"maximum", P_BINARY, OP_MAXIMUM, 2, {"a", "b"}},
    {"minimum", P_BINARY, OP_MINIMUM, 2, {"a", "b"}},
    {"rope", P_ROPE, OP_ROPE, 2, {"x", "heads", "theta", "start"}},
    {"sdpa", P_SDPA, OP_SDPA, 4, {"q", "k", "v", "heads", "kv_heads", "causal"}},
    {"cross_entropy", P_CE, OP_CROSS_ENTROPY, 2, {"logits", "targets", "valid"}},
    {"split", P_SPLIT, OP_SLICE, 2, {"x", "parts", "axis"}},
    {"concat", P_CONCAT, OP_CONCAT, 0, {"axis"}},
    {"reshape", P_RESHAPE, OP_RESHAPE, 2, {"x", "shape"}},
    {"transpose", P_TRANSPOSE, OP_TRANSPOSE, 1, {"x"}},
    {"positions", P_POSITIONS, OP_IOTA, 1, {"n", "start"}},
    {"sum", P_REDUCE, OP_SUM, 1, {"x"}},
    {"mean", P_REDUCE, OP_MEAN, 1, {"x"}},
};
#define NPRIMS ((int)(sizeof prims / sizeof prims[0]))

static const Prim *find_prim(const char *name) {
  for (int i = 0; i < NPRIMS; i++)
    if (strcmp(prims[i].name, name) == 0) return &prims[i];
  return NULL;
}

static const LayerDecl *find_layer(Lower *L, const char *name) {
  for (int i = 0; i < L->fe->layers.n; i++) {
    const LayerDecl *ld = L->fe->layers.v[i];
    if (strcmp(ld->name, name) == 0) return ld;
  }
  return NULL;
}

/* ---- diagnostics helpers ---------------------------------------------------------- */
static const char *shape_str(Lower *L, const Shape *s) {
  const char *r = "[";
  for (int i = 0; i < s->rank; i++) r = arena_printf(L->a, "%s%s%lld", r, i ? ", " : "", (long long)s->dim[i]);
  return arena_printf(L->a, "%s]", r);
}

static const char *describe(Lower *L, const Val *v) {
  switch (v->kind) {
  case V_NONE: return "an invalid value";
  case V_NUM: return arena_printf(L->a, "the number %g", v->num);
  case V_BOOL: return v->num ? "true" : "false";
  case V_STR: return "a string";
  case V_TENSOR: return arena_printf(L->a, "a tensor %s%s", ir_dtype_name(v->t->dtype), shape_str(L, &v->t->shape));
  case V_FUNC: return arena_printf(L->a, "the function `%s`", v->prim ? v->prim->name : v->layer->name);
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
  if (funcs)
    for (int i = 0; i < NPRIMS; i++) vec_push(L->a, &c, (void *)prims[i].name);
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

static Value *use(Lower *L, Scope *s, Value *v) { return use_in(L, s->g, s->region, v); }

/* Appends a node to s's graph and infers its type; NULL when the op rejected its inputs. */
static Node *make(Lower *L, Scope *s, OpKind op, int nin, Value **ins, int nout, const Attrs *at, SrcLoc loc) {
  Value *in2[16] = {0};
  Value **pin = nin <= 16 ? in2 : ARENA_ARRAY(L->a, Value *, nin);
  for (int i = 0; i < nin; i++) pin[i] = use(L, s, ins[i]);
  Node *n = ir_node_new(s->g, op, nin, pin, nout, loc);
  if (at) n->a = *at;
  return n;
}

static Value *emit(Lower *L, Scope *s, OpKind op, int nin, Value **ins, const Attrs *at, SrcLoc loc) {
  Node *n = make(L, s, op, nin, ins, 1, at, loc);
  return ir_infer(n) ? n->out[0] : NULL;
}

static Value *emit1(Lower *L, Scope *s, OpKind op, Value *x, const Attrs *at, SrcLoc loc) {
  return emit(L, s, op, 1, &x, at, loc);
}

static Value *emit2(Lower *L, Scope *s, OpKind op, Value *a, Value *b, SrcLoc loc) {
  Value *in[2] = {a, b};
  return emit(L, s, op, 2, in, NULL, loc);
}

/* A node whose output type the builder sets (sources, reshape). */
static Value *emit_typed(Lower *L, Scope *s, OpKind op, int nin, Value **ins, const Attrs *at, DType dt, Shape sh,
                         SrcLoc loc) {
  Node *n = make(L, s, op, nin, ins, 1, at, loc);
  n->out[0]->dtype = dt;
  n->out[0]->shape = sh;
  return ir_infer(n) ? n->out[0] : NULL;
}

static Value *const_tensor(Lower *L, Scope *s, double x, SrcLoc loc) {
  Attrs at = {0};
  at.scalar = x;
  return emit_typed(L, s, OP_CONST, 0, NULL, &at, DT_F32, ir_scalar_shape(), loc);
}

/* ---- value checks -------------------------------------------------------------------- */
static Value *need_tensor(Lower *L, const Val *v, const char *what, SrcLoc loc) {
  if (v->kind == V_TENSOR) return v->t;
  if (v->kind != V_NONE) error_at(loc, "%s must be a tensor, got %s", what, describe(L, v));
  return NULL;
}

static bool need_num(Lower *L, const Val *v, const char *what, SrcLoc loc, double *out) {
  if (v->kind == V_NUM && isfinite(v->num)) {
    *out = v->num;
    return true;
  }
  if (v->kind == V_NUM) error_at(loc, "%s is not a finite number", what);
  else if (v->kind != V_NONE) error_at(loc, "%s must be a number, got %s", what, describe(L, v));
  return false;
}

static bool need_int(Lower *L, const Val *v, const char *what, SrcLoc loc, int64_t lo, int64_t hi, int64_t *out) {
  double x;
  if (!need_num(L, v, what, loc, &x)) return false;
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

static bool need_bool(Lower *L, const Val *v, const char *what, SrcLoc loc, bool *out) {
  if (v->kind == V_BOOL) {
    *out = v->num != 0;
    return true;
  }
  if (v->kind != V_NONE) error_at(loc, "%s must be true or false, got %s", what, describe(L, v));
  return false;
}

static bool axis_of(Lower *L, const Val *v, int rank, SrcLoc loc, int *out) {
  int64_t ax;
  if (!need_int(L, v, "`axis`", loc, -IR_MAX_RANK, IR_MAX_RANK, &ax)) return false;
  if (ax < -rank || ax >= rank) {
    error_at(loc, "axis %lld is out of range for a tensor of rank %d", (long long)ax, rank);
    return false;
  }
  *out = (int)(ax < 0 ? ax + rank : ax);
  return true;
}

/* ---- evaluation ------------------------------------------------------------------------ */
static Val eval(Lower *L, Scope *s, const Expr *e);
static Val call_func(Lower *L, Scope *s, Val fn, const char *fname, const Expr *call);

static Val eval_ident(Lower *L, Scope *s, const Expr *e) {
  bool crossed;
  Binding *b = lookup(s, e->name, &crossed);
  if (b) {
    if (crossed && b->v.kind == V_TENSOR) {
      error_at(e->loc, "`%s` is a tensor of the model; a layer sees only its arguments and the model's constants", e->name);
      return none_val;
    }
    return b->v;
  }
  if (strcmp(e->name, "batch") == 0) {
    /* the logical graph holds every data-parallel replica's micro-batch; the shard pass splits it */
    Val v = num_val((double)L->m->batch.global, true);
    v.sym = 0;
    return v;
  }
  if (strcmp(e->name, "seq") == 0) {
    if (L->m->recipe.seq <= 0) {
      error_at(e->loc, "`seq` is not set: define `const seq = ...` in the model or `seq N` in the train block");
      return none_val;
    }
    Val v = num_val((double)L->m->recipe.seq, true);
    v.sym = 1;
    return v;
  }
  const LayerDecl *ld = find_layer(L, e->name);
  const Prim *p = find_prim(e->name);
  if (ld || p) {
    Val v = none_val;
    v.kind = V_FUNC;
    v.layer = ld;
    v.prim = ld ? NULL : p;
    return v;
  }
  error_at(e->loc, "unknown name `%s`", e->name);
  hint_name(L, s, e->name, false);
  return none_val;
}

static Val arith(Lower *L, int op, Val a, Val b, SrcLoc loc) {
  double x = a.num, y = b.num;
  switch (op) {
  case '+': return num_val(x + y, a.is_int && b.is_int);
  case '-': return num_val(x - y, a.is_int && b.is_int);
  case '*': return num_val(x * y, a.is_int && b.is_int);
  case '/':
    if (y == 0) {
      error_at(loc, "division by zero");
      return none_val;
    }
    return num_val(x / y, a.is_int && b.is_int && fmod(x, y) == 0);
  case 'p': {
    if (!a.is_int || !b.is_int || x < 0 || y < 1) {
      error_at(loc, "`pad` needs a non-negative integer and a positive multiple, got %g pad %g", x, y);
      return none_val;
    }
    double r = ceil(x / y) * y;
    return num_val(r, true);
  }
  case '<': return bool_val(x < y);
  case '>': return bool_val(x > y);
  case 'l': return bool_val(x <= y);
  case 'g': return bool_val(x >= y);
  case 'e': return bool_val(x == y);
  case 'n': return bool_val(x != y);
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
         !((Arg *)e->args.v[0])->name && !lookup(s, "transpose", &crossed);
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
  Val a = eval(L, s, ea), b = eval(L, s, eb);
  if (a.kind == V_NONE || b.kind == V_NONE) return none_val;
  if (a.kind != V_TENSOR || b.kind != V_TENSOR) {
    error_at(e->loc, "`@` needs two tensors, got %s and %s", describe(L, &a), describe(L, &b));
    return none_val;
  }
  Value *in[2] = {a.t, b.t};
  return tensor_val(emit(L, s, OP_MATMUL, 2, in, &at, e->loc));
}

static Val eval_bin(Lower *L, Scope *s, const Expr *e) {
  if (e->op == '@') return eval_matmul(L, s, e);
  Val a = eval(L, s, e->a), b = eval(L, s, e->b);
  if (a.kind == V_NONE || b.kind == V_NONE) return none_val;
  int op = e->op;
  if (a.kind == V_NUM && b.kind == V_NUM) return arith(L, op, a, b, e->loc);
  if ((op == 'e' || op == 'n') && a.kind == V_BOOL && b.kind == V_BOOL)
    return bool_val((a.num == b.num) == (op == 'e'));
  bool ta = a.kind == V_TENSOR, tb = b.kind == V_TENSOR;
  bool arith_op = op == '+' || op == '-' || op == '*' || op == '/';
  if (!arith_op || !((ta && (tb || b.kind == V_NUM)) || (tb && a.kind == V_NUM))) {
    error_at(e->loc, "`%s` cannot combine %s and %s", op_text(op), describe(L, &a), describe(L, &b));
    return none_val;
  }
  if (ta && tb) {
    OpKind k = op == '+' ? OP_ADD : op == '-' ? OP_SUB : op == '*' ? OP_MUL : OP_DIV;
    return tensor_val(emit2(L, s, k, a.t, b.t, e->loc));
  }
  Attrs at = {0};
  if (ta) { /* tensor op number */
    double y = b.num;
    switch (op) {
    case '+': at.scalar = y; return tensor_val(emit1(L, s, OP_ADD_SCALAR, a.t, &at, e->loc));
    case '-': at.scalar = -y; return tensor_val(emit1(L, s, OP_ADD_SCALAR, a.t, &at, e->loc));
    case '*': at.scalar = y; return tensor_val(emit1(L, s, OP_SCALE, a.t, &at, e->loc));
    default:
      if (y == 0) {
        error_at(e->loc, "division by zero");
        return none_val;
      }
      at.scalar = 1.0 / y;
      return tensor_val(emit1(L, s, OP_SCALE, a.t, &at, e->loc));
    }
  }
  double x = a.num; /* number op tensor */
  switch (op) {
  case '+': at.scalar = x; return tensor_val(emit1(L, s, OP_ADD_SCALAR, b.t, &at, e->loc));
  case '*': at.scalar = x; return tensor_val(emit1(L, s, OP_SCALE, b.t, &at, e->loc));
  case '-': {
    Value *n = emit1(L, s, OP_NEG, b.t, NULL, e->loc);
    if (!n) return none_val;
    at.scalar = x;
    return tensor_val(emit1(L, s, OP_ADD_SCALAR, n, &at, e->loc));
  }
  default: {
    Value *c = const_tensor(L, s, x, e->loc);
    return c ? tensor_val(emit2(L, s, OP_DIV, c, b.t, e->loc)) : none_val;
  }
  }
}

static Val eval(Lower *L, Scope *s, const Expr *e) {
  switch (e->kind) {
  case E_NUM: return num_val(e->num, e->is_int);
  case E_BOOL: return bool_val(e->num != 0);
  case E_STR: {
    Val v = none_val;
    v.kind = V_STR;
    v.str = e->name;
    return v;
  }
  case E_IDENT: return eval_ident(L, s, e);
  case E_BIN: return eval_bin(L, s, e);
  case E_NEG: {
    Val a = eval(L, s, e->a);
    if (a.kind == V_NUM) {
      Val r = num_val(-a.num, a.is_int);
      return r;
    }
    if (a.kind == V_TENSOR) return tensor_val(emit1(L, s, OP_NEG, a.t, NULL, e->loc));
    if (a.kind != V_NONE) error_at(e->loc, "`-` cannot negate %s", describe(L, &a));
    return none_val;
  }
  case E_NOT: {
    Val a = eval(L, s, e->a);
    bool b;
    if (!need_bool(L, &a, "the operand of `not`", e->loc, &b)) return none_val;
    return bool_val(!b);
  }
  case E_CALL: {
    bool crossed;
    Binding *b = lookup(s, e->name, &crossed);
    Val fn = none_val;
    if (b) {
      if (b->v.kind == V_NONE) return none_val;
      if (b->v.kind != V_FUNC) {
        error_at(e->loc, "`%s` is %s, not a function", e->name, describe(L, &b->v));
        return none_val;
      }
      fn = b->v;
    } else {
      const LayerDecl *ld = find_layer(L, e->name);
      const Prim *p = ld ? NULL : find_prim(e->name);
      if (!ld && !p) {
        error_at(e->loc, "unknown function `%s`", e->name);
        hint_name(L, s, e->name, true);
        /* still evaluate the arguments for their own errors */
        for (int i = 0; i < e->args.n; i++) eval(L, s, ((Arg *)e->args.v[i])->value);
        return none_val;
      }
      fn.kind = V_FUNC;
      fn.layer = ld;
      fn.prim = p;
    }
    return call_func(L, s, fn, e->name, e);
  }
  case E_LIST:
  case E_TUPLE: {
    Val v = none_val;
    v.kind = e->kind == E_LIST ? V_LIST : V_TUPLE;
    v.n = e->items.n;
    v.items = ARENA_ARRAY(L->a, Val, v.n + 1);
    for (int i = 0; i < v.n; i++) {
      v.items[i] = eval(L, s, e->items.v[i]);
      if (v.items[i].kind == V_NONE) return none_val;
    }
    return v;
  }
  }
  unreachable();
}

/* ---- calls ------------------------------------------------------------------------------ */
typedef struct {
  Val v[8];
  SrcLoc loc[8];
  bool given[8];
} Bound;

/* Matches a call's arguments (positional, then by name) to the np parameters pnames:
 * v[k], loc[k], given[k] for each parameter given. `what` names the callee in messages
 * ("`gelu`", "layer `mlp`"). Returns false after reporting an unknown, duplicate or
 * surplus argument; missing ones are the caller's to check (its rule for defaults). */
static bool match_args(const char *what, const char *fname, const char *const *pnames, int np, const Expr *call,
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

/* Binds a builtin's arguments: the first nreq are required; a failed argument (V_NONE)
 * fails the call. Returns false after reporting errors. */
static bool bind_args(Lower *L, Scope *s, const char *fname, const char *const *pnames, int np, int nreq,
                      const Expr *call, Bound *out, Val *argv) {
  bool ok = match_args(arena_printf(L->a, "`%s`", fname), fname, pnames, np, call, argv, out->v, out->loc, out->given);
  for (int k = 0; k < np && ok; k++)
    if (out->given[k] && out->v[k].kind == V_NONE) ok = false;
  for (int k = 0; k < nreq && ok; k++)
    if (!out->given[k]) {
      error_at(call->loc, "`%s` is missing its argument `%s`", fname, pnames[k]);
      ok = false;
    }
  (void)s;
  return ok;
}

static Val call_layer(Lower *L, Scope *s, const LayerDecl *ld, const Expr *call, Val *argv);

static Val call_prim(Lower *L, Scope *s, const Prim *p, const Expr *call, Val *argv) {
  SrcLoc loc = call->loc;
  if (p->kind == P_CONCAT) { /* concat(a, b, ..., axis: -1) */
    PtrVec ts = {0};
    Val axis = num_val(-1, true);
    SrcLoc axloc = loc;
    for (int i = 0; i < call->args.n; i++) {
      const Arg *a = call->args.v[i];
      if (argv[i].kind == V_NONE) return none_val;
      if (a->name && strcmp(a->name, "axis") == 0) {
        axis = argv[i];
        axloc = a->loc;
      } else if (a->name) {
        error_at(a->loc, "`concat` has no argument `%s`", a->name);
        return none_val;
      } else {
        Value *t = need_tensor(L, &argv[i], "each input of `concat`", a->loc);
        if (!t) return none_val;
        vec_push(L->a, &ts, t);
      }
    }
    if (ts.n < 1) {
      error_at(loc, "`concat` needs at least one tensor");
      return none_val;
    }
    Attrs at = {0};
    if (!axis_of(L, &axis, ((Value *)ts.v[0])->shape.rank, axloc, &at.axis)) return none_val;
    return tensor_val(emit(L, s, OP_CONCAT, ts.n, (Value **)ts.v, &at, loc));
  }
  int np = 0;
  while (np < 6 && p->params[np]) np++;
  Bound b;
  memset(&b, 0, sizeof b);
  if (!bind_args(L, s, p->name, p->params, np, p->nreq, call, &b, argv)) return none_val;
  Attrs at = {0};
  Value *x = NULL;
  switch (p->kind) {
  case P_UNARY: {
    if (b.v[0].kind == V_NUM) { /* compile-time math on constants */
      double v = b.v[0].num, r;
      switch (p->op) {
      case OP_EXP: r = exp(v); break;
      case OP_LOG: r = v > 0 ? log(v) : NAN; break;
      case OP_SQRT: r = v >= 0 ? sqrt(v) : NAN; break;
      case OP_RSQRT: r = v > 0 ? 1 / sqrt(v) : NAN; break;
      case OP_TANH: r = tanh(v); break;
      case OP_SIGMOID: r = 1 / (1 + exp(-v)); break;
      case OP_RELU: r = v > 0 ? v : 0; break;
      case OP_SILU: r = v / (1 + exp(-v)); break;
      default: r = 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); break;
      }
      if (isnan(r)) {
        error_at(loc, "`%s` of %g is undefined", p->name, v);
        return none_val;
      }
      return num_val(r, false);
    }
    if (!(x = need_tensor(L, &b.v[0], arena_printf(L->a, "the argument of `%s`", p->name), b.loc[0])))
      return none_val;
    return tensor_val(emit1(L, s, p->op, x, NULL, loc));
  }
  case P_BINARY: {
    Val a = b.v[0], c = b.v[1];
    if (a.kind == V_NUM && c.kind == V_NUM)
      return num_val(p->op == OP_MAXIMUM ? fmax(a.num, c.num) : fmin(a.num, c.num), a.is_int && c.is_int);
    Value *ta = a.kind == V_NUM ? const_tensor(L, s, a.num, b.loc[0]) : need_tensor(L, &a, "`a`", b.loc[0]);
    Value *tc = c.kind == V_NUM ? const_tensor(L, s, c.num, b.loc[1]) : need_tensor(L, &c, "`b`", b.loc[1]);
    if (!ta || !tc) return none_val;
    return tensor_val(emit2(L, s, p->op, ta, tc, loc));
  }
  case P_MATMUL: {
    Value *ta = need_tensor(L, &b.v[0], "`a`", b.loc[0]), *tb = need_tensor(L, &b.v[1], "`b`", b.loc[1]);
    if (!ta || !tb) return none_val;
    if (b.given[2] && !need_bool(L, &b.v[2], "`ta`", b.loc[2], &at.ta)) return none_val;
    if (b.given[3] && !need_bool(L, &b.v[3], "`tb`", b.loc[3], &at.tb)) return none_val;
    Value *in[2] = {ta, tb};
    return tensor_val(emit(L, s, OP_MATMUL, 2, in, &at, loc));
  }
  case P_EMBED: {
    Value *t = need_tensor(L, &b.v[0], "`table`", b.loc[0]), *ix = need_tensor(L, &b.v[1], "`indices`", b.loc[1]);
    if (!t || !ix) return none_val;
    return tensor_val(emit2(L, s, OP_EMBED, t, ix, loc));
  }
  case P_LAYER_NORM:
  case P_RMS_NORM: {
    int nt = p->kind == P_LAYER_NORM ? 3 : 2;
    Value *in[3];
    for (int i = 0; i < nt; i++)
      if (!(in[i] = need_tensor(L, &b.v[i], arena_printf(L->a, "`%s`", p->params[i]), b.loc[i]))) return none_val;
    at.eps = 1e-5;
    if (b.given[nt] && !need_num(L, &b.v[nt], "`eps`", b.loc[nt], &at.eps)) return none_val;
    return tensor_val(emit(L, s, p->op, nt, in, &at, loc));
  }
  case P_ROPE: {
    int64_t h, start = 0;
    if (!(x = need_tensor(L, &b.v[0], "`x`", b.loc[0]))) return none_val;
    if (!need_int(L, &b.v[1], "`heads`", b.loc[1], 1, 1 << 20, &h)) return none_val;
    at.heads = (int)h;
    at.theta = 10000;
    if (b.given[2] && !need_num(L, &b.v[2], "`theta`", b.loc[2], &at.theta)) return none_val;
    if (b.given[3] && !need_int(L, &b.v[3], "`start`", b.loc[3], 0, MAX_DIM, &start)) return none_val;
    at.start = start;
    return tensor_val(emit1(L, s, OP_ROPE, x, &at, loc));
  }
  case P_SDPA: {
    Value *in[3];
    static const char *const qkv[3] = {"`q`", "`k`", "`v`"};
    for (int i = 0; i < 3; i++)
      if (!(in[i] = need_tensor(L, &b.v[i], qkv[i], b.loc[i]))) return none_val;
    int64_t h, kv;
    if (!need_int(L, &b.v[3], "`heads`", b.loc[3], 1, 1 << 20, &h)) return none_val;
    kv = h;
    if (b.given[4] && !need_int(L, &b.v[4], "`kv_heads`", b.loc[4], 1, 1 << 20, &kv)) return none_val;
    if (b.given[5] && !need_bool(L, &b.v[5], "`causal`", b.loc[5], &at.causal)) return none_val;
    at.heads = (int)h;
    at.kv_heads = (int)kv;
    Node *n = make(L, s, OP_SDPA, 3, in, 2, &at, loc);
    return tensor_val(ir_infer(n) ? n->out[0] : NULL);
  }
  case P_CE: {
    Value *lg = need_tensor(L, &b.v[0], "`logits`", b.loc[0]), *tg = need_tensor(L, &b.v[1], "`targets`", b.loc[1]);
    if (!lg || !tg) return none_val;
    int64_t valid = 0;
    if (b.given[2] && !need_int(L, &b.v[2], "`valid`", b.loc[2], 1, MAX_DIM, &valid)) return none_val;
    at.len = valid;
    Value *in[2] = {lg, tg};
    return tensor_val(emit(L, s, OP_CROSS_ENTROPY, 2, in, &at, loc));
  }
  case P_SPLIT: {
    if (!(x = need_tensor(L, &b.v[0], "`x`", b.loc[0]))) return none_val;
    int ax = x->shape.rank - 1;
    if (b.given[2] && !axis_of(L, &b.v[2], x->shape.rank, b.loc[2], &ax)) return none_val;
    if (x->shape.rank == 0) {
      error_at(loc, "`split` needs a tensor with at least one dim");
      return none_val;
    }
    int64_t dim = x->shape.dim[ax], sizes[64];
    int n = 0;
    Val parts = b.v[1];
    if (parts.kind == V_LIST) {
      if (parts.n < 1 || parts.n > 64) {
        error_at(b.loc[1], "`split` takes between 1 and 64 sizes");
        return none_val;
      }
      int64_t total = 0;
      for (n = 0; n < parts.n; n++) {
        if (!need_int(L, &parts.items[n], "a split size", b.loc[1], 1, MAX_DIM, &sizes[n])) return none_val;
        total += sizes[n];
      }
      if (total != dim) {
        error_at(b.loc[1], "split sizes add up to %lld but axis %d of %s has %lld", (long long)total, ax,
                 shape_str(L, &x->shape), (long long)dim);
        return none_val;
      }
    } else {
      int64_t k;
      if (!need_int(L, &parts, "`parts`", b.loc[1], 1, 64, &k)) return none_val;
      if (dim % k != 0) {
        error_at(b.loc[1], "cannot split axis %d of %s (%lld) into %lld equal parts", ax, shape_str(L, &x->shape),
                 (long long)dim, (long long)k);
        return none_val;
      }
      for (n = 0; n < k; n++) sizes[n] = dim / k;
    }
    Val r = none_val;
    r.kind = V_TUPLE;
    r.n = n;
    r.items = ARENA_ARRAY(L->a, Val, n);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
      Attrs sa = {0};
      sa.axis = ax;
      sa.start = off;
      sa.len = sizes[i];
      off += sizes[i];
      r.items[i] = tensor_val(emit1(L, s, OP_SLICE, x, &sa, loc));
      if (r.items[i].kind == V_NONE) return none_val;
    }
    return n == 1 ? r.items[0] : r;
  }
  case P_RESHAPE: {
    if (!(x = need_tensor(L, &b.v[0], "`x`", b.loc[0]))) return none_val;
    Val sh = b.v[1];
    if (sh.kind != V_LIST || sh.n > IR_MAX_RANK) {
      error_at(b.loc[1], "`shape` must be a list of at most %d dims, e.g. [b, s, heads, d / heads]", IR_MAX_RANK);
      return none_val;
    }
    int64_t dims[IR_MAX_RANK], known = 1;
    int infer_at = -1;
    for (int i = 0; i < sh.n; i++) {
      if (sh.items[i].kind == V_NUM && sh.items[i].num == -1 && infer_at < 0) {
        infer_at = i;
        dims[i] = 1;
        continue;
      }
      if (!need_int(L, &sh.items[i], "a dim of `shape`", b.loc[1], 1, MAX_DIM, &dims[i])) return none_val;
      known *= dims[i];
      if (known > MAX_NUMEL) {
        error_at(b.loc[1], "shape too large");
        return none_val;
      }
    }
    if (infer_at >= 0) {
      int64_t total = ir_numel(&x->shape);
      if (total % known != 0) {
        error_at(b.loc[1], "cannot reshape %s: %lld elements do not divide into dims of product %lld",
                 shape_str(L, &x->shape), (long long)total, (long long)known);
        return none_val;
      }
      dims[infer_at] = total / known;
    }
    return tensor_val(emit_typed(L, s, OP_RESHAPE, 1, &x, NULL, x->dtype, ir_shape(sh.n, dims), loc));
  }
  case P_TRANSPOSE:
    if (!(x = need_tensor(L, &b.v[0], "`x`", b.loc[0]))) return none_val;
    return tensor_val(emit1(L, s, OP_TRANSPOSE, x, NULL, loc));
  case P_POSITIONS: {
    int64_t n, start = 0;
    if (!need_int(L, &b.v[0], "`n`", b.loc[0], 1, MAX_DIM, &n)) return none_val;
    if (b.given[1] && !need_int(L, &b.v[1], "`start`", b.loc[1], 0, MAX_DIM, &start)) return none_val;
    at.start = start;
    Shape sh = ir_shape(1, &n);
    sh.sym[0] = (int16_t)b.v[0].sym;
    return tensor_val(emit_typed(L, s, OP_IOTA, 0, NULL, &at, DT_I32, sh, loc));
  }
  case P_REDUCE:
    if (!(x = need_tensor(L, &b.v[0], "`x`", b.loc[0]))) return none_val;
    return tensor_val(emit1(L, s, p->op, x, NULL, loc));
  case P_CONCAT: break;
  }
  unreachable();
}

static Val call_func(Lower *L, Scope *s, Val fn, const char *fname, const Expr *call) {
  Val *argv = ARENA_ARRAY(L->a, Val, call->args.n + 1);
  bool bad = false;
  for (int i = 0; i < call->args.n; i++) {
    argv[i] = eval(L, s, ((Arg *)call->args.v[i])->value);
    bad |= argv[i].kind == V_NONE;
  }
  if (bad) return none_val;
  (void)fname;
  if (fn.prim) return call_prim(L, s, fn.prim, call, argv);
  return call_layer(L, s, fn.layer, call, argv);
}

/* ---- statements ------------------------------------------------------------------------- */
static void lower_block(Lower *L, Scope *s, const PtrVec *stmts);

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
    Val v = eval(L, s, e);
    if (!need_int(L, &v, "a dimension", e->loc, 1, MAX_DIM, &d[i])) return false;
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
  for (int i = 0; i < e->args.n; i++) argv[i] = eval(L, s, ((Arg *)e->args.v[i])->value);
  Bound b;
  memset(&b, 0, sizeof b);
  if (!bind_args(L, s, name, pn[k - 2], np, np, e, &b, argv)) return false;
  if (!need_num(L, &b.v[0], arena_printf(L->a, "`%s`", pn[k - 2][0]), b.loc[0], &at->init_a)) return false;
  if (np > 1 && !need_num(L, &b.v[1], arena_printf(L->a, "`%s`", pn[k - 2][1]), b.loc[1], &at->init_b)) return false;
  if (k == 2 && at->init_b < 0) {
    error_at(b.loc[1], "`std` must not be negative, got %g", at->init_b);
    return false;
  }
  return true;
}

static void define(Lower *L, Scope *s, const char *name, Val v, bool is_const, SrcLoc loc) {
  Binding *b = find_local(s, name);
  if (b) {
    error_at(loc, "`%s` is already defined", name);
    if (b->loc.file) note("the first definition is at %s:%d:%d", b->loc.file, b->loc.line, b->loc.col);
    return;
  }
  bind(L, s, name, v, is_const, loc);
}

static void assign(Lower *L, Scope *s, const char *name, Val v, SrcLoc loc) {
  Scope *where = NULL;
  Binding *b = lookup_fn(s, name, &where);
  if (!b && s->kind == SC_MODEL) { /* the file's global constants */
    bool crossed;
    b = lookup(s, name, &crossed);
    where = L->global;
  }
  if (b && b->is_const) {
    error_at(loc, "cannot assign to the constant `%s`", name);
    return;
  }
  if (b && where == s) {
    b->v = v;
    return;
  }
  if (b && b->v.kind != V_NONE) { /* an outer non-tensor: a repeat body runs once at compile time */
    error_at(loc, "`%s` (%s) cannot change inside `repeat`: only tensors are carried between iterations", name,
             describe(L, &b->v));
    return;
  }
  bind(L, s, name, v, false, loc);
}

static void lower_const(Lower *L, Scope *s, const Stmt *st) {
  for (int i = 0; i < st->names.n; i++) {
    const char *name = st->names.v[i];
    SrcLoc loc = *(SrcLoc *)st->name_locs.v[i];
    Val v = eval(L, s, st->values.v[i]);
    if (s->kind == SC_MODEL || s->kind == SC_GLOBAL) {
      vec_push(L->a, &L->fe->const_names, (void *)name);
      for (int d = 0; d < L->fe->opt->ndefines; d++) {
        const FeDefine *fd = &L->fe->opt->defines[d];
        if (strcmp(fd->key, name) != 0) continue;
        L->fe->define_used[d] = true;
        double x;
        if (strcmp(fd->value, "true") == 0 || strcmp(fd->value, "false") == 0) {
          v = bool_val(fd->value[0] == 't');
        } else if (fe_parse_number(fd->value, &x)) {
          Val o = v;
          v = num_val(x, x == floor(x));
          if (o.kind == V_NUM && o.is_int && !v.is_int) v.is_int = false;
        } else {
          error_plain("-D %s=%s: the constant `%s` needs a number", fd->key, fd->value, name);
          v = none_val;
        }
      }
    }
    if (v.kind != V_NUM && v.kind != V_BOOL && v.kind != V_NONE && v.kind != V_STR) {
      error_at(loc, "the constant `%s` must be a number or a boolean, got %s", name, describe(L, &v));
      v = none_val;
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
      bind(L, s, st->name, none_val, false, st->loc);
      return;
    }
    dt = dtypes[k];
  }
  Shape sh;
  if (!eval_shape(L, s, &st->dims, st->loc, &sh)) {
    bind(L, s, st->name, none_val, false, st->loc);
    return;
  }
  Attrs at = {0};
  at.name = st->name;
  Value *v = emit_typed(L, s, OP_INPUT, 0, NULL, &at, dt, sh, st->loc);
  if (v) v->name = st->name;
  define(L, s, st->name, tensor_val(v), false, st->loc);
}

static void lower_param(Lower *L, Scope *s, const Stmt *st) {
  Shape sh;
  Attrs at = {0};
  bool ok = eval_shape(L, s, &st->dims, st->loc, &sh);
  ok = eval_init(L, s, st->init, &at) && ok;
  if (!ok) {
    if (!find_local(s, st->name)) bind(L, s, st->name, none_val, false, st->loc);
    return;
  }
  at.name = arena_printf(L->a, "%s%s", s->prefix, st->name);
  Value *v = emit_typed(L, s, OP_PARAM, 0, NULL, &at, DT_F32, sh, st->loc);
  if (v) v->name = at.name;
  define(L, s, st->name, tensor_val(v), false, st->loc);
}

static void lower_assign(Lower *L, Scope *s, const Stmt *st) {
  Val v = eval(L, s, st->value);
  int n = st->names.n;
  if (v.kind == V_TUPLE && n == 1) {
    error_at(st->value->loc, "this gives %d values; name each: `a, b = ...`", v.n);
    v = none_val;
  } else if (n > 1 && v.kind != V_NONE && (v.kind != V_TUPLE || v.n != n)) {
    error_at(st->value->loc, "%d names on the left but the right side gives %s", n,
             v.kind == V_TUPLE ? arena_printf(L->a, "%d values", v.n) : "one value");
    v = none_val;
  }
  for (int i = 0; i < n; i++) {
    Val vi = n == 1 ? v : v.kind == V_TUPLE ? v.items[i] : none_val;
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
  Val cv = eval(L, s, st->value);
  int64_t count;
  if (!need_int(L, &cv, "the repeat count", st->value->loc, 1, 1 << 20, &count)) count = 0;
  const char *rname = instance_name(L, s, st->name ? st->name : "blocks");

  Region *r = ARENA_NEW(L->a, Region);
  r->body = ir_graph_new(L->a, s->g);
  r->outer = s->region;
  r->outer_g = s->g;
  Scope *bs = new_scope(L, SC_REPEAT, s, r->body, arena_printf(L->a, "%s%s.", s->prefix, rname));
  bs->region = r;

  /* Carried values: tensors the body assigns that exist before it. */
  PtrVec names = {0}, carried = {0}, inits = {0};
  collect_assigned(L, &st->body, &names);
  for (int i = 0; i < names.n; i++) {
    Binding *b = lookup_fn(s, names.v[i], NULL);
    if (!b || b->v.kind != V_TENSOR) continue;
    Value *init = use(L, s, b->v.t);
    Node *arg = ir_add_arg(r->body, init->dtype, init->shape, names.v[i]);
    arg->loc = st->loc;
    bind(L, bs, names.v[i], tensor_val(arg->out[0]), false, st->loc);
    vec_push(L->a, &carried, names.v[i]);
    vec_push(L->a, &inits, init);
  }
  int nc = carried.n;
  lower_block(L, bs, &st->body);
  if (L->returned) {
    L->returned = false;
    error_at(st->loc, "`return` inside `repeat`");
  }

  bool ok = count > 0;
  for (int i = 0; i < nc && ok; i++) {
    Binding *b = find_local(bs, carried.v[i]);
    Value *init = inits.v[i];
    if (b->v.kind != V_TENSOR) {
      if (b->v.kind != V_NONE)
        error_at(b->loc, "`%s` enters the repeat as a tensor but leaves it as %s", (char *)carried.v[i],
                 describe(L, &b->v));
      ok = false;
      break;
    }
    Value *out = use(L, bs, b->v.t);
    if (out->dtype != init->dtype || !ir_shape_eq(&out->shape, &init->shape)) {
      error_at(b->loc, "`%s` enters the repeat as %s%s but the body leaves it as %s%s; a carried value keeps its type",
               (char *)carried.v[i], ir_dtype_name(init->dtype), shape_str(L, &init->shape),
               ir_dtype_name(out->dtype), shape_str(L, &out->shape));
      ok = false;
      break;
    }
    ir_add_result(r->body, out, carried.v[i]);
  }
  if (!ok) {
    for (int i = 0; i < nc; i++) assign(L, s, carried.v[i], none_val, st->loc);
    return;
  }
  int nin = nc + r->cap_from.n;
  Value **ins = ARENA_ARRAY(L->a, Value *, nin + 1);
  for (int i = 0; i < nc; i++) ins[i] = inits.v[i];
  for (int i = 0; i < r->cap_from.n; i++) ins[nc + i] = r->cap_from.v[i];
  /* Inputs are already in s->g: build the node directly (make() would re-capture nothing). */
  Node *n = ir_node_new(s->g, OP_REPEAT, nin, ins, nc, st->loc);
  n->body = r->body;
  r->body->owner = n;
  n->a.name = rname;
  n->a.count = count;
  n->a.ncarry = nc;
  n->a.nxs = 0;
  bool inf = ir_infer(n);
  for (int i = 0; i < nc; i++) assign(L, s, carried.v[i], inf ? tensor_val(n->out[i]) : none_val, st->loc);
}

static void lower_stmt(Lower *L, Scope *s, const Stmt *st) {
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
    Val v = none_val;
    if (st->values.n == 1) {
      v = eval(L, s, st->values.v[0]);
    } else {
      v.kind = V_TUPLE;
      v.n = st->values.n;
      v.items = ARENA_ARRAY(L->a, Val, v.n);
      for (int i = 0; i < v.n; i++) v.items[i] = eval(L, s, st->values.v[i]);
    }
    L->ret = v;
    L->returned = true;
    break;
  }
  case S_IF: {
    Val c = eval(L, s, st->value);
    bool b;
    if (c.kind == V_NUM) b = c.num != 0;
    else if (!need_bool(L, &c, "the condition of `if`", st->value->loc, &b)) break;
    lower_block(L, s, b ? &st->body : &st->els);
    break;
  }
  }
}

static void lower_block(Lower *L, Scope *s, const PtrVec *stmts) {
  if (++L->nesting > MAX_NESTING) {
    if (stmts->n) error_at(((Stmt *)stmts->v[0])->loc, "blocks nested too deeply (more than %d)", MAX_NESTING);
    L->nesting--;
    return;
  }
  for (int i = 0; i < stmts->n && !L->returned; i++) lower_stmt(L, s, stmts->v[i]);
  L->nesting--;
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
             ld->name, shape_str(L, sh), sh->rank, pat, ell >= 0 ? ">= " : "", fixed);
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
                 ld->name, shape_str(L, sh), pat, di, (long long)got, d->num);
        return false;
      }
      continue;
    }
    if (strcmp(d->name, "_") == 0) continue;
    Binding *b = find_local(ls, d->name);
    if (b) {
      if (b->v.kind == V_NUM && b->v.num != (double)got) {
        error_at(loc, "argument `%s` of `%s` has shape %s but `%s` is already %g", lp->name, ld->name,
                 shape_str(L, sh), d->name, b->v.num);
        return false;
      }
      continue;
    }
    Val v = num_val((double)got, true);
    v.sym = sh->sym[di];
    bind(L, ls, d->name, v, true, d->loc);
  }
  return true;
}

static Val call_layer(Lower *L, Scope *s, const LayerDecl *ld, const Expr *call, Val *argv) {
  SrcLoc loc = call->loc;
  for (int i = 0; i < L->active.n; i++)
    if (L->active.v[i] == ld) {
      error_at(loc, "layer `%s` calls itself (through %d call%s); layers cannot be recursive", ld->name,
               L->active.n - i, L->active.n - i == 1 ? "" : "s");
      return none_val;
    }
  if (L->active.n >= MAX_CALL_DEPTH) {
    error_at(loc, "layer calls nested more than %d deep", MAX_CALL_DEPTH);
    return none_val;
  }
  int np = ld->params.n;
  const char **pnames = ARENA_ARRAY(L->a, const char *, np + 1);
  for (int i = 0; i < np; i++) pnames[i] = ((LayerParam *)ld->params.v[i])->name;
  /* Bind arguments (any number of parameters: arrays, not a Bound) */
  Val *bv = ARENA_ARRAY(L->a, Val, np + 1);
  SrcLoc *bl = ARENA_ARRAY(L->a, SrcLoc, np + 1);
  bool *given = ARENA_ARRAY(L->a, bool, np + 1);
  bool ok = match_args(arena_printf(L->a, "layer `%s`", ld->name), ld->name, pnames, np, call, argv, bv, bl, given);
  for (int k = 0; k < np && ok; k++) {
    const LayerParam *lp = ld->params.v[k];
    if (!given[k] && !lp->def) {
      error_at(loc, "`%s` is missing its argument `%s`", ld->name, lp->name);
      ok = false;
    }
  }
  if (!ok) return none_val;

  const char *inst = instance_name(L, s, ld->name);
  Graph *body = ir_graph_new(L->a, s->g);
  Scope *ls = new_scope(L, SC_LAYER, L->model, body, arena_printf(L->a, "%s%s.", s->prefix, inst));
  PtrVec inputs = {0};
  for (int k = 0; k < np && ok; k++) {
    const LayerParam *lp = ld->params.v[k];
    Val v = given[k] ? bv[k] : eval(L, ls, lp->def);
    SrcLoc vl = given[k] ? bl[k] : loc;
    if (v.kind == V_NONE) {
      ok = false;
      break;
    }
    if (lp->has_pattern) {
      if (v.kind != V_TENSOR) {
        error_at(vl, "argument `%s` of `%s` must be a tensor, got %s", lp->name, ld->name, describe(L, &v));
        ok = false;
        break;
      }
      if (!match_pattern(L, ls, ld, lp, v.t, vl)) {
        ok = false;
        break;
      }
    }
    if (v.kind == V_TENSOR && v.t->def->graph != body) { /* a default computed in the body stays there */
      Value *outer = use(L, s, v.t);
      Node *arg = ir_add_arg(body, outer->dtype, outer->shape, lp->name);
      arg->loc = lp->loc;
      vec_push(L->a, &inputs, outer);
      v = tensor_val(arg->out[0]);
    }
    if (find_local(ls, lp->name)) {
      error_at(lp->loc, "`%s` names both an argument and a dim of a shape pattern", lp->name);
      ok = false;
      break;
    }
    bind(L, ls, lp->name, v, false, lp->loc);
  }
  if (!ok) return none_val;

  vec_push(L->a, &L->active, (void *)ld);
  bool saved_returned = L->returned;
  Val saved_ret = L->ret;
  L->returned = false;
  L->ret = none_val;
  int errors = diag_errors();
  lower_block(L, ls, &ld->body);
  Val ret = L->ret;
  bool returned = L->returned;
  L->returned = saved_returned;
  L->ret = saved_ret;
  L->active.n--;
  if (diag_errors() != errors) return none_val;
  if (!returned) {
    error_at(ld->loc, "layer `%s` ends without `return`", ld->name);
    return none_val;
  }

  /* Tensor results become the CALL's outputs; other values pass through. */
  int nr = ret.kind == V_TUPLE ? ret.n : 1;
  Val *rv = ret.kind == V_TUPLE ? ret.items : &ret;
  Val *outv = ARENA_ARRAY(L->a, Val, nr);
  int nt = 0;
  for (int i = 0; i < nr; i++) {
    if (rv[i].kind == V_NONE) return none_val;
    if (rv[i].kind == V_TENSOR) {
      ir_add_result(body, use(L, ls, rv[i].t), NULL);
      nt++;
    }
  }
  Node *n = ir_node_new(s->g, OP_CALL, inputs.n, (Value **)inputs.v, nt, loc);
  n->body = body;
  body->owner = n;
  n->a.name = inst;
  if (!ir_infer(n)) return none_val;
  int t = 0;
  for (int i = 0; i < nr; i++) outv[i] = rv[i].kind == V_TENSOR ? tensor_val(n->out[t++]) : rv[i];
  if (nr == 1) return outv[0];
  Val tup = none_val;
  tup.kind = V_TUPLE;
  tup.n = nr;
  tup.items = outv;
  return tup;
}

/* ---- the model ------------------------------------------------------------------------- */
void fe_lower(Fe *fe) {
  Lower L;
  memset(&L, 0, sizeof L);
  L.fe = fe;
  L.a = fe->a;
  L.m = fe->m;
  L.ret = none_val;
  Module *m = fe->m;
  m->graph = ir_graph_new(fe->a, NULL);
  m->name = fe->model->name ? fe->model->name : "model";

  for (int i = 0; i < fe->layers.n; i++) {
    const LayerDecl *ld = fe->layers.v[i];
    if (find_prim(ld->name)) error_at(ld->loc, "`%s` is a primitive; give the layer another name", ld->name);
    for (int j = 0; j < i; j++) {
      const LayerDecl *o = fe->layers.v[j];
      if (strcmp(o->name, ld->name) == 0) {
        error_at(ld->loc, "layer `%s` is defined twice", ld->name);
        note("the first definition is at %s:%d:%d", o->loc.file, o->loc.line, o->loc.col);
        break;
      }
    }
  }

  L.global = new_scope(&L, SC_GLOBAL, NULL, m->graph, "");
  for (int i = 0; i < fe->consts.n; i++) lower_stmt(&L, L.global, fe->consts.v[i]);
  L.model = new_scope(&L, SC_MODEL, L.global, m->graph, "");
  lower_block(&L, L.model, &fe->model->body);

  Binding *loss = find_local(L.model, "loss");
  if (!loss) {
    if (diag_errors() == fe->errors0)
      error_at(fe->model->loc, "model `%s` defines no `loss` (e.g. `loss = cross_entropy(logits, targets)`)", m->name);
    return;
  }
  if (loss->v.kind == V_NONE) return;
  if (loss->v.kind != V_TENSOR || loss->v.t->shape.rank != 0) {
    error_at(loss->loc, "`loss` must be a scalar tensor, got %s", describe(&L, &loss->v));
    return;
  }
  ir_add_result(m->graph, loss->v.t, "loss");
}
