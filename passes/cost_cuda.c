/* passes/cost_cuda.c — the cost model's kernels of the CUDA target (see cost.h, cost_cuda_kernels): what
 * codegen/target_cuda.c launches for a node once the passes that fuse have run, asked of those passes
 * (passes/epilogue.c's epilogue_owner and epilogue_nodes, passes/fuse_ce.c's fuse_ce_partner, passes/fuse_normres.c's
 * fuse_normres_partner) and of
 * ir_attn_flash, not decided again here. */
#include "cost.h"

#include "passes.h" /* epilogue_owner, epilogue_nodes, fuse_ce_partner, fuse_normres_partner, hfuse_leader */

static double value_bytes(const Value *v) { return (double)ir_numel(&v->shape) * ir_dtype_size(v->dtype); }

/* 0 for a node a GEMM's epilogue computes (epilogue_owner) and for the fused cross-entropy's backward;
 * the attention backward's two kernels on the flash path (dQ, then dK/dV: codegen/cuda_kernels_attn.c
 * attn_bwd; sdpa's and ring attention's blocks alike), three off it; the fused cross-entropy's three (the gradient's scale, the rows, the mean:
 * cuda_kernels_ce.c), the unfused one's two each way, a reduction to one number's two; the embedding gradient's two (the buckets, the rows: cuda_kernels.c
 * cuk_embed_bwd); the norms' backward two (the rows with the blocks' dw / db partials, their column sums:
 * cuda_kernels_norm.c), its *extra the residual gradient's carry where it computes the add after it
 * (passes/fuse_normres.c fuse_normres_partner; that add then 0). A GEMM's *extra: what its epilogue reads besides the product (the bias, the
 * residual, GELU's pre-activation) and stores instead of it (the last absorbed node's value, and a
 * GELU's pre-activation: GELU_AUX_BIAS); the fused cross-entropy's: its gradient. */
int cost_cuda_kernels(const Node *n, int pos, double *extra) {
  *extra = 0;
  if (pos < 0) return 1;
  const Graph *g = n->graph;
  int o = epilogue_owner(g, pos);
  if (o >= 0 && o != pos) /* the bias gradient after GELU's backward: by the program's column sums, the runtime's
                           * default (runtime/cuda/ops.c, SHARDRT_GEMM_BGRAD=split: measured faster on the H100) */
    return n->op == OP_REDUCE_SUM ? 1 : 0;
  if (n->op == OP_MATMUL && n->a.epilogue) {
    int at[2], e = epilogue_nodes(g, pos, at);
    const Node *last = NULL;
    for (int k = 0; k < e; k++) {
      const Node *x = g->nodes[at[k]];
      if (x->op == OP_REDUCE_SUM) continue;
      for (int j = 0; j < x->nin; j++)
        if (x->in[j]->def != n && (!last || x->in[j]->def != last)) *extra += value_bytes(x->in[j]);
      last = x;
    }
    if (last) {
      *extra += value_bytes(last->out[0]) - value_bytes(n->out[0]);
      if (last->op == OP_GELU) *extra += value_bytes(last->in[0]);
    }
    return 1;
  }
  if (n->op == OP_MATMUL && hfuse_leader(g, pos) >= 0) /* in its sibling's batched launch: its FLOPs, no launch */
    return -1;
  if (n->op == OP_CROSS_ENTROPY || n->op == OP_CROSS_ENTROPY_BWD) {
    int b = fuse_ce_partner(g, pos);
    if (b >= 0 && n->op == OP_CROSS_ENTROPY_BWD) return 0;
    if (b >= 0) {
      *extra = value_bytes(g->nodes[b]->out[0]);
      return 3;
    }
  }
  /* unfused (shardc --no-fuse ce): each two (the rows, then the mean / the gradient's scale, then the rows) */
  if (n->op == OP_CROSS_ENTROPY || n->op == OP_CROSS_ENTROPY_BWD) return 2;
  /* a reduction to one number: the blocks' parts, then their sum (cuda_kernels.c reduce; a clip's sum of squares
   * outside passes/fuse_sumsq.c's kernel: shardc --no-fuse sumsq) */
  if (n->op == OP_SUM || n->op == OP_MEAN || n->op == OP_SUMSQ) return 2;
  if (n->op == OP_CONCAT) /* the pieces' copies (no kernel), passes/fuse_sumsq.c's pieces in one kernel */
    return n->a.sumsq_fused ? 1 : -1;
  /* copies too (cg_block_copies: rt_cu_copy_block; a shard slice the device's copies, runtime/ops/coll_pack.c): were
   * one kernel each, which the trainer's count found (tiny dp 2 ZeRO-3: 150 planned for the 124 it launches) */
  if (n->op == OP_SLICE || n->op == OP_PAD || n->op == OP_SHARD_SLICE) return -1;
  if (n->op == OP_SDPA_BWD || n->op == OP_ATTN_BLOCK_BWD) /* a ring block's on the same kernels as sdpa's */
    return ir_attn_flash(n->in[0]->dtype, n->in[0]->shape.dim[2] / (n->a.heads > 0 ? n->a.heads : 1)) ? 2 : 3;
  if (n->op == OP_EMBED_BWD) return 2;
  if (n->op == OP_LAYERNORM_BWD || n->op == OP_RMSNORM_BWD) { /* the rows, then dw / db's column sums */
    int p = fuse_normres_partner(g, pos); /* with the add after it: its carry read too (passes/fuse_normres.c) */
    if (p >= 0) *extra = value_bytes(g->nodes[p]->in[g->nodes[p]->in[0] == n->out[0] ? 1 : 0]);
    return 2;
  }
  if (n->op == OP_ADD && fuse_normres_partner(g, pos) >= 0) return 0; /* computed by the norm's backward */
  return 1;
}

static int reads(const Node *n, const Value *v) {
  int k = 0;
  for (int j = 0; j < n->nin; j++) k += n->in[j] == v;
  return k;
}

static void count_results(const Graph *g, PtrMap *uses) {
  for (int i = 0; i < g->nresults; i++) ptrmap_add(uses, g->results[i], 1);
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) count_results(g->nodes[i]->body, uses);
}

void cost_cuda_group_uses(const Module *m, PtrMap *uses) {
  ir_use_counts(m->graph, uses);
  count_results(m->graph, uses);
}

double cost_cuda_group_unmoved(const Node *n, int pos, const PtrMap *uses) {
  const Graph *g = n->graph;
  if (!n->group || pos < 0) return 0;
  int first = pos, end = pos + 1;
  while (first > 0 && g->nodes[first - 1]->group == n->group) first--;
  while (end < g->nnodes && g->nodes[end]->group == n->group) end++;
  double b = 0;
  for (int j = 0; j < n->nin; j++) { /* an input from outside an earlier member read: loaded once */
    const Value *v = n->in[j];
    bool again = false;
    for (int q = first; q < pos && !again; q++) again = reads(g->nodes[q], v) > 0;
    if (again && v->def->group != n->group) b += value_bytes(ir_unfold_cast(v));
  }
  const Value *y = n->out[0];
  intptr_t all = 0, inside = 0;
  ptrmap_get(uses, y, &all);
  for (int q = pos + 1; q < end; q++) inside += reads(g->nodes[q], y);
  return all > inside ? b : b + value_bytes(y); /* read inside the group only: kept in registers, never stored */
}
