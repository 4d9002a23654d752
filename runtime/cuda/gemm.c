/* runtime/cuda/gemm.c — rt_cu_matmul on cuBLASLt, and the dense bf16 peak.
 *
 * Row-major through the column-major swap: row-major y[m, n] = A[m, k] B[k, n] is column-major
 * y^T[n, m] = B^T[n, k] A^T[k, m], and a row-major buffer read column-major is its transpose, so
 * cuBLASLt's "A" is our B (op T when tb) and its "B" our A (op T when ta), with M = n, N = m.
 * Compute CUBLAS_COMPUTE_32F (fp32 accumulation; fp32 inputs exact, no TF32), fp32 scale. Batches
 * are strided; a shared B has stride 0, or when A is not transposed the batch folds into m (one
 * GEMM). One heuristic query per distinct shape, layout, epilogue and pointer alignment, cached.
 *
 * Epilogues (rt_cu_matmul_ep): our bias over y's columns is cuBLASLt's bias over its rows (M = n).
 * BIAS: D = AB + bias; with a residual, beta 1 and C = the residual (D = AB + C + bias);
 * GELU_AUX_BIAS: aux = AB + bias (the pre-activation, leading dimension n), D = gelu(aux). The bias
 * and aux pointers are set on the plan's descriptor at each call. DGELU (rt_cu_matmul_dgelu): D = AB * gelu'(aux)
 * (aux read: the pre-activation); DGELU_BGRAD also writes the column sums of our D (cuBLASLt's bias
 * gradient, a reduction over its N = our m) to the bias pointer. When the heuristic finds no algorithm
 * for an epilogue GEMM (which epilogue, layout and dtype cuBLASLt covers depends on the version and
 * the GPU) the plan says so, once, and rt_cu_gemm_run returns 1: the generated code then runs the
 * plain GEMM and the unfused kernels (rt_cu_matmul_ep). A plain GEMM without one is fatal.
 */
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/bootstrap.h"
#include "cu_cuda.h"
#include "dtype.h"

#define LT_CHECK(call)                                                                                   \
  do {                                                                                                   \
    cublasStatus_t lt_rc_ = (call);                                                                      \
    if (lt_rc_ != CUBLAS_STATUS_SUCCESS)                                                                 \
      rt_fatal(1, "cuBLASLt: %s failed: %s at %s:%d", #call, cublasLtGetStatusName(lt_rc_), __FILE__, __LINE__); \
  } while (0)

#define GEMM_WORKSPACE (32u << 20) /* bytes */

typedef struct {
  int64_t batch, m, n, k;             /* after folding */
  int ta, tb, bb, ab_dt, y_dt, align; /* layout, dtypes, pointer alignment (bytes) */
  int epi;                            /* 0: none; 1: BIAS; 2: GELU_AUX_BIAS; 3: DGELU; 4: DGELU_BGRAD */
  int none;                           /* the heuristic found no algorithm for this epilogue GEMM */
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;  /* cuBLASLt's A (our B), B (our A), C = D */
  cublasLtMatmulAlgo_t algo;
} Plan;

struct RtCuGemm {
  cublasLtHandle_t lt;
  cudaStream_t stream;
  void *ws;          /* GEMM_WORKSPACE bytes of device scratch */
  Plan *plans;       /* [nplans] */
  int nplans, cap;
};

static cudaDataType_t cu_type(int dt) { return dt == RT_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

RtCuGemm *rt_cu_gemm_new(void *stream) {
  RtCuGemm *g = calloc(1, sizeof *g);
  if (!g) rt_fatal(1, "out of memory");
  g->stream = (cudaStream_t)stream;
  LT_CHECK(cublasLtCreate(&g->lt));
  CU_CHECK(cudaMalloc(&g->ws, GEMM_WORKSPACE));
  return g;
}

void rt_cu_gemm_free(RtCuGemm *g) {
  if (!g) return;
  for (int i = 0; i < g->nplans; i++) {
    Plan *p = &g->plans[i];
    LT_CHECK(cublasLtMatrixLayoutDestroy(p->la));
    LT_CHECK(cublasLtMatrixLayoutDestroy(p->lb));
    LT_CHECK(cublasLtMatrixLayoutDestroy(p->lc));
    LT_CHECK(cublasLtMatmulDescDestroy(p->op));
  }
  free(g->plans);
  CU_CHECK(cudaFree(g->ws));
  LT_CHECK(cublasLtDestroy(g->lt));
  free(g);
}

static cublasLtMatrixLayout_t layout(int dt, int64_t rows, int64_t cols, int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l;
  LT_CHECK(cublasLtMatrixLayoutCreate(&l, cu_type(dt), (uint64_t)rows, (uint64_t)cols, rows));
  if (batch > 1) {
    int32_t bc = (int32_t)batch;
    LT_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
    LT_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  return l;
}

static Plan *plan_for(RtCuGemm *g, const Plan *key) {
  for (int i = 0; i < g->nplans; i++) {
    Plan *p = &g->plans[i];
    if (p->batch == key->batch && p->m == key->m && p->n == key->n && p->k == key->k && p->ta == key->ta &&
        p->tb == key->tb && p->bb == key->bb && p->ab_dt == key->ab_dt && p->y_dt == key->y_dt &&
        p->align == key->align && p->epi == key->epi)
      return p;
  }
  if (g->nplans == g->cap) {
    g->cap = g->cap ? 2 * g->cap : 16;
    Plan *np = realloc(g->plans, (size_t)g->cap * sizeof *np);
    if (!np) rt_fatal(1, "out of memory");
    g->plans = np;
  }
  Plan *p = &g->plans[g->nplans];
  *p = *key;
  LT_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t opa = key->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = key->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  if (key->epi) {
    static const cublasLtEpilogue_t kinds[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS,
                                               CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU,
                                               CUBLASLT_EPILOGUE_DGELU_BGRAD};
    cublasLtEpilogue_t e = kinds[key->epi];
    cudaDataType_t t = cu_type(key->y_dt);
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof t));
    if (key->epi >= 2) { /* the pre-activation: stored (GELU_AUX), read (DGELU) */
      int64_t ld = key->n;
      LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
      LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &t, sizeof t));
    }
  }
  int64_t m = key->m, n = key->n, k = key->k;
  p->la = layout(key->ab_dt, key->tb ? k : n, key->tb ? n : k, key->batch, key->bb ? k * n : 0);
  p->lb = layout(key->ab_dt, key->ta ? m : k, key->ta ? k : m, key->batch, m * k);
  p->lc = layout(key->y_dt, n, m, key->batch, m * n);
  cublasLtMatmulPreference_t pref;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = GEMM_WORKSPACE;
  uint32_t al = (uint32_t)key->align;
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al));
  cublasLtMatmulHeuristicResult_t res;
  int got = 0;
  cublasStatus_t rc = cublasLtMatmulAlgoGetHeuristic(g->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &got);
  LT_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  if ((rc == CUBLAS_STATUS_SUCCESS || rc == CUBLAS_STATUS_NOT_SUPPORTED) && got == 0 && key->epi) {
    p->none = 1; /* the caller falls back to the plain GEMM and the unfused kernels */
    g->nplans++;
    return p;
  }
  if (rc != CUBLAS_STATUS_SUCCESS || got == 0)
    rt_fatal(1,
             "cuBLASLt has no algorithm for the GEMM batch %lld, m %lld, n %lld, k %lld, ta %d, tb %d, %s inputs, %s "
             "output, pointers aligned to %d bytes, epilogue %s (%s)",
             (long long)key->batch, (long long)m, (long long)n, (long long)k, key->ta, key->tb,
             key->ab_dt == RT_BF16 ? "bf16" : "f32", key->y_dt == RT_BF16 ? "bf16" : "f32", key->align,
             (const char *[]){"none", "BIAS", "GELU_AUX_BIAS", "DGELU", "DGELU_BGRAD"}[key->epi],
             rc != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusName(rc) : "no result");
  p->algo = res.algo;
  g->nplans++;
  return p;
}

