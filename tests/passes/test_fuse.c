/* tests/passes/test_fuse.c — fusion groups (passes/fuse.c) and how the memory plan cuts them.
 *
 * Built graphs:
 *   - a chain over one shape is one group; a reduction and a shape change end it; a same-dtype
 *     cast (a view) starts none; a chain of 40 ops is a group of FUSE_MAX_NODES, then the rest;
 *   - t = reduce_sum(x) to a row; a = x2 + t; b = tanh(a); c = tanh(b): one group after
 *     pass_fuse, but the plan puts b over t's dead bytes, so one kernel would write what other
 *     indices still read: pass_memplan cuts the group before b; chains that read only
 *     persistent memory stay whole.
 * SwiGLU around its GEMMs on the CUDA target (passes/fuse_order.c moves the nodes before grouping): the
 * forward's silu sinks below the up projection's GEMM into one group with the mul; the backward's
 * silu_bwd rises over two GEMMs into one group with both muls, whole after the memory plan, the add
 * after the gate's dX GEMM left next to it; refused: a GEMM between reading silu's output, the up
 * GEMM on another pipeline stage, an add right after the GEMM it reads (an epilogue candidate).
 * Real models (tiny f32 and bf16, tiny tp=2 + sp, Llama-3-8B with 2 layers) through the whole pipeline
 * for the CUDA target: every group is consecutive elementwise nodes over one shape within the
 * limits, and no member's output overlaps a value its group reads from outside (except the
 * same tensor updated index for index) — the condition for running it as one kernel. In Llama's
 * layers one group holds SwiGLU's forward silu and mul, one its backward's silu_bwd and muls.
 * GEMM epilogues (passes/epilogue.c, after memplan): tiny's four matmuls per layer take their bias
 * add (qkv), bias + GELU (fc) and bias + residual (both projections); what the GEMM stores meets
 * none of A, B and the bias, a GELU's output not its pre-activation, and the absorbed nodes are in
 * no fusion group; the MLP's GELU backward (moved by passes/fuse.c to just after the GEMM of its
 * gradient) and its bias gradient are that GEMM's DGELU_BGRAD epilogue, what it writes early meeting
 * nothing written in between; Llama (no biases) takes its residual adds without a bias (EPI_RESIDUAL), what
 * the GEMM stores meeting neither operand and its C only as its very bytes. The cross-entropy's forward and backward are paired
 * (passes/fuse_ce.c) in each model: the gradient's bytes meet neither the targets, the loss nor dloss,
 * and the logits only as their very tensor; dloss is defined before the forward.
 */
#include <stdio.h>
#include <string.h>

#include "diag.h"
#include "frontend.h"
#include "memplan.h"
#include "passes.h"
#include "pipeline.h"
#include "tb_compile.h"
#include "tb.h"

static int failures; /* CHECK (tests/check.h, through tb.h) counts here */

static bool elementwise(const Node *n) {
  return n->op == OP_CONST || n->op == OP_BROADCAST_TO || (ir_ops[n->op].flags & F_EW);
}


static bool overlaps(const Value *w, const Value *x) {
  if (w == x) return false;
  if (w->offset == x->offset && w->stride == x->stride && w->def->op != OP_ARG && x->def->op != OP_ARG &&
      ir_shape_eq(&w->shape, &x->shape) && ir_dtype_size(w->dtype) == ir_dtype_size(x->dtype))
    return false; /* the same tensor, index for index */
  int64_t wl, wh, xl, xh;
  if (!tb_span(w, &wl, &wh) || !tb_span(x, &xl, &xh)) return false;
  return wl < xh && xl < wh;
}

