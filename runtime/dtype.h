/* runtime/dtype.h — element types, shared by every part of libshardrt (same order as the IR's DType). */
#ifndef SHARDRT_DTYPE_H
#define SHARDRT_DTYPE_H

#include <stddef.h>

typedef enum { RT_F32, RT_BF16, RT_F16, RT_F64, RT_I32, RT_I64, RT_DTYPE_COUNT } RtDType;

size_t rt_dtype_size(RtDType dt);      /* bytes per element (0: not a dtype) */
const char *rt_dtype_name(RtDType dt); /* "f32", "bf16", ... ("?" otherwise) */

#endif
