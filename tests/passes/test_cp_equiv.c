/* tests/passes/test_cp_equiv.c — context parallelism (passes/shard_cp.c) against the single rank.
 *
 * The sequence split over cp in zigzag order, ring attention (attn_block over the local keys, then
 * cp - 1 hops of K and V around the ring, combined by log-sum-exp; the backward ring with its dK
 * and dV accumulators), rope at global positions, the loss in partial sums. For a tiny GPT (causal,
 * learned positions, fused QKV), a Llama-shaped model (causal, RoPE, GQA) and a bidirectional one
 * (non-causal, GQA, RoPE and learned positions), and the plans cp 2 and 4, cp 2 x tp 2 and
 * cp 2 x dp 2: the whole pipeline runs on the single-rank program and on the partitioned one, both
 * interpreted in fp64 (the partitioned one on every simulated rank) for two AdamW steps on the same
 * logical tokens; after each step the loss, the grad norm, every gradient, parameter and optimizer
 * state, assembled from the ranks' blocks, must agree with the single rank within a relative error
 * of 1e-10, and the replicas of a replicated value must agree too. The partitioned program must
 * pass K and V around the ring (send / recv over cp), each hop issued before the block it overlaps
 * (codegen runs it asynchronously during that block), and a sequence that 2 x cp does not divide
 * is refused. Under cp x dp the gradients and the loss are reduced by one all-reduce over the
 * combined dp x cp group each (Attrs.mesh_with), never over dp and then cp; under ZeRO 1, 2 and 3
 * (ring and all2all, with and without accumulation) the shards are over that group: the optimizer
 * states split over dp and then cp (Sharding.inner), the gradients reduce-scattered over the group
 * with nothing after them over cp, ZeRO-3's parameters stored split. Under cp x tp + sp the
 * tp blocks' outputs are reduce-scattered over tp within each cp rank's sequence (Sharding.inner)
 * and gathered before the next column-parallel matmul: no matmul output is all-reduced over tp.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "frontend.h"
#include "interp.h"
#include "pipeline.h"
#include "tb.h"

#define TOL 1e-10
#define MAXDEF 24

static int failures;

typedef struct {
  int dp, tp, cp;
  bool a2a;          /* cp_mode all2all */
  int zero;          /* ZeRO stage (over dp) */
  int pp, M;         /* pipeline stages and micro-batches (pp 1: M 1) */
  const char *sched; /* the pipeline's schedule */
  bool sp;           /* sequence parallelism over tp inside each cp rank's chunks (Sharding.inner) */
} CpPlan;

static const int *stage_layers; /* the pp plans' `pp N layers(..)` (uneven stages), NULL: even */

static Module *compile(Arena *a, const char *path, const FeDefine *defs, int ndefs, const CpPlan *p, int64_t batch) {
  FeDefine d[MAXDEF];
  int n = 0, dp = p->dp, tp = p->tp, cp = p->cp, pp = p->pp > 1 ? p->pp : 1, M = p->M > 1 ? p->M : 1;
  bool a2a = p->a2a;
  char sdp[16], stp[16], scp[16], smb[16], sb[16], sz[16], spp[16];
  bool has_sp = false;
  for (int i = 0; i < ndefs; i++) d[n++] = defs[i], has_sp |= strcmp(defs[i].key, "sp") == 0;
  snprintf(sdp, sizeof sdp, "%d", dp);
  snprintf(stp, sizeof stp, "%d", tp);
  snprintf(scp, sizeof scp, "%d", cp);
  snprintf(smb, sizeof smb, "%lld", (long long)(batch / (dp * M)));
  snprintf(spp, sizeof spp, "%d", pp);
  d[n++] = (FeDefine){"pp", spp};
  if (pp > 1) d[n++] = (FeDefine){"schedule", p->sched};
  d[n++] = (FeDefine){"dp", sdp};
  d[n++] = (FeDefine){"tp", stp};
  d[n++] = (FeDefine){"cp", scp};
  if (a2a) d[n++] = (FeDefine){"cp_mode", "all2all"};
  snprintf(sz, sizeof sz, "%d", p->zero);
  d[n++] = (FeDefine){"zero", sz};
  if (!has_sp) d[n++] = (FeDefine){"sp", p->sp ? "on" : "off"};
  d[n++] = (FeDefine){"micro_batch", smb};
  snprintf(sb, sizeof sb, "%lld", (long long)batch); /* the global batch: micro_batch x dp x M */
  d[n++] = (FeDefine){"batch", sb};
  d[n++] = (FeDefine){"cross_node_tp", "on"};
  const char *dirs[1] = {SHARDC_MODELS_DIR};
  FeOptions o = {.defines = d, .ndefines = n, .world = dp * tp * cp * pp, .import_dirs = dirs, .nimport_dirs = 1};
  Module *m = fe_compile(a, path, &o);
  if (!m) return NULL;
  if (stage_layers && pp > 1) { /* (the frontend's parse of `layers(..)` is pp_plan.sh's) */
    m->plan.nstage_layers = pp;
    for (int s = 0; s < pp; s++) m->plan.stage_layers[s] = stage_layers[s];
  }
  PipelineOptions po = {.verify = true};
  if (!pipeline_run(m, &po)) return NULL;
  return m;
}


