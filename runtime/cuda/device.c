/* runtime/cuda/device.c — rt_cuda_device and the CUDA backend: the GPU, the program's kernels
 * (NVRTC, cubin cache, runtime-API library management: no libcuda link, so the binary starts
 * on machines without a driver), the allocation.
 */
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/bootstrap.h"
#include "cu_cuda.h"

#ifndef SHARDRT_CUDA_INCLUDE
#define SHARDRT_CUDA_INCLUDE "/usr/local/cuda/include"
#endif

_Noreturn void rt_cu_cuda_fail(const char *what, cudaError_t rc, const char *file, int line) {
  rt_fatal(1, "CUDA: %s failed: %s (%s) at %s:%d", what, cudaGetErrorName(rc), cudaGetErrorString(rc), file, line);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fmt_gib(char *out, size_t n, double bytes) { snprintf(out, n, "%.2f GiB", bytes / (1024.0 * 1024 * 1024)); }

/* ---- the device ---- */

static int find_device(CudaBe *c, const RtCtx *ctx) {
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess || n == 0) {
    const char *why;
    char whybuf[160];
    if (rc == cudaErrorInsufficientDriver) {
      snprintf(whybuf, sizeof whybuf, "the driver is missing or older than CUDA %d.%d", CUDART_VERSION / 1000,
               CUDART_VERSION % 1000 / 10);
      why = whybuf;
    } else if (rc == cudaErrorNoDevice || (rc == cudaSuccess && n == 0)) {
      const char *vis = getenv("CUDA_VISIBLE_DEVICES");
      snprintf(whybuf, sizeof whybuf, "no CUDA-capable device is visible%s%s%s", vis ? " (CUDA_VISIBLE_DEVICES=" : "",
               vis ? vis : "", vis ? ")" : "");
      why = whybuf;
    } else {
      why = cudaGetErrorString(rc);
    }
    rt_cu_error("no CUDA GPU: cudaGetDeviceCount returned %d (%s): %s; SHARDRT_DEVICE=emu runs this program on the "
                "CPU emulation instead",
                (int)rc, rc == cudaSuccess ? "0 devices" : cudaGetErrorName(rc), why);
    return -1;
  }
  c->ndev = n;
  c->device = ctx->local_rank % n;
  rc = cudaSetDevice(c->device);
  if (rc != cudaSuccess) {
    rt_cu_error("CUDA: cannot use device %d of %d: %s", c->device, n, cudaGetErrorString(rc));
    return -1;
  }
  struct cudaDeviceProp prop;
  CU_CHECK(cudaGetDeviceProperties(&prop, c->device));
  snprintf(c->name, sizeof c->name, "%s", prop.name);
  c->major = prop.major;
  c->minor = prop.minor;
  c->total_mem = prop.totalGlobalMem;
  c->sm_count = prop.multiProcessorCount;
  return 0;
}

/* ---- the program's kernels: NVRTC, cached on disk ---- */

#define NVRTC_OK(call, what)                                                                                       \
  do {                                                                                                             \
    nvrtcResult nvrtc_rc_ = (call);                                                                                \
    if (nvrtc_rc_ != NVRTC_SUCCESS) {                                                                              \
      rt_cu_error("NVRTC: %s failed: %s", what, nvrtcGetErrorString(nvrtc_rc_));                                   \
      goto fail;                                                                                                   \
    }                                                                                                              \
  } while (0)

/* The architecture to build for: sm_XY when NVRTC supports it (a cubin; sm_90a on compute capability
 * 9.0), else PTX for the newest one it supports below (the driver compiles it). SHARDRT_CUDA_ARCH=sm_90
 * overrides. */
static int pick_arch(CudaBe *c, int *ptx) {
  const char *env = getenv("SHARDRT_CUDA_ARCH");
  *ptx = 0;
  if (env && *env) {
    snprintf(c->arch, sizeof c->arch, "%s", env);
    *ptx = !strncmp(env, "compute_", 8);
    return 0;
  }
  int want = c->major * 10 + c->minor, n = 0, best = 0;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) {
    rt_cu_error("NVRTC: cannot list the supported architectures");
    return -1;
  }
  int *archs = malloc((size_t)n * sizeof *archs);
  if (!archs || nvrtcGetSupportedArchs(archs) != NVRTC_SUCCESS) {
    free(archs);
    rt_cu_error("NVRTC: cannot list the supported architectures");
    return -1;
  }
  for (int i = 0; i < n; i++) {
    if (archs[i] == want) best = want;
    if (archs[i] <= want && archs[i] > best && best != want) best = archs[i];
  }
  free(archs);
  if (best == 0) {
    rt_cu_error("NVRTC cannot build kernels for %s (sm_%d): no supported architecture at or below it", c->name, want);
    return -1;
  }
  *ptx = best != want;
  /* compute capability 9.0: sm_90a, the architecture-specific features (wgmma: shardk_wgmma.cuh) */
  snprintf(c->arch, sizeof c->arch, "%s_%d%s", *ptx ? "compute" : "sm", best, !*ptx && best == 90 ? "a" : "");
  return 0;
}

