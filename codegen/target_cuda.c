/* codegen/target_cuda.c — the CUDA target: each node a kernel launch, a GEMM or a device copy.
 *
 * The host program is emit.c's (entry points, REPEAT loops, collectives, the tensor table),
 * with `M` in GPU memory; each node becomes a launch of a kernel emitted for it by
 * codegen/cuda_kernels.c (shapes baked in), a cuBLASLt GEMM (rt_cu_matmul) or a device copy
 * (runtime/cuda/cuda_ops.h). Everything runs in program order on the rank's compute stream.
 * Collectives are emit.c's runtime/ops/coll.h calls, which the device's runtime makes work on
 * device memory (runtime/cuda/coll_dev.c: NCCL on GPUs); their packing scratch is a buffer of
 * the memory plan (Node.scratch_at), in device memory like every value.
 *
 * Fusion: the members of a fusion group (passes/fuse.c, cut by passes/memplan.c where the
 * placement needs) become one elementwise kernel that keeps the intermediates in registers and
 * stores only the values something outside the run reads (cg_group_run: which members).
 */
#include <inttypes.h>
#include <string.h>

#include "cg.h"
#include "cuda_kernels.h"
#include "diag.h"
#include "memplan.h"
#include "passes.h" /* FUSE_MAX_* */

static void stmt(Cg *c, const char *s) { cg_line(c, "%s", s); }

/* ---- elementwise runs: a fusion group's members, or one elementwise node ---- */


_Static_assert((int)CUK_MAX_EW >= (int)CG_EW_MAX, "an elementwise run fits one kernel");

/* The run of cg_group_run(c, first) nodes from first as one kernel; returns its length. */
static int emit_run(Cg *c, Node *first) {
  CgEwRun r;
  cg_ew_run(c, first, &r);
  CuEwChain ch = {.shape = first->out[0]->shape, .nin = r.next, .nops = r.n};
  for (int i = 0; i < r.next; i++) ch.in[i] = (CuEwIn){cg_ptr(c, r.ext[i]), r.ext[i]->dtype, r.ext[i]->shape};
  for (int i = 0; i < r.n; i++) {
    const Node *n = r.mem[i];
    CuEwOp *op = &ch.ops[i];
    *op = (CuEwOp){.op = n->op, .in = {0, 0}, .scalar = n->a.scalar, .dt = n->out[0]->dtype};
    if (n->op == OP_BROADCAST_TO) op->op = OP_CAST; /* the broadcast is the indexing */
    for (int k = 0; k < n->nin && k < 2; k++) op->in[k] = r.in[i][k];
    if (r.stored[i]) {
      ch.out_op[ch.nout] = i;
      ch.out_ptr[ch.nout++] = cg_ptr(c, n->out[0]);
    }
  }
  if (r.n > 1) cg_line(c, "/* %d elementwise ops in one kernel */", r.n);
  stmt(c, cuk_elementwise(c->ts, &ch));
  return r.n;
}

/* ---- everything else ---- */

static int64_t last_dim(const Value *v) { return v->shape.rank ? v->shape.dim[v->shape.rank - 1] : 1; }
static int64_t rows_of(const Value *v) {
  int64_t d = last_dim(v);
  return d ? ir_numel(&v->shape) / d : 0;
}

/* Host C expression for the first logical row/column this rank holds of a vocab-split dim. */
static const char *first_index(Cg *c, const Node *n, int64_t local) {
  if (!n->a.sharded) return "0";
  return arena_printf(c->a, "(int64_t)rt_ctx_coord(ctx, %s) * %" PRId64, cg_axis_lit(n->a.mesh_axis), local);
}

static bool float_ok(Cg *c, const Node *n, const Value *v) {
  if (v->dtype == DT_F32 || v->dtype == DT_BF16) return true;
  cg_unsupported(c, n, arena_printf(c->a, "%s tensors (the CUDA kernels take f32 and bf16)", ir_dtype_name(v->dtype)));
  return false;
}

/* The one GEMM (or strided batch) of a MATMUL: rt_cu_matmul's batch, m, n, k and b_batched. A [batch, m, k]
 * times a shared B folds the batch into the rows: one GEMM, not a batched one (and cb's leading dims are in k). */
static IrGemm gemm_dims(const Node *mm) {
  IrGemm d = ir_gemm_dims(&mm->a, &mm->in[0]->shape, &mm->in[1]->shape);
  if (!d.b_batched && d.batch > 1 && !mm->a.ta) d.m *= d.batch, d.batch = 1;
  return d;
}

static int emit_run(Cg *c, Node *first);
static void emit_node(Cg *c, Node *n);

/* The GEMM's name in the runtime's note when it has no algorithm for the epilogue: its source line. */
static const char *gemm_where(Cg *c, const Node *mm) {
  return cg_cstr(c, mm->loc.file ? arena_printf(c->a, "%s:%d", mm->loc.file, mm->loc.line) : "a matmul");
}

