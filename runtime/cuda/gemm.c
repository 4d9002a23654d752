/* runtime/cuda/gemm.c — rt_cu_matmul on cuBLASLt, and the dense bf16 peak.
 *
 * Row-major through the column-major swap: row-major y[m, n] = A[m, k] B[k, n] is column-major
 * y^T[n, m] = B^T[n, k] A^T[k, m], and a row-major buffer read column-major is its transpose, so
 * cuBLASLt's "A" is our B (op T when tb) and its "B" our A (op T when ta), with M = n, N = m.
 * Compute CUBLAS_COMPUTE_32F (fp32 accumulation; fp32 inputs exact, no TF32), fp32 scale. Batches
 * are strided; a shared B has stride 0, or when A is not transposed the batch folds into m (one
 * GEMM). One heuristic query per distinct shape, layout, epilogue and pointer alignment (RtCuGemmKey,
 * gemm_tune.c), cached with its plan. Autotuning (SHARDRT_GEMM_AUTOTUNE, default 8): the query asks
 * for that many candidates, and the key's first call outside a graph capture times them on its own
 * operands (gemm_tune.c; an output the GEMM reads goes to scratch) and keeps the fastest.
 *
 * A bf16 y is rounded once: the preference excludes the split-K reductions in y's type (in place in y,
 * or a bf16 workspace), which round each partial sum (the H100 of 2026-11-27 gave test_cudart's bias +
 * residual in place 1.08x its one-rounding bound that way); split-K adds its parts up in fp32.
 *
 * Epilogues (rt_cu_matmul_ep): our bias over y's columns is cuBLASLt's bias over its rows (M = n).
 * BIAS: D = AB + bias; with a residual, beta 1 and C = the residual (D = AB + C + bias); RESIDUAL (no
 * bias): the epilogue DEFAULT, beta 1 and C = the residual (D = AB + C), no bias pointer;
 * GELU_AUX_BIAS: aux = AB + bias (the pre-activation, leading dimension n), D = gelu(aux). The bias
 * and aux pointers are set on the plan's descriptor at each call. DGELU (rt_cu_matmul_dgelu): D = AB * gelu'(aux)
 * (aux read: the pre-activation); DGELU_BGRAD also writes the column sums of our D (cuBLASLt's bias
 * gradient, a reduction over its N = our m) to the bias pointer. When the heuristic finds no algorithm
 * for an epilogue GEMM (which epilogue, layout and dtype cuBLASLt covers depends on the version and
 * the GPU) the plan says so, once, and rt_cu_gemm_run returns 1: the generated code then runs the
 * plain GEMM and the unfused kernels (rt_cu_matmul_ep). A plain GEMM without one is fatal.
 */
#include <cublasLt.h>
#include <inttypes.h>
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
  RtCuGemmKey key;                    /* shape after folding, layout, dtypes, alignment, epilogue */
  int none;                           /* the heuristic found no algorithm for this epilogue GEMM */
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;  /* cuBLASLt's A (our B), B (our A), C = D */
  cublasLtMatmulAlgo_t algo;          /* the one used */
  cublasLtMatmulAlgo_t *cand;         /* [ncand]: the heuristic's candidates, until the first call tunes them */
  int ncand;
} Plan;

struct RtCuGemm {
  cublasLtHandle_t lt;
  cudaStream_t stream;
  void *ws;          /* GEMM_WORKSPACE bytes of device scratch */
  int tune;          /* candidates to time at a key's first call (SHARDRT_GEMM_AUTOTUNE; 0: the heuristic's first) */
  cudaEvent_t ev[2]; /* the autotuning's timing */
  RtCuRec rec;       /* the choices of earlier runs on this GPU and cuBLASLt, and those made since (tune_rec.c) */
  int rank, world;   /* this process's: with several ranks a record line per key and rank */
  Plan *plans;       /* [nplans] */
  int nplans, cap;
};

