/* runtime/train/fault.c — the trainer's fault hooks for tests: a transient NaN, a lost rank.
 *
 * SHARDRT_FAULT_NAN=STEP:TENSOR[:RANK] sets element 0 of parameter TENSOR (this rank's block of
 * it; on every rank, or only on RANK) to NaN just before step STEP runs, and every rank puts its
 * own element 0 back after it: the step's loss and gradients turn non-finite as after a transient
 * fault (a flipped bit in an activation), and the weights the next step sees are the ones before
 * the fault plus whatever the step's update did. (Every rank restores: under ZeRO a skipped
 * update all-gathers the poisoned shard into the other replicas' copies; replicas hold the same
 * value, so each puts back its own.) With `on_nonfinite skip` the update did nothing, so the
 * parameters after the step equal those before it; with `stop` the run stops there.
 *
 * SHARDRT_FAULT_KILL=STEP[:RANK] kills rank RANK (every rank without it) with SIGKILL once step
 * STEP is logged and every checkpoint started so far is written and committed (every rank waits
 * for its background writer, then a barrier): a lost process or node at a point that does not
 * depend on how fast the machine is. (tests/e2e/restart.sh killed a rank from outside once its
 * log showed the step: a fast machine had finished all 20 steps before the kill came. And a kill
 * while the last checkpoint was still being written left a slow machine's restart nothing to
 * resume from, so it started from step 1 and was killed again.) Only in a run that started from
 * step 1: the launcher's restart resumes from a checkpoint, and must not be killed again.
 *
 * SHARDRT_FAULT_SIGNAL=STEP[:RANK] raises SIGTERM in rank RANK (every rank without it) just before
 * step STEP: the graceful stop (stop.c) of a rank that got the signal alone, or before the others.
 * SHARDRT_FAULT_WAIT=STEP[:RANK] makes rank RANK (every rank without it) print "rank R:
 * SHARDRT_FAULT_WAIT: waiting for a signal before step STEP" and wait (at most 120 s) until it has
 * received SIGTERM / SIGUSR1: a test then signals the launcher at a known step, however fast the
 * machine is. Both only in a run that started from step 1 (not in its resume).
 * SHARDRT_FAULT_KCALL=STEP:CLASS[:RANK] adds one kernel call of CLASS (GEMM, attention, bandwidth-bound:
 * ops/kern_count.h) to what step STEP counted on rank RANK (every rank without it): the trainer's check of its
 * kernel calls against the plan's (log.c) then has a difference to report. SHARDRT_FAULT_FLOPS=STEP[:RANK] adds
 * two FLOPs (one multiply-add) to the matmul FLOPs step STEP counted on rank RANK (every rank without it): the
 * check of those against the plan's has one to report.
 * Nothing happens without the variables; a malformed one is an error.
 */
#include <signal.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll.h"
#include "run.h"

static struct {
  int parsed, armed;
  int64_t step;
  int rank; /* -1: every rank */
  const RtTensor *t;
  float saved;
  int64_t kill_step; /* 0: none */
  int kill_rank;     /* -1: every rank */
  int64_t sig_step, wait_step; /* 0: none */
  int sig_rank, wait_rank;     /* -1: every rank */
  int64_t first;               /* the run's first step */
  int64_t kc_step;             /* SHARDRT_FAULT_KCALL's step (0: none) */
  int kc_class, kc_rank;
  int64_t fl_step;             /* SHARDRT_FAULT_FLOPS's step (0: none) */
  int fl_rank;
} F;

/* An optional ":RANK" ending v (RANK -1 when absent): 0, or -1 for anything else ("1abc" was read as 1). */
static int rank_tail(const char *v, int *rank) {
  int m = 0;
  *rank = -1;
  return !*v || (sscanf(v, ":%d%n", rank, &m) == 1 && !v[m] && *rank >= -1) ? 0 : -1;
}

/* VAR=STEP[:RANK] into *step (0 when VAR is unset) and *rank. */
static void step_rank(const char *var, int64_t *step, int *rank) {
  const char *k = getenv(var);
  if (!k || !*k) return;
  long long st;
  int n = 0;
  if (sscanf(k, "%lld%n", &st, &n) != 1 || st < 1 || rank_tail(k + n, rank))
    rt_user_error("%s='%s': expected STEP[:RANK]", var, k);
  *step = st;
}

