/* passes/memplan_views.c — the memory plan's column views (docs/memory.md, "Column views").
 *
 * A transformer's attention reads q, k and v as last-axis slices of the fused QKV projection
 * [B, S, (H + 2 KV) hd] and its backward's dq, dk, dv are concatenated along the last axis into dqkv,
 * which the weight-gradient GEMM, the bias sum and the dx GEMM read. Both are copies unless the plan
 * places them in place:
 *  - a last-axis slice whose every reader takes a row stride at that operand (ir_reads_row_stride) is
 *    a column view of its source: no bytes of its own, its offset the source's plus the slice's first
 *    column, its row stride (Value.ld) the source's row; codegen emits no copy and hands the readers
 *    the pointer and the stride;
 *  - a last-axis concat whose inputs are each an output of a stride-writing producer
 *    (ir_writes_row_stride) read by nothing else is laid out with the producers writing into their
 *    column slots: the concat's buffer lives from its first producer on, its inputs are column views of
 *    it, and codegen copies nothing.
 * Everything else keeps its copy: a slice another op reads, one the graph returns (a loop's saved
 * activation: its own stack), or captured by a nested region; a concat input read twice, a concat the
 * graph returns; ring attention's blocks (cp), the Ulysses all-to-all and rope take no stride, so their
 * slices stay copies.
 * Column offsets and row strides are multiples of MEMPLAN_LD_ALIGN elements (16-byte rows in bf16, what
 * the tensor-core attention's cp.async copies need).
 *
 * Row views: a slice along dim 0 of a contiguous row-major value (an interleaved pipeline chunk's rows
 * of a stage's stacked parameter, passes/pipe.c's chunk_of; an uneven stage's own rows; a micro-batch's
 * rows of the stacked input) is the source's bytes from its first row on: no bytes of its own, its
 * offset the source's plus start x the row's bytes (memplan_view_at). Not of a column view or a
 * stride-writing producer's output (rows at another value's stride), nor of host memory; memplan.c keeps
 * a copy where a pipeline stage's slice is read off its stage (codegen zero-fills it there), and codegen
 * copies exactly where the plan did not place the slice at that offset. The decision is this file's; memplan.c places what
 * it decides; a view never changes a result (the interpreter ignores the plan).
 *
 * Rows in place: a concat along dim 0 (an interleaved stage's chunks of a layer gradient, passes/pipe.c's
 * loop_part and pipe_fold_sum), a pad along dim 0 (an uneven chunk's rows padded with zeros, pipe_pad_rows)
 * and a stage_select (each stage's own value, on every rank) in the step's graph whose inputs are each made
 * there, read by it alone and dead there may have their inputs placed in their rows of its output (a
 * stage_select: each stage's input at its output's first byte; only stage j writes input j), with the
 * in-place chains in them (the running sums of the backward loops, passes/pipe_fold.c: one buffer through
 * the micro-batches), so the chunks' sums are summed in their rows of the stage's gradient from their first
 * micro-batch on; the output then lives from past the node. memplan_rows_node decides the form;
 * memplan_rows_group (after memplan.c's in-place aliases) links each input's interval to the output's
 * (Interval.up); memplan_pack decides which links it takes (a coupled placement can pack worse: it keeps the
 * most links within 1 / MEMPLAN_LINK_SLACK of the least arena); codegen copies exactly where an input is not
 * at its rows (memplan_row_placed; a pad zeroes the rows around an input in place).
 */
#include "memplan_views.h"

#include <stdlib.h>

#include "diag.h"
#include "passes.h"

#define MEMPLAN_LD_ALIGN 8 /* elements */

/* Whether a nested body of g (at any depth) reads v. */
static bool captured_scan(const Graph *g, const Value *v) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (!n->body) continue;
    for (int j = 0; j < n->body->nnodes; j++)
      for (int k = 0; k < n->body->nodes[j]->nin; k++)
        if (n->body->nodes[j]->in[k] == v) return true;
    if (captured_scan(n->body, v)) return true;
  }
  return false;
}

