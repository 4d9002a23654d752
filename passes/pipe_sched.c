/* passes/pipe_sched.c — pipeline schedules: the per-stage lists (GPipe, 1F1B, interleaved, zb),
 * their simulation (the check verify relies on) and their timeline played with given instruction
 * and transfer times (the predicted bubble). See pipe_sched.h. */
#include "pipe_sched.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"

const char *pipe_sched_name(PipeSchedule k) {
  static const char *const names[] = {"gpipe", "1f1b", "interleaved", "zb"};
  return k >= SCHED_GPIPE && k <= SCHED_ZB ? names[k] : "?";
}

/* Zero bubble in the manner of ZB-H1 (within 1F1B's peak memory): the backward split into B (input
 * gradients, which the stage before waits for) and W (weight gradients, which nothing waits for).
 * Two makers, whose lists zb_best chooses among. The greedy one (make_zb) plays the stages with the
 * times t (F, B, W of stage s: t[s], t[pp + s], t[2 pp + s]; NULL: 1 each), transfers free: the
 * stage that can start an instruction earliest (the lower stage on a tie) runs, at that moment, a B whose gradient arrived, else the next F if its activation
 * arrived and it holds fewer than pp micro-batches (forwards whose W has not run: 1F1B's peak,
 * stage 0's), else its oldest pending W. The W's fill what 1F1B leaves idle: with equal times
 * bubble (pp-1)/(3M+pp-1) at pp 2 (ZB-H1's), but 0.172 at pp 4 with 8 micro-batches (ZB-H1 0.111,
 * 1F1B 0.273); with W half of F and B (a CPU's), 0.184 against the equal-time lists' 0.298.
 * A stage's choice (when, what) depends on its own state and the arrivals from its neighbours only:
 * it is kept per stage and made again (in O(1): zb_choose) for the stage that ran and the neighbour
 * it sent to, and the earliest stage is a tournament's winner, so a step costs O(log pp) (the plan
 * search makes lists for hundreds of candidates: plan_model.c). */
typedef struct {
  int pp, nmb;
  int *f, *w, *lo;       /* forwards and W's run per stage; its first micro-batch whose B has not run */
  double *clock, *act, *grad; /* a stage's free time; arrival times of activations and gradients */
  char *bdone;
  double *at;            /* per stage: when it can start its next instruction (INFINITY: nothing) */
  PipeInstr *next;       /* ... and which */
} Zb;

/* Stage st's next instruction and when it can start it. Every stage runs its B's in micro-batch order
 * (the last stage its first pending one; a stage before it the first whose gradient arrived, and
 * those arrive in the order the stage after ran its B's), so its first B not run (lo) is the one
 * whose gradient arrives first: the choice is O(1). */
static void zb_choose(Zb *z, int st) {
  int pp = z->pp, nmb = z->nmb, *f = z->f, *w = z->w, lo = z->lo[st];
  double tb = lo < f[st] ? (st == pp - 1 ? 0 : z->grad[st * nmb + lo]) : INFINITY;
  double tf = f[st] < nmb && f[st] - w[st] < pp ? (st == 0 ? 0 : z->act[st * nmb + f[st]]) : INFINITY;
  double tw = w[st] < nmb && z->bdone[st * nmb + w[st]] ? 0 : INFINITY;
  double at = fmax(z->clock[st], fmin(tb, fmin(tf, tw)));
  z->at[st] = at;
  z->next[st] = tb <= at ? (PipeInstr){'B', lo, 0} : tf <= at ? (PipeInstr){'F', f[st], 0} : (PipeInstr){'W', w[st], 0};
}

/* The stage that can start earliest, the lower on a tie: a tournament over the stages (tree[1] the
 * winner; leaves at [n + st]), replayed from a leaf up when its stage's choice changes. */
static int zb_better(const Zb *z, int a, int b) {
  if (a < 0) return b;
  if (b < 0) return a;
  return z->at[b] < z->at[a] || (z->at[b] == z->at[a] && b < a) ? b : a;
}

static void zb_replay(Zb *z, int *tree, int n, int st) {
  for (int i = (n + st) / 2; i >= 1; i /= 2) tree[i] = zb_better(z, tree[2 * i], tree[2 * i + 1]);
}

