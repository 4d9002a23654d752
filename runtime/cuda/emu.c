/* runtime/cuda/emu.c — the emulated device (SHARDRT_DEVICE=emu): the CUDA path without a GPU.
 *
 * "Device" memory is host memory. The program's kernel source (RtCudaCode) and the embedded
 * kernel headers are written to a temporary directory and compiled by the host C++ compiler with
 * -DSK_EMU, under which every kernel kN also has `extern "C" void kN_emu(gx, gy, gz, bx, by, bz,
 * smem, args)` running it on the CPU emulator of runtime/cuda/kernels/sk_emu.h; the shared object
 * is cached like the cubins (same directory, key over source, headers and command) and dlopened.
 * GEMMs run on the CPU BLAS in fp32 (bf16 operands widened exactly, bf16 results rounded to
 * nearest even). Everything is synchronous, so sync is a no-op.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/bootstrap.h"
#include "comm/comm.h" /* rt_f32_to_bf16, rt_bf16_to_f32 */
#include "cu_internal.h"
#include "dtype.h"
#include "kernels/kernels.h"

#ifndef SHARDRT_CUDA_INCLUDE
#define SHARDRT_CUDA_INCLUDE "/usr/local/cuda/include"
#endif

typedef void (*EmuKernel)(unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void **);

typedef struct {
  void *so;          /* the compiled kernels (NULL when the program has none) */
  EmuKernel *fn;     /* [nk] */
  int nk;            /* kernels */
  char *base;        /* the allocation */
  int64_t bytes;     /* its size */
  int from_cache;    /* 1: the shared object came from the cache */
  double peak;       /* measured FLOP/s (0: not yet) */
  int threads;       /* host threads for the peak measurement */
  RtCuGemmKey *tuned; /* [ntuned]: the GEMM keys met (autotuning: each timed at its first call) */
  int ntuned, captuned;
  RtCuRec rec;        /* the GEMM autotuning's record (tune_rec.c), opened at the first tuned key */
  int rec_open, rank, world;
  struct EmuCopy *inflight; /* plan offload's copies started and not yet waited */
  int ninflight, capinflight;
  struct {                  /* the autotuning's scratch (emu_scratch), device memory as the allocation is */
    char *p;
    int64_t bytes;
  } scratch[8];
} EmuBe;

/* A copy in flight (copy_start): done at once, checked at its wait. */
typedef struct EmuCopy {
  void *dst;
  const void *src;
  int64_t bytes;
  int kind, slot;
} EmuCopy;

/* ---- kernels: host C++ ---- */

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  size_t n = strlen(text);
  int ok = f && fwrite(text, 1, n, f) == n;
  if (f) ok = fclose(f) == 0 && ok;
  return ok ? 0 : -1;
}

static void remove_tree(const char *dir, int nh) {
  char path[4096];
  for (int i = 0; i < nh; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, rt_cu_header_name(i));
    unlink(path);
  }
  const char *files[] = {"program.cpp", "program.so", "compile.log"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    unlink(path);
  }
  rmdir(dir);
}

static int load_so(EmuBe *e, const RtCudaCode *code, const char *cxx, const char *flags, int nh, const char *cpath,
                   const char *so_path, int tune);

