/* tests/cuda/kcases.c — see kcases.h. Tolerances: f32 outputs |got - ref| <= 1e-5 |ref| + atol
 * (atol 1e-5 scaled to the data, stated per case); bf16 outputs 1e-2 relative (bf16 keeps 8
 * significant bits: one rounding is <= 2^-9 = 0.2 %, a few roundings of inputs and outputs stay
 * under 1 %) with an absolute floor per case. */
#include "kcases.h"

#include "kcases_int.h"

#include "dtype.h"

/* ---- elementwise chains: a host evaluator of the same chain ----------------------------------- */

static double ew_host(const CuEwOp *o, double a, double b) {
  const double cg = 0.7978845608028654;
  switch (o->op) {
  case OP_ADD: return a + b;
  case OP_SUB: return a - b;
  case OP_MUL: return a * b;
  case OP_DIV: return a / b;
  case OP_MAXIMUM: return a > b ? a : b;
  case OP_MINIMUM: return a < b ? a : b;
  case OP_NEG: return -a;
  case OP_SCALE: return o->scalar * a;
  case OP_ADD_SCALAR: return a + o->scalar;
  case OP_EXP: return exp(a);
  case OP_LOG: return log(a);
  case OP_SQRT: return sqrt(a);
  case OP_RSQRT: return 1.0 / sqrt(a);
  case OP_TANH: return tanh(a);
  case OP_SIGMOID: return 1.0 / (1.0 + exp(-a));
  case OP_RELU: return a > 0 ? a : 0;
  case OP_GELU: return 0.5 * a * (1.0 + tanh(cg * (a + 0.044715 * a * a * a)));
  case OP_SILU: return a / (1.0 + exp(-a));
  case OP_GELU_BWD: {
    double t = tanh(cg * (a + 0.044715 * a * a * a));
    return b * (0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * cg * (1.0 + 3.0 * 0.044715 * a * a));
  }
  case OP_SILU_BWD: {
    double s = 1.0 / (1.0 + exp(-a));
    return b * (s + a * s * (1.0 - s));
  }
  case OP_CAST: return a;
  case OP_CONST: return o->scalar;
  default: abort();
  }
}

static void case_chain(KC *c, const char *name, CuEwChain *ch, float **hin, KT *tin, double rtol, double atol) {
  int64_t n = ir_numel(&ch->shape);
  KT tout[CUK_MAX_EW];
  for (int i = 0; i < ch->nout; i++) {
    tout[i] = kt_new(c, ch->ops[ch->out_op[i]].dt, n);
    ch->out_ptr[i] = P(c, tout[i]);
  }
  for (int i = 0; i < ch->nin; i++) ch->in[i].ptr = P(c, tin[i]);
  run(c, cuk_elementwise(c->k, ch));
  if (!c->be) return;
  int r = ch->shape.rank;
  for (int o = 0; o < ch->nout; o++) {
    float *got = kt_get(c, tout[o]), *ref = arena_alloc(c->a, (size_t)n * 4);
    for (int64_t i = 0; i < n; i++) {
      double v[CUK_MAX_EW] = {0}, xin[CUK_MAX_EW] = {0};
      int64_t coord[IR_MAX_RANK], rem = i;
      for (int d = r - 1; d >= 0; d--) {
        coord[d] = rem % ch->shape.dim[d];
        rem /= ch->shape.dim[d];
      }
      for (int j = 0; j < ch->nin; j++) {
        const Shape *s = &ch->in[j].shape;
        int64_t off = 0;
        for (int d = 0; d < s->rank; d++) off = off * s->dim[d] + (s->dim[d] == 1 ? 0 : coord[r - s->rank + d]);
        xin[j] = hin[j][off];
      }
      for (int j = 0; j < ch->nops; j++) {
        const CuEwOp *op = &ch->ops[j];
        double a = op->in[0] >= 0 ? v[op->in[0]] : xin[-1 - op->in[0]];
        double b = op->in[1] >= 0 ? v[op->in[1]] : xin[-1 - op->in[1]];
        double y = ew_host(op, a, b);
        v[j] = op->dt == DT_BF16 ? (double)bf((float)y) : (double)(float)y;
      }
      ref[i] = (float)v[ch->out_op[o]];
    }
    cmp(c, arena_printf(c->a, "%s out%d", name, o), got, ref, n, rtol, atol);
  }
}

