/* tests/passes/plan_gen.c — see plan_gen.h.
 *
 * A sample is a model of the standard library's layers (models/std/transformer.model): 1-4 layers,
 * layernorm or rmsnorm, gelu / relu / silu MLP or SwiGLU, multi-head or grouped-query attention
 * (kv heads dividing the heads), head dims 2-8 (odd ones too), rotary and/or learned positions,
 * causal or not, biases or not, a tied or untied head, a final norm or none, a second (MLP) layer
 * loop or none, heads x head dim = d; and a plan: dp, tp, cp, pp in {1, 2, 4} (at most 16 ranks; 3%
 * with dp 8x), sp, cp_mode, a pipeline schedule (interleaved: 2 chunks per stage), its
 * micro-batches and stage layer counts (`layers(a, b)`, `layers(balanced)`; with interleaving uneven virtual
 * stages: pp or pp x 2 counts, or balanced, over 2 pp + 1 or 2 layers), accumulation, ZeRO 0-3,
 * offload, recompute, bucket, coalesce (ZeRO-2/3), defer_waits (ZeRO-2/3, with or without pp: the stages' B, zb: W, loops defer too), zb_w (zb under recompute), weight_copy, f32 or bf16, the CPU or the CUDA target, and the
 * optimizer (AdamW, SGD), clipping and the non-finite policy. Each knob lands either in the
 * source (the `parallel` or `train` block) or in a -D override, as a user would write it. About one
 * sample in four gets a deliberate mistake (a world the plan does not use, a batch micro_batch x dp
 * does not divide, kv heads that do not divide the heads, a sequence cp does not split, pp over the
 * layers, an unknown or out-of-range value, ...); the rest are plans the compiler should take, or
 * refuse with an error where a combination is not supported.
 */
#include "plan_gen.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  uint64_t s;
} Rng;