/* Compiles p's kernels for c->arch (or takes them from the cache). Returns the image (cubin or
 * PTX, NUL-terminated) or NULL after printing why. */
static char *build_kernels(CudaBe *c, const RtCudaCode *code, int ptx, size_t *out_len) {
  int nh = rt_cu_header_count(), major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) {
    rt_cu_error("NVRTC: nvrtcVersion failed");
    return NULL;
  }
  char archopt[64], incopt[4200], ver[32];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", c->arch);
  const char *inc = getenv("SHARDRT_CUDA_INCLUDE");
  snprintf(incopt, sizeof incopt, "-I%s", inc && *inc ? inc : SHARDRT_CUDA_INCLUDE);
  snprintf(ver, sizeof ver, "nvrtc %d.%d", major, minor);
  /* -split-compile=0: the kernels optimized on every core (the same SASS, kernel by kernel, as one thread's:
   * checked with nvdisasm on GPT-2's program for sm_90); dropped when this NVRTC does not know it */
  const char *opts[6] = {archopt, "-std=c++17", "-default-device", incopt, "-split-compile=0"};
  int nopts = 5;
  if (c->attn_tune) opts[nopts++] = "-DSK_ATTN_TUNE"; /* the attention's tile candidates (attn_tune.c) */

  /* the key: source, headers, options, NVRTC version */
  int nparts = 0;
  const char **parts = malloc(sizeof *parts * (size_t)(2 * nh + nopts + 2));
  size_t *lens = malloc(sizeof *lens * (size_t)(2 * nh + nopts + 2));
  if (!parts || !lens) {
    free(parts), free(lens);
    rt_cu_error("out of memory");
    return NULL;
  }
  parts[nparts++] = code->source;
  parts[nparts++] = ver;
  for (int i = 0; i < nh; i++) parts[nparts++] = rt_cu_header_name(i), parts[nparts++] = rt_cu_header_source(i);
  for (int i = 0; i < nopts; i++) parts[nparts++] = opts[i];
  for (int i = 0; i < nparts; i++) lens[i] = strlen(parts[i]);
  char key[33];
  rt_cu_hash(key, parts, lens, nparts);
  free(parts);
  free(lens);

  char *dir = rt_cu_cache_dir(), *path = NULL;
  if (dir) {
    size_t pl = strlen(dir) + 64;
    path = malloc(pl);
    if (path) snprintf(path, pl, "%s/%s-%s.%s", dir, key, c->arch, ptx ? "ptx" : "cubin");
    free(dir);
  }
  size_t len = 0;
  char *img = path ? rt_cu_read_file(path, &len) : NULL;
  if (img && len > 0) {
    c->from_cache = 1;
    free(path);
    *out_len = len;
    return img;
  }
  free(img);
  img = NULL;

  double t0 = now_s();
  nvrtcProgram prog = NULL;
  const char **hsrc = malloc(sizeof *hsrc * (size_t)(nh + 1)), **hname = malloc(sizeof *hname * (size_t)(nh + 1));
  if (!hsrc || !hname) {
    rt_cu_error("out of memory");
    goto fail;
  }
  for (int i = 0; i < nh; i++) hsrc[i] = rt_cu_header_source(i), hname[i] = rt_cu_header_name(i);
  NVRTC_OK(nvrtcCreateProgram(&prog, code->source, "shardc_program.cu", nh, hsrc, hname), "nvrtcCreateProgram");
  nvrtcResult rc = nvrtcCompileProgram(prog, nopts, opts);
  if (rc == NVRTC_ERROR_INVALID_OPTION) { /* an NVRTC without -split-compile: one thread */
    nvrtcDestroyProgram(&prog);
    opts[4] = opts[--nopts];
    NVRTC_OK(nvrtcCreateProgram(&prog, code->source, "shardc_program.cu", nh, hsrc, hname), "nvrtcCreateProgram");
    rc = nvrtcCompileProgram(prog, nopts, opts);
  }
  if (rc != NVRTC_SUCCESS) {
    size_t ll = 0;
    char *log = NULL;
    if (nvrtcGetProgramLogSize(prog, &ll) == NVRTC_SUCCESS && (log = malloc(ll + 1)) &&
        nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS)
      log[ll] = 0;
    rt_cu_error("NVRTC could not compile the program's kernels for %s (%s):\n%s", c->arch, nvrtcGetErrorString(rc),
                log ? log : "(no log)");
    free(log);
    goto fail;
  }
  if (ptx) {
    NVRTC_OK(nvrtcGetPTXSize(prog, &len), "nvrtcGetPTXSize");
    if (!(img = malloc(len + 1))) goto fail;
    NVRTC_OK(nvrtcGetPTX(prog, img), "nvrtcGetPTX");
  } else {
    NVRTC_OK(nvrtcGetCUBINSize(prog, &len), "nvrtcGetCUBINSize");
    if (!(img = malloc(len + 1))) goto fail;
    NVRTC_OK(nvrtcGetCUBIN(prog, img), "nvrtcGetCUBIN");
  }
  img[len] = 0;
  nvrtcDestroyProgram(&prog);
  free(hsrc);
  free(hname);
  c->compile_s = now_s() - t0;
  if (path && rt_cu_write_atomic(path, img, len) != 0)
    fprintf(stderr, "warning: cannot write the kernel cache file %s\n", path);
  free(path);
  *out_len = len;
  return img;