/* Compiles (or finds in the cache) and dlopens the program's kernels. */
static int load_kernels(EmuBe *e, const RtCudaCode *code) {
  e->nk = code ? code->nkernels : 0;
  if (!code || e->nk == 0) return 0;
  const char *cxx = getenv("SHARDRT_EMU_CXX");
  if (!cxx || !*cxx) cxx = "c++";
  const char *inc = getenv("SHARDRT_CUDA_INCLUDE");
  if (!inc || !*inc) inc = SHARDRT_CUDA_INCLUDE;
  char flags[4400];
  int tune = rt_cu_attn_tune_on(1); /* the attention's tile candidates compiled too (attn_tune.c) */
  char wrong[64] = "";
  const char *wv = getenv("SHARDRT_EMU_WRONG_ATTN"); /* test only: a forward tile candidate made wrong */
  if (wv && *wv) {
    int mt, w, bk;
    if (sscanf(wv, "%dx%dx%d", &mt, &w, &bk) != 3 || mt < 1 || mt > 9 || w < 1 || w > 99 || bk < 1 || bk > 999)
      rt_fatal(1, "SHARDRT_EMU_WRONG_ATTN=%s: want the tiles (MTxWxBK, as the autotuning names them) of the forward "
                  "candidate to compile with a wrong scale (a test of the autotuning's check)", wv);
    snprintf(wrong, sizeof wrong, " -DSK_TEST_WRONG_FWD=%d", mt * 100000 + w * 1000 + bk);
  }
  snprintf(flags, sizeof flags, "-std=c++17 -O1 -shared -fPIC -DSK_EMU%s%s -I'%s'", tune ? " -DSK_ATTN_TUNE" : "", wrong,
           inc);

  int nh = rt_cu_header_count(), nparts = 0;
  const char **parts = malloc(sizeof *parts * (size_t)(2 * nh + 4));
  size_t *lens = malloc(sizeof *lens * (size_t)(2 * nh + 4));
  if (!parts || !lens) rt_fatal(1, "out of memory");
  parts[nparts++] = "emu";
  parts[nparts++] = code->source;
  parts[nparts++] = cxx;
  parts[nparts++] = flags;
  for (int i = 0; i < nh; i++) parts[nparts++] = rt_cu_header_name(i), parts[nparts++] = rt_cu_header_source(i);
  for (int i = 0; i < nparts; i++) lens[i] = strlen(parts[i]);
  char key[33];
  rt_cu_hash(key, parts, lens, nparts);
  free(parts);
  free(lens);

  char *cache = rt_cu_cache_dir(), cpath[4200] = "", path[4300];
  if (cache) snprintf(cpath, sizeof cpath, "%s/%s-emu.so", cache, key);
  free(cache);
  const char *so_path = NULL;
  struct stat sb;
  if (cpath[0] && stat(cpath, &sb) == 0 && sb.st_size > 0) {
    so_path = cpath;
    e->from_cache = 1;
  }
  /* One compile of a program among the processes sharing the cache (the ranks of a run, which start
   * together and would each compile the same program): the first to take the key's lock compiles and
   * fills the cache, the others wait for it and load what it wrote (a lock that cannot be had: each
   * compiles, as without a cache). The lock goes with the descriptor, at the end of this function. */
  int lockfd = -1;
  if (!so_path && cpath[0]) {
    snprintf(path, sizeof path, "%s.lock", cpath);
    lockfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lockfd >= 0 && flock(lockfd, LOCK_EX) != 0) close(lockfd), lockfd = -1;
    if (lockfd >= 0 && stat(cpath, &sb) == 0 && sb.st_size > 0) {
      so_path = cpath;
      e->from_cache = 1;
    }
  }
  int rc = load_so(e, code, cxx, flags, nh, cpath, so_path, tune);
  if (lockfd >= 0) close(lockfd);
  return rc;
}

/* load_kernels' second half: compiles into cpath (the cache's path, "" without a cache) unless so_path
 * is already there, and dlopens it. */
static int load_so(EmuBe *e, const RtCudaCode *code, const char *cxx, const char *flags, int nh, const char *cpath,
                   const char *so_path, int tune) {
  char tmpl[] = "/tmp/shardc-emu-XXXXXX", path[4300];
  int made_tmp = 0;
  if (!so_path) {
    if (!mkdtemp(tmpl)) {
      rt_cu_error("emulated device: cannot create a temporary directory in /tmp");
      return -1;
    }
    made_tmp = 1;
    for (int i = 0; i < nh; i++) {
      if (strchr(rt_cu_header_name(i), '/')) continue; /* flat: every header sits next to the program */
      snprintf(path, sizeof path, "%s/%s", tmpl, rt_cu_header_name(i));
      if (write_file(path, rt_cu_header_source(i)) != 0) {
        rt_cu_error("emulated device: cannot write %s", path);
        remove_tree(tmpl, nh);
        return -1;
      }
    }
    snprintf(path, sizeof path, "%s/program.cpp", tmpl);
    if (write_file(path, code->source) != 0) {
      rt_cu_error("emulated device: cannot write %s", path);
      remove_tree(tmpl, nh);
      return -1;
    }
    size_t cl = strlen(cxx) + strlen(flags) + 3 * strlen(tmpl) + 128;
    char *cmd = malloc(cl);
    if (!cmd) rt_fatal(1, "out of memory");
    snprintf(cmd, cl, "%s %s -I%s -o %s/program.so %s/program.cpp > %s/compile.log 2>&1", cxx, flags, tmpl, tmpl, tmpl,
             tmpl);
    int rc = system(cmd);
    if (rc != 0) {
      snprintf(path, sizeof path, "%s/compile.log", tmpl);
      size_t ll = 0;
      char *log = rt_cu_read_file(path, &ll);
      rt_cu_error("emulated device: the host C++ compiler could not compile the program's kernels (%s, status "
                  "%d):\n%s",
                  cmd, rc, log ? log : "(no log)");
      free(log);
      free(cmd);
      remove_tree(tmpl, nh);
      return -1;
    }
    free(cmd);
    snprintf(path, sizeof path, "%s/program.so", tmpl);
    so_path = path;
    if (cpath[0]) { /* into the cache, atomically */
      size_t sl = 0;
      char *so = rt_cu_read_file(path, &sl);
      if (so && rt_cu_write_atomic(cpath, so, sl) == 0) so_path = cpath;
      free(so);
    }
  }
  e->so = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
  if (!e->so) {
    rt_cu_error("emulated device: cannot load the compiled kernels %s: %s", so_path, dlerror());
    if (made_tmp) remove_tree(tmpl, nh);
    return -1;
  }
  if (made_tmp) remove_tree(tmpl, nh); /* a loaded object stays mapped */
  e->fn = calloc((size_t)e->nk, sizeof *e->fn);
  if (!e->fn) rt_fatal(1, "out of memory");
  for (int k = 0; k < e->nk; k++) {
    char name[32];
    snprintf(name, sizeof name, "k%d_emu", k);
    void *sym = dlsym(e->so, name);
    if (!sym && !tune) continue; /* an attention tile candidate, compiled only for the autotuning */
    if (!sym) {
      rt_cu_error("emulated device: the program's kernels have no \"%s\" (compiled with -DSK_EMU)", name);
      return -1;
    }
    memcpy(&e->fn[k], &sym, sizeof sym);
  }
  return 0;
}

