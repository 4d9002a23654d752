/* tests/passes/test_pp_equiv.c — pipeline parallelism (passes/stage.c, passes/pipe.c) against the
 * single rank.
 *
 * For the tiny GPT (tied embedding: its gradient has a part on the first and on the last stage)
 * and a Llama-shaped model (untied, RoPE, GQA): the single-rank program with batch B in one
 * micro-step, and pipelined programs of pp in {2, 4} stages, each schedule (GPipe, 1F1B), M
 * micro-batches, times dp 2 and tp 2 (and dp 2 x tp 2 at pp 2), with the same global batch B.
 * Both are interpreted in fp64 (the pipelined one on pp x dp x tp simulated ranks, each stage
 * running its predicated part) for two AdamW steps (with the recipe's gradient clipping); after
 * each step the loss, the grad norm, every gradient and every updated parameter and optimizer
 * state must agree within a relative error of 1e-10, and replicas agree (spread); a parameter held on
 * some stages only (the embedding on the first, the head and the final norm on the last, a tied
 * embedding on both), its state and gradient, on those stages' ranks. The checks also
 * assert the program's shape: each stage sends and receives 2 (pp - 1 neighbours) transfers per
 * micro-batch, no micro-step region is left, the layer parameters are split over pp.
 * Interleaved 1F1B (2 chunks per stage) runs at pp 2 for every plan with an even number of
 * micro-batches; zero bubble (the backward loop split into input- and weight-gradient loops) for
 * every plan. Then tiny with sp on the plans with tp 2 (pp x tp x sp), again with activation
 * recompute (tiny full, Llama selective) and with ZeRO 1 (tiny), 2 (Llama) and 3 (tiny) on the
 * plans with dp 2. Then tiny in bf16 (the CUDA target's precision: the
 * parameters' bf16 casts on every stage, each stage's layer gradients cast to f32 on that stage):
 * the interpreter rounds every bf16 value, and a pipelined step rounds per micro-batch what the
 * single rank rounds once over the batch, so there the bound is TOL_BF16 = 2^-12, 1/16 of bf16's
 * unit roundoff (measured 7.1e-6; a stage's gradients lost or taken from another stage: 0.9).
 * Then zb's lists made with given stage times (Plan.sched_times), their programs equal one rank, tiny pp 4 x 8
 * micro-batches and pp 2 x dp 2, and `layers(balanced)` against a device's memory (tiny, 8 layers, pp 4: the split
 * that fits chosen, applied, within the device, equal to one rank). The schedules themselves (bubbles, in-flight
 * bounds, bad lists rejected) and the balanced split's hand-worked cases: test_pp_equiv_sched.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "frontend.h"
#include "interp.h"
#include "memplan.h"
#include "pipe_sched.h"
#include "tb_compile.h"
#include "tb_zero.h"
#include "pipeline.h"
#include "tb.h"

#define TOL 1e-10
#define TOL_BF16 (1.0 / 4096)

static int failures;
static const double *sched_times; /* zb's lists made with these times (Plan.sched_times; NULL: equal) */
static const int BALANCED[1]; /* compile_stages' layers: `pp N layers(balanced)` */
static const int64_t *stage_fixed; /* `layers(balanced)` against a device's memory (Plan.stage_fixed, stage_cap) */
static double stage_cap;
static void expect(bool ok, const char *what);

/* The split balanced by time (passes/pipe_balance.c) has the least slowest stage of every split of the
 * layers over the stages (each stage one layer at least), found by trying them all. */
static void check_least_bottleneck(const PipeBalance *b, const char *what) {
  int pp = b->pp;
  int64_t n[8], best_n[8] = {0};
  if (pp > 8) return;
  double best = -1, got = 0;
  for (int s = 0; s < pp; s++) got = fmax(got, pipe_balance_stage_s(b, s, b->split[s]));
  for (int s = 0; s < pp; s++) n[s] = 1;
  for (;;) { /* every composition of the layers into pp positive parts */
    int64_t sum = 0;
    for (int s = 0; s < pp; s++) sum += n[s];
    if (sum == b->layers) {
      double t = 0;
      for (int s = 0; s < pp; s++) t = fmax(t, pipe_balance_stage_s(b, s, n[s]));
      if (best < 0 || t < best) {
        best = t;
        memcpy(best_n, n, sizeof n);
      }
    }
    int s = 0;
    while (s < pp && ++n[s] > b->layers - pp + 1) n[s++] = 1;
    if (s == pp) break;
  }
  if (got > best) {
    fprintf(stderr, "FAIL %s: the balanced split's slowest stage %.6g s, the split [%lld, %lld, ..] has %.6g\n", what,
            got, (long long)best_n[0], (long long)best_n[1], best);
    failures++;
  }
}

static bool waits_off; /* `defer_waits off` on the plans over dp (the single rank has no scatter to defer: an error) */

static Module *compile_stages(Arena *a, Target target, const char *path, const FeDefine *defs, int ndefs, int pp, int dp,
                              int tp, const char *sched, int64_t micro, int64_t batch, const int *layers) {
  FeDefine with[16];
  if (waits_off && dp > 1 && ndefs < 16) {
    memcpy(with, defs, sizeof *defs * (size_t)ndefs);
    with[ndefs++] = (FeDefine){"defer_waits", "off"};
    defs = with;
  }
  TbPp p = {.pp = pp, .dp = dp, .tp = tp, .sched = sched, .micro = micro, .batch = batch,
            .layers = layers == BALANCED ? NULL : layers, .nlayers = layers && layers != BALANCED ? pp : 0,
            .balanced = layers == BALANCED, .import_dir = SHARDC_MODELS_DIR, /* (pp_shared.model imports from there) */
            .sched_times = sched_times, .stage_fixed = stage_fixed, .stage_cap = stage_cap};
  return tb_compile_pp(a, target, path, defs, ndefs, &p);
}

