/* tests/passes/test_pp_equiv_sched.c — the pipeline's schedules and the balanced split, without a program
 * (split off test_pp_equiv.c): the GPipe/1F1B lists, their bubble (GPipe (pp-1)/(M+pp-1)), 1F1B's in-flight
 * bound (pp - s on stage s), interleaved's and zb's smaller bubbles (zb within 1F1B's memory), zb's lists made
 * with given stage times, hand-written bad schedules rejected naming the stage, rank, step and instruction,
 * and pipe_balance_split's splits worked out by hand, its fit searches' shortcuts against their stepwise reference.
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
#include "pipeline.h"

static int failures;

static void expect(bool ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "FAIL %s\n", what);
    failures++;
  }
}

/* The schedules themselves: bubble, in-flight activations, and bad lists rejected. */
static void check_schedules(void) {
  char msg[1024];
  for (int pp = 2; pp <= 4; pp += 2)
    for (int M = pp; M <= 8; M *= 2) {
      double tf[4] = {1, 1, 1, 1}, tb[4] = {2, 2, 2, 2}, bub;
      int infl[4];
      PipeSched g = pipe_sched_make(SCHED_GPIPE, pp, M, 1), o = pipe_sched_make(SCHED_1F1B, pp, M, 1);
      PipeStep order[64];
      expect(pipe_sched_check(&g, 1, order, msg, sizeof msg) && pipe_sched_check(&o, 1, order, msg, sizeof msg),
             "gpipe and 1f1b pass the check");
      double want = (double)(pp - 1) / (M + pp - 1);
      pipe_sched_time(&g, tf, tb, &bub, infl);
      expect(fabs(bub - want) < 1e-12 && infl[0] == M, "gpipe: bubble (pp-1)/(M+pp-1), M micro-batches in flight");
      pipe_sched_time(&o, tf, tb, &bub, infl);
      expect(fabs(bub - want) < 1e-12, "1f1b: the same bubble as gpipe");
      for (int s = 0; s < pp; s++) expect(infl[s] == pp - s, "1f1b: stage s holds at most pp - s micro-batches");
      fprintf(stderr, "  schedules pp %d, %d micro-batches: bubble %.4f (gpipe and 1f1b), 1f1b stage 0 holds %d\n", pp, M,
              bub, infl[0]);
      pipe_sched_free(&g);
      pipe_sched_free(&o);
    }
  for (int pp = 2; pp <= 4; pp += 2)
    for (int M = pp; M <= 8; M *= 2) { /* interleaved, 2 chunks: a smaller bubble than 1F1B's */
      double tf[4] = {1, 1, 1, 1}, tb[4] = {2, 2, 2, 2}, bi, b1;
      PipeSched o = pipe_sched_make(SCHED_1F1B, pp, M, 1), iv = pipe_sched_make(SCHED_INTERLEAVED, pp, M, 2);
      PipeStep order[128];
      expect(pipe_sched_check(&iv, 1, order, msg, sizeof msg), "interleaved passes the check");
      pipe_sched_time(&o, tf, tb, &b1, NULL);
      pipe_sched_time(&iv, tf, tb, &bi, NULL); /* chunk times: half a stage's */
      expect(bi < b1 && fabs(bi - (double)(pp - 1) / (2 * M + pp - 1)) < 1e-12,
             "interleaved: the bubble (pp-1)/(vM+pp-1), smaller than 1f1b's");
      fprintf(stderr, "  interleaved pp %d, %d micro-batches, 2 chunks: bubble %.4f (1f1b %.4f)\n", pp, M, bi, b1);
      pipe_sched_free(&o);
      pipe_sched_free(&iv);
    }
  for (int pp = 2; pp <= 4; pp += 2)
    for (int M = pp; M <= 8; M *= 2) { /* zb: B and W apart, W filling what 1F1B leaves idle */
      double tf[4] = {1, 1, 1, 1}, tb[4] = {1, 1, 1, 1}, tw[4] = {1, 1, 1, 1}, t2[4] = {2, 2, 2, 2}, bz, b1;
      int iz[4], i1[4];
      PipeSched o = pipe_sched_make(SCHED_1F1B, pp, M, 1), z = pipe_sched_make(SCHED_ZB, pp, M, 1);
      PipeStep order[128];
      expect(pipe_sched_check(&z, 1, order, msg, sizeof msg), "zb passes the check");
      pipe_sched_time(&o, tf, t2, &b1, i1);
      pipe_sched_timeline(&z, tf, tb, tw, &bz, iz, NULL);
      expect(bz < b1, "zb: a smaller bubble than 1f1b");
      for (int s = 0; s < pp; s++) expect(iz[s] <= i1[0], "zb holds no more micro-batches than 1f1b's peak (stage 0's)");
      fprintf(stderr, "  zb pp %d, %d micro-batches: bubble %.4f (1f1b %.4f), stage 0 holds %d\n", pp, M, bz, b1, iz[0]);
      pipe_sched_free(&o);
      pipe_sched_free(&z);
    }
  /* zb's lists made with the stages' times (W half of F and B, as on a CPU): the same lists as the
   * equal-time ones for equal times, within 1F1B's memory, and played with those times no larger a
   * bubble than the equal-time lists' and a smaller one than 1F1B's (whose B is B + W) */
  for (int pp = 2; pp <= 8; pp *= 2)
    for (int M = pp; M <= 16; M *= 2) {
      double t1[24], th[24], tfb[8], bu, bt, b1;
      for (int s = 0; s < pp; s++) t1[s] = t1[pp + s] = t1[2 * pp + s] = 1, th[s] = th[pp + s] = 1, th[2 * pp + s] = 0.5;
      for (int s = 0; s < pp; s++) tfb[s] = th[pp + s] + th[2 * pp + s];
      PipeSched u = pipe_sched_make(SCHED_ZB, pp, M, 1), e = pipe_sched_make_timed(SCHED_ZB, pp, M, 1, t1),
                t = pipe_sched_make_timed(SCHED_ZB, pp, M, 1, th), o = pipe_sched_make(SCHED_1F1B, pp, M, 1);
      bool same = true;
      for (int s = 0; s < pp; s++)
        for (int k = 0; k < u.len[s] && same; k++)
          same = e.len[s] == u.len[s] && e.list[s][k].op == u.list[s][k].op && e.list[s][k].mb == u.list[s][k].mb;
      expect(same, "zb with equal times given: the equal-time lists");
      PipeStep order[3 * 8 * 16 + 1];
      expect(pipe_sched_check(&t, 1, order, msg, sizeof msg), "zb made with the stages' times passes the check");
      int it[8], i1[8];
      pipe_sched_timeline(&u, th, th + pp, th + 2 * pp, &bu, NULL, NULL);
      pipe_sched_timeline(&t, th, th + pp, th + 2 * pp, &bt, it, NULL);
      pipe_sched_time(&o, th, tfb, &b1, i1);
      /* at pp > 2 the equal-time lists are ZB-H1's, which with W = B / 2 take no longer than the greedy
       * lists made with those times (pp 4 x 8: 0.1837 both; the equal-time greedy lists 0.298) */
      expect(bt <= bu + 1e-12, "zb made with W = B / 2: no larger a bubble than the equal-time lists'");
      if (pp == 2 && M > pp) expect(bt < bu - 1e-9, "zb pp 2 made with W = B / 2: a smaller bubble than the equal-time lists'");
      expect(bt < b1, "zb made with W = B / 2: a smaller bubble than 1f1b's");
      for (int s = 0; s < pp; s++) expect(it[s] <= i1[0], "timed zb holds no more micro-batches than 1f1b's peak");
      fprintf(stderr, "  zb pp %d, %d micro-batches, W = B / 2: bubble %.4f with lists made for those times, %.4f with "
              "the equal-time lists (1f1b %.4f)\n", pp, M, bt, bu, b1);
      pipe_sched_free(&u);
      pipe_sched_free(&e);
      pipe_sched_free(&t);
      pipe_sched_free(&o);
    }
  /* a cycle: stage 1 runs B0 first, but its forward F0 must come first; swap stage 0's order so
   * both wait: stage 0 starts with B0 (needs stage 1's B0), stage 1 with F1 (needs stage 0's F1) */
  PipeSched bad = pipe_sched_make(SCHED_GPIPE, 2, 2, 1);
  bad.list[0][0] = (PipeInstr){'F', 1, 0};
  bad.list[0][1] = (PipeInstr){'F', 0, 0};
  bad.list[1][0] = (PipeInstr){'F', 0, 0};
  bad.list[1][1] = (PipeInstr){'F', 1, 0};
  PipeStep order[16];
  bool ok = pipe_sched_check(&bad, 4, order, msg, sizeof msg);
  fprintf(stderr, "  reordered (valid): %s\n", ok ? "accepted" : msg);
  expect(ok, "a reordered but deadlock-free schedule is accepted");
  /* stage 0: F0 B0 F1 B1 — B0 waits for stage 1's B0; stage 1: F1 F0 ... — F1 waits for stage 0's F1: a cycle */
  bad.list[0][0] = (PipeInstr){'F', 0, 0};
  bad.list[0][1] = (PipeInstr){'B', 0, 0};
  bad.list[0][2] = (PipeInstr){'F', 1, 0};
  bad.list[0][3] = (PipeInstr){'B', 1, 0};
  bad.list[1][0] = (PipeInstr){'F', 1, 0};
  bad.list[1][1] = (PipeInstr){'F', 0, 0};
  ok = pipe_sched_check(&bad, 4, order, msg, sizeof msg);
  fprintf(stderr, "  cycle: %s\n", msg);
  expect(!ok && strstr(msg, "cycle") && strstr(msg, "stage 0 (rank 0) step 1: B0") &&
             strstr(msg, "stage 1 (rank 4) step 0: F1"),
         "a cycle of waits is rejected naming stage, rank, step and instruction");
  bad.list[1][1] = (PipeInstr){'B', 0, 0};
  bad.list[1][0] = (PipeInstr){'B', 0, 0};
  ok = pipe_sched_check(&bad, 4, order, msg, sizeof msg);
  fprintf(stderr, "  malformed: %s\n", msg);
  expect(!ok && strstr(msg, "stage 1 (rank 4) step 0: B0 comes before the forward"), "a backward before its forward is rejected");
  pipe_sched_free(&bad);
}