static cudaDataType_t cu_type(int dt) { return dt == RT_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/* ---- the autotuning's choices on disk: runs on the same GPU model and cuBLASLt make the same ones ----
 * <cache>/gemm-tune-<hash of the GPU's name, the cuBLASLt and CUDA runtime versions, the candidate
 * count>.txt (tune_rec.c), a line per key (with several ranks per key and rank: each times on its own
 * GPU and may keep another algorithm): its 11 fields (rt_cu_gemm_rec_key), a tab, the algorithm's 8
 * words in hex (cuBLASLt's cublasLtMatmulAlgo_t may be stored and reused with the same library
 * version). A choice is used only where it is one of the heuristic's candidates for its key, so a
 * stale file changes nothing but the time; without the record two runs could time two candidates in
 * another order and train on different bits. */

static void choices_load(RtCuGemm *g) {
  int dev = 0, rtv = 0;
  struct cudaDeviceProp prop;
  CU_CHECK(cudaGetDevice(&dev));
  CU_CHECK(cudaGetDeviceProperties(&prop, dev));
  CU_CHECK(cudaRuntimeGetVersion(&rtv));
  char ids[128];
  snprintf(ids, sizeof ids, "cublasLt %zu cudart %d candidates %d checked", cublasLtGetVersion(), rtv, g->tune);
  const char *parts[] = {prop.name, ids};
  const size_t lens[] = {strlen(prop.name), strlen(ids)};
  rt_cu_rec_open(&g->rec, "gemm-tune", parts, lens, 2, RT_CU_GEMM_KEY_WORDS);
}

/* The recorded choice for p's key (this rank's) into *algo when it is one of p's candidates: 1, else 0. */
static int choice_of(const RtCuGemm *g, const Plan *p, cublasLtMatmulAlgo_t *algo) {
  char key[320];
  rt_cu_gemm_rec_key(&p->key, g->rank, g->world, key, sizeof key);
  const char *v = rt_cu_rec_get(&g->rec, key);
  uint64_t w[8];
  if (!v || sscanf(v, "%" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64,
                   &w[0], &w[1], &w[2], &w[3], &w[4], &w[5], &w[6], &w[7]) != 8)
    return 0;
  memcpy(algo->data, w, sizeof w);
  for (int c = 0; c < p->ncand; c++)
    if (!memcmp(&p->cand[c], algo, sizeof p->cand[c])) return 1;
  return 0;
}

/* An algorithm as the record writes it: its 8 words in hex. */
static void algo_str(const cublasLtMatmulAlgo_t *a, char *out, size_t n) {
  const uint64_t *w = a->data;
  snprintf(out, n, "%" PRIx64 " %" PRIx64 " %" PRIx64 " %" PRIx64 " %" PRIx64 " %" PRIx64 " %" PRIx64 " %" PRIx64, w[0],
           w[1], w[2], w[3], w[4], w[5], w[6], w[7]);
}

static void choice_record(RtCuGemm *g, const Plan *p) {
  char key[320], val[160];
  rt_cu_gemm_rec_key(&p->key, g->rank, g->world, key, sizeof key);
  algo_str(&p->algo, val, sizeof val);
  rt_cu_rec_set(&g->rec, key, val);
  rt_cu_rec_save(&g->rec, "GEMM");
}

RtCuGemm *rt_cu_gemm_new(void *stream, int rank, int world) {
  RtCuGemm *g = calloc(1, sizeof *g);
  if (!g) rt_fatal(1, "out of memory");
  g->rank = rank, g->world = world;
  g->stream = (cudaStream_t)stream;
  LT_CHECK(cublasLtCreate(&g->lt));
  CU_CHECK(cudaMalloc(&g->ws, GEMM_WORKSPACE));
  g->tune = rt_cu_tune_candidates(8);
  CU_CHECK(cudaEventCreate(&g->ev[0]));
  CU_CHECK(cudaEventCreate(&g->ev[1]));
  if (g->tune > 1) choices_load(g);
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
    free(p->cand);
  }
  CU_CHECK(cudaEventDestroy(g->ev[0]));
  CU_CHECK(cudaEventDestroy(g->ev[1]));
  rt_cu_rec_free(&g->rec);
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

static Plan *plan_for(RtCuGemm *g, const RtCuGemmKey *key) {
  for (int i = 0; i < g->nplans; i++)
    if (rt_cu_gemm_key_eq(&g->plans[i].key, key)) return &g->plans[i];
  if (g->nplans == g->cap) {
    g->cap = g->cap ? 2 * g->cap : 16;
    Plan *np = realloc(g->plans, (size_t)g->cap * sizeof *np);
    if (!np) rt_fatal(1, "out of memory");
    g->plans = np;
  }
  Plan *p = &g->plans[g->nplans];
  memset(p, 0, sizeof *p);
  p->key = *key;
  LT_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t opa = key->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = key->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  if (key->epi && key->epi != RT_CU_EK_RESIDUAL) { /* (RESIDUAL: DEFAULT, the descriptor's own, C at the call) */
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
  int pair = key->sb || key->sy; /* rt_cu_gemm_run_pair: B and y at their strides, A shared */
  p->la = layout(key->ab_dt, key->tb ? k : n, key->tb ? n : k, key->batch, pair ? key->sb : key->bb ? k * n : 0);
  p->lb = layout(key->ab_dt, key->ta ? m : k, key->ta ? k : m, key->batch, pair ? 0 : m * k);
  p->lc = layout(key->y_dt, n, m, key->batch, pair ? key->sy : m * n);
  cublasLtMatmulPreference_t pref;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = GEMM_WORKSPACE;
  uint32_t al = (uint32_t)key->align;
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al));
  if (key->y_dt == RT_BF16) { /* split-K parts added up in fp32 (a workspace) or not split: y rounded once */
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes));
  }
  cublasLtMatmulHeuristicResult_t res[64];
  int got = 0, want = g->tune > 1 ? g->tune : 1;
  cublasStatus_t rc = cublasLtMatmulAlgoGetHeuristic(g->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, want, res, &got);
  LT_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  if ((rc == CUBLAS_STATUS_SUCCESS || rc == CUBLAS_STATUS_NOT_SUPPORTED) && got == 0 && (key->epi || pair)) {
    p->none = 1; /* the caller falls back to the plain GEMM and the unfused kernels (a pair: two GEMMs) */
    g->nplans++;
    return p;
  }
  if (rc != CUBLAS_STATUS_SUCCESS || got == 0) {
    char desc[256];
    rt_cu_gemm_key_str(key, desc, sizeof desc);
    rt_fatal(1, "cuBLASLt has no algorithm for the GEMM %s (%s)", desc,
             rc != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusName(rc) : "no result");
  }
  p->algo = res[0].algo;
  if (got > 1) { /* the candidates rt_cu_gemm_run times at the first call */
    p->cand = malloc((size_t)got * sizeof *p->cand);
    if (!p->cand) rt_fatal(1, "out of memory");
    for (int i = 0; i < got; i++)
      if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= GEMM_WORKSPACE) p->cand[p->ncand++] = res[i].algo;
  }
  g->nplans++;
  return p;
}

