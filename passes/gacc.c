/* passes/gacc.c — gradient-accumulation fusion: a weight-gradient GEMM accumulates into the running
 * sum (C = the sum, beta 1) instead of writing the gradient to a temporary that an add then reads.
 *
 * Under gradient accumulation (passes/sums.c, passes/peel.c) and pipeline parallelism
 * (passes/pipe_fold.c) the backward loop's body ends with, per layer, new_sum_l = add(sum_l, g_l)
 * (g_l through a cast to f32 under bf16 compute), and the memory plan writes new_sum_l into the
 * sum's own bytes (passes/memplan.c: xs_in_place). Where g_l is a MATMUL (dW = x^T dy) read by that
 * add alone, the add is one more pass over the gradient. This pass, after the memory plan, makes
 * the matmul take the sum as its third input (the accumulator C) and the add's output (placed in
 * the sum's bytes) as its own: `matmul(x, dy, sum)` is y = sum + x^T dy, the GEMM's beta = 1
 * (runtime rt_matmul on the CPU, cuBLASLt's C = D on CUDA, ir/interp_ops.c in the oracle). The add,
 * the cast and the gradient's temporary disappear. The sums differ from the add's by the order in
 * which the GEMM adds its partial products into C (and, under bf16 compute, by the bf16 rounding of
 * g_l that the f32 accumulation skips).
 *
 * Taken where the plan makes it safe to write the add's output at the matmul's place:
 *   - the sum is the body's argument of a stacked input that the memory plan gives the loop's
 *     output for this result (memplan_xs_in_place: slice l read by the add alone and written by it,
 *     index for index; both buffers outer values, live through the loop), or
 *   - the sum and the add's output are placed at the same bytes in this graph, the sum made before
 *     the matmul and read by the add alone (placed_write_early: nothing in between touches them);
 * and the GEMM the target runs can accumulate: rank-2 f32 output; on the CPU f32 inputs
 * (rt_matmul_acc_f32), under `precision bf16` f32 or bf16 ones (rt_matmul_bf16_acc_in: bf16
 * products summed in f32 into C, oneDNN's sum post-op, runtime/ops/gemm_dnnl.c); on CUDA f32 or bf16
 * inputs (cuBLASLt, f32 accumulation). Runs before passes/epilogue.c, which leaves a matmul with an
 * accumulator alone.
 */
#include "diag.h"
#include "memplan.h"
#include "passes.h"
#include "placed.h"

static int result_index(const Graph *g, const Value *v) {
  int k = -1;
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == v) {
      if (k >= 0) return -1; /* yielded twice */
      k = i;
    }
  return k;
}

/* v is read by exactly one node of g or of a body below it (uses: ir_use_counts of g, made once a
 * graph: a walk of g for each candidate was quadratic in an unrolled schedule) and is no result of g. */
static bool read_once(const Graph *g, const PtrMap *uses, const Value *v) {
  intptr_t c = 0;
  ptrmap_get(uses, v, &c);
  return !ir_is_result(g, v) && c == 1;
}

static int position(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  return -1;
}

/* The target's GEMM can accumulate into C for matmul mm writing dtype `out`. */
static bool gemm_accumulates(const Module *m, const Node *mm, DType out) {
  const Value *A = mm->in[0], *B = mm->in[1];
  if (mm->nin != 2 || mm->a.epilogue || out != DT_F32 || mm->out[0]->shape.rank != 2) return false;
  bool f32 = A->dtype == DT_F32 && B->dtype == DT_F32, bf16 = A->dtype == DT_BF16 && B->dtype == DT_BF16;
  if (m->target == TARGET_CUDA) return f32 || bf16; /* rt_cu_matmul: C = D, beta 1 */
  /* the CPU: rt_matmul_acc_f32; under `precision bf16` rt_matmul_bf16_acc_in (either operand a bf16 copy) */
  bool prec16 = m->has_recipe && m->recipe.precision == PREC_BF16;
  return prec16 ? (A->dtype == DT_F32 || A->dtype == DT_BF16) && (B->dtype == DT_F32 || B->dtype == DT_BF16) : f32;
}

/* The memory plan writes w (the add's output, result of g) into s's bytes, s read by the add only:
 * s a stacked input's argument whose slices the loop's output takes (memplan_xs_in_place), or s
 * and w at the same place in g with s made before the matmul at `from`. */
