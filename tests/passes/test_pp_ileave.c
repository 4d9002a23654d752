/* tests/passes/test_pp_ileave.c — the interleaved schedule with virtual stages of unequal layer counts
 * (`pp N layers(..)` with `schedule interleaved(v: V)`: passes/stage.c, passes/pipe.c) against the
 * single rank.
 *
 * The layer counts are written per stage (pp counts, each split over its V chunks, the earlier chunks
 * taking one more: [2, 3] at pp 2, V 2 is virtual stages [1, 2, 1, 1], ordered k = c pp + s) or per
 * virtual stage (pp x V counts, Megatron's fewer layers on the first and the last: [1, 2, 2, 1]), or
 * `layers(balanced)` over the pp V virtual stages. For the tiny GPT (tied embedding) and a Llama-shaped
 * model: the single-rank program with batch B in one micro-step, and the pipelined programs (pp 2 and
 * 4, V 2, x dp 2 and x tp 2; tiny with ZeRO-3 (f32, and bf16 on the CUDA target) and with full recompute, Llama
 * with ZeRO-1, ZeRO-2 and ZeRO-3) interpreted in fp64 for two AdamW steps (with clipping): the loss, the
 * grad norm, every gradient, parameter and optimizer state within 1e-10 relative, replicas identical;
 * in bf16 (the CUDA target) within 2^-12. The program's shape: each virtual stage's forward loops run
 * its own count, its stacks' rows read through views (no copy: a stage's own rows, each chunk's rows at
 * its first row), the stacks split `S(pp)@0/stages` with
 * the mesh's rows per virtual stage; the transfers M per neighbour of each virtual stage; the blocks to
 * scale (each chunk's F by FLOPs one layer's FLOPs per layer apart, and by the cost model the chunk of
 * more layers the longer). And the layout (runtime/mesh.c, rt_stage_index): every logical row on
 * exactly one rank's local row. The gradient side (check_grad_rows): each chunk's running sum in its rows of
 * its stage's stacked sum and each stage's sum where the stage_select's output is (passes/memplan_views.c,
 * rows in place): no concat, pad or select copies (main: every one, 335-660 KB a plan).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "diag.h"
#include "frontend.h"
#include "interp.h"
#include "memplan.h"
#include "pipe_sched.h"
#include "tb_compile.h"
#include "tb_zero.h"
#include "pipeline.h"
#include "tb.h"

#define TOL 1e-10
#define TOL_BF16 (1.0 / 4096)

static int failures;

static void expect(bool ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "FAIL: %s\n", what);
    failures++;
  }
}

/* nlayers counts (0: `layers(balanced)`) for a plan of pp x dp x tp, interleaved with v chunks. */
static Module *compile_plan(Arena *a, Target target, const char *path, const FeDefine *defs, int ndefs, int pp, int dp,
                            int tp, int v, int64_t micro, int64_t batch, const int *layers, int nlayers) {
  TbPp p = {.pp = pp, .dp = dp, .tp = tp, .v = pp > 1 ? v : 0, .sched = pp > 1 ? "interleaved" : "1f1b",
            .micro = micro, .batch = batch, .layers = layers && nlayers ? layers : NULL, .nlayers = nlayers,
            .balanced = layers && nlayers == 0};
  return tb_compile_pp(a, target, path, defs, ndefs, &p);
}

/* Whether v (a stage's stacked gradient sum) is in place: a concat's (axis 0) inputs each at its rows of the
 * output's bytes, a pad's (axis 0) at its first row, down to the chunks' loops (their running sums); the
 * bytes of the copies it still makes added to *copy. */
static bool rows_in_place(const Value *y, int64_t *copy) {
  const Node *n = y->def;
  if ((n->op != OP_CONCAT && n->op != OP_PAD) || n->a.axis != 0) return true;
  int64_t row = tb_bytes_of(y) / y->shape.dim[0], at = n->op == OP_PAD ? n->a.start : 0;
  bool ok = true;
  for (int k = 0; k < n->nin; k++) {
    const Value *x = n->in[k];
    if (x->offset != y->offset + at * row) {
      ok = false;
      *copy += tb_bytes_of(x);
    }
    ok &= rows_in_place(x, copy);
    at += x->shape.dim[0];
  }
  return ok;
}

