/* passes/zero_offload.c — the `zero` pass's last step under plan `offload` on a device target
 * (ZeRO-Offload): every update of the top graph, after passes/zero.c sharded it, runs in the rank's
 * host memory between copies; under bf16 the f32 parameters themselves (the master weights) move
 * to the host. When the copies run: passes/offload_sched.c. */
#include "diag.h"
#include "offload_sched.h"
#include "passes.h"
#include "zero.h"

static int position(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  die("zero_offload: node not in its graph");
}

/* ---- the updates on the host ----
 * Every update u of the top graph (after passes/zero.c sharded it: its shard of the parameter and of
 * the gradient, its 1/dp optimizer state) runs in the rank's host memory:
 *     ph  = to_host(ps)     gh = to_host(gs)     hh = to_host(hyper)   (one hh for every update)
 *                           (gs = cast(b) from a bf16 b: gh = cast(to_host(b)) on the host)
 *     ph', m', v' = adamw_update(ph, gh, m, v, hh)   m, v: STATE values in host memory
 *     pd' = to_device(ph')                            read where ph' was: ZeRO-1/2's all_gather,
 *                                                     ZeRO-3's next:<param> (the stored shard)
 * Host values are marked Value.host (printed `@host`); verify checks that a node reads values
 * of its own space only, to_host / to_device excepted; memplan places them in the rank's host
 * allocation; the CUDA target runs the update with the CPU target's threaded kernel. With dp 1 the
 * shard is the whole parameter. A state another node reads, or an update inside a region, stays
 * on the device (none today). Under bf16 the parameter itself moves to the host (below: "the f32
 * master weights on the host"). */
static Value *copy_to(Graph *g, OpKind op, Value *x, int pos, SrcLoc loc) {
  Node *c = ir_node_new(g, op, 1, &x, 1, loc);
  c->out[0]->dtype = x->dtype;
  c->out[0]->shape = x->shape;
  c->out[0]->sharding = x->sharding;
  c->out[0]->name = x->name;
  c->out[0]->host = op == OP_TO_HOST;
  ir_move_last(g, pos);
  return c->out[0];
}

/* A gradient cast from bf16 on the device (precision bf16: the backward's gradients are bf16, made
 * f32 after the layer loop) is downloaded in bf16 and made f32 on the host: half the bytes, and its
 * rows can start downloading inside the backward loop (passes/offload_sched.c). Exact: every bf16
 * is an f32. Returns the host f32 gradient, or NULL for any other gradient. */
static Value *download_bf16_grad(Graph *g, Value *gs, int *pos, SrcLoc loc) {
  Node *c = gs->def;
  if (c->op != OP_CAST || c->graph != g || gs->dtype != DT_F32 || c->in[0]->dtype != DT_BF16 || ir_node_stages(c))
    return NULL;
  Value *h = copy_to(g, OP_TO_HOST, c->in[0], (*pos)++, loc);
  Value *y = ir_emit(g, OP_CAST, 1, &h, DT_F32, gs->shape, NULL, loc);
  y->sharding = gs->sharding;
  y->name = gs->name;
  y->host = true;
  ir_move_last(g, (*pos)++);
  return y;
}

/* ---- the f32 master weights on the host (DeepSpeed's layout under mixed precision) ----
 * Under `precision bf16` with the weights' persistent bf16 copies (passes/wshadow.c: STATE
 * "bf16:<param>", the updated parameter cast into it after the update) the device reads a parameter
 * only through its copy; the f32 parameter is read by its update alone. Offloaded, it then lives in
 * the host allocation (the master weights, with the optimizer state; initialised, checkpointed and
 * resumed from there), and the host casts its updated shard to bf16 (the same rounding as the
 * device's cast; codegen/target_cuda.c stores it in the AdamW's pass, rt_adamw_f32_copy) and uploads
 * that: 2 B per parameter, not 4, no download of the parameter at the step's start, and no f32
 * parameter on the device:
 *     P' , m', v' = adamw_update(P, gh, m, v, hh)   P: PARAM in host memory (the rank's shard)
 *     bh  = cast(P') to=bf16                        on the host
 *     bd  = to_device(bh)                           -> next:bf16:P (dp 1: the copy's own bytes)
 *     b   = all_gather(bd) over dp along d          (ZeRO-1/2 at dp > 1) -> next:bf16:P
 * ZeRO-1/2 at dp > 1 keep the rank's shard of the master only (the PARAM typed as the shard, as
 * ZeRO-3 stores it): the bf16 shard is uploaded and gathered over the group in bf16 into the whole
 * copy, where the gather of today's f32 update was (P (dp-1)/dp x 2 B of gather traffic instead
 * of 4; the host would need the whole master to upload the copy whole). The values are those of the
 * device path bit for bit (a cast commutes with a gather; the host's and the device's roundings are
 * the same). ZeRO-3 over dp has no persistent copy (its layer loops gather the rows of a split cast
 * of the stored shard, made at the top of the step and per micro-step): those casts become one
 * persistent split copy, STATE "bf16:<param>", that the host writes the same way. Any other reader
 * of the parameter (per-layer casts, pipeline stages' casts below ZeRO-3) keeps the f32 parameter
 * on the device, downloaded and uploaded as above. */

