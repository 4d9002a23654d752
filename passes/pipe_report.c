/* passes/pipe_report.c — `shardc plan`'s pipeline section: each stage's layers, FLOPs, kept
 * activations and parameters (from passes/pipe_plan.c's PipePlan), the cost model's predicted
 * instruction and transfer times and the schedule's bubble played with them (passes/cost.c's
 * CostPipe), and the schedule drawn as SVG. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "diag.h"

#include "cost.h"
#include "memplan.h"
#include "pipe_sched.h"

static double mib(int64_t b) { return (double)b / (1024.0 * 1024.0); }

/* Stage st's forward, backward (and zb: weight-gradient) seconds per micro-batch with n layers, by the
 * stage pass's figures (passes/pipe_balance.c; zb: the layers' backward split by the W share of its
 * FLOPs, as the pipe pass split it); transfers free. */
static void stage_times(const PipePlan *p, const PipeBalance *b, int st, int64_t n, double *tf, double *tb,
                        double *tw) {
  double wfrac = p->kind == SCHED_ZB && p->layer_bwd + p->layer_wgt > 0 ? p->layer_wgt / (p->layer_bwd + p->layer_wgt) : 0;
  *tf = b->all_f + (double)n * b->layer_f + (st == 0 ? b->first_f : 0) + (st == p->pp - 1 ? b->last_f : 0);
  *tw = (double)n * b->layer_b * wfrac;
  *tb = (double)n * b->layer_b * (1 - wfrac) + (st == 0 ? b->first_b : 0);
  if (*tf <= 0) *tf = 1e-9;
  if (*tb <= 0) *tb = 1e-9;
}

/* The predicted bubble of p's schedule with n[s] layers on stage s (zb: its lists made with these
 * times, as the pipe pass makes them with the plan's). */
static double bubble_of(const PipePlan *p, const PipeBalance *b, const int64_t *n) {
  double *t = calloc(3 * (size_t)p->pp, sizeof(double)), bubble = 0;
  if (!t) die("out of memory");
  for (int st = 0; st < p->pp; st++) stage_times(p, b, st, n[st], &t[st], &t[p->pp + st], &t[2 * p->pp + st]);
  PipeSched s = pipe_sched_make_timed(p->kind, p->pp, p->nmb, 1, t);
  pipe_sched_timeline(&s, t, t + p->pp, p->kind == SCHED_ZB ? t + 2 * p->pp : NULL, &bubble, NULL, NULL);
  free(t);
  pipe_sched_free(&s);
  return bubble;
}

/* Stage bytes of split n by the calibrated model (b->fixed; interleaved: a stage's chunks together): the
 * largest and its stage. */
static int64_t fixed_peak(const PipeBalance *b, const int64_t *n, int *at) {
  int64_t peak = -1;
  for (int st = 0; st < b->pp / (b->chunks > 1 ? b->chunks : 1); st++) {
    int64_t x = pipe_balance_rank_bytes(b, n, st);
    if (x > peak) peak = x, *at = st;
  }
  return peak;
}

static void print_split(FILE *f, const int64_t *n, int pp) {
  fprintf(f, "[");
  for (int st = 0; st < pp; st++) fprintf(f, "%s%lld", st ? ", " : "", (long long)n[st]);
  fprintf(f, "]");
}

/* Why `layers(balanced)` chose its split against the device's memory (b->fixed: the time-balanced
 * split did not fit, or its first stage was the largest). */