/* The reads the column views look at, per graph, while memplan_views_hold is in effect: for each value
 * g's own nodes read or a nested body (any depth) reads, READS_ONE x its reads by g's nodes, READ_FLAT
 * where one of them takes no row stride (ir_reads_row_stride), READ_CAPTURED where a body reads it. A
 * graph is indexed on its first question (one walk of it), so that deciding every slice of a graph is
 * linear in it, not quadratic (a cp x pp plan's step: thousands of ring slices); outside a hold each
 * question scans the graph (a pass that changes the IR between them). */
enum { READ_CAPTURED = 1, READ_FLAT = 2, READS_ONE = 4 };
static int held;
static PtrMap indices; /* Graph * -> its PtrMap * (Value * -> the bits above) */

void memplan_views_hold(void) { held++; }

void memplan_views_release(void) {
  if (--held > 0) return;
  for (int i = 0; i < indices.cap; i++)
    if (indices.slots[i].key) {
      PtrMap *ix = (PtrMap *)indices.slots[i].val;
      ptrmap_free(ix);
      free(ix);
    }
  ptrmap_free(&indices);
}

static void index_bodies(PtrMap *ix, const Graph *g) { /* the values g's bodies read: READ_CAPTURED */
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (!n->body) continue;
    for (int j = 0; j < n->body->nnodes; j++)
      for (int k = 0; k < n->body->nodes[j]->nin; k++) {
        intptr_t b = 0;
        ptrmap_get(ix, n->body->nodes[j]->in[k], &b);
        ptrmap_put(ix, n->body->nodes[j]->in[k], b | READ_CAPTURED);
      }
    index_bodies(ix, n->body);
  }
}

/* v's bits in g (held), or -1 (not held: scan). */
static intptr_t reads_of(const Graph *g, const Value *v) {
  if (!held) return -1;
  intptr_t at = 0, b = 0;
  if (!ptrmap_get(&indices, g, &at)) {
    PtrMap *ix = calloc(1, sizeof *ix);
    if (!ix) die("memplan: out of memory");
    for (int i = 0; i < g->nnodes; i++)
      for (int k = 0; k < g->nodes[i]->nin; k++) {
        const Value *u = g->nodes[i]->in[k];
        ptrmap_get(ix, u, &b);
        ptrmap_put(ix, u, (b + READS_ONE) | (ir_reads_row_stride(g->nodes[i], k) ? 0 : READ_FLAT));
        b = 0;
      }
    index_bodies(ix, g);
    ptrmap_put(&indices, g, (intptr_t)ix);
    at = (intptr_t)ix;
  }
  ptrmap_get((const PtrMap *)at, v, &b);
  return b;
}

static bool placed_here(const Value *x, const Graph *g) {
  const Node *d = x->def;
  return d->graph == g && d->op != OP_ARG && d->op != OP_PARAM && d->op != OP_STATE && d->op != OP_INPUT && !x->host;
}
/* a slice's source: a value placed in g or g's argument (a loop's saved QKV, re-sliced: its iteration's rows) */
static bool slice_source(const Value *x, const Graph *g) {
  return placed_here(x, g) || (x->def->graph == g && x->def->op == OP_ARG && !x->host);
}

/* Whether a node of g reads an input at a row stride: none, no column slice (found once per version of g: the
 * top level under pp holds every micro-batch's unpacking slices, passes/zero_defer.c, and none of its readers). */
static bool row_reads(Graph *g) {
  if (g->row_reads_at != g->version + 1) {
    g->row_reads = false;
    for (int i = 0; i < g->nnodes && !g->row_reads; i++)
      for (int k = 0; k < g->nodes[i]->nin; k++) g->row_reads |= ir_reads_row_stride(g->nodes[i], k);
    g->row_reads_at = g->version + 1;
  }
  return g->row_reads;
}

bool memplan_col_slice(const Node *n) {
  if (n->op != OP_SLICE) return false;
  const Value *x = n->in[0], *y = n->out[0];
  Graph *g = n->graph;
  if (!row_reads(g)) return false;
  int ax = x->shape.rank - 1;
  if (ax < 1 || n->a.axis != ax || x->dtype != y->dtype || !slice_source(x, g) || x->ld) return false;
  if (n->a.start % MEMPLAN_LD_ALIGN || x->shape.dim[ax] % MEMPLAN_LD_ALIGN) return false;
  if (ir_is_result(g, y)) return false;
  intptr_t b = reads_of(g, y);
  if (b >= 0) return !(b & (READ_CAPTURED | READ_FLAT)) && b >= READS_ONE;
  if (captured_scan(g, y)) return false;
  int readers = 0;
  for (int i = 0; i < g->nnodes; i++)
    for (int k = 0; k < g->nodes[i]->nin; k++)
      if (g->nodes[i]->in[k] == y) {
        if (!ir_reads_row_stride(g->nodes[i], k)) return false;
        readers++;
      }
  return readers > 0;
}