static bool in_place(const Graph *g, const Value *s, const Value *w, int from) {
  const Node *rep = g->owner;
  if (s->def->op == OP_ARG) {
    int k = result_index(g, w);
    return rep && rep->op == OP_REPEAT && s->def->graph == g && k >= 0 && memplan_xs_in_place(rep, k) == s->def->a.index &&
           !w->host && !s->host;
  }
  if (s->def->graph != g || position(g, s->def) >= from) return false;
  return s->offset >= 0 && w->offset == s->offset && w->stride == s->stride && w->ld == 0 && s->ld == 0 && !w->host &&
         !s->host && placed_write_early(g, w, from, NULL);
}

/* Nodes of fusion group id left in g: a group of one runs as no group. */
static void regroup(Graph *g, int id) {
  if (!id) return;
  int left = 0;
  for (int i = 0; i < g->nnodes; i++) left += g->nodes[i]->group == id;
  if (left < 2)
    for (int i = 0; i < g->nnodes; i++)
      if (g->nodes[i]->group == id) g->nodes[i]->group = 0;
}

/* add = s + t, t the matmul's output (or its cast to f32): the matmul accumulates into s. */
static bool fuse(const Module *m, Graph *g, const PtrMap *uses, Node *add) {
  if (add->op != OP_ADD || add->nin != 2 || add->in[0] == add->in[1]) return false;
  Value *w = add->out[0];
  for (int j = 0; j < 2; j++) {
    Value *s = add->in[j], *t = add->in[1 - j];
    Node *cast = NULL, *mm = t->def;
    if (mm->graph == g && mm->op == OP_CAST) {
      cast = mm;
      mm = cast->in[0]->def;
    }
    /* the shapes first, the uses (a walk of g) last: g may be an unrolled schedule's thousands of adds */
    if (mm->graph != g || mm->op != OP_MATMUL || ir_node_stages(mm) != ir_node_stages(add)) continue;
    if (cast && ir_node_stages(cast) != ir_node_stages(add)) continue;
    if (s->dtype != w->dtype || !ir_shape_eq(&s->shape, &w->shape) || !ir_shape_eq(&mm->out[0]->shape, &w->shape)) continue;
    if (!gemm_accumulates(m, mm, w->dtype) || mm->in[0] == s || mm->in[1] == s) continue;
    if ((cast && !read_once(g, uses, t)) || !read_once(g, uses, mm->out[0]) || !read_once(g, uses, s)) continue;
    int at = position(g, mm);
    if (!in_place(g, s, w, at)) continue;
    int sa = position(g, s->def);
    if (sa > at) { /* an argument listed after the matmul (passes/sums.c appends the sum's): before it now */
      for (int q = sa; q > at; q--) g->nodes[q] = g->nodes[q - 1];
      g->nodes[at] = s->def;
    }
    Value **in = ARENA_ARRAY(g->arena, Value *, 3);
    in[0] = mm->in[0];
    in[1] = mm->in[1];
    in[2] = s;
    mm->in = in;
    mm->nin = 3;
    ir_touch(g);
    mm->out[0] = w; /* the add's output, placed in the sum's bytes, is the GEMM's now */
    /* (the counts stay exact for every value still in g: s is read by the matmul instead of the
     * add; t and the matmul's former output are read no more, with their readers gone) */
    w->def = mm;
    w->idx = 0;
    int groups[2] = {add->group, cast ? cast->group : 0};
    ir_drop_node(g, add);
    if (cast) ir_drop_node(g, cast);
    regroup(g, groups[0]);
    if (groups[1] != groups[0]) regroup(g, groups[1]);
    return true;
  }
  return false;
}

/* Each graph once: a body may be many nodes' (the pipeline's instructions share theirs). */
static int gacc_graph(const Module *m, Graph *g, PtrMap *seen) {
  int fused = 0;
  intptr_t got;
  if (ptrmap_get(seen, g, &got)) return 0;
  ptrmap_put(seen, g, 1);
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) fused += gacc_graph(m, g->nodes[i]->body, seen);
  PtrMap uses = {0};
  ir_use_counts(g, &uses);
  for (int i = g->nnodes - 1; i >= 0; i--) /* (a fused add leaves; the nodes before it stay where they are) */
    if (i < g->nnodes && fuse(m, g, &uses, g->nodes[i])) fused++;
  ptrmap_free(&uses);
  return fused;
}

bool pass_gacc(Module *m) {
  if (!m->memplan) die("gacc: the memory plan has not run");
  PtrMap seen = {0};
  gacc_graph(m, m->graph, &seen);
  ptrmap_free(&seen);
  return true;
}
