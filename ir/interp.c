/* ir/interp.c — the reference interpreter (contract: ir/interp.h).
 *
 * Every value is held per simulated rank as an fp64 Tensor. Nodes run in graph
 * order; each node is evaluated for every rank before the next node (lockstep), so
 * a collective sees all ranks' inputs at once. Values keep the shape computed from
 * their inputs (the IR's shape is the per-rank shape; ops whose output shape is
 * not a function of their inputs use the node's shape).
 *
 * Shardings: Value.shape is the local (per-rank) shape; a PARAM/STATE/INPUT split
 * on dim d by mesh axis a has logical extent shape.dim[d] * degree(a) there, and
 * rank r holds block coord(r, a) of it. interp_set_input / interp_set_state accept
 * either the local tensor or the logical one (then each rank takes its block).
 *
 * Point-to-point: SEND puts x in a mailbox for the rank at coord + start (mod the
 * degree) along mesh_axis; RECV takes, FIFO, what the rank at coord + start sent
 * with the same tag.
 */
#include "interp.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "ptrmap.h"
#include "rng.h"

/* ---- tensors ------------------------------------------------------------ */

static void *xcalloc(size_t n, size_t sz) {
  void *p = calloc(n ? n : 1, sz);
  if (!p) die("interp: out of memory (%zu x %zu bytes)", n, sz);
  return p;
}

Tensor tensor_new(DType dt, Shape s) {
  Tensor t = {dt, s, NULL};
  t.data = xcalloc((size_t)ir_numel(&s), sizeof(double));
  return t;
}

void tensor_free(Tensor *t) {
  if (!t) return;
  free(t->data);
  t->data = NULL;
}

Tensor tensor_copy(const Tensor *t) {
  Tensor c = tensor_new(t->dtype, t->shape);
  memcpy(c.data, t->data, sizeof(double) * (size_t)ir_numel(&t->shape));
  return c;
}

/* ---- node positions ------------------------------------------------------- */

/* Node* -> its position in its graph (ir/ptrmap.h). */
static void pos_put(PtrMap *m, const void *k, int v) { ptrmap_put(m, k, v); }

static int pos_get(const PtrMap *m, const void *k) {
  intptr_t v;
  if (!ptrmap_get(m, k, &v)) die("interp: node not found in any graph");
  return (int)v;
}

/* ---- interpreter state ---------------------------------------------------- */

typedef struct {
  const Node *node; /* PARAM / STATE / INPUT */
  Tensor *val;      /* [nranks]; data NULL while unset (INPUT) */
} Source;

typedef struct {
  int src, dst, tag; /* ranks, SEND/RECV tag */
  Tensor t;          /* payload */
} Message;

typedef struct {
  const char *name; /* result name (may be NULL) */
  Tensor *val;      /* [nranks] */
} Result;

struct Interp {
  const Graph *g;     /* top graph */
  MeshMap mesh;       /* the simulated ranks' mesh (runtime/mesh.h: the trainer's rank order) */
  int nranks;         /* mesh.world */
  uint64_t seed;      /* PARAM init seed */
  PtrMap pos;         /* Node* -> position, all graphs */
  Source *src;        /* [nsrc] */
  int nsrc;
  Result *res;        /* [nres] results of the last step */
  int nres;
  bool have_results;  /* a step has completed */
  Message *mail;      /* [nmail] in-flight point-to-point messages */
  int nmail, capmail;
};

typedef struct Env Env;
struct Env {
  const Graph *g;     /* graph whose values this env holds */
  Env *parent;        /* enclosing graph's env (captures) */
  Tensor **vals;      /* [g->nnodes] -> Tensor[nout * nranks], NULL until computed */
  Tensor *const *args; /* [g->nargs] -> Tensor[nranks] (borrowed), region bodies */
};

int interp_nranks(const Interp *it) { return it->nranks; }

int interp_coord(const Interp *it, int rank, MeshAxis ax) {
  if ((unsigned)ax >= RT_AX_COUNT) die("interp: bad mesh axis %d", (int)ax);
  int c[RT_AX_COUNT];
  rt_mesh_coords(&it->mesh, rank, c);
  return c[ax];
}

/* Rank with rank r's coordinates except coordinate c along ax. */
static int rank_with(const Interp *it, int r, int ax, int c) {
  int co[RT_AX_COUNT];
  rt_mesh_coords(&it->mesh, r, co);
  co[ax] = c;
  return rt_mesh_rank(&it->mesh, co);
}

static bool rt_error(const Node *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool rt_error(const Node *n, const char *fmt, ...) {
  if (n && n->loc.file)
    fprintf(stderr, "%s:%d:%d: runtime error: %s: ", n->loc.file, n->loc.line, n->loc.col, ir_ops[n->op].name);
  else
    fprintf(stderr, "interp: runtime error: %s: ", n ? ir_ops[n->op].name : "?");
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return false;
}

static void index_graph(PtrMap *m, const Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    pos_put(m, g->nodes[i], i);
    if (g->nodes[i]->body) index_graph(m, g->nodes[i]->body);
  }
}

/* ---- sharded blocks of logical tensors ------------------------------------ */

/* Where rank r's block of a sharded value sits in the logical tensor: per dim, the
 * split's degree (1: whole), r's coordinate and the blocks (ir_block_index). */
typedef struct {
  Shape logical;
  int deg[IR_MAX_RANK], coord[IR_MAX_RANK], blocks[IR_MAX_RANK];
} BlockMap;

/* Returns false when v is replicated (the logical tensor is the local one). */
static bool block_of(const Interp *it, const Value *v, int r, BlockMap *bm) {
  bool split = false;
  bm->logical = v->shape;
  for (int d = 0; d < v->shape.rank; d++) {
    int a = v->sharding.split[d];
    bm->deg[d] = 1;
    bm->coord[d] = 0;
    bm->blocks[d] = v->sharding.blocks[d];
    if (a >= 0 && a < RT_AX_COUNT && it->mesh.dim[a] > 1) {
      bm->deg[d] = it->mesh.dim[a];
      bm->coord[d] = interp_coord(it, r, (MeshAxis)a);
      bm->logical.dim[d] = v->shape.dim[d] * it->mesh.dim[a];
      split = true;
    }
  }
  return split;
}

/* Logical flat index of local element i of rank r's block. */
static int64_t logical_index(const Shape *local, const BlockMap *bm, int64_t i) {
  int64_t li = 0, rem = i, mul = 1;
  for (int d = local->rank - 1; d >= 0; d--) {
    int64_t c = rem % local->dim[d];
    rem /= local->dim[d];
    if (bm->deg[d] > 1) c = ir_block_index(local->dim[d], bm->blocks[d], bm->deg[d], bm->coord[d], c);
    li += c * mul;
    mul *= bm->logical.dim[d];
  }
  return li;
}

/* Stores t (local or logical) as rank r's value of source value v. */
static bool store_block(const Interp *it, const Value *v, int r, const Tensor *t, Tensor *dst) {
  BlockMap bm;
  bool split = block_of(it, v, r, &bm);
  tensor_free(dst);
  if (!split || ir_shape_eq(&t->shape, &v->shape) || !ir_shape_eq(&t->shape, &bm.logical)) {
    *dst = tensor_copy(t);
    return true;
  }
  *dst = tensor_new(v->dtype, v->shape);
  int64_t n = ir_numel(&v->shape);
  for (int64_t i = 0; i < n; i++) dst->data[i] = t->data[logical_index(&v->shape, &bm, i)];
  return true;
}

static void init_param(const Interp *it, const Node *n, int r, Tensor *dst) {
  const Value *v = n->out[0];
  *dst = tensor_new(v->dtype, v->shape);
  BlockMap bm;
  block_of(it, v, r, &bm);
  uint64_t key = rt_rng_key(it->seed, n->a.name ? n->a.name : "");
  int64_t cnt = ir_numel(&v->shape);
  for (int64_t i = 0; i < cnt; i++) {
    int64_t li = logical_index(&v->shape, &bm, i);
    double x = 0;
    switch (n->a.init) {
    case INIT_ZEROS: x = 0; break;
    case INIT_ONES: x = 1; break;
    case INIT_CONST: x = n->a.init_a; break;
    case INIT_NORMAL: x = rt_rng_normal(key, li, n->a.init_a, n->a.init_b); break;
    case INIT_UNIFORM: x = n->a.init_a + (n->a.init_b - n->a.init_a) * rt_rng_uniform(key, li); break;
    }
    dst->data[i] = x;
  }
}