/* The gradient side: each stage's sum of a stacked layer gradient is its chunks' running sums concatenated
 * along the layers (uneven: each padded), and the stage_select of the stages' sums gives each rank its own
 * (passes/pipe_fold.c). The memory plan places them in place (passes/memplan_views.c, rows in place): every
 * chunk's sum in its rows of its stage's sum, each stage's sum where the select's output is, so the
 * concats, pads and the select copy nothing (main: a copy of the stage's stacked f32 gradient, one
 * parameter at a time, beside its chunks' sums, and another by the select). */
static void check_grad_rows(const Graph *g, const char *what, bool strict) {
  int sels = 0, copied = 0;
  int64_t copy = 0;
  char msg[256];
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op != OP_STAGE_SELECT) continue;
    bool stacked = true;
    for (int k = 0; k < n->nin; k++) {
      const Node *d = n->in[k]->def;
      stacked &= (d->op == OP_CONCAT || d->op == OP_PAD) && d->a.axis == 0;
    }
    if (!stacked) continue;
    sels++;
    bool ok = true;
    for (int k = 0; k < n->nin; k++) {
      if (n->in[k]->offset != n->out[0]->offset) {
        ok = false;
        copy += tb_bytes_of(n->in[k]);
      }
      ok &= rows_in_place(n->in[k], &copy);
    }
    copied += !ok;
  }
  snprintf(msg, sizeof msg, "%s: %d stage sums of stacked layer gradients selected, %d of them copied (%lld B)", what,
           sels, copied, (long long)copy);
  expect(sels > 0 && (!strict || !copied), msg);
  fprintf(stderr, "  %s: %d of %d stacked gradient sums in place%s\n", what, sels - copied, sels,
          copied ? " (the memory plan's copies pack smaller: memplan_pack's links)" : "");
}

/* A plan whose step peaks where the stages' sums are selected (wide layers, few tokens: the gradients
 * outweigh the activations): with the copies, each stage's sum of a stacked gradient beside its chunks'
 * sums, then beside the select's output: here every one in place (main: the 12 selects and 24 concats
 * copied; `shardc plan` of the same shape, docs/performance.md: peak 53.24 -> 52.79 MiB). */
static void check_sums_in_place(void) {
  const FeDefine defs[] = {{"seq", "8"}, {"d", "256"}, {"heads", "4"}, {"layers", "8"}, {"zero", "0"}};
  Arena a;
  arena_init(&a);
  Module *m = compile_plan(&a, TARGET_CPU, SHARDC_MODELS_DIR "/tiny.model", defs, 5, 2, 2, 1, 2, 1, 8, NULL, 0);
  expect(m != NULL, "tiny d 256 pp 2 x dp 2 interleaved compiles");
  if (m) {
    check_grad_rows(m->graph, "tiny d 256, pp 2 x dp 2, interleaved v 2, 4 micro-batches", true);
    fprintf(stderr, "  tiny d 256 pp 2 int2: planned peak %lld B\n", (long long)m->memplan->peak);
  }
  arena_free(&a);
}

