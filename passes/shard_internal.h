/* passes/shard_internal.h — what the files of the shard pass share (the pass's contract is
 * passes.h's pass_shard; how it works is in shard.c's header).
 *
 *   shard.c        the pass: the rewrite of graphs and REPEAT regions, dispatching to the rules
 *   shard_core.c   helpers, deciding parameters, redistribution (the only source of collectives)
 *   shard_rules.c  propagation rules of the generic ops (elementwise, matmul, shape ops,
 *                  reductions, norms, optimizer updates) and the seeds (sources)
 *   shard_tp.c     what only tensor/sequence parallelism needs: look-ahead for fused QKV
 *                  blocks, attention by heads (or replicated when tp does not divide them),
 *                  vocab-parallel embedding and cross-entropy
 *   shard_cp.c     what only context parallelism needs: the zigzag sequence seed, positions,
 *                  rope at positions, ring attention
 * Calls go one way: shard.c -> shard_rules.c -> shard_tp.c -> shard_cp.c -> shard_core.c.
 */
#ifndef SHARDC_SHARD_INTERNAL_H
#define SHARDC_SHARD_INTERNAL_H

#include "diag.h"
#include "infer.h"
#include "passes.h"
#include "ptrmap.h"

enum { ROLE_NONE, ROLE_BATCH, ROLE_SEQ };

/* What the pass knows about a value beyond its sharding. */
typedef struct {
  bool undecided;          /* a PARAM/STATE (or a body's view of one) whose sharding is not chosen yet */
  Value *param;            /* the top-level source this value views (itself for the source) */
  int lead;                /* stacked dims the source has in front of this value's dims */
  Value *via;              /* undecided: the value this one views or casts (a REPEAT's input, a
                              CAST's input), decided with it; NULL for the source */
  uint8_t role[IR_MAX_RANK]; /* ROLE_* per dim: batch and sequence dims of activations */
} VInfo;

typedef struct Redist {
  Sharding to;
  const Graph *g; /* where the redistributed value lives */
  Value *v;
  struct Redist *next;
} Redist;

typedef struct {
  Value *m, *st, *ls; /* global row max, global (sum-exp, target logit), settled (loss sum, count) */
  Value *count;       /* scalar: rows with a target, over every rank */
  Value *logits;      /* the local logits the parts were computed from */
  bool vocab;         /* logits split on the vocab dim */
  int vaxis;          /* that mesh axis */
} CeParts;

typedef struct {
  char text[96]; /* "1, 2, 4" */
} TpChoices;

typedef struct {
  Module *m;
  Arena *a;
  int deg[RT_AX_COUNT]; /* mesh degrees (Module.mesh) */
  int max_tp;           /* the largest tp offered in notes: devices per node (a tp group stays inside one) */
  bool sp;              /* sequence parallelism in tp regions (plan sp, tp > 1) */
  bool ok;              /* no user error reported */
  PtrMap info;  /* Value* -> VInfo* */
  PtrMap memo;  /* Value* -> Redist* */
  PtrMap subst; /* Value* -> Value*: a node's output replaced by another value */
  PtrMap ce;    /* logits Value* (original) -> CeParts* */
  PtrMap embed; /* index Value* -> the table Value* of the EMBED that reads it */
  PtrMap attn_repl; /* SDPA/ROPE Node* whose heads tp does not divide: attention stays replicated */
  PtrMap cp_pos;    /* Graph* -> this rank's positions of the sequence in it (shard_cp.c), made once per graph */
  Graph *g;     /* the graph being rebuilt: new nodes append here */
  Node **old;   /* its node list before the rebuild (for look-ahead) */
  int nold;
  SrcLoc loc;   /* of the node being rewritten: given to the nodes made for it */
} Sh;

