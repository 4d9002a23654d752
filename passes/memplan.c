/* passes/memplan.c — liveness-based placement of every value in one allocation per rank.
 *
 * Layout: [persistent: params, optimizer state, inputs][transient arena]. Transient
 * values get an interval [definition, last use] in node order and are packed by a
 * greedy best-offset allocator (largest first), so values whose lifetimes do not
 * overlap share memory. A REPEAT body is planned on its own (its values are reused
 * every iteration) and appears in the outer plan as one block live at the REPEAT.
 * Body values that are stacked ys are not placed in the body: they live in the
 * outer stacked buffer at offset + i * stride. Results "next:X" of an update op
 * that reads X alias X (the update runs in place), as does ZeRO's "next:X" = all_gather over dp
 * of X's updated shard once nothing reads X any more (the gather writes X's storage). An all-reduce output takes its
 * input's place when the input is not used after it (the collective runs in place:
 * a data-parallel gradient and its reduced sum are one buffer, not two); so does an update's
 * result when it updates a transient that dies there (ZeRO's shard_slice of a parameter). A
 * repeat's carry is one buffer when it can be: its output takes its initial value's place, and a
 * body result add(arg, x) is written into the output (gradient accumulation's running sums).
 * A collective that packs its members' chunks (memplan_scratch_bytes) gets a scratch buffer of the
 * plan, class communication, live at its node: the runtime packs there, not in a hidden workspace.
 * A loop body's reduce-scatter its iteration does not read stays live through the body and is waited in the
 * next iteration (memplan_defer.c).
 * Column views (memplan_views.c): a last-axis slice its readers take at a row stride shares its
 * source's bytes (Value.ld), and a concat of stride-writing outputs has them written into its columns.
 * Rows in place (memplan_views.c): a concat or pad along dim 0 and a stage_select may have their inputs
 * written into their rows of the output (an interleaved stage's chunks' gradient sums), where memplan_pack takes the link.
 * CUDA: a GEMM's reads live through its epilogue's nodes (keep_epilogue_reads). Fusion groups
 * (passes/fuse.c) change the placement only so far as a vector they broadcast lives through the group
 * (memplan_keep_group_reads); else a group is cut where the placement would make its one kernel race
 * (memplan_groups.c, at the end).
 */
#include "memplan.h"

#include <stdlib.h>
#include <string.h>

#include "commreport.h"
#include "diag.h"
#include "memplan_pack.h"
#include "memplan_views.h"
#include "offload_sched.h"
#include "passes.h"
#include "zero.h"

const char *const memplan_class_names[MEM_COUNT] = {"params", "optimizer", "inputs", "grads",
                                                    "activations", "workspace", "comm"};

static int64_t align_up(int64_t x) { return memplan_align(x); }

#define value_bytes memplan_bytes

#define add_interval memplan_add_interval

/* Marks every value of an enclosing graph that `body` (or its nested bodies) reads as
 * used at position pos of the outer plan. */
static void mark_captures(Graph *body, Graph *outer, int pos, const int *slot, Interval *iv) {
  for (int i = 0; i < body->nnodes; i++) {
    Node *n = body->nodes[i];
    for (int j = 0; j < n->nin; j++) {
      Value *u = n->in[j];
      if (u->def->graph == outer && slot[u->id] && iv[slot[u->id] - 1].end < pos) iv[slot[u->id] - 1].end = pos;
    }
    if (n->body) mark_captures(n->body, outer, pos, slot, iv);
  }
}

#define is_update memplan_is_update

/* Does any node after `n` in g read `v`? (Then n cannot overwrite v in place.) */
static bool read_after(const Graph *g, const Node *n, const Value *v) {
  int i = 0;
  while (i < g->nnodes && g->nodes[i] != n) i++;
  for (i++; i < g->nnodes; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++)
      if (g->nodes[i]->in[j] == v) return true;
  return false;
}

/* Does a node of g from position `from` on (its nested bodies included) read `v`? */
static bool read_from(const Graph *g, int from, const Value *v) {
  for (int i = from; i < g->nnodes; i++) {
    for (int j = 0; j < g->nodes[i]->nin; j++)
      if (g->nodes[i]->in[j] == v) return true;
    if (g->nodes[i]->body && read_from(g->nodes[i]->body, 0, v)) return true;
  }
  return false;
}

/* ZeRO-1/2's rebuilt parameter: y = all_gather over dp (or cp, ZeRO's group at dp 1), the graph's
 * result "next:X" for a PARAM X of g of y's size that no node reads from the gather on (the gather reads only the updated
 * shard, a separate buffer). Returns X (y is gathered straight into X's storage), else NULL. */
static Value *gathered_param(const Graph *g, const Value *y, int pos) {
  const Node *n = y->def;
  /* (offload: the updated shard uploaded, to_device, writes the parameter the same way) */
  if ((n->op != OP_ALL_GATHER || (n->a.mesh_axis != RT_AX_DP && n->a.mesh_axis != RT_AX_CP)) && n->op != OP_TO_DEVICE)
    return NULL;
  if (!g->result_names) return NULL;
  const char *nm = NULL;
  for (int r = 0; r < g->nresults && !nm; r++)
    if (g->results[r] == y && g->result_names[r] && strncmp(g->result_names[r], "next:", 5) == 0)
      nm = g->result_names[r] + 5;
  if (!nm) return NULL;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *d = g->nodes[i];
    if (d->op != OP_PARAM || strcmp(d->a.name, nm) != 0) continue;
    Value *x = d->out[0];
    if (value_bytes(x) != value_bytes(y) || (x->offset < 0 && !ir_node_stages(d)) || read_from(g, pos, x)) return NULL;
    return x;
  }
  return NULL;
}

