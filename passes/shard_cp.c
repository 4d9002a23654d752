/* passes/shard_cp.c — context parallelism in the shard pass: the sequence split over `cp`.
 *
 * Why here and not a pass of its own: a cp split is a sharding of activations like dp's batch
 * split, and the generic rules (shard_rules.c) carry it through every position-wise op — matmuls,
 * norms, elementwise, the cross-entropy parts (the loss becomes partial sums over cp), and the
 * gradients of replicated weights (partial over cp, settled by an all-reduce). What only cp needs
 * is here: the seed, the positions, rope, and attention as a ring.
 *
 *   - Seed: token inputs split their sequence dim over cp in zigzag order (RT_BLOCKS_ZIGZAG: 2 cp
 *     chunks, the rank with coordinate c holding chunks c and 2 cp - 1 - c), so causal attention
 *     costs every rank the same. The sequence must divide by 2 cp.
 *   - Positions: iota over the logical sequence, sliced in the same zigzag order (no traffic).
 *     rope becomes rope_at(x, positions); learned position embeddings index with the iota and
 *     are sliced by the generic rules.
 *   - Ring attention: sdpa becomes attn_block of the local queries over the local keys, then cp - 1
 *     hops, each passing K, V and their positions to the next rank of the cp ring (send +1, recv
 *     -1) and combining the block's (o, lse) by log-sum-exp (attn_combine); causal masking compares
 *     global positions. sdpa_bwd becomes the backward ring: the blocks travel again, with dK and
 *     dV accumulators that collect every rank's share and make one last hop home. Each hop is
 *     issued before the block it overlaps (the next K, V and positions before this block's
 *     attention; in the backward ring the accumulators' hop too), so codegen's asynchronous shift
 *     (started at the hop, waited before its first reader) runs during that block's compute.
 *   - cp_mode all2all (Ulysses): instead of the ring, attention's inputs are exchanged by
 *     all_to_all from the sequence split to a split of the heads over cp, sdpa / sdpa_bwd run over
 *     the whole sequence on their heads, and the outputs are exchanged back. cp must divide the
 *     heads and the kv heads (per tp rank).
 */
#include <string.h>

#include "shard_internal.h"

enum { TAG_K = 160, TAG_V, TAG_POS, TAG_DK, TAG_DV }; /* SEND/RECV tags of the ring's streams */

bool shard_cp_on(const Sh *s) { return s->deg[RT_AX_CP] > 1; }

/* A token input [batch, seq, ..]: its sequence dim split over cp in zigzag order. */
void shard_cp_seed(Sh *s, Node *n, Sharding *h) {
  Value *v = n->out[0];
  if (!shard_cp_on(s) || v->shape.rank < 2) return;
  int cp = s->deg[RT_AX_CP];
  if (v->shape.dim[1] % (2 * cp) != 0) {
    error_at(n->loc, "the sequence (%lld tokens of input `%s`) does not split into 2 x cp = %d chunks",
             (long long)v->shape.dim[1], n->a.name ? n->a.name : "?", 2 * cp);
    note("context parallelism gives each cp rank two of 2 x cp equal chunks (zigzag order, for causal balance)");
    s->ok = false;
    return;
  }
  h->split[1] = RT_AX_CP;
  h->blocks[1] = RT_BLOCKS_ZIGZAG;
}

/* q/k/v-like target (heads per shard_tp.c) with the sequence dim over cp. */
Sharding shard_cp_seq(const Sh *s, Sharding t) {
  if (shard_cp_on(s)) {
    t.split[1] = RT_AX_CP;
    t.blocks[1] = RT_BLOCKS_ZIGZAG;
  }
  return t;
}

