/* codegen/emit.c — the per-rank program as readable C that calls libshardrt, for any target.
 *
 * Every value lives at the byte offset the memory plan gave it in the rank's one
 * allocation `M` (host memory on the CPU target, device memory on CUDA); a compute node
 * becomes what its target (cg.h CgTarget) emits on pointers into M. A REPEAT becomes a C
 * loop whose body reads its per-layer slices at offset + i * stride. Collectives are calls
 * of runtime/ops/coll.h, the same on every target. Three entry points share the plan: step
 * (everything), eval (what the loss needs) and logits (what the logits need), each a
 * subsequence of the same node order, so the same placements stay valid (logits under gradient
 * accumulation: the micro-step loop's first iteration, of its body what the logits need).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg.h"
#include "codegen.h"
#include "commreport.h"
#include "diag.h"
#include "memplan.h"
#include "memplan_views.h" /* memplan_row_placed */
#include "mesh.h" /* ir/mesh.h: MeshMap, RT_AX_* */
#include "offload_sched.h"
#include "outline.h"
#include "pipe_sched.h"
#include "print.h"
#include "ptrmap.h"
#include "emit_int.h"

static void bind_arg(Cg *c, const Node *arg, const char *expr) {
  arena_grow(c->a, (void **)&c->binds, &c->capargs, c->nargs + 1, sizeof(ArgBind));
  c->binds[c->nargs++] = (ArgBind){arg, expr};
}

/* dst = src, bytes long, as a statement of the target (host memcpy / memmove, or a device copy). */
static void copy_bytes(Cg *c, const char *dst, const char *src, int64_t bytes, bool overlap) {
  c->t->copy(c, dst, src, bytes, overlap);
}

static void emit_graph(Cg *c, Graph *g, const bool *need);

static int position_of(const Graph *g, const Node *n);
static int before_group(const Graph *g, int pos);

/* Loop n's deferred reduce-scatters (Node.defer_wait, passes/memplan_defer.c): each one's tag reserved
 * (emit_collective starts it under that tag) and its waits registered before the body is emitted: in
 * the body before defer_wait, but on the loop's first iteration (nothing in flight yet), and the last
 * iteration's right after the loop, or, where the loop continues in its cont (Node.defer_last,
 * passes/memplan_defer.c), in cont's body before defer_last on its first iteration. */
static void defer_waits(Cg *c, const Node *n, const bool *need) {
  const Graph *b = n->body, *G = n->graph;
  for (int i = 0; i < b->nnodes; i++) {
    const Node *s = b->nodes[i];
    if (!s->defer_wait || (need && !need[i])) continue;
    int tag = c->next_tag++;
    ptrmap_put(&c->deferred, s, tag + 1);
    const char *first = arena_printf(c->a, "i%d != %" PRId64, cg_depth_of(b), n->a.reverse ? n->a.count - 1 : (int64_t)0);
    Wait in = {tag, b, before_group(b, position_of(b, s->defer_wait)), false, NULL, 0, first};
    Wait after = {tag, G, before_group(G, position_of(G, n) + 1), false, NULL, 0, NULL};
    if (s->defer_last) {
      const Graph *cb = s->defer_last->graph;
      const Node *cn = cb->owner;
      after = (Wait){tag, cb, before_group(cb, position_of(cb, s->defer_last)), false, NULL, 0,
                     arena_printf(c->a, "i%d == %" PRId64, cg_depth_of(cb), cn->a.reverse ? cn->a.count - 1 : (int64_t)0)};
    }
    arena_grow(c->a, (void **)&c->waits, &c->capwaits, c->nwaits + 2, sizeof(Wait));
    c->waits[c->nwaits++] = in;
    c->waits[c->nwaits++] = after;
  }
}

/* The micro-step loop in the logits entry (Cg.once): its first iteration, of its body only what the logits
 * need (Cg.body_need); nothing it yields is kept. */
static void emit_repeat_once(Cg *c, Node *n, int d) {
  cg_line(c, "for (int64_t i%d = 0; i%d < 1; i%d++) { /* the first micro-step's forward, to the logits */", d, d, d);
  c->indent++;
  defer_waits(c, n, c->body_need);
  emit_graph(c, n->body, c->body_need);
  c->indent--;
  cg_line(c, "}");
}

