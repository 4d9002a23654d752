/* passes/pipeline.c — the whole middle of the compiler on one screen: the passes below, in
 * order, with the verifier after each and an optional dump of the IR after any of them
 * (--dump-ir=after:PASS). The mesh and the batch are decided before lowering (ir/mesh.h); the
 * passes read them from the Module.
 */
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "diag.h"
#include "passes.h"
#include "print.h"

typedef struct {
  const char *name;
  bool (*run)(Module *m);
  bool records; /* it records each graph it changes (ir_touch, or the IR's functions that do): the verifier after
                   it checks those graphs only (ir_verify_changed; the tests' SHARDC_VERIFY=audit runs find a
                   change it did not record); false: every graph (the passes before pipe: a small IR) */
} Pass;

static const Pass passes[] = {
    {"inline", pass_inline, false},        /* layers expanded; repeat stays a region */
    {"shape", pass_shape, false},          /* shapes and dtypes checked against the source */
    {"precision", pass_precision, false},  /* bf16 compute, f32 master weights (CUDA target) */
    {"autodiff", pass_autodiff, false},    /* backward graph */
    {"optimizer", pass_optimizer, false},  /* clip, lr, update */
    {"gemmcast", pass_gemm_cast, false},   /* CPU bf16 GEMMs: each weight's bf16 copy made once per step, read by its GEMMs */
    {"shard", pass_shard, false},          /* dp/tp/sp: per-rank shapes, collectives */
    {"wshadow", pass_wshadow, false},      /* bf16 compute: weights' bf16 copies kept, written by the update (or per-layer casts) */
    {"accum", pass_accum, false},          /* gradient accumulation: accum micro-steps in a region, one update */
    {"peel", pass_peel, false},            /* accumulation over dp: the last micro-step out of the region (overlap) */
    {"sums", pass_sums, false},            /* accumulation: the micro-step's layer gradients summed inside the backward loop */
    {"wcast", pass_wcast, false},          /* bf16 compute: a stacked weight's bf16 copy per layer, inside its loops */
    {"stage", pass_stage, false},          /* pipeline stages: layers split over pp, embedding first, head and loss last */
    {"pipe", pass_pipe, true},            /* the pipeline schedule: per-stage F/B instructions, send/recv between stages */
    {"buckets", pass_grad_buckets, true}, /* dp gradient all-reduces overlapped with backward, bucketed */
    {"recompute", pass_recompute, true},  /* activations of repeat blocks recomputed in backward (plan recompute) */
    {"zero", pass_zero, true},            /* ZeRO 1/2/3: optimizer state, gradients, parameters sharded over dp */
    {"zcoal", pass_zero_coalesce, true}, /* ZeRO-3: a layer's gathers (issued at one point) as one all-gather; ZeRO-2/3: its gradients' scatters as one, where it pays */
    {"zdefer", pass_zero_defer, true},    /* ZeRO-2/3: a backward loop's scatter results unpacked after the loop, not waited in its iteration */
    {"owners", pass_owners, true},        /* pipeline: what one stage alone needs (its own parameters' updates) on that stage */
    {"zlate", pass_zero_late, true},     /* pp, zb, ZeRO-2/3: a non-layer gradient's dp scatter ending B issued after the stage's W loop */
    {"fuse", pass_fuse, true},            /* elementwise chains grouped, for every target */
    {"memplan", pass_memplan, true},      /* every value at a fixed offset per rank */
    {"gacc", pass_gacc, true},            /* a weight-gradient GEMM accumulates into the running sum: add(sum, dW) gone */
    {"epilogue", pass_epilogue, true},    /* a matmul's bias add (+ GELU / residual) into its GEMM (CUDA target) */
    {"hfuse", pass_hfuse, true},          /* sibling GEMMs reading one activation: one batched launch (CUDA target) */
    {"fuse_normres", pass_fuse_normres, true}, /* the residual gradient's add in the norm's backward kernel (CUDA target) */
    {"fuse_ce", pass_fuse_ce, true},      /* a cross-entropy's forward and backward in one kernel */
    {"fuse_sumsq", pass_fuse_sumsq, true}, /* the clip's sums of squares in one kernel, into the concat (CUDA target) */
    {"verify", pass_verify, true},        /* every rank's collectives match its group peers' */
};
enum { NPASSES = sizeof passes / sizeof passes[0] };

