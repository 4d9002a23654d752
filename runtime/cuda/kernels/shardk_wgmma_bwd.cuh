/* runtime/cuda/kernels/shardk_wgmma_bwd.cuh — the attention backward on Hopper's warpgroup MMA (included
 * by shardk.cuh after shardk_wgmma.cuh, whose descriptors, swizzled tiles and products it shares).
 *
 * The semantics of shardk_flash.cuh's flash_bwd_kv and flash_bwd_q (lse f32 [B, H, S] in natural log,
 * D = rowsum(dO o O) f32 [B, H, S] stored by dQ, which runs first; query head h reads kv head h / (H/KV);
 * dK and dV summed over the group's heads inside the kernel; no atomics: the same bits every run; bf16,
 * HD 64 or 128), on wgmma.mma_async.m64nNk16 (sm_90a). Every operand's row stride (elements between
 * consecutive tokens) is a kernel argument after the pointers, in their order (ld<name>, as shardk_flash.cuh's
 * kernels on branch wip-qkvs): H HD for q, o, dO, dq and KV HD for k, v, dk, dv when contiguous; a fused
 * [B, S, 3 d] QKV tensor and its gradient pass 3 d. Rows of batch b start at b S ld.
 *
 * dK/dV (flash_bwd_kv_wg): a block is NWG warpgroups, each owning 64 key rows, whose K and V sit in
 * dynamic shared memory in the 128-byte swizzle (shardk_wgmma.cuh's layout) for the whole kernel; Q and dO
 * tiles of BQ queries of every head of the group stream through two buffers (cp.async, the next tile's
 * copy under this tile's products) with their lse and D. Per query tile, each warpgroup:
 *   S^T = K Q^T and dP^T = V dO^T (HD/16 wgmma m64nBQk16 each, A and B K-major from shared memory),
 *   P^T = exp2(S^T c2 - lse2) (masked to 0), as the A operand in registers,
 *   dV += P^T dO (BQ/16 wgmma m64nHDk16, A from registers, B = dO MN-major: the transpose flag),
 *   dS^T = P^T o (dP^T - D), dK += dS^T Q (A from registers, B = Q MN-major).
 * dP^T computes under P's exponentials and dV's product under dS's arithmetic (wait_group 1).
 * dQ (flash_bwd_q_wg): a warpgroup owns 64 query rows (Q and dO swizzled in shared memory, D of its rows
 * computed from O and dO first and stored), K and V tiles of BK keys streamed: S = Q K^T, dP = dO V^T,
 * P, dS = P o (dP - D), dQ += dS K (B = K MN-major).
 * Each in a pipelined form too (PIPE, FlashAttention-3's order inside a warpgroup): tile j's S^T and dP^T
 * (S and dP) issued with tile j - 1's dV and dK (dQ) products, tile j's P^T and dS^T computed under them;
 * the tiles those products read take a third buffer.
 *
 * Causal: the query tiles before a warpgroup's first key (dK/dV), the key tiles past its last query (dQ),
 * are skipped by the warpgroup; masks run only on the tiles that cross the diagonal or the end of the
 * sequence. Built only where wgmma exists (SK_HAVE_WGMMA: sm_90a, and the emulator); elsewhere a trap, and
 * the runtime offers these kernels (tiles "wg...") only where RtCuOps.wgmma says the device runs them.
 * The emitters: codegen/cuda_kernels_attn.c (wgb_one); the tiles: codegen/cuda_wgmma_cfg.c.
 */
#ifndef SHARDK_WGMMA_BWD_CUH
#define SHARDK_WGMMA_BWD_CUH