static void emit_repeat(Cg *c, Node *n) {
  Graph *b = n->body;
  int d = cg_depth_of(b);
  int nc = n->a.ncarry, nx = n->a.nxs;
  int mark = c->nargs;
  bool once = n == c->once;
  cg_line(c, "{ /* repeat %s x%" PRId64 " */", n->a.name ? n->a.name : "", n->a.count);
  c->indent++;
  for (int k = 0; k < nc && !once; k++) cg_line(c, "char *c%d_%d = %s;", d, k, cg_ptr(c, n->in[k]));
  for (int k = 0; k < b->nargs; k++) {
    Node *arg = b->args[k];
    const char *e;
    if (k < nc && once) /* the first iteration's carry */
      e = cg_ptr(c, n->in[k]);
    else if (k < nc)
      e = arena_printf(c->a, "c%d_%d", d, k);
    else if (k < nc + nx && arg->a.next) /* the next iteration's row (ZeRO-3's prefetch) */
      e = arena_printf(c->a, "(%s + (i%d + %" PRId64 ") %% %" PRId64 " * %" PRId64 ")", cg_ptr(c, n->in[k]), d,
                       n->a.reverse ? n->a.count - 1 : 1, n->a.count, cg_bytes(arg->out[0]));
    else if (k < nc + nx)
      e = arena_printf(c->a, "(%s + i%d * %" PRId64 ")", cg_ptr(c, n->in[k]), d, cg_bytes(arg->out[0]));
    else
      e = cg_ptr(c, n->in[k]);
    bind_arg(c, arg, e);
  }
  if (once) {
    emit_repeat_once(c, n, d);
    c->indent--;
    cg_line(c, "}");
    c->nargs = mark;
    return;
  }
  if (n->a.reverse)
    cg_line(c, "for (int64_t i%d = %" PRId64 "; i%d >= 0; i%d--) {", d, n->a.count - 1, d, d);
  else
    cg_line(c, "for (int64_t i%d = 0; i%d < %" PRId64 "; i%d++) {", d, d, n->a.count, d);
  c->indent++;
  defer_waits(c, n, NULL);
  emit_graph(c, b, NULL);
  for (int r = nc; r < b->nresults; r++) { /* ys not planned in place are copied into their slice */
    Value *y = b->results[r];
    if (y->def->op != OP_ARG && y->offset == n->out[r]->offset && y->stride == cg_bytes(y)) continue; /* in place */
    const char *dst = arena_printf(c->a, "(%s + i%d * %" PRId64 ")", cg_ptr(c, n->out[r]), d, cg_bytes(y));
    bool stack = y->def->op == OP_ARG && y->def->a.index < nc && b->results[y->def->a.index]->last_in &&
                 memplan_carry_in_stack(n, y->def->a.index) == r;
    if (stack) { /* the carry is there already but for the first iteration's input */
      cg_line(c, "if (%s != %s) {", cg_ptr(c, y), dst);
      c->indent++;
    }
    copy_bytes(c, dst, cg_ptr(c, y), cg_bytes(y), false);
    if (stack) {
      c->indent--;
      cg_line(c, "}");
    }
  }
  for (int e = 0; e < c->nearly && !c->need; e++) { /* plan offload: this iteration's rows of a stacked gradient */
    if (c->early[e].rows != n) continue;
    const Node *h = c->early[e].n;
    int64_t row = cg_bytes(h->out[0]) / n->a.count;
    c->t->offload(c, CG_TO_HOST_START, arena_printf(c->a, "%s + i%d * %" PRId64, cg_ptr(c, h->out[0]), d, row),
                  arena_printf(c->a, "%s + i%d * %" PRId64, cg_ptr(c, h->in[0]), d, row), row,
                  offload_slot(h->graph, h));
  }
  for (int k = 0; k < nc; k++) {
    const char *dst = cg_ptr(c, n->out[k]), *src = cg_ptr(c, b->results[k]);
    if (b->results[k]->last_in) { /* in the stack: the next iteration's input is where it was made */
      cg_line(c, "c%d_%d = %s;", d, k, src);
      continue;
    }
    if (strcmp(dst, src) != 0) copy_bytes(c, dst, src, cg_bytes(n->out[k]), true);
    cg_line(c, "c%d_%d = %s;", d, k, dst);
  }
  c->indent--;
  cg_line(c, "}");
  if (n->a.count == 0)
    for (int k = 0; k < nc; k++) cg_copy_if_moved(c, n->out[k], n->in[k]);
  c->indent--;
  cg_line(c, "}");
  c->nargs = mark;
}

/* ---- multi-rank ops: collectives on the ctx's mesh-axis groups (runtime/ops/coll.h) ---- */

/* ---- all-reduce: data-parallel ones run asynchronously, overlapped with what follows ---- */

/* dp all-reduces and reduce-scatters; dp all-gathers of a parameter (ZeRO-3's, reading the
 * stored shard or a layer loop's slice of it: memory that outlives the wait); the receive of a
 * ring shift (cp's hops: a send and its receive, started at the receive). Decided in
 * ir/commreport.c, which the cost model reads too. */
static bool is_async(const Node *n) { return ir_comm_async(n); }

static bool has_async(const Graph *g) {
  for (int i = 0; i < g->nnodes; i++)
    if (is_async(g->nodes[i]) || (g->nodes[i]->body && has_async(g->nodes[i]->body))) return true;
  return false;
}

/* Whether n, or a body it owns (a capture), reads one of vals. */
static bool reads_any(const Node *n, Value *const *vals, int nv) {
  for (int j = 0; j < n->nin; j++)
    for (int k = 0; k < nv; k++)
      if (n->in[j] == vals[k]) return true;
  if (n->body)
    for (int i = 0; i < n->body->nnodes; i++)
      if (reads_any(n->body->nodes[i], vals, nv)) return true;
  return false;
}

/* The first position after `from` in g whose node reads one of vals (g->nnodes: none). */
static int first_reader(const Graph *g, int from, Value *const *vals, int nv) {
  for (int i = from + 1; i < g->nnodes; i++)
    if (reads_any(g->nodes[i], vals, nv)) return i;
  return g->nnodes;
}

static int position_of(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  die("node not in its graph");
}

/* Body result y of repeat r at index k is written in place into its stacked slice. */
static bool stacked_in_place(const Node *r, int k, const Value *y) {
  return k >= r->a.ncarry && y->def->op != OP_ARG && y->offset == r->out[k]->offset && y->stride == cg_bytes(y);
}

/* Where the all-reduce n (node `at` of its graph g) is waited: before the first node of g that
 * reads one of its outputs; with no reader in g, at the end of g — except in a repeat body whose
 * outputs are only yielded as stacked ys in place: each iteration reduces into its own slice of
 * the outer buffer (memplan keeps it live from the repeat on), so the wait moves after the loop,
 * before the first outer reader of those stacked values. A reader inside a fusion group moves the
 * wait before the group. */