static void parse(RtRun *r) {
  F.parsed = 1;
  step_rank("SHARDRT_FAULT_SIGNAL", &F.sig_step, &F.sig_rank);
  step_rank("SHARDRT_FAULT_WAIT", &F.wait_step, &F.wait_rank);
  step_rank("SHARDRT_FAULT_KILL", &F.kill_step, &F.kill_rank);
  const char *kc = getenv("SHARDRT_FAULT_KCALL");
  if (kc && *kc) {
    long long st;
    char cls[32];
    int n = 0;
    F.kc_class = -1;
    if (sscanf(kc, "%lld:%31[^:]%n", &st, cls, &n) == 2 && st >= 1 && !rank_tail(kc + n, &F.kc_rank))
      for (int c = 0; c < RT_KC_COUNT; c++)
        if (strcmp(cls, rt_kern_class_names[c]) == 0) F.kc_class = c;
    if (F.kc_class < 0)
      rt_user_error("SHARDRT_FAULT_KCALL='%s': expected STEP:CLASS[:RANK], CLASS one of %s, %s, %s", kc,
                    rt_kern_class_names[0], rt_kern_class_names[1], rt_kern_class_names[2]);
    F.kc_step = st;
  }
  step_rank("SHARDRT_FAULT_FLOPS", &F.fl_step, &F.fl_rank);
  const char *v = getenv("SHARDRT_FAULT_NAN");
  if (!v || !*v) return;
  char name[256];
  long long step;
  int rank, n = 0;
  if (sscanf(v, "%lld:%255[^:]%n", &step, name, &n) < 2 || step < 1 || rank_tail(v + n, &rank))
    rt_user_error("SHARDRT_FAULT_NAN='%s': expected STEP:TENSOR[:RANK]", v);
  const RtTensor *t = rt_find_tensor(r->p, name);
  if (!t || t->kind != RT_T_PARAM || t->dtype != RT_F32 || rt_tensor_numel(t) < 1)
    rt_user_error("SHARDRT_FAULT_NAN: '%s' is not an f32 parameter of this program", name);
  F.step = step;
  F.rank = rank;
  F.t = t;
}

/* SHARDRT_FAULT_SIGNAL / _WAIT before step s of a run that started at step 1. */
static void signal_hooks(RtRun *r, int64_t s) {
  int me = r->ctx.rank;
  if (F.sig_step == s && (F.sig_rank < 0 || F.sig_rank == me)) {
    fprintf(stderr, "rank %d: SHARDRT_FAULT_SIGNAL: SIGTERM before step %lld\n", me, (long long)s);
    raise(SIGTERM);
  }
  if (F.wait_step == s && (F.wait_rank < 0 || F.wait_rank == me)) {
    fprintf(stderr, "rank %d: SHARDRT_FAULT_WAIT: waiting for a signal before step %lld\n", me, (long long)s);
    fflush(NULL);
    double t0 = rt_now();
    while (!rt_stop_signal()) {
      if (rt_now() - t0 > 120) rt_user_error("SHARDRT_FAULT_WAIT: no SIGTERM / SIGUSR1 within 120 s");
      usleep(10000);
    }
  }
}

void rt_fault_before_step(RtRun *r, int64_t s) {
  if (!F.parsed) parse(r);
  if (F.first == 0) F.first = s;
  if (F.first == 1) signal_hooks(r, s);
  if (!F.t || s != F.step) return;
  F.armed = 1; /* (every rank: each derives the copies again after the step, a collective for a sharded master) */
  bool held = rt_tensor_held(r->p, F.t, rt_ctx_coord(&r->ctx, RT_AX_PP)) != 0; /* (else another stage's bytes) */
  bool mine = held && (F.rank < 0 || F.rank == r->ctx.rank);
  if (held) {
    rt_run_from_dev(r, F.t);
    float *x = (float *)rt_run_hptr(r, F.t);
    F.saved = x[0];
    if (mine) {
      x[0] = NAN;
      rt_run_to_dev(r, F.t);
    }
  }
  rt_run_derive_copies(r, F.t); /* compute reads its bf16 copy, where there is one (on every rank: a master
                                   kept as shards derives it by a gather) */
  if (!mine) return;
  fprintf(stderr, "rank %d: SHARDRT_FAULT_NAN: '%s' element 0 is NaN for step %lld\n", r->ctx.rank, F.t->name,
          (long long)s);
}

void rt_fault_after_step(RtRun *r) {
  if (!F.armed) return;
  F.armed = 0;
  if (rt_tensor_held(r->p, F.t, rt_ctx_coord(&r->ctx, RT_AX_PP))) {
    rt_run_from_dev(r, F.t);
    ((float *)rt_run_hptr(r, F.t))[0] = F.saved;
    rt_run_to_dev(r, F.t);
  }
  rt_run_derive_copies(r, F.t);
}

void rt_fault_after_log(RtRun *r, int64_t s, int64_t first) {
  if (!F.parsed) parse(r);
  if (!F.kill_step || s != F.kill_step || first != 1) return;
  rt_run_save_wait(r); /* (every rank: rank 0's writer commits a sharded checkpoint once every rank's file is there) */
  if (r->ctx.world > 1) rt_dist_barrier(&r->ctx);
  if (F.kill_rank >= 0 && F.kill_rank != r->ctx.rank) return;
  fprintf(stderr, "rank %d: SHARDRT_FAULT_KILL: killed (SIGKILL) after step %lld\n", r->ctx.rank, (long long)s);
  fflush(NULL);
  raise(SIGKILL);
}

void rt_fault_flops(RtRun *r, int64_t s, uint64_t *flops) {
  if (!F.parsed) parse(r);
  if (F.fl_step == s && (F.fl_rank < 0 || F.fl_rank == r->ctx.rank)) *flops += 2;
}

void rt_fault_kcalls(RtRun *r, int64_t s, int64_t *k) {
  if (!F.parsed) parse(r);
  if (F.kc_step == s && (F.kc_rank < 0 || F.kc_rank == r->ctx.rank)) k[F.kc_class]++;
}
