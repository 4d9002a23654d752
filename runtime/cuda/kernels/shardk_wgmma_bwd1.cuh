/* runtime/cuda/kernels/shardk_wgmma_bwd1.cuh — the attention backward in one kernel on Hopper's warpgroup
 * MMA (issue 17; included by shardk.cuh after shardk_wgmma_bwd.cuh, whose tile pieces it shares).
 *
 * The semantics of flash_bwd_q_wg + flash_bwd_kv_wg (shardk_wgmma_bwd.cuh: bf16, HD 64 or 128, GQA,
 * causal or not, every operand's row stride an argument) with S, P and dP computed once: flash_bwd_kv_wg's
 * blocks (NWG warpgroups of 64 key rows, K and V resident in shared memory in the 128-byte swizzle, Q, dO,
 * lse and D tiles of BQ = 64 queries of every head of the GQA group streamed through two buffers) also
 * make dQ. Per query tile, each warpgroup, after dV += P^T dO and dK += dS^T Q (wg_kv_tile's order):
 *   its dS^T (the bf16 A fragments of dK's product) stored to its own 64 x 64 tile of shared memory,
 *   dQ_part = dS K, 64 columns at a time (4 wgmma m64n64k16 each: 32 accumulators beside dK's and dV's),
 *   A = that tile MN-major (transpose flag: the tile's rows are keys, its columns queries, as V's tile is
 *   B of P V) and B = its K tile's 64-column atom MN-major, both by descriptors;
 *   dQ_part added into an f32 accumulator in global memory ([B, S, H, HD], the workspace).
 * The query tiles are visited last first: every block of a head starts at the last tile, so the blocks'
 * turns at a tile (below) follow one another by about an add's time, and in the causal case block kb,
 * with nqt - kb tiles, starts kb turns late and ends with the others.
 * 5 products a query tile and key block (S^T, dP^T, dV, dK, dQ) where the two kernels take 7.
 *
 * Determinism: the adds into the accumulator of a query tile (b, h, qt) happen in a fixed order, by key
 * block (blocks of 64 NWG keys, ascending) and inside a block by warpgroup, so that every run sums the
 * same partials in the same order (FlashAttention-3's deterministic mode). An int counter per (b, h, qt)
 * in the workspace says how many key blocks have added: the block of key block kb waits (one thread, an
 * acquire load in a loop, then the block's barrier) until it reads kb, its warpgroups add in turn (a barrier
 * between them), every thread fences its stores (__threadfence) and, after a barrier, one thread stores kb + 1
 * with release semantics. The first contributor (kb 0, warpgroup 0) stores instead of adding (no zeroing);
 * the last (kb = nc - 1, its last warpgroup with keys for the tile) adds and writes dq's bf16 rows (times
 * 1/sqrt(HD), at dq's row stride) instead, and sets the counter back to 0. Contributors of tile qt: every key
 * block (nc = NKB), causal: the blocks whose first key is at or before the tile's last query (nc = min(NKB,
 * (64 qt + 63) / (64 NWG) + 1)), exactly those whose loop visits the tile; a miscount leaves a counter
 * non-zero (cuda_kernels_emu checks them all 0 after each call) or hangs. dQ is per query head: a GQA
 * group's blocks add into each of its heads' tiles. The counters start at 0: flash_bwd1_pre, launched
 * before, zeroes them (the workspace is shared by other kernels between calls) while it computes
 * D = rowsum(dO o O).
 *
 * Forward progress on the GPU: the grid is (NKB, KV, B) with the key block the slowest index of the
 * linear block order (flash_block: block kb of (h, b) is linear block kb KV B + ...), and the hardware
 * dispatches a grid's blocks in increasing linear order. A block waits only for blocks of the same
 * (kv head, b) with a smaller key block: smaller linear indices, dispatched before it. So the unfinished
 * block of the smallest linear index is resident (every block below it is finished, none waits ahead of
 * it for a slot) and everything it waits for has finished: it progresses, and by induction every block
 * does; a waiting block holds its SM slot but never one a block it depends on needs (and a wait of seconds
 * traps: wait_count). Within a block the warpgroups' turns are barriers of the whole block (every thread
 * reaches each, active or not).
 * On the emulator (sk_emu.h) blocks run one after another in that linear order, so a wait finds its
 * count already there, or never will: sk_emu::wait_count reports that as a deadlock and stops.
 *
 * Built only where wgmma exists (SK_HAVE_WGMMA); elsewhere a trap. The emitters: codegen/cuda_kernels_attn.c
 * (wgf_launches), the tiles codegen/cuda_wgmma_cfg.c (cuk_wg_bwd1_variants).
 */
