/* runtime/ops/par.h — running a compiled kernel over the OpenMP threads.
 *
 * The kernels shardc builds through LLVM (codegen/llvm_kernels.h) are serial loops over a range
 * of items, `fn(lo, hi, args)`; rt_par_for splits [0, n) into one contiguous range per thread
 * when the work is worth a fork/join, and otherwise calls fn once. The split depends only on n
 * and the thread count, and each item is computed alone, so results do not depend on it.
 */
#ifndef SHARDRT_PAR_H
#define SHARDRT_PAR_H

#include <stdint.h>

typedef void (*RtRangeFn)(int64_t lo, int64_t hi, void **args);

/* fn over items [0, n); `work` (elements touched) decides whether threads are worth it. */
void rt_par_for(RtRangeFn fn, int64_t n, int64_t work, void **args);

#endif
