/* runtime/cuda/kernels/shardk_wgmma_ws.cuh — the attention forward on Hopper's wgmma, warp-specialized
 * (issue 17; included by shardk.cuh after shardk_wgmma.cuh, whose pieces it runs: wg_scores, wg_pv,
 * wg_softmax, the swizzled tiles and descriptors).
 *
 * flash_fwd_ws<S, H, KV, HD, CAUSAL, BK, NC, ST>: the layouts, results and arithmetic of flash_fwd_wg (its
 * pipelined order in each warpgroup, so the same bits), in a block of NC + 1 warpgroups:
 *  - warpgroup 0, the producer, only copies: the block's Q (NC x 64 rows, once) and each key tile's K and
 *    V (BK keys) into a ring of ST stages, by cp.async into the 128-byte swizzle the descriptors read. It
 *    waits for a tile's copies, fences them for the async proxy (fence.proxy.async: wgmma reads through
 *    it), and arrives at the stage's FULL barrier; before it reuses a stage it waits at its EMPTY barrier.
 *    (Not TMA: a tensor map is a host-built CUtensorMap passed by value, which the launch path does not
 *    have; cp.async.bulk copies contiguous bytes, not the swizzle's permuted 16-byte chunks, and the rows
 *    of a head are strided. cp.async by 128 threads fills a stage under the consumers' products.)
 *  - warpgroups 1 .. NC, the consumers, 64 query rows each, run flash_fwd_wg's pipelined tile (S of tile
 *    j and P V of tile j - 1 issued together, the softmax of j under the P V) on stage j % ST after
 *    waiting at its FULL barrier; tile j's stage (K read by S_j, V by P V_j, issued at tile j + 1) is free
 *    once tile j + 1's products are waited for: then they arrive at its EMPTY barrier (only for stages
 *    the producer fills again, so no phase is left open at the end).
 *  - ping-pong (NC > 1): the consumers take turns issuing their products, each turn between a bar.sync
 *    at its own barrier and a bar.arrive at the next consumer's (FlashAttention-3's scheduling), so one's
 *    softmax runs while the other's products hold the tensor cores. Every consumer takes a turn for every
 *    tile (with no products where causality skips it) and one for the last P V, so the turns pair up.
 *  - setmaxnreg (REG > 0): the producer gives registers back (24 a thread), the consumers take REG; off
 *    (0) in the candidates: the consumers fit the launch's share (168 of 384 threads), and with it on
 *    ptxas (13.0) still allocates that share for the whole kernel (docs/performance.md).
 * Named barriers (bar.sync / bar.arrive id, threads): 1 .. NC the turns (256 threads: the waiter and the
 * previous consumer), then FULL and EMPTY of each stage (the whole block: producer and consumers).
 *
 * Dynamic shared memory SK_WS_FWD_SMEM (Q, ST stages of K and V, 1024 of alignment). Emulated
 * (sk_emu_ws.h): named barriers with their counts, copies landing at their wait (NaNs before), setmaxnreg
 * a no-op. Built where flash_fwd_wg is (sm_90a); a trap elsewhere. Emitter: codegen/cuda_kernels_attn.c
 * (wg_one), tiles codegen/cuda_wgmma_cfg.c.
 */
#ifndef SHARDK_WGMMA_WS_CUH
#define SHARDK_WGMMA_WS_CUH