/* Ring traffic: send / recv over cp, attention in blocks, and gathers over cp (the sequence is never
 * gathered: weight gradients are partial sums over cp). */
typedef struct {
  int p2p, blocks, gathers, a2a, sdpa;
  int ar_dpcp, ar_cp, ar_dp; /* all-reduces over dp x cp (one group), over cp alone, over dp alone */
  int rs_dp, ar_cp_shard;     /* reduce-scatters over dp alone; all-reduces over cp of their shards */
  int ar_dp_sumsq;            /* the clip's sums of squares of gradient shards, over dp alone */
  int rs_dpcp, rs_dpcp_loop;  /* ZeRO-2 / 3: reduce-scatters over the dp x cp group; of them, inside a loop */
  int ag_dpcp, sl_dpcp;       /* ZeRO: all-gathers and shard slices over the dp x cp group */
  int state_dpcp, state_dp;   /* ZeRO: optimizer states split over dp and then cp (S(dp)>S(cp)); over dp alone */
  int split_params;           /* ZeRO-3: parameters stored split over dp (and then cp) */
  int rs_cp, ag_cp, state_cp, param_cp; /* ZeRO over cp alone (dp 1): scatters, gathers; states, parameters split */
  int cp_unstaged;            /* pp > 1: ring hops and all-to-alls over cp outside any stage's instruction */
  int sp_rs, sp_ag;           /* sp: reduce-scatters / all-gathers over tp into / out of a cp split (inner) */
  int ar_tp_act;              /* sp: all-reduces over tp of a matmul's output (what sp replaces) */
  int stacked_hops;           /* a loop's stacked results that are ring hops' receives (kept for the backward) */
} CpCount;

/* v split over dp along some dim: 1 over dp and then cp (ZeRO over the dp x cp group), 2 over dp alone, 0 not. */
static int dp_split_kind(const Value *v) {
  for (int d = 0; d < v->shape.rank; d++)
    if (v->sharding.split[d] == RT_AX_DP) return v->sharding.inner[d] == RT_AX_CP ? 1 : 2;
  return 0;
}

