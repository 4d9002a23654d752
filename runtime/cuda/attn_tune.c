/* runtime/cuda/attn_tune.c — rt_cu_launch_tuned (cuda_ops.h): the tensor-core attention's tiles
 * chosen at a kernel's first call on the device it runs on, as the GEMMs' algorithms are (gemm_tune.c).
 *
 * The compiler emits every kernel of an attention in each tile configuration of cuk_flash_variants
 * (codegen/cuda_flash_cfg.c, the one list), the compiled default first; the others sit inside
 * `#ifdef SK_ATTN_TUNE`, which the backends define only when SHARDRT_ATTN_AUTOTUNE is on, so with it
 * off nothing more is compiled. With it on, the first launch of a key (the kernel and its shapes)
 * outside a graph capture takes the tiles an earlier run on the same GPU model and toolkit recorded,
 * when they are one of the candidates, or else checks and times the candidates on the call's own
 * operands. The check first: the default and then each other candidate run once, their outputs filled
 * with NaN before (an element a candidate does not write cannot pass for the default's) and read back,
 * and a candidate whose outputs are not within tune_check.c's tolerance of the default's (outs: each
 * output's type, accumulation length and bf16 roundings) is refused: a warning naming the kernel, the
 * candidate and the error, a "refused" line in the record (a later run that tunes this key again skips
 * it without running it), and it is never timed. Then the timing of the others (rt_cu_tune_fastest: a
 * warm-up, then the minimum of 3) keeps the fastest (a tie keeps the earlier, the compiled default
 * first) and records it. An output that overlaps an input the kernel reads goes to scratch during the
 * checking and timing runs; the others are written again by the real launch after them (the kernels
 * write every element of their outputs). The forward, dK/dV and dQ kernels are keys of their own, each
 * picks its tiles independently. The backward at hd 64 / 128 also has a pair key ("flash_bwd ...",
 * rt_cu_launch_tuned_or) whose candidates are two launches each (`pre`, then the kernel): the two kernels'
 * compiled defaults, and the backward in one kernel (shardk_wgmma_bwd1.cuh, after D's kernel), checked on
 * dq, dk and dv; its choice 0 hands back to the two kernels' own keys.
 *
 * The record: <cache>/attn-tune-<hash of the backend's tune_id (GPU name, NVRTC and CUDA runtime
 * versions)>.txt, a line per key (with several ranks, per key and rank: ranks time on their own and
 * may keep different tiles): the key, a tab, the tiles; a refused candidate's line is the key, " refused ",
 * its tiles (and the rank suffix), a tab, its error. The file's hash covers "checked" (records written
 * before the check existed name choices never checked: not read). A resumed run reads it and launches the same
 * tiles, so it computes the same bits; without it two runs could time the candidates in another order
 * of noise and train on different bits. Other ranks' lines are merged at each write (tune_rec.c, the
 * one record implementation, shared with the GEMMs).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/bootstrap.h"
#include "cu_internal.h"
#include "cuda_ops.h"
#include "dtype.h"

enum { ARGS_MAX = 16 };

typedef struct {
  int on;          /* SHARDRT_ATTN_AUTOTUNE */
  RtCuRec rec;     /* the record (tune_rec.c) */
  struct {         /* the keys met in this run and the candidate each launches */
    const char *key; /* the generated code's string literal */
    int cand;
  } *seen;
  int nseen, capseen;
} AttnTune;

static struct {
  int tuned, timed, recorded, moved, reported;
  int checked, refused, skipped; /* candidates compared with the default; refused; skipped (refused before) */
  double wall, first_s, best_s, check_s, closest; /* closest: the largest error / tolerance that agreed */
} st;

int rt_cu_attn_tune_on(int emu) {
  const char *v = getenv("SHARDRT_ATTN_AUTOTUNE");
  if (!v || !*v) return !emu;
  if (!strcmp(v, "0") || !strcmp(v, "1")) return v[0] == '1';
  rt_fatal(1, "SHARDRT_ATTN_AUTOTUNE=%s: want 1 (time the attention kernels' tile candidates at their first call) "
              "or 0 (the compiled default)",
           v);
}

