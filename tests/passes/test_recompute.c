/* tests/passes/test_recompute.c — activation recompute (passes/recompute.c).
 *
 * For the tiny GPT and a Llama-shaped model (RMSNorm, SwiGLU, RoPE, GQA), each with 2 layers,
 * and the plans dp 1, dp 2, dp 4, tp 2, tp 2 + sp and dp 2 x tp 2 + sp (simulated ranks): the
 * whole pipeline runs with `recompute none`, `selective` and `full`, the three programs are
 * interpreted in fp64 for two AdamW steps on the same tokens, and after each step the loss, every
 * gradient and every updated parameter and optimizer state must be EXACTLY equal on every rank
 * (the recomputed values are the same ops on the same values in the same order). The pass must
 * also have done something: the forward loop saves fewer activations (full: only the block's
 * input) and the memory plan's activations at the peak drop, full < selective < none, for the tiny
 * GPT at its real size and a Llama-shaped model at d 256, seq 256.
 *
 * Column slices (every mode, `none` included): the tiny GPT's forward saves its fused QKV once
 * instead of the three slices q, k, v, and the backward re-slices it; the program is interpreted
 * against the same pipeline without the recompute pass (before that change), bit for bit, for
 * dp 1, tp 2 and tp 2 + sp.
 *
 * Fused unaries (CUDA target, `none` included): the Llama shape's silu(g) is recomputed in the backward
 * (one stack fewer saved, a silu in the backward loop), bit for bit against the CUDA program without
 * the recompute pass; the CPU target saves it.
 *
 * GEMM epilogues (CUDA target, the tiny GPT): selective keeps the bias and residual adds a GEMM's epilogue stores
 * instead of the GEMM's own output (every target: the backward recomputes no add, the epilogues on or off), so the
 * forward keeps its epilogues and the backward its DGELU ones; full recomputes GELU's pre-activation before the GEMM
 * whose epilogue computes its backward; both bit for bit against none.
 */
#include <stdio.h>
#include <string.h>

#include "diag.h"
#include "frontend.h"
#include "interp.h"
#include "memplan.h"
#include "passes.h"
#include "pipeline.h"
#include "tb.h"

#define MAXDEF 24

static int failures; /* CHECK (tests/check.h, through tb.h) counts here */

static const char *const modes[3] = {"none", "selective", "full"};
static Target compile_target = TARGET_CPU; /* the target compile_opt compiles for */
static unsigned compile_no_fuse;           /* ... and its Module.no_fuse (shardc --no-fuse) */

/* batch: the logical sequences per step (0: the model's own micro_batch and batch). */
static Module *compile_opt(Arena *a, const char *path, const FeDefine *defs, int ndefs, int dp, int tp, bool sp,
                           const char *mode, int64_t batch, bool skip_recompute);
static Module *compile(Arena *a, const char *path, const FeDefine *defs, int ndefs, int dp, int tp, bool sp,
                       const char *mode, int64_t batch) {
  return compile_opt(a, path, defs, ndefs, dp, tp, sp, mode, batch, false);
}

/* ... every pass but recompute when skip_recompute */
static Module *compile_opt(Arena *a, const char *path, const FeDefine *defs, int ndefs, int dp, int tp, bool sp,
                           const char *mode, int64_t batch, bool skip_recompute) {
  FeDefine d[MAXDEF];
  int n = 0;
  char sdp[16], stp[16], smb[16], sb[16];
  for (int i = 0; i < ndefs; i++) d[n++] = defs[i];
  snprintf(sdp, sizeof sdp, "%d", dp);
  snprintf(stp, sizeof stp, "%d", tp);
  d[n++] = (FeDefine){"dp", sdp};
  d[n++] = (FeDefine){"tp", stp};
  d[n++] = (FeDefine){"sp", sp ? "on" : "off"};
  d[n++] = (FeDefine){"recompute", mode};
  snprintf(smb, sizeof smb, "%lld", (long long)(batch / dp));
  snprintf(sb, sizeof sb, "%lld", (long long)batch); /* the global batch: micro_batch x dp, no accumulation */
  if (batch) {
    d[n++] = (FeDefine){"micro_batch", smb};
    d[n++] = (FeDefine){"batch", sb};
  }
  d[n++] = (FeDefine){"cross_node_tp", "on"};
  FeOptions o = {.defines = d, .ndefines = n, .world = dp * tp};
  Module *m = fe_compile(a, path, &o);
  if (!m) return NULL;
  m->target = compile_target;
  m->no_fuse = compile_no_fuse;
  PipelineOptions po = {.verify = true};
  if (!skip_recompute) return pipeline_run(m, &po) ? m : NULL;
  const char *names[64];
  pipeline_pass_names(names, 64);
  for (int i = 0; names[i]; i++)
    if (strcmp(names[i], "recompute") && !pipeline_run_pass(m, names[i], &po)) return NULL;
  return m;
}

