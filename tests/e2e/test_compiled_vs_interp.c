/* tests/e2e/test_compiled_vs_interp.c — the compiled trainer computes what the reference
 * interpreter computes.
 *
 * For each case: compile the .model (front end, passes, codegen to C, system compiler), run
 * the trainer for 10 AdamW steps with --dump-steps (every tensor after every step), and replay
 * the same inputs through the fp64 interpreter (ir/interp.c). Checked:
 *   step 1: the loss, every parameter gradient, and every updated parameter;
 *   steps 1..10: the loss trajectory.
 * Tolerances (the trainer computes in fp32, the interpreter in fp64):
 *   loss, step 1:  |rel| <= 1e-6   (a mean of fp32 log-softmaxes: fp32's unit roundoff is 6e-8;
 *                  seen: 1e-8)
 *   gradients:     ||g - g_ref|| / ||g_ref|| <= 1e-5 per tensor (fp32 GEMM accumulation over
 *                  B*T rows, layer norms and a causal softmax; seen: <= 6e-7)
 *   clipped gradients (Adam's m after step 1, (1 - b1) g): max |m - m_ref| <= R max |m_ref| per
 *                  tensor, R = 21u (u = 2^-24; the same fp32 sums seen elementwise against the
 *                  tensor's largest: <= 14u, llama's w_v; tiny 12u, on the emulated device 11u)
 *   parameters:    per weight, |p - p_ref| <= 2u |p_ref| + 16u lr_1 + st_adam_bound(lr_1, R G, |g_ref|,
 *                  eps) (G: the tensor's largest |g_ref|). The fp32 trainer rounds the initial weight
 *                  and the updated one (u |p| each; the interpreter keeps fp64), computes the update
 *                  lr (m^ / (sqrt(v^) + eps) + wd p) in 8 roundings or fewer of a value <= 2 lr, and
 *                  AdamW moves that update by st_adam_bound (st_compare.h, the bound cuda_multirank.sh
 *                  uses) when its gradient moves by R G: lr / eps amplifies a tiny gradient
 *                  difference where |g| ~ eps, and the bound says by how much. Before 2026-11-26 this
 *                  was 1e-3 lr_1 + 1e-7 flat, not derived. Seen: at most 0.94 of the bound (gpt2's
 *                  w_fc, its rounding); an eps * 1.5 nudge in rt_adamw fails all three cases (at
 *                  1.4 to 9.6 of the bound; the flat bound missed it in two)
 *   loss, 10 steps: |rel| <= 1e-6 (the fp32 rounding above, carried through 10 updates; seen 5e-8)
 *
 * With the argument `llvm` it checks the same three cases with the CPU kernels LLVM builds
 * (--cpu-kernels llvm, codegen/llvm_kernels.c: elementwise runs, norms, cross-entropy, AdamW) under
 * the same bounds, and that each trainer holds LLVM kernels (nm: shardc_llk*; 16 in each case). Their
 * e^x, tanh and sigmoid are the runtime's polynomial, their multiply-adds contracted otherwise: a
 * few ulps, within the fp32 roundings above. Seen (2026-11-26): gradients <= 5.3e-7, clipped
 * gradients <= 7.2e-7 of the largest (llama's w_v, 12u), parameters at most 0.94 of the bound;
 * 1.5 eps in the LLVM AdamW fails all three cases. About 6 s here, as the C kernels' run.
 *
 * With the argument `cuda` it checks the CUDA target instead: the same trainers compiled with
 * --target cuda run on the emulated device (SHARDRT_DEVICE=emu: the generated kernels compiled
 * for the host and run by the CPU emulator, cuBLASLt replaced by the CPU BLAS), in f32 with
 * the tolerances above, and in bf16 mixed precision against the interpreter running the same
 * bf16 program (it rounds every value to its dtype in fp64; the device rounds fp32 results, sums
 * in another order and keeps attention's probabilities in registers, so single bf16 ulps,
 * u = 2^-8, differ here and there and are carried forward):
 *   loss, step 1:   |rel| <= u / 8 (a mean over B*T positions averages the ulp flips out; seen 1e-5)
 *   gradients:      relative L2 <= 4u per tensor (seen 1.9u at worst)
 *   parameters:     AdamW's first step is about lr * sign(g), so a gradient within bf16 noise of
 *                   zero (|g| <= u max|g|, e.g. the key bias, whose exact gradient is 0) may
 *                   flip its weight's step: among the others at most 1% of a tensor's weights
 *                   may differ by more than 1e-3 lr + 1e-7
 *   loss, 10 steps: |rel| <= u / 4 (seen 1.5e-4)
 * The CUDA cases: tiny in f32 and bf16, the Llama shape in bf16 with the model's selective recompute and
 * with none, and tests/e2e/ewwide.model in f32 (12 learned affine maps: fusion groups of up to 19 nodes, one
 * kernel of 39 pointer arguments); in both Llama programs every silu is in a fusion group of 2 or more nodes and every
 * silu_bwd in one of 3 or more (SwiGLU's elementwise parts as one kernel over the GEMMs between them:
 * passes/fuse_order.c), so those kernels are what the interpreter is matched against.
 * On the CUDA target each case's layers' norms' backward add the residual gradient's carry in their kernel
 * (passes/fuse_normres.c; checked to be so: the same bits as the two nodes, cuda_kernels_emu).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen.h"
#include "diag.h"
#include "frontend.h"
#include "interp.h"
#include "pipeline.h"
#include "st_compare.h"
#include "train/train.h"
#include "../check.h" /* CHECK */

