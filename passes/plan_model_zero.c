/* passes/plan_model_zero.c — the plan model's ZeRO-2/3 dp collectives (see plan_model.c's estimate):
 * a layer's gradient reduce-scatters on the dp channel, whether passes/zero_coalesce.c coalesces them
 * (its decision, zero_coalesce_pays), and ZeRO-3's gathers and scatters a step. */
#include <math.h>

#include "plan_model_int.h"
#include "plan_search.h"
#include "zero.h"

/* A scatter of `bytes` (of `members` gradients) issued at `ready` on the channel (layer_scatters' figures). */
static void issue(double bytes, int members, double ready, int n, double bw, double lat, double *count, double *all,
                  double *packed, double *end) {
  double t = ring_s(bytes, 1, n, bw, lat);
  *all += t;
  *count += 1;
  *end = fmax(*end, ready) + t;
  if (members > 1) *packed = *all;
}

/* One layer's ZeRO-2/3 gradient reduce-scatters in a backward layer loop (passes/zero_sums.c), over n
 * ranks (bw, lat): in the order the backward makes the gradients (pm->lt reversed), the matrices' and the
 * norms' gains' (under sp with tp > 1 those are partial over tp too and summed after the loop,
 * passes/grad_buckets.c), packed into runs by zero_run_takes on their f32 bytes. *count: the
 * collectives; *all: their time; *packed: the time through the last run of two or more (its shards are
 * slices of the packed one taken at the iteration's end, passes/zero.c's pack_scatters: the iteration
 * waits for it and for every scatter queued before it); *end: when the channel, free at `front`, ends
 * them issued each where its run's last gradient is made: after `rec` (the recomputed forward), the
 * iteration's other work spread by the matrices' elements (a gradient made halfway through its
 * GEMMs), the attention's backward (`ab`) before the gradients of what the forward reads before its
 * attention; `b` the iteration's compute. `coal`: passes/zero_coalesce.c coalesces the body's runs, each
 * coalesced one (up to `cap` on the shard bytes) issued with its last run. False: no tensor list (pm->nlt 0). */
bool layer_scatters(const PlanModel *pm, const PlanCand *c, double cap, int n, double bw, double lat, double front,
                    double rec, double ab, double b, bool coal, double *count, double *all, double *packed,
                    double *end) {
  *count = *all = *packed = 0, *end = front;
  if (!pm->nlt) return false;
  double run = 0, mats = 0, done = 0, ready = 0, g = fmax(0, b - rec - ab), grp = 0, gready = 0;
  int in = 0, gin = 0;
  for (int k = 0; k < pm->nlt; k++) mats += pm->lt[k].mat ? pm->lt[k].numel : 0;
  for (int k = pm->nlt - 1; k >= -1; k--) {
    bool member = k >= 0 && (pm->lt[k].mat || !(c->sp && c->tp > 1));
    double by = member ? pm->lt[k].numel * 4 / (pm->lt[k].split ? c->tp : 1) : 0;
    if (in > 0 && (k < 0 || (member && !zero_run_takes(in, (int64_t)run, (int64_t)by, (int64_t)cap)))) {
      if (!coal) issue(run, in, ready, n, bw, lat, count, all, packed, end);
      else { /* (the coalesced runs: up to cap on the shard bytes, issued with their last, zero_coalesce.c) */
        if (gin > 0 && (grp + run) / n > cap) issue(grp, gin, gready, n, bw, lat, count, all, packed, end), grp = 0, gin = 0;
        grp += run, gin += in, gready = ready;
      }
      in = 0, run = 0;
    }
    if (k < 0) {
      if (gin > 0) issue(grp, gin, gready, n, bw, lat, count, all, packed, end);
      break;
    }
    double share = pm->lt[k].mat && mats > 0 ? pm->lt[k].numel / mats : 0;
    ready = rec + g * (done + share / 2) + (pm->lt[k].early ? ab : 0);
    done += share;
    if (member) in++, run += by;
  }
  return true;
}

/* Whether passes/zero_coalesce.c coalesces the backward loops' k gradient reduce-scatters of a layer
 * (ZeRO-2/3; its coalesce_scatters): `coalesce on`, or under `auto` zero_coalesce_pays (the one decision)
 * with the copies (the f32 layer gradient p_layer packed, half of it transposed, and its shards over n)
 * and `exposed` (the latency saved at most, a body's), `defer` (the waits deferred: the pass's); *bcopy_s: the copies' seconds in `points` bodies
 * a step (compute's, the backward's). */
