/* passes/pipe_balance.c — the layers split over the pipeline stages by time and memory
 * (docs/pipeline.md, "Balanced stages").
 *
 * pipe_balance_make, called by the stage pass before it splits the layers (the micro-step is one
 * `repeat accum` region whose layer loops still run every layer): the micro-step's parts
 * (pipe_classify) timed by the cost model (cost_nodes_time: one layer's forward and backward, the
 * embedding's forward and backward on the first stage, the head's and loss's on the last, what
 * every stage runs), the activations each keeps for its backward (pipe_kept_bytes), the
 * micro-batches the schedule holds in flight on each stage, and one layer's parameters, gradients
 * and optimizer states. Then the balanced split (pipe_balance_split):
 *   1. time: the least bottleneck T, the slowest stage's forward and backward per micro-batch, over
 *      the splits giving every stage at least one layer (the candidates are every stage's time at
 *      every layer count; T is feasible when the most layers each stage runs within T cover them);
 *   2. memory: from those most counts, one layer at a time is taken off the stage where that leaves
 *      the lowest peak of the stages' memory (activations in flight, the layer stacks padded to the
 *      largest count; ties: off the slower stage), down to the layers.
 * Against the device's memory (Plan.stage_fixed, per stage): the fastest split whose every stage fits
 * (split_fitting; interleaved, a stage's chunks together, split_fitting_chunks).
 * `pp N layers(balanced)` applies it (passes/stage.c); otherwise the plan prints it where it beats
 * the plan's split (passes/pipe_report.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "diag.h"
#include "memplan.h"
#include "pipe_internal.h"

double pipe_balance_stage_s(const PipeBalance *b, int st, int64_t n) {
  return b->all_f + (double)n * (b->layer_f + b->layer_b) + (st == 0 ? b->first_f + b->first_b : 0) +
         (st == b->pp - 1 ? b->last_f : 0);
}

/* What one forward of (virtual) stage st with n layers keeps for its backward. */
static int64_t stage_act(const PipeBalance *b, int st, int64_t n) {
  return n * b->layer_act + (st == 0 ? b->first_act : 0) + (st == b->pp - 1 ? b->last_act : 0);
}

int64_t pipe_balance_stage_bytes(const PipeBalance *b, int st, int64_t n, int64_t most) {
  return (int64_t)b->inflight[st] * stage_act(b, st, n) + most * b->layer_bytes;
}

/* Interleaved: stage s's bytes with n[c pp + s] layers on its chunk c, chunk c's stacks padded to m[c]: the
 * stacks, and the activations of its chunks' forwards in flight, at the most of its peaks (b->cload: each
 * chunk's forwards held there, each with its own layers); without them each chunk's inflight[k] forwards.
 * (Shared alike, a chunk larger than the others was under-counted: tiny's [1, 3, 2, 2] on stage 1 predicted
 * 21.49 MiB, planned 23.50: its 3-layer chunk 0 holds 3 forwards, its chunk 1 none, at the peak.) */
static int64_t chunks_bytes(const PipeBalance *b, int s, const int64_t *n, const int64_t *m) {
  int v = b->chunks, pp = b->pp / v, nl = b->cload ? b->ncload[s] : 0;
  int64_t x = 0, top = 0;
  for (int c = 0; c < v; c++) x += nl ? m[c] * b->layer_bytes : pipe_balance_stage_bytes(b, c * pp + s, n[c * pp + s], m[c]);
  for (int i = 0; i < nl; i++) {
    const int *l = b->cload + ((size_t)s * PIPE_LOADS + (size_t)i) * (size_t)v;
    int64_t y = 0;
    for (int c = 0; c < v; c++) y += (int64_t)l[c] * stage_act(b, c * pp + s, n[c * pp + s]);
    top = y > top ? y : top;
  }
  return x + top;
}

/* The most layers stage st runs within T (0: not even one). */
static int64_t most_within(const PipeBalance *b, int st, double T) {
  int64_t k = 0;
  double per = b->layer_f + b->layer_b, base = pipe_balance_stage_s(b, st, 0);
  if (per > 0 && T >= base) { /* (linear in the layers: from below its quotient, then exact by the rule below) */
    double q = floor((T - base) / per) - 1;
    k = q < 0 ? 0 : q > (double)b->layers ? b->layers : (int64_t)q;
  }
  while (k > 0 && pipe_balance_stage_s(b, st, k) > T) k--;
  while (k < b->layers && pipe_balance_stage_s(b, st, k + 1) <= T) k++;
  return k;
}

