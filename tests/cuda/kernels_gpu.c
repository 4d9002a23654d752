/* tests/cuda/kernels_gpu.c — the kernel cases of kcases.c on a real GPU (NVRTC for the device's
 * arch, the CUDA driver API), then each kernel family at GPT-2 124M training shapes (B 8, T 1024,
 * bf16 activations) timed against its floor: bytes moved / the device's measured copy bandwidth
 * (attention: FLOPs, reported as TFLOP/s). Run by tests/gpu/run_gpu.sh; exits non-zero when a
 * check fails. Usage: cuda_kernels_gpu [--no-perf | --perf-only | --compile ARCH [DIR]]; SHARDK_ATTN_SWEEP=1 adds the attention
 * tile sweep (flash_sweep.h), SHARDK_ATTN_SWEEP=only runs the sweep alone; SHARDK_BYTES_SWEEP=1 (or only) the same
 * for the bytes-bound kernels' variants (cuk_set_variant: norms, rope, reduce_to, embed, embed_bwd, transpose, each variant
 * checked by the cases). */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuk_launch.h"
#include "flash_sweep.h"
#include "kcases.h"
#include "nvrtc_parts.h"

#define CU_CHECK(call)                                                                 \
  do {                                                                                 \
    CUresult r_ = (call);                                                              \
    if (r_ != CUDA_SUCCESS) {                                                          \
      const char *s_ = "?";                                                            \
      cuGetErrorString(r_, &s_);                                                       \
      fprintf(stderr, "%s:%d: %s: %s (%d)\n", __FILE__, __LINE__, #call, s_, (int)r_); \
      exit(2);                                                                         \
    }                                                                                  \
  } while (0)

static CUmodule mods[CUDAK_PARTS]; /* the loaded program's parts (nvrtc_parts.h) */
static int nmods, *part_of, nkern;
static char arch[32];

static void *g_alloc(size_t n) {
  CUdeviceptr p;
  CU_CHECK(cuMemAlloc(&p, n + 64));
  CU_CHECK(cuMemsetD8(p, 0, n + 64));
  return (void *)(uintptr_t)p;
}
static void g_free(void *p) { CU_CHECK(cuMemFree((CUdeviceptr)(uintptr_t)p)); }
static void g_h2d(void *d, const void *s, size_t n) { CU_CHECK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)d, s, n)); }
static void g_d2h(void *d, const void *s, size_t n) { CU_CHECK(cuMemcpyDtoH(d, (CUdeviceptr)(uintptr_t)s, n)); }
static CUfunction fn(int kernel) {
  char name[32];
  CUfunction f;
  snprintf(name, sizeof name, "k%d", kernel);
  if (kernel < 0 || kernel >= nkern) {
    fprintf(stderr, "no kernel %s in the loaded program (%d kernels)\n", name, nkern);
    exit(1);
  }
  CU_CHECK(cuModuleGetFunction(&f, mods[part_of[kernel]], name));
  return f;
}
/* above 48 KiB of dynamic shared memory a kernel must opt in (as runtime/cuda/ops.c does) */
static CUfunction fn_smem(int kernel, unsigned smem) {
  CUfunction f = fn(kernel);
  if (smem > 48 * 1024) CU_CHECK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem));
  return f;
}
static void g_launch(int kernel, const unsigned g[3], const unsigned b[3], unsigned smem, void **args) {
  CU_CHECK(cuLaunchKernel(fn_smem(kernel, smem), g[0], g[1], g[2], b[0], b[1], b[2], smem, NULL, args, NULL));
  CU_CHECK(cuCtxSynchronize());
}

static void parts_line(const CudakParts *p) {
  printf("%d kernels for %s in %d parts: %d compiled by NVRTC on %d threads (%.1f s of compiles, the slowest part %.1f s), "
         "%d from the cache; %.1f s\n",
         p->nkernels, arch, p->nparts, p->compiled, p->threads, p->part_sum, p->part_max, p->cached, p->seconds);
}

static void unload(void) {
  for (int j = 0; j < nmods; j++) CU_CHECK(cuModuleUnload(mods[j]));
  nmods = nkern = 0;
  free(part_of);
  part_of = NULL;
}

