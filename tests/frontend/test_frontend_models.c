/* tests/frontend/test_frontend_models.c — the bundled models and topologies compile; the language's
 * features lower as documented; pass_inline leaves every PARAM in the top graph and no CALL.
 *
 * usage: test_frontend_models MODELS_DIR
 * Exact checks (integers): parameter counts, shapes, names, plan/recipe fields.
 * Quantities in bytes / FLOP/s / seconds are compared with a relative tolerance of 1e-12.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "frontend.h"
#include "passes.h"
#include "print.h"
#include "../check.h" /* CHECK */

static int failures;

static bool close_to(double a, double b) { return fabs(a - b) <= 1e-12 * fabs(b); }

static const char *models_dir;

static Module *compile(Arena *a, const char *file, const FeDefine *defs, int nd, const char *topo) {
  const char *dirs[] = {models_dir};
  FeOptions o = {dirs, 1, defs, nd, topo, 0, NULL, false};
  const char *path = arena_printf(a, "%s/%s", models_dir, file);
  const char *tp = topo ? arena_printf(a, "%s/topo/%s", models_dir, topo) : NULL;
  o.topology_file = tp;
  return fe_compile(a, path, &o);
}

static Module *compile_src(Arena *a, const char *src) {
  const char *dirs[] = {models_dir};
  FeOptions o = {dirs, 1, NULL, 0, NULL, 0, NULL, false};
  return fe_compile_source(a, "test.model", src, &o);
}

static int count_op(const Graph *g, OpKind op, bool deep) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++) {
    n += g->nodes[i]->op == op;
    if (deep && g->nodes[i]->body) n += count_op(g->nodes[i]->body, op, true);
  }
  return n;
}

static const Node *find_param(const Graph *g, const char *name) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_PARAM && strcmp(g->nodes[i]->a.name, name) == 0) return g->nodes[i];
  return NULL;
}

/* Compiles, inlines and verifies; checks the inlined form's invariants. */
static Module *full(Arena *a, const char *file, const FeDefine *defs, int nd, const char *topo) {
  Module *m = compile(a, file, defs, nd, topo);
  CHECK(m, "%s does not compile", file);
  if (!m) return NULL;
  int64_t before = ir_param_count(m);
  CHECK(ir_verify(m->graph, "frontend"), "%s: verifier rejects the front end's graph", file);
  CHECK(pass_inline(m), "%s: pass_inline failed", file);
  CHECK(ir_verify(m->graph, "inline"), "%s: verifier rejects the inlined graph", file);
  CHECK(count_op(m->graph, OP_CALL, true) == 0, "%s: CALL left after inlining", file);
  CHECK(count_op(m->graph, OP_PARAM, true) == count_op(m->graph, OP_PARAM, false),
        "%s: PARAM left inside a region after inlining", file);
  CHECK(ir_param_count(m) == before, "%s: inlining changed the parameter count %lld -> %lld", file,
        (long long)before, (long long)ir_param_count(m));
  CHECK(m->graph->nresults == 1 && strcmp(m->graph->result_names[0], "loss") == 0, "%s: no loss result", file);
  return m;
}

