/* passes/shard.c — data, tensor and sequence parallelism by sharding propagation.
 *
 * Input: the whole step graph (forward, backward, optimizer) on logical shapes.
 * Output: one SPMD per-rank program: every Value.shape is the rank's local shape,
 * Value.sharding says how it relates to the logical tensor, and the collectives
 * that make the per-rank program compute the logical one are explicit nodes.
 *
 * How. Nodes are visited in order (bodies of REPEATs when their node is reached).
 * Each op has a rule that, from its inputs' shardings, picks the output's sharding
 * and redistributes inputs where they disagree; redistribution (`redist`) is the
 * one place collectives come from:
 *   Partial(a) -> split on d over a  reduce_scatter      (sp: row-parallel output)
 *   Partial(a) -> not split by a     all_reduce          (one per Megatron block)
 *   split on d -> not split          all_gather
 *   not split  -> split on d         shard_slice         (free: a local slice)
 * Nothing names layers. Seeds are few: token inputs split their batch dim over dp;
 * a parameter's sharding is chosen where it is first used —
 *   - matmul weight, activation not split on k: columns over tp (its output is
 *     split, the elementwise ops after it keep that), in `blocks` equal blocks when
 *     the output is later cut in equal slices (a fused QKV keeps each rank's q, k
 *     and v heads together);
 *   - matmul weight, activation split on k over tp: rows (the output is Partial: one
 *     all-reduce settles a Megatron MLP or attention block);
 *   - embedding table indexed by tokens: rows over tp (vocab-parallel; the output is
 *     Partial); a table indexed by positions stays replicated;
 *   - anything else (norm weights, biases after a row split, ...): replicated or the
 *     other operand's sharding.
 * Backward and optimizer need no rules of their own: they are matmuls, reductions
 * and elementwise ops too, so a replicated weight's gradient computed from replicated
 * activations is replicated (never double-counted), a gradient summed over a batch
 * split by dp is Partial(dp) — settled by the all-reduce that is data parallelism —
 * and a norm's gradient computed on sequence shards is Partial(tp).
 * Cross-entropy over vocab-split (or row-split) logits becomes ce_max, an all-reduce
 * max, ce_sums, an all-reduce sum, ce_loss and ce_grad: the logits are never gathered.
 *
 * Sequence parallelism (plan `sp`): a tp-Partial value with a sequence dim is settled
 * by reduce-scatter along that dim instead of all-reduce, so norms, residuals and
 * dropout-free elementwise work run on sequence shards; the next column-split matmul
 * finds tp on both its activation's sequence dim and its weight's columns and
 * all-gathers the activation (the same in backward).
 */
#include <string.h>

#include "diag.h"
#include "infer.h"
#include "../ir/mesh.h"
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
  Graph *g;     /* the graph being rebuilt: new nodes append here */
  Node **old;   /* its node list before the rebuild (for look-ahead) */
  int nold;
  SrcLoc loc;   /* of the node being rewritten: given to the nodes made for it */
} Sh;

/* ---- small helpers -------------------------------------------------------------------- */

static VInfo *info(Sh *s, const Value *v) {
  intptr_t p;
  if (ptrmap_get(&s->info, v, &p)) return (VInfo *)p;
  VInfo *vi = ARENA_NEW(s->a, VInfo);
  ptrmap_put(&s->info, v, (intptr_t)vi);
  return vi;
}

static Value *sub(Sh *s, Value *v) {
  intptr_t p;
  while (ptrmap_get(&s->subst, v, &p)) v = (Value *)p;
  return v;
}

static int degree(const Sh *s, int ax) { return ax >= 0 && ax < RT_AX_COUNT ? s->deg[ax] : 1; }

/* Mesh axes of degree 1 never split anything: drop them. */
static Sharding norm_sh(const Sh *s, Sharding h) {
  for (int d = 0; d < IR_MAX_RANK; d++) {
    if (h.split[d] >= 0 && degree(s, h.split[d]) <= 1) h.split[d] = -1;
    if (h.split[d] < 0 || h.blocks[d] <= 1) h.blocks[d] = 0;
  }
  for (int a = 0; a < RT_AX_COUNT; a++)
    if (degree(s, a) <= 1) h.partial &= (uint8_t)~(1u << a);
  return h;
}

static bool sh_eq(const Sharding *a, const Sharding *b) {
  for (int d = 0; d < IR_MAX_RANK; d++)
    if (a->split[d] != b->split[d] || (a->split[d] >= 0 && (a->blocks[d] > 1 ? a->blocks[d] : 1) !=
                                                               (b->blocks[d] > 1 ? b->blocks[d] : 1)))
      return false;
  return a->partial == b->partial;
}

/* Is mesh axis ax used to split any dim of h other than dim `except`? */
static bool axis_used(const Sharding *h, int ax, int except) {
  for (int d = 0; d < IR_MAX_RANK; d++)
    if (d != except && h->split[d] == ax) return true;
  return false;
}

/* Logical dim d of v (local dims times the splitting degree). */
static int64_t ldim(const Sh *s, const Value *v, int d) {
  int a = v->sharding.split[d];
  return v->shape.dim[d] * (a >= 0 ? degree(s, a) : 1);
}

static Shape logical_shape(const Sh *s, const Value *v) {
  Shape r = v->shape;
  for (int d = 0; d < r.rank; d++) r.dim[d] = ldim(s, v, d);
  return r;
}

/* Local shape of logical shape L under h. */
static Shape local_of(const Sh *s, Shape L, const Sharding *h) {
  for (int d = 0; d < L.rank; d++)
    if (h->split[d] >= 0) L.dim[d] /= degree(s, h->split[d]);
  return L;
}

/* Can logical dim n be split over ax in `blocks` blocks? */
static bool divides(const Sh *s, int64_t n, int ax, int blocks) {
  int64_t q = (int64_t)degree(s, ax) * (blocks > 1 ? blocks : 1);
  return n > 0 && n % q == 0;
}

/* Sets output i of n: sharding h, local shape from its (still logical) shape. */
static void set_out(Sh *s, Node *n, int i, Sharding h) {
  Value *v = n->out[i];
  h = norm_sh(s, h);
  v->sharding = h;
  v->shape = local_of(s, v->shape, &h);
}

static Sharding repl(void) { return ir_replicated(); }

static void copy_roles(Sh *s, Value *to, int tod, const Value *from, int fromd) {
  if (tod < 0 || fromd < 0 || tod >= to->shape.rank || fromd >= from->shape.rank) return;
  VInfo *fi = info(s, from);
  if (fi->role[fromd]) info(s, to)->role[tod] = fi->role[fromd];
}

/* ---- deciding a parameter's sharding ---------------------------------------------------- */

/* Chooses the sharding of an undecided value (and of the source it views). */
static void decide(Sh *s, Value *v, Sharding h) {
  VInfo *vi = info(s, v);
  if (!vi->undecided) return;
  h = norm_sh(s, h);
  h.partial = 0;
  Shape L = v->shape; /* undecided values still have their logical shape */
  v->sharding = h;
  v->shape = local_of(s, L, &h);
  vi->undecided = false;
  /* what v views or casts, up to the source: the same sharding on the same dims (their
   * stacked dims in front stay whole) */
  Value *u = vi->via;
  if (u && info(s, u)->undecided) {
    int shift = vi->lead - info(s, u)->lead;
    Sharding uh = repl();
    for (int d = 0; d + shift < IR_MAX_RANK && d < v->shape.rank; d++) {
      uh.split[d + shift] = h.split[d];
      uh.blocks[d + shift] = h.blocks[d];
    }
    decide(s, u, uh);
  }
}

