/* codegen/target_cpu.c — the CPU target: each node a call of libshardrt's CPU kernels.
 *
 * A node becomes one runtime call (runtime/ops/ops.h, prims.h) on pointers into the rank's
 * allocation `M`: f32 math, BLAS GEMMs, the reference norms, attention and cross-entropy;
 * vocab-parallel embeddings and cross-entropy parts call the multi-rank ops (coll.h). Nodes
 * run one by one: this target ignores fusion groups.
 */
#include <inttypes.h>
#include <string.h>

#include "cg.h"
#include "passes.h" /* fuse_ce_partner */

static const char *fp(Cg *c, const Value *v) { return arena_printf(c->a, "(float *)%s", cg_ptr(c, v)); }
static const char *ip(Cg *c, const Value *v) { return arena_printf(c->a, "(int32_t *)%s", cg_ptr(c, v)); }

/* The ops that need the rank's coordinates or its groups (ctx): AXIS_INDEX, the vocab-parallel
 * embedding and cross-entropy parts. */
static void emit_multi_rank(Cg *c, Node *n) {
  Value *y = n->nout ? n->out[0] : NULL, *x = n->nin ? n->in[0] : NULL;
  const Attrs *a = &n->a;
  switch (n->op) {
  case OP_AXIS_INDEX: cg_line(c, "*%s = rt_ctx_coord(ctx, %s);", ip(c, y), cg_axis_lit(a->mesh_axis)); return;
  case OP_EMBED: {
    Value *t = n->in[0], *idx = n->in[1];
    int64_t cnt = ir_numel(&idx->shape);
    cg_line(c, "rt_embed_shard_f32(ctx, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", WS);", cg_axis_lit(a->mesh_axis),
         fp(c, y), fp(c, t), ip(c, idx), cnt, t->shape.dim[1], t->shape.dim[0]);
    cg_ws_need(c, arena_printf(c->a, "rt_embed_shard_ws_bytes(%" PRId64 ")", cnt));
    return;
  }
  case OP_EMBED_BWD: {
    Value *idx = n->in[0];
    int64_t cnt = ir_numel(&idx->shape);
    cg_line(c, "rt_embed_bwd_shard_f32(ctx, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", WS);",
         cg_axis_lit(a->mesh_axis), fp(c, y), ip(c, idx), fp(c, n->in[1]), cnt, y->shape.dim[1], y->shape.dim[0]);
    cg_ws_need(c, arena_printf(c->a, "rt_embed_shard_ws_bytes(%" PRId64 ")", cnt));
    return;
  }
  case OP_CE_MAX: case OP_CE_SUMS: case OP_CE_GRAD: {
    int64_t V = x->shape.dim[x->shape.rank - 1], rows = V ? ir_numel(&x->shape) / V : 0;
    const char *ax = a->sharded ? cg_axis_lit(a->mesh_axis) : "-1";
    if (x->dtype != DT_F32) return cg_unsupported(c, n, "only f32 logits on the CPU");
    if (n->op == OP_CE_MAX)
      cg_line(c, "rt_ce_max_f32(ctx, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ");", ax, fp(c, y), fp(c, x), rows, V,
           a->len);
    else if (n->op == OP_CE_SUMS)
      cg_line(c, "rt_ce_sums_f32(ctx, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ");", ax, fp(c, y), fp(c, x),
           ip(c, n->in[1]), fp(c, n->in[2]), rows, V, a->len);
    else
      cg_line(c, "rt_ce_grad_f32(ctx, %s, %s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ");", ax, fp(c, y),
           fp(c, x), ip(c, n->in[1]), fp(c, n->in[2]), fp(c, n->in[3]), fp(c, n->in[4]), rows, V, a->len);
    return;
  }
  case OP_CE_LOSS:
    cg_line(c, "rt_ce_loss_f32(%s, %s, %s, %s, %" PRId64 ", %" PRId64 ");", fp(c, y), fp(c, x), fp(c, n->in[1]),
         ip(c, n->in[2]), ir_numel(&n->in[2]->shape), a->len);
    return;
  default: return cg_unsupported(c, n, "no CPU code for this op");
  }
}

