/* passes/zero.c — the `zero` pass: ZeRO stages 1, 2 and 3 (plan `zero N`) over the dp axis.
 *
 * Runs after `buckets`: the gradients reaching the update have been all-reduced over dp in
 * buckets, overlapped with backward (inside the backward loop for a layer's gradients); this pass
 * rewrites those all-reduces and the updates that read them. For every parameter update
 * (adamw_update / sgd_update of the top graph) it picks the shard dim d: the first dim of the
 * parameter's (per-tp-rank) shape that tp does not split and that dp divides (for ZeRO-2, of a
 * layer's stacked parameter [L, ..]: a dim after the layer dim, so that each layer's gradient is
 * scattered inside the backward loop).
 *
 * ZeRO-1 (zero >= 1):
 *     ps  = shard_slice(p)  over dp along d      (this rank's 1/dp of the parameter, no traffic)
 *     gs  = shard_slice(g)  over dp along d      (zero 1: of the all-reduced gradient)
 *     ps', m', v' = adamw_update(ps, gs, m, v)   m, v: STATE values 1/dp the size, S(dp)@d
 *     p'  = all_gather(ps') over dp along d      (every rank's parameter rebuilt)
 * (memplan runs the update on ps's bytes and gathers p' into p's own storage: at the step a rank
 * holds ps and, under zero 1, gs beside the whole parameters, no second full copy.) Under bf16 with
 * persistent weight copies (passes/wshadow.c) the f32 parameter is instead stored split (the master
 * shard, updated in place) and the bf16 copy is what is gathered (passes/zero_master.c).
 * ZeRO-2 (zero >= 2): the gradient's all-reduce becomes a reduce_scatter over dp along d, where
 * the all-reduce was (the member leaves its bucket), so only 1/dp of each gradient is kept (a
 * layer's gradients: the backward loop's stacked outputs are 1/dp) and gs is that shard. The
 * clip's sum of squares over a gradient shard is a partial sum over dp: one all_reduce of those
 * scalars (one bucket) makes the norm the global one again.
 *
 * Under context parallelism every stage shards over the dp x cp group instead of dp (ZeroGroup,
 * zero.h: Megatron's distributed optimizer over dp x cp), since the cp ranks of a replica hold the
 * same parameters and the gradients are all-reduced over that group already: a shard is 1/(dp cp)
 * of the tensor, split over dp and then over cp (S(dp)@d>S(cp), Sharding.inner: member
 * dp_i x cp + cp_i of the group holds block dp_i x cp + cp_i); every collective above is over the
 * group (over=dp with=cp: the runtime's dp*cp group), so ZeRO-2's reduce-scatter replaces the
 * all-reduce over dp x cp with nothing after it, P (dp cp - 1)/(dp cp) bytes per rank, and the
 * optimizer state (ZeRO-2: and gradients, ZeRO-3: and parameters) take 1/(dp cp) of the memory.
 * A dim that dp x cp does not divide is not split (the tensor stays whole, as below). At dp 1 the
 * group is cp alone (over=cp, S(cp)@d; its collectives blocking, as cp's all-reduces are). In the
 * text that follows, read "dp" as the group.
 *
 * With gradient accumulation (passes/zero_sums.c) the running sums are the shards: each micro-step
 * reduce-scatters its gradients (a layer's inside the backward loop) and adds the shard.
 *
 * ZeRO-3 (zero 3): as ZeRO-2, and the parameter itself is stored split (PARAM S(dp)@d, 1/dp of
 * the memory): every reader gathers it right before it reads it — in a layer loop (forward, and
 * again backward) per iteration before the layer's first use of its slice, at top level one
 * all_gather per reading node (a tied embedding: the embedding, the head, the head's backward) —
 * and memplan frees each gathered copy after its use. The update writes the shard and no final
 * all-gather follows (the readers' rewriting: passes/zero_gather.c). Parameters under ZERO3_PERSIST_NUMEL
 * elements per layer stay whole (as
 * ZeRO-2), as does one a repeat carries. The gathers are asynchronous (codegen); a layer loop gathers
 * one layer ahead (prefetch_layer: the loop carries the gathered layer, each iteration starts the
 * next layer's gather at its front). Under bf16 compute a gather moves past the parameter's bf16
 * cast: the cast of the shard is kept split and each of its readers gathers the bf16 copy. It
 * moves past a slice along another dim the same way: a pipeline stage's rows of the stack (an
 * uneven stage's count, an interleaved chunk's rows, then its virtual stage's) are slices of the
 * shard, so those loops too gather a layer at a time with the prefetch, not the whole stack. The gathers
 * issued at one point (a layer's, the prefetch's) become one all-gather where it pays: passes/zero_coalesce.c.
 *
 * Traffic per rank and step, P parameter bytes: plain dp all-reduces 2 P (dp-1)/dp; ZeRO-1 adds
 * the parameter all-gather, P (dp-1)/dp; ZeRO-2 reduce-scatters P (dp-1)/dp instead of the
 * all-reduce, so it moves what plain dp moves (with accumulation: once per micro-step); ZeRO-3 gathers 2 P (dp-1)/dp (forward and
 * backward) instead of ZeRO-2's one. Memory per rank (memplan): optimizer state (AdamW: 2 P f32)
 * / dp; ZeRO-2 also gradients / dp; ZeRO-3 also parameters / dp.
 *
 * The states (ZeRO-2: and gradients, ZeRO-3: and parameters) are ordinary sharded tensors
 * (S(dp)@d), so checkpoints stay logical: the runtime gathers them whole (runtime/train/dist.c),
 * and a checkpoint of any stage resumes under any other. A parameter with no such dim (every dim tp-split or not a
 * multiple of dp: e.g. [2, 34] under dp 4) keeps its state and gradient whole and updates
 * replicated, as under zero 0: exact, only without the saving on that tensor.
 */
