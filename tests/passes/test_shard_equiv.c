/* tests/passes/test_shard_equiv.c — the shard pass against the unpartitioned graph.
 *
 * For the tiny GPT, a GPT-2-shaped model (padded vocab, tied head) and a Llama-shaped
 * one (RMSNorm, SwiGLU, RoPE, grouped-query attention, untied head), a GPT-2-shaped model
 * with 6 heads (tp 4 runs its attention replicated), and every plan
 * dp, tp in {1, 2, 4} with dp * tp <= 8, sp off and on: the whole pipeline runs on the
 * single-rank program (world 1, micro_batch B) and on the partitioned one (micro_batch
 * B / dp), both are interpreted in fp64 (the partitioned one on dp * tp simulated
 * ranks) for two AdamW steps on the same logical tokens, and after each step the
 * loss, the grad norm, every gradient and every updated parameter and optimizer state,
 * assembled from the ranks' blocks, must agree with the single-rank values within a
 * relative error of 1e-10 (max |a - b| / max |a| per tensor), and the ranks holding
 * the same logical element must agree too (the replicas of a replicated gradient are
 * never double-counted or left to drift).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commreport.h"
#include "diag.h"
#include "frontend.h"
#include "interp.h"
#include "pipeline.h"
#include "tb.h"
#include "tb_zero.h"

#define TOL 1e-10
#define MAXDEF 24

static int failures;

/* How a plan is compiled: for the CPU target, or for the CUDA target with the plan's `offload`
 * (passes/zero.c: the updates in host memory, between to_host and to_device copies) in f32 so that
 * the interpreter compares it with the CPU reference, or for the CUDA target in bf16 (precision
 * bf16: the loops read the parameters' bf16 copies). */
enum { CPU_F32, CUDA_OFFLOAD, CUDA_BF16 };

static Module *compile(Arena *a, const char *path, const FeDefine *defs, int ndefs, int dp, int tp, bool sp,
                       int64_t batch, int zero, int mode) {
  bool offload = mode == CUDA_OFFLOAD;
  FeDefine d[MAXDEF];
  int n = 0;
  char sdp[16], stp[16], smb[16], szero[16], sb[16];
  for (int i = 0; i < ndefs; i++) d[n++] = defs[i];
  snprintf(sdp, sizeof sdp, "%d", dp);
  snprintf(stp, sizeof stp, "%d", tp);
  snprintf(smb, sizeof smb, "%lld", (long long)(batch / dp));
  snprintf(sb, sizeof sb, "%lld", (long long)batch); /* the global batch: micro_batch x dp, no accumulation */
  d[n++] = (FeDefine){"dp", sdp};
  d[n++] = (FeDefine){"tp", stp};
  d[n++] = (FeDefine){"sp", sp ? "on" : "off"};
  snprintf(szero, sizeof szero, "%d", zero);
  d[n++] = (FeDefine){"zero", szero};
  d[n++] = (FeDefine){"micro_batch", smb};
  d[n++] = (FeDefine){"batch", sb};
  d[n++] = (FeDefine){"cross_node_tp", "on"}; /* plan the world we ask for, whatever the model's nodes */
  if (offload) d[n++] = (FeDefine){"offload", "on"};
  /* f32 unless CUDA_BF16, whatever the model's recipe says (the CPU target's `precision bf16` casts
   * the GEMMs' weights to bf16: passes/gemm_cast.c) */
  d[n++] = (FeDefine){"precision", mode == CUDA_BF16 ? "bf16" : "f32"};
  FeOptions o = {.defines = d, .ndefines = n, .world = dp * tp};
  Module *m = fe_compile(a, path, &o);
  if (!m) return NULL;
  if (mode != CPU_F32) m->target = TARGET_CUDA;
  PipelineOptions po = {.verify = true};
  if (!pipeline_run(m, &po)) return NULL;
  return m;
}


static int count_colls(const Graph *g) {
  int c = 0;
  for (int i = 0; i < g->nnodes; i++) {
    c += (ir_ops[g->nodes[i]->op].flags & F_COLL) != 0;
    if (g->nodes[i]->body) c += count_colls(g->nodes[i]->body);
  }
  return c;
}

