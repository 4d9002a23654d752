/* passes/zero_sums.c — part of the `zero` pass (passes/zero.c): under ZeRO-2/3 with gradient
 * accumulation, the running sums of the layers' gradients are the dp shards.
 *
 * After `accum`, `peel`, `sums` and `buckets` (dp > 1), a stacked layer parameter's gradient runs
 * through two backward loops: the region's (`repeat accum` x k-1), which adds each micro-step's
 * layer gradient g_l to the running sum inside the loop (sum_l + g_l), and the peeled last
 * micro-step's, which yields (sum_l + g_l) / k and all-reduces it over dp inside the loop. The sum
 * is whole and unreduced (P(dp), 4 B x P_rank at the peak). Here, when ZeRO-2/3 reduce-scatters
 * that gradient:
 *
 *     region loop:   sum_l' = sum_l + reduce_scatter(g_l)            sum: S(dp), 1/dp
 *     peeled loop:   gs_l   = (sum_l + reduce_scatter(g_l)) / k      (no all-reduce after it)
 *
 * so each micro-step reduce-scatters its layer's gradient over dp inside the backward loop, right
 * after it is computed, and only the shard is summed: the sums (zeros, region carry, loops' stacked
 * inputs and outputs: one buffer, passes/memplan.c) are 1/dp, and at most a bucket of layer
 * gradients is unreduced at once. Traffic: one reduce-scatter of the layers' gradients per
 * micro-step, k x P (dp-1)/dp per optimizer step instead of once (as DeepSpeed's ZeRO-2 and
 * Megatron's distributed optimizer do under accumulation). The arithmetic is the sum over ranks of
 * the sum over micro-steps, taken in the other order. Under cp every "dp" here is the dp x cp
 * group (zero.h's ZeroGroup): the scatters are over it and the sums its shards.
 *
 * Under pp (no region: the schedule sums the micro-batches at the top level) the same holds for
 * the chain of adds from zeros: see scatter_chain below; each stage's own chain when the stages
 * merge their layer gradients on their own (a stage_select of the chains, scattered together);
 * and for a chain of backward loops each adding to the sum so far (scatter_folded: the stages'
 * merges folded into their loops, passes/pipe_fold.c).
 *
 * The scatters of one loop body go right after their gradient (a bf16 gradient's f32 cast moves
 * there with them) and are grouped in runs of up to the plan's bucket bytes, each run placed where
 * its last gradient is ready, so that zero.c's bucket_scatters packs a run into one collective that
 * overlaps the rest of the layer's backward.
 */
#include <string.h>

#include "diag.h"
#include "passes.h"
#include "ptrmap.h"
#include "zero.h"

static int pos_in(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  return -1;
}

static bool yielded_once(const Graph *b, const Value *v) {
  int k = 0;
  for (int i = 0; i < b->nresults; i++) k += b->results[i] == v;
  return k == 1 && ir_count_uses(b, v) == 0;
}

/* add (in R's body) reads one of R's stacked arguments, read by it only: that argument's index
 * (the other operand, the gradient, at *slot ^ 1), else -1. */
static int sum_arg_counted(const Node *R, const Node *add, int *slot, const int *deep);

static int sum_arg(const Node *R, const Node *add, int *slot) { return sum_arg_counted(R, add, slot, NULL); }

/* (deep: ir_count_uses_deep of R's body for add->in[0], add->in[1], found already; NULL: counted here) */
static int sum_arg_counted(const Node *R, const Node *add, int *slot, const int *deep) {
  const Graph *b = R->body;
  if (add->op != OP_ADD || add->graph != b || add->in[0] == add->in[1]) return -1;
  for (int s = 0; s < 2; s++) {
    const Value *a = add->in[s];
    if (a->def->op != OP_ARG || a->def->graph != b) continue;
    int j = a->def->a.index;
    if (j < R->a.ncarry || j >= R->a.ncarry + R->a.nxs || b->args[j] != a->def) continue;
    if ((deep ? deep[s] : ir_count_uses_deep(b, a)) != 1) continue;
    *slot = s;
    return j;
  }
  return -1;
}

/* v's type split along d over the group, no longer partial over it. */
static void retype(Value *v, int d, ZeroGroup z) {
  Value old = *v;
  zero_split_type(v, &old, d, z);
  v->sharding.partial &= (uint8_t) ~((1u << z.axis) | z.with);
}

