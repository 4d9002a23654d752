/* ir/ir.c — op table, types, and the graph builder. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "ptrmap.h"

const OpInfo ir_ops[OP_COUNT] = {
#define OP(name, str, nin, nout, flags) [OP_##name] = {str, nin, nout, flags},
#include "ops.def"
#undef OP
};

/* The compiler's DType is the runtime's RtDType, value for value (both come from RT_DTYPES). */
#define RT_DTYPE(id, name, size, is_float) _Static_assert((int)DT_##id == (int)RT_##id, "DT_" #id " != RT_" #id);
RT_DTYPES(RT_DTYPE)
#undef RT_DTYPE
_Static_assert((int)DT_COUNT == (int)RT_DTYPE_COUNT, "DType and RtDType differ in length");

const char *ir_dtype_name(DType dt) { return rt_dtype_name((RtDType)dt); }
int ir_dtype_size(DType dt) { return (int)rt_dtype_size((RtDType)dt); }
bool ir_dtype_is_float(DType dt) { return rt_dtype_is_float((RtDType)dt); }

int64_t ir_numel(const Shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n *= s->dim[i];
  return n;
}

bool ir_shape_eq(const Shape *a, const Shape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dim[i] != b->dim[i]) return false;
  return true;
}

bool ir_is_result(const Graph *g, const Value *v) {
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == v) return true;
  return false;
}

IrGemm ir_gemm_dims(const Attrs *at, const Shape *a, const Shape *b) {
  int ra = a->rank, rb = b->rank;
  IrGemm d = {.m = at->ta ? a->dim[ra - 1] : a->dim[ra - 2], .n = at->tb ? b->dim[rb - 2] : b->dim[rb - 1],
              .k = at->ta ? a->dim[ra - 2] : a->dim[ra - 1], .batch = 1};
  for (int i = 0; i < ra - 2; i++) d.batch *= a->dim[i];
  for (int i = 0; i < rb - 2; i++) d.b_batched |= b->dim[i] != 1;
  if (at->cb) d.k *= d.batch, d.batch = 1, d.b_batched = false;
  return d;
}

double ir_gemm_flops(const Attrs *at, const Shape *a, const Shape *y) {
  int64_t k = at->ta ? a->dim[a->rank - 2] : a->dim[a->rank - 1];
  if (at->cb)
    for (int i = 0; i < a->rank - 2; i++) k *= a->dim[i];
  return 2.0 * (double)ir_numel(y) * (double)k;
}

bool ir_same_type(const Value *a, const Value *b) { return a->dtype == b->dtype && ir_shape_eq(&a->shape, &b->shape); }

bool ir_enters(const Node *n) { return n->op == OP_ARG || n->op == OP_PARAM || n->op == OP_STATE || n->op == OP_INPUT; }

int ir_next_computing(const Graph *g, int i) {
  int j = i + 1;
  while (j < g->nnodes && ir_enters(g->nodes[j])) j++;
  return j;
}

Shape ir_shape(int rank, const int64_t *dims) {
  Shape s;
  memset(&s, 0, sizeof s);
  if (rank < 0 || rank > IR_MAX_RANK) die("rank %d out of range", rank);
  s.rank = rank;
  for (int i = 0; i < IR_MAX_RANK; i++) {
    s.dim[i] = i < rank ? dims[i] : 0;
    s.sym[i] = -1;
  }
  return s;
}

Shape ir_scalar_shape(void) { return ir_shape(0, NULL); }

Sharding ir_replicated(void) {
  Sharding s;
  memset(&s, 0, sizeof s);
  for (int i = 0; i < IR_MAX_RANK; i++) s.split[i] = s.inner[i] = -1;
  return s;
}

int64_t ir_sharded_index(int64_t n_local, int blocks, int degree, int c, int ideg, int ic, int64_t l) {
  return rt_sharded_index(n_local, blocks, degree, c, ideg, ic, l);
}

