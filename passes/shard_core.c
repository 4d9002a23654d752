/* passes/shard_core.c — the shard pass's shared machinery (shard_internal.h): what a value's
 * sharding means locally, deciding a parameter's sharding, and redistribution, the only place
 * collectives come from. The rules (shard_rules.c, shard_tp.c) and the rewrite (shard.c) call
 * it; it calls none of them.
 */
#include <string.h>

#include "shard_internal.h"

/* ---- small helpers -------------------------------------------------------------------- */

VInfo *shard_info(Sh *s, const Value *v) {
  intptr_t p;
  if (ptrmap_get(&s->info, v, &p)) return (VInfo *)p;
  VInfo *vi = ARENA_NEW(s->a, VInfo);
  ptrmap_put(&s->info, v, (intptr_t)vi);
  return vi;
}

Value *shard_sub(Sh *s, Value *v) {
  intptr_t p;
  while (ptrmap_get(&s->subst, v, &p)) v = (Value *)p;
  return v;
}

int shard_degree(const Sh *s, int ax) { return ax >= 0 && ax < RT_AX_COUNT ? s->deg[ax] : 1; }

/* Mesh axes of degree 1 never split anything: drop them. */
static Sharding norm_sh(const Sh *s, Sharding h) {
  for (int d = 0; d < IR_MAX_RANK; d++) {
    if (h.inner[d] >= 0 && shard_degree(s, h.inner[d]) <= 1) h.inner[d] = -1;
    if (h.split[d] >= 0 && shard_degree(s, h.split[d]) <= 1) { /* the inner split, if any, is the split */
      h.split[d] = h.inner[d];
      h.blocks[d] = 0;
      h.inner[d] = -1;
    }
    if (h.split[d] < 0) h.inner[d] = -1;
    if (h.split[d] < 0 || h.blocks[d] <= 1) h.blocks[d] = 0;
  }
  for (int a = 0; a < RT_AX_COUNT; a++)
    if (shard_degree(s, a) <= 1) h.partial &= (uint8_t)~(1u << a);
  return h;
}

static bool sh_eq(const Sharding *a, const Sharding *b) {
  for (int d = 0; d < IR_MAX_RANK; d++)
    if (a->split[d] != b->split[d] || (a->split[d] >= 0 && (a->blocks[d] > 1 ? a->blocks[d] : 1) !=
                                                               (b->blocks[d] > 1 ? b->blocks[d] : 1)))
      return false;
    else if (a->split[d] >= 0 && a->inner[d] != b->inner[d])
      return false;
  return a->partial == b->partial;
}

/* Is mesh axis ax used to split any dim of h other than dim `except`? */
bool shard_axis_used(const Sharding *h, int ax, int except) {
  for (int d = 0; d < IR_MAX_RANK; d++)
    if (d != except && (h->split[d] == ax || (h->split[d] >= 0 && h->inner[d] == ax))) return true;
  return false;
}

/* Logical dim d of v (local dims times the splitting degree). */
int64_t shard_ldim(const Sh *s, const Value *v, int d) {
  int a = v->sharding.split[d], in = a >= 0 ? v->sharding.inner[d] : -1;
  return v->shape.dim[d] * (a >= 0 ? shard_degree(s, a) : 1) * (in >= 0 ? shard_degree(s, in) : 1);
}

Shape shard_logical_shape(const Sh *s, const Value *v) {
  Shape r = v->shape;
  for (int d = 0; d < r.rank; d++) r.dim[d] = shard_ldim(s, v, d);
  return r;
}

/* Local shape of logical shape L under h. */
Shape shard_local_of(const Sh *s, Shape L, const Sharding *h) {
  for (int d = 0; d < L.rank; d++)
    if (h->split[d] >= 0) {
      L.dim[d] /= shard_degree(s, h->split[d]);
      if (h->inner[d] >= 0) L.dim[d] /= shard_degree(s, h->inner[d]);
    }
  return L;
}

/* Can logical dim n be split over ax in `blocks` blocks? */
bool shard_divides(const Sh *s, int64_t n, int ax, int blocks) {
  int64_t q = (int64_t)shard_degree(s, ax) * rt_blocks_count(blocks);
  return n > 0 && n % q == 0;
}

/* Sets output i of n: sharding h, local shape from its (still logical) shape. */
void shard_set_out(Sh *s, Node *n, int i, Sharding h) {
  Value *v = n->out[i];
  h = norm_sh(s, h);
  v->sharding = h;
  v->shape = shard_local_of(s, v->shape, &h);
}

Sharding shard_repl(void) { return ir_replicated(); }

void shard_copy_roles(Sh *s, Value *to, int tod, const Value *from, int fromd) {
  if (tod < 0 || fromd < 0 || tod >= to->shape.rank || fromd >= from->shape.rank) return;
  VInfo *fi = shard_info(s, from);
  if (fi->role[fromd]) shard_info(s, to)->role[tod] = fi->role[fromd];
}

