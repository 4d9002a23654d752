/* tests/passes/test_memplan.c — the memory plan: no two values that are live at the same
 * time share bytes, except where the plan means them to (views, in-place updates, an
 * all-reduce taking its dead input's place); and those in-place cases happen exactly
 * where they are allowed.
 *
 * The graph (top level, no bodies):
 *   a = tanh(x) ; y = all_reduce(a)           a dies at the all-reduce: y takes a's place
 *   c = tanh(y) ; d = all_reduce(c) ; e = c + d   c is read after: d gets its own bytes; e takes c's
 *   f = tanh(e) ; g1, g2 = all_reduce(f, f)   the same input twice: at most one takes it
 *   loss = sum(g1 + g2 + w)
 */
#include <stdio.h>
#include <string.h>

#include "memplan.h"
#include "passes.h"
#include "tb.h"

static int failures; /* CHECK (tests/check.h, through tb.h) counts here */


/* u's bytes may be v's while both live only when v is an all-reduce output (or an update's
 * result, a scale's, an add's into its first operand, a repeat's carry) whose input u (or the
 * reverse) dies at that node. */
static bool planned_alias(const Graph *g, const Value *u, const Value *v) {
  for (int pass = 0; pass < 2; pass++) {
    const Value *x = pass ? v : u, *y = pass ? u : v;
    const Node *n = y->def;
    if (n->op == OP_ALL_REDUCE && x == n->in[y->idx] && tb_last_use(g, x) == tb_pos_of(g, n)) return true;
    if (n->op == OP_SCALE && x == n->in[0] && tb_last_use(g, x) == tb_pos_of(g, n)) return true;
    if (n->op == OP_ADD && x == n->in[0] && ir_shape_eq(&x->shape, &y->shape) && tb_last_use(g, x) == tb_pos_of(g, n))
      return true;
    if (n->op == OP_REPEAT && y->idx < n->a.ncarry && x == n->in[y->idx] && tb_last_use(g, x) == tb_pos_of(g, n))
      return true;
    bool upd = n->op == OP_SGD_UPDATE || n->op == OP_ADAMW_UPDATE;
    if (upd && x == n->in[y->idx ? y->idx + 1 : 0] && tb_last_use(g, x) == tb_pos_of(g, n)) return true;
  }
  return false;
}

static void check_no_overlap(const Graph *g) {
  int checked = 0;
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i]->nout; k++) {
      const Value *u = g->nodes[i]->out[k];
      if (u->offset < 0) continue;
      for (int j = i; j < g->nnodes; j++)
        for (int l = 0; l < g->nodes[j]->nout; l++) {
          const Value *v = g->nodes[j]->out[l];
          if (v == u || v->offset < 0 || (j == i && l <= k)) continue;
          bool live = tb_pos_of(g, v->def) <= tb_last_use(g, u) && tb_pos_of(g, u->def) <= tb_last_use(g, v);
          bool shared = u->offset < v->offset + tb_bytes_of(v) && v->offset < u->offset + tb_bytes_of(u);
          checked++;
          CHECK(!(live && shared) || planned_alias(g, u, v),
                 "values %%%d [%lld, +%lld) and %%%d [%lld, +%lld) are live together and share bytes", u->id,
                 (long long)u->offset, (long long)tb_bytes_of(u), v->id, (long long)v->offset, (long long)tb_bytes_of(v));
        }
    }
  CHECK(checked > 10, "only %d pairs checked", checked);
}

/* ZeRO-1's update: p' = all_gather over dp of sgd_update(shard_slice(p), ..) is the result next:p.
 * The gather writes p's own storage when nothing reads p from the gather on (w), not when
 * something still does (u: read after its gather). */