static void collect_sources(Interp *it, const Graph *g, int *cap) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op == OP_PARAM || n->op == OP_STATE || n->op == OP_INPUT) {
      if (it->nsrc == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        Source *s = realloc(it->src, sizeof(Source) * (size_t)*cap);
        if (!s) die("interp: out of memory");
        it->src = s;
      }
      Source *s = &it->src[it->nsrc++];
      s->node = n;
      s->val = xcalloc((size_t)it->nranks, sizeof(Tensor));
      for (int r = 0; r < it->nranks; r++) {
        if (n->op == OP_PARAM) init_param(it, n, r, &s->val[r]);
        else if (n->op == OP_STATE) s->val[r] = tensor_new(n->out[0]->dtype, n->out[0]->shape);
      }
    }
    if (n->body) collect_sources(it, n->body, cap);
  }
}

static Source *find_source(const Interp *it, const char *name, const Node *node) {
  for (int i = 0; i < it->nsrc; i++) {
    const Node *n = it->src[i].node;
    if (node ? n == node : (n->a.name && name && strcmp(n->a.name, name) == 0)) return &it->src[i];
  }
  return NULL;
}

static Interp *interp_make(const Graph *g, const MeshMap *mesh, uint64_t seed) {
  Interp *it = xcalloc(1, sizeof *it);
  it->g = g;
  it->seed = seed;
  if (mesh) it->mesh = *mesh;
  else if (!rt_mesh_init(&it->mesh, 1, 1, 1, 1, 1)) die("interp: one-rank mesh");
  it->nranks = it->mesh.world;
  index_graph(&it->pos, g);
  return it;
}

Interp *interp_new(const Graph *g, const MeshMap *mesh, uint64_t seed) {
  Interp *it = interp_make(g, mesh, seed);
  int cap = 0;
  collect_sources(it, g, &cap);
  return it;
}

static void free_results(Interp *it) {
  for (int i = 0; i < it->nres; i++) {
    for (int r = 0; r < it->nranks; r++) tensor_free(&it->res[i].val[r]);
    free(it->res[i].val);
  }
  free(it->res);
  it->res = NULL;
  it->nres = 0;
  it->have_results = false;
}

static void free_mail(Interp *it) {
  for (int i = 0; i < it->nmail; i++) tensor_free(&it->mail[i].t);
  free(it->mail);
  it->mail = NULL;
  it->nmail = it->capmail = 0;
}

void interp_free(Interp *it) {
  if (!it) return;
  for (int i = 0; i < it->nsrc; i++) {
    for (int r = 0; r < it->nranks; r++) tensor_free(&it->src[i].val[r]);
    free(it->src[i].val);
  }
  free(it->src);
  free_results(it);
  free_mail(it);
  ptrmap_free(&it->pos);
  free(it);
}

void interp_set_input(Interp *it, int rank, const char *name, const Tensor *t) {
  Source *s = find_source(it, name, NULL);
  if (!s) die("interp_set_input: no source named '%s'", name);
  for (int r = 0; r < it->nranks; r++)
    if (rank < 0 || r == rank) store_block(it, s->node->out[0], r, t, &s->val[r]);
}

void interp_set_state(Interp *it, int rank, const char *name, const Tensor *t) {
  Source *s = find_source(it, name, NULL);
  if (!s || s->node->op == OP_INPUT) die("interp_set_state: no PARAM/STATE named '%s'", name);
  for (int r = 0; r < it->nranks; r++)
    if (rank < 0 || r == rank) store_block(it, s->node->out[0], r, t, &s->val[r]);
}

const Tensor *interp_get(const Interp *it, int rank, const char *name) {
  if (rank < 0 || rank >= it->nranks) return NULL;
  for (int i = 0; i < it->nres; i++)
    if (it->res[i].name && strcmp(it->res[i].name, name) == 0) return &it->res[i].val[rank];
  Source *s = find_source(it, name, NULL);
  if (s && s->node->op != OP_INPUT && s->val[rank].data) return &s->val[rank];
  return NULL;
}

bool interp_get_logical(const Interp *it, const char *name, Tensor *out, double *spread) {
  const Value *v = NULL;
  const Tensor *vals = NULL;
  for (int i = 0; i < it->nres && !v; i++)
    if (it->res[i].name && strcmp(it->res[i].name, name) == 0) {
      v = it->g->results[i];
      vals = it->res[i].val;
    }
  if (!v) {
    Source *s = find_source(it, name, NULL);
    if (!s || s->node->op == OP_INPUT || !s->val[0].data) return false;
    v = s->node->out[0];
    vals = s->val;
  }
  if (v->sharding.partial) die("interp_get_logical: '%s' is a partial sum", name);
  BlockMap bm;
  block_of(it, v, 0, &bm);
  *out = tensor_new(v->dtype, bm.logical);
  bool *seen = xcalloc((size_t)(ir_numel(&bm.logical) + 1), sizeof(bool));
  double sp = 0;
  for (int r = 0; r < it->nranks; r++) {
    block_of(it, v, r, &bm);
    int64_t n = ir_numel(&vals[r].shape);
    for (int64_t i = 0; i < n; i++) {
      int64_t li = logical_index(&vals[r].shape, &bm, i);
      double x = vals[r].data[i];
      if (seen[li]) {
        double d = fabs(out->data[li] - x);
        if (d > sp || d != d) sp = d != d ? INFINITY : d;
      } else {
        out->data[li] = x;
        seen[li] = true;
      }
    }
  }
  free(seen);
  if (spread) *spread = sp;
  return true;
}

/* ---- environments ---------------------------------------------------------- */

static Env env_new(const Graph *g, Env *parent, Tensor *const *args) {
  Env e = {g, parent, xcalloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof(Tensor *)), args};
  return e;
}

static void env_free(const Interp *it, Env *e) {
  for (int i = 0; i < e->g->nnodes; i++) {
    if (!e->vals[i]) continue;
    int n = e->g->nodes[i]->nout * it->nranks;
    for (int j = 0; j < n; j++) tensor_free(&e->vals[i][j]);
    free(e->vals[i]);
  }
  free(e->vals);
  e->vals = NULL;
}

/* Value v on all ranks: Tensor[nranks]. */
static Tensor *lookup(const Interp *it, const Env *e, const Value *v) {
  for (; e; e = e->parent) {
    if (e->g != v->def->graph) continue;
    if (v->def->op == OP_ARG) return e->args[v->def->a.index];
    Tensor *t = e->vals[pos_get(&it->pos, v->def)];
    if (!t) die("interp: %s value %%%d used before it was computed", ir_ops[v->def->op].name, v->id);
    return t + (size_t)v->idx * (size_t)it->nranks;
  }
  die("interp: value %%%d is out of scope", v->id);
}

/* ---- shape helpers ----------------------------------------------------------- */

/* Per output dim, the stride of `in` (0 where broadcast or missing). */
static void bcast_strides(const Shape *in, const Shape *out, int64_t *st) {
  int64_t s = 1;
  for (int d = out->rank - 1; d >= 0; d--) {
    int id = in->rank - out->rank + d;
    if (id < 0) st[d] = 0;
    else {
      st[d] = in->dim[id] == 1 && out->dim[d] != 1 ? 0 : s;
      s *= in->dim[id];
    }
  }
}