/* A blocking collective in a loop body reading an asynchronous gradient sum's result (a norm gain's tp
 * sum after its dp sum, under sp): each iteration would wait for the network's queue
 * (passes/grad_buckets.c keeps such a pair after the loop). */
static int waits_in_loops(const Graph *g) {
  int c = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body) c += waits_in_loops(n->body);
    if (!g->parent || !(ir_ops[n->op].flags & F_COLL) || ir_comm_async(n)) continue;
    for (int j = 0; j < n->nin; j++) {
      const Node *src = n->in[j]->def;
      c += src->graph == g && (ir_ops[src->op].flags & F_COLL) && ir_comm_async(src);
    }
  }
  return c;
}

/* Data-parallel all-reduces (sum over dp) in g: count of nodes and of reduced tensors;
 * in_body: only those inside repeat bodies. */
static void count_dp(const Graph *g, bool in_body, int *nodes, int *tensors) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body) count_dp(n->body, true, nodes, tensors);
    if (n->op == OP_ALL_REDUCE && n->a.mesh_axis == RT_AX_DP && in_body == (g->parent != NULL)) {
      (*nodes)++;
      *tensors += n->nin;
    }
  }
}

/* The buckets pass (passes/grad_buckets.c): a layer's gradients are reduced inside the backward loop, in buckets. */
static void check_buckets(const char *path, const FeDefine *defs, int ndefs, int64_t B, const char *bucket,
                          bool want_one) {
  FeDefine d[MAXDEF];
  int n = 0;
  for (int i = 0; i < ndefs; i++) d[n++] = defs[i];
  d[n++] = (FeDefine){"bucket", bucket};
  Arena a;
  arena_init(&a);
  Module *m = compile(&a, path, d, n, 2, 1, false, B, 0, CPU_F32);
  if (!m) {
    fprintf(stderr, "FAIL bucket %s: does not compile\n", bucket);
    failures++;
    return;
  }
  int bn = 0, bt = 0;
  count_dp(m->graph, true, &bn, &bt);
  /* tiny has 12 gradient tensors per layer (qkv, o, fc, proj weights and biases, two norms) */
  bool ok = bt == 12 && (want_one ? bn == 1 : bn == 12);
  fprintf(stderr, "  bucket %-6s: %d dp all-reduce(s) for %d layer gradients inside the backward loop\n", bucket, bn,
          bt);
  if (!ok) {
    fprintf(stderr, "FAIL bucket %s: want %s\n", bucket, want_one ? "1 bucket of 12" : "12 of 1");
    failures++;
  }
  arena_free(&a);
}

/* ZeRO (passes/zero.c): optimizer states split over dp; whole: how many updates kept their state whole. */
static int count_dp_scatters(const Graph *g) {
  int c = 0;
  for (int i = 0; i < g->nnodes; i++) {
    c += g->nodes[i]->op == OP_REDUCE_SCATTER && g->nodes[i]->a.mesh_axis == RT_AX_DP;
    if (g->nodes[i]->body) c += count_dp_scatters(g->nodes[i]->body);
  }
  return c;
}

static void count_zero(const Graph *g, int *split_states, int *whole, int *gathers, int *split_params) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op == OP_PARAM)
      for (int d = 0; d < n->out[0]->shape.rank; d++) *split_params += n->out[0]->sharding.split[d] == RT_AX_DP;
    if (n->op == OP_STATE) {
      bool split = false;
      for (int d = 0; d < n->out[0]->shape.rank; d++) split |= n->out[0]->sharding.split[d] == RT_AX_DP;
      *split_states += split;
      *whole += !split;
    }
    *gathers += n->op == OP_ALL_GATHER && n->a.mesh_axis == RT_AX_DP;
    if (n->body) {
      int s2 = 0, w2 = 0, p2 = 0;
      count_zero(n->body, &s2, &w2, gathers, &p2);
    }
  }
}