int64_t pipe_balance_rank_bytes(const PipeBalance *b, const int64_t *n, int s) {
  int v = b->chunks > 1 ? b->chunks : 1, pp = b->pp / v;
  int64_t x = b->fixed ? b->fixed[s] : 0;
  if (v > 1) {
    int64_t *m = malloc((size_t)v * sizeof *m);
    if (!m) die("out of memory");
    for (int c = 0; c < v; c++) { /* chunk c's rows: the largest chunk c's */
      m[c] = 0;
      for (int o = 0; o < pp; o++) m[c] = n[c * pp + o] > m[c] ? n[c * pp + o] : m[c];
    }
    x += chunks_bytes(b, s, n, m);
    free(m);
    return x;
  }
  int64_t m = 0; /* (the largest stage's count) */
  for (int o = 0; o < pp; o++) m = n[o] > m ? n[o] : m;
  return x + pipe_balance_stage_bytes(b, s, n[s], m);
}

/* The peak over the stages of their memory with n[s] layers on stage s (with b->fixed: each stage's
 * planned bytes by the calibrated model). Interleaved (b->chunks > 1, the n per virtual stage): each
 * stage's chunks summed, the activations each holds in flight and the layer stacks of chunk c padded to
 * the largest count of the chunks c (the stage pass's layout), pipe_balance_rank_bytes. */
static int64_t peak_bytes(const PipeBalance *b, const int64_t *n) {
  int64_t most = 0, peak = 0;
  if (b->chunks > 1) {
    for (int s = 0; s < b->pp / b->chunks; s++) {
      int64_t x = pipe_balance_rank_bytes(b, n, s);
      peak = x > peak ? x : peak;
    }
    return peak;
  }
  for (int s = 0; s < b->pp; s++) most = n[s] > most ? n[s] : most;
  for (int s = 0; s < b->pp; s++) {
    int64_t x = pipe_balance_stage_bytes(b, s, n[s], most) + (b->fixed ? b->fixed[s] : 0);
    peak = x > peak ? x : peak;
  }
  return peak;
}

/* Interleaved: the seconds per micro-batch of the stage running virtual stage k, all its chunks. */
static double rank_s(const PipeBalance *b, const int64_t *n, int k) {
  int pp = b->pp / b->chunks;
  double t = 0;
  for (int c = 0; c < b->chunks; c++) t += pipe_balance_stage_s(b, c * pp + k % pp, n[c * pp + k % pp]);
  return t;
}

/* From the most counts n (summing to total), one layer at a time off the stage where that leaves
 * the lowest peak, ties off the slower stage, down to the layers. Interleaved: off the slowest stage
 * (all its chunks: what bounds a rank's steady state), then as above among its chunks. */
/* Without chunks: peak_bytes of n with one layer off stage q, from each stage's bytes x at the most
 * count `most` (held by cnt stages) and the largest two of them (at i1, then x2): only taking the
 * last layer of the one largest stage changes the padding (then: peak_bytes itself). */
static int64_t peak_without(const PipeBalance *b, int64_t *n, int q, const int64_t *x, int64_t most, int cnt, int i1,
                            int64_t x2) {
  if (n[q] == most && cnt == 1) {
    n[q]--;
    int64_t p = peak_bytes(b, n);
    n[q]++;
    return p;
  }
  int64_t rest = q == i1 ? x2 : x[i1];
  int64_t xq = pipe_balance_stage_bytes(b, q, n[q] - 1, most) + (b->fixed ? b->fixed[q] : 0);
  return xq > rest ? xq : rest;
}

