/* tests/report/test_comm_volumes.c — the communication report against the textbook volumes.
 *
 * GPT-2-shaped models through the whole pipeline (the verify pass included), then
 * ir_comm_volumes, with exact byte counts (one step = one micro-batch of b sequences of s
 * tokens, hidden size h, L layers, f32: 4 bytes an element):
 *   dp only: the backward all-reduces over dp carry every gradient once: bytes = parameters x 4,
 *     bus traffic 2(N-1)/N x that; the forward's one all-reduce is the loss (sum, count): 8 B.
 *   tp only, sp off, heads divisible by tp: inside the layer loop 4 all-reduces of b*s*h per
 *     layer (2 forward: attention and MLP outputs; 2 backward: their input gradients) and
 *     nothing else; outside it the vocab-parallel embedding (b*s*h) and the cross-entropy's max
 *     (b*s) and sums (2*b*s) forward, the head's input gradient (b*s*h) backward.
 *   sp on: each of those all-reduces becomes a reduce-scatter plus an all-gather of the same
 *     b*s*h buffer, the same bus traffic ((N-1)/N twice = 2(N-1)/N); the backward also
 *     all-gathers the saved sequence shards once more per matmul for the weight gradients
 *     (2 per layer), and all-reduces the norm and bias gradients, which are partial over the
 *     sequence split (6 vectors of h per layer, 2 for the final norm, the s x h position table).
 *   cp, ring and all2all: the attention's traffic (cp_only below).
 * Exits 1 on any mismatch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commreport.h"
#include "diag.h"
#include "frontend.h"
#include "pipeline.h"
#include "print.h"

#define MAXDEF 16

static int failures;

static void eq(const char *what, double got, double want) {
  if (got != want) {
    fprintf(stderr, "FAIL %s: %.17g, want %.17g\n", what, got, want);
    failures++;
  }
}

static const char *topology_file; /* NULL: the model's own (one p4d node) */

static Module *compile(Arena *a, const FeDefine *defs, int ndefs, int dp, int tp, int cp, bool sp, int64_t b) {
  FeDefine d[MAXDEF];
  int n = 0;
  char sdp[16], stp[16], scp[16], smb[16], sb[16];
  for (int i = 0; i < ndefs; i++) d[n++] = defs[i];
  snprintf(sdp, sizeof sdp, "%d", dp);
  snprintf(stp, sizeof stp, "%d", tp);
  snprintf(smb, sizeof smb, "%lld", (long long)b);
  snprintf(sb, sizeof sb, "%lld", (long long)b * dp);
  d[n++] = (FeDefine){"dp", sdp};
  d[n++] = (FeDefine){"tp", stp};
  snprintf(scp, sizeof scp, "%d", cp);
  d[n++] = (FeDefine){"cp", scp};
  d[n++] = (FeDefine){"sp", sp ? "on" : "off"};
  d[n++] = (FeDefine){"micro_batch", smb};
  d[n++] = (FeDefine){"batch", sb};
  d[n++] = (FeDefine){"zero", "0"};
  FeOptions o = {.defines = d, .ndefines = n, .world = dp * tp * cp, .topology_file = topology_file};
  Module *m = fe_compile(a, SHARDC_MODELS_DIR "/gpt2-124m.model", &o);
  if (!m) die("the model does not compile");
  PipelineOptions po = {.verify = true};
  if (!pipeline_run(m, &po)) die("the pipeline failed");
  return m;
}

static const CommCell *cell(const CommVolumes *v, int ax, int r, int k) { return &v->cell[ax][r][k]; }
static const CommCell *rep(const CommVolumes *v, int ax, int r, int k) { return &v->in_repeat[ax][r][k]; }