static bool bcast_shape(const Shape *a, const Shape *b, Shape *r) {
  int rank = a->rank > b->rank ? a->rank : b->rank;
  int64_t dims[IR_MAX_RANK];
  for (int i = 0; i < rank; i++) {
    int ia = a->rank - rank + i, ib = b->rank - rank + i;
    int64_t x = ia >= 0 ? a->dim[ia] : 1, y = ib >= 0 ? b->dim[ib] : 1;
    if (x != y && x != 1 && y != 1) return false;
    dims[i] = x == 1 ? y : x;
  }
  *r = ir_shape(rank, dims);
  return true;
}

/* Offset of flat output index i in an input with strides st over out's dims. */
static int64_t bcast_off(const Shape *out, const int64_t *st, int64_t i) {
  int64_t o = 0;
  for (int d = out->rank - 1; d >= 0; d--) {
    o += (i % out->dim[d]) * st[d];
    i /= out->dim[d];
  }
  return o;
}

/* ---- dtype rounding ---------------------------------------------------------- */

/* Rounds x to a binary float with `mbits` fraction bits, min normal exponent emin, max finite maxv. */
static double round_float(double x, int mbits, int emin, double maxv) {
  if (x == 0 || isnan(x) || isinf(x)) return x;
  int e = ilogb(x);
  if (e < emin) e = emin;
  double q = ldexp(1.0, e - mbits);
  double y = nearbyint(x / q) * q;
  if (fabs(y) > maxv) return x > 0 ? INFINITY : -INFINITY;
  return y;
}

static double to_dtype(DType dt, double x) {
  switch (dt) {
  case DT_F64: return x;
  case DT_F32: return (double)(float)x;
  case DT_BF16: return round_float(x, 7, -126, 3.38953138925153547590e38);
  case DT_F16: return round_float(x, 10, -14, 65504.0);
  case DT_I32:
  case DT_I64: return nearbyint(x);
  default: return x;
  }
}

/* ---- elementwise ------------------------------------------------------------- */

static double gelu(double x) {
  const double c = sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
}

static double gelu_grad(double x) {
  const double c = sqrt(2.0 / M_PI);
  double u = c * (x + 0.044715 * x * x * x), t = tanh(u);
  double du = c * (1.0 + 3.0 * 0.044715 * x * x);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

static double unary(const Node *n, double x) {
  switch (n->op) {
  case OP_NEG: return -x;
  case OP_SCALE: return n->a.scalar * x;
  case OP_ADD_SCALAR: return x + n->a.scalar;
  case OP_EXP: return exp(x);
  case OP_LOG: return log(x);
  case OP_SQRT: return sqrt(x);
  case OP_RSQRT: return 1.0 / sqrt(x);
  case OP_TANH: return tanh(x);
  case OP_SIGMOID: return sigm(x);
  case OP_RELU: return x > 0 ? x : 0;
  case OP_GELU: return gelu(x);
  case OP_SILU: return x * sigm(x);
  case OP_CAST: return to_dtype(n->out[0]->dtype, x);
  default: die("interp: %s is not unary", ir_ops[n->op].name);
  }
}

static double binary(OpKind op, double a, double b) {
  switch (op) {
  case OP_ADD: return a + b;
  case OP_SUB: return a - b;
  case OP_MUL: return a * b;
  case OP_DIV: return a / b;
  case OP_MAXIMUM: return a > b ? a : b;
  case OP_MINIMUM: return a < b ? a : b;
  case OP_GELU_BWD: return b * gelu_grad(a);
  case OP_SILU_BWD: {
    double s = sigm(a);
    return b * (s + a * s * (1.0 - s));
  }
  default: die("interp: %s is not binary", ir_ops[op].name);
  }
}

static bool ev_ew(const Node *n, Tensor *const *x, Tensor *y) {
  if (n->nin == 1) {
    *y = tensor_new(n->out[0]->dtype, x[0]->shape);
    int64_t cnt = ir_numel(&x[0]->shape);
    for (int64_t i = 0; i < cnt; i++) y->data[i] = unary(n, x[0]->data[i]);
    return true;
  }
  Shape s;
  if (!bcast_shape(&x[0]->shape, &x[1]->shape, &s)) return rt_error(n, "operand shapes do not broadcast");
  int64_t sa[IR_MAX_RANK], sb[IR_MAX_RANK];
  bcast_strides(&x[0]->shape, &s, sa);
  bcast_strides(&x[1]->shape, &s, sb);
  *y = tensor_new(n->out[0]->dtype, s);
  int64_t cnt = ir_numel(&s);
  for (int64_t i = 0; i < cnt; i++)
    y->data[i] = binary(n->op, x[0]->data[bcast_off(&s, sa, i)], x[1]->data[bcast_off(&s, sb, i)]);
  return true;
}

/* ---- shape ops ----------------------------------------------------------------- */

/* outer = product of dims before axis, inner = product after. */
static void split_axis(const Shape *s, int axis, int64_t *outer, int64_t *inner) {
  *outer = *inner = 1;
  for (int d = 0; d < axis; d++) *outer *= s->dim[d];
  for (int d = axis + 1; d < s->rank; d++) *inner *= s->dim[d];
}

static Tensor slice_of(const Tensor *x, int axis, int64_t start, int64_t len) {
  Shape s = x->shape;
  s.dim[axis] = len;
  Tensor y = tensor_new(x->dtype, s);
  int64_t outer, inner, n = x->shape.dim[axis];
  split_axis(&x->shape, axis, &outer, &inner);
  for (int64_t o = 0; o < outer; o++)
    memcpy(y.data + o * len * inner, x->data + (o * n + start) * inner, sizeof(double) * (size_t)(len * inner));
  return y;
}

/* Concatenates k tensors along axis. */
static Tensor concat_of(const Tensor *const *x, int k, int axis, DType dt) {
  Shape s = x[0]->shape;
  s.dim[axis] = 0;
  for (int i = 0; i < k; i++) s.dim[axis] += x[i]->shape.dim[axis];
  Tensor y = tensor_new(dt, s);
  int64_t outer, inner;
  split_axis(&s, axis, &outer, &inner);
  int64_t at = 0;
  for (int i = 0; i < k; i++) {
    int64_t len = x[i]->shape.dim[axis];
    for (int64_t o = 0; o < outer; o++)
      memcpy(y.data + (o * s.dim[axis] + at) * inner, x[i]->data + o * len * inner,
             sizeof(double) * (size_t)(len * inner));
    at += len;
  }
  return y;
}

static bool ev_shape(const Node *n, Tensor *const *x, Tensor *y) {
  const Tensor *a = x[0];
  const Shape *ns = &n->out[0]->shape;
  switch (n->op) {
  case OP_RESHAPE:
    if (ir_numel(ns) != ir_numel(&a->shape)) return rt_error(n, "element count differs from the node's shape");
    *y = tensor_copy(a);
    y->shape = *ns;
    return true;
  case OP_TRANSPOSE: {
    Shape s = a->shape;
    int r = s.rank;
    int64_t M = s.dim[r - 2], N = s.dim[r - 1];
    s.dim[r - 2] = N;
    s.dim[r - 1] = M;
    *y = tensor_new(a->dtype, s);
    int64_t batch = M > 0 && N > 0 ? ir_numel(&a->shape) / (M * N) : 0;
    for (int64_t b = 0; b < batch; b++)
      for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) y->data[b * M * N + j * M + i] = a->data[b * M * N + i * N + j];
    return true;
  }
  case OP_SLICE:
    if (n->a.start < 0 || n->a.start + n->a.len > a->shape.dim[n->a.axis]) return rt_error(n, "out of bounds");
    *y = slice_of(a, n->a.axis, n->a.start, n->a.len);
    return true;
  case OP_PAD: {
    int ax = n->a.axis;
    int64_t len = a->shape.dim[ax];
    if (n->a.start < 0 || n->a.start + len > n->a.len) return rt_error(n, "does not fit");
    Shape s = a->shape;
    s.dim[ax] = n->a.len;
    *y = tensor_new(a->dtype, s);
    int64_t outer, inner;
    split_axis(&s, ax, &outer, &inner);
    for (int64_t o = 0; o < outer; o++)
      memcpy(y->data + (o * n->a.len + n->a.start) * inner, a->data + o * len * inner,
             sizeof(double) * (size_t)(len * inner));
    return true;
  }
  case OP_CONCAT: *y = concat_of((const Tensor *const *)x, n->nin, n->a.axis, n->out[0]->dtype); return true;
  case OP_REDUCE_SUM: {
    int64_t st[IR_MAX_RANK];
    *y = tensor_new(a->dtype, *ns);
    bcast_strides(ns, &a->shape, st); /* y broadcasts to x: map each x element to its y slot */
    int64_t cnt = ir_numel(&a->shape);
    for (int64_t i = 0; i < cnt; i++) y->data[bcast_off(&a->shape, st, i)] += a->data[i];
    return true;
  }
  case OP_BROADCAST_TO: {
    int64_t st[IR_MAX_RANK];
    *y = tensor_new(a->dtype, *ns);
    bcast_strides(&a->shape, ns, st);
    int64_t cnt = ir_numel(ns);
    for (int64_t i = 0; i < cnt; i++) y->data[i] = a->data[bcast_off(ns, st, i)];
    return true;
  }
  default: unreachable();
  }
}