#include <string.h>

#include "diag.h"
#include "passes.h"
#include "ptrmap.h"
#include "zero.h"

/* The first dim of v's shape from `from` on that no mesh axis splits and that deg divides, else -1. */
static int shard_dim(const Value *v, int deg, int from) {
  for (int d = from; d < v->shape.rank; d++)
    if (v->sharding.split[d] < 0 && v->shape.dim[d] >= deg && v->shape.dim[d] % deg == 0) return d;
  return -1;
}

int zero_position(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  die("zero: node not in its graph");
}

void zero_split_type(Value *to, const Value *from, int d, ZeroGroup z) {
  to->dtype = from->dtype;
  to->shape = from->shape;
  to->shape.dim[d] = from->shape.dim[d] / z.deg;
  to->sharding = from->sharding;
  to->sharding.split[d] = z.axis;
  to->sharding.inner[d] = z.inner;
  to->sharding.blocks[d] = 0;
}

/* n's collective over the group: over z.axis, with z.with. */
static void over_group(Node *n, ZeroGroup z) {
  n->a.mesh_axis = z.axis;
  n->a.mesh_with = z.with;
}

/* y = shard_slice(x) over the group along d, placed at pos. */
Value *zero_slice_at(Graph *g, Value *x, int d, ZeroGroup z, int pos, SrcLoc loc) {
  Node *s = ir_node_new(g, OP_SHARD_SLICE, 1, &x, 1, loc);
  over_group(s, z);
  s->a.axis = d;
  zero_split_type(s->out[0], x, d, z);
  ir_move_last(g, pos);
  return s->out[0];
}

bool zero_only_reader(const Graph *g, const Value *v, const Node *u) {
  if (v->def->op != OP_STATE && v->def->op != OP_CONST) return false;
  for (int i = 0; i < g->nnodes; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++)
      if (g->nodes[i]->in[j] == v && g->nodes[i] != u) return false;
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == v) return false;
  return true;
}

/* Removes member k (input and output) from a variadic all-reduce; the node goes when none is left. */
void zero_drop_member(Graph *g, Node *ar, int k) {
  for (int j = k; j + 1 < ar->nin; j++) {
    ar->in[j] = ar->in[j + 1];
    ar->out[j] = ar->out[j + 1];
    ar->out[j]->idx = j;
  }
  ar->nin--, ar->nout--;
  ir_touch(g);
  if (ar->nin > 0) return;
  int k2 = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] != ar) g->nodes[k2++] = g->nodes[i];
  g->nnodes = k2;
  ir_touch(g);
}

