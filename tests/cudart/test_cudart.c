/* tests/cudart/test_cudart.c — the CUDA runtime (runtime/cuda/) without a GPU.
 *
 *   emu     a hand-made program with two inline kernels on the emulated device (SHARDRT_DEVICE=emu):
 *           rt_cu_launch (plain and with dynamic shared memory + __syncthreads), rt_cu_copy, zero,
 *           put, copy_block and rt_cu_matmul (f32 and bf16 in, f32 and bf16 out, ta/tb, batched,
 *           shared B, alpha/beta) and rt_cu_matmul_ep (bias; bias + GELU with the pre-activation;
 *           bias + residual, in place too) and rt_cu_matmul_dgelu (GELU's backward; with the bias
 *           gradient in the GEMM, SHARDRT_GEMM_BGRAD=fused, or left to the caller, the default)
 *           against naive references; refused epilogues (SHARDRT_EMU_NO_EPILOGUE) return 0 and write
 *           nothing, one of DGELU / DGELU_BGRAD refused runs the other; the GEMMs again with the
 *           autotuning's candidate loop (SHARDRT_GEMM_AUTOTUNE=8); the kernel .so comes from the
 *           cache the second time
 *   gpu     the same on the real GPU (SHARDRT_DEVICE=cuda; tests/gpu/run_gpu.sh runs it), the GEMMs
 *           autotuned (the default there: every GEMM key's fastest of cuBLASLt's first 8 candidates),
 *           and attn's checks there
 *   attn    the attention tile autotuning's launch, rt_cu_launch_tuned (cudart_attn_tune.c)
 *   gemmrec the GEMM autotuning's record per rank (cudart_gemm_tune.c)
 *   nvrtc   the same source compiled by NVRTC for sm_80 and sm_90 (cubins: ELF), the second time
 *           from the on-disk cache; a broken source prints NVRTC's log and fails
 *   nogpu   opening the real CUDA device on a machine without a driver fails with the clear message
 *           (skipped, exit 77, where a GPU opens); SHARDRT_DEVICE=bogus is refused; the trainer of a
 *           device program exits 1 with that message
 *   train   rt_train_main on a device program (bigram.h as one serial kernel per step function) on
 *           the device of SHARDRT_DEVICE (default here: emu) against the same model as a CPU program:
 *           losses, grad norms, validation, the --dump-steps file, the checkpoints (byte for byte)
 *           and the greedy sample are identical on the emulated device; on a GPU (SHARDRT_DEVICE=cuda)
 *           the numbers agree within 1e-5 (logs relative, tensors absolute); a run stopped at step 5
 *           and resumed equals the straight run byte for byte on either
 *
 * Tolerances: f32 GEMMs 1e-5 relative to sum |a||b|; bf16 outputs add half a bf16 ulp (2^-8 relative).
 */
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cu_internal.h"
#include "cuda_ops.h"
#include "device.h"
#include "dtype.h"
#include "train/train.h"
#include "st_compare.h"
#include "cudart_test.h"

int failures;


const char *kSource =
    "#include \"shardk.cuh\"\n"
    "extern \"C\" __global__ void k0(float *y, const float *x, float s, int n) {\n"
    "  int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);\n"
    "  if (i < n) y[i] = s * x[i];\n"
    "}\n"
    "SK_EMU_ENTRY(k0, (SK_ARG(0, float *), SK_ARG(1, const float *), SK_ARG(2, float), SK_ARG(3, int)))\n"
    "/* per-block sums through dynamic shared memory and barriers */\n"
    "extern \"C\" __global__ void k1(float *y, const float *x, int n) {\n"
    "  float *sh = (float *)SK_DYN_SMEM();\n"
    "  int t = (int)threadIdx.x, i = (int)(blockIdx.x * blockDim.x) + t;\n"
    "  sh[t] = i < n ? x[i] : 0.0f;\n"
    "  __syncthreads();\n"
    "  for (int s = (int)blockDim.x / 2; s > 0; s >>= 1) {\n"
    "    if (t < s) sh[t] += sh[t + s];\n"
    "    __syncthreads();\n"
    "  }\n"
    "  if (t == 0) y[blockIdx.x] = sh[0];\n"
    "}\n"
    "SK_EMU_ENTRY(k1, (SK_ARG(0, float *), SK_ARG(1, const float *), SK_ARG(2, int)))\n";

