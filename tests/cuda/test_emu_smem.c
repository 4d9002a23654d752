/* tests/cuda/test_emu_smem.c — the emulator's model of dynamic shared memory (sk_emu.h), which the
 * tensor-core attention's tiles live in (shardk_flash_smem.cuh): a launch gives a kernel exactly its
 * bytes, so
 *   - the forward in 128-key tiles (72 KiB, over the 48 KiB of static shared memory) and the dK/dV kernel
 *     with K and V resident (RS) run when launched as the compiler launches them;
 *   - the same launches 16 bytes short stop in the kernel ("uses N bytes ..., its launch gave N - 16");
 *   - a launch above the device's 227 KiB is refused;
 *   - a kernel that writes past its launch's bytes without asking for them is caught by the guard;
 * and the compiled default tiles take at most 48 KiB at every head dim, every candidate at most 227 KiB.
 * Each run is a child process; a stop is an abort with the emulator's message on stderr.
 * Usage: test_emu_smem [workdir] */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_kernels.h"
#include "cuk_launch.h"

typedef void (*EmuFn)(unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void **);

static void *so;
static int fails;
static char *bufs[16], *ws; /* b0.. and the kernels' workspace WS */

/* the address an argument expression names: bN, or (WS + off) */
static char *arg_addr(const char *e) {
  long long off = 0;
  if (e[0] == 'b') return bufs[atoi(e + 1)];
  if (sscanf(e, "(WS + %lld)", &off) == 1 || sscanf(e, "WS + %lld", &off) == 1) return ws + off;
  if (!strcmp(e, "WS")) return ws;
  fprintf(stderr, "test_emu_smem: argument %s\n", e);
  _exit(5);
}
static const char *errpath;

/* Runs launch L with smem bytes in a child; returns 0 when it ran, 1 when it stopped with `want` on stderr,
 * -1 otherwise (printed). */
static int child(const CukLaunch *L, unsigned smem, const char *want) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(errpath, "w", stderr)) _exit(3);
    setvbuf(stderr, NULL, _IONBF, 0); /* abort flushes nothing */
    char name[64] = "probe_past_emu";
    if (L->kernel >= 0) snprintf(name, sizeof name, "k%d_emu", L->kernel);
    EmuFn f = (EmuFn)dlsym(so, name);
    if (!f) _exit(4);
    void *args[CUKL_MAX_ARGS];
    char *ptr[CUKL_MAX_ARGS];
    for (int i = 0; i < L->nargs; i++) ptr[i] = arg_addr(L->expr[i]), args[i] = &ptr[i];
    f(L->grid[0], L->grid[1], L->grid[2], L->block[0], L->block[1], L->block[2], smem, args);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  char msg[512] = "";
  FILE *e = fopen(errpath, "r");
  if (e) {
    size_t n = fread(msg, 1, sizeof msg - 1, e);
    msg[n] = 0;
    fclose(e);
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && !msg[0]) return 0;
  if (want && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(msg, want)) return 1;
  printf("  child: %s %d, stderr: %s\n", WIFSIGNALED(st) ? "signal" : "exit",
         WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), msg);
  return -1;
}

