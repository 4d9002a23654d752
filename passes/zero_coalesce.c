/* passes/zero_coalesce.c — the `zcoal` pass: ZeRO-3's all-gathers issued at one point coalesced into
 * one collective (what FSDP2 does for a layer's parameters), and ZeRO-2/3's gradient reduce-scatters of
 * a backward loop's body the same way.
 *
 * passes/zero.c gathers each split parameter on its own: a layer loop's body gathers every split
 * tensor of the next layer at its front (the prefetch), the loop's first layer is gathered before
 * it, one tensor at a time. Over a ring of n ranks each collective pays n - 1 latency steps
 * (Llama-3-405B over dp 128 x cp 4: 2.6 ms each, 7 a layer forward and 7 backward). This pass takes
 * each run of such gathers over the same group issued at one point of a graph (consecutive, only
 * slices, reshapes, casts and arguments between them, none of them reading another's output) and
 * rewrites it as
 *
 *     f_i = reshape(x_i) [1, n_i]                  each shard flattened (no copy)
 *     p   = concat(f_1, .., f_k) along 1 [1, N]     the rank's shards packed (a copy of 1/deg)
 *     G   = all_gather(p) along 0 [deg, N]          one collective (asynchronous, as the ones it replaces)
 *     w_i = slice(G, 1, o_i, n_i) [deg, n_i] -> the whole (a reshape when the shard dim is the
 *           first of the parameter's; else the rank dim moved in front of the shard dim: two
 *           transposes of the last two dims)
 *
 * The gather sits where the run's last gather was, the unpacking right before the first reader of
 * any of the run's gathered values (a prefetch's: at the end of the iteration, where its wait was),
 * so the overlap stays. Whether a run pays is zero_coalesce_pays (the collectives' latency saved, at
 * most what the graph's collectives add to its time beyond its computation, against the pack and unpack
 * copies' bytes), the same function plan_model.c asks; a run is also
 * capped by the plan's bucket (`bucket`, plan.bucket_bytes) on the packed shard bytes a rank sends.
 * Plan `coalesce on` coalesces every run within the cap, `off` none; `auto` (the default) asks the
 * cost model. Only the interpreter's and codegen's existing ops are used.
 *
 * The gradients' reduce-scatters the same way (coalesce_scatters, below), under ZeRO-2 as under ZeRO-3
 * (ZeRO-2 keeps its parameters whole: no gathers in its loops, its scatters alone): passes/zero.c scatters each
 * layer gradient of a backward loop's body right after it is made (over the group along its shard
 * dim; the ones along the first dim packed into buckets of `bucket` whole bytes: a 405B layer at tp 2
 * is 7 of them). A run of them in one body (any nodes between, but no loop nor transfer, and none
 * fed by a member's shard) becomes one reduce-scatter of the gradients packed rank-major ([group, N],
 * rank c's shard of every gradient in its row c: a gradient split along a later dim transposed into
 * it, a bucket's pieces taken as they are) where the run's last one was, each shard a slice of the
 * [1, N] result (a bucket's slices reading it directly). The same function decides (the copies: the
 * pack, three times where transposed, and the shards), the same cap on the shard bytes. The scatter
 * then starts when the layer's last gradient is ready, not as each is: where the body's computation
 * hides its collectives (exposure 0) it does not pay, and `on` costs the overlap (docs/planner.md).
 * Where passes/zero_defer.c (after this pass) defers the body's waits to the next iteration nothing of
 * the overlap is lost: the decision is then asked `deferred` (the copies against the channel's slack). 
 * plan_model.c times ZeRO-2's the same way (plan_model_zero.c's scatters_coalesce). Written where it joins
 * nothing (zero 0 or 1, a data-parallel group of one rank), a note says so. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commreport.h"
#include "cost.h"
#include "cost_op.h"
#include "diag.h"
#include "passes.h"
#include "plan_options.h"
#include "ptrmap.h"
#include "zero.h"

bool zero_coalesce_pays(int k, int group, double lat_s, double overhead_s, double copy_bytes, double bytes_per_s,
                        double exposed_s, bool deferred) {
  if (k < 2 || group < 2) return false;
  double latency = (double)(k - 1) * ((double)(group - 1) * lat_s + overhead_s);
  double cost = 2 * copy_bytes / (bytes_per_s > 0 ? bytes_per_s : 1e9) + (double)(k + 1) * overhead_s;
  /* deferred (passes/zero_defer.c): the scatters overlap the next iteration too, so the body's time is
   * its channel's or its compute's, whichever is longer; the copies (compute) cost only where they pass
   * the channel's time less the latency saved: max(cost, exposed - latency) against exposed */
  if (deferred) return exposed_s > 0 && fmax(cost, exposed_s - latency) < exposed_s;
  return fmin(latency, exposed_s) > cost;
}