Sharding ir_sharding_shift(Sharding h, int k) {
  Sharding r = ir_replicated();
  r.partial = h.partial;
  for (int d = 0; d < IR_MAX_RANK; d++) {
    int e = d - k; /* r's dim d is h's dim e */
    if (e < 0 || e >= IR_MAX_RANK) continue;
    r.split[d] = h.split[e];
    r.blocks[d] = h.blocks[e];
    r.inner[d] = h.inner[e];
  }
  return r;
}

/* One definition of the layout, shared with the runtime (runtime/mesh.c). */
int64_t ir_block_index(int64_t n_local, int blocks, int degree, int c, int64_t l) {
  return rt_block_index(n_local, blocks, degree, c, l);
}

static int axis_degree(int a, const MeshMap *mm) { return mm && a >= 0 && a < RT_AX_COUNT ? mm->dim[a] : 1; }

int ir_dim_degree(const Sharding *h, int d, const MeshMap *mm) {
  if (h->split[d] < 0) return 1;
  return axis_degree(h->split[d], mm) * (h->inner[d] >= 0 ? axis_degree(h->inner[d], mm) : 1);
}

unsigned ir_split_mask(const Sharding *h, int rank, const MeshMap *mm) {
  unsigned mask = 0;
  for (int d = 0; d < rank; d++) {
    if (h->split[d] < 0) continue;
    if (axis_degree(h->split[d], mm) > 1) mask |= 1u << h->split[d];
    if (h->inner[d] >= 0 && axis_degree(h->inner[d], mm) > 1) mask |= 1u << h->inner[d];
  }
  return mask;
}

bool ir_sharding_is_replicated(const Sharding *s) {
  if (s->partial) return false;
  for (int i = 0; i < IR_MAX_RANK; i++)
    if (s->split[i] >= 0) return false;
  return true;
}

Graph *ir_graph_new(Arena *a, Graph *parent) {
  Graph *g = ARENA_NEW(a, Graph);
  g->arena = a;
  g->parent = parent;
  return g;
}

Node *ir_node_new(Graph *g, OpKind op, int nin, Value *const *in, int nout, SrcLoc loc) {
  const OpInfo *oi = &ir_ops[op];
  if (oi->nin >= 0 && oi->nin != nin) die("%s takes %d inputs, got %d", oi->name, oi->nin, nin);
  if (oi->nout >= 0 && oi->nout != nout) die("%s makes %d outputs, got %d", oi->name, oi->nout, nout);
  Node *n = ARENA_NEW(g->arena, Node);
  n->op = op;
  n->id = g->next_node_id++;
  n->nin = nin;
  n->nout = nout;
  n->in = ARENA_ARRAY(g->arena, Value *, nin > 0 ? nin : 1);
  for (int i = 0; i < nin; i++) {
    if (!in[i]) die("%s: input %d is NULL", oi->name, i);
    n->in[i] = in[i];
  }
  n->out = ARENA_ARRAY(g->arena, Value *, nout > 0 ? nout : 1);
  for (int i = 0; i < nout; i++) {
    Value *v = ARENA_NEW(g->arena, Value);
    v->def = n;
    v->idx = i;
    v->id = g->next_value_id++;
    v->dtype = DT_F32;
    v->shape = ir_scalar_shape();
    v->sharding = ir_replicated();
    n->out[i] = v;
  }
  n->loc = loc;
  n->graph = g;
  arena_grow(g->arena, (void **)&g->nodes, &g->capnodes, g->nnodes + 1, sizeof(Node *));
  g->nodes[g->nnodes++] = n;
  ir_touch(g);
  return n;
}

Value *ir_emit(Graph *g, OpKind op, int nin, Value *const *in, DType dt, Shape shape,
               const Attrs *attrs, SrcLoc loc) {
  Node *n = ir_node_new(g, op, nin, in, 1, loc);
  if (attrs) n->a = *attrs;
  n->out[0]->dtype = dt;
  n->out[0]->shape = shape;
  return n->out[0];
}

