/* tests/passes/test_plan_recompute.c — what recompute adds in the plan search's analytic model against the compiled
 * cost model (passes/plan_model_init.c's recompute_shares; docs/planner.md "Recompute's GEMMs and attention"), on
 * the CUDA target under bf16, GPT-2 124M and Llama-3-8B with their own plans:
 *   1. the layer's shares: GPT-2's last matrix (c_proj, 4 d^2 of 12) is the one full recompute does not run again,
 *      8 / 12; Llama-3-8B's (w2, 3.5 d^2 of 13), 9.5 / 13; the forward's share of the attention at the head dim
 *      (64, 128) as passes/cost_op.c prices the two;
 *   2. the analytic GEMM time rc full over rc none within 1.5 % of the compiled ratio (the head's GEMMs in both; the
 *      recomputed forward's GEMMs at their epilogues' price, PlanModel.rc_epi: GPT-2's store bias, GELU and residual),
 *      and the attention rc selective over none within 1.5 % (the model took 4 / 3 and 8 / 7: GPT-2's GEMM ratio
 *      1.222 and attention 1.234 compiled, Llama's 1.220 and 1.280).
 * Not timing: the models' arithmetic; six compiles (0.01 s in all on this machine's Xeon). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "diag.h"
#include "frontend.h"
#include "pipeline.h"
#include "plan_model.h"
#include "plan_search.h"
#include "tb.h"

static int failures; /* CHECK (tests/check.h, through tb.h) counts here */

static Module *compiled(Arena *a, const char *model, const char *rc) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s.model", SHARDC_MODELS_DIR, model);
  FeDefine d[] = {{"recompute", rc}};
  FeOptions o = {.defines = d, .ndefines = 1};
  Module *m = fe_compile(a, path, &o);
  if (!m) die("test_plan_recompute: %s does not compile (recompute %s)", model, rc);
  m->target = TARGET_CUDA;
  PipelineOptions po = {.verify = false};
  if (!pipeline_run(m, &po)) die("test_plan_recompute: %s's pipeline failed (recompute %s)", model, rc);
  return m;
}

/* m's own plan as a candidate, with recompute rc (as plan_model_init reads the base's). */
static PlanCand cand_of(const Module *m, RecomputeKind rc) {
  const MeshMap *mm = m->mesh;
  return (PlanCand){.tp = mm->dim[RT_AX_TP], .pp = mm->dim[RT_AX_PP], .cp = mm->dim[RT_AX_CP], .dp = mm->dim[RT_AX_DP],
                    .zero = m->plan.zero, .mb = (int)m->batch.micro, .accum = m->batch.accum, .sp = m->plan.sp,
                    .rec = rc, .sched = m->plan.schedule, .v = 1};
}

static void check_model(Arena *a, const char *model, double want_rc, double hd) {
  Module *none = compiled(a, model, "none"), *sel = compiled(a, model, "selective"), *full = compiled(a, model, "full");
  CostDevice dev;
  cost_device_defaults(none, &dev);
  CHECK(dev.attn_bwd_ratio > 1 && dev.attn_bwd_score_flops > 0, "%s: the GPU's attention figures (bwd ratio %.3f, %.0f "
        "FLOPs a score)", model, dev.attn_bwd_ratio, dev.attn_bwd_score_flops);
  PlanModel pm;
  plan_model_init(&pm, none, &dev);
  /* 1. the shares */
  double f = 4 * hd + dev.attn_score_flops, b = (10 * hd + dev.attn_bwd_score_flops) / dev.attn_bwd_ratio;
  CHECK(fabs(pm.rc_gemm - want_rc) < 1e-3, "%s: rc_gemm %.4f, want %.4f (the layer's matrices but its last)", model,
        pm.rc_gemm, want_rc);
  CHECK(fabs(pm.attn_fwd - f / (f + b)) < 1e-9, "%s: attn_fwd %.4f, want %.4f (hd %.0f)", model, pm.attn_fwd, f / (f + b),
        hd);
  /* 2. the analytic ratios against the compiled */
  CostReport rn, rs, rf;
  cost_estimate(none, &dev, &rn);
  cost_estimate(sel, &dev, &rs);
  cost_estimate(full, &dev, &rf);
  PlanEstimate en, es, ef;
  PlanCand cn = cand_of(none, RECOMPUTE_NONE), cs = cand_of(none, RECOMPUTE_SELECTIVE), cf = cand_of(none, RECOMPUTE_FULL);
  plan_model_estimate(&pm, none, &dev, &cn, &en);
  plan_model_estimate(&pm, none, &dev, &cs, &es);
  plan_model_estimate(&pm, none, &dev, &cf, &ef);
  double g_ana = ef.gemm_s / en.gemm_s, g_cmp = rf.gemm_s / rn.gemm_s;
  double a_ana = es.attn_s / en.attn_s, a_cmp = rs.attn_s / rn.attn_s;
  CHECK(fabs(g_ana / g_cmp - 1) < 0.015, "%s: GEMM time rc full / none: analytic %.4f, compiled %.4f", model, g_ana, g_cmp);
  CHECK(fabs(a_ana / a_cmp - 1) < 0.015, "%s: attention rc selective / none: analytic %.4f, compiled %.4f", model, a_ana,
        a_cmp);
  CHECK(g_cmp > 1.15 && g_cmp < 1.3 && a_cmp > 1.15 && a_cmp < 1.35, "%s: compiled ratios GEMM %.4f, attention %.4f (the "
        "forward again, but the last matrix)", model, g_cmp, a_cmp);
  printf("%s: rc_gemm %.4f rc_epi %.4f attn_fwd %.4f; GEMM full / none analytic %.4f compiled %.4f; attention selective / "
         "none analytic %.4f compiled %.4f\n", model, pm.rc_gemm, pm.rc_epi, pm.attn_fwd, g_ana, g_cmp, a_ana, a_cmp);
  plan_model_free(&pm);
}

int main(void) {
  Arena ar;
  arena_init(&ar);
  check_model(&ar, "gpt2-124m", 8.0 / 12, 64);
  check_model(&ar, "llama3-8b", 9.5 / 13, 128);
  printf("test_plan_recompute: %s\n", failures ? "FAILED" : "ok");
  arena_free(&ar);
  return failures ? 1 : 0;
}
