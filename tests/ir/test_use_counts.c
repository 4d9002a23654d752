/* tests/ir/test_use_counts.c — the IR's read counts: ir_use_counts_outer (each body's reads of the values
 * around it found once, a shared body's added once per owner, a memo kept while ir_touch says the body is
 * unchanged, or an edit among the body's own values kept by ir_use_memo_keep) against ir_use_counts, and
 * ir_count_uses_n against ir_count_uses / ir_count_uses_deep. */
#include "testutil.h"
#include "ptrmap.h"

static intptr_t count_of(const PtrMap *m, const void *v) {
  intptr_t c = 0;
  ptrmap_get(m, v, &c);
  return c;
}

/* ir_use_counts_outer(g) is ir_use_counts(g) for every value of g (none of g's bodies' own values). */
static void check_like_use_counts(const Graph *g, const PtrMap *outer) {
  PtrMap all = {0};
  ir_use_counts(g, &all);
  int own = 0;
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i]->nout; k++) {
      const Value *v = g->nodes[i]->out[k];
      CHECK(count_of(outer, v) == count_of(&all, v));
      own += count_of(outer, v) > 0;
    }
  CHECK(own == outer->count); /* (nothing else: g is the top graph) */
  ptrmap_free(&all);
}

int main(void) {
  Arena A;
  arena_init(&A);
  Graph *g = ir_graph_new(&A, NULL);
  Value *a = t_input(g, "a", DT_F32, S(1, 4)), *b = t_input(g, "b", DT_F32, S(1, 4));
  Node *c1 = t_call(&A, g, a), *c2 = t_call(&A, g, b);
  Value *cap = t_op1(c2->body, OP_EXP, a, NULL); /* c2's body reads a (a capture) */
  Node *inner = t_call(&A, c2->body, cap);         /* and a body in it reads a and b */
  Value *in2 = t_op2(inner->body, OP_ADD, a, b, NULL);
  (void)t_op1(g, OP_EXP, c1->out[0], NULL);
  Node *c3 = t_call(&A, g, a);
  c3->body = c2->body; /* c3 shares c2's body (the pipeline's instructions do): its reads count twice */

  PtrMap outer = {0};
  ir_use_counts_outer(g, &outer, false, NULL);
  check_like_use_counts(g, &outer);
  CHECK(count_of(&outer, a) == 1 + 1 + 2 * (1 + 1)); /* c1, c3; in the shared body and its inner one, twice */
  CHECK(count_of(&outer, b) == 1 + 2 * 1);
  CHECK(count_of(&outer, cap) == 0); /* a body's own value: not counted */
  ptrmap_free(&outer);

  /* only_keys: the keys alone, counted on top of their values */
  PtrMap keys = {0};
  ptrmap_put(&keys, b, 10);
  ir_use_counts_outer(g, &keys, true, NULL);
  CHECK(keys.count == 1 && count_of(&keys, b) == 10 + 3);
  ptrmap_free(&keys);

  /* a memo: a change recorded by ir_touch is seen; one made without it is not (the contract) */
  IrUseMemo *memo = ir_use_memo_new();
  PtrMap m1 = {0};
  ir_use_counts_outer(g, &m1, false, memo);
  CHECK(count_of(&m1, b) == 3);
  ptrmap_free(&m1);
  (void)t_op1(inner->body, OP_NEG, b, NULL); /* ir_node_new touches the inner body only */
  ir_use_counts_outer(g, &m1, false, memo);
  check_like_use_counts(g, &m1);
  CHECK(count_of(&m1, b) == 3 + 2);
  ptrmap_free(&m1);
  in2->def->in[1] = a; /* no ir_touch: the memo still answers what it read */
  ir_use_counts_outer(g, &m1, false, memo);
  CHECK(count_of(&m1, b) == 5);
  ptrmap_free(&m1);
  ir_touch(inner->body);
  ir_use_counts_outer(g, &m1, false, memo);
  check_like_use_counts(g, &m1);
  CHECK(count_of(&m1, b) == 3 && count_of(&m1, a) == 8);
  ptrmap_free(&m1);

  /* ir_count_uses_n: both counts of several values (one NULL) in one walk */
  const Value *vs[4] = {a, b, cap, NULL};
  int uses[4], deep[4];
  ir_count_uses_n(c2->body, 4, vs, uses, deep);
  for (int k = 0; k < 3; k++) {
    CHECK(uses[k] == ir_count_uses(c2->body, vs[k]));
    CHECK(deep[k] == ir_count_uses_deep(c2->body, vs[k]));
  }
  CHECK(uses[3] == 0 && deep[3] == 0);
  CHECK(uses[0] == 1 && deep[0] == 3 && uses[2] == 1 && deep[1] == 1);
  ir_count_uses_n(g, 2, vs, uses, NULL);
  CHECK(uses[0] == ir_count_uses(g, a) && uses[1] == ir_count_uses(g, b));
  /* ir_use_memo_keep: an edit of a body among its own values keeps the list current (not walked again: a
   * change made without ir_touch after the keep is not seen); a keep from a version the list was not current
   * at keeps nothing (the edit before it is seen) */
  uint64_t v0 = inner->body->version;
  (void)t_op1(inner->body, OP_EXP, in2, NULL); /* reads in2, the body's own */
  ir_use_memo_keep(memo, inner->body, v0);
  in2->def->in[1] = b; /* (no ir_touch: a kept list does not see it) */
  ir_use_counts_outer(g, &m1, false, memo);
  CHECK(count_of(&m1, b) == 3 && count_of(&m1, a) == 8);
  ptrmap_free(&m1);
  ir_touch(inner->body); /* (now seen: b read again in the inner body, a once less) */
  v0 = inner->body->version;
  (void)t_op1(inner->body, OP_NEG, a, NULL);
  ir_use_memo_keep(memo, inner->body, v0); /* (not the version the list was current at: ignored) */
  ir_use_counts_outer(g, &m1, false, memo);
  check_like_use_counts(g, &m1);
  CHECK(count_of(&m1, b) == 1 + 2 * 2 && count_of(&m1, a) == 1 + 1 + 2 * (1 + 2));
  ptrmap_free(&m1);
  ir_use_memo_free(memo);
  return t_done("test_use_counts");
}