static void test_models(void) {
  Arena a;
  arena_init(&a);
  Module *m = full(&a, "gpt2-124m.model", NULL, 0, NULL);
  if (m) {
    CHECK(ir_param_count(m) == 124475904LL, "GPT-2 124M: %lld parameters, want 124,475,904", (long long)ir_param_count(m));
    CHECK(count_op(m->graph, OP_REPEAT, false) == 1, "GPT-2: one repeat region");
    const Node *p = find_param(m->graph, "blocks.attention.w_qkv");
    CHECK(p && p->out[0]->shape.rank == 3 && p->out[0]->shape.dim[0] == 12 && p->out[0]->shape.dim[1] == 768 &&
              p->out[0]->shape.dim[2] == 2304,
          "GPT-2: blocks.attention.w_qkv is not f32[12, 768, 2304]");
    CHECK(find_param(m->graph, "blocks.layernorm_2.w") && find_param(m->graph, "layernorm.b"),
          "GPT-2: layer instance names");
    p = find_param(m->graph, "wte");
    CHECK(p && p->out[0]->shape.dim[0] == 50304, "GPT-2: vocab padded to 50304");
    CHECK(m->recipe.micro_batch == 64 && m->recipe.batch == 512 && m->recipe.seq == 1024, "GPT-2 recipe sizes");
    CHECK(m->recipe.optimizer == OPT_ADAMW && close_to(m->recipe.lr, 6e-4) && close_to(m->recipe.beta2, 0.95) &&
              close_to(m->recipe.weight_decay, 0.1),
          "GPT-2 optimizer");
    CHECK(m->recipe.lr_schedule == LR_COSINE && m->recipe.warmup == 700 && close_to(m->recipe.min_lr, 6e-5),
          "GPT-2 lr schedule");
    CHECK(m->recipe.precision == PREC_BF16, "GPT-2 precision");
    CHECK(m->recipe.ckpt_every == 1000 && m->recipe.ckpt_keep == 3 && strcmp(m->recipe.ckpt_dir, "ckpt/gpt2-124m") == 0,
          "GPT-2 checkpoint");
    CHECK(m->recipe.data && strstr(m->recipe.data, "fineweb_train") && m->recipe.val, "GPT-2 data");
    CHECK(m->plan.dp == 0 && m->plan.zero == 1, "GPT-2 plan (dp auto, zero 1)");
    const Value *tok = NULL;
    for (int i = 0; i < m->graph->nnodes; i++)
      if (m->graph->nodes[i]->op == OP_INPUT) tok = tok ? tok : m->graph->nodes[i]->out[0];
    /* the logical graph holds every data-parallel replica's micro-batch: 64 x dp 8 on a p4d node */
    CHECK(m->mesh && m->mesh->dim[RT_AX_DP] == 8 && m->batch.micro == 64 && m->batch.global == 512,
          "GPT-2: dp auto on one p4d node is 8, got %d", m->mesh ? m->mesh->dim[RT_AX_DP] : 0);
    CHECK(tok && tok->dtype == DT_I32 && tok->shape.dim[0] == 64 * 8 && tok->shape.sym[0] == 0 &&
              tok->shape.sym[1] == 1,
          "GPT-2: tokens is i32[batch=64 x dp 8, seq=1024]");
  }
  m = full(&a, "llama3-8b.model", NULL, 0, NULL);
  if (m) {
    CHECK(ir_param_count(m) == 8030261248LL, "Llama-3-8B: %lld parameters, want 8,030,261,248",
          (long long)ir_param_count(m));
    CHECK(count_op(m->graph, OP_ROPE, true) == 2 && count_op(m->graph, OP_RMSNORM, true) == 3, "Llama ops");
    CHECK(m->plan.tp == 8 && m->plan.sp && m->plan.zero == 1 && m->plan.recompute == RECOMPUTE_SELECTIVE, "Llama plan");
  }
  m = full(&a, "tiny.model", NULL, 0, NULL);
  if (m) CHECK(m->topo.cpu_only && m->topo.devices_per_node == 2, "tiny: cpu topology");
  m = full(&a, "gpt3-175b.model", NULL, 0, NULL);
  if (m) {
    CHECK(count_op(m->graph, OP_REPEAT, false) == 1 && m->graph->nnodes < 40,
          "GPT-3: the 96 layers stay one region (%d top nodes)", m->graph->nnodes);
    CHECK(m->plan.schedule == SCHED_1F1B && m->plan.pp == 1 && m->plan.tp == 8 && m->batch.global == 1536 && m->batch.accum == 48, "GPT-3 plan");
    CHECK(m->topo.inter.kind == LINK_IB && m->topo.inter.count == 8 && close_to(m->topo.inter.bytes_per_s, 50e9),
          "GPT-3 topology: 8 x 400 Gbit/s InfiniBand");
  }
  arena_free(&a);
}