static void zero_gather_case(Arena *a) {
  Module *m = tb_module(a, "memplan_zero");
  Graph *g = m->graph;
  Shape full = tb_shape(2, 4, 8), half = tb_shape(2, 2, 8);
  Value *x = tb_input(g, "x", DT_F32, full);
  Value *hyper = tb_input(g, "hyper", DT_F32, tb_shape(1, 2));
  Value *w = tb_param(g, "w", DT_F32, full, INIT_ZEROS, 0, 0);
  Value *u = tb_param(g, "u", DT_F32, full, INIT_ZEROS, 0, 0);
  Value *loss = tb_op1(g, OP_SUM, tb_op2(g, OP_MUL, tb_op2(g, OP_MUL, x, w, NULL), u, NULL), NULL);
  ir_add_result(g, loss, "loss");
  Attrs sl = {0};
  sl.mesh_axis = RT_AX_DP;
  sl.axis = 0;
  Value *params[2] = {w, u}, *next[2], *shard[2], *updated[2];
  for (int k = 0; k < 2; k++) {
    Value *ps = tb_shaped(g, OP_SHARD_SLICE, 1, &params[k], DT_F32, half, &sl);
    Value *gs = tb_shaped(g, OP_SHARD_SLICE, 1, &x, DT_F32, half, &sl);
    Value *ms = tb_op1(g, OP_TANH, gs, NULL);
    Value *in[4] = {ps, gs, ms, hyper};
    Node *up = tb_node(g, OP_SGD_UPDATE, 4, in, 2, NULL);
    shard[k] = ps;
    updated[k] = up->out[0];
    next[k] = tb_shaped(g, OP_ALL_GATHER, 1, &up->out[0], DT_F32, full, &sl);
    ir_add_result(g, next[k], k ? "next:u" : "next:w");
  }
  Value *late = tb_op1(g, OP_SUM, u, NULL); /* u read after its gather */
  ir_add_result(g, late, "late");
  if (!pass_memplan(m)) {
    fprintf(stderr, "pass_memplan failed\n");
    failures++;
    return;
  }
  CHECK(next[0]->offset == w->offset, "next:w gathered into w: at %lld, w at %lld", (long long)next[0]->offset,
         (long long)w->offset);
  CHECK(next[1]->offset != u->offset, "next:u: u is read after the gather, yet both at %lld",
         (long long)u->offset);
  for (int k = 0; k < 2; k++)
    CHECK(updated[k]->offset == shard[k]->offset, "the shard's update in place: at %lld, the shard at %lld",
           (long long)updated[k]->offset, (long long)shard[k]->offset);
  check_no_overlap(g);
}

/* A repeat's carries (memplan's carry_in_place, carry_init_shared): three carries from zeros over
 * xs x [3, 4, 8]:
 *   s' = s + x          (arg s read by the add only: the sum is written into the output, which
 *                        takes the zeros' place: one buffer)
 *   a' = a + tanh(a)    (arg a also yielded as b: the sum gets its own bytes)
 *   b' = a              (arg a yielded as another carry: a's output keeps its own bytes, since the
 *                        copy into it would overwrite what b still copies from)
 * and mean = scale(s_out), s_out dead after it: in place. */
