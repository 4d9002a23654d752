/* runtime/cuda/kernels/shardk_ce.cuh — cross-entropy kernels (included by shardk.cuh): whole rows, the
 * vocab-parallel parts, and the fused forward + backward of passes/fuse_ce.c (bf16 rows of a multiple of 8 on
 * chip: ce_fused_rows_smem). Uses shardk.cuh's loads, vectors (u32x4, unpack8, pack2, ex2) and block
 * reductions. */
#ifndef SHARDK_CE_CUH
#define SHARDK_CE_CUH

namespace sk {

/* ---- cross-entropy: one block per row, NT threads; LEN: valid columns (0: all) -------------- */
/* Valid local columns given the logical column of local column 0. */
template <i64 V, i64 LEN>
__device__ __forceinline__ i64 ce_nvalid(i64 col0) {
  if (LEN <= 0) return V;
  i64 n = LEN - col0;
  return n < 0 ? 0 : n > V ? V : n;
}
/* One 16-byte vector of bf16 (columns 8c..8c+7, 8c < NV) into the online max m and sum s of exp(x - m) over the
 * valid columns (< NV; masked only in the last vector). exp(x - m) as ex2(x log2 e - m log2 e): an FFMA and the
 * special-function unit (the rounding of m log2 e, |m| 2^-24 relative, is common to a row's terms). */
__device__ __forceinline__ void lse_add8(float &m, float &s, const u32x4 &q, int c, i64 NV) {
  float v[8];
  unpack8(v, q);
  if ((i64)8 * c + 8 > NV)
#pragma unroll
    for (int i = 0; i < 8; i++)
      if ((i64)8 * c + i >= NV) v[i] = ninf();
  const float cm = fmaxv(fmaxv(fmaxv(v[0], v[1]), fmaxv(v[2], v[3])), fmaxv(fmaxv(v[4], v[5]), fmaxv(v[6], v[7])));
  if (cm > m) {
    s *= ex2((m - cm) * SK_LOG2E);
    m = cm;
  }
  const float ml = m * SK_LOG2E;
#pragma unroll
  for (int i = 0; i < 8; i++) s += ex2(fmaf(v[i], SK_LOG2E, -ml));
}
/* The gradient of one vector (columns 8c..8c+7): sc * (exp(x - m) / s - onehot(t)) on valid columns, 0 past NV,
 * as (sc / s) exp(x - m) (exp as in lse_add8); the onehot (and the mask) only in the vectors that hold t or NV. */
__device__ __forceinline__ u32x4 ce_grad8(const u32x4 &q, int c, int t, float m, float inv, float sc, i64 NV) {
  float v[8];
  unpack8(v, q);
  const float ml = m * SK_LOG2E, g = sc * inv;
#pragma unroll
  for (int i = 0; i < 8; i++) v[i] = g * ex2(fmaf(v[i], SK_LOG2E, -ml));
  if ((i64)8 * c + 8 > NV || (t >> 3) == c)
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const i64 j = (i64)8 * c + i;
      if (j >= NV) v[i] = 0.0f;
      else if (j == t) v[i] = sc * (ex2(fmaf(ld_lane(q, i), SK_LOG2E, -ml)) * inv - 1.0f);
    }
  return u32x4{pack2(v[0], v[1]), pack2(v[2], v[3]), pack2(v[4], v[5]), pack2(v[6], v[7])};
}

template <class T, i64 NV, int NT>
__device__ __forceinline__ void row_lse(const T *xr, i64 nv, float &m, float &s, float *red) {
  m = ninf();
  s = 0.0f;
  if constexpr (sizeof(T) == 2 && NV % 8 == 0) { /* bf16 rows: 16-byte loads (4 in flight), a rescale per 8 values */
    const int nvv = (int)((nv + 7) / 8);
    for (int c0 = (int)threadIdx.x; c0 < nvv; c0 += 4 * NT) {
      u32x4 q[4];
#pragma unroll
      for (int u = 0; u < 4; u++)
        if (c0 + u * NT < nvv) q[u] = *(const u32x4 *)(xr + 8 * (c0 + u * NT));
#pragma unroll
      for (int u = 0; u < 4; u++)
        if (c0 + u * NT < nvv) lse_add8(m, s, q[u], c0 + u * NT, nv);
    }
  } else {
    for (i64 j = threadIdx.x; j < nv; j += NT) {
      float v = ld(xr + j);
      if (v > m) {
        s = s * expf(m - v) + 1.0f;
        m = v;
      } else {
        s += expf(v - m);
      }
    }
  }
  block_lse<NT>(m, s, red);
}

