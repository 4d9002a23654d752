/* passes/cost_op.c — the cost model's figures for one node (see cost_op.h): the device's default
 * rates, and the seconds of a non-collective leaf node on them. passes/cost.c plays them on a timeline. */
#include "cost_op.h"

#include <math.h>
#include <string.h>

#include "diag.h"
#include "kernels/kernels.h" /* rt_attn_scores: the CPU attention's blocks */
#include "memplan.h"
#include "memplan_views.h"
#include "ops/reduce_kind.h" /* rt_reduce_kind: the runtime's loop of a sum */
#include "passes.h" /* fuse_sumsq_*, fuse_ce_partner */

/* Fractions of the topology's peak figures a step reaches when nothing was measured (the figures
 * to replace with `shardc calibrate`'s profile): large GEMMs reach most of the peak, memory-bound
 * kernels most of the bandwidth, a CPU kernel call costs about a microsecond.
 * The GPU's GEMMs, attention and kernel calls, from the CUDA trainers on one H100 80GB HBM3
 * (2026-11-27, docs/performance.md "The GPU cost model against the H100"): a GEMM at 0.86 of the peak
 * plus 16.4 us (its fixed time: the last wave's tail; fitted to the LM head's 1266 GFLOP GEMMs at 843
 * TFLOP/s and the layers' 77 GFLOP ones at 723), its epilogue's bytes after that (cost_op_time); the flash
 * forward (wgmma, the tiles the trainer tunes) runs at 0.235 of the bf16 peak whatever the head dim (hd
 * 64: 227 TFLOP/s, hd 128: 235); the backward's two kernels (dQ, dK/dV: each recomputes the scores and
 * their softmax) at 0.332 of it on its 2.5 x the forward's FLOPs plus, per score element kept, the work
 * of 544 FLOPs at that rate (the softmax's exp and dS elementwise, head-dim-free: what makes hd 64's
 * backward 177 TFLOP/s and hd 128's 231, fitted to the two); a kernel of the replayed CUDA graph costs
 * 2.85 us beside its run (the step's 30.6 ms less its kernels' 29.6, over 351 launches).
 * The CPU's attention (runtime/kernels/attention.c, register-blocked 64 x 64 blocks; one thread of
 * this AVX2 EPYC, whose topology says 116 GFLOP/s; 2026-11-27, docs/performance.md "The CPU cost
 * model's attention"): per score element it computes (rt_attn_scores: causal, the diagonal's
 * blocks whole) 4 hd FLOPs plus 62 FLOPs of online softmax at 65 GFLOP/s, 0.56 of the peak (0.8 of
 * sgemm 1024^3 in the same runs); its backward 10 hd plus 70 at the same rate: fitted to 9 shapes,
 * hd 16 to 128, seq 64 to 1024 (tiny's 13.8 GFLOP/s to hd 64's 53; each within 22 %).
 * The CPU's GEMMs (OpenBLAS, one thread; docs/performance.md "The CPU cost model's GEMMs and cross-entropy"):
 * 0.60 of the peak (as before: the trainers' large GEMMs) plus 0.34 ns an output element (C's pass, sgemm_beta)
 * and 0.19 ns an operand element (packing), bench_calibrate's fits; the cross-entropy (forward and backward in one pass, C and
 * LLVM kernels alike) 1.7 ns a logit at GPT-2's 50257 in the trainers. */
enum { KIND_GPU, KIND_CPU };
static const struct {
  double gemm, gemm_fixed_s, attn, bw, overhead_s, overlap;
  double gemm_out_s, gemm_in_s; /* a GEMM's seconds per output and operand element on top of its FLOPs */
  double attn_score_flops; /* the forward's work per score element beyond its 4 hd FLOPs (its softmax) */
  double attn_bwd_ratio, attn_bwd_score_flops; /* the backward's rate / the forward's; its work per score element */
  double elem_s[COST_EL_COUNT]; /* the C kernels' loops (bench_calibrate on one AMD EPYC core, 2026-11) */
} eff[2] = {
    [KIND_GPU] = {0.86, 16.4e-6, 0.235, 0.80, 2.85e-6, 1.0, 0, 0, 0, 0.332 / 0.235, 544, {0}},
    [KIND_CPU] = {0.60, 0, 0.56, 0.70, 1e-6, 0.0, 0.34e-9, 0.19e-9, 62, 1, 70,
                  {1.1e-9, 5e-9, 10e-9, 12e-9, 3.5e-9, 1.7e-9}},
};