#ifndef SHARDK_WGMMA_BWD1_CUH
#define SHARDK_WGMMA_BWD1_CUH

namespace sk {

/* bytes of dynamic shared memory (with the 1024 of the alignment): K and V of 64 NWG keys, two Q and two dO
 * tiles of 64 queries, a 64 x 64 bf16 dS^T tile a warpgroup, two lse and two D tiles */
#define SK_WG_BWD1_SMEM(HD, NWG) (1024 + 4 * 64 * (NWG) * (HD) + 2 * (4 * 64 * (HD)) + 8192 * (NWG) + 2 * 8 * 64)

/* one thread's wait until *p holds want (acquire: the writes before the release that stored it are seen by
 * this thread, and by the block after its next barrier). On the GPU a wait of 2^25 loads (each an L2 round
 * trip and a short sleep: seconds, where a legitimate wait is the adds of the blocks before, micro- to
 * milliseconds) traps: a launch error instead of a hang, should the progress argument above ever fail. */
__device__ __forceinline__ void wait_count(const int *p, int want) {
#ifdef SK_EMU
  sk_emu::wait_count(p, want);
#else
  int v;
  for (int n = 0;; n++) {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    if (v == want) break;
    if (n == 1 << 25) __trap();
    __nanosleep(40);
  }
#endif
}
/* *p = v with release semantics (after the thread's earlier writes, and the block's before its barrier) */
__device__ __forceinline__ void release_count(int *p, int v) {
#ifdef SK_EMU
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
#else
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
#endif
}
/* two floats at p (8-byte aligned) that another block stored in this launch (L2: not L1) */
__device__ __forceinline__ void ldcg2(const float *p, float &x, float &y) {
#ifdef SK_EMU
  x = p[0], y = p[1];
#else
  asm volatile("ld.global.cg.v2.f32 {%0, %1}, [%2];\n" : "=f"(x), "=f"(y) : "l"(p) : "memory");
#endif
}
__device__ __forceinline__ void st2(float *p, float x, float y) {
#ifdef SK_EMU
  p[0] = x, p[1] = y;
#else
  asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(x), "f"(y) : "memory");
#endif
}

/* D = rowsum(dO o O) (sdpa_bwd_dot's, 64 rows a block of 256 threads) and the fused kernel's counters of
 * the block's query tile zeroed: grid (ceil(S / 64), H, B). */
template <i64 S, int H, int HD>
__device__ void flash_bwd1_pre(float *Dd, int *cnt, const bf16 *o, const bf16 *dout, i64 ldo, i64 lddo) {
  sdpa_bwd_dot<bf16, S, H, HD, 64, 4>(Dd, o, dout, ldo, lddo);
  if (threadIdx.x == 0) cnt[((i64)blockIdx.z * H + blockIdx.y) * gridDim.x + blockIdx.x] = 0;
}

#if SK_HAVE_WGMMA

/* The block's shared-memory stores (generic proxy) made visible to the async proxy that wgmma reads through,
 * then a barrier: as wg_tiles_ready, without waiting for the cp.async copies in flight (the next tile's) */
__device__ __forceinline__ void wg_stores_ready() {
#ifndef SK_EMU
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
  __syncthreads();
}

