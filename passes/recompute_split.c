/* passes/recompute_split.c — `zb_w hold(N)`: zb's W holding B's recomputed values for the last N layers
 * of each stage's layer loop only (passes/recompute.c's from_b), recomputing them for the others.
 *
 * A loop's stacked output is one row per iteration: W's hold of B's values (a stacked output of B read
 * by W) cannot cover some layers of one loop and not the others. So, before the pairs are recomputed,
 * each zb triple of a stage's layer loops (the forward F, its backward B, B's weight-gradient half W:
 * passes/pipe_split.c) of C > N iterations is cut at row k = C - N into two triples, over the layers
 * [0, k) (lo) and [k, C) (hi). A loop R over C rows becomes two clones of it over their rows, run in
 * R's order (forward: lo then hi; reverse: hi then lo), the first's carries the second's initial ones;
 * each reads its rows of R's stacked inputs (a dim-0 slice: a row view in the memory plan,
 * passes/memplan_views.c) and R's stacked outputs are the two parts' concatenated along dim 0 (the
 * parts placed in their rows where the memory plan can: memplan_rows_node). A slice of such a concat
 * that is exactly one part's rows (B reading F's residuals, W reading B's hand-off and F's residuals,
 * a running gradient sum read by the next micro-batch's W) reads that part itself, so each half is a
 * triple of its own (recompute.c pairs it as any: the same counts, the loops reading each other's
 * outputs) and the concats and slices left unread are dropped. The lo triple's W recomputes, the hi's
 * holds (Rc's lo set). The same ops on the same rows in the same order: the results are the unsplit
 * loops' to the bit (test_pp_equiv's run_zb_w). The first loop of each cut continues in the second (Node.cont,
 * the second's cont_of): under ZeRO-2/3 its last iteration's deferred scatter waits go into the second's first
 * iteration as one loop's would (passes/zero_defer.c, memplan_defer.c; test_pp_equiv_cut).
 */
#include <string.h>

#include "clone.h"
#include "diag.h"
#include "passes.h"
#include "ptrmap.h"
#include "recompute_int.h"

typedef struct {
  Graph *g;
  PtrMap *lo;   /* the lo parts of the split B and W loops (their W recomputes) */
  PtrMap cats;  /* the concats made here (Node *) */
  PtrMap made;  /* every node made here: slices and concats (dropped when unread) */
  PtrMap map;   /* R's outputs -> their new values */
} Sp;

static void mark_new(Sp *s, Node *n, const Node *R) {
  n->stage = R->stage, n->stageset = R->stageset, n->instr = R->instr;
  ptrmap_put(&s->made, n, 1);
}

/* Rows [start, start + len) of stacked x, a slice along dim 0 predicated like R. */
static Value *rows_of(Sp *s, Value *x, int64_t start, int64_t len, const Node *R) {
  Attrs sa = {0};
  sa.axis = 0, sa.start = start, sa.len = len;
  Shape sh = x->shape;
  sh.dim[0] = len;
  Value *y = ir_emit(s->g, OP_SLICE, 1, &x, x->dtype, sh, &sa, R->loc);
  y->sharding = x->sharding;
  mark_new(s, y->def, R);
  return y;
}

/* A clone of R over its rows [start, start + len), its carries' initial values carry[..]. */
static Node *part(Sp *s, const Node *R, int64_t start, int64_t len, Value *const *carry) {
  int nc = R->a.ncarry, nx = R->a.nxs;
  Value **in = ARENA_ARRAY(s->g->arena, Value *, R->nin + 1);
  for (int j = 0; j < R->nin; j++)
    in[j] = j < nc ? carry[j] : j < nc + nx ? rows_of(s, R->in[j], start, len, R) : R->in[j];
  PtrMap memo = {0};
  Node *c = ir_clone_node(s->g, R, in, &memo);
  ptrmap_free(&memo);
  c->a.count = len;
  c->stage = R->stage, c->stageset = R->stageset, c->instr = R->instr;
  for (int k = nc; k < c->nout; k++) c->out[k]->shape.dim[0] = len;
  return c;
}