/* ---- deciding a parameter's sharding ---------------------------------------------------- */

/* Chooses the sharding of an undecided value (and of the source it views). */
void shard_decide(Sh *s, Value *v, Sharding h) {
  VInfo *vi = shard_info(s, v);
  if (!vi->undecided) return;
  h = norm_sh(s, h);
  h.partial = 0;
  Shape L = v->shape; /* undecided values still have their logical shape */
  v->sharding = h;
  v->shape = shard_local_of(s, L, &h);
  vi->undecided = false;
  /* what v views or casts, up to the source: the same sharding on the same dims (their
   * stacked dims in front stay whole) */
  Value *u = vi->via;
  if (u && shard_info(s, u)->undecided) {
    int shift = vi->lead - shard_info(s, u)->lead;
    Sharding uh = shard_repl();
    for (int d = 0; d + shift < IR_MAX_RANK && d < v->shape.rank; d++) {
      uh.split[d + shift] = h.split[d];
      uh.blocks[d + shift] = h.blocks[d];
      uh.inner[d + shift] = h.inner[d];
    }
    shard_decide(s, u, uh);
  }
}

void shard_decide_repl(Sh *s, Value *v) {
  if (shard_info(s, v)->undecided) shard_decide(s, v, shard_repl());
}

/* ---- redistribution: the only source of collectives --------------------------------------- */

static Value *emit1(Sh *s, OpKind op, Value *x, DType dt, Shape local, Sharding h, const Attrs *a) {
  Value *y = ir_emit(s->g, op, x ? 1 : 0, x ? &x : NULL, dt, local, a, s->loc);
  y->sharding = h;
  VInfo *xi = x ? shard_info(s, x) : NULL;
  if (xi) memcpy(shard_info(s, y)->role, xi->role, sizeof xi->role);
  return y;
}

static Value *coll(Sh *s, OpKind op, Value *x, int ax, int axis, int blocks, ReduceOp red, Sharding to) {
  Attrs a = {0};
  a.mesh_axis = ax;
  a.axis = axis;
  a.blocks = blocks > 1 ? blocks : 0;
  a.reduce = red;
  Shape L = shard_logical_shape(s, x);
  to = norm_sh(s, to);
  return emit1(s, op, x, x->dtype, shard_local_of(s, L, &to), to, &a);
}

/* v redistributed to sharding `to` (memoized per graph). */
Value *shard_redist(Sh *s, Value *v, Sharding to) {
  to = norm_sh(s, to);
  if (shard_info(s, v)->undecided) {
    shard_decide(s, v, to);
    return v;
  }
  if (sh_eq(&v->sharding, &to)) return v;
  intptr_t p;
  Redist *head = ptrmap_get(&s->memo, v, &p) ? (Redist *)p : NULL;
  for (Redist *r = head; r; r = r->next)
    if (r->g == s->g && sh_eq(&r->to, &to)) return r->v;
  Value *x = v;
  Sharding cur = v->sharding;
  /* 1. settle partial sums; dp's and cp's together (a replicated weight's gradient under cp, the
   * loss): one all-reduce over their combined group, not one per axis, where neither is
   * reduce-scattered here (ZeRO-2 and 3 turn the gradients' one into a reduce-scatter over dp and
   * an all-reduce over cp of the shard later, passes/zero.c) */
  unsigned dpcp = (1u << RT_AX_DP) | (1u << RT_AX_CP);
  bool rs = false;
  for (int e = 0; e < x->shape.rank; e++) rs |= to.split[e] == RT_AX_DP || to.split[e] == RT_AX_CP;
  if ((cur.partial & dpcp) == dpcp && !(to.partial & dpcp) && !rs) {
    cur.partial &= (uint8_t)~dpcp;
    x = coll(s, OP_ALL_REDUCE, x, RT_AX_DP, 0, 0, RED_SUM, cur);
    x->def->a.mesh_with = 1u << RT_AX_CP;
  }
  for (int a = 0; a < RT_AX_COUNT; a++) {
    if (!(cur.partial & (1u << a)) || (to.partial & (1u << a))) continue;
    cur.partial &= (uint8_t)~(1u << a);
    int d = -1, din = -1;
    for (int e = 0; e < x->shape.rank; e++)
      if (to.split[e] == a && cur.split[e] < 0 && !shard_axis_used(&cur, a, -1)) d = e;
      else if (to.inner[e] == a && to.split[e] >= 0 && cur.split[e] == to.split[e] && cur.inner[e] < 0 &&
               (cur.blocks[e] > 1 ? cur.blocks[e] : 1) == (to.blocks[e] > 1 ? to.blocks[e] : 1) &&
               !shard_axis_used(&cur, a, -1))
        din = e; /* sp inside cp: reduce-scattered within the outer split's local extent */
    if (d >= 0) {
      cur.split[d] = (int8_t)a;
      cur.blocks[d] = to.blocks[d];
      x = coll(s, OP_REDUCE_SCATTER, x, a, d, to.blocks[d], RED_SUM, cur);
    } else if (din >= 0) {
      cur.inner[din] = (int8_t)a;
      x = coll(s, OP_REDUCE_SCATTER, x, a, din, 0, RED_SUM, cur);
    } else {
      x = coll(s, OP_ALL_REDUCE, x, a, 0, 0, RED_SUM, cur);
    }
  }
  if (cur.partial & ~to.partial) die("shard: cannot settle partial 0x%x", cur.partial);
  if (to.partial & ~cur.partial) die("shard: cannot make a value partial");
  /* 2. gather dims split differently from the target; an inner split (within the outer's local
   * extent, contiguous) before its outer one */
  for (int d = 0; d < x->shape.rank; d++) {
    int in = cur.split[d] >= 0 ? cur.inner[d] : -1;
    if (in < 0) continue;
    int bt = to.blocks[d] > 1 ? to.blocks[d] : 1, bc = cur.blocks[d] > 1 ? cur.blocks[d] : 1;
    if (to.split[d] == cur.split[d] && bt == bc && to.inner[d] == in) continue;
    cur.inner[d] = -1;
    x = coll(s, OP_ALL_GATHER, x, in, d, 0, RED_SUM, cur);
  }
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
  /* 3. slice dims the target splits (no communication): the outer split, then the inner */
  for (int d = 0; d < x->shape.rank; d++) {
    int a = to.split[d];
    if (a < 0 || cur.split[d] == a) continue;
    cur.split[d] = (int8_t)a;
    cur.blocks[d] = to.blocks[d];
    x = coll(s, OP_SHARD_SLICE, x, a, d, to.blocks[d], RED_SUM, cur);
  }
  for (int d = 0; d < x->shape.rank; d++) {
    int in = to.split[d] >= 0 ? to.inner[d] : -1;
    if (in < 0 || cur.inner[d] == in) continue;
    cur.inner[d] = (int8_t)in;
    x = coll(s, OP_SHARD_SLICE, x, in, d, 0, RED_SUM, cur);
  }
  Redist *r = ARENA_NEW(s->a, Redist);
  *r = (Redist){to, s->g, x, head};
  ptrmap_put(&s->memo, v, (intptr_t)r);
  return x;
}