/* Stacked outputs of the forward loop (the activations it saves for the backward) and the
 * largest number of elements any of them holds per iteration. */
static int saved(const Module *m, int64_t *largest) {
  int k = 0;
  *largest = 0;
  for (int i = 0; i < m->graph->nnodes; i++) {
    const Node *r = m->graph->nodes[i];
    if (r->op != OP_REPEAT || r->a.reverse) continue;
    for (int o = r->a.ncarry; o < r->nout; o++) {
      int64_t e = ir_numel(&r->out[o]->shape) / r->a.count;
      if (e > *largest) *largest = e;
      k++;
    }
  }
  return k;
}


/* Every named result and state of ref, on every rank, bit for bit in p. Returns tensors compared. */
static int compare_exact(const Graph *ref, const Interp *ri, const Interp *pi, const char *what) {
  int checked = 0;
  for (int i = 0; i < ref->nresults; i++) {
    const char *name = ref->result_names ? ref->result_names[i] : NULL;
    if (!name) continue;
    for (int r = 0; r < interp_nranks(ri); r++) {
      const Tensor *a = interp_get(ri, r, name), *b = interp_get(pi, r, name);
      if (!a) continue;
      CHECK(b && ir_shape_eq(&a->shape, &b->shape), "%s: '%s' missing or reshaped on rank %d", what, name, r);
      if (!b || !ir_shape_eq(&a->shape, &b->shape)) continue;
      int64_t n = ir_numel(&a->shape), bad = 0;
      for (int64_t k = 0; k < n; k++) bad += memcmp(&a->data[k], &b->data[k], sizeof(double)) != 0;
      CHECK(bad == 0, "%s: '%s' differs on rank %d at %lld of %lld elements", what, name, r, (long long)bad,
             (long long)n);
      checked++;
    }
  }
  return checked;
}

static void equal_programs(const char *label, const char *path, const FeDefine *defs, int ndefs, int64_t B, int64_t S,
                           int64_t V) {
  static const struct {
    int dp, tp;
    bool sp;
  } plans[] = {{1, 1, false}, {2, 1, false}, {4, 1, false}, {1, 2, false}, {1, 2, true}, {2, 2, true}};
  Tensor tok = tb_randint(tb_shape(2, (int)B, (int)S), 201, 0, V);
  Tensor tgt = tb_randint(tb_shape(2, (int)B, (int)S), 202, 0, V);
  for (size_t p = 0; p < sizeof plans / sizeof plans[0]; p++) {
    Arena ar[3];
    Module *m[3];
    Interp *it[3];
    int nsaved[3];
    int64_t big[3];
    char what[96];
    snprintf(what, sizeof what, "%s dp %d x tp %d%s", label, plans[p].dp, plans[p].tp, plans[p].sp ? " sp" : "");
    bool ok = true;
    for (int k = 0; k < 3; k++) {
      arena_init(&ar[k]);
      m[k] = compile(&ar[k], path, defs, ndefs, plans[p].dp, plans[p].tp, plans[p].sp, modes[k], B);
      CHECK(m[k], "%s recompute %s: does not compile", what, modes[k]);
      ok = ok && m[k];
    }
    if (ok) {
      for (int k = 0; k < 3; k++) {
        nsaved[k] = saved(m[k], &big[k]);
        it[k] = interp_new(m[k]->graph, m[k]->mesh, 7);
      }
      CHECK(nsaved[2] == 1, "%s: full recompute saves %d activations per layer, not just the block's input", what,
             nsaved[2]);
      CHECK(nsaved[1] < nsaved[0] && nsaved[1] > nsaved[2], "%s: saved activations none %d, selective %d, full %d",
             what, nsaved[0], nsaved[1], nsaved[2]);
      int checked = 0;
      for (int step = 1; step <= 2; step++) {
        for (int k = 0; k < 3; k++) {
          tb_feed_step(it[k], &tok, &tgt, step);
          CHECK(interp_step(it[k]), "%s recompute %s: interpreter error at step %d", what, modes[k], step);
        }
        for (int k = 1; k < 3; k++) {
          char w2[128];
          snprintf(w2, sizeof w2, "%s recompute %s step %d", what, modes[k], step);
          checked += compare_exact(m[0]->graph, it[0], it[k], w2);
        }
      }
      CHECK(checked >= 20, "%s: only %d tensors compared", what, checked);
      fprintf(stderr, "  %-44s saved per layer: none %2d, selective %2d, full %d; %d tensors bit-identical\n", what,
              nsaved[0], nsaved[1], nsaved[2], checked);
      for (int k = 0; k < 3; k++) interp_free(it[k]);
    }
    for (int k = 0; k < 3; k++) arena_free(&ar[k]);
  }
  tensor_free(&tok);
  tensor_free(&tgt);
}