/* This rank's global positions of a sequence of S tokens: i32[S / cp] (one per graph and length). */
static Value *positions(Sh *s, int64_t S) {
  intptr_t p0;
  if (ptrmap_get(&s->cp_pos, s->g, &p0) && ((Value *)p0)->shape.dim[0] * s->deg[RT_AX_CP] == S) return (Value *)p0;
  Attrs a = {0};
  Value *p = ir_emit(s->g, OP_IOTA, 0, NULL, DT_I32, ir_shape(1, &S), &a, s->loc);
  p->sharding = shard_repl();
  Sharding z = shard_repl();
  z.split[0] = RT_AX_CP;
  z.blocks[0] = RT_BLOCKS_ZIGZAG;
  Value *pos = shard_redist(s, p, z);
  ptrmap_put(&s->cp_pos, s->g, (intptr_t)pos);
  return pos;
}

/* x passed one step around the cp ring: sent to the next rank, the previous rank's received. */
static Value *hop(Sh *s, Value *x, int tag) {
  Attrs a = {0};
  a.mesh_axis = RT_AX_CP;
  a.start = 1;
  a.tag = tag;
  ir_node_new(s->g, OP_SEND, 1, &x, 0, s->loc)->a = a;
  a.start = -1;
  Value *y = ir_emit(s->g, OP_RECV, 0, NULL, x->dtype, x->shape, &a, s->loc);
  y->sharding = x->sharding; /* the previous rank's block: the same local layout */
  memcpy(shard_info(s, y)->role, shard_info(s, x)->role, sizeof shard_info(s, x)->role);
  return y;
}

/* The next ring block (k, v and their positions one hop on) issued now, when `more`, so its
 * transfer runs while the current block is computed (codegen starts each hop where it stands and
 * waits before the first reader of what it receives: the block after this one, or the hop after). */
static void hop_kv(Sh *s, bool more, Value *k, Value *v, Value *pos, Value **kn, Value **vn, Value **pn) {
  *kn = more ? hop(s, k, TAG_K) : NULL;
  *vn = more ? hop(s, v, TAG_V) : NULL;
  *pn = more ? hop(s, pos, TAG_POS) : NULL;
}

/* A node of op with the attrs of n, its outputs shaped like `like` (local shapes) and sharded. */
static Node *emit_like(Sh *s, OpKind op, const Node *n, int nin, Value *const *in, int nout, Value *const *like,
                       const Sharding *h) {
  Node *d = ir_node_new(s->g, op, nin, in, nout, s->loc);
  d->a = n->a;
  for (int i = 0; i < nout; i++) {
    d->out[i]->dtype = like[i]->dtype;
    d->out[i]->shape = like[i]->shape;
    d->out[i]->sharding = h[i];
    memcpy(shard_info(s, d->out[i])->role, shard_info(s, like[i])->role, sizeof shard_info(s, like[i])->role);
  }
  return d;
}

static Value *add(Sh *s, Value *a, Value *b) {
  Value *in[2] = {a, b};
  Value *y = ir_emit(s->g, OP_ADD, 2, in, a->dtype, a->shape, NULL, s->loc);
  y->sharding = a->sharding;
  memcpy(shard_info(s, y)->role, shard_info(s, a)->role, sizeof shard_info(s, a)->role);
  return y;
}

/* Node n (its inputs redistributed, its attrs local) is replaced by outs. */
static void replace(Sh *s, Node *n, Value *const *outs) {
  for (int i = 0; i < n->nout; i++) ptrmap_put(&s->subst, n->out[i], (intptr_t)outs[i]);
  n->op = OP_COUNT; /* marks the node for removal by the caller */
}

/* rope on a cp-split sequence: rope_at this rank's positions. */
void shard_cp_rope(Sh *s, Node *n) {
  Value *x = n->in[0];
  Value *in[2] = {x, positions(s, shard_ldim(s, x, 1))};
  Node *d = emit_like(s, OP_ROPE_AT, n, 2, in, 1, &x, &x->sharding);
  replace(s, n, d->out);
}

/* cp_mode all2all: x's dim `gather` gathered over cp (blocks gb) and dim `split` scattered (blocks
 * sb), one all_to_all; h: the result's sharding. */
