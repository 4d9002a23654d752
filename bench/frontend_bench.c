/* bench/frontend_bench.c — compile time of the front half: parse + lower (fe_compile) and pass_inline.
 *
 * usage: frontend_bench MODELS_DIR [REPS (default 20)]
 * Prints the median time per model, including GPT-3 175B at 96 layers and the same
 * model at 2 layers (-D layers=2): `repeat` is one region, so the two should match.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "diag.h"
#include "frontend.h"
#include "passes.h"
#include "print.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODELS_DIR [REPS]\n", argv[0]);
    return 2;
  }
  int reps = argc > 2 ? atoi(argv[2]) : 20;
  if (reps < 1 || reps > 10000) reps = 20;
  static const struct {
    const char *file;
    const char *layers; /* -D layers=..., or NULL */
  } runs[] = {{"tiny.model", NULL},      {"gpt2-124m.model", NULL}, {"llama3-8b.model", NULL},
              {"gpt3-175b.model", NULL}, {"gpt3-175b.model", "2"}};
  printf("%-18s %7s %16s %12s %12s\n", "model", "layers", "params", "compile ms", "inline ms");
  for (int r = 0; r < 5; r++) {
    double tc[10000], ti[10000];
    long long params = 0;
    for (int k = 0; k < reps; k++) {
      Arena a;
      arena_init(&a);
      const char *dirs[] = {argv[1]};
      FeDefine d = {"layers", runs[r].layers};
      FeOptions o = {dirs, 1, &d, runs[r].layers ? 1 : 0, NULL, 0, NULL, false};
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[1], runs[r].file);
      double t0 = now_ms();
      Module *m = fe_compile(&a, path, &o);
      double t1 = now_ms();
      if (!m || !pass_inline(m)) {
        fprintf(stderr, "%s does not compile\n", runs[r].file);
        return 1;
      }
      double t2 = now_ms();
      tc[k] = t1 - t0;
      ti[k] = t2 - t1;
      params = (long long)ir_param_count(m);
      arena_free(&a);
    }
    qsort(tc, (size_t)reps, sizeof(double), cmp);
    qsort(ti, (size_t)reps, sizeof(double), cmp);
    printf("%-18s %7s %16lld %12.3f %12.3f\n", runs[r].file, runs[r].layers ? runs[r].layers : "(file)", params,
           tc[reps / 2], ti[reps / 2]);
  }
  return 0;
}