static Module *compile(Arena *a, Target target, const char *path, const FeDefine *defs, int ndefs, int pp, int dp,
                       int tp, const char *sched, int64_t micro, int64_t batch) {
  return compile_stages(a, target, path, defs, ndefs, pp, dp, tp, sched, micro, batch, NULL);
}

/* The program: no micro-step region, per stage M transfers per neighbour of each of its v virtual stages, layer params split over pp. */
static void check_shape(const Module *m, int pp, int v, bool zb, int64_t M, const char *what) {
  const Graph *g = m->graph;
  int *sends = calloc((size_t)pp, sizeof(int)), *recvs = calloc((size_t)pp, sizeof(int)), split = 0, region = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op == OP_REPEAT && n->a.name && strcmp(n->a.name, "accum") == 0) region++;
    if ((n->op == OP_SEND || n->op == OP_RECV) && n->a.mesh_axis == RT_AX_PP && n->stage > 0)
      (n->op == OP_SEND ? sends : recvs)[n->stage - 1]++;
    if (n->op == OP_PARAM && n->out[0]->sharding.split[0] == RT_AX_PP) split++;
  }
  int tied = 0; /* a parameter held on two stages (a tied embedding): its gradient's exchange, one each way */
  for (int i = 0; i < g->nnodes; i++) tied += g->nodes[i]->op == OP_PARAM && g->nodes[i]->stageset;
  for (int s = 0; s < pp; s++) {
    int want = (int)M * ((v - (s == pp - 1)) + (v - (s == 0))); /* its virtual stages' neighbours */
    want += (s == 0 || s == pp - 1) ? tied : 0;
    if (sends[s] != want || recvs[s] != want) {
      fprintf(stderr, "FAIL %s: stage %d sends %d and receives %d, not %d each\n", what, s, sends[s], recvs[s], want);
      failures++;
    }
  }
  if (region || split == 0) {
    fprintf(stderr, "FAIL %s: %d micro-step regions left, %d params split over pp\n", what, region, split);
    failures++;
  }
  /* the parameters outside the layers are held where they are read (passes/pipe_owners.c): the
   * embedding on the first stage, the head and the final norm on the last, a tied embedding on
   * both (at pp 2 that is every stage); their optimizer states with them */
  int owned = 0, every = 0, states = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if ((n->op != OP_PARAM && n->op != OP_STATE) || n->out[0]->sharding.split[0] == RT_AX_PP) continue;
    uint64_t st = ir_node_stages(n);
    if (n->op == OP_STATE) {
      states += st != 0;
      continue;
    }
    int k = __builtin_popcountll(st);
    if (st && (k > 2 || (k == 2 && st != (1ull | 1ull << (pp - 1))))) {
      fprintf(stderr, "FAIL %s: %s held on stages 0x%llx\n", what, n->a.name, (unsigned long long)st);
      failures++;
    }
    owned += st != 0;
    every += st == 0;
  }
  if (owned < 2 || every > (pp == 2 ? 1 : 0) || states != 2 * owned) {
    fprintf(stderr, "FAIL %s: %d parameters outside the layers held on their stages (%d states), %d on every stage\n",
            what, owned, states, every);
    failures++;
  }
  int wloops = 0; /* zb: one weight-gradient loop (no carry) per stage and micro-batch; hold(N): two where cut (below) */
  for (int i = 0; i < g->nnodes; i++) wloops += g->nodes[i]->op == OP_REPEAT && g->nodes[i]->a.ncarry == 0;
  if (m->zbw.layers == 0 && wloops != (zb ? pp * (int)M : 0)) {
    fprintf(stderr, "FAIL %s: %d weight-gradient loops, want %d\n", what, wloops, zb ? pp * (int)M : 0);
    failures++;
  }
  /* zb: W runs the weight-gradient GEMMs (x^T dy) and no forward again: under recompute it takes
   * the GEMMs' inputs B's recompute made (held from B to W, passes/recompute.c's from_b), where it
   * recomputed the layer's forward (its GEMMs and attention) a second time before; `zb_w recompute`
   * (m->zbw.why set, not held): it recomputes them */
  bool rerun = m->zbw.why && !m->zbw.held;
  int fwd = 0, wgemm = 0, lo_rerun = 0, hi_held = 0, whole = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *w = g->nodes[i];
    if (w->op != OP_REPEAT || w->a.ncarry != 0) continue;
    int f = 0;
    for (int k = 0; k < w->body->nnodes; k++) {
      const Node *n = w->body->nodes[k];
      f += n->op == OP_SDPA || (n->op == OP_MATMUL && !n->a.ta);
      wgemm += n->op == OP_MATMUL && n->a.ta;
    }
    if (m->zbw.layers > 0) { /* hold(N): the W over the stage's first rows recomputes, the one over its last N holds */
      /* its rows' start in the stage's stacks (-1: uncut): a row slice its F and B loops read of the layers' weights
       * (passes/recompute_split.c's rows_of; W reads no weight, and takes no input it does not read) */
      int64_t start = -1;
      for (int j = 0; j < w->a.nxs; j++) {
        const Node *d = w->in[j]->def;
        for (int k = d->op == OP_REPEAT && d->a.ncarry > 0 ? d->a.ncarry : 0; k < d->a.ncarry + d->a.nxs; k++)
          if (d->in[k]->def->op == OP_SLICE && d->in[k]->def->a.axis == 0) start = d->in[k]->def->a.start;
      }
      lo_rerun += start == 0 && f > 0;
      hi_held += start > 0 && f == 0 && w->a.count == m->zbw.layers;
      whole += f == 0 && w->a.count <= m->zbw.layers && start <= 0; /* (a stage of N layers or fewer: all held) */
    } else fwd += f;
  }
  /* hold(N): each stage of more than N layers cut (its lo W recomputing, its hi W of N layers holding), the
   * others whole and holding: every stage's W of each micro-batch one of those */
  if (m->zbw.layers > 0 && (lo_rerun < 1 || lo_rerun != hi_held || wloops != lo_rerun + hi_held + whole ||
                            hi_held + whole != pp * (int)M)) {
    fprintf(stderr, "FAIL %s: hold(%d): %d W loops over a stage's first layers recompute, %d over its last hold, %d whole "
            "hold (of %d; want a pair per cut stage and micro-batch)\n", what, m->zbw.layers, lo_rerun, hi_held, whole, wloops);
    failures++;
  }
  if ((fwd > 0) != rerun || (zb && !wgemm)) {
    fprintf(stderr, "FAIL %s: the W loops run %d forward GEMMs or attentions (want %s) and %d weight-gradient GEMMs\n", what,
            fwd, rerun ? "some: zb_w recompute" : "0", wgemm);
    failures++;
  }
  failures += tb_check_zb_reads(m, what); /* W takes only what it reads (passes/pipe_split.c) */
  free(sends);
  free(recvs);
}

