/* tests/passes/test_plan_cp_mem.c — weight gradients under cp, compiled and in the plan search's analytic memory
 * (docs/planner.md "cp: the weight gradients in one GEMM"):
 *   1. the compiled plan: tiny on 4 ranks, dp 2 cp 2, micro-batch 16 (512 tokens a rank), recompute none, ZeRO 1, 2
 *      and 3: every weight gradient partial over cp is one GEMM contracting the batch with the tokens (a matmul with
 *      cb, [out, in]): none is made one per sequence ([16, out, in]) and summed after;
 *   2. its peak is dp 4 cp 1's at micro-batch 8 (the same 512 tokens a rank) and the ring's blocks in a layer's
 *      backward, no more (the per-sequence gradients alone were 1 MiB, 8 hidden states, of a 7.1 MiB peak);
 *   3. the analytic memory (with cp_ring_ws) is within 8 % of the compiled peak.
 * Not timing: the model's arithmetic and one compile per plan (< 1 s). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "diag.h"
#include "frontend.h"
#include "memplan.h"
#include "memplan_pack.h"
#include "pipeline.h"
#include "plan_model.h"
#include "plan_model_int.h"
#include "plan_search.h"
#include "tb.h"

static int failures; /* CHECK (tests/check.h, through tb.h) counts here */

static Module *tiny(Arena *a, const char *dp, const char *cp, const char *zero, const char *mb) {
  FeDefine d[] = {{"dp", dp}, {"cp", cp}, {"tp", "1"}, {"pp", "1"}, {"zero", zero}, {"micro_batch", mb},
                  {"recompute", "none"}};
  FeOptions o = {.defines = d, .ndefines = 7, .world = 4};
  Module *m = fe_compile(a, SHARDC_MODELS_DIR "/tiny.model", &o);
  if (!m) die("test_plan_cp_mem: tiny does not compile (dp %s cp %s zero %s mb %s)", dp, cp, zero, mb);
  m->target = TARGET_CPU;
  PipelineOptions po = {.verify = true};
  if (!pipeline_run(m, &po)) die("test_plan_cp_mem: tiny's pipeline failed (dp %s cp %s zero %s)", dp, cp, zero);
  return m;
}

typedef struct {
  int one_gemm;     /* weight-gradient matmuls partial over cp, [out, in], the batch contracted (cb) */
  int per_sequence; /* matmuls partial over cp whose result keeps the batch ([mb, out, in]) */
} CpGrads;

static void cp_grads(const Graph *g, int64_t mb, CpGrads *k) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body) cp_grads(n->body, mb, k);
    if (n->op != OP_MATMUL || !(n->out[0]->sharding.partial & (1u << RT_AX_CP))) continue;
    const Shape *y = &n->out[0]->shape;
    if (y->rank == 2 && n->a.cb && n->in[0]->shape.rank == 3 && n->in[0]->shape.dim[0] == mb) k->one_gemm++;
    if (y->rank == 3 && y->dim[0] == mb) k->per_sequence++;
  }
}

int main(void) {
  Arena ar;
  arena_init(&ar);
  Module *base = tiny(&ar, "4", "1", "2", "8"); /* the file's own plan on 4 ranks: the search's base */
  CostDevice dev;
  cost_device_defaults(base, &dev);
  PlanModel pm;
  plan_model_init(&pm, base, &dev);
  static const char *const zeros[] = {"1", "2", "3"};
  for (int z = 0; z < 3; z++) {
    Module *m = tiny(&ar, "2", "2", zeros[z], "16"), *m1 = tiny(&ar, "4", "1", zeros[z], "8");
    /* 1. what the compiled plan makes: the head's gradient and each layer's four (QKV, out, fc, proj) */
    CpGrads k = {0, 0};
    cp_grads(m->graph, 16, &k);
    CHECK(k.per_sequence == 0, "zero %s: %d weight gradients made one per sequence", zeros[z], k.per_sequence);
    CHECK(k.one_gemm == 5, "zero %s: %d weight-gradient GEMMs contract the batch under cp, want 5 (the head's, 4 in the "
          "layers' body)", zeros[z], k.one_gemm);
    /* 2. the same tokens a rank, the same memory but the ring's blocks in a layer's backward (4 hidden states of
     *    the local tokens at most: plan_model.c's cp_ring_ws; the per-sequence gradients alone were 8) */
    double peak = (double)m->memplan->peak, p1 = (double)m1->memplan->peak, unit = 16.0 * 32 * 64 * 4;
    CHECK(peak > p1 && peak - p1 <= 4 * unit, "zero %s: cp 2 mb 16 peaks at %.0f B, cp 1 mb 8 at %.0f B: %+.2f hidden "
          "states, want (0, 4]", zeros[z], peak, p1, (peak - p1) / unit);
    /* 3. the analytic memory against the compiled peak */
    PlanCand c = {.tp = 1, .pp = 1, .cp = 2, .dp = 2, .zero = zeros[z][0] - '0', .mb = 16, .v = 1, .accum = 1,
                  .rec = RECOMPUTE_NONE, .sched = SCHED_1F1B};
    PlanEstimate e;
    memset(&e, 0, sizeof e);
    plan_model_estimate(&pm, base, &dev, &c, &e);
    double r = e.total / peak;
    CHECK(r > 0.92 && r < 1.08, "zero %s: analytic %.0f B / compiled peak %.0f B = %.3f, want within 8 %%", zeros[z],
          e.total, peak, r);
    printf("zero %s: cp 2 compiled peak %.0f B, cp 1 %.0f B (%+.2f hidden states); analytic %.0f B (%.3f of cp 2's)\n",
           zeros[z], peak, p1, (peak - p1) / unit, e.total, r);
  }
  plan_model_free(&pm);
  printf("test_plan_cp_mem: %s\n", failures ? "FAILED" : "ok");
  arena_free(&ar);
  return failures ? 1 : 0;
}