/* Everything over `ax` except the listed (region, kind) cells must be empty. */
static void only(const char *what, const CommVolumes *v, int ax, const int (*allowed)[2], int nallowed) {
  for (int r = 0; r < CR_COUNT; r++)
    for (int k = 0; k < CK_COUNT; k++) {
      bool ok = false;
      for (int i = 0; i < nallowed; i++) ok |= allowed[i][0] == r && allowed[i][1] == k;
      if (!ok && v->cell[ax][r][k].count) {
        fprintf(stderr, "FAIL %s: unexpected %lld %s %s over %s\n", what, (long long)v->cell[ax][r][k].count,
                ir_comm_region_names[r], ir_comm_kind_names[k], rt_mesh_axis_name(ax));
        failures++;
      }
    }
}

static void dp_only(const char *label, const FeDefine *defs, int ndefs, int dp, int64_t b) {
  Arena a;
  arena_init(&a);
  Module *m = compile(&a, defs, ndefs, dp, 1, 1, false, b);
  CommVolumes v;
  ir_comm_volumes(m, &v);
  double grad = (double)ir_param_count(m) * 4, n = dp;
  char w[160];
  snprintf(w, sizeof w, "%s dp %d: backward dp all_reduce bytes = parameters x 4", label, dp);
  eq(w, (double)cell(&v, RT_AX_DP, CR_BACKWARD, CK_ALL_REDUCE)->bytes, grad);
  snprintf(w, sizeof w, "%s dp %d: backward dp bus traffic = 2(N-1)/N x gradient bytes", label, dp);
  eq(w, cell(&v, RT_AX_DP, CR_BACKWARD, CK_ALL_REDUCE)->bus_bytes, 2 * (n - 1) / n * grad);
  snprintf(w, sizeof w, "%s dp %d: forward dp all_reduce = the loss (sum, count)", label, dp);
  eq(w, (double)cell(&v, RT_AX_DP, CR_FORWARD, CK_ALL_REDUCE)->bytes, 8);
  eq(w, (double)cell(&v, RT_AX_DP, CR_FORWARD, CK_ALL_REDUCE)->count, 1);
  static const int allowed[][2] = {{CR_FORWARD, CK_ALL_REDUCE}, {CR_BACKWARD, CK_ALL_REDUCE}};
  only(label, &v, RT_AX_DP, allowed, 2);
  only(label, &v, RT_AX_TP, NULL, 0);
  snprintf(w, sizeof w, "%s dp %d: every byte on the in-node link", label, dp);
  eq(w, v.side_bus_bytes[0], v.total_bus_bytes);
  fprintf(stderr, "  %-28s dp %d: %lld parameters, dp all-reduce %lld B in %lld bucket(s), bus %.0f B per rank\n",
          label, dp, (long long)ir_param_count(m), (long long)cell(&v, RT_AX_DP, CR_BACKWARD, CK_ALL_REDUCE)->bytes,
          (long long)cell(&v, RT_AX_DP, CR_BACKWARD, CK_ALL_REDUCE)->count,
          cell(&v, RT_AX_DP, CR_BACKWARD, CK_ALL_REDUCE)->bus_bytes);
  arena_free(&a);
}

