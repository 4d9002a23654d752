/* runtime/cuda/kernels/shardk_wgmma.cuh — attention forward on Hopper's warpgroup MMA (included by
 * shardk.cuh after shardk_flash.cuh, whose helpers it shares).
 *
 * The layouts and semantics of shardk_flash.cuh's flash_fwd (q/o [B, S, H*HD], k/v [B, S, KV*HD], lse
 * f32 [B, H, S]; query head h reads kv head h / (H/KV); bf16, HD 64 or 128), on
 * wgmma.mma_async.m64nNk16 (sm_90a): a block is NWG warpgroups of 128 threads, each owning 64 query
 * rows. Everything the products read sits in dynamic shared memory in the 128-byte swizzle: a tile of
 * R rows x HD is HD/64 atoms of R rows x 64 columns (128 bytes a row), element (r, c) at byte
 * (c/64) R 128 + r 128 + ((c%64/8) ^ (r%8)) 16 + (c%8) 2 from a 1024-aligned base (the kernel aligns the
 * dynamic shared memory itself). Q (the block's rows, once) and K and V tiles of BK keys (two buffers:
 * the next tile's cp.async runs under this tile's products) are copied there by cp.async.
 *
 * Per key tile, each warpgroup: S = Q K^T (HD/16 wgmma m64nBKk16, A = Q and B = K both K-major from
 * shared memory through descriptors), one commit and wait; the online softmax on the accumulator
 * fragments (base 2, as flash_fwd: rows 16 w + g and + 8 of warp w, quad shuffles for the row max and
 * sum); P rounded to bf16 becomes the A operand in registers (the accumulator's layout of 16 columns is
 * A's register fragment); O += P V (BK/16 wgmma m64nHDk16 with A from registers and B = V MN-major,
 * "transposed", from the same row-major tile: the descriptor's transpose flag). Causal: a key tile past a
 * warpgroup's last row is skipped by the warpgroup (its 4 warps alike, as wgmma needs), and masks run only
 * on tiles that cross the diagonal or the end of the sequence.
 *
 * Built only where wgmma exists (sm_90a: __CUDA_ARCH_FEAT_SM90_ALL) and on the emulator, whose model
 * (sk_emu_wgmma.h) decodes the descriptors this file builds; elsewhere (sm_80, compute_90 PTX, sm_90
 * without the a) the kernel compiles to a trap, and the runtime only offers it on compute capability
 * 9.0 devices, which it builds for sm_90a (runtime/cuda/device.c). The emitters: codegen/cuda_kernels_attn.c
 * (wg_fwd), the tiles codegen/cuda_flash_cfg.c.
 */
#ifndef SHARDK_WGMMA_CUH
#define SHARDK_WGMMA_CUH

#if defined(SK_EMU) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL))
#define SK_HAVE_WGMMA 1
#else
#define SK_HAVE_WGMMA 0
#endif

