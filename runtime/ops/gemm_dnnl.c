/* runtime/ops/gemm_dnnl.c — the CPU target's bf16 GEMM (`precision bf16`): rt_matmul_bf16.
 *
 * Semantics (both builds): A and B are rounded to bf16 (round to nearest even), their products
 * summed in f32, the result stored in f32. A product of two bf16 values is exact in f32 (8 x 8
 * significant bits), so the only rounding besides the inputs' is the f32 accumulation's.
 *
 * With oneDNN (SHARDRT_HAVE_DNNL, Debian's libdnnl): the matmul primitive on bf16 src / weights
 * and an f32 dst; a transpose is a memory descriptor's strides (no copy); a primitive is created
 * once per shape and kept (per thread: a rank that runs as a thread has its own engine, stream
 * and primitives). On AVX-512 BF16 CPUs oneDNN dispatches its avx512_core_bf16 kernels (vdpbf16ps:
 * twice the FLOPs per instruction of an f32 FMA). Debian's libdnnl threads with OpenMP (libgomp),
 * the runtime's own pool: its GEMMs run on the runtime's threads (omp_set_num_threads), inside a
 * rank's thread nested parallelism is off as for OpenBLAS.
 * Without oneDNN: the inputs are rounded to bf16 and back to f32 and the f32 GEMM runs on them —
 * the same numbers (up to the accumulation order), at the f32 speed.
 * rt_matmul_bf16_in takes either operand already in bf16 (the compiled step's bf16 copy of a weight,
 * cast once per step by passes/gemm_cast.c) and skips its rounding pass: the same bits as rounding
 * it here (the rounding is the same rt_cvt_f32_bf16).
 */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

/* Scratch of this thread: the bf16 (or rounded f32) copies of A and B. */
static _Thread_local void *scr_a, *scr_b;
static _Thread_local size_t cap_a, cap_b;

static void *grow(void **p, size_t *cap, size_t bytes) {
  if (bytes > *cap) {
    free(*p);
    *p = malloc(bytes);
    if (!*p) {
      fprintf(stderr, "rt_matmul_bf16: out of memory (%zu bytes)\n", bytes);
      exit(1);
    }
    *cap = bytes;
  }
  return *p;
}

static inline float widen(uint16_t h) {
  union {
    uint32_t u;
    float f;
  } v = {.u = (uint32_t)h << 16};
  return v.f;
}

/* The operand as f32 values that bf16 holds exactly: rounded (f32) or widened (bf16) into scratch. */
static const float *rounded(void **scr, size_t *cap, const void *x, int is_bf16, int64_t n) {
  float *r = grow(scr, cap, (size_t)n * 4);
  uint16_t *h = (uint16_t *)r; /* bf16 codes written into the first half, widened back from the end down */
  if (is_bf16)
    memcpy(h, x, (size_t)n * 2);
  else
    rt_cvt_f32_bf16(n, x, h);
  for (int64_t i = n - 1; i >= 0; i--) r[i] = widen(h[i]);
  return r;
}

/* The f32 GEMM on A and B rounded to bf16: the build without oneDNN's, and the oneDNN build's on a
 * CPU for which oneDNN has no bf16 matmul (it answers `unimplemented` on x86 CPUs without AVX-512:
 * an AVX2-only EPYC) — the same numbers up to the accumulation order, at the f32 speed. */
static void matmul_rounded(float *y, const void *a, int a_bf16, const void *b, int b_bf16, int64_t batch, int64_t m,
                           int64_t n, int64_t k, int ta, int tb, int b_batched, int acc) {
  int64_t na = batch * m * k, nb = (b_batched ? batch : 1) * k * n;
  const float *ar = rounded(&scr_a, &cap_a, a, a_bf16, na), *br = rounded(&scr_b, &cap_b, b, b_bf16, nb);
  rt_matmul(batch, b_batched ? batch : 1, m, n, k, ta, tb, ar, br, acc ? 1.0f : 0.0f, y);
}

#ifdef SHARDRT_HAVE_DNNL
#include <dnnl.h>