bool memplan_col_concat(const Node *n) {
  if (n->op != OP_CONCAT) return false;
  const Value *y = n->out[0];
  const Graph *g = n->graph;
  int ax = y->shape.rank - 1;
  if (ax < 1 || n->a.axis != ax || y->shape.dim[ax] % MEMPLAN_LD_ALIGN || !placed_here(y, g)) return false;
  if (ir_is_result(g, y)) return false; /* a loop's stacked y lives in the loop's output, placed outside */
  int64_t at = 0;
  for (int i = 0; i < n->nin; i++) {
    const Value *x = n->in[i];
    const Node *d = x->def;
    if (d->graph != g || x->dtype != y->dtype || !ir_writes_row_stride(d, x->idx) || x->host) return false;
    if (at % MEMPLAN_LD_ALIGN || ir_node_stages(d) != ir_node_stages(n)) return false;
    if (ir_is_result(g, x)) return false;
    intptr_t b = reads_of(g, x);
    if (b >= 0 && ((b & READ_CAPTURED) || b / READS_ONE != 1)) return false; /* the concat's one read, nothing else's */
    if (b < 0) {
      if (captured_scan(g, x)) return false;
      int reads = 0;
      for (int j = 0; j < g->nnodes; j++)
        for (int k = 0; k < g->nodes[j]->nin; k++) reads += g->nodes[j]->in[k] == x;
      if (reads != 1) return false;
    }
    at += x->shape.dim[ax];
  }
  return true;
}

bool memplan_row_slice(const Node *n) {
  if (n->op != OP_SLICE || n->a.axis != 0) return false;
  const Value *x = n->in[0], *y = n->out[0];
  if (x->dtype != y->dtype || x->host || y->host || x->shape.rank < 1) return false;
  const Node *d = x->def;
  if (memplan_col_slice(d) || ir_writes_row_stride(d, x->idx)) return false; /* rows at another value's stride */
  return true;
}

bool memplan_row_viewed(const Node *n) {
  if (!memplan_row_slice(n)) return false;
  const Value *y = n->out[0], *x = n->in[0];
  if (y->offset == IR_OFFSET_VIEW) return true; /* (the input's pointer plus the first row) */
  return y->offset >= 0 && x->offset >= 0 && !y->stride && !x->stride && !x->last_in && !y->last_in &&
         y->host == x->host && y->offset == x->offset + memplan_view_at(n);
}

int64_t memplan_view_at(const Node *n) {
  if (memplan_col_slice(n)) return memplan_col_at(n, 0);
  if (!memplan_row_slice(n)) return 0;
  const Value *x = n->in[0];
  int64_t row = ir_dtype_size(x->dtype);
  for (int d = 1; d < x->shape.rank; d++) row *= x->shape.dim[d];
  return n->a.start * row;
}

int64_t memplan_col_at(const Node *n, int i) {
  int ax = n->out[0]->shape.rank - 1;
  int64_t at = 0;
  if (n->op == OP_SLICE) return n->a.start * ir_dtype_size(n->out[0]->dtype);
  for (int j = 0; j < i; j++) at += n->in[j]->shape.dim[ax];
  return at * ir_dtype_size(n->out[0]->dtype);
}

/* The row offset (bytes) of dim-0 rows from a value's first byte. */
static int64_t row_bytes(const Value *y, int64_t rows) {
  int64_t b = rows * ir_dtype_size(y->dtype);
  for (int d = 1; d < y->shape.rank; d++) b *= y->shape.dim[d];
  return b;
}

int64_t memplan_rows_at(const Node *n, int i) {
  if (n->op == OP_STAGE_SELECT) return 0;
  if (n->op == OP_PAD) return row_bytes(n->out[0], n->a.start);
  int64_t rows = 0;
  for (int j = 0; j < i; j++) rows += n->in[j]->shape.dim[0];
  return row_bytes(n->out[0], rows);
}

