/* passes/memplan_links.c — which rows in place the memory plan's packing takes (memplan_pack, through
 * the orders of passes/memplan_pack.c), and the packings a plan reuses (memplan_pack_memo).
 *
 * Rows in place (memplan_views.c): an interval written into a node's output has a link to that output's
 * (Interval.up), of one of two kinds: a concat's or pad's rows, or a stage_select's place. A packing takes
 * some links: each interval then with the one its taken links lead to (Interval.with, .delta), a node's
 * output whose links are taken live from past it, else from it (Interval.apart: it copies). The links of
 * one group (a root interval and every one whose links lead up to it: a parameter's stacked gradient, its
 * stages' sums and their chunks' rows) are taken or left together.
 *
 * Coupled offsets can pack worse than the copies: a group takes its bytes on every stage at once, and its
 * rows' holes (a chunk's rows before its sum begins) fit only what their size and lifetimes let in. So a
 * packing tries, in turn, every link, the rows alone, the selects alone and none, each by the orders of
 * memplan_pack_orders, and picks the first within 1 / MEMPLAN_LINK_SLACK of the least arena (the tries after the
 * first not packed where a lower bound on their arenas shows the first is the pick: first_is_pick). Where that leaves
 * links out, each group in turn is placed again with its links, the other intervals where they are
 * (pack_groups): from the least packing, every group so where the arena is no larger than the pick's; else,
 * from the pick, each group whose links fit without growing its arena (each interval's kinds then its own).
 * No arena grows over the pick's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "memplan_pack.h"

enum { LINK_ROWS = 1, LINK_SELECT = 2, LINK_ALL = LINK_ROWS | LINK_SELECT };

/* Whether interval i's link is taken: its kind is one of `kinds`, or of pk[i] where pk (NULL: none) gives each
 * interval's own. */
static bool linked(const Interval *iv, int i, int kinds, const uint8_t *pk) {
  return iv[i].up && ((pk ? pk[i] : kinds) & (iv[i].upsel ? LINK_SELECT : LINK_ROWS));
}

/* Sets Interval.with, .delta and a node's output's start (start: each interval's start with no link taken
 * but its own) for the links linked() takes. Returns how many it takes. */
static int take_links(Interval *iv, int n, int kinds, const uint8_t *pk, const int *start, Arena *a) {
  bool *parent = ARENA_ARRAY(a, bool, n + 1);
  int taken = 0;
  for (int i = 0; i < n; i++)
    if (linked(iv, i, kinds, pk)) parent[iv[i].up - 1] = true, taken++;
  for (int i = 0; i < n; i++) {
    int w = i;
    int64_t d = 0;
    for (; linked(iv, w, kinds, pk); w = iv[w].up - 1) d += iv[w].updelta;
    iv[i].with = w != i ? w + 1 : 0;
    iv[i].delta = w != i ? d : 0;
    if (iv[i].apart) iv[i].start = parent[i] ? start[i] : iv[i].apart - 1;
  }
  return taken;
}

/* SHARDC_MEMPLAN_LINKS (for benchmarks: bench/memplan_links.sh): the one link kind every packing takes, "all",
 * "rows", "selects" or "none"; unset or empty: the choice above (-1), "report": that, each packing with links
 * printing on stderr how many it took (-3). */
static int forced_links(void) {
  static int kinds = -2;
  if (kinds != -2) return kinds;
  const char *e = getenv("SHARDC_MEMPLAN_LINKS");
  if (!e || !*e) kinds = -1;
  else if (!strcmp(e, "report")) kinds = -3;
  else if (!strcmp(e, "all")) kinds = LINK_ALL;
  else if (!strcmp(e, "rows")) kinds = LINK_ROWS;
  else if (!strcmp(e, "selects")) kinds = LINK_SELECT;
  else if (!strcmp(e, "none")) kinds = 0;
  else
    die("SHARDC_MEMPLAN_LINKS=%s: not a link kind (all, rows, selects, none: the links in place every packing takes; "
        "unset: the most within 1/%d of the least arena; report: that, printing the links taken)", e, MEMPLAN_LINK_SLACK);
  return kinds;
}

