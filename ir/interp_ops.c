/* ir/interp_ops.c — the reference interpreter's op kernels: one rank's value of every local op
 * (elementwise, shape, matmul, embedding, norms, cross-entropy, optimizer updates; rope and
 * attention are interp_attn.c's), in fp64 with each dtype's rounding. The walk and the collectives are interp.c and
 * interp_coll.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "interp_internal.h"

/* ---- shape helpers ----------------------------------------------------------- */

/* Per output dim, the stride of `in` (0 where broadcast or missing). */
static void bcast_strides(const Shape *in, const Shape *out, int64_t *st) {
  int64_t s = 1;
  for (int d = out->rank - 1; d >= 0; d--) {
    int id = in->rank - out->rank + d;
    if (id < 0) st[d] = 0;
    else {
      st[d] = in->dim[id] == 1 && out->dim[d] != 1 ? 0 : s;
      s *= in->dim[id];
    }
  }
}

static bool bcast_shape(const Shape *a, const Shape *b, Shape *r) {
  int rank = a->rank > b->rank ? a->rank : b->rank;
  int64_t dims[IR_MAX_RANK];
  for (int i = 0; i < rank; i++) {
    int ia = a->rank - rank + i, ib = b->rank - rank + i;
    int64_t x = ia >= 0 ? a->dim[ia] : 1, y = ib >= 0 ? b->dim[ib] : 1;
    if (x != y && x != 1 && y != 1) return false;
    dims[i] = x == 1 ? y : x;
  }
  *r = ir_shape(rank, dims);
  return true;
}

/* Offset of flat output index i in an input with strides st over out's dims. */
static int64_t bcast_off(const Shape *out, const int64_t *st, int64_t i) {
  int64_t o = 0;
  for (int d = out->rank - 1; d >= 0; d--) {
    o += (i % out->dim[d]) * st[d];
    i /= out->dim[d];
  }
  return o;
}

/* ---- dtype rounding ---------------------------------------------------------- */

/* Rounds x to a binary float with `mbits` fraction bits, min normal exponent emin, max finite maxv. */
static double round_float(double x, int mbits, int emin, double maxv) {
  if (x == 0 || isnan(x) || isinf(x)) return x;
  int e = ilogb(x);
  if (e < emin) e = emin;
  double q = ldexp(1.0, e - mbits);
  double y = nearbyint(x / q) * q;
  if (fabs(y) > maxv) return x > 0 ? INFINITY : -INFINITY;
  return y;
}

static double to_dtype(DType dt, double x) {
  switch (dt) {
  case DT_F64: return x;
  case DT_F32: return (double)(float)x;
  case DT_BF16: return round_float(x, 7, -126, 3.38953138925153547590e38);
  case DT_F16: return round_float(x, 10, -14, 65504.0);
  case DT_I32:
  case DT_I64: return nearbyint(x);
  default: return x;
  }
}

double interp_round(DType dt, double x) { return to_dtype(dt, x); }

/* ---- elementwise ------------------------------------------------------------- */

static double gelu(double x) {
  const double c = sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
}