/* ---- the backend table ---- */

static void emu_launch(void *be, int k, const unsigned grid[3], const unsigned block[3], unsigned smem, void **args) {
  EmuBe *e = be;
  if (k < 0 || k >= e->nk) rt_fatal(1, "emulated device: launch of kernel k%d: the program has %d kernels", k, e->nk);
  if ((uint64_t)block[0] * block[1] * block[2] > 1024)
    rt_fatal(1, "emulated device: launch of kernel k%d: block %u x %u x %u has more than 1024 threads", k, block[0],
             block[1], block[2]);
  if (!e->fn[k])
    rt_fatal(1, "emulated device: kernel k%d is an attention tile candidate, compiled only with SHARDRT_ATTN_AUTOTUNE=1",
             k);
  e->fn[k](grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, args);
}

/* Checks that [p, p + bytes) lies in the allocation (the emulation's stand-in for a fault). */
static void in_mem(const EmuBe *e, const void *p, int64_t bytes, const char *what) {
  const char *c = p;
  for (int i = 0; i < 8; i++)
    if (e->scratch[i].p && c >= e->scratch[i].p && c + bytes <= e->scratch[i].p + e->scratch[i].bytes) return;
  if (c < e->base || c + bytes > e->base + e->bytes)
    rt_fatal(1, "emulated device: %s of %lld bytes at %p is outside the device allocation [%p, +%lld)", what,
             (long long)bytes, p, (void *)e->base, (long long)e->bytes);
}

static const float *as_f32(const void *x, int dt, int64_t n, float **tmp) {
  if (dt == RT_F32) return x;
  float *t = malloc((size_t)n * sizeof *t);
  if (!t) rt_fatal(1, "out of memory");
  const uint16_t *h = x;
  for (int64_t i = 0; i < n; i++) t[i] = rt_bf16_to_f32(h[i]);
  *tmp = t;
  return t;
}