/* The body of `if (!rt_cu_matmul_*(...)) { ... }`: where the device has no algorithm for the
 * epilogue (cuBLASLt's heuristic found none), the plain GEMM into the matmul's own output and then
 * the e absorbed nodes at `at`, one kernel each, as if they had not been absorbed. They run at the
 * GEMM's place: the same bytes the epilogue would write there (passes/epilogue.c checked them), and
 * the matmul's output is read right away, by them only. Without `gemm`, the nodes only (the bias
 * gradient the device left to the program: RT_CU_EP_NO_BGRAD). */
static void emit_unfused(Cg *c, Node *mm, bool gemm, const int *at, int e) {
  int pos = c->pos;
  c->indent++;
  if (gemm) emit_node(c, mm);
  for (int k = 0; k < e; k++) {
    Node *n = mm->graph->nodes[at[k]];
    c->pos = at[k];
    if (cg_elementwise(n))
      emit_run(c, n);
    else
      emit_node(c, n);
  }
  c->pos = pos;
  c->indent--;
  cg_line(c, "}");
}

/* A matmul with its epilogue (passes/epilogue.c): one rt_cu_matmul_ep storing the last absorbed
 * node's value (a GELU's pre-activation too), or where the device has no algorithm for that
 * epilogue the plain GEMM and the nodes (emit_unfused). Returns the nodes it covers; 0 when the
 * entry point runs none of the absorbed nodes (the matmul then runs plainly). */
static int emit_matmul_ep(Cg *c, Node *mm) {
  const Graph *g = mm->graph;
  int at[2], ne = epilogue_nodes(g, c->pos, at), e = 0;
  if (epi_dgelu(mm->a.epilogue)) { /* GELU's backward (and the bias gradient), later nodes that then emit nothing */
    if (!cg_runs(c, g, at[0])) return 0;
    const Node *gb = g->nodes[at[0]];
    bool bgrad = ne == 2 && cg_runs(c, g, at[1]);
    IrGemm d = gemm_dims(mm);
    const char *call = arena_printf(
        c->a, "rt_cu_matmul_dgelu(ctx, %s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d, %s, %s)",
        gemm_where(c, mm), cg_ptr(c, gb->out[0]), cg_dtype_lit(gb->out[0]->dtype), cg_ptr(c, mm->in[0]), cg_ptr(c, mm->in[1]),
        cg_dtype_lit(mm->in[0]->dtype), d.m, d.n, d.k, mm->a.ta, mm->a.tb, cg_ptr(c, gb->in[0]),
        bgrad ? cg_ptr(c, g->nodes[at[1]]->out[0]) : "NULL");
    if (!bgrad) {
      cg_line(c, "/* matmul + GELU's backward in one GEMM (epilogue) */");
      cg_line(c, "if (!%s) {", call);
      emit_unfused(c, mm, true, at, 1);
      return 1;
    }
    /* the runtime decides (runtime/cuda/ops.c): the bias gradient in the GEMM too, or by its own kernels */
    cg_line(c, "/* matmul + GELU's backward in one GEMM (epilogue), its bias gradient there too or after it */");
    cg_line(c, "{");
    c->indent++;
    cg_line(c, "const int ep = %s;", call);
    cg_line(c, "if (ep == RT_CU_EP_NONE) {");
    emit_unfused(c, mm, true, at, 1);
    cg_line(c, "if (ep != RT_CU_EP_ALL) {");
    emit_unfused(c, mm, false, at + 1, 1);
    c->indent--;
    cg_line(c, "}");
    return 1;
  }
  while (e < ne && cg_runs(c, g, at[e])) e++;
  if (!e) return 0;
  const Node *add = g->nodes[at[0]];
  const Value *y = mm->out[0], *h = add->out[0], *stored = h;
  const char *res = "NULL", *aux = "NULL", *bias = cg_ptr(c, add->in[0] == y ? add->in[1] : add->in[0]);
  if (mm->a.epilogue == EPI_RESIDUAL) /* no bias: the add's other operand is the GEMM's C */
    res = bias, bias = "NULL";
  if (e == 2) {
    const Node *f = g->nodes[at[1]];
    stored = f->out[0];
    if (f->op == OP_GELU)
      aux = cg_ptr(c, h);
    else
      res = cg_ptr(c, f->in[0] == h ? f->in[1] : f->in[0]);
  }
  IrGemm d = gemm_dims(mm);
  cg_line(c, "/* matmul + %s in one GEMM (epilogue) */",
          mm->a.epilogue == EPI_RESIDUAL ? "residual" : e == 1 ? "bias" : strcmp(aux, "NULL") ? "bias + GELU" : "bias + residual");
  cg_line(c, "if (!rt_cu_matmul_ep(ctx, %s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d, %s, %s, %s)) {",
          gemm_where(c, mm), cg_ptr(c, stored), cg_dtype_lit(stored->dtype), cg_ptr(c, mm->in[0]), cg_ptr(c, mm->in[1]),
          cg_dtype_lit(mm->in[0]->dtype), d.m, d.n, d.k, mm->a.ta, mm->a.tb, bias, res, aux);
  emit_unfused(c, mm, true, at, e);
  return at[e - 1] - c->pos + 1;
}