void rt_cu_attn_tune_stats(int *tuned, int *timed, int *recorded) {
  if (tuned) *tuned = st.tuned;
  if (timed) *timed = st.timed;
  if (recorded) *recorded = st.recorded;
}

void rt_cu_attn_tune_checks(int *checked, int *refused, int *skipped, double *seconds, double *closest) {
  if (closest) *closest = st.closest;
  if (checked) *checked = st.checked;
  if (refused) *refused = st.refused;
  if (skipped) *skipped = st.skipped;
  if (seconds) *seconds = st.check_s;
}

static AttnTune *state(RtCuDev *d) {
  if (d->attn) return d->attn;
  AttnTune *t = calloc(1, sizeof *t);
  if (!t) rt_fatal(1, "out of memory");
  t->on = rt_cu_attn_tune_on(d->ops->name[0] == 'e');
  if (t->on) {
    char id[512];
    d->ops->tune_id(d->be, id, sizeof id);
    const char *parts[] = {id, "checked"}; /* records from before the check: not read (tune_check.c) */
    const size_t lens[] = {strlen(id), 7};
    rt_cu_rec_open(&t->rec, "attn-tune", parts, lens, 2, 0);
  }
  d->attn = t;
  return t;
}

void rt_cu_attn_tune_close(RtCuDev *d) {
  AttnTune *t = d->attn;
  if (!t) return;
  rt_cu_rec_free(&t->rec);
  free(t->seen);
  free(t);
  d->attn = NULL;
}

/* One timing run of a candidate (rt_cu_tune_fastest); < 0 (not run) for a candidate the check refused. */
typedef struct {
  RtCuDev *d;
  const RtCuTileCand *cand, *pre; /* pre: NULL, or each candidate's first launch (rt_cu_launch_tuned_or) */
  unsigned gy, gz, pre_gy;
  void **args;
  const char *ok; /* [ncand] */
} Trial;

static double trial_time(void *arg, int c) {
  Trial *tr = arg;
  if (!tr->ok[c]) return -1;
  const RtCuTileCand *k = &tr->cand[c], *p = tr->pre ? &tr->pre[c] : NULL;
  double pre = 0;
  if (p) { /* its first launch: timed on its own, the two times added */
    const unsigned pgrid[3] = {(unsigned)p->gx, tr->pre_gy, tr->gz}, pblock[3] = {p->bx, 1, 1};
    if ((pre = tr->d->ops->time_launch(tr->d->be, p->k, pgrid, pblock, p->smem, tr->args)) < 0) return -1;
  }
  const unsigned grid[3] = {(unsigned)k->gx, tr->gy, tr->gz}, block[3] = {k->bx, 1, 1};
  const double t = tr->d->ops->time_launch(tr->d->be, k->k, grid, block, k->smem, tr->args);
  return t < 0 ? t : pre + t;
}

/* The record key of candidate c's refusal: "<key> refused <tiles>" (and the rank suffix). */
static void refused_key(char *out, size_t n, const char *key, const char *tiles, const RtCtx *ctx) {
  char k[400];
  snprintf(k, sizeof k, "%s refused %s", key, tiles);
  rt_cu_rec_key(out, n, k, ctx->rank, ctx->world);
}

static void check_copy(void *carg, void *dst, const void *src, int64_t bytes, int kind) {
  RtCuDev *d = carg;
  d->ops->copy(d->be, dst, src, bytes, kind);
}

/* The check (tune_check.c): every candidate the record has not refused runs once and is compared with
 * the default; ok[c] = 0 for those refused (now: a warning and a record line; or by an earlier run) or
 * that do not launch. */