static void decide_repl(Sh *s, Value *v) {
  if (info(s, v)->undecided) decide(s, v, repl());
}

/* ---- redistribution: the only source of collectives --------------------------------------- */

static Value *emit1(Sh *s, OpKind op, Value *x, DType dt, Shape local, Sharding h, const Attrs *a) {
  Value *y = ir_emit(s->g, op, x ? 1 : 0, x ? &x : NULL, dt, local, a, s->loc);
  y->sharding = h;
  VInfo *xi = x ? info(s, x) : NULL;
  if (xi) memcpy(info(s, y)->role, xi->role, sizeof xi->role);
  return y;
}

static Value *coll(Sh *s, OpKind op, Value *x, int ax, int axis, int blocks, ReduceOp red, Sharding to) {
  Attrs a = {0};
  a.mesh_axis = ax;
  a.axis = axis;
  a.blocks = blocks > 1 ? blocks : 0;
  a.reduce = red;
  Shape L = logical_shape(s, x);
  to = norm_sh(s, to);
  return emit1(s, op, x, x->dtype, local_of(s, L, &to), to, &a);
}

/* v redistributed to sharding `to` (memoized per graph). */
static Value *redist(Sh *s, Value *v, Sharding to) {
  to = norm_sh(s, to);
  if (info(s, v)->undecided) {
    decide(s, v, to);
    return v;
  }
  if (sh_eq(&v->sharding, &to)) return v;
  intptr_t p;
  Redist *head = ptrmap_get(&s->memo, v, &p) ? (Redist *)p : NULL;
  for (Redist *r = head; r; r = r->next)
    if (r->g == s->g && sh_eq(&r->to, &to)) return r->v;
  Value *x = v;
  Sharding cur = v->sharding;
  /* 1. settle partial sums */
  for (int a = 0; a < RT_AX_COUNT; a++) {
    if (!(cur.partial & (1u << a)) || (to.partial & (1u << a))) continue;
    cur.partial &= (uint8_t)~(1u << a);
    int d = -1;
    for (int e = 0; e < x->shape.rank; e++)
      if (to.split[e] == a && cur.split[e] < 0 && !axis_used(&cur, a, -1)) d = e;
    if (d >= 0) {
      cur.split[d] = (int8_t)a;
      cur.blocks[d] = to.blocks[d];
      x = coll(s, OP_REDUCE_SCATTER, x, a, d, to.blocks[d], RED_SUM, cur);
    } else {
      x = coll(s, OP_ALL_REDUCE, x, a, 0, 0, RED_SUM, cur);
    }
  }
  if (cur.partial & ~to.partial) die("shard: cannot settle partial 0x%x", cur.partial);
  if (to.partial & ~cur.partial) die("shard: cannot make a value partial");
  /* 2. gather dims split differently from the target */
  for (int d = 0; d < x->shape.rank; d++) {
    int a = cur.split[d];
    if (a < 0) continue;
    int bt = to.blocks[d] > 1 ? to.blocks[d] : 1, bc = cur.blocks[d] > 1 ? cur.blocks[d] : 1;
    if (to.split[d] == a && bt == bc) continue;
    int blocks = cur.blocks[d];
    cur.split[d] = -1;
    cur.blocks[d] = 0;
    x = coll(s, OP_ALL_GATHER, x, a, d, blocks, RED_SUM, cur);
  }
  /* 3. slice dims the target splits (no communication) */
  for (int d = 0; d < x->shape.rank; d++) {
    int a = to.split[d];
    if (a < 0 || cur.split[d] == a) continue;
    cur.split[d] = (int8_t)a;
    cur.blocks[d] = to.blocks[d];
    x = coll(s, OP_SHARD_SLICE, x, a, d, to.blocks[d], RED_SUM, cur);
  }
  Redist *r = ARENA_NEW(s->a, Redist);
  *r = (Redist){to, s->g, x, head};
  ptrmap_put(&s->memo, v, (intptr_t)r);
  return x;
}

/* v without partial sums. Under sp a tp-Partial activation with a sequence dim is
 * reduce-scattered along it rather than all-reduced. */
static Value *settle(Sh *s, Value *v) {
  if (info(s, v)->undecided) return v;
  Sharding to = v->sharding;
  if (!to.partial) return v;
  if (s->sp && (to.partial & (1u << RT_AX_TP)) && !axis_used(&to, RT_AX_TP, -1)) {
    VInfo *vi = info(s, v);
    for (int d = 0; d < v->shape.rank; d++)
      if (vi->role[d] == ROLE_SEQ && to.split[d] < 0 && divides(s, ldim(s, v, d), RT_AX_TP, 1)) {
        to.split[d] = RT_AX_TP;
        break;
      }
  }
  to.partial = 0;
  return redist(s, v, to);
}

/* The sharding of v with the dims in mask[d] == true gathered (no partial). */
static Sharding without(const Value *v, const bool *gather) {
  Sharding h = v->sharding;
  h.partial = 0;
  for (int d = 0; d < v->shape.rank && d < IR_MAX_RANK; d++)
    if (gather[d]) {
      h.split[d] = -1;
      h.blocks[d] = 0;
    }
  return h;
}

static Value *gather_dim(Sh *s, Value *v, int d) {
  if (d < 0 || d >= v->shape.rank || v->sharding.split[d] < 0) return v;
  bool g[IR_MAX_RANK] = {0};
  g[d] = true;
  Sharding h = without(v, g);
  h.partial = v->sharding.partial;
  return redist(s, v, h);
}

/* ---- look-ahead: equal slices of a column-split output --------------------------------- */

/* How many equal blocks the uses of v cut `axis` into (1: none found). Follows
 * elementwise ops that keep the axis. */
static int slice_blocks(const Sh *s, const Value *v, int axis, int depth) {
  int64_t n = v->shape.dim[axis];
  for (int i = 0; i < s->nold; i++) {
    const Node *u = s->old[i];
    bool uses = false;
    for (int j = 0; j < u->nin; j++) uses |= u->in[j] == v;
    if (!uses) continue;
    if (u->op == OP_SLICE && u->a.axis == axis && u->a.len > 0 && n % u->a.len == 0 && u->a.start % u->a.len == 0 &&
        u->a.len < n)
      return (int)(n / u->a.len);
    if ((ir_ops[u->op].flags & F_EW) && depth < 4) {
      const Value *o = u->out[0];
      int oa = axis + o->shape.rank - v->shape.rank;
      if (oa >= 0 && o->shape.dim[oa] == n) {
        int b = slice_blocks(s, o, oa, depth + 1);
        if (b > 1) return b;
      }
    }
  }
  return 1;
}

/* The tp degrees (powers of two up to s->max_tp) that divide n and n2, for notes; written to buf. */
static const char *tp_choices(const Sh *s, int64_t n, int64_t n2, TpChoices *buf) {
  int k = 0;
  buf->text[0] = 0;
  for (int t = 1; t <= s->max_tp && k < 80; t *= 2)
    if (n % t == 0 && n2 % t == 0)
      k += snprintf(buf->text + k, sizeof buf->text - (size_t)k, "%s%d", k ? ", " : "", t);
  return buf->text;
}