/* ---- compute primitives -------------------------------------------------------- */

static bool ev_matmul(const Node *n, Tensor *const *x, Tensor *y) {
  const Shape *A = &x[0]->shape, *B = &x[1]->shape;
  int ra = A->rank, rb = B->rank;
  int64_t M = n->a.ta ? A->dim[ra - 1] : A->dim[ra - 2], K = n->a.ta ? A->dim[ra - 2] : A->dim[ra - 1];
  int64_t K2 = n->a.tb ? B->dim[rb - 1] : B->dim[rb - 2], N = n->a.tb ? B->dim[rb - 2] : B->dim[rb - 1];
  if (K != K2) return rt_error(n, "inner dimensions differ (%lld vs %lld)", (long long)K, (long long)K2);
  Shape la = *A, lb = *B, lead;
  la.rank = ra - 2;
  lb.rank = rb - 2;
  if (!bcast_shape(&la, &lb, &lead)) return rt_error(n, "leading dims do not broadcast");
  int64_t sa[IR_MAX_RANK], sb[IR_MAX_RANK];
  bcast_strides(&la, &lead, sa);
  bcast_strides(&lb, &lead, sb);
  Shape s = lead;
  s.rank = lead.rank + 2;
  s.dim[lead.rank] = M;
  s.dim[lead.rank + 1] = N;
  s.sym[lead.rank] = s.sym[lead.rank + 1] = -1;
  *y = tensor_new(n->out[0]->dtype, s);
  int64_t nb = ir_numel(&lead);
  for (int64_t b = 0; b < nb; b++) {
    const double *pa = x[0]->data + bcast_off(&lead, sa, b) * M * K;
    const double *pb = x[1]->data + bcast_off(&lead, sb, b) * K * N;
    double *py = y->data + b * M * N;
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double acc = 0;
        for (int64_t k = 0; k < K; k++) {
          double av = n->a.ta ? pa[k * M + i] : pa[i * K + k];
          double bv = n->a.tb ? pb[j * K + k] : pb[k * N + j];
          acc += av * bv;
        }
        py[i * N + j] = acc;
      }
  }
  return true;
}

/* A sharded table holds logical rows [lo, lo + V) of a table of V * deg rows. */
static void vocab_range(const Interp *it, const Node *n, int rank, int64_t V, int64_t *lo, int64_t *total) {
  *lo = 0;
  *total = V;
  if (n->a.sharded) {
    int ax = n->a.mesh_axis;
    *lo = V * interp_coord(it, rank, (MeshAxis)ax);
    *total = V * it->mesh.dim[ax];
  }
}

static bool ev_embed(const Interp *it, const Node *n, Tensor *const *x, Tensor *y, int rank) {
  const Tensor *t = x[0], *ix = x[1];
  int64_t V = t->shape.dim[0], D = t->shape.dim[1], cnt = ir_numel(&ix->shape), lo, total;
  vocab_range(it, n, rank, V, &lo, &total);
  Shape s = ix->shape;
  s.dim[s.rank++] = D;
  *y = tensor_new(t->dtype, s);
  for (int64_t i = 0; i < cnt; i++) {
    double id = ix->data[i];
    if (!(id >= 0 && id < (double)total) || id != floor(id)) {
      tensor_free(y);
      return rt_error(n, "token id %.0f out of range [0, %lld) at position %lld on rank %d", id, (long long)total,
                      (long long)i, rank);
    }
    int64_t row = (int64_t)id - lo;
    if (row >= 0 && row < V) memcpy(y->data + i * D, t->data + row * D, sizeof(double) * (size_t)D);
  }
  return true;
}

static bool ev_embed_bwd(const Interp *it, const Node *n, Tensor *const *x, Tensor *y, int rank) {
  const Tensor *ix = x[0], *dy = x[1];
  int64_t V = n->out[0]->shape.dim[0], D = dy->shape.dim[dy->shape.rank - 1], cnt = ir_numel(&ix->shape), lo, total;
  vocab_range(it, n, rank, V, &lo, &total);
  *y = tensor_new(n->out[0]->dtype, ir_shape(2, (int64_t[]){V, D}));
  for (int64_t i = 0; i < cnt; i++) {
    double id = ix->data[i];
    if (!(id >= 0 && id < (double)total)) {
      tensor_free(y);
      return rt_error(n, "token id %.0f out of range [0, %lld) at position %lld on rank %d", id, (long long)total,
                      (long long)i, rank);
    }
    int64_t row = (int64_t)id - lo;
    if (row < 0 || row >= V) continue;
    for (int64_t d = 0; d < D; d++) y->data[row * D + d] += dy->data[i * D + d];
  }
  return true;
}

/* Cross-entropy in parts (ops.def): local column j is logical column lo + j; valid below len. */
static bool ev_ce_part(const Interp *it, const Node *n, Tensor *const *x, Tensor *y, int rank) {
  if (n->op == OP_CE_LOSS) {
    const Tensor *st = x[0], *m = x[1], *tg = x[2];
    int64_t rows = ir_numel(&tg->shape);
    *y = tensor_new(DT_F32, n->out[0]->shape);
    for (int64_t r = 0; r < rows; r++) {
      double t = tg->data[r];
      if (t < 0) continue;
      if ((n->a.len > 0 && t >= (double)n->a.len) || t != floor(t))
        return rt_error(n, "target id %.0f out of range [0, %lld) at position %lld on rank %d", t, (long long)n->a.len,
                        (long long)r, rank);
      y->data[0] += log(st->data[2 * r]) + m->data[r] - st->data[2 * r + 1];
      y->data[1] += 1;
    }
    return true;
  }
  const Tensor *lg = x[0];
  int64_t V = lg->shape.dim[lg->shape.rank - 1], rows = V ? ir_numel(&lg->shape) / V : 0, lo, total;
  vocab_range(it, n, rank, V, &lo, &total);
  int64_t L = n->a.len > 0 ? n->a.len : total, nv = L - lo; /* valid local columns */
  nv = nv < 0 ? 0 : nv > V ? V : nv;
  switch (n->op) {
  case OP_CE_MAX:
    *y = tensor_new(DT_F32, n->out[0]->shape);
    for (int64_t r = 0; r < rows; r++) {
      double mx = -INFINITY;
      for (int64_t v = 0; v < nv; v++) mx = lg->data[r * V + v] > mx ? lg->data[r * V + v] : mx;
      y->data[r] = mx;
    }
    return true;
  case OP_CE_SUMS:
    *y = tensor_new(DT_F32, n->out[0]->shape);
    for (int64_t r = 0; r < rows; r++) {
      const double *l = lg->data + r * V, m = x[2]->data[r];
      double s = 0;
      for (int64_t v = 0; v < nv; v++) s += exp(l[v] - m);
      int64_t t = (int64_t)x[1]->data[r] - lo;
      y->data[2 * r] = s;
      y->data[2 * r + 1] = t >= 0 && t < nv ? l[t] : 0;
    }
    return true;
  case OP_CE_GRAD: {
    *y = tensor_new(lg->dtype, lg->shape);
    double sc = x[4]->data[0];
    for (int64_t r = 0; r < rows; r++) {
      if (x[1]->data[r] < 0) continue;
      const double *l = lg->data + r * V, m = x[2]->data[r], s = x[3]->data[2 * r];
      int64_t t = (int64_t)x[1]->data[r] - lo;
      for (int64_t v = 0; v < nv; v++) y->data[r * V + v] = sc * (exp(l[v] - m) / s - (v == t ? 1.0 : 0.0));
    }
    return true;
  }
  default: unreachable();
  }
}