/* Whether the forward loop saves a stack of rows w wide. */
static bool saves_row(const Module *m, int64_t w) {
  for (int i = 0; i < m->graph->nnodes; i++) {
    const Node *r = m->graph->nodes[i];
    if (r->op != OP_REPEAT || r->a.reverse) continue;
    for (int o = r->a.ncarry; o < r->nout; o++)
      if (r->out[o]->shape.dim[r->out[o]->shape.rank - 1] == w) return true;
  }
  return false;
}

/* The column slices: the forward saves the fused QKV [.., 3d] instead of q, k, v (two stacks fewer, the
 * widest saved row 3d), bit-identical to the program without the recompute pass. */
static void column_saves(const char *path, const FeDefine *defs, int ndefs, int64_t B, int64_t S, int64_t V,
                         int64_t d) {
  static const struct {
    int tp;
    bool sp;
  } plans[] = {{1, false}, {2, false}, {2, true}};
  Tensor tok = tb_randint(tb_shape(2, (int)B, (int)S), 301, 0, V);
  Tensor tgt = tb_randint(tb_shape(2, (int)B, (int)S), 302, 0, V);
  for (size_t p = 0; p < sizeof plans / sizeof plans[0]; p++) {
    Arena ar[2];
    Module *m[2];
    char what[64];
    snprintf(what, sizeof what, "tiny column saves tp %d%s", plans[p].tp, plans[p].sp ? " sp" : "");
    for (int k = 0; k < 2; k++) {
      arena_init(&ar[k]);
      m[k] = compile_opt(&ar[k], path, defs, ndefs, 1, plans[p].tp, plans[p].sp, "none", B, k == 0);
      CHECK(m[k], "%s: does not compile (%s)", what, k ? "with recompute" : "without");
    }
    if (m[0] && m[1]) {
      int64_t big[2];
      int n0 = saved(m[0], &big[0]), n1 = saved(m[1], &big[1]);
      (void)S;
      int64_t w = 3 * d / plans[p].tp; /* the rank's fused QKV row */
      CHECK(n1 == n0 - 2 && saves_row(m[1], w) && !saves_row(m[0], w),
            "%s: saved %d stacks (want %d), a %lld-wide one: %d (before: %d)", what, n1, n0 - 2, (long long)w,
            saves_row(m[1], w), saves_row(m[0], w));
      Interp *it[2] = {interp_new(m[0]->graph, m[0]->mesh, 7), interp_new(m[1]->graph, m[1]->mesh, 7)};
      int checked = 0;
      for (int step = 1; step <= 2; step++) {
        for (int k = 0; k < 2; k++) {
          tb_feed_step(it[k], &tok, &tgt, step);
          CHECK(interp_step(it[k]), "%s: interpreter error at step %d", what, step);
        }
        char w2[96];
        snprintf(w2, sizeof w2, "%s step %d", what, step);
        checked += compare_exact(m[0]->graph, it[0], it[1], w2);
      }
      CHECK(checked >= 20, "%s: only %d tensors compared", what, checked);
      fprintf(stderr, "  %-44s saved per layer %d -> %d stacks; %d tensors bit-identical\n", what, n0, n1, checked);
      interp_free(it[0]);
      interp_free(it[1]);
    }
    for (int k = 0; k < 2; k++) arena_free(&ar[k]);
  }
  tensor_free(&tok);
  tensor_free(&tgt);
}

