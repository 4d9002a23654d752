/* tests/codegen/test_llvm_kernels.c — the CPU kernels LLVM builds (codegen/llvm_kernels.c, the
 * --cpu-kernels llvm backend) against the hand-written C kernels they replace (runtime/ops:
 * rt_binary_f32, rt_unary_f32, rt_gelu_bwd_f32, rt_silu_bwd_f32, rt_broadcast_to_f32,
 * rt_adamw_f32, rt_layernorm_f32, rt_rmsnorm_f32 and their backward rt_layernorm_bwd_f32,
 * rt_rmsnorm_bwd_f32, rt_cross_entropy_f32 and rt_cross_entropy_bwd_f32), which stay the reference.
 *
 * The kernels are compiled through the same path a trainer's are (llk_compile: IR, default<O3>,
 * an object file for the host CPU), linked into a shared object and loaded. Shapes are odd on
 * purpose (1, 7, 17, 37, 100003 elements: vector bodies and scalar tails, rows shorter than a
 * vector), broadcasts of a bias (row), a per-row value (column) and a scalar, updates in place
 * (the output is the input), several stored outputs, and item ranges split at odd points, as
 * rt_par_for's threads split them.
 *
 * Tolerance (f32): |llvm - c| <= 4e-6 (1 + |c|) per element. The generated e^x, tanh and sigmoid
 * are the runtime's polynomial (fastmath.h, relative error < 2e-7) where rt_unary_f32 calls libm,
 * and the two compilers contract a*b+c into FMAs differently: a few ulps per op, a chain of a
 * handful of ops stays well inside 4e-6. The test fails (exit 1) on any element beyond it.
 */
#include <dlfcn.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llvm_kernels.h"
#include "ops/ops.h"
#include "ops/par.h"
#include "ops/prims.h"
#include "kernels/ref.h"

#define TOL 4e-6
#define MAXN 100003

static int failures;
static float *buf(int64_t n) {
  float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
  if (!p) abort();
  return p;
}
static unsigned rng = 12345;
static float rnd(float lo, float hi) {
  rng = rng * 1103515245u + 12345u;
  return lo + (hi - lo) * (float)((rng >> 8) & 0xffff) / 65535.0f;
}
static void fill(float *p, int64_t n, float lo, float hi) {
  for (int64_t i = 0; i < n; i++) p[i] = rnd(lo, hi);
}

static void check(const char *what, const float *got, const float *want, int64_t n) {
  double worst = 0;
  int64_t bad = 0, at = -1;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - want[i]), lim = TOL * (1 + fabs(want[i]));
    if (!(d <= lim)) bad++, at = at < 0 ? i : at;
    if (d / (1 + fabs(want[i])) > worst) worst = d / (1 + fabs(want[i]));
  }
  printf("%-44s n=%-7lld worst %.2e%s\n", what, (long long)n, worst, bad ? "  FAIL" : "");
  if (bad) {
    printf("  %lld elements beyond %.0e; first at %lld: llvm %.9g, c %.9g\n", (long long)bad, TOL, (long long)at,
           got[at], want[at]);
    failures++;
  }
}

/* ---- the reference: a chain run node by node on the C kernels ---- */

typedef struct {
  RtShape out;              /* the chain's output shape */
  RtShape in[LLK_MAX_EW];   /* its inputs' shapes */
  float lo[LLK_MAX_EW], hi[LLK_MAX_EW]; /* their values' range */
} Shapes;

static int64_t numel(const RtShape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n *= s->dim[i];
  return n;
}

