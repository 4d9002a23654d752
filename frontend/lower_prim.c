/* frontend/lower_prim.c — the primitives: the functions the language builds in
 * (matmul, layer_norm, sdpa, split, ...), each lowered to one op (split: one
 * SLICE per part). Called on numbers, the elementwise ones compute at compile time.
 */
#include <math.h>
#include <string.h>

#include "diag.h"
#include "infer.h"
#include "lower.h"

typedef enum {
  P_MATMUL, P_EMBED, P_LAYER_NORM, P_RMS_NORM, P_UNARY, P_BINARY, P_ROPE, P_SDPA, P_CE, P_SPLIT,
  P_CONCAT, P_RESHAPE, P_TRANSPOSE, P_POSITIONS, P_REDUCE,
} PrimKind;

struct Prim {
  const char *name;      /* as the language spells it */
  PrimKind kind;         /* how its arguments are checked and lowered */
  OpKind op;             /* the op it lowers to */
  int nreq;              /* required parameters (the first nreq) */
  const char *params[6]; /* NULL-terminated */
};

static const Prim prims[] = {
    {"matmul", P_MATMUL, OP_MATMUL, 2, {"a", "b", "ta", "tb"}},
    {"embed", P_EMBED, OP_EMBED, 2, {"table", "indices"}},
    {"layer_norm", P_LAYER_NORM, OP_LAYERNORM, 3, {"x", "weight", "bias", "eps"}},
    {"rms_norm", P_RMS_NORM, OP_RMSNORM, 2, {"x", "weight", "eps"}},
    {"gelu", P_UNARY, OP_GELU, 1, {"x"}},
    {"silu", P_UNARY, OP_SILU, 1, {"x"}},
    {"relu", P_UNARY, OP_RELU, 1, {"x"}},
    {"exp", P_UNARY, OP_EXP, 1, {"x"}},
    {"log", P_UNARY, OP_LOG, 1, {"x"}},
    {"sqrt", P_UNARY, OP_SQRT, 1, {"x"}},
    {"rsqrt", P_UNARY, OP_RSQRT, 1, {"x"}},
    {"tanh", P_UNARY, OP_TANH, 1, {"x"}},
    {"sigmoid", P_UNARY, OP_SIGMOID, 1, {"x"}},
    {"maximum", P_BINARY, OP_MAXIMUM, 2, {"a", "b"}},
    {"minimum", P_BINARY, OP_MINIMUM, 2, {"a", "b"}},
    {"rope", P_ROPE, OP_ROPE, 2, {"x", "heads", "theta", "start"}},
    {"sdpa", P_SDPA, OP_SDPA, 4, {"q", "k", "v", "heads", "kv_heads", "causal"}},
    {"cross_entropy", P_CE, OP_CROSS_ENTROPY, 2, {"logits", "targets", "valid"}},
    {"split", P_SPLIT, OP_SLICE, 2, {"x", "parts", "axis"}},
    {"concat", P_CONCAT, OP_CONCAT, 0, {"axis"}},
    {"reshape", P_RESHAPE, OP_RESHAPE, 2, {"x", "shape"}},
    {"transpose", P_TRANSPOSE, OP_TRANSPOSE, 1, {"x"}},
    {"positions", P_POSITIONS, OP_IOTA, 1, {"n", "start"}},
    {"sum", P_REDUCE, OP_SUM, 1, {"x"}},
    {"mean", P_REDUCE, OP_MEAN, 1, {"x"}},
};
#define NPRIMS ((int)(sizeof prims / sizeof prims[0]))

const Prim *fe_find_prim(const char *name) {
  for (int i = 0; i < NPRIMS; i++)
    if (strcmp(prims[i].name, name) == 0) return &prims[i];
  return NULL;
}

void fe_push_prim_names(Lower *L, PtrVec *out) {
  for (int i = 0; i < NPRIMS; i++) vec_push(L->a, out, (void *)prims[i].name);
}

static bool axis_of(Lower *L, const Val *v, int rank, SrcLoc loc, int *out) {
  int64_t ax;
  if (!fe_need_int(L, v, "`axis`", loc, -IR_MAX_RANK, IR_MAX_RANK, &ax)) return false;
  if (ax < -rank || ax >= rank) {
    error_at(loc, "axis %lld is out of range for a tensor of rank %d", (long long)ax, rank);
    return false;
  }
  *out = (int)(ax < 0 ? ax + rank : ax);
  return true;
}

