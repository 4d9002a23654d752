/* tests/passes/test_pp_timeline.c — the pipeline's predicted timeline (passes/pipe_sched.c's
 * pipe_sched_play, passes/cost.c's cost_pipe; docs/pipeline.md "The predicted timeline").
 *
 * 1. Timelines worked out by hand: GPipe and 1F1B at pp 2 with F 1, B 2 and each transfer 0.5 of
 *    latency and 0.25 of receive (the receiving instruction starts at max(its stage free + pre, its
 *    producer's end + latency) + receive), one with a stage's work between two instructions (pre),
 *    and free transfers giving the textbook (pp-1)/(M+pp-1); the bubble is 1 - busy / (pp x
 *    makespan) over the instructions' spans, as the trainer's --trace measures it.
 * 2. The tiny GPT at pp 2 (GPipe, 4 micro-batches of 2 x 64 tokens x 64 floats = 32 KiB activations)
 *    on a device whose in-node link takes 1 ms of latency and 32 KiB per ms: every receiving
 *    instruction (stage 1's F, stage 0's B) gets 1 ms + 1 ms, the others none; each stage's F's
 *    (and B's) take the same time; the sender pays its copy only (a 1000 times slower wire leaves
 *    the instructions' times unchanged, and adds its latency to the receivers'); the cost model's
 *    step is at least the timeline's span and its bubble the timeline's.
 * 3. zb's lists made with times never longer under them than the equal-time lists (GPT-3's stages at
 *    pp 32 x 192 micro-batches, where the greedy play with the times alone leaves more idle; 200
 *    random times).
 * 3b. zb's lists reach ZB-H1's bubble (pp-1)/(3M+pp-1) with equal times for pp 2-8 x M pp-24 (the
 *    greedy lists alone leave 0.172 at pp 4 x 8 against 0.111), pass the check and hold no more
 *    micro-batches than 1F1B's peak (pp); under 300 random times never longer than the greedy lists
 *    (made with those times or equal ones), shorter in some.
 * 4. The plan search's analytic model: a zb candidate's bubble is that of the lists made with its
 *    F / B / W (tiny's candidates at pp 2 and 4 x 8-32 micro-batches: every one's lists differ from
 *    the equal-time ones), not the ideal (pp-1)/(3M+pp-1).
 * 5. The analytic model's bubble and step for every schedule against the compiled plan's timeline
 *    (tiny pp 2 x 4 and 8 micro-batches): within 0.07 and 15 %, where the closed forms it used for
 *    GPipe, 1F1B and interleaved miss by 0.18-0.32.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "frontend.h"
#include "pipe_sched.h"
#include "pipeline.h"
#include "plan_model.h"
#include "plan_search.h"

static int failures;

static void expect(bool ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "FAIL %s\n", what);
    failures++;
  }
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(1, fmax(fabs(a), fabs(b))); }

/* F 1 and B 2 everywhere; lat / recv on every receiving instruction (stage 1's F, stage 0's B). */
static PipeTimes hand_times(const PipeSched *s, double lat, double recv) {
  PipeTimes t = pipe_times_new(s, true);
  for (int st = 0; st < s->pp; st++)
    for (int k = 0; k < s->len[st]; k++) {
      char op = s->list[st][k].op;
      t.dur[st][k] = op == 'F' ? 1 : 2;
      bool in = (op == 'F' && st > 0) || (op == 'B' && st < s->pp - 1);
      t.lat[st][k] = in ? lat : 0;
      t.recv[st][k] = in ? recv : 0;
    }
  return t;
}

static void check_starts(const PipeSched *s, double *const *start, const double *const *want, const char *what) {
  for (int st = 0; st < s->pp; st++)
    for (int k = 0; k < s->len[st]; k++)
      if (!near(start[st][k], want[st][k])) {
        fprintf(stderr, "FAIL %s: stage %d instruction %d (%c%d) starts at %g, by hand %g\n", what, st, k,
                s->list[st][k].op, s->list[st][k].mb, start[st][k], want[st][k]);
        failures++;
      }
}

