/* passes/grad_buckets.c — the `buckets` pass: the gradient all-reduces, overlapped with backward
 * and bucketed (what DDP does): over dp, over dp x cp, or over cp alone at dp 1 (context
 * parallelism's weight gradients are partial sums over the sequence chunks).
 *
 * The shard pass settles a gradient's Partial(dp) where it is first read, after the
 * whole backward (the clip's sumsq, the update). This pass moves and groups those
 * all-reduces the way DDP does, so communication overlaps the rest of backward:
 *
 *   1. hoist: an all-reduce whose input is a stacked output of a repeat (a layer's
 *      gradient, yielded by the backward loop) and that nothing else reads moves into
 *      the loop body, right after the gradient is computed — layer l's gradients are
 *      reduced while layer l-1's backward runs (not one a blocking collective then reads:
 *      waited_in_loop);
 *   2. bucket: in every graph, all-reduces over the same group and reduction are
 *      merged, in the order their inputs become ready, into variadic all-reduces of at
 *      most plan.bucket_bytes (`bucket` in the plan, 25 MiB by default), each placed
 *      right after its last input is computed and before its first output is read.
 *
 * ZeRO stages 1-3 (sharded optimizer state, gradients, parameters) are passes/zero.c and
 * zero_sums.c, after this one: they turn these sums into reduce-scatters where they shard.
 */
#include <stdlib.h>
#include <string.h>

#include "commreport.h"
#include "diag.h"
#include "passes.h"
#include "ptrmap.h"

/* A sum all-reduce this pass may move and bucket: not one over the pipeline's stages (the loss's sum over
 * them, the tied parameters' gradients: few, and not the gradients whose reduction overlaps the backward).
 * Bucketed, the loss's sum over pp went into one all-reduce with the tied embedding's gradient at pp x dp:
 * the loss then depended on the backward, whose FLOPs ir/flops.c counted as the forward's (tiny pp 2 x dp 2:
 * 2.015 MFLOP a token for 0.786, MFU inflated as much) and whose 64 KiB the traffic report put in the forward. */
static bool is_dp_reduce(const Node *n) {
  return n->op == OP_ALL_REDUCE && n->a.reduce == RED_SUM && !(n->a.mesh_axis == RT_AX_PP && !n->a.mesh_with);
}

static int64_t value_bytes(const Value *v) { return ir_numel(&v->shape) * ir_dtype_size(v->dtype); }

/* Uses of v in g (inputs of nodes; results counted separately). */
static int uses_in(const Graph *g, const Value *v, bool *is_result) {
  int c = ir_count_uses(g, v);
  *is_result = false;
  for (int i = 0; i < g->nresults; i++) *is_result |= g->results[i] == v;
  return c;
}

/* Position right after which a node computing from `in` may be placed in body b. */
static int after_def(const Graph *b, const Value *in) {
  for (int i = b->nnodes - 1; i >= 0; i--)
    if (b->nodes[i] == in->def) return i;
  return -1;
}

static void insert_at(Graph *g, Node *n, int pos) {
  /* ir_node_new appended n; move it to pos (after nodes[pos - 1]) */
  if (g->nodes[g->nnodes - 1] != n) die("zero: node to insert is not the last");
  ir_move_last(g, pos);
}

static void remove_node(Graph *g, const Node *n) {
  int k = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] != n) g->nodes[k++] = g->nodes[i];
  g->nnodes = k;
  ir_touch(g);
}

/* Whether n (a gradient's sum over the ranks) runs asynchronously and a blocking collective reads its
 * result: a gradient partial over dp and tp (a norm's gain under sp) is summed over dp, then over tp
 * (the shard pass). Both moved into the backward loop, every layer's tp sum would wait for its dp sum,
 * queued behind the layer's other gradients' reductions on the network (Llama-3-405B dp 1024 tp 2+sp
 * z3 rc full mb 2: the backward loop 37.8 s for ~26 s of compute, the step 47.5 s): such a pair stays
 * after the loop (one stacked sum of a few MiB, waited once; the step 36.8 s). */
static bool waited_in_loop(const Graph *g, const Node *n) {
  if (!ir_comm_async(n)) return false;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *r = g->nodes[i];
    if (!(ir_ops[r->op].flags & F_COLL) || ir_comm_async(r)) continue;
    for (int j = 0; j < r->nin; j++)
      for (int o = 0; o < n->nout; o++)
        if (r->in[j] == n->out[o]) return true;
  }
  return false;
}

/* 1. Moves all-reduces of a repeat's stacked outputs into its body. */
static bool hoist_one(Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (!is_dp_reduce(n) || n->nin != 1) continue;
    Value *x = n->in[0];
    Node *r = x->def;
    if (r->op != OP_REPEAT || x->idx < r->a.ncarry) continue;
    bool res;
    if (uses_in(g, x, &res) != 1 || res || waited_in_loop(g, n)) continue;
    Graph *b = r->body;
    Value *y = b->results[x->idx];
    if (y->def->graph != b || y->def->op == OP_ARG) continue; /* not computed in the body */
    bool yres;
    int yuses = uses_in(b, y, &yres);
    int nyield = 0;
    for (int k = 0; k < b->nresults; k++) nyield += b->results[k] == y;
    if (yuses != 0 || nyield != 1) continue; /* the body reads it too: leave it */
    Node *ar = ir_node_new(b, OP_ALL_REDUCE, 1, &y, 1, n->loc);
    ar->a = n->a;
    ar->out[0]->dtype = y->dtype;
    ar->out[0]->shape = y->shape;
    ar->out[0]->sharding = y->sharding;
    ar->out[0]->sharding.partial &= (uint8_t) ~((1u << n->a.mesh_axis) | n->a.mesh_with);
    insert_at(b, ar, after_def(b, y) + 1);
    b->results[x->idx] = ar->out[0];
    x->sharding.partial &= (uint8_t) ~((1u << n->a.mesh_axis) | n->a.mesh_with);
    ir_replace_uses(g, n->out[0], x);
    remove_node(g, n);
    return true;
  }
  return false;
}