void add_wait(Cg *c, const Node *n, int at, int tag) {
  const Graph *g = n->graph;
  Wait w = {tag, g, first_reader(g, at, n->out, n->nout), n->op == OP_RECV, ir_node_stages(n) ? n : NULL, 0,
            skip_cond(c, n)};
  const Node *r = g->owner;
  bool dead = false; /* an output nothing reads: memplan frees it at once, so wait at once */
  for (int o = 0; o < n->nout; o++) {
    bool used = first_reader(g, at, &n->out[o], 1) < g->nnodes;
    for (int k = 0; k < g->nresults; k++) used |= g->results[k] == n->out[o];
    dead |= !used;
  }
  if (dead) w.pos = at + 1;
  /* (a reduce-scatter reads its input until it is waited: it is waited at the end of its
   * iteration, where memplan ends its input's life, not after the loop) */
  else if (w.pos == g->nnodes && g->parent && r && r->op == OP_REPEAT && n->op == OP_ALL_REDUCE) {
    Value **outer = ARENA_ARRAY(c->a, Value *, g->nresults + 1);
    int nouter = 0;
    bool defer = true;
    for (int k = 0; k < g->nresults; k++) {
      bool mine = false;
      for (int o = 0; o < n->nout; o++) mine |= g->results[k] == n->out[o];
      if (!mine) continue;
      if (!stacked_in_place(r, k, g->results[k])) defer = false;
      outer[nouter++] = r->out[k];
    }
    if (defer) {
      const Graph *G = g->parent;
      w.g = G;
      w.pos = first_reader(G, position_of(G, r), outer, nouter);
    }
  }
  w.pos = before_group(w.g, w.pos);
  arena_grow(c->a, (void **)&c->waits, &c->capwaits, c->nwaits + 1, sizeof(Wait));
  c->waits[c->nwaits++] = w;
}

/* Position pos of g, or where the fusion group holding it starts: a reader inside a group may run in a
 * kernel that starts at the group's first node, so a wait goes before the group (a target that runs node
 * by node waits a few nodes early). */
static int before_group(const Graph *g, int pos) {
  while (pos > 0 && pos < g->nnodes && g->nodes[pos]->group && g->nodes[pos - 1]->group == g->nodes[pos]->group) pos--;
  return pos;
}

/* The C condition under which an all_gather `skiplast` runs: its loop's index not on the last
 * iteration; NULL for every other node. */
const char *skip_cond(Cg *c, const Node *n) {
  const Node *r = n->graph->owner;
  if (!n->a.skiplast || !r || r->op != OP_REPEAT) return NULL;
  return arena_printf(c->a, "i%d != %" PRId64, cg_depth_of(n->graph), r->a.reverse ? (int64_t)0 : r->a.count - 1);
}

static const char *stage_cond(Cg *c, const Node *n);

/* Emits the waits due before node pos of g (pos == g->nnodes: at its end); a collective some
 * pipeline stages run is waited on those. */
static void emit_waits(Cg *c, const Graph *g, int pos) {
  int k = 0;
  for (int i = 0; i < c->nwaits; i++) {
    Wait w = c->waits[i];
    if (w.g != g || w.pos != pos) {
      c->waits[k++] = w;
      continue;
    }
    if (w.on) cg_line(c, "if (%s)", stage_cond(c, w.on));
    if (w.on) c->indent++;
    if (w.cond) cg_line(c, "if (%s)", w.cond);
    if (w.cond) c->indent++;
    if (w.upload) c->t->offload(c, CG_DEVICE_WAIT, NULL, NULL, 0, w.upload - 1);
    else if (w.shift) cg_line(c, "rt_coll_shift_wait(ctx, %d); /* ring shift #%d done before what reads it */", w.tag, w.tag);
    else cg_line(c, "rt_coll_wait(ctx, %d); /* all-reduce #%d done before what reads it */", w.tag, w.tag);
    if (w.cond) c->indent--;
    if (w.on) c->indent--;
  }
  c->nwaits = k;
}

/* ys = reduce(xs) over the axis: one collective per dtype of the bucket's members. dp: started
 * here and waited where add_wait says (coll.h rt_coll_all_reduce_start); other axes (tp, on the
 * critical path): blocking. */
/* The axis argument of a collective: its axis, or the group of several (RT_AX_GROUP, Attrs.mesh_with: an
 * all-reduce over dp x cp, ZeRO's reduce-scatters, all-gathers and shard slices over that group). */
/* One node: REPEATs and collectives here, compute nodes by the target. Returns how many
 * nodes from n were emitted (a fused run's length). */
static int emit_node_any(Cg *c, Node *n);

/* Whether a node of another pipeline stage (or of every stage) reads output k of n, or the graph
 * yields it. */
static bool read_elsewhere(const Cg *c, const Node *n, int k) {
  if (n->graph != c->m->graph) die("codegen: a pipeline stage's node inside a region");
  return (c->rstage[n->out[k]->id] & ~ir_node_stages(n)) != 0;
}

/* The condition of running on n's pipeline stages (Node.stage, or Node.stageset). */
static const char *stage_cond(Cg *c, const Node *n) {
  uint64_t m = ir_node_stages(n);
  char *s = arena_printf(c->a, "%s", "");
  for (int st = 0; st < 64; st++)
    if (m >> st & 1)
      s = arena_printf(c->a, "%s%srt_ctx_coord(ctx, RT_AX_PP) == %d", s, *s ? " || " : "", st);
  return s;
}

/* A node of one pipeline stage (Node.stage, passes/pipe.c): the other stages skip it and hold
 * zeros in the outputs a node outside the stage reads. */