static double gelu_grad(double x) {
  const double c = sqrt(2.0 / M_PI);
  double u = c * (x + 0.044715 * x * x * x), t = tanh(u);
  double du = c * (1.0 + 3.0 * 0.044715 * x * x);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

static double unary(const Node *n, double x) {
  switch (n->op) {
  case OP_NEG: return -x;
  case OP_SCALE: return n->a.scalar * x;
  case OP_ADD_SCALAR: return x + n->a.scalar;
  case OP_EXP: return exp(x);
  case OP_LOG: return log(x);
  case OP_SQRT: return sqrt(x);
  case OP_RSQRT: return 1.0 / sqrt(x);
  case OP_TANH: return tanh(x);
  case OP_SIGMOID: return sigm(x);
  case OP_RELU: return x > 0 ? x : 0;
  case OP_GELU: return gelu(x);
  case OP_SILU: return x * sigm(x);
  case OP_CAST: return to_dtype(n->out[0]->dtype, x);
  default: die("interp: %s is not unary", ir_ops[n->op].name);
  }
}

static double binary(OpKind op, double a, double b) {
  switch (op) {
  case OP_ADD: return a + b;
  case OP_SUB: return a - b;
  case OP_MUL: return a * b;
  case OP_DIV: return a / b;
  case OP_MAXIMUM: return a > b ? a : b;
  case OP_MINIMUM: return a < b ? a : b;
  case OP_GELU_BWD: return b * gelu_grad(a);
  case OP_SILU_BWD: {
    double s = sigm(a);
    return b * (s + a * s * (1.0 - s));
  }
  default: die("interp: %s is not binary", ir_ops[op].name);
  }
}

static bool ev_ew(const Node *n, Tensor *const *x, Tensor *y) {
  if (n->nin == 1) {
    *y = tensor_new(n->out[0]->dtype, x[0]->shape);
    int64_t cnt = ir_numel(&x[0]->shape);
    for (int64_t i = 0; i < cnt; i++) y->data[i] = unary(n, x[0]->data[i]);
    return true;
  }
  Shape s;
  if (!bcast_shape(&x[0]->shape, &x[1]->shape, &s)) return interp_error(n, "operand shapes do not broadcast");
  int64_t sa[IR_MAX_RANK], sb[IR_MAX_RANK];
  bcast_strides(&x[0]->shape, &s, sa);
  bcast_strides(&x[1]->shape, &s, sb);
  *y = tensor_new(n->out[0]->dtype, s);
  int64_t cnt = ir_numel(&s);
  for (int64_t i = 0; i < cnt; i++)
    y->data[i] = binary(n->op, x[0]->data[bcast_off(&s, sa, i)], x[1]->data[bcast_off(&s, sb, i)]);
  return true;
}

/* ---- shape ops ----------------------------------------------------------------- */

/* outer = product of dims before axis, inner = product after. */
static void split_axis(const Shape *s, int axis, int64_t *outer, int64_t *inner) {
  *outer = *inner = 1;
  for (int d = 0; d < axis; d++) *outer *= s->dim[d];
  for (int d = axis + 1; d < s->rank; d++) *inner *= s->dim[d];
}

Tensor interp_slice_of(const Tensor *x, int axis, int64_t start, int64_t len) {
  Shape s = x->shape;
  s.dim[axis] = len;
  Tensor y = tensor_new(x->dtype, s);
  int64_t outer, inner, n = x->shape.dim[axis];
  split_axis(&x->shape, axis, &outer, &inner);
  for (int64_t o = 0; o < outer; o++)
    memcpy(y.data + o * len * inner, x->data + (o * n + start) * inner, sizeof(double) * (size_t)(len * inner));
  return y;
}

/* Concatenates k tensors along axis. */
static Tensor concat_of(const Tensor *const *x, int k, int axis, DType dt) {
  Shape s = x[0]->shape;
  s.dim[axis] = 0;
  for (int i = 0; i < k; i++) s.dim[axis] += x[i]->shape.dim[axis];
  Tensor y = tensor_new(dt, s);
  int64_t outer, inner;
  split_axis(&s, axis, &outer, &inner);
  int64_t at = 0;
  for (int i = 0; i < k; i++) {
    int64_t len = x[i]->shape.dim[axis];
    for (int64_t o = 0; o < outer; o++)
      memcpy(y.data + (o * s.dim[axis] + at) * inner, x[i]->data + o * len * inner,
             sizeof(double) * (size_t)(len * inner));
    at += len;
  }
  return y;
}

static bool ev_shape(const Node *n, Tensor *const *x, Tensor *y) {
  const Tensor *a = x[0];
  const Shape *ns = &n->out[0]->shape;
  switch (n->op) {
  case OP_RESHAPE:
    if (ir_numel(ns) != ir_numel(&a->shape)) return interp_error(n, "element count differs from the node's shape");
    *y = tensor_copy(a);
    y->shape = *ns;
    return true;
  case OP_TRANSPOSE: {
    Shape s = a->shape;
    int r = s.rank;
    int64_t M = s.dim[r - 2], N = s.dim[r - 1];
    s.dim[r - 2] = N;
    s.dim[r - 1] = M;
    *y = tensor_new(a->dtype, s);
    int64_t batch = M > 0 && N > 0 ? ir_numel(&a->shape) / (M * N) : 0;
    for (int64_t b = 0; b < batch; b++)
      for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) y->data[b * M * N + j * M + i] = a->data[b * M * N + i * N + j];
    return true;
  }
  case OP_SLICE:
    if (n->a.start < 0 || n->a.start + n->a.len > a->shape.dim[n->a.axis]) return interp_error(n, "out of bounds");
    *y = interp_slice_of(a, n->a.axis, n->a.start, n->a.len);
    return true;
  case OP_PAD: {
    int ax = n->a.axis;
    int64_t len = a->shape.dim[ax];
    if (n->a.start < 0 || n->a.start + len > n->a.len) return interp_error(n, "does not fit");
    Shape s = a->shape;
    s.dim[ax] = n->a.len;
    *y = tensor_new(a->dtype, s);
    int64_t outer, inner;
    split_axis(&s, ax, &outer, &inner);
    for (int64_t o = 0; o < outer; o++)
      memcpy(y->data + (o * n->a.len + n->a.start) * inner, a->data + o * len * inner,
             sizeof(double) * (size_t)(len * inner));
    return true;
  }
  case OP_CONCAT: *y = concat_of((const Tensor *const *)x, n->nin, n->a.axis, n->out[0]->dtype); return true;
  case OP_REDUCE_SUM: {
    int64_t st[IR_MAX_RANK];
    *y = tensor_new(a->dtype, *ns);
    bcast_strides(ns, &a->shape, st); /* y broadcasts to x: map each x element to its y slot */
    int64_t cnt = ir_numel(&a->shape);
    for (int64_t i = 0; i < cnt; i++) y->data[bcast_off(&a->shape, st, i)] += a->data[i];
    return true;
  }
  case OP_BROADCAST_TO: {
    int64_t st[IR_MAX_RANK];
    *y = tensor_new(a->dtype, *ns);
    bcast_strides(&a->shape, ns, st);
    int64_t cnt = ir_numel(ns);
    for (int64_t i = 0; i < cnt; i++) y->data[i] = a->data[bcast_off(ns, st, i)];
    return true;
  }
  default: unreachable();
  }
}