/* rs = reduce_scatter(x) over the group along d (ar: its all-reduce over the same group), typed as
 * `like` split at d, placed where ar is. */
static Value *scatter_at(Graph *g, Value *x, const Value *like, Node *ar, int d, ZeroGroup z) {
  Node *rs = ir_node_new(g, OP_REDUCE_SCATTER, 1, &x, 1, ar->loc);
  over_group(rs, z);
  rs->a.axis = d;
  zero_split_type(rs->out[0], like, d, z);
  rs->out[0]->name = like->name;
  ir_move_last(g, zero_position(g, ar));
  return rs->out[0];
}

/* A sum over dp, or under cp over dp x cp (the cp ranks of a replica hold the same parameters, each
 * with a partial gradient over its sequence chunk: passes/shard_core.c's combined all-reduce). A sum
 * over another group (over dp alone under cp: a value already whole over cp) is not rewritten. */
bool zero_is_group_sum(const Node *n, ZeroGroup z) {
  return n->op == OP_ALL_REDUCE && n->a.mesh_axis == z.axis && n->a.mesh_with == z.with && n->a.reduce == RED_SUM;
}

/* Readers of gr in g: only the update u and sums of squares (the clip); and results. */
static bool grad_readers_ok(const Graph *g, const Value *gr, const Node *u) {
  const Node *const *r;
  int nr = zero_readers(g, gr, &r); /* (the top graph under ZeRO-3: its readers index, which lists them all) */
  for (int k = 0; k < nr; k++)
    for (int j = 0; j < r[k]->nin; j++)
      if (r[k]->in[j] == gr && r[k] != u && r[k]->op != OP_SUMSQ) return false;
  if (nr >= 0) return true;
  for (int i = 0; i < g->nnodes; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++)
      if (g->nodes[i]->in[j] == gr && g->nodes[i] != u && g->nodes[i]->op != OP_SUMSQ) return false;
  return true;
}

/* During pass_zero: each body's reads of the top graph's values (ir_use_counts_outer), for the sums'
 * reader counts (passes/zero_sums.c), found once per body and again only where a body changed. */
static IrUseMemo *use_memo;

/* ZeRO-2: gr (read by u) arrives reduce-scattered over dp along d instead of all-reduced. Returns
 * the shard (gr itself, retyped, for a backward loop's stacked output), or NULL when gr does not
 * come from a dp all-reduce this can rewrite. */
static Value *scatter_grad(Graph *g, Value *gr, const Node *u, int d, ZeroGroup z) {
  if (!grad_readers_ok(g, gr, u)) return NULL;
  Node *src = gr->def;
  if (zero_is_group_sum(src, z)) {
    Value *summed = zero_scatter_sums_top(g, gr, d, z, use_memo); /* accumulation: the running sum is a shard */
    if (summed) return summed;
    Value *sh = scatter_at(g, src->in[gr->idx], gr, src, d, z);
    zero_drop_member(g, src, gr->idx);
    zero_replace_uses(g, gr, sh);
    return sh;
  }
  if (src->op != OP_REPEAT || gr->idx < src->a.ncarry || d < 1) return NULL;
  Value *summed = zero_scatter_sums(g, src, gr, d, z); /* accumulation: the running sums are shards */
  if (summed) return summed;
  Graph *b = src->body;
  Value *y = b->results[gr->idx];
  if (y->def->graph != b || !zero_is_group_sum(y->def, z) || ir_count_uses(b, y) != 0) return NULL;
  for (int k = 0; k < b->nresults; k++)
    if (k != gr->idx && b->results[k] == y) return NULL;
  Node *ar = y->def;
  b->results[gr->idx] = scatter_at(b, ar->in[y->idx], y, ar, d - 1, z);
  zero_drop_member(b, ar, y->idx);
  Value old = *gr;
  zero_split_type(gr, &old, d, z); /* the stacked gradient: each layer's shard */
  return gr;
}

/* y = all_gather(x) over the group along d, typed `whole`, appended to g. */
Value *zero_gather_new(Graph *g, Value *x, const Value *whole, int d, ZeroGroup z, SrcLoc loc) {
  Node *ag = ir_node_new(g, OP_ALL_GATHER, 1, &x, 1, loc);
  over_group(ag, z);
  ag->a.axis = d;
  ag->out[0]->dtype = whole->dtype;
  ag->out[0]->shape = whole->shape;
  ag->out[0]->sharding = whole->sharding;
  ag->out[0]->name = whole->name;
  return ag->out[0];
}

