/* ir/infer_attn.c — shape and dtype rules of the attention family (rope, sdpa and its context-
 * parallel blocks) and of cross-entropy with its vocab-parallel parts; ir_infer (infer.c) hands
 * these ops here. */
#include <string.h>

#include "infer_int.h"

static bool infer_rope(Node *n) {
  const Shape *x = &in(n, 0)->shape;
  if (!need_float(n, 0, "input")) return false;
  if (x->rank != 3) {
    error_at(n->loc, "rope: input must be [batch, seq, heads * head_dim], got %s", shp(x));
    return false;
  }
  int h = n->a.heads;
  if (h <= 0 || x->dim[2] % h != 0 || (x->dim[2] / h) % 2 != 0) {
    error_at(n->loc, "rope: hidden size %lld of %s is not divisible into %d heads of even size",
             (long long)x->dim[2], shp(x), h);
    return false;
  }
  set_out(n, 0, in(n, 0)->dtype, *x);
  return true;
}

/* q, k, v (inputs 0-2): float tensors [batch, seq, heads * head_dim]. */
static bool need_qkv(const Node *n) {
  for (int i = 0; i < 3; i++) {
    static const char *names[3] = {"q", "k", "v"};
    if (!need_float(n, i, names[i])) return false;
    if (in(n, i)->shape.rank != 3) {
      error_at(n->loc, "%s: %s must be [batch, seq, heads * head_dim], got %s", opname(n), names[i],
               shp(&in(n, i)->shape));
      return false;
    }
  }
  return true;
}

/* q, k, v checks shared by sdpa and sdpa_bwd. */
static bool check_qkv(const Node *n) {
  if (!need_qkv(n)) return false;
  const Shape *q = &in(n, 0)->shape, *k = &in(n, 1)->shape;
  int H = n->a.heads, KV = n->a.kv_heads;
  if (H <= 0 || KV <= 0 || H % KV != 0) {
    error_at(n->loc, "%s: heads (%d) must be a positive multiple of kv_heads (%d)", opname(n), H, KV);
    return false;
  }
  if (q->dim[2] % H != 0) {
    error_at(n->loc, "%s: hidden size %lld of q %s is not divisible by heads (%d)", opname(n),
             (long long)q->dim[2], shp(q), H);
    return false;
  }
  int64_t hd = q->dim[2] / H;
  if (k->dim[0] != q->dim[0] || k->dim[1] != q->dim[1] || k->dim[2] != KV * hd) {
    error_at(n->loc, "%s: k %s does not match q %s with %d kv heads of size %lld (expected [%lld, %lld, %lld])",
             opname(n), shp(k), shp(q), KV, (long long)hd, (long long)q->dim[0], (long long)q->dim[1],
             (long long)(KV * hd));
    return false;
  }
  if (!ir_shape_eq(k, &in(n, 2)->shape)) {
    error_at(n->loc, "%s: k and v shapes differ: %s vs %s", opname(n), shp(k), shp(&in(n, 2)->shape));
    return false;
  }
  return true;
}

static Shape lse_shape(const Shape *q, int heads) {
  Shape s = ir_shape(3, (int64_t[]){q->dim[0], heads, q->dim[1]});
  s.sym[0] = q->sym[0];
  s.sym[2] = q->sym[1];
  return s;
}

static bool infer_sdpa(Node *n) {
  if (!check_qkv(n)) return false;
  const Shape *q = &in(n, 0)->shape;
  set_out(n, 0, in(n, 0)->dtype, *q);
  set_out(n, 1, DT_F32, lse_shape(q, n->a.heads));
  return true;
}

static bool infer_sdpa_bwd(Node *n) {
  if (!check_qkv(n)) return false;
  if (!need_same(n, 0, 3, "q", "o") || !need_same(n, 0, 5, "q", "do")) return false;
  Shape l = lse_shape(&in(n, 0)->shape, n->a.heads);
  if (!ir_shape_eq(&l, &in(n, 4)->shape)) {
    error_at(n->loc, "sdpa_bwd: lse must be %s, got %s", shp(&l), shp(&in(n, 4)->shape));
    return false;
  }
  for (int i = 0; i < 3; i++) set_out(n, i, in(n, i)->dtype, in(n, i)->shape);
  return true;
}