static void run_model(const char *label, Target target, double tol, const char *path, const FeDefine *defs,
                      int ndefs, int64_t B, int64_t S, int64_t V) {
  fprintf(stderr, "%s\n", label);
  Arena ra;
  arena_init(&ra);
  Module *ref = tb_compile_ref(&ra, target, path, defs, ndefs, B, label);
  if (!ref) {
    failures++;
    return;
  }
  Tensor tok = tb_randint(tb_shape(2, (int)B, (int)S), 101, 0, V);
  Tensor tgt = tb_randint(tb_shape(2, (int)B, (int)S), 102, 0, V);
  /* pp, dp, tp, micro-batches */
  static const int plans[][4] = {{2, 1, 1, 2}, {2, 1, 1, 4}, {4, 1, 1, 4}, {2, 2, 1, 2}, {2, 1, 2, 4}, {4, 1, 2, 4}, {2, 2, 2, 2}};
  static const char *const scheds[] = {"gpipe", "1f1b", "interleaved", "zb"};
  bool zero = false, sp = false; /* ZeRO runs: only the plans with dp > 1 apply it; sp: with tp > 1 */
  for (int i = 0; i < ndefs; i++) {
    zero |= strcmp(defs[i].key, "zero") == 0;
    sp |= strcmp(defs[i].key, "sp") == 0;
  }
  for (int p = 0; p < (int)(sizeof plans / sizeof plans[0]); p++)
    for (int q = 0; q < 4; q++) {
      int pp = plans[p][0], dp = plans[p][1], tp = plans[p][2];
      if ((zero && dp < 2) || (sp && tp < 2)) continue;
      int64_t M = plans[p][3];
      if (q == 2 && (pp != 2 || M % pp != 0)) continue; /* interleaved v 2: pp x 2 chunks of the 4 layers */
      char what[96];
      snprintf(what, sizeof what, "pp %d x dp %d x tp %d, %s, %lld micro-batches", pp, dp, tp, scheds[q], (long long)M);
      Arena pa;
      arena_init(&pa);
      Module *pm = compile(&pa, target, path, defs, ndefs, pp, dp, tp, scheds[q], B / (M * dp), B);
      if (!pm) {
        fprintf(stderr, "FAIL %s %s: does not compile\n", label, what);
        failures++;
        arena_free(&pa);
        continue;
      }
      check_shape(pm, pp, q == 2 ? 2 : 1, q == 3, M, what);
      failures += tb_check_zero_coalesced(pm, what);
      failures += tb_check_scatters_deferred(pm, what); /* the B (zb: W) instructions' loops (passes/zero_defer.c) */
      if (pm->plan.zero >= 2 && dp > 1 && tb_dp_scatters_in_loops(pm->graph) < M) {
        fprintf(stderr, "FAIL %s %s: zero %d reduce-scatters %d gradients over dp inside the backward loops, want one per micro-batch at least\n",
                label, what, pm->plan.zero, tb_dp_scatters_in_loops(pm->graph));
        failures++;
      }
      failures += tb_equiv_micro(ref, pm, &tok, &tgt, M, label, what, tol, true);
      arena_free(&pa);
    }
  tensor_free(&tok);
  tensor_free(&tgt);
  arena_free(&ra);
}

/* Stages of unequal layer counts (`pp N layers(..)`, the layer stacks split RT_BLOCKS_STAGES): each
 * schedule but interleaved (all: GPipe, 1F1B and zb; else 1F1B only), against the single rank;
 * each stage's loops run its own count, over views of its stacks' leading rows. */
