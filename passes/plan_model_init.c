/* passes/plan_model_init.c — the plan model's figures from the base plan (see plan_model.h): the layer count,
 * the parameters' bytes by kind (a layer's split by tp or not, the rest, each pipeline end's), the layer
 * tensors in the order the forward reads them (pm->lt), the optimizer state's ratio, and the calibration of
 * the analytic time against the base plan's compiled cost model (plan_model.c's estimate of the base plan). */
#include "plan_model.h"

#include <math.h>
#include <string.h>

#include "cost_op.h"
#include "plan_model_int.h"
#include "plan_search.h"
#include "recompute_int.h"

/* The model's estimate of the base plan c, its stages as compiled: the model's compute is the last stage's, its
 * layers and the head, so (uneven stages) each virtual stage the last stage's chunk at its place (not the model's
 * own split's slowest; the busiest compiled stage's parts, compute and waits, moved with its waits), with the
 * even estimate's decisions (its deferred waits, zb's hold, the weights' copies). */
static void base_estimate(PlanModel *pm, const Module *base, const CostDevice *dev, const PlanCand *c, PlanEstimate *e) {
  const MeshMap *mm = base->mesh;
  int nv = c->pp * (c->sched == SCHED_INTERLEAVED ? c->v : 1);
  plan_model_estimate(pm, base, dev, c, e);
  if (c->pp > 1 && mm->stage_rows[0] && nv <= RT_MAX_STAGES) {
    int64_t n[RT_MAX_STAGES];
    for (int kk = 0; kk < nv; kk++) n[kk] = mm->stage_rows[(kk / c->pp) * c->pp + c->pp - 1];
    plan_model_estimate_split(pm, base, dev, c, n, e);
  }
}

void plan_model_free(PlanModel *pm) {
  pp_profiles_free(pm);
  pp_splits_free(pm);
}

static double logical_dim(const Module *m, const Value *v, int d) {
  return (double)v->shape.dim[d] * ir_dim_degree(&v->sharding, d, m->mesh);
}

static bool split_by_tp(const Value *v) {
  for (int d = 0; d < v->shape.rank; d++)
    if (v->sharding.split[d] == RT_AX_TP) return true;
  return false;
}

/* The parameter v is, through casts, gathers, transposes and loop arguments, or NULL. */
static const Node *param_of(const Value *v) {
  for (int k = 0; k < 16 && v; k++) {
    const Node *n = v->def;
    if (n->op == OP_PARAM) return n;
    if (n->op == OP_ARG && n->graph->owner && n->a.index < n->graph->owner->nin) v = n->graph->owner->in[n->a.index];
    else if (n->op == OP_CAST || n->op == OP_ALL_GATHER || n->op == OP_TRANSPOSE || n->op == OP_RESHAPE) v = n->in[0];
    else return NULL;
  }
  return NULL;
}

/* Which end of a pipeline reads each parameter outside the layers (pp: passes/pipe_owners.c holds it,
 * and its optimizer state, on that stage only): an embedding's lookup the first stage's (bit 0), any
 * other computing reader the last stage's (bit 1); its update, sums of squares and the copies,
 * gathers and slices of it are neither. */
static void param_ends(const Graph *g, PtrMap *ends) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body) param_ends(n->body, ends);
    switch (n->op) {
    case OP_CAST: case OP_ALL_GATHER: case OP_TRANSPOSE: case OP_RESHAPE: case OP_SHARD_SLICE: case OP_SGD_UPDATE:
    case OP_ADAMW_UPDATE: case OP_SUMSQ: case OP_TO_HOST: case OP_TO_DEVICE: case OP_ALL_REDUCE: case OP_REDUCE_SCATTER:
    case OP_REPEAT: case OP_CALL: case OP_SEND: case OP_STAGE_SELECT:
      continue;
    default:
      break;
    }
    for (int j = 0; j < n->nin; j++) {
      const Node *p = param_of(n->in[j]);
      if (!p) continue;
      intptr_t bits = 0;
      ptrmap_get(ends, p, &bits);
      ptrmap_put(ends, p, bits | (n->op == OP_EMBED && j == 0 ? 1 : 2));
    }
  }
}