fail:
  if (prog) nvrtcDestroyProgram(&prog);
  free(hsrc);
  free(hname);
  free(img);
  free(path);
  return NULL;
}

static int load_kernels(CudaBe *c, const RtCudaCode *code) {
  c->nk = code ? code->nkernels : 0;
  c->attn_tune = rt_cu_attn_tune_on(0);
  if (!code || c->nk == 0) return 0;
  int ptx;
  if (pick_arch(c, &ptx) != 0) return -1;
  size_t len = 0;
  char *img = build_kernels(c, code, ptx, &len);
  if (!img) return -1;
  cudaError_t rc = cudaLibraryLoadData(&c->lib, img, NULL, NULL, 0, NULL, NULL, 0);
  free(img);
  if (rc != cudaSuccess) {
    rt_cu_error("CUDA: cannot load the program's kernels (%s) on %s: %s", c->arch, c->name, cudaGetErrorString(rc));
    return -1;
  }
  c->kern = calloc((size_t)c->nk, sizeof *c->kern);
  c->smem_max = calloc((size_t)c->nk, sizeof *c->smem_max);
  if (!c->kern || !c->smem_max) {
    rt_cu_error("out of memory");
    return -1;
  }
  for (int k = 0; k < c->nk; k++) {
    char name[32];
    snprintf(name, sizeof name, "k%d", k);
    rc = cudaLibraryGetKernel(&c->kern[k], c->lib, name);
    if (rc != cudaSuccess && !c->attn_tune) { /* an attention tile candidate, compiled only for the autotuning */
      (void)cudaGetLastError();
      c->kern[k] = NULL;
      continue;
    }
    if (rc != cudaSuccess) {
      rt_cu_error("CUDA: the program's kernels have no \"%s\": %s", name, cudaGetErrorString(rc));
      return -1;
    }
    c->smem_max[k] = 48 * 1024;
  }
  return 0;
}

char *rt_cu_nvrtc_build(const RtCudaCode *code, const char *arch, size_t *len, int *from_cache) {
  CudaBe c;
  memset(&c, 0, sizeof c);
  snprintf(c.arch, sizeof c.arch, "%s", arch);
  snprintf(c.name, sizeof c.name, "%s", arch);
  c.attn_tune = rt_cu_attn_tune_on(0);
  char *img = build_kernels(&c, code, !strncmp(arch, "compute_", 8), len);
  *from_cache = c.from_cache;
  return img;
}

/* ---- the backend table ---- */