/* Checks every group of g (and its bodies); returns the number of groups of 2 or more nodes. */
static int check_groups(const Graph *g, const char *label, bool placed) {
  int groups = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) groups += check_groups(g->nodes[i]->body, label, placed);
  for (int i = 0, end; i < g->nnodes; i = end) {
    int id = g->nodes[i]->group;
    end = ir_group_end(g, i);
    if (!id) continue;
    CHECK(end - i >= 2 && end - i <= FUSE_MAX_NODES, "%s: group %d has %d nodes", label, id, end - i);
    for (int k = end; k < g->nnodes; k++) CHECK(g->nodes[k]->group != id, "%s: group %d is not consecutive", label, id);
    const Value *ext[2 * FUSE_MAX_NODES];
    int next = 0;
    for (int k = i; k < end; k++) {
      const Node *n = g->nodes[k];
      CHECK(elementwise(n), "%s: group %d holds %s", label, id, ir_ops[n->op].name);
      CHECK(ir_shape_eq(&n->out[0]->shape, &g->nodes[i]->out[0]->shape), "%s: group %d mixes shapes", label, id);
      for (int j = 0; j < n->nin; j++) {
        const Node *d = n->in[j]->def;
        bool inside = false;
        for (int q = i; q < k; q++) inside |= g->nodes[q] == d;
        for (int e = 0; e < next; e++) inside |= ext[e] == n->in[j];
        if (!inside) ext[next++] = n->in[j];
      }
    }
    CHECK(next <= FUSE_MAX_INPUTS, "%s: group %d reads %d values from outside", label, id, next);
    for (int k = i; k < end && placed; k++)
      for (int e = 0; e < next; e++)
        CHECK(!overlaps(g->nodes[k]->out[0], ext[e]),
               "%s: group %d: %s %%%d [%lld, +%lld) overwrites %%%d [%lld, +%lld), which the group reads", label, id,
               ir_ops[g->nodes[k]->op].name, g->nodes[k]->out[0]->id, (long long)g->nodes[k]->out[0]->offset,
               (long long)tb_bytes_of(g->nodes[k]->out[0]), ext[e]->id, (long long)ext[e]->offset,
               (long long)tb_bytes_of(ext[e]));
    groups++;
  }
  return groups;
}

static bool meets(const Value *a, const Value *b) {
  int64_t al, ah, bl, bh;
  return tb_span(a, &al, &ah) && tb_span(b, &bl, &bh) && al < bh && bl < ah;
}

/* Checks every matmul epilogue of g (and its bodies); returns how many there are. */
static int check_epilogues(const Graph *g, const char *label) {
  int count = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *mm = g->nodes[i];
    if (mm->body) count += check_epilogues(mm->body, label);
    if (!mm->a.epilogue) continue;
    count++;
    int at[2], e = epilogue_nodes(g, i, at);
    CHECK(mm->op == OP_MATMUL && e >= 1 && e <= 2, "%s: %s with epilogue %d", label, ir_ops[mm->op].name, e);
    if (epi_dgelu(mm->a.epilogue)) { /* GELU's backward (+ its bias gradient), later */
      const Node *gb = g->nodes[at[0]];
      CHECK(gb->op == OP_GELU_BWD && gb->in[1] == mm->out[0] && gb->group == 0, "%s: DGELU without its gelu_bwd", label);
      for (int k = 0; k < e; k++) {
        const Value *w = g->nodes[at[k]]->out[0];
        CHECK(epilogue_gemm(g, at[k]) == i, "%s: epilogue_gemm does not find the GEMM", label);
        CHECK(!meets(w, mm->in[0]) && !meets(w, mm->in[1]) && !meets(w, gb->in[0]) && (k == 0 || !meets(w, gb->out[0])),
               "%s: the DGELU GEMM stores %%%d over what it reads", label, w->id);
        for (int q = i + 1; q < at[k]; q++)
          for (int o = 0; o < g->nodes[q]->nout; o++)
            CHECK(!meets(w, g->nodes[q]->out[o]), "%s: %%%d, written early, meets %%%d", label, w->id, g->nodes[q]->out[o]->id);
      }
      if (e == 2) CHECK(g->nodes[at[1]]->op == OP_REDUCE_SUM && g->nodes[at[1]]->in[0] == gb->out[0], "%s: BGRAD without its reduce", label);
      continue;
    }
    const Node *add = g->nodes[at[0]];
    CHECK(add->op == OP_ADD && (add->in[0] == mm->out[0] || add->in[1] == mm->out[0]), "%s: the epilogue's first node is no bias add", label);
    const Value *bias = add->in[0] == mm->out[0] ? add->in[1] : add->in[0];
    if (mm->a.epilogue == EPI_RESIDUAL) { /* r = x + y, no bias: x the GEMM's C, r stored over x or apart */
      const Value *r = add->out[0];
      CHECK(e == 1 && ir_shape_eq(&bias->shape, &mm->out[0]->shape) && ir_count_uses_deep(g, mm->out[0]) == 1 && add->group == 0,
            "%s: a residual epilogue's add is no x + y of y's shape read once, out of fusion groups", label);
      CHECK(!meets(r, mm->in[0]) && !meets(r, mm->in[1]) && !overlaps(r, bias),
            "%s: the residual GEMM stores %%%d over what it reads", label, r->id);
      continue;
    }
    CHECK(bias->shape.rank == 1 && ir_count_uses_deep(g, mm->out[0]) == 1, "%s: bias rank %d, matmul output read %d times", label,
           bias->shape.rank, ir_count_uses_deep(g, mm->out[0]));
    for (int k = 0; k < e; k++) {
      const Node *n = g->nodes[at[k]];
      CHECK(n->group == 0, "%s: an absorbed %s is in fusion group %d", label, ir_ops[n->op].name, n->group);
      for (int q = 0; q < 3; q++) {
        const Value *r = q == 2 ? bias : mm->in[q];
        bool stored = k == e - 1 || g->nodes[at[e - 1]]->op == OP_GELU; /* a residual's h is not stored */
        CHECK(!stored || !meets(n->out[0], r), "%s: the GEMM stores %%%d over %%%d, which it reads", label, n->out[0]->id, r->id);
      }
    }
    if (e == 2 && g->nodes[at[1]]->op == OP_GELU)
      CHECK(!meets(g->nodes[at[1]]->out[0], add->out[0]), "%s: GELU's output meets its pre-activation", label);
  }
  return count;
}