/* The add of the residual gradient's carry that the norm's backward n (at c->pos) computes (passes/fuse_normres.c:
 * its kernel stores dx + carry in the add's output), or NULL. */
static const Node *normres_add(const Cg *c, const Node *n) {
  int p = fuse_normres_partner(n->graph, c->pos);
  return p >= 0 && cg_runs(c, n->graph, p) ? n->graph->nodes[p] : NULL;
}

/* A node that is not elementwise. */
/* AdamW or SGD update n in place; copy: where the same kernel also stores the updated parameter's bf16
 * copy (its persistent copy, passes/wshadow.c), NULL: nowhere. */
static void emit_update(Cg *c, const Node *n, const char *copy) {
  const Attrs *a = &n->a;
  int nst = n->op == OP_ADAMW_UPDATE ? 2 : 1;
  for (int i = 0; i <= nst; i++) cg_copy_if_moved(c, n->out[i], n->in[i == 0 ? 0 : i + 1]);
  int64_t numel = ir_numel(&n->in[0]->shape);
  const Value *g = ir_unfold_cast(n->in[1]); /* a folded cast's bf16 source, widened in the kernel */
  if (n->op == OP_ADAMW_UPDATE)
    stmt(c, cuk_adamw(c->ts, cg_ptr(c, n->out[0]), cg_ptr(c, g), g->dtype, cg_ptr(c, n->out[1]),
                      cg_ptr(c, n->out[2]), cg_ptr(c, n->in[4]), numel, a->beta1, a->beta2, a->eps, a->weight_decay,
                      copy));
  else
    stmt(c, cuk_sgd(c->ts, cg_ptr(c, n->out[0]), cg_ptr(c, g), g->dtype, cg_ptr(c, n->out[1]),
                    cg_ptr(c, n->in[3]), numel, a->momentum, a->weight_decay, copy));
}

/* The cast right after update u (at c->pos) that makes its parameter's persistent bf16 copy
 * (passes/wshadow.c: result "next:bf16:<param>"), when the update's kernel can store it: the entry
 * point runs it, it reads the updated parameter itself (not a ZeRO all-gather of it), and the memory
 * plan put it in the copy's own bytes (nothing else lives there while the update runs), or in bytes of
 * its own that an all-gather then writes into the copy. NULL otherwise. */
static const Node *copy_cast(Cg *c, const Node *u) {
  const Graph *g = u->graph;
  int at = c->pos + 1;
  if (at >= g->nnodes || g->nodes[at - 1] != u || !cg_runs(c, g, at) || !ir_update_casts_copy(g, at)) return NULL;
  const Node *x = g->nodes[at];
  const Value *st = ir_copy_written(g, x->out[0]), *y = x->out[0];
  if (st) return strcmp(cg_ptr(c, st), cg_ptr(c, y)) == 0 ? x : NULL;
  /* ZeRO 1 / 2 with the f32 masters split (passes/zero_master.c): the cast of the updated shard, which an
   * all-gather writes into the copy, when its bytes are none of the update's (memplan.c keeps them apart) */
  if (y->offset < 0) return NULL;
  for (int k = 0; k < u->nin + u->nout; k++) {
    const Value *v = k < u->nin ? u->in[k] : u->out[k - u->nin];
    if (v->offset < 0 || v->host || v->offset >= y->offset + cg_bytes(y) || y->offset >= v->offset + cg_bytes(v)) continue;
    return NULL;
  }
  return x;
}

/* passes/fuse_sumsq.c: the concat's pieces that are sums of squares, in one kernel writing each into its element */
static void emit_sumsq_concat(Cg *c, const Node *cat) {
  CuSumsqIn *in = ARENA_ARRAY(c->a, CuSumsqIn, cat->nin);
  int n = 0;
  int64_t at = 0; /* piece i's first element */
  for (int i = 0; i < cat->nin; at += ir_numel(&cat->in[i]->shape), i++) {
    const Node *s = fuse_sumsq_piece(cat, i);
    if (!s) continue;
    const Value *src = ir_unfold_cast(s->in[0]); /* a folded cast's bf16 source, widened in the kernel */
    in[n++] = (CuSumsqIn){cg_ptr(c, src), src->dtype, ir_numel(&src->shape), at};
  }
  cg_line(c, "/* %d sums of squares in one kernel, into the concat's elements */", n);
  stmt(c, cuk_sumsq_multi(c->ts, cg_ptr(c, cat->out[0]), n, in));
}

