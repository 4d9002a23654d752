/* passes/hfuse.c — the `hfuse` pass (CUDA target): sibling GEMMs, one launch.
 *
 * Llama's layer reads one activation with several weights: k = x @ w_k and v = x @ w_v (both [d, kv]),
 * SwiGLU's g = x @ w_gate and u = x @ w_up (both [d, ffn]), and the backward's weight gradients
 * X^T dY read one X. Two such matmuls (the same A bytes: one value, or reshape views of one; no
 * accumulator, no epilogue, a B of rank 2, the same transposes, weights and outputs of one shape and
 * dtype) become one strided-batched GEMM: the first gets Attrs.hfuse 1 and launches both
 * (rt_cu_matmul_pair: batch 2, A's stride 0, B's and y's strides the distances between the two
 * weights' and the two outputs' bytes, which the memory plan fixed), the second, right after it, gets
 * 2 and emits nothing. The batch's tiles fill the GPU as one GEMM of twice the width: one launch and
 * one last-wave tail instead of two (the cost model's 16.4 us per GEMM, passes/cost.c).
 *
 * The weights and outputs stay where the plan put them: no concatenated copy, no column views, no
 * change to the update, the checkpoint or any other target. The second GEMM, when not right after the
 * first (the backward's weight gradients lie around the input gradient's GEMMs), rises to just after
 * it, with the reshape views it reads moved to just before the first. The pass declines (the GEMMs run
 * as they are) where:
 *   - the second cannot rise: an input made between (not a view), a region, another stage or
 *     instruction between, or a node between that reads or writes its output's bytes (it is written
 *     earlier now: placed_write_early); at most RISE_MAX nodes apart;
 *   - either one is in a fusion group, or has a value in host memory (plan offload's optimizer step);
 *   - a batched B, or a transposed A over batch dims (not one [m, k] x [k, n]);
 *   - bytes meet: the second output is written with the first, so it must meet neither A, nor the
 *     first weight, nor the first output, and the first output not the second weight;
 *   - the two distances do not point the same way in every iteration of the loop (a batch stride is
 *     never negative; rt_cu_matmul_pair would run two GEMMs): the addresses read as codegen binds
 *     them (addr). For weights that are persistent (parameters, their bf16 copies) the memory plan has
 *     made them agree (hfuse_order_copies, called at its end, exchanges two same-sized weights' places,
 *     else the two outputs' places: a stack's rows or a buffer, with whatever else the plan put there), so
 *     the packing's order of the transients does not decide the pairing; it declines where something lies
 *     across an edge of the places, or the distances change direction over the loop.
 * Nothing here depends on ZeRO, tp or the weight copy: the weights are whatever the GEMMs read (the
 * persistent bf16 copies, a layer's own cast, ZeRO-3's gathered rows, a tp shard). The query's GEMM,
 * q = x @ w_q, stays apart (its width differs from k's and v's: no uniform batch), and so do the
 * backward's input gradients (a batch cannot sum its entries: docs/performance.md, "Sibling GEMMs as
 * one"). `shardc --no-fuse hfuse` turns it off.
 */
#include <stdlib.h>

#include "diag.h"
#include "memplan.h"
#include "memplan_views.h"
#include "passes.h"
#include "placed.h"

static bool same_shape(const Shape *a, const Shape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dim[i] != b->dim[i]) return false;
  return true;
}

static bool one_gemm(const Node *n) {
  if (n->op != OP_MATMUL || n->nin != 2 || n->a.epilogue || n->group) return false;
  const Value *a = n->in[0], *b = n->in[1];
  if (b->shape.rank != 2 || (n->a.ta && a->shape.rank != 2) || a->shape.rank < 2) return false;
  return !a->host && !b->host && !n->out[0]->host && a->dtype == b->dtype;
}

/* Where v lives in iteration i of its graph's loop: base + i * step bytes from the rank's base, as codegen
 * binds it (codegen/emit.c emit_repeat: a stacked input's row i; cg.c cg_ptr); false where that is not
 * such a line (a carry, a view's column, ZeRO-3's next row, host memory, a row of an outer loop). */