static void test_topologies(void) {
  static const char *const topos[] = {"p4d-x1.topo", "p4d-x4.topo", "p5.topo", "dgx-h100-superpod.topo", "t4x4.topo",
                                      "cpu.topo", "dgx-h100-x256.topo"};
  for (int i = 0; i < 7; i++) {
    Arena a;
    arena_init(&a);
    Module *m = compile(&a, "tiny.model", NULL, 0, topos[i]);
    CHECK(m && m->has_topology, "tiny.model with --topology %s", topos[i]);
    if (m) {
      const Topology *t = &m->topo;
      CHECK(t->nodes >= 1 && t->devices_per_node >= 1 && t->device_memory > 0 && t->intra.bytes_per_s > 0 &&
                t->inter.bytes_per_s > 0 && t->host_memory > 0 && t->hbm_bytes_per_s > 0,
            "%s: incomplete topology", topos[i]);
      if (i == 1) {
        CHECK(t->nodes == 4 && t->devices_per_node == 8 && strcmp(t->device, "a100_40g") == 0, "p4d-x4 shape");
        CHECK(close_to(t->device_memory, 40.0 * 1073741824.0) && close_to(t->peak_flops_bf16, 312e12) &&
                  close_to(t->hbm_bytes_per_s, 1555e9),
              "p4d-x4 device");
        CHECK(t->intra.kind == LINK_NVLINK && close_to(t->intra.bytes_per_s, 600e9) &&
                  close_to(t->intra.latency_s, 2e-6),
              "p4d-x4 NVLink");
        CHECK(t->inter.kind == LINK_EFA && t->inter.count == 4 && close_to(t->inter.bytes_per_s, 12.5e9) &&
                  close_to(t->inter.latency_s, 15e-6),
              "p4d-x4 EFA 4 x 100 Gbit/s");
        CHECK(close_to(t->host_memory, 1152.0 * 1073741824.0) && close_to(t->pcie_bytes_per_s, 32e9), "p4d-x4 host");
      }
      if (i == 5) CHECK(t->cpu_only && strcmp(t->device, "cpu") == 0 && t->intra.kind == LINK_SHM, "cpu.topo");
      if (i == 6)
        CHECK(t->nodes == 256 && t->devices_per_node == 8 && strcmp(t->device, "h100_80g") == 0 && t->inter.kind == LINK_IB,
              "dgx-h100-x256: 256 nodes of 8 H100s on InfiniBand");
    }
    arena_free(&a);
  }
}

static void test_defines(void) {
  Arena a;
  arena_init(&a);
  /* -D overrides of plan and recipe fields (the pipeline refusals: cases.txt pp_*, tests/passes/pp_plan.sh) */
  FeDefine d[] = {{"tp", "2"},           {"layers", "1"},   {"micro_batch", "2"},      {"lr", "1e-3"},
                  {"batch", "8"},        {"data", "x.bin"}, {"schedule", "1f1b"},      {"zero", "0"},
                  {"bucket", "50MiB"},   {"sp", "1"},       {"lr_schedule", "linear"}, {"seed", "7"},
                  {"precision", "f32"}};
  Module *m = full(&a, "gpt2-124m.model", d, 13, NULL);
  if (m) {
    CHECK(ir_param_count(m) == 124475904LL - 11 * 7087872LL, "-D layers=1: %lld parameters",
          (long long)ir_param_count(m));
    CHECK(m->plan.tp == 2 && m->plan.schedule == SCHED_1F1B && m->plan.zero == 0 && !m->plan.offload && m->plan.sp &&
              m->plan.bucket_bytes == 50 << 20,
          "-D plan fields");
    CHECK(m->recipe.micro_batch == 2 && m->batch.global == 8 && m->batch.accum == 1 && close_to(m->recipe.lr, 1e-3) && strcmp(m->recipe.data, "x.bin") == 0 &&
              m->recipe.lr_schedule == LR_LINEAR && m->recipe.seed == 7 && m->recipe.precision == PREC_F32,
          "-D recipe fields");
    const Value *tok = NULL;
    for (int i = 0; i < m->graph->nnodes && !tok; i++)
      if (m->graph->nodes[i]->op == OP_INPUT) tok = m->graph->nodes[i]->out[0];
    CHECK(tok && tok->shape.dim[0] == 2 * 4, "-D micro_batch binds batch (x dp 4 = 8 / tp 2)");
  }
  /* -D pp_layers: `pp N layers(balanced)` as one key (the plan search's confirmations), or even stages
   * in place of the file's `layers(..)` (llama3-405b.model: pp 16 layers(balanced)) */
  m = compile(&a, "llama3-405b.model", NULL, 0, NULL);
  CHECK(m && m->plan.pp == 16 && m->plan.tp == 8 && m->plan.stage_balanced && m->plan.zero == 1 &&
            ir_param_count(m) == 405853388800LL,
        "llama3-405b: tp 8, pp 16 layers(balanced), zero 1, 405,853,388,800 parameters (%lld)", m ? (long long)ir_param_count(m) : 0LL);
  FeDefine even[] = {{"pp", "2"}, {"pp_layers", "even"}}, bal[] = {{"pp", "2"}, {"pp_layers", "balanced"}};
  m = compile(&a, "llama3-405b.model", even, 2, NULL);
  CHECK(m && m->plan.pp == 2 && !m->plan.stage_balanced && m->plan.nstage_layers == 0, "-D pp_layers=even clears layers(balanced)");
  m = compile(&a, "tiny.model", bal, 2, NULL);
  CHECK(m && m->plan.pp == 2 && m->plan.stage_balanced && m->plan.stage_layers_loc.file &&
            diag_loc_is_cmdline(m->plan.stage_layers_loc) && m->plan.stage_layers_loc.line == 2,
        "-D pp_layers=balanced sets layers(balanced), located at its value");
  arena_free(&a);
}