static void print_memory_choice(FILE *f, const PipePlan *p, const PipeBalance *b) {
  char t1[32], t2[32];
  int at0 = 0, at1 = 0;
  int64_t p0 = fixed_peak(b, b->by_time, &at0), p1 = fixed_peak(b, b->split, &at1);
  double slow0 = 0, slow1 = 0;
  bool chunks = b->chunks > 1; /* (interleaved: the split per virtual stage, a stage's memory its chunks') */
  for (int st = 0; st < b->pp; st++) {
    slow0 = fmax(slow0, pipe_balance_stage_s(b, st, b->by_time[st]));
    slow1 = fmax(slow1, pipe_balance_stage_s(b, st, b->split[st]));
  }
  fprintf(f, "#   layers(balanced) against the device's memory (%.2f MiB): by time alone ", mib((int64_t)b->cap));
  print_split(f, b->by_time, b->pp);
  fprintf(f, ", whose memory plan needs %.2f MiB on stage %d (%s); ", mib(p0), at0,
          (double)p0 > b->cap ? "over the device's" : "the first stage the largest");
  bool same = true;
  for (int st = 0; st < b->pp; st++) same &= b->split[st] == b->by_time[st];
  if (!b->fits) {
    fprintf(f, "no split fits every stage by that plan's figures: the split by time kept\n");
  } else if (same) {
    fprintf(f, "it is the fastest split whose every stage fits (by that plan's figures: at most %.2f MiB, stage %d)\n",
            mib(p1), at1);
  } else if (chunks) {
    print_split(f, b->split, b->pp);
    fprintf(f, " is the fastest split whose every stage (its %d chunks together) fits by that plan's figures (at most "
               "%.2f MiB, stage %d): the slowest virtual stage %s per micro-batch against %s\n",
            b->chunks, mib(p1), at1, cost_human_time(t1, sizeof t1, slow1), cost_human_time(t2, sizeof t2, slow0));
  } else {
    print_split(f, b->split, p->pp);
    fprintf(f, " is the fastest split whose every stage fits by that plan's figures (at most %.2f MiB, stage %d): the "
               "slowest stage %s per micro-batch against %s, bubble %.1f%% against %.1f%%\n",
            mib(p1), at1, cost_human_time(t1, sizeof t1, slow1), cost_human_time(t2, sizeof t2, slow0),
            100.0 * bubble_of(p, b, b->split), 100.0 * bubble_of(p, b, b->by_time));
  }
}

/* The split balanced by time and memory (the stage pass's, passes/pipe_balance.c): under
 * `layers(balanced)` the plan's, printed with each stage's figures; otherwise printed as a suggestion
 * where it beats the plan's split (even, or its `pp N layers(..)`): a faster slowest stage, or as fast
 * with less memory. */
