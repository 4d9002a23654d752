/* tests/passes/tb_zero.c — ZeRO-2/3's shape under pipeline parallelism, for the pp tests (test_pp_equiv's
 * uneven stages, test_pp_ileave's interleaved ones): see tb_zero.h. */
#include <stdio.h>
#include <stdlib.h>

#include "commreport.h"
#include "tb.h"
#include "tb_zero.h"
#include "zero.h"

static void expect(bool ok, const char *what, int *failures) {
  if (!ok) {
    fprintf(stderr, "FAIL: %s\n", what);
    (*failures)++;
  }
}


static bool stacked_over_pp(const Value *v) { return v->shape.rank > 0 && v->sharding.split[0] == RT_AX_PP; }

/* dp reduce-scatters inside the bodies of g's loops. */
static int scatters_in_loops(const Graph *g, bool top) {
  int c = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    c += !top && n->op == OP_REDUCE_SCATTER && n->a.mesh_axis == RT_AX_DP;
    if (n->body) c += scatters_in_loops(n->body, false);
  }
  return c;
}

static int stack_gathers(const Graph *g) {
  int c = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    OpKind from = n->nin ? n->in[0]->def->op : OP_COUNT; /* (not ZeRO-1/2's gather of the updated parameter) */
    bool gather = n->op == OP_ALL_GATHER && from != OP_ADAMW_UPDATE && from != OP_SGD_UPDATE;
    c += (gather || n->op == OP_REDUCE_SCATTER) && n->a.mesh_axis == RT_AX_DP && stacked_over_pp(n->out[0]);
    if (n->body) c += stack_gathers(n->body);
  }
  return c;
}

/* The most dp all-gathers in one layer loop's body (0: no split tensor, every one under ZeRO-3's persistence threshold) (its own level) of g's loops. */
static int most_gathers_in_a_loop(const Graph *g, bool top) {
  int most = 0, here = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    here += !top && n->op == OP_ALL_GATHER && n->a.mesh_axis == RT_AX_DP;
    if (n->body) {
      int b = most_gathers_in_a_loop(n->body, false);
      if (b > most) most = b;
    }
  }
  return here > most ? here : most;
}

/* The most dp reduce-scatters in one innermost loop body (a layer's backward: no loop nested in it) of g. */
static int most_scatters_in_a_loop(const Graph *g, bool top) {
  int most = 0, here = 0;
  bool inner = !top;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    here += n->op == OP_REDUCE_SCATTER && n->a.mesh_axis == RT_AX_DP;
    if (n->body) {
      inner = false;
      int b = most_scatters_in_a_loop(n->body, false);
      if (b > most) most = b;
    }
  }
  return inner && here > most ? here : most;
}

int tb_dp_most_scatters_in_a_loop(const Graph *g) { return most_scatters_in_a_loop(g, true); }

int tb_check_zero_coalesced(const Module *m, const char *what) {
  int failures = 0;
  if (m->plan.zero < 2 || m->plan.coalesce != COALESCE_ON || m->mesh->dim[RT_AX_DP] < 2) return 0;
  char msg[320];
  int most;
  if (m->plan.zero >= 3) { /* (ZeRO-2's parameters are whole: no gathers in the loops) */
    most = most_gathers_in_a_loop(m->graph, true);
    snprintf(msg, sizeof msg, "%s, zero 3, coalesce on: %d dp all-gathers in one layer loop's body, want 1 at most", what, most);
    expect(most <= 1, msg, &failures);
  }
  most = most_scatters_in_a_loop(m->graph, true);
  snprintf(msg, sizeof msg, "%s, zero %d, coalesce on: %d dp reduce-scatters in one layer loop's body, want 1 at most", what,
           m->plan.zero, most);
  expect(most <= 1, msg, &failures);
  return failures;
}

/* (Before the gathers moved past the stages' and chunks' row slices, passes/zero.c, an interleaved
 * or uneven stage gathered each chunk's or stage's stack once and held it the whole step, and
 * interleaved uneven stages reduce-scattered their whole stacks' gradients after the last backward:
 * tiny [1, 2, 2, 1] at d 32, 327,680 B gathered at once, 6.4 layers'.) */
