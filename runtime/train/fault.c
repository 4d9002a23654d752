/* runtime/train/fault.c — the trainer's fault hook for tests: a transient NaN.
 *
 * SHARDRT_FAULT_NAN=STEP:TENSOR[:RANK] sets element 0 of parameter TENSOR (this rank's block of
 * it; on every rank, or only on RANK) to NaN just before step STEP runs, and every rank puts its
 * own element 0 back after it: the step's loss and gradients turn non-finite as after a transient
 * fault (a flipped bit in an activation), and the weights the next step sees are the ones before
 * the fault plus whatever the step's update did. (Every rank restores: under ZeRO a skipped
 * update all-gathers the poisoned shard into the other replicas' copies; replicas hold the same
 * value, so each puts back its own.) With `on_nonfinite skip` the update did nothing, so the
 * parameters after the step equal those before it; with `stop` the run stops there.
 * Nothing happens without the variable; a malformed one is an error.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "run.h"

static struct {
  int parsed, armed;
  int64_t step;
  int rank; /* -1: every rank */
  const RtTensor *t;
  float saved;
} F;

static void parse(RtRun *r) {
  F.parsed = 1;
  const char *v = getenv("SHARDRT_FAULT_NAN");
  if (!v || !*v) return;
  char name[256];
  long long step;
  int rank = -1, n = 0, m = 0;
  if (sscanf(v, "%lld:%255[^:]%n", &step, name, &n) < 2 || step < 1 ||
      (v[n] && (sscanf(v + n, ":%d%n", &rank, &m) != 1 || v[n + m])) || rank < -1) /* ("3:wte:1abc" read rank 1) */
    rt_user_error("SHARDRT_FAULT_NAN='%s': expected STEP:TENSOR[:RANK]", v);
  const RtTensor *t = rt_find_tensor(r->p, name);
  if (!t || t->kind != RT_T_PARAM || t->dtype != RT_F32 || rt_tensor_numel(t) < 1)
    rt_user_error("SHARDRT_FAULT_NAN: '%s' is not an f32 parameter of this program", name);
  F.step = step;
  F.rank = rank;
  F.t = t;
}

void rt_fault_before_step(RtRun *r, int64_t s) {
  if (!F.parsed) parse(r);
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