/* The LLVM kernels' loops (codegen/llvm_kernels.c, vectorised; gelu and tanh through its own tanh, not libm's
 * tanhf): bench_calibrate's llvm_elem_*_s on one core of this Xeon (AVX-512; 2026-11-28, docs/performance.md
 * "Recompute's price on the CPU": 0.19-0.52 ns flat, 0.51-0.53 tanh, 0.28-0.30 exp), where the C kernels' measured
 * 0.16-0.55, 0.50-0.56, 0.29-0.32 (this glibc's tanhf loop vectorised). The C figures above
 * are the AMD EPYC's (12 ns a tanhf): what the default trainers (the LLVM kernels) do not run. */
static const double llvm_elem_s[COST_EL_COUNT] = {[COST_EL_FLAT] = 0.3e-9, [COST_EL_TANH] = 0.5e-9,
                                                  [COST_EL_EXP] = 0.3e-9};

bool cost_elem_llvm(CostElem el) { return el == COST_EL_FLAT || el == COST_EL_TANH || el == COST_EL_EXP; }

double cost_elem_s(const Module *m, const CostDevice *d, CostElem el) {
  return m->target == TARGET_CPU && m->cpu_llvm_kernels && cost_elem_llvm(el) ? d->llvm_elem_s[el] : d->elem_s[el];
}

void cost_device_defaults(const Module *m, CostDevice *d) {
  memset(d, 0, sizeof *d);
  const Topology *t = &m->topo;
  bool gpu = m->has_topology && !t->cpu_only && m->target == TARGET_CUDA;
  int k = gpu ? KIND_GPU : KIND_CPU;
  bool bf16 = gpu && m->recipe.precision == PREC_BF16;
  double peak = 0, hbm = 0;
  if (m->has_topology) {
    peak = bf16 ? t->peak_flops_bf16 : t->peak_flops_f32 > 0 ? t->peak_flops_f32 : t->peak_flops_bf16;
    hbm = t->hbm_bytes_per_s;
  }
  if (!gpu && m->has_topology && !t->cpu_only) { /* the CPU target on a GPU machine: its host cores */
    peak = 0;
    hbm = 0;
  }
  if (peak <= 0) peak = 50e9; /* one core, FMA vectors: what rt_measure_peak_flops finds on a laptop */
  if (hbm <= 0) hbm = 10e9;
  d->peak_flops = peak;
  d->gemm_flops = eff[k].gemm * peak;
  d->gemm_half_flops = eff[k].gemm_fixed_s * d->gemm_flops; /* each GEMM's fixed time, as FLOPs at its rate */
  d->gemm_out_s = eff[k].gemm_out_s;
  d->gemm_in_s = eff[k].gemm_in_s;
  d->attn_flops = eff[k].attn * peak;
  d->attn_score_flops = eff[k].attn_score_flops;
  d->attn_bwd_ratio = eff[k].attn_bwd_ratio;
  d->attn_bwd_score_flops = eff[k].attn_bwd_score_flops;
  d->bytes_per_s = eff[k].bw * hbm;
  d->op_overhead_s = eff[k].overhead_s;
  d->overlap = eff[k].overlap;
  if (m->target == TARGET_CPU) {
    memcpy(d->elem_s, eff[KIND_CPU].elem_s, sizeof d->elem_s);
    for (int el = 0; el < COST_EL_COUNT; el++) d->llvm_elem_s[el] = cost_elem_llvm(el) ? llvm_elem_s[el] : d->elem_s[el];
  }
  for (int side = 0; side < 2; side++) {
    const Link *l = side ? &t->inter : &t->intra;
    d->link[side].latency_s = m->has_topology && l->latency_s > 0 ? l->latency_s : side ? 50e-6 : 2e-6;
    d->link[side].bytes_per_s =
        m->has_topology && l->bytes_per_s > 0 ? (l->count > 1 ? l->count : 1) * l->bytes_per_s : side ? 1e9 : 5e9;
  }
  /* The host link (plan offload's copies), per direction: the topology's `pcie` (the link's raw rate
   * per direction: 64 GB/s for PCIe gen5 x16, 32 for gen4 x16) at 80 %, what pinned copies reach
   * after the link's 128b/130b coding and packet headers (NVIDIA's bandwidthTest: ~26 GB/s of gen4
   * x16's 32, ~50-55 of gen5's 64); without one, gen4 x16's. 10 us a copy: a cudaMemcpyAsync's
   * issue and DMA set-up, the order of what the runtime's per-copy event pair adds. */
  double pcie = m->has_topology && t->pcie_bytes_per_s > 0 ? t->pcie_bytes_per_s : 32e9;
  d->host_link.bytes_per_s = 0.8 * pcie;
  d->host_link.latency_s = 10e-6;
  /* The host's kernels (plan offload's AdamW: rt_adamw_f32 on every core through OpenMP, 7 streams
   * of 4 B a parameter) are bound by the host's DRAM: 75 GB/s read + written, a GPU's share of an
   * 8-GPU server's (2 sockets x 8-12 DDR5-4800 channels: 614-922 GB/s peak, ~80 % of it sustained
   * by STREAM's triad, over 8 GPUs: 61-92 GB/s). A profile's `host_bandwidth` replaces it. */
  d->host_bytes_per_s = 75e9;
  d->offload_sync = 0;
  snprintf(d->source, sizeof d->source, "%s%s defaults (%s)", m->has_topology ? "topology " : "no topology",
           m->has_topology && t->name ? t->name : "", gpu ? "GPU" : "CPU");
}

