/* runtime/cuda/kernels/shardk_flash.cuh — attention on tensor cores (included by shardk.cuh).
 *
 * FlashAttention-2-style kernels for bf16 with a head dim that is a multiple of 16 (<= 128),
 * on mma.sync.m16n8k16 (bf16 inputs, fp32 accumulation; sm_80 and later). The layouts and the
 * semantics are those of shardk_attn.cuh's CUDA-core kernels (which stay for f32 and other head
 * dims): q/o [B, S, H*HD], k/v [B, S, KV*HD], lse f32 [B, H, S]; query head h reads kv head
 * h / (H/KV).
 *
 * Each block is W warps; each warp owns 16 MT rows (queries, or keys in dK/dV: MT m-tiles) and
 * keeps them as mma A fragments in registers for the whole kernel. The other operand streams
 * through shared memory in tiles of BT rows, copied by cp.async into two buffers (the next tile's
 * copy, issued right after the one barrier a tile, runs under this tile's products; the dK/dV
 * kernel's lse and D of the tile's queries come by cp.async too), stored row-major with rows padded by 8 elements (the
 * 8 rows of an ldmatrix fall in different banks); ldmatrix reads the B fragments, .trans where the
 * product needs the tile transposed, so no transposed copy is kept. A product's fp32 accumulators
 * (the C fragment) are the next product's A fragment once rounded to bf16 (P for P V, dS for
 * dS K), as in FlashAttention-2: scores never reach shared memory. Softmax runs in base 2
 * (ex2.approx of raw scores times scale * log2 e, one FFMA). The tile configuration (MT, W, BT per
 * kernel) is chosen by codegen/cuda_flash_cfg.c; the kernel benchmark times the candidates
 * (SHARDK_ATTN_SWEEP=1 cuda_kernels_gpu).
 *
 * Causal: key tiles past a block's (and a warp's) last row are skipped; each tile's body is
 * instantiated twice, with the masks (the tiles that cross the diagonal or the end of the sequence)
 * and without (every other tile: no index arithmetic at all; on sm_90 the forward's unmasked tile
 * at MT 2, BT 64 is 586 instructions a warp, 128 of them HMMA, against 1076 with the masks
 * everywhere); block indices are 32-bit; blocks are numbered tile-major so that the heaviest tiles of
 * every head start first and the light ones fill the tail. Measured on the H200 before these changes
 * (main at 1b0df5e, B 8, T 1024, H 12, hd 64, causal): forward 112 TFLOP/s, backward 108.
 *
 * Backward without atomics (the same bits every run): dQ by query blocks first, which also
 * computes D = rowsum(dO o O) of its rows and stores it, then dK and dV by key blocks (looping over
 * every query head of the group and every query tile; recomputing P and dP: 7 products instead of
 * 5, the price of determinism).
 */
#ifndef SHARDK_FLASH_CUH
#define SHARDK_FLASH_CUH