/* The stacked layer parameter v is (param_of, and through a stage's or a chunk's rows, the coalesced
 * gathers' unpacking, a persistent bf16 copy: its parameter, a PARAM of top), or NULL. */
static const Node *layer_param_of(const Graph *top, const Value *v) {
  int64_t at = -1; /* a slice's start, where a concat's member is looked for (passes/zero_coalesce.c's unpacking) */
  for (int k = 0; k < 32 && v; k++) {
    const Node *n = v->def;
    if (n->op == OP_PARAM) return n;
    const char *src = n->op == OP_STATE ? ir_copy_source(n->a.name) : NULL;
    if (src) {
      for (int i = 0; i < top->nnodes; i++)
        if (top->nodes[i]->op == OP_PARAM && top->nodes[i]->a.name && !strcmp(top->nodes[i]->a.name, src)) return top->nodes[i];
      return NULL;
    }
    if (n->op == OP_SLICE && at < 0) at = n->a.start;
    if (n->op == OP_CONCAT) {
      int64_t off = 0;
      const Value *w = NULL;
      for (int j = 0; j < n->nin && !w; j++) {
        int64_t len = n->in[j]->shape.dim[n->a.axis];
        if (at >= off && at < off + len) w = n->in[j];
        off += len;
      }
      v = w, at = -1;
      continue;
    }
    if (n->op == OP_ARG && n->graph->owner && n->a.index < n->graph->owner->nin) v = n->graph->owner->in[n->a.index];
    else if (n->op == OP_CAST || n->op == OP_ALL_GATHER || n->op == OP_TRANSPOSE || n->op == OP_RESHAPE ||
             n->op == OP_SLICE || n->op == OP_SHARD_SLICE || n->op == OP_STAGE_SELECT)
      v = n->in[0];
    else return NULL;
  }
  return NULL;
}

/* The first forward layer loop under g (a repeat whose body reads the stacked layer parameters, of
 * `rows` rows, and makes no gradient): its layer parameters in the order of their first computing
 * reader (pm->lt), and which precede its first attention. */
static bool layer_order(PlanModel *pm, const Module *m, const Graph *g, double rows) {
  bool tp_known = m->mesh && m->mesh->dim[RT_AX_TP] > 1;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (!n->body) continue;
    bool bwd = false; /* (a backward loop: the gradients' order, not the forward's) */
    for (int q = 0; n->op == OP_REPEAT && q < n->body->nnodes; q++) {
      OpKind o = n->body->nodes[q]->op;
      bwd |= o == OP_SDPA_BWD || o == OP_ATTN_BLOCK_BWD || o == OP_RMSNORM_BWD || o == OP_LAYERNORM_BWD || o == OP_GELU_BWD ||
             o == OP_SILU_BWD;
    }
    if (n->op == OP_REPEAT && !bwd) {
      const Node *seen[PLAN_LAYER_TENSORS];
      bool attn = false;
      pm->nlt = 0;
      for (int q = 0; q < n->body->nnodes; q++) {
        const Node *x = n->body->nodes[q];
        attn |= x->op == OP_SDPA || x->op == OP_ATTN_BLOCK;
        bool moves = x->op == OP_REPEAT || x->op == OP_CALL || x->op == OP_RESHAPE || x->op == OP_CONCAT || x->op == OP_SLICE ||
                     x->op == OP_CAST || x->op == OP_TRANSPOSE || (ir_ops[x->op].flags & F_COLL);
        for (int j = 0; j < x->nin && !moves; j++) {
          const Node *p = layer_param_of(m->graph, x->in[j]);
          if (!p || p->out[0]->shape.rank < 2 || logical_dim(m, p->out[0], 0) != rows) continue;
          int k = 0;
          while (k < pm->nlt && seen[k] != p) k++;
          if (k < pm->nlt || pm->nlt == PLAN_LAYER_TENSORS) continue;
          double numel = 1;
          for (int d = 1; d < p->out[0]->shape.rank; d++) numel *= logical_dim(m, p->out[0], d);
          seen[pm->nlt] = p;
          bool mat = p->out[0]->shape.rank >= 3;
          pm->lt[pm->nlt++] = (PlanLayerTensor){numel, mat ? logical_dim(m, p->out[0], p->out[0]->shape.rank - 1) : 0,
                                                tp_known ? split_by_tp(p->out[0]) : mat, mat, !attn,
                                                x->op == OP_RMSNORM || x->op == OP_LAYERNORM};
        }
      }
      if (pm->nlt > 0) return true;
    }
    if (layer_order(pm, m, n->body, rows)) return true;
  }
  return false;
}
/* The head dim of the first attention of g (or of its bodies): its query's features over its heads; 0: none. */
static double attn_head_dim(const Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if ((n->op == OP_SDPA || n->op == OP_ATTN_BLOCK) && n->in[0]->shape.rank == 3)
      return (double)n->in[0]->shape.dim[2] / (n->a.heads > 0 ? n->a.heads : 1);
    double hd = n->body ? attn_head_dim(n->body) : 0;
    if (hd > 0) return hd;
  }
  return 0;
}

