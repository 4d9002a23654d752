/* runtime/kernels/xent.c — softmax cross-entropy over [N, V] logits fused with its backward:
 * one parallel pass over the rows computes each row's max, log-sum-exp and loss and, when asked,
 * writes dlogits = dloss (softmax - onehot) / count in place of (or beside) the logits. */
#include <math.h>
#include <string.h>

#include "fastmath.h"
#include "kernels.h"

size_t rt_xent_workspace_bytes(int64_t N) { return (size_t)N * sizeof(double) + 64; }

float rt_xent_fwd_bwd(int64_t N, int64_t V, int64_t len, const float *logits, const int32_t *targets,
                      float dloss, float *dlogits, void *ws) {
  double *rowloss = (double *)ws; /* [N]: summed in row order, so the loss is thread-count independent */
  int64_t count = 0;
  for (int64_t r = 0; r < N; r++) count += targets[r] >= 0;
  const float g = count > 0 ? dloss / (float)count : 0.0f;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; r++) {
    const float *x = logits + r * V;
    float *d = dlogits ? dlogits + r * V : NULL;
    int64_t t = targets[r];
    rowloss[r] = 0.0;
    if (t < 0) {
      if (d) memset(d, 0, (size_t)V * sizeof(float));
      continue;
    }
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < len; j++) mx = x[j] > mx ? x[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < len; j++) sum += rt_fexp(x[j] - mx);
    float lse = mx + logf(sum);
    rowloss[r] = (double)lse - (double)x[t];
    if (!d) continue;
    float xt = x[t]; /* read before an in-place write overwrites it */
    for (int64_t j = 0; j < len; j++) d[j] = g * rt_fexp(x[j] - lse);
    d[t] = g * (rt_fexp(xt - lse) - 1.0f);
    for (int64_t j = len; j < V; j++) d[j] = 0.0f;
  }
  if (count == 0) return 0.0f;
  double total = 0.0;
  for (int64_t r = 0; r < N; r++) total += rowloss[r];
  return (float)(total / (double)count);
}