static PipeSched make_zb(int pp, int nmb, const double *t, double *span) {
  PipeSched s = {pp, nmb, 1, SCHED_ZB, calloc((size_t)pp, sizeof(int)), calloc((size_t)pp, sizeof(PipeInstr *))};
  Zb z = {pp, nmb, calloc((size_t)pp, sizeof(int)), calloc((size_t)pp, sizeof(int)), calloc((size_t)pp, sizeof(int)),
          calloc((size_t)pp, sizeof(double)), malloc((size_t)(pp * nmb) * sizeof(double)),
          malloc((size_t)(pp * nmb) * sizeof(double)), calloc((size_t)(pp * nmb), 1), calloc((size_t)pp, sizeof(double)),
          calloc((size_t)pp, sizeof(PipeInstr))};
  if (!s.len || !s.list || !z.f || !z.w || !z.lo || !z.clock || !z.act || !z.grad || !z.bdone || !z.at || !z.next)
    die("out of memory");
  for (int i = 0; i < pp * nmb; i++) z.act[i] = z.grad[i] = INFINITY; /* arrival times */
  int n = 1;
  while (n < pp) n *= 2;
  int *tree = malloc(2 * (size_t)n * sizeof *tree);
  if (!tree) die("out of memory");
  for (int i = 0; i < 2 * n; i++) tree[i] = -1;
  for (int st = 0; st < pp; st++) {
    s.list[st] = calloc((size_t)(3 * nmb + 1), sizeof(PipeInstr));
    if (!s.list[st]) die("out of memory");
    zb_choose(&z, st);
    tree[n + st] = st;
  }
  for (int i = n - 1; i >= 1; i--) tree[i] = zb_better(&z, tree[2 * i], tree[2 * i + 1]);
  for (int left = 3 * nmb * pp; left > 0; left--) {
    int st = tree[1]; /* the stage that can start earliest; the lower on a tie */
    double bt = st >= 0 ? z.at[st] : INFINITY;
    if (st < 0 || !(bt < INFINITY)) die("pipe_sched_make: the zb schedule does not finish");
    PipeInstr bin = z.next[st];
    int k = bin.op == 'F' ? 0 : bin.op == 'B' ? 1 : 2;
    s.list[st][s.len[st]++] = bin;
    z.clock[st] = bt + (t ? t[k * pp + st] : 1);
    int other = -1; /* the neighbour whose arrivals changed */
    if (bin.op == 'F') {
      if (st + 1 < pp) z.act[(st + 1) * nmb + bin.mb] = z.clock[st], other = st + 1;
      z.f[st]++;
    } else if (bin.op == 'B') {
      z.bdone[st * nmb + bin.mb] = 1;
      while (z.lo[st] < z.f[st] && z.bdone[st * nmb + z.lo[st]]) z.lo[st]++;
      if (st > 0) z.grad[(st - 1) * nmb + bin.mb] = z.clock[st], other = st - 1;
    } else {
      z.w[st]++;
    }
    zb_choose(&z, st);
    zb_replay(&z, tree, n, st);
    if (other >= 0) {
      zb_choose(&z, other);
      zb_replay(&z, tree, n, other);
    }
  }
  if (span) { /* (its play with t, transfers free: each instruction started as soon as it could, as here) */
    *span = 0;
    for (int st = 0; st < pp; st++) *span = fmax(*span, z.clock[st]);
  }
  free(tree);
  free(z.f);
  free(z.w);
  free(z.lo);
  free(z.clock);
  free(z.act);
  free(z.grad);
  free(z.bdone);
  free(z.at);
  free(z.next);
  return s;
}

/* ZB-H1's lists, made directly: stage s runs 1F1B's order of F and B (pp - s - 1 forwards of warm-up,
 * then one forward and one B in turn, then the remaining B's), each B(i) followed by W(i - s), and the
 * last s W's after its last B. A W lags its B by s micro-batches, so stage s holds (F run, W not) at
 * most pp - s - 1 + 1 + s = pp micro-batches: 1F1B's peak (stage 0's), the greedy maker's bound too;
 * and the s + 1 W's after the last B fill the time the gradient takes to come back from the later
 * stages. With equal F, B and W every stage starts at its first activation and the step is 3M + pp - 1
 * long: bubble (pp-1)/(3M+pp-1) for every pp and M >= pp (0.111 at pp 4 x 8; test_pp_timeline). */