/* Shards one update u (adamw_update: p, g, m, v, hyper; sgd_update: p, g, m, hyper). */
/* saved: non-NULL where the f32 masters may be stored split (zero_master_wanted), their bytes saved.
 * sole: u is the only reader of its optimizer state (zero_only_reader, found for every update at once). */
static bool shard_update(Graph *g, Node *u, ZeroGroup z, int stage, int64_t *saved, bool sole) {
  Value *p = u->in[0], *gr = u->in[1];
  int nstate = u->op == OP_ADAMW_UPDATE ? 2 : 1;
  bool looped = gr->def->op == OP_REPEAT; /* a layer's gradient, from the backward loop */
  /* a layer's stacked parameter that ZeRO-3 gathers per layer: under accumulation its gradient
   * comes from the micro-step region's sum, not the backward loop, but the layer loops inside
   * the region still read it per layer */
  bool stacked = looped || (stage >= 3 && zero_read_as_xs(g, p));
  int d = shard_dim(p, z.deg, stage >= 2 && stacked ? 1 : 0);
  if (d < 0 && stage >= 2 && stacked) d = shard_dim(p, z.deg, 0); /* then as ZeRO-1 */
  if (d < 0 || p->def->op != OP_PARAM) return false;
  if (!ir_shape_eq(&gr->shape, &p->shape) || gr->sharding.split[d] >= 0) return false;
  for (int k = 0; k < nstate; k++)
    if (!sole || !ir_shape_eq(&u->in[2 + k]->shape, &p->shape)) return false;
  Value *gs = stage >= 2 ? scatter_grad(g, gr, u, d, z) : NULL;
  bool split_p = stage >= 3 && gs && zero_can_split_param(g, p, u, d, stacked);
  if (split_p) {
    zero_split_param(g, p, u, d, z);
    u->in[1] = gs;
    for (int k = 0; k < nstate; k++) {
      Value *s = u->in[2 + k];
      Value old = *s;
      zero_split_type(s, &old, d, z);
    }
    for (int k = 0; k < u->nout; k++) {
      Value old = *u->out[k];
      zero_split_type(u->out[k], &old, d, z);
    }
    return true; /* next:<param> is the updated shard: the parameter stays split */
  }
  int pos = zero_position(g, u);
  /* bf16 copies: the f32 master stored split, the copy gathered (passes/zero_master.c) */
  bool master = saved && zero_master_split(g, u, d, z, saved);
  if (!master) u->in[0] = zero_slice_at(g, p, d, z, pos++, u->loc);
  u->in[1] = gs ? gs : zero_slice_at(g, gr, d, z, pos++, u->loc);
  for (int k = 0; k < nstate; k++) {
    Value *s = u->in[2 + k];
    Value old = *s;
    zero_split_type(s, &old, d, z); /* the STATE itself is 1/deg: memplan allots 1/deg */
  }
  for (int k = 0; k < u->nout; k++) {
    Value old = *u->out[k];
    zero_split_type(u->out[k], &old, d, z);
  }
  if (master) {
    zero_master_gather_copy(g, u, d, z);
    return true; /* next:<param> is the updated master shard */
  }
  Value *ps = u->out[0];
  Node *ag = ir_node_new(g, OP_ALL_GATHER, 1, &ps, 1, u->loc);
  over_group(ag, z);
  ag->a.axis = d;
  ag->out[0]->dtype = p->dtype;
  ag->out[0]->shape = p->shape;
  ag->out[0]->sharding = p->sharding;
  ir_move_last(g, pos + 1);
  /* next:<param> (and any other reader of the updated parameter) takes the gathered one */
  for (int i = 0; i < g->nnodes; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++)
      if (g->nodes[i]->in[j] == ps && g->nodes[i] != ag) g->nodes[i]->in[j] = ag->out[0];
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == ps) g->results[i] = ag->out[0];
  return true;
}


/* ZeRO-2's clip: a sum of squares over a gradient split over the group is partial over it; one
 * all-reduce over the group of all of them (placed before the first reader) completes them. */