bool memplan_row_placed(const Node *n, int i) {
  const Value *y = n->out[0], *x = n->in[i];
  if (n->op != OP_STAGE_SELECT && ((n->op != OP_CONCAT && n->op != OP_PAD) || n->a.axis != 0)) return false;
  return x->offset >= 0 && y->offset >= 0 && !x->stride && !y->stride && !x->last_in && !y->last_in && !x->host &&
         !y->host && !x->ld && !y->ld && x->offset == y->offset + memplan_rows_at(n, i);
}

bool memplan_rows_node(const Node *n, const PtrMap *uses) {
  bool cat = n->op == OP_CONCAT && n->a.axis == 0, pad = n->op == OP_PAD && n->a.axis == 0 && n->nin == 1;
  if (!cat && !pad && n->op != OP_STAGE_SELECT) return false;
  const Value *y = n->out[0];
  const Graph *g = n->graph;
  if (g->parent || y->host || y->shape.rank < 1 || !placed_here(y, g) || ir_is_result(g, y) || y->ld) return false;
  for (int i = 0; i < n->nin; i++) {
    const Value *x = n->in[i];
    intptr_t reads = 0; /* the node's one read, nothing else's (no capture either) */
    ptrmap_get(uses, x, &reads);
    if (reads != 1 || !placed_here(x, g) || x->dtype != y->dtype || x->ld || memplan_is_view(x->def)) return false;
    if (memplan_rows_at(n, i) % 16 || ir_is_result(g, x) || ir_writes_row_stride(x->def, x->idx)) return false;
    if (n->op == OP_STAGE_SELECT && ir_node_stages(x->def) != 1ull << i) return false; /* only stage i writes it */
  }
  return true;
}

static int root_of(const int *root, int s) {
  while (root[s] != s) s = root[s];
  return s;
}

void memplan_rows_group(const Graph *g, Interval *iv, int niv, const int *root, const int *slot, Arena *tmp) {
  if (g->parent) return; /* (the step's top graph: a pipeline's stage sums) */
  bool *lead = ARENA_ARRAY(tmp, bool, niv + 1); /* a node's output others are written into (Interval.up) */
  int *sx = NULL, cap = 0;
  PtrMap uses = {0}; /* the readers of g's values (in g and the bodies in it), counted once */
  ir_use_counts(g, &uses);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *c = g->nodes[i];
    if (c->nout < 1 || !memplan_rows_node(c, &uses) || !slot[c->out[0]->id]) continue;
    bool sel = c->op == OP_STAGE_SELECT, pad = c->op == OP_PAD;
    int sy = root_of(root, slot[c->out[0]->id] - 1);
    /* the output lives from past the node (its inputs until it; a pad writes its zeros there): its own interval */
    bool ok = iv[sy].v && iv[sy].bytes > 0 && !iv[sy].node && !iv[sy].up && !lead[sy] && iv[sy].start == i &&
              iv[sy].end > i;
    if (c->nin > cap) sx = ARENA_ARRAY(tmp, int, (cap = c->nin) + 1);
    for (int k = 0; k < c->nin && ok; k++) {
      const Value *x = c->in[k];
      if (!slot[x->id]) {
        ok = false;
        break;
      }
      sx[k] = root_of(root, slot[x->id] - 1);
      const Interval *t = &iv[sx[k]];
      /* one value's interval (with its in-place chain), dead here; a stage_select's input k: stage k's alone */
      ok = sx[k] != sy && t->v && !t->node && t->end == i && t->bytes == memplan_align(memplan_bytes(x)) && !t->up &&
           (!sel || ((t->stage == k + 1 || (!t->stage && t->set == 1ull << k)) && t->bytes == iv[sy].bytes));
      for (int j = 0; j < k && ok; j++) ok = sx[j] != sx[k];
    }
    if (!ok) continue;
    if (!pad) iv[sy].apart = i + 1, iv[sy].start = i + 1; /* (apart: from the node, which copies) */
    lead[sy] = true;
    for (int k = 0; k < c->nin; k++) {
      Interval *t = &iv[sx[k]];
      t->up = sy + 1, t->updelta = memplan_rows_at(c, k), t->upsel = sel;
    }
  }
  ptrmap_free(&uses);
}
