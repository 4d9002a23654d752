/* tests/passes/test_gemm_cast.c — the CPU target's bf16 weight copies (passes/gemm_cast.c).
 *
 * The tiny GPT (tied embedding) and a Llama-shaped model (untied head, SwiGLU, GQA), compiled for
 * the CPU target with `precision bf16`, with every pass (A) and with every pass but `gemmcast` (B):
 *   - structure (A): every weight a matmul reads — directly or as its layer loop's row — is read
 *     through a bf16 CAST of the parameter, one per parameter, in the top graph (once per step: no
 *     cast inside a loop body); the set of cast parameters is exactly the set B's matmuls read; every
 *     matmul still gives f32; nothing but matmuls reads a cast (the embedding gathers f32);
 *   - numbers (Llama-shaped, whose weights only matmuls read): the fp64 interpreter runs A with the
 *     weights W and B with bf16(W) set for the cast parameters: the loss and every gradient of the
 *     step must be bit-identical (each GEMM of A read exactly bf16(W), as the per-call rounding of
 *     the trainer before this pass did, and nothing else read it), and B on W itself must differ
 *     (the rounding is really there).
 * The runtime side (a bf16 operand not rounded again, bitwise the per-call rounding):
 * tests/runtime/test_gemm_bf16.c.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "diag.h"
#include "frontend.h"
#include "interp.h"
#include "pipeline.h"
#include "tb.h"
#include "tb_compile.h"

static int failures;

/* The PARAM a matmul operand v of graph g reads (directly, or as the row / capture of a repeat's
 * input in the top graph `top`), or NULL. */
static const Value *source(const Graph *top, const Graph *g, const Node *rep, const Value *v) {
  if (v->def->op == OP_ARG && rep) {
    for (int j = 0; j < g->nargs; j++)
      if (g->args[j] == v->def) return j >= rep->a.ncarry ? source(top, top, NULL, rep->in[j]) : NULL;
    return NULL;
  }
  if (v->def->op == OP_CAST && v->dtype == DT_BF16) return source(top, g, rep, v->def->in[0]);
  return v->def->op == OP_PARAM ? v : NULL;
}

/* Every matmul's weight operand in g (the top graph's repeats one level down): how many, and
 * whether it reads bf16 (want_bf16: A) or f32 (B); params[] collects the weights read. */
static int weights_read(const Graph *top, const Graph *g, const Node *rep, const Value **params, int *np, bool want_bf16,
                        const char *label) {
  int reads = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op == OP_REPEAT && g == top) reads += weights_read(top, n->body, n, params, np, want_bf16, label);
    if (n->op == OP_CAST && n->out[0]->dtype == DT_BF16)
      CHECK(g == top, "%s: a bf16 cast inside a loop body (once per step wanted)", label);
    if (n->op != OP_MATMUL) continue;
    CHECK(n->out[0]->dtype == DT_F32, "%s: a matmul gives %s", label, ir_dtype_name(n->out[0]->dtype));
    for (int k = 0; k < 2; k++) {
      const Value *p = source(top, g, rep, n->in[k]);
      if (!p || p->shape.rank < 2) continue;
      reads++;
      CHECK((n->in[k]->dtype == DT_BF16) == want_bf16, "%s: a matmul reads weight %s as %s", label, p->def->a.name,
            ir_dtype_name(n->in[k]->dtype));
      int have = 0;
      for (int q = 0; q < *np; q++) have |= params[q] == p;
      if (!have) params[(*np)++] = p;
    }
  }
  return reads;
}

/* bf16 casts in the top graph, each of a distinct PARAM read only by matmuls and repeats (into
 * matmuls: weights_read checks those). Returns how many; names them in cast[]. */
static int casts(const Graph *g, const char **cast, const char *label) {
  int nc = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op != OP_CAST || n->out[0]->dtype != DT_BF16) continue;
    CHECK(n->in[0]->def->op == OP_PARAM, "%s: a bf16 cast of a non-parameter", label);
    const char *nm = n->in[0]->def->a.name;
    for (int q = 0; q < nc; q++) CHECK(strcmp(cast[q], nm) != 0, "%s: %s cast twice", label, nm);
    cast[nc++] = nm;
    for (int k = 0; k < g->nnodes; k++)
      for (int j = 0; j < g->nodes[k]->nin; j++)
        if (g->nodes[k]->in[j] == n->out[0])
          CHECK(g->nodes[k]->op == OP_MATMUL || g->nodes[k]->op == OP_REPEAT, "%s: %s reads the bf16 copy of %s", label,
                ir_ops[g->nodes[k]->op].name, nm);
  }
  return nc;
}

static double bf16_of(double x) { /* round to nearest even, as rt_cvt_f32_bf16 and the interpreter */
  float f = (float)x;
  uint32_t u;
  memcpy(&u, &f, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&f, &u, 4);
  return f;
}

