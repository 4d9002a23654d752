/* runtime/cuda/cu_internal.h — the device backends behind rt_cuda_device and cuda_ops.h
 * (internal to runtime/cuda/).
 *
 *   device.c  rt_cuda_device (picks the backend), the CUDA backend: device, NVRTC, cubin cache, memory
 *   ops.c     rt_cu_* (dispatch to the backend) and the CUDA launches, copies and fills
 *   gemm.c    rt_cu_matmul on cuBLASLt; the bf16 peak measurement
 *   gemm_tune.c a GEMM's key (what its algorithm depends on) and the autotuning at its first call
 *   emu.c     the emulated backend: host memory, kernels compiled by the host C++ compiler
 *   common.c  what both share: hashing, the on-disk cache, the embedded kernel headers
 *   coll_dev.c the program's collectives on device memory (coll.h RtCollDevice): NCCL groups
 *
 * ctx->kernels points at an RtCuDev: the backend's operations and its state.
 */
#ifndef SHARDRT_CU_INTERNAL_H
#define SHARDRT_CU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "mesh.h"
#include "ops/coll.h"
#include "program.h"
#include "train/ctx.h"

enum { RT_CU_D2D, RT_CU_H2D_ASYNC, RT_CU_H2D, RT_CU_D2H }; /* copy kinds */

/* A GEMM epilogue (rt_cu_matmul_ep): t = acc + bias[col] (bias NULL: t = acc, with c); aux != NULL: aux = t, y = gelu(t);
 * else c != NULL: y = c + t (c may be y); else y = t. With dgelu (rt_cu_matmul_dgelu): y =
 * gelu'(aux) * acc, aux read (the pre-activation), and dbias (unless NULL) = y's column sums.
 * Bias, c, aux and dbias have y's dtype. */
typedef struct {
  const void *bias, *c;
  void *aux;
  int dgelu;
  void *dbias;
} RtCuEpi;

typedef struct {
  const char *name; /* "cuda", "emu" */
  void (*launch)(void *be, int k, const unsigned grid[3], const unsigned block[3], unsigned smem, void **args);
  int (*matmul)(void *be, void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t batch, int64_t m,
                 int64_t n, int64_t k, int ta, int tb, int b_batched, float alpha, float beta,
                 const RtCuEpi *ep); /* ep: NULL, or batch 1, alpha 1, beta 0. Returns 0; 1 when ep is
                                        not NULL and the backend has no algorithm for that epilogue
                                        (nothing done: the caller runs the plain GEMM and the nodes) */
  /* rt_cu_matmul_pair as one strided-batched GEMM: y0 + i sy = op(A) op(b0 + i sb) for i = 0, 1 (strides in
   * elements, both > 0), A shared (stride 0); the emulated device runs the batch's two entries one by one. Returns
   * 0; 1 (nothing done: the caller runs two GEMMs) when the backend has no algorithm for that batch. */
  int (*matmul_pair)(void *be, void *y0, int y_dt, const void *a, const void *b0, int ab_dt, int64_t m, int64_t n,
                      int64_t k, int ta, int tb, int64_t sb, int64_t sy);
  void (*copy)(void *be, void *dst, const void *src, int64_t bytes, int kind); /* RT_CU_* */
  void (*zero)(void *be, void *dst, int64_t bytes);
  /* height rows of width bytes, rows dpitch / spitch bytes apart */
  void (*copy2d)(void *be, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height);
  void (*sync)(void *be);
  /* Plan offload's overlapped copies (kind RT_CU_D2H or RT_CU_H2D, between the allocation and pinned
   * host memory): enqueued after the compute stream's work so far, on a copy stream that runs beside
   * it; the copy's `slot` (an event) marks its end. A slot may hold several copies (a stacked
   * gradient's rows, one per backward iteration): a wait waits for all of them. */
  void (*copy_start)(void *be, void *dst, const void *src, int64_t bytes, int kind, int slot);
  void (*host_wait)(void *be, int slot);   /* returns once slot's copies are done */
  void (*device_wait)(void *be, int slot); /* the compute stream waits for slot's copies (the host goes on) */
  /* runs fn(M, ctx)'s device work; may record it once and replay the recording (NULL: call fn) */
  void (*replay)(void *be, void (*fn)(char *M, RtCtx *ctx), char *M, RtCtx *ctx);
  int64_t (*mem_in_use)(void *be, int64_t *total);
  void (*pin)(void *be, void *host, int64_t bytes, int on); /* cudaHostRegister / Unregister; NULL: none */ /* device bytes in use (cudaMemGetInfo); NULL: host memory */
  void (*describe)(void *be, char *out, size_t n);
  /* the attention autotuning (attn_tune.c): seconds one launch of kernel k took (it ran to completion;
   * < 0: it could not be launched); device scratch of bytes (NULL: none free) and its release; what
   * the choices depend on (the GPU's name and the toolkit's versions); 1 while the compute stream is
   * being captured (a CUDA graph: nothing may synchronize) */
  double (*time_launch)(void *be, int k, const unsigned grid[3], const unsigned block[3], unsigned smem, void **args);
  void *(*scratch)(void *be, int64_t bytes);
  void (*scratch_free)(void *be, void *p);
  void (*tune_id)(void *be, char *out, size_t n);
  int (*capturing)(void *be);
  double (*peak)(void *be);
  void (*close)(void *be);
  /* 1: the program's kernels run Hopper's wgmma (built for sm_90a; the emulator models it), so the
   * attention's wgmma candidates (tiles "wg..." and "ws...", codegen/cuda_wgmma_cfg.c) may be timed and launched;
   * NULL or 0: they are not offered (elsewhere they are built as a trap) */
  int (*wgmma)(void *be);
} RtCuOps;

