/* ir/interp.c — the reference interpreter (contract: ir/interp.h): its state, sources and the
 * graph walk. The op kernels are interp_ops.c, the simulated collectives interp_coll.c, tensors
 * and errors interp_util.c.
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
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "interp_internal.h"
#include "rng.h"

/* ---- node positions ------------------------------------------------------- */

/* Node* -> its position in its graph (ir/ptrmap.h). */
static void pos_put(PtrMap *m, const void *k, int v) { ptrmap_put(m, k, v); }

static int pos_get(const PtrMap *m, const void *k) {
  intptr_t v;
  if (!ptrmap_get(m, k, &v)) die("interp: node not found in any graph");
  return (int)v;
}

/* ---- interpreter state ---------------------------------------------------- */

typedef struct Env Env;
struct Env {
  const Graph *g;     /* graph whose values this env holds */
  Env *parent;        /* enclosing graph's env (captures) */
  Tensor **vals;      /* [g->nnodes] -> Tensor[nout * nranks], NULL until computed */
  Tensor *const *args; /* [g->nargs] -> Tensor[nranks] (borrowed), region bodies */
  bool last;          /* a repeat's body on its last iteration (an all_gather `skiplast` is not run) */
};

int interp_nranks(const Interp *it) { return it->nranks; }

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
  const int *rows; /* uneven pipeline stages (RT_BLOCKS_STAGES): the mesh's stage_rows */
  int chunks;      /* ... and its stage_chunks */
  int ideg[IR_MAX_RANK], icoord[IR_MAX_RANK]; /* the inner split (Sharding.inner; 1: none) */
} BlockMap;

/* Returns false when v is replicated (the logical tensor is the local one). */
static bool block_of(const Interp *it, const Value *v, int r, BlockMap *bm) {
  bool split = false;
  bm->logical = v->shape;
  bm->rows = it->mesh.stage_rows;
  bm->chunks = it->mesh.stage_chunks;
  for (int d = 0; d < v->shape.rank; d++) {
    int a = v->sharding.split[d];
    bm->deg[d] = 1;
    bm->coord[d] = 0;
    bm->blocks[d] = v->sharding.blocks[d];
    if (a >= 0 && a < RT_AX_COUNT && it->mesh.dim[a] > 1) {
      bm->deg[d] = it->mesh.dim[a];
      bm->coord[d] = interp_coord(it, r, (MeshAxis)a);
      bm->logical.dim[d] = bm->blocks[d] == RT_BLOCKS_STAGES ? rt_stage_logical(bm->rows, bm->deg[d], bm->chunks)
                                                             : v->shape.dim[d] * it->mesh.dim[a];
      split = true;
    }
    int in = v->sharding.inner[d];
    bm->ideg[d] = 1;
    bm->icoord[d] = 0;
    if (a >= 0 && in >= 0 && in < RT_AX_COUNT && it->mesh.dim[in] > 1) {
      bm->ideg[d] = it->mesh.dim[in];
      bm->icoord[d] = interp_coord(it, r, (MeshAxis)in);
      bm->logical.dim[d] *= it->mesh.dim[in];
      split = true;
    }
  }
  return split;
}

/* Logical flat index of local element i of rank r's block; -1: a padding row of an uneven
 * pipeline split (RT_BLOCKS_STAGES), no logical element. */