static Value *a2a(Sh *s, Value *x, int gather, int gb, int split, int sb, Sharding h) {
  int cp = s->deg[RT_AX_CP];
  Attrs a = {0};
  a.mesh_axis = RT_AX_CP;
  a.axis = gather;
  a.blocks = gb;
  a.split_axis = split;
  a.split_blocks = sb;
  Shape sh = x->shape;
  sh.dim[gather] *= cp;
  sh.dim[split] /= cp;
  Value *y = ir_emit(s->g, OP_ALL_TO_ALL, 1, &x, x->dtype, sh, &a, s->loc);
  y->sharding = h;
  memcpy(shard_info(s, y)->role, shard_info(s, x)->role, sizeof shard_info(s, x)->role);
  return y;
}

/* [B, S/cp, C] split over cp in zigzag order along the sequence <-> [B, S, C/cp]: the heads
 * (C = heads x head dim) split over cp; lse [B, H, S] likewise with the sequence last. The
 * head-split value's sharding names tp when tp splits the heads too (cp's split nests inside
 * tp's, which a Sharding cannot spell; only attention reads these values), cp otherwise. */
static Sharding heads_split(Sharding h, bool lse) {
  int sq = lse ? 2 : 1, hd = lse ? 1 : 2;
  h.split[sq] = -1;
  h.blocks[sq] = 0;
  if (h.split[hd] < 0) h.split[hd] = RT_AX_CP;
  return h;
}

static Value *to_heads(Sh *s, Value *x, bool lse) {
  return a2a(s, x, lse ? 2 : 1, RT_BLOCKS_ZIGZAG, lse ? 1 : 2, 0, heads_split(x->sharding, lse));
}

static Value *to_seq(Sh *s, Value *x, bool lse, Sharding h) {
  return a2a(s, x, lse ? 1 : 2, 0, lse ? 2 : 1, RT_BLOCKS_ZIGZAG, h);
}

static void set_value(Sh *s, Value *y, DType dt, Shape sh, Sharding h, const Value *roles) {
  y->dtype = dt;
  y->shape = sh;
  y->sharding = h;
  memcpy(shard_info(s, y)->role, shard_info(s, roles)->role, sizeof shard_info(s, roles)->role);
}

/* cp_mode all2all (Ulysses): the inputs' sequence split exchanged for a split of the heads, sdpa
 * (or sdpa_bwd) over the whole sequence in logical order on heads / cp heads, the outputs
 * exchanged back. lsh: the lse's sharding (sequence split). */
static bool sdpa_all2all(Sh *s, Node *n, Sharding lsh) {
  int cp = s->deg[RT_AX_CP];
  int H = n->a.heads, KV = n->a.kv_heads; /* per tp rank */
  if (H % cp != 0 || KV % cp != 0) {
    if (n->op == OP_SDPA) { /* (once: its backward has the same heads) */
      error_at(n->loc, "cp_mode all2all splits the heads over cp: attention has %d heads and %d kv heads%s, and cp %d "
               "does not divide both", H, KV, s->deg[RT_AX_TP] > 1 ? " per tp rank" : "", cp);
      SrcLoc at = s->m->plan.opt_loc[PLAN_OPT_CP_MODE];
      if (at.file) note_at(at, "all2all asked for here");
      note("use cp_mode ring (K and V passed around the cp ring), or a cp that divides the heads");
    }
    s->ok = false;
    return false;
  }
  bool fwd = n->op == OP_SDPA;
  int nin = fwd ? 3 : 6, nout = fwd ? 2 : 3;
  Value *in[6], *out[3];
  for (int i = 0; i < nin; i++) in[i] = to_heads(s, n->in[i], !fwd && i == 4);
  Node *d = ir_node_new(s->g, n->op, nin, in, nout, s->loc);
  d->a = n->a;
  d->a.heads /= cp;
  d->a.kv_heads /= cp;
  if (fwd) {
    Shape ls = shard_local_of(s, n->out[1]->shape, &lsh); /* [B, H, S / cp] -> [B, H / cp, S] */
    ls.dim[1] /= cp;
    ls.dim[2] *= cp;
    set_value(s, d->out[0], in[0]->dtype, in[0]->shape, in[0]->sharding, in[0]);
    set_value(s, d->out[1], n->out[1]->dtype, ls, heads_split(lsh, true), in[0]);
    out[0] = to_seq(s, d->out[0], false, n->in[0]->sharding);
    out[1] = to_seq(s, d->out[1], true, lsh);
  } else {
    for (int i = 0; i < 3; i++) {
      set_value(s, d->out[i], in[i]->dtype, in[i]->shape, in[i]->sharding, in[i]);
      out[i] = to_seq(s, d->out[i], false, n->in[i]->sharding);
    }
  }
  replace(s, n, out);
  return true;
}

