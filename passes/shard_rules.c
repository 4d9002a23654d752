/* passes/shard_rules.c — the shard pass's propagation rules for the generic ops: elementwise,
 * matmul (column / row split), reshape, transpose, slice / pad, concat, reductions, norms,
 * optimizer updates, and the seeds (sources: token inputs split over dp). See shard.c. */
#include <string.h>

#include "shard_internal.h"

/* ---- rules ---------------------------------------------------------------------------- */


static bool linear_ok(OpKind op, int i) {
  switch (op) {
  case OP_NEG: case OP_SCALE: case OP_CAST: return true;
  case OP_MUL: return true;
  case OP_DIV: return i == 0;
  default: return false;
  }
}

void shard_rule_ew(Sh *s, Node *n) {
  Value *o = n->out[0];
  int r = o->shape.rank;
  if (n->op == OP_CAST && shard_info(s, n->in[0])->undecided) {
    /* a parameter's compute copy (bf16): decided with it, where the copy is first used */
    VInfo *xi = shard_info(s, n->in[0]), *oi = shard_info(s, o);
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
    if (!shard_info(s, n->in[i])->undecided && n->in[i]->sharding.partial) npart++, pmask = n->in[i]->sharding.partial;
  bool keep = false;
  if (npart > 0) {
    if (n->op == OP_ADD || n->op == OP_SUB) {
      keep = npart == n->nin;
      for (int i = 0; keep && i < n->nin; i++) keep = n->in[i]->sharding.partial == pmask;
    } else if (npart == 1) {
      for (int i = 0; i < n->nin; i++)
        if (!shard_info(s, n->in[i])->undecided && n->in[i]->sharding.partial) keep = linear_ok(n->op, i);
    }
  }
  if (!keep) {
    pmask = 0;
    for (int i = 0; i < n->nin; i++) n->in[i] = shard_settle(s, n->in[i]);
  }
  Sharding out = shard_repl();
  out.partial = pmask;
  for (int d = 0; d < r; d++) {
    for (int i = 0; i < n->nin; i++) {
      Value *x = n->in[i];
      int xd = d - (r - x->shape.rank);
      if (xd < 0 || shard_info(s, x)->undecided) continue;
      int a = x->sharding.split[xd], in = a >= 0 ? x->sharding.inner[xd] : -1;
      if (a < 0 || shard_ldim(s, x, xd) != o->shape.dim[d] || shard_axis_used(&out, a, d) ||
          (in >= 0 && shard_axis_used(&out, in, d)))
        continue;
      out.split[d] = (int8_t)a;
      out.blocks[d] = x->sharding.blocks[xd];
      out.inner[d] = (int8_t)in;
      break;
    }
    for (int i = 0; i < n->nin; i++) {
      int xd = d - (r - n->in[i]->shape.rank);
      if (xd >= 0 && !shard_info(s, n->in[i])->undecided && shard_info(s, n->in[i])->role[xd]) {
        shard_info(s, o)->role[d] = shard_info(s, n->in[i])->role[xd];
        break;
      }
    }
  }
  for (int i = 0; i < n->nin; i++) {
    Value *x = n->in[i];
    Sharding t = shard_repl();
    t.partial = keep ? x->sharding.partial : 0;
    int off = r - x->shape.rank;
    for (int xd = 0; xd < x->shape.rank; xd++) {
      bool full = shard_info(s, x)->undecided ? x->shape.dim[xd] == o->shape.dim[xd + off] : shard_ldim(s, x, xd) == o->shape.dim[xd + off];
      if (full && o->shape.dim[xd + off] > 1) {
        t.split[xd] = out.split[xd + off];
        t.blocks[xd] = out.blocks[xd + off];
        t.inner[xd] = out.inner[xd + off];
      }
    }
    n->in[i] = shard_redist(s, x, t);
  }
  shard_set_out(s, n, 0, out);
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

void shard_rule_matmul(Sh *s, Node *n) {
  Value *A = n->in[0], *B = n->in[1], *o = n->out[0];
  int am, ak, bn, bk;
  mm_dims(A, n->a.ta, false, &am, &ak);
  mm_dims(B, n->a.tb, true, &bn, &bk);
  shard_decide_repl(s, A);
  /* partial sums: linear in each operand alone */
  if (A->sharding.partial && !shard_info(s, B)->undecided && B->sharding.partial) B = shard_settle(s, B);
  if (shard_info(s, B)->undecided) {
    Sharding h = shard_repl();
    int tp = RT_AX_TP;
    int64_t K = B->shape.dim[bk], N = B->shape.dim[bn];
    if (A->sharding.split[ak] == tp) {
      int bl = A->sharding.blocks[ak];
      if (shard_divides(s, K, tp, bl)) {
        h.split[bk] = (int8_t)tp;
        h.blocks[bk] = (uint8_t)bl;
      }
    } else if (s->deg[tp] > 1 && B->shape.rank == 2 && !shard_feeds_repl_attn(s, o, 0) && !shard_from_repl_attn(s, A, 0)) {
      int bl = shard_slice_blocks(s, o, o->shape.rank - 1, 0);
      if (!shard_divides(s, N, tp, bl)) {
        char fix[160];
        TpChoices ch;
        snprintf(fix, sizeof fix, "a column-parallel weight needs its %s%lld columns split %d ways; use tp %s",
                 bl > 1 ? "blocks of " : "", (long long)(bl > 1 ? N / bl : N), s->deg[tp],
                 shard_tp_choices(s, bl > 1 ? N / bl : N, bl > 1 ? N / bl : N, &ch));
        shard_error_tp(s, "the weight's output dim", N, fix);
        shard_decide_repl(s, B);
      } else {
        h.split[bn] = (int8_t)tp;
        h.blocks[bn] = (uint8_t)(bl > 1 ? bl : 0);
      }
    }
    shard_decide(s, B, h);
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
  } else if (ka >= 0 && !shard_axis_used(&B->sharding, ka, bk)) {
    kx = ka;
    kbl = A->sharding.blocks[ak];
  } else if (kb >= 0 && !shard_axis_used(&A->sharding, kb, ak)) {
    kx = kb;
    kbl = B->sharding.blocks[bk];
  }
  ta.split[ak] = tb.split[bk] = (int8_t)kx;
  ta.blocks[ak] = tb.blocks[bk] = (uint8_t)(kx >= 0 ? kbl : 0);
  /* output dims: A's leading (but where cb contracts them) and m, B's n; an axis used twice gathers A's dim */
  Sharding out = shard_repl();
  int r = o->shape.rank;
  int lead = A->shape.rank - 2, olead = n->a.cb ? 0 : lead;
  for (int d = 0; d < olead; d++) {
    out.split[d] = ta.split[d];
    out.blocks[d] = ta.blocks[d];
  }
  out.split[r - 2] = ta.split[am];
  out.blocks[r - 2] = ta.blocks[am];
  int na = tb.split[bn];
  if (na >= 0) {
    for (int d = 0; d < r - 1; d++)
      if (out.split[d] == na) {
        int ad = d < olead ? d : am;
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
        int ad = d < olead ? d : am;
        ta.split[ad] = -1;
        out.split[d] = -1;
      }
  out.split[r - 1] = tb.split[bn];
  out.blocks[r - 1] = tb.blocks[bn];
  /* cb: the leading dims are contracted like k: an axis splitting one of them makes the result a partial sum over
   * it, unless it also splits m, n or k (then that leading dim is gathered) */
  unsigned summed = kx >= 0 ? 1u << kx : 0;
  for (int d = 0; d < lead && n->a.cb; d++) {
    int ax = ta.split[d];
    if (ax >= 0 && (ax == kx || ax == ta.split[am] || ax == tb.split[bn] || (summed & (1u << ax)))) {
      ta.split[d] = -1;
      ta.blocks[d] = 0;
      ta.inner[d] = -1;
    }
    if (ta.split[d] >= 0) summed |= 1u << ta.split[d];
    if (ta.split[d] >= 0 && ta.inner[d] >= 0) summed |= 1u << ta.inner[d];
  }
  /* B's own leading dims (batched matmuls) follow A's */
  int blead = B->shape.rank - 2;
  for (int d = 0; d < blead; d++) {
    int od = lead - blead + d;
    tb.split[d] = od >= 0 ? ta.split[od] : -1;
    tb.blocks[d] = od >= 0 ? ta.blocks[od] : 0;
    if (n->a.cb) tb.inner[d] = ta.inner[d];
  }
  ta.partial = A->sharding.partial;
  tb.partial = B->sharding.partial;
  if ((ta.partial | tb.partial) & summed) { /* a partial over a contracted dim's axis cannot stay */
    A = shard_settle(s, A);
    B = shard_settle(s, B);
    ta.partial = A->sharding.partial;
    tb.partial = B->sharding.partial;
  }
  n->in[0] = shard_redist(s, A, ta);
  n->in[1] = shard_redist(s, B, tb);
  out.partial = (uint8_t)(ta.partial | tb.partial | summed);
  for (int d = 0; d < olead; d++) shard_copy_roles(s, o, d, A, d);
  shard_copy_roles(s, o, r - 2, A, am);
  shard_copy_roles(s, o, r - 1, B, bn);
  shard_set_out(s, n, 0, out);
}

/* Reshape: dims grouped by equal products; a group keeps a split of its first
 * input dim on its first output dim when the degree divides it; other splits in a
 * changed group are gathered first. */
void shard_rule_reshape(Sh *s, Node *n) {
  Value *x = n->in[0], *o = n->out[0];
  shard_decide_repl(s, x);
  Shape X = shard_logical_shape(s, x), Y = o->shape;
  Sharding need = x->sharding, out = shard_repl();
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
      else if (d == i0 && x->sharding.blocks[d] <= 1 && j > j0 && shard_divides(s, Y.dim[j0], a, 1)) keep = true;
      if (keep) {
        out.split[j0] = (int8_t)a;
        out.blocks[j0] = same ? x->sharding.blocks[d] : 0;
      } else {
        need.split[d] = -1;
        need.blocks[d] = 0;
      }
    }
    if (same) shard_copy_roles(s, o, j0, x, i0);
    else if (j > j0 && i > i0) shard_copy_roles(s, o, j0, x, i0);
  }
  n->in[0] = shard_redist(s, x, need);
  shard_set_out(s, n, 0, out);
}

void shard_rule_transpose(Sh *s, Node *n) {
  Value *x = n->in[0];
  shard_decide_repl(s, x);
  Sharding h = x->sharding;
  int r = x->shape.rank;
  int8_t t = h.split[r - 1];
  h.split[r - 1] = h.split[r - 2];
  h.split[r - 2] = t;
  uint8_t b = h.blocks[r - 1];
  h.blocks[r - 1] = h.blocks[r - 2];
  h.blocks[r - 2] = b;
  shard_copy_roles(s, n->out[0], r - 1, x, r - 2);
  shard_copy_roles(s, n->out[0], r - 2, x, r - 1);
  for (int d = 0; d < r - 2; d++) shard_copy_roles(s, n->out[0], d, x, d);
  shard_set_out(s, n, 0, h);
}

/* slice / pad along a split axis: whole blocks map to local blocks. */
void shard_rule_slice_pad(Sh *s, Node *n) {
  Value *x = n->in[0];
  shard_decide_repl(s, x);
  int ax = n->a.axis, a = x->sharding.split[ax];
  for (int d = 0; d < x->shape.rank; d++) shard_copy_roles(s, n->out[0], d, x, d);
  Sharding h = x->sharding;
  if (a >= 0) {
    int64_t N = shard_ldim(s, x, ax), nb = N / rt_blocks_count(x->sharding.blocks[ax]);
    int t = shard_degree(s, a);
    bool ok = x->sharding.blocks[ax] != RT_BLOCKS_ZIGZAG; /* a zigzag split is gathered first */
    if (n->op == OP_SLICE) ok = ok && n->a.start % nb == 0 && n->a.len % nb == 0 && n->a.len > 0;
    else ok = ok && n->a.start % nb == 0 && n->a.len % nb == 0;
    if (ok) {
      int64_t outn = n->op == OP_SLICE ? n->a.len : n->a.len;
      h.blocks[ax] = (uint8_t)(outn / nb > 1 ? outn / nb : 0);
      n->a.start = n->a.start / nb * (nb / t);
      n->a.len = n->a.len / t;
      shard_set_out(s, n, 0, h);
      return;
    }
    x = shard_gather_dim(s, x, ax);
    n->in[0] = x;
    h = x->sharding;
  }
  shard_set_out(s, n, 0, h);
}

void shard_rule_concat(Sh *s, Node *n) {
  int ax = n->a.axis;
  for (int i = 0; i < n->nin; i++) shard_decide_repl(s, n->in[i]);
  uint8_t pm = n->in[0]->sharding.partial;
  bool samep = true;
  for (int i = 0; i < n->nin; i++) samep &= n->in[i]->sharding.partial == pm;
  if (!samep)
    for (int i = 0; i < n->nin; i++) n->in[i] = shard_settle(s, n->in[i]);
  Value *x0 = n->in[0];
  int a = x0->sharding.split[ax];
  int64_t nb = 0;
  int blocks = 0;
  bool split_ok = a >= 0;
  for (int i = 0; i < n->nin && split_ok; i++) {
    Value *x = n->in[i];
    int bl = rt_blocks_count(x->sharding.blocks[ax]);
    int64_t b = shard_ldim(s, x, ax) / bl;
    if (x->sharding.split[ax] != a || (nb && b != nb) || x->sharding.blocks[ax] == RT_BLOCKS_ZIGZAG) split_ok = false;
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
    n->in[i] = shard_redist(s, n->in[i], t);
  }
  for (int d = 0; d < x0->shape.rank; d++) shard_copy_roles(s, n->out[0], d, x0, d);
  shard_set_out(s, n, 0, h);
}

/* reduce_sum to a smaller shape: summed split dims become partial. */
void shard_rule_reduce_bcast(Sh *s, Node *n) {
  Value *x = n->in[0], *o = n->out[0];
  shard_decide_repl(s, x);
  int rx = x->shape.rank, ro = o->shape.rank;
  Sharding h = shard_repl();
  h.partial = x->sharding.partial;
  if (n->op == OP_REDUCE_SUM) {
    for (int d = 0; d < rx; d++) {
      int od = d - (rx - ro), a = x->sharding.split[d];
      bool kept = od >= 0 && o->shape.dim[od] == shard_ldim(s, x, d) && shard_ldim(s, x, d) > 1;
      int in = a >= 0 ? x->sharding.inner[d] : -1;
      if (kept) {
        h.split[od] = (int8_t)a;
        h.blocks[od] = x->sharding.blocks[d];
        h.inner[od] = (int8_t)in;
        shard_copy_roles(s, o, od, x, d);
      } else if (a >= 0) {
        h.partial |= (uint8_t)(1u << a);
        if (in >= 0) h.partial |= (uint8_t)(1u << in);
      }
    }
  } else {
    for (int d = 0; d < rx; d++) {
      int od = d + (ro - rx);
      if (x->sharding.split[d] >= 0 && shard_ldim(s, x, d) == o->shape.dim[od]) {
        h.split[od] = x->sharding.split[d];
        h.blocks[od] = x->sharding.blocks[d];
        h.inner[od] = x->sharding.inner[d];
      }
      shard_copy_roles(s, o, od, x, d);
    }
  }
  shard_set_out(s, n, 0, h);
}

void shard_rule_full_reduce(Sh *s, Node *n) {
  Value *x = n->in[0];
  shard_decide_repl(s, x);
  if (n->op == OP_SUMSQ) x = n->in[0] = shard_settle(s, x);
  Sharding h = shard_repl();
  h.partial = x->sharding.partial;
  for (int d = 0; d < x->shape.rank; d++)
    if (x->sharding.split[d] >= 0) {
      h.partial |= (uint8_t)(1u << x->sharding.split[d]);
      if (x->sharding.inner[d] >= 0) h.partial |= (uint8_t)(1u << x->sharding.inner[d]);
    }
  if (n->op == OP_MEAN && h.partial) { /* a local mean would divide by the local count: sum, then scale */
    Shape L = shard_logical_shape(s, x);
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
  shard_set_out(s, n, 0, h);
}

void shard_rule_norm(Sh *s, Node *n) {
  Value *x = shard_settle(s, n->in[0]);
  int r = x->shape.rank;
  x = shard_gather_dim(s, x, r - 1);
  n->in[0] = x;
  bool bwd = n->op == OP_LAYERNORM_BWD || n->op == OP_RMSNORM_BWD;
  int nw = n->op == OP_LAYERNORM ? 2 : 1; /* w[, b] */
  for (int i = 1; i <= nw; i++) n->in[i] = shard_redist(s, n->in[i], shard_repl());
  if (bwd) {
    Sharding t = x->sharding;
    n->in[2] = shard_redist(s, shard_settle(s, n->in[2]), t);
  }
  for (int d = 0; d < r; d++) shard_copy_roles(s, n->out[0], d, x, d);
  shard_set_out(s, n, 0, x->sharding);
  if (bwd) {
    Sharding p = shard_repl();
    for (int d = 0; d < r; d++)
      if (x->sharding.split[d] >= 0) {
        p.partial |= (uint8_t)(1u << x->sharding.split[d]);
        if (x->sharding.inner[d] >= 0) p.partial |= (uint8_t)(1u << x->sharding.inner[d]);
      }
    for (int i = 1; i < n->nout; i++) shard_set_out(s, n, i, p);
  }
}

void shard_rule_update(Sh *s, Node *n) {
  Value *p = n->in[0];
  shard_decide_repl(s, p);
  Sharding h = p->sharding;
  int nst = n->op == OP_ADAMW_UPDATE ? 2 : 1;
  n->in[1] = shard_redist(s, shard_settle(s, n->in[1]), h);
  for (int i = 2; i < 2 + nst; i++) n->in[i] = shard_redist(s, n->in[i], h);
  n->in[2 + nst] = shard_redist(s, shard_settle(s, n->in[2 + nst]), shard_repl());
  for (int i = 0; i < n->nout; i++) shard_set_out(s, n, i, h);
}

void shard_rule_source(Sh *s, Node *n) {
  Value *v = n->out[0];
  VInfo *vi = shard_info(s, v);
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
      Sharding h = shard_repl();
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
      shard_cp_seed(s, n, &h);
      int cp = s->deg[RT_AX_CP]; /* sp splits the sequence over tp (each cp rank's zigzag chunks under cp) */
      if (s->sp && v->shape.rank >= 2 && (cp < 2 || h.split[1] == RT_AX_CP)) { /* (cp's own error said it) */
        int q = s->deg[RT_AX_TP] * (cp > 1 ? 2 * cp : 1);
        if (v->shape.dim[1] % q != 0) { /* (was: sp dropped without a word, or an invalid IR under cp) */
          error_at(n->loc, "sp on splits the sequence (%lld tokens of input `%s`) over tp %d%s: it does not divide them",
                   (long long)v->shape.dim[1], n->a.name ? n->a.name : "?", s->deg[RT_AX_TP],
                   cp > 1 ? arena_printf(s->a, " inside each of the 2 x cp = %d chunks", 2 * cp) : "");
          note("pick a sequence length that %d divides, or sp off", q);
          s->ok = false;
        }
      }
      shard_set_out(s, n, 0, h);
      return;
    }
    shard_set_out(s, n, 0, shard_repl());
    return;
  default: shard_set_out(s, n, 0, shard_repl()); return;
  }
}