/* An element of a y_dt tensor as f32, and stored. */
static float ld_el(const void *p, int dt, int64_t i) {
  return dt == RT_BF16 ? rt_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
static void st_el(void *p, int dt, int64_t i, float v) {
  if (dt == RT_BF16)
    ((uint16_t *)p)[i] = rt_f32_to_bf16(v);
  else
    ((float *)p)[i] = v;
}

/* v rounded to dt. */
static float rnd(int dt, float v) { return dt == RT_BF16 ? rt_bf16_to_f32(rt_f32_to_bf16(v)) : v; }

/* The epilogue of rt_cu_matmul_ep / _dgelu on the fp32 result acc[m, n] as the nodes it replaces
 * compute it (the IR's semantics): the GEMM's result rounded to y's dtype, then each op in float
 * as the kernels' (runtime/cuda/kernels/shardk.cuh gelu, gelu_bwd), each result rounded. So a
 * fused program equals the unfused one bit for bit here, and recomputing a value without the
 * epilogue gives the same bits (e2e_cuda_recompute). cuBLASLt on a GPU rounds once, at the end:
 * within a rounding of this. */
static void emu_epilogue(EmuBe *e, const float *acc, void *y, int dt, int64_t m, int64_t n, const RtCuEpi *ep) {
  int64_t es = dt == RT_BF16 ? 2 : 4;
  if (ep->dgelu) { /* y = gelu'(pre) * acc, the column sums of y (in row order, in double) */
    in_mem(e, ep->aux, m * n * es, "matmul pre-activation");
    if (ep->dbias) in_mem(e, ep->dbias, n * es, "matmul bias gradient");
    for (int64_t j = 0; j < n; j++) {
      double s = 0;
      for (int64_t i = 0; i < m; i++) {
        const float c0 = 0.7978845608028654f, x = ld_el(ep->aux, dt, i * n + j);
        float th = tanhf(c0 * (x + 0.044715f * x * x * x)), du = c0 * (1.0f + 3.0f * 0.044715f * x * x);
        float d = rnd(dt, rnd(dt, acc[i * n + j]) * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du));
        st_el(y, dt, i * n + j, d);
        s += d;
      }
      if (ep->dbias) st_el(ep->dbias, dt, j, (float)s);
    }
    return;
  }
  if (ep->bias) in_mem(e, ep->bias, n * es, "matmul bias");
  if (ep->c) in_mem(e, ep->c, m * n * es, "matmul residual");
  if (ep->aux) in_mem(e, ep->aux, m * n * es, "matmul aux");
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      int64_t q = i * n + j;
      float t = rnd(dt, acc[q]); /* the matmul's output, then the bias add's */
      if (ep->bias) t = rnd(dt, t + ld_el(ep->bias, dt, j));
      if (ep->aux) {
        const float c0 = 0.7978845608028654f; /* sqrt(2/pi) */
        st_el(ep->aux, dt, q, t);
        t = 0.5f * t * (1.0f + tanhf(c0 * (t + 0.044715f * t * t * t)));
      } else if (ep->c) {
        t = ld_el(ep->c, dt, q) + t;
      }
      st_el(y, dt, q, t);
    }
}

/* SHARDRT_EMU_NO_EPILOGUE: "all" or a comma-separated list of epilogue names (rt_cu_epi_name) for
 * which the emulated device, like cuBLASLt's heuristic finding none, has no algorithm: the generated
 * code then runs the plain GEMM and the unfused kernels (tests the fallback without a GPU). */
static bool emu_no_algorithm(const RtCuEpi *ep) {
  const char *v = getenv("SHARDRT_EMU_NO_EPILOGUE");
  if (!ep || !v || !*v) return false;
  if (strcmp(v, "all") == 0) return true;
  static const char *const known[] = {"BIAS", "BIAS_RESIDUAL", "RESIDUAL", "GELU_AUX_BIAS", "DGELU", "DGELU_BGRAD"};
  const char *name = rt_cu_epi_name(ep);
  bool hit = false;
  for (const char *p = v; *p;) {
    const char *q = strchr(p, ',');
    size_t l = q ? (size_t)(q - p) : strlen(p);
    bool ok = false;
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) ok = ok || (strlen(known[i]) == l && !strncmp(p, known[i], l));
    if (!ok)
      rt_fatal(1, "SHARDRT_EMU_NO_EPILOGUE=%s: '%.*s' is no epilogue (all, or a comma-separated list of BIAS, "
               "BIAS_RESIDUAL, RESIDUAL, GELU_AUX_BIAS, DGELU, DGELU_BGRAD)", v, (int)l, p);
    hit = hit || (l == strlen(name) && !strncmp(p, name, l));
    p += l + (q != NULL);
  }
  return hit;
}