/* rs = reduce_scatter(y) over the group along d, appended to b, typed as y's shard. */
static Node *scatter_new(Graph *b, Value *y, int d, ZeroGroup z, SrcLoc loc) {
  Node *rs = ir_node_new(b, OP_REDUCE_SCATTER, 1, &y, 1, loc);
  rs->a.mesh_axis = z.axis;
  rs->a.mesh_with = z.with;
  rs->a.axis = d;
  rs->out[0]->dtype = y->dtype;
  rs->out[0]->shape = y->shape;
  rs->out[0]->sharding = y->sharding;
  rs->out[0]->name = y->name;
  retype(rs->out[0], d, z);
  return rs;
}

/* Records that node x of b goes right after node anchor (place_after moves it there): after maps a
 * node to the first of the nodes recorded after it, each to the next (x's key: x + 1 byte). */
static void defer_after(Graph *b, PtrMap *after, Node *x, Node *anchor) {
  (void)b;
  intptr_t head = 0;
  ptrmap_get(after, anchor, &head);
  ptrmap_put(after, (char *)x + 1, head);
  ptrmap_put(after, anchor, (intptr_t)x);
}

/* The nodes recorded by defer_after moved, in one pass over b: each right after its anchor (and
 * what was recorded after it, after it in turn). */
static void place_after(Graph *b, PtrMap *after) {
  PtrMap moved = {0};
  for (int i = 0; i < b->nnodes; i++) {
    intptr_t x;
    if (!ptrmap_get(after, b->nodes[i], &x)) continue;
    for (; x; ptrmap_get(after, (char *)x + 1, &x)) ptrmap_put(&moved, (void *)x, 1);
  }
  Node **out = ARENA_ARRAY(b->arena, Node *, b->nnodes + 1);
  Node **stack = ARENA_ARRAY(b->arena, Node *, b->nnodes + 1);
  int w = 0;
  for (int i = 0; i < b->nnodes; i++) {
    intptr_t one;
    if (ptrmap_get(&moved, b->nodes[i], &one)) continue;
    int sp = 0;
    stack[sp++] = b->nodes[i];
    while (sp) { /* the node, then what was recorded after it (depth first) */
      Node *n = stack[--sp];
      out[w++] = n;
      intptr_t x = 0;
      ptrmap_get(after, n, &x);
      for (; x; ptrmap_get(after, (char *)x + 1, &x)) stack[sp++] = (Node *)x;
    }
  }
  if (w != b->nnodes) die("zero: %d of %d nodes placed", w, b->nnodes);
  memcpy(b->nodes, out, sizeof(Node *) * (size_t)w);
  ptrmap_free(&moved);
}

/* add's gradient operand (in body b) is reduce-scattered over the group along dl first, right after
 * it is computed; add reads the shard. uses: the nodes of b (not their bodies) reading the operand,
 * or -1 (counted here). */
static void scatter_operand_at(Graph *b, Node *add, int slot, int dl, ZeroGroup z, int uses, PtrMap *after) {
  Value *gl = add->in[slot];
  if (gl->def->op == OP_CAST && gl->def->graph == b && uses < 0) uses = ir_count_uses(b, gl);
  Node *cast = gl->def->op == OP_CAST && gl->def->graph == b && uses == 1 ? gl->def : NULL;
  if (after && gl->def->graph == b && gl->def->op != OP_ARG) { /* placed later, all at once (place_after) */
    if (cast && cast->in[0]->def->graph == b && cast->in[0]->def->op != OP_ARG) defer_after(b, after, cast, cast->in[0]->def);
    Node *rs = scatter_new(b, gl, dl, z, add->loc);
    rs->stage = add->stage;
    defer_after(b, after, rs, gl->def);
    add->in[slot] = rs->out[0];
    return;
  }
  if (cast && cast->in[0]->def->graph == b) { /* bf16: the f32 copy made where the gradient is */
    int from = pos_in(b, cast), to = pos_in(b, cast->in[0]->def) + 1;
    if (from > to) {
      memmove(&b->nodes[to + 1], &b->nodes[to], sizeof(Node *) * (size_t)(from - to));
      b->nodes[to] = cast;
    }
  }
  Node *rs = scatter_new(b, gl, dl, z, add->loc);
  rs->stage = add->stage; /* a stage's sum (pipe.c's run_stage_merges): its dp group's scatter, on that stage */
  int at = gl->def->graph == b && gl->def->op != OP_ARG ? pos_in(b, gl->def) + 1 : 0;
  while (gl->def->op == OP_ARG && at < b->nnodes - 1 && b->nodes[at]->op == OP_ARG) at++;
  ir_move_last(b, at);
  add->in[slot] = rs->out[0];
}