typedef struct {
  int64_t bytes;
  int i;
} Root;

static int root_cmp(const void *x, const void *y) {
  const Root *p = x, *q = y;
  if (p->bytes != q->bytes) return p->bytes > q->bytes ? -1 : 1;
  return (p->i > q->i) - (p->i < q->i);
}

/* From a packing with the links of kinds `base` (offsets from, arena limit), each group in turn, largest root
 * first, with its links of `kinds` taken too (pk: each interval's kinds, out): its intervals placed again where
 * they fit among the others where they are (memplan_pack_fixed), else with the smaller intervals that meet its
 * lifetime placed again after it, in each order (the smallest kept); kept where the arena stays within limit
 * (limit < 0: every group, the packing with every link of `kinds`). Sets iv's offsets and links; returns the
 * arena (at most limit). */
static int64_t pack_groups(Interval *iv, int n, int base, int kinds, const int *start, const int64_t *from,
                           int64_t limit, uint8_t *pk, Arena *a) {
  int *root = ARENA_ARRAY(a, int, n + 1), nr = 0;
  if (!pk) pk = ARENA_ARRAY(a, uint8_t, n + 1);
  Root *roots = ARENA_ARRAY(a, Root, n + 1);
  for (int i = 0; i < n; i++) {
    int w = i;
    while (linked(iv, w, kinds | base, NULL)) w = iv[w].up - 1;
    root[i] = w;
    pk[i] = (uint8_t)base;
  }
  bool *has = ARENA_ARRAY(a, bool, n + 1), *lead = ARENA_ARRAY(a, bool, n + 1);
  for (int i = 0; i < n; i++)
    if (root[i] != i && !has[root[i]]) has[root[i]] = true, roots[nr++] = (Root){iv[root[i]].bytes, root[i]};
  qsort(roots, (size_t)nr, sizeof *roots, root_cmp);
  int64_t *cur = ARENA_ARRAY(a, int64_t, n + 1), *off = ARENA_ARRAY(a, int64_t, n + 1);
  int64_t *fixed = ARENA_ARRAY(a, int64_t, n + 1), *spare = ARENA_ARRAY(a, int64_t, n + 1), size = 0;
  memcpy(cur, from, (size_t)n * sizeof *cur);
  for (int i = 0; i < n; i++)
    if (cur[i] + iv[i].bytes > size) size = cur[i] + iv[i].bytes;
  for (int g = 0; g < nr; g++) {
    int r = roots[g].i, lo = iv[r].start, hi = iv[r].end;
    int64_t big = 0;
    for (int i = 0; i < n; i++)
      if (root[i] == r) {
        pk[i] = (uint8_t)(kinds | base);
        lo = iv[i].start < lo ? iv[i].start : lo, hi = iv[i].end > hi ? iv[i].end : hi;
        big = iv[i].bytes > big ? iv[i].bytes : big;
      }
    take_links(iv, n, 0, pk, start, a);
    for (int i = 0; i < n; i++) lead[i] = false;
    for (int i = 0; i < n; i++)
      if (iv[i].with) lead[iv[i].with - 1] = true;
    for (int i = 0; i < n; i++) fixed[i] = root[i] == r || iv[i].with ? -1 : cur[i];
    int64_t got = memplan_pack_fixed(iv, n, fixed, PACK_LARGEST_FIRST, off, a, NULL);
    /* again, the smaller intervals of the group's lifetime (not in a group) placed after it */
    for (int i = 0; i < n; i++)
      if (root[i] != r && !lead[i] && !iv[i].with && iv[i].bytes < big && iv[i].start <= hi && iv[i].end >= lo)
        fixed[i] = -1;
    for (int how = 0; how < PACK_ORDERS && got > limit; how++) {
      int64_t again = memplan_pack_fixed(iv, n, fixed, how, spare, a, &got); /* (-1: no smaller) */
      if (again >= 0 && again < got) {
        int64_t *t = off;
        off = spare, spare = t, got = again;
      }
    }
    if (got <= limit || limit < 0) {
      int64_t *t = cur;
      cur = off, off = t, size = got;
    } else
      for (int i = 0; i < n; i++)
        if (root[i] == r) pk[i] = (uint8_t)base;
  }
  take_links(iv, n, 0, pk, start, a);
  for (int i = 0; i < n; i++) iv[i].offset = cur[i];
  return size;
}