/* Checks the fused cross-entropies of g (and its bodies); returns how many pairs there are. */
static int check_fused_ce(const Graph *g, const char *label) {
  int count = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *f = g->nodes[i];
    if (f->body) count += check_fused_ce(f->body, label);
    if (f->op != OP_CROSS_ENTROPY || !f->a.fused_bwd) continue;
    int b = fuse_ce_partner(g, i);
    CHECK(b > i && fuse_ce_partner(g, b) == i, "%s: the fused cross-entropy at %d has no backward after it", label, i);
    if (b <= i) continue;
    count++;
    const Value *dl = g->nodes[b]->out[0], *lg = f->in[0], *dloss = g->nodes[b]->in[2];
    CHECK(!meets(dl, f->in[1]) && !meets(dl, f->out[0]) && !meets(dl, dloss) && !overlaps(dl, lg),
           "%s: the fused cross-entropy's gradient %%%d meets what the forward reads or writes", label, dl->id);
    for (int q = i + 1; q < b; q++) CHECK(dloss->def != g->nodes[q], "%s: dloss is defined after the forward", label);
  }
  return count;
}

static void built_graphs(void) {
  Arena a;
  arena_init(&a);
  Module *m = tb_module(&a, "fuse");
  Graph *g = m->graph;
  Shape s = tb_shape(2, 8, 8);
  Value *x = tb_input(g, "x", DT_F32, s), *x2 = tb_input(g, "x2", DT_F32, s);
  Value *w = tb_param(g, "w", DT_F32, tb_shape(1, 8), INIT_ZEROS, 0, 0);
  /* a chain over one shape, then a reduction */
  Value *p = tb_op2(g, OP_ADD, x2, w, NULL);
  Value *q = tb_op1(g, OP_GELU, p, NULL);
  Value *r = tb_op2(g, OP_MUL, q, x2, NULL);
  Value *sr = tb_op1(g, OP_SUM, r, NULL);
  /* a view starts no group; the chain after it is one */
  Value *v = tb_shaped(g, OP_CAST, 1, &x2, DT_F32, s, NULL);
  Value *v1 = tb_op1(g, OP_TANH, v, NULL);
  Value *v2 = tb_op1(g, OP_EXP, v1, NULL);
  Value *sv = tb_op1(g, OP_SUM, v2, NULL);
  /* 40 ops in a row */
  Value *z = x2;
  Node *chain[40];
  for (int i = 0; i < 40; i++) {
    z = tb_op1(g, OP_TANH, z, NULL);
    chain[i] = z->def;
  }
  Value *sz = tb_op1(g, OP_SUM, z, NULL);
  /* the chain whose placement forces cuts: t, of the group's shape, read by its first member only, and a narrower
   * member after it (bf16: over t's bytes, not index for index) */
  Value *t = tb_shaped(g, OP_TRANSPOSE, 1, &x, DT_F32, s, NULL);
  Value *ea = tb_op2(g, OP_ADD, x2, t, NULL);
  Value *tb = tb_shaped(g, OP_CAST, 1, &ea, DT_BF16, s, NULL);
  Value *tc = tb_op1(g, OP_TANH, tb, NULL);
  Value *st = tb_op1(g, OP_SUM, tc, NULL);
  /* ... and a vector it broadcasts, which lives through the group instead (memplan_keep_group_reads) */
  Value *u = tb_shaped(g, OP_REDUCE_SUM, 1, &x, DT_F32, tb_shape(1, 8), NULL);
  Value *ua = tb_op2(g, OP_ADD, x2, u, NULL);
  Value *ub = tb_op1(g, OP_TANH, ua, NULL);
  Value *uc = tb_op1(g, OP_TANH, ub, NULL);
  Value *su = tb_op1(g, OP_SUM, uc, NULL);
  Value *l1 = tb_op2(g, OP_ADD, sr, sv, NULL), *l2 = tb_op2(g, OP_ADD, sz, st, NULL);
  ir_add_result(g, tb_op2(g, OP_ADD, tb_op2(g, OP_ADD, l1, l2, NULL), su, NULL), "loss");

  CHECK(pass_fuse(m), "pass_fuse failed");
  CHECK(p->def->group && p->def->group == q->def->group && q->def->group == r->def->group,
         "add, gelu, mul: groups %d %d %d", p->def->group, q->def->group, r->def->group);
  CHECK(sr->def->group == 0, "a sum in group %d", sr->def->group);
  CHECK(v->def->group == 0 && v1->def->group && v1->def->group == v2->def->group,
         "cast, tanh, exp: groups %d %d %d (a view starts no group)", v->def->group, v1->def->group, v2->def->group);
  CHECK(v1->def->group != r->def->group, "a reduction between two chains ends a group");
  for (int i = 1; i < 40; i++)
    CHECK((chain[i]->group == chain[0]->group) == (i < FUSE_MAX_NODES), "40 tanh: op %d in group %d (first %d)", i,
           chain[i]->group, chain[0]->group);
  CHECK(chain[FUSE_MAX_NODES]->group && chain[FUSE_MAX_NODES]->group == chain[39]->group,
         "40 tanh: the rest is one group");
  CHECK(ea->def->group && ea->def->group == tb->def->group && tb->def->group == tc->def->group,
         "add, cast, tanh: groups %d %d %d", ea->def->group, tb->def->group, tc->def->group);
  CHECK(ua->def->group && ua->def->group == ub->def->group && ub->def->group == uc->def->group,
         "add, tanh, tanh (a broadcast vector): groups %d %d %d", ua->def->group, ub->def->group, uc->def->group);
  int before = check_groups(g, "after fuse", false);
  CHECK(before == 7, "%d groups after fuse, want 7 (the last: the scalar adds of the loss)", before);

  CHECK(pass_memplan(m), "pass_memplan failed");
  CHECK(overlaps(tb->def->out[0], t), "the plan was meant to put b over t's dead bytes: t at %lld, a %lld, b %lld",
         (long long)t->offset, (long long)ea->offset, (long long)tb->offset);
  CHECK(ea->def->group != tb->def->group, "b would overwrite t, which a reads: groups %d %d %d", ea->def->group,
         tb->def->group, tc->def->group);
  CHECK(!overlaps(ub->def->out[0], u) && !overlaps(uc->def->out[0], u), "the broadcast vector u at %lld, b %lld, c %lld: "
        "a later member over it", (long long)u->offset, (long long)ub->offset, (long long)uc->offset);
  CHECK(ua->def->group && ua->def->group == ub->def->group && ub->def->group == uc->def->group,
         "add, tanh, tanh over a broadcast vector cut: groups %d %d %d", ua->def->group, ub->def->group, uc->def->group);
  CHECK(p->def->group && p->def->group == r->def->group, "a chain over persistent inputs is cut");
  CHECK(chain[0]->group && chain[0]->group == chain[FUSE_MAX_NODES - 1]->group, "the 32-op group is cut");
  int after = check_groups(g, "after memplan", true);
  CHECK(after >= 3, "%d groups after memplan", after);
  arena_free(&a);
}

