/* ir/infer.c — shape and dtype rules for every op in ir/ops.def.
 *
 * ir_infer(n) sets n's output dtypes and shapes from its inputs and attrs and
 * checks what the op requires. Nodes whose output shape is not a function of
 * their inputs (sources, reshape, reduce_sum, broadcast_to, embed_bwd, recv,
 * all_gather, reduce_scatter) keep the shape the builder preset and are only
 * checked against their inputs. Shardings are not touched (the partitioning
 * passes own them); Value.shape is the per-rank (local) shape.
 *
 * Dtype rules: elementwise ops promote (any float over integers; f64 > f32 >
 * bf16/f16); float-only ops (exp, matmul, norms, ...) reject integer inputs;
 * index inputs (embed, cross_entropy targets) must be integers.
 */
#include <stdio.h>
#include <string.h>

#include "infer_int.h"

static int dtype_rank(DType d) {
  switch (d) {
  case DT_F64: return 5;
  case DT_F32: return 4;
  case DT_BF16: return 3;
  case DT_F16: return 3;
  case DT_I64: return 2;
  case DT_I32: return 1;
  default: return 0;
  }
}

DType ir_promote(DType a, DType b) { return dtype_rank(b) > dtype_rank(a) ? b : a; }

/* numpy broadcasting of a and b into *r; on failure returns the offending right-aligned dims. */
bool ir_broadcast(const Shape *a, const Shape *b, Shape *r, int64_t *da, int64_t *db) {
  int rank = a->rank > b->rank ? a->rank : b->rank;
  int64_t zeros[IR_MAX_RANK] = {0};
  Shape s = ir_shape(rank, zeros);
  for (int i = 0; i < rank; i++) {
    int ia = a->rank - rank + i, ib = b->rank - rank + i;
    int64_t x = ia >= 0 ? a->dim[ia] : 1, y = ib >= 0 ? b->dim[ib] : 1;
    int16_t sx = ia >= 0 ? a->sym[ia] : -1, sy = ib >= 0 ? b->sym[ib] : -1;
    if (x == y) {
      s.dim[i] = x;
      s.sym[i] = sx >= 0 ? sx : sy;
    } else if (x == 1) {
      s.dim[i] = y;
      s.sym[i] = sy;
    } else if (y == 1) {
      s.dim[i] = x;
      s.sym[i] = sx;
    } else {
      *da = x;
      *db = y;
      return false;
    }
  }
  *r = s;
  return true;
}

/* Unary elementwise ops that only make sense on floats. */
static bool float_only_unary(OpKind op) {
  switch (op) {
  case OP_EXP: case OP_LOG: case OP_SQRT: case OP_RSQRT: case OP_TANH: case OP_SIGMOID:
  case OP_GELU: case OP_SILU:
    return true;
  default: return false;
  }
}

static bool infer_ew(Node *n) {
  if (n->nout != 1) die("%s: expected one output", opname(n));
  if (n->op == OP_CAST) { /* dtype preset by the builder */
    set_out(n, 0, out(n, 0)->dtype, in(n, 0)->shape);
    return true;
  }
  if (n->nin == 1) {
    if (float_only_unary(n->op) && !need_float(n, 0, "input")) return false;
    set_out(n, 0, in(n, 0)->dtype, in(n, 0)->shape);
    return true;
  }
  Shape r;
  int64_t da = 0, db = 0;
  if (!ir_broadcast(&in(n, 0)->shape, &in(n, 1)->shape, &r, &da, &db)) {
    error_at(n->loc, "%s: shapes cannot be broadcast: %s and %s (%lld vs %lld)", opname(n),
             shp(&in(n, 0)->shape), shp(&in(n, 1)->shape), (long long)da, (long long)db);
    return false;
  }
  if ((n->op == OP_GELU_BWD || n->op == OP_SILU_BWD) && (!need_float(n, 0, "x") || !need_float(n, 1, "dy")))
    return false;
  set_out(n, 0, ir_promote(in(n, 0)->dtype, in(n, 1)->dtype), r);
  return true;
}