static int emit_node(Cg *c, Node *n) {
  if (!ir_node_stages(n)) return emit_node_any(c, n);
  if (n->op == OP_SEND || n->op == OP_RECV) { /* nothing to zero: a recv's value is read on its stage only */
    cg_line(c, "if (%s) {", stage_cond(c, n));
    c->indent++;
    emit_node_any(c, n);
    c->indent--;
    cg_line(c, "}");
    return 1;
  }
  Node *const *run = &n->graph->nodes[c->pos]; /* (emitting a REPEAT's body moves c->pos) */
  cg_line(c, "if (%s) {", stage_cond(c, n));
  c->indent++;
  int k = emit_node_any(c, n); /* a fused run holds one stage's nodes (passes/fuse.c) */
  c->indent--;
  bool zero = false;
  for (int i = 0; i < k; i++)
    for (int q = 0; q < run[i]->nout; q++) zero |= read_elsewhere(c, run[i], q);
  if (zero) {
    cg_line(c, "} else {");
    c->indent++;
    for (int i = 0; i < k; i++)
      for (int q = 0; q < run[i]->nout; q++)
        if (read_elsewhere(c, run[i], q))
          c->t->zero(c, cg_ptr(c, run[i]->out[q]), ir_numel(&run[i]->out[q]->shape) * ir_dtype_size(run[i]->out[q]->dtype));
    c->indent--;
  }
  cg_line(c, "}");
  return k;
}

/* ---- plan offload's copies, where passes/offload_sched.c puts them ---- */

/* The downloads that start after node `after` of the top graph (-1: at the step's start), but not
 * row by row in a loop. */
static void start_downloads(Cg *c, int from, int to) {
  for (int e = 0; e < c->nearly; e++) {
    const CgEarly *q = &c->early[e];
    if (q->rows || q->after < from || q->after > to) continue;
    c->t->offload(c, CG_TO_HOST_START, cg_ptr(c, q->n->out[0]), cg_ptr(c, q->n->in[0]), cg_bytes(q->n->out[0]),
                  offload_slot(q->n->graph, q->n));
  }
}

/* A to_host: the host waits for its download (started here unless it started early); a to_device:
 * its upload starts, and the device waits for it before the first node that reads it. */
static void emit_offload_copy(Cg *c, Node *n) {
  Graph *g = n->graph;
  int slot = offload_slot(g, n);
  if (!c->t->offload) {
    cg_unsupported(c, n, "no host memory on this target");
    return;
  }
  if (n->op == OP_TO_HOST) {
    if (offload_issue(g, n).after == c->pos)
      c->t->offload(c, CG_TO_HOST_START, cg_ptr(c, n->out[0]), cg_ptr(c, n->in[0]), cg_bytes(n->out[0]), slot);
    c->t->offload(c, CG_HOST_WAIT, NULL, NULL, 0, slot);
    return;
  }
  c->t->offload(c, CG_TO_DEVICE_START, cg_ptr(c, n->out[0]), cg_ptr(c, n->in[0]), cg_bytes(n->out[0]), slot);
  arena_grow(c->a, (void **)&c->waits, &c->capwaits, c->nwaits + 1, sizeof(Wait));
  c->waits[c->nwaits++] = (Wait){.g = g, .pos = offload_upload_wait(g, n), .upload = slot + 1};
}

static int shard_slice(Cg *c, Node *n) {
  emit_collective(c, n);
  return 1;
}

static int emit_node_any(Cg *c, Node *n) {
  switch (n->op) {
  case OP_REPEAT: emit_repeat(c, n); return 1;
  case OP_ALL_REDUCE: emit_all_reduce(c, n); return 1;
  case OP_ALL_GATHER: case OP_REDUCE_SCATTER: case OP_BROADCAST: case OP_ALL_TO_ALL:
    emit_collective(c, n);
    return 1;
  case OP_SHARD_SLICE: return cg_emit_counted(c, n, shard_slice); /* a copy, no communication: a kernel on the CPU */
  case OP_SEND: case OP_RECV: emit_p2p(c, n); return 1;
  case OP_STAGE_SELECT: { /* this stage's input */
    int64_t bytes = ir_numel(&n->out[0]->shape) * ir_dtype_size(n->out[0]->dtype);
    int moved = 0;
    for (int s = 0; s < n->nin; s++) moved += !memplan_row_placed(n, s);
    if (!moved) return 1; /* every stage's input made in its output's place */
    cg_line(c, "switch (rt_ctx_coord(ctx, RT_AX_PP)) {");
    for (int s = 0; s < n->nin; s++) {
      if (memplan_row_placed(n, s)) continue; /* the stage's input made in place (memplan_views.c, rows in place) */
      cg_line(c, "case %d:", s);
      c->indent++;
      c->t->copy(c, cg_ptr(c, n->out[0]), cg_ptr(c, n->in[s]), bytes, false);
      cg_line(c, "break;");
      c->indent--;
    }
    cg_line(c, "}");
    return 1;
  }
  case OP_TO_HOST: case OP_TO_DEVICE: emit_offload_copy(c, n); return 1;
  case OP_CALL: cg_unsupported(c, n, "layer calls must be inlined first"); return 1;
  default: return cg_emit_counted(c, n, c->t->node);
  }
}

/* Asynchronous all-reduces in flight are progressed between kernels (rt_coll_progress):
 * the comm layer moves data only when called. */
static bool polls_after(const Node *n) {
  if (n->op == OP_REPEAT) return false; /* its body polls */
  return !(ir_ops[n->op].flags & F_COLL);
}