/* The balanced split worked out by hand: 8 layers of 1 + 2 s over 4 stages, the embedding 1 s on the
 * first, the head 4 s on the last. The least slowest stage is 9 s (even: the last's 10): at most 2, 3,
 * 3 and 1 layers, one too many; 1F1B's in flight (4, 3, 2, 1 micro-batches of 10 bytes a layer) has
 * the lowest peak with it off stage 1: [2, 2, 3, 1]; with 8 in flight on the first stage, off stage 0. */
static void check_balance(void) {
  int infl[4] = {4, 3, 2, 1};
  PipeBalance b = {.pp = 4, .layers = 8, .layer_f = 1, .layer_b = 2, .first_f = 0.5, .first_b = 0.5, .last_f = 4,
                   .layer_act = 10, .layer_bytes = 1, .inflight = infl};
  int64_t n[4] = {0};
  expect(pipe_balance_split(&b, n) && n[0] == 2 && n[1] == 2 && n[2] == 3 && n[3] == 1,
         "balanced: [2, 2, 3, 1] under 1f1b's in flight");
  fprintf(stderr, "  balanced, 1f1b: [%lld, %lld, %lld, %lld]\n", (long long)n[0], (long long)n[1], (long long)n[2],
          (long long)n[3]);
  infl[0] = 8;
  infl[1] = infl[2] = infl[3] = 1;
  expect(pipe_balance_split(&b, n) && n[0] == 1 && n[1] == 3 && n[2] == 3 && n[3] == 1,
         "balanced: [1, 3, 3, 1] with the first stage's activations the largest");
  b.layers = 3;
  expect(!pipe_balance_split(&b, n), "balanced: no split of 3 layers over 4 stages");
}