namespace sk {


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

/* ex2 (2^x on the special-function unit): shardk.cuh */

__device__ __forceinline__ u32 ld2(const bf16 *p) { return *(const u32 *)p; }

/* A place in shared memory: a 32-bit shared-window address on the GPU (what ldmatrix takes; offsets
 * fold into the instruction), a pointer on the emulator. */
struct SmemRef {
#ifdef SK_EMU
  const bf16 *p;
  __device__ __forceinline__ SmemRef(const bf16 *q) : p(q) {}
  __device__ __forceinline__ SmemRef at(int elems) const { return SmemRef(p + elems); }
#else
  unsigned a;
  __device__ __forceinline__ SmemRef(const bf16 *q) : a((unsigned)__cvta_generic_to_shared(q)) {}
  __device__ __forceinline__ SmemRef(unsigned x, int) : a(x) {}
  __device__ __forceinline__ SmemRef at(int elems) const { return SmemRef(a + 2u * (unsigned)elems, 0); }
#endif
};

/* ldmatrix.x4 from shared memory: lanes 8i..8i+7 give the rows of 8 x 8 matrix i, r[i] its fragment
 * (row g, columns 2t, 2t+1; with T, transposed: rows 2t, 2t+1 of column g). */
template <bool T>
__device__ __forceinline__ void ldsm4(u32 (&r)[4], SmemRef m) {
#ifdef SK_EMU
  sk_emu::ldmatrix_x4(r, m.p, T);
#else
  unsigned a = m.a;
  if (T)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#endif
}

/* cp16, cp4, cp_commit, cp_wait (cp.async): shardk.cuh */

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

/* Starts copying rows [r0, r0 + R) x HD of a bf16 matrix (row r at src + r * rs; rows at or past n
 * as zeros) into dst[R][HD + 8] with cp.async (the caller commits and waits). */
template <int R, int HD, int NT>
__device__ __forceinline__ void tile_async(bf16 *dst, const bf16 *src, i64 rs, i64 r0, i64 n) {
  constexpr int C8 = HD / 8;
  for (int i = (int)threadIdx.x; i < R * C8; i += NT) {
    int r = i / C8, c = (i % C8) * 8;
    bool ok = r0 + r < n;
    cp16(dst + r * (HD + 8) + c, src + (ok ? r0 + r : n - 1) * rs + c, ok);
  }
}

/* Starts copying key rows [k0, k0 + BK) of K and of V into kdst and vdst (one cp.async group). */
template <int BK, int HD, int NT>
__device__ __forceinline__ void kv_tiles_async(bf16 *kdst, bf16 *vdst, const bf16 *kb, const bf16 *vb, i64 kvs, i64 k0,
                                               i64 S) {
  tile_async<BK, HD, NT>(kdst, kb, kvs, k0, S);
  tile_async<BK, HD, NT>(vdst, vb, kvs, k0, S);
  cp_commit();
}
/* Waits for this thread's copies (the current tile's: the only ones in flight), then for the whole block:
 * the tile is in shared memory for every warp, and every warp is done with the previous tile, whose
 * buffer the next tile's copy may now take (one barrier a tile). */
__device__ __forceinline__ void tiles_ready() {
  cp_wait<0>();
  __syncthreads();
}

/* acc[mt][N/8][4] += A[mt] (16 x 16 KC each) times B (16 KC x N) read from shared memory m with
 * leading dimension LD: B^T row-major (m[n][k], TR false) or B row-major (m[k][n], TR true). One
 * ldmatrix.x4 gives the B fragments of two column tiles, used by every m-tile. */
template <int MT, int N, int KC, int LD, bool TR>
__device__ __forceinline__ void mma_smem(float (&acc)[MT][N / 8][4], const u32 (&a)[MT][KC][4], const bf16 *m) {
  int lane = (int)threadIdx.x & 31, r8 = lane & 7, hi = (lane >> 3) & 1, q = lane >> 4;
  const SmemRef base(m + (TR ? (r8 + 8 * hi) * LD + 8 * q : (r8 + 8 * q) * LD + 8 * hi)); /* this lane's row */
#pragma unroll
  for (int kc = 0; kc < KC; kc++)
#pragma unroll
    for (int np = 0; np < N / 16; np++) {
      u32 r[4];
      if (TR)
        ldsm4<true>(r, base.at(16 * kc * LD + 16 * np));
      else
        ldsm4<false>(r, base.at(16 * np * LD + 16 * kc));
      u32 b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        mma16816(acc[mt][2 * np], a[mt][kc], b0);
        mma16816(acc[mt][2 * np + 1], a[mt][kc], b1);
      }
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

template <int MT, int N>
__device__ __forceinline__ void zero_acc(float (&c)[MT][N / 8][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int i = 0; i < N / 8; i++) c[mt][i][0] = c[mt][i][1] = c[mt][i][2] = c[mt][i][3] = 0.0f;
}

/* Stores a 16 x HD C fragment (rows r0 + g, r0 + g + 8 below n) times s0 / s1 as bf16 at dst + r * rs. */
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

__device__ __forceinline__ float fmx(float a, float b) { return fmaxf(a, b); } /* one FMNMX */

/* This block's (tile, head, batch) on a grid (tiles, heads, batch), numbered so that the tile varies
 * slowest: blocks start in that order, so with rev (causal forward and dQ: the last query tiles see
 * the most keys) or without (causal dK/dV: the first key tiles see the most queries) the heaviest
 * blocks of every head start first and the light ones fill the tail. */
struct FlashBlock {
  int t, h;
  i64 b;
};
__device__ __forceinline__ FlashBlock flash_block(bool rev) {
  unsigned per = gridDim.y * gridDim.z;
  unsigned lin = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned t = lin / per, rem = lin % per;
  FlashBlock r;
  r.t = (int)(rev ? gridDim.x - 1 - t : t);
  r.h = (int)(rem % gridDim.y);
  r.b = (i64)(rem / gridDim.y);
  return r;
}

/* One key tile of the forward for one warp: scores, online softmax (masked when MASK: keys at or past
 * S, and causal keys past the row), acc += P V. */
template <bool MASK, bool CAUSAL, int S, int HD, int BK, int MT, int LD>
__device__ __forceinline__ void fwd_tile(float (&acc)[MT][HD / 8][4], float (&m)[MT][2], float (&l)[MT][2],
                                         const u32 (&qa)[MT][HD / 16][4], const bf16 *ks, const bf16 *vs, int k0,
                                         int r0, float c2) {
  int lane = (int)threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float s[MT][BK / 8][4];
  zero_acc<MT, BK>(s);
  mma_smem<MT, BK, HD / 16, LD, false>(s, qa, ks);
  u32 pa[MT][BK / 16][4];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    if (MASK) { /* raw scores: the scale (> 0) is applied inside the exponent */
#pragma unroll
      for (int nt = 0; nt < BK / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          int key = k0 + nt * 8 + 2 * t + (e & 1), row = r0 + 16 * mt + g + (e >= 2 ? 8 : 0);
          if (key >= S || (CAUSAL && key > row)) s[mt][nt][e] = ninf();
        }
    }
    float x0 = fmx(s[mt][0][0], s[mt][0][1]), x1 = fmx(s[mt][0][2], s[mt][0][3]);
#pragma unroll
    for (int nt = 1; nt < BK / 8; nt++) {
      x0 = fmx(x0, fmx(s[mt][nt][0], s[mt][nt][1]));
      x1 = fmx(x1, fmx(s[mt][nt][2], s[mt][nt][3]));
    }
    float n0 = fmx(m[mt][0], quad_max(x0) * c2), n1 = fmx(m[mt][1], quad_max(x1) * c2);
    float u0 = n0, u1 = n1;
    if (MASK) u0 = n0 == ninf() ? 0.0f : n0, u1 = n1 == ninf() ? 0.0f : n1; /* a row masked so far */
    float f0 = ex2(m[mt][0] - u0), f1 = ex2(m[mt][1] - u1);
    m[mt][0] = n0, m[mt][1] = n1;
    l[mt][0] *= f0, l[mt][1] *= f1;
#pragma unroll
    for (int nt = 0; nt < HD / 8; nt++)
      acc[mt][nt][0] *= f0, acc[mt][nt][1] *= f0, acc[mt][nt][2] *= f1, acc[mt][nt][3] *= f1;
#pragma unroll
    for (int nt = 0; nt < BK / 8; nt++) {
      s[mt][nt][0] = ex2(fmaf(s[mt][nt][0], c2, -u0)), s[mt][nt][1] = ex2(fmaf(s[mt][nt][1], c2, -u0));
      s[mt][nt][2] = ex2(fmaf(s[mt][nt][2], c2, -u1)), s[mt][nt][3] = ex2(fmaf(s[mt][nt][3], c2, -u1));
      l[mt][0] += s[mt][nt][0] + s[mt][nt][1], l[mt][1] += s[mt][nt][2] + s[mt][nt][3];
    }
    c_to_a<BK>(pa[mt], s[mt]);
  }
  mma_smem<MT, HD, BK / 16, LD, true>(acc, pa, vs);
}

/* Forward: grid (ceil(S / BQ), H, B) with BQ = 16 MT W, block 32 W; each warp 16 MT query rows; K and V
 * tiles of BK keys double-buffered (the next tile's copy runs under this tile's products). */
template <i64 S_, int H, int KV, int HD, bool CAUSAL, int BK, int MT, int W>
__device__ void flash_fwd(bf16 *o, float *lse, const bf16 *q, const bf16 *k, const bf16 *v) {
  constexpr int S = (int)S_, BQ = 16 * MT * W, NT = 32 * W, KC = HD / 16, LD = HD + 8;
  static_assert(4 * BK * LD * 2 <= 48 * 1024, "flash_fwd: K and V tiles over 48 KiB of shared memory");
  __align__(16) __shared__ bf16 ks[2][BK * LD];
  __align__(16) __shared__ bf16 vs[2][BK * LD];
  const float c2 = (float)(1.4426950408889634 / sqrt((double)HD)) /* scale * log2 e */
#ifdef SK_TEST_WRONG_FWD /* a test's deliberately wrong candidate (emu.c, SHARDRT_EMU_WRONG_ATTN): twice the scale */
                   * (MT * 100000 + W * 1000 + BK == SK_TEST_WRONG_FWD ? 2.0f : 1.0f)
#endif
      ;
  int lane = (int)threadIdx.x & 31, w = (int)threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  FlashBlock fb = flash_block(CAUSAL);
  i64 b = fb.b;
  int h = fb.h, kvh = h / (H / KV);
  int q0 = fb.t * BQ, r0 = q0 + 16 * MT * w;
  const i64 qs = (i64)H * HD, kvs = (i64)KV * HD;
  u32 qa[MT][KC][4];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) frag_rows<HD>(qa[mt], q + b * S * qs + (i64)h * HD, qs, r0 + 16 * mt, S);
  float acc[MT][HD / 8][4], m[MT][2], l[MT][2];
  zero_acc<MT, HD>(acc);
#pragma unroll
  for (int mt = 0; mt < MT; mt++) m[mt][0] = m[mt][1] = ninf(), l[mt][0] = l[mt][1] = 0.0f;
  const bf16 *kb = k + b * S * kvs + (i64)kvh * HD, *vb = v + b * S * kvs + (i64)kvh * HD;
  const int kend = CAUSAL ? (q0 + BQ < S ? q0 + BQ : S) : S;
  const int ntiles = (kend + BK - 1) / BK;
  kv_tiles_async<BK, HD, NT>(ks[0], vs[0], kb, vb, kvs, 0, S);
  for (int it = 0; it < ntiles; it++) {
    const int k0 = it * BK;
    tiles_ready();
    if (it + 1 < ntiles) kv_tiles_async<BK, HD, NT>(ks[(it + 1) & 1], vs[(it + 1) & 1], kb, vb, kvs, k0 + BK, S);
    if (!CAUSAL || k0 <= r0 + 16 * MT - 1) { /* else every key of the tile is past this warp's rows */
      if (k0 + BK > S || (CAUSAL && k0 + BK - 1 > r0))
        fwd_tile<true, CAUSAL, S, HD, BK, MT, LD>(acc, m, l, qa, ks[it & 1], vs[it & 1], k0, r0, c2);
      else
        fwd_tile<false, CAUSAL, S, HD, BK, MT, LD>(acc, m, l, qa, ks[it & 1], vs[it & 1], k0, r0, c2);
    }
  }
  const float ln2 = 0.6931471805599453f;
  float *lb = lse + ((i64)b * H + h) * S;
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    float l0 = quad_sum(l[mt][0]), l1 = quad_sum(l[mt][1]);
    int rm = r0 + 16 * mt;
    store_rows<HD>(o + b * S * qs + (i64)h * HD, qs, rm, S, acc[mt], 1.0f / l0, 1.0f / l1);
    if (t == 0) {
      if (rm + g < S) lb[rm + g] = m[mt][0] * ln2 + logf(l0);
      if (rm + g + 8 < S) lb[rm + g + 8] = m[mt][1] * ln2 + logf(l1);
    }
  }
}