static void cases_elementwise(KC *c) {
  for (int bfv = 0; bfv < 2; bfv++) {
    DType dt = bfv ? DT_BF16 : DT_F32;
    int64_t R = 7, C = 45;
    float *x = fvec(c, R * C, 2.0f), *y = fvec(c, C, 1.5f), *z = fvec(c, R, 1.0f);
    round_to(dt, x, R * C);
    round_to(dt, y, C);
    round_to(dt, z, R);
    for (int i = 0; i < C; i++) y[i] += y[i] >= 0 ? 0.25f : -0.25f; /* away from 0: DIV */
    round_to(dt, y, C);
    KT tx = kt_new(c, dt, R * C), ty = kt_new(c, dt, C), tz = kt_new(c, dt, R);
    kt_put(c, tx, x);
    kt_put(c, ty, y);
    kt_put(c, tz, z);
    float *hin[3] = {x, y, z};
    KT tin[3] = {tx, ty, tz};
    /* binary ops with a broadcast row [C] and a broadcast column [R, 1] */
    CuEwChain a = {.nin = 3, .nops = 6, .nout = 3};
    a.shape = ir_shape(2, (int64_t[]){R, C});
    a.in[0] = (CuEwIn){.dt = dt, .shape = ir_shape(2, (int64_t[]){R, C})};
    a.in[1] = (CuEwIn){.dt = dt, .shape = ir_shape(1, (int64_t[]){C})};
    a.in[2] = (CuEwIn){.dt = dt, .shape = ir_shape(2, (int64_t[]){R, 1})};
    a.ops[0] = (CuEwOp){OP_ADD, {-1, -2}, 0, dt};
    a.ops[1] = (CuEwOp){OP_SUB, {0, -3}, 0, dt};
    a.ops[2] = (CuEwOp){OP_MUL, {1, -2}, 0, DT_F32};
    a.ops[3] = (CuEwOp){OP_DIV, {2, -2}, 0, dt};
    a.ops[4] = (CuEwOp){OP_MAXIMUM, {3, -3}, 0, dt};
    a.ops[5] = (CuEwOp){OP_MINIMUM, {4, -1}, 0, dt};
    a.out_op[0] = 5;
    a.out_op[1] = 2;
    a.out_op[2] = 0;
    double rt = tol(dt), at = bfv ? 1e-2 : 1e-5;
    case_chain(c, arena_printf(c->a, "ew binary %s", dn(dt)), &a, hin, tin, rt, at);
    /* unary ops */
    CuEwChain u = {.nin = 2, .nops = 19, .nout = 4};
    u.shape = ir_shape(2, (int64_t[]){R, C});
    u.in[0] = a.in[0];
    u.in[1] = a.in[1];
    int j = 0;
    u.ops[j++] = (CuEwOp){OP_NEG, {-1, 0}, 0, dt};                /* 0 */
    u.ops[j++] = (CuEwOp){OP_SCALE, {0, 0}, 0.75, dt};            /* 1 */
    u.ops[j++] = (CuEwOp){OP_ADD_SCALAR, {1, 0}, 0.5, DT_F32};    /* 2 */
    u.ops[j++] = (CuEwOp){OP_EXP, {2, 0}, 0, dt};                 /* 3 */
    u.ops[j++] = (CuEwOp){OP_LOG, {3, 0}, 0, DT_F32};             /* 4 */
    u.ops[j++] = (CuEwOp){OP_SQRT, {3, 0}, 0, dt};                /* 5 */
    u.ops[j++] = (CuEwOp){OP_RSQRT, {3, 0}, 0, dt};               /* 6 */
    u.ops[j++] = (CuEwOp){OP_TANH, {-1, 0}, 0, dt};               /* 7 */
    u.ops[j++] = (CuEwOp){OP_SIGMOID, {-1, 0}, 0, dt};            /* 8 */
    u.ops[j++] = (CuEwOp){OP_RELU, {-1, 0}, 0, dt};               /* 9 */
    u.ops[j++] = (CuEwOp){OP_GELU, {-1, 0}, 0, dt};               /* 10 */
    u.ops[j++] = (CuEwOp){OP_SILU, {-1, 0}, 0, dt};               /* 11 */
    u.ops[j++] = (CuEwOp){OP_GELU_BWD, {-1, -2}, 0, dt};          /* 12 */
    u.ops[j++] = (CuEwOp){OP_SILU_BWD, {-1, -2}, 0, dt};          /* 13 */
    u.ops[j++] = (CuEwOp){OP_CAST, {4, 0}, 0, DT_BF16};           /* 14 */
    u.ops[j++] = (CuEwOp){OP_CONST, {0, 0}, 0.125, dt};           /* 15 */
    u.ops[j++] = (CuEwOp){OP_ADD, {5, 6}, 0, DT_F32};             /* 16 */
    u.ops[j++] = (CuEwOp){OP_ADD, {7, 8}, 0, DT_F32};             /* 17 */
    u.ops[j++] = (CuEwOp){OP_ADD, {9, 10}, 0, DT_F32};            /* 18 */
    (void)j;
    CuEwChain u2 = u;
    u2.nops = 22;
    u2.ops[19] = (CuEwOp){OP_ADD, {11, 12}, 0, DT_F32};
    u2.ops[20] = (CuEwOp){OP_ADD, {13, 14}, 0, DT_F32};
    u2.ops[21] = (CuEwOp){OP_ADD, {15, 16}, 0, DT_F32};
    u2.nout = 5;
    u2.out_op[0] = 17;
    u2.out_op[1] = 18;
    u2.out_op[2] = 19;
    u2.out_op[3] = 20;
    u2.out_op[4] = 21;
    case_chain(c, arena_printf(c->a, "ew unary %s", dn(dt)), &u2, hin, tin, bfv ? 2e-2 : 1e-5, bfv ? 2e-2 : 1e-5);
    { /* the same ops with no broadcast over a multiple of 8 elements: 8 a thread, 16-byte loads and stores */
      int64_t n8 = 6 * 48;
      float *xa = fvec(c, n8, 2.0f), *ya = fvec(c, n8, 1.5f);
      round_to(dt, xa, n8);
      for (int64_t i = 0; i < n8; i++) ya[i] += ya[i] >= 0 ? 0.25f : -0.25f;
      round_to(dt, ya, n8);
      KT txa = kt_new(c, dt, n8), tya = kt_new(c, dt, n8);
      kt_put(c, txa, xa);
      kt_put(c, tya, ya);
      float *hin8[2] = {xa, ya};
      KT tin8[2] = {txa, tya};
      CuEwChain u8 = u2;
      u8.shape = ir_shape(2, (int64_t[]){6, 48});
      u8.in[0] = (CuEwIn){.dt = dt, .shape = u8.shape};
      u8.in[1] = (CuEwIn){.dt = dt, .shape = u8.shape};
      case_chain(c, arena_printf(c->a, "ew unary vectorized %s", dn(dt)), &u8, hin8, tin8, bfv ? 2e-2 : 1e-5,
                 bfv ? 2e-2 : 1e-5);
    }
    /* the widest chain a CuEwChain holds (CUK_MAX_EW inputs, ops and outputs: 64 pointer arguments), as the
     * fusion groups of passes/fuse.c can be (FUSE_MAX_*), vectorized (no broadcast, 8 | n) and with every
     * third input broadcast ([C] rows); before 2026-11-27 over 16 inputs and outputs was an internal error */
    for (int bc = 0; bc < 2; bc++) {
      enum { W = CUK_MAX_EW };
      int64_t Rw = bc ? R : 6, Cw = bc ? C : 48;
      CuEwChain w = {.nin = W, .nops = W, .nout = W};
      w.shape = ir_shape(2, (int64_t[]){Rw, Cw});
      float *hw[W];
      KT tw[W];
      for (int i = 0; i < W; i++) {
        int row = bc && i % 3 == 2;
        int64_t ni = row ? Cw : Rw * Cw;
        hw[i] = fvec(c, ni, 1.0f);
        round_to(dt, hw[i], ni);
        tw[i] = kt_new(c, dt, ni);
        kt_put(c, tw[i], hw[i]);
        w.in[i] = (CuEwIn){.dt = dt, .shape = row ? ir_shape(1, (int64_t[]){Cw}) : w.shape};
      }
      static const OpKind kinds[4] = {OP_ADD, OP_MUL, OP_SUB, OP_MAXIMUM};
      for (int j = 0; j < W; j++) { /* tJ = t(J-1) op xJ (t0: x0 + x(W-1)); each op stored, in reverse order */
        w.ops[j] = (CuEwOp){kinds[j % 4], {j ? j - 1 : -W, -1 - j}, 0, j % 5 == 4 ? DT_F32 : dt};
        w.out_op[j] = W - 1 - j;
      }
      case_chain(c, arena_printf(c->a, "ew widest%s %s", bc ? " broadcast" : " vectorized", dn(dt)), &w, hw, tw,
                 tol(dt), bfv ? 1e-2 : 1e-5);
    }
  }
}

/* ---- data movement ------------------------------------------------------------------------------ */