/* The trainer's --trace marks of a pipeline step (runtime/ops/trace.h): each schedule instruction's
 * nodes (Node.instr) between rt_trace_instr and rt_trace_instr_end on its stage's ranks, and what
 * follows the last instruction (the sums over pp, the clip, the update) as the optimizer. */
static void trace_marks(Cg *c, int *cur, int next) {
  const PipePlan *pl = c->m->pipe;
  if (*cur == next) return;
  if (*cur) cg_line(c, "rt_trace_instr_end(ctx, %d);", pl->order_stage[*cur - 1]);
  if (*cur == pl->norder) cg_line(c, "rt_trace_phase(ctx, \"optimizer\");");
  if (next) {
    const PipeInstr *in = &pl->order[next - 1];
    cg_line(c, "rt_trace_instr(ctx, %d, '%c', %d, %d);", pl->order_stage[next - 1], in->op, in->mb, in->chunk);
  }
  *cur = next;
}

/* Whether an asynchronous collective is in flight (plan offload's uploads are the device's). */
static bool coll_in_flight(const Cg *c) {
  for (int i = 0; i < c->nwaits; i++)
    if (!c->waits[i].upload) return true;
  return false;
}

static void emit_graph(Cg *c, Graph *g, const bool *need) {
  if (!g->parent) c->need = need;
  bool body_async = g->parent && has_async(g); /* earlier iterations' requests may be in flight */
  bool traced = !g->parent && !need && c->m->pipe && c->m->pipe->norder; /* the step of a pipeline program */
  int instr = 0; /* the instruction whose nodes are being emitted (Node.instr) */
  /* a pipeline program's instructions, each a run of statements codegen/outline.c may write once */
  bool marks = c->outline && !g->parent && c->m->pipe && c->m->pipe->norder;
  int run = 0; /* the instruction of the run being emitted */
  int next = 0; /* the first node not emitted yet (after a fused run: past it) */
  bool step = !g->parent && !need; /* (plan offload's early downloads: the step's) */
  if (step) start_downloads(c, -1, -1);
  for (int i = 0; i < g->nnodes; i++) {
    emit_waits(c, g, i);
    if (need && !need[i]) continue;
    if (i < next) continue; /* inside a fused run already emitted */
    Node *n = g->nodes[i];
    if (ir_ops[n->op].flags & F_SOURCE && n->op != OP_CONST && n->op != OP_IOTA) continue;
    if (marks && n->instr != run) cg_line(c, "%s", CG_OUTLINE_MARK);
    run = n->instr;
    if (traced) trace_marks(c, &instr, n->instr);
    if (n->loc.file) cg_line(c, "/* %s:%d */", n->loc.file, n->loc.line);
    c->pos = i;
    long before = ftell(c->f);
    next = i + emit_node(c, n);
    if (step) start_downloads(c, i, next - 1);
    bool emitted = before < 0 || ftell(c->f) != before; /* views and elided copies emit nothing */
    if ((coll_in_flight(c) || body_async) && emitted && polls_after(n)) cg_line(c, "rt_coll_progress(ctx);");
  }
  emit_waits(c, g, g->nnodes);
  if (traced) {
    trace_marks(c, &instr, 0);
    cg_line(c, "rt_trace_phase_end(ctx);");
  }
}

/* Every asynchronous all-reduce is finished before an entry point returns. */
static void end_entry(Cg *c, bool async) {
  if (c->nwaits) die("an asynchronous all-reduce (or an offload upload) has no wait");
  if (async) cg_line(c, "rt_coll_wait_all(ctx);");
  if (c->m->mesh && c->m->mesh->dim[RT_AX_PP] > 1) cg_line(c, "rt_coll_send_wait_all(ctx);");
}

/* A pipeline send by its transfer: tag, mesh axis and stage, as one key (need_closure). */
typedef struct {
  int64_t key;
  int pos; /* in the top graph */
} SendKey;

static int64_t send_key(int tag, int axis, int stage) { return ((int64_t)tag * RT_AX_COUNT + axis) * 4096 + stage; }

static int send_key_cmp(const void *a, const void *b) {
  const SendKey *x = a, *y = b;
  return x->key != y->key ? (x->key > y->key) - (x->key < y->key) : x->pos - y->pos;
}

/* Marks the nodes of top graph g whose values body b (a region of a node at position i, or a body in it) reads
 * or yields: a body reads the graphs around it directly, not through its node's inputs (ir.h), so a value of g
 * only a body reads (positions(seq) under cp, read in the accumulation's micro-step) is needed too: eval and
 * logits run a subsequence of step and read what its nodes left in M, and the memory plan may have given that
 * value's bytes to another after its last reader in step (cp 2 x ZeRO-2 x recompute full with accumulation: the
 * position ids, whose bytes a gradient's reduce-scatter reused, read as garbage). Each body once (seen). */
static void need_captures(const Graph *g, const Graph *b, int i, const PtrMap *pos, PtrMap *seen, bool *need) {
  if (ptrmap_get(seen, b, NULL)) return;
  ptrmap_put(seen, b, 1);
  for (int k = 0; k <= b->nnodes; k++) {
    const Node *n = k < b->nnodes ? b->nodes[k] : NULL;
    int nv = n ? n->nin : b->nresults;
    for (int j = 0; j < nv; j++) {
      const Value *x = n ? n->in[j] : b->results[j];
      intptr_t at;
      if (x && x->def && x->def->graph == g && ptrmap_get(pos, x->def, &at) && at - 1 < i) need[at - 1] = true;
    }
    if (n && n->body) need_captures(g, n->body, i, pos, seen, need);
  }
}

