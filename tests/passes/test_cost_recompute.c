/* tests/passes/test_cost_recompute.c — the CPU cost model's price of activation recompute, and the kernels it
 * prices (docs/performance.md "Recompute's price on the CPU"):
 *   1. the trainer's kernels reach the price: with Module.cpu_llvm_kernels (main.c's one decision, the trainer's
 *      --cpu-kernels) the elementwise loops cost the LLVM kernels' figures (CostDevice.llvm_elem_s) and the C
 *      kernels' figures change nothing, and the other way round without it; the loops LLVM does not build (an
 *      indexed broadcast, a reduction) cost the C kernels' in both;
 *   2. recompute's delta is the recomputed ops' modelled cost: tiny (2 layers, micro-batch 4, 2 micro-steps) with
 *      its tanh loop's price raised by dt, the step of `recompute full` and of `selective` each grows by dt x the
 *      GELU elements of the forward they run again (2 layers x 2 micro-batches x 256 tokens x 256) more than the
 *      step without recompute: one GELU a layer and micro-batch recomputed, priced at the kernels' own rate;
 *   3. a profile gives both kernels' figures (llvm_elem_*); one from before them prices the LLVM kernels at its
 *      C figures.
 * Not timing: the model's arithmetic. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cost.h"
#include "diag.h"
#include "frontend.h"
#include "pipeline.h"
#include "tb.h"

static int failures; /* CHECK (tests/check.h, through tb.h) counts here */

static Module *tiny(Arena *a, const char *rc) {
  FeDefine d[] = {{"recompute", rc}, {"micro_batch", "4"}, {"batch", "8"}, {"zero", "0"}};
  FeOptions o = {.defines = d, .ndefines = 4, .world = 1};
  Module *m = fe_compile(a, SHARDC_MODELS_DIR "/tiny.model", &o);
  if (!m) die("test_cost_recompute: tiny does not compile");
  m->target = TARGET_CPU;
  PipelineOptions po = {.verify = true};
  if (!pipeline_run(m, &po)) die("test_cost_recompute: tiny's pipeline failed (recompute %s)", rc);
  return m;
}

static double step(const Module *m, const CostDevice *d) {
  CostReport r;
  cost_estimate(m, d, &r);
  return r.step_s;
}

int main(void) {
  Arena ar;
  arena_init(&ar);
  static const char *const rcs[] = {"none", "selective", "full"};
  Module *m[3];
  for (int i = 0; i < 3; i++) m[i] = tiny(&ar, rcs[i]);
  CostDevice base;
  cost_device_defaults(m[0], &base);
  /* every loop arithmetic-bound (above the bandwidth's 8 B an element): the price linear in the rate */
  for (int el = 0; el < COST_EL_COUNT; el++) base.elem_s[el] = base.llvm_elem_s[el] = 2e-9;
  const double dt = 10e-9;
  const double gelu = 2.0 * 2 * 4 * 64 * 256; /* layers x micro-steps x tokens x 4 d */

  /* 1. which figures price the loops */
  for (int llvm = 0; llvm < 2; llvm++) {
    for (int i = 0; i < 3; i++) m[i]->cpu_llvm_kernels = llvm;
    CostDevice own = base, other = base, indexed = base;
    (llvm ? own.llvm_elem_s : own.elem_s)[COST_EL_TANH] += dt;
    (llvm ? other.elem_s : other.llvm_elem_s)[COST_EL_TANH] += dt;
    CostDevice llvm_indexed = base; /* a figure no trainer reads: LLVM builds no such loop */
    indexed.elem_s[COST_EL_INDEXED] += dt;
    llvm_indexed.llvm_elem_s[COST_EL_INDEXED] += dt;
    double s0 = step(m[2], &base), so = step(m[2], &own), sx = step(m[2], &other), si = step(m[2], &indexed);
    CHECK(so > s0 + 0.5 * dt * gelu, "%s kernels: their tanh rate +%.3g s moves the step %.6g -> %.6g s", llvm ? "LLVM" : "C",
          dt, s0, so);
    CHECK(sx == s0, "%s kernels: the other kernels' tanh rate moves the step %.9g -> %.9g s", llvm ? "LLVM" : "C", s0, sx);
    CHECK(llvm || si > s0, "C kernels: their indexed-broadcast rate moves the step %.9g -> %.9g s", s0, si);
    CHECK(step(m[2], &llvm_indexed) == s0, "%s kernels: an LLVM indexed-broadcast rate moves the step (the C kernels' "
          "loop in both trainers)", llvm ? "LLVM" : "C");
    CHECK(cost_elem_s(m[2], &own, COST_EL_TANH) == 2e-9 + dt, "cost_elem_s: the %s kernels' tanh", llvm ? "LLVM" : "C");

    /* 2. the delta over no recompute: the recomputed GELUs at the kernels' rate */
    for (int i = 1; i < 3; i++) {
      double grow = (step(m[i], &own) - step(m[i], &base)) - (step(m[0], &own) - step(m[0], &base));
      CHECK(fabs(grow - dt * gelu) <= 1e-9 * step(m[i], &own), "%s kernels, recompute %s: a tanh +%.3g s grows the "
            "delta over none by %.6g s, the %.0f recomputed GELU elements' %.6g", llvm ? "LLVM" : "C", rcs[i], dt, grow,
            gelu, dt * gelu);
    }
  }

  /* 3. the profile's keys */
  char path[] = "/tmp/test_cost_recompute-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (f) {
    fprintf(f, "elem_tanh_s 7e-9\nelem_exp_s 3e-9\nllvm_elem_exp_s 1e-9\n");
    fclose(f);
    CostDevice p;
    cost_device_defaults(m[0], &p);
    CHECK(cost_profile_read(path, &p), "the profile reads");
    CHECK(p.elem_s[COST_EL_TANH] == 7e-9 && p.llvm_elem_s[COST_EL_TANH] == 7e-9,
          "a profile's C tanh without an LLVM one prices both (%.3g, %.3g)", p.elem_s[COST_EL_TANH], p.llvm_elem_s[COST_EL_TANH]);
    CHECK(p.elem_s[COST_EL_EXP] == 3e-9 && p.llvm_elem_s[COST_EL_EXP] == 1e-9, "both exp figures given: each its own");
    CostDevice dflt;
    cost_device_defaults(m[0], &dflt);
    CHECK(p.llvm_elem_s[COST_EL_FLAT] == dflt.llvm_elem_s[COST_EL_FLAT], "a loop the profile leaves out: the defaults'");
    unlink(path);
  }
  printf("test_cost_recompute: %s (the GELU's recomputed %.0f elements a step in the delta, both kernels' figures)\n",
         failures ? "FAILED" : "ok", gelu);
  arena_free(&ar);
  return failures ? 1 : 0;
}
