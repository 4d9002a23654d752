/* tests/passes/test_memplan_pack.c — memplan_pack (passes/memplan_pack.c) against the greedy it
 * implements, written the plain way: intervals largest first (then by start, then index), each at
 * the lowest offset whose bytes meet none of the placed intervals whose lifetime meets its own and
 * that share a rank with it (the same pipeline stage, a stage of its set, or every rank's). Random
 * sets of intervals — a few sizes, short and long lifetimes, staged, set-valued and every-rank
 * ones — must get exactly the reference's offsets and arena size from memplan_pack_order's
 * PACK_LARGEST_FIRST; every other order and memplan_pack itself must leave no two intervals that
 * meet on a rank sharing bytes, within an arena at least the peak (memplan_pack_floor) and holding
 * every interval; memplan_pack's arena at most the reference's and at most largest first's over
 * the blocks' plain sizes (some intervals get one), which it reports; memplan_pack_memo's offsets,
 * packed or found, memplan_pack's. A small set where largest first
 * leaves a gap must pack to its peak. Sets with rows in place (Interval.up, `links`): the links memplan_pack
 * takes hold (members at their leader's offset plus their delta), no other bytes shared; memplan_pack_floor_groups
 * (the bound that skips link choices) is under every order's arena with those links, and the peak where none.
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
    if (!rnd(8)) x->plain = x->bytes + 64 * (1 + rnd(8)); /* a region block packed smaller than plain */
  }
  memcpy(b, a, (size_t)n * sizeof *a);
  int64_t want = reference(a, n);
  Arena ar;
  arena_init(&ar);
  int64_t got = memplan_pack_order(b, n, PACK_LARGEST_FIRST, &ar);
  CHECK(got == want, "round %d (%d intervals, %d stages): arena %lld, the reference's %lld", round, n, nst,
        (long long)got, (long long)want);
  int bad = 0;
  for (int i = 0; i < n && bad < 3; i++)
    if (b[i].offset != a[i].offset) {
      bad++;
      CHECK(false, "round %d: interval %d [%d, %d] of %lld bytes at %lld, the reference's %lld", round, i, b[i].start,
            b[i].end, (long long)b[i].bytes, (long long)b[i].offset, (long long)a[i].offset);
    }
  int64_t floor = memplan_pack_floor(b, n, &ar);
  for (int how = 0; how <= PACK_ORDERS; how++) { /* PACK_ORDERS: memplan_pack */
    int64_t size = how < PACK_ORDERS ? memplan_pack_order(b, n, how, &ar) : memplan_pack(b, n, &ar, NULL);
    CHECK(size >= floor, "round %d, order %d: arena %lld under the peak %lld", round, how, (long long)size,
          (long long)floor);
    if (how == PACK_ORDERS) {
      CHECK(size <= want, "round %d: memplan_pack's arena %lld over largest first's %lld", round, (long long)size,
            (long long)want);
      /* and at most largest first over the plain sizes, which it reports */
      Interval *c = calloc((size_t)n, sizeof *c);
      memcpy(c, b, (size_t)n * sizeof *c);
      for (int i = 0; i < n; i++)
        if (c[i].plain) c[i].bytes = c[i].plain;
      int64_t plain = -1, want_plain = memplan_pack_order(c, n, PACK_LARGEST_FIRST, &ar);
      memcpy(c, b, (size_t)n * sizeof *c);
      int64_t again = memplan_pack(c, n, &ar, &plain);
      CHECK(again == size && size <= want_plain && plain == want_plain,
            "round %d: memplan_pack's arena %lld (again %lld), plain %lld, largest first over the plain sizes %lld", round,
            (long long)size, (long long)again, (long long)plain, (long long)want_plain);
      free(c);
    }
    bad = 0;
    for (int i = 0; i < n && bad < 3; i++) {
      if (b[i].offset < 0 || b[i].offset + b[i].bytes > size) {
        bad++;
        CHECK(false, "round %d, order %d: interval %d at %lld outside the arena %lld", round, how, i,
              (long long)b[i].offset, (long long)size);
      }
      for (int j = 0; j < i; j++)
        if (meet(&b[i], &b[j]) && b[i].offset < b[j].offset + b[j].bytes && b[j].offset < b[i].offset + b[i].bytes) {
          bad++;
          CHECK(false, "round %d, order %d: intervals %d and %d meet and share bytes", round, how, i, j);
          break;
        }
    }
  }
  /* through a memo: the first packing, then the same set again (its offsets cleared): memplan_pack's */
  PackMemo *memo = memplan_pack_memo_new(&ar);
  int64_t m1 = memplan_pack_memo(b, n, memo, &ar, NULL);
  memcpy(a, b, (size_t)n * sizeof *a);
  for (int i = 0; i < n; i++) b[i].offset = -1;
  int64_t m2 = memplan_pack_memo(b, n, memo, &ar, NULL);
  CHECK(m1 == m2 && m1 == memplan_pack(a, n, &ar, NULL), "round %d: memo arenas %lld, %lld", round, (long long)m1,
        (long long)m2);
  for (int i = 0; i < n && bad < 3; i++)
    if (b[i].offset != a[i].offset) {
      bad++;
      CHECK(false, "round %d: interval %d from the memo at %lld, packed at %lld", round, i, (long long)b[i].offset,
            (long long)a[i].offset);
    }
  arena_free(&ar);
  free(a);
  free(b);
}