static void scatter_operand(Graph *b, Node *add, int slot, int dl, ZeroGroup z, int uses) {
  scatter_operand_at(b, add, slot, dl, z, uses, NULL);
}

/* The region's side of a running sum: carry c of `repeat accum` (acc, in g), whose output v the
 * last micro-step reads once, from zeros z; its body adds the micro-step's gradient to the carry's
 * argument either inside the backward loop R1 (a layer's: R1 yields sum_l + g_l, R1 != NULL) or in
 * the body itself (the embedding's, the head's, the final norm's). */
typedef struct {
  Node *acc, *R1, *add; /* add: sum + g, in R1's body or in the region's */
  int c, slot, j1;      /* slot: add's sum operand; j1: R1's argument for the sum */
} RegionSum;

static bool region_sum(Graph *g, Value *v, const Shape *shape, bool looped, RegionSum *o) {
  Node *acc = v->def;
  if (acc->op != OP_REPEAT || acc->graph != g || !acc->a.name || strcmp(acc->a.name, "accum") != 0) return false;
  int c = v->idx;
  if (c >= acc->a.ncarry || ir_count_uses_deep(g, v) != 1 || !ir_shape_eq(&v->shape, shape)) return false;
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == v) return false;
  Value *z = acc->in[c];
  if (z->def->op != OP_CONST || ir_count_uses_deep(g, z) != 1) return false;
  Graph *br = acc->body;
  Value *carg = br->args[c]->out[0], *w = br->results[c];
  if (w->def->graph != br || !yielded_once(br, w) || ir_count_uses_deep(br, carg) != 1) return false;
  *o = (RegionSum){acc, NULL, w->def, c, 0, -1};
  if (!looped) { /* w = carg + g in the region's body */
    Node *add = w->def;
    if (add->op != OP_ADD || add->in[0] == add->in[1]) return false;
    o->slot = add->in[0] == carg ? 0 : add->in[1] == carg ? 1 : -1;
    return o->slot >= 0;
  }
  Node *R1 = w->def;
  if (R1->op != OP_REPEAT || w->idx < R1->a.ncarry) return false;
  Graph *b1 = R1->body;
  Value *s1 = b1->results[w->idx];
  int j1 = sum_arg(R1, s1->def, &o->slot);
  if (j1 < 0 || R1->in[j1] != carg || !yielded_once(b1, s1)) return false;
  o->R1 = R1, o->add = s1->def, o->j1 = j1;
  return true;
}

/* The region's sums become shards along d of the whole value (dl: along the loop body's layer). */
static void shard_region_sum(const RegionSum *o, int d, ZeroGroup z) {
  Graph *br = o->acc->body;
  int dl = o->R1 ? d - 1 : d;
  Graph *b = o->R1 ? o->R1->body : br;
  scatter_operand(b, o->add, o->slot ^ 1, dl, z, -1);
  retype(o->add->out[0], dl, z);
  if (o->R1) {
    retype(o->R1->body->args[o->j1]->out[0], dl, z);
    retype(br->results[o->c], d, z); /* R1's stacked output */
  }
  retype(br->args[o->c]->out[0], d, z);
  retype(o->acc->in[o->c], d, z);
  retype(o->acc->out[o->c], d, z);
  ir_touch(br); /* (its carry's types: under a layer loop, no node of br's own is new) */
  ir_touch(o->acc->graph);
}

/* y = all_reduce(x) over the group, yielded by or read in gg, x = scale(s2) (the mean) or s2,
 * s2 = sum + g with sum read once: the mean (or s2) read only by the all-reduce. */