/* tp with sp off and on; returns nothing, asserts per layer and outside the loop. */
static void tp_only(const char *label, const FeDefine *defs, int ndefs, int tp, int64_t b, int64_t s, int64_t h,
                    int64_t L) {
  double bsh = (double)(b * s * h) * 4, bs = (double)(b * s) * 4, n = tp;
  double ar = 2 * (n - 1) / n, half = (n - 1) / n;
  char w[200];
  /* sp off */
  Arena a;
  arena_init(&a);
  Module *m = compile(&a, defs, ndefs, 1, tp, 1, false, b);
  CommVolumes v;
  ir_comm_volumes(m, &v);
  for (int r = CR_FORWARD; r <= CR_BACKWARD; r++) {
    const char *rn = ir_comm_region_names[r];
    snprintf(w, sizeof w, "%s tp %d: %s all_reduces in the layer loop = 2 per layer", label, tp, rn);
    eq(w, (double)rep(&v, RT_AX_TP, r, CK_ALL_REDUCE)->count, 2.0 * L);
    snprintf(w, sizeof w, "%s tp %d: %s layer-loop all_reduce bytes = 2 L b s h x 4", label, tp, rn);
    eq(w, (double)rep(&v, RT_AX_TP, r, CK_ALL_REDUCE)->bytes, 2.0 * L * bsh);
    eq(w, rep(&v, RT_AX_TP, r, CK_ALL_REDUCE)->bus_bytes, ar * 2.0 * L * bsh);
    for (int k = 0; k < CK_COUNT; k++)
      if (k != CK_ALL_REDUCE && rep(&v, RT_AX_TP, r, k)->count) {
        fprintf(stderr, "FAIL %s tp %d: %s %s in the layer loop\n", label, tp, rn, ir_comm_kind_names[k]);
        failures++;
      }
  }
  snprintf(w, sizeof w, "%s tp %d: forward outside the loop = embedding b s h + cross-entropy max b s + sums 2 b s",
           label, tp);
  eq(w, (double)(cell(&v, RT_AX_TP, CR_FORWARD, CK_ALL_REDUCE)->bytes - rep(&v, RT_AX_TP, CR_FORWARD, CK_ALL_REDUCE)->bytes),
     bsh + bs + 2 * bs);
  eq(w, (double)(cell(&v, RT_AX_TP, CR_FORWARD, CK_ALL_REDUCE)->count - rep(&v, RT_AX_TP, CR_FORWARD, CK_ALL_REDUCE)->count),
     3);
  snprintf(w, sizeof w, "%s tp %d: backward outside the loop = the head's input gradient b s h", label, tp);
  eq(w,
     (double)(cell(&v, RT_AX_TP, CR_BACKWARD, CK_ALL_REDUCE)->bytes - rep(&v, RT_AX_TP, CR_BACKWARD, CK_ALL_REDUCE)->bytes),
     bsh);
  static const int allowed[][2] = {{CR_FORWARD, CK_ALL_REDUCE}, {CR_BACKWARD, CK_ALL_REDUCE}, {CR_OPTIMIZER, CK_ALL_REDUCE}};
  only(label, &v, RT_AX_TP, allowed, 3);
  double fwd_loop_bus = rep(&v, RT_AX_TP, CR_FORWARD, CK_ALL_REDUCE)->bus_bytes;
  fprintf(stderr, "  %-28s tp %d: per layer 2 + 2 all-reduces of %.0f B; forward %lld, backward %lld, optimizer %lld\n",
          label, tp, bsh, (long long)cell(&v, RT_AX_TP, CR_FORWARD, CK_ALL_REDUCE)->count,
          (long long)cell(&v, RT_AX_TP, CR_BACKWARD, CK_ALL_REDUCE)->count,
          (long long)cell(&v, RT_AX_TP, CR_OPTIMIZER, CK_ALL_REDUCE)->count);
  arena_free(&a);

  /* sp on */
  arena_init(&a);
  m = compile(&a, defs, ndefs, 1, tp, 1, true, b);
  ir_comm_volumes(m, &v);
  for (int k = CK_REDUCE_SCATTER; k <= CK_ALL_GATHER; k++) {
    const char *kn = ir_comm_kind_names[k];
    snprintf(w, sizeof w, "%s tp %d sp: forward %s in the layer loop = 2 per layer of b s h", label, tp, kn);
    eq(w, (double)rep(&v, RT_AX_TP, CR_FORWARD, k)->count, 2.0 * L);
    eq(w, (double)rep(&v, RT_AX_TP, CR_FORWARD, k)->bytes, 2.0 * L * bsh);
    eq(w, rep(&v, RT_AX_TP, CR_FORWARD, k)->bus_bytes, half * 2.0 * L * bsh);
  }
  snprintf(w, sizeof w, "%s tp %d sp: forward layer-loop reduce-scatter + all-gather traffic = the all-reduces'", label,
           tp);
  eq(w, rep(&v, RT_AX_TP, CR_FORWARD, CK_REDUCE_SCATTER)->bus_bytes + rep(&v, RT_AX_TP, CR_FORWARD, CK_ALL_GATHER)->bus_bytes,
     fwd_loop_bus);
  snprintf(w, sizeof w, "%s tp %d sp: no forward all-reduce in the layer loop", label, tp);
  eq(w, (double)rep(&v, RT_AX_TP, CR_FORWARD, CK_ALL_REDUCE)->count, 0);
  snprintf(w, sizeof w, "%s tp %d sp: backward layer-loop reduce-scatters = 2 per layer of b s h", label, tp);
  eq(w, (double)rep(&v, RT_AX_TP, CR_BACKWARD, CK_REDUCE_SCATTER)->count, 2.0 * L);
  eq(w, (double)rep(&v, RT_AX_TP, CR_BACKWARD, CK_REDUCE_SCATTER)->bytes, 2.0 * L * bsh);
  snprintf(w, sizeof w, "%s tp %d sp: backward layer-loop all-gathers = 2 per layer + 2 re-gathers for weight grads",
           label, tp);
  eq(w, (double)rep(&v, RT_AX_TP, CR_BACKWARD, CK_ALL_GATHER)->count, 4.0 * L);
  eq(w, (double)rep(&v, RT_AX_TP, CR_BACKWARD, CK_ALL_GATHER)->bytes, 4.0 * L * bsh);
  snprintf(w, sizeof w,
           "%s tp %d sp: backward all-reduce bytes = gradients partial over the sequence split: 6 h per layer "
           "(norms, biases), 2 h (final norm), s h (position table)",
           label, tp);
  eq(w, (double)cell(&v, RT_AX_TP, CR_BACKWARD, CK_ALL_REDUCE)->bytes, (6.0 * (double)L + 2 + (double)s) * (double)h * 4);
  snprintf(w, sizeof w, "%s tp %d sp: outside the loop: embedding reduce-scatter, head all-gather (forward)", label, tp);
  for (int k = CK_REDUCE_SCATTER; k <= CK_ALL_GATHER; k++) {
    eq(w, (double)(cell(&v, RT_AX_TP, CR_FORWARD, k)->count - rep(&v, RT_AX_TP, CR_FORWARD, k)->count), 1);
    eq(w, (double)(cell(&v, RT_AX_TP, CR_FORWARD, k)->bytes - rep(&v, RT_AX_TP, CR_FORWARD, k)->bytes), bsh);
  }
  snprintf(w, sizeof w, "%s tp %d sp: outside the loop: head reduce-scatter, embedding all-gather (backward)", label,
           tp);
  for (int k = CK_REDUCE_SCATTER; k <= CK_ALL_GATHER; k++) {
    eq(w, (double)(cell(&v, RT_AX_TP, CR_BACKWARD, k)->count - rep(&v, RT_AX_TP, CR_BACKWARD, k)->count), 1);
    eq(w, (double)(cell(&v, RT_AX_TP, CR_BACKWARD, k)->bytes - rep(&v, RT_AX_TP, CR_BACKWARD, k)->bytes), bsh);
  }
  snprintf(w, sizeof w, "%s tp %d sp: forward all-reduces = the cross-entropy's max and sums", label, tp);
  eq(w, (double)cell(&v, RT_AX_TP, CR_FORWARD, CK_ALL_REDUCE)->bytes, 3 * bs);
  fprintf(stderr, "  %-28s tp %d sp: per layer forward 2 reduce-scatter + 2 all-gather, backward 2 + 4, of %.0f B\n",
          label, tp, bsh);
  arena_free(&a);
}