/* ---- helpers ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((double)(rng >> 11) * 0x1.0p-53 * 2 - 1);
}

static float bf2f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

/* stderr into a file while fn runs; returns what was written (caller frees) */
static char *capture_stderr(int (*fn)(void *), void *arg, int *rc) {
  char path[] = "/tmp/cudart-stderr-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    perror("mkstemp");
    exit(2);
  }
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  *rc = fn(arg);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  size_t n = 0;
  char *text = rt_cu_read_file(path, &n);
  unlink(path);
  return text ? text : strdup("");
}

/* ---- emu ---- */

static const RtCudaCode code = {.source = NULL, .nkernels = 2};

static RtProgram make_program(const RtCudaCode *c, int64_t bytes) {
  RtProgram p;
  memset(&p, 0, sizeof p);
  p.model = "cudart-test";
  p.mem_bytes = bytes;
  p.device = &rt_cuda_device;
  p.cuda = c;
  return p;
}

static void matmul_case(RtCtx *ctx, char *M, int ab_dt, int y_dt, int64_t batch, int64_t m, int64_t n, int64_t k,
                        int ta, int tb, int bb, float alpha, float beta) {
  size_t es = ab_dt == RT_BF16 ? 2 : 4, ys = y_dt == RT_BF16 ? 2 : 4;
  int64_t na = batch * m * k, nb = (bb ? batch : 1) * k * n, ny = batch * m * n;
  float *a = malloc((size_t)na * 4), *b = malloc((size_t)nb * 4), *y0 = malloc((size_t)ny * 4);
  char *ha = malloc((size_t)na * es), *hb = malloc((size_t)nb * es), *hy = malloc((size_t)ny * ys);
  for (int64_t i = 0; i < na; i++) {
    a[i] = frand();
    if (es == 2) a[i] = bf2f(((uint16_t *)ha)[i] = f2bf(a[i])); else ((float *)ha)[i] = a[i];
  }
  for (int64_t i = 0; i < nb; i++) {
    b[i] = frand();
    if (es == 2) b[i] = bf2f(((uint16_t *)hb)[i] = f2bf(b[i])); else ((float *)hb)[i] = b[i];
  }
  for (int64_t i = 0; i < ny; i++) {
    y0[i] = frand();
    if (ys == 2) y0[i] = bf2f(((uint16_t *)hy)[i] = f2bf(y0[i])); else ((float *)hy)[i] = y0[i];
  }
  /* device layout: A, B, y one after another at odd offsets, each aligned to its own element only (an f32 y
   * after bf16 inputs is rounded up to 4 bytes: a misaligned f32 pointer faults on a GPU) */
  char *da = M + 4096 + es, *db = da + na * (int64_t)es + 4 * es, *dy = db + nb * (int64_t)es + 8;
  dy += (ys - (uintptr_t)dy % ys) % ys;
  if ((uintptr_t)dy % 16 == 0) dy += ys;
  rt_cuda_device.upload(ctx, da, ha, na * (int64_t)es);
  rt_cuda_device.upload(ctx, db, hb, nb * (int64_t)es);
  rt_cuda_device.upload(ctx, dy, hy, ny * (int64_t)ys);
  rt_cu_matmul(ctx, dy, y_dt, da, db, ab_dt, batch, m, n, k, ta, tb, bb, alpha, beta);
  rt_cuda_device.download(ctx, hy, dy, ny * (int64_t)ys);
  double worst = 0;
  for (int64_t bi = 0; bi < batch; bi++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = 0, mag = 0;
        for (int64_t l = 0; l < k; l++) {
          double av = a[bi * m * k + (ta ? l * m + i : i * k + l)];
          double bv = b[(bb ? bi : 0) * k * n + (tb ? j * k + l : l * n + j)];
          s += av * bv;
          mag += fabs(av * bv);
        }
        int64_t yi = bi * m * n + i * n + j;
        double ref = alpha * s + beta * y0[yi];
        double got = ys == 2 ? bf2f(((uint16_t *)hy)[yi]) : ((float *)hy)[yi];
        double tol = 1e-5 * (fabs(alpha) * mag + fabs(beta * y0[yi])) + 1e-30 + (ys == 2 ? fabs(ref) / 256 : 0);
        double err = fabs(got - ref);
        if (err / (tol > 0 ? tol : 1) > worst) worst = err / tol;
        if (err > tol && failures < 20)
          CHECK(0, "matmul %s->%s batch %lld m %lld n %lld k %lld ta %d tb %d bb %d: y[%lld] = %.9g, want %.9g",
                ab_dt == RT_BF16 ? "bf16" : "f32", y_dt == RT_BF16 ? "bf16" : "f32", (long long)batch, (long long)m,
                (long long)n, (long long)k, ta, tb, bb, (long long)yi, got, ref);
      }
  printf("matmul %-4s -> %-4s batch %lld %3lld x %3lld x %3lld ta %d tb %d b_batched %d: worst error %.3f of the "
         "tolerance\n",
         ab_dt == RT_BF16 ? "bf16" : "f32", y_dt == RT_BF16 ? "bf16" : "f32", (long long)batch, (long long)m,
         (long long)n, (long long)k, ta, tb, bb, worst);
  free(a), free(b), free(y0), free(ha), free(hb), free(hy);
}

