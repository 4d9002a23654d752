/* codegen/cuda.c — a node of the CUDA target's host program.
 *
 * The host program is the CPU target's (codegen/c.c: entry points, REPEAT loops, the
 * tensor table), with `M` in GPU memory; each node becomes a launch of a kernel emitted
 * for it by codegen/cuda_kernels.c (shapes baked in), a cuBLASLt GEMM (rt_cu_matmul) or a
 * device copy (runtime/cuda/cuda_ops.h). Everything runs in program order on the rank's
 * compute stream. Collectives are the CPU target's runtime/ops/coll.h calls, which the device's
 * runtime makes work on device memory (runtime/cuda/coll_dev.c: NCCL on GPUs).
 *
 * Elementwise fusion: a run of consecutive elementwise nodes (F_EW ops, constants,
 * broadcasts) over one shape becomes one kernel that keeps the intermediates in
 * registers and stores only the values something outside the run reads. The memory plan
 * lets a value reuse the bytes of one that died earlier, which is harmless op by op but
 * not inside one kernel where every index runs at once: a run stops before a member whose
 * output would overlap a value the run still reads (unless it is the same tensor updated
 * in place, index for index).
 */
#include <inttypes.h>
#include <string.h>

#include "cg.h"
#include "cuda_kernels.h"
#include "diag.h"
#include "infer.h"

#define STR_(x) #x
#define STR(x) STR_(x)

static void stmt(Cg *c, const char *s) { cg_line(c, "%s", s); }

bool cg_cuda_done(const Cg *c, const Node *n) {
  for (int i = 0; i < c->ndone; i++)
    if (c->done[i] == n) return true;
  return false;
}

static void mark_done(Cg *c, const Node *n) {
  arena_grow(c->a, (void **)&c->done, &c->capdone, c->ndone + 1, sizeof(Node *));
  c->done[c->ndone++] = n;
}

/* ---- elementwise runs ---- */

static bool fusable(const Node *n) {
  if (n->op == OP_CONST || n->op == OP_BROADCAST_TO) return true;
  return (ir_ops[n->op].flags & F_EW) != 0;
}

/* The bytes v occupies over its graph's iterations: [lo, hi). ARGs (bound to memory of
 * the enclosing graph, live through the whole loop) and unplaced values: none. */
static bool span(const Value *v, int64_t *lo, int64_t *hi) {
  if (v->def->op == OP_ARG || v->offset < 0) return false;
  int64_t iters = 1;
  const Node *r = v->def->graph->owner;
  if (v->stride && r && r->op == OP_REPEAT) iters = r->a.count;
  *lo = v->offset;
  *hi = v->offset + (iters - 1) * v->stride + cg_bytes(v);
  return true;
}

/* Whether a kernel writing w at every index while reading x at every index can race. */
static bool clobbers(const Value *w, const Value *x) {
  if (w == x) return false;
  if (w->offset == x->offset && w->stride == x->stride && w->def->op != OP_ARG && x->def->op != OP_ARG &&
      ir_shape_eq(&w->shape, &x->shape) && ir_dtype_size(w->dtype) == ir_dtype_size(x->dtype))
    return false; /* in place, index for index */
  int64_t wl, wh, xl, xh;
  if (!span(w, &wl, &wh) || !span(x, &xl, &xh)) return false;
  return wl < xh && xl < wh;
}

typedef struct {
  const Node *mem[CUK_MAX_EW]; /* the run's nodes, in order */
  int n;
  Value *ext[CUK_MAX_EW];      /* values it reads from outside */
  int next;
} Run;

static int member_of(const Run *r, const Value *v) {
  for (int i = 0; i < r->n; i++)
    if (r->mem[i]->out[0] == v) return i;
  return -1;
}

static int ext_of(const Run *r, const Value *v) {
  for (int i = 0; i < r->next; i++)
    if (r->ext[i] == v) return i;
  return -1;
}