static void emit_node(Cg *c, Node *n) {
  CuK *k = c->ts;
  Value *y = n->nout ? n->out[0] : NULL, *x = n->nin ? n->in[0] : NULL;
  const Attrs *a = &n->a;
  switch (n->op) {
  case OP_INPUT: case OP_PARAM: case OP_STATE: case OP_ARG: return;
  case OP_IOTA: return stmt(c, cuk_iota(k, cg_ptr(c, y), ir_numel(&y->shape), a->start));
  case OP_RESHAPE: return cg_copy_if_moved(c, y, x);
  case OP_TRANSPOSE: {
    int r = x->shape.rank;
    return stmt(c, cuk_transpose(k, cg_ptr(c, y), cg_ptr(c, x), x->dtype, cg_prod(&x->shape, 0, r - 2),
                                 x->shape.dim[r - 2], x->shape.dim[r - 1]));
  }
  case OP_CONCAT:
    if (a->sumsq_fused) emit_sumsq_concat(c, n);
    return cg_block_copies(c, n, "rt_cu_copy_block(ctx, "); /* the other pieces */
  case OP_SLICE: case OP_PAD: return cg_block_copies(c, n, "rt_cu_copy_block(ctx, ");
  case OP_REDUCE_SUM:
    return stmt(c, cuk_reduce_to(k, cg_ptr(c, y), y->dtype, &y->shape, cg_ptr(c, x), x->dtype, &x->shape));
  case OP_MATMUL: {
    Value *b = n->in[1];
    const Shape *as = &x->shape, *bs = &b->shape;
    int64_t bbatch = cg_prod(bs, 0, bs->rank - 2);
    if (bbatch != 1 && bbatch != cg_prod(as, 0, as->rank - 2))
      return cg_unsupported(c, n, "matmul broadcasting B over part of A's batch dims");
    if (x->dtype != b->dtype) return cg_unsupported(c, n, "matmul of two dtypes (cast one first)");
    IrGemm d = gemm_dims(n);
    if (n->nin == 3) { /* y = C + AB, C = D and beta 1 (passes/gacc.c); C copied into y where it lives elsewhere */
      const char *yp = cg_ptr(c, y), *cp = cg_ptr(c, n->in[2]);
      if (strcmp(yp, cp) != 0) {
        cg_line(c, "if ((const void *)(%s) != (const void *)(%s))", yp, cp);
        c->indent++;
        c->t->copy(c, yp, cp, cg_bytes(y), false);
        c->indent--;
      }
    }
    cg_line(c, "rt_cu_matmul(ctx, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d, %d, 1.0f, %s);",
            cg_ptr(c, y), cg_dtype_lit(y->dtype), cg_ptr(c, x), cg_ptr(c, b), cg_dtype_lit(x->dtype), d.batch, d.m, d.n,
            d.k, a->ta, a->tb, d.b_batched, n->nin == 3 ? "1.0f" : "0.0f");
    return;
  }
  case OP_EMBED: {
    Value *t = n->in[0], *idx = n->in[1];
    return stmt(c, cuk_embed(k, cg_ptr(c, y), y->dtype, cg_ptr(c, t), t->dtype, cg_ptr(c, idx), ir_numel(&idx->shape),
                             t->shape.dim[1], t->shape.dim[0], first_index(c, n, t->shape.dim[0])));
  }
  case OP_EMBED_BWD: {
    Value *idx = n->in[0], *dy = n->in[1];
    return stmt(c, cuk_embed_bwd(k, cg_ptr(c, y), y->dtype, cg_ptr(c, idx), cg_ptr(c, dy), dy->dtype,
                                 ir_numel(&idx->shape), y->shape.dim[1], y->shape.dim[0], first_index(c, n, y->shape.dim[0])));
  }
  case OP_LAYERNORM:
    return stmt(c, cuk_layernorm(k, cg_ptr(c, y), cg_ptr(c, x), x->dtype, cg_ptr(c, n->in[1]), cg_ptr(c, n->in[2]),
                                 n->in[1]->dtype, rows_of(x), last_dim(x), a->eps));
  case OP_RMSNORM:
    return stmt(c, cuk_rmsnorm(k, cg_ptr(c, y), cg_ptr(c, x), x->dtype, cg_ptr(c, n->in[1]), n->in[1]->dtype, rows_of(x),
                               last_dim(x), a->eps));
  case OP_LAYERNORM_BWD: case OP_RMSNORM_BWD: { /* dx, or the sum of dx and the carry into the add's output */
    const Node *ra = normres_add(c, n);
    const char *dx = cg_ptr(c, ra ? ra->out[0] : n->out[0]), *res = NULL;
    if (ra) {
      res = cg_ptr(c, ra->in[ra->in[0] == n->out[0] ? 1 : 0]);
      cg_line(c, "/* the norm's backward + the residual gradient's add below, in one kernel (fuse_normres) */");
    }
    if (n->op == OP_RMSNORM_BWD)
      return stmt(c, cuk_rmsnorm_bwd(k, dx, res, cg_ptr(c, n->out[1]), cg_ptr(c, x), x->dtype, cg_ptr(c, n->in[1]),
                                     n->in[1]->dtype, cg_ptr(c, n->in[2]), rows_of(x), last_dim(x), a->eps));
    return stmt(c, cuk_layernorm_bwd(k, dx, res, cg_ptr(c, n->out[1]), cg_ptr(c, n->out[2]), cg_ptr(c, x), x->dtype,
                                     cg_ptr(c, n->in[1]), n->in[1]->dtype, cg_ptr(c, n->in[2]), rows_of(x), last_dim(x),
                                     a->eps));
  }
  case OP_ROPE: {
    const Shape *s = &x->shape;
    return stmt(c, cuk_rope(k, cg_ptr(c, y), cg_ptr(c, x), x->dtype, s->dim[0], s->dim[1], a->heads,
                            s->dim[2] / a->heads, a->theta, a->start, a->inverse));
  }
  case OP_SDPA: {
    const Shape *s = &x->shape;
    if (n->in[1]->dtype != x->dtype || n->in[2]->dtype != x->dtype) return cg_unsupported(c, n, "q, k, v of different dtypes");
    return stmt(c, cuk_sdpa(k, cg_ptr(c, n->out[0]), cg_ptr(c, n->out[1]), cg_ptr(c, x), cg_ptr(c, n->in[1]),
                            cg_ptr(c, n->in[2]), x->dtype, s->dim[0], s->dim[1], a->heads, a->kv_heads,
                            s->dim[2] / a->heads, a->causal,
                            &(CuAttnLd){.q = x->ld, .k = n->in[1]->ld, .v = n->in[2]->ld, .o = n->out[0]->ld}));
  }
  case OP_SDPA_BWD: {
    const Shape *s = &x->shape;
    return stmt(c, cuk_sdpa_bwd(k, cg_ptr(c, n->out[0]), cg_ptr(c, n->out[1]), cg_ptr(c, n->out[2]), cg_ptr(c, x),
                                cg_ptr(c, n->in[1]), cg_ptr(c, n->in[2]), cg_ptr(c, n->in[3]), cg_ptr(c, n->in[4]),
                                cg_ptr(c, n->in[5]), x->dtype, s->dim[0], s->dim[1], a->heads, a->kv_heads,
                                s->dim[2] / a->heads, a->causal,
                                &(CuAttnLd){x->ld, n->in[1]->ld, n->in[2]->ld, n->in[3]->ld, n->in[5]->ld,
                                            n->out[0]->ld, n->out[1]->ld, n->out[2]->ld}));
  }
  case OP_ROPE_AT: {
    const Shape *s = &x->shape;
    return stmt(c, cuk_rope_at(k, cg_ptr(c, y), cg_ptr(c, x), cg_ptr(c, n->in[1]), x->dtype, s->dim[0], s->dim[1],
                               a->heads, s->dim[2] / a->heads, a->theta, a->start, a->inverse));
  }
  case OP_ATTN_BLOCK: case OP_ATTN_BLOCK_BWD: { /* ring attention's blocks (context parallelism) */
    const Shape *s = &x->shape;
    int np = n->op == OP_ATTN_BLOCK ? 3 : 6; /* the positions follow q, k, v (and o, lse, do) */
    if (n->in[1]->dtype != x->dtype || n->in[2]->dtype != x->dtype) return cg_unsupported(c, n, "q, k, v of different dtypes");
    CuAttnKeys ks = {n->in[1]->shape.dim[1], cg_ptr(c, n->in[np]), cg_ptr(c, n->in[np + 1])};
    if (n->op == OP_ATTN_BLOCK)
      return stmt(c, cuk_attn_block(k, cg_ptr(c, n->out[0]), cg_ptr(c, n->out[1]), cg_ptr(c, x), cg_ptr(c, n->in[1]),
                                    cg_ptr(c, n->in[2]), x->dtype, s->dim[0], s->dim[1], &ks, a->heads, a->kv_heads,
                                    s->dim[2] / a->heads, a->causal));
    return stmt(c, cuk_attn_block_bwd(k, cg_ptr(c, n->out[0]), cg_ptr(c, n->out[1]), cg_ptr(c, n->out[2]), cg_ptr(c, x),
                                      cg_ptr(c, n->in[1]), cg_ptr(c, n->in[2]), cg_ptr(c, n->in[3]), cg_ptr(c, n->in[4]),
                                      cg_ptr(c, n->in[5]), x->dtype, s->dim[0], s->dim[1], &ks, a->heads, a->kv_heads,
                                      s->dim[2] / a->heads, a->causal));
  }
  case OP_ATTN_COMBINE: {
    const Shape *s = &x->shape;
    return stmt(c, cuk_attn_combine(k, cg_ptr(c, n->out[0]), cg_ptr(c, n->out[1]), cg_ptr(c, x), cg_ptr(c, n->in[1]),
                                    cg_ptr(c, n->in[2]), cg_ptr(c, n->in[3]), x->dtype, s->dim[0], s->dim[1], a->heads,
                                    s->dim[2] / a->heads));
  }
  case OP_CROSS_ENTROPY: {
    int b = fuse_ce_partner(n->graph, c->pos); /* passes/fuse_ce.c: the backward too, where it runs */
    if (b >= 0 && cg_runs(c, n->graph, b)) {
      const Node *bw = n->graph->nodes[b];
      cg_line(c, "/* the cross-entropy's forward and backward in one pass over the logits */");
      return stmt(c, cuk_cross_entropy_fused(k, cg_ptr(c, y), cg_ptr(c, bw->out[0]), cg_ptr(c, x), x->dtype,
                                             cg_ptr(c, n->in[1]), cg_ptr(c, bw->in[2]), rows_of(x), last_dim(x), a->len));
    }
    return stmt(c, cuk_cross_entropy(k, cg_ptr(c, y), cg_ptr(c, x), x->dtype, cg_ptr(c, n->in[1]), rows_of(x),
                                     last_dim(x), a->len));
  }
  case OP_CROSS_ENTROPY_BWD: {
    int f = fuse_ce_partner(n->graph, c->pos);
    if (f >= 0 && cg_runs(c, n->graph, f)) return stmt(c, "/* computed with the loss (fused cross-entropy) */");
    return stmt(c, cuk_cross_entropy_bwd(k, cg_ptr(c, y), cg_ptr(c, x), x->dtype, cg_ptr(c, n->in[1]),
                                         cg_ptr(c, n->in[2]), rows_of(x), last_dim(x), a->len));
  }
  case OP_CE_MAX:
    return stmt(c, cuk_ce_max(k, cg_ptr(c, y), cg_ptr(c, x), x->dtype, rows_of(x), last_dim(x), a->len,
                              first_index(c, n, last_dim(x))));
  case OP_CE_SUMS:
    return stmt(c, cuk_ce_sums(k, cg_ptr(c, y), cg_ptr(c, x), x->dtype, cg_ptr(c, n->in[1]), cg_ptr(c, n->in[2]),
                               rows_of(x), last_dim(x), a->len, first_index(c, n, last_dim(x))));
  case OP_CE_LOSS:
    return stmt(c, cuk_ce_loss(k, cg_ptr(c, y), cg_ptr(c, x), cg_ptr(c, n->in[1]), cg_ptr(c, n->in[2]),
                               ir_numel(&n->in[2]->shape), a->len));
  case OP_CE_GRAD:
    return stmt(c, cuk_ce_grad(k, cg_ptr(c, y), cg_ptr(c, x), x->dtype, cg_ptr(c, n->in[1]), cg_ptr(c, n->in[2]),
                               cg_ptr(c, n->in[3]), cg_ptr(c, n->in[4]), rows_of(x), last_dim(x), a->len,
                               first_index(c, n, last_dim(x))));
  case OP_SUM: return stmt(c, cuk_sum(k, cg_ptr(c, y), cg_ptr(c, x), x->dtype, ir_numel(&x->shape)));
  case OP_MEAN: return stmt(c, cuk_mean(k, cg_ptr(c, y), cg_ptr(c, x), x->dtype, ir_numel(&x->shape)));
  case OP_SUMSQ: {
    const Value *src = ir_unfold_cast(x); /* a folded cast's bf16 source, widened in the kernel */
    return stmt(c, cuk_sumsq(k, cg_ptr(c, y), cg_ptr(c, src), src->dtype, ir_numel(&x->shape)));
  }
  case OP_ADAMW_UPDATE:
    if (x->dtype != DT_F32) return cg_unsupported(c, n, "AdamW on non-f32 weights (the master weights are f32)");
    return emit_update(c, n, NULL);
  case OP_SGD_UPDATE:
    if (x->dtype != DT_F32) return cg_unsupported(c, n, "SGD on non-f32 weights (the master weights are f32)");
    return emit_update(c, n, NULL);
  case OP_AXIS_INDEX:
    cg_line(c, "{ int32_t coord = rt_ctx_coord(ctx, %s); rt_cu_put(ctx, %s, &coord, 4); }", cg_axis_lit(a->mesh_axis),
            cg_ptr(c, y));
    return;
  default: return cg_unsupported(c, n, "no CUDA code for this op");
  }
}