static void hand_timelines(void) {
  double s0[8], s1[8], *start[2] = {s0, s1}, bubble;
  { /* GPipe, pp 2, 2 micro-batches, transfers 0.5 + 0.25:
     * stage 0: F0 [0,1] F1 [1,2]; stage 1: F0 max(0, 1 + .5) + .25 = 1.75, F1 max(2.75, 2.5) + .25 = 3,
     * B0 4, B1 6 (its own F's: no transfer); stage 0: B0 max(2, 6 + .5) + .25 = 6.75, B1 max(8.75, 8.5)
     * + .25 = 9, ends 11. Busy 2 x (1 + 1 + 2 + 2) = 12 over 2 x 11: bubble 10/22 */
    PipeSched s = pipe_sched_make(SCHED_GPIPE, 2, 2, 1);
    PipeTimes t = hand_times(&s, 0.5, 0.25);
    double end[2];
    double span = pipe_sched_play(&s, &t, &bubble, start, end);
    const double w0[] = {0, 1, 6.75, 9}, w1[] = {1.75, 3, 4, 6}, *want[] = {w0, w1};
    check_starts(&s, start, want, "gpipe with transfers");
    expect(near(span, 11) && near(bubble, 10.0 / 22) && near(end[0], 11) && near(end[1], 8),
           "gpipe with transfers: makespan 11, bubble 10/22, stages end at 11 and 8");
    fprintf(stderr, "  gpipe pp 2 x 2, transfers 0.5 + 0.25: makespan %g, bubble %.4f (by hand 11, %.4f)\n", span, bubble,
            10.0 / 22);
    /* stage 1 sums something for 0.5 before its B0 (pre): B0 4.5, B1 6.5, stage 0 B0 7.25, B1 9.5, ends 11.5 */
    t.pre[1][2] = 0.5;
    span = pipe_sched_play(&s, &t, &bubble, start, NULL);
    const double p0[] = {0, 1, 7.25, 9.5}, p1[] = {1.75, 3, 4.5, 6.5}, *pwant[] = {p0, p1};
    check_starts(&s, start, pwant, "gpipe with work between instructions");
    expect(near(span, 11.5) && near(bubble, 1 - 12 / 23.0), "gpipe with 0.5 between: makespan 11.5, bubble 1 - 12/23");
    pipe_times_free(&s, &t);
    /* transfers free: the textbook bubble (pp-1)/(M+pp-1) = 1/3 */
    t = hand_times(&s, 0, 0);
    span = pipe_sched_play(&s, &t, &bubble, NULL, NULL);
    expect(near(span, 9) && near(bubble, 1.0 / 3), "gpipe, transfers free: makespan 9, bubble (pp-1)/(M+pp-1)");
    pipe_times_free(&s, &t);
    pipe_sched_free(&s);
  }
  { /* 1F1B, pp 2, 3 micro-batches: stage 0 F0 F1 B0 F2 B1 B2, stage 1 F0 B0 F1 B1 F2 B2; transfers .5 + .25:
     * stage 0: F0 [0,1] F1 [1,2]; stage 1: F0 1.75, B0 2.75, F1 max(4.75, 2.5) + .25 = 5, B1 6;
     * stage 0: B0 max(2, 4.75 + .5) + .25 = 5.5, F2 7.5, B1 max(8.5, 8.5) + .25 = 8.75;
     * stage 1: F2 max(8, 8.5 + .5) + .25 = 9.25, B2 10.25; stage 0: B2 max(10.75, 12.75) + .25 = 13,
     * ends 15. Busy 2 x 3 x 3 = 18 over 2 x 15: bubble 0.4 */
    PipeSched s = pipe_sched_make(SCHED_1F1B, 2, 3, 1);
    PipeTimes t = hand_times(&s, 0.5, 0.25);
    double span = pipe_sched_play(&s, &t, &bubble, start, NULL);
    const double w0[] = {0, 1, 5.5, 7.5, 8.75, 13}, w1[] = {1.75, 2.75, 5, 6, 9.25, 10.25}, *want[] = {w0, w1};
    check_starts(&s, start, want, "1f1b with transfers");
    expect(near(span, 15) && near(bubble, 0.4), "1f1b with transfers: makespan 15, bubble 0.4");
    fprintf(stderr, "  1f1b pp 2 x 3, transfers 0.5 + 0.25: makespan %g, bubble %.4f (by hand 15, 0.4)\n", span, bubble);
    pipe_times_free(&s, &t);
    pipe_sched_free(&s);
  }
  { /* the step's start on every stage (pre of each first instruction, 3): the makespan is counted from
     * the first instruction's start, as --trace measures it: the same bubble as without */
    PipeSched s = pipe_sched_make(SCHED_GPIPE, 2, 2, 1);
    PipeTimes t = hand_times(&s, 0.5, 0.25);
    t.pre[0][0] = t.pre[1][0] = 3;
    double span = pipe_sched_play(&s, &t, &bubble, start, NULL);
    expect(near(span, 11) && near(bubble, 10.0 / 22) && near(start[0][0], 3),
           "the step's start before the first instructions: the same makespan and bubble");
    pipe_times_free(&s, &t);
    pipe_sched_free(&s);
  }
}

