/* passes/memplan_pack.c — the memory plan's allocator (passes/memplan.c places values and gives
 * each transient an interval): intervals packed at offsets by a greedy best-offset allocator,
 * largest first, and the peak over positions and pipeline stages. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "memplan_pack.h"

typedef struct {
  int64_t a, b; /* sort keys, ascending */
  int i;        /* the last key: the interval's index */
} PackKey;

static int pack_key_cmp(const void *x, const void *y) {
  const PackKey *p = x, *q = y;
  if (p->a != q->a) return p->a < q->a ? -1 : 1;
  if (p->b != q->b) return p->b < q->b ? -1 : 1;
  return (p->i > q->i) - (p->i < q->i);
}

/* The placed intervals, found by lifetime: those alive at a position (a segment tree over the
 * positions, each interval in the O(log) nodes that cover its lifetime) and those starting at a
 * position, one such index per pipeline stage (values of two different stages never meet on a
 * rank: a stage's value looks only at its stage's and every rank's) and, under pp, one of them all
 * (an every-rank value meets every stage's: one walk of its lifetime, not one per stage).
 * An unrolled pipeline schedule makes tens of thousands of intervals, each meeting a few dozen
 * (a few hundred over 16 stages): pack's cost follows the meetings, not the pairs. */
/* A conflict's bytes: [a, b). */
typedef struct {
  int64_t a, b;
} Span;

/* The placed intervals' bytes, kept in the index itself (placed, an interval's bytes no longer
 * move): a lookup reads them in a row instead of gathering the intervals. Each list's length is
 * counted before any interval is placed (`cap`), so its array is allocated once, whole, at its
 * first span: no list grows (GPT-3's pp 32 plan: 3.1 M spans in 0.8 M lists, 49 MB, where growing
 * by doubling held 137 MB of capacity and left as much again behind in the arena). */
typedef struct {
  Span *s;
  int n, cap;
} SpanList;

static void spanlist_add(SpanList *l, Span x, bool count, Arena *a) {
  if (count) {
    l->cap++;
    return;
  }
  if (!l->s) l->s = ARENA_ARRAY(a, Span, l->cap);
  l->s[l->n++] = x;
}

typedef struct {
  SpanList *alive;  /* [2 * leaves]: tree node -> the intervals covering its positions */
  SpanList *starts; /* [npos]: position -> the intervals starting there */
  uint64_t *some; /* [npos / 64 + 1]: bit p: starts[p] is not empty (a long lifetime skips the rest) */
} Placed;

static Placed placed_new(Arena *a, int leaves, int npos) {
  uint64_t *some = ARENA_ARRAY(a, uint64_t, npos / 64 + 1);
  memset(some, 0, (size_t)(npos / 64 + 1) * sizeof *some);
  return (Placed){ARENA_ARRAY(a, SpanList, 2 * leaves), ARENA_ARRAY(a, SpanList, npos), some};
}

/* The first position in [p, end] where an interval starts, or end + 1. */
static int next_start(const Placed *pl, int p, int end) {
  while (p <= end) {
    uint64_t w = pl->some[p >> 6] >> (p & 63);
    if (w) return p + __builtin_ctzll(w) <= end ? p + __builtin_ctzll(w) : end + 1;
    p = (p | 63) + 1;
  }
  return end + 1;
}

/* First fit over the conflicts: *off (0 on entry) becomes the lowest offset from which `bytes`
 * overlap none of them — the first gap in their union, met by walking them in start order (the
 * gap depends only on the starts' order, not on the order of equal starts). Sorted lazily: a
 * quicksort on the middle's start (insertion sort below a few dozen) that walks each part as soon
 * as it is in order and leaves the parts above the gap unsorted. Returns true once the gap is
 * found (the walk stops there). */
static bool first_fit(Span *s, int n, int64_t bytes, int64_t *off) {
  while (n > 24) { /* the part above the pivot: a loop, not a call */
    int64_t p = s[n / 2].a;
    int i = 0, j = n - 1;
    while (i <= j) {
      while (s[i].a < p) i++;
      while (s[j].a > p) j--;
      if (i <= j) {
        Span t = s[i];
        s[i++] = s[j];
        s[j--] = t;
      }
    }
    /* [0, j]: starts <= p, [j + 1, i): starts == p, [i, n): starts >= p */
    if (first_fit(s, j + 1, bytes, off)) return true;
    if (first_fit(s + j + 1, i - j - 1, bytes, off)) return true;
    s += i, n -= i;
  }
  for (int i = 1; i < n; i++) {
    Span t = s[i];
    int j = i;
    for (; j > 0 && s[j - 1].a > t.a; j--) s[j] = s[j - 1];
    s[j] = t;
  }
  for (int i = 0; i < n; i++) {
    if (*off + bytes <= s[i].a) return true;
    if (s[i].b > *off) *off = s[i].b;
  }
  return false;
}