static void cases_movement(KC *c) {
  { /* iota */
    int64_t n = 1000;
    KT y = kt_new(c, DT_I32, n);
    run(c, cuk_iota(c->k, P(c, y), n, 5));
    float *got = kt_get(c, y), *ref = arena_alloc(c->a, (size_t)n * 4);
    for (int64_t i = 0; i < n; i++) ref[i] = (float)(5 + i);
    cmp(c, "iota", got, ref, n, 0, 0);
  }
  for (int tc = 0; tc < 8; tc++) { /* transpose; 72 x 136 and 8 x 64: 64 x 64 vector tiles with tails, one in part;
                                      * 200 x 64 on a grid of 2 row tiles (each block loops over its rows' tiles, as
                                      * over 65535 tiles: a stacked gradient's 2M rows) */
    DType dt = tc & 1 ? DT_BF16 : DT_F32;
    int64_t B = tc < 2 ? 3 : 2, R = tc < 2 ? 37 : tc < 4 ? 72 : tc < 6 ? 8 : 200, C = tc < 2 ? 70 : tc < 4 ? 136 : 64;
    cuk_set_grid_y_max(c->k, tc < 6 ? 65535 : 2);
    float *x = fvec(c, B * R * C, 1.0f);
    round_to(dt, x, B * R * C);
    KT tx = kt_new(c, dt, B * R * C), ty = kt_new(c, dt, B * R * C);
    kt_put(c, tx, x);
    run(c, cuk_transpose(c->k, P(c, ty), P(c, tx), dt, B, R, C));
    float *got = kt_get(c, ty), *ref = arena_alloc(c->a, (size_t)(B * R * C) * 4);
    for (int64_t b = 0; b < B; b++)
      for (int64_t r = 0; r < R; r++)
        for (int64_t q = 0; q < C; q++) ref[(b * C + q) * R + r] = x[(b * R + r) * C + q];
    cmp(c, arena_printf(c->a, "transpose [%lld, %lld, %lld] %s%s", (long long)B, (long long)R, (long long)C, dn(dt),
                        tc < 6 ? "" : ", grid y 2"), got, ref, B * R * C, 0, 0);
  }
  cuk_set_grid_y_max(c->k, 65535);
  { /* x and y one element past 16-byte alignment: transpose_vec's element-by-element path */
    int64_t R = 72, C = 136, n = R * C;
    float *x = fvec(c, n + 1, 1.0f);
    round_to(DT_BF16, x, n + 1);
    KT tx = kt_new(c, DT_BF16, n + 1), ty = kt_new(c, DT_BF16, n + 1);
    kt_put(c, tx, x);
    run(c, cuk_transpose(c->k, arena_printf(c->a, "(b%d + 2)", ty.id), arena_printf(c->a, "(b%d + 2)", tx.id), DT_BF16, 1,
                         R, C));
    if (c->be) {
      float *ref = arena_alloc(c->a, (size_t)n * 4);
      for (int64_t r = 0; r < R; r++)
        for (int64_t q = 0; q < C; q++) ref[q * R + r] = x[1 + r * C + q];
      cmp(c, "transpose bf16 misaligned", kt_get(c, ty) + 1, ref, n, 0, 0);
    }
  }
  /* reduce_to: x [a, b, d] down to several shapes */
  struct {
    int rx, ry;
    int64_t xd[3], yd[3];
  } rc[] = {{3, 1, {6, 33, 40}, {40}},       {3, 3, {6, 33, 40}, {6, 1, 40}}, {3, 2, {6, 33, 40}, {33, 1}},
            {2, 1, {3000, 20}, {20}},        {2, 0, {50, 21}, {0}},           {3, 3, {5, 7, 9}, {5, 7, 9}},
            /* column sums in one launch (colsum_tree): one group of chunks; 2 column tiles of 3 groups each */
            {2, 1, {1000, 48}, {48}},        {2, 1, {2200, 264}, {264}},
            /* more rows a chunk than a thread's loads at once (one-pass: 128 chunks of 157 rows) */
            {2, 1, {20000, 16}, {16}}};
  for (size_t t = 0; t < sizeof rc / sizeof rc[0]; t++)
    for (int bfv = 0; bfv < 2; bfv++) {
      DType dt = bfv ? DT_BF16 : DT_F32;
      Shape xs = ir_shape(rc[t].rx, rc[t].xd), ys = ir_shape(rc[t].ry, rc[t].yd);
      int64_t nx = ir_numel(&xs), ny = ir_numel(&ys);
      float *x = fvec(c, nx, 1.0f);
      round_to(dt, x, nx);
      KT tx = kt_new(c, dt, nx), ty = kt_new(c, DT_F32, ny);
      kt_put(c, tx, x);
      run(c, cuk_reduce_to(c->k, P(c, ty), DT_F32, &ys, P(c, tx), dt, &xs));
      KT ty2 = kt_new(c, DT_F32, ny); /* again: the same bits */
      run(c, cuk_reduce_to(c->k, P(c, ty2), DT_F32, &ys, P(c, tx), dt, &xs));
      if (!c->be) continue;
      float *got = kt_get(c, ty);
      expect(c, arena_printf(c->a, "reduce_to case %d %s deterministic", (int)t, dn(dt)),
             memcmp(got, kt_get(c, ty2), (size_t)ny * 4) == 0);
      double *acc = calloc((size_t)ny, sizeof(double));
      float *ref = arena_alloc(c->a, (size_t)ny * 4);
      for (int64_t i = 0; i < nx; i++) {
        int64_t coord[3], rem = i, o = 0;
        for (int d = xs.rank - 1; d >= 0; d--) {
          coord[d] = rem % xs.dim[d];
          rem /= xs.dim[d];
        }
        for (int d = 0; d < ys.rank; d++) {
          int xd = xs.rank - ys.rank + d;
          o = o * ys.dim[d] + (ys.dim[d] == 1 ? 0 : coord[xd]);
        }
        acc[o] += x[i];
      }
      for (int64_t i = 0; i < ny; i++) ref[i] = (float)acc[i];
      free(acc);
      cmp(c, arena_printf(c->a, "reduce_to case %d %s", (int)t, dn(dt)), got, ref, ny, 1e-5, 1e-5 * (double)(nx / ny));
    }
}

/* ---- norms ----------------------------------------------------------------------------------------------- */

/* Whether got[i] is dx[i] + cr[i] (dx as stored by the backward without the carry) in f32, rounded to dt, bit for bit:
 * the two nodes the fused backward replaces (passes/fuse_normres.c). */
static bool same_sum(const float *got, const float *dx, const float *cr, int64_t n, DType dt) {
  for (int64_t i = 0; i < n; i++) {
    float s = dx[i] + cr[i];
    if (dt == DT_BF16) s = bf(s);
    if (memcmp(&s, &got[i], 4) != 0) return false;
  }
  return true;
}