/* The program's shape (see the file's header); rows: the mesh's counts per virtual stage. */
static void check_shape(const Module *m, int pp, int v, int64_t M, const char *what) {
  const Graph *g = m->graph;
  const int *rows = m->mesh->stage_rows;
  char msg[256];
  int sends[8] = {0}, recvs[8] = {0}, loops = 0, bad = 0, views = 0, moved = 0, split = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if ((n->op == OP_SEND || n->op == OP_RECV) && n->a.mesh_axis == RT_AX_PP && n->stage > 0 && n->stage <= 8)
      (n->op == OP_SEND ? sends : recvs)[n->stage - 1]++;
    if (n->op == OP_PARAM && n->out[0]->sharding.split[0] == RT_AX_PP)
      split += n->out[0]->sharding.blocks[0] == RT_BLOCKS_STAGES;
    if (ir_slice_is_view(n)) {
      views++;
      moved += n->out[0]->offset != n->in[0]->offset;
    }
    if (n->op != OP_REPEAT || n->a.reverse || n->stage < 1 || !n->instr) continue;
    loops++;
    int vs = m->pipe->order[n->instr - 1].chunk * pp + n->stage - 1; /* its virtual stage */
    bad += n->a.count != rows[vs];
  }
  int tied = 0; /* a parameter held on two stages (the tied embedding): its gradient's exchange, one each way */
  for (int i = 0; i < g->nnodes; i++) tied += g->nodes[i]->op == OP_PARAM && g->nodes[i]->stageset;
  for (int s = 0; s < pp; s++) {
    int want = (int)M * ((v - (s == pp - 1)) + (v - (s == 0))) + ((s == 0 || s == pp - 1) ? tied : 0);
    snprintf(msg, sizeof msg, "%s: stage %d sends %d and receives %d transfers, want %d each", what, s, sends[s],
             recvs[s], want);
    expect(sends[s] == want && recvs[s] == want, msg);
  }
  snprintf(msg, sizeof msg, "%s: %d forward loops (want %d), %d not of their virtual stage's count", what, loops,
           pp * v * (int)M, bad);
  expect(loops == pp * v * (int)M && !bad, msg);
  snprintf(msg, sizeof msg, "%s: %d row slices, %d of them copied; %d layer params split S(pp)@0/stages", what, views,
           moved, split);
  expect(views && !moved && split > 0, msg);
  /* each chunk's rows of the stage's stacked layer values (passes/pipe.c chunk_of, past row 0 from the
   * second chunk on): row views at the chunk's first row (passes/memplan_views.c), no bytes of their own
   * (main: a copy of the stage's whole weights under ZeRO 0-2) */
  int chunks = 0, copied = 0;
  int64_t copy_bytes = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    const Value *x = n->in[0], *y = n->out[0];
    if (n->op != OP_SLICE || n->a.axis != 0 || n->stage || x->sharding.split[0] != RT_AX_PP) continue;
    chunks++;
    if (y->offset != x->offset + n->a.start * (tb_bytes_of(x) / x->shape.dim[0])) {
      copied++;
      copy_bytes += tb_bytes_of(y);
    }
  }
  snprintf(msg, sizeof msg, "%s: %d chunk slices of the stacked layer values, %d of them copies (%lld B)", what,
           chunks, copied, (long long)copy_bytes);
  expect(chunks > 0 && !copied, msg);
  check_grad_rows(g, what, false);
  expect(m->mesh->stage_chunks == v, "the mesh's stage_chunks is the plan's v");
  int64_t local = rt_stage_local_rows(rows, pp, v), bad_rows = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_PARAM && g->nodes[i]->out[0]->sharding.blocks[0] == RT_BLOCKS_STAGES)
      bad_rows += g->nodes[i]->out[0]->shape.dim[0] != local;
  snprintf(msg, sizeof msg, "%s: %lld layer params whose stacks are not the chunks' padded %lld rows", what,
           (long long)bad_rows, (long long)local);
  expect(!bad_rows, msg);
  /* the blocks to scale: by FLOPs (the plan's bubble, --schedule-svg without a device) each F of a stage
   * differs from its other chunk's by one layer's FLOPs per layer more; by the cost model (the plan's
   * timeline) a chunk of more layers than the stage's other, on a stage holding neither the embedding
   * nor the head (or the embedding's stage's second chunk against its first), takes longer */
  const PipePlan *pl = m->pipe;
  for (int st = 0; st < pp; st++)
    for (int c = 1; c < v; c++) {
      double dn = (double)(pl->stage[st].chunk_layers[c] - pl->stage[st].chunk_layers[0]);
      double d = pipe_plan_instr_flops(pl, st, c, 'F') - pipe_plan_instr_flops(pl, st, 0, 'F');
      snprintf(msg, sizeof msg, "%s: stage %d's F of chunk %d against chunk 0: %.6g FLOPs, want %.6g", what, st, c, d,
               dn * pl->layer_fwd);
      expect(fabs(d - dn * pl->layer_fwd) <= 1e-9 * pl->layer_fwd, msg);
    }
  CostDevice dev;
  CostPipe cp;
  cost_device_defaults(m, &dev);
  if (!cost_pipe(m, &dev, &cp)) {
    expect(false, "the cost model plays the pipeline");
    return;
  }
  int checked = 0;
  for (int st = 0; st < pp - 1; st++) { /* (the last stage's last chunk holds the head) */
    const int64_t *cl = pl->stage[st].chunk_layers;
    if (cl[0] == cl[1] || (st == 0 && cl[1] < cl[0])) continue;
    double f[2] = {0, 0};
    for (int k = 0; k < cp.sched.len[st]; k++) /* micro-batch 1's F of each chunk (0's holds the step's casts) */
      if (cp.sched.list[st][k].op == 'F' && cp.sched.list[st][k].mb == 1) f[cp.sched.list[st][k].chunk] = cp.t.dur[st][k];
    bool more = cl[1] > cl[0];
    snprintf(msg, sizeof msg, "%s: stage %d's F of %lld and %lld layers: %.3g and %.3g s (cost model)", what, st,
             (long long)cl[0], (long long)cl[1], f[0], f[1]);
    expect(more ? f[1] > f[0] : f[0] > f[1], msg);
    checked++;
  }
  fprintf(stderr, "  %s: %d stages' chunk times checked by the cost model\n", what, checked);
  cost_pipe_free(&cp);
}