static bool mean_of_sum(const Graph *gg, const Value *y, ZeroGroup z, Node **mean, Node **add) {
  Node *ar = y->def;
  if (ar->graph != gg || !zero_is_group_sum(ar, z)) return false;
  Value *x = ar->in[y->idx];
  if (x->def->graph != gg) return false;
  const Value *vs[2] = {x, x->def->op == OP_SCALE ? x->def->in[0] : NULL}; /* (s2 below: one walk of gg for both) */
  int uses[2];
  const Node *const *r;
  if (zero_readers(gg, vs[0], &r) >= 0) /* (the top graph under ZeRO-3: its readers index) */
    uses[0] = zero_count_uses(gg, vs[0]), uses[1] = vs[1] ? zero_count_uses(gg, vs[1]) : 0;
  else
    ir_count_uses_n(gg, 2, vs, uses, NULL);
  if (uses[0] != 1 || !ir_shape_eq(&x->shape, &y->shape)) return false;
  for (int i = 0; i < gg->nresults; i++)
    if (gg->results[i] == x) return false;
  *mean = x->def->op == OP_SCALE ? x->def : NULL;
  Value *s2 = *mean ? (*mean)->in[0] : x;
  if (s2->def->graph != gg || (s2->def->op != OP_ADD && s2->def->op != OP_STAGE_SELECT) ||
      (*mean && uses[1] != 1))
    return false;
  *add = s2->def;
  return true;
}

Value *zero_scatter_sums(Graph *g, Node *R2, Value *gr, int d, ZeroGroup z) {
  Graph *b2 = R2->body;
  if (d < 1 || gr->idx < R2->a.ncarry) return NULL;
  /* the peeled loop: y = all_reduce_dp((sum_l + g_l) / k) */
  Value *y = b2->results[gr->idx];
  Node *mean, *add;
  int slot2;
  if (!yielded_once(b2, y) || !mean_of_sum(b2, y, z, &mean, &add)) return NULL;
  int j2 = sum_arg(R2, add, &slot2);
  if (j2 < 0) return NULL;
  RegionSum o;
  if (!region_sum(g, R2->in[j2], &gr->shape, true, &o)) return NULL;

  int dl = d - 1;
  shard_region_sum(&o, d, z);
  Node *ar = y->def;
  Value *x = ar->in[y->idx];
  scatter_operand(b2, add, slot2 ^ 1, dl, z, -1);
  retype(b2->args[j2]->out[0], dl, z);
  retype(add->out[0], dl, z);
  if (mean) retype(x, dl, z);
  x->name = y->name;
  b2->results[gr->idx] = x;
  zero_drop_member(b2, ar, y->idx);
  retype(gr, d, z);
  return gr;
}

/* ---- the pipeline schedule's sums (pp > 1) ----
 * The pipe pass unrolls the micro-batches and sums each gradient at the top level:
 * sum_1 = zeros + t_1, sum_i = sum_{i-1} + t_i, t_i = stage_select(the stages' backward loops'
 * stacked outputs) for a layer's gradient, else the micro-batch's gradient. Each t_i is
 * reduce-scattered instead (a loop's output inside the loop, right after the layer's gradient)
 * and the chain sums shards. */

static bool read_once(const PtrMap *uses, const Value *v) {
  intptr_t c = 0;
  ptrmap_get(uses, v, &c);
  return c == 1;
}

/* v is the running sum of a chain: zeros (a constant 0 read once) or an add of g read once with
 * one operand a chain (*prev: its slot). */
static bool is_chain(const Graph *g, const PtrMap *uses, const Value *v, const Shape *shape) {
  const Node *n = v->def;
  if (n->graph != g || !read_once(uses, v) || !ir_shape_eq(&v->shape, shape)) return false;
  if (n->op == OP_CONST) return n->a.scalar == 0;
  if (n->op != OP_ADD || n->in[0] == n->in[1]) return false;
  return is_chain(g, uses, n->in[0], shape) || is_chain(g, uses, n->in[1], shape);
}

/* A stacked output of a repeat in g, read once, whose body computes it and reads it not: the
 * reduce-scatter can move into the body. */
static bool hoistable(const Graph *g, const PtrMap *uses, const Value *a) {
  const Node *R = a->def;
  if (R->op != OP_REPEAT || R->graph != g || a->idx < R->a.ncarry || !read_once(uses, a)) return false;
  const Graph *b = R->body;
  const Value *y = b->results[a->idx];
  return y->def->graph == b && y->def->op != OP_ARG && yielded_once(b, y);
}