/* the program's kernels: compiled in parts on every core, or from the cubin cache (nvrtc_parts.h) */
static void load(const char *src) {
  CudakParts p;
  if (cudak_nvrtc_parts(src, arch, &p) != 0) exit(1);
  unload();
  for (int j = 0; j < p.nparts; j++) CU_CHECK(cuModuleLoadData(&mods[j], p.img[j]));
  nmods = p.nparts, nkern = p.nkernels, part_of = p.part_of;
  p.part_of = NULL;
  parts_line(&p);
  cudak_parts_free(&p);
}

/* ---- timing at training shapes ------------------------------------------------------------------ */

typedef struct {
  const char *name;
  const char *stmt;  /* its launches */
  double bytes;      /* moved at least once (the floor), 0: FLOP-bound */
  double flops;      /* for attention */
} Perf;

static void *pbuf[128];
static int npbuf;
static const char *pb(Arena *a, size_t bytes) {
  pbuf[npbuf] = g_alloc(bytes);
  return arena_printf(a, "b%d", npbuf++);
}

/* A statement's launches, parsed and resolved (functions, arguments) once: stmt_us times the launches alone, not the
 * host's parsing and cuModuleGetFunction (a few us a launch: more than a small kernel of the bytes sweep). */
typedef struct {
  CukLaunch L;
  CUfunction f;
  void *ptrs[CUKL_MAX_ARGS], *args[CUKL_MAX_ARGS];
  long long ints[CUKL_MAX_ARGS];
} Prepared;

static int prepare(const char *stmt, char *ws, Prepared *P, int max) {
  static CukLaunch L[40]; /* (the perf table's 16 sums of squares a kernel each: 32 launches) */
  int n = cukl_parse(stmt, L, max < 40 ? max : 40);
  if (n <= 0) {
    fprintf(stderr, "cannot parse %s\n", stmt);
    exit(1);
  }
  for (int i = 0; i < n; i++) {
    Prepared *q = &P[i];
    q->L = L[i];
    for (int j = 0; j < L[i].nargs; j++) {
      int id;
      long long off;
      const char *e = L[i].expr[j];
      if (L[i].is_int[j]) {
        q->ints[j] = strtoll(e, NULL, 10);
        q->args[j] = &q->ints[j];
        continue;
      }
      if (sscanf(e, "(b%d + %lld)", &id, &off) == 2) q->ptrs[j] = (char *)pbuf[id] + off;
      else if (sscanf(e, "b%d", &id) == 1) q->ptrs[j] = pbuf[id];
      else if (strcmp(e, "WS") == 0) q->ptrs[j] = ws;
      else if (sscanf(e, "(WS + %lld)", &off) == 1) q->ptrs[j] = ws + off;
      else {
        fprintf(stderr, "cannot resolve %s\n", e);
        exit(1);
      }
      q->args[j] = &q->ptrs[j];
    }
    q->f = fn_smem(L[i].kernel, L[i].smem);
  }
  return n;
}

static void launch_prepared(Prepared *P, int n) {
  for (int i = 0; i < n; i++) {
    const CukLaunch *L = &P[i].L;
    CU_CHECK(cuLaunchKernel(P[i].f, L->grid[0], L->grid[1], L->grid[2], L->block[0], L->block[1], L->block[2], L->smem,
                            NULL, P[i].args, NULL));
  }
}

static void run_stmt(const char *stmt, char *ws) {
  static Prepared P[40];
  launch_prepared(P, prepare(stmt, ws, P, 40));
}

/* microseconds per run of a statement: one warm-up, then 10 runs between two events (its launches prepared once) */
static double stmt_us(const char *stmt, char *ws) {
  CUevent e0, e1;
  CU_CHECK(cuEventCreate(&e0, 0));
  CU_CHECK(cuEventCreate(&e1, 0));
  static Prepared P[40];
  const int n = prepare(stmt, ws, P, 40);
  launch_prepared(P, n);
  CU_CHECK(cuCtxSynchronize());
  int reps = 10;
  CU_CHECK(cuEventRecord(e0, NULL));
  for (int r = 0; r < reps; r++) launch_prepared(P, n);
  CU_CHECK(cuEventRecord(e1, NULL));
  CU_CHECK(cuEventSynchronize(e1));
  float ms;
  CU_CHECK(cuEventElapsedTime(&ms, e0, e1));
  CU_CHECK(cuEventDestroy(e0));
  CU_CHECK(cuEventDestroy(e1));
  return ms * 1e3 / reps;
}

