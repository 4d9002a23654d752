/* tests/report/test_verify_comm.c — the verify pass's check on hand-built rank classes.
 *
 * Each case builds per-class programs with the IR builder, assigns classes to ranks of a mesh,
 * and asserts that verify_collectives accepts consistent programs and rejects each kind of
 * mismatch (element count, reduction, order, dtype, a repeat that runs fewer iterations, a
 * send without its receive, a mismatch that only the combined dp x cp group of an all-reduce
 * over both sees), naming the rank, the group and the collective index. Exits 1 on
 * any failed expectation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "tb.h"
#include "verify_comm.h"

static int failures;

static void expect(bool cond, const char *what, const char *msg) {
  if (!cond) {
    fprintf(stderr, "FAIL %s\n  message: %s\n", what, msg);
    failures++;
  }
}

/* verify_collectives with the expectation ok / not ok and substrings the message must hold. */
static void check(const char *what, const MeshMap *mm, const Graph *const *progs, int ncls, const int *cls,
                  bool want_ok, const char *const *needles) {
  char msg[2048];
  bool ok = verify_collectives(mm, progs, ncls, cls, msg, sizeof msg);
  if (ok != want_ok) {
    fprintf(stderr, "FAIL %s: verify says %s, want %s\n  message: %s\n", what, ok ? "ok" : "mismatch",
            want_ok ? "ok" : "mismatch", msg);
    failures++;
    return;
  }
  for (int i = 0; needles && needles[i]; i++) {
    char w[256];
    snprintf(w, sizeof w, "%s: message names '%s'", what, needles[i]);
    expect(strstr(msg, needles[i]) != NULL, w, msg);
  }
  fprintf(stderr, "  %-44s %s%s\n", what, ok ? "consistent" : "caught: ", ok ? "" : msg);
}

static Value *all_reduce(Graph *g, Value *x, int axis, ReduceOp red) {
  Attrs a = {.mesh_axis = axis, .reduce = red};
  return tb_op1(g, OP_ALL_REDUCE, x, &a);
}

static Value *all_gather(Graph *g, Value *x, int axis, int degree) {
  Attrs a = {.mesh_axis = axis, .axis = 0};
  Shape s = x->shape;
  s.dim[0] *= degree;
  return tb_shaped(g, OP_ALL_GATHER, 1, &x, x->dtype, s, &a);
}

/* x = input f32[rows, 8]; all_reduce over tp (red); all_gather over dp (degree 2). */
static Graph *prog_ar_ag(Arena *ar, int rows, ReduceOp red, DType dt) {
  Graph *g = ir_graph_new(ar, NULL);
  Value *x = tb_input(g, "x", dt, tb_shape(2, rows, 8));
  Value *y = all_reduce(g, x, RT_AX_TP, red);
  ir_add_result(g, all_gather(g, y, RT_AX_DP, 2), "y");
  return g;
}

/* x = input f32[rows, 8]; all_reduce over dp x cp (one group: Attrs.mesh_with). */
static Graph *prog_dpcp(Arena *ar, int rows) {
  Graph *g = ir_graph_new(ar, NULL);
  Value *x = tb_input(g, "x", DT_F32, tb_shape(2, rows, 8));
  Attrs a = {.mesh_axis = RT_AX_DP, .mesh_with = 1u << RT_AX_CP, .reduce = RED_SUM};
  ir_add_result(g, tb_op1(g, OP_ALL_REDUCE, x, &a), "y");
  return g;
}

/* all_gather over tp first, then all_reduce over tp. */
static Graph *prog_ag_ar(Arena *ar) {
  Graph *g = ir_graph_new(ar, NULL);
  Value *x = tb_input(g, "x", DT_F32, tb_shape(2, 4, 8));
  Value *z = all_gather(g, x, RT_AX_TP, 2);
  Value *y = all_reduce(g, x, RT_AX_TP, RED_SUM);
  ir_add_result(g, z, "z");
  ir_add_result(g, y, "y");
  return g;
}