/* Language features beyond the bundled models. */
static void test_language(void) {
  Arena a;
  arena_init(&a);
  Module *m = compile_src(&a,
                          "const width = 8\n"
                          "layer pair(x: [..., d], scale = 2) {\n"
                          "  param w : [d, d] init uniform(-0.1, 0.1)\n"
                          "  a, b = split(x @ w, [d / 2, d / 2], axis: -1)\n"
                          "  return a * scale, b - 1\n"
                          "}\n"
                          "layer ff(x: [b, s, d]) {\n"
                          "  u, v = pair(x, scale: 3)\n"
                          "  p, q = pair(x)\n"
                          "  return concat(u, v, axis: -1) + concat(p, q)\n"
                          "}\n"
                          "model lang {\n"
                          "  const seq = 4, n = 3\n"
                          "  input x : [batch, seq, width]\n"
                          "  h = x\n"
                          "  repeat 2 as enc {\n"
                          "    repeat n {\n"
                          "      h = ff(h); h = -h / 2\n"
                          "    }\n"
                          "    if n > 2 { h = h * 1.5 } else { h = h }\n"
                          "  }\n"
                          "  r = reshape(h, [-1, width])\n"
                          "  loss = mean(exp(r) + transpose(transpose(r)))\n"
                          "}\n");
  CHECK(m, "language test does not compile");
  if (m) {
    CHECK(pass_inline(m) && ir_verify(m->graph, "inline"), "language test: inline");
    const Node *p = find_param(m->graph, "enc.blocks.ff.pair_2.w");
    CHECK(p && p->out[0]->shape.rank == 4 && p->out[0]->shape.dim[0] == 2 && p->out[0]->shape.dim[1] == 3 &&
              p->out[0]->shape.dim[2] == 8,
          "nested repeats stack a param to [2, 3, 8, 8] under its dotted name");
    CHECK(p && p->a.init == INIT_UNIFORM && p->a.init_a == -0.1 && p->a.init_b == 0.1, "uniform init");
    CHECK(ir_param_count(m) == 2 * 3 * 2 * 64, "language test: %lld parameters", (long long)ir_param_count(m));
  }
  arena_free(&a);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODELS_DIR\n", argv[0]);
    return 2;
  }
  models_dir = argv[1];
  test_models();
  test_topologies();
  test_defines();
  test_language();
  if (failures || diag_errors()) {
    fprintf(stderr, "%d failures, %d diagnostics\n", failures, diag_errors());
    return 1;
  }
  printf("frontend models: ok\n");
  return 0;
}
