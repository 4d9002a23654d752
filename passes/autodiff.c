/* passes/autodiff.c — pass_autodiff: reverse-mode differentiation of the top graph.
 *
 * From the top graph's result "loss" (a float scalar) the pass walks the nodes
 * backwards and appends, for every node whose output has an adjoint, the nodes
 * that compute its inputs' adjoints. Fan-out is accumulated with ADD; a gradient
 * that reaches a broadcast input is summed back with REDUCE_SUM. Only values
 * that depend on a PARAM ("need" a gradient) get adjoints. It then adds one
 * result "grad:<param>" per PARAM, in the PARAMs' node order (zeros for a param
 * the loss does not depend on).
 *
 * REPEAT (a scan) is differentiated as a scan: its backward is one REPEAT with
 * the opposite direction whose body is the backward of the forward body, so a
 * 96-layer model stays one region. Every forward value the backward body reads
 * is brought in as one of its arguments:
 *   - a slice of a stacked input (per-layer params): the same stacked input;
 *   - a captured value: captured again;
 *   - a constant/iota made in the body: re-made in the backward body;
 *   - anything else (a carried value as it entered the iteration, an
 *     intermediate): a *residual* — the forward body yields it as an extra
 *     stacked y, and the backward scan reads it as a stacked x.
 * The backward scan's arguments are (carries: the carried values' adjoints,
 * then gradient accumulators for captured values; xs: the adjoints of the
 * forward ys, then residuals and stacked inputs; captured: captured values),
 * and it yields (the adjoints of the initial carries, the accumulated captured
 * gradients, and as ys the stacked gradients of the stacked inputs).
 * Region bodies may read enclosing values directly (the verifier allows it);
 * those are treated like captured values.
 *
 * Collectives. The partitioning passes run after autodiff and insert the
 * forward and backward collectives themselves, so normally none are seen here.
 * If a graph already holds some, they are differentiated under the convention
 * of Megatron's f/g operators: the loss is replicated, every rank's cotangent of
 * a replicated or partial value is the full (replicated) gradient and that of a
 * sharded value is its shard. Hence all_reduce(sum) (partial -> replicated)
 * has the identity as adjoint; reduce_scatter's adjoint is all_gather; and
 * all_gather's adjoint is this rank's chunk of the replicated cotangent, taken
 * as reduce_scatter(dy) / n (there is no dynamic slice op).
 *
 * Slices that tile a value along one axis (q, k, v = split(qkv, 3)) get their adjoints
 * joined by one CONCAT once every slice has been differentiated.
 *
 * RELU has no backward op; its mask is relu(x) / max(x, FLT_MIN), exactly 1 for
 * x >= FLT_MIN and 0 for x <= 0.
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "infer.h"
#include "passes.h"

/* Kinds of argument of a backward body, in the order the REPEAT lists them. */
typedef enum { BA_DC, BA_ACC, BA_DY, BA_XS, BA_CAPT } BArgKind;

typedef struct {
  Node *arg;     /* ARG node of the backward body */
  BArgKind kind; /* see BArgKind */
  Value *src;    /* DC/DY: adjoint in the outer emit graph (DC: NULL = zeros); ACC: the captured value;
                    XS/CAPT: the outer forward value feeding it (imported by the outer context) */
  int slot;      /* DC: carry index; DY: ys index; others unused */
} BArg;

typedef struct {
  const Value *key; /* a value of an enclosing graph */
  Value *val;       /* its adjoint, or its import */
} VMap;

typedef struct Ctx Ctx;
struct Ctx {
  Module *m;
  Graph *fg;   /* forward graph being differentiated */
  Graph *eg;   /* graph receiving the backward nodes (== fg at top level) */
  Ctx *outer;  /* enclosing context for region bodies; NULL at top */
  Node *rep;   /* the forward REPEAT owning fg; NULL at top */
  Value **adj; /* [cap] adjoint by fg value id */
  Value **imp; /* [cap] import into eg by fg value id (bodies) */
  bool *need;  /* [cap] depends on a PARAM, by fg value id */
  int cap;     /* entries of adj/imp/need */
  VMap *ext;   /* [next] adjoints of enclosing values read directly by fg */
  int next, capext;
  VMap *eimp;  /* [neimp] imports of enclosing values read directly by fg */
  int neimp, capeimp;
  BArg *bargs; /* [nbargs] backward body arguments, in creation order */
  int nbargs, capbargs;
  bool failed; /* a user error was reported */
};

/* ---- bookkeeping --------------------------------------------------------- */

