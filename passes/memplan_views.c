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
 */
#include "memplan_views.h"

#include "passes.h"

#define MEMPLAN_LD_ALIGN 8 /* elements */

/* Whether a nested body of g (at any depth) reads v. */
static bool captured(const Graph *g, const Value *v) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (!n->body) continue;
    for (int j = 0; j < n->body->nnodes; j++)
      for (int k = 0; k < n->body->nodes[j]->nin; k++)
        if (n->body->nodes[j]->in[k] == v) return true;
    if (captured(n->body, v)) return true;
  }
  return false;
}

static bool placed_here(const Value *x, const Graph *g) {
  const Node *d = x->def;
  return d->graph == g && d->op != OP_ARG && d->op != OP_PARAM && d->op != OP_STATE && d->op != OP_INPUT && !x->host;
}
/* a slice's source: a value placed in g or g's argument (a loop's saved QKV, re-sliced: its iteration's rows) */
static bool slice_source(const Value *x, const Graph *g) {
  return placed_here(x, g) || (x->def->graph == g && x->def->op == OP_ARG && !x->host);
}

bool memplan_col_slice(const Node *n) {
  if (n->op != OP_SLICE) return false;
  const Value *x = n->in[0], *y = n->out[0];
  const Graph *g = n->graph;
  int ax = x->shape.rank - 1;
  if (ax < 1 || n->a.axis != ax || x->dtype != y->dtype || !slice_source(x, g) || x->ld) return false;
  if (n->a.start % MEMPLAN_LD_ALIGN || x->shape.dim[ax] % MEMPLAN_LD_ALIGN) return false;
  if (ir_is_result(g, y) || captured(g, y)) return false;
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
    if (ir_is_result(g, x) || captured(g, x)) return false;
    int reads = 0; /* the concat's one read, nothing else's */
    for (int j = 0; j < g->nnodes; j++)
      for (int k = 0; k < g->nodes[j]->nin; k++) reads += g->nodes[j]->in[k] == x;
    if (reads != 1) return false;
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