/* ---- attention whose heads tp does not divide ------------------------------------------ */

static bool heads_split(const Sh *s, const Node *n) {
  int t = s->deg[RT_AX_TP];
  return n->a.heads % t == 0 && (n->op == OP_ROPE || n->a.kv_heads % t == 0);
}

/* Finds attention tp cannot split by heads; it runs replicated on every tp rank (the
 * MLP, embedding and head stay split), with a warning naming the tp that would split it. */
static void scan_attention(Sh *s, Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->body) scan_attention(s, n->body);
    if ((n->op != OP_SDPA && n->op != OP_ROPE) || heads_split(s, n)) continue;
    ptrmap_put(&s->attn_repl, n, 1);
    if (n->op != OP_SDPA) continue;
    warning_at(n->loc, "attention has %d heads and %d kv heads: tp %d does not divide them, so attention runs "
                       "replicated on every tp rank (the MLP, the embedding and the head are split)",
               n->a.heads, n->a.kv_heads, s->deg[RT_AX_TP]);
    TpChoices ch;
    note("tp that splits the heads too: %s", tp_choices(s, n->a.heads, n->a.kv_heads, &ch));
  }
}

static bool in_repl_attn(const Sh *s, const Node *n) {
  intptr_t p;
  return ptrmap_get(&s->attn_repl, n, &p);
}

/* Does v flow (through elementwise ops, slices and reshapes) into replicated attention? */
static bool feeds_repl_attn(const Sh *s, const Value *v, int depth) {
  if (depth > 4) return false;
  for (int i = 0; i < s->nold; i++) {
    const Node *u = s->old[i];
    bool uses = false;
    for (int j = 0; j < u->nin; j++) uses |= u->in[j] == v;
    if (!uses) continue;
    if (in_repl_attn(s, u)) return true;
    if (((ir_ops[u->op].flags & F_EW) || u->op == OP_SLICE || u->op == OP_RESHAPE) && feeds_repl_attn(s, u->out[0], depth + 1))
      return true;
  }
  return false;
}

/* Does v come (through the same kinds of op) from replicated attention? */
static bool from_repl_attn(const Sh *s, const Value *v, int depth) {
  const Node *d = v->def;
  if (in_repl_attn(s, d)) return true;
  if (depth > 4 || !((ir_ops[d->op].flags & F_EW) || d->op == OP_RESHAPE || d->op == OP_TRANSPOSE)) return false;
  for (int j = 0; j < d->nin; j++)
    if (from_repl_attn(s, d->in[j], depth + 1)) return true;
  return false;
}

/* ---- rules ---------------------------------------------------------------------------- */

static void error_tp(Sh *s, const char *what, int64_t n, const char *fix) {
  error_at(s->loc, "%s (%lld) is not divisible by tp %d", what, (long long)n, s->deg[RT_AX_TP]);
  if (fix) note("%s", fix);
  s->ok = false;
}

static bool linear_ok(OpKind op, int i) {
  switch (op) {
  case OP_NEG: case OP_SCALE: case OP_CAST: return true;
  case OP_MUL: return true;
  case OP_DIV: return i == 0;
  default: return false;
  }
}

static void rule_ew(Sh *s, Node *n) {
  Value *o = n->out[0];
  int r = o->shape.rank;
  if (n->op == OP_CAST && info(s, n->in[0])->undecided) {
    /* a parameter's compute copy (bf16): decided with it, where the copy is first used */
    VInfo *xi = info(s, n->in[0]), *oi = info(s, o);
    oi->undecided = true;
    oi->param = xi->param;
    oi->lead = xi->lead;
    oi->via = n->in[0];
    return;
  }
  /* partial sums: kept through linear ops, settled otherwise */
  uint8_t pmask = 0;
  int npart = 0;
  for (int i = 0; i < n->nin; i++)
    if (!info(s, n->in[i])->undecided && n->in[i]->sharding.partial) npart++, pmask = n->in[i]->sharding.partial;
  bool keep = false;
  if (npart > 0) {
    if (n->op == OP_ADD || n->op == OP_SUB) {
      keep = npart == n->nin;
      for (int i = 0; keep && i < n->nin; i++) keep = n->in[i]->sharding.partial == pmask;
    } else if (npart == 1) {
      for (int i = 0; i < n->nin; i++)
        if (!info(s, n->in[i])->undecided && n->in[i]->sharding.partial) keep = linear_ok(n->op, i);
    }
  }
  if (!keep) {
    pmask = 0;
    for (int i = 0; i < n->nin; i++) n->in[i] = settle(s, n->in[i]);
  }
  Sharding out = repl();
  out.partial = pmask;
  for (int d = 0; d < r; d++) {
    for (int i = 0; i < n->nin; i++) {
      Value *x = n->in[i];
      int xd = d - (r - x->shape.rank);
      if (xd < 0 || info(s, x)->undecided) continue;
      int a = x->sharding.split[xd];
      if (a < 0 || ldim(s, x, xd) != o->shape.dim[d] || axis_used(&out, a, d)) continue;
      out.split[d] = (int8_t)a;
      out.blocks[d] = x->sharding.blocks[xd];
      break;
    }
    for (int i = 0; i < n->nin; i++) {
      int xd = d - (r - n->in[i]->shape.rank);
      if (xd >= 0 && !info(s, n->in[i])->undecided && info(s, n->in[i])->role[xd]) {
        info(s, o)->role[d] = info(s, n->in[i])->role[xd];
        break;
      }
    }
  }
  for (int i = 0; i < n->nin; i++) {
    Value *x = n->in[i];
    Sharding t = repl();
    t.partial = keep ? x->sharding.partial : 0;
    int off = r - x->shape.rank;
    for (int xd = 0; xd < x->shape.rank; xd++) {
      bool full = info(s, x)->undecided ? x->shape.dim[xd] == o->shape.dim[xd + off] : ldim(s, x, xd) == o->shape.dim[xd + off];
      if (full && o->shape.dim[xd + off] > 1) {
        t.split[xd] = out.split[xd + off];
        t.blocks[xd] = out.blocks[xd + off];
      }
    }
    n->in[i] = redist(s, x, t);
  }
  set_out(s, n, 0, out);
}

/* matmul dims of an operand: (m or n, k) positions. */
static void mm_dims(const Value *v, bool t, bool is_b, int *mn, int *k) {
  int r = v->shape.rank;
  if (!is_b) {
    *mn = t ? r - 1 : r - 2;
    *k = t ? r - 2 : r - 1;
  } else {
    *k = t ? r - 1 : r - 2;
    *mn = t ? r - 2 : r - 1;
  }
}