static bool addr(const Value *v, int64_t *base, int64_t *step) {
  const Node *d = v->def;
  if (d->op == OP_ARG) {
    const Node *r = d->graph->owner;
    int k = d->a.index;
    if (!r || r->op != OP_REPEAT || k < r->a.ncarry || k >= r->nin || d->a.next) return false;
    if (!addr(r->in[k], base, step) || *step) return false; /* an outer loop's row: not this loop's line */
    if (k < r->a.ncarry + r->a.nxs) *step = ir_numel(&v->shape) * ir_dtype_size(v->dtype); /* row i */
    return true;
  }
  if (v->offset == IR_OFFSET_VIEW) { /* (a row view: its first row past its input's) */
    if (v->ld || d->nin == 0 || !addr(d->in[0], base, step)) return false;
    *base += memplan_view_at(d);
    return true;
  }
  if (v->offset < 0 || v->host || v->last_in) return false;
  *base = v->offset;
  *step = v->stride;
  return true;
}

/* Whether the second operand's and the output's distances (pair q minus p) point the same way, nonzero,
 * in every iteration: one strided batch (rt_cu_matmul_pair; the runtime runs two GEMMs otherwise). */
static bool one_direction(const Node *p, const Node *q) {
  int64_t b0, s0, b1, s1, y0, t0, y1, t1;
  if (!addr(p->in[1], &b0, &s0) || !addr(q->in[1], &b1, &s1) || !addr(p->out[0], &y0, &t0) ||
      !addr(q->out[0], &y1, &t1))
    return false;
  const Node *r = p->graph->owner;
  int64_t last = r && r->op == OP_REPEAT ? r->a.count - 1 : 0;
  for (int e = 0; e < 2; e++) {
    int64_t i = e ? last : 0, db = b1 - b0 + i * (s1 - s0), dy = y1 - y0 + i * (t1 - t0);
    if (!db || !dy || (db > 0) != (dy > 0)) return false;
  }
  return true;
}

/* v's bytes as another value's: through reshapes the plan made views (no copy). */
static const Value *bytes_of(const Value *v) {
  while (v->def->op == OP_RESHAPE && memplan_is_view(v->def)) v = v->def->in[0];
  return v;
}

/* Whether p's and q's A are the same bytes read the same way (one value, or views of one of one shape). */
static bool same_a(const Node *p, const Node *q) {
  const Value *a = p->in[0], *b = q->in[0];
  return a == b || (a->dtype == b->dtype && same_shape(&a->shape, &b->shape) && bytes_of(a) == bytes_of(b));
}

/* Whether p and q have the form of a sibling pair. */
static bool sibling_form(const Node *p, const Node *q) {
  const Value *b0 = p->in[1], *b1 = q->in[1], *y0 = p->out[0], *y1 = q->out[0];
  if (!one_gemm(p) || !one_gemm(q) || !same_a(p, q) || b0 == b1) return false;
  if (p->a.ta != q->a.ta || p->a.tb != q->a.tb || b0->dtype != b1->dtype || !same_shape(&b0->shape, &b1->shape)) return false;
  if (y0->dtype != y1->dtype || !same_shape(&y0->shape, &y1->shape)) return false;
  return ir_node_stages(p) == ir_node_stages(q) && p->instr == q->instr;
}

/* The value whose bytes v reads (through the arguments of the loops around it: a row of it, or the whole), or NULL
 * where that is not a place of its own (a carry, ZeRO-3's next row, host memory). */
static const Value *outer(const Value *v) {
  while (v->def->op == OP_ARG) {
    const Node *r = v->def->graph->owner;
    int k = v->def->a.index;
    if (!r || r->op != OP_REPEAT || k < r->a.ncarry || k >= r->nin || v->def->a.next) return NULL;
    v = r->in[k];
  }
  return v->host || v->offset < 0 ? NULL : v;
}