namespace sk {

/* bytes of dynamic shared memory (with the 1024 of the alignment): dK/dV: K and V of 64 NWG keys, two Q
 * and two dO tiles of BQ queries, two lse and two D tiles (pipelined: three of each); dQ: Q and dO of 64 NWG
 * queries, two K and two V tiles of BK keys (pipelined: three K) */
#define SK_WG_KV_SMEM(HD, BQ, NWG, PIPE) \
  (1024 + 4 * 64 * (NWG) * (HD) + ((PIPE) ? 3 : 2) * (4 * (BQ) * (HD) + 8 * (BQ)))
#define SK_WG_Q_SMEM(HD, BK, NWG, PIPE) (1024 + 4 * 64 * (NWG) * (HD) + ((PIPE) ? 10 : 8) * (BK) * (HD))

#if SK_HAVE_WGMMA

/* One probability of a dK/dV tile (S^T: rows keys, columns queries): element (nt, e) of this thread's
 * fragment, keys rk, rk + 8, the tile's queries from qt0; ls the tile's lse (natural log); 0 past S or
 * above the diagonal (MASK). */
template <bool MASK, bool CAUSAL, int S>
__device__ __forceinline__ float wg_prob_kv(float sv, const float *ls, int nt, int e, int rk, int qt0, int t, float c2) {
  const float log2e = 1.4426950408889634f;
  const int col = nt * 8 + 2 * t + (e & 1);
  float p = ex2(fmaf(sv, c2, -ls[col] * log2e));
  if (MASK) {
    const int qi = qt0 + col, kj = rk + (e >= 2 ? 8 : 0);
    if (qi >= S || kj >= S || (CAUSAL && kj > qi)) p = 0.0f;
  }
  return p;
}

/* One probability of a dQ tile (S: rows queries, columns keys): element (nt, e), queries rq, rq + 8 with
 * their lse in base 2 (la), the tile's keys from k0; masked as wg_prob_kv. */
template <bool MASK, bool CAUSAL, int S>
__device__ __forceinline__ float wg_prob_q(float sv, const float (&la)[2], int nt, int e, int rq, int k0, int t, float c2) {
  float p = ex2(fmaf(sv, c2, -la[e >> 1]));
  if (MASK) {
    const int qi = rq + (e >= 2 ? 8 : 0), kj = k0 + nt * 8 + 2 * t + (e & 1);
    if (qi >= S || kj >= S || (CAUSAL && kj > qi)) p = 0.0f;
  }
  return p;
}

/* One query tile of dK / dV for one warpgroup (keys r0 .. r0 + 63; this warp's 16 from r0 + 16 w): ka, va
 * its K and V, qa, oa the tile's Q and dO (shared addresses); ls, ds the tile's lse (natural log) and D;
 * qt0 its first query. dS^T's bf16 A fragments are left in sa (the one-kernel backward's dQ product reads them). */
template <bool MASK, bool CAUSAL, int S, int HD, int BQ>
__device__ __forceinline__ void wg_kv_tile(float (&dka)[HD / 8][4], float (&dva)[HD / 8][4], u32 (&sa)[BQ / 16][4],
                                           u32 ka, u32 va, u32 qa, u32 oa, const float *ls, const float *ds, int qt0,
                                           int r0, float c2) {
  const int lane = (int)threadIdx.x & 31, g = lane >> 2, t = lane & 3, w = ((int)threadIdx.x >> 5) & 3;
  float s[BQ / 8][4], dp[BQ / 8][4]; /* S^T and dP^T: rows keys, columns queries */
  u32 pa[BQ / 16][4];
  wg_fence();
  wg_scores<HD, BQ>(s, ka, qa);
  wg_scores<HD, BQ>(dp, va, oa);
  wg_wait<1>(); /* S^T done, dP^T in flight */
  wg_regs<BQ / 2>(flat<BQ>(s));
  const int rk = r0 + 16 * w + g; /* this thread's keys: rk, rk + 8 */
#pragma unroll
  for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) s[nt][e] = wg_prob_kv<MASK, CAUSAL, S>(s[nt][e], ls, nt, e, rk, qt0, t, c2);
  c_to_a<BQ>(pa, s);
  wg_fence();
  wg_pv<HD, BQ>(dva, pa, oa); /* dV += P^T dO */
  wg_wait<1>();               /* dP^T done, dV in flight */
  wg_regs<BQ / 2>(flat<BQ>(dp));
#pragma unroll
  for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) dp[nt][e] = s[nt][e] * (dp[nt][e] - ds[nt * 8 + 2 * t + (e & 1)]);
  c_to_a<BQ>(sa, dp);
  wg_fence();
  wg_pv<HD, BQ>(dka, sa, qa); /* dK += dS^T Q */
  wg_wait<0>();
  wg_regs_a<BQ / 16>(pa);
  wg_regs_a<BQ / 16>(sa);
  wg_regs<HD / 2>(flat<HD>(dva));
  wg_regs<HD / 2>(flat<HD>(dka));
}

