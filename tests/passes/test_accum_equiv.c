/* tests/passes/test_accum_equiv.c — gradient accumulation (passes/accum.c) against the big batch.
 *
 * For the tiny GPT and a Llama-shaped model: the whole pipeline runs on the single-rank
 * program with micro-batch B (batch B, accum 1) and on programs with accum k in {2, 4}
 * micro-steps of B / (k dp) sequences per rank, for dp x tp in {1 x 1, 2 x 1, 1 x 2, 1 x 2 sp, 2 x 2}
 * (batch B in each; under ZeRO also 2 x 2 sp, 4 x 1 and 4 x 2, with B 16). Both are interpreted in fp64 (the accumulating one on dp * tp simulated
 * ranks) for two AdamW steps on the same tokens (the big batch's rows, micro-step i holding
 * rows i B/k .. (i+1) B/k - 1); after each step the loss, the grad norm, every gradient and
 * every updated parameter and optimizer state must agree within a relative error of 1e-10.
 * Every target is counted (none is -1): the loss is the mean of the micro-steps' means, which
 * is the big batch's mean when every micro-step counts as many targets. The checks also
 * assert the shape of the program: one `repeat accum` region at the top (k iterations; k-1 with
 * dp, whose last micro-step runs after it, passes/peel.c), the tokens input [k, B / (k dp) x dp, S],
 * and the data-parallel gradient reduction after the region, once, inside the last micro-step's
 * backward loop for the layers' gradients;
 * and of its memory plan: each running sum is one buffer (zeros, sums and output in place). Under
 * ZeRO-2/3 the layers' running sums are dp shards, each micro-step's layer gradients
 * reduce-scattered inside the region's backward loop (passes/zero_sums.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "frontend.h"
#include "interp.h"
#include "pipeline.h"
#include "tb.h"
#include "tb_zero.h"

#define TOL 1e-10

static int failures;

static Module *compile(Arena *a, const char *path, const FeDefine *defs, int ndefs, int dp, int tp, bool sp,
                       int64_t micro, int64_t batch) {
  FeDefine d[24];
  int n = 0;
  char sdp[16], stp[16], smb[24], sb[24];
  for (int i = 0; i < ndefs; i++) d[n++] = defs[i];
  snprintf(sdp, sizeof sdp, "%d", dp);
  snprintf(stp, sizeof stp, "%d", tp);
  snprintf(smb, sizeof smb, "%lld", (long long)micro);
  snprintf(sb, sizeof sb, "%lld", (long long)batch);
  d[n++] = (FeDefine){"dp", sdp};
  d[n++] = (FeDefine){"tp", stp};
  d[n++] = (FeDefine){"sp", sp ? "on" : "off"};
  d[n++] = (FeDefine){"micro_batch", smb};
  d[n++] = (FeDefine){"batch", sb};
  d[n++] = (FeDefine){"cross_node_tp", "on"};
  FeOptions o = {.defines = d, .ndefines = n, .world = dp * tp};
  Module *m = fe_compile(a, path, &o);
  if (!m) return NULL;
  PipelineOptions po = {.verify = true};
  if (!pipeline_run(m, &po)) return NULL;
  return m;
}


/* dp all-gathers in g and the bodies nested in it. */
static int dp_gathers(const Graph *g) {
  int c = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    c += n->op == OP_ALL_GATHER && n->a.mesh_axis == RT_AX_DP;
    if (n->body) c += dp_gathers(n->body);
  }
  return c;
}

/* dp all-reduces and reduce-scatters inside g's bodies (not g's own). */
static int dp_reductions_in_loops(const Graph *g, bool top) {
  int c = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    c += !top && (n->op == OP_ALL_REDUCE || n->op == OP_REDUCE_SCATTER) && n->a.mesh_axis == RT_AX_DP;
    if (n->body) c += dp_reductions_in_loops(n->body, false);
  }
  return c;
}


