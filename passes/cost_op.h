/* passes/cost_op.h — inside the cost model (passes/cost.c, cost_op.c): one node's time. */
#ifndef SHARDC_COST_OP_H
#define SHARDC_COST_OP_H

#include <stdbool.h>

#include "cost.h"

/* Which rate bounds a node's time. */
typedef enum { T_FREE, T_GEMM, T_ATTN, T_MEM } TimeKind;
/* The rate that bounds a kernel of op (when it is one: cost_op_time says T_FREE for views and elided nodes), the
 * class the trainer counts its calls by (runtime/ops/kern_count.h RT_KC_*: T_GEMM - 1, ...). */
static inline TimeKind cost_op_class(OpKind op) {
  switch (op) {
  case OP_MATMUL: return T_GEMM;
  case OP_SDPA: case OP_ATTN_BLOCK: case OP_SDPA_BWD: case OP_ATTN_BLOCK_BWD: return T_ATTN;
  default: return T_MEM;
  }
}

static inline double cost_value_bytes(const Value *v) { return (double)ir_numel(&v->shape) * ir_dtype_size(v->dtype); }

/* Seconds of one non-collective leaf node n of m on device d; *kind says which rate bounds it. extra:
 * bytes the node moves beyond its inputs and outputs. in_update: n is the cast of an updated parameter
 * into its persistent bf16 copy, which the CUDA update's own kernel stores (ir_update_casts_copy): it
 * reads nothing (the update's registers). */
double cost_op_time(const Module *m, const CostDevice *d, const Node *n, bool in_update, double extra, TimeKind *kind);
/* Whether a matmul node of m pays a GEMM's fixed time (CostDevice.gemm_half_flops): the second of a sibling pair
 * (passes/hfuse.c) is the batched launch's second half, no fixed time of its own. */
static inline bool cost_gemm_launches(const Module *m, const Node *n) { return !(m->target == TARGET_CUDA && n->a.hfuse == 2); }
/* A matmul node's FLOPs: 2 x its output's elements x the contraction (what the CPU runtime's rt_matmul_* count). */
double cost_gemm_flop(const Node *n);

#endif