namespace sk {

/* bytes of dynamic shared memory flash_fwd_wg<.., HD, .., BK, NWG, PIPE> needs (with the 1024 of its
 * alignment): Q, two K tiles, two V tiles (PIPE: three) */
#define SK_WG_FWD_SMEM(HD, BK, NWG, PIPE) (1024 + 2 * 64 * (NWG) * (HD) + ((PIPE) ? 10 : 8) * (BK) * (HD))

#if SK_HAVE_WGMMA

__device__ __forceinline__ u32 smem_u32(const void *p) {
#ifdef SK_EMU
  return sk_emu::smem_addr(p);
#else
  return (u32)__cvta_generic_to_shared(p);
#endif
}

/* A 128-byte-swizzle matrix descriptor at shared address a: 8-row groups 1024 bytes apart (SBO), the
 * next 64 columns of an MN-major operand lbo bytes on (unused for K-major) */
__device__ __forceinline__ unsigned long long wg_desc(u32 a, u32 lbo) {
  return (unsigned long long)((a & 0x3ffffu) >> 4) | (unsigned long long)((lbo >> 4) & 0x3fffu) << 16 |
         (unsigned long long)(1024u >> 4) << 32 | 1ull << 62;
}

/* byte offset of element (r, c) in a tile of R rows (see above) */
template <int R>
__device__ __forceinline__ u32 sw_off(int r, int c) {
  return (u32)((c >> 6) * R * 128 + r * 128 + ((((c & 63) >> 3) ^ (r & 7)) << 4) + (c & 7) * 2);
}

/* Starts copying rows [r0, r0 + R) x HD of a bf16 matrix (row r at src + r * rs; rows at or past n as
 * zeros) into the swizzled tile at dst (the caller commits and waits). */
template <int R, int HD, int NT>
__device__ __forceinline__ void sw_tile_async(unsigned char *dst, const bf16 *src, i64 rs, i64 r0, i64 n) {
  constexpr int C8 = HD / 8;
  for (int i = (int)threadIdx.x; i < R * C8; i += NT) {
    int r = i / C8, c = (i % C8) * 8;
    bool ok = r0 + r < n;
    cp16((bf16 *)(dst + sw_off<R>(r, c)), src + (ok ? r0 + r : n - 1) * rs + c, ok);
  }
}

__device__ __forceinline__ void wg_fence() {
#ifdef SK_EMU
  sk_emu::wgmma_fence();
#else
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit() {
#ifdef SK_EMU
  sk_emu::wgmma_commit();
#else
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wg_wait() {
#ifdef SK_EMU
  sk_emu::wgmma_wait(N);
#else
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/* Waits for this thread's cp.async copies, makes them visible to the async proxy that wgmma reads
 * shared memory through (fence.proxy.async: cp.async writes by the generic proxy), then for the block:
 * the tile is ready for every warpgroup, and every warpgroup is done with the previous one (its products
 * waited for), whose buffer the next copy may take. */
__device__ __forceinline__ void wg_tiles_ready() {
  cp_wait<0>();
#ifndef SK_EMU
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
  __syncthreads();
}

/* keeps the compiler from moving accumulator reads or writes across the asynchronous products */
template <int N>
__device__ __forceinline__ void wg_regs(float (&d)[N]) {
#ifndef SK_EMU
#pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
#else
  (void)d;
#endif
}

/* ... and the A operand in registers of a product in flight: kept as they are until its wait */
template <int K>
__device__ __forceinline__ void wg_regs_a(u32 (&a)[K][4]) {
#ifndef SK_EMU
#pragma unroll
  for (int i = 0; i < K; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) asm volatile("" : "+r"(a[i][j])::"memory");
#else
  (void)a;
#endif
}

/* d (m64nN f32) op= A B: A (64 x 16) and B (N x 16) K-major from shared memory (scale_d 0: d = A B) */
template <int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], unsigned long long ad, unsigned long long bd, int scale_d);
/* d += A B: A from registers (the warp's 16 rows as mma.sync's A fragment), B (16 x N) MN-major */
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const u32 (&a)[4], unsigned long long bd);

#ifdef SK_EMU
template <int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], unsigned long long ad, unsigned long long bd, int scale_d) {
  sk_emu::wgmma_ss<N>(d, ad, bd, scale_d, 0, 0);
}
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const u32 (&a)[4], unsigned long long bd) {
  sk_emu::wgmma_rs<N>(d, a, bd, 1, 1);
}
#else
template <>
__device__ __forceinline__ void wgmma_ss<64>(float (&d)[32], unsigned long long ad, unsigned long long bd, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(ad), "l"(bd), "r"(scale_d));
}
template <>
__device__ __forceinline__ void wgmma_ss<128>(float (&d)[64], unsigned long long ad, unsigned long long bd, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(ad), "l"(bd), "r"(scale_d));
}
template <>
__device__ __forceinline__ void wgmma_rs<64>(float (&d)[32], const u32 (&a)[4], unsigned long long bd) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bd), "r"(1));
}
template <>
__device__ __forceinline__ void wgmma_rs<128>(float (&d)[64], const u32 (&a)[4], unsigned long long bd) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bd), "r"(1));
}
#endif

template <int N>
__device__ __forceinline__ float (&flat(float (&c)[N / 8][4]))[N / 2] {
  return *reinterpret_cast<float(*)[N / 2]>(&c);
}

/* The pieces of a key tile's work for one warpgroup (rows r0 .. r0 + 63; this warp's 16 from r0 + 16 w).
 * wg_scores issues S = Q K^T (qa: the warpgroup's Q tile, ka: the key tile's K; shared addresses) and
 * commits it; wg_pv issues O += P V (va: the tile's V) and commits it; the caller fences before and waits. */
template <int HD, int BK>
__device__ __forceinline__ void wg_scores(float (&s)[BK / 8][4], u32 qa, u32 ka) {
#pragma unroll
  for (int kk = 0; kk < HD / 16; kk++) { /* 16 columns of Q and K: atom kk / 4, 32 bytes each */
    const u32 off = (u32)(kk & 3) * 32;
    wgmma_ss<BK>(flat<BK>(s), wg_desc(qa + (u32)(kk >> 2) * 64 * 128 + off, 16),
                 wg_desc(ka + (u32)(kk >> 2) * BK * 128 + off, 16), kk > 0);
  }
  wg_commit();
}
template <int HD, int BK>
__device__ __forceinline__ void wg_pv(float (&acc)[HD / 8][4], const u32 (&pa)[BK / 16][4], u32 va) {
#pragma unroll
  for (int j = 0; j < BK / 16; j++) /* keys 16 j ..: rows of V's tile, 2048 bytes a step; 64 columns an atom (LBO) */
    wgmma_rs<HD>(flat<HD>(acc), pa[j], wg_desc(va + (u32)j * 2048, BK * 128));
  wg_commit();
}