static int64_t vbytes(const Value *v) { return ir_numel(&v->shape) * ir_dtype_size(v->dtype); }

/* Elements of x's dims before d. */
static int64_t outer_of(const Value *x, int d) {
  int64_t a = 1;
  for (int i = 0; i < d; i++) a *= x->shape.dim[i];
  return a;
}

/* Bytes the run's copies move: the packed shards, the unpacked wholes (twice more where transposed). */
static double copy_bytes(Node *const *run, int k) {
  double b = 0;
  for (int i = 0; i < k; i++) {
    const Node *n = run[i];
    b += (double)vbytes(n->in[0]) + (double)vbytes(n->out[0]) * (outer_of(n->in[0], n->a.axis) > 1 ? 3 : 1);
  }
  return b;
}

/* A ZeRO-3 gather this pass may take: over the ZeRO group, one block, reading a stored shard (not
 * the update's output: ZeRO-1/2's rebuilt parameters, written into the parameter's storage). */
static bool eligible(const Graph *g, const Node *n, ZeroGroup z, Target target) {
  if (n->op != OP_ALL_GATHER || n->a.mesh_axis != z.axis || n->a.mesh_with != z.with || n->a.blocks > 1) return false;
  /* (the CPU target transposes f32 only: runtime's rt_transpose_f32; its bf16 GEMMs' copies stay apart) */
  if (target == TARGET_CPU && n->in[0]->dtype != DT_F32 && outer_of(n->in[0], n->a.axis) > 1) return false;
  OpKind d = n->in[0]->def->op;
  if (d == OP_ADAMW_UPDATE || d == OP_SGD_UPDATE || d == OP_CAST) {
    if (d != OP_CAST) return false;
    OpKind d2 = n->in[0]->def->in[0]->def->op;
    if (d2 == OP_ADAMW_UPDATE || d2 == OP_SGD_UPDATE) return false;
  }
  if (d == OP_CONCAT || n->out[0]->sharding.partial) return false; /* (a coalesced one) */
  if (!g->owner) /* the top: a result is a rebuilt parameter ("next:X") */
    for (int i = 0; i < g->nresults; i++)
      if (g->results[i] == n->out[0]) return false;
  return true;
}

static bool same_run(const Node *a, const Node *b) {
  return a->a.mesh_axis == b->a.mesh_axis && a->a.mesh_with == b->a.mesh_with && a->in[0]->dtype == b->in[0]->dtype &&
         a->stage == b->stage && a->stageset == b->stageset && a->a.skiplast == b->a.skiplast;
}

/* Nodes a run may pass over: the preparation of its shards. */
static bool passable(const Node *n) {
  return n->op == OP_SLICE || n->op == OP_RESHAPE || n->op == OP_CAST || n->op == OP_ARG;
}

static bool reads_any(const Node *n, Node *const *run, int k) {
  for (int j = 0; j < n->nin; j++)
    for (int r = 0; r < k; r++)
      if (n->in[j] == run[r]->out[0]) return true;
  if (n->body)
    for (int i = 0; i < n->body->nnodes; i++)
      if (reads_any(n->body->nodes[i], run, k)) return true;
  return false;
}

static void replace_deep(Graph *g, Value *from, Value *to) {
  ir_replace_uses(g, from, to);
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) replace_deep(g->nodes[i]->body, from, to);
}

typedef struct {
  const Node *like; /* stage predicate and location */
  Node **made;
  int nmade;
} Emit;

static Value *emit(Graph *g, Emit *e, OpKind op, int nin, Value *const *in, Shape s, const Attrs *a) {
  Value *v = ir_emit(g, op, nin, in, in[0]->dtype, s, a, e->like->loc);
  v->def->stage = e->like->stage;
  v->def->stageset = e->like->stageset;
  e->made[e->nmade++] = v->def;
  return v;
}

