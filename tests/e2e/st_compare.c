/* tests/e2e/st_compare.c — two safetensors files hold the same tensors within a tolerance (st_compare.h).
 * Used by st_close (the command) and by test_cudart's device training check on a real GPU.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_compare.h"
#include "train/train.h"

int st_load(St *s, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  if (fseek(f, 0, SEEK_END) != 0) return fclose(f), 0;
  long l = ftell(f);
  if (l < 8 || fseek(f, 0, SEEK_SET) != 0) return fclose(f), 0;
  s->len = (size_t)l;
  s->buf = malloc(s->len);
  if (!s->buf || fread(s->buf, 1, s->len, f) != s->len) return fclose(f), 0;
  fclose(f);
  uint64_t n = 0;
  for (int i = 0; i < 8; i++) n |= (uint64_t)(unsigned char)s->buf[i] << (8 * i);
  if (8 + n > s->len) return 0;
  char err[128];
  s->hdr = rt_json_parse(s->buf + 8, (size_t)n, err, sizeof err);
  s->data = 8 + (size_t)n;
  return s->hdr != NULL;
}

/* Element i of tensor e as a double; *n its element count. 0 when e is not F32 / BF16. */
static int st_view(const St *s, const RtJson *e, const char **p, int *bf16, int64_t *n) {
  const RtJson *dt = rt_json_get(e, "dtype"), *sh = rt_json_get(e, "shape"), *off = rt_json_get(e, "data_offsets");
  if (!dt || !sh || !off || dt->kind != RT_JSON_STR || off->n != 2) return 0;
  if (strcmp(dt->str, "F32") != 0 && strcmp(dt->str, "BF16") != 0) return 0;
  *bf16 = dt->str[0] == 'B';
  *n = 1;
  for (int i = 0; i < sh->n; i++) *n *= sh->items[i]->inum;
  *p = s->buf + s->data + off->items[0]->inum;
  return s->data + (size_t)off->items[1]->inum <= s->len;
}

/* Tensor k of ref and got's tensor of that name: 1 when both are F32 / BF16 of one element count
 * (their views in *pr, *br, *pg, *bg, *n), 0 when ref's is not a float tensor (not compared), -1 when
 * got lacks it or holds another count (printed: a failure). */
static int st_pair(const St *ref, const St *got, int k, const char *got_path, const char **pr, int *br,
                   const char **pg, int *bg, int64_t *n) {
  int64_t ng;
  if (!st_view(ref, ref->hdr->items[k], pr, br, n)) return 0;
  const RtJson *e = rt_json_get(got->hdr, ref->hdr->keys[k]);
  if (e && st_view(got, e, pg, bg, &ng) && ng == *n) return 1;
  fprintf(stderr, "FAIL: %s: tensor %s missing or of another size\n", got_path, ref->hdr->keys[k]);
  return -1;
}