static void cases_norms(KC *c) {
  struct {
    int64_t rows, d;
    DType xdt, wdt;
  } nc[] = {{37, 100, DT_F32, DT_F32}, {300, 33, DT_F32, DT_F32}, {5, 768, DT_F32, DT_F32},
            {37, 100, DT_BF16, DT_F32}, {300, 70, DT_BF16, DT_BF16}, {3, 1500, DT_F32, DT_F32},
            /* d a multiple of 32 up to 1024: LayerNorm's backward by warps (rows not a multiple of 8) */
            {301, 256, DT_BF16, DT_BF16}, {37, 1024, DT_BF16, DT_F32},
            /* the backward's ring of 4 rows (D 768; 301 rows above: 19 blocks, a tree of 2 groups); RMSNorm by warps at 2048 */
            {100, 768, DT_BF16, DT_F32}, {20, 2048, DT_BF16, DT_F32},
            /* D 2048: the backward's rows split over 2 warps; 150 rows: 19 blocks of 4 rows at once (a tree of 2
               groups), block 18's second rows only half there (a pair past the end passing the barriers) */
            {150, 2048, DT_BF16, DT_BF16}};
  for (size_t t = 0; t < sizeof nc / sizeof nc[0]; t++) {
    int64_t rows = nc[t].rows, d = nc[t].d, n = rows * d;
    DType xdt = nc[t].xdt, wdt = nc[t].wdt;
    float eps = 1e-5f;
    float *x = fvec(c, n, 2.0f), *w = fvec(c, d, 1.0f), *b = fvec(c, d, 0.5f), *dy = fvec(c, n, 1.0f);
    for (int64_t i = 0; i < n; i++) x[i] += 0.3f; /* a mean to remove */
    round_to(xdt, x, n);
    round_to(xdt, dy, n);
    round_to(wdt, w, d);
    round_to(wdt, b, d);
    KT tx = kt_new(c, xdt, n), tw = kt_new(c, wdt, d), tb = kt_new(c, wdt, d), tdy = kt_new(c, xdt, n);
    KT ty = kt_new(c, xdt, n), tdx = kt_new(c, xdt, n), tdw = kt_new(c, wdt, d), tdb = kt_new(c, wdt, d);
    KT ty2 = kt_new(c, xdt, n), tdx2 = kt_new(c, xdt, n), tdw2 = kt_new(c, wdt, d), tdx3 = kt_new(c, xdt, n),
       tdw3 = kt_new(c, wdt, d), tdb3 = kt_new(c, wdt, d), tdx4 = kt_new(c, xdt, n), tdw4 = kt_new(c, wdt, d);
    kt_put(c, tx, x);
    kt_put(c, tw, w);
    kt_put(c, tb, b);
    kt_put(c, tdy, dy);
    run(c, cuk_layernorm(c->k, P(c, ty), P(c, tx), xdt, P(c, tw), P(c, tb), wdt, rows, d, eps));
    const char *lb = cuk_layernorm_bwd(c->k, P(c, tdx), NULL, P(c, tdw), P(c, tdb), P(c, tx), xdt, P(c, tw), wdt, P(c, tdy),
                                       rows, d, eps);
    run(c, lb);
    run(c, cuk_rmsnorm(c->k, P(c, ty2), P(c, tx), xdt, P(c, tw), wdt, rows, d, eps));
    run(c, cuk_rmsnorm_bwd(c->k, P(c, tdx2), NULL, P(c, tdw2), P(c, tx), xdt, P(c, tw), wdt, P(c, tdy), rows, d, eps));
    /* determinism: the layernorm backward again into other buffers */
    run(c, cuk_layernorm_bwd(c->k, P(c, tdx3), NULL, P(c, tdw3), P(c, tdb3), P(c, tx), xdt, P(c, tw), wdt, P(c, tdy), rows,
                             d, eps));
    run(c, cuk_rmsnorm_bwd(c->k, P(c, tdx4), NULL, P(c, tdw4), P(c, tx), xdt, P(c, tw), wdt, P(c, tdy), rows, d, eps));
    /* with the residual gradient's carry (passes/fuse_normres.c): dx + carry into another buffer (tdx5, tdx7), and
       in place over the carry (tdx6, tdx8 hold it before) */
    float *cr = fvec(c, n, 1.5f);
    round_to(xdt, cr, n);
    KT tcr = kt_new(c, xdt, n), tdx5 = kt_new(c, xdt, n), tdx6 = kt_new(c, xdt, n), tdx7 = kt_new(c, xdt, n),
       tdx8 = kt_new(c, xdt, n), tdw5 = kt_new(c, wdt, d), tdb5 = kt_new(c, wdt, d), tdw7 = kt_new(c, wdt, d);
    kt_put(c, tcr, cr);
    kt_put(c, tdx6, cr);
    kt_put(c, tdx8, cr);
    run(c, cuk_layernorm_bwd(c->k, P(c, tdx5), P(c, tcr), P(c, tdw5), P(c, tdb5), P(c, tx), xdt, P(c, tw), wdt,
                             P(c, tdy), rows, d, eps));
    run(c, cuk_layernorm_bwd(c->k, P(c, tdx6), P(c, tdx6), P(c, tdw5), P(c, tdb5), P(c, tx), xdt, P(c, tw), wdt,
                             P(c, tdy), rows, d, eps));
    run(c, cuk_rmsnorm_bwd(c->k, P(c, tdx7), P(c, tcr), P(c, tdw7), P(c, tx), xdt, P(c, tw), wdt, P(c, tdy), rows, d,
                           eps));
    run(c, cuk_rmsnorm_bwd(c->k, P(c, tdx8), P(c, tdx8), P(c, tdw7), P(c, tx), xdt, P(c, tw), wdt, P(c, tdy), rows, d,
                           eps));
    if (!c->be) continue;
    float *ry = arena_alloc(c->a, (size_t)n * 4), *rdx = arena_alloc(c->a, (size_t)n * 4),
          *rdw = arena_alloc(c->a, (size_t)d * 4), *rdb = arena_alloc(c->a, (size_t)d * 4);
    const char *tag = arena_printf(c->a, "rows %lld d %lld x %s w %s", (long long)rows, (long long)d, dn(xdt), dn(wdt));
    double rt = xdt == DT_BF16 || wdt == DT_BF16 ? 1e-2 : 1e-5;
    double at = xdt == DT_BF16 || wdt == DT_BF16 ? 2e-2 : 1e-5;
    rt_layernorm_fwd_ref(rows, d, eps, x, w, b, ry, NULL, NULL);
    cmp(c, arena_printf(c->a, "layernorm %s", tag), kt_get(c, ty), ry, n, rt, at);
    rt_layernorm_bwd_ref(rows, d, eps, x, w, dy, rdx, rdw, rdb, 0.0f);
    cmp(c, arena_printf(c->a, "layernorm_bwd dx %s", tag), kt_get(c, tdx), rdx, n, rt, at * 2);
    cmp(c, arena_printf(c->a, "layernorm_bwd dw %s", tag), kt_get(c, tdw), rdw, d, rt, at * sqrt((double)rows));
    cmp(c, arena_printf(c->a, "layernorm_bwd db %s", tag), kt_get(c, tdb), rdb, d, rt, at * sqrt((double)rows));
    expect(c, arena_printf(c->a, "layernorm_bwd deterministic %s", tag),
           memcmp(kt_get(c, tdw), kt_get(c, tdw3), (size_t)d * 4) == 0 &&
               memcmp(kt_get(c, tdb), kt_get(c, tdb3), (size_t)d * 4) == 0 &&
               memcmp(kt_get(c, tdx), kt_get(c, tdx3), (size_t)n * 4) == 0);
    expect(c, arena_printf(c->a, "layernorm_bwd dx + carry: the bits of dx stored, then added %s", tag),
           same_sum(kt_get(c, tdx5), kt_get(c, tdx), cr, n, xdt));
    for (int64_t i = 0; i < n; i++) rdx[i] += cr[i];
    cmp(c, arena_printf(c->a, "layernorm_bwd dx + carry %s", tag), kt_get(c, tdx5), rdx, n, rt, at * 2);
    expect(c, arena_printf(c->a, "layernorm_bwd dx + carry in place, same bits; dw, db unchanged %s", tag),
           memcmp(kt_get(c, tdx5), kt_get(c, tdx6), (size_t)n * 4) == 0 &&
               memcmp(kt_get(c, tdw5), kt_get(c, tdw), (size_t)d * 4) == 0 &&
               memcmp(kt_get(c, tdb5), kt_get(c, tdb), (size_t)d * 4) == 0);
    rt_rmsnorm_fwd_ref(rows, d, eps, x, w, ry, NULL);
    cmp(c, arena_printf(c->a, "rmsnorm %s", tag), kt_get(c, ty2), ry, n, rt, at);
    rt_rmsnorm_bwd_ref(rows, d, eps, x, w, dy, rdx, rdw, 0.0f);
    cmp(c, arena_printf(c->a, "rmsnorm_bwd dx %s", tag), kt_get(c, tdx2), rdx, n, rt, at * 2);
    cmp(c, arena_printf(c->a, "rmsnorm_bwd dw %s", tag), kt_get(c, tdw2), rdw, d, rt, at * sqrt((double)rows));
    expect(c, arena_printf(c->a, "rmsnorm_bwd dx + carry: the bits of dx stored, then added %s", tag),
           same_sum(kt_get(c, tdx7), kt_get(c, tdx2), cr, n, xdt));
    for (int64_t i = 0; i < n; i++) rdx[i] += cr[i];
    cmp(c, arena_printf(c->a, "rmsnorm_bwd dx + carry %s", tag), kt_get(c, tdx7), rdx, n, rt, at * 2);
    expect(c, arena_printf(c->a, "rmsnorm_bwd dx + carry in place, same bits; dw unchanged %s", tag),
           memcmp(kt_get(c, tdx7), kt_get(c, tdx8), (size_t)n * 4) == 0 &&
               memcmp(kt_get(c, tdw7), kt_get(c, tdw2), (size_t)d * 4) == 0);
    expect(c, arena_printf(c->a, "rmsnorm_bwd deterministic %s", tag),
           memcmp(kt_get(c, tdw2), kt_get(c, tdw4), (size_t)d * 4) == 0 &&
               memcmp(kt_get(c, tdx2), kt_get(c, tdx4), (size_t)n * 4) == 0);
  }
}