/* Marks, besides the nodes of graph g already marked, what they depend on (those at positions up to i).
 * Linear: the nodes' positions and the pipeline sends by transfer are looked up, not searched (an unrolled
 * schedule has ~10^5 nodes). */
static void need_close(const Graph *g, int i, bool *need) {
  PtrMap pos = {0}, seen = {0}; /* node -> 1 + its position; the bodies whose reads are marked */
  SendKey *sends = calloc((size_t)g->nnodes + 1, sizeof *sends);
  int nsends = 0;
  if (!sends) die("out of memory");
  for (int k = 0; k < g->nnodes; k++) {
    const Node *s = g->nodes[k];
    ptrmap_put(&pos, s, k + 1);
    if (s->op == OP_SEND && s->stage) sends[nsends++] = (SendKey){send_key(s->a.tag, s->a.mesh_axis, s->stage - 1), k};
  }
  qsort(sends, (size_t)nsends, sizeof *sends, send_key_cmp);
  for (; i >= 0; i--) {
    if (!need[i]) continue;
    Node *n = g->nodes[i];
    if (n->op == OP_RECV && send_of(g, i)) need[i - 1] = true; /* a ring shift needs its send's input */
    if (n->op == OP_RECV && n->stage) { /* a pipeline receive needs the other stage's send (and what it sends) */
      int from = n->stage - 1 + (int)n->a.start;
      SendKey want = {send_key(n->a.tag, n->a.mesh_axis, from), -1};
      int lo = 0, hi = from >= 0 && from < 4096 ? nsends : 0; /* the first send with the key */
      while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (send_key_cmp(&sends[mid], &want) < 0) lo = mid + 1;
        else hi = mid;
      }
      for (; lo < nsends && sends[lo].key == want.key; lo++) {
        int k = sends[lo].pos;
        if (need[k]) continue;
        need[k] = true;
        if (k > i) die("codegen: a pipeline receive before its send");
      }
    }
    for (int j = 0; j < n->nin; j++) {
      intptr_t k;
      if (n->in[j]->def->graph == g && ptrmap_get(&pos, n->in[j]->def, &k) && k - 1 < i) need[k - 1] = true;
    }
    if (n->body) need_captures(g, n->body, i, &pos, &seen, need);
  }
  ptrmap_free(&pos);
  ptrmap_free(&seen);
  free(sends);
}

/* Marks the nodes of graph g (the top graph, or a region body) that `v` depends on. */
static void need_closure(const Graph *g, const Value *v, bool *need) {
  int i = g->nnodes - 1;
  while (i >= 0 && g->nodes[i] != v->def) i--;
  if (i < 0) return;
  need[i] = true;
  need_close(g, i, need);
}

/* Marks the nodes of top graph g that body b reads (of the micro-step loop `acc`, directly: only its nodes
 * bneed marks; else a body inside it, all): its ARGs' inputs of acc, and what it reads of g directly. */
static void need_reads(const Graph *g, const Node *acc, const Graph *b, const bool *bneed, const PtrMap *pos, bool *need) {
  for (int k = 0; k <= b->nnodes; k++) {
    const Node *n = k < b->nnodes ? b->nodes[k] : NULL;
    if (n && bneed && !bneed[k]) continue;
    int nv = n ? n->nin : bneed ? 0 : b->nresults;
    for (int j = 0; j < nv; j++) {
      const Value *x = n ? n->in[j] : b->results[j];
      if (x->def->op == OP_ARG && x->def->graph == acc->body) x = acc->in[x->def->a.index];
      intptr_t at;
      if (x->def->graph == g && ptrmap_get(pos, x->def, &at)) need[at - 1] = true;
    }
    if (n && n->body) need_reads(g, acc, n->body, NULL, pos, need);
  }
}

/* Whether the graph (or a region body) has an op of the multi-rank runtime (coll.h). */
static bool uses_multi_rank(const Graph *g) {
  for (int i = 0; i < g->nnodes; i++)
    if (is_multi_rank_op(g->nodes[i]) || (g->nodes[i]->body && uses_multi_rank(g->nodes[i]->body))) return true;
  return false;
}