static void cuda_describe(void *be, char *out, size_t n) {
  CudaBe *c = be;
  char mem[32];
  fmt_gib(mem, sizeof mem, (double)c->total_mem);
  char how[96];
  if (c->from_cache) snprintf(how, sizeof how, " from the cache");
  else snprintf(how, sizeof how, " compiled by NVRTC in %.1f s", c->compile_s);
  snprintf(out, n, "%s, sm_%d%d, %s (device %d of %d); %d kernels for %s%s%s", c->name, c->major, c->minor, mem,
           c->device, c->ndev, c->nk, c->arch[0] ? c->arch : "-", c->nk ? how : "",
           c->nk && c->attn_tune ? " (with the attention's tile candidates: SHARDRT_ATTN_AUTOTUNE)" : "");
}

/* What the attention autotuning's choices depend on: the GPU model and the toolkit. */
static void cuda_tune_id(void *be, char *out, size_t n) {
  CudaBe *c = be;
  int major = 0, minor = 0, rtv = 0;
  (void)nvrtcVersion(&major, &minor);
  (void)cudaRuntimeGetVersion(&rtv);
  snprintf(out, n, "%s nvrtc %d.%d cudart %d", c->name, major, minor, rtv);
}

static int64_t cuda_mem_in_use(void *be, int64_t *total) {
  (void)be;
  size_t fr = 0, tot = 0;
  if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  *total = (int64_t)tot;
  return (int64_t)(tot - fr);
}

static void cuda_pin(void *be, void *host, int64_t bytes, int on) {
  (void)be;
  cudaError_t rc = on ? cudaHostRegister(host, (size_t)bytes, cudaHostRegisterDefault) : cudaHostUnregister(host);
  if (rc != cudaSuccess) (void)cudaGetLastError(); /* unpinned copies still work, slower */
}

static double cuda_peak(void *be) {
  CudaBe *c = be;
  if (c->peak <= 0) c->peak = rt_cu_gemm_peak(c->gemm, 4096, 10);
  return c->peak;
}

static void cuda_close(void *be) {
  CudaBe *c = be;
  if (!c) return;
  CU_CHECK(cudaStreamSynchronize(c->stream));
  rt_cu_cuda_copies_close(c);
  for (int i = 0; i < 2; i++)
    if (c->tev[i]) CU_CHECK(cudaEventDestroy(c->tev[i]));
  if (c->graph) CU_CHECK(cudaGraphExecDestroy(c->graph));
  rt_cu_gemm_free(c->gemm);
  if (c->base) CU_CHECK(cudaFree(c->base));
  if (c->lib) CU_CHECK(cudaLibraryUnload(c->lib));
  CU_CHECK(cudaStreamDestroy(c->stream));
  free(c->kern);
  free(c->smem_max);
  free(c);
}

static int cuda_wgmma(void *be) { return !strcmp(((CudaBe *)be)->arch, "sm_90a"); }

static const RtCuOps cuda_ops = {.name = "cuda",
                                 .launch = rt_cu_cuda_launch,
                                 .matmul = rt_cu_cuda_matmul,
                                 .matmul_pair = rt_cu_cuda_matmul_pair,
                                 .copy = rt_cu_cuda_copy,
                                 .zero = rt_cu_cuda_zero,
                                 .copy2d = rt_cu_cuda_copy2d,
                                 .sync = rt_cu_cuda_sync,
                                 .copy_start = rt_cu_cuda_copy_start,
                                 .host_wait = rt_cu_cuda_host_wait,
                                 .device_wait = rt_cu_cuda_device_wait,
                                 .replay = rt_cu_cuda_replay,
                                 .mem_in_use = cuda_mem_in_use,
                                 .pin = cuda_pin,
                                 .describe = cuda_describe,
                                 .time_launch = rt_cu_cuda_time_launch,
                                 .scratch = rt_cu_cuda_scratch,
                                 .scratch_free = rt_cu_cuda_scratch_free,
                                 .tune_id = cuda_tune_id,
                                 .capturing = rt_cu_cuda_capturing,
                                 .peak = cuda_peak,
                                 .close = cuda_close,
                                 .wgmma = cuda_wgmma};