static void print_balanced(FILE *f, const Module *m) {
  const PipePlan *p = m->pipe;
  const PipeBalance *b = m->pipe_balance;
  if (p->v > 1 && b && b->split && !m->plan.stage_balanced) { /* interleaved: suggested where it is faster */
    char t1[32], t2[32];
    int64_t *cur = calloc((size_t)b->pp, sizeof *cur);
    if (!cur) die("out of memory");
    double slow, slow_cur;
    int64_t peak, peak_cur;
    for (int k = 0; k < b->pp; k++) cur[k] = p->stage[k % p->pp].chunk_layers[k / p->pp];
    pipe_balance_figures(b, b->split, &slow, &peak);
    pipe_balance_figures(b, cur, &slow_cur, &peak_cur);
    if (pipe_balance_better(b, cur)) {
      fprintf(f, "#   balanced by time over the virtual stages: layers ");
      print_split(f, b->split, b->pp);
      fprintf(f, " (chunk c of stage s at c x %d + s): the slowest virtual stage %s per micro-batch (this plan's ", p->pp,
              cost_human_time(t1, sizeof t1, slow));
      print_split(f, cur, b->pp);
      fprintf(f, ": %s); a suggestion: write `pp %d layers(balanced)` to apply it\n", cost_human_time(t2, sizeof t2, slow_cur),
              p->pp);
    }
    free(cur);
    return;
  }
  if (p->v > 1 && b && b->split && m->plan.stage_balanced) { /* interleaved: over the virtual stages, applied */
    char t1[32];
    fprintf(f, "#   layers(balanced): ");
    print_split(f, b->split, b->pp);
    fprintf(f, " per virtual stage (chunk c of stage s at c x %d + s), by the cost model's time (device: %s): per "
               "virtual stage, its forward and backward per micro-batch:", p->pp, b->source);
    for (int k = 0; k < b->pp; k++)
      fprintf(f, "%s %d: %s", k ? ";" : "", k, cost_human_time(t1, sizeof t1, pipe_balance_stage_s(b, k, b->split[k])));
    fprintf(f, "\n");
    if (b->fixed) print_memory_choice(f, p, b);
    return;
  }
  if (p->v > 1 || !b || !b->split) return;
  int64_t *cur = calloc((size_t)p->pp, sizeof *cur);
  if (!cur) die("out of memory");
  bool even = true;
  for (int st = 0; st < p->pp; st++) {
    cur[st] = p->stage[st].nlayers;
    even &= cur[st] == cur[0];
  }
  double slow, slow_cur;
  int64_t peak, peak_cur, most = 0;
  char t1[32], t2[32];
  pipe_balance_figures(b, b->split, &slow, &peak);
  pipe_balance_figures(b, cur, &slow_cur, &peak_cur);
  for (int st = 0; st < p->pp; st++) most = b->split[st] > most ? b->split[st] : most;
  if (m->plan.stage_balanced) {
    fprintf(f, "#   layers(balanced): [");
    for (int st = 0; st < p->pp; st++) fprintf(f, "%s%lld", st ? ", " : "", (long long)b->split[st]);
    fprintf(f, "], by the cost model's time (device: %s) and memory; per stage, its forward and backward per "
               "micro-batch, its activations in flight and layer stacks:", b->source);
    for (int st = 0; st < p->pp; st++)
      fprintf(f, "%s %d: %s, %.2f MiB", st ? ";" : "", st, cost_human_time(t1, sizeof t1, pipe_balance_stage_s(b, st, b->split[st])),
              mib(pipe_balance_stage_bytes(b, st, b->split[st], most)));
    fprintf(f, "; bubble %.1f%%\n", 100.0 * bubble_of(p, b, b->split));
    if (b->fixed) print_memory_choice(f, p, b);
  } else if (pipe_balance_better(b, cur)) {
    const char *what = even ? "even" : "this plan's";
    int64_t most_cur = 0;
    for (int st = 0; st < p->pp; st++) most_cur = cur[st] > most_cur ? cur[st] : most_cur;
    fprintf(f, "#   balanced by time and memory: layers [");
    for (int st = 0; st < p->pp; st++) fprintf(f, "%s%lld", st ? ", " : "", (long long)b->split[st]);
    fprintf(f, "]: the slowest stage %s per micro-batch (%s: %s), bubble %.1f%% (%s: %.1f%%), activations in flight and "
               "layer stacks at most %.2f MiB on a stage (%s: %.2f MiB); a suggestion: write `pp %d layers(balanced)` to "
               "apply it",
            cost_human_time(t1, sizeof t1, slow), what, cost_human_time(t2, sizeof t2, slow_cur),
            100.0 * bubble_of(p, b, b->split), what, 100.0 * bubble_of(p, b, cur), mib(peak), what, mib(peak_cur), p->pp);
    if (most != most_cur) /* memory: every stage holds the largest stage's count of layers (padded) */
      fprintf(f, " (every stage then holds %lld layers' parameters, gradients and optimizer states, %+.2f MiB)",
              (long long)most, mib((most - most_cur) * b->layer_bytes));
    fprintf(f, "\n");
  }
  free(cur);
}

/* The cost model's times (cost_pipe): per stage, the mean F, B (and W) instruction, the transfer
 * into its F and B (the latency, then the receive's bytes / bandwidth), and what it runs between
 * instructions in a step (the sums of finished micro-batches, the step's start). */
