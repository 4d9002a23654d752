/* tests/cuda/cuk_launch.h — reads back the launch statements of codegen/cuda_kernels.c
 * ("rt_cu_launch(ctx, N, gx, gy, gz, bx, by, bz, smem, (void *[]){&(char *){E}, ...});", one or
 * more on a line) so tests can run the kernels they describe. */
#ifndef TESTS_CUK_LAUNCH_H
#define TESTS_CUK_LAUNCH_H

#include "cuda_kernels.h" /* CUK_MAX_ARGS */

#define CUKL_MAX_ARGS CUK_MAX_ARGS

typedef struct {
  int kernel;                       /* N of kN */
  unsigned grid[3], block[3], smem; /* as passed to rt_cu_launch */
  int nargs;
  int is_int[CUKL_MAX_ARGS];        /* 1: a long long argument, 0: a char * */
  char expr[CUKL_MAX_ARGS][128];    /* the host C expression of each argument */
} CukLaunch;

/* Parses every launch of stmt into out[0..max); returns how many, or -1 if malformed. */
int cukl_parse(const char *stmt, CukLaunch *out, int max);

#endif