/* The probabilities and dS of a 16 x N block of scores s (fp32 C fragments, raw dot products) for
 * dot products dp: p = exp2(s c2 - lse2) (0 where masked when MASK), ds = p (dp - D). query(nt, e) /
 * key(nt, e) give the query and key of element e of column tile nt; lse2 and D by query. */
template <int N, bool MASK, bool CAUSAL, int S, class QOF, class KOF, class LSE, class DD>
__device__ __forceinline__ void p_and_ds(float (&s)[N / 8][4], float (&dp)[N / 8][4], float c2, QOF query, KOF key,
                                         LSE lse2, DD dd) {
#pragma unroll
  for (int nt = 0; nt < N / 8; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      float p = ex2(fmaf(s[nt][e], c2, -lse2(nt, e)));
      if (MASK) {
        int qi = query(nt, e), kj = key(nt, e);
        if (qi >= S || kj >= S || (CAUSAL && kj > qi)) p = 0.0f;
      }
      s[nt][e] = p;
      dp[nt][e] = p * (dp[nt][e] - dd(nt, e));
    }
}

/* One query tile of dK / dV for one warp (16 MT keys from r0): S^T and dP^T, then P and dS, then
 * dV += P^T dO and dK += dS^T Q; lse (natural log) and D of the tile's queries in shared memory. */