static int failures;

/* ---- checkpoints (st_compare.h reads them) ---- */
/* The tensor `name` as doubles into t (allocated); false if absent. */
static bool st_get(const St *s, const char *name, Tensor *t, DType dt) {
  const RtJson *e = rt_json_get(s->hdr, name);
  if (!e) return false;
  const RtJson *shape = rt_json_get(e, "shape"), *offs = rt_json_get(e, "data_offsets"),
               *dtype = rt_json_get(e, "dtype");
  int64_t dims[IR_MAX_RANK];
  for (int i = 0; i < shape->n; i++) dims[i] = shape->items[i]->inum;
  *t = tensor_new(dt, ir_shape(shape->n, dims));
  const char *p = s->buf + s->data + offs->items[0]->inum;
  int64_t n = ir_numel(&t->shape);
  bool is_int = strcmp(dtype->str, "I32") == 0, is_bf16 = strcmp(dtype->str, "BF16") == 0;
  for (int64_t i = 0; i < n; i++) {
    if (is_int) {
      int32_t v;
      memcpy(&v, p + 4 * i, 4);
      t->data[i] = v;
    } else if (is_bf16) { /* (a bf16 gradient the optimizer widens itself: ir_cast_folded) */
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      uint32_t w = (uint32_t)h << 16;
      float v;
      memcpy(&v, &w, 4);
      t->data[i] = v;
    } else {
      float v;
      memcpy(&v, p + 4 * i, 4);
      t->data[i] = v;
    }
  }
  return true;
}

static double rel_l2(const Tensor *a, const Tensor *ref) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < ir_numel(&ref->shape); i++) {
    double d = a->data[i] - ref->data[i];
    num += d * d;
    den += ref->data[i] * ref->data[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double max_abs(const Tensor *a, const Tensor *ref) {
  double m = 0;
  for (int64_t i = 0; i < ir_numel(&ref->shape); i++) m = fmax(m, fabs(a->data[i] - ref->data[i]));
  return m;
}

/* ---- data files ---- */
static void write_bytes(const char *path, int64_t n, uint64_t seed) {
  FILE *f = fopen(path, "wb");
  const char *words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran ", "to ", "it "};
  uint64_t x = seed;
  for (int64_t i = 0; i < n;) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const char *w = words[(x >> 33) % 10];
    for (const char *c = w; *c && i < n; c++, i++) fputc(*c, f);
  }
  fclose(f);
}

static void write_shard(const char *path, int64_t n, int vocab, uint64_t seed) {
  FILE *f = fopen(path, "wb");
  int32_t hdr[256] = {20240520, 1, (int32_t)n};
  fwrite(hdr, sizeof hdr, 1, f);
  uint64_t x = seed;
  for (int64_t i = 0; i < n; i++) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    uint16_t t = (uint16_t)((x >> 33) % (uint64_t)vocab);
    fwrite(&t, 2, 1, f);
  }
  fclose(f);
}

