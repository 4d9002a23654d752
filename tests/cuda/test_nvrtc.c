/* tests/cuda/test_nvrtc.c — every kernel family (the cases of kcases.c: several shapes, f32 and
 * bf16) compiles with NVRTC to cubin for sm_80 and sm_90 (a cubin is NVRTC's PTX put through ptxas:
 * the PTX that a driver of a newer GPU would compile, compute_XX, comes out of the same front end, so
 * compiling it again proved nothing more), with the kernel headers given in memory; every kernel is in
 * each cubin (its section .text.kN). Any error fails; so does any warning in the log. Given nvdisasm,
 * the sm_90 cubin's attention kernels must hold tensor-core (HMMA) instructions: a CUDA-core fallback
 * cannot pass for the fast path.
 *
 * The sm_80 builds use NVRTC's --Ofast-compile=max: the same front end (under __CUDA_ARCH__ 800) and
 * sm_80's ptxas, every kernel in the image, with the NVVM optimizer at its least (8 s instead of 71 on a
 * 2.45 GHz Zen 3, of which NVVM's optimizer was 52 s: the same optimizer runs at full on these kernels in
 * the sm_90 builds, whose SASS is what the checks read). Every compilation of this test (these two, the
 * wgmma check's three) is a job of one queue that two threads take, the longest first. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kcases.h"
#include "nvrtc_util.h"

/* One NVRTC compilation: a job of the queue (run_jobs) */
typedef struct {
  const char *src;  /* the program */
  const char *arch; /* sm_XX */
  const char *opt;  /* one more NVRTC option, or NULL */
  int rc;           /* cudak_nvrtc_opt's */
  char *img, *log;  /* the image and NVRTC's log (malloc'd) */
  size_t bytes;
  double s;         /* wall seconds */
} Job;

static Job *queue;
static int queued, taken;
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&qlock);
    int i = taken < queued ? taken++ : -1;
    pthread_mutex_unlock(&qlock);
    if (i < 0) return NULL;
    Job *j = &queue[i];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    j->rc = cudak_nvrtc_opt(j->src, j->arch, j->opt, &j->img, &j->bytes, &j->log);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    j->s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  }
}

/* Runs the n jobs on two threads (this one and another), in their order. */
static void run_jobs(Job *jobs, int n) {
  queue = jobs, queued = n, taken = 0;
  pthread_t t;
  int threaded = pthread_create(&t, NULL, worker, NULL) == 0;
  worker(NULL);
  if (threaded) pthread_join(t, NULL);
}

/* The default kernels' job: no error, no warning, every kernel in the image. Returns 1 on failure. */
static int check_cases(const Job *j, int nk) {
  int fail = j->rc != 0 || (j->log && strstr(j->log, "warning"));
  if (fail) printf("FAIL %s%s\n%s\n", j->arch, j->rc ? "" : " (warnings)", j->log ? j->log : "");
  else {
    int missing = 0;
    for (int k = 0; k < nk; k++) { /* every kernel is in the image: its section (the name's NUL too) */
      char name[32];
      int n = snprintf(name, sizeof name, ".text.k%d", k);
      missing += memmem(j->img, j->bytes, name, (size_t)n + 1) == NULL;
    }
    if (missing) printf("FAIL %s: %d kernels missing from the image\n", j->arch, missing), fail = 1;
    else printf("ok   %s%s%s: %zu bytes in %.1f s\n", j->arch, j->opt ? " " : "", j->opt ? j->opt : "", j->bytes, j->s);
  }
  return fail;
}

/* The kernels whose source calls a tensor-core template (sk::flash_*) must hold HMMA instructions in
 * the sm_90 cubin: nvdisasm's listing, section .text.kN per kernel. Returns the number of failures. */