Node *ir_add_arg(Graph *body, DType dt, Shape shape, const char *name) {
  Node *n = ir_node_new(body, OP_ARG, 0, NULL, 1, (SrcLoc){0});
  n->a.index = body->nargs;
  n->out[0]->dtype = dt;
  n->out[0]->shape = shape;
  n->out[0]->name = name;
  arena_grow(body->arena, (void **)&body->args, &body->capargs, body->nargs + 1, sizeof(Node *));
  body->args[body->nargs++] = n;
  return n;
}

void ir_add_result(Graph *g, Value *v, const char *name) {
  int cap = g->capresults;
  arena_grow(g->arena, (void **)&g->results, &g->capresults, g->nresults + 1, sizeof(Value *));
  int cap2 = cap;
  arena_grow(g->arena, (void **)&g->result_names, &cap2, g->nresults + 1, sizeof(char *));
  g->results[g->nresults] = v;
  g->result_names[g->nresults] = name;
  g->nresults++;
  ir_touch(g);
}

void ir_replace_uses(Graph *g, Value *from, Value *to) {
  bool changed = false;
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++)
      if (n->in[j] == from) n->in[j] = to, changed = true;
  }
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == from) g->results[i] = to, changed = true;
  if (changed) ir_touch(g);
}

void ir_replace_uses_map_deep(Graph *g, const PtrMap *map) {
  bool changed = false;
  intptr_t t;
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++)
      if (ptrmap_get(map, n->in[j], &t)) n->in[j] = (Value *)t, changed = true;
    if (n->body) ir_replace_uses_map_deep(n->body, map);
  }
  for (int i = 0; i < g->nresults; i++)
    if (ptrmap_get(map, g->results[i], &t)) g->results[i] = (Value *)t, changed = true;
  if (changed) ir_touch(g);
}

void ir_replace_uses_many(Graph *g, int n, Value *const *from, Value *const *to) {
  if (n <= 2) {
    for (int i = 0; i < n; i++) ir_replace_uses(g, from[i], to[i]);
    return;
  }
  PtrMap map = {0};
  for (int i = 0; i < n; i++)
    if (from[i] != to[i]) ptrmap_put(&map, from[i], (intptr_t)to[i]);
  for (int i = 0; i < n; i++)
    if (from[i] != to[i] && ptrmap_get(&map, to[i], NULL)) die("ir_replace_uses_many: a replacement is itself replaced");
  intptr_t t;
  bool changed = false;
  for (int i = 0; i < g->nnodes; i++) {
    Node *x = g->nodes[i];
    for (int j = 0; j < x->nin; j++)
      if (ptrmap_get(&map, x->in[j], &t)) x->in[j] = (Value *)t, changed = true;
  }
  for (int i = 0; i < g->nresults; i++)
    if (ptrmap_get(&map, g->results[i], &t)) g->results[i] = (Value *)t, changed = true;
  ptrmap_free(&map);
  if (changed) ir_touch(g);
}

int ir_count_uses(const Graph *g, const Value *v) {
  int c = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++) c += n->in[j] == v;
  }
  return c;
}

int ir_count_uses_deep(const Graph *g, const Value *v) {
  int c = ir_count_uses(g, v);
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) c += ir_count_uses_deep(g->nodes[i]->body, v);
  return c;
}

bool ir_reads_deep(const Graph *g, const Value *v) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++)
      if (n->in[j] == v) return true;
    if (n->body && ir_reads_deep(n->body, v)) return true;
  }
  return false;
}

void ir_count_uses_n(const Graph *g, int n, const Value *const *v, int *uses, int *deep) {
  for (int k = 0; k < n; k++) uses[k] = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *x = g->nodes[i];
    for (int j = 0; j < x->nin; j++)
      for (int k = 0; k < n; k++) uses[k] += x->in[j] == v[k];
  }
  if (!deep) return;
  for (int k = 0; k < n; k++) deep[k] = uses[k];
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body)
      for (int k = 0; k < n; k++) deep[k] += ir_count_uses_deep(g->nodes[i]->body, v[k]);
}

/* (A body may be the body of many nodes — the pipeline's instructions share theirs — and is walked
 * for each, as its uses are that many: no map is sized by that walk.) */
