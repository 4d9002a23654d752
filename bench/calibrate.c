/* bench/calibrate.c — measures this machine's CPU kernels for the cost model and writes a profile
 * (passes/cost_profile.c's format) that `shardc plan --profile FILE` reads.
 *
 *   bench_calibrate PROFILE [threads]     (threads: per rank, default 1, as the trainers run)
 *
 * What it measures, each the best of 5 rounds of at least 50 ms of CPU time (per thread):
 *   gemm_flops, gemm_half_flops, gemm_out_s, gemm_in_s  rt_matmul at 16 trainer-sized GEMMs (k 64 ones of
 *                    small models, M 2048 ones of tiny at seq 512 and a Llama-shaped d 256 with their backward's
 *                    transposed operands, GPT-2's 1024 x 3072 x 768 and its LM head's three at 4 x 64 tokens),
 *                    timed in turn over 5 rounds of at least 20 ms each: a least-squares fit, each shape
 *                    weighted by 1 / t^2, of t = f / rate + fixed + out x (m n) + in x (m k + k n) (fixed as
 *                    gemm_half_flops = fixed x rate; a coefficient the fit puts below 0 is dropped, 0);
 *   gemm_cold_bytes  the weight-gradient GEMMs (x^T dy at tiny's layer shapes) once with their operands
 *                    in the caches and once after 128 MiB were written (what a backward finds when it
 *                    reads the forward's saved activations): operand bytes over the extra time, the
 *                    medians of 31 rounds (0 when there is none);
 *   attention_flops, attention_score_flops  rt_sdpa_fwd, causal, at seq 512 and 4 heads of 16 (tiny at
 *                    seq 512, B 4), 64 and 128 (B 2): the time per score element the kernel computes
 *                    (rt_attn_scores: the diagonal's blocks whole) is a line in the head dim, (4 hd + a) /
 *                    rate; a least-squares line through the three (weighted by relative error) gives the
 *                    rate (attention_flops) and a, the online softmax's work per score in FLOPs at that
 *                    rate (attention_score_flops; at hd 16 it outweighs the 64 FLOPs of the products:
 *                    tiny's 13-33 GFLOP/s against hd 128's 45-60); the shapes timed in turn, 5 rounds
 *                    of at least 20 ms each, the best round (two shapes timed 5 rounds each, one after
 *                    the other, gave a per-score work of 1 to 100 between runs);
 *   attention_bwd_ratio, attention_bwd_score_flops  rt_sdpa_bwd at the same shapes, in the same rounds,
 *                    (10 hd + b) / rate_b (2.5 forwards' FLOPs, and b per score: P and dS again): rate_b
 *                    over the forward's, and b;
 *   time_spread, time_spread_block  how much an instruction-sized block of work varies on this machine
 *                    as it is (its own jitter, its co-runners): 61 blocks (the first dropped) of 4 x (4
 *                    GEMMs 128 x 512 x 128 and a causal attention 1 x 128 x 4 heads x 32, a Llama-shaped
 *                    layer's forward at 128 tokens), in wall-clock time, unlike the rest (the trainers'
 *                    spans are wall clock): 1.4826 x their median absolute deviation / their median,
 *                    and the median (the plan spreads a pipeline's instruction times by it: its bubble);
 *   bandwidth        rt_add over 64 Ki floats (768 KiB moved per call: the tensors of small models
 *                    live in the caches);
 *   kernel_overhead  rt_add over 16 floats;
 *   host_bandwidth   rt_adamw over 16 Mi parameters (7 x 4 B each read or written): plan offload's update on
 *                    the host (a CUDA plan's profile takes this line from a run on the GPU machine's host,
 *                    its threads those of the trainer's host, e.g. its cores);
 *   elem_xent_s      rt_xent_fwd_bwd (the cross-entropy, forward and backward in one pass) over 64 rows of
 *                    GPT-2's 50257 logits: seconds per logit (the forward alone beside it, in a comment);
 *   elem_*_s         the C elementwise kernels the CPU trainers call (runtime/ops/ops.c), seconds
 *                    per element over 128 Ki floats: rt_binary_f32 flat, through broadcast indices
 *                    ([8,64,256] + [8,1,256]), rt_reduce_to_f32 through indices ([512,256] -> [512,1]),
 *                    rt_unary_f32 gelu (libm tanhf) and exp, on activation-sized inputs (|x| < 0.25);
 *   llvm_elem_*_s    the same flat add, gelu and exp as the LLVM-built kernels (--cpu-kernels llvm, the trainers'
 *                    default) run them, on the same inputs (bench/calibrate_llvm.c).
 * peak_flops (MFU's denominator) stays the topology's (rt_measure_peak_flops: the trainer's, per thread CPU time).
 * The links are not measured here (comm_bench measures the collectives; docs/planner.md): the profile
 * leaves them out, so the topology's figures stay; overlap is 0 (a CPU rank progresses its own
 * asynchronous collectives between kernels).
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calibrate_llvm.h"
#include "kernels/kernels.h"
#include "ops.h"

/* CPU seconds of the process over its threads: on a shared machine a kernel's wall time is mostly
 * waiting for a core, its CPU time what it costs on an idle one (bench/cost_validate.sh measures the
 * trainers the same way). */