template <bool MASK, bool CAUSAL, int S, int HD, int BQT, int MT, int LD>
__device__ __forceinline__ void kv_tile(float (&dka)[MT][HD / 8][4], float (&dva)[MT][HD / 8][4],
                                        const u32 (&ka)[MT][HD / 16][4], const u32 (&va)[MT][HD / 16][4],
                                        const bf16 *qs, const bf16 *dos, const float *ls, const float *ds, int qt0,
                                        int r0, float c2) {
  int lane = (int)threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const float log2e = 1.4426950408889634f; /* ls holds the natural-log lse */
  float s[MT][BQT / 8][4], dp[MT][BQT / 8][4]; /* S^T and dP^T: rows are keys, columns queries */
  zero_acc<MT, BQT>(s);
  zero_acc<MT, BQT>(dp);
  mma_smem<MT, BQT, HD / 16, LD, false>(s, ka, qs);
  mma_smem<MT, BQT, HD / 16, LD, false>(dp, va, dos);
  u32 pa[MT][BQT / 16][4], sa[MT][BQT / 16][4];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    int rm = r0 + 16 * mt;
    p_and_ds<BQT, MASK, CAUSAL, S>(
        s[mt], dp[mt], c2, [&](int nt, int e) { return qt0 + nt * 8 + 2 * t + (e & 1); },
        [&](int, int e) { return rm + g + (e >= 2 ? 8 : 0); },
        [&](int nt, int e) { return ls[nt * 8 + 2 * t + (e & 1)] * log2e; },
        [&](int nt, int e) { return ds[nt * 8 + 2 * t + (e & 1)]; });
    c_to_a<BQT>(pa[mt], s[mt]);
    c_to_a<BQT>(sa[mt], dp[mt]);
  }
  mma_smem<MT, HD, BQT / 16, LD, true>(dva, pa, dos);
  mma_smem<MT, HD, BQT / 16, LD, true>(dka, sa, qs);
}