/* This rank's chunk (blocks per ir_block_index) of x along axis. */
static Tensor chunk_of(const Tensor *x, int axis, int deg, int c, int blocks, DType dt) {
  Shape s = x->shape;
  int64_t n = s.dim[axis], nl = n / deg, outer, inner;
  s.dim[axis] = nl;
  Tensor y = tensor_new(dt, s);
  split_axis(&x->shape, axis, &outer, &inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t l = 0; l < nl; l++)
      memcpy(y.data + (o * nl + l) * inner, x->data + (o * n + ir_block_index(nl, blocks, deg, c, l)) * inner,
             sizeof(double) * (size_t)inner);
  return y;
}

/* Inverse of chunk_of over the whole group: grp[c] is member c's chunk. */
static Tensor unchunk_of(const Tensor *const *grp, int deg, int axis, int blocks, DType dt) {
  Shape s = grp[0]->shape;
  int64_t nl = s.dim[axis], n = nl * deg, outer, inner;
  split_axis(&s, axis, &outer, &inner);
  s.dim[axis] = n;
  Tensor y = tensor_new(dt, s);
  for (int c = 0; c < deg; c++)
    for (int64_t o = 0; o < outer; o++)
      for (int64_t l = 0; l < nl; l++)
        memcpy(y.data + (o * n + ir_block_index(nl, blocks, deg, c, l)) * inner, grp[c]->data + (o * nl + l) * inner,
               sizeof(double) * (size_t)inner);
  return y;
}

static void ev_layernorm(const Node *n, Tensor *const *x, Tensor *y) {
  const Tensor *a = x[0];
  int64_t D = a->shape.dim[a->shape.rank - 1], rows = ir_numel(&a->shape) / (D ? D : 1);
  bool bwd = n->op == OP_LAYERNORM_BWD;
  y[0] = tensor_new(a->dtype, a->shape);
  if (bwd) {
    y[1] = tensor_new(x[1]->dtype, x[1]->shape);
    y[2] = tensor_new(x[1]->dtype, x[1]->shape);
  }
  for (int64_t r = 0; r < rows; r++) {
    const double *xr = a->data + r * D;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < D; i++) mean += xr[i];
    mean /= (double)D;
    for (int64_t i = 0; i < D; i++) var += (xr[i] - mean) * (xr[i] - mean);
    var /= (double)D;
    double rstd = 1.0 / sqrt(var + n->a.eps);
    double *yr = y[0].data + r * D;
    if (!bwd) {
      for (int64_t i = 0; i < D; i++) yr[i] = (xr[i] - mean) * rstd * x[1]->data[i] + x[2]->data[i];
      continue;
    }
    const double *w = x[1]->data, *dy = x[2]->data + r * D;
    double mg = 0, mgx = 0; /* mean(dxhat), mean(dxhat * xhat) */
    for (int64_t i = 0; i < D; i++) {
      double xh = (xr[i] - mean) * rstd, g = dy[i] * w[i];
      mg += g;
      mgx += g * xh;
      y[1].data[i] += dy[i] * xh;
      y[2].data[i] += dy[i];
    }
    mg /= (double)D;
    mgx /= (double)D;
    for (int64_t i = 0; i < D; i++) {
      double xh = (xr[i] - mean) * rstd;
      yr[i] = rstd * (dy[i] * w[i] - mg - xh * mgx);
    }
  }
}

static void ev_rmsnorm(const Node *n, Tensor *const *x, Tensor *y) {
  const Tensor *a = x[0];
  int64_t D = a->shape.dim[a->shape.rank - 1], rows = ir_numel(&a->shape) / (D ? D : 1);
  bool bwd = n->op == OP_RMSNORM_BWD;
  y[0] = tensor_new(a->dtype, a->shape);
  if (bwd) y[1] = tensor_new(x[1]->dtype, x[1]->shape);
  const double *w = x[1]->data;
  for (int64_t r = 0; r < rows; r++) {
    const double *xr = a->data + r * D;
    double ms = 0;
    for (int64_t i = 0; i < D; i++) ms += xr[i] * xr[i];
    ms /= (double)D;
    double rs = 1.0 / sqrt(ms + n->a.eps);
    double *yr = y[0].data + r * D;
    if (!bwd) {
      for (int64_t i = 0; i < D; i++) yr[i] = xr[i] * rs * w[i];
      continue;
    }
    const double *dy = x[2]->data + r * D;
    double gx = 0;
    for (int64_t i = 0; i < D; i++) {
      gx += dy[i] * w[i] * xr[i];
      y[1].data[i] += dy[i] * xr[i] * rs;
    }
    for (int64_t i = 0; i < D; i++) yr[i] = dy[i] * w[i] * rs - xr[i] * rs * rs * rs * gx / (double)D;
  }
}

static void ev_rope(const Node *n, Tensor *const *x, Tensor *y) {
  const Tensor *a = x[0];
  int64_t B = a->shape.dim[0], S = a->shape.dim[1], C = a->shape.dim[2];
  int H = n->a.heads;
  int64_t hd = C / H, half = hd / 2;
  double sign = n->a.inverse ? -1.0 : 1.0;
  *y = tensor_new(a->dtype, a->shape);
  for (int64_t b = 0; b < B; b++)
    for (int64_t s = 0; s < S; s++)
      for (int h = 0; h < H; h++) {
        const double *xp = a->data + (b * S + s) * C + h * hd;
        double *yp = y->data + (b * S + s) * C + h * hd;
        for (int64_t i = 0; i < half; i++) {
          double ang = sign * (double)(s + n->a.start) * pow(n->a.theta, -2.0 * (double)i / (double)hd);
          double c = cos(ang), sn = sin(ang);
          yp[i] = xp[i] * c - xp[i + half] * sn;
          yp[i + half] = xp[i + half] * c + xp[i] * sn;
        }
      }
}

/* SDPA geometry from q and k. */
typedef struct {
  int64_t B, S, T, H, KV, hd; /* batch, query len, key len, heads, kv heads, head dim */
  double scale;               /* 1 / sqrt(hd) */
} Attn;

static Attn attn_of(const Node *n, const Tensor *q, const Tensor *k) {
  Attn g;
  g.B = q->shape.dim[0];
  g.S = q->shape.dim[1];
  g.T = k->shape.dim[1];
  g.H = n->a.heads;
  g.KV = n->a.kv_heads;
  g.hd = q->shape.dim[2] / g.H;
  g.scale = 1.0 / sqrt((double)g.hd);
  return g;
}

static const double *row(const Tensor *t, int64_t b, int64_t s, int64_t h, int64_t hd) {
  return t->data + (b * t->shape.dim[1] + s) * t->shape.dim[2] + h * hd;
}

static double score(const Attn *g, const double *qr, const double *kr) {
  double acc = 0;
  for (int64_t d = 0; d < g->hd; d++) acc += qr[d] * kr[d];
  return acc * g->scale;
}