static void feed(Interp *it, int64_t S, int64_t V) {
  Tensor tok = tb_randint(tb_shape(2, 2, (int)S), 11, 0, V), tgt = tb_randint(tb_shape(2, 2, (int)S), 12, 0, V);
  tb_feed_step(it, &tok, &tgt, 1);
  tensor_free(&tok);
  tensor_free(&tgt);
}

static void run(const char *label, const char *path, const FeDefine *defs, int ndefs, int64_t S, int64_t V, bool numbers) {
  Arena a, b;
  arena_init(&a);
  arena_init(&b);
  Module *ma = tb_compile(&a, path, defs, ndefs, "bf16", TARGET_CPU, NULL), /* with the gemmcast pass (A) and without (B) */
         *mb = tb_compile(&b, path, defs, ndefs, "bf16", TARGET_CPU, "gemmcast");
  CHECK(ma && mb, "%s: does not compile", label);
  if (!ma || !mb) return;
  const Value *pa[64], *pb[64];
  const char *cast[64];
  int na = 0, nb = 0;
  int ra = weights_read(ma->graph, ma->graph, NULL, pa, &na, true, label);
  int rb = weights_read(mb->graph, mb->graph, NULL, pb, &nb, false, label);
  int nc = casts(ma->graph, cast, label);
  CHECK(ra == rb && ra >= 4, "%s: %d weight reads by matmuls with the pass, %d without", label, ra, rb);
  CHECK(nc == na && na == nb && nc >= 2, "%s: %d casts, %d weights read by matmuls (%d without the pass)", label, nc, na, nb);
  for (int q = 0; q < nb; q++) {
    int have = 0;
    for (int k = 0; k < nc; k++) have |= strcmp(cast[k], pb[q]->def->a.name) == 0;
    CHECK(have, "%s: weight %s is not cast", label, pb[q]->def->a.name);
  }
  fprintf(stderr, "  %-6s %d weights cast once per step, read by %d matmul operands\n", label, nc, ra);
  if (numbers) {
    Interp *ia = interp_new(ma->graph, NULL, 7), *ib = interp_new(mb->graph, NULL, 7), *ic = interp_new(mb->graph, NULL, 7);
    for (int k = 0; k < nc; k++) { /* B reads bf16(W) where A's GEMMs read its cast */
      Tensor w = tensor_copy(interp_get(ib, 0, cast[k]));
      for (int64_t e = 0; e < ir_numel(&w.shape); e++) w.data[e] = bf16_of(w.data[e]);
      interp_set_state(ib, 0, cast[k], &w);
      tensor_free(&w);
    }
    feed(ia, S, V);
    feed(ib, S, V);
    feed(ic, S, V);
    CHECK(interp_step(ia) && interp_step(ib) && interp_step(ic), "%s: interpreter step failed", label);
    double la = interp_get(ia, 0, "loss")->data[0], lb = interp_get(ib, 0, "loss")->data[0],
           lc = interp_get(ic, 0, "loss")->data[0];
    CHECK(la == lb, "%s: loss %.17g with the cast, %.17g rounding the weights per GEMM", label, la, lb);
    CHECK(la != lc, "%s: loss %.17g equal to the unrounded weights' (no rounding happened)", label, la);
    int grads = 0, same = 0;
    const Graph *g = ma->graph;
    for (int r = 0; r < g->nresults; r++) {
      const char *nm = g->result_names[r];
      if (!nm || strncmp(nm, "grad:", 5) != 0) continue;
      const Tensor *ga = interp_get(ia, 0, nm), *gb = interp_get(ib, 0, nm);
      CHECK(ga && gb, "%s: gradient %s missing", label, nm);
      if (!ga || !gb) continue;
      grads++;
      int64_t n = ir_numel(&ga->shape);
      same += n == ir_numel(&gb->shape) && memcmp(ga->data, gb->data, sizeof(double) * (size_t)n) == 0;
    }
    CHECK(grads >= 8 && same == grads, "%s: %d of %d gradients bit-identical", label, same, grads);
    fprintf(stderr, "  %-6s loss %.9f (per-GEMM rounding %.9f, unrounded %.9f); %d/%d gradients bit-identical\n", label,
            la, lb, lc, same, grads);
    interp_free(ia);
    interp_free(ib);
    interp_free(ic);
  }
  arena_free(&a);
  arena_free(&b);
}

int main(void) {
  run("tiny", SHARDC_MODELS_DIR "/tiny.model", NULL, 0, 64, 256, false);
  const FeDefine llama[] = {{"vocab", "128"}, {"seq", "16"},      {"d", "32"},  {"heads", "4"},
                            {"kv_heads", "2"}, {"layers", "2"}, {"ffn", "48"}, {"tp", "1"}};
  run("llama", SHARDC_MODELS_DIR "/llama3-8b.model", llama, 8, 16, 128, true);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else fprintf(stderr, "gemm_cast: all checks passed\n");
  return failures != 0;
}