/* pipe_sched_play_spread: the times spread by cv over blocks of ref (each d x (1 + cv sqrt(ref / d) z)). */
static void spread_timelines(void) {
  PipeSched s = pipe_sched_make(SCHED_GPIPE, 4, 8, 1);
  PipeTimes t = hand_times(&s, 0, 0);
  double steady, b0, b1, b2, b3, b4, b5;
  double span = pipe_sched_play(&s, &t, &steady, NULL, NULL);
  double s0 = pipe_sched_play_spread(&s, &t, 0, 1, 101, &b0);
  expect(near(s0, span) && near(b0, steady) && near(steady, 3.0 / 11),
         "spread 0: the steady makespan and bubble ((pp-1)/(M+pp-1) = 3/11)");
  pipe_sched_play_spread(&s, &t, 0.1, 1, 101, &b1);
  double s2 = pipe_sched_play_spread(&s, &t, 0.2, 1, 101, &b2);
  pipe_sched_play_spread(&s, &t, 0.2, 1, 101, &b3);
  expect(b1 > steady + 0.005 && b2 > b1 + 0.005 && s2 > span, "spread 0.1, 0.2: the bubble above the steady one, growing with it");
  expect(b3 == b2, "the same spread twice: the same median bubble (a fixed seed)");
  /* every time and the block twice as long: the same relative spread, the same bubble; the block as it
   * was, times twice as long: a spread of 0.2 / sqrt(2) each, a smaller bubble */
  for (int st = 0; st < s.pp; st++)
    for (int k = 0; k < s.len[st]; k++) t.dur[st][k] *= 2;
  pipe_sched_play_spread(&s, &t, 0.2, 2, 101, &b4);
  pipe_sched_play_spread(&s, &t, 0.2, 1, 101, &b5);
  expect(fabs(b4 - b2) < 1e-12 && b5 < b2 - 0.002 && b5 > steady, "times and block x 2: the same bubble; times alone: less");
  fprintf(stderr, "  gpipe pp 4 x 8, F 1 B 2, spread over blocks of 1: 0 %.4f, 0.1 %.4f, 0.2 %.4f; times x 2: %.4f\n", b0, b1, b2, b5);
  pipe_times_free(&s, &t);
  pipe_sched_free(&s);
}

static Module *tiny_pp2(Arena *a) {
  FeDefine d[] = {{"layers", "4"}, {"micro_batch", "2"}, {"batch", "8"}, {"dp", "1"}, {"pp", "2"},
                  {"schedule", "gpipe"}};
  FeOptions o = {.defines = d, .ndefines = (int)(sizeof d / sizeof d[0]), .world = 2};
  Module *m = fe_compile(a, SHARDC_MODELS_DIR "/tiny.model", &o);
  if (!m) return NULL;
  m->target = TARGET_CPU;
  PipelineOptions po = {.verify = true};
  return pipeline_run(m, &po) ? m : NULL;
}