static Shape shape2(int64_t a, int64_t b) { return (Shape){.rank = 2, .dim = {a, b}}; }
static Shape shape3(int64_t a, int64_t b, int64_t c) { return (Shape){.rank = 3, .dim = {a, b, c}}; }

/* Where a run's new nodes go among g's nodes as they were before the pass: slot 2i is before node i,
 * 2i + 1 after it (2 nnodes: at the end). The runs' placements are applied at once when the graph's runs
 * are all made (place_all): an unrolled pipeline's top graph holds a run per micro-batch and stage, and
 * reordering the whole graph after each run was quadratic (GPT-3 pp 4 cp 8 with 384 micro-batches:
 * 1.46 s of 11.2). */
typedef struct {
  int slot, seq; /* seq: the order made (a run's unpacking before a later run's at one slot) */
  Node **nodes;
  int n;
} Place;

typedef struct {
  Place *at; /* in the order the runs were made */
  int n;
  bool *drop; /* [nnodes before the pass]: a run's member, gone */
} Placing;

/* Rewrites the run (positions pos[0..k) of g) as one gather, which it returns; each gathered whole's
 * unpacked value goes into `moved` (whole -> value), for ir_replace_uses_map_deep once g's runs are all made (until
 * then the wholes' readers read the gathers it removes, which no later run of g reads: reads_any). Its
 * nodes are placed by place_all: the pack and the gather where the run's last gather was, the unpacking
 * before the first reader (else at the end), the run's gathers gone. */
static Value *coalesce(Graph *g, int n0, Node **run, const int *pos, int k, PtrMap *moved, Placing *pl) {
  int last = pos[k - 1];
  int first_reader = n0;
  for (int i = last + 1; i < n0 && first_reader == n0; i++)
    if (reads_any(g->nodes[i], run, k)) first_reader = i;
  Emit pk = {run[0], ARENA_ARRAY(g->arena, Node *, k + 2), 0}, un = {run[0], ARENA_ARRAY(g->arena, Node *, 6 * k), 0};
  int deg = (int)(run[0]->out[0]->shape.dim[run[0]->a.axis] / run[0]->in[0]->shape.dim[run[0]->a.axis]);
  Value **flat = ARENA_ARRAY(g->arena, Value *, k);
  int64_t N = 0;
  Sharding sh = ir_replicated();
  sh.split[0] = run[0]->in[0]->sharding.split[run[0]->a.axis];
  sh.inner[0] = run[0]->in[0]->sharding.inner[run[0]->a.axis];
  for (int i = 0; i < k; i++) {
    int64_t ni = ir_numel(&run[i]->in[0]->shape);
    flat[i] = emit(g, &pk, OP_RESHAPE, 1, &run[i]->in[0], shape2(1, ni), NULL);
    flat[i]->sharding = sh;
    N += ni;
  }
  Attrs ca = {0};
  ca.axis = 1;
  Value *packed = emit(g, &pk, OP_CONCAT, k, flat, shape2(1, N), &ca);
  packed->sharding = sh;
  Attrs ga = run[0]->a;
  ga.axis = 0;
  ga.blocks = 0;
  Value *G = emit(g, &pk, OP_ALL_GATHER, 1, &packed, shape2(deg, N), &ga);
  G->name = "zero3.coalesced";
  int64_t off = 0;
  for (int i = 0; i < k; i++) {
    Value *x = run[i]->in[0], *whole = run[i]->out[0];
    int64_t ni = ir_numel(&x->shape), a = outer_of(x, run[i]->a.axis), r = ni / a;
    Attrs sa = {0};
    sa.axis = 1, sa.start = off, sa.len = ni;
    off += ni;
    Value *v = emit(g, &un, OP_SLICE, 1, &G, shape2(deg, ni), &sa);
    if (a > 1) { /* [deg, a, r] -> [a, deg, r]: [deg, a r]^T = [a, r, deg], then each [r, deg]^T */
      v = emit(g, &un, OP_TRANSPOSE, 1, &v, shape2(ni, deg), NULL);
      v = emit(g, &un, OP_RESHAPE, 1, &v, shape3(a, r, deg), NULL);
      v = emit(g, &un, OP_TRANSPOSE, 1, &v, shape3(a, deg, r), NULL);
    }
    v = emit(g, &un, OP_RESHAPE, 1, &v, whole->shape, NULL);
    v->sharding = whole->sharding;
    v->name = whole->name;
    ptrmap_put(moved, whole, (intptr_t)v);
  }
  for (int r = 0; r < k; r++) pl->drop[pos[r]] = true;
  pl->at[pl->n] = (Place){2 * last + 1, pl->n, pk.made, pk.nmade};
  pl->n++;
  pl->at[pl->n] = (Place){2 * first_reader, pl->n, un.made, un.nmade};
  pl->n++;
  return G;
}