static void ev_sdpa(const Node *n, Tensor *const *x, Tensor *y) {
  Attn g = attn_of(n, x[0], x[1]);
  y[0] = tensor_new(x[0]->dtype, x[0]->shape);
  y[1] = tensor_new(DT_F32, ir_shape(3, (int64_t[]){g.B, g.H, g.S}));
  double *p = xcalloc((size_t)(g.T ? g.T : 1), sizeof(double));
  for (int64_t b = 0; b < g.B; b++)
    for (int64_t h = 0; h < g.H; h++) {
      int64_t kh = h / (g.H / g.KV);
      for (int64_t s = 0; s < g.S; s++) {
        const double *qr = row(x[0], b, s, h, g.hd);
        int64_t tend = n->a.causal ? (s + 1 < g.T ? s + 1 : g.T) : g.T;
        double mx = -INFINITY;
        for (int64_t t = 0; t < tend; t++) {
          p[t] = score(&g, qr, row(x[1], b, t, kh, g.hd));
          if (p[t] > mx) mx = p[t];
        }
        double sum = 0;
        for (int64_t t = 0; t < tend; t++) sum += exp(p[t] - mx);
        double lse = mx + log(sum);
        y[1].data[(b * g.H + h) * g.S + s] = lse;
        double *orow = y[0].data + (b * g.S + s) * x[0]->shape.dim[2] + h * g.hd;
        for (int64_t t = 0; t < tend; t++) {
          double w = exp(p[t] - lse);
          const double *vr = row(x[2], b, t, kh, g.hd);
          for (int64_t d = 0; d < g.hd; d++) orow[d] += w * vr[d];
        }
      }
    }
  free(p);
}

/* inputs (q, k, v, o, lse, do) -> (dq, dk, dv) */
static void ev_sdpa_bwd(const Node *n, Tensor *const *x, Tensor *y) {
  Attn g = attn_of(n, x[0], x[1]);
  for (int i = 0; i < 3; i++) y[i] = tensor_new(x[i]->dtype, x[i]->shape);
  for (int64_t b = 0; b < g.B; b++)
    for (int64_t h = 0; h < g.H; h++) {
      int64_t kh = h / (g.H / g.KV);
      for (int64_t s = 0; s < g.S; s++) {
        const double *qr = row(x[0], b, s, h, g.hd), *orow = row(x[3], b, s, h, g.hd),
                     *dor = row(x[5], b, s, h, g.hd);
        double lse = x[4]->data[(b * g.H + h) * g.S + s];
        double Dsum = 0;
        for (int64_t d = 0; d < g.hd; d++) Dsum += dor[d] * orow[d];
        double *dq = (double *)row(&y[0], b, s, h, g.hd);
        int64_t tend = n->a.causal ? (s + 1 < g.T ? s + 1 : g.T) : g.T;
        for (int64_t t = 0; t < tend; t++) {
          const double *kr = row(x[1], b, t, kh, g.hd), *vr = row(x[2], b, t, kh, g.hd);
          double P = exp(score(&g, qr, kr) - lse);
          double dP = 0;
          for (int64_t d = 0; d < g.hd; d++) dP += dor[d] * vr[d];
          double dS = P * (dP - Dsum) * g.scale;
          double *dk = (double *)row(&y[1], b, t, kh, g.hd), *dv = (double *)row(&y[2], b, t, kh, g.hd);
          for (int64_t d = 0; d < g.hd; d++) {
            dv[d] += P * dor[d];
            dq[d] += dS * kr[d];
            dk[d] += dS * qr[d];
          }
        }
      }
    }
}

/* cross_entropy and its backward. */
static bool ev_ce(const Node *n, Tensor *const *x, Tensor *y, int rank) {
  const Tensor *lg = x[0], *tg = x[1];
  int64_t V = lg->shape.dim[lg->shape.rank - 1], L = n->a.len > 0 ? n->a.len : V;
  int64_t rows = ir_numel(&tg->shape), count = 0;
  for (int64_t r = 0; r < rows; r++) {
    double t = tg->data[r];
    if (t < 0) continue;
    if (t >= (double)L || t != floor(t))
      return rt_error(n, "target id %.0f out of range [0, %lld) at position %lld on rank %d", t, (long long)L,
                      (long long)r, rank);
    count++;
  }
  bool bwd = n->op == OP_CROSS_ENTROPY_BWD;
  *y = bwd ? tensor_new(lg->dtype, lg->shape) : tensor_new(DT_F32, ir_scalar_shape());
  if (count == 0) return true;
  double dl = bwd ? x[2]->data[0] / (double)count : 0, total = 0;
  for (int64_t r = 0; r < rows; r++) {
    double t = tg->data[r];
    if (t < 0) continue;
    const double *l = lg->data + r * V;
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < L; v++) mx = l[v] > mx ? l[v] : mx;
    for (int64_t v = 0; v < L; v++) sum += exp(l[v] - mx);
    double lse = mx + log(sum);
    if (!bwd) {
      total += lse - l[(int64_t)t];
      continue;
    }
    double *d = y->data + r * V;
    for (int64_t v = 0; v < L; v++) d[v] = dl * (exp(l[v] - lse) - (v == (int64_t)t ? 1.0 : 0.0));
  }
  if (!bwd) y->data[0] = total / (double)count;
  return true;
}

static void ev_reduce_all(const Node *n, const Tensor *a, Tensor *y) {
  *y = tensor_new(n->out[0]->dtype, ir_scalar_shape());
  int64_t cnt = ir_numel(&a->shape);
  double acc = 0;
  for (int64_t i = 0; i < cnt; i++) acc += n->op == OP_SUMSQ ? a->data[i] * a->data[i] : a->data[i];
  if (n->op == OP_MEAN) acc /= (double)(cnt ? cnt : 1);
  y->data[0] = acc;
}

static void ev_sgd(const Node *n, Tensor *const *x, Tensor *y) {
  const double lr = x[3]->data[0], gs = x[3]->data[1];
  y[0] = tensor_new(x[0]->dtype, x[0]->shape);
  y[1] = tensor_new(x[2]->dtype, x[2]->shape);
  int64_t cnt = ir_numel(&x[0]->shape);
  for (int64_t i = 0; i < cnt; i++) {
    double p = x[0]->data[i], g = gs * x[1]->data[i] + n->a.weight_decay * p;
    double m = n->a.momentum * x[2]->data[i] + g;
    y[1].data[i] = m;
    y[0].data[i] = p - lr * m;
  }
}

static void ev_adamw(const Node *n, Tensor *const *x, Tensor *y) {
  const double lr = x[4]->data[0], gs = x[4]->data[1], step = x[4]->data[2];
  const double b1 = n->a.beta1, b2 = n->a.beta2;
  const double c1 = 1.0 - pow(b1, step), c2 = 1.0 - pow(b2, step);
  y[0] = tensor_new(x[0]->dtype, x[0]->shape);
  y[1] = tensor_new(x[2]->dtype, x[2]->shape);
  y[2] = tensor_new(x[3]->dtype, x[3]->shape);
  int64_t cnt = ir_numel(&x[0]->shape);
  for (int64_t i = 0; i < cnt; i++) {
    double p = x[0]->data[i], g = gs * x[1]->data[i];
    double m = b1 * x[2]->data[i] + (1 - b1) * g;
    double v = b2 * x[3]->data[i] + (1 - b2) * g * g;
    y[1].data[i] = m;
    y[2].data[i] = v;
    y[0].data[i] = p - lr * (m / c1 / (sqrt(v / c2) + n->a.eps) + n->a.weight_decay * p);
  }
}

/* ---- per-rank evaluation of one non-collective, non-region node ------------------- */