int64_t memplan_scratch_bytes(const Node *n) {
  switch (n->op) {
  case OP_ALL_GATHER:
  case OP_REDUCE_SCATTER: {
    bool gather = n->op == OP_ALL_GATHER;
    const Value *split = gather ? n->in[0] : n->out[0], *whole = gather ? n->out[0] : n->in[0];
    int64_t outer = 1;
    for (int d = 0; d < n->a.axis && d < split->shape.rank; d++) outer *= split->shape.dim[d];
    return rt_pack_bytes(outer, n->a.blocks, value_bytes(whole));
  }
  case OP_ALL_TO_ALL: return rt_all_to_all_pack_bytes(value_bytes(n->in[0]));
  default: return 0;
  }
}

/* Adds shift to every placed value (and node scratch) of a body and its nested bodies. */
static void shift_body(Graph *body, int64_t shift) {
  for (int j = 0; j < body->nnodes; j++) {
    Node *n = body->nodes[j];
    if (n->scratch_bytes > 0) n->scratch_at += shift;
    for (int o = 0; o < n->nout; o++)
      if (n->out[o]->offset >= 0 && n->op != OP_ARG) n->out[o]->offset += shift;
    if (n->body) shift_body(n->body, shift);
  }
}

/* Plans one graph's transient values; returns its arena size, sets offsets relative to
 * `base`. For a body, `stacked` marks results that are stacked ys (placed outside). */
static int64_t plan_graph(Graph *g, int64_t base, MemPlan *mp, Arena *tmp, int64_t *peak_out,
                          int64_t by_class[MEM_COUNT], bool epi, int64_t *plain);

/* How many inputs of nodes of g (nested bodies included) are v. */
static int readers(const Graph *g, const Value *v) {
  int k = 0;
  for (int i = 0; i < g->nnodes; i++) {
    for (int j = 0; j < g->nodes[i]->nin; j++) k += g->nodes[i]->in[j] == v;
    if (g->nodes[i]->body) k += readers(g->nodes[i]->body, v);
  }
  return k;
}

bool memplan_is_view(const Node *n) {
  return n->op == OP_RESHAPE || (n->op == OP_CAST && n->in[0]->dtype == n->out[0]->dtype) || ir_slice_is_view(n) ||
         memplan_row_slice(n) || memplan_col_slice(n);
}
#define is_view memplan_is_view

/* Carry k of repeat rep updated in place: the body's result k is add(arg k, x) (or the stacked
 * output of a loop that adds arg k's slices in place, memplan_xs_in_place) and nothing else in the body
 * reads arg k (nor yields it), so the sum can be written straight into the region's
 * output k, which is what arg k points at from the second iteration on (codegen's emit_repeat:
 * the carry pointer moves to the output after the first). Gradient accumulation's running sums:
 * sum += this micro-step's gradient, one buffer instead of the output and a sum per iteration. */

/* Whether v, a value of g, or a view of it (of a view ...) is read by a node from position `from` on
 * (nested bodies included), or by an asynchronous collective anywhere (it reads after its position). */
static bool live_from(const Graph *g, int from, const Value *v) {
  if (read_from(g, from, v)) return true;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++)
      if (n->in[j] == v && (ir_comm_async(n) || (is_view(n) && live_from(g, from, n->out[0])))) return true;
  }
  return false;
}

static int position(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  return -1;
}

/* The residual stream's gradient carried by the backward layer loop: result k is a chain of adds
 * y = add(v_1, t_1), v_1 = add(v_2, t_2), ..., v_n = add(arg k, t_n), in which each add is the last
 * reader of the v it adds to (the others read v before it: the branches of the layer), so each sum
 * can be written over the one before, and the first over arg k: the whole chain lives in the
 * region's output k. The values v_1 .. v_n are stored in mids (at most `max`), *n their count. An
 * add whose other operand a matmul makes is taken only where it is v's one reader (passes/epilogue.c
 * may fold it into the GEMM, which then writes the sum where the matmul stands, before v's other
 * readers; alone it is gradient accumulation's sum += dW, a GEMM accumulating in place). */
static bool carry_chain(const Node *rep, int k, Value **mids, int max, int *n) {
  const Graph *body = rep->body;
  Value *a = body->args[k]->out[0], *v = body->results[k];
  *n = 0;
  for (;;) {
    const Node *d = v->def;
    if (d->graph != body || d->op != OP_ADD || d->in[0] == d->in[1] || value_bytes(v) != value_bytes(a)) return false;
    int at = d->in[1] == a ? 1 : 0, pos = position(body, d);
    Value *x = d->in[at], *t = d->in[1 - at];
    if (live_from(body, pos + 1, x) || ir_is_result(body, x) || (t->def->op == OP_MATMUL && readers(body, x) > 1))
      return false;
    if (x == a) return true;
    if (*n == max || x->def->graph != body || is_view(x->def) || x->host || value_bytes(x) != value_bytes(a)) return false;
    mids[(*n)++] = x;
    v = x;
  }
}
enum { CARRY_CHAIN_MAX = 8 };

static bool carry_in_place(const Node *rep, int k) {
  const Graph *body = rep->body;
  Value *y = body->results[k], *a = body->args[k]->out[0];
  if (y->def->graph != body || ir_is_result(body, a)) return false;
  if (y->def->op == OP_REPEAT) { /* a loop's stacked output made in place on arg k (passes/sums.c) */
    int q = memplan_xs_in_place(y->def, y->idx);
    if (q < 0 || y->def->in[q] != a || readers(body, y) != 0 || readers(body, a) != 1) return false;
  } else {
    Value *mids[CARRY_CHAIN_MAX];
    int n;
    if (!carry_chain(rep, k, mids, CARRY_CHAIN_MAX, &n)) return false;
  }
  for (int r = 0; r < body->nresults; r++)
    if (r != k && body->results[r] == y) return false;
  return rep->out[k]->offset != -2 && value_bytes(y) == value_bytes(rep->out[k]);
}