static void check(RtCtx *ctx, AttnTune *t, Trial *tr, const char *key, int ncand, char *const *addr,
                  const long long *bytes, int nout, const RtCuTuneOut *outs, char *ok) {
  char rk[600], (*why)[RT_CU_WHY] = calloc((size_t)ncand, RT_CU_WHY);
  RtCuCheckOut co[ARGS_MAX];
  if (!why) rt_fatal(1, "out of memory");
  for (int c = 1; c < ncand; c++) {
    refused_key(rk, sizeof rk, key, tr->cand[c].tiles, ctx);
    if (rt_cu_rec_get(&t->rec, rk)) ok[c] = 0, st.skipped++;
  }
  for (int o = 0; o < nout; o++)
    co[o] = (RtCuCheckOut){addr[o], bytes[o], outs[o].dt, outs[o].terms, outs[o].rounds, NULL, NULL};
  double t0 = rt_cu_tune_clock();
  RtCuCheck ck = {trial_time, tr, check_copy, tr->d, co, nout}; /* a check's run: the timing's, to completion */
  char *was = malloc((size_t)ncand);
  if (!was) rt_fatal(1, "out of memory");
  memcpy(was, ok, (size_t)ncand);
  st.checked += rt_cu_tune_check(&ck, ncand, ok, why, &st.closest);
  st.check_s += rt_cu_tune_clock() - t0;
  for (int c = 1; c < ncand; c++) {
    if (!was[c] || ok[c] || !why[c][0]) continue;
    st.refused++;
    char rank[24] = "";
    if (ctx->world > 1) snprintf(rank, sizeof rank, " (rank %d)", ctx->rank);
    fprintf(stderr,
            "warning: attn autotune: %s%s: candidate %d (tiles %s) refused, not what the compiled default (%s) "
            "computes: %s\n",
            key, rank, c, tr->cand[c].tiles, tr->cand[0].tiles, why[c]);
    refused_key(rk, sizeof rk, key, tr->cand[c].tiles, ctx);
    rt_cu_rec_set(&t->rec, rk, why[c]);
  }
  free(why), free(was);
}

/* Checks and times the candidates on the call's operands (outputs overlapping an input to scratch); the
 * index of the fastest that agrees with the default, or -1 when the scratch could not be had (the
 * default then). */
static int tune(RtCtx *ctx, RtCuDev *d, AttnTune *t, const char *key, int ncand, const RtCuTileCand *cand,
                const RtCuTileCand *pre, unsigned pre_gy, unsigned gy,
                unsigned gz, int nargs, void **args, const long long *bytes, int nout, const RtCuTuneOut *outs) {
  char *addr[ARGS_MAX], *scratch[ARGS_MAX] = {0}, *ok = malloc((size_t)ncand);
  void *targs[ARGS_MAX];
  int good = 1;
  if (!ok) rt_fatal(1, "out of memory");
  for (int i = 0; i < nargs; i++) addr[i] = *(char **)args[i], targs[i] = &addr[i];
  for (int o = 0; o < nout && good; o++) {
    char *p = *(char **)args[o];
    int clash = 0;
    for (int i = nout; i < nargs; i++) {
      char *q = *(char **)args[i];
      clash |= p < q + bytes[i] && q < p + bytes[o];
    }
    if (clash || outs[o].slice) good = (scratch[o] = addr[o] = d->ops->scratch(d->be, bytes[o])) != NULL;
  }
  int best = -1;
  if (good) {
    bool show = rt_env_switch("SHARDRT_ATTN_AUTOTUNE_LOG", false); /* (read strictly: runtime/base.h) */
    char log[300];
    snprintf(log, sizeof log, "attn autotune: %s", key);
    double t0 = rt_cu_tune_clock(), first_t, best_t;
    memset(ok, 1, (size_t)ncand);
    Trial tr = {d, cand, pre, gy, gz, pre_gy, targs, ok};
    check(ctx, t, &tr, key, ncand, addr, bytes, nout, outs, ok);
    best = rt_cu_tune_fastest(ncand, trial_time, &tr, show ? log : NULL, &first_t, &best_t,
                              &st.timed);
    st.tuned++;
    st.moved += best != 0;
    if (first_t >= 0 && best_t >= 0) st.first_s += first_t, st.best_s += best_t;
    st.wall += rt_cu_tune_clock() - t0;
  }
  for (int o = 0; o < nout; o++)
    if (scratch[o]) d->ops->scratch_free(d->be, scratch[o]);
  free(ok);
  return best;
}