/* One key tile of dQ for one warpgroup (queries r0 .. r0 + 63): qa, oa its Q and dO, ka, va the tile's K
 * and V; la, da this thread's rows' lse (base 2) and D; k0 the tile's first key. */
template <bool MASK, bool CAUSAL, int S, int HD, int BK>
__device__ __forceinline__ void wg_q_tile(float (&acc)[HD / 8][4], u32 qa, u32 oa, u32 ka, u32 va,
                                          const float (&la)[2], const float (&da)[2], int k0, int r0, float c2) {
  const int lane = (int)threadIdx.x & 31, g = lane >> 2, t = lane & 3, w = ((int)threadIdx.x >> 5) & 3;
  float s[BK / 8][4], dp[BK / 8][4];
  u32 sa[BK / 16][4];
  wg_fence();
  wg_scores<HD, BK>(s, qa, ka);
  wg_scores<HD, BK>(dp, oa, va);
  wg_wait<1>(); /* S done, dP in flight */
  wg_regs<BK / 2>(flat<BK>(s));
  const int rq = r0 + 16 * w + g; /* this thread's queries: rq, rq + 8 */
#pragma unroll
  for (int nt = 0; nt < BK / 8; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) s[nt][e] = wg_prob_q<MASK, CAUSAL, S>(s[nt][e], la, nt, e, rq, k0, t, c2);
  wg_wait<0>();
  wg_regs<BK / 2>(flat<BK>(dp));
#pragma unroll
  for (int nt = 0; nt < BK / 8; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) dp[nt][e] = s[nt][e] * (dp[nt][e] - da[e >> 1]);
  c_to_a<BK>(sa, dp);
  wg_regs<HD / 2>(flat<HD>(acc));
  wg_fence();
  wg_pv<HD, BK>(acc, sa, ka); /* dQ += dS K */
  wg_wait<0>();
  wg_regs_a<BK / 16>(sa);
  wg_regs<HD / 2>(flat<HD>(acc));
}

/* dQ pipelined as wg_kv_tile_pipe: tile j's S and dP issued with tile j - 1's dQ += dS K (have; sa its dS,
 * kp its K), tile j's dS computed while that product runs, packed into sa at the end. */
template <bool MASK, bool CAUSAL, int S, int HD, int BK>
__device__ __forceinline__ void wg_q_tile_pipe(float (&acc)[HD / 8][4], u32 (&sa)[BK / 16][4], bool have, u32 qa,
                                               u32 oa, u32 ka, u32 va, u32 kp, const float (&la)[2],
                                               const float (&da)[2], int k0, int r0, float c2) {
  const int lane = (int)threadIdx.x & 31, g = lane >> 2, t = lane & 3, w = ((int)threadIdx.x >> 5) & 3;
  float s[BK / 8][4], dp[BK / 8][4];
  wg_fence();
  wg_scores<HD, BK>(s, qa, ka);
  wg_scores<HD, BK>(dp, oa, va);
  if (have) {
    wg_pv<HD, BK>(acc, sa, kp);
    wg_wait<1>(); /* S and dP done, the last tile's dQ product in flight */
  } else {
    wg_wait<0>();
  }
  wg_regs<BK / 2>(flat<BK>(s));
  wg_regs<BK / 2>(flat<BK>(dp));
  const int rq = r0 + 16 * w + g;
#pragma unroll
  for (int nt = 0; nt < BK / 8; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++)
      dp[nt][e] = wg_prob_q<MASK, CAUSAL, S>(s[nt][e], la, nt, e, rq, k0, t, c2) * (dp[nt][e] - da[e >> 1]);
  wg_wait<0>();
  wg_regs_a<BK / 16>(sa);
  wg_regs<HD / 2>(flat<HD>(acc));
  c_to_a<BK>(sa, dp);
}

