/* runtime/cuda/kernels/shardk_norm.cuh — LayerNorm and RMSNorm, forward and backward (included by
 * shardk.cuh): one block per row, or one warp per row in 16-byte vectors for bf16 rows of a multiple of
 * 256; the weight and bias gradients from per-block partials summed in order (by a colsum / sum_parts
 * launch: no float atomics). Uses shardk.cuh's loads, vectors, cp.async
 * and reductions. */
#ifndef SHARDK_NORM_CUH
#define SHARDK_NORM_CUH

namespace sk {

/* ---- norms: one block per row (forward), NT threads, thread t owns columns t + NT*k ---------- */

/* A LayerNorm row's mean and 1 / sqrt(variance + eps), from its elements in the block's registers (xv[k]: column
 * t + NT*k, 0 past D; s: this thread's sum of them), by two block sums: the forward and the backward alike. */
template <i64 D, int NT, int NPER>
__device__ __forceinline__ void ln_row_stats(const float (&xv)[NPER], float s, float *red, float eps, float &mean,
                                             float &rstd) {
  mean = block_sum<NT>(s, red) * (1.0f / (float)D);
  float q = 0.0f;
#pragma unroll
  for (int k = 0; k < NPER; k++) {
    i64 c = threadIdx.x + (i64)NT * k;
    float dv = xv[k] - mean;
    q += c < D ? dv * dv : 0.0f;
  }
  rstd = 1.0f / sqrtf(block_sum<NT>(q, red) * (1.0f / (float)D) + eps);
}

template <class TX, class TW, i64 D, int NT, int NPER>
__device__ void layernorm(TX *y, const TX *x, const TW *w, const TW *b, float eps) {
  __shared__ float red[64];
  i64 row = blockIdx.x;
  const TX *xr = x + row * D;
  float xv[NPER], s = 0.0f;
#pragma unroll
  for (int k = 0; k < NPER; k++) {
    i64 c = threadIdx.x + (i64)NT * k;
    xv[k] = c < D ? ld(xr + c) : 0.0f;
    s += xv[k];
  }
  float mean, rstd;
  ln_row_stats<D, NT, NPER>(xv, s, red, eps, mean, rstd);
#pragma unroll
  for (int k = 0; k < NPER; k++) {
    i64 c = threadIdx.x + (i64)NT * k;
    if (c < D) st(y + row * D + c, (xv[k] - mean) * rstd * ld(w + c) + ld(b + c));
  }
}

/* LayerNorm (LN) or RMSNorm for bf16 rows of D a multiple of 256 (up to 2048): a warp per row (8 a block, grid
 * ceil(ROWS / 8)), lane holding the 8 columns of vectors lane + 32 j (16-byte loads and stores); the sums are warp
 * shuffles. b: LayerNorm's bias (unused by RMSNorm). */
template <bool LN, class TW, i64 ROWS, i64 D>
__device__ void norm_vec(bf16 *y, const bf16 *x, const TW *w, const TW *b, float eps) {
  constexpr int J = (int)(D / 256);
  const int lane = (int)threadIdx.x & 31;
  const i64 row = (i64)blockIdx.x * 8 + ((int)threadIdx.x >> 5);
  if (row >= ROWS) return; /* whole warps: the shuffles below stay uniform */
  float xv[J][8], s = 0.0f;
#pragma unroll
  for (int j = 0; j < J; j++) {
    ld8(xv[j], x + row * D + 8 * (lane + 32 * j));
#pragma unroll
    for (int i = 0; i < 8; i++) s += LN ? xv[j][i] : xv[j][i] * xv[j][i];
  }
  float mean = 0.0f, q = s;
  if (LN) {
    mean = warp_sum(s) * (1.0f / (float)D);
    q = 0.0f;
#pragma unroll
    for (int j = 0; j < J; j++)
#pragma unroll
      for (int i = 0; i < 8; i++) q += (xv[j][i] - mean) * (xv[j][i] - mean);
  }
  const float rstd = 1.0f / sqrtf(warp_sum(q) * (1.0f / (float)D) + eps);
#pragma unroll
  for (int j = 0; j < J; j++) {
    const i64 c = 8 * (lane + 32 * j);
    float wv[8], bv[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}, o[8];
    ld8(wv, w + c);
    if (LN) ld8(bv, b + c);
#pragma unroll
    for (int i = 0; i < 8; i++) o[i] = LN ? (xv[j][i] - mean) * rstd * wv[i] + bv[i] : xv[j][i] * rstd * wv[i];
    st8(y + row * D + c, o);
  }
}

template <class TX, class TW, i64 D, int NT, int NPER>
__device__ void rmsnorm(TX *y, const TX *x, const TW *w, float eps) {
  __shared__ float red[64];
  i64 row = blockIdx.x;
  float xv[NPER], q = 0.0f;
#pragma unroll
  for (int k = 0; k < NPER; k++) {
    i64 c = threadIdx.x + (i64)NT * k;
    xv[k] = c < D ? ld(x + row * D + c) : 0.0f;
    q += xv[k] * xv[k];
  }
  float rstd = 1.0f / sqrtf(block_sum<NT>(q, red) * (1.0f / (float)D) + eps);
#pragma unroll
  for (int k = 0; k < NPER; k++) {
    i64 c = threadIdx.x + (i64)NT * k;
    if (c < D) st(y + row * D + c, xv[k] * rstd * ld(w + c));
  }
}

/* v rounded to T's precision (dx as the norm's backward alone would store it). */
__device__ __forceinline__ float as_dt(float v, const float *) { return v; }
__device__ __forceinline__ float as_dt(float v, const bf16 *) { return rbf(v); }

/* The backward's dx (v) plus the residual gradient's carry at res where RES (passes/fuse_normres.c: the add after the
 * norm's backward done by its kernel; res unused, nullptr, without): dx rounded to its dtype, then the sum in f32,
 * stored rounded: the bits of the two nodes it replaces (the norm's dx stored, then the add), so a program keeps its
 * numbers with the fusion or without. res may be dx's very tensor, each element read by the thread that then stores
 * it. The add is __fadd_rn: a plain + lets NVRTC contract f32 dx's last product and the add into one FMA (dx never
 * rounded: on the H100 every f32 case differed from the two nodes' bits, session 26), which __fadd_rn never is.
 * Every backward form's carry is this one rule, at compile time (RES a template flag: no branch, one body). */
template <bool RES, class T> __device__ __forceinline__ float with_res(float v, const T *res, i64 i) {
  if constexpr (RES) return __fadd_rn(as_dt(v, res), ld(res + i));
  else return v;
}
/* ... for norm_bwd_ring's 8 bf16 columns o at res + at (one 16-byte load) */
template <bool RES> __device__ __forceinline__ void with_res8(float (&o)[8], const bf16 *res, i64 at) {
  if constexpr (RES) {
    float rv[8];
    ld8(rv, res + at);
#pragma unroll
    for (int i = 0; i < 8; i++) o[i] = __fadd_rn(as_dt(o[i], res), rv[i]);
  }
}

/* LayerNorm (LN) or RMSNorm backward, first stage: grid P blocks, block p does rows p, p + P, ...: dx (+ res where
 * RES: with_res), and its partial weight gradients part[p, 0:D] (dw) and, LN, part[p, D:2D] (db) — summed by the
 * emitter's second launch (colsum or sum_parts). */
template <bool LN, class TX, class TW, i64 ROWS, i64 D, int NT, int NPER, int P, bool RES>
__device__ void norm_bwd_block(TX *dx, const TX *res, float *part, const TX *x, const TW *w, const TX *dy, float eps) {
  constexpr i64 M = LN ? 2 * D : D;
  __shared__ float red[64];
  float wv[NPER], dwa[NPER], dba[NPER];
#pragma unroll
  for (int k = 0; k < NPER; k++) {
    i64 c = threadIdx.x + (i64)NT * k;
    wv[k] = c < D ? ld(w + c) : 0.0f;
    dwa[k] = 0.0f;
    dba[k] = 0.0f;
  }
  for (i64 row = blockIdx.x; row < ROWS; row += P) {
    float xv[NPER], gv[NPER], s = 0.0f;
#pragma unroll
    for (int k = 0; k < NPER; k++) {
      i64 c = threadIdx.x + (i64)NT * k;
      xv[k] = c < D ? ld(x + row * D + c) : 0.0f;
      gv[k] = c < D ? ld(dy + row * D + c) : 0.0f;
      s += LN ? xv[k] : xv[k] * xv[k];
    }
    float mean = 0.0f, rstd;
    if constexpr (LN) ln_row_stats<D, NT, NPER>(xv, s, red, eps, mean, rstd);
    else rstd = 1.0f / sqrtf(block_sum<NT>(s, red) * (1.0f / (float)D) + eps);
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int k = 0; k < NPER; k++) {
      float xh = (LN ? xv[k] - mean : xv[k]) * rstd, g = gv[k] * wv[k];
      s1 += g;
      s2 += g * xh;
      dwa[k] += gv[k] * xh;
      dba[k] += gv[k];
      xv[k] = xh;
    }
    if constexpr (LN) {
      block_sum2<NT>(s1, s2, red);
      s1 *= 1.0f / (float)D;
      s2 *= 1.0f / (float)D;
    } else {
      s2 = block_sum<NT>(s2, red) * (1.0f / (float)D);
    }
#pragma unroll
    for (int k = 0; k < NPER; k++) {
      i64 c = threadIdx.x + (i64)NT * k;
      if (c < D)
        st(dx + row * D + c,
           with_res<RES>(LN ? rstd * (gv[k] * wv[k] - s1 - xv[k] * s2) : rstd * (gv[k] * wv[k] - xv[k] * s2), res,
                         row * D + c));
    }
  }
#pragma unroll
  for (int k = 0; k < NPER; k++) {
    i64 c = threadIdx.x + (i64)NT * k;
    if (c < D) {
      part[(i64)blockIdx.x * M + c] = dwa[k];
      if constexpr (LN) part[(i64)blockIdx.x * M + D + c] = dba[k];
    }
  }
}