/* The pipeline stages a node runs on: its own, else its region's (0: every rank). */
static uint64_t stages_of(const Node *n) {
  uint64_t m = ir_node_stages(n);
  while (!m && n->graph->owner) n = n->graph->owner, m = ir_node_stages(n);
  return m;
}

/* A place the trades (hfuse_order_copies) move: a value's bytes over its loop's iterations (memplan_span) or a
 * node's scratch, [lo, hi), and the stages its node runs on (stages_of). The places are listed once per pass (the
 * graph walked: every value and scratch of the top graph and its bodies, none in host memory or without bytes of
 * its own), and a trade moves the listed span with the value: Llama-3-405B pp 16's compile walked its whole graph
 * twice per pair, 75 % of its 7.6 s. */
typedef struct {
  Value *v;    /* the value, or NULL: n's scratch */
  Node *n;     /* the node that makes it */
  int64_t lo, hi;
  uint64_t m;  /* stages_of(n) */
} Place;

/* The places and an index of them by address (a trade looks at those near its two spans only: Llama-3-405B pp 32 zb's
 * 2.4 M places, 7,621 trades, 53 of its compile's 123 CPU s when each trade looked at every place): a place in the
 * level of its length (level l: no longer than 1 << (HF_MIN + l) bytes), there in the bucket of its start. */
enum { HF_MIN = 20, HF_LEVELS = 24 }; /* 1 MiB .. 8 TiB */
typedef struct {
  int *at;
  int n, cap;
} Bucket;

typedef struct {
  Place *p;
  int n, cap;
  Bucket *lv[HF_LEVELS]; /* level l's buckets, by lo >> (HF_MIN + l) */
  int nb[HF_LEVELS];
  Bucket near; /* a query's places (places_near) */
} Places;

static void push(Bucket *b, int i) {
  if (b->n == b->cap) {
    b->cap = b->cap ? 2 * b->cap : 16;
    b->at = realloc(b->at, (size_t)b->cap * sizeof *b->at);
    if (!b->at) die("hfuse: out of memory");
  }
  b->at[b->n++] = i;
}

static int level_of(const Place *p) {
  int l = 0;
  while (l < HF_LEVELS - 1 && p->hi - p->lo > ((int64_t)1 << (HF_MIN + l))) l++;
  return l;
}

static Bucket *bucket_of(Places *ps, const Place *p) {
  int l = level_of(p);
  int64_t k = p->lo >> (HF_MIN + l);
  return &ps->lv[l][k < 0 ? 0 : k >= ps->nb[l] ? ps->nb[l] - 1 : k];
}

static void places_index(Places *ps) {
  int64_t top = 0;
  for (int i = 0; i < ps->n; i++)
    if (ps->p[i].hi > top) top = ps->p[i].hi;
  for (int l = 0; l < HF_LEVELS; l++) {
    ps->nb[l] = (int)(top >> (HF_MIN + l)) + 1;
    ps->lv[l] = calloc((size_t)ps->nb[l], sizeof *ps->lv[l]);
    if (!ps->lv[l]) die("hfuse: out of memory");
  }
  for (int i = 0; i < ps->n; i++) push(bucket_of(ps, &ps->p[i]), i);
}

static void places_free(Places *ps) {
  for (int l = 0; l < HF_LEVELS; l++) {
    for (int k = 0; k < ps->nb[l]; k++) free(ps->lv[l][k].at);
    free(ps->lv[l]);
  }
  free(ps->near.at);
  free(ps->p);
}

/* ps->near: every place that may meet [o0, o0 + bytes) or [o1, o1 + bytes) (and some that do not), each once: at
 * each level, the buckets from the one before each span's start's to its end's. */
