/* passes/zero_defer.c — the `zdefer` pass: a backward layer loop's gradient reduce-scatters no longer
 * waited inside the iteration that issues them.
 *
 * Under ZeRO-2/3 each backward layer-loop iteration reduce-scatters its layer's gradients
 * asynchronously (passes/zero.c, zero_sums.c; packed into runs by zero_group_scatters, coalesced by
 * passes/zero_coalesce.c). What reads a scatter's result in the body — the slices (and reshapes) that
 * unpack a packed run into the layer's gradient shards, and under gradient accumulation the adds of
 * those shards to the running sums (stacked inputs of the loop) — made the iteration wait for the
 * scatter (and every collective queued before it on the channel) at its end: a 405B layer's 35 ms
 * (docs/planner.md, "The backward loops' waits and Meta's plan").
 *
 * Those readers are row-local: row i of the loop's stacked outputs is a slice / reshape / add / scale
 * (the last micro-step's mean) / cast of row i of the scatter's result and row i of stacked inputs. This pass yields the scatter's
 * result itself as a new stacked output of the loop (written in place into its row: nothing reads it
 * in the body) and applies the same slices, reshapes and adds once after the loop, to the whole stacks
 * (a slice along axis a of a row is one along a + 1 of the stack). The iteration no longer reads what
 * it scattered; the scatter of iteration i overlaps iteration i + 1's backward, and the loop's last
 * one is waited after the loop, where its stacked output is read.
 *
 * Which scatters: zero_defers_scatters (the one decision, which passes/plan_model.c's stall model asks
 * too): ZeRO >= 2 over a group of more than one rank, with or without pipeline stages (there the loops are
 * the stages' B, zb: W, instructions' at the top level, one per micro-batch: the lifted nodes join the
 * loop's stage and instruction), in loops of two layers or more (a stage's or interleaved chunk's of one
 * has no next iteration) or cut by `zb_w hold(N)` (zero_defer_loop: Node.cont, cont_of, a loop of one layer too;
 * the first loop's lifted nodes go after the second, lifted_after, so that its last iteration's scatters are
 * waited in the second's first iteration: passes/memplan_defer.c, memplan_defer_next; where both loops lift the
 * same nodes off the same scatter, once over both loops' rows: defer_pair, the unpacking of the uncut loop's cost).
 * A scatter whose body readers are anything else (a loop, a capture, a carry) stays.
 * Cost: the stacked result ([count, 1, N] f32, the loop's gradient shards: what the unpacked ys hold
 * too) is live from the loop to the unpacking after it; the unpacking is one copy of it; and the
 * scatters' f32 inputs (the layer's whole gradient over tp) live through the whole body
 * (passes/memplan_defer.c): Llama-3-405B dp 1024 tp 2 z3 rc full mb 1 +3.9 GiB.
 *
 * Whether a plan that may defer does: plan `defer_waits` (zero_defer_taken, the one rule, which
 * plan_model.c's memory and stall model asks too). `auto` (the default) defers unless the driver's compile
 * of the plan with the deferred waits did not fit the device (Plan.fit.defer.total, replan.c), like
 * `weight_copy auto`; `on` / `off` by hand, refused (an error at the option) where the plan has no
 * such scatters. Module.defer says which was taken and why (the plan's memory report prints it).
 */
#include <string.h>

#include "commreport.h"
#include "diag.h"
#include "fit.h"
#include "memplan.h"
#include "passes.h"
#include "plan_options.h"
#include "ptrmap.h"
#include "zero.h"

bool zero_defers_scatters(int zero, int group) { return zero >= 2 && group > 1; }

/* A loop of one iteration that recompute_split cut (Node.cont, cont_of) is one of several too: the first's last
 * iteration continues in the second's first (memplan_defer_next). */
bool zero_defer_loop(const Node *r) {
  return r && r->op == OP_REPEAT && (r->a.count >= 2 || (r->a.count >= 1 && (r->cont || r->cont_of)));
}

bool zero_defer_taken(int want, double total, double cap, bool lost) {
  return want == DEFER_ON || (want == DEFER_AUTO && !lost && !fit_figure_over(total, cap));
}