/* The links' kinds a packing tries, in turn, by the orders (memplan_pack_orders): every copy in place, then the
 * concats' and pads' rows alone, the selects' alone, none (a placement in place can pack worse than the copies
 * where the step's peak is elsewhere: Llama-3-405B pp 2 int2 z3 packs 3.5 % smaller with the rows alone); no
 * more once one is down to the first's floor. */
static const int link_tries[] = {LINK_ALL, LINK_ROWS, LINK_SELECT, 0};

/* Whether the first try (every link) is the pick whatever the others give: within MEMPLAN_LINK_SLACK of a lower
 * bound on each other try's arena (memplan_pack_floor_groups, its links taken), so of the least. The pick then
 * takes every link, and no group is placed again: the others' packings change nothing (Llama-3-405B pp 16 x cp 2:
 * 6 packings of 175k intervals, not 24). Leaves iv's links those of the last bound taken. */
static bool first_is_pick(Interval *iv, int n, int64_t got, const int *start, Arena *a) {
  enum { TRIES = sizeof link_tries / sizeof *link_tries };
  for (int t = 1; t < TRIES; t++) {
    take_links(iv, n, link_tries[t], NULL, start, a);
    int64_t lb = memplan_pack_floor_groups(iv, n, a);
    if (got > lb + lb / MEMPLAN_LINK_SLACK) return false;
  }
  return true;
}

/* An earlier try (index below t) that took exactly the links try t takes, or -1: the packing reads nothing of a
 * try but its links (take_links), and an interval's link is taken by kinds K when its own kind is in K, so where
 * one try's kinds hold the other's, the taken links of the smaller are among the larger's, and the same count
 * makes them the same; two tries taking none take the same (none). Tries the loop skipped (forced) are not
 * looked at. (GPT-3 175B pp 16 zb, 192 micro-batches: all = selects and rows = none, 4 packings of 66,548
 * intervals by 7 orders each, two of them repeats.) */
static int same_links_as(const int *count, int t, int forced) {
  for (int u = 0; u < t; u++) {
    if (forced >= 0 && link_tries[u] != forced && link_tries[u]) continue;
    int ku = link_tries[u], kt = link_tries[t];
    bool nested = (ku & kt) == ku || (ku & kt) == kt;
    if (count[u] == count[t] && (nested || !count[t])) return u;
  }
  return -1;
}