/* ---- compute primitives -------------------------------------------------------- */

/* y[j] += a x[j]: y is the output's row, never x's (restrict: the loop vectorizes, each element's sum unchanged) */
static void axpy_row(double *restrict y, double a, const double *restrict x, int64_t n) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) { /* four elements at a time: the compiler pairs them into vector instructions */
    y[j] += a * x[j];
    y[j + 1] += a * x[j + 1];
    y[j + 2] += a * x[j + 2];
    y[j + 3] += a * x[j + 3];
  }
  for (; j < n; j++) y[j] += a * x[j];
}

static bool ev_matmul(const Node *n, Tensor *const *x, Tensor *y) {
  const Shape *A = &x[0]->shape, *B = &x[1]->shape;
  int ra = A->rank, rb = B->rank;
  int64_t M = n->a.ta ? A->dim[ra - 1] : A->dim[ra - 2], K = n->a.ta ? A->dim[ra - 2] : A->dim[ra - 1];
  int64_t K2 = n->a.tb ? B->dim[rb - 1] : B->dim[rb - 2], N = n->a.tb ? B->dim[rb - 2] : B->dim[rb - 1];
  if (K != K2) return interp_error(n, "inner dimensions differ (%lld vs %lld)", (long long)K, (long long)K2);
  Shape la = *A, lb = *B, lead;
  la.rank = ra - 2;
  lb.rank = rb - 2;
  if (n->a.cb) { /* the leading dims contracted too: A^T B over the rows of both, [lead.., k] as one k (ta, not tb) */
    if (!ir_shape_eq(&la, &lb)) return interp_error(n, "cb: the leading dims differ");
    K *= ir_numel(&la);
    la.rank = lb.rank = 0;
  }
  if (!bcast_shape(&la, &lb, &lead)) return interp_error(n, "leading dims do not broadcast");
  int64_t sa[IR_MAX_RANK], sb[IR_MAX_RANK];
  bcast_strides(&la, &lead, sa);
  bcast_strides(&lb, &lead, sb);
  Shape s = lead;
  s.rank = lead.rank + 2;
  s.dim[lead.rank] = M;
  s.dim[lead.rank + 1] = N;
  s.sym[lead.rank] = s.sym[lead.rank + 1] = -1;
  *y = tensor_new(n->out[0]->dtype, s);
  int64_t nb = ir_numel(&lead);
  for (int64_t b = 0; b < nb; b++) {
    const double *pa = x[0]->data + bcast_off(&lead, sa, b) * M * K;
    const double *pb = x[1]->data + bcast_off(&lead, sb, b) * K * N;
    double *py = y->data + b * M * N;
    /* every y[i][j] = ((0 + a_i0 b_0j) + a_i1 b_1j) + ..., k in order: by rows of B where they are contiguous
     * (B not transposed: the k loop outside the j loop, which reads B's row k and adds into y's row i), else
     * by dot products of B's rows; the same sums in the same order either way */
    for (int64_t i = 0; i < M; i++) {
      double *yr = py + i * N;
      if (n->a.tb) {
        const double *ar = pa + (n->a.ta ? i : i * K);
        const int64_t as = n->a.ta ? M : 1;
        for (int64_t j = 0; j < N; j++) {
          double acc = 0;
          const double *br = pb + j * K;
          for (int64_t k = 0; k < K; k++) acc += ar[k * as] * br[k];
          yr[j] = acc;
        }
        continue;
      }
      for (int64_t j = 0; j < N; j++) yr[j] = 0;
      for (int64_t k = 0; k < K; k++) {
        const double av = n->a.ta ? pa[k * M + i] : pa[i * K + k];
        axpy_row(yr, av, pb + k * N, N);
      }
    }
  }
  if (n->nin == 3) /* y = C + AB: the accumulator added to the product (passes/gacc.c), rounded once to y's dtype */
    for (int64_t e = 0; e < nb * M * N; e++) y->data[e] += x[2]->data[e];
  return true;
}

