/* runtime/cuda/kernels/shardk.cuh — shardc's device kernel library.
 *
 * __device__ templates with every shape a template parameter; the program's kernels
 * (codegen/cuda_kernels.c) are thin `extern "C" __global__ kN` wrappers over them. Storage
 * types T: float or sk::bf16 (__nv_bfloat16); all math is fp32 inside (fp64 only where a
 * reference needs it: RoPE angles, Adam's bias corrections). Nothing here uses floating-point
 * atomics: every reduction has a fixed order, so results are the same bits run to run.
 * Semantics are those of ir/ops.def.
 *
 * Under -DSK_EMU the same source compiles with the host C++ compiler and runs on the CPU
 * emulator of sk_emu.h (a test tool). Rules that keep both right: block sizes are multiples
 * of 32; warp collectives are reached by every lane of the warp (loops uniform per warp).
 *
 * Workspace (WS, the kernel scratch after the planned memory): its first SK_WS_FLAGS bytes
 * hold the device error flag (int at WS + 0, see SK_ERR_*); kernels' scratch starts after.
 */
#ifndef SHARDK_CUH
#define SHARDK_CUH

#ifdef SK_EMU
#include "sk_emu.h"
#else
#include <cuda_bf16.h>
#define SK_EMU_ENTRY(name, callargs)
extern __shared__ __align__(16) unsigned char sk_dyn_smem_[];
#define SK_DYN_SMEM() ((void *)sk_dyn_smem_)
#endif

namespace sk {
/* The launch's dynamic shared memory for a kernel that uses need bytes of it; a launch that gave fewer
 * stops there: on the emulator with a message, on the GPU by a trap (one read of %dynamic_smem_size a
 * thread, instead of reading and writing past the block's shared memory). */
__device__ __forceinline__ void *dyn_smem(unsigned need) {
#ifdef SK_EMU
  return sk_emu::dyn_smem(need);
#else
  unsigned have;
  asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(have));
  if (have < need) __trap();
  return SK_DYN_SMEM();
#endif
}
} // namespace sk

/* Error flag codes (int at WS + 0; 0: no error). */
#define SK_ERR_EMBED_ID 1  /* an embedding id outside [0, V) */
#define SK_ERR_TARGET 2    /* a cross-entropy target at or past len (the valid vocabulary) */