/* How many SILU nodes the backward loops' bodies hold. */
static int backward_silus(const Module *m) {
  int k = 0;
  for (int i = 0; i < m->graph->nnodes; i++) {
    const Node *r = m->graph->nodes[i];
    for (int j = 0; r->op == OP_REPEAT && r->a.reverse && j < r->body->nnodes; j++) k += r->body->nodes[j]->op == OP_SILU;
  }
  return k;
}

/* The CUDA target under `none`: SwiGLU's silu(g), read in the backward only by a mul beside silu_bwd(g, .), is
 * recomputed there from g (passes/recompute.c fused_unary: its clone joins their fusion group, which reads g
 * anyway): the forward saves one stack fewer, the backward holds a silu, and the program is bit-identical to
 * the one without the recompute pass. The CPU target (node by node: a recompute would be one more pass) saves it. */
static void cuda_unary(const char *path, const FeDefine *defs, int ndefs, int64_t B, int64_t V) {
  Tensor tok = tb_randint(tb_shape(2, (int)B, 8), 311, 0, V);
  Tensor tgt = tb_randint(tb_shape(2, (int)B, 8), 312, 0, V);
  Arena ar[3];
  Module *m[3];
  for (int k = 0; k < 3; k++) { /* CUDA without the pass, CUDA, CPU */
    arena_init(&ar[k]);
    compile_target = k < 2 ? TARGET_CUDA : TARGET_CPU;
    m[k] = compile_opt(&ar[k], path, defs, ndefs, 1, 1, false, "none", B, k == 0);
    CHECK(m[k], "llama none (%d): does not compile", k);
  }
  compile_target = TARGET_CPU;
  if (m[0] && m[1] && m[2]) {
    int64_t big;
    int n0 = saved(m[0], &big), n1 = saved(m[1], &big), n2 = saved(m[2], &big);
    int s0 = backward_silus(m[0]), s1 = backward_silus(m[1]), s2 = backward_silus(m[2]);
    CHECK(n1 == n0 - 1 && s0 == 0 && s1 == 1, "llama none, CUDA: saved %d -> %d stacks, backward silus %d -> %d", n0, n1, s0, s1);
    CHECK(n2 == n0 && s2 == 0, "llama none, CPU: saved %d stacks (CUDA before: %d), backward silus %d", n2, n0, s2);
    Interp *it[2] = {interp_new(m[0]->graph, m[0]->mesh, 7), interp_new(m[1]->graph, m[1]->mesh, 7)};
    int checked = 0;
    for (int step = 1; step <= 2; step++) {
      for (int k = 0; k < 2; k++) {
        tb_feed_step(it[k], &tok, &tgt, step);
        CHECK(interp_step(it[k]), "llama none, CUDA: interpreter error at step %d", step);
      }
      checked += compare_exact(m[0]->graph, it[0], it[1], step == 1 ? "llama none CUDA step 1" : "llama none CUDA step 2");
    }
    CHECK(checked >= 20, "llama none, CUDA: only %d tensors compared", checked);
    fprintf(stderr, "  %-44s saved per layer %d -> %d stacks; %d tensors bit-identical\n", "llama none, CUDA (silu recomputed)", n0,
            n1, checked);
    for (int k = 0; k < 2; k++) interp_free(it[k]);
  }
  for (int k = 0; k < 3; k++) arena_free(&ar[k]);
  tensor_free(&tok);
  tensor_free(&tgt);
}

/* The layers' forward (!reverse) or backward loop: its GEMMs with an epilogue (dgelu: GELU's backward's, else the
 * forward's bias / GELU / residual), or its adds. */
static int loop_count(const Module *m, bool reverse, int what) {
  int k = 0;
  for (int i = 0; i < m->graph->nnodes; i++) {
    const Node *r = m->graph->nodes[i];
    for (int j = 0; r->op == OP_REPEAT && r->a.reverse == reverse && j < r->body->nnodes; j++) {
      const Node *n = r->body->nodes[j];
      if (what == 2) k += n->op == OP_ADD;
      else k += n->op == OP_MATMUL && n->a.epilogue > 0 && epi_dgelu(n->a.epilogue) == (what == 1);
    }
  }
  return k;
}

/* The forward loop's saved bytes (its stacked outputs, all layers). */
static int64_t saved_bytes(const Module *m) {
  int64_t b = 0;
  for (int i = 0; i < m->graph->nnodes; i++) {
    const Node *r = m->graph->nodes[i];
    for (int o = r->a.ncarry; r->op == OP_REPEAT && !r->a.reverse && o < r->nout; o++)
      b += ir_numel(&r->out[o]->shape) * ir_dtype_size(r->out[o]->dtype);
  }
  return b;
}