static void rule_matmul(Sh *s, Node *n) {
  Value *A = n->in[0], *B = n->in[1], *o = n->out[0];
  int am, ak, bn, bk;
  mm_dims(A, n->a.ta, false, &am, &ak);
  mm_dims(B, n->a.tb, true, &bn, &bk);
  decide_repl(s, A);
  /* partial sums: linear in each operand alone */
  if (A->sharding.partial && !info(s, B)->undecided && B->sharding.partial) B = settle(s, B);
  if (info(s, B)->undecided) {
    Sharding h = repl();
    int tp = RT_AX_TP;
    int64_t K = B->shape.dim[bk], N = B->shape.dim[bn];
    if (A->sharding.split[ak] == tp) {
      int bl = A->sharding.blocks[ak];
      if (divides(s, K, tp, bl)) {
        h.split[bk] = (int8_t)tp;
        h.blocks[bk] = (uint8_t)bl;
      }
    } else if (s->deg[tp] > 1 && B->shape.rank == 2 && !feeds_repl_attn(s, o, 0) && !from_repl_attn(s, A, 0)) {
      int bl = slice_blocks(s, o, o->shape.rank - 1, 0);
      if (!divides(s, N, tp, bl)) {
        char fix[160];
        TpChoices ch;
        snprintf(fix, sizeof fix, "a column-parallel weight needs its %s%lld columns split %d ways; use tp %s",
                 bl > 1 ? "blocks of " : "", (long long)(bl > 1 ? N / bl : N), s->deg[tp],
                 tp_choices(s, bl > 1 ? N / bl : N, bl > 1 ? N / bl : N, &ch));
        error_tp(s, "the weight's output dim", N, fix);
        decide_repl(s, B);
      } else {
        h.split[bn] = (int8_t)tp;
        h.blocks[bn] = (uint8_t)(bl > 1 ? bl : 0);
      }
    }
    decide(s, B, h);
  }
  /* contraction dim */
  int ka = A->sharding.split[ak], kb = B->sharding.split[bk];
  Sharding ta = A->sharding, tb = B->sharding;
  ta.partial = tb.partial = 0;
  int kx = -1;
  int kbl = 0;
  if (ka >= 0 && ka == kb && A->sharding.blocks[ak] == B->sharding.blocks[bk]) {
    kx = ka;
    kbl = A->sharding.blocks[ak];
  } else if (ka >= 0 && !axis_used(&B->sharding, ka, bk)) {
    kx = ka;
    kbl = A->sharding.blocks[ak];
  } else if (kb >= 0 && !axis_used(&A->sharding, kb, ak)) {
    kx = kb;
    kbl = B->sharding.blocks[bk];
  }
  ta.split[ak] = tb.split[bk] = (int8_t)kx;
  ta.blocks[ak] = tb.blocks[bk] = (uint8_t)(kx >= 0 ? kbl : 0);
  /* output dims: A's leading and m, B's n; an axis used twice gathers A's dim */
  Sharding out = repl();
  int r = o->shape.rank;
  int lead = A->shape.rank - 2;
  for (int d = 0; d < lead; d++) {
    out.split[d] = ta.split[d];
    out.blocks[d] = ta.blocks[d];
  }
  out.split[r - 2] = ta.split[am];
  out.blocks[r - 2] = ta.blocks[am];
  int na = tb.split[bn];
  if (na >= 0) {
    for (int d = 0; d < r - 1; d++)
      if (out.split[d] == na) {
        int ad = d < lead ? d : am;
        ta.split[ad] = -1;
        ta.blocks[ad] = 0;
        out.split[d] = -1;
        out.blocks[d] = 0;
      }
    if (kx == na) { /* k and n on one axis: gather the activation's k instead */
      ta.split[ak] = tb.split[bk] = -1;
      ta.blocks[ak] = tb.blocks[bk] = 0;
      kx = -1;
    }
  }
  if (kx >= 0)
    for (int d = 0; d < r - 1; d++)
      if (out.split[d] == kx) { /* the k axis also splits A's rows: gather those */
        int ad = d < lead ? d : am;
        ta.split[ad] = -1;
        out.split[d] = -1;
      }
  out.split[r - 1] = tb.split[bn];
  out.blocks[r - 1] = tb.blocks[bn];
  /* B's own leading dims (batched matmuls) follow A's */
  int blead = B->shape.rank - 2;
  for (int d = 0; d < blead; d++) {
    int od = lead - blead + d;
    tb.split[d] = od >= 0 ? ta.split[od] : -1;
    tb.blocks[d] = od >= 0 ? ta.blocks[od] : 0;
  }
  ta.partial = A->sharding.partial;
  tb.partial = B->sharding.partial;
  if (kx >= 0 && (ta.partial | tb.partial) & (1u << kx)) { /* a partial over the k axis cannot stay */
    A = settle(s, A);
    B = settle(s, B);
    ta.partial = A->sharding.partial;
    tb.partial = B->sharding.partial;
  }
  n->in[0] = redist(s, A, ta);
  n->in[1] = redist(s, B, tb);
  out.partial = (uint8_t)(ta.partial | tb.partial | (kx >= 0 ? 1u << kx : 0));
  for (int d = 0; d < lead; d++) copy_roles(s, o, d, A, d);
  copy_roles(s, o, r - 2, A, am);
  copy_roles(s, o, r - 1, B, bn);
  set_out(s, n, 0, out);
}

/* Reshape: dims grouped by equal products; a group keeps a split of its first
 * input dim on its first output dim when the degree divides it; other splits in a
 * changed group are gathered first. */
static void rule_reshape(Sh *s, Node *n) {
  Value *x = n->in[0], *o = n->out[0];
  decide_repl(s, x);
  Shape X = logical_shape(s, x), Y = o->shape;
  Sharding need = x->sharding, out = repl();
  out.partial = x->sharding.partial;
  int i = 0, j = 0;
  while (i < X.rank || j < Y.rank) {
    int i0 = i, j0 = j;
    int64_t px = i < X.rank ? X.dim[i++] : 1, py = j < Y.rank ? Y.dim[j++] : 1;
    while (px != py) {
      if (px < py && i < X.rank) px *= X.dim[i++];
      else if (py < px && j < Y.rank) py *= Y.dim[j++];
      else break;
    }
    /* absorb trailing size-1 dims into the group */
    while (i < X.rank && X.dim[i] == 1 && (j >= Y.rank || Y.dim[j] != 1)) i++;
    while (j < Y.rank && Y.dim[j] == 1 && (i >= X.rank || X.dim[i] != 1)) j++;
    bool same = i - i0 == 1 && j - j0 == 1;
    for (int d = i0; d < i; d++) {
      int a = x->sharding.split[d];
      if (a < 0) continue;
      bool keep = false;
      if (same) keep = true;
      else if (d == i0 && x->sharding.blocks[d] <= 1 && j > j0 && divides(s, Y.dim[j0], a, 1)) keep = true;
      if (keep) {
        out.split[j0] = (int8_t)a;
        out.blocks[j0] = same ? x->sharding.blocks[d] : 0;
      } else {
        need.split[d] = -1;
        need.blocks[d] = 0;
      }
    }
    if (same) copy_roles(s, o, j0, x, i0);
    else if (j > j0 && i > i0) copy_roles(s, o, j0, x, i0);
  }
  n->in[0] = redist(s, x, need);
  set_out(s, n, 0, out);
}

static void rule_transpose(Sh *s, Node *n) {
  Value *x = n->in[0];
  decide_repl(s, x);
  Sharding h = x->sharding;
  int r = x->shape.rank;
  int8_t t = h.split[r - 1];
  h.split[r - 1] = h.split[r - 2];
  h.split[r - 2] = t;
  uint8_t b = h.blocks[r - 1];
  h.blocks[r - 1] = h.blocks[r - 2];
  h.blocks[r - 2] = b;
  copy_roles(s, n->out[0], r - 1, x, r - 2);
  copy_roles(s, n->out[0], r - 2, x, r - 1);
  for (int d = 0; d < r - 2; d++) copy_roles(s, n->out[0], d, x, d);
  set_out(s, n, 0, h);
}