static int sass_check(const char *nvdisasm, const char *src, const char *img, size_t bytes, const char *tmpl,
                      const char *insn, const char *arch) {
  char path[] = "/tmp/shardc-sass-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0 || write(fd, img, bytes) != (ssize_t)bytes) {
    printf("FAIL sass: cannot write the cubin to %s\n", path);
    return 1;
  }
  close(fd);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s' '%s' 2>&1", nvdisasm, path);
  FILE *p = popen(cmd, "r");
  size_t cap = 1 << 20, len = 0;
  char *text = malloc(cap), line[4096];
  int cur = -1, hmma[4096] = {0};
  while (p && text && fgets(line, sizeof line, p)) {
    int k;
    if (sscanf(line, ".text.k%d:", &k) == 1 && k >= 0 && k < 4096) cur = k;
    else if (cur >= 0 && strstr(line, insn)) hmma[cur]++;
    if (len < 200) len += (size_t)snprintf(text + len, cap - len, "%s", line); /* the start, for errors */
  }
  int rc = p ? pclose(p) : -1;
  unlink(path);
  if (rc != 0) {
    printf("FAIL sass: %s failed (status %d; scripts/setup.sh installs nvdisasm): %s\n", nvdisasm, rc, text ? text : "");
    free(text);
    return 1;
  }
  free(text);
  int fails = 0, tc = 0, skipped = 0;
  for (const char *at = strstr(src, tmpl); at; at = strstr(at + 1, tmpl)) {
    const char *h = NULL;
    for (const char *q = strstr(src, "__global__ void"); q && q < at; q = strstr(q + 1, "__global__ void")) h = q;
    int k = -1;
    const char *name = h ? strstr(h, ") k") : NULL;
    if (!name || sscanf(name, ") k%d(", &k) != 1 || k < 0 || k >= 4096) continue;
    /* a candidate compiled only for the autotuning (`#ifdef SK_ATTN_TUNE` before its `extern "C"`; this compile
     * leaves it out): not in the cubin. The pair key's are such: the same templates on the backward's unified
     * pointers as kernels checked here. */
    const char *g = h - 40 > src ? h - 40 : src;
    if (memmem(g, (size_t)(h - g), "#ifdef SK_ATTN_TUNE", 19)) {
      skipped++;
      continue;
    }
    tc++;
    if (hmma[k] == 0) {
      printf("FAIL sass: k%d (%.40s...) has no %s instruction in the %s cubin\n", k, at, insn, arch);
      fails++;
    }
  }
  if (tc == 0) printf("FAIL sass: no tensor-core attention kernel among the cases\n"), fails++;
  if (!fails)
    printf("ok   sass: the %d tensor-core attention kernels (%s) hold %s instructions (%s, nvdisasm; %d compiled only under "
           "SK_ATTN_TUNE left out)\n",
           tc, tmpl, insn, arch, skipped);
  return fails;
}

/* The attention forward and backward on wgmma (shardk_wgmma.cuh, shardk_wgmma_bwd.cuh) in each of their tiles,
 * hd 64 and 128, causal or not, with GQA: compiles with no warning for sm_90a (ptxas -v: its registers and spills, printed; no spill
 * allowed) and, as a trap, for sm_80 and sm_90 (wgmma_results); with nvdisasm, each sm_90a kernel holds HGMMA.
 * wgmma_program returns the program (its kernels in *nk) after checking the autotuned launches' candidates
 * (failures added to *fails). */
