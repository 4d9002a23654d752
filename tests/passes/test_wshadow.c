/* tests/passes/test_wshadow.c — the weights' persistent bf16 copies (passes/wshadow.c).
 *
 * The tiny GPT (tied embedding) compiled for the CUDA target under `precision bf16` with
 * `weight_copy persistent` (P) and `weight_copy per_layer` (L), for 1 rank, gradient accumulation,
 * dp 2 with ZeRO 1 and 2 (with and without accumulation) and tp 2:
 *   - structure: P casts no parameter anywhere (neither at the top nor in a loop body) but the updated
 *     ones, once each, into results "next:bf16:<param>" right after the update; it holds one bf16
 *     STATE "bf16:<param>" per parameter L casts; L casts them (its layer loops per layer);
 *   - numbers: the fp64 interpreter runs P and L on their simulated ranks for 3 AdamW steps on the
 *     same tokens: every result of L (loss, grad norm, gradients, every next parameter and optimizer
 *     state) equals P's bit for bit (tolerance 0: the same roundings of the same values), and so does
 *     P resumed after step 1 (a fresh interpreter given P's parameters and optimizer state only, its
 *     copies derived from the parameters, as the trainer does from a checkpoint);
 *   - the decision: auto takes persistent (no device memory to check against); auto with a plan the
 *     driver found too large with the copy (Plan.fit.wcopy.total > .cap) takes per layer;
 *     ZeRO-3 and pipeline stages keep their own casts under auto and refuse `persistent`; `weight_copy`
 *     under f32 or on the CPU target is refused.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "diag.h"
#include "frontend.h"
#include "interp.h"
#include "pipeline.h"
#include "tb.h"

static int failures; /* CHECK (tests/check.h, through tb.h) counts here */

enum { S = 8, V = 256, B = 4 };

/* The tiny GPT for the CUDA target, bf16, with weight_copy wc and the extra overrides; NULL when it
 * does not compile (errors counted by the diagnostics). fit_total / fit_cap: the driver's measure. */
static Module *compile(Arena *a, const char *wc, const FeDefine *defs, int ndefs, int world, const char *prec,
                       Target target, int64_t fit_total, double fit_cap) {
  FeDefine d[24] = {{"seq", "8"},        {"d", "32"},    {"heads", "4"}, {"layers", "2"},
                    {"precision", prec}, {"batch", "4"}, {"tp", "1"},    {"dp", "1"}};
  int n = 8;
  if (wc) d[n++] = (FeDefine){"weight_copy", wc};
  for (int i = 0; i < ndefs; i++) d[n++] = defs[i];
  FeOptions o = {.defines = d, .ndefines = n, .world = world};
  Module *m = fe_compile(a, SHARDC_MODELS_DIR "/tiny.model", &o);
  if (!m) return NULL;
  m->target = target;
  m->plan.fit.wcopy.total = fit_total;
  m->plan.fit.wcopy.cap = fit_cap;
  PipelineOptions po = {.verify = true};
  return pipeline_run(m, &po) && diag_errors() == 0 ? m : NULL;
}

/* bf16 casts of an f32 value in g and its bodies; *in_bodies: those inside a body. */
static int weight_casts(const Graph *g, bool body, int *in_bodies) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *nd = g->nodes[i];
    if (nd->body) n += weight_casts(nd->body, true, in_bodies);
    bool w = nd->op == OP_CAST && nd->out[0]->dtype == DT_BF16 && nd->in[0]->dtype == DT_F32 &&
             (nd->in[0]->def->op == OP_PARAM || (body && nd->in[0]->def->op == OP_ARG && nd->in[0]->shape.rank >= 1));
    n += w;
    if (w && body) (*in_bodies)++;
  }
  return n;
}