/* the copy floor: a 1 GiB device-to-device copy (read + write), bytes per second */
static double copy_bw(void) {
  CUevent e0, e1;
  CU_CHECK(cuEventCreate(&e0, 0));
  CU_CHECK(cuEventCreate(&e1, 0));
  size_t cb = (size_t)1 << 30;
  CUdeviceptr c0, c1;
  CU_CHECK(cuMemAlloc(&c0, cb));
  CU_CHECK(cuMemAlloc(&c1, cb));
  CU_CHECK(cuMemcpyDtoD(c1, c0, cb));
  CU_CHECK(cuEventRecord(e0, NULL));
  for (int r = 0; r < 5; r++) CU_CHECK(cuMemcpyDtoD(c1, c0, cb));
  CU_CHECK(cuEventRecord(e1, NULL));
  CU_CHECK(cuEventSynchronize(e1));
  float ms;
  CU_CHECK(cuEventElapsedTime(&ms, e0, e1));
  double bw = 5.0 * 2.0 * (double)cb / (ms * 1e-3);
  printf("\ncopy bandwidth %.0f GB/s (1 GiB cuMemcpyDtoD)\n", bw / 1e9);
  CU_CHECK(cuMemFree(c0));
  CU_CHECK(cuMemFree(c1));
  CU_CHECK(cuEventDestroy(e0));
  CU_CHECK(cuEventDestroy(e1));
  return bw;
}

/* The end of a timing pass: the device's error flag (workspace word 0) reported, its buffers freed. */
static void perf_end(Arena *a, char *ws) {
  int flag = 0;
  g_d2h(&flag, ws, 4);
  if (flag) printf("(device error flag %d)\n", flag);
  g_free(ws);
  for (int i = 0; i < npbuf; i++) g_free(pbuf[i]);
  npbuf = 0;
  arena_free(a);
}