static bool eval_local(Interp *it, const Node *n, int rank, Tensor *const *x, Tensor *y) {
  unsigned fl = ir_ops[n->op].flags;
  if (fl & F_EW) return ev_ew(n, x, y);
  const Value *o = n->out[0];
  switch (n->op) {
  case OP_CONST: {
    *y = tensor_new(o->dtype, o->shape);
    int64_t c = ir_numel(&o->shape);
    for (int64_t i = 0; i < c; i++) y->data[i] = n->a.scalar;
    return true;
  }
  case OP_IOTA: {
    *y = tensor_new(o->dtype, o->shape);
    int64_t c = ir_numel(&o->shape);
    for (int64_t i = 0; i < c; i++) y->data[i] = (double)(n->a.start + i);
    return true;
  }
  case OP_AXIS_INDEX:
    *y = tensor_new(DT_I32, ir_scalar_shape());
    y->data[0] = interp_coord(it, rank, (MeshAxis)n->a.mesh_axis);
    return true;
  case OP_RESHAPE: case OP_TRANSPOSE: case OP_SLICE: case OP_PAD: case OP_CONCAT: case OP_REDUCE_SUM:
  case OP_BROADCAST_TO:
    return ev_shape(n, x, y);
  case OP_MATMUL: return ev_matmul(n, x, y);
  case OP_EMBED: return ev_embed(it, n, x, y, rank);
  case OP_EMBED_BWD: return ev_embed_bwd(it, n, x, y, rank);
  case OP_CE_MAX: case OP_CE_SUMS: case OP_CE_LOSS: case OP_CE_GRAD: return ev_ce_part(it, n, x, y, rank);
  case OP_SHARD_SLICE: {
    int ax = n->a.mesh_axis, deg = it->mesh.dim[ax];
    if (x[0]->shape.dim[n->a.axis] % deg != 0)
      return rt_error(n, "axis %d of size %lld does not split %d ways", n->a.axis, (long long)x[0]->shape.dim[n->a.axis], deg);
    *y = chunk_of(x[0], n->a.axis, deg, interp_coord(it, rank, (MeshAxis)ax), n->a.blocks, o->dtype);
    return true;
  }
  case OP_LAYERNORM: case OP_LAYERNORM_BWD: ev_layernorm(n, x, y); return true;
  case OP_RMSNORM: case OP_RMSNORM_BWD: ev_rmsnorm(n, x, y); return true;
  case OP_ROPE: ev_rope(n, x, y); return true;
  case OP_SDPA: ev_sdpa(n, x, y); return true;
  case OP_SDPA_BWD: ev_sdpa_bwd(n, x, y); return true;
  case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_BWD: return ev_ce(n, x, y, rank);
  case OP_SUM: case OP_MEAN: case OP_SUMSQ: ev_reduce_all(n, x[0], y); return true;
  case OP_SGD_UPDATE: ev_sgd(n, x, y); return true;
  case OP_ADAMW_UPDATE: ev_adamw(n, x, y); return true;
  default: die("interp: no local rule for %s", ir_ops[n->op].name);
  }
}

/* ---- collectives --------------------------------------------------------------- */

/* in: Tensor[nranks] of input k; out: Tensor[nranks] of output k. */
static bool eval_coll(Interp *it, const Node *n, int k, const Tensor *in, Tensor *out) {
  int ax = n->a.mesh_axis, deg = it->mesh.dim[ax], R = it->nranks;
  const Tensor **grp = xcalloc((size_t)deg, sizeof(Tensor *));
  bool ok = true;
  for (int r = 0; r < R && ok; r++) {
    int me = interp_coord(it, r, (MeshAxis)ax);
    for (int c = 0; c < deg; c++) {
      grp[c] = &in[rank_with(it, r, ax, c)];
      if (!ir_shape_eq(&grp[c]->shape, &grp[0]->shape)) {
        ok = rt_error(n, "group members' shapes differ along %s", rt_mesh_axis_name(ax));
        break;
      }
    }
    if (!ok) break;
    const Tensor *x = &in[r];
    int64_t cnt = ir_numel(&x->shape);
    switch (n->op) {
    case OP_ALL_REDUCE:
    case OP_REDUCE_SCATTER: {
      Tensor sum = tensor_new(n->out[k]->dtype, x->shape);
      for (int64_t i = 0; i < cnt; i++) {
        double acc = grp[0]->data[i];
        for (int c = 1; c < deg; c++) {
          double v = grp[c]->data[i];
          if (n->op == OP_ALL_REDUCE && n->a.reduce == RED_MAX) acc = v > acc ? v : acc;
          else acc += v;
        }
        if (n->op == OP_ALL_REDUCE && n->a.reduce == RED_AVG) acc /= deg;
        sum.data[i] = acc;
      }
      if (n->op == OP_ALL_REDUCE) {
        out[r] = sum;
        break;
      }
      int64_t len = x->shape.dim[n->a.axis];
      if (len % deg != 0) {
        tensor_free(&sum);
        ok = rt_error(n, "axis %d of size %lld does not split %d ways", n->a.axis, (long long)len, deg);
        break;
      }
      out[r] = chunk_of(&sum, n->a.axis, deg, me, n->a.blocks, n->out[k]->dtype);
      tensor_free(&sum);
      break;
    }
    case OP_ALL_GATHER: out[r] = unchunk_of(grp, deg, n->a.axis, n->a.blocks, n->out[k]->dtype); break;
    case OP_BROADCAST:
      if (n->a.start < 0 || n->a.start >= deg) {
        ok = rt_error(n, "root %lld outside the %s group of %d", (long long)n->a.start, rt_mesh_axis_name(ax), deg);
        break;
      }
      out[r] = tensor_copy(grp[n->a.start]);
      break;
    default: unreachable();
    }
  }
  free(grp);
  return ok;
}

static int peer(const Interp *it, int r, int ax, int64_t off) {
  int deg = it->mesh.dim[ax];
  int c = (int)(((interp_coord(it, r, (MeshAxis)ax) + off) % deg + deg) % deg);
  return rank_with(it, r, ax, c);
}

static void eval_send(Interp *it, const Node *n, const Tensor *in) {
  for (int r = 0; r < it->nranks; r++) {
    if (it->nmail == it->capmail) {
      it->capmail = it->capmail ? it->capmail * 2 : 16;
      Message *m = realloc(it->mail, sizeof(Message) * (size_t)it->capmail);
      if (!m) die("interp: out of memory");
      it->mail = m;
    }
    it->mail[it->nmail++] = (Message){r, peer(it, r, n->a.mesh_axis, n->a.start), n->a.tag, tensor_copy(&in[r])};
  }
}

static bool eval_recv(Interp *it, const Node *n, Tensor *out) {
  for (int r = 0; r < it->nranks; r++) {
    int src = peer(it, r, n->a.mesh_axis, n->a.start);
    int k = 0;
    while (k < it->nmail && !(it->mail[k].src == src && it->mail[k].dst == r && it->mail[k].tag == n->a.tag)) k++;
    if (k == it->nmail)
      return rt_error(n, "rank %d: nothing was sent from rank %d with tag %d", r, src, n->a.tag);
    out[r] = it->mail[k].t;
    memmove(&it->mail[k], &it->mail[k + 1], sizeof(Message) * (size_t)(it->nmail - k - 1));
    it->nmail--;
  }
  return true;
}

/* ---- graphs and regions ---------------------------------------------------------- */

static bool eval_graph(Interp *it, Env *e);

/* Runs body once with args (Tensor[nranks] each); results copied into res[i][r]. */
static bool run_body(Interp *it, const Graph *body, Env *parent, Tensor *const *args, Tensor **res) {
  Env e = env_new(body, parent, args);
  bool ok = eval_graph(it, &e);
  for (int i = 0; ok && i < body->nresults; i++) {
    Tensor *v = lookup(it, &e, body->results[i]);
    for (int r = 0; r < it->nranks; r++) res[i][r] = tensor_copy(&v[r]);
  }
  env_free(it, &e);
  return ok;
}

static Tensor **tensor_table(int rows, int cols) {
  Tensor **t = xcalloc((size_t)(rows ? rows : 1), sizeof(Tensor *));
  for (int i = 0; i < rows; i++) t[i] = xcalloc((size_t)cols, sizeof(Tensor));
  return t;
}

static void table_free(Tensor **t, int rows, int cols) {
  for (int i = 0; i < rows; i++) {
    for (int j = 0; j < cols; j++) tensor_free(&t[i][j]);
    free(t[i]);
  }
  free(t);
}

