/* codegen/emit_coll.c — the per-rank program's collectives and point-to-point transfers as their
 * runtime/ops/coll.h calls (emit.c's node loop calls these; the waits are emit.c's add_wait). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg.h"
#include "codegen.h"
#include "commreport.h"
#include "diag.h"
#include "memplan.h"
#include "mesh.h" /* ir/mesh.h: MeshMap, RT_AX_* */
#include "offload_sched.h"
#include "outline.h"
#include "pipe_sched.h"
#include "print.h"
#include "ptrmap.h"
#include "emit_int.h"

static const char *group_lit(Cg *c, const Attrs *a) {
  if (!a->mesh_with) return cg_axis_lit(a->mesh_axis);
  static const char *const masks[RT_AX_COUNT] = {[RT_AX_DP] = "RT_MESH_DP", [RT_AX_PP] = "RT_MESH_PP",
                                                 [RT_AX_CP] = "RT_MESH_CP", [RT_AX_TP] = "RT_MESH_TP"};
  const char *s = masks[a->mesh_axis];
  for (int x = 0; x < RT_AX_COUNT; x++)
    if (a->mesh_with & (1u << x)) s = arena_printf(c->a, "%s | %s", s, masks[x]);
  return arena_printf(c->a, "RT_AX_GROUP(%s)", s);
}

void emit_all_reduce(Cg *c, Node *n) {
  static const char *const red[] = {[RED_SUM] = "0 /* sum */", [RED_AVG] = "1 /* avg */", [RED_MAX] = "2 /* max */"};
  const Attrs *a = &n->a;
  const char *ax = group_lit(c, a);
  if (n->nin == 1 && !ir_comm_async(n)) {
    cg_line(c, "rt_coll_all_reduce(ctx, %s, %s, %s, %" PRId64 ", %s, %s);", ax, cg_ptr(c, n->out[0]),
         cg_ptr(c, n->in[0]), ir_numel(&n->out[0]->shape), cg_dtype_lit(n->out[0]->dtype), red[a->reduce]);
    return;
  }
  int tag = ir_comm_async(n) ? c->next_tag++ : -1;
  bool *done = ARENA_ARRAY(c->a, bool, n->nin + 1);
  for (int first = 0; first < n->nin; first++) {
    if (done[first]) continue;
    DType dt = n->in[first]->dtype;
    int cnt = 0;
    int64_t bytes = 0;
    for (int i = first; i < n->nin; i++)
      if (n->in[i]->dtype == dt) cnt++, bytes += cg_bytes(n->in[i]);
    cg_line(c, "{ /* all-reduce%s of %d %s tensor%s, %" PRId64 " bytes, one collective */",
         tag >= 0 ? arena_printf(c->a, " #%d", tag) : "", cnt, ir_dtype_name(dt), cnt > 1 ? "s" : "", bytes);
    c->indent++;
    cg_line(c, "void *const ys[] = {");
    for (int i = first; i < n->nin; i++)
      if (n->in[i]->dtype == dt) cg_line(c, "  %s,", cg_ptr(c, n->out[i]));
    cg_line(c, "};");
    cg_line(c, "const void *const xs[] = {");
    for (int i = first; i < n->nin; i++)
      if (n->in[i]->dtype == dt) cg_line(c, "  %s,", cg_ptr(c, n->in[i]));
    cg_line(c, "};");
    char buf[64];
    fprintf(c->f, "%*sstatic const int64_t ns[] = {", 2 * c->indent, "");
    for (int i = first, k = 0; i < n->nin; i++)
      if (n->in[i]->dtype == dt) {
        snprintf(buf, sizeof buf, "%s%" PRId64, k++ ? ", " : "", ir_numel(&n->in[i]->shape));
        fputs(buf, c->f);
        done[i] = true;
      }
    fputs("};\n", c->f);
    if (tag >= 0)
      cg_line(c, "rt_coll_all_reduce_start(ctx, %s, %d, ys, xs, ns, %d, %s, %s);", ax, tag, cnt,
           cg_dtype_lit(dt), red[a->reduce]);
    else
      cg_line(c, "rt_coll_all_reduce_v(ctx, %s, ys, xs, ns, %d, %s, %s);", ax, cnt, cg_dtype_lit(dt),
           red[a->reduce]);
    c->indent--;
    cg_line(c, "}");
  }
  if (tag >= 0) add_wait(c, n, c->pos, tag);
}