static int place_cmp(const void *a, const void *b) {
  const Place *x = a, *y = b;
  return x->slot != y->slot ? (x->slot > y->slot) - (x->slot < y->slot) : (x->seq > y->seq) - (x->seq < y->seq);
}

/* g's nodes in their new order (the first n0 as before the pass; the runs' nodes made since after them). */
static void place_all(Graph *g, int n0, Placing *pl) {
  if (!pl->n) return;
  qsort(pl->at, (size_t)pl->n, sizeof *pl->at, place_cmp);
  Node **orig = ARENA_ARRAY(g->arena, Node *, n0);
  memcpy(orig, g->nodes, sizeof(Node *) * (size_t)n0);
  int at = 0, p = 0, dropped = 0;
  for (int slot = 0; slot <= 2 * n0; slot++) {
    for (; p < pl->n && pl->at[p].slot == slot; p++)
      for (int j = 0; j < pl->at[p].n; j++) g->nodes[at++] = pl->at[p].nodes[j];
    if (slot < 2 * n0 && !(slot & 1)) {
      if (pl->drop[slot / 2]) dropped++;
      else g->nodes[at++] = orig[slot / 2];
    }
  }
  if (at != g->nnodes - dropped) die("zcoal: %d nodes placed of %d", at, g->nnodes - dropped);
  g->nnodes = at;
}

typedef struct {
  const Module *m;
  ZeroGroup z;
  CostDevice dev;
  double lat_s, link_bytes_per_s; /* the group's link; its bandwidth a ring's share (ir_comm_link_share) */
  int64_t cap;
  int done;
  bool defer; /* the backward loops' scatter waits deferred (zero_defers_plan) */
} Ctx;

/* g's computation (each node by the cost model; a nested loop's count
 * times its body's) and, in *comm, its collectives over the ZeRO group (asynchronous: latency and
 * bytes over a ring's share of the group's link, as passes/cost.c times them). */
static double body_time(const Ctx *c, const Graph *g, double *comm) {
  double t = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body) {
      double inner = 0, k = n->op == OP_REPEAT ? (double)n->a.count : 1;
      t += k * body_time(c, n->body, &inner);
      *comm += k * inner;
      continue;
    }
    if ((ir_ops[n->op].flags & F_COLL) || n->nout == 0) { /* (other groups' collectives, sends: not compute) */
      if (n->a.mesh_axis == c->z.axis && n->a.mesh_with == c->z.with && n->op != OP_SEND && n->op != OP_RECV)
        *comm += ir_comm_ring_steps(n->op, c->z.deg) * c->lat_s +
                 (double)ir_comm_node_bytes(n) * ir_comm_bus_factor(n->op, c->z.deg) / c->link_bytes_per_s;
      continue;
    }
    TimeKind kind;
    t += cost_op_time(c->m, &c->dev, n, false, 0, &kind);
  }
  return t;
}

/* The time g's collectives over the group take beyond its computation (a layer loop's body: they
 * overlap it), what coalescing can save at most. At the top level the gathers it takes block (a
 * layer loop's first layer's): all of their time. */
static double exposed_s(const Ctx *c, const Graph *g) {
  if (!g->owner) return INFINITY;
  double comm = 0, t = body_time(c, g, &comm);
  return fmax(0, comm - t);
}

static bool pays(const Ctx *c, const Graph *g, Node *const *run, int k) {
  if (c->m->plan.coalesce == COALESCE_ON) return k > 1;
  return zero_coalesce_pays(k, c->z.deg, c->lat_s, c->dev.op_overhead_s, copy_bytes(run, k), c->dev.bytes_per_s,
                            exposed_s(c, g), false); /* (the gathers' waits are the prefetch's, not deferred) */
}