/* memplan_pack: the links taken into *kinds, or *pk (NULL: *kinds; else each interval's kinds), from arena a. */
static int64_t pack_links(Interval *iv, int n, Arena *a, int64_t *plain, int *kinds, uint8_t **pk) {
  bool links = false;
  for (int i = 0; i < n && !links; i++) links = iv[i].up;
  *kinds = 0, *pk = NULL;
  int forced = forced_links(); /* (read, and checked, once a process) */
  if (!links) return memplan_pack_orders(iv, n, a, plain, NULL, INT64_MAX);
  bool report = forced == -3;
  if (report) forced = -1;
  enum { TRIES = sizeof link_tries / sizeof *link_tries };
  int *start = ARENA_ARRAY(a, int, n + 1);
  for (int i = 0; i < n; i++) start[i] = iv[i].start;
  int64_t *off[TRIES], got[TRIES], pl[TRIES], floor0 = 0, least = -1;
  int count[TRIES], t = 0, tried = 0;
  for (; t < TRIES; t++) {
    int64_t fl;
    if (forced >= 0 && link_tries[t] != forced && link_tries[t]) continue; /* (forced: it, and none) */
    count[t] = take_links(iv, n, link_tries[t], NULL, start, a);
    int same = same_links_as(count, t, forced);
    if (same >= 0) { /* (the intervals as an earlier try left them: its packing) */
      got[t] = got[same], pl[t] = pl[same], off[t] = off[same];
      continue;
    }
    /* (a try after the first gives up at the least arena so far: reaching it, it is neither the least, the first
     * at it being earlier, nor the pick, which is the first within the slack of the least: got INT64_MAX) */
    got[t] = memplan_pack_orders(iv, n, a, &pl[t], &fl, least < 0 || forced >= 0 ? INT64_MAX : least);
    if (got[t] < 0) {
      got[t] = INT64_MAX, pl[t] = 0, off[t] = NULL, tried++;
      continue;
    }
    off[t] = ARENA_ARRAY(a, int64_t, n + 1);
    for (int i = 0; i < n; i++) off[t][i] = iv[i].offset;
    if (least < 0 || got[t] < least) least = got[t];
    if (!tried++) floor0 = fl; /* (every link taken: the lowest floor of all) */
    if (got[t] == floor0 && forced < 0) break;
    if (!t && forced < 0 && first_is_pick(iv, n, got[0], start, a)) break;
  }
  /* the first within MEMPLAN_LINK_SLACK of the least arena: the copies its links save cost a little packing */
  int pick = 0;
  if (forced >= 0)
    while (link_tries[pick] != forced) pick++;
  else
    while (got[pick] > least + least / MEMPLAN_LINK_SLACK) pick++;
  int64_t size = got[pick];
  const int64_t *offs = off[pick];
  *kinds = link_tries[pick];
  /* every link (forced: every one of its kind) from the least packing (forced: from none), group by group: each
   * group in the holes the others leave; kept where no larger than the pick's (forced: where smaller; not tried
   * where the pick takes every link: a pipeline's deep schedules would repeat their packs per group) */
  int want = forced >= 0 ? forced : LINK_ALL;
  if (want && (*kinds != want || forced >= 0)) {
    int from = forced >= 0 ? TRIES - 1 : 0; /* (forced: from none) */
    while (forced < 0 && got[from] != least) from++;
    int64_t *o = ARENA_ARRAY(a, int64_t, n + 1);
    int64_t gsize = pack_groups(iv, n, link_tries[from], want, start, off[from], -1, NULL, a);
    if (gsize < size || (forced < 0 && gsize == size)) {
      for (int i = 0; i < n; i++) o[i] = iv[i].offset;
      size = gsize, offs = o, *kinds = want;
    }
  }
  /* else more links than the pick's from it, group by group, where its arena does not grow */
  if (want && *kinds != want) {
    uint8_t *gpk = ARENA_ARRAY(a, uint8_t, n + 1);
    int64_t gsize = pack_groups(iv, n, link_tries[pick], want, start, off[pick], got[pick], gpk, a);
    if (take_links(iv, n, 0, gpk, start, a) > count[pick]) {
      size = gsize, *pk = gpk;
      int64_t *o = ARENA_ARRAY(a, int64_t, n + 1);
      for (int i = 0; i < n; i++) o[i] = iv[i].offset;
      offs = o;
    }
  }
  int taken = take_links(iv, n, *kinds, *pk, start, a), all = 0;
  for (int i = 0; i < n; i++) iv[i].offset = offs[i], all += iv[i].up != 0;
  if (report) fprintf(stderr, "shardc: memplan: %d intervals, %d of %d links in place, arena %lld B\n", n, taken, all, (long long)size);
  if (plain) *plain = pl[pick];
  return size;
}

int64_t memplan_pack(Interval *iv, int n, Arena *a, int64_t *plain) {
  int kinds;
  uint8_t *pk;
  return pack_links(iv, n, a, plain, &kinds, &pk);
}

/* A set of intervals packed before: what the packing reads of each (bytes, lifetime, stage, set, plain),
 * the offsets it gave and its arena. A pipeline schedule's region bodies repeat (one per
 * micro-batch and chunk: 16,384 at pp 32 x 4 chunks, 1024 micro-batches), each the same set. */
typedef struct MemoSet {
  struct MemoSet *next;
  uint64_t hash;
  int n;
  int64_t *key; /* [MEMO_KEY n] */
  int64_t *off; /* [n] */
  int64_t size, plain;
  int kinds;  /* the links taken (pack_links) */
  uint8_t *pk; /* [n] or NULL: each interval's links taken (else kinds) */
} MemoSet;