/* Whether a node of g (nested too) reads one of r's outputs marked in drop. */
static bool reads_dropped(const Graph *g, const Node *r, const bool *drop) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++)
      if (n->in[j]->def == r && drop[n->in[j]->idx]) return true;
    if (n->body && reads_dropped(n->body, r, drop)) return true;
  }
  return false;
}

/* Where loop r's lifted readers go (standing for its outputs marked in drop): after r, or after the loop continuing it
 * (Node.cont, passes/recompute_split.c) where neither that one nor a node before it reads those, so that r's last
 * iteration's scatters may be waited in cont's first (memplan_defer.c, memplan_defer_next). */
static int lifted_after(const Graph *g, const Node *r, int at_r, const bool *drop) {
  const Node *c = r->cont;
  if (!c || c->graph != g) return at_r;
  for (int i = at_r + 1; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++)
      if (n->in[j]->def == r && drop[n->in[j]->idx]) return at_r;
    if (n->body && reads_dropped(n->body, r, drop)) return at_r;
    if (n == c) return i;
  }
  return at_r;
}

/* The ops this pass lifts out of a body onto the stacks: row-local, and the same op (a slice one axis
 * later) on a stack. */
static bool liftable(const Node *n) {
  return (n->op == OP_SLICE && n->nin == 1) || n->op == OP_RESHAPE || (n->op == OP_ADD && n->nin == 2) ||
         n->op == OP_SCALE || n->op == OP_CAST;
}

/* Whether a node of g or of a body nested in it reads a value in set. */
static bool reads_set(const Graph *g, const PtrMap *set) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++)
      if (ptrmap_get(set, n->in[j], NULL)) return true;
    if (n->body && reads_set(n->body, set)) return true;
  }
  return false;
}

/* One graph's deferrals, applied at once (under pp the top level holds every micro-batch's B loops: a walk
 * of the whole IR per loop was minutes on Llama-3-405B pp 16). moved: a dropped stacked output of a loop ->
 * the lifted stack standing for it; groups: each deferral's lifted nodes (emitted at the graph's end), the
 * loop's position they go after. */
typedef struct {
  PtrMap moved;
  PtrMap rows;     /* the row slices defer_pair made (rows_of) */
  PtrMap loops;    /* the loops lifted from (their stacked inputs only the lifted nodes read: dropped, unread_xs) */
  int (*group)[3]; /* the loop's position, the first and one past the last lifted node's */
  int ngroups, cap;
} Lifted;

static Value *moved_to(const Lifted *l, Value *v) {
  intptr_t o;
  return ptrmap_get(&l->moved, v, &o) ? (Value *)o : v;
}

/* g's lifted nodes (its last, from n0 on) each group after its loop; a loop's groups in the reverse of their
 * making (each was placed right after the loop when made). */
static void place_lifted(Graph *g, int n0, const Lifted *l) {
  if (g->nnodes == n0) return;
  for (int a = 1; a < l->ngroups; a++) /* by position, stable (a cut loop's groups go after its cont: lifted_after) */
    for (int b = a; b > 0 && l->group[b - 1][0] > l->group[b][0]; b--) {
      int t[3];
      memcpy(t, l->group[b], sizeof t);
      memcpy(l->group[b], l->group[b - 1], sizeof t);
      memcpy(l->group[b - 1], t, sizeof t);
    }
  Node **order = ARENA_ARRAY(g->arena, Node *, g->nnodes + 1);
  int k = 0, gi = 0;
  for (int i = 0; i < n0; i++) {
    order[k++] = g->nodes[i];
    int end = gi;
    while (end < l->ngroups && l->group[end][0] == i) end++;
    for (int q = end - 1; q >= gi; q--)
      for (int j = l->group[q][1]; j < l->group[q][2]; j++) order[k++] = g->nodes[j];
    gi = end;
  }
  if (k != g->nnodes || gi != l->ngroups) die("zdefer: %d of %d nodes placed", k, g->nnodes);
  memcpy(g->nodes, order, sizeof(Node *) * (size_t)k);
  ir_touch(g);
}

static int position(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  die("zdefer: node not in its graph");
}

