/* runtime/train/ckpt_async.c — checkpoints written in the background.
 *
 * A save takes a snapshot of the parameters and optimizer state in host memory (a device run
 * downloads them first; a multi-rank run gathers the logical tensors, which are already a copy),
 * then one writer thread writes it through rt_ckpt_save (temporary directory, fsync, atomic
 * rename: a crash mid-write leaves the last complete checkpoint) while training goes on. One save
 * at a time: the next save, and the end of the run, wait for the writer first. SHARDRT_CKPT_SYNC=1
 * writes on the training thread instead (bench/ckpt_async.sh measures what the thread saves). A sharded
 * checkpoint (ckpt_shard.c) is written the same way on every rank, each its own file; rank 0's
 * writer commits it once every rank's file is there.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"

struct RtCkptWriter {
  pthread_t thread;
  int running;
  const RtProgram *p; /* the layout of mem (not owned) */
  char *mem;          /* the snapshot being written: buf, a buffer owned until written, or (synchronous) the run's memory */
  int owned;          /* mem is freed once written */
  char *buf;          /* the reusable snapshot buffer (its pages stay mapped from save to save) */
  size_t cap;         /* its bytes */
  char *dir;
  RtTrainState st;
  int keep;
  double seconds; /* the write's own time */
  RtShardSave *shard; /* a sharded checkpoint's part (owned), NULL: a whole one */
};

static void *write_snapshot(void *arg) {
  RtCkptWriter *w = arg;
  double t0 = rt_now();
  if (w->shard)
    rt_ckpt_shard_write(w->shard);
  else
    rt_ckpt_save(w->p, w->mem, w->dir, &w->st, w->keep);
  w->seconds = rt_now() - t0;
  rt_stop_save_end(); /* (begun in start) */
  return NULL;
}

static void finish(RtCkptWriter *w, const char *how) {
  if (!w->shard || w->shard->rank == 0) {
    printf("checkpoint: %s/step_%08lld written (%.2f s%s)\n", w->dir, (long long)w->st.step, w->seconds, how);
    fflush(stdout);
  }
  if (w->owned) free(w->mem);
  if (w->shard) free(w->shard->dir), free(w->shard->tmp), free(w->shard);
  free(w->dir);
  w->mem = NULL, w->dir = NULL, w->shard = NULL;
}

void rt_run_save_wait(RtRun *r) {
  RtCkptWriter *w = r->writer;
  if (!w || !w->running) return;
  int rc = pthread_join(w->thread, NULL);
  if (rc != 0) rt_fatal(1, "checkpoint: cannot join the writer thread: %s", strerror(rc));
  w->running = 0;
  finish(w, " in the background");
}

char *rt_run_snapshot_buffer(RtRun *r, size_t bytes) {
  rt_run_save_wait(r);
  if (!r->writer) r->writer = rt_xcalloc(1, sizeof *r->writer);
  RtCkptWriter *w = r->writer;
  if (w->cap < bytes) {
    if (w->buf && r->dev && r->dev->unpin) r->dev->unpin(&r->ctx, w->buf);
    free(w->buf);
    w->buf = rt_xcalloc(bytes, 1);
    w->cap = bytes;
    if (r->dev && r->dev->pin) r->dev->pin(&r->ctx, w->buf, (int64_t)bytes); /* downloads at the bus's speed */
  }
  return w->buf;
}

static void start(RtRun *r, const RtProgram *p, char *snapshot, RtShardSave *shard) {
  rt_run_save_wait(r);
  if (!r->writer) r->writer = rt_xcalloc(1, sizeof *r->writer);
  RtCkptWriter *w = r->writer;
  w->p = p;
  w->mem = snapshot;
  w->owned = snapshot != w->buf && snapshot != r->hmem;
  w->dir = rt_xprintf("%s", r->o.save_to);
  w->st = r->st;
  w->keep = (int)r->o.keep;
  w->shard = shard;
  rt_stop_save_begin(); /* until write_snapshot's end: a stop signal waits for the commit (stop.c) */
  if (!rt_ckpt_sync() && pthread_create(&w->thread, NULL, write_snapshot, w) == 0) {
    w->running = 1;
    return;
  }
  write_snapshot(w); /* synchronous (SHARDRT_CKPT_SYNC=1), or no thread to be had: write it now */
  finish(w, " synchronously");
}

int rt_ckpt_sync(void) {
  return rt_env_switch("SHARDRT_CKPT_SYNC", false);
}

void rt_run_save_async(RtRun *r, const RtProgram *p, char *snapshot) { start(r, p, snapshot, NULL); }
void rt_run_save_async_shard(RtRun *r, RtShardSave *j) { start(r, j->p, (char *)j->mem, j); }

void rt_run_writer_free(RtRun *r) {
  rt_run_save_wait(r);
  if (r->writer && r->writer->buf && r->dev && r->dev->unpin) r->dev->unpin(&r->ctx, r->writer->buf);
  if (r->writer) free(r->writer->buf);
  free(r->writer);
  r->writer = NULL;
}
