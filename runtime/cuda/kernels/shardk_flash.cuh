/* runtime/cuda/kernels/shardk_flash.cuh — attention on tensor cores (included by shardk.cuh).
 *
 * FlashAttention-2-style kernels for bf16 with a head dim that is a multiple of 16 (<= 128),
 * on mma.sync.m16n8k16 (bf16 inputs, fp32 accumulation; sm_80 and later). The layouts and the
 * semantics are those of shardk_attn.cuh's CUDA-core kernels (which stay for f32 and other head
 * dims): q/o [B, S, H*HD], k/v [B, S, KV*HD], lse f32 [B, H, S]; query head h reads kv head
 * h / (H/KV); every token-major operand with its row stride (ld*, elements between consecutive tokens,
 * after the pointers in their order: shardk_attn.cuh), a multiple of 8 (16-byte cp.async rows).
 *
 * Each block is W warps; each warp owns 16 MT rows (queries, or keys in dK/dV: MT m-tiles) and
 * keeps them as mma A fragments in registers for the whole kernel, or with RS in shared memory,
 * read by ldmatrix at each use (ARows below: FlashAttention-2's choice for the backward at hd 128,
 * where K, V and the dK, dV accumulators do not all fit in 255 registers). The other operand streams
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
 * Shared memory is the launch's dynamic shared memory, laid out as shardk_flash_smem.cuh says (the
 * launch gives what the same macros compute; above 48 KiB the runtime sets the kernel's
 * MaxDynamicSharedMemorySize attribute at its first launch): so tiles may take up to 227 KiB a block
 * on sm_90 (static shared memory stops at 48 KiB). A kernel asks for its bytes (sk::dyn_smem) and stops
 * when the launch gave fewer.
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
 *
 * Ring attention's blocks (context parallelism, ops.def ATTN_BLOCK / ATTN_BLOCK_BWD; POS true): the same
 * three kernels over a block of T keys (k/v [B, T, KV*HD], T may differ from S) with the rows' global
 * positions qpos [S] and kpos [T], increasing (a zigzag chunk pair is: passes/shard_cp.c, and the CPU
 * kernels assume it too), the contract of shardk_attn.cuh's CUDA-core block kernels: causal masks
 * kpos[j] <= qpos[i], so a query sees a prefix of the keys and a key is seen by a suffix of the queries
 * (FlashKeys: their lengths by binary search over the positions, once a kernel per row); the tiles past a
 * block's (and a warp's) prefix are skipped whole, the masks only on the tiles a prefix ends in; a row that
 * sees no key gets o 0 and lse -inf; the backward takes the whole attention's o and lse (D from them).
 */
#ifndef SHARDK_FLASH_CUH
#define SHARDK_FLASH_CUH

#include "shardk_flash_smem.cuh"

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

/* Starts copying key rows [k0, k0 + BK) of K and of V (row strides ldk, ldv) into kdst and vdst (one
 * cp.async group). */
template <int BK, int HD, int NT>
__device__ __forceinline__ void kv_tiles_async(bf16 *kdst, bf16 *vdst, const bf16 *kb, const bf16 *vb, i64 ldk, i64 ldv,
                                               i64 k0, i64 S) {
  tile_async<BK, HD, NT>(kdst, kb, ldk, k0, S);
  tile_async<BK, HD, NT>(vdst, vb, ldv, k0, S);
  cp_commit();
}
/* Waits for this thread's copies (the current tile's: the only ones in flight), then for the whole block:
 * the tile is in shared memory for every warp, and every warp is done with the previous tile, whose
 * buffer the next tile's copy may now take (one barrier a tile). */
__device__ __forceinline__ void tiles_ready() {
  cp_wait<0>();
  __syncthreads();
}

/* The A fragments of a left operand held in registers: get(r, mt, kc) gives m-tile mt's k-chunk kc. */
template <int MT, int KC>
struct AFrags {
  const u32 (&a)[MT][KC][4];
  __device__ __forceinline__ void get(u32 (&r)[4], int mt, int kc) const {
    r[0] = a[mt][kc][0], r[1] = a[mt][kc][1], r[2] = a[mt][kc][2], r[3] = a[mt][kc][3];
  }
};