/* Plan offload under bf16 (passes/zero_offload.c): the host's AdamW u (at c->pos) and the cast of
 * its updated master into the bf16 copy it uploads, right after it, in one pass over the master:
 * rt_adamw_f32_copy (the same arithmetic and rounding as rt_adamw_f32 and rt_cvt_f32_bf16). */
static int host_update_copy(Cg *c, Node *u) {
  const Graph *g = u->graph;
  int at = c->pos + 1;
  if (at >= g->nnodes || g->nodes[at - 1] != u || !ir_host_update_casts_copy(g, at) || !cg_runs(c, g, at)) return 0;
  const Node *x = g->nodes[at];
  for (int k = 0; k < 3; k++) cg_copy_if_moved(c, u->out[k], u->in[k == 0 ? 0 : k + 1]);
  const Attrs *a = &u->a;
  cg_line(c, "rt_adamw_f32_copy((float *)%s, (float *)%s, (float *)%s, (float *)%s, (float *)%s, %" PRId64
          ", (float)%.17g, (float)%.17g, (float)%.17g, (float)%.17g, (uint16_t *)%s);",
          cg_ptr(c, u->out[0]), cg_ptr(c, u->in[1]), cg_ptr(c, u->out[1]), cg_ptr(c, u->out[2]), cg_ptr(c, u->in[4]),
          ir_numel(&u->in[0]->shape), a->beta1, a->beta2, a->eps, a->weight_decay, cg_ptr(c, x->out[0]));
  cg_line(c, "/* (the cast: the bf16 copy to upload, stored by the update above) */");
  return 2;
}