int rt_cu_gemm_run(RtCuGemm *g, void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t batch, int64_t m,
                    int64_t n, int64_t k, int ta, int tb, int b_batched, float alpha, float beta, const RtCuEpi *ep) {
  if (batch > 1 && !b_batched && !ta) m *= batch, batch = 1; /* a shared B: one GEMM over batch * m rows */
  if (batch == 1) b_batched = 1;
  uintptr_t bits = (uintptr_t)y | (uintptr_t)a | (uintptr_t)b | 256;
  const void *c = y;
  if (ep) {
    bits |= (uintptr_t)ep->bias | (uintptr_t)ep->c | (uintptr_t)ep->aux | (uintptr_t)ep->dbias;
    if (ep->c) c = ep->c, beta = 1.0f;
  }
  Plan key = {.batch = batch, .m = m, .n = n, .k = k, .ta = ta, .tb = tb, .bb = b_batched, .ab_dt = ab_dt,
              .y_dt = y_dt, .align = (int)(bits & -bits), .epi = !ep ? 0 : ep->dgelu ? (ep->dbias ? 4 : 3) : ep->aux ? 2 : 1};
  Plan *p = plan_for(g, &key);
  if (p->none) return 1;
  if (ep) {
    const void *bias = ep->dgelu ? ep->dbias : ep->bias; /* BGRAD writes the bias pointer */
    if (bias) LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (ep->aux)
      LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ep->aux, sizeof ep->aux));
  }
  LT_CHECK(cublasLtMatmul(g->lt, p->op, &alpha, b, p->la, a, p->lb, &beta, c, p->lc, y, p->lc, &p->algo, g->ws,
                          GEMM_WORKSPACE, g->stream));
  return 0;
}

double rt_cu_gemm_peak(RtCuGemm *g, int64_t n, int reps) {
  void *a = NULL, *b = NULL, *y = NULL;
  size_t bytes = (size_t)(n * n * 2);
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess ||
      cudaMalloc(&y, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    if (a) cudaFree(a);
    if (b) cudaFree(b);
    return 0;
  }
  CU_CHECK(cudaMemsetAsync(a, 0, bytes, g->stream)); /* zeros: the tensor cores' time does not depend on values */
  CU_CHECK(cudaMemsetAsync(b, 0, bytes, g->stream));
  cudaEvent_t e0, e1;
  CU_CHECK(cudaEventCreate(&e0));
  CU_CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; i++) /* warm-up, heuristic query */
    rt_cu_gemm_run(g, y, RT_BF16, a, b, RT_BF16, 1, n, n, n, 0, 0, 1, 1.0f, 0.0f, NULL);
  double best = 0;
  for (int r = 0; r < reps; r++) {
    CU_CHECK(cudaEventRecord(e0, g->stream));
    for (int i = 0; i < 5; i++) rt_cu_gemm_run(g, y, RT_BF16, a, b, RT_BF16, 1, n, n, n, 0, 0, 1, 1.0f, 0.0f, NULL);
    CU_CHECK(cudaEventRecord(e1, g->stream));
    CU_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CU_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    double f = 5 * 2.0 * (double)n * (double)n * (double)n / (ms * 1e-3);
    if (f > best) best = f;
  }
  CU_CHECK(cudaEventDestroy(e0));
  CU_CHECK(cudaEventDestroy(e1));
  CU_CHECK(cudaFree(a));
  CU_CHECK(cudaFree(b));
  CU_CHECK(cudaFree(y));
  return best;
}