/* The candidate key launches in this run: decided at its first launch. */
static int choose(RtCtx *ctx, RtCuDev *d, AttnTune *t, const char *key, int ncand, const RtCuTileCand *cand,
                  const RtCuTileCand *pre, unsigned pre_gy,
                  unsigned gy, unsigned gz, int nargs, void **args, const long long *bytes, int nout,
                  const RtCuTuneOut *outs) {
  for (int i = 0; i < t->nseen; i++)
    if (t->seen[i].key == key || !strcmp(t->seen[i].key, key)) return t->seen[i].cand;
  char rkey[320]; /* several ranks: each its own record line, so that a resumed run gives every rank its tiles */
  rt_cu_rec_key(rkey, sizeof rkey, key, ctx->rank, ctx->world);
  int c = -1;
  const char *how = NULL, *rec = rt_cu_rec_get(&t->rec, rkey);
  for (int i = 0; rec && i < ncand && c < 0; i++)
    if (!strcmp(cand[i].tiles, rec)) c = i, how = "as recorded by an earlier run", st.recorded++;
  if (c < 0 && d->ops->capturing && d->ops->capturing(d->be)) {
    c = 0, how = "the compiled default (first met inside a graph capture: not timed)";
  } else if (c < 0) {
    c = tune(ctx, d, t, key, ncand, cand, pre, pre_gy, gy, gz, nargs, args, bytes, nout, outs);
    if (c < 0) {
      c = 0, how = "the compiled default (no scratch for the timing runs)";
    } else {
      how = "the fastest";
      rt_cu_rec_set(&t->rec, rkey, cand[c].tiles);
      rt_cu_rec_save(&t->rec, "attention");
    }
  }
  if (ctx->rank == 0)
    fprintf(stderr, "attn autotune: %s: tiles %s (candidate %d of %d, default %s), %s\n", key, cand[c].tiles, c, ncand,
            cand[0].tiles, how);
  if (t->nseen == t->capseen) {
    t->capseen = t->capseen ? 2 * t->capseen : 16;
    void *s = realloc(t->seen, (size_t)t->capseen * sizeof *t->seen);
    if (!s) rt_fatal(1, "out of memory");
    t->seen = s;
  }
  t->seen[t->nseen].key = key;
  t->seen[t->nseen++].cand = c;
  return c;
}

/* SHARDRT_ATTN_WGMMA=0 keeps the wgmma candidates out where the device would run them (the forward
 * on mma.sync alone): a fallback should one of them fault on a GPU, which the output check cannot
 * catch (the fault ends the process). */
static int wgmma_allowed(void) {
  const char *v = getenv("SHARDRT_ATTN_WGMMA");
  if (!v || !*v) return 1;
  if (!strcmp(v, "0") || !strcmp(v, "1")) return v[0] == '1';
  rt_fatal(1, "SHARDRT_ATTN_WGMMA=%s: want 0 (no wgmma attention candidates) or 1 (where the device runs them)", v);
}

int rt_cu_tile_avail(const RtCuTileCand *cand, int n, int wgmma, RtCuTileCand *out, int max) {
  int m = 0;
  wgmma = wgmma && wgmma_allowed();
  for (int i = 0; i < n && m < max; i++)
    if (wgmma || (strncmp(cand[i].tiles, "wg", 2) != 0 && strncmp(cand[i].tiles, "ws", 2) != 0)) /* ws: warp-specialized */
      out[m++] = cand[i];
  return m;
}

