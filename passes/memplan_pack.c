/* passes/memplan_pack.c — the memory plan's allocator (passes/memplan.c places values and gives
 * each transient an interval): intervals packed at offsets by a greedy best-offset allocator,
 * largest first, and the peak over positions and pipeline stages. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "memplan_pack.h"

typedef struct {
  int64_t a, b; /* sort keys, ascending */
  int i;        /* the last key: the interval's index */
} PackKey;

static int int_cmp(const void *x, const void *y) { return (*(const int *)x > *(const int *)y) - (*(const int *)x < *(const int *)y); }

static int pack_key_cmp(const void *x, const void *y) {
  const PackKey *p = x, *q = y;
  if (p->a != q->a) return p->a < q->a ? -1 : 1;
  if (p->b != q->b) return p->b < q->b ? -1 : 1;
  return (p->i > q->i) - (p->i < q->i);
}

/* The placed intervals, found by lifetime: a segment tree over the positions per pipeline stage
 * (values of two different stages never meet on a rank: a stage's value looks only at its stage's
 * and every rank's; an every-rank value at every stage's), each node holding the bytes of placed
 * intervals as a union of disjoint blocks, not interval by interval: `own`, the spans of the
 * intervals whose lifetime covers the node's positions whole (the node is one of the O(log) that
 * cover it), and `sub`, the spans of every interval meeting the node's positions stored in its
 * subtree (so also every one on the paths from its start and end leaves to the root: those meet
 * the node's positions, so holding them there is true and harmless). The intervals meeting a
 * lifetime [s, e] are exactly those in `sub` of the nodes that cover [s, e] and in `own` of the
 * nodes on the paths from leaves s and e to the root: O(log) unions, whose blocks pack merges.
 * A packed plan's unions hold few blocks (a node's placed bytes are mostly one solid run: its holes),
 * where an unrolled pipeline schedule's lifetime meets a stage's whole live set (1,300 values at
 * pp 32 x 4 chunks, 128 micro-batches): pack's cost follows the unions' blocks, not the meetings. */
typedef struct {
  int64_t a, b;
} Blk;

typedef struct {
  Blk *b; /* disjoint, neither meeting nor touching, ascending */
  int n, cap;
} Union;

/* The unions' arrays, from the arena by capacity class (4 << c blocks), a grown list's old array
 * reused by the next list of its class. */
typedef struct {
  Arena *a;
  Blk *free[32];
} Pool;

static Blk *pool_get(Pool *p, int c) {
  Blk *b = p->free[c];
  if (!b) return ARENA_ARRAY(p->a, Blk, (size_t)4 << c);
  memcpy(&p->free[c], b, sizeof(Blk *));
  return b;
}

static void pool_put(Pool *p, Blk *b, int c) {
  memcpy(b, &p->free[c], sizeof(Blk *));
  p->free[c] = b;
}

/* u with [a, b) in it: the blocks it meets or touches merged into one. */
static void union_add(Pool *pool, Union *u, int64_t a, int64_t b) {
  int lo = 0, hi = u->n; /* the first block ending at or after a */
  while (lo < hi) {
    int m = (lo + hi) / 2;
    if (u->b[m].b < a) lo = m + 1;
    else hi = m;
  }
  int j = lo; /* blocks [lo, j) meet or touch [a, b) */
  while (j < u->n && u->b[j].a <= b) j++;
  if (j > lo) {
    if (u->b[lo].a < a) a = u->b[lo].a;
    if (u->b[j - 1].b > b) b = u->b[j - 1].b;
    u->b[lo] = (Blk){a, b};
    memmove(u->b + lo + 1, u->b + j, (size_t)(u->n - j) * sizeof *u->b);
    u->n -= j - lo - 1;
    return;
  }
  if (u->n == u->cap) {
    int c = u->cap ? __builtin_ctz((unsigned)u->cap >> 2) + 1 : 0;
    Blk *nb = pool_get(pool, c);
    if (u->n) {
      memcpy(nb, u->b, (size_t)u->n * sizeof *nb);
      pool_put(pool, u->b, c - 1);
    }
    u->b = nb;
    u->cap = 4 << c;
  }
  memmove(u->b + lo + 1, u->b + lo, (size_t)(u->n - lo) * sizeof *u->b);
  u->b[lo] = (Blk){a, b};
  u->n++;
}

