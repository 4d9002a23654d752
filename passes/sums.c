/* passes/sums.c — the `sums` pass: under gradient accumulation, each micro-step adds its layers'
 * gradients to the running sums inside the backward loop, layer by layer, instead of after it.
 *
 * After `accum`, the micro-step region's body runs the backward loop, which yields every layer's
 * gradient stacked ([layers, ...], bf16 under bf16 compute), casts the stack to f32 and adds it to
 * the running sum: the whole model's gradient lives at once, 4 B x P_rank (and the bf16 stack
 * beside its f32 copy) on top of the sums, at the end of every micro-step's backward — on
 * GPT-3 175B at tp 8 the step's peak, where recompute cannot help (the saved activations are dead
 * there). Here the loop reads the sum as one more stacked input and yields sum_l + cast(g_l) per
 * layer; memplan writes that into the sum's own buffer (passes/memplan.c: carry_in_place of a loop
 * output made in place on the carry, xs_in_place), so a micro-step's gradient lives one layer at a
 * time. The same adds in the same order: the sums are bit-identical. passes/peel.c does the same
 * (plus the mean) for the peeled last micro-step with loop_sum.
 */
#include <string.h>

#include "passes.h"

static bool read_once(const Graph *g, const Value *v) {
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == v) return false;
  return ir_count_uses(g, v) == 1;
}

/* The backward loop R yields layer gradient `grad` (through a cast read once, under bf16 compute),
 * and `sum` (stacked like it) is added to it in g: R reads sum as one more stacked input and yields
 * sum_l + g_l per layer, times `mean`'s scale when mean is not NULL. Returns R's output (the new
 * sum), or NULL when it does not apply (then the add stays in g). */
Value *loop_sum(Graph *g, Value *sum, Value *grad, const Node *add, const Node *mean) {
  /* bf16 compute (passes/precision.c): the loop yields the bf16 gradient, cast to f32 here; the
   * cast moves into the loop with the add, and the loop yields f32 */
  Node *cast = grad->def->op == OP_CAST && read_once(g, grad) ? grad->def : NULL;
  if (cast) grad = cast->in[0];
  if (grad->def->op != OP_REPEAT || !read_once(g, grad)) return NULL;
  Value *looped = loop_sum_in(g, sum, grad, cast, add->loc, mean);
  if (looped && cast) ir_drop_node(g, cast);
  return looped;
}

Value *loop_sum_in(Graph *g, Value *sum, Value *grad, const Node *cast, SrcLoc loc, const Node *mean) {
  Node *R = grad->def;
  DType top = cast ? cast->out[0]->dtype : grad->dtype;
  if (R->op != OP_REPEAT || grad->idx < R->a.ncarry) return NULL;
  if (sum && (!ir_shape_eq(&sum->shape, &grad->shape) || sum->dtype != top)) return NULL;
  Graph *b = R->body;
  Value *y = b->results[grad->idx];
  if (y->def->graph != b || y->def->op == OP_ARG) return NULL;
  for (int k = 0; k < b->nresults; k++)
    if (k != grad->idx && b->results[k] == y) return NULL;
  Node *an = NULL;
  if (sum) { /* a new stacked input at ncarry + nxs: later inputs and arguments move up one */
    int at = R->a.ncarry + R->a.nxs;
    Value **in = ARENA_ARRAY(g->arena, Value *, R->nin + 1);
    for (int j = 0, k = 0; j <= R->nin; j++) in[j] = j == at ? sum : R->in[k++];
    R->in = in;
    R->nin++;
    R->a.nxs++;
    an = ir_add_arg(b, top, y->shape, "sum"); /* appended as args[nargs - 1]: move it to `at` */
    for (int k = b->nargs - 1; k > at; k--) {
      b->args[k] = b->args[k - 1];
      b->args[k]->a.index = k;
    }
    b->args[at] = an;
    an->a.index = at;
    an->out[0]->sharding = y->sharding;
  }
  if (cast) { /* the cast per layer, inside the loop: it yields f32 */
    Value *yc = ir_emit(b, OP_CAST, 1, &y, top, y->shape, &cast->a, cast->loc);
    yc->sharding = y->sharding;
    y = yc;
    grad->dtype = top;
  }
  if (an) {
    /* sum_l + g_l, as in the region; memplan gives the loop's output the sum's own stacked buffer
     * when nothing reads the sum after the loop (passes/memplan.c, xs_in_place): slice l is read
     * and written by this add only, index for index */
    Value *ab[2] = {an->out[0], y};
    y = ir_emit(b, OP_ADD, 2, ab, y->dtype, y->shape, NULL, loc);
    y->sharding = ab[1]->sharding;
  }
  if (mean) {
    Value *s = ir_emit(b, OP_SCALE, 1, &y, y->dtype, y->shape, &mean->a, mean->loc);
    s->sharding = y->sharding;
    y = s;
  }
  b->results[grad->idx] = y;
  return grad;
}