/* A sharded table holds logical rows [lo, lo + V) of a table of V * deg rows. */
static void vocab_range(const Interp *it, const Node *n, int rank, int64_t V, int64_t *lo, int64_t *total) {
  *lo = 0;
  *total = V;
  if (n->a.sharded) {
    int ax = n->a.mesh_axis;
    *lo = V * interp_coord(it, rank, (MeshAxis)ax);
    *total = V * it->mesh.dim[ax];
  }
}

static bool ev_embed(const Interp *it, const Node *n, Tensor *const *x, Tensor *y, int rank) {
  const Tensor *t = x[0], *ix = x[1];
  int64_t V = t->shape.dim[0], D = t->shape.dim[1], cnt = ir_numel(&ix->shape), lo, total;
  vocab_range(it, n, rank, V, &lo, &total);
  Shape s = ix->shape;
  s.dim[s.rank++] = D;
  *y = tensor_new(t->dtype, s);
  for (int64_t i = 0; i < cnt; i++) {
    double id = ix->data[i];
    if (!(id >= 0 && id < (double)total) || id != floor(id)) {
      tensor_free(y);
      return interp_error(n, "token id %.0f out of range [0, %lld) at position %lld on rank %d", id, (long long)total,
                      (long long)i, rank);
    }
    int64_t row = (int64_t)id - lo;
    if (row >= 0 && row < V) memcpy(y->data + i * D, t->data + row * D, sizeof(double) * (size_t)D);
  }
  return true;
}

static bool ev_embed_bwd(const Interp *it, const Node *n, Tensor *const *x, Tensor *y, int rank) {
  const Tensor *ix = x[0], *dy = x[1];
  int64_t V = n->out[0]->shape.dim[0], D = dy->shape.dim[dy->shape.rank - 1], cnt = ir_numel(&ix->shape), lo, total;
  vocab_range(it, n, rank, V, &lo, &total);
  *y = tensor_new(n->out[0]->dtype, ir_shape(2, (int64_t[]){V, D}));
  for (int64_t i = 0; i < cnt; i++) {
    double id = ix->data[i];
    if (!(id >= 0 && id < (double)total)) {
      tensor_free(y);
      return interp_error(n, "token id %.0f out of range [0, %lld) at position %lld on rank %d", id, (long long)total,
                      (long long)i, rank);
    }
    int64_t row = (int64_t)id - lo;
    if (row < 0 || row >= V) continue;
    for (int64_t d = 0; d < D; d++) y->data[row * D + d] += dy->data[i * D + d];
  }
  return true;
}