static void reference(const LlkEw *e, const Shapes *s, float **in, float **val) {
  int64_t n = numel(&s->out);
  for (int i = 0; i < e->nops; i++) {
    const LlkOp *o = &e->ops[i];
    const float *a = NULL, *b = NULL;
    const RtShape *as = &s->out, *bs = &s->out;
    if (o->in[0] >= 0) a = val[o->in[0]];
    else a = in[-1 - o->in[0]], as = &s->in[-1 - o->in[0]];
    if (ir_ops[o->op].nin > 1) {
      if (o->in[1] >= 0) b = val[o->in[1]];
      else b = in[-1 - o->in[1]], bs = &s->in[-1 - o->in[1]];
    }
    static const int bin[] = {[OP_ADD] = RT_ADD, [OP_SUB] = RT_SUB, [OP_MUL] = RT_MUL,
                              [OP_DIV] = RT_DIV, [OP_MAXIMUM] = RT_MAXIMUM, [OP_MINIMUM] = RT_MINIMUM};
    static const int un[] = {[OP_NEG] = RT_NEG, [OP_SCALE] = RT_SCALE, [OP_ADD_SCALAR] = RT_ADD_SCALAR,
                             [OP_EXP] = RT_EXP, [OP_LOG] = RT_LOG, [OP_SQRT] = RT_SQRT, [OP_RSQRT] = RT_RSQRT,
                             [OP_TANH] = RT_TANH, [OP_SIGMOID] = RT_SIGMOID, [OP_RELU] = RT_RELU,
                             [OP_GELU] = RT_GELU, [OP_SILU] = RT_SILU};
    switch (o->op) {
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_MAXIMUM: case OP_MINIMUM:
      rt_binary_f32(bin[o->op], val[i], &s->out, a, as, b, bs);
      break;
    case OP_GELU_BWD: rt_gelu_bwd_f32(val[i], a, b, n); break;
    case OP_SILU_BWD: rt_silu_bwd_f32(val[i], a, b, n); break;
    case OP_CONST: rt_fill_f32(val[i], n, (float)o->scalar); break;
    case OP_BROADCAST_TO: rt_broadcast_to_f32(val[i], &s->out, a, as); break;
    case OP_CAST: memcpy(val[i], a, (size_t)n * sizeof(float)); break;
    default: rt_unary_f32(un[o->op], val[i], a, n, (float)o->scalar); break;
    }
  }
}

/* ---- cases ---- */

typedef struct {
  const char *what;
  LlkEw e;
  Shapes s;
  int inplace; /* > 0: output 0 is input inplace-1 */
  const char *name; /* the kernel's symbol, once built */
} Case;

static Case cases[128];
static int ncases;

static RtShape shp(int rank, int64_t d0, int64_t d1, int64_t d2) {
  RtShape s = {rank, {d0, d1, d2}};
  return s;
}

/* One op over flat inputs of n elements. */
static void unary_case(OpKind op, int64_t n, float lo, float hi, double scalar) {
  Case *c = &cases[ncases++];
  c->what = ir_ops[op].name;
  c->e = (LlkEw){.nin = 1, .idx = {LLK_FULL}, .nops = 1, .nout = 1};
  c->e.ops[0] = (LlkOp){op, {-1, 0}, scalar};
  c->s.out = shp(1, n, 0, 0), c->s.in[0] = c->s.out, c->s.lo[0] = lo, c->s.hi[0] = hi;
}

static void binary_case(OpKind op, int64_t n) {
  Case *c = &cases[ncases++];
  c->what = ir_ops[op].name;
  c->e = (LlkEw){.nin = 2, .idx = {LLK_FULL, LLK_FULL}, .nops = 1, .nout = 1};
  c->e.ops[0] = (LlkOp){op, {-1, -2}, 0};
  c->s.out = shp(1, n, 0, 0);
  for (int i = 0; i < 2; i++) c->s.in[i] = c->s.out, c->s.lo[i] = op == OP_DIV && i ? 0.5f : -3, c->s.hi[i] = 3;
}