/* LayerNorm backward for rows of D <= 1024 (a multiple of 32): one warp per row, lane holding columns
 * lane + 32 k, so a row's three sums are warp shuffles without block barriers; 8 warps per block, grid P.
 * Each block's dw / db partials (summed over its rows in row order, then over its warps in warp order)
 * go to part[blockIdx.x] as with norm_bwd_block; dx + res as with_res says. */
template <class TX, class TW, i64 ROWS, i64 D, int P, bool RES>
__device__ void layernorm_bwd_warp(TX *dx, const TX *res, float *part, const TX *x, const TW *w, const TX *dy, float eps) {
  constexpr int E = (int)(D / 32), W = 8;
  __shared__ float red[2 * D];
  const int lane = (int)threadIdx.x & 31, wp = (int)threadIdx.x >> 5;
  float wv[E], dwa[E], dba[E];
#pragma unroll
  for (int k = 0; k < E; k++) wv[k] = ld(w + lane + 32 * k), dwa[k] = 0.0f, dba[k] = 0.0f;
  for (i64 row = (i64)blockIdx.x * W + wp; row < ROWS; row += (i64)P * W) {
    const TX *xr = x + row * D, *gr = dy + row * D;
    float xv[E], gv[E], s = 0.0f;
#pragma unroll
    for (int k = 0; k < E; k++) xv[k] = ld(xr + lane + 32 * k), gv[k] = ld(gr + lane + 32 * k), s += xv[k];
    float mean = warp_sum(s) * (1.0f / (float)D), q = 0.0f;
#pragma unroll
    for (int k = 0; k < E; k++) q += (xv[k] - mean) * (xv[k] - mean);
    float rstd = 1.0f / sqrtf(warp_sum(q) * (1.0f / (float)D) + eps), s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int k = 0; k < E; k++) {
      float xh = (xv[k] - mean) * rstd, g = gv[k] * wv[k];
      s1 += g;
      s2 += g * xh;
      dwa[k] += gv[k] * xh;
      dba[k] += gv[k];
      xv[k] = xh;
    }
    s1 = warp_sum(s1) * (1.0f / (float)D);
    s2 = warp_sum(s2) * (1.0f / (float)D);
#pragma unroll
    for (int k = 0; k < E; k++)
      st(dx + row * D + lane + 32 * k,
         with_res<RES>(rstd * (gv[k] * wv[k] - s1 - xv[k] * s2), res, row * D + lane + 32 * k));
  }
  for (int i = (int)threadIdx.x; i < 2 * (int)D; i += 32 * W) red[i] = 0.0f;
  for (int v = 0; v < W; v++) { /* warps in order: the same sum every run */
    __syncthreads();
    if (wp == v)
#pragma unroll
      for (int k = 0; k < E; k++) red[lane + 32 * k] += dwa[k], red[D + lane + 32 * k] += dba[k];
  }
  __syncthreads();
  for (int i = (int)threadIdx.x; i < 2 * (int)D; i += 32 * W) part[(i64)blockIdx.x * 2 * D + i] = red[i];
}