/* The graph holding the layers' loops (g or one of its bodies: a pipeline's stage, the accumulation's micro-step) and
 * their forward loop: the forward of the first backward loop (recompute_int.h's rc_forward_of). */
static const Graph *layer_loops(const Graph *g, const Node **f) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op == OP_REPEAT && n->a.reverse && (*f = rc_forward_of(n)) != NULL) return g;
    const Graph *in = n->body ? layer_loops(n->body, f) : NULL;
    if (in) return in;
  }
  return NULL;
}

/* Body g's GEMMs (all but the last where but_last): the seconds the cost model prices them at (*t: an epilogue's bytes
 * in, passes/cost_cuda.c) and those of their FLOPs and fixed time alone (*fl). */
static void gemm_times(const Module *m, const CostDevice *dev, const Graph *g, bool but_last, double *t, double *fl) {
  int last = -1;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_MATMUL) last = i;
  double fix = dev->gemm_flops > 0 ? dev->gemm_half_flops / dev->gemm_flops : 0;
  for (int i = 0; i < g->nnodes && dev->gemm_flops > 0; i++) {
    const Node *n = g->nodes[i];
    if (n->op != OP_MATMUL || (but_last && i == last)) continue;
    double extra = 0;
    TimeKind kind;
    if (m->target == TARGET_CUDA) cost_cuda_kernels(n, i, &extra);
    *t += cost_op_time(m, dev, n, false, extra, &kind);
    *fl += cost_gemm_flop(n) / dev->gemm_flops + (cost_gemm_launches(m, n) ? fix : 0);
  }
}

/* PlanModel.rc_epi: the forward GEMMs full recompute runs again (all but the layer's last) at their compiled price over
 * their FLOPs', against the layer's GEMMs' (forward and backward) over theirs, in the base: 1 where no epilogue
 * weighs (the CPU target, tp's collectives after the GEMMs); GPT-2's forward stores its bias, GELU and residual in
 * its GEMMs (passes/epilogue.c), 1.09 of the layer's average. */
static void recompute_epilogues(PlanModel *pm, const Module *base, const CostDevice *dev) {
  const Node *f = NULL;
  double tf = 0, ff = 0, tl = 0, fl = 0;
  pm->rc_epi = 1;
  const Graph *g = layer_loops(base->graph, &f);
  if (!g) return;
  gemm_times(base, dev, f->body, true, &tf, &ff);
  gemm_times(base, dev, f->body, false, &tl, &fl);
  for (int i = 0; i < g->nnodes; i++) /* its backward loops (zb: B and W) */
    if (g->nodes[i]->op == OP_REPEAT && g->nodes[i]->a.reverse && rc_forward_of(g->nodes[i]) == f)
      gemm_times(base, dev, g->nodes[i]->body, false, &tl, &fl);
  double r = tf / ff / (tl / fl);
  if (ff > 0 && fl > 0 && isfinite(r) && r > 0) pm->rc_epi = r;
}