static bool infer_matmul(Node *n) {
  if (n->nin != 2 && n->nin != 3) {
    error_at(n->loc, "matmul: takes 2 inputs (A, B) or 3 (A, B and the accumulator C), not %d", n->nin);
    return false;
  }
  if (!need_float(n, 0, "left operand") || !need_float(n, 1, "right operand")) return false;
  const Shape *a = &in(n, 0)->shape, *b = &in(n, 1)->shape;
  if (a->rank < 2 || b->rank < 2) {
    error_at(n->loc, "matmul: operands must have rank >= 2: %s @ %s", shp(a), shp(b));
    return false;
  }
  int ra = a->rank, rb = b->rank;
  int am = n->a.ta ? ra - 1 : ra - 2, ak = n->a.ta ? ra - 2 : ra - 1;
  int bk = n->a.tb ? rb - 1 : rb - 2, bn = n->a.tb ? rb - 2 : rb - 1;
  if (a->dim[ak] != b->dim[bk]) {
    error_at(n->loc, "matmul: inner dimensions differ: %s%s @ %s%s (%lld vs %lld)", shp(a),
             n->a.ta ? "^T" : "", shp(b), n->a.tb ? "^T" : "", (long long)a->dim[ak],
             (long long)b->dim[bk]);
    return false;
  }
  Shape la = *a, lb = *b, lead;
  la.rank = ra - 2;
  lb.rank = rb - 2;
  int64_t da = 0, db = 0;
  if (n->a.cb) { /* the leading dims contracted too: one [m, n] over the rows of both */
    if (!n->a.ta || n->a.tb || ra < 3 || !ir_shape_eq(&la, &lb)) {
      error_at(n->loc, "matmul: contracting the leading dims (cb) takes A^T @ B of one leading shape, not %s%s @ %s%s",
               shp(a), n->a.ta ? "^T" : "", shp(b), n->a.tb ? "^T" : "");
      return false;
    }
    la.rank = lb.rank = 0;
  }
  if (!ir_broadcast(&la, &lb, &lead, &da, &db)) {
    error_at(n->loc, "matmul: leading dimensions cannot be broadcast: %s @ %s (%lld vs %lld)", shp(a),
             shp(b), (long long)da, (long long)db);
    return false;
  }
  if (lead.rank + 2 > IR_MAX_RANK) die("matmul: rank too large");
  Shape r = lead;
  r.rank = lead.rank + 2;
  r.dim[lead.rank] = a->dim[am];
  r.sym[lead.rank] = a->sym[am];
  r.dim[lead.rank + 1] = b->dim[bn];
  r.sym[lead.rank + 1] = b->sym[bn];
  if (n->nin == 3) { /* y = C + AB (passes/gacc.c): C's type, the product accumulated in it */
    if (!need_float(n, 2, "accumulator")) return false;
    const Value *c = in(n, 2);
    if (!ir_shape_eq(&c->shape, &r)) {
      error_at(n->loc, "matmul: the accumulator is %s, the product %s", shp(&c->shape), shp(&r));
      return false;
    }
    set_out(n, 0, c->dtype, r);
    return true;
  }
  set_out(n, 0, ir_promote(in(n, 0)->dtype, in(n, 1)->dtype), r);
  return true;
}

static bool infer_embed(Node *n) {
  const Shape *t = &in(n, 0)->shape, *ix = &in(n, 1)->shape;
  if (!need_float(n, 0, "table") || !need_int(n, 1, "indices")) return false;
  if (t->rank != 2) {
    error_at(n->loc, "embed: table must have rank 2 [vocab, dim], got %s", shp(t));
    return false;
  }
  if (ix->rank + 1 > IR_MAX_RANK) {
    error_at(n->loc, "embed: indices have too many dims: %s", shp(ix));
    return false;
  }
  Shape r = *ix;
  r.rank = ix->rank + 1;
  r.dim[ix->rank] = t->dim[1];
  r.sym[ix->rank] = t->sym[1];
  set_out(n, 0, in(n, 0)->dtype, r);
  return true;
}