/* SwiGLU's pieces around its GEMMs, built (CUDA target: passes/fuse_order.c moves them before the grouping). */
typedef struct {
  Arena a;
  Module *m;
  Graph *g;
  Value *x, *wg, *wu, *wd;
} Swiglu;

static void swiglu_begin(Swiglu *t, const char *name) {
  arena_init(&t->a);
  t->m = tb_module(&t->a, name);
  t->m->target = TARGET_CUDA;
  t->g = t->m->graph;
  t->x = tb_input(t->g, "x", DT_F32, tb_shape(2, 16, 8));
  t->wg = tb_param(t->g, "wg", DT_F32, tb_shape(2, 8, 12), INIT_ZEROS, 0, 0);
  t->wu = tb_param(t->g, "wu", DT_F32, tb_shape(2, 8, 12), INIT_ZEROS, 0, 0);
  t->wd = tb_param(t->g, "wd", DT_F32, tb_shape(2, 12, 8), INIT_ZEROS, 0, 0);
}

static bool same_group(const Node *a, const Node *b) { return a->group && a->group == b->group; }

static void swiglu_graphs(void) {
  Swiglu t;
  /* forward: gate = x wg; s = silu(gate); u = x wu; h = s * u; y = h wd. silu sinks below u's GEMM */
  swiglu_begin(&t, "swiglu_fwd");
  Value *gate = tb_op2(t.g, OP_MATMUL, t.x, t.wg, NULL), *s = tb_op1(t.g, OP_SILU, gate, NULL);
  Value *u = tb_op2(t.g, OP_MATMUL, t.x, t.wu, NULL), *h = tb_op2(t.g, OP_MUL, s, u, NULL);
  Value *y = tb_op2(t.g, OP_MATMUL, h, t.wd, NULL);
  ir_add_result(t.g, y, "y");
  ir_add_result(t.g, s, "s"); /* (the backward reads it) */
  CHECK(pass_fuse(t.m) && ir_verify(t.g, "fuse"), "swiglu forward: fuse failed");
  CHECK(same_group(s->def, h->def), "swiglu forward: silu and mul in groups %d %d", s->def->group, h->def->group);
  CHECK(tb_pos_of(t.g, u->def) < tb_pos_of(t.g, s->def) && tb_pos_of(t.g, s->def) + 1 == tb_pos_of(t.g, h->def),
        "swiglu forward: silu at %d, u's GEMM at %d, mul at %d", tb_pos_of(t.g, s->def), tb_pos_of(t.g, u->def),
        tb_pos_of(t.g, h->def));
  arena_free(&t.a);

  /* refused: a GEMM between reads silu's output (z = s wd2), so neither moves */
  swiglu_begin(&t, "swiglu_reader");
  gate = tb_op2(t.g, OP_MATMUL, t.x, t.wg, NULL), s = tb_op1(t.g, OP_SILU, gate, NULL);
  Value *z = tb_op2(t.g, OP_MATMUL, s, t.wd, NULL);
  u = tb_op2(t.g, OP_MATMUL, t.x, t.wu, NULL), h = tb_op2(t.g, OP_MUL, s, u, NULL);
  ir_add_result(t.g, tb_op2(t.g, OP_ADD, tb_op2(t.g, OP_MATMUL, h, t.wd, NULL), z, NULL), "y");
  CHECK(pass_fuse(t.m) && ir_verify(t.g, "fuse"), "swiglu with a reader: fuse failed");
  CHECK(!same_group(s->def, h->def) && tb_pos_of(t.g, s->def) < tb_pos_of(t.g, z->def),
        "swiglu with a reader between: silu moved (at %d, its reader at %d; groups %d %d)", tb_pos_of(t.g, s->def),
        tb_pos_of(t.g, z->def), s->def->group, h->def->group);
  arena_free(&t.a);

  /* refused: u's GEMM runs on another pipeline stage */
  swiglu_begin(&t, "swiglu_stage");
  gate = tb_op2(t.g, OP_MATMUL, t.x, t.wg, NULL), s = tb_op1(t.g, OP_SILU, gate, NULL);
  u = tb_op2(t.g, OP_MATMUL, t.x, t.wu, NULL), h = tb_op2(t.g, OP_MUL, s, u, NULL);
  ir_add_result(t.g, tb_op2(t.g, OP_MATMUL, h, t.wd, NULL), "y");
  u->def->stage = 2;
  CHECK(pass_fuse(t.m), "swiglu over stages: fuse failed");
  CHECK(!same_group(s->def, h->def) && tb_pos_of(t.g, s->def) < tb_pos_of(t.g, u->def),
        "swiglu over stages: silu moved over another stage's GEMM (at %d, the GEMM at %d)", tb_pos_of(t.g, s->def),
        tb_pos_of(t.g, u->def));
  arena_free(&t.a);

  /* backward: dh = dy wd'; ds = dh * u; du = dh * s; dxu = du wu'; dg = silu_bwd(gate, ds); dxg = dg wg';
   * dx = dxu + dxg. silu_bwd rises to just after the first mul: ds, dg, du one group (dg and du stored, ds
   * not); the add stays right after the GEMM it reads (a GEMM epilogue candidate) */
  swiglu_begin(&t, "swiglu_bwd");
  Shape hs = tb_shape(2, 16, 12);
  Value *dy = tb_input(t.g, "dy", DT_F32, tb_shape(2, 16, 8)), *gin = tb_input(t.g, "gate", DT_F32, hs);
  Value *uin = tb_input(t.g, "u", DT_F32, hs), *sin = tb_input(t.g, "s", DT_F32, hs);
  Attrs tbt = {.tb = 1};
  Value *dh = tb_op2(t.g, OP_MATMUL, dy, t.wd, &tbt);
  Value *ds = tb_op2(t.g, OP_MUL, dh, uin, NULL), *du = tb_op2(t.g, OP_MUL, dh, sin, NULL);
  Value *dxu = tb_op2(t.g, OP_MATMUL, du, t.wu, &tbt);
  Value *dg = tb_op2(t.g, OP_SILU_BWD, gin, ds, NULL);
  Value *dxg = tb_op2(t.g, OP_MATMUL, dg, t.wg, &tbt);
  Value *dx = tb_op2(t.g, OP_ADD, dxu, dxg, NULL);
  ir_add_result(t.g, dx, "dx");
  CHECK(pass_fuse(t.m) && ir_verify(t.g, "fuse"), "swiglu backward: fuse failed");
  CHECK(same_group(ds->def, dg->def) && same_group(dg->def, du->def), "swiglu backward: mul, silu_bwd, mul in groups %d %d %d",
        ds->def->group, dg->def->group, du->def->group);
  CHECK(tb_pos_of(t.g, dxg->def) + 1 == tb_pos_of(t.g, dx->def), "swiglu backward: the add left its GEMM");
  CHECK(pass_memplan(t.m), "swiglu backward: memplan failed");
  CHECK(same_group(ds->def, dg->def) && same_group(dg->def, du->def), "swiglu backward: the plan cut the group (%d %d %d)",
        ds->def->group, dg->def->group, du->def->group);
  check_groups(t.g, "swiglu backward", true);
  arena_free(&t.a);

  /* refused: t = tanh(x2) is first read by the add right after a GEMM (r = t + x wg): it stays
   * before the GEMM, which keeps its epilogue candidate next to it */
  swiglu_begin(&t, "epilogue_kept");
  Value *x2 = tb_input(t.g, "x2", DT_F32, hs);
  Value *th = tb_op1(t.g, OP_TANH, x2, NULL);
  Value *mm = tb_op2(t.g, OP_MATMUL, t.x, t.wg, NULL), *r = tb_op2(t.g, OP_ADD, th, mm, NULL);
  ir_add_result(t.g, r, "r");
  CHECK(pass_fuse(t.m), "epilogue kept: fuse failed");
  CHECK(tb_pos_of(t.g, th->def) < tb_pos_of(t.g, mm->def) && tb_pos_of(t.g, mm->def) + 1 == tb_pos_of(t.g, r->def),
        "epilogue kept: tanh at %d, GEMM at %d, add at %d", tb_pos_of(t.g, th->def), tb_pos_of(t.g, mm->def),
        tb_pos_of(t.g, r->def));
  arena_free(&t.a);
}