static void plan_timeline(void) {
  Arena a;
  arena_init(&a);
  Module *m = tiny_pp2(&a);
  expect(m && m->pipe, "tiny pp 2 compiles with a pipeline");
  if (!m || !m->pipe) {
    arena_free(&a);
    return;
  }
  const double bytes = 2.0 * 64 * 64 * 4; /* micro_batch x seq x d floats */
  CostDevice d;
  cost_device_defaults(m, &d);
  d.link[0].latency_s = 1e-3;
  d.link[0].bytes_per_s = bytes * 1e3;
  CostPipe cp;
  expect(cost_pipe(m, &d, &cp), "cost_pipe on a pipelined plan");
  double f[2] = {-1, -1}, b[2] = {-1, -1}, b0[2] = {-1, -1};
  bool transfers = true, same = true;
  for (int st = 0; st < 2; st++)
    for (int k = 0; k < cp.sched.len[st]; k++) {
      char op = cp.sched.list[st][k].op;
      bool in = (op == 'F' && st == 1) || (op == 'B' && st == 0);
      transfers &= in ? near(cp.t.lat[st][k], 1e-3) && near(cp.t.recv[st][k], 1e-3)
                      : cp.t.lat[st][k] == 0 && cp.t.recv[st][k] == 0;
      if (op == 'B' && b0[st] < 0) { /* the stage's first B: its gradients start the sums (pipe_fold.c) */
        b0[st] = cp.t.dur[st][k];
        continue;
      }
      double *x = op == 'F' ? &f[st] : &b[st];
      if (*x < 0) *x = cp.t.dur[st][k];
      same &= near(*x, cp.t.dur[st][k]) && cp.t.dur[st][k] > 0;
    }
  expect(transfers, "each receiving instruction: the link's 1 ms latency and 32 KiB / (32 KiB/ms) receive; none elsewhere");
  expect(same, "each stage's F's take one time, its B's after its first another");
  expect(b0[0] > 0 && b0[0] < b[0] && b0[1] > 0 && b0[1] < b[1], "each stage's first B, with no sums to add to, the shortest");
  fprintf(stderr, "  tiny pp 2 gpipe: F %.4g / %.4g ms, B %.4g / %.4g ms (the first %.4g / %.4g), bubble %.4f (FLOP-proportional %.4f)\n",
          f[0] * 1e3, f[1] * 1e3, b[0] * 1e3, b[1] * 1e3, b0[0] * 1e3, b0[1] * 1e3, cp.bubble, m->pipe->bubble);
  CostReport r;
  cost_estimate(m, &d, &r);
  expect(near(r.bubble, cp.bubble) && r.step_s >= cp.span, "the cost model's step holds the timeline, its bubble the timeline's");
  /* a wire 1000 times slower: the senders' instructions unchanged (they copy and go on), the receivers wait */
  CostDevice slow = d;
  slow.link[0].latency_s = 1;
  CostPipe cs;
  cost_pipe(m, &slow, &cs);
  bool unchanged = true;
  for (int st = 0; st < 2; st++)
    for (int k = 0; k < cs.sched.len[st]; k++) unchanged &= near(cs.t.dur[st][k], cp.t.dur[st][k]);
  expect(unchanged && near(cs.t.lat[1][0], 1), "a slower wire: the instructions' own times unchanged, the latency the receivers'");
  expect(cs.bubble > cp.bubble && cs.span > cp.span + 1.9, "a slower wire: a longer makespan (two transfers on its path), a larger bubble");
  cost_pipe_free(&cs);
  cost_pipe_free(&cp);
  arena_free(&a);
}

/* 3. zb's lists made with times (pipe_sched_make_timed) never leave more idle under those times than
 * the equal-time lists. */
