/* codegen/target_llvm.c — the CPU target with kernels built through LLVM (--cpu-kernels llvm).
 *
 * The same program as the CPU target (codegen/target_cpu.c), whose CgTarget it hands every node
 * it does not generate: GEMMs (BLAS), attention, norms, cross-entropy, copies, collectives'
 * neighbours. What it generates, as functions built by codegen/llvm_kernels.c into one object
 * file the trainer links (build.c), each called through rt_par_for (runtime/ops/par.h):
 *   - an elementwise run: a fusion group's members (passes/fuse.c, cut by memplan; cg_group_run
 *     says which members an entry point runs together), or one elementwise node, as one loop
 *     keeping the intermediates in registers and storing what is read outside the run;
 *   - AdamW: the update of one parameter, in place;
 *   - LayerNorm and RMSNorm forward: a row's mean, mean square and output in one function;
 *   - their backward: three functions (row statistics, the parameter gradients by column, dx by row);
 *   - cross-entropy: a row function for the loss, dlogits, or both in one pass (fused, passes/fuse_ce.c).
 * Which of these it generates, and which nodes each can run, passes/cost_llvm.c decides (its GENERATE, from
 * measurements on the machine this was written on: bench/bench_llvm_kernels.c, docs/performance.md: a kind is
 * generated only where the LLVM kernel was faster than the hand-written one), where the cost model reads it too:
 * the trainer's kernel calls are the plan's (codegen/emit_kcount.c).
 */
#include <inttypes.h>
#include <stdlib.h>

#include "cg.h"
#include "diag.h"
#include "llvm_kernels.h"
#include "passes.h" /* fuse_ce_partner */

_Static_assert((int)LLK_MAX_EW >= (int)CG_EW_MAX, "an elementwise run fits one LLVM kernel");

/* The run from n as one LLVM kernel call; returns its length, or 0 when this backend does not
 * generate it (f32 only; broadcasts of a bias, a per-row value or a scalar). */
static int ew_run(Cg *c, Node *first) {
  CgEwRun r;
  cg_ew_run(c, first, &r);
  const Shape *S = &first->out[0]->shape;
  int64_t n = ir_numel(S);
  LlkEw e = {.nin = r.next, .nops = r.n};
  if (!llk_ew_run_ok((const Node *const *)r.mem, r.n, (const Value *const *)r.ext, r.next, e.idx, &e.inner)) return 0;
  for (int i = 0; i < r.n; i++) {
    const Node *m = r.mem[i];
    e.ops[i] = (LlkOp){.op = m->op, .in = {r.in[i][0], r.in[i][1]}, .scalar = m->a.scalar};
    if (r.stored[i]) e.out_op[e.nout++] = i;
  }
  const char *k = llk_ew(c->ts, &e);
  const char *args = "";
  for (int i = 0; i < r.next + e.nout; i++) {
    const Value *v = i < r.next ? r.ext[i] : r.mem[e.out_op[i - r.next]]->out[0];
    args = arena_printf(c->a, "%s%s(void *)%s", args, i ? ", " : "", cg_ptr(c, v));
  }
  if (r.n > 1) cg_line(c, "/* %d elementwise ops in one LLVM kernel */", r.n);
  cg_line(c, "{ void %s(int64_t, int64_t, void **); void *p[] = {%s};", k, args);
  cg_line(c, "  rt_par_for(%s, %" PRId64 ", %" PRId64 ", p); }", k, e.inner ? n / e.inner : n, n);
  return r.n;
}

/* AdamW in place on f32 tensors (the copies first when the plan moved the state). */
static bool adamw(Cg *c, Node *n) {
  if (llk_node_calls(n) < 0) return false; /* (f32 only: passes/cost_llvm.c) */
  const Attrs *a = &n->a;
  LlkAdamW w = {(float)a->beta1, (float)a->beta2, (float)a->eps, (float)a->weight_decay};
  const char *k = llk_adamw(c->ts, &w);
  for (int i = 0; i < 3; i++) cg_copy_if_moved(c, n->out[i], n->in[i == 0 ? 0 : i + 1]);
  int64_t cnt = ir_numel(&n->in[0]->shape);
  cg_line(c, "{ void %s(int64_t, int64_t, void **); void *p[] = {(void *)%s, (void *)%s, (void *)%s, (void *)%s, (void *)%s};",
          k, cg_ptr(c, n->out[0]), cg_ptr(c, n->in[1]), cg_ptr(c, n->out[1]), cg_ptr(c, n->out[2]), cg_ptr(c, n->in[4]));
  cg_line(c, "  rt_par_for(%s, %" PRId64 ", %" PRId64 ", p); }", k, cnt, cnt);
  return true;
}