/* dp 4 x tp 8 on four p4d nodes: tp inside a node on NVLink, dp across nodes on EFA, whose
 * 4 x 100 Gbit/s per node the node's 8 dp rings share. */
/* cp (sp off, MHA: K and V as wide as Q), per layer and step, K = b (s / cp) h x 4 bytes, P the
 * positions (s / cp int32s), H heads:
 *   ring: forward cp - 1 hops of K, V and P; backward cp - 1 hops of K, V, P and the dK, dV
 *     accumulators, and the accumulators' hop home; each hop a send and a recv (bytes counted at
 *     both, bus traffic at the send).
 *   all2all: forward q, k, v exchanged to heads and o and the lse (b H s / cp f32) back; backward
 *     q, k, v, o, lse, do to heads and dq, dk, dv back; (cp - 1) / cp of each leaves the rank.
 * Both on the cp group's link class, in the node. */
static void cp_only(const char *label, const FeDefine *defs, int ndefs, int cp, bool a2a, int64_t b, int64_t s,
                    int64_t h, int64_t H, int64_t L) {
  FeDefine d[MAXDEF];
  int n = 0;
  for (int i = 0; i < ndefs; i++) d[n++] = defs[i];
  d[n++] = (FeDefine){"cp_mode", a2a ? "all2all" : "ring"};
  Arena a;
  arena_init(&a);
  Module *m = compile(&a, d, n, 1, 1, cp, false, b);
  CommVolumes v;
  ir_comm_volumes(m, &v);
  double K = (double)(b * (s / cp) * h) * 4, P = (double)(s / cp) * 4, lse = (double)(b * H * (s / cp)) * 4;
  double hops = (double)(cp - 1) * (double)L, half = (double)(cp - 1) / cp;
  char w[160];
  const CommCell *f = cell(&v, RT_AX_CP, CR_FORWARD, a2a ? CK_ALL_TO_ALL : CK_SEND_RECV);
  const CommCell *bw = cell(&v, RT_AX_CP, CR_BACKWARD, a2a ? CK_ALL_TO_ALL : CK_SEND_RECV);
  const CommCell *other = cell(&v, RT_AX_CP, CR_FORWARD, a2a ? CK_SEND_RECV : CK_ALL_TO_ALL);
  double fb = a2a ? L * (4 * K + lse) : 2 * hops * (2 * K + P);
  double bb = a2a ? L * (8 * K + lse) : 2 * (hops * (4 * K + P) + L * 2 * K);
  snprintf(w, sizeof w, "%s cp %d %s: forward count", label, cp, a2a ? "all2all" : "ring");
  eq(w, (double)f->count, a2a ? 5.0 * L : 6 * hops);
  snprintf(w, sizeof w, "%s cp %d %s: forward bytes", label, cp, a2a ? "all2all" : "ring");
  eq(w, (double)f->bytes, fb);
  snprintf(w, sizeof w, "%s cp %d %s: forward bus traffic", label, cp, a2a ? "all2all" : "ring");
  eq(w, f->bus_bytes, a2a ? half * fb : fb / 2);
  snprintf(w, sizeof w, "%s cp %d %s: backward count", label, cp, a2a ? "all2all" : "ring");
  eq(w, (double)bw->count, a2a ? 9.0 * L : 2 * (5 * hops + 2.0 * L));
  snprintf(w, sizeof w, "%s cp %d %s: backward bytes", label, cp, a2a ? "all2all" : "ring");
  eq(w, (double)bw->bytes, bb);
  snprintf(w, sizeof w, "%s cp %d %s: backward bus traffic", label, cp, a2a ? "all2all" : "ring");
  eq(w, bw->bus_bytes, a2a ? half * bb : bb / 2);
  snprintf(w, sizeof w, "%s cp %d %s: the other mode's collective is absent", label, cp, a2a ? "all2all" : "ring");
  eq(w, (double)other->count, 0);
  snprintf(w, sizeof w, "%s cp %d: the cp group's link is the node's", label, cp);
  eq(w, v.link[RT_AX_CP], m->topo.intra.kind);
  eq(w, v.across_nodes[RT_AX_CP], false);
  fprintf(stderr, "  %-28s cp %d %-7s: forward %lld x %.0f B, backward %lld x %.0f B per rank per step\n", label, cp,
          a2a ? "all2all" : "ring", (long long)f->count, (double)f->bytes, (long long)bw->count, (double)bw->bytes);
  arena_free(&a);
}