/* ---- rope ------------------------------------------------------------------------------------------------- */

static void cases_rope(KC *c) {
  /* big: rope_vec's blocks of 16 rows, 3 vector pairs a thread, the last block part */
  for (int v = 0; v < 8; v++) {
    int big = v >> 2, bfv = v >> 1 & 1, inv = v & 1;
    DType dt = bfv ? DT_BF16 : DT_F32;
    int64_t B = 2, S = big ? 37 : 5, H = big ? 12 : 3, hd = big ? 64 : 16, n = B * S * H * hd, start = inv ? 1000 : 3;
    float *x = fvec(c, n, 1.0f);
    round_to(dt, x, n);
    KT tx = kt_new(c, dt, n), ty = kt_new(c, dt, n);
    kt_put(c, tx, x);
    run(c, cuk_rope(c->k, P(c, ty), P(c, tx), dt, B, S, H, hd, 10000.0, start, inv));
    run(c, cuk_rope(c->k, P(c, tx), P(c, tx), dt, B, S, H, hd, 10000.0, start, inv)); /* in place */
    if (!c->be) continue;
    float *ref = arena_alloc(c->a, (size_t)n * 4);
    rt_rope_ref(B, S, H, hd, 10000.0, start, inv, x, ref);
    cmp(c, arena_printf(c->a, "rope %s%s start %lld S %lld", dn(dt), inv ? " inverse" : "", (long long)start, (long long)S),
        kt_get(c, ty), ref, n, tol(dt), bfv ? 1e-2 : 1e-5);
    cmp(c, arena_printf(c->a, "rope in place %s%s", dn(dt), inv ? " inverse" : ""), kt_get(c, tx), ref, n, tol(dt),
        bfv ? 1e-2 : 1e-5);
  }
  { /* x and y one element past 16-byte alignment: rope_vec's element-by-element path */
    int64_t B = 1, S = 20, H = 2, hd = 16, n = B * S * H * hd;
    float *x = fvec(c, n + 1, 1.0f);
    round_to(DT_BF16, x, n + 1);
    KT tx = kt_new(c, DT_BF16, n + 1), ty = kt_new(c, DT_BF16, n + 1);
    kt_put(c, tx, x);
    run(c, cuk_rope(c->k, arena_printf(c->a, "(b%d + 2)", ty.id), arena_printf(c->a, "(b%d + 2)", tx.id), DT_BF16, B, S, H,
                    hd, 10000.0, 3, 0));
    if (c->be) {
      float *ref = arena_alloc(c->a, (size_t)n * 4);
      rt_rope_ref(B, S, H, hd, 10000.0, 3, 0, x + 1, ref);
      cmp(c, "rope bf16 misaligned", kt_get(c, ty) + 1, ref, n, 1e-2, 1e-2);
    }
  }
}

/* ---- cross-entropy ------------------------------------------------------------------------------------------ */