/* dK and dV: grid (ceil(S / BKV), KV, B) with BKV = 16 MT W, block 32 W, each warp 16 MT keys; Q and dO
 * tiles of BQT queries of every head of the group, double-buffered. */
template <i64 S_, int H, int KV, int HD, bool CAUSAL, int BQT, int MT, int W>
__device__ void flash_bwd_kv(bf16 *dk, bf16 *dv, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                             const float *Dd, const bf16 *dout) {
  constexpr int S = (int)S_, BKV = 16 * MT * W, NT = 32 * W, KC = HD / 16, G = H / KV, LD = HD + 8;
  static_assert(4 * BQT * LD * 2 + 16 * BQT <= 48 * 1024, "flash_bwd_kv: Q and dO tiles over 48 KiB of shared memory");
  __align__(16) __shared__ bf16 qs[2][BQT * LD];
  __align__(16) __shared__ bf16 dos[2][BQT * LD];
  __align__(16) __shared__ float ls[2][BQT], ds[2][BQT];
  const float c2 = (float)(1.4426950408889634 / sqrt((double)HD));
  int w = (int)threadIdx.x >> 5;
  FlashBlock fb = flash_block(false);
  i64 b = fb.b;
  int kvh = fb.h;
  int kb0 = fb.t * BKV, r0 = kb0 + 16 * MT * w;
  const i64 qstr = (i64)H * HD, kvs = (i64)KV * HD;
  u32 ka[MT][KC][4], va[MT][KC][4];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    frag_rows<HD>(ka[mt], k + b * S * kvs + (i64)kvh * HD, kvs, r0 + 16 * mt, S);
    frag_rows<HD>(va[mt], v + b * S * kvs + (i64)kvh * HD, kvs, r0 + 16 * mt, S);
  }
  float dka[MT][HD / 8][4], dva[MT][HD / 8][4];
  zero_acc<MT, HD>(dka);
  zero_acc<MT, HD>(dva);
  const int qstart = CAUSAL ? kb0 / BQT * BQT : 0;
  const int nqt = (S - qstart + BQT - 1) / BQT, ntiles = G * nqt;
  /* tile i: head kvh * G + i / nqt, queries from qstart + (i % nqt) * BQT */
  auto issue = [&](int i) {
    int h = kvh * G + i / nqt, buf = i & 1;
    int qt0 = qstart + (i % nqt) * BQT;
    tile_async<BQT, HD, NT>(qs[buf], q + b * S * qstr + (i64)h * HD, qstr, qt0, S);
    tile_async<BQT, HD, NT>(dos[buf], dout + b * S * qstr + (i64)h * HD, qstr, qt0, S);
    const float *lb = lse + ((i64)b * H + h) * S, *db = Dd + ((i64)b * H + h) * S;
    for (int j = (int)threadIdx.x; j < BQT; j += NT) { /* asynchronous too: no warp waits on these loads */
      bool ok = qt0 + j < S;
      cp4(&ls[buf][j], lb + (ok ? qt0 + j : 0), ok);
      cp4(&ds[buf][j], db + (ok ? qt0 + j : 0), ok);
    }
    cp_commit();
  };
  issue(0);
  for (int it = 0; it < ntiles; it++) {
    const int buf = it & 1;
    const int qt0 = qstart + (it % nqt) * BQT;
    tiles_ready();
    if (it + 1 < ntiles) issue(it + 1);
    if (!CAUSAL || qt0 + BQT - 1 >= r0) { /* else every query of the tile is before this warp's keys */
      if (qt0 + BQT > S || r0 + 16 * MT > S || (CAUSAL && qt0 < r0 + 16 * MT - 1))
        kv_tile<true, CAUSAL, S, HD, BQT, MT, LD>(dka, dva, ka, va, qs[buf], dos[buf], ls[buf], ds[buf], qt0, r0, c2);
      else
        kv_tile<false, CAUSAL, S, HD, BQT, MT, LD>(dka, dva, ka, va, qs[buf], dos[buf], ls[buf], ds[buf], qt0, r0, c2);
    }
  }
  const float scale = (float)(1.0 / sqrt((double)HD));
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    store_rows<HD>(dk + b * S * kvs + (i64)kvh * HD, kvs, r0 + 16 * mt, S, dka[mt], scale, scale);
    store_rows<HD>(dv + b * S * kvs + (i64)kvh * HD, kvs, r0 + 16 * mt, S, dva[mt], 1.0f, 1.0f);
  }
}

