/* passes/pipe_fold.c — each stage's micro-batch gradient sums done inside its backward loops (the
 * pipe pass's; passes/pipe_internal.h).
 *
 * A stage merges its part of micro-batch i into its running sums after its instructions of i
 * (pipe.c's run_stage_merges): a layer gradient's merge is `add(sum, g)` (bf16 compute:
 * add(sum, cast(g))), g a stacked output of the backward loop ([layers, ...]) — the whole stage's
 * gradient of the micro-batch alive at once beside the sums, and a separate pass over it between
 * instructions. Where g is read by that merge only, the loop making it (B; zb: W) does the merge
 * instead, as gradient accumulation without pp does (passes/sums.c's loop_sum_in): B(s, i) reads the
 * stage's sum as one more stacked input and yields sum_l + g_l per layer, which memplan writes into
 * the sum's own buffer (xs_in_place), so the gradient lives one layer at a time. Micro-batch 0's
 * loop yields g_l itself (its f32 cast under bf16), which becomes the sum: no zeros, and no sum
 * alive during that first backward (the stage's peak under 1F1B and GPipe, all its micro-batches'
 * activations in flight). Interleaved, each chunk's loop sums its own rows (a running sum per
 * chunk, concatenated in the stage's row order after the last micro-batch); uneven stages sum their
 * own rows (padded after the last). The same adds in the same order (each chunk's loops run in micro-batch order on its
 * stage: pipe_fold_plan checks the lists), so the sums are bit-identical (but for an element
 * whose every micro-batch's gradient is -0: 0 + -0 was +0). Under ZeRO-2/3 each loop then
 * reduce-scatters g_l and sums the shards (passes/zero_sums.c, scatter_folded). A merge that does
 * not fold (a parameter every layer reads: B's carry, not stacked; g read by another merge) stays
 * run_stage_merges' add.
 */
#include "diag.h"
#include "pipe_internal.h"

static int readers(const Graph *b, const Value *v) {
  int n = 0;
  for (int i = 0; i < b->nnodes; i++) n += b->nodes[i]->op != OP_ARG && pipe_reads_value(b->nodes[i], v);
  for (int r = 0; r < b->nresults; r++) n += b->results[r] == v;
  return n;
}

/* Whether every stage's list runs each chunk's instructions `op` in micro-batch order. */
static bool in_mb_order(const Pp *p, const PipeSched *s, char op) {
  for (int st = 0; st < s->pp; st++)
    for (int ch = 0; ch < p->v; ch++) {
      int next = 0;
      for (int k = 0; k < s->len[st]; k++) {
        PipeInstr in = s->list[st][k];
        if (in.op != op || in.chunk != ch) continue;
        if (in.mb != next++) return false;
      }
      if (next != p->M) return false;
    }
  return true;
}

void pipe_fold_plan(Pp *p, const PipeSched *s) {
  Graph *b = p->body;
  int nc = p->A->a.ncarry;
  p->fold = ARENA_ARRAY(p->m->arena, Value *, nc + 1);
  p->fold_cast = ARENA_ARRAY(p->m->arena, Node *, nc + 1);
  p->folded = ARENA_ARRAY(p->m->arena, char, b->nnodes + 1);
  p->csum = ARENA_ARRAY(p->m->arena, Value *, nc * p->pp * p->v + 1);
  bool order[2] = {in_mb_order(p, s, 'B'), p->W && in_mb_order(p, s, 'W')};
  for (int c = 0; c < nc; c++) {
    Value *sum = b->args[c]->out[0], *fin = b->results[c];
    Node *add = fin->def;
    const Value *z = p->A->in[c]; /* the sum's start: zeros (the first micro-batch's gradient is the sum) */
    if (!p->local[c] || z->def->op != OP_CONST || z->def->a.scalar != 0) continue;
    if (add->graph != b || add->op != OP_ADD || add->in[0] == add->in[1]) continue;
    if (add->in[0] != sum && add->in[1] != sum) continue;
    if (readers(b, fin) != 1 || readers(b, sum) != 1) continue; /* the merge reads the sum, yields its next */
    Value *x = add->in[add->in[0] == sum ? 1 : 0];
    Node *cast = NULL;
    if (x->def->graph == b && x->def->op == OP_CAST) { /* bf16 compute: the gradient cast to f32 */
      cast = x->def;
      if (readers(b, x) != 1 || !p->early[pipe_pos_in(b, cast)]) continue;
      x = cast->in[0];
    }
    Node *R = x->def;
    if ((R != p->B && (!p->W || R != p->W)) || x->idx < R->a.ncarry || readers(b, x) != 1) continue;
    const Value *y = R->body->results[x->idx]; /* the layer's gradient, made in the loop's body (loop_sum_in) */
    if (!order[R == p->W] || y->def->graph != R->body || y->def->op == OP_ARG || readers(R->body, y) != 1) continue;
    p->fold[c] = x;
    p->fold_cast[c] = cast;
    p->folded[pipe_pos_in(b, add)] = 1;
    if (cast) p->folded[pipe_pos_in(b, cast)] = 1;
  }
}

void pipe_fold_run(Pp *p, int vs, int mb, const Node *loop) {
  int st = vs % p->pp, ch = vs / p->pp;
  for (int c = 0; c < p->A->a.ncarry; c++) {
    if (!p->fold[c] || p->fold[c]->def != loop) continue;
    intptr_t got;
    if (!ptrmap_get(pipe_smap(p, vs, mb), p->fold[c], &got)) die("pipe: stage %d's loop made no gradient of carry %d", st, c);
    Value *g = (Value *)got, **sum = &p->csum[(c * p->pp + st) * p->v + ch];
    const Node *cast = p->fold_cast[c];
    SrcLoc loc = p->body->results[c]->def->loc;
    *sum = loop_sum_in(p->g, *sum, g, cast, loc, NULL); /* (the first: no sum yet; pipe_fold_plan checked the rest) */
    if (!*sum) die("pipe: stage %d's loop cannot sum carry %d", st, c);
  }
}

Value *pipe_fold_sum(Pp *p, int c, int st) {
  Value **chunk = &p->csum[(c * p->pp + st) * p->v];
  for (int ch = 0; ch < p->v; ch++)
    if (!chunk[ch]) die("pipe: stage %d made no sum of carry %d", st, c);
  if (p->v == 1) return chunk[0];
  Value **padded = ARENA_ARRAY(p->g->arena, Value *, p->v); /* (uneven chunks: each to the largest count) */
  for (int ch = 0; ch < p->v; ch++) padded[ch] = pipe_pad_rows(p, ch * p->pp + st, chunk[ch]);
  chunk = padded;
  const Value *like = p->body->results[c]; /* the stage's chunks, in its local row order */
  Attrs ca = {0};
  ca.axis = 0;
  Value *x = ir_emit(p->g, OP_CONCAT, p->v, chunk, chunk[0]->dtype, like->shape, &ca, p->A->loc);
  x->sharding = like->sharding;
  x->def->stage = st + 1;
  return x;
}
