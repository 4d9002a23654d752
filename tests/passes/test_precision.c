/* tests/passes/test_precision.c — bf16 mixed precision (passes/precision.c).
 *
 * The tiny GPT and a Llama-shaped model (RMSNorm, SwiGLU, RoPE, GQA), compiled for the
 * CUDA target with `precision bf16` and with `precision f32`, one rank:
 *   - structure: parameters, Adam moments, gradients and the update stay f32 (the master
 *     weights); every matmul, attention and norm reads bf16; the loss is f32;
 *   - numbers: the fp64 interpreter rounds every value to its dtype, so it runs the bf16
 *     program as a GPU would up to summation order. After one AdamW step the loss and every
 *     gradient must agree with the f32 program within bf16's precision, u = 2^-8 = 3.9e-3
 *     (loss, a mean over many positions: relative <= u; gradients: max |a - b| / max |a|
 *     <= 5u = 2e-2, the backward compounds a few roundings; measured 1.7u at worst), and
 *     must differ from it (the rounding really happened: a pass that did nothing would
 *     pass the first check only).
 * The CPU target keeps f32 activations for `precision bf16` (its kernels are f32; it warns), its only
 * bf16 values the weights' copies its GEMMs read: checked too.
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

/* Counts float inputs of compute ops that are not bf16, and f32 state that is not f32. */
static void check_types(const Graph *g, const char *label, int *bf16_reads) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body) check_types(n->body, label, bf16_reads);
    switch (n->op) {
    case OP_MATMUL: case OP_SDPA: case OP_LAYERNORM: case OP_RMSNORM: case OP_ROPE:
      for (int k = 0; k < n->nin; k++) {
        CHECK(n->in[k]->dtype == DT_BF16, "%s: %s input %d is %s, want bf16", label, ir_ops[n->op].name, k,
              ir_dtype_name(n->in[k]->dtype));
        (*bf16_reads)++;
      }
      break;
    case OP_PARAM: case OP_STATE:
      if (n->op == OP_STATE && ir_copy_source(n->a.name)) { /* a persistent bf16 copy (passes/wshadow.c) */
        CHECK(n->out[0]->dtype == DT_BF16, "%s: copy %s is %s", label, n->a.name, ir_dtype_name(n->out[0]->dtype));
        (*bf16_reads)++;
        break;
      }
      CHECK(n->out[0]->dtype == DT_F32, "%s: %s %s is %s, want f32 (master copy)", label, ir_ops[n->op].name,
            n->a.name, ir_dtype_name(n->out[0]->dtype));
      break;
    case OP_ADAMW_UPDATE:
      for (int k = 0; k < n->nin; k++)
        CHECK(n->in[k]->dtype == DT_F32, "%s: adamw_update input %d is %s, want f32", label, k,
              ir_dtype_name(n->in[k]->dtype));
      break;
    default: break;
    }
  }
}

/* Values of dtype bf16 in g and its bodies. */
static int count_bf16(const Graph *g) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *nd = g->nodes[i];
    for (int k = 0; k < nd->nout; k++) n += nd->out[k]->dtype == DT_BF16;
    if (nd->body) n += count_bf16(nd->body);
  }
  return n;
}

/* bf16 casts of a PARAM and loop arguments of bf16 in g and its bodies. */
static int count_weight_copies(const Graph *g) {
  int n = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *nd = g->nodes[i];
    if (nd->nout > 0 && nd->out[0]->dtype == DT_BF16)
      n += (nd->op == OP_CAST && nd->in[0]->def->op == OP_PARAM) || nd->op == OP_ARG;
    if (nd->body) n += count_weight_copies(nd->body);
  }
  return n;
}

static void feed(Interp *it, const Tensor *tok, const Tensor *tgt) {
  interp_set_input(it, -1, "tokens", tok);
  interp_set_input(it, -1, "targets", tgt);
  Tensor lr = tensor_new(DT_F32, ir_scalar_shape()), st = tensor_new(DT_F32, ir_scalar_shape());
  lr.data[0] = 1e-3;
  st.data[0] = 1;
  interp_set_input(it, -1, "lr", &lr);
  interp_set_input(it, -1, "step", &st);
  tensor_free(&lr);
  tensor_free(&st);
}