/* Updates in host memory (offload): adamw/sgd updates whose outputs are host values, and to_host copies. */
static void count_host(const Graph *g, int *updates, int *copies) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    *updates += (n->op == OP_ADAMW_UPDATE || n->op == OP_SGD_UPDATE) && n->out[0]->host;
    *copies += n->op == OP_TO_HOST;
  }
}

static void run_model(const char *label, const char *path, const FeDefine *defs, int ndefs, int64_t B, int64_t S,
                      int64_t V, int maxtp, int zero, bool offload) {
  if (zero) fprintf(stderr, "%s, zero %d%s\n", label, zero, offload ? " offload (CUDA target, f32)" : "");
  else fprintf(stderr, "%s\n", label);
  Arena ra;
  arena_init(&ra);
  Module *ref = compile(&ra, path, defs, ndefs, 1, 1, false, B, 0, CPU_F32);
  if (!ref) {
    fprintf(stderr, "FAIL %s: the single-rank program does not compile\n", label);
    failures++;
    return;
  }
  Tensor tok = tb_randint(tb_shape(2, (int)B, (int)S), 101, 0, V);
  Tensor tgt = tb_randint(tb_shape(2, (int)B, (int)S), 102, 0, V);
  tgt.data[3] = -1; /* an ignored position: the loss is a mean over the others, on every layout */
  for (int dp = 1; dp <= 4; dp *= 2)
    for (int tp = 1; tp <= maxtp; tp *= 2)
      for (int sp = 0; sp <= (tp > 1); sp++) {
        if (dp * tp == 1 || dp * tp > 8) continue;
        char what[64];
        if (zero && dp == 1) continue;
        snprintf(what, sizeof what, "dp %d x tp %d%s zero %d", dp, tp, sp ? " sp" : "", zero);
        Arena pa;
        arena_init(&pa);
        Module *pm = compile(&pa, path, defs, ndefs, dp, tp, sp, B, zero, offload ? CUDA_OFFLOAD : CPU_F32);
        if (!pm) {
          fprintf(stderr, "FAIL %s %s: does not compile\n", label, what);
          failures++;
          arena_free(&pa);
          continue;
        }
        if (sp && !strstr(label, "replicates attention")) { /* sp: every activation the forward loop saves is split over tp */
          for (int i = 0; i < pm->graph->nnodes; i++) {
            const Node *r = pm->graph->nodes[i];
            if (r->op != OP_REPEAT || r->a.reverse) continue;
            for (int o = r->a.ncarry; o < r->nout; o++) {
              bool split = false;
              for (int d = 0; d < r->out[o]->shape.rank; d++) split |= r->out[o]->sharding.split[d] == RT_AX_TP;
              if (!split) {
                fprintf(stderr, "FAIL %s %s: saved activation %%%d is not split over tp\n", label, what, r->out[o]->id);
                failures++;
              }
            }
          }
        }
        if (zero) failures += tb_check_scatters_deferred(pm, what); /* (passes/zero_defer.c) */
        if (zero) {
          int split = 0, whole = 0, gathers = 0, params = 0;
          count_zero(pm->graph, &split, &whole, &gathers, &params);
          fprintf(stderr, "  %-34s %d optimizer states split over dp, %d whole, %d parameters split, %d all-gathers\n",
                  what, split, whole, params, gathers);
          /* ZeRO-3: parameters stored split over dp (the uneven model under dp 4 x tp 2 has none it
             can split: its two split states' gradients are not reduced by a plain dp all-reduce) */
          bool want_params = zero >= 3 && !(strstr(label, "uneven") && dp == 4 && tp == 2);
          if (want_params != (params > 0)) {
            fprintf(stderr, "FAIL %s %s: zero %d stores %d parameters split over dp\n", label, what, zero, params);
            failures++;
          }
          if (split == 0 || gathers == 0) {
            fprintf(stderr, "FAIL %s %s: zero %d split no optimizer state\n", label, what, zero);
            failures++;
          }
          /* ZeRO-2: gradients reduce-scattered over dp (the uneven model under dp 4 x tp 2 sp has
             none to scatter: its two split states' gradients are reduced over dp and then tp) */
          int scatters = count_dp_scatters(pm->graph);
          bool want = zero >= 2 && !(strstr(label, "uneven") && dp == 4 && sp);
          if (want != (scatters > 0)) {
            fprintf(stderr, "FAIL %s %s: zero %d has %d gradient reduce-scatters over dp\n", label, what, zero,
                    scatters);
            failures++;
          }
        }
        if (offload) {
          int hu = 0, hc = 0, nu = 0, nc = 0;
          count_host(pm->graph, &hu, &hc);
          count_host(ref->graph, &nu, &nc);
          fprintf(stderr, "  %-34s %d updates in host memory, %d device->host copies\n", what, hu, hc);
          if (hu == 0 || hc == 0 || nu != 0) {
            fprintf(stderr, "FAIL %s %s: offload moved %d updates to the host (the reference %d)\n", label, what, hu, nu);
            failures++;
          }
        }
        int ncoll = count_colls(pm->graph);
        if (ncoll == 0) {
          fprintf(stderr, "FAIL %s %s: no collectives\n", label, what);
          failures++;
        }
        int waits = waits_in_loops(pm->graph);
        if (waits) {
          fprintf(stderr, "FAIL %s %s: %d blocking collectives in loops wait for an asynchronous gradient sum\n", label,
                  what, waits);
          failures++;
        }
        failures += tb_equiv_steps(ref, pm, &tok, &tgt, &tok, &tgt, label, what, TOL, true);
        arena_free(&pa);
      }
  tensor_free(&tok);
  tensor_free(&tgt);
  arena_free(&ra);
}