int tb_dp_scatters_in_loops(const Graph *g) { return scatters_in_loops(g, true); }

int tb_check_zero_pp(const Module *m, int64_t M, const char *what) {
  const Graph *g = m->graph;
  char msg[320];
  int dp = m->mesh->dim[RT_AX_DP];
  int failures = 0;
  if (m->plan.zero < 2 || dp < 2) return 0;
  int rs = tb_dp_scatters_in_loops(g), whole = stack_gathers(g);
  snprintf(msg, sizeof msg, "%s, zero %d: %d dp reduce-scatters in the backward loops (want >= %lld), %d gathers or scatters of a stage's whole stack (want 0)",
           what, m->plan.zero, rs, (long long)M, whole);
  expect(rs >= M && !whole, msg, &failures);
  failures += tb_check_zero_coalesced(m, what); /* (coalesce on: ZeRO-2's scatters, ZeRO-3's gathers too) */
  if (m->plan.zero < 3) return failures;
  int64_t layer = 0, embed = 0; /* one layer's weights whole (f32), the largest other parameter's */
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op != OP_PARAM) continue;
    const Value *p = n->out[0];
    int64_t b = ir_numel(&p->shape) * 4;
    for (int d = 0; d < p->shape.rank; d++) b *= p->sharding.split[d] == RT_AX_DP ? dp : 1;
    if (stacked_over_pp(p)) layer += b / p->shape.dim[0];
    else if (b > embed) embed = b;
  }
  int n = g->nnodes, *end = calloc((size_t)n + 1, sizeof(int));
  bool *held = calloc((size_t)n + 1, sizeof(bool));
  for (int i = 0; i < n; i++) { /* the gathered values and what is made of them, each to its last reader */
    const Node *x = g->nodes[i];
    bool from = x->op == OP_ALL_GATHER && x->a.mesh_axis == RT_AX_DP;
    if ((x->op == OP_SLICE || x->op == OP_RESHAPE || x->op == OP_CAST) && x->in[0]->def->graph == g)
      for (int k = 0; k < i; k++) from |= held[k] && g->nodes[k] == x->in[0]->def;
    if (!from || ir_is_result(g, x->out[0])) continue;
    held[i] = true;
    end[i] = i;
    for (int k = i + 1; k < n; k++) {
      const Node *r = g->nodes[k];
      bool reads = r->body && ir_reads_deep(r->body, x->out[0]);
      for (int j = 0; j < r->nin; j++) reads |= r->in[j] == x->out[0];
      if (reads) end[i] = k;
    }
  }
  int64_t most = 0;
  for (int t = 0; t < n; t++) {
    int64_t live = 0;
    for (int i = 0; i <= t; i++) live += held[i] && end[i] >= t ? ir_numel(&g->nodes[i]->out[0]->shape) * ir_dtype_size(g->nodes[i]->out[0]->dtype) : 0;
    if (live > most) most = live;
  }
  free(end);
  free(held);
  snprintf(msg, sizeof msg, "%s, zero 3: %lld B of gathered parameters live at once at the top level, want at most 2 layers' %lld B + the embedding's %lld B",
           what, (long long)most, (long long)(2 * layer), (long long)embed);
  expect(most > 0 && most <= 2 * layer + embed, msg, &failures);
  fprintf(stderr, "  %s: %d dp scatters in the loops; gathered at once %lld B (a layer: %lld B)\n", what, rs, (long long)most, (long long)layer);
  return failures;
}


/* Counts g's layer loop bodies' async dp reduce-scatters (nested too): *n, and of them *read those read in
 * their own iteration, *unplaced those without a wait placed in the next (Node.defer_wait). */