/* ins[i] = Tensor[nranks]; out = Tensor[nout * nranks]. */
static bool eval_region(Interp *it, const Node *n, Env *e, Tensor *const *ins, Tensor *out) {
  const Graph *b = n->body;
  int R = it->nranks;
  if (n->op == OP_CALL) {
    Tensor **res = tensor_table(b->nresults, R);
    bool ok = run_body(it, b, e, ins, res);
    for (int i = 0; ok && i < n->nout; i++)
      for (int r = 0; r < R; r++) {
        out[i * R + r] = res[i][r];
        res[i][r].data = NULL;
      }
    table_free(res, b->nresults, R);
    return ok;
  }
  int nc = n->a.ncarry, nx = n->a.nxs;
  int64_t count = n->a.count;
  Tensor **carry = tensor_table(nc, R), **xsl = tensor_table(nx, R), **res = tensor_table(b->nresults, R);
  Tensor **args = xcalloc((size_t)(n->nin ? n->nin : 1), sizeof(Tensor *));
  for (int i = 0; i < nc; i++)
    for (int r = 0; r < R; r++) carry[i][r] = tensor_copy(&ins[i][r]);
  for (int i = 0; i < nc; i++) args[i] = carry[i];
  for (int i = 0; i < nx; i++) args[nc + i] = xsl[i];
  for (int i = nc + nx; i < n->nin; i++) args[i] = ins[i];
  bool ok = true;
  for (int64_t step = 0; step < count && ok; step++) {
    int64_t t = n->a.reverse ? count - 1 - step : step;
    for (int i = 0; i < nx; i++)
      for (int r = 0; r < R; r++) {
        const Tensor *xs = &ins[nc + i][r];
        if (xs->shape.rank < 1 || xs->shape.dim[0] != count) {
          ok = rt_error(n, "stacked input %d has no leading dim of %lld", nc + i, (long long)count);
          break;
        }
        tensor_free(&xsl[i][r]);
        Tensor s = slice_of(xs, 0, t, 1);
        s.shape.rank--;
        for (int d = 0; d < s.shape.rank; d++) {
          s.shape.dim[d] = s.shape.dim[d + 1];
          s.shape.sym[d] = s.shape.sym[d + 1];
        }
        xsl[i][r] = s;
      }
    if (!ok || !(ok = run_body(it, b, e, args, res))) break;
    for (int i = 0; i < nc; i++)
      for (int r = 0; r < R; r++) {
        tensor_free(&carry[i][r]);
        carry[i][r] = res[i][r];
        res[i][r].data = NULL;
      }
    for (int i = nc; i < b->nresults; i++)
      for (int r = 0; r < R; r++) {
        Tensor *ys = &out[i * R + r], *y = &res[i][r];
        if (!ys->data) {
          Shape s = y->shape;
          for (int d = s.rank; d > 0; d--) s.dim[d] = s.dim[d - 1];
          s.rank++;
          s.dim[0] = count;
          *ys = tensor_new(y->dtype, s);
        }
        int64_t sz = ir_numel(&y->shape);
        memcpy(ys->data + t * sz, y->data, sizeof(double) * (size_t)sz);
        tensor_free(y);
      }
  }
  for (int i = 0; ok && i < nc; i++)
    for (int r = 0; r < R; r++) {
      out[i * R + r] = carry[i][r];
      carry[i][r].data = NULL;
    }
  table_free(carry, nc, R);
  table_free(xsl, nx, R);
  table_free(res, b->nresults, R);
  free(args);
  return ok;
}

static bool eval_source(Interp *it, const Node *n, Tensor *out) {
  Source *s = find_source(it, NULL, n);
  if (!s) die("interp: source %s not registered", n->a.name ? n->a.name : "?");
  for (int r = 0; r < it->nranks; r++) {
    if (!s->val[r].data) return rt_error(n, "'%s' was not set on rank %d", n->a.name ? n->a.name : "?", r);
    out[r] = tensor_copy(&s->val[r]);
  }
  return true;
}

static bool eval_node(Interp *it, Env *e, const Node *n, Tensor *out) {
  int R = it->nranks;
  Tensor **ins = xcalloc((size_t)(n->nin ? n->nin : 1), sizeof(Tensor *));
  for (int j = 0; j < n->nin; j++) ins[j] = lookup(it, e, n->in[j]);
  bool ok = true;
  if (n->op == OP_PARAM || n->op == OP_STATE || n->op == OP_INPUT) ok = eval_source(it, n, out);
  else if (n->op == OP_ARG) die("interp: ARG evaluated as a node");
  else if (ir_ops[n->op].flags & F_REGION) ok = eval_region(it, n, e, ins, out);
  else if (n->op == OP_SEND) eval_send(it, n, ins[0]);
  else if (n->op == OP_RECV) ok = eval_recv(it, n, out);
  else if (ir_ops[n->op].flags & F_COLL)
    for (int k = 0; ok && k < n->nin; k++) ok = eval_coll(it, n, k, ins[k], out + (size_t)k * (size_t)it->nranks);
  else {
    Tensor *x[8] = {0};
    Tensor *y = xcalloc((size_t)n->nout, sizeof(Tensor));
    for (int r = 0; r < R && ok; r++) {
      Tensor **xv = n->nin <= 8 ? x : xcalloc((size_t)n->nin, sizeof(Tensor *));
      for (int j = 0; j < n->nin; j++) xv[j] = &ins[j][r];
      memset(y, 0, sizeof(Tensor) * (size_t)n->nout);
      ok = eval_local(it, n, r, xv, y);
      for (int i = 0; i < n->nout; i++) out[i * R + r] = y[i];
      if (xv != x) free(xv);
    }
    free(y);
  }
  free(ins);
  return ok;
}

static bool eval_graph(Interp *it, Env *e) {
  const Graph *g = e->g;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op == OP_ARG) continue;
    Tensor *out = xcalloc((size_t)(n->nout * it->nranks), sizeof(Tensor));
    e->vals[i] = out;
    if (!eval_node(it, e, n, out)) return false;
  }
  return true;
}

static void store_results(Interp *it, Env *e) {
  const Graph *g = it->g;
  it->res = xcalloc((size_t)(g->nresults ? g->nresults : 1), sizeof(Result));
  it->nres = g->nresults;
  for (int i = 0; i < g->nresults; i++) {
    it->res[i].name = g->result_names ? g->result_names[i] : NULL;
    it->res[i].val = xcalloc((size_t)it->nranks, sizeof(Tensor));
    Tensor *v = lookup(it, e, g->results[i]);
    for (int r = 0; r < it->nranks; r++) it->res[i].val[r] = tensor_copy(&v[r]);
  }
  it->have_results = true;
}

bool interp_step(Interp *it) {
  free_results(it);
  free_mail(it);
  Env e = env_new(it->g, NULL, NULL);
  bool ok = eval_graph(it, &e);
  if (ok) store_results(it, &e);
  env_free(it, &e);
  if (!ok) return false;
  for (int i = 0; i < it->nres; i++) {
    const char *nm = it->res[i].name;
    if (!nm || strncmp(nm, "next:", 5) != 0) continue;
    Source *s = find_source(it, nm + 5, NULL);
    if (!s || s->node->op == OP_INPUT) die("interp: result %s names no PARAM/STATE", nm);
    for (int r = 0; r < it->nranks; r++) {
      tensor_free(&s->val[r]);
      s->val[r] = tensor_copy(&it->res[i].val[r]);
    }
  }
  return true;
}

bool interp_eval(const Graph *g, int nnamed, const char *const *names, const Tensor *const *vals, Tensor *outs) {
  Interp *it = interp_new(g, NULL, 0);
  for (int i = 0; i < nnamed; i++) {
    Source *s = find_source(it, names[i], NULL);
    if (!s) die("interp_eval: no source named '%s'", names[i]);
    store_block(it, s->node->out[0], 0, vals[i], &s->val[0]);
  }
  Env e = env_new(g, NULL, NULL);
  bool ok = eval_graph(it, &e);
  for (int i = 0; ok && i < g->nresults; i++) outs[i] = tensor_copy(&lookup(it, &e, g->results[i])[0]);
  env_free(it, &e);
  interp_free(it);
  return ok;
}