Val fe_call_prim(Lower *L, Scope *s, const Prim *p, const Expr *call, Val *argv) {
  SrcLoc loc = call->loc;
  if (p->kind == P_CONCAT) { /* concat(a, b, ..., axis: -1) */
    PtrVec ts = {0};
    Val axis = fe_num_val(-1, true);
    SrcLoc axloc = loc;
    for (int i = 0; i < call->args.n; i++) {
      const Arg *a = call->args.v[i];
      if (argv[i].kind == V_NONE) return fe_none_val;
      if (a->name && strcmp(a->name, "axis") == 0) {
        axis = argv[i];
        axloc = a->loc;
      } else if (a->name) {
        error_at(a->loc, "`concat` has no argument `%s`", a->name);
        return fe_none_val;
      } else {
        Value *t = fe_need_tensor(L, &argv[i], "each input of `concat`", a->loc);
        if (!t) return fe_none_val;
        vec_push(L->a, &ts, t);
      }
    }
    if (ts.n < 1) {
      error_at(loc, "`concat` needs at least one tensor");
      return fe_none_val;
    }
    Attrs at = {0};
    if (!axis_of(L, &axis, ((Value *)ts.v[0])->shape.rank, axloc, &at.axis)) return fe_none_val;
    return fe_tensor_val(fe_emit(L, s, OP_CONCAT, ts.n, (Value **)ts.v, &at, loc));
  }
  int np = 0;
  while (np < 6 && p->params[np]) np++;
  Bound b;
  memset(&b, 0, sizeof b);
  if (!fe_bind_args(L, p->name, p->params, np, p->nreq, call, &b, argv)) return fe_none_val;
  Attrs at = {0};
  Value *x = NULL;
  switch (p->kind) {
  case P_UNARY: {
    if (b.v[0].kind == V_NUM) { /* compile-time math on constants */
      double v = b.v[0].num, r;
      switch (p->op) {
      case OP_EXP: r = exp(v); break;
      case OP_LOG: r = v > 0 ? log(v) : NAN; break;
      case OP_SQRT: r = v >= 0 ? sqrt(v) : NAN; break;
      case OP_RSQRT: r = v > 0 ? 1 / sqrt(v) : NAN; break;
      case OP_TANH: r = tanh(v); break;
      case OP_SIGMOID: r = 1 / (1 + exp(-v)); break;
      case OP_RELU: r = v > 0 ? v : 0; break;
      case OP_SILU: r = v / (1 + exp(-v)); break;
      default: r = 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); break;
      }
      if (isnan(r)) {
        error_at(loc, "`%s` of %g is undefined", p->name, v);
        return fe_none_val;
      }
      return fe_num_val(r, false);
    }
    if (!(x = fe_need_tensor(L, &b.v[0], arena_printf(L->a, "the argument of `%s`", p->name), b.loc[0])))
      return fe_none_val;
    return fe_tensor_val(fe_emit1(L, s, p->op, x, NULL, loc));
  }
  case P_BINARY: {
    Val a = b.v[0], c = b.v[1];
    if (a.kind == V_NUM && c.kind == V_NUM)
      return fe_num_val(p->op == OP_MAXIMUM ? fmax(a.num, c.num) : fmin(a.num, c.num), a.is_int && c.is_int);
    Value *ta = a.kind == V_NUM ? fe_const_tensor(L, s, a.num, b.loc[0]) : fe_need_tensor(L, &a, "`a`", b.loc[0]);
    Value *tc = c.kind == V_NUM ? fe_const_tensor(L, s, c.num, b.loc[1]) : fe_need_tensor(L, &c, "`b`", b.loc[1]);
    if (!ta || !tc) return fe_none_val;
    return fe_tensor_val(fe_emit2(L, s, p->op, ta, tc, loc));
  }
  case P_MATMUL: {
    Value *ta = fe_need_tensor(L, &b.v[0], "`a`", b.loc[0]), *tb = fe_need_tensor(L, &b.v[1], "`b`", b.loc[1]);
    if (!ta || !tb) return fe_none_val;
    if (b.given[2] && !fe_need_bool(L, &b.v[2], "`ta`", b.loc[2], &at.ta)) return fe_none_val;
    if (b.given[3] && !fe_need_bool(L, &b.v[3], "`tb`", b.loc[3], &at.tb)) return fe_none_val;
    Value *in[2] = {ta, tb};
    return fe_tensor_val(fe_emit(L, s, OP_MATMUL, 2, in, &at, loc));
  }
  case P_EMBED: {
    Value *t = fe_need_tensor(L, &b.v[0], "`table`", b.loc[0]), *ix = fe_need_tensor(L, &b.v[1], "`indices`", b.loc[1]);
    if (!t || !ix) return fe_none_val;
    return fe_tensor_val(fe_emit2(L, s, OP_EMBED, t, ix, loc));
  }
  case P_LAYER_NORM:
  case P_RMS_NORM: {
    int nt = p->kind == P_LAYER_NORM ? 3 : 2;
    Value *in[3];
    for (int i = 0; i < nt; i++)
      if (!(in[i] = fe_need_tensor(L, &b.v[i], arena_printf(L->a, "`%s`", p->params[i]), b.loc[i]))) return fe_none_val;
    at.eps = 1e-5;
    if (b.given[nt] && !fe_need_num(L, &b.v[nt], "`eps`", b.loc[nt], &at.eps)) return fe_none_val;
    if (at.eps < 0) { /* (was accepted: var + eps below 0, a NaN the first step) */
      error_at(b.loc[nt], "`eps` must not be negative, got %g", at.eps);
      return fe_none_val;
    }
    return fe_tensor_val(fe_emit(L, s, p->op, nt, in, &at, loc));
  }
  case P_ROPE: {
    int64_t h, start = 0;
    if (!(x = fe_need_tensor(L, &b.v[0], "`x`", b.loc[0]))) return fe_none_val;
    if (!fe_need_int(L, &b.v[1], "`heads`", b.loc[1], 1, 1 << 20, &h)) return fe_none_val;
    at.heads = (int)h;
    at.theta = 10000;
    if (b.given[2] && !fe_need_num(L, &b.v[2], "`theta`", b.loc[2], &at.theta)) return fe_none_val;
    if (!(at.theta > 0)) { /* (was accepted: theta^(-2i/hd) of 0 or less is no rotation) */
      error_at(b.loc[2], "`theta` must be positive, got %g", at.theta);
      return fe_none_val;
    }
    if (b.given[3] && !fe_need_int(L, &b.v[3], "`start`", b.loc[3], 0, MAX_DIM, &start)) return fe_none_val;
    at.start = start;
    return fe_tensor_val(fe_emit1(L, s, OP_ROPE, x, &at, loc));
  }
  case P_SDPA: {
    Value *in[3];
    static const char *const qkv[3] = {"`q`", "`k`", "`v`"};
    for (int i = 0; i < 3; i++)
      if (!(in[i] = fe_need_tensor(L, &b.v[i], qkv[i], b.loc[i]))) return fe_none_val;
    int64_t h, kv;
    if (!fe_need_int(L, &b.v[3], "`heads`", b.loc[3], 1, 1 << 20, &h)) return fe_none_val;
    kv = h;
    if (b.given[4] && !fe_need_int(L, &b.v[4], "`kv_heads`", b.loc[4], 1, 1 << 20, &kv)) return fe_none_val;
    if (b.given[5] && !fe_need_bool(L, &b.v[5], "`causal`", b.loc[5], &at.causal)) return fe_none_val;
    at.heads = (int)h;
    at.kv_heads = (int)kv;
    Node *n = fe_make_node(L, s, OP_SDPA, 3, in, 2, &at, loc);
    return fe_tensor_val(ir_infer(n) ? n->out[0] : NULL);
  }
  case P_CE: {
    Value *lg = fe_need_tensor(L, &b.v[0], "`logits`", b.loc[0]), *tg = fe_need_tensor(L, &b.v[1], "`targets`", b.loc[1]);
    if (!lg || !tg) return fe_none_val;
    int64_t valid = 0;
    if (b.given[2] && !fe_need_int(L, &b.v[2], "`valid`", b.loc[2], 1, MAX_DIM, &valid)) return fe_none_val;
    at.len = valid;
    Value *in[2] = {lg, tg};
    return fe_tensor_val(fe_emit(L, s, OP_CROSS_ENTROPY, 2, in, &at, loc));
  }
  case P_SPLIT: {
    if (!(x = fe_need_tensor(L, &b.v[0], "`x`", b.loc[0]))) return fe_none_val;
    int ax = x->shape.rank - 1;
    if (b.given[2] && !axis_of(L, &b.v[2], x->shape.rank, b.loc[2], &ax)) return fe_none_val;
    if (x->shape.rank == 0) {
      error_at(loc, "`split` needs a tensor with at least one dim");
      return fe_none_val;
    }
    int64_t dim = x->shape.dim[ax], sizes[64];
    int n = 0;
    Val parts = b.v[1];
    if (parts.kind == V_LIST) {
      if (parts.n < 1 || parts.n > 64) {
        error_at(b.loc[1], "`split` takes between 1 and 64 sizes");
        return fe_none_val;
      }
      int64_t total = 0;
      for (n = 0; n < parts.n; n++) {
        if (!fe_need_int(L, &parts.items[n], "a split size", b.loc[1], 1, MAX_DIM, &sizes[n])) return fe_none_val;
        total += sizes[n];
      }
      if (total != dim) {
        error_at(b.loc[1], "split sizes add up to %lld but axis %d of %s has %lld", (long long)total, ax,
                 fe_shape_str(L, &x->shape), (long long)dim);
        return fe_none_val;
      }
    } else {
      int64_t k;
      if (!fe_need_int(L, &parts, "`parts`", b.loc[1], 1, 64, &k)) return fe_none_val;
      if (dim % k != 0) {
        error_at(b.loc[1], "cannot split axis %d of %s (%lld) into %lld equal parts", ax, fe_shape_str(L, &x->shape),
                 (long long)dim, (long long)k);
        return fe_none_val;
      }
      for (n = 0; n < k; n++) sizes[n] = dim / k;
    }
    Val r = fe_none_val;
    r.kind = V_TUPLE;
    r.n = n;
    r.items = ARENA_ARRAY(L->a, Val, n);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
      Attrs sa = {0};
      sa.axis = ax;
      sa.start = off;
      sa.len = sizes[i];
      off += sizes[i];
      r.items[i] = fe_tensor_val(fe_emit1(L, s, OP_SLICE, x, &sa, loc));
      if (r.items[i].kind == V_NONE) return fe_none_val;
    }
    return n == 1 ? r.items[0] : r;
  }
  case P_RESHAPE: {
    if (!(x = fe_need_tensor(L, &b.v[0], "`x`", b.loc[0]))) return fe_none_val;
    Val sh = b.v[1];
    if (sh.kind != V_LIST || sh.n > IR_MAX_RANK) {
      error_at(b.loc[1], "`shape` must be a list of at most %d dims, e.g. [b, s, heads, d / heads]", IR_MAX_RANK);
      return fe_none_val;
    }
    int64_t dims[IR_MAX_RANK], known = 1;
    int infer_at = -1;
    for (int i = 0; i < sh.n; i++) {
      if (sh.items[i].kind == V_NUM && sh.items[i].num == -1 && infer_at < 0) {
        infer_at = i;
        dims[i] = 1;
        continue;
      }
      if (!fe_need_int(L, &sh.items[i], "a dim of `shape`", b.loc[1], 1, MAX_DIM, &dims[i])) return fe_none_val;
      known *= dims[i];
      if (known > MAX_NUMEL) {
        error_at(b.loc[1], "shape too large");
        return fe_none_val;
      }
    }
    if (infer_at >= 0) {
      int64_t total = ir_numel(&x->shape);
      if (total % known != 0) {
        error_at(b.loc[1], "cannot reshape %s: %lld elements do not divide into dims of product %lld",
                 fe_shape_str(L, &x->shape), (long long)total, (long long)known);
        return fe_none_val;
      }
      dims[infer_at] = total / known;
    }
    return fe_tensor_val(fe_emit_typed(L, s, OP_RESHAPE, 1, &x, NULL, x->dtype, ir_shape(sh.n, dims), loc));
  }
  case P_TRANSPOSE:
    if (!(x = fe_need_tensor(L, &b.v[0], "`x`", b.loc[0]))) return fe_none_val;
    return fe_tensor_val(fe_emit1(L, s, OP_TRANSPOSE, x, NULL, loc));
  case P_POSITIONS: {
    int64_t n, start = 0;
    if (!fe_need_int(L, &b.v[0], "`n`", b.loc[0], 1, MAX_DIM, &n)) return fe_none_val;
    if (b.given[1] && !fe_need_int(L, &b.v[1], "`start`", b.loc[1], 0, MAX_DIM, &start)) return fe_none_val;
    at.start = start;
    Shape sh = ir_shape(1, &n);
    sh.sym[0] = (int16_t)b.v[0].sym;
    return fe_tensor_val(fe_emit_typed(L, s, OP_IOTA, 0, NULL, &at, DT_I32, sh, loc));
  }
  case P_REDUCE:
    if (!(x = fe_need_tensor(L, &b.v[0], "`x`", b.loc[0]))) return fe_none_val;
    return fe_tensor_val(fe_emit1(L, s, p->op, x, NULL, loc));
  case P_CONCAT: break;
  }
  unreachable();
}