void ir_use_counts(const Graph *g, PtrMap *counts) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++) ptrmap_add(counts, n->in[j], 1);
    if (n->body) ir_use_counts(n->body, counts);
  }
}

/* A body's reads (its nodes' and, once per node owning it, a nested body's) of values defined around
 * it, as a list (value -> count), found once per body (ir_use_counts_outer) and kept while the body is
 * as it was: its version (ir_touch) and its nested bodies' lists still good. */
typedef struct OuterReads {
  struct OuterReads *next; /* (all of a memo's lists, freed with it) */
  uint64_t version;        /* b's then */
  int nkids, n;
  const Graph **kids; /* the bodies of b's nodes, in order */
  const Value **v;
  intptr_t *c;
} OuterReads;

struct IrUseMemo {
  PtrMap of; /* body -> its OuterReads */
  OuterReads *owned;
};

IrUseMemo *ir_use_memo_new(void) {
  IrUseMemo *m = calloc(1, sizeof *m);
  if (!m) die("out of memory");
  return m;
}

void ir_use_memo_free(IrUseMemo *m) {
  if (!m) return;
  while (m->owned) {
    OuterReads *o = m->owned;
    m->owned = o->next;
    free(o->kids), free(o->v), free(o->c), free(o);
  }
  ptrmap_free(&m->of);
  free(m);
}

static bool outer_current(const IrUseMemo *m, const Graph *b) {
  intptr_t got;
  if (!ptrmap_get(&m->of, b, &got)) return false;
  const OuterReads *o = (const OuterReads *)got;
  if (o->version != b->version) return false;
  for (int k = 0; k < o->nkids; k++)
    if (!outer_current(m, o->kids[k])) return false;
  return true;
}

static const OuterReads *outer_reads(const Graph *b, IrUseMemo *m) {
  intptr_t got = 0;
  bool had = ptrmap_get(&m->of, b, &got);
  if (had && outer_current(m, b)) return (const OuterReads *)got;
  PtrMap acc = {0};
  int nkids = 0;
  for (int i = 0; i < b->nnodes; i++) {
    const Node *x = b->nodes[i];
    for (int j = 0; j < x->nin; j++)
      if (x->in[j]->def->graph != b) ptrmap_add(&acc, x->in[j], 1);
    if (!x->body) continue;
    nkids++;
    const OuterReads *r = outer_reads(x->body, m); /* values of b or around it */
    for (int k = 0; k < r->n; k++)
      if (r->v[k]->def->graph != b) ptrmap_add(&acc, r->v[k], r->c[k]);
  }
  OuterReads *o = had ? (OuterReads *)got : calloc(1, sizeof *o);
  if (!o) die("out of memory");
  free(o->kids), free(o->v), free(o->c);
  o->kids = malloc(sizeof *o->kids * (size_t)(nkids + 1));
  o->v = malloc(sizeof *o->v * (size_t)(acc.count + 1));
  o->c = malloc(sizeof *o->c * (size_t)(acc.count + 1));
  if (!o->kids || !o->v || !o->c) die("out of memory");
  o->version = b->version;
  o->nkids = o->n = 0;
  for (int i = 0; i < b->nnodes; i++)
    if (b->nodes[i]->body) o->kids[o->nkids++] = b->nodes[i]->body;
  for (int s = 0; s < acc.cap; s++)
    if (acc.slots[s].key) o->v[o->n] = acc.slots[s].key, o->c[o->n++] = acc.slots[s].val;
  ptrmap_free(&acc);
  if (!had) {
    o->next = m->owned;
    m->owned = o;
    ptrmap_put(&m->of, b, (intptr_t)o);
  }
  return o;
}

void ir_use_memo_keep(IrUseMemo *m, const Graph *b, uint64_t v0) {
  intptr_t got;
  if (!m || !ptrmap_get(&m->of, b, &got)) return;
  OuterReads *o = (OuterReads *)got;
  if (o->version == v0) o->version = b->version;
}