static void print_times(FILE *f, const PipePlan *p, const CostPipe *cp, const char *source) {
  char a[32], b[32];
  fprintf(f, "#   predicted instruction times (cost model, device: %s), per stage: F, B%s; the transfer into each "
             "(latency + bytes / bandwidth); between instructions per step\n", source ? source : "?",
          p->kind == SCHED_ZB ? ", W" : "");
  for (int st = 0; st < p->pp; st++) {
    double sum[3] = {0}, in[2] = {0}, lat[2] = {0}, pre = 0;
    int n[3] = {0}, nin[2] = {0};
    for (int k = 0; k < cp->sched.len[st]; k++) {
      char op = cp->sched.list[st][k].op;
      int o = op == 'F' ? 0 : op == 'B' ? 1 : 2;
      sum[o] += cp->t.dur[st][k];
      n[o]++;
      pre += cp->t.pre[st][k];
      if (o < 2 && (cp->t.lat[st][k] > 0 || cp->t.recv[st][k] > 0)) {
        lat[o] += cp->t.lat[st][k];
        in[o] += cp->t.recv[st][k];
        nin[o]++;
      }
    }
    fprintf(f, "#     stage %d: F %s, B %s", st, cost_human_time(a, sizeof a, n[0] ? sum[0] / n[0] : 0),
            cost_human_time(b, sizeof b, n[1] ? sum[1] / n[1] : 0));
    if (n[2]) fprintf(f, ", W %s", cost_human_time(a, sizeof a, sum[2] / n[2]));
    for (int o = 0; o < 2; o++)
      if (nin[o])
        fprintf(f, "; %s in %s + %s", o ? "gradient" : "activation", cost_human_time(a, sizeof a, lat[o] / nin[o]),
                cost_human_time(b, sizeof b, in[o] / nin[o]));
    fprintf(f, "; between %s\n", cost_human_time(a, sizeof a, pre));
  }
}