/* Whether the region's output k may take the place of its initial value (rep's input k) when that
 * dies at the region: only if the body neither reads the initial value directly (a capture) nor
 * yields arg k as another carry (the output's copy at the end of the first iteration would
 * overwrite what that carry still copies from). */
static bool carry_init_shared(const Node *rep, int k) {
  const Graph *body = rep->body;
  if (readers(body, rep->in[k]) != 0) return false;
  for (int j = 0; j < rep->nin; j++)
    if (j != k && rep->in[j] == rep->in[k]) return false;
  for (int r = 0; r < rep->a.ncarry; r++) /* (stacked ys are copied before the carries: fine) */
    if (r != k && body->results[r] == body->args[k]->out[0]) return false;
  return true;
}

/* The input a stacked body result's memory may be shared with, as an in-place operand: an
 * all-reduce's, a scale's, an add's first (same shape); else NULL. */
static Value *chain_in(const Value *y) {
  const Node *d = y->def;
  if (d->op == OP_ALL_REDUCE && y->idx < d->nin) return d->in[y->idx];
  if (d->op == OP_SCALE || (d->op == OP_ADD && ir_shape_eq(&d->in[0]->shape, &y->shape))) return d->in[0];
  return NULL;
}

/* The stacked input of repeat rep whose slices its stacked output k may take (in place): the
 * body's result k is made by a chain of in-place ops (chain_in: all-reduce, scale) from
 * add(arg q, t), arg q a stacked input's argument that nothing else in the body reads. Each
 * iteration then reads slice i of input q once, in that add, and writes slice i of output k from
 * it, index for index (passes/peel.c: the last micro-step's sum_l + g_l into the sum's buffer).
 * Returns q, or -1. */
int memplan_xs_in_place(const Node *rep, int k) {
  const Graph *body = rep->body;
  if (k < rep->a.ncarry || k >= body->nresults) return -1;
  const Value *v = body->results[k];
  while (v->def->graph == body && v->def->op != OP_ADD && !(v->def->op == OP_MATMUL && v->def->nin == 3)) {
    const Value *x = chain_in(v);
    if (!x) return -1;
    v = x;
  }
  /* (after passes/gacc.c: the matmul accumulating into arg q, in place as the add was) */
  bool acc = v->def->graph == body && v->def->op == OP_MATMUL && v->def->nin == 3;
  if (v->def->graph != body || (v->def->op != OP_ADD && !acc)) return -1;
  const Value *a = v->def->in[acc ? 2 : 0];
  if (a->def->op != OP_ARG || a->def->graph != body || a->def->a.next || !ir_shape_eq(&a->shape, &v->shape)) return -1;
  int q = a->def->a.index;
  if (q < rep->a.ncarry || q >= rep->a.ncarry + rep->a.nxs) return -1;
  if (readers(body, a) != 1 || ir_is_result(body, a) || readers(body, rep->in[q]) != 0) return -1;
  for (int j = 0; j < rep->nin; j++)
    if (j != q && rep->in[j] == rep->in[q]) return -1;
  return value_bytes(a) == value_bytes(body->results[k]) ? q : -1;
}

int memplan_carry_in_stack(const Node *rep, int k) {
  if (rep->op != OP_REPEAT || rep->a.reverse || rep->a.count < 2 || k >= rep->a.ncarry) return -1;
  const Graph *body = rep->body;
  const Value *a = body->args[k]->out[0], *y = body->results[k];
  /* the next value: made in the body by a node with its own place (not a view, not in place) */
  if (y->def->graph != body || y->def->op == OP_ARG || is_view(y->def) || value_bytes(y) != value_bytes(a)) return -1;
  int j = -1;
  for (int r = 0; r < body->nresults; r++) {
    if (r != k && body->results[r] == y) return -1;
    if (j < 0 && r >= rep->a.ncarry && body->results[r] == a) j = r;
  }
  if (j < 0) return -1;
  const Value *stack = rep->out[j], *out = rep->out[k];
  if (stack->host || out->host || stack->offset == -2 || out->offset == -2) return -1; /* placed elsewhere */
  return value_bytes(stack) == rep->a.count * value_bytes(a) ? j : -1;
}

static void place_body(Node *rep, MemPlan *mp, int64_t *bytes, int64_t *peak,
                       int64_t by_class[MEM_COUNT], bool epi, int64_t *plain) {
  Graph *body = rep->body;
  /* stacked ys: body result ncarry+k lives in outer output ncarry+k, slice per iteration */
  int ncarry = rep->op == OP_REPEAT ? rep->a.ncarry : 0;
  for (int r = 0; rep->op == OP_REPEAT && r < ncarry; r++)
    if (carry_in_place(rep, r) || memplan_carry_in_stack(rep, r) >= 0) {
      body->results[r]->offset = -2; /* in the output, or in the stack: place_stacked */
      Value *mids[CARRY_CHAIN_MAX];
      int n = 0;
      if (body->results[r]->def->op == OP_ADD && carry_in_place(rep, r)) carry_chain(rep, r, mids, CARRY_CHAIN_MAX, &n);
      for (int j = 0; j < n; j++) mids[j]->offset = -2; /* the sums before it: there too */
    }
  for (int r = ncarry; rep->op == OP_REPEAT && r < body->nresults; r++) {
    Value *y = body->results[r];
    if (y->def->graph != body || y->def->op == OP_ARG) continue; /* copied by codegen */
    y->offset = -2;                                               /* placed once the outer value is */
    /* a stacked all-reduce output: its input, read by nothing else, lives there too; and so,
     * back along the chain, the first operand of an in-place scale or add that makes it
     * (passes/peel.c's (g_l + sum_l) / k: the layer's gradient written into its slice) */
    for (Value *v = y, *x; (x = chain_in(v)) != NULL; v = x) {
      if (x->def->graph != body || x->def->op == OP_ARG || is_view(x->def) || x->offset == -2 ||
          value_bytes(x) != value_bytes(y) || readers(body, x) != 1 || ir_is_result(body, x))
        break;
      x->offset = -2;
    }
  }
  Arena scratch; /* (the body's own lists freed after it: thousands of bodies, 0.4 GB at Llama-3-405B pp 16 x cp 2) */
  arena_init(&scratch);
  *bytes = plan_graph(body, 0, mp, &scratch, peak, by_class, epi, plain);
  arena_free(&scratch);
}