/* The online softmax of a tile's raw scores s (masked when MASK: keys at or past S, causal keys past the
 * row): the running max m and sum l updated, s becomes P = exp2(s c2 - m) (fp32; c_to_a makes it the A
 * operand); returns in f the factor the accumulators of O take for the new max (the caller applies it). */
template <bool MASK, bool CAUSAL, int S, int BK>
__device__ __forceinline__ void wg_softmax(float (&s)[BK / 8][4], float (&m)[2], float (&l)[2], float (&f)[2], int k0,
                                           int r0, float c2) {
  const int lane = (int)threadIdx.x & 31, g = lane >> 2, t = lane & 3, w = ((int)threadIdx.x >> 5) & 3;
  const int ra = r0 + 16 * w + g; /* this thread's rows: ra, ra + 8 */
  if (MASK) {
#pragma unroll
    for (int nt = 0; nt < BK / 8; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int key = k0 + nt * 8 + 2 * t + (e & 1), row = ra + (e >= 2 ? 8 : 0);
        if (key >= S || (CAUSAL && key > row)) s[nt][e] = ninf();
      }
  }
  float x0 = fmx(s[0][0], s[0][1]), x1 = fmx(s[0][2], s[0][3]);
#pragma unroll
  for (int nt = 1; nt < BK / 8; nt++) {
    x0 = fmx(x0, fmx(s[nt][0], s[nt][1]));
    x1 = fmx(x1, fmx(s[nt][2], s[nt][3]));
  }
  float n0 = fmx(m[0], quad_max(x0) * c2), n1 = fmx(m[1], quad_max(x1) * c2);
  float u0 = n0, u1 = n1;
  if (MASK) u0 = n0 == ninf() ? 0.0f : n0, u1 = n1 == ninf() ? 0.0f : n1; /* a row masked so far */
  f[0] = ex2(m[0] - u0), f[1] = ex2(m[1] - u1);
  m[0] = n0, m[1] = n1;
  /* rounded before the tile's sums add in (__fmul_rn): a plain *= leaves NVRTC to contract it with the first add
   * into an FMA or not by the code around it, and the kernels that share this softmax (flash_fwd_wg, flash_fwd_ws)
   * promise the same bits (the lse's fmaf in wg_fwd_finish: where that choice did differ, session 26) */
  l[0] = __fmul_rn(l[0], f[0]), l[1] = __fmul_rn(l[1], f[1]);
#pragma unroll
  for (int nt = 0; nt < BK / 8; nt++) {
    s[nt][0] = ex2(fmaf(s[nt][0], c2, -u0)), s[nt][1] = ex2(fmaf(s[nt][1], c2, -u0));
    s[nt][2] = ex2(fmaf(s[nt][2], c2, -u1)), s[nt][3] = ex2(fmaf(s[nt][3], c2, -u1));
    l[0] += s[nt][0] + s[nt][1], l[1] += s[nt][2] + s[nt][3];
  }
}

template <int HD>
__device__ __forceinline__ void wg_rescale(float (&acc)[HD / 8][4], const float (&f)[2]) {
#pragma unroll
  for (int nt = 0; nt < HD / 8; nt++) acc[nt][0] *= f[0], acc[nt][1] *= f[0], acc[nt][2] *= f[1], acc[nt][3] *= f[1];
}

/* One key tile, each product waited for: S, the softmax, O rescaled, O += P V. */
template <bool MASK, bool CAUSAL, int S, int HD, int BK>
__device__ __forceinline__ void wg_fwd_tile(float (&acc)[HD / 8][4], float (&m)[2], float (&l)[2], u32 qa, u32 ka,
                                            u32 va, int k0, int r0, float c2) {
  float s[BK / 8][4], f[2];
  u32 pa[BK / 16][4];
  wg_fence();
  wg_scores<HD, BK>(s, qa, ka);
  wg_wait<0>();
  wg_regs<BK / 2>(flat<BK>(s));
  wg_softmax<MASK, CAUSAL, S, BK>(s, m, l, f, k0, r0, c2);
  c_to_a<BK>(pa, s);
  wg_rescale<HD>(acc, f);
  wg_regs<HD / 2>(flat<HD>(acc));
  wg_fence();
  wg_pv<HD, BK>(acc, pa, va);
  wg_wait<0>();
  wg_regs<HD / 2>(flat<HD>(acc));
}