void pipe_print(FILE *f, const Module *m, const CostPipe *cp, const char *source) {
  const PipePlan *p = m->pipe;
  if (!p) return;
  fprintf(f, "# pipeline: %d stages over the %lld layers of `repeat %s`, schedule %s", p->pp, (long long)p->layers,
          p->loop ? p->loop : "?", pipe_sched_name(p->kind));
  if (p->v > 1) fprintf(f, " (%d chunks per stage)", p->v);
  fprintf(f, ", %d micro-batches per step\n", p->nmb);
  fprintf(f, "#   FLOPs and bytes per rank (its tp share); FLOPs per micro-batch (interleaved: per chunk); activations:\n"
             "#   what a forward keeps for its backward, times the forwards the schedule keeps in flight\n");
  fprintf(f, "#   %-5s %-12s %-15s %12s %12s %13s %9s %15s %11s\n", "stage", "layers", "holds", "fwd FLOP", "bwd FLOP",
          "act/micro", "in flight", "activations", "params");
  for (int s = 0; s < p->pp; s++) {
    const PipeStage *x = &p->stage[s];
    char layers[48] = "", holds[32];
    for (int c = 0, k = 0; c < x->nchunks && k < (int)sizeof layers - 12; c++) {
      int64_t a = x->chunk_first[c];
      k += snprintf(layers + k, sizeof layers - (size_t)k, "%s%lld-%lld", c ? "," : "", (long long)a,
                    (long long)(a + x->chunk_layers[c] - 1));
    }
    snprintf(holds, sizeof holds, "%s%s%s", x->embedding ? "embedding" : "", x->embedding && x->head ? "+" : "",
             x->head ? "head, loss" : x->embedding ? "" : "-");
    fprintf(f, "#   %-5d %-12s %-15s %12.4g %12.4g %9.2f MiB %9d %11.2f MiB %7.2f MiB\n", s, layers, holds, x->fwd_flops,
            x->bwd_flops, mib(x->act_bytes), x->inflight, mib(x->act_bytes * x->inflight), mib(x->param_bytes));
  }
  if (m->memplan && m->memplan->stage_peak) { /* the memory plan's, each stage's values and every rank's */
    fprintf(f, "#   planned peak per rank by stage:");
    for (int s = 0; s < p->pp && s < m->memplan->nstages; s++)
      fprintf(f, "%s %d: %.2f MiB", s ? "," : "", s, mib(m->memplan->stage_peak[s]));
    fprintf(f, "\n");
  }
  bool any = false;
  for (int s = 0; s < p->pp; s++) any |= p->stage[s].unused_bytes > 0;
  if (any) { /* the parameters outside the layers read on several stages: every stage holds them */
    fprintf(f, "#   held but unused (parameters outside the layers read on several stages, a tied embedding, are kept on "
               "every stage, with their gradients and optimizer state):\n");
    for (int s = 0; s < p->pp; s++)
      if (p->stage[s].unused_bytes)
        fprintf(f, "#     stage %d: %.2f MiB, %lld bytes (%s)\n", s, mib(p->stage[s].unused_bytes),
                (long long)p->stage[s].unused_bytes, p->stage[s].unused);
  }
  /* the textbook figure for equal stages (and, zb, F = B = W), to compare with */
  const char *ideal = p->kind == SCHED_INTERLEAVED ? "(pp-1)/(vM+pp-1)" : p->kind == SCHED_ZB ? "ZB-H1's (pp-1)/(3M+pp-1)"
                                                                                               : "(pp-1)/(M+pp-1)";
  int units = p->kind == SCHED_INTERLEAVED ? p->v * p->nmb : p->kind == SCHED_ZB ? 3 * p->nmb : p->nmb;
  double eq = 100.0 * (p->pp - 1) / (double)(units + p->pp - 1);
  if (cp) {
    print_times(f, p, cp, source);
    char sp[160] = "";
    if (cp->spread > 0)
      snprintf(sp, sizeof sp, ", each time spread as the device varies (time_spread %.3g over %s blocks: the median of 101 "
                              "plays; %.1f%% with the times as they are)", cp->spread,
               cost_human_time((char[32]){0}, 32, cp->spread_s), 100.0 * cp->bubble_steady);
    fprintf(f, "#   bubble: %.1f%% of the step idle (predicted: the schedule played with these times%s, as --trace measures "
               "it; with times in proportion to FLOPs and transfers free %.1f%%; for equal stages %s = %.1f%%)\n",
            100.0 * cp->bubble, sp, 100.0 * p->bubble, ideal, eq);
  } else {
    fprintf(f, "#   bubble: %.1f%% of the step idle (predicted: each stage's forward and backward in proportion to its "
               "FLOPs, transfers free; for equal stages %s = %.1f%%)\n",
            100.0 * p->bubble, ideal, eq);
  }
  print_balanced(f, m);
  fprintf(f, "#   the memory plan below is the worst stage's (values of different stages share bytes); it also holds "
             "what every stage zero-fills for the gradient sums\n");
}

