/* tests/passes/test_offload_master.c — ZeRO-Offload under `precision bf16` keeps the f32 master
 * weights on the host (passes/zero.c, "the f32 master weights on the host").
 *
 * The tiny GPT (tied embedding) and a Llama-shaped model compiled for the CUDA target, bf16, with
 * `offload` and the weights' persistent bf16 copies (M: the master on the host), against
 *   - L: the same plan with `weight_copy per_layer` (today's offload: the f32 parameters on the
 *     device, downloaded and uploaded in f32, cast per layer),
 *   - D: the same plan without offload (the persistent copies, the update on the device),
 *   - R: the single-rank program (no offload, bf16, the persistent copies),
 * for 1 rank (with and without accumulation), dp 2 with ZeRO 1, 2 and 3 (with and without
 * accumulation; ZeRO-3: the stored shard's bf16 cast becomes a persistent split copy, written by the
 * host, that the layer loops gather as before), tp 2, and pp 2 x dp 2 with ZeRO 3 (against D only:
 * pipeline stages refuse `weight_copy per_layer`):
 *   - structure: M's parameters are host values (the rank's shard under ZeRO at dp > 1), no
 *     to_host reads a parameter, each copy is written by a bf16 upload (ZeRO-1/2 at dp > 1: and a
 *     bf16 all_gather over dp); M uploads half of L's bytes and downloads no parameter; the device
 *     plan's parameters are D's less every f32 parameter (the copies aside), the host plan holds the
 *     masters;
 *   - numbers: the fp64 interpreter runs M, L and D on their simulated ranks for 3 AdamW steps: every
 *     result of L and of D (loss, grad norm, gradients, next parameters and optimizer state) equals
 *     M's bit for bit (tolerance 0), and M equals R within 1e-3 relative (dp 2 adds the gradients in
 *     another order, bf16 rounds the weights after it: 1.4e-4 measured; 1 rank and tp 2: 0 and 1.8e-12);
 *   - resume: after step 1, a fresh M given D's parameters and optimizer state (a checkpoint written
 *     without offload), and a fresh D given M's (one written with offload), their copies derived
 *     from the parameters as the trainer does: both equal the uninterrupted runs bit for bit.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "diag.h"
#include "frontend.h"
#include "interp.h"
#include "memplan.h"
#include "pipeline.h"
#include "tb.h"

static int failures; /* CHECK (tests/check.h, through tb.h) counts here */

enum { S = 8, V = 256, B = 4 };

typedef struct {
  const char *path;
  FeDefine base[8];
  int nbase;
} ModelCase;

static const ModelCase tiny = {SHARDC_MODELS_DIR "/tiny.model",
                               {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "2"}},
                               4};
static const ModelCase llama = {SHARDC_MODELS_DIR "/llama3-8b.model",
                                {{"seq", "8"},
                                 {"d", "32"},
                                 {"heads", "4"},
                                 {"kv_heads", "2"},
                                 {"layers", "2"},
                                 {"ffn", "64"},
                                 {"vocab", "256"}},
                                7};

static Module *compile(Arena *a, const ModelCase *mc, const char *wc, bool offload, const FeDefine *defs, int ndefs,
                       int world) {
  FeDefine d[32];
  int n = 0;
  for (int i = 0; i < mc->nbase; i++) d[n++] = mc->base[i];
  d[n++] = (FeDefine){"precision", "bf16"};
  d[n++] = (FeDefine){"batch", "4"};
  d[n++] = (FeDefine){"tp", "1"};
  d[n++] = (FeDefine){"dp", "1"};
  d[n++] = (FeDefine){"zero", "1"};
  d[n++] = (FeDefine){"cross_node_tp", "on"};
  d[n++] = (FeDefine){"weight_copy", wc};
  d[n++] = (FeDefine){"offload", offload ? "on" : "off"};
  for (int i = 0; i < ndefs; i++) d[n++] = defs[i];
  FeOptions o = {.defines = d, .ndefines = n, .world = world};
  Module *m = fe_compile(a, mc->path, &o);
  if (!m) return NULL;
  m->target = TARGET_CUDA;
  PipelineOptions po = {.verify = true};
  return pipeline_run(m, &po) && diag_errors() == 0 ? m : NULL;
}

/* Bytes of the top graph's copies: to_device (H2D) and to_host (D2H); params: to_host of a parameter. */
static void copies(const Graph *g, int64_t *h2d, int64_t *d2h, int *param_downloads) {
  *h2d = *d2h = 0;
  *param_downloads = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op == OP_TO_DEVICE) *h2d += tb_bytes_of(n->out[0]);
    if (n->op != OP_TO_HOST) continue;
    *d2h += tb_bytes_of(n->out[0]);
    const Node *s = n->in[0]->def;
    if (s->op == OP_SHARD_SLICE) s = s->in[0]->def;
    *param_downloads += s->op == OP_PARAM;
  }
}