static bool infer_embed_bwd(Node *n) {
  const Shape *ix = &in(n, 0)->shape, *dy = &in(n, 1)->shape, *y = &out(n, 0)->shape;
  if (!need_int(n, 0, "indices") || !need_float(n, 1, "dy")) return false;
  bool ok = y->rank == 2 && dy->rank == ix->rank + 1 && dy->dim[dy->rank - 1] == y->dim[1];
  for (int i = 0; ok && i < ix->rank; i++) ok = ix->dim[i] == dy->dim[i];
  if (!ok) {
    error_at(n->loc, "embed_bwd: indices %s, dy %s and table %s do not match", shp(ix), shp(dy), shp(y));
    return false;
  }
  out(n, 0)->dtype = in(n, 1)->dtype;
  return true;
}

/* x[.., D] against a weight w[D]. */
static bool check_norm_weight(const Node *n, int xi, int wi, const char *wname) {
  const Shape *x = &in(n, xi)->shape, *w = &in(n, wi)->shape;
  if (w->rank == 1 && w->dim[0] == x->dim[x->rank - 1]) return true;
  error_at(n->loc, "%s: %s must be [%lld] to match input %s, got %s", opname(n), wname,
           (long long)x->dim[x->rank - 1], shp(x), shp(w));
  return false;
}

static bool infer_norm(Node *n) {
  bool bwd = n->op == OP_LAYERNORM_BWD || n->op == OP_RMSNORM_BWD;
  if (!need_float(n, 0, "input") || !need_rank_min(n, 0, 1, "input")) return false;
  if (!need_float(n, 1, "weight") || !check_norm_weight(n, 0, 1, "weight")) return false;
  if (n->op == OP_LAYERNORM && (!need_float(n, 2, "bias") || !check_norm_weight(n, 0, 2, "bias")))
    return false;
  if (bwd && !need_same(n, 0, 2, "x", "dy")) return false;
  set_out(n, 0, in(n, 0)->dtype, in(n, 0)->shape);
  if (bwd)
    for (int i = 1; i < n->nout; i++) set_out(n, i, in(n, 1)->dtype, in(n, 1)->shape);
  return true;
}

/* shard_slice: y's axis is x's divided by a whole degree. */
static bool infer_shard_slice(Node *n) {
  const Shape *x = &in(n, 0)->shape;
  Shape *y = &out(n, 0)->shape;
  int ax = n->a.axis;
  out(n, 0)->dtype = in(n, 0)->dtype;
  if (ax < 0 || ax >= x->rank) {
    error_at(n->loc, "shard_slice: axis %d out of range for %s", ax, shp(x));
    return false;
  }
  if (y->rank != x->rank) {
    *y = *x;
    return true;
  }
  bool ok = y->dim[ax] > 0 && x->dim[ax] % y->dim[ax] == 0;
  for (int d = 0; ok && d < x->rank; d++) ok = d == ax || y->dim[d] == x->dim[d];
  if (!ok) {
    error_at(n->loc, "shard_slice: %s -> %s along axis %d is not a split by a whole mesh degree", shp(x), shp(y), ax);
    return false;
  }
  return true;
}