/* A warp's 16 MT rows x HD of a resident left operand (Q; dO; K, V in dK/dV; row r at src + r * rs,
 * rows at or past n zeros): as A fragments in registers (RS false, frag_rows at init), or (RS true)
 * where the block copied them into shared memory (rows of LD elements from m: the kernel's cp.async,
 * zeros past n too), read by one ldmatrix.x4 per m-tile and k-chunk at each use: 4 MT HD / 16 registers
 * a thread fewer. */
template <bool RS, int MT, int HD, int LD>
struct ARows;
template <int MT, int HD, int LD>
struct ARows<false, MT, HD, LD> {
  u32 a[MT][HD / 16][4];
  __device__ __forceinline__ void init(const bf16 *src, i64 rs, i64 r0, i64 n, const bf16 *) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++) frag_rows<HD>(a[mt], src, rs, r0 + 16 * mt, n);
  }
  __device__ __forceinline__ void get(u32 (&r)[4], int mt, int kc) const { AFrags<MT, HD / 16>{a}.get(r, mt, kc); }
};
template <int MT, int HD, int LD>
struct ARows<true, MT, HD, LD> {
  const bf16 *p; /* this lane's row of matrix lane / 8 of an ldmatrix.x4: rows 0-15, columns 0 and 8 */
  __device__ __forceinline__ void init(const bf16 *, i64, i64, i64, const bf16 *m) {
    int lane = (int)threadIdx.x & 31;
    p = m + (lane & 15) * LD + 8 * (lane >> 4);
  }
  __device__ __forceinline__ void get(u32 (&r)[4], int mt, int kc) const {
    ldsm4<false>(r, SmemRef(p).at(16 * mt * LD + 16 * kc));
  }
};

/* acc[mt][N/8][4] += A[mt] (16 x 16 KC each, a.get) times B (16 KC x N) read from shared memory m with
 * leading dimension LD: B^T row-major (m[n][k], TR false) or B row-major (m[k][n], TR true). One
 * ldmatrix.x4 gives the B fragments of two column tiles, used by every m-tile. */
template <int MT, int N, int KC, int LD, bool TR, class A>
__device__ __forceinline__ void mma_op(float (&acc)[MT][N / 8][4], const A &a, const bf16 *m) {
  int lane = (int)threadIdx.x & 31, r8 = lane & 7, hi = (lane >> 3) & 1, q = lane >> 4;
  const SmemRef base(m + (TR ? (r8 + 8 * hi) * LD + 8 * q : (r8 + 8 * q) * LD + 8 * hi)); /* this lane's row */
#pragma unroll
  for (int kc = 0; kc < KC; kc++) {
    u32 af[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) a.get(af[mt], mt, kc);
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
        mma16816(acc[mt][2 * np], af[mt], b0);
        mma16816(acc[mt][2 * np + 1], af[mt], b1);
      }
    }
  }
}
template <int MT, int N, int KC, int LD, bool TR>
__device__ __forceinline__ void mma_smem(float (&acc)[MT][N / 8][4], const u32 (&a)[MT][KC][4], const bf16 *m) {
  mma_op<MT, N, KC, LD, TR>(acc, AFrags<MT, KC>{a}, m);
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

/* Which keys a query sees. The whole sequence (POS false, T == S): causally query r sees keys [0, r]. A ring
 * block (POS): T keys at global positions kp, the S queries at qp, both increasing, so that causally query r
 * sees the keys [0, keys(r)) (those at or before its position) and key j is seen by the queries
 * [first(j), S); without CAUSAL every query sees every key. Binary searches over the positions (L1/L2
 * reads, a few per row and kernel). */
template <int S, int T, bool CAUSAL, bool POS>
struct FlashKeys {
  const int *qp, *kp;
  /* the keys query r (< S) sees: [0, keys(r)) */
  __device__ __forceinline__ int keys(int r) const {
    if (!CAUSAL) return T;
    if (!POS) return r + 1 < S ? r + 1 : S;
    const int x = qp[r];
    int lo = 0, n = T; /* the first key past x */
    while (n > 0) {
      int h = n >> 1;
      if (kp[lo + h] <= x) lo += h + 1, n -= h + 1;
      else n = h;
    }
    return lo;
  }
  /* the queries that see key j (< T): [first(j), S) */
  __device__ __forceinline__ int first(int j) const {
    if (!CAUSAL) return 0;
    if (!POS) return j;
    const int x = kp[j];
    int lo = 0, n = S; /* the first query at or past x */
    while (n > 0) {
      int h = n >> 1;
      if (qp[lo + h] < x) lo += h + 1, n -= h + 1;
      else n = h;
    }
    return lo;
  }
};

/* A warp's 16 MT rows from r0 (queries of the forward and dQ) in a ring block (POS): each lane's rows' key
 * prefixes (lim[mt][0] row g, [1] row g + 8; 0 past S), the keys the warp's first row sees (lo: a tile below it
 * needs no mask) and any of its rows sees (hi: a tile from it on is skipped). Without POS nothing: the kernels
 * keep the whole sequence's index arithmetic. */
template <int S, int T, bool CAUSAL, bool POS, int MT>
struct RowKeys {
  int lim[MT][2], lo = 0, hi = 0;
  __device__ __forceinline__ RowKeys(const FlashKeys<S, T, CAUSAL, POS> &fk, int r0) {
    if constexpr (POS) {
      const int g = ((int)threadIdx.x & 31) >> 2, last = r0 + 16 * MT - 1;
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < 2; i++) {
          int r = r0 + 16 * mt + g + 8 * i;
          lim[mt][i] = r < S ? fk.keys(r) : 0;
        }
      lo = r0 < S ? fk.keys(r0) : 0, hi = r0 < S ? fk.keys(last < S ? last : S - 1) : 0;
    }
  }
};

