/* tests/runtime/test_kernels.c — every fast kernel of runtime/kernels against its naive reference
 * (ref.h), on odd shapes (non-multiples of the blocks, GQA, padded vocab, ignored targets), with
 * the tolerances stated at each check; every backward reference against central finite
 * differences of the forward reference (accumulated in double); results independent of the
 * thread count (bitwise, 1 vs 2 threads) where the header promises it.
 *
 *   test_kernels [group]   groups: gemm ew act embed norm rope xent optim bf16 misc (default: all)
 * (The attention's cases: test_attn.c.)
 * Exits non-zero on the first failing group after printing every mismatch summary.
 */
#include "kernels/kernels.h"
#include "kernels/ref.h"

#include "kcheck.h"

/* ---- GEMM ------------------------------------------------------------------------------------ */

static void test_gemm(void) {
  const int64_t m = 37, n = 53, k = 29;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      float *A = fbuf(m * k, -1, 1), *B = fbuf(k * n, -1, 1), *C = fbuf(m * n, -1, 1), *R = fcopy(C, m * n);
      rt_gemm(ta, tb, m, n, k, 0.7f, A, ta ? m : k, B, tb ? k : n, 0.3f, C, n);
      rt_gemm_ref(ta, tb, m, n, k, 0.7f, A, ta ? m : k, B, tb ? k : n, 0.3f, R, n);
      char name[64];
      snprintf(name, sizeof name, "gemm ta=%d tb=%d", ta, tb);
      check(name, C, R, m * n, 1e-5, 1e-5);
      free(A), free(B), free(C), free(R);
    }
  /* batched with broadcast B (bbatch 1 folds into one GEMM; 3 of 6 repeats) */
  const int64_t batch = 6;
  for (int bb = 1; bb <= 3; bb += 2)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        float *A = fbuf(batch * m * k, -1, 1), *B = fbuf(bb * k * n, -1, 1), *Y = fbuf(batch * m * n, -1, 1),
              *R = fcopy(Y, batch * m * n);
        rt_matmul(batch, bb, m, n, k, ta, tb, A, B, 1.0f, Y);
        rt_matmul_ref(batch, bb, m, n, k, ta, tb, A, B, 1.0f, R);
        char name[64];
        snprintf(name, sizeof name, "matmul bbatch=%d ta=%d tb=%d +=", bb, ta, tb);
        check(name, Y, R, batch * m * n, 1e-5, 1e-5);
        free(A), free(B), free(Y), free(R);
      }
  /* linear layer forms, W (k, n) and (n, k) */
  const int64_t rows = 67;
  for (int tw = 0; tw < 2; tw++) {
    float *x = fbuf(rows * k, -1, 1), *W = fbuf(k * n, -1, 1), *bias = fbuf(n, -1, 1), *dy = fbuf(rows * n, -1, 1);
    float *y = fbuf(rows * n, 0, 0), *yr = fbuf(rows * n, 0, 0);
    rt_linear_fwd(rows, k, n, tw, x, W, bias, y);
    rt_linear_fwd_ref(rows, k, n, tw, x, W, bias, yr);
    check(tw ? "linear fwd tw=1 +bias" : "linear fwd tw=0 +bias", y, yr, rows * n, 1e-5, 1e-5);
    rt_linear_fwd(rows, k, n, tw, x, W, NULL, y);
    rt_linear_fwd_ref(rows, k, n, tw, x, W, NULL, yr);
    check("linear fwd no bias", y, yr, rows * n, 1e-5, 1e-5);
    float *dW = fbuf(k * n, -1, 1), *dWr = fcopy(dW, k * n);
    rt_linear_dw(rows, k, n, tw, x, dy, 1.0f, dW);
    rt_linear_dw_ref(rows, k, n, tw, x, dy, 1.0f, dWr);
    check("linear dW (accumulate)", dW, dWr, k * n, 1e-4, 1e-5);
    float *dx = fbuf(rows * k, 0, 0), *dxr = fbuf(rows * k, 0, 0);
    rt_linear_dx(rows, k, n, tw, dy, W, 0.0f, dx);
    rt_linear_dx_ref(rows, k, n, tw, dy, W, 0.0f, dxr);
    check("linear dx", dx, dxr, rows * k, 1e-5, 1e-5);
    /* adjoint identities: <dy, x@W> = <x^T dy, W> = <dy W^T, x> */
    rt_linear_fwd_ref(rows, k, n, tw, x, W, NULL, yr);
    rt_linear_dw_ref(rows, k, n, tw, x, dy, 0.0f, dWr);
    double l = dotd(dy, yr, rows * n);
    check_scalar("linear adjoint <x^T dy, W>", dotd(dWr, W, k * n), l, 1e-4, 1e-5);
    check_scalar("linear adjoint <dy W^T, x>", dotd(dxr, x, rows * k), l, 1e-4, 1e-5);
    float *db = fbuf(n, -1, 1), *dbr = fcopy(db, n);
    rt_sum_rows(rows, n, dy, 1.0f, db);
    rt_sum_rows_ref(rows, n, dy, 1.0f, dbr);
    check("bias grad sum_rows (accumulate)", db, dbr, n, 1e-5, 1e-5);
    free(x), free(W), free(bias), free(dy), free(y), free(yr), free(dW), free(dWr), free(dx), free(dxr);
    free(db), free(dbr);
  }
}