/* Bytes of g's persistent bf16 copies (STATE "bf16:<param>"). */
static int64_t copy_bytes(const Graph *g) {
  int64_t b = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_STATE && ir_copy_source(g->nodes[i]->a.name)) b += tb_bytes_of(g->nodes[i]->out[0]);
  return b;
}

/* M's structure against L (today's offload) and D (no offload); want_master: the masters move. */
static void check_structure(const Module *m, const Module *l, const Module *dv, const char *what, bool want_master,
                            bool gathered) {
  const Graph *g = m->graph;
  int host_params = 0, dev_params = 0, writes = 0, bf16_gathers = 0;
  int64_t f32_moved = 0; /* D's f32 bytes of the parameters M keeps on the host */
  int64_t mcopies = copy_bytes(g), dcopies = copy_bytes(dv->graph);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op != OP_PARAM) continue;
    n->out[0]->host ? host_params++ : dev_params++;
    for (int j = 0; n->out[0]->host && j < dv->graph->nnodes; j++) {
      const Node *x = dv->graph->nodes[j];
      if (x->op == OP_PARAM && strcmp(x->a.name, n->a.name) == 0) f32_moved += tb_bytes_of(x->out[0]);
    }
  }
  for (int r = 0; r < g->nresults; r++) {
    const char *nm = g->result_names[r];
    if (!nm || strncmp(nm, "next:", 5) != 0 || !ir_copy_source(nm + 5)) continue;
    const Value *v = g->results[r];
    const Node *up = v->def;
    if (up->op == OP_ALL_GATHER && up->out[0]->dtype == DT_BF16) bf16_gathers++, up = up->in[0]->def;
    writes += up->op == OP_TO_DEVICE && up->out[0]->dtype == DT_BF16 && up->in[0]->host;
  }
  int64_t mh, md, lh = 0, ld = 0;
  int mpd, lpd = -1;
  copies(g, &mh, &md, &mpd);
  if (l) copies(l->graph, &lh, &ld, &lpd);
  const MemPlan *mp = m->memplan, *dp = dv->memplan;
  fprintf(stderr,
          "  %-24s %d masters on the host, %d parameters on the device; H2D %lld B (per layer: %lld), D2H %lld B "
          "(%lld), %d parameter downloads (%d); device parameters %lld B (no offload: %lld), host masters %lld B\n",
          what, host_params, dev_params, (long long)mh, (long long)lh, (long long)md, (long long)ld, mpd, lpd,
          (long long)mp->by_class[MEM_PARAM], (long long)dp->by_class[MEM_PARAM], (long long)mp->host_params);
  if (!want_master) {
    CHECK(host_params == 0 && mh == lh && mpd == lpd, "%s: the master moved (%d) where it must stay", what,
           host_params);
    return;
  }
  CHECK(host_params > 0 && dev_params == 0, "%s: %d parameters on the host, %d on the device", what, host_params,
         dev_params);
  CHECK(writes == host_params, "%s: %d copies written by a bf16 upload, %d masters", what, writes, host_params);
  CHECK(!gathered || bf16_gathers == writes, "%s: %d bf16 gathers, %d uploads", what, bf16_gathers, writes);
  CHECK(mpd == 0 && (!l || lpd == host_params), "%s: %d parameter downloads (per layer: %d)", what, mpd, lpd);
  CHECK(!l || 2 * mh == lh, "%s: uploads %lld B, not half of %lld", what, (long long)mh, (long long)lh);
  /* the device's parameters: D's less the f32 masters (the copies aside: ZeRO-3's are persistent in M only;
     pipeline stages: a rank holds its stage's only, the graph's sums are every stage's) */
  bool staged = m->mesh && m->mesh->dim[RT_AX_PP] > 1;
  CHECK(staged || mp->by_class[MEM_PARAM] - mcopies + f32_moved == dp->by_class[MEM_PARAM] - dcopies,
         "%s: device parameters %lld B (copies %lld) + the f32 %lld B != %lld B (copies %lld) without offload", what,
         (long long)mp->by_class[MEM_PARAM], (long long)mcopies, (long long)f32_moved,
         (long long)dp->by_class[MEM_PARAM], (long long)dcopies);
  CHECK(mp->host_params > 0 && mp->host_params <= mp->host_state, "%s: host masters %lld B", what,
         (long long)mp->host_params);
}