/* The candidate key launches (rt_cu_launch_tuned); or (pre given): 0 when that is the default, launching
 * nothing (rt_cu_launch_tuned_or) */
static int launch_tuned(RtCtx *ctx, const char *key, int ncand, const RtCuTileCand *cand, const RtCuTileCand *pre,
                        long long pre_gy, long long gy, long long gz, int nargs, void **args, const long long *bytes,
                        int nout, const RtCuTuneOut *outs) {
  RtCuDev *d = rt_cu_dev(ctx);
  if (ncand < 1 || ncand > 64 || nargs > ARGS_MAX || nout > nargs)
    rt_fatal(1, "rt_cu_launch_tuned(%s): %d candidates, %d arguments (%d written)", key, ncand, nargs, nout);
  AttnTune *t = state(d);
  RtCuTileCand avail[64], pavail[64];
  int n = rt_cu_tile_avail(cand, ncand, d->ops->wgmma && d->ops->wgmma(d->be), avail, 64);
  if (n != ncand) {
    for (int i = 0, m = 0; pre && i < ncand; i++) /* the first launches of the candidates kept */
      if (m < n && !strcmp(cand[i].tiles, avail[m].tiles)) pavail[m++] = pre[i];
    cand = avail, ncand = n, pre = pre ? pavail : NULL;
  }
  if (pre && ncand == 1) return 0; /* nothing to choose from: the caller's default */
  int c = t->on ? choose(ctx, d, t, key, ncand, cand, pre, (unsigned)pre_gy, (unsigned)gy, (unsigned)gz, nargs, args,
                         bytes, nout, outs)
                : 0;
  if (pre && c == 0) return 0;
  if (pre) rt_cu_launch(ctx, pre[c].k, (unsigned)pre[c].gx, (unsigned)pre_gy, (unsigned)gz, pre[c].bx, 1, 1, pre[c].smem, args);
  rt_cu_launch(ctx, cand[c].k, (unsigned)cand[c].gx, (unsigned)gy, (unsigned)gz, cand[c].bx, 1, 1, cand[c].smem, args);
  return 1;
}

void rt_cu_launch_tuned(RtCtx *ctx, const char *key, int ncand, const RtCuTileCand *cand, long long gy, long long gz,
                        int nargs, void **args, const long long *bytes, int nout, const RtCuTuneOut *outs) {
  launch_tuned(ctx, key, ncand, cand, NULL, 0, gy, gz, nargs, args, bytes, nout, outs);
}

int rt_cu_launch_tuned_or(RtCtx *ctx, const char *key, int ncand, const RtCuTileCand *cand, const RtCuTileCand *pre,
                          long long pre_gy, long long gy, long long gz, int nargs, void **args, const long long *bytes,
                          int nout, const RtCuTuneOut *outs) {
  return launch_tuned(ctx, key, ncand, cand, pre, pre_gy, gy, gz, nargs, args, bytes, nout, outs);
}

void rt_cu_attn_tune_report(const RtCtx *ctx) {
  if (st.tuned + st.recorded == st.reported) return;
  char chk[300];
  rt_cu_tune_check_line(chk, sizeof chk, "the compiled default", st.checked, st.check_s, st.refused, st.skipped,
                        st.closest);
  if (!ctx || ctx->rank == 0)
    fprintf(stderr,
            "attn autotune: %d attention kernel%s tuned in %.3f s (%d timed runs), %d kept other tiles than the compiled "
            "default: one call of each %.1f -> %.1f us; %d as recorded by an earlier run; %s (SHARDRT_ATTN_AUTOTUNE=0: "
            "off)\n",
            st.tuned, st.tuned == 1 ? "" : "s", st.wall, st.timed, st.moved, st.first_s * 1e6, st.best_s * 1e6,
            st.recorded, chk);
  st.reported = st.tuned + st.recorded;
}