static void complete_sumsq(Graph *g, ZeroGroup z) {
  int n = 0;
  Value **ins = ARENA_ARRAY(g->arena, Value *, g->nnodes + 1);
  for (int i = 0; i < g->nnodes; i++) {
    Node *s = g->nodes[i];
    if (s->op != OP_SUMSQ) continue;
    bool split = false;
    for (int d = 0; d < s->in[0]->shape.rank; d++) split |= s->in[0]->sharding.split[d] == z.axis;
    if (!split) continue;
    s->out[0]->sharding.partial |= (uint8_t)((1u << z.axis) | z.with);
    ins[n++] = s->out[0];
  }
  if (n == 0) return;
  Node *ar = ir_node_new(g, OP_ALL_REDUCE, n, ins, n, ins[0]->def->loc);
  over_group(ar, z);
  ar->a.reduce = RED_SUM;
  for (int k = 0; k < n; k++) {
    ar->out[k]->dtype = ins[k]->dtype;
    ar->out[k]->shape = ins[k]->shape;
    ar->out[k]->sharding = ir_replicated();
    for (int i = 0; i < g->nnodes; i++)
      for (int j = 0; j < g->nodes[i]->nin; j++)
        if (g->nodes[i]->in[j] == ins[k] && g->nodes[i] != ar) g->nodes[i]->in[j] = ar->out[k];
    for (int i = 0; i < g->nresults; i++)
      if (g->results[i] == ins[k]) g->results[i] = ar->out[k];
  }
  ir_topo_sort(g);
}

/* ZeRO-2's gradient reduce-scatters in buckets. The pass put each scatter where its gradient's
 * all-reduce bucket was, so one bucket's scatters are consecutive nodes, all ready there. A run of
 * them (over dp along dim 0, one dtype, up to `cap` bytes) becomes one collective: each gradient
 * [D0, ..] viewed as [dp, D0/dp x ..] (rank c's chunk is row c), the rows concatenated into one
 * [dp, N] buffer, one reduce_scatter of it over dp (asynchronous like a bucket all-reduce:
 * codegen starts it and waits before the first reader), and each gradient's shard a slice of this
 * rank's [1, N] row, taken right before its first reader (in a layer's backward body: at the end
 * of the iteration). The concatenation is the packing DeepSpeed's flat buffers avoid: one copy of
 * the bucket's bytes. */
static bool packable(const Node *n, ZeroGroup z) {
  return n->op == OP_REDUCE_SCATTER && n->a.mesh_axis == z.axis && n->a.mesh_with == z.with && n->a.axis == 0 && n->a.blocks <= 1 &&
         ir_dtype_is_float(n->in[0]->dtype);
}

static Value *typed(Graph *g, OpKind op, int nin, Value **in, DType dt, Shape sh, const Attrs *a, SrcLoc loc,
                    Sharding h) {
  Value *v = ir_emit(g, op, nin, in, dt, sh, a, loc);
  v->sharding = h;
  return v;
}