/* slice / pad along a split axis: whole blocks map to local blocks. */
static void rule_slice_pad(Sh *s, Node *n) {
  Value *x = n->in[0];
  decide_repl(s, x);
  int ax = n->a.axis, a = x->sharding.split[ax];
  for (int d = 0; d < x->shape.rank; d++) copy_roles(s, n->out[0], d, x, d);
  Sharding h = x->sharding;
  if (a >= 0) {
    int64_t N = ldim(s, x, ax), nb = N / (x->sharding.blocks[ax] > 1 ? x->sharding.blocks[ax] : 1);
    int t = degree(s, a);
    bool ok;
    if (n->op == OP_SLICE) ok = n->a.start % nb == 0 && n->a.len % nb == 0 && n->a.len > 0;
    else ok = n->a.start % nb == 0 && n->a.len % nb == 0;
    if (ok) {
      int64_t outn = n->op == OP_SLICE ? n->a.len : n->a.len;
      h.blocks[ax] = (uint8_t)(outn / nb > 1 ? outn / nb : 0);
      n->a.start = n->a.start / nb * (nb / t);
      n->a.len = n->a.len / t;
      set_out(s, n, 0, h);
      return;
    }
    x = gather_dim(s, x, ax);
    n->in[0] = x;
    h = x->sharding;
  }
  set_out(s, n, 0, h);
}

static void rule_concat(Sh *s, Node *n) {
  int ax = n->a.axis;
  for (int i = 0; i < n->nin; i++) decide_repl(s, n->in[i]);
  uint8_t pm = n->in[0]->sharding.partial;
  bool samep = true;
  for (int i = 0; i < n->nin; i++) samep &= n->in[i]->sharding.partial == pm;
  if (!samep)
    for (int i = 0; i < n->nin; i++) n->in[i] = settle(s, n->in[i]);
  Value *x0 = n->in[0];
  int a = x0->sharding.split[ax];
  int64_t nb = 0;
  int blocks = 0;
  bool split_ok = a >= 0;
  for (int i = 0; i < n->nin && split_ok; i++) {
    Value *x = n->in[i];
    int bl = x->sharding.blocks[ax] > 1 ? x->sharding.blocks[ax] : 1;
    int64_t b = ldim(s, x, ax) / bl;
    if (x->sharding.split[ax] != a || (nb && b != nb)) split_ok = false;
    nb = b;
    blocks += bl;
  }
  Sharding h = x0->sharding;
  if (!samep) h.partial = 0;
  if (!split_ok) {
    h.split[ax] = -1;
    h.blocks[ax] = 0;
  } else {
    h.blocks[ax] = (uint8_t)(blocks > 1 ? blocks : 0);
  }
  for (int i = 0; i < n->nin; i++) {
    Sharding t = h;
    t.partial = n->in[i]->sharding.partial;
    t.blocks[ax] = split_ok ? n->in[i]->sharding.blocks[ax] : 0;
    n->in[i] = redist(s, n->in[i], t);
  }
  for (int d = 0; d < x0->shape.rank; d++) copy_roles(s, n->out[0], d, x0, d);
  set_out(s, n, 0, h);
}

/* reduce_sum to a smaller shape: summed split dims become partial. */
static void rule_reduce_bcast(Sh *s, Node *n) {
  Value *x = n->in[0], *o = n->out[0];
  decide_repl(s, x);
  int rx = x->shape.rank, ro = o->shape.rank;
  Sharding h = repl();
  h.partial = x->sharding.partial;
  if (n->op == OP_REDUCE_SUM) {
    for (int d = 0; d < rx; d++) {
      int od = d - (rx - ro), a = x->sharding.split[d];
      bool kept = od >= 0 && o->shape.dim[od] == ldim(s, x, d) && ldim(s, x, d) > 1;
      if (kept) {
        h.split[od] = (int8_t)a;
        h.blocks[od] = x->sharding.blocks[d];
        copy_roles(s, o, od, x, d);
      } else if (a >= 0) {
        h.partial |= (uint8_t)(1u << a);
      }
    }
  } else {
    for (int d = 0; d < rx; d++) {
      int od = d + (ro - rx);
      if (x->sharding.split[d] >= 0 && ldim(s, x, d) == o->shape.dim[od]) {
        h.split[od] = x->sharding.split[d];
        h.blocks[od] = x->sharding.blocks[d];
      }
      copy_roles(s, o, od, x, d);
    }
  }
  set_out(s, n, 0, h);
}

static void rule_full_reduce(Sh *s, Node *n) {
  Value *x = n->in[0];
  decide_repl(s, x);
  if (n->op == OP_SUMSQ) x = n->in[0] = settle(s, x);
  Sharding h = repl();
  h.partial = x->sharding.partial;
  for (int d = 0; d < x->shape.rank; d++)
    if (x->sharding.split[d] >= 0) h.partial |= (uint8_t)(1u << x->sharding.split[d]);
  if (n->op == OP_MEAN && h.partial) { /* a local mean would divide by the local count: sum, then scale */
    Shape L = logical_shape(s, x);
    Value *sum = ir_emit(s->g, OP_SUM, 1, &x, n->out[0]->dtype, ir_scalar_shape(), NULL, s->loc);
    sum->sharding = h;
    Attrs a = {0};
    a.scalar = 1.0 / (double)ir_numel(&L);
    Value *y = ir_emit(s->g, OP_SCALE, 1, &sum, sum->dtype, sum->shape, &a, s->loc);
    y->sharding = h;
    ptrmap_put(&s->subst, n->out[0], (intptr_t)y);
    n->op = OP_COUNT;
    return;
  }
  set_out(s, n, 0, h);
}

static void rule_norm(Sh *s, Node *n) {
  Value *x = settle(s, n->in[0]);
  int r = x->shape.rank;
  x = gather_dim(s, x, r - 1);
  n->in[0] = x;
  bool bwd = n->op == OP_LAYERNORM_BWD || n->op == OP_RMSNORM_BWD;
  int nw = n->op == OP_LAYERNORM ? 2 : 1; /* w[, b] */
  for (int i = 1; i <= nw; i++) n->in[i] = redist(s, n->in[i], repl());
  if (bwd) {
    Sharding t = x->sharding;
    n->in[2] = redist(s, settle(s, n->in[2]), t);
  }
  for (int d = 0; d < r; d++) copy_roles(s, n->out[0], d, x, d);
  set_out(s, n, 0, x->sharding);
  if (bwd) {
    Sharding p = repl();
    for (int d = 0; d < r; d++)
      if (x->sharding.split[d] >= 0) p.partial |= (uint8_t)(1u << x->sharding.split[d]);
    for (int i = 1; i < n->nout; i++) set_out(s, n, i, p);
  }
}

/* q/k/v-like values: batch dim may be split, sequence dims gathered, heads (last dim) on tp. */
static Sharding heads_target(Sh *s, const Value *x, int head_axis) {
  Sharding h = repl();
  h.split[0] = x->sharding.split[0];
  h.blocks[0] = 0;
  if (h.split[0] == head_axis) h.split[0] = -1;
  if (head_axis >= 0) h.split[x->shape.rank - 1] = (int8_t)head_axis;
  return h;
}

static int head_axis_of(Sh *s, Node *n, int nqkv) {
  for (int i = 0; i < nqkv; i++) {
    Value *x = n->in[i];
    int a = x->sharding.split[x->shape.rank - 1];
    if (a >= 0 && x->sharding.blocks[x->shape.rank - 1] <= 1) return a;
  }
  (void)s;
  return -1;
}