static void layers_off(const PipeBalance *b, int64_t *n, int64_t total) {
  int64_t *x = b->chunks > 1 ? NULL : malloc((size_t)b->pp * sizeof *x);
  if (b->chunks <= 1 && !x) die("out of memory");
  for (; total > b->layers; total--) {
    int w = -1, cnt = 0, i1 = 0;
    int64_t wpeak = 0, most = 0, x2 = INT64_MIN;
    if (x) { /* each stage's bytes now, the largest two */
      for (int s = 0; s < b->pp; s++) most = n[s] > most ? n[s] : most;
      for (int s = 0; s < b->pp; s++) {
        cnt += n[s] == most;
        x[s] = pipe_balance_stage_bytes(b, s, n[s], most) + (b->fixed ? b->fixed[s] : 0);
        if (x[s] > x[i1] || s == 0) x2 = s == 0 ? INT64_MIN : x[i1], i1 = s;
        else if (x[s] > x2) x2 = x[s];
      }
    }
    for (int q = 0; q < b->pp; q++) {
      if (n[q] <= 1) continue;
      double rq = b->chunks > 1 ? rank_s(b, n, q) : 0, rw = b->chunks > 1 && w >= 0 ? rank_s(b, n, w) : 0;
      if (w >= 0 && rq != rw) {
        if (rq > rw) w = q, n[q]--, wpeak = peak_bytes(b, n), n[q]++;
        continue;
      }
      int64_t peak;
      if (x) peak = peak_without(b, n, q, x, most, cnt, i1, x2);
      else {
        n[q]--;
        peak = peak_bytes(b, n);
        n[q]++;
      }
      if (w < 0 || peak < wpeak ||
          (peak == wpeak && pipe_balance_stage_s(b, q, n[q]) > pipe_balance_stage_s(b, w, n[w]))) {
        w = q;
        wpeak = peak;
      }
    }
    n[w]--;
  }
  free(x);
}

/* Each (virtual) stage's most_within T into mw[pp]. */
static void most_all(const PipeBalance *b, double T, int64_t *mw) {
  for (int s = 0; s < b->pp; s++) mw[s] = s > 1 && s < b->pp - 1 ? mw[1] : most_within(b, s, T);
}

/* The padding past which more fits no more layers (fit_within, fit_within_chunks): at rows (`most`, a chunk's m[c])
 * of at least every stage's mw each stage starts from its mw layers, and what a layer off saves does not depend on
 * the rows, so more rows only add their layer bytes to every stage (fewer layers fit): where the rows of the largest
 * mw did not cover the layers, no larger ones do. INT64_MAX where a layer's bytes are negative (no such bound) or
 * b->stepwise. */
static int64_t past_most(const PipeBalance *b, const int64_t *mw, int nv) {
  int64_t top = 0;
  for (int k = 0; k < nv; k++) top = mw[k] > top ? mw[k] : top;
  return b->layer_bytes >= 0 && !b->stepwise ? top : INT64_MAX;
}

/* The fewest layers r <= most off bytes x, each saving d > 0, that bring it within cap ((double)(x - r d) <= cap,
 * the comparison the layer-at-a-time loops make); most + 1 where none does. (In one step from the quotient: the
 * fit searches took them one at a time, a quarter of the 405B search's analytic ranking.) */
static int64_t fewest_off(int64_t x, int64_t d, double cap, int64_t most) {
  if ((double)x <= cap) return 0;
  double q = ceil(((double)x - cap) / (double)d);
  int64_t r = !(q >= 1) ? 1 : q > (double)most ? most : (int64_t)q;
  while (r > 1 && (double)(x - (r - 1) * d) <= cap) r--;
  while (r <= most && (double)(x - r * d) > cap) r++;
  return r;
}

/* With the device's memory: the most layers each stage runs within T (mw: most_all's) whose every stage
 * fits cap with its layer stacks padded to `most` (0 on a stage: none fits); their sum. */
static int64_t fit_within(const PipeBalance *b, const int64_t *mw, int64_t most, int64_t *u) {
  int64_t sum = 0;
  for (int s = 0; s < b->pp; s++) {
    int64_t k = mw[s], d = pipe_balance_stage_bytes(b, s, 1, 0) - pipe_balance_stage_bytes(b, s, 0, 0);
    if (k > most) k = most;
    if (k >= 1 && d > 0 && !b->stepwise)
      k -= fewest_off(b->fixed[s] + pipe_balance_stage_bytes(b, s, k, most), d, b->cap, k - 1);
    while (k >= 1 && (double)(b->fixed[s] + pipe_balance_stage_bytes(b, s, k, most)) > b->cap) k--;
    u[s] = k;
    if (!k) return 0;
    sum += k;
  }
  return sum;
}