static void zb_timed_lists(void) {
  /* the timed maker never leaves more idle under its times than the equal-time lists: GPT-3's stages
   * at pp 32 x 192 micro-batches (B 1.02 F, W 0.91 F, as the cost model has them on p4de), where the
   * greedy play with those times alone leaves 11.8 % idle against the equal-time lists' 9.7 %; and
   * 200 random times (pp 2-12, 1-30 micro-batches) */
  {
    double t[96], bt, be;
    for (int s = 0; s < 32; s++) t[s] = 1, t[32 + s] = 1.02, t[64 + s] = 0.91;
    PipeSched u = pipe_sched_make(SCHED_ZB, 32, 192, 1), x = pipe_sched_make_timed(SCHED_ZB, 32, 192, 1, t);
    pipe_sched_timeline(&u, t, t + 32, t + 64, &be, NULL, NULL);
    pipe_sched_timeline(&x, t, t + 32, t + 64, &bt, NULL, NULL);
    expect(bt <= be + 1e-12, "zb with GPT-3's times: no more idle than the equal-time lists");
    fprintf(stderr, "  zb pp 32, 192 micro-batches, B 1.02 F, W 0.91 F: bubble %.4f (equal-time lists %.4f)\n", bt, be);
    pipe_sched_free(&u);
    pipe_sched_free(&x);
    srand(7);
    for (int r = 0; r < 200; r++) {
      int pp = 2 + rand() % 11, M = 1 + rand() % 30;
      for (int i = 0; i < 3 * pp; i++) t[i] = 0.2 + (rand() % 100) / 25.0;
      u = pipe_sched_make(SCHED_ZB, pp, M, 1), x = pipe_sched_make_timed(SCHED_ZB, pp, M, 1, t);
      double su = pipe_sched_timeline(&u, t, t + pp, t + 2 * pp, NULL, NULL, NULL);
      double sx = pipe_sched_timeline(&x, t, t + pp, t + 2 * pp, NULL, NULL, NULL);
      expect(sx <= su * (1 + 1e-12), "zb with random times: no longer than the equal-time lists under them");
      pipe_sched_free(&u);
      pipe_sched_free(&x);
    }
  }
}

static void zb_h1_lists(void) {
  char msg[256];
  int better = 0, cases = 0;
  for (int pp = 2; pp <= 8; pp++)
    for (int M = pp; M <= 24; M++) {
      double t[24], bz, bg;
      int inflight[8];
      for (int i = 0; i < 3 * pp; i++) t[i] = 1;
      PipeSched z = pipe_sched_make(SCHED_ZB, pp, M, 1), g = pipe_sched_zb_greedy(pp, M, NULL);
      PipeStep order[3 * 8 * 24 + 1];
      bool ok = pipe_sched_check(&z, 1, order, msg, sizeof msg);
      expect(ok, "zb's lists pass the check");
      if (!ok) fprintf(stderr, "  pp %d, %d micro-batches: %s\n", pp, M, msg);
      pipe_sched_timeline(&z, t, t + pp, t + 2 * pp, &bz, inflight, NULL);
      pipe_sched_timeline(&g, t, t + pp, t + 2 * pp, &bg, NULL, NULL);
      double h1 = (pp - 1.0) / (3.0 * M + pp - 1);
      if (bz > h1 + 1e-12) fprintf(stderr, "  pp %d, %d micro-batches: bubble %.4f, ZB-H1 %.4f\n", pp, M, bz, h1);
      expect(bz <= h1 + 1e-12, "zb with equal times: bubble at most ZB-H1's (pp-1)/(3M+pp-1)");
      expect(bz <= bg + 1e-12, "zb with equal times: bubble at most the greedy lists'");
      better += bz < bg - 1e-9;
      cases++;
      for (int s = 0; s < pp; s++) expect(inflight[s] <= pp, "zb holds at most 1F1B's peak, pp micro-batches");
      if ((pp == 4 || pp == 8) && (M == 8 || M == 16))
        fprintf(stderr, "  zb pp %d, %d micro-batches, equal times: bubble %.4f (ZB-H1 %.4f; greedy lists %.4f)\n", pp, M, bz,
                h1, bg);
      if (pp == 4 && M == 8) expect(fabs(bz - 3.0 / 27) < 1e-12, "zb pp 4 x 8, equal times: bubble 3/27");
      pipe_sched_free(&z);
      pipe_sched_free(&g);
    }
  expect(better > 0, "zb with equal times: ZB-H1's lists beat the greedy ones somewhere");
  fprintf(stderr, "  equal times: %d of %d (pp, M) shorter than the greedy lists\n", better, cases);
  srand(11);
  int shorter = 0;
  for (int r = 0; r < 300; r++) {
    int pp = 2 + rand() % 7, M = 1 + rand() % 24;
    double t[24];
    int inflight[8];
    for (int i = 0; i < 3 * pp; i++) t[i] = 0.2 + (rand() % 100) / 25.0;
    PipeSched x = pipe_sched_make_timed(SCHED_ZB, pp, M, 1, t), g = pipe_sched_zb_greedy(pp, M, t),
              e = pipe_sched_zb_greedy(pp, M, NULL);
    PipeStep order[3 * 8 * 24 + 1];
    expect(pipe_sched_check(&x, 1, order, msg, sizeof msg), "zb with random times passes the check");
    double sx = pipe_sched_timeline(&x, t, t + pp, t + 2 * pp, NULL, inflight, NULL);
    double sg = pipe_sched_timeline(&g, t, t + pp, t + 2 * pp, NULL, NULL, NULL);
    double se = pipe_sched_timeline(&e, t, t + pp, t + 2 * pp, NULL, NULL, NULL);
    double old = sg < se ? sg : se;
    expect(sx <= old * (1 + 1e-12), "zb with random times: never longer than the greedy lists under them");
    shorter += sx < old * (1 - 1e-9);
    for (int s = 0; s < pp; s++) expect(inflight[s] <= pp, "zb with random times holds at most pp micro-batches");
    pipe_sched_free(&x);
    pipe_sched_free(&g);
    pipe_sched_free(&e);
  }
  expect(shorter > 0, "zb with random times: ZB-H1's lists shorter than the greedy ones in some");
  fprintf(stderr, "  random times: %d of 300 shorter than the greedy lists\n", shorter);
}

