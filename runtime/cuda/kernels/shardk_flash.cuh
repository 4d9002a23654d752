/* runtime/cuda/kernels/shardk_flash.cuh — attention on tensor cores (included by shardk.cuh).
 *
 * FlashAttention-2-style kernels for bf16 with a head dim that is a multiple of 16 (<= 128),
 * on mma.sync.m16n8k16 (bf16 inputs, fp32 accumulation; sm_80 and later). The layouts and the
 * semantics are those of shardk_attn.cuh's CUDA-core kernels (which stay for f32 and other head
 * dims): q/o [B, S, H*HD], k/v [B, S, KV*HD], lse f32 [B, H, S]; query head h reads kv head
 * h / (H/KV).
 *
 * Each block is 4 warps; each warp owns 16 rows (queries, or keys in dK/dV) and keeps them as
 * mma A fragments in registers for the whole kernel. The other operand streams through shared
 * memory in tiles of BT rows, stored row-major (rows padded by 8 elements: the fragment loads of
 * 8 rows x 4 column pairs fall in 32 different banks) and, where a product needs it, transposed.
 * A product's fp32 accumulators (the C fragment) are the next product's A fragment once rounded
 * to bf16 (P for P V, dS for dS K), as in FlashAttention-2: scores never reach shared memory.
 * Softmax runs in base 2 (exp2f of scores times scale * log2 e). Causal: key tiles past a query
 * block's last row are skipped, masks are applied only on the tiles that cross the diagonal or the
 * end of the sequence, and the heaviest query blocks are launched first.
 *
 * Backward without atomics (the same bits every run): D = rowsum(dO o O) first
 * (sdpa_bwd_dot), then dK and dV by key blocks (looping over every query head of the group and
 * every query tile), then dQ by query blocks (recomputing P and dP: 7 products instead of 5,
 * the price of determinism).
 */
#ifndef SHARDK_FLASH_CUH
#define SHARDK_FLASH_CUH