/* The GEMM (emu_matmul's checks done). */
static void emu_gemm(EmuBe *e, void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t batch, int64_t m,
                     int64_t n, int64_t k, int ta, int tb, int b_batched, float alpha, float beta, const RtCuEpi *ep) {
  size_t es = ab_dt == RT_BF16 ? 2 : 4;
  int64_t lda = ta ? m : k, ldb = tb ? k : n;
  float *yt = y_dt == RT_BF16 || ep ? malloc((size_t)(m * n) * sizeof *yt) : NULL;
  if ((y_dt == RT_BF16 || ep) && !yt) rt_fatal(1, "out of memory");
  float *bt = NULL;
  const float *bf = b_batched ? NULL : as_f32(b, ab_dt, k * n, &bt);
  for (int64_t i = 0; i < batch; i++) {
    float *at = NULL, *bi = NULL;
    const float *af = as_f32((const char *)a + (size_t)(i * m * k) * es, ab_dt, m * k, &at);
    const float *bb = b_batched ? as_f32((const char *)b + (size_t)(i * k * n) * es, ab_dt, k * n, &bi) : bf;
    if (ep) { /* batch 1, alpha 1, beta 0 (rt_cu_matmul_ep) */
      rt_gemm(ta, tb, m, n, k, 1.0f, af, lda, bb, ldb, 0.0f, yt, n);
      emu_epilogue(e, yt, y, y_dt, m, n, ep);
    } else if (y_dt == RT_F32) {
      rt_gemm(ta, tb, m, n, k, alpha, af, lda, bb, ldb, beta, (float *)y + i * m * n, n);
    } else {
      uint16_t *yh = (uint16_t *)y + i * m * n;
      for (int64_t j = 0; j < m * n; j++) yt[j] = beta != 0 ? rt_bf16_to_f32(yh[j]) : 0;
      rt_gemm(ta, tb, m, n, k, alpha, af, lda, bb, ldb, beta, yt, n);
      for (int64_t j = 0; j < m * n; j++) yh[j] = rt_f32_to_bf16(yt[j]);
    }
    free(at);
    free(bi);
  }
  free(bt);
  free(yt);
}

/* The autotuning's candidate run (gemm_tune.c): the emulated device's one algorithm into d; with the
 * test hook SHARDRT_EMU_WRONG_GEMM=1 a second candidate, the same GEMM with its last element of y wrong
 * (1.0625 y + 0.0625, as a misaligned tail might be): the check must refuse it. */
typedef struct {
  EmuBe *e;
  void *d;
  const void *a, *b;
  const RtCuEpi *ep;
  int y_dt, ab_dt, ta, tb, bb;
  int64_t batch, m, n, k;
  float alpha, beta;
  const char *ok; /* [ncand]: 0 for a candidate the check refused (not timed) */
} EmuTrial;

static double emu_trial(void *arg, int cand) {
  EmuTrial *t = arg;
  if (!t->ok[cand]) return -1;
  double t0 = rt_cu_tune_clock();
  emu_gemm(t->e, t->d, t->y_dt, t->a, t->b, t->ab_dt, t->batch, t->m, t->n, t->k, t->ta, t->tb, t->bb, t->alpha, t->beta,
           t->ep);
  if (cand == 1) {
    int64_t last = t->batch * t->m * t->n - 1;
    if (t->y_dt == RT_BF16) {
      uint16_t *y = t->d;
      y[last] = rt_f32_to_bf16(1.0625f * rt_bf16_to_f32(y[last]) + 0.0625f);
    } else {
      float *y = t->d;
      y[last] = 1.0625f * y[last] + 0.0625f;
    }
  }
  return rt_cu_tune_clock() - t0;
}

static double emu_check_run(void *arg, int cand) { return emu_trial(arg, cand); }
static void emu_check_copy(void *carg, void *dst, const void *src, int64_t bytes, int kind) {
  (void)carg, (void)kind;
  memmove(dst, src, (size_t)bytes);
}

static int emu_wrong_gemm(void) {
  const char *v = getenv("SHARDRT_EMU_WRONG_GEMM");
  if (!v || !*v || !strcmp(v, "0")) return 0;
  if (strcmp(v, "1") != 0)
    rt_fatal(1, "SHARDRT_EMU_WRONG_GEMM=%s: want 1 (a second, wrong GEMM candidate: a test of the autotuning's check) "
                "or 0", v);
  return 1;
}

/* SHARDRT_GEMM_AUTOTUNE=N (off by default here: one algorithm, nothing to choose) runs the tuning's
 * candidate loop at a GEMM key's first call as on a GPU: its candidates checked against the first
 * (tune_check.c; only with SHARDRT_EMU_WRONG_GEMM is there a second) and timed on the real operands,
 * an output the GEMM reads (rt_cu_tune_y_read) copied to scratch first, so that what the real call then
 * computes is unchanged (e2e_cuda_epilogue_fallback checks it byte for byte). The choice (candidate "0")
 * is recorded as gemm.c records a GPU's (gemm-tune-<hash of "emu gemm checked">.txt, a line per key and,
 * with several ranks, per rank), a refused candidate too ("<key> refused 1"); a key whose line names
 * the choice is taken without timing, a refused candidate is not run again. */