/* Attention FLOPs of q[B, S, H hd] over k[B, T, .]: QK^T and AV, 2 x 2 per score element and head
 * dim; *scores: the score elements computed, B H S T, causal half of it, or on the CPU target what
 * its blocked kernels compute (rt_attn_scores: the diagonal's blocks whole). */
static double attn_flops(const Module *m, const Node *n, double *scores) {
  const Shape *q = &n->in[0]->shape, *k = &n->in[1]->shape;
  double heads = n->a.heads > 0 ? n->a.heads : 1, bh = (double)q->dim[0] * heads;
  if (m->target == TARGET_CPU) *scores = bh * rt_attn_scores(q->dim[1], k->dim[1], n->a.causal);
  else *scores = bh * (double)q->dim[1] * (double)k->dim[1] * (n->a.causal ? 0.5 : 1.0);
  return 4.0 * *scores * (double)q->dim[2] / heads;
}

double cost_gemm_flop(const Node *n) {
  return ir_gemm_flops(&n->a, &n->in[0]->shape, &n->out[0]->shape);
}

/* Whether x is y's leading dims (trailing 1s aside): a per-row value. */
static bool leading_of(const Shape *y, const Shape *x) {
  int last = x->rank;
  while (last > 0 && x->dim[last - 1] == 1) last--;
  if (x->rank > y->rank) return false;
  for (int d = 0; d < last; d++)
    if (x->dim[d] != y->dim[d + y->rank - x->rank]) return false;
  for (int d = 0; d < y->rank - x->rank; d++)
    if (y->dim[d] != 1) return false;
  return true;
}

/* The CPU target's elementwise loop of node n and its element count (runtime/ops/ops.c's choice of
 * loop, which codegen/target_cpu.c's calls reach); -1 for other nodes. */