static void count_ring_at(const Graph *g, bool staged, int depth, CpCount *c) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body) count_ring_at(n->body, staged || n->stage, depth + 1, c);
    for (int k = n->op == OP_REPEAT ? n->a.ncarry : n->body ? n->body->nresults : 0; k < (n->body ? n->body->nresults : 0); k++)
      c->stacked_hops += n->body->results[k]->def->op == OP_RECV && n->body->results[k]->def->a.mesh_axis == RT_AX_CP;
    bool dpcp = n->a.mesh_axis == RT_AX_DP && n->a.mesh_with == 1u << RT_AX_CP;
    if (n->op == OP_REDUCE_SCATTER && dpcp) c->rs_dpcp++, c->rs_dpcp_loop += depth > 0;
    if (n->op == OP_ALL_GATHER && dpcp) c->ag_dpcp++;
    if (n->op == OP_SHARD_SLICE && dpcp) c->sl_dpcp++;
    if (n->op == OP_STATE) {
      int k = dp_split_kind(n->out[0]);
      c->state_dpcp += k == 1, c->state_dp += k == 2;
    }
    if ((n->op == OP_SEND || n->op == OP_RECV || n->op == OP_ALL_TO_ALL) && n->a.mesh_axis == RT_AX_CP && !staged &&
        !n->stage)
      c->cp_unstaged++;
    /* a gather of the sequence (zigzag) over cp; ZeRO's over cp alone (dp 1) gather contiguous shards */
    if (n->op == OP_ALL_GATHER && n->a.mesh_axis == RT_AX_CP && n->a.blocks == RT_BLOCKS_ZIGZAG) c->gathers++;
    bool cp_alone = n->a.mesh_axis == RT_AX_CP && !n->a.mesh_with && n->a.blocks <= 1;
    if (n->op == OP_ALL_GATHER && cp_alone) c->ag_cp++;
    if (n->op == OP_REDUCE_SCATTER && cp_alone) c->rs_cp++;
    if (n->op == OP_STATE || n->op == OP_PARAM)
      for (int d = 0; d < n->out[0]->shape.rank; d++)
        if (n->out[0]->sharding.split[d] == RT_AX_CP) *(n->op == OP_STATE ? &c->state_cp : &c->param_cp) += 1;
    if ((n->op == OP_SEND || n->op == OP_RECV) && n->a.mesh_axis == RT_AX_CP) c->p2p++;
    if (n->op == OP_ALL_TO_ALL && n->a.mesh_axis == RT_AX_CP) c->a2a++;
    if (n->op == OP_ATTN_BLOCK || n->op == OP_ATTN_BLOCK_BWD) c->blocks++;
    if (n->op == OP_SDPA || n->op == OP_SDPA_BWD) c->sdpa++;
    if (n->op == OP_REDUCE_SCATTER && n->a.mesh_axis == RT_AX_DP && !n->a.mesh_with) c->rs_dp++;
    if (n->op == OP_REDUCE_SCATTER && n->a.mesh_axis == RT_AX_TP && n->out[0]->sharding.split[n->a.axis] == RT_AX_CP &&
        n->out[0]->sharding.inner[n->a.axis] == RT_AX_TP)
      c->sp_rs++;
    if (n->op == OP_ALL_GATHER && n->a.mesh_axis == RT_AX_TP && n->in[0]->sharding.split[n->a.axis] == RT_AX_CP &&
        n->in[0]->sharding.inner[n->a.axis] == RT_AX_TP)
      c->sp_ag++;
    if (n->op == OP_ALL_REDUCE && n->a.mesh_axis == RT_AX_TP && n->in[0]->def->op == OP_MATMUL) c->ar_tp_act++;
    if (n->op == OP_PARAM) c->split_params += dp_split_kind(n->out[0]) != 0;
    if (n->op == OP_ALL_REDUCE) {
      const Node *src = n->in[0]->def;
      if (n->a.mesh_axis == RT_AX_DP && n->a.mesh_with == 1u << RT_AX_CP) c->ar_dpcp++;
      else if (n->a.mesh_axis == RT_AX_CP && !n->a.mesh_with && src->op == OP_REDUCE_SCATTER && src->a.mesh_axis == RT_AX_DP)
        c->ar_cp_shard++;
      else if (n->a.mesh_axis == RT_AX_CP && !n->a.mesh_with) c->ar_cp++;
      else if (n->a.mesh_axis == RT_AX_DP && !n->a.mesh_with && src->op == OP_SUMSQ) c->ar_dp_sumsq++;
      else if (n->a.mesh_axis == RT_AX_DP && !n->a.mesh_with) c->ar_dp++;
    }
  }
}

static void count_ring(const Graph *g, bool staged, CpCount *c) { count_ring_at(g, staged, 0, c); }

static int position(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  return -1;
}

/* Overlap: each hop is issued before the block it overlaps — the receive of a block's K comes
 * before the previous block of its ring (forward and backward), and the backward ring's dK / dV
 * accumulator hops before the block whose share is added to them. Counts the hops checked and
 * those out of place. */
static void check_overlap(const Graph *g, int *hops, int *late) {
  int prev[2] = {-1, -1}; /* the previous block of the ring: attn_block, attn_block_bwd */
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body) check_overlap(n->body, hops, late);
    if (n->op == OP_ATTN_BLOCK || n->op == OP_ATTN_BLOCK_BWD) {
      int *p = &prev[n->op == OP_ATTN_BLOCK_BWD];
      const Node *r = n->in[1]->def;
      if (r->op == OP_RECV && r->graph == g) {
        (*hops)++;
        if (*p < 0 || position(g, r) > *p) (*late)++;
      }
      *p = i;
    }
    if (n->op == OP_ADD && n->in[0]->def->op == OP_RECV && n->in[1]->def->op == OP_ATTN_BLOCK_BWD &&
        n->in[0]->def->graph == g) {
      (*hops)++;
      if (position(g, n->in[0]->def) > position(g, n->in[1]->def)) (*late)++;
    }
  }
}

static int64_t bytes_of(const Value *v) { return ir_numel(&v->shape) * ir_dtype_size(v->dtype); }

/* The memory plan of an overlapped hop: codegen waits before the first reader of what the hop
 * receives, so until then the runtime reads the sent tensor and writes the received one: no value
 * made from the hop up to that reader may lie on the sent bytes (iteration 0 of a loop body).
 * Counts the hops checked and the values placed on a sent tensor in flight. */