static bool check_heads(Sh *s, Node *n, int ax) {
  if (ax < 0) return true;
  int t = degree(s, ax);
  int H = n->a.heads, KV = n->op == OP_ROPE ? n->a.heads : n->a.kv_heads;
  if (H % t == 0 && KV % t == 0) return true;
  if (n->op == OP_ROPE) error_at(s->loc, "rope over %d heads: tp %d does not divide the heads", H, t);
  else error_at(s->loc, "attention has %d heads and %d kv heads: tp %d must divide both", H, KV, t);
  TpChoices ch;
  note("tensor parallelism gives each rank whole heads; tp that divides both here: %s", tp_choices(s, H, KV, &ch));
  s->ok = false;
  return false;
}

static void rule_rope(Sh *s, Node *n) {
  Value *x = settle(s, n->in[0]);
  decide_repl(s, x);
  int ax = head_axis_of(s, n, 1);
  if (!check_heads(s, n, ax)) ax = -1;
  n->in[0] = redist(s, x, heads_target(s, x, ax));
  for (int d = 0; d < x->shape.rank; d++) copy_roles(s, n->out[0], d, x, d);
  if (ax >= 0) n->a.heads /= degree(s, ax);
  set_out(s, n, 0, n->in[0]->sharding);
}

static void rule_sdpa(Sh *s, Node *n) {
  int nq = 3;
  for (int i = 0; i < n->nin; i++) n->in[i] = settle(s, n->in[i]);
  int ax = head_axis_of(s, n, nq);
  if (!check_heads(s, n, ax)) ax = -1;
  Value *q = n->in[0];
  Sharding t = heads_target(s, q, ax);
  for (int i = 0; i < n->nin; i++) {
    Value *x = n->in[i];
    if (n->op == OP_SDPA_BWD && i == 4) { /* lse [B, H, S] */
      Sharding l = repl();
      l.split[0] = t.split[0];
      l.split[1] = (int8_t)ax;
      n->in[i] = redist(s, x, l);
    } else {
      n->in[i] = redist(s, x, t);
    }
  }
  if (ax >= 0) {
    n->a.heads /= degree(s, ax);
    n->a.kv_heads /= degree(s, ax);
  }
  if (n->op == OP_SDPA) {
    for (int d = 0; d < q->shape.rank; d++) copy_roles(s, n->out[0], d, q, d);
    set_out(s, n, 0, t);
    Sharding l = repl();
    l.split[0] = t.split[0];
    l.split[1] = (int8_t)ax;
    set_out(s, n, 1, l);
  } else {
    for (int i = 0; i < 3; i++) {
      for (int d = 0; d < q->shape.rank; d++) copy_roles(s, n->out[i], d, n->in[i], d);
      set_out(s, n, i, t);
    }
  }
}

/* The table an index value is looked up in (the forward EMBED reading it). */
static Value *table_of(Sh *s, Value *idx) {
  intptr_t p;
  return ptrmap_get(&s->embed, idx, &p) ? (Value *)p : NULL;
}

static void rule_embed(Sh *s, Node *n) {
  Value *tab = n->in[0], *idx = n->in[1];
  if (info(s, tab)->undecided) {
    Sharding h = repl();
    int64_t V = tab->shape.dim[0];
    bool positions = idx->def->op == OP_IOTA;
    if (s->deg[RT_AX_TP] > 1 && !positions) {
      if (divides(s, V, RT_AX_TP, 1)) h.split[0] = RT_AX_TP;
      else {
        char fix[160];
        snprintf(fix, sizeof fix, "the vocab-parallel embedding splits its rows over tp; pad the vocabulary to a "
                                  "multiple of %d (e.g. %lld)", 64 * s->deg[RT_AX_TP],
                 (long long)((V + 64 * s->deg[RT_AX_TP] - 1) / (64 * s->deg[RT_AX_TP]) * (64 * s->deg[RT_AX_TP])));
        error_tp(s, "the vocabulary", V, fix);
      }
    }
    decide(s, tab, h);
  }
  int va = tab->sharding.split[0];
  Sharding ti = idx->sharding;
  ti.partial = 0;
  if (va >= 0)
    for (int d = 0; d < idx->shape.rank; d++)
      if (ti.split[d] == va) ti.split[d] = -1;
  ptrmap_put(&s->embed, idx, (intptr_t)tab);
  idx = n->in[1] = redist(s, idx, ti);
  ptrmap_put(&s->embed, idx, (intptr_t)tab);
  Sharding h = repl();
  for (int d = 0; d < idx->shape.rank; d++) {
    h.split[d] = idx->sharding.split[d];
    copy_roles(s, n->out[0], d, idx, d);
  }
  h.split[idx->shape.rank] = tab->sharding.split[1];
  if (va >= 0) {
    n->a.sharded = true;
    n->a.mesh_axis = va;
    h.partial = (uint8_t)(1u << va);
  }
  set_out(s, n, 0, h);
}

static void rule_embed_bwd(Sh *s, Node *n) {
  Value *idx = n->in[0], *dy = n->in[1];
  Value *tab = table_of(s, idx);
  int va = tab ? tab->sharding.split[0] : -1;
  int r = dy->shape.rank;
  /* dy's last dim replicated; position dims of dy and idx agree; a vocab axis splits no position dim */
  Sharding t = dy->sharding;
  t.split[r - 1] = -1;
  t.blocks[r - 1] = 0;
  for (int d = 0; d < r - 1; d++)
    if (va >= 0 && t.split[d] == va) t.split[d] = -1;
  dy = n->in[1] = redist(s, dy, t);
  Sharding ti = repl();
  for (int d = 0; d < r - 1; d++) ti.split[d] = t.split[d];
  n->in[0] = redist(s, idx, ti);
  Sharding h = repl();
  h.partial = dy->sharding.partial;
  for (int d = 0; d < r - 1; d++)
    if (t.split[d] >= 0) h.partial |= (uint8_t)(1u << t.split[d]);
  if (va >= 0) {
    h.split[0] = (int8_t)va;
    n->a.sharded = true;
    n->a.mesh_axis = va;
  }
  set_out(s, n, 0, h);
}

/* Scalar value from element i of a [2] vector. */
static Value *elem(Sh *s, Value *v, int i) {
  Attrs a = {0};
  a.axis = 0;
  a.start = i;
  a.len = 1;
  int64_t one = 1;
  Value *x = ir_emit(s->g, OP_SLICE, 1, &v, v->dtype, ir_shape(1, &one), &a, s->loc);
  x->sharding = repl();
  Attrs b = {0};
  Value *y = ir_emit(s->g, OP_RESHAPE, 1, &x, v->dtype, ir_scalar_shape(), &b, s->loc);
  y->sharding = repl();
  return y;
}

static Value *binop(Sh *s, OpKind op, Value *a, Value *b) {
  Value *in[2] = {a, b};
  Value *y = ir_emit(s->g, op, 2, in, a->dtype, a->shape, NULL, s->loc);
  y->sharding = repl();
  return y;
}