/* ---- one case ---- */
typedef struct {
  Target target;
  bool bf16;
  bool llvm; /* the CPU target's kernels built by LLVM (--cpu-kernels llvm), not the C ones */
  bool swiglu; /* CUDA: SwiGLU's elementwise parts fused over the GEMMs between (passes/fuse_order.c), checked */
  int wide;    /* CUDA, a model without norms (no fuse_normres check): a fusion group of this many members or more */
} Variant;

/* The members of n's fusion group in its graph (1 when in none). */
static int group_size(const Node *n) {
  int k = 0;
  for (int i = 0; i < n->graph->nnodes && n->group; i++) k += n->graph->nodes[i]->group == n->group;
  return n->group ? k : 1;
}

/* The members of g's largest fusion group (its own nodes; 1: none) */
static int widest_group(const Graph *g) {
  int w = 1;
  for (int i = 0; i < g->nnodes; i++) {
    int k = group_size(g->nodes[i]);
    if (k > w) w = k;
  }
  return w;
}

/* How many SILU nodes of g (and its bodies) are in no group of 2 or more, and SILU_BWD nodes in none of 3
 * or more (SwiGLU: silu with its mul; silu_bwd with the backward's two muls); *seen: how many there are. */
static int swiglu_unfused(const Graph *g, int *seen) {
  int bad = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body) bad += swiglu_unfused(n->body, seen);
    if (n->op != OP_SILU && n->op != OP_SILU_BWD) continue;
    ++*seen;
    bad += group_size(n) < (n->op == OP_SILU ? 2 : 3);
  }
  return bad;
}

/* How many LLVM-built kernels (shardc_llk* functions) the trainer exe holds; -1 if nm fails. */
static int llvm_kernels_in(const char *exe) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "nm '%s' 2>/dev/null | grep -c ' T shardc_llk'", exe);
  FILE *p = popen(cmd, "r");
  int n = -1;
  if (!p || fscanf(p, "%d", &n) != 1) n = -1;
  if (p) pclose(p);
  return n;
}

/* The norms' backward in g (and its bodies) that add the residual gradient's carry in their kernel (Attrs.normres,
 * passes/fuse_normres.c). */
static int normres_count(const Graph *g) {
  int k = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body) k += normres_count(n->body);
    k += n->a.normres && (n->op == OP_LAYERNORM_BWD || n->op == OP_RMSNORM_BWD);
  }
  return k;
}

/* The sibling GEMM pairs in g (and its bodies) that run as one batched launch (Attrs.hfuse 1, passes/hfuse.c). */
static int hfuse_count(const Graph *g) {
  int k = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body) k += hfuse_count(n->body);
    k += n->op == OP_MATMUL && n->a.hfuse == 1;
  }
  return k;
}