/* Pipelined (FlashAttention-3's order inside a warpgroup): tile j's S^T and dP^T are issued together with
 * tile j - 1's dV and dK products (have: there is such a tile; pa, sa its P^T and dS^T, qp, op its Q and dO);
 * once S^T and dP^T are done (wait_group 2), tile j's P^T and dS^T are computed in fp32 while those products
 * run, and packed into pa and sa (the A registers of the products in flight: written only after their
 * wait, as ptxas wants) at the end. Nothing is in flight between two calls: ptxas serializes the wgmma
 * (C7515) when one is left in flight across the loop, and (C7514) when P^T is computed from S^T while
 * dP^T is still in flight behind it with the two products (NVRTC 13.0). */
template <bool MASK, bool CAUSAL, int S, int HD, int BQ>
__device__ __forceinline__ void wg_kv_tile_pipe(float (&dka)[HD / 8][4], float (&dva)[HD / 8][4],
                                                u32 (&pa)[BQ / 16][4], u32 (&sa)[BQ / 16][4], bool have, u32 ka,
                                                u32 va, u32 qa, u32 oa, u32 qp, u32 op, const float *ls,
                                                const float *ds, int qt0, int r0, float c2) {
  const int lane = (int)threadIdx.x & 31, g = lane >> 2, t = lane & 3, w = ((int)threadIdx.x >> 5) & 3;
  float s[BQ / 8][4], dp[BQ / 8][4];
  wg_fence();
  wg_scores<HD, BQ>(s, ka, qa);
  wg_scores<HD, BQ>(dp, va, oa);
  if (have) {
    wg_pv<HD, BQ>(dva, pa, op);
    wg_pv<HD, BQ>(dka, sa, qp);
    wg_wait<2>(); /* S^T and dP^T done, the last tile's dV and dK in flight */
  } else {
    wg_wait<0>();
  }
  wg_regs<BQ / 2>(flat<BQ>(s));
  const int rk = r0 + 16 * w + g;
#pragma unroll
  for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) s[nt][e] = wg_prob_kv<MASK, CAUSAL, S>(s[nt][e], ls, nt, e, rk, qt0, t, c2);
  wg_regs<BQ / 2>(flat<BQ>(dp));
#pragma unroll
  for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) dp[nt][e] = s[nt][e] * (dp[nt][e] - ds[nt * 8 + 2 * t + (e & 1)]);
  wg_wait<0>(); /* the last tile's dV and dK done: pa and sa free */
  wg_regs_a<BQ / 16>(pa);
  wg_regs_a<BQ / 16>(sa);
  wg_regs<HD / 2>(flat<HD>(dva));
  wg_regs<HD / 2>(flat<HD>(dka));
  c_to_a<BQ>(pa, s);
  c_to_a<BQ>(sa, dp);
}

/* the pending tile's dV and dK products (pipelined: before a skipped tile, and at the end) */
template <int HD, int BQ>
__device__ __forceinline__ void wg_kv_flush(float (&dka)[HD / 8][4], float (&dva)[HD / 8][4],
                                            const u32 (&pa)[BQ / 16][4], const u32 (&sa)[BQ / 16][4], u32 qp,
                                            u32 op) {
  wg_fence();
  wg_pv<HD, BQ>(dva, pa, op);
  wg_pv<HD, BQ>(dka, sa, qp);
  wg_wait<0>();
  wg_regs<HD / 2>(flat<HD>(dva));
  wg_regs<HD / 2>(flat<HD>(dka));
}

/* The dK/dV kernels' copies (flash_bwd_kv_wg, flash_bwd1_wg). wg_kv_rows starts this block's NWG x 64 keys of K
 * and V (kv head kvh, batch b, from kb0) into ks / vs, uncommitted (they go with the first streamed tile);
 * wg_kv_stream starts query tile qt0 of head h: Q and dO into buffer buf's swizzled tiles (BQ x HD each), its
 * lse and D into ls / dsm (BQ floats a buffer), and commits. */