namespace sk {

typedef __nv_bfloat16 bf16;
typedef long long i64;

/* ---- loads, stores, rounding ---------------------------------------------------------- */
__device__ __forceinline__ float ld(const float *p) { return *p; }
__device__ __forceinline__ float ld(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float ld(const int *p) { return (float)*p; }
__device__ __forceinline__ void st(float *p, float v) { *p = v; }
__device__ __forceinline__ void st(bf16 *p, float v) { *p = __float2bfloat16_rn(v); } /* nearest, ties to even */
__device__ __forceinline__ void st(int *p, float v) { *p = (int)rintf(v); }
/* x rounded to the nearest bf16 (ties to even), as a float */
__device__ __forceinline__ float rbf(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
__device__ __forceinline__ float ninf() { return __int_as_float((int)0xff800000u); }

/* 16 bytes: eight bf16 (element 2i in the low half of w[i]), for vector loads and stores */
typedef unsigned u32;
struct __align__(16) u32x4 {
  u32 x, y, z, w;
};
struct __align__(16) f32x4 {
  float x, y, z, w;
};
__device__ __forceinline__ void unpack8(float (&v)[8], const u32x4 &q) {
  const u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    v[2 * i] = __int_as_float((int)(w[i] << 16));
    v[2 * i + 1] = __int_as_float((int)(w[i] & 0xffff0000u));
  }
}
/* element i (< 8) of a vector of eight bf16, as a float */
__device__ __forceinline__ float ld_lane(const u32x4 &q, int i) {
  const u32 w = i < 2 ? q.x : i < 4 ? q.y : i < 6 ? q.z : q.w;
  return __int_as_float((int)(i & 1 ? w & 0xffff0000u : w << 16));
}
__device__ __forceinline__ u32 pack2(float lo, float hi) {
#ifdef SK_EMU
  return (u32)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) | ((u32)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
#else /* one cvt.rn.bf16x2.f32: the same rounding (nearest, ties to even) */
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *(const u32 *)&h;
#endif
}
/* 2^x on the special-function unit (ex2.approx: relative error ~2^-22, flushes denormal results; -inf
 * gives 0), one instruction where exp2f handles denormals in several (the cross-entropy, shardk_flash.cuh) */
__device__ __forceinline__ float ex2(float x) {
#ifdef SK_EMU
  return exp2f(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#endif
}
#define SK_LOG2E 1.4426950408889634f

/* 16 bytes global -> shared without passing through registers (cp.async; zeros when !valid) */
__device__ __forceinline__ void cp16(bf16 *dst, const bf16 *src, bool valid) {
#ifdef SK_EMU
  u32x4 w = {0u, 0u, 0u, 0u};
  if (valid) w = *(const u32x4 *)src;
  *(u32x4 *)dst = w;
#else
  unsigned a = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(src), "r"(valid ? 16 : 0));
#endif
}
/* 4 bytes global -> shared (cp.async.ca; zeros when !valid) */
__device__ __forceinline__ void cp4(float *dst, const float *src, bool valid) {
#ifdef SK_EMU
  *dst = valid ? *src : 0.0f;
#else
  unsigned a = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(a), "l"(src), "r"(valid ? 4 : 0));
#endif
}
__device__ __forceinline__ void cp_commit() {
#ifndef SK_EMU
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
/* waits until at most N committed groups of this thread are in flight */
template <int N>
__device__ __forceinline__ void cp_wait() {
#ifndef SK_EMU
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/* 16 bytes from shared memory, read again at every call (not kept in registers by the compiler: for a row that stays
 * in shared memory while it is used in several passes) */
__device__ __forceinline__ u32x4 lds16(const void *p) {
#ifdef SK_EMU
  return *(const u32x4 *)p;
#else
  u32x4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"((unsigned)__cvta_generic_to_shared(p)));
  return v;
#endif
}
__device__ __forceinline__ void lds8f(float (&v)[8], const float *p) { /* 8 floats (two 16-byte reads) */
  const u32x4 a = lds16(p), b = lds16(p + 4);
  v[0] = __int_as_float((int)a.x), v[1] = __int_as_float((int)a.y), v[2] = __int_as_float((int)a.z), v[3] = __int_as_float((int)a.w);
  v[4] = __int_as_float((int)b.x), v[5] = __int_as_float((int)b.y), v[6] = __int_as_float((int)b.z), v[7] = __int_as_float((int)b.w);
}

/* ---- elementwise math (ops.def) -------------------------------------------------------- */
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float gelu(float x) {
  const float c = 0.7978845608028654f; /* sqrt(2/pi) */
  return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float gelu_bwd(float x, float dy) {
  const float c = 0.7978845608028654f;
  float t = tanhf(c * (x + 0.044715f * x * x * x));
  float du = c * (1.0f + 3.0f * 0.044715f * x * x);
  return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
}
__device__ __forceinline__ float silu(float x) { return x * sigmoid(x); }
__device__ __forceinline__ float silu_bwd(float x, float dy) {
  float s = sigmoid(x);
  return dy * (s + x * s * (1.0f - s));
}
__device__ __forceinline__ float relu(float x) { return x > 0.0f ? x : 0.0f; }
__device__ __forceinline__ float fmaxv(float a, float b) { return a > b ? a : b; }
__device__ __forceinline__ float fminv(float a, float b) { return a < b ? a : b; }

/* ---- reductions inside a block (fixed order: the same bits in every thread) ----------------- */
/* Butterfly sum: every lane ends with the same value (a + b == b + a). */
__device__ __forceinline__ float warp_sum(float v) {
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int m = 16; m > 0; m >>= 1) v = fmaxv(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}
/* Sum over the NT threads of the block (NT a multiple of 32); every thread gets the result.
 * red: __shared__ float[64]. */
template <int NT>
__device__ __forceinline__ float block_sum(float v, float *red) {
  v = warp_sum(v);
  int w = (int)threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) red[w] = v;
  __syncthreads();
  float r = 0.0f;
  for (int i = 0; i < NT / 32; i++) r += red[i];
  __syncthreads();
  return r;
}
/* Two sums at once (one pair of barriers). */
template <int NT>
__device__ __forceinline__ void block_sum2(float &a, float &b, float *red) {
  a = warp_sum(a);
  b = warp_sum(b);
  int w = (int)threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) {
    red[w] = a;
    red[32 + w] = b;
  }
  __syncthreads();
  a = 0.0f;
  b = 0.0f;
  for (int i = 0; i < NT / 32; i++) {
    a += red[i];
    b += red[32 + i];
  }
  __syncthreads();
}
/* Online softmax state (max m, sum s of exp(x - m)); merging is commutative. */
__device__ __forceinline__ void lse_merge(float &m, float &s, float m2, float s2) {
  float mm = fmaxv(m, m2);
  if (mm == ninf()) return; /* both empty */
  s = s * expf(m - mm) + s2 * expf(m2 - mm);
  m = mm;
}
template <int NT>
__device__ __forceinline__ void block_lse(float &m, float &s, float *red) {
  for (int k = 16; k > 0; k >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, k), s2 = __shfl_xor_sync(0xffffffffu, s, k);
    lse_merge(m, s, m2, s2);
  }
  int w = (int)threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) {
    red[w] = m;
    red[32 + w] = s;
  }
  __syncthreads();
  m = ninf();
  s = 0.0f;
  for (int i = 0; i < NT / 32; i++) lse_merge(m, s, red[i], red[32 + i]);
  __syncthreads();
}