/* rt_cu_matmul_ep (the fused GEMM epilogues of passes/epilogue.c) against a double reference: mode 0 bias,
 * 1 bias + GELU with the pre-activation in aux, 2 bias + a residual c, 3 the same with c == y (in place);
 * rt_cu_matmul_dgelu: 4 GELU's backward with c as the pre-activation, 5 the same with the bias gradient
 * in the GEMM (SHARDRT_GEMM_BGRAD=fused: DGELU_BGRAD, into aux; its tolerance: the sum of the
 * elements'), 6 the bias gradient asked with the default policy (split: y as mode 4, RT_CU_EP_NO_BGRAD
 * returned and aux not written); 7 and 8: modes 2 and 3 without a bias (the residual alone: cuBLASLt's
 * DEFAULT epilogue with C, beta 1; bias NULL).
 * Tolerance: matmul_case's on t = AB + bias (plus |bias|, |c|), GELU's slope (<= 1.13) on it, bf16's
 * half ulp on each output and on the two values the unfused nodes round before it (AB, t: the
 * emulated device computes as they do), 1e-6 relative for f32 GELU's tanhf. */
static void matmul_ep_case(RtCtx *ctx, char *M, int dt, int64_t m, int64_t n, int64_t k, int ta, int tb, int mode) {
  const int nobias = mode >= 7; /* as 2 / 3, no bias */
  if (nobias) mode -= 5;
  size_t es = dt == RT_BF16 ? 2 : 4;
  int64_t na = m * k, nb = k * n, ny = m * n, nv = na + nb + n + ny; /* a, b, bias, c: one random vector */
  float *v = malloc((size_t)nv * 4);
  char *h = malloc((size_t)nv * es), *hy = malloc((size_t)ny * es), *haux = malloc((size_t)ny * es);
  for (int64_t i = 0; i < nv; i++) {
    v[i] = frand();
    if (es == 2) v[i] = bf2f(((uint16_t *)h)[i] = f2bf(v[i])); else ((float *)h)[i] = v[i];
  }
  if (nobias)
    for (int64_t j = 0; j < n; j++) v[na + nb + j] = 0; /* the reference's bias: none (the device gets NULL) */
  const float *a = v, *b = v + na, *bias = b + nb, *c = bias + n;
  char *da = M + 4096, *db = da + na * (int64_t)es, *dbias = db + nb * (int64_t)es, *dc = dbias + n * (int64_t)es;
  char *dy = mode == 3 ? dc : dc + ny * (int64_t)es, *daux = dy + ny * (int64_t)es;
  rt_cuda_device.upload(ctx, da, h, nv * (int64_t)es);
  const unsigned char mark = 0xa5;
  if (mode == 6) { /* aux must stay as it is */
    memset(haux, mark, (size_t)n * es);
    rt_cuda_device.upload(ctx, daux, haux, n * (int64_t)es);
  }
  int ran;
  if (mode == 5) setenv("SHARDRT_GEMM_BGRAD", "fused", 1);
  if (mode >= 4)
    ran = rt_cu_matmul_dgelu(ctx, "matmul_ep_case", dy, dt, da, db, dt, m, n, k, ta, tb, dc, mode >= 5 ? daux : NULL);
  else
    ran = rt_cu_matmul_ep(ctx, "matmul_ep_case", dy, dt, da, db, dt, m, n, k, ta, tb, nobias ? NULL : dbias, mode >= 2 ? dc : NULL,
                          mode == 1 ? daux : NULL);
  unsetenv("SHARDRT_GEMM_BGRAD");
  CHECK(ran == (mode == 6 ? RT_CU_EP_NO_BGRAD : RT_CU_EP_ALL), "matmul_ep mode %d: returned %d: the device has no algorithm for the epilogue", mode, ran);
  rt_cuda_device.download(ctx, hy, dy, ny * (int64_t)es);
  if (mode == 1 || mode >= 5) rt_cuda_device.download(ctx, haux, daux, (mode >= 5 ? n : ny) * (int64_t)es);
  if (mode == 6)
    for (int64_t i = 0; i < n * (int64_t)es; i++)
      if ((unsigned char)haux[i] != mark) {
        CHECK(0, "matmul_dgelu split: the bias gradient's bytes were written (byte %lld)", (long long)i);
        break;
      }
  double worst = 0;
  for (int64_t j = 0; j < n; j++) {
    double db_ref = 0, db_tol = 0;
    for (int64_t i = 0; i < m; i++) {
      double s = 0, mag = 0;
      for (int64_t l = 0; l < k; l++) {
        double p = (double)a[ta ? l * m + i : i * k + l] * b[tb ? j * k + l : l * n + j];
        s += p, mag += fabs(p);
      }
      int64_t q = i * n + j;
      /* bf16: the emulated device rounds the GEMM's result and t, as the unfused nodes ((|s| + |t|) / 256) */
      double t = s + bias[j], tol_t = 1e-5 * (mag + fabs(bias[j]) + (mode >= 2 ? fabs(c[q]) : 0)) + 1e-30 +
                                      (es == 2 ? (fabs(s) + fabs(t)) / 256 : 0);
      double ref = t, tol = tol_t;
      if (mode >= 4) { /* y = gelu'(pre) acc: the slope of gelu' is below 1.13 too */
        double x = c[q], th = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
        double d = 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
        ref = d * s, tol = 1.13 * 1e-5 * mag + 1e-6 * fabs(ref) + 1e-30 + (es == 2 ? 1.13 * fabs(s) / 256 : 0);
        db_ref += ref, db_tol += tol + (es == 2 ? fabs(ref) / 256 : 0);
      } else if (mode == 1) {
        double aux = es == 2 ? bf2f(((uint16_t *)haux)[q]) : ((float *)haux)[q];
        double tol_aux = tol_t + (es == 2 ? fabs(t) / 256 : 0);
        CHECK(fabs(aux - t) <= tol_aux, "matmul_ep gelu aux[%lld] = %.9g, want %.9g", (long long)q, aux, t);
        ref = 0.5 * t * (1.0 + tanh(0.7978845608028654 * (t + 0.044715 * t * t * t)));
        tol = 1.13 * tol_t + 1e-6 * (fabs(t) + 1e-3);
      } else if (mode >= 2) {
        ref = c[q] + t;
      }
      tol += es == 2 ? fabs(ref) / 256 : 0;
      double got = es == 2 ? bf2f(((uint16_t *)hy)[q]) : ((float *)hy)[q], err = fabs(got - ref);
      if (err / tol > worst) worst = err / tol;
      if (err > tol && failures < 20)
        CHECK(0, "matmul_ep %s mode %d m %lld n %lld k %lld ta %d tb %d: y[%lld] = %.9g, want %.9g",
              dt == RT_BF16 ? "bf16" : "f32", mode, (long long)m, (long long)n, (long long)k, ta, tb, (long long)q, got, ref);
    }
    if (mode == 5) {
      double got = es == 2 ? bf2f(((uint16_t *)haux)[j]) : ((float *)haux)[j];
      db_tol += es == 2 ? fabs(db_ref) / 256 : 1e-6 * fabs(db_ref);
      if (fabs(got - db_ref) / db_tol > worst) worst = fabs(got - db_ref) / db_tol;
      CHECK(fabs(got - db_ref) <= db_tol, "matmul_dgelu %s bias gradient[%lld] = %.9g, want %.9g",
            dt == RT_BF16 ? "bf16" : "f32", (long long)j, got, db_ref);
    }
  }
  printf("matmul_ep %-4s %3lld x %3lld x %3lld ta %d tb %d %s: worst error %.3f of the tolerance\n",
         dt == RT_BF16 ? "bf16" : "f32", (long long)m, (long long)n, (long long)k, ta, tb,
         nobias ? (mode == 2 ? "residual, no bias" : "residual in place, no bias")
                : (const char *[]){"bias", "bias+gelu (aux)", "bias+residual", "bias+residual in place", "dgelu",
                                   "dgelu+bgrad", "dgelu, bgrad left"}[mode],
         worst);
  free(v), free(h), free(hy), free(haux);
}