/* ---- elementwise and reductions -------------------------------------------------------------- */

static void test_ew(void) {
  const int64_t n = 100003, rows = 257, cols = 389;
  float *a = fbuf(n, -2, 2), *b = fbuf(n, -2, 2), *y = fbuf(n, 0, 0), *r = fbuf(n, 0, 0);
  rt_add(n, a, b, y);
  for (int64_t i = 0; i < n; i++) r[i] = a[i] + b[i];
  check("add", y, r, n, 0, 0);
  rt_mul(n, a, b, y);
  for (int64_t i = 0; i < n; i++) r[i] = a[i] * b[i];
  check("mul", y, r, n, 0, 0);
  rt_scale(n, 0.37f, a, y);
  for (int64_t i = 0; i < n; i++) r[i] = 0.37f * a[i];
  check("scale", y, r, n, 0, 0);
  memcpy(y, b, (size_t)n * sizeof(float));
  rt_axpy(n, -1.5f, a, y);
  for (int64_t i = 0; i < n; i++) r[i] = (float)(b[i] + -1.5 * (double)a[i]);
  check("axpy", y, r, n, 1e-6, 1e-6);
  rt_add_bcast(rows, cols, a, b, y);
  for (int64_t i = 0; i < rows * cols; i++) r[i] = a[i] + b[i % cols];
  check("add_bcast (bias / residual)", y, r, rows * cols, 0, 0);
  rt_mul_bcast(rows, cols, a, b, y);
  for (int64_t i = 0; i < rows * cols; i++) r[i] = a[i] * b[i % cols];
  check("mul_bcast", y, r, rows * cols, 0, 0);
  memcpy(y, a, (size_t)n * sizeof(float));
  rt_add(n, y, b, y); /* in place */
  for (int64_t i = 0; i < n; i++) r[i] = a[i] + b[i];
  check("add in place", y, r, n, 0, 0);
  int64_t big = 1000003;
  float *x = fbuf(big, -1, 1);
  check_scalar("sumsq (double accumulation)", rt_sumsq(big, x), rt_sumsq_ref(big, x), 0, 1e-6);
  check_scalar("sum", rt_sum(big, x), rt_sum_ref(big, x), 1e-3, 1e-6);
  check_scalar("sumsq n=0", rt_sumsq(0, x), 0.0, 0, 0);
  free(a), free(b), free(y), free(r), free(x);
}

/* ---- activations ----------------------------------------------------------------------------- */

typedef struct {
  int kind; /* 0 gelu, 1 silu, 2 swiglu */
  int64_t n;
  float *x, *up, *w, *y;
} ActCtx;

static double act_loss(void *p) {
  ActCtx *c = p;
  if (c->kind == 0) rt_gelu_fwd_ref(c->n, c->x, c->y);
  if (c->kind == 1) rt_silu_fwd_ref(c->n, c->x, c->y);
  if (c->kind == 2) rt_swiglu_fwd_ref(c->n, c->x, c->up, c->y);
  return dotd(c->y, c->w, c->n);
}