/* (memo: the pass's; the scatter reads b's own value, so b's reads of the values around it stay) */
static void hoist_scatter(Value *a, int d, ZeroGroup z, IrUseMemo *memo) {
  Graph *b = a->def->body;
  uint64_t v0 = b->version;
  Value *y = b->results[a->idx];
  Node *rs = scatter_new(b, y, d - 1, z, y->def->loc);
  ir_move_last(b, pos_in(b, y->def) + 1);
  b->results[a->idx] = rs->out[0];
  ir_use_memo_keep(memo, b, v0);
  retype(a, d, z);
}

/* t (a micro-batch's stacked layer gradient, read once) is made of backward loops' stacked
 * outputs: one per stage (stage_select), and the chunks of the layers concatenated along the
 * layer dim (interleaved schedules): each loop can reduce-scatter its own. */
static bool layer_parts(const Graph *g, const PtrMap *uses, const Value *t, int d) {
  const Node *n = t->def;
  if (n->graph != g || !read_once(uses, t) || d < 1) return false;
  if (n->op == OP_REPEAT) return hoistable(g, uses, t); /* a stage's own sum: its loop's output */
  if (n->op == OP_STAGE_SELECT) {
    for (int j = 0; j < n->nin; j++)
      if (!hoistable(g, uses, n->in[j])) return false;
    return true;
  }
  if (n->op != OP_CONCAT || n->a.axis != 0) return false;
  for (int j = 0; j < n->nin; j++)
    if (!layer_parts(g, uses, n->in[j], d)) return false;
  return true;
}

static void scatter_parts(Value *t, int d, ZeroGroup z, IrUseMemo *memo) {
  Node *n = t->def;
  if (n->op == OP_REPEAT) {
    hoist_scatter(t, d, z, memo);
    return;
  }
  for (int j = 0; j < n->nin; j++) {
    if (n->op == OP_STAGE_SELECT) hoist_scatter(n->in[j], d, z, memo);
    else scatter_parts(n->in[j], d, z, memo);
  }
  retype(t, d, z);
}

/* The chains ending in ends[0..nends) (one, or each stage's: pipe.c's run_stage_merges, under a
 * stage_select), all found before anything changes (else false, nothing changed), then scattered. */
static bool scatter_chain(Graph *g, Node *const *ends, int nends, int d, ZeroGroup z, IrUseMemo *memo) {
  Shape whole = ends[0]->out[0]->shape; /* (the chain's values are retyped on the way) */
  PtrMap uses = {0}; /* (only g's values are asked about: their counts, each shared body walked once) */
  ir_use_counts_outer(g, &uses, false, memo);
  /* the chains, each last add first, found before anything changes: prev[k] is add k's sum operand;
   * first[e]: chain e's first entry */
  int n = 0, cap = 16;
  Node **adds = ARENA_ARRAY(g->arena, Node *, cap);
  int *prev = ARENA_ARRAY(g->arena, int, cap);
  bool *parts = ARENA_ARRAY(g->arena, bool, cap);
  int *first = ARENA_ARRAY(g->arena, int, nends + 1);
  for (int e = 0; e < nends; e++) {
    first[e] = n;
    if (ends[e]->op != OP_ADD || !ir_shape_eq(&ends[e]->out[0]->shape, &whole)) {
      ptrmap_free(&uses);
      return false;
    }
    for (Node *add = ends[e];;) {
      int p = is_chain(g, &uses, add->in[0], &whole) ? 0 : is_chain(g, &uses, add->in[1], &whole) ? 1 : -1;
      if (p < 0) {
        ptrmap_free(&uses);
        return false;
      }
      if (n == cap) {
        int c2 = cap;
        arena_grow(g->arena, (void **)&adds, &c2, cap + 1, sizeof(Node *));
        c2 = cap;
        arena_grow(g->arena, (void **)&prev, &c2, cap + 1, sizeof(int));
        arena_grow(g->arena, (void **)&parts, &cap, cap + 1, sizeof(bool));
      }
      adds[n] = add, prev[n] = p, parts[n] = layer_parts(g, &uses, add->in[p ^ 1], d);
      n++;
      if (add->in[p]->def->op == OP_CONST) break;
      add = add->in[p]->def;
    }
  }
  first[nends] = n;
  ptrmap_free(&uses);
  /* the gradients' readers in g itself, counted once (a chain of M adds under pp: not M walks of
   * the unrolled schedule); scattering one gradient leaves the others' counts as they were */
  int *greaders = ARENA_ARRAY(g->arena, int, n + 1);
  PtrMap count = {0}; /* gradient -> 1 + its readers */
  for (int k = 0; k < n; k++) ptrmap_put(&count, adds[k]->in[prev[k] ^ 1], 1);
  for (int i = 0; i < g->nnodes; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++) {
      intptr_t c;
      if (ptrmap_get(&count, g->nodes[i]->in[j], &c)) ptrmap_put(&count, g->nodes[i]->in[j], c + 1);
    }
  for (int k = 0; k < n; k++) {
    intptr_t c = 1;
    ptrmap_get(&count, adds[k]->in[prev[k] ^ 1], &c);
    greaders[k] = (int)c - 1;
  }
  ptrmap_free(&count);
  PtrMap after = {0}; /* the scatters (and bf16 casts) placed in one pass at the end, not one move each */
  for (int k = 0; k < n; k++) {
    Node *add = adds[k];
    if (parts[k]) scatter_parts(add->in[prev[k] ^ 1], d, z, memo); /* each stage's loop yields the shards */
    else scatter_operand_at(g, add, prev[k] ^ 1, d, z, greaders[k], &after);
    retype(add->out[0], d, z);
  }
  place_after(g, &after);
  ptrmap_free(&after);
  for (int e = 0; e < nends; e++) retype(adds[first[e + 1] - 1]->in[prev[first[e + 1] - 1]], d, z); /* the zeros */
  return true;
}