static void ensure(Ctx *c, int id) {
  if (id < c->cap) return;
  int cap = c->cap ? c->cap : 64;
  while (cap <= id) cap *= 2;
  Arena *a = c->fg->arena;
  Value **adj = ARENA_ARRAY(a, Value *, cap), **imp = ARENA_ARRAY(a, Value *, cap);
  bool *need = ARENA_ARRAY(a, bool, cap);
  if (c->cap) {
    memcpy(adj, c->adj, sizeof(Value *) * (size_t)c->cap);
    memcpy(imp, c->imp, sizeof(Value *) * (size_t)c->cap);
    memcpy(need, c->need, sizeof(bool) * (size_t)c->cap);
  }
  c->adj = adj;
  c->imp = imp;
  c->need = need;
  c->cap = cap;
}

static bool is_float(const Value *v) { return ir_dtype_is_float(v->dtype); }

static Value **vmap_slot(Arena *a, VMap **map, int *n, int *cap, const Value *key) {
  for (int i = 0; i < *n; i++)
    if ((*map)[i].key == key) return &(*map)[i].val;
  arena_grow(a, (void **)map, cap, *n + 1, sizeof(VMap));
  (*map)[*n] = (VMap){key, NULL};
  return &(*map)[(*n)++].val;
}

static bool need_of(Ctx *c, const Value *v) {
  if (v->def->graph == c->fg) {
    ensure(c, v->id);
    return c->need[v->id];
  }
  return c->outer ? need_of(c->outer, v) : false;
}

static Value *adj_get(Ctx *c, const Value *v) {
  if (v->def->graph == c->fg) {
    ensure(c, v->id);
    return c->adj[v->id];
  }
  for (int i = 0; i < c->next; i++)
    if (c->ext[i].key == v) return c->ext[i].val;
  return NULL;
}

/* ---- emitting ------------------------------------------------------------ */

static Value *emit(Ctx *c, OpKind op, int nin, Value **in, DType dt, Shape s, const Attrs *a, SrcLoc loc) {
  return ir_emit(c->eg, op, nin, in, dt, s, a, loc);
}

static Value *e_const(Graph *g, DType dt, Shape s, double x, SrcLoc loc) {
  Attrs a = {.scalar = x};
  return ir_emit(g, OP_CONST, 0, NULL, dt, s, &a, loc);
}

static Shape bcast_shape(const Shape *a, const Shape *b) {
  Shape s;
  int64_t da, db;
  if (!ir_broadcast(a, b, &s, &da, &db)) die("autodiff: shapes do not broadcast (%lld vs %lld)", (long long)da, (long long)db);
  return s;
}

static Value *e_bin(Ctx *c, OpKind op, Value *a, Value *b, SrcLoc loc) {
  Value *in[2] = {a, b};
  DType dt = ir_promote(a->dtype, b->dtype);
  return emit(c, op, 2, in, dt, bcast_shape(&a->shape, &b->shape), NULL, loc);
}

static Value *e_un(Ctx *c, OpKind op, Value *x, const Attrs *a, SrcLoc loc) {
  return emit(c, op, 1, &x, x->dtype, x->shape, a, loc);
}

static Value *e_scale(Ctx *c, Value *x, double s, SrcLoc loc) {
  Attrs a = {.scalar = s};
  return e_un(c, OP_SCALE, x, &a, loc);
}

static Value *e_add_scalar(Ctx *c, Value *x, double s, SrcLoc loc) {
  Attrs a = {.scalar = s};
  return e_un(c, OP_ADD_SCALAR, x, &a, loc);
}

static Value *e_shaped(Ctx *c, OpKind op, Value *x, Shape s, const Attrs *a, SrcLoc loc) {
  return emit(c, op, 1, &x, x->dtype, s, a, loc);
}

static Value *e_transpose(Ctx *c, Value *x, SrcLoc loc) {
  Shape s = x->shape;
  int a = s.rank - 2, b = s.rank - 1;
  int64_t t = s.dim[a];
  s.dim[a] = s.dim[b];
  s.dim[b] = t;
  int16_t y = s.sym[a];
  s.sym[a] = s.sym[b];
  s.sym[b] = y;
  return e_shaped(c, OP_TRANSPOSE, x, s, NULL, loc);
}

/* a^T b contracting the leading dims too (a [.., k, m], b [.., k, n] -> [m, n]: Attrs.cb) */
static Value *e_matmul_cb(Ctx *c, Value *a, Value *b, SrcLoc loc) {
  const Shape *sa = &a->shape, *sb = &b->shape;
  Shape s = ir_shape(2, (int64_t[]){sa->dim[sa->rank - 1], sb->dim[sb->rank - 1]});
  s.sym[0] = sa->sym[sa->rank - 1];
  s.sym[1] = sb->sym[sb->rank - 1];
  Value *in[2] = {a, b};
  Attrs at = {.ta = true, .cb = true};
  return emit(c, OP_MATMUL, 2, in, a->dtype, s, &at, loc);
}

