/* runtime/kernels/attention_tile.c — rt_attn_gemm, the register-blocked block product of the CPU
 * attention (attention_tile.h).
 *
 * Micro-kernel: an MR x NR-vector tile of C held in registers for the whole K loop; per k, NR
 * vector loads of B's row and MR scalar broadcasts of A's column, MR NR fused multiply-adds. MR x
 * NR accumulators + NR B vectors + one broadcast must fit the register file, or the tile spills
 * to the stack in the inner loop (the old one-row kernel's 16-wide accumulators did on AVX2):
 *   AVX-512 (32 zmm, 16 floats): 8 x 2 -> 16 accumulators, a C tile of 8 rows x 32 columns;
 *   AVX / AVX2 (16 ymm, 8 floats): 6 x 2 -> 12 accumulators, 6 rows x 16 columns (15 registers);
 *   otherwise (SSE's 16 / NEON's 32 registers of 4 floats): 4 x 2.
 * The tails (M % MR rows, N / VW % NR vectors) take the same kernel with fewer rows / vectors:
 * every (rows, vectors) pair is its own instantiation, so all loops unroll and every accumulator
 * is a register. The sum over k runs in order in every instantiation: C's bits depend on the
 * operands, never on the tiling or on where a tile falls. Spelled with GCC vector types (the
 * vectoriser alone did not keep the tile in registers) and unaligned loads (aligned(4)). */
#include "attention_tile.h"

#ifndef RT_ATTN_MR
#if RT_ATTN_VW >= 16
#define RT_ATTN_MR 8
#elif RT_ATTN_VW == 8
#define RT_ATTN_MR 6
#else
#define RT_ATTN_MR 4
#endif
#endif
#ifndef RT_ATTN_NR
#define RT_ATTN_NR 2
#endif
#if RT_ATTN_MR < 1 || RT_ATTN_MR > 8 || RT_ATTN_NR < 1 || RT_ATTN_NR > 4
#error "RT_ATTN_MR must be 1..8 and RT_ATTN_NR 1..4"
#endif

typedef float vf __attribute__((vector_size(RT_ATTN_VW * 4), aligned(4), may_alias));

#define VW RT_ATTN_VW

/* An empty asm that claims to change x in a vector register: GCC then loads B's row once per k
 * instead of folding the load into each of the MR FMAs (MR + 1 loads per k: a 4 x 2 tile ran
 * 60 GFLOP/s, load-bound, on the Zen 3; with the row pinned, 90). "v": any of AVX-512's 32. */
#if defined(__x86_64__) && defined(__AVX512F__) && VW <= 16
#define PIN(x) __asm__("" : "+v"(x))
#elif defined(__x86_64__) && (VW <= 4 || (VW <= 8 && defined(__AVX__)))
#define PIN(x) __asm__("" : "+x"(x))
#else /* other ISAs, or a width forced past the registers' (-DRT_ATTN_VW: the tests) */
#define PIN(x) ((void)0)
#endif

static inline __attribute__((always_inline)) void mk(const int mr, const int nr, int acc, int64_t K,
                                                      const float *restrict a, int64_t lda, int64_t ak,
                                                      const float *restrict b, int64_t ldb, float *restrict c,
                                                      int64_t ldc) {
  vf x[8][4];
#pragma GCC unroll 8
  for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
    for (int v = 0; v < nr; v++) x[i][v] = acc ? *(const vf *)(c + i * ldc + v * VW) : (vf){0};
  for (int64_t k = 0; k < K; k++) {
    const float *bk = b + k * ldb, *ak0 = a + k * ak;
    vf bv[4];
#pragma GCC unroll 4
    for (int v = 0; v < nr; v++) {
      bv[v] = *(const vf *)(bk + v * VW);
      PIN(bv[v]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
      const float s = ak0[i * lda];
#pragma GCC unroll 4
      for (int v = 0; v < nr; v++) x[i][v] += s * bv[v];
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
    for (int v = 0; v < nr; v++) *(vf *)(c + i * ldc + v * VW) = x[i][v];
}

typedef void (*MkFn)(int acc, int64_t K, const float *a, int64_t lda, int64_t ak, const float *b, int64_t ldb,
                     float *c, int64_t ldc);

#define MK_DEF(mr, nr)                                                                                          \
  static void mk_##mr##_##nr(int acc, int64_t K, const float *a, int64_t lda, int64_t ak, const float *b,        \
                             int64_t ldb, float *c, int64_t ldc) {                                              \
    if (lda == 1) /* A transposed (P^T, dS^T as A(i, k) = x[k NB + i]): the broadcasts at fixed offsets */    \
      mk(mr, nr, acc, K, a, 1, ak, b, ldb, c, ldc);                                                             \
    else                                                                                                        \
      mk(mr, nr, acc, K, a, lda, ak, b, ldb, c, ldc);                                                           \
  }
#define MK_ROW(mr) MK_DEF(mr, 1) MK_DEF(mr, 2) MK_DEF(mr, 3) MK_DEF(mr, 4)
MK_ROW(1)
MK_ROW(2)
MK_ROW(3)
MK_ROW(4)
#if RT_ATTN_MR > 4
MK_ROW(5)
MK_ROW(6)
MK_ROW(7)
MK_ROW(8)
#endif
#define MK_TAB(mr) {mk_##mr##_1, mk_##mr##_2, mk_##mr##_3, mk_##mr##_4}
static const MkFn mk_tab[][4] = {MK_TAB(1), MK_TAB(2), MK_TAB(3), MK_TAB(4),
#if RT_ATTN_MR > 4
                                 MK_TAB(5), MK_TAB(6), MK_TAB(7), MK_TAB(8)
#endif
};

void rt_attn_gemm(int64_t M, int64_t N, int64_t K, const float *a, int64_t lda, int64_t ak, const float *b,
                  int64_t ldb, float *c, int64_t ldc, int acc) {
  const int64_t nv = N / VW;
  for (int64_t j = 0; j < nv; j += RT_ATTN_NR) {
    int nr = (int)(nv - j < RT_ATTN_NR ? nv - j : RT_ATTN_NR);
    for (int64_t i = 0; i < M; i += RT_ATTN_MR) {
      int mr = (int)(M - i < RT_ATTN_MR ? M - i : RT_ATTN_MR);
      mk_tab[mr - 1][nr - 1](acc, K, a + i * lda, lda, ak, b + j * VW, ldb, c + i * ldc + j * VW, ldc);
    }
  }
}