static Module *tiny_one(Arena *a) {
  FeDefine d[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "4"}, {"micro_batch", "8"}, {"batch", "8"},
                  {"dp", "1"}, {"pp", "1"}};
  FeOptions o = {.defines = d, .ndefines = (int)(sizeof d / sizeof d[0]), .world = 1};
  Module *m = fe_compile(a, SHARDC_MODELS_DIR "/tiny.model", &o);
  if (!m) return NULL;
  m->target = TARGET_CPU;
  PipelineOptions po = {.verify = true};
  return pipeline_run(m, &po) ? m : NULL;
}

/* The analytic model of tiny's one-rank plan (the base of checks 4 and 5) in a, on the generic CPU;
 * false (a failure counted, a freed) when tiny does not compile. */
static bool analytic_base(Arena *a, const char *what, Module **base, CostDevice *dev, PlanModel *pm) {
  arena_init(a);
  *base = tiny_one(a);
  if (!*base) {
    fprintf(stderr, "FAIL %s: tiny does not compile\n", what);
    failures++;
    arena_free(a);
    return false;
  }
  cost_device_defaults(*base, dev);
  plan_model_init(pm, *base, dev);
  return true;
}

/* 4. The plan search's analytic model plays every schedule's lists as the pipe pass makes them
 * (zb's made with its own F, B and W: pipe_sched_make_timed), not the ideal (pp-1)/(3M+pp-1): tiny
 * (the base plan, one rank, the generic CPU), zb candidates pp 2 and 4 x 8-32 micro-batches, full
 * recompute (B = F's recompute + its backward: B well over F) and none; the estimate's bubble is that
 * of plan_pp_play with its stage times, whose zb lists differ from the equal-time ones for some. */
static void check_analytic_zb(void) {
  fprintf(stderr, "the plan search's analytic model: zb's lists made with its times\n");
  Arena a;
  Module *base;
  CostDevice dev;
  PlanModel pm;
  if (!analytic_base(&a, "analytic zb", &base, &dev, &pm)) return;
  int differ = 0, n = 0;
  for (int pp = 2; pp <= 4; pp *= 2)
    for (int M = 8; M <= 32; M *= 2)
      for (int r = 0; r < 2; r++) {
        PlanCand c = {.tp = 1, .pp = pp, .cp = 1, .dp = 1, .zero = 0, .mb = 1, .v = 1, .accum = M,
                      .rec = r ? RECOMPUTE_FULL : RECOMPUTE_NONE, .sched = SCHED_ZB};
        PlanEstimate e;
        plan_model_estimate(&pm, base, &dev, &c, &e);
        PipeSched x, u = pipe_sched_make(SCHED_ZB, pp, M, 1);
        double bt;
        plan_pp_play(SCHED_ZB, pp, M, 1, e.pp_key, &x, NULL, &bt);
        bool same = true;
        for (int s = 0; s < pp && same; s++)
          for (int k = 0; k < x.len[s] && same; k++)
            same = x.list[s][k].op == u.list[s][k].op && x.list[s][k].mb == u.list[s][k].mb;
        differ += !same;
        n++;
        fprintf(stderr, "  pp %d, %d micro-batches, recompute %s: B %.4g F, W %.4g F, the last stage's F %.4g F more: "
                "bubble %.4f ((pp-1)/(3M+pp-1) %.4f)\n", pp, M, r ? "full" : "none", e.zb_b, e.zb_w, e.pp_key[PK_FL],
                e.bubble, (pp - 1.0) / (3.0 * M + pp - 1));
        expect(e.zb_b > 0 && e.zb_w > 0, "analytic zb: its F, B and W");
        expect(fabs(e.bubble - bt) < 1e-12, "analytic zb: the bubble of the lists made with its times, played with them");
        pipe_sched_free(&x);
        pipe_sched_free(&u);
      }
  expect(differ > 0, "analytic zb: some candidates' lists are not the equal-time ones");
  fprintf(stderr, "  %d of %d candidates' lists differ from the equal-time ones\n", differ, n);
  plan_model_free(&pm);
  arena_free(&a);
}