/* The fastest split whose every stage fits b->cap by the calibrated model: the least T, and at it
 * the least padding `most`, for which the stages' most layers within T that fit cover the layers;
 * then layers off by memory. False when no split fits. */
static bool split_fitting(const PipeBalance *b, int64_t *n) {
  int pp = b->pp;
  int64_t L = b->layers, lo = (L + pp - 1) / pp;
  double best = -1;
  int64_t bmost = 0;
  int64_t *u = calloc(2 * (size_t)pp, sizeof *u), *mw = u + pp;
  if (!u) die("out of memory");
  for (int st = 0; st < pp; st++)
    for (int64_t k = 1; k <= L - pp + 1; k++) {
      double T = pipe_balance_stage_s(b, st, k);
      if (best >= 0 && T >= best) continue;
      /* (a middle stage's T that stage 1's at k already was: tried, with the same outcome — fit_within
       * depends on T and most alone; Llama-3-405B's search, pp 16: 14 of 16 stages) */
      if (st > 1 && st < pp - 1 && T == pipe_balance_stage_s(b, 1, k)) continue;
      most_all(b, T, mw);
      int64_t top = past_most(b, mw, pp);
      for (int64_t most = lo; most <= L - pp + 1; most++) {
        if (fit_within(b, mw, most, u) >= L) {
          best = T, bmost = most;
          break;
        }
        if (most >= top) break; /* (past_most: no more padding fits where this did not) */
      }
    }
  if (best >= 0) {
    most_all(b, best, mw);
    int64_t total = fit_within(b, mw, bmost, n);
    layers_off(b, n, total);
  }
  free(u);
  return best >= 0;
}

/* Stage s's chunks u after r layers off them one at a time, each off the chunk with the most (the first of
 * them): the chunks with the most down to the next count, else one less each, the first ones one more. */
static void chunks_level(int v, int pp, int s, int64_t *u, int64_t r) {
  while (r > 0) {
    int64_t top = 0, next = 1, cnt = 0;
    for (int c = 0; c < v; c++) top = u[c * pp + s] > top ? u[c * pp + s] : top;
    for (int c = 0; c < v; c++) {
      int64_t w = u[c * pp + s];
      cnt += w == top;
      next = w < top && w > next ? w : next;
    }
    if (r >= cnt * (top - next)) {
      for (int c = 0; c < v; c++) u[c * pp + s] = u[c * pp + s] == top ? next : u[c * pp + s];
      r -= cnt * (top - next);
      continue;
    }
    int64_t q = r / cnt, rem = r % cnt;
    for (int c = 0; c < v; c++)
      if (u[c * pp + s] == top) u[c * pp + s] -= q + (rem-- > 0);
    r = 0;
  }
}

/* Whether stage s's chunks, orig (chunk c's layers at orig[c]) less r layers off (chunks_level, into u), fit cap
 * with their stacks padded to m. */
static bool chunks_fit_off(const PipeBalance *b, int s, const int64_t *m, const int64_t *orig, int64_t *u, int64_t r) {
  int v = b->chunks, pp = b->pp / v;
  for (int c = 0; c < v; c++) u[c * pp + s] = orig[c];
  chunks_level(v, pp, s, u, r);
  return (double)(b->fixed[s] + chunks_bytes(b, s, u, m)) <= b->cap;
}

/* fit_within_chunks' layers off stage s's chunks u (bytes x, stacks padded to m) in one search: the fewest that
 * bring the stage within cap, taken as the loop there takes them one at a time (chunks_level), found by halves
 * (a layer off saves a chunk's activations at each of the stage's peaks: its bytes never grow with more off).
 * False where the stage does not fit with one layer a chunk; b->stepwise: nothing done (the loop decides). */