#define DNNL_OK(call)                                                                              \
  do {                                                                                             \
    dnnl_status_t st_ = (call);                                                                    \
    if (st_ != dnnl_success) {                                                                     \
      fprintf(stderr, "rt_matmul_bf16: oneDNN %s failed (status %d)\n", #call, (int)st_);          \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

typedef struct {
  int64_t batch, bbatch, m, n, k;
  int ta, tb, acc; /* acc: y += the product (a sum post-op: beta 1) */
  dnnl_primitive_t prim;
  dnnl_memory_t src, wei, dst;
  char impl[64];
} Gemm;

static _Thread_local dnnl_engine_t eng;
static _Thread_local dnnl_stream_t strm;
static _Thread_local Gemm *cache;
static _Thread_local int ncache, capcache;

/* (batch, rows, cols) row-major with `tr`: stored as (batch, cols, rows), described by strides. */
static void md3(dnnl_memory_desc_t *md, dnnl_data_type_t dt, int64_t batch, int64_t rows, int64_t cols, int tr) {
  dnnl_dims_t dims = {batch, rows, cols};
  dnnl_dims_t strides = {rows * cols, tr ? 1 : cols, tr ? rows : 1};
  DNNL_OK(dnnl_memory_desc_init_by_strides(md, 3, dims, dt, strides));
}

static Gemm *gemm_for(int64_t batch, int64_t bbatch, int64_t m, int64_t n, int64_t k, int ta, int tb, int acc) {
  for (int i = 0; i < ncache; i++) {
    Gemm *g = &cache[i];
    if (g->batch == batch && g->bbatch == bbatch && g->m == m && g->n == n && g->k == k && g->ta == ta &&
        g->tb == tb && g->acc == acc)
      return g;
  }
  if (!eng) {
    DNNL_OK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DNNL_OK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
  }
  if (ncache == capcache) {
    capcache = capcache ? 2 * capcache : 16;
    cache = realloc(cache, (size_t)capcache * sizeof *cache);
    if (!cache) {
      fprintf(stderr, "rt_matmul_bf16: out of memory\n");
      exit(1);
    }
  }
  Gemm *g = &cache[ncache++];
  *g = (Gemm){.batch = batch, .bbatch = bbatch, .m = m, .n = n, .k = k, .ta = ta, .tb = tb, .acc = acc};
  dnnl_memory_desc_t a_md, b_md, y_md;
  md3(&a_md, dnnl_bf16, batch, m, k, ta);
  md3(&b_md, dnnl_bf16, bbatch, k, n, tb); /* bbatch 1 under batch > 1: oneDNN broadcasts it */
  md3(&y_md, dnnl_f32, batch, m, n, 0);
  dnnl_matmul_desc_t d;
  DNNL_OK(dnnl_matmul_desc_init(&d, &a_md, &b_md, NULL, &y_md));
  dnnl_primitive_desc_t pd;
  dnnl_primitive_attr_t attr = NULL;
  if (acc) { /* dst = the product + 1 x dst */
    dnnl_post_ops_t po;
    DNNL_OK(dnnl_post_ops_create(&po));
    DNNL_OK(dnnl_post_ops_append_sum(po, 1.0f));
    DNNL_OK(dnnl_primitive_attr_create(&attr));
    DNNL_OK(dnnl_primitive_attr_set_post_ops(attr, po));
    DNNL_OK(dnnl_post_ops_destroy(po));
  }
  dnnl_status_t st = dnnl_primitive_desc_create(&pd, &d, attr, eng, NULL);
  if (attr) DNNL_OK(dnnl_primitive_attr_destroy(attr));
  if (st == dnnl_unimplemented) { /* no bf16 matmul on this CPU: matmul_rounded (g->prim stays NULL) */
    snprintf(g->impl, sizeof g->impl, "f32 sgemm on bf16-rounded inputs (no oneDNN bf16 matmul here)");
    return g;
  }
  DNNL_OK(st);
  const char *impl = NULL;
  DNNL_OK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
  snprintf(g->impl, sizeof g->impl, "%s", impl ? impl : "?");
  DNNL_OK(dnnl_primitive_create(&g->prim, pd));
  DNNL_OK(dnnl_primitive_desc_destroy(pd));
  DNNL_OK(dnnl_memory_create(&g->src, &a_md, eng, DNNL_MEMORY_NONE));
  DNNL_OK(dnnl_memory_create(&g->wei, &b_md, eng, DNNL_MEMORY_NONE));
  DNNL_OK(dnnl_memory_create(&g->dst, &y_md, eng, DNNL_MEMORY_NONE));
  return g;
}

static _Thread_local const char *last_impl = "none";

static void matmul_bf16(float *y, const void *a, int a_bf16, const void *b, int b_bf16, int64_t batch, int64_t m,
                        int64_t n, int64_t k, int ta, int tb, int b_batched, int acc) {
  int64_t bbatch = b_batched ? batch : 1;
  if (batch == 0 || m == 0 || n == 0) return;
  if (k == 0) {
    if (!acc) rt_fill_f32(y, batch * m * n, 0.0f);
    return;
  }
  int64_t gb = batch, gm = m;
  if (bbatch == 1 && !ta) { /* shared B: one (batch*m) x k GEMM */
    gm *= batch;
    gb = 1;
  }
  Gemm *g = gemm_for(gb, bbatch, gm, n, k, ta, tb, acc);
  last_impl = g->impl;
  if (!g->prim) {
    matmul_rounded(y, a, a_bf16, b, b_bf16, batch, m, n, k, ta, tb, b_batched, acc);
    return;
  }
  const uint16_t *a16 = a, *b16 = b; /* an operand already in bf16 is read as it is */
  if (!a_bf16) {
    uint16_t *s = grow(&scr_a, &cap_a, (size_t)(batch * m * k) * 2);
    rt_cvt_f32_bf16(batch * m * k, a, s);
    a16 = s;
  }
  if (!b_bf16) {
    uint16_t *s = grow(&scr_b, &cap_b, (size_t)(bbatch * k * n) * 2);
    rt_cvt_f32_bf16(bbatch * k * n, b, s);
    b16 = s;
  }
  DNNL_OK(dnnl_memory_set_data_handle(g->src, (void *)a16));
  DNNL_OK(dnnl_memory_set_data_handle(g->wei, (void *)b16));
  DNNL_OK(dnnl_memory_set_data_handle(g->dst, y));
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, g->src}, {DNNL_ARG_WEIGHTS, g->wei}, {DNNL_ARG_DST, g->dst}};
  DNNL_OK(dnnl_primitive_execute(g->prim, strm, 3, args));
  DNNL_OK(dnnl_stream_wait(strm));
}

const char *rt_matmul_bf16_impl(void) { return last_impl; }

#else /* no oneDNN: the f32 GEMM on the inputs rounded to bf16 */

static void matmul_bf16(float *y, const void *a, int a_bf16, const void *b, int b_bf16, int64_t batch, int64_t m,
                        int64_t n, int64_t k, int ta, int tb, int b_batched, int acc) {
  matmul_rounded(y, a, a_bf16, b, b_bf16, batch, m, n, k, ta, tb, b_batched, acc);
}

const char *rt_matmul_bf16_impl(void) { return "f32 sgemm on bf16-rounded inputs (built without oneDNN)"; }

#endif

void rt_matmul_bf16_in(float *y, const void *a, int a_bf16, const void *b, int b_bf16, int64_t batch, int64_t m,
                       int64_t n, int64_t k, int ta, int tb, int b_batched) {
  rt_matmul_count(batch, m, n, k);
  matmul_bf16(y, a, a_bf16, b, b_bf16, batch, m, n, k, ta, tb, b_batched, 0);
}

void rt_matmul_bf16_acc_in(float *y, const float *c, const void *a, int a_bf16, const void *b, int b_bf16, int64_t batch,
                           int64_t m, int64_t n, int64_t k, int ta, int tb, int b_batched) {
  if (y != c) memmove(y, c, (size_t)(batch * m * n) * sizeof(float));
  rt_matmul_count(batch, m, n, k);
  matmul_bf16(y, a, a_bf16, b, b_bf16, batch, m, n, k, ta, tb, b_batched, 1);
}

void rt_matmul_bf16(float *y, const float *a, const float *b, int64_t batch, int64_t m, int64_t n, int64_t k,
                    int ta, int tb, int b_batched) {
  rt_matmul_bf16_in(y, a, 0, b, 0, batch, m, n, k, ta, tb, b_batched);
}