template <int S, int HD, int NWG, int NT>
__device__ __forceinline__ void wg_kv_rows(unsigned char *ks, unsigned char *vs, const bf16 *k, const bf16 *v, i64 ldk,
                                           i64 ldv, i64 b, int kvh, int kb0) {
  constexpr int RB = 64 * HD * 2;
  const bf16 *ksrc = k + b * S * ldk + (i64)kvh * HD, *vsrc = v + b * S * ldv + (i64)kvh * HD;
  for (int x = 0; x < NWG; x++) {
    sw_tile_async<64, HD, NT>(ks + x * RB, ksrc, ldk, kb0 + 64 * x, S);
    sw_tile_async<64, HD, NT>(vs + x * RB, vsrc, ldv, kb0 + 64 * x, S);
  }
}
template <int S, int H, int HD, int BQ, int NT>
__device__ __forceinline__ void wg_kv_stream(unsigned char *qs, unsigned char *os, float *ls, float *dsm, int buf,
                                             const bf16 *q, const bf16 *dout, const float *lse, const float *Dd,
                                             i64 ldq, i64 lddo, i64 b, int h, int qt0) {
  constexpr int TB = BQ * HD * 2;
  sw_tile_async<BQ, HD, NT>(qs + buf * TB, q + b * S * ldq + (i64)h * HD, ldq, qt0, S);
  sw_tile_async<BQ, HD, NT>(os + buf * TB, dout + b * S * lddo + (i64)h * HD, lddo, qt0, S);
  const float *lb = lse + ((i64)b * H + h) * S, *db = Dd + ((i64)b * H + h) * S;
  for (int j = (int)threadIdx.x; j < BQ; j += NT) {
    const bool ok = qt0 + j < S;
    cp4(&ls[buf * BQ + j], lb + (ok ? qt0 + j : 0), ok);
    cp4(&dsm[buf * BQ + j], db + (ok ? qt0 + j : 0), ok);
  }
  cp_commit();
}

#endif /* SK_HAVE_WGMMA */

/* dK and dV: grid (ceil(S / (64 NWG)), KV, B), block 128 NWG, SK_WG_KV_SMEM(HD, BQ, NWG, PIPE) bytes of
 * dynamic shared memory. Row strides (elements between consecutive tokens), after the pointers in their
 * order: lddk of dk, lddv of dv, ldq of q, ldk of k, ldv of v, lddo of dout. PIPE: wg_kv_tile_pipe's order, the streamed tiles in three buffers (tile j - 1's products
 * read its Q and dO while tile j + 1's copy lands in the third). */
template <i64 S_, int H, int KV, int HD, bool CAUSAL, int BQ, int NWG, bool PIPE = false>
__device__ void flash_bwd_kv_wg(bf16 *dk, bf16 *dv, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                                const float *Dd, const bf16 *dout, i64 lddk, i64 lddv, i64 ldq, i64 ldk, i64 ldv,
                                i64 lddo) {
  static_assert(HD == 64 || HD == 128, "flash_bwd_kv_wg: head dim 64 or 128");
  static_assert(BQ == 64 || BQ == 128, "flash_bwd_kv_wg: query tiles of 64 or 128");
#if SK_HAVE_WGMMA
  constexpr int S = (int)S_, BKV = 64 * NWG, NT = 128 * NWG, G = H / KV, RB = 64 * HD * 2, TB = BQ * HD * 2;
  constexpr int NB = PIPE ? 3 : 2; /* buffers of the streamed tiles */
  const float c2 = (float)(1.4426950408889634 / sqrt((double)HD));
  unsigned char *base = (unsigned char *)dyn_smem(SK_WG_KV_SMEM(HD, BQ, NWG, PIPE));
  base += (1024u - (smem_u32(base) & 1023u)) & 1023u; /* the swizzle atoms' alignment */
  unsigned char *const ks = base, *const vs = ks + NWG * RB, *const qs = vs + NWG * RB, *const os = qs + NB * TB;
  float *const ls = (float *)(os + NB * TB), *const dsm = ls + NB * BQ;
  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 7, 0), w = ((int)threadIdx.x >> 5) & 3;
  FlashBlock fb = flash_block(false);
  const i64 b = fb.b;
  const int kvh = fb.h, kb0 = fb.t * BKV, r0 = kb0 + 64 * wg;
  wg_kv_rows<S, HD, NWG, NT>(ks, vs, k, v, ldk, ldv, b, kvh, kb0); /* committed with the first Q and dO tiles */
  const int qstart = CAUSAL ? kb0 / BQ * BQ : 0;
  const int nqt = (S - qstart + BQ - 1) / BQ, ntiles = G * nqt;
  /* tile i: head kvh G + i / nqt, queries from qstart + (i % nqt) BQ */
  auto issue = [&](int i) {
    wg_kv_stream<S, H, HD, BQ, NT>(qs, os, ls, dsm, i % NB, q, dout, lse, Dd, ldq, lddo, b, kvh * G + i / nqt,
                                   qstart + (i % nqt) * BQ);
  };
  issue(0);
  float dka[HD / 8][4], dva[HD / 8][4];
