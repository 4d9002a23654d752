/* tests/cuda/nvrtc_parts.h — an emitted program (codegen/cuda_kernels.c: a preamble, then one
 * `extern "C" __global__` kernel kN after another) compiled by NVRTC in parts on every core, each
 * part's image kept in the runtime's on-disk cubin cache (runtime/cuda/common.c:
 * $SHARDRT_CUBIN_CACHE, default ~/.cache/shardc/cubin), so a second run compiles nothing.
 *
 * One NVRTC compile of the whole case program (653 kernels, the attention's tile candidates among
 * them) runs on one thread for minutes; its kernels are independent, so the parts' images hold the
 * same kernels. A part holds every CUDAK_PARTS-th kernel (the heavy attention kernels, emitted side
 * by side, spread over the parts), the parts go to min(cores, parts) threads. The parts do not
 * depend on the core count: one cache serves any machine. */
#ifndef TESTS_NVRTC_PARTS_H
#define TESTS_NVRTC_PARTS_H

#include <stddef.h>

#define CUDAK_PARTS 64

typedef struct {
  int nparts, nkernels;
  char *img[CUDAK_PARTS];     /* each part's image (malloc'd) */
  size_t bytes[CUDAK_PARTS];
  char *file[CUDAK_PARTS];    /* each part's cache file name (malloc'd; NULL without a cache directory) */
  int *part_of;               /* kernel kN -> its part (malloc'd, nkernels) */
  int compiled, cached;       /* parts compiled now, parts read from the cache */
  int threads;
  double seconds;             /* wall time of the whole build */
  double part_sum, part_max;  /* the parts' compile times (wall, each on its thread): their sum, the slowest */
} CudakParts;

/* Compiles src for arch ("sm_90a": cubin) in parts, or takes them from the cache. 0 on success; -1
 * after printing NVRTC's log of the first part that failed (or why the source cannot be split). */
int cudak_nvrtc_parts(const char *src, const char *arch, CudakParts *out);
/* Writes each part's image into dir under its cache file's name (a cache to carry elsewhere); 0 on success. */
int cudak_parts_save(const CudakParts *p, const char *dir);
void cudak_parts_free(CudakParts *p);

#endif