/* The stacked value standing for body value v after loop r: mapped, or a stacked input's. */
static Value *outer_of(const Node *r, const PtrMap *map, const Lifted *l, Value *v) {
  intptr_t o;
  if (ptrmap_get(map, v, &o)) return (Value *)o;
  return moved_to(l, r->in[v->def->a.index]); /* (an earlier loop's output this pass moved) */
}

/* What deferring scatter s of loop r lifts out of its body: the nodes reading s's result, directly or not, in body
 * order (lift; returns how many), each row-local (liftable), its other operands rows of stacked inputs, none yielded
 * as a carry. made: s's result (1) and the lifted nodes' outputs (2 + their index in lift). 0 where one is not
 * liftable (nothing lifted) or none reads it. */
static int lifted_of(const Node *r, const Node *s, Node **lift, PtrMap *made) {
  Graph *b = r->body;
  int nc = r->a.ncarry, nx = r->a.nxs, at = position(b, s);
  ptrmap_put(made, s->out[0], 1);
  int nl = 0;
  bool ok = true;
  for (int i = at + 1; i < b->nnodes && ok; i++) {
    Node *n = b->nodes[i];
    bool reads = false;
    for (int j = 0; j < n->nin; j++) reads |= ptrmap_get(made, n->in[j], NULL);
    if (n->body && reads_set(n->body, made)) ok = false;
    if (!reads || !ok) continue;
    if (!liftable(n)) {
      ok = false;
      break;
    }
    for (int j = 0; j < n->nin; j++) { /* every other operand a row of a stacked input */
      Value *u = n->in[j];
      if (ptrmap_get(made, u, NULL)) continue;
      int k = u->def->op == OP_ARG && u->def->graph == b ? u->def->a.index : -1;
      if (k < nc || k >= nc + nx || u->def->a.next) ok = false;
    }
    ptrmap_put(made, n->out[0], 2 + nl);
    lift[nl++] = n;
  }
  for (int k = 0; k < b->nresults && ok; k++) /* yielded: only as stacked outputs */
    if (k < nc && ptrmap_get(made, b->results[k], NULL)) ok = false;
  return ok ? nl : 0;
}

/* The loop's stacked outputs the lifted nodes make (their stacks stand for them after the loop; s's own result
 * yielded as it is stays): drop[k], room for one output more. */
static bool *dropped_of(const Node *r, const Node *s, const PtrMap *made) {
  const Graph *b = r->body;
  bool *drop = ARENA_ARRAY(r->graph->arena, bool, r->nout + 2);
  memset(drop, 0, sizeof(bool) * (size_t)(r->nout + 2));
  for (int k = r->a.ncarry; k < b->nresults; k++)
    drop[k] = b->results[k] != s->out[0] && ptrmap_get(made, b->results[k], NULL);
  return drop;
}

/* Body node n applied after its loop (like: the loop, whose predicates it takes) to stacks of count rows. */
static Value *lift_node(Graph *g, const Node *n, Value *const *in, int64_t count, const Node *like) {
  Attrs a = n->a;
  if (n->op == OP_SLICE) a.axis++;
  const Value *y = n->out[0];
  Value *o = ir_emit(g, n->op, n->nin, in, y->dtype, ir_stacked_shape(y->shape, count), &a, n->loc);
  o->sharding = ir_sharding_shift(y->sharding, 1);
  o->def->stage = like->stage;
  o->def->stageset = like->stageset;
  o->def->instr = like->instr;
  return o;
}

/* The lifted nodes out of r's body, its outputs they stand for dropped. */
static void lifted_out(Node *r, const bool *drop, Node *const *lift, int nl) {
  ir_repeat_remove_outputs(r, drop);
  for (int i = nl - 1; i >= 0; i--) ir_drop_node(r->body, lift[i]);
}

/* Defers the reduce-scatter s of loop r (at position at_r of its graph); false (nothing changed) where its
 * readers are not all liftable or it has none. The lifted nodes are emitted at the graph's end (a group of l's),
 * the uses of the outputs they stand for recorded in l->moved. */