static void add_cases(void) {
  static const int64_t ns[] = {1, 7, 17, 100003};
  for (int k = 0; k < 4; k++) {
    int64_t n = ns[k];
    unary_case(OP_NEG, n, -3, 3, 0), unary_case(OP_SCALE, n, -3, 3, -0.37), unary_case(OP_ADD_SCALAR, n, -3, 3, 1.5);
    unary_case(OP_EXP, n, -20, 20, 0), unary_case(OP_LOG, n, 0.01f, 50, 0), unary_case(OP_SQRT, n, 0, 50, 0);
    unary_case(OP_RSQRT, n, 0.01f, 50, 0), unary_case(OP_TANH, n, -6, 6, 0), unary_case(OP_SIGMOID, n, -10, 10, 0);
    unary_case(OP_RELU, n, -3, 3, 0), unary_case(OP_GELU, n, -6, 6, 0), unary_case(OP_SILU, n, -8, 8, 0);
    for (OpKind op = OP_ADD; op <= OP_MINIMUM; op++) binary_case(op, n);
    Case *c = &cases[ncases++]; /* gelu_bwd, silu_bwd: (x, dy) */
    c->what = "gelu_bwd, silu_bwd (two outputs)";
    c->e = (LlkEw){.nin = 2, .idx = {LLK_FULL, LLK_FULL}, .nops = 2, .nout = 2, .out_op = {0, 1}};
    c->e.ops[0] = (LlkOp){OP_GELU_BWD, {-1, -2}, 0}, c->e.ops[1] = (LlkOp){OP_SILU_BWD, {-1, -2}, 0};
    c->s.out = shp(1, n, 0, 0);
    /* x in [-5, 5], dy in [-1, 1]: gelu'(x) itself carries ~6e-7 absolute f32 rounding error
     * (tanh near +-1, times x (1 - t^2) du), which dy scales; two correct f32 versions differ by twice that */
    for (int i = 0; i < 2; i++) c->s.in[i] = c->s.out, c->s.lo[i] = i ? -1 : -5, c->s.hi[i] = i ? 1 : 5;
  }
  /* GPT-2's MLP: h = gelu(x + bias) over rows of 37 (a bias: a row input), 15 rows */
  Case *c = &cases[ncases++];
  c->what = "gelu(x + bias[C]) C=37";
  c->e = (LlkEw){.nin = 2, .idx = {LLK_FULL, LLK_ROW}, .nops = 2, .nout = 1, .out_op = {1}, .inner = 37};
  c->e.ops[0] = (LlkOp){OP_ADD, {-1, -2}, 0}, c->e.ops[1] = (LlkOp){OP_GELU, {0, 0}, 0};
  c->s.out = shp(3, 5, 3, 37), c->s.in[0] = c->s.out, c->s.in[1] = shp(1, 37, 0, 0);
  for (int i = 0; i < 2; i++) c->s.lo[i] = -4, c->s.hi[i] = 4;
  /* a residual update in place: y = y + scale(x) + bias */
  c = &cases[ncases++];
  c->what = "y += 0.5 x + bias[C], in place, C=1000";
  c->e = (LlkEw){.nin = 3, .idx = {LLK_FULL, LLK_FULL, LLK_ROW}, .nops = 3, .nout = 1, .out_op = {2}, .inner = 1000};
  c->e.ops[0] = (LlkOp){OP_SCALE, {-2, 0}, 0.5}, c->e.ops[1] = (LlkOp){OP_ADD, {-1, 0}, 0};
  c->e.ops[2] = (LlkOp){OP_ADD, {1, -3}, 0};
  c->s.out = shp(2, 51, 1000, 0), c->s.in[0] = c->s.out, c->s.in[1] = c->s.out, c->s.in[2] = shp(1, 1000, 0, 0);
  for (int i = 0; i < 3; i++) c->s.lo[i] = -2, c->s.hi[i] = 2;
  c->inplace = 1;
  /* a per-row value (a column input), a scalar, a constant, a broadcast_to, a stored intermediate */
  c = &cases[ncases++];
  c->what = "((x - m[r]) * s + 2) * -1; rows of 33";
  c->e = (LlkEw){.nin = 3, .idx = {LLK_FULL, LLK_COL, LLK_SCALAR}, .nops = 6, .nout = 2, .out_op = {3, 5}, .inner = 33};
  c->e.ops[0] = (LlkOp){OP_BROADCAST_TO, {-2, 0}, 0}, c->e.ops[1] = (LlkOp){OP_SUB, {-1, 0}, 0};
  c->e.ops[2] = (LlkOp){OP_MUL, {1, -3}, 0}, c->e.ops[3] = (LlkOp){OP_ADD_SCALAR, {2, 0}, 2.0}, c->e.ops[4] = (LlkOp){OP_CONST, {0, 0}, -1.0};
  c->e.ops[5] = (LlkOp){OP_MUL, {3, 4}, 0};
  c->s.out = shp(3, 4, 6, 33), c->s.in[0] = c->s.out, c->s.in[1] = shp(3, 4, 6, 1), c->s.in[2] = shp(1, 1, 0, 0);
  for (int i = 0; i < 3; i++) c->s.lo[i] = -2, c->s.hi[i] = 2;
  /* a scalar on the left of a flat chain, a member read twice */
  c = &cases[ncases++];
  c->what = "t = s / x; t * t - max(t, x)";
  c->e = (LlkEw){.nin = 2, .idx = {LLK_SCALAR, LLK_FULL}, .nops = 4, .nout = 1, .out_op = {3}};
  c->e.ops[0] = (LlkOp){OP_DIV, {-1, -2}, 0}, c->e.ops[1] = (LlkOp){OP_MUL, {0, 0}, 0};
  c->e.ops[2] = (LlkOp){OP_MAXIMUM, {0, -2}, 0}, c->e.ops[3] = (LlkOp){OP_SUB, {1, 2}, 0};
  c->s.out = shp(2, 3, 333, 0), c->s.in[0] = shp(0, 0, 0, 0), c->s.in[1] = c->s.out;
  c->s.lo[0] = 0.5f, c->s.hi[0] = 2, c->s.lo[1] = 0.5f, c->s.hi[1] = 3;
}

