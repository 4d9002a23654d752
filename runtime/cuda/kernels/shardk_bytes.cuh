/* runtime/cuda/kernels/shardk_bytes.cuh — the bytes-bound kernels that were below 60 % of their bytes floor on the
 * H100 (issue 17), rebuilt for one launch each with their loads issued before their use (included by shardk.cuh;
 * emitted by codegen/cuda_kernels_bytes.c in the CUK_VAR_ONE variant): the embedding backward without a sort or a
 * bucketing launch, column sums with one level of arrivals, the embedding forward and the transpose in 16-byte
 * vectors. Deterministic: fixed orders, integer atomics only. */
#ifndef SHARDK_BYTES_CUH
#define SHARDK_BYTES_CUH

namespace sk {

/* a 16-byte vector's elements as raw bits (the transpose moves bits, converts nothing) */
template <int S>
struct ebits;
template <>
struct ebits<2> {
  typedef unsigned short t;
};
template <>
struct ebits<4> {
  typedef u32 t;
};
template <class T>
union vbits {
  u32x4 q;
  typename ebits<sizeof(T)>::t e[16 / sizeof(T)];
};

/* VW = 16 / sizeof(T) values from a raw 16-byte vector, as floats */
__device__ __forceinline__ void unpackv(float (&v)[8], const u32x4 &q, const bf16 *) { unpack8(v, q); }
__device__ __forceinline__ void unpackv(float (&v)[4], const u32x4 &q, const float *) {
  v[0] = __int_as_float((int)q.x), v[1] = __int_as_float((int)q.y), v[2] = __int_as_float((int)q.z),
  v[3] = __int_as_float((int)q.w);
}

/* four floats another block wrote in this launch (after its fence), past L1 */
__device__ __forceinline__ void ldcg4(float *v, const float *p) {
#ifdef SK_EMU
  v[0] = p[0], v[1] = p[1], v[2] = p[2], v[3] = p[3];
#else
  const float4 q = __ldcg((const float4 *)p);
  v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
#endif
}

/* ---- column sums, one level of arrivals --------------------------------------------------------------------------
 * y [C] = scale * the column sums of x [R, C] (rows LD apart; C, LD multiples of VW = 16 / sizeof(T); x 16-byte
 * aligned) in one launch: grid (ceil(C / VW / CX), P), block (CX = 256 / RY, RY). Block (tile, p) sums rows ty, ty + RY,
 * ... of chunk p (CH = ceil(R / P) rows) for the VW columns of vector tx, U rows' 16-byte loads issued before the
 * first add (the whole chunk when CH <= U RY), then the RY slices in ty order, into part[(tile P + p) M + e] (M = CX
 * VW); the last block of the tile to arrive (one counter a tile) sums the P partials: thread (tx, ty) the partials
 * ty, ty + RY, ... of its VW columns (all their loads in flight, up to P 96), then the slices in ty order. Two L2
 * round trips after the bytes (colsum_tree: four, with a second level of arrivals); fixed orders: the same bits every
 * run. */
template <class TY, class T, i64 R, i64 C, i64 LD, int P, int RY, int U>
__device__ void colsum_flat(TY *y, const T *x, float scale, float *part, int *cnt) {
  constexpr int VW = 16 / (int)sizeof(T), CX = 256 / RY, M = CX * VW;
  constexpr i64 CH = (R + P - 1) / P;
  __shared__ float sp[RY][M];
  const int tx = (int)threadIdx.x, ty = (int)threadIdx.y, tile = (int)blockIdx.x, p = (int)blockIdx.y;
  const i64 cv = (i64)tile * CX + tx, lo = (i64)p * CH, hi = lo + CH < R ? lo + CH : R;
  float acc[VW];
#pragma unroll
  for (int k = 0; k < VW; k++) acc[k] = 0.0f;
  if (cv < C / VW) {
    for (i64 i0 = lo + ty; i0 < hi; i0 += (i64)RY * U) {
      u32x4 q[U];
#pragma unroll
      for (int u = 0; u < U; u++) {
        const i64 i = i0 + (i64)u * RY;
        q[u] = i < hi ? *(const u32x4 *)(x + i * LD + cv * VW) : u32x4{0u, 0u, 0u, 0u};
      }
#pragma unroll
      for (int u = 0; u < U; u++)
        if (i0 + (i64)u * RY < hi) {
          float v[VW];
          unpackv(v, q[u], x);
#pragma unroll
          for (int k = 0; k < VW; k++) acc[k] += v[k];
        }
    }
  }
#pragma unroll
  for (int k = 0; k < VW; k++) sp[ty][tx * VW + k] = acc[k];
  __syncthreads();
  float *mine = part + ((i64)tile * P + p) * M;
  for (int e = ty * CX + tx; e < M; e += 256) {
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < RY; r++) s += sp[r][e];
    mine[e] = s;
  }
  if (!arrive_last(cnt + tile, P)) return;
  const float *tp = part + (i64)tile * P * M + tx * VW;
  float a2[VW];
#pragma unroll
  for (int k = 0; k < VW; k++) a2[k] = 0.0f;
  constexpr int TB = (P + RY - 1) / RY < 12 ? (P + RY - 1) / RY : 12; /* the partials' loads at once: all, to 96 chunks */
  for (int p0 = ty; p0 < P; p0 += RY * TB) {
    float v[TB][VW];
#pragma unroll
    for (int u = 0; u < TB; u++)
      if (p0 + u * RY < P)
#pragma unroll
        for (int k = 0; k < VW; k += 4) ldcg4(&v[u][k], tp + (i64)(p0 + u * RY) * M + k);
#pragma unroll
    for (int u = 0; u < TB; u++)
      if (p0 + u * RY < P)
#pragma unroll
        for (int k = 0; k < VW; k++) a2[k] += v[u][k];
  }
#pragma unroll
  for (int k = 0; k < VW; k++) sp[ty][tx * VW + k] = a2[k];
  __syncthreads();
  const i64 c0 = (i64)tile * M;
  for (int e = ty * CX + tx; e < M; e += 256) {
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < RY; r++) s += sp[r][e];
    if (c0 + e < C) st(y + c0 + e, s * scale);
  }
}

