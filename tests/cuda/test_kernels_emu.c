/* tests/cuda/test_kernels_emu.c — every kernel family on the CPU emulator: the cases' source
 * (kcases.c) compiled by the host C++ compiler under -DSK_EMU into a shared object, each kN_emu
 * run on host buffers and compared with the CPU references. Usage: test_kernels_emu [workdir] */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kcases.h"

typedef void (*EmuFn)(unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void **);
static void *so;

static void *h_alloc(size_t n) {
  void *p = calloc(1, n + 64);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}
static void h_free(void *p) { free(p); }
static void h_copy(void *d, const void *s, size_t n) { memcpy(d, s, n); }
/* every byte read back from the emulated device, hashed (FNV-1a 64) in order: printed at the end, so two
 * builds of the emulator can be compared bit for bit (the checks themselves allow each kernel its tolerance) */
static uint64_t out_hash = 14695981039346656037ull;
static void h_d2h(void *d, const void *s, size_t n) {
  memcpy(d, s, n);
  for (size_t i = 0; i < n; i++) out_hash = (out_hash ^ ((const unsigned char *)s)[i]) * 1099511628211ull;
}
static void h_launch(int kernel, const unsigned g[3], const unsigned b[3], unsigned smem, void **args) {
  char name[32];
  snprintf(name, sizeof name, "k%d_emu", kernel);
  EmuFn f = (EmuFn)dlsym(so, name);
  if (!f) {
    fprintf(stderr, "no %s in the emulated kernels: %s\n", name, dlerror());
    exit(1);
  }
  f(g[0], g[1], g[2], b[0], b[1], b[2], smem, args);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* line by line, also into a file: a run cut short shows where it was */
  const char *dir = argc > 1 ? argv[1] : ".";
  Arena a;
  arena_init(&a);
  int64_t ws;
  int nk;
  const char *src = kc_emit_all(&a, &ws, &nk);
  char path[4096], lib[4096], cmd[16384];
  snprintf(path, sizeof path, "%s/kcases_emu.cu", dir);
  snprintf(lib, sizeof lib, "%s/kcases_emu.so", dir);
  FILE *f = fopen(path, "w");
  if (!f || fputs(src, f) < 0 || fclose(f) != 0) {
    perror(path);
    return 1;
  }
  const char *cxx = getenv("CXX");
  snprintf(cmd, sizeof cmd, "%s -std=c++17 -O1 -shared -fPIC -DSK_EMU -Wall -Wno-unknown-pragmas -Werror -I%s -I%s -x c++ %s -o %s",
           cxx && *cxx ? cxx : "c++", SK_KERNELS_DIR, CUDA_INCLUDE_DIR, path, lib);
  printf("%d kernels, workspace %lld bytes\n%s\n", nk, (long long)ws, cmd);
  fflush(stdout);
  if (system(cmd) != 0) {
    fprintf(stderr, "FAIL: the emulated kernels do not compile\n");
    return 1;
  }
  so = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!so) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  KBackend be = {h_alloc, h_free, h_copy, h_d2h, h_launch};
  int fails = kc_run_all(&be, ws);
  printf("the emulated kernels' outputs (every byte read back): FNV-1a 64 %016llx\n", (unsigned long long)out_hash);
  arena_free(&a);
  return fails ? 1 : 0;
}