static void emu_tune(EmuBe *e, void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t batch, int64_t m,
                     int64_t n, int64_t k, int ta, int tb, int b_batched, float alpha, float beta, const RtCuEpi *ep) {
  if (rt_cu_tune_candidates(0) == 0) return;
  RtCuGemmKey key = rt_cu_gemm_key(y, y_dt, a, b, ab_dt, batch, m, n, k, ta, tb, b_batched, ep);
  for (int i = 0; i < e->ntuned; i++)
    if (rt_cu_gemm_key_eq(&e->tuned[i], &key)) return;
  if (e->ntuned == e->captuned) {
    e->captuned = e->captuned ? 2 * e->captuned : 16;
    RtCuGemmKey *nk = realloc(e->tuned, (size_t)e->captuned * sizeof *nk);
    if (!nk) rt_fatal(1, "out of memory");
    e->tuned = nk;
  }
  e->tuned[e->ntuned++] = key;
  if (!e->rec_open) {
    const char *parts[] = {"emu gemm", "checked"}; /* records from before the check: not read (tune_check.c) */
    const size_t lens[] = {8, 7};
    rt_cu_rec_open(&e->rec, "gemm-tune", parts, lens, 2, RT_CU_GEMM_KEY_WORDS);
    e->rec_open = 1;
  }
  char rkey[320], fkey[600];
  rt_cu_gemm_rec_key(&key, e->rank, e->world, rkey, sizeof rkey);
  const char *known = rt_cu_rec_get(&e->rec, rkey);
  if (known && !strcmp(known, "0")) { /* the one algorithm, as an earlier run chose */
    rt_cu_tune_recorded();
    return;
  }
  size_t bytes = (size_t)(batch * m * n) * (y_dt == RT_BF16 ? 2 : 4);
  void *scratch = NULL;
  if (rt_cu_tune_y_read(y, beta, ep)) {
    if (!(scratch = malloc(bytes))) rt_fatal(1, "out of memory");
    memcpy(scratch, y, bytes);
  }
  int ncand = emu_wrong_gemm() ? 2 : 1, skipped = 0;
  char ok[2] = {1, 1}, why[2][RT_CU_WHY] = {"", ""};
  EmuTrial t = {e, scratch ? scratch : y, a, b, ep, y_dt, ab_dt, ta, tb, b_batched, batch, m, n, k, alpha, beta, ok};
  if (ncand > 1) {
    rt_cu_gemm_refused_key(&key, "1", e->rank, e->world, fkey, sizeof fkey);
    if (rt_cu_rec_get(&e->rec, fkey)) ok[1] = 0, skipped = 1;
    RtCuCheckOut co[3];
    int nout = rt_cu_gemm_check_outs(&key, t.d, scratch ? y : NULL, ep, co);
    RtCuCheck ck = {emu_check_run, &t, emu_check_copy, e, co, nout};
    double t0 = rt_cu_tune_clock(), closest = 0;
    int checked = rt_cu_tune_check(&ck, ncand, ok, why, &closest);
    if (!ok[1] && why[1][0]) {
      rt_cu_tune_refused(&key, 1, "1", why[1], e->rank, e->world);
      rt_cu_rec_set(&e->rec, fkey, why[1]);
    }
    if (scratch) memcpy(scratch, y, bytes); /* the timing runs read what the real call will */
    rt_cu_tune_checked(checked, skipped, rt_cu_tune_clock() - t0, closest);
  }
  int best = rt_cu_tune_pick(ncand, emu_trial, &t, &key);
  free(scratch);
  rt_cu_rec_set(&e->rec, rkey, best ? "1" : "0");
  rt_cu_rec_save(&e->rec, "GEMM");
}

static int emu_matmul(void *be, void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t batch, int64_t m,
                      int64_t n, int64_t k, int ta, int tb, int b_batched, float alpha, float beta, const RtCuEpi *ep) {
  EmuBe *e = be;
  if (emu_no_algorithm(ep)) return 1;
  size_t es = ab_dt == RT_BF16 ? 2 : 4, ys = y_dt == RT_BF16 ? 2 : 4;
  in_mem(e, a, batch * m * k * (int64_t)es, "matmul A");
  in_mem(e, b, (b_batched ? batch : 1) * k * n * (int64_t)es, "matmul B");
  in_mem(e, y, batch * m * n * (int64_t)ys, "matmul y");
  emu_tune(e, y, y_dt, a, b, ab_dt, batch, m, n, k, ta, tb, b_batched, alpha, beta, ep);
  emu_gemm(e, y, y_dt, a, b, ab_dt, batch, m, n, k, ta, tb, b_batched, alpha, beta, ep);
  return 0;
}

/* The strided pair (rt_cu_matmul_pair) as the GPU's batch reads it: entry i at y0 + i sy and b0 + i sb
 * (elements), A shared; each entry the one GEMM it would be alone (the same numbers). */
