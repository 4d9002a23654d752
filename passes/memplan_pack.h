/* passes/memplan_pack.h — the memory plan's intervals and their allocator (memplan_pack.c; the links in
 * place it takes and its memo: memplan_links.c), shared by passes/memplan.c. */
#ifndef SHARDC_MEMPLAN_PACK_H
#define SHARDC_MEMPLAN_PACK_H

#include "arena.h"
#include "memplan.h"

typedef struct {
  Value *v;      /* NULL for a region block or a node's scratch */
  Node *node;    /* a node's scratch (Node.scratch_at): that node; else NULL */
  int64_t bytes; /* aligned size */
  int start, end; /* live interval, node positions (inclusive) */
  int mclass;
  int64_t offset; /* assigned, from the transient base */
  int stage;      /* Node.stage of a value only its pipeline stage touches (passes/pipe.c), 0: every rank */
  int64_t comm;   /* of bytes, those the peak counts as communication (a region block: its body's
                     packing buffers live at the body's peak); the rest are mclass's */
  uint64_t set;   /* with stage 0: the stages whose ranks alone touch it, bit s for stage s (a parameter held on
                     the first and the last stage, passes/pipe_owners.c); 0: every rank */
  int64_t plain;  /* a region block: its body's arena by largest first alone at every level (>= bytes); 0: bytes */
  /* rows in place (memplan_views.c): up, 1 + the index of the interval it is written into (a node's output),
   * updelta bytes above its offset, upsel whether that node is a stage_select (else a concat's or pad's rows);
   * apart, where it is such a node's output, 1 + its start where the node copies (the links not taken; its
   * start: past the node). memplan_pack decides which links it takes (memplan_links.c; with, delta: the leader
   * it is placed with, delta bytes above its offset; 0: its own place). */
  int up, apart;
  bool upsel;
  int64_t updelta;
  int with;
  int64_t delta;
  /* a deferred scatter's input and the one of the loop continuing its loop, held in one place from the one loop
   * through the other (memplan_defer_next; Interval.v NULL): both placed here once the plan is made */
  Value *held[2];
} Interval;

/* A growing list of intervals (in an arena). */
typedef struct {
  Arena *a;
  Interval *iv;
  int n, cap;
} Intervals;

/* A value's bytes; whether op updates its parameter in place (AdamW, SGD). */
static inline int64_t memplan_bytes(const Value *v) { return ir_numel(&v->shape) * ir_dtype_size(v->dtype); }
static inline bool memplan_is_update(OpKind op) { return op == OP_ADAMW_UPDATE || op == OP_SGD_UPDATE; }

/* x rounded up to MEMPLAN_ALIGN. */
int64_t memplan_align(int64_t x);
/* Appends v's interval (bytes aligned), live at `start` only so far. */
Interval *memplan_add_interval(Intervals *p, Value *v, int64_t bytes, int start, int mclass);

/* A body value the enclosing graph's plan places (Value.offset while the body is planned): a deferred scatter's input
 * held from its loop through the loop continuing it (memplan_held_pairs). */
enum { MEMPLAN_HELD = -4 };
/* Loop g->nodes[i]'s deferred scatters paired with its cont's (memplan_defer_next): both inputs held in one interval of
 * g (Interval.held), from the loop through its cont, not in either body's block; each pair noted in the scatter's
 * Node.defer_last (memplan_defer_waits makes it the node the wait goes before, once the offsets are final). */
void memplan_held_pairs(Graph *g, int i, Intervals *p);
/* The held values of p's intervals at their interval's offset from base (once the bodies are shifted). */
void memplan_place_held(const Intervals *p, int64_t base, MemPlan *mp);

/* Plan `offload`: the top graph's host values in the host allocation (memplan_host.c). */
void memplan_place_host(Graph *g, MemPlan *mp, Arena *tmp);

/* Assigns every interval an offset from the transient base; returns the arena's size: the
 * smallest of the greedy packings in the orders below (the first smallest; the first order alone
 * where its arena is memplan_pack_floor), and of largest first over the blocks' plain sizes, so
 * never over what largest first alone at every level gives, which *plain (NULL: not wanted) gets:
 * a body's block is smaller or the same, and a smaller block may pack worse by one greedy. With links in place
 * (Interval.up), the links it takes too (memplan_links.c; Interval.with, .delta, a node's output's start). */