/* Where largest first leaves a gap (found by a random search over small sets, kept fixed): units of
 * 64 B, A 3 [0, 0], B 3 [1, 2], C 3 [2, 4], D 2 [4, 4], E 2 [3, 5]. Largest first puts A and B at 0,
 * C above B at 3, E under C at 0 and D above C at 6: 8 units, where the peak (position 4: C, D, E)
 * is 7 (C at 0, B and E above it at 3, D at 5). memplan_pack must reach the peak. */
static void gap(void) {
  static const int set[][3] = {{3, 0, 0}, {3, 1, 2}, {3, 2, 4}, {2, 4, 4}, {2, 3, 5}}; /* {units, start, end} */
  int n = (int)(sizeof set / sizeof set[0]);
  Interval iv[8];
  memset(iv, 0, sizeof iv);
  for (int i = 0; i < n; i++) iv[i].bytes = 64 * set[i][0], iv[i].start = set[i][1], iv[i].end = set[i][2];
  Arena ar;
  arena_init(&ar);
  int64_t floor = memplan_pack_floor(iv, n, &ar);
  int64_t plain = memplan_pack_order(iv, n, PACK_LARGEST_FIRST, &ar);
  int64_t got = memplan_pack(iv, n, &ar, NULL);
  arena_free(&ar);
  CHECK(plain > floor, "the gap set: largest first's arena %lld is its peak %lld already", (long long)plain,
        (long long)floor);
  CHECK(got == floor, "the gap set: arena %lld, its peak %lld (largest first: %lld)", (long long)got, (long long)floor,
        (long long)plain);
}

/* Checks a packing with links (memplan_pack's: Interval.with, .delta): every member of a group at its leader's
 * offset plus its delta, every interval inside the arena, no two intervals that meet on a rank sharing bytes but
 * within one group. Returns the links taken (members). */
static int check_links(const Interval *a, int n, int64_t size, const char *what, int round) {
  int bad = 0, taken = 0;
  for (int i = 0; i < n && bad < 3; i++) {
    int li = a[i].with ? a[i].with - 1 : i;
    if (a[i].with) {
      taken++;
      if (a[li].with || a[i].offset != a[li].offset + a[i].delta) {
        bad++;
        CHECK(false, "%s round %d: interval %d at %lld, its leader %d at %lld + %lld", what, round, i,
              (long long)a[i].offset, li, (long long)a[li].offset, (long long)a[i].delta);
      }
    }
    if (a[i].offset < 0 || a[i].offset + a[i].bytes > size) {
      bad++;
      CHECK(false, "%s round %d: interval %d outside the arena", what, round, i);
    }
    for (int j = 0; j < i; j++) {
      int lj = a[j].with ? a[j].with - 1 : j;
      if (li == lj) continue; /* (one group: in place) */
      if (meet(&a[i], &a[j]) && a[i].offset < a[j].offset + a[j].bytes && a[j].offset < a[i].offset + a[i].bytes) {
        bad++;
        CHECK(false, "%s round %d: intervals %d and %d meet and share bytes", what, round, i, j);
        break;
      }
    }
  }
  return taken;
}