static void perf(void) {
  Arena a;
  arena_init(&a);
  CuK *k = cuk_new(&a);
  const int64_t B = 8, T = 1024, C = 768, V = 50304, Vr = 50257, H = 12, hd = 64, N = B * T, NP = 124475904;
  Perf p[48];
  int np = 0;
  /* buffers (bf16 activations, f32 master weights and moments) */
  const char *x = pb(&a, (size_t)N * 4 * C * 2), *y = pb(&a, (size_t)N * 4 * C * 2), *z = pb(&a, (size_t)N * 4 * C * 2);
  const char *w = pb(&a, (size_t)C * 4), *bb = pb(&a, (size_t)C * 4), *dw = pb(&a, (size_t)C * 4),
             *db = pb(&a, (size_t)C * 4);
  const char *ids = pb(&a, (size_t)N * 4), *tab = pb(&a, (size_t)V * C * 2), *dtab = pb(&a, (size_t)V * C * 2);
  const char *lg = pb(&a, (size_t)N * V * 2), *dlg = pb(&a, (size_t)N * V * 2), *sc = pb(&a, 16), *loss = pb(&a, 16);
  const char *pp = pb(&a, (size_t)NP * 4), *pg = pb(&a, (size_t)NP * 2), *pm = pb(&a, (size_t)NP * 4),
             *pv = pb(&a, (size_t)NP * 4), *hyper = pb(&a, 16);
  const char *lse = pb(&a, (size_t)B * H * T * 4), *q = pb(&a, (size_t)N * C * 2), *kk = pb(&a, (size_t)N * C * 2),
             *v = pb(&a, (size_t)N * C * 2), *o = pb(&a, (size_t)N * C * 2), *dq = pb(&a, (size_t)N * C * 2),
             *dk = pb(&a, (size_t)N * C * 2), *dv = pb(&a, (size_t)N * C * 2);
  {
    int32_t *h = malloc((size_t)N * 4);
    for (int64_t i = 0; i < N; i++) h[i] = (int32_t)((i * 7919) % Vr);
    g_h2d(pbuf[atoi(ids + 1)], h, (size_t)N * 4);
    free(h);
    float hy[4] = {1e-4f, 1.0f, 10.0f, 0}, one = 1.0f;
    g_h2d(pbuf[atoi(hyper + 1)], hy, 16);
    g_h2d(pbuf[atoi(sc + 1)], &one, 4);
  }
  double nC = (double)N * C, nV = (double)N * V;
  CuEwChain ch = {.nin = 1, .nops = 1, .nout = 1};
  ch.shape = ir_shape(2, (int64_t[]){N, 4 * C});
  ch.in[0] = (CuEwIn){.ptr = x, .dt = DT_BF16, .shape = ch.shape};
  ch.ops[0] = (CuEwOp){OP_GELU, {-1, 0}, 0, DT_BF16};
  ch.out_op[0] = 0;
  ch.out_ptr[0] = y;
  p[np++] = (Perf){"gelu bf16 [8192, 3072]", cuk_elementwise(k, &ch), 2 * nC * 4 * 2, 0};
  ch.nin = 2;
  ch.in[1] = (CuEwIn){.ptr = z, .dt = DT_BF16, .shape = ch.shape};
  ch.ops[0] = (CuEwOp){OP_GELU_BWD, {-1, -2}, 0, DT_BF16};
  p[np++] = (Perf){"gelu_bwd bf16 [8192, 3072]", cuk_elementwise(k, &ch), 3 * nC * 4 * 2, 0};
  p[np++] = (Perf){"layernorm bf16 [8192, 768]",
                   cuk_layernorm(k, y, x, DT_BF16, w, bb, DT_F32, N, C, 1e-5), 2 * nC * 2, 0};
  p[np++] = (Perf){"layernorm_bwd bf16 [8192, 768]",
                   cuk_layernorm_bwd(k, z, NULL, dw, db, x, DT_BF16, w, DT_F32, y, N, C, 1e-5), 3 * nC * 2, 0};
  p[np++] = (Perf){"rmsnorm bf16 [8192, 768]", cuk_rmsnorm(k, y, x, DT_BF16, w, DT_F32, N, C, 1e-5), 2 * nC * 2, 0};
  p[np++] = (Perf){"rmsnorm_bwd bf16 [8192, 768]",
                   cuk_rmsnorm_bwd(k, z, NULL, dw, x, DT_BF16, w, DT_F32, y, N, C, 1e-5), 3 * nC * 2, 0};
  p[np++] = (Perf){"rope bf16 [8, 1024, 12*64]", cuk_rope(k, y, x, DT_BF16, B, T, H, hd, 10000.0, 0, 0), 2 * nC * 2, 0};
  p[np++] = (Perf){"transpose bf16 [8192, 768]", cuk_transpose(k, y, x, DT_BF16, 1, N, C), 2 * nC * 2, 0};
  Shape xs = ir_shape(2, (int64_t[]){N, C}), ys = ir_shape(1, (int64_t[]){C});
  p[np++] = (Perf){"reduce_to bf16 [8192, 768] -> [768]", cuk_reduce_to(k, dw, DT_F32, &ys, x, DT_BF16, &xs), nC * 2, 0};
  p[np++] = (Perf){"embed bf16 8192 x 768", cuk_embed(k, y, DT_BF16, tab, DT_BF16, ids, N, C, V, "0"), 2 * nC * 2, 0};
  p[np++] = (Perf){"embed_bwd bf16 V 50304", cuk_embed_bwd(k, dtab, DT_BF16, ids, x, DT_BF16, N, C, V, "0"),
                   nC * 2 + (double)V * C * 2, 0};
  p[np++] = (Perf){"cross_entropy bf16 [8192, 50304]", cuk_cross_entropy(k, loss, lg, DT_BF16, ids, N, V, Vr), nV * 2, 0};
  p[np++] = (Perf){"cross_entropy_bwd bf16 [8192, 50304]",
                   cuk_cross_entropy_bwd(k, dlg, lg, DT_BF16, ids, sc, N, V, Vr), 2 * nV * 2, 0};
  p[np++] = (Perf){"cross_entropy fused fwd+bwd bf16 [8192, 50304]",
                   cuk_cross_entropy_fused(k, loss, dlg, lg, DT_BF16, ids, sc, N, V, Vr), 2 * nV * 2, 0};
  { /* GPT-2 124M's training step (B 16, T 1024): the shapes it launches */
    const int64_t N2 = 2 * N;
    const char *x2 = pb(&a, (size_t)N2 * 4 * C * 2), *y2 = pb(&a, (size_t)N2 * C * 2), *z2 = pb(&a, (size_t)N2 * C * 2),
               *ids2 = pb(&a, (size_t)N2 * 4), *lg2 = pb(&a, (size_t)N2 * V * 2);
    int32_t *h = malloc((size_t)N2 * 4);
    for (int64_t i = 0; i < N2; i++) h[i] = (int32_t)((i * 7919) % Vr);
    g_h2d(pbuf[atoi(ids2 + 1)], h, (size_t)N2 * 4);
    free(h);
    Shape x2s = ir_shape(2, (int64_t[]){N2, 4 * C}), y2s = ir_shape(1, (int64_t[]){4 * C});
    p[np++] = (Perf){"reduce_to bf16 [16384, 3072] -> [3072]",
                     cuk_reduce_to(k, dw, DT_F32, &y2s, x2, DT_BF16, &x2s), (double)N2 * 4 * C * 2, 0};
    p[np++] = (Perf){"layernorm bf16 [16384, 768]", cuk_layernorm(k, y2, x2, DT_BF16, w, bb, DT_F32, N2, C, 1e-5),
                     2.0 * N2 * C * 2, 0};
    p[np++] = (Perf){"layernorm_bwd bf16 [16384, 768]",
                     cuk_layernorm_bwd(k, z2, NULL, dw, db, x2, DT_BF16, w, DT_F32, y2, N2, C, 1e-5), 3.0 * N2 * C * 2, 0};
    p[np++] = (Perf){"embed_bwd bf16 16384 ids V 50304", cuk_embed_bwd(k, dtab, DT_BF16, ids2, x2, DT_BF16, N2, C, V, "0"),
                     (double)N2 * C * 2 + (double)V * C * 2, 0};
    p[np++] = (Perf){"cross_entropy fused in place bf16 [16384, 50304]",
                     cuk_cross_entropy_fused(k, loss, lg2, lg2, DT_BF16, ids2, sc, N2, V, Vr), 2.0 * N2 * V * 2, 0};
  }
  p[np++] = (Perf){"sumsq f32 124M", cuk_sumsq(k, sc, pp, DT_F32, NP), (double)NP * 4, 0};
  { /* the gradient clip's sums of squares of GPT-2 124M's 16 bf16 gradients: a kernel pair each, or one launch
       (passes/fuse_sumsq.c) */
    static const int64_t len[16] = {38633472, 786432, 9216, 9216, 21233664, 27648, 7077888, 9216,
                                    9216,     9216,   28311552, 36864, 28311552, 9216, 768, 768};
    CuSumsqIn in[16];
    const char *each = "", *ysq = pb(&a, 16 * 4);
    int64_t off = 0;
    for (int i = 0; i < 16; off += len[i], i++) {
      in[i] = (CuSumsqIn){arena_printf(&a, "(%s + %lld)", pg, (long long)off * 2), DT_BF16, len[i], i};
      each = arena_printf(&a, "%s%s%s", each, i ? " " : "", cuk_sumsq(k, arena_printf(&a, "(%s + %d)", ysq, 4 * i),
                                                                       in[i].x, DT_BF16, len[i]));
    }
    p[np++] = (Perf){"clip sumsq 16 grads bf16, 2 launches each", each, (double)NP * 2, 0};
    p[np++] = (Perf){"clip sumsq_multi 16 grads bf16, 1 launch", cuk_sumsq_multi(k, ysq, 16, in), (double)NP * 2, 0};
  }
  p[np++] = (Perf){"adamw 124M (g bf16)", cuk_adamw(k, pp, pg, DT_BF16, pm, pv, hyper, NP, 0.9, 0.95, 1e-8, 0.1, NULL),
                   (double)NP * 26, 0};
  double fa = 4.0 * (double)B * H * T * T * hd / 2; /* causal: half the score matrix, 2 matmuls */
  p[np++] = (Perf){"sdpa fwd bf16 B8 T1024 H12 hd64 causal",
                   cuk_sdpa(k, o, lse, q, kk, v, DT_BF16, B, T, H, H, hd, 1, NULL), 0, fa};
  p[np++] = (Perf){"sdpa bwd bf16 B8 T1024 H12 hd64 causal",
                   cuk_sdpa_bwd(k, dq, dk, dv, q, kk, v, o, lse, x, DT_BF16, B, T, H, H, hd, 1, NULL), 0, 2.5 * fa};
  char *ws = g_alloc((size_t)cuk_workspace(k));
  load(cuk_source(k));
  double bw = copy_bw();
  printf("%-42s %10s %10s %8s\n", "kernel", "us", "floor us", "of floor");
  for (int i = 0; i < np; i++) {
    double us = stmt_us(p[i].stmt, ws);
    if (p[i].bytes > 0) {
      double floor_us = p[i].bytes / bw * 1e6;
      printf("%-42s %10.1f %10.1f %7.0f%%\n", p[i].name, us, floor_us, 100.0 * floor_us / us);
    } else {
      printf("%-42s %10.1f %10s %6.1f TFLOP/s\n", p[i].name, us, "-", p[i].flops / (us * 1e-6) / 1e12);
    }
  }
  perf_end(&a, ws);
}

