/* bench/llvm_kernels_bench.c — each kind of kernel the --cpu-kernels llvm backend generates
 * (codegen/target_llvm.c: a fused elementwise run, one elementwise node, AdamW, LayerNorm forward
 * and backward, cross-entropy forward and fused forward + backward) against the
 * hand-written C kernels it replaces, on GPT-2 124M shapes at B=4, T=64 (256 rows). The result
 * decides target_llvm.c's GENERATE table: a kind is generated where LLVM's kernel is faster.
 *
 *   bench_llvm_kernels [threads=2] [reps=15]
 *
 * Runs alternate C and LLVM within each repetition (the machine is shared); best of reps.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include "llvm_kernels.h"
#include "ops/ops.h"
#include "ops/par.h"
#include "ops/prims.h"

typedef void (*Kern)(int64_t, int64_t, void **);

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static float *buf(int64_t n, float lo, float hi) {
  float *p = malloc((size_t)n * sizeof(float));
  if (!p) abort();
  for (int64_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * (float)(i * 7919 % 1000) / 1000.0f;
  return p;
}

enum { NC = 10 }; /* cases */
enum { ROWS = 256, C = 768, H = 3072, NWTE = 50304 * 768, NFC = 768 * 3072, VP = 50304, VOCAB = 50257 };

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 15;
  omp_set_num_threads(threads);
  Llk *k = llk_new();
  /* fused: h = gelu(x + b_fc) over [256, 3072] */
  LlkEw run = {.nin = 2, .idx = {LLK_FULL, LLK_ROW}, .nops = 2, .nout = 2, .out_op = {0, 1}, .inner = H};
  run.ops[0] = (LlkOp){OP_ADD, {-1, -2}, 0}, run.ops[1] = (LlkOp){OP_GELU, {0, 0}, 0};
  /* one node: y = x + b over [256, 768] (a bias), gelu over [256, 3072], gelu_bwd over [256, 3072] */
  LlkEw add = {.nin = 2, .idx = {LLK_FULL, LLK_ROW}, .nops = 1, .nout = 1, .out_op = {0}, .inner = C};
  add.ops[0] = (LlkOp){OP_ADD, {-1, -2}, 0};
  LlkEw gelu = {.nin = 1, .idx = {LLK_FULL}, .nops = 1, .nout = 1, .out_op = {0}};
  gelu.ops[0] = (LlkOp){OP_GELU, {-1, 0}, 0};
  LlkEw gbwd = {.nin = 2, .idx = {LLK_FULL, LLK_FULL}, .nops = 1, .nout = 1, .out_op = {0}};
  gbwd.ops[0] = (LlkOp){OP_GELU_BWD, {-1, -2}, 0};
  const char *names[6] = {llk_ew(k, &run), llk_ew(k, &add), llk_ew(k, &gelu), llk_ew(k, &gbwd),
                          llk_adamw(k, &(LlkAdamW){0.9f, 0.95f, 1e-8f, 0.1f}), llk_norm(k, &(LlkNorm){C, 1e-5f, false})};
  const char *nb[3]; /* LayerNorm backward [256, 768]: stats, param grads, dx */
  llk_norm_bwd(k, &(LlkNormBwd){C, ROWS, 1e-5f, false}, nb);
  const char *xe[2] = {llk_xent(k, &(LlkXent){VP, VOCAB, false}), llk_xent(k, &(LlkXent){VP, VOCAB, true})};
  char dir[] = "/tmp/llk-bench-XXXXXX", obj[256], so[256], cmd[700];
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  snprintf(obj, sizeof obj, "%s/k.o", dir), snprintf(so, sizeof so, "%s/k.so", dir);
  char *err = NULL;
  if (!llk_compile(k, obj, &err)) return fprintf(stderr, "llk_compile: %s\n", err), 1;
  snprintf(cmd, sizeof cmd, "cc -shared -o %s %s -lm", so, obj);
  if (system(cmd) != 0) return 1;
  void *h = dlopen(so, RTLD_NOW);
  if (!h) return fprintf(stderr, "dlopen: %s\n", dlerror()), 1;
  Kern kf[6];
  for (int i = 0; i < 6; i++) kf[i] = (Kern)dlsym(h, names[i]);
  Kern kb[3];
  for (int i = 0; i < 3; i++) kb[i] = (Kern)dlsym(h, nb[i]);
  Kern kx[2] = {(Kern)dlsym(h, xe[0]), (Kern)dlsym(h, xe[1])};
  float *logits = buf((int64_t)ROWS * VP, -4, 4), *dlogits = buf((int64_t)ROWS * VP, 0, 0), loss, dloss = 1;
  int32_t tg[ROWS];
  for (int i = 0; i < ROWS; i++) tg[i] = (int32_t)(i * 7919 % VOCAB);
  void *xws = malloc(rt_cross_entropy_ws_bytes(ROWS));
  float *st = buf(2 * ROWS, 0, 0), *dw = buf(C, 0, 0), *db = buf(C, 0, 0);
  void *ws = malloc(rt_norm_ws_bytes(ROWS, C));

  float *x = buf(ROWS * H, -3, 3), *b = buf(H, -1, 1), *y = buf(ROWS * H, 0, 0), *z = buf(ROWS * H, 0, 0);
  float *p = buf(NWTE, -1, 1), *g = buf(NWTE, -0.1f, 0.1f), *m = buf(NWTE, 0, 0), *v = buf(NWTE, 0, 0);
  float hyper[3] = {3e-4f, 1, 1};
  RtShape sh = {2, {ROWS, H}}, sb = {1, {H}}, sc = {2, {ROWS, C}}, sbc = {1, {C}};
  const char *what[NC] = {"fused run: gelu(x + b_fc) [256,3072]", "one node: x + b [256,768]", "one node: gelu [256,3072]",
                         "one node: gelu_bwd [256,3072]", "adamw: wte (38.6M)", "adamw: c_fc (2.4M)",
                          "layernorm [256,768]", "layernorm_bwd [256,768]", "xent fwd [256,50304]",
                          "xent fwd+bwd fused [256,50304]"};
  const int kind[NC] = {0, 1, 1, 1, 2, 2, 3, 4, 5, 5};
  double best[NC][2];
  for (int c = 0; c < NC; c++) best[c][0] = best[c][1] = 1e30;
  for (int r = 0; r < reps; r++)
    for (int c = 0; c < NC; c++)
      for (int l = 0; l < 2; l++) {
        double t0 = now();
        switch (c) {
        case 0:
          if (l) rt_par_for(kf[0], ROWS, ROWS * H, (void *[]){x, b, y, z});
          else rt_binary_f32(RT_ADD, y, &sh, x, &sh, b, &sb), rt_unary_f32(RT_GELU, z, y, ROWS * H, 0);
          break;
        case 1:
          if (l) rt_par_for(kf[1], ROWS, ROWS * C, (void *[]){x, b, y});
          else rt_binary_f32(RT_ADD, y, &sc, x, &sc, b, &sbc);
          break;
        case 2:
          if (l) rt_par_for(kf[2], ROWS * H, ROWS * H, (void *[]){x, y});
          else rt_unary_f32(RT_GELU, y, x, ROWS * H, 0);
          break;
        case 3:
          if (l) rt_par_for(kf[3], ROWS * H, ROWS * H, (void *[]){x, z, y});
          else rt_gelu_bwd_f32(y, x, z, ROWS * H);
          break;
        case 6:
          if (l) rt_par_for(kf[5], ROWS, ROWS * C, (void *[]){x, b, b, y});
          else rt_layernorm_f32(y, x, b, b, ROWS, C, 1e-5f);
          break;
        case 7:
          if (l) {
            rt_par_for(kb[0], ROWS, ROWS * C, (void *[]){x, st, st + ROWS});
            rt_par_for(kb[1], C, ROWS * C, (void *[]){x, y, st, st + ROWS, dw, db});
            rt_par_for(kb[2], ROWS, ROWS * C, (void *[]){x, b, y, st, st + ROWS, z});
          } else {
            rt_layernorm_bwd_f32(z, dw, db, x, b, y, ROWS, C, 1e-5f, ws);
          }
          break;
        case 8:
          if (l) rt_xent_rows_f32(kx[0], &loss, NULL, logits, tg, &dloss, ROWS, VP, xws);
          else rt_cross_entropy_f32(&loss, logits, tg, ROWS, VP, VOCAB, xws);
          break;
        case 9:
          if (l) rt_xent_rows_f32(kx[1], &loss, dlogits, logits, tg, &dloss, ROWS, VP, xws);
          else rt_cross_entropy_fused_f32(&loss, dlogits, logits, tg, &dloss, ROWS, VP, VOCAB, xws);
          break;
        default: {
          int64_t n = c == 4 ? NWTE : NFC;
          if (l) rt_par_for(kf[4], n, n, (void *[]){p, g, m, v, hyper});
          else rt_adamw_f32(p, g, m, v, hyper, n, 0.9f, 0.95f, 1e-8f, 0.1f);
        }
        }
        double dt = now() - t0;
        if (dt < best[c][l]) best[c][l] = dt;
      }
  static const char *kinds[] = {"GEN_EW_RUN", "GEN_EW_ONE", "GEN_ADAMW", "GEN_NORM", "GEN_NORM_BWD", "GEN_XENT"};
  printf("%d threads, best of %d, C and LLVM alternating\n", threads, reps);
  printf("%-40s %10s %10s %8s  %s\n", "kernel", "C ms", "LLVM ms", "C/LLVM", "kind");
  for (int c = 0; c < NC; c++)
    printf("%-40s %10.3f %10.3f %8.2f  %s\n", what[c], 1e3 * best[c][0], 1e3 * best[c][1], best[c][0] / best[c][1],
           kinds[kind[c]]);
  dlclose(h);
  unlink(obj), unlink(so), rmdir(dir);
  llk_free(k);
  return 0;
}