/* pp 2 (dp 1, tp 1), M micro-batches of b sequences: per micro-batch one activation b s h x 4 bytes
 * forward (stage 0 to 1) and its gradient backward, each a send and a recv (bytes at both, bus
 * traffic at the send); a receive belongs to its send's region, so none is the optimizer's. A rank
 * runs one stage's side of each: the volumes are a stage's (stage 0: it sends forward, receives
 * backward; stage 1 the other way), not the two stages' summed. */
static void pp_only(const char *label, const FeDefine *defs, int ndefs, int64_t M, int64_t b, int64_t s, int64_t h) {
  FeDefine d[MAXDEF];
  int n = 0;
  char smb[16], sb[16], sm[16];
  for (int i = 0; i < ndefs; i++) d[n++] = defs[i];
  snprintf(smb, sizeof smb, "%lld", (long long)b);
  snprintf(sb, sizeof sb, "%lld", (long long)(b * M));
  snprintf(sm, sizeof sm, "%lld", (long long)M);
  d[n++] = (FeDefine){"pp", "2"};
  d[n++] = (FeDefine){"dp", "1"};
  d[n++] = (FeDefine){"microbatches", sm};
  d[n++] = (FeDefine){"micro_batch", smb};
  d[n++] = (FeDefine){"batch", sb};
  d[n++] = (FeDefine){"zero", "0"};
  FeOptions o = {.defines = d, .ndefines = n, .world = 2};
  Arena a;
  arena_init(&a);
  Module *m = fe_compile(&a, SHARDC_MODELS_DIR "/gpt2-124m.model", &o);
  if (!m) die("the model does not compile");
  PipelineOptions po = {.verify = true};
  if (!pipeline_run(m, &po)) die("the pipeline failed");
  CommVolumes v;
  ir_comm_volumes(m, &v);
  double bsh = (double)(b * s * h) * 4;
  char w[160];
  for (int r = CR_FORWARD; r <= CR_BACKWARD; r++) {
    const CommCell *c = cell(&v, RT_AX_PP, r, CK_SEND_RECV);
    snprintf(w, sizeof w, "%s pp 2 x %lld: %s send/recv = a send or a recv per micro-batch", label, (long long)M,
             ir_comm_region_names[r]);
    eq(w, (double)c->count, (double)M);
    eq(w, (double)c->bytes, (double)M * bsh);
    /* the stage's sends: forward on stage 0, backward on stage 1 */
    eq(w, c->bus_bytes, (r == CR_FORWARD) == (v.stage == 0) ? (double)M * bsh : 0);
  }
  snprintf(w, sizeof w, "%s pp 2 x %lld: one stage's volumes", label, (long long)M);
  eq(w, v.nstages, 2);
  eq(w, v.stage >= 0 && v.stage < 2, 1);
  snprintf(w, sizeof w, "%s pp 2 x %lld: no optimizer send/recv", label, (long long)M);
  eq(w, (double)cell(&v, RT_AX_PP, CR_OPTIMIZER, CK_SEND_RECV)->count, 0);
  fprintf(stderr, "  %-28s pp 2 x %lld: forward and backward %lld send/recv of %.0f B each\n", label, (long long)M,
          (long long)cell(&v, RT_AX_PP, CR_FORWARD, CK_SEND_RECV)->count, bsh);
  arena_free(&a);
}