/* ---- the bytes-bound kernels' variants side by side (SHARDK_BYTES_SWEEP) -------------------------------------- */

/* the registers / local bytes of a statement's kernels, "k12 128/40 k13 32/0" */
static const char *kernel_attrs(Arena *a, const char *stmt) {
  CukLaunch L[8];
  int n = cukl_parse(stmt, L, 8);
  const char *s = "";
  for (int i = 0; i < n; i++) {
    int regs, local;
    CU_CHECK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn(L[i].kernel)));
    CU_CHECK(cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn(L[i].kernel)));
    s = arena_printf(a, "%s%sk%d %d/%d", s, i ? " " : "", L[i].kernel, regs, local);
  }
  return s;
}

/* Each case's statement in every variant (cuk_set_variant; each checked by the cases above, cuda_kernels_emu too),
 * timed in 5 interleaved rounds (case by case, variant after variant); the median round per variant. */
static void bytes_sweep(void) {
  enum { NC = 18, ROUNDS = 5 };
  Arena a;
  arena_init(&a);
  CuK *k = cuk_new(&a);
  const int64_t B = 8, T = 1024, C = 768, N = B * T, N2 = 2 * N, L = 2048, V = 50304, Vr = 50257;
  const char *x = pb(&a, (size_t)N2 * 4 * C * 2), *y = pb(&a, (size_t)N2 * 4 * C * 2), *z = pb(&a, (size_t)N2 * 4 * C * 2);
  const char *ids = pb(&a, (size_t)N2 * 4), *tab = pb(&a, (size_t)V * C * 2), *dtab = pb(&a, (size_t)V * C * 2);
  { /* GPT-2's vocabulary, the perf table's ids: every row hit at most once */
    int32_t *h = malloc((size_t)N2 * 4);
    for (int64_t i = 0; i < N2; i++) h[i] = (int32_t)((i * 7919) % Vr);
    g_h2d(pbuf[atoi(ids + 1)], h, (size_t)N2 * 4);
    free(h);
  }
  const char *cr = pb(&a, (size_t)N2 * 4 * C * 2); /* the residual gradient's carry (passes/fuse_normres.c) */
  const char *w = pb(&a, (size_t)4 * C * 4), *bb = pb(&a, (size_t)4 * C * 4), *dw = pb(&a, (size_t)4 * C * 4),
             *db = pb(&a, (size_t)4 * C * 4);
  struct {
    const char *name;
    double bytes;
    const char *stmt[CUK_NVARIANTS];
  } c[NC];
  Shape xs = ir_shape(2, (int64_t[]){N, C}), ys = ir_shape(1, (int64_t[]){C}), x2s = ir_shape(2, (int64_t[]){N2, C}),
        x3s = ir_shape(2, (int64_t[]){N2, 4 * C}), y3s = ir_shape(1, (int64_t[]){4 * C});
  for (int v = 0; v < CUK_NVARIANTS; v++) {
    int i = 0;
    cuk_set_variant(k, v);
#define BCASE(nm, by, st) (c[i].name = (nm), c[i].bytes = (by), c[i++].stmt[v] = (st))
    BCASE("layernorm_bwd bf16 [8192, 768]", 3.0 * N * C * 2, cuk_layernorm_bwd(k, z, NULL, dw, db, x, DT_BF16, w, DT_F32, y, N, C, 1e-5));
    BCASE("layernorm_bwd bf16 [16384, 768]", 3.0 * N2 * C * 2,
          cuk_layernorm_bwd(k, z, NULL, dw, db, x, DT_BF16, w, DT_F32, y, N2, C, 1e-5));
    BCASE("rmsnorm bf16 [8192, 768]", 2.0 * N * C * 2, cuk_rmsnorm(k, y, x, DT_BF16, w, DT_F32, N, C, 1e-5));
    BCASE("rmsnorm_bwd bf16 [8192, 768]", 3.0 * N * C * 2, cuk_rmsnorm_bwd(k, z, NULL, dw, x, DT_BF16, w, DT_F32, y, N, C, 1e-5));
    BCASE("rmsnorm bf16 [8192, 2048]", 2.0 * N * L * 2, cuk_rmsnorm(k, y, x, DT_BF16, w, DT_F32, N, L, 1e-5));
    BCASE("rmsnorm_bwd bf16 [8192, 2048]", 3.0 * N * L * 2, cuk_rmsnorm_bwd(k, z, NULL, dw, x, DT_BF16, w, DT_F32, y, N, L, 1e-5));
    /* with the carry (the shapes of the Llama 509M and GPT-2 124M steps): the carry read too */
    BCASE("rmsnorm_bwd + carry bf16 [8192, 2048]", 4.0 * N * L * 2,
          cuk_rmsnorm_bwd(k, z, cr, dw, x, DT_BF16, w, DT_F32, y, N, L, 1e-5));
    BCASE("layernorm_bwd + carry bf16 [16384, 768]", 4.0 * N2 * C * 2,
          cuk_layernorm_bwd(k, z, cr, dw, db, x, DT_BF16, w, DT_F32, y, N2, C, 1e-5));
    BCASE("rope bf16 [8, 1024, 12*64]", 2.0 * N * C * 2, cuk_rope(k, y, x, DT_BF16, B, T, 12, 64, 10000.0, 0, 0));
    BCASE("rope bf16 [8, 1024, 16*128]", 2.0 * N * L * 2, cuk_rope(k, y, x, DT_BF16, B, T, 16, 128, 500000.0, 0, 0));
    BCASE("reduce_to bf16 [8192, 768] -> [768]", 1.0 * N * C * 2, cuk_reduce_to(k, dw, DT_F32, &ys, x, DT_BF16, &xs));
    BCASE("reduce_to bf16 [16384, 768] -> [768]", 1.0 * N2 * C * 2, cuk_reduce_to(k, dw, DT_F32, &ys, x, DT_BF16, &x2s));
    BCASE("reduce_to bf16 [16384, 3072] -> [3072]", 4.0 * N2 * C * 2, cuk_reduce_to(k, dw, DT_F32, &y3s, x, DT_BF16, &x3s));
    /* the embedding and the transpose (one-pass: shardk_bytes.cuh): dy read once and the table written; rows moved */
    BCASE("embed_bwd bf16 8192 ids V 50304", 1.0 * N * C * 2 + 1.0 * V * C * 2,
          cuk_embed_bwd(k, dtab, DT_BF16, ids, x, DT_BF16, N, C, V, "0"));
    BCASE("embed_bwd bf16 16384 ids V 50304", 1.0 * N2 * C * 2 + 1.0 * V * C * 2,
          cuk_embed_bwd(k, dtab, DT_BF16, ids, x, DT_BF16, N2, C, V, "0"));
    BCASE("embed bf16 8192 x 768", 2.0 * N * C * 2, cuk_embed(k, y, DT_BF16, tab, DT_BF16, ids, N, C, V, "0"));
    BCASE("transpose bf16 [8192, 768]", 2.0 * N * C * 2, cuk_transpose(k, y, x, DT_BF16, 1, N, C));
    BCASE("layernorm bf16 [8192, 768] (the same in all)", 2.0 * N * C * 2,
          cuk_layernorm(k, y, x, DT_BF16, w, bb, DT_F32, N, C, 1e-5));
#undef BCASE
  }
  cuk_set_variant(k, CUK_VAR_DEFAULT);
  char *ws = g_alloc((size_t)cuk_workspace(k));
  load(cuk_source(k));
  double bw = copy_bw();
  printf("bytes-bound kernels, variants side by side (median of %d interleaved rounds; regs/local bytes per kernel)\n",
         ROUNDS);
  printf("%-46s %-11s %9s %9s %8s  %s\n", "kernel", "variant", "us", "floor us", "of floor", "kernels");
  for (int i = 0; i < NC; i++) {
    double us[CUK_NVARIANTS][ROUNDS];
    for (int r = 0; r < ROUNDS; r++)
      for (int v = 0; v < CUK_NVARIANTS; v++) us[v][r] = stmt_us(c[i].stmt[v], ws);
    for (int v = 0; v < CUK_NVARIANTS; v++) {
      for (int r = 1; r < ROUNDS; r++) /* sort the rounds */
        for (int q = r; q > 0 && us[v][q] < us[v][q - 1]; q--) {
          double s = us[v][q];
          us[v][q] = us[v][q - 1], us[v][q - 1] = s;
        }
      double med = us[v][ROUNDS / 2], fl = c[i].bytes / bw * 1e6;
      printf("%-46s %-11s %9.1f %9.1f %7.0f%%  %s\n", v ? "" : c[i].name, cuk_variant_names[v], med, fl, 100.0 * fl / med,
             kernel_attrs(&a, c[i].stmt[v]));
    }
    fflush(stdout);
  }
  perf_end(&a, ws);
}