/* A layer gradient reduce-scattered after its backward loop: a top-level reduce_scatter of a loop's
 * stacked output, or of its cast (bf16 compute: the f32 copy). */
static int scatters_after_loops(const Graph *g) {
  int c = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op != OP_REDUCE_SCATTER) continue;
    for (int j = 0; j < n->nin; j++) {
      const Node *src = n->in[j]->def;
      if (src->op == OP_CAST) src = src->in[0]->def;
      c += src->op == OP_REPEAT;
    }
  }
  return c;
}


/* Two steps of programs a and b (the same ranks) on one random batch, compared after each within tol
 * (tb_compare_runs); an interpreter error is a failure. Returns the failures. */
static int run_pair(const Module *a, const Module *b, int64_t B, int64_t S, int64_t V, const char *what, double tol) {
  int fails = 0;
  Tensor tok = tb_randint(tb_shape(2, (int)B, (int)S), 101, 0, V), tgt = tb_randint(tb_shape(2, (int)B, (int)S), 102, 0, V);
  Interp *ia = interp_new(a->graph, a->mesh, 7), *ib = interp_new(b->graph, b->mesh, 7);
  for (int step = 1; step <= 2; step++) {
    tb_feed_step(ia, &tok, &tgt, step);
    tb_feed_step(ib, &tok, &tgt, step);
    if (!interp_step(ia) || !interp_step(ib)) {
      fprintf(stderr, "FAIL %s: interpreter error at step %d\n", what, step);
      fails++;
      break;
    }
    fails += tb_compare_runs(a->graph, ia, ib, what, step, tol, false);
  }
  interp_free(ia);
  interp_free(ib);
  tensor_free(&tok);
  tensor_free(&tgt);
  return fails;
}

/* ZeRO-2/3 at one micro-step (no accumulation), bf16 compute: the backward loop's layer gradients are
 * reduce-scattered inside it, each right after it is made (its f32 cast moved into the loop with it:
 * passes/sums.c), not after the loop, where the whole model's unreduced f32 gradient (and its bf16
 * stack) would live at once (Llama-3-405B dp 1024 tp 2 z3 rc full: 790 GiB). */
static void check_scatters_in_loop(const Module *m, const char *what, int zero) {
  int after = scatters_after_loops(m->graph), in = tb_dp_scatters_in_loops(m->graph);
  if (after || !in) {
    fprintf(stderr, "FAIL %s (zero %d): %d layer gradients reduce-scattered after their loop, %d scatters in loops\n",
            what, zero, after, in);
    failures++;
  }
}