/* The CUDA target (the tiny GPT: biases, GELU): selective keeps a GEMM's bias and residual adds (what its epilogue
 * stores) rather than its own output, as many bytes, so that the forward keeps every GEMM epilogue it has under none
 * and the backward recomputes no add (as with the epilogues off: the recompute pass's choice); full recomputes GELU's
 * pre-activation before the GEMM of the incoming gradient (its DGELU epilogue) and the recomputed forward keeps
 * its epilogues. Each bit for bit against none in the interpreter. */
static void cuda_epilogues(const char *path, const FeDefine *defs, int ndefs, int64_t B, int64_t V) {
  Tensor tok = tb_randint(tb_shape(2, (int)B, 8), 321, 0, V);
  Tensor tgt = tb_randint(tb_shape(2, (int)B, 8), 322, 0, V);
  enum { NONE, SEL, FULL, SEL_OFF, NM };
  static const char *const mode[NM] = {"none", "selective", "full", "selective"};
  Arena ar[NM];
  Module *m[NM];
  bool ok = true;
  compile_target = TARGET_CUDA;
  for (int k = 0; k < NM; k++) {
    arena_init(&ar[k]);
    compile_no_fuse = k == SEL_OFF ? 1u << FUSE_EPILOGUE : 0;
    m[k] = compile(&ar[k], path, defs, ndefs, 1, 1, false, mode[k], B);
    CHECK(m[k], "tiny CUDA recompute %s%s: does not compile", mode[k], k == SEL_OFF ? " (epilogues off)" : "");
    ok = ok && m[k];
  }
  compile_target = TARGET_CPU;
  compile_no_fuse = 0;
  if (ok) {
    int fwd[NM], dg[NM], bepi[NM], adds[NM];
    for (int k = 0; k < NM; k++)
      fwd[k] = loop_count(m[k], false, 0), dg[k] = loop_count(m[k], true, 1), bepi[k] = loop_count(m[k], true, 0),
      adds[k] = loop_count(m[k], true, 2);
    CHECK(fwd[NONE] >= 3 && dg[NONE] >= 1, "tiny CUDA none: %d forward epilogue GEMMs, %d DGELU ones", fwd[NONE], dg[NONE]);
    CHECK(fwd[SEL] == fwd[NONE] && dg[SEL] == dg[NONE], "tiny CUDA selective: %d forward epilogue GEMMs (none: %d), %d DGELU (none: %d)",
          fwd[SEL], fwd[NONE], dg[SEL], dg[NONE]);
    /* (no add recomputed: the recompute pass decides it, the epilogues on or off) */
    CHECK(adds[SEL] == adds[NONE] && adds[SEL_OFF] == adds[NONE], "tiny CUDA selective: the backward's adds %d (none: %d; with "
          "the epilogues off %d)", adds[SEL], adds[NONE], adds[SEL_OFF]);
    CHECK(saved_bytes(m[SEL]) == saved_bytes(m[SEL_OFF]), "tiny CUDA selective: saves %lld B, %lld B with the epilogues off",
          (long long)saved_bytes(m[SEL]), (long long)saved_bytes(m[SEL_OFF]));
    /* (full runs the forward's GEMMs again but its last, whose output only the residual sum reads) */
    CHECK(dg[FULL] == dg[NONE] && bepi[FULL] - bepi[NONE] == fwd[NONE] - 1, "tiny CUDA full: %d DGELU GEMMs (none: %d), %d other "
          "epilogue GEMMs in the backward (none: %d; the forward's: %d)", dg[FULL], dg[NONE], bepi[FULL], bepi[NONE], fwd[NONE]);
    Interp *it[3];
    for (int k = 0; k < 3; k++) it[k] = interp_new(m[k]->graph, m[k]->mesh, 7);
    int checked = 0;
    for (int step = 1; step <= 2; step++) {
      for (int k = 0; k < 3; k++) {
        tb_feed_step(it[k], &tok, &tgt, step);
        CHECK(interp_step(it[k]), "tiny CUDA recompute %s: interpreter error at step %d", mode[k], step);
      }
      checked += compare_exact(m[NONE]->graph, it[NONE], it[SEL], "tiny CUDA selective");
      checked += compare_exact(m[NONE]->graph, it[NONE], it[FULL], "tiny CUDA full");
    }
    CHECK(checked >= 40, "tiny CUDA epilogues: only %d tensors compared", checked);
    fprintf(stderr, "  %-44s forward epilogue GEMMs %d / %d / %d (full: recomputed), DGELU %d / %d / %d; %d tensors "
            "bit-identical\n", "tiny CUDA none / selective / full", fwd[NONE], fwd[SEL], bepi[FULL] - bepi[NONE], dg[NONE], dg[SEL],
            dg[FULL], checked);
    for (int k = 0; k < 3; k++) interp_free(it[k]);
  }
  for (int k = 0; k < NM; k++) arena_free(&ar[k]);
  tensor_free(&tok);
  tensor_free(&tgt);
}