static PipeSched make_zb_h1(int pp, int nmb) {
  PipeSched s = {pp, nmb, 1, SCHED_ZB, calloc((size_t)pp, sizeof(int)), calloc((size_t)pp, sizeof(PipeInstr *))};
  if (!s.len || !s.list) die("out of memory");
  for (int st = 0; st < pp; st++) {
    PipeInstr *l = calloc((size_t)(3 * nmb + 1), sizeof *l);
    if (!l) die("out of memory");
    int n = 0, f = 0, b = 0, warm = pp - st - 1 < nmb ? pp - st - 1 : nmb;
    while (f < warm) l[n++] = (PipeInstr){'F', f++, 0};
    while (b < nmb) {
      if (f < nmb) l[n++] = (PipeInstr){'F', f++, 0};
      if (b - st >= 0) l[n++] = (PipeInstr){'B', b, 0}, l[n++] = (PipeInstr){'W', b - st, 0};
      else l[n++] = (PipeInstr){'B', b, 0};
      b++;
    }
    for (int i = nmb - st > 0 ? nmb - st : 0; i < nmb; i++) l[n++] = (PipeInstr){'W', i, 0};
    s.len[st] = n;
    s.list[st] = l;
  }
  return s;
}

/* The span of s played with times t (transfers free), in order (NULL: pipe_sched_check's). */
static double span_of(const PipeSched *s, const PipeStep *order, const double *t) {
  PipeTimes pt = pipe_times_new(s, false);
  for (int st = 0; st < s->pp; st++)
    for (int k = 0; k < s->len[st]; k++) {
      char op = s->list[st][k].op;
      pt.dur[st][k] = t[(op == 'F' ? 0 : op == 'B' ? 1 : 2) * s->pp + st];
    }
  double span = order ? pipe_sched_play_order(s, order, &pt, NULL, NULL, NULL) : pipe_sched_play(s, &pt, NULL, NULL, NULL);
  pipe_times_free(s, &pt);
  return span;
}

/* A copy of s (heap). */
static PipeSched sched_copy(const PipeSched *s) {
  PipeSched c = *s;
  c.len = malloc((size_t)s->pp * sizeof *c.len);
  c.list = malloc((size_t)s->pp * sizeof *c.list);
  if (!c.len || !c.list) die("out of memory");
  for (int st = 0; st < s->pp; st++) {
    c.len[st] = s->len[st];
    size_t cap = (size_t)(s->len[st] > 3 * s->nmb ? s->len[st] : 3 * s->nmb) + 1; /* (as the makers allocate) */
    if (!(c.list[st] = calloc(cap, sizeof **c.list))) die("out of memory");
    memcpy(c.list[st], s->list[st], (size_t)s->len[st] * sizeof **c.list);
  }
  return c;
}

void pipe_sched_zb_fixed(int pp, int nmb, PipeZbFixed *f) {
  f->s[0] = make_zb(pp, nmb, NULL, NULL);
  f->s[1] = make_zb_h1(pp, nmb);
  for (int c = 0; c < 2; c++) {
    int total = 0;
    for (int st = 0; st < pp; st++) total += f->s[c].len[st];
    char msg[256];
    if (!(f->order[c] = calloc((size_t)total + 1, sizeof *f->order[c]))) die("out of memory");
    if (!pipe_sched_check(&f->s[c], 1, f->order[c], msg, sizeof msg)) die("pipe_sched_zb_fixed: %s", msg);
  }
}

void pipe_sched_zb_fixed_free(PipeZbFixed *f) {
  for (int c = 0; c < 2; c++) pipe_sched_free(&f->s[c]), free(f->order[c]);
}

/* zb's lists for times t (NULL: equal): of the candidates, the greedy lists made with t, the greedy
 * lists made with equal times and ZB-H1's (fixed: pipe_sched_zb_fixed), the one with the shortest span
 * played with t, the earlier on a tie. The greedy maker is not monotone in its times: with F, B and W
 * within a few percent of each other its choices can leave more idle than the equal-time lists do
 * (GPT-3's stages at pp 32 x 192 micro-batches, B = 1.02 F, W = 0.91 F: 11.8 % idle against 9.7 %),
 * while where W is well below F and B the timed lists win (W = F / 2 at pp 4 x 8: 18.4 % against
 * 29.8 %); ZB-H1's reach (pp-1)/(3M+pp-1) with equal times where the greedy ones leave more at pp > 2. */