static Value *e_matmul(Ctx *c, Value *a, Value *b, bool ta, bool tb, SrcLoc loc) {
  const Shape *sa = &a->shape, *sb = &b->shape;
  Shape la = *sa, lb = *sb;
  la.rank -= 2;
  lb.rank -= 2;
  Shape s = bcast_shape(&la, &lb);
  s.rank += 2;
  int am = ta ? sa->rank - 1 : sa->rank - 2, bn = tb ? sb->rank - 2 : sb->rank - 1;
  s.dim[s.rank - 2] = sa->dim[am];
  s.sym[s.rank - 2] = sa->sym[am];
  s.dim[s.rank - 1] = sb->dim[bn];
  s.sym[s.rank - 1] = sb->sym[bn];
  Value *in[2] = {a, b};
  Attrs at = {.ta = ta, .tb = tb};
  return emit(c, OP_MATMUL, 2, in, a->dtype, s, &at, loc);
}

/* ---- importing forward values into the emit graph ------------------------ */

static Value *imp(Ctx *c, Value *v);

static Value *new_barg(Ctx *c, BArgKind kind, Value *src, const Value *like, int slot) {
  Node *a = ir_add_arg(c->eg, like->dtype, like->shape, like->name);
  arena_grow(c->fg->arena, (void **)&c->bargs, &c->capbargs, c->nbargs + 1, sizeof(BArg));
  c->bargs[c->nbargs++] = (BArg){a, kind, src, slot};
  return a->out[0];
}


/* A per-iteration forward value the backward body reads: stacked by the forward scan. */
static Value *residual(Ctx *c, Value *v) {
  Graph *body = c->fg;
  Node *rep = c->rep;
  Value *stacked = NULL;
  for (int k = rep->a.ncarry; k < body->nresults && !stacked; k++)
    if (body->results[k] == v) stacked = rep->out[k];
  if (!stacked) stacked = ir_repeat_add_stacked(rep, v);
  return new_barg(c, BA_XS, stacked, v, -1);
}

/* The value of forward value v as seen by the backward nodes being emitted. */
static Value *imp(Ctx *c, Value *v) {
  if (!c->rep) return v; /* top level: backward nodes live in the forward graph */
  if (v->def->graph != c->fg) {
    Value **slot = vmap_slot(c->fg->arena, &c->eimp, &c->neimp, &c->capeimp, v);
    if (!*slot) *slot = new_barg(c, BA_CAPT, v, v, -1);
    return *slot;
  }
  ensure(c, v->id);
  if (c->imp[v->id]) return c->imp[v->id];
  Node *d = v->def;
  Value *r;
  int nc = c->rep->a.ncarry, nx = c->rep->a.nxs;
  switch (d->op) {
  case OP_ARG:
    if (d->a.index < nc) r = residual(c, v);
    else if (d->a.index < nc + nx) r = new_barg(c, BA_XS, c->rep->in[d->a.index], v, -1);
    else r = new_barg(c, BA_CAPT, c->rep->in[d->a.index], v, -1);
    break;
  case OP_CONST:
  case OP_IOTA:
  case OP_AXIS_INDEX: r = ir_emit(c->eg, d->op, 0, NULL, v->dtype, v->shape, &d->a, d->loc); break;
  case OP_PARAM:
  case OP_STATE:
  case OP_INPUT: die("autodiff: %s \"%s\" inside a region body", ir_ops[d->op].name, d->a.name);
  default: r = residual(c, v); break;
  }
  c->imp[v->id] = r;
  return r;
}

/* ---- adjoints ------------------------------------------------------------ */

/* Adds g to v's adjoint, summing broadcast dims away and casting to v's dtype. */
static void acc(Ctx *c, Value *v, Value *g, SrcLoc loc) {
  if (!is_float(v) || !need_of(c, v)) return;
  if (!ir_shape_eq(&g->shape, &v->shape)) {
    if (ir_broadcasts_to(&v->shape, &g->shape)) g = e_shaped(c, OP_REDUCE_SUM, g, v->shape, NULL, loc);
    else if (ir_broadcasts_to(&g->shape, &v->shape)) g = e_shaped(c, OP_BROADCAST_TO, g, v->shape, NULL, loc);
    else die("autodiff: adjoint shape does not match its value");
  }
  if (g->dtype != v->dtype) g = emit(c, OP_CAST, 1, &g, v->dtype, g->shape, NULL, loc);
  Value **slot;
  if (v->def->graph == c->fg) {
    ensure(c, v->id);
    slot = &c->adj[v->id];
  } else {
    slot = vmap_slot(c->fg->arena, &c->ext, &c->next, &c->capext, v);
  }
  *slot = *slot ? e_bin(c, OP_ADD, *slot, g, loc) : g;
}