static void test_act(void) {
  const int64_t n = 100003;
  float *x = fbuf(n, -9, 9), *up = fbuf(n, -2, 2), *dy = fbuf(n, -1, 1);
  float *y = fbuf(n, 0, 0), *yr = fbuf(n, 0, 0), *d2 = fbuf(n, 0, 0), *d2r = fbuf(n, 0, 0);
  x[0] = 0.0f, x[1] = -30.0f, x[2] = 30.0f, x[3] = 1e-4f; /* edges of the fast exp */
  /* fp32 fast tanh/exp: absolute error ~1e-7 of an O(1) quantity */
  rt_gelu_fwd(n, x, y);
  rt_gelu_fwd_ref(n, x, yr);
  check("gelu fwd", y, yr, n, 2e-6, 2e-6);
  rt_gelu_bwd(n, x, dy, y);
  rt_gelu_bwd_ref(n, x, dy, yr);
  check("gelu bwd", y, yr, n, 2e-6, 2e-6);
  rt_silu_fwd(n, x, y);
  rt_silu_fwd_ref(n, x, yr);
  check("silu fwd", y, yr, n, 2e-6, 2e-6);
  rt_silu_bwd(n, x, dy, y);
  rt_silu_bwd_ref(n, x, dy, yr);
  check("silu bwd", y, yr, n, 2e-6, 2e-6);
  rt_swiglu_fwd(n, x, up, y);
  rt_swiglu_fwd_ref(n, x, up, yr);
  check("swiglu fwd", y, yr, n, 4e-6, 2e-6);
  rt_swiglu_bwd(n, x, up, dy, y, d2);
  rt_swiglu_bwd_ref(n, x, up, dy, yr, d2r);
  check("swiglu bwd dgate", y, yr, n, 4e-6, 2e-6);
  check("swiglu bwd dup", d2, d2r, n, 4e-6, 2e-6);
  float *xg = fcopy(x, n);
  rt_gelu_fwd(n, xg, xg); /* in place */
  rt_gelu_fwd(n, x, y);
  check("gelu fwd in place", xg, y, n, 0, 0);

  /* finite differences of the references (h = 1e-3, tolerance 1e-3 of the largest gradient) */
  const int64_t m = 2001;
  ActCtx c = {0, m, fbuf(m, -5, 5), fbuf(m, -2, 2), fbuf(m, -1, 1), fbuf(m, 0, 0)};
  float *g = fbuf(m, 0, 0), *g2 = fbuf(m, 0, 0);
  rt_gelu_bwd_ref(m, c.x, c.w, g);
  check_fd("gelu bwd ref vs FD", act_loss, &c, c.x, m, g, 200, 1e-3, 1e-3);
  c.kind = 1;
  rt_silu_bwd_ref(m, c.x, c.w, g);
  check_fd("silu bwd ref vs FD", act_loss, &c, c.x, m, g, 200, 1e-3, 1e-3);
  c.kind = 2;
  rt_swiglu_bwd_ref(m, c.x, c.up, c.w, g, g2);
  check_fd("swiglu dgate ref vs FD", act_loss, &c, c.x, m, g, 200, 1e-3, 1e-3);
  check_fd("swiglu dup ref vs FD", act_loss, &c, c.up, m, g2, 200, 1e-3, 1e-3);
  free(x), free(up), free(dy), free(y), free(yr), free(d2), free(d2r), free(xg), free(g), free(g2);
  free(c.x), free(c.up), free(c.w), free(c.y);
}

/* ---- embedding ------------------------------------------------------------------------------- */

static void test_embed(void) {
  const int64_t n = 300, V = 97, D = 131;
  int32_t idx[300];
  for (int64_t i = 0; i < n; i++) idx[i] = (int32_t)(urand() * 20); /* many repeats */
  idx[5] = (int32_t)(V - 1);
  float *tab = fbuf(V * D, -1, 1), *y = fbuf(n * D, 0, 0), *yr = fbuf(n * D, 0, 0), *dy = fbuf(n * D, -1, 1);
  rt_embed_fwd(n, V, D, tab, idx, y);
  rt_embed_fwd_ref(n, V, D, tab, idx, yr);
  check("embed fwd", y, yr, n * D, 0, 0);
  for (int acc = 0; acc < 2; acc++) {
    float *dt = fbuf(V * D, -1, 1), *dtr = fcopy(dt, V * D);
    rt_embed_bwd(n, V, D, idx, dy, acc, dt);
    rt_embed_bwd_ref(n, V, D, idx, dy, acc, dtr);
    check(acc ? "embed bwd (accumulate)" : "embed bwd", dt, dtr, V * D, 1e-5, 1e-5);
    /* adjoint: <dy, embed(tab)> = <embed_bwd(dy), tab> */
    if (!acc) check_scalar("embed adjoint", dotd(dtr, tab, V * D), dotd(dy, yr, n * D), 1e-4, 1e-5);
    free(dt), free(dtr);
  }
  free(tab), free(y), free(yr), free(dy);
}

/* ---- normalisation --------------------------------------------------------------------------- */

typedef struct {
  int rms;
  int64_t rows, D;
  float *x, *w, *b, *r, *y;
} NormCtx;