static bool chunks_off(const PipeBalance *b, int s, const int64_t *m, int64_t x, int64_t *u) {
  if ((double)x <= b->cap || b->stepwise) return true;
  int v = b->chunks, pp = b->pp / v;
  int64_t orig[RT_MAX_STAGES], avail = 0;
  for (int c = 0; c < v; c++) orig[c] = u[c * pp + s], avail += orig[c] - 1;
  if (!chunks_fit_off(b, s, m, orig, u, avail)) return false;
  int64_t lo = 1, hi = avail; /* (the fewest r in [lo, hi] that fits: hi does) */
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (chunks_fit_off(b, s, m, orig, u, mid)) hi = mid;
    else lo = mid + 1;
  }
  chunks_fit_off(b, s, m, orig, u, lo);
  return true;
}

/* Interleaved, with the device's memory: the most layers each virtual stage runs within T, chunk c's
 * at most m[c] (its stacks padded to m[c]), each stage's chunks fewer (one off its largest chunk at a
 * time) until the stage fits cap; their sum (0: some virtual stage holds none, or a stage does not fit
 * with one layer a chunk). */
static int64_t fit_within_chunks(const PipeBalance *b, const int64_t *mw, const int64_t *m, int64_t *u) {
  int v = b->chunks, pp = b->pp / v;
  int64_t sum = 0;
  for (int s = 0; s < pp; s++) {
    for (int c = 0; c < v; c++) {
      int k = c * pp + s;
      u[k] = mw[k];
      if (u[k] > m[c]) u[k] = m[c];
      if (!u[k]) return 0;
    }
    /* off its largest chunk first, a layer at a time: each of the stage's peaks (b->cload) less that chunk's
     * forwards there, a layer's each (without them its inflight); the stacks (m) stay */
    int nl = b->cload ? b->ncload[s] : 0;
    int64_t x = b->fixed[s] + chunks_bytes(b, s, u, m), y[PIPE_LOADS], top = 0, rest = x;
    for (int i = 0; i < nl; i++) {
      const int *l = b->cload + ((size_t)s * PIPE_LOADS + (size_t)i) * (size_t)v;
      y[i] = 0;
      for (int c = 0; c < v; c++) y[i] += (int64_t)l[c] * stage_act(b, c * pp + s, u[c * pp + s]);
      top = y[i] > top ? y[i] : top;
    }
    rest -= top; /* (x: rest + the most of y) */
    if (!chunks_off(b, s, m, x, u)) return 0;
    while (b->stepwise && (double)x > b->cap) { /* (chunks_off's reference: a layer at a time) */
      int w = -1;
      for (int c = 0; c < v; c++)
        if (u[c * pp + s] > 1 && (w < 0 || u[c * pp + s] > u[w * pp + s])) w = c;
      if (w < 0) return 0;
      u[w * pp + s]--;
      if (!nl) {
        x -= (int64_t)b->inflight[w * pp + s] * b->layer_act;
        continue;
      }
      top = 0;
      for (int i = 0; i < nl; i++) {
        y[i] -= (int64_t)b->cload[((size_t)s * PIPE_LOADS + (size_t)i) * (size_t)v + (size_t)w] * b->layer_act;
        top = y[i] > top ? y[i] : top;
      }
      x = rest + top;
    }
    for (int c = 0; c < v; c++) sum += u[c * pp + s];
  }
  return sum;
}

/* Interleaved: whether some padding fits at T (the chunks' rows m[c] summing to P, the least P first, the
 * earlier chunks one more, else the later ones; the rows into m). */
static bool fits_at(const PipeBalance *b, double T, int64_t *m, int64_t *u, int64_t *mw) {
  int v = b->chunks, nv = b->pp;
  int64_t L = b->layers, hi = L - nv + 1;
  most_all(b, T, mw);
  int64_t top = past_most(b, mw, nv);
  for (int64_t P = (L + nv / v - 1) / (nv / v); P <= v * hi; P++) {
    for (int late = 0; late < 2; late++) {
      if (late && P % v == 0) break;
      for (int c = 0; c < v; c++) m[c] = P / v + (late ? c >= v - P % v : c < P % v);
      if (fit_within_chunks(b, mw, m, u) >= L) return true;
    }
    /* (past_most: every chunk's rows at least the largest mw, each stage's bytes grow with the rows' sum P alone) */
    if (P / v >= top) break;
  }
  return false;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, c = *(const double *)y;
  return (a > c) - (a < c);
}