/* need[] for fg's nodes, given the arguments' flags (bodies) or PARAMs (top). */
static void compute_need(Ctx *c) {
  for (int i = 0; i < c->fg->nnodes; i++) {
    Node *n = c->fg->nodes[i];
    bool any = n->op == OP_PARAM;
    for (int j = 0; j < n->nin && !any; j++) any = need_of(c, n->in[j]);
    if (n->op == OP_ARG) continue; /* preset by the caller */
    for (int j = 0; j < n->nout; j++) {
      ensure(c, n->out[j]->id);
      c->need[n->out[j]->id] = any && is_float(n->out[j]);
    }
  }
}

static int axis_degree(Ctx *c, int ax, SrcLoc loc) {
  if (!c->m->mesh) {
    error_at(loc, "autodiff: the degree of mesh axis %s is not known", rt_mesh_axis_name(ax));
    c->failed = true;
    return 1;
  }
  return c->m->mesh->dim[ax];
}

static void backward_repeat(Ctx *c, Node *n);

/* The SLICE uses of x in fg when they tile x exactly along one axis (a split such as
 * q, k, v = split(qkv, 3)); sorted by start into parts[], their number returned; else 0. */
static int slice_tiling(Ctx *c, const Value *x, Node ***parts) {
  if (x->def->graph != c->fg) return 0;
  int k = 0, axis = -1;
  Node **p = NULL;
  int cap = 0;
  for (int i = 0; i < c->fg->nnodes; i++) {
    Node *n = c->fg->nodes[i];
    if (n->op != OP_SLICE || n->in[0] != x) continue;
    if (axis >= 0 && n->a.axis != axis) return 0;
    axis = n->a.axis;
    arena_grow(c->fg->arena, (void **)&p, &cap, k + 1, sizeof(Node *));
    int j = k++;
    while (j > 0 && p[j - 1]->a.start > n->a.start) {
      p[j] = p[j - 1];
      j--;
    }
    p[j] = n;
  }
  if (k < 2) return 0;
  int64_t at = 0;
  for (int i = 0; i < k; i++) {
    if (p[i]->a.start != at) return 0;
    at += p[i]->a.len;
  }
  if (at != x->shape.dim[axis]) return 0;
  *parts = p;
  return k;
}

/* Once every use of v has been differentiated: the adjoints of a tiling set of slices of v
 * join as one CONCAT rather than a PAD and an ADD per slice. */
static void flush_slices(Ctx *c, Value *v) {
  Node **parts;
  int k;
  if (!is_float(v) || !need_of(c, v) || !(k = slice_tiling(c, v, &parts))) return;
  Value **in = ARENA_ARRAY(c->fg->arena, Value *, k);
  bool any = false;
  for (int i = 0; i < k; i++) {
    Value *d = adj_get(c, parts[i]->out[0]);
    any |= d != NULL;
    in[i] = d ? d : e_const(c->eg, v->dtype, parts[i]->out[0]->shape, 0.0, parts[i]->loc);
  }
  if (!any) return;
  Attrs a = {.axis = parts[0]->a.axis};
  acc(c, v, emit(c, OP_CONCAT, k, in, v->dtype, v->shape, &a, parts[0]->loc), parts[0]->loc);
}

static void backward_matmul(Ctx *c, Node *n, Value *dy) {
  Value *A = n->in[0], *B = n->in[1];
  bool ta = n->a.ta, tb = n->a.tb;
  SrcLoc L = n->loc;
  int ra = A->shape.rank, rb = B->shape.rank;
  if (need_of(c, A)) {
    Value *dA;
    if (!ta) dA = e_matmul(c, dy, imp(c, B), false, !tb, L); /* dy B'^T */
    else if (rb == ra) dA = e_matmul(c, imp(c, B), dy, tb, true, L); /* (dy B'^T)^T = B' dy^T */
    else dA = e_transpose(c, e_matmul(c, dy, imp(c, B), false, !tb, L), L);
    acc(c, A, dA, L);
  }
  if (need_of(c, B)) {
    Value *dB, *a = imp(c, A);
    /* Under context parallelism the sequence dim is split over cp (zigzag): a reshape folding it into the
     * batch would gather it. The matmul contracts the leading dims itself there (cb: the same one GEMM over
     * the rows, a partial sum over dp and cp), not one product per sequence and their sum. */
    bool cp = c->m->mesh && c->m->mesh->dim[RT_AX_CP] > 1;
    if (rb == 2 && ra > 2 && !ta && cp) {
      dB = tb ? e_matmul_cb(c, dy, a, L) : e_matmul_cb(c, a, dy, L);
    } else if (rb == 2 && ra > 2 && !ta) {
      /* B is shared by every batch: fold the batch dims, one [P*m, k]^T [P*m, n] product. */
      int64_t P = ir_numel(&A->shape) / A->shape.dim[ra - 1];
      Shape s2 = ir_shape(2, (int64_t[]){P, A->shape.dim[ra - 1]});
      s2.sym[1] = A->shape.sym[ra - 1];
      Shape d2 = ir_shape(2, (int64_t[]){P, dy->shape.dim[dy->shape.rank - 1]});
      d2.sym[1] = dy->shape.sym[dy->shape.rank - 1];
      Value *a2 = e_shaped(c, OP_RESHAPE, a, s2, NULL, L), *dy2 = e_shaped(c, OP_RESHAPE, dy, d2, NULL, L);
      dB = tb ? e_matmul(c, dy2, a2, true, false, L) : e_matmul(c, a2, dy2, true, false, L);
    } else {
      /* per-batch A'^T dy (or its transpose), summed over broadcast dims by acc */
      dB = tb ? e_matmul(c, dy, a, true, ta, L) : e_matmul(c, a, dy, !ta, false, L);
    }
    acc(c, B, dB, L);
  }
}