/* ---- shard_core.c (calls none of the others) ---- */
VInfo *shard_info(Sh *s, const Value *v);
/* What n's input v became in the rebuilt graph (its substitute, or v). */
Value *shard_sub(Sh *s, Value *v);
/* The local shape of logical shape L under sharding h. */
Shape shard_local_of(const Sh *s, Shape L, const Sharding *h);
int shard_degree(const Sh *s, int ax);
/* Is mesh axis ax used to split any dim of h other than dim `except`? */
bool shard_axis_used(const Sharding *h, int ax, int except);
/* Logical dim d of v (local dims times the splitting degree). */
int64_t shard_ldim(const Sh *s, const Value *v, int d);
Shape shard_logical_shape(const Sh *s, const Value *v);
/* Can logical dim n be split over ax in `blocks` blocks? */
bool shard_divides(const Sh *s, int64_t n, int ax, int blocks);
/* Sets output i of n: sharding h, local shape from its (still logical) shape. */
void shard_set_out(Sh *s, Node *n, int i, Sharding h);
Sharding shard_repl(void);
void shard_copy_roles(Sh *s, Value *to, int tod, const Value *from, int fromd);
/* Chooses the sharding of an undecided value (and of the source it views). */
void shard_decide(Sh *s, Value *v, Sharding h);
void shard_decide_repl(Sh *s, Value *v);
/* v redistributed to sharding `to` (memoized per graph). */
Value *shard_redist(Sh *s, Value *v, Sharding to);
/* v without partial sums. Under sp a tp-Partial activation with a sequence dim is
 * reduce-scattered along it rather than all-reduced. */
Value *shard_settle(Sh *s, Value *v);
Value *shard_gather_dim(Sh *s, Value *v, int d);
/* v with its inner splits (sp inside cp, Sharding.inner) gathered: what the rules that do not read
 * `inner` are given (shard.c). */
Value *shard_gather_inner(Sh *s, Value *v);
/* Reports that tp does not divide `what` (n), with a note `fix` when given. */
void shard_error_tp(Sh *s, const char *what, int64_t n, const char *fix);

/* ---- shard_rules.c ---- */
void shard_rule_ew(Sh *s, Node *n);
void shard_rule_matmul(Sh *s, Node *n);
/* Reshape: dims grouped by equal products; a group keeps a split of its first
 * input dim on its first output dim when the degree divides it; other splits in a
 * changed group are gathered first. */
void shard_rule_reshape(Sh *s, Node *n);
void shard_rule_transpose(Sh *s, Node *n);
/* slice / pad along a split axis: whole blocks map to local blocks. */
void shard_rule_slice_pad(Sh *s, Node *n);
void shard_rule_concat(Sh *s, Node *n);
/* reduce_sum to a smaller shape: summed split dims become partial. */
void shard_rule_reduce_bcast(Sh *s, Node *n);
void shard_rule_full_reduce(Sh *s, Node *n);
void shard_rule_norm(Sh *s, Node *n);
void shard_rule_update(Sh *s, Node *n);
void shard_rule_source(Sh *s, Node *n);

/* ---- shard_tp.c ---- */
/* How many equal blocks the uses of v cut `axis` into (1: none found). Follows
 * elementwise ops that keep the axis. */
int shard_slice_blocks(const Sh *s, const Value *v, int axis, int depth);
/* The tp degrees (powers of two up to s->max_tp) that divide n and n2, for notes; written to buf. */
const char *shard_tp_choices(const Sh *s, int64_t n, int64_t n2, TpChoices *buf);
/* Finds attention tp cannot split by heads; it runs replicated on every tp rank (the
 * MLP, embedding and head stay split), with a warning naming the tp that would split it. */
void shard_scan_attention(Sh *s, Graph *g);
/* Does v flow (through elementwise ops, slices and reshapes) into replicated attention? */
bool shard_feeds_repl_attn(const Sh *s, const Value *v, int depth);
/* Does v come (through the same kinds of op) from replicated attention? */
bool shard_from_repl_attn(const Sh *s, const Value *v, int depth);
void shard_rule_rope(Sh *s, Node *n);
void shard_rule_sdpa(Sh *s, Node *n);
void shard_rule_embed(Sh *s, Node *n);
void shard_rule_embed_bwd(Sh *s, Node *n);
/* cross-entropy over logits split on rows and/or vocab: in parts, never gathered. */
void shard_rule_ce(Sh *s, Node *n);
void shard_rule_ce_bwd(Sh *s, Node *n);

/* ---- shard_cp.c ---- */
bool shard_cp_on(const Sh *s);
/* A token input's sharding h gains its sequence dim (1) over cp in zigzag order (error when 2 cp does not divide it). */
void shard_cp_seed(Sh *s, Node *n, Sharding *h);
/* A q/k/v-like target t with its sequence dim (1) over cp, when cp is on. */
Sharding shard_cp_seq(const Sh *s, Sharding t);
/* rope (input redistributed) on a cp-split sequence: replaced by rope_at this rank's positions. */
void shard_cp_rope(Sh *s, Node *n);
/* sdpa / sdpa_bwd (inputs redistributed, heads local) replaced by ring attention; lsh: the lse's sharding. */
void shard_cp_sdpa(Sh *s, Node *n, Sharding lsh);

#endif