static void places_near(Places *ps, int64_t o0, int64_t o1, int64_t bytes) {
  ps->near.n = 0;
  int64_t lo[2] = {o0 < o1 ? o0 : o1, o0 < o1 ? o1 : o0};
  for (int l = 0; l < HF_LEVELS; l++) {
    int sh = HF_MIN + l;
    int64_t from = -1;
    for (int e = 0; e < 2; e++) {
      int64_t a = (lo[e] >> sh) - 1, z = (lo[e] + bytes - 1) >> sh;
      if (a <= from) a = from + 1;
      for (int64_t k = a < 0 ? 0 : a; k <= z && k < ps->nb[l]; k++)
        for (int i = 0; i < ps->lv[l][k].n; i++) push(&ps->near, ps->lv[l][k].at[i]);
      if (z > from) from = z;
    }
  }
}

static void place_add(Places *ps, Value *v, Node *n, int64_t lo, int64_t hi) {
  if (ps->n == ps->cap) {
    ps->cap = ps->cap ? 2 * ps->cap : 256;
    ps->p = realloc(ps->p, (size_t)ps->cap * sizeof *ps->p);
    if (!ps->p) die("hfuse: out of memory");
  }
  ps->p[ps->n++] = (Place){v, n, lo, hi, stages_of(n)};
}

static void list_places(Places *ps, Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->body) list_places(ps, n->body);
    for (int k = 0; k < n->nout; k++) {
      int64_t lo, hi;
      if (!n->out[k]->host && memplan_span(n->out[k], &lo, &hi)) place_add(ps, n->out[k], n, lo, hi);
    }
    if (n->scratch_bytes > 0) place_add(ps, NULL, n, n->scratch_at, n->scratch_at + n->scratch_bytes);
  }
}

/* Where [lo, hi) lies against [o, o + bytes): 0 apart, 1 inside, -1 across its edge. */
static int against(int64_t lo, int64_t hi, int64_t o, int64_t bytes) {
  if (hi <= o || lo >= o + bytes) return 0;
  return lo >= o && hi <= o + bytes ? 1 : -1;
}

/* Whether a place of stages m is another rank's than the stages sm's only (sm 0: every rank, and the trade is every
 * rank's). */
static bool elsewhere(uint64_t m, uint64_t sm) { return sm && m && !(m & sm); }

/* Whether the places [o0, o0 + bytes) and [o1, o1 + bytes) may trade on the stages sm (0: every rank): no place
 * near them (ps->near, places_near) lies across an edge of them, and, where the trade is some stages' (a node on
 * other stages only is another rank's: passes/memplan.c lets stages share bytes), none inside them is also another
 * stage's or every rank's (it would move under that rank's own values). */
static bool whole(const Places *ps, uint64_t sm, int64_t o0, int64_t o1, int64_t bytes) {
  for (int i = 0; i < ps->near.n; i++) {
    const Place *p = &ps->p[ps->near.at[i]];
    if (elsewhere(p->m, sm)) continue;
    bool mixed = sm && (!p->m || (p->m & ~sm));
    for (int e = 0; e < 2; e++) {
      int at = against(p->lo, p->hi, e ? o1 : o0, bytes);
      if (at < 0 || (at > 0 && mixed)) return false;
    }
  }
  return true;
}

/* Every place near (ps->near) on the stages sm (as whole) inside [o0, o0 + bytes) moves to the same place in
 * [o1, o1 + bytes), and the other way round: its value's offset or its node's scratch with it (and its bucket). */
static void exchange(Places *ps, uint64_t sm, int64_t o0, int64_t o1, int64_t bytes) {
  for (int i = 0; i < ps->near.n; i++) {
    int j = ps->near.at[i];
    Place *p = &ps->p[j];
    if (elsewhere(p->m, sm)) continue;
    int64_t d = against(p->lo, p->hi, o0, bytes) > 0 ? o1 - o0 : against(p->lo, p->hi, o1, bytes) > 0 ? o0 - o1 : 0;
    if (!d) continue;
    Bucket *from = bucket_of(ps, p);
    p->lo += d;
    p->hi += d;
    if (p->v) p->v->offset += d;
    else p->n->scratch_at += d;
    Bucket *to = bucket_of(ps, p);
    if (from == to) continue;
    int k = 0;
    while (from->at[k] != j) k++;
    from->at[k] = from->at[--from->n];
    push(to, j);
  }
}

