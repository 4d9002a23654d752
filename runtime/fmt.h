/* runtime/fmt.h — byte counts for people, one format for the trainer's lines and the compiler's memory table
 * (passes/memplan_report.c; shardc links runtime/fmt.c as it links the mesh and the dtype table). */
#ifndef SHARDRT_FMT_H
#define SHARDRT_FMT_H

#include <stddef.h>

/* "0 B", "706.5 KiB", "6.97 MiB", "72.28 GiB" (three or four significant digits); "?" for a negative count (not
 * known: the trainer's VmHWM where /proc has none). */
void rt_fmt_bytes(char *out, size_t n, double bytes);

#endif
