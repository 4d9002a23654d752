/* runtime/ops/trace.c — the recorder behind the trainer's --trace (see trace.h). */
#include "trace.h"

#include <stdint.h>
#include <stdlib.h>

#include "coll.h"
#include "mesh.h"
#include "train/ctx.h"
#include "base.h" /* rt_now */

enum { TRACE_MAX_EVENTS = 4 << 20 }; /* ~160 MiB: a longer run keeps its first events */

typedef struct {
  double t0, t1;    /* seconds from the recorder's start */
  const char *what; /* static */
  int64_t step;     /* ctx->step when recorded */
  short tid, axis;  /* thread; mesh axis of a collective or -1 */
  int mb, chunk;    /* pipeline instruction's micro-batch and chunk, or -1 */
  int stage;        /* pipeline stage of an instruction, or -1 */
} TraceEvent;

struct RtTrace {
  double origin; /* rt_now() at rt_trace_new */
  TraceEvent *e;
  long n, cap;
  long dropped;  /* past TRACE_MAX_EVENTS */
  TraceEvent open_instr, open_phase; /* what == NULL: none open */
};

RtTrace *rt_trace_new(void) {
  RtTrace *t = calloc(1, sizeof *t);
  if (!t) {
    fprintf(stderr, "shardrt: out of memory for the trace\n");
    exit(1);
  }
  t->origin = rt_now();
  return t;
}

double rt_trace_origin(const RtTrace *t) { return t->origin; }
void rt_trace_set_origin(RtTrace *t, double origin) { t->origin = origin; }

void rt_trace_free(RtTrace *t) {
  if (!t) return;
  free(t->e);
  free(t);
}

static void push(RtTrace *t, const TraceEvent *ev) {
  if (t->n == TRACE_MAX_EVENTS) {
    t->dropped++;
    return;
  }
  if (t->n == t->cap) {
    long cap = t->cap ? 2 * t->cap : 4096;
    TraceEvent *e = realloc(t->e, sizeof *e * (size_t)cap);
    if (!e) {
      fprintf(stderr, "shardrt: out of memory for the trace (%ld events)\n", t->n);
      exit(1);
    }
    t->e = e;
    t->cap = cap;
  }
  t->e[t->n++] = *ev;
}

void rt_trace_span(RtCtx *ctx, int tid, const char *what, int axis, int mb, int chunk, double t0, double t1) {
  RtTrace *t = ctx ? ctx->trace : NULL;
  if (!t) return;
  TraceEvent ev = {t0 - t->origin, t1 - t->origin, what, ctx->step, (short)tid, (short)axis, mb, chunk, -1};
  push(t, &ev);
}

static const char *instr_name(int op) { return op == 'F' ? "F" : op == 'B' ? "B" : op == 'W' ? "W" : "?"; }

void rt_trace_instr(RtCtx *ctx, int stage, int op, int mb, int chunk) {
  RtTrace *t = ctx->trace;
  if (!t || rt_ctx_coord(ctx, RT_AX_PP) != stage) return;
  t->open_instr = (TraceEvent){rt_now() - t->origin, 0, instr_name(op), ctx->step, RT_TRACE_COMPUTE, -1, mb, chunk, stage};
}

void rt_trace_instr_end(RtCtx *ctx, int stage) {
  RtTrace *t = ctx->trace;
  if (!t || rt_ctx_coord(ctx, RT_AX_PP) != stage || !t->open_instr.what) return;
  t->open_instr.t1 = rt_now() - t->origin;
  push(t, &t->open_instr);
  t->open_instr.what = NULL;
}

void rt_trace_phase(RtCtx *ctx, const char *name) {
  RtTrace *t = ctx->trace;
  if (!t) return;
  t->open_phase = (TraceEvent){rt_now() - t->origin, 0, name, ctx->step, RT_TRACE_COMPUTE, -1, -1, -1, -1};
}

void rt_trace_phase_end(RtCtx *ctx) {
  RtTrace *t = ctx->trace;
  if (!t || !t->open_phase.what) return;
  t->open_phase.t1 = rt_now() - t->origin;
  push(t, &t->open_phase);
  t->open_phase.what = NULL;
}

static void sep(FILE *f, int *first) {
  fputs(*first ? "\n" : ",\n", f);
  *first = 0;
}

long rt_trace_write_events(const RtTrace *t, FILE *f, int rank, const char *label, int *first) {
  static const char *const threads[] = {"compute", "communication"};
  sep(f, first);
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"%s\"}}", rank, label);
  sep(f, first);
  fprintf(f, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}", rank, rank);
  for (int k = 0; k < 2; k++) {
    sep(f, first);
    fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", rank, k, threads[k]);
  }
  for (long i = 0; i < t->n; i++) {
    const TraceEvent *e = &t->e[i];
    sep(f, first);
    fprintf(f, "{\"name\":\"%s", e->what);
    if (e->mb >= 0) fprintf(f, "%d", e->mb);
    if (e->mb >= 0 && e->chunk > 0) fprintf(f, ".%d", e->chunk);
    if (e->axis >= 0) fprintf(f, " %s", rt_mesh_axis_name(e->axis));
    fprintf(f, "\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"step\":%lld",
            e->stage >= 0 ? e->what : e->tid == RT_TRACE_COMM ? "comm" : e->what, rank, e->tid, 1e6 * e->t0,
            1e6 * (e->t1 - e->t0), (long long)e->step);
    if (e->stage >= 0) fprintf(f, ",\"stage\":%d,\"mb\":%d,\"chunk\":%d", e->stage, e->mb, e->chunk);
    fputs("}}", f);
  }
  if (t->dropped) fprintf(stderr, "shardrt: rank %d: the trace kept its first %ld events (%ld more dropped)\n", rank, t->n, t->dropped);
  return t->n;
}