static void carry_case(Arena *a) {
  Module *m = tb_module(a, "memplan_carry");
  Graph *g = m->graph;
  Shape s = tb_shape(2, 4, 8);
  Value *xs = tb_input(g, "xs", DT_F32, tb_shape(3, 3, 4, 8));
  Attrs za = {0};
  Value *init[3];
  for (int k = 0; k < 3; k++) init[k] = tb_shaped(g, OP_CONST, 0, NULL, DT_F32, s, &za);
  Graph *body = ir_graph_new(a, g);
  Value *sa = ir_add_arg(body, DT_F32, s, "s")->out[0];
  Value *aa = ir_add_arg(body, DT_F32, s, "a")->out[0];
  ir_add_arg(body, DT_F32, s, "b");
  Value *xa = ir_add_arg(body, DT_F32, s, "x")->out[0];
  Value *s1 = tb_op2(body, OP_ADD, sa, xa, NULL);
  Value *a1 = tb_op2(body, OP_ADD, aa, tb_op1(body, OP_TANH, aa, NULL), NULL);
  ir_add_result(body, s1, NULL);
  ir_add_result(body, a1, NULL);
  ir_add_result(body, aa, NULL);
  Value *in[4] = {init[0], init[1], init[2], xs};
  Node *r = tb_repeat(g, body, 4, in, 3, 3, 1, "acc");
  Attrs sc = {0};
  sc.scalar = 1.0 / 3;
  Value *mean = tb_op1(g, OP_SCALE, r->out[0], &sc);
  ir_add_result(g, mean, "mean");
  ir_add_result(g, r->out[1], "a");
  ir_add_result(g, r->out[2], "b");
  if (!pass_memplan(m)) {
    fprintf(stderr, "pass_memplan failed\n");
    failures++;
    return;
  }
  CHECK(s1->offset == r->out[0]->offset && s1->stride == 0, "s + x written into the output: at %lld, output at %lld",
         (long long)s1->offset, (long long)r->out[0]->offset);
  CHECK(r->out[0]->offset == init[0]->offset, "the output takes its zeros' place: at %lld, zeros at %lld",
         (long long)r->out[0]->offset, (long long)init[0]->offset);
  CHECK(mean->offset == r->out[0]->offset, "the mean in place: at %lld, the sum at %lld", (long long)mean->offset,
         (long long)r->out[0]->offset);
  CHECK(a1->offset != r->out[1]->offset, "a + tanh(a) (a read twice) written into the output at %lld",
         (long long)a1->offset);
  CHECK(r->out[1]->offset != init[1]->offset, "a's output on its zeros although b copies from a: at %lld",
         (long long)init[1]->offset);
  check_no_overlap(g);
}

/* The residual stream's gradient through a backward layer loop (memplan's carry_chain): carry r,
 *   f = r + x;  m = r + f            (the add is r's last reader: m over r's bytes)
 *   g = tanh(m);  h = reshape(tanh(reshape(m)))   (m read by two branches, one through a view)
 *   y = m + (g + h)                  (m's last reader: y over m's bytes) -> the next r
 * so m and y are written into the loop's output (no copy at the iteration's end) and the view of m is
 * m's bytes. With `late` a stacked z = tanh(m) read after y keeps m alive: nothing goes in place. */
static void chain_case(Arena *a, bool late) {
  Module *m = tb_module(a, late ? "memplan_chain_late" : "memplan_chain");
  Graph *g = m->graph;
  Shape s = tb_shape(3, 2, 4, 8);
  Value *xs = tb_input(g, "xs", DT_F32, tb_shape(4, 3, 2, 4, 8));
  Value *init = tb_op1(g, OP_TANH, tb_input(g, "dy", DT_F32, s), NULL);
  Graph *body = ir_graph_new(a, g);
  Value *r = ir_add_arg(body, DT_F32, s, "r")->out[0];
  Value *x = ir_add_arg(body, DT_F32, s, "x")->out[0];
  Value *f = tb_op2(body, OP_ADD, r, x, NULL);
  Value *mid = tb_op2(body, OP_ADD, r, f, NULL);
  Value *gg = tb_op1(body, OP_TANH, mid, NULL);
  Value *view = tb_shaped(body, OP_RESHAPE, 1, &mid, DT_F32, tb_shape(2, 8, 8), NULL);
  Value *hv = tb_op1(body, OP_TANH, view, NULL);
  Value *h = tb_shaped(body, OP_RESHAPE, 1, &hv, DT_F32, s, NULL);
  Value *y = tb_op2(body, OP_ADD, mid, tb_op2(body, OP_ADD, gg, h, NULL), NULL);
  ir_add_result(body, y, NULL);
  if (late) ir_add_result(body, tb_op1(body, OP_TANH, mid, NULL), NULL);
  Value *in[2] = {init, xs};
  Node *rep = tb_repeat(g, body, 2, in, 3, 1, 1, "blocks.grad");
  Value *t = rep->out[0]; /* (the step goes on: values to check the plan's overlaps on) */
  for (int k = 0; k < 4; k++) t = tb_op2(g, OP_ADD, t, tb_op1(g, OP_TANH, t, NULL), NULL);
  ir_add_result(g, t, "dx");
  if (late) ir_add_result(g, rep->out[1], "z");
  if (!pass_memplan(m)) {
    fprintf(stderr, "pass_memplan failed\n");
    failures++;
    return;
  }
  int64_t out = rep->out[0]->offset;
  if (!late) {
    CHECK(y->offset == out && mid->offset == out && y->stride == 0 && mid->stride == 0,
          "the chain in the output (%lld): y at %lld, m at %lld", (long long)out, (long long)y->offset,
          (long long)mid->offset);
    CHECK(view->offset == IR_OFFSET_VIEW, "the view of m is m's bytes: at %lld", (long long)view->offset);
    CHECK(f->offset != out && gg->offset != out && hv->offset != out, "a branch's value on the carry's bytes");
  } else {
    CHECK(y->offset != out && mid->offset != out, "m read after y, yet the chain is in the output (%lld)",
          (long long)out);
  }
  check_no_overlap(g);
}

