/* codegen/cuda_wgmma_cfg.c — the tiles of the attention forward and backward on Hopper's warpgroup MMA
 * (runtime/cuda/kernels/shardk_wgmma.cuh, shardk_wgmma_bwd.cuh; sm_90a): the candidates cuda_kernels_emu
 * checks and the kernel benchmark's sweep times (`SHARDK_ATTN_SWEEP=only cuda_kernels_gpu`,
 * tests/cuda/flash_sweep.c).
 *
 * Dynamic shared memory: Q (64 NWG rows) once and K and V tiles of BK keys double-buffered (pipelined:
 * V in three buffers), 128 NWG hd + 8 BK hd (10 BK hd) bytes and 1024 of alignment (SK_WG_FWD_SMEM; in the
 * lists' order, {BK, NWG, pipelined}): hd 64: 81, 49, 41, 73, 97, 57 and 89 KiB; hd 128: 99, 148, 81,
 * 113 and 97 KiB (under the 227 KiB of an sm_90 block). Registers (ptxas -v, sm_90a):
 * docs/performance.md. The order is a guess until the sweep has timed them.
 *
 * The warp-specialized forward (shardk_wgmma_ws.cuh, {BK, consumers, 0, stages}; last: candidates, never the
 * default, until a GPU has timed them): Q of 64 per consumer and the ring's stages of K and V (SK_WS_FWD_SMEM:
 * 128 nwg hd + 4 stages BK hd, and 1024): hd 64: 113 and 81 KiB; hd 128: 129 and 161 KiB. At least three
 * stages: a stage is refilled only after the next tile's products (its V is read by the P V issued with the
 * next tile's S), so with two the producer's copy of tile j + 1 would start only when tile j is done. */
#include <stdio.h>

#include "cuda_kernels.h"

static const CuWgTile W64[] = {{128, 2, 0, 0}, {64, 2, 0, 0},  {64, 1, 0, 0},  {128, 1, 0, 0}, {128, 2, 1, 0},
                               {64, 2, 1, 0},  {128, 1, 1, 0}, {128, 2, 0, 3}, {64, 2, 0, 4}};
static const CuWgTile W128[] = {{64, 2, 0, 0}, {128, 1, 0, 0}, {64, 1, 0, 0}, {64, 2, 1, 0},
                                {64, 1, 1, 0}, {64, 2, 0, 3},  {64, 2, 0, 4}};

int cuk_wg_variants(int64_t hd, CuWgTile *v, int max) {
  if (hd != 64 && hd != 128) return 0;
  const CuWgTile *c = hd == 64 ? W64 : W128;
  int n = hd == 64 ? (int)(sizeof W64 / sizeof W64[0]) : (int)(sizeof W128 / sizeof W128[0]);
  if (n > max) n = max;
  for (int i = 0; i < n; i++) v[i] = c[i];
  return n;
}

int64_t cuk_wg_smem(int64_t hd, const CuWgTile *t) {
  if (t->ws) return 1024 + 128 * t->nwg * hd + 4 * t->ws * t->bk * hd; /* SK_WS_FWD_SMEM */
  return 1024 + 128 * t->nwg * hd + (t->pipe ? 10 : 8) * t->bk * hd;
}

int cuk_wg_threads(const CuWgTile *t) { return 128 * (t->nwg + (t->ws > 0)); }

const char *cuk_wg_tag(const CuWgTile *t, char *buf, size_t n) {
  if (t->ws) snprintf(buf, n, "ws%dx%dx%d", t->bk, t->nwg, t->ws);
  else snprintf(buf, n, "wg%dx%d%s", t->bk, t->nwg, t->pipe ? "p" : "");
  return buf;
}

/* The backward (shardk_wgmma_bwd.cuh), {bt, nwg, pipelined}: dK/dV (which 1) holds K and V of 64 nwg keys
 * and streams Q and dO tiles of bt queries with their lse and D (SK_WG_KV_SMEM: 256 nwg hd + (4 bt hd + 8 bt)
 * a buffer, two buffers, three pipelined, and 1024 of alignment): hd 64: 66, 50, 82.5 and 66.5 KiB; hd 128:
 * 130, 98 and 162.5 KiB; dQ (which 2) holds Q and dO of 64 nwg queries and streams K and V tiles of bt keys
 * (SK_WG_Q_SMEM: 256 nwg hd + 8 bt hd, pipelined 10 bt hd): hd 64: 97, 65, 49, 113 and 73 KiB; hd 128: 129,
 * 97 and 145 KiB. Registers (ptxas -v, sm_90a): docs/performance.md. The order is a guess until the sweep
 * has timed them. */
static const CuWgBwdTile KV64[] = {{64, 2, 0}, {64, 1, 0}, {64, 2, 1}, {64, 1, 1}};
static const CuWgBwdTile KV128[] = {{64, 2, 0}, {64, 1, 0}, {64, 2, 1}};
static const CuWgBwdTile Q64[] = {{128, 2, 0}, {64, 2, 0}, {64, 1, 0}, {128, 2, 1}, {64, 2, 1}};
static const CuWgBwdTile Q128[] = {{64, 2, 0}, {64, 1, 0}, {64, 2, 1}};

int cuk_wg_bwd_variants(int which, int64_t hd, CuWgBwdTile *v, int max) {
  if ((hd != 64 && hd != 128) || (which != 1 && which != 2)) return 0;
  const CuWgBwdTile *c = which == 1 ? (hd == 64 ? KV64 : KV128) : hd == 64 ? Q64 : Q128;
  int n = which == 1 ? (hd == 64 ? 4 : 3) : hd == 64 ? 5 : 3;
  if (n > max) n = max;
  for (int i = 0; i < n; i++) v[i] = c[i];
  return n;
}

int64_t cuk_wg_bwd_smem(int which, int64_t hd, const CuWgBwdTile *t) {
  if (which == 1) return 1024 + 256 * t->nwg * hd + (t->pipe ? 3 : 2) * (4 * t->bt * hd + 8 * t->bt);
  return 1024 + 256 * t->nwg * hd + (t->pipe ? 10 : 8) * t->bt * hd;
}

/* The backward in one kernel (shardk_wgmma_bwd1.cuh), {64, nwg, 0}: K and V of 64 nwg keys, two Q and two dO
 * tiles of 64 queries, a 64 x 64 bf16 dS^T tile a warpgroup, two lse and two D tiles (SK_WG_BWD1_SMEM):
 * hd 64: 82 and 58 KiB; hd 128: 146 and 106 KiB. Registers (ptxas -v, sm_90a): docs/performance.md. */
static const CuWgBwdTile F64[] = {{64, 2, 0}, {64, 1, 0}};
static const CuWgBwdTile F128[] = {{64, 2, 0}, {64, 1, 0}};

int cuk_wg_bwd1_variants(int64_t hd, CuWgBwdTile *v, int max) {
  if (hd != 64 && hd != 128) return 0;
  const CuWgBwdTile *c = hd == 64 ? F64 : F128;
  int n = 2 < max ? 2 : max;
  for (int i = 0; i < n; i++) v[i] = c[i];
  return n;
}

int64_t cuk_wg_bwd1_smem(int64_t hd, const CuWgBwdTile *t) {
  return 1024 + 256 * t->nwg * hd + 2 * 256 * hd + 8192 * t->nwg + 1024;
}