int rt_cu_open_cuda(const RtProgram *p, RtCtx *ctx, int64_t bytes, char **mem, RtCuDev *dev) {
  CudaBe *c = calloc(1, sizeof *c);
  if (!c) {
    rt_cu_error("out of memory");
    return -1;
  }
  if (find_device(c, ctx) != 0) goto fail;
  CU_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  dev->stream = c->stream;
  /* several ranks: NCCL groups for the program's collectives (before anything that could fail on
   * one rank only, as it is collective over the world) */
  if (ctx->world > 1 && rt_cu_nccl_open(ctx, dev) != 0) goto fail;
  if (load_kernels(c, p->cuda) != 0) goto fail;
  size_t fr0 = 0, tot0 = 0; /* the plan against the free memory, now that the context and NCCL hold theirs */
  if (cudaMemGetInfo(&fr0, &tot0) == cudaSuccess) {
    if (rt_cu_check_free(p, ctx, bytes, (int64_t)fr0, (int64_t)tot0, c->name) != 0) goto fail;
  } else {
    (void)cudaGetLastError();
  }
  cudaError_t rc = cudaMalloc((void **)&c->base, (size_t)(bytes > 0 ? bytes : 256));
  if (rc != cudaSuccess) {
    (void)cudaGetLastError(); /* clear the sticky allocation error */
    size_t fr = 0, tot = 0;
    char pl[32], ws[32], fs[32], ts[32];
    fmt_gib(pl, sizeof pl, (double)p->mem_bytes);
    fmt_gib(ws, sizeof ws, (double)(bytes - p->mem_bytes));
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) fr = 0, tot = c->total_mem;
    fmt_gib(fs, sizeof fs, (double)fr);
    fmt_gib(ts, sizeof ts, (double)tot);
    rt_cu_error("out of GPU memory: the program plans %s (%lld bytes) + %s of kernel workspace = %lld bytes; %s "
                "(device %d) has %s free of %s (%s)",
                pl, (long long)p->mem_bytes, ws, (long long)bytes, c->name, c->device, fs, ts, cudaGetErrorString(rc));
    c->base = NULL;
    goto fail;
  }
  c->bytes = bytes;
  CU_CHECK(cudaMemsetAsync(c->base, 0, (size_t)(bytes > 0 ? bytes : 256), c->stream));
  CU_CHECK(cudaStreamSynchronize(c->stream));
  c->gemm = rt_cu_gemm_new(c->stream, ctx->rank, ctx->world);
  /* one rank: the step as a CUDA graph (SHARDRT_CUDA_GRAPHS=0 turns it off; several ranks interleave
   * the step with host collectives and checks, which a graph cannot hold) */
  /* (a program with an optimizer step on the host, plan offload, is not one graph either) */
  c->graphs = ctx->world == 1 && p->host_bytes == 0 && rt_env_switch("SHARDRT_CUDA_GRAPHS", true);
  *mem = c->base;
  dev->ops = &cuda_ops;
  dev->be = c;
  return 0;
fail:
  rt_cu_nccl_close(dev);
  dev->stream = NULL;
  if (c->base) cudaFree(c->base);
  if (c->lib) cudaLibraryUnload(c->lib);
  if (c->stream) cudaStreamDestroy(c->stream);
  free(c->kern);
  free(c->smem_max);
  free(c);
  return -1;
}

/* ---- rt_cuda_device: the RtDevice every CUDA trainer references ---- */

static int dev_open(const RtProgram *p, RtCtx *ctx, int64_t bytes, char **mem) {
  const char *sel = getenv("SHARDRT_DEVICE");
  RtCuDev *d = calloc(1, sizeof *d);
  if (!d) {
    rt_cu_error("out of memory");
    return -1;
  }
  int rc;
  if (!sel || !*sel || !strcmp(sel, "cuda"))
    rc = rt_cu_open_cuda(p, ctx, bytes, mem, d);
  else if (!strcmp(sel, "emu"))
    rc = rt_cu_open_emu(p, ctx, bytes, mem, d);
  else {
    rt_cu_error("SHARDRT_DEVICE='%s': expected cuda (a GPU) or emu (the CPU emulation)", sel);
    rc = -1;
  }
  if (rc != 0) {
    free(d);
    return -1;
  }
  ctx->kernels = d;
  rt_coll_set_device(&rt_cu_coll_device); /* the program's collectives work on device memory */
  return 0;
}