/* [at, at + bytes) meets a placed value live at position i of g (in a body: its bytes in every
 * iteration, memplan_span)? Names the first such value. */
static const Value *meets_live(const Graph *g, int i, int64_t at, int64_t bytes) {
  for (int j = 0; j < g->nnodes; j++)
    for (int k = 0; k < g->nodes[j]->nout; k++) {
      const Value *v = g->nodes[j]->out[k];
      int64_t lo, hi;
      if (j > i || tb_last_use(g, v) < i || !memplan_span(v, &lo, &hi)) continue;
      if (at < hi && lo < at + bytes) return v;
    }
  return NULL;
}

/* A collective that packs its members' chunks gets a scratch buffer of the plan
 * (memplan_scratch_bytes: runtime/mesh.h's rt_pack_bytes), class communication, live at its node:
 * disjoint from every value live there, inside the transient arena, counted at the peak when it
 * is there; in a loop body, rebased with the body; a contiguous one gets none.
 *   top:  a = tanh(x) [3, 2, 8]; y = all_gather(a) over dp along dim 1 -> [3, 4, 8] (outer 3: packs)
 *         z = all_gather(tanh(w)) along dim 0, [2, 8] -> [4, 8] (contiguous: none)
 *   loop: 2 iterations over xs [2, 3, 4, 8]: reduce_scatter(tanh(x_i)) along dim 1 -> [3, 2, 8]
 *         (packs), the stacked output [2, 3, 2, 8] */
