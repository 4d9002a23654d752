/* tests/cuda/kcases.h — every kernel family, emitted through codegen/cuda_kernels.h and
 * checked against the CPU references (runtime/kernels/ref.h or a naive loop here), on any
 * backend that can allocate, copy and launch: the CPU emulator (test_kernels_emu.c) or a
 * GPU (kernels_gpu.c). The cases run twice: pass 0 only emits (the program's source comes
 * from it), pass 1 emits the same kernels again (same numbering), launches and checks. */
#ifndef TESTS_KCASES_H
#define TESTS_KCASES_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_kernels.h"

typedef struct {
  void *(*alloc)(size_t bytes);                          /* zeroed device memory */
  void (*free)(void *p);
  void (*h2d)(void *dst, const void *src, size_t bytes);
  void (*d2h)(void *dst, const void *src, size_t bytes);
  /* runs kernel kN (synchronously from the host's point of view) */
  void (*launch)(int kernel, const unsigned grid[3], const unsigned block[3], unsigned smem, void **args);
} KBackend;

typedef struct KC KC;

/* Pass 0 with a NULL backend: returns the source of every case's kernels (arena memory) and
 * the workspace they need. */
const char *kc_emit_all(Arena *a, int64_t *workspace, int *nkernels);
/* Whether the attention cases also run every other tile configuration of the tensor-core kernels
 * (cuk_flash_variants) on some shapes (causal and not, GQA, odd lengths, hd 64 and 128); on unless
 * turned off before pass 0 (cuda_nvrtc compiles the configuration the compiler emits only). */
void kc_flash_variants(int on);
/* on (the default): the attention forward on Hopper's wgmma too (shardk_wgmma.cuh; sm_90a only: a GPU of
 * another compute capability turns it off) */
void kc_wgmma(int on);
/* Whether the norm, reduce_to and rope cases run again for every other variant of the bytes-bound kernels
 * (cuk_set_variant); on unless turned off before pass 0. */
void kc_bytes_variants(int on);
/* Pass 1: runs and checks every case; returns the number of failed checks. */
int kc_run_all(const KBackend *be, int64_t workspace);

#endif
