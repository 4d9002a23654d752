/* frontend/lower.h — what the lowering's files share (internal to frontend/lower*.c).
 *
 * From the bottom up; each file calls only the ones above it in this list:
 *   lower.c        values, scopes and names
 *   lower_emit.c   nodes in the current graph, values described for messages, value checks
 *   lower_args.c   arguments matched to parameters; layers' shape patterns bound
 *   lower_ops.c    the operators on evaluated operands (numbers folded, tensors as nodes)
 *   lower_prim.c   the primitives (builtin functions) on evaluated arguments
 *   lower_eval.c   the recursive core: expressions, layer calls (CALL nodes), statements
 *   lower_model.c  the model block to m->graph (fe_lower)
 */
#ifndef SHARDC_LOWER_H
#define SHARDC_LOWER_H

#include "fe.h"

#define MAX_DIM ((int64_t)1 << 40)   /* largest dim a tensor may have */
#define MAX_NUMEL ((int64_t)1 << 50) /* largest element count a tensor may have */

/* ---- values ------------------------------------------------------------------ */
typedef enum { V_NONE, V_NUM, V_BOOL, V_STR, V_TENSOR, V_FUNC, V_TUPLE, V_LIST } ValKind;

typedef struct Prim Prim; /* a primitive (lower_prim.c) */

/* What an expression evaluates to at compile time. */
typedef struct Val Val;
struct Val {
  ValKind kind;           /* V_NONE: the result of an error already reported */
  double num;             /* V_NUM: the number; V_BOOL: 0 or 1 */
  bool is_int;            /* V_NUM: a whole number (exact in a double) */
  int sym;                /* V_NUM: symbolic dim index (batch, seq) or -1 */
  const char *str;        /* V_STR: the text; V_FUNC: the function's name */
  Value *t;               /* V_TENSOR: the value, in the graph that made it */
  const Prim *prim;       /* V_FUNC: a primitive, or */
  const LayerDecl *layer; /* V_FUNC: a layer */
  Val *items;             /* V_TUPLE, V_LIST: the elements, [n] */
  int n;                  /* V_TUPLE, V_LIST: number of elements */
};

extern const Val fe_none_val; /* V_NONE */
Val fe_num_val(double x, bool is_int);
Val fe_bool_val(bool b);
Val fe_tensor_val(Value *t); /* V_NONE for NULL (a node its op rejected) */

/* ---- scopes ------------------------------------------------------------------ */
typedef struct Binding Binding;
struct Binding {
  const char *name; /* the name bound */
  Val v;            /* its value */
  bool is_const;    /* a `const` (or a shape-pattern dim): cannot be assigned */
  bool assigned;    /* its value comes from `name = ...` (not a param, input, argument or carry) */
  bool read;        /* its current value has been read (fe_warn_unread) */
  SrcLoc loc;       /* where it was bound */
  SrcLoc set_at;    /* where its current value was assigned (assigned) */
  Binding *next;    /* the scope's earlier binding */
};

/* A repeat body being lowered: what it captures from the enclosing graph. */
typedef struct Region Region;
struct Region {
  Graph *body;     /* the REPEAT's body graph */
  Region *outer;   /* region of the enclosing graph, NULL when that is not a repeat body */
  Graph *outer_g;  /* the enclosing graph */
  PtrVec cap_from; /* Value*: captured values, in outer_g */
  PtrVec cap_to;   /* Value*: the body ARGs standing for them */
};

typedef struct Counter Counter; /* instance names given out (lower.c) */

typedef enum { SC_GLOBAL, SC_MODEL, SC_LAYER, SC_REPEAT } ScopeKind;

typedef struct Scope Scope;
struct Scope {
  ScopeKind kind;     /* the file's constants, the model block, a layer call, a repeat body */
  Scope *parent;      /* enclosing scope; NULL for SC_GLOBAL */
  Graph *g;           /* where nodes made in this scope go */
  Region *region;     /* SC_REPEAT */
  Binding *vars;      /* names bound here, newest first */
  Counter *counters;  /* instance names given out in this scope */
  const char *prefix; /* dotted path of this scope's parameters, e.g. "blocks.attention." */
};

/* The lowering of one model block. */
typedef struct {
  Fe *fe;               /* the compilation */
  Arena *a;             /* fe->a */
  Module *m;            /* fe->m */
  Scope *global, *model; /* the file's constants; the model block */
  PtrVec active;        /* LayerDecl*: calls being expanded, for recursion */
  int nesting;          /* blocks open, against MAX_NESTING */
  bool returned;        /* a `return` ran in the layer being expanded */
  Val ret;              /* the value it returned */
} Lower;

Scope *fe_new_scope(Lower *L, ScopeKind k, Scope *parent, Graph *g, const char *prefix);
Binding *fe_find_local(Scope *s, const char *name);
/* Looks a name up from s outwards; *crossed is set when the binding lies beyond a layer's scope. */
Binding *fe_lookup(Scope *s, const char *name, bool *crossed);
/* Looks a name up within the current function (the layer or the model), not beyond. */
Binding *fe_lookup_fn(Scope *s, const char *name, Scope **where);
Binding *fe_bind(Lower *L, Scope *s, const char *name, Val v, bool is_const, SrcLoc loc);
/* Warns of every tensor s's `=` bound whose value nothing read (what computed it is dropped, e.g.
 * `y = x + mlp(x)` in a repeat body that carries x): at the end of a model (but `loss`), layer or
 * repeat body. Names starting with `_` are exempt. */
