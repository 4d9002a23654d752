/* tests/e2e/st_close.c — two safetensors files hold the same tensors within a tolerance.
 *
 *   st_close REF GOT TOL [FRAC]
 *   st_close REF GOT l2:TOL
 *   st_close REF GOT rmax:TOL
 *   st_close REF GOT adam:TOL:R:EPS:BETA2:LR1,LR2,.. REF_OPT_1 REF_OPT_2 ..
 *
 * Every F32 / BF16 tensor of REF must be in GOT with the same element count. With TOL an element
 * is off when |got - ref| > TOL, and the check fails (exit 1) when a tensor has more than FRAC of
 * its elements off (default 0: none may be); prints the largest difference, where, and the share
 * of elements off. With l2:TOL each tensor's relative L2 difference ||got - ref|| / ||ref|| must
 * be <= TOL; with rmax:TOL its max |got - ref| <= TOL max |ref|; prints the largest. With adam:..
 * REF and GOT are parameters after len(LR) AdamW steps whose clipped gradients differed by at most
 * R of their largest at each step: each element within TOL plus what that moves AdamW's update
 * there (st_compare_adam, st_compare.h; REF_OPT_s: REF's optimizer state after step s). Used by
 * cuda_multirank.sh to compare the parameters a CUDA trainer (emulated device) and the CPU trainer
 * of the same plan hold after the same steps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_compare.h"

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: st_close REF GOT TOL [FRAC] | l2:TOL | rmax:TOL | adam:TOL:R:EPS:BETA2:LR1,.. REF_OPT_1 ..\n");
    return 2;
  }
  if (strncmp(argv[3], "adam:", 5) == 0) {
    double tol, r, eps, beta2, lr[8];
    int used = 0, steps = 0;
    if (sscanf(argv[3] + 5, "%lf:%lf:%lf:%lf:%n", &tol, &r, &eps, &beta2, &used) != 4 || !used) {
      fprintf(stderr, "st_close: adam:TOL:R:EPS:BETA2:LR1,LR2,.. expected, got '%s'\n", argv[3]);
      return 2;
    }
    for (char *p = argv[3] + 5 + used, *end; *p && steps < 8; p = *end == ',' ? end + 1 : end) {
      lr[steps++] = strtod(p, &end);
      if (end == p) {
        fprintf(stderr, "st_close: bad learning rate list in '%s'\n", argv[3]);
        return 2;
      }
    }
    if (steps == 0 || argc != 4 + steps) {
      fprintf(stderr, "st_close: %d learning rate(s) need as many reference optimizer files, got %d\n", steps, argc - 4);
      return 2;
    }
    return st_compare_adam(argv[1], argv[2], (const char *const *)argv + 4, lr, steps, tol, r, eps, beta2) ? 1 : 0;
  }
  int mode = strncmp(argv[3], "l2:", 3) == 0 ? ST_L2 : strncmp(argv[3], "rmax:", 5) == 0 ? ST_RMAX : ST_ABS;
  const char *tol = argv[3] + (mode == ST_L2 ? 3 : mode == ST_RMAX ? 5 : 0);
  return st_compare(argv[1], argv[2], atof(tol), mode, argc > 4 ? atof(argv[4]) : 0) ? 1 : 0;
}
