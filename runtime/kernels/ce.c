/* runtime/kernels/ce.c — softmax cross-entropy in parts, for vocab-parallel logits (ops.def
 * CE_MAX, CE_SUMS, CE_LOSS, CE_GRAD): each rank holds columns [lo, lo + V) of the logical
 * vocabulary, of which the first nv are valid (below the unpadded vocabulary). Between the
 * parts the caller all-reduces the row maxima (max) and the row sums (sum), so the logits are
 * never gathered. One parallel pass over the rows per part, rt_fexp as in xent.c; the loss sum
 * is taken in row order in double, so no result depends on the thread count. */
#include <math.h>
#include <string.h>

#include "fastmath.h"
#include "kernels.h"

void rt_ce_max(int64_t N, int64_t V, int64_t nv, const float *logits, float *m) {
#pragma omp parallel for schedule(static) if (N * nv > 32768)
  for (int64_t r = 0; r < N; r++) {
    const float *x = logits + r * V;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < nv; j++) mx = x[j] > mx ? x[j] : mx;
    m[r] = mx;
  }
}

void rt_ce_sums(int64_t N, int64_t V, int64_t nv, int64_t lo, const float *logits, const int32_t *targets,
                const float *m, float *st) {
#pragma omp parallel for schedule(static) if (N * nv > 32768)
  for (int64_t r = 0; r < N; r++) {
    const float *x = logits + r * V;
    const float mx = m[r];
    float sum = 0.0f;
    if (mx > -INFINITY) {
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < nv; j++) sum += rt_fexp(x[j] - mx);
    }
    int64_t t = (int64_t)targets[r] - lo;
    st[2 * r] = sum;
    st[2 * r + 1] = t >= 0 && t < nv ? x[t] : 0.0f;
  }
}

int64_t rt_ce_loss(int64_t N, int64_t len, const float *st, const float *m, const int32_t *targets, float *out) {
  double loss = 0.0;
  int64_t count = 0;
  for (int64_t r = 0; r < N; r++) {
    int64_t t = targets[r];
    if (t < 0) continue;
    if (len > 0 && t >= len) return r;
    loss += log((double)st[2 * r]) + (double)m[r] - (double)st[2 * r + 1];
    count++;
  }
  out[0] = (float)loss;
  out[1] = (float)count;
  return -1;
}

void rt_ce_grad(int64_t N, int64_t V, int64_t nv, int64_t lo, const float *logits, const int32_t *targets,
                const float *m, const float *st, float scale, float *dlogits) {
#pragma omp parallel for schedule(static) if (N * V > 32768)
  for (int64_t r = 0; r < N; r++) {
    const float *x = logits + r * V;
    float *d = dlogits + r * V;
    if (targets[r] < 0) {
      memset(d, 0, (size_t)V * sizeof(float));
      continue;
    }
    int64_t t = (int64_t)targets[r] - lo;
    const float mx = m[r], g = scale / st[2 * r];
    float xt = t >= 0 && t < nv ? x[t] : 0.0f; /* read before an in-place write overwrites it */
#pragma omp simd
    for (int64_t j = 0; j < nv; j++) d[j] = g * rt_fexp(x[j] - mx);
    if (t >= 0 && t < nv) d[t] = g * rt_fexp(xt - mx) - scale;
    for (int64_t j = nv; j < V; j++) d[j] = 0.0f;
  }
}