/* ZeRO-3 (the parameters stored split, each layer's gathered one iteration ahead: passes/zero.c's
 * prefetch) against ZeRO-2 (the parameters whole) on the same ranks: the gathers copy exactly and
 * the arithmetic is the same, so every result is bit-identical (tolerance 0) where both split each
 * parameter along the same dim. (Tiny in bf16 was within 8.9e-16 while its layer gradients were
 * scattered after the loop, ZeRO-2's and ZeRO-3's along different dims; both inside it now: exact.) */
static void zero3_exact(const char *label, const char *path, const FeDefine *defs, int ndefs, int64_t B, int64_t S,
                        int64_t V, int dp, int tp, int mode, double tol) {
  Arena a2, a3;
  arena_init(&a2);
  arena_init(&a3);
  char what[64];
  snprintf(what, sizeof what, "%s dp %d x tp %d%s zero 3 = zero 2", label, dp, tp, mode == CUDA_BF16 ? " bf16" : "");
  Module *z2 = compile(&a2, path, defs, ndefs, dp, tp, false, B, 2, mode);
  Module *z3 = compile(&a3, path, defs, ndefs, dp, tp, false, B, 3, mode);
  if (!z2 || !z3) {
    fprintf(stderr, "FAIL %s: does not compile\n", what);
    failures++;
  } else {
    int next = 0; /* the layer loops' next-row arguments (the prefetch) */
    for (int i = 0; i < z3->graph->nnodes; i++) {
      const Node *r = z3->graph->nodes[i];
      for (int k = 0; r->body && k < r->body->nargs; k++) next += r->body->args[k]->a.next;
    }
    if (mode == CUDA_BF16) check_scatters_in_loop(z2, what, 2), check_scatters_in_loop(z3, what, 3);
    failures += run_pair(z2, z3, B, S, V, what, tol);
    fprintf(stderr, "  %s: %d layer parameters gathered one layer ahead\n", what, next);
    if (next == 0) {
      fprintf(stderr, "FAIL %s: no layer parameter is prefetched\n", what);
      failures++;
    }
  }
  arena_free(&a2);
  arena_free(&a3);
}


/* ZeRO-3 with `coalesce on` (passes/zero_coalesce.c: a layer's gathers one all-gather, its
 * gradients' reduce-scatters one, packed rank-major, the gradients split along a later dim transposed;
 * ZeRO-2: the gradients' reduce-scatters alone, its parameters whole) against `coalesce off` (a
 * collective a tensor or bucket) on the same ranks: the copies are exact and each element's sum over
 * the ranks is the same, so every result is bit-identical (tolerance 0); the backward loop
 * reduce-scatters once with `on`, more than once with `off`. In f32 `on` is also compared with the
 * single-rank program (TOL, as run_model). */