/* ---- the attention tile sweep (flash_sweep.c) ---------------------------------------------------- */

static const char *sweep_buf(Arena *a, size_t bytes, void **dev) {
  const char *e = pb(a, bytes);
  *dev = pbuf[npbuf - 1];
  return e;
}
static void sweep_run(const char *stmt, char *ws) {
  run_stmt(stmt, ws);
  CU_CHECK(cuCtxSynchronize());
}
static void sweep_attrs(int kernel, int *regs, int *local) {
  *regs = *local = -1;
  if (kernel < 0) return;
  CU_CHECK(cuFuncGetAttribute(regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn(kernel)));
  CU_CHECK(cuFuncGetAttribute(local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn(kernel)));
}
static int sweep(void) {
  SweepHost h = {sweep_buf, g_alloc, g_free, g_h2d, g_d2h, load, sweep_run, stmt_us, sweep_attrs, !strcmp(arch, "sm_90a")};
  int first = npbuf, fails = flash_sweep(&h);
  for (int i = first; i < npbuf; i++) g_free(pbuf[i]);
  npbuf = first;
  return fails;
}

/* --compile ARCH [DIR]: the case program compiled in parts into the cubin cache (no device needed), its parts also
 * written to DIR: tests/gpu/pack.sh carries them to the GPU machine, whose run then compiles nothing */