bool pipe_svg(FILE *f, const Module *m, const CostPipe *cp, const char *source) {
  const PipePlan *p = m->pipe;
  if (!p) return false;
  /* the cost model's timeline, or (none given) each stage's times in proportion to its FLOPs */
  PipeSched own = {0};
  const PipeSched *sc = cp ? &cp->sched : &own;
  PipeTimes t = {0};
  double **start = cp ? cp->start : NULL, bubble = cp ? cp->bubble : 0, span = cp ? cp->span : 0, first = 0;
  if (!cp) {
    own = pipe_sched_make_timed(p->kind, p->pp, p->nmb, p->v, p->times);
    t = pipe_times_new(&own, false);
    start = calloc((size_t)p->pp, sizeof(double *));
    if (!start) die("out of memory");
    for (int st = 0; st < p->pp; st++) {
      for (int k = 0; k < own.len[st]; k++) t.dur[st][k] = pipe_plan_instr_flops(p, st, own.list[st][k].chunk, own.list[st][k].op);
      if (!(start[st] = calloc((size_t)own.len[st] + 1, sizeof(double)))) die("out of memory");
    }
    span = pipe_sched_play(&own, &t, &bubble, start, NULL);
  }
  const PipeTimes *tt = cp ? &cp->t : &t;
  for (int st = 0; st < p->pp; st++) /* the picture starts at the first instruction */
    for (int k = 0; k < sc->len[st]; k++)
      if ((st == 0 && k == 0) || start[st][k] < first) first = start[st][k];
  const double W = 960, lane = 30, left = 70, top = 44;
  double H = top + lane * p->pp + 40, scale = span > 0 ? W / span : 1;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"monospace\" "
             "font-size=\"11\">\n", left + W + 20, H);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f, "<text x=\"%.0f\" y=\"18\" font-size=\"13\">%s: %s", left, m->name ? m->name : "model", pipe_sched_name(p->kind));
  if (p->v > 1) fprintf(f, " (%d chunks per stage)", p->v);
  fprintf(f, ", pp %d, %d micro-batches; predicted bubble %.1f%%</text>\n", p->pp, p->nmb, 100.0 * bubble);
  if (cp)
    fprintf(f, "<text x=\"%.0f\" y=\"34\" fill=\"#555\">blocks to scale by the cost model's time (%s), gaps: transfers "
               "and work between instructions; F forward, B backward%s; label: micro-batch%s</text>\n",
            left, source ? source : "?", p->kind == SCHED_ZB ? " (input gradients), W weight gradients" : "",
            p->v > 1 ? ".chunk" : "");
  else
    fprintf(f, "<text x=\"%.0f\" y=\"34\" fill=\"#555\">blocks to scale by each stage's FLOPs (transfers free); "
               "F forward, B backward%s; label: micro-batch%s</text>\n",
            left, p->kind == SCHED_ZB ? " (input gradients), W weight gradients" : "", p->v > 1 ? ".chunk" : "");
  for (int st = 0; st < p->pp; st++) {
    double y = top + lane * st;
    fprintf(f, "<text x=\"4\" y=\"%.0f\">stage %d</text>\n", y + lane / 2 + 4, st);
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"#f4f4f4\"/>\n", left, y + 2, W,
            lane - 4);
    for (int k = 0; k < sc->len[st]; k++) {
      PipeInstr in = sc->list[st][k];
      bool b = in.op == 'B';
      double x = left + (start[st][k] - first) * scale, w = tt->dur[st][k] * scale;
      const char *fill = in.op == 'W' ? "#8fd19e" : b ? (in.chunk % 2 ? "#e8a25a" : "#f4c08a")
                                                     : (in.chunk % 2 ? "#5a8fe8" : "#8ab4f4");
      fprintf(f, "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\" stroke=\"white\"/>\n", x,
              y + 2, w, lane - 4, fill);
      if (w >= 18) {
        if (p->v > 1)
          fprintf(f, "<text x=\"%.2f\" y=\"%.0f\" text-anchor=\"middle\">%c%d.%d</text>\n", x + w / 2, y + lane / 2 + 4,
                  in.op, in.mb, in.chunk);
        else
          fprintf(f, "<text x=\"%.2f\" y=\"%.0f\" text-anchor=\"middle\">%c%d</text>\n", x + w / 2, y + lane / 2 + 4,
                  in.op, in.mb);
      }
    }
  }
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#555\">time (one step) &#8594;</text>\n", left, top + lane * p->pp + 20);
  fprintf(f, "</svg>\n");
  if (!cp) {
    for (int st = 0; st < p->pp; st++) free(start[st]);
    free(start);
    pipe_times_free(&own, &t);
    pipe_sched_free(&own);
  }
  return true;
}