bool scatters_coalesce(const Module *base, const CostDevice *dev, int k, int n, double lat, double p_layer,
                       double exposed, bool defer, double points, double *bcopy_s) {
  double copies = p_layer / n + 2 * p_layer;
  bool on = base->plan.coalesce == COALESCE_ON ||
            (base->plan.coalesce == COALESCE_AUTO &&
             zero_coalesce_pays(k, n, lat, dev->op_overhead_s, copies, dev->bytes_per_s, exposed, defer));
  if (!on || k < 2) return false;
  *bcopy_s = points * (2 * copies / dev->bytes_per_s + (k + 1) * dev->op_overhead_s);
  return true;
}

/* A backward layer loop's iteration stalled on its layer's ZeRO-2/3 gradient reduce-scatters (where
 * zero_defers_scatters; over n ranks, bw, lat): an iteration no longer reads what it scatters, each
 * scatter waited in the next iteration where its packed gradient is written again (passes/zero_defer.c,
 * `defer`, a loop of two `iters` or more: zero_defer_loop), about that iteration's end; so an iteration is
 * no shorter than the channel's work a layer (`front`, the next layer's gathers, then its scatters:
 * throughput), nor than its scatters' end, issued each where its gradient is made (layer_scatters: `rec`,
 * `ab` and `b`, the iteration's compute), less the next iteration. Not deferred, each iteration waits at
 * its end, under accumulation (and under pp: the previous micro-batch's running sums) for the channel's
 * end, else for its packed runs through the last one. ZeRO-2's scatters coalesced as ZeRO-3's
 * (scatters_coalesce: the pass's decision, with the pass's exposure, the body's scatters beyond `bc` of
 * its compute; *bcopy_s: the copies in `points` bodies a step), ZeRO-3's where zero3_coll_s coalesced
 * them (*bcopy_s given), the coalesced runs issued each with its last gradient, their copies in b. Returns the stall an iteration, beyond b (0 without a tensor list). The one model of
 * pp 1's backward loop and of the stages' B (zb: W) instructions' loops (passes/plan_model.c). */
double scatter_stall(const PlanModel *pm, const Module *base, const CostDevice *dev, const PlanCand *c, int n, double bw,
                     double lat, double p_layer, double b, double bc, double rec, double ab, double front, bool defer,
                     double iters, double points, double *bcopy_s, double *tail) {
  double bucket = bucket_bytes(base), cnt, s_all, s_packed, s_end;
  defer = defer && iters >= 2;
  if (tail) *tail = 0;
  bool coal = c->zero >= 3 ? *bcopy_s > 0 : layer_scatters(pm, c, bucket, n, bw, lat, 0, rec, ab, b, false, &cnt, &s_all, &s_packed, &s_end) &&
              scatters_coalesce(base, dev, (int)cnt, n, lat, p_layer, fmax(0, s_all - bc), defer, points, bcopy_s);
  if (!layer_scatters(pm, c, bucket, n, bw, lat, front, rec, ab, b, coal, &cnt, &s_all, &s_packed, &s_end)) return 0;
  b += coal ? *bcopy_s / points : 0; /* (the copies: the iteration's compute, beside the channel's) */
  double t = defer ? fmax(b, fmax(front + s_all, s_end - b)) : c->accum > 1 ? fmax(b, s_end) : fmax(b + s_packed, front + s_all);
  /* deferred, the last iteration's scatters are waited after the loop (no iteration after it): the loop
   * ends at their end (GPT-3 pp 16 int2 z2 dp 2, 3 layers a B: compiled 38.1 ms a B, 33.1 + 3.0 of the
   * packing + 2 waiting for w_qkv's scatter, the last made) */
  if (tail && defer) *tail = fmax(0, s_end - t);
  return t - b;
}