/* One candidate's run for the autotuning (gemm_tune.c): into d (the output, or its scratch); < 0 (not
 * run) for a candidate the check refused. */
typedef struct {
  RtCuGemm *g;
  Plan *p;
  const void *a, *b, *c;
  void *d;
  float alpha, beta;
  const char *ok; /* [p->ncand] */
} Trial;

static double trial_time(void *arg, int cand) {
  Trial *t = arg;
  RtCuGemm *g = t->g;
  Plan *p = t->p;
  if (!t->ok[cand]) return -1;
  CU_CHECK(cudaEventRecord(g->ev[0], g->stream));
  cublasStatus_t rc = cublasLtMatmul(g->lt, p->op, &t->alpha, t->b, p->la, t->a, p->lb, &t->beta, t->c, p->lc, t->d,
                                     p->lc, &p->cand[cand], g->ws, GEMM_WORKSPACE, g->stream);
  CU_CHECK(cudaEventRecord(g->ev[1], g->stream));
  CU_CHECK(cudaEventSynchronize(g->ev[1]));
  if (rc != CUBLAS_STATUS_SUCCESS) return -1;
  float ms = 0;
  CU_CHECK(cudaEventElapsedTime(&ms, g->ev[0], g->ev[1]));
  return 1e-3 * ms;
}

static void check_copy(void *carg, void *dst, const void *src, int64_t bytes, int kind) {
  RtCuGemm *g = carg;
  (void)kind;
  CU_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDefault, g->stream));
  CU_CHECK(cudaStreamSynchronize(g->stream));
}

/* The check (tune_check.c) of p's candidates on the call's operands against the heuristic's first: ok[c]
 * = 0 for those refused now (a warning and a record line) or by an earlier run (skipped, not run). */
static void check(RtCuGemm *g, Plan *p, Trial *t, const RtCuEpi *ep, char *ok) {
  char fkey[600], choice[160], (*why)[RT_CU_WHY] = calloc((size_t)p->ncand, RT_CU_WHY);
  if (!why) rt_fatal(1, "out of memory");
  int skipped = 0;
  for (int c = 1; c < p->ncand; c++) {
    algo_str(&p->cand[c], choice, sizeof choice);
    rt_cu_gemm_refused_key(&p->key, choice, g->rank, g->world, fkey, sizeof fkey);
    if (rt_cu_rec_get(&g->rec, fkey)) ok[c] = 0, skipped++;
  }
  RtCuCheckOut co[3];
  int nout = rt_cu_gemm_check_outs(&p->key, t->d, NULL, ep, co);
  /* a scratch d (y read: beta != 0, the residual in place) is NaN-filled too: C is read from the real y */
  RtCuCheck ck = {trial_time, t, check_copy, g, co, nout};
  double t0 = rt_cu_tune_clock(), closest = 0;
  int checked = rt_cu_tune_check(&ck, p->ncand, ok, why, &closest);
  for (int c = 1; c < p->ncand; c++) {
    if (ok[c] || !why[c][0]) continue;
    algo_str(&p->cand[c], choice, sizeof choice);
    rt_cu_tune_refused(&p->key, c, choice, why[c], g->rank, g->world);
    rt_cu_gemm_refused_key(&p->key, choice, g->rank, g->world, fkey, sizeof fkey);
    rt_cu_rec_set(&g->rec, fkey, why[c]);
  }
  rt_cu_tune_checked(checked, skipped, rt_cu_tune_clock() - t0, closest);
  free(why);
}