/* CUDA target: what a matmul and the nodes its GEMM epilogue may absorb read from outside them
 * (epilogue_reach) lives through the last of them: no value the GEMM stores takes its bytes. */
static void keep_epilogue_reads(const Graph *g, const int *slot, Interval *iv) {
  PtrMap uses = {0}; /* the readers of g's values (in g and the bodies in it), counted once */
  ir_use_counts(g, &uses);
  for (int i = 0, at[2], e; i < g->nnodes; i++) {
    if (g->nodes[i]->op != OP_MATMUL || (e = epilogue_reach(g, &uses, i, at)) == 0) continue;
    const Node *mem[3] = {g->nodes[i], g->nodes[at[0]], e > 1 ? g->nodes[at[1]] : NULL};
    for (int k = 0; k <= e; k++)
      for (int j = 0; j < mem[k]->nin; j++) {
        const Value *u = mem[k]->in[j];
        if (u->def == mem[0] || u->def == mem[1] || u->def == mem[2] || u->def->graph != g || !slot[u->id]) continue;
        if (iv[slot[u->id] - 1].end < at[e - 1]) iv[slot[u->id] - 1].end = at[e - 1];
      }
  }
  ptrmap_free(&uses);
}

/* Whether x is a view sharing its source's interval (slot) from past the interval's first byte (a row view
 * of rows after the first, of a view ...): what is written where x stands is not at the interval's start. */
static bool past_first_byte(const Graph *g, const Value *x, const int *slot) {
  for (; x->def->graph == g && memplan_is_view(x->def); x = x->def->in[0]) {
    const Value *in = x->def->in[0];
    if (in->def->graph != g || slot[in->id] != slot[x->id]) return false;
    if (memplan_view_at(x->def)) return true;
  }
  return false;
}