/* ---- attention in key blocks (ring attention) ---- */

/* pos (input i) must be int[n]: the global positions of n rows. */
static bool need_pos(const Node *n, int i, int64_t len, const char *what) {
  if (!need_int(n, i, what)) return false;
  const Shape *p = &in(n, i)->shape;
  if (p->rank != 1 || p->dim[0] != len) {
    error_at(n->loc, "%s: %s must be [%lld], got %s", opname(n), what, (long long)len, shp(p));
    return false;
  }
  return true;
}

static bool infer_rope_at(Node *n) {
  if (!infer_rope(n)) return false;
  return need_pos(n, 1, in(n, 0)->shape.dim[1], "pos");
}

/* q[B, S, H*hd], k and v [B, T, KV*hd], qpos int[S], kpos int[T] (inputs 0, 1, 2, qp, kp). */
static bool check_block(const Node *n, int qp, int kp) {
  if (!need_qkv(n)) return false;
  const Shape *q = &in(n, 0)->shape, *k = &in(n, 1)->shape;
  int H = n->a.heads, KV = n->a.kv_heads;
  if (H <= 0 || KV <= 0 || H % KV != 0 || q->dim[2] % H != 0) {
    error_at(n->loc, "%s: %s with heads %d and kv_heads %d", opname(n), shp(q), H, KV);
    return false;
  }
  int64_t hd = q->dim[2] / H;
  if (k->dim[0] != q->dim[0] || k->dim[2] != KV * hd || !ir_shape_eq(k, &in(n, 2)->shape)) {
    error_at(n->loc, "%s: k %s and v %s do not match q %s with %d kv heads", opname(n), shp(k),
             shp(&in(n, 2)->shape), shp(q), KV);
    return false;
  }
  return need_pos(n, qp, q->dim[1], "qpos") && need_pos(n, kp, k->dim[1], "kpos");
}

static bool infer_attn_block(Node *n) {
  if (!check_block(n, 3, 4)) return false;
  set_out(n, 0, in(n, 0)->dtype, in(n, 0)->shape);
  set_out(n, 1, DT_F32, lse_shape(&in(n, 0)->shape, n->a.heads));
  return true;
}

static bool infer_attn_block_bwd(Node *n) {
  if (!check_block(n, 6, 7)) return false;
  if (!need_same(n, 0, 3, "q", "o") || !need_same(n, 0, 5, "q", "do")) return false;
  Shape l = lse_shape(&in(n, 0)->shape, n->a.heads);
  if (!ir_shape_eq(&l, &in(n, 4)->shape)) {
    error_at(n->loc, "%s: lse must be %s, got %s", opname(n), shp(&l), shp(&in(n, 4)->shape));
    return false;
  }
  for (int i = 0; i < 3; i++) set_out(n, i, in(n, i)->dtype, in(n, i)->shape);
  return true;
}

static bool infer_attn_combine(Node *n) {
  if (!need_float(n, 0, "o1") || !need_same(n, 0, 2, "o1", "o2")) return false;
  const Shape *o = &in(n, 0)->shape;
  if (o->rank != 3 || n->a.heads <= 0 || o->dim[2] % n->a.heads != 0) {
    error_at(n->loc, "%s: o %s is not [batch, seq, heads * head_dim] with %d heads", opname(n), shp(o), n->a.heads);
    return false;
  }
  Shape l = lse_shape(o, n->a.heads);
  for (int i = 1; i <= 3; i += 2)
    if (!ir_shape_eq(&l, &in(n, i)->shape)) {
      error_at(n->loc, "%s: lse must be %s, got %s", opname(n), shp(&l), shp(&in(n, i)->shape));
      return false;
    }
  set_out(n, 0, in(n, 0)->dtype, *o);
  set_out(n, 1, DT_F32, l);
  return true;
}

