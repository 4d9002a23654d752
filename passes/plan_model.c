/* passes/plan_model.c — the plan search's analytic memory and time model (see plan_model.h): a candidate's
 * estimate, from the figures plan_model_init.c reads off the base plan and calibrates (the pipeline's
 * schedules: plan_model_pp.c; ZeRO's dp collectives: plan_model_zero.c). */
#include "plan_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "commreport.h"
#include "diag.h"
#include "mesh.h"

#include "plan_model_int.h"
#include "plan_search.h"
#include "zero.h"

/* Activations a layer keeps per token for its backward, in units of hidden x the compute dtype's
 * bytes, as the memory plan has them (GPT-2 124M, bf16, one rank, 1-4 layers: none 16.0, selective
 * 11.0, full 1.0 — the layer's input; none and selective: the model's own, none_act_units and sel_act_units,
 * 16 and 11 for GPT-2, 17 and 12.5 for Llama-3-8B); with
 * tp and sp all of it is split, without sp the part outside the tp regions (layer norms, residuals:
 * about 4 units; full: the input) is not. */
static const double act_units[3] = {16.0, 1.0, 11.0}; /* RecomputeKind order: none, full, selective */
static const double act_rep_units[3] = {4.0, 1.0, 4.0};
enum { PM_HOLD_ALL = 1 << 30 }; /* estimate's hold: the layers of a stage W holds for (0: none; this: all) */

/* Bandwidth-bound bytes per token per layer (units of hidden x dtype bytes) and kernels per layer per
 * micro-step under each recompute mode, before calibration (only their ratios matter). The CPU target
 * [0]: selective re-runs the layer's elementwise ops, 1.6 x the bandwidth-bound time on tiny's CPU
 * trainer. The CUDA target [1], whose attention's scores never leave its kernels and whose fusions
 * take most of the rest: the compiled cost model's bandwidth-bound time in the layer loops, rc none :
 * selective : full, Llama-3-8B tp 8+sp 1 : 1.147 : 1.382, GPT-3 tp 8+sp 1 : 1.105 : 1.372, Llama-3-405B
 * tp 2+sp z3 1 : 1.02 (the CPU's 1 : 1.6 : 2 put the selective base's rc none candidates' step at 0.94-0.96
 * of the compiled once the attention's recompute was priced right). GPT-2 124M was 1 : 2.96 : 1.75 while its
 * selective and full layers lost the GEMMs' GELU and residual epilogues; they keep them now (passes/recompute.c
 * epi_keep, dgelu_first: the whole step's bandwidth-bound time 1 : 1.18 : 1.09). */
static const double mem_units[2][3] = {{40.0, 80.0, 64.0}, {40.0, 55.0, 44.0}};
static const double kern_layer[3] = {60.0, 85.0, 66.0};
enum { KERN_HEAD = 30, KERN_OPT_PER_TENSOR = 10 };

double plan_offload_time(double compute_s, double d2h_s, double host_s, double h2d_s, int n, bool sync) {
  if (sync) return d2h_s + host_s + h2d_s;
  double hidden = d2h_s < compute_s ? d2h_s : compute_s, each = n > 1 ? n : 1;
  return d2h_s - hidden + (host_s > h2d_s ? host_s + h2d_s / each : h2d_s + host_s / each);
}

double plan_zero_group(const PlanCand *c) { return (double)c->dp * c->cp; }

double plan_param_share(const Module *base, const PlanCand *c, double cb, bool *persistent) {
  double zg = plan_zero_group(c), z3 = c->zero >= 3 ? zg : 1;
  bool off = base->plan.offload;
  *persistent = false;
  if (base->target != TARGET_CUDA || cb >= 4 || (c->pp > 1 && c->zero < 3) || base->plan.weight_copy == WCOPY_PER_LAYER)
    return 1 / z3;
  if (off) { /* the masters on the host: the device holds the copies (ZeRO-3: split) */
    *persistent = true;
    return cb / 4 / z3;
  }
  if (c->zero >= 3 || c->pp > 1) return 1 / z3; /* (ZeRO-3 gathers the bf16 rows of a split cast per layer) */
  double copies = (c->zero >= 1 ? 1 / zg : 1) + cb / 4;
  *persistent = base->plan.weight_copy == WCOPY_PERSISTENT || copies < 1;
  return *persistent ? copies : 1;
}

/* The dp (dp x cp) group's ring: its ranks, its bandwidth and latency (across nodes when its ranks,
 * tp inside each, outgrow a node: the node's network shared by its ranks of the group). */
static int dp_link(const PlanCand *c, const CostDevice *dev, int dpn, double *bw, double *lat) {
  int n = c->dp * c->cp;
  bool dp_in = (double)c->tp * n <= dpn;
  double members = dp_in ? n : (c->tp >= dpn ? 1 : dpn / c->tp);
  *bw = dp_in ? dev->link[0].bytes_per_s : dev->link[1].bytes_per_s / ir_comm_link_share(dpn, true, (int)members);
  *lat = dp_in ? dev->link[0].latency_s : dev->link[1].latency_s;
  return n;
}

/* c's estimate with n[k] layers on (virtual) stage k (NULL: even). */
/* defer: whether the backward loops' scatter waits are deferred (zero_defers_scatters and zero_defer_taken,
 * plan_model_estimate's decision): their f32 inputs held through the body, the stall of the deferred waits.
 * stage_tot (uneven stages without chunks; else left alone): each stage's bytes at its own peak, as e->total
 * is the peak stage's (the memory plan's stage_peak, which pipe_balance_calibrate weighs). */
/* The share of a stage's layers whose W recomputes B's values (passes/recompute.c): 1 without the hold, 0 with
 * the whole hold, hold(N): its layers but the last N (recompute_split.c: a stage of lst layers). */
static double zb_unheld(const PlanEstimate *e, double lst) {
  if (!e->zbw_hold) return 1;
  return e->zbw_layers > 0 && lst > e->zbw_layers ? (lst - e->zbw_layers) / lst : 0;
}

/* cp ring (pp 1): the blocks in flight in a layer's backward beside what cp 1 holds there, K and V received and dK
 * and dV travelling back: 4 of the micro-batch's local tokens' K or V (kv: unit x PlanModel.qkv's share of them, a
 * hidden state's under MHA, GQA's fewer), / tp (their heads split). The compiled peak moves into that backward (tiny dp 2 cp 2 mb 16 on 4 CPU ranks
 * against dp 4 mb 8, the same tokens a rank: +3.0 units rc none, +3.1 selective; at cp 4 +5.0 and +3.1; rc full
 * +0 there, its peak at the loss; selective and full run the ring again in the backward: passes/recompute.c
 * ring_hops). all2all (Ulysses): its head-split attention holds no more than cp 1's (-1.9, +2.1, 0): 0. */
static double cp_ring_ws(bool ring, const PlanCand *c, double kv) { return ring ? 4 * kv / c->tp : 0; }