namespace sk {

#define SK_WS_FWD_SMEM(HD, BK, NC, ST) (1024 + 2 * 64 * (NC) * (HD) + 4 * (ST) * (BK) * (HD))

#if SK_HAVE_WGMMA

/* bar.sync / bar.arrive: named barrier id, n threads */
__device__ __forceinline__ void nbar_sync(int id, int n) {
#ifdef SK_EMU
  sk_emu::named_bar(id, n, true);
#else
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
#endif
}
__device__ __forceinline__ void nbar_arrive(int id, int n) {
#ifdef SK_EMU
  sk_emu::named_bar(id, n, false);
#else
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
#endif
}
template <int R, bool INC>
__device__ __forceinline__ void setmaxnreg() {
#ifndef SK_EMU
  if (INC) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
  else asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
#endif
}

/* the producer's copies: cp.async (emulated: landing at the wait) */
__device__ __forceinline__ void ws_cp16(unsigned char *dst, const bf16 *src, bool valid) {
#ifdef SK_EMU
  sk_emu::cp_async16(dst, src, valid);
#else
  cp16((bf16 *)dst, src, valid);
#endif
}
__device__ __forceinline__ void ws_cp_commit() {
#ifdef SK_EMU
  sk_emu::cp_async_commit();
#else
  cp_commit();
#endif
}
/* the producer's copies landed, fenced for the async proxy */
__device__ __forceinline__ void ws_cp_landed() {
#ifdef SK_EMU
  sk_emu::cp_async_wait(0);
#else
  cp_wait<0>();
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
/* sw_tile_async by the producer's 128 threads (t: its thread) */
template <int R, int HD>
__device__ __forceinline__ void ws_tile(unsigned char *dst, const bf16 *src, i64 rs, i64 r0, i64 n, int t) {
  constexpr int C8 = HD / 8;
#pragma unroll 4
  for (int i = t; i < R * C8; i += 128) {
    int r = i / C8, c = (i % C8) * 8;
    bool ok = r0 + r < n;
    ws_cp16(dst + sw_off<R>(r, c), src + (ok ? r0 + r : n - 1) * rs + c, ok);
  }
}

#endif /* SK_HAVE_WGMMA */

/* Grid (ceil(S / (64 NC)), H, B), block 128 (NC + 1), SK_WS_FWD_SMEM(HD, BK, NC, ST) bytes of dynamic shared
 * memory (see above). */
template <i64 S_, int H, int KV, int HD, bool CAUSAL, int BK, int NC, int ST, int REG = 0>
__device__ void flash_fwd_ws(bf16 *o, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, i64 ldo, i64 ldq,
                             i64 ldk, i64 ldv) {
  static_assert(HD == 64 || HD == 128, "flash_fwd_ws: head dim 64 or 128");
  static_assert(BK == 64 || BK == 128, "flash_fwd_ws: key tiles of 64 or 128");
  static_assert(NC >= 1 && NC <= 3 && ST >= 2 && NC + 2 * ST < 16, "flash_fwd_ws: consumers 1-3, stages 2+, 15 barriers");
#if SK_HAVE_WGMMA
  constexpr int S = (int)S_, BQ = 64 * NC, NT = 128 * (NC + 1), QB = 64 * HD * 2, KB = BK * HD * 2;
  constexpr int FULL = 1 + NC, EMPTY = 1 + NC + ST; /* named barriers: turns 1 .. NC, FULL + s, EMPTY + s */
  const float c2 = (float)(1.4426950408889634 / sqrt((double)HD));
  unsigned char *base = (unsigned char *)dyn_smem(SK_WS_FWD_SMEM(HD, BK, NC, ST));
  base += (1024u - (smem_u32(base) & 1023u)) & 1023u;
  unsigned char *qs = base, *kv = base + NC * QB; /* stage s: K at kv + 2 s KB, V after it */
  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 7, 0);
  FlashBlock fb = flash_block(CAUSAL);
  const i64 b = fb.b;
  const int h = fb.h, kvh = h / (H / KV), q0 = fb.t * BQ;
  const int kend = CAUSAL ? (q0 + BQ < S ? q0 + BQ : S) : S, ntiles = (kend + BK - 1) / BK;
  if (wg == 0) { /* the producer */
    if (REG) setmaxnreg<24, false>();
    const int t = (int)threadIdx.x;
    const bf16 *kb = k + b * S * ldk + (i64)kvh * HD, *vb = v + b * S * ldv + (i64)kvh * HD;
    for (int x = 0; x < NC; x++) ws_tile<64, HD>(qs + x * QB, q + b * S * ldq + (i64)h * HD, ldq, q0 + 64 * x, S, t);
    ws_tile<BK, HD>(kv, kb, ldk, 0, S, t);
    ws_tile<BK, HD>(kv + KB, vb, ldv, 0, S, t);
    ws_cp_commit();
    for (int it = 0; it < ntiles; it++) {
      ws_cp_landed(); /* tile it (and Q with tile 0) */
      nbar_arrive(FULL + it % ST, NT);
      if (it + 1 < ntiles) {
        const int s = (it + 1) % ST;
        if (it + 1 >= ST) nbar_sync(EMPTY + s, NT); /* tile it + 1 - ST's products done */
        ws_tile<BK, HD>(kv + 2 * s * KB, kb, ldk, (it + 1) * BK, S, t);
        ws_tile<BK, HD>(kv + (2 * s + 1) * KB, vb, ldv, (it + 1) * BK, S, t);
        ws_cp_commit();
      }
    }
    return;
  }
  if (REG) setmaxnreg<REG, true>();
  const int c = wg - 1, r0 = q0 + 64 * c;
  float acc[HD / 8][4], m[2] = {ninf(), ninf()}, l[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < HD / 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  u32 pa[BK / 16][4]; /* P of the last tile, its P V not yet issued (when have) */
  bool have = false;
  const u32 qa = smem_u32(qs + c * QB);
  if (NC > 1 && c == NC - 1) nbar_arrive(1, 256); /* the first turn is consumer 0's */
  for (int it = 0; it <= ntiles; it++) {
    const bool tile = it < ntiles; /* else the last turn: the last tile's P V */
    const int k0 = it * BK, s = it % ST, sp = (it + ST - 1) % ST;
    if (tile) nbar_sync(FULL + s, NT);
    const u32 ka = smem_u32(kv + 2 * s * KB), vp = smem_u32(kv + (2 * sp + 1) * KB);
    const bool act = tile && r0 < S && (!CAUSAL || k0 <= r0 + 63); /* else no key of the tile is this one's */
    /* this consumer's turn at the tensor cores: from its own barrier until it arrives at the next one's once its
     * products are issued (each branch issues and waits alike, so that ptxas sees no accumulator read while a
     * product that writes it may be in flight) */
    const bool pass = NC > 1 && !(c == NC - 1 && it == ntiles); /* the last turn of all passes to no one */
    if (NC > 1) nbar_sync(1 + c, 256);
    if (act) {
      float sc[BK / 8][4], f[2];
      if (have) { /* (the branch before the fence: a branch between it and a product makes ptxas fence again, C7519) */
        wg_fence();
        wg_scores<HD, BK>(sc, qa, ka);
        wg_pv<HD, BK>(acc, pa, vp);
        if (pass) nbar_arrive(1 + (c + 1) % NC, 256);
        wg_wait<1>(); /* S done, P V in flight */
      } else {
        wg_fence();
        wg_scores<HD, BK>(sc, qa, ka);
        if (pass) nbar_arrive(1 + (c + 1) % NC, 256);
        wg_wait<0>();
      }
      wg_regs<BK / 2>(flat<BK>(sc));
      if (k0 + BK > S || (CAUSAL && k0 + BK - 1 > r0)) wg_softmax<true, CAUSAL, S, BK>(sc, m, l, f, k0, r0, c2);
      else wg_softmax<false, CAUSAL, S, BK>(sc, m, l, f, k0, r0, c2);
      wg_wait<0>();
      wg_regs_a<BK / 16>(pa);
      wg_regs<HD / 2>(flat<HD>(acc));
      wg_rescale<HD>(acc, f);
      c_to_a<BK>(pa, sc);
      have = true;
    } else if (have) { /* the last tile's P V */
      wg_fence();
      wg_pv<HD, BK>(acc, pa, vp);
      if (pass) nbar_arrive(1 + (c + 1) % NC, 256);
      wg_wait<0>();
      wg_regs<HD / 2>(flat<HD>(acc));
      have = false;
    } else if (pass) {
      nbar_arrive(1 + (c + 1) % NC, 256);
    }
    /* tile it - 1's stage: its S and P V done (every consumer arrives, the producer waits if it refills) */
    if (it >= 1 && it - 1 + ST < ntiles) nbar_arrive(EMPTY + sp, NT);
  }
  wg_fwd_finish<S, H, HD>(o, lse, ldo, acc, m, l, b, h, r0);
#else
  (void)o, (void)lse, (void)q, (void)k, (void)v, (void)ldo, (void)ldq, (void)ldk, (void)ldv;
  __trap(); /* not built for this architecture: the runtime offers it on sm_90a only */
#endif
}

} // namespace sk

#endif