#pragma unroll
  for (int i = 0; i < HD / 8; i++)
    dka[i][0] = dka[i][1] = dka[i][2] = dka[i][3] = dva[i][0] = dva[i][1] = dva[i][2] = dva[i][3] = 0.0f;
  const u32 ka = smem_u32(ks + wg * RB), va = smem_u32(vs + wg * RB);
  u32 pa[BQ / 16][4], sa[BQ / 16][4]; /* PIPE: P^T and dS^T of the last tile, its products not yet issued (have) */
  bool have = false;
  for (int it = 0; it < ntiles; it++) {
    const int buf = it % NB, qt0 = qstart + (it % nqt) * BQ;
    const int pb = (it + NB - 1) % NB; /* PIPE: the last tile's buffer */
    wg_tiles_ready(); /* tile it landed; every warpgroup is done with the buffers the next copy takes */
    if (it + 1 < ntiles) issue(it + 1);
    if (r0 < S && (!CAUSAL || qt0 + BQ - 1 >= r0)) { /* else every query of the tile is before these keys */
      const u32 qa = smem_u32(qs + buf * TB), oa = smem_u32(os + buf * TB);
      const float *lt = ls + buf * BQ, *dt = dsm + buf * BQ;
      const bool mask = qt0 + BQ > S || r0 + 64 > S || (CAUSAL && qt0 < r0 + 63);
      if (PIPE) {
        const u32 qp = smem_u32(qs + pb * TB), op = smem_u32(os + pb * TB);
        if (mask)
          wg_kv_tile_pipe<true, CAUSAL, S, HD, BQ>(dka, dva, pa, sa, have, ka, va, qa, oa, qp, op, lt, dt, qt0, r0,
                                                   c2);
        else
          wg_kv_tile_pipe<false, CAUSAL, S, HD, BQ>(dka, dva, pa, sa, have, ka, va, qa, oa, qp, op, lt, dt, qt0, r0,
                                                    c2);
        have = true;
      } else {
        if (mask) wg_kv_tile<true, CAUSAL, S, HD, BQ>(dka, dva, sa, ka, va, qa, oa, lt, dt, qt0, r0, c2);
        else wg_kv_tile<false, CAUSAL, S, HD, BQ>(dka, dva, sa, ka, va, qa, oa, lt, dt, qt0, r0, c2);
      }
    } else if (PIPE && have) { /* the warpgroup's last tile was the previous one: its products now */
      wg_kv_flush<HD, BQ>(dka, dva, pa, sa, smem_u32(qs + pb * TB), smem_u32(os + pb * TB));
      have = false;
    }
  }
  if (PIPE && have) /* the last tile's products (its buffers stay: no copy after it) */
    wg_kv_flush<HD, BQ>(dka, dva, pa, sa, smem_u32(qs + (ntiles - 1) % NB * TB), smem_u32(os + (ntiles - 1) % NB * TB));
  const float scale = (float)(1.0 / sqrt((double)HD));
  const int rm = r0 + 16 * w;
  store_rows<HD>(dk + b * S * lddk + (i64)kvh * HD, lddk, rm, S, dka, scale, scale);
  store_rows<HD>(dv + b * S * lddv + (i64)kvh * HD, lddv, rm, S, dva, 1.0f, 1.0f);