static void estimate(PlanModel *pm, const Module *base, const CostDevice *dev, const PlanCand *c, const int64_t *n,
                     bool defer, int hold, bool wcopy, PlanEstimate *e, double *stage_tot) {
  memset(e, 0, sizeof *e);
  double stage_x[RT_MAX_STAGES] = {0}, peak_x = -1; /* (each stage's most loaded position; the peak's) */
  e->defer = defer;
  e->zbw_hold = hold > 0;
  e->zbw_layers = hold > 0 && hold < PM_HOLD_ALL ? hold : 0;
  int r = (int)c->rec;
  int dpn = base->mesh && base->mesh->devices_per_node > 0 ? base->mesh->devices_per_node : 1;
  double tp = c->tp, pp = c->pp, L = pm->layers, d = pm->d, cb = pm->cb;
  double lst = L / pp;                            /* layers per stage (uneven: the slowest's, for time) */
  double rows = lst;                              /* layer rows per stage held (uneven: padded to the largest) */
  int nv = c->pp * (c->sched == SCHED_INTERLEAVED ? c->v : 1);
  double lmaxc = 0;                               /* uneven: the largest (virtual) stage's layers */
  if (n) {
    int cnt[RT_MAX_STAGES];
    for (int k = 0; k < nv; k++) lmaxc = fmax(lmaxc, (double)n[k]), cnt[k] = (int)n[k];
    lst = lmaxc * nv / c->pp;
    rows = nv > c->pp ? (double)rt_stage_local_rows(cnt, c->pp, nv / c->pp) : lmaxc;
  }
  double tok = (double)c->mb * pm->seq / c->cp;   /* tokens per micro-step per rank (before tp) */
  double accum = (double)c->accum;
  /* ---- memory ---- */
  double p_layer = pm->pl_split / tp + pm->pl_rep;   /* one layer's f32 parameters on a rank */
  double p_other = pm->po_split / tp + pm->po_rep;   /* outside the layers: held on every stage */
  double p_rank = p_layer * rows + p_other;
  double zg = plan_zero_group(c);                 /* ZeRO's group: dp, under cp dp x cp (passes/zero.c) */
  double zd2 = c->zero >= 2 ? zg : 1, zd1 = c->zero >= 1 ? zg : 1;
  bool persistent;
  double share = plan_param_share(base, c, pm->cb, &persistent);
  if (persistent && !wcopy && !base->plan.offload) persistent = false, share = 1; /* (the auto copies dropped) */
  e->wcopy = persistent;
  e->cls[MEM_PARAM] = p_rank * share;
  /* ZeRO-2/3: one layer unreduced (see `held` below for the deferred waits) */
  e->cls[MEM_GRAD] = p_rank / zd2 + (c->zero >= 2 ? p_layer : 0);
  e->cls[MEM_OPTIM] = base->plan.offload ? 0 : p_rank * pm->state_ratio / zd1; /* (offload: the host's) */
  double unit = tok * d * cb;                                    /* one hidden state of the micro-batch */
  /* ... and its K or V (GQA: kv heads; the cp ring passes them, Llama-3-405B's 1 / 16 of a hidden state) */
  double kvu = pm->qkv > d ? unit * (pm->qkv - d) / (2 * d) : unit;
  bool a2a = c->cp > 1 && base->plan.cp_mode == CP_ALL2ALL, ring = c->cp > 1 && !a2a; /* (cp's attention: which) */
  /* (under pp too: full keeps the layer's input per micro-batch in flight, GPT-2 at 16 and 32 layers pp 4, the
   * activations' slope a layer: 1.1 hidden states 1f1b, 1.5 interleaved; it was taken as 7.5, a pp 4 figure of
   * 2026-11-25: 1.42 x the compiled at 32 layers 1f1b, 3.3 x gpipe) */
  double au = r == RECOMPUTE_SELECTIVE ? sel_act_units(pm, a2a) : r == RECOMPUTE_NONE ? none_act_units(pm) : act_units[r];
  double per_layer = unit * (c->sp || tp == 1 ? au / tp : au / tp + act_rep_units[r] * (1 - 1 / tp));
  double none_l = unit * (c->sp || tp == 1 ? none_act_units(pm) / tp /* (rc none's: what a layer's backward reads) */
                                          : none_act_units(pm) / tp + act_rep_units[RECOMPUTE_NONE] * (1 - 1 / tp));
  double head = tok * (pm->vocab / tp * 4 + 2 * d * cb);         /* the logits in f32, the final norm */
  double copies = cb < 4 ? p_other / 2 : 0;                      /* the compute-precision copy of the embeddings */
  double gather = c->zero >= 3 ? 2 * p_layer * cb / 4 : 0;       /* ZeRO-3: a layer gathered, the next prefetched */
  /* ---- compute (the last stage: its layers and the head) per step ---- */
  const double *mu = mem_units[base->target == TARGET_CUDA];
  double rec_gemm = c->rec == RECOMPUTE_FULL ? 1 + pm->rc_gemm * pm->rc_epi / 3 : 1.0; /* (the forward's third, but its last matrix) */
  double gemm_layers = accum * tok / tp * 6 * pm->pl_mat * lst; /* the layers' GEMMs, once */
  /* each GEMM its FLOPs at gemm_flops and a fixed time (passes/cost_op.c): a layer's launches as the base plan's
   * compiled (pm->gemm_calls), the head's 3 (the logits, their input's and weight's gradients). (The fixed time
   * was taken from a "typical" GEMM, 2 tok d^2 / tp FLOPs: 3 x a GPT layer's launches, a mis-scaled share that
   * put GPT-3's mb 4 plans at 0.92 of the compiled step and its mb 2 at 0.96, the base's mb 1) */
  double fix = dev->gemm_flops > 0 ? dev->gemm_half_flops / dev->gemm_flops : 0;
  double gl_s = pm->k_gemm * (gemm_layers / dev->gemm_flops + accum * lst * pm->gemm_calls * fix); /* the layers' once */
  double head_g = pm->k_gemm * (tok / tp * 6 * pm->vocab * d / dev->gemm_flops + 3 * fix); /* a micro-batch's */
  e->gemm_s = gl_s * rec_gemm + accum * head_g;
  double attn_once = accum * lst * tok / tp * 7 * pm->seq * d;
  double attn_f = attn_once * (c->rec == RECOMPUTE_NONE ? 1 : 1 + pm->attn_fwd); /* (selective, full: the forward again) */
  e->attn_s = dev->attn_flops > 0 ? pm->k_attn * attn_f / dev->attn_flops : 0;
  double sp_div = c->sp || tp == 1 ? tp : 1;
  bool off = base->plan.offload;
  e->shard = p_rank / zd1;
  /* a micro-step's bytes per layer parameter: bf16 (the CUDA target), the weights' casts where they are made per layer in
   * the loops (passes/wcast.c: 4 B read and 2 written, forward and backward; not with the persistent copies, nor under
   * pp, whose casts are per step, nor ZeRO-3's gathered rows) and the f32 gradients of the tensors no weight-gradient
   * GEMM accumulates (passes/gacc.c: the norms', read and written); f32: 12 B (GPT-2 124M dp 8 mb 8 on an A100,
   * compiled: the per-layer casts 8.6 ms over the persistent copies' 49.8 a step, 11 B a parameter a micro-step; the
   * 18 B taken for every bf16 plan calibrated k_mem to its floor, 0.2, at a pipelined base; docs/planner.md "the
   * parameters' bytes") */
  double p_mat = fmin(p_layer, pm->pl_mat * 4 / tp); /* (f32 bytes: the layer's matrices on a rank) */
  bool wcast = base->target == TARGET_CUDA && !persistent && c->pp == 1 && c->zero < 3;
  /* ZeRO-2/3 at pp 1 scatter each layer's gradients in the loop making them: the weight-gradient GEMMs write them at
   * the compute precision (no f32 running sum to accumulate into: passes/gacc.c), cast to f32 for the scatter, 2 B
   * read and 4 written an element (Llama-3-8B tp 2+sp mb 2, compiled: 15 % of the bandwidth-bound time over ZeRO-1's,
   * which the model left out; under pp the stage's sums take them: zfold below) */
  bool gcast = base->target == TARGET_CUDA && cb < 4 && c->pp == 1 && c->zero >= 2;
  double pbytes = cb >= 4 ? p_layer * 12 / 4
                          : (wcast ? p_layer * 12 / 4 : 0) + (p_layer - p_mat) * 2 + (gcast ? p_mat * 6 / 4 : 0);
  double bytes = accum * (lst * unit * mu[r] / sp_div + lst * pbytes + tok * pm->vocab / tp * 4 * 4) +
                 (off ? 0 : e->shard * (1 + pm->state_ratio) * 3); /* (offload: the update is the host's) */
  e->mem_s = pm->k_mem * bytes / dev->bytes_per_s;
  /* recompute (selective or full) under cp ring re-runs the forward's ring in the backward: its combines and its hops
   * (cp - 1 of K and V more), passes/recompute.c ring_hops */
  bool ring_rc = ring && c->rec != RECOMPUTE_NONE;
  double hops = ring_rc ? 3 : 2; /* (B's K / V passes, F's 1) */
  double cp_f = 0, cp_b = 0; /* the CUDA target's ring, per layer and micro-batch (s): F's combines; B's sums */
  if (c->cp > 1 && base->target == TARGET_CUDA) {
    /* the ring's blocks run on the flash kernels (passes/cost_cuda.c), their scores never leave them: what is
     * bandwidth-bound is, in F, the combine of each block's output with the running one (attn_combine: two [tok,
     * d / tp] read, one written: cp - 1 a layer, again in B where recompute re-runs the ring) and, in B, each block's
     * dQ, dK and dV added to the running sums (cp - 1 a layer, [tok, qkv / tp]). Compiled, Llama-3-405B pp 1 tp 2+sp z3
     * rc full: cp 2 mb 4 over cp 1 mb 2 (the same micro-steps) +0.12 s; pp 2 tp 4+sp: cp 2 mb 2 over cp 1 mb 1 +0.22 s.
     * (120 B an element on cp merges a layer was taken, fitted to cp 2 over cp 1 at one micro-batch: twice the
     * micro-steps, whose ZeRO-3 gathers' copies were the difference; the cp rows of its search 1.07-1.17 of the
     * compiled step) */
    double el = (c->cp - 1) * tok / tp * cb * 3 / dev->bytes_per_s;
    cp_f = el * d;
    cp_b = el * ((ring_rc ? d : 0) + pm->qkv);
    e->mem_s += accum * lst * (cp_f + cp_b);
  } else if (c->cp > 1) { /* ring attention merges score blocks elementwise: every local query against the
                           * whole sequence, per head (d / 64), ~20 exp-loop elements each (tiny, cp 2: 4 x the time) */
    double el = accum * lst * tok / tp * pm->seq * (d / 64) * 20 * (ring_rc ? 4.0 / 3 : 1);
    double exp_s = cost_elem_s(base, dev, COST_EL_EXP);
    e->mem_s += exp_s > 0 ? el * exp_s : el * 4 / dev->bytes_per_s;
  }
  double kernels = accum * (lst * kern_layer[r] + KERN_HEAD) + (off ? 0 : pm->ntensors * KERN_OPT_PER_TENSOR / pp);
  e->kern_s = pm->k_kern * kernels * dev->op_overhead_s;
  e->compute_s = e->gemm_s + e->attn_s + e->mem_s + e->kern_s;
  /* ZeRO-3's collectives (hidden behind the compute above), and where passes/zero_coalesce.c coalesces
   * them, its copies' seconds (each gather point's, in the pipeline's F and B below) and the gathered
   * flat buffer: under pp the stages' peak is in the steady state, a layer loop's, beside it (Llama-3-405B
   * pp 2 cp 4: +2.2 GiB compiled); at pp 1 the peak (the last layer's activations) is not (dp 1024 tp 2
   * rc full mb 1: +3 MiB with `coalesce on`) */
  double copy_s = 0, bcopy_s = 0, flat = 0, gather_pt = 0;
  bool full = c->rec == RECOMPUTE_FULL, zb = c->sched == SCHED_ZB;
  /* a layer's compute a micro-step: its GEMMs, attention, elementwise bytes and kernels; the backward's
   * part (full recompute: the forward again in it); under zb W's, the weight-gradient GEMMs */
  double lay = (gl_s * rec_gemm + e->attn_s +
                pm->k_mem * accum * lst * unit * mu[r] / sp_div / dev->bytes_per_s +
                pm->k_kern * accum * lst * kern_layer[r] * dev->op_overhead_s) / (accum * lst);
  double fwd = lay / (full ? 4 : 3);
  if (c->dp > 1 && c->zero >= 3) {
    double bw, lat;
    int n = dp_link(c, dev, dpn, &bw, &lat);
    /* (under pp the pass's decision on the B, zb: W, loop's body, a chunk's layers, where the stall model
     * times it: a tensor list) */
    double body = c->pp <= 1 || !pm->nlt ? -1 : zb ? gl_s / (accum * lst) / 3 : lay - fwd;
    e->dp_s = zero3_coll_s(pm, base, dev, c, p_rank, p_layer, lst, n, bw, lat, dev->overlap * e->compute_s, defer, body, !zb,
                           lst / (c->sched == SCHED_INTERLEAVED ? c->v : 1), &copy_s, &bcopy_s, &flat, &gather_pt);
    if (c->pp > 1) gather += flat;
  }
  /* (the packed f32 gradient of coalesced scatters in `flat`: the backward loops', beside the gathers' whole) */
  double packed = flat - (copy_s > 0 ? p_layer * cb / 4 : 0);
  /* The deferred waits (`defer`: zero_defers_scatters and zero_defer_taken, plan_model_estimate; ZeRO-2/3,
   * under pp in the stages' B loops too): a backward layer loop's scatters waited in the next iteration, their f32 inputs live through the
   * whole body (passes/memplan_defer.c). A body makes its layer's gradients as it frees the layer's
   * activations (`none_l`: the whole layer's, recomputed or kept: rc none's units); waited in the iteration,
   * a gradient is live from where it is made to the iteration's end, so the body's peak (its activations
   * and the gradients made so far) is at its start or, where the layer's gradient outgrows its
   * activations, at its end; held through the body, the whole layer is live at the start too: the peak
   * grows by min(p_layer, none_l), not a layer (Llama-3-405B dp 1024 tp 2 z3 rc full mb 1, compiled: +3.8
   * GiB of the layer's 5.9; dp 256 tp 8+sp mb 8: +1.5 of 1.5). Where ZeRO-3's scatters are coalesced
   * (zero3_coll_s: the packed [group, N] f32 gradient in `flat`, beside the gathers' whole where copy_s)
   * the deferred input is that packed gradient, which without the deferral this model leaves out at pp 1
   * (made at the body's end): a layer (tp 2 `coalesce on`: +2.3-2.4 GiB over the plan without, which is
   * +5.5 over `coalesce off`); under pp `flat` counts it beside the stages' loops already, so the
   * deferral adds min(p_layer, none_l) there too (Llama-3-405B dp 128 pp 2 1f1b cp 2 z3, compiled with the
   * deferral over `defer_waits off`: tp 4+sp +1.3 GiB, tp 2+sp cp 4 +1.8; the whole layer: 3.0 and 5.9).
   * zb's W loop (its weight-gradient GEMMs alone) frees no layer's activations as it makes the gradients: its
   * deferred input is the packed gradient `flat` counts, as pp 1's is (Llama-3-8B dp 256 tp 2+sp pp 4 zb z3, the
   * last stage's W body compiled: 944 MiB deferred, 832 not, two 416 MiB layers' f32 gradients) */
  if (defer) {
    e->cls[MEM_GRAD] += packed > 0 && c->pp <= 1 ? p_layer : packed > 0 && zb ? 0 : fmin(p_layer, none_l);
  }
  /* the backward layer loop's iterations and their gradients' reduce-scatters (ZeRO-2/3:
   * zero_defers_scatters, the decision passes/zero_defer.c takes; under pp the stages' B, zb: W, loops,
   * below): scatter_stall (plan_model_zero.c), an iteration no shorter than the channel's work a layer
   * nor than its scatters' end. Before the deferral (each iteration waited at its end for its packed runs
   * through the last, under accumulation for the channel's end): Llama-3-405B dp 256 tp 8+sp z3 rc full
   * mb 8: 35 ms an iteration (the packed w_k and w_v after the MLP's and w_o's scatters), 4.4 s a step;
   * dp 1024 tp 2 mb 1 (2 micro-steps): 25 ms (9 scatters of 5.1 ms latency each queued past the compute).
   * ZeRO-2's scatters coalesced as ZeRO-3's (scatters_coalesce, the pass's decision with its exposure),
   * the copies in B; no packed buffer (compiled, Llama-3-405B dp 16 tp 8+sp pp 16 z2 and 8B dp 256 tp
   * 2+sp pp 4 z2 `coalesce on`: peak -0.25 GiB, +0). ZeRO-3's coalesced as zero3_coll_s decided (its
   * copies, bcopy_s, in the iteration's compute). */
  double stall = 0; /* a step's (pp: the slowest stage's, in its B or W instructions) */
  bool zstall = zero_defers_scatters(c->zero, c->dp * c->cp) && pm->nlt;
  int zn = 0;
  double zbw = 0, zlat = 0;
  if (zstall) zn = dp_link(c, dev, dpn, &zbw, &zlat);
  bool zpp = false; /* under pp: the stages' instructions hold the layers' dp collectives */
  if (c->pp <= 1 && zstall) { /* (waited in the iteration where not `defer`) */
    double ntp = full ? 6 : 4; /* (the backward's blocking tp collectives) */
    double b = lay - fwd + (ntp - 2) * ring_s(unit, 2, c->tp, dev->link[0].bytes_per_s, dev->link[0].latency_s);
    double ab = e->attn_s / (accum * lst) * 2.5 / (c->rec == RECOMPUTE_NONE ? 3.5 : 4.5);
    stall = scatter_stall(pm, base, dev, c, zn, zbw, zlat, p_layer, b, lay - fwd, full ? fwd : 0, ab, gather_pt, defer, lst,
                          accum * lst, &bcopy_s, NULL) * lst * accum;
  }
  double copy_pt = copy_s / (accum * lst * 2); /* a gather point's copies: a layer's in F, in B */
  double bcopy_pt = bcopy_s / (accum * lst);   /* a scatter point's: a layer's in B */
  /* ---- the pipeline's instructions (pp_key) ---- */
  double key[PP_KEYS] = {0}, xkey[PP_KEYS] = {0}, tf = 0, opt_s = 0; /* (xkey: key unrounded) */
  double lkey0[PP_KEYS] = {0}; /* zb's lists are made with every stage the slowest's (uneven: not its own
                                * first and last stages; the analytic lists are shared with the even
                                * stages': making them is the model's cost) */
  if (c->pp > 1) {
    /* a chunk's layers (lst / v of them) per micro-batch, their parts: the GEMMs a third each (dX in B,
     * dW in B, zb: in W; full recompute's forward again in B); attention's forward in F, its backward
     * (twice) in B (recompute: its forward again in B); the elementwise work half in F, half in B
     * (recompute's again in B); the weights read in F and in B, their gradient written in W (B), at the
     * compute precision; the kernel calls half in F, half in B; the tp collectives 2 in F, the rest in
     * B (cp's ring: one pass in F, two in B). The first stage's F and B: the embedding's lookup and
     * its gradient ([vocab / tp, d], made per micro-batch); the last stage's F: the head, the loss
     * and their gradient (its GEMMs, the logits in f32, KERN_HEAD calls). Between a stage's
     * instructions: the merge of a finished micro-batch (its layers' gradient cast to f32 and added,
     * the head's and embedding's too). Each receive: the link's latency and its bytes (a hidden state
     * of the micro-batch, / tp with sp) over its bandwidth, the node's network shared by the stage's
     * ranks on it when the stages' ranks are on different nodes (pp is the outermost axis). */
    double cv = c->v;
    double sa = dev->attn_flops > 0 ? pm->k_attn / dev->attn_flops : 0;
    double sm = pm->k_mem / dev->bytes_per_s, ko = pm->k_kern * dev->op_overhead_s;
    double el = sm * lst / cv * unit / sp_div, el0 = el * mu[RECOMPUTE_NONE], elr = el * mu[r];
    double wb = sm * p_layer * lst / cv / 4; /* per byte of a parameter at the compute precision */
    /* F's and B's weights read: f32 (bf16: cast once a step under pp, the GEMMs read the copies; GPT-3 pp 16's last
     * stage 0.45-0.75 s of bandwidth-bound work a step, 1.7 s of such reads in the model) */
    double wr = cb < 4 ? 0 : wb * cb;
    double kern = ko * lst / cv * kern_layer[r];
    double g1 = gl_s / accum / cv / 3, a1 = sa * attn_once / accum / cv;
    double ring = ring_s(unit, 2, c->tp, dev->link[0].bytes_per_s, dev->link[0].latency_s) * lst / cv;
    double ntp = c->rec == RECOMPUTE_FULL ? 6 : 4, cpr = 0;
    if (c->cp > 1) {
      bool cp_in = c->tp * c->cp <= dpn;
      const CostLink *l = &dev->link[cp_in ? 0 : 1];
      cpr = lst / cv * (c->cp - 1) * (2 * kvu / tp / (cp_in ? l->bytes_per_s : l->bytes_per_s / dpn) + l->latency_s);
    }
    double cpf = cp_f * lst / cv, cpb = cp_b * lst / cv; /* a chunk's ring combines (F) and sums (B) */
    tf = g1 + a1 * pm->attn_fwd + el0 / 2 + wr + kern / 2 + 2 * ring + cpr + cpf + copy_pt * lst / cv;
    double tb = g1 + g1 * 3 * (rec_gemm - 1) + a1 * (1 - pm->attn_fwd) + sa * (attn_f - attn_once) / accum / cv + el0 / 2 +
                (elr - el0) + wr + kern / 2 + (ntp - 2) * ring + hops * cpr + cpb + copy_pt * lst / cv;
    /* the chunk's layer gradients added to the stage's sums inside the loop making them (W under zb,
     * else B: passes/pipe_fold.c), a layer at a time: a matrix's by its weight-gradient GEMM, which
     * accumulates into the sum (passes/gacc.c: the sum's bytes in the GEMM's, one add kernel fewer),
     * the rest read and written (the gradient, just written, is read back from the cache) */
    double tw = g1 + wr + sm * (p_layer - p_mat) * lst / cv * 2 - ko * lst / cv * pm->nl_mat;
    if (c->sched != SCHED_ZB) tb += tw, tw = 0;
    else if (zb_unheld(e, lst) > 0) /* W recomputes its GEMMs' inputs (`zb_w`): the forward's GEMMs but the MLP's last
                                     * (pm->rc_gemm: GPT 8 of 12 d^2, Llama-3-8B 9.5 of 13) and attention; selective:
                                     * attention; hold(N): for the stage's layers not held */
      tw += zb_unheld(e, lst) * (c->rec == RECOMPUTE_FULL      ? pm->rc_gemm * pm->rc_epi * g1 + a1 * pm->attn_fwd
                                 : c->rec == RECOMPUTE_SELECTIVE ? a1 * pm->attn_fwd
                                                                 : 0);
    zpp = zstall && tf > 0;
    /* ZeRO-3's F loops gather the next layer as they run one, each gather's copies after it and the next
     * gather after them (no collective hidden by the copies): an iteration no shorter (Llama-3-405B dp 128
     * tp 4+sp pp 2 cp 2, compiled F 1.23 s a micro-batch of 63 layers, 17.2 + 2.4 ms a gather and its
     * copies; 0.90 s of compute) */
    if (zpp && c->zero >= 3) tf = fmax(tf + gather_pt, (gather_pt + copy_pt) * lst / cv); /* (its first in front) */
    if (!zpp) tb += bcopy_pt * lst / cv; /* (else in the loop stalled on the scatters, below) */
    /* the loops making the layer gradients (B; zb: W, its weight-gradient GEMMs alone, no gathers
     * before them) stalled on their scatters as pp 1's (scatter_stall), a layer of the instruction's
     * compute an iteration, the loop the chunk's layers; the coalesced scatters' copies in it (ZeRO-2's
     * decided there). Llama-3-405B dp 16 tp 8+sp pp 16 z2 (Meta's at zero 2): 32 ms a layer's B, compiled 31 */
    double tb0 = tb; /* (ZeRO-3: B's first gather in front of its loop, where the loop does not wait on the channel) */
    if (zpp) {
      double *ti = zb ? &tw : &tb, scopy = bcopy_s;
      double rec = zb ? 0 : (g1 * 3 * (rec_gemm - 1) + sa * (attn_f - attn_once) / accum / cv + (elr - el0) +
                             (ring_rc ? cpr + cpf : 0)) / (lst / cv); /* (the ring re-run: its hops, combines) */
      double bl = *ti / (lst / cv);
      double tail = 0;
      double st = scatter_stall(pm, base, dev, c, zn, zbw, zlat, p_layer, bl, bl, rec, zb ? 0 : a1 * (1 - pm->attn_fwd) / (lst / cv),
                                zb ? 0 : gather_pt, defer, lst / cv, accum * lst, &scopy, &tail);
      /* passes/zero.c packs the layer's f32 gradients into buckets for their scatters (a copy: twice a layer's
       * bytes, where zcoal does not coalesce them: else scopy holds its copies), and after the loop the stage's
       * sums take the shards (the shard, the sum read and written: 3 / the group) where ZeRO-1's accumulate in
       * their GEMMs; fitted on the compiled bandwidth-bound time over ZeRO-1's (GPT-3 tp 8+sp, not coalesced:
       * pp 16 int2 dp 2, pp 8 1f1b rc full dp 4 and 8: 2.98, 2.23 and 1.85 layers a layer and micro-batch,
       * 1.5 + 3 / dp: 3.0, 2.25, 1.875, within 1.4 %). The compiled figures': outside k_mem's calibration (zfold_s) */
      double zf = p_layer * ((scopy > 0 ? 0 : 1.5) + 3 / zg) * lst / cv / dev->bytes_per_s;
      e->zfold_s = zf * accum * cv;
      *ti += (st + scopy / (accum * lst)) * lst / cv + zf + tail; /* (tail: the instruction's last scatters, waited at its end) */
      bcopy_s = scopy;
      stall = st * lst * accum + tail * accum * cv;
      if (c->zero >= 3) tb = zb ? fmax(tb + gather_pt, (gather_pt + copy_pt) * lst / cv) : fmax(tb, tb0 + gather_pt);
    }
    double ze[3] = {0}; /* ZeRO-3: the head's and the embedding's gathers and scatters (zero3_pp_edges) */
    if (zpp) zero3_pp_edges(pm, c, zn, zbw, zlat, &ze[0], &ze[1], &ze[2]);
    double per = lst / cv; /* a chunk's layers */
    double emb = sm * (2 * unit + pm->vocab / tp * d * cb) + 4 * ko;
    double headf = head_g + sm * tok * pm->vocab / tp * 16 + ko * KERN_HEAD + 2 * ring * cv / lst;
    double merge = sm * pm->vocab / tp * d * (cb + 8) + 4 * ko; /* the head's and the embedding's gradients */
    int rps = c->dp * c->cp * c->tp;
    const CostLink *pl = &dev->link[rps >= dpn && dpn > 1 ? 1 : 0];
    double share = rps >= dpn && dpn > 1 ? dpn : 1;
    if (tf > 0) {
      double raw[PP_KEYS] = {[PK_B] = tb, [PK_W] = tw, [PK_F0] = sm * 2 * unit + 2 * ko + ze[0], [PK_B0] = emb + ze[1], [PK_FL] = headf + ze[2],
                             [PK_MERGE] = merge, [PK_LAT] = pl->latency_s,
                             [PK_RECV] = pl->bytes_per_s > 0 ? unit / (c->sp ? tp : 1) * share / pl->bytes_per_s : 0};
      /* the balance's layer as the stage pass prices it (passes/pipe_balance.c), before the recompute and ZeRO
       * passes: rc none's F and B (the weights read in each, B's GEMMs two thirds), no gathers nor their copies */
      double kern0 = ko * lst / cv * kern_layer[RECOMPUTE_NONE];
      double sf = g1 + a1 * pm->attn_fwd + el0 / 2 + wb * cb + kern0 / 2 + 2 * ring + cpr + cpf;
      double sb = 2 * g1 + a1 * (1 - pm->attn_fwd) + el0 / 2 + 2 * wb * cb + kern0 / 2 + 2 * ring + 2 * cpr + cpb - (ring_rc ? cpf : 0);
      e->bal_f = pm->k_bal[0] * sf / per, e->bal_b = pm->k_bal[1] * sb / per;
      /* (the ends' times as the stage pass's balance has them, without ZeRO-3's edges: balance_figures) */
      e->bal_f0 = pm->k_bal[2] * (raw[PK_F0] - ze[0]), e->bal_b0 = pm->k_bal[3] * (raw[PK_B0] - ze[1]);
      e->bal_fl = pm->k_bal[4] * (raw[PK_FL] - ze[2]);
      for (int i = 0; i < PP_KEYS; i++) lkey0[i] = pp_round(raw[i] / tf);
      if (n) { /* the first and the last stage hold their own layers, the others the slowest's */
        raw[PK_F0] += ((double)n[0] - lmaxc) * tf / per;
        raw[PK_B0] += ((double)n[0] - lmaxc) * tb / per;
        raw[PK_FL] += ((double)n[nv - 1] - lmaxc) * tf / per;
        raw[PK_BL] += ((double)n[nv - 1] - lmaxc) * tb / per;
      }
      for (int i = 0; i < PP_KEYS; i++) key[i] = pp_round(raw[i] / tf), xkey[i] = raw[i] / tf;
    }
    e->zb_b = key[PK_B], e->zb_w = key[PK_W];
    memcpy(e->pp_key, key, sizeof key);
    /* the balance's memory figures (plan_model_balance) as the stage pass's balance has them (balance_figures) */
    e->bal_act = none_l;
    e->bal_head = tok * pm->vocab / tp * cb + unit / sp_div;
    e->bal_bytes = p_layer * (e->cls[MEM_PARAM] + e->cls[MEM_GRAD] + e->cls[MEM_OPTIM]) / p_rank;
    if (c->bal && !n) return; /* (the figures the split is made from: no more) */
    /* after the last instruction: the optimizer's update (its bytes and calls) */
    opt_s = off ? 0 : sm * (p_rank / zd1) * (1 + pm->state_ratio) * 3 + ko * pm->ntensors * KERN_OPT_PER_TENSOR / pp;
  }
  if (c->pp > 1) { /* the schedule's in-flight loads (pp_profile) at their heaviest */
    const PpProfile *pr;
    const PpPlay *play = pp_profile(pm, c->sched, c->pp, (int)c->accum, c->v, key, lkey0, nv == c->pp ? n : NULL, &pr, true);
    e->bubble = play->bubble; /* the lists played with the stages' times */
    /* the play's keys are rounded to 1/16 (pp_round: the profiles and plays shared among candidates), B over F
     * by up to 6 % (GPT-3 dp 2 tp 8+sp pp 16 int2 mb 4: z1's 1.82 played as 1.875, z2's 2.12 as 2.0, its step 0.95
     * of the compiled): the span scaled by the last stage's busy time with the keys as they are over the play's */
    double busy = pp_busy_exact(pr, xkey);
    e->pp_span_s = play->span * (play->busy > 0 ? busy / play->busy : 1) * tf;
    e->pp_busy_s = busy * tf;
    double A = per_layer * lst / c->v;          /* a chunk's activations of one micro-batch */
    double ulay = 1;                            /* uneven: the layers in flight over the largest stage's */
    if (n) { /* uneven: the most loaded stage's activations in flight are the largest stage's of the
              * balance's (inflight x its layers, as pipe_balance_stage_bytes), spread over its loads */
      int *inf = pr->inflight, v = nv / c->pp, most_inf = 0;
      double most_act = 0;
      for (int st = 0; st < c->pp; st++) {
        double lay = 0;
        for (int k = 0; k < v; k++) lay += (double)n[k * c->pp + st];
        most_act = fmax(most_act, inf[st] * lay / v);
        most_inf = inf[st] > most_inf ? inf[st] : most_inf;
      }
      if (most_inf > 0) ulay = most_act / most_inf / (lst / c->v);
    }
    /* the head's (embedding's) gradient of one, as the ranks hold it until its merge (pp_grads_held): untied, its
     * f32 cast for the running sum (Llama-3-405B pp 32 zb cp 2 held 32 x 1002 MiB on its last stage until each
     * micro-batch's merge, the model priced 501 each: 0.81 of the compiled peak; merged at once since); tied, the
     * two stages' parts summed first in the compute precision, then cast (GPT-3's held matmul and embed_bwd outputs) */
    double H = pm->vocab / tp * d * (pm->tied ? cb : 4);
    GradsHeld gheld = pm->tied                                    ? GRADS_TIED
                      : c->zero < 2 || plan_zero_group(c) <= 1      ? GRADS_MERGED
                      : c->sched == SCHED_ZB                        ? GRADS_SCATTERED_ZB
                                                                    : GRADS_SCATTERED;
    /* zb: what B keeps for W besides the activations, its hand-off (the weight GEMMs' output gradients:
     * zb_handoff_units) and under recompute the GEMM inputs B's recompute made (zb_held_units) */
    double held = (1 - zb_unheld(e, lst)) * zb_held_units(pm, c->rec); /* (what B's recompute made for W; hold(N): its layers') */
    double S = unit * (zb_handoff_units(pm, tp, c->sp) + held / tp) * lst * ulay;
    /* (full recompute: F kept the layer's input alone, and what B recomputed is freed after B, so a micro-batch
     * awaiting W holds the input, A: Llama-3-8B tp 2+sp pp 4: 1 + 9 + 12.5 hidden states / tp a layer, 720 MiB,
     * as compiled) */
    /* zb: what of the forward's activations only B reads, freed at B's end: a micro-batch awaiting W holds A less
     * it, but for the stage's B just run (l->fresh: at its end its hand-off and its inputs are both live); W
     * recomputing from F's values (`zb_w recompute`, hold(N)'s others) reads more of them (zb_freed_units) */
    double zrep = 0, zf = c->sched == SCHED_ZB ? zb_freed_units(pm, c->rec, au, zb_unheld(e, lst), &zrep) : 0;
    double Fb = unit * (c->sp || tp == 1 || zf <= 0 ? zf / tp : (zf - zrep) / tp + zrep) * lst / c->v * ulay;
    A *= ulay;
    /* uneven stages without chunks: each stage's loads in flight priced with its own layers (spread over
     * every stage, the most loaded one's layers put the first stage's 16 micro-batches in flight at 8
     * layers, where it has 7: Llama-3-405B pp 16's [7, 8, ..., 8, 7], its embedding's 1.6 GiB on top,
     * 1.02 x the compiled 78.2 GiB, whose peak is stage 1's) */
    bool own = n && nv == c->pp && lst * ulay > 0;
    double perA = own ? A / (lst * ulay) : 0, perS = own ? S / (lst * ulay) : 0; /* (a layer's, of one micro-batch) */
    double perF = own ? Fb / (lst * ulay) : 0;
    /* the parameters outside the layers and their optimizer state: on their end stage alone
     * (passes/pipe_owners.c; their gradients' sums are every rank's), so the peak's stage's (Llama-3-405B
     * pp 16 z1: the embedding's and the head's 2 x 0.98 GiB f32 on every stage was 2.2 GiB over the
     * compiled 78.2 GiB, with their Adam moments) */
    double per_p = p_rank > 0 ? e->cls[MEM_PARAM] / p_rank : 0, per_o = p_rank > 0 ? e->cls[MEM_OPTIM] / p_rank : 0;
    /* (cv4: their compute-precision copies, as `copies`; ZeRO-3's of their shards: Llama-3-8B pp 4 z3, compiled, the
     * first stage's `tok_embeddings.bf16` 2.0 MiB of 501) */
    double pend[2], most = 0, cv4 = cb < 4 ? cb / 4 / (c->zero >= 3 ? zg : 1) : 0;
    for (int k = 0; k < 2; k++) pend[k] = pm->pe_split[k] / tp + pm->pe_rep[k];
    const PpLoad *peak = NULL;
    for (int i = 0; i < pr->n; i++) {
      const PpLoad *l = &pr->load[i];
      double As = own ? perA * (double)n[l->stage] : A, Ss = own ? perS * (double)n[l->stage] : S;
      double Fs = own ? perF * (double)n[l->stage] : Fb;
      double x = l->a * As + l->b * Ss - (l->b - l->fresh) * Fs + pp_grads_held(l, gheld) * H + l->lastf * head + (l->first * pend[0] + l->last * pend[1]) * (per_p + per_o + cv4);
      if (x > most || !peak) most = x, peak = l;
      if (own && l->stage < RT_MAX_STAGES && x > stage_x[l->stage]) stage_x[l->stage] = x;
    }
    if (own) peak_x = most;
    if (n && nv > c->pp && lst * ulay > 0) { /* interleaved uneven: each stage's loads with its own chunks' (each chunk's
                                             * forwards in flight with its layers), the peak the most loaded stage's */
      int at;
      peak_x = pp_stage_loads_v(pr, n, nv, c->pp, A / (lst * ulay), S / (lst * ulay), H, gheld, head, pend, per_p + per_o + cv4, stage_x, &at);
      if (at >= 0) most = peak_x, peak = &pr->load[at];
    }
    if (peak) {
      double held = p_layer * rows + peak->first * pend[0] + peak->last * pend[1];
      most -= (peak->first * pend[0] + peak->last * pend[1]) * (per_p + per_o);
      copies = (peak->first * pend[0] + peak->last * pend[1]) * cv4; /* its end's copies alone (in `most`: moved) */
      most -= copies;
      e->cls[MEM_PARAM] = held * per_p;
      e->cls[MEM_OPTIM] = held * per_o;
    }
    /* the stage's layer weights in the compute precision, cast once per step; ZeRO-3 gathers them a
     * layer at a time on every stage (even, uneven and interleaved: passes/zero.c moves the gathers
     * past the chunks' and stages' row slices), so it holds no whole copy */
    bool whole = c->zero < 3;
    double wcopy = cb < 4 && whole ? p_layer * rows * cb / 4 : 0;
    /* zb: the layer loops' ZeRO-3 gathers (F's, B's) and the loop making the layers' f32 gradients (W's: the
     * unreduced layer, the deferred one, the packed one) run at different positions of the same loads (B's end
     * holds what W's start does): the peak holds the larger of the two, not both (Llama-3-8B dp 256 tp 2+sp
     * pp 4 zb z3, the last stage compiled: inside B4 the loads and 690 MiB of gathered weights and B's work,
     * inside W1 the same loads, less what B freed, and 944 MiB of gradients; the model had 1040 + 853 MiB) */
    double gw = packed > 0 ? packed : 0; /* (the gradients' part of `gather`) */
    if (zb && c->zero >= 3 && gather > gw) {
      double wx = e->cls[MEM_GRAD] - p_rank / zd2 + gw; /* W's: the layer terms of MEM_GRAD and the packed one */
      gather = gw + fmax(0, gather - gw - wx);
    }
    /* full recompute: a B re-makes one layer's activations of its micro-batch beyond its input, the peak's working
     * set beside the loads; the last stage's peak is that or its head's logits (in its F), not both (compiled: tiny
     * 5 layers pp 2 gpipe z3 mb 16, 7.8 MiB, the layer's 4 MiB of activations at a B's; GPT-2 at the head) */
    double rebuilt = c->rec == RECOMPUTE_FULL && peak ? fmax(0, none_l - per_layer - (peak->last ? head : 0)) : 0;
    e->cls[MEM_ACT] = most + copies + gather + wcopy + rebuilt;
  } else if (c->zero >= 3) { /* the loss's peak or the backward's first layer's, not both (plan_model_zero.c) */
    bool at_loss;
    double lgrad = e->cls[MEM_GRAD] - p_rank / zd2, headg = pm->pe_split[1] / tp + pm->pe_rep[1];
    e->cls[MEM_ACT] = per_layer * lst + zero3_pp1_peak(pm, c, unit, none_l, per_layer, cp_ring_ws(ring, c, kvu), head, headg,
                                                       gather, lgrad, &at_loss);
    if (at_loss) e->cls[MEM_GRAD] -= lgrad;
  } else {
    /* without the persistent copies under bf16 (zero < 3): one layer's weights cast at a time (passes/wcast.c) */
    double wcast = cb < 4 && !persistent && c->zero < 3 && base->target == TARGET_CUDA ? p_layer * cb / 4 : 0;
    e->cls[MEM_ACT] = per_layer * lst + head + copies + gather + wcast + cp_ring_ws(ring, c, kvu);
  }
  e->cls[MEM_INPUT] = 2.0 * 4 * tok * (c->pp > 1 ? accum : 1);

  e->largest = MEM_PARAM;
  for (int k = 0; k < MEM_COUNT; k++) {
    e->total += e->cls[k];
    if (e->cls[k] > e->cls[e->largest]) e->largest = (MemClass)k;
  }
  if (stage_tot && peak_x >= 0) /* (the peak's position's bytes beside what every stage holds, each stage's own) */
    for (int s = 0; s < c->pp; s++) stage_tot[s] = e->total - peak_x + stage_x[s];
  /* ---- communication ---- */
  const CostLink *in = &dev->link[0], *net = &dev->link[1];
  /* tp: 4 all-reduces (or scatter + gather) of a hidden state per layer per micro-step, 2 more under full recompute */
  double ntp = c->rec == RECOMPUTE_FULL ? 6 : 4;
  e->tp_s = accum * (lst * ntp + 2) * ring_s(unit, 2, c->tp, in->bytes_per_s, in->latency_s);
  /* cp: each layer passes K and V around the ring forward, twice that backward (thrice: recompute, ring_rc) */
  if (c->cp > 1) {
    bool cp_in = c->tp * c->cp <= dpn;
    const CostLink *l = cp_in ? in : net;
    double bw = cp_in ? l->bytes_per_s : l->bytes_per_s / dpn;
    e->tp_s += accum * lst * (1 + hops) * (c->cp - 1) * (2 * kvu / tp / bw + l->latency_s);
  }
  /* dp / ZeRO: the f32 gradient of a rank's parameters, over the dp x cp group under cp */
  if (c->dp > 1 && c->zero < 3) {
    double bw, lat;
    int n = dp_link(c, dev, dpn, &bw, &lat);
    /* ZeRO-2 reduce-scatters every micro-step's gradient inside its backward (passes/zero_sums.c),
     * then gathers the updated parameters (ZeRO-3: zero3_coll_s above) */
    double factor = c->zero == 0 ? 2 : c->zero == 1 ? 3 : accum + 1;
    e->dp_s = ring_s(p_rank, factor, n, bw, lat);
  }
  /* overlapped: the last micro-step's backward (ZeRO-2: every backward; ZeRO-3: the whole step) */
  double hide = dev->overlap * (c->zero >= 3 ? e->compute_s : c->zero == 2 ? e->compute_s * 2 / 3 : e->compute_s / accum * 2 / 3);
  e->exposed_s = e->tp_s + fmax(stall, e->dp_s > hide ? e->dp_s - hide : 0);
  /* (the copies wait for their gather and the next waits for them: compiled, they hide no collective;
   * under pp they are in the stages' F and B above, so in the span) */
  e->mem_s += copy_s + bcopy_s + e->zfold_s;
  e->compute_s += copy_s + bcopy_s + e->zfold_s;
  /* ---- plan offload: the base's compiled copies and host work per byte of the shard, this shard's ---- */
  if (off) {
    double down = pm->off_copies[0] / pp, up = pm->off_copies[1] / pp; /* copies per stage */
    double d2h = pm->off_d2h * e->shard, h2d = pm->off_h2d * e->shard;
    e->d2h_s = down > 0 ? down * cost_copy_time(dev, d2h / down) : 0;
    e->h2d_s = up > 0 ? up * cost_copy_time(dev, h2d / up) : 0;
    e->host_s = cost_host_time(dev, pm->off_host * e->shard);
    int ntensors = pm->ntensors / c->pp > 1 ? pm->ntensors / c->pp : 1;
    e->offload_s = plan_offload_time(c->pp > 1 ? e->pp_span_s : e->compute_s, e->d2h_s, e->host_s, e->h2d_s, ntensors,
                                     dev->offload_sync != 0);
  }
  /* ---- the pipeline: the lists played (pp_profile), then the update and the dp collectives not hidden ---- */
  if (c->pp > 1) {
    /* (the tp and cp collectives and the scatters' stall are in the instructions) */
    double dp_exposed = e->exposed_s - e->tp_s;
    if (zpp) /* the layers' gathers and scatters in the instructions: ZeRO-2's gathers of the update alone */
      dp_exposed = c->zero == 2 ? ring_s(p_rank, 1, zn, zbw, zlat) : 0;
    e->step_s = e->pp_span_s + opt_s + (dp_exposed > 0 ? dp_exposed : 0) + e->offload_s;
    return;
  }
  e->step_s = (e->compute_s + e->exposed_s) / (1 - e->bubble) + e->offload_s;
}