static void dev_upload(RtCtx *ctx, void *dst, const void *src, int64_t bytes) {
  RtCuDev *d = rt_cu_dev(ctx);
  if (bytes > 0) d->ops->copy(d->be, dst, src, bytes, RT_CU_H2D);
}
static void dev_download(RtCtx *ctx, void *dst, const void *src, int64_t bytes) {
  RtCuDev *d = rt_cu_dev(ctx);
  if (bytes > 0) d->ops->copy(d->be, dst, src, bytes, RT_CU_D2H);
}
static void dev_zero(RtCtx *ctx, void *dst, int64_t bytes) {
  RtCuDev *d = rt_cu_dev(ctx);
  if (bytes > 0) d->ops->zero(d->be, dst, bytes);
}
static void dev_sync(RtCtx *ctx) {
  RtCuDev *d = rt_cu_dev(ctx);
  d->ops->sync(d->be);
  rt_coll_reap(1); /* the collectives the compute stream waited for are finished */
}
static void dev_run(RtCtx *ctx, void (*fn)(char *M, RtCtx *ctx), char *M) {
  RtCuDev *d = rt_cu_dev(ctx);
  if (d->ops->replay)
    d->ops->replay(d->be, fn, M, ctx);
  else
    fn(M, ctx);
  rt_cu_tune_report(ctx); /* after the step that tuned GEMMs (the first) */
  rt_cu_attn_tune_report(ctx);
}
static void dev_pin(RtCtx *ctx, void *host, int64_t bytes) {
  RtCuDev *d = rt_cu_dev(ctx);
  if (d->ops->pin) d->ops->pin(d->be, host, bytes, 1);
}
static void dev_unpin(RtCtx *ctx, void *host) {
  RtCuDev *d = rt_cu_dev(ctx);
  if (d->ops->pin) d->ops->pin(d->be, host, 0, 0);
}
static int64_t dev_mem_in_use(RtCtx *ctx, int64_t *total) {
  RtCuDev *d = rt_cu_dev(ctx);
  return d->ops->mem_in_use ? d->ops->mem_in_use(d->be, total) : -1;
}
static void dev_describe(RtCtx *ctx, char *out, size_t n) {
  RtCuDev *d = rt_cu_dev(ctx);
  d->ops->describe(d->be, out, n);
}
static double dev_peak(RtCtx *ctx) {
  RtCuDev *d = rt_cu_dev(ctx);
  return d->ops->peak(d->be);
}
static void dev_close(RtCtx *ctx) {
  RtCuDev *d = ctx ? ctx->kernels : NULL;
  if (!d) return;
  d->ops->sync(d->be);
  rt_coll_reap(1);
  rt_coll_set_device(NULL);
  rt_cu_nccl_close(d);
  rt_cu_attn_tune_close(d);
  d->ops->close(d->be);
  free(d);
  ctx->kernels = NULL;
}

/* --compile-kernels ARCH: the kernels into the cache, with the attention's tile candidates as a run on a GPU
 * would build them (SHARDRT_ATTN_AUTOTUNE as there: 0 builds the compiled defaults alone) */
static int dev_compile(const RtProgram *p, const char *arch) {
  int nk = p->cuda ? p->cuda->nkernels : 0;
  if (strncmp(arch, "sm_", 3) != 0 && strncmp(arch, "compute_", 8) != 0) {
    rt_cu_error("--compile-kernels %s: expected an architecture as NVRTC names it: sm_90a, sm_80 (a cubin) or "
                "compute_90 (PTX)",
                arch);
    return -1;
  }
  char *dir = rt_cu_cache_dir();
  if (!dir) {
    rt_cu_error("--compile-kernels: no kernel cache directory (set SHARDRT_CUBIN_CACHE or HOME)");
    return -1;
  }
  if (nk == 0) {
    printf("kernels: none in this program\n");
    free(dir);
    return 0;
  }
  double t0 = now_s();
  size_t len = 0;
  int from_cache = 0;
  char *img = rt_cu_nvrtc_build(p->cuda, arch, &len, &from_cache);
  if (img)
    printf("kernels: %d for %s%s, %.1f MiB, %s %.1f s, in %s\n", nk, arch,
           rt_cu_attn_tune_on(0) ? " with the attention's tile candidates" : "", (double)len / (1 << 20),
           from_cache ? "already in the cache:" : "compiled by NVRTC in", now_s() - t0, dir);
  int rc = img ? 0 : -1;
  free(dir);
  free(img);
  return rc;
}

const RtDevice rt_cuda_device = {.name = "cuda",
                                 .open = dev_open,
                                 .upload = dev_upload,
                                 .download = dev_download,
                                 .zero = dev_zero,
                                 .sync = dev_sync,
                                 .run = dev_run,
                                 .mem_in_use = dev_mem_in_use,
                                 .pin = dev_pin,
                                 .unpin = dev_unpin,
                                 .describe = dev_describe,
                                 .peak_flops = dev_peak,
                                 .close = dev_close,
                                 .compile = dev_compile};