/* The launch / copy / GEMM checks on the device `which` ("emu", or "cuda" on a GPU machine). */
static int test_device(const char *which) {
  setenv("SHARDRT_DEVICE", which, 1);
  RtCudaCode c = code;
  c.source = kSource;
  int64_t bytes = 8 << 20;
  RtProgram p = make_program(&c, bytes);
  for (int round = 0; round < 2; round++) {
    RtCtx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.world = 1, ctx.threads = 1;
    char *M = NULL;
    int rc = rt_cuda_device.open(&p, &ctx, bytes, &M);
    CHECK(rc == 0 && M, "open of the %s device failed", which);
    if (rc != 0) return 1;
    char desc[256];
    rt_cuda_device.describe(&ctx, desc, sizeof desc);
    printf("device: %s\n", desc);
    if (round == 1) CHECK(strstr(desc, "from the cache") != NULL, "the second open did not use the cache: %s", desc);
    if (round == 0 && !strcmp(which, "cuda")) printf("bf16 peak: %.1f TFLOP/s\n", rt_cuda_device.peak_flops(&ctx) / 1e12);

    /* k0: y = 3 x over 1000 elements with 256-thread blocks */
    enum { N = 1000 };
    float hx[N], hy[N];
    for (int i = 0; i < N; i++) hx[i] = frand();
    char *dx = M, *dy = M + 4 * N;
    rt_cuda_device.upload(&ctx, dx, hx, sizeof hx);
    float s = 3.0f;
    int n = N;
    void *args0[] = {&dy, &dx, &s, &n};
    rt_cu_launch(&ctx, 0, (N + 255) / 256, 1, 1, 256, 1, 1, 0, args0);
    rt_cuda_device.download(&ctx, hy, dy, sizeof hy);
    for (int i = 0; i < N; i++) CHECK(hy[i] == 3.0f * hx[i], "k0: y[%d] = %g, want %g", i, hy[i], 3.0f * hx[i]);

    /* k1: block sums with dynamic shared memory (128 threads, 512 bytes) */
    char *ds = M + 8 * N;
    void *args1[] = {&ds, &dx, &n};
    int nb = (N + 127) / 128;
    rt_cu_launch(&ctx, 1, (unsigned)nb, 1, 1, 128, 1, 1, 128 * 4, args1);
    float sums[8];
    rt_cuda_device.download(&ctx, sums, ds, 4 * nb);
    for (int b = 0; b < nb; b++) {
      double ref = 0;
      for (int i = b * 128; i < N && i < (b + 1) * 128; i++) ref += hx[i];
      CHECK(fabs(sums[b] - ref) <= 1e-5 * 128, "k1: block %d sum %g, want %g", b, sums[b], ref);
    }

    /* copy, put, zero */
    rt_cu_copy(&ctx, M + 16 * N, dx, 4 * N);
    float v = 42.5f;
    rt_cu_put(&ctx, M + 16 * N + 4 * 7, &v, 4);
    rt_cu_zero(&ctx, M + 16 * N + 4 * 10, 4 * 5);
    rt_cuda_device.sync(&ctx);
    rt_cuda_device.download(&ctx, hy, M + 16 * N, sizeof hy);
    for (int i = 0; i < N; i++) {
      float want = i == 7 ? 42.5f : (i >= 10 && i < 15) ? 0.0f : hx[i];
      CHECK(hy[i] == want, "copy/put/zero: [%d] = %g, want %g", i, hy[i], want);
    }

    /* copy_block: dst [outer, 9, inner] at 2 <- src [outer, 7, inner] at 3, len 4 (2 bytes per element) */
    int64_t outer = 5, inner = 6, sd = 7, dd = 9, sa = 3, da = 2, len = 4;
    uint16_t src[5 * 7 * 6], dst[5 * 9 * 6], got[5 * 9 * 6];
    for (int i = 0; i < 5 * 7 * 6; i++) src[i] = (uint16_t)(1000 + i);
    for (int i = 0; i < 5 * 9 * 6; i++) dst[i] = (uint16_t)i;
    char *dsrc = M + 65536, *ddst = M + 131072;
    rt_cuda_device.upload(&ctx, dsrc, src, sizeof src);
    rt_cuda_device.upload(&ctx, ddst, dst, sizeof dst);
    rt_cu_copy_block(&ctx, ddst, dd, da, dsrc, sd, sa, outer, len, inner, 2);
    rt_cuda_device.download(&ctx, got, ddst, sizeof got);
    for (int64_t o = 0; o < outer; o++)
      for (int64_t l = 0; l < len; l++)
        for (int64_t i = 0; i < inner; i++) dst[(o * dd + da + l) * inner + i] = src[(o * sd + sa + l) * inner + i];
    CHECK(!memcmp(got, dst, sizeof dst), "copy_block differs from the reference");
    /* the contiguous case: whole rows */
    rt_cu_copy_block(&ctx, ddst, 7, 0, dsrc, 7, 0, outer, 7, inner, 2);
    rt_cuda_device.download(&ctx, got, ddst, sizeof src);
    CHECK(!memcmp(got, src, sizeof src), "contiguous copy_block differs");

    if (round == 0) {
      /* GEMMs; on the emulated device twice: the second time with the autotuning's candidate loop at
       * each GEMM key's first call (SHARDRT_GEMM_AUTOTUNE=8: the default on a GPU), whose timing runs
       * must leave what the real call reads alone (beta != 0, the residual in place) */
      int passes = strcmp(which, "emu") == 0 ? 2 : 1;
      const char *cache0 = getenv("SHARDRT_CUBIN_CACHE");
      char *cache_keep = cache0 ? strdup(cache0) : NULL, rec_dir[] = "/tmp/cudart-gemmrec-XXXXXX";
      for (int pass = 0; pass < passes; pass++) {
        if (pass == 1) setenv("SHARDRT_GEMM_AUTOTUNE", "8", 1);
        if (pass == passes - 1 && mkdtemp(rec_dir)) /* the tuned pass: no earlier run's record (its choices are taken untimed) */
          setenv("SHARDRT_CUBIN_CACHE", rec_dir, 1);
        int keys0 = 0, keys1 = 0, timed = 0;
        rt_cu_tune_stats(&keys0, NULL, NULL);
        for (int dt = 0; dt < 2; dt++) {
          int ab = dt ? RT_BF16 : RT_F32;
          for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) matmul_case(&ctx, M, ab, RT_F32, 1, 17, 13, 29, ta, tb, 1, 1.0f, 0.0f);
          matmul_case(&ctx, M, ab, ab, 3, 8, 12, 16, 0, 0, 1, 1.0f, 0.0f);    /* batched */
          matmul_case(&ctx, M, ab, ab, 3, 8, 12, 16, 0, 1, 0, 1.0f, 0.0f);    /* shared B */
          matmul_case(&ctx, M, ab, RT_F32, 2, 9, 7, 5, 1, 0, 0, 0.5f, 1.0f); /* ta, shared B, alpha/beta */
          matmul_case(&ctx, M, ab, ab, 2, 9, 7, 5, 1, 1, 1, 2.0f, -1.0f);     /* bf16/f32 y with beta */
          for (int mode = 0; mode < 4; mode++) /* the epilogues; n a multiple of 8 (passes/epilogue.c) */
            matmul_ep_case(&ctx, M, ab, 37, 24, 40, mode & 1, mode >> 1, mode);
          matmul_ep_case(&ctx, M, ab, 37, 24, 40, 0, 1, 7); /* the residual without a bias (Llama's dX sums) */
          matmul_ep_case(&ctx, M, ab, 37, 24, 40, 1, 0, 8); /* the same in place */
          matmul_ep_case(&ctx, M, ab, 64, 48, 64, 0, 0, 1); /* GPT-2's fc: gelu over a wider k */
          matmul_ep_case(&ctx, M, ab, 37, 24, 40, 0, 1, 4);  /* its backward: dy W^T */
          matmul_ep_case(&ctx, M, ab, 37, 24, 40, 0, 1, 5);
          matmul_ep_case(&ctx, M, ab, 37, 24, 40, 0, 1, 6);
        }
        rt_cu_tune_stats(&keys1, &timed, NULL);
        printf("gemm autotune (%s): %d GEMM keys tuned in this pass, %d timed runs in all\n",
               pass == passes - 1 ? "on" : "off", keys1 - keys0, timed);
        if (pass == passes - 1) CHECK(keys1 > keys0, "the autotuning tuned no GEMM");
        else CHECK(keys1 == keys0, "the autotuning ran though it is off on the emulated device by default");
      }
      unsetenv("SHARDRT_GEMM_AUTOTUNE");
      if (cache_keep) setenv("SHARDRT_CUBIN_CACHE", cache_keep, 1);
      else unsetenv("SHARDRT_CUBIN_CACHE");
      free(cache_keep);
      if (strcmp(rec_dir + strlen(rec_dir) - 6, "XXXXXX")) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", rec_dir);
        if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", rec_dir);
      }
      if (strcmp(which, "emu") == 0) { /* no algorithm for an epilogue (SHARDRT_EMU_NO_EPILOGUE): 0, nothing written */
        setenv("SHARDRT_EMU_NO_EPILOGUE", "BIAS_RESIDUAL,RESIDUAL,DGELU_BGRAD,DGELU", 1);
        float ones[256], back[64];
        for (int i = 0; i < 256; i++) ones[i] = 1.0f;
        char *y = M + 8192, *a = y + 256, *b = a + 256, *bias = b + 256; /* 64 floats each */
        rt_cuda_device.upload(&ctx, y, ones, sizeof ones);
        CHECK(!rt_cu_matmul_ep(&ctx, "fallback", y, RT_F32, a, b, RT_F32, 8, 8, 8, 0, 0, bias, a, NULL) &&
                  !rt_cu_matmul_ep(&ctx, "fallback", y, RT_F32, a, b, RT_F32, 8, 8, 8, 0, 0, NULL, a, NULL) &&
                  !rt_cu_matmul_dgelu(&ctx, "fallback", y, RT_F32, a, b, RT_F32, 8, 8, 8, 0, 0, a, bias),
              "an epilogue GEMM ran though the device has no algorithm for it");
        rt_cuda_device.download(&ctx, back, y, sizeof back);
        CHECK(!memcmp(back, ones, sizeof back), "an epilogue GEMM without an algorithm wrote its output");
        /* one of DGELU and DGELU_BGRAD refused: the other runs, whichever SHARDRT_GEMM_BGRAD prefers */
        for (int fused = 0; fused < 2; fused++)
          for (int refuse = 0; refuse < 2; refuse++) {
            setenv("SHARDRT_GEMM_BGRAD", fused ? "fused" : "split", 1);
            setenv("SHARDRT_EMU_NO_EPILOGUE", refuse ? "DGELU" : "DGELU_BGRAD", 1);
            int want = refuse ? RT_CU_EP_ALL : RT_CU_EP_NO_BGRAD;
            rt_cuda_device.upload(&ctx, y, ones, sizeof ones);
            int got = rt_cu_matmul_dgelu(&ctx, "fallback", y, RT_F32, a, b, RT_F32, 8, 8, 8, 0, 0, a, bias);
            CHECK(got == want, "matmul_dgelu with SHARDRT_GEMM_BGRAD=%s and %s refused: %d, want %d",
                  fused ? "fused" : "split", refuse ? "DGELU" : "DGELU_BGRAD", got, want);
            rt_cuda_device.download(&ctx, back, y, sizeof back);
            CHECK(back[0] != 1.0f, "matmul_dgelu wrote nothing");
          }
        unsetenv("SHARDRT_GEMM_BGRAD");
        setenv("SHARDRT_GEMM_BGRAD", "both", 1); /* a policy that is not one is refused (in a child: fatal) */
        pid_t pid = fork();
        if (pid == 0) {
          (void)freopen("/dev/null", "w", stderr);
          rt_cu_matmul_dgelu(&ctx, "fallback", y, RT_F32, a, b, RT_F32, 8, 8, 8, 0, 0, a, bias);
          _exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0, "SHARDRT_GEMM_BGRAD=both was not refused");
        unsetenv("SHARDRT_GEMM_BGRAD");
        unsetenv("SHARDRT_EMU_NO_EPILOGUE");
      }
    }
    if (round == 1 && !strcmp(which, "cuda")) { /* a GEMM key tuned by the first open: its recorded choice, not timed again */
      int rec0 = 0, rec1 = 0, keys0 = 0, keys1 = 0;
      rt_cu_tune_stats(&keys0, NULL, &rec0);
      matmul_case(&ctx, M, RT_BF16, RT_BF16, 3, 8, 12, 16, 0, 0, 1, 1.0f, 0.0f);
      rt_cu_tune_stats(&keys1, NULL, &rec1);
      printf("gemm autotune: the second open: %d GEMM key(s) took the choice recorded by the first, %d tuned again\n",
             rec1 - rec0, keys1 - keys0);
      char *dir = rt_cu_cache_dir();
      CHECK(keys1 == keys0 || !dir, "the second open tuned a GEMM key again instead of taking the recorded choice");
      free(dir);
    }
    rt_cuda_device.close(&ctx);
    CHECK(ctx.kernels == NULL, "close left ctx->kernels set");
  }
  return 0;
}