/* SHARDC_VERIFY=audit (the tests, the fuzzer): a memo's counts are checked against a fresh walk's. */
static void audit_memo(const Graph *g, const PtrMap *before, const PtrMap *counts, bool only_keys) {
  PtrMap fresh = {0};
  for (int s = 0; s < before->cap; s++)
    if (before->slots[s].key) ptrmap_put(&fresh, before->slots[s].key, before->slots[s].val);
  ir_use_counts_outer(g, &fresh, only_keys, NULL);
  bool same = fresh.count == counts->count;
  for (int s = 0; s < fresh.cap && same; s++) {
    intptr_t c = -1;
    if (!fresh.slots[s].key) continue;
    same = ptrmap_get(counts, fresh.slots[s].key, &c) && c == fresh.slots[s].val;
    if (!same)
      die("ir_use_counts_outer: a body changed without ir_touch since the memo read it (%%%d: %ld reads "
          "remembered, %ld found)", ((const Value *)fresh.slots[s].key)->id, (long)c, (long)fresh.slots[s].val);
  }
  if (!same) die("ir_use_counts_outer: a body changed without ir_touch since the memo read it");
  ptrmap_free(&fresh);
}

void ir_use_counts_outer(const Graph *g, PtrMap *counts, bool only_keys, IrUseMemo *memo) {
  const char *e = memo ? getenv("SHARDC_VERIFY") : NULL;
  PtrMap before = {0};
  bool audit = e && strcmp(e, "audit") == 0;
  if (audit)
    for (int s = 0; s < counts->cap; s++)
      if (counts->slots[s].key) ptrmap_put(&before, counts->slots[s].key, counts->slots[s].val);
  IrUseMemo *m = memo ? memo : ir_use_memo_new();
  intptr_t c;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *x = g->nodes[i];
    for (int j = 0; j < x->nin; j++)
      if (!only_keys) ptrmap_add(counts, x->in[j], 1);
      else if (ptrmap_get(counts, x->in[j], &c)) ptrmap_put(counts, x->in[j], c + 1);
    if (!x->body) continue;
    const OuterReads *r = outer_reads(x->body, m);
    for (int k = 0; k < r->n; k++)
      if (!only_keys) ptrmap_add(counts, r->v[k], r->c[k]);
      else if (ptrmap_get(counts, r->v[k], &c)) ptrmap_put(counts, r->v[k], c + r->c[k]);
  }
  if (!memo) ir_use_memo_free(m);
  if (audit) audit_memo(g, &before, counts, only_keys);
  ptrmap_free(&before);
}

static bool has_effect(const Node *n) {
  return n->op == OP_SEND || n->op == OP_RECV || (ir_ops[n->op].flags & F_COLL) ||
         n->op == OP_ARG || n->op == OP_PARAM || n->op == OP_STATE || n->op == OP_INPUT;
}

/* Depth-first: n after everything of g it reads (state: 0 unseen, 1 on the path, 2 placed). */
static void topo_visit(Graph *g, Node *n, PtrMap *state, Node **out, int *k) {
  intptr_t st;
  if (ptrmap_get(state, n, &st) && st != 0) {
    if (st == 1) die("ir_topo_sort: a cycle in the graph");
    return;
  }
  ptrmap_put(state, n, 1);
  for (int j = 0; j < n->nin; j++)
    if (n->in[j]->def->graph == g) topo_visit(g, n->in[j]->def, state, out, k);
  ptrmap_put(state, n, 2);
  out[(*k)++] = n;
}

void ir_topo_sort(Graph *g) {
  PtrMap state = {0};
  for (int i = 0; i < g->nnodes; i++) ptrmap_put(&state, g->nodes[i], 0);
  Node **out = ARENA_ARRAY(g->arena, Node *, g->nnodes + 1);
  int k = 0;
  for (int i = 0; i < g->nnodes; i++) topo_visit(g, g->nodes[i], &state, out, &k);
  memcpy(g->nodes, out, sizeof(Node *) * (size_t)k);
  ptrmap_free(&state);
  ir_touch(g);
}