/* ---- the sums folded into the pipeline's backward loops (passes/pipe_fold.c) ----
 * Each stage's running sum of a layer gradient made by its loops: R_i reads the sum so far (R_{i-1}'s
 * stacked output, read once) as its stacked argument "sum" and yields sum_l + g_l; R_1 yields g_l.
 * Interleaved, each chunk its own chain (concatenated along the layers); uneven stages, each its own
 * rows (padded); both, each chunk padded to the stage's largest, then concatenated. As the region's loop does (region_sum's R1), each loop reduce-scatters g_l in its
 * body, and the chain sums the shards. */

/* v ends such a chain: its loops' outputs, last first, appended to *out (*n of cap). */
/* Each value the walk below asks "read once?" about: with asked set (the first walk), recorded and
 * taken as yes; else answered from uses (the counts of just those values, scatter_folded's). */
typedef struct {
  PtrMap *uses, *asked;
  PtrMap *facts; /* loop_facts' answers, kept through scatter_folded's walks (nothing changes in them) */
} FoldUses;

/* What folded_chain asks of loop v->def's body (each a walk of it): whether it yields y =
 * b->results[v->idx] once and reads it not (yielded_once), and y's node's sum argument j and slot
 * (sum_arg; -1: none; asked only where yielded). facts: the answers found before (v -> 1 + yielded +
 * 2 slot + 4 (j + 1)), to be asked only while v's body is as it was then; NULL: found afresh. */
typedef struct {
  bool yielded;
  int j, slot;
} LoopFacts;

static LoopFacts loop_facts(PtrMap *facts, const Value *v) {
  intptr_t e;
  if (facts && ptrmap_get(facts, v, &e)) return (LoopFacts){(e - 1) & 1, (int)((e - 1) >> 2) - 1, (int)((e - 1) >> 1) & 1};
  const Node *R = v->def;
  const Graph *b = R->body;
  const Value *y = b->results[v->idx];
  LoopFacts f = {false, -1, 0};
  if (y->def->graph == b && y->def->op != OP_ARG) { /* yielded_once and sum_arg's counts in one walk of b */
    const Node *add = y->def;
    int k = 0;
    for (int i = 0; i < b->nresults; i++) k += b->results[i] == y;
    const Value *vs[3] = {y, add->nin == 2 ? add->in[0] : NULL, add->nin == 2 ? add->in[1] : NULL};
    int uses[3], deep[3];
    ir_count_uses_n(b, 3, vs, uses, deep);
    f.yielded = k == 1 && uses[0] == 0;
    if (f.yielded) f.j = sum_arg_counted(R, add, &f.slot, add->nin == 2 ? deep + 1 : NULL);
  }
  if (facts) ptrmap_put(facts, v, 1 + f.yielded + 2 * f.slot + 4 * (f.j + 1));
  return f;
}

static bool folded_once(const FoldUses *u, const Value *v) {
  if (u->asked) {
    ptrmap_put(u->asked, v, 0);
    return true;
  }
  return read_once(u->uses, v);
}