static void coalesce_graph(Ctx *c, Graph *g) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) coalesce_graph(c, g->nodes[i]->body);
  int n0 = g->nnodes; /* (the nodes runs make are appended: placed at the end, place_all) */
  Node **run = ARENA_ARRAY(g->arena, Node *, n0 + 1);
  int *pos = ARENA_ARRAY(g->arena, int, n0 + 1);
  Placing pl = {ARENA_ARRAY(g->arena, Place, n0 + 1), 0, ARENA_ARRAY(g->arena, bool, n0 + 1)};
  memset(pl.drop, 0, sizeof(bool) * (size_t)(n0 + 1));
  PtrMap moved = {0};
  for (int i = 0; i < n0; i++) {
    if (!eligible(g, g->nodes[i], c->z, c->m->target)) continue;
    int k = 0;
    int64_t bytes = 0;
    for (int j = i; j < n0; j++) {
      Node *n = g->nodes[j];
      if (k && reads_any(n, run, k)) break;
      if (eligible(g, n, c->z, c->m->target) && (k == 0 || same_run(run[0], n))) {
        int64_t b = vbytes(n->in[0]);
        if (k && bytes + b > c->cap) break;
        bytes += b;
        run[k] = n, pos[k++] = j;
        continue;
      }
      if (!passable(n)) break;
    }
    if (k > 1 && pays(c, g, run, k)) {
      c->done++;
      coalesce(g, n0, run, pos, k, &moved, &pl);
    }
    i = pos[k - 1]; /* on after the run */
  }
  place_all(g, n0, &pl);
  if (moved.count) ir_replace_uses_map_deep(g, &moved); /* (one walk of g, not one per gathered tensor) */
  ptrmap_free(&moved);
}

/* ---- the gradients' reduce-scatters ---- */

/* A ZeRO reduce-scatter of a gradient made in body g this pass may take: over the group, one block
 * (passes/zero.c's scatter_at, zero_sums.c's, and zero.c's pack_scatters' buckets: of a concat). */
static bool rs_eligible(const Graph *g, const Node *n, ZeroGroup z, Target target) {
  if (n->op != OP_REDUCE_SCATTER || n->a.mesh_axis != z.axis || n->a.mesh_with != z.with || n->a.blocks > 1) return false;
  const Value *x = n->in[0];
  if (x->def->graph != g || !ir_dtype_is_float(x->dtype) || x->shape.dim[n->a.axis] % z.deg != 0) return false;
  /* (the CPU target transposes f32 only: a bf16 gradient split along a later dim stays on its own) */
  return !(target == TARGET_CPU && x->dtype != DT_F32 && outer_of(x, n->a.axis) > 1);
}

static bool rs_same_run(const Node *a, const Node *b) {
  return a->in[0]->dtype == b->in[0]->dtype && a->in[0]->sharding.partial == b->in[0]->sharding.partial &&
         a->stage == b->stage && a->stageset == b->stageset;
}

/* pack_scatters' bucket (a reduce-scatter along 0 of a [deg, N] concat along 1 read by it alone): its
 * pieces are already [deg, n_j] rank-major, taken as they are. */
static const Node *rs_packed(const Graph *g, const Node *n, int deg) {
  const Value *x = n->in[0];
  if (n->a.axis != 0 || x->def->op != OP_CONCAT || x->def->a.axis != 1 || x->shape.rank != 2 || x->shape.dim[0] != deg ||
      ir_count_uses_deep(g, x) != 1 || ir_is_result(g, x))
    return NULL;
  return x->def;
}

/* Whether every reader of v in g is a slice along 1 (pack_scatters' unpacking), none in a nested body
 * nor a result: those slices may read the coalesced row directly. */
static bool read_by_row_slices(const Graph *g, const Value *v) {
  if (ir_is_result(g, v)) return false;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body && ir_count_uses_deep(n->body, v)) return false;
    for (int j = 0; j < n->nin; j++)
      if (n->in[j] == v && !(n->op == OP_SLICE && n->a.axis == 1 && v->shape.rank == 2)) return false;
  }
  return true;
}

/* Bytes the coalesced scatter's copies move: the pack (each gradient once, three times where
 * transposed) and the unpacked shards. */