/* 5. The analytic model's bubble and step against the compiled plan's (the cost model's timeline,
 * passes/cost.c) for every schedule: tiny (seq 8, d 32, 4 layers: the head and loss on the last stage
 * weigh about two layers, the merges between instructions as much again) at pp 2 x 4 and 8
 * micro-batches of 1, the model calibrated on the one-rank plan. The analytic bubble within 0.07 of
 * the compiled (measured: 0.002-0.063) and the step within 15 % (0.97-1.07), and nearer it than the
 * closed forms (pp-1)/(M+pp-1) (interleaved M v; zb 3M) in every case: they miss the compiled bubble
 * by 0.08-0.15, over the tolerance (the test fails with them). (Before each stage's gradient sums
 * were folded into its backward loops, passes/pipe_fold.c, the merges between instructions made the
 * compiled bubbles 0.08-0.2 larger and the closed forms missed by 0.18-0.32.) */
static void check_analytic_vs_compiled(void) {
  fprintf(stderr, "the plan search's analytic model against the compiled timeline\n");
  Arena a;
  Module *base;
  CostDevice dev;
  PlanModel pm;
  if (!analytic_base(&a, "analytic vs compiled", &base, &dev, &pm)) return;
  static const char *const names[] = {"gpipe", "1f1b", "interleaved", "zb"};
  int far = 0;
  for (int q = 0; q < 4; q++)
    for (int M = 4; M <= 8; M *= 2) {
      char mb[8];
      snprintf(mb, sizeof mb, "%d", M);
      FeDefine d[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "4"}, {"micro_batch", "1"}, {"batch", mb},
                      {"dp", "1"}, {"pp", "2"}, {"schedule", names[q]}};
      FeOptions o = {.defines = d, .ndefines = (int)(sizeof d / sizeof d[0]), .world = 2};
      Arena ca;
      arena_init(&ca);
      Module *m = fe_compile(&ca, SHARDC_MODELS_DIR "/tiny.model", &o);
      PipelineOptions po = {.verify = true};
      if (m) m->target = TARGET_CPU;
      if (!m || !pipeline_run(m, &po) || !m->pipe) {
        fprintf(stderr, "FAIL analytic vs compiled: tiny pp 2 %s x %d does not compile\n", names[q], M);
        failures++;
        arena_free(&ca);
        continue;
      }
      CostReport r;
      cost_estimate(m, &dev, &r);
      PlanCand c = {.tp = 1, .pp = 2, .cp = 1, .dp = 1, .zero = 0, .mb = 1, .v = q == 2 ? 2 : 1, .accum = M,
                    .rec = RECOMPUTE_NONE, .sched = (PipeSchedule)q};
      PlanEstimate e;
      plan_model_estimate(&pm, base, &dev, &c, &e);
      double closed = 1.0 / ((q == 2 ? 2.0 : 1.0) * M + 1);
      if (q == 3) closed = 1.0 / (3.0 * M + 1);
      fprintf(stderr, "  pp 2 %s x %d: bubble analytic %.4f, compiled %.4f (closed form %.4f); step analytic %.4g ms, "
              "compiled %.4g ms (%.3f)\n", names[q], M, e.bubble, r.bubble, closed, e.step_s * 1e3, r.step_s * 1e3,
              e.step_s / r.step_s);
      expect(fabs(e.bubble - r.bubble) < 0.07, "analytic bubble within 0.07 of the compiled");
      expect(e.step_s > 0.85 * r.step_s && e.step_s < 1.15 * r.step_s, "analytic step within 15 % of the compiled");
      far += fabs(closed - r.bubble) > 0.07 && fabs(closed - r.bubble) > fabs(e.bubble - r.bubble);
      arena_free(&ca);
    }
  fprintf(stderr, "  %d of 8 closed forms off the compiled bubble by over 0.07 and the analytic's miss\n", far);
  expect(far == 8, "every closed form off the compiled bubble by over 0.07 and the analytic's miss");
  plan_model_free(&pm);
  arena_free(&a);
}