static int64_t plan_graph(Graph *g, int64_t base, MemPlan *mp, Arena *tmp, int64_t *peak_out,
                          int64_t by_class[MEM_COUNT], bool epi, int64_t *plain) {
  Intervals p = {.a = tmp};
  /* fresh dense value numbers for this graph: slot[id] = 1 + interval index, 0 = none */
  int nv = 0; /* (value numbers are names, which the verifier does not check: no ir_touch) */
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i]->nout; k++) g->nodes[i]->out[k]->id = nv++;
  g->next_value_id = nv;
  int *slot = ARENA_ARRAY(tmp, int, nv + 1);
  bool *view = ARENA_ARRAY(tmp, bool, g->nnodes + 1);
  uint64_t *rmask = ARENA_ARRAY(tmp, uint64_t, nv + 1); /* the stages reading each value (ir_reader_stages) */
  ir_reader_stages(g, rmask, nv);
  /* concats whose producers write into their column slots (memplan_views.c): the inputs get no interval of
   * their own; the concat's starts at its first producer */
  bool *slotted = ARENA_ARRAY(tmp, bool, nv + 1), *colcat = ARENA_ARRAY(tmp, bool, g->nnodes + 1);
  int *made = ARENA_ARRAY(tmp, int, nv + 1); /* the position defining each value */
  bool *kept = ARENA_ARRAY(tmp, bool, nv + 1); /* a view of persistent memory (of a view of it ...) */
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i]->nout; k++) made[g->nodes[i]->out[k]->id] = i;
  for (int i = 0; i < g->nnodes; i++)
    if ((colcat[i] = memplan_col_concat(g->nodes[i])))
      for (int k = 0; k < g->nodes[i]->nin; k++) slotted[g->nodes[i]->in[k]->id] = true;
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    int last = n->op == OP_SEND ? i + 1 : i; /* a send's data lives through its receive (one ring shift) */
    for (int j = 0; j < n->nin; j++) {
      Value *u = n->in[j];
      if (u->def->graph == g && slot[u->id] && p.iv[slot[u->id] - 1].end < last) p.iv[slot[u->id] - 1].end = last;
    }
    if (n->body) {
      mark_captures(n->body, g, i, slot, p.iv);
      if (mp->defer_waits && n->cont) memplan_held_pairs(g, i, &p);
      int64_t ipeak = 0, icls[MEM_COUNT] = {0}, bytes = 0, bplain = 0;
      place_body(n, mp, &bytes, &ipeak, icls, epi, &bplain);
      if (bytes > 0) { /* the body's block: activations, but for its packing buffers at its peak */
        Interval *it = add_interval(&p, NULL, bytes, i, MEM_ACT);
        it->plain = bplain != bytes ? memplan_align(bplain) : 0; /* (memplan_pack) */
        it->stage = n->stage;
        it->comm = icls[MEM_COMM];
      }
    }
    int64_t sb = memplan_scratch_bytes(n);
    if (sb > 0) { /* a collective's packing buffer, live while it runs */
      Interval *it = add_interval(&p, NULL, sb, i, MEM_COMM);
      it->node = n;
      it->stage = n->stage;
    }
    if (n->op == OP_PARAM || n->op == OP_STATE || n->op == OP_INPUT) { /* persistent, placed by the caller ... */
      if (ir_node_stages(n) && !n->out[0]->host) { /* ... unless some pipeline stages hold it: among their values, always live */
        Interval *it = add_interval(&p, n->out[0], value_bytes(n->out[0]), 0, n->op == OP_PARAM ? MEM_PARAM : MEM_OPTIM);
        it->end = g->nnodes;
        it->stage = n->stage;
        it->set = n->stageset;
        slot[n->out[0]->id] = p.n;
      }
      continue;
    }
    /* (a stage's row slice that other stages read: a copy, which they zero-fill; not the source's rows) */
    bool off_stage = memplan_row_slice(n) && !ir_slice_is_view(n) && ir_node_stages(n) &&
                     (rmask[n->out[0]->id] & ~ir_node_stages(n));
    if ((is_view(n) || (epi && ir_cast_folded(n))) && n->out[0]->offset != -2 && !off_stage) { /* (a folded cast: its source's place) */
      Value *in = n->in[0];
      Node *d = in->def;
      if (d->graph == g && slot[in->id]) { /* share the input's interval */
        slot[n->out[0]->id] = slot[in->id];
        view[i] = true;
        continue;
      }
      if (d->graph == g && (d->op == OP_PARAM || d->op == OP_STATE || d->op == OP_INPUT || kept[in->id])) {
        view[i] = true; /* persistent memory: always there (a stage's rows of a stack, and a row of those) */
        kept[n->out[0]->id] = true;
        continue;
      }
      if (in->offset == -2 && memplan_col_slice(n)) { /* a column view of a stacked y: placed with it */
        n->out[0]->offset = -2;
        n->out[0]->ld = in->shape.dim[in->shape.rank - 1];
        continue;
      }
      if (d->graph == g && !ir_slice_is_view(n) && (d->op == OP_ARG || in->offset == IR_OFFSET_VIEW || in->offset == -2)) {
        /* a region's argument (a stacked input's slice, a carry, a capture) lives the whole
         * iteration outside the region's transients: the view is its bytes, not a copy (a column view:
         * its columns, at the argument's row stride; codegen adds the first column, memplan_col_at);
         * so does a value placed in the region's outputs (-2: a stacked y, a carry's sums) */
        n->out[0]->offset = IR_OFFSET_VIEW;
        n->out[0]->ld = memplan_col_slice(n) ? in->shape.dim[in->shape.rank - 1] : 0;
        continue;
      }
    }
    if (colcat[i]) { /* live from its first producer; its inputs share it */
      int from = i;
      for (int k = 0; k < n->nin; k++) from = made[n->in[k]->id] < from ? made[n->in[k]->id] : from;
      Interval *it = add_interval(&p, n->out[0], value_bytes(n->out[0]), from, MEM_ACT);
      it->end = i;
      if (ir_node_stages(n) && !(rmask[n->out[0]->id] & ~ir_node_stages(n))) it->stage = n->stage, it->set = n->stageset;
      slot[n->out[0]->id] = p.n;
      for (int k = 0; k < n->nin; k++) slot[n->in[k]->id] = p.n;
      continue;
    }
    for (int k = 0; k < n->nout; k++) {
      Value *v = n->out[k];
      if (n->op == OP_ARG || v->offset == -2 || v->offset == MEMPLAN_HELD || v->host || slotted[v->id])
        continue; /* (host values: place_host; held: the enclosing graph's, memplan_held_pairs) */
      Interval *it = add_interval(&p, v, value_bytes(v), i, MEM_ACT);
      /* a pipeline stage's value that only its stages read (codegen zeroes the others' on the
       * other stages: those every rank touches) */
      if (ir_node_stages(n) && !(rmask[v->id] & ~ir_node_stages(n))) it->stage = n->stage, it->set = n->stageset;
      slot[v->id] = p.n;
    }
  }
  if (epi) keep_epilogue_reads(g, slot, p.iv);
  memplan_keep_group_reads(g, slot, p.iv);
  /* a view shares its input's bytes: read (or zeroed by codegen) off its stage, they are every rank's */
  for (int i = 0; i < g->nnodes; i++) {
    if (!view[i] || !slot[g->nodes[i]->out[0]->id]) continue;
    const Node *n = g->nodes[i];
    Interval *it = &p.iv[slot[n->out[0]->id] - 1];
    uint64_t own = it->stage ? 1ull << (it->stage - 1) : it->set; /* the interval's stages (0: every rank) */
    if (ir_node_stages(n) != own || (rmask[n->out[0]->id] & ~own)) it->stage = 0, it->set = 0;
  }
  /* results live to the end; classify gradients; alias in-place updates */
  for (int r = 0; r < g->nresults; r++) {
    Value *v = g->results[r];
    const char *name = g->result_names ? g->result_names[r] : NULL;
    if (v->def->graph != g || !slot[v->id]) continue;
    p.iv[slot[v->id] - 1].end = g->nnodes;
    if (name && strncmp(name, "grad:", 5) == 0) p.iv[slot[v->id] - 1].mclass = MEM_GRAD;
  }
  /* the bf16 cast of an updated master shard that an all-gather writes into its persistent copy
   * (passes/zero_master.c) is stored by the update's own kernel (codegen/target_cuda.c): live from the
   * update on, it shares no bytes with what the update reads */
  for (int i = 1; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->op != OP_CAST || g->nodes[i - 1] != n->in[0]->def || !is_update(n->in[0]->def->op) || !slot[n->out[0]->id])
      continue;
    if (ir_copy_gathered(g, n->out[0])) p.iv[slot[n->out[0]->id] - 1].start = i - 1;
  }
  /* an asynchronous reduce-scatter (ZeRO-2's gradient shards) reads its input until it is
   * waited — codegen/emit.c's add_wait: before the first reader of its output in this graph, else
   * at the graph's end — so the input stays live until then */
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    /* likewise a ring shift (cp: a SEND and its RECV, not a pipeline transfer) reads what it
     * sends until it is waited, before the first reader of what it receives */
    bool shift = n->op == OP_SEND && !n->stage && i + 1 < g->nnodes && g->nodes[i + 1]->op == OP_RECV;
    if (shift) n = g->nodes[i + 1];
    else if ((n->op != OP_REDUCE_SCATTER && !(n->op == OP_ALL_GATHER && n->in[0]->def->op == OP_CONCAT)) || !ir_comm_async(n))
      continue; /* (async gathers read parameters, or a coalesced gather its packed shards) */
    Value *x = shift ? g->nodes[i]->in[0] : n->in[0];
    if (x->def->graph != g || !slot[x->id]) continue;
    int w = g->nnodes;
    for (int j = i + 1; j < g->nnodes && w == g->nnodes; j++)
      for (int q = 0; q < g->nodes[j]->nin; q++)
        if (g->nodes[j]->in[q] == n->out[0]) w = j;
    if (!shift && mp->defer_waits && memplan_defers_wait(n)) p.iv[slot[x->id] - 1].start = 0; /* waited in the next iteration */
    if (p.iv[slot[x->id] - 1].end < w) p.iv[slot[x->id] - 1].end = w;
  }
  /* a value written into a source's bytes: the source's offset, once placed (a source held on one
   * pipeline stage is placed with the transients: after the packing) */
  Value **onto_y = ARENA_ARRAY(tmp, Value *, p.n + 1), **onto_x = ARENA_ARRAY(tmp, Value *, p.n + 1);
  int nonto = 0;
  for (int i = 0; i < p.n; i++) {
    Value *v = p.iv[i].v;
    if (!v || !is_update(v->def->op)) continue;
    Value *target = v->def->in[v->idx == 0 ? 0 : v->idx + 1]; /* p' <- p, m' <- m, v' <- v */
    if ((target->def->op == OP_PARAM || target->def->op == OP_STATE) && !read_after(g, v->def, target)) {
      p.iv[i].bytes = 0; /* in place */
      onto_y[nonto] = v;
      onto_x[nonto++] = target;
      p.iv[i].v = NULL;
    }
  }
  /* a parameter's persistent bf16 copy (passes/wshadow.c: the cast of the updated parameter, result
   * "next:bf16:<param>"; offload: its upload from the host, or the gather of the uploaded shards;
   * passes/zero_master.c: the all-gather of the updated shard's cast) is written into the copy's own bytes */
  for (int i = 0; i < p.n; i++) {
    Value *v = p.iv[i].v;
    OpKind op = v ? v->def->op : OP_CAST;
    Value *target = v && (op == OP_CAST || op == OP_TO_DEVICE || op == OP_ALL_GATHER) ? ir_copy_written(g, v) : NULL;
    if (!target || read_after(g, v->def, target)) continue;
    p.iv[i].bytes = 0;
    onto_y[nonto] = v;
    onto_x[nonto++] = target;
    p.iv[i].v = NULL;
  }
  /* ZeRO's parameter all-gather writes the parameter's own storage (no second full copy) */
  for (int i = 0; i < p.n; i++) {
    Value *v = p.iv[i].v;
    Value *target = v ? gathered_param(g, v, p.iv[i].start) : NULL;
    if (!target) continue;
    p.iv[i].bytes = 0;
    onto_y[nonto] = v;
    onto_x[nonto++] = target;
    p.iv[i].v = NULL;
  }
  /* all-reduce in place: output k joins input k's interval when that interval ends at the
   * all-reduce (nothing, views included, reads the input later); likewise an update's result
   * and the transient it updates (ZeRO's shard of a parameter, updated where it was sliced) */
  int *root = ARENA_ARRAY(tmp, int, p.n + 1); /* interval -> the interval it was merged into, or itself */
  for (int i = 0; i < p.n; i++) root[i] = i;
  Value **alias_y = ARENA_ARRAY(tmp, Value *, p.n + 1); /* merged outputs and where they go */
  int *alias_to = ARENA_ARRAY(tmp, int, p.n + 1), nalias = 0;
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    bool upd = is_update(n->op); /* an update of a transient (ZeRO's shard_slice(p)): in place too */
    bool rep = n->op == OP_REPEAT; /* a carry's output where its initial value was (carry_init_shared) */
    /* a scale of a value that dies there (accumulation's mean of a running sum), an add into its
     * first operand when that dies there (passes/peel.c's last sum + g): index for index */
    bool ew = n->op == OP_SCALE || (n->op == OP_ADD && ir_shape_eq(&n->in[0]->shape, &n->out[0]->shape));
    /* CUDA: GELU's backward into its gradient input (a GEMM's output, whose DGELU epilogue stores the result and
     * never writes it: passes/epilogue.c; where the GEMM runs alone, its kernel reads and writes index for index) */
    bool gb = epi && n->op == OP_GELU_BWD;
    if (n->op != OP_ALL_REDUCE && !ew && !gb && !upd && !rep) continue;
    for (int k = 0; k < n->nout && (upd || rep || k < n->nin) && (!(ew || gb) || k < 1); k++) {
      int q = rep && k >= n->a.ncarry ? memplan_xs_in_place(n, k) : k; /* a stacked output: on its input's slices */
      if (q < 0) continue;
      int xi = upd && k ? k + 1 : gb ? 1 : q;
      Value *x = n->in[xi], *y = n->out[k]; /* update: p' <- p, m' <- m, v' <- v */
      if (x->def->graph != g || !slot[x->id] || !slot[y->id]) continue;
      if (rep && k < n->a.ncarry && !carry_init_shared(n, k)) continue;
      int sx = slot[x->id] - 1, sy = slot[y->id] - 1;
      while (root[sx] != sx) sx = root[sx];
      if (sx == sy || p.iv[sx].end != i || !p.iv[sx].v || !p.iv[sy].v || p.iv[sy].v != y ||
          value_bytes(x) != value_bytes(y) || past_first_byte(g, x, slot))
        continue;
      bool twice = false; /* the same buffer as another input of this node: no */
      for (int j = 0; j < n->nin; j++)
        if (j != xi && n->in[j]->def->graph == g && slot[n->in[j]->id]) {
          int sj = slot[n->in[j]->id] - 1;
          while (root[sj] != sj) sj = root[sj];
          twice = twice || sj == sx;
        }
      if (twice) continue;
      p.iv[sx].end = p.iv[sy].end;
      p.iv[sx].mclass = p.iv[sy].mclass;
      if (p.iv[sx].stage != p.iv[sy].stage || p.iv[sx].set != p.iv[sy].set) p.iv[sx].stage = 0, p.iv[sx].set = 0;
      p.iv[sy].bytes = 0;
      root[sy] = sx;
      alias_y[nalias] = y;
      alias_to[nalias++] = sx;
    }
  }
  memplan_rows_group(g, p.iv, p.n, root, slot, tmp); /* rows in place (memplan_views.c): inputs in their node's rows */
  Value **alias_x = ARENA_ARRAY(tmp, Value *, nalias + 1); /* the value heading each target interval */
  for (int a = 0; a < nalias; a++) alias_x[a] = p.iv[alias_to[a]].v;
  /* compact out aliased entries */
  int k = 0, *moved = ARENA_ARRAY(tmp, int, p.n + 1); /* (Interval.up: its node's output's new index) */
  for (int i = 0; i < p.n; i++)
    if (p.iv[i].bytes > 0) moved[i] = k, p.iv[k++] = p.iv[i];
  p.n = k;
  for (int i = 0; i < p.n; i++)
    if (p.iv[i].up) p.iv[i].up = moved[p.iv[i].up - 1] + 1;
  int64_t size = memplan_pack_memo(p.iv, p.n, mp->pack_memo, tmp, plain);
  int64_t cls[MEM_COUNT] = {0};
  bool top = !g->parent && mp->stage_peak; /* the step: each pipeline stage's peak too */
  int64_t pk = memplan_peak(p.iv, p.n, g->nnodes, cls, tmp, top ? mp->stage_peak : NULL, top ? mp->nstages : 0);
  for (int i = 0; i < MEM_COUNT; i++) by_class[i] = cls[i];
  *peak_out = pk;
  for (int i = 0; i < p.n; i++) {
    if (p.iv[i].v) {
      p.iv[i].v->offset = base + p.iv[i].offset;
      p.iv[i].v->stride = 0;
      p.iv[i].v->mclass = p.iv[i].mclass;
      mp->nvalues++;
      if (p.iv[i].bytes > mp->largest[p.iv[i].mclass]) mp->largest[p.iv[i].mclass] = p.iv[i].bytes;
    }
  }
  for (int k = 0; k < nonto; k++) {
    onto_y[k]->offset = onto_x[k]->offset;
    onto_y[k]->mclass = onto_x[k]->mclass;
  }
  for (int a = 0; a < nalias; a++) { /* in node order: an output merged into an earlier output resolves */
    alias_y[a]->offset = alias_x[a]->offset;
    alias_y[a]->stride = 0;
    alias_y[a]->mclass = alias_x[a]->mclass;
    mp->nvalues++;
  }
  /* region blocks: rebase the body's offsets to where its block landed; nodes' scratch */
  for (int i = 0; i < p.n; i++) {
    Node *sn = p.iv[i].node;
    if (sn) {
      sn->scratch_at = base + p.iv[i].offset;
      sn->scratch_bytes = memplan_scratch_bytes(sn);
      if (p.iv[i].bytes > mp->largest[MEM_COMM]) mp->largest[MEM_COMM] = p.iv[i].bytes;
      continue;
    }
    if (p.iv[i].v || p.iv[i].held[0]) continue;
    shift_body(g->nodes[p.iv[i].start]->body, base + p.iv[i].offset);
  }
  memplan_place_held(&p, base, mp); /* (after the bodies' shifts) */
  /* views share their input's place (in node order, so chains resolve); a column view at its first column,
   * with its source's rows (memplan_views.c) */
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (view[i]) {
      Value *in = n->in[0], *out = n->out[0];
      bool col = memplan_col_slice(n);
      out->offset = in->offset + memplan_view_at(n); /* (a row view: at its first row) */
      out->stride = 0;
      out->ld = col ? in->shape.dim[in->shape.rank - 1] : 0;
      out->mclass = in->mclass;
    }
    if (colcat[i]) /* the concat's inputs in their column slots */
      for (int k = 0; k < n->nin; k++) {
        Value *y = n->out[0], *x = n->in[k];
        x->offset = y->offset + memplan_col_at(n, k);
        x->stride = 0;
        x->ld = y->shape.dim[y->shape.rank - 1];
        x->mclass = y->mclass;
      }
  }
  return size;
}