static double rs_copy_bytes(const Graph *g, Node *const *run, int k, int deg) {
  double b = 0;
  for (int i = 0; i < k; i++) {
    const Node *n = run[i];
    b += (double)vbytes(n->in[0]) * (outer_of(n->in[0], n->a.axis) > 1 ? 3 : 1);
    if (!(rs_packed(g, n, deg) && read_by_row_slices(g, n->out[0]))) b += (double)vbytes(n->out[0]);
  }
  return b;
}

static bool reads_marked(const Node *n, const PtrMap *marked) {
  for (int j = 0; j < n->nin; j++)
    if (ptrmap_get(marked, n->in[j], NULL)) return true;
  if (n->body)
    for (int i = 0; i < n->body->nnodes; i++)
      if (reads_marked(n->body->nodes[i], marked)) return true;
  return false;
}

static void mark_outputs(const Node *n, PtrMap *marked) {
  for (int j = 0; j < n->nout; j++) ptrmap_put(marked, n->out[j], 1);
}

/* Rewrites the run (positions pos[0..k) of g; `after`: what reads a member's shard, directly or not,
 * between the first and the last) as one reduce-scatter, which it returns:
 *
 *     q_i = reshape(x_i) [deg, n_i / deg]        split along the first dim: rank c's part is row c
 *     q_i = the rank dim moved to the front      split along a later dim: [A, deg, r] -> [deg, A r]
 *           (x_i as [A, deg, r], transposed [A, r, deg], as [A r, deg], transposed)
 *     p   = concat(q_1, .., q_k) along 1 [deg, N]   (a bucket's pieces as they are)
 *     R   = reduce_scatter(p) along 0 [1, N]      rank c: its shard of every gradient, in order
 *     s_i = reshape(slice(R, 1, o_i, n_i / deg))  each gradient's shard (a bucket's slices read R)
 *
 * The scatter sits where the run's last was, after what the members' gradients need; what reads a
 * shard (the `after` nodes) behind it, the unpacking right before the first of them. */
