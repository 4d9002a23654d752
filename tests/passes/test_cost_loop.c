/* tests/passes/test_cost_loop.c — the cost model's loops (passes/cost.c): a repeat's time is two iterations
 * simulated and the second's increments extrapolated over the rest; checked here against every iteration
 * simulated (cost_nodes_clock, full) and against the figures worked out by hand, at loop lengths 1-61.
 *
 * Built graphs, f32 x [64, 64] (16 KiB) on dp 2 x tp 2 with 2 devices a node: tp's collectives go on the in-node
 * channel (0), dp's across nodes (1); a device whose links take 0.2 ms (in node) and 0.1 ms (across) of latency
 * per ring step and its asynchronous collectives wholly hidden (overlap 1). Times a, h, H, e below are each node
 * timed alone (cost_nodes_time). What a channel does after the loop matters only where it is ahead of the
 * compute stream (its backlog: a collective starts at max(compute, channel)), so the two simulations must agree
 * on the compute's time and on each channel's backlog, max(0, channel - compute):
 *
 *   (a) a channel behind the compute at both timed iterations' ends, by different lags: before the loop an
 *       asynchronous dp all-reduce P of 2 MiB (H) leaves channel 1 busy; the body's async dp all-reduce A of x (h)
 *       starts behind it in iteration 1 only, the sync tp all-reduce S (a) follows, then y = S + A (e) waits for A.
 *       Channel 0 lags the compute by H + h + e - a after iteration 1, by e after the others: the loop takes
 *       H + h + e + (N - 1)(a + e), and a tp all-reduce after it starts at once (a more). Extrapolating channel
 *       0's own increment (dt + H + h - a) left it (N - 2)(H + h - a) - e ahead of the compute: a phantom backlog
 *       the tail collective waited for (the bug of 1208237, found on Llama-3-405B pp 8 z2 `defer_waits off`).
 *   (b) a backlog that grows: y = x + x (e) then an async dp all-reduce of y (h > e, stacked, not waited in the
 *       loop): channel 1 ends at e + N h, ahead of the compute's N e; extrapolation must carry it on.
 *   (c) idle channels: a loop of y = x + x alone; the compute's N e, no backlog on either channel. */
#include <math.h>
#include <stdio.h>

#include "cost.h"
#include "diag.h"
#include "mesh.h"
#include "tb.h"

static int failures; /* CHECK (tests/check.h, through tb.h) counts here */

static Module *module(Arena *a, const char *name) {
  Module *m = tb_module(a, name);
  m->mesh = arena_alloc(a, sizeof *m->mesh);
  if (!rt_mesh_init(m->mesh, 2, 1, 1, 2, 2)) die("test_cost_loop: mesh");
  return m;
}

static Value *coll(Graph *g, Value *x, MeshAxis ax) {
  Attrs at = {0};
  at.mesh_axis = ax;
  return tb_op1(g, OP_ALL_REDUCE, x, &at);
}

static double backlog(const CostClock *c, int side) { return fmax(0, c->chan[side] - c->t); }

/* The two simulations of graph g's nodes: the compute's time and each channel's backlog agree (up to rounding of
 * the extrapolation's product); returns the extrapolated clock. */
static CostClock both(const Module *m, const CostDevice *d, const char *what, int64_t n) {
  const Graph *g = m->graph;
  CostClock x, f;
  cost_nodes_clock(m, d, (const Node *const *)g->nodes, g->nnodes, false, &x);
  cost_nodes_clock(m, d, (const Node *const *)g->nodes, g->nnodes, true, &f);
  double tol = 1e-12 * f.t;
  CHECK(fabs(x.t - f.t) <= tol, "%s N %lld: compute %.9g s extrapolated, %.9g every iteration", what, (long long)n,
        x.t, f.t);
  for (int side = 0; side < 2; side++)
    CHECK(fabs(backlog(&x, side) - backlog(&f, side)) <= tol,
          "%s N %lld: channel %d's backlog %.9g s extrapolated (free at %.9g, compute %.9g), %.9g every iteration",
          what, (long long)n, side, backlog(&x, side), x.chan[side], x.t, backlog(&f, side));
  return x;
}

static double alone(const Module *m, const CostDevice *d, const Value *v) {
  const Node *n = v->def;
  return cost_nodes_time(m, d, &n, 1);
}