/* ---- one-launch cross-block sums (deterministic: fixed orders; only integer atomics, on counters) ------
 * The counters are ints in the flags area of the workspace (codegen/cuda_kernels.h CUK_WS_COUNTERS): zero between
 * kernels, since the last block to arrive at one sets it back to zero. Kernels run one at a time on the stream, so
 * every kernel may use them from the first. */

/* a load that bypasses L1 (the value another block wrote in this launch, after its fence) */
__device__ __forceinline__ float ldcg(const float *p) {
#ifdef SK_EMU
  return *p;
#else
  return __ldcg(p);
#endif
}

/* Every thread of the block calls it after writing its part of the block's result: true in the block that arrives
 * n-th (the last of n) at *cnt, which then sees every earlier block's writes; *cnt is zero again after it. */
__device__ __forceinline__ bool arrive_last(int *cnt, int n) {
  __shared__ int ticket;
  __threadfence(); /* this thread's writes, device-wide, before the count */
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    const int t = atomicAdd(cnt, 1);
    if (t == n - 1) atomicExch(cnt, 0); /* every block has arrived: ready for the next kernel */
    ticket = t;
  }
  __syncthreads();
  const bool last = ticket == n - 1;
  if (last) __threadfence();
  return last;
}

/* The sum over NB blocks of their rows part[b * M + j] (j < M, f32; block b wrote row b, then calls this, every
 * thread of the block): blocks in groups of G by index; the last block of a group to arrive sums the group's rows in
 * index order into gpart[g * M + j], and the last group to finish sums those in group order and calls out(j, sum) for
 * every j. cnt: ceil(NB / G) + 1 counters (one when NB <= G). The same sums in the same order whichever block is
 * last: the same bits every run. NT threads (linear index x + y X + z X Y). */
template <int NT, i64 M, int NB, int G, class F>
__device__ void tree_sum(const float *part, float *gpart, int *cnt, int b, F out) {
  constexpr int NG = (NB + G - 1) / G;
  const int tid = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  if (NG == 1) {
    if (!arrive_last(cnt, NB)) return;
    for (i64 j = tid; j < M; j += NT) {
      float s = 0.0f;
#pragma unroll 8
      for (int r = 0; r < NB; r++) s += ldcg(part + (i64)r * M + j);
      out(j, s);
    }
    return;
  }
  const int g = b / G, lo = g * G, n = NB - lo < G ? NB - lo : G;
  if (!arrive_last(cnt + g, n)) return;
  for (i64 j = tid; j < M; j += NT) {
    float v[G], s = 0.0f;
#pragma unroll
    for (int r = 0; r < G; r++) v[r] = r < n ? ldcg(part + (i64)(lo + r) * M + j) : 0.0f; /* all in flight */
#pragma unroll
    for (int r = 0; r < G; r++) s += r < n ? v[r] : 0.0f;
    gpart[(i64)g * M + j] = s;
  }
  if (!arrive_last(cnt + NG, NG)) return;
  for (i64 j = tid; j < M; j += NT) {
    float s = 0.0f;
#pragma unroll 8
    for (int q = 0; q < NG; q++) s += ldcg(gpart + (i64)q * M + j);
    out(j, s);
  }
}

/* ---- iota, transpose, the second stage of column sums ----------------------------------- */
template <i64 N>
__device__ void iota(int *y, i64 start) {
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (i64)gridDim.x * blockDim.x)
    y[i] = (int)(start + i);
}

/* y[b, c, r] = x[b, r, c] for b < BATCH; block (32, 8), grid (ceil(C/32), min(ceil(R/32), 65535), min(BATCH, 65535)):
 * a block's tiles of rows blockIdx.y, + gridDim.y, ... (a stacked gradient's 2M rows are 65536 tiles and more). */
template <class T, i64 BATCH, i64 R, i64 C>
__device__ void transpose(T *y, const T *x) {
  __shared__ float tile[32][33];
  const i64 c0 = (i64)blockIdx.x * 32;
  int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
  for (i64 rt = blockIdx.y; rt < (R + 31) / 32; rt += gridDim.y)
  for (i64 b = blockIdx.z, r0 = rt * 32; b < BATCH; b += gridDim.z) {
    const T *xb = x + b * R * C;
    T *yb = y + b * R * C;
    for (int j = 0; j < 32; j += 8) {
      i64 r = r0 + ty + j, c = c0 + tx;
      if (r < R && c < C) tile[ty + j][tx] = ld(xb + r * C + c);
    }
    __syncthreads();
    for (int j = 0; j < 32; j += 8) {
      i64 c = c0 + ty + j, r = r0 + tx;
      if (r < R && c < C) st(yb + c * R + r, tile[tx][ty + j]);
    }
    __syncthreads();
  }
}

/* y[j] = sum over p < P of part[p * M + j], in order (the second stage of deterministic
 * column sums); grid ceil(M / 256), block 256; scale multiplies the result. */
