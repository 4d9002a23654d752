/* passes/cost_llvm.c — which nodes of a CPU trainer the LLVM-built kernels run (see cost_llvm.h). */
#include "cost_llvm.h"

/* The kinds of LLVM kernel, and whether the backend generates each (else the C kernel runs it). */
enum { LLK_GEN_EW_RUN, LLK_GEN_EW_ONE, LLK_GEN_ADAMW, LLK_GEN_NORM, LLK_GEN_NORM_BWD, LLK_GEN_XENT, LLK_GEN_COUNT };
static const bool GENERATE[LLK_GEN_COUNT] = {
    [LLK_GEN_EW_RUN] = true,   /* a fusion group of 2 or more members */
    [LLK_GEN_EW_ONE] = true,   /* one elementwise node */
    [LLK_GEN_ADAMW] = true,    /* one parameter's AdamW update */
    [LLK_GEN_NORM] = true,     /* LayerNorm and RMSNorm forward */
    [LLK_GEN_NORM_BWD] = true, /* LayerNorm and RMSNorm backward */
    [LLK_GEN_XENT] = true,     /* cross-entropy: forward, backward, or both in one pass (passes/fuse_ce.c) */
};

bool llk_index_of(const Shape *S, const Shape *X, LlkIndex *how, int64_t *inner) {
  int64_t n = ir_numel(S), nx = ir_numel(X);
  *inner = 0;
  if (nx == n) return *how = LLK_FULL, true;
  if (nx == 1) return *how = LLK_SCALAR, true;
  int off = S->rank - X->rank; /* X is right-aligned to S (numpy broadcasting) */
  if (off < 0 || nx == 0) return false;
  int first = 0, last = X->rank; /* X's dims without its leading and its trailing 1s */
  while (first < X->rank && X->dim[first] == 1) first++;
  while (last > 0 && X->dim[last - 1] == 1) last--;
  bool trailing = true, leading = true;
  for (int d = first; d < X->rank; d++) trailing &= X->dim[d] == S->dim[off + d];
  for (int d = 0; d < off; d++) leading &= S->dim[d] == 1;
  for (int d = 0; d < last; d++) leading &= X->dim[d] == S->dim[off + d];
  if (trailing) return *how = LLK_ROW, *inner = nx, true;
  if (leading) return *how = LLK_COL, *inner = n / nx, true;
  return false;
}

bool llk_ew_run_ok(const Node *const *mem, int n, const Value *const *ext, int next, LlkIndex *idx, int64_t *inner) {
  if (n < 1 || n > LLK_MAX_EW || next > LLK_MAX_EW || !GENERATE[n > 1 ? LLK_GEN_EW_RUN : LLK_GEN_EW_ONE]) return false;
  const Shape *S = &mem[0]->out[0]->shape;
  int64_t row = 0;
  for (int i = 0; i < next; i++) {
    LlkIndex how;
    int64_t in;
    if (ext[i]->dtype != DT_F32 || !llk_index_of(S, &ext[i]->shape, &how, &in)) return false;
    if (in && row && in != row) return false;
    if (in) row = in;
    if (idx) idx[i] = how;
  }
  for (int i = 0; i < n; i++)
    if (mem[i]->out[0]->dtype != DT_F32 || (mem[i]->op == OP_CAST && mem[i]->in[0]->dtype != DT_F32)) return false;
  if (row == ir_numel(S)) row = 0; /* one row: a flat loop */
  if (inner) *inner = row;
  return true;
}

/* Whether every input of n is f32 (the LLVM kernels' AdamW and norms). */
static bool all_f32(const Node *n) {
  for (int i = 0; i < n->nin; i++)
    if (n->in[i]->dtype != DT_F32) return false;
  return true;
}

int llk_node_calls(const Node *n) {
  switch (n->op) {
  case OP_ADAMW_UPDATE: return GENERATE[LLK_GEN_ADAMW] && all_f32(n) ? 1 : -1;
  case OP_LAYERNORM: case OP_RMSNORM: return GENERATE[LLK_GEN_NORM] && all_f32(n) ? 1 : -1;
  case OP_LAYERNORM_BWD: case OP_RMSNORM_BWD: return GENERATE[LLK_GEN_NORM_BWD] && all_f32(n) ? 3 : -1;
  case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_BWD:
    return GENERATE[LLK_GEN_XENT] && n->in[0]->dtype == DT_F32 && n->in[1]->dtype == DT_I32 ? 1 : -1;
  default: return -1;
  }
}