/* d (m64nN f32) op= A B, A (64 x 16) and B (N x 16) both MN-major from shared memory (scale_d 0: d = A B) */
template <int N>
__device__ __forceinline__ void wgmma_ss_tt(float (&d)[N / 2], unsigned long long ad, unsigned long long bd, int scale_d);
#ifdef SK_EMU
template <int N>
__device__ __forceinline__ void wgmma_ss_tt(float (&d)[N / 2], unsigned long long ad, unsigned long long bd, int scale_d) {
  sk_emu::wgmma_ss<N>(d, ad, bd, scale_d, 1, 1);
}
#else
template <>
__device__ __forceinline__ void wgmma_ss_tt<64>(float (&d)[32], unsigned long long ad, unsigned long long bd, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(ad), "l"(bd), "r"(scale_d));
}
template <>
__device__ __forceinline__ void wgmma_ss_tt<128>(float (&d)[64], unsigned long long ad, unsigned long long bd, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(ad), "l"(bd), "r"(scale_d));
}
#endif

/* this warp's 16 rows of the warpgroup's dS^T (sa: A fragments, rows keys 16 w + g and + 8, 64 query columns)
 * into its 64 x 64 tile at dst (the 128-byte swizzle, sw_off<64>) */
__device__ __forceinline__ void wg1_store_ds(unsigned char *dst, const u32 (&sa)[4][4]) {
  const int lane = (int)threadIdx.x & 31, g = lane >> 2, t = lane & 3, r = 16 * (((int)threadIdx.x >> 5) & 3) + g;
#pragma unroll
  for (int j = 0; j < 4; j++) {
    *(u32 *)(dst + sw_off<64>(r, 16 * j + 2 * t)) = sa[j][0];
    *(u32 *)(dst + sw_off<64>(r + 8, 16 * j + 2 * t)) = sa[j][1];
    *(u32 *)(dst + sw_off<64>(r, 16 * j + 8 + 2 * t)) = sa[j][2];
    *(u32 *)(dst + sw_off<64>(r + 8, 16 * j + 8 + 2 * t)) = sa[j][3];
  }
}

/* 64 columns of dQ_part = dS K over the warpgroup's 64 keys, issued, committed and waited for: dsa its dS^T tile,
 * ka the 64 columns' atom of its K tile (k-steps of 16 keys: 2048 bytes of both) */
__device__ __forceinline__ void wg1_dq(float (&dqa)[8][4], u32 dsa, u32 ka) {
  wg_fence();
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
    wgmma_ss_tt<64>(flat<64>(dqa), wg_desc(dsa + (u32)kk * 2048, 64 * 128), wg_desc(ka + (u32)kk * 2048, 64 * 128),
                    kk > 0);
  wg_commit();
  wg_wait<0>();
  wg_regs<32>(flat<64>(dqa));
}

/* this warp's rows of the warpgroup's dQ_part (queries rq, rq + 8 of head row pointers acc, d) into the
 * accumulator: first stores, last writes dq (bf16, times scale), else adds */
template <int HD>
__device__ __forceinline__ void wg1_add(float *acc, bf16 *d, i64 ldacc, i64 lddq, const float (&dqa)[HD / 8][4],
                                        int rq, int S, bool first, bool last, float scale) {
  const int t = (int)threadIdx.x & 3;
#pragma unroll
  for (int hh = 0; hh < 2; hh++) {
    const int row = rq + 8 * hh;
    if (row >= S) continue;
    float *ar = acc + (i64)row * ldacc;
    bf16 *dr = d + (i64)row * lddq;
#pragma unroll
    for (int nt = 0; nt < HD / 8; nt++) {
      const int col = nt * 8 + 2 * t;
      float x = dqa[nt][2 * hh], y = dqa[nt][2 * hh + 1];
      if (!first) {
        float px, py;
        ldcg2(ar + col, px, py);
        x += px, y += py;
      }
      if (last) *(u32 *)(dr + col) = pack2(x * scale, y * scale);
      else st2(ar + col, x, y);
    }
  }
}