/* Pipelined (FlashAttention-3's order inside a warpgroup): tile j's S and tile j - 1's P V are issued
 * together, the softmax of tile j runs on S's fp32 accumulators while P V still computes; once it is
 * done, O takes tile j's factor and P of tile j is packed into pa (the A registers of the P V in flight:
 * written only after its wait, as ptxas wants, else it serializes the wgmma). pa holds P of tile j - 1 on
 * entry (have: there is one), P of tile j on return; vp: tile j - 1's V. */
template <bool MASK, bool CAUSAL, int S, int HD, int BK>
__device__ __forceinline__ void wg_fwd_tile_pipe(float (&acc)[HD / 8][4], float (&m)[2], float (&l)[2],
                                                 u32 (&pa)[BK / 16][4], bool have, u32 qa, u32 ka, u32 vp, int k0,
                                                 int r0, float c2) {
  float s[BK / 8][4], f[2];
  wg_fence();
  wg_scores<HD, BK>(s, qa, ka);
  if (have) {
    wg_pv<HD, BK>(acc, pa, vp);
    wg_wait<1>(); /* S done, P V in flight */
  } else {
    wg_wait<0>();
  }
  wg_regs<BK / 2>(flat<BK>(s));
  wg_softmax<MASK, CAUSAL, S, BK>(s, m, l, f, k0, r0, c2);
  wg_wait<0>();
  wg_regs_a<BK / 16>(pa);
  wg_regs<HD / 2>(flat<HD>(acc));
  wg_rescale<HD>(acc, f);
  c_to_a<BK>(pa, s);
}

/* A warpgroup's last step of the forward: O = acc / l stored (rows r0 .. r0 + 63 of query head h, batch b: this
 * warp's 16), lse = m ln 2 + log l (the max m in base 2) as one fmaf: a plain m * ln2 + logf(l) was an FMA in
 * flash_fwd_ws and a multiply and an add in flash_fwd_wg on the H100 (session 26: NVRTC's choice, by the code
 * around it), so their lse differed in the last bit */
template <int S, int H, int HD>
__device__ __forceinline__ void wg_fwd_finish(bf16 *o, float *lse, i64 ldo, const float (&acc)[HD / 8][4],
                                              const float (&m)[2], const float (&l)[2], i64 b, int h, int r0) {
  const int lane = (int)threadIdx.x & 31, g = lane >> 2, t = lane & 3, w = ((int)threadIdx.x >> 5) & 3;
  const float ln2 = 0.6931471805599453f;
  float *lb = lse + ((i64)b * H + h) * S;
  float l0 = quad_sum(l[0]), l1 = quad_sum(l[1]);
  const int rm = r0 + 16 * w;
  store_rows<HD>(o + b * S * ldo + (i64)h * HD, ldo, rm, S, acc, 1.0f / l0, 1.0f / l1);
  if (t == 0) {
    if (rm + g < S) lb[rm + g] = fmaf(m[0], ln2, logf(l0));
    if (rm + g + 8 < S) lb[rm + g + 8] = fmaf(m[1], ln2, logf(l1));
  }
}

#endif /* SK_HAVE_WGMMA */

/* Forward: grid (ceil(S / (64 NWG)), H, B), block 128 NWG, SK_WG_FWD_SMEM(HD, BK, NWG, PIPE) bytes of
 * dynamic shared memory; each warpgroup 64 query rows; K and V tiles of BK keys, the next tile's copy
 * issued after the one barrier a tile. PIPE: wg_fwd_tile_pipe's order, so tile j - 1's V is read while
 * tile j + 1's copy lands: V takes three buffers (K two); else wg_fwd_tile's, two of each. */
