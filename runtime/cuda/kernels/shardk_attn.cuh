/* runtime/cuda/kernels/shardk_attn.cuh — flash-style attention (included by shardk.cuh).
 *
 * q/o [B, S, H*HD], k/v [B, S, KV*HD], lse f32 [B, H, S]; query head h reads kv head
 * h / (H/KV). Every token-major operand comes with its row stride (ld*: elements between consecutive
 * tokens, H*HD or KV*HD when contiguous, more where it is a column slice of a wider tensor such as the
 * fused QKV [B, S, 3 H HD]; memplan's strided views, docs/memory.md): the strides follow the pointers,
 * in the pointers' order, lse and D having none. Batch b's rows start at b * S * ld. Scores never reach memory: K/V (or Q/dO) tiles go through shared memory as
 * fp32, each query (or key) row is TPR threads, thread `part` holding dims e*TPR + part,
 * e < HD/TPR; dot products are partial sums reduced over the TPR threads with shuffles.
 * Simple CUDA-core fp32 math (no tensor cores yet). Backward without atomics: dK/dV by key
 * blocks (looping over every query head of the group), dQ by query blocks, D = rowsum(dO o O)
 * first. Loops are uniform across each block so the shuffles see full warps.
 *
 * Ring attention's blocks (context parallelism, ops.def ATTN_BLOCK / ATTN_BLOCK_BWD) where the
 * tensor-core kernels do not take them (f32, other head dims: shardk_flash.cuh's POS has the same
 * contract) use the same kernels with TK keys (k/v [B, TK, KV*HD]) and the rows' global positions
 * qpos [S], kpos [TK] (nullptr: the row indices): causal masks kpos[j] <= qpos[i]; a row that sees no
 * key gets o 0 and lse -inf; the backward takes the whole attention's o and lse (every block combined).
 */
#ifndef SHARDK_ATTN_CUH
#define SHARDK_ATTN_CUH

