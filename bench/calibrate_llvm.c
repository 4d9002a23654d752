/* bench/calibrate_llvm.c — bench_calibrate's measure of the LLVM-built elementwise kernels (--cpu-kernels llvm,
 * the CPU trainers' default: codegen/target_llvm.c), beside the C ones calibrate.c times: the kernels
 * codegen/llvm_kernels.c builds for one elementwise node, built the way a trainer's are (llk_compile, its
 * object linked into a shared library here), called as a trainer calls them on one thread (fn(0, n, p)),
 * over the same 128 Ki floats: a flat add, gelu (its own vectorised tanh), exp. The loops LLVM does not
 * build (a broadcast through computed indices, a reduction) stay the C kernels' in a trainer too. */
#include "calibrate_llvm.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llvm_kernels.h"

typedef void (*Kern)(int64_t, int64_t, void **);

typedef struct {
  Kern k;
  int64_t n;
  void *p[3];
} Call;

static void run_call(void *arg) {
  Call *c = arg;
  c->k(0, c->n, c->p);
}

bool calibrate_llvm_elem(CalTimer timer, float *x, float *b, float *y, int64_t n, double t[CAL_LLVM_COUNT], char **why) {
  *why = NULL;
  if (!llk_host_ok(why)) return false;
  Llk *k = llk_new();
  LlkEw add = {.nin = 2, .idx = {LLK_FULL, LLK_FULL}, .nops = 1, .nout = 1, .out_op = {0}};
  add.ops[0] = (LlkOp){OP_ADD, {-1, -2}, 0};
  LlkEw gelu = {.nin = 1, .idx = {LLK_FULL}, .nops = 1, .nout = 1, .out_op = {0}};
  gelu.ops[0] = (LlkOp){OP_GELU, {-1, 0}, 0};
  LlkEw ex = gelu;
  ex.ops[0].op = OP_EXP;
  const char *names[CAL_LLVM_COUNT] = {llk_ew(k, &add), llk_ew(k, &gelu), llk_ew(k, &ex)};
  char dir[] = "/tmp/shardc-calibrate-XXXXXX", obj[256], so[256], cmd[600];
  if (!mkdtemp(dir)) {
    llk_free(k);
    *why = strdup("mkdtemp failed");
    return false;
  }
  snprintf(obj, sizeof obj, "%s/k.o", dir), snprintf(so, sizeof so, "%s/k.so", dir);
  bool ok = llk_compile(k, obj, why);
  snprintf(cmd, sizeof cmd, "cc -shared -o %s %s -lm", so, obj);
  if (ok && system(cmd) != 0) {
    ok = false;
    *why = strdup("cc -shared failed");
  }
  void *h = ok ? dlopen(so, RTLD_NOW) : NULL;
  if (ok && !h) {
    ok = false;
    *why = strdup(dlerror());
  }
  for (int i = 0; ok && i < CAL_LLVM_COUNT; i++) {
    Call c = {(Kern)dlsym(h, names[i]), n, {x, i == 0 ? (void *)b : (void *)y, y}};
    if (i > 0) c.p[2] = NULL;
    if (!c.k) {
      ok = false;
      *why = strdup("a kernel's symbol is missing");
      break;
    }
    t[i] = timer(run_call, &c) / (double)n;
  }
  if (h) dlclose(h);
  llk_free(k);
  unlink(obj), unlink(so), rmdir(dir);
  return ok;
}