static const char *wgmma_program(Arena *a, int *nk, int *fails) {
  CuK *k = cuk_new(a);
  int64_t hds[] = {64, 128};
  for (int i = 0; i < 2; i++) {
    CuWgTile w[16];
    int nw = cuk_wg_variants(hds[i], w, 16);
    for (int j = 0; j < nw; j++) {
      cuk_set_flash_wg(k, &w[j]);
      cuk_sdpa(k, "p", "p", "p", "p", "p", DT_BF16, 8, 1024, 12, 12, hds[i], 1, NULL);
      cuk_sdpa(k, "p", "p", "p", "p", "p", DT_BF16, 2, 1000, 16, 8, hds[i], 0, NULL);
    }
  }
  cuk_set_flash_wg(k, NULL);
  for (int i = 0; i < 2; i++) { /* the backward (shardk_wgmma_bwd.cuh): each dK/dV tile, each dQ tile */
    CuWgBwdTile kv[8], q[8];
    int nkv = cuk_wg_bwd_variants(1, hds[i], kv, 8), nq = cuk_wg_bwd_variants(2, hds[i], q, 8);
    for (int j = 0; j < (nkv > nq ? nkv : nq); j++) {
      cuk_set_flash_wg_bwd(k, j < nkv ? &kv[j] : NULL, j < nq ? &q[j] : NULL);
      cuk_sdpa_bwd(k, "p", "p", "p", "p", "p", "p", "p", "p", "p", DT_BF16, 8, 1024, 12, 12, hds[i], 1, NULL);
      cuk_sdpa_bwd(k, "p", "p", "p", "p", "p", "p", "p", "p", "p", DT_BF16, 2, 1000, 16, 8, hds[i], 0, NULL);
    }
  }
  cuk_set_flash_wg_bwd(k, NULL, NULL);
  for (int i = 0; i < 2; i++) { /* the backward in one kernel (shardk_wgmma_bwd1.cuh): each tile */
    CuWgBwdTile f[4];
    int nf = cuk_wg_bwd1_variants(hds[i], f, 4);
    for (int j = 0; j < nf; j++) {
      cuk_set_flash_wg_bwd1(k, &f[j]);
      cuk_sdpa_bwd(k, "p", "p", "p", "p", "p", "p", "p", "p", "p", DT_BF16, 8, 1024, 12, 12, hds[i], 1, NULL);
      cuk_sdpa_bwd(k, "p", "p", "p", "p", "p", "p", "p", "p", "p", DT_BF16, 2, 1000, 16, 8, hds[i], 0, NULL);
    }
  }
  cuk_set_flash_wg_bwd1(k, NULL);
  /* autotuned: the forward's candidates end with the wgmma tiles ("wg<bk>x<nwg>", their dynamic shared
   * memory), the backward kernels' too, and the backward's pair key holds the one-kernel form's */
  cuk_set_attn_tune(k, 1);
  const char *fw = cuk_sdpa(k, "p", "p", "p", "p", "p", DT_BF16, 8, 1024, 12, 12, 64, 1, NULL);
  const char *bw = cuk_sdpa_bwd(k, "p", "p", "p", "p", "p", "p", "p", "p", "p", DT_BF16, 8, 1024, 12, 12, 64, 1, NULL);
  cuk_set_attn_tune(k, 0);
  CuWgTile w0[16];
  int nw0 = cuk_wg_variants(64, w0, 16);
  for (int j = 0; j < nw0; j++) {
    char want[64], tag[32];
    snprintf(want, sizeof want, "%d, \"%s\", %lld}", cuk_wg_threads(&w0[j]), cuk_wg_tag(&w0[j], tag, sizeof tag),
             (long long)cuk_wg_smem(64, &w0[j]));
    if (!strstr(fw, want)) printf("FAIL wgmma: the tuned forward has no candidate %s: %s\n", want, fw), (*fails)++;
  }
  for (int which = 1; which <= 2; which++) { /* the backward's: each kernel's wgmma tiles */
    CuWgBwdTile b[8];
    int nb = cuk_wg_bwd_variants(which, 64, b, 8);
    for (int j = 0; j < nb; j++) {
      char want[64];
      snprintf(want, sizeof want, "\"wg%dx%d%s\", %lld}", b[j].bt, b[j].nwg, b[j].pipe ? "p" : "",
               (long long)cuk_wg_bwd_smem(which, 64, &b[j]));
      const char *at = strstr(bw, which == 1 ? "\"flash_bwd_kv " : "\"flash_bwd_q "), *end = at ? strstr(at, "});") : NULL;
      const char *hit = at ? strstr(at, want) : NULL;
      if (!hit || hit > end)
        printf("FAIL wgmma: the tuned %s has no candidate %s: %s\n", which == 1 ? "dK/dV" : "dQ", want, bw), (*fails)++;
    }
  }
  { /* the backward's pair key: the one-kernel form's tiles after the two kernels' defaults ("two") */
    CuWgBwdTile f[4];
    int nf = cuk_wg_bwd1_variants(64, f, 4);
    const char *at = strstr(bw, "rt_cu_launch_tuned_or(ctx, \"flash_bwd S "), *end = at ? strstr(at, "})") : NULL;
    if (!at || !strstr(at, "\"two\"")) printf("FAIL wgmma: the tuned backward has no pair key: %s\n", bw), (*fails)++;
    for (int j = 0; at && j < nf; j++) {
      char want[64];
      snprintf(want, sizeof want, "\"wgf%dx%d\", %lld}", f[j].bt, f[j].nwg, (long long)cuk_wg_bwd1_smem(64, &f[j]));
      const char *hit = strstr(at, want);
      if (!hit || hit > end) printf("FAIL wgmma: the pair key has no candidate %s: %s\n", want, at), (*fails)++;
    }
  }
  *nk = cuk_count(k);
  return cuk_source(k);
}

/* the wgmma program's three jobs (sm_90a with ptxas -v first: the longest) */
static void wgmma_jobs(Job jobs[3], const char *src) {
  jobs[0] = (Job){.src = src, .arch = "sm_90a", .opt = "--ptxas-options=-v"};
  jobs[1] = (Job){.src = src, .arch = "sm_80", .opt = "--Ofast-compile=max"};
  jobs[2] = (Job){.src = src, .arch = "sm_90"};
}