static void cases_ce(KC *c) {
  struct {
    int64_t n, V, len;
    DType dt;
  } cc[] = {{37, 100, 0, DT_F32}, {5, 50304, 50257, DT_F32}, {9, 333, 300, DT_BF16},
            /* bf16 rows of a multiple of 8: the 16-byte path, with a padded tail (len < V) and without */
            {6, 50304, 50257, DT_BF16}, {4, 264, 0, DT_BF16}};
  for (size_t t = 0; t < sizeof cc / sizeof cc[0]; t++) {
    int64_t n = cc[t].n, V = cc[t].V, len = cc[t].len, nv = len ? len : V;
    DType dt = cc[t].dt;
    float *lg = fvec(c, n * V, 4.0f);
    round_to(dt, lg, n * V);
    int32_t *tg = arena_alloc(c->a, (size_t)n * 4);
    for (int64_t i = 0; i < n; i++) tg[i] = (int32_t)((i * 7717 + 13) % nv);
    tg[1] = -1;
    tg[n - 1] = (int32_t)(nv - 1);
    float dloss = 0.75f;
    KT tl = kt_new(c, dt, n * V), tt = kt_new(c, DT_I32, n), tloss = kt_new(c, DT_F32, 1), tdl = kt_new(c, DT_F32, 1),
       tgr = kt_new(c, dt, n * V), tfl = kt_new(c, DT_F32, 1), tfl2 = kt_new(c, DT_F32, 1), tfg = kt_new(c, dt, n * V), tip = kt_new(c, dt, n * V);
    kt_put(c, tl, lg);
    kt_put(c, tip, lg);
    kt_put_i32(c, tt, tg);
    kt_put(c, tdl, &dloss);
    run(c, cuk_cross_entropy(c->k, P(c, tloss), P(c, tl), dt, P(c, tt), n, V, len));
    run(c, cuk_cross_entropy_bwd(c->k, P(c, tgr), P(c, tl), dt, P(c, tt), P(c, tdl), n, V, len));
    /* fused (passes/fuse_ce.c): into another buffer, and in place over the logits */
    run(c, cuk_cross_entropy_fused(c->k, P(c, tfl), P(c, tfg), P(c, tl), dt, P(c, tt), P(c, tdl), n, V, len));
    run(c, cuk_cross_entropy_fused(c->k, P(c, tfl2), P(c, tip), P(c, tip), dt, P(c, tt), P(c, tdl), n, V, len));
    if (!c->be) continue;
    float *rg = arena_alloc(c->a, (size_t)(n * V) * 4);
    float rl = rt_xent_fwd_bwd_ref(n, V, nv, lg, tg, dloss, rg);
    const char *tag = arena_printf(c->a, "n %lld V %lld len %lld %s", (long long)n, (long long)V, (long long)len, dn(dt));
    cmp(c, arena_printf(c->a, "cross_entropy %s", tag), kt_get(c, tloss), &rl, 1, 1e-5, 1e-6);
    cmp(c, arena_printf(c->a, "cross_entropy_bwd %s", tag), kt_get(c, tgr), rg, n * V, tol(dt),
        dt == DT_BF16 ? 1e-4 : 1e-7);
    for (int ip = 0; ip < 2; ip++) {
      const char *how = ip ? " in place" : "";
      cmp(c, arena_printf(c->a, "cross_entropy fused%s %s", how, tag), kt_get(c, ip ? tfl2 : tfl), &rl, 1, 1e-5, 1e-6);
      cmp(c, arena_printf(c->a, "cross_entropy_bwd fused%s %s", how, tag), kt_get(c, ip ? tip : tfg), rg, n * V, tol(dt),
          dt == DT_BF16 ? 1e-4 : 1e-7);
    }
    expect(c, arena_printf(c->a, "cross_entropy %s: no error flag", tag), dev_flag(c) == 0);
  }
  /* vocab-parallel parts: the second of two shards (logical columns 64..127), len 100 */
  for (int bfv = 0; bfv < 2; bfv++) {
    DType dt = bfv ? DT_BF16 : DT_F32;
    int64_t n = 7, V = 64, len = 100, lo = 64, nv = 36;
    float *lg = fvec(c, n * V, 3.0f), scale = 0.5f;
    round_to(dt, lg, n * V);
    int32_t tg[7] = {64, 99, -1, 3, 70, 0, 98};
    KT tl = kt_new(c, dt, n * V), tt = kt_new(c, DT_I32, n), tm = kt_new(c, DT_F32, n), tst = kt_new(c, DT_F32, 2 * n),
       tout = kt_new(c, DT_F32, 2), tsc = kt_new(c, DT_F32, 1), tg2 = kt_new(c, dt, n * V);
    kt_put(c, tl, lg);
    kt_put_i32(c, tt, tg);
    kt_put(c, tsc, &scale);
    run(c, cuk_ce_max(c->k, P(c, tm), P(c, tl), dt, n, V, len, "64"));
    run(c, cuk_ce_sums(c->k, P(c, tst), P(c, tl), dt, P(c, tt), P(c, tm), n, V, len, "64"));
    run(c, cuk_ce_loss(c->k, P(c, tout), P(c, tst), P(c, tm), P(c, tt), n, len));
    run(c, cuk_ce_grad(c->k, P(c, tg2), P(c, tl), dt, P(c, tt), P(c, tm), P(c, tst), P(c, tsc), n, V, len, "64"));
    if (!c->be) continue;
    float rm[7], rst[14], rout[2], *rg = arena_alloc(c->a, (size_t)(n * V) * 4);
    rt_ce_max_ref(n, V, nv, lg, rm);
    cmp(c, arena_printf(c->a, "ce_max %s", dn(dt)), kt_get(c, tm), rm, n, 0, 0);
    rt_ce_sums_ref(n, V, nv, lo, lg, tg, rm, rst);
    cmp(c, arena_printf(c->a, "ce_sums %s", dn(dt)), kt_get(c, tst), rst, 2 * n, 1e-5, 1e-6);
    rt_ce_loss_ref(n, len, rst, rm, tg, rout);
    cmp(c, arena_printf(c->a, "ce_loss %s", dn(dt)), kt_get(c, tout), rout, 2, 1e-5, 1e-5);
    rt_ce_grad_ref(n, V, nv, lo, lg, tg, rm, rst, scale, rg);
    cmp(c, arena_printf(c->a, "ce_grad %s", dn(dt)), kt_get(c, tg2), rg, n * V, tol(dt), bfv ? 1e-4 : 1e-7);
    expect(c, arena_printf(c->a, "ce parts %s: no error flag", dn(dt)), dev_flag(c) == 0);
  }
  { /* a target past len raises the flag */
    int32_t tg[2] = {5, 12};
    float st[4] = {1, 0, 1, 0}, m[2] = {0, 0};
    KT tt = kt_new(c, DT_I32, 2), tst = kt_new(c, DT_F32, 4), tm = kt_new(c, DT_F32, 2), to = kt_new(c, DT_F32, 2);
    kt_put_i32(c, tt, tg);
    kt_put(c, tst, st);
    kt_put(c, tm, m);
    run(c, cuk_ce_loss(c->k, P(c, to), P(c, tst), P(c, tm), P(c, tt), 2, 10));
    expect(c, "ce_loss: a target >= len sets the error flag", dev_flag(c) == CUK_ERR_TARGET);
  }
}

/* ---- reductions and optimizers ------------------------------------------------------------------------------ */