/* ZeRO-3 under pp 2 (dp 2, CUDA target, bf16 compute), M micro-batches: a rank runs one stage's layer
 * loops, which per micro-batch gather each layer's bf16 weights once forward and once backward (the
 * cast of the shard is the shard of the cast, passes/zero.c) and reduce-scatter its f32 gradient once
 * (passes/zero_sums.c). Inside the loops, per step: 2 M x the stage's split layer weights in bf16
 * gathered, less the first row of each loop (gathered before it: the prefetch, passes/zero.c; a loop of
 * L rows gathers L, its last iteration gathers nothing — it gathered L + 1, its last iteration the
 * first row again, until the gather became `skiplast`), M x its layer parameters in f32 scattered.
 * (The report counted both stages' loops: twice that, read as f32 gathers and two scatters a
 * micro-step.) */
static void zero3_pp(const char *label, const FeDefine *defs, int ndefs, int64_t M) {
  FeDefine d[MAXDEF];
  int n = 0;
  char sm[16], sb[16];
  for (int i = 0; i < ndefs; i++) d[n++] = defs[i];
  snprintf(sm, sizeof sm, "%lld", (long long)M);
  snprintf(sb, sizeof sb, "%lld", (long long)(2 * M));
  d[n++] = (FeDefine){"pp", "2"};
  d[n++] = (FeDefine){"dp", "2"};
  d[n++] = (FeDefine){"microbatches", sm};
  d[n++] = (FeDefine){"micro_batch", "1"};
  d[n++] = (FeDefine){"batch", sb};
  d[n++] = (FeDefine){"zero", "3"};
  d[n++] = (FeDefine){"schedule", "1f1b"};
  FeOptions o = {.defines = d, .ndefines = n, .world = 4};
  Arena a;
  arena_init(&a);
  Module *m = fe_compile(&a, SHARDC_MODELS_DIR "/gpt2-124m.model", &o);
  if (!m) die("the model does not compile");
  m->target = TARGET_CUDA;
  PipelineOptions po = {.verify = true};
  if (!pipeline_run(m, &po)) die("the pipeline failed");
  CommVolumes v;
  ir_comm_volumes(m, &v);
  /* the stage's stacked layer parameters (S(pp) rows): all f32 gradients scattered; the ones stored
   * split over dp (ZeRO-3's, over its persistence threshold) gathered in bf16 */
  double f32 = 0, bf16 = 0, lst = 0; /* lst: a stage's layer rows */
  const Graph *g = m->graph;
  for (int i = 0; i < g->nnodes; i++) {
    const Value *p = g->nodes[i]->out[0];
    if (g->nodes[i]->op != OP_PARAM || p->shape.rank < 2 || p->sharding.split[0] != RT_AX_PP) continue;
    bool split = false;
    for (int k = 1; k < p->shape.rank; k++) split |= p->sharding.split[k] == RT_AX_DP;
    double whole = (double)ir_numel(&p->shape) * (split ? 2 : 1); /* the stage's rows, both dp shards */
    lst = (double)p->shape.dim[0];
    f32 += whole * 4;
    bf16 += split ? whole * 2 : 0;
  }
  char w[160];
  snprintf(w, sizeof w, "%s pp 2 dp 2 z3 x %lld: one stage's volumes", label, (long long)M);
  eq(w, v.nstages, 2);
  snprintf(w, sizeof w, "%s pp 2 dp 2 z3 x %lld: the layer loops' gathers = 2 M x the stage's bf16 weights but the first rows",
           label, (long long)M);
  eq(w, (double)(rep(&v, RT_AX_DP, CR_FORWARD, CK_ALL_GATHER)->bytes + rep(&v, RT_AX_DP, CR_BACKWARD, CK_ALL_GATHER)->bytes),
     2.0 * (double)M * bf16 * (lst - 1) / lst);
  snprintf(w, sizeof w, "%s pp 2 dp 2 z3 x %lld: a stage of 2 layer rows", label, (long long)M);
  eq(w, lst, 2);
  snprintf(w, sizeof w, "%s pp 2 dp 2 z3 x %lld: the layer loops' scatters = M x the stage's f32 parameters", label,
           (long long)M);
  eq(w, (double)(rep(&v, RT_AX_DP, CR_FORWARD, CK_REDUCE_SCATTER)->bytes +
                 rep(&v, RT_AX_DP, CR_BACKWARD, CK_REDUCE_SCATTER)->bytes),
     (double)M * f32);
  snprintf(w, sizeof w, "%s pp 2 dp 2 z3 x %lld: split weights found", label, (long long)M);
  eq(w, bf16 > 0, 1);
  fprintf(stderr, "  %-28s pp 2 dp 2 z3 x %lld: per step %.0f B gathered (bf16), %.0f B scattered (f32) in the loops\n",
          label, (long long)M, 2.0 * (double)M * bf16, (double)M * f32);
  arena_free(&a);
}