/* PlanModel.rc_gemm, qkv and attn_fwd, from the layer's matrices in the forward's order (pm->lt) and the attention's head
 * dim: per score element the forward's 4 hd FLOPs and its softmax's, the backward's 10 hd and its own at its rate
 * (passes/cost_op.c). Not found: a GPT's 8 / 12, and 2 of the 7 hd-FLOPs. */
static void recompute_shares(PlanModel *pm, const Module *base, const CostDevice *dev) {
  double mats = 0, last = 0;
  for (int i = 0; i < pm->nlt; i++)
    if (pm->lt[i].mat) mats += pm->lt[i].numel, last = pm->lt[i].numel;
  pm->rc_gemm = mats > last && last > 0 ? (mats - last) / mats : 2.0 / 3;
  pm->qkv = 0;
  for (int i = 0; i < pm->nlt; i++)
    if (pm->lt[i].mat && pm->lt[i].early) pm->qkv += pm->lt[i].out;
  if (!(pm->qkv > 0)) pm->qkv = 3 * pm->d;
  double hd = attn_head_dim(base->graph), bwr = dev->attn_bwd_ratio > 0 ? dev->attn_bwd_ratio : 1;
  double f = 4 * hd + dev->attn_score_flops, b = (10 * hd + dev->attn_bwd_score_flops) / bwr;
  pm->attn_fwd = hd > 0 ? f / (f + b) : 2.0 / 7;
}

/* The compiled figures the calibration reads, r's at r's micro-batches `at` and f's at `fat`, taken affinely to
 * `to` (r's per step and per micro-batch parts). */
static void report_at(CostReport *r, int64_t at, const CostReport *f, int64_t fat, int64_t to) {
  double x = (double)(to - at) / (double)(at - fat);
  double *to_s[] = {&r->last_s[0], &r->last_s[1], &r->last_s[2], &r->last_s[3], &r->last_gemm_calls, &r->host_s,
                    &r->d2h_bytes, &r->h2d_bytes, &r->d2h_copies, &r->h2d_copies};
  const double *from[] = {&f->last_s[0], &f->last_s[1], &f->last_s[2], &f->last_s[3], &f->last_gemm_calls, &f->host_s,
                          &f->d2h_bytes, &f->h2d_bytes, &f->d2h_copies, &f->h2d_copies};
  for (size_t i = 0; i < sizeof to_s / sizeof to_s[0]; i++) *to_s[i] += (*to_s[i] - *from[i]) * x;
}

void plan_model_init(PlanModel *pm, const Module *base, const CostDevice *dev) {
  plan_model_init_at(pm, base, NULL, 0, dev);
}

