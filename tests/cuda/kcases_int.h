/* tests/cuda/kcases_int.h — the kernel cases' state and host helpers (kcases.c): buffers on the
 * backend, uploads and downloads in the kernels' dtypes, launching an emitted statement, and the
 * comparisons against references with their tolerances (kcases.c's header comment). */
#ifndef TESTS_KCASES_INT_H
#define TESTS_KCASES_INT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuk_launch.h"
#include "kcases.h"
#include "ref.h"

#define KC_MAX_BUFS 8192

struct KC {
  const KBackend *be; /* NULL in pass 0 */
  CuK *k;
  Arena *a;
  void *buf[KC_MAX_BUFS];  /* device buffers b0.. */
  size_t bytes[KC_MAX_BUFS];
  int nbuf;
  char *ws;                /* device workspace (pass 1) */
  int64_t ws_bytes;
  int fails, checks;
  uint64_t rng;
  int variant;             /* the bytes-bound kernels' variant being checked (cuk_set_variant) */
  struct timespec t0;      /* pass 1's start (progress lines) */
};

typedef struct {
  int id;
  DType dt;
  int64_t n;
} KT;

/* ---- host helpers ------------------------------------------------------------------------- */

static inline float frand(KC *c) {
  c->rng = c->rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((double)(c->rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static inline float bf(float x) {
  uint32_t u = (uint32_t)rt_f32_to_bf16_ref(x) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline float *fvec(KC *c, int64_t n, float scale) {
  float *v = arena_alloc(c->a, (size_t)n * 4 + 4);
  for (int64_t i = 0; i < n; i++) v[i] = scale * frand(c);
  return v;
}
/* values representable in dt */
static inline void round_to(DType dt, float *v, int64_t n) {
  if (dt == DT_BF16)
    for (int64_t i = 0; i < n; i++) v[i] = bf(v[i]);
}

static inline KT kt_new(KC *c, DType dt, int64_t n) {
  if (c->nbuf >= KC_MAX_BUFS) {
    fprintf(stderr, "kcases: too many buffers\n");
    exit(1);
  }
  KT t = {c->nbuf++, dt, n};
  size_t bytes = (size_t)(n > 0 ? n : 1) * (size_t)ir_dtype_size(dt);
  c->bytes[t.id] = bytes;
  c->buf[t.id] = c->be ? c->be->alloc(bytes) : NULL;
  return t;
}
static inline const char *P(KC *c, KT t) { return arena_printf(c->a, "b%d", t.id); }

static inline void kt_put(KC *c, KT t, const float *v) {
  if (!c->be) return;
  size_t es = (size_t)ir_dtype_size(t.dt);
  unsigned char *h = malloc((size_t)t.n * es + 1);
  for (int64_t i = 0; i < t.n; i++) {
    if (t.dt == DT_F32) memcpy(h + i * 4, &v[i], 4);
    else if (t.dt == DT_BF16) {
      uint16_t b = rt_f32_to_bf16_ref(v[i]);
      memcpy(h + i * 2, &b, 2);
    } else {
      int32_t x = (int32_t)v[i];
      memcpy(h + i * 4, &x, 4);
    }
  }
  c->be->h2d(c->buf[t.id], h, (size_t)t.n * es);
  free(h);
}
static inline void kt_put_i32(KC *c, KT t, const int32_t *v) {
  if (c->be) c->be->h2d(c->buf[t.id], v, (size_t)t.n * 4);
}
static inline float *kt_get(KC *c, KT t) {
  float *v = arena_alloc(c->a, (size_t)t.n * 4 + 4);
  if (!c->be) return v;
  size_t es = (size_t)ir_dtype_size(t.dt);
  unsigned char *h = malloc((size_t)t.n * es + 1);
  c->be->d2h(h, c->buf[t.id], (size_t)t.n * es);
  for (int64_t i = 0; i < t.n; i++) {
    if (t.dt == DT_F32) memcpy(&v[i], h + i * 4, 4);
    else if (t.dt == DT_BF16) {
      uint16_t b;
      memcpy(&b, h + i * 2, 2);
      uint32_t u = (uint32_t)b << 16;
      memcpy(&v[i], &u, 4);
    } else {
      int32_t x;
      memcpy(&x, h + i * 4, 4);
      v[i] = (float)x;
    }
  }
  free(h);
  return v;
}

static inline void *resolve(KC *c, const char *e) {
  int id;
  long long off;
  if (sscanf(e, "(b%d + %lld)", &id, &off) == 2 && id >= 0 && id < c->nbuf) return (char *)c->buf[id] + off; /* bytes in */
  if (sscanf(e, "b%d", &id) == 1 && id >= 0 && id < c->nbuf) return c->buf[id];
  if (strcmp(e, "WS") == 0) return c->ws;
  if (sscanf(e, "(WS + %lld)", &off) == 1) return c->ws + off;
  fprintf(stderr, "kcases: cannot resolve argument '%s'\n", e);
  exit(1);
}

/* Runs the launches of one emitted statement. */
static inline void run(KC *c, const char *stmt) {
  if (!c->be) return;
  CukLaunch L[8];
  int n = cukl_parse(stmt, L, 8);
  if (n <= 0) {
    fprintf(stderr, "kcases: cannot parse launch: %s\n", stmt);
    exit(1);
  }
  if (cuk_workspace(c->k) > c->ws_bytes) {
    fprintf(stderr, "kcases: workspace %lld > %lld of pass 0\n", (long long)cuk_workspace(c->k),
            (long long)c->ws_bytes);
    exit(1);
  }
  for (int i = 0; i < n; i++) {
    void *ptrs[CUKL_MAX_ARGS];
    long long ints[CUKL_MAX_ARGS];
    void *args[CUKL_MAX_ARGS];
    for (int j = 0; j < L[i].nargs; j++) {
      if (L[i].is_int[j]) {
        ints[j] = strtoll(L[i].expr[j], NULL, 10);
        args[j] = &ints[j];
      } else {
        ptrs[j] = resolve(c, L[i].expr[j]);
        args[j] = &ptrs[j];
      }
    }
    c->be->launch(L[i].kernel, L[i].grid, L[i].block, L[i].smem, args);
  }
}

static inline int dev_flag(KC *c) {
  if (!c->be) return 0;
  int f;
  c->be->d2h(&f, c->ws, 4);
  int z = 0;
  c->be->h2d(c->ws, &z, 4);
  return f;
}

/* |got - ref| <= rtol |ref| + atol everywhere. */
static inline void cmp(KC *c, const char *what, const float *got, const float *ref, int64_t n, double rtol, double atol) {
  if (!c->be) return;
  c->checks++;
  int64_t bad = 0, first = -1;
  double worst = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - (double)ref[i]), lim = rtol * fabs((double)ref[i]) + atol;
    if (!(e <= lim)) {
      if (first < 0) first = i;
      bad++;
    }
    double r = e == 0.0 ? 0.0 : e / (fabs((double)ref[i]) + atol);
    if (r > worst || r != r) worst = r;
  }
  if (bad) {
    c->fails++;
    printf("FAIL %s: %lld of %lld differ (first [%lld]: got %.9g ref %.9g; rtol %g atol %g)\n", what, (long long)bad,
           (long long)n, (long long)first, got[first], ref[first], rtol, atol);
  } else {
    printf("ok   %s (n %lld, max err/(|ref|+atol) %.3g)\n", what, (long long)n, worst);
  }
}
static inline void expect(KC *c, const char *what, int cond) {
  if (!c->be) return;
  c->checks++;
  if (!cond) c->fails++;
  printf("%s %s\n", cond ? "ok  " : "FAIL", what);
}

static inline double tol(DType dt) { return dt == DT_BF16 ? 1e-2 : 1e-5; }
static inline const char *dn(DType dt) { return dt == DT_BF16 ? "bf16" : "f32"; }

/* the attention's and ring attention's cases (kcases_attn.c) */
void kc_cases_embed(KC *c);
void kc_cases_attention(KC *c);
void kc_cases_ring(KC *c);

#endif