/* sdpa (inputs redistributed to the heads x cp target, heads local) as ring attention;
 * lsh: the lse's sharding. */
void shard_cp_sdpa(Sh *s, Node *n, Sharding lsh) {
  /* (all2all refused: the ring keeps the graph whole while the error stops the compile) */
  if (s->m->plan.cp_mode == CP_ALL2ALL && sdpa_all2all(s, n, lsh)) return;
  Value *q = n->in[0], *k = n->in[1], *v = n->in[2];
  Value *pos = positions(s, shard_ldim(s, q, 1));
  int cp = s->deg[RT_AX_CP];
  Value *kc = k, *vc = v, *pc = pos;
  Sharding h2[2] = {q->sharding, lsh};
  if (n->op == OP_SDPA) {
    Value *lse_like = n->out[1];
    lse_like->shape = shard_local_of(s, lse_like->shape, &lsh);
    Value *like[2] = {q, lse_like};
    Value *kn, *vn, *pn; /* the next block, in flight while this one is computed */
    hop_kv(s, cp > 1, k, v, pos, &kn, &vn, &pn);
    Node *b = emit_like(s, OP_ATTN_BLOCK, n, 5, (Value *[]){q, k, v, pos, pos}, 2, like, h2);
    Value *o = b->out[0], *lse = b->out[1];
    for (int j = 1; j < cp; j++) {
      kc = kn, vc = vn, pc = pn;
      hop_kv(s, j + 1 < cp, kc, vc, pc, &kn, &vn, &pn);
      Node *bj = emit_like(s, OP_ATTN_BLOCK, n, 5, (Value *[]){q, kc, vc, pos, pc}, 2, like, h2);
      Node *c = emit_like(s, OP_ATTN_COMBINE, n, 4, (Value *[]){o, lse, bj->out[0], bj->out[1]}, 2, like, h2);
      o = c->out[0];
      lse = c->out[1];
    }
    replace(s, n, (Value *[]){o, lse});
    return;
  }
  /* sdpa_bwd: inputs (q, k, v, o, lse, do) */
  Value *o = n->in[3], *lse = n->in[4], *dout = n->in[5];
  Value *like[3] = {q, k, v};
  Sharding h3[3] = {q->sharding, k->sharding, v->sharding};
  Value *kn, *vn, *pn;
  hop_kv(s, cp > 1, k, v, pos, &kn, &vn, &pn);
  Node *b = emit_like(s, OP_ATTN_BLOCK_BWD, n, 8, (Value *[]){q, k, v, o, lse, dout, pos, pos}, 3, like, h3);
  Value *dq = b->out[0], *dk = b->out[1], *dv = b->out[2];
  for (int j = 1; j < cp; j++) {
    kc = kn, vc = vn, pc = pn;
    dk = hop(s, dk, TAG_DK); /* the accumulator of the block now held: every rank before has added its share */
    dv = hop(s, dv, TAG_DV); /* (in flight while the block is computed, waited before the adds) */
    hop_kv(s, j + 1 < cp, kc, vc, pc, &kn, &vn, &pn);
    Node *bj = emit_like(s, OP_ATTN_BLOCK_BWD, n, 8, (Value *[]){q, kc, vc, o, lse, dout, pos, pc}, 3, like, h3);
    dq = add(s, dq, bj->out[0]);
    dk = add(s, dk, bj->out[1]);
    dv = add(s, dv, bj->out[2]);
  }
  dk = hop(s, dk, TAG_DK); /* home: the accumulators hold every rank's share of the next rank's block */
  dv = hop(s, dv, TAG_DV);
  replace(s, n, (Value *[]){dq, dk, dv});
}