/* cross-entropy over logits split on rows and/or vocab: in parts, never gathered. */
static void rule_ce(Sh *s, Node *n) {
  Value *orig = n->in[0];
  Value *lg = settle(s, n->in[0]);
  int r = lg->shape.rank;
  int va = lg->sharding.split[r - 1];
  if (va >= 0 && lg->sharding.blocks[r - 1] > 1) {
    lg = gather_dim(s, lg, r - 1);
    va = -1;
  }
  for (int d = 0; d < r - 1 && va >= 0; d++)
    if (lg->sharding.split[d] == va) lg = gather_dim(s, lg, d);
  bool rows = false;
  for (int d = 0; d < r - 1; d++) rows |= lg->sharding.split[d] >= 0;
  Sharding tr = repl();
  for (int d = 0; d < r - 1; d++) tr.split[d] = lg->sharding.split[d];
  Value *tg = redist(s, n->in[1], tr);
  if (va < 0 && !rows) { /* replicated: the op as it is */
    n->in[0] = lg;
    n->in[1] = tg;
    set_out(s, n, 0, repl());
    CeParts *cp = ARENA_NEW(s->a, CeParts);
    cp->logits = lg;
    ptrmap_put(&s->ce, orig, (intptr_t)cp);
    return;
  }
  int64_t logical_v = ldim(s, lg, r - 1);
  Attrs a = {0};
  a.len = n->a.len > 0 ? n->a.len : logical_v;
  a.sharded = va >= 0;
  a.mesh_axis = va >= 0 ? va : 0;
  Shape rs = lg->shape;
  rs.rank = r - 1;
  Value *mloc = ir_emit(s->g, OP_CE_MAX, 1, &lg, DT_F32, rs, &a, s->loc);
  mloc->sharding = tr;
  Value *m = mloc;
  if (va >= 0) {
    Attrs c = {0};
    c.mesh_axis = va;
    c.reduce = RED_MAX;
    m = ir_emit(s->g, OP_ALL_REDUCE, 1, &mloc, DT_F32, rs, &c, s->loc);
    m->sharding = tr;
  }
  Value *in3[3] = {lg, tg, m};
  Shape ss = rs;
  ss.dim[ss.rank] = 2;
  ss.sym[ss.rank] = -1;
  ss.rank++;
  Value *st = ir_emit(s->g, OP_CE_SUMS, 3, in3, DT_F32, ss, &a, s->loc);
  st->sharding = tr;
  if (va >= 0) {
    Attrs c = {0};
    c.mesh_axis = va;
    c.reduce = RED_SUM;
    Value *x = st;
    st = ir_emit(s->g, OP_ALL_REDUCE, 1, &x, DT_F32, ss, &c, s->loc);
    st->sharding = tr;
  }
  Attrs la = {0};
  la.len = a.len;
  Value *l3[3] = {st, m, tg};
  int64_t two = 2;
  Value *ls = ir_emit(s->g, OP_CE_LOSS, 3, l3, DT_F32, ir_shape(1, &two), &la, s->loc);
  ls->sharding = repl();
  for (int d = 0; d < r - 1; d++)
    if (tr.split[d] >= 0) ls->sharding.partial |= (uint8_t)(1u << tr.split[d]);
  ls = settle(s, ls);
  Value *count = elem(s, ls, 1);
  Value *loss = binop(s, OP_DIV, elem(s, ls, 0), count);
  CeParts *cp = ARENA_NEW(s->a, CeParts);
  *cp = (CeParts){m, st, ls, count, lg, va >= 0, va};
  ptrmap_put(&s->ce, orig, (intptr_t)cp);
  /* the node itself is dropped: its output becomes `loss` */
  ptrmap_put(&s->subst, n->out[0], (intptr_t)loss);
  n->op = OP_COUNT; /* marks the node for removal by the caller */
}

static void rule_ce_bwd(Sh *s, Node *n) {
  intptr_t p;
  if (!ptrmap_get(&s->ce, n->in[0], &p)) {
    die("shard: cross_entropy_bwd without its forward");
  }
  CeParts *cp = (CeParts *)p;
  if (!cp->st) { /* forward kept as one op */
    for (int i = 0; i < n->nin; i++) n->in[i] = settle(s, n->in[i]);
    n->in[0] = cp->logits;
    set_out(s, n, 0, repl());
    return;
  }
  Value *dl = redist(s, settle(s, n->in[2]), repl());
  Value *scale = binop(s, OP_DIV, dl, cp->count);
  Value *lg = cp->logits;
  int r = lg->shape.rank;
  Sharding tr = repl();
  for (int d = 0; d < r - 1; d++) tr.split[d] = lg->sharding.split[d];
  Value *tg = redist(s, n->in[1], tr);
  Attrs a = {0};
  a.len = n->a.len > 0 ? n->a.len : ldim(s, lg, r - 1);
  a.sharded = cp->vocab;
  a.mesh_axis = cp->vocab ? cp->vaxis : 0;
  Value *in5[5] = {lg, tg, cp->m, cp->st, scale};
  Value *g = ir_emit(s->g, OP_CE_GRAD, 5, in5, lg->dtype, lg->shape, &a, s->loc);
  g->sharding = lg->sharding;
  memcpy(info(s, g)->role, info(s, lg)->role, sizeof info(s, lg)->role);
  ptrmap_put(&s->subst, n->out[0], (intptr_t)g);
  n->op = OP_COUNT;
}

static void rule_update(Sh *s, Node *n) {
  Value *p = n->in[0];
  decide_repl(s, p);
  Sharding h = p->sharding;
  int nst = n->op == OP_ADAMW_UPDATE ? 2 : 1;
  n->in[1] = redist(s, settle(s, n->in[1]), h);
  for (int i = 2; i < 2 + nst; i++) n->in[i] = redist(s, n->in[i], h);
  n->in[2 + nst] = redist(s, settle(s, n->in[2 + nst]), repl());
  for (int i = 0; i < n->nout; i++) set_out(s, n, i, h);
}

static void rule_source(Sh *s, Node *n) {
  Value *v = n->out[0];
  VInfo *vi = info(s, v);
  switch (n->op) {
  case OP_PARAM:
  case OP_STATE:
    vi->undecided = true;
    vi->param = v;
    return;
  case OP_INPUT:
    if (!ir_dtype_is_float(v->dtype) && v->shape.rank >= 1) {
      vi->role[0] = ROLE_BATCH;
      if (v->shape.rank >= 2) vi->role[1] = ROLE_SEQ;
      Sharding h = repl();
      if (s->deg[RT_AX_DP] > 1) {
        if (v->shape.dim[0] % s->deg[RT_AX_DP] != 0) {
          error_at(n->loc, "the batch (%lld sequences of input `%s`) does not split over dp %d",
                   (long long)v->shape.dim[0], n->a.name ? n->a.name : "?", s->deg[RT_AX_DP]);
          note("each data-parallel rank takes batch / dp sequences");
          s->ok = false;
        } else {
          h.split[0] = RT_AX_DP;
        }
      }
      set_out(s, n, 0, h);
      return;
    }
    set_out(s, n, 0, repl());
    return;
  default: set_out(s, n, 0, repl()); return;
  }
}

static void rewrite_graph(Sh *s, Graph *g);

/* REPEAT: carries keep their input's sharding (results are redistributed to it),
 * stacked inputs lose their leading dim, ys gain it. */
