/* passes/shard_tp.c — what only tensor (and sequence) parallelism needs in the shard pass:
 * look-ahead for equal slices of a column-split output (a fused QKV), the tp degrees offered
 * in notes, attention by heads (replicated when tp does not divide them), rope, the
 * vocab-parallel embedding and cross-entropy (ce_max / ce_sums parts, never gathering the
 * logits). See shard.c. */
#include <stdio.h>
#include <string.h>

#include "shard_internal.h"

/* ---- look-ahead: equal slices of a column-split output --------------------------------- */

/* How many equal blocks the uses of v cut `axis` into (1: none found). Follows
 * elementwise ops that keep the axis. */
int shard_slice_blocks(const Sh *s, const Value *v, int axis, int depth) {
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
        int b = shard_slice_blocks(s, o, oa, depth + 1);
        if (b > 1) return b;
      }
    }
  }
  return 1;
}

/* The tp degrees (powers of two up to s->max_tp) that divide n and n2, for notes; written to buf. */
const char *shard_tp_choices(const Sh *s, int64_t n, int64_t n2, TpChoices *buf) {
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
void shard_scan_attention(Sh *s, Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->body) shard_scan_attention(s, n->body);
    if ((n->op != OP_SDPA && n->op != OP_ROPE) || heads_split(s, n)) continue;
    ptrmap_put(&s->attn_repl, n, 1);
    if (n->op != OP_SDPA) continue;
    warning_at(n->loc, "attention has %d heads and %d kv heads: tp %d does not divide them, so attention runs "
                       "replicated on every tp rank (the MLP, the embedding and the head are split)",
               n->a.heads, n->a.kv_heads, s->deg[RT_AX_TP]);
    TpChoices ch;
    note("tp that splits the heads too: %s", shard_tp_choices(s, n->a.heads, n->a.kv_heads, &ch));
  }
}

static bool in_repl_attn(const Sh *s, const Node *n) {
  intptr_t p;
  return ptrmap_get(&s->attn_repl, n, &p);
}

/* Does v flow (through elementwise ops, slices and reshapes) into replicated attention? */
bool shard_feeds_repl_attn(const Sh *s, const Value *v, int depth) {
  if (depth > 4) return false;
  for (int i = 0; i < s->nold; i++) {
    const Node *u = s->old[i];
    bool uses = false;
    for (int j = 0; j < u->nin; j++) uses |= u->in[j] == v;
    if (!uses) continue;
    if (in_repl_attn(s, u)) return true;
    if (((ir_ops[u->op].flags & F_EW) || u->op == OP_SLICE || u->op == OP_RESHAPE) && shard_feeds_repl_attn(s, u->out[0], depth + 1))
      return true;
  }
  return false;
}

/* Does v come (through the same kinds of op) from replicated attention? */
bool shard_from_repl_attn(const Sh *s, const Value *v, int depth) {
  const Node *d = v->def;
  if (in_repl_attn(s, d)) return true;
  if (depth > 4 || !((ir_ops[d->op].flags & F_EW) || d->op == OP_RESHAPE || d->op == OP_TRANSPOSE)) return false;
  for (int j = 0; j < d->nin; j++)
    if (shard_from_repl_attn(s, d->in[j], depth + 1)) return true;
  return false;
}


/* q/k/v-like values: batch dim may be split, sequence dims gathered, heads (last dim) on tp. */
static Sharding heads_target(Sh *s, const Value *x, int head_axis) {
  Sharding h = shard_repl();
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
  int t = shard_degree(s, ax);
  int H = n->a.heads, KV = n->op == OP_ROPE ? n->a.heads : n->a.kv_heads;
  if (H % t == 0 && KV % t == 0) return true;
  if (n->op == OP_ROPE) error_at(s->loc, "rope over %d heads: tp %d does not divide the heads", H, t);
  else error_at(s->loc, "attention has %d heads and %d kv heads: tp %d must divide both", H, KV, t);
  TpChoices ch;
  note("tensor parallelism gives each rank whole heads; tp that divides both here: %s", shard_tp_choices(s, H, KV, &ch));
  s->ok = false;
  return false;
}

void shard_rule_rope(Sh *s, Node *n) {
  Value *x = shard_settle(s, n->in[0]);
  shard_decide_repl(s, x);
  int ax = head_axis_of(s, n, 1);
  if (!check_heads(s, n, ax)) ax = -1;
  n->in[0] = shard_redist(s, x, shard_cp_seq(s, heads_target(s, x, ax)));
  for (int d = 0; d < x->shape.rank; d++) shard_copy_roles(s, n->out[0], d, x, d);
  if (ax >= 0) n->a.heads /= shard_degree(s, ax);
  if (shard_cp_on(s)) {
    shard_cp_rope(s, n);
    return;
  }
  shard_set_out(s, n, 0, n->in[0]->sharding);
}

