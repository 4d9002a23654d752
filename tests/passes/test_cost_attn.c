/* tests/passes/test_cost_attn.c — the CUDA cost model's kernels of attention's backward (passes/cost_cuda.c,
 * cost_cuda_kernels) come from ir_attn_flash, the decision codegen/cuda_kernels_attn.c takes too, for sdpa_bwd
 * and ring attention's block backward (attn_block_bwd) alike: bf16 at a head dim a multiple of 16 up to 128 on
 * the tensor-core kernels, 2 launches (dQ, then dK/dV); f32, or bf16 at head dim 24, 144 or 256, on the
 * CUDA-core kernels, 3 (D, dK/dV, dQ). Built graphs of one node each: q [1, 8, H hd] with H 4 and KV 2, the
 * block's keys [1, 6, KV hd] at positions. */
#include <stdio.h>

#include "cost.h"
#include "tb.h"

static int failures; /* CHECK (tests/check.h, through tb.h) counts here */

/* the kernels cost_cuda_kernels gives the backward op (OP_SDPA_BWD or OP_ATTN_BLOCK_BWD) in dtype dt at head dim hd */
static int kernels(Module *m, OpKind op, DType dt, int hd) {
  Graph *g = m->graph;
  const int H = 4, KV = 2, S = 8, T = op == OP_ATTN_BLOCK_BWD ? 6 : S;
  Value *q = tb_input(g, "q", dt, tb_shape(3, 1, S, H * hd)), *k = tb_input(g, "k", dt, tb_shape(3, 1, T, KV * hd)),
        *v = tb_input(g, "v", dt, tb_shape(3, 1, T, KV * hd)), *o = tb_input(g, "o", dt, tb_shape(3, 1, S, H * hd)),
        *lse = tb_input(g, "lse", DT_F32, tb_shape(3, 1, H, S)), *d = tb_input(g, "do", dt, tb_shape(3, 1, S, H * hd)),
        *qp = tb_input(g, "qpos", DT_I32, tb_shape(1, S)), *kp = tb_input(g, "kpos", DT_I32, tb_shape(1, T));
  Attrs a = {0};
  a.heads = H, a.kv_heads = KV, a.causal = true;
  Value *in[8] = {q, k, v, o, lse, d, qp, kp};
  Node *n = tb_node(g, op, op == OP_ATTN_BLOCK_BWD ? 8 : 6, in, 3, &a);
  double extra;
  return cost_cuda_kernels(n, tb_pos_of(g, n), &extra);
}

int main(void) {
  Arena a;
  arena_init(&a);
  Module *m = tb_module(&a, "cost_attn");
  m->target = TARGET_CUDA;
  const struct {
    DType dt;
    int hd;
  } c[] = {{DT_BF16, 16}, {DT_BF16, 64}, {DT_BF16, 128}, {DT_BF16, 24}, {DT_BF16, 144}, {DT_BF16, 256},
           {DT_F32, 64}, {DT_F32, 16}};
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    const int want = ir_attn_flash(c[i].dt, c[i].hd) ? 2 : 3, tc = c[i].dt == DT_BF16 && c[i].hd % 16 == 0 && c[i].hd <= 128;
    const int whole = kernels(m, OP_SDPA_BWD, c[i].dt, c[i].hd), block = kernels(m, OP_ATTN_BLOCK_BWD, c[i].dt, c[i].hd);
    CHECK(want == (tc ? 2 : 3), "%s hd %d: ir_attn_flash %s the tensor-core kernels", ir_dtype_name(c[i].dt), c[i].hd,
          tc ? "refuses" : "takes");
    CHECK(whole == want, "sdpa_bwd %s hd %d: %d kernels, want %d", ir_dtype_name(c[i].dt), c[i].hd, whole, want);
    CHECK(block == want, "attn_block_bwd %s hd %d: %d kernels, want %d (as sdpa_bwd)", ir_dtype_name(c[i].dt), c[i].hd,
          block, want);
  }
  arena_free(&a);
  if (failures) {
    fprintf(stderr, "test_cost_attn: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_cost_attn: ok (sdpa_bwd and attn_block_bwd: 2 kernels on the tensor cores, 3 off them, %zu shapes)\n",
         sizeof c / sizeof c[0]);
  return 0;
}