/* The program's shape: one top-level `repeat accum xk`, tokens [k, ..], dp all-reduces only after it;
 * under zero 3, parameters stored split over dp and gathered inside the region. */
static void check_shape(const Module *m, int64_t k, int dp, const char *what) {
  const Graph *g = m->graph;
  int nacc = 0, pos = -1, dp_before = 0, dp_after = 0, split = 0, gathers = 0, in_loop = 0;
  int shard_sums = 0, region_scatters = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    /* with dp, the last micro-step runs after the region (passes/peel.c) */
    if (n->op == OP_REPEAT && n->a.name && strcmp(n->a.name, "accum") == 0 && n->a.count == (dp > 1 ? k - 1 : k)) {
      nacc++, pos = i, gathers = dp_gathers(n->body);
      /* ZeRO-2/3 (passes/zero_sums.c): the layers' running sums are dp shards, each micro-step's
       * layer gradients reduce-scattered inside the region's backward loop */
      region_scatters = tb_dp_scatters_in_loops(n->body);
      for (int c = 0; c < n->a.ncarry; c++)
        for (int d = 0; d < n->out[c]->shape.rank; d++) shard_sums += n->out[c]->sharding.split[d] == RT_AX_DP;
      /* memplan: each running sum is one buffer (its zeros, the sum of every micro-step, the output) */
      for (int c = 0; c < n->a.ncarry; c++)
        if (n->body->results[c]->offset != n->out[c]->offset || n->out[c]->offset != n->in[c]->offset) {
          fprintf(stderr, "FAIL %s: carry %d at %lld, sum at %lld, output at %lld: not one buffer\n", what, c,
                  (long long)n->in[c]->offset, (long long)n->body->results[c]->offset, (long long)n->out[c]->offset);
          failures++;
        }
    }
    if (n->op == OP_PARAM)
      for (int d = 0; d < n->out[0]->shape.rank; d++) split += n->out[0]->sharding.split[d] == RT_AX_DP;
    if (n->op == OP_ALL_REDUCE && n->a.mesh_axis == RT_AX_DP) *(pos < 0 ? &dp_before : &dp_after) += 1;
    if (pos >= 0 && i > pos && n->op == OP_REPEAT) in_loop += dp_reductions_in_loops(n->body, false);
    if (n->op == OP_INPUT && strcmp(n->a.name, "tokens") == 0 && (n->out[0]->shape.rank != 3 || n->out[0]->shape.dim[0] != k)) {
      fprintf(stderr, "FAIL %s: tokens is not [%lld, ..]\n", what, (long long)k);
      failures++;
    }
  }
  if (nacc != 1 || dp_before || (dp > 1 && dp_after < 1)) {
    fprintf(stderr, "FAIL %s: %d accum regions, %d dp all-reduces before it and %d after\n", what, nacc, dp_before,
            dp_after);
    failures++;
  }
  /* the last micro-step's backward loop reduces each layer's gradients (overlapped) */
  if (dp > 1 && in_loop < 1) {
    fprintf(stderr, "FAIL %s: no dp gradient reduction inside the last micro-step's backward loop\n", what);
    failures++;
  }
  if (m->plan.zero >= 2 && dp > 1 && (shard_sums < 1 || region_scatters < 1)) {
    fprintf(stderr, "FAIL %s: zero %d keeps %d running sums split over dp, %d reduce-scatters in the region's loops\n",
            what, m->plan.zero, shard_sums, region_scatters);
    failures++;
  }
  if (m->plan.zero < 2 && (shard_sums || region_scatters)) {
    fprintf(stderr, "FAIL %s: zero %d splits %d running sums over dp\n", what, m->plan.zero, shard_sums);
    failures++;
  }
  if (m->plan.zero >= 3 && dp > 1 && (split < 1 || gathers < split)) {
    fprintf(stderr, "FAIL %s: zero 3 stores %d parameters split over dp and gathers %d in the region\n", what, split,
            gathers);
    failures++;
  }
}