typedef struct {
  int pp, dp, tp, M, n, layers[8]; /* n counts (0: balanced) */
} Plan8;

static void run(const char *label, Target target, double tol, const char *path, const FeDefine *defs, int ndefs,
                int64_t B, int64_t S, int64_t V, const Plan8 *plans, int nplans) {
  fprintf(stderr, "%s, interleaved uneven stages\n", label);
  Arena ra;
  arena_init(&ra);
  Module *ref = tb_compile_ref(&ra, target, path, defs, ndefs, B, label);
  if (!ref) {
    failures++;
    return;
  }
  Tensor tok = tb_randint(tb_shape(2, (int)B, (int)S), 101, 0, V);
  Tensor tgt = tb_randint(tb_shape(2, (int)B, (int)S), 102, 0, V);
  for (int p = 0; p < nplans; p++) {
    const Plan8 *x = &plans[p];
    int v = 2;
    Arena pa;
    arena_init(&pa);
    static const int balanced[1];
    Module *pm = compile_plan(&pa, target, path, defs, ndefs, x->pp, x->dp, x->tp, v, B / (x->M * x->dp), B,
                              x->n ? x->layers : balanced, x->n);
    char what[160];
    int w = snprintf(what, sizeof what, "pp %d x dp %d x tp %d, interleaved v %d, %d micro-batches, layers(%s", x->pp,
                     x->dp, x->tp, v, x->M, x->n ? "" : "balanced");
    for (int s = 0; s < x->n; s++) w += snprintf(what + w, sizeof what - (size_t)w, "%s%d", s ? ", " : "", x->layers[s]);
    if (pm) {
      w += snprintf(what + w, sizeof what - (size_t)w, ") = virtual stages [");
      for (int k = 0; k < x->pp * v; k++)
        w += snprintf(what + w, sizeof what - (size_t)w, "%s%d", k ? ", " : "", pm->mesh->stage_rows[k]);
      snprintf(what + w, sizeof what - (size_t)w, "]");
    } else {
      snprintf(what + w, sizeof what - (size_t)w, ")");
    }
    if (!pm) {
      fprintf(stderr, "FAIL %s %s: does not compile\n", label, what);
      failures++;
      arena_free(&pa);
      continue;
    }
    if (!x->n) { /* balanced: the stage pass's split of the pp v virtual stages, applied */
      bool same = pm->pipe_balance && pm->pipe_balance->split && pm->pipe_balance->pp == x->pp * v;
      for (int k = 0; same && k < x->pp * v; k++) same = pm->pipe_balance->split[k] == pm->mesh->stage_rows[k];
      expect(same, "layers(balanced) with interleaving: the balance's virtual stages applied");
    }
    check_shape(pm, x->pp, v, x->M, what);
    failures += tb_check_zero_pp(pm, x->M, what);
    failures += tb_equiv_micro(ref, pm, &tok, &tgt, x->M, label, what, tol, true);
    arena_free(&pa);
  }
  tensor_free(&tok);
  tensor_free(&tgt);
  arena_free(&ra);
}

/* runtime/mesh.c's layout: with pp 2, 2 chunks, virtual stages [1, 2, 2, 1] (6 rows, padded to 2 per chunk):
 * every logical row held once, the padding rows none; and the chunk rule of a stage count ([2, 3]: stage 1's
 * 3 layers as 2 + 1). */