static double norm_loss(void *p) {
  NormCtx *c = p;
  if (c->rms)
    rt_rmsnorm_fwd_ref(c->rows, c->D, 1e-5f, c->x, c->w, c->y, NULL);
  else
    rt_layernorm_fwd_ref(c->rows, c->D, 1e-5f, c->x, c->w, c->b, c->y, NULL, NULL);
  return dotd(c->y, c->r, c->rows * c->D);
}

static void test_norm(void) {
  const int64_t rows = 67, D = 771;
  for (int rms = 0; rms < 2; rms++) {
    const char *nm = rms ? "rmsnorm" : "layernorm";
    char name[64];
    float *x = fbuf(rows * D, -2, 3), *w = fbuf(D, 0.5, 1.5), *b = fbuf(D, -1, 1), *dy = fbuf(rows * D, -1, 1);
    float *y = fbuf(rows * D, 0, 0), *yr = fbuf(rows * D, 0, 0), *st = fbuf(2 * rows, 0, 0),
          *str = fbuf(2 * rows, 0, 0);
    if (rms) {
      rt_rmsnorm_fwd(rows, D, 1e-5f, x, w, y, st + rows);
      rt_rmsnorm_fwd_ref(rows, D, 1e-5f, x, w, yr, str + rows);
    } else {
      rt_layernorm_fwd(rows, D, 1e-5f, x, w, b, y, st, st + rows);
      rt_layernorm_fwd_ref(rows, D, 1e-5f, x, w, b, yr, str, str + rows);
      check("layernorm mean", st, str, rows, 1e-6, 1e-5);
    }
    snprintf(name, sizeof name, "%s fwd", nm);
    check(name, y, yr, rows * D, 1e-5, 1e-5);
    snprintf(name, sizeof name, "%s rstd", nm);
    check(name, st + rows, str + rows, rows, 0, 1e-5);

    void *ws = wsbuf(rt_norm_workspace_bytes(rows, D));
    float *dx = fbuf(rows * D, 0, 0), *dxr = fbuf(rows * D, 0, 0), *dw = fbuf(D, -1, 1), *dwr = fcopy(dw, D),
          *db = fbuf(D, -1, 1), *dbr = fcopy(db, D);
    if (rms) {
      rt_rmsnorm_bwd(rows, D, 1e-5f, x, w, dy, dx, dw, 1.0f, ws);
      rt_rmsnorm_bwd_ref(rows, D, 1e-5f, x, w, dy, dxr, dwr, 1.0f);
    } else {
      rt_layernorm_bwd(rows, D, 1e-5f, x, w, dy, dx, dw, db, 1.0f, ws);
      rt_layernorm_bwd_ref(rows, D, 1e-5f, x, w, dy, dxr, dwr, dbr, 1.0f);
      check("layernorm bwd db (accumulate)", db, dbr, D, 1e-4, 1e-5);
    }
    snprintf(name, sizeof name, "%s bwd dx", nm);
    check_scaled(name, dx, dxr, rows * D, 1e-5);
    snprintf(name, sizeof name, "%s bwd dw (accumulate)", nm);
    check(name, dw, dwr, D, 1e-4, 1e-5);
    /* in place: dx over dy */
    float *dyc = fcopy(dy, rows * D), *dw2 = fbuf(D, 0, 0), *db2 = fbuf(D, 0, 0), *dw3 = fbuf(D, 0, 0),
          *db3 = fbuf(D, 0, 0);
    if (rms) {
      rt_rmsnorm_bwd(rows, D, 1e-5f, x, w, dyc, dyc, dw2, 0.0f, ws);
      rt_rmsnorm_bwd(rows, D, 1e-5f, x, w, dy, dx, dw3, 0.0f, ws);
    } else {
      rt_layernorm_bwd(rows, D, 1e-5f, x, w, dyc, dyc, dw2, db2, 0.0f, ws);
      rt_layernorm_bwd(rows, D, 1e-5f, x, w, dy, dx, dw3, db3, 0.0f, ws);
    }
    snprintf(name, sizeof name, "%s bwd in place dx", nm);
    check(name, dyc, dx, rows * D, 0, 0);
    snprintf(name, sizeof name, "%s bwd in place dw", nm);
    check(name, dw2, dw3, D, 0, 0);
    /* FD of the reference forward: loss = <y, r> */
    NormCtx c = {rms, 5, 37, fbuf(5 * 37, -2, 2), fbuf(37, 0.5, 1.5), fbuf(37, -1, 1), fbuf(5 * 37, -1, 1),
                 fbuf(5 * 37, 0, 0)};
    float *gx = fbuf(5 * 37, 0, 0), *gw = fbuf(37, 0, 0), *gb = fbuf(37, 0, 0);
    if (rms)
      rt_rmsnorm_bwd_ref(5, 37, 1e-5f, c.x, c.w, c.r, gx, gw, 0.0f);
    else
      rt_layernorm_bwd_ref(5, 37, 1e-5f, c.x, c.w, c.r, gx, gw, gb, 0.0f);
    snprintf(name, sizeof name, "%s bwd ref dx vs FD", nm);
    check_fd(name, norm_loss, &c, c.x, 5 * 37, gx, 100, 1e-3, 2e-3);
    snprintf(name, sizeof name, "%s bwd ref dw vs FD", nm);
    check_fd(name, norm_loss, &c, c.w, 37, gw, 37, 1e-3, 2e-3);
    if (!rms) check_fd("layernorm bwd ref db vs FD", norm_loss, &c, c.b, 37, gb, 37, 1e-3, 2e-3);
    free(x), free(w), free(b), free(dy), free(y), free(yr), free(st), free(str), free(ws), free(dx), free(dxr);
    free(dw), free(dwr), free(db), free(dbr), free(dyc), free(dw2), free(db2), free(dw3), free(db3);
    free(c.x), free(c.w), free(c.b), free(c.r), free(c.y), free(gx), free(gw), free(gb);
  }
}