static double at(const char *p, int bf16, int64_t i) {
  if (bf16) {
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  float f;
  memcpy(&f, p + 4 * i, 4);
  return f;
}

int st_compare(const char *ref_path, const char *got_path, double tol, int mode, double frac) {
  int l2 = mode == ST_L2, rmax = mode == ST_RMAX;
  double worst_l2 = 0;
  const char *worst_l2_name = "-";
  St ref = {0}, got = {0};
  if (!st_load(&ref, ref_path) || !st_load(&got, got_path)) {
    fprintf(stderr, "st_compare: cannot read %s or %s\n", ref_path, got_path);
    st_free(&ref);
    st_free(&got);
    return 1;
  }
  int bad = 0, tensors = 0;
  double worst = 0, worst_frac = 0;
  const char *worst_name = "-";
  for (int k = 0; k < ref.hdr->n; k++) {
    const char *name = ref.hdr->keys[k];
    const char *pr, *pg;
    int br, bg;
    int64_t nr;
    int paired = st_pair(&ref, &got, k, got_path, &pr, &br, &pg, &bg, &nr);
    if (paired <= 0) {
      bad += paired < 0;
      continue;
    }
    tensors++;
    int64_t off = 0;
    double num = 0, den = 0, dmax = 0, amax = 0;
    for (int64_t i = 0; i < nr; i++) {
      double a = at(pr, br, i), b = at(pg, bg, i), d = fabs(a - b);
      if (!(d <= tol)) off++; /* NaN counts as off */
      if (d > worst || d != d) worst = d, worst_name = name;
      if (d > dmax || d != d) dmax = d;
      amax = fmax(amax, fabs(a));
      num += d * d;
      den += a * a;
    }
    if (rmax) { /* max |diff| against the tensor's largest |ref| */
      double r = amax > 0 ? dmax / amax : dmax;
      if (r > worst_l2 || r != r) worst_l2 = r, worst_l2_name = name;
      if (!(r <= tol)) {
        fprintf(stderr, "FAIL: %s: max |diff| %.3g is %.3g of its largest element (%.3g) > %g\n", name, dmax, r, amax, tol);
        bad++;
      }
      continue;
    }
    if (l2) {
      double r = den > 0 ? sqrt(num / den) : sqrt(num);
      if (r > worst_l2 || r != r) worst_l2 = r, worst_l2_name = name;
      if (!(r <= tol)) {
        fprintf(stderr, "FAIL: %s: relative L2 difference %.3g > %g\n", name, r, tol);
        bad++;
      }
      continue;
    }
    double f = nr ? (double)off / (double)nr : 0;
    if (f > worst_frac) worst_frac = f;
    if (f > frac) {
      fprintf(stderr, "FAIL: %s: %lld of %lld elements differ by more than %g\n", name, (long long)off, (long long)nr,
              tol);
      bad++;
    }
  }
  if (tensors == 0) {
    fprintf(stderr, "FAIL: %s holds no float tensors\n", ref_path);
    bad++;
  }
  if (rmax)
    printf("%d tensors: worst max |diff| / max |ref| %.3g (%s; tolerance %g), max |diff| %.3g (%s)\n", tensors, worst_l2,
           worst_l2_name, tol, worst, worst_name);
  else if (l2)
    printf("%d tensors: worst relative L2 difference %.3g (%s; tolerance %g), max |diff| %.3g (%s)\n", tensors, worst_l2,
           worst_l2_name, tol, worst, worst_name);
  else
    printf("%d tensors: max |diff| %.3g (%s), at most %.2f%% of a tensor beyond %g\n", tensors, worst, worst_name,
           100 * worst_frac, tol);
  st_free(&ref);
  st_free(&got);
  return bad;
}

double st_adam_bound(double lr, double dg, double vhat, double eps) {
  return fmin(2 * lr, 2 * lr * dg / (vhat + eps));
}

/* The AdamW-aware parameter check (st_compare.h): element e of parameter p may differ by
 *   tol + sum_s st_adam_bound(lr_s, r G_s, sqrt(v^_s,e), eps),
 * v^_s = v_s / (1 - beta2^s) from REF's adam_v:p after step s, G_s = max_e sqrt(v_s,e / (1 - beta2)) (>= the
 * largest |g_s| of p). */
int st_compare_adam(const char *ref_path, const char *got_path, const char *const *ref_opt, const double *lr,
                    int steps, double tol, double r, double eps, double beta2) {
  St ref = {0}, got = {0}, opt[8] = {{0}};
  int bad = 0, tensors = 0;
  if (steps < 1 || steps > 8) return fprintf(stderr, "st_compare_adam: 1 to 8 steps\n"), 1;
  int ok = st_load(&ref, ref_path) && st_load(&got, got_path);
  for (int s = 0; s < steps && ok; s++) ok = st_load(&opt[s], ref_opt[s]);
  if (!ok) {
    fprintf(stderr, "st_compare_adam: cannot read %s, %s or a reference optimizer file\n", ref_path, got_path);
    bad = 1;
    goto out;
  }
  double worst = 0, worst_ratio = 0, worst_vhat = 0, worst_bound = 0;
  const char *worst_name = "-", *ratio_name = "-";
  int64_t beyond = 0, ratio_at = 0;
  for (int k = 0; k < ref.hdr->n; k++) {
    const char *name = ref.hdr->keys[k];
    const char *pr, *pg, *pv[8];
    int br, bg, bv;
    int64_t nr, nv;
    int paired = st_pair(&ref, &got, k, got_path, &pr, &br, &pg, &bg, &nr);
    if (paired <= 0) {
      bad += paired < 0;
      continue;
    }
    char vname[512];
    snprintf(vname, sizeof vname, "adam_v:%s", name);
    double gmax[8] = {0};
    for (int s = 0; s < steps; s++) {
      const RtJson *ev = rt_json_get(opt[s].hdr, vname);
      if (!ev || !st_view(&opt[s], ev, &pv[s], &bv, &nv) || nv != nr || bv) {
        fprintf(stderr, "FAIL: %s: no f32 %s of %lld elements\n", ref_opt[s], vname, (long long)nr);
        bad++;
        goto next;
      }
      for (int64_t i = 0; i < nr; i++) gmax[s] = fmax(gmax[s], sqrt(fmax(at(pv[s], 0, i), 0) / (1 - beta2)));
      if (s > 0) gmax[s] = fmax(gmax[s], gmax[s - 1]); /* m^ and v^ of step s hold the earlier steps' gradients */
    }
    tensors++;
    int64_t off = 0;
    for (int64_t i = 0; i < nr; i++) {
      double bound = tol, vh = 0;
      for (int s = 0; s < steps; s++) {
        vh = sqrt(fmax(at(pv[s], 0, i), 0) / (1 - pow(beta2, s + 1)));
        bound += st_adam_bound(lr[s], r * gmax[s], vh, eps);
      }
      double d = fabs(at(pr, br, i) - at(pg, bg, i));
      if (d > worst || d != d) worst = d, worst_name = name;
      if (!(d <= tol)) beyond++;
      if (!(d <= bound)) off++;
      if (d / bound > worst_ratio || d != d) worst_ratio = d / bound, ratio_name = name, ratio_at = i, worst_vhat = vh,
                                             worst_bound = bound;
    }
    if (off) {
      fprintf(stderr, "FAIL: %s: %lld of %lld elements beyond their AdamW bound\n", name, (long long)off, (long long)nr);
      bad++;
    }
  next:;
  }
  if (tensors == 0) {
    fprintf(stderr, "FAIL: %s holds no float tensors with their adam_v\n", ref_path);
    bad++;
  }
  printf("%d tensors: max |diff| %.3g (%s); %lld element(s) beyond %g; the closest to its AdamW bound: %s[%lld] at "
         "%.2f of %.3g (sqrt(v^) %.3g at the last step)\n",
         tensors, worst, worst_name, (long long)beyond, tol, ratio_name, (long long)ratio_at, worst_ratio, worst_bound,
         worst_vhat);
out:
  st_free(&ref);
  st_free(&got);
  for (int s = 0; s < steps; s++) st_free(&opt[s]);
  return bad;
}

void st_free(St *s) {
  rt_json_free(s->hdr);
  free(s->buf);
  s->hdr = NULL;
  s->buf = NULL;
}
