/* passes/zero.h — the `zero` pass's pieces shared between its files (passes/zero.c, zero_gather.c, zero_sums.c,
 * zero_offload.c, ...). */
#ifndef SHARDC_ZERO_H
#define SHARDC_ZERO_H

#include "ir.h"
#include "module.h"

/* The group ZeRO shards over: dp, or under context parallelism the dp x cp group (Megatron's
 * distributed optimizer: the cp ranks of a replica hold the same parameters), cp alone at dp 1.
 * deg: its size; axis: its collectives' mesh axis and the shards' split (RT_AX_DP; RT_AX_CP at
 * dp 1); with: its collectives' Attrs.mesh_with (1 << RT_AX_CP under dp x cp, else 0); inner: the
 * axis a shard is split over again after dp (Sharding.inner: RT_AX_CP under dp x cp, else -1), so
 * that rank (dp_i, cp_i) holds block dp_i x cp + cp_i, its index in the group. Decided once, in
 * zero_group. */
typedef struct {
  int deg;
  int8_t axis;
  uint8_t with;
  int8_t inner;
} ZeroGroup;

/* The group of the mesh mm (NULL: one rank). */
ZeroGroup zero_group(const MeshMap *mm);
/* Whether ZeRO-3 stores m's parameters split: stage 3 over a group of more than one rank (dp, dp x cp, or
 * cp alone at dp 1). The passes before pass_zero that treat ZeRO-3's parameters apart (wshadow: no
 * persistent bf16 copy; wcast: no per-layer casts) ask it here, so that they agree with pass_zero. */
bool zero_splits_params(const Module *m);
/* Whether a plan's backward layer loops leave their gradient reduce-scatters unwaited at the iteration's
 * end (passes/zero_defer.c: their readers moved after the loop, each waited in the next iteration):
 * ZeRO `zero` >= 2 over a group (dp x cp) of more than one rank; under pp stages too (their B, zb: W,
 * instructions' loops; the loops of one layer a stage or chunk the pass leaves).
 * passes/plan_model.c's memory and stall model asks it too (pp 1's loop and the stages' B, zb: W, loops). */
bool zero_defers_scatters(int zero, int group);
/* Whether loop r's body scatters can be waited in its next iteration: a repeat of two iterations or more
 * (a pipeline stage's or interleaved chunk's loop of one layer has none). */
bool zero_defer_loop(const Node *r);
/* Where zero_defers_scatters holds, whether the plan defers them: plan `defer_waits` `want` (Plan.defer_waits:
 * DEFER_ON yes, DEFER_OFF no; DEFER_AUTO unless the plan with them needs `total` bytes per rank (0: not
 * measured) over the device's `cap` (<= 0: unknown), or `lost`: they fit alone but not with the persistent
 * weight copies, which the driver's cost model has faster, Plan.fit.defer.lost). The one rule of
 * passes/zero_defer.c (the driver's compile's figures, Plan.fit.defer) and plan_model.c (its own memory
 * with them, against the capacity). */
bool zero_defer_taken(int want, double total, double cap, bool lost);
/* Module m's plan with both: whether its backward loops' scatter waits are deferred (the pass's and the
 * memory plan's question, passes/memplan.c: from the plan alone, so that a pass run on IR read back agrees). */
bool zero_defers_plan(const Module *m);
/* `defer_waits auto`'s why from Plan.fit (Module.defer.why where why_fit), as wshadow_auto_why. */
const char *zero_defer_auto_why(Module *m);

/* to: from's type with dim d split over the group (z.deg ways: over dp, then over z.inner). */
void zero_split_type(Value *to, const Value *from, int d, ZeroGroup z);
/* A sum all-reduce over the group exactly (over z.axis, with z.with). */
bool zero_is_group_sum(const Node *n, ZeroGroup z);
/* Removes member k (input and output) from a variadic all-reduce; the node goes when none is left. */
void zero_drop_member(Graph *g, Node *ar, int k);
/* ZeRO-2/3 under accumulation (passes/zero_sums.c): the layer gradient gr (output of the peeled
 * backward loop R2 in g, sharded along d) is summed as group shards, each micro-step's reduce-scattered
 * inside its backward loop. Returns gr retyped as the shard, or NULL (nothing changed). */