static bool defer_one(Node *r, int at_r, Node *s, Lifted *l) {
  Graph *b = r->body, *g = r->graph;
  PtrMap made = {0}; /* the body values the lifted nodes stand for */
  Node **lift = ARENA_ARRAY(g->arena, Node *, b->nnodes + 1);
  int nl = lifted_of(r, s, lift, &made);
  if (nl == 0) {
    ptrmap_free(&made);
    return false;
  }
  bool *drop = dropped_of(r, s, &made);
  /* the scatter's result stacked; its readers applied to the stacks after the loop */
  PtrMap map = {0}; /* body value -> its stack after the loop */
  ptrmap_put(&map, s->out[0], (intptr_t)ir_repeat_add_stacked(r, s->out[0]));
  arena_grow(g->arena, (void **)&l->group, &l->cap, l->ngroups + 1, sizeof *l->group);
  int *grp = l->group[l->ngroups++];
  grp[0] = at_r, grp[1] = g->nnodes;
  for (int i = 0; i < nl; i++) {
    Node *n = lift[i];
    Value *in[2];
    for (int j = 0; j < n->nin; j++) in[j] = outer_of(r, &map, l, n->in[j]);
    ptrmap_put(&map, n->out[0], (intptr_t)lift_node(g, n, in, r->a.count, r));
  }
  grp[2] = g->nnodes;
  /* the loop's stacked outputs the lifted nodes made: their stacks instead */
  for (int k = r->a.ncarry; k < b->nresults - 1; k++) {
    intptr_t o;
    if (drop[k] && ptrmap_get(&map, b->results[k], &o)) ptrmap_put(&l->moved, r->out[k], o);
  }
  grp[0] = lifted_after(g, r, at_r, drop);
  lifted_out(r, drop, lift, nl);
  ptrmap_put(&l->loops, r, 1);
  ptrmap_free(&map);
  ptrmap_free(&made);
  return true;
}

/* Rows [start, start + len) of stacked x after loop like (a dim-0 slice: a row view in the memory plan). */
static Value *rows_of(Graph *g, Value *x, int64_t start, int64_t len, const Node *like, Lifted *l) {
  Attrs sa = {0};
  sa.axis = 0, sa.start = start, sa.len = len;
  Shape sh = x->shape;
  sh.dim[0] = len;
  Value *y = ir_emit(g, OP_SLICE, 1, &x, x->dtype, sh, &sa, like->loc);
  y->sharding = x->sharding;
  y->def->stage = like->stage, y->def->stageset = like->stageset, y->def->instr = like->instr;
  ptrmap_put(&l->rows, y, 1);
  return y;
}

/* Stacked a's rows then b's: where they are adjacent rows of one value, those rows (that value where they are all
 * of it), else their concat along dim 0 (in place in the memory plan where it can: memplan_rows_node). */
static Value *rows_join(Graph *g, Value *a, Value *b, const Node *like, Lifted *l) {
  const Node *x = a->def, *y = b->def;
  if (x->op == OP_SLICE && y->op == OP_SLICE && x->a.axis == 0 && y->a.axis == 0 && x->in[0] == y->in[0] &&
      x->a.start + x->a.len == y->a.start) {
    Value *src = x->in[0];
    if (x->a.start == 0 && y->a.start + y->a.len == src->shape.dim[0]) return src;
    return rows_of(g, src, x->a.start, x->a.len + y->a.len, like, l);
  }
  Value *two[2] = {a, b};
  Attrs ca = {0};
  ca.axis = 0;
  Shape sh = a->shape;
  sh.dim[0] += b->shape.dim[0];
  Value *c = ir_emit(g, OP_CONCAT, 2, two, a->dtype, sh, &ca, like->loc);
  c->sharding = a->sharding;
  c->def->stage = like->stage, c->def->stageset = like->stageset, c->def->instr = like->instr;
  return c;
}

/* Whether lifted nodes n (of loop r's body, made: lifted_of's) and m (of its cont's, made2) are the same op on the
 * same operands: each s's result, the same lifted node's, or the same stacked input's row. */
static bool same_lift(const Node *n, const PtrMap *made, const Node *m, const PtrMap *made2) {
  const Value *y = n->out[0], *z = m->out[0];
  if (n->op != m->op || n->nin != m->nin || y->dtype != z->dtype || !ir_shape_eq(&y->shape, &z->shape) ||
      n->a.axis != m->a.axis || n->a.start != m->a.start || n->a.len != m->a.len || n->a.scalar != m->a.scalar)
    return false;
  for (int j = 0; j < n->nin; j++) {
    intptr_t p = 0, q = 0;
    bool in1 = ptrmap_get(made, n->in[j], &p), in2 = ptrmap_get(made2, m->in[j], &q);
    if (in1 != in2 || p != q || (!in1 && n->in[j]->def->a.index != m->in[j]->def->a.index)) return false;
  }
  return true;
}