typedef void (*Kern)(int64_t, int64_t, void **);

/* The kernel over items [0, items): split at odd points (one call per piece), or through rt_par_for. */
static void run(Kern k, int64_t items, void **p, int how) {
  if (how == 0) {
    k(0, items, p);
  } else if (how == 1) {
    int64_t a = items / 3, b = a + (items - a) / 2 + 1;
    if (b > items) b = items;
    k(0, a, p), k(a, b, p), k(b, items, p);
  } else {
    omp_set_num_threads(3);
    rt_par_for(k, items, 1 << 30, p);
  }
}

static void test_case(void *so, const Case *c, int how) {
  Kern k = (Kern)dlsym(so, c->name);
  if (!k) {
    printf("FAIL %s: no symbol %s\n", c->what, c->name);
    failures++;
    return;
  }
  const LlkEw *e = &c->e;
  int64_t n = numel(&c->s.out);
  float *in[LLK_MAX_EW], *val[LLK_MAX_EW], *out[LLK_MAX_EW];
  for (int i = 0; i < e->nin; i++) {
    int64_t ni = numel(&c->s.in[i]);
    in[i] = buf(ni);
    fill(in[i], ni, c->s.lo[i], c->s.hi[i]);
  }
  for (int i = 0; i < e->nops; i++) val[i] = buf(n);
  reference(e, &c->s, in, val);
  void *p[2 * LLK_MAX_EW];
  for (int i = 0; i < e->nin; i++) p[i] = in[i];
  for (int o = 0; o < e->nout; o++) {
    out[o] = c->inplace && o == 0 ? in[c->inplace - 1] : buf(n);
    p[e->nin + o] = out[o];
  }
  run(k, e->inner ? n / e->inner : n, p, how);
  static const char *hows[] = {"", " (split)", " (rt_par_for)"};
  for (int o = 0; o < e->nout; o++) {
    char what[128];
    snprintf(what, sizeof what, "%s%s%s", c->what, e->nout > 1 ? (o ? " [out 1]" : " [out 0]") : "", hows[how]);
    check(what, out[o], val[e->out_op[o]], n);
  }
  for (int o = 0; o < e->nout; o++)
    if (!(c->inplace && o == 0)) free(out[o]);
  for (int i = 0; i < e->nin; i++) free(in[i]);
  for (int i = 0; i < e->nops; i++) free(val[i]);
}