#endif /* SK_HAVE_WGMMA */

/* The fused backward: grid (ceil(S / (64 NWG)), KV, B), block 128 NWG, SK_WG_BWD1_SMEM(HD, NWG) bytes of
 * dynamic shared memory. dqacc: f32 [B, S, H, HD] (the workspace), cnt: B H ceil(S / 64) ints, 0 at entry
 * (flash_bwd1_pre) and again at exit; Dd from flash_bwd1_pre. Row strides after the pointers in their order:
 * lddq of dq, lddk of dk, lddv of dv, ldq of q, ldk of k, ldv of v, lddo of dout. */
template <i64 S_, int H, int KV, int HD, bool CAUSAL, int NWG>
__device__ void flash_bwd1_wg(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *q, const bf16 *k, const bf16 *v,
                              const float *lse, const float *Dd, const bf16 *dout, float *dqacc, int *cnt, i64 lddq,
                              i64 lddk, i64 lddv, i64 ldq, i64 ldk, i64 ldv, i64 lddo) {
  static_assert(HD == 64 || HD == 128, "flash_bwd1_wg: head dim 64 or 128");
#if SK_HAVE_WGMMA
  constexpr int S = (int)S_, BQ = 64, BKV = 64 * NWG, NT = 128 * NWG, G = H / KV, RB = 64 * HD * 2, TB = BQ * HD * 2;
  constexpr int NQT = (S + BQ - 1) / BQ, NKB = (S + BKV - 1) / BKV;
  const float c2 = (float)(1.4426950408889634 / sqrt((double)HD)), scale = (float)(1.0 / sqrt((double)HD));
  unsigned char *base = (unsigned char *)dyn_smem(SK_WG_BWD1_SMEM(HD, NWG));
  base += (1024u - (smem_u32(base) & 1023u)) & 1023u;
  unsigned char *const ks = base, *const vs = ks + NWG * RB, *const qs = vs + NWG * RB, *const os = qs + 2 * TB;
  unsigned char *const dss = os + 2 * TB; /* the warpgroups' dS^T tiles, 8192 bytes each */
  float *const ls = (float *)(dss + NWG * 8192), *const dsm = ls + 2 * BQ;
  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 7, 0), w = ((int)threadIdx.x >> 5) & 3;
  const int g = ((int)threadIdx.x & 31) >> 2;
  FlashBlock fb = flash_block(false); /* the key block: the slowest index of the linear block order */
  const i64 b = fb.b;
  const int kvh = fb.h, kb = fb.t, kb0 = kb * BKV, r0 = kb0 + 64 * wg;
  wg_kv_rows<S, HD, NWG, NT>(ks, vs, k, v, ldk, ldv, b, kvh, kb0);
  const int qstart = CAUSAL ? kb0 / BQ * BQ : 0;
  const int nqt = (S - qstart + BQ - 1) / BQ, ntiles = G * nqt;
  auto issue = [&](int i) { /* the last query tile first */
    wg_kv_stream<S, H, HD, BQ, NT>(qs, os, ls, dsm, i & 1, q, dout, lse, Dd, ldq, lddo, b, kvh * G + i / nqt,
                                   qstart + (nqt - 1 - i % nqt) * BQ);
  };
  issue(0);
  float dka[HD / 8][4], dva[HD / 8][4];