static int cpu_elem(const Module *m, const Node *n, double *count) {
  const Shape *y = &n->out[0]->shape;
  int64_t ny = ir_numel(y), inner = y->rank ? y->dim[y->rank - 1] : 1;
  *count = (double)ny;
  switch (n->op) {
  case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_MAXIMUM: case OP_MINIMUM: {
    int64_t na = ir_numel(&n->in[0]->shape), nb = ir_numel(&n->in[1]->shape);
    bool flat = (na == ny && (nb == ny || nb == 1 || nb == inner)) || (nb == ny && (na == 1 || na == inner));
    /* the LLVM kernels index a per-row value ([r, 1] against [r, c]: codegen/target_llvm.c's LLK_COL) in their
     * vector loop too */
    if (!flat && m->cpu_llvm_kernels && (na == ny || nb == ny))
      flat = leading_of(y, &n->in[na == ny ? 1 : 0]->shape);
    return flat ? COST_EL_FLAT : COST_EL_INDEXED;
  }
  case OP_NEG: case OP_SCALE: case OP_ADD_SCALAR: case OP_SQRT: case OP_RSQRT: case OP_RELU: return COST_EL_FLAT;
  case OP_TANH: case OP_GELU: return COST_EL_TANH;
  case OP_EXP: case OP_LOG: case OP_SIGMOID: case OP_SILU: return COST_EL_EXP;
  case OP_BROADCAST_TO: return COST_EL_INDEXED;
  case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_BWD: /* per logit (a fused pair: the forward's, below) */
    *count = (double)ir_numel(&n->in[0]->shape);
    return COST_EL_XENT;
  case OP_REDUCE_SUM: {
    const Shape *x = &n->in[0]->shape;
    *count = (double)ir_numel(x);
    (void)inner;
    /* rt_reduce_to_f32's loop: a bias's and a trailing sum's are contiguous rows (the trailing one was priced
     * as the per-element indexed loop: tiny cp 2's sums over the ring blocks 26 ms a step for ~1) */
    switch (rt_reduce_kind(x->rank, x->dim, y->rank, y->dim)) {
    case RT_REDUCE_COPY: return -1;
    case RT_REDUCE_BIAS: case RT_REDUCE_TRAILING: return COST_EL_FLAT;
    default: return COST_EL_REDUCE;
    }
  }
  default: return -1;
  }
}


/* The backward a cross-entropy's kernel computes with it (passes/fuse_ce.c: both CPU code generators emit
 * the pair as one pass over the logits, the backward nothing); NULL when it runs alone. */
static const Node *ce_partner(const Node *n) {
  const Graph *g = n->graph;
  for (int i = 0; g && n->a.fused_bwd && i < g->nnodes; i++)
    if (g->nodes[i] == n) {
      int j = fuse_ce_partner(g, i);
      return j >= 0 ? g->nodes[j] : NULL;
    }
  return NULL;
}

/* Whether a GEMM operand v is read from another loop's stack: the row of a stacked input of the
 * loop v's body belongs to, made by a loop (a saved activation of the forward, or what a
 * zero-bubble B hands its W), not a parameter's row. By the time the backward reads it the
 * caches hold other work (bench/calibrate.c measures the rate of such reads). */
static bool cold_operand(const Value *v) {
  const Node *a = v->def;
  const Node *r = a->graph ? a->graph->owner : NULL;
  if (a->op != OP_ARG || !r || r->op != OP_REPEAT) return false;
  int j = a->a.index;
  if (j < r->a.ncarry || j >= r->a.ncarry + r->a.nxs || j >= r->nin) return false;
  const Node *src = r->in[j]->def;
  return src && src->op == OP_REPEAT;
}