/* Sibling GEMMs p and q (passes/hfuse.c: one A, two weights of one shape, outputs of one shape) as one launch. */
static void emit_matmul_pair(Cg *c, Node *p, Node *q) {
  IrGemm d = gemm_dims(p);
  if (d.batch != 1) die("hfuse: a sibling pair with batch %" PRId64, d.batch);
  Value *x = p->in[0];
  cg_line(c, "rt_cu_matmul_pair(ctx, %s, %s, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d);",
          cg_ptr(c, p->out[0]), cg_ptr(c, q->out[0]), cg_dtype_lit(p->out[0]->dtype), cg_ptr(c, x), cg_ptr(c, p->in[1]),
          cg_ptr(c, q->in[1]), cg_dtype_lit(x->dtype), d.m, d.n, d.k, p->a.ta, p->a.tb);
}

static int cuda_node(Cg *c, Node *n) {
  Value *y = n->nout ? n->out[0] : NULL, *x = n->nin ? n->in[0] : NULL;
  /* plan offload: the optimizer step in host memory runs the CPU target's (threaded) kernels */
  if (y && y->host) {
    int k = host_update_copy(c, n);
    return k ? k : cg_target_cpu.node(c, n);
  }
  for (int i = 0; i < n->nin; i++)
    if (ir_dtype_is_float(n->in[i]->dtype) && !float_ok(c, n, n->in[i])) return 1;
  if (ir_cast_folded(n)) { /* its readers read the bf16 source (ir_cast_folded) */
    cg_line(c, "/* (the cast to f32: its readers widen its source themselves) */");
    return 1;
  }
  if (n->op == OP_CAST && x->dtype == y->dtype) { /* a view: a copy only if it was not planned in place */
    cg_copy_if_moved(c, y, x);
    return 1;
  }
  if (fuse_sumsq_member(n)) { /* passes/fuse_sumsq.c */
    if (n->op == OP_SUMSQ) cg_line(c, "/* (its sum of squares: in the kernel of the concat below) */");
    return 1;
  }
  if (n->op == OP_GELU_BWD || n->op == OP_REDUCE_SUM) { /* passes/epilogue.c: done by an earlier GEMM? */
    int gm = epilogue_gemm(n->graph, c->pos);
    if (gm >= 0 && cg_runs(c, n->graph, gm)) {
      cg_line(c, "/* computed by a GEMM's epilogue above */");
      return 1;
    }
  }
  if ((n->op == OP_ADAMW_UPDATE || n->op == OP_SGD_UPDATE) && x->dtype == DT_F32) { /* with its bf16 copy: one kernel */
    const Node *cc = copy_cast(c, n);
    if (cc) {
      emit_update(c, n, cg_ptr(c, cc->out[0]));
      cg_line(c, "/* (the cast: its bf16 copy, stored by the update above) */");
      return 2;
    }
  }
  if (n->op == OP_ADD && n->a.normres) { /* passes/fuse_normres.c: done by the norm's backward before it? */
    int nb = fuse_normres_partner(n->graph, c->pos);
    if (nb >= 0 && cg_runs(c, n->graph, nb)) {
      cg_line(c, "/* computed by the norm's backward above */");
      return 1;
    }
  }
  if (cg_elementwise(n)) return emit_run(c, n);
  if (n->op == OP_MATMUL && n->a.epilogue) {
    int k = emit_matmul_ep(c, n);
    if (k) return k;
  }
  if (n->op == OP_MATMUL && n->a.hfuse) { /* passes/hfuse.c: siblings, one batched GEMM where both run */
    if (hfuse_leader(n->graph, c->pos) >= 0 && cg_runs(c, n->graph, c->pos - 1)) {
      cg_line(c, "/* computed by the sibling GEMM above (hfuse) */");
      return 1;
    }
    if (n->a.hfuse == 1 && hfuse_leader(n->graph, c->pos + 1) == c->pos && cg_runs(c, n->graph, c->pos + 1)) {
      emit_matmul_pair(c, n, n->graph->nodes[c->pos + 1]);
      return 1;
    }
  }
  emit_node(c, n);
  return 1;
}