/* After the outer plan, stacked ys in bodies get the outer buffer and a stride. */
static void place_stacked(Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (!n->body) continue;
    if (n->op == OP_REPEAT)
      for (int r = 0; r < n->a.ncarry; r++) { /* a carry updated in place (carry_in_place) or in the stack */
        Value *y = n->body->results[r];
        if (y->offset != -2 || y->def->graph != n->body) continue;
        int j = memplan_carry_in_stack(n, r);
        y->offset = j < 0 ? n->out[r]->offset : n->out[j]->offset + value_bytes(y);
        y->stride = j < 0 ? 0 : value_bytes(y);
        y->mclass = n->out[j < 0 ? r : j]->mclass;
        y->last_in = j < 0 ? NULL : n->out[r];
        Value *mids[CARRY_CHAIN_MAX];
        int nm = 0;
        if (j < 0 && y->def->op == OP_ADD) carry_chain(n, r, mids, CARRY_CHAIN_MAX, &nm);
        for (int q = 0; q < nm; q++) { /* carry_chain's sums, in the output with it */
          mids[q]->offset = y->offset;
          mids[q]->stride = 0;
          mids[q]->mclass = y->mclass;
        }
      }
    if (n->op == OP_REPEAT)
      for (int r = n->a.ncarry; r < n->body->nresults; r++) {
        Value *y = n->body->results[r];
        if (y->offset != -2) continue;
        Value *outer = n->out[r];
        y->offset = outer->offset;
        y->stride = value_bytes(y);
        y->mclass = MEM_ACT;
        /* the chain place_body put there too (chain_in) */
        for (Value *x = chain_in(y); x && x->def->graph == n->body && x->offset == -2; x = chain_in(x)) {
          x->offset = y->offset;
          x->stride = y->stride;
          x->mclass = y->mclass;
        }
      }
    for (int j = 0; j < n->body->nnodes; j++) { /* column views of a stacked y: its columns in the stack */
      Node *c = n->body->nodes[j];
      Value *x = c->op == OP_SLICE ? c->in[0] : NULL, *v = c->out[0];
      if (!x || v->offset != -2 || x->offset < 0) continue;
      v->offset = x->offset + memplan_col_at(c, 0);
      v->stride = x->stride;
      v->mclass = x->mclass;
    }
    place_stacked(n->body);
  }
}