static void test_adamw(void *so, const char *name) {
  Kern k = (Kern)dlsym(so, name);
  int64_t n = MAXN;
  float *p = buf(n), *g = buf(n), *m = buf(n), *v = buf(n), *p2 = buf(n), *m2 = buf(n), *v2 = buf(n);
  fill(p, n, -1, 1), fill(g, n, -0.1f, 0.1f), fill(m, n, -0.01f, 0.01f), fill(v, n, 0, 1e-4f);
  memcpy(p2, p, (size_t)n * 4), memcpy(m2, m, (size_t)n * 4), memcpy(v2, v, (size_t)n * 4);
  float hyper[3] = {3e-4f, 0.5f, 7};
  for (int step = 0; step < 3; step++, hyper[2]++) {
    rt_adamw_f32(p2, g, m2, v2, hyper, n, 0.9f, 0.95f, 1e-8f, 0.1f);
    void *args[] = {p, g, m, v, hyper};
    run(k, n, args, step % 3);
  }
  check("adamw p (3 steps)", p, p2, n);
  check("adamw m", m, m2, n);
  check("adamw v", v, v2, n);
  /* gscale NaN or Inf (on_nonfinite skip's gate): the generated kernel changes nothing, as the C one */
  const float gates[2] = {NAN, INFINITY};
  for (int k2 = 0; k2 < 2; k2++) {
    g[3] = NAN, hyper[1] = gates[k2];
    memcpy(p2, p, (size_t)n * 4), memcpy(m2, m, (size_t)n * 4), memcpy(v2, v, (size_t)n * 4);
    void *args[] = {p, g, m, v, hyper};
    run(k, n, args, k2);
    int same = !memcmp(p, p2, (size_t)n * 4) && !memcmp(m, m2, (size_t)n * 4) && !memcmp(v, v2, (size_t)n * 4);
    printf("%-44s n=%-7lld %s\n", k2 ? "adamw, gscale Inf: p, m, v unchanged" : "adamw, gscale NaN: p, m, v unchanged",
           (long long)n, same ? "yes" : "no  FAIL");
    failures += !same;
  }
  free(p), free(g), free(m), free(v), free(p2), free(m2), free(v2);
}

static void test_norm(void *so, const char *name, const LlkNorm *n, int64_t rows, int inplace) {
  Kern k = (Kern)dlsym(so, name);
  int64_t cnt = rows * n->d;
  float *x = buf(cnt), *w = buf(n->d), *b = buf(n->d), *y = buf(cnt), *want = buf(cnt);
  fill(x, cnt, -3, 5), fill(w, n->d, -2, 2), fill(b, n->d, -1, 1);
  if (n->rms) rt_rmsnorm_f32(want, x, w, rows, n->d, n->eps);
  else rt_layernorm_f32(want, x, w, b, rows, n->d, n->eps);
  float *out = inplace ? x : y;
  void *p3[] = {x, w, out}, *p4[] = {x, w, b, out};
  for (int how = 0; how < 3; how++) {
    if (how) { /* in place, the last run overwrote x: new input, new reference */
      fill(x, cnt, -3, 5);
      if (n->rms) rt_rmsnorm_f32(want, x, w, rows, n->d, n->eps);
      else rt_layernorm_f32(want, x, w, b, rows, n->d, n->eps);
    }
    run(k, rows, n->rms ? p3 : p4, how);
    char what[128];
    snprintf(what, sizeof what, "%s d=%lld%s%s", n->rms ? "rmsnorm" : "layernorm", (long long)n->d,
             inplace ? " in place" : "", how == 1 ? " (split)" : how == 2 ? " (rt_par_for)" : "");
    check(what, out, want, cnt);
  }
  free(x), free(w), free(b), free(y), free(want);
}

/* A norm backward's three kernels (stats, param, dx) against rt_layernorm_bwd_f32 / rt_rmsnorm_bwd_f32:
 * dx, dw and db; dx written over dy when inplace. LayerNorm of rows of one element is the exception
 * for dx: its exact dx is 0 (g - mean(g) = 0) and the C kernel's FMA of dy w into g - mean(g) leaves
 * a rounding residue times rstd = 1/sqrt(eps), ~6e-6, so dx is checked against the naive double
 * reference (runtime/kernels/ref.c) there. */