/* Cross-entropy in parts (ops.def): local column j is logical column lo + j; valid below len. */
static bool ev_ce_part(const Interp *it, const Node *n, Tensor *const *x, Tensor *y, int rank) {
  if (n->op == OP_CE_LOSS) {
    const Tensor *st = x[0], *m = x[1], *tg = x[2];
    int64_t rows = ir_numel(&tg->shape);
    *y = tensor_new(DT_F32, n->out[0]->shape);
    for (int64_t r = 0; r < rows; r++) {
      double t = tg->data[r];
      if (t < 0) continue;
      if ((n->a.len > 0 && t >= (double)n->a.len) || t != floor(t))
        return interp_error(n, "target id %.0f out of range [0, %lld) at position %lld on rank %d", t, (long long)n->a.len,
                        (long long)r, rank);
      y->data[0] += log(st->data[2 * r]) + m->data[r] - st->data[2 * r + 1];
      y->data[1] += 1;
    }
    return true;
  }
  const Tensor *lg = x[0];
  int64_t V = lg->shape.dim[lg->shape.rank - 1], rows = V ? ir_numel(&lg->shape) / V : 0, lo, total;
  vocab_range(it, n, rank, V, &lo, &total);
  int64_t L = n->a.len > 0 ? n->a.len : total, nv = L - lo; /* valid local columns */
  nv = nv < 0 ? 0 : nv > V ? V : nv;
  switch (n->op) {
  case OP_CE_MAX:
    *y = tensor_new(DT_F32, n->out[0]->shape);
    for (int64_t r = 0; r < rows; r++) {
      double mx = -INFINITY;
      for (int64_t v = 0; v < nv; v++) mx = lg->data[r * V + v] > mx ? lg->data[r * V + v] : mx;
      y->data[r] = mx;
    }
    return true;
  case OP_CE_SUMS:
    *y = tensor_new(DT_F32, n->out[0]->shape);
    for (int64_t r = 0; r < rows; r++) {
      const double *l = lg->data + r * V, m = x[2]->data[r];
      double s = 0;
      for (int64_t v = 0; v < nv; v++) s += exp(l[v] - m);
      int64_t t = (int64_t)x[1]->data[r] - lo;
      y->data[2 * r] = s;
      y->data[2 * r + 1] = t >= 0 && t < nv ? l[t] : 0;
    }
    return true;
  case OP_CE_GRAD: {
    *y = tensor_new(lg->dtype, lg->shape);
    double sc = x[4]->data[0];
    for (int64_t r = 0; r < rows; r++) {
      if (x[1]->data[r] < 0) continue;
      const double *l = lg->data + r * V, m = x[2]->data[r], s = x[3]->data[2 * r];
      int64_t t = (int64_t)x[1]->data[r] - lo;
      for (int64_t v = 0; v < nv; v++) y->data[r * V + v] = sc * (exp(l[v] - m) / s - (v == t ? 1.0 : 0.0));
    }
    return true;
  }
  default: unreachable();
  }
}

/* This rank's chunk (blocks per ir_block_index) of x along axis. */
Tensor interp_chunk_of(const Tensor *x, int axis, int deg, int c, int blocks, DType dt) {
  Shape s = x->shape;
  int64_t n = s.dim[axis], nl = n / deg, outer, inner;
  s.dim[axis] = nl;
  Tensor y = tensor_new(dt, s);
  split_axis(&x->shape, axis, &outer, &inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t l = 0; l < nl; l++)
      memcpy(y.data + (o * nl + l) * inner, x->data + (o * n + ir_block_index(nl, blocks, deg, c, l)) * inner,
             sizeof(double) * (size_t)inner);
  return y;
}