/* Rows in place (Interval.up: memplan_views.c's links): random sets with nodes at position p whose output
 * [p + 1, e] (a pad's: [p, e]) takes its inputs, each ending at p, at their rows (a concat: one after the other,
 * the stage's; a select: each stage's input at 0), nested (a concat's output a select's input). memplan_pack
 * must place every member of a link it takes at its leader plus its delta, share no bytes between two
 * intervals that meet on a rank but within one group, and pack within 1 / MEMPLAN_LINK_SLACK of the same set
 * with no link (each output from its node on). */
static void links(int round) {
  enum { N = 400 };
  Interval *a = calloc(N, sizeof *a), *c = calloc(N, sizeof *c);
  int n = 0, npos = 200, nst = 2;
  static const int64_t sizes[] = {64, 128, 192, 256, 640, 1024, 4096};
  for (int node = 0; node < 12 && n + 8 < N; node++) {
    int p = 20 + rnd(150), kind = rnd(3); /* 0: a concat, 1: a pad, 2: a select of two stages' concats */
    int64_t row = sizes[rnd(7)];
    if (kind == 2) {
      int sel = n++;
      a[sel] = (Interval){.bytes = 2 * row, .start = p + 1, .end = p + 1 + rnd(20), .apart = p + 1};
      for (int s = 0; s < nst; s++) {
        int cat = n++, q = p - 1 - rnd(5);
        a[cat] = (Interval){.bytes = 2 * row, .start = q + 1, .end = p, .stage = s + 1, .apart = q + 1, .up = sel + 1,
                            .upsel = true};
        for (int k = 0; k < 2; k++) {
          int x = n++;
          a[x] = (Interval){.bytes = row, .start = rnd(q), .end = q, .stage = s + 1, .up = cat + 1, .updelta = k * row};
        }
      }
      continue;
    }
    int y = n++, k = kind ? 1 : 2 + rnd(2);
    a[y] = (Interval){.bytes = (kind ? k + 1 : k) * row, .start = kind ? p : p + 1, .end = p + 1 + rnd(30),
                      .apart = kind ? 0 : p + 1};
    for (int j = 0; j < k; j++) {
      int x = n++;
      a[x] = (Interval){.bytes = row, .start = rnd(p + 1), .end = p, .up = y + 1, .updelta = j * row};
    }
  }
  for (int i = n; i < N; i++) { /* the rest of the step */
    Interval *x = &a[i];
    x->bytes = sizes[rnd(7)];
    x->start = rnd(npos);
    x->end = x->start + (rnd(4) ? rnd(8) : rnd(npos));
    if (x->end >= npos) x->end = npos - 1;
    if (rnd(2)) x->stage = 1 + rnd(nst);
  }
  Arena ar;
  arena_init(&ar);
  memcpy(c, a, N * sizeof *a);
  for (int i = 0; i < N; i++) { /* no link: each output from its node on */
    if (c[i].apart) c[i].start = c[i].apart - 1;
    c[i].up = 0, c[i].apart = 0;
  }
  Interval *orig = calloc(N, sizeof *a); /* (packing sets each output's start by the links it takes) */
  memcpy(orig, a, N * sizeof *a);
  int64_t apart = memplan_pack(c, N, &ar, NULL), size = memplan_pack(a, N, &ar, NULL), taken = 0, ups = 0;
  const char *forced = getenv("SHARDC_MEMPLAN_LINKS");
  bool all = forced && !strcmp(forced, "all"), none = forced && !strcmp(forced, "none");
  if (!forced || !*forced) /* (forced to take a kind, it may pack larger) */
    CHECK(size <= apart + apart / MEMPLAN_LINK_SLACK, "links round %d: arena %lld, %lld with no link", round,
          (long long)size, (long long)apart);
  taken = check_links(a, N, size, "links", round);
  /* the bound memplan_pack's first try stops on (memplan_pack_floor_groups): the peak of the set with no link, and
   * under every order's arena with the links it took */
  int64_t fg = memplan_pack_floor_groups(a, N, &ar), fc = memplan_pack_floor_groups(c, N, &ar);
  CHECK(fc == memplan_pack_floor(c, N, &ar), "links round %d: no link, the groups' floor %lld, the peak %lld", round,
        (long long)fc, (long long)memplan_pack_floor(c, N, &ar));
  Interval *t = calloc(N, sizeof *a);
  for (int how = 0; how < PACK_ORDERS; how++) {
    memcpy(t, a, N * sizeof *a);
    int64_t got = memplan_pack_order(t, N, how, &ar);
    CHECK(got >= fg, "links round %d, order %d: arena %lld under the groups' floor %lld", round, how, (long long)got,
          (long long)fg);
  }
  free(t);
  for (int i = 0; i < N; i++) ups += a[i].up != 0;
  CHECK((!all || taken == ups) && (!none || !taken), "links round %d (SHARDC_MEMPLAN_LINKS=%s): %lld of %lld links taken",
        round, forced, (long long)taken, (long long)ups);
  /* through a memo: packed, then found (offsets cleared): the same offsets and links */
  PackMemo *memo = memplan_pack_memo_new(&ar);
  memcpy(c, orig, N * sizeof *a);
  int64_t m1 = memplan_pack_memo(c, N, memo, &ar, NULL);
  memcpy(c, orig, N * sizeof *a);
  for (int i = 0; i < N; i++) c[i].offset = -1;
  int64_t m2 = memplan_pack_memo(c, N, memo, &ar, NULL), differ = 0;
  for (int i = 0; i < N; i++)
    differ += c[i].offset != a[i].offset || c[i].with != a[i].with || c[i].delta != a[i].delta || c[i].start != a[i].start;
  CHECK(m1 == size && m2 == size && !differ, "links round %d: memo arenas %lld, %lld (packed %lld), %lld intervals placed "
        "otherwise", round, (long long)m1, (long long)m2, (long long)size, (long long)differ);
  if (!round) printf("links: %lld of the first set's members in place, arena %lld (no link: %lld)\n", (long long)taken,
                     (long long)size, (long long)apart);
  arena_free(&ar);
  free(a);
  free(c);
  free(orig);
}