/* Drops repeated spans (the gap pack finds depends only on the set): an open-addressing table over
 * (a, b) of cap slots (a power of two over 2 n, zeroed; left zeroed; used: room for n), for the long lists only.
 * Returns the count left, in their first order. */
static int dedup_spans(Span *s, int n, int *slot, int cap, int *used) {
  if (n < 64) return n;
  int k = 0;
  for (int i = 0; i < n; i++) {
    uint64_t h = ((uint64_t)s[i].a * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)s[i].b * 0xC2B2AE3D27D4EB4Full);
    int at = (int)((h ^ (h >> 29)) & (uint64_t)(cap - 1));
    while (slot[at] && !(s[slot[at] - 1].a == s[i].a && s[slot[at] - 1].b == s[i].b)) at = (at + 1) & (cap - 1);
    if (slot[at]) continue;
    s[k] = s[i];
    used[k] = at;
    slot[at] = ++k;
  }
  for (int i = 0; i < k; i++) slot[used[i]] = 0; /* left zeroed for the next list */
  return k;
}

/* The largest stage (Node.stage numbering: 1 + the pp coordinate) an interval is one of. */
static int max_stage(const Interval *iv, int n) {
  int nst = 0;
  for (int i = 0; i < n; i++) {
    if (iv[i].stage > nst) nst = iv[i].stage;
    if (iv[i].set && 64 - __builtin_clzll(iv[i].set) > nst) nst = 64 - __builtin_clzll(iv[i].set);
  }
  return nst;
}

/* Whether interval x is on stage s (1 + the pp coordinate; 0: every rank's values): its own. */
static bool on_stage(const Interval *x, int s) {
  if (!s) return !x->stage && !x->set;
  return x->stage == s || (!x->stage && x->set >> (s - 1) & 1);
}

/* x's bytes `mine` into the lists of the indexes it is in (its stage's: a set, each of its stages';
 * or every rank's; then, under pp, all), or (count) one more for each of those lists. */
static void index_interval(Placed *by_stage, Placed *all, int nst, int leaves, const Interval *x, Span mine, bool count,
                           Arena *a) {
  for (int s = 0; s <= nst + (nst ? 1 : 0); s++) {
    if (s <= nst && !on_stage(x, s)) continue;
    Placed *pl = s <= nst ? &by_stage[s] : all;
    for (int l = x->start + leaves, r = x->end + leaves + 1; l < r; l >>= 1, r >>= 1) {
      if (l & 1) spanlist_add(&pl->alive[l++], mine, count, a);
      if (r & 1) spanlist_add(&pl->alive[--r], mine, count, a);
    }
    spanlist_add(&pl->starts[x->start], mine, count, a);
    if (!count) pl->some[x->start >> 6] |= 1ull << (x->start & 63);
  }
}

/* Greedy placement: largest first, lowest offset that does not overlap a placed
 * interval whose lifetime intersects. Returns the arena size. */