static void run_uneven(const char *label, Target target, double tol, const char *path, const FeDefine *defs, int ndefs,
                       int64_t B, int64_t S, int64_t V, bool all) {
  fprintf(stderr, "%s, uneven stages\n", label);
  Arena ra;
  arena_init(&ra);
  Module *ref = tb_compile_ref(&ra, target, path, defs, ndefs, B, label);
  if (!ref) {
    failures++;
    return;
  }
  Tensor tok = tb_randint(tb_shape(2, (int)B, (int)S), 101, 0, V);
  Tensor tgt = tb_randint(tb_shape(2, (int)B, (int)S), 102, 0, V);
  /* pp, dp, tp, micro-batches, the layers of each stage (4 in all) */
  static const int plans[][7] = {{2, 1, 1, 4, 1, 3}, {2, 1, 1, 2, 3, 1}, {3, 1, 1, 4, 1, 2, 1}, {2, 2, 1, 2, 3, 1},
                                 {2, 1, 2, 4, 1, 3}, {3, 1, 1, 4, 0}}; /* 0: `layers(balanced)` */
  static const char *const scheds[] = {"gpipe", "1f1b", "zb"};
  bool zero = false, rc = false; /* ZeRO: the dp 2 plan only; recompute: 1f1b only */
  for (int i = 0; i < ndefs; i++) {
    zero |= strcmp(defs[i].key, "zero") == 0;
    rc |= strcmp(defs[i].key, "recompute") == 0;
  }
  for (int p = 0; p < (int)(sizeof plans / sizeof plans[0]); p++)
    for (int q = 0; q < 3; q++) {
      int pp = plans[p][0], dp = plans[p][1], tp = plans[p][2];
      if ((zero && dp < 2) || ((rc || !all) && q != 1)) continue;
      int64_t M = plans[p][3];
      const int *layers = &plans[p][4];
      bool bal = layers[0] == 0; /* `layers(balanced)`: the stage pass's split */
      char what[128];
      Arena pa;
      arena_init(&pa);
      Module *pm = compile_stages(&pa, target, path, defs, ndefs, pp, dp, tp, scheds[q], B / (M * dp), B,
                                  bal ? BALANCED : layers);
      if (pm && bal) {
        layers = pm->mesh->stage_rows;
        bool same = pm->pipe_balance && pm->pipe_balance->split;
        for (int s = 0; s < pp && same; s++) same = pm->pipe_balance->split[s] == layers[s] && layers[s] > 0;
        if (!same) {
          fprintf(stderr, "FAIL %s pp %d: the stage pass split differs from layers(balanced)\n", label, pp);
          failures++;
          arena_free(&pa);
          continue;
        }
      }
      int w = snprintf(what, sizeof what, "pp %d x dp %d x tp %d, %s, %lld micro-batches, layers(%s", pp, dp, tp,
                       scheds[q], (long long)M, bal ? "balanced: " : "");
      for (int s = 0; s < pp; s++) w += snprintf(what + w, sizeof what - (size_t)w, "%s%d", s ? ", " : "", layers[s]);
      snprintf(what + w, sizeof what - (size_t)w, ")");
      if (!pm) {
        fprintf(stderr, "FAIL %s %s: does not compile\n", label, what);
        failures++;
        arena_free(&pa);
        continue;
      }
      if (bal) check_least_bottleneck(pm->pipe_balance, what);
      check_shape(pm, pp, 1, q == 2, M, what);
      failures += tb_check_zero_pp(pm, M, what); /* a stage's rows of the padded stacks, gathered a layer at a time */
      failures += tb_check_scatters_deferred(pm, what); /* (passes/zero_defer.c: a stage's loops of its own count) */
      /* each stage's loops run its own layers: one forward loop per stage and micro-batch, of its count */
      int bad = 0, loops = 0;
      for (int i = 0; i < pm->graph->nnodes; i++) {
        const Node *n = pm->graph->nodes[i];
        if (n->op != OP_REPEAT || n->a.reverse || n->stage < 1) continue;
        loops++;
        bad += n->a.count != layers[n->stage - 1];
      }
      int views = 0, moved = 0; /* a stage's own rows of a padded stack: views, in place (no copy) */
      for (int i = 0; i < pm->graph->nnodes; i++) {
        const Node *n = pm->graph->nodes[i];
        if (!ir_slice_is_view(n)) continue;
        views++;
        moved += n->out[0]->offset != n->in[0]->offset;
      }
      if (!views || moved) {
        fprintf(stderr, "FAIL %s %s: %d own-row slices, %d of them copied\n", label, what, views, moved);
        failures++;
      }
      if (bad || loops != pp * (int)M) {
        fprintf(stderr, "FAIL %s %s: %d forward loops (want %d), %d not of their stage's count\n", label, what, loops,
                pp * (int)M, bad);
        failures++;
      }
      failures += tb_equiv_micro(ref, pm, &tok, &tgt, M, label, what, tol, true);
      arena_free(&pa);
    }
  tensor_free(&tok);
  tensor_free(&tgt);
  arena_free(&ra);
}

/* `layers(balanced)` against a device's memory (passes/pipe_balance.c, split_fitting): tiny with 8
 * layers at pp 4, 1F1B, 8 micro-batches of 8; the split by time ([2, 2, 2, 2]) compiled, then a
 * device of 95 % of its largest stage's allocation (pipe_balance_calibrate's figures, as the driver's
 * stage_memory takes them): the stage pass applies another split ([1, 2, 3, 2]), the fastest whose
 * every stage fits by those figures, whose memory plan does fit that device (1.644 MiB within
 * 1.679; by time 1.768), and which equals the single rank (1.2e-11). (zb: no split fits 95 %: what
 * B keeps for W is not in the balance's model.) Interleaved (split_fitting_chunks; ileave), pp 2 x 2
 * chunks, tiny with 8 layers at seq 32, a device of 97 % (6.141 MiB; by time 6.331): [1, 3, 2, 2] per
 * virtual stage (stage 0's chunk 0 one layer padded to stage 1's three), its memory plan 6.061 MiB, equal
 * to the single rank (4.8e-13). */