void shard_rule_sdpa(Sh *s, Node *n) {
  int nq = 3;
  for (int i = 0; i < n->nin; i++) n->in[i] = shard_settle(s, n->in[i]);
  int ax = head_axis_of(s, n, nq);
  if (!check_heads(s, n, ax)) ax = -1;
  Value *q = n->in[0];
  Sharding t = shard_cp_seq(s, heads_target(s, q, ax));
  Sharding l = shard_repl(); /* lse [B, H, S] */
  l.split[0] = t.split[0];
  l.split[1] = (int8_t)ax;
  l.split[2] = t.split[1];
  l.blocks[2] = t.blocks[1];
  for (int i = 0; i < n->nin; i++) n->in[i] = shard_redist(s, n->in[i], n->op == OP_SDPA_BWD && i == 4 ? l : t);
  if (ax >= 0) {
    n->a.heads /= shard_degree(s, ax);
    n->a.kv_heads /= shard_degree(s, ax);
  }
  if (shard_cp_on(s)) {
    for (int d = 0; d < q->shape.rank; d++) shard_copy_roles(s, n->out[0], d, q, d);
    shard_cp_sdpa(s, n, l);
    return;
  }
  if (n->op == OP_SDPA) {
    for (int d = 0; d < q->shape.rank; d++) shard_copy_roles(s, n->out[0], d, q, d);
    shard_set_out(s, n, 0, t);
    shard_set_out(s, n, 1, l);
  } else {
    for (int i = 0; i < 3; i++) {
      for (int d = 0; d < q->shape.rank; d++) shard_copy_roles(s, n->out[i], d, n->in[i], d);
      shard_set_out(s, n, i, t);
    }
  }
}

/* The table an index value is looked up in (the forward EMBED reading it). */
static Value *table_of(Sh *s, Value *idx) {
  intptr_t p;
  return ptrmap_get(&s->embed, idx, &p) ? (Value *)p : NULL;
}

void shard_rule_embed(Sh *s, Node *n) {
  Value *tab = n->in[0], *idx = n->in[1];
  if (shard_info(s, tab)->undecided) {
    Sharding h = shard_repl();
    int64_t V = tab->shape.dim[0];
    bool positions = idx->def->op == OP_IOTA;
    if (s->deg[RT_AX_TP] > 1 && !positions) {
      if (shard_divides(s, V, RT_AX_TP, 1)) h.split[0] = RT_AX_TP;
      else {
        char fix[160];
        snprintf(fix, sizeof fix, "the vocab-parallel embedding splits its rows over tp; pad the vocabulary to a "
                                  "multiple of %d (e.g. %lld)", 64 * s->deg[RT_AX_TP],
                 (long long)((V + 64 * s->deg[RT_AX_TP] - 1) / (64 * s->deg[RT_AX_TP]) * (64 * s->deg[RT_AX_TP])));
        shard_error_tp(s, "the vocabulary", V, fix);
      }
    }
    shard_decide(s, tab, h);
  }
  int va = tab->sharding.split[0];
  Sharding ti = idx->sharding;
  ti.partial = 0;
  if (va >= 0)
    for (int d = 0; d < idx->shape.rank; d++)
      if (ti.split[d] == va) ti.split[d] = -1;
  ptrmap_put(&s->embed, idx, (intptr_t)tab);
  idx = n->in[1] = shard_redist(s, idx, ti);
  ptrmap_put(&s->embed, idx, (intptr_t)tab);
  Sharding h = shard_repl();
  for (int d = 0; d < idx->shape.rank; d++) {
    h.split[d] = idx->sharding.split[d];
    h.blocks[d] = idx->sharding.blocks[d];
    shard_copy_roles(s, n->out[0], d, idx, d);
  }
  h.split[idx->shape.rank] = tab->sharding.split[1];
  if (va >= 0) {
    n->a.sharded = true;
    n->a.mesh_axis = va;
    h.partial = (uint8_t)(1u << va);
  }
  shard_set_out(s, n, 0, h);
}

void shard_rule_embed_bwd(Sh *s, Node *n) {
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
  dy = n->in[1] = shard_redist(s, dy, t);
  Sharding ti = shard_repl();
  for (int d = 0; d < r - 1; d++) {
    ti.split[d] = t.split[d];
    ti.blocks[d] = t.blocks[d];
  }
  n->in[0] = shard_redist(s, idx, ti);
  Sharding h = shard_repl();
  h.partial = dy->sharding.partial;
  for (int d = 0; d < r - 1; d++)
    if (t.split[d] >= 0) h.partial |= (uint8_t)(1u << t.split[d]);
  if (va >= 0) {
    h.split[0] = (int8_t)va;
    n->a.sharded = true;
    n->a.mesh_axis = va;
  }
  shard_set_out(s, n, 0, h);
}

