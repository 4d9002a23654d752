/* runtime/cuda/gemm_tune.c — what both device backends share about a GEMM's algorithm: its key
 * (the shape, layout, dtypes, pointer alignment and epilogue the choice depends on) and the
 * autotuning at its first call.
 *
 * Autotuning (SHARDRT_GEMM_AUTOTUNE=N, default 8 on a GPU, off on the emulated device; 0: off):
 * the first time a GEMM key is met outside a stream capture, the backend offers up to N candidate
 * algorithms (cuBLASLt's heuristic's first N for that exact key; the emulated device has one),
 * rt_cu_tune_pick runs each once to warm up and then TUNE_REPS times, timed one by one, and keeps
 * the fastest (the minimum; a tie keeps the earlier, the heuristic's order) for the rest of the
 * run. The timing calls run on the real operands; an output the GEMM also reads (beta != 0, or
 * the residual epilogue in place: c == y) is redirected to scratch (rt_cu_tune_y_read), the other
 * outputs (y, GELU's pre-activation, the bias gradient) are simply written again by the real call
 * after them. Before the timing, each candidate's outputs are checked against the heuristic's first's
 * on the same operands (tune_check.c, rt_cu_gemm_check_outs: y, and the pre-activation or the bias
 * gradient an epilogue writes): one outside the tolerance is refused (a warning, a "refused" record
 * line that later runs skip: rt_cu_gemm_refused_key) and never timed. rt_cu_tune_report prints one
 * summary line after the first training step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/bootstrap.h"
#include "cu_internal.h"
#include "dtype.h"

enum { TUNE_REPS = 3, TUNE_MAX = 64 };

RtCuGemmKey rt_cu_gemm_key(const void *y, int y_dt, const void *a, const void *b, int ab_dt, int64_t batch, int64_t m,
                           int64_t n, int64_t k, int ta, int tb, int b_batched, const RtCuEpi *ep) {
  if (batch > 1 && !b_batched && !ta) m *= batch, batch = 1; /* a shared B: one GEMM over batch * m rows */
  if (batch == 1) b_batched = 1;
  uintptr_t bits = (uintptr_t)y | (uintptr_t)a | (uintptr_t)b | 256;
  if (ep) bits |= (uintptr_t)ep->bias | (uintptr_t)ep->c | (uintptr_t)ep->aux | (uintptr_t)ep->dbias;
  return (RtCuGemmKey){.batch = batch, .m = m, .n = n, .k = k, .ta = ta, .tb = tb, .bb = b_batched, .ab_dt = ab_dt,
                       .y_dt = y_dt, .align = (int)(bits & -bits),
                       .epi = !ep ? RT_CU_EK_NONE : ep->dgelu ? (ep->dbias ? RT_CU_EK_DGELU_BGRAD : RT_CU_EK_DGELU)
                              : ep->aux ? RT_CU_EK_GELU_AUX_BIAS : ep->bias ? RT_CU_EK_BIAS : RT_CU_EK_RESIDUAL};
}

int rt_cu_gemm_key_eq(const RtCuGemmKey *x, const RtCuGemmKey *y) {
  return x->batch == y->batch && x->m == y->m && x->n == y->n && x->k == y->k && x->ta == y->ta && x->tb == y->tb &&
         x->bb == y->bb && x->ab_dt == y->ab_dt && x->y_dt == y->y_dt && x->align == y->align && x->epi == y->epi && x->sb == y->sb && x->sy == y->sy;
}

void rt_cu_gemm_key_str(const RtCuGemmKey *key, char *out, size_t n) {
  static const char *const epi[] = {"none", "BIAS", "GELU_AUX_BIAS", "DGELU", "DGELU_BGRAD", "RESIDUAL"};
  snprintf(out, n, "batch %lld m %lld n %lld k %lld ta %d tb %d %s -> %s align %d epilogue %s", (long long)key->batch,
           (long long)key->m, (long long)key->n, (long long)key->k, key->ta, key->tb,
           key->ab_dt == RT_BF16 ? "bf16" : "f32", key->y_dt == RT_BF16 ? "bf16" : "f32", key->align, epi[key->epi]);
}

void rt_cu_gemm_rec_key(const RtCuGemmKey *key, int rank, int world, char *out, size_t n) {
  char k[256];
  snprintf(k, sizeof k, "%lld %lld %lld %lld %d %d %d %d %d %d %d", (long long)key->batch, (long long)key->m,
           (long long)key->n, (long long)key->k, key->ta, key->tb, key->bb, key->ab_dt, key->y_dt, key->align, key->epi);
  rt_cu_rec_key(out, n, k, rank, world);
}

int rt_cu_tune_candidates(int dflt) {
  const char *v = getenv("SHARDRT_GEMM_AUTOTUNE");
  if (!v || !*v) return dflt;
  char *end;
  long n = strtol(v, &end, 10);
  if (*end || n < 0 || n > TUNE_MAX)
    rt_fatal(1, "SHARDRT_GEMM_AUTOTUNE=%s: want the number of candidate algorithms to time per GEMM, 0 (off) to %d",
             v, TUNE_MAX);
  return (int)n;
}

int rt_cu_tune_y_read(const void *y, float beta, const RtCuEpi *ep) {
  return beta != 0.0f || (ep && (ep->c == y || (ep->dgelu && ep->aux == y)));
}

static struct {
  int shapes, timed, moved, reported; /* keys tuned, candidate runs timed, keys that kept another than the first */
  int recorded;                       /* keys that took an earlier run's choice */
  double wall, first_s, best_s;       /* seconds tuning; one call of every tuned key: the first candidate, the kept */
  int checked, refused, skipped;      /* candidates compared with the first (tune_check.c), refused; skipped: refused before */
  double check_s, closest;            /* seconds checking; the largest error / tolerance that agreed */
} st;