typedef struct RtGroup RtGroup;

typedef struct {
  const RtCuOps *ops; /* the backend */
  void *be;           /* its state */
  void *stream;       /* the compute stream (cudaStream_t) of the CUDA backend; NULL: emulated */
  RtGroup *dpcp;                /* the NCCL group over dp x cp (the gradient all-reduce, RT_AX_GROUP), or NULL */
  void *attn;                   /* the attention autotuning's state (attn_tune.c), NULL until its first launch */
  RtGroup *groups[RT_AX_COUNT]; /* NCCL groups of the program's collectives per mesh axis (coll_dev.c);
                                   NULL: one member, or the emulated device (ctx->groups: host memory) */
} RtCuDev;

/* Backends: return 0 and fill dev (and *mem: the zeroed allocation of `bytes`), or print
 * "error: ..." and return -1. */
int rt_cu_open_cuda(const RtProgram *p, RtCtx *ctx, int64_t bytes, char **mem, RtCuDev *dev);
int rt_cu_open_emu(const RtProgram *p, RtCtx *ctx, int64_t bytes, char **mem, RtCuDev *dev);

/* NVRTC: the program's kernels built for arch ("sm_90": a cubin; "compute_90": PTX), through the
 * on-disk cache; NULL after printing the error (with NVRTC's log). Caller frees. No GPU needed. */
char *rt_cu_nvrtc_build(const RtCudaCode *code, const char *arch, size_t *len, int *from_cache);

/* The device of ctx (fatal when the program did not open one). */
RtCuDev *rt_cu_dev(RtCtx *ctx);

/* ---- coll_dev.c ---- */

/* What runtime/ops/coll.c calls for a device program (registered by rt_cuda_device's open). */
extern const RtCollDevice rt_cu_coll_device;
/* CUDA backend, several ranks: one NCCL group per mesh axis of degree > 1 (the members of
 * ctx->groups[1 << axis]), ordered after dev->stream; collective over the world. 0, or -1 after
 * printing why. */
int rt_cu_nccl_open(RtCtx *ctx, RtCuDev *dev);
void rt_cu_nccl_close(RtCuDev *dev);

/* ---- common.c ---- */

/* 128-bit content hash as 32 hex digits (two FNV-1a 64 lanes over every part, with lengths). */
void rt_cu_hash(char out[33], const char *const *parts, const size_t *lens, int nparts);
/* The cache directory ($SHARDRT_CUBIN_CACHE, default ~/.cache/shardc/cubin), created; NULL when
 * it cannot be created (caching is then off). Caller frees. */
char *rt_cu_cache_dir(void);
/* Reads a whole file; NULL when absent. */
char *rt_cu_read_file(const char *path, size_t *len);
/* Writes data to path atomically (a temp file in the same directory, then rename); 0 on success. */
int rt_cu_write_atomic(const char *path, const void *data, size_t len);
/* The kernel headers (runtime/cuda/kernels: the .cuh files and sk_emu.h), embedded at build time. */
int rt_cu_header_count(void);
const char *rt_cu_header_name(int i);
const char *rt_cu_header_source(int i);
/* The cuBLASLt epilogue ep asks for: "BIAS", "BIAS_RESIDUAL" (BIAS with C, beta 1), "RESIDUAL" (no
 * bias: DEFAULT with C, beta 1), "GELU_AUX_BIAS", "DGELU" or "DGELU_BGRAD" ("none" for NULL). */