int main(void) {
  Arena ar;
  arena_init(&ar);
  const Shape s = tb_shape(2, 64, 64);
  CostDevice d;
  {
    Module *m = module(&ar, "device");
    cost_device_defaults(m, &d);
  }
  d.overlap = 1;
  d.link[0] = (CostLink){2e-4, 1e9};
  d.link[1] = (CostLink){1e-4, 1e9};
  const int64_t lens[] = {1, 2, 3, 4, 7, 16, 61};
  const int nlens = (int)(sizeof lens / sizeof lens[0]);
  double worst_old = 0; /* (a): the backlog the old extrapolation would leave, at the longest loop */
  for (int li = 0; li < nlens; li++) {
    const int64_t N = lens[li];
    /* (a) */
    {
      Module *m = module(&ar, "cost_loop_a");
      Graph *g = m->graph;
      Value *big = tb_input(g, "big", DT_F32, tb_shape(2, 512, 1024)), *x0 = tb_input(g, "x", DT_F32, s);
      Value *p = coll(g, big, RT_AX_DP);
      Graph *body = ir_graph_new(&ar, g);
      Value *x = ir_add_arg(body, DT_F32, s, "x")->out[0];
      Value *av = coll(body, x, RT_AX_DP), *sv = coll(body, x, RT_AX_TP);
      Value *y = tb_op2(body, OP_ADD, sv, av, NULL);
      ir_add_result(body, y, NULL);
      Node *loop = tb_repeat(g, body, 1, &x0, N, 1, 0, "a");
      Value *tail = coll(g, loop->out[0], RT_AX_TP);
      const double H = alone(m, &d, p), h = alone(m, &d, av), a = alone(m, &d, sv), e = alone(m, &d, y);
      CHECK(H + h > a && a > h && h > 0 && e > 0, "(a)'s premise: H %g + h %g > a %g > h, e %g", H, h, a, e);
      CHECK(alone(m, &d, tail) == a, "(a): the tail all-reduce %g s, not S's %g", alone(m, &d, tail), a);
      CostClock c = both(m, &d, "(a)", N);
      const double want = H + h + e + (double)(N - 1) * (a + e) + a;
      CHECK(fabs(c.t - want) <= 1e-12 * want, "(a) N %lld: %.9g s, by hand H + h + e + (N - 1)(a + e) + a = %.9g",
            (long long)N, c.t, want);
      CHECK(c.chan[0] == c.t, "(a) N %lld: the tail's channel free at %.9g, the compute at %.9g", (long long)N,
            c.chan[0], c.t);
      if (N > 2) worst_old = (double)(N - 2) * (H + h - a) - e;
    }
    /* (b) */
    {
      Module *m = module(&ar, "cost_loop_b");
      Graph *g = m->graph;
      Value *x0 = tb_input(g, "x", DT_F32, s);
      Graph *body = ir_graph_new(&ar, g);
      Value *x = ir_add_arg(body, DT_F32, s, "x")->out[0];
      Value *y = tb_op2(body, OP_ADD, x, x, NULL), *r = coll(body, y, RT_AX_DP);
      ir_add_result(body, y, NULL);
      ir_add_result(body, r, NULL);
      tb_repeat(g, body, 1, &x0, N, 1, 0, "b");
      const double h = alone(m, &d, r), e = alone(m, &d, y);
      CHECK(h > e, "(b)'s premise: h %g > e %g", h, e);
      CostClock c = both(m, &d, "(b)", N);
      const double t = (double)N * e, ch = e + (double)N * h;
      CHECK(fabs(c.t - t) <= 1e-12 * t, "(b) N %lld: compute %.9g s, by hand N e = %.9g", (long long)N, c.t, t);
      CHECK(fabs(c.chan[1] - ch) <= 1e-12 * ch, "(b) N %lld: channel 1 free at %.9g s, by hand e + N h = %.9g",
            (long long)N, c.chan[1], ch);
      CHECK(backlog(&c, 0) == 0, "(b) N %lld: idle channel 0 ahead by %g s", (long long)N, backlog(&c, 0));
    }
    /* (c) */
    {
      Module *m = module(&ar, "cost_loop_c");
      Graph *g = m->graph;
      Value *x0 = tb_input(g, "x", DT_F32, s);
      Graph *body = ir_graph_new(&ar, g);
      Value *x = ir_add_arg(body, DT_F32, s, "x")->out[0];
      Value *y = tb_op2(body, OP_ADD, x, x, NULL);
      ir_add_result(body, y, NULL);
      tb_repeat(g, body, 1, &x0, N, 1, 0, "c");
      const double e = alone(m, &d, y), t = (double)N * e;
      CostClock c = both(m, &d, "(c)", N);
      CHECK(fabs(c.t - t) <= 1e-12 * t, "(c) N %lld: %.9g s, by hand N e = %.9g", (long long)N, c.t, t);
      CHECK(backlog(&c, 0) == 0 && backlog(&c, 1) == 0, "(c) N %lld: idle channels ahead by %g, %g s", (long long)N,
            backlog(&c, 0), backlog(&c, 1));
    }
  }
  arena_free(&ar);
  if (failures) {
    fprintf(stderr, "test_cost_loop: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_cost_loop: ok (loops of 1-%lld iterations: extrapolated = every iteration simulated = by hand; (a)'s "
         "lagging channel without the %.3g s phantom backlog of extrapolating its own increment at N %lld)\n",
         (long long)lens[nlens - 1], worst_old, (long long)lens[nlens - 1]);
  return 0;
}