/* A compute node as one runtime call (emit.c emits REPEATs and collectives). */
static void emit_node(Cg *c, Node *n) {
  Value *y = n->nout ? n->out[0] : NULL;
  Value *x = n->nin ? n->in[0] : NULL;
  int64_t ny = y ? ir_numel(&y->shape) : 0;
  const Attrs *a = &n->a;
  unsigned fl = ir_ops[n->op].flags;
  if ((fl & F_EW) && n->op != OP_CAST && n->op != OP_GELU_BWD && n->op != OP_SILU_BWD) {
    for (int i = 0; i < n->nin; i++)
      if (n->in[i]->dtype != DT_F32) return cg_unsupported(c, n, "only f32 elementwise math on the CPU");
  }
  switch (n->op) {
  case OP_INPUT: case OP_PARAM: case OP_STATE: case OP_ARG: return;
  case OP_CONST:
    if (y->dtype != DT_F32) return cg_unsupported(c, n, "non-f32 constants");
    cg_line(c, "rt_fill_f32(%s, %" PRId64 ", (float)%.17g);", fp(c, y), ny, a->scalar);
    return;
  case OP_IOTA: cg_line(c, "rt_iota_i32(%s, %" PRId64 ", %" PRId64 ");", ip(c, y), ny, a->start); return;
  case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_MAXIMUM: case OP_MINIMUM: {
    static const char *ops[] = {[OP_ADD] = "RT_ADD", [OP_SUB] = "RT_SUB", [OP_MUL] = "RT_MUL",
                                [OP_DIV] = "RT_DIV", [OP_MAXIMUM] = "RT_MAXIMUM", [OP_MINIMUM] = "RT_MINIMUM"};
    cg_line(c, "rt_binary_f32(%s, %s, %s, %s, %s, %s, %s);", ops[n->op], fp(c, y), cg_shape_lit(c, &y->shape),
         fp(c, n->in[0]), cg_shape_lit(c, &n->in[0]->shape), fp(c, n->in[1]), cg_shape_lit(c, &n->in[1]->shape));
    return;
  }
  case OP_NEG: case OP_SCALE: case OP_ADD_SCALAR: case OP_EXP: case OP_LOG: case OP_SQRT: case OP_RSQRT:
  case OP_TANH: case OP_SIGMOID: case OP_RELU: case OP_GELU: case OP_SILU: {
    static const char *ops[] = {[OP_NEG] = "RT_NEG", [OP_SCALE] = "RT_SCALE", [OP_ADD_SCALAR] = "RT_ADD_SCALAR",
                                [OP_EXP] = "RT_EXP", [OP_LOG] = "RT_LOG", [OP_SQRT] = "RT_SQRT",
                                [OP_RSQRT] = "RT_RSQRT", [OP_TANH] = "RT_TANH", [OP_SIGMOID] = "RT_SIGMOID",
                                [OP_RELU] = "RT_RELU", [OP_GELU] = "RT_GELU", [OP_SILU] = "RT_SILU"};
    cg_line(c, "rt_unary_f32(%s, %s, %s, %" PRId64 ", (float)%.17g);", ops[n->op], fp(c, y), fp(c, x), ny, a->scalar);
    return;
  }
  case OP_GELU_BWD: cg_line(c, "rt_gelu_bwd_f32(%s, %s, %s, %" PRId64 ");", fp(c, y), fp(c, x), fp(c, n->in[1]), ny); return;
  case OP_SILU_BWD: cg_line(c, "rt_silu_bwd_f32(%s, %s, %s, %" PRId64 ");", fp(c, y), fp(c, x), fp(c, n->in[1]), ny); return;
  case OP_CAST:
    if (x->dtype == DT_F32 && y->dtype == DT_BF16) { /* a GEMM operand's bf16 copy (passes/gemm_cast.c) */
      cg_line(c, "rt_cvt_f32_bf16(%" PRId64 ", %s, (uint16_t *)%s);", ny, fp(c, x), cg_ptr(c, y));
      return;
    }
    if (x->dtype == DT_BF16 && y->dtype == DT_F32 && y->host) { /* plan offload: a bf16 gradient made f32 on the host */
      cg_line(c, "rt_cvt_bf16_f32(%" PRId64 ", (const uint16_t *)%s, %s);", ny, cg_ptr(c, x), fp(c, y));
      return;
    }
    if (x->dtype != y->dtype) return cg_unsupported(c, n, "dtype conversion (mixed precision is the CUDA target's)");
    cg_copy_if_moved(c, y, x);
    return;
  case OP_RESHAPE: cg_copy_if_moved(c, y, x); return;
  case OP_TRANSPOSE: {
    int r = x->shape.rank;
    cg_line(c, "rt_transpose_f32(%s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ");", fp(c, y), fp(c, x),
         cg_prod(&x->shape, 0, r - 2), x->shape.dim[r - 2], x->shape.dim[r - 1]);
    return;
  }
  case OP_SLICE: case OP_PAD: case OP_CONCAT: cg_block_copies(c, n, "rt_copy_block("); return;
  case OP_REDUCE_SUM:
    cg_line(c, "rt_reduce_to_f32(%s, %s, %s, %s);", fp(c, y), cg_shape_lit(c, &y->shape), fp(c, x), cg_shape_lit(c, &x->shape));
    return;
  case OP_BROADCAST_TO:
    cg_line(c, "rt_broadcast_to_f32(%s, %s, %s, %s);", fp(c, y), cg_shape_lit(c, &y->shape), fp(c, x), cg_shape_lit(c, &x->shape));
    return;
  case OP_MATMUL: {
    const Shape *as = &x->shape, *bs = &n->in[1]->shape;
    IrGemm gd = ir_gemm_dims(a, as, bs); /* (cb: the leading dims in k) */
    int64_t m = gd.m, k = gd.k, nn = gd.n, batch = gd.batch, bbatch = gd.b_batched ? cg_prod(bs, 0, bs->rank - 2) : 1;
    if (bbatch != 1 && bbatch != batch) return cg_unsupported(c, n, "matmul broadcasting B over part of A's batch dims");
    /* `precision bf16`: GEMMs on bf16-rounded inputs, f32 accumulation and activations (the CPU
     * target's mixed precision; runtime/ops/gemm_dnnl.c) */
    bool bf16 = c->m->has_recipe && c->m->recipe.precision == PREC_BF16;
    bool a16 = x->dtype == DT_BF16, b16 = n->in[1]->dtype == DT_BF16;
    if (y->dtype != DT_F32 || (!bf16 && (a16 || b16))) return cg_unsupported(c, n, "a matmul other than f32 = f32 @ f32, or a bf16 operand under precision bf16");
    if (n->nin == 3) { /* y = C + AB: the GEMM accumulates into the running sum (passes/gacc.c) */
      if (n->in[2]->dtype != DT_F32) return cg_unsupported(c, n, "an accumulator other than f32");
      if (bf16)
        cg_line(c, "rt_matmul_bf16_acc_in(%s, %s, %s, %d, %s, %d, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d, %d);",
             fp(c, y), fp(c, n->in[2]), cg_ptr(c, x), a16, cg_ptr(c, n->in[1]), b16, batch, m, nn, k, a->ta, a->tb, bbatch != 1);
      else
        cg_line(c, "rt_matmul_acc_f32(%s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d, %d);",
             fp(c, y), fp(c, n->in[2]), fp(c, x), fp(c, n->in[1]), batch, m, nn, k, a->ta, a->tb, bbatch != 1);
      return;
    }
    if (a16 || b16) /* an operand's bf16 copy made once per step (passes/gemm_cast.c): not rounded again */
      cg_line(c, "rt_matmul_bf16_in(%s, %s, %d, %s, %d, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d, %d);",
           fp(c, y), cg_ptr(c, x), a16, cg_ptr(c, n->in[1]), b16, batch, m, nn, k, a->ta, a->tb, bbatch != 1);
    else
      cg_line(c, "rt_matmul_%s(%s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d, %d);",
           bf16 ? "bf16" : "f32", fp(c, y), fp(c, x), fp(c, n->in[1]), batch, m, nn, k, a->ta, a->tb, bbatch != 1);
    return;
  }
  case OP_EMBED: {
    Value *t = n->in[0], *idx = n->in[1];
    if (a->sharded) return emit_multi_rank(c, n);
    cg_line(c, "rt_embed_f32(%s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ");", fp(c, y), fp(c, t), ip(c, idx),
         ir_numel(&idx->shape), t->shape.dim[1], t->shape.dim[0]);
    return;
  }
  case OP_EMBED_BWD: {
    Value *idx = n->in[0];
    if (a->sharded) return emit_multi_rank(c, n);
    cg_line(c, "rt_embed_bwd_f32(%s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ");", fp(c, y), ip(c, idx),
         fp(c, n->in[1]), ir_numel(&idx->shape), y->shape.dim[1], y->shape.dim[0]);
    return;
  }
  case OP_LAYERNORM: case OP_RMSNORM: {
    int64_t d = x->shape.dim[x->shape.rank - 1], rows = ir_numel(&x->shape) / (d ? d : 1);
    if (n->op == OP_LAYERNORM)
      cg_line(c, "rt_layernorm_f32(%s, %s, %s, %s, %" PRId64 ", %" PRId64 ", (float)%.17g);", fp(c, y), fp(c, x),
           fp(c, n->in[1]), fp(c, n->in[2]), rows, d, a->eps);
    else
      cg_line(c, "rt_rmsnorm_f32(%s, %s, %s, %" PRId64 ", %" PRId64 ", (float)%.17g);", fp(c, y), fp(c, x), fp(c, n->in[1]),
           rows, d, a->eps);
    return;
  }
  case OP_LAYERNORM_BWD: case OP_RMSNORM_BWD: {
    int64_t d = x->shape.dim[x->shape.rank - 1], rows = ir_numel(&x->shape) / (d ? d : 1);
    if (n->op == OP_LAYERNORM_BWD)
      cg_line(c, "rt_layernorm_bwd_f32(%s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", (float)%.17g, WS);", fp(c, n->out[0]),
           fp(c, n->out[1]), fp(c, n->out[2]), fp(c, x), fp(c, n->in[1]), fp(c, n->in[2]), rows, d, a->eps);
    else
      cg_line(c, "rt_rmsnorm_bwd_f32(%s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", (float)%.17g, WS);", fp(c, n->out[0]),
           fp(c, n->out[1]), fp(c, x), fp(c, n->in[1]), fp(c, n->in[2]), rows, d, a->eps);
    cg_ws_need(c, arena_printf(c->a, "rt_norm_ws_bytes(%" PRId64 ", %" PRId64 ")", rows, d));
    return;
  }
  case OP_ROPE: {
    const Shape *s = &x->shape;
    int64_t hd = s->dim[2] / a->heads;
    cg_line(c, "rt_rope_f32(%s, %s, %" PRId64 ", %" PRId64 ", %d, %" PRId64 ", %.17g, %" PRId64 ", %d, WS);", fp(c, y),
         fp(c, x), s->dim[0], s->dim[1], a->heads, hd, a->theta, a->start, a->inverse);
    cg_ws_need(c, arena_printf(c->a, "rt_rope_ws_bytes(%" PRId64 ", %" PRId64 ")", s->dim[1], hd));
    return;
  }
  case OP_SDPA: case OP_SDPA_BWD: {
    const Shape *s = &x->shape;
    int64_t hd = s->dim[2] / a->heads;
    /* the row strides of the operands memplan made column views (Value.ld; 0: contiguous) */
    if (n->op == OP_SDPA)
      cg_line(c, "rt_sdpa_f32(%s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %d, %d, %" PRId64 ", %d, %" PRId64 ", %" PRId64
           ", %" PRId64 ", %" PRId64 ");",
           fp(c, n->out[0]), fp(c, n->out[1]), fp(c, x), fp(c, n->in[1]), fp(c, n->in[2]), s->dim[0], s->dim[1],
           a->heads, a->kv_heads, hd, a->causal, x->ld, n->in[1]->ld, n->in[2]->ld, n->out[0]->ld);
    else
      cg_line(c, "rt_sdpa_bwd_f32(%s, %s, %s, %s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %d, %d, %" PRId64 ", %d, %" PRId64
           ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ");",
           fp(c, n->out[0]), fp(c, n->out[1]), fp(c, n->out[2]), fp(c, x), fp(c, n->in[1]), fp(c, n->in[2]),
           fp(c, n->in[3]), fp(c, n->in[4]), fp(c, n->in[5]), s->dim[0], s->dim[1], a->heads, a->kv_heads, hd,
           a->causal, x->ld, n->in[1]->ld, n->in[2]->ld, n->in[3]->ld, n->in[5]->ld, n->out[0]->ld, n->out[1]->ld,
           n->out[2]->ld);
    return;
  }
  case OP_ROPE_AT: {
    const Shape *s = &x->shape;
    int64_t hd = s->dim[2] / a->heads;
    cg_line(c, "rt_rope_at_f32(%s, %s, %s, %" PRId64 ", %" PRId64 ", %d, %" PRId64 ", %.17g, %" PRId64 ", %d, WS);",
         fp(c, y), fp(c, x), ip(c, n->in[1]), s->dim[0], s->dim[1], a->heads, hd, a->theta, a->start, a->inverse);
    cg_ws_need(c, arena_printf(c->a, "rt_rope_ws_bytes(%" PRId64 ", %" PRId64 ")", s->dim[1], hd));
    return;
  }
  case OP_ATTN_BLOCK: case OP_ATTN_BLOCK_BWD: {
    const Shape *s = &x->shape;
    int64_t hd = s->dim[2] / a->heads, T = n->in[1]->shape.dim[1];
    if (n->op == OP_ATTN_BLOCK)
      cg_line(c, "rt_attn_block_f32(%s, %s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d, %" PRId64 ", %d);",
           fp(c, n->out[0]), fp(c, n->out[1]), fp(c, x), fp(c, n->in[1]), fp(c, n->in[2]), ip(c, n->in[3]),
           ip(c, n->in[4]), s->dim[0], s->dim[1], T, a->heads, a->kv_heads, hd, a->causal);
    else
      cg_line(c, "rt_attn_block_bwd_f32(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64
           ", %d, %d, %" PRId64 ", %d);",
           fp(c, n->out[0]), fp(c, n->out[1]), fp(c, n->out[2]), fp(c, x), fp(c, n->in[1]), fp(c, n->in[2]),
           fp(c, n->in[3]), fp(c, n->in[4]), fp(c, n->in[5]), ip(c, n->in[6]), ip(c, n->in[7]), s->dim[0], s->dim[1], T,
           a->heads, a->kv_heads, hd, a->causal);
    return;
  }
  case OP_ATTN_COMBINE: {
    const Shape *s = &x->shape;
    cg_line(c, "rt_attn_combine_f32(%s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %d, %" PRId64 ");", fp(c, n->out[0]),
         fp(c, n->out[1]), fp(c, x), fp(c, n->in[1]), fp(c, n->in[2]), fp(c, n->in[3]), s->dim[0], s->dim[1], a->heads,
         s->dim[2] / a->heads);
    return;
  }
  case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_BWD: {
    int64_t V = x->shape.dim[x->shape.rank - 1], rows = ir_numel(&x->shape) / (V ? V : 1);
    int64_t len = a->len > 0 ? a->len : V;
    int partner = fuse_ce_partner(n->graph, c->pos); /* passes/fuse_ce.c: both in the forward, where it runs both */
    if (partner >= 0 && cg_runs(c, n->graph, partner)) {
      if (n->op == OP_CROSS_ENTROPY_BWD) return cg_line(c, "/* computed with the loss (fused cross-entropy) */");
      const Node *bw = n->graph->nodes[partner];
      cg_line(c, "/* the cross-entropy's forward and backward in one pass over the logits */");
      cg_line(c, "rt_cross_entropy_fused_f32(%s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", WS);", fp(c, y),
              fp(c, bw->out[0]), fp(c, x), ip(c, n->in[1]), fp(c, bw->in[2]), rows, V, len);
    } else if (n->op == OP_CROSS_ENTROPY)
      cg_line(c, "rt_cross_entropy_f32(%s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", WS);", fp(c, y), fp(c, x),
           ip(c, n->in[1]), rows, V, len);
    else
      cg_line(c, "rt_cross_entropy_bwd_f32(%s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", WS);", fp(c, y), fp(c, x),
           ip(c, n->in[1]), fp(c, n->in[2]), rows, V, len);
    cg_ws_need(c, arena_printf(c->a, "rt_cross_entropy_ws_bytes(%" PRId64 ")", rows));
    return;
  }
  case OP_SUM: cg_line(c, "rt_sum_f32(%s, %s, %" PRId64 ");", fp(c, y), fp(c, x), ir_numel(&x->shape)); return;
  case OP_MEAN: cg_line(c, "rt_mean_f32(%s, %s, %" PRId64 ");", fp(c, y), fp(c, x), ir_numel(&x->shape)); return;
  case OP_SUMSQ: cg_line(c, "rt_sumsq_f32(%s, %s, %" PRId64 ");", fp(c, y), fp(c, x), ir_numel(&x->shape)); return;
  case OP_ADAMW_UPDATE:
    for (int k = 0; k < 3; k++) cg_copy_if_moved(c, n->out[k], n->in[k == 0 ? 0 : k + 1]);
    cg_line(c, "rt_adamw_f32(%s, %s, %s, %s, %s, %" PRId64 ", (float)%.17g, (float)%.17g, (float)%.17g, (float)%.17g);", fp(c, n->out[0]),
         fp(c, n->in[1]), fp(c, n->out[1]), fp(c, n->out[2]), fp(c, n->in[4]), ir_numel(&x->shape), a->beta1,
         a->beta2, a->eps, a->weight_decay);
    return;
  case OP_SGD_UPDATE:
    for (int k = 0; k < 2; k++) cg_copy_if_moved(c, n->out[k], n->in[k == 0 ? 0 : 2]);
    cg_line(c, "rt_sgd_f32(%s, %s, %s, %s, %" PRId64 ", (float)%.17g, (float)%.17g);", fp(c, n->out[0]), fp(c, n->in[1]),
         fp(c, n->out[1]), fp(c, n->in[3]), ir_numel(&x->shape), a->momentum, a->weight_decay);
    return;
  default: return emit_multi_rank(c, n);
  }
}