void ir_move_last(Graph *g, int pos) {
  int last = g->nnodes - 1;
  if (pos < 0 || pos > last) die("ir_move_last: position %d outside 0..%d", pos, last);
  Node *n = g->nodes[last];
  memmove(&g->nodes[pos + 1], &g->nodes[pos], sizeof(Node *) * (size_t)(last - pos));
  g->nodes[pos] = n;
  ir_touch(g);
}

void ir_drop_node(Graph *g, const Node *n) {
  int k = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] != n) g->nodes[k++] = g->nodes[i];
  g->nnodes = k;
  ir_touch(g);
}

void ir_remove_dead(Graph *g) {
  /* Mark live values backwards from results and effectful nodes. Node ids are dense
   * per graph only at creation, so mark through a per-call array indexed by position. */
  Arena tmp;
  arena_init(&tmp);
  bool *live = ARENA_ARRAY(&tmp, bool, g->nnodes + 1);
  for (int i = 0; i < g->nnodes; i++) g->nodes[i]->id = i;
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i]->def->graph == g) live[g->results[i]->def->id] = true;
  for (int i = g->nnodes - 1; i >= 0; i--) {
    Node *n = g->nodes[i];
    if (has_effect(n)) live[i] = true;
    if (!live[i]) continue;
    for (int j = 0; j < n->nin; j++)
      if (n->in[j]->def->graph == g) live[n->in[j]->def->id] = true;
  }
  int k = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (live[i]) g->nodes[k++] = g->nodes[i];
  g->nnodes = k;
  for (int i = 0; i < g->nnodes; i++) g->nodes[i]->id = i;
  g->next_node_id = g->nnodes;
  arena_free(&tmp);
  ir_touch(g);
}

static void reader_stages_in(const Graph *g, const Graph *in, uint64_t stages, uint64_t *rmask) {
  for (int i = 0; i < in->nnodes; i++) {
    const Node *x = in->nodes[i];
    uint64_t st = in == g ? (ir_node_stages(x) ? ir_node_stages(x) : IR_EVERY_STAGE) : stages;
    for (int j = 0; j < x->nin; j++) {
      const Value *u = x->in[j];
      if (u->def->graph != g) continue;
      if (x->op == OP_STAGE_SELECT && in == g) { /* input j is read on stage j only (if it runs there) */
        if (!ir_runs_on(x, j)) continue;
        rmask[u->id] |= 1ull << j;
        continue;
      }
      rmask[u->id] |= st;
    }
    if (x->body) reader_stages_in(g, x->body, st, rmask);
  }
}

void ir_reader_stages(const Graph *g, uint64_t *rmask, int nids) {
  for (int v = 0; v < nids; v++) rmask[v] = 0;
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i]->nout; k++)
      if (g->nodes[i]->out[k]->id < 0 || g->nodes[i]->out[k]->id >= nids)
        die("ir_reader_stages: value id %d out of [0, %d)", g->nodes[i]->out[k]->id, nids);
  reader_stages_in(g, g, IR_EVERY_STAGE, rmask);
  for (int r = 0; r < g->nresults; r++) {
    const Value *v = g->results[r];
    const char *nm = g->result_names ? g->result_names[r] : NULL;
    if (v->def->graph != g) continue;
    if (nm && !strncmp(nm, "next:", 5)) continue; /* written back into its source, on the update's stages */
    uint64_t st = IR_EVERY_STAGE; /* the host reads a result on every rank, a gradient of a parameter held on some stages there */
    for (int i = 0; nm && !strncmp(nm, "grad:", 5) && i < g->nnodes; i++)
      if (g->nodes[i]->op == OP_PARAM && ir_node_stages(g->nodes[i]) && g->nodes[i]->a.name &&
          !strcmp(g->nodes[i]->a.name, nm + 5))
        st = ir_node_stages(g->nodes[i]);
    rmask[v->id] |= st;
  }
}