#else
  (void)dk, (void)dv, (void)q, (void)k, (void)v, (void)lse, (void)Dd, (void)dout;
  (void)lddk, (void)lddv, (void)ldq, (void)ldk, (void)ldv, (void)lddo;
  __trap(); /* not built for this architecture: the runtime offers it on sm_90a only */
#endif
}

/* dQ (and D): grid (ceil(S / (64 NWG)), H, B), block 128 NWG, SK_WG_Q_SMEM(HD, BK, NWG, PIPE) bytes of
 * dynamic shared memory. Row strides, after the pointers in their order: lddq of dq, ldq of q, ldk of k, ldv
 * of v, ldo of o, lddo of dout. PIPE:
 * wg_q_tile_pipe's order, K in three buffers (tile j - 1's product reads its K while tile j + 1's lands). */
template <i64 S_, int H, int KV, int HD, bool CAUSAL, int BK, int NWG, bool PIPE = false>
__device__ void flash_bwd_q_wg(bf16 *dq, float *Dd, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *o,
                               const float *lse, const bf16 *dout, i64 lddq, i64 ldq, i64 ldk, i64 ldv, i64 ldo,
                               i64 lddo) {
  static_assert(HD == 64 || HD == 128, "flash_bwd_q_wg: head dim 64 or 128");
  static_assert(BK == 64 || BK == 128, "flash_bwd_q_wg: key tiles of 64 or 128");
#if SK_HAVE_WGMMA
  constexpr int S = (int)S_, BQ = 64 * NWG, NT = 128 * NWG, RB = 64 * HD * 2, TB = BK * HD * 2, NKB = PIPE ? 3 : 2;
  const float c2 = (float)(1.4426950408889634 / sqrt((double)HD)), log2e = 1.4426950408889634f;
  unsigned char *base = (unsigned char *)dyn_smem(SK_WG_Q_SMEM(HD, BK, NWG, PIPE));
  base += (1024u - (smem_u32(base) & 1023u)) & 1023u;
  unsigned char *const qs = base, *const os = qs + NWG * RB, *const ks = os + NWG * RB, *const vs = ks + NKB * TB;
  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 7, 0), lane = (int)threadIdx.x & 31;
  const int w = ((int)threadIdx.x >> 5) & 3, g = lane >> 2;
  FlashBlock fb = flash_block(CAUSAL);
  const i64 b = fb.b;
  const int h = fb.h, kvh = h / (H / KV), q0 = fb.t * BQ, r0 = q0 + 64 * wg;
  const bf16 *qsrc = q + b * S * ldq + (i64)h * HD, *dsrc = dout + b * S * lddo + (i64)h * HD;
  const bf16 *const kb = k + b * S * ldk + (i64)kvh * HD, *const vb = v + b * S * ldv + (i64)kvh * HD;
  for (int x = 0; x < NWG; x++) { /* committed with the first K and V tiles */
    sw_tile_async<64, HD, NT>(qs + x * RB, qsrc, ldq, q0 + 64 * x, S);
    sw_tile_async<64, HD, NT>(os + x * RB, dsrc, lddo, q0 + 64 * x, S);
  }
  sw_tile_async<BK, HD, NT>(ks, kb, ldk, 0, S);
  sw_tile_async<BK, HD, NT>(vs, vb, ldv, 0, S);
  cp_commit();
  /* D = rowsum(dO o O) of this warp's 16 rows (rows g and g + 8 of each thread), stored for dK/dV */
  const int rm = r0 + 16 * w;
  float la[2], da[2];
  {
    u32 of[HD / 16][4], df[HD / 16][4];
    frag_rows<HD>(of, o + b * S * ldo + (i64)h * HD, ldo, rm, S);
    frag_rows<HD>(df, dsrc, lddo, rm, S);
    frag_dot<HD>(da[0], da[1], df, of);
    const float *lb = lse + ((i64)b * H + h) * S;
    float *db = Dd + ((i64)b * H + h) * S;
    la[0] = rm + g < S ? lb[rm + g] * log2e : 0.0f, la[1] = rm + g + 8 < S ? lb[rm + g + 8] * log2e : 0.0f;
    if ((lane & 3) == 0) {
      if (rm + g < S) db[rm + g] = da[0];
      if (rm + g + 8 < S) db[rm + g + 8] = da[1];
    }
  }
  float acc[HD / 8][4];