template <class TY, i64 M, i64 P>
__device__ void sum_parts(TY *y, const float *part, float scale) {
  i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= M) return;
  float acc = 0.0f;
  for (i64 p = 0; p < P; p++) acc += part[p * M + j];
  st(y + j, acc * scale);
}

/* VW = 16 / sizeof(T) consecutive values at p (16-byte aligned) as floats: one 16-byte load. */
__device__ __forceinline__ void ldv(float (&v)[8], const bf16 *p) { unpack8(v, *(const u32x4 *)p); }
__device__ __forceinline__ void ldv(float (&v)[4], const float *p) {
  const f32x4 q = *(const f32x4 *)p;
  v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
}

/* ... and VW values back (16-byte aligned): one 16-byte store. */
__device__ __forceinline__ void stv(bf16 *p, const float (&v)[8]) {
  *(u32x4 *)p = u32x4{pack2(v[0], v[1]), pack2(v[2], v[3]), pack2(v[4], v[5]), pack2(v[6], v[7])};
}
__device__ __forceinline__ void stv(float *p, const float (&v)[4]) { *(f32x4 *)p = f32x4{v[0], v[1], v[2], v[3]}; }

/* Column sums of x [R, C] with rows LD apart (C, LD multiples of VW = 16 / sizeof(T), x 16-byte aligned), one block's
 * share: P chunks of ceil(R / P) rows, block (CX = 256 / RY, RY) of grid (ceil(C / VW / CX), P) sums the CX VW columns
 * from c0 = blockIdx.x CX VW of chunk blockIdx.y: thread (tx, ty) holds the VW columns of vector tx, sums rows ty, ty + RY,
 * ... of its chunk in order (16-byte loads, 8 rows in flight), then the RY row slices add in ty order (fixed: the same
 * bits every run); emit(e, sum) for e < CX VW (columns past C: 0). RY 8 suits many rows (wide rows of a warp), RY 32
 * few (more blocks). */
template <class T, i64 R, i64 C, i64 LD, int P, int RY, class F>
__device__ void colsum_blk(const T *x, F emit) {
  constexpr int VW = 16 / (int)sizeof(T), CX = 256 / RY;
  constexpr i64 CH = (R + P - 1) / P;
  __shared__ float part[RY][CX * VW];
  const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
  const i64 cv = (i64)blockIdx.x * CX + tx, lo = (i64)blockIdx.y * CH, hi = lo + CH < R ? lo + CH : R;
  float acc[VW];
#pragma unroll
  for (int k = 0; k < VW; k++) acc[k] = 0.0f;
  if (cv < C / VW) {
#pragma unroll 8
    for (i64 i = lo + ty; i < hi; i += RY) {
      float v[VW];
      ldv(v, x + i * LD + cv * VW);
#pragma unroll
      for (int k = 0; k < VW; k++) acc[k] += v[k];
    }
  }
#pragma unroll
  for (int k = 0; k < VW; k++) part[ty][tx * VW + k] = acc[k];
  __syncthreads();
  for (int e = ty * CX + tx; e < CX * VW; e += 256) {
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < RY; r++) s += part[r][e];
    emit(e, s);
  }
}

/* y[p * C + j] = scale * (the sum of x[i, j] over the rows i of chunk p): colsum_blk's sums stored (P = 1: y [C]). */
template <class TY, class T, i64 R, i64 C, i64 LD, int P, int RY>
__device__ void colsum(TY *y, const T *x, float scale) {
  constexpr int VW = 16 / (int)sizeof(T), CX = 256 / RY;
  const i64 c0 = (i64)blockIdx.x * CX * VW;
  colsum_blk<T, R, C, LD, P, RY>(x, [&](int e, float s) {
    if (c0 + e < C) st(y + (i64)blockIdx.y * C + c0 + e, s * scale);
  });
}

/* Counters tree_sum takes for NB blocks in groups of G. */
__host__ __device__ constexpr int tree_counters(int nb, int g) { return nb <= g ? 1 : (nb + g - 1) / g + 1; }

/* y [C] = scale * the column sums of x in ONE launch: colsum_blk's sums of chunk p into part (per column tile, P rows
 * of M = CX VW floats), then tree_sum over the P chunks of each tile (groups of G; gpart: ceil(P / G) rows a tile;
 * cnt: tree_counters(P, G) a tile). Same grid and block as colsum. */
template <class TY, class T, i64 R, i64 C, i64 LD, int P, int RY, int G>
__device__ void colsum_tree(TY *y, const T *x, float scale, float *part, float *gpart, int *cnt) {
  constexpr int VW = 16 / (int)sizeof(T), CX = 256 / RY, M = CX * VW, NG = (P + G - 1) / G;
  const int tile = (int)blockIdx.x, p = (int)blockIdx.y;
  float *mine = part + (i64)tile * P * M;
  colsum_blk<T, R, C, LD, P, RY>(x, [&](int e, float s) { mine[(i64)p * M + e] = s; });
  const i64 c0 = (i64)tile * M;
  tree_sum<256, M, P, G>(mine, gpart + (i64)tile * NG * M, cnt + tile * tree_counters(P, G), p, [&](i64 j, float s) {
    if (c0 + j < C) st(y + c0 + j, s * scale);
  });
}