/* ---- embedding forward: a warp per row, 16-byte vectors --------------------------------------------------------------
 * y[i, :] = table[idx[i] - row0, :] (zeros, and with CHECK the error flag, for ids outside [0, V)); D a multiple of 8;
 * block 256 (8 warps), grid ceil(N / 16): warp w of block b rows 16 b + w and 16 b + w + 8, every load of both rows
 * (up to 4 vectors of 8 columns a lane each) issued before the first store. y and table 16-byte aligned, else
 * element by element. */
template <class TY, class TT, i64 N, i64 D, i64 V, bool CHECK>
__device__ void embed_vec(TY *y, const TT *table, const int *idx, i64 row0, int *err) {
  constexpr int NV = (int)(D / 8), VPL = (NV + 31) / 32, U = VPL < 4 ? VPL : 4;
  const int lane = (int)threadIdx.x & 31, w = (int)threadIdx.x >> 5;
  const bool al = (((unsigned long long)y | (unsigned long long)table) & 15) == 0;
  i64 row[2], src[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    row[h] = (i64)blockIdx.x * 16 + w + 8 * h;
    const i64 r = row[h] < N ? (i64)idx[row[h]] - row0 : -1;
    const bool in = r >= 0 && r < V;
    if (CHECK && row[h] < N && !in && lane == 0) *err = SK_ERR_EMBED_ID;
    src[h] = in ? r : -1;
  }
  if (!al) {
    for (int h = 0; h < 2; h++)
      if (row[h] < N)
        for (i64 c = lane; c < D; c += 32) st(y + row[h] * D + c, src[h] >= 0 ? ld(table + src[h] * D + c) : 0.0f);
    return;
  }
  for (int v0 = 0; v0 < NV; v0 += 32 * U) {
    float v[2][U][8];
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int c = v0 + 32 * u + lane;
        if (src[h] >= 0 && c < NV) ld8(v[h][u], table + src[h] * D + 8 * c);
        else
#pragma unroll
          for (int k = 0; k < 8; k++) v[h][u][k] = 0.0f;
      }
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int c = v0 + 32 * u + lane;
        if (row[h] < N && c < NV) st8(y + row[h] * D + 8 * c, v[h][u]);
      }
  }
}

