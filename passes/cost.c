/* passes/cost.c — the cost model (see cost.h): op and collective times, the timeline of one rank
 * with its communication channels, the pipeline, and the report. */
#include "cost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "commreport.h"
#include "diag.h"
#include "memplan.h"
#include "mesh.h"
#include "pipe_sched.h"
#include "print.h"
#include "ptrmap.h"

/* Fractions of the topology's peak figures a step reaches when nothing was measured (the figures
 * to replace with `shardc calibrate`'s profile): large GEMMs reach most of the peak, attention
 * kernels about half (softmax, masking, the backward's recomputation of the scores), memory-bound
 * kernels most of the bandwidth; a GPU kernel launch costs microseconds (fewer under CUDA graphs),
 * a CPU kernel call about one. */
enum { KIND_GPU, KIND_CPU };
static const struct {
  double gemm, attn, bw, overhead_s, overlap;
  double elem_s[COST_EL_COUNT]; /* the C kernels' loops (bench_calibrate on one AMD EPYC core, 2026-11) */
} eff[2] = {
    [KIND_GPU] = {0.70, 0.40, 0.80, 4e-6, 1.0, {0}},
    [KIND_CPU] = {0.60, 0.25, 0.70, 1e-6, 0.0, {1.1e-9, 5e-9, 10e-9, 12e-9, 3.5e-9}},
};

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
  d->attn_flops = eff[k].attn * peak;
  d->bytes_per_s = eff[k].bw * hbm;
  d->op_overhead_s = eff[k].overhead_s;
  d->overlap = eff[k].overlap;
  if (m->target == TARGET_CPU) memcpy(d->elem_s, eff[KIND_CPU].elem_s, sizeof d->elem_s);
  for (int side = 0; side < 2; side++) {
    const Link *l = side ? &t->inter : &t->intra;
    d->link[side].latency_s = m->has_topology && l->latency_s > 0 ? l->latency_s : side ? 50e-6 : 2e-6;
    d->link[side].bytes_per_s =
        m->has_topology && l->bytes_per_s > 0 ? (l->count > 1 ? l->count : 1) * l->bytes_per_s : side ? 1e9 : 5e9;
  }
  snprintf(d->source, sizeof d->source, "%s%s defaults (%s)", m->has_topology ? "topology " : "no topology",
           m->has_topology && t->name ? t->name : "", gpu ? "GPU" : "CPU");
}

/* ---- one node --------------------------------------------------------------------- */

static double value_bytes(const Value *v) { return (double)ir_numel(&v->shape) * ir_dtype_size(v->dtype); }

/* Attention FLOPs of q[B, S, H hd] over k[B, T, .]: QK^T and AV, 2 x 2 B S T H hd. */
static double attn_flops(const Node *n) {
  const Shape *q = &n->in[0]->shape, *k = &n->in[1]->shape;
  return 4.0 * (double)q->dim[0] * (double)q->dim[1] * (double)k->dim[1] * (double)q->dim[2];
}

/* The CPU target's elementwise loop of node n and its element count (runtime/ops/ops.c's choice of
 * loop, which codegen/target_cpu.c's calls reach); -1 for other nodes. */
static int cpu_elem(const Node *n, double *count) {
  const Shape *y = &n->out[0]->shape;
  int64_t ny = ir_numel(y), inner = y->rank ? y->dim[y->rank - 1] : 1;
  *count = (double)ny;
  switch (n->op) {
  case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_MAXIMUM: case OP_MINIMUM: {
    int64_t na = ir_numel(&n->in[0]->shape), nb = ir_numel(&n->in[1]->shape);
    bool flat = (na == ny && (nb == ny || nb == 1 || nb == inner)) || (nb == ny && (na == 1 || na == inner));
    return flat ? COST_EL_FLAT : COST_EL_INDEXED;
  }
  case OP_NEG: case OP_SCALE: case OP_ADD_SCALAR: case OP_SQRT: case OP_RSQRT: case OP_RELU: return COST_EL_FLAT;
  case OP_TANH: case OP_GELU: return COST_EL_TANH;
  case OP_EXP: case OP_LOG: case OP_SIGMOID: case OP_SILU: return COST_EL_EXP;
  case OP_BROADCAST_TO: return COST_EL_INDEXED;
  case OP_REDUCE_SUM: {
    const Shape *x = &n->in[0]->shape;
    int64_t nx = ir_numel(x);
    *count = (double)nx;
    if (nx == ny) return -1; /* a copy */
    bool bias = y->rank >= 1 && ny == inner && x->rank >= 1 && x->dim[x->rank - 1] == inner;
    return bias ? COST_EL_FLAT : COST_EL_REDUCE;
  }
  default: return -1;
  }
}