double plan_ana_frag(int pp) { return pp > 1 ? 1.011 : 1.0025; }

void plan_model_estimate_split(PlanModel *pm, const Module *base, const CostDevice *dev, const PlanCand *c,
                               const int64_t *n, PlanEstimate *e) {
  estimate(pm, base, dev, c, n, e->defer, e->zbw_hold, e->wcopy, e, NULL);
}

void plan_model_estimate(PlanModel *pm, const Module *base, const CostDevice *dev, const PlanCand *c,
                         PlanEstimate *e) {
  /* the deferred scatter waits as the compile decides them (passes/zero_defer.c): `defer_waits` as the base
   * has it (the file's or -D's), auto against the device's memory with this model's figure for the plan with
   * them, as the search holds it to the capacity (plan_ana_frag) */
  int want = base->plan.defer_waits;
  bool may = zero_defers_scatters(c->zero, c->dp * c->cp), dz = may && zero_defer_taken(want, 0, 0, false);
  /* zb's W under recompute as the driver decides it with the deferred waits (replan.c, auto_memory): `zb_w` as
   * the base has it; auto choices taken where the estimate with them is within the capacity, else each
   * dropped alone, the faster of those within it, else both dropped */
  int hold = base->plan.zb_w == ZBW_RECOMPUTE ? 0 : base->plan.zb_w == ZBW_HOLD && base->plan.zb_w_layers > 0 ? base->plan.zb_w_layers : PM_HOLD_ALL;
  estimate(pm, base, dev, c, NULL, dz, hold, true, e, NULL);
  bool open_h = hold && base->plan.zb_w == ZBW_AUTO && c->sched == SCHED_ZB && c->rec != RECOMPUTE_NONE && c->pp > 1,
       open_d = e->defer && want == DEFER_AUTO;
  double cap = pm->capacity, frag = plan_ana_frag(c->pp);
  /* `weight_copy auto`'s persistent copies (passes/wshadow.c; pp 1 only, where no hold is): dropped with the deferred
   * waits where the plan with both does not fit, unless the copies without the waits fit (the copies never cost memory
   * where taken: the masters split beside them); GPT-3's own plan (pp 1 tp 8 z1, 140 GB with them) makes its casts per
   * layer, 5.8 of its 23.7 s of compute, which the model took for none, its bandwidth-bound time x 5 (the clamp) */
  if (e->wcopy && base->plan.weight_copy == WCOPY_AUTO && cap > 0 && e->total * frag > cap) {
    PlanEstimate ew;
    if (open_d) estimate(pm, base, dev, c, NULL, false, hold, true, &ew, NULL);
    if (open_d && ew.total * frag <= cap) *e = ew;
    else estimate(pm, base, dev, c, NULL, open_d ? false : e->defer, hold, false, e, NULL);
  } else if ((open_h || open_d) && cap > 0 && e->total * frag > cap) {
    PlanEstimate eh, ed; /* without the hold, without the deferred waits */
    bool fh = false, fd = false;
    bool w = e->wcopy;
    if (open_h) estimate(pm, base, dev, c, NULL, e->defer, 0, w, &eh, NULL), fh = eh.total * frag <= cap;
    if (open_d) estimate(pm, base, dev, c, NULL, false, hold, w, &ed, NULL), fd = ed.total * frag <= cap;
    if (open_h && open_d && !fh && !fd) estimate(pm, base, dev, c, NULL, false, hold = 0, w, e, NULL);
    else if (fh && (!fd || eh.step_s <= ed.step_s)) *e = eh, hold = 0;
    else if (fd || !open_h) *e = ed;
    else *e = eh, hold = 0;
    /* the hold dropped, the rest fitting: the largest hold(N) that fits, as the driver's partial_hold (replan.c) */
    int most = (int)ceil(pm->layers / c->pp);
    if (open_h && !hold && e->total * frag <= cap && most > 1) {
      int lo = 0, hi = most;
      PlanEstimate ep, best = *e;
      while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        estimate(pm, base, dev, c, NULL, e->defer, mid, e->wcopy, &ep, NULL);
        if (ep.total * frag <= cap) lo = mid, best = ep;
        else hi = mid;
      }
      *e = best, hold = lo;
    }
  }
  int64_t n[RT_MAX_STAGES];
  if (!c->bal || !plan_model_balance(pm, c, e, n, NULL)) return;
  double tot[RT_MAX_STAGES] = {0};
  PlanEstimate bal;
  estimate(pm, base, dev, c, n, e->defer, hold, e->wcopy, &bal, tot);
  /* `layers(balanced)` against the device's memory as the driver has it (replan.c, stage_memory): where the
   * time-balanced split's largest stage does not fit the capacity (or is the first), the fastest split whose
   * every stage fits by the balance's model with each stage's bytes beyond it (pipe_balance_calibrate) */
  if (plan_model_balance_fit(pm, c, e, tot, frag, cap, n)) estimate(pm, base, dev, c, n, e->defer, hold, e->wcopy, &bal, NULL);
  *e = bal;
  e->nsplit = c->pp * (c->sched == SCHED_INTERLEAVED ? c->v : 1);
  for (int k = 0; k < e->nsplit; k++) e->split[k] = (short)n[k];
}