bool cg_emit_c(FILE *f, const Module *m, const CgOptions *o) {
  Arena a;
  arena_init(&a);
  Cg c = {.f = f, .m = m, .a = &a, .t = cg_target_of(m->target, o->llvm_kernels), .ok = true, .obj_path = o->obj_path,
         .outline = !o->no_outline};
  c.rstage = ARENA_ARRAY(&a, uint64_t, m->graph->next_value_id + 1);
  c.early = ARENA_ARRAY(&a, CgEarly, m->graph->nnodes + 1);
  for (int i = 0; i < m->graph->nnodes; i++) { /* plan offload: the downloads that start before their to_host */
    Node *n = m->graph->nodes[i];
    if (n->op != OP_TO_HOST) continue;
    OffloadIssue is = offload_issue(m->graph, n);
    if (is.after != i) c.early[c.nearly++] = (CgEarly){n, is.after, is.rows};
  }
  ir_reader_stages(m->graph, c.rstage, m->graph->next_value_id);
  c.t->begin(&c);
  Graph *g = m->graph;
  Value *loss = cg_result(g, "loss");
  Value *tokens_v = cg_find_source(g, OP_INPUT, "tokens");
  Value tokens_view = tokens_v ? cg_trainer_view(g, tokens_v) : (Value){0};
  Value *tokens = tokens_v ? &tokens_view : NULL;
  if (!loss || !tokens || tokens->shape.rank != 2) {
    error_plain("model '%s' needs an input `tokens : i32[batch, seq]` and a result `loss` to become a trainer", m->name);
    arena_free(&a);
    return false;
  }
  /* the logits: the first input of the cross_entropy (or, vocab-parallel, of the ce_max) that makes the loss;
   * under gradient accumulation the first micro-step's, in the micro-step loop (the logits entry runs that
   * loop once, its body up to the logits: Cg.once), or, the loop run for no micro-step, the one peeled after it;
   * pipelined, the first in the schedule's order, on the last stage (the entry runs the stages' forward of it, with their
   * transfers: need_close; the logits tensor names the stage, sampling gathers them over pp from it) */
  Value *logits = NULL;
  int64_t V = 0, vocab = 0;
  Node *acc = NULL;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_REPEAT && g->nodes[i]->a.name && strcmp(g->nodes[i]->a.name, "accum") == 0)
      acc = g->nodes[i];
  if (acc && (acc->a.count < 1 || acc->a.reverse)) acc = NULL;
  const Graph *lg = acc ? acc->body : g;
  for (int i = 0; i < lg->nnodes && !logits; i++) {
    Node *n = lg->nodes[i];
    if (n->op != OP_CROSS_ENTROPY && n->op != OP_CE_MAX) continue;
    logits = n->in[0];
    V = logits->shape.dim[logits->shape.rank - 1];
    if (n->op == OP_CE_MAX && n->a.sharded && m->mesh) V *= m->mesh->dim[n->a.mesh_axis];
    vocab = n->a.len > 0 ? n->a.len : V;
  }
  if (!logits) acc = NULL;
  const MeshMap *mesh = m->mesh;
  bool multi = uses_multi_rank(g) || (mesh && mesh->world > 1);

  fprintf(f, "/* Generated by shardc from %s (model %s). Do not edit: recompile the .model instead. */\n",
          o->source_path ? o->source_path : "?", m->name);
  fprintf(f, "#include <stdint.h>\n#include <string.h>\n\n#include \"kern_count.h\"\n%s%s", multi ? "#include \"coll.h\"\n#include \"mesh.h\"\n" : "",
          m->pipe ? "#include \"trace.h\"\n" : "");
  c.t->prologue(&c);
  fprintf(f, "/* memory plan: %" PRId64 " bytes (peak %" PRId64 " live); kernel scratch follows it */\n", m->memplan->total, m->memplan->peak);
  fprintf(f, "#define WS (M + %" PRId64 ")\n\n", m->memplan->total);

  bool *need = ARENA_ARRAY(&a, bool, g->nnodes + 1);
  bool async = has_async(g);
  /* plan offload: the values in host memory are at offsets into the host allocation H */
  const char *host_base = m->memplan->host_total > 0 ? "  char *H = rt_ctx_host_mem(ctx);\n  (void)H;\n" : "";
  /* the entry points go through codegen/outline.c, which writes the runs they repeat once */
  char *entries = NULL;
  size_t nentries = 0;
  c.f = open_memstream(&entries, &nentries);
  if (!c.f) die("out of memory");
  fprintf(c.f, "static void step(char *M, RtCtx *ctx) {\n  (void)ctx;\n%s", host_base);
  c.indent = 1;
  emit_graph(&c, g, NULL);
  end_entry(&c, async);
  for (int r = 0; r < g->nresults; r++) { /* state updates not done in place */
    const char *nm = g->result_names[r];
    if (!nm || strncmp(nm, "next:", 5) != 0) continue;
    Value *dst = cg_find_source(g, OP_PARAM, nm + 5);
    if (!dst) dst = cg_find_source(g, OP_STATE, nm + 5);
    if (!dst) die("result %s updates no PARAM/STATE", nm);
    bool own = ir_node_stages(dst->def) && strcmp(cg_ptr(&c, dst), cg_ptr(&c, g->results[r])) != 0; /* held on some stages: there */
    if (own) cg_line(&c, "if (%s) {", stage_cond(&c, dst->def));
    cg_copy_if_moved(&c, dst, g->results[r]);
    if (own) cg_line(&c, "}");
  }
  fprintf(c.f, "}\n\n");

  need_closure(g, loss, need);
  fprintf(c.f, "static void eval(char *M, RtCtx *ctx) {\n  (void)ctx;\n%s", host_base);
  emit_graph(&c, g, need);
  end_entry(&c, async);
  fprintf(c.f, "}\n\n");

  memset(need, 0, sizeof(bool) * (size_t)g->nnodes);
  if (acc) { /* what the micro-step loop reads, and in its body what the logits need */
    bool *body_need = ARENA_ARRAY(&a, bool, acc->body->nnodes + 1);
    need_closure(acc->body, logits, body_need);
    PtrMap pos = {0}; /* top node -> 1 + its position */
    for (int k = 0; k < g->nnodes; k++) ptrmap_put(&pos, g->nodes[k], k + 1);
    need_reads(g, acc, acc->body, body_need, &pos, need);
    ptrmap_free(&pos);
    int at = position_of(g, acc);
    need_close(g, at - 1, need);
    need[at] = true;
    c.once = acc;
    c.body_need = body_need;
  } else if (logits)
    need_closure(g, logits, need);
  fprintf(c.f, "static void logits(char *M, RtCtx *ctx) {\n  (void)ctx;\n%s", host_base);
  if (logits) emit_graph(&c, g, need);
  end_entry(&c, async);
  c.once = NULL;
  fprintf(c.f, "}\n\n");
  fclose(c.f);
  c.f = f;
  cg_outline_write(f, entries, nentries, host_base);
  free(entries);

  c.t->finish(&c);
  fprintf(f, "static int64_t workspace_bytes(void) {\n  int64_t n = 0, k;\n");
  for (int i = 0; i < c.nws; i++) fprintf(f, "  k = (int64_t)%s;\n  if (k > n) n = k;\n", c.ws[i]);
  fprintf(f, "  return n;\n}\n\n");

  bool describe_logits = (multi || c.t->logits_tensor) && logits;
  int ntensors = cg_emit_tensor_table(&c, describe_logits ? logits : NULL);
  int coll_stages = cg_emit_coll_plan(&c);
  int kern_stages = cg_emit_kern_plan(&c);

  const Recipe *rc = &m->recipe;
  static const char *opt[] = {[OPT_SGD] = "RT_OPT_SGD", [OPT_ADAMW] = "RT_OPT_ADAMW"};
  static const char *sch[] = {[LR_CONSTANT] = "RT_LR_CONSTANT", [LR_LINEAR] = "RT_LR_LINEAR", [LR_COSINE] = "RT_LR_COSINE"};
  fprintf(f, "static const RtProgram program = {\n");
  fprintf(f, "  .model = %s,\n  .source = %s,\n", cg_cstr(&c, m->name), cg_cstr(&c, o->source_path));
  fprintf(f, "  .mem_bytes = %" PRId64 ",\n  .workspace_bytes = workspace_bytes,\n  .mem_peak = %" PRId64 ",\n", m->memplan->total, m->memplan->peak);
  if (m->memplan->host_total > 0) fprintf(f, "  .host_bytes = %" PRId64 ",\n", m->memplan->host_total);
  if (multi && mesh)
    fprintf(f, "  .mesh = {[RT_AX_DP] = %d, [RT_AX_PP] = %d, [RT_AX_CP] = %d, [RT_AX_TP] = %d},\n", mesh->dim[RT_AX_DP],
            mesh->dim[RT_AX_PP], mesh->dim[RT_AX_CP], mesh->dim[RT_AX_TP]);
  if (multi && mesh && mesh->stage_rows[0]) { /* uneven pipeline stages (RT_BLOCKS_STAGES) */
    fprintf(f, "  .stage_rows = (const int[]){");
    int nrows = mesh->dim[RT_AX_PP] * (mesh->stage_chunks > 1 ? mesh->stage_chunks : 1);
    for (int s = 0; s < nrows; s++) fprintf(f, "%s%d", s ? ", " : "", mesh->stage_rows[s]);
    fprintf(f, "},\n");
    if (mesh->stage_chunks > 1) fprintf(f, "  .stage_chunks = %d,\n", mesh->stage_chunks);
  }
  fprintf(f, "  .batch = %" PRId64 ",\n  .seq = %" PRId64 ",\n", tokens->shape.dim[0], tokens->shape.dim[1]);
  fprintf(f, "  .global_batch = %" PRId64 ",\n  .micro_batch = %" PRId64 ",\n  .accum = %" PRId64 ",\n", m->batch.global,
          m->batch.micro, m->batch.accum);
  fprintf(f, "  .vocab = %" PRId64 ",\n  .vocab_padded = %" PRId64 ",\n  .byte_level = %d,\n", vocab, V, vocab == 256);
  fprintf(f, "  .nparams = %" PRId64 ",\n  .flops_per_token = %.17g,\n", ir_param_count(m), ir_flops_per_token(m, true));
  fprintf(f, "  .ntensors = %d,\n  .tensors = tensors,\n", ntensors);
  if (coll_stages) fprintf(f, "  .coll_plan = coll_plan,\n  .coll_plan_stages = %d,\n", coll_stages);
  fprintf(f, "  .kern_plan = kern_plan,\n  .kern_plan_stages = %d,\n  .gemm_flop_plan = gemm_flop_plan,\n", kern_stages);
  fprintf(f, "  .logits_offset = %" PRId64 ",\n", logits ? logits->offset : (int64_t)-1);
  if (describe_logits) fprintf(f, "  .logits_tensor = &logits_tensor,\n");
  fprintf(f, "  .recipe = {.optimizer = %s, .lr = %.17g, .min_lr = %.17g, .lr_schedule = %s, .warmup = %" PRId64
             ", .steps = %" PRId64 ", .seed = %" PRIu64 "u, .grad_clip = %.17g,\n",
          opt[rc->optimizer], rc->lr, rc->min_lr, sch[rc->lr_schedule], rc->warmup, rc->steps, rc->seed, rc->grad_clip);
  fprintf(f, "             .data = %s, .val = %s, .ckpt_every = %" PRId64 ", .ckpt_dir = %s, .ckpt_keep = %d",
          cg_cstr(&c, rc->data), cg_cstr(&c, rc->val), rc->ckpt_every, cg_cstr(&c, rc->ckpt_dir), rc->ckpt_keep);
  if (rc->on_nonfinite == NONFINITE_SKIP) /* passes/optimizer.c gated the update */
    fprintf(f, ",\n             .on_nonfinite = RT_NONFINITE_SKIP, .max_skips = %" PRId64, rc->max_skips);
  fprintf(f, "},\n");
  fprintf(f, "  .step = step,\n  .eval = eval,\n  .logits = logits,\n");
  c.t->program(&c);
  fprintf(f, "};\n\n");
  fprintf(f, "int main(int argc, char **argv) { return rt_train_main(argc, argv, &program); }\n");
  bool ok = c.ok;
  ptrmap_free(&c.uses);
  ptrmap_free(&c.results);
  ptrmap_free(&c.deferred);
  arena_free(&a);
  return ok;
}