static void test_norm_bwd(void *so, const char *names[3], const LlkNormBwd *n, int inplace, int how) {
  Kern ks[3];
  for (int i = 0; i < 3; i++) ks[i] = (Kern)dlsym(so, names[i]);
  int64_t rows = n->rows, d = n->d, cnt = rows * d;
  float *x = buf(cnt), *w = buf(d), *dy = buf(cnt), *dx = buf(cnt), *dw = buf(d), *db = buf(d);
  float *rdx = buf(cnt), *rdw = buf(d), *rdb = buf(d), *st = buf(2 * rows);
  void *ws = malloc(rt_norm_ws_bytes(rows, d));
  fill(x, cnt, -3, 5), fill(w, d, -2, 2), fill(dy, cnt, -1, 1);
  if (n->rms) rt_rmsnorm_bwd_f32(rdx, rdw, x, w, dy, rows, d, n->eps, ws);
  else rt_layernorm_bwd_f32(rdx, rdw, rdb, x, w, dy, rows, d, n->eps, ws);
  if (!n->rms && d == 1) { /* dw, db from the C kernel as everywhere; dx from the double reference */
    float *t = buf(cnt), *tw = buf(d), *tb = buf(d);
    rt_layernorm_bwd_ref(rows, d, n->eps, x, w, dy, t, tw, tb, 0.0f);
    memcpy(rdx, t, (size_t)cnt * sizeof(float));
    free(t), free(tw), free(tb);
  }
  float *out = inplace ? dy : dx;
  void *p0[] = {x, st, st + rows}, *p1[] = {x, dy, st, st + rows, dw, db}, *p2[] = {x, w, dy, st, st + rows, out};
  run(ks[0], rows, p0, how), run(ks[1], d, p1, how), run(ks[2], rows, p2, how);
  char what[128];
  const char *kind = n->rms ? "rmsnorm_bwd" : "layernorm_bwd", *hw = how == 1 ? " (split)" : how == 2 ? " (rt_par_for)" : "";
  snprintf(what, sizeof what, "%s rows=%lld d=%lld dx%s%s%s", kind, (long long)rows, (long long)d, inplace ? " over dy" : "",
           hw, !n->rms && d == 1 ? " (vs double ref)" : "");
  check(what, out, rdx, cnt);
  snprintf(what, sizeof what, "%s rows=%lld d=%lld dw%s", kind, (long long)rows, (long long)d, hw);
  check(what, dw, rdw, d);
  if (!n->rms) {
    snprintf(what, sizeof what, "%s rows=%lld d=%lld db%s", kind, (long long)rows, (long long)d, hw);
    check(what, db, rdb, d);
  }
  free(x), free(w), free(dy), free(dx), free(dw), free(db), free(rdx), free(rdw), free(rdb), free(st), free(ws);
}

/* |got - want| <= rel |want| + abs per element (dlogits: tiny probabilities, where a tolerance on
 * 1 + |want| would pass anything). */
static void check_rel(const char *what, const float *got, const float *want, int64_t n, double rel, double abs_) {
  int64_t bad = 0, at = -1;
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - want[i]), lim = rel * fabs(want[i]) + abs_;
    if (!(d <= lim)) bad++, at = at < 0 ? i : at;
    if (d / lim > worst) worst = d / lim;
  }
  printf("%-44s n=%-7lld worst %.2f of the tolerance%s\n", what, (long long)n, worst, bad ? "  FAIL" : "");
  if (bad) {
    printf("  %lld elements beyond it; first at %lld: llvm %.9g, c %.9g\n", (long long)bad, (long long)at, got[at], want[at]);
    failures++;
  }
}

/* Cross-entropy rows (LlkXent) against runtime/kernels/xent.c (rt_cross_entropy_f32, _bwd_f32 and
 * _fused_f32): the loss within 4e-6 relative, dlogits within 2e-5 relative + 2e-7 g (g = dloss /
 * count: about an ulp of the onehot's 1 - p). Rows with an ignored target (-1), len < V (padded
 * vocabulary), in place (dlogits over the logits), the rows split at odd points and through
 * rt_par_for, and the runtime's entry point rt_xent_rows_f32. */