/* Interleaved, the fastest split whose every stage fits b->cap by the calibrated model: the least
 * bottleneck T (the slowest virtual stage, as split_by_time's), and at it the least padding (fits_at), for
 * which the virtual stages' most layers within T, each stage fitting, cover the layers; then layers off
 * as layers_off. False when no split fits. (Whether a padding fits only grows with T: the least T is
 * searched by halves over the candidates, every virtual stage's time at every count; Llama-3-405B's
 * search, pp 16 x 2 chunks: a scan of them all took minutes.) */
static bool split_fitting_chunks(const PipeBalance *b, int64_t *n) {
  int v = b->chunks, nv = b->pp;
  int64_t L = b->layers, hi = L - nv + 1;
  int64_t *u = calloc((size_t)(2 * nv + v), sizeof *u), *m = u + nv, *mw = m + v;
  double *T = malloc((size_t)(3 * hi) * sizeof *T);
  if (!u || !T) die("out of memory");
  int nt = 0; /* (the virtual stages between the first and the last have the same times: one stands for all) */
  for (int k = 0; k < nv; k++)
    if (k <= 1 || k == nv - 1)
      for (int64_t q = 1; q <= hi; q++) T[nt++] = pipe_balance_stage_s(b, k, q);
  qsort(T, (size_t)nt, sizeof *T, cmp_double);
  bool ok = nt > 0 && fits_at(b, T[nt - 1], m, u, mw);
  if (ok) {
    int lo = 0, top = nt - 1; /* T[top] fits */
    while (lo < top) {
      int mid = lo + (top - lo) / 2;
      if (fits_at(b, T[mid], m, u, mw)) top = mid;
      else lo = mid + 1;
    }
    fits_at(b, T[top], m, u, mw);
    layers_off(b, n, fit_within_chunks(b, mw, m, n));
  }
  free(u);
  free(T);
  return ok;
}

/* The two steps of the header: the least bottleneck in time, then layers off by memory. */
static bool split_by_time(const PipeBalance *b, int64_t *n) {
  int pp = b->pp;
  int64_t L = b->layers;
  double best = -1;
  if (L < pp) return false;
  /* (the stages between the first and the last have the same figures: one of them stands for all) */
  for (int st = 0; st < pp; st++) {
    if (st > 1 && st < pp - 1) continue;
    for (int64_t k = 1; k <= L - pp + 1; k++) {
      double T = pipe_balance_stage_s(b, st, k);
      if (best >= 0 && T >= best) continue;
      int64_t sum = 0;
      for (int q = 0; q < pp && sum >= 0; q++) {
        if (q > 1 && q < pp - 1) { /* as stage 1 */
          int64_t most = most_within(b, 1, T);
          sum = most ? sum + most * (pp - 2 - 1) : -1;
          q = pp - 2;
          continue;
        }
        int64_t most = most_within(b, q, T);
        sum = most ? sum + most : -1;
      }
      if (sum >= L) best = T;
    }
  }
  if (best < 0) return false;
  int64_t total = 0;
  for (int q = 0; q < pp; q++) total += n[q] = most_within(b, q, best);
  layers_off(b, n, total);
  return true;
}

bool pipe_balance_split(const PipeBalance *b, int64_t *n) {
  if (!split_by_time(b, n)) return false;
  if (b->fixed && b->cap > 0) {
    int64_t *f = malloc((size_t)b->pp * sizeof *f);
    if (!f) die("out of memory");
    if (b->chunks > 1 ? split_fitting_chunks(b, f) : split_fitting(b, f)) memcpy(n, f, (size_t)b->pp * sizeof *n);
    free(f);
  }
  return true;
}

void pipe_balance_figures(const PipeBalance *b, const int64_t *n, double *slow, int64_t *peak) {
  int64_t most = 0;
  *slow = 0;
  *peak = 0;
  for (int st = 0; st < b->pp; st++) most = n[st] > most ? n[st] : most;
  for (int st = 0; st < b->pp; st++) {
    double t = pipe_balance_stage_s(b, st, n[st]);
    int64_t x = pipe_balance_stage_bytes(b, st, n[st], most);
    *slow = t > *slow ? t : *slow;
    *peak = x > *peak ? x : *peak;
  }
}