/* ZeRO-3's dp (dp x cp) traffic a step: per micro-step one f32 reduce-scatter and two gathers in the
 * compute precision of the stage's parameters (p_rank bytes, f32), as ring bandwidth; and each
 * collective's n - 1 latency steps: the layer loops gather a layer's split tensors (pm->nl_mat of them)
 * forward and backward, in one collective where passes/zero_coalesce.c coalesces them (its
 * zero_coalesce_pays, asked here with the layer's copies: the packed shards and the unpacked whole,
 * half of it transposed; the latency it saves at most the collectives' time not hidden behind `hide`
 * of compute, spread over the step's gather points; within the plan's bucket on the packed shard bytes;
 * *copy_s: their seconds a step, compute's; *flat: the bytes the gathered [group, N] holds beside
 * the unpacked layers, the layer's whole), else one a tensor; and
 * reduce-scatter a layer's gradients in runs (layer_scatters), in one where the same pass and
 * function coalesce those too (*bcopy_s: their copies' seconds, the backward's; the packed f32
 * gradient added to *flat), asked with the exposure of a backward body whose compute is `body` (under
 * pp, the B, zb: W, instruction's loop of `iters` layers a chunk: its scatters after the next layer's
 * gathers where `front`, beyond it; < 0: pp 1's step figure, the collectives beyond `hide`). Counted as one ring's latency
 * per micro-step, the latency was 0.08 s where Llama-3-405B pp 2 1f1b cp 4 (a ring of 512 ranks, 2.6 ms
 * a collective) ran 21,440 collectives a step: 55 s. */
double zero3_coll_s(const PlanModel *pm, const Module *base, const CostDevice *dev, const PlanCand *c,
                    double p_rank, double p_layer, double lst, int n, double bw, double lat, double hide,
                    bool defer, double body, bool front, double iters, double *copy_s, double *bcopy_s, double *flat,
                    double *gather_pt) {
  *copy_s = 0, *bcopy_s = 0, *flat = 0, *gather_pt = 0;
  if (n <= 1 || bw <= 0) return 0;
  double accum = (double)c->accum, cb = pm->cb;
  double bucket = bucket_bytes(base);
  double scatters, s_all, s_packed, s_end; /* a layer's runs (layer_scatters; without the tensors, buckets) */
  if (!layer_scatters(pm, c, bucket, n, bw, lat, 0, 0, 0, 0, false, &scatters, &s_all, &s_packed, &s_end))
    scatters = fmax(1, fmin(pm->nl_mat, ceil(p_layer / bucket)));
  double whole = p_layer * cb / 4, shards = whole / n, copies = shards + 2 * whole;
  double bytes_s = accum * (1 + 2 * cb / 4) * p_rank * (n - 1) / n / bw, points = accum * lst * 2;
  double each = pm->nl_mat; /* a layer's gathers, forward and backward */
  double one = bytes_s + points * (each + scatters / 2) * (n - 1) * lat; /* (each tensor on its own) */
  int k = (int)pm->nl_mat;
  bool coalesce = base->plan.coalesce == COALESCE_ON ||
                  (base->plan.coalesce == COALESCE_AUTO &&
                   zero_coalesce_pays(k, n, lat, dev->op_overhead_s, copies, dev->bytes_per_s, fmax(0, one - hide) / points, false));
  if (coalesce && k > 1) {
    each = fmax(1, fmin(pm->nl_mat, ceil(shards / bucket)));
    *copy_s = points * (2 * copies / dev->bytes_per_s + (k + 1) * dev->op_overhead_s); /* (compute's) */
    *flat = whole;
  }
  *gather_pt = whole * (n - 1) / n / bw + each * (n - 1) * lat;
  /* the backward loops' scatters (points / 2 of them) coalesced the same way (the same function, with
   * what the gathers left exposed): the f32 gradient packed, half of it transposed, the shards unpacked;
   * within the bucket on the shard bytes; the packed [group, N] beside the layer's gradients */
  double left = bytes_s + points * (each + scatters / 2) * (n - 1) * lat;
  double exposed = body < 0 ? fmax(0, left - hide) / points /* (pp 1: the step's, spread over its points) */
                            : fmax(0, (front ? *gather_pt : 0) + s_all - body);
  if (scatters_coalesce(base, dev, (int)scatters, n, lat, p_layer, exposed, defer && iters >= 2, points / 2, bcopy_s)) {
    scatters = fmax(1, fmin(scatters, ceil(p_layer / n / bucket)));
    *flat += p_layer;
  }
  return bytes_s + points * (each + scatters / 2) * (n - 1) * lat;
}

