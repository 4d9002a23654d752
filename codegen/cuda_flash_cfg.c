/* codegen/cuda_flash_cfg.c — the tiles of the tensor-core attention (runtime/cuda/kernels/shardk_flash.cuh):
 * the configuration the compiler emits, and the candidates the kernel benchmark times side by side
 * (`SHARDK_ATTN_SWEEP=1 cuda_kernels_gpu`, tests/cuda/flash_sweep.c) and cuda_kernels_emu checks. A
 * trainer carries them all and times them at each kernel's first call (SHARDRT_ATTN_AUTOTUNE,
 * runtime/cuda/attn_tune.c); the first is what runs without the autotuning.
 *
 * Limits of every candidate: the tiles live in dynamic shared memory as runtime/cuda/kernels/shardk_flash_smem.cuh
 * lays them out (the K and V, or Q and dO, tiles double-buffered: 8 bt (hd + 8) bytes; with rs the warps' own
 * rows too), at most 227 KiB a block (sm_90; the runtime sets the kernel's MaxDynamicSharedMemorySize at its
 * first launch, and the autotuning skips a candidate a smaller GPU cannot give). The first entry stays
 * within 48 KiB, so that the compiled default launches on every sm_80+ GPU. Registers without spills in the
 * products' loop (ptxas -v for sm_90, docs/performance.md: every candidate added with the dynamic tiles has
 * none at all; #0 and #1's dK/dV at hd 128 keep 20 bytes, their rs twins #5 and #6 none).
 * Shared memory bounds the kernels with one m-tile a warp: each ldmatrix.x4 (4 cycles of the SM's
 * 128 bytes a cycle) feeds 2 mma per m-tile, so 2 m-tiles a warp halve the ldmatrix per mma; the
 * dK/dV kernel's 2 m-tiles (candidate 5) need 255 registers and keep a few addresses in local memory
 * (candidate 9: the same with K and V in shared memory, no spill). rs reads the resident operand by one more
 * ldmatrix.x4 per m-tile and k-chunk (at 64-row tiles, 1 for every 4 of the streamed operand) to free
 * 4 mt hd / 16 registers a thread a resident matrix: FlashAttention-2's layout for the hd-128 backward.
 */
#include "cuda_kernels.h"

#include "../runtime/cuda/kernels/shardk_flash_smem.cuh" /* the kernels' layout */

/* {fwd, kv, q}, each {m-tiles per warp, warps, streamed tile rows, min blocks per SM, operand rows in shared
 * memory}; the first is the one emitted */
static const CuFlashCfg V64[] = {
    {{2, 4, 64, 0, 0}, {1, 4, 64, 0, 0}, {1, 4, 64, 0, 0}}, /* 128 query rows / 64 keys per block (fwd), 64 rows (bwd) */
    {{1, 4, 64, 0, 0}, {1, 4, 32, 3, 0}, {1, 4, 32, 0, 0}}, /* fewer registers (fwd 3 blocks per SM; dK/dV 168: 3) */
    {{1, 8, 64, 0, 0}, {1, 8, 64, 0, 0}, {1, 8, 64, 0, 0}}, /* 8 warps of 16 rows */
    {{2, 4, 32, 0, 0}, {1, 8, 32, 0, 0}, {2, 4, 16, 0, 0}}, /* 32 rows a warp (dQ: half the ldmatrix per mma) */
    {{1, 4, 32, 0, 0}, {1, 2, 64, 0, 0}, {1, 2, 64, 0, 0}}, /* fwd: 127 registers, 4 blocks per SM; bwd: 32 rows per block */
    {{1, 8, 32, 0, 0}, {2, 4, 16, 0, 0}, {1, 8, 32, 0, 0}}, /* fwd: 127 registers, 2 blocks of 8 warps; dK/dV: 32 keys a warp */
    {{2, 8, 64, 0, 0}, {1, 2, 32, 0, 0}, {1, 4, 16, 0, 0}}, /* fwd: 256 query rows per block */
    /* tiles over 48 KiB (dynamic shared memory) */
    {{1, 4, 128, 0, 0}, {1, 4, 128, 0, 1}, {1, 4, 128, 0, 0}}, /* 128-row tiles: 72 KiB fwd / dQ, dK/dV 92 KiB (K, V resident) */
    {{1, 8, 128, 0, 0}, {1, 8, 128, 0, 1}, {1, 8, 128, 0, 0}}, /* the same, 8 warps (dK/dV 110 KiB) */
    {{2, 4, 64, 0, 0}, {2, 4, 32, 0, 1}, {1, 4, 64, 0, 0}},    /* dK/dV: 32 keys a warp without #5's spill (K, V resident) */
};
static const CuFlashCfg V128[] = {
    {{1, 4, 32, 0, 0}, {1, 4, 32, 0, 0}, {1, 4, 32, 0, 0}},
    {{1, 8, 32, 0, 0}, {1, 8, 32, 0, 0}, {1, 8, 32, 0, 0}},
    {{1, 4, 16, 0, 0}, {1, 4, 16, 0, 0}, {1, 4, 16, 0, 0}},
    /* tiles over 48 KiB (dynamic shared memory); dK/dV and dQ with their own rows resident in shared memory */
    {{1, 4, 64, 0, 0}, {1, 4, 64, 0, 1}, {1, 4, 64, 0, 1}},  /* 64-row tiles: fwd 68 KiB, dK/dV 103 KiB, dQ 102 KiB */
    {{1, 8, 64, 0, 0}, {1, 8, 64, 0, 1}, {1, 8, 64, 0, 1}},  /* the same, 8 warps (dK/dV 137 KiB, dQ 136 KiB) */
    {{1, 4, 128, 0, 0}, {1, 4, 32, 0, 1}, {1, 4, 32, 0, 1}}, /* fwd: 128 keys (136 KiB); bwd: #0's tiles, no spill */
    {{1, 8, 128, 0, 0}, {1, 8, 32, 0, 1}, {1, 4, 64, 0, 1}}, /* fwd: 8 warps, 128 keys; dK/dV: #1's tiles, no spill */
};

int cuk_flash_variants(int64_t hd, CuFlashCfg *v, int max) {
  const CuFlashCfg *c = hd <= 64 ? V64 : V128;
  int n = hd <= 64 ? (int)(sizeof V64 / sizeof V64[0]) : (int)(sizeof V128 / sizeof V128[0]);
  if (n > max) n = max;
  for (int i = 0; i < n; i++) v[i] = c[i];
  return n;
}

CuFlashCfg cuk_flash_cfg(int64_t hd) { return hd <= 64 ? V64[0] : V128[0]; }

int64_t cuk_flash_smem(int which, int64_t hd, const CuFlashTile *t) {
  int64_t bt = t->bt, mt = t->mt, w = t->w, rs = t->rs != 0;
  return which == 0   ? SK_FLASH_SMEM_FWD(bt, hd, mt, w, rs)
         : which == 1 ? SK_FLASH_SMEM_KV(bt, hd, mt, w, rs)
                      : SK_FLASH_SMEM_Q(bt, hd, mt, w, rs);
}