namespace sk {

template <int TPR>
__device__ __forceinline__ float group_sum(float v) {
  for (int m = TPR / 2; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

/* Whether query qi sees key kj (both in range). */
template <bool CAUSAL>
__device__ __forceinline__ bool attn_sees(i64 qi, i64 kj, const int *qpos, const int *kpos) {
  return !CAUSAL || (qpos ? kpos[kj] <= qpos[qi] : kj <= qi);
}

/* Forward: grid (ceil(S/BQ), H, B), block BQ*TPR. */
template <class T, i64 S, int H, int KV, int HD, bool CAUSAL, int BQ, int BK, int TPR, i64 TK = S>
__device__ void sdpa_fwd(T *o, float *lse, const T *q, const T *k, const T *v, i64 ldo, i64 ldq, i64 ldk, i64 ldv,
                         const int *qpos = nullptr, const int *kpos = nullptr) {
  constexpr int E = HD / TPR, NT = BQ * TPR;
  __shared__ float ks[BK][HD];
  __shared__ float vs[BK][HD];
  const float scale = (float)(1.0 / sqrt((double)HD));
  int t = (int)threadIdx.x, part = t % TPR;
  i64 b = blockIdx.z;
  int h = (int)blockIdx.y, kvh = h / (H / KV);
  i64 q0 = (i64)blockIdx.x * BQ, qi = q0 + t / TPR;
  bool live = qi < S;
  float qv[E], ov[E];
#pragma unroll
  for (int e = 0; e < E; e++) {
    qv[e] = live ? ld(q + (b * S + qi) * ldq + h * HD + e * TPR + part) : 0.0f;
    ov[e] = 0.0f;
  }
  float m = ninf(), l = 0.0f;
  const i64 kend = CAUSAL && !qpos ? (q0 + BQ < S ? q0 + BQ : S) : TK;
  for (i64 k0 = 0; k0 < kend; k0 += BK) {
    for (int idx = t; idx < BK * HD; idx += NT) {
      int j = idx / HD, d = idx % HD;
      i64 kj = k0 + j;
      ks[j][d] = kj < TK ? ld(k + (b * TK + kj) * ldk + kvh * HD + d) : 0.0f;
      vs[j][d] = kj < TK ? ld(v + (b * TK + kj) * ldv + kvh * HD + d) : 0.0f;
    }
    __syncthreads();
    float sc[BK], tmax = ninf();
#pragma unroll
    for (int j = 0; j < BK; j++) {
      float p = 0.0f;
#pragma unroll
      for (int e = 0; e < E; e++) p += qv[e] * ks[j][e * TPR + part];
      p = group_sum<TPR>(p) * scale;
      i64 kj = k0 + j;
      bool ok = live && kj < TK && attn_sees<CAUSAL>(qi, kj, qpos, kpos);
      sc[j] = ok ? p : ninf();
      tmax = fmaxv(tmax, sc[j]);
    }
    float mn = fmaxv(m, tmax);
    if (mn != ninf()) {
      float corr = expf(m - mn);
      l *= corr;
#pragma unroll
      for (int e = 0; e < E; e++) ov[e] *= corr;
#pragma unroll
      for (int j = 0; j < BK; j++) {
        float pj = expf(sc[j] - mn);
        l += pj;
#pragma unroll
        for (int e = 0; e < E; e++) ov[e] += pj * vs[j][e * TPR + part];
      }
      m = mn;
    }
    __syncthreads();
  }
  if (live) {
    float inv = l > 0.0f ? 1.0f / l : 0.0f; /* l 0: the row sees no key of this block */
#pragma unroll
    for (int e = 0; e < E; e++) st(o + (b * S + qi) * ldo + h * HD + e * TPR + part, ov[e] * inv);
    if (part == 0) lse[((i64)b * H + h) * S + qi] = l > 0.0f ? m + logf(l) : ninf();
  }
}

/* Backward, stage 1: Dd[b, h, s] = sum over dims of dO * O. Grid (ceil(S/BQ), H, B), block BQ*TPR. */
template <class T, i64 S, int H, int HD, int BQ, int TPR>
__device__ void sdpa_bwd_dot(float *Dd, const T *o, const T *dout, i64 ldo, i64 lddo) {
  constexpr int E = HD / TPR;
  int t = (int)threadIdx.x, part = t % TPR;
  i64 b = blockIdx.z;
  int h = (int)blockIdx.y;
  i64 qi = (i64)blockIdx.x * BQ + t / TPR;
  bool live = qi < S;
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < E; e++) {
    i64 off = h * HD + e * TPR + part;
    s += live ? ld(o + (b * S + qi) * ldo + off) * ld(dout + (b * S + qi) * lddo + off) : 0.0f;
  }
  s = group_sum<TPR>(s);
  if (live && part == 0) Dd[((i64)b * H + h) * S + qi] = s;
}

/* Backward, dK and dV: grid (ceil(TK/BKV), KV, B), block BKV*TPR; each key row sums over every
 * query of every head of its group (tiles of BQT queries in shared memory). */
template <class T, i64 S, int H, int KV, int HD, bool CAUSAL, int BKV, int BQT, int TPR, i64 TK = S>
__device__ void sdpa_bwd_kv(T *dk, T *dv, const T *q, const T *k, const T *v, const float *lse, const float *Dd,
                            const T *dout, i64 lddk, i64 lddv, i64 ldq, i64 ldk, i64 ldv, i64 lddo,
                            const int *qpos = nullptr, const int *kpos = nullptr) {
  constexpr int E = HD / TPR, NT = BKV * TPR, G = H / KV;
  __shared__ float qs[BQT][HD];
  __shared__ float dos[BQT][HD];
  __shared__ float ls[BQT];
  __shared__ float dd[BQT];
  const float scale = (float)(1.0 / sqrt((double)HD));
  int t = (int)threadIdx.x, part = t % TPR;
  i64 b = blockIdx.z;
  int kvh = (int)blockIdx.y;
  i64 k0 = (i64)blockIdx.x * BKV, kj = k0 + t / TPR;
  bool live = kj < TK;
  float kv[E], vv[E], dka[E], dva[E];
#pragma unroll
  for (int e = 0; e < E; e++) {
    i64 off = kvh * HD + e * TPR + part;
    kv[e] = live ? ld(k + (b * TK + kj) * ldk + off) : 0.0f;
    vv[e] = live ? ld(v + (b * TK + kj) * ldv + off) : 0.0f;
    dka[e] = 0.0f;
    dva[e] = 0.0f;
  }
  for (int g = 0; g < G; g++) {
    int h = kvh * G + g;
    for (i64 qt = CAUSAL && !qpos ? (k0 / BQT) * BQT : 0; qt < S; qt += BQT) {
      for (int idx = t; idx < BQT * HD; idx += NT) {
        int i = idx / HD, d = idx % HD;
        i64 qi = qt + i, off = h * HD + d;
        qs[i][d] = qi < S ? ld(q + (b * S + qi) * ldq + off) : 0.0f;
        dos[i][d] = qi < S ? ld(dout + (b * S + qi) * lddo + off) : 0.0f;
      }
      for (int i = t; i < BQT; i += NT) {
        i64 qi = qt + i;
        ls[i] = qi < S ? lse[((i64)b * H + h) * S + qi] : 0.0f;
        dd[i] = qi < S ? Dd[((i64)b * H + h) * S + qi] : 0.0f;
      }
      __syncthreads();
      for (int i = 0; i < BQT; i++) {
        i64 qi = qt + i;
        float s = 0.0f, dp = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++) {
          s += qs[i][e * TPR + part] * kv[e];
          dp += dos[i][e * TPR + part] * vv[e];
        }
        s = group_sum<TPR>(s) * scale;
        dp = group_sum<TPR>(dp);
        bool ok = live && qi < S && attn_sees<CAUSAL>(qi, kj, qpos, kpos);
        float p = ok ? expf(s - ls[i]) : 0.0f, ds = p * (dp - dd[i]);
#pragma unroll
        for (int e = 0; e < E; e++) {
          dva[e] += p * dos[i][e * TPR + part];
          dka[e] += ds * qs[i][e * TPR + part];
        }
      }
      __syncthreads();
    }
  }
  if (live) {
#pragma unroll
    for (int e = 0; e < E; e++) {
      i64 off = kvh * HD + e * TPR + part;
      st(dk + (b * TK + kj) * lddk + off, dka[e] * scale);
      st(dv + (b * TK + kj) * lddv + off, dva[e]);
    }
  }
}

/* Backward, dQ: grid (ceil(S/BQ), H, B), block BQ*TPR; K/V tiles of BK keys in shared memory. */
template <class T, i64 S, int H, int KV, int HD, bool CAUSAL, int BQ, int BK, int TPR, i64 TK = S>
__device__ void sdpa_bwd_q(T *dq, const T *q, const T *k, const T *v, const float *lse, const float *Dd,
                           const T *dout, i64 lddq, i64 ldq, i64 ldk, i64 ldv, i64 lddo, const int *qpos = nullptr,
                           const int *kpos = nullptr) {
  constexpr int E = HD / TPR, NT = BQ * TPR;
  __shared__ float ks[BK][HD];
  __shared__ float vs[BK][HD];
  const float scale = (float)(1.0 / sqrt((double)HD));
  int t = (int)threadIdx.x, part = t % TPR;
  i64 b = blockIdx.z;
  int h = (int)blockIdx.y, kvh = h / (H / KV);
  i64 q0 = (i64)blockIdx.x * BQ, qi = q0 + t / TPR;
  bool live = qi < S;
  float qv[E], dov[E], dqa[E];
#pragma unroll
  for (int e = 0; e < E; e++) {
    i64 off = h * HD + e * TPR + part;
    qv[e] = live ? ld(q + (b * S + qi) * ldq + off) : 0.0f;
    dov[e] = live ? ld(dout + (b * S + qi) * lddo + off) : 0.0f;
    dqa[e] = 0.0f;
  }
  float li = live ? lse[((i64)b * H + h) * S + qi] : 0.0f, di = live ? Dd[((i64)b * H + h) * S + qi] : 0.0f;
  const i64 kend = CAUSAL && !qpos ? (q0 + BQ < S ? q0 + BQ : S) : TK;
  for (i64 k0 = 0; k0 < kend; k0 += BK) {
    for (int idx = t; idx < BK * HD; idx += NT) {
      int j = idx / HD, d = idx % HD;
      i64 kj = k0 + j;
      ks[j][d] = kj < TK ? ld(k + (b * TK + kj) * ldk + kvh * HD + d) : 0.0f;
      vs[j][d] = kj < TK ? ld(v + (b * TK + kj) * ldv + kvh * HD + d) : 0.0f;
    }
    __syncthreads();
    for (int j = 0; j < BK; j++) {
      i64 kj = k0 + j;
      float s = 0.0f, dp = 0.0f;
#pragma unroll
      for (int e = 0; e < E; e++) {
        s += qv[e] * ks[j][e * TPR + part];
        dp += dov[e] * vs[j][e * TPR + part];
      }
      s = group_sum<TPR>(s) * scale;
      dp = group_sum<TPR>(dp);
      bool ok = live && kj < TK && attn_sees<CAUSAL>(qi, kj, qpos, kpos);
      float p = ok ? expf(s - li) : 0.0f, ds = p * (dp - di);
#pragma unroll
      for (int e = 0; e < E; e++) dqa[e] += ds * ks[j][e * TPR + part];
    }
    __syncthreads();
  }
  if (live) {
#pragma unroll
    for (int e = 0; e < E; e++) st(dq + (b * S + qi) * lddq + h * HD + e * TPR + part, dqa[e] * scale);
  }
}

/* Ring attention's merge (ops.def ATTN_COMBINE): o, lse of two attentions of the same queries over
 * disjoint keys merged by log-sum-exp; one thread per (b, h, s) row, so o may alias o1 or o2 and
 * lse lse1 or lse2. Grid-stride over B*H*S rows. */
template <class T, i64 B, i64 S, int H, int HD>
__device__ void attn_combine(T *o, float *lse, const T *o1, const float *lse1, const T *o2, const float *lse2) {
  for (i64 r = (i64)blockIdx.x * blockDim.x + threadIdx.x; r < B * H * S; r += (i64)gridDim.x * blockDim.x) {
    i64 s = r % S, h = (r / S) % H, b = r / (S * H), at = (b * S + s) * H * HD + h * HD;
    float a = lse1[r], c = lse2[r], m = fmaxv(a, c);
    if (m == ninf()) {
      lse[r] = ninf();
      for (int d = 0; d < HD; d++) st(o + at + d, 0.0f);
      continue;
    }
    float ea = expf(a - m), ec = expf(c - m), w1 = ea / (ea + ec), w2 = ec / (ea + ec);
    for (int d = 0; d < HD; d++) st(o + at + d, w1 * ld(o1 + at + d) + w2 * ld(o2 + at + d));
    lse[r] = m + logf(ea + ec);
  }
}

} // namespace sk

#endif