static bool infer_slice_pad(Node *n) {
  const Shape *x = &in(n, 0)->shape;
  int ax = n->a.axis;
  if (ax < 0 || ax >= x->rank) {
    error_at(n->loc, "%s: axis %d out of range for %s", opname(n), ax, shp(x));
    return false;
  }
  Shape r = *x;
  if (n->op == OP_SLICE) {
    if (n->a.start < 0 || n->a.len < 0 || n->a.start + n->a.len > x->dim[ax]) {
      error_at(n->loc, "slice: [%lld:%lld] out of bounds for axis %d of %s", (long long)n->a.start,
               (long long)(n->a.start + n->a.len), ax, shp(x));
      return false;
    }
  } else if (n->a.start < 0 || n->a.start + x->dim[ax] > n->a.len) {
    error_at(n->loc, "pad: %s placed at offset %lld does not fit in size %lld along axis %d", shp(x),
             (long long)n->a.start, (long long)n->a.len, ax);
    return false;
  }
  r.dim[ax] = n->a.len;
  if (r.dim[ax] != x->dim[ax]) r.sym[ax] = -1;
  set_out(n, 0, in(n, 0)->dtype, r);
  return true;
}

static bool infer_concat(Node *n) {
  if (n->nin < 1) die("concat: no inputs");
  const Shape *x = &in(n, 0)->shape;
  int ax = n->a.axis;
  if (ax < 0 || ax >= x->rank) {
    error_at(n->loc, "concat: axis %d out of range for %s", ax, shp(x));
    return false;
  }
  Shape r = *x;
  DType dt = in(n, 0)->dtype;
  for (int i = 1; i < n->nin; i++) {
    const Shape *y = &in(n, i)->shape;
    bool ok = y->rank == x->rank;
    for (int d = 0; ok && d < x->rank; d++) ok = d == ax || y->dim[d] == x->dim[d];
    if (!ok) {
      error_at(n->loc, "concat: input %d %s does not match input 0 %s outside axis %d", i, shp(y), shp(x), ax);
      return false;
    }
    r.dim[ax] += y->dim[ax];
    dt = ir_promote(dt, in(n, i)->dtype);
  }
  if (n->nin > 1) r.sym[ax] = -1;
  set_out(n, 0, dt, r);
  return true;
}

static bool infer_reshape(Node *n) {
  const Shape *x = &in(n, 0)->shape, *y = &out(n, 0)->shape;
  if (ir_numel(x) != ir_numel(y)) {
    error_at(n->loc, "reshape: cannot reshape %s (%lld elements) to %s (%lld elements)", shp(x),
             (long long)ir_numel(x), shp(y), (long long)ir_numel(y));
    return false;
  }
  out(n, 0)->dtype = in(n, 0)->dtype;
  return true;
}

bool ir_broadcasts_to(const Shape *small, const Shape *big) {
  if (small->rank > big->rank) return false;
  for (int i = 0; i < small->rank; i++) {
    int64_t s = small->dim[small->rank - 1 - i], b = big->dim[big->rank - 1 - i];
    if (s != b && s != 1) return false;
  }
  return true;
}

static bool infer_reduce_bcast(Node *n) {
  const Shape *x = &in(n, 0)->shape, *y = &out(n, 0)->shape;
  bool ok = n->op == OP_REDUCE_SUM ? ir_broadcasts_to(y, x) : ir_broadcasts_to(x, y);
  if (!ok) {
    error_at(n->loc, "%s: %s is not compatible with %s", opname(n), shp(x), shp(y));
    return false;
  }
  out(n, 0)->dtype = in(n, 0)->dtype;
  return true;
}

static bool infer_transpose(Node *n) {
  if (!need_rank_min(n, 0, 2, "input")) return false;
  Shape r = in(n, 0)->shape;
  int a = r.rank - 2, b = r.rank - 1;
  int64_t t = r.dim[a];
  r.dim[a] = r.dim[b];
  r.dim[b] = t;
  int16_t s = r.sym[a];
  r.sym[a] = r.sym[b];
  r.sym[b] = s;
  set_out(n, 0, in(n, 0)->dtype, r);
  return true;
}

static bool infer_full_reduce(Node *n) {
  DType dt = in(n, 0)->dtype;
  if (n->op != OP_SUM && !need_float(n, 0, "input")) return false;
  set_out(n, 0, dt, ir_scalar_shape());
  return true;
}