typedef struct {
  Union *own; /* [2 * leaves]: node -> the spans of the intervals covering its positions whole */
  Union *sub; /* [2 * leaves]: node -> the spans of the intervals meeting its positions, stored below it */
} Placed;

/* Places [a, b) as the bytes of an interval alive over positions [start, end]. */
static void placed_add(Pool *pool, Placed *t, int leaves, int start, int end, int64_t a, int64_t b) {
  for (int l = start + leaves, r = end + leaves + 1; l < r; l >>= 1, r >>= 1) {
    if (l & 1) {
      union_add(pool, &t->own[l], a, b);
      union_add(pool, &t->sub[l++], a, b);
    }
    if (r & 1) {
      union_add(pool, &t->own[--r], a, b);
      union_add(pool, &t->sub[r], a, b);
    }
  }
  int p = (start + leaves) >> 1, q = (end + leaves) >> 1;
  for (; p != q; p >>= 1, q >>= 1) {
    union_add(pool, &t->sub[p], a, b);
    union_add(pool, &t->sub[q], a, b);
  }
  for (; p >= 1; p >>= 1) union_add(pool, &t->sub[p], a, b);
}

/* Appends to out (at k) the non-empty unions whose blocks are the bytes of the placed intervals
 * alive at some position of [start, end]; returns the new count. */
static int placed_meeting(const Placed *t, int leaves, int start, int end, const Union **out, int k) {
  for (int l = start + leaves, r = end + leaves + 1; l < r; l >>= 1, r >>= 1) {
    if (l & 1 && t->sub[l++].n) out[k++] = &t->sub[l - 1];
    if (r & 1 && t->sub[--r].n) out[k++] = &t->sub[r];
  }
  int p = (start + leaves) >> 1, q = (end + leaves) >> 1;
  for (; p != q; p >>= 1, q >>= 1) {
    if (t->own[p].n) out[k++] = &t->own[p];
    if (t->own[q].n) out[k++] = &t->own[q];
  }
  for (; p >= 1; p >>= 1)
    if (t->own[p].n) out[k++] = &t->own[p];
  return k;
}

/* From offset off up, the lowest offset at which `bytes` meet no block of the k unions, each
 * union's cursor cur[i] (its first block not below off) moving up with it. */
static int64_t fit_from(const Union **u, int k, int *cur, int64_t off, int64_t bytes) {
  for (bool moved = true; moved;) {
    moved = false;
    for (int i = 0; i < k; i++) {
      const Union *x = u[i];
      int c = cur[i];
      while (c < x->n && x->b[c].b <= off) c++;
      cur[i] = c;
      if (c < x->n && x->b[c].a < off + bytes) {
        off = x->b[c].b;
        moved = true;
      }
    }
  }
  return off;
}

/* First fit: the lowest offset from which `bytes` meet no block of the k unions (0, or a block's
 * end: the first gap in their union, the same offset whatever the unions' split). Each union is
 * read once, a cursor per union moving up with the offset (cur: room for k). */
static int64_t first_fit(const Union **u, int k, int *cur, int64_t bytes) {
  for (int i = 0; i < k; i++) cur[i] = 0;
  return fit_from(u, k, cur, 0, bytes);
}

/* Best fit: of the gaps in the k unions' blocks that hold `bytes` (below `size`, the arena so far;
 * the space above the last block counts as a gap up to size), the offset of the one with the least
 * room left over, the lowest on a tie; with none below size, first fit's. */