PipeSched pipe_sched_zb_among(int pp, int nmb, const double *times, const PipeZbFixed *f) {
  double *eq = NULL;
  if (!times) {
    if (!(eq = malloc(3 * (size_t)pp * sizeof *eq))) die("out of memory");
    for (int i = 0; i < 3 * pp; i++) eq[i] = 1;
  }
  const double *t = times ? times : eq;
  double span;
  PipeSched best = times ? make_zb(pp, nmb, times, &span) : sched_copy(&f->s[0]); /* (the greedy lists, equal times) */
  if (!times) span = span_of(&best, f->order[0], t);
  int won = -1;
  for (int c = times ? 0 : 1; c < 2; c++) {
    double so = span_of(&f->s[c], f->order[c], t);
    if (so < span * (1 - 1e-12)) won = c, span = so;
  }
  if (won >= 0) {
    pipe_sched_free(&best);
    best = sched_copy(&f->s[won]);
  }
  free(eq);
  return best;
}

static PipeSched zb_best(int pp, int nmb, const double *times) {
  PipeZbFixed f;
  pipe_sched_zb_fixed(pp, nmb, &f);
  PipeSched s = pipe_sched_zb_among(pp, nmb, times, &f);
  pipe_sched_zb_fixed_free(&f);
  return s;
}

PipeSched pipe_sched_zb_greedy(int pp, int nmb, const double *times) { return make_zb(pp, nmb, times, NULL); }

PipeSched pipe_sched_make_timed(PipeSchedule kind, int pp, int nmb, int v, const double *times) {
  if (kind != SCHED_ZB) return pipe_sched_make(kind, pp, nmb, v);
  return zb_best(pp, nmb, times);
}

PipeSched pipe_sched_make(PipeSchedule kind, int pp, int nmb, int v) {
  if (kind == SCHED_ZB) return zb_best(pp, nmb, NULL);
  if (kind != SCHED_GPIPE && kind != SCHED_1F1B && kind != SCHED_INTERLEAVED)
    die("pipe_sched_make: schedule %s", pipe_sched_name(kind));
  if (kind != SCHED_INTERLEAVED) v = 1;
  if (v < 1 || (kind == SCHED_INTERLEAVED && nmb % pp != 0)) die("pipe_sched_make: %d micro-batches, v %d", nmb, v);
  PipeSched s = {pp, nmb, v, kind, calloc((size_t)pp, sizeof(int)), calloc((size_t)pp, sizeof(PipeInstr *))};
  if (!s.len || !s.list) die("out of memory");
  int units = nmb * v; /* (micro-batch, chunk) pairs per stage */
  for (int st = 0; st < pp; st++) {
    PipeInstr *l = calloc((size_t)(2 * units + 1), sizeof *l);
    if (!l) die("out of memory");
    int n = 0;
    if (kind == SCHED_GPIPE) {
      for (int i = 0; i < nmb; i++) l[n++] = (PipeInstr){'F', i, 0};
      for (int i = 0; i < nmb; i++) l[n++] = (PipeInstr){'B', i, 0};
    } else {
      /* the k-th forward (backward) unit: micro-batch groups of pp, chunks in order (reversed) */
      int warm = kind == SCHED_1F1B ? pp - st - 1 : (pp - st - 1) * 2 + (v - 1) * pp;
      if (warm > units) warm = units;
      int f = 0, b = 0;
#define UNIT(k, back)                                                                                   \
  (PipeInstr) {                                                                                         \
    (back) ? 'B' : 'F', (k) / (pp * v) * pp + (k) % pp,                                               \
        (back) ? v - 1 - (k) % (pp * v) / pp : (k) % (pp * v) / pp                                      \
  }
      while (f < warm) l[n++] = UNIT(f, 0), f++;
      while (f < units) {
        l[n++] = UNIT(f, 0), f++;
        l[n++] = UNIT(b, 1), b++;
      }
      while (b < units) l[n++] = UNIT(b, 1), b++;
#undef UNIT
    }
    s.len[st] = n;
    s.list[st] = l;
  }
  return s;
}

void pipe_sched_free(PipeSched *s) {
  for (int st = 0; st < s->pp; st++) free(s->list ? s->list[st] : NULL);
  free(s->list);
  free(s->len);
  *s = (PipeSched){0};
}

