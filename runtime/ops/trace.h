/* runtime/ops/trace.h — the measured timeline of a run (the trainer's --trace FILE): spans of
 * time per rank, written as Chrome trace / Perfetto JSON ("X" events, one process per rank).
 *
 * Off unless the trainer opens one (ctx->trace != NULL): every call below then returns at
 * once. Threads (tid) of a rank: 0 compute (the steps, a pipeline stage's F / B / W
 * instructions per micro-batch, the optimizer), 1 communication (each collective, a pipeline
 * send, the wait in a pipeline receive). Times are seconds of rt_now (CLOCK_MONOTONIC) from the moment
 * every rank left the barrier in rt_trace_open, so the ranks of one host share a time base.
 */
#ifndef SHARDRT_TRACE_H
#define SHARDRT_TRACE_H

#include <stdio.h>

typedef struct RtCtx RtCtx;
typedef struct RtTrace RtTrace;

enum { RT_TRACE_COMPUTE = 0, RT_TRACE_COMM = 1 };

/* A recorder whose time 0 is now (heap; rt_trace_free). */
RtTrace *rt_trace_new(void);
/* Its time 0, rt_now() seconds; set: another (every rank of one host takes rank 0's). */
double rt_trace_origin(const RtTrace *t);
void rt_trace_set_origin(RtTrace *t, double origin);
void rt_trace_free(RtTrace *t);

/* One span [t0, t1] (rt_now() seconds, runtime/base.h) on thread tid: what (a static string), and the
 * mesh axis of a collective (-1: none), the micro-batch and chunk of a pipeline instruction (-1:
 * none). */
void rt_trace_span(RtCtx *ctx, int tid, const char *what, int axis, int mb, int chunk, double t0, double t1);

/* Generated code (pipeline programs, codegen/emit.c): instruction op ('F', 'B', 'W') of micro-batch
 * mb and chunk on pipeline stage `stage` starts / ends; a rank of another stage ignores them. */
void rt_trace_instr(RtCtx *ctx, int stage, int op, int mb, int chunk);
void rt_trace_instr_end(RtCtx *ctx, int stage);
/* A phase every rank runs (the optimizer: name a static string) starts / ends. */
void rt_trace_phase(RtCtx *ctx, const char *name);
void rt_trace_phase_end(RtCtx *ctx);

/* Writes t's events as elements of a JSON array (a comma before each unless *first), pid = rank,
 * with the process and thread names; label names the rank ("rank 1 (pp 1, dp 0, tp 0)").
 * Returns the events written. */
long rt_trace_write_events(const RtTrace *t, FILE *f, int rank, const char *label, int *first);

#endif