#pragma unroll
  for (int i = 0; i < HD / 8; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) dka[i][e] = dva[i][e] = 0.0f;
  const u32 ka = smem_u32(ks + wg * RB), va = smem_u32(vs + wg * RB), dsa = smem_u32(dss + wg * 8192);
  for (int it = 0; it < ntiles; it++) {
    const int buf = it & 1, h = kvh * G + it / nqt, qt0 = qstart + (nqt - 1 - it % nqt) * BQ; /* the last tile first */
    wg_tiles_ready();
    if (it + 1 < ntiles) issue(it + 1);
    const bool act = r0 < S && (!CAUSAL || qt0 + BQ - 1 >= r0); /* else no key of this warpgroup sees the tile */
    if (act) {
      const u32 qa = smem_u32(qs + buf * TB), oa = smem_u32(os + buf * TB);
      const float *lt = ls + buf * BQ, *dt = dsm + buf * BQ;
      const bool mask = qt0 + BQ > S || r0 + 64 > S || (CAUSAL && qt0 < r0 + 63);
      u32 sa[BQ / 16][4];
      if (mask) wg_kv_tile<true, CAUSAL, S, HD, BQ>(dka, dva, sa, ka, va, qa, oa, lt, dt, qt0, r0, c2);
      else wg_kv_tile<false, CAUSAL, S, HD, BQ>(dka, dva, sa, ka, va, qa, oa, lt, dt, qt0, r0, c2);
      wg1_store_ds(dss + wg * 8192, sa);
    }
    wg_stores_ready(); /* dS^T stored (and fenced for the async proxy) before the products read it */
    float dqa[8][4]; /* 64 columns of this tile's dQ_part (the first k-step overwrites it: scale_d 0) */
#pragma unroll
    for (int i = 0; i < 8; i++) dqa[i][0] = dqa[i][1] = dqa[i][2] = dqa[i][3] = 0.0f;
    if (act) wg1_dq(dqa, dsa, ka); /* the first 64 columns before the turn; at hd 128 the others in it */
    /* the ordered add (the header comment): contributors of this tile, this block's turn */
    const int nc = CAUSAL ? (NKB < (qt0 + BQ - 1) / BKV + 1 ? NKB : (qt0 + BQ - 1) / BKV + 1) : NKB;
    int lastwg = 0; /* this block's last warpgroup with keys for the tile */
    for (int x = 1; x < NWG; x++)
      if (kb0 + 64 * x < S && (!CAUSAL || qt0 + BQ - 1 >= kb0 + 64 * x)) lastwg = x;
    int *const c = cnt + ((i64)b * H + h) * NQT + qt0 / BQ;
    if (kb > 0 && threadIdx.x == 0) {
      wait_count(c, kb);
      __threadfence();
    }
    __syncthreads(); /* the block's adds after the wait */
    float *const accrow = dqacc + (b * S * H + h) * HD;
    bf16 *const dqrow = dq + b * S * lddq + (i64)h * HD;
    for (int x = 0; x < NWG; x++) {
      if (x > 0) __syncthreads(); /* warpgroup x - 1's adds before x's */
      if (wg == x && act) {
        const bool first = kb == 0 && x == 0, last = kb == nc - 1 && x == lastwg;
        wg1_add<64>(accrow, dqrow, (i64)H * HD, lddq, dqa, qt0 + 16 * w + g, S, first, last, scale);
#pragma unroll
        for (int hh = 1; hh < HD / 64; hh++) { /* 64 columns at a time: 32 accumulators, not 64, beside dK and dV's */
          wg1_dq(dqa, dsa, ka + (u32)hh * 64 * 128);
          wg1_add<64>(accrow + 64 * hh, dqrow + 64 * hh, (i64)H * HD, lddq, dqa, qt0 + 16 * w + g, S, first, last, scale);
        }
      }
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) release_count(c, kb == nc - 1 ? 0 : kb + 1);
  }
  const int rm = r0 + 16 * w;
  store_rows<HD>(dk + b * S * lddk + (i64)kvh * HD, lddk, rm, S, dka, scale, scale);
  store_rows<HD>(dv + b * S * lddv + (i64)kvh * HD, lddv, rm, S, dva, 1.0f, 1.0f);
#else
  (void)dq, (void)dk, (void)dv, (void)q, (void)k, (void)v, (void)lse, (void)Dd, (void)dout, (void)dqacc, (void)cnt;
  (void)lddq, (void)lddk, (void)lddv, (void)ldq, (void)ldk, (void)ldv, (void)lddo;
  __trap(); /* not built for this architecture: the runtime offers it on sm_90a only */
#endif
}

} // namespace sk

#endif