/* A warp's 16 MT keys from r0 (dK/dV) in a ring block (POS): each lane's keys' first queries (qf[mt][0] row g,
 * [1] row g + 8; S past T), the first query that sees the warp's first key (lo: a tile of queries before it is
 * skipped) and its last (hi: a tile from it on needs no causal mask). Without POS nothing (RowKeys). */
template <int S, int T, bool CAUSAL, bool POS, int MT>
struct KeyQueries {
  int qf[MT][2], lo = 0, hi = 0;
  __device__ __forceinline__ KeyQueries(const FlashKeys<S, T, CAUSAL, POS> &fk, int r0) {
    if constexpr (POS) {
      const int g = ((int)threadIdx.x & 31) >> 2, last = r0 + 16 * MT - 1;
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < 2; i++) {
          int j = r0 + 16 * mt + g + 8 * i;
          qf[mt][i] = j < T ? fk.first(j) : S;
        }
      lo = r0 < T ? fk.first(r0) : S, hi = r0 < T ? fk.first(last < T ? last : T - 1) : S;
    }
  }
};

/* One key tile of the forward for one warp: scores, online softmax (masked when MASK: keys at or past
 * S, and causal keys past the row; POS: the keys past each row's prefix, lim), acc += P V. */
template <bool MASK, bool CAUSAL, bool POS, int S, int HD, int BK, int MT, int LD, class QA>
__device__ __forceinline__ void fwd_tile(float (&acc)[MT][HD / 8][4], float (&m)[MT][2], float (&l)[MT][2],
                                         const QA &qa, const bf16 *ks, const bf16 *vs, int k0, int r0, float c2,
                                         const int (&lim)[MT][2]) {
  int lane = (int)threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float s[MT][BK / 8][4];
  zero_acc<MT, BK>(s);
  mma_op<MT, BK, HD / 16, LD, false>(s, qa, ks);
  u32 pa[MT][BK / 16][4];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    if (MASK) { /* raw scores: the scale (> 0) is applied inside the exponent */
#pragma unroll
      for (int nt = 0; nt < BK / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          int key = k0 + nt * 8 + 2 * t + (e & 1), row = r0 + 16 * mt + g + (e >= 2 ? 8 : 0);
          if (POS ? key >= lim[mt][e >> 1] : key >= S || (CAUSAL && key > row)) s[mt][nt][e] = ninf();
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

/* Forward: grid (ceil(S / BQ), H, B) with BQ = 16 MT W, block 32 W; each warp 16 MT query rows (RS: in
 * shared memory); K and V tiles of BK keys double-buffered (the next tile's copy runs under this tile's
 * products). Dynamic shared memory: SK_FLASH_SMEM_FWD. POS: a ring block of T_ keys at positions kpos, the
 * queries at qpos (FlashKeys). */
template <i64 S_, int H, int KV, int HD, bool CAUSAL, int BK, int MT, int W, bool RS, bool POS = false, i64 T_ = S_>
__device__ void flash_fwd(bf16 *o, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, i64 ldo, i64 ldq, i64 ldk,
                          i64 ldv, const int *qpos = nullptr, const int *kpos = nullptr) {
  constexpr int S = (int)S_, T = (int)T_, BQ = 16 * MT * W, NT = 32 * W, LD = HD + 8, TL = BK * LD;
  static_assert(POS || T == S, "flash_fwd: keys other than the queries' need their positions");
  constexpr unsigned SMEM = SK_FLASH_SMEM_FWD(BK, HD, MT, W, RS ? 1 : 0);
  static_assert(SMEM <= SK_FLASH_SMEM_MAX, "flash_fwd: tiles over the shared memory of a block");
  bf16 *const sm = (bf16 *)dyn_smem(SMEM); /* K [2], V [2], (RS) Q's rows */
  bf16 *const ks = sm, *const vs = sm + 2 * TL, *const rsm = sm + 4 * TL;
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
  const bf16 *qsrc = q + b * S * ldq + (i64)h * HD;
  if (RS) tile_async<BQ, HD, NT>(rsm, qsrc, ldq, q0, S); /* committed with the first K and V tiles */
  ARows<RS, MT, HD, LD> qa;
  qa.init(qsrc, ldq, r0, S, rsm + (r0 - q0) * LD);
  float acc[MT][HD / 8][4], m[MT][2], l[MT][2];
  zero_acc<MT, HD>(acc);
#pragma unroll
  for (int mt = 0; mt < MT; mt++) m[mt][0] = m[mt][1] = ninf(), l[mt][0] = l[mt][1] = 0.0f;
  const bf16 *kb = k + b * T * ldk + (i64)kvh * HD, *vb = v + b * T * ldv + (i64)kvh * HD;
  const FlashKeys<S, T, CAUSAL, POS> fk{qpos, kpos};
  const int kend = !POS ? (CAUSAL ? (q0 + BQ < S ? q0 + BQ : S) : S) /* the keys any row of the block sees */
                        : CAUSAL ? fk.keys(q0 + BQ < S ? q0 + BQ - 1 : S - 1) : T;
  const int ntiles = (kend + BK - 1) / BK;
  if (!POS || ntiles > 0) kv_tiles_async<BK, HD, NT>(ks, vs, kb, vb, ldk, ldv, 0, T);
  const RowKeys<S, T, CAUSAL, POS, MT> rk(fk, r0); /* POS: this warp's rows' keys (under the first copy) */
  for (int it = 0; it < ntiles; it++) {
    const int k0 = it * BK, cur = (it & 1) * TL, nxt = TL - cur;
    tiles_ready();
    if (it + 1 < ntiles) kv_tiles_async<BK, HD, NT>(ks + nxt, vs + nxt, kb, vb, ldk, ldv, k0 + BK, T);
    if (!CAUSAL || (POS ? k0 < rk.hi : k0 <= r0 + 16 * MT - 1)) { /* else every key of the tile is past this warp's rows */
      if (POS ? k0 + BK > rk.lo : k0 + BK > S || (CAUSAL && k0 + BK - 1 > r0)) /* keys past the end or some row's */
        fwd_tile<true, CAUSAL, POS, S, HD, BK, MT, LD>(acc, m, l, qa, ks + cur, vs + cur, k0, r0, c2, rk.lim);
      else
        fwd_tile<false, CAUSAL, POS, S, HD, BK, MT, LD>(acc, m, l, qa, ks + cur, vs + cur, k0, r0, c2, rk.lim);
    }
  }
  const float ln2 = 0.6931471805599453f;
  float *lb = lse + ((i64)b * H + h) * S;
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    float l0 = quad_sum(l[mt][0]), l1 = quad_sum(l[mt][1]);
    int rm = r0 + 16 * mt;
    if constexpr (POS) { /* a row that sees no key of the block (l 0) gets o 0 and lse -inf (m stayed -inf) */
      store_rows<HD>(o + b * S * ldo + (i64)h * HD, ldo, rm, S, acc[mt], l0 == 0.0f ? 0.0f : 1.0f / l0,
                     l1 == 0.0f ? 0.0f : 1.0f / l1);
      if (t == 0) {
        if (rm + g < S) lb[rm + g] = l0 == 0.0f ? ninf() : fmaf(m[mt][0], ln2, logf(l0));
        if (rm + g + 8 < S) lb[rm + g + 8] = l1 == 0.0f ? ninf() : fmaf(m[mt][1], ln2, logf(l1));
      }
      continue;
    }
    store_rows<HD>(o + b * S * ldo + (i64)h * HD, ldo, rm, S, acc[mt], 1.0f / l0, 1.0f / l1);
    if (t == 0) {
      if (rm + g < S) lb[rm + g] = fmaf(m[mt][0], ln2, logf(l0));
      if (rm + g + 8 < S) lb[rm + g + 8] = fmaf(m[mt][1], ln2, logf(l1));
    }
  }
}

/* The probabilities and dS of a 16 x N block of scores s (fp32 C fragments, raw dot products) for
 * dot products dp: p = exp2(s c2 - lse2) (0 where masked(nt, e) when MASK), ds = p (dp - D), for element e
 * of column tile nt; lse2 and D by query. */
template <int N, bool MASK, class OUT, class LSE, class DD>
__device__ __forceinline__ void p_and_ds(float (&s)[N / 8][4], float (&dp)[N / 8][4], float c2, OUT masked, LSE lse2,
                                         DD dd) {
#pragma unroll
  for (int nt = 0; nt < N / 8; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      float p = ex2(fmaf(s[nt][e], c2, -lse2(nt, e)));
      if (MASK && masked(nt, e)) p = 0.0f;
      s[nt][e] = p;
      dp[nt][e] = p * (dp[nt][e] - dd(nt, e));
    }
}

/* One query tile of dK / dV for one warp (16 MT keys from r0): S^T and dP^T, then P and dS, then
 * dV += P^T dO and dK += dS^T Q; lse (natural log) and D of the tile's queries in shared memory. The masks
 * (MASK): queries at or past S, keys at or past T; causal queries before the key (POS: before the first query
 * that sees each of this lane's keys, qf[mt][0] row g, [1] row g + 8). */
template <bool MASK, bool CAUSAL, bool POS, int S, int T, int HD, int BQT, int MT, int LD, class KA>
__device__ __forceinline__ void kv_tile(float (&dka)[MT][HD / 8][4], float (&dva)[MT][HD / 8][4], const KA &ka,
                                        const KA &va, const bf16 *qs, const bf16 *dos, const float *ls, const float *ds, int qt0,
                                        int r0, float c2, const int (&qf)[MT][2]) {
  int lane = (int)threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const float log2e = 1.4426950408889634f; /* ls holds the natural-log lse */
  float s[MT][BQT / 8][4], dp[MT][BQT / 8][4]; /* S^T and dP^T: rows are keys, columns queries */
  zero_acc<MT, BQT>(s);
  zero_acc<MT, BQT>(dp);
  mma_op<MT, BQT, HD / 16, LD, false>(s, ka, qs);
  mma_op<MT, BQT, HD / 16, LD, false>(dp, va, dos);
  u32 pa[MT][BQT / 16][4], sa[MT][BQT / 16][4];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    int rm = r0 + 16 * mt;
    p_and_ds<BQT, MASK>(
        s[mt], dp[mt], c2,
        [&](int nt, int e) {
          int qi = qt0 + nt * 8 + 2 * t + (e & 1), kj = rm + g + (e >= 2 ? 8 : 0);
          return POS ? qi >= S || qi < qf[mt][e >> 1] : qi >= S || kj >= T || (CAUSAL && kj > qi);
        },
        [&](int nt, int e) { return ls[nt * 8 + 2 * t + (e & 1)] * log2e; },
        [&](int nt, int e) { return ds[nt * 8 + 2 * t + (e & 1)]; });
    c_to_a<BQT>(pa[mt], s[mt]);
    c_to_a<BQT>(sa[mt], dp[mt]);
  }
  mma_smem<MT, HD, BQT / 16, LD, true>(dva, pa, dos);
  mma_smem<MT, HD, BQT / 16, LD, true>(dka, sa, qs);
}

/* dK and dV: grid (ceil(T / BKV), KV, B) with BKV = 16 MT W, block 32 W, each warp 16 MT keys (RS: K and V
 * in shared memory); Q and dO tiles of BQT queries of every head of the group, double-buffered. Dynamic
 * shared memory: SK_FLASH_SMEM_KV. POS: a ring block's (flash_fwd); keys no query sees get dk, dv 0. */
template <i64 S_, int H, int KV, int HD, bool CAUSAL, int BQT, int MT, int W, bool RS, bool POS = false, i64 T_ = S_>
__device__ void flash_bwd_kv(bf16 *dk, bf16 *dv, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                             const float *Dd, const bf16 *dout, i64 lddk, i64 lddv, i64 ldq, i64 ldk, i64 ldv,
                             i64 lddo, const int *qpos = nullptr, const int *kpos = nullptr) {
  constexpr int S = (int)S_, T = (int)T_, BKV = 16 * MT * W, NT = 32 * W, G = H / KV, LD = HD + 8, TL = BQT * LD;
  static_assert(POS || T == S, "flash_bwd_kv: keys other than the queries' need their positions");
  constexpr unsigned SMEM = SK_FLASH_SMEM_KV(BQT, HD, MT, W, RS ? 1 : 0);
  static_assert(SMEM <= SK_FLASH_SMEM_MAX, "flash_bwd_kv: tiles over the shared memory of a block");
  bf16 *const sm = (bf16 *)dyn_smem(SMEM); /* Q [2], dO [2], lse [2], D [2], (RS) K's and V's rows */
  bf16 *const qs = sm, *const dos = sm + 2 * TL;
  float *const ls = (float *)(sm + 4 * TL), *const ds = ls + 2 * BQT;
  bf16 *const rsm = (bf16 *)(ds + 2 * BQT);
  const float c2 = (float)(1.4426950408889634 / sqrt((double)HD));
  int w = (int)threadIdx.x >> 5;
  FlashBlock fb = flash_block(false);
  i64 b = fb.b;
  int kvh = fb.h;
  int kb0 = fb.t * BKV, r0 = kb0 + 16 * MT * w;
  const bf16 *ksrc = k + b * T * ldk + (i64)kvh * HD, *vsrc = v + b * T * ldv + (i64)kvh * HD;
  const FlashKeys<S, T, CAUSAL, POS> fk{qpos, kpos};
  const int qstart = CAUSAL ? fk.first(kb0) / BQT * BQT : 0; /* the first query tile any key of the block sees */
  const int nqt = (S - qstart + BQT - 1) / BQT, ntiles = G * nqt;
  if (RS && (!POS || ntiles > 0)) { /* committed with the first Q and dO tiles */
    tile_async<BKV, HD, NT>(rsm, ksrc, ldk, kb0, T);
    tile_async<BKV, HD, NT>(rsm + BKV * LD, vsrc, ldv, kb0, T);
  }
  ARows<RS, MT, HD, LD> ka, va;
  ka.init(ksrc, ldk, r0, T, rsm + (r0 - kb0) * LD);
  va.init(vsrc, ldv, r0, T, rsm + (BKV + r0 - kb0) * LD);
  float dka[MT][HD / 8][4], dva[MT][HD / 8][4];
  zero_acc<MT, HD>(dka);
  zero_acc<MT, HD>(dva);
  /* tile i: head kvh * G + i / nqt, queries from qstart + (i % nqt) * BQT */
  auto issue = [&](int i) {
    int h = kvh * G + i / nqt, buf = i & 1;
    int qt0 = qstart + (i % nqt) * BQT;
    tile_async<BQT, HD, NT>(qs + buf * TL, q + b * S * ldq + (i64)h * HD, ldq, qt0, S);
    tile_async<BQT, HD, NT>(dos + buf * TL, dout + b * S * lddo + (i64)h * HD, lddo, qt0, S);
    const float *lb = lse + ((i64)b * H + h) * S, *db = Dd + ((i64)b * H + h) * S;
    for (int j = (int)threadIdx.x; j < BQT; j += NT) { /* asynchronous too: no warp waits on these loads */
      bool ok = qt0 + j < S;
      cp4(&ls[buf * BQT + j], lb + (ok ? qt0 + j : 0), ok);
      cp4(&ds[buf * BQT + j], db + (ok ? qt0 + j : 0), ok);
    }
    cp_commit();
  };
  if (!POS || ntiles > 0) issue(0);
  const KeyQueries<S, T, CAUSAL, POS, MT> kq(fk, r0); /* POS: this warp's keys' queries (under the first copy) */
  for (int it = 0; it < ntiles; it++) {
    const int buf = it & 1, cur = buf * TL, cl = buf * BQT;
    const int qt0 = qstart + (it % nqt) * BQT;
    tiles_ready();
    if (it + 1 < ntiles) issue(it + 1);
    if (!CAUSAL || (POS ? qt0 + BQT > kq.lo : qt0 + BQT - 1 >= r0)) { /* else every query of the tile is before this warp's keys */
      if (qt0 + BQT > S || r0 + 16 * MT > T || (CAUSAL && (POS ? qt0 < kq.hi : qt0 < r0 + 16 * MT - 1)))
        kv_tile<true, CAUSAL, POS, S, T, HD, BQT, MT, LD>(dka, dva, ka, va, qs + cur, dos + cur, ls + cl, ds + cl, qt0,
                                                          r0, c2, kq.qf);
      else
        kv_tile<false, CAUSAL, POS, S, T, HD, BQT, MT, LD>(dka, dva, ka, va, qs + cur, dos + cur, ls + cl, ds + cl, qt0,
                                                           r0, c2, kq.qf);
    }
  }
  const float scale = (float)(1.0 / sqrt((double)HD));
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    store_rows<HD>(dk + b * T * lddk + (i64)kvh * HD, lddk, r0 + 16 * mt, T, dka[mt], scale, scale);
    store_rows<HD>(dv + b * T * lddv + (i64)kvh * HD, lddv, r0 + 16 * mt, T, dva[mt], 1.0f, 1.0f);
  }
}

