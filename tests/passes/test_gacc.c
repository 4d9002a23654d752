/* tests/passes/test_gacc.c — gradient-accumulation fusion (passes/gacc.c): the weight-gradient GEMM
 * accumulates into the running sum.
 *
 * The tiny GPT (2 layers, 4 weight matrices a layer) under accumulation (4 micro-steps on one rank:
 * f32 and `precision bf16` on the CPU target, bf16 compute on the CUDA target) and under pp 2 (1F1B, 4 micro-batches,
 * the sums folded into each stage's backward loop, passes/pipe_fold.c) is compiled twice: with every
 * pass, and with every pass but gacc. Checked:
 *   - the shape: in the fused program every backward loop that sums a layer's weight gradients has
 *     4 matmuls with an accumulator (the sum, a stacked input's argument of that loop), and each one
 *     is an add(sum, dW) (or add(sum, cast(dW))) fewer than in the unfused program; the loop's output
 *     still takes the sum's slices in place (memplan_xs_in_place);
 *   - the numbers: the fp64 interpreter runs both for two AdamW steps on the same micro-batches and
 *     every gradient, parameter and optimizer state agrees: exactly in f32 and on the CPU's bf16 (the
 *     oracle adds C after the product: the same sums in the same order), within 1e-5 under bf16 compute (the unfused
 *     cast's f32 rounding of each micro-step's gradient, which the fused GEMM skips); the compiled
 *     GEMMs' rounding is the e2e tests' (their trainers against this oracle); and the pp program
 *     agrees with the single-rank big batch within 1e-10 (as test_pp_equiv).
 */
#include <stdio.h>
#include <string.h>

#include "diag.h"
#include "frontend.h"
#include "interp.h"
#include "memplan.h"
#include "tb.h"
#include "tb_compile.h"

static int failures;

enum { B = 8, S = 8, V = 256 };

/* tiny at seq 8, d 32 on pp ranks; skip: a pass left out (NULL: none). */
static Module *compile(Arena *a, Target target, const char *prec, int pp, int64_t micro, const char *skip) {
  char smb[24], spp[16];
  snprintf(smb, sizeof smb, "%lld", (long long)micro);
  snprintf(spp, sizeof spp, "%d", pp);
  FeDefine d[] = {{"seq", "8"},         {"d", "32"},       {"heads", "4"}, {"layers", "2"},         {"micro_batch", smb},
                  {"batch", "8"},       {"pp", spp},       {"dp", "1"},    {"tp", "1"},             {"zero", "0"},
                  {"recompute", "none"}, {"schedule", "1f1b"}, {"cross_node_tp", "on"}};
  return tb_compile_on(a, SHARDC_MODELS_DIR "/tiny.model", d, (int)(sizeof d / sizeof d[0]), prec, target, skip, pp);
}

typedef struct {
  int fused;    /* matmuls with an accumulator */
  int adds;     /* adds of a weight gradient (a ta matmul's output, or its cast) */
  int loops;    /* loops with at least one fused matmul */
  int bad;      /* fused matmuls whose accumulator is no stacked argument, or whose loop output is not in place */
} Count;

static const Node *wgrad(const Value *v) {
  const Node *d = v->def;
  if (d->op == OP_CAST) d = d->in[0]->def;
  return d->op == OP_MATMUL && d->a.ta && d->nin == 2 ? d : NULL;
}

static void count(const Graph *g, Count *c) {
  int here = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body) count(n->body, c);
    if (n->op == OP_ADD && (wgrad(n->in[0]) || wgrad(n->in[1]))) c->adds++;
    if (n->op != OP_MATMUL || n->nin != 3) continue;
    c->fused++, here++;
    const Value *s = n->in[2];
    const Node *rep = g->owner;
    int k = -1;
    for (int r = 0; r < g->nresults; r++)
      if (g->results[r] == n->out[0]) k = r;
    if (!rep || s->def->op != OP_ARG || k < 0 || memplan_xs_in_place(rep, k) != s->def->a.index) c->bad++;
  }
  c->loops += here > 0;
}