static void check_shift_memory(const Graph *g, int *hops, int *clobbered) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body) check_shift_memory(n->body, hops, clobbered);
    if (n->op != OP_SEND || n->stage || i + 1 >= g->nnodes || g->nodes[i + 1]->op != OP_RECV) continue;
    const Value *x = n->in[0], *y = g->nodes[i + 1]->out[0];
    if (x->def->op == OP_ARG || x->offset < 0) continue; /* the caller's memory, live through the body */
    (*hops)++;
    int w = i + 2;
    for (bool read = false; w < g->nnodes && !read; w += !read)
      for (int k = 0; k < g->nodes[w]->nin; k++) read |= g->nodes[w]->in[k] == y;
    for (int j = i + 1; j < w; j++)
      for (int k = 0; k < g->nodes[j]->nout; k++) {
        const Value *v = g->nodes[j]->out[k];
        if (v->offset < 0 || v == x) continue;
        if (v->offset < x->offset + bytes_of(x) && x->offset < v->offset + bytes_of(v)) {
          fprintf(stderr, "  %%%d (%s) is placed on the bytes %%%d sends, before the hop is waited\n", v->id,
                  ir_ops[v->def->op].name, x->id);
          (*clobbered)++;
        }
      }
  }
}

static void run_model(const char *label, const char *path, const FeDefine *defs, int ndefs, int64_t B, int64_t S,
                      int64_t V, const CpPlan *plans, int nplans) {
  fprintf(stderr, "%s\n", label);
  Arena ra;
  arena_init(&ra);
  const CpPlan one = {1, 1, 1, false, 0, 1, 1, NULL, false};
  Module *ref = compile(&ra, path, defs, ndefs, &one, B);
  if (!ref) {
    fprintf(stderr, "FAIL %s: the single-rank program does not compile\n", label);
    failures++;
    return;
  }
  Tensor tok = tb_randint(tb_shape(2, (int)B, (int)S), 101, 0, V);
  Tensor tgt = tb_randint(tb_shape(2, (int)B, (int)S), 102, 0, V);
  /* an ignored position: the loss is a mean over the others, on every layout (not under a pipeline:
   * its micro-batches' losses are each a mean over its own positions, averaged, as accumulation's) */
  bool micro = false; /* pipeline micro-batches or accumulation micro-steps */
  for (int k = 0; k < nplans; k++) micro |= plans[k].pp > 1 || plans[k].M > 1;
  if (!micro) tgt.data[3] = -1;
  for (int k = 0; k < nplans; k++) {
    CpPlan p = plans[k];
    char what[96];
    char zs[16] = "";
    if (p.zero) snprintf(zs, sizeof zs, " zero %d", p.zero);
    char ps[48] = "";
    if (p.pp > 1) snprintf(ps, sizeof ps, " x pp %d %s M %d", p.pp, p.sched, p.M);
    else if (p.M > 1) snprintf(ps, sizeof ps, " accum %d", p.M);
    snprintf(what, sizeof what, "cp %d x tp %d%s x dp %d%s%s%s", p.cp, p.tp, p.sp ? " + sp" : "", p.dp, ps,
             p.a2a ? " all2all" : "", zs);
    Arena pa;
    arena_init(&pa);
    Module *pm = compile(&pa, path, defs, ndefs, &p, B);
    if (!pm) {
      fprintf(stderr, "FAIL %s %s: does not compile\n", label, what);
      failures++;
      arena_free(&pa);
      continue;
    }
    CpCount c = {0};
    count_ring(pm->graph, false, &c);
    /* ring: send / recv and attention blocks, no whole-sequence sdpa; all2all: all_to_all and sdpa
     * (on heads / cp), no ring; neither gathers the sequence */
    bool shape_ok = p.a2a ? c.a2a > 0 && c.sdpa > 0 && c.p2p == 0 && c.blocks == 0
                          : c.p2p > 0 && c.blocks > 0 && c.sdpa == 0 && c.a2a == 0;
    /* pp: each stage's instructions run their layers' ring among the stage's cp ranks */
    /* full and selective recompute pass the ring's K and V around again in the backward (its blocks
     * recomputed): no loop keeps a hop's (full kept 2 (cp - 1) hidden states a layer beside its input) */
    bool rc = false;
    for (int i = 0; i < ndefs; i++) rc |= strcmp(defs[i].key, "recompute") == 0 && strcmp(defs[i].value, "none") != 0;
    if (rc && c.stacked_hops > 0) {
      fprintf(stderr, "FAIL %s %s: recompute keeps %d ring hops' receives for the backward\n", label, what,
              c.stacked_hops);
      failures++;
    }
    if (p.pp > 1 && c.cp_unstaged > 0) {
      fprintf(stderr, "FAIL %s %s: %d ring hops or all-to-alls over cp outside a stage's instructions\n", label, what,
              c.cp_unstaged);
      failures++;
    }
    if (!shape_ok || c.gathers > 0) {
      fprintf(stderr,
              "FAIL %s %s: %d sends/recvs over cp, %d attention blocks, %d all-to-alls over cp, %d sdpa, %d all-gathers "
              "over cp\n", label, what, c.p2p, c.blocks, c.a2a, c.sdpa, c.gathers);
      failures++;
    }
    /* cp x dp: the gradients (and the loss) reduced over dp and cp in one all-reduce over their combined
     * group each, none over dp or cp alone; cp alone: over cp */
    bool group_ok = p.dp > 1 ? c.ar_dpcp > 0 && c.ar_cp == 0 && c.ar_dp == 0 : c.ar_dpcp == 0 && c.ar_cp > 0;
    /* ZeRO under cp x dp shards over the dp x cp group (Megatron's distributed optimizer): the
     * optimizer states split over dp and then cp (S(dp)>S(cp)), none over dp alone; the parameters
     * gathered over the group; ZeRO-1 slices the whole gradient over the group; ZeRO-2 / 3
     * reduce-scatter the gradients over it (with accumulation, inside the loops: each micro-step's)
     * and nothing else settles them: no reduce-scatter over dp alone, no all-reduce of a shard over
     * cp; ZeRO-3 also stores parameters split. The loss and the clip's sums still over the group. */
    bool zero = p.zero >= 1 && p.dp > 1;
    bool zero_ok = c.rs_dp == 0 && c.ar_cp_shard == 0 && c.state_dp == 0;
    if (zero)
      zero_ok &= c.state_dpcp > 0 && c.ag_dpcp > 0 &&
                 (p.zero >= 2 ? c.rs_dpcp > 0 && (p.M <= 1 || p.pp > 1 || c.rs_dpcp_loop > 0)
                              : c.rs_dpcp == 0 && c.sl_dpcp > 0) &&
                 (p.zero < 3 || c.split_params > 0);
    else
      zero_ok &= c.rs_dpcp == 0 && c.state_dpcp == 0 && c.split_params == 0;
    /* at dp 1, ZeRO shards over cp alone: the states (ZeRO-3: and parameters) split over cp, the
     * gradients reduce-scattered over it (ZeRO-2 / 3), the parameters gathered over it */
    bool zcp = p.zero >= 1 && p.dp == 1;
    if (zcp)
      zero_ok &= c.state_cp > 0 && c.ag_cp > 0 && (p.zero < 2 || c.rs_cp > 0) && (p.zero < 3 || c.param_cp > 0);
    else
      zero_ok &= c.state_cp == 0 && c.param_cp == 0 && c.rs_cp == 0 && c.ag_cp == 0;
    if (!group_ok || !zero_ok) {
      fprintf(stderr,
              "FAIL %s %s: all-reduces over dp x cp %d, over cp alone %d, over dp alone %d; reduce-scatters over dp x cp "
              "%d (%d in loops), over dp alone %d, all-reduces of their shards over cp %d; all-gathers over dp x cp %d, "
              "shard slices %d; states split over dp x cp %d, over dp alone %d; parameters split over dp %d\n",
              label, what, c.ar_dpcp, c.ar_cp, c.ar_dp, c.rs_dpcp, c.rs_dpcp_loop, c.rs_dp, c.ar_cp_shard, c.ag_dpcp,
              c.sl_dpcp, c.state_dpcp, c.state_dp, c.split_params);
      failures++;
    } else if (zcp) {
      fprintf(stderr, "  %s %s: over cp: %d reduce-scatters, %d all-gathers; %d states and %d parameters split over cp\n",
              label, what, c.rs_cp, c.ag_cp, c.state_cp, c.param_cp);
    } else if (zero) {
      fprintf(stderr,
              "  %s %s: over the dp x cp group: %d reduce-scatters (%d in loops), %d all-gathers, %d shard slices, "
              "%d all-reduces; %d states and %d parameters split over dp x cp\n", label, what, c.rs_dpcp,
              c.rs_dpcp_loop, c.ag_dpcp, c.sl_dpcp, c.ar_dpcp, c.state_dpcp, c.split_params);
    } else if (p.dp > 1) {
      fprintf(stderr, "  %s %s: %d all-reduces over the dp x cp group, none over dp or cp alone\n", label, what,
              c.ar_dpcp);
    }
    /* sp: the tp blocks' outputs reduce-scattered along each cp rank's sequence, gathered before the
     * next column-parallel matmul; no activation all-reduced over tp */
    if (p.sp && (c.sp_rs == 0 || c.sp_ag == 0 || c.ar_tp_act > 0)) {
      fprintf(stderr, "FAIL %s %s: %d reduce-scatters and %d all-gathers over tp inside cp, %d activations all-reduced over tp\n",
              label, what, c.sp_rs, c.sp_ag, c.ar_tp_act);
      failures++;
    } else if (p.sp) {
      fprintf(stderr, "  %s %s: %d reduce-scatters and %d all-gathers over tp inside each cp rank's sequence\n", label,
              what, c.sp_rs, c.sp_ag);
    }
    int hops = 0, late = 0;
    check_overlap(pm->graph, &hops, &late);
    if ((!p.a2a && hops == 0) || late > 0) {
      fprintf(stderr, "FAIL %s %s: %d of %d ring hops not issued before the block they overlap\n", label, what, late,
              hops);
      failures++;
    }
    int shifts = 0, clobbered = 0;
    check_shift_memory(pm->graph, &shifts, &clobbered);
    if ((!p.a2a && shifts == 0) || clobbered > 0) {
      fprintf(stderr, "FAIL %s %s: %d values placed on a sent tensor in flight (%d hops checked)\n", label, what,
              clobbered, shifts);
      failures++;
    }
    Tensor ptok = tok, ptgt = tgt; /* a pipeline's micro-batches, accumulation's micro-steps: [M, B / M, S] */
    if (p.pp > 1 || p.M > 1) ptok.shape = ptgt.shape = tb_shape(3, p.M, (int)(B / p.M), (int)S);
    failures += tb_equiv_steps(ref, pm, &tok, &tgt, &ptok, &ptgt, label, what, TOL, true);
    arena_free(&pa);
  }
  tensor_free(&tok);
  tensor_free(&tgt);
  arena_free(&ra);
}