/* How many groups of g (and its bodies) hold silu and a mul, no silu_bwd (SwiGLU's forward), and silu_bwd and two muls
 * (its backward; under selective recompute with the recomputed silu and mul too). */
static void swiglu_groups(const Graph *g, int *fwd, int *bwd) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) swiglu_groups(g->nodes[i]->body, fwd, bwd);
  for (int i = 0, end; i < g->nnodes; i = end) {
    int silu = 0, sbwd = 0, mul = 0;
    end = ir_group_end(g, i);
    if (!g->nodes[i]->group) continue;
    for (int k = i; k < end; k++) {
      silu += g->nodes[k]->op == OP_SILU;
      sbwd += g->nodes[k]->op == OP_SILU_BWD;
      mul += g->nodes[k]->op == OP_MUL;
    }
    *fwd += silu && mul && !sbwd;
    *bwd += sbwd && mul >= 2;
  }
}

static void model(const char *label, const char *file, const FeDefine *defs, int ndefs, int world, int epilogues, int fused_ce,
                  int swiglu) {
  Arena a;
  arena_init(&a);
  Module *m = tb_compile_model(&a, file, defs, ndefs, world, TARGET_CUDA);
  CHECK(m, "%s: does not compile, or a pass failed", label);
  if (!m) return;
  int groups = check_groups(m->graph, label, true), epi = check_epilogues(m->graph, label);
  int ce = check_fused_ce(m->graph, label), sw_fwd = 0, sw_bwd = 0;
  swiglu_groups(m->graph, &sw_fwd, &sw_bwd);
  CHECK(sw_fwd == swiglu && sw_bwd == swiglu, "%s: %d SwiGLU forward groups and %d backward ones, want %d", label, sw_fwd,
        sw_bwd, swiglu);
  CHECK(ce == fused_ce, "%s: %d fused cross-entropies, want %d", label, ce, fused_ce);
  CHECK(groups + epi >= 3, "%s: only %d fusion groups and %d GEMM epilogues", label, groups, epi);
  CHECK(epilogues < 0 || epi == epilogues, "%s: %d GEMM epilogues, want %d", label, epi, epilogues);
  printf("%s: %d fusion groups, %d GEMM epilogues, %d fused cross-entropies\n", label, groups, epi, ce);
  arena_free(&a);
}