static int emu_matmul_pair(void *be, void *y0, int y_dt, const void *a, const void *b0, int ab_dt, int64_t m, int64_t n,
                           int64_t k, int ta, int tb, int64_t sb, int64_t sy) {
  int64_t es = ab_dt == RT_BF16 ? 2 : 4, ys = y_dt == RT_BF16 ? 2 : 4;
  if (sb <= 0 || sy <= 0) rt_fatal(1, "emu: a GEMM pair's strides %lld and %lld: both must be positive", (long long)sb,
                                   (long long)sy);
  for (int64_t i = 0; i < 2; i++)
    emu_matmul(be, (char *)y0 + i * sy * ys, y_dt, a, (const char *)b0 + i * sb * es, ab_dt, 1, m, n, k, ta, tb, 0, 1.0f,
               0.0f, NULL);
  return 0;
}

static void emu_copy(void *be, void *dst, const void *src, int64_t bytes, int kind) {
  EmuBe *e = be;
  if (kind != RT_CU_D2H) in_mem(e, dst, bytes, "copy destination");
  if (kind == RT_CU_D2D || kind == RT_CU_D2H) in_mem(e, src, bytes, "copy source");
  memmove(dst, src, (size_t)bytes);
}

static void emu_zero(void *be, void *dst, int64_t bytes) {
  in_mem(be, dst, bytes, "fill");
  memset(dst, 0, (size_t)bytes);
}

static void emu_copy2d(void *be, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                       size_t height) {
  EmuBe *e = be;
  in_mem(e, dst, (int64_t)(dpitch * (height - 1) + width), "2D copy destination");
  in_mem(e, src, (int64_t)(spitch * (height - 1) + width), "2D copy source");
  for (size_t r = 0; r < height; r++) memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
}

static void emu_sync(void *be) { (void)be; }

/* Plan offload's overlapped copies. The emulated device has no second stream: a copy is made when
 * it starts. What the overlap changes is when its bytes may be touched, so each copy is kept until
 * its slot's wait, which checks that its source and destination still hold the same bytes: a
 * source written, or a destination written or reused, while the copy would still be in flight on a
 * GPU (where it may run any time between its start and its wait) stops the run, naming the slot. */
static void emu_copy_start(void *be, void *dst, const void *src, int64_t bytes, int kind, int slot) {
  EmuBe *e = be;
  in_mem(e, kind == RT_CU_D2H ? src : dst, bytes, kind == RT_CU_D2H ? "offload download source" : "offload upload destination");
  memmove(dst, src, (size_t)bytes);
  if (e->ninflight == e->capinflight) {
    int n = e->capinflight ? 2 * e->capinflight : 64;
    EmuCopy *q = realloc(e->inflight, sizeof *q * (size_t)n);
    if (!q) rt_fatal(1, "out of memory");
    e->inflight = q, e->capinflight = n;
  }
  e->inflight[e->ninflight++] = (EmuCopy){dst, src, bytes, kind, slot};
}

static void emu_wait(EmuBe *e, int slot, int kind) {
  int k = 0;
  for (int i = 0; i < e->ninflight; i++) {
    EmuCopy q = e->inflight[i];
    if (q.slot != slot) {
      e->inflight[k++] = q;
      continue;
    }
    if (q.kind != kind)
      rt_fatal(1, "emulated device: offload slot %d: a %s copy waited by the %s", slot, q.kind == RT_CU_D2H ? "download" : "upload",
               kind == RT_CU_D2H ? "host" : "device");
    if (memcmp(q.dst, q.src, (size_t)q.bytes) != 0)
      rt_fatal(1, "emulated device: offload slot %d: the %s of %lld bytes was overwritten while in flight (its source or "
                  "destination written between its start and its wait)",
               slot, kind == RT_CU_D2H ? "download" : "upload", (long long)q.bytes);
  }
  e->ninflight = k;
}

static void emu_host_wait(void *be, int slot) { emu_wait(be, slot, RT_CU_D2H); }
static void emu_device_wait(void *be, int slot) { emu_wait(be, slot, RT_CU_H2D); }