static int fail(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *msg, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (cap) vsnprintf(msg, cap, fmt, ap);
  va_end(ap);
  return 0;
}

/* "F3", or "F3/c1" (micro-batch 3, chunk 1) when interleaved */
static const char *iname(const PipeSched *s, PipeInstr in, char *buf, size_t cap) {
  if (s->v > 1) snprintf(buf, cap, "%c%d/c%d", in.op, in.mb, in.chunk);
  else snprintf(buf, cap, "%c%d", in.op, in.mb);
  return buf;
}

/* The unit index of an instruction: 3 per (micro-batch, chunk): F, B, W. */
static int kind_of(char op) { return op == 'F' ? 0 : op == 'B' ? 1 : 2; }

bool pipe_sched_check(const PipeSched *s, int rps, PipeStep *order, char *msg, size_t cap) {
  int pp = s->pp, M = s->nmb, v = s->v, nvs = pp * v;
  bool zb = s->kind == SCHED_ZB;
  char nb[32];
  if (cap) msg[0] = 0;
  /* well formed: each (micro-batch, chunk)'s F, then B, then (zb) W, exactly once per stage */
  for (int st = 0; st < pp; st++) {
    int *seen = calloc((size_t)(3 * M * v + 1), sizeof(int));
    if (!seen) die("out of memory");
    for (int k = 0; k < s->len[st]; k++) {
      PipeInstr in = s->list[st][k];
      const char *why = NULL;
      int u = 3 * (in.mb * v + in.chunk) + kind_of(in.op);
      if ((in.op != 'F' && in.op != 'B' && !(zb && in.op == 'W')) || in.mb < 0 || in.mb >= M || in.chunk < 0 ||
          in.chunk >= v)
        why = zb ? "is not F(i), B(i) or W(i) of a micro-batch of the step"
                 : "is not F(i) or B(i) of a micro-batch and chunk of the step";
      else if (seen[u]) why = "runs its micro-batch a second time";
      else if (in.op == 'B' && !seen[u - 1]) why = "comes before the forward of its micro-batch";
      else if (in.op == 'W' && !seen[u - 1]) why = "comes before the input-gradient backward (B) of its micro-batch";
      if (why) {
        free(seen);
        return fail(msg, cap, "pipeline schedule: stage %d (rank %d) step %d: %s %s", st, st * rps, k,
                    iname(s, in, nb, sizeof nb), why);
      }
      seen[u] = 1;
    }
    for (int i = 0; i < 3 * M * v; i++)
      if (!seen[i] && (i % 3 < 2 || zb)) {
        PipeInstr in = {"FBW"[i % 3], i / 3 / v, i / 3 % v};
        free(seen);
        return fail(msg, cap, "pipeline schedule: stage %d (rank %d) never runs %s", st, st * rps, iname(s, in, nb, sizeof nb));
      }
    free(seen);
  }
  /* run: done[(virtual stage * M + mb) * 3 + kind]; a stage moves when its next instruction's input
   * arrived (a W needs nothing from another stage) */
  char *done = calloc((size_t)(nvs * 3 * M + 1), 1);
  int *pc = calloc((size_t)pp + 1, sizeof(int));
  if (!done || !pc) die("out of memory");
  int total = 0, norder = 0;
  for (int st = 0; st < pp; st++) total += s->len[st];
  while (norder < total) {
    bool moved = false;
    for (int st = 0; st < pp; st++) {
      if (pc[st] == s->len[st]) continue;
      PipeInstr in = s->list[st][pc[st]];
      int vs = in.chunk * pp + st, from = in.op == 'F' ? vs - 1 : in.op == 'B' ? vs + 1 : -1;
      if (from >= 0 && from < nvs && !done[(from * M + in.mb) * 3 + kind_of(in.op)]) continue;
      done[(vs * M + in.mb) * 3 + kind_of(in.op)] = 1;
      order[norder++] = (PipeStep){st, pc[st]++};
      moved = true;
    }
    if (moved) continue;
    fail(msg, cap, "pipeline schedule: a cycle of waits, it would hang:");
    size_t len = strlen(msg);
    for (int st = 0; st < pp && len < cap; st++) {
      if (pc[st] == s->len[st]) continue;
      PipeInstr in = s->list[st][pc[st]];
      int vs = in.chunk * pp + st, from = in.op == 'F' ? vs - 1 : vs + 1;
      snprintf(msg + len, cap - len, " stage %d (rank %d) step %d: %s waits for the %s of micro-batch %d from stage %d;",
               st, st * rps, pc[st], iname(s, in, nb, sizeof nb), in.op == 'F' ? "activation" : "gradient", in.mb,
               from % pp);
      len = strlen(msg);
    }
    free(done);
    free(pc);
    return false;
  }
  free(done);
  free(pc);
  return true;
}