/* The sign of a distance d0 + i ds between two operands over a loop's iterations 0..last: 1 or -1 where one, else 0. */
static int direction(int64_t d0, int64_t ds, int64_t last) {
  int64_t dl = d0 + last * ds;
  return d0 > 0 && dl > 0 ? 1 : d0 < 0 && dl < 0 ? -1 : 0;
}

/* Two same-sized places apart, at o0 and o1, traded (exchange) where nothing lies across their edges; true if done. */
static bool trade(Places *ps, uint64_t sm, int64_t o0, int64_t o1, int64_t bytes) {
  if (bytes <= 0 || (o0 < o1 + bytes && o1 < o0 + bytes)) return false;
  places_near(ps, o0, o1, bytes); /* (whole and exchange look at these) */
  if (!whole(ps, sm, o0, o1, bytes)) return false;
  exchange(ps, sm, o0, o1, bytes);
  return true;
}

/* v's and w's places (memplan_span), one size, traded on the stages sm. */
static bool trade_values(Places *ps, uint64_t sm, const Value *v, const Value *w) {
  int64_t lo0, hi0, lo1, hi1;
  return v && w && v != w && memplan_span(v, &lo0, &hi0) && memplan_span(w, &lo1, &hi1) && hi0 - lo0 == hi1 - lo1 &&
         trade(ps, sm, lo0, lo1, hi0 - lo0);
}

/* Where p's and q's weights and outputs lie one way round and the other (no strided batch), the places of one pair
 * traded: the weights' where both are persistent copies (the update's cast written there, ZeRO's gathered shards
 * with them), else the outputs' over their loop (memplan_span: a stack's rows, or one buffer), the transients the
 * packing laid out: whatever else the plan put in those bytes trades with them, so the layout's order no longer
 * decides the pairing (Llama-3-8B pp 4 zb z2 rc sel: the forward's k / v and gate / up stacks lay the other way round
 * from the stage's weight rows). Unless something lies across an edge (then the pass finds the pair two ways round,
 * and leaves it). */
static void order_pair(Places *ps, const Node *p, const Node *q) {
  int64_t y0, t0, y1, t1, b0, s0, b1, s1;
  if (!addr(p->out[0], &y0, &t0) || !addr(q->out[0], &y1, &t1) || !addr(p->in[1], &b0, &s0) || !addr(q->in[1], &b1, &s1))
    return;
  const Node *r = p->graph->owner;
  int64_t last = r && r->op == OP_REPEAT ? r->a.count - 1 : 0;
  int dy = direction(y1 - y0, t1 - t0, last), db = direction(b1 - b0, s1 - s0, last);
  if (!dy || !db || dy == db) return; /* no one way, or already it */
  /* (one stride: the distance turns whole; the weights on every rank's stages, the outputs on the pair's) */
  if (s0 == s1 && trade_values(ps, 0, outer(p->in[1]), outer(q->in[1]))) return;
  if (t0 == t1) trade_values(ps, stages_of(p), p->out[0], q->out[0]);
}

static void order_graph(Places *ps, Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->body) order_graph(ps, n->body);
    if (i + 1 < g->nnodes && sibling_form(n, g->nodes[i + 1])) order_pair(ps, n, g->nodes[i + 1]);
  }
}

void hfuse_order_copies(Module *m) {
  if (m->target != TARGET_CUDA || !fuse_on(m, FUSE_HFUSE)) return;
  Places ps = {0};
  list_places(&ps, m->graph);
  places_index(&ps);
  order_graph(&ps, m->graph);
  places_free(&ps);
}