/* Appends the adjoint computation of node n (some output has an adjoint). */
static void backward(Ctx *c, Node *n) {
  SrcLoc L = n->loc;
  Value *dy = adj_get(c, n->out[0]);
  Value *x = n->nin > 0 ? n->in[0] : NULL, *b = n->nin > 1 ? n->in[1] : NULL;
  Attrs at;
  memset(&at, 0, sizeof at);
  switch (n->op) {
  case OP_ADD: acc(c, x, dy, L); acc(c, b, dy, L); return;
  case OP_SUB:
    acc(c, x, dy, L);
    if (need_of(c, b)) acc(c, b, e_un(c, OP_NEG, dy, NULL, L), L);
    return;
  case OP_MUL:
    if (need_of(c, x)) acc(c, x, e_bin(c, OP_MUL, dy, imp(c, b), L), L);
    if (need_of(c, b)) acc(c, b, e_bin(c, OP_MUL, dy, imp(c, x), L), L);
    return;
  case OP_DIV:
    if (need_of(c, x)) acc(c, x, e_bin(c, OP_DIV, dy, imp(c, b), L), L);
    if (need_of(c, b)) { /* d(a/b)/db = -y / b */
      Value *t = e_bin(c, OP_DIV, e_bin(c, OP_MUL, dy, imp(c, n->out[0]), L), imp(c, b), L);
      acc(c, b, e_un(c, OP_NEG, t, NULL, L), L);
    }
    return;
  case OP_NEG: acc(c, x, e_un(c, OP_NEG, dy, NULL, L), L); return;
  case OP_SCALE: acc(c, x, e_scale(c, dy, n->a.scalar, L), L); return;
  case OP_ADD_SCALAR: acc(c, x, dy, L); return;
  case OP_EXP: acc(c, x, e_bin(c, OP_MUL, dy, imp(c, n->out[0]), L), L); return;
  case OP_LOG: acc(c, x, e_bin(c, OP_DIV, dy, imp(c, x), L), L); return;
  case OP_SQRT: acc(c, x, e_scale(c, e_bin(c, OP_DIV, dy, imp(c, n->out[0]), L), 0.5, L), L); return;
  case OP_RSQRT: { /* -0.5 x^-3/2 = -0.5 y^3 */
    Value *y = imp(c, n->out[0]);
    Value *y3 = e_bin(c, OP_MUL, y, e_bin(c, OP_MUL, y, y, L), L);
    acc(c, x, e_scale(c, e_bin(c, OP_MUL, dy, y3, L), -0.5, L), L);
    return;
  }
  case OP_TANH: { /* 1 - y^2 */
    Value *y = imp(c, n->out[0]);
    Value *d = e_add_scalar(c, e_un(c, OP_NEG, e_bin(c, OP_MUL, y, y, L), NULL, L), 1.0, L);
    acc(c, x, e_bin(c, OP_MUL, dy, d, L), L);
    return;
  }
  case OP_SIGMOID: { /* y (1 - y) */
    Value *y = imp(c, n->out[0]);
    Value *d = e_bin(c, OP_MUL, y, e_add_scalar(c, e_un(c, OP_NEG, y, NULL, L), 1.0, L), L);
    acc(c, x, e_bin(c, OP_MUL, dy, d, L), L);
    return;
  }
  case OP_RELU: {
    Value *xi = imp(c, x);
    Value *tiny = e_const(c->eg, xi->dtype, ir_scalar_shape(), FLT_MIN, L);
    Value *mask = e_bin(c, OP_DIV, imp(c, n->out[0]), e_bin(c, OP_MAXIMUM, xi, tiny, L), L);
    acc(c, x, e_bin(c, OP_MUL, dy, mask, L), L);
    return;
  }
  case OP_GELU:
  case OP_SILU: {
    Value *in[2] = {imp(c, x), dy};
    acc(c, x, emit(c, n->op == OP_GELU ? OP_GELU_BWD : OP_SILU_BWD, 2, in, dy->dtype, x->shape, NULL, L), L);
    return;
  }
  case OP_CAST: acc(c, x, dy, L); return; /* acc casts back to x's dtype */
  case OP_RESHAPE: acc(c, x, e_shaped(c, OP_RESHAPE, dy, x->shape, NULL, L), L); return;
  case OP_TRANSPOSE: acc(c, x, e_transpose(c, dy, L), L); return;
  case OP_SLICE:
  case OP_PAD:
    if (n->op == OP_SLICE) {
      Node **parts;
      if (slice_tiling(c, x, &parts)) return; /* joined by flush_slices */
    }
    at.axis = n->a.axis;
    at.start = n->a.start;
    at.len = x->shape.dim[n->a.axis];
    acc(c, x, e_shaped(c, n->op == OP_SLICE ? OP_PAD : OP_SLICE, dy, x->shape, &at, L), L);
    return;
  case OP_CONCAT: {
    int64_t off = 0;
    for (int i = 0; i < n->nin; i++) {
      Value *xi = n->in[i];
      Attrs s = {.axis = n->a.axis, .start = off, .len = xi->shape.dim[n->a.axis]};
      off += s.len;
      if (need_of(c, xi)) acc(c, xi, e_shaped(c, OP_SLICE, dy, xi->shape, &s, L), L);
    }
    return;
  }
  case OP_REDUCE_SUM: acc(c, x, e_shaped(c, OP_BROADCAST_TO, dy, x->shape, NULL, L), L); return;
  case OP_BROADCAST_TO: acc(c, x, dy, L); return; /* acc sums back */
  case OP_SUM: acc(c, x, e_shaped(c, OP_BROADCAST_TO, dy, x->shape, NULL, L), L); return;
  case OP_MEAN: {
    Value *s = e_scale(c, dy, 1.0 / (double)ir_numel(&x->shape), L);
    acc(c, x, e_shaped(c, OP_BROADCAST_TO, s, x->shape, NULL, L), L);
    return;
  }
  case OP_MATMUL: backward_matmul(c, n, dy); return;
  case OP_EMBED: {
    Value *in[2] = {imp(c, b), dy};
    acc(c, x, emit(c, OP_EMBED_BWD, 2, in, dy->dtype, x->shape, NULL, L), L);
    return;
  }
  case OP_LAYERNORM:
  case OP_RMSNORM: {
    bool ln = n->op == OP_LAYERNORM;
    Value *in[3] = {imp(c, x), imp(c, b), dy};
    Node *d = ir_node_new(c->eg, ln ? OP_LAYERNORM_BWD : OP_RMSNORM_BWD, 3, in, ln ? 3 : 2, L);
    d->a.eps = n->a.eps;
    for (int i = 0; i < d->nout; i++) {
      const Value *like = i == 0 ? x : n->in[i];
      d->out[i]->dtype = like->dtype;
      d->out[i]->shape = like->shape;
    }
    for (int i = 0; i < d->nout; i++) acc(c, n->in[i], d->out[i], L);
    return;
  }
  case OP_ROPE:
    at = n->a;
    at.inverse = !n->a.inverse;
    acc(c, x, e_shaped(c, OP_ROPE, dy, x->shape, &at, L), L);
    return;
  case OP_SDPA: {
    if (adj_get(c, n->out[1])) die("autodiff: a gradient flows into sdpa's lse output");
    if (!dy) return;
    Value *in[6] = {imp(c, n->in[0]), imp(c, n->in[1]), imp(c, n->in[2]), imp(c, n->out[0]), imp(c, n->out[1]), dy};
    Node *d = ir_node_new(c->eg, OP_SDPA_BWD, 6, in, 3, L);
    d->a = n->a;
    for (int i = 0; i < 3; i++) {
      d->out[i]->dtype = n->in[i]->dtype;
      d->out[i]->shape = n->in[i]->shape;
    }
    for (int i = 0; i < 3; i++) acc(c, n->in[i], d->out[i], L);
    return;
  }
  case OP_CROSS_ENTROPY: {
    Value *in[3] = {imp(c, x), imp(c, b), dy};
    at.len = n->a.len;
    acc(c, x, emit(c, OP_CROSS_ENTROPY_BWD, 3, in, x->dtype, x->shape, &at, L), L);
    return;
  }
  case OP_ALL_REDUCE:
    if (n->a.reduce == RED_SUM) acc(c, x, dy, L);
    else if (n->a.reduce == RED_AVG) acc(c, x, e_scale(c, dy, 1.0 / axis_degree(c, n->a.mesh_axis, L), L), L);
    else {
      error_at(L, "autodiff: all_reduce(max) is not differentiable");
      c->failed = true;
    }
    return;
  case OP_REDUCE_SCATTER:
    at.mesh_axis = n->a.mesh_axis;
    at.axis = n->a.axis;
    acc(c, x, e_shaped(c, OP_ALL_GATHER, dy, x->shape, &at, L), L);
    return;
  case OP_ALL_GATHER: {
    at.mesh_axis = n->a.mesh_axis;
    at.axis = n->a.axis;
    double deg = (double)n->out[0]->shape.dim[at.axis] / (double)x->shape.dim[at.axis];
    Value *rs = e_shaped(c, OP_REDUCE_SCATTER, dy, x->shape, &at, L);
    acc(c, x, e_scale(c, rs, 1.0 / deg, L), L);
    return;
  }
  case OP_REPEAT: backward_repeat(c, n); return;
  default: break;
  }
  for (int j = 0; j < n->nin; j++)
    if (need_of(c, n->in[j])) {
      error_at(L, "autodiff: cannot differentiate through %s", ir_ops[n->op].name);
      c->failed = true;
      return;
    }
}