void plan_model_init_at(PlanModel *pm, const Module *base, const Module *fewer, int64_t accum, const CostDevice *dev) {
  memset(pm, 0, sizeof *pm);
  pm->capacity = memplan_capacity(base, NULL, 0);
  const Graph *g = base->graph;
  /* the layer count: the most common logical dim 0 of the parameters of rank >= 2 (the stacked
   * layers' parameters outnumber the embeddings) */
  double cand[64];
  int votes[64], nc = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op == OP_INPUT && !pm->seq && !ir_dtype_is_float(n->out[0]->dtype) && n->out[0]->shape.rank >= 1)
      pm->seq = logical_dim(base, n->out[0], n->out[0]->shape.rank - 1);
    if (n->op != OP_PARAM || n->out[0]->shape.rank < 2) continue;
    double l = logical_dim(base, n->out[0], 0);
    int k = 0;
    while (k < nc && cand[k] != l) k++;
    if (k == nc && nc < 64) cand[nc] = l, votes[nc++] = 0;
    if (k < nc) votes[k]++;
  }
  int best = 0;
  for (int k = 1; k < nc; k++)
    if (votes[k] > votes[best]) best = k;
  double rows = nc ? cand[best] : 1; /* the stacks' logical rows: the layers, padded under uneven stages */
  pm->layers = (int)rows;
  if (base->mesh && base->mesh->stage_rows[0]) { /* uneven stages (passes/stage.c): the layers are their sum */
    int nv = base->mesh->dim[RT_AX_PP] * (base->mesh->stage_chunks > 1 ? base->mesh->stage_chunks : 1);
    pm->layers = 0;
    for (int k = 0; k < nv && k < RT_MAX_STAGES; k++) pm->layers += base->mesh->stage_rows[k];
  }
  bool tp_known = base->mesh && base->mesh->dim[RT_AX_TP] > 1;
  double pbytes = 0;
  PtrMap ends = {0};
  param_ends(g, &ends);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op != OP_PARAM) continue;
    const Value *v = n->out[0];
    double numel = 1;
    for (int d = 0; d < v->shape.rank; d++) numel *= logical_dim(base, v, d);
    double b = numel * 4; /* the master copy: f32 */
    pbytes += numel * ir_dtype_size(v->dtype);
    pm->ntensors++;
    bool layer = v->shape.rank >= 2 && logical_dim(base, v, 0) == rows;
    if (layer) {
      bool tp = tp_known ? split_by_tp(v) : v->shape.rank >= 3;
      if (v->shape.rank >= 3) pm->pl_mat += numel / rows, pm->nl_mat++;
      *(tp ? &pm->pl_split : &pm->pl_rep) += b / rows;
    } else {
      double d0 = logical_dim(base, v, 0), dl = logical_dim(base, v, v->shape.rank - 1);
      if (v->shape.rank == 1 && !pm->d) pm->d = dl;
      if (v->shape.rank == 2 && d0 > pm->vocab && d0 != pm->seq) pm->vocab = d0;
      if (v->shape.rank == 2 && !pm->d) pm->d = dl;
      bool tp = tp_known ? split_by_tp(v) : v->shape.rank == 2 && d0 != pm->seq;
      *(tp ? &pm->po_split : &pm->po_rep) += b;
      intptr_t bits = 0;
      ptrmap_get(&ends, n, &bits);
      if (v->shape.rank == 2 && bits == 3) pm->tied = true;
      for (int e = 0; e < 2; e++)
        if (!bits || bits & (1 << e)) *(tp ? &pm->pe_split[e] : &pm->pe_rep[e]) += b; /* (unread: both) */
    }
  }
  ptrmap_free(&ends);
  if (!layer_order(pm, base, g, rows)) pm->nlt = 0;
  recompute_shares(pm, base, dev);
  recompute_epilogues(pm, base, dev);
  double sbytes = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op != OP_STATE || ir_copy_source(n->a.name)) continue; /* (a weight's bf16 copy: no optimizer state) */
    double numel = 1;
    for (int d = 0; d < n->out[0]->shape.rank; d++) numel *= logical_dim(base, n->out[0], d);
    sbytes += numel * ir_dtype_size(n->out[0]->dtype);
  }
  pm->state_ratio = pbytes > 0 ? sbytes / pbytes : 2;
  pm->cb = base->recipe.precision == PREC_BF16 ? 2 : 4;
  /* calibration at the base plan: its compiled cost model over the analytic figures */
  pm->k_gemm = pm->k_attn = pm->k_mem = pm->k_kern = 1;
  for (int i = 0; i < 5; i++) pm->k_bal[i] = 1;
  pm->gemm_calls = 3.0 * pm->nl_mat; /* (no compiled base: a matrix's forward, input- and weight-gradient GEMMs) */
  const MeshMap *mm = base->mesh;
  if (!mm || !base->memplan) return;
  PlanCand c = {.tp = mm->dim[RT_AX_TP], .pp = mm->dim[RT_AX_PP], .cp = mm->dim[RT_AX_CP], .dp = mm->dim[RT_AX_DP],
                .zero = base->plan.zero, .mb = (int)base->batch.micro, .accum = base->batch.accum, .sp = base->plan.sp,
                .rec = base->plan.recompute, .sched = base->plan.schedule, .bal = base->plan.stage_balanced,
                .v = base->plan.interleave > 1 ? base->plan.interleave : 1};
  CostReport r;
  cost_estimate(base, dev, &r);
  if (fewer && fewer->memplan && fewer->batch.accum < c.accum && accum > c.accum) {
    CostReport rf;
    cost_estimate(fewer, dev, &rf);
    report_at(&r, c.accum, &rf, fewer->batch.accum, accum);
    c.accum = accum;
  }
  /* a layer's GEMM launches as compiled (hfuse's pairs one, a full recompute's forward again): the last stage's
   * a micro-batch, less the head's 3, over its layers (uneven: its chunks' rows) */
  int nvs = c.pp * (c.sched == SCHED_INTERLEAVED ? c.v : 1);
  double lst = (double)pm->layers / c.pp;
  if (c.pp > 1 && mm->stage_rows[0] && nvs <= RT_MAX_STAGES) {
    lst = 0;
    for (int kk = c.pp - 1; kk < nvs; kk += c.pp) lst += (double)mm->stage_rows[kk];
  }
  double calls = (r.last_gemm_calls / (c.accum > 0 ? c.accum : 1) - 3) / lst / (c.rec == RECOMPUTE_FULL ? 1 + pm->rc_gemm / 3 : 1);
  if (lst > 0 && calls >= 1 && isfinite(calls)) pm->gemm_calls = calls;
  PlanEstimate e;
  base_estimate(pm, base, dev, &c, &e);
  double *k[4] = {&pm->k_gemm, &pm->k_attn, &pm->k_mem, &pm->k_kern};
  /* (ZeRO-2/3's packing under pp is the compiled figures' already: e.zfold_s, outside k_mem) */
  double got[4] = {r.last_s[0], r.last_s[1], r.last_s[2] - e.zfold_s, r.last_s[3]};
  double ana[4] = {e.gemm_s, e.attn_s, e.mem_s - e.zfold_s, e.kern_s};
  for (int i = 0; i < 4; i++)
    if (got[i] > 0 && ana[i] > 0) {
      double f = got[i] / ana[i];
      *k[i] = f < 0.2 ? 0.2 : f > 5 ? 5 : f;
    }
  /* the balance's figures: the stage pass's (passes/pipe_balance.c prices the program before fusion, recompute and
   * ZeRO) over the model's at the base, now calibrated. GPT-2 124M tp 2+sp pp 2 int2 mb 16: a layer's F + B 0.84 x
   * the stage pass's (its kernels unfused), the head 1.07 x: 3.75 layers for its 2.98, the split [4, 3, 4, 1] for
   * the compile's [3, 4, 4, 1] and the memory 1.11 x the compiled */
  const PipeBalance *pb = base->pipe_balance;
  if (c.pp > 1 && pb) {
    base_estimate(pm, base, dev, &c, &e);
    double got_b[5] = {pb->layer_f, pb->layer_b, pb->first_f, pb->first_b, pb->last_f};
    double ana_b[5] = {e.bal_f, e.bal_b, e.bal_f0, e.bal_b0, e.bal_fl};
    for (int i = 0; i < 5; i++)
      if (got_b[i] > 0 && ana_b[i] > 0) pm->k_bal[i] = fmin(5, fmax(0.2, got_b[i] / ana_b[i]));
  }
  if (base->plan.offload && e.shard > 0) { /* the compiled copies and host work, per byte of the shard */
    pm->off_d2h = r.d2h_bytes / e.shard;
    pm->off_h2d = r.h2d_bytes / e.shard;
    pm->off_host = r.host_s * dev->host_bytes_per_s / e.shard;
    pm->off_copies[0] = r.d2h_copies * (c.pp > 1 ? c.pp : 1); /* (r: the busiest stage's) */
    pm->off_copies[1] = r.h2d_copies * (c.pp > 1 ? c.pp : 1);
  }
}