static int nthreads = 1;
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return ((double)t.tv_sec + 1e-9 * (double)t.tv_nsec) / nthreads;
}

typedef void (*Fn)(void *);

/* Seconds per call: the best of 5 rounds of at least 50 ms. */
static double time_call(Fn f, void *arg) {
  double best = 1e30;
  f(arg); /* warm up */
  for (int r = 0; r < 5; r++) {
    int n = 0;
    double t0 = now(), t;
    do {
      f(arg);
      n++;
    } while ((t = now() - t0) < 0.05);
    if (t / n < best) best = t / n;
  }
  return best;
}

typedef struct {
  int64_t m, n, k;
  int ta, tb;
  float *a, *b, *c;
} Gemm;
static void run_gemm(void *p) {
  Gemm *g = p;
  rt_matmul(1, 1, g->m, g->n, g->k, g->ta, g->tb, g->a, g->b, 0.0f, g->c);
}

typedef struct {
  int64_t n;
  float *a, *b, *y;
} Add;
static void run_add(void *p) {
  Add *x = p;
  rt_add(x->n, x->a, x->b, x->y);
}

typedef struct {
  int64_t B, S, H, hd;
  float *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
} Attn;
static void run_attn(void *p) {
  Attn *x = p;
  rt_sdpa_fwd(x->B, x->S, x->S, x->H, x->H, x->hd, 1, x->q, x->k, x->v, x->o, x->lse);
}
static void run_attn_bwd(void *p) {
  Attn *x = p;
  rt_sdpa_bwd(x->B, x->S, x->S, x->H, x->H, x->hd, 1, x->q, x->k, x->v, x->o, x->lse, x->dout, x->dq, x->dk, x->dv);
}

/* the elementwise loops: which one, over what */
typedef struct {
  int which; /* 0 flat, 1 indexed, 2 reduce, 3 gelu (tanh), 4 exp */
  float *x, *b, *y;
} Elem;
enum { ELEM_N = 131072 };
static void run_elem(void *p) {
  Elem *e = p;
  static const RtShape s3 = {3, {8, 64, 256}}, s3b = {3, {8, 1, 256}}, s2 = {2, {512, 256}}, s2r = {2, {512, 1}};
  switch (e->which) {
  case 0: rt_binary_f32(RT_ADD, e->y, &s2, e->x, &s2, e->b, &s2); break;
  case 1: rt_binary_f32(RT_ADD, e->y, &s3, e->x, &s3, e->b, &s3b); break;
  case 2: rt_reduce_to_f32(e->y, &s2r, e->x, &s2); break;
  case 3: rt_unary_f32(RT_GELU, e->y, e->x, ELEM_N, 0); break;
  default: rt_unary_f32(RT_EXP, e->y, e->x, ELEM_N, 0); break;
  }
}

/* the cross-entropy: rows of GPT-2's vocabulary, its forward and backward in one pass (what both CPU code
 * generators emit for the fused pair) or the forward alone (d NULL) */
typedef struct {
  int64_t N, V;
  float *x, *d;
  int32_t *t;
  void *ws;
} Xent;
static void run_xent(void *p) {
  Xent *e = p;
  rt_xent_fwd_bwd(e->N, e->V, e->V, e->x, e->t, 1.0f, e->d, e->ws);
}