/* ---- RoPE ------------------------------------------------------------------------------------ */

static void test_rope(void) {
  const int64_t B = 2, S = 37, H = 3, hd = 34, n = B * S * H * hd;
  float *x = fbuf(n, -1, 1), *y = fbuf(n, 0, 0), *yr = fbuf(n, 0, 0), *r = fbuf(n, -1, 1), *z = fbuf(n, 0, 0);
  void *ws = wsbuf(rt_rope_workspace_bytes(S, hd));
  for (int inv = 0; inv < 2; inv++) {
    rt_rope(B, S, H, hd, 10000.0, 5, inv, x, y, ws);
    rt_rope_ref(B, S, H, hd, 10000.0, 5, inv, x, yr);
    check(inv ? "rope inverse" : "rope", y, yr, n, 1e-6, 1e-5);
  }
  float *xc = fcopy(x, n);
  rt_rope(B, S, H, hd, 10000.0, 5, 0, xc, xc, ws); /* in place */
  rt_rope(B, S, H, hd, 10000.0, 5, 0, x, y, ws);
  check("rope in place", xc, y, n, 0, 0);
  /* the inverse is the adjoint (the backward): <rope(x), r> = <x, rope_inv(r)>; and undoes it */
  rt_rope_ref(B, S, H, hd, 10000.0, 5, 0, x, yr);
  rt_rope_ref(B, S, H, hd, 10000.0, 5, 1, r, z);
  check_scalar("rope adjoint = inverse", dotd(yr, r, n), dotd(x, z, n), 1e-5, 1e-5);
  rt_rope_ref(B, S, H, hd, 10000.0, 5, 1, yr, z);
  check("rope inverse(rope(x)) = x", z, x, n, 1e-6, 1e-5);
  /* the tables a process keeps (rope.c: 16) and, past them, the per-call table in ws: 40 distinct
   * (start, theta) pairs, each twice, against the reference; the kept and the per-call table give
   * the same bits (the 41st call, a kept table, against the rows a table made in ws shifts to) */
  for (int k = 0; k < 80; k++) {
    int64_t st = k % 40;
    double th = k % 40 < 20 ? 10000.0 : 500000.0;
    rt_rope(B, S, H, hd, th, st, k & 1, x, y, ws);
    rt_rope_ref(B, S, H, hd, th, st, k & 1, x, yr);
    check("rope, many tables", y, yr, n, 1e-6, 1e-5);
  }
  int32_t pos[37];
  for (int s = 0; s < S; s++) pos[s] = s;
  rt_rope(B, S, H, hd, 10000.0, 5, 0, x, y, ws);    /* the kept table (made first above) */
  rt_rope_at(B, S, H, hd, 10000.0, 5, 0, pos, x, yr, ws); /* the same rows, a table made in ws */
  check("rope kept = rope_at's table", y, yr, n, 0, 0);
  free(x), free(y), free(yr), free(r), free(z), free(ws), free(xc);
}

/* ---- cross-entropy --------------------------------------------------------------------------- */

typedef struct {
  int64_t N, V, len;
  float *x;
  int32_t *t;
} XentCtx;