/* One plan that must be refused with an error (and no program). */
static void refused(const char *what, const char *path, const FeDefine *d, int nd, int tp, int cp, bool a2a) {
  Arena a;
  arena_init(&a);
  Diag diag; /* this plan's own diagnostics, shown */
  diag_init(&diag, NULL, 0);
  Diag *outer = diag_enter(&diag);
  const CpPlan p = {1, tp, cp, a2a, 0, 1, 1, NULL, false};
  Module *m = compile(&a, path, d, nd, &p, 2);
  diag_leave(outer);
  bool ok = !m && diag.nerrors > 0;
  diag_free(&diag);
  fprintf(stderr, "  %s: %s\n", what, ok ? "refused" : "NOT refused");
  if (!ok) failures++;
  arena_free(&a);
}

/* seq 12 does not split into 2 x cp = 8 chunks; all2all needs cp
 * to divide the heads and the kv heads (per tp rank). */
static void check_refused(void) {
  const char *tiny = SHARDC_MODELS_DIR "/tiny.model", *llama = SHARDC_MODELS_DIR "/llama3-8b.model";
  const FeDefine d[] = {{"seq", "12"}, {"d", "32"}, {"heads", "4"}, {"layers", "1"}};
  refused("seq 12 under cp 4", tiny, d, 4, 1, 4, false);
  const FeDefine f[] = {{"vocab", "128"}, {"seq", "16"}, {"d", "32"}, {"heads", "4"}, {"kv_heads", "2"}, {"layers", "1"},
                        {"ffn", "48"}};
  refused("all2all with 2 kv heads under cp 4", llama, f, 7, 1, 4, true);
  refused("all2all with 1 kv head per tp rank under cp 2 x tp 2", llama, f, 7, 2, 2, true);
  const FeDefine h[] = {{"seq", "16"}, {"d", "24"}, {"heads", "3"}, {"layers", "1"}};
  refused("all2all with 3 heads under cp 2", tiny, h, 4, 1, 2, true);
}