static void expect(const char *what, int got, int want) {
  printf("%s %s\n", got == want ? "ok  " : "FAIL", what);
  fails += got != want;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : ".";
  Arena a;
  arena_init(&a);
  CuK *k = cuk_new(&a);
  /* hd 64, S 40, H 2, KV 1: the forward in 128-key tiles, then dK/dV with K and V in shared memory */
  CuFlashCfg cfg = cuk_flash_cfg(64);
  cfg.fwd = (CuFlashTile){1, 4, 128, 0, 0};
  cfg.kv = (CuFlashTile){2, 4, 32, 0, 1};
  cuk_set_flash_cfg(k, &cfg);
  const int64_t B = 1, S = 40, H = 2, KV = 1, hd = 64;
  const char *fwd = cuk_sdpa(k, "b0", "b1", "b2", "b3", "b4", DT_BF16, B, S, H, KV, hd, 1, NULL);
  const char *bwd = cuk_sdpa_bwd(k, "b5", "b6", "b7", "b2", "b3", "b4", "b0", "b1", "b8", DT_BF16, B, S, H, KV, hd, 1, NULL);
  CukLaunch lf, lb[2];
  if (cukl_parse(fwd, &lf, 1) != 1 || cukl_parse(bwd, lb, 2) != 2) {
    fprintf(stderr, "FAIL: the launches do not parse:\n%s\n%s\n", fwd, bwd);
    return 1;
  }
  const CukLaunch *lkv = &lb[1]; /* dQ first, then dK/dV */
  if (lf.smem != (unsigned)cuk_flash_smem(0, hd, &cfg.fwd) || lf.smem <= 48 * 1024 ||
      lkv->smem != (unsigned)cuk_flash_smem(1, hd, &cfg.kv)) {
    fprintf(stderr, "FAIL: the launches give %u and %u bytes\n", lf.smem, lkv->smem);
    return 1;
  }
  char path[4096], lib[4096], cmd[16384], err[4096];
  snprintf(path, sizeof path, "%s/emu_smem.cu", dir);
  snprintf(lib, sizeof lib, "%s/emu_smem.so", dir);
  snprintf(err, sizeof err, "%s/emu_smem.err", dir);
  errpath = err;
  FILE *f = fopen(path, "w");
  /* and a kernel that writes a byte a thread of dynamic shared memory without asking for it */
  if (!f || fputs(cuk_source(k), f) < 0 ||
      fputs("\nextern \"C\" __global__ void probe_past(char *p0) {\n"
            "  ((unsigned char *)SK_DYN_SMEM())[threadIdx.x] = (unsigned char)*p0;\n}\n"
            "SK_EMU_ENTRY(probe_past, (SK_ARG(0, char *)))\n",
            f) < 0 ||
      fclose(f) != 0) {
    perror(path);
    return 1;
  }
  /* the compiled default launches within 48 KiB on every head dim (every sm_80+ GPU gives that without
   * the opt-in), every candidate within the 227 KiB of sm_90 */
  for (int64_t d = 16; d <= 128; d += 16) {
    CuFlashCfg v[16];
    int nv = cuk_flash_variants(d, v, 16);
    for (int i = 0; i < nv; i++)
      for (int w = 0; w < 3; w++) {
        const CuFlashTile *t = w == 0 ? &v[i].fwd : w == 1 ? &v[i].kv : &v[i].q;
        int64_t b = cuk_flash_smem(w, d, t);
        if (b > (i == 0 ? 48 : 227) * 1024) {
          printf("FAIL hd %lld candidate %d kernel %d: %lld bytes of shared memory\n", (long long)d, i, w, (long long)b);
          fails++;
        }
      }
  }
  const char *cxx = getenv("CXX");
  snprintf(cmd, sizeof cmd, "%s -std=c++17 -O1 -shared -fPIC -DSK_EMU -Wall -Wno-unknown-pragmas -Werror -I%s -I%s -x c++ %s -o %s",
           cxx && *cxx ? cxx : "c++", SK_KERNELS_DIR, CUDA_INCLUDE_DIR, path, lib);
  if (system(cmd) != 0) {
    fprintf(stderr, "FAIL: the emulated kernels do not compile: %s\n", cmd);
    return 1;
  }
  so = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!so) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  for (int i = 0; i < 9; i++) bufs[i] = calloc(1, (size_t)(B * S * H * hd * 4 + 64)); /* zeros: every input valid */
  ws = calloc(1, (size_t)cuk_workspace(k) + 64);
  char want[128];
  printf("forward 1x4x128 (%u bytes), dK/dV 2x4x32 K, V resident (%u bytes)\n", lf.smem, lkv->smem);
  expect("the forward runs with its launch's bytes", child(&lf, lf.smem, NULL), 0);
  expect("dQ, then dK/dV run with their launches' bytes", child(&lb[0], lb[0].smem, NULL) == 0 ? child(lkv, lkv->smem, NULL) : -1, 0);
  snprintf(want, sizeof want, "uses %u bytes of dynamic shared memory, its launch gave %u", lf.smem, lf.smem - 16);
  expect("the forward 16 bytes short stops", child(&lf, lf.smem - 16, want), 1);
  snprintf(want, sizeof want, "uses %u bytes of dynamic shared memory, its launch gave %u", lkv->smem, lkv->smem - 16);
  expect("dK/dV 16 bytes short stops", child(lkv, lkv->smem - 16, want), 1);
  expect("a launch over 227 KiB is refused", child(&lf, 227 * 1024 + 16, "a block may have at most 232448"), 1);
  CukLaunch past = {.kernel = -1, .grid = {2, 1, 1}, .block = {64, 1, 1}, .nargs = 1, .expr = {"b0"}};
  expect("64 bytes written into a launch's 64", child(&past, 64, NULL), 0);
  expect("64 bytes written into a launch's 48: the guard", child(&past, 48, "wrote past the 48 bytes"), 1);
  for (int i = 0; i < 9; i++) free(bufs[i]);
  free(ws);
  arena_free(&a);
  printf("%d checks failed\n", fails);
  return fails ? 1 : 0;
}