int64_t memplan_pack(Interval *iv, int n, Arena *a) {
  /* by size desc, then start asc, then index: deterministic */
  PackKey *order = ARENA_ARRAY(a, PackKey, n + 1);
  int npos = 1, nst = max_stage(iv, n);
  for (int i = 0; i < n; i++) {
    order[i] = (PackKey){-iv[i].bytes, iv[i].start, i};
    if (iv[i].end + 1 > npos) npos = iv[i].end + 1;
  }
  qsort(order, (size_t)n, sizeof *order, pack_key_cmp);
  int leaves = 1;
  while (leaves < npos) leaves *= 2;
  Placed *by_stage = ARENA_ARRAY(a, Placed, nst + 1); /* [0]: every rank's; [s]: stage s's */
  for (int s = 0; s <= nst; s++) by_stage[s] = placed_new(a, leaves, npos);
  /* under pp also every placed interval in one index, which an every-rank value meets whole */
  Placed all = nst ? placed_new(a, leaves, npos) : by_stage[0];
  int64_t size = 0;
  Span *cspan = ARENA_ARRAY(a, Span, n + 1); /* the conflicts' bytes */
  int dcap = 128;
  while (dcap < 2 * n) dcap *= 2;
  int *dslot = ARENA_ARRAY(a, int, dcap), *dused = ARENA_ARRAY(a, int, n + 1); /* dedup_spans's table */
  memset(dslot, 0, (size_t)dcap * sizeof *dslot);
  for (int i = 0; i < n; i++) index_interval(by_stage, &all, nst, leaves, &iv[i], (Span){0, 0}, true, a);
  for (int oi = 0; oi < n; oi++) {
    int xi = order[oi].i;
    Interval *x = &iv[xi];
    int nconf = 0;
    /* the placed intervals alive at x's start, then those starting within x's lifetime, of the
     * stages x meets: every rank's and its own (an every-rank value: all) */
    for (int s = 0; s <= nst; s++) {
      bool every = !x->stage && !x->set; /* an every-rank value meets all at once */
      if (every ? s != 0 : s && !on_stage(x, s)) continue;
      const Placed *pl = !every || !nst ? &by_stage[s] : &all;
      for (int t = x->start + leaves; t >= 1; t >>= 1)
        for (int k = 0; k < pl->alive[t].n; k++) cspan[nconf++] = pl->alive[t].s[k];
      for (int p = next_start(pl, x->start + 1, x->end); p <= x->end; p = next_start(pl, p + 1, x->end))
        for (int k = 0; k < pl->starts[p].n; k++) cspan[nconf++] = pl->starts[p].s[k];
    }
    /* conflicts by offset, then the first gap that fits (the same span met again, as every stage's
     * copy of a value at one offset is, changes no gap: kept once) */
    int lcap = 128; /* a table for this list's size: a small one stays in cache */
    while (lcap < 2 * nconf && lcap < dcap) lcap *= 2;
    nconf = dedup_spans(cspan, nconf, dslot, lcap, dused);
    int64_t off = 0;
    first_fit(cspan, nconf, x->bytes, &off);
    x->offset = off;
    if (off + x->bytes > size) size = off + x->bytes;
    index_interval(by_stage, &all, nst, leaves, x, (Span){off, off + x->bytes}, false, a);
  }
  return size;
}

/* The peak over positions and, under pipeline parallelism, over stages (a rank holds every
 * rank's values and its own stage's): bytes live per position from each stage's differences (+ at
 * an interval's start, - after its end), O(intervals + stages x positions). */
int64_t memplan_peak(const Interval *iv, int n, int npos, int64_t by_class[MEM_COUNT], Arena *a, int64_t *per_stage,
                     int nstages) {
  int nst = max_stage(iv, n);
  int64_t *delta = ARENA_ARRAY(a, int64_t, (size_t)(nst + 1) * (size_t)(npos + 2)); /* [stage][position] */
  for (int i = 0; i < n; i++) {
    if (iv[i].start > npos) continue;
    for (int s = 0; s <= nst; s++) {
      if (!on_stage(&iv[i], s)) continue;
      int64_t *d = delta + (size_t)s * (size_t)(npos + 2);
      d[iv[i].start] += iv[i].bytes;
      d[(iv[i].end < npos ? iv[i].end : npos) + 1] -= iv[i].bytes;
    }
  }
  int64_t *every = ARENA_ARRAY(a, int64_t, npos + 1); /* every rank's values live at each position */
  for (int t = 0; t <= npos; t++) every[t] = (t ? every[t - 1] : 0) + delta[t];
  int64_t top = -1;
  int best = 0, best_st = 0;
  for (int s = 0; per_stage && s < nstages; s++) /* a stage without values of its own: every rank's peak */
    for (int t = 0; t <= npos; t++)
      if (every[t] > per_stage[s]) per_stage[s] = every[t];
  for (int st = nst ? 1 : 0; st <= nst; st++) {
    const int64_t *d = delta + (size_t)st * (size_t)(npos + 2);
    int64_t own = 0, mine = 0;
    for (int t = 0; t <= npos; t++) {
      if (st) own += d[t];
      if (every[t] + own > mine) mine = every[t] + own;
      if (every[t] + own > top) top = every[t] + own, best = t, best_st = st;
    }
    if (per_stage && st && st <= nstages) per_stage[st - 1] = mine;
  }
  for (int i = 0; i < n; i++)
    if (iv[i].start <= best && best <= iv[i].end && (on_stage(&iv[i], 0) || on_stage(&iv[i], best_st))) {
      by_class[iv[i].mclass] += iv[i].bytes - iv[i].comm;
      by_class[MEM_COMM] += iv[i].comm;
    }
  return top < 0 ? 0 : top;
}

int64_t memplan_align(int64_t x) { return (x + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN; }

Interval *memplan_add_interval(Intervals *p, Value *v, int64_t bytes, int start, int mclass) {
  arena_grow(p->a, (void **)&p->iv, &p->cap, p->n + 1, sizeof(Interval));
  Interval *it = &p->iv[p->n++];
  memset(it, 0, sizeof *it);
  it->v = v;
  it->bytes = memplan_align(bytes);
  it->start = it->end = start;
  it->mclass = mclass;
  return it;
}