int main(void) {
  const CpPlan all[] = {{1, 1, 2, false, 0, 1, 1, NULL, false}, {1, 1, 4, false, 0, 1, 1, NULL, false}, {1, 2, 2, false, 0, 1, 1, NULL, false}, {2, 1, 2, false, 0, 1, 1, NULL, false},
                       {1, 1, 2, true, 0, 1, 1, NULL, false},  {1, 1, 4, true, 0, 1, 1, NULL, false},  {1, 2, 2, true, 0, 1, 1, NULL, false},  {2, 1, 2, true, 0, 1, 1, NULL, false}};
  const FeDefine tiny[] = {{"seq", "16"}, {"d", "32"}, {"heads", "4"}, {"layers", "2"}};
  const CpPlan a2a[] = {{1, 1, 2, true, 0, 1, 1, NULL, false}, {1, 1, 4, true, 0, 1, 1, NULL, false}, {1, 2, 2, true, 0, 1, 1, NULL, false}, {2, 1, 2, true, 0, 1, 1, NULL, false}};
  run_model("tiny GPT (causal, learned positions, fused QKV)", SHARDC_MODELS_DIR "/tiny.model", tiny, 4, 4, 16, 256,
            all, 8);
  const FeDefine llama[] = {{"vocab", "128"}, {"seq", "16"},     {"d", "32"},  {"heads", "4"},
                            {"kv_heads", "2"}, {"layers", "2"}, {"ffn", "48"}};
  run_model("Llama shaped (causal, RoPE, GQA)", SHARDC_MODELS_DIR "/llama3-8b.model", llama, 7, 4, 16, 128, all, 4);
  /* ZeRO 1, 2 and 3 under cp 2 x dp 2, over the dp x cp group: ring and all2all, without and with
   * accumulation (2 micro-steps), the twelve split between the two models */
  const CpPlan zero[] = {{2, 1, 2, false, 1, 1, 1, NULL, false}, {2, 1, 2, true, 2, 1, 1, NULL, false},
                         {2, 1, 2, false, 3, 1, 1, NULL, false}, {2, 1, 2, true, 1, 1, 2, NULL, false},
                         {2, 1, 2, false, 2, 1, 2, NULL, false}, {2, 1, 2, true, 3, 1, 2, NULL, false}};
  const CpPlan lzero[] = {{2, 1, 2, true, 1, 1, 1, NULL, false},  {2, 1, 2, false, 2, 1, 1, NULL, false},
                          {2, 1, 2, true, 3, 1, 1, NULL, false},  {2, 1, 2, false, 1, 1, 2, NULL, false},
                          {2, 1, 2, true, 2, 1, 2, NULL, false},  {2, 1, 2, false, 3, 1, 2, NULL, false}};
  run_model("tiny GPT, ZeRO", SHARDC_MODELS_DIR "/tiny.model", tiny, 4, 4, 16, 256, zero, 6);
  run_model("Llama shaped, ZeRO", SHARDC_MODELS_DIR "/llama3-8b.model", llama, 7, 4, 16, 128, lzero, 6);
  /* ZeRO at dp 1 over cp alone: 1, 2, 3, ring and all2all, one with accumulation */
  const CpPlan czero[] = {{1, 1, 2, false, 1, 1, 1, NULL, false}, {1, 1, 2, true, 2, 1, 1, NULL, false},
                          {1, 1, 2, false, 3, 1, 2, NULL, false}};
  run_model("Llama shaped, ZeRO over cp", SHARDC_MODELS_DIR "/llama3-8b.model", llama, 7, 4, 16, 128, czero, 3);
  /* pp x cp: each stage's layers run the ring (or the all-to-alls) among the stage's cp ranks */
  const CpPlan pipe[] = {{1, 1, 2, false, 0, 2, 2, "gpipe", false}, {1, 1, 2, false, 0, 2, 2, "1f1b", false},
                         {2, 1, 2, false, 2, 2, 2, "1f1b", false},  {1, 1, 2, true, 0, 2, 2, "zb", false},
                         {1, 1, 2, false, 0, 2, 2, "interleaved", false}, {2, 1, 2, false, 3, 2, 2, "gpipe", false},
                         {1, 1, 2, false, 0, 2, 2, "zb", false}}; /* ring x zb: fuzz_plans seeds 10, 21 */
  const FeDefine tiny4[] = {{"seq", "16"}, {"d", "32"}, {"heads", "4"}, {"layers", "4"}};
  run_model("tiny GPT, pp", SHARDC_MODELS_DIR "/tiny.model", tiny4, 4, 4, 16, 256, pipe, 7);
  const CpPlan lpipe[] = {{1, 2, 2, false, 0, 2, 4, "1f1b", false}, {1, 1, 2, true, 0, 2, 2, "interleaved", false}};
  const FeDefine llama4[] = {{"vocab", "128"}, {"seq", "16"},     {"d", "32"},  {"heads", "4"},
                             {"kv_heads", "2"}, {"layers", "4"}, {"ffn", "48"}};
  run_model("Llama shaped, pp", SHARDC_MODELS_DIR "/llama3-8b.model", llama4, 7, 4, 16, 128, lpipe, 2);
  /* uneven stages (`pp 2 layers(1, 3)`) x cp: each stage's own layers run the ring */
  static const int l13[] = {1, 3};
  const CpPlan upipe[] = {{1, 1, 2, false, 0, 2, 2, "1f1b", false}, {2, 1, 2, true, 2, 2, 2, "zb", false}};
  stage_layers = l13;
  run_model("tiny GPT, pp layers(1, 3)", SHARDC_MODELS_DIR "/tiny.model", tiny4, 4, 4, 16, 256, upipe, 2);
  stage_layers = NULL;
  const FeDefine llama8[] = {{"vocab", "128"}, {"seq", "16"},     {"d", "32"},  {"heads", "8"},
                             {"kv_heads", "4"}, {"layers", "2"}, {"ffn", "48"}};
  /* sp with cp: the activations between tp regions split over cp (zigzag) and then over tp */
  const CpPlan sp[] = {{1, 2, 2, false, 0, 1, 1, NULL, true}, {1, 2, 2, true, 0, 1, 1, NULL, true},
                       {2, 2, 2, false, 0, 1, 1, NULL, true}, {2, 2, 2, true, 2, 1, 1, NULL, true},
                       {1, 2, 2, false, 0, 2, 4, "1f1b", true}};
  run_model("tiny GPT, sp", SHARDC_MODELS_DIR "/tiny.model", tiny, 4, 4, 16, 256, sp, 2);
  run_model("Llama shaped, sp", SHARDC_MODELS_DIR "/llama3-8b.model", llama8, 7, 4, 16, 128, sp, 4);
  const FeDefine llama84[] = {{"vocab", "128"}, {"seq", "16"},     {"d", "32"},  {"heads", "8"},
                              {"kv_heads", "4"}, {"layers", "4"}, {"ffn", "48"}};
  run_model("Llama shaped, sp, pp", SHARDC_MODELS_DIR "/llama3-8b.model", llama84, 7, 4, 16, 128, sp + 4, 1);
  run_model("Llama shaped, all2all (causal, RoPE, GQA: cp 2 per tp rank)", SHARDC_MODELS_DIR "/llama3-8b.model", llama,
            7, 4, 16, 128, a2a, 1);
  run_model("Llama shaped, 8 heads / 4 kv heads, all2all", SHARDC_MODELS_DIR "/llama3-8b.model", llama8, 7, 4, 16, 128,
            a2a, 4);
  run_model("bidirectional (non-causal, GQA, RoPE + learned positions)", SHARDC_CP_MODEL, NULL, 0, 4, 16, 64, all, 2);
  const FeDefine bidir8[] = {{"heads", "8"}, {"kv_heads", "4"}};
  run_model("bidirectional, 8 heads / 4 kv heads, all2all", SHARDC_CP_MODEL, bidir8, 2, 4, 16, 64, a2a, 2);
  /* recompute under cp: full and selective re-run the forward's ring (its blocks, its hops again in the forward's
   * order) inside the backward loop. Ring cp 2 and 4, with dp x ZeRO-2, tp + sp, a zb pipeline (its W loop takes
   * what B's recompute made) and all2all; the Llama shape (GQA) at cp 2 and 4 */
  const FeDefine tiny_rc[] = {{"seq", "16"}, {"d", "32"}, {"heads", "4"}, {"layers", "4"}, {"recompute", "full"}};
  const CpPlan rc[] = {{1, 1, 2, false, 0, 1, 1, NULL, false}, {1, 1, 4, false, 0, 1, 1, NULL, false},
                       {2, 1, 2, false, 2, 1, 1, NULL, false}, {1, 2, 2, false, 0, 1, 1, NULL, true},
                       {1, 1, 2, false, 0, 2, 2, "zb", false}, {1, 1, 2, true, 0, 1, 1, NULL, false}};
  run_model("tiny GPT, recompute full", SHARDC_MODELS_DIR "/tiny.model", tiny_rc, 5, 4, 16, 256, rc, 6);
  const FeDefine tiny_sel[] = {{"seq", "16"}, {"d", "32"}, {"heads", "4"}, {"layers", "4"}, {"recompute", "selective"}};
  run_model("tiny GPT, recompute selective", SHARDC_MODELS_DIR "/tiny.model", tiny_sel, 5, 4, 16, 256, rc, 6);
  const FeDefine llama_rc[] = {{"vocab", "128"}, {"seq", "16"}, {"d", "32"}, {"heads", "4"}, {"kv_heads", "2"},
                               {"layers", "2"}, {"ffn", "48"}, {"recompute", "full"}};
  run_model("Llama shaped, recompute full", SHARDC_MODELS_DIR "/llama3-8b.model", llama_rc, 8, 4, 16, 128, rc, 2);
  check_refused();
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  fprintf(stderr, "every cp plan equals the single-rank program\n");
  return 0;
}