/* The node reading v, when v is read by one node of g and is no result; else NULL. */
static Node *sole_reader(Graph *g, const Value *v) {
  if (!read_once(g, v)) return NULL;
  for (int i = 0; i < g->nnodes; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++)
      if (g->nodes[i]->in[j] == v) return g->nodes[i];
  return NULL; /* (read in a nested body) */
}

/* Without accumulation (one micro-step, no pp): the backward loop's stacked bf16 layer gradients
 * are cast to f32 after it, and the gradient's sum over the ranks (dp, cp: the shard pass's
 * all-reduce) reads that cast, not the loop's output, so passes/grad_buckets.c cannot move it into
 * the loop, nor passes/zero.c make it a reduce-scatter there: the whole bf16 stack and its f32 copy
 * live at once, unreduced (Llama-3-405B dp 1024 tp 2 z3 rc full: 790 GiB at the peak, where ZeRO-2/3
 * keeps 1/dp of one). Here such a cast (of a stacked output read by it alone, read by a sum
 * all-reduce alone) moves into the loop, per layer, as under accumulation (loop_sum_in with no sum):
 * the loop yields f32, and the reduction follows the gradient into the loop. The same casts of the
 * same values. (A cast read by the update alone stays: codegen widens its source where it is read.) */
static void casts_into_loops(Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *cast = g->nodes[i];
    if (cast->op != OP_CAST || !ir_dtype_is_float(cast->out[0]->dtype)) continue;
    const Node *r = sole_reader(g, cast->out[0]);
    if (!r || r->op != OP_ALL_REDUCE || r->a.reduce != RED_SUM) continue;
    Value *grad = cast->in[0];
    if (grad->def->op != OP_REPEAT || grad->def->graph != g || !read_once(g, grad)) continue;
    if (!loop_sum_in(g, NULL, grad, cast, cast->loc, NULL)) continue;
    ir_replace_uses(g, cast->out[0], grad);
    ir_drop_node(g, cast);
    i--;
  }
}

bool pass_sums(Module *m) {
  Graph *g = m->graph;
  if (m->mesh && m->mesh->dim[RT_AX_PP] > 1) return true; /* (pp: the schedule's) */
  if (m->batch.accum <= 1) {
    casts_into_loops(g);
    return true;
  }
  Node *r = NULL;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_REPEAT && g->nodes[i]->a.name && strcmp(g->nodes[i]->a.name, "accum") == 0)
      r = g->nodes[i];
  if (!r) return true;
  Graph *b = r->body;
  for (int c = 0; c < r->a.ncarry; c++) {
    Value *sum = b->args[c]->out[0], *fin = b->results[c];
    Node *add = fin->def;
    if (add->graph != b || add->op != OP_ADD || add->in[0] == add->in[1]) continue;
    if (add->in[0] != sum && add->in[1] != sum) continue;
    if (ir_count_uses(b, fin) != 0) continue;
    Value *looped = loop_sum(b, sum, add->in[0] == sum ? add->in[1] : add->in[0], add, NULL);
    if (!looped) continue;
    b->results[c] = looped;
    ir_drop_node(b, add);
  }
  return true;
}