static void sweep(Ctx *c) {
  int n0 = c->fg->nnodes; /* at top level the backward nodes are appended after these */
  for (int i = n0 - 1; i >= 0; i--) {
    Node *n = c->fg->nodes[i];
    for (int j = 0; j < n->nout; j++) flush_slices(c, n->out[j]);
    bool any = false;
    for (int j = 0; j < n->nout && !any; j++) any = adj_get(c, n->out[j]) != NULL;
    if (any) backward(c, n);
  }
}

/* ---- REPEAT ------------------------------------------------------------- */

static int barg_cmp(const void *pa, const void *pb) {
  const BArg *a = pa, *b = pb;
  if (a->kind != b->kind) return (int)a->kind - (int)b->kind;
  return a->arg->a.index - b->arg->a.index; /* creation order */
}

static void backward_repeat(Ctx *c, Node *n) {
  Graph *body = n->body;
  int nc = n->a.ncarry, nx = n->a.nxs, ny = n->nout - nc;
  SrcLoc L = n->loc;
  bool any = false;
  for (int i = 0; i < n->nin && !any; i++) any = need_of(c, n->in[i]);
  if (!any) return;

  Ctx b = {.m = c->m, .fg = body, .eg = ir_graph_new(c->eg->arena, c->eg), .outer = c, .rep = n};
  for (int i = 0; i < body->nargs; i++) {
    Value *a = body->args[i]->out[0];
    ensure(&b, a->id);
    b.need[a->id] = is_float(a) && (i < nc || need_of(c, n->in[i]));
  }
  compute_need(&b);

  /* seeds: the carried values' and the stacked outputs' adjoints */
  for (int j = 0; j < nc; j++) {
    Value *r = body->results[j];
    if (!is_float(r) || !is_float(body->args[j]->out[0])) continue;
    Value *dc = new_barg(&b, BA_DC, adj_get(c, n->out[j]), r, j);
    acc(&b, r, dc, L);
  }
  for (int k = 0; k < ny; k++) {
    Value *d = adj_get(c, n->out[nc + k]);
    if (!d) continue;
    Value *r = body->results[nc + k];
    acc(&b, r, new_barg(&b, BA_DY, d, r, k), L);
  }
  sweep(&b);

  /* gradient accumulators for captured values (passed or read directly) */
  int nacc0 = b.nbargs;
  for (int i = nc + nx; i < n->nin; i++) {
    Value *a = body->args[i]->out[0];
    if (adj_get(&b, a)) new_barg(&b, BA_ACC, n->in[i], a, i);
  }
  for (int i = 0; i < b.next; i++)
    if (b.ext[i].val) new_barg(&b, BA_ACC, (Value *)b.ext[i].key, b.ext[i].key, -1);
  int nacc1 = b.nbargs;
  Value **accout = ARENA_ARRAY(body->arena, Value *, nacc1 - nacc0 + 1);
  for (int i = nacc0; i < nacc1; i++) {
    BArg *ba = &b.bargs[i];
    Value *g = ba->slot >= 0 ? adj_get(&b, body->args[ba->slot]->out[0]) : adj_get(&b, ba->src);
    accout[i - nacc0] = e_bin(&b, OP_ADD, ba->arg->out[0], g, L);
  }

  /* the backward body's arguments, in REPEAT order */
  BArg *sorted = ARENA_ARRAY(body->arena, BArg, b.nbargs + 1);
  memcpy(sorted, b.bargs, sizeof(BArg) * (size_t)b.nbargs);
  qsort(sorted, (size_t)b.nbargs, sizeof(BArg), barg_cmp);
  int ncarry = 0, nxs = 0;
  for (int i = 0; i < b.nbargs; i++) {
    b.eg->args[i] = sorted[i].arg;
    ncarry += sorted[i].kind == BA_DC || sorted[i].kind == BA_ACC;
    nxs += sorted[i].kind == BA_DY || sorted[i].kind == BA_XS;
  }
  for (int i = 0; i < b.nbargs; i++) sorted[i].arg->a.index = i;

  /* results: carries' adjoints at entry, accumulators, then the stacked inputs' gradients */
  for (int i = 0; i < b.nbargs; i++) {
    BArg *ba = &sorted[i];
    if (ba->kind == BA_DC) {
      Value *a = body->args[ba->slot]->out[0];
      Value *g = adj_get(&b, a);
      ir_add_result(b.eg, g ? g : e_const(b.eg, a->dtype, a->shape, 0.0, L), NULL);
    } else if (ba->kind == BA_ACC) {
      for (int k = nacc0; k < nacc1; k++)
        if (b.bargs[k].arg == ba->arg) ir_add_result(b.eg, accout[k - nacc0], NULL);
    }
  }
  int *xsin = ARENA_ARRAY(body->arena, int, nx + 1), nxsg = 0;
  for (int i = nc; i < nc + nx; i++) {
    Value *a = body->args[i]->out[0];
    if (!is_float(a) || !need_of(c, n->in[i])) continue;
    Value *g = adj_get(&b, a);
    ir_add_result(b.eg, g ? g : e_const(b.eg, a->dtype, a->shape, 0.0, L), NULL);
    xsin[nxsg++] = i;
  }

  /* the backward REPEAT in the enclosing emit graph */
  Value **ins = ARENA_ARRAY(body->arena, Value *, b.nbargs + 1);
  for (int i = 0; i < b.nbargs; i++) {
    BArg *ba = &sorted[i];
    Value *a = ba->arg->out[0];
    switch (ba->kind) {
    case BA_DC: ins[i] = ba->src ? ba->src : e_const(c->eg, a->dtype, a->shape, 0.0, L); break;
    case BA_ACC: ins[i] = e_const(c->eg, a->dtype, a->shape, 0.0, L); break;
    case BA_DY: ins[i] = ba->src; break;
    case BA_XS:
    case BA_CAPT: ins[i] = imp(c, ba->src); break;
    }
  }
  Node *r = ir_node_new(c->eg, OP_REPEAT, b.nbargs, ins, b.eg->nresults, L);
  r->body = b.eg;
  b.eg->owner = r;
  r->a.count = n->a.count;
  r->a.ncarry = ncarry;
  r->a.nxs = nxs;
  r->a.reverse = !n->a.reverse;
  r->a.name = arena_printf(c->eg->arena, "%s.grad", n->a.name ? n->a.name : "repeat");
  for (int i = 0; i < r->nout; i++) {
    Value *res = b.eg->results[i];
    r->out[i]->dtype = res->dtype;
    r->out[i]->shape = res->shape;
    if (i >= ncarry) {
      Shape *s = &r->out[i]->shape;
      if (s->rank + 1 > IR_MAX_RANK) die("autodiff: stacked gradient rank too large");
      for (int d = s->rank; d > 0; d--) {
        s->dim[d] = s->dim[d - 1];
        s->sym[d] = s->sym[d - 1];
      }
      s->rank++;
      s->dim[0] = n->a.count;
      s->sym[0] = -1;
    }
  }

  /* hand the gradients back to the enclosing context */
  int o = 0;
  for (int i = 0; i < b.nbargs; i++) {
    BArg *ba = &sorted[i];
    if (ba->kind == BA_DC) acc(c, n->in[ba->slot], r->out[o++], L);
    else if (ba->kind == BA_ACC) acc(c, ba->src, r->out[o++], L);
  }
  for (int k = 0; k < nxsg; k++) acc(c, n->in[xsin[k]], r->out[ncarry + k], L);
  if (b.failed) c->failed = true;
}