/* The memory plan's activations at the peak: full < selective < none. */
static void memory_drops(const char *label, const char *path, const FeDefine *defs, int ndefs, int tp) {
  int64_t act[3], peak[3];
  for (int k = 0; k < 3; k++) {
    Arena a;
    arena_init(&a);
    Module *m = compile(&a, path, defs, ndefs, 1, tp, tp > 1, modes[k], 0);
    CHECK(m && m->memplan, "%s recompute %s: does not compile", label, modes[k]);
    act[k] = m && m->memplan ? m->memplan->by_class[MEM_ACT] : 0;
    peak[k] = m && m->memplan ? m->memplan->peak : 0;
    arena_free(&a);
  }
  CHECK(act[2] < act[1] && act[1] < act[0], "%s: activations none %lld, selective %lld, full %lld B", label,
         (long long)act[0], (long long)act[1], (long long)act[2]);
  CHECK(peak[2] < peak[1] && peak[1] < peak[0], "%s: peaks none %lld, selective %lld, full %lld B", label,
         (long long)peak[0], (long long)peak[1], (long long)peak[2]);
  fprintf(stderr, "  %-44s activations at the peak: none %.2f MiB, selective %.2f MiB, full %.2f MiB\n", label,
          act[0] / 1048576.0, act[1] / 1048576.0, act[2] / 1048576.0);
}

int main(void) {
  const char *tiny = SHARDC_MODELS_DIR "/tiny.model", *llama = SHARDC_MODELS_DIR "/llama3-8b.model";
  const FeDefine tiny_small[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "2"}};
  equal_programs("tiny", tiny, tiny_small, 4, 4, 8, 256);
  column_saves(tiny, tiny_small, 4, 4, 8, 256, 32);
  const FeDefine llama_small[] = {{"vocab", "128"}, {"seq", "8"}, {"d", "32"},          {"heads", "4"},
                                  {"kv_heads", "2"}, {"layers", "2"}, {"ffn", "48"}, {"precision", "f32"}};
  equal_programs("llama", llama, llama_small, 8, 4, 8, 128);
  cuda_unary(llama, llama_small, 8, 4, 128);
  cuda_epilogues(tiny, tiny_small, 4, 4, 256);
  const FeDefine tiny_real[] = {{"layers", "2"}};
  memory_drops("tiny (2 layers)", tiny, tiny_real, 1, 1);
  memory_drops("tiny (2 layers) tp 2 sp", tiny, tiny_real, 1, 2);
  const FeDefine tiny_accum[] = {{"layers", "2"}, {"batch", "16"}}; /* 2 micro-steps of 8: the layers' loops in a region */
  memory_drops("tiny (2 layers) accum 2", tiny, tiny_accum, 2, 1);
  /* Llama-3-8B's real parameters make the optimizer update the step's peak; a narrower model
   * (d 256, vocab 1024) at seq 256 x 4 sequences puts the peak in the backward, as at scale */
  const FeDefine llama_mid[] = {{"vocab", "1024"}, {"d", "256"},         {"heads", "8"},      {"kv_heads", "4"},
                                {"ffn", "704"},    {"layers", "2"},      {"seq", "256"},      {"micro_batch", "4"},
                                {"batch", "4"},    {"precision", "f32"}};
  memory_drops("llama (2 layers, d 256, seq 256)", llama, llama_mid, 10, 1);
  memory_drops("llama (2 layers, d 256, seq 256) tp 2 sp", llama, llama_mid, 10, 2);
  if (failures) {
    fprintf(stderr, "test_recompute: %d check(s) failed\n", failures);
    return 1;
  }
  fprintf(stderr, "test_recompute: selective and full recompute are bit-identical to none, and save memory\n");
  return 0;
}