static void rule_repeat(Sh *s, Node *n) {
  Graph *b = n->body;
  int nc = n->a.ncarry, nx = n->a.nxs;
  for (int i = 0; i < n->nin; i++) {
    Value *x = n->in[i];
    Node *arg = b->args[i];
    Value *av = arg->out[0];
    VInfo *xi = info(s, x), *ai = info(s, av);
    if (i < nc) decide_repl(s, x);
    x = n->in[i] = settle(s, x);
    xi = info(s, x);
    if (xi->undecided) { /* a parameter: decided where the body first uses it */
      ai->undecided = true;
      ai->param = xi->param;
      ai->via = x;
      ai->lead = xi->lead + (i >= nc && i < nc + nx ? 1 : 0);
      continue;
    }
    Sharding h = x->sharding;
    if (i >= nc && i < nc + nx) {
      if (h.split[0] >= 0) x = n->in[i] = gather_dim(s, x, 0);
      h = x->sharding;
      for (int d = 0; d + 1 < IR_MAX_RANK; d++) {
        h.split[d] = h.split[d + 1];
        h.blocks[d] = h.blocks[d + 1];
        ai->role[d] = xi->role[d + 1];
      }
      h.split[IR_MAX_RANK - 1] = -1;
      h.blocks[IR_MAX_RANK - 1] = 0;
    } else {
      memcpy(ai->role, xi->role, sizeof ai->role);
    }
    av->sharding = h;
    av->shape = local_of(s, av->shape, &h);
  }
  rewrite_graph(s, b);
  /* carries: back to the argument's sharding; ys: anything, stacked */
  Graph *saved = s->g;
  s->g = b;
  for (int i = 0; i < b->nresults; i++) {
    Value *y = sub(s, b->results[i]);
    if (i < nc) {
      Value *av = b->args[i]->out[0];
      y = redist(s, y, av->sharding);
    }
    b->results[i] = y;
  }
  s->g = saved;
  for (int i = 0; i < n->nout; i++) {
    Value *y = b->results[i];
    Sharding h = y->sharding;
    if (i >= nc) {
      for (int d = IR_MAX_RANK - 1; d > 0; d--) {
        h.split[d] = h.split[d - 1];
        h.blocks[d] = h.blocks[d - 1];
        info(s, n->out[i])->role[d] = info(s, y)->role[d - 1];
      }
      h.split[0] = -1;
      h.blocks[0] = 0;
    } else {
      memcpy(info(s, n->out[i])->role, info(s, y)->role, sizeof info(s, y)->role);
    }
    set_out(s, n, i, h);
  }
}

static void rewrite_node(Sh *s, Node *n) {
  s->loc = n->loc;
  for (int i = 0; i < n->nin; i++) n->in[i] = sub(s, n->in[i]);
  unsigned fl = ir_ops[n->op].flags;
  if (fl & F_SOURCE) {
    if (n->op == OP_ARG) return; /* set by the enclosing REPEAT */
    rule_source(s, n);
    return;
  }
  if (fl & F_EW) {
    rule_ew(s, n);
    return;
  }
  switch (n->op) {
  case OP_MATMUL: rule_matmul(s, n); return;
  case OP_RESHAPE: rule_reshape(s, n); return;
  case OP_TRANSPOSE: rule_transpose(s, n); return;
  case OP_SLICE: case OP_PAD: rule_slice_pad(s, n); return;
  case OP_CONCAT: rule_concat(s, n); return;
  case OP_REDUCE_SUM: case OP_BROADCAST_TO: rule_reduce_bcast(s, n); return;
  case OP_SUM: case OP_MEAN: case OP_SUMSQ: rule_full_reduce(s, n); return;
  case OP_LAYERNORM: case OP_RMSNORM: case OP_LAYERNORM_BWD: case OP_RMSNORM_BWD: rule_norm(s, n); return;
  case OP_ROPE: rule_rope(s, n); return;
  case OP_SDPA: case OP_SDPA_BWD: rule_sdpa(s, n); return;
  case OP_EMBED: rule_embed(s, n); return;
  case OP_EMBED_BWD: rule_embed_bwd(s, n); return;
  case OP_CROSS_ENTROPY: rule_ce(s, n); return;
  case OP_CROSS_ENTROPY_BWD: rule_ce_bwd(s, n); return;
  case OP_SGD_UPDATE: case OP_ADAMW_UPDATE: rule_update(s, n); return;
  case OP_REPEAT: rule_repeat(s, n); return;
  default:
    die("shard: no sharding rule for %s", ir_ops[n->op].name);
  }
}

static void rewrite_graph(Sh *s, Graph *g) {
  Graph *saved_g = s->g;
  Node **saved_old = s->old;
  int saved_nold = s->nold;
  Node **old = g->nodes;
  int nold = g->nnodes;
  g->nodes = NULL;
  g->nnodes = g->capnodes = 0;
  s->g = g;
  s->old = old;
  s->nold = nold;
  for (int i = 0; i < nold; i++) {
    Node *n = old[i];
    rewrite_node(s, n);
    if (n->op == OP_COUNT) continue; /* replaced by the values it was rewritten into */
    arena_grow(g->arena, (void **)&g->nodes, &g->capnodes, g->nnodes + 1, sizeof(Node *));
    g->nodes[g->nnodes++] = n;
  }
  s->g = saved_g;
  s->old = saved_old;
  s->nold = saved_nold;
}

/* Every local shape must be what the op's rule infers from its local inputs: a
 * mismatch is a bug in this pass, reported as such. */
static void check_shapes(Graph *g) {
  ir_remove_dead(g);
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->body) check_shapes(n->body);
    Shape before[8];
    int k = n->nout < 8 ? n->nout : 8;
    for (int j = 0; j < k; j++) before[j] = n->out[j]->shape;
    if (!ir_infer(n)) die("shard: %s: local shapes do not check", ir_ops[n->op].name);
    for (int j = 0; j < k; j++)
      if (!ir_shape_eq(&before[j], &n->out[j]->shape))
        die("shard: %s output %d: the pass made one local shape, the op infers another", ir_ops[n->op].name, j);
  }
}

bool pass_shard(Module *m) {
  if (!m->mesh) die("shard: the mesh is not resolved");
  Sh s = {0};
  s.m = m;
  s.a = m->arena;
  s.ok = true;
  for (int a = 0; a < RT_AX_COUNT; a++) s.deg[a] = m->mesh->dim[a];
  s.sp = m->plan.sp && s.deg[RT_AX_TP] > 1;
  bool any = false;
  for (int a = 0; a < RT_AX_COUNT; a++) any |= s.deg[a] > 1;
  if (!any) return true; /* one rank: the program is the graph */
  Graph *g = m->graph;
  s.max_tp = m->mesh->devices_per_node > 1 ? m->mesh->devices_per_node : 64;
  if (s.deg[RT_AX_TP] > 1) scan_attention(&s, g);
  rewrite_graph(&s, g);
  s.g = g;
  s.loc = (SrcLoc){0};
  for (int i = 0; i < g->nresults; i++) g->results[i] = settle(&s, sub(&s, g->results[i]));
  /* parameters nobody read (and their casts nobody decided): replicated */
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_PARAM || g->nodes[i]->op == OP_STATE || g->nodes[i]->op == OP_CAST)
      decide_repl(&s, g->nodes[i]->out[0]);
  check_shapes(g);
  ptrmap_free(&s.info);
  ptrmap_free(&s.memo);
  ptrmap_free(&s.subst);
  ptrmap_free(&s.ce);
  ptrmap_free(&s.embed);
  ptrmap_free(&s.attn_repl);
  return s.ok && diag_errors() == 0;
}
