/* runtime/ops/par.c — rt_par_for (par.h). */
#include "par.h"

#include <omp.h>

/* Below this many elements a fork/join (a few microseconds) costs more than it saves; the
 * hand-written kernels use the same order of threshold (runtime/kernels/pointwise.c). */
#define PAR_MIN_WORK 32768

void rt_par_for(RtRangeFn fn, int64_t n, int64_t work, void **args) {
  if (n <= 0) return;
  if (work <= PAR_MIN_WORK || n < 2 || omp_get_max_threads() < 2) {
    fn(0, n, args);
    return;
  }
#pragma omp parallel
  {
    int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
    if (lo < hi) fn(lo, hi, args);
  }
}