static uint64_t next(Rng *r) { /* splitmix64 */
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int below(Rng *r, int n) { return n > 0 ? (int)(next(r) % (uint64_t)n) : 0; }
static bool chance(Rng *r, int percent) { return below(r, 100) < percent; }
static int pick(Rng *r, const int *v, int n) { return v[below(r, n)]; }

typedef struct {
  char *p;
  size_t left;
} Buf;

static void put(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(Buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b->p, b->left, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= b->left) n = b->left ? (int)b->left - 1 : 0;
  b->p += n;
  b->left -= (size_t)n;
}

enum { PLAN, BOTH, REF }; /* whose -D override: the plan's, both programs', the single rank's */

static void def(PlanSample *s, int whose, const char *key, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void def(PlanSample *s, int whose, const char *key, const char *fmt, ...) {
  if (s->nwords >= 2 * PG_MAXDEF || s->ndefs >= PG_MAXDEF) return;
  char *k = s->words[s->nwords][0], *v = s->words[s->nwords][1];
  s->nwords++;
  snprintf(k, PG_WORD, "%s", key);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v, PG_WORD, fmt, ap);
  va_end(ap);
  if (whose != REF) s->defs[s->ndefs++] = (FeDefine){k, v};
  if (whose != PLAN && s->nref_defs < PG_MAXDEF) s->ref_defs[s->nref_defs++] = (FeDefine){k, v};
}

/* A setting written in the block (in_src) or as a -D override of the plan. */
static void knob(PlanSample *s, Rng *r, Buf *blk, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void knob(PlanSample *s, Rng *r, Buf *blk, const char *key, const char *fmt, ...) {
  char v[PG_WORD];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v, sizeof v, fmt, ap);
  va_end(ap);
  if (chance(r, 50)) put(blk, "  %s %s\n", key, v);
  else def(s, PLAN, key, "%s", v);
}

static void mistake(PlanSample *s, const char *what) {
  if (s->mistake) return;
  s->mistake = what;
  s->meant_valid = false;
}

void plan_gen(PlanSample *s, uint64_t seed) {
  memset(s, 0, sizeof *s);
  s->seed = seed;
  s->meant_valid = true;
  Rng r = {seed * 0x2545f4914f6cdd1dull + 1};
  /* a deliberate mistake in about one sample in four: which one */
  int bad = chance(&r, 25) ? 1 + below(&r, 14) : 0;

  /* ---- the model ---- */
  static const int heads_v[] = {1, 2, 2, 4, 4, 4, 8}, hd_v[] = {2, 3, 4, 4, 6, 8}, seq_v[] = {4, 8, 8, 12, 16, 16},
                   vocab_v[] = {16, 32, 48, 64, 100, 128};
  int layers = 1 + below(&r, 4), heads = pick(&r, heads_v, 7), hd = pick(&r, hd_v, 6);
  int d = heads * hd;
  if (d < 8) hd *= 2, d *= 2;
  int kv = heads;
  if (heads > 1 && chance(&r, 40)) kv = heads >> (1 + below(&r, heads >= 4 ? 2 : 1)); /* GQA */
  int seq = pick(&r, seq_v, 6), vocab = pick(&r, vocab_v, 6);
  int ffn = chance(&r, 50) ? 4 * d : chance(&r, 50) ? 2 * d : d + 8;
  Rng y = {seed * 0xd1b54a32d192ed03ull + 11}; /* (a stream of its own: the samples before stay) */
  if (chance(&y, 12)) vocab += 2;              /* a vocabulary tp 4 does not divide */
  if (chance(&y, 8)) ffn = 3 * heads + 3;      /* a hidden size tp 2 does not divide either */
  if (bad == 1) kv = heads > 2 ? heads - 1 : 3, mistake(s, "kv_heads does not divide heads");
  if (bad == 2) d = heads * hd + 1, mistake(s, "heads do not divide d");
  bool rms = chance(&r, 50), rotary = chance(&r, 40), learned = !rotary || chance(&r, 30);
  bool causal = chance(&r, 85), bias = chance(&r, 50), tied = chance(&r, 50);
  /* no biases with separate Q, K, V projections (kv heads < heads): b_k's gradient is zero (a constant
   * added to every key leaves the softmax as it was), round-off only, which no relative bound compares */
  if (kv != heads || bad == 10) bias = false; /* (bad 10: -D heads makes them differ) */
  int mlp = below(&r, 4); /* gelu, relu, silu, swiglu */
  static const char *const acts[] = {"gelu", "relu", "silu"};
  const char *norm = rms ? "rmsnorm" : "layernorm";

  /* ---- the plan ---- */
  static const int deg[] = {1, 1, 1, 2, 2, 4};
  int dp, tp, cp, pp;
  do {
    dp = pick(&r, deg, 6), tp = pick(&r, deg, 6), cp = pick(&r, deg, 6), pp = pick(&r, deg, 6);
    if (cp > 1 && chance(&r, 50)) cp = 1; /* cp constrains seq: fewer */
  } while (dp * tp * cp * pp > (chance(&r, 90) ? 8 : 16));
  if (chance(&r, 3)) dp *= 8; /* a large mesh: compiled, not interpreted (fuzz_plans compares 16 ranks at most) */
  /* pipeline stages of their own layer counts (`pp N layers(a, b, ..)`), or balanced by the cost model */
  int uneven = pp > 1 && chance(&r, 25) ? (chance(&r, 25) ? 2 : 1) : 0;
  if (uneven && layers < pp && bad != 3) layers = pp + below(&r, 5 - pp);
  if (layers % pp && bad != 3 && !uneven) layers = pp * (1 + below(&r, 2)) > 4 ? pp : pp * (1 + below(&r, 2)); /* even stages */
  if (bad == 3 && pp > 1) layers = pp - 1, mistake(s, "pp over the layers");
  if (cp > 1 && seq % (2 * cp) != 0 && bad != 4) seq = 4 * cp;
  if (bad == 4 && cp > 1) seq = 2 * cp + 2, mistake(s, "a sequence 2 x cp does not divide");
  bool a2a = cp > 1 && chance(&r, 40);
  if (a2a && (heads % (cp * tp) || kv % (cp * tp)) && bad != 5) a2a = false;
  if (bad == 5 && cp > 1) a2a = true, mistake(s, "all2all whose cp x tp does not divide the heads");
  int M = 1; /* micro-steps: accumulation, or the pipeline's micro-batches */
  if (pp > 1) M = pp * (1 + below(&r, 2)) / (chance(&r, 25) ? 2 : 1);
  else if (chance(&r, 35)) M = 2 << below(&r, 2);
  int mb = 1 + below(&r, 2);
  int64_t B = (int64_t)mb * dp * M;
  if (B > 16) mb = 1, B = (int64_t)dp * M;
  static const char *const scheds[] = {"gpipe", "1f1b", "interleaved", "zb"};
  int sched = pp > 1 ? below(&r, 4) : 1;
  if (sched == 2 && (layers % (2 * pp) || M % pp)) {
    if (layers * 2 <= 4 && layers % pp == 0 && bad != 6) layers *= 2;
    if (layers % (2 * pp) || M % pp) sched = 3;
  }
  /* the interleaved schedule with virtual stages of unequal layer counts (a stream of its own, so that the
   * samples drawn before stay): 2 pp + 1 or + 2 layers (no even split of pp x 2 chunks), written as pp
   * counts (each stage's, at least 2: split over its chunks), pp x 2 (each virtual stage's) or balanced;
   * one in ten of them with a count list of neither length (a mistake) */
  Rng u = {seed * 0xbf58476d1ce4e5b9ull + 13};
  int ileave = 0; /* 1: pp counts, 2: pp x 2, 3: `layers(balanced)` */
  bool ileave_bad = false;
  if (pp > 1 && bad != 3 && bad != 6 && chance(&u, 30)) {
    ileave = 1 + below(&u, 3);
    ileave_bad = ileave < 3 && chance(&u, 10);
    sched = 2;
    uneven = 0;
    layers = 2 * pp + 1 + below(&u, 2);
    if (M % pp) M = pp;
    B = (int64_t)mb * dp * M;
    if (B > 16) mb = 1, B = (int64_t)dp * M;
  }
  bool sp = tp > 1 && chance(&r, 40);
  int zero = chance(&r, 50) ? 0 : 1 + below(&r, 3);
  bool offload = zero > 0 && chance(&r, 25);
  static const char *const rcs[] = {"none", "none", "full", "selective"};
  const char *rc = rcs[below(&r, 4)];
  bool bf16 = chance(&r, 20);
  s->target = chance(&r, 30) ? TARGET_CUDA : TARGET_CPU;
  s->world = dp * tp * cp * pp;
  if (bad == 7) s->world += 1 + below(&r, 2) * dp, mistake(s, "a world the plan does not use");
  bool topo = chance(&r, 15); /* the bundled CPU topology: 2 devices a node */
  bool cross = !topo || chance(&r, 70);

  /* ---- the source ---- */
  Buf b = {s->src, sizeof s->src};
  put(&b, "# fuzz_plans sample %llu\nimport \"std/transformer.model\"\n", (unsigned long long)seed);
  if (topo) put(&b, "import \"topo/cpu.topo\"\n");
  put(&b, "\nmodel fz {\n  const vocab = %d, seq = %d, d = %d, heads = %d, kv_heads = %d, layers = %d, ffn = %d\n\n",
      vocab, seq, d, heads, kv, layers, ffn);
  put(&b, "  input  tokens  : i32[batch, seq]\n  input  targets : i32[batch, seq]\n\n");
  put(&b, "  param wte : [vocab, d]  init normal(0, 0.02)\n");
  if (learned) put(&b, "  param wpe : [seq, d]    init normal(0, 0.02)\n");
  put(&b, "  x = embed(wte, tokens)%s\n", learned ? " + embed(wpe, positions(seq))" : "");
  put(&b, "  repeat layers {\n    x = x + attention(%s(x), heads: heads, kv_heads: kv_heads, causal: %s, rotary: %s, "
          "bias: %s)\n", norm, causal ? "true" : "false", rotary ? "true" : "false", bias ? "true" : "false");
  if (mlp == 3) put(&b, "    x = x + swiglu(%s(x), hidden: ffn)\n  }\n", norm);
  else put(&b, "    x = x + mlp(%s(x), hidden: ffn, act: %s, bias: %s)\n  }\n", norm, acts[mlp], bias ? "true" : "false");
  if (!tied) put(&b, "  param output : [d, vocab]  init normal(0, 0.02)\n");
  /* (drawn from a stream of their own, so that the samples drawn before they existed stay as they were) */
  Rng x = {seed * 0x9e3779b97f4a7c15ull + 7};
  if (chance(&x, 10)) /* a second layer loop, MLP only */
    put(&b, "  repeat 2 {\n    x = x + mlp(%s(x), hidden: ffn, act: relu, bias: %s)\n  }\n", norm, bias ? "true" : "false");
  bool final_norm = !chance(&x, 12);
  put(&b, "  loss = cross_entropy(%s%sx%s @ %s, targets)\n}\n\n", final_norm ? norm : "", final_norm ? "(" : "",
      final_norm ? ")" : "", tied ? "transpose(wte)" : "output");
  bool by_microbatches = pp > 1 && M > 1 && chance(&x, 30); /* no batch: micro_batch x dp x microbatches */
  char *model_end = b.p;

  /* the recipe both programs share (the batch apart) */
  char recipe[512];
  Buf rb = {recipe, sizeof recipe};
  /* AdamW's eps 1e-5, not 1e-8: a gradient element within ~eps of zero turns its round-off (summed in
   * another order on other layouts) into an update error of round-off / (4 eps): at 1e-8, 1.8e-10 of
   * the update (seed 472, b_proj under tp 4 x 4 micro-steps), at 1e-5, 5.5e-12 */
  if (chance(&r, 75)) put(&rb, "  optimizer adamw(lr: 1e-3, betas: (0.9, 0.95), eps: 1e-5, weight_decay: 0.1)\n");
  else put(&rb, "  optimizer sgd(lr: 1e-2, momentum: 0.9, weight_decay: 0.01)\n");
  if (chance(&r, 70)) put(&rb, "  grad_clip 1.0\n");
  if (chance(&r, 15)) put(&rb, "  on_nonfinite skip(max: 3)\n");
  put(&rb, "  precision %s\n  steps 10\n  seed 1337\n", bf16 ? "bf16" : "f32");

  put(&b, "parallel {\n");
  if (chance(&r, 15) && bad != 7) chance(&r, 50) ? put(&b, "  dp auto\n") : def(s, PLAN, "dp", "auto");
  else knob(s, &r, &b, "dp", "%d", dp);
  knob(s, &r, &b, "tp", "%d", tp);
  if (cp > 1 || chance(&r, 30)) knob(s, &r, &b, "cp", "%d", cp);
  if (ileave == 1 || ileave == 2) { /* each stage's (at least its 2 chunks) or each virtual stage's (at least 1) */
    int n = ileave == 1 ? pp : 2 * pp, least = ileave == 1 ? 2 : 1, c[10], left = layers - n * least;
    for (int k = 0; k < n; k++) c[k] = least;
    while (left-- > 0) c[below(&u, n)]++;
    if (ileave_bad) n += 1, c[n - 1] = 1, mistake(s, "layers(..) of neither pp nor pp x v counts");
    put(&b, "  pp %d layers(", pp);
    for (int k = 0; k < n; k++) put(&b, "%s%d", k ? ", " : "", c[k]);
    put(&b, ")\n");
  } else if (ileave == 3) {
    put(&b, "  pp %d layers(balanced)\n", pp);
  } else if (uneven == 1) { /* a random split, each stage a layer at least */
    int left = layers;
    put(&b, "  pp %d layers(", pp);
    for (int k = 0; k < pp; k++) {
      int n = k == pp - 1 ? left : 1 + below(&r, left - (pp - 1 - k));
      put(&b, "%s%d", k ? ", " : "", n);
      left -= n;
    }
    put(&b, ")\n");
  } else if (uneven == 2) {
    put(&b, "  pp %d layers(balanced)\n", pp);
  } else if (pp > 1 || chance(&r, 30)) {
    knob(s, &r, &b, "pp", "%d", pp);
  }
  if (sp || chance(&r, 20)) knob(s, &r, &b, "sp", "%s", sp ? "on" : "off");
  if (a2a) knob(s, &r, &b, "cp_mode", "all2all");
  if (pp > 1 || chance(&r, 10)) {
    if (sched == 2 && chance(&r, 50)) put(&b, "  schedule interleaved(v: 2)\n");
    else if (sched == 2) def(s, PLAN, "schedule", "interleaved"), def(s, PLAN, "interleave", "2");
    else knob(s, &r, &b, "schedule", "%s", scheds[sched]);
  }
  if (bad == 6) knob(s, &r, &b, "interleave", "2"), mistake(s, "interleave without schedule interleaved");
  if (offload && chance(&r, 30)) put(&b, "  zero %d offload\n", zero);
  else if (offload) knob(s, &r, &b, "offload", "on"), knob(s, &r, &b, "zero", "%d", zero);
  else if (zero || chance(&r, 20)) knob(s, &r, &b, "zero", "%d", zero);
  if (strcmp(rc, "none") != 0 || chance(&r, 10)) knob(s, &r, &b, "recompute", "%s", rc);
  if (chance(&r, 10)) knob(s, &r, &b, "bucket", "%d", 16 << below(&r, 12));
  if (zero >= 2 && chance(&r, 50)) knob(s, &r, &b, "coalesce", "%s", chance(&r, 70) ? "on" : "off");
  { /* knobs added later draw from a stream of their own: the samples of the seeds before stay as they were */
    /* (pp > 1 too: its stages' B, zb: W, loops defer; a plan whose stages or chunks run one layer each has
     * none to defer, and `on` / `off` there is refused at the option: passes/zero_defer.c). At pp 1 x's very
     * stream, as before (its samples stay); at pp > 1 one of its own: on x's, the draw that takes defer_waits
     * (< 30) is the one that takes the second layer loop (< 10), which pp refuses (28% of those samples) */
    Rng r2 = {seed * 0x9e3779b97f4a7c15ull + (pp > 1 ? 17 : 7)};
    if (zero >= 2 && dp * cp > 1 && chance(&r2, 30))
      knob(s, &r2, &b, "defer_waits", "%s", chance(&r2, 50) ? "on" : "off");
    /* zb under recompute: W holds B's recomputed GEMM inputs, or recomputes them (passes/recompute.c), or holds
     * them for the last N layers of each stage only (hold(N), -D hold:N: passes/recompute_split.c; N up to a
     * stage's layers, all held there; drawn after knob's draws, so the samples before keep their text) */
    Rng r3 = {seed * 0x9e3779b97f4a7c15ull + 29};
    if (pp > 1 && sched == 3 && strcmp(rc, "none") != 0 && chance(&r3, 50)) {
      bool hold = chance(&r3, 50), src = chance(&r3, 50);
      int n = hold && chance(&r3, 40) ? 1 + (int)below(&r3, layers / pp > 1 ? layers / pp : 1) : 0;
      if (n && src) put(&b, "  zb_w hold(%d)\n", n);
      else if (n) def(s, PLAN, "zb_w", "hold:%d", n);
      else if (src) put(&b, "  zb_w %s\n", hold ? "hold" : "recompute");
      else def(s, PLAN, "zb_w", "%s", hold ? "hold" : "recompute");
    }
  }
  if (cross && (topo || chance(&r, 30))) knob(s, &r, &b, "cross_node_tp", "on");
  if ((M > 1 && pp > 1 && chance(&r, 30)) || by_microbatches)
    knob(s, &r, &b, "microbatches", "%d", bad == 8 ? M + 1 : M);
  if (bad == 8 && pp > 1 && M > 1) mistake(s, "microbatches that the batch does not make");
  if (bf16 && s->target == TARGET_CUDA && chance(&r, 20))
    knob(s, &r, &b, "weight_copy", "%s", chance(&r, 50) ? "per_layer" : "persistent");
  put(&b, "}\n\ntrain {\n");
  int64_t batch = bad == 9 ? B + 1 : B;
  if (bad == 9 && mb * dp > 1) mistake(s, "a batch that micro_batch x dp does not divide");
  knob(s, &r, &b, "micro_batch", "%d", mb);
  if ((M > 1 || chance(&r, 60)) && !by_microbatches) knob(s, &r, &b, "batch", "%lld", (long long)batch);
  put(&b, "%s}\n", recipe);

  /* model constants overridden on the command line, in both programs */
  if (chance(&r, 15)) def(s, BOTH, "layers", "%d", layers);
  if (bad == 10) def(s, BOTH, "heads", "%d", 3 * heads), mistake(s, "-D heads that do not divide d");
  if (bad == 11) def(s, PLAN, "zero", "%d", 4), mistake(s, "zero 4");
  if (bad == 12) def(s, PLAN, "schedule", "1f2b"), mistake(s, "an unknown schedule");
  if (bad == 13) def(s, PLAN, "tp", "0"), mistake(s, "tp 0");
  if (bad == 14) def(s, PLAN, chance(&r, 50) ? "dpp" : "recompte", "1"), mistake(s, "an unknown -D key");

  /* the single-rank program: the model and the recipe, an empty plan (the whole batch in one step:
   * fuzz_plans.c adds micro_batch and batch, the plan's global batch) */
  size_t n = (size_t)(model_end - s->src);
  memcpy(s->ref_src, s->src, n);
  snprintf(s->ref_src + n, sizeof s->ref_src - n, "parallel {\n}\n\ntrain {\n%s}\n", recipe);
  s->dp = dp, s->tp = tp, s->cp = cp, s->pp = pp, s->bf16 = bf16, s->sp = sp;
  s->S = seq, s->V = vocab;
}

void plan_gen_print(const PlanSample *s, FILE *f) {
  fprintf(f, "---- reproducer: fuzz_plans --seed %llu (world %d, target %s%s%s) ----\n", (unsigned long long)s->seed,
          s->world, s->target == TARGET_CUDA ? "cuda" : "cpu", s->mistake ? ", mistake: " : "",
          s->mistake ? s->mistake : "");
  fputs(s->src, f);
  fprintf(f, "---- shardc plan fz.model");
  for (int i = 0; i < s->ndefs; i++) fprintf(f, " -D %s=%s", s->defs[i].key, s->defs[i].value);
  fprintf(f, " --world %d%s ----\n", s->world, s->target == TARGET_CUDA ? " --target cuda" : "");
}