/* Defers scatter s of loop r and the same scatter s2 of r's cont c (passes/recompute_split.c: `zb_w hold(N)` cut one
 * loop in two, c at position at_c) at once: their results stacked, their rows in one stack (lo's rows first, in place
 * in the memory plan: memplan_rows_node), the lifted nodes applied once to it after c, their stacked inputs' rows
 * joined (rows_join: the running sums' rows of the previous micro-batch's lifted stack, that stack itself). Each
 * loop's dropped output stands for its rows of the stack. The unpacking of a cut costs what the uncut loop's did
 * (tiny: one [4, 32] slice and add where a [3, 32] and a [1, 32] were). False (nothing changed) where the two do
 * not lift the same nodes, or something between the loops reads r's dropped outputs. */
static bool defer_pair(Node *r, int at_r, Node *s, Node *c, int at_c, Node *s2, Lifted *l) {
  Graph *g = r->graph;
  if (!s2 || c->a.reverse != r->a.reverse || ir_node_stages(c) != ir_node_stages(r) || c->instr != r->instr ||
      s2->out[0]->dtype != s->out[0]->dtype || !ir_shape_eq(&s2->out[0]->shape, &s->out[0]->shape))
    return false;
  PtrMap made = {0}, made2 = {0};
  Node **lift = ARENA_ARRAY(g->arena, Node *, r->body->nnodes + 1);
  Node **lift2 = ARENA_ARRAY(g->arena, Node *, c->body->nnodes + 1);
  int nl = lifted_of(r, s, lift, &made), nl2 = lifted_of(c, s2, lift2, &made2);
  bool ok = nl > 0 && nl2 == nl;
  for (int i = 0; i < nl && ok; i++) ok = same_lift(lift[i], &made, lift2[i], &made2);
  bool *drop = ok ? dropped_of(r, s, &made) : NULL, *drop2 = ok ? dropped_of(c, s2, &made2) : NULL;
  if (!ok || lifted_after(g, r, at_r, drop) != at_c) {
    ptrmap_free(&made);
    ptrmap_free(&made2);
    return false;
  }
  Value *S = ir_repeat_add_stacked(r, s->out[0]), *S2 = ir_repeat_add_stacked(c, s2->out[0]);
  Node *lo = r->a.reverse ? c : r, *hi = r->a.reverse ? r : c; /* (a reverse loop's first runs the last rows) */
  int64_t rows = r->a.count + c->a.count, at = r == lo ? 0 : c->a.count, at2 = r == lo ? r->a.count : 0;
  arena_grow(g->arena, (void **)&l->group, &l->cap, l->ngroups + 1, sizeof *l->group);
  int *grp = l->group[l->ngroups++];
  grp[0] = at_c, grp[1] = g->nnodes;
  Value **v = ARENA_ARRAY(g->arena, Value *, nl + 2); /* v[1]: s's stack; v[2 + i]: lift[i]'s */
  v[1] = r == lo ? rows_join(g, S, S2, r, l) : rows_join(g, S2, S, r, l);
  for (int i = 0; i < nl; i++) {
    const Node *n = lift[i];
    Value *in[2];
    for (int j = 0; j < n->nin; j++) {
      intptr_t p;
      if (ptrmap_get(&made, n->in[j], &p)) {
        in[j] = v[p];
        continue;
      }
      int k = n->in[j]->def->a.index; /* a stacked input's row: lo's rows of it then hi's */
      in[j] = rows_join(g, moved_to(l, lo->in[k]), moved_to(l, hi->in[k]), r, l);
    }
    v[2 + i] = lift_node(g, n, in, rows, r);
  }
  /* each loop's stacked outputs the lifted nodes made: its rows of their stacks */
  for (int k = r->a.ncarry; k < r->body->nresults - 1; k++) {
    intptr_t p;
    if (drop[k] && ptrmap_get(&made, r->body->results[k], &p))
      ptrmap_put(&l->moved, r->out[k], (intptr_t)rows_of(g, v[p], at, r->a.count, r, l));
  }
  for (int k = c->a.ncarry; k < c->body->nresults - 1; k++) {
    intptr_t p;
    if (drop2[k] && ptrmap_get(&made2, c->body->results[k], &p))
      ptrmap_put(&l->moved, c->out[k], (intptr_t)rows_of(g, v[p], at2, c->a.count, c, l));
  }
  grp[2] = g->nnodes;
  (void)hi;
  lifted_out(r, drop, lift, nl);
  lifted_out(c, drop2, lift2, nl);
  ptrmap_put(&l->loops, r, 1), ptrmap_put(&l->loops, c, 1);
  ptrmap_free(&made);
  ptrmap_free(&made2);
  return true;
}

