/* runtime/cuda/kernels/sk_emu_wgmma.h — the emulator's (sk_emu.h) model of Hopper's warpgroup MMA,
 * wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 (PTX ISA, "Asynchronous Warpgroup Level Matrix
 * Multiply-Accumulate"), as shardk_wgmma.cuh issues it. Included by sk_emu.h; a test tool.
 *
 * Shared memory: the emulator's shared window is the launch's dynamic shared memory, at window
 * address 0 (sk_emu.h aligns it to 1024 bytes); smem_addr gives a pointer's window address, what
 * __cvta_generic_to_shared gives on the GPU. A kernel builds its matrix descriptors from such addresses
 * and the model reads its operands by decoding the descriptor's bits, never from a pointer the kernel
 * passes: a wrong start address, LBO, SBO, swizzle mode or transpose flag reads other elements.
 *
 * The 64-bit matrix descriptor: bits 0-13 start address >> 4, 16-29 leading dimension byte offset (LBO)
 * >> 4, 32-45 stride dimension byte offset (SBO) >> 4, 49-51 matrix base offset (only 0 is modelled:
 * other values abort), 62-63 swizzle (0 none, 1 128-byte, 2 64-byte, 3 32-byte). Core matrices are 8
 * rows of 16 bytes (8 bf16, "T"). An operand is MN x 16 (K): A is M 64 x K, B is N x K. Byte offset of
 * element (mn, k) before swizzling, the canonical layouts (W: the swizzle width in bytes):
 *   K-major (transpose 0), none:  (mn/8) SBO + (mn%8) 16 + (k/8) LBO + (k%8) 2
 *   K-major, W-byte swizzle:      (mn/8) SBO + (mn%8) W  + (k/8) 16  + (k%8) 2          (LBO unused)
 *   MN-major (transpose 1), none: (mn/8) SBO + (k%8) 16 + (k/8) LBO + (mn%8) 2
 *   MN-major, W-byte swizzle:     (mn/8 % (W/16)) 16 + (mn/8 / (W/16)) LBO + (k%8) W + (k/8) SBO + (mn%8) 2
 * and the address start + offset is swizzled as the hardware does it, on the address's own bits:
 * bits [4, 4+b) ^= bits [7, 7+b) with b = 3, 2, 1 for 128, 64, 32 bytes (CUTLASS's Swizzle<b,4,3>).
 *
 * Registers (lane = 4 g + t of warp w of the warpgroup, which owns rows 16 w .. 16 w + 15):
 *   accumulator d[N/2]: d[4 i + 2 h + j] = D[16 w + g + 8 h][8 i + 2 t + j]
 *   A from registers a[4]: a[0] = A[16w+g][2t, 2t+1], a[1] = A[16w+g+8][2t, 2t+1], a[2] = A[16w+g][2t+8, 2t+9],
 *   a[3] = A[16w+g+8][2t+8, 2t+9] (low 16 bits the lower column)
 * D = A B + (scale_d ? D : 0), every product and sum in fp32 (k in order: the hardware's order is
 * unspecified).
 *
 * Asynchrony: a wgmma is queued; commit_group closes the queued ones into a group; wait_group(n)
 * completes every group but the n most recent, reading shared memory then (a kernel that overwrites an
 * operand before waiting reads the new bits, as the GPU may). Until then the accumulators keep their old
 * values, so a kernel that reads them before waiting computes garbage here too. A wgmma with no
 * wgmma.fence since the thread's last wait (or its start) aborts, as does a block whose size is not a
 * multiple of 128 (warpgroups) or an operand outside the shared window. Not modelled: the proxies
 * (on the GPU wgmma reads shared memory through the async proxy, so a kernel fences its own stores and
 * cp.async copies with fence.proxy.async before the barrier that publishes them: shardk_wgmma.cuh's
 * wg_tiles_ready; the emulator cannot tell a missing one).
 */
#ifndef SK_EMU_WGMMA_H
#define SK_EMU_WGMMA_H

#include <vector>