typedef enum { T_FREE, T_GEMM, T_ATTN, T_MEM } TimeKind;

/* Seconds of one non-collective leaf node; *kind says which rate bounds it. */
static double op_time(const Module *m, const CostDevice *d, const Node *n, TimeKind *kind) {
  *kind = T_FREE;
  if (ir_ops[n->op].flags & F_SOURCE && n->op != OP_CONST && n->op != OP_IOTA) return 0;
  if (n->op == OP_RESHAPE) return 0; /* a view */
  if (n->op == OP_CAST && n->in[0]->dtype == n->out[0]->dtype) return 0;
  if (n->op == OP_STAGE_SELECT) return 0; /* picks a buffer */
  double bytes = 0;
  bool grouped = m->target == TARGET_CUDA && n->group > 0; /* one kernel: intermediates stay in registers */
  for (int j = 0; j < n->nin; j++)
    if (!(grouped && n->in[j]->def && n->in[j]->def->group == n->group)) bytes += value_bytes(n->in[j]);
  for (int j = 0; j < n->nout; j++) bytes += value_bytes(n->out[j]);
  double mem = bytes / d->bytes_per_s;
  switch (n->op) {
  case OP_MATMUL: {
    const Shape *a = &n->in[0]->shape;
    int64_t k = n->a.ta ? a->dim[a->rank - 2] : a->dim[a->rank - 1];
    double fl = 2.0 * (double)ir_numel(&n->out[0]->shape) * (double)k;
    *kind = T_GEMM;
    return fmax((fl + d->gemm_half_flops) / d->gemm_flops, mem); /* rate gemm_flops x fl / (fl + half) */
  }
  case OP_SDPA: case OP_ATTN_BLOCK: case OP_SDPA_BWD: case OP_ATTN_BLOCK_BWD: {
    double fl = attn_flops(n) * (n->a.causal ? 0.5 : 1.0);
    if (n->op == OP_SDPA_BWD || n->op == OP_ATTN_BLOCK_BWD) fl *= 2.5; /* scores again, dV, dP, dQ, dK */
    *kind = T_ATTN;
    return fmax(fl / d->attn_flops, mem);
  }
  default: {
    *kind = T_MEM;
    double count;
    int el = m->target == TARGET_CPU ? cpu_elem(n, &count) : -1;
    return el >= 0 ? fmax(mem, count * d->elem_s[el]) : mem;
  }
  }
}

/* ---- the timeline ------------------------------------------------------------------- */

typedef struct {
  double t;       /* the compute stream */
  double chan[2]; /* when each communication channel (in node, across nodes) is free */
} Clock;

typedef struct {
  const Module *m;
  const CostDevice *d;
  CommVolumes v;
  int stage;      /* the pipeline stage simulated (nodes predicated on another are skipped); -1: none */
  PtrMap pending; /* Value* -> index into ends: an asynchronous collective's output and when it is done */
  double *ends;
  int nends, capends;
  double mult;    /* the product of the enclosing repeat counts (for the sums below) */
  CostReport *r;
} Sim;

static void set_pending(Sim *s, const Value *v, double end) {
  intptr_t i;
  if (ptrmap_get(&s->pending, v, &i)) {
    s->ends[i] = end;
    return;
  }
  if (s->nends == s->capends) {
    s->capends = s->capends ? 2 * s->capends : 64;
    s->ends = realloc(s->ends, (size_t)s->capends * sizeof *s->ends);
    if (!s->ends) die("cost: out of memory");
  }
  s->ends[s->nends] = end;
  ptrmap_put(&s->pending, v, s->nends++);
}

static void wait_for(Sim *s, const Value *v, Clock *c) {
  intptr_t i;
  if (ptrmap_get(&s->pending, v, &i) && s->ends[i] > c->t) c->t = s->ends[i];
}