/* Inverse of chunk_of over the whole group: grp[c] is member c's chunk. */
Tensor interp_unchunk_of(const Tensor *const *grp, int deg, int axis, int blocks, DType dt) {
  Shape s = grp[0]->shape;
  int64_t nl = s.dim[axis], n = nl * deg, outer, inner;
  split_axis(&s, axis, &outer, &inner);
  s.dim[axis] = n;
  Tensor y = tensor_new(dt, s);
  for (int c = 0; c < deg; c++)
    for (int64_t o = 0; o < outer; o++)
      for (int64_t l = 0; l < nl; l++)
        memcpy(y.data + (o * n + ir_block_index(nl, blocks, deg, c, l)) * inner, grp[c]->data + (o * nl + l) * inner,
               sizeof(double) * (size_t)inner);
  return y;
}

static void ev_layernorm(const Node *n, Tensor *const *x, Tensor *y) {
  const Tensor *a = x[0];
  int64_t D = a->shape.dim[a->shape.rank - 1], rows = ir_numel(&a->shape) / (D ? D : 1);
  bool bwd = n->op == OP_LAYERNORM_BWD;
  y[0] = tensor_new(a->dtype, a->shape);
  if (bwd) {
    y[1] = tensor_new(x[1]->dtype, x[1]->shape);
    y[2] = tensor_new(x[1]->dtype, x[1]->shape);
  }
  for (int64_t r = 0; r < rows; r++) {
    const double *xr = a->data + r * D;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < D; i++) mean += xr[i];
    mean /= (double)D;
    for (int64_t i = 0; i < D; i++) var += (xr[i] - mean) * (xr[i] - mean);
    var /= (double)D;
    double rstd = 1.0 / sqrt(var + n->a.eps);
    double *yr = y[0].data + r * D;
    if (!bwd) {
      for (int64_t i = 0; i < D; i++) yr[i] = (xr[i] - mean) * rstd * x[1]->data[i] + x[2]->data[i];
      continue;
    }
    const double *w = x[1]->data, *dy = x[2]->data + r * D;
    double mg = 0, mgx = 0; /* mean(dxhat), mean(dxhat * xhat) */
    for (int64_t i = 0; i < D; i++) {
      double xh = (xr[i] - mean) * rstd, g = dy[i] * w[i];
      mg += g;
      mgx += g * xh;
      y[1].data[i] += dy[i] * xh;
      y[2].data[i] += dy[i];
    }
    mg /= (double)D;
    mgx /= (double)D;
    for (int64_t i = 0; i < D; i++) {
      double xh = (xr[i] - mean) * rstd;
      yr[i] = rstd * (dy[i] * w[i] - mg - xh * mgx);
    }
  }
}

static void ev_rmsnorm(const Node *n, Tensor *const *x, Tensor *y) {
  const Tensor *a = x[0];
  int64_t D = a->shape.dim[a->shape.rank - 1], rows = ir_numel(&a->shape) / (D ? D : 1);
  bool bwd = n->op == OP_RMSNORM_BWD;
  y[0] = tensor_new(a->dtype, a->shape);
  if (bwd) y[1] = tensor_new(x[1]->dtype, x[1]->shape);
  const double *w = x[1]->data;
  for (int64_t r = 0; r < rows; r++) {
    const double *xr = a->data + r * D;
    double ms = 0;
    for (int64_t i = 0; i < D; i++) ms += xr[i] * xr[i];
    ms /= (double)D;
    double rs = 1.0 / sqrt(ms + n->a.eps);
    double *yr = y[0].data + r * D;
    if (!bwd) {
      for (int64_t i = 0; i < D; i++) yr[i] = xr[i] * rs * w[i];
      continue;
    }
    const double *dy = x[2]->data + r * D;
    double gx = 0;
    for (int64_t i = 0; i < D; i++) {
      gx += dy[i] * w[i] * xr[i];
      y[1].data[i] += dy[i] * xr[i] * rs;
    }
    for (int64_t i = 0; i < D; i++) yr[i] = dy[i] * w[i] * rs - xr[i] * rs * rs * rs * gx / (double)D;
  }
}