static void test_xent(void *so, const char *fwd_name, const char *bwd_name, int64_t rows, int64_t V, int64_t len) {
  Kern kf = (Kern)dlsym(so, fwd_name), kb = (Kern)dlsym(so, bwd_name);
  int64_t cnt = rows * V;
  float *x = buf(cnt), *d = buf(cnt), *want = buf(cnt), lossc, lossb, dloss = 0.75f;
  int32_t *t = malloc((size_t)rows * sizeof *t);
  double *rowloss = malloc((size_t)rows * sizeof *rowloss);
  void *ws = malloc(rt_cross_entropy_ws_bytes(rows));
  fill(x, cnt, -8, 8);
  int64_t count = 0;
  for (int64_t r = 0; r < rows; r++) {
    t[r] = r % 5 == 3 ? -1 : (int32_t)((r * 7919) % len);
    count += t[r] >= 0;
  }
  float g = count ? dloss / (float)count : 0.0f;
  rt_cross_entropy_f32(&lossc, x, t, rows, V, len, ws);
  rt_cross_entropy_bwd_f32(want, x, t, &dloss, rows, V, len, ws);
  char what[128];
  for (int how = 0; how < 3; how++) { /* the kernels called directly: loss from their rows, as the runtime sums */
    const char *hw = how == 1 ? " (split)" : how == 2 ? " (rt_par_for)" : "";
    for (int bwd = 0; bwd < 2; bwd++) {
      float gg = bwd ? g : 0.0f;
      void *p[] = {x, t, rowloss, d, &gg};
      memset(d, 0x7f, (size_t)cnt * sizeof(float)); /* every element must be written */
      run(bwd ? kb : kf, rows, p, how);
      double tot = 0;
      for (int64_t r = 0; r < rows; r++) tot += rowloss[r];
      float loss = count ? (float)(tot / (double)count) : 0.0f;
      snprintf(what, sizeof what, "xent %s %lldx%lld len %lld loss%s", bwd ? "fused" : "fwd", (long long)rows, (long long)V,
               (long long)len, hw);
      check_rel(what, &loss, &lossc, 1, 4e-6, 0);
      if (!bwd) continue;
      snprintf(what, sizeof what, "xent fused %lldx%lld len %lld dlogits%s", (long long)rows, (long long)V, (long long)len, hw);
      check_rel(what, d, want, cnt, 2e-5, 2e-7 * g);
    }
  }
  /* the runtime's entry point: backward only, then fused in place over a copy of the logits */
  rt_xent_rows_f32(kb, NULL, d, x, t, &dloss, rows, V, ws);
  snprintf(what, sizeof what, "xent rt_xent_rows_f32 bwd %lldx%lld dlogits", (long long)rows, (long long)V);
  check_rel(what, d, want, cnt, 2e-5, 2e-7 * g);
  memcpy(d, x, (size_t)cnt * sizeof(float));
  rt_xent_rows_f32(kb, &lossb, d, d, t, &dloss, rows, V, ws);
  snprintf(what, sizeof what, "xent rt_xent_rows_f32 fused in place %lldx%lld loss", (long long)rows, (long long)V);
  check_rel(what, &lossb, &lossc, 1, 4e-6, 0);
  snprintf(what, sizeof what, "xent rt_xent_rows_f32 fused in place %lldx%lld dlogits", (long long)rows, (long long)V);
  check_rel(what, d, want, cnt, 2e-5, 2e-7 * g);
  float lossf, *dc = buf(cnt); /* the C fused kernel, the CPU target's fused call, agrees with the pair */
  rt_cross_entropy_fused_f32(&lossf, dc, x, t, &dloss, rows, V, len, ws);
  snprintf(what, sizeof what, "xent C fused %lldx%lld vs C fwd, bwd", (long long)rows, (long long)V);
  check_rel(what, &lossf, &lossc, 1, 0, 0);
  check_rel(what, dc, want, cnt, 0, 0);
  rt_xent_rows_f32(kf, &lossb, NULL, x, t, &dloss, rows, V, ws);
  snprintf(what, sizeof what, "xent rt_xent_rows_f32 fwd %lldx%lld loss", (long long)rows, (long long)V);
  check_rel(what, &lossb, &lossc, 1, 4e-6, 0);
  /* a NaN logit (row 0, not its target) makes the loss NaN and that row's dlogits NaN, as in C: the
     trainer's non-finite stop / skip relies on it (the clamps in fexp once turned NaN into -87.3) */
  if (len > 1) {
    x[t[0] == 1 ? 2 % len : 1] = NAN;
    rt_cross_entropy_fused_f32(&lossf, dc, x, t, &dloss, rows, V, len, ws);
    rt_xent_rows_f32(kb, &lossb, d, x, t, &dloss, rows, V, ws);
    int row_nan = 0;
    for (int64_t j = 0; j < len; j++) row_nan += isnan(d[j]);
    bool ok = isnan(lossf) && isnan(lossb) && row_nan == len;
    printf("%-44s %s (C loss %g, LLVM loss %g, %d of %lld dlogits NaN)\n", "xent: a NaN logit propagates",
           ok ? "ok" : "FAIL", lossf, lossb, row_nan, (long long)len);
    failures += !ok;
  }
  free(x), free(d), free(want), free(t), free(rowloss), free(ws), free(dc);
}

