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

int st_compare(const char *ref_path, const char *got_path, double tol, int l2, double frac) {
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
    int64_t nr, ng;
    if (!st_view(&ref, ref.hdr->items[k], &pr, &br, &nr)) continue;
    const RtJson *e = rt_json_get(got.hdr, name);
    if (!e || !st_view(&got, e, &pg, &bg, &ng) || ng != nr) {
      fprintf(stderr, "FAIL: %s: tensor %s missing or of another size\n", got_path, name);
      bad++;
      continue;
    }
    tensors++;
    int64_t off = 0;
    double num = 0, den = 0;
    for (int64_t i = 0; i < nr; i++) {
      double a = at(pr, br, i), b = at(pg, bg, i), d = fabs(a - b);
      if (!(d <= tol)) off++; /* NaN counts as off */
      if (d > worst || d != d) worst = d, worst_name = name;
      num += d * d;
      den += a * a;
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
  if (l2)
    printf("%d tensors: worst relative L2 difference %.3g (%s; tolerance %g), max |diff| %.3g (%s)\n", tensors, worst_l2,
           worst_l2_name, tol, worst, worst_name);
  else
    printf("%d tensors: max |diff| %.3g (%s), at most %.2f%% of a tensor beyond %g\n", tensors, worst, worst_name,
           100 * worst_frac, tol);
  st_free(&ref);
  st_free(&got);
  return bad;
}

void st_free(St *s) {
  rt_json_free(s->hdr);
  free(s->buf);
  s->hdr = NULL;
  s->buf = NULL;
}