/* s with a leading dim of k: the shape of k such values stacked (a layer loop's xs / ys). */
Shape ir_stacked_shape(Shape s, int64_t k) {
  if (s.rank + 1 > IR_MAX_RANK) die("ir_stacked_shape: rank %d + 1 is over %d", s.rank, IR_MAX_RANK);
  for (int d = s.rank; d > 0; d--) s.dim[d] = s.dim[d - 1], s.sym[d] = s.sym[d - 1];
  s.dim[0] = k;
  s.sym[0] = -1;
  s.rank++;
  return s;
}

/* A new output of loop r (a REPEAT): body value v, a new result of its body (last), stacked by the count; its
 * sharding v's shifted past the new dim, unplaced (offset -1). */
Value *ir_repeat_add_stacked(Node *r, Value *v) {
  Graph *g = r->graph;
  Value **out = ARENA_ARRAY(g->arena, Value *, r->nout + 1);
  memcpy(out, r->out, sizeof(Value *) * (size_t)r->nout);
  Value *o = ARENA_NEW(g->arena, Value);
  o->def = r;
  o->idx = r->nout;
  o->id = g->next_value_id++;
  o->dtype = v->dtype;
  o->shape = ir_stacked_shape(v->shape, r->a.count);
  o->sharding = ir_sharding_shift(v->sharding, 1);
  o->offset = -1;
  out[r->nout] = o;
  r->out = out;
  r->nout++;
  ir_add_result(r->body, v, NULL);
  ir_touch(g);
  return o;
}

void ir_repeat_remove_arg(Node *r, int pos) {
  Graph *b = r->body;
  Node *a = b->args[pos];
  ir_drop_node(b, a);
  for (int i = pos; i + 1 < b->nargs; i++) {
    b->args[i] = b->args[i + 1];
    b->args[i]->a.index = i;
  }
  b->nargs--;
  for (int i = pos; i + 1 < r->nin; i++) r->in[i] = r->in[i + 1];
  r->nin--;
  ir_touch(b);
  ir_touch(r->graph);
}

void ir_repeat_remove_outputs(Node *r, const bool *drop) {
  Graph *b = r->body;
  int k = 0;
  for (int i = 0; i < r->nout; i++) {
    if (drop[i]) continue;
    r->out[k] = r->out[i];
    r->out[k]->idx = k;
    b->results[k] = b->results[i];
    if (b->result_names) b->result_names[k] = b->result_names[i];
    k++;
  }
  r->nout = k;
  b->nresults = k;
  ir_touch(r->graph);
  ir_touch(b);
}

int ir_repeat_drop_unread_xs(Node *r) {
  int nc = r->a.ncarry, k = 0;
  for (int i = nc + r->a.nxs - 1; i >= nc; i--) {
    const Value *a = r->body->args[i]->out[0];
    if (ir_count_uses_deep(r->body, a) || ir_is_result(r->body, a)) continue;
    k++;
    ir_repeat_remove_arg(r, i);
    r->a.nxs--;
  }
  return k;
}

/* Row `row` of a stacked x [k, ...]: a slice reshaped to `like` (the body argument it stands for). */
Value *ir_stacked_row(Graph *g, Value *x, int64_t row, const Value *like, SrcLoc loc) {
  Attrs sa = {0};
  sa.axis = 0;
  sa.start = row;
  sa.len = 1;
  Shape one = x->shape;
  one.dim[0] = 1;
  Value *s = ir_emit(g, OP_SLICE, 1, &x, x->dtype, one, &sa, loc);
  s->sharding = x->sharding;
  Value *r = ir_emit(g, OP_RESHAPE, 1, &s, like->dtype, like->shape, NULL, loc);
  r->sharding = like->sharding;
  return r;
}

bool ir_slice_is_view(const Node *n) {
  return n->op == OP_SLICE && n->stage && n->a.axis == 0 && n->a.start == 0 && n->in[0]->dtype == n->out[0]->dtype;
}

bool ir_reads_row_stride(const Node *n, int k) {
  if (n->op == OP_SDPA) return k >= 0 && k < 3;               /* q, k, v */
  if (n->op == OP_SDPA_BWD) return k >= 0 && k < 6 && k != 4; /* q, k, v, o, dout (not lse [B, H, S]) */
  return false;
}