bool is_multi_rank_op(const Node *n) {
  switch (n->op) {
  case OP_AXIS_INDEX: case OP_ALL_REDUCE: case OP_REDUCE_SCATTER: case OP_ALL_GATHER: case OP_BROADCAST:
  case OP_SHARD_SLICE: case OP_CE_MAX: case OP_CE_SUMS: case OP_CE_LOSS: case OP_CE_GRAD: case OP_SEND: case OP_RECV:
  case OP_STAGE_SELECT: case OP_ALL_TO_ALL:
    return true;
  case OP_EMBED: case OP_EMBED_BWD: return n->a.sharded;
  default: return false;
  }
}

/* The C pointer to node n's planned scratch (passes/memplan.c: a collective's packing buffer),
 * or NULL where it has none. */
static const char *scratch_ptr(Cg *c, const Node *n) {
  if (n->scratch_bytes != memplan_scratch_bytes(n))
    die("codegen: %s has %lld bytes of scratch planned, needs %lld", ir_ops[n->op].name, (long long)n->scratch_bytes,
        (long long)memplan_scratch_bytes(n));
  return n->scratch_bytes ? arena_printf(c->a, "(M + %" PRId64 ")", n->scratch_at) : "NULL";
}

/* ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, BROADCAST and SHARD_SLICE as their coll.h calls; a
 * gather, scatter or all-to-all that packs does so in its scratch of the memory plan. */
void emit_collective(Cg *c, const Node *n) {
  const Value *y = n->out[0], *x = n->in[0];
  const Attrs *a = &n->a;
  const char *ws = scratch_ptr(c, n);
  int64_t outer, nl, inner;
  switch (n->op) {
  case OP_ALL_GATHER:
  case OP_REDUCE_SCATTER: {
    bool gather = n->op == OP_ALL_GATHER;
    cg_axis_split(&(gather ? x : y)->shape, a->axis, &outer, &nl, &inner);
    /* a dp reduce-scatter (ZeRO-2's gradient shards) or all-gather (ZeRO's parameters) runs
     * asynchronously like a dp all-reduce: waited before its first reader */
    intptr_t reserved = 0; /* a deferred scatter's: its waits registered with its loop (emit.c's defer_waits) */
    ptrmap_get(&c->deferred, n, &reserved);
    int tag = reserved ? (int)reserved - 1 : ir_comm_async(n) ? c->next_tag++ : -1;
    const char *call = gather ? (tag >= 0 ? "all_gather_start" : "all_gather")
                              : tag >= 0 ? "reduce_scatter_start" : "reduce_scatter";
    const char *tagarg = tag >= 0 ? arena_printf(c->a, "%d, ", tag) : "";
    const char *skip = skip_cond(c, n);
    if (skip) cg_line(c, "if (%s) /* not on the loop's last iteration: nothing reads it there */", skip);
    if (skip) c->indent++;
    cg_line(c, "rt_coll_%s(ctx, %s, %s%s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %s, %s); /* along dim %d */",
         call, group_lit(c, a), tagarg, cg_ptr(c, y), cg_ptr(c, x), outer, nl, inner, a->blocks,
         cg_dtype_lit(y->dtype), ws, a->axis);
    if (skip) c->indent--;
    if (tag >= 0 && !reserved) add_wait(c, n, c->pos, tag);
    return;
  }
  case OP_BROADCAST:
    cg_line(c, "rt_coll_broadcast(ctx, %s, %s, %s, %" PRId64 ", %s, %" PRId64 ");", cg_axis_lit(a->mesh_axis), cg_ptr(c, y),
         cg_ptr(c, x), ir_numel(&y->shape), cg_dtype_lit(y->dtype), a->start);
    return;
  case OP_ALL_TO_ALL: {
    const char *dims = "";
    for (int d = 0; d < x->shape.rank; d++)
      dims = arena_printf(c->a, "%s%s%" PRId64, dims, d ? ", " : "", x->shape.dim[d]);
    cg_line(c, "{ /* all-to-all: dim %d gathered, dim %d scattered */", a->axis, a->split_axis);
    cg_line(c, "  static const int64_t xd[] = {%s};", dims);
    cg_line(c, "  rt_coll_all_to_all(ctx, %s, %s, %s, %d, xd, %d, %d, %d, %d, %s, %s);", cg_axis_lit(a->mesh_axis),
            cg_ptr(c, y), cg_ptr(c, x), x->shape.rank, a->axis, a->blocks, a->split_axis, a->split_blocks,
            cg_dtype_lit(y->dtype), ws);
    cg_line(c, "}");
    return;
  }
  case OP_SHARD_SLICE:
    cg_axis_split(&y->shape, a->axis, &outer, &nl, &inner);
    cg_line(c, "rt_coll_shard_slice(ctx, %s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %d, %d); /* along dim %d */",
         group_lit(c, a), cg_ptr(c, y), cg_ptr(c, x), outer, nl, inner, a->blocks, ir_dtype_size(y->dtype), a->axis);
    return;
  default: die("codegen: %s is not a gather / scatter / broadcast / slice", ir_ops[n->op].name);
  }
}