static int64_t logical_index(const Shape *local, const BlockMap *bm, int64_t i) {
  int64_t li = 0, rem = i, mul = 1;
  for (int d = local->rank - 1; d >= 0; d--) {
    int64_t c = rem % local->dim[d];
    rem /= local->dim[d];
    if (bm->deg[d] > 1 && bm->blocks[d] == RT_BLOCKS_STAGES) {
      c = rt_stage_index(bm->rows, bm->deg[d], bm->chunks, bm->coord[d], c);
      if (c < 0) return -1;
    } else if (bm->deg[d] > 1 || bm->ideg[d] > 1)
      c = ir_sharded_index(local->dim[d], bm->blocks[d], bm->deg[d], bm->coord[d], bm->ideg[d], bm->icoord[d], c);
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
  for (int64_t i = 0; i < n; i++) {
    int64_t li = logical_index(&v->shape, &bm, i);
    dst->data[i] = li < 0 ? 0 : t->data[li];
  }
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
    if (li < 0) { /* a padding row: nothing */
      dst->data[i] = 0;
      continue;
    }
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
      s->val = interp_xcalloc((size_t)it->nranks, sizeof(Tensor));
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
  Interp *it = interp_xcalloc(1, sizeof *it);
  it->g = g;
  it->seed = seed;
  if (mesh) it->mesh = *mesh;
  else if (!rt_mesh_init(&it->mesh, 1, 1, 1, 1, 1)) die("interp: one-rank mesh");
  it->nranks = it->mesh.world;
  index_graph(&it->pos, g);
  return it;
}

/* The persistent bf16 copies (STATE "bf16:<param>", passes/wshadow.c) of parameter `param` (NULL:
 * every parameter) on rank `rank` (-1: every rank): the parameter's value cast, as the trainer
 * derives them at start and after loading weights (never read from a checkpoint). */
static void derive_copies(Interp *it, const char *param, int rank) {
  for (int i = 0; i < it->nsrc; i++) {
    const Node *n = it->src[i].node;
    const char *of = n->op == OP_STATE ? ir_copy_source(n->a.name) : NULL;
    if (!of || (param && strcmp(of, param) != 0)) continue;
    Source *p = find_source(it, of, NULL);
    if (!p || p->node->op != OP_PARAM) die("interp: the copy %s has no parameter %s", n->a.name, of);
    if (ir_numel(&p->node->out[0]->shape) != ir_numel(&n->out[0]->shape)) {
      /* a master kept as the rank's shard (offload under ZeRO, passes/zero_offload.c; ZeRO 1 / 2's split
       * masters, passes/zero_master.c), the copy whole: the copy's block of the rounded logical parameter */
      Tensor t;
      if (!interp_get_logical(it, of, &t, NULL)) die("interp: no logical %s", of);
      for (int64_t k = 0; k < ir_numel(&t.shape); k++) t.data[k] = interp_round(n->out[0]->dtype, t.data[k]);
      for (int r = 0; r < it->nranks; r++)
        if ((rank < 0 || r == rank) && !store_block(it, n->out[0], r, &t, &it->src[i].val[r]))
          die("interp: the copy %s is not its parameter's shape", n->a.name);
      tensor_free(&t);
      continue;
    }
    for (int r = 0; r < it->nranks; r++) {
      if (rank >= 0 && r != rank) continue;
      Tensor *c = &it->src[i].val[r];
      const Tensor *w = &p->val[r];
      int64_t cnt = ir_numel(&c->shape);
      if (!w->data || ir_numel(&w->shape) != cnt) die("interp: the copy %s is not its parameter's shape", n->a.name);
      for (int64_t k = 0; k < cnt; k++) c->data[k] = interp_round(c->dtype, w->data[k]);
    }
  }
}

Interp *interp_new(const Graph *g, const MeshMap *mesh, uint64_t seed) {
  Interp *it = interp_make(g, mesh, seed);
  int cap = 0;
  collect_sources(it, g, &cap);
  derive_copies(it, NULL, -1);
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

bool interp_has_source(const Interp *it, const char *name) { return find_source(it, name, NULL) != NULL; }

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
  if (s->node->op == OP_PARAM) derive_copies(it, name, rank); /* its bf16 copy follows it */
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
  /* a parameter or state held on one pipeline stage (passes/pipe_owners.c), its update and its
   * gradient: that stage's ranks' (the others hold nothing of it) */
  uint64_t held = v->def->op == OP_PARAM || v->def->op == OP_STATE ? ir_node_stages(v->def) : 0;
  if (!strncmp(name, "next:", 5) || !strncmp(name, "grad:", 5)) {
    const Source *x = find_source(it, name + 5, NULL);
    if (x) held = ir_node_stages(x->node);
  }
  BlockMap bm;
  int r0 = 0;
  while (held && r0 + 1 < it->nranks && !(held >> interp_coord(it, r0, RT_AX_PP) & 1)) r0++;
  block_of(it, v, r0, &bm);
  *out = tensor_new(v->dtype, bm.logical);
  bool *seen = interp_xcalloc((size_t)(ir_numel(&bm.logical) + 1), sizeof(bool));
  double sp = 0;
  for (int r = 0; r < it->nranks; r++) {
    if (held && !(held >> interp_coord(it, r, RT_AX_PP) & 1)) continue;
    block_of(it, v, r, &bm);
    int64_t n = ir_numel(&vals[r].shape);
    for (int64_t i = 0; i < n; i++) {
      int64_t li = logical_index(&vals[r].shape, &bm, i);
      if (li < 0) continue;
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
  Env e = {g, parent, interp_xcalloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof(Tensor *)), args, false};
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

/* ---- graphs and regions ---------------------------------------------------------- */

static bool eval_graph(Interp *it, Env *e);

/* Runs body once with args (Tensor[nranks] each); results copied into res[i][r]. */
static bool run_body(Interp *it, const Graph *body, Env *parent, Tensor *const *args, Tensor **res, bool last) {
  Env e = env_new(body, parent, args);
  e.last = last;
  bool ok = eval_graph(it, &e);
  for (int i = 0; ok && i < body->nresults; i++) {
    Tensor *v = lookup(it, &e, body->results[i]);
    for (int r = 0; r < it->nranks; r++) res[i][r] = tensor_copy(&v[r]);
  }
  env_free(it, &e);
  return ok;
}

static Tensor **tensor_table(int rows, int cols) {
  Tensor **t = interp_xcalloc((size_t)(rows ? rows : 1), sizeof(Tensor *));
  for (int i = 0; i < rows; i++) t[i] = interp_xcalloc((size_t)cols, sizeof(Tensor));
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
    bool ok = run_body(it, b, e, ins, res, false);
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
  Tensor **args = interp_xcalloc((size_t)(n->nin ? n->nin : 1), sizeof(Tensor *));
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
          ok = interp_error(n, "stacked input %d has no leading dim of %lld", nc + i, (long long)count);
          break;
        }
        tensor_free(&xsl[i][r]);
        int64_t row = t; /* an arg `next`: the next iteration's row (ZeRO-3's prefetch) */
        if (b->args[nc + i]->a.next) row = n->a.reverse ? (t + count - 1) % count : (t + 1) % count;
        Tensor s = interp_slice_of(xs, 0, row, 1);
        s.shape.rank--;
        for (int d = 0; d < s.shape.rank; d++) {
          s.shape.dim[d] = s.shape.dim[d + 1];
          s.shape.sym[d] = s.shape.sym[d + 1];
        }
        xsl[i][r] = s;
      }
    if (!ok || !(ok = run_body(it, b, e, args, res, step == count - 1))) break;
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
    if (!s->val[r].data) return interp_error(n, "'%s' was not set on rank %d", n->a.name ? n->a.name : "?", r);
    out[r] = tensor_copy(&s->val[r]);
  }
  return true;
}