static void scratch_case(Arena *a) {
  Module *m = tb_module(a, "memplan_scratch");
  Graph *g = m->graph;
  Value *x = tb_input(g, "x", DT_F32, tb_shape(3, 3, 2, 8));
  Value *w = tb_input(g, "w", DT_F32, tb_shape(2, 2, 8));
  Attrs d1 = {0}, d0 = {0};
  d1.mesh_axis = d0.mesh_axis = RT_AX_DP;
  d1.axis = 1;
  Value *ta = tb_op1(g, OP_TANH, x, NULL);
  Value *y = tb_shaped(g, OP_ALL_GATHER, 1, &ta, DT_F32, tb_shape(3, 3, 4, 8), &d1);
  Value *tw = tb_op1(g, OP_TANH, w, NULL);
  Value *z = tb_shaped(g, OP_ALL_GATHER, 1, &tw, DT_F32, tb_shape(2, 4, 8), &d0);
  ir_add_result(g, tb_op1(g, OP_SUM, y, NULL), "y");
  ir_add_result(g, tb_op1(g, OP_SUM, z, NULL), "z");
  Value *xs = tb_input(g, "xs", DT_F32, tb_shape(4, 2, 3, 4, 8));
  Graph *body = ir_graph_new(a, g);
  Value *xa = ir_add_arg(body, DT_F32, tb_shape(3, 3, 4, 8), "x")->out[0];
  Value *t = tb_op1(body, OP_TANH, xa, NULL);
  Value *rs = tb_shaped(body, OP_REDUCE_SCATTER, 1, &t, DT_F32, tb_shape(3, 3, 2, 8), &d1);
  ir_add_result(body, rs, NULL);
  Node *r = tb_repeat(g, body, 1, &xs, 2, 0, 1, "loop");
  ir_add_result(g, r->out[0], "stacked");
  if (!pass_memplan(m)) {
    fprintf(stderr, "pass_memplan failed\n");
    failures++;
    return;
  }
  const MemPlan *mp = m->memplan;
  Node *gy = y->def, *gz = z->def, *rsn = rs->def;
  CHECK(memplan_scratch_bytes(gy) == 384 && gy->scratch_bytes == 384, "the dim-1 gather's scratch: %lld bytes "
         "planned, %lld needed (384: the gathered tensor)", (long long)gy->scratch_bytes,
         (long long)memplan_scratch_bytes(gy));
  CHECK(memplan_scratch_bytes(gz) == 0 && gz->scratch_bytes == 0, "the dim-0 gather (contiguous) got %lld bytes",
         (long long)gz->scratch_bytes);
  CHECK(rsn->scratch_bytes == 384, "the loop's dim-1 reduce-scatter: %lld bytes of scratch (384: its input)",
         (long long)rsn->scratch_bytes);
  for (int k = 0; k < 2; k++) {
    const Node *n = k ? rsn : gy;
    CHECK(n->scratch_at >= mp->persistent && n->scratch_at + n->scratch_bytes <= mp->total,
           "scratch [%lld, +%lld) outside the arena [%lld, %lld)", (long long)n->scratch_at,
           (long long)n->scratch_bytes, (long long)mp->persistent, (long long)mp->total);
  }
  const Value *hit = meets_live(g, tb_pos_of(g, gy), gy->scratch_at, gy->scratch_bytes);
  CHECK(!hit, "the gather's scratch meets %%%d, live at the gather", hit ? hit->id : -1);
  hit = meets_live(body, tb_pos_of(body, rsn), rsn->scratch_at, rsn->scratch_bytes);
  CHECK(!hit, "the loop's scratch meets the body's %%%d, live at the scatter", hit ? hit->id : -1);
  hit = meets_live(g, tb_pos_of(g, r), rsn->scratch_at, rsn->scratch_bytes);
  CHECK(!hit, "the loop's scratch meets %%%d, live at the loop", hit ? hit->id : -1);
  CHECK(mp->largest[MEM_COMM] == 384, "largest communication buffer %lld", (long long)mp->largest[MEM_COMM]);
  check_no_overlap(g);

  /* the gather is the peak: a, y and the scratch live (192 + 384 + 384 bytes) */
  Module *m2 = tb_module(a, "memplan_scratch_peak");
  Graph *g2 = m2->graph;
  Value *x2 = tb_op1(g2, OP_TANH, tb_input(g2, "x", DT_F32, tb_shape(3, 3, 2, 8)), NULL);
  Value *y2 = tb_shaped(g2, OP_ALL_GATHER, 1, &x2, DT_F32, tb_shape(3, 3, 4, 8), &d1);
  ir_add_result(g2, tb_op1(g2, OP_SUM, y2, NULL), "y");
  if (!pass_memplan(m2)) {
    fprintf(stderr, "pass_memplan failed\n");
    failures++;
    return;
  }
  CHECK(m2->memplan->by_class[MEM_COMM] == 384, "communication at the peak: %lld bytes (384: the scratch)",
         (long long)m2->memplan->by_class[MEM_COMM]);
  CHECK(m2->memplan->peak - m2->memplan->persistent == 192 + 384 + 384, "peak %lld transient bytes, 960 planned",
         (long long)(m2->memplan->peak - m2->memplan->persistent));

  /* the loop alone: its block (tanh(x_i) and the scratch, 384 + 384) beside the stacked output (384)
   * is the peak, and the block's scratch counts as communication there, not as activations */
  Module *m3 = tb_module(a, "memplan_scratch_loop");
  Graph *g3 = m3->graph, *b3 = ir_graph_new(a, g3);
  Value *xs3 = tb_input(g3, "xs", DT_F32, tb_shape(4, 2, 3, 4, 8));
  Value *x3 = ir_add_arg(b3, DT_F32, tb_shape(3, 3, 4, 8), "x")->out[0];
  Value *t3 = tb_op1(b3, OP_TANH, x3, NULL);
  ir_add_result(b3, tb_shaped(b3, OP_REDUCE_SCATTER, 1, &t3, DT_F32, tb_shape(3, 3, 2, 8), &d1), NULL);
  ir_add_result(g3, tb_repeat(g3, b3, 1, &xs3, 2, 0, 1, "loop")->out[0], "stacked");
  if (!pass_memplan(m3)) {
    fprintf(stderr, "pass_memplan failed\n");
    failures++;
    return;
  }
  const MemPlan *p3 = m3->memplan;
  CHECK(p3->peak - p3->persistent == 384 + 384 + 384 && p3->by_class[MEM_COMM] == 384 &&
             p3->by_class[MEM_ACT] == 768,
         "the loop's peak: %lld transient bytes (1152 planned), communication %lld (384), activations %lld (768)",
         (long long)(p3->peak - p3->persistent), (long long)p3->by_class[MEM_COMM], (long long)p3->by_class[MEM_ACT]);
}