/* plan offload's host update (passes/zero_offload.c: rt_adamw_f32 on the host's threads): rt_adamw over
 * 16 Mi parameters, 64 MiB a stream (out of the caches, as GPT-2's 124M are) */
typedef struct {
  int64_t n;
  float *p, *g, *m, *v;
} Adam;
static void run_adamw(void *a) {
  Adam *x = a;
  rt_adamw(x->n, x->p, x->g, x->m, x->v, 1e-4f, 1.0f, 10.0, 0.9f, 0.95f, 1e-8f, 0.1f);
}

static float *randv(int64_t n);

/* Seconds per call of each of n calls f(arg + i size): 5 rounds, each timing every one in turn for at least 20 ms,
 * the best round of each (the attention's way, below). */
static void in_turn(Fn f, void *arg, size_t size, int n, double *t) {
  for (int i = 0; i < n; i++) t[i] = 1e30;
  for (int r = 0; r < 5; r++)
    for (int i = 0; i < n; i++) {
      int calls = 0;
      double t0 = now(), dt;
      do {
        f((char *)arg + i * size);
        calls++;
      } while ((dt = now() - t0) < 0.02);
      if (dt / calls < t[i]) t[i] = dt / calls;
    }
}

/* Seconds per call of the forward and the backward of each of n attentions: 5 rounds, each timing every
 * call in turn for at least 20 ms (so that a burst of the machine's other work lands on one round, not
 * on one shape), the best round of each. */
static void attn_times(Attn *a, int n, double *tf, double *tb) {
  for (int i = 0; i < 2 * n; i++) (i < n ? tf : tb)[i % n] = 1e30;
  for (int r = 0; r < 5; r++)
    for (int i = 0; i < 2 * n; i++) {
      Fn f = i < n ? run_attn : run_attn_bwd;
      double *best = i < n ? &tf[i] : &tb[i - n];
      int calls = 0;
      double t0 = now(), t;
      do {
        f(&a[i % n]);
        calls++;
      } while ((t = now() - t0) < 0.02);
      if (t / calls < *best) *best = t / calls;
    }
}

/* y = c + s x by least squares, each point weighted by 1 / y^2 (its relative error) */
static void fit_line(const double *x, const double *y, int n, double *s, double *c) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (int i = 0; i < n; i++) {
    double w = 1 / (y[i] * y[i]);
    sw += w, sx += w * x[i], sy += w * y[i], sxx += w * x[i] * x[i], sxy += w * x[i] * y[i];
  }
  *s = (sw * sxy - sx * sy) / (sw * sxx - sx * sx);
  *c = (sy - *s * sx) / sw;
}
/* y = X c by least squares over n points of p terms, each point weighted by 1 / y^2, every c >= 0: a term
 * whose coefficient comes out negative (noise, or nothing of it on this machine) is dropped and the rest
 * fitted again. */
static void fit_nonneg(int n, int p, double X[][4], const double *y, double *c) {
  bool on[4] = {true, true, true, true};
  for (int round = 0; round < p; round++) {
    double A[4][5] = {{0}};
    for (int i = 0; i < n; i++) {
      double w = 1 / (y[i] * y[i]);
      for (int r = 0; r < p; r++)
        for (int q = 0; q <= p; q++) A[r][q] += w * X[i][r] * (q < p ? X[i][q] : y[i]);
    }
    for (int r = 0; r < p; r++) /* a dropped term: c = 0 */
      if (!on[r]) {
        for (int q = 0; q <= p; q++) A[r][q] = q == r;
        for (int q = 0; q < p; q++)
          if (q != r) A[q][r] = 0;
      }
    for (int r = 0; r < p; r++) { /* Gauss-Jordan with partial pivoting */
      int b = r;
      for (int q = r + 1; q < p; q++)
        if (fabs(A[q][r]) > fabs(A[b][r])) b = q;
      for (int q = 0; q <= p; q++) {
        double t = A[r][q];
        A[r][q] = A[b][q], A[b][q] = t;
      }
      for (int q = 0; q < p; q++)
        if (q != r && A[r][r] != 0) {
          double f = A[q][r] / A[r][r];
          for (int e = r; e <= p; e++) A[q][e] -= f * A[r][e];
        }
    }
    bool neg = false;
    for (int r = 0; r < p; r++) {
      c[r] = on[r] && A[r][r] != 0 ? A[r][p] / A[r][r] : 0;
      if (c[r] < 0) on[r] = false, neg = true, c[r] = 0;
    }
    if (!neg) return;
  }
}
static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* gemm_cold_bytes (see the top): bytes/s of the extra time a GEMM takes when its operands come from
 * memory rather than the caches; 0 when no extra time shows. */