namespace sk_emu {

/* the window address of p in the launch's dynamic shared memory */
inline uint32_t smem_addr(const void *p) {
  Block &b = fblk();
  const unsigned char *c = (const unsigned char *)p;
  if (!b.dyn_smem || c < b.dyn_smem || c > b.dyn_smem + b.dyn_bytes) {
    fprintf(stderr, "sk_emu: smem_addr of a pointer outside the dynamic shared memory\n");
    abort();
  }
  return (uint32_t)(c - b.dyn_smem);
}

/* A matrix descriptor's fields (the layout above), decoded once per operand of a wgmma */
struct WgDesc {
  uint32_t start, lbo, sbo;
  int mode, bits, W;
};
inline WgDesc wgmma_desc(uint64_t desc) {
  WgDesc d;
  d.start = (uint32_t)(desc & 0x3fffu) << 4, d.lbo = (uint32_t)((desc >> 16) & 0x3fffu) << 4,
  d.sbo = (uint32_t)((desc >> 32) & 0x3fffu) << 4;
  const int base = (int)((desc >> 49) & 7u);
  d.mode = (int)(desc >> 62);
  if (base != 0) {
    fprintf(stderr, "sk_emu: wgmma descriptor with a matrix base offset (%d): not modelled\n", base);
    abort();
  }
  d.bits = d.mode == 1 ? 3 : d.mode == 2 ? 2 : d.mode == 3 ? 1 : 0, d.W = 16 << d.bits;
  return d;
}

/* the swizzled shared-window byte address of element (mn, k) of the operand d describes; mn_major: the
 * transpose flag (1: MN-major) */
__attribute__((always_inline)) inline uint32_t wgmma_elem_addr(const WgDesc &d, int mn, int k, int mn_major) {
  const int mode = d.mode, bits = d.bits, W = d.W;
  const uint32_t lbo = d.lbo, sbo = d.sbo;
  uint32_t off;
  if (!mn_major)
    off = (uint32_t)(mn / 8) * sbo + (uint32_t)(mn % 8) * (uint32_t)W + (uint32_t)(k / 8) * (mode ? 16u : lbo) +
          (uint32_t)(k % 8) * 2u;
  else if (!mode)
    off = (uint32_t)(mn / 8) * sbo + (uint32_t)(k % 8) * 16u + (uint32_t)(k / 8) * lbo + (uint32_t)(mn % 8) * 2u;
  else {
    const int cw = W / 16, ch = mn / 8;
    off = (uint32_t)(ch % cw) * 16u + (uint32_t)(ch / cw) * lbo + (uint32_t)(k % 8) * (uint32_t)W +
          (uint32_t)(k / 8) * sbo + (uint32_t)(mn % 8) * 2u;
  }
  const uint32_t a = d.start + off;
  return a ^ (((a >> 7) & ((1u << bits) - 1u)) << 4);
}
inline uint32_t wgmma_elem_addr(uint64_t desc, int mn, int k, int mn_major) {
  return wgmma_elem_addr(wgmma_desc(desc), mn, k, mn_major);
}

/* the bf16 at shared-window address addr of b's dynamic shared memory, widened */
__attribute__((always_inline)) inline float wgmma_smem_bf16(const Block &b, uint32_t addr) {
  if ((size_t)addr + 2 > b.dyn_bytes || (addr & 1u)) {
    fprintf(stderr, "sk_emu: wgmma operand at shared address %u outside the %u bytes of dynamic shared memory\n",
            addr, b.dyn_bytes);
    abort();
  }
  uint16_t h;
  memcpy(&h, b.dyn_smem + addr, 2);
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

struct WgOp {
  float *d;            /* the issuing thread's accumulators */
  int n, scale_d, a_reg, ta, tb, group; /* group: -1 until committed */
  uint64_t adesc, bdesc;
  uint32_t slab[32][4]; /* register A: the warp's fragments at issue */
};
/* a warpgroup's wgmma, as its first thread to issue it gave it: the others must give the same */
struct WgIssued {
  unsigned long long block; /* Block::blocks_run when issued */
  unsigned seq;             /* the issuing thread's count of wgmmas in the block */
  uint64_t adesc, bdesc;
  int n, a_reg, ta, tb, scale_d;
};
enum { WG_RING = 256 }; /* a thread may run this many wgmmas ahead of its warpgroup's slowest */
struct WgState {
  std::vector<WgOp> ops[1024]; /* per thread, in issue order */
  int groups[1024];            /* groups committed so far */
  int fenced[1024];            /* a wgmma.fence since the last wait */
  unsigned seq[1024];          /* wgmmas issued in the block */
  WgIssued ring[8][WG_RING];   /* per warpgroup of the block */
};
inline WgState &wg() {
  static thread_local WgState *s = new WgState();
  return *s;
}
/* this thread's index, its state reset at its first wgmma instruction in a block */
inline int wg_me() {
  WgState &s = wg();
  Block &b = fblk();
  int t = me().linear;
  if (b.wgnew[t]) {
    s.ops[t].clear();
    s.groups[t] = 0;
    s.fenced[t] = 0;
    s.seq[t] = 0;
    b.wgnew[t] = 0;
  }
  return t;
}

inline void wgmma_fence() { wg().fenced[wg_me()] = 1; }
inline void wgmma_commit() {
  WgState &s = wg();
  int t = wg_me();
  for (WgOp &o : s.ops[t])
    if (o.group < 0) o.group = s.groups[t];
  s.groups[t]++;
}

inline void wgmma_complete(const WgOp &o) {
  const Block &b = fblk();
  const int l = lane(), g = l >> 2, t = l & 3, w = (me().linear >> 5) & 3;
  const WgDesc ad = o.a_reg ? WgDesc{} : wgmma_desc(o.adesc), bd = wgmma_desc(o.bdesc);
  float a[2][16], bcol[2][16]; /* this thread's two rows of A, and the two columns of B of a column tile */
  for (int h = 0; h < 2; h++) {
    const int row = 16 * w + g + 8 * h;
    for (int k = 0; k < 16; k++)
      a[h][k] = o.a_reg ? bf16_lo(o.slab[g * 4 + (k % 8) / 2][h + 2 * (k >= 8)], k & 1)
                        : wgmma_smem_bf16(b, wgmma_elem_addr(ad, row, k, o.ta));
  }
  for (int i = 0; i < o.n / 8; i++) {
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 16; k++) bcol[j][k] = wgmma_smem_bf16(b, wgmma_elem_addr(bd, 8 * i + 2 * t + j, k, o.tb));
    const float *ar[4] = {a[0], a[0], a[1], a[1]}, *bc[4] = {bcol[0], bcol[1], bcol[0], bcol[1]}; /* v: h = v >> 1, j = v & 1 */
    float acc[4];
    for (int v = 0; v < 4; v++) acc[v] = o.scale_d ? o.d[4 * i + v] : 0.0f;
    fma16x4(ar, bc, 1, acc);
    for (int v = 0; v < 4; v++) o.d[4 * i + v] = acc[v];
  }
}

/* wgmma.wait_group n: every group but the n most recent complete */
inline void wgmma_wait(int n) {
  WgState &s = wg();
  int t = wg_me();
  std::vector<WgOp> &ops = s.ops[t], keep;
  for (const WgOp &o : ops) {
    if (o.group >= 0 && o.group < s.groups[t] - n) wgmma_complete(o);
    else keep.push_back(o);
  }
  ops.swap(keep);
  s.fenced[t] = 0;
}

inline void wgmma_issue(WgOp &o) {
  WgState &s = wg();
  int t = wg_me();
  Block &b = fblk();
  if ((b.block_dim.x * b.block_dim.y * b.block_dim.z) % 128 != 0) {
    fprintf(stderr, "sk_emu: wgmma in a block of %u threads (not whole warpgroups)\n",
            b.block_dim.x * b.block_dim.y * b.block_dim.z);
    abort();
  }
  if (!s.fenced[t]) {
    fprintf(stderr, "sk_emu: wgmma without a wgmma.fence since the thread's last wait_group\n");
    abort();
  }
  /* .sync.aligned: the warpgroup's 128 threads issue the same wgmma, its descriptors (and shape, flags)
   * one operand of the whole warpgroup */
  WgIssued &r = s.ring[t / 128][s.seq[t] % WG_RING];
  const WgIssued mine = {b.blocks_run, s.seq[t]++, o.a_reg ? 0 : o.adesc, o.bdesc, o.n, o.a_reg, o.ta, o.tb, o.scale_d};
  if (r.block != mine.block || r.seq != mine.seq) {
    r = mine;
  } else if (r.adesc != mine.adesc || r.bdesc != mine.bdesc || r.n != mine.n || r.a_reg != mine.a_reg ||
             r.ta != mine.ta || r.tb != mine.tb || r.scale_d != mine.scale_d) {
    fprintf(stderr,
            "sk_emu: thread %d's wgmma #%u differs from its warpgroup's (descriptors %#llx %#llx, want %#llx %#llx; "
            "n %d / %d)\n",
            t, mine.seq, (unsigned long long)mine.adesc, (unsigned long long)mine.bdesc, (unsigned long long)r.adesc,
            (unsigned long long)r.bdesc, mine.n, r.n);
    abort();
  }
  o.group = -1;
  s.ops[t].push_back(o);
}

/* D (m64nN, f32) op= A (64 x 16, descriptor adesc; transpose ta) B (N x 16, descriptor bdesc; transpose tb) */
template <int N>
inline void wgmma_ss(float (&d)[N / 2], uint64_t adesc, uint64_t bdesc, int scale_d, int ta, int tb) {
  static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma: N a multiple of 8 up to 256");
  WgOp o;
  o.d = d, o.n = N, o.scale_d = scale_d, o.a_reg = 0, o.ta = ta, o.tb = tb, o.adesc = adesc, o.bdesc = bdesc;
  wgmma_issue(o);
}
/* ... with A from registers (each warp's 16 rows as a[4], the layout above) */
template <int N>
inline void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t bdesc, int scale_d, int tb) {
  static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma: N a multiple of 8 up to 256");
  Block &bk = fblk();
  uint32_t(*fr)[4] = bk.wgfrag[next_parity()];
  for (int i = 0; i < 4; i++) fr[me().linear][i] = a[i];
  syncwarp();
  WgOp o;
  o.d = d, o.n = N, o.scale_d = scale_d, o.a_reg = 1, o.ta = 0, o.tb = tb, o.adesc = 0, o.bdesc = bdesc;
  for (int l = 0; l < 32; l++)
    for (int i = 0; i < 4; i++) o.slab[l][i] = fr[warp_base() + l][i];
  wgmma_issue(o);
}

} // namespace sk_emu

#endif