static bool siblings(const Node *p, const Node *q) {
  const Value *b0 = p->in[1], *b1 = q->in[1], *y0 = p->out[0], *y1 = q->out[0];
  if (!sibling_form(p, q)) return false;
  /* y1 is written with y0, before q's place: it must meet nothing p reads or writes, nor y0 b1 */
  if (placed_meets(y1, p->in[0]) || placed_meets(y1, b0) || placed_meets(y1, y0) || placed_meets(y0, b1)) return false;
  return one_direction(p, q);
}

int hfuse_leader(const Graph *g, int i) {
  if (i <= 0 || i >= g->nnodes || g->nodes[i]->a.hfuse != 2) return -1;
  return g->nodes[i - 1]->a.hfuse == 1 ? i - 1 : -1;
}

static int position(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  return -1; /* (another graph's, or an argument) */
}

/* Whether q (at j, after p at i) may move to just after p, the views it reads that lie between to just before p:
 * each input defined before p's place, or such a reshape view (no code) whose input is; its output written that
 * early meeting nothing the nodes between use (placed_write_early: no region between either). */
static bool may_rise(const Graph *g, int i, int j) {
  const Node *q = g->nodes[j];
  for (int k = 0; k < q->nin; k++) {
    const Node *d = q->in[k]->def;
    int at = d->graph == g ? position(g, d) : -1;
    if (at < i) continue;
    if (at > j || d->op != OP_RESHAPE || !memplan_is_view(d) || d->group) return false;
    int src = d->in[0]->def->graph == g ? position(g, d->in[0]->def) : -1;
    if (src >= i) return false;
  }
  for (int k = i + 1; k < j; k++)
    if (ir_node_stages(g->nodes[k]) != ir_node_stages(q) || g->nodes[k]->instr != q->instr) return false;
  return placed_write_early(g, q->out[0], i, NULL);
}

/* Moves the views between i and j that q (at j) reads to just before i, and q to just after i; returns p's new place. */
static int rise(Graph *g, int i, int j) {
  Node *p = g->nodes[i], *q = g->nodes[j];
  Node **moved = calloc((size_t)(j - i), sizeof *moved), **rest = calloc((size_t)(j - i), sizeof *rest);
  if (!moved || !rest) die("hfuse: out of memory");
  int nm = 0, nr = 0;
  for (int k = i + 1; k < j; k++) {
    Node *x = g->nodes[k];
    bool view = false;
    for (int a = 0; a < q->nin; a++) view |= q->in[a]->def == x;
    if (view) moved[nm++] = x;
    else rest[nr++] = x;
  }
  int at = i;
  for (int k = 0; k < nm; k++) g->nodes[at++] = moved[k];
  int pp = at;
  g->nodes[at++] = p;
  g->nodes[at++] = q;
  for (int k = 0; k < nr; k++) g->nodes[at++] = rest[k];
  ir_touch(g);
  free(moved);
  free(rest);
  return pp;
}

enum { RISE_MAX = 24 }; /* nodes a sibling may rise over (a layer's backward: its dX GEMMs, their adds, views) */

static void hfuse_graph(Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->body) hfuse_graph(n->body);
    if (n->a.hfuse) continue; /* (the IR read back after this pass: tests/passes/ir_roundtrip.sh) */
    if (!one_gemm(n)) continue;
    for (int j = i + 1; j < g->nnodes && j <= i + RISE_MAX && !g->nodes[j]->body; j++) {
      Node *q = g->nodes[j];
      if (q->a.hfuse || !siblings(n, q) || (j > i + 1 && !may_rise(g, i, j))) continue;
      if (j > i + 1) i = rise(g, i, j);
      n->a.hfuse = 1;
      q->a.hfuse = 2;
      i++; /* (past q) */
      break;
    }
  }
}

bool pass_hfuse(Module *m) {
  if (!pass_cuda_fusions_apply(m)) return true;
  if (!m->memplan) die("hfuse: the memory plan has not run");
  if (!fuse_on(m, FUSE_HFUSE)) return true; /* shardc --no-fuse hfuse */
  hfuse_graph(m->graph);
  return true;
}