static void pack_scatters(Graph *g, int i, int j, ZeroGroup z) {
  int n = j - i;
  Node **rs = ARENA_ARRAY(g->arena, Node *, n);
  for (int k = 0; k < n; k++) rs[k] = g->nodes[i + k];
  SrcLoc loc = rs[0]->loc;
  DType dt = rs[0]->in[0]->dtype;
  Sharding flat = ir_replicated();
  flat.partial = rs[0]->in[0]->sharding.partial;
  Value **rows = ARENA_ARRAY(g->arena, Value *, n);
  int64_t *len = ARENA_ARRAY(g->arena, int64_t, n), total = 0;
  int at = i;
  for (int k = 0; k < n; k++) {
    Value *x = rs[k]->in[0];
    len[k] = ir_numel(&x->shape) / z.deg;
    int64_t d2[2] = {z.deg, len[k]};
    rows[k] = typed(g, OP_RESHAPE, 1, &x, dt, ir_shape(2, d2), NULL, loc, flat);
    ir_move_last(g, at++);
    total += len[k];
  }
  Attrs ca = {0};
  ca.axis = 1;
  int64_t dn[2] = {z.deg, total};
  Value *cat = typed(g, OP_CONCAT, n, rows, dt, ir_shape(2, dn), &ca, loc, flat);
  ir_move_last(g, at++);
  Attrs ra = {0};
  ra.mesh_axis = z.axis;
  ra.mesh_with = z.with;
  ra.axis = 0;
  Sharding mine = flat;
  mine.split[0] = z.axis;
  mine.inner[0] = z.inner;
  mine.partial &= (uint8_t) ~((1u << z.axis) | z.with);
  int64_t d1[2] = {1, total};
  Value *red = typed(g, OP_REDUCE_SCATTER, 1, &cat, dt, ir_shape(2, d1), &ra, loc, mine);
  ir_move_last(g, at++);
  for (int k = 0, off = 0; k < n; off += (int)len[k], k++) {
    Value *y = rs[k]->out[0];
    Attrs sa = {0};
    sa.axis = 1;
    sa.start = off;
    sa.len = len[k];
    int64_t d3[2] = {1, len[k]};
    Value *sl = typed(g, OP_SLICE, 1, &red, dt, ir_shape(2, d3), &sa, loc, mine);
    Value *v = typed(g, OP_RESHAPE, 1, &sl, dt, y->shape, NULL, loc, y->sharding);
    v->name = y->name;
    ir_replace_uses(g, y, v);
    for (int r = 0; r < g->nresults; r++)
      if (g->results[r] == y) g->results[r] = v;
    int first = -1; /* the shard right before its first reader: the collective is waited there */
    for (int q = 0; q < g->nnodes - 2 && first < 0; q++)
      for (int u = 0; u < g->nodes[q]->nin; u++)
        if (g->nodes[q]->in[u] == v) first = q;
    if (first >= 0) {
      ir_move_last(g, first); /* v, then the slice before it */
      int pv = first, ps = g->nnodes - 1;
      Node *sn = g->nodes[ps];
      memmove(&g->nodes[pv + 1], &g->nodes[pv], sizeof(Node *) * (size_t)(ps - pv));
      g->nodes[pv] = sn;
    }
  }
  int w = 0; /* the single scatters go */
  for (int q = 0; q < g->nnodes; q++) {
    bool gone = false;
    for (int k = 0; k < n; k++) gone |= g->nodes[q] == rs[k];
    if (!gone) g->nodes[w++] = g->nodes[q];
  }
  g->nnodes = w;
}

static void bucket_scatters(Graph *g, ZeroGroup z, int64_t cap) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) bucket_scatters(g->nodes[i]->body, z, cap);
  for (int i = 0; i < g->nnodes;) {
    if (!packable(g->nodes[i], z)) {
      i++;
      continue;
    }
    int j = i;
    int64_t bytes = 0;
    DType dt = g->nodes[i]->in[0]->dtype;
    uint8_t part = g->nodes[i]->out[0]->sharding.partial;
    while (j < g->nnodes && packable(g->nodes[j], z) && g->nodes[j]->in[0]->dtype == dt &&
           g->nodes[j]->out[0]->sharding.partial == part) {
      int64_t b = ir_numel(&g->nodes[j]->in[0]->shape) * ir_dtype_size(dt);
      if (!zero_run_takes(j - i, bytes, b, cap)) break;
      bytes += b;
      j++;
    }
    if (j - i < 2) {
      i = j;
      continue;
    }
    int before = g->nnodes;
    pack_scatters(g, i, j, z);
    i = j + (g->nnodes - before) - 2 * (j - i); /* past the run's reshapes, concat and scatter */
    if (i < 0) i = 0;
  }
}

/* The backward loops' bodies (nested in g) where zero_scatter_sums put reduce-scatters of their
 * own gradients: grouped into runs for bucket_scatters. */
static void group_loop_scatters(Graph *g, int64_t cap, bool body, ZeroGroup z) {
  bool has = false;
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->body) group_loop_scatters(n->body, cap, true, z);
    has |= body && n->op == OP_REDUCE_SCATTER && n->a.mesh_axis == z.axis && n->in[0]->def->graph == g;
  }
  if (has) zero_group_scatters(g, cap, z);
}