/* cross_entropy and its backward. */
static bool ev_ce(const Node *n, Tensor *const *x, Tensor *y, int rank) {
  const Tensor *lg = x[0], *tg = x[1];
  int64_t V = lg->shape.dim[lg->shape.rank - 1], L = n->a.len > 0 ? n->a.len : V;
  int64_t rows = ir_numel(&tg->shape), count = 0;
  for (int64_t r = 0; r < rows; r++) {
    double t = tg->data[r];
    if (t < 0) continue;
    if (t >= (double)L || t != floor(t))
      return interp_error(n, "target id %.0f out of range [0, %lld) at position %lld on rank %d", t, (long long)L,
                      (long long)r, rank);
    count++;
  }
  bool bwd = n->op == OP_CROSS_ENTROPY_BWD;
  *y = bwd ? tensor_new(lg->dtype, lg->shape) : tensor_new(DT_F32, ir_scalar_shape());
  if (count == 0) return true;
  double dl = bwd ? x[2]->data[0] / (double)count : 0, total = 0;
  for (int64_t r = 0; r < rows; r++) {
    double t = tg->data[r];
    if (t < 0) continue;
    const double *l = lg->data + r * V;
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < L; v++) mx = l[v] > mx ? l[v] : mx;
    for (int64_t v = 0; v < L; v++) sum += exp(l[v] - mx);
    double lse = mx + log(sum);
    if (!bwd) {
      total += lse - l[(int64_t)t];
      continue;
    }
    double *d = y->data + r * V;
    for (int64_t v = 0; v < L; v++) d[v] = dl * (exp(l[v] - lse) - (v == (int64_t)t ? 1.0 : 0.0));
  }
  if (!bwd) y->data[0] = total / (double)count;
  return true;
}

static void ev_reduce_all(const Node *n, const Tensor *a, Tensor *y) {
  *y = tensor_new(n->out[0]->dtype, ir_scalar_shape());
  int64_t cnt = ir_numel(&a->shape);
  double acc = 0;
  for (int64_t i = 0; i < cnt; i++) acc += n->op == OP_SUMSQ ? a->data[i] * a->data[i] : a->data[i];
  if (n->op == OP_MEAN) acc /= (double)(cnt ? cnt : 1);
  y->data[0] = acc;
}

static void ev_sgd(const Node *n, Tensor *const *x, Tensor *y) {
  const double lr = x[3]->data[0], gs = x[3]->data[1];
  y[0] = tensor_new(x[0]->dtype, x[0]->shape);
  y[1] = tensor_new(x[2]->dtype, x[2]->shape);
  int64_t cnt = ir_numel(&x[0]->shape);
  if (!isfinite(gs)) { /* a skipped step: p and m unchanged */
    memcpy(y[0].data, x[0]->data, (size_t)cnt * sizeof(double));
    memcpy(y[1].data, x[2]->data, (size_t)cnt * sizeof(double));
    return;
  }
  for (int64_t i = 0; i < cnt; i++) {
    double p = x[0]->data[i], g = gs * x[1]->data[i] + n->a.weight_decay * p;
    double m = n->a.momentum * x[2]->data[i] + g;
    y[1].data[i] = m;
    y[0].data[i] = p - lr * m;
  }
}

static void ev_adamw(const Node *n, Tensor *const *x, Tensor *y) {
  const double lr = x[4]->data[0], gs = x[4]->data[1], step = x[4]->data[2];
  const double b1 = n->a.beta1, b2 = n->a.beta2;
  const double c1 = 1.0 - pow(b1, step), c2 = 1.0 - pow(b2, step);
  y[0] = tensor_new(x[0]->dtype, x[0]->shape);
  y[1] = tensor_new(x[2]->dtype, x[2]->shape);
  y[2] = tensor_new(x[3]->dtype, x[3]->shape);
  int64_t cnt = ir_numel(&x[0]->shape);
  if (!isfinite(gs)) { /* a skipped step: p, m and v unchanged */
    memcpy(y[0].data, x[0]->data, (size_t)cnt * sizeof(double));
    memcpy(y[1].data, x[2]->data, (size_t)cnt * sizeof(double));
    memcpy(y[2].data, x[3]->data, (size_t)cnt * sizeof(double));
    return;
  }
  for (int64_t i = 0; i < cnt; i++) {
    double p = x[0]->data[i], g = gs * x[1]->data[i];
    double m = b1 * x[2]->data[i] + (1 - b1) * g;
    double v = b2 * x[3]->data[i] + (1 - b2) * g * g;
    y[1].data[i] = m;
    y[2].data[i] = v;
    y[0].data[i] = p - lr * (m / c1 / (sqrt(v / c2) + n->a.eps) + n->a.weight_decay * p);
  }
}