static void run_memory_split(const char *label, const char *path, const FeDefine *defs, int ndefs, int64_t B, int64_t S,
                             int64_t V, bool ileave) {
  fprintf(stderr, "%s, layers(balanced) against a device's memory\n", label);
  static const struct {
    int pp, v;
    const char *sched;
    double frac;
  } plans[] = {{4, 1, "1f1b", 0.95}, {2, 2, "interleaved", 0.97}};
  Arena ra;
  arena_init(&ra);
  Module *ref = tb_compile_ref(&ra, TARGET_CPU, path, defs, ndefs, B, label);
  if (!ref) {
    failures++;
    arena_free(&ra);
    return;
  }
  Tensor tok = tb_randint(tb_shape(2, (int)B, (int)S), 101, 0, V);
  Tensor tgt = tb_randint(tb_shape(2, (int)B, (int)S), 102, 0, V);
  for (int q = ileave; q < (int)(sizeof plans / sizeof plans[0]); q += 2) {
    int pp = plans[q].pp, v = plans[q].v, nv = pp * v;
    const char *sched = plans[q].sched;
    int64_t M = 8;
    Arena pa;
    arena_init(&pa);
    Module *m0 = compile_stages(&pa, TARGET_CPU, path, defs, ndefs, pp, 1, 1, sched, B / M, B, BALANCED);
    if (!m0 || !m0->memplan || !m0->memplan->stage_peak) {
      fprintf(stderr, "FAIL %s %s: the split by time does not compile\n", label, sched);
      failures++;
      arena_free(&pa);
      continue;
    }
    double top = 0, scale = (double)m0->memplan->total / (double)m0->memplan->peak;
    for (int s = 0; s < pp; s++) top = fmax(top, (double)m0->memplan->stage_peak[s] * scale);
    double cap = plans[q].frac * top;
    stage_fixed = pipe_balance_calibrate(m0, cap, &pa);
    stage_cap = cap;
    Module *pm = stage_fixed ? compile_stages(&pa, TARGET_CPU, path, defs, ndefs, pp, 1, 1, sched, B / M, B, BALANCED) : NULL;
    stage_fixed = NULL;
    stage_cap = 0;
    if (!pm) {
      fprintf(stderr, "FAIL %s %s: %s\n", label, sched, m0 ? "the split against the memory does not compile" : "no calibration");
      failures++;
      arena_free(&pa);
      continue;
    }
    const PipeBalance *b = pm->pipe_balance;
    char what[200];
    int w = snprintf(what, sizeof what, "pp %d, %s, 8 micro-batches, layers(balanced) within %.3f MiB: [", pp, sched,
                     cap / 1048576.0);
    bool same = true, applied = b->pp == nv;
    for (int k = 0; k < nv; k++) {
      w += snprintf(what + w, sizeof what - (size_t)w, "%s%lld", k ? ", " : "", (long long)b->split[k]);
      same &= b->split[k] == b->by_time[k];
      applied &= pm->mesh->stage_rows[k] == b->split[k];
    }
    w += snprintf(what + w, sizeof what - (size_t)w, "] (by time [");
    for (int k = 0; k < nv; k++) w += snprintf(what + w, sizeof what - (size_t)w, "%s%lld", k ? ", " : "", (long long)b->by_time[k]);
    snprintf(what + w, sizeof what - (size_t)w, "], %.3f MiB)", top / 1048576.0);
    fprintf(stderr, "  %s: planned %.3f MiB\n", what, (double)pm->memplan->total / 1048576.0);
    expect(b->fits && !same, "layers(balanced) against the memory: another split than by time, fitting by the model");
    expect(applied, "layers(balanced) against the memory: the stage pass applies its split");
    expect((double)pm->memplan->total <= cap, "layers(balanced) against the memory: the memory plan fits the device");
    check_shape(pm, pp, v, false, M, what);
    failures += tb_equiv_micro(ref, pm, &tok, &tgt, M, label, what, TOL, true);
    arena_free(&pa);
  }
  tensor_free(&tok);
  tensor_free(&tgt);
  arena_free(&ra);
}

/* zb with Plan.sched_times set (pp 4, 8 micro-batches of 1, and pp 2 x dp 2): against the single
 * rank, and its lists are not the equal-time ones (else this proves nothing new). */
static void run_timed_zb(const char *label, const char *path, const FeDefine *defs, int ndefs, int64_t B, int64_t S,
                         int64_t V) {
  fprintf(stderr, "%s\n", label);
  Arena ra;
  arena_init(&ra);
  Module *ref = tb_compile_ref(&ra, TARGET_CPU, path, defs, ndefs, B, label);
  Tensor tok = tb_randint(tb_shape(2, (int)B, (int)S), 101, 0, V);
  Tensor tgt = tb_randint(tb_shape(2, (int)B, (int)S), 102, 0, V);
  static const int plans[][3] = {{4, 1, 8}, {2, 2, 4}}; /* pp, dp, micro-batches */
  for (int p = 0; ref && p < 2; p++) {
    int pp = plans[p][0], dp = plans[p][1], M = plans[p][2];
    char what[96];
    snprintf(what, sizeof what, "pp %d x dp %d, zb, %d micro-batches, lists made with W = B / 2", pp, dp, M);
    double t[3 * 4];
    for (int s = 0; s < pp; s++) t[s] = sched_times[s], t[pp + s] = sched_times[4 + s], t[2 * pp + s] = sched_times[8 + s];
    const double *all = sched_times;
    sched_times = t;
    PipeSched u = pipe_sched_make(SCHED_ZB, pp, M, 1), x = pipe_sched_make_timed(SCHED_ZB, pp, M, 1, t);
    int differ = 0;
    for (int s = 0; s < pp; s++)
      for (int k = 0; k < u.len[s]; k++) differ += x.list[s][k].op != u.list[s][k].op || x.list[s][k].mb != u.list[s][k].mb;
    pipe_sched_free(&u);
    pipe_sched_free(&x);
    Arena pa;
    arena_init(&pa);
    Module *pm = compile(&pa, TARGET_CPU, path, defs, ndefs, pp, dp, 1, "zb", B / (M * dp), B);
    sched_times = all;
    if (!pm || !differ) {
      fprintf(stderr, "FAIL %s %s: %s\n", label, what, pm ? "the same lists as equal times" : "does not compile");
      failures++;
      arena_free(&pa);
      continue;
    }
    check_shape(pm, pp, 1, true, M, what);
    failures += tb_equiv_micro(ref, pm, &tok, &tgt, M, label, what, TOL, true);
    fprintf(stderr, "  %s: %d instructions in another place than the equal-time lists'\n", what, differ);
    arena_free(&pa);
  }
  failures += !ref;
  tensor_free(&tok);
  tensor_free(&tgt);
  arena_free(&ra);
}