/* Adds n to the run if it fits; false leaves the run as it was. */
static bool try_add(Run *r, const Node *n, const Shape *S) {
  if (!fusable(n) || !ir_shape_eq(&n->out[0]->shape, S) || r->n == CUK_MAX_EW) return false;
  Value *fresh[2];
  int nfresh = 0;
  for (int k = 0; k < n->nin; k++) {
    Value *v = n->in[k];
    if (member_of(r, v) >= 0 || ext_of(r, v) >= 0) continue;
    if (!ir_broadcasts_to(&v->shape, S)) return false;
    for (int i = 0; i < r->n; i++)
      if (clobbers(r->mem[i]->out[0], v)) return false;
    fresh[nfresh++] = v;
  }
  if (r->next + nfresh > CUK_MAX_EW) return false;
  const Value *y = n->out[0];
  for (int i = 0; i < r->next; i++)
    if (clobbers(y, r->ext[i])) return false;
  for (int i = 0; i < nfresh; i++)
    if (clobbers(y, fresh[i])) return false;
  for (int i = 0; i < nfresh; i++) r->ext[r->next++] = fresh[i];
  r->mem[r->n++] = n;
  return true;
}

static bool is_result(const Graph *g, const Value *v) {
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == v) return true;
  return false;
}

static void emit_run(Cg *c, Node *first) {
  const Graph *g = first->graph;
  const Shape *S = &first->out[0]->shape;
  Run r = {0};
  if (!try_add(&r, first, S)) die("cuda: elementwise %s does not start a run", ir_ops[first->op].name);
  for (int j = c->pos + 1; j < g->nnodes; j++) {
    if (!g->parent && c->need && !c->need[j]) break;
    if (!try_add(&r, g->nodes[j], S)) break;
  }
  CuEwChain ch = {.shape = *S, .nin = r.next, .nops = r.n};
  for (int i = 0; i < r.next; i++) ch.in[i] = (CuEwIn){cg_ptr(c, r.ext[i]), r.ext[i]->dtype, r.ext[i]->shape};
  for (int i = 0; i < r.n; i++) {
    const Node *n = r.mem[i];
    CuEwOp *op = &ch.ops[i];
    *op = (CuEwOp){.op = n->op, .in = {0, 0}, .scalar = n->a.scalar, .dt = n->out[0]->dtype};
    if (n->op == OP_BROADCAST_TO) op->op = OP_CAST; /* the broadcast is the indexing */
    for (int k = 0; k < n->nin && k < 2; k++) {
      int mi = member_of(&r, n->in[k]);
      op->in[k] = mi >= 0 ? mi : -1 - ext_of(&r, n->in[k]);
    }
    /* stored when something outside the run reads it */
    const Value *y = n->out[0];
    int inside = 0;
    for (int j = i + 1; j < r.n; j++)
      for (int k = 0; k < r.mem[j]->nin; k++) inside += r.mem[j]->in[k] == y;
    if (is_result(g, y) || ir_count_uses(g, y) > inside) {
      ch.out_op[ch.nout] = i;
      ch.out_ptr[ch.nout++] = cg_ptr(c, y);
    }
  }
  if (ch.nout == 0) die("cuda: an elementwise run stores nothing");
  if (r.n > 1) cg_line(c, "/* %d elementwise ops in one kernel */", r.n);
  stmt(c, cuk_elementwise(c->k, &ch));
  for (int i = 0; i < r.n; i++) mark_done(c, r.mem[i]);
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

/* ---- multi-rank ops: runtime/ops/coll.h on device memory ----
 * The calls are the CPU target's; the device's runtime makes them work on device memory
 * (runtime/cuda/coll_dev.c: NCCL on a GPU, the host groups on the emulated device, packing by
 * device block copies). The packing scratch lies past the kernels' error flags. */

static void emit_collective(Cg *c, const Node *n) {
  cg_collective(c, n, "(WS + " STR(CUK_WS_FLAGS) ")", CUK_WS_FLAGS);
}

void cg_cuda_node(Cg *c, Node *n) {
  if (cg_cuda_done(c, n)) return;
  CuK *k = c->k;
  Value *y = n->nout ? n->out[0] : NULL, *x = n->nin ? n->in[0] : NULL;
  const Attrs *a = &n->a;
  for (int i = 0; i < n->nin; i++)
    if (ir_dtype_is_float(n->in[i]->dtype) && !float_ok(c, n, n->in[i])) return;
  if (n->op == OP_CAST && x->dtype == y->dtype) return cg_copy_if_moved(c, y, x);
  if (fusable(n)) return emit_run(c, n);
  switch (n->op) {
  case OP_INPUT: case OP_PARAM: case OP_STATE: case OP_ARG: return;
  case OP_IOTA: return stmt(c, cuk_iota(k, cg_ptr(c, y), ir_numel(&y->shape), a->start));
  case OP_RESHAPE: return cg_copy_if_moved(c, y, x);
  case OP_TRANSPOSE: {
    int r = x->shape.rank;
    return stmt(c, cuk_transpose(k, cg_ptr(c, y), cg_ptr(c, x), x->dtype, cg_prod(&x->shape, 0, r - 2),
                                 x->shape.dim[r - 2], x->shape.dim[r - 1]));
  }
  case OP_SLICE: case OP_PAD: {
    const Shape *xs = &x->shape;
    int ax = a->axis, es = ir_dtype_size(x->dtype);
    int64_t outer = cg_prod(xs, 0, ax), inner = cg_prod(xs, ax + 1, xs->rank);
    if (n->op == OP_SLICE)
      cg_line(c, "rt_cu_copy_block(ctx, %s, %" PRId64 ", 0, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d);",
              cg_ptr(c, y), a->len, cg_ptr(c, x), xs->dim[ax], a->start, outer, a->len, inner, es);
    else {
      cg_line(c, "rt_cu_zero(ctx, %s, %" PRId64 ");", cg_ptr(c, y), cg_bytes(y));
      cg_line(c, "rt_cu_copy_block(ctx, %s, %" PRId64 ", %" PRId64 ", %s, %" PRId64 ", 0, %" PRId64 ", %" PRId64 ", %" PRId64 ", %d);",
              cg_ptr(c, y), a->len, a->start, cg_ptr(c, x), xs->dim[ax], outer, xs->dim[ax], inner, es);
    }
    return;
  }
  case OP_CONCAT: {
    int ax = a->axis, es = ir_dtype_size(y->dtype);
    int64_t outer = cg_prod(&y->shape, 0, ax), inner = cg_prod(&y->shape, ax + 1, y->shape.rank), at = 0;
    for (int i = 0; i < n->nin; i++) {
      int64_t len = n->in[i]->shape.dim[ax];
      cg_line(c, "rt_cu_copy_block(ctx, %s, %" PRId64 ", %" PRId64 ", %s, %" PRId64 ", 0, %" PRId64 ", %" PRId64 ", %" PRId64 ", %d);",
              cg_ptr(c, y), y->shape.dim[ax], at, cg_ptr(c, n->in[i]), len, outer, len, inner, es);
      at += len;
    }
    return;
  }
  case OP_REDUCE_SUM:
    return stmt(c, cuk_reduce_to(k, cg_ptr(c, y), y->dtype, &y->shape, cg_ptr(c, x), x->dtype, &x->shape));
  case OP_MATMUL: {
    Value *b = n->in[1];
    const Shape *as = &x->shape, *bs = &b->shape;
    int ra = as->rank, rb = bs->rank;
    int64_t m = a->ta ? as->dim[ra - 1] : as->dim[ra - 2], kk = a->ta ? as->dim[ra - 2] : as->dim[ra - 1];
    int64_t nn = a->tb ? bs->dim[rb - 2] : bs->dim[rb - 1];
    int64_t batch = cg_prod(as, 0, ra - 2), bbatch = cg_prod(bs, 0, rb - 2);
    if (bbatch != 1 && bbatch != batch) return cg_unsupported(c, n, "matmul broadcasting B over part of A's batch dims");
    if (x->dtype != b->dtype) return cg_unsupported(c, n, "matmul of two dtypes (cast one first)");
    /* A [batch, m, k] times a shared B folds the batch into the rows: one GEMM, not a batched one */
    if (bbatch == 1 && batch > 1 && !a->ta) m *= batch, batch = 1;
    cg_line(c, "rt_cu_matmul(ctx, %s, %s, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d, %d, 1.0f, 0.0f);",
            cg_ptr(c, y), cg_dtype_lit(y->dtype), cg_ptr(c, x), cg_ptr(c, b), cg_dtype_lit(x->dtype), batch, m, nn, kk,
            a->ta, a->tb, bbatch != 1);
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
  case OP_LAYERNORM_BWD:
    return stmt(c, cuk_layernorm_bwd(k, cg_ptr(c, n->out[0]), cg_ptr(c, n->out[1]), cg_ptr(c, n->out[2]), cg_ptr(c, x),
                                     x->dtype, cg_ptr(c, n->in[1]), n->in[1]->dtype, cg_ptr(c, n->in[2]), rows_of(x),
                                     last_dim(x), a->eps));
  case OP_RMSNORM_BWD:
    return stmt(c, cuk_rmsnorm_bwd(k, cg_ptr(c, n->out[0]), cg_ptr(c, n->out[1]), cg_ptr(c, x), x->dtype,
                                   cg_ptr(c, n->in[1]), n->in[1]->dtype, cg_ptr(c, n->in[2]), rows_of(x), last_dim(x),
                                   a->eps));
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
                            s->dim[2] / a->heads, a->causal));
  }
  case OP_SDPA_BWD: {
    const Shape *s = &x->shape;
    return stmt(c, cuk_sdpa_bwd(k, cg_ptr(c, n->out[0]), cg_ptr(c, n->out[1]), cg_ptr(c, n->out[2]), cg_ptr(c, x),
                                cg_ptr(c, n->in[1]), cg_ptr(c, n->in[2]), cg_ptr(c, n->in[3]), cg_ptr(c, n->in[4]),
                                cg_ptr(c, n->in[5]), x->dtype, s->dim[0], s->dim[1], a->heads, a->kv_heads,
                                s->dim[2] / a->heads, a->causal));
  }
  case OP_CROSS_ENTROPY:
    return stmt(c, cuk_cross_entropy(k, cg_ptr(c, y), cg_ptr(c, x), x->dtype, cg_ptr(c, n->in[1]), rows_of(x),
                                     last_dim(x), a->len));
  case OP_CROSS_ENTROPY_BWD:
    return stmt(c, cuk_cross_entropy_bwd(k, cg_ptr(c, y), cg_ptr(c, x), x->dtype, cg_ptr(c, n->in[1]),
                                         cg_ptr(c, n->in[2]), rows_of(x), last_dim(x), a->len));
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
  case OP_SUMSQ: return stmt(c, cuk_sumsq(k, cg_ptr(c, y), cg_ptr(c, x), x->dtype, ir_numel(&x->shape)));
  case OP_ADAMW_UPDATE:
    if (x->dtype != DT_F32) return cg_unsupported(c, n, "AdamW on non-f32 weights (the master weights are f32)");
    for (int i = 0; i < 3; i++) cg_copy_if_moved(c, n->out[i], n->in[i == 0 ? 0 : i + 1]);
    return stmt(c, cuk_adamw(k, cg_ptr(c, n->out[0]), cg_ptr(c, n->in[1]), n->in[1]->dtype, cg_ptr(c, n->out[1]),
                             cg_ptr(c, n->out[2]), cg_ptr(c, n->in[4]), ir_numel(&x->shape), a->beta1, a->beta2, a->eps,
                             a->weight_decay));
  case OP_SGD_UPDATE:
    if (x->dtype != DT_F32) return cg_unsupported(c, n, "SGD on non-f32 weights (the master weights are f32)");
    for (int i = 0; i < 2; i++) cg_copy_if_moved(c, n->out[i], n->in[i == 0 ? 0 : 2]);
    return stmt(c, cuk_sgd(k, cg_ptr(c, n->out[0]), cg_ptr(c, n->in[1]), n->in[1]->dtype, cg_ptr(c, n->out[1]),
                           cg_ptr(c, n->in[3]), ir_numel(&x->shape), a->momentum, a->weight_decay));
  case OP_AXIS_INDEX:
    cg_line(c, "{ int32_t coord = rt_ctx_coord(ctx, %s); rt_cu_put(ctx, %s, &coord, 4); }", cg_axis_lit(a->mesh_axis),
            cg_ptr(c, y));
    return;
  case OP_ALL_REDUCE: return cg_all_reduce(c, n);
  case OP_ALL_GATHER: case OP_REDUCE_SCATTER: case OP_BROADCAST: case OP_SHARD_SLICE: return emit_collective(c, n);
  case OP_SEND: case OP_RECV:
    return cg_unsupported(c, n, "point-to-point transfers (pipeline parallelism) on GPU memory: build plans with "
                                "pp > 1 for --target cpu for now");
  case OP_CALL: return cg_unsupported(c, n, "layer calls must be inlined first");
  default: return cg_unsupported(c, n, "no CUDA code for this op");
  }
}