int main(void) {
  built_graphs();
  swiglu_graphs();
  const char *tiny = SHARDC_MODELS_DIR "/tiny.model";
  FeDefine one[] = {{"dp", "1"}}, bf16[] = {{"dp", "1"}, {"precision", "bf16"}};
  FeDefine tp[] = {{"dp", "1"}, {"tp", "2"}, {"sp", "on"}, {"precision", "bf16"}};
  FeDefine llama[] = {{"tp", "1"}, {"dp", "1"}, {"sp", "off"}, {"layers", "2"}, {"seq", "64"}, {"micro_batch", "1"},
                      {"batch", "1"}};
  model("tiny f32", tiny, one, 1, 1, 5, 1, 0);
  /* bf16: all 5 too — the MLP's dgelu GEMM in backward reads its layer's bf16 weight row, a
   * transient of the loop body (passes/wcast.c), which the memory plan keeps alive through GELU's
   * backward and the bias gradient (epilogue_reach), so dh does not take its bytes */
  model("tiny bf16", tiny, bf16, 2, 1, 5, 1, 0);
  /* tp: the column-parallel GEMMs' (qkv: bias; fc: bias + GELU; its backward: DGELU_BGRAD); the
   * row-parallel ones' sums are reduced before the bias. Vocab-parallel: the CE_* parts, no fused CE */
  model("tiny tp=2 sp bf16", tiny, tp, 4, 2, 3, 0, 0);
  /* Llama (no biases): the residual adds without a bias (EPI_RESIDUAL) — the forward's two (selective
   * recompute keeps the sum the epilogue stores, not the matmul's output: passes/recompute.c epi_keep),
   * the backward's three adds of two dX GEMMs; SwiGLU's silu and mul one group in the layers' forward loop, the backward's mul,
   * silu_bwd, mul one in theirs (passes/fuse_order.c, over the GEMMs between), whole after the memory plan */
  model("llama3-8b", SHARDC_MODELS_DIR "/llama3-8b.model", llama, 7, 1, 5, 1, 1);
  if (failures) fprintf(stderr, "test_fuse: %d failures\n", failures);
  else printf("test_fuse: ok\n");
  return failures ? 1 : 0;
}