static void link_classes(void) {
  topology_file = SHARDC_MODELS_DIR "/topo/p4d-x4.topo";
  Arena a;
  arena_init(&a);
  Module *m = compile(&a, NULL, 0, 4, 8, 1, false, 4);
  CommVolumes v;
  ir_comm_volumes(m, &v);
  eq("p4d x4: tp link is nvlink", v.link[RT_AX_TP], LINK_NVLINK);
  eq("p4d x4: tp groups inside a node", v.across_nodes[RT_AX_TP], 0);
  eq("p4d x4: dp link is efa", v.link[RT_AX_DP], LINK_EFA);
  eq("p4d x4: dp groups across nodes", v.across_nodes[RT_AX_DP], 1);
  eq("p4d x4: one dp member per node", v.members_per_node[RT_AX_DP], 1);
  double dp_bus = 0, tp_bus = 0, dp_n = 0;
  for (int r = 0; r < CR_COUNT; r++)
    for (int k = 0; k < CK_COUNT; k++) {
      dp_bus += v.cell[RT_AX_DP][r][k].bus_bytes;
      tp_bus += v.cell[RT_AX_TP][r][k].bus_bytes;
      dp_n += (double)v.cell[RT_AX_DP][r][k].count;
    }
  eq("p4d x4: across-node traffic = the dp traffic", v.side_bus_bytes[1], dp_bus);
  eq("p4d x4: in-node traffic = the tp traffic", v.side_bus_bytes[0], tp_bus);
  /* all-reduces only: 2(N-1) = 6 latency steps of 15 us each, 8 rings on 4 x 12.5 GB/s */
  double want = dp_bus * 8 / (4 * 12.5e9) + dp_n * 6 * 15e-6, got = v.side_time_s[1];
  if (!(got > want * (1 - 1e-12) && got < want * (1 + 1e-12))) {
    fprintf(stderr, "FAIL p4d x4: efa time %.9g s, want %.9g s\n", got, want);
    failures++;
  }
  fprintf(stderr, "  gpt2-124m dp 4 x tp 8 on p4d x4: nvlink %.1f MiB ~%.2f ms, efa %.1f MiB ~%.2f ms per rank per step\n",
          v.side_bus_bytes[0] / 1048576, 1e3 * v.side_time_s[0], v.side_bus_bytes[1] / 1048576, 1e3 * v.side_time_s[1]);
  arena_free(&a);
  topology_file = NULL;
}