/* (cost_op.h) */
double cost_op_time(const Module *m, const CostDevice *d, const Node *n, bool in_update, double extra,
                    TimeKind *kind) {
  *kind = T_FREE;
  if (ir_ops[n->op].flags & F_SOURCE && n->op != OP_CONST && n->op != OP_IOTA) return 0;
  if (n->op == OP_RESHAPE) return 0; /* a view */
  if (n->op == OP_CAST && n->in[0]->dtype == n->out[0]->dtype) return 0;
  if (m->target == TARGET_CUDA && ir_cast_folded(n)) return 0; /* its readers widen its source */
  if (memplan_col_slice(n) || memplan_col_concat(n)) return 0; /* column views (memplan_views.c): no copy */
  if (memplan_row_viewed(n)) return 0;                           /* a row view placed: no copy (codegen's) */
  if (n->op == OP_STAGE_SELECT) return 0; /* picks a buffer */
  if (n->op == OP_CONCAT && n->a.axis == 0) { /* rows in place (memplan_views.c): its inputs made in its rows */
    bool placed = true;
    for (int j = 0; j < n->nin && placed; j++) placed = memplan_row_placed(n, j);
    if (placed) return 0;
  }
  if (m->target == TARGET_CUDA && fuse_sumsq_member(n)) return 0; /* in the concat's kernel (passes/fuse_sumsq.c) */
  double bytes = n->op == OP_MATMUL ? 0 : extra; /* (a GEMM's epilogue: after its main loop, below) */
  const Node *ce = m->target == TARGET_CPU && (n->op == OP_CROSS_ENTROPY || n->op == OP_CROSS_ENTROPY_BWD)
                       ? ce_partner(n) : NULL;
  if (ce && n->op == OP_CROSS_ENTROPY_BWD) return 0; /* in the forward's pass */
  if (ce) bytes += cost_value_bytes(ce->out[0]);          /* ... which writes the gradient */
  for (int j = 0; j < n->nin && m->target == TARGET_CUDA; j++) { /* ... which reads the members' gradients */
    const Node *s = fuse_sumsq_piece(n, j);
    if (s) bytes += cost_value_bytes(ir_unfold_cast(s->in[0]));
  }
  bool grouped = m->target == TARGET_CUDA && n->group > 0; /* one kernel: intermediates stay in registers */
  for (int j = 0; j < n->nin; j++)
    if (!in_update && !(grouped && n->in[j]->def && n->in[j]->def->group == n->group))
      /* (a slice reads only the part it copies: e.g. ZeRO-3's coalesced gather unpacked, passes/zero_coalesce.c) */
      bytes += n->op == OP_SLICE ? cost_value_bytes(n->out[0])
                                 : cost_value_bytes(m->target == TARGET_CUDA ? ir_unfold_cast(n->in[j]) : n->in[j]);
  for (int j = 0; j < n->nout; j++) bytes += cost_value_bytes(n->out[j]);
  double mem = bytes / d->bytes_per_s;
  switch (cost_op_class(n->op)) {
  case T_GEMM: {
    double fl = cost_gemm_flop(n);
    *kind = T_GEMM;
    double cold = 0;
    if (d->gemm_cold_bytes_per_s > 0)
      for (int j = 0; j < 2; j++)
        if (cold_operand(n->in[j]) || (n->in[j]->def->op == OP_RESHAPE && cold_operand(n->in[j]->def->in[0])))
          cold += cost_value_bytes(n->in[j]) / d->gemm_cold_bytes_per_s;
    /* rate gemm_flops x fl / (fl + half) (a sibling pair's second: fl alone, cost_gemm_launches); the epilogue's
     * own bytes after the main loop, not hidden by it */
    double half = cost_gemm_launches(m, n) ? d->gemm_half_flops : 0;
    /* and per element: C's pass (beta, the stores) and the packing of A and B, beside the FLOPs (small k) */
    double elems = d->gemm_out_s * (double)ir_numel(&n->out[0]->shape) +
                   d->gemm_in_s * (double)(ir_numel(&n->in[0]->shape) + ir_numel(&n->in[1]->shape));
    return fmax((fl + half) / d->gemm_flops + elems, mem) + cold + extra / d->bytes_per_s;
  }
  case T_ATTN: {
    double scores, fl = attn_flops(m, n, &scores), rate = d->attn_flops;
    if (n->op == OP_SDPA_BWD || n->op == OP_ATTN_BLOCK_BWD) { /* scores again, dV, dP, dQ, dK; the softmax's again */
      fl = 2.5 * fl + scores * d->attn_bwd_score_flops;
      rate *= d->attn_bwd_ratio > 0 ? d->attn_bwd_ratio : 1;
    } else {
      fl += scores * d->attn_score_flops; /* the online softmax: its exp, max and sum per score */
    }
    *kind = T_ATTN;
    return fmax(fl / rate, mem);
  }
  default: {
    *kind = T_MEM;
    double count;
    int el = m->target == TARGET_CPU ? cpu_elem(m, n, &count) : -1;
    return el >= 0 ? fmax(mem, count * cost_elem_s(m, d, el)) : mem;
  }
  }
}