double rt_cu_tune_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int rt_cu_tune_fastest(int ncand, RtCuTuneTime time, void *arg, const char *log, double *first_t, double *best_t,
                       int *timed) {
  int best = 0;
  *first_t = *best_t = -1;
  for (int c = 0; c < ncand; c++) {
    double t = -1;
    if (time(arg, c) >= 0) /* the warm-up; < 0: the candidate does not run */
      for (int r = 0; r < TUNE_REPS; r++) {
        double s = time(arg, c);
        if (s < 0) {
          t = -1;
          break;
        }
        if (t < 0 || s < t) t = s;
        (*timed)++;
      }
    if (log) fprintf(stderr, "%s: candidate %d: %.1f us\n", log, c, t * 1e6);
    if (c == 0) *first_t = t;
    if (t >= 0 && (*best_t < 0 || t < *best_t)) *best_t = t, best = c;
  }
  return best;
}

int rt_cu_tune_pick(int ncand, RtCuTuneTime time, void *arg, const RtCuGemmKey *key) {
  double t0 = rt_cu_tune_clock(), best_t = -1, first_t = -1;
  char desc[280] = "gemm autotune: ";
  if (rt_env_switch("SHARDRT_GEMM_AUTOTUNE_LOG", false)) rt_cu_gemm_key_str(key, desc + strlen(desc), sizeof desc - strlen(desc));
  else desc[0] = 0;
  int best = rt_cu_tune_fastest(ncand, time, arg, desc[0] ? desc : NULL, &first_t, &best_t, &st.timed);
  st.shapes++;
  st.moved += best != 0;
  if (first_t >= 0 && best_t >= 0) st.first_s += first_t, st.best_s += best_t;
  st.wall += rt_cu_tune_clock() - t0;
  return best;
}

void rt_cu_tune_recorded(void) { st.recorded++; }

void rt_cu_tune_stats(int *shapes, int *timed, int *recorded) {
  if (shapes) *shapes = st.shapes;
  if (timed) *timed = st.timed;
  if (recorded) *recorded = st.recorded;
}

void rt_cu_tune_report(const RtCtx *ctx) {
  if (st.shapes + st.recorded == st.reported) return;
  char chk[300];
  rt_cu_tune_check_line(chk, sizeof chk, "the heuristic's first", st.checked, st.check_s, st.refused, st.skipped,
                        st.closest);
  if (!ctx || ctx->rank == 0)
    fprintf(stderr,
            "gemm autotune: %d GEMM shape%s tuned in %.3f s (%d timed runs), %d kept another algorithm than the "
            "heuristic's first: one call of each %.1f -> %.1f us; %d as chosen by an earlier run; %s "
            "(SHARDRT_GEMM_AUTOTUNE=0: off)\n",
            st.shapes, st.shapes == 1 ? "" : "s", st.wall, st.timed, st.moved, st.first_s * 1e6, st.best_s * 1e6,
            st.recorded, chk);
  st.reported = st.shapes + st.recorded;
}

int rt_cu_gemm_check_outs(const RtCuGemmKey *key, void *d, const void *d_init, const RtCuEpi *ep, RtCuCheckOut *out) {
  int64_t ys = key->y_dt == RT_BF16 ? 2 : 4, mn = key->batch * key->m * key->n;
  int r = 0; /* no value rounded on the way: bf16 y's split-K parts are added up in fp32 (gemm.c's preference) */
  long long kk = key->k + 2;    /* the products, then the bias and C (or the residual) */
  int n = 0;
  out[n++] = (RtCuCheckOut){d, mn * ys, key->y_dt, kk, r, d_init, "y"};
  if (ep && ep->aux && !ep->dgelu) /* GELU_AUX_BIAS writes the pre-activation (DGELU reads it) */
    out[n++] = (RtCuCheckOut){ep->aux, mn * ys, key->y_dt, kk, r, NULL, "pre-activation"};
  if (ep && ep->dgelu && ep->dbias) /* DGELU_BGRAD: y's column sums over m rows */
    out[n++] = (RtCuCheckOut){ep->dbias, key->n * ys, key->y_dt, kk + key->m, r + 1, NULL, "bias gradient"};
  return n;
}

void rt_cu_gemm_refused_key(const RtCuGemmKey *key, const char *choice, int rank, int world, char *out, size_t n) {
  char k[256], rk[480];
  rt_cu_gemm_rec_key(key, 0, 1, k, sizeof k); /* the 11 fields, no rank */
  snprintf(rk, sizeof rk, "%s refused %s", k, choice);
  rt_cu_rec_key(out, n, rk, rank, world);
}

void rt_cu_tune_refused(const RtCuGemmKey *key, int cand, const char *choice, const char *why, int rank, int world) {
  char desc[256];
  rt_cu_gemm_key_str(key, desc, sizeof desc);
  char rk[24] = "";
  if (world > 1) snprintf(rk, sizeof rk, " (rank %d)", rank);
  fprintf(stderr,
          "warning: gemm autotune: %s%s: candidate %d (algorithm %s) refused, not what the heuristic's first computes: %s\n",
          desc, rk, cand, choice, why);
  st.refused++;
}

void rt_cu_tune_checked(int checked, int skipped, double seconds, double closest) {
  st.checked += checked, st.skipped += skipped, st.check_s += seconds;
  if (closest > st.closest) st.closest = closest;
}

void rt_cu_tune_checks(int *checked, int *refused, int *skipped) {
  if (checked) *checked = st.checked;
  if (refused) *refused = st.refused;
  if (skipped) *skipped = st.skipped;
}
