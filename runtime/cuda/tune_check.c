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
 * in both. For a GEMM of K = 768 into bf16 (r = 0) that is 0.8 % of |def_i| plus 9e-5 of the largest;
 * for the attention forward at S = 1024 (r = 1), 0.8 % plus 0.8 % of the largest. A wrong mask, scale,
 * tile edge or alignment moves elements by a good part of the output's scale and is far outside.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/bootstrap.h"

#include "cu_internal.h"
#include "dtype.h"

static double elem(const void *p, int dt, int64_t i) {
  switch (dt) {
  case RT_F32: return ((const float *)p)[i];
  case RT_BF16: {
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  case RT_F64: return ((const double *)p)[i];
  case RT_I32: return ((const int32_t *)p)[i];
  case RT_I64: return (double)((const int64_t *)p)[i];
  default: return 0; /* RT_F16: not an output of a tuned kernel */
  }
}

int rt_cu_tune_agree(const void *def, const void *cand, int dt, int64_t count, long long terms, int rounds,
                     RtCuAgree *a) {
  memset(a, 0, sizeof *a);
  a->at = -1;
  double u = dt == RT_BF16 ? 0x1p-8 : dt == RT_F32 ? 0x1p-24 : dt == RT_F64 ? 0x1p-53 : 0;
  int fl = rt_dtype_is_float((RtDType)dt);
  double big = 0;
  for (int64_t i = 0; i < count; i++) {
    double d = fabs(elem(def, dt, i));
    if (isfinite(d) && d > big) big = d;
  }
  a->max_ref = big;
  double floor_ = fl ? 2.0 * ((double)terms * 0x1p-24 + rounds * 0x1p-9) * big : 0;
  double worst = -INFINITY;
  for (int64_t i = 0; i < count; i++) {
    double d = elem(def, dt, i), c = elem(cand, dt, i), e, tol = 2.0 * u * fabs(d) + floor_;
    if (!isfinite(d) || !isfinite(c)) /* the same NaN / infinity, or infinitely far */
      e = (isnan(d) && isnan(c)) || d == c ? 0 : INFINITY;
    else
      e = fabs(c - d);
    if (e > a->max_err) a->max_err = e;
    if (e > 0 && (tol <= 0 || e / tol > a->ratio)) a->ratio = tol > 0 ? e / tol : INFINITY;
    if (e - tol > worst) worst = e - tol, a->at = i, a->err = e, a->tol = tol;
  }
  a->ok = count == 0 || worst <= 0;
  return a->ok;
}

int rt_cu_tune_check(const RtCuCheck *ck, int ncand, char *ok, char (*why)[RT_CU_WHY], double *closest) {
  int any = 0, checked = 0;
  for (int c = 1; c < ncand; c++) any |= ok[c];
  if (!any) return 0;
  int64_t total = 0, big = 0;
  for (int o = 0; o < ck->nout; o++) total += ck->outs[o].bytes, big = ck->outs[o].bytes > big ? ck->outs[o].bytes : big;
  char *ref = malloc((size_t)total), *got = malloc((size_t)total), *poison = malloc((size_t)big);
  if (!ref || !got || !poison) rt_fatal(1, "autotune: out of host memory for the check (%lld bytes)", (long long)(2 * total));
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
    for (int o = 0; o < ck->nout; o++) ck->copy(ck->carg, host + off, ck->outs[o].p, ck->outs[o].bytes, RT_CU_D2H), off += ck->outs[o].bytes;
    if (c == 0) continue;
    checked++;
    off = 0;
    for (int o = 0; o < ck->nout && ok[c]; off += ck->outs[o].bytes, o++) {
      const RtCuCheckOut *out = &ck->outs[o];
      size_t es = rt_dtype_size((RtDType)out->dt);
      RtCuAgree a;
      if (es && rt_cu_tune_agree(ref + off, got + off, out->dt, out->bytes / (int64_t)es, out->terms, out->rounds, &a)) {
        if (closest && a.ratio > *closest) *closest = a.ratio;
        continue;
      }
      ok[c] = 0;
      snprintf(why[c], RT_CU_WHY, "output %d%s%s%s: |diff| %.3g at element %lld, tolerance %.3g (largest |diff| %.3g, largest |default| %.3g)",
               o, out->name ? " (" : "", out->name ? out->name : "", out->name ? ")" : "", a.err, (long long)a.at, a.tol,
               a.max_err, a.max_ref);
    }
  }
  free(ref), free(got), free(poison);
  return checked;
}