/* v without partial sums. Under sp a tp-Partial activation with a sequence dim is
 * reduce-scattered along it rather than all-reduced. */
Value *shard_settle(Sh *s, Value *v) {
  if (shard_info(s, v)->undecided) return v;
  Sharding to = v->sharding;
  if (!to.partial) return v;
  if (s->sp && (to.partial & (1u << RT_AX_TP)) && !shard_axis_used(&to, RT_AX_TP, -1)) {
    VInfo *vi = shard_info(s, v);
    for (int d = 0; d < v->shape.rank; d++)
      if (vi->role[d] == ROLE_SEQ && to.split[d] < 0 && shard_divides(s, shard_ldim(s, v, d), RT_AX_TP, 1)) {
        to.split[d] = RT_AX_TP;
        break;
      } else if (vi->role[d] == ROLE_SEQ && to.split[d] == RT_AX_CP && to.inner[d] < 0 &&
                 v->shape.dim[d] % s->deg[RT_AX_TP] == 0) {
        to.inner[d] = RT_AX_TP; /* sp inside cp: each cp rank's sequence split again over tp */
        break;
      }
  }
  to.partial = 0;
  return shard_redist(s, v, to);
}

/* The sharding of v with the dims in mask[d] == true gathered (no partial). */
static Sharding without(const Value *v, const bool *gather) {
  Sharding h = v->sharding;
  h.partial = 0;
  for (int d = 0; d < v->shape.rank && d < IR_MAX_RANK; d++)
    if (gather[d]) {
      h.split[d] = -1;
      h.blocks[d] = 0;
      h.inner[d] = -1;
    }
  return h;
}

/* v with its inner splits gathered (partial sums kept). */
Value *shard_gather_inner(Sh *s, Value *v) {
  Sharding h = v->sharding;
  bool any = false;
  for (int d = 0; d < v->shape.rank; d++)
    if (h.split[d] >= 0 && h.inner[d] >= 0) {
      h.inner[d] = -1;
      any = true;
    }
  return any && !shard_info(s, v)->undecided ? shard_redist(s, v, h) : v;
}

Value *shard_gather_dim(Sh *s, Value *v, int d) {
  if (d < 0 || d >= v->shape.rank || v->sharding.split[d] < 0) return v;
  bool g[IR_MAX_RANK] = {0};
  g[d] = true;
  Sharding h = without(v, g);
  h.partial = v->sharding.partial;
  return shard_redist(s, v, h);
}

/* ---- errors ------------------------------------------------------------------------------ */

void shard_error_tp(Sh *s, const char *what, int64_t n, const char *fix) {
  error_at(s->loc, "%s (%lld) is not divisible by tp %d", what, (long long)n, s->deg[RT_AX_TP]);
  if (fix) note("%s", fix);
  s->ok = false;
}