static bool infer_optimizer(Node *n) {
  int nst = n->op == OP_SGD_UPDATE ? 1 : 2; /* moments */
  int nh = n->op == OP_SGD_UPDATE ? 2 : 3;
  int hi = 2 + nst;
  for (int i = 0; i < n->nin; i++)
    if (!need_float(n, i, i == 0 ? "parameter" : i == 1 ? "gradient" : i == hi ? "hyper" : "moment"))
      return false;
  if (!need_same(n, 0, 1, "parameter", "gradient")) return false;
  for (int i = 2; i < hi; i++)
    if (!need_same(n, 0, i, "parameter", "moment")) return false;
  const Shape *h = &in(n, hi)->shape;
  if (h->rank != 1 || h->dim[0] != nh) {
    error_at(n->loc, "%s: hyper must be [%d], got %s", opname(n), nh, shp(h));
    return false;
  }
  set_out(n, 0, in(n, 0)->dtype, in(n, 0)->shape);
  for (int i = 0; i < nst; i++) set_out(n, 1 + i, in(n, 2 + i)->dtype, in(n, 2 + i)->shape);
  return true;
}

static bool infer_coll(Node *n) {
  if (n->a.mesh_axis < 0 || n->a.mesh_axis >= RT_AX_COUNT) die("%s: bad mesh axis %d", opname(n), n->a.mesh_axis);
  switch (n->op) {
  case OP_ALL_REDUCE:
    if (n->nin != n->nout || n->nin < 1) die("all_reduce: %d inputs, %d outputs", n->nin, n->nout);
    for (int i = 0; i < n->nin; i++) set_out(n, i, in(n, i)->dtype, in(n, i)->shape);
    return true;
  case OP_BROADCAST: set_out(n, 0, in(n, 0)->dtype, in(n, 0)->shape); return true;
  case OP_SEND: return true;
  case OP_RECV: return true;
  case OP_REDUCE_SCATTER:
  case OP_ALL_GATHER: {
    const Shape *x = &in(n, 0)->shape;
    Shape *y = &out(n, 0)->shape;
    int ax = n->a.axis;
    if (ax < 0 || ax >= x->rank) {
      error_at(n->loc, "%s: axis %d out of range for %s", opname(n), ax, shp(x));
      return false;
    }
    out(n, 0)->dtype = in(n, 0)->dtype;
    if (y->rank != x->rank) { /* not yet sized by the partitioning pass: degree 1 */
      *y = *x;
      return true;
    }
    bool ok = true;
    for (int d = 0; ok && d < x->rank; d++) ok = d == ax || y->dim[d] == x->dim[d];
    const Shape *big = n->op == OP_REDUCE_SCATTER ? x : y, *small = n->op == OP_REDUCE_SCATTER ? y : x;
    if (!ok || small->dim[ax] <= 0 || big->dim[ax] % small->dim[ax] != 0) {
      error_at(n->loc, "%s: %s -> %s along axis %d is not a split by a whole mesh degree", opname(n), shp(x),
               shp(y), ax);
      return false;
    }
    return true;
  }
  case OP_ALL_TO_ALL: { /* y: axis gathered (d times longer), split_axis scattered (d times shorter) */
    const Shape *x = &in(n, 0)->shape;
    Shape *y = &out(n, 0)->shape;
    int ax = n->a.axis, sx = n->a.split_axis;
    if (ax < 0 || ax >= x->rank || sx < 0 || sx >= x->rank || ax == sx) {
      error_at(n->loc, "%s: axes %d and %d: two different dims of %s", opname(n), ax, sx, shp(x));
      return false;
    }
    out(n, 0)->dtype = in(n, 0)->dtype;
    if (y->rank != x->rank) { /* not sized yet: degree 1 */
      *y = *x;
      return true;
    }
    bool ok = x->dim[ax] > 0 && y->dim[sx] > 0 && y->dim[ax] % x->dim[ax] == 0 && x->dim[sx] % y->dim[sx] == 0 &&
              y->dim[ax] / x->dim[ax] == x->dim[sx] / y->dim[sx];
    for (int d = 0; ok && d < x->rank; d++) ok = d == ax || d == sx || y->dim[d] == x->dim[d];
    if (!ok) {
      error_at(n->loc, "%s: %s -> %s gathering axis %d and scattering axis %d is not an exchange by one mesh degree",
               opname(n), shp(x), shp(y), ax, sx);
      return false;
    }
    return true;
  }
  default: unreachable();
  }
}