static bool eval_node(Interp *it, Env *e, const Node *n, Tensor *out) {
  int R = it->nranks;
  Tensor **ins = interp_xcalloc((size_t)(n->nin ? n->nin : 1), sizeof(Tensor *));
  for (int j = 0; j < n->nin; j++) ins[j] = lookup(it, e, n->in[j]);
  bool ok = true;
  if (n->op == OP_PARAM || n->op == OP_STATE || n->op == OP_INPUT) ok = eval_source(it, n, out);
  else if (n->op == OP_ARG) die("interp: ARG evaluated as a node");
  else if (ir_ops[n->op].flags & F_REGION) ok = eval_region(it, n, e, ins, out);
  else if (n->op == OP_SEND) interp_eval_send(it, n, ins[0]);
  else if (n->op == OP_RECV) ok = interp_eval_recv(it, n, out);
  else if (n->a.skiplast && e->last) /* not issued: nothing reads it on the last iteration */
    for (int k = 0; k < n->nout; k++)
      for (int r = 0; r < R; r++) out[k * R + r] = tensor_new(n->out[k]->dtype, n->out[k]->shape);
  else if (ir_ops[n->op].flags & F_COLL)
    for (int k = 0; ok && k < n->nin; k++) ok = interp_eval_coll(it, n, k, ins[k], out + (size_t)k * (size_t)it->nranks);
  else {
    Tensor *x[8] = {0};
    Tensor *y = interp_xcalloc((size_t)n->nout, sizeof(Tensor));
    for (int r = 0; r < R && ok; r++) {
      if (!interp_on_stage(it, n, r)) continue; /* zeros after eval_node */
      Tensor **xv = n->nin <= 8 ? x : interp_xcalloc((size_t)n->nin, sizeof(Tensor *));
      for (int j = 0; j < n->nin; j++) xv[j] = &ins[j][r];
      memset(y, 0, sizeof(Tensor) * (size_t)n->nout);
      ok = interp_eval_local(it, n, r, xv, y);
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
    Tensor *out = interp_xcalloc((size_t)(n->nout * it->nranks), sizeof(Tensor));
    e->vals[i] = out;
    if (!eval_node(it, e, n, out)) return false;
    if (ir_node_stages(n) && n->op != OP_SEND && n->op != OP_RECV) /* the other stages hold zeros (ir.h) */
      for (int r = 0; r < it->nranks; r++)
        if (!interp_on_stage(it, n, r))
          for (int k = 0; k < n->nout; k++) {
            Tensor *t = &out[k * it->nranks + r];
            tensor_free(t);
            *t = tensor_new(n->out[k]->dtype, n->out[k]->shape);
          }
  }
  return true;
}

static void store_results(Interp *it, Env *e) {
  const Graph *g = it->g;
  it->res = interp_xcalloc((size_t)(g->nresults ? g->nresults : 1), sizeof(Result));
  it->nres = g->nresults;
  for (int i = 0; i < g->nresults; i++) {
    it->res[i].name = g->result_names ? g->result_names[i] : NULL;
    it->res[i].val = interp_xcalloc((size_t)it->nranks, sizeof(Tensor));
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