static double xent_loss(void *p) {
  XentCtx *c = p;
  return rt_xent_fwd_bwd_ref(c->N, c->V, c->len, c->x, c->t, 1.0f, NULL);
}

static void test_xent(void) {
  const int64_t N = 67, V = 1031, len = 1000;
  int32_t t[67];
  for (int64_t i = 0; i < N; i++) t[i] = (int32_t)(urand() * len);
  t[3] = -1, t[10] = -100, t[11] = (int32_t)(len - 1), t[12] = 0; /* ignored, edges */
  float *x = fbuf(N * V, -6, 6), *d = fbuf(N * V, 7, 7), *dr = fbuf(N * V, 0, 0);
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = len; j < V; j++) x[i * V + j] = 1e4f; /* padding must not count */
  void *ws = wsbuf(rt_xent_workspace_bytes(N));
  float L = rt_xent_fwd_bwd(N, V, len, x, t, 1.7f, d, ws);
  float Lr = rt_xent_fwd_bwd_ref(N, V, len, x, t, 1.7f, dr);
  check_scalar("xent loss", L, Lr, 0, 2e-6);
  check("xent dlogits (padding 0)", d, dr, N * V, 1e-8, 1e-5);
  check_scalar("xent loss without dlogits", rt_xent_fwd_bwd(N, V, len, x, t, 1.7f, NULL, ws), Lr, 0, 2e-6);
  float *xi = fcopy(x, N * V);
  float Li = rt_xent_fwd_bwd(N, V, len, xi, t, 1.7f, xi, ws); /* in place */
  check_scalar("xent in place loss", Li, L, 0, 0);
  check("xent in place dlogits", xi, d, N * V, 0, 0);
  int32_t none[67];
  for (int64_t i = 0; i < N; i++) none[i] = -1;
  check_scalar("xent all ignored", rt_xent_fwd_bwd(N, V, len, x, none, 1.0f, d, ws), 0.0, 0, 0);
  /* FD of the reference loss */
  XentCtx c = {7, 13, 11, fbuf(7 * 13, -3, 3), NULL};
  int32_t tt[7] = {0, 10, -1, 5, 3, -1, 7};
  c.t = tt;
  float *g = fbuf(7 * 13, 0, 0);
  rt_xent_fwd_bwd_ref(7, 13, 11, c.x, tt, 1.0f, g);
  check_fd("xent dlogits ref vs FD", xent_loss, &c, c.x, 7 * 13, g, 60, 1e-3, 1e-3);
  free(x), free(d), free(dr), free(ws), free(xi), free(c.x), free(g);
}

/* ---- optimizers ------------------------------------------------------------------------------ */