/* The attention autotuning (attn_tune.c): a launch runs to completion here, timed by the host clock. */
static double emu_time_launch(void *be, int k, const unsigned grid[3], const unsigned block[3], unsigned smem,
                              void **args) {
  EmuBe *e = be;
  if (k < 0 || k >= e->nk || !e->fn[k]) return -1;
  double t0 = rt_cu_tune_clock();
  emu_launch(be, k, grid, block, smem, args);
  return rt_cu_tune_clock() - t0;
}
static void *emu_scratch(void *be, int64_t bytes) {
  EmuBe *e = be;
  for (int i = 0; i < 8; i++)
    if (!e->scratch[i].p) {
      e->scratch[i].p = malloc((size_t)bytes);
      e->scratch[i].bytes = bytes;
      return e->scratch[i].p;
    }
  return NULL; /* more than 8 at once: none (the caller runs the default) */
}
static void emu_scratch_free(void *be, void *p) {
  EmuBe *e = be;
  for (int i = 0; i < 8; i++)
    if (e->scratch[i].p == p) e->scratch[i].p = NULL;
  free(p);
}
static void emu_tune_id(void *be, char *out, size_t n) {
  (void)be;
  snprintf(out, n, "emu");
}

static void emu_describe(void *be, char *out, size_t n) {
  EmuBe *e = be;
  snprintf(out, n, "emulated CUDA device (SHARDRT_DEVICE=emu): host memory, %d kernels compiled by the host C++ "
           "compiler%s",
           e->nk, e->from_cache ? " (from the cache)" : "");
}

static double emu_peak(void *be) {
  EmuBe *e = be;
  if (e->peak <= 0) e->peak = rt_measure_peak_flops(e->threads, 0.04);
  return e->peak;
}

static void emu_close(void *be) {
  EmuBe *e = be;
  if (!e) return;
  free(e->base);
  free(e->inflight);
  if (e->so) dlclose(e->so);
  free(e->fn);
  free(e->tuned);
  rt_cu_rec_free(&e->rec);
  free(e);
}

static int emu_wgmma(void *be) { /* sk_emu_wgmma.h */
  (void)be;
  return 1;
}

static const RtCuOps emu_ops = {.name = "emu",
                                .launch = emu_launch,
                                .matmul = emu_matmul,
                                .matmul_pair = emu_matmul_pair,
                                .copy = emu_copy,
                                .zero = emu_zero,
                                .copy2d = emu_copy2d,
                                .sync = emu_sync,
                                .copy_start = emu_copy_start,
                                .host_wait = emu_host_wait,
                                .device_wait = emu_device_wait,
                                .describe = emu_describe,
                                .time_launch = emu_time_launch,
                                .scratch = emu_scratch,
                                .scratch_free = emu_scratch_free,
                                .tune_id = emu_tune_id,
                                .peak = emu_peak,
                                .close = emu_close,
                                .wgmma = emu_wgmma};

/* The emulated device's memory, free at start: SHARDRT_EMU_MEMORY (bytes, or with a K, M or G
 * suffix: KiB, MiB, GiB); -1 when unset (unbounded: host memory); -2 after an error. */
static int64_t emu_memory(void) {
  const char *v = getenv("SHARDRT_EMU_MEMORY");
  if (!v || !*v) return -1;
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  int sh = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
  if (sh) end++;
  if (errno || end == v || *end || x < 0 || x > (INT64_MAX >> sh)) {
    rt_cu_error("SHARDRT_EMU_MEMORY='%s': expected the emulated device's memory in bytes (or with K, M or G: KiB, "
                "MiB, GiB)", v);
    return -2;
  }
  return (int64_t)x << sh;
}

int rt_cu_open_emu(const RtProgram *p, RtCtx *ctx, int64_t bytes, char **mem, RtCuDev *dev) {
  EmuBe *e = calloc(1, sizeof *e);
  if (!e) rt_fatal(1, "out of memory");
  e->threads = ctx->threads > 0 ? ctx->threads : 1;
  e->rank = ctx->rank, e->world = ctx->world;
  int64_t cap = emu_memory(); /* the plan against the memory the emulated device says it has free */
  if (cap < -1 || (cap >= 0 && rt_cu_check_free(p, ctx, bytes, cap, cap, "the emulated device") != 0)) {
    emu_close(e);
    return -1;
  }
  if (load_kernels(e, p->cuda) != 0) {
    emu_close(e);
    return -1;
  }
  size_t sz = ((size_t)(bytes > 0 ? bytes : 256) + 255) / 256 * 256;
  e->base = aligned_alloc(256, sz);
  if (!e->base) {
    rt_cu_error("emulated device: cannot allocate the planned %lld bytes", (long long)bytes);
    emu_close(e);
    return -1;
  }
  memset(e->base, 0, sz);
  e->bytes = (int64_t)sz;
  *mem = e->base;
  dev->ops = &emu_ops;
  dev->be = e;
  return 0;
}
