/* runtime/kernels/attention_tile.h — the register-blocked block products of the CPU attention
 * (attention.c; private to runtime/kernels).
 *
 * One routine, C[M x N] (+)= A[M x K] B[K x N], on the blocks of FlashAttention-2's loops (M, K, N
 * at most RT_ATTN_BLOCK or the padded head dim): A read by scalar broadcasts at any strides, so
 * the same code takes a row-major operand or the transpose of one (S = Q K^T from the transposed
 * key block, P^T dO, dS^T Q); B and C rows are N contiguous floats, N a multiple of RT_ATTN_VW
 * (the callers pad their blocks). The micro-kernel keeps an MR x NR-vector tile of C in registers
 * over the whole K loop, sized to the register file of the vector ISA chosen at compile time
 * (attention_tile.c); the K loop runs in order, so a result does not depend on the tiling. */
#ifndef SHARDRT_ATTENTION_TILE_H
#define SHARDRT_ATTENTION_TILE_H

#include <stdint.h>

/* floats per vector register: 16 with AVX-512, 8 with AVX / AVX2, 4 otherwise (SSE, NEON);
 * -DRT_ATTN_VW=n forces a width (the tests build the AVX-512 tiling on an AVX2 machine this way). */
#ifndef RT_ATTN_VW
#if defined(__AVX512F__)
#define RT_ATTN_VW 16
#elif defined(__AVX__)
#define RT_ATTN_VW 8
#else
#define RT_ATTN_VW 4
#endif
#endif

/* n rounded up to a whole number of vectors */
static inline int64_t rt_attn_vpad(int64_t n) { return (n + RT_ATTN_VW - 1) / RT_ATTN_VW * RT_ATTN_VW; }

/* C = A B (acc 0) or C += A B (acc 1): A(i, k) = a[i * lda + k * ak], B row k at b + k * ldb, C row
 * i at c + i * ldc; N % RT_ATTN_VW == 0. C must not overlap A or B. */
void rt_attn_gemm(int64_t M, int64_t N, int64_t K, const float *a, int64_t lda, int64_t ak, const float *b,
                  int64_t ldb, float *c, int64_t ldc, int acc);

#endif