/* One key tile of dQ for one warp (16 MT queries from r0): S and dP, P and dS, acc += dS K. The masks as the
 * forward's (fwd_tile). */
template <bool MASK, bool CAUSAL, bool POS, int S, int HD, int BK, int MT, int LD, class QA>
__device__ __forceinline__ void q_tile(float (&acc)[MT][HD / 8][4], const QA &qa, const QA &oa,
                                       const float (&la)[MT][2], const float (&da)[MT][2], const bf16 *ks,
                                       const bf16 *vs, int k0, int r0, float c2, const int (&lim)[MT][2]) {
  int lane = (int)threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float s[MT][BK / 8][4], dp[MT][BK / 8][4];
  zero_acc<MT, BK>(s);
  zero_acc<MT, BK>(dp);
  mma_op<MT, BK, HD / 16, LD, false>(s, qa, ks);
  mma_op<MT, BK, HD / 16, LD, false>(dp, oa, vs);
  u32 sa[MT][BK / 16][4];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    int rm = r0 + 16 * mt;
    p_and_ds<BK, MASK>(
        s[mt], dp[mt], c2,
        [&](int nt, int e) {
          int qi = rm + g + (e >= 2 ? 8 : 0), kj = k0 + nt * 8 + 2 * t + (e & 1);
          return POS ? kj >= lim[mt][e >> 1] : qi >= S || kj >= S || (CAUSAL && kj > qi);
        },
        [&](int, int e) { return la[mt][e >= 2]; }, [&](int, int e) { return da[mt][e >= 2]; });
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

/* dQ: grid (ceil(S / BQ), H, B) with BQ = 16 MT W, block 32 W, each warp 16 MT queries (RS: Q and dO in
 * shared memory); K and V tiles of BK keys, double-buffered. It runs first: D = rowsum(dO o O) of its rows,
 * which it stores in Dd for flash_bwd_kv. Dynamic shared memory: SK_FLASH_SMEM_Q. POS: a ring block's
 * (flash_fwd), o and lse the whole attention's; rows that see no key of the block get dq 0 (D all the same). */
template <i64 S_, int H, int KV, int HD, bool CAUSAL, int BK, int MT, int W, bool RS, bool POS = false, i64 T_ = S_>
__device__ void flash_bwd_q(bf16 *dq, float *Dd, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *o,
                            const float *lse, const bf16 *dout, i64 lddq, i64 ldq, i64 ldk, i64 ldv, i64 ldo,
                            i64 lddo, const int *qpos = nullptr, const int *kpos = nullptr) {
  constexpr int S = (int)S_, T = (int)T_, BQ = 16 * MT * W, NT = 32 * W, KC = HD / 16, LD = HD + 8, TL = BK * LD;
  static_assert(POS || T == S, "flash_bwd_q: keys other than the queries' need their positions");
  constexpr unsigned SMEM = SK_FLASH_SMEM_Q(BK, HD, MT, W, RS ? 1 : 0);
  static_assert(SMEM <= SK_FLASH_SMEM_MAX, "flash_bwd_q: tiles over the shared memory of a block");
  bf16 *const sm = (bf16 *)dyn_smem(SMEM); /* K [2], V [2], (RS) Q's and dO's rows */
  bf16 *const ks = sm, *const vs = sm + 2 * TL, *const rsm = sm + 4 * TL;
  const float c2 = (float)(1.4426950408889634 / sqrt((double)HD)), log2e = 1.4426950408889634f;
  int lane = (int)threadIdx.x & 31, w = (int)threadIdx.x >> 5, g = lane >> 2;
  FlashBlock fb = flash_block(CAUSAL);
  i64 b = fb.b;
  int h = fb.h, kvh = h / (H / KV);
  int q0 = fb.t * BQ, r0 = q0 + 16 * MT * w;
  const bf16 *qsrc = q + b * S * ldq + (i64)h * HD, *osrc = dout + b * S * lddo + (i64)h * HD;
  const bf16 *const kb = k + b * T * ldk + (i64)kvh * HD, *const vb = v + b * T * ldv + (i64)kvh * HD;
  const FlashKeys<S, T, CAUSAL, POS> fk{qpos, kpos};
  /* POS: the keys any row of the block sees (none: no tile copied) */
  const int kseen = POS && CAUSAL ? fk.keys(q0 + BQ < S ? q0 + BQ - 1 : S - 1) : T;
  if (RS && (!POS || kseen > 0)) { /* committed with the first K and V tiles */
    tile_async<BQ, HD, NT>(rsm, qsrc, ldq, q0, S);
    tile_async<BQ, HD, NT>(rsm + BQ * LD, osrc, lddo, q0, S);
  }
  if (!POS || kseen > 0) kv_tiles_async<BK, HD, NT>(ks, vs, kb, vb, ldk, ldv, 0, T);
  const RowKeys<S, T, CAUSAL, POS, MT> rk(fk, r0); /* POS: this warp's rows' keys (under the first copy) */
  ARows<RS, MT, HD, LD> qa, oa;
  qa.init(qsrc, ldq, r0, S, rsm + (r0 - q0) * LD);
  oa.init(osrc, lddo, r0, S, rsm + (BQ + r0 - q0) * LD);
  const float *lb = lse + ((i64)b * H + h) * S;
  float *db = Dd + ((i64)b * H + h) * S;
  float la[MT][2], da[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    int rm = r0 + 16 * mt;
    la[mt][0] = rm + g < S ? lb[rm + g] * log2e : 0.0f, la[mt][1] = rm + g + 8 < S ? lb[rm + g + 8] * log2e : 0.0f;
    u32 of[KC][4]; /* O's rows, for D only (and dO's with RS) */
    frag_rows<HD>(of, o + b * S * ldo + (i64)h * HD, ldo, rm, S);
    if constexpr (RS) {
      u32 dof[KC][4];
      frag_rows<HD>(dof, osrc, lddo, rm, S);
      frag_dot<HD>(da[mt][0], da[mt][1], dof, of);
    } else {
      frag_dot<HD>(da[mt][0], da[mt][1], oa.a[mt], of);
    }
    if ((lane & 3) == 0) {
      if (rm + g < S) db[rm + g] = da[mt][0];
      if (rm + g + 8 < S) db[rm + g + 8] = da[mt][1];
    }
  }
  float acc[MT][HD / 8][4];
  zero_acc<MT, HD>(acc);
  const int kend = POS ? kseen : CAUSAL ? (q0 + BQ < S ? q0 + BQ : S) : S;
  const int ntiles = (kend + BK - 1) / BK;
  for (int it = 0; it < ntiles; it++) {
    const int k0 = it * BK, cur = (it & 1) * TL, nxt = TL - cur;
    tiles_ready();
    if (it + 1 < ntiles) kv_tiles_async<BK, HD, NT>(ks + nxt, vs + nxt, kb, vb, ldk, ldv, k0 + BK, T);
    if (!CAUSAL || (POS ? k0 < rk.hi : k0 <= r0 + 16 * MT - 1)) { /* else every key of the tile is past this warp's rows */
      if (POS ? k0 + BK > rk.lo || r0 + 16 * MT > S : k0 + BK > S || r0 + 16 * MT > S || (CAUSAL && k0 + BK - 1 > r0))
        q_tile<true, CAUSAL, POS, S, HD, BK, MT, LD>(acc, qa, oa, la, da, ks + cur, vs + cur, k0, r0, c2, rk.lim);
      else
        q_tile<false, CAUSAL, POS, S, HD, BK, MT, LD>(acc, qa, oa, la, da, ks + cur, vs + cur, k0, r0, c2, rk.lim);
    }
  }
  const float scale = (float)(1.0 / sqrt((double)HD));
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
    store_rows<HD>(dq + b * S * lddq + (i64)h * HD, lddq, r0 + 16 * mt, S, acc[mt], scale, scale);
}

} // namespace sk

#endif