int main(void) {
  Arena a;
  arena_init(&a);
  Module *m = tb_module(&a, "memplan");
  Graph *g = m->graph;
  Shape s = tb_shape(2, 16, 32);
  Value *x = tb_input(g, "x", DT_F32, s);
  Value *w = tb_param(g, "w", DT_F32, s, INIT_ZEROS, 0, 0);
  Attrs ar = {0};
  ar.mesh_axis = RT_AX_DP;
  ar.reduce = RED_SUM;
  Value *av = tb_op1(g, OP_TANH, x, NULL);
  Value *y = tb_op1(g, OP_ALL_REDUCE, av, &ar);
  Value *c = tb_op1(g, OP_TANH, y, NULL);
  Value *d = tb_op1(g, OP_ALL_REDUCE, c, &ar);
  Value *e = tb_op2(g, OP_ADD, c, d, NULL);
  Value *f = tb_op1(g, OP_TANH, e, NULL);
  Value *ff[2] = {f, f};
  Node *two = tb_node(g, OP_ALL_REDUCE, 2, ff, 2, &ar);
  Value *h = tb_op2(g, OP_ADD, two->out[0], two->out[1], NULL);
  Value *h2 = tb_op2(g, OP_ADD, h, w, NULL);
  Value *loss = tb_op1(g, OP_SUM, h2, NULL);
  ir_add_result(g, loss, "loss");
  if (!pass_memplan(m)) {
    fprintf(stderr, "pass_memplan failed\n");
    return 1;
  }
  CHECK(y->offset == av->offset, "y = all_reduce(a), a dead after: y at %lld, a at %lld", (long long)y->offset,
         (long long)av->offset);
  CHECK(d->offset != c->offset, "d = all_reduce(c), c read after: both at %lld", (long long)d->offset);
  CHECK(e->offset == c->offset, "e = c + d, c dead after: e at %lld, c at %lld", (long long)e->offset,
         (long long)c->offset);
  CHECK(two->out[0]->offset != two->out[1]->offset, "all_reduce(f, f): both outputs at %lld",
         (long long)two->out[0]->offset);
  check_no_overlap(g);
  zero_gather_case(&a);
  carry_case(&a);
  chain_case(&a, false);
  chain_case(&a, true);
  scratch_case(&a);
  arena_free(&a);
  if (failures) fprintf(stderr, "test_memplan: %d failures\n", failures);
  else printf("test_memplan: ok\n");
  return failures ? 1 : 0;
}