static void check_layout(void) {
  const int rows[4] = {1, 2, 2, 1};
  int seen[6] = {0}, pads = 0;
  for (int c = 0; c < 2; c++)
    for (int64_t l = 0; l < 4; l++) {
      int64_t g = rt_stage_index(rows, 2, 2, c, l);
      if (g < 0) pads++;
      else if (g < 6) seen[g]++;
    }
  bool once = pads == 2 && rt_stage_logical(rows, 2, 2) == 6;
  for (int i = 0; i < 6; i++) once &= seen[i] == 1;
  expect(once, "the interleaved uneven layout holds every logical row once");
  /* rank 0: chunk 0 (virtual stage 0: row 0) then chunk 1 (virtual stage 2: rows 3, 4) */
  expect(rt_stage_index(rows, 2, 2, 0, 0) == 0 && rt_stage_index(rows, 2, 2, 0, 1) == -1 &&
             rt_stage_index(rows, 2, 2, 0, 2) == 3 && rt_stage_index(rows, 2, 2, 0, 3) == 4 &&
             rt_stage_index(rows, 2, 2, 1, 0) == 1 && rt_stage_index(rows, 2, 2, 1, 3) == -1,
         "rank 0 holds rows 0 | 3, 4; rank 1 rows 1, 2 | 5");
  /* each chunk padded to its own chunks' largest count: [1, 1, 3, 1] holds 1 + 3 rows per rank, not 2 x 3 */
  const int r2[4] = {1, 1, 3, 1};
  expect(rt_stage_local_rows(r2, 2, 2) == 4 && rt_stage_chunk_start(r2, 2, 1) == 1 && rt_stage_index(r2, 2, 2, 0, 0) == 0 &&
             rt_stage_index(r2, 2, 2, 0, 1) == 2 && rt_stage_index(r2, 2, 2, 0, 3) == 4 &&
             rt_stage_index(r2, 2, 2, 1, 0) == 1 && rt_stage_index(r2, 2, 2, 1, 1) == 5 &&
             rt_stage_index(r2, 2, 2, 1, 2) == -1,
         "[1, 1, 3, 1]: 4 local rows, rank 0 rows 0 | 2, 3, 4, rank 1 rows 1 | 5 and 2 padding rows");
}

/* The interleaved balance worked out by hand: pp 2 x 2 chunks over 5 layers of 1 + 2 s, the embedding
 * 1 s on virtual stage 0, the head 3 s on virtual stage 3. The least slowest virtual stage is 6 s: at most
 * [1, 2, 2, 1] layers, one too many; off the slowest stage's chunks (stage 1: virtual stages 1 and 3, 6 + 6
 * s against stage 0's 4 + 6), though stage 0's memory (its 4 micro-batches in flight a chunk) is the peak:
 * [1, 1, 2, 1]. */
static void check_balance(void) {
  int infl[4] = {4, 1, 4, 1};
  PipeBalance b = {.pp = 4, .chunks = 2, .layers = 5, .layer_f = 1, .layer_b = 2, .first_f = 0.5, .first_b = 0.5,
                   .last_f = 3, .layer_act = 10, .layer_bytes = 1, .inflight = infl};
  int64_t n[4] = {0};
  expect(pipe_balance_split(&b, n) && n[0] == 1 && n[1] == 1 && n[2] == 2 && n[3] == 1,
         "interleaved balance: [1, 1, 2, 1], the layer off the slowest stage's chunks");
  fprintf(stderr, "interleaved balance by hand: [%lld, %lld, %lld, %lld]\n", (long long)n[0], (long long)n[1],
          (long long)n[2], (long long)n[3]);
}

