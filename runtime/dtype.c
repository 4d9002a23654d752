/* runtime/dtype.c — element types. */
#include "dtype.h"

static const struct {
  const char *name;
  size_t size;
} dtypes[RT_DTYPE_COUNT] = {
    [RT_F32] = {"f32", 4}, [RT_BF16] = {"bf16", 2}, [RT_F16] = {"f16", 2},
    [RT_F64] = {"f64", 8}, [RT_I32] = {"i32", 4},   [RT_I64] = {"i64", 8},
};

size_t rt_dtype_size(RtDType dt) { return (unsigned)dt < RT_DTYPE_COUNT ? dtypes[dt].size : 0; }
const char *rt_dtype_name(RtDType dt) { return (unsigned)dt < RT_DTYPE_COUNT ? dtypes[dt].name : "?"; }
