/* tests/passes/test_zero_master.c — ZeRO-1/2 with the f32 master weights stored split and the bf16
 * copies gathered (passes/zero_master.c).
 *
 * The tiny GPT (tied embedding) for the CUDA target under `precision bf16`: M, the default
 * (`weight_copy` auto: the persistent copies, so the split masters) against L (`weight_copy
 * per_layer`: today's ZeRO path, the whole f32 parameters gathered after the sharded update and cast
 * where read) and R, the single-rank program (persistent copies), for dp 2 and 4, zero 1 and 2, with
 * gradient accumulation, tp 2 x dp 2 and cp 2 x dp 2:
 *   - structure: every parameter of M is a PARAM split over the ZeRO group, its update reads it
 *     directly, its copy's next value is the all-gather of the bf16 cast of the updated shard (no f32
 *     parameter gathered); Module.wcopy.master_saved is the f32 bytes the split saves, and memplan's
 *     parameter class is L's less that (the whole f32 parameters, 4 B x P (g-1)/g);
 *   - numbers: the fp64 interpreter runs M, L and R for 3 AdamW steps on the same tokens: every
 *     result of L (loss, grad norm, gradients, next parameters, optimizer state: logical, gathered)
 *     equals M's bit for bit (tolerance 0), and M's match R's within 1e-4 relative (the sums over the
 *     ranks in another order: 6.2e-6 seen), the loss within 1e-5;
 *   - checkpoints: M's logical parameters and optimizer state after step 1 (zero 1, zero 2), loaded into
 *     zero 0 and zero 3 (copies derived, as the trainer does on resume), continue bit for bit as M does;
 *     and the other way round, zero 0's and zero 3's states loaded into M. (Zero 1 against zero 2 is
 *     not bit for bit on any path: the clip's sum of squares over shards adds in another order.)
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

enum { V = 256, B = 4 };

typedef struct {
  const char *what;
  int dp, tp, cp, zero, mb, seq;
} Case;

static Module *compile(Arena *a, const Case *c, int zero, int dp, int tp, int cp, int mb, const char *wc) {
  char sdp[8], stp[8], scp[8], sz[8], smb[8], sseq[8];
  snprintf(sdp, sizeof sdp, "%d", dp);
  snprintf(stp, sizeof stp, "%d", tp);
  snprintf(scp, sizeof scp, "%d", cp);
  snprintf(sz, sizeof sz, "%d", zero);
  snprintf(smb, sizeof smb, "%d", mb);
  snprintf(sseq, sizeof sseq, "%d", c->seq);
  FeDefine d[16] = {{"seq", sseq}, {"d", "32"}, {"heads", "4"},  {"layers", "2"},       {"precision", "bf16"},
                    {"batch", "4"}, {"tp", stp}, {"dp", sdp},     {"cp", scp},          {"zero", sz},
                    {"micro_batch", smb}};
  int n = 11;
  if (wc) d[n++] = (FeDefine){"weight_copy", wc};
  if (cp > 1) d[n++] = (FeDefine){"cross_node_tp", "on"};
  FeOptions o = {.defines = d, .ndefines = n, .world = dp * tp * cp};
  Module *m = fe_compile(a, SHARDC_MODELS_DIR "/tiny.model", &o);
  if (!m) return NULL;
  m->target = TARGET_CUDA;
  PipelineOptions po = {.verify = true};
  return pipeline_run(m, &po) && diag_errors() == 0 ? m : NULL;
}

static bool split_over_group(const Value *v, int dp) {
  for (int d = 0; d < v->shape.rank; d++)
    if (v->sharding.split[d] == (dp > 1 ? RT_AX_DP : RT_AX_CP)) return true;
  return false;
}

/* M's structure: every updated parameter split, its update reading it, its copy gathered in bf16. */
static void check_structure(const Module *m, const Module *l, const Case *c) {
  const Graph *g = m->graph;
  int params = 0, split = 0, f32_gathers = 0, copy_gathers = 0;
  int64_t whole_bytes = 0, shard_bytes = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op == OP_ADAMW_UPDATE) {
      const Value *p = n->in[0];
      params++;
      if (p->def->op == OP_PARAM && split_over_group(p, c->dp)) split++;
      else fprintf(stderr, "  (not split: %s)\n", p->def->op == OP_PARAM ? p->def->a.name : "?");
    }
    if (n->op == OP_ALL_GATHER && n->out[0]->dtype == DT_F32 && n->in[0]->def->op == OP_ADAMW_UPDATE) f32_gathers++;
  }
  for (int r = 0; r < g->nresults; r++) {
    const char *nm = g->result_names[r];
    if (!nm || strncmp(nm, "next:", 5) != 0 || !ir_copy_source(nm + 5)) continue;
    const Value *v = g->results[r];
    bool ok = v->def->op == OP_ALL_GATHER && v->dtype == DT_BF16 && v->def->in[0]->def->op == OP_CAST &&
              v->def->in[0]->def->in[0]->def->op == OP_ADAMW_UPDATE && ir_copy_written(g, v);
    copy_gathers += ok;
    CHECK(ok, "%s: %s is not the gather of the updated shard's bf16 cast", c->what, nm);
    const Value *p = v->def->in[0]->def->in[0]->def->in[0];
    whole_bytes += ir_numel(&v->shape) * 4;
    shard_bytes += ir_numel(&p->shape) * 4;
  }
  int deg = c->dp * c->cp;
  CHECK(params >= 16 && split == params && copy_gathers == params && f32_gathers == 0,
         "%s: %d updates, %d masters split, %d copies gathered, %d f32 gathers", c->what, params, split, copy_gathers,
         f32_gathers);
  CHECK(m->wcopy.master_saved == whole_bytes - shard_bytes && shard_bytes * deg == whole_bytes,
         "%s: saved %lld B, want %lld - %lld (group %d)", c->what, (long long)m->wcopy.master_saved,
         (long long)whole_bytes, (long long)shard_bytes, deg);
  CHECK(l->wcopy.master_saved == 0 && !l->wcopy.persistent, "%s: per_layer saved %lld", c->what,
         (long long)l->wcopy.master_saved);
  /* memplan: M's parameters (f32 shards and the bf16 copies) are L's whole f32 parameters, less the
   * saving, plus the copies */
  int64_t pm = m->memplan->by_class[MEM_PARAM], pl = l->memplan->by_class[MEM_PARAM];
  int64_t want = pl - m->wcopy.master_saved + m->wcopy.bytes; /* (each tensor's bytes rounded up to 64) */
  CHECK(pm >= want && pm <= want + 64 * params, "%s: parameters %lld B, per_layer %lld - %lld + %lld",
         c->what, (long long)pm, (long long)pl, (long long)m->wcopy.master_saved, (long long)m->wcopy.bytes);
  fprintf(stderr, "  %-24s %d masters split over %d; f32 masters %lld -> %lld B per rank; parameters class %lld B "
                  "(per_layer %lld, copies %lld)\n",
          c->what, split, deg, (long long)whole_bytes, (long long)shard_bytes, (long long)pm, (long long)pl,
          (long long)m->wcopy.bytes);
}