/* v's one reader when v has exactly one (in g and its bodies) and it is a node of g, else NULL. */
static Node *sole_reader(const Graph *g, const Value *v) {
  if (ir_count_uses_deep(g, v) != 1) return NULL;
  for (int i = 0; i < g->nnodes; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++)
      if (g->nodes[i]->in[j] == v) return g->nodes[i];
  return NULL;
}

/* The master's plan for an update: ZeRO-1/2's shard_slice of the parameter and all_gather of the
 * updated shard (or NULL), and either the cast of the updated parameter into its persistent bf16
 * copy (passes/wshadow.c) or, under ZeRO-3 over dp, the casts of the stored parameter. */
enum { MASTER_CASTS = 8 };
typedef struct {
  Node *slice, *gather, *cast;
  Node *top[MASTER_CASTS]; /* ZeRO-3: the casts of the stored shard */
  int ntop;
} Master;

/* The bf16 casts of p (of p's own shape) in g and its bodies (a micro-step region casts it for
 * each micro-step, the last micro-step after it again), into casts[] (at most cap); their count. */
static int casts_of(Graph *g, const Value *p, Node **casts, int n, int cap) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *c = g->nodes[i];
    if (c->body) n = casts_of(c->body, p, casts, n, cap);
    if (c->op == OP_CAST && c->in[0] == p && c->out[0]->dtype == DT_BF16 && ir_shape_eq(&c->out[0]->shape, &p->shape) &&
        n < cap)
      casts[n++] = c;
  }
  return n;
}

/* Whether update u's parameter can become the host master (then *mm says how); zero3: ZeRO-3 over
 * dp with the weights' copies not refused by hand (`weight_copy per_layer` keeps the device's). */
static bool master_plan(Graph *g, Node *u, Master *mm, bool zero3) {
  Value *p = u->in[0];
  *mm = (Master){0};
  if (p->def->op == OP_SHARD_SLICE && sole_reader(g, p) == u) mm->slice = p->def, p = p->def->in[0];
  if (p->def->op != OP_PARAM || p->dtype != DT_F32) return false;
  int rp = ir_count_uses_deep(g, p);
  if (zero3 && rp > 1) mm->ntop = casts_of(g, p, mm->top, 0, MASTER_CASTS);
  if (rp != mm->ntop + 1) return false; /* (its one other reader: the update, or ZeRO-1/2's slice) */
  Value *y = u->out[0];
  if (mm->slice) {
    Node *ag = sole_reader(g, y);
    if (!ag || ag->op != OP_ALL_GATHER) return false;
    mm->gather = ag;
    y = ag->out[0];
  }
  if (mm->ntop) return ir_count_uses_deep(g, y) == 0; /* (the updated parameter: the result next:<param> only) */
  Node *c = sole_reader(g, y);
  if (!c || c->op != OP_CAST || c->out[0]->dtype != DT_BF16 || !ir_copy_written(g, c->out[0])) return false;
  mm->cast = c;
  return true;
}

/* ZeRO-3's casts of parameter p (the stored shard, or a small parameter kept whole) become one
 * persistent copy, STATE "bf16:<p>" (as passes/wshadow.c makes it), for the host to write; returns it. */
static Value *persist_casts(Graph *g, const Master *mm, const Value *p) {
  Value *x = mm->top[0]->out[0];
  Attrs sa = {.name = arena_printf(g->arena, "bf16:%s", p->def->a.name)};
  Value *st = ir_emit(g, OP_STATE, 0, NULL, DT_BF16, x->shape, &sa, p->def->loc);
  st->sharding = x->sharding;
  st->name = x->name;
  st->def->stage = p->def->stage;
  st->def->stageset = p->def->stageset;
  ir_move_last(g, position(g, p->def) + 1);
  for (int k = 0; k < mm->ntop; k++) {
    Node *c = mm->top[k];
    ir_replace_uses(c->graph, c->out[0], st);
    ir_drop_node(c->graph, c);
  }
  return st;
}

/* The update's parameter becomes the host master; its updated shard is cast to bf16 on the host,
 * uploaded (and gathered) into the copy. Runs after offload_update moved the update to the host. */
