/* runtime/dtype.c — element types (the table is RT_DTYPES in dtype.h). */
#include "dtype.h"

static const struct {
  const char *name;
  size_t size;  /* bytes per element */
  int is_float; /* 1: floating point */
} dtypes[RT_DTYPE_COUNT] = {
#define RT_DTYPE(id, name, size, is_float) [RT_##id] = {name, size, is_float},
    RT_DTYPES(RT_DTYPE)
#undef RT_DTYPE
};

size_t rt_dtype_size(RtDType dt) { return (unsigned)dt < RT_DTYPE_COUNT ? dtypes[dt].size : 0; }
const char *rt_dtype_name(RtDType dt) { return (unsigned)dt < RT_DTYPE_COUNT ? dtypes[dt].name : "?"; }
int rt_dtype_is_float(RtDType dt) { return (unsigned)dt < RT_DTYPE_COUNT && dtypes[dt].is_float; }