static Graph *prog_ar_then_ag_tp(Arena *ar) {
  Graph *g = ir_graph_new(ar, NULL);
  Value *x = tb_input(g, "x", DT_F32, tb_shape(2, 4, 8));
  Value *y = all_reduce(g, x, RT_AX_TP, RED_SUM);
  Value *z = all_gather(g, x, RT_AX_TP, 2);
  ir_add_result(g, z, "z");
  ir_add_result(g, y, "y");
  return g;
}

/* repeat `count` { carry = all_reduce(carry) over tp }, then one all_gather over tp. */
static Graph *prog_repeat(Arena *ar, int64_t count, bool reverse) {
  Graph *g = ir_graph_new(ar, NULL);
  Value *x = tb_input(g, "x", DT_F32, tb_shape(2, 4, 8));
  Graph *body = ir_graph_new(ar, g);
  Node *arg = ir_add_arg(body, DT_F32, tb_shape(2, 4, 8), "h");
  ir_add_result(body, all_reduce(body, arg->out[0], RT_AX_TP, RED_SUM), NULL);
  Node *rep = tb_repeat(g, body, 1, &x, count, 1, 0, "layers");
  rep->a.reverse = reverse;
  ir_add_result(g, all_gather(g, rep->out[0], RT_AX_TP, 2), "y");
  return g;
}

static Graph *prog_send(Arena *ar, int tag, int rows) {
  Graph *g = ir_graph_new(ar, NULL);
  Value *x = tb_input(g, "x", DT_F32, tb_shape(2, rows, 8));
  Attrs a = {.mesh_axis = RT_AX_PP, .start = 1, .tag = tag};
  tb_node(g, OP_SEND, 1, &x, 0, &a);
  return g;
}

static Graph *prog_recv(Arena *ar, int tag, int rows) {
  Graph *g = ir_graph_new(ar, NULL);
  Attrs a = {.mesh_axis = RT_AX_PP, .start = -1, .tag = tag};
  ir_add_result(g, tb_shaped(g, OP_RECV, 0, NULL, DT_F32, tb_shape(2, rows, 8), &a), "x");
  return g;
}

/* A cp ring's K/V passing: recv from cp - 1, send to cp + 1, alternating, three of each; the
 * tags of the sends and receives given (a rank whose tags differ is a class of its own). */
static Graph *prog_ring(Arena *ar, const int *send_tags, const int *recv_tags) {
  Graph *g = ir_graph_new(ar, NULL);
  Value *x = tb_input(g, "x", DT_F32, tb_shape(2, 4, 8));
  for (int i = 0; i < 3; i++) {
    Attrs ra = {.mesh_axis = RT_AX_CP, .start = -1, .tag = recv_tags[i]};
    Value *y = tb_shaped(g, OP_RECV, 0, NULL, DT_F32, tb_shape(2, 4, 8), &ra);
    Attrs sa = {.mesh_axis = RT_AX_CP, .start = 1, .tag = send_tags[i]};
    tb_node(g, OP_SEND, 1, &x, 0, &sa);
    x = y;
  }
  ir_add_result(g, x, "x");
  return g;
}

/* repeat `count` { recv from cp - 1; send to cp + 1 } (the ring's hops in a loop), then an
 * all_reduce over cp */
static Graph *prog_ring_loop(Arena *ar, int64_t count, int tag) {
  Graph *g = ir_graph_new(ar, NULL);
  Value *x = tb_input(g, "x", DT_F32, tb_shape(2, 4, 8));
  Graph *body = ir_graph_new(ar, g);
  Node *arg = ir_add_arg(body, DT_F32, tb_shape(2, 4, 8), "h");
  Attrs ra = {.mesh_axis = RT_AX_CP, .start = -1, .tag = tag};
  Value *y = tb_shaped(body, OP_RECV, 0, NULL, DT_F32, tb_shape(2, 4, 8), &ra);
  Attrs sa = {.mesh_axis = RT_AX_CP, .start = 1, .tag = tag};
  tb_node(body, OP_SEND, 1, &arg->out[0], 0, &sa);
  ir_add_result(body, y, NULL);
  Node *rep = tb_repeat(g, body, 1, &x, count, 1, 0, "hops");
  ir_add_result(g, all_reduce(g, rep->out[0], RT_AX_CP, RED_SUM), "y");
  return g;
}

