/* runtime/cuda/tune_check.c — whether an autotuning candidate computes what the default computes: the
 * one tolerance of the attention tiles' check (attn_tune.c) and the GEMM algorithms' (gemm.c, emu.c).
 *
 * Before a candidate may be timed, it runs once on the call's operands and each output it writes is
 * compared, element by element, with the default's (the compiled tiles; cuBLASLt's heuristic's first).
 * Both compute the same sums of the same rounded inputs in another order (tiles, split-K), so each
 * differs from the exact value of those inputs by at most the error of one computation:
 *   - n terms summed in fp32 (the accumulation length: keys per row, K of a GEMM): n * 2^-24 of the sum
 *     of the terms' magnitudes (the standard bound gamma_n ~ n u, u = 2^-24);
 *   - r intermediate values rounded to bf16 on the way (attention's probabilities P and dS before their
 *     tensor-core products): 2^-9 (half a bf16 ulp, relative) of that magnitude each;
 *   - the output's own rounding: half an ulp of its type (bf16 2^-8 |y|, f32 2^-24 |y|, relative).
 * Two computations: twice that. The terms' magnitude is taken as the largest |y| of the default's output
 * (normwise: the runtime sees bytes, not the sums behind them). So element i agrees when
 *     |cand_i - def_i| <= 2 u_out |def_i| + 2 (n 2^-24 + r 2^-9) max_j |def_j|,
 * u_out = 2^-8 (bf16) or 2^-24 (f32); integer outputs must be equal; a NaN or infinity must be the same
 * in both. For a GEMM of K = 768 into bf16 (r = 0: cuBLASLt adds split-K parts up in fp32, gemm.c) that
 * is 0.78 % of |def_i| plus 0.009 % of the largest; for the attention forward at S = 1024, hd 64 (r = 1),
 * 0.78 % plus 0.41 %. A
 * wrong mask, scale, tile edge or alignment moves elements by a good part of the output's scale.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/bootstrap.h"

#include "cu_internal.h"
#include "dtype.h"

enum { CHUNK = 4096 };

/* Elements [i0, i0 + n) of p (dtype dt) as doubles (the switch outside the loop: GPT-2's logits are 0.8 G
 * elements). */
static void load(const void *p, int dt, int64_t i0, int n, double *out) {
  switch (dt) {
  case RT_F32:
    for (int i = 0; i < n; i++) out[i] = ((const float *)p)[i0 + i];
    break;
  case RT_BF16:
    for (int i = 0; i < n; i++) {
      uint32_t u = (uint32_t)((const uint16_t *)p)[i0 + i] << 16;
      float f;
      memcpy(&f, &u, 4);
      out[i] = f;
    }
    break;
  case RT_F64:
    for (int i = 0; i < n; i++) out[i] = ((const double *)p)[i0 + i];
    break;
  case RT_I32:
    for (int i = 0; i < n; i++) out[i] = ((const int32_t *)p)[i0 + i];
    break;
  case RT_I64:
    for (int i = 0; i < n; i++) out[i] = (double)((const int64_t *)p)[i0 + i];
    break;
  default: /* RT_F16: not an output of a tuned kernel */
    for (int i = 0; i < n; i++) out[i] = 0;
  }
}

int rt_cu_tune_agree(const void *def, const void *cand, int dt, int64_t count, long long terms, int rounds,
                     RtCuAgree *a) {
  memset(a, 0, sizeof *a);
  a->at = -1;
  if (dt != RT_F32 && dt != RT_BF16 && dt != RT_F64 && dt != RT_I32 && dt != RT_I64) { /* another type: the same bytes */
    size_t es = rt_dtype_size((RtDType)dt);
    a->ok = !memcmp(def, cand, (size_t)count * (es ? es : 1));
    a->ratio = a->ok ? 0 : INFINITY;
    return a->ok;
  }
  double u = dt == RT_BF16 ? 0x1p-8 : dt == RT_F32 ? 0x1p-24 : dt == RT_F64 ? 0x1p-53 : 0;
  int fl = rt_dtype_is_float((RtDType)dt);
  double big = 0;
  int par = count > (1 << 20); /* OpenMP over chunks for the large outputs (GPT-2's logits: 0.8 G elements) */
#pragma omp parallel for reduction(max : big) schedule(static) if (par)
  for (int64_t i0 = 0; i0 < count; i0 += CHUNK) {
    double dv[CHUNK];
    int n = count - i0 < CHUNK ? (int)(count - i0) : CHUNK;
    load(def, dt, i0, n, dv);
    for (int i = 0; i < n; i++) {
      double d = fabs(dv[i]);
      if (isfinite(d) && d > big) big = d;
    }
  }
  a->max_ref = big;
  double floor_ = fl ? 2.0 * ((double)terms * 0x1p-24 + rounds * 0x1p-9) * big : 0;
  double u2 = 2.0 * u, r = 0, me = 0; /* r: the largest error / tolerance so far; me: the largest error */
#pragma omp parallel if (par)
  {
    double dv[CHUNK], cv[CHUNK], tr = 0, tme = 0, terr = 0, ttol = 0; /* this thread's */
    int64_t tat = -1;
#pragma omp for schedule(static)
    for (int64_t i0 = 0; i0 < count; i0 += CHUNK) {
      int n = count - i0 < CHUNK ? (int)(count - i0) : CHUNK;
      load(def, dt, i0, n, dv);
      load(cand, dt, i0, n, cv);
      for (int i = 0; i < n; i++) {
        double e = fabs(cv[i] - dv[i]), tol = u2 * fabs(dv[i]) + floor_;
        if (e > tme) tme = e;
        if (e <= tr * tol) continue; /* the common case: nothing new (NaN goes on) */
        double d = dv[i], c = cv[i];
        if (!isfinite(d) || !isfinite(c)) /* the same NaN / infinity, or infinitely far */
          e = (isnan(d) && isnan(c)) || d == c ? 0 : INFINITY;
        if (e == INFINITY) tme = e;
        double q = e == 0 ? 0 : tol > 0 ? e / tol : INFINITY;
        if (q > tr || tat < 0) tr = q, tat = i0 + i, terr = e, ttol = tol;
      }
    }
#pragma omp critical
    {
      if (tme > me) me = tme;
      if (tat >= 0 && (tr > r || a->at < 0 || (tr == r && tat < a->at)))
        r = tr, a->at = tat, a->err = terr, a->tol = ttol;
    }
  }
  a->max_err = me, a->ratio = r;
  a->ok = r <= 1;
  return a->ok;
}