static Value *coalesce_rs(Graph *g, Node **run, const int *pos, int k, int deg, const PtrMap *after) {
  int n0 = g->nnodes, first = pos[0], last = pos[k - 1];
  Node **orig = ARENA_ARRAY(g->arena, Node *, n0);
  memcpy(orig, g->nodes, sizeof(Node *) * (size_t)n0);
  const Node *like = run[k - 1];
  int npieces = 0;
  for (int i = 0; i < k; i++) {
    const Node *c = rs_packed(g, run[i], deg);
    npieces += c ? c->nin : 1;
  }
  Emit pk = {like, ARENA_ARRAY(g->arena, Node *, 5 * npieces + 2), 0}, un = {like, ARENA_ARRAY(g->arena, Node *, 2 * k), 0};
  Node **drop = ARENA_ARRAY(g->arena, Node *, k);
  int ndrop = 0;
  Value **pieces = ARENA_ARRAY(g->arena, Value *, npieces);
  Sharding flat = ir_replicated();
  flat.partial = run[0]->in[0]->sharding.partial;
  int np = 0;
  int64_t N = 0, *off = ARENA_ARRAY(g->arena, int64_t, k);
  for (int i = 0; i < k; i++) {
    Node *c = (Node *)rs_packed(g, run[i], deg);
    Value *x = run[i]->in[0];
    off[i] = N;
    N += ir_numel(&x->shape) / deg;
    if (c) {
      for (int j = 0; j < c->nin; j++) pieces[np++] = c->in[j];
      drop[ndrop++] = c;
      continue;
    }
    int64_t ni = ir_numel(&x->shape), a = outer_of(x, run[i]->a.axis), r = ni / a / deg;
    Value *v = x;
    if (a > 1) { /* [A, deg, r] -> [deg, A r]: [A, r, deg] as [A r, deg], transposed */
      v = emit(g, &pk, OP_RESHAPE, 1, &v, shape3(a, deg, r), NULL);
      v->sharding = flat;
      v = emit(g, &pk, OP_TRANSPOSE, 1, &v, shape3(a, r, deg), NULL);
      v->sharding = flat;
      v = emit(g, &pk, OP_RESHAPE, 1, &v, shape2(a * r, deg), NULL);
      v->sharding = flat;
      v = emit(g, &pk, OP_TRANSPOSE, 1, &v, shape2(deg, a * r), NULL);
    } else {
      v = emit(g, &pk, OP_RESHAPE, 1, &v, shape2(deg, r), NULL);
    }
    v->sharding = flat;
    pieces[np++] = v;
  }
  Attrs ca = {0};
  ca.axis = 1;
  Value *packed = emit(g, &pk, OP_CONCAT, np, pieces, shape2(deg, N), &ca);
  packed->sharding = flat;
  Attrs ra = {0};
  ra.mesh_axis = like->a.mesh_axis;
  ra.mesh_with = like->a.mesh_with;
  ra.axis = 0;
  Value *R = emit(g, &pk, OP_REDUCE_SCATTER, 1, &packed, shape2(1, N), &ra);
  Sharding mine = flat;
  mine.split[0] = like->out[0]->sharding.split[like->a.axis];
  mine.inner[0] = like->out[0]->sharding.inner[like->a.axis];
  mine.partial = like->out[0]->sharding.partial;
  R->sharding = mine;
  R->name = "zero.coalesced_grads";
  for (int i = 0; i < k; i++) {
    Value *y = run[i]->out[0];
    int64_t len = ir_numel(&run[i]->in[0]->shape) / deg;
    if (rs_packed(g, run[i], deg) && read_by_row_slices(g, y)) { /* its slices read R */
      for (int q = 0; q < n0; q++)
        if (orig[q]->nin == 1 && orig[q]->in[0] == y) orig[q]->in[0] = R, orig[q]->a.start += off[i];
      continue;
    }
    Attrs sa = {0};
    sa.axis = 1, sa.start = off[i], sa.len = len;
    Value *v = emit(g, &un, OP_SLICE, 1, &R, shape2(1, len), &sa);
    v->sharding = mine;
    if (!ir_shape_eq(&v->shape, &y->shape)) v = emit(g, &un, OP_RESHAPE, 1, &v, y->shape, NULL);
    v->sharding = y->sharding;
    v->name = y->name;
    replace_deep(g, y, v);
  }
  /* the new order: up to the last member, what the shards do not feed; the pack and the scatter;
   * then what they feed and the rest, the unpacking right before the first that reads a shard */
  Node **later = ARENA_ARRAY(g->arena, Node *, n0 + un.nmade);
  int at = 0, nl = 0;
  for (int i = 0; i < n0; i++) {
    Node *n = orig[i];
    bool skip = false;
    for (int r = 0; r < k; r++) skip |= n == run[r];
    for (int r = 0; r < ndrop; r++) skip |= n == drop[r];
    if (!skip && i > first && i < last && ptrmap_get(after, n, NULL)) later[nl++] = n;
    else if (!skip && i <= last) g->nodes[at++] = n;
    if (i == last)
      for (int j = 0; j < pk.nmade; j++) g->nodes[at++] = pk.made[j];
    if (i > last) later[nl++] = n;
  }
  bool unpacked = false;
  for (int i = 0; i < nl; i++) {
    if (!unpacked && reads_any(later[i], un.made, un.nmade)) {
      for (int j = 0; j < un.nmade; j++) g->nodes[at++] = un.made[j];
      unpacked = true;
    }
    g->nodes[at++] = later[i];
  }
  if (!unpacked)
    for (int j = 0; j < un.nmade; j++) g->nodes[at++] = un.made[j];
  if (at != g->nnodes - k - ndrop) die("zcoal: %d nodes placed of %d", at, g->nnodes - k - ndrop);
  g->nnodes = at;
  return R;
}

static bool rs_pays(const Ctx *c, const Graph *g, Node *const *run, int k) {
  if (c->m->plan.coalesce == COALESCE_ON) return k > 1;
  /* deferred where passes/zero_defer.c (after this pass) will take this body's waits: the plan's
   * (zero_defers_plan) and a loop of two layers or more (a next iteration to wait in) */
  bool deferred = c->defer && zero_defer_loop(g->owner);
  return zero_coalesce_pays(k, c->z.deg, c->lat_s, c->dev.op_overhead_s, rs_copy_bytes(g, run, k, c->z.deg),
                            c->dev.bytes_per_s, exposed_s(c, g), deferred);
}

