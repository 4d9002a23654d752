/* tests/ir/test_verify_changed.c — the verifier after each pass checks only the graphs that changed
 * (ir_verify_changed, ir/verify_memo.c): every invalid IR a recorded change (ir_touch, the IR's
 * functions) makes must still fail, in the changed graph and in an unchanged body reading a value
 * of a changed graph around it; IR_VERIFY_ALL checks every graph; IR_VERIFY_AUDIT finds a change
 * made without ir_touch. */
#include "testutil.h"

typedef struct {
  Graph *g;
  Value *a, *late;  /* an input of g; a value of g after both calls */
  Node *c1, *c2;    /* two calls of g */
  Value *cap;       /* exp(a) in c2's body: a read of g's input (a capture) */
} Prog;

static Prog build(Arena *A) {
  Prog p = {.g = ir_graph_new(A, NULL)};
  p.a = t_input(p.g, "a", DT_F32, S(1, 4));
  p.c1 = t_call(A, p.g, p.a);
  p.c2 = t_call(A, p.g, p.a);
  p.late = t_op1(p.g, OP_EXP, p.c2->out[0], NULL);
  ir_add_result(p.g, p.late, "y");
  p.cap = t_op1(p.c2->body, OP_EXP, p.a, NULL);
  ir_add_result(p.c2->body, p.cap, NULL); /* c2's body yields it too: c2 gets the output for it */
  Node *c = p.c2;
  Value **out = ARENA_ARRAY(A, Value *, 2);
  out[0] = c->out[0];
  out[1] = ARENA_NEW(A, Value);
  *out[1] = *c->out[0];
  out[1]->idx = 1;
  out[1]->id = p.g->next_value_id++;
  c->out = out;
  c->nout = 2;
  CHECK(ir_infer(c));
  CHECK(ir_verify(p.g, "the program"));
  return p;
}

int main(void) {
  Arena A;
  arena_init(&A);
  fprintf(stderr, "(expected verifier messages follow)\n");

  /* a recorded change in a body: caught there */
  Prog p = build(&A);
  CHECK(ir_verify_changed(p.g, "build", 0));
  CHECK(ir_verify_changed(p.g, "nothing", 0)); /* unchanged: nothing to verify, still valid */
  Node *en = p.cap->def;
  en->in[0] = p.c1->body->results[0]; /* a value of the sibling body */
  ir_touch(p.c2->body);
  CHECK(!ir_verify_changed(p.g, "a sibling's value", 0));
  en->in[0] = p.a;
  ir_touch(p.c2->body);
  CHECK(ir_verify_changed(p.g, "mended", 0));

  /* a body unchanged, the graph around it changed: its read of g's input, now defined after the
   * region (g reordered), caught by the body's recorded reads */
  p = build(&A);
  CHECK(ir_verify_changed(p.g, "build", 0));
  Node *an = p.a->def; /* a's node moved to the end of g; the calls read it: c1 and c2 fail as well */
  ir_drop_node(p.g, an);
  p.g->nodes[p.g->nnodes++] = an;
  CHECK(!ir_verify_changed(p.g, "input after its readers", 0));

  /* only the capture out of scope: a second input b read by the body alone, moved after the call */
  p = build(&A);
  Value *b = t_input(p.g, "b", DT_F32, S(1, 4));
  ir_move_last(p.g, 0);
  en = p.cap->def;
  en->in[0] = b;
  ir_touch(p.c2->body);
  CHECK(ir_verify_changed(p.g, "build", 0));
  Node *bn = b->def;
  ir_drop_node(p.g, bn);
  p.g->nodes[p.g->nnodes++] = bn; /* g changed (recorded), the body not */
  CHECK(!ir_verify_changed(p.g, "a capture defined after its region", 0));
  CHECK(!ir_verify(p.g, "the same, all of it"));

  /* a captured value's memory space changed in g (recorded there): the unchanged body's device node
   * reads host memory (b: read by the body alone, so only the body's recorded reads see it) */
  p = build(&A);
  b = t_input(p.g, "b", DT_F32, S(1, 4));
  ir_move_last(p.g, 0);
  p.cap->def->in[0] = b;
  ir_touch(p.c2->body);
  CHECK(ir_verify_changed(p.g, "build", 0));
  b->host = true;
  ir_touch(p.g);
  CHECK(!ir_verify_changed(p.g, "a capture moved to the host", 0));
  b->host = false;
  ir_touch(p.g);
  CHECK(ir_verify_changed(p.g, "back on the device", 0));

  /* a change not recorded: not seen by the changed graphs' verification, seen by every graph's
   * (IR_VERIFY_ALL, and the pipeline's last verification, ir_verify) and by the audit */
  p = build(&A);
  CHECK(ir_verify_changed(p.g, "build", IR_VERIFY_AUDIT));
  en = p.cap->def;
  en->in[0] = p.late; /* a value of g defined after the region: invalid */
  CHECK(!ir_verify_changed(p.g, "unrecorded, audit", IR_VERIFY_AUDIT));
  CHECK(!ir_verify_changed(p.g, "unrecorded, all", IR_VERIFY_ALL));
  CHECK(!ir_verify(p.g, "unrecorded, full"));
  en->in[0] = p.a;
  CHECK(ir_verify_changed(p.g, "mended", IR_VERIFY_ALL | IR_VERIFY_AUDIT));
  /* the audit finds an unrecorded change even where it is valid */
  en->in[0] = p.c1->out[0]; /* an earlier region's output: fine */
  CHECK(ir_verify(p.g, "valid"));
  CHECK(!ir_verify_changed(p.g, "valid but unrecorded", IR_VERIFY_AUDIT));
  ir_touch(p.c2->body);
  CHECK(ir_verify_changed(p.g, "recorded", IR_VERIFY_AUDIT));

  /* a recorded change of a value's type in the top graph: a sharding naming no mesh axis */
  p = build(&A);
  CHECK(ir_verify_changed(p.g, "build", 0));
  p.late->sharding.split[0] = 9;
  ir_touch(p.g);
  CHECK(!ir_verify_changed(p.g, "bad axis", 0));
  p.late->sharding.split[0] = -1;
  ir_touch(p.g);
  CHECK(ir_verify_changed(p.g, "fine", 0));

  arena_free(&A);
  return t_done("test_verify_changed");
}