int64_t memplan_pack(Interval *iv, int n, Arena *a, int64_t *plain);

/* The packings of one memory plan by interval set: a set packed before (the same bytes, lifetimes
 * and stages, in the same order: a region body repeated per micro-batch) gets the same offsets
 * without packing again. From arena a, which must outlive its use. */
typedef struct PackMemo PackMemo;
PackMemo *memplan_pack_memo_new(Arena *a);
/* memplan_pack through memo (NULL: none). */
int64_t memplan_pack_memo(Interval *iv, int n, PackMemo *memo, Arena *a, int64_t *plain);

/* The orders memplan_pack places intervals in (ties: then the index); a plan's fragmentation is
 * its arena over the peak (memplan_pack_floor), and which order leaves the least depends on the
 * plan (Llama-3-405B pp 2 interleaved: start order, or size classes then start; docs/performance.md
 * "Memory plan fragmentation"). */
/* memplan_pack keeps the most copies in place (Interval.up) whose arena is within 1 / this of the least. */
enum { MEMPLAN_LINK_SLACK = 256 };

enum {
  PACK_LARGEST_FIRST, /* by size, descending, then start: the plain greedy (tried first) */
  PACK_START,         /* by start, then the largest */
  PACK_CLASS2_START,  /* by power-of-two size class, descending, then start */
  PACK_CLASS4_START,  /* by power-of-four size class, descending, then start */
  PACK_AREA,          /* by size x lifetime, descending, then start */
  PACK_END_BEST_FIT,  /* by end, descending (the step backwards), each at its best-fit gap */
  PACK_ORDERS
};
/* One greedy packing: intervals in order `how`, each at the lowest offset free of the placed ones
 * it meets on a rank (PACK_END_BEST_FIT: the free gap that leaves the least over); sets every
 * offset, returns the arena's size. */
int64_t memplan_pack_order(Interval *iv, int n, int how, Arena *a);
/* The packing of memplan_pack without links (passes/memplan_links.c decides those: Interval.with, .delta as
 * they are): the smallest of the orders above, largest first over the plain sizes (that arena into *plain),
 * the peak (memplan_pack_floor) into *floor (NULL: not wanted). Where no order's arena is below limit
 * (INT64_MAX: none), -1, the offsets and *plain untouched (each packing gives up there); else the same as
 * without a limit. */
int64_t memplan_pack_orders(Interval *iv, int n, Arena *a, int64_t *plain, int64_t *floor, int64_t limit);
/* Threads memplan_pack_orders may pack a large set's orders on (1, the default: one after another; at most
 * PACK_ORDERS): the driver gives its cores (main.c), a search's candidate, timed by CPU seconds, 1. The packing
 * is the same whatever the count. */
void memplan_pack_set_jobs(int jobs);
/* The intervals fixed[i] >= 0 gives (a group's leader, Interval.with: its group) at that offset, then the
 * others in order `how` (a group by its whole lifetime) as memplan_pack_order places them; offsets into off
 * (by index), returns the arena's size, or -1 once it reaches *limit (NULL: no limit; off then partial). */
int64_t memplan_pack_fixed(const Interval *iv, int n, const int64_t *fixed, int how, int64_t *off, Arena *a,
                           const int64_t *limit);
/* The peak of live bytes on one rank over the intervals' lifetimes: no packing's arena is smaller. */
int64_t memplan_pack_floor(const Interval *iv, int n, Arena *a);
/* A lower bound on the arena of any packing with the links Interval.with gives (memplan_pack_orders, each order):
 * the peak of live bytes on one rank, a group (a leader and its members) counting at each position the largest of
 * its intervals alive there (its members may share their leader's bytes, rows in place: memplan_pack_floor sums
 * them). A lone interval or a group meets no other's bytes where their lifetimes meet on a rank, and offsets are
 * never negative. */
int64_t memplan_pack_floor_groups(const Interval *iv, int n, Arena *a);

/* The peak bytes live over positions 0..npos (per pipeline stage: every rank's values plus the
 * stage's own), its bytes by class added to by_class; per_stage (NULL, or room for nstages): each
 * stage's own peak (every stage's the same without staged intervals). */
int64_t memplan_peak(const Interval *iv, int n, int npos, int64_t by_class[MEM_COUNT], Arena *a, int64_t *per_stage,
                     int nstages);

#endif
