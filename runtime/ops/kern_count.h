/* runtime/ops/kern_count.h — the program's kernel calls on this process, by the cost model's class, counted
 * where the generated code calls them (one increment per call site a node run emits: codegen/emit.c), for the
 * trainer to compare with the plan's (the cost model's count, passes/cost.c, written into the program as
 * RtProgram.kern_plan).
 *
 * The classes are the rates that bound a kernel's time in the cost model (passes/cost_op.h TimeKind, less
 * T_FREE; `shardc plan --cost` prints its calls by them): GEMMs, attention (sdpa, ring attention's blocks and
 * their backwards), and every other kernel (elementwise runs, norms, reductions, copies, the update: bound
 * by memory bandwidth).
 */
#ifndef SHARDRT_KERN_COUNT_H
#define SHARDRT_KERN_COUNT_H

#include <stdint.h>

enum { RT_KC_GEMM, RT_KC_ATTN, RT_KC_MEM, RT_KC_COUNT };
/* the classes' names as `shardc plan --cost` and the trainer print them: "GEMM", "attention", "bandwidth-bound" */
extern const char *const rt_kern_class_names[RT_KC_COUNT];

/* The calls so far (since the process started), by class: the generated code adds to them directly. */
extern int64_t rt_kcalls[RT_KC_COUNT];

#endif