ZeroGroup zero_group(const MeshMap *mm) {
  int dp = mm ? mm->dim[RT_AX_DP] : 1, cp = mm ? mm->dim[RT_AX_CP] : 1;
  /* the group: dp, under cp the dp x cp group (its members' shards in rank order), cp alone at dp 1 */
  bool dpcp = dp > 1 && cp > 1;
  return (ZeroGroup){dp * cp, dp > 1 ? (int8_t)RT_AX_DP : (int8_t)RT_AX_CP, dpcp ? (uint8_t)(1u << RT_AX_CP) : 0,
                     dpcp ? (int8_t)RT_AX_CP : -1};
}

bool zero_splits_params(const Module *m) { return m->plan.zero >= 3 && zero_group(m->mesh).deg > 1; }

bool pass_zero(Module *m) {
  int stage = m->plan.zero;
  ZeroGroup z = zero_group(m->mesh);
  bool off = m->plan.offload && m->target != TARGET_CPU && stage >= 1; /* (CPU: a note, passes/optimizer.c) */
  if (stage <= 0 || z.deg <= 1) {
    if (stage > 0 && !off) /* (with offload the stage applies: the whole state moves to the host) */
      note_at(m->plan.opt_loc[PLAN_OPT_ZERO], "zero %d: the data-parallel group is one rank (dp 1, cp 1): nothing to shard, the rank holds the whole optimizer state%s",
              stage, stage >= 2 ? ", gradients and parameters" : "");
    if (off) zero_offload(m->graph, false);
    return true;
  }
  if (stage == 1 && m->has_recipe && m->recipe.optimizer == OPT_SGD && m->recipe.momentum == 0) /* (was: not a word) */
    note_at(m->plan.opt_loc[PLAN_OPT_ZERO], "zero 1: sgd without momentum keeps no optimizer state, so nothing is "
            "sharded; the update is split over the group and the parameters all-gathered after it (more traffic, no "
            "memory saved): zero 0, or zero 2 / 3 to shard the gradients / parameters");
  Graph *g = m->graph;
  int n = g->nnodes;
  Node **updates = ARENA_ARRAY(g->arena, Node *, n + 1);
  int nu = 0;
  for (int i = 0; i < n; i++)
    if (g->nodes[i]->op == OP_ADAMW_UPDATE || g->nodes[i]->op == OP_SGD_UPDATE) updates[nu++] = g->nodes[i];
  int64_t *saved = zero_master_wanted(m) ? &m->wcopy.master_saved : NULL;
  /* whether each update is its state's only reader (zero_only_reader), found in one walk before any
   * update is sharded: sharding one update adds no reader to another's state */
  PtrMap uses = {0};
  for (int i = 0; i < n; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++) ptrmap_add(&uses, g->nodes[i]->in[j], 1);
  for (int i = 0; i < g->nresults; i++) ptrmap_add(&uses, g->results[i], n + 1); /* a result: never sole */
  use_memo = ir_use_memo_new();
  if (stage >= 3) zero_gather_begin(g, use_memo); /* (gather_uses' questions) */
  for (int i = 0; i < nu; i++) {
    Node *u = updates[i];
    bool sole = true;
    for (int k = 2; k < 2 + (u->op == OP_ADAMW_UPDATE ? 2 : 1) && sole; k++) {
      Value *v = u->in[k];
      int mine = 0;
      for (int j = 0; j < u->nin; j++) mine += u->in[j] == v;
      intptr_t c = 0;
      ptrmap_get(&uses, v, &c);
      sole = (v->def->op == OP_STATE || v->def->op == OP_CONST) && c == mine;
    }
    shard_update(g, u, z, stage, saved, sole);
  }
  zero_gather_end();
  ir_use_memo_free(use_memo);
  use_memo = NULL;
  ptrmap_free(&uses);
  if (stage >= 2) {
    int64_t cap = m->plan.bucket_bytes > 0 ? m->plan.bucket_bytes : (int64_t)25 << 20;
    complete_sumsq(g, z);
    group_loop_scatters(g, cap, true, z);
    bucket_scatters(g, z, cap);
  }
  if (off) zero_offload(g, stage >= 3 && m->plan.weight_copy != WCOPY_PER_LAYER && m->target == TARGET_CUDA && m->has_recipe &&
                         m->recipe.precision == PREC_BF16);
  return true;
}