typedef struct {
  Node *n;
  int ready; /* position of the last input's producer (-1: before the graph) */
  int need;  /* position of the first reader of an output (nnodes: only results) */
  int64_t bytes;
} Cand;

static int pos_of(const PtrMap *pos, const Node *n) {
  intptr_t p;
  return ptrmap_get(pos, n, &p) ? (int)p : -1;
}


/* 2. Merges all-reduces of one graph into buckets. */
static void bucket_graph(Graph *g, int64_t bucket_bytes) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) bucket_graph(g->nodes[i]->body, bucket_bytes);
  PtrMap pos = {0};
  for (int i = 0; i < g->nnodes; i++) ptrmap_put(&pos, g->nodes[i], i);
  int ncand = 0;
  Cand *c = ARENA_ARRAY(g->arena, Cand, g->nnodes + 1);
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (!is_dp_reduce(n)) continue;
    Cand k = {n, -1, g->nnodes, 0};
    for (int j = 0; j < n->nin; j++) {
      int p = pos_of(&pos, n->in[j]->def);
      k.ready = p > k.ready ? p : k.ready;
      k.bytes += value_bytes(n->in[j]);
    }
    for (int u = i + 1; u < g->nnodes && k.need == g->nnodes; u++)
      for (int j = 0; j < g->nodes[u]->nin; j++)
        for (int o = 0; o < n->nout; o++)
          if (g->nodes[u]->in[j] == n->out[o] && u < k.need) k.need = u;
    c[ncand++] = k;
  }
  ptrmap_free(&pos);
  if (ncand < 2) return;
  /* in order of readiness (stable) */
  for (int i = 1; i < ncand; i++)
    for (int j = i; j > 0 && c[j].ready < c[j - 1].ready; j--) {
      Cand t = c[j];
      c[j] = c[j - 1];
      c[j - 1] = t;
    }
  int i = 0;
  while (i < ncand) {
    int j = i + 1, ready = c[i].ready, need = c[i].need;
    int64_t bytes = c[i].bytes;
    while (j < ncand) {
      const Node *a = c[i].n, *b = c[j].n;
      int r2 = c[j].ready > ready ? c[j].ready : ready, n2 = c[j].need < need ? c[j].need : need;
      if (b->a.mesh_axis != a->a.mesh_axis || b->a.mesh_with != a->a.mesh_with || bytes + c[j].bytes > bucket_bytes || r2 >= n2) break;
      ready = r2;
      need = n2;
      bytes += c[j].bytes;
      j++;
    }
    if (j - i > 1) {
      int nin = 0;
      for (int k = i; k < j; k++) nin += c[k].n->nin;
      Value **ins = ARENA_ARRAY(g->arena, Value *, nin);
      int at = 0;
      for (int k = i; k < j; k++)
        for (int q = 0; q < c[k].n->nin; q++) ins[at++] = c[k].n->in[q];
      Node *m = ir_node_new(g, OP_ALL_REDUCE, nin, ins, nin, c[i].n->loc);
      m->a = c[i].n->a;
      at = 0;
      Value **from = malloc(((size_t)nin + 1) * sizeof *from);
      if (!from) die("buckets: out of memory");
      for (int k = i; k < j; k++)
        for (int q = 0; q < c[k].n->nout; q++) {
          Value *o = c[k].n->out[q];
          m->out[at]->dtype = o->dtype;
          m->out[at]->shape = o->shape;
          m->out[at]->sharding = o->sharding;
          m->out[at]->name = o->name;
          from[at++] = o;
        }
      ir_replace_uses_many(g, at, from, m->out);
      free(from);
      for (int k = i; k < j; k++) remove_node(g, c[k].n);
      /* right after the last input's producer (never before the body's arguments) */
      int p = 0;
      for (int q = 0; q < g->nnodes - 1; q++) {
        const Node *nd = g->nodes[q];
        bool feeds = nd->op == OP_ARG;
        for (int r = 0; r < m->nin && !feeds; r++) feeds = m->in[r]->def == nd;
        if (feeds) p = q + 1;
      }
      insert_at(g, m, p);
    }
    i = j;
  }
  ir_topo_sort(g);
}

bool pass_grad_buckets(Module *m) {
  /* the gradients' group: dp (dp x cp), or cp alone at dp 1 */
  if (!m->mesh || (m->mesh->dim[RT_AX_DP] <= 1 && m->mesh->dim[RT_AX_CP] <= 1)) {
    if (m->mesh && m->plan.bucket_loc.file) /* (was kept without a word, as zero's and sp's were) */
      note_at(m->plan.bucket_loc, "bucket %lld B: the plan has dp 1 and cp 1: no gradient all-reduce to bucket",
              (long long)m->plan.bucket_bytes);
    return true;
  }
  Graph *g = m->graph;
  while (hoist_one(g)) {
  }
  int64_t bucket = m->plan.bucket_bytes > 0 ? m->plan.bucket_bytes : (int64_t)25 << 20;
  bucket_graph(g, bucket);
  return true;
}