/* Splits loop R (at position pos of g) at row k; returns the lo part. */
static Node *split(Sp *s, Node *R, int pos, int64_t k) {
  Graph *g = s->g;
  int n0 = g->nnodes, nc = R->a.ncarry;
  int64_t C = R->a.count;
  bool rev = R->a.reverse;
  Node *first = part(s, R, rev ? k : 0, rev ? C - k : k, R->in);
  Node *second = part(s, R, rev ? 0 : k, rev ? k : C - k, first->out);
  Node *lo = rev ? second : first, *hi = rev ? first : second;
  first->cont = second, second->cont_of = first; /* (the second's rows continue the first's: one loop's iterations, cut) */
  for (int j = 0; j < R->nout; j++) {
    Value *to = second->out[j];
    if (j >= nc) {
      Value *two[2] = {lo->out[j], hi->out[j]};
      Attrs ca = {0};
      ca.axis = 0;
      to = ir_emit(g, OP_CONCAT, 2, two, R->out[j]->dtype, R->out[j]->shape, &ca, R->loc);
      to->sharding = R->out[j]->sharding;
      to->name = R->out[j]->name;
      mark_new(s, to->def, R);
      ptrmap_put(&s->cats, to->def, 1);
    }
    ptrmap_put(&s->map, R->out[j], (intptr_t)to);
  }
  /* the new nodes where R was, in their order; R gone */
  ir_drop_node(g, R);
  for (int t = n0 - 1; t < g->nnodes; t++) ir_move_last(g, pos); /* (each the last to pos: their order kept) */
  return lo;
}

/* A slice read of one part of a concat made here: that part. */
static void short_cut(Sp *s) {
  PtrMap to = {0};
  for (int i = 0; i < s->g->nnodes; i++) {
    Node *n = s->g->nodes[i];
    intptr_t one;
    if (n->op != OP_SLICE || n->a.axis != 0 || !ptrmap_get(&s->cats, n->in[0]->def, &one)) continue;
    Node *c = n->in[0]->def;
    int64_t at = 0;
    for (int j = 0; j < c->nin; at += c->in[j]->shape.dim[0], j++)
      if (at == n->a.start && c->in[j]->shape.dim[0] == n->a.len) ptrmap_put(&to, n->out[0], (intptr_t)c->in[j]);
  }
  ir_replace_uses_map_deep(s->g, &to);
  ptrmap_free(&to);
}

/* Drops the nodes made here that nothing reads, until none. */
static void drop_unread(Sp *s) {
  for (bool more = true; more;) {
    more = false;
    PtrMap uses = {0};
    ir_use_counts(s->g, &uses);
    for (int i = s->g->nnodes - 1; i >= 0; i--) {
      Node *n = s->g->nodes[i];
      intptr_t k = 0;
      if (!ptrmap_get(&s->made, n, &k) || ptrmap_get(&uses, n->out[0], &k) || ir_is_result(s->g, n->out[0])) continue;
      ir_drop_node(s->g, n);
      more = true;
    }
    ptrmap_free(&uses);
  }
}

int recompute_split_hold(Graph *g, int64_t hold, PtrMap *lo) {
  Sp s = {.g = g, .lo = lo};
  int nsplit = 0;
  /* the loops of the triples to split, marked first (a split makes the pairs unrecognizable until short_cut) */
  PtrMap cut = {0}; /* loop -> 1: F, 2: B or W */
  for (int i = 0; i < g->nnodes; i++) {
    Node *X = g->nodes[i];
    Node *F = X->op == OP_REPEAT ? rc_forward_of(X) : NULL;
    if (!F || !rc_b_of_w(X, F) || X->a.count <= hold) continue; /* (X: a W loop; its B and F with it) */
    ptrmap_put(&cut, X, 2);
    ptrmap_put(&cut, rc_b_of_w(X, F), 2);
    ptrmap_put(&cut, F, 1);
  }
  for (int i = 0; i < g->nnodes; i++) {
    Node *R = g->nodes[i];
    intptr_t kind;
    if (!ptrmap_get(&cut, R, &kind)) continue;
    int n0 = g->nnodes;
    Node *l = split(&s, R, i, R->a.count - hold);
    if (kind == 2) ptrmap_put(lo, l, 1);
    nsplit++;
    /* R's readers read the new values (F's, B's outputs are read by loops still to split: they split
     * the values' rows again, which short_cut resolves) */
    ir_replace_uses_map_deep(g, &s.map);
    ptrmap_free(&s.map);
    memset(&s.map, 0, sizeof s.map);
    i += g->nnodes - n0; /* past the new nodes */
  }
  if (nsplit) {
    short_cut(&s);
    drop_unread(&s);
  }
  ptrmap_free(&cut);
  ptrmap_free(&s.cats);
  ptrmap_free(&s.made);
  return nsplit;
}