/* nplans: the first 5 plans (dp 1-2), or all 8 (also dp 4 and dp 2 x tp 2 sp: ZeRO, B 16) */
/* nzero: the last nzero of defs are written only where the plan shards over dp (dp > 1): options a plan of one
 * rank refuses (`defer_waits`); the big-batch reference and the dp 1 plans go without them. */
static void run_model_dp(const char *label, const char *path, const FeDefine *defs, int ndefs, int nzero, int64_t B,
                         int64_t S, int64_t V, int nplans) {
  fprintf(stderr, "%s\n", label);
  Arena ra;
  arena_init(&ra);
  Module *ref = compile(&ra, path, defs, ndefs - nzero, 1, 1, false, B, B);
  if (!ref) {
    fprintf(stderr, "FAIL %s: the big-batch program does not compile\n", label);
    failures++;
    return;
  }
  Tensor tok = tb_randint(tb_shape(2, (int)B, (int)S), 101, 0, V);
  Tensor tgt = tb_randint(tb_shape(2, (int)B, (int)S), 102, 0, V);
  static const int plans[][3] = {{1, 1, 0}, {2, 1, 0}, {1, 2, 0}, {1, 2, 1}, {2, 2, 0}, {2, 2, 1}, {4, 1, 0}, {4, 2, 0}};
  for (int p = 0; p < nplans; p++)
    for (int64_t k = 2; k <= 4; k *= 2) {
      int dp = plans[p][0], tp = plans[p][1];
      bool sp = plans[p][2];
      char what[64];
      snprintf(what, sizeof what, "accum %lld x dp %d x tp %d%s", (long long)k, dp, tp, sp ? " sp" : "");
      Arena pa;
      arena_init(&pa);
      Module *pm = compile(&pa, path, defs, dp > 1 ? ndefs : ndefs - nzero, dp, tp, sp, B / (k * dp), B);
      if (!pm) {
        fprintf(stderr, "FAIL %s %s: does not compile\n", label, what);
        failures++;
        arena_free(&pa);
        continue;
      }
      if (pm->batch.accum != k || pm->batch.global != B) {
        fprintf(stderr, "FAIL %s %s: batch decided as accum %lld, global %lld\n", label, what,
                (long long)pm->batch.accum, (long long)pm->batch.global);
        failures++;
      }
      check_shape(pm, k, dp, what);
      failures += tb_check_scatters_deferred(pm, what); /* (passes/zero_defer.c) */
      /* ZeRO-2, coalesce on: one dp scatter a backward layer loop's body (passes/zero_coalesce.c; not asked
       * of ZeRO-3 here, where the micro-step loop's own body gathers the embedding per use besides a first
       * layer's coalesced gather: 5 all-gathers in that loop's body, counted by the helper as a layer's) */
      if (pm->plan.zero == 2) failures += tb_check_zero_coalesced(pm, what);
      /* the same rows: micro-step i holds rows i B/k .. (i+1) B/k - 1 */
      failures += tb_equiv_micro(ref, pm, &tok, &tgt, k, label, what, TOL, false);
      arena_free(&pa);
    }
  tensor_free(&tok);
  tensor_free(&tgt);
  arena_free(&ra);
}

static void run_model(const char *label, const char *path, const FeDefine *defs, int ndefs, int64_t B, int64_t S,
                      int64_t V, int nplans) {
  run_model_dp(label, path, defs, ndefs, 0, B, S, V, nplans);
}

