/* codegen/llvm_kernels.h — CPU kernels built as LLVM IR through the LLVM C API, optimised
 * (default<O3>) and compiled for the host CPU into one object file the trainer links.
 *
 * A kernel is described here (what it computes, shapes baked in), collected while the program is
 * emitted (codegen/target_llvm.c), and built all at once by llk_compile. Every kernel has one
 * signature, `void name(int64_t lo, int64_t hi, void **p)`: it does the work of items [lo, hi)
 * (elements, or rows of `inner` elements) on the pointers p (its inputs, then its outputs), so
 * the runtime's rt_par_for (runtime/ops/par.h) can split the items over the OpenMP threads. The
 * loops are written vectorised (the host's SIMD width, plus a scalar tail), so a kernel updating
 * a tensor in place, index for index, is as fast as one that does not.
 *
 * This file knows LLVM and the kernels' math; it knows nothing of the emitter (cg.h). Calls go
 * target_llvm.c -> llvm_kernels.c; the tests call it directly (tests/codegen/test_llvm_kernels.c).
 */
#ifndef SHARDC_LLVM_KERNELS_H
#define SHARDC_LLVM_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "cost_llvm.h" /* LLK_MAX_EW, LlkIndex: which nodes these kernels run, decided there */
#include "ir.h"

typedef struct {
  OpKind op;     /* an F_EW op, OP_CONST or OP_CAST (same dtype: the identity) */
  int in[2];     /* operands: a member >= 0, or -1 - an input's index */
  double scalar; /* SCALE, ADD_SCALAR, CONST */
} LlkOp;

/* An elementwise chain over f32 (a fusion group, or one node). Items: the output's elements
 * when inner == 0, else its rows of `inner` elements. */
typedef struct {
  int nin;                  /* inputs read from outside */
  LlkIndex idx[LLK_MAX_EW]; /* how each is indexed */
  int nops;                 /* members, in order */
  LlkOp ops[LLK_MAX_EW];
  int nout;                 /* outputs stored */
  int out_op[LLK_MAX_EW];   /* the member each stores */
  int64_t inner;            /* 0: flat; else the row length (LLK_ROW and LLK_COL inputs need rows) */
} LlkEw;

/* AdamW over n f32 elements in place: p, g, m, v, hyper = {lr, grad scale, step} (runtime/ops/prims.h
 * rt_adamw_f32), the same arithmetic as runtime/kernels/pointwise.c's rt_adamw. */
typedef struct {
  float beta1, beta2, eps, weight_decay;
} LlkAdamW;

/* LayerNorm, or RMSNorm (no bias), over rows of d f32 elements: items are rows, p = {x, w, b, y}
 * (RMSNorm: {x, w, y}); y may be x. The arithmetic of runtime/kernels/pointwise.c's
 * rt_layernorm_fwd / rt_rmsnorm_fwd: the mean, then the mean square about it, y = (x - mean) rstd w + b. */
typedef struct {
  int64_t d;  /* the row length */
  float eps;  /* added to the variance */
  bool rms;   /* RMSNorm */
} LlkNorm;

/* LayerNorm / RMSNorm backward over `rows` rows of d f32 elements, as three kernels called in order
 * (runtime/kernels/pointwise.c's norm_bwd, the same arithmetic):
 *   stats (items: rows)    p = {x, mean, rstd}: each row's mean (RMSNorm: 0) and 1/sqrt(var + eps);
 *   param (items: columns) p = {x, dy, mean, rstd, dw, db}: dw[c] = sum_r dy xhat, db[c] = sum_r dy
 *                          (RMSNorm: no db), rows in order;
 *   dx (items: rows)       p = {x, w, dy, mean, rstd, dx}: dx = rstd (g - mean(g) - xhat mean(g xhat)),
 *                          g = dy w (RMSNorm: no mean(g) term). dx may be dy (param runs before). */
typedef struct {
  int64_t d, rows; /* the row length, the row count */
  float eps;
  bool rms;
} LlkNormBwd;

/* Softmax cross-entropy over rows of V f32 logits, of which the first len are the vocabulary:
 * runtime/kernels/xent.c's rt_xent_fwd_bwd row by row (the same arithmetic), items are rows,
 * p = {logits, targets (int32), rowloss (double), dlogits, g (one float)}: rowloss[r] = lse - x[t]
 * (0 where t < 0); with bwd also dlogits = g (softmax - onehot(t)) over [0, len) and 0 over
 * [len, V) and on rows with t < 0, where g = dloss / the count of targets >= 0. dlogits may be the
 * logits (in place). The caller counts, sums the rows' losses in order (runtime/ops/prims.h
 * rt_xent_rows_f32). */
typedef struct {
  int64_t V, len; /* the row length, the valid columns */
  bool bwd;       /* also dlogits */
} LlkXent;

typedef struct Llk Llk;

Llk *llk_new(void);
void llk_free(Llk *k);
/* The name of the kernel computing e (an existing one when the same kernel was asked before). */
const char *llk_ew(Llk *k, const LlkEw *e);
const char *llk_adamw(Llk *k, const LlkAdamW *a);
const char *llk_norm(Llk *k, const LlkNorm *n);
/* The three kernels of a norm backward: names[0] stats, names[1] param, names[2] dx. */
void llk_norm_bwd(Llk *k, const LlkNormBwd *n, const char *names[3]);
const char *llk_xent(Llk *k, const LlkXent *x);
int llk_count(const Llk *k);
/* Whether LLVM can build kernels for this host (a target for its triple); false with the reason in
 * *why (malloc'd) when not. */
bool llk_host_ok(char **why);
/* Builds every kernel asked so far, optimises the module and writes the object file `path` for the
 * host CPU. false (with a message in *err, to free()) when LLVM fails. */
bool llk_compile(Llk *k, const char *path, char **err);

#endif