Value *zero_scatter_sums(Graph *g, Node *R2, Value *gr, int d, ZeroGroup z);
/* The same for a gradient all-reduced at the top (gr: the all-reduce's output in g): the
 * embedding's, the head's, the final norm's. Returns the shard that stands for gr, or NULL. */
/* (memo: the pass's ir_use_counts_outer memo, kept across its parameters; NULL: none) */
Value *zero_scatter_sums_top(Graph *g, Value *gr, int d, ZeroGroup z, IrUseMemo *memo);
/* True when v (a STATE or CONST source) is read by `u` only: its type may change in place. */
bool zero_only_reader(const Graph *g, const Value *v, const Node *u);
/* Plan `offload` (passes/zero_offload.c): every update of the top graph g on the host, the copies
 * around it; under bf16 the masters on the host. zero3: ZeRO-3 over dp with the weights' copies
 * not refused by hand (its casts of the stored shards may become the host-written copies). */
void zero_offload(Graph *g, bool zero3);
/* y = all_gather(x) over the group along d, typed `whole`, appended to g (placed by the caller). */
Value *zero_gather_new(Graph *g, Value *x, const Value *whole, int d, ZeroGroup z, SrcLoc loc);
/* y = shard_slice(x) over the group along d, placed at pos. */
Value *zero_slice_at(Graph *g, Value *x, int d, ZeroGroup z, int pos, SrcLoc loc);
/* n's position in g (it must be one of g's nodes). */
int zero_position(const Graph *g, const Node *n);

/* ZeRO-3's parameters stored split (passes/zero_gather.c). zero_gather_begin (g: the top graph) and zero_gather_end
 * bracket pass_zero's updates under stage 3: the bodies' captures (zero_captures_new) found once for them all, and
 * the top graph's readers index; memo: the pass's ir_use_counts_outer memo, whose lists the gathers' edits of a
 * layer loop's body keep (ir_use_memo_keep). */
void zero_gather_begin(Graph *g, IrUseMemo *memo);
void zero_gather_end(void);
/* The top graph's readers index (zero_gather.c; stage 3, between zero_gather_begin and zero_gather_end): the nodes
 * of g reading v, directly or in their bodies, in g's order (*r, their number), or -1 where it does not hold them
 * (g not the top graph, v not in it or left it). It is as the pass began: asked about a parameter's values and its
 * gradient's only, which no rewrite of another parameter changes the readers of. SHARDC_VERIFY=audit checks that
 * each node reading v is listed. */
int zero_readers(const Graph *g, const Value *v, const Node *const **r);
/* ir_count_uses(g, v) and ir_replace_uses(g, from, to) through the index where it holds the readers (from and to
 * then leave it). */
int zero_count_uses(const Graph *g, const Value *v);
void zero_replace_uses(Graph *g, Value *from, Value *to);
/* True when a repeat in g or in a body nested in it (the accumulation region's layer loops) reads p (or a
 * cast of it: bf16 compute) as one of its xs: p is a stacked layer parameter [L, ..] (asked under stage 3). */
bool zero_read_as_xs(const Graph *g, const Value *p);
/* Whether parameter p (updated by u) can be stored split along d: not when a repeat carries it, a result names
 * it, or it is under the persistence threshold (per layer when stacked). */
bool zero_can_split_param(const Graph *g, const Value *p, const Node *u, int d, bool stacked);
/* p stored split along d: every reader in g (but u) gathers it right before it reads it. */
void zero_split_param(Graph *g, Value *p, const Node *u, int d, ZeroGroup z);