/* ---- transpose in 64 x 64 tiles of 16-byte vectors ---------------------------------------------------------------
 * y[b, c, r] = x[b, r, c] (R, C multiples of VW = 16 / sizeof(T)); block 256, grid (ceil(C / 64), min(ceil(R / 64),
 * 65535), min(BATCH, 65535)). The tile's 16-byte loads (2 bf16 / 4 f32 vectors a thread) issued together, their elements into
 * shared memory (rows of an odd number of 32-bit words: at most 2-way bank conflicts either way), then each thread
 * gathers a vector of y's row (a column of the tile) and stores it whole: a warp stores 4 (bf16) / 2 (f32) rows of 128
 * contiguous bytes. Pointers not 16-byte aligned: element by element through the same tile. */
template <class T, i64 BATCH, i64 R, i64 C>
__device__ void transpose_vec(T *y, const T *x) {
  typedef typename ebits<sizeof(T)>::t E;
  constexpr int VW = 16 / (int)sizeof(T), TV = 64 / VW, NL = 64 * TV / 256, PAD = 4 / (int)sizeof(T);
  __shared__ E tile[64][64 + PAD];
  const int t = (int)threadIdx.x;
  const i64 c0 = (i64)blockIdx.x * 64;
  const bool al = (((unsigned long long)y | (unsigned long long)x) & 15) == 0;
  for (i64 rt = blockIdx.y; rt < (R + 63) / 64; rt += gridDim.y) /* (row tiles past gridDim.y: the block loops) */
  for (i64 b = blockIdx.z, r0 = rt * 64; b < BATCH; b += gridDim.z) {
    const E *xb = (const E *)x + b * R * C;
    E *yb = (E *)y + b * R * C;
    vbits<T> q[NL];
#pragma unroll
    for (int u = 0; u < NL; u++) {
      const int e = t + 256 * u, rr = e / TV, cv = e % TV;
      const i64 r = r0 + rr, c = c0 + (i64)cv * VW;
      if (r < R && c < C) {
        if (al) q[u].q = *(const u32x4 *)(xb + r * C + c);
        else
#pragma unroll
          for (int k = 0; k < VW; k++) q[u].e[k] = xb[r * C + c + k];
      }
    }
#pragma unroll
    for (int u = 0; u < NL; u++) {
      const int e = t + 256 * u, rr = e / TV, cv = e % TV;
      if (r0 + rr < R && c0 + (i64)cv * VW < C)
#pragma unroll
        for (int k = 0; k < VW; k++) tile[rr][cv * VW + k] = q[u].e[k];
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < NL; u++) {
      const int e = t + 256 * u, cc = e / TV, rv = e % TV;
      const i64 c = c0 + cc, r = r0 + (i64)rv * VW;
      if (c < C && r < R) {
        vbits<T> o;
#pragma unroll
        for (int k = 0; k < VW; k++) o.e[k] = tile[rv * VW + k][cc];
        if (al) *(u32x4 *)(yb + c * R + r) = o.q;
        else
#pragma unroll
          for (int k = 0; k < VW; k++) yb[c * R + r + k] = o.e[k];
      }
    }
    __syncthreads();
  }
}