/* LayerNorm / RMSNorm forward over f32 rows. */
static bool norm(Cg *c, Node *n) {
  if (llk_node_calls(n) < 0) return false; /* (f32 only: passes/cost_llvm.c) */
  const Value *x = n->in[0];
  int64_t d = x->shape.dim[x->shape.rank - 1], rows = d ? ir_numel(&x->shape) / d : 0;
  bool rms = n->op == OP_RMSNORM;
  const char *k = llk_norm(c->ts, &(LlkNorm){d, (float)n->a.eps, rms});
  const char *args = arena_printf(c->a, "(void *)%s, (void *)%s", cg_ptr(c, x), cg_ptr(c, n->in[1]));
  if (!rms) args = arena_printf(c->a, "%s, (void *)%s", args, cg_ptr(c, n->in[2]));
  cg_line(c, "{ void %s(int64_t, int64_t, void **); void *p[] = {%s, (void *)%s};", k, args, cg_ptr(c, n->out[0]));
  cg_line(c, "  rt_par_for(%s, %" PRId64 ", %" PRId64 ", p); }", k, rows, rows * d);
  return true;
}

/* LayerNorm / RMSNorm backward over f32 rows: row statistics into the workspace, dw (db), dx. */
static bool norm_bwd(Cg *c, Node *n) {
  if (llk_node_calls(n) < 0) return false; /* (f32 only: passes/cost_llvm.c) */
  const Value *x = n->in[0];
  int64_t d = x->shape.dim[x->shape.rank - 1], rows = d ? ir_numel(&x->shape) / d : 0;
  bool rms = n->op == OP_RMSNORM_BWD;
  const char *k[3];
  llk_norm_bwd(c->ts, &(LlkNormBwd){d, rows, (float)n->a.eps, rms}, k);
  const char *px = cg_ptr(c, x), *pw = cg_ptr(c, n->in[1]), *pdy = cg_ptr(c, n->in[2]);
  const char *st = arena_printf(c->a, "(void *)WS, (void *)((float *)WS + %" PRId64 ")", rows); /* mean, rstd */
  const char *db = rms ? "" : arena_printf(c->a, ", (void *)%s", cg_ptr(c, n->out[2]));
  cg_line(c, "{ void %s(int64_t, int64_t, void **), %s(int64_t, int64_t, void **), %s(int64_t, int64_t, void **);", k[0],
          k[1], k[2]);
  cg_line(c, "  void *p0[] = {(void *)%s, %s}, *p1[] = {(void *)%s, (void *)%s, %s, (void *)%s%s};", px, st, px, pdy, st,
          cg_ptr(c, n->out[1]), db);
  cg_line(c, "  void *p2[] = {(void *)%s, (void *)%s, (void *)%s, %s, (void *)%s};", px, pw, pdy, st, cg_ptr(c, n->out[0]));
  cg_line(c, "  rt_par_for(%s, %" PRId64 ", %" PRId64 ", p0); rt_par_for(%s, %" PRId64 ", %" PRId64 ", p1);", k[0], rows,
          rows * d, k[1], d, rows * d);
  cg_line(c, "  rt_par_for(%s, %" PRId64 ", %" PRId64 ", p2); }", k[2], rows, rows * d);
  cg_ws_need(c, arena_printf(c->a, "rt_norm_ws_bytes(%" PRId64 ", %" PRId64 ")", rows, d));
  return true;
}

/* Cross-entropy over f32 logits as LLVM row kernels: the forward (the loss), the backward (dlogits),
 * or, where passes/fuse_ce.c paired them and this entry point runs both, both in the forward's one
 * pass over the logits (the backward then emits nothing). */