/* The wgmma jobs' checks; returns the number of failures. */
static int wgmma_results(const Job jobs[3], const char *src, int nk, const char *nvdisasm) {
  int fails = 0;
  for (int i = 0; i < 3; i++) {
    const char *img = jobs[i].img, *log = jobs[i].log, *arch = jobs[i].arch;
    size_t bytes = jobs[i].bytes;
    int rc = jobs[i].rc;
    /* warnings, and ptxas' advice that it serialized the wgmma (accumulators it could not keep in place) */
    int warn = log && (strstr(log, "arning") != NULL || strstr(log, "erformance") != NULL), spill = 0;
    if (i == 0 && log) /* ptxas -v: "Used N registers ..." and "N bytes spill stores, N bytes spill loads" a kernel */
      for (const char *l = log; (l = strstr(l, "Compiling entry function")) != NULL; l++) {
        const char *f = strstr(l, "bytes stack frame"), *u = strstr(l, "Used ");
        if (!f || !u) continue;
        /* the number before "bytes stack frame" (ptxas prefixes the line: "ptxas         .     96 bytes stack
         * frame, ..." in NVRTC 13.0, whose prefix a scan from the line's start took for no number: no spill seen) */
        const char *ls = f;
        while (ls > l && ls[-1] == ' ') ls--;
        while (ls > l && ls[-1] >= '0' && ls[-1] <= '9') ls--;
        int stack = 0, st = 0, ld = 0;
        if (sscanf(ls, " %d bytes stack frame, %d bytes spill stores, %d bytes spill loads", &stack, &st, &ld) == 3)
          spill += st + ld > 0;
        printf("     %.*s: %.*s, %d + %d bytes spilled\n", (int)strcspn(l, "\n"), l, (int)strcspn(u, "\n"), u, st, ld);
      }
    if (rc != 0 || warn || spill) {
      printf("FAIL wgmma %s: %s\n%s\n", arch, rc ? "does not compile" : warn ? "warnings" : "spills", log ? log : "");
      fails++;
    } else {
      printf("ok   wgmma %s%s%s: %d kernels, %zu bytes in %.1f s\n", arch, jobs[i].opt && i ? " " : "",
             jobs[i].opt && i ? jobs[i].opt : "", nk, bytes, jobs[i].s);
      if (i == 0 && nvdisasm) fails += sass_check(nvdisasm, src, img, bytes, "_wg<", "HGMMA", "sm_90a");
    }
  }
  return fails;
}

/* test_cuda_nvrtc [NVDISASM [wgmma]]: with nvdisasm, the tensor-core checks of the sm_90 and sm_90a cubins
 * too; with "wgmma", only the wgmma kernels' checks (a quicker look at their registers) */
int main(int argc, char **argv) {
  const char *nvdisasm = argc > 1 ? argv[1] : NULL;
  int only_wgmma = argc > 2 && !strcmp(argv[2], "wgmma");
  Arena a;
  arena_init(&a);
  int64_t ws;
  int nk = 0, nwg, fails = 0;
  const char *src = NULL, *wsrc = wgmma_program(&a, &nwg, &fails);
  Job jobs[5];
  wgmma_jobs(jobs, wsrc); /* the longest first: sm_90a's wgmma (ptxas -v), then sm_90's cases */
  int n = 3;
  if (!only_wgmma) {
    kc_flash_variants(0); /* the attention tiles the compiler emits (the others: cuda_kernels_emu, the GPU sweep) */
    kc_bytes_variants(0); /* the same for the bytes-bound kernels */
    src = kc_emit_all(&a, &ws, &nk);
    printf("%d kernels, %zu bytes of source\n", nk, strlen(src));
    jobs[3] = jobs[1], jobs[4] = jobs[2]; /* the wgmma traps last (seconds each) */
    jobs[1] = (Job){.src = src, .arch = "sm_90"};
    jobs[2] = (Job){.src = src, .arch = "sm_80", .opt = "--Ofast-compile=max"};
    n = 5;
  }
  run_jobs(jobs, n);
  if (!only_wgmma) {
    fails += check_cases(&jobs[2], nk);
    int bad90 = check_cases(&jobs[1], nk);
    fails += bad90;
    if (nvdisasm && !bad90) fails += sass_check(nvdisasm, src, jobs[1].img, jobs[1].bytes, "sk::flash_", "HMMA", "sm_90");
  }
  Job wg[3] = {jobs[0], only_wgmma ? jobs[1] : jobs[3], only_wgmma ? jobs[2] : jobs[4]};
  fails += wgmma_results(wg, wsrc, nwg, nvdisasm);
  for (int i = 0; i < n; i++) free(jobs[i].img), free(jobs[i].log);
  arena_free(&a);
  return fails ? 1 : 0;
}
