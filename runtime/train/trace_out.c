/* runtime/train/trace_out.c — the trainer's --trace FILE: the training steps' measured timeline
 * (runtime/ops/trace.h records it) written as one Chrome trace / Perfetto JSON file.
 *
 * Every rank records its own events; at the end each rank but 0 writes them to FILE.rank<R>,
 * and rank 0, after a barrier, writes FILE: its own events, then each part's (removed once
 * copied), so the ranks must share FILE's directory (one host, or a shared file system).
 * The time base is common: on one host (every rank's host name the same) the ranks share
 * CLOCK_MONOTONIC, and every rank takes rank 0's start; across hosts each rank's recorder starts as
 * it leaves a barrier (a rank descheduled there starts late: its events seem early by as much).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run.h"
#include "trace.h"

static char *part_path(const char *file, int rank) { return rt_xprintf("%s.rank%d", file, rank); }

void rt_run_trace_open(RtRun *r) {
  const char *file = r->o.trace;
  if (!file) return;
  /* fail before training, not after it: FILE (and a part beside it) must be writable */
  char *path = r->ctx.rank == 0 ? rt_xstrdup(file) : part_path(file, r->ctx.rank);
  FILE *f = fopen(path, "w");
  if (!f) rt_user_error("--trace: cannot write '%s': %s", path, strerror(errno));
  fclose(f);
  free(path);
  if (r->ctx.world > 1) rt_dist_barrier(&r->ctx);
  r->ctx.trace = rt_trace_new();
  if (r->ctx.world > 1) { /* one host: rank 0's start, exactly (the 32-bit broadcasts are exact) */
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *c = host; *c; c++) h = (h ^ (unsigned char)*c) * 16777619u;
    int64_t h0 = rt_dist_bcast_u32(&r->ctx, h);
    if (!rt_dist_any(&r->ctx, h0 != (int64_t)h)) {
      int64_t ns = (int64_t)(rt_trace_origin(r->ctx.trace) * 1e9);
      int64_t lo = rt_dist_bcast_u32(&r->ctx, ns & 0xffffffff), hi = rt_dist_bcast_u32(&r->ctx, ns >> 32 & 0xffffffff);
      rt_trace_set_origin(r->ctx.trace, (double)(lo | hi << 32) * 1e-9);
    }
  }
}

static void label_of(const RtCtx *ctx, char *out, size_t n) {
  snprintf(out, n, "rank %d (pp %d, dp %d, cp %d, tp %d)", ctx->rank, ctx->pp_rank, ctx->dp_rank, ctx->cp_rank,
           ctx->tp_rank);
}

/* Copies part file `path` (events written as array elements after a first one) into f. */
static void append_part(FILE *f, const char *path) {
  FILE *p = fopen(path, "r");
  if (!p) rt_user_error("--trace: rank 0 cannot read '%s' (the ranks must share the trace's directory): %s", path,
                        strerror(errno));
  char buf[1 << 16];
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, p)) > 0)
    if (fwrite(buf, 1, k, f) != k) rt_user_error("--trace: writing the trace failed: %s", strerror(errno));
  fclose(p);
  unlink(path);
}

void rt_run_trace_close(RtRun *r) {
  RtTrace *t = r->ctx.trace;
  if (!t) return;
  r->ctx.trace = NULL;
  const char *file = r->o.trace;
  char label[128];
  label_of(&r->ctx, label, sizeof label);
  int first = r->ctx.rank == 0;
  char *path = r->ctx.rank == 0 ? rt_xstrdup(file) : part_path(file, r->ctx.rank);
  FILE *f = fopen(path, "w");
  if (!f) rt_user_error("--trace: cannot write '%s': %s", path, strerror(errno));
  if (r->ctx.rank == 0) fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", f);
  long n = rt_trace_write_events(t, f, r->ctx.rank, label, &first);
  rt_trace_free(t);
  if (r->ctx.rank != 0) {
    if (fclose(f) != 0) rt_user_error("--trace: writing '%s' failed: %s", path, strerror(errno));
    free(path);
    rt_dist_barrier(&r->ctx);
    return;
  }
  if (r->ctx.world > 1) rt_dist_barrier(&r->ctx); /* every part is written */
  for (int k = 1; k < r->ctx.world; k++) {
    char *pp = part_path(file, k);
    append_part(f, pp);
    free(pp);
  }
  fputs("\n]}\n", f);
  if (fclose(f) != 0) rt_user_error("--trace: writing '%s' failed: %s", path, strerror(errno));
  printf("trace: %s (%d rank%s, %ld events of rank 0)\n", path, r->ctx.world, r->ctx.world == 1 ? "" : "s", n);
  free(path);
}