/* ZeRO-3 under pp: what the stages run outside their layer loops on the dp channel (over n ranks, bw,
 * lat), which the instructions' loops do not hide (compiled, Llama-3-8B dp 256 tp 2+sp pp 4 1f1b z3: 86 ms
 * a step between a middle stage's instructions, 141 on the first, 189 on the last). Each F and B loop
 * gathers its first layer in front of it (passes/zero.c's prefetch, before the loop: `first`, a layer's
 * gather, gather_pt); the head's matrix ([vocab / tp, d] in the compute precision) is gathered twice in
 * the last stage's F (for the head's forward and again for its backward, which F runs: the loss's
 * gradient), whose f32 gradient is scattered at F's end, ahead of B's first gather on the channel; the
 * first stage's F gathers the embedding's, and its B's scatter of the embedding's gradient is waited
 * by its sum after B. *fl: the last stage's F, *f0 and *b0 the first stage's F and B. */
void zero3_pp_edges(const PlanModel *pm, const PlanCand *c, int n, double bw, double lat, double *f0, double *b0,
                    double *fl) {
  *f0 = *b0 = *fl = 0;
  if (c->zero < 3 || c->pp <= 1 || n <= 1 || bw <= 0) return;
  double hv = pm->vocab / c->tp * pm->d; /* the head's (the embedding's) elements on a rank */
  double g = ring_s(hv * pm->cb, 1, n, bw, lat), s = ring_s(hv * 4, 1, n, bw, lat);
  *f0 = g, *b0 = s, *fl = 2 * g + s;
}

/* pp 1 under ZeRO-3: the step's peak is at the loss or in the backward's first layer, the layers' stacks under
 * both, the rest not (the compiled peaks, docs/planner.md "pp 1 under ZeRO-3: the loss or the backward's first
 * layer"):
 *   at the loss: the logits and their gradient (`head`); no gathered layer, no layer's f32 gradient, and no bf16
 *     copy of the embedding or the head (ZeRO-3 gathers their shards where read);
 *   in the backward's first layer: the head's f32 gradient unreduced (headg), the layer gathered and the next
 *     (gather), the layer's f32 gradients (lgrad: MEM_GRAD's unreduced and deferred layers), and the body's
 *     working set at its MLP's backward: what it re-makes of rc none's activations beyond what the stacks kept
 *     (none_l - kept_l: none nothing, full all but the input), the temporaries of the MLP's first GEMMs' outputs'
 *     size (`first`: their output features over d, / tp) — four of the gate's size (twice first: the product's
 *     gradient, the gate's activation re-run, its gradient, the up projection's) where the MLP is not
 *     recomputed, the gradient of the product alone (first) where it is, the peak then just after the recompute
 *     — and under sp the two whole hidden states around the tp regions (the gathered input, the input gradient
 *     before its scatter; without sp the replicated part of none_l has them).
 * unit: a hidden state of the micro-batch; ring: cp's ring blocks in the layer's backward (cp_ring_ws); none_l, kept_l: a layer's activations on a rank without recompute and
 * as the plan keeps them (bytes). Returns the bytes beside the stacks; *at_loss: the peak is the loss's (the
 * caller leaves lgrad out of the gradients). Compiled: Llama-3-8B dp 2048 tp 1 rc none mb 2 at the loss (69632
 * MiB of stacks, 2 x 4008 of logits; its backward body 3152: 4 x 448 of the MLP's, 416 gathered, 832 of f32
 * gradients); Llama-3-405B dp 1024 tp 2 rc full mb 1 in the backward's first layer (32256 of stacks, the head's
 * 4008, a body of 13077: 3936 of activations, 15.4 units, here 8.94 + 3.25). Not found (no layer tensors): a
 * GPT's first 4. */
double zero3_pp1_peak(const PlanModel *pm, const PlanCand *c, double unit, double none_l, double kept_l, double ring,
                      double head, double headg, double gather, double lgrad, bool *at_loss) {
  double tp = c->tp, first = 0;
  for (int i = 0; pm->d > 0 && i < pm->nlt; i++) {
    const PlanLayerTensor *t = &pm->lt[i];
    if (t->mat && !t->early && t->out != pm->d) first += t->out / pm->d;
  }
  if (first <= 0) first = 4; /* (not found: a GPT's) */
  double ws = fmax(0, none_l - kept_l) + unit * ((c->rec == RECOMPUTE_FULL ? 1 : 2) * first / tp + (c->sp && tp > 1 ? 2 * (1 - 1 / tp) : 0));
  double b1 = headg + gather + lgrad + ws + ring; /* (cp ring: its blocks in flight, cp_ring_ws) */
  *at_loss = head >= b1;
  return *at_loss ? head : b1 - lgrad;
}