void fe_warn_unread(Scope *s, const char *except);
/* The same for one binding about to be assigned again (its value unread). */
void fe_warn_unread_one(const Binding *b);
/* `base` the first time in s, then `base_2`, `base_3`, ... */
const char *fe_instance_name(Lower *L, Scope *s, const char *base);

/* ---- lower_emit.c ------------------------------------------------------------- */
const char *fe_shape_str(Lower *L, const Shape *s); /* "[2, 3]" */
const char *fe_describe(Lower *L, const Val *v);    /* "a tensor f32[2, 3]", for messages */
/* v made usable in s's graph: captured through each enclosing repeat. */
Value *fe_use(Lower *L, Scope *s, Value *v);
/* Appends a node to s's graph (inputs made usable there); its type is not inferred yet. */
Node *fe_make_node(Lower *L, Scope *s, OpKind op, int nin, Value **ins, int nout, const Attrs *at, SrcLoc loc);
/* A one-output node, type inferred; NULL when the op rejected its inputs (reported). */
Value *fe_emit(Lower *L, Scope *s, OpKind op, int nin, Value **ins, const Attrs *at, SrcLoc loc);
Value *fe_emit1(Lower *L, Scope *s, OpKind op, Value *x, const Attrs *at, SrcLoc loc);
Value *fe_emit2(Lower *L, Scope *s, OpKind op, Value *a, Value *b, SrcLoc loc);
/* A node whose output type the builder sets (sources, reshape). */
Value *fe_emit_typed(Lower *L, Scope *s, OpKind op, int nin, Value **ins, const Attrs *at, DType dt, Shape sh,
                     SrcLoc loc);
Value *fe_const_tensor(Lower *L, Scope *s, double x, SrcLoc loc); /* an f32 scalar */
/* Value checks: false (NULL) after reporting a value of the wrong kind; silent for V_NONE. */
Value *fe_need_tensor(Lower *L, const Val *v, const char *what, SrcLoc loc);
bool fe_need_num(Lower *L, const Val *v, const char *what, SrcLoc loc, double *out);
bool fe_need_int(Lower *L, const Val *v, const char *what, SrcLoc loc, int64_t lo, int64_t hi, int64_t *out);
bool fe_need_bool(Lower *L, const Val *v, const char *what, SrcLoc loc, bool *out);

/* ---- lower_ops.c -------------------------------------------------------------- */
/* a op b for evaluated operands (op as E_BIN spells it, not '@'): numbers folded, tensors as nodes. */
Val fe_binary(Lower *L, Scope *s, int op, Val a, Val b, SrcLoc loc);

/* ---- lower_prim.c ------------------------------------------------------------- */
const Prim *fe_find_prim(const char *name);
void fe_push_prim_names(Lower *L, PtrVec *out); /* const char*: every primitive's name, for hints */
Val fe_call_prim(Lower *L, Scope *s, const Prim *p, const Expr *call, Val *argv);

/* ---- lower_args.c ------------------------------------------------------------- */
/* A builtin's arguments, by parameter index. */
typedef struct {
  Val v[8];      /* the argument's value */
  SrcLoc loc[8]; /* where it was written */
  bool given[8]; /* it was given */
} Bound;

/* Matches a call's arguments (positional, then by name) to the np parameters pnames:
 * v[k], loc[k], given[k] for each parameter given. `what` names the callee in messages
 * ("`gelu`", "layer `mlp`"). Returns false after reporting an unknown, duplicate or
 * surplus argument; missing ones are the caller's to check (its rule for defaults). */
bool fe_match_args(const char *what, const char *fname, const char *const *pnames, int np, const Expr *call,
                   const Val *argv, Val *v, SrcLoc *loc, bool *given);
/* Binds a builtin's arguments: the first nreq are required; a failed argument (V_NONE)
 * fails the call. Returns false after reporting errors. */
bool fe_bind_args(Lower *L, const char *fname, const char *const *pnames, int np, int nreq, const Expr *call,
                  Bound *out, Val *argv);
/* Binds the dims of layer ld's shape pattern for parameter lp to t's shape in the layer's scope ls;
 * false after reporting a mismatch. */
bool fe_match_pattern(Lower *L, Scope *ls, const LayerDecl *ld, const LayerParam *lp, Value *t, SrcLoc loc);

/* ---- lower_eval.c ------------------------------------------------------------- */
Val fe_eval(Lower *L, Scope *s, const Expr *e);
/* Expands a call of layer ld into a CALL node in s's graph; its tensor results are the node's outputs. */
Val fe_call_layer(Lower *L, Scope *s, const LayerDecl *ld, const Expr *call, Val *argv);
void fe_lower_stmt(Lower *L, Scope *s, const Stmt *st);
/* Lowers stmts in s until one of them returns. */
void fe_lower_block(Lower *L, Scope *s, const PtrVec *stmts);

#endif