static bool infer_call(Node *n) {
  Graph *b = n->body;
  if (!b) die("call: no body");
  const char *nm = n->a.name ? n->a.name : "?";
  if (b->nargs != n->nin) {
    error_at(n->loc, "call %s: %d arguments given, the layer takes %d", nm, n->nin, b->nargs);
    return false;
  }
  for (int i = 0; i < n->nin; i++)
    if (!ir_same_type(in(n, i), b->args[i]->out[0])) {
      error_at(n->loc, "call %s: argument %d is %s%s, the layer expects %s%s", nm, i, ir_dtype_name(in(n, i)->dtype),
               shp(&in(n, i)->shape), ir_dtype_name(b->args[i]->out[0]->dtype), shp(&b->args[i]->out[0]->shape));
      return false;
    }
  if (b->nresults != n->nout) die("call %s: %d outputs for %d body results", nm, n->nout, b->nresults);
  for (int i = 0; i < n->nout; i++) set_out(n, i, b->results[i]->dtype, b->results[i]->shape);
  return true;
}

static bool infer_repeat(Node *n) {
  Graph *b = n->body;
  if (!b) die("repeat: no body");
  const char *nm = n->a.name ? n->a.name : "?";
  int nc = n->a.ncarry, nx = n->a.nxs;
  if (nc < 0 || nx < 0 || nc + nx > n->nin || b->nargs != n->nin || b->nresults < nc ||
      n->nout != b->nresults)
    die("repeat %s: malformed signature (nin %d, nout %d, ncarry %d, nxs %d, body args %d, results %d)", nm,
        n->nin, n->nout, nc, nx, b->nargs, b->nresults);
  if (n->a.count < 1) {
    error_at(n->loc, "repeat %s: count must be >= 1, got %lld", nm, (long long)n->a.count);
    return false;
  }
  for (int i = 0; i < n->nin; i++) {
    const Value *v = in(n, i), *arg = b->args[i]->out[0];
    Shape want = v->shape;
    if (i >= nc && i < nc + nx) { /* x slice: drop the leading [count] */
      if (v->shape.rank < 1 || v->shape.dim[0] != n->a.count) {
        error_at(n->loc, "repeat %s: stacked input %d %s must have a leading dim of %lld", nm, i,
                 shp(&v->shape), (long long)n->a.count);
        return false;
      }
      want.rank--;
      for (int d = 0; d < want.rank; d++) {
        want.dim[d] = v->shape.dim[d + 1];
        want.sym[d] = v->shape.sym[d + 1];
      }
    }
    if (v->dtype != arg->dtype || !ir_shape_eq(&want, &arg->shape)) {
      error_at(n->loc, "repeat %s: input %d is %s%s but the body's argument %d is %s%s", nm, i,
               ir_dtype_name(v->dtype), shp(&want), i, ir_dtype_name(arg->dtype), shp(&arg->shape));
      return false;
    }
  }
  for (int i = 0; i < nc; i++)
    if (!ir_same_type(b->results[i], in(n, i))) {
      error_at(n->loc, "repeat %s: carried value %d enters as %s%s but the body yields %s%s", nm, i,
               ir_dtype_name(in(n, i)->dtype), shp(&in(n, i)->shape), ir_dtype_name(b->results[i]->dtype),
               shp(&b->results[i]->shape));
      return false;
    }
  for (int i = 0; i < n->nout; i++) {
    const Value *r = b->results[i];
    Shape s = r->shape;
    if (i >= nc) {
      if (s.rank + 1 > IR_MAX_RANK) die("repeat: rank too large");
      for (int d = s.rank; d > 0; d--) {
        s.dim[d] = s.dim[d - 1];
        s.sym[d] = s.sym[d - 1];
      }
      s.rank++;
      s.dim[0] = n->a.count;
      s.sym[0] = -1;
    }
    set_out(n, i, r->dtype, s);
  }
  return true;
}