/* ---- nvrtc ---- */

typedef struct {
  const RtCudaCode *c;
  const char *arch;
  size_t len;
  int from_cache;
  char *img;
} Build;

static int do_build(void *arg) {
  Build *b = arg;
  b->img = rt_cu_nvrtc_build(b->c, b->arch, &b->len, &b->from_cache);
  return b->img ? 0 : 1;
}

static int test_nvrtc(void) {
  RtCudaCode c = code;
  c.source = kSource;
  const char *archs[] = {"sm_80", "sm_90"};
  for (int a = 0; a < 2; a++)
    for (int round = 0; round < 2; round++) {
      Build b = {.c = &c, .arch = archs[a]};
      int rc;
      char *err = capture_stderr(do_build, &b, &rc);
      CHECK(rc == 0 && b.img, "NVRTC build for %s failed: %s", archs[a], err);
      if (b.img) {
        CHECK(b.len > 4 && !memcmp(b.img, "\177ELF", 4), "the %s cubin is not ELF", archs[a]);
        printf("%s: %zu bytes of cubin%s\n", archs[a], b.len, b.from_cache ? " (from the cache)" : "");
      }
      if (round == 1) CHECK(b.from_cache, "the second %s build did not come from the cache", archs[a]);
      free(b.img);
      free(err);
    }
  RtCudaCode bad = {.source = "#include \"shardk.cuh\"\nextern \"C\" __global__ void k0(float *y) { y[0] = "
                              "undefined_thing; }\n",
                    .nkernels = 1};
  Build b = {.c = &bad, .arch = "sm_90"};
  int rc;
  char *err = capture_stderr(do_build, &b, &rc);
  CHECK(rc != 0 && !b.img, "a broken source compiled");
  CHECK(strstr(err, "error: NVRTC could not compile the program's kernels for sm_90") != NULL,
        "no NVRTC error line: %s", err);
  CHECK(strstr(err, "undefined_thing") != NULL, "the NVRTC log is not printed: %s", err);
  printf("broken source: %s", err);
  free(err);
  return 0;
}

