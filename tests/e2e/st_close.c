/* tests/e2e/st_close.c — two safetensors files hold the same tensors within a tolerance.
 *
 *   st_close REF GOT TOL [FRAC]
 *   st_close REF GOT l2:TOL
 *
 * Every F32 / BF16 tensor of REF must be in GOT with the same element count. With TOL an element
 * is off when |got - ref| > TOL, and the check fails (exit 1) when a tensor has more than FRAC of
 * its elements off (default 0: none may be); prints the largest difference, where, and the share
 * of elements off. With l2:TOL each tensor's relative L2 difference ||got - ref|| / ||ref|| must
 * be <= TOL; prints the largest. Used by cuda_multirank.sh to compare the parameters a CUDA trainer (emulated
 * device) and the CPU trainer of the same plan hold after the same steps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_compare.h"

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: st_close REF GOT TOL [FRAC]\n");
    return 2;
  }
  int l2 = strncmp(argv[3], "l2:", 3) == 0;
  return st_compare(argv[1], argv[2], atof(argv[3] + (l2 ? 3 : 0)), l2, argc > 4 ? atof(argv[4]) : 0) ? 1 : 0;
}