bool pipe_balance_better(const PipeBalance *b, const int64_t *cur) {
  if (!b->split) return false;
  double slow, slow_cur;
  int64_t peak, peak_cur;
  pipe_balance_figures(b, b->split, &slow, &peak);
  pipe_balance_figures(b, cur, &slow_cur, &peak_cur);
  if (b->chunks > 1) return slow < slow_cur * (1 - 1e-9); /* interleaved: by time alone */
  bool same = true;
  for (int st = 0; st < b->pp; st++) same &= cur[st] == b->split[st];
  return !same && (slow < slow_cur || (slow <= slow_cur && peak < peak_cur));
}

bool pipe_balance_fits(const PipeBalance *b, const int64_t *n) {
  if (!b->fixed || !(b->cap > 0)) return true;
  if (b->chunks > 1) return (double)peak_bytes(b, n) <= b->cap;
  int64_t most = 0;
  for (int s = 0; s < b->pp; s++) most = n[s] > most ? n[s] : most;
  for (int s = 0; s < b->pp; s++)
    if ((double)(b->fixed[s] + pipe_balance_stage_bytes(b, s, n[s], most)) > b->cap) return false;
  return true;
}

/* The cost model's seconds of the body nodes of class c, in order. */
static double class_time(const Pp *p, const CostDevice *d, char c) {
  const Node **v = calloc((size_t)p->body->nnodes + 1, sizeof *v);
  int n = 0;
  if (!v) die("out of memory");
  for (int i = 0; i < p->body->nnodes; i++)
    if (p->cls[i] == c) v[n++] = p->body->nodes[i];
  double t = cost_nodes_time(p->m, d, v, n);
  free(v);
  return t;
}

/* The parameter a layer loop's stacked input is (through casts: a bf16 copy), or NULL. */
static const Node *loop_param(const Value *v) {
  for (int d = 0; d < 8 && v; d++) {
    const Node *n = v->def;
    if (n->op == OP_PARAM) return n;
    v = n->op == OP_CAST ? n->in[0] : NULL;
  }
  return NULL;
}

/* One layer's parameters, their gradients and optimizer states (`kind:NAME` states) on a rank. */
static int64_t layer_bytes(const Pp *p) {
  const Graph *g = p->g;
  const Node **seen = calloc((size_t)p->F->nin + 1, sizeof *seen);
  int nseen = 0;
  int64_t total = 0;
  if (!seen) die("out of memory");
  for (int j = p->F->a.ncarry; j < p->F->a.ncarry + p->F->a.nxs; j++) {
    const Node *w = loop_param(p->F->in[j]);
    bool dup = false;
    for (int k = 0; k < nseen; k++) dup |= seen[k] == w;
    if (!w || dup || !w->a.name) continue;
    seen[nseen++] = w;
    int64_t b = 2 * ir_numel(&w->out[0]->shape) * ir_dtype_size(w->out[0]->dtype); /* it and its gradient */
    for (int i = 0; i < g->nnodes; i++) {
      const Node *st = g->nodes[i];
      const char *c = st->op == OP_STATE && st->a.name ? strchr(st->a.name, ':') : NULL;
      if (c && strcmp(c + 1, w->a.name) == 0) b += ir_numel(&st->out[0]->shape) * ir_dtype_size(st->out[0]->dtype);
    }
    total += b / p->F->a.count;
  }
  free(seen);
  return total;
}