static void cases_reduce_opt(KC *c) {
  int64_t sizes[] = {10, 4097, 100003};
  for (int s = 0; s < 3; s++)
    for (int bfv = 0; bfv < 2; bfv++) {
      DType dt = bfv ? DT_BF16 : DT_F32;
      int64_t n = sizes[s];
      float *x = fvec(c, n, 1.0f);
      round_to(dt, x, n);
      KT tx = kt_new(c, dt, n), ts = kt_new(c, DT_F32, 1), tm = kt_new(c, DT_F32, 1), tq = kt_new(c, DT_F32, 1),
         ts2 = kt_new(c, DT_F32, 1);
      kt_put(c, tx, x);
      run(c, cuk_sum(c->k, P(c, ts), P(c, tx), dt, n));
      run(c, cuk_mean(c->k, P(c, tm), P(c, tx), dt, n));
      run(c, cuk_sumsq(c->k, P(c, tq), P(c, tx), dt, n));
      run(c, cuk_sum(c->k, P(c, ts2), P(c, tx), dt, n));
      if (!c->be) continue;
      float rs = (float)rt_sum_ref(n, x), rm = (float)(rt_sum_ref(n, x) / (double)n), rq = (float)rt_sumsq_ref(n, x);
      double at = 1e-6 * sqrt((double)n);
      const char *tag = arena_printf(c->a, "n %lld %s", (long long)n, dn(dt));
      cmp(c, arena_printf(c->a, "sum %s", tag), kt_get(c, ts), &rs, 1, 1e-5, at);
      cmp(c, arena_printf(c->a, "mean %s", tag), kt_get(c, tm), &rm, 1, 1e-5, at / (double)n);
      cmp(c, arena_printf(c->a, "sumsq %s", tag), kt_get(c, tq), &rq, 1, 1e-5, at);
      expect(c, arena_printf(c->a, "sum deterministic %s", tag), memcmp(kt_get(c, ts), kt_get(c, ts2), 4) == 0);
    }
  { /* the clip's sums of squares in one kernel (passes/fuse_sumsq.c): 35 tensors of both dtypes (two launches, 32 + 3)
       into elements of one y, every 9th element another piece's (left as it was); each sum the bits of cuk_sumsq's */
    enum { NT = 35, NY = NT + NT / 8 + 1 };
    static const int64_t lens[] = {1, 10, 300, 4097, 9000, 20000, 4096};
    CuSumsqIn in[NT];
    KT tx[NT], t1[NT], ty = kt_new(c, DT_F32, NY);
    float *x[NT], y0[NY], want[NY];
    for (int j = 0; j < NY; j++) y0[j] = want[j] = 7.0f;
    for (int i = 0; i < NT; i++) {
      DType dt = i % 3 == 1 ? DT_F32 : DT_BF16;
      int64_t n = lens[i % 7], at = i + i / 8;
      x[i] = fvec(c, n, i % 5 == 0 ? 4.0f : 1.0f);
      round_to(dt, x[i], n);
      tx[i] = kt_new(c, dt, n);
      t1[i] = kt_new(c, DT_F32, 1);
      kt_put(c, tx[i], x[i]);
      in[i] = (CuSumsqIn){P(c, tx[i]), dt, n, at};
      want[at] = (float)rt_sumsq_ref(n, x[i]);
    }
    kt_put(c, ty, y0);
    run(c, cuk_sumsq_multi(c->k, P(c, ty), NT, in));
    for (int i = 0; i < NT; i++) run(c, cuk_sumsq(c->k, P(c, t1[i]), P(c, tx[i]), in[i].xdt, in[i].n));
    if (c->be) {
      const float *got = kt_get(c, ty);
      cmp(c, "sumsq_multi (35 tensors, f32 and bf16)", got, want, NY, 1e-5, 1e-6 * sqrt(20000.0));
      int same = 1, kept = 1;
      for (int i = 0; i < NT; i++) same &= memcmp(&got[in[i].at], kt_get(c, t1[i]), 4) == 0;
      for (int j = 8; j < NY; j += 9) kept &= got[j] == 7.0f;
      expect(c, "sumsq_multi: each sum the bits of cuk_sumsq's", same);
      expect(c, "sumsq_multi: the other pieces' elements untouched", kept);
    }
    /* a non-finite gradient makes its sum non-finite (on_nonfinite skip's gate), the others' stay as they are */
    float *xn = fvec(c, 5000, 1.0f);
    xn[4321] = NAN;
    KT tn = kt_new(c, DT_F32, 5000), tyn = kt_new(c, DT_F32, 2);
    kt_put(c, tn, xn);
    CuSumsqIn nin[2] = {{P(c, tx[0]), in[0].xdt, in[0].n, 0}, {P(c, tn), DT_F32, 5000, 1}};
    run(c, cuk_sumsq_multi(c->k, P(c, tyn), 2, nin));
    if (c->be) {
      const float *got = kt_get(c, tyn);
      expect(c, "sumsq_multi: a NaN gradient's sum is NaN, the other's finite", isnan(got[1]) && isfinite(got[0]));
    }
  }
  /* bfv 2: a NaN gscale (on_nonfinite skip's gate, passes/optimizer.c) and a NaN gradient: adamw
     and sgd change nothing */
  for (int bfv = 0; bfv < 3; bfv++) {
    DType gdt = bfv == 1 ? DT_BF16 : DT_F32;
    int64_t n = 1001;
    float *p = fvec(c, n, 0.1f), *g = fvec(c, n, 1.0f), *m = fvec(c, n, 0.01f), *v = fvec(c, n, 0.001f);
    for (int64_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    round_to(gdt, g, n);
    float hyper[3] = {1e-3f, bfv == 2 ? NAN : 0.5f, 3.0f};
    if (bfv == 2) g[5] = NAN;
    KT tp = kt_new(c, DT_F32, n), tg = kt_new(c, gdt, n), tm = kt_new(c, DT_F32, n), tv = kt_new(c, DT_F32, n),
       th = kt_new(c, DT_F32, 3);
    KT sp = kt_new(c, DT_F32, n), sm = kt_new(c, DT_F32, n);
    /* the same update storing the parameter's bf16 copy too (passes/wshadow.c), over a copy of 3s (none left) */
    KT cp = kt_new(c, DT_F32, n), cm = kt_new(c, DT_F32, n), cv = kt_new(c, DT_F32, n), cc = kt_new(c, DT_BF16, n);
    float *c0 = arena_alloc(c->a, (size_t)n * 4);
    for (int64_t i = 0; i < n; i++) c0[i] = 3.0f;
    kt_put(c, cp, p);
    kt_put(c, cm, m);
    kt_put(c, cv, v);
    kt_put(c, cc, c0);
    kt_put(c, tp, p);
    kt_put(c, tg, g);
    kt_put(c, tm, m);
    kt_put(c, tv, v);
    kt_put(c, th, hyper);
    kt_put(c, sp, p);
    kt_put(c, sm, m);
    run(c, cuk_adamw(c->k, P(c, tp), P(c, tg), gdt, P(c, tm), P(c, tv), P(c, th), n, 0.9, 0.95, 1e-8, 0.1, NULL));
    run(c, cuk_adamw(c->k, P(c, cp), P(c, tg), gdt, P(c, cm), P(c, cv), P(c, th), n, 0.9, 0.95, 1e-8, 0.1, P(c, cc)));
    run(c, cuk_sgd(c->k, P(c, sp), P(c, tg), gdt, P(c, sm), P(c, th), n, 0.9, 0.01, NULL));
    KT csp = kt_new(c, DT_F32, n), csm = kt_new(c, DT_F32, n), csc = kt_new(c, DT_BF16, n);
    kt_put(c, csp, p);
    kt_put(c, csm, m);
    kt_put(c, csc, c0);
    run(c, cuk_sgd(c->k, P(c, csp), P(c, tg), gdt, P(c, csm), P(c, th), n, 0.9, 0.01, P(c, csc)));
    if (!c->be) continue;
    {
      size_t b = (size_t)n * 4;
      const float *up = kt_get(c, cp);
      const float *got = kt_get(c, cc);
      bool same = true;
      /* (a skipped step stores p's unchanged value: under ZeRO 1 / 2 the copy is a shard an all-gather
       * reads next, passes/zero_master.c) */
      for (int64_t i = 0; i < n; i++) same &= got[i] == bf(up[i]) && (bfv != 2 || up[i] == p[i]);
      expect(c, arena_printf(c->a, "adamw with its bf16 copy (g %s): p, m, v as without it, the copy p rounded%s",
                             dn(gdt), bfv == 2 ? " (a skipped step: p's own)" : ""),
             same && !memcmp(up, kt_get(c, tp), b) && !memcmp(kt_get(c, cm), kt_get(c, tm), b) &&
                 !memcmp(kt_get(c, cv), kt_get(c, tv), b));
      const float *sup = kt_get(c, csp), *sgot = kt_get(c, csc);
      same = true;
      for (int64_t i = 0; i < n; i++) same &= sgot[i] == bf(sup[i]) && (bfv != 2 || sup[i] == p[i]);
      expect(c, arena_printf(c->a, "sgd with its bf16 copy (g %s): p, m as without it, the copy p rounded%s", dn(gdt),
                             bfv == 2 ? " (a skipped step: p's own)" : ""),
             same && !memcmp(sup, kt_get(c, sp), b) && !memcmp(kt_get(c, csm), kt_get(c, sm), b));
    }
    if (bfv == 2) {
      size_t b = (size_t)n * 4;
      expect(c, "adamw, gscale NaN: p, m, v unchanged",
             !memcmp(kt_get(c, tp), p, b) && !memcmp(kt_get(c, tm), m, b) && !memcmp(kt_get(c, tv), v, b));
      expect(c, "sgd, gscale NaN: p, m unchanged", !memcmp(kt_get(c, sp), p, b) && !memcmp(kt_get(c, sm), m, b));
      continue;
    }
    float *rp = arena_alloc(c->a, (size_t)n * 4), *rm = arena_alloc(c->a, (size_t)n * 4),
          *rv = arena_alloc(c->a, (size_t)n * 4);
    memcpy(rp, p, (size_t)n * 4);
    memcpy(rm, m, (size_t)n * 4);
    memcpy(rv, v, (size_t)n * 4);
    rt_adamw_ref(n, rp, g, rm, rv, hyper[0], hyper[1], hyper[2], 0.9f, 0.95f, 1e-8f, 0.1f);
    cmp(c, arena_printf(c->a, "adamw p (g %s)", dn(gdt)), kt_get(c, tp), rp, n, 1e-5, 1e-7);
    cmp(c, arena_printf(c->a, "adamw m (g %s)", dn(gdt)), kt_get(c, tm), rm, n, 1e-5, 1e-8);
    cmp(c, arena_printf(c->a, "adamw v (g %s)", dn(gdt)), kt_get(c, tv), rv, n, 1e-5, 1e-9);
    memcpy(rp, p, (size_t)n * 4);
    memcpy(rm, m, (size_t)n * 4);
    rt_sgd_ref(n, rp, g, rm, hyper[0], hyper[1], 0.9f, 0.01f);
    cmp(c, arena_printf(c->a, "sgd p (g %s)", dn(gdt)), kt_get(c, sp), rp, n, 1e-5, 1e-8);
    cmp(c, arena_printf(c->a, "sgd m (g %s)", dn(gdt)), kt_get(c, sm), rm, n, 1e-5, 1e-7);
  }
}

/* ---- driver ------------------------------------------------------------------------------------------------------ */

static int bytes_variants = 1;
void kc_bytes_variants(int on) { bytes_variants = on; }

/* A group of cases, with a progress line when it runs (pass 1): the seconds since kc_run_all began and the checks so
 * far, so a run cut short shows where it was (the callers' stdout is line-buffered). */
static void group(KC *c, const char *name, void (*cases)(KC *)) {
  const char *only = getenv("SHARDK_KC_GROUP"); /* one group alone (a name's part; both passes read it) */
  if (only && *only && !strstr(name, only)) return;
  if (c->be) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    printf("== %s (at %.1f s, %d checks so far)\n", name,
           (double)(t.tv_sec - c->t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - c->t0.tv_nsec), c->checks);
  }
  cases(c);
}