/* ---- embeddings ------------------------------------------------------------------------ */
/* y[i, :] = table[idx[i] - row0, :]; one block per row i (grid N), NT threads.
 * CHECK: ids outside [0, V) raise SK_ERR_EMBED_ID; else ids outside the table give zeros. */
template <class TY, class TT, i64 D, i64 V, int NT, bool CHECK>
__device__ void embed(TY *y, const TT *table, const int *idx, i64 row0, int *err) {
  i64 i = blockIdx.x;
  i64 r = (i64)idx[i] - row0;
  bool in = r >= 0 && r < V;
  if (CHECK && !in && threadIdx.x == 0) *err = SK_ERR_EMBED_ID;
  for (i64 c = threadIdx.x; c < D; c += NT) st(y + i * D + c, in ? ld(table + r * D + c) : 0.0f);
}

/* dtable[r, :] = sum of dy[i, :] over i with idx[i] - row0 == r, in increasing i (deterministic,
 * no atomics). Block (blockIdx.x, blockIdx.y) owns table rows [R*bx, R*bx + R) and columns
 * [DC*by, DC*by + DC): it scans all N ids in tiles of NT, keeps the matches in order (ballots)
 * and sums their rows into shared memory. grid (ceil(V/R), ceil(D/DC)), block NT. */
template <class TT, class TD, i64 N, i64 D, i64 V, int R, int DC, int NT>
__device__ void embed_bwd(TT *dtable, const int *idx, const TD *dy, i64 row0) {
  __shared__ float acc[R * DC];
  __shared__ int list[NT];
  __shared__ int wcnt[NT / 32];
  i64 lo = (i64)blockIdx.x * R, c0 = (i64)blockIdx.y * DC;
  int nr = (int)(V - lo < R ? V - lo : R);
  int nc = (int)(D - c0 < DC ? D - c0 : DC);
  int t = (int)threadIdx.x, w = t >> 5, l = t & 31;
  for (int e = t; e < R * DC; e += NT) acc[e] = 0.0f;
  for (i64 base = 0; base < N; base += NT) {
    i64 i = base + t;
    i64 r = i < N ? (i64)idx[i] - row0 - lo : -1;
    int hit = r >= 0 && r < nr;
    unsigned mask = __ballot_sync(0xffffffffu, hit);
    if (l == 0) wcnt[w] = __popc(mask);
    __syncthreads();
    int off = 0, total = 0;
    for (int k = 0; k < NT / 32; k++) {
      off += k < w ? wcnt[k] : 0;
      total += wcnt[k];
    }
    if (hit) list[off + __popc(mask & ((1u << l) - 1u))] = (int)i;
    __syncthreads();
    for (int e = 0; e < total; e++) { /* in increasing i; each thread owns its columns */
      i64 ii = list[e];
      int rr = (int)((i64)idx[ii] - row0 - lo);
      for (int c = t; c < nc; c += NT) acc[rr * DC + c] += ld(dy + ii * D + c0 + c);
    }
    __syncthreads();
  }
  for (int rr = 0; rr < nr; rr++)
    for (int c = t; c < nc; c += NT) st(dtable + (lo + rr) * D + c0 + c, acc[rr * DC + c]);
}

