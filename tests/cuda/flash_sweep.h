/* tests/cuda/flash_sweep.h — the tensor-core attention's tile configurations timed side by side on a
 * GPU (cuda_kernels_gpu with SHARDK_ATTN_SWEEP=1): each candidate of cuk_flash_variants checked
 * against the CPU reference, then its forward, dK/dV and dQ kernels timed at GPT-2 124M's shape. */
#ifndef TESTS_FLASH_SWEEP_H
#define TESTS_FLASH_SWEEP_H

#include <stddef.h>

#include "arena.h"

typedef struct {
  /* a zeroed device buffer the launch statements name as the returned expression ("bN") */
  const char *(*buf)(Arena *a, size_t bytes, void **dev);
  void *(*alloc)(size_t bytes); /* zeroed device memory (the workspace) */
  void (*free)(void *p);
  void (*h2d)(void *dst, const void *src, size_t bytes);
  void (*d2h)(void *dst, const void *src, size_t bytes);
  void (*load)(const char *src);                   /* compiles and loads a program's kernels */
  void (*run)(const char *stmt, char *ws);         /* launches a statement's kernels */
  double (*time_us)(const char *stmt, char *ws);   /* its time per run (after a warm-up) */
  void (*attrs)(int kernel, int *regs, int *local); /* registers per thread, local (spill) bytes */
  int wgmma; /* the program is built for sm_90a: the wgmma forward's tiles too (cuk_wg_variants) */
} SweepHost;

/* Returns the number of candidates that failed their check. */
int flash_sweep(const SweepHost *h);

#endif