/* A loop body's reduce-scatters of its gradients (the backward loops': a layer's), in runs: from one,
 * every later one of the same kind that no member's shard feeds, up to the plan's bucket on the shard
 * bytes a rank keeps (as the gathers' cap); each run that pays becomes one collective. */
static void coalesce_scatters(Ctx *c, Graph *g) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) coalesce_scatters(c, g->nodes[i]->body);
  if (!g->owner) return; /* (a loop body's, where they overlap the next layers' backward) */
  Node **run = ARENA_ARRAY(g->arena, Node *, g->nnodes + 1);
  int *pos = ARENA_ARRAY(g->arena, int, g->nnodes + 1);
  for (int i = 0; i < g->nnodes; i++) {
    if (!rs_eligible(g, g->nodes[i], c->z, c->m->target)) continue;
    PtrMap after = {0}; /* what a member's shard feeds (values, and those nodes between the members) */
    int k = 0;
    int64_t bytes = 0;
    for (int j = i; j < g->nnodes; j++) {
      Node *n = g->nodes[j];
      if (n->body || n->op == OP_SEND || n->op == OP_RECV) break; /* (no scatter waits past a loop or a transfer) */
      bool fed = k && reads_marked(n, &after);
      if (!fed && rs_eligible(g, n, c->z, c->m->target) && (k == 0 || rs_same_run(run[0], n))) {
        int64_t b = vbytes(n->out[0]);
        if (k && bytes + b > c->cap) break;
        bytes += b;
        run[k] = n, pos[k++] = j;
        mark_outputs(n, &after);
        continue;
      }
      if (fed) {
        mark_outputs(n, &after);
        ptrmap_put(&after, n, 1);
      }
    }
    if (k > 1 && rs_pays(c, g, run, k)) {
      c->done++;
      Value *R = coalesce_rs(g, run, pos, k, c->z.deg, &after);
      while (g->nodes[i] != R->def) i++; /* on after the new scatter */
    } else {
      i = pos[k - 1];
    }
    ptrmap_free(&after);
  }
}

bool pass_zero_coalesce(Module *m) {
  Ctx c = {.m = m, .z = zero_group(m->mesh), .defer = zero_defers_plan(m)};
  SrcLoc at = m->plan.opt_loc[PLAN_OPT_COALESCE];
  if (at.file && (m->plan.zero < 2 || c.z.deg <= 1)) { /* written, and nothing for it to join: said, not ignored */
    char has[64];
    if (m->plan.zero < 2) snprintf(has, sizeof has, "zero %d, no sharded gradient", m->plan.zero);
    else snprintf(has, sizeof has, "a data-parallel group of one rank");
    note_at(at, "coalesce %s: it joins ZeRO-3's parameter gathers and ZeRO-2/3's gradient reduce-scatters; this plan has %s: "
            "nothing to coalesce", ir_coalesce_names[m->plan.coalesce], has);
  }
  if (m->plan.zero < 2 || m->plan.coalesce == COALESCE_OFF || c.z.deg <= 1) return true;
  cost_device_defaults(m, &c.dev);
  /* the group's link as passes/cost.c times it: across nodes when a group spans them, each of the node's
   * rings with its share of the node's network (the 405B tp 4 cp 2 z3 plans: a quarter of it; counted
   * whole, the backward body's collectives looked hidden, 22 ms under 25 ms of compute, where the
   * compiled program's iteration is 59 ms, the channel's) */
  int row = c.z.with ? IR_COMM_DPCP : c.z.axis;
  bool across;
  int members;
  ir_comm_group_place(m, row, &across, &members);
  const CostLink *l = &c.dev.link[across ? 1 : 0];
  c.lat_s = l->latency_s;
  c.link_bytes_per_s = (l->bytes_per_s > 0 ? l->bytes_per_s : 1e9) / ir_comm_link_share(m->mesh->devices_per_node, across, members);
  c.cap = m->plan.bucket_bytes > 0 ? m->plan.bucket_bytes : (int64_t)25 << 20;
  if (m->plan.zero >= 3) coalesce_graph(&c, m->graph); /* (ZeRO-2 keeps its parameters whole: no gathers in the loops) */
  coalesce_scatters(&c, m->graph);
  return true;
}