/* ---- per-rank evaluation of one non-collective, non-region node ------------------- */

bool interp_eval_local(Interp *it, const Node *n, int rank, Tensor *const *x, Tensor *y) {
  unsigned fl = ir_ops[n->op].flags;
  if (fl & F_EW) return ev_ew(n, x, y);
  const Value *o = n->out[0];
  switch (n->op) {
  case OP_CONST: {
    *y = tensor_new(o->dtype, o->shape);
    int64_t c = ir_numel(&o->shape);
    for (int64_t i = 0; i < c; i++) y->data[i] = n->a.scalar;
    return true;
  }
  case OP_IOTA: {
    *y = tensor_new(o->dtype, o->shape);
    int64_t c = ir_numel(&o->shape);
    for (int64_t i = 0; i < c; i++) y->data[i] = (double)(n->a.start + i);
    return true;
  }
  case OP_AXIS_INDEX:
    *y = tensor_new(DT_I32, ir_scalar_shape());
    y->data[0] = interp_coord(it, rank, (MeshAxis)n->a.mesh_axis);
    return true;
  case OP_RESHAPE: case OP_TRANSPOSE: case OP_SLICE: case OP_PAD: case OP_CONCAT: case OP_REDUCE_SUM:
  case OP_BROADCAST_TO:
    return ev_shape(n, x, y);
  case OP_MATMUL: return ev_matmul(n, x, y);
  case OP_EMBED: return ev_embed(it, n, x, y, rank);
  case OP_EMBED_BWD: return ev_embed_bwd(it, n, x, y, rank);
  case OP_CE_MAX: case OP_CE_SUMS: case OP_CE_LOSS: case OP_CE_GRAD: return ev_ce_part(it, n, x, y, rank);
  case OP_TO_HOST: case OP_TO_DEVICE: *y = tensor_copy(x[0]); return true; /* a copy between memories */
  case OP_STAGE_SELECT: {
    int s = interp_coord(it, rank, RT_AX_PP);
    if (s >= n->nin) return interp_error(n, "rank %d is on pipeline stage %d, of %d inputs", rank, s, n->nin);
    *y = tensor_copy(x[s]);
    return true;
  }
  case OP_SHARD_SLICE: { /* this rank's chunk of its group (the axis's, or dp x cp: mesh_with) */
    int me, deg = interp_group(it, n, rank, &me, NULL);
    if (x[0]->shape.dim[n->a.axis] % ((int64_t)deg * rt_blocks_count(n->a.blocks)) != 0)
      return interp_error(n, "axis %d of size %lld does not split %d ways", n->a.axis, (long long)x[0]->shape.dim[n->a.axis], deg);
    *y = interp_chunk_of(x[0], n->a.axis, deg, me, n->a.blocks, o->dtype);
    return true;
  }
  case OP_LAYERNORM: case OP_LAYERNORM_BWD: ev_layernorm(n, x, y); return true;
  case OP_RMSNORM: case OP_RMSNORM_BWD: ev_rmsnorm(n, x, y); return true;
  case OP_ROPE: case OP_ROPE_AT: case OP_SDPA: case OP_SDPA_BWD: case OP_ATTN_BLOCK: case OP_ATTN_BLOCK_BWD:
  case OP_ATTN_COMBINE:
    interp_eval_attn(n, x, y);
    return true;
  case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_BWD: return ev_ce(n, x, y, rank);
  case OP_SUM: case OP_MEAN: case OP_SUMSQ: ev_reduce_all(n, x[0], y); return true;
  case OP_SGD_UPDATE: ev_sgd(n, x, y); return true;
  case OP_ADAMW_UPDATE: ev_adamw(n, x, y); return true;
  default: die("interp: no local rule for %s", ir_ops[n->op].name);
  }
}