/* A resume (tb_resumed) that finds every parameter and state in the checkpoint. */
static Interp *resumed_all(const Module *q, const Interp *from) {
  int missing;
  Interp *it = tb_resumed(q, from, &missing);
  CHECK(missing == 0, "%d parameters or states not in the checkpoint", missing);
  return it;
}

static void feed(Interp *it, const Module *m, const Tensor *tok, const Tensor *tgt, int step) {
  Tensor ktok = *tok, ktgt = *tgt;
  if (m->batch.accum > 1)
    ktok.shape = ktgt.shape = tb_shape(3, (int)m->batch.accum, (int)(B / m->batch.accum), (int)tok->shape.dim[1]);
  tb_feed_step(it, &ktok, &ktgt, step);
}

/* Runs step `step` of m on it. */
static bool run(Interp *it, const Module *m, const Tensor *tok, const Tensor *tgt, int step) {
  feed(it, m, tok, tgt, step);
  return interp_step(it);
}

static void one_case(const Case *c) {
  Arena am, al, ar;
  arena_init(&am);
  arena_init(&al);
  arena_init(&ar);
  Module *m = compile(&am, c, c->zero, c->dp, c->tp, c->cp, c->mb, NULL);
  Module *l = compile(&al, c, c->zero, c->dp, c->tp, c->cp, c->mb, "per_layer");
  Module *r = compile(&ar, c, 0, 1, 1, 1, B, NULL);
  CHECK(m && l && r, "%s: does not compile", c->what);
  if (m && l && r) {
    check_structure(m, l, c);
    Tensor tok = tb_randint(tb_shape(2, B, c->seq), 31, 0, V), tgt = tb_randint(tb_shape(2, B, c->seq), 32, 0, V);
    Interp *im = interp_new(m->graph, m->mesh, 7), *il = interp_new(l->graph, l->mesh, 7);
    Interp *ir = interp_new(r->graph, r->mesh, 7);
    for (int step = 1; step <= 3; step++) {
      bool ok = run(im, m, &tok, &tgt, step) && run(il, l, &tok, &tgt, step) && run(ir, r, &tok, &tgt, step);
      CHECK(ok, "%s: interpreter error at step %d", c->what, step);
      if (!ok) break;
      failures += tb_compare_runs(l->graph, il, im, c->what, step, 0.0, false);
      char w[96];
      snprintf(w, sizeof w, "  ... against one rank");
      failures += tb_compare_runs(r->graph, ir, im, w, step, 1e-4, false);
      const Tensor *lr = interp_get(ir, 0, "loss"), *lm = interp_get(im, 0, "loss");
      CHECK(lr && lm && fabs(lr->data[0] - lm->data[0]) <= 1e-5 * fabs(lr->data[0]), "%s: loss %.9g, one rank %.9g",
             c->what, lm ? lm->data[0] : NAN, lr ? lr->data[0] : NAN);
    }
    interp_free(im);
    interp_free(il);
    interp_free(ir);
    tensor_free(&tok);
    tensor_free(&tgt);
  }
  arena_free(&am);
  arena_free(&al);
  arena_free(&ar);
}