static void master_on_host(Graph *g, Node *u, const Master *mm) {
  Value *ph = u->in[0]; /* offload_update's download of the parameter (or of its shard) */
  Value *p = mm->slice ? mm->slice->in[0] : ph->def->in[0];
  Value *copy = mm->cast ? mm->cast->out[0] : persist_casts(g, mm, p);
  if (mm->slice) { /* the parameter is stored as this rank's shard */
    p->shape = mm->slice->out[0]->shape;
    p->sharding = mm->slice->out[0]->sharding;
    ir_drop_node(g, mm->slice);
  }
  p->host = true;
  ir_drop_node(g, ph->def); /* (no download: the host holds it) */
  u->in[0] = p;
  Value *y = u->out[0];
  if (mm->gather) {
    ir_replace_uses(g, mm->gather->out[0], y); /* next:<param>: the host shard */
    ir_drop_node(g, mm->gather);
  }
  Value *to_dev = NULL;
  for (int i = 0; i < g->nnodes && !to_dev; i++) /* offload_update's upload of y */
    if (g->nodes[i]->op == OP_TO_DEVICE && g->nodes[i]->in[0] == y) to_dev = g->nodes[i]->out[0];
  if (to_dev) {
    ir_replace_uses(g, to_dev, y);
    ir_drop_node(g, to_dev->def);
  }
  if (mm->cast) ir_drop_node(g, mm->cast);
  int pos = position(g, u) + 1;
  Value *bh = ir_emit(g, OP_CAST, 1, &y, DT_BF16, y->shape, mm->cast ? &mm->cast->a : &mm->top[0]->a, u->loc);
  bh->sharding = y->sharding;
  bh->name = copy->name;
  bh->host = true;
  ir_move_last(g, pos++);
  Value *b = copy_to(g, OP_TO_DEVICE, bh, pos++, u->loc);
  if (mm->gather) {
    Node *ag = ir_node_new(g, OP_ALL_GATHER, 1, &b, 1, u->loc);
    ag->a = mm->gather->a;
    ag->out[0]->dtype = DT_BF16;
    ag->out[0]->shape = copy->shape;
    ag->out[0]->sharding = copy->sharding;
    ag->out[0]->name = copy->name;
    ir_move_last(g, pos++);
    b = ag->out[0];
  }
  if (mm->cast) ir_replace_uses(g, copy, b); /* next:bf16:<param> */
  else ir_add_result(g, b, arena_printf(g->arena, "next:%s", copy->def->a.name));
}

static void offload_update(Graph *g, Node *u, Value **hyper_host, bool zero3) {
  int nstate = u->op == OP_ADAMW_UPDATE ? 2 : 1, hi = 2 + nstate;
  for (int k = 0; k < nstate; k++)
    if (!zero_only_reader(g, u->in[2 + k], u)) return;
  Master mm;
  bool master = master_plan(g, u, &mm, zero3);
  int pos = position(g, u);
  u->in[0] = copy_to(g, OP_TO_HOST, u->in[0], pos++, u->loc);
  Value *g32 = download_bf16_grad(g, u->in[1], &pos, u->loc);
  u->in[1] = g32 ? g32 : copy_to(g, OP_TO_HOST, u->in[1], pos++, u->loc);
  if (!*hyper_host) {
    int hp = position(g, u->in[hi]->def) + 1; /* right after the hyper-parameters are made */
    *hyper_host = copy_to(g, OP_TO_HOST, u->in[hi], hp, u->loc);
    pos++;
  }
  u->in[hi] = *hyper_host;
  for (int k = 0; k < nstate; k++) u->in[2 + k]->host = true;
  for (int k = 0; k < u->nout; k++) u->out[k]->host = true;
  Value *ph = u->out[0];
  Value *pd = copy_to(g, OP_TO_DEVICE, ph, pos + 1, u->loc);
  for (int i = 0; i < g->nnodes; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++)
      if (g->nodes[i]->in[j] == ph && g->nodes[i] != pd->def) g->nodes[i]->in[j] = pd;
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == ph) g->results[i] = pd;
  if (master) master_on_host(g, u, &mm);
}

void zero_offload(Graph *g, bool zero3) {
  int n = g->nnodes, nu = 0;
  Node **updates = ARENA_ARRAY(g->arena, Node *, n + 1);
  for (int i = 0; i < n; i++)
    if (g->nodes[i]->op == OP_ADAMW_UPDATE || g->nodes[i]->op == OP_SGD_UPDATE) updates[nu++] = g->nodes[i];
  offload_order(g, updates, nu); /* (passes/offload_sched.c: the host's order, and when the copies run) */
  Value *hyper_host = NULL;
  for (int i = 0; i < nu; i++) offload_update(g, updates[i], &hyper_host, zero3);
}