/* Eight consecutive values (16-byte aligned) as floats, and back. */
__device__ __forceinline__ void ld8(float (&v)[8], const bf16 *p) { unpack8(v, *(const u32x4 *)p); }
__device__ __forceinline__ void ld8(float (&v)[8], const float *p) {
  const f32x4 a = *(const f32x4 *)p, b = *(const f32x4 *)(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void st8(bf16 *p, const float (&v)[8]) {
  *(u32x4 *)p = u32x4{pack2(v[0], v[1]), pack2(v[2], v[3]), pack2(v[4], v[5]), pack2(v[6], v[7])};
}
__device__ __forceinline__ void st8(float *p, const float (&v)[8]) {
  *(f32x4 *)p = f32x4{v[0], v[1], v[2], v[3]};
  *(f32x4 *)(p + 4) = f32x4{v[4], v[5], v[6], v[7]};
}

/* Embedding backward by buckets (deterministic, no float atomics): the ids in range go to NB buckets of R table
 * rows (bucket b: rows [R b, R b + R)). embed_bucket (one block of 1024 threads): the count of each bucket
 * (shared-memory integer atomics: exact), their exclusive scan into bstart[0..NB], and each id's key, (its row in
 * the bucket) * N + i, at a place of its bucket in keys (in the atomics' order: embed_bwd_rows sorts them). */
template <i64 N, i64 V, int R, int NB>
__device__ void embed_bucket(int *bstart, int *keys, const int *idx, i64 row0) {
  __shared__ int cnt[NB], cur[NB], wsum[32];
  constexpr int PER = (NB + 1023) / 1024;
  const int t = (int)threadIdx.x, lane = t & 31, w = t >> 5;
  for (int b = t; b < NB; b += 1024) cnt[b] = 0;
  __syncthreads();
  for (i64 i = t; i < N; i += 1024) {
    const i64 r = (i64)idx[i] - row0;
    if (r >= 0 && r < V) atomicAdd(&cnt[r / R], 1);
  }
  __syncthreads();
  int loc = 0; /* thread t: buckets [PER t, PER t + PER) */
  for (int k = 0; k < PER; k++) loc += PER * t + k < NB ? cnt[PER * t + k] : 0;
  int v = loc;
  for (int d = 1; d < 32; d <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += u;
  }
  if (lane == 31) wsum[w] = v;
  __syncthreads();
  if (w == 0) {
    int x = wsum[lane];
    for (int d = 1; d < 32; d <<= 1) {
      const int u = __shfl_up_sync(0xffffffffu, x, d);
      if (lane >= d) x += u;
    }
    wsum[lane] = x;
  }
  __syncthreads();
  int ex = v - loc + (w > 0 ? wsum[w - 1] : 0);
  for (int k = 0; k < PER; k++) {
    const int b = PER * t + k;
    if (b < NB) {
      bstart[b] = ex;
      cur[b] = ex;
      ex += cnt[b];
    }
  }
  if (t == 1023) bstart[NB] = ex;
  __syncthreads();
  for (i64 i = t; i < N; i += 1024) {
    const i64 r = (i64)idx[i] - row0;
    if (r >= 0 && r < V) keys[atomicAdd(&cur[r / R], 1)] = (int)((r % R) * N + i);
  }
}

/* Ascending sort of key[0..n) by one block of NT threads (bitonic, every compare-exchange putting the smaller at
 * the lower index, so the padding to a power of two is virtual: +inf that never moves). key may be shared or
 * device memory (the block's own). */
template <int NT>
__device__ void block_sort(int *key, int n) {
  int p2 = 1;
  while (p2 < n) p2 <<= 1;
  for (int k = 2; k <= p2; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int e = (int)threadIdx.x; e < p2 / 2; e += NT) {
        const int blk = e / j, off = e % j;
        const int lo = j == k >> 1 ? blk * k + off : blk * 2 * j + off, hi = j == k >> 1 ? blk * k + k - 1 - off : lo + j;
        if (hi < n) {
          const int a = key[lo], c = key[hi];
          if (a > c) key[lo] = c, key[hi] = a;
        }
      }
      __syncthreads();
    }
}

/* embed_bwd_rows (grid NB, NT threads): block b sorts its bucket's keys (by row, then by i; in shared memory when
 * at most CAP, else in place in keys), then writes table rows [R b, R b + R): row r = the sum of dy[i] over its ids
 * in increasing i (zeros when none). Thread t: the 8 columns of vectors t, t + NT, ... (16-byte loads, stores). */
template <class TT, class TD, i64 N, i64 D, i64 V, int R, int NT, int CAP>
__device__ void embed_bwd_rows(TT *dtable, int *keys, const int *bstart, const TD *dy) {
  __shared__ int ks[CAP];
  const int b = (int)blockIdx.x, t = (int)threadIdx.x;
  const int k0 = bstart[b], n = bstart[b + 1] - k0;
  int *key = n <= CAP ? ks : keys + k0;
  if (n <= CAP)
    for (int e = t; e < n; e += NT) ks[e] = keys[k0 + e];
  __syncthreads();
  block_sort<NT>(key, n);
  const i64 lo = (i64)b * R;
  const int nr = (int)(V - lo < R ? V - lo : R);
  int k = 0;
  for (int r = 0; r < nr; r++) {
    int ke = k;
    while (ke < n && key[ke] / (int)N == r) ke++;
    for (int cv = t; cv < (int)(D / 8); cv += NT) {
      float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
      for (int q = k; q < ke; q++) {
        float v[8];
        ld8(v, dy + (i64)(key[q] % (int)N) * D + 8 * cv);
#pragma unroll
        for (int i = 0; i < 8; i++) acc[i] += v[i];
      }
      st8(dtable + (lo + r) * D + 8 * cv, acc);
    }
    k = ke;
  }
}

/* ---- rotary embedding: one thread per (b, s, i < hd/2), over every head: the angle (double
 * pow, cos, sin) once per H pairs; in place allowed ---------------------------------------------- */
template <class T, i64 B, i64 S, i64 H, i64 HD, bool INV>
__device__ void rope(T *y, const T *x, double theta, i64 start, const int *pos = nullptr) {
  const i64 half = HD / 2, total = B * S * half;
  for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
    i64 i = e % half, s = (e / half) % S, b = e / (half * S);
    double ang = (double)((pos ? (i64)pos[s] : s) + start) * pow(theta, -2.0 * (double)i / (double)HD); /* pos: rope_at */
    if (INV) ang = -ang;
    float cs = (float)cos(ang), sn = (float)sin(ang);
    for (i64 h = 0; h < H; h++) {
      i64 o = (b * S + s) * H * HD + h * HD + i;
      float a = ld(x + o), c = ld(x + o + half);
      st(y + o, a * cs - c * sn);
      st(y + o + half, c * cs + a * sn);
    }
  }
}