/* A checkpoint of `a` (zero za) after step 1 resumed under `b` (zero zb): steps 2 and 3 bit for bit
 * as `a` goes on. */
static void cross_resume(const Case *c, int za, int zb) {
  Arena aa, ab;
  arena_init(&aa);
  arena_init(&ab);
  Module *a = compile(&aa, c, za, c->dp, c->tp, c->cp, c->mb, NULL);
  Module *b = compile(&ab, c, zb, c->dp, c->tp, c->cp, c->mb, NULL);
  char what[96];
  snprintf(what, sizeof what, "%s: zero %d -> zero %d", c->what, za, zb);
  CHECK(a && b, "%s: does not compile", what);
  if (a && b) {
    CHECK((a->wcopy.master_saved > 0) == (za == 1 || za == 2) && (b->wcopy.master_saved > 0) == (zb == 1 || zb == 2),
           "%s: masters split %lld / %lld", what, (long long)a->wcopy.master_saved, (long long)b->wcopy.master_saved);
    Tensor tok = tb_randint(tb_shape(2, B, c->seq), 41, 0, V), tgt = tb_randint(tb_shape(2, B, c->seq), 42, 0, V);
    Interp *ia = interp_new(a->graph, a->mesh, 7), *ib = NULL;
    for (int step = 1; step <= 3; step++) {
      bool ok = run(ia, a, &tok, &tgt, step) && (!ib || run(ib, b, &tok, &tgt, step));
      CHECK(ok, "%s: interpreter error at step %d", what, step);
      if (!ok) break;
      /* (b's own results: zero 3's graph has no result a lacks, and the other way round) */
      if (ib) failures += tb_compare_runs(b->graph, ib, ia, what, step, 0.0, false);
      if (step == 1) ib = resumed_all(b, ia);
    }
    interp_free(ia);
    interp_free(ib);
    tensor_free(&tok);
    tensor_free(&tgt);
  }
  arena_free(&aa);
  arena_free(&ab);
}

int main(void) {
  fprintf(stderr, "split f32 masters (default) against whole ones (per_layer, bit for bit) and one rank:\n");
  const Case cases[] = {
      {"dp 2, zero 1", 2, 1, 1, 1, 2, 8},           {"dp 2, zero 2", 2, 1, 1, 2, 2, 8},
      {"dp 4, zero 1", 4, 1, 1, 1, 1, 8},           {"dp 4, zero 2", 4, 1, 1, 2, 1, 8},
      {"dp 2, zero 1, accum 2", 2, 1, 1, 1, 1, 8},  {"dp 2, zero 2, accum 2", 2, 1, 1, 2, 1, 8},
      {"tp 2 x dp 2, zero 2", 2, 2, 1, 2, 2, 8},    {"cp 2 x dp 2, zero 1", 2, 1, 2, 1, 2, 16},
      {"cp 2 x dp 2, zero 2", 2, 1, 2, 2, 2, 16},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) one_case(&cases[i]);
  fprintf(stderr, "checkpoints across stages (logical), bit for bit:\n");
  cross_resume(&cases[0], 1, 0);
  cross_resume(&cases[0], 0, 1);
  cross_resume(&cases[1], 2, 3);
  cross_resume(&cases[1], 3, 2);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else fprintf(stderr, "zero_master: all checks passed\n");
  return failures != 0;
}