/* A parameter outside the layers that every layer reads (tests/passes/pp_shared.model's `gate`): held on
 * every stage, its gradient carried through each stage's backward loop and summed over all of them
 * (each stage's part taken by stage_select, the parts all-reduced over pp with the other sums), against
 * the single rank: pp 2 and 4 under GPipe and 1F1B, pp 2 interleaved (2 chunks: each stage's two
 * parts added), pp 3 `layers(1, 2, 1)`, pp 2 x dp 2; zb is refused (its split keeps one carry). */
static void run_shared(const char *path, const FeDefine *defs, int ndefs, int64_t B, int64_t S, int64_t V) {
  const char *label = "tiny with a parameter every layer reads";
  fprintf(stderr, "%s\n", label);
  Arena ra;
  arena_init(&ra);
  Module *ref = tb_compile_ref(&ra, TARGET_CPU, path, defs, ndefs, B, label);
  if (!ref) {
    failures++;
    return;
  }
  Tensor tok = tb_randint(tb_shape(2, (int)B, (int)S), 101, 0, V);
  Tensor tgt = tb_randint(tb_shape(2, (int)B, (int)S), 102, 0, V);
  static const int l121[] = {1, 2, 1};
  static const struct {
    int pp, dp, M;
    const char *sched;
    const int *layers;
  } plans[] = {{2, 1, 4, "1f1b", NULL}, {2, 1, 2, "gpipe", NULL},       {4, 1, 4, "1f1b", NULL},
               {4, 1, 4, "gpipe", NULL}, {2, 1, 4, "interleaved", NULL}, {3, 1, 4, "1f1b", l121},
               {2, 2, 2, "1f1b", NULL}};
  for (int p = 0; p < (int)(sizeof plans / sizeof plans[0]); p++) {
    char what[96];
    int pp = plans[p].pp, dp = plans[p].dp;
    int64_t M = plans[p].M;
    snprintf(what, sizeof what, "pp %d x dp %d, %s, %lld micro-batches%s", pp, dp, plans[p].sched, (long long)M,
             plans[p].layers ? ", layers(1, 2, 1)" : "");
    Arena pa;
    arena_init(&pa);
    Module *pm = compile_stages(&pa, TARGET_CPU, path, defs, ndefs, pp, dp, 1, plans[p].sched, B / (M * dp), B,
                                plans[p].layers);
    if (!pm) {
      fprintf(stderr, "FAIL %s %s: does not compile\n", label, what);
      failures++;
      arena_free(&pa);
      continue;
    }
    int gates = 0, carried = 0; /* `gate` held on every stage; each backward loop carries its gradient */
    for (int i = 0; i < pm->graph->nnodes; i++) {
      const Node *n = pm->graph->nodes[i];
      gates += n->op == OP_PARAM && n->a.name && strcmp(n->a.name, "gate") == 0 && ir_node_stages(n) == 0;
      carried += n->op == OP_REPEAT && n->a.reverse && n->stage > 0 && n->a.ncarry == 2;
    }
    int v = strcmp(plans[p].sched, "interleaved") == 0 ? 2 : 1;
    if (gates != 1 || carried != pp * v * (int)M) {
      fprintf(stderr, "FAIL %s %s: `gate` on every stage %d time(s), %d backward loops carrying its gradient (want %d)\n",
              label, what, gates, carried, pp * v * (int)M);
      failures++;
    }
    failures += tb_equiv_micro(ref, pm, &tok, &tgt, M, label, what, TOL, true);
    arena_free(&pa);
  }
  Arena za;
  arena_init(&za);
  char *msg = NULL;
  size_t msglen = 0;
  FILE *mf = open_memstream(&msg, &msglen);
  Diag quiet;
  diag_init(&quiet, mf, 0);
  Diag *outer = diag_enter(&quiet);
  Module *zb = compile_stages(&za, TARGET_CPU, path, defs, ndefs, 2, 1, 1, "zb", B / 4, B, NULL);
  fflush(mf);
  diag_leave(outer);
  diag_free(&quiet);
  fclose(mf);
  expect(!zb && msg && strstr(msg, "the zero-bubble schedule splits a backward layer loop that carries one gradient"),
         "zb refuses a backward layer loop carrying a parameter's gradient, with an error saying so");
  free(msg);
  arena_free(&za);
  tensor_free(&tok);
  tensor_free(&tgt);
  arena_free(&ra);
}

static void expect(bool ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "FAIL %s\n", what);
    failures++;
  }
}

/* `zb_w hold | recompute | hold(1)` (passes/recompute.c): zb under recompute with W holding what B's recompute
 * made, with W recomputing it from the forward's saved values (check_shape: its W loops run forward GEMMs
 * then, none held), and holding it for the last layer of each stage's two only (passes/recompute_split.c:
 * check_shape: the W over the first layer runs them, the one over the last none), each equal to the single
 * rank: pp 2, 4 micro-batches. */