int main(void) {
  const FeDefine tiny[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "2"}};
  run_model("tiny byte-level GPT (vocab 256, tied head)", SHARDC_MODELS_DIR "/tiny.model", tiny, 4, 8, 8, 256, 5);
  const FeDefine llama[] = {{"vocab", "128"}, {"seq", "8"},      {"d", "32"},  {"heads", "4"}, {"precision", "f32"},
                            {"kv_heads", "2"}, {"layers", "2"}, {"ffn", "48"}};
  run_model("Llama shaped (RMSNorm, SwiGLU, RoPE, GQA, untied)", SHARDC_MODELS_DIR "/llama3-8b.model", llama, 8, 8, 8,
            128, 5);
  /* with ZeRO: the llama model's own plan is zero 1 and recompute selective (above); stage 2 */
  const FeDefine tiny_z2[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "2"}, {"zero", "2"}};
  run_model("tiny, zero 2", SHARDC_MODELS_DIR "/tiny.model", tiny_z2, 5, 16, 8, 256, 8);
  /* zero 3: the micro-step region gathers the parameters it reads (per use, per layer) */
  const FeDefine tiny_z3[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "2"}, {"zero", "3"}};
  run_model("tiny, zero 3", SHARDC_MODELS_DIR "/tiny.model", tiny_z3, 5, 16, 8, 256, 8);
  const FeDefine llama_z3[] = {{"vocab", "128"}, {"seq", "8"},      {"d", "32"},  {"heads", "4"}, {"precision", "f32"},
                               {"kv_heads", "2"}, {"layers", "2"}, {"ffn", "48"}, {"zero", "3"}};
  run_model("Llama shaped, zero 3", SHARDC_MODELS_DIR "/llama3-8b.model", llama_z3, 9, 16, 8, 128, 8);
  /* ... its gathers issued at one point coalesced (passes/zero_coalesce.c) */
  const FeDefine tiny_z3c[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "2"}, {"zero", "3"}, {"coalesce", "on"}};
  run_model("tiny, zero 3, coalesce on", SHARDC_MODELS_DIR "/tiny.model", tiny_z3c, 6, 16, 8, 256, 8);
  /* ... its scatters waited in their own iteration (`defer_waits off`: the running sums' adds in the body) */
  const FeDefine tiny_z3nd[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "2"}, {"zero", "3"}, {"defer_waits", "off"}};
  run_model_dp("tiny, zero 3, defer_waits off", SHARDC_MODELS_DIR "/tiny.model", tiny_z3nd, 6, 1, 16, 8, 256, 8);
  /* ... ZeRO-2's: a layer's scatters one (at tp 2 three before, the row-split ones transposed), the shards
   * added to the running sums after the loop (passes/zero_defer.c) */
  const FeDefine tiny_z2c[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "2"}, {"zero", "2"}, {"coalesce", "on"}};
  run_model("tiny, zero 2, coalesce on", SHARDC_MODELS_DIR "/tiny.model", tiny_z2c, 6, 16, 8, 256, 8);
  /* recompute inside the micro-step region */
  const FeDefine tiny_rc[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "2"}, {"recompute", "full"}};
  run_model("tiny, recompute full", SHARDC_MODELS_DIR "/tiny.model", tiny_rc, 5, 8, 8, 256, 5);
  /* ZeRO-2/3's shard sums (passes/zero_sums.c) with recompute: the recomputing backward loops */
  const FeDefine tiny_z2rc[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "2"}, {"zero", "2"}, {"recompute", "full"}};
  run_model("tiny, zero 2, recompute full", SHARDC_MODELS_DIR "/tiny.model", tiny_z2rc, 6, 16, 8, 256, 8);
  const FeDefine llama_z2[] = {{"vocab", "128"}, {"seq", "8"},      {"d", "32"},  {"heads", "4"}, {"precision", "f32"},
                               {"kv_heads", "2"}, {"layers", "2"}, {"ffn", "48"}, {"zero", "2"}};
  run_model("Llama shaped, zero 2 (recompute selective)", SHARDC_MODELS_DIR "/llama3-8b.model", llama_z2, 9, 16, 8, 128, 8);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  fprintf(stderr, "accumulation equals the big batch\n");
  return 0;
}
