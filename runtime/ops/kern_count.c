/* runtime/ops/kern_count.c — the kernel calls by class (kern_count.h). */
#include "kern_count.h"

const char *const rt_kern_class_names[RT_KC_COUNT] = {"GEMM", "attention", "bandwidth-bound"};

int64_t rt_kcalls[RT_KC_COUNT]; /* one program per process */