/* P's structure: its copies, and the casts of the updated parameters into them. */
static void check_structure(const Module *p, const Module *l, const char *what) {
  const Graph *g = p->graph;
  int copies = 0, writes = 0, casts_l_body = 0, casts_p_body = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op == OP_STATE && ir_copy_source(n->a.name)) {
      copies++;
      CHECK(n->out[0]->dtype == DT_BF16, "%s: copy %s is %s", what, n->a.name, ir_dtype_name(n->out[0]->dtype));
    }
  }
  for (int r = 0; r < g->nresults; r++) {
    const char *nm = g->result_names[r];
    if (!nm || strncmp(nm, "next:", 5) != 0 || !ir_copy_source(nm + 5)) continue;
    const Value *v = g->results[r];
    writes++;
    /* (ZeRO 1 / 2: the all-gather of the cast of the updated master shard, passes/zero_master.c) */
    const Value *w = v->def->op == OP_ALL_GATHER ? v->def->in[0] : v;
    CHECK(w->def->op == OP_CAST && w->def->graph == g && ir_copy_written(g, v), "%s: %s is not a top-level cast",
           what, nm);
  }
  int cast_p = weight_casts(g, false, &casts_p_body), cast_l = weight_casts(l->graph, false, &casts_l_body);
  CHECK(copies >= 16 && writes == copies, "%s: %d copies, %d written by the step", what, copies, writes);
  CHECK(casts_p_body == 0, "%s: the persistent program casts %d weights inside loop bodies", what, casts_p_body);
  CHECK(p->wcopy.persistent && !l->wcopy.persistent && p->wcopy.bytes > 0 && p->wcopy.bytes == l->wcopy.bytes,
         "%s: decided %d / %d, %lld / %lld bytes", what, p->wcopy.persistent, l->wcopy.persistent,
         (long long)p->wcopy.bytes, (long long)l->wcopy.bytes);
  fprintf(stderr, "  %-26s %d copies (%lld B per rank); per layer: %d casts (%d in loop bodies), persistent: %d (%d)\n",
          what, copies, (long long)p->wcopy.bytes, cast_l, casts_l_body, cast_p, casts_p_body);
}

static void equal_runs(const char *what, const FeDefine *defs, int ndefs, int world) {
  Arena a, b;
  arena_init(&a);
  arena_init(&b);
  Module *p = compile(&a, "persistent", defs, ndefs, world, "bf16", TARGET_CUDA, 0, 0);
  Module *l = compile(&b, "per_layer", defs, ndefs, world, "bf16", TARGET_CUDA, 0, 0);
  CHECK(p && l, "%s: does not compile", what);
  if (p && l) {
    check_structure(p, l, what);
    Tensor tok = tb_randint(tb_shape(2, B, S), 31, 0, V), tgt = tb_randint(tb_shape(2, B, S), 32, 0, V);
    Tensor ktok = tok, ktgt = tgt;
    if (p->batch.accum > 1) ktok.shape = ktgt.shape = tb_shape(3, (int)p->batch.accum, (int)(B / p->batch.accum), S);
    Interp *ip = interp_new(p->graph, p->mesh, 7), *il = interp_new(l->graph, l->mesh, 7), *ir = NULL;
    for (int step = 1; step <= 3; step++) {
      tb_feed_step(ip, &ktok, &ktgt, step);
      tb_feed_step(il, &ktok, &ktgt, step);
      if (ir) tb_feed_step(ir, &ktok, &ktgt, step);
      bool ok = interp_step(ip) && interp_step(il) && (!ir || interp_step(ir));
      CHECK(ok, "%s: interpreter error at step %d", what, step);
      if (!ok) break;
      failures += tb_compare_runs(l->graph, il, ip, what, step, 0.0, false);
      if (ir) failures += tb_compare_runs(l->graph, il, ir, "  ... resumed after step 1", step, 0.0, false);
      if (step == 1) ir = tb_resumed(p, ip, NULL);
    }
    interp_free(ip);
    interp_free(il);
    interp_free(ir);
    tensor_free(&tok);
    tensor_free(&tgt);
  }
  arena_free(&a);
  arena_free(&b);
}

/* The decision alone: whether wc (NULL: auto) under the overrides compiles (want_ok) and takes the
 * persistent copies (want_persistent); why contains `why`. */