static void check(const char *what, bool ok, const char *fmt, int a, int b) {
  if (ok) return;
  fprintf(stderr, "FAIL %s: ", what);
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n");
  failures++;
}

/* The fused and unfused programs of one plan: their shapes and their numbers (tol: relative). */
static void run(const char *what, Target target, const char *prec, int pp, int64_t micro, int min_loops, double tol) {
  Arena fa, ua;
  arena_init(&fa);
  arena_init(&ua);
  Module *f = compile(&fa, target, prec, pp, micro, NULL), *u = compile(&ua, target, prec, pp, micro, "gacc");
  if (!f || !u) {
    fprintf(stderr, "FAIL %s: does not compile\n", what);
    failures++;
    goto out;
  }
  Count cf = {0}, cu = {0};
  count(f->graph, &cf);
  count(u->graph, &cu);
  fprintf(stderr, "%s: %d accumulating matmuls in %d loops; adds of a weight gradient %d -> %d\n", what, cf.fused,
          cf.loops, cu.adds, cf.adds);
  check(what, cu.fused == 0, "%d accumulating matmuls without the pass (%d)", cu.fused, 0);
  check(what, cf.loops >= min_loops && cf.fused == 4 * cf.loops, "%d accumulating matmuls in %d loops (4 a loop)",
        cf.fused, cf.loops);
  check(what, cf.adds == cu.adds - cf.fused, "%d adds of a weight gradient left, %d before", cf.adds, cu.adds);
  check(what, cf.bad == 0, "%d accumulators not a loop's stacked sum in place (%d)", cf.bad, 0);
  int64_t k = B / micro; /* micro-steps or micro-batches (dp 1) */
  Tensor tok = tb_randint(tb_shape(2, B, S), 101, 0, V), tgt = tb_randint(tb_shape(2, B, S), 102, 0, V);
  Tensor mtok = tok, mtgt = tgt;
  mtok.shape = mtgt.shape = tb_shape(3, (int)k, (int)(B / k), S);
  if (pp == 1) { /* fused against unfused, both on one rank */
    failures += tb_equiv_steps(u, f, &mtok, &mtgt, &mtok, &mtgt, "tiny", what, tol, false);
  } else { /* against the big batch on one rank (the unfused pp program: test_pp_equiv) */
    Arena ra;
    arena_init(&ra);
    Module *ref = compile(&ra, target, prec, 1, B, NULL);
    if (!ref) {
      fprintf(stderr, "FAIL %s: the big batch does not compile\n", what);
      failures++;
    } else {
      failures += tb_equiv_micro(ref, f, &tok, &tgt, k, "tiny", what, tol, false);
    }
    arena_free(&ra);
  }
  tensor_free(&tok);
  tensor_free(&tgt);
out:
  arena_free(&fa);
  arena_free(&ua);
}

int main(void) {
  /* f32: the oracle adds C after the product, as the add did: the same sums, exactly */
  run("accum 4, f32, cpu", TARGET_CPU, "f32", 1, 2, 1, 0.0);
  /* the CPU's `precision bf16`: f32 gradients from GEMMs on bf16-rounded operands, no cast: exactly too */
  run("accum 4, bf16, cpu", TARGET_CPU, "bf16", 1, 2, 1, 0.0);
  /* bf16 compute: the unfused program rounds each micro-step's gradient to f32 in its cast (2^-24
   * relative) before adding it; the fused one adds the fp64 product: that much per micro-step, carried
   * through two AdamW steps */
  run("accum 4, bf16, cuda", TARGET_CUDA, "bf16", 1, 2, 1, 1e-5);
  run("pp 2 1f1b, 4 micro-batches, f32, cpu", TARGET_CPU, "f32", 2, 2, 2, 1e-10);
  if (failures) fprintf(stderr, "%d failures\n", failures);
  return failures != 0;
}