static void coalesce_exact(const char *label, const char *path, const FeDefine *defs, int ndefs, int64_t B, int64_t S,
                           int64_t V, int dp, int tp, int zero, int mode) {
  Arena a0, a1, ar;
  arena_init(&a0);
  arena_init(&a1);
  arena_init(&ar);
  char what[128];
  snprintf(what, sizeof what, "%s dp %d x tp %d%s zero %d, coalesce on = off", label, dp, tp, mode == CUDA_BF16 ? " bf16" : "",
           zero);
  FeDefine d[MAXDEF];
  for (int i = 0; i < ndefs; i++) d[i] = defs[i];
  d[ndefs] = (FeDefine){"coalesce", "off"};
  Module *off = compile(&a0, path, d, ndefs + 1, dp, tp, false, B, zero, mode);
  d[ndefs] = (FeDefine){"coalesce", "on"};
  Module *on = compile(&a1, path, d, ndefs + 1, dp, tp, false, B, zero, mode);
  Module *ref = mode == CPU_F32 ? compile(&ar, path, defs, ndefs, 1, 1, false, B, 0, CPU_F32) : NULL;
  if (!off || !on || (mode == CPU_F32 && !ref)) {
    fprintf(stderr, "FAIL %s: does not compile\n", what);
    failures++;
  } else {
    int n_off = tb_dp_most_scatters_in_a_loop(off->graph), n_on = tb_dp_most_scatters_in_a_loop(on->graph);
    fprintf(stderr, "  %s: %d dp reduce-scatters in a backward loop's body (off: %d)\n", what, n_on, n_off);
    if (n_on != 1 || n_off < 2) {
      fprintf(stderr, "FAIL %s: %d dp reduce-scatters in a loop body with coalesce on (want 1), %d off (want > 1)\n", what,
              n_on, n_off);
      failures++;
    }
    failures += tb_check_scatters_deferred(on, what); /* (passes/zero_defer.c takes the coalesced one too) */
    failures += run_pair(off, on, B, S, V, what, 0.0);
    if (ref) {
      Tensor tok = tb_randint(tb_shape(2, (int)B, (int)S), 101, 0, V), tgt = tb_randint(tb_shape(2, (int)B, (int)S), 102, 0, V);
      char w1[160];
      snprintf(w1, sizeof w1, "dp %d x tp %d zero %d coalesce on = one rank", dp, tp, zero);
      failures += tb_equiv_steps(ref, on, &tok, &tgt, &tok, &tgt, label, w1, TOL, true);
      tensor_free(&tok);
      tensor_free(&tgt);
    }
  }
  arena_free(&a0);
  arena_free(&a1);
  arena_free(&ar);
}