bool ir_infer(Node *n) {
  if (n->graph) ir_touch(n->graph); /* it (re)types n's outputs */
  unsigned fl = ir_ops[n->op].flags;
  if (fl & F_EW) return infer_ew(n);
  switch (n->op) {
  case OP_INPUT: case OP_PARAM: case OP_STATE: case OP_ARG: case OP_CONST:
    return true;
  case OP_IOTA:
    if (out(n, 0)->shape.rank != 1) {
      error_at(n->loc, "iota: shape must have rank 1, got %s", shp(&out(n, 0)->shape));
      return false;
    }
    if (ir_dtype_is_float(out(n, 0)->dtype)) out(n, 0)->dtype = DT_I32;
    return true;
  case OP_AXIS_INDEX: set_out(n, 0, DT_I32, ir_scalar_shape()); return true;
  case OP_RESHAPE: return infer_reshape(n);
  case OP_TRANSPOSE: return infer_transpose(n);
  case OP_SLICE: case OP_PAD: return infer_slice_pad(n);
  case OP_CONCAT: return infer_concat(n);
  case OP_REDUCE_SUM: case OP_BROADCAST_TO: return infer_reduce_bcast(n);
  case OP_MATMUL: return infer_matmul(n);
  case OP_EMBED: return infer_embed(n);
  case OP_EMBED_BWD: return infer_embed_bwd(n);
  case OP_LAYERNORM: case OP_LAYERNORM_BWD: case OP_RMSNORM: case OP_RMSNORM_BWD: return infer_norm(n);
  case OP_ROPE: case OP_SDPA: case OP_SDPA_BWD: case OP_ROPE_AT: case OP_ATTN_BLOCK: case OP_ATTN_BLOCK_BWD:
  case OP_ATTN_COMBINE: case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_BWD: case OP_CE_MAX: case OP_CE_SUMS:
  case OP_CE_LOSS: case OP_CE_GRAD:
    return ir_infer_attn(n);
  case OP_SHARD_SLICE: return infer_shard_slice(n);
  case OP_SUM: case OP_MEAN: case OP_SUMSQ: return infer_full_reduce(n);
  case OP_SGD_UPDATE: case OP_ADAMW_UPDATE: return infer_optimizer(n);
  case OP_ALL_REDUCE: case OP_REDUCE_SCATTER: case OP_ALL_GATHER: case OP_BROADCAST: case OP_SEND:
  case OP_RECV: case OP_ALL_TO_ALL:
    return infer_coll(n);
  case OP_TO_HOST: case OP_TO_DEVICE: set_out(n, 0, in(n, 0)->dtype, in(n, 0)->shape); return true;
  case OP_STAGE_SELECT:
    if (n->nin < 1) die("stage_select without inputs");
    for (int i = 1; i < n->nin; i++)
      if (!need_same(n, 0, i, "stage 0's value", "another stage's")) return false;
    set_out(n, 0, in(n, 0)->dtype, in(n, 0)->shape);
    return true;
  case OP_REPEAT: return infer_repeat(n);
  case OP_CALL: return infer_call(n);
  default: break;
  }
  die("ir_infer: no rule for %s", opname(n));
}