/* Where the orders pack worse with every link taken than with none (found by a random search over small sets,
 * kept fixed; units of 64 B, positions 0-11): a stage_select's output Y (2 units, every rank, [7, 9], from 6
 * with its copy) with each stage's concat C1, C2 (2 units, [6, 6], from 5 with the copy) in its place, each
 * with its two chunks' rows of 1 unit (stage 1: [4, 5] and [0, 5]; stage 2: [4, 5] and [2, 5]), among 8
 * others. Every order of memplan_pack_order with the links taken (Interval.with, .delta set by hand) leaves an
 * arena over the copies' packing; memplan_pack must take every link there within that arena (the groups placed
 * one by one in the holes the others leave, passes/memplan_links.c), each member at its delta, no bytes shared. */
static void linked_case(void) {
  const char *forced = getenv("SHARDC_MEMPLAN_LINKS");
  if (forced && *forced && strcmp(forced, "all")) return; /* (forced to take another kind: not every link) */
  static const int set[][7] = {/* {units, start, end, stage, apart, up, updelta in units} (selects: up 1) */
                               {2, 7, 9, 0, 7, 0, 0}, {2, 6, 6, 1, 6, 1, 0}, {1, 4, 5, 1, 0, 2, 0},
                               {1, 0, 5, 1, 0, 2, 1}, {2, 6, 6, 2, 6, 1, 0}, {1, 4, 5, 2, 0, 5, 0},
                               {1, 2, 5, 2, 0, 5, 1}, {3, 11, 11, 0, 0, 0, 0}, {2, 0, 3, 0, 0, 0, 0},
                               {1, 7, 7, 2, 0, 0, 0}, {1, 2, 4, 0, 0, 0, 0}, {3, 3, 4, 2, 0, 0, 0},
                               {1, 9, 10, 0, 0, 0, 0}, {2, 7, 9, 2, 0, 0, 0}, {1, 0, 2, 0, 0, 0, 0}};
  enum { N = sizeof set / sizeof set[0] };
  Interval iv[N], apart[N], all[N];
  memset(iv, 0, sizeof iv);
  for (int i = 0; i < N; i++) {
    const int *x = set[i];
    iv[i] = (Interval){.bytes = 64 * x[0], .start = x[1], .end = x[2], .stage = x[3], .apart = x[4], .up = x[5],
                       .upsel = x[5] == 1, .updelta = 64 * x[6]};
  }
  memcpy(apart, iv, sizeof iv);
  memcpy(all, iv, sizeof iv);
  int ups = 0;
  for (int i = 0; i < N; i++) {
    ups += iv[i].up != 0;
    if (apart[i].apart) apart[i].start = apart[i].apart - 1; /* (no link: the copies, each output from its node) */
    apart[i].up = apart[i].apart = 0;
    int w = i; /* every link: with its group's root, its deltas summed */
    int64_t d = 0;
    for (; iv[w].up; w = iv[w].up - 1) d += iv[w].updelta;
    all[i].with = w != i ? w + 1 : 0, all[i].delta = d, all[i].up = all[i].apart = 0;
  }
  Arena ar;
  arena_init(&ar);
  int64_t none = memplan_pack(apart, N, &ar, NULL), orders = -1;
  for (int how = 0; how < PACK_ORDERS; how++) {
    int64_t got = memplan_pack_order(all, N, how, &ar);
    if (orders < 0 || got < orders) orders = got;
  }
  CHECK(orders > none, "the linked case: the orders with every link pack to %lld, the copies to %lld: no gap to show",
        (long long)orders, (long long)none);
  int64_t size = memplan_pack(iv, N, &ar, NULL);
  int taken = check_links(iv, N, size, "the linked case", 0);
  CHECK(taken == ups && size <= none, "the linked case: %d of %d links in place, arena %lld (the copies': %lld, the "
        "orders' with every link: %lld)", taken, ups, (long long)size, (long long)none, (long long)orders);
  arena_free(&ar);
}