static int cpu_node(Cg *c, Node *n) {
  emit_node(c, n);
  return 1;
}

static void cpu_prologue(Cg *c) {
  fprintf(c->f, "#include \"kernels/kernels.h\" /* rt_cvt_f32_bf16: a weight's bf16 copy */\n#include \"ops.h\"\n#include \"prims.h\"\n#include \"program.h\"\n\n");
}

static void cpu_copy(Cg *c, const char *dst, const char *src, int64_t bytes, bool overlap) {
  cg_line(c, "%s(%s, %s, %" PRId64 ");", overlap ? "memmove" : "memcpy", dst, src, bytes);
}

static void cpu_zero(Cg *c, const char *dst, int64_t bytes) { cg_line(c, "memset(%s, 0, %" PRId64 ");", dst, bytes); }

static void nothing(Cg *c) { (void)c; }

/* (cg.h) every runtime call a node makes is a kernel (runtime/ops/ops.h, prims.h; the vocab-parallel parts'
 * collectives inside them are theirs; a shard slice's copy, rt_coll_shard_slice) but its coordinates; a block
 * copy's pieces are the node's one */
int cg_cpu_kernel_call(const char *name) {
  if (strncmp(name, "rt_ctx_", 7) == 0) return CG_CALL_NONE;
  return strcmp(name, "rt_copy_block") == 0 ? CG_CALL_NODE : CG_CALL_KERNEL;
}

const CgTarget cg_target_cpu = {
    .name = "CPU",
    .logits_tensor = false,
    .begin = nothing,
    .prologue = cpu_prologue,
    .node = cpu_node,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .finish = nothing,
    .program = nothing,
    .kernel_call = cg_cpu_kernel_call,
};