int main(void) {
  /* b 2, s 8, h 32, 4 heads, 2 layers; vocab 200 padded to 256 */
  const FeDefine small[] = {{"vocab_size", "200"}, {"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "2"}};
  fprintf(stderr, "GPT-2 shaped, h 32, 4 heads, 2 layers:\n");
  dp_only("small", small, 5, 2, 2);
  dp_only("small", small, 5, 4, 2);
  tp_only("small", small, 5, 2, 2, 8, 32, 2);
  tp_only("small", small, 5, 4, 2, 8, 32, 2);
  /* GPT-2 124M itself: dp 8 on one p4d node; and with 16 heads (so tp 8 splits them), tp 8 */
  fprintf(stderr, "GPT-2 124M (h 768, 12 layers, seq 1024):\n");
  dp_only("gpt2-124m", NULL, 0, 8, 4);
  const FeDefine h16[] = {{"heads", "16"}};
  tp_only("gpt2-124m, 16 heads", h16, 1, 8, 4, 1024, 768, 12);
  for (int cp = 2; cp <= 4; cp += 2) {
    cp_only("small", small, 5, cp, false, 2, 8, 32, 4, 2);
    cp_only("small", small, 5, cp, true, 2, 8, 32, 4, 2);
  }
  pp_only("small", small, 5, 4, 2, 8, 32);
  const FeDefine small4[] = {{"vocab_size", "200"}, {"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "4"}};
  zero3_pp("small, 4 layers", small4, 5, 4);
  link_classes();
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  fprintf(stderr, "the report's volumes are the textbook ones\n");
  return 0;
}