/* rowloss[r] = logsumexp(logits[r, :LEN]) - logits[r, t] for t = targets[r] >= 0, else 0. */
template <class T, i64 V, i64 LEN, int NT>
__device__ void ce_rows(float *rowloss, const T *logits, const int *targets, int *err) {
  __shared__ float red[64];
  i64 r = blockIdx.x;
  const T *xr = logits + r * V;
  int t = targets[r];
  const i64 nv = LEN > 0 ? LEN : V;
  float m, s;
  row_lse<T, V, NT>(xr, nv, m, s, red);
  if (threadIdx.x == 0) {
    if (t >= nv) *err = SK_ERR_TARGET;
    rowloss[r] = t >= 0 && t < nv ? m + logf(s) - ld(xr + t) : 0.0f;
  }
}
/* One block: loss = sum of rowloss / count of targets >= 0 (0 when none); cnt_out (if not
 * NULL) = dloss[0] / count — the scale of the gradient. */
template <i64 N, int NT>
__device__ void ce_mean(float *loss, const float *rowloss, const int *targets, const float *dloss, float *scale_out) {
  __shared__ float red[64];
  float s = 0.0f, c = 0.0f;
  for (i64 i = threadIdx.x; i < N; i += NT) {
    if (rowloss) s += rowloss[i];
    c += targets[i] >= 0 ? 1.0f : 0.0f;
  }
  block_sum2<NT>(s, c, red);
  if (threadIdx.x == 0) {
    if (loss) loss[0] = c > 0.0f ? s / c : 0.0f;
    if (scale_out) scale_out[0] = c > 0.0f ? dloss[0] / c : 0.0f;
  }
}
/* CE_MAX: m[r] = max over valid local columns (-inf if none). */
template <class T, i64 V, i64 LEN, int NT>
__device__ void ce_max(float *m, const T *logits, i64 col0) {
  __shared__ float red[64];
  i64 r = blockIdx.x, nv = ce_nvalid<V, LEN>(col0);
  float mx = ninf();
  for (i64 j = threadIdx.x; j < nv; j += NT) mx = fmaxv(mx, ld(logits + r * V + j));
  mx = warp_max(mx);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
  __syncthreads();
  if (threadIdx.x == 0) {
    float a = ninf();
    for (int i = 0; i < NT / 32; i++) a = fmaxv(a, red[i]);
    m[r] = a;
  }
}
/* CE_SUMS: st[r] = (sum of exp(l - m[r]) over valid local columns, the target's logit if held here). */
template <class T, i64 V, i64 LEN, int NT>
__device__ void ce_sums(float *st2, const T *logits, const int *targets, const float *m, i64 col0) {
  __shared__ float red[64];
  i64 r = blockIdx.x, nv = ce_nvalid<V, LEN>(col0);
  float mr = m[r], s = 0.0f;
  for (i64 j = threadIdx.x; j < nv; j += NT) s += expf(ld(logits + r * V + j) - mr);
  s = block_sum<NT>(s, red);
  if (threadIdx.x == 0) {
    i64 t = (i64)targets[r] - col0;
    st2[2 * r] = s;
    st2[2 * r + 1] = t >= 0 && t < nv ? ld(logits + r * V + t) : 0.0f;
  }
}
/* CE_LOSS (one block): out = (sum over rows with target >= 0 of log st0 + m - st1, their count). */
template <i64 N, i64 LEN, int NT>
__device__ void ce_loss(float *out, const float *st2, const float *m, const int *targets, int *err) {
  __shared__ float red[64];
  float s = 0.0f, c = 0.0f;
  for (i64 r = threadIdx.x; r < N; r += NT) {
    int t = targets[r];
    if (t < 0) continue;
    if (LEN > 0 && t >= LEN) *err = SK_ERR_TARGET;
    s += logf(st2[2 * r]) + m[r] - st2[2 * r + 1];
    c += 1.0f;
  }
  block_sum2<NT>(s, c, red);
  if (threadIdx.x == 0) {
    out[0] = s;
    out[1] = c;
  }
}
/* CE_GRAD: dl = scale * (exp(l - m) / st0 - onehot) on valid columns of rows with target >= 0, else 0. */
template <class T, i64 V, i64 LEN, int NT>
__device__ void ce_grad(T *dl, const T *logits, const int *targets, const float *m, const float *st2,
                        const float *scale, i64 col0) {
  i64 r = blockIdx.x, nv = ce_nvalid<V, LEN>(col0), t = (i64)targets[r] - col0;
  bool on = targets[r] >= 0;
  float mr = m[r], inv = 1.0f / st2[2 * r], sc = scale[0];
  for (i64 j = threadIdx.x; j < V; j += NT) {
    float d = 0.0f;
    if (on && j < nv) d = sc * (expf(ld(logits + r * V + j) - mr) * inv - (j == t ? 1.0f : 0.0f));
    st(dl + r * V + j, d);
  }
}
/* One row's gradient after row_lse (m, s): dlr = sc * (softmax - onehot(t)) on columns < nv, 0
 * elsewhere and where t < 0. Each thread reads a column (or 8) and writes the same: dlr may be xr. */