static void test_optim(void) {
  const int64_t n = 100007;
  float *p = fbuf(n, -1, 1), *g = fbuf(n, -1, 1), *m = fbuf(n, -0.1, 0.1), *v = fbuf(n, 0, 0.01);
  float *pr = fcopy(p, n), *mr = fcopy(m, n), *vr = fcopy(v, n);
  for (int step = 1; step <= 3; step++) {
    rt_adamw(n, p, g, m, v, 1e-3f, 0.5f, step, 0.9f, 0.95f, 1e-8f, 0.1f);
    rt_adamw_ref(n, pr, g, mr, vr, 1e-3f, 0.5f, step, 0.9f, 0.95f, 1e-8f, 0.1f);
  }
  check("adamw p (3 steps)", p, pr, n, 1e-6, 1e-6);
  check("adamw m", m, mr, n, 1e-7, 1e-6);
  check("adamw v", v, vr, n, 1e-9, 1e-5);
  rt_sgd(n, p, g, m, 0.1f, 0.5f, 0.9f, 0.01f);
  rt_sgd_ref(n, pr, g, mr, 0.1f, 0.5f, 0.9f, 0.01f);
  check("sgd p", p, pr, n, 1e-6, 1e-6);
  check("sgd m", m, mr, n, 1e-6, 1e-6);
  /* a NaN / Inf gscale (on_nonfinite skip's gate) leaves p and the state exactly as they were,
     even with a NaN gradient */
  g[7] = NAN;
  memcpy(pr, p, (size_t)n * sizeof *p), memcpy(mr, m, (size_t)n * sizeof *m), memcpy(vr, v, (size_t)n * sizeof *v);
  rt_adamw(n, p, g, m, v, 1e-3f, NAN, 4, 0.9f, 0.95f, 1e-8f, 0.1f);
  rt_sgd(n, p, g, m, 0.1f, INFINITY, 0.9f, 0.01f);
  if (memcmp(p, pr, (size_t)n * sizeof *p) || memcmp(m, mr, (size_t)n * sizeof *m) || memcmp(v, vr, (size_t)n * sizeof *v)) {
    fprintf(stderr, "FAIL: adamw / sgd with a non-finite gscale changed p, m or v\n");
    g_fail++;
  }
  /* rt_adamw_copy (plan offload's host update, storing the bf16 copy it uploads): rt_adamw and
     rt_cvt_f32_bf16 bit for bit, a skipped step's copy that of p unchanged */
  g[7] = 0.25f;
  uint16_t *cp = malloc((size_t)n * sizeof *cp), *cr = malloc((size_t)n * sizeof *cr);
  if (!cp || !cr) exit(2);
  memcpy(pr, p, (size_t)n * sizeof *p), memcpy(mr, m, (size_t)n * sizeof *m), memcpy(vr, v, (size_t)n * sizeof *v);
  for (int step = 4; step <= 6; step++) {
    float gs = step == 5 ? NAN : 0.5f;
    rt_adamw_copy(n, p, g, m, v, 1e-3f, gs, step, 0.9f, 0.95f, 1e-8f, 0.1f, cp);
    rt_adamw(n, pr, g, mr, vr, 1e-3f, gs, step, 0.9f, 0.95f, 1e-8f, 0.1f);
    rt_cvt_f32_bf16(n, pr, cr);
    if (memcmp(p, pr, (size_t)n * sizeof *p) || memcmp(m, mr, (size_t)n * sizeof *m) ||
        memcmp(v, vr, (size_t)n * sizeof *v) || memcmp(cp, cr, (size_t)n * sizeof *cp)) {
      fprintf(stderr, "FAIL: adamw_copy differs from adamw + the bf16 cast at step %d%s\n", step,
              step == 5 ? " (skipped)" : "");
      g_fail++;
    }
  }
  free(cp), free(cr);
  free(p), free(g), free(m), free(v), free(pr), free(mr), free(vr);
}

/* ---- bf16 ------------------------------------------------------------------------------------ */

static void test_bf16(void) {
  int64_t n = 1 << 20, bad = 0;
  uint32_t *bits = malloc((size_t)n * sizeof(uint32_t));
  uint16_t *h = malloc((size_t)n * sizeof(uint16_t));
  float *back = fbuf(n, 0, 0);
  if (!bits || !h) exit(2);
  for (int64_t i = 0; i < n; i++) bits[i] = (uint32_t)(urand() * 4294967296.0);
  uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                        0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7f8000u, 0x7f7fffffu, 0x00008000u,
                        0x00018000u, 0x3f7fffffu};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) bits[i] = special[i];
  rt_cvt_f32_bf16(n, (const float *)bits, h);
  for (int64_t i = 0; i < n; i++) {
    float f;
    memcpy(&f, &bits[i], sizeof f);
    uint16_t want = rt_f32_to_bf16_ref(f);
    int both_nan = (want & 0x7f80) == 0x7f80 && (want & 0x7f) && (h[i] & 0x7f80) == 0x7f80 && (h[i] & 0x7f);
    if (h[i] != want && !both_nan) {
      if (bad++ < 5) printf("     bf16 of 0x%08x: got 0x%04x want 0x%04x\n", bits[i], h[i], want);
    }
  }
  if (bad) {
    g_fail = 1;
    printf("FAIL %-34s %lld of %lld\n", "f32->bf16 round to nearest even", (long long)bad, (long long)n);
  } else {
    printf("ok   %-34s %lld patterns bit-exact\n", "f32->bf16 round to nearest even", (long long)n);
  }
  rt_cvt_bf16_f32(n, h, back);
  int64_t bad2 = 0;
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &back[i], sizeof u);
    if (u != (uint32_t)h[i] << 16) bad2++;
  }
  if (bad2) {
    g_fail = 1;
    printf("FAIL bf16->f32 exact: %lld\n", (long long)bad2);
  } else {
    printf("ok   %-34s exact\n", "bf16->f32");
  }
  free(bits), free(h), free(back);
}

/* ---- thread-count independence, peak ------------------------------------------------------- */