/* One key tile of dQ for one warp (16 MT queries from r0): S and dP, P and dS, acc += dS K. */
template <bool MASK, bool CAUSAL, int S, int HD, int BK, int MT, int LD>
__device__ __forceinline__ void q_tile(float (&acc)[MT][HD / 8][4], const u32 (&qa)[MT][HD / 16][4],
                                       const u32 (&oa)[MT][HD / 16][4], const float (&la)[MT][2],
                                       const float (&da)[MT][2], const bf16 *ks, const bf16 *vs, int k0, int r0,
                                       float c2) {
  int lane = (int)threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float s[MT][BK / 8][4], dp[MT][BK / 8][4];
  zero_acc<MT, BK>(s);
  zero_acc<MT, BK>(dp);
  mma_smem<MT, BK, HD / 16, LD, false>(s, qa, ks);
  mma_smem<MT, BK, HD / 16, LD, false>(dp, oa, vs);
  u32 sa[MT][BK / 16][4];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    int rm = r0 + 16 * mt;
    p_and_ds<BK, MASK, CAUSAL, S>(
        s[mt], dp[mt], c2, [&](int, int e) { return rm + g + (e >= 2 ? 8 : 0); },
        [&](int nt, int e) { return k0 + nt * 8 + 2 * t + (e & 1); }, [&](int, int e) { return la[mt][e >= 2]; },
        [&](int, int e) { return da[mt][e >= 2]; });
    c_to_a<BK>(sa[mt], dp[mt]);
  }
  mma_smem<MT, HD, BK / 16, LD, true>(acc, sa, ks);
}

/* The dot product of two rows' A fragments (16 rows x HD, bf16 pairs) for rows g (d0) and g + 8 (d1),
 * summed over the 4 lanes of each row: D = rowsum(dO o O). */
template <int HD>
__device__ __forceinline__ void frag_dot(float &d0, float &d1, const u32 (&x)[HD / 16][4], const u32 (&y)[HD / 16][4]) {
  d0 = 0.0f, d1 = 0.0f;
#pragma unroll
  for (int c = 0; c < HD / 16; c++)
#pragma unroll
    for (int i = 0; i < 4; i++) {
      float p = __int_as_float((int)(x[c][i] << 16)) * __int_as_float((int)(y[c][i] << 16)) +
                __int_as_float((int)(x[c][i] & 0xffff0000u)) * __int_as_float((int)(y[c][i] & 0xffff0000u));
      if (i & 1) d1 += p;
      else d0 += p;
    }
  d0 = quad_sum(d0), d1 = quad_sum(d1);
}