static void run_zb_w(const char *label, const char *path, const FeDefine *defs, int ndefs, int64_t B, int64_t S, int64_t V) {
  fprintf(stderr, "%s, zb_w hold | recompute | hold:1\n", label);
  Arena ra;
  arena_init(&ra);
  Module *ref = tb_compile_ref(&ra, TARGET_CPU, path, defs, ndefs, B, label);
  Tensor tok = tb_randint(tb_shape(2, (int)B, (int)S), 101, 0, V), tgt = tb_randint(tb_shape(2, (int)B, (int)S), 102, 0, V);
  static const char *const how[] = {"hold", "recompute", "hold:1"}; /* hold:1: the last of each stage's 2 layers */
  for (int k = 0; k < 3 && ref; k++) {
    FeDefine d[16];
    for (int i = 0; i < ndefs && i < 15; i++) d[i] = defs[i];
    d[ndefs] = (FeDefine){"zb_w", how[k]};
    char what[64];
    snprintf(what, sizeof what, "pp 2, zb, zb_w %s, 4 micro-batches", how[k]);
    Arena pa;
    arena_init(&pa);
    Module *pm = compile(&pa, TARGET_CPU, path, d, ndefs + 1, 2, 1, 1, "zb", B / 4, B);
    if (!pm || pm->zbw.held != (k != 1) || pm->zbw.layers != (k == 2 ? 1 : 0)) {
      fprintf(stderr, "FAIL %s %s: %s\n", label, what, pm ? "zb_w's choice missing from the compiled plan" : "does not compile");
      failures++;
    } else {
      check_shape(pm, 2, 1, true, 4, what);
      failures += tb_equiv_micro(ref, pm, &tok, &tgt, 4, label, what, TOL, true);
    }
    arena_free(&pa);
  }
  failures += !ref;
  tensor_free(&tok);
  tensor_free(&tgt);
  arena_free(&ra);
}

/* `zb_w hold(3)` over uneven stages (`layers(2, 4)`): stage 0's 2 layers held whole, stage 1's 4 cut into 1 + 3
 * (passes/recompute_split.c over pipe.c's own rows and padded gradients), equal to the single rank. */
static void run_zb_w_uneven(void) {
  const char *label = "tiny 6 layers, recompute full, layers(2, 4), zb_w hold:3";
  fprintf(stderr, "%s\n", label);
  const FeDefine defs[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "6"}, {"recompute", "full"}, {"zb_w", "hold:3"}};
  static const int split[2] = {2, 4};
  Arena ra, pa;
  arena_init(&ra);
  arena_init(&pa);
  Module *ref = compile(&ra, TARGET_CPU, SHARDC_MODELS_DIR "/tiny.model", defs, 5, 1, 1, 1, "1f1b", 8, 8);
  Module *pm = compile_stages(&pa, TARGET_CPU, SHARDC_MODELS_DIR "/tiny.model", defs, 6, 2, 1, 1, "zb", 2, 8, split);
  Tensor tok = tb_randint(tb_shape(2, 8, 8), 101, 0, 256), tgt = tb_randint(tb_shape(2, 8, 8), 102, 0, 256);
  if (!ref || !pm || !pm->zbw.held || pm->zbw.layers != 3) {
    fprintf(stderr, "FAIL %s: %s\n", label, !ref || !pm ? "does not compile" : "zb_w's choice missing from the compiled plan");
    failures++;
  } else {
    check_shape(pm, 2, 1, true, 4, label);
    failures += tb_equiv_micro(ref, pm, &tok, &tgt, 4, label, "pp 2 layers(2, 4), zb, hold:3", TOL, true);
  }
  tensor_free(&tok);
  tensor_free(&tgt);
  arena_free(&pa);
  arena_free(&ra);
}