/* The SEND that pairs with the RECV at position i of g (a ring shift: the node before it, over the
 * same axis and tag, the opposite offset), or NULL. */
const Node *send_of(const Graph *g, int i) {
  const Node *r = g->nodes[i], *s = i > 0 ? g->nodes[i - 1] : NULL;
  if (!s || s->op != OP_SEND || s->a.mesh_axis != r->a.mesh_axis || s->a.tag != r->a.tag || s->a.start != -r->a.start)
    return NULL;
  return s;
}

/* SEND + RECV (passes/shard_cp.c's ring hop) as one deadlock-free ring shift started at the RECV
 * and waited before the first reader of what it receives (add_wait; shard_cp.c issues each hop
 * before the block it overlaps); the SEND emits nothing (memplan keeps its input live through
 * the wait). */
void emit_p2p(Cg *c, Node *n) {
  if (n->stage) { /* a pipeline transfer (passes/pipe.c): asynchronous send, blocking receive */
    const Value *v = n->op == OP_SEND ? n->in[0] : n->out[0];
    cg_line(c, "rt_coll_%s(ctx, %s, %lld, %s, %" PRId64 ", %d);", n->op == OP_SEND ? "send" : "recv",
            cg_axis_lit(n->a.mesh_axis), (long long)n->a.start, cg_ptr(c, v), ir_numel(&v->shape) * ir_dtype_size(v->dtype),
            n->a.tag);
    return;
  }
  if (n->op == OP_SEND) {
    Graph *g = n->graph;
    if (c->pos + 1 < g->nnodes && send_of(g, c->pos + 1) == n) return;
    cg_unsupported(c, n, "a send must be followed by its receive (a ring shift); pipeline transfers arrive with the pipeline pass");
    return;
  }
  const Node *s = send_of(n->graph, c->pos);
  if (!s) {
    cg_unsupported(c, n, "a receive must follow its send (a ring shift); pipeline transfers arrive with the pipeline pass");
    return;
  }
  Value *x = s->in[0], *y = n->out[0];
  int tag = c->next_tag++;
  cg_line(c, "rt_coll_shift_start(ctx, %s, %lld, %d, %s, %s, %" PRId64 ", %d);", cg_axis_lit(n->a.mesh_axis),
          (long long)s->a.start, tag, cg_ptr(c, y), cg_ptr(c, x), ir_numel(&x->shape) * ir_dtype_size(x->dtype),
          n->a.tag);
  add_wait(c, n, c->pos, tag);
}

/* The plan's collectives per step of each pipeline stage's ranks (ir_comm_stage_volumes) as
 * `coll_plan[]`, which the trainer checks its counted collectives against (runtime/train/log.c);
 * returns the stages, 0 for a single-rank program (no table). */
int cg_emit_coll_plan(Cg *c) {
  const Module *m = c->m;
  if (!m->mesh || m->mesh->world <= 1) return 0;
  int nst = ir_comm_stages(m);
  CommVolumes *vs = malloc((size_t)nst * sizeof *vs);
  if (!vs) die("codegen: out of memory");
  ir_comm_stage_volumes(m, vs);
  fprintf(c->f, "static const int64_t coll_plan[] = { /* [stage][group][kind]: count, bytes (ir/commreport.h) */\n");
  for (int st = 0; st < nst; st++)
    for (int r = 0; r < IR_COMM_ROWS; r++) {
      fprintf(c->f, " ");
      for (int k = 0; k < CK_COUNT; k++)
        fprintf(c->f, " %" PRId64 ", %" PRId64 ",", vs[st].cell[r][CR_FORWARD][k].count + vs[st].cell[r][CR_BACKWARD][k].count +
                                                    vs[st].cell[r][CR_OPTIMIZER][k].count,
                vs[st].cell[r][CR_FORWARD][k].bytes + vs[st].cell[r][CR_BACKWARD][k].bytes +
                    vs[st].cell[r][CR_OPTIMIZER][k].bytes);
      fprintf(c->f, "\n");
    }
  fprintf(c->f, "};\n\n");
  free(vs);
  return nst;
}