static void all_cases(KC *c) {
  group(c, "elementwise", cases_elementwise);
  group(c, "movement", cases_movement);
  group(c, "embed", kc_cases_embed);
  group(c, "norms", cases_norms);
  group(c, "rope", cases_rope);
  group(c, "cross-entropy", cases_ce);
  group(c, "reductions and optimizers", cases_reduce_opt);
  group(c, "attention", kc_cases_attention);
  group(c, "ring attention", kc_cases_ring);
  for (int v = 0; v < CUK_NVARIANTS && bytes_variants; v++) { /* the bytes-bound kernels' other variants (cuk_set_variant) */
    if (v == CUK_VAR_DEFAULT) continue;
    cuk_set_variant(c->k, v);
    c->variant = v;
    group(c, arena_printf(c->a, "variant %s: movement", cuk_variant_names[v]), cases_movement);
    group(c, arena_printf(c->a, "variant %s: embed", cuk_variant_names[v]), kc_cases_embed);
    group(c, arena_printf(c->a, "variant %s: norms", cuk_variant_names[v]), cases_norms);
    group(c, arena_printf(c->a, "variant %s: rope", cuk_variant_names[v]), cases_rope);
  }
  cuk_set_variant(c->k, CUK_VAR_DEFAULT);
  c->variant = CUK_VAR_DEFAULT;
}

const char *kc_emit_all(Arena *a, int64_t *workspace, int *nkernels) {
  KC c = {0};
  c.a = a;
  c.k = cuk_new(a);
  c.rng = 12345;
  all_cases(&c);
  *workspace = cuk_workspace(c.k);
  *nkernels = cuk_count(c.k);
  return cuk_source(c.k);
}

int kc_run_all(const KBackend *be, int64_t workspace) {
  Arena a;
  arena_init(&a);
  KC c = {0};
  c.be = be;
  c.a = &a;
  c.k = cuk_new(&a);
  c.rng = 12345;
  c.ws_bytes = workspace;
  c.ws = be->alloc((size_t)workspace);
  clock_gettime(CLOCK_MONOTONIC, &c.t0);
  all_cases(&c);
  { /* every one-launch reduction left its arrival counters at 0 (the next kernel's start) */
    int cnt[CUK_MAX_COUNTERS], zero = 1;
    be->d2h(cnt, c.ws + CUK_WS_COUNTERS, sizeof cnt);
    for (int i = 0; i < CUK_MAX_COUNTERS; i++) zero &= cnt[i] == 0;
    expect(&c, "the arrival counters are back at 0", zero);
  }
  for (int i = 0; i < c.nbuf; i++) be->free(c.buf[i]);
  be->free(c.ws);
  printf("%d of %d checks failed\n", c.fails, c.checks);
  arena_free(&a);
  return c.fails;
}