static bool folded_chain(const FoldUses *uses, Value *v, Value **out, int *n, int cap) {
  for (Shape sh = v->shape;;) {
    Node *R = v->def;
    if (!folded_once(uses, v) || !ir_shape_eq(&v->shape, &sh) || *n == cap) return false;
    if (R->op != OP_REPEAT || v->idx < R->a.ncarry) return false;
    const Graph *b = R->body;
    LoopFacts f = loop_facts(uses->facts, v);
    if (!f.yielded) return false;
    out[(*n)++] = v;
    int j = f.j;
    const char *nm = j >= 0 ? b->args[j]->out[0]->name : NULL;
    if (!nm || strcmp(nm, "sum") != 0) return true; /* the first: g_l itself */
    v = R->in[j];
  }
}

/* v (a stage's sum) is its folded chains under pads and concats along the layers (an uneven stage's
 * rows padded; interleaved, its chunks concatenated, each chunk padded to the stage's largest):
 * the chains' loops appended to chain (*n of cap), the pads and concats to wrap (*nw of cap), each
 * wrapper after what it wraps. */
static bool folded_parts(const FoldUses *uses, Value *v, Value **chain, int *n, Value **wrap, int *nw, int cap) {
  Node *c = v->def;
  bool pad = c->op == OP_PAD && c->a.axis == 0 && folded_once(uses, v);
  bool cat = c->op == OP_CONCAT && c->a.axis == 0 && folded_once(uses, v);
  if (!pad && !cat) return folded_chain(uses, v, chain, n, cap);
  if (*nw == cap) return false;
  for (int k = 0; k < (cat ? c->nin : 1); k++)
    if (!folded_parts(uses, c->in[k], chain, n, wrap, nw, cap)) return false;
  wrap[(*nw)++] = v;
  return true;
}

/* sel (stage_select) of each stage's folded chains, under pads and concats along the layers:
 * all found before anything changes (else false, nothing changed), then each loop scatters. */
static bool scatter_folded(Graph *g, Node *sel, int d, ZeroGroup z, IrUseMemo *memo) {
  if (d < 1) return false;
  int cap = g->nnodes, n = 0, nw = 0; /* (the loops, the pads and concats: fewer than g's nodes) */
  Value **chain = ARENA_ARRAY(g->arena, Value *, cap + 1);
  Value **wrap = ARENA_ARRAY(g->arena, Value *, cap + 1);
  /* Twice: first every "read once?" taken as yes, the values asked recorded (the second walk asks
   * about the same values up to its first no, so a first walk's failure is the second's); then their
   * readers counted (g's own nodes, the bodies' reads from the pass's memo: ir_use_counts_outer), and
   * the walk again, each loop's facts (loop_facts) as the first walk found them. */
  PtrMap counts = {0}, facts = {0}, changed = {0}; /* changed: the loop bodies scattered in below */
  FoldUses first = {NULL, &counts, &facts}, real = {&counts, NULL, &facts};
  bool ok = true;
  for (int s = 0; s < sel->nin && ok; s++) ok = folded_parts(&first, sel->in[s], chain, &n, wrap, &nw, cap);
  if (ok) {
    ir_use_counts_outer(g, &counts, true, memo); /* (the bodies unchanged since the last call: not walked) */
    n = nw = 0;
    for (int s = 0; s < sel->nin && ok; s++) ok = folded_parts(&real, sel->in[s], chain, &n, wrap, &nw, cap);
  }
  ptrmap_free(&counts);
  if (!ok) {
    ptrmap_free(&facts);
    return false;
  }
  for (int k = 0; k < n; k++) {
    Value *v = chain[k];
    Graph *b = v->def->body;
    Value *y = b->results[v->idx];
    intptr_t one;
    int slot, j;
    if (!ptrmap_get(&changed, b, &one)) { /* the walks' answer while b is unchanged (v: a loop of the chain, yielded) */
      LoopFacts f = loop_facts(&facts, v);
      slot = f.slot, j = f.j;
    } else {
      j = sum_arg(v->def, y->def, &slot);
    }
    ptrmap_put(&changed, b, 1);
    if (j < 0 || strcmp(b->args[j]->out[0]->name, "sum") != 0) {
      hoist_scatter(v, d, z, memo); /* the first: the loop yields g_l's shard */
      continue;
    }
    uint64_t v0 = b->version; /* (the scatter reads what the add read, the add the scatter: b's reads around it stay) */
    scatter_operand(b, y->def, slot ^ 1, d - 1, z, -1);
    ir_use_memo_keep(memo, b, v0);
    retype(b->args[j]->out[0], d - 1, z);
    retype(y, d - 1, z);
    retype(v, d, z);
  }
  for (int k = 0; k < nw; k++) retype(wrap[k], d, z);
  ptrmap_free(&facts);
  ptrmap_free(&changed);
  return true;
}