/* The concats along dim 0 of g whose inputs are rows defer_pair made (rows_of), adjacent and all of one value
 * (recompute_split's of a cut loop's running sums, the optimizer's): that value; then those rows nothing reads dropped. */
static void join_rows(Graph *g, const Lifted *l) {
  if (!l->rows.count) return;
  PtrMap to = {0};
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op != OP_CONCAT || n->a.axis != 0) continue;
    const Value *src = n->in[0]->def->op == OP_SLICE ? n->in[0]->def->in[0] : NULL;
    int64_t next = 0;
    bool ok = src != NULL;
    for (int j = 0; j < n->nin && ok; j++) {
      const Node *x = n->in[j]->def;
      ok = ptrmap_get(&l->rows, n->in[j], NULL) && x->in[0] == src && x->a.start == next;
      next += x->a.len;
    }
    if (ok && next == src->shape.dim[0]) ptrmap_put(&to, n->out[0], (intptr_t)src);
  }
  if (to.count) ir_replace_uses_map_deep(g, &to);
  for (bool more = true; more;) { /* (the concats, then their rows) */
    more = false;
    PtrMap uses = {0};
    ir_use_counts(g, &uses);
    for (int i = g->nnodes - 1; i >= 0; i--) {
      const Node *n = g->nodes[i];
      if (n->nout != 1 || (!ptrmap_get(&to, n->out[0], NULL) && !ptrmap_get(&l->rows, n->out[0], NULL)) ||
          ptrmap_get(&uses, n->out[0], NULL) || ir_is_result(g, n->out[0]))
        continue;
      ir_drop_node(g, n);
      more = true;
    }
    ptrmap_free(&uses);
  }
  ptrmap_free(&to);
}

/* The stacked inputs of the loops lifted from that their bodies no longer read (the running sums the lifted adds
 * read after the loop, zb's W's among them): dropped, a loop taking only what it reads (passes/pipe_split.c). */
static void unread_xs(Graph *g, const Lifted *l) {
  for (int i = 0; l->loops.count && i < g->nnodes; i++)
    if (ptrmap_get(&l->loops, g->nodes[i], NULL)) ir_repeat_drop_unread_xs(g->nodes[i]);
}

/* The k-th asynchronous reduce-scatter of body b (body order), the one defer_graph pairs with a cut loop's k-th. */
static Node *nth_scatter(const Graph *b, int k) {
  for (int i = 0; i < b->nnodes; i++)
    if (b->nodes[i]->op == OP_REDUCE_SCATTER && ir_comm_async(b->nodes[i]) && k-- == 0) return b->nodes[i];
  return NULL;
}

/* Defers g's loops' scatters (nested too); *most: the largest f32 bytes one body's deferred inputs hold (with
 * the scatters whose results the body yields as they are, unread: passes/memplan_defer.c defers those too). */