/* The fit searches' shortcuts (passes/pipe_balance.c: past_most's end of the padding scan, fewest_off's and
 * chunks_off's layers off in one step) give the splits of their one-at-a-time reference (PipeBalance.stepwise):
 * 3000 random balances of 2-8 stages x 1-3 chunks, 1-96 layers over them, each stage's fixed bytes and the
 * capacity drawn around the stages' bytes (some fit splits, some none), the chunks' in-flight counts equal per
 * stage or not, and half the interleaved ones with each stage's peaks as its chunks' forwards (pipe_sched_chunk_loads'). */
static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(uint64_t n) {
  rnd_state ^= rnd_state << 13, rnd_state ^= rnd_state >> 7, rnd_state ^= rnd_state << 17;
  return rnd_state % n;
}

static void check_balance_fit(void) {
  int same = 0, fitted = 0, none = 0, moved = 0, chunked = 0;
  for (int i = 0; i < 3000; i++) {
    int pp = 2 + (int)rnd(7), v = 1 + (int)rnd(3), nv = pp * v, infl[RT_MAX_STAGES];
    int64_t fixed[8], by_time[RT_MAX_STAGES], fast[RT_MAX_STAGES], ref[RT_MAX_STAGES];
    bool equal = rnd(4) != 0;
    for (int k = 0; k < nv; k++) infl[k] = equal && k >= pp ? infl[k % pp] : 1 + (int)rnd(2 * pp);
    PipeBalance b = {.pp = nv, .chunks = v, .layers = nv + (int64_t)rnd(96), .layer_f = 1 + (double)rnd(100) / 50,
                     .layer_b = 2 + (double)rnd(100) / 25, .first_f = (double)rnd(100) / 20,
                     .first_b = (double)rnd(100) / 40, .last_f = (double)rnd(100) / 10, .layer_act = 1 + (int64_t)rnd(1000),
                     .first_act = (int64_t)rnd(2000), .last_act = (int64_t)rnd(4000),
                     .layer_bytes = (int64_t)rnd(3000), .inflight = infl};
    int cload[8 * PIPE_LOADS * 3], ncload[8];
    if (v > 1 && rnd(2)) { /* each stage's peaks as chunks' forwards (pipe_sched_chunk_loads'): chunks_off's general path */
      for (int s = 0; s < pp; s++) {
        ncload[s] = 1 + (int)rnd(4);
        for (int j = 0; j < ncload[s] * v; j++) cload[s * PIPE_LOADS * v + j] = (int)rnd(2 * (uint64_t)pp + 1);
      }
      b.cload = cload, b.ncload = ncload, chunked++;
    }
    bool ok = pipe_balance_split(&b, by_time);
    if (!ok) continue;
    /* the stages' bytes at the time split, the capacity between 0.5 and 1.3 of the largest */
    int64_t top = 0;
    for (int s = 0; s < pp; s++) {
      fixed[s] = (int64_t)rnd(20000);
      b.fixed = fixed;
      int64_t x = pipe_balance_rank_bytes(&b, by_time, s);
      top = x > top ? x : top;
    }
    b.cap = (double)top * (0.5 + (double)rnd(800) / 1000);
    bool okf = pipe_balance_split(&b, fast);
    b.stepwise = true;
    bool okr = pipe_balance_split(&b, ref);
    bool eq = okf == okr && (!okf || !memcmp(fast, ref, (size_t)nv * sizeof *fast));
    same += eq;
    if (!eq) {
      fprintf(stderr, "  fit split %d (pp %d x %d chunks, %lld layers, cap %.0f): shortcuts", i, pp, v,
              (long long)b.layers, b.cap);
      for (int k = 0; k < nv; k++) fprintf(stderr, " %lld", (long long)fast[k]);
      fprintf(stderr, ", stepwise");
      for (int k = 0; k < nv; k++) fprintf(stderr, " %lld", (long long)ref[k]);
      fprintf(stderr, "\n");
    }
    bool fits = pipe_balance_fits(&b, ref);
    fitted += fits;
    none += !fits;
    moved += fits && memcmp(ref, by_time, (size_t)nv * sizeof *ref) != 0;
  }
  fprintf(stderr, "  fit splits: %d the same as the stepwise search's (%d fit, %d of them not the time split; %d none; %d "
          "drawn with chunk loads)\n", same, fitted, moved, none, chunked);
  expect(same == fitted + none, "balanced fit: the shortcuts' splits are the stepwise search's");
  expect(moved > 100 && none > 100, "balanced fit: the draws cover splits moved by memory and splits that cannot fit");
}

int main(void) {
  check_schedules();
  check_balance();
  check_balance_fit();
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else fprintf(stderr, "pipeline schedules and balanced splits: all checks passed\n");
  return failures ? 1 : 0;
}