/* ---- embedding backward in one launch, without a sort ------------------------------------------------------------
 * dtable[r, :] = the sum of dy[i, :] over the i with idx[i] - row0 == r, in increasing i (the bits of embed_bwd_rows and
 * of the reference's order; zeros for rows no id hits). D a multiple of 8; block 256 (8 warps), grid ceil(V / R); block
 * b owns table rows [R b, R b + R):
 *  1. it reads all N ids (32 a thread, consecutive, in 16-byte loads issued together where idx is 16-byte aligned)
 *     and keeps its hits in shared memory in increasing i (a block scan of the threads' hit counts): i (16 bits where
 *     N <= 65536) and rr, its row in the block (8 bits); each row's hits counted (shared integer atomics: exact);
 *  2. warp 0 scans the counts into the rows' segments and places the hits' i into them in list order
 *     (__match_any_sync over 32 hits at a time, a cursor a row): stable, so a segment holds its row's ids in order;
 *  3. warp w writes rows w, w + 8, ...: each the sum of its segment's dy rows in order (up to 4 vectors of 8 columns a
 *     lane, each hit's loads issued together), stored in 16-byte vectors.
 * A block with more than CAP hits (possible only when N > CAP) sums each row by a warp scanning all N ids (ballots, in
 * increasing i): the same bits, slower. R <= 256. */