int rt_cu_tune_check(const RtCuCheck *ck, int ncand, char *ok, char (*why)[RT_CU_WHY], double *closest) {
  int any = 0, checked = 0;
  for (int c = 1; c < ncand; c++) any |= ok[c];
  if (!any) return 0;
  int64_t total = 0, big = 0;
  for (int o = 0; o < ck->nout; o++) total += ck->outs[o].bytes, big = ck->outs[o].bytes > big ? ck->outs[o].bytes : big;
  char *ref = malloc((size_t)total), *got = malloc((size_t)total), *poison = malloc((size_t)big);
  if (!ref || !got || !poison)
    rt_fatal(1, "autotune: out of host memory for the check (%lld bytes)", (long long)(2 * total + big));
  memset(poison, 0xff, (size_t)big); /* NaN in bf16, f32 and f64 */
  for (int c = 0; c < ncand; c++) {
    if (c > 0 && !ok[c]) continue;
    for (int o = 0; o < ck->nout; o++) { /* NaN first (an element the run does not write stays NaN), or its input */
      const RtCuCheckOut *out = &ck->outs[o];
      if (out->init) ck->copy(ck->carg, out->p, out->init, out->bytes, RT_CU_D2D);
      else ck->copy(ck->carg, out->p, poison, out->bytes, RT_CU_H2D);
    }
    char *host = c == 0 ? ref : got;
    if (ck->run(ck->arg, c) < 0) { /* not launchable: without the default nothing is checked, nothing kept */
      if (c == 0) memset(ok + 1, 0, (size_t)(ncand - 1));
      else ok[c] = 0;
      if (c == 0) break;
      continue;
    }
    int64_t off = 0;
    for (int o = 0; o < ck->nout; off += ck->outs[o].bytes, o++)
      ck->copy(ck->carg, host + off, ck->outs[o].p, ck->outs[o].bytes, RT_CU_D2H);
    if (c == 0) continue;
    checked++;
    off = 0;
    for (int o = 0; o < ck->nout && ok[c]; off += ck->outs[o].bytes, o++) {
      const RtCuCheckOut *out = &ck->outs[o];
      int64_t es = (int64_t)rt_dtype_size((RtDType)out->dt);
      RtCuAgree a;
      if (rt_cu_tune_agree(ref + off, got + off, out->dt, out->bytes / (es ? es : 1), out->terms, out->rounds, &a)) {
        if (closest && a.ratio > *closest) *closest = a.ratio;
        continue;
      }
      ok[c] = 0;
      snprintf(why[c], RT_CU_WHY,
               "output %d%s%s%s: |diff| %.3g at element %lld, tolerance %.3g (largest |diff| %.3g, largest |default| "
               "%.3g)",
               o, out->name ? " (" : "", out->name ? out->name : "", out->name ? ")" : "", a.err, (long long)a.at, a.tol,
               a.max_err, a.max_ref);
    }
  }
  free(ref), free(got), free(poison);
  return checked;
}

void rt_cu_tune_check_line(char *out, size_t n, const char *against, int checked, double seconds, int refused,
                           int skipped, double closest) {
  snprintf(out, n,
           "%d candidates checked against %s in %.3f s (a run and a compare each), %d refused, %d skipped as refused "
           "by an earlier run, the others within %.2g of their tolerance",
           checked, against, seconds, refused, skipped, closest);
}