/* logits[.., V] against targets[..]; len in (0, V] (0 means V). */
static bool check_ce(const Node *n) {
  if (!need_float(n, 0, "logits") || !need_rank_min(n, 0, 1, "logits") || !need_int(n, 1, "targets"))
    return false;
  const Shape *l = &in(n, 0)->shape, *t = &in(n, 1)->shape;
  bool ok = t->rank == l->rank - 1;
  for (int i = 0; ok && i < t->rank; i++) ok = t->dim[i] == l->dim[i];
  if (!ok) {
    error_at(n->loc, "%s: targets %s do not match logits %s (expected the logits' shape without the last dim)",
             opname(n), shp(t), shp(l));
    return false;
  }
  int64_t V = l->dim[l->rank - 1];
  if (n->a.len < 0 || n->a.len > V) {
    error_at(n->loc, "%s: vocabulary length %lld exceeds the logits' last dim %lld", opname(n),
             (long long)n->a.len, (long long)V);
    return false;
  }
  return true;
}

static bool infer_ce(Node *n) {
  if (!check_ce(n)) return false;
  if (n->op == OP_CROSS_ENTROPY) {
    set_out(n, 0, DT_F32, ir_scalar_shape());
    return true;
  }
  if (in(n, 2)->shape.rank != 0) {
    error_at(n->loc, "cross_entropy_bwd: dloss must be a scalar, got %s", shp(&in(n, 2)->shape));
    return false;
  }
  set_out(n, 0, in(n, 0)->dtype, in(n, 0)->shape);
  return true;
}

/* Cross-entropy in parts (inserted by the shard pass; shapes follow the logits' rows). */
static bool infer_ce_part(Node *n) {
  const Shape *l = &in(n, 0)->shape;
  Shape rows = *l;
  if (n->op != OP_CE_LOSS) {
    if (!need_float(n, 0, "logits") || !need_rank_min(n, 0, 1, "logits")) return false;
    rows.rank = l->rank - 1;
  } else {
    rows.rank = l->rank - 1; /* st[.., 2] */
  }
  const Value *tg = n->op == OP_CE_MAX ? NULL : in(n, n->op == OP_CE_LOSS ? 2 : 1);
  if (tg && (!need_int(n, n->op == OP_CE_LOSS ? 2 : 1, "targets") || !ir_shape_eq(&tg->shape, &rows))) {
    error_at(n->loc, "%s: targets %s do not match rows %s", opname(n), shp(tg ? &tg->shape : &rows), shp(&rows));
    return false;
  }
  Shape st = rows;
  st.dim[st.rank] = 2;
  st.sym[st.rank] = -1;
  st.rank++;
  switch (n->op) {
  case OP_CE_MAX: set_out(n, 0, DT_F32, rows); return true;
  case OP_CE_SUMS: set_out(n, 0, DT_F32, st); return true;
  case OP_CE_LOSS: {
    int64_t two = 2;
    set_out(n, 0, DT_F32, ir_shape(1, &two));
    return true;
  }
  case OP_CE_GRAD:
    if (in(n, 4)->shape.rank != 0) {
      error_at(n->loc, "ce_grad: scale must be a scalar, got %s", shp(&in(n, 4)->shape));
      return false;
    }
    set_out(n, 0, in(n, 0)->dtype, in(n, 0)->shape);
    return true;
  default: unreachable();
  }
}

bool ir_infer_attn(Node *n) {
  switch (n->op) {
  case OP_ROPE: return infer_rope(n);
  case OP_SDPA: return infer_sdpa(n);
  case OP_SDPA_BWD: return infer_sdpa_bwd(n);
  case OP_ROPE_AT: return infer_rope_at(n);
  case OP_ATTN_BLOCK: return infer_attn_block(n);
  case OP_ATTN_BLOCK_BWD: return infer_attn_block_bwd(n);
  case OP_ATTN_COMBINE: return infer_attn_combine(n);
  case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_BWD: return infer_ce(n);
  case OP_CE_MAX: case OP_CE_SUMS: case OP_CE_LOSS: case OP_CE_GRAD: return infer_ce_part(n);
  default: die("ir_infer_attn: %s is not an attention or cross-entropy op", ir_ops[n->op].name);
  }
}