template <i64 S_, int H, int KV, int HD, bool CAUSAL, int BK, int NWG, bool PIPE = false>
__device__ void flash_fwd_wg(bf16 *o, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, i64 ldo, i64 ldq,
                             i64 ldk, i64 ldv) {
  static_assert(HD == 64 || HD == 128, "flash_fwd_wg: head dim 64 or 128");
  static_assert(BK == 64 || BK == 128, "flash_fwd_wg: key tiles of 64 or 128");
#if SK_HAVE_WGMMA
  constexpr int S = (int)S_, BQ = 64 * NWG, NT = 128 * NWG, QB = 64 * HD * 2, KB = BK * HD * 2, NVB = PIPE ? 3 : 2;
  const float c2 = (float)(1.4426950408889634 / sqrt((double)HD)); /* scale * log2 e */
  unsigned char *base = (unsigned char *)dyn_smem(SK_WG_FWD_SMEM(HD, BK, NWG, PIPE));
  base += (1024u - (smem_u32(base) & 1023u)) & 1023u; /* the swizzle atoms' alignment */
  unsigned char *qs = base, *ks = base + NWG * QB, *vs = ks + 2 * KB;
  /* the warpgroup by a shuffle from lane 0: ptxas then knows it (and every branch on it) uniform in the
   * warp, so no wgmma sits on a path it takes for divergent */
  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 7, 0);
  FlashBlock fb = flash_block(CAUSAL);
  i64 b = fb.b;
  int h = fb.h, kvh = h / (H / KV);
  const int q0 = fb.t * BQ, r0 = q0 + 64 * wg;
  const bf16 *kb = k + b * S * ldk + (i64)kvh * HD, *vb = v + b * S * ldv + (i64)kvh * HD;
  for (int x = 0; x < NWG; x++)
    sw_tile_async<64, HD, NT>(qs + x * QB, q + b * S * ldq + (i64)h * HD, ldq, q0 + 64 * x, S);
  sw_tile_async<BK, HD, NT>(ks, kb, ldk, 0, S);
  sw_tile_async<BK, HD, NT>(vs, vb, ldv, 0, S);
  cp_commit();
  float acc[HD / 8][4], m[2] = {ninf(), ninf()}, l[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < HD / 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  u32 pa[BK / 16][4]; /* PIPE: P of the last tile, its P V not yet issued (when have) */
  bool have = false;
  const u32 qa = smem_u32(qs + wg * QB);
  const int kend = CAUSAL ? (q0 + BQ < S ? q0 + BQ : S) : S;
  const int ntiles = (kend + BK - 1) / BK;
  for (int it = 0; it < ntiles; it++) {
    const int k0 = it * BK;
    wg_tiles_ready(); /* tile it landed; every warpgroup is done with the buffers the next copy takes */
    if (it + 1 < ntiles) {
      sw_tile_async<BK, HD, NT>(ks + ((it + 1) & 1) * KB, kb, ldk, k0 + BK, S);
      sw_tile_async<BK, HD, NT>(vs + ((it + 1) % NVB) * KB, vb, ldv, k0 + BK, S);
      cp_commit();
    }
    const u32 ka = smem_u32(ks + (it & 1) * KB), va = smem_u32(vs + (it % NVB) * KB);
    if (r0 < S && (!CAUSAL || k0 <= r0 + 63)) { /* else every key of the tile is past this warpgroup's rows */
      const bool mask = k0 + BK > S || (CAUSAL && k0 + BK - 1 > r0);
      if (PIPE) {
        const u32 vp = smem_u32(vs + ((it + NVB - 1) % NVB) * KB);
        if (mask) wg_fwd_tile_pipe<true, CAUSAL, S, HD, BK>(acc, m, l, pa, have, qa, ka, vp, k0, r0, c2);
        else wg_fwd_tile_pipe<false, CAUSAL, S, HD, BK>(acc, m, l, pa, have, qa, ka, vp, k0, r0, c2);
        have = true;
      } else {
        if (mask) wg_fwd_tile<true, CAUSAL, S, HD, BK>(acc, m, l, qa, ka, va, k0, r0, c2);
        else wg_fwd_tile<false, CAUSAL, S, HD, BK>(acc, m, l, qa, ka, va, k0, r0, c2);
      }
    } else if (PIPE && have) { /* the warpgroup's last tile was the previous one: its P V now */
      wg_fence();
      wg_pv<HD, BK>(acc, pa, smem_u32(vs + ((it + NVB - 1) % NVB) * KB));
      wg_wait<0>();
      wg_regs<HD / 2>(flat<HD>(acc));
      have = false;
    }
  }
  if (PIPE && have) { /* the last tile's P V (its V stays: no copy after it) */
    wg_fence();
    wg_pv<HD, BK>(acc, pa, smem_u32(vs + ((ntiles - 1) % NVB) * KB));
    wg_wait<0>();
    wg_regs<HD / 2>(flat<HD>(acc));
  }
  wg_fwd_finish<S, H, HD>(o, lse, ldo, acc, m, l, b, h, r0);
#else
  (void)o, (void)lse, (void)q, (void)k, (void)v, (void)ldo, (void)ldq, (void)ldk, (void)ldv;
  __trap(); /* not built for this architecture: the runtime offers it on sm_90a only */
#endif
}

} // namespace sk

#endif