#pragma unroll
  for (int i = 0; i < HD / 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  const u32 qa = smem_u32(qs + wg * RB), oa = smem_u32(os + wg * RB);
  const int kend = CAUSAL ? (q0 + BQ < S ? q0 + BQ : S) : S;
  const int ntiles = (kend + BK - 1) / BK;
  u32 sa[BK / 16][4]; /* PIPE: dS of the last tile, its product not yet issued (have) */
  bool have = false;
  for (int it = 0; it < ntiles; it++) {
    const int k0 = it * BK, kbuf = it % NKB, vbuf = it & 1;
    const u32 kp = smem_u32(ks + (it + NKB - 1) % NKB * TB); /* PIPE: the last tile's K */
    wg_tiles_ready();
    if (it + 1 < ntiles) {
      sw_tile_async<BK, HD, NT>(ks + (it + 1) % NKB * TB, kb, ldk, k0 + BK, S);
      sw_tile_async<BK, HD, NT>(vs + (1 - vbuf) * TB, vb, ldv, k0 + BK, S);
      cp_commit();
    }
    if (r0 < S && (!CAUSAL || k0 <= r0 + 63)) { /* else every key of the tile is past these queries */
      const u32 ka = smem_u32(ks + kbuf * TB), va = smem_u32(vs + vbuf * TB);
      const bool mask = k0 + BK > S || r0 + 64 > S || (CAUSAL && k0 + BK - 1 > r0);
      if (PIPE) {
        if (mask) wg_q_tile_pipe<true, CAUSAL, S, HD, BK>(acc, sa, have, qa, oa, ka, va, kp, la, da, k0, r0, c2);
        else wg_q_tile_pipe<false, CAUSAL, S, HD, BK>(acc, sa, have, qa, oa, ka, va, kp, la, da, k0, r0, c2);
        have = true;
      } else {
        if (mask) wg_q_tile<true, CAUSAL, S, HD, BK>(acc, qa, oa, ka, va, la, da, k0, r0, c2);
        else wg_q_tile<false, CAUSAL, S, HD, BK>(acc, qa, oa, ka, va, la, da, k0, r0, c2);
      }
    } else if (PIPE && have) { /* the warpgroup's last tile was the previous one: its product now */
      wg_fence();
      wg_pv<HD, BK>(acc, sa, kp);
      wg_wait<0>();
      wg_regs<HD / 2>(flat<HD>(acc));
      have = false;
    }
  }
  if (PIPE && have) { /* the last tile's product (its K stays: no copy after it) */
    wg_fence();
    wg_pv<HD, BK>(acc, sa, smem_u32(ks + (ntiles - 1) % NKB * TB));
    wg_wait<0>();
    wg_regs<HD / 2>(flat<HD>(acc));
  }
  const float scale = (float)(1.0 / sqrt((double)HD));
  store_rows<HD>(dq + b * S * lddq + (i64)h * HD, lddq, rm, S, acc, scale, scale);
#else
  (void)dq, (void)Dd, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)dout;
  (void)lddq, (void)ldq, (void)ldk, (void)ldv, (void)ldo, (void)lddo;
  __trap(); /* not built for this architecture: the runtime offers it on sm_90a only */
#endif
}

} // namespace sk

#endif