static void run(const char *label, const char *path, const FeDefine *defs, int ndefs, int64_t S, int64_t V) {
  Arena a, b;
  arena_init(&a);
  arena_init(&b);
  Module *mb = tb_compile(&a, path, defs, ndefs, "bf16", TARGET_CUDA, NULL),
         *mf = tb_compile(&b, path, defs, ndefs, "f32", TARGET_CUDA, NULL);
  CHECK(mb && mf, "%s: does not compile", label);
  if (!mb || !mf) return;
  int reads = 0;
  check_types(mb->graph, label, &reads);
  CHECK(reads >= 10, "%s: only %d bf16 reads by matmul/attention/norms", label, reads);
  Tensor tok = tb_randint(tb_shape(2, 2, (int)S), 11, 0, V), tgt = tb_randint(tb_shape(2, 2, (int)S), 12, 0, V);
  Interp *ib = interp_new(mb->graph, NULL, 7), *iff = interp_new(mf->graph, NULL, 7);
  feed(ib, &tok, &tgt);
  feed(iff, &tok, &tgt);
  CHECK(interp_step(ib) && interp_step(iff), "%s: interpreter step failed", label);
  const Tensor *lb = interp_get(ib, 0, "loss"), *lf = interp_get(iff, 0, "loss");
  double el = fabs(lb->data[0] - lf->data[0]) / fabs(lf->data[0]);
  CHECK(lb->dtype == DT_F32, "%s: the loss is %s, want f32", label, ir_dtype_name(lb->dtype));
  CHECK(el <= 3.9e-3 && el > 0, "%s: bf16 loss %.8g vs f32 %.8g (relative %.3g: want (0, 3.9e-3])", label, lb->data[0],
        lf->data[0], el);
  double worst = 0, least = INFINITY;
  int grads = 0;
  const Graph *g = mb->graph;
  for (int r = 0; r < g->nresults; r++) {
    const char *nm = g->result_names[r];
    if (!nm || strncmp(nm, "grad:", 5) != 0) continue;
    const Tensor *gb = interp_get(ib, 0, nm), *gf = interp_get(iff, 0, nm);
    CHECK(gb && gf && gb->dtype == DT_F32, "%s: gradient %s missing or not f32", label, nm);
    if (!gb || !gf) continue;
    double e = tb_rel_err(gf, gb);
    CHECK(e <= 2e-2, "%s: %s relative error %.3g > 2e-2", label, nm, e);
    worst = e > worst ? e : worst;
    least = e < least ? e : least;
    grads++;
  }
  CHECK(grads >= 8, "%s: only %d gradients", label, grads);
  CHECK(worst > 0, "%s: every gradient is bit-identical to f32: no rounding happened", label);
  fprintf(stderr, "  %-6s loss bf16 %.6f f32 %.6f (rel %.2g); %d gradients, rel err %.2g .. %.2g; %d bf16 reads\n",
          label, lb->data[0], lf->data[0], el, grads, least, worst, reads);
  interp_free(ib);
  interp_free(iff);
  tensor_free(&tok);
  tensor_free(&tgt);
  arena_free(&a);
  arena_free(&b);
}

int main(void) {
  run("tiny", SHARDC_MODELS_DIR "/tiny.model", NULL, 0, 64, 256);
  const FeDefine llama[] = {{"vocab", "128"}, {"seq", "16"},      {"d", "32"},  {"heads", "4"},
                            {"kv_heads", "2"}, {"layers", "2"}, {"ffn", "48"}, {"tp", "1"}};
  run("llama", SHARDC_MODELS_DIR "/llama3-8b.model", llama, 8, 16, 128);
  /* the CPU target keeps f32 activations (and warns): its only bf16 values are the weights' copies
   * its GEMMs read (passes/gemm_cast.c; tests/passes/test_gemm_cast.c) and the loop rows of them */
  Arena a;
  arena_init(&a);
  Module *m = tb_compile(&a, SHARDC_MODELS_DIR "/tiny.model", NULL, 0, "bf16", TARGET_CPU, NULL);
  CHECK(m, "cpu target: tiny with precision bf16 does not compile");
  int nbf16 = m ? count_bf16(m->graph) : 0, nweights = m ? count_weight_copies(m->graph) : 0;
  CHECK(nbf16 == nweights && nweights > 0, "cpu target: %d bf16 values, %d of them weights' copies", nbf16, nweights);
  arena_free(&a);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else fprintf(stderr, "precision: all checks passed\n");
  return failures != 0;
}