static void cuda_begin(Cg *c) {
  c->ts = cuk_new(c->a);
  cuk_set_attn_tune(c->ts, 1); /* the attention tiles autotuned at run time (SHARDRT_ATTN_AUTOTUNE, docs/cuda.md) */
}

static void cuda_prologue(Cg *c) {
  if (c->m->memplan->host_total > 0) /* the optimizer step on the host (offload), a bf16 gradient made f32 there */
    fprintf(c->f, "#include \"kernels/kernels.h\"\n#include \"prims.h\"\n");
  fprintf(c->f, "#include \"cuda_ops.h\"\n#include \"program.h\"\n\n"
                "extern const RtDevice rt_cuda_device; /* runtime/cuda: the GPU found at start (or its emulation) */\n\n");
}

static void cuda_zero(Cg *c, const char *dst, int64_t bytes) {
  cg_line(c, "rt_cu_zero(ctx, %s, %" PRId64 ");", dst, bytes);
}

static void cuda_copy(Cg *c, const char *dst, const char *src, int64_t bytes, bool overlap) {
  (void)overlap; /* a device copy may overlap */
  cg_line(c, "rt_cu_copy(ctx, %s, %s, %" PRId64 ");", dst, src, bytes);
}

/* The kernels' source as a C string, and their workspace. */
static void cuda_finish(Cg *c) {
  const CuK *k = c->ts;
  FILE *f = c->f;
  cg_ws_need(c, arena_printf(c->a, "%" PRId64, cuk_workspace(k)));
  fprintf(f, "/* the program's kernels: compiled by NVRTC at start for the GPU found, cubins cached */\n");
  fprintf(f, "static const char cuda_source[] =\n");
  for (const char *p = cuk_source(k); *p;) { /* one string piece per source line, for readability */
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p + 1) : strlen(p);
    fprintf(f, "  %s\n", cg_cstr(c, arena_strndup(c->a, p, len)));
    p += len;
  }
  fprintf(f, "  ;\nstatic const RtCudaCode cuda_code = {cuda_source, %d};\n\n", cuk_count(k));
}