/* LayerNorm (LN) or RMSNorm backward for bf16 rows of D a multiple of 256 H (up to 1024 H): dx, and each block's dw
 * (/ db) partial sums for the emitter's column-sum launch (on the H100 of 2026-11-27 two launches beat the sums over
 * the blocks in this one by arrival counters at every shape timed: 20.0 against 28.9 us at LayerNorm [8192, 768], 44.1
 * against 55.2 at RMSNorm [8192, 2048]; docs/performance.md). Bytes: x and dy read once, dx written once (3 ROWS D 2:
 * the floor), and the blocks' partials, P M floats (M = 2D, or D) written once and read once by the column sums
 * (L2-resident: 1.6 MB at P 264, D 768, against the floor's 37.7 MB at [8192, 768]; RMSNorm at [8192, 2048]: 2.2 MB
 * at P 264 against 100.7 MB, 2 %).
 * Grid P blocks of W warps, dynamic shared memory 4 D + 4 W S D / H bytes (w as floats, the rings; with H > 1 16 W more). A row is split over
 * H warps (H 1 up to D 1024; H 2 at D 2048, where one warp's 8 J columns a lane would not fit 255 registers), the
 * W / H rows of a block in flight at once: warp v = H u + h of block b does half h (columns h D / H ..) of rows
 * b W / H + u + P (W / H) i (i = 0, 1, ...): the same rows in the same order every run. A warp streams its part of
 * its rows through a ring of S stages in shared memory (cp.async: S - 1 rows in flight while one is computed; a lane
 * copies and reads only its own 16-byte pieces, so the ring needs no barrier); per row mean and rstd once, reused for
 * dx and the sums (with H 2 each row sum is the two warps' sums added through shared memory after a __syncthreads:
 * every warp of the block goes through the same iterations, a pair past the last row only passing the barriers); the
 * lane's dw / db sums (its 8 J columns) in registers. Then the block's warps' sums in warp order: the block's row
 * of part, for the emitter's column sum (the second launch). RES: the residual gradient's carry res, its 8 columns
 * of a row loaded (16 bytes) just before they are stored with dx added (with_res8): 4 ROWS D 2 bytes. */