enum { MEMO_BUCKETS = 1024, MEMO_KEY = 9 };
struct PackMemo {
  Arena *a;
  MemoSet *bucket[MEMO_BUCKETS];
};

PackMemo *memplan_pack_memo_new(Arena *a) {
  PackMemo *m = ARENA_NEW(a, PackMemo);
  m->a = a;
  return m;
}

static void memo_key(const Interval *iv, int n, int64_t *key) {
  for (int i = 0; i < n; i++) {
    int64_t *k = key + MEMO_KEY * (size_t)i;
    k[0] = iv[i].bytes, k[1] = iv[i].start, k[2] = iv[i].end, k[3] = iv[i].stage, k[4] = (int64_t)iv[i].set;
    k[5] = iv[i].plain, k[6] = iv[i].updelta, k[7] = iv[i].apart, k[8] = 2 * (int64_t)iv[i].up + iv[i].upsel;
  }
}

/* The large sets (over MEMO_KEEP_N intervals: a pipelined step's top graph, 175k intervals and 28 packings of
 * them at Llama-3-405B pp 16 x cp 2) kept for the process, up to MEMO_KEEP of them: the driver's check
 * compiles (replan.c) plan the same step as the plan's own, and packing is their largest cost. Their
 * arena (the static one, empty as it starts) lives as long as the process (a search's children inherit it). */
enum { MEMO_KEEP_N = 4096, MEMO_KEEP = 4 };
static Arena kept_arena;
static MemoSet *kept[MEMO_KEEP];
static int nkept;

static MemoSet *memo_find(MemoSet *e, uint64_t h, int n, const int64_t *key) {
  for (; e; e = e->next)
    if (e->hash == h && e->n == n && !memcmp(e->key, key, MEMO_KEY * (size_t)n * sizeof *key)) return e;
  return NULL;
}

int64_t memplan_pack_memo(Interval *iv, int n, PackMemo *memo, Arena *a, int64_t *plain) {
  if (!memo) return memplan_pack(iv, n, a, plain);
  int64_t *key = ARENA_ARRAY(a, int64_t, MEMO_KEY * (size_t)n + 1);
  memo_key(iv, n, key);
  uint64_t h = 1469598103934665603ull ^ (uint64_t)n; /* FNV-1a over the key's words */
  for (size_t i = 0; i < MEMO_KEY * (size_t)n; i++) h = (h ^ (uint64_t)key[i]) * 1099511628211ull;
  bool big = n > MEMO_KEEP_N;
  MemoSet **b = &memo->bucket[h % MEMO_BUCKETS], *e = memo_find(*b, h, n, key);
  for (int k = 0; big && !e && k < nkept; k++) e = memo_find(kept[k], h, n, key);
  if (e) {
    int *start = ARENA_ARRAY(a, int, n + 1); /* (the links the packing took) */
    for (int i = 0; i < n; i++) start[i] = iv[i].start;
    take_links(iv, n, e->kinds, e->pk, start, a);
    for (int i = 0; i < n; i++) iv[i].offset = e->off[i];
    if (plain) *plain = e->plain;
    return e->size;
  }
  Arena *ea = memo->a;
  if (big) {
    if (nkept == MEMO_KEEP) arena_free(&kept_arena), nkept = 0; /* full: the kept sets dropped together */
    ea = &kept_arena;
  }
  e = ARENA_NEW(ea, MemoSet);
  e->hash = h, e->n = n;
  e->key = ARENA_ARRAY(ea, int64_t, MEMO_KEY * (size_t)n + 1);
  memcpy(e->key, key, MEMO_KEY * (size_t)n * sizeof *key);
  uint8_t *pk;
  e->size = pack_links(iv, n, a, &e->plain, &e->kinds, &pk);
  if (pk) {
    e->pk = ARENA_ARRAY(ea, uint8_t, n + 1);
    memcpy(e->pk, pk, (size_t)n * sizeof *pk);
  }
  e->off = ARENA_ARRAY(ea, int64_t, n + 1);
  for (int i = 0; i < n; i++) e->off[i] = iv[i].offset;
  if (big)
    kept[nkept++] = e;
  else {
    e->next = *b;
    *b = e;
  }
  if (plain) *plain = e->plain;
  return e->size;
}