/* ---- nogpu ---- */

static int open_real(void *arg) {
  RtCtx *ctx = arg;
  RtProgram p = make_program(NULL, 1 << 20);
  char *M = NULL;
  return rt_cuda_device.open(&p, ctx, 1 << 20, &M);
}

static int test_nogpu(void) {
  RtCtx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.world = 1;
  unsetenv("SHARDRT_DEVICE");
  int rc;
  char *err = capture_stderr(open_real, &ctx, &rc);
  if (rc == 0) {
    printf("a CUDA device opened (this machine has a GPU): skipped\n");
    rt_cuda_device.close(&ctx);
    free(err);
    return 77;
  }
  printf("%s", err);
  const char *want = "error: no CUDA GPU: cudaGetDeviceCount returned 35 (cudaErrorInsufficientDriver): the driver is "
                     "missing or older than CUDA 13.0; SHARDRT_DEVICE=emu runs this program on the CPU emulation "
                     "instead\n";
  CHECK(!strcmp(err, want), "the message is\n%s\nwant\n%s", err, want);
  CHECK(ctx.kernels == NULL, "a failed open left ctx->kernels set");
  free(err);
  setenv("SHARDRT_DEVICE", "bogus", 1);
  err = capture_stderr(open_real, &ctx, &rc);
  CHECK(rc != 0 && strstr(err, "SHARDRT_DEVICE='bogus': expected cuda (a GPU) or emu (the CPU emulation)"),
        "SHARDRT_DEVICE=bogus: %s", err);
  free(err);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s emu|gpu|nvrtc|nogpu|train|attn\n", argv[0]);
    return 2;
  }
  int rc;
  if (!strcmp(argv[1], "emu"))
    rc = test_device("emu");
  else if (!strcmp(argv[1], "gpu")) { /* on a GPU machine (tests/gpu/run_gpu.sh) */
    rc = test_device("cuda");
    if (rc == 0) rc = test_attn_tune("cuda");
    if (rc == 0) rc = test_gemm_tune("cuda");
  } else if (!strcmp(argv[1], "attn"))
    rc = test_attn_tune("emu");
  else if (!strcmp(argv[1], "gemmrec"))
    rc = test_gemm_tune("emu");
  else if (!strcmp(argv[1], "nvrtc"))
    rc = test_nvrtc();
  else if (!strcmp(argv[1], "nogpu")) {
    rc = test_nogpu();
    if (rc == 0) rc = trainer_nogpu();
  } else if (!strcmp(argv[1], "train"))
    rc = test_train();
  else {
    fprintf(stderr, "unknown test %s\n", argv[1]);
    return 2;
  }
  if (rc == 77) return 77;
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  return rc;
}