/* memplan_pack_orders with the orders side by side (memplan_pack_set_jobs: sets over 4096 intervals) against one
 * after another: the same arena, plain arena, floor and offsets, on 2, 4 and 7 threads. Three sets: random (5,000
 * intervals, staged and every-rank ones, some with a plain size); gap()'s five intervals in 1,000 windows of
 * positions apart (largest first leaves gap()'s hole in each, a later order packs to the peak: the threads must
 * not pick an order after it); one size alive throughout (largest first at the peak). */
static void side_by_side(void) {
  int later = 0, at_floor = 0;
  static const int gapset[][3] = {{3, 0, 0}, {3, 1, 2}, {3, 2, 4}, {2, 4, 4}, {2, 3, 5}}; /* gap()'s */
  for (int r = 0; r < 3; r++) {
    int n = 5000;
    Interval *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
    static const int64_t sizes[] = {64, 128, 192, 256, 640, 1024, 4096};
    for (int i = 0; i < n; i++) {
      Interval *x = &a[i];
      if (r == 0) {
        x->bytes = sizes[rnd(7)];
        x->start = rnd(3000);
        x->end = x->start + (rnd(4) ? rnd(16) : rnd(300));
        int kind = rnd(10);
        if (kind >= 2) x->stage = 1 + rnd(4);
        else if (kind == 1) x->set = (1ull << rnd(4)) | 1ull;
        if (!rnd(8)) x->plain = x->bytes + 64 * (1 + rnd(8));
      } else if (r == 1) {
        const int *g = gapset[i % 5];
        x->bytes = 64 * g[0], x->start = 6 * (i / 5) + g[1], x->end = 6 * (i / 5) + g[2];
      } else
        x->bytes = 64, x->start = 0, x->end = 9;
    }
    Arena ar;
    arena_init(&ar);
    memcpy(b, a, (size_t)n * sizeof *a);
    int64_t first = memplan_pack_order(b, n, PACK_LARGEST_FIRST, &ar);
    memplan_pack_set_jobs(1);
    memcpy(b, a, (size_t)n * sizeof *a);
    int64_t plain1 = 0, floor1 = 0, size1 = memplan_pack_orders(b, n, &ar, &plain1, &floor1, INT64_MAX);
    later += r == 1 && size1 < first && size1 == floor1;
    at_floor += r == 2 && first == floor1;
    static const int jobs[] = {2, 4, 7};
    for (int j = 0; j < 3; j++) {
      memplan_pack_set_jobs(jobs[j]);
      Interval *c = calloc((size_t)n, sizeof *c);
      memcpy(c, a, (size_t)n * sizeof *a);
      int64_t plain = 0, floor = 0, size = memplan_pack_orders(c, n, &ar, &plain, &floor, INT64_MAX), differ = 0;
      for (int i = 0; i < n; i++) differ += c[i].offset != b[i].offset;
      CHECK(size == size1 && plain == plain1 && floor == floor1 && !differ,
            "side by side, set %d (%d intervals), %d threads: arena %lld plain %lld floor %lld, one after another %lld "
            "%lld %lld; %lld intervals placed otherwise", r, n, jobs[j], (long long)size, (long long)plain,
            (long long)floor, (long long)size1, (long long)plain1, (long long)floor1, (long long)differ);
      free(c);
    }
    memplan_pack_set_jobs(1);
    arena_free(&ar);
    free(a);
    free(b);
  }
  CHECK(later == 1 && at_floor == 1, "side by side: the gaps' set %s, the one-size set %s", later ? "at the peak after "
        "the first order" : "not at the peak after the first order", at_floor ? "at the peak" : "not at the peak");
}