int main(void) {
  Arena ar;
  arena_init(&ar);
  MeshMap m4; /* dp 2 x tp 2: ranks 0,1 | 2,3 are tp groups; 0,2 | 1,3 dp groups */
  if (!rt_mesh_init(&m4, 2, 1, 1, 2, 4)) die("mesh");

  fprintf(stderr, "dp 2 x tp 2:\n");
  Graph *a = prog_ar_ag(&ar, 4, RED_SUM, DT_F32);
  Graph *a2 = prog_ar_ag(&ar, 4, RED_SUM, DT_F32); /* the same program built twice: equal by content */
  {
    const Graph *p[] = {a};
    int cls[4] = {0};
    check("one SPMD program", &m4, p, 1, cls, true, NULL);
  }
  {
    const Graph *p[] = {a, a2};
    int cls[4] = {0, 1, 1, 0};
    check("two classes, same collectives", &m4, p, 2, cls, true, NULL);
  }
  {
    const Graph *p[] = {a, prog_ar_ag(&ar, 4, RED_MAX, DT_F32)};
    int cls[4] = {0, 0, 0, 1}; /* rank 3 reduces with max: its tp group [2,3] disagrees; dp agrees */
    const char *n[] = {"tp group [2,3]", "#0", "rank 2", "rank 3", "sum", "max", NULL};
    check("reduction differs (rank 3)", &m4, p, 2, cls, false, n);
  }
  {
    const Graph *p[] = {a, prog_ar_ag(&ar, 2, RED_SUM, DT_F32)};
    int cls[4] = {0, 1, 0, 0}; /* rank 1's buffers are half the size: the dp group [1,3] sees it first */
    const char *n[] = {"dp group [1,3]", "rank 1", "rank 3", "64 x f32", "32 x f32", NULL};
    check("element count differs (rank 1)", &m4, p, 2, cls, false, n);
  }
  {
    const Graph *p[] = {a, prog_ar_ag(&ar, 4, RED_SUM, DT_F64)};
    int cls[4] = {0, 0, 1, 0};
    const char *n[] = {"rank 2", "f64", "f32", NULL};
    check("dtype differs (rank 2)", &m4, p, 2, cls, false, n);
  }
  {
    const Graph *p[] = {prog_ar_then_ag_tp(&ar), prog_ag_ar(&ar)};
    int cls[4] = {0, 1, 0, 1};
    const char *n[] = {"tp group [0,1]", "#0", "all_reduce", "all_gather", NULL};
    check("order differs (ranks 1, 3)", &m4, p, 2, cls, false, n);
  }
  {
    const Graph *p[] = {prog_repeat(&ar, 3, false), prog_repeat(&ar, 2, false)};
    int cls[4] = {0, 1, 0, 0}; /* rank 1 runs the loop twice: its #2 is the all_gather */
    const char *n[] = {"tp group [0,1]", "#2", "iteration 2", "in layers", "all_gather", NULL};
    check("repeat runs 2 iterations instead of 3", &m4, p, 2, cls, false, n);
  }
  {
    const Graph *p[] = {prog_repeat(&ar, 3, false), prog_repeat(&ar, 3, true)};
    int cls[4] = {0, 1, 1, 0}; /* a reverse loop issues the same sequence */
    check("reverse repeat, same sequence", &m4, p, 2, cls, true, NULL);
  }
  {
    VerifyCollSeq s = {0};
    verify_expand(prog_repeat(&ar, 5, true), &s);
    bool ok = s.n == 6 && s.e[0].iter == 4 && s.e[4].iter == 0 && s.e[5].iter == -1 && s.e[5].op == OP_ALL_GATHER &&
              s.e[0].numel == 32 && s.e[5].numel == 64;
    expect(ok, "expansion of repeat x5 reverse: 5 all_reduces (iterations 4..0) then the all_gather", "");
    verify_seq_free(&s);
  }

  fprintf(stderr, "dp 2 x cp 2 (the gradients' all-reduce over the combined group):\n");
  MeshMap mc; /* rank = dp_i * 2 + cp_i: dp groups [0,2] [1,3], cp groups [0,1] [2,3], dp*cp [0,1,2,3] */
  if (!rt_mesh_init(&mc, 2, 1, 2, 1, 4)) die("mesh");
  {
    const Graph *p[] = {prog_dpcp(&ar, 4)};
    int cls[4] = {0};
    check("one SPMD program", &mc, p, 1, cls, true, NULL);
  }
  {
    /* ranks 1 and 3 (cp 1) reduce half the elements over dp x cp: each dp group ([0,2], [1,3])
     * agrees within itself; only the combined group [0,1,2,3] holds both */
    const Graph *p[] = {prog_dpcp(&ar, 4), prog_dpcp(&ar, 2)};
    int cls[4] = {0, 1, 0, 1};
    const char *n[] = {"dp*cp group [0,1,2,3]", "#0 over dp*cp", "rank 0", "rank 1", "all_reduce over dp*cp", "32 x f32",
                       NULL};
    check("element count differs within dp x cp only", &mc, p, 2, cls, false, n);
  }
  {
    /* rank 3 reduces over dp alone where its peers reduce over dp x cp */
    Graph *q = ir_graph_new(&ar, NULL);
    Value *x = tb_input(q, "x", DT_F32, tb_shape(2, 4, 8));
    ir_add_result(q, all_reduce(q, all_reduce(q, x, RT_AX_DP, RED_SUM), RT_AX_CP, RED_SUM), "y");
    const Graph *p[] = {prog_dpcp(&ar, 4), q};
    int cls[4] = {0, 0, 0, 1};
    const char *n[] = {"dp group [1,3]", "rank 1", "rank 3", "issues all_reduce over dp sum", NULL};
    check("over dp alone instead of dp x cp (rank 3)", &mc, p, 2, cls, false, n);
  }

  fprintf(stderr, "pp 2 (point to point):\n");
  MeshMap m2;
  if (!rt_mesh_init(&m2, 1, 2, 1, 1, 2)) die("mesh");
  {
    const Graph *p[] = {prog_send(&ar, 7, 4), prog_recv(&ar, 7, 4)};
    int cls[2] = {0, 1};
    check("send meets its receive", &m2, p, 2, cls, true, NULL);
  }
  {
    const Graph *p[] = {prog_send(&ar, 7, 4), prog_recv(&ar, 8, 4)};
    int cls[2] = {0, 1};
    const char *n[] = {"rank 0", "rank 1", "tag 7", "tag 8", NULL};
    check("receive with another tag", &m2, p, 2, cls, false, n);
  }
  {
    const Graph *p[] = {prog_send(&ar, 7, 4), prog_recv(&ar, 7, 4)};
    int cls[2] = {1, 0}; /* stages swapped: the first receives from before the pipeline */
    const char *n[] = {"rank 0", "no rank lies at that offset", NULL};
    check("receive from before the first stage", &m2, p, 2, cls, false, n);
  }

  fprintf(stderr, "cp 4 ring (point to point, modulo the degree):\n");
  MeshMap mr; /* ranks 0..3 = cp 0..3; rank r receives from r - 1 and sends to r + 1 (mod 4) */
  if (!rt_mesh_init(&mr, 1, 1, 4, 1, 4)) die("mesh");
  {
    static const int t[] = {1, 1, 1};
    const Graph *p[] = {prog_ring(&ar, t, t)};
    int cls[4] = {0};
    check("one SPMD ring", &mr, p, 1, cls, true, NULL);
  }
  {
    /* ranks 1 and 3 receive a 9 as their #1 and send a 9 as their #2: rank 0's receives from
     * rank 3 fail at #2 (its 5th transfer), its sends to rank 1 at #1 (its 4th): the first in
     * rank 0's order is the send, though its receives come first in the sequence */
    static const int t[] = {1, 1, 1}, s1[] = {1, 1, 9}, r1[] = {1, 9, 1};
    const Graph *p[] = {prog_ring(&ar, t, t), prog_ring(&ar, s1, r1)};
    int cls[4] = {0, 1, 0, 1};
    const char *n[] = {"rank 0 (dp 0, pp 0, cp 0, tp 0) issues send over cp", "offset +1 tag 1", "(its #1 with that peer)",
                       "rank 1 (dp 0, pp 0, cp 1, tp 0) issues recv over cp", "offset -1 tag 9", NULL};
    check("ring: the first failing transfer in order", &mr, p, 2, cls, false, n);
  }
  {
    /* only rank 2 differs (sends a 9 as its #0): rank 1 is consistent with rank 2's receives, so
     * the first failing rank is 2 itself, its #0 send to rank 3 */
    static const int t[] = {1, 1, 1}, s2[] = {9, 1, 1};
    const Graph *p[] = {prog_ring(&ar, t, t), prog_ring(&ar, s2, t)};
    int cls[4] = {0, 0, 1, 0};
    const char *n[] = {"rank 2 (dp 0, pp 0, cp 2, tp 0) issues send", "tag 9", "(its #0 with that peer)", "rank 3 (", NULL};
    check("ring: one rank sends another tag", &mr, p, 2, cls, false, n);
  }

  {
    const Graph *p[] = {prog_ring_loop(&ar, 5, 1)};
    int cls[4] = {0};
    check("ring in a loop of 5", &mr, p, 1, cls, true, NULL);
  }
  {
    /* rank 2 runs 4 hops: rank 1's 5th send (iteration 4) meets nothing at rank 2 */
    const Graph *p[] = {prog_ring_loop(&ar, 5, 1), prog_ring_loop(&ar, 4, 1)};
    int cls[4] = {0, 0, 1, 0};
    const char *n[] = {"rank 1 (dp 0, pp 0, cp 1, tp 0) issues send", "in hops, iteration 4", "(its #4 with that peer)",
                       "rank 2 (", "issues nothing", NULL};
    check("ring loop: one rank runs a hop less", &mr, p, 2, cls, false, n);
  }
  {
    /* the same loop, another tag on rank 3: rank 0's first receive, from rank 3, fails (iteration 0) */
    const Graph *p[] = {prog_ring_loop(&ar, 5, 1), prog_ring_loop(&ar, 5, 2)};
    int cls[4] = {0, 0, 0, 1};
    const char *n[] = {"rank 0 (dp 0, pp 0, cp 0, tp 0) issues recv", "iteration 0", "(its #0 with that peer)",
                       "rank 3 (dp 0, pp 0, cp 3, tp 0) issues send", "tag 2", NULL};
    check("ring loop: one rank's tag", &mr, p, 2, cls, false, n);
  }

  fprintf(stderr, "dp 128 x tp 8 = 1024 ranks:\n");
  MeshMap big;
  if (!rt_mesh_init(&big, 128, 1, 1, 8, 8)) die("mesh");
  int *cls = calloc(1024, sizeof *cls);
  if (!cls) die("oom");
  {
    const Graph *p[] = {prog_repeat(&ar, 96, false)};
    check("one program, 96-layer loop", &big, p, 1, cls, true, NULL);
  }
  {
    for (int r = 0; r < 1024; r++) cls[r] = r % 8 == 5 && r / 8 == 77 ? 1 : 0; /* rank 621 = dp 77, tp 5 */
    const Graph *p[] = {prog_repeat(&ar, 96, false), prog_repeat(&ar, 95, false)};
    const char *n[] = {"rank 621 (dp 77, pp 0, cp 0, tp 5)", "#95", NULL};
    check("one rank of 1024 runs 95 layers", &big, p, 2, cls, false, n);
  }
  free(cls);
  arena_free(&ar);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  fprintf(stderr, "verify catches every mismatch\n");
  return 0;
}