static void decision(const char *what, const char *wc, const FeDefine *defs, int ndefs, int world, const char *prec,
                     Target target, int64_t fit_total, double fit_cap, bool want_ok, bool want_persistent,
                     const char *why) {
  Arena a;
  arena_init(&a);
  FILE *null = fopen("/dev/null", "w");
  Diag quiet;
  diag_init(&quiet, null, 0);
  Diag *outer = diag_enter(&quiet);
  Module *m = compile(&a, wc, defs, ndefs, world, prec, target, fit_total, fit_cap);
  int errors = diag_errors();
  diag_leave(outer);
  diag_free(&quiet);
  fclose(null);
  CHECK((m != NULL) == want_ok && (want_ok || errors > 0), "%s: compiles: %d, want %d", what, m != NULL, want_ok);
  if (m && want_ok) {
    CHECK(m->wcopy.persistent == want_persistent, "%s: persistent %d, want %d", what, m->wcopy.persistent,
           want_persistent);
    CHECK(!why || (m->wcopy.why && strstr(m->wcopy.why, why)), "%s: why \"%s\", want \"%s\"", what,
           m->wcopy.why ? m->wcopy.why : "(none)", why);
    fprintf(stderr, "  %-40s %s: %s\n", what, m->wcopy.persistent ? "persistent" : "per layer",
            m->wcopy.why ? m->wcopy.why : "");
  } else {
    fprintf(stderr, "  %-40s refused\n", what);
  }
  arena_free(&a);
}

int main(void) {
  fprintf(stderr, "persistent against per-layer copies, 3 steps, bit for bit:\n");
  equal_runs("1 rank", (FeDefine[]){{"micro_batch", "4"}}, 1, 1);
  equal_runs("1 rank, accum 2", (FeDefine[]){{"micro_batch", "2"}}, 1, 1);
  equal_runs("dp 2, zero 1", (FeDefine[]){{"micro_batch", "2"}, {"dp", "2"}, {"zero", "1"}}, 3, 2);
  equal_runs("dp 2, zero 2", (FeDefine[]){{"micro_batch", "2"}, {"dp", "2"}, {"zero", "2"}}, 3, 2);
  equal_runs("dp 2, zero 1, accum 2", (FeDefine[]){{"micro_batch", "1"}, {"dp", "2"}, {"zero", "1"}}, 3, 2);
  equal_runs("tp 2", (FeDefine[]){{"micro_batch", "4"}, {"tp", "2"}}, 2, 2);

  fprintf(stderr, "the decision:\n");
  const FeDefine one[] = {{"micro_batch", "4"}};
  decision("auto", NULL, one, 1, 1, "bf16", TARGET_CUDA, 0, 0, true, true, "no device memory");
  decision("auto, fits", NULL, one, 1, 1, "bf16", TARGET_CUDA, 1 << 20, 2 << 20, true, true, "it fits");
  decision("auto, does not fit", NULL, one, 1, 1, "bf16", TARGET_CUDA, 3 << 20, 2 << 20, true, false, "over the device");
  decision("persistent, does not fit (by hand)", "persistent", one, 1, 1, "bf16", TARGET_CUDA, 3 << 20, 2 << 20, true,
           true, "weight_copy persistent");
  decision("per_layer", "per_layer", one, 1, 1, "bf16", TARGET_CUDA, 0, 0, true, false, "weight_copy per_layer");
  const FeDefine z3[] = {{"micro_batch", "2"}, {"dp", "2"}, {"zero", "3"}};
  decision("auto, zero 3", NULL, z3, 3, 2, "bf16", TARGET_CUDA, 0, 0, true, false, "zero 3");
  decision("persistent, zero 3", "persistent", z3, 3, 2, "bf16", TARGET_CUDA, 0, 0, false, false, NULL);
  const FeDefine pp[] = {{"micro_batch", "2"}, {"pp", "2"}, {"microbatches", "2"}};
  decision("auto, pp 2", NULL, pp, 3, 2, "bf16", TARGET_CUDA, 0, 0, true, false, "pipeline");
  decision("persistent, pp 2", "persistent", pp, 3, 2, "bf16", TARGET_CUDA, 0, 0, false, false, NULL);
  decision("persistent, f32", "persistent", one, 1, 1, "f32", TARGET_CUDA, 0, 0, false, false, NULL);
  decision("per_layer, CPU target", "per_layer", one, 1, 1, "bf16", TARGET_CPU, 0, 0, false, false, NULL);
  decision("auto, CPU target", NULL, one, 1, 1, "bf16", TARGET_CPU, 0, 0, true, false, NULL);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else fprintf(stderr, "wshadow: all checks passed\n");
  return failures != 0;
}