bool ir_writes_row_stride(const Node *n, int k) {
  if (n->op == OP_SDPA) return k == 0;                 /* o (not lse) */
  if (n->op == OP_SDPA_BWD) return k >= 0 && k < 3; /* dq, dk, dv */
  return false;
}

const char *ir_copy_source(const char *state_name) {
  return state_name && strncmp(state_name, "bf16:", 5) == 0 ? state_name + 5 : NULL;
}

Value *ir_copy_written(const Graph *g, const Value *v) {
  for (int r = 0; r < g->nresults; r++) {
    const char *nm = g->result_names ? g->result_names[r] : NULL;
    if (g->results[r] != v || !nm || strncmp(nm, "next:", 5) != 0 || !ir_copy_source(nm + 5)) continue;
    for (int i = 0; i < g->nnodes; i++)
      if (g->nodes[i]->op == OP_STATE && g->nodes[i]->a.name && strcmp(g->nodes[i]->a.name, nm + 5) == 0)
        return g->nodes[i]->out[0];
  }
  return NULL;
}

static bool widening_cast(const Node *c) {
  return c->op == OP_CAST && c->in[0]->dtype == DT_BF16 && c->out[0]->dtype == DT_F32 && !c->in[0]->host &&
         !c->out[0]->host;
}

/* Whether node n's input j reads a bf16 operand as well (widening it itself, exactly). */
static bool widens(const Node *n, int j) {
  return !n->out[0]->host &&
         ((n->op == OP_SUMSQ && j == 0) || ((n->op == OP_ADAMW_UPDATE || n->op == OP_SGD_UPDATE) && j == 1));
}

void ir_mark_folded_casts(Graph *g) {
  PtrMap all = {0}, good = {0}; /* a widening cast's output -> its readers, and those that widen */
  ir_use_counts(g, &all);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++) {
      intptr_t k = 0;
      if (!widening_cast(n->in[j]->def) || !widens(n, j)) continue;
      ptrmap_get(&good, n->in[j], &k);
      ptrmap_put(&good, n->in[j], k + 1);
    }
  }
  for (int i = 0; i < g->nnodes; i++) {
    Node *c = g->nodes[i];
    intptr_t na = 0, ng = 0;
    c->cast_folded = widening_cast(c) && ptrmap_get(&good, c->out[0], &ng) && ptrmap_get(&all, c->out[0], &na) &&
                     na == ng;
  }
  ptrmap_free(&all);
  ptrmap_free(&good);
}

bool ir_cast_folded(const Node *c) { return c->cast_folded; }

const Value *ir_unfold_cast(const Value *v) { return ir_cast_folded(v->def) ? v->def->in[0] : v; }

bool ir_attn_flash(DType dt, int64_t hd) { return dt == DT_BF16 && hd % 16 == 0 && hd <= 128; }

bool ir_update_casts_copy(const Graph *g, int i) {
  if (i < 1 || i >= g->nnodes) return false;
  const Node *u = g->nodes[i - 1], *x = g->nodes[i];
  return (u->op == OP_ADAMW_UPDATE || u->op == OP_SGD_UPDATE) && x->op == OP_CAST && x->in[0] == u->out[0] &&
         x->out[0]->dtype == DT_BF16 && !x->out[0]->host && !u->out[0]->host &&
         (ir_copy_written(g, x->out[0]) || ir_copy_gathered(g, x->out[0]));
}

bool ir_host_update_casts_copy(const Graph *g, int i) {
  if (i < 1 || i >= g->nnodes) return false;
  const Node *u = g->nodes[i - 1], *x = g->nodes[i];
  return u->op == OP_ADAMW_UPDATE && u->in[0]->dtype == DT_F32 && x->op == OP_CAST && x->in[0] == u->out[0] &&
         x->out[0]->dtype == DT_BF16 && x->out[0]->host;
}

Value *ir_copy_gathered(const Graph *g, const Value *v) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_ALL_GATHER && g->nodes[i]->in[0] == v) return ir_copy_written(g, g->nodes[i]->out[0]);
  return NULL;
}
