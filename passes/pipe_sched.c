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

PipeSched pipe_sched_make(PipeSchedule kind, int pp, int nmb) {
  if (kind != SCHED_GPIPE && kind != SCHED_1F1B) die("pipe_sched_make: schedule %s", pipe_sched_name(kind));
  PipeSched s = {pp, nmb, kind, calloc((size_t)pp, sizeof(int)), calloc((size_t)pp, sizeof(PipeInstr *))};
  if (!s.len || !s.list) die("out of memory");
  for (int st = 0; st < pp; st++) {
    PipeInstr *l = calloc((size_t)(2 * nmb + 1), sizeof *l);
    if (!l) die("out of memory");
    int n = 0;
    if (kind == SCHED_GPIPE) {
      for (int i = 0; i < nmb; i++) l[n++] = (PipeInstr){'F', i};
      for (int i = 0; i < nmb; i++) l[n++] = (PipeInstr){'B', i};
    } else {
      int warm = pp - st - 1 < nmb ? pp - st - 1 : nmb, f = 0, b = 0;
      while (f < warm) l[n++] = (PipeInstr){'F', f++};
      while (f < nmb) {
        l[n++] = (PipeInstr){'F', f++};
        l[n++] = (PipeInstr){'B', b++};
      }
      while (b < nmb) l[n++] = (PipeInstr){'B', b++};
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

bool pipe_sched_check(const PipeSched *s, int rps, PipeStep *order, char *msg, size_t cap) {
  int pp = s->pp, M = s->nmb;
  if (cap) msg[0] = 0;
  /* well formed: each micro-batch's F then B exactly once per stage */
  for (int st = 0; st < pp; st++) {
    int *seen = calloc((size_t)(2 * M + 1), sizeof(int));
    if (!seen) die("out of memory");
    for (int k = 0; k < s->len[st]; k++) {
      PipeInstr in = s->list[st][k];
      const char *why = NULL;
      if ((in.op != 'F' && in.op != 'B') || in.mb < 0 || in.mb >= M) why = "is not F(i) or B(i) of a micro-batch of the step";
      else if (seen[2 * in.mb + (in.op == 'B')]) why = "runs its micro-batch a second time";
      else if (in.op == 'B' && !seen[2 * in.mb]) why = "comes before the forward of its micro-batch";
      if (why) {
        free(seen);
        return fail(msg, cap, "pipeline schedule: stage %d (rank %d) step %d: %c%d %s", st, st * rps, k, in.op, in.mb, why);
      }
      seen[2 * in.mb + (in.op == 'B')] = 1;
    }
    for (int i = 0; i < 2 * M; i++)
      if (!seen[i]) {
        free(seen);
        return fail(msg, cap, "pipeline schedule: stage %d (rank %d) never runs %c%d", st, st * rps, i % 2 ? 'B' : 'F', i / 2);
      }
    free(seen);
  }
  /* run: done[st][2 mb + (B)] once executed; a stage moves when its next instruction's input arrived */
  char *done = calloc((size_t)(pp * 2 * M + 1), 1);
  int *pc = calloc((size_t)pp + 1, sizeof(int));
  if (!done || !pc) die("out of memory");
  int total = 0, norder = 0;
  for (int st = 0; st < pp; st++) total += s->len[st];
  while (norder < total) {
    bool moved = false;
    for (int st = 0; st < pp; st++) {
      if (pc[st] == s->len[st]) continue;
      PipeInstr in = s->list[st][pc[st]];
      int from = in.op == 'F' ? st - 1 : st + 1;
      if (from >= 0 && from < pp && !done[(from * M + in.mb) * 2 + (in.op == 'B')]) continue;
      done[(st * M + in.mb) * 2 + (in.op == 'B')] = 1;
      order[norder++] = (PipeStep){st, pc[st]++};
      moved = true;
    }
    if (moved) continue;
    int k = fail(msg, cap, "pipeline schedule: a cycle of waits, it would hang:");
    (void)k;
    size_t len = strlen(msg);
    for (int st = 0; st < pp && len < cap; st++) {
      if (pc[st] == s->len[st]) continue;
      PipeInstr in = s->list[st][pc[st]];
      snprintf(msg + len, cap - len, " stage %d (rank %d) step %d: %c%d waits for the %s of micro-batch %d from stage %d;",
               st, st * rps, pc[st], in.op, in.mb, in.op == 'F' ? "activation" : "gradient", in.mb,
               in.op == 'F' ? st - 1 : st + 1);
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
  int pp = s->pp, M = s->nmb, total = 0;
  for (int st = 0; st < pp; st++) total += s->len[st];
  PipeStep *order = calloc((size_t)total + 1, sizeof *order);
  double *end = calloc((size_t)(pp * 2 * M + 1), sizeof(double)), *free_at = calloc((size_t)pp + 1, sizeof(double));
  if (!order || !end || !free_at) die("out of memory");
  char msg[256];
  if (!pipe_sched_check(s, 1, order, msg, sizeof msg)) die("pipe_sched_time: %s", msg);
  double span = 0, busy = 0;
  for (int k = 0; k < total; k++) {
    int st = order[k].stage;
    PipeInstr in = s->list[st][order[k].step];
    int from = in.op == 'F' ? st - 1 : st + 1, b = in.op == 'B';
    double t0 = free_at[st];
    if (from >= 0 && from < pp && end[(from * M + in.mb) * 2 + b] > t0) t0 = end[(from * M + in.mb) * 2 + b];
    double d = b ? tb[st] : tf[st];
    end[(st * M + in.mb) * 2 + b] = free_at[st] = t0 + d;
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