static bool xent(Cg *c, Node *n) {
  if (llk_node_calls(n) < 0) return false;
  int partner = fuse_ce_partner(n->graph, c->pos);
  bool fused = partner >= 0 && cg_runs(c, n->graph, partner);
  if (n->op == OP_CROSS_ENTROPY_BWD && fused) return cg_line(c, "/* computed with the loss (fused cross-entropy) */"), true;
  const Value *x = n->in[0];
  int64_t V = x->shape.dim[x->shape.rank - 1], rows = V ? ir_numel(&x->shape) / V : 0;
  int64_t len = n->a.len > 0 ? n->a.len : V;
  const Node *bw = n->op == OP_CROSS_ENTROPY_BWD ? n : fused ? n->graph->nodes[partner] : NULL;
  const char *k = llk_xent(c->ts, &(LlkXent){V, len, bw != NULL});
  const char *loss = n->op == OP_CROSS_ENTROPY ? arena_printf(c->a, "(float *)%s", cg_ptr(c, n->out[0])) : "NULL";
  const char *dl = bw ? arena_printf(c->a, "(float *)%s", cg_ptr(c, bw->out[0])) : "NULL";
  const char *dloss = bw ? arena_printf(c->a, "(const float *)%s", cg_ptr(c, bw->in[2])) : "NULL";
  if (fused) cg_line(c, "/* the cross-entropy's forward and backward in one pass over the logits */");
  cg_line(c, "{ void %s(int64_t, int64_t, void **);", k);
  cg_line(c, "  rt_xent_rows_f32(%s, %s, %s, (const float *)%s, (const int32_t *)%s, %s, %" PRId64 ", %" PRId64 ", WS); }",
          k, loss, dl, cg_ptr(c, x), cg_ptr(c, n->in[1]), dloss, rows, V);
  cg_ws_need(c, arena_printf(c->a, "rt_cross_entropy_ws_bytes(%" PRId64 ")", rows));
  return true;
}

bool cg_default_llvm_kernels(void) {
  char *why = NULL;
  bool ok = llk_host_ok(&why);
  if (!ok) note("LLVM cannot build kernels for this host (%s): the CPU kernels are the C ones (--cpu-kernels c)", why ? why : "?");
  free(why);
  return ok;
}

static int llvm_node(Cg *c, Node *n) {
  bool view = n->op == OP_CAST && n->in[0]->dtype == n->out[0]->dtype && !n->group;
  if (cg_elementwise(n) && !view) {
    int len = ew_run(c, n);
    if (len) return len;
  }
  if (n->op == OP_ADAMW_UPDATE && adamw(c, n)) return 1;
  if ((n->op == OP_LAYERNORM || n->op == OP_RMSNORM) && norm(c, n)) return 1;
  if ((n->op == OP_LAYERNORM_BWD || n->op == OP_RMSNORM_BWD) && norm_bwd(c, n)) return 1;
  if ((n->op == OP_CROSS_ENTROPY || n->op == OP_CROSS_ENTROPY_BWD) && xent(c, n)) return 1;
  return cg_target_cpu.node(c, n);
}

static void llvm_copy(Cg *c, const char *dst, const char *src, int64_t bytes, bool overlap) {
  cg_target_cpu.copy(c, dst, src, bytes, overlap);
}

static void llvm_zero(Cg *c, const char *dst, int64_t bytes) { cg_target_cpu.zero(c, dst, bytes); }

static void llvm_program(Cg *c) { cg_target_cpu.program(c); }

static void llvm_begin(Cg *c) {
  cg_target_cpu.begin(c);
  c->ts = llk_new();
}

static void llvm_prologue(Cg *c) {
  cg_target_cpu.prologue(c);
  fprintf(c->f, "#include \"par.h\" /* the LLVM kernels' thread split */\n\n");
}

/* Compiles the kernels into the object file build.c links (none to write for --emit-c to a stream). */
static void llvm_finish(Cg *c) {
  cg_target_cpu.finish(c);
  Llk *k = c->ts;
  char *err = NULL;
  if (c->obj_path && !llk_compile(k, c->obj_path, &err)) {
    error_plain("LLVM could not compile the CPU kernels: %s", err ? err : "?");
    c->ok = false;
  }
  free(err);
  llk_free(k);
  c->ts = NULL;
}

const CgTarget cg_target_llvm = {
    .name = "CPU",
    .logits_tensor = false,
    .begin = llvm_begin,
    .prologue = llvm_prologue,
    .node = llvm_node,
    .copy = llvm_copy,
    .zero = llvm_zero,
    .finish = llvm_finish,
    .program = llvm_program,
    .kernel_call = cg_cpu_kernel_call, /* (its kernels run through rt_par_for, the others are the CPU target's) */
};