int main(void) {
  check_sums_in_place();
  check_layout();
  check_balance();
  /* tiny: 5 layers ([2, 3]: per stage), 6 ([1, 2, 2, 1]: per virtual stage), 10 at pp 4 */
  const FeDefine tiny5[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "5"}};
  const FeDefine tiny6[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "6"}};
  const FeDefine tiny10[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "10"}};
  static const Plan8 p5[] = {{2, 1, 1, 2, 2, {2, 3}}, {2, 1, 2, 4, 2, {3, 2}}, {2, 1, 1, 2, 0, {0}}};
  static const Plan8 p6[] = {{2, 1, 1, 4, 4, {1, 2, 2, 1}}, {2, 2, 1, 2, 4, {1, 2, 2, 1}}, {2, 1, 2, 2, 4, {2, 1, 1, 2}},
                             {2, 1, 1, 2, 4, {1, 1, 3, 1}}};
  static const Plan8 p10[] = {{4, 1, 1, 4, 8, {1, 1, 2, 1, 1, 2, 1, 1}}, {4, 1, 1, 4, 4, {2, 3, 3, 2}}};
  run("tiny, 5 layers", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/tiny.model", tiny5, 4, 8, 8, 256, p5, 3);
  run("tiny, 6 layers", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/tiny.model", tiny6, 4, 8, 8, 256, p6, 4);
  run("tiny, 10 layers", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/tiny.model", tiny10, 4, 8, 8, 256, p10, 2);
  const FeDefine llama[] = {{"vocab", "128"}, {"seq", "8"},      {"d", "32"},  {"heads", "4"}, {"precision", "f32"},
                            {"kv_heads", "2"}, {"layers", "6"}, {"ffn", "48"}};
  static const Plan8 pl[] = {{2, 1, 1, 2, 4, {1, 2, 2, 1}}, {2, 2, 1, 2, 2, {2, 4}}};
  run("Llama shaped, 6 layers", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/llama3-8b.model", llama, 8, 8, 8, 128, pl, 2);
  /* with ZeRO-3 (each stage's chunks stored split over dp, gathered in its loops), ZeRO-2 and full recompute */
  const FeDefine tz3[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "6"}, {"zero", "3"}};
  const FeDefine trc[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "6"}, {"recompute", "full"}};
  const FeDefine lz2[] = {{"vocab", "128"}, {"seq", "8"},      {"d", "32"},  {"heads", "4"}, {"precision", "f32"},
                          {"kv_heads", "2"}, {"layers", "6"}, {"ffn", "48"}, {"zero", "2"}};
  const FeDefine lz3[] = {{"vocab", "128"}, {"seq", "8"},      {"d", "32"},  {"heads", "4"}, {"precision", "f32"},
                          {"kv_heads", "2"}, {"layers", "6"}, {"ffn", "48"}, {"zero", "3"}};
  /* (ZeRO: dp 2, per virtual stage, per stage ([2, 4]: chunks [1, 2 | 1, 2]) and balanced) */
  static const Plan8 pz[] = {{2, 2, 1, 2, 4, {1, 2, 2, 1}}, {2, 2, 1, 2, 2, {2, 4}}, {2, 2, 1, 2, 0, {0}}},
                     pr[] = {{2, 1, 1, 4, 2, {2, 4}}};
  run("tiny, zero 3, 6 layers", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/tiny.model", tz3, 5, 8, 8, 256, pz, 3);
  run("tiny, recompute full, 6 layers", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/tiny.model", trc, 5, 8, 8, 256, pr, 1);
  /* ZeRO-1: the chunks' rows of the whole stored f32 stacks are views (check_shape; main: copies of the stage's weights) */
  const FeDefine lz1[] = {{"vocab", "128"}, {"seq", "8"},      {"d", "32"},  {"heads", "4"}, {"precision", "f32"},
                          {"kv_heads", "2"}, {"layers", "6"}, {"ffn", "48"}, {"zero", "1"}};
  run("Llama shaped, zero 1, 6 layers", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/llama3-8b.model", lz1, 9, 8, 8, 128, pz, 1);
  run("Llama shaped, zero 2, 6 layers", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/llama3-8b.model", lz2, 9, 8, 8, 128, pz, 3);
  run("Llama shaped, zero 3, 6 layers", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/llama3-8b.model", lz3, 9, 8, 8, 128, pz, 3);
  const FeDefine tbf[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "6"}, {"precision", "bf16"}};
  static const Plan8 pb[] = {{2, 1, 1, 4, 4, {1, 2, 2, 1}}};
  run("tiny, bf16 (CUDA target), 6 layers", TARGET_CUDA, TOL_BF16, SHARDC_MODELS_DIR "/tiny.model", tbf, 5, 8, 8, 256, pb, 1);
  const FeDefine tbz3[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "6"}, {"precision", "bf16"}, {"zero", "3"}};
  run("tiny, bf16 (CUDA target), zero 3, 6 layers", TARGET_CUDA, TOL_BF16, SHARDC_MODELS_DIR "/tiny.model", tbz3, 6, 8, 8, 256, pz, 1);
  /* ZeRO-3 with a layer's gathers coalesced (passes/zero_coalesce.c: one all-gather a loop, tb_check_zero_pp) */
  const FeDefine tz3c[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "6"}, {"zero", "3"}, {"coalesce", "on"}};
  run("tiny, zero 3, coalesce on, 6 layers", TARGET_CPU, TOL, SHARDC_MODELS_DIR "/tiny.model", tz3c, 6, 8, 8, 256, pz, 3);
  const FeDefine tbz3c[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "6"}, {"precision", "bf16"}, {"zero", "3"},
                            {"coalesce", "on"}};
  run("tiny, bf16 (CUDA target), zero 3, coalesce on, 6 layers", TARGET_CUDA, TOL_BF16, SHARDC_MODELS_DIR "/tiny.model", tbz3c, 7,
      8, 8, 256, pz, 1);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  fprintf(stderr, "the interleaved schedule with uneven virtual stages equals the single rank\n");
  return 0;
}