static void defer_graph(Graph *g, int64_t *most) {
  Lifted l = {0};
  int n0 = g->nnodes;
  for (int i = 0; i < n0; i++) {
    Node *r = g->nodes[i];
    if (!r->body) continue;
    defer_graph(r->body, most);
    if (!zero_defer_loop(r)) continue;
    Node *c = r->cont && r->cont->graph == g && zero_defer_loop(r->cont) ? r->cont : NULL; /* (a cut loop's second) */
    int at_c = c ? position(g, c) : -1;
    for (int j = 0, k = 0; j < r->body->nnodes; j++) {
      Node *s = r->body->nodes[j];
      if (s->op != OP_REDUCE_SCATTER || !ir_comm_async(s)) continue;
      if (!c || !defer_pair(r, i, s, c, at_c, nth_scatter(c->body, k), &l)) defer_one(r, i, s, &l);
      k++;
    }
    int64_t held = 0; /* every scatter of the body its iteration no longer reads (those yielded as they are too) */
    for (int j = 0; j < r->body->nnodes; j++) {
      const Node *s = r->body->nodes[j];
      if (memplan_defers_wait(s)) held += ir_numel(&s->in[0]->shape) * ir_dtype_size(s->in[0]->dtype);
    }
    if (held > *most) *most = held;
  }
  if (l.moved.count) ir_replace_uses_map_deep(g, &l.moved);
  place_lifted(g, n0, &l);
  join_rows(g, &l);
  unread_xs(g, &l);
  ptrmap_free(&l.moved);
  ptrmap_free(&l.rows);
  ptrmap_free(&l.loops);
}

/* Whether a loop of g (nested too) of two iterations or more reduce-scatters asynchronously in its body:
 * a wait the next iteration can take. Not under pipeline stages (or interleaved chunks) of one layer each,
 * whose B (zb: W) instructions' loops run once. */
static bool has_deferrable(const Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *r = g->nodes[i];
    if (!r->body) continue;
    if (has_deferrable(r->body)) return true;
    if (!zero_defer_loop(r)) continue;
    for (int j = 0; j < r->body->nnodes; j++)
      if (r->body->nodes[j]->op == OP_REDUCE_SCATTER && ir_comm_async(r->body->nodes[j])) return true;
  }
  return false;
}

bool zero_defers_plan(const Module *m) {
  const Plan *p = &m->plan;
  return m->mesh && zero_defers_scatters(p->zero, zero_group(m->mesh).deg) &&
         zero_defer_taken(p->defer_waits, (double)p->fit.defer.total, p->fit.defer.cap, p->fit.defer.lost);
}

/* `defer_waits auto`'s why, from the driver's figures (Plan.fit.defer): the pass's, and the driver's again where it
 * reuses a compile with new figures (replan.c). */
const char *zero_defer_auto_why(Module *m) {
  return fit_auto_why(m, m->plan.fit.defer, "them", "they fit", "them");
}

bool pass_zero_defer(Module *m) {
  memset(&m->defer, 0, sizeof m->defer);
  const Plan *p = &m->plan;
  int want = p->defer_waits;
  bool may = m->mesh && zero_defers_scatters(p->zero, zero_group(m->mesh).deg);
  if (!may || !has_deferrable(m->graph)) {
    if (want != DEFER_AUTO) { /* written, and nothing to defer: refused, not ignored */
      const char *has = !m->mesh || p->zero < 2 ? "no ZeRO-2/3 (its gradients are not reduce-scattered in the loops)"
                        : !may ? "a ZeRO group of one rank (nothing to scatter)"
                        : m->mesh->dim[RT_AX_PP] > 1
                            ? "backward layer loops of one layer each (its pipeline stages' or chunks': no next iteration to wait in)"
                            : "no backward layer loop of two layers or more (no next iteration to wait in)";
      error_at(p->opt_loc[PLAN_OPT_DEFER_WAITS],
               "`defer_waits %s`: it defers the backward layer loops' ZeRO-2/3 gradient reduce-scatter waits to the next "
               "iteration; this plan has %s", ir_defer_waits_names[want], has);
      note("leave `defer_waits` out (auto) to let shardc choose");
      return false;
    }
    if (may) m->defer.why = "its backward layer loops run one layer each (no next iteration to wait in)";
    return true;
  }
  m->defer.taken = zero_defers_plan(m);
  if (want != DEFER_AUTO) m->defer.why = want == DEFER_ON ? "defer_waits on (the plan)" : "defer_waits off (the plan)";
  else m->defer.why = zero_defer_auto_why(m), m->defer.why_fit = true;
  if (m->defer.taken) defer_graph(m->graph, &m->defer.bytes);
  return true;
}