static void cuda_program(Cg *c) { fprintf(c->f, "  .device = &rt_cuda_device,\n  .cuda = &cuda_code,\n"); }

/* plan offload's copies (codegen/emit.c: where passes/offload_sched.c puts them) */
static void cuda_offload(Cg *c, CgOffload what, const char *dst, const char *src, int64_t bytes, int slot) {
  switch (what) {
  case CG_TO_HOST_START: case CG_TO_DEVICE_START:
    cg_line(c, "rt_cu_to_%s_start(ctx, %s, %s, %" PRId64 ", %d);", what == CG_TO_HOST_START ? "host" : "device", dst, src,
            bytes, slot);
    return;
  case CG_HOST_WAIT: cg_line(c, "rt_cu_host_wait(ctx, %d); /* the download of slot %d has landed */", slot, slot); return;
  case CG_DEVICE_WAIT:
    cg_line(c, "rt_cu_device_wait(ctx, %d); /* the device waits for the upload of slot %d */", slot, slot);
    return;
  }
}

/* (cg.h) a launch, or a GEMM (one cuBLASLt call; a sibling pair one strided batch): tests/report/cuda_launches.py's
 * kernels. rt_cu_launch_tuned_or's own launch is not counted (it is on its line with the fallback's launches,
 * which are: the cost model's count of the flash backward) */
static int cuda_kernel_call(const char *name) {
  static const char *const k[] = {"rt_cu_launch", "rt_cu_launch_tuned", "rt_cu_matmul", "rt_cu_matmul_ep",
                                  "rt_cu_matmul_dgelu", "rt_cu_matmul_pair"};
  for (size_t i = 0; i < sizeof k / sizeof *k; i++)
    if (strcmp(name, k[i]) == 0) return CG_CALL_KERNEL;
  return CG_CALL_NONE;
}

const CgTarget cg_target_cuda = {
    .name = "CUDA",
    .logits_tensor = true,
    .begin = cuda_begin,
    .prologue = cuda_prologue,
    .node = cuda_node,
    .copy = cuda_copy,
    .zero = cuda_zero,
    .finish = cuda_finish,
    .program = cuda_program,
    .offload = cuda_offload,
    .kernel_call = cuda_kernel_call,
};