/* dQ: grid (ceil(S / BQ), H, B) with BQ = 16 MT W, block 32 W, each warp 16 MT queries; K and V tiles of
 * BK keys, double-buffered. It runs first: D = rowsum(dO o O) of its rows, which it stores in Dd for
 * flash_bwd_kv. */
template <i64 S_, int H, int KV, int HD, bool CAUSAL, int BK, int MT, int W>
__device__ void flash_bwd_q(bf16 *dq, float *Dd, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *o,
                            const float *lse, const bf16 *dout) {
  constexpr int S = (int)S_, BQ = 16 * MT * W, NT = 32 * W, KC = HD / 16, LD = HD + 8;
  static_assert(4 * BK * LD * 2 <= 48 * 1024, "flash_bwd_q: K and V tiles over 48 KiB of shared memory");
  __align__(16) __shared__ bf16 ks[2][BK * LD];
  __align__(16) __shared__ bf16 vs[2][BK * LD];
  const float c2 = (float)(1.4426950408889634 / sqrt((double)HD)), log2e = 1.4426950408889634f;
  int lane = (int)threadIdx.x & 31, w = (int)threadIdx.x >> 5, g = lane >> 2;
  FlashBlock fb = flash_block(CAUSAL);
  i64 b = fb.b;
  int h = fb.h, kvh = h / (H / KV);
  int q0 = fb.t * BQ, r0 = q0 + 16 * MT * w;
  const i64 qstr = (i64)H * HD, kvs = (i64)KV * HD;
  u32 qa[MT][KC][4], oa[MT][KC][4];
  const float *lb = lse + ((i64)b * H + h) * S;
  float *db = Dd + ((i64)b * H + h) * S;
  float la[MT][2], da[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    int rm = r0 + 16 * mt;
    frag_rows<HD>(qa[mt], q + b * S * qstr + (i64)h * HD, qstr, rm, S);
    frag_rows<HD>(oa[mt], dout + b * S * qstr + (i64)h * HD, qstr, rm, S);
    la[mt][0] = rm + g < S ? lb[rm + g] * log2e : 0.0f, la[mt][1] = rm + g + 8 < S ? lb[rm + g + 8] * log2e : 0.0f;
    u32 of[KC][4]; /* O's rows, for D only */
    frag_rows<HD>(of, o + b * S * qstr + (i64)h * HD, qstr, rm, S);
    frag_dot<HD>(da[mt][0], da[mt][1], oa[mt], of);
    if ((lane & 3) == 0) {
      if (rm + g < S) db[rm + g] = da[mt][0];
      if (rm + g + 8 < S) db[rm + g + 8] = da[mt][1];
    }
  }
  float acc[MT][HD / 8][4];
  zero_acc<MT, HD>(acc);
  const bf16 *kb = k + b * S * kvs + (i64)kvh * HD, *vb = v + b * S * kvs + (i64)kvh * HD;
  const int kend = CAUSAL ? (q0 + BQ < S ? q0 + BQ : S) : S;
  const int ntiles = (kend + BK - 1) / BK;
  kv_tiles_async<BK, HD, NT>(ks[0], vs[0], kb, vb, kvs, 0, S);
  for (int it = 0; it < ntiles; it++) {
    const int k0 = it * BK;
    tiles_ready();
    if (it + 1 < ntiles) kv_tiles_async<BK, HD, NT>(ks[(it + 1) & 1], vs[(it + 1) & 1], kb, vb, kvs, k0 + BK, S);
    if (!CAUSAL || k0 <= r0 + 16 * MT - 1) {
      if (k0 + BK > S || r0 + 16 * MT > S || (CAUSAL && k0 + BK - 1 > r0))
        q_tile<true, CAUSAL, S, HD, BK, MT, LD>(acc, qa, oa, la, da, ks[it & 1], vs[it & 1], k0, r0, c2);
      else
        q_tile<false, CAUSAL, S, HD, BK, MT, LD>(acc, qa, oa, la, da, ks[it & 1], vs[it & 1], k0, r0, c2);
    }
  }
  const float scale = (float)(1.0 / sqrt((double)HD));
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
    store_rows<HD>(dq + b * S * qstr + (i64)h * HD, qstr, r0 + 16 * mt, S, acc[mt], scale, scale);
}

} // namespace sk

#endif