static void test_misc(void) {
  const int64_t rows = 300, D = 389, V = 211, n = rows * D;
  float *x = fbuf(n, -2, 2), *dy = fbuf(n, -1, 1), *w = fbuf(D, 0.5, 1.5);
  int32_t idx[300];
  for (int64_t i = 0; i < rows; i++) idx[i] = (int32_t)(urand() * 50);
  float *out[2][6];
  double ss[2];
  int64_t B = 2, S = 150, H = 4, KV = 2, hd = 32, nq = B * S * H * hd, nk = B * S * KV * hd;
  float *q = fbuf(nq, -2, 2), *k = fbuf(nk, -2, 2), *v = fbuf(nk, -1, 1), *dout = fbuf(nq, -1, 1);
  float *o = fbuf(nq, 0, 0), *lse = fbuf(B * H * S, 0, 0);
  rt_set_threads(2);
  rt_sdpa_fwd(B, S, S, H, KV, hd, 1, q, k, v, o, lse);
  void *ws = wsbuf(rt_norm_workspace_bytes(rows, D) + rt_xent_workspace_bytes(rows));
  for (int th = 1; th <= 2; th++) {
    rt_set_threads(th);
    float **r = out[th - 1];
    r[0] = fbuf(V * D, 0, 0);
    rt_embed_bwd(rows, V, D, idx, dy, 0, r[0]);
    r[1] = fbuf(n + 2 * D, 0, 0);
    rt_layernorm_bwd(rows, D, 1e-5f, x, w, dy, r[1], r[1] + n, r[1] + n + D, 0.0f, ws);
    r[2] = fbuf(D, 0, 0);
    rt_sum_rows(rows, D, dy, 0.0f, r[2]);
    r[3] = fbuf(n + 1, 0, 0);
    int32_t t[300];
    for (int64_t i = 0; i < rows; i++) t[i] = i % 7 ? idx[i] : -1;
    r[3][n] = rt_xent_fwd_bwd(rows, D, D - 5, x, t, 1.0f, r[3], ws);
    r[4] = fbuf(nq + 2 * nk, 0, 0);
    rt_sdpa_bwd(B, S, S, H, KV, hd, 1, q, k, v, o, lse, dout, r[4], r[4] + nq, r[4] + nq + nk);
    r[5] = fbuf(nq + B * H * S, 0, 0);
    rt_sdpa_fwd(B, S, S, H, KV, hd, 1, q, k, v, r[5], r[5] + nq);
    ss[th - 1] = rt_sumsq(n, x);
  }
  check_bits("embed bwd", out[0][0], out[1][0], (size_t)(V * D) * 4);
  check_bits("layernorm bwd", out[0][1], out[1][1], (size_t)(n + 2 * D) * 4);
  check_bits("sum_rows", out[0][2], out[1][2], (size_t)D * 4);
  check_bits("xent fwd+bwd", out[0][3], out[1][3], (size_t)(n + 1) * 4);
  check_bits("sdpa bwd", out[0][4], out[1][4], (size_t)(nq + 2 * nk) * 4);
  check_bits("sdpa fwd", out[0][5], out[1][5], (size_t)(nq + B * H * S) * 4);
  check_bits("sumsq", &ss[0], &ss[1], sizeof(double));
  for (int th = 0; th < 2; th++)
    for (int i = 0; i < 6; i++) free(out[th][i]);
  free(x), free(dy), free(w), free(ws), free(q), free(k), free(v), free(dout), free(o), free(lse);

  /* the peak measurement runs and gives a plausible number (not a timing assertion) */
  double pk = rt_measure_peak_flops(1, 0.02);
  if (!(pk > 1e9 && pk < 1e13)) {
    g_fail = 1;
    printf("FAIL peak flops implausible: %g\n", pk);
  } else {
    printf("ok   %-34s %.1f GFLOP/s (1 thread), BLAS: %s\n", "rt_measure_peak_flops", pk * 1e-9, rt_blas_name());
  }
}

int main(int argc, char **argv) {
  static const struct {
    const char *name;
    void (*fn)(void);
  } groups[] = {{"gemm", test_gemm}, {"ew", test_ew},     {"act", test_act},     {"embed", test_embed},
                {"norm", test_norm}, {"rope", test_rope}, {"xent", test_xent},
                {"optim", test_optim}, {"bf16", test_bf16}, {"misc", test_misc}};
  const char *only = argc > 1 ? argv[1] : NULL;
  int ran = 0;
  rt_set_threads(2); /* the CI machine's cores; exercises the parallel paths */
  for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
    if (only && strcmp(only, groups[i].name)) continue;
    printf("== %s\n", groups[i].name);
    groups[i].fn();
    ran++;
  }
  if (!ran) {
    fprintf(stderr, "test_kernels: no group named %s\n", only);
    return 2;
  }
  if (g_fail) printf("test_kernels: FAILED\n");
  return g_fail ? 1 : 0;
}