static void run_case(const char *label, const char *model, const FeDefine *defs0, int ndefs0, bool bytes, Variant var) {
  FeDefine defs[32];
  int ndefs = 0;
  for (int i = 0; i < ndefs0; i++) defs[ndefs++] = defs0[i];
  defs[ndefs++] = (FeDefine){"precision", var.bf16 ? "bf16" : "f32"};
  const double u = 1.0 / 256; /* bf16's unit roundoff */
  double tol_loss1 = var.bf16 ? u / 8 : 1e-6, tol_loss = var.bf16 ? u / 4 : 1e-6, tol_grad = var.bf16 ? 4 * u : 1e-5;
  /* f32 parameters after step 1 (the header's derivation): the clipped gradient within tol_gmax of its
   * tensor's largest, the weight within ptol_round |p| + ptol_update lr_1 + st_adam_bound */
  const double u32 = 1.0 / (1 << 24), tol_gmax = 21 * u32, ptol_round = 2 * u32, ptol_update = 16 * u32;
  const int vocab_ids = 300; /* token ids the shard files use: below every case's vocabulary */
  fprintf(stderr, "== %s\n", label);
  char dir[] = "/tmp/shardc-e2e-XXXXXX";
  if (!mkdtemp(dir)) {
    CHECK(0, "mkdtemp: %s", strerror(errno));
    return;
  }
  Arena a;
  arena_init(&a);
  const char *imports[] = {SHARDC_MODELS_DIR};
  FeOptions fo = {.import_dirs = imports, .nimport_dirs = 1, .defines = defs, .ndefines = ndefs, .world = 1};
  Module *m = fe_compile(&a, model, &fo);
  CHECK(m && diag_errors() == 0, "%s: front end failed", label);
  if (!m) return;
  m->target = var.target;
  PipelineOptions po = {.dump = stderr, .verify = true}; /* the single-rank program */
  CHECK(pipeline_run(m, &po), "%s: passes failed", label);
  if (var.swiglu) {
    int seen = 0, bad = swiglu_unfused(m->graph, &seen);
    CHECK(seen >= 2 && bad == 0, "%s: %d of %d silu / silu_bwd nodes outside their SwiGLU fusion group", label, bad, seen);
  }
  if (var.wide) {
    int w = widest_group(m->graph);
    CHECK(w >= var.wide, "%s: the largest fusion group has %d members, %d expected", label, w, var.wide);
    fprintf(stderr, "  the largest fusion group: %d members\n", w);
  } else if (var.target == TARGET_CUDA) { /* the layers' norms' backward add the residual gradient themselves */
    int nr = normres_count(m->graph);
    CHECK(nr >= 2, "%s: %d norms' backward with the residual gradient's add (fuse_normres), 2 expected", label, nr);
    fprintf(stderr, "  %d norms' backward add the residual gradient (fuse_normres)\n", nr);
    int hf = hfuse_count(m->graph); /* Llama's k / v and gate / up projections: one launch each (GPT: none) */
    CHECK(!var.swiglu || hf >= 2, "%s: %d sibling GEMM pairs (hfuse), 2 expected", label, hf);
    fprintf(stderr, "  %d sibling GEMM pairs as one launch (hfuse)\n", hf);
  }
  char exe[512], data[512], cmd[2048];
  snprintf(exe, sizeof exe, "%s/train", dir);
  CgOptions co = {.source_path = model, .llvm_kernels = var.llvm};
  CHECK(cg_build(m, exe, &co), "%s: codegen failed", label);
  if (var.llvm) { /* else the C kernels would pass for them */
    int k = llvm_kernels_in(exe);
    CHECK(k > 0, "%s: no LLVM kernel in the trainer (nm: %d)", label, k);
    fprintf(stderr, "  %d LLVM kernels\n", k);
  }

  snprintf(data, sizeof data, "%s/data.bin", dir);
  if (bytes)
    write_bytes(data, 200000, 7);
  else
    write_shard(data, 100000, vocab_ids, 11);
  snprintf(cmd, sizeof cmd,
           "%s%s --data %s --val %s --steps 10 --dump-steps 10 --dump-to %s/dump --save-to %s/ck --eval-every 0 "
           "--val-batches 1 --threads 2 > %s/log 2>&1",
           var.target == TARGET_CUDA ? "SHARDRT_DEVICE=emu " : "", exe, data, data, dir, dir, dir);
  int rc = system(cmd);
  CHECK(rc == 0, "%s: trainer failed (see %s/log)", label, dir);
  if (rc != 0) return;

  Interp *it = interp_new(m->graph, NULL, m->recipe.seed);
  double lr1 = 0;
  for (int s = 1; s <= 10; s++) {
    char path[600];
    snprintf(path, sizeof path, "%s/dump/step_%d.safetensors", dir, s);
    St st = {0};
    if (!st_load(&st, path)) {
      CHECK(0, "%s: cannot read %s", label, path);
      break;
    }
    Tensor t;
    const char *inputs[] = {"tokens", "targets", "lr", "step"};
    for (int i = 0; i < 4; i++) {
      bool isint = i < 2;
      if (!st_get(&st, inputs[i], &t, isint ? DT_I32 : DT_F32)) continue;
      if (i == 2 && s == 1) lr1 = t.data[0];
      interp_set_input(it, -1, inputs[i], &t);
      tensor_free(&t);
    }
    CHECK(interp_step(it), "%s: interpreter step %d failed", label, s);
    Tensor loss;
    st_get(&st, "loss", &loss, DT_F32);
    double ref = interp_get(it, 0, "loss")->data[0];
    double rel = fabs(loss.data[0] - ref) / fabs(ref);
    fprintf(stderr, "  step %2d: loss %.7f (interpreter %.7f, rel %.1e)\n", s, loss.data[0], ref, rel);
    CHECK(rel <= (s == 1 ? tol_loss1 : tol_loss), "%s: step %d loss %.9g vs interpreter %.9g (rel %.2e)", label, s,
          loss.data[0], ref, rel);
    /* the dump's metadata carries this step's loss (as "%.9g"), not the previous one's */
    const RtJson *meta = rt_json_get(st.hdr, "__metadata__"), *ml = meta ? rt_json_get(meta, "loss") : NULL;
    double mloss = ml && ml->str ? strtod(ml->str, NULL) : NAN;
    CHECK(fabs(mloss - loss.data[0]) <= 1e-8 * fabs(loss.data[0]), "%s: step %d dump metadata loss %s, tensor %.9g",
          label, s, ml && ml->str ? ml->str : "(none)", loss.data[0]);
    tensor_free(&loss);
    if (s == 1) {
      double worst_g = 0, worst_m = 0, worst_p = 0, worst_d = 0, worst_b = 0;
      const char *wg = "", *wm = "", *wp = "";
      for (int i = 0; i < m->graph->nnodes; i++) {
        Node *n = m->graph->nodes[i];
        if (n->op != OP_PARAM) continue;
        char gname[300];
        snprintf(gname, sizeof gname, "grad:%s", n->a.name);
        Tensor g, p;
        CHECK(st_get(&st, gname, &g, DT_F32), "%s: dump lacks %s", label, gname);
        double e = rel_l2(&g, interp_get(it, 0, gname));
        if (e > worst_g) worst_g = e, wg = n->a.name;
        CHECK(e <= tol_grad, "%s: %s differs from the interpreter: relative L2 error %.2e", label, gname, e);
        CHECK(st_get(&st, n->a.name, &p, DT_F32), "%s: dump lacks %s", label, n->a.name);
        const Tensor *pref = interp_get(it, 0, n->a.name);
        if (var.bf16) { /* the fraction of weights off by more than ptol, where the gradient is not noise */
          const double ptol = 1e-3 * lr1 + 1e-7;
          const Tensor *gref = interp_get(it, 0, gname);
          int64_t off = 0, counted = 0, np = ir_numel(&pref->shape);
          double gmax = 0;
          for (int64_t j = 0; j < np; j++) gmax = fmax(gmax, fabs(gref->data[j]));
          for (int64_t j = 0; j < np; j++) {
            if (fabs(gref->data[j]) <= u * gmax) continue;
            counted++;
            off += fabs(p.data[j] - pref->data[j]) > ptol;
          }
          double frac = counted ? (double)off / (double)counted : 0;
          if (frac > worst_p) worst_p = frac, wp = n->a.name;
          CHECK(frac <= 0.01, "%s: updated %s: %.2f%% of its weights differ by more than %.2e", label, n->a.name,
                100 * frac, ptol);
        } else { /* the clipped gradient (Adam's m after step 1) within R, then each weight within its bound */
          const Recipe *rc = &m->recipe;
          char mname[310], vname[310];
          snprintf(mname, sizeof mname, "adam_m:%s", n->a.name);
          snprintf(vname, sizeof vname, "adam_v:%s", n->a.name);
          const Tensor *mref = interp_get(it, 0, mname), *vref = interp_get(it, 0, vname);
          Tensor mt = {0};
          bool have = mref && vref && st_get(&st, mname, &mt, DT_F32);
          CHECK(have, "%s: no %s or %s", label, mname, vname);
          int64_t np = ir_numel(&pref->shape), off = 0;
          double mmax = 0;
          for (int64_t j = 0; have && j < np; j++) mmax = fmax(mmax, fabs(mref->data[j]));
          double rm = !have ? 0 : mmax > 0 ? max_abs(&mt, mref) / mmax : max_abs(&mt, mref);
          double G = mmax / (1 - rc->beta1); /* the largest |clipped gradient| */
          if (rm > worst_m) worst_m = rm, wm = n->a.name;
          CHECK(rm <= tol_gmax, "%s: clipped gradient of %s: max |diff| %.2e of its largest > %.2e", label, n->a.name,
                rm, tol_gmax);
          for (int64_t j = 0; have && j < np; j++) {
            double vhat = sqrt(fmax(vref->data[j], 0) / (1 - rc->beta2)); /* |clipped gradient| */
            double d = fabs(p.data[j] - pref->data[j]),
                   b = ptol_round * fabs(pref->data[j]) + ptol_update * lr1 + st_adam_bound(lr1, tol_gmax * G, vhat, rc->eps);
            off += !(d <= b);
            if (d / b > worst_p) worst_p = d / b, wp = n->a.name, worst_d = d, worst_b = b;
          }
          if (have) tensor_free(&mt);
          CHECK(off == 0, "%s: updated %s: %lld of %lld weights beyond their AdamW bound (lr %.2e)", label, n->a.name,
                (long long)off, (long long)np, lr1);
        }
        tensor_free(&g);
        tensor_free(&p);
      }
      if (var.bf16)
        fprintf(stderr, "  step  1: worst gradient rel L2 %.2e (%s), worst parameter fraction off %.2e (%s)\n", worst_g,
                wg, worst_p, wp);
      else
        fprintf(stderr,
                "  step  1: worst gradient rel L2 %.2e (%s), clipped gradient max |diff| / max %.2e (%s), parameter "
                "closest to its bound %s at %.2f (|diff| %.2e, bound %.2e)\n",
                worst_g, wg, worst_m, wm, wp, worst_p, worst_d, worst_b);
    }
    st_free(&st);
  }
  interp_free(it);
  arena_free(&a);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (!failures && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(int argc, char **argv) {
  const FeDefine tiny[] = {{"micro_batch", "4"}, {"seq", "32"}};
  /* the Llama-shaped cases (CPU and CUDA): RMSNorm, SwiGLU, RoPE, grouped-query attention, untied head */
  const FeDefine llama[] = {{"vocab", "300"}, {"seq", "32"}, {"d", "64"},          {"heads", "4"},  {"kv_heads", "2"},
                            {"layers", "2"},  {"ffn", "96"}, {"micro_batch", "2"}, {"batch", "2"}, {"tp", "1"},
                            {"sp", "off"}};
  /* `cuda-wide`, by hand (2.5 min here: too long for CI): d 2048, the Llama 509M's width, RMSNorm's backward by
   * norm_bwd_ring with a row over 2 warps (64 rows: 8 blocks) in a whole trainer on the emulated device */
  if (argc > 1 && strcmp(argv[1], "cuda-wide") == 0) {
    const FeDefine wide[] = {{"vocab", "300"}, {"seq", "32"}, {"d", "2048"},        {"heads", "16"}, {"kv_heads", "8"},
                             {"layers", "1"},  {"ffn", "96"}, {"micro_batch", "2"}, {"batch", "2"},  {"tp", "1"},
                             {"sp", "off"}};
    run_case("Llama-shaped at d 2048, CUDA target (emulated), bf16", SHARDC_MODELS_DIR "/llama3-8b.model", wide, 11,
             false, (Variant){TARGET_CUDA, true, false, false, 0});
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    return failures != 0;
  }
  if (argc > 1 && strcmp(argv[1], "cuda") == 0) { /* the CUDA target on the emulated device */
    run_case("tiny, CUDA target (emulated), f32", SHARDC_MODELS_DIR "/tiny.model", tiny, 2, true,
             (Variant){TARGET_CUDA, false, false, false, 0});
    run_case("tiny, CUDA target (emulated), bf16 mixed precision", SHARDC_MODELS_DIR "/tiny.model", tiny, 2, true,
             (Variant){TARGET_CUDA, true, false, false, 0});
    /* SwiGLU's silu and mul one kernel over the up projection's GEMM, the backward's mul, silu_bwd and mul
     * one (with selective recompute's silu and mul: the model's default; without: recompute none) */
    run_case("Llama-shaped, CUDA target (emulated), bf16", SHARDC_MODELS_DIR "/llama3-8b.model", llama, 11, false,
             (Variant){TARGET_CUDA, true, false, true, 0});
    /* f32 too: its GEMMs take the residual adds without a bias (passes/epilogue.c, EPI_RESIDUAL) as in bf16;
     * without recompute (silu(g) recomputed in the backward's group all the same: passes/recompute.c) */
    FeDefine whole[16];
    for (int i = 0; i < 11; i++) whole[i] = llama[i];
    whole[11] = (FeDefine){"recompute", "none"};
    run_case("Llama-shaped, CUDA target (emulated), f32, recompute none", SHARDC_MODELS_DIR "/llama3-8b.model", whole,
             12, false, (Variant){TARGET_CUDA, false, false, true, 0});
    /* fusion groups at their widest: kernels of up to 39 pointer arguments (tests/e2e/ewwide.model) */
    run_case("12 affine maps, CUDA target (emulated), f32", SHARDC_E2E_DIR "/ewwide.model", NULL, 0, false,
             (Variant){TARGET_CUDA, false, false, false, 17});
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    else fprintf(stderr, "CUDA trainers (emulated) match the interpreter\n");
    return failures != 0;
  }
  /* `llvm`: the same cases with the LLVM-built CPU kernels (--cpu-kernels llvm), the same bounds */
  bool llvm = argc > 1 && strcmp(argv[1], "llvm") == 0;
  const char *kernels = llvm ? ", LLVM kernels" : "";
  char label[200];
  snprintf(label, sizeof label, "tiny byte-level GPT%s", kernels);
  run_case(label, SHARDC_MODELS_DIR "/tiny.model", tiny, 2, true, (Variant){TARGET_CPU, false, llvm, false, 0});
  const FeDefine gpt2[] = {{"vocab_size", "1000"}, {"seq", "32"}, {"d", "64"},         {"heads", "4"},
                           {"layers", "2"},        {"micro_batch", "2"}, {"batch", "2"}};
  snprintf(label, sizeof label, "GPT-2 shaped (padded vocab 1000 -> 1024, tied head)%s", kernels);
  run_case(label, SHARDC_MODELS_DIR "/gpt2-124m.model", gpt2, 7, false, (Variant){TARGET_CPU, false, llvm, false, 0});
  snprintf(label, sizeof label, "Llama-shaped (RMSNorm, SwiGLU, RoPE, grouped-query attention, untied head)%s",
           kernels);
  run_case(label, SHARDC_MODELS_DIR "/llama3-8b.model", llama, 11, false, (Variant){TARGET_CPU, false, llvm, false, 0});
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  fprintf(stderr, "compiled trainers match the interpreter\n");
  return 0;
}