static void reset_offsets(Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    n->scratch_at = n->scratch_bytes = 0;
    n->defer_last = NULL; /* (memplan_held_pairs notes the pairs) */
    for (int k = 0; k < n->nout; k++) {
      n->out[k]->offset = -1;
      n->out[k]->stride = 0;
      n->out[k]->ld = 0;
      n->out[k]->last_in = NULL;
    }
    if (n->body) reset_offsets(n->body);
  }
}

bool pass_memplan(Module *m) {
  MemPlan *mp = ARENA_NEW(m->arena, MemPlan);
  mp->defer_waits = zero_defers_plan(m); /* (passes/zero_defer.c: `defer_waits off`, or auto where they do not fit: none) */
  Graph *g = m->graph;
  reset_offsets(g);
  /* persistent: params, then optimizer state, then inputs, in node order */
  int64_t off = 0;
  const OpKind order[3] = {OP_PARAM, OP_STATE, OP_INPUT};
  const int cls[3] = {MEM_PARAM, MEM_OPTIM, MEM_INPUT};
  for (int o = 0; o < 3; o++)
    for (int i = 0; i < g->nnodes; i++) {
      Node *n = g->nodes[i];
      if (n->op != order[o] || n->out[0]->host || ir_node_stages(n)) continue; /* (some stages': plan_graph) */
      Value *v = n->out[0];
      v->offset = off;
      int c = n->op == OP_STATE && ir_copy_source(n->a.name) ? MEM_PARAM : cls[o]; /* a weight's bf16 copy: weights */
      v->mclass = c;
      int64_t b = align_up(value_bytes(v));
      off += b;
      mp->by_class[c] += b;
      if (b > mp->largest[c]) mp->largest[c] = b;
      mp->nvalues++;
    }
  mp->persistent = off;
  Arena tmp;
  arena_init(&tmp);
  memplan_place_host(g, mp, &tmp);
  int64_t peak = 0, by_class[MEM_COUNT] = {0};
  mp->nstages = m->mesh && m->mesh->dim[RT_AX_PP] > 1 ? m->mesh->dim[RT_AX_PP] : 0;
  mp->stage_peak = mp->nstages ? ARENA_ARRAY(m->arena, int64_t, mp->nstages) : NULL;
  mp->pack_memo = memplan_pack_memo_new(&tmp);
  memplan_views_hold(); /* (plan_graph changes no node's inputs: each graph's reads indexed once) */
  int64_t transient = plan_graph(g, off, mp, &tmp, &peak, by_class, m->target == TARGET_CUDA, NULL);
  memplan_views_release();
  mp->pack_memo = NULL;
  arena_free(&tmp);
  place_stacked(g);
  memplan_defer_waits(g, mp->defer_waits);
  hfuse_order_copies(m); /* (CUDA: two sibling GEMMs' weight copies in the order of their outputs) */
  memplan_cut_groups(g);
  for (int i = 0; i < MEM_COUNT; i++) mp->by_class[i] += by_class[i];
  mp->peak = off + peak;
  for (int s = 0; s < mp->nstages; s++) mp->stage_peak[s] += off;
  mp->total = off + transient;
  m->memplan = mp;
  return true;
}