static int64_t best_fit(const Union **u, int k, int *cur, int64_t bytes, int64_t size) {
  int64_t off = 0, pick = -1, slack = 0;
  for (int i = 0; i < k; i++) cur[i] = 0;
  for (;;) {
    off = fit_from(u, k, cur, off, bytes);
    int64_t end = -1, next = 0; /* the gap's end: the next block's start; next: that block's end */
    for (int i = 0; i < k; i++)
      if (cur[i] < u[i]->n && (end < 0 || u[i]->b[cur[i]].a < end)) end = u[i]->b[cur[i]].a, next = u[i]->b[cur[i]].b;
    if (end < 0) end = size;
    if (off + bytes <= end && (pick < 0 || end - off - bytes < slack)) pick = off, slack = end - off - bytes;
    if (end >= size || next >= size) break;
    off = next;
  }
  return pick >= 0 ? pick : off;
}

/* A group's first fit (Interval.with): the lowest offset of its leader at which each member, delta bytes
 * above it, meets no block of the unions it meets (union q: member um[q]'s), each cursor moving up with it. */
static int64_t fit_group(const Interval *iv, const Union **u, const int *um, int k, int *cur) {
  int64_t off = 0;
  for (int i = 0; i < k; i++) cur[i] = 0;
  for (bool moved = true; moved;) {
    moved = false;
    for (int i = 0; i < k; i++) {
      const Union *x = u[i];
      int64_t d = iv[um[i]].with ? iv[um[i]].delta : 0, at = off + d;
      int c = cur[i];
      while (c < x->n && x->b[c].b <= at) c++;
      cur[i] = c;
      if (c < x->n && x->b[c].a < at + iv[um[i]].bytes) {
        off = x->b[c].b - d;
        moved = true;
      }
    }
  }
  return off;
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

/* Whether pack_in_order's index s (of 0..nst) holds interval x, and so whether x's placement reads it: under
 * pipeline stages (nst > 0) each stage's index holds its own values and every rank's (these met on each stage),
 * index 0 none, so a staged value reads one index, not two (GPT-3 175B pp 16: 855 of 66,548 intervals are every
 * rank's, and index 0's tree has a leaf per start of all of them); without stages, index 0 holds everything. The
 * placed intervals a value meets are the same either way, and a fit's offset depends on their blocks, not on
 * which union holds them (first_fit). */
static bool in_index(const Interval *x, int s, int nst) {
  return !nst || (s && (on_stage(x, s) || on_stage(x, 0)));
}

/* The positions index s tells apart: the starts of the intervals it holds or is asked about (its
 * stage's and every rank's; index 0: all), ascending, once each. Two lifetimes meet when the later
 * start is at most the earlier end, so a start stands for itself (its rank here) and an end for
 * the last of these starts at or before it: the meetings are the positions' (a stage's index has
 * its own intervals' few thousand positions, not the program's hundred thousand). */
typedef struct {
  int *at, n;
} Coords;

static Coords coords_new(const Interval *iv, int n, int s, Arena *a) {
  Coords c = {ARENA_ARRAY(a, int, n + 1), 0};
  for (int i = 0; i < n; i++)
    if (!s || on_stage(&iv[i], s) || on_stage(&iv[i], 0)) c.at[c.n++] = iv[i].start;
  qsort(c.at, (size_t)c.n, sizeof *c.at, int_cmp);
  int k = 0;
  for (int i = 0; i < c.n; i++)
    if (!k || c.at[k - 1] != c.at[i]) c.at[k++] = c.at[i];
  c.n = k;
  return c;
}

/* The rank of the last position of c at or before p (-1: none). */
static int coords_at(const Coords *c, int p) {
  int lo = 0, hi = c->n;
  while (lo < hi) {
    int m = (lo + hi) / 2;
    if (c->at[m] <= p) lo = m + 1;
    else hi = m;
  }
  return lo - 1;
}

#define PACK_LOCAL_ARENA 4096 /* intervals past which a try's index has an arena of its own */

/* Places group lead (its members: first, next; a lone interval: none) at offset off, each member delta bytes above
 * it: its bytes added to the index of each stage it is on, its offset to off_by, the arena's *size grown to hold it. */
static void place(const Interval *iv, int lead, int64_t off, const int *first, const int *next, Pool *pool,
                  Placed *by_stage, const Coords *pos, const int *leaves, int nst, int64_t *off_by, int64_t *size) {
  for (int m = lead; m >= 0; m = m == lead ? first[lead] : next[m]) {
    const Interval *y = &iv[m];
    int64_t at = off + (m == lead ? 0 : y->delta);
    off_by[m] = at;
    if (at + y->bytes > *size) *size = at + y->bytes;
    for (int s = 0; s <= nst; s++)
      if (in_index(y, s, nst))
        placed_add(pool, &by_stage[s], leaves[s], coords_at(&pos[s], y->start), coords_at(&pos[s], y->end), at,
                   at + y->bytes);
  }
}

/* Greedy placement in the order given: each interval at the lowest offset (best: the best-fit gap's,
 * best_fit) that does not overlap a placed interval whose lifetime meets its own on a rank, or where
 * `fixed` (NULL: none) puts it (fixed[i] >= 0: interval or group leader i's offset, placed as it
 * comes in the order); offsets into off_by (by index). Returns the arena size, or -1 where it gave up: the
 * arena only grows as intervals are placed, so once it reaches *limit (NULL: no limit; read as it goes,
 * another thread may lower it) this packing cannot be the one its caller keeps (the off_by then partial). */
static int64_t pack_in_order(const Interval *iv, int n, const PackKey *order, bool best, const int64_t *fixed,
                             int64_t *off_by, Arena *caller, const int64_t *limit) {
  Arena local; /* (a large set's index freed after each try; a small one's from the caller's arena) */
  arena_init(&local);
  Arena *a = n > PACK_LOCAL_ARENA ? &local : caller;
  int nst = max_stage(iv, n);
  Placed *by_stage = ARENA_ARRAY(a, Placed, nst + 1); /* [0]: every rank's; [s]: stage s's */
  Coords *pos = ARENA_ARRAY(a, Coords, nst + 1);
  int *leaves = ARENA_ARRAY(a, int, nst + 1), per = 8; /* per: unions one index gives a lifetime, at most */
  for (int s = 0; s <= nst; s++) {
    pos[s] = s || !nst ? coords_new(iv, n, s, a) : (Coords){NULL, 0}; /* (index 0 unused under stages) */
    int depth = 1;
    for (leaves[s] = 1; leaves[s] < pos[s].n; leaves[s] *= 2) depth++;
    if (4 * depth + 4 > per) per = 4 * depth + 4;
    by_stage[s] = (Placed){ARENA_ARRAY(a, Union, 2 * leaves[s]), ARENA_ARRAY(a, Union, 2 * leaves[s])};
  }
  Pool pool = {a, {0}};
  /* groups (Interval.with): each leader's members, placed with it at its offset */
  int *next = ARENA_ARRAY(a, int, n + 1), *first = ARENA_ARRAY(a, int, n + 1), gmax = 1;
  for (int i = 0; i < n; i++) first[i] = -1;
  for (int i = n - 1; i >= 0; i--)
    if (iv[i].with) next[i] = first[iv[i].with - 1], first[iv[i].with - 1] = i;
  for (int i = 0; i < n; i++) {
    int m = 1;
    for (int j = first[i]; j >= 0; j = next[j]) m++;
    if (m > gmax) gmax = m;
  }
  const Union **meet = ARENA_ARRAY(a, const Union *, (size_t)per * (size_t)(nst + 1) * (size_t)gmax);
  int *cur = ARENA_ARRAY(a, int, (size_t)per * (size_t)(nst + 1) * (size_t)gmax);
  int *um = ARENA_ARRAY(a, int, (size_t)per * (size_t)(nst + 1) * (size_t)gmax); /* a group's: the member a union meets */
  int64_t size = 0;
  for (int oi = 0; oi < n; oi++) {
    int lead = order[oi].i, k = 0;
    if (iv[lead].with) continue; /* (with its leader) */
    if (fixed && fixed[lead] >= 0) {
      place(iv, lead, fixed[lead], first, next, &pool, by_stage, pos, leaves, nst, off_by, &size);
      continue;
    }
    for (int m = lead; m >= 0; m = m == lead ? first[lead] : next[m]) {
      /* the placed intervals meeting x's lifetime, of the stages x meets: every rank's and its own
       * (an every-rank value: all) */
      const Interval *x = &iv[m];
      int k0 = k;
      for (int s = 0; s <= nst; s++)
        if (in_index(x, s, nst))
          k = placed_meeting(&by_stage[s], leaves[s], coords_at(&pos[s], x->start), coords_at(&pos[s], x->end), meet, k);
      for (int q = k0; q < k; q++) um[q] = m;
    }
    const Interval *x = &iv[lead];
    bool flat = true; /* a group of one place (a stage_select's): as one interval */
    for (int m = first[lead]; m >= 0 && flat; m = next[m]) flat = !iv[m].delta && iv[m].bytes <= x->bytes;
    int64_t off = !flat ? fit_group(iv, meet, um, k, cur)
                  : best            ? best_fit(meet, k, cur, x->bytes, size)
                                    : first_fit(meet, k, cur, x->bytes);
    place(iv, lead, off, first, next, &pool, by_stage, pos, leaves, nst, off_by, &size);
    if (limit && size >= __atomic_load_n(limit, __ATOMIC_RELAXED)) {
      size = -1;
      break;
    }
  }
  arena_free(&local);
  return size;
}

/* The sort keys of packing order `how` (the PACK_ enum) for interval x (then its index). */
static PackKey pack_key(const Interval *x, int i, int how) {
  int64_t len = (int64_t)x->end - x->start + 1, log2 = 63 - __builtin_clzll((uint64_t)x->bytes | 1);
  switch (how) {
  case PACK_START: return (PackKey){x->start, -x->bytes, i};
  case PACK_CLASS2_START: return (PackKey){-log2, x->start, i};
  case PACK_CLASS4_START: return (PackKey){-(log2 / 2), x->start, i};
  case PACK_AREA: return (PackKey){-(x->bytes / MEMPLAN_ALIGN) * len, x->start, i};
  case PACK_END_BEST_FIT: return (PackKey){-(int64_t)x->end, -x->bytes, i};
  default: return (PackKey){-x->bytes, x->start, i}; /* PACK_LARGEST_FIRST */
  }
}

/* The intervals as the orders see them: a group's leader with the group's lifetime (Interval.with), its members
 * with theirs; iv itself where no group. */
static const Interval *group_spans(const Interval *iv, int n, Arena *a) {
  Interval *span = NULL;
  for (int i = 0; i < n; i++)
    if (iv[i].with) {
      if (!span) {
        span = ARENA_ARRAY(a, Interval, n + 1);
        memcpy(span, iv, sizeof *iv * (size_t)n);
      }
      Interval *l = &span[iv[i].with - 1];
      if (iv[i].start < l->start) l->start = iv[i].start;
      if (iv[i].end > l->end) l->end = iv[i].end;
    }
  return span ? span : iv;
}

/* Order `how`'s packing of iv (iv untouched): offsets into off (by index), the arena's size returned (-1: it
 * reached *limit, pack_in_order). */
static int64_t pack_order_into(const Interval *iv, int n, int how, int64_t *off, Arena *caller, const int64_t *limit) {
  Arena local; /* (a large set's order and spans freed after: a pipelined step packs its 175k intervals 6-28
                  times, Llama-3-405B pp 16 x cp 2, 1 GB kept to the pass's end otherwise) */
  arena_init(&local);
  Arena *a = n > PACK_LOCAL_ARENA ? &local : caller;
  PackKey *order = ARENA_ARRAY(a, PackKey, n + 1);
  const Interval *span = group_spans(iv, n, a);
  for (int i = 0; i < n; i++) order[i] = pack_key(&span[i], i, how);
  qsort(order, (size_t)n, sizeof *order, pack_key_cmp);
  int64_t size = pack_in_order(iv, n, order, how == PACK_END_BEST_FIT, NULL, off, a, limit);
  arena_free(&local);
  return size;
}

/* memplan_pack_order, giving up (-1, iv's offsets untouched) once the arena reaches *limit (NULL: never). */
static int64_t pack_order_limited(Interval *iv, int n, int how, Arena *caller, const int64_t *limit) {
  Arena local; /* (a large set's offsets freed after; a small one's from the caller's arena, as many bodies pack) */
  arena_init(&local);
  int64_t *off = ARENA_ARRAY(n > PACK_LOCAL_ARENA ? &local : caller, int64_t, n + 1);
  int64_t size = pack_order_into(iv, n, how, off, caller, limit);
  for (int i = 0; i < n && size >= 0; i++) iv[i].offset = off[i];
  arena_free(&local);
  return size;
}

int64_t memplan_pack_order(Interval *iv, int n, int how, Arena *caller) {
  return pack_order_limited(iv, n, how, caller, NULL);
}

/* Threads packing a large set's orders side by side (memplan_pack_set_jobs): each order's packing depends on
 * the set alone, so the pick (the first smallest in order) is the sequential one's. */
static int pack_jobs = 1;

void memplan_pack_set_jobs(int jobs) { pack_jobs = jobs < 1 ? 1 : jobs > PACK_ORDERS ? PACK_ORDERS : jobs; }

typedef struct {
  const Interval *iv;
  int n;
  int64_t floor, got[PACK_ORDERS]; /* (INT64_MAX: gave up at its limit) */
  int64_t limit[PACK_ORDERS]; /* the arena at which order h cannot be the pick: a finished order's (below h: its
                                 arena; above: one more, the pick being the first smallest) */
  int64_t cap;      /* the arena at which every order gives up (INT64_MAX: none) */
  int64_t *off[PACK_ORDERS];
  int next, at_floor; /* the next order to take; the first order whose arena is the floor (PACK_ORDERS: none) */
  pthread_mutex_t mu;
} Orders;

static void *orders_worker(void *arg) {
  Orders *o = arg;
  for (;;) {
    pthread_mutex_lock(&o->mu);
    int how = o->next++;
    bool stop = how >= PACK_ORDERS || how > o->at_floor; /* (after an order at the floor: the sequential loop's end) */
    pthread_mutex_unlock(&o->mu);
    if (stop) return NULL;
    /* (largest first gives up at the cap alone: its arena is also the first's, *first) */
    int64_t got = pack_order_into(o->iv, o->n, how, o->off[how], NULL, how ? &o->limit[how] : &o->cap);
    pthread_mutex_lock(&o->mu);
    o->got[how] = got < 0 ? INT64_MAX : got;
    if (got == o->floor && how < o->at_floor) o->at_floor = how;
    for (int h = 0; h < PACK_ORDERS && got >= 0; h++) {
      int64_t lim = h < how ? got + 1 : got;
      if (h != how && lim < o->limit[h]) __atomic_store_n(&o->limit[h], lim, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&o->mu);
  }
}

/* The orders of memplan_pack_orders side by side on pack_jobs threads (a set over PACK_LOCAL_ARENA: each try's
 * memory its own). The orders up to the first at the floor are packed (some after it may be too, and are not
 * looked at), so the pick is the sequential loop's. Every order gives up once its arena reaches `cap` (INT64_MAX:
 * never; an arena its caller has, or needs under: an order reaching it cannot be the pick). The pick's offsets
 * into best, its arena into *size (INT64_MAX: every order gave up), largest first's arena into *first (INT64_MAX:
 * it gave up; a thread that does not start leaves its orders to the others). */
static void orders_side_by_side(const Interval *iv, int n, int64_t floor, int64_t cap, int64_t *best, int64_t *size,
                                int64_t *first) {
  Orders o = {.iv = iv, .n = n, .floor = floor, .cap = cap, .at_floor = PACK_ORDERS};
  for (int h = 0; h < PACK_ORDERS; h++) {
    o.got[h] = -1;
    o.limit[h] = cap;
    o.off[h] = malloc(((size_t)n + 1) * sizeof *o.off[h]);
    if (!o.off[h]) die("memplan: out of memory (%d intervals)", n);
  }
  pthread_mutex_init(&o.mu, NULL);
  pthread_t th[PACK_ORDERS];
  int started = 0;
  for (; started < pack_jobs - 1; started++)
    if (pthread_create(&th[started], NULL, orders_worker, &o) != 0) break;
  orders_worker(&o); /* (this thread too) */
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  pthread_mutex_destroy(&o.mu);
  int pick = 0;
  for (int h = 1; h < PACK_ORDERS && h <= o.at_floor; h++)
    if (o.got[h] < o.got[pick]) pick = h;
  if (o.got[pick] < INT64_MAX) memcpy(best, o.off[pick], (size_t)n * sizeof *best);
  *size = o.got[pick];
  *first = o.got[0];
  for (int h = 0; h < PACK_ORDERS; h++) free(o.off[h]);
}

/* The packing orders tried, in turn, the first smallest arena kept: largest first (the plain
 * greedy), then the others; no more once an arena is down to the peak (no order does better).
 * Where a block's plain size differs, largest first over the plain sizes too (each block then in
 * a place at least its size). Each packing gives up once its arena reaches the least so far (it cannot be
 * the pick) or `limit`; where every one reaches limit, -1 (iv's offsets and *plain untouched). */
int64_t memplan_pack_orders(Interval *iv, int n, Arena *a, int64_t *plain, int64_t *floor_out, int64_t limit) {
  int64_t *best = ARENA_ARRAY(a, int64_t, n + 1), size = -1, plain_size = -1;
  bool differs = false;
  for (int i = 0; i < n; i++) differs = differs || (iv[i].plain && iv[i].plain != iv[i].bytes);
  Arena local; /* (a large set's copy freed after) */
  arena_init(&local);
  Interval *big = NULL; /* (differs: the intervals at their plain sizes) */
  if (differs) {
    big = ARENA_ARRAY(n > PACK_LOCAL_ARENA ? &local : a, Interval, n + 1);
    for (int i = 0; i < n; i++) {
      big[i] = iv[i];
      if (big[i].plain) big[i].bytes = big[i].plain;
    }
    size = plain_size = pack_order_limited(big, n, PACK_LARGEST_FIRST, a, &limit);
    for (int i = 0; i < n && size >= 0; i++) best[i] = big[i].offset;
  }
  int64_t floor = memplan_pack_floor(iv, n, a);
  if (floor_out) *floor_out = floor;
  if (pack_jobs > 1 && n > PACK_LOCAL_ARENA && size != floor) {
    int64_t got, first;
    int64_t *off = ARENA_ARRAY(&local, int64_t, n + 1);
    orders_side_by_side(iv, n, floor, size < 0 ? limit : size, off, &got, &first);
    if (!differs && first < INT64_MAX) plain_size = first;
    if (got < INT64_MAX && (size < 0 || got < size)) {
      size = got;
      memcpy(best, off, (size_t)n * sizeof *best);
    }
  } else
    for (int how = 0; how < PACK_ORDERS && size != floor; how++) {
      /* (an order gives up once its arena is the least so far: the first smallest is kept) */
      int64_t cap = size < 0 ? limit : size;
      int64_t got = pack_order_limited(iv, n, how, a, &cap);
      if (got < 0) continue;
      if (!how && !differs) plain_size = got; /* (largest first, the blocks their plain sizes) */
      if (size < 0 || got < size) {
        size = got;
        for (int i = 0; i < n; i++) best[i] = iv[i].offset;
      }
    }
  if (size >= 0 && plain_size < 0) /* (the plain packing gave up at limit, an order did not: its arena, whole) */
    plain_size = differs ? pack_order_limited(big, n, PACK_LARGEST_FIRST, a, NULL)
                         : pack_order_into(iv, n, PACK_LARGEST_FIRST, ARENA_ARRAY(&local, int64_t, n + 1), a, NULL);
  arena_free(&local);
  if (size < 0) return -1;
  for (int i = 0; i < n; i++) iv[i].offset = best[i];
  if (plain) *plain = plain_size;
  return size;
}

int64_t memplan_pack_fixed(const Interval *iv, int n, const int64_t *fixed, int how, int64_t *off, Arena *caller,
                           const int64_t *limit) {
  Arena local; /* (a large set's order and spans freed after) */
  arena_init(&local);
  Arena *a = n > PACK_LOCAL_ARENA ? &local : caller;
  const Interval *span = group_spans(iv, n, a);
  PackKey *order = ARENA_ARRAY(a, PackKey, n + 1);
  for (int i = 0; i < n; i++)
    order[i] = fixed[i] >= 0 ? (PackKey){INT64_MIN, 0, i} : pack_key(&span[i], i, how);
  qsort(order, (size_t)n, sizeof *order, pack_key_cmp);
  int64_t size = pack_in_order(iv, n, order, how == PACK_END_BEST_FIT, fixed, off, a, limit);
  arena_free(&local);
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

int64_t memplan_pack_floor(const Interval *iv, int n, Arena *caller) {
  int npos = 0;
  for (int i = 0; i < n; i++)
    if (iv[i].end > npos) npos = iv[i].end;
  Arena local;
  arena_init(&local);
  int64_t cls[MEM_COUNT] = {0};
  int64_t pk = memplan_peak(iv, n, npos, cls, n > PACK_LOCAL_ARENA ? &local : caller, NULL, 0);
  arena_free(&local);
  return pk;
}

/* A group's bytes (Interval.with: its leader and members) at a position on a stage hold each of its intervals alive
 * there: at least the largest. As intervals memplan_peak sums: per stretch between the group's starts and ends,
 * that largest of its every-rank intervals as one every-rank interval, and each stage's excess over it (the
 * largest of the stage's own) as one of that stage. Appends them to out at k; returns the new count. */
static int group_floor(const Interval *iv, int lead, const int *first, const int *next, int nst, int *pos,
                       Interval *out, int k) {
  int np = 0;
  for (int m = lead; m >= 0; m = m == lead ? first[lead] : next[m]) pos[np++] = iv[m].start, pos[np++] = iv[m].end + 1;
  qsort(pos, (size_t)np, sizeof *pos, int_cmp);
  for (int q = 0; q + 1 < np; q++) {
    int a = pos[q], b = pos[q + 1]; /* [a, b): the same intervals alive throughout */
    if (a == b) continue;
    int64_t every = 0;
    for (int m = lead; m >= 0; m = m == lead ? first[lead] : next[m])
      if (iv[m].start <= a && iv[m].end >= b - 1 && on_stage(&iv[m], 0) && iv[m].bytes > every) every = iv[m].bytes;
    if (every) out[k++] = (Interval){.bytes = every, .start = a, .end = b - 1};
    for (int s = 1; s <= nst; s++) {
      int64_t own = every;
      for (int m = lead; m >= 0; m = m == lead ? first[lead] : next[m])
        if (iv[m].start <= a && iv[m].end >= b - 1 && on_stage(&iv[m], s) && iv[m].bytes > own) own = iv[m].bytes;
      if (own > every) out[k++] = (Interval){.bytes = own - every, .start = a, .end = b - 1, .stage = s};
    }
  }
  return k;
}

int64_t memplan_pack_floor_groups(const Interval *iv, int n, Arena *caller) {
  Arena local;
  arena_init(&local);
  Arena *a = n > PACK_LOCAL_ARENA ? &local : caller;
  int nst = max_stage(iv, n), *next = ARENA_ARRAY(a, int, n + 1), *first = ARENA_ARRAY(a, int, n + 1);
  for (int i = 0; i < n; i++) first[i] = -1;
  for (int i = n - 1; i >= 0; i--)
    if (iv[i].with) next[i] = first[iv[i].with - 1], first[iv[i].with - 1] = i;
  int cap = n + 1; /* the lone intervals, and a group's stretches (under 2 x its size) by its stages */
  for (int i = 0; i < n; i++)
    if (iv[i].with) cap += 4 * (nst + 1); /* (a member's 4: a group of g has g - 1 of them) */
  Interval *out = ARENA_ARRAY(a, Interval, cap);
  int *pos = ARENA_ARRAY(a, int, 2 * n + 2), k = 0;
  for (int i = 0; i < n; i++)
    if (!iv[i].with && first[i] < 0) out[k++] = iv[i];
    else if (!iv[i].with) k = group_floor(iv, i, first, next, nst, pos, out, k);
  int64_t pk = memplan_pack_floor(out, k, a);
  arena_free(&local);
  return pk;
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