/* with_l: whether the plan takes `weight_copy per_layer` (pipeline stages refuse it: M against D only) */
static void run(const ModelCase *mc, const char *what, const FeDefine *defs, int ndefs, int world, bool want_master,
                bool gathered, bool with_l) {
  Arena am, al, ad, ar;
  arena_init(&am), arena_init(&al), arena_init(&ad), arena_init(&ar);
  Module *m = compile(&am, mc, "auto", true, defs, ndefs, world);
  Module *l = with_l ? compile(&al, mc, "per_layer", true, defs, ndefs, world) : NULL;
  Module *dv = compile(&ad, mc, "auto", false, defs, ndefs, world);
  const FeDefine one[] = {{"micro_batch", "4"}};
  Module *r = compile(&ar, mc, "auto", false, one, 1, 1);
  CHECK(m && (l || !with_l) && dv && r, "%s: does not compile", what);
  if (m && (l || !with_l) && dv && r) {
    check_structure(m, l, dv, what, want_master, gathered);
    Tensor tok = tb_randint(tb_shape(2, B, S), 31, 0, V), tgt = tb_randint(tb_shape(2, B, S), 32, 0, V);
    Tensor ktok = tok, ktgt = tgt;
    if (m->batch.accum > 1) ktok.shape = ktgt.shape = tb_shape(3, (int)m->batch.accum, (int)(B / m->batch.accum), S);
    Interp *im = interp_new(m->graph, m->mesh, 7), *il = l ? interp_new(l->graph, l->mesh, 7) : NULL;
    Interp *id = interp_new(dv->graph, dv->mesh, 7), *ir = interp_new(r->graph, r->mesh, 7);
    Interp *rm = NULL, *rd = NULL; /* M resumed from D's state, D from M's */
    for (int step = 1; step <= 3; step++) {
      Interp *all[] = {im, il, id, ir, rm, rd};
      bool ok = true;
      for (int k = 0; k < 6; k++) {
        if (!all[k]) continue;
        tb_feed_step(all[k], k == 3 ? &tok : &ktok, k == 3 ? &tgt : &ktgt, step);
        ok = ok && interp_step(all[k]);
      }
      CHECK(ok, "%s: interpreter error at step %d", what, step);
      if (!ok) break;
      if (l) failures += tb_compare_runs(l->graph, il, im, what, step, 0.0, false);
      failures += tb_compare_runs(dv->graph, id, im, "  ... against no offload", step, 0.0, false);
      failures += tb_compare_runs(r->graph, ir, im, "  ... against one rank", step, 1e-3, false);
      if (rm) failures += tb_compare_runs(dv->graph, id, rm, "  ... offload resumed from no offload", step, 0.0, false);
      if (rd) failures += tb_compare_runs(dv->graph, id, rd, "  ... no offload resumed from offload", step, 0.0, false);
      if (step == 1) rm = tb_resumed(m, id, NULL), rd = tb_resumed(dv, im, NULL);
    }
    interp_free(im), interp_free(il), interp_free(id), interp_free(ir), interp_free(rm), interp_free(rd);
    tensor_free(&tok);
    tensor_free(&tgt);
  }
  arena_free(&am), arena_free(&al), arena_free(&ad), arena_free(&ar);
}

int main(void) {
  fprintf(stderr, "offload under bf16: the master weights on the host, 3 steps:\n");
  run(&tiny, "tiny, 1 rank", (FeDefine[]){{"micro_batch", "4"}}, 1, 1, true, false, true);
  run(&tiny, "tiny, 1 rank, accum 2", (FeDefine[]){{"micro_batch", "2"}}, 1, 1, true, false, true);
  run(&tiny, "tiny, dp 2, zero 1", (FeDefine[]){{"micro_batch", "2"}, {"dp", "2"}, {"zero", "1"}}, 3, 2, true, true, true);
  run(&tiny, "tiny, dp 2, zero 2", (FeDefine[]){{"micro_batch", "2"}, {"dp", "2"}, {"zero", "2"}}, 3, 2, true, true, true);
  run(&tiny, "tiny, dp 2, zero 2, accum 2", (FeDefine[]){{"micro_batch", "1"}, {"dp", "2"}, {"zero", "2"}}, 3, 2,
      true, true, true);
  run(&tiny, "tiny, dp 2, zero 3", (FeDefine[]){{"micro_batch", "2"}, {"dp", "2"}, {"zero", "3"}}, 3, 2, true, false, true);
  run(&tiny, "tiny, dp 2, zero 3, accum 2", (FeDefine[]){{"micro_batch", "1"}, {"dp", "2"}, {"zero", "3"}}, 3, 2, true,
      false, true);
  run(&tiny, "tiny, tp 2", (FeDefine[]){{"micro_batch", "4"}, {"tp", "2"}}, 2, 2, true, false, true);
  run(&llama, "Llama, 1 rank", (FeDefine[]){{"micro_batch", "4"}}, 1, 1, true, false, true);
  run(&llama, "Llama, dp 2, zero 1, accum 2", (FeDefine[]){{"micro_batch", "1"}, {"dp", "2"}, {"zero", "1"}}, 3, 2,
      true, true, true);
  run(&tiny, "tiny, pp 2 x dp 2, zero 3",
      (FeDefine[]){{"micro_batch", "1"}, {"dp", "2"}, {"pp", "2"}, {"microbatches", "2"}, {"zero", "3"}}, 5, 4, true,
      false, false);
  run(&llama, "Llama, dp 2, zero 3", (FeDefine[]){{"micro_batch", "2"}, {"dp", "2"}, {"zero", "3"}}, 3, 2, true, false, true);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else fprintf(stderr, "offload master: all checks passed\n");
  return failures != 0;
}