static double cold_rate(void) {
  static const int64_t ws[][3] = {{128, 384, 128}, {128, 128, 128}, {128, 512, 128}, {512, 128, 128}}; /* m n k, ta */
  enum { R = 31 };
  size_t fb = (size_t)128 << 20;
  char *flush = malloc(fb);
  if (!flush) return 0;
  double extra = 0, bytes = 0;
  for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
    Gemm g = {ws[i][0], ws[i][1], ws[i][2], 1, 0, NULL, NULL, NULL};
    g.a = randv(g.k * g.m), g.b = randv(g.k * g.n), g.c = randv(g.m * g.n);
    double hot[R], cold[R];
    for (int r = 0; r < R; r++) {
      rt_matmul(1, 1, g.m, g.n, g.k, 1, 0, g.a, g.b, 0.0f, g.c);
      double t0 = now();
      rt_matmul(1, 1, g.m, g.n, g.k, 1, 0, g.a, g.b, 0.0f, g.c);
      hot[r] = now() - t0;
      memset(flush, r, fb);
      t0 = now();
      rt_matmul(1, 1, g.m, g.n, g.k, 1, 0, g.a, g.b, 0.0f, g.c);
      cold[r] = now() - t0;
    }
    qsort(hot, R, sizeof *hot, cmp_double);
    qsort(cold, R, sizeof *cold, cmp_double);
    extra += cold[R / 2] - hot[R / 2];
    bytes += 4.0 * (double)(g.k * (g.m + g.n));
    free(g.a), free(g.b), free(g.c);
  }
  free(flush);
  return extra > 0 ? bytes / extra : 0;
}

/* time_spread (see the top): the robust coefficient of variation of a block's wall time; *block its median. */
static double spread_rate(double *block) {
  enum { NB = 61 };
  int64_t m = 128, n = 512, k = 128, S = 128, H = 4, hd = 32;
  float *a = randv(m * k), *b = randv(k * n), *c = randv(m * n);
  float *q = randv(S * H * hd), *kk = randv(S * H * hd), *v = randv(S * H * hd), *o = randv(S * H * hd), *lse = randv(H * S);
  double t[NB], dev[NB];
  for (int r = 0; r < NB; r++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int j = 0; j < 4; j++) {
      for (int g = 0; g < 4; g++) rt_matmul(1, 1, m, n, k, 0, 0, a, b, 0.0f, c);
      rt_sdpa_fwd(1, S, S, H, H, hd, 1, q, kk, v, o, lse);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    t[r] = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  }
  qsort(t + 1, NB - 1, sizeof(double), cmp_double); /* t[0]: the warm-up */
  double med = t[1 + (NB - 1) / 2];
  for (int r = 1; r < NB; r++) dev[r - 1] = fabs(t[r] - med);
  qsort(dev, NB - 1, sizeof(double), cmp_double);
  free(a), free(b), free(c), free(q), free(kk), free(v), free(o), free(lse);
  *block = med;
  return med > 0 ? 1.4826 * dev[(NB - 1) / 2] / med : 0;
}

