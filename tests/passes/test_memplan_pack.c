/* tests/passes/test_memplan_pack.c — memplan_pack (passes/memplan_pack.c) against the greedy it
 * implements, written the plain way: intervals largest first (then by start, then index), each at
 * the lowest offset whose bytes meet none of the placed intervals whose lifetime meets its own and
 * that share a rank with it (the same pipeline stage, a stage of its set, or every rank's). Random
 * sets of intervals — a few sizes, short and long lifetimes, staged, set-valued and every-rank
 * ones — must get exactly the reference's offsets and arena size, and no two that meet on a rank
 * may share bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "memplan_pack.h"

static int failures;

static uint64_t rng = 88172645463325252ull;
static int rnd(int n) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (int)(rng % (uint64_t)n);
}

/* The ranks' stages an interval is on: bit 0 every rank's, bit s stage s. */
static uint64_t stages_of(const Interval *x) { return x->stage ? 1ull << x->stage : x->set ? x->set << 1 : 1; }

/* Whether x and y can be live on one rank at once: their lifetimes meet and a rank holds both. */
static bool meet(const Interval *x, const Interval *y) {
  if (x->start > y->end || y->start > x->end) return false;
  return (stages_of(x) & 1) || (stages_of(y) & 1) || (stages_of(x) & stages_of(y));
}

static int key_cmp(const void *a, const void *b) {
  const Interval *x = *(Interval *const *)a, *y = *(Interval *const *)b;
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return x < y ? -1 : x > y;
}

/* The reference: every placed interval looked at, candidate offsets 0 and each conflict's end. */
static int64_t reference(Interval *iv, int n) {
  Interval **order = malloc((size_t)n * sizeof *order);
  bool *placed = calloc((size_t)n, 1);
  for (int i = 0; i < n; i++) order[i] = &iv[i];
  qsort(order, (size_t)n, sizeof *order, key_cmp);
  int64_t size = 0;
  for (int k = 0; k < n; k++) {
    Interval *x = order[k];
    int64_t best = -1;
    for (int c = -1; c < n; c++) { /* c: the candidate offset's conflict (-1: offset 0) */
      if (c >= 0 && (!placed[c] || !meet(x, &iv[c]))) continue;
      int64_t off = c < 0 ? 0 : iv[c].offset + iv[c].bytes;
      if (best >= 0 && off >= best) continue;
      bool free = true;
      for (int j = 0; j < n && free; j++)
        if (placed[j] && meet(x, &iv[j]) && off < iv[j].offset + iv[j].bytes && iv[j].offset < off + x->bytes) free = false;
      if (free) best = off;
    }
    x->offset = best;
    placed[x - iv] = true;
    if (best + x->bytes > size) size = best + x->bytes;
  }
  free(order);
  free(placed);
  return size;
}

static void one(int n, int npos, int nst, int round) {
  Interval *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
  static const int64_t sizes[] = {64, 128, 192, 256, 640, 1024, 4096};
  for (int i = 0; i < n; i++) {
    Interval *x = &a[i];
    x->bytes = sizes[rnd(7)];
    x->start = rnd(npos);
    x->end = x->start + (rnd(4) ? rnd(8) : rnd(npos)); /* mostly short, some long (a stash) */
    if (x->end >= npos) x->end = npos - 1;
    int kind = nst ? rnd(10) : 0;
    if (kind >= 2) x->stage = 1 + rnd(nst);                 /* a stage's value */
    else if (kind == 1) x->set = (1ull << rnd(nst)) | 1ull; /* a value of stage 1 and another */
  }
  memcpy(b, a, (size_t)n * sizeof *a);
  int64_t want = reference(a, n);
  Arena ar;
  arena_init(&ar);
  int64_t got = memplan_pack(b, n, &ar);
  arena_free(&ar);
  CHECK(got == want, "round %d (%d intervals, %d stages): arena %lld, the reference's %lld", round, n, nst,
        (long long)got, (long long)want);
  int bad = 0;
  for (int i = 0; i < n && bad < 3; i++) {
    if (b[i].offset != a[i].offset) {
      bad++;
      CHECK(false, "round %d: interval %d [%d, %d] of %lld bytes at %lld, the reference's %lld", round, i, b[i].start,
            b[i].end, (long long)b[i].bytes, (long long)b[i].offset, (long long)a[i].offset);
    }
    for (int j = 0; j < i; j++)
      if (meet(&b[i], &b[j]) && b[i].offset < b[j].offset + b[j].bytes && b[j].offset < b[i].offset + b[i].bytes) {
        bad++;
        CHECK(false, "round %d: intervals %d and %d meet and share bytes", round, i, j);
        break;
      }
  }
  free(a);
  free(b);
}

int main(void) {
  int round = 0;
  for (int r = 0; r < 40; r++) one(20 + rnd(60), 1 + rnd(40), 0, round++);      /* no pipeline: small */
  for (int r = 0; r < 40; r++) one(100 + rnd(300), 50 + rnd(200), 0, round++);  /* long lists */
  for (int r = 0; r < 60; r++) one(100 + rnd(400), 20 + rnd(300), 1 + rnd(8), round++); /* stages */
  one(1, 1, 0, round++);
  one(2000, 1000, 4, round++);
  if (failures) {
    fprintf(stderr, "test_memplan_pack: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_memplan_pack: ok (%d rounds)\n", round);
  return 0;
}