static double **per_instr(const PipeSched *s) {
  double **a = calloc((size_t)s->pp, sizeof(double *));
  if (!a) die("out of memory");
  for (int st = 0; st < s->pp; st++)
    if (!(a[st] = calloc((size_t)s->len[st] + 1, sizeof(double)))) die("out of memory");
  return a;
}

static void free_per_instr(const PipeSched *s, double **a) {
  for (int st = 0; a && st < s->pp; st++) free(a[st]);
  free(a);
}

PipeTimes pipe_times_new(const PipeSched *s, bool transfers) {
  PipeTimes t = {per_instr(s), per_instr(s), NULL, NULL};
  if (transfers) {
    t.lat = per_instr(s);
    t.recv = per_instr(s);
  }
  return t;
}

void pipe_times_free(const PipeSched *s, PipeTimes *t) {
  free_per_instr(s, t->dur);
  free_per_instr(s, t->pre);
  free_per_instr(s, t->lat);
  free_per_instr(s, t->recv);
  *t = (PipeTimes){0};
}

void pipe_sched_inflight(const PipeSched *s, int *inflight) {
  for (int st = 0; st < s->pp; st++) {
    int cur = 0, most = 0;
    for (int k = 0; k < s->len[st]; k++) { /* held from F to B (zb: to W, which reads them too) */
      char op = s->list[st][k].op;
      cur += op == 'F' ? 1 : op == (s->kind == SCHED_ZB ? 'W' : 'B') ? -1 : 0;
      if (cur > most) most = cur;
    }
    inflight[st] = most;
  }
}

int pipe_sched_chunk_loads(const PipeSched *s, int st, int *out) {
  int v = s->v > 1 ? s->v : 1, n = 0, cur[PIPE_LOAD_CHUNKS] = {0};
  if (v > PIPE_LOAD_CHUNKS) return 0;
  for (int k = 0; k < s->len[st]; k++) {
    PipeInstr in = s->list[st][k];
    if (in.op == (s->kind == SCHED_ZB ? 'W' : 'B')) cur[in.chunk]--;
    if (in.op != 'F') continue;
    cur[in.chunk]++;
    bool below = false; /* (dominated by one kept) */
    for (int i = 0; i < n && !below; i++) {
      below = true;
      for (int c = 0; c < v; c++) below = below && out[i * v + c] >= cur[c];
    }
    if (below) continue;
    int m = 0;
    for (int i = 0; i < n; i++) { /* (those it dominates dropped) */
      bool over = true;
      for (int c = 0; c < v; c++) over = over && cur[c] >= out[i * v + c];
      if (!over) memmove(out + m++ * v, out + i * v, (size_t)v * sizeof *out);
    }
    n = m;
    bool full = n == PIPE_LOADS; /* (then the last one is the most of it and this) */
    if (full) n--;
    for (int c = 0; c < v; c++) out[n * v + c] = full && out[n * v + c] > cur[c] ? out[n * v + c] : cur[c];
    n++;
  }
  return n;
}

double pipe_sched_play(const PipeSched *s, const PipeTimes *t, double *bubble, double *const *start, double *stage_end) {
  int total = 0;
  for (int st = 0; st < s->pp; st++) total += s->len[st];
  PipeStep *order = calloc((size_t)total + 1, sizeof *order);
  if (!order) die("out of memory");
  char msg[256];
  if (!pipe_sched_check(s, 1, order, msg, sizeof msg)) die("pipe_sched_play: %s", msg);
  double span = pipe_sched_play_order(s, order, t, bubble, start, stage_end);
  free(order);
  return span;
}