static void body_scatters(const Graph *g, bool top, int *n, int *read, int *unplaced) {
  /* a layer loop's body: no loop inside (an accumulation region's holds the backward's); of two layers or more
   * (one, a pipeline stage's or chunk's: waited at its one iteration's end, after the loop, passes/zero_defer.c) */
  bool layers = !top && g->owner->a.count > 1;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) layers = false, body_scatters(g->nodes[i]->body, false, n, read, unplaced);
  for (int i = 0; i < g->nnodes && layers; i++) {
    const Node *x = g->nodes[i];
    if (x->op != OP_REDUCE_SCATTER || !ir_comm_async(x)) continue;
    (*n)++;
    *read += ir_reads_deep(g, x->out[0]);
    *unplaced += !x->defer_wait;
  }
}

int tb_check_scatters_deferred(const Module *m, const char *what) {
  int failures = 0;
  if (m->plan.zero < 2 || m->mesh->dim[RT_AX_DP] * m->mesh->dim[RT_AX_CP] < 2) return 0;
  int n = 0, read = 0, unplaced = 0;
  body_scatters(m->graph, true, &n, &read, &unplaced);
  if (!m->memplan) unplaced = 0;
  char msg[320];
  if (!zero_defers_plan(m)) { /* `defer_waits off`: each waited in its own iteration, none in the next */
    snprintf(msg, sizeof msg, "%s, zero %d, defer_waits off: %d reduce-scatters in backward loops, %d with their wait placed "
             "in the next iteration (want 0)", what, m->plan.zero, n, m->memplan ? n - unplaced : 0);
    expect(n > 0 && (!m->memplan || unplaced == n), msg, &failures);
    return failures;
  }
  snprintf(msg, sizeof msg, "%s, zero %d: %d reduce-scatters in backward loops, %d read in their own iteration, %d without "
           "their wait in the next (want 0, 0)", what, m->plan.zero, n, read, unplaced);
  expect(!read && !unplaced, msg, &failures);
  return failures;
}

/* zb's W loop: a backward layer loop carrying nothing (the weight gradients; B carries the input's) */
static bool is_w_loop(const Node *n, int stage) {
  return n->op == OP_REPEAT && n->stage == stage && n->a.reverse && n->a.ncarry == 0;
}

int tb_check_zero_late(const Module *m, int want, const char *what) {
  const Graph *g = m->graph;
  int late = 0, early = 0, left = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *s = g->nodes[i];
    if (s->op != OP_REDUCE_SCATTER || s->a.mesh_axis != RT_AX_DP || s->stage <= 0 || s->stageset) continue;
    int rd = i + 1; /* its first reader: the running sum's add */
    for (bool found = false; rd < g->nnodes; rd++) {
      for (int j = 0; j < g->nodes[rd]->nin; j++) found |= g->nodes[rd]->in[j]->def == s;
      if (found) break;
    }
    if (rd >= g->nnodes || g->nodes[rd]->op != OP_ADD) continue;
    if (i > 0 && is_w_loop(g->nodes[i - 1], s->stage)) {
      late++;
      continue;
    }
    int b = i - 1; /* its stage's loop before it: B (reverse, carrying the input's gradient), else not a candidate */
    while (b >= 0 && !(g->nodes[b]->op == OP_REPEAT && g->nodes[b]->stage == s->stage)) b--;
    if (b < 0 || !g->nodes[b]->a.reverse || g->nodes[b]->a.ncarry == 0) continue;
    int k = i + 1; /* its stage's next loop, before the reader */
    while (k < rd && !(g->nodes[k]->op == OP_REPEAT && g->nodes[k]->stage == s->stage)) k++;
    if (k < rd && is_w_loop(g->nodes[k], s->stage)) early++;
    else left++;
  }
  int failures = 0;
  char msg[320];
  snprintf(msg, sizeof msg, "%s, zero %d: %d non-layer gradient dp reduce-scatters issued right after zb's W loop (want %d), "
           "%d still issued before it (want 0), %d after a B followed by no W loop", what, m->plan.zero, late, want, early, left);
  expect(late == want && early == 0, msg, &failures);
  if (!failures) fprintf(stderr, "  %s\n", msg);
  return failures;
}