int main(void) {
  const FeDefine tiny[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "4"}};
  run_model("tiny byte-level GPT (vocab 256, tied head)", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/tiny.model", tiny, 4, 8, 8, 256);
  const FeDefine llama[] = {{"vocab", "128"}, {"seq", "8"},      {"d", "32"},  {"heads", "4"}, {"precision", "f32"},
                            {"kv_heads", "2"}, {"layers", "4"}, {"ffn", "48"}};
  run_model("Llama shaped (RMSNorm, SwiGLU, RoPE, GQA, untied)", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/llama3-8b.model", llama, 8, 8, 8,
            128);
  /* sequence parallelism with tp 2 (the tiny GPT: tied head, learned positions; the Llama runs have
   * the model file's sp on): the stages' transfers carry tp's sequence shards */
  const FeDefine tiny_sp[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "4"}, {"sp", "on"}};
  run_model("tiny, tp + sp", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/tiny.model", tiny_sp, 5, 8, 8, 256);
  /* with activation recompute: the backward loops recompute what the forward ones no longer keep */
  const FeDefine tiny_rc[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "4"}, {"recompute", "full"}};
  run_model("tiny, recompute full", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/tiny.model", tiny_rc, 5, 8, 8, 256);
  const FeDefine llama_rc[] = {{"vocab", "128"}, {"seq", "8"},      {"d", "32"},  {"heads", "4"}, {"precision", "f32"},
                               {"kv_heads", "2"}, {"layers", "4"}, {"ffn", "48"}, {"recompute", "selective"}};
  run_model("Llama shaped, recompute selective", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/llama3-8b.model", llama_rc, 9, 8, 8, 128);
  run_zb_w("tiny, recompute full", SHARDC_MODELS_DIR "/tiny.model", tiny_rc, 5, 8, 8, 256);
  run_zb_w("Llama shaped, recompute selective", SHARDC_MODELS_DIR "/llama3-8b.model", llama_rc, 9, 8, 8, 128);
  run_zb_w_uneven();
  /* with ZeRO 1 and 2 over dp (the plans with dp 2): the layer parameters' optimizer states and
   * gradients sharded over dp within each stage */
  const FeDefine tz1[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "4"}, {"zero", "1"}};
  run_model("tiny, zero 1", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/tiny.model", tz1, 5, 8, 8, 256);
  const FeDefine lz2[] = {{"vocab", "128"}, {"seq", "8"},      {"d", "32"},  {"heads", "4"}, {"precision", "f32"},
                          {"kv_heads", "2"}, {"layers", "4"}, {"ffn", "48"}, {"zero", "2"}};
  run_model("Llama shaped, zero 2", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/llama3-8b.model", lz2, 9, 8, 8, 128);
  /* ZeRO-3: each stage's parameters stored split over its dp group, gathered in every instruction */
  const FeDefine tz3[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "4"}, {"zero", "3"}};
  run_model("tiny, zero 3", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/tiny.model", tz3, 5, 8, 8, 256);
  /* ZeRO-3 with a layer's gathers coalesced into one (passes/zero_coalesce.c; tb_check_zero_pp counts them) */
  const FeDefine tz3c[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "4"}, {"zero", "3"}, {"coalesce", "on"}};
  /* (d 64: at tp 2 the layer's tensors are over ZeRO-3's persistence threshold, so split; the row-split
   * ones (wo, the down projection) are split over dp along their second dim: transposed when unpacked) */
  const FeDefine lz3c[] = {{"vocab", "128"}, {"seq", "8"},      {"d", "64"},  {"heads", "4"}, {"precision", "f32"},
                           {"kv_heads", "2"}, {"layers", "4"}, {"ffn", "96"}, {"zero", "3"}, {"coalesce", "on"}};
  run_model("Llama shaped, zero 3, coalesce on", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/llama3-8b.model", lz3c, 10, 8, 8, 128);
  /* the B (zb: W) instructions' backward loops' scatters waited in the next iteration (passes/zero_defer.c;
   * tb_check_scatters_deferred): 8 layers, so that interleaved's chunks run two (at 4, one: nothing deferred);
   * and `defer_waits off`, each waited in its own iteration (none placed in the next) */
  const FeDefine tz2d[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "8"}, {"zero", "2"}};
  run_model("tiny, 8 layers, zero 2 (deferred waits)", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/tiny.model", tz2d, 5, 8, 8, 256);
  const FeDefine tz3d[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "8"}, {"zero", "3"}};
  waits_off = true;
  run_model("tiny, 8 layers, zero 3, defer_waits off", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/tiny.model", tz3d, 5, 8, 8, 256);
  waits_off = false;
  run_uneven("tiny", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/tiny.model", tiny, 4, 8, 8, 256, true);
  { /* zb's lists made with the stages' times (W half of F and B: other lists than equal times') */
    static const double half[3 * 4] = {1, 1, 1, 1, 1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5};
    sched_times = half;
    run_timed_zb("tiny, zb lists made with W = B / 2", SHARDC_MODELS_DIR "/tiny.model", tiny, 4, 8, 8, 256);
    sched_times = NULL;
  }
  const FeDefine tiny8[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "8"}};
  run_memory_split("tiny, 8 layers", SHARDC_MODELS_DIR "/tiny.model", tiny8, 4, 64, 8, 256, false);
  /* (interleaved: seq 32, where the activations weigh enough for a split that fits as compiled) */
  const FeDefine tiny8s[] = {{"seq", "32"}, {"d", "32"}, {"heads", "4"}, {"layers", "8"}};
  run_memory_split("tiny, 8 layers, seq 32", SHARDC_MODELS_DIR "/tiny.model", tiny8s, 4, 64, 32, 256, true);
  run_uneven("Llama shaped", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/llama3-8b.model", llama, 8, 8, 8, 128, false);
  run_uneven("tiny, zero 3", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/tiny.model", tz3, 5, 8, 8, 256, true);
  run_uneven("tiny, zero 3, coalesce on", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/tiny.model", tz3c, 6, 8, 8, 256, false);
  run_uneven("Llama shaped, zero 3, coalesce on", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/llama3-8b.model", lz3c, 10, 8, 8, 128, false);
  run_uneven("Llama shaped, zero 2", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/llama3-8b.model", lz2, 9, 8, 8, 128, false);
  /* ZeRO-2 with a layer's gradient scatters coalesced (d 64, a 64 KiB bucket: 3 a backward body apart at
   * dp 2, one coalesced; tb_check_zero_pp asks tb_check_zero_coalesced) */
  const FeDefine lz2c[] = {{"vocab", "128"}, {"seq", "8"}, {"d", "64"}, {"heads", "4"}, {"precision", "f32"}, {"kv_heads", "2"},
                           {"layers", "4"},  {"ffn", "96"}, {"zero", "2"}, {"coalesce", "on"}, {"bucket", "64KiB"}};
  run_uneven("Llama shaped, zero 2, coalesce on", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/llama3-8b.model", lz2c, 11, 8, 8, 128, false);
  run_uneven("tiny, recompute full", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/tiny.model", tiny_rc, 5, 8, 8, 256, false);
  const FeDefine tbf[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "4"}, {"precision", "bf16"}};
  run_model("tiny, bf16 (CUDA target)", TARGET_CUDA, TOL_BF16, SHARDC_MODELS_DIR "/tiny.model", tbf, 5, 8, 8, 256);
  run_uneven("tiny, bf16 (CUDA target)", TARGET_CUDA, TOL_BF16, SHARDC_MODELS_DIR "/tiny.model", tbf, 5, 8, 8, 256, false);
  run_shared(SHARDC_PP_SHARED_MODEL, tiny, 4, 8, 8, 256);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  fprintf(stderr, "pipeline parallelism equals the single rank\n");
  return 0;
}