/* ---- entry ------------------------------------------------------------- */

bool pass_autodiff(Module *m) {
  Graph *g = m->graph;
  Value *loss = NULL;
  for (int i = 0; i < g->nresults; i++)
    if (g->result_names[i] && strcmp(g->result_names[i], "loss") == 0) loss = g->results[i];
  if (!loss) {
    error_plain("model %s has no result `loss` to differentiate", m->name ? m->name : "?");
    return false;
  }
  if (loss->shape.rank != 0 || !is_float(loss)) {
    error_at(loss->def->loc, "the loss must be a float scalar");
    return false;
  }
  Ctx c = {.m = m, .fg = g, .eg = g};
  compute_need(&c);
  int n0 = g->nnodes;
  acc(&c, loss, e_const(g, loss->dtype, ir_scalar_shape(), 1.0, loss->def->loc), loss->def->loc);
  sweep(&c);
  for (int i = 0; i < n0; i++) {
    Node *n = g->nodes[i];
    if (n->op != OP_PARAM) continue;
    Value *p = n->out[0];
    Value *d = adj_get(&c, p);
    if (!d) d = e_const(g, p->dtype, p->shape, 0.0, n->loc);
    ir_add_result(g, d, arena_printf(g->arena, "grad:%s", n->a.name));
  }
  return !c.failed;
}