/* 6. zb's W hold for some layers (`zb_w hold(N)`, passes/recompute_split.c) in the analytic model: tiny pp 2
 * (4 layers: 2 a stage) x 8 micro-batches under full recompute. hold(1) lies between no hold and the whole
 * hold in memory and in W's time; auto, with a capacity between hold(1)'s estimate and the whole hold's,
 * takes hold(1) (as the driver's partial_hold, replan.c), below hold(1)'s none. */
static void check_analytic_partial_hold(void) {
  fprintf(stderr, "the analytic model: zb's W hold for the last layers of each stage only\n");
  Arena a;
  Module *base;
  CostDevice dev;
  PlanModel pm;
  if (!analytic_base(&a, "analytic hold(N)", &base, &dev, &pm)) return;
  PlanCand c = {.tp = 1, .pp = 2, .cp = 1, .dp = 1, .zero = 0, .mb = 1, .v = 1, .accum = 8, .rec = RECOMPUTE_FULL,
                .sched = SCHED_ZB};
  PlanEstimate e[3]; /* none, hold(1), all */
  double cap0 = pm.capacity;
  pm.capacity = 0;
  for (int k = 0; k < 3; k++) {
    base->plan.zb_w = k == 0 ? ZBW_RECOMPUTE : ZBW_HOLD;
    base->plan.zb_w_layers = k == 1 ? 1 : 0;
    plan_model_estimate(&pm, base, &dev, &c, &e[k]);
  }
  fprintf(stderr, "  memory %.0f / %.0f / %.0f B, W %.4g / %.4g / %.4g F (none, hold(1), all)\n", e[0].total, e[1].total,
          e[2].total, e[0].zb_w, e[1].zb_w, e[2].zb_w);
  expect(e[1].zbw_hold && e[1].zbw_layers == 1 && e[2].zbw_layers == 0, "analytic hold(1): the hold for one layer a stage");
  expect(e[0].total < e[1].total && e[1].total < e[2].total, "analytic hold(1): memory between none and all");
  expect(e[0].zb_w > e[1].zb_w && e[1].zb_w > e[2].zb_w, "analytic hold(1): W's time between none and all");
  base->plan.zb_w = ZBW_AUTO, base->plan.zb_w_layers = 0;
  PlanEstimate au;
  pm.capacity = (e[1].total + e[2].total) / 2 * plan_ana_frag(2);
  plan_model_estimate(&pm, base, &dev, &c, &au);
  expect(au.zbw_hold && au.zbw_layers == 1 && au.total == e[1].total, "analytic auto: hold(1) where the whole hold does not fit");
  pm.capacity = (e[0].total + e[1].total) / 2 * plan_ana_frag(2);
  plan_model_estimate(&pm, base, &dev, &c, &au);
  expect(!au.zbw_hold && au.total == e[0].total, "analytic auto: none where hold(1) does not fit");
  pm.capacity = cap0;
  plan_model_free(&pm);
  arena_free(&a);
}

int main(void) {
  hand_timelines();
  spread_timelines();
  plan_timeline();
  zb_timed_lists();
  zb_h1_lists();
  check_analytic_zb();
  check_analytic_vs_compiled();
  check_analytic_partial_hold();
  if (failures) {
    fprintf(stderr, "test_pp_timeline: %d failure(s)\n", failures);
    return 1;
  }
  fprintf(stderr, "test_pp_timeline: ok\n");
  return 0;
}