namespace sk {

typedef unsigned u32;
struct __align__(16) u32x4 {
  u32 x, y, z, w;
};

/* d += A b on the tensor cores (one warp; PTX's fragment layout, see sk_emu.h) */
__device__ __forceinline__ void mma16816(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
#ifdef SK_EMU
  sk_emu::mma_bf16_16816(d, a, b);
#else
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* two floats rounded to bf16 (nearest, ties to even), lo in the low half */
__device__ __forceinline__ u32 pack2(float lo, float hi) {
  return (u32)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) | ((u32)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}
__device__ __forceinline__ u32 ld2(const bf16 *p) { return *(const u32 *)p; }

/* A fragments of 16 rows x HD (row r at src + r * rs; rows at or past n read as zeros), lane 4g + t:
 * frag[c] = rows g, g+8 at columns 16c + 2t (+1) and 16c + 8 + 2t (+1). */
template <int HD>
__device__ __forceinline__ void frag_rows(u32 (&f)[HD / 16][4], const bf16 *src, i64 rs, i64 r0, i64 n) {
  int lane = (int)threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  bool a = r0 + g < n, b = r0 + g + 8 < n;
  const bf16 *ra = src + (r0 + g) * rs, *rb = src + (r0 + g + 8) * rs;
#pragma unroll
  for (int c = 0; c < HD / 16; c++) {
    int col = 16 * c + 2 * t;
    f[c][0] = a ? ld2(ra + col) : 0u;
    f[c][1] = b ? ld2(rb + col) : 0u;
    f[c][2] = a ? ld2(ra + col + 8) : 0u;
    f[c][3] = b ? ld2(rb + col + 8) : 0u;
  }
}

/* Rows [r0, r0 + R) x HD of a bf16 matrix (row r at src + r * rs; rows at or past n as zeros) into
 * shared memory: row-major into rows[R][HD + 8] and/or transposed into cols[HD][R + 8] (either may
 * be null). 16-byte loads; NT threads. */
template <int R, int HD, int NT>
__device__ __forceinline__ void tile_load(bf16 *rows, bf16 *cols, const bf16 *src, i64 rs, i64 r0, i64 n) {
  constexpr int C8 = HD / 8;
  for (int i = (int)threadIdx.x; i < R * C8; i += NT) {
    int r = i / C8, c = (i % C8) * 8;
    u32x4 w = {0u, 0u, 0u, 0u};
    if (r0 + r < n) w = *(const u32x4 *)(src + (r0 + r) * rs + c);
    if (rows) *(u32x4 *)(rows + r * (HD + 8) + c) = w;
    if (cols) {
      const bf16 *e = (const bf16 *)&w;
#pragma unroll
      for (int j = 0; j < 8; j++) cols[(c + j) * (R + 8) + r] = e[j];
    }
  }
}

/* The B fragment of columns [n0, n0 + 8) and k rows [16 kc, 16 kc + 16) of a product whose B^T is
 * stored row-major with leading dimension LD (row = B's column): lane 4g + t reads row n0 + g. */
template <int LD>
__device__ __forceinline__ void frag_b(u32 (&b)[2], const bf16 *m, int n0, int kc) {
  int lane = (int)threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const bf16 *p = m + (n0 + g) * LD + 16 * kc + 2 * t;
  b[0] = ld2(p);
  b[1] = ld2(p + 8);
}

/* acc[N/8][4] += A (16 x 16 KC) times the B whose B^T is m (rows = N columns, LD), k chunks [0, KC) */
template <int N, int KC, int LD>
__device__ __forceinline__ void mma_rows(float (&acc)[N / 8][4], const u32 (&a)[KC][4], const bf16 *m) {
#pragma unroll
  for (int kc = 0; kc < KC; kc++)
#pragma unroll
    for (int nt = 0; nt < N / 8; nt++) {
      u32 b[2];
      frag_b<LD>(b, m, nt * 8, kc);
      mma16816(acc[nt], a[kc], b);
    }
}

/* C fragments (16 x N fp32) as bf16 A fragments of a 16 x N left operand */
template <int N>
__device__ __forceinline__ void c_to_a(u32 (&a)[N / 16][4], const float (&c)[N / 8][4]) {
#pragma unroll
  for (int k = 0; k < N / 16; k++) {
    a[k][0] = pack2(c[2 * k][0], c[2 * k][1]);
    a[k][1] = pack2(c[2 * k][2], c[2 * k][3]);
    a[k][2] = pack2(c[2 * k + 1][0], c[2 * k + 1][1]);
    a[k][3] = pack2(c[2 * k + 1][2], c[2 * k + 1][3]);
  }
}

template <int N>
__device__ __forceinline__ void zero_acc(float (&c)[N / 8][4]) {
#pragma unroll
  for (int i = 0; i < N / 8; i++) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.0f;
}

/* Stores a 16 x HD C fragment (rows r0 + g, r0 + g + 8 below n) times s as bf16 at dst + r * rs. */
template <int HD>
__device__ __forceinline__ void store_rows(bf16 *dst, i64 rs, i64 r0, i64 n, const float (&c)[HD / 8][4], float s0,
                                           float s1) {
  int lane = (int)threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < HD / 8; nt++) {
    int col = nt * 8 + 2 * t;
    if (r0 + g < n) *(u32 *)(dst + (r0 + g) * rs + col) = pack2(c[nt][0] * s0, c[nt][1] * s0);
    if (r0 + g + 8 < n) *(u32 *)(dst + (r0 + g + 8) * rs + col) = pack2(c[nt][2] * s1, c[nt][3] * s1);
  }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxv(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxv(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* Forward: grid (ceil(S/64), H, B), block 128. BK keys per tile. */
template <i64 S, int H, int KV, int HD, bool CAUSAL, int BK>
__device__ void flash_fwd(bf16 *o, float *lse, const bf16 *q, const bf16 *k, const bf16 *v) {
  constexpr int BQ = 64, NT = 128, KC = HD / 16;
  __align__(16) __shared__ bf16 ks[BK * (HD + 8)];
  __align__(16) __shared__ bf16 vt[HD * (BK + 8)];
  const float c2 = (float)(1.4426950408889634 / sqrt((double)HD)); /* scale * log2 e */
  int lane = (int)threadIdx.x & 31, w = (int)threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  i64 b = blockIdx.z;
  int h = (int)blockIdx.y, kvh = h / (H / KV);
  i64 qb = CAUSAL ? (i64)gridDim.x - 1 - blockIdx.x : (i64)blockIdx.x, q0 = qb * BQ, r0 = q0 + 16 * w;
  const i64 qs = (i64)H * HD, kvs = (i64)KV * HD;
  u32 qa[KC][4];
  frag_rows<HD>(qa, q + b * S * qs + (i64)h * HD, qs, r0, S);
  float acc[HD / 8][4];
  zero_acc<HD>(acc);
  float m0 = ninf(), m1 = ninf(), l0 = 0.0f, l1 = 0.0f;
  const bf16 *kb = k + b * S * kvs + (i64)kvh * HD, *vb = v + b * S * kvs + (i64)kvh * HD;
  const i64 kend = CAUSAL ? (q0 + BQ < S ? q0 + BQ : S) : S;
  for (i64 k0 = 0; k0 < kend; k0 += BK) {
    tile_load<BK, HD, NT>(ks, nullptr, kb, kvs, k0, S);
    tile_load<BK, HD, NT>(nullptr, vt, vb, kvs, k0, S);
    __syncthreads();
    float s[BK / 8][4];
    zero_acc<BK>(s);
    mma_rows<BK, KC, HD + 8>(s, qa, ks);
    bool edge = k0 + BK > S || (CAUSAL && k0 + BK - 1 > r0);
#pragma unroll
    for (int nt = 0; nt < BK / 8; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float x = s[nt][e] * c2;
        if (edge) {
          i64 key = k0 + nt * 8 + 2 * t + (e & 1), row = r0 + g + (e >= 2 ? 8 : 0);
          if (key >= S || (CAUSAL && key > row)) x = ninf();
        }
        s[nt][e] = x;
      }
    float x0 = ninf(), x1 = ninf();
#pragma unroll
    for (int nt = 0; nt < BK / 8; nt++) {
      x0 = fmaxv(x0, fmaxv(s[nt][0], s[nt][1]));
      x1 = fmaxv(x1, fmaxv(s[nt][2], s[nt][3]));
    }
    float n0 = fmaxv(m0, quad_max(x0)), n1 = fmaxv(m1, quad_max(x1));
    float u0 = n0 == ninf() ? 0.0f : n0, u1 = n1 == ninf() ? 0.0f : n1; /* a row masked so far */
    float f0 = exp2f(m0 - u0), f1 = exp2f(m1 - u1);
    m0 = n0, m1 = n1;
    l0 *= f0, l1 *= f1;
#pragma unroll
    for (int nt = 0; nt < HD / 8; nt++) acc[nt][0] *= f0, acc[nt][1] *= f0, acc[nt][2] *= f1, acc[nt][3] *= f1;
#pragma unroll
    for (int nt = 0; nt < BK / 8; nt++) {
      s[nt][0] = exp2f(s[nt][0] - u0), s[nt][1] = exp2f(s[nt][1] - u0);
      s[nt][2] = exp2f(s[nt][2] - u1), s[nt][3] = exp2f(s[nt][3] - u1);
      l0 += s[nt][0] + s[nt][1], l1 += s[nt][2] + s[nt][3];
    }
    u32 pa[BK / 16][4];
    c_to_a<BK>(pa, s);
    mma_rows<HD, BK / 16, BK + 8>(acc, pa, vt);
    __syncthreads();
  }
  l0 = quad_sum(l0), l1 = quad_sum(l1);
  store_rows<HD>(o + b * S * qs + (i64)h * HD, qs, r0, S, acc, 1.0f / l0, 1.0f / l1);
  if (t == 0) {
    const float ln2 = 0.6931471805599453f;
    float *lb = lse + ((i64)b * H + h) * S;
    if (r0 + g < S) lb[r0 + g] = m0 * ln2 + logf(l0);
    if (r0 + g + 8 < S) lb[r0 + g + 8] = m1 * ln2 + logf(l1);
  }
}

/* The probabilities and dS of a 16 x N block of scores s (fp32 C fragments, raw dot products) for
 * dot products dp: p = exp2(s c2 - lse2) (0 where masked), ds = p (dp - D). row(e) / col(nt, e)
 * give the query and key of element e of column tile nt; lse2 and D by query. */
template <int N, bool CAUSAL, class QOF, class KOF, class LSE, class DD>
__device__ __forceinline__ void p_and_ds(float (&s)[N / 8][4], float (&dp)[N / 8][4], float c2, bool edge, i64 S,
                                         QOF query, KOF key, LSE lse2, DD dd) {
#pragma unroll
  for (int nt = 0; nt < N / 8; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      i64 qi = query(nt, e), kj = key(nt, e);
      float p = exp2f(s[nt][e] * c2 - lse2(nt, e));
      if (edge && (qi >= S || kj >= S || (CAUSAL && kj > qi))) p = 0.0f;
      s[nt][e] = p;
      dp[nt][e] = p * (dp[nt][e] - dd(nt, e));
    }
}

/* dK and dV: grid (ceil(S/64), KV, B), block 128; BQT queries per tile. */
template <i64 S, int H, int KV, int HD, bool CAUSAL, int BQT>
__device__ void flash_bwd_kv(bf16 *dk, bf16 *dv, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                             const float *Dd, const bf16 *dout) {
  constexpr int BKV = 64, NT = 128, KC = HD / 16, G = H / KV;
  __align__(16) __shared__ bf16 qs[BQT * (HD + 8)];
  __align__(16) __shared__ bf16 dos[BQT * (HD + 8)];
  __align__(16) __shared__ bf16 qt[HD * (BQT + 8)];
  __align__(16) __shared__ bf16 dot[HD * (BQT + 8)];
  __shared__ float ls[BQT], ds[BQT];
  const float c2 = (float)(1.4426950408889634 / sqrt((double)HD)), log2e = 1.4426950408889634f;
  int lane = (int)threadIdx.x & 31, w = (int)threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  i64 b = blockIdx.z;
  int kvh = (int)blockIdx.y;
  i64 kb0 = (CAUSAL ? (i64)gridDim.x - 1 - blockIdx.x : (i64)blockIdx.x) * BKV, r0 = kb0 + 16 * w;
  const i64 qstr = (i64)H * HD, kvs = (i64)KV * HD;
  u32 ka[KC][4], va[KC][4];
  frag_rows<HD>(ka, k + b * S * kvs + (i64)kvh * HD, kvs, r0, S);
  frag_rows<HD>(va, v + b * S * kvs + (i64)kvh * HD, kvs, r0, S);
  float dka[HD / 8][4], dva[HD / 8][4];
  zero_acc<HD>(dka);
  zero_acc<HD>(dva);
  for (int gi = 0; gi < G; gi++) {
    int h = kvh * G + gi;
    const bf16 *qb = q + b * S * qstr + (i64)h * HD, *ob = dout + b * S * qstr + (i64)h * HD;
    const float *lb = lse + ((i64)b * H + h) * S, *db = Dd + ((i64)b * H + h) * S;
    for (i64 qt0 = CAUSAL ? kb0 / BQT * BQT : 0; qt0 < S; qt0 += BQT) {
      tile_load<BQT, HD, NT>(qs, qt, qb, qstr, qt0, S);
      tile_load<BQT, HD, NT>(dos, dot, ob, qstr, qt0, S);
      for (int i = (int)threadIdx.x; i < BQT; i += NT) {
        ls[i] = qt0 + i < S ? lb[qt0 + i] * log2e : 0.0f;
        ds[i] = qt0 + i < S ? db[qt0 + i] : 0.0f;
      }
      __syncthreads();
      float s[BQT / 8][4], dp[BQT / 8][4]; /* S^T and dP^T: rows are keys, columns queries */
      zero_acc<BQT>(s);
      zero_acc<BQT>(dp);
      mma_rows<BQT, KC, HD + 8>(s, ka, qs);
      mma_rows<BQT, KC, HD + 8>(dp, va, dos);
      bool edge = qt0 + BQT > S || r0 + 16 > S || (CAUSAL && qt0 < r0 + 15);
      p_and_ds<BQT, CAUSAL>(
          s, dp, c2, edge, S, [&](int nt, int e) { return qt0 + nt * 8 + 2 * t + (e & 1); },
          [&](int, int e) { return r0 + g + (e >= 2 ? 8 : 0); },
          [&](int nt, int e) { return ls[nt * 8 + 2 * t + (e & 1)]; },
          [&](int nt, int e) { return ds[nt * 8 + 2 * t + (e & 1)]; });
      u32 pa[BQT / 16][4], sa[BQT / 16][4];
      c_to_a<BQT>(pa, s);
      c_to_a<BQT>(sa, dp);
      mma_rows<HD, BQT / 16, BQT + 8>(dva, pa, dot);
      mma_rows<HD, BQT / 16, BQT + 8>(dka, sa, qt);
      __syncthreads();
    }
  }
  const float scale = (float)(1.0 / sqrt((double)HD));
  store_rows<HD>(dk + b * S * kvs + (i64)kvh * HD, kvs, r0, S, dka, scale, scale);
  store_rows<HD>(dv + b * S * kvs + (i64)kvh * HD, kvs, r0, S, dva, 1.0f, 1.0f);
}

/* dQ: grid (ceil(S/64), H, B), block 128; BK keys per tile. */
template <i64 S, int H, int KV, int HD, bool CAUSAL, int BK>
__device__ void flash_bwd_q(bf16 *dq, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse, const float *Dd,
                            const bf16 *dout) {
  constexpr int BQ = 64, NT = 128, KC = HD / 16;
  __align__(16) __shared__ bf16 ks[BK * (HD + 8)];
  __align__(16) __shared__ bf16 vs[BK * (HD + 8)];
  __align__(16) __shared__ bf16 kt[HD * (BK + 8)];
  const float c2 = (float)(1.4426950408889634 / sqrt((double)HD)), log2e = 1.4426950408889634f;
  int lane = (int)threadIdx.x & 31, w = (int)threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  i64 b = blockIdx.z;
  int h = (int)blockIdx.y, kvh = h / (H / KV);
  i64 q0 = (CAUSAL ? (i64)gridDim.x - 1 - blockIdx.x : (i64)blockIdx.x) * BQ, r0 = q0 + 16 * w;
  const i64 qstr = (i64)H * HD, kvs = (i64)KV * HD;
  u32 qa[KC][4], oa[KC][4];
  frag_rows<HD>(qa, q + b * S * qstr + (i64)h * HD, qstr, r0, S);
  frag_rows<HD>(oa, dout + b * S * qstr + (i64)h * HD, qstr, r0, S);
  const float *lb = lse + ((i64)b * H + h) * S, *db = Dd + ((i64)b * H + h) * S;
  float la = r0 + g < S ? lb[r0 + g] * log2e : 0.0f, lc = r0 + g + 8 < S ? lb[r0 + g + 8] * log2e : 0.0f;
  float da = r0 + g < S ? db[r0 + g] : 0.0f, dc = r0 + g + 8 < S ? db[r0 + g + 8] : 0.0f;
  float acc[HD / 8][4];
  zero_acc<HD>(acc);
  const bf16 *kb = k + b * S * kvs + (i64)kvh * HD, *vb = v + b * S * kvs + (i64)kvh * HD;
  const i64 kend = CAUSAL ? (q0 + BQ < S ? q0 + BQ : S) : S;
  for (i64 k0 = 0; k0 < kend; k0 += BK) {
    tile_load<BK, HD, NT>(ks, kt, kb, kvs, k0, S);
    tile_load<BK, HD, NT>(vs, nullptr, vb, kvs, k0, S);
    __syncthreads();
    float s[BK / 8][4], dp[BK / 8][4];
    zero_acc<BK>(s);
    zero_acc<BK>(dp);
    mma_rows<BK, KC, HD + 8>(s, qa, ks);
    mma_rows<BK, KC, HD + 8>(dp, oa, vs);
    bool edge = k0 + BK > S || r0 + 16 > S || (CAUSAL && k0 + BK - 1 > r0);
    p_and_ds<BK, CAUSAL>(
        s, dp, c2, edge, S, [&](int, int e) { return r0 + g + (e >= 2 ? 8 : 0); },
        [&](int nt, int e) { return k0 + nt * 8 + 2 * t + (e & 1); }, [&](int, int e) { return e >= 2 ? lc : la; },
        [&](int, int e) { return e >= 2 ? dc : da; });
    u32 sa[BK / 16][4];
    c_to_a<BK>(sa, dp);
    mma_rows<HD, BK / 16, BK + 8>(acc, sa, kt);
    __syncthreads();
  }
  const float scale = (float)(1.0 / sqrt((double)HD));
  store_rows<HD>(dq + b * S * qstr + (i64)h * HD, qstr, r0, S, acc, scale, scale);
}

} // namespace sk

#endif