/* memplan_pack_orders with a limit (memplan_links.c: a link try after the first, at the least arena so far), one
 * after another and side by side: at the unlimited arena or below, -1 with the offsets and *plain untouched;
 * above it, the unlimited packing (arena, plain arena, offsets), also where the plain packing's arena is over the
 * limit (it gives up, and is packed again for *plain). Random staged sets, a quarter of them with plain sizes. */
static void limited(void) {
  int between = 0;
  for (int r = 0; r < 4; r++) {
    int n = 4200 + rnd(500);
    Interval *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
    static const int64_t sizes[] = {64, 128, 192, 256, 640, 1024, 4096};
    for (int i = 0; i < n; i++) {
      Interval *x = &a[i];
      x->bytes = sizes[rnd(7)];
      x->start = rnd(3000);
      x->end = x->start + (rnd(4) ? rnd(16) : rnd(300));
      if (rnd(10) >= 2) x->stage = 1 + rnd(4);
      if (!rnd(4)) x->plain = x->bytes + 64 * (1 + rnd(8));
    }
    Arena ar;
    arena_init(&ar);
    for (int jobs = 1; jobs <= 2; jobs++) {
      memplan_pack_set_jobs(jobs);
      memcpy(b, a, (size_t)n * sizeof *a);
      int64_t plain0 = 0, size0 = memplan_pack_orders(b, n, &ar, &plain0, NULL, INT64_MAX);
      int64_t lims[] = {size0, size0 - 64, size0 + 1, plain0 > size0 + 1 ? (size0 + plain0) / 2 + 1 : size0 + 1};
      between += jobs == 1 && plain0 > size0 + 1;
      for (int l = 0; l < 4; l++) {
        Interval *c = calloc((size_t)n, sizeof *c);
        memcpy(c, a, (size_t)n * sizeof *a);
        for (int i = 0; i < n; i++) c[i].offset = -7;
        int64_t plain = -5, size = memplan_pack_orders(c, n, &ar, &plain, NULL, lims[l]), differ = 0;
        bool over = lims[l] > size0;
        for (int i = 0; i < n; i++) differ += c[i].offset != (over ? b[i].offset : -7);
        CHECK(over ? size == size0 && plain == plain0 && !differ : size == -1 && plain == -5 && !differ,
              "limited, set %d (%d intervals), %d thread(s), limit %lld: arena %lld plain %lld, unlimited %lld %lld; "
              "%lld offsets %s", r, n, jobs, (long long)lims[l], (long long)size, (long long)plain, (long long)size0,
              (long long)plain0, (long long)differ, over ? "not the unlimited packing's" : "written");
        free(c);
      }
    }
    memplan_pack_set_jobs(1);
    arena_free(&ar);
    free(a);
    free(b);
  }
  CHECK(between > 0, "limited: no set's plain arena over its arena (the plain packing giving up alone untested)");
}

int main(void) {
  int round = 0;
  gap();
  for (int r = 0; r < 40; r++) one(20 + rnd(60), 1 + rnd(40), 0, round++);      /* no pipeline: small */
  for (int r = 0; r < 40; r++) one(100 + rnd(300), 50 + rnd(200), 0, round++);  /* long lists */
  for (int r = 0; r < 60; r++) one(100 + rnd(400), 20 + rnd(300), 1 + rnd(8), round++); /* stages */
  one(1, 1, 0, round++);
  one(2000, 1000, 4, round++);
  for (int r = 0; r < 40; r++) links(r);
  linked_case();
  side_by_side();
  limited();
  if (failures) {
    fprintf(stderr, "test_memplan_pack: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_memplan_pack: ok (%d rounds)\n", round);
  return 0;
}