static float *randv(int64_t n) {
  float *v = malloc((size_t)n * sizeof *v);
  if (!v) {
    fprintf(stderr, "calibrate: out of memory\n");
    exit(1);
  }
  for (int64_t i = 0; i < n; i++) v[i] = (float)rand() / RAND_MAX - 0.5f;
  return v;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_calibrate PROFILE [threads]\n");
    return 2;
  }
  int threads = argc > 2 ? atoi(argv[2]) : 1;
  if (threads < 1) threads = 1;
  rt_set_threads(threads);
  nthreads = threads;

  /* GEMM time: t = f / rate + fixed + out x (m n) + in x (m k + k n), least squares over trainer-sized shapes,
   * each point weighted 1 / t^2 (its relative error: unweighted, the largest shape's noise set the small
   * terms), with the small models' own: M 2048 (seq 512 x 4) at k 64 and 256, their backward's dX (B^T)
   * and dW (A^T, k 2048), and GPT-2's LM head at 4 x 64 tokens (its 51 MB of logits out of the caches: the
   * logits, dx and dwte). One rate alone put tiny's and a Llama-shaped model's GEMMs 19-23 % under what
   * they take in the trainers: OpenBLAS's pass over C (sgemm_beta) and its packing do not shrink with k. */
  static const int64_t shapes[][5] = {
      {512, 192, 64, 0, 0},   {512, 64, 64, 0, 0},     {512, 256, 64, 0, 0},     {512, 64, 256, 0, 0},
      {512, 256, 256, 0, 0},  {1024, 768, 768, 0, 0},  {1024, 3072, 768, 0, 0},  {2048, 256, 64, 0, 0},
      {2048, 64, 256, 0, 0},  {2048, 768, 256, 0, 0},  {2048, 64, 192, 0, 1},    {64, 192, 2048, 1, 0},
      {256, 768, 2048, 1, 0}, {256, 50257, 64, 0, 1}, {256, 64, 50257, 0, 0}, {50257, 64, 256, 1, 0}}; /* m n k ta tb */
  enum { NS = sizeof shapes / sizeof shapes[0], NT = 4 };
  double fx[NS], ty[NS], X[NS][NT];
  Gemm gs[NS];
  for (int i = 0; i < NS; i++) {
    Gemm *g = &gs[i];
    *g = (Gemm){shapes[i][0], shapes[i][1], shapes[i][2], (int)shapes[i][3], (int)shapes[i][4], NULL, NULL, NULL};
    g->a = randv(g->m * g->k), g->b = randv(g->k * g->n), g->c = randv(g->m * g->n);
    fx[i] = 2.0 * (double)(g->m * g->n * g->k);
    X[i][0] = fx[i], X[i][1] = 1, X[i][2] = (double)(g->m * g->n), X[i][3] = (double)(g->k * (g->m + g->n));
    run_gemm(g); /* warm up */
  }
  in_turn(run_gemm, gs, sizeof *gs, NS, ty); /* the shapes in turn (a burst of the machine's other work: one round) */
  for (int i = 0; i < NS; i++) free(gs[i].a), free(gs[i].b), free(gs[i].c);
  double gc[NT];
  fit_nonneg(NS, NT, X, ty, gc);
  double gemm = gc[0] > 0 ? 1.0 / gc[0] : fx[NS - 1] / ty[NS - 1], half = gc[1] * gemm, gout = gc[2], gin = gc[3];
  double cold = cold_rate();
  double block, spread = spread_rate(&block);
  /* attention: seconds per computed score element at three head dims, a line in hd (see the top) */
  enum { NA = 3 };
  static const int64_t ashape[NA][4] = {{4, 512, 4, 16}, {2, 512, 4, 64}, {2, 512, 4, 128}}; /* B S H hd */
  Attn at[NA];
  double sc[NA], yf[NA], yb[NA], arate[NA][2];
  for (int i = 0; i < NA; i++) {
    at[i] = (Attn){ashape[i][0], ashape[i][1], ashape[i][2], ashape[i][3], NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    int64_t qn = at[i].B * at[i].S * at[i].H * at[i].hd;
    at[i].q = randv(qn), at[i].k = randv(qn), at[i].v = randv(qn), at[i].o = randv(qn);
    at[i].lse = randv(at[i].B * at[i].H * at[i].S);
    at[i].dout = randv(qn), at[i].dq = randv(qn), at[i].dk = randv(qn), at[i].dv = randv(qn);
    sc[i] = (double)(at[i].B * at[i].H) * rt_attn_scores(at[i].S, at[i].S, 1);
    run_attn(&at[i]); /* o and lse of these q, k, v: the backward's inputs */
  }
  attn_times(at, NA, yf, yb);
  double hx[NA];
  for (int i = 0; i < NA; i++) {
    hx[i] = (double)ashape[i][3];
    double fl = 0.5 * 4.0 * (double)(at[i].B * at[i].S * at[i].S * at[i].H * at[i].hd); /* as bench_attn counts it */
    arate[i][0] = fl / yf[i], arate[i][1] = 2.5 * fl / yb[i];
    yf[i] /= sc[i], yb[i] /= sc[i];
    free(at[i].q), free(at[i].k), free(at[i].v), free(at[i].o), free(at[i].lse);
    free(at[i].dout), free(at[i].dq), free(at[i].dk), free(at[i].dv);
  }
  double sf, cf, sb, cb;
  fit_line(hx, yf, NA, &sf, &cf);
  fit_line(hx, yb, NA, &sb, &cb);
  /* a slope at or below 0 (noise): the largest head dim's rate, nothing per score */
  double attn = sf > 0 ? 4.0 / sf : 4.0 * hx[NA - 1] / yf[NA - 1], attn_score = sf > 0 ? fmax(0, cf) * attn : 0;
  double attn_bwd = sb > 0 ? 10.0 / sb : 10.0 * hx[NA - 1] / yb[NA - 1], attn_bwd_score = sb > 0 ? fmax(0, cb) * attn_bwd : 0;

  Add big = {64 * 1024, NULL, NULL, NULL}, small = {16, NULL, NULL, NULL};
  big.a = randv(big.n), big.b = randv(big.n), big.y = randv(big.n);
  small.a = big.a, small.b = big.b, small.y = big.y;
  double bw = 3.0 * 4.0 * (double)big.n / time_call(run_add, &big);
  double overhead = time_call(run_add, &small);

  Adam ad = {16 << 20, randv(16 << 20), randv(16 << 20), NULL, NULL};
  ad.m = calloc((size_t)ad.n, sizeof(float)), ad.v = calloc((size_t)ad.n, sizeof(float));
  if (!ad.m || !ad.v) {
    fprintf(stderr, "calibrate: out of memory\n");
    return 1;
  }
  double host = 28.0 * (double)ad.n / time_call(run_adamw, &ad); /* reads p g m v, writes p m v: 7 x 4 B */
  free(ad.p), free(ad.g), free(ad.m), free(ad.v);

  double elem[5];
  Elem el = {0, randv(ELEM_N), randv(ELEM_N), randv(ELEM_N)};
  for (int i = 0; i < ELEM_N; i++) el.x[i] *= 0.5f; /* |x| < 0.25: activations, tanhf's common range */
  for (el.which = 0; el.which < 5; el.which++) elem[el.which] = time_call(run_elem, &el) / ELEM_N;
  double lelem[CAL_LLVM_COUNT];
  char *lwhy = NULL;
  bool llvm = calibrate_llvm_elem(time_call, el.x, el.b, el.y, ELEM_N, lelem, &lwhy);
  if (!llvm) fprintf(stderr, "calibrate: the LLVM kernels not measured (%s): the profile prices them as the C ones\n", lwhy);
  free(lwhy);
  free(el.x), free(el.b), free(el.y);

  Xent xe = {64, 50257, NULL, NULL, NULL, NULL};
  xe.x = randv(xe.N * xe.V), xe.d = randv(xe.N * xe.V), xe.t = malloc((size_t)xe.N * sizeof *xe.t);
  xe.ws = malloc(rt_xent_workspace_bytes(xe.N));
  if (!xe.t || !xe.ws) {
    fprintf(stderr, "calibrate: out of memory\n");
    return 1;
  }
  for (int64_t i = 0; i < xe.N * xe.V; i++) xe.x[i] *= 8.0f; /* logits of a few units */
  for (int64_t r = 0; r < xe.N; r++) xe.t[r] = (int32_t)((r * 7919) % xe.V);
  double xent = time_call(run_xent, &xe) / (double)(xe.N * xe.V);
  float *keep = xe.d;
  xe.d = NULL;
  double xent_fwd = time_call(run_xent, &xe) / (double)(xe.N * xe.V);
  free(xe.x), free(keep), free(xe.t), free(xe.ws);

  FILE *f = fopen(argv[1], "w");
  if (!f) {
    perror(argv[1]);
    return 1;
  }
  fprintf(f, "# shardc cost profile (docs/planner.md): `key value`, SI units; bench_calibrate, %d thread(s), BLAS %s\n",
          threads, rt_blas_name());
  fprintf(f, "source bench_calibrate %d thread(s)\n", threads);
  fprintf(f, "gemm_flops       %.4g   # GEMM FLOP/s, large; measured:", gemm);
  for (int i = 0; i < NS; i++) fprintf(f, " %lldx%lldx%lld %.3g", (long long)shapes[i][0], (long long)shapes[i][1],
                                       (long long)shapes[i][2], fx[i] / ty[i]);
  fprintf(f, "\ngemm_half_flops  %.4g   # a GEMM's fixed time, as FLOPs at that rate\n", half);
  fprintf(f, "gemm_out_s       %.4g   # s per output element on top (C's pass)\n", gout);
  fprintf(f, "gemm_in_s        %.4g   # s per operand element on top (packing); the fit's error per shape (%%):", gin);
  for (int i = 0; i < NS; i++)
    fprintf(f, " %+.0f", 100 * ((X[i][0] * gc[0] + gc[1] + X[i][2] * gc[2] + X[i][3] * gc[3]) / ty[i] - 1));
  fprintf(f, "\n");
  fprintf(f, "gemm_cold_bytes  %.4g   # bytes/s of a GEMM operand read from memory, on top (0: none seen)\n", cold);
  fprintf(f, "attention_flops  %.4g   # causal, seq 512, 4 heads; measured (GFLOP/s, S^2 / 2 counted):", attn);
  for (int i = 0; i < NA; i++) fprintf(f, " hd %lld %.3g", (long long)ashape[i][3], arate[i][0] * 1e-9);
  fprintf(f, "\nattention_score_flops  %.4g   # the forward's work per computed score beyond 4 hd FLOPs\n", attn_score);
  fprintf(f, "attention_bwd_ratio  %.4g   # the backward's rate over the forward's (its FLOPs 2.5 forwards'): %.4g; measured:",
          attn_bwd / attn, attn_bwd);
  for (int i = 0; i < NA; i++) fprintf(f, " hd %lld %.3g", (long long)ashape[i][3], arate[i][1] * 1e-9);
  fprintf(f, "\n");
  fprintf(f, "attention_bwd_score_flops  %.4g   # the backward's work per computed score beyond 10 hd FLOPs\n", attn_bwd_score);
  fprintf(f, "time_spread      %.4g   # robust coefficient of variation of a block's wall time\n", spread);
  fprintf(f, "time_spread_block  %.4g   # s, that block's median\n", block);
  fprintf(f, "bandwidth        %.4g   # bytes/s read + written, rt_add over 64 Ki floats\n", bw);
  fprintf(f, "kernel_overhead  %.4g   # s, rt_add over 16 floats\n", overhead);
  fprintf(f, "overlap          0\n");
  fprintf(f, "host_bandwidth   %.4g   # bytes/s read + written, rt_adamw over 16 Mi parameters (plan offload's host update)\n", host);
  static const char *const ek[] = {"elem_flat_s   ", "elem_indexed_s", "elem_reduce_s ", "elem_tanh_s   ", "elem_exp_s    "};
  for (int i = 0; i < 5; i++) fprintf(f, "%s   %.4g   # s per element, runtime/ops/ops.c\n", ek[i], elem[i]);
  fprintf(f, "elem_xent_s      %.4g   # s per logit, cross-entropy forward + backward, 64 x 50257 (forward alone %.3g)\n",
          xent, xent_fwd);
  static const char *const lk[] = {"llvm_elem_flat_s", "llvm_elem_tanh_s", "llvm_elem_exp_s "};
  for (int i = 0; llvm && i < CAL_LLVM_COUNT; i++)
    fprintf(f, "%s   %.4g   # s per element, the LLVM kernels (--cpu-kernels llvm), bench/calibrate_llvm.c\n", lk[i], lelem[i]);
  if (fclose(f) != 0) {
    perror(argv[1]);
    return 1;
  }
  printf("gemm %.2f GFLOP/s (half at %.3g FLOP, %.3g ns an output and %.3g ns an operand element; operands from memory "
         "%.2f GB/s on top), cross-entropy %.3g ns a logit, attention %.2f GFLOP/s + %.3g "
         "FLOPs a score (backward %.2f + %.3g), bandwidth %.2f GB/s, overhead %.2f us, host AdamW %.2f GB/s, spread %.3f "
         "over %.3g ms -> %s\n",
         gemm * 1e-9, half, gout * 1e9, gin * 1e9, cold * 1e-9, xent * 1e9, attn * 1e-9, attn_score, attn_bwd * 1e-9, attn_bwd_score, bw * 1e-9,
         overhead * 1e6, host * 1e-9, spread, block * 1e3, argv[1]);
  free(big.a), free(big.b), free(big.y);
  return 0;
}