Value *zero_scatter_sums_top(Graph *g, Value *gr, int d, ZeroGroup z, IrUseMemo *memo) {
  Node *mean, *add;
  int slot = -1;
  if (!mean_of_sum(g, gr, z, &mean, &add)) return NULL;
  RegionSum o;
  for (int s = 0; s < 2 && slot < 0 && add->op == OP_ADD; s++)
    if (add->in[s] != add->in[s ^ 1] && region_sum(g, add->in[s], &gr->shape, false, &o)) slot = s;
  Node *ar = gr->def;
  Value *x = ar->in[gr->idx];
  if (add->op == OP_STAGE_SELECT) { /* each stage's own chain (pipe.c's run_stage_merges) */
    Node **ends = ARENA_ARRAY(g->arena, Node *, add->nin + 1);
    for (int j = 0; j < add->nin; j++) ends[j] = add->in[j]->def;
    if (!ir_shape_eq(&add->out[0]->shape, &gr->shape) ||
        (!scatter_folded(g, add, d, z, memo) && !scatter_chain(g, ends, add->nin, d, z, memo)))
      return NULL;
    retype(add->out[0], d, z);
  } else if (slot >= 0) { /* the region's sum, then the last micro-step's */
    shard_region_sum(&o, d, z);
    scatter_operand(g, add, slot ^ 1, d, z, -1);
    retype(add->out[0], d, z);
  } else if (!ir_shape_eq(&add->out[0]->shape, &gr->shape) || !scatter_chain(g, &add, 1, d, z, memo)) {
    return NULL;
  }
  if (mean) retype(x, d, z);
  x->name = gr->name;
  zero_replace_uses(g, gr, x);
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == gr) g->results[i] = x;
  zero_drop_member(g, ar, gr->idx);
  return x;
}

/* The dp reduce-scatters of body b that read a value of b (zero_scatter_sums's), each right after
 * its gradient: runs of up to cap bytes, each moved to where its last member is, so that
 * bucket_scatters packs a run into one collective. */
void zero_group_scatters(Graph *b, int64_t cap, ZeroGroup z) {
  Node **run = ARENA_ARRAY(b->arena, Node *, b->nnodes + 1);
  Node **keep = ARENA_ARRAY(b->arena, Node *, b->nnodes + 1); /* (one for every run: b keeps its count) */
  int n = 0;
  int64_t bytes = 0;
  for (int i = 0; i <= b->nnodes; i++) {
    Node *x = i < b->nnodes ? b->nodes[i] : NULL;
    bool member = x && x->op == OP_REDUCE_SCATTER && x->a.mesh_axis == z.axis && x->a.axis == 0 &&
                  x->in[0]->def->graph == b;
    int64_t sz = member ? ir_numel(&x->in[0]->shape) * ir_dtype_size(x->in[0]->dtype) : 0;
    bool dtype_ok = !member || n == 0 || run[0]->in[0]->dtype == x->in[0]->dtype;
    if (n > 0 && (!x || (member && (!zero_run_takes(n, bytes, sz, cap) || !dtype_ok)))) {
      /* close the run: its members move to the last one's place (each after its input) */
      int last = pos_in(b, run[n - 1]), w = 0;
      for (int q = 0; q < b->nnodes; q++) {
        bool in_run = false;
        for (int k = 0; k < n - 1; k++) in_run |= b->nodes[q] == run[k];
        if (in_run) continue;
        if (q == last)
          for (int k = 0; k < n - 1; k++) keep[w++] = run[k];
        keep[w++] = b->nodes[q];
      }
      memcpy(b->nodes, keep, sizeof(Node *) * (size_t)w);
      n = 0;
      bytes = 0;
      if (x) i = pos_in(b, x);
    }
    if (member) {
      run[n++] = x;
      bytes += sz;
    }
  }
  ir_topo_sort(b); /* (a member read before the run's last: its reader moves behind the run) */
}
