/* passes/pipe_sched.c — pipeline schedules: GPipe and 1F1B per-stage lists, their simulation
 * (the check verify relies on) and their predicted bubble. See pipe_sched.h. */
#include "pipe_sched.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"

const char *pipe_sched_name(PipeSchedule k) {
  static const char *const names[] = {"gpipe", "1f1b", "interleaved", "zb"};
  return k >= SCHED_GPIPE && k <= SCHED_ZB ? names[k] : "?";
}

PipeSched pipe_sched_make(PipeSchedule kind, int pp, int nmb, int v) {
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

bool pipe_sched_check(const PipeSched *s, int rps, PipeStep *order, char *msg, size_t cap) {
  int pp = s->pp, M = s->nmb, v = s->v, nvs = pp * v;
  char nb[32];
  if (cap) msg[0] = 0;
  /* well formed: each (micro-batch, chunk)'s F then B exactly once per stage */
  for (int st = 0; st < pp; st++) {
    int *seen = calloc((size_t)(2 * M * v + 1), sizeof(int));
    if (!seen) die("out of memory");
    for (int k = 0; k < s->len[st]; k++) {
      PipeInstr in = s->list[st][k];
      const char *why = NULL;
      int u = 2 * (in.mb * v + in.chunk) + (in.op == 'B');
      if ((in.op != 'F' && in.op != 'B') || in.mb < 0 || in.mb >= M || in.chunk < 0 || in.chunk >= v)
        why = "is not F(i) or B(i) of a micro-batch and chunk of the step";
      else if (seen[u]) why = "runs its micro-batch a second time";
      else if (in.op == 'B' && !seen[u - 1]) why = "comes before the forward of its micro-batch";
      if (why) {
        free(seen);
        return fail(msg, cap, "pipeline schedule: stage %d (rank %d) step %d: %s %s", st, st * rps, k,
                    iname(s, in, nb, sizeof nb), why);
      }
      seen[u] = 1;
    }
    for (int i = 0; i < 2 * M * v; i++)
      if (!seen[i]) {
        PipeInstr in = {i % 2 ? 'B' : 'F', i / 2 / v, i / 2 % v};
        free(seen);
        return fail(msg, cap, "pipeline schedule: stage %d (rank %d) never runs %s", st, st * rps, iname(s, in, nb, sizeof nb));
      }
    free(seen);
  }
  /* run: done[(virtual stage * M + mb) * 2 + (B)]; a stage moves when its next instruction's input arrived */
  char *done = calloc((size_t)(nvs * 2 * M + 1), 1);
  int *pc = calloc((size_t)pp + 1, sizeof(int));
  if (!done || !pc) die("out of memory");
  int total = 0, norder = 0;
  for (int st = 0; st < pp; st++) total += s->len[st];
  while (norder < total) {
    bool moved = false;
    for (int st = 0; st < pp; st++) {
      if (pc[st] == s->len[st]) continue;
      PipeInstr in = s->list[st][pc[st]];
      int vs = in.chunk * pp + st, from = in.op == 'F' ? vs - 1 : vs + 1;
      if (from >= 0 && from < nvs && !done[(from * M + in.mb) * 2 + (in.op == 'B')]) continue;
      done[(vs * M + in.mb) * 2 + (in.op == 'B')] = 1;
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

double pipe_sched_time(const PipeSched *s, const double *tf, const double *tb, double *bubble, int *inflight) {
  int pp = s->pp, M = s->nmb, nvs = pp * s->v, total = 0;
  for (int st = 0; st < pp; st++) total += s->len[st];
  PipeStep *order = calloc((size_t)total + 1, sizeof *order);
  double *end = calloc((size_t)(nvs * 2 * M + 1), sizeof(double)), *free_at = calloc((size_t)pp + 1, sizeof(double));
  if (!order || !end || !free_at) die("out of memory");
  char msg[256];
  if (!pipe_sched_check(s, 1, order, msg, sizeof msg)) die("pipe_sched_time: %s", msg);
  double span = 0, busy = 0;
  for (int k = 0; k < total; k++) {
    int st = order[k].stage;
    PipeInstr in = s->list[st][order[k].step];
    int vs = in.chunk * pp + st, from = in.op == 'F' ? vs - 1 : vs + 1, b = in.op == 'B';
    double t0 = free_at[st];
    if (from >= 0 && from < nvs && end[(from * M + in.mb) * 2 + b] > t0) t0 = end[(from * M + in.mb) * 2 + b];
    double d = b ? tb[st] : tf[st];
    end[(vs * M + in.mb) * 2 + b] = free_at[st] = t0 + d;
    busy += d;
    if (t0 + d > span) span = t0 + d;
  }
  if (inflight)
    for (int st = 0; st < pp; st++) {
      int cur = 0, most = 0;
      for (int k = 0; k < s->len[st]; k++) {
        cur += s->list[st][k].op == 'F' ? 1 : -1;
        if (cur > most) most = cur;
      }
      inflight[st] = most;
    }
  if (bubble) *bubble = span > 0 ? 1.0 - busy / ((double)pp * span) : 0;
  free(order);
  free(end);
  free(free_at);
  return span;
}