/* rope for rows of H heads whose half head is a multiple of VW = 16 / sizeof(T): a block of 256 threads does R rows
 * (b, s) (grid ceil(B S / R)). Its loads first (each thread's vector pairs: VW values of the first half of a head and
 * the VW across from them in the second half, 16 bytes each), then while they fly the R rows' cos and sin into shared
 * memory (the same double formula as rope: theta^(-2i / HD) once a block per frequency, sincos once per position and
 * frequency), then the rotations and the stores (in place allowed: a pair is read and written by one thread).
 * Pointers not 16-byte aligned: element by element. */
template <class T, i64 B, i64 S, i64 H, i64 HD, bool INV, int R>
__device__ void rope_vec(T *y, const T *x, double theta, i64 start, const int *pos = nullptr) {
  constexpr int VW = 16 / (int)sizeof(T), HALF = (int)(HD / 2), NV = HALF / VW, TASKS = R * (int)H * NV,
                TPT = (TASKS + 255) / 256;
  static_assert(HALF % VW == 0, "rope_vec: half a head of whole vectors");
  __shared__ float cs[R][HALF], sn[R][HALF];
  __shared__ double fr[HALF];
  const i64 row0 = (i64)blockIdx.x * R;
  const int t = (int)threadIdx.x;
  const bool al = ((((unsigned long long)x | (unsigned long long)y) & 15) == 0);
  for (int i = t; i < HALF; i += 256) fr[i] = pow(theta, -2.0 * (double)i / (double)HD);
  float a[TPT][VW], c[TPT][VW];
#pragma unroll
  for (int k = 0; k < TPT; k++) { /* task e = t + 256 k: row e / (H NV), head e / NV % H, vector e % NV */
    const int e = t + 256 * k, r = e / ((int)H * NV), h = e / NV % (int)H, v = e % NV;
    if (al && e < TASKS && row0 + r < B * S) {
      const i64 o = (row0 + r) * H * HD + h * HD + v * VW;
      ldv(a[k], x + o);
      ldv(c[k], x + o + HALF);
    }
  }
  __syncthreads();
  for (int e = t; e < R * HALF; e += 256) {
    const int r = e / HALF, i = e % HALF;
    const i64 s = (row0 + r) % S;
    double ang = (double)((pos ? (i64)pos[s] : s) + start) * fr[i], sd, cd;
    if (INV) ang = -ang;
    sincos(ang, &sd, &cd);
    cs[r][i] = (float)cd;
    sn[r][i] = (float)sd;
  }
  __syncthreads();
  if (!al) { /* misaligned: one value at a time */
    for (int e = t; e < R * (int)H * HALF; e += 256) {
      const int r = e / ((int)H * HALF), h = e / HALF % (int)H, i = e % HALF;
      if (row0 + r >= B * S) continue;
      const i64 o = (row0 + r) * H * HD + h * HD + i;
      const float av = ld(x + o), cv = ld(x + o + HALF);
      st(y + o, av * cs[r][i] - cv * sn[r][i]);
      st(y + o + HALF, cv * cs[r][i] + av * sn[r][i]);
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < TPT; k++) {
    const int e = t + 256 * k, r = e / ((int)H * NV), h = e / NV % (int)H, v = e % NV;
    if (e < TASKS && row0 + r < B * S) {
      const i64 o = (row0 + r) * H * HD + h * HD + v * VW;
      float lo[VW], hi[VW];
#pragma unroll
      for (int q = 0; q < VW; q++) {
        const float cq = cs[r][v * VW + q], sq = sn[r][v * VW + q];
        lo[q] = a[k][q] * cq - c[k][q] * sq;
        hi[q] = c[k][q] * cq + a[k][q] * sq;
      }
      stv(y + o, lo);
      stv(y + o + HALF, hi);
    }
  }
}

/* ---- reductions to an f32 scalar: stage 1, grid P, block NT: part[p] = the sum of chunk p;
 * stage 2 (one block): y = scale * the sum of the parts ------------------------------------- */
/* The sum (SQ: of squares) of chunk p of P of x[0, N), every thread of the block gets it. red: __shared__ float[64]. */
template <class T, i64 N, int P, int NT, bool SQ>
__device__ __forceinline__ float reduce_chunk(const T *x, int p, float *red) {
  const i64 chunk = (N + P - 1) / P;
  i64 lo = (i64)p * chunk, hi = lo + chunk < N ? lo + chunk : N;
  float s = 0.0f;
  for (i64 i = lo + threadIdx.x; i < hi; i += NT) {
    float v = ld(x + i);
    s += SQ ? v * v : v;
  }
  return block_sum<NT>(s, red);
}
/* The sum of part[0, P) in a fixed order (strided over the NT threads, then block_sum); every thread gets it. */
template <int NT>
__device__ __forceinline__ float reduce_parts_sum(const float *part, int P, float *red) {
  float s = 0.0f;
  for (int i = (int)threadIdx.x; i < P; i += NT) s += ldcg(part + i);
  return block_sum<NT>(s, red);
}
template <class T, i64 N, int P, int NT, bool SQ>
__device__ void reduce_parts(float *part, const T *x) {
  __shared__ float red[64];
  float s = reduce_chunk<T, N, P, NT, SQ>(x, (int)blockIdx.x, red);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}
template <int P, int NT>
__device__ void reduce_final(float *y, const float *part, float scale) {
  __shared__ float red[64];
  float s = reduce_parts_sum<NT>(part, P, red);
  if (threadIdx.x == 0) y[0] = s * scale;
}

/* One tensor of a multi-tensor sum of squares in one launch (codegen/cuda_kernels.c cuk_sumsq_multi; the gradient
 * clip's, passes/fuse_sumsq.c): its P blocks are blocks [b0, b0 + P) of the grid, this one p of them. Block p writes
 * the sum of squares of chunk p of x[0, N) to part[p]; the last of the P to arrive (at *cnt) sums part[0, P) into *y.
 * The chunks, their sums and the final order are reduce_parts' and reduce_final's (the bits of cuk_sumsq's two
 * launches) whichever block is last. red: the kernel's __shared__ float[64]. */
template <class T, i64 N, int P, int NT>
__device__ void sumsq_multi_part(float *y, float *part, int *cnt, const T *x, int p, float *red) {
  float s = reduce_chunk<T, N, P, NT, true>(x, p, red);
  if (threadIdx.x == 0) part[p] = s;
  if (!arrive_last(cnt, P)) return;
  s = reduce_parts_sum<NT>(part, P, red);
  if (threadIdx.x == 0) y[0] = s;
}

/* ---- optimizers (ops.def), in place; hyper = (lr, gscale, step); gscale NaN / Inf: no change - */
/* pc (nullptr: none): the updated p rounded to bf16, stored beside it (the parameter's persistent copy, or
 * under ZeRO 1 / 2 the shard of it that an all-gather then writes into the copy: written on a skipped
 * step too, as p's unchanged value) */
template <class TG, i64 N>
__device__ void adamw(float *p, const TG *g, float *m, float *v, const float *hyper, float b1, float b2, float eps,
                      float wd, bf16 *pc = nullptr) {
  float lr = hyper[0], gs = hyper[1];
  if (!(fabsf(gs) <= 3.402823466e38f)) { /* gscale NaN / Inf: a skipped step (ops.def); the copy is p's */
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; pc && i < N; i += (i64)gridDim.x * blockDim.x) st(pc + i, p[i]);
    return;
  }
  double step = (double)hyper[2];
  float bc1 = (float)(1.0 - pow((double)b1, step)), bc2 = (float)(1.0 - pow((double)b2, step));
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (i64)gridDim.x * blockDim.x) {
    float gi = gs * ld(g + i);
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    float pi = p[i];
    float po = pi - lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * pi);
    p[i] = po;
    if (pc) st(pc + i, po);
    m[i] = mi;
    v[i] = vi;
  }
}
template <class TG, i64 N>
__device__ void sgd(float *p, const TG *g, float *m, const float *hyper, float mom, float wd, bf16 *pc = nullptr) {
  float lr = hyper[0], gs = hyper[1];
  if (!(fabsf(gs) <= 3.402823466e38f)) { /* a skipped step; the copy is p's */
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; pc && i < N; i += (i64)gridDim.x * blockDim.x) st(pc + i, p[i]);
    return;
  }
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (i64)gridDim.x * blockDim.x) {
    float pi = p[i];
    float gi = gs * ld(g + i) + wd * pi;
    float mi = mom * m[i] + gi;
    m[i] = mi;
    float po = pi - lr * mi;
    p[i] = po;
    if (pc) st(pc + i, po);
  }
}

} // namespace sk

#include "shardk_norm.cuh"
#include "shardk_bytes.cuh"
#include "shardk_ce.cuh"
#include "shardk_attn.cuh"
#include "shardk_flash.cuh"
#include "shardk_wgmma.cuh"
#include "shardk_wgmma_bwd.cuh"
#include "shardk_wgmma_bwd1.cuh"
#include "shardk_wgmma_ws.cuh"

#endif