static int compile_only(const char *a, const char *dir) {
  snprintf(arch, sizeof arch, "%s", a);
  kc_wgmma(!strcmp(arch, "sm_90a"));
  Arena ar;
  arena_init(&ar);
  int64_t ws;
  int nk;
  CudakParts p;
  int rc = cudak_nvrtc_parts(kc_emit_all(&ar, &ws, &nk), arch, &p);
  if (rc == 0) parts_line(&p);
  if (rc == 0 && dir) rc = cudak_parts_save(&p, dir);
  cudak_parts_free(&p);
  arena_free(&ar);
  return rc ? 1 : 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* line by line, also into a file: a run cut short shows where it was */
  if (argc > 2 && !strcmp(argv[1], "--compile")) return compile_only(argv[2], argc > 3 ? argv[3] : NULL);
  const char *sw = getenv("SHARDK_ATTN_SWEEP"), *bs = getenv("SHARDK_BYTES_SWEEP");
  int only = (sw && strcmp(sw, "only") == 0) || (bs && strcmp(bs, "only") == 0);
  int do_sweep = sw && (strcmp(sw, "only") == 0 || strcmp(sw, "1") == 0),
      do_bytes = bs && (strcmp(bs, "only") == 0 || strcmp(bs, "1") == 0);
  int do_perf = !only && !(argc > 1 && strcmp(argv[1], "--no-perf") == 0),
      do_cases = !only && !(argc > 1 && strcmp(argv[1], "--perf-only") == 0);
  CU_CHECK(cuInit(0));
  CUdevice dev;
  CU_CHECK(cuDeviceGet(&dev, 0));
  int maj, min;
  CU_CHECK(cuDeviceGetAttribute(&maj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CU_CHECK(cuDeviceGetAttribute(&min, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  char name[256];
  CU_CHECK(cuDeviceGetName(name, sizeof name, dev));
  snprintf(arch, sizeof arch, "sm_%d%d%s", maj, min, maj == 9 && min == 0 ? "a" : ""); /* 9.0: sm_90a, as the runtime */
  kc_wgmma(maj == 9 && min == 0); /* the wgmma attention (shardk_wgmma.cuh) where it is built */
  printf("device: %s (%s)\n", name, arch);
  CUcontext ctx;
  CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU_CHECK(cuCtxSetCurrent(ctx));
  int fails = 0;
  if (do_cases) {
    Arena a;
    arena_init(&a);
    int64_t ws;
    int nk;
    const char *src = kc_emit_all(&a, &ws, &nk);
    load(src);
    KBackend be = {g_alloc, g_free, g_h2d, g_d2h, g_launch};
    fails = kc_run_all(&be, ws);
    arena_free(&a);
  }
  if (do_perf) perf();
  if (do_bytes) bytes_sweep();
  if (do_sweep) fails += sweep();
  unload();
  CU_CHECK(cuDevicePrimaryCtxRelease(dev));
  return fails ? 1 : 0;
}