const char *rt_cu_epi_name(const RtCuEpi *ep);
/* printf-style message to stderr prefixed "error: ". */
void rt_cu_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The planned allocation (`bytes`: the plan plus the kernels' workspace) against the device's
 * free memory, before it is made: 0 when it fits, else -1 after an error naming the rank, the
 * planned and free bytes and the knobs (the emulated device reports SHARDRT_EMU_MEMORY). */
int rt_cu_check_free(const RtProgram *p, const RtCtx *ctx, int64_t bytes, int64_t free_b, int64_t total_b,
                     const char *dev);

/* ---- tune_rec.c (both backends): the autotuning's record, shared by gemm.c, emu.c and attn_tune.c ---- */
typedef struct {
  char *path;        /* <cache>/<kind>-<hash>.txt (NULL: no cache directory, or it could not be written) */
  char **keys, **vals; /* [n]: read from it, and those set since */
  int n, cap, key_words;
} RtCuRec;
/* Opens kind's record for the hash of parts (what the choices depend on) and reads it; no cache
 * directory: an empty record that saves nothing. key_words > 0: a line without a tab is key_words
 * space-separated words of key, then the choice (the GEMM record's first format). */
void rt_cu_rec_open(RtCuRec *r, const char *kind, const char *const *parts, const size_t *lens, int nparts,
                    int key_words);
/* The record key of key for this rank: key itself with one rank, "key rank R" with several. */
void rt_cu_rec_key(char *out, size_t n, const char *key, int rank, int world);
const char *rt_cu_rec_get(const RtCuRec *r, const char *key); /* NULL: none */
void rt_cu_rec_set(RtCuRec *r, const char *key, const char *val);
/* Writes the record atomically, merged with the lines other processes wrote since (for keys this one
 * does not know); on failure a note naming `what` and the record is not written again. */
void rt_cu_rec_save(RtCuRec *r, const char *what);
void rt_cu_rec_free(RtCuRec *r);

/* ---- tune_check.c (both backends): a candidate's outputs against the default's ---- */
/* Seconds one call of candidate cand took (it ran to completion), or < 0 when it cannot run. */
typedef double (*RtCuTuneTime)(void *arg, int cand);
typedef struct {
  int ok;            /* every element within its tolerance */
  int64_t at;        /* the element of the largest |cand - def| / tolerance; -1: no elements */
  double err, tol;   /* |cand - def| there and its tolerance */
  double max_err;    /* the largest |cand - def| */
  double max_ref;    /* the largest finite |def| */
  double ratio;      /* the largest |cand - def| / tolerance (<= 1: agrees) */
} RtCuAgree;
/* count elements of dtype dt (RT_*): 1 when every |cand_i - def_i| <= 2 u |def_i| + 2 (terms 2^-24 +
 * rounds 2^-9) max |def| (u: half an ulp of dt, 2^-8 bf16, 2^-24 f32; integers exact; NaN / Inf the same
 * in both), else 0; *a says where and by how much (tune_check.c derives the bound). terms: the
 * accumulation length in fp32; rounds: intermediate values rounded to bf16 on the way. */
int rt_cu_tune_agree(const void *def, const void *cand, int dt, int64_t count, long long terms, int rounds,
                     RtCuAgree *a);
/* An output the check reads back: the device address the candidates' runs write (the output or its
 * scratch), its bytes, what rt_cu_tune_agree needs, and init: NULL (filled with NaN before each run, so
 * an element a run does not write cannot pass for the default's) or a device address it is copied from
 * first (a scratch output the GEMM also reads, beta != 0 on the emulated device). */
typedef struct {
  void *p;
  int64_t bytes;
  int dt;
  long long terms;
  int rounds;
  const void *init;
  const char *name; /* in the refusal beside the output's index ("y", "aux", ...), or NULL */
} RtCuCheckOut;
/* The autotuning's check (both kinds, both backends): run(arg, c) runs candidate c once to completion
 * (< 0: it cannot), copy(carg, dst, src, bytes, RT_CU_H2D / D2H / D2D) moves bytes, synchronously. */
typedef struct {
  RtCuTuneTime run;
  void *arg;
  void (*copy)(void *carg, void *dst, const void *src, int64_t bytes, int kind);
  void *carg;
  const RtCuCheckOut *outs;
  int nout;
} RtCuCheck;
enum { RT_CU_WHY = 200 };
/* Runs candidate 0 (the default) and every other c with ok[c] once, reads the outputs back and compares
 * (rt_cu_tune_agree); ok[c] = 0 for a candidate outside the tolerance (why[c]: which output, the error,
 * the tolerance) or that does not run (why[c] left empty; all when the default does not run). Returns
 * the candidates compared; *closest = max(*closest, the largest error / tolerance of those that agreed). */
int rt_cu_tune_check(const RtCuCheck *ck, int ncand, char *ok, char (*why)[RT_CU_WHY], double *closest);
/* The check's part of an autotuning summary line (attn_tune.c, gemm_tune.c): "N candidates checked
 * against <against> in S s (a run and a compare each), R refused, K skipped as refused by an earlier
 * run, the others within Q of their tolerance". */
void rt_cu_tune_check_line(char *out, size_t n, const char *against, int checked, double seconds, int refused,
                           int skipped, double closest);

/* ---- gemm_tune.c (both backends) ---- */

enum { RT_CU_EK_NONE, RT_CU_EK_BIAS, RT_CU_EK_GELU_AUX_BIAS, RT_CU_EK_DGELU, RT_CU_EK_DGELU_BGRAD,
       RT_CU_EK_RESIDUAL }; /* epilogue kinds (RESIDUAL: C, beta 1, no bias; last: recorded choices keep their numbers) */
/* What a GEMM's algorithm depends on: the shape after folding (a shared B with A not transposed:
 * one GEMM over batch * m rows), the layout, the dtypes, the pointers' common alignment (bytes,
 * at most 256) and the epilogue kind (RT_CU_EK_*; BIAS with a residual is BIAS). */
typedef struct {
  int64_t batch, m, n, k;
  int ta, tb, bb, ab_dt, y_dt, align, epi;
  int64_t sb, sy; /* a sibling pair (rt_cu_matmul_pair): B's and y's batch strides in elements, A shared; 0: not one */
} RtCuGemmKey;
RtCuGemmKey rt_cu_gemm_key(const void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t batch, int64_t m,
                           int64_t n, int64_t k, int ta, int tb, int b_batched, const RtCuEpi *ep);
int rt_cu_gemm_key_eq(const RtCuGemmKey *x, const RtCuGemmKey *y);
void rt_cu_gemm_key_str(const RtCuGemmKey *key, char *out, size_t n);
/* The key's record key (tune_rec.c): its RT_CU_GEMM_KEY_WORDS fields as numbers, " rank R" with several
 * ranks (rt_cu_rec_key). The one GEMM record format, for gemm.c and the emulated device. */
enum { RT_CU_GEMM_KEY_WORDS = 11 };
void rt_cu_gemm_rec_key(const RtCuGemmKey *key, int rank, int world, char *out, size_t n);
/* SHARDRT_GEMM_AUTOTUNE: the candidates to time per GEMM key (0: no autotuning); dflt when unset.
 * Fatal for a value that is not a number from 0 to 64. */
int rt_cu_tune_candidates(int dflt);
/* 1 when the GEMM reads its output y (beta != 0, the residual in place, GELU's backward over its
 * pre-activation): the timing runs must write a scratch copy instead. */
int rt_cu_tune_y_read(const void *y, float beta, const RtCuEpi *ep);
/* Monotonic seconds (the emulated device times its candidate with it). */
double rt_cu_tune_clock(void);
/* The fastest of ncand candidates: a warm-up run each, then the minimum of 3 timed runs; ties and
 * failures keep the earlier. *first_t / *best_t: candidate 0's and the kept one's seconds (< 0: did
 * not run); *timed counts the timed runs; log != NULL prints "<log>: candidate i: t us" for each.
 * The one timing loop of the GEMM and the attention autotuning. */
int rt_cu_tune_fastest(int ncand, RtCuTuneTime time, void *arg, const char *log, double *first_t, double *best_t,
                       int *timed);
/* rt_cu_tune_fastest for a GEMM key; counts it for rt_cu_tune_report. SHARDRT_GEMM_AUTOTUNE_LOG=1 prints
 * every candidate's time. */
int rt_cu_tune_pick(int ncand, RtCuTuneTime time, void *arg, const RtCuGemmKey *key);
/* The GEMM's outputs as the check reads them: y written at d (the output, or its scratch;
 * d_init: where the scratch's content comes from before each run, NULL: NaN-filled), the pre-activation
 * GELU_AUX_BIAS writes, the bias gradient DGELU_BGRAD writes. y: k + 2 terms (products, bias, C), no
 * rounding on the way (a bf16 y's split-K parts are added up in fp32: gemm.c excludes the reduction in
 * place in y's type); the bias gradient m more terms and one rounding. Returns how many (out: room for 3). */
int rt_cu_gemm_check_outs(const RtCuGemmKey *key, void *d, const void *d_init, const RtCuEpi *ep, RtCuCheckOut *out);
/* The record key of a refused algorithm (choice: as the record writes it): "<11 fields> refused <choice>"
 * and the rank suffix; the check's refusal warning (and its count for rt_cu_tune_report); the check's
 * counts. */
void rt_cu_gemm_refused_key(const RtCuGemmKey *key, const char *choice, int rank, int world, char *out, size_t n);
void rt_cu_tune_refused(const RtCuGemmKey *key, int cand, const char *choice, const char *why, int rank, int world);
void rt_cu_tune_checked(int checked, int skipped, double seconds, double closest);
/* Candidates checked, refused, skipped as refused by an earlier run, so far (this process). */
void rt_cu_tune_checks(int *checked, int *refused, int *skipped);
/* Counts a key that took an earlier run's recorded choice (gemm.c) for rt_cu_tune_report. */
void rt_cu_tune_recorded(void);
/* Keys tuned, timed runs, keys that took an earlier run's choice, so far (this process). */
void rt_cu_tune_stats(int *shapes, int *timed, int *recorded);
/* One line on stderr (rank 0) when keys were tuned since the last report: how many, the time spent,
 * how many kept another algorithm than the first candidate. device.c calls it after a step. */
void rt_cu_tune_report(const RtCtx *ctx);

/* ---- attn_tune.c (both backends): rt_cu_launch_tuned ---- */

/* SHARDRT_ATTN_AUTOTUNE: 1 (the default on a GPU) times the tile candidates of every tensor-core
 * attention kernel at its first call and keeps the fastest; 0 (the default on the emulated device,
 * emu 1) launches the compiled default. The backends compile the candidates (-DSK_ATTN_TUNE) only
 * when it is on. Fatal for another value. */
int rt_cu_attn_tune_on(int emu);
/* Kernels tuned (timed), timed runs, kernels that took an earlier run's recorded tiles, so far. */
void rt_cu_attn_tune_stats(int *tuned, int *timed, int *recorded);
/* Candidates checked against the default (a run and a compare each), refused by the check, and skipped
 * without a run because the record says an earlier run refused them, so far; seconds spent checking;
 * the largest error / tolerance of a candidate that agreed (how close the check came to refusing). */
void rt_cu_attn_tune_checks(int *checked, int *refused, int *skipped, double *seconds, double *closest);
/* The summary line after a step that tuned (rank 0), like rt_cu_tune_report. */
void rt_cu_attn_tune_report(const RtCtx *ctx);
/* Frees dev->attn (the device's close). */
void rt_cu_attn_tune_close(RtCuDev *dev);

/* ---- gemm.c (CUDA backend) ---- */
typedef struct RtCuGemm RtCuGemm;
RtCuGemm *rt_cu_gemm_new(void *stream, int rank, int world); /* cudaStream_t; the rank picks its record lines */
void rt_cu_gemm_free(RtCuGemm *g);
/* 0; 1 (nothing done) when cuBLASLt has no algorithm for ep's epilogue; fatal for a plain GEMM. */
int rt_cu_gemm_run(RtCuGemm *g, void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t batch, int64_t m,
                    int64_t n, int64_t k, int ta, int tb, int b_batched, float alpha, float beta, const RtCuEpi *ep);
/* A sibling pair as one strided-batched GEMM (RtCuOps.matmul_pair): no autotuning, the heuristic's first. 0; 1
 * (nothing done: the caller runs two GEMMs) when cuBLASLt has no algorithm for that batch. */
int rt_cu_gemm_run_pair(RtCuGemm *g, void *y0, int y_dt, const void *a, const void *b0, int ab_dt, int64_t m, int64_t n,
                         int64_t k, int ta, int tb, int64_t sb, int64_t sy);
/* Dense bf16 FLOP/s of an n^3 GEMM (bf16 in, fp32 accumulation, bf16 out), best of reps after
 * a warm-up; 0 when the buffers cannot be allocated. */
double rt_cu_gemm_peak(RtCuGemm *g, int64_t n, int reps);

#endif