void pipeline_pass_names(const char **names, int cap) {
  if (cap < NPASSES + 1) die("pipeline_pass_names: room for %d names, %d passes", cap, NPASSES);
  for (int i = 0; i < NPASSES; i++) names[i] = passes[i].name;
  names[NPASSES] = NULL;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether pass i may change m: the CUDA target's kernel fusions change nothing on another target
 * (pass_cuda_fusions_apply), so there they are neither run nor followed by the verifier (the IR is
 * the one the last verification saw). */
static bool pass_applies(const Module *m, int i) {
  bool (*run)(Module *) = passes[i].run;
  if (run == pass_epilogue || run == pass_hfuse || run == pass_fuse_normres) return pass_cuda_fusions_apply(m);
  return true;
}

typedef enum { VERIFY_CHANGED, VERIFY_FULL, VERIFY_AUDIT } VerifyMode;

/* What the verifier after each pass checks (SHARDC_VERIFY): the graphs the pass changed (unset or
 * "changed": ir_verify_changed), the whole IR ("full", for debugging: ir_verify), or the changed
 * graphs with every graph's contents hashed to find a change made without ir_touch ("audit", for
 * the tests). pipeline_run verifies the whole IR after its last pass in every mode. */
static VerifyMode verify_mode(void) {
  const char *e = getenv("SHARDC_VERIFY");
  if (!e || !*e || strcmp(e, "changed") == 0) return VERIFY_CHANGED;
  if (strcmp(e, "full") == 0) return VERIFY_FULL;
  if (strcmp(e, "audit") == 0) return VERIFY_AUDIT;
  die("SHARDC_VERIFY=%s: not a verification mode (changed: the graphs each pass changed, the default; full: the "
      "whole IR after every pass; audit: changed, and a change made without ir_touch found)", e);
}

/* Pass i over m, then the verifier (its seconds added to *verify_s, for --time-passes) and the
 * dump --dump-ir=after:PASS asks for. */
static bool run_one(Module *m, int i, const PipelineOptions *o, double *verify_s) {
  if (!pass_applies(m, i)) { /* unchanged: the IR the last verification saw */
    if (o->time) fprintf(stderr, "shardc: pass %-10s    0.000 ms (not for this target: not run, not verified)\n", passes[i].name);
  } else {
    double t0 = now();
    bool ok = passes[i].run(m) && diag_errors() == 0;
    if (ok && o->after_pass) o->after_pass(m, passes[i].name);
    double t1 = now();
    VerifyMode mode = o->verify ? verify_mode() : VERIFY_CHANGED;
    bool full = mode == VERIFY_FULL || !passes[i].records;
    unsigned flags = (full ? IR_VERIFY_ALL : 0) | (mode == VERIFY_AUDIT ? IR_VERIFY_AUDIT : 0);
    if (ok && o->verify && !ir_verify_changed(m->graph, passes[i].name, flags)) die("IR invalid after pass %s", passes[i].name);
    double t2 = now();
    if (o->time && ok && o->verify)
      fprintf(stderr, "shardc: pass %-10s %8.3f ms (ir_verify after it %.3f ms: %s)\n", passes[i].name, 1e3 * (t1 - t0),
              1e3 * (t2 - t1), full ? "every graph" : "the graphs it changed");
    else if (o->time) fprintf(stderr, "shardc: pass %-10s %8.3f ms\n", passes[i].name, 1e3 * (t1 - t0));
    if (!ok) return false;
    *verify_s += t2 - t1;
  }
  if (o->dump_after && (strcmp(o->dump_after, passes[i].name) == 0 || strcmp(o->dump_after, "all") == 0)) {
    fprintf(o->dump, "# ---- after %s ----\n", passes[i].name);
    ir_print_graph(o->dump, m->graph);
  }
  return true;
}

bool pipeline_run(Module *m, const PipelineOptions *o) {
  if (!m->mesh) die("pipeline: the mesh is not resolved (ir_mesh_resolve runs before lowering)");
  double verify_s = 0;
  for (int i = 0; i < NPASSES; i++)
    if (!run_one(m, i, o, &verify_s)) return false;
  if (o->verify) { /* the whole IR once more, whatever the passes' verifications skipped */
    double t0 = now();
    if (!ir_verify(m->graph, "the last pass (the final verification of the whole IR)"))
      die("IR invalid after the last pass");
    double t1 = now();
    if (o->time) fprintf(stderr, "shardc: ir_verify final %8.3f ms (the whole IR, after the last pass)\n", 1e3 * (t1 - t0));
    verify_s += t1 - t0;
  }
  if (o->time && o->verify)
    fprintf(stderr, "shardc: ir_verify       %8.3f ms (the IR verifier after every pass and the final one; --no-verify skips it)\n",
            1e3 * verify_s);
  return true;
}

/* One pass, for IR-file pass tests (tests/passes/ir_opt.c). */
bool pipeline_run_pass(Module *m, const char *name, const PipelineOptions *o) {
  if (!m->mesh) die("pipeline: the mesh is not resolved (ir_mesh_resolve runs before a pass)");
  for (int i = 0; i < NPASSES; i++)
    if (strcmp(passes[i].name, name) == 0) return run_one(m, i, o, &(double){0});
  error_plain("no pass named '%s'", name);
  return false;
}