template <class T, i64 V, int NT>
__device__ __forceinline__ void ce_grad_row(T *dlr, const T *xr, int t, i64 nv, float m, float s, float sc) {
  float inv = 1.0f / s;
  if constexpr (sizeof(T) == 2 && V % 8 == 0) { /* 4 vectors a thread in flight, each read before it is written */
    const int nvv = (int)((nv + 7) / 8);
    const u32x4 zero = {0u, 0u, 0u, 0u};
    for (int c0 = (int)threadIdx.x; c0 < (int)(V / 8); c0 += 4 * NT) {
      u32x4 q[4];
#pragma unroll
      for (int u = 0; u < 4; u++)
        if (c0 + u * NT < nvv && t >= 0) q[u] = *(const u32x4 *)(xr + 8 * (c0 + u * NT));
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const int c = c0 + u * NT;
        if (c < (int)(V / 8)) *(u32x4 *)(dlr + 8 * c) = t >= 0 && c < nvv ? ce_grad8(q[u], c, t, m, inv, sc, nv) : zero;
      }
    }
  } else {
    for (i64 j = threadIdx.x; j < V; j += NT) {
      float d = 0.0f;
      if (t >= 0 && j < nv) d = sc * (expf(ld(xr + j) - m) * inv - (j == t ? 1.0f : 0.0f));
      st(dlr + j, d);
    }
  }
}
/* CROSS_ENTROPY_BWD per row: dl = scale[0] * (softmax - onehot) on columns < LEN, 0 elsewhere
 * and on rows with target < 0 (scale = dloss / count, from ce_mean). */
template <class T, i64 V, i64 LEN, int NT>
__device__ void ce_bwd_rows(T *dl, const T *logits, const int *targets, const float *scale) {
  __shared__ float red[64];
  i64 r = blockIdx.x;
  const i64 nv = LEN > 0 ? LEN : V;
  float m, s;
  row_lse<T, V, NT>(logits + r * V, nv, m, s, red);
  ce_grad_row<T, V, NT>(dl + r * V, logits + r * V, targets[r], nv, m, s, scale[0]);
}
/* CROSS_ENTROPY and its CROSS_ENTROPY_BWD in one pass over the logits (passes/fuse_ce.c): rowloss as
 * ce_rows, dl as ce_bwd_rows. dl may be the logits themselves: the target's logit is read first and
 * row_lse ends in a barrier, after which each thread rewrites only what it reads. */