double pipe_sched_play_order(const PipeSched *s, const PipeStep *order, const PipeTimes *t, double *bubble,
                             double *const *start, double *stage_end) {
  int pp = s->pp, M = s->nmb, nvs = pp * s->v, total = 0;
  for (int st = 0; st < pp; st++) total += s->len[st];
  double *end = calloc((size_t)(nvs * 3 * M + 1), sizeof(double)), *free_at = calloc((size_t)pp + 1, sizeof(double));
  if (!end || !free_at) die("out of memory");
  double first = -1, last = 0, busy = 0;
  for (int k = 0; k < total; k++) {
    int st = order[k].stage, j = order[k].step;
    PipeInstr in = s->list[st][j];
    int vs = in.chunk * pp + st, from = in.op == 'F' ? vs - 1 : in.op == 'B' ? vs + 1 : -1, b = kind_of(in.op);
    double t0 = free_at[st] + (t->pre ? t->pre[st][j] : 0);
    if (from >= 0 && from < nvs) { /* its input from another (virtual) stage: after its producer and the transfer */
      double ready = end[(from * M + in.mb) * 3 + b] + (t->lat ? t->lat[st][j] : 0);
      if (ready > t0) t0 = ready;
      t0 += t->recv ? t->recv[st][j] : 0;
    }
    double d = t->dur[st][j];
    if (start) start[st][j] = t0;
    end[(vs * M + in.mb) * 3 + b] = free_at[st] = t0 + d;
    busy += d;
    if (first < 0 || t0 < first) first = t0;
    if (t0 + d > last) last = t0 + d;
  }
  double span = total ? last - first : 0;
  if (bubble) *bubble = span > 0 ? 1.0 - busy / ((double)pp * span) : 0;
  if (stage_end)
    for (int st = 0; st < pp; st++) stage_end[st] = free_at[st];
  free(end);
  free(free_at);
  return span;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* splitmix64: the plays' draws, the same from run to run */
static double uniform01(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return ((double)(z >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */
}

double pipe_sched_play_spread(const PipeSched *s, const PipeTimes *t, double cv, double ref, int plays, double *bubble) {
  int total = 0;
  for (int st = 0; st < s->pp; st++) total += s->len[st];
  PipeStep *order = calloc((size_t)total + 1, sizeof *order);
  double *spans = calloc((size_t)plays + 1, sizeof(double)), *bubbles = calloc((size_t)plays + 1, sizeof(double));
  if (!order || !spans || !bubbles) die("out of memory");
  char msg[256];
  if (!pipe_sched_check(s, 1, order, msg, sizeof msg)) die("pipe_sched_play_spread: %s", msg);
  PipeTimes u = *t;
  u.dur = per_instr(s);
  uint64_t seed = 0x5eed;
  for (int p = 0; p < plays; p++) {
    for (int st = 0; st < s->pp; st++)
      for (int k = 0; k < s->len[st]; k++) {
        double d = t->dur[st][k], z = sqrt(-2 * log(uniform01(&seed))) * cos(6.283185307179586 * uniform01(&seed));
        u.dur[st][k] = d > 0 ? fmax(0.1 * d, d * (1 + cv * sqrt(ref / d) * z)) : d;
      }
    spans[p] = pipe_sched_play_order(s, order, &u, &bubbles[p], NULL, NULL);
  }
  qsort(spans, (size_t)plays, sizeof(double), cmp_double);
  qsort(bubbles, (size_t)plays, sizeof(double), cmp_double);
  double span = plays > 0 ? spans[plays / 2] : 0;
  if (bubble) *bubble = plays > 0 ? bubbles[plays / 2] : 0;
  free_per_instr(s, u.dur);
  free(order);
  free(spans);
  free(bubbles);
  return span;
}

double pipe_sched_time(const PipeSched *s, const double *tf, const double *tb, double *bubble, int *inflight) {
  return pipe_sched_timeline(s, tf, tb, NULL, bubble, inflight, NULL);
}

double pipe_sched_timeline(const PipeSched *s, const double *tf, const double *tb, const double *tw, double *bubble,
                           int *inflight, double *const *start) {
  PipeTimes t = pipe_times_new(s, false);
  for (int st = 0; st < s->pp; st++)
    for (int k = 0; k < s->len[st]; k++) {
      char op = s->list[st][k].op;
      t.dur[st][k] = op == 'F' ? tf[st] : op == 'B' ? tb[st] : tw ? tw[st] : 0;
    }
  double span = pipe_sched_play(s, &t, bubble, start, NULL);
  if (inflight) pipe_sched_inflight(s, inflight);
  pipe_times_free(s, &t);
  return span;
}