PipeBalance *pipe_balance_make(Module *m, Node *A, Node *F, Node *B, int pp, int v) {
  Pp p = {.m = m, .g = m->graph, .body = A->body, .A = A, .F = F, .B = B, .pp = pp, .M = (int)A->a.count, .v = 1,
          .per = F->a.count};
  if (!pipe_classify(&p)) {
    free(p.cls);
    return NULL;
  }
  CostDevice d;
  cost_device_defaults(m, &d);
  if (m->cost_profile && !cost_profile_read(m->cost_profile, &d)) {
    free(p.cls);
    return NULL;
  }
  PipeBalance *b = ARENA_NEW(m->arena, PipeBalance);
  double L = (double)F->a.count;
  const Node *loop = F;
  int nv = pp * v; /* the stages balanced: the virtual stages (interleaved), chunk c of stage s at c pp + s */
  b->pp = nv;
  b->chunks = v;
  b->layers = F->a.count;
  b->layer_f = cost_nodes_time(m, &d, &loop, 1) / L;
  loop = B;
  b->layer_b = cost_nodes_time(m, &d, &loop, 1) / L;
  b->all_f = class_time(&p, &d, C_ALL);
  b->first_f = class_time(&p, &d, C_FIRST);
  b->first_b = class_time(&p, &d, C_FIRSTB);
  b->last_f = class_time(&p, &d, C_LAST);
  b->layer_act = (int64_t)((double)pipe_kept_bytes(&p, 0, F) / L);
  b->first_act = pipe_kept_bytes(&p, C_FIRST, NULL);
  b->last_act = pipe_kept_bytes(&p, C_LAST, NULL);
  b->layer_bytes = layer_bytes(&p);
  b->inflight = ARENA_ARRAY(m->arena, int, nv);
  { /* the micro-batches in flight per stage on the lists the pipe pass makes (zb: with the plan's times);
     * interleaved: a stage's forwards in flight (of any chunk) shared among its chunks, rounded up */
    PipeSched s = pipe_sched_make_timed(m->plan.schedule, pp, p.M, v, m->plan.sched_times);
    int *inf = calloc((size_t)pp, sizeof(int));
    if (!inf) die("out of memory");
    pipe_sched_inflight(&s, inf);
    for (int k = 0; k < nv; k++) b->inflight[k] = (inf[k % pp] + v - 1) / v;
    free(inf);
    if (v > 1 && v <= PIPE_LOAD_CHUNKS) { /* (each chunk's forwards held at the stage's peaks) */
      int *cl = ARENA_ARRAY(m->arena, int, (size_t)pp * PIPE_LOADS * (size_t)v), *ncl = ARENA_ARRAY(m->arena, int, pp);
      for (int st = 0; st < pp; st++) ncl[st] = pipe_sched_chunk_loads(&s, st, cl + (size_t)st * PIPE_LOADS * (size_t)v);
      b->cload = cl, b->ncload = ncl;
    }
    pipe_sched_free(&s);
  }
  snprintf(b->source, sizeof b->source, "%s", d.source);
  b->split = ARENA_ARRAY(m->arena, int64_t, nv);
  b->by_time = ARENA_ARRAY(m->arena, int64_t, nv);
  if (!split_by_time(b, b->by_time)) b->split = b->by_time = NULL;
  if (b->split) {
    b->fixed = m->plan.stage_fixed; /* (per stage: interleaved, a stage's chunks together) */
    b->cap = m->plan.stage_cap;
    pipe_balance_split(b, b->split);
    b->fits = pipe_balance_fits(b, b->split);
  }
  free(p.cls);
  return b;
}

const int64_t *pipe_balance_calibrate(const Module *m0, double cap, Arena *a) {
  const PipeBalance *b = m0->pipe_balance;
  const MemPlan *mp = m0->memplan;
  int pp = b ? b->pp / (b->chunks > 1 ? b->chunks : 1) : 0; /* (the stages: interleaved, each its chunks) */
  if (!m0->plan.stage_balanced || !b || !b->split || !mp || !mp->stage_peak || mp->nstages != pp || mp->peak <= 0 ||
      !(cap > 0))
    return NULL;
  double scale = (double)mp->total / (double)mp->peak; /* the allocation over its peak: what the fit check weighs */
  int top = 0;
  for (int s = 1; s < pp; s++) top = mp->stage_peak[s] > mp->stage_peak[top] ? s : top;
  /* (interleaved: only where it does not fit — the first stage is the largest by the lists' warm-up, and
   * moving layers off it at the same slowest virtual stage made Llama-3-8B's bubble worse, 7.5 -> 8.0 %) */
  if ((double)mp->stage_peak[top] * scale <= cap && (top != 0 || b->chunks > 1)) return NULL;
  int64_t *fixed = ARENA_ARRAY(a, int64_t, pp);
  PipeBalance own = *b;
  own.fixed = NULL; /* (the model's own bytes: m0 is compiled without figures) */
  for (int s = 0; s < pp; s++) fixed[s] = (int64_t)((double)mp->stage_peak[s] * scale) - pipe_balance_rank_bytes(&own, b->split, s);
  return fixed;
}