/* ZeRO-1/2 with the persistent bf16 weight copies (passes/zero_master.c): whether the plan may store the
 * f32 masters split and gather the bf16 copies instead (stage 1 / 2, no offload); zero_master_split
 * then decides per parameter (one with a persistent copy, read in f32 by its update alone). */
bool zero_master_wanted(const Module *m);
/* Update u's f32 parameter stored split along d (the master shard) when compute reads only its bf16
 * copy; adds the bytes saved to *saved. False: nothing changed (zero.c's gathered f32 path). */
bool zero_master_split(Graph *g, Node *u, int d, ZeroGroup z, int64_t *saved);
/* After zero_master_split and the update's retyping: the copy's cast reads the updated shard and an
 * all-gather of that bf16 shard writes the whole copy (result "next:bf16:<param>"). */
void zero_master_gather_copy(Graph *g, Node *u, int d, ZeroGroup z);

/* passes/zero_coalesce.c's decision, which plan_model.c asks too: whether k collectives over a group of
 * `group` ranks (lat_s per ring step, overhead_s per call) are worth one, their pack and unpack copies
 * moving copy_bytes (read and written, at bytes_per_s); the latency saved is at most exposed_s (the
 * communication time not hidden behind computation where they are issued). `deferred`: the waits are
 * deferred to the next iteration (passes/zero_defer.c: ZeRO-2/3's backward scatters where
 * zero_defers_plan holds), so no overlap is lost and the copies cost only beyond the channel's time. */
bool zero_coalesce_pays(int k, int group, double lat_s, double overhead_s, double copy_bytes, double bytes_per_s,
                        double exposed_s, bool deferred);

/* Whether a run of reduce-scatters (n of them so far, run_bytes) takes the next one, of `bytes`, into the
 * one collective it is packed into: its first, or within cap. The one rule of zero_group_scatters and
 * zero.c's bucket_scatters, which plan_model.c's timing of a layer's scatters follows too. */
static inline bool zero_run_takes(int n, int64_t run_bytes, int64_t bytes, int64_t cap) {
  return n == 0 || run_bytes + bytes <= cap;
}

/* Groups the group's reduce-scatters of body b into runs of up to cap bytes, each where its last is ready. */
void zero_group_scatters(Graph *b, int64_t cap, ZeroGroup z);

/* The values each region body reads from the graphs around it, its nested bodies' included, found once per
 * body (passes/zero_captures.c). From arena a; zero_captures_free releases its map. */
typedef struct ZeroCaptures ZeroCaptures;
ZeroCaptures *zero_captures_new(Arena *a);
void zero_captures_free(ZeroCaptures *c);
/* Whether a node of body b, or of a body in it, reads p, a value of a graph around b. */
bool zero_captures_reads(ZeroCaptures *c, const Graph *b, const Value *p);
/* Whether a result of b, or of a body in it, is a value of a graph around that body (a capture yielded
 * unchanged; readers_can_gather's other question of a body that does not read p). */
bool zero_captures_yields_outer(ZeroCaptures *c, const Graph *b);
/* b's captures (*n of them): the values of the graphs around b that b, or a body in it, reads. */
const Value *const *zero_captures_list(ZeroCaptures *c, const Graph *b, int *n);

/* Nodes of graph g to go right before a reader (passes/zero_before.c), placed in one pass: recorded as they
 * are made (each then g's last node), placed by zero_before_place (which frees the record: it must be called). */
typedef struct {
  Graph *g;
  Node **anchor, **node; /* [n]: node goes right before anchor, in the order recorded */
  int n, cap;
} ZeroBefore;
void zero_before_add(ZeroBefore *d, Node *anchor, Node *x);
/* The nodes recorded for g and not placed yet (g's last ones; d NULL: 0). */
int zero_before_pending(const ZeroBefore *d, const Graph *g);
void zero_before_place(ZeroBefore *d);

#endif