/* Scalar value from element i of a [2] vector. */
static Value *elem(Sh *s, Value *v, int i) {
  Attrs a = {0};
  a.axis = 0;
  a.start = i;
  a.len = 1;
  int64_t one = 1;
  Value *x = ir_emit(s->g, OP_SLICE, 1, &v, v->dtype, ir_shape(1, &one), &a, s->loc);
  x->sharding = shard_repl();
  Attrs b = {0};
  Value *y = ir_emit(s->g, OP_RESHAPE, 1, &x, v->dtype, ir_scalar_shape(), &b, s->loc);
  y->sharding = shard_repl();
  return y;
}

static Value *binop(Sh *s, OpKind op, Value *a, Value *b) {
  Value *in[2] = {a, b};
  Value *y = ir_emit(s->g, op, 2, in, a->dtype, a->shape, NULL, s->loc);
  y->sharding = shard_repl();
  return y;
}

/* cross-entropy over logits split on rows and/or vocab: in parts, never gathered. */
void shard_rule_ce(Sh *s, Node *n) {
  Value *orig = n->in[0];
  Value *lg = shard_settle(s, n->in[0]);
  int r = lg->shape.rank;
  int va = lg->sharding.split[r - 1];
  if (va >= 0 && lg->sharding.blocks[r - 1] > 1) {
    lg = shard_gather_dim(s, lg, r - 1);
    va = -1;
  }
  for (int d = 0; d < r - 1 && va >= 0; d++)
    if (lg->sharding.split[d] == va) lg = shard_gather_dim(s, lg, d);
  bool rows = false;
  for (int d = 0; d < r - 1; d++) rows |= lg->sharding.split[d] >= 0;
  Sharding tr = shard_repl();
  for (int d = 0; d < r - 1; d++) {
    tr.split[d] = lg->sharding.split[d];
    tr.blocks[d] = lg->sharding.blocks[d];
  }
  Value *tg = shard_redist(s, n->in[1], tr);
  if (va < 0 && !rows) { /* replicated: the op as it is */
    n->in[0] = lg;
    n->in[1] = tg;
    shard_set_out(s, n, 0, shard_repl());
    CeParts *cp = ARENA_NEW(s->a, CeParts);
    cp->logits = lg;
    ptrmap_put(&s->ce, orig, (intptr_t)cp);
    return;
  }
  int64_t logical_v = shard_ldim(s, lg, r - 1);
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
  ls->sharding = shard_repl();
  for (int d = 0; d < r - 1; d++)
    if (tr.split[d] >= 0) ls->sharding.partial |= (uint8_t)(1u << tr.split[d]);
  ls = shard_settle(s, ls);
  Value *count = elem(s, ls, 1);
  Value *loss = binop(s, OP_DIV, elem(s, ls, 0), count);
  CeParts *cp = ARENA_NEW(s->a, CeParts);
  *cp = (CeParts){m, st, ls, count, lg, va >= 0, va};
  ptrmap_put(&s->ce, orig, (intptr_t)cp);
  /* the node itself is dropped: its output becomes `loss` */
  ptrmap_put(&s->subst, n->out[0], (intptr_t)loss);
  n->op = OP_COUNT; /* marks the node for removal by the caller */
}

void shard_rule_ce_bwd(Sh *s, Node *n) {
  intptr_t p;
  if (!ptrmap_get(&s->ce, n->in[0], &p)) {
    die("shard: cross_entropy_bwd without its forward");
  }
  CeParts *cp = (CeParts *)p;
  if (!cp->st) { /* forward kept as one op */
    for (int i = 0; i < n->nin; i++) n->in[i] = shard_settle(s, n->in[i]);
    n->in[0] = cp->logits;
    shard_set_out(s, n, 0, shard_repl());
    return;
  }
  Value *dl = shard_redist(s, shard_settle(s, n->in[2]), shard_repl());
  Value *scale = binop(s, OP_DIV, dl, cp->count);
  Value *lg = cp->logits;
  int r = lg->shape.rank;
  Sharding tr = shard_repl();
  for (int d = 0; d < r - 1; d++) {
    tr.split[d] = lg->sharding.split[d];
    tr.blocks[d] = lg->sharding.blocks[d];
  }
  Value *tg = shard_redist(s, n->in[1], tr);
  Attrs a = {0};
  a.len = n->a.len > 0 ? n->a.len : shard_ldim(s, lg, r - 1);
  a.sharded = cp->vocab;
  a.mesh_axis = cp->vocab ? cp->vaxis : 0;
  Value *in5[5] = {lg, tg, cp->m, cp->st, scale};
  Value *g = ir_emit(s->g, OP_CE_GRAD, 5, in5, lg->dtype, lg->shape, &a, s->loc);
  g->sharding = lg->sharding;
  memcpy(shard_info(s, g)->role, shard_info(s, lg)->role, sizeof shard_info(s, lg)->role);
  ptrmap_put(&s->subst, n->out[0], (intptr_t)g);
  n->op = OP_COUNT;
}