int main(void) {
  const FeDefine tiny[] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "2"}};
  run_model("tiny byte-level GPT (vocab 256, tied head)", SHARDC_MODELS_DIR "/tiny.model", tiny, 4, 4, 8, 256, 4, 0, false);
  const FeDefine gpt2[] = {{"vocab_size", "200"}, {"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "2"}};
  run_model("GPT-2 shaped (vocab 200 padded to 256, tied head)", SHARDC_MODELS_DIR "/gpt2-124m.model", gpt2, 5, 4,
            8, 200, 4, 0, false);
  check_buckets(SHARDC_MODELS_DIR "/tiny.model", tiny, 4, 4, "25MiB", true);
  check_buckets(SHARDC_MODELS_DIR "/tiny.model", tiny, 4, 4, "16", false);
  /* 6 heads: tp 4 cannot split them, so attention runs replicated (a warning says so) */
  const FeDefine gpt2h6[] = {{"vocab_size", "200"}, {"seq", "8"}, {"d", "48"}, {"heads", "6"}, {"layers", "2"}};
  run_model("GPT-2 shaped, 6 heads (tp 4 replicates attention)", SHARDC_MODELS_DIR "/gpt2-124m.model", gpt2h6, 5, 4,
            8, 200, 4, 0, false);
  const FeDefine llama[] = {{"vocab", "128"}, {"seq", "8"},      {"d", "32"},  {"heads", "4"},
                            {"kv_heads", "2"}, {"layers", "2"}, {"ffn", "48"}};
  run_model("Llama shaped (RMSNorm, SwiGLU, RoPE, GQA, untied)", SHARDC_MODELS_DIR "/llama3-8b.model", llama, 7, 4, 8,
            128, 2, 0, false);
  /* ZeRO 1, 2 and 3: the same plans with the optimizer state (1), the gradients (2) and the
     parameters (3) split over dp (dp 2 and 4, tp 1 and 2, sp) */
  /* d 34, 2 heads: under dp 4 the [2, 34] and [2, 34, 102] tensors have no dim dp divides and keep
     their state whole next to split ones ([256, 34], [2, 34, 136]) */
  const FeDefine odd[] = {{"seq", "8"}, {"d", "34"}, {"heads", "2"}, {"layers", "2"}};
  for (int zero = 1; zero <= 3; zero++) {
    run_model("tiny byte-level GPT", SHARDC_MODELS_DIR "/tiny.model", tiny, 4, 4, 8, 256, 2, zero, false);
    run_model("Llama shaped", SHARDC_MODELS_DIR "/llama3-8b.model", llama, 7, 4, 8, 128, 2, zero, false);
    run_model("tiny, d 34 (uneven: some states whole)", SHARDC_MODELS_DIR "/tiny.model", odd, 4, 4, 8, 256, 2, zero, false);
  }
  zero3_exact("tiny", SHARDC_MODELS_DIR "/tiny.model", tiny, 4, 4, 8, 256, 2, 1, CPU_F32, 0.0);
  zero3_exact("Llama shaped", SHARDC_MODELS_DIR "/llama3-8b.model", llama, 7, 4, 8, 128, 2, 1, CPU_F32, 0.0);
  zero3_exact("Llama shaped", SHARDC_MODELS_DIR "/llama3-8b.model", llama, 7, 4, 8, 128, 4, 1, CPU_F32, 0.0);
  /* bf16 compute: the gathers move past the bf16 casts (each layer's bf16 copy gathered) */
  zero3_exact("tiny", SHARDC_MODELS_DIR "/tiny.model", tiny, 4, 4, 8, 256, 2, 1, CUDA_BF16, 0.0);
  zero3_exact("Llama shaped", SHARDC_MODELS_DIR "/llama3-8b.model", llama, 7, 4, 8, 128, 4, 1, CUDA_BF16, 0.0);
  /* coalesced (d 64: at tp 2 the layer's tensors are over ZeRO-3's persistence threshold, so split; the
   * row-split ones along their second dim, so transposed when packed and unpacked) */
  const FeDefine llama64[] = {{"vocab", "128"}, {"seq", "8"},      {"d", "64"},  {"heads", "4"},
                              {"kv_heads", "2"}, {"layers", "2"}, {"ffn", "96"}};
  coalesce_exact("Llama shaped, d 64", SHARDC_MODELS_DIR "/llama3-8b.model", llama64, 7, 4, 8, 128, 2, 2, 3, CPU_F32);
  coalesce_exact("Llama shaped, d 64", SHARDC_MODELS_DIR "/llama3-8b.model", llama64, 7, 4, 8, 128, 4, 2, 3, CPU_F32);
  coalesce_exact("Llama shaped, d 64", SHARDC_MODELS_DIR "/llama3-8b.model", llama64, 7, 4, 8, 128, 2, 2, 3, CUDA_BF16);
  /* ZeRO-2: the gradients' scatters alone (dp 2 x tp 2: 3 a layer, the row-split ones transposed; dp 2 x
   * tp 1: one 25 MiB bucket a layer, so a 64 KiB bucket, 3 a layer, each shard within the cap) */
  coalesce_exact("Llama shaped, d 64", SHARDC_MODELS_DIR "/llama3-8b.model", llama64, 7, 4, 8, 128, 2, 2, 2, CPU_F32);
  coalesce_exact("Llama shaped, d 64", SHARDC_MODELS_DIR "/llama3-8b.model", llama64, 7, 4, 8, 128, 2, 2, 2, CUDA_BF16);
  const FeDefine llama64b[] = {{"vocab", "128"}, {"seq", "8"}, {"d", "64"},  {"heads", "4"}, {"kv_heads", "2"},
                               {"layers", "2"},  {"ffn", "96"}, {"bucket", "64KiB"}};
  coalesce_exact("Llama shaped, d 64, bucket 64KiB", SHARDC_MODELS_DIR "/llama3-8b.model", llama64b, 8, 4, 8, 128, 2, 1, 2,
                 CPU_F32);
  /* offload: the update of every parameter in host memory (CUDA target), the same arithmetic */
  run_model("tiny byte-level GPT", SHARDC_MODELS_DIR "/tiny.model", tiny, 4, 4, 8, 256, 2, 1, true);
  run_model("Llama shaped", SHARDC_MODELS_DIR "/llama3-8b.model", llama, 7, 4, 8, 128, 2, 2, true);
  run_model("tiny, d 34 (uneven: some states whole)", SHARDC_MODELS_DIR "/tiny.model", odd, 4, 4, 8, 256, 2, 3, true);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  fprintf(stderr, "every plan equals the single-rank program\n");
  return 0;
}