/* Seconds of one collective over its group's link; *side: the channel. */
static double coll_time(const Sim *s, const Node *n, int *side) {
  int ax = ir_comm_row(n);
  *side = 0;
  if (ax < 0 || ax >= IR_COMM_ROWS || n->op == OP_RECV) return 0;
  int gs = s->v.group_size[ax];
  if (gs <= 1) return 0;
  *side = s->v.across_nodes[ax];
  const CostLink *l = &s->d->link[*side];
  double share = 1;
  if (*side && s->m->mesh && s->v.members_per_node[ax] > 0) share = (double)s->m->mesh->devices_per_node / s->v.members_per_node[ax];
  if (!*side && s->m->has_topology && s->m->topo.cpu_only) share = 1;
  double bus = (double)ir_comm_node_bytes(n) * ir_comm_bus_factor(n->op, gs);
  return ir_comm_ring_steps(n->op, gs) * l->latency_s + bus * share / l->bytes_per_s;
}

static bool runs_here(const Sim *s, const Node *n) { return s->stage < 0 || ir_runs_on(n, s->stage); }

static bool has_async(const Graph *g) {
  for (int i = 0; i < g->nnodes; i++)
    if (ir_comm_async(g->nodes[i]) || (g->nodes[i]->body && has_async(g->nodes[i]->body))) return true;
  return false;
}

static void sim_graph(Sim *s, const Graph *g, Clock *c);

/* launch: false for a member of a CUDA fusion group after its first (one kernel runs the group) */
static void sim_node(Sim *s, const Node *n, Clock *c, bool launch) {
  for (int j = 0; j < n->nin; j++) wait_for(s, n->in[j], c);
  if (n->op == OP_REPEAT || n->op == OP_CALL) {
    int64_t count = n->op == OP_REPEAT ? n->a.count : 1;
    double outer = s->mult;
    s->mult = outer * (double)count;
    /* iterations reach a steady state at once (the same body each time): simulate two, extrapolate
     * the second's increments; the sums above are taken once with the repeat's multiplier */
    CostReport *keep = s->r, scratch;
    Clock c1 = *c;
    sim_graph(s, n->body, c);
    if (count > 1) {
      c1 = *c;
      memset(&scratch, 0, sizeof scratch);
      s->r = &scratch; /* the second iteration is timed, not summed again */
      sim_graph(s, n->body, c);
      s->r = keep;
      double k = (double)(count - 2);
      c->t += k * (c->t - c1.t);
      for (int i = 0; i < 2; i++) c->chan[i] += k * (c->chan[i] - c1.chan[i]);
    }
    s->mult = outer;
    if (has_async(n->body)) /* stacked gradients reduced in place: waited after the loop */
      for (int j = n->a.ncarry; j < n->nout; j++) set_pending(s, n->out[j], fmax(c->chan[0], c->chan[1]));
    return;
  }
  if (ir_ops[n->op].flags & F_COLL) {
    int side;
    double dt = coll_time(s, n, &side);
    s->r->comm_s[side] += s->mult * dt;
    bool async = ir_comm_async(n) || (n->op == OP_SEND && n->stage); /* pipeline sends are asynchronous */
    if (!async) {
      double start = fmax(c->t, c->chan[side]);
      c->t = c->chan[side] = start + dt;
      return;
    }
    s->r->comm_async_s += s->mult * dt;
    double hidden = s->d->overlap * dt;
    c->t += dt - hidden; /* the part the computing core does itself */
    double start = fmax(c->t, c->chan[side]);
    c->chan[side] = start + hidden;
    for (int j = 0; j < n->nout; j++) set_pending(s, n->out[j], c->chan[side]);
    return;
  }
  TimeKind kind;
  double dt = op_time(s->m, s->d, n, &kind);
  if (kind == T_FREE) return;
  double oh = launch ? s->d->op_overhead_s : 0;
  c->t += dt + oh;
  double w = s->mult;
  if (kind == T_GEMM) s->r->gemm_s += w * dt;
  else if (kind == T_ATTN) s->r->attn_s += w * dt;
  else s->r->mem_s += w * dt;
  s->r->overhead_s += w * oh;
  if (launch) s->r->kernels += (int64_t)w;
}

static void sim_graph(Sim *s, const Graph *g, Clock *c) {
  bool cuda = s->m->target == TARGET_CUDA;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (!runs_here(s, n)) continue;
    bool launch = !(cuda && n->group > 0 && i > 0 && g->nodes[i - 1]->group == n->group);
    sim_node(s, n, c, launch);
  }
}

/* One stage's (or, without pp, the rank's) step: the timeline's end, every async collective waited. */
static double sim_rank(Sim *s, int stage, CostReport *r) {
  s->stage = stage;
  s->r = r;
  s->mult = 1;
  Clock c = {0, {0, 0}};
  sim_graph(s, s->m->graph, &c);
  ptrmap_free(&s->pending);
  memset(&s->pending, 0, sizeof s->pending);
  s->nends = 0;
  return fmax(c.t, fmax(c.chan[0], c.chan[1]));
}