template <bool LN, class TW, i64 ROWS, i64 D, int P, int W, int S, int H, bool RES>
__device__ void norm_bwd_ring(bf16 *dx, const bf16 *res, float *part, const bf16 *x, const TW *w, const bf16 *dy, float eps) {
  constexpr i64 DH = D / H; /* a warp's columns of a row */
  constexpr int J = (int)(DH / 256), WR = W / H;
  static_assert(DH % 256 == 0 && W % H == 0 && S >= 2, "norm_bwd_ring: D / H a multiple of 256, W a multiple of H");
  constexpr i64 M = LN ? 2 * D : D;
  const int lane = (int)threadIdx.x & 31, wp = (int)threadIdx.x >> 5, h = wp % H, u = wp / H;
  float *wsm = (float *)SK_DYN_SMEM();
  float *xch = wsm + D + (i64)W * S * DH; /* H > 1: the warps' row sums after the rings, 4 W floats (a slot a sum) */
  bf16 *ring = (bf16 *)(wsm + D) + (i64)wp * S * 2 * DH; /* this warp's S stages: its part of the x row, then of dy */
  for (int i = (int)threadIdx.x; i < (int)D; i += 32 * W) wsm[i] = ld(w + i);
  float dwa[J][8], dba[J][8];
#pragma unroll
  for (int j = 0; j < J; j++)
#pragma unroll
    for (int i = 0; i < 8; i++) dwa[j][i] = 0.0f, dba[j][i] = 0.0f;
  __syncthreads();
  const i64 b0 = (i64)blockIdx.x * WR, step = (i64)P * WR, col = h * DH; /* b0 + it step: the block's first row */
  const bf16 *xh0 = x + col, *dy0 = dy + col;
#pragma unroll
  for (int s = 0; s < S - 1; s++) { /* the first S - 1 rows in flight */
    const i64 r = b0 + u + s * step;
    if (r < ROWS)
#pragma unroll
      for (int j = 0; j < J; j++) {
        const i64 c = 8 * (lane + 32 * j);
        cp16(ring + (i64)s * 2 * DH + c, xh0 + r * D + c, true);
        cp16(ring + (i64)s * 2 * DH + DH + c, dy0 + r * D + c, true);
      }
    cp_commit();
  }
  /* the row sum of v: over the warp, then (H > 1) over the row's H warps in h order */
  auto rowsum = [&](float v, int k) {
    v = warp_sum(v);
    if constexpr (H > 1) {
      if (lane == 0) xch[k * W + wp] = v;
      __syncthreads();
      v = 0.0f;
#pragma unroll
      for (int q = 0; q < H; q++) v += xch[k * W + u * H + q];
    }
    return v;
  };
  int it = 0;
  for (i64 rb = b0; rb < ROWS; rb += step, it++) { /* the same trip count for every warp of the block */
    const i64 r = rb + u, rn = r + (S - 1) * step; /* rn: the row S - 1 ahead, into the stage the previous row left */
    const bool act = r < ROWS;
    if (rn < ROWS) {
      bf16 *st4 = ring + (i64)((it + S - 1) % S) * 2 * DH;
#pragma unroll
      for (int j = 0; j < J; j++) {
        const i64 c = 8 * (lane + 32 * j);
        cp16(st4 + c, xh0 + rn * D + c, true);
        cp16(st4 + DH + c, dy0 + rn * D + c, true);
      }
    }
    cp_commit();
    cp_wait<S - 1>(); /* this row's copies have landed */
    /* the row stays in the ring: each pass reads its 16-byte pieces again (few registers: two blocks an SM) */
    const u32x4 *cx = (const u32x4 *)(ring + (i64)(it % S) * 2 * DH) + lane, *cg = cx + DH / 8;
    const float *wq = wsm + col + 8 * lane;
    float s = 0.0f;
    if (act)
#pragma unroll
      for (int j = 0; j < J; j++) {
        float v[8];
        unpack8(v, lds16(cx + 32 * j));
#pragma unroll
        for (int i = 0; i < 8; i++) s += LN ? v[i] : v[i] * v[i];
      }
    float mean = 0.0f, q = s;
    if (LN) {
      mean = rowsum(s, 0) * (1.0f / (float)D);
      q = 0.0f;
      if (act)
#pragma unroll
        for (int j = 0; j < J; j++) {
          float v[8];
          unpack8(v, lds16(cx + 32 * j));
#pragma unroll
          for (int i = 0; i < 8; i++) q += (v[i] - mean) * (v[i] - mean);
        }
    }
    const float rstd = 1.0f / sqrtf(rowsum(q, 1) * (1.0f / (float)D) + eps);
    float s1 = 0.0f, s2 = 0.0f;
    if (act)
#pragma unroll
      for (int j = 0; j < J; j++) {
        float xv[8], gv[8];
        unpack8(xv, lds16(cx + 32 * j));
        unpack8(gv, lds16(cg + 32 * j));
        float wv[8];
        lds8f(wv, wq + 256 * j);
#pragma unroll
        for (int i = 0; i < 8; i++) {
          const float xh = (xv[i] - mean) * rstd, g = gv[i] * wv[i];
          s1 += g;
          s2 += g * xh;
          dwa[j][i] += gv[i] * xh;
          dba[j][i] += gv[i];
        }
      }
    if (LN) s1 = rowsum(s1, 2) * (1.0f / (float)D);
    s2 = rowsum(s2, 3) * (1.0f / (float)D);
    if (act)
#pragma unroll
      for (int j = 0; j < J; j++) {
        float xv[8], gv[8], o[8];
        unpack8(xv, lds16(cx + 32 * j));
        unpack8(gv, lds16(cg + 32 * j));
        float wv[8];
        lds8f(wv, wq + 256 * j);
#pragma unroll
        for (int i = 0; i < 8; i++) {
          const float xh = (xv[i] - mean) * rstd;
          o[i] = LN ? rstd * (gv[i] * wv[i] - s1 - xh * s2) : rstd * (gv[i] * wv[i] - xh * s2);
        }
        with_res8<RES>(o, res, r * D + col + 8 * (lane + 32 * j)); /* read before stored (res may be dx) */
        *(u32x4 *)(dx + r * D + col + 8 * (lane + 32 * j)) =
            u32x4{pack2(o[0], o[1]), pack2(o[2], o[3]), pack2(o[4], o[5]), pack2(o[6], o[7])};
      }
  }
  cp_wait<0>();
  __syncwarp(); /* every lane of the warp done with its ring: it now holds the warp's sums (its DH columns of dw, db) */
  float *red = (float *)ring;
#pragma unroll
  for (int j = 0; j < J; j++)
#pragma unroll
    for (int i = 0; i < 8; i++) {
      red[8 * (lane + 32 * j) + i] = dwa[j][i];
      if constexpr (LN) red[DH + 8 * (lane + 32 * j) + i] = dba[j][i];
    }
  __syncthreads();
  float *mine = part + (i64)blockIdx.x * M;
  for (i64 c = threadIdx.x; c < M; c += 32 * W) { /* the warps' sums in warp order */
    const i64 t = c >= D, cc = c - t * D, hc = cc / DH, lc = t * DH + cc % DH; /* dw (t 0) or db column cc: half hc */
    float s = 0.0f;
#pragma unroll
    for (int v = 0; v < WR; v++) s += ((const float *)((bf16 *)(wsm + D) + (i64)(v * H + hc) * S * 2 * DH))[lc];
    mine[c] = s;
  }
}

} // namespace sk

#endif