template <bool SHORT>
struct hit_index {
  typedef int t;
};
template <>
struct hit_index<true> {
  typedef unsigned short t;
};
template <class TT, class TD, i64 N, i64 D, i64 V, int R, int CAP>
__device__ void embed_bwd_own(TT *dtable, const int *idx, const TD *dy, i64 row0) {
  constexpr int NT = 256, W = NT / 32, IPT = 32, CH = NT * IPT, NV = (int)(D / 8), VPL = (NV + 31) / 32,
                U = VPL < 4 ? VPL : 4, PER = (R + 31) / 32;
  static_assert(IPT == 32, "embed_bwd_own: a thread's hits in a word");
  static_assert(R <= 256, "embed_bwd_own: a row in the block in a byte");
  typedef typename hit_index<N <= 65536>::t IX; /* 5 bytes a hit in shared memory (N > 65536: 9) */
  __shared__ IX list_i[CAP], grp[CAP];
  __shared__ unsigned char list_r[CAP];
  __shared__ int cnt[R], seg[R + 1], wsum[W];
  const int t = (int)threadIdx.x, lane = t & 31, w = t >> 5;
  const i64 lo = (i64)blockIdx.x * R;
  const int nr = (int)(V - lo < R ? V - lo : R);
  const bool al = ((unsigned long long)idx & 15) == 0;
  for (int r = t; r < R; r += NT) cnt[r] = 0;
  __syncthreads();
  int tot = 0; /* hits so far (every thread the same) */
  for (i64 base = 0; base < N; base += CH) {
    const i64 i0 = base + (i64)t * IPT;
    int rr[IPT];
    if (al && i0 + IPT <= N) { /* all IPT / 4 loads issued, then the tests */
#pragma unroll
      for (int q = 0; q < IPT; q += 4) {
        const u32x4 x4 = *(const u32x4 *)(idx + i0 + q);
        rr[q] = (int)x4.x, rr[q + 1] = (int)x4.y, rr[q + 2] = (int)x4.z, rr[q + 3] = (int)x4.w;
      }
    } else {
#pragma unroll
      for (int q = 0; q < IPT; q++) rr[q] = i0 + q < N ? idx[i0 + q] : 0;
    }
    unsigned hm = 0; /* the hits, bit q: one register (a hit's row is read again below, from L1) */
#pragma unroll
    for (int q = 0; q < IPT; q++) {
      const i64 r = (i64)rr[q] - row0 - lo;
      hm |= (unsigned)(i0 + q < N && r >= 0 && r < nr) << q;
    }
    const int c = __popc(hm);
    int s = c; /* the warp's inclusive scan, then the warps before */
    for (int d = 1; d < 32; d <<= 1) {
      const int u = __shfl_up_sync(0xffffffffu, s, d);
      if (lane >= d) s += u;
    }
    if (lane == 31) wsum[w] = s;
    __syncthreads();
    int off = tot + s - c, all = 0;
#pragma unroll
    for (int k = 0; k < W; k++) {
      off += k < w ? wsum[k] : 0;
      all += wsum[k];
    }
    for (unsigned m = hm; m; m &= m - 1u, off++) { /* in increasing i */
      const int q = __ffs((int)m) - 1, r = (int)((i64)idx[i0 + q] - row0 - lo);
      if (off < CAP) list_i[off] = (IX)(i0 + q), list_r[off] = (unsigned char)r;
      atomicAdd(&cnt[r], 1);
    }
    tot += all;
    __syncthreads(); /* wsum free again */
  }
  const bool over = tot > CAP;
  if (!over && w == 0) {
    int loc = 0; /* lane: rows [PER lane, PER lane + PER) */
#pragma unroll
    for (int k = 0; k < PER; k++) loc += PER * lane + k < R ? cnt[PER * lane + k] : 0;
    int s = loc;
    for (int d = 1; d < 32; d <<= 1) {
      const int u = __shfl_up_sync(0xffffffffu, s, d);
      if (lane >= d) s += u;
    }
    int ex = s - loc;
#pragma unroll
    for (int k = 0; k < PER; k++) {
      const int r = PER * lane + k;
      if (r < R) {
        const int n = cnt[r];
        seg[r] = ex, cnt[r] = ex; /* cnt: each row's cursor from here */
        ex += n;
      }
    }
    if (lane == 31) seg[R] = s;
    __syncwarp();
    for (int e0 = 0; e0 < tot; e0 += 32) {
      const int e = e0 + lane, r = e < tot ? (int)list_r[e] : -1 - lane;
      const unsigned peers = __match_any_sync(0xffffffffu, r);
      const int rank = __popc(peers & ((1u << lane) - 1u)), n = __popc(peers);
      if (e < tot) grp[cnt[r] + rank] = list_i[e];
      __syncwarp();
      if (e < tot && rank == n - 1) cnt[r] += n;
      __syncwarp();
    }
  }
  __syncthreads();
  for (int r = w; r < nr; r += W) {
    TT *out = dtable + (lo + r) * D;
    const int s = over ? 0 : seg[r], e = over ? 0 : seg[r + 1];
    for (int v0 = 0; v0 < NV; v0 += 32 * U) {
      float acc[U][8];
#pragma unroll
      for (int u = 0; u < U; u++)
#pragma unroll
        for (int k = 0; k < 8; k++) acc[u][k] = 0.0f;
      auto add = [&](i64 i) {
        float v[U][8];
#pragma unroll
        for (int u = 0; u < U; u++)
          if (v0 + 32 * u + lane < NV) ld8(v[u], dy + i * D + 8 * (v0 + 32 * u + lane));
#pragma unroll
        for (int u = 0; u < U; u++)
          if (v0 + 32 * u + lane < NV)
#pragma unroll
            for (int k = 0; k < 8; k++) acc[u][k] += v[u][k];
      };
      if (!over) {
#pragma unroll 1
        for (int q = s; q < e; q++) add((i64)grp[q]);
      } else {
        for (i64 b0 = 0; b0 < N; b0 += 32) {
          const i64 i = b0 + lane;
          unsigned m = __ballot_sync(0xffffffffu, i < N && (i64)idx[i] - row0 - lo == r);
          while (m) {
            const int j = __ffs((int)m) - 1;
            m &= m - 1u;
            add(b0 + j);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < U; u++)
        if (v0 + 32 * u + lane < NV) st8(out + 8 * (v0 + 32 * u + lane), acc[u]);
    }
  }
}

} // namespace sk

#endif