void cost_estimate(const Module *m, const CostDevice *d, CostReport *r) {
  memset(r, 0, sizeof *r);
  Sim s = {.m = m, .d = d};
  ir_comm_volumes(m, &s.v);
  const PipePlan *p = m->pipe;
  double busy_max = 0, busy_sum = 0;
  int nst = p ? p->pp : 1;
  for (int st = 0; st < nst; st++) {
    CostReport one;
    memset(&one, 0, sizeof one);
    double busy = sim_rank(&s, p ? st : -1, &one);
    busy_sum += busy;
    if (st == 0 || busy > busy_max) {
      busy_max = busy;
      *r = one; /* the busiest stage's parts */
    }
  }
  free(s.ends);
  r->compute_s = r->gemm_s + r->attn_s + r->mem_s + r->overhead_s;
  double step = busy_max;
  if (p && p->bubble < 1) {
    r->bubble = p->bubble;
    step = fmax(busy_max, busy_sum / nst / (1 - p->bubble));
    r->bubble_s = step - busy_sum / nst;
  }
  r->exposed_comm_s = busy_max - r->compute_s > 1e-9 * busy_max ? busy_max - r->compute_s : 0;
  r->step_s = step;
  r->tokens = ir_tokens_per_step(m);
  r->tokens_per_s = step > 0 ? (double)r->tokens / step : 0;
  int world = m->mesh ? m->mesh->world : 1;
  r->mfu = step > 0 && d->peak_flops > 0 ? ir_flops_per_token(m, true) * r->tokens_per_s / (world * d->peak_flops) : 0;
}

const char *cost_human_time(char *buf, size_t size, double s) {
  if (s >= 1) snprintf(buf, size, "%.3g s", s);
  else if (s >= 1e-3) snprintf(buf, size, "%.3g ms", s * 1e3);
  else snprintf(buf, size, "%.3g us", s * 1e6);
  return buf;
}

void cost_print(FILE *f, const Module *m, const CostDevice *d, const CostReport *r) {
  char a[32], b[32], c[32], e[32];
  fprintf(f, "# predicted step per rank (cost model, passes/cost.c; device: %s)\n", d->source);
  fprintf(f, "#   device: GEMM %.4g GFLOP/s, attention %.4g GFLOP/s, bandwidth %.4g GB/s, %s per kernel; links: in node "
             "%.4g GB/s + %s, across nodes %.4g GB/s + %s; async overlap %.0f%%\n",
          d->gemm_flops * 1e-9, d->attn_flops * 1e-9, d->bytes_per_s * 1e-9, cost_human_time(a, sizeof a, d->op_overhead_s),
          d->link[0].bytes_per_s * 1e-9, cost_human_time(b, sizeof b, d->link[0].latency_s), d->link[1].bytes_per_s * 1e-9,
          cost_human_time(c, sizeof c, d->link[1].latency_s), 100 * d->overlap);
  fprintf(f, "#   compute        %10s  GEMM %s, attention %s, bandwidth-bound %s, %lld kernel calls %s\n",
          cost_human_time(a, sizeof a, r->compute_s), cost_human_time(b, sizeof b, r->gemm_s),
          cost_human_time(c, sizeof c, r->attn_s), cost_human_time(e, sizeof e, r->mem_s), (long long)r->kernels,
          cost_human_time((char[32]){0}, 32, r->overhead_s));
  fprintf(f, "#   communication  %10s  in node %s, across nodes %s; asynchronous %s; exposed %s\n",
          cost_human_time(a, sizeof a, r->comm_s[0] + r->comm_s[1]), cost_human_time(b, sizeof b, r->comm_s[0]),
          cost_human_time(c, sizeof c, r->comm_s[1]), cost_human_time(e, sizeof e, r->comm_async_s),
          cost_human_time((char[32]){0}, 32, r->exposed_comm_s));
  if (m->pipe)
    fprintf(f, "#   pipeline bubble %9s  %.1f%% of the step idle (schedule %s)\n", cost_human_time(a, sizeof a, r->bubble_s),
            100 * r->bubble, pipe_sched_name(m->pipe->kind));
  fprintf(f, "#   step           %10s  %lld tokens: %.4g tokens/s, MFU %.1f%%\n", cost_human_time(a, sizeof a, r->step_s),
          (long long)r->tokens, r->tokens_per_s, 100 * r->mfu);
}