template <class T, i64 V, i64 LEN, int NT>
__device__ void ce_fused_rows(T *dl, float *rowloss, const T *logits, const int *targets, const float *scale, int *err) {
  __shared__ float red[64];
  i64 r = blockIdx.x;
  const T *xr = logits + r * V;
  int t = targets[r];
  const i64 nv = LEN > 0 ? LEN : V;
  float xt = threadIdx.x == 0 && t >= 0 && t < nv ? ld(xr + t) : 0.0f, m, s;
  row_lse<T, V, NT>(xr, nv, m, s, red);
  if (threadIdx.x == 0) {
    if (t >= nv) *err = SK_ERR_TARGET;
    rowloss[r] = t >= 0 && t < nv ? m + logf(s) - xt : 0.0f;
  }
  ce_grad_row<T, V, NT>(dl + r * V, xr, t, nv, m, s, scale[0]);
}

/* ce_fused_rows for bf16 rows of V a multiple of 8, the row held on chip: the logits are read from device memory
 * once, with the online max and sum, and the gradient is computed from the copy. Of the valid columns' 16-byte
 * vectors (NVV = ceil(nv / 8)), thread t keeps t + NT u (u < KR) in registers, the rest go to dynamic shared
 * memory (16 * (NVV - KR NT) bytes), read U per thread in flight. dl may be the logits. */
template <i64 V, i64 LEN, int NT, int KR, int U>
__device__ void ce_fused_rows_smem(bf16 *dl, float *rowloss, const bf16 *logits, const int *targets, const float *scale,
                                   int *err) {
  __shared__ float red[64];
  u32x4 *row = (u32x4 *)SK_DYN_SMEM();
  constexpr i64 nv = LEN > 0 ? LEN : V;
  constexpr int NVV = (int)((nv + 7) / 8), NV8 = (int)(V / 8), R0 = KR * NT;
  const i64 r = blockIdx.x;
  const bf16 *xr = logits + r * V;
  const int t = targets[r], tid = (int)threadIdx.x;
  float xt = tid == 0 && t >= 0 && t < nv ? ld(xr + t) : 0.0f, m = ninf(), s = 0.0f;
  u32x4 qr[KR];
#pragma unroll
  for (int u = 0; u < KR; u++)
    if (tid + u * NT < NVV) qr[u] = *(const u32x4 *)(xr + 8 * (tid + u * NT));
  for (int c0 = R0 + tid; c0 < NVV; c0 += NT * U) {
    u32x4 q[U];
#pragma unroll
    for (int u = 0; u < U; u++)
      if (c0 + u * NT < NVV) q[u] = *(const u32x4 *)(xr + 8 * (c0 + u * NT));
#pragma unroll
    for (int u = 0; u < U; u++)
      if (c0 + u * NT < NVV) {
        row[c0 + u * NT - R0] = q[u];
        lse_add8(m, s, q[u], c0 + u * NT, nv);
      }
  }
#pragma unroll
  for (int u = 0; u < KR; u++)
    if (tid + u * NT < NVV) lse_add8(m, s, qr[u], tid + u * NT, nv);
  block_lse<NT>(m, s, red); /* ends in a barrier: row[] is complete */
  if (tid == 0) {
    if (t >= nv) *err = SK_ERR_TARGET;
    rowloss[r] = t >= 0 && t < nv ? m + logf(s) - xt : 0.0f;
  }
  const float inv = 1.0f / s, sc = scale[0];
  u32x4 *dlr = (u32x4 *)(dl + r * V);
  const u32x4 zero = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int u = 0; u < KR; u++) {
    const int c = tid + u * NT;
    if (c < NV8) dlr[c] = t >= 0 && c < NVV ? ce_grad8(qr[u], c, t, m, inv, sc, nv) : zero;
  }
  for (int c = R0 + tid; c < NV8; c += NT) dlr[c] = t >= 0 && c < NVV ? ce_grad8(row[c - R0], c, t, m, inv, sc, nv) : zero;
}

} // namespace sk

#endif