/* The first call of a key with several candidates: the choice of an earlier run, or check them against
 * the heuristic's first, time those that agree, keep the fastest and record it. Not while the stream is
 * being captured (a CUDA graph: nothing may synchronize), nor when the scratch output cannot be
 * allocated: the heuristic's first, for the rest of the run. */
static void tune(RtCuGemm *g, Plan *p, void *y, const void *a, const void *b, const void *c, float alpha, float beta,
                 const RtCuEpi *ep) {
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  CU_CHECK(cudaStreamIsCapturing(g->stream, &cs));
  void *scratch = NULL;
  cublasLtMatmulAlgo_t known;
  if (choice_of(g, p, &known)) {
    p->algo = known;
    rt_cu_tune_recorded();
  } else if (cs == cudaStreamCaptureStatusNone) {
    char *cok = malloc((size_t)p->ncand);
    if (!cok) rt_fatal(1, "out of memory");
    memset(cok, 1, (size_t)p->ncand);
    Trial t = {g, p, a, b, c, y, alpha, beta, cok};
    int ok = 1;
    if (rt_cu_tune_y_read(y, beta, ep)) { /* the timing runs must not change what the real one reads */
      size_t bytes = (size_t)(p->key.batch * p->key.m * p->key.n) * (p->key.y_dt == RT_BF16 ? 2 : 4);
      ok = cudaMallocAsync(&scratch, bytes, g->stream) == cudaSuccess; /* stream-ordered: no device-wide sync */
      if (!ok) (void)cudaGetLastError();
      t.d = scratch;
    }
    if (ok) {
      check(g, p, &t, ep, cok);
      p->algo = p->cand[rt_cu_tune_pick(p->ncand, trial_time, &t, &p->key)];
      choice_record(g, p);
    }
    if (scratch) CU_CHECK(cudaFreeAsync(scratch, g->stream));
    free(cok);
  }
  free(p->cand);
  p->cand = NULL;
  p->ncand = 0;
}

int rt_cu_gemm_run(RtCuGemm *g, void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t batch, int64_t m,
                    int64_t n, int64_t k, int ta, int tb, int b_batched, float alpha, float beta, const RtCuEpi *ep) {
  RtCuGemmKey key = rt_cu_gemm_key(y, y_dt, a, b, ab_dt, batch, m, n, k, ta, tb, b_batched, ep);
  Plan *p = plan_for(g, &key);
  if (p->none) return 1;
  const void *c = y;
  if (ep) {
    if (ep->c) c = ep->c, beta = 1.0f;
    const void *bias = ep->dgelu ? ep->dbias : ep->bias; /* BGRAD writes the bias pointer */
    if (bias) LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (ep->aux)
      LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ep->aux, sizeof ep->aux));
  }
  if (p->ncand > 1) tune(g, p, y, a, b, c, alpha, beta, ep);
  LT_CHECK(cublasLtMatmul(g->lt, p->op, &alpha, b, p->la, a, p->lb, &beta, c, p->lc, y, p->lc, &p->algo, g->ws,
                          GEMM_WORKSPACE, g->stream));
  return 0;
}

int rt_cu_gemm_run_pair(RtCuGemm *g, void *y0, int y_dt, const void *a, const void *b0, int ab_dt, int64_t m, int64_t n,
                        int64_t k, int ta, int tb, int64_t sb, int64_t sy) {
  size_t ys = y_dt == RT_BF16 ? 2 : 4, es = ab_dt == RT_BF16 ? 2 : 4;
  uintptr_t bits = (uintptr_t)y0 | (uintptr_t)a | (uintptr_t)b0 | (uintptr_t)(sb * (int64_t)es) |
                   (uintptr_t)(sy * (int64_t)ys) | 256;
  RtCuGemmKey key = {.batch = 2, .m = m, .n = n, .k = k, .ta = ta, .tb = tb, .bb = 1, .ab_dt = ab_dt, .y_dt = y_dt,
                     .align = (int)(bits & -bits), .epi = RT_CU_EK_NONE, .sb = sb, .sy = sy};
  Plan *p = plan_for(g, &key);
  if (p->none) return 1;
  if (p->cand) { /* not timed: the heuristic's first (the pair's records would need the strides in their key) */
    free(p->cand);
    p->cand = NULL;
    p->ncand = 0;
  }
  float alpha = 1.0f, beta = 0.0f;
  LT_CHECK(cublasLtMatmul(g->lt, p->op, &alpha, b0, p->la, a, p->lb, &beta, y0, p->lc, y0, p->lc, &p->algo, g->ws,
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