int main(void) {
  add_cases();
  Llk *k = llk_new();
  for (int i = 0; i < ncases; i++) cases[i].name = llk_ew(k, &cases[i].e);
  const char *adamw = llk_adamw(k, &(LlkAdamW){0.9f, 0.95f, 1e-8f, 0.1f});
  static const int64_t ds[] = {1, 7, 37, 768, 1000};
  LlkNorm norms[10];
  const char *norm_names[10];
  for (int i = 0; i < 10; i++) {
    norms[i] = (LlkNorm){ds[i / 2], 1e-5f, i % 2 == 1};
    norm_names[i] = llk_norm(k, &norms[i]);
  }
  static const int64_t brows[] = {1, 67, 256};
  LlkNormBwd nbs[30];
  const char *nb_names[30][3];
  int nnb = 0;
  for (int i = 0; i < 10; i++)
    for (int r = 0; r < 3; r++)
      if (r < 2 || ds[i / 2] == 768) {
        nbs[nnb] = (LlkNormBwd){ds[i / 2], brows[r], 1e-5f, i % 2 == 1};
        llk_norm_bwd(k, &nbs[nnb], nb_names[nnb]);
        nnb++;
      }
  static const int64_t xs[][3] = {{1, 1, 1}, {5, 17, 13}, {7, 37, 37}, {33, 1000, 997}, {9, 50304, 50257}};
  enum { NXS = sizeof xs / sizeof xs[0] };
  const char *xnames[NXS][2];
  for (int i = 0; i < NXS; i++)
    for (int b = 0; b < 2; b++) xnames[i][b] = llk_xent(k, &(LlkXent){xs[i][1], xs[i][2], b == 1});
  char dir[] = "/tmp/llk-test-XXXXXX", obj[256], so[256], cmd[700];
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  snprintf(obj, sizeof obj, "%s/k.o", dir), snprintf(so, sizeof so, "%s/k.so", dir);
  char *err = NULL;
  if (!llk_compile(k, obj, &err)) return printf("FAIL: llk_compile: %s\n", err), 1;
  printf("%d kernels compiled by LLVM into %s\n", llk_count(k), obj);
  snprintf(cmd, sizeof cmd, "cc -shared -o %s %s -lm", so, obj);
  if (system(cmd) != 0) return printf("FAIL: %s\n", cmd), 1;
  void *h = dlopen(so, RTLD_NOW);
  if (!h) return printf("FAIL: dlopen: %s\n", dlerror()), 1;
  for (int i = 0; i < ncases; i++)
    for (int how = 0; how < 3; how++)
      if (how == 0 || numel(&cases[i].s.out) > 100) test_case(h, &cases[i], how);
  test_adamw(h, adamw);
  for (int i = 0; i < 10; i++) test_norm(h, norm_names[i], &norms[i], 67, i % 4 == 1);
  for (int i = 0; i < nnb; i++) test_norm_bwd(h, nb_names[i], &nbs[i], i % 3 == 1, i % 3);
  for (int i = 0; i < NXS; i++) test_xent(h, xnames[i][0], xnames[i][1], xs[i][0], xs[i][1], xs[i][2]);
  dlclose(h);
  llk_free(k);
  unlink(obj), unlink(so), rmdir(dir);
  if (failures) {
    printf("FAIL: %d check(s) beyond tolerance\n", failures);
    return 1;
  }
  printf("llvm kernels: ok\n");
  return 0;
}
