/* passes/optimizer.c — pass_optimizer: appends the parameter update from m->recipe.
 *
 * Runs after pass_autodiff and reads its results "grad:<param>". It adds:
 *   - INPUT f32 scalars "lr" (the host evaluates the schedule, ir_lr_at(recipe,
 *     step - 1)) and, for AdamW, "step" (1-based, for bias correction);
 *   - with recipe.grad_clip > 0: the global gradient norm
 *       norm = sqrt(sum over params of sumsq(grad)),
 *       gscale = min(1, clip / (norm + 1e-6)),
 *     and a result "grad_norm"; without clipping gscale is the constant 1;
 *   - with recipe.on_nonfinite skip: the norm (and "grad_norm") with or without clipping, and
 *     gscale += 0 * sumsq: NaN when a gradient is NaN / Inf, which makes every update of the
 *     step leave its parameter and state unchanged (ops.def); the trainer sees the non-finite
 *     grad_norm, counts the skip and does not advance the optimizer's step (runtime/train/main.c);
 *   - the update's hyper-parameter vector, built as CONCAT along axis 0 of the
 *     scalars reshaped to [1]: AdamW [lr, gscale, step], SGD [lr, gscale] (the
 *     update ops take one small vector so codegen passes one pointer);
 *   - per PARAM, in node order: STATE "adam_m:<p>" and "adam_v:<p>" (AdamW) or
 *     "sgd_m:<p>" (SGD with momentum), one ADAMW_UPDATE / SGD_UPDATE node, and
 *     results "next:<p>" and "next:<state>" so the step writes them back.
 *
 * Weight decay applies to matrices only: a param whose per-layer rank is >= 2
 * (the rank without the leading layer dim for params stacked into a repeat).
 * Biases, norm gains and other vectors get weight_decay = 0 (GPT-2/llm.c's rule).
 * Optimizer moments are f32 (f64 when the param is f64), whatever the compute dtype.
 *
 * Plan `offload` (ZeRO-Offload: optimizer state in host memory) moves the state a ZeRO stage
 * shards, so it needs `zero` >= 1. On the CPU target the state already lives in host memory: a
 * note says so and nothing changes. On a device target passes/zero.c moves each update, its state
 * and its shard of the parameter and gradient into host memory (to_host / to_device around it).
 */
#include <string.h>

#include "diag.h"
#include "passes.h"

static Value *emit(Graph *g, OpKind op, int nin, Value **in, DType dt, Shape s, const Attrs *a, SrcLoc loc) {
  return ir_emit(g, op, nin, in, dt, s, a, loc);
}

static Value *scalar_const(Graph *g, double x, SrcLoc loc) {
  Attrs a = {.scalar = x};
  return emit(g, OP_CONST, 0, NULL, DT_F32, ir_scalar_shape(), &a, loc);
}

static Value *as_vec1(Graph *g, Value *s, SrcLoc loc) {
  return emit(g, OP_RESHAPE, 1, &s, s->dtype, ir_shape(1, (int64_t[]){1}), NULL, loc);
}

/* Concatenation of scalars into a vector. */
static Value *vec_of(Graph *g, int n, Value **scalars, SrcLoc loc) {
  Value *parts[8];
  if (n > 8) die("vec_of: too many scalars");
  DType dt = DT_F32;
  for (int i = 0; i < n; i++) {
    parts[i] = as_vec1(g, scalars[i], loc);
    if (scalars[i]->dtype == DT_F64) dt = DT_F64; /* concat promotes */
  }
  Attrs a = {.axis = 0};
  return emit(g, OP_CONCAT, n, parts, dt, ir_shape(1, (int64_t[]){n}), &a, loc);
}

static Value *add_input(Graph *g, const char *name, SrcLoc loc) {
  Attrs a = {.name = name};
  return emit(g, OP_INPUT, 0, NULL, DT_F32, ir_scalar_shape(), &a, loc);
}

static Value *add_state(Graph *g, const char *name, const Value *like, SrcLoc loc) {
  Attrs a = {.name = name};
  DType dt = like->dtype == DT_F64 ? DT_F64 : DT_F32;
  return emit(g, OP_STATE, 0, NULL, dt, like->shape, &a, loc);
}

/* True when p enters a top-level REPEAT as a stacked input (one slice per layer). */
static bool is_stacked(const Graph *g, const Value *p) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op != OP_REPEAT) continue;
    for (int j = n->a.ncarry; j < n->a.ncarry + n->a.nxs; j++)
      if (n->in[j] == p) return true;
  }
  return false;
}

static Value *find_result(const Graph *g, const char *name) {
  for (int i = 0; i < g->nresults; i++)
    if (g->result_names[i] && strcmp(g->result_names[i], name) == 0) return g->results[i];
  return NULL;
}

static bool check_offload(const Module *m) {
  const Plan *p = &m->plan;
  if (!p->offload) return true;
  /* offload without a ZeRO stage is refused by the front end (fe_check_plan); on a device
   * target passes/zero.c applies it */
  if (m->target != TARGET_CPU) return true;
  note_at(p->opt_loc[PLAN_OPT_OFFLOAD],
          "offload: on the CPU target the optimizer state already lives in host memory (nothing to move)");
  return true;
}

bool pass_optimizer(Module *m) {
  if (!check_offload(m)) return false;
  Graph *g = m->graph;
  Recipe r;
  if (m->has_recipe) r = m->recipe;
  else ir_recipe_defaults(&r);
  SrcLoc L = r.loc;
  Arena *A = g->arena;

  /* params and their gradients, in node order */
  int np = 0;
  Node **params = ARENA_ARRAY(A, Node *, g->nnodes + 1);
  Value **grads = ARENA_ARRAY(A, Value *, g->nnodes + 1);
  int n0 = g->nnodes;
  for (int i = 0; i < n0; i++) {
    Node *n = g->nodes[i];
    if (n->op != OP_PARAM) continue;
    Value *gr = find_result(g, arena_printf(A, "grad:%s", n->a.name));
    if (!gr) die("pass_optimizer: no result grad:%s (run pass_autodiff first)", n->a.name);
    params[np] = n;
    grads[np++] = gr;
  }
  /* each number's error at the place it was set (its key, a call's argument, a -D value), else the block */
#define AT(k) (r.num_loc[k].file ? r.num_loc[k] : L)
  if (r.optimizer == OPT_ADAMW && (r.beta1 < 0 || r.beta1 >= 1 || r.beta2 < 0 || r.beta2 >= 1)) {
    error_at(r.beta1 < 0 || r.beta1 >= 1 ? AT(RNUM_BETA1) : AT(RNUM_BETA2), "adamw: betas must lie in [0, 1), got (%g, %g)",
             r.beta1, r.beta2);
    return false;
  }
  const double nonneg[RNUM_COUNT] = {[RNUM_LR] = r.lr,        [RNUM_GRAD_CLIP] = r.grad_clip,
                                     [RNUM_WEIGHT_DECAY] = r.weight_decay, [RNUM_EPS] = r.eps,
                                     [RNUM_MOMENTUM] = r.momentum, [RNUM_MIN_LR] = r.min_lr};
  for (int i = 0; i < RNUM_BETA1; i++) /* (the betas: above) */
    if (nonneg[i] < 0) {
      error_at(AT(i), "train: `%s` must not be negative, got %g", ir_recipe_num_names[i], nonneg[i]);
      return false;
    }
  if (r.lr_schedule != LR_CONSTANT && r.min_lr > r.lr) {
    error_at(diag_blame((SrcLoc[]){r.num_loc[RNUM_MIN_LR], r.num_loc[RNUM_LR]}, 2, AT(RNUM_MIN_LR)),
             "train: `min_lr` %g is above `lr` %g: the %s schedule decays from lr to min_lr", r.min_lr, r.lr,
             r.lr_schedule == LR_LINEAR ? "linear" : "cosine");
    note("write a min_lr of at most lr (0 decays to zero)");
    return false;
  }
  /* a flat key the recipe's optimizer or schedule does not read (was: kept, never read) */
  static const char *const flat[RECIPE_FLAT_COUNT] = {"beta1", "beta2", "eps", "momentum", "min_lr"};
  for (int i = 0; i < RECIPE_FLAT_COUNT; i++) {
    bool unread = i == RECIPE_MIN_LR    ? r.lr_schedule == LR_CONSTANT
                  : i == RECIPE_MOMENTUM ? r.optimizer != OPT_SGD
                                         : r.optimizer != OPT_ADAMW;
    if (!r.flat_set[i] || !unread) continue;
    SrcLoc at = r.flat_loc[i].file ? r.flat_loc[i] : L;
    if (i == RECIPE_MIN_LR) {
      error_at(at, "`min_lr` is where a linear or cosine schedule decays to: lr_schedule constant does not read it");
      note("write lr_schedule cosine (or linear), or leave `min_lr` out");
    } else {
      const char *own = i == RECIPE_MOMENTUM ? "sgd" : "adamw";
      error_at(at, "`%s` is %s's: optimizer %s does not read it", flat[i], own, own[0] == 's' ? "adamw" : "sgd");
      if (i == RECIPE_MOMENTUM)
        note("AdamW's momentum is beta1 (`adamw(betas: (0.9, 0.95))`); leave `momentum` out, or write optimizer sgd");
      else
        note("leave `%s` out, or write optimizer adamw", flat[i]);
    }
    return false;
  }
#undef AT
  if (r.max_skips_set && r.on_nonfinite != NONFINITE_SKIP) {
    error_at(r.max_skips_loc.file ? r.max_skips_loc : L,
             "`max_skips` bounds the steps skipped by `on_nonfinite skip`, but this recipe stops at a non-finite "
             "step (`on_nonfinite stop`, the default)");
    note("write `on_nonfinite skip(max: %lld)`, or leave `max_skips` out", (long long)r.max_skips);
    return false;
  }

  /* a warmup as long as the schedule never reaches lr nor decays: legal (a short probe run), but said */
  if (m->has_recipe && r.warmup >= r.steps && r.steps > 0) {
    warning_at(L, "train: warmup %lld is not shorter than steps %lld: the learning rate only rises and never decays "
                  "to min_lr",
               (long long)r.warmup, (long long)r.steps);
    note("a shorter warmup (-D warmup=N), or more steps (-D steps=N; the trainer's --steps N)");
  }

  Value *lr = add_input(g, "lr", L);
  Value *step = r.optimizer == OPT_ADAMW ? add_input(g, "step", L) : NULL;

  /* on_nonfinite skip: the global sum of squares of the gradients gates the update (below), so
   * it is taken, and "grad_norm" reported, with or without clipping */
  bool skip = r.on_nonfinite == NONFINITE_SKIP;
  Value *gscale, *total = NULL;
  if ((r.grad_clip > 0 || skip) && np > 0) {
    Value **sq = ARENA_ARRAY(A, Value *, np);
    for (int i = 0; i < np; i++) {
      Value *s = emit(g, OP_SUMSQ, 1, &grads[i], grads[i]->dtype, ir_scalar_shape(), NULL, L);
      sq[i] = as_vec1(g, s, L);
    }
    Attrs cat = {.axis = 0};
    Value *all = np == 1 ? sq[0] : emit(g, OP_CONCAT, np, sq, sq[0]->dtype, ir_shape(1, (int64_t[]){np}), &cat, L);
    total = emit(g, OP_SUM, 1, &all, all->dtype, ir_scalar_shape(), NULL, L);
    Value *norm = emit(g, OP_SQRT, 1, &total, total->dtype, ir_scalar_shape(), NULL, L);
    ir_add_result(g, norm, "grad_norm");
  }
  if (r.grad_clip > 0 && np > 0) {
    Value *norm = find_result(g, "grad_norm");
    Attrs eps = {.scalar = 1e-6};
    Value *den = emit(g, OP_ADD_SCALAR, 1, &norm, norm->dtype, ir_scalar_shape(), &eps, L);
    Value *q[2] = {scalar_const(g, r.grad_clip, L), den};
    Value *ratio = emit(g, OP_DIV, 2, q, norm->dtype, ir_scalar_shape(), NULL, L);
    Value *mn[2] = {ratio, scalar_const(g, 1.0, L)};
    gscale = emit(g, OP_MINIMUM, 2, mn, norm->dtype, ir_scalar_shape(), NULL, L);
  } else {
    gscale = scalar_const(g, 1.0, L);
  }
  if (skip && total) {
    /* The gate: gscale + 0 * total is gscale when every gradient is finite (exactly: x + 0 = x)
     * and NaN when one holds NaN / Inf (0 * Inf and 0 * NaN are NaN); an update whose gscale is
     * not finite leaves the parameter and its state as they are (ops.def). total is the same
     * all-reduced value on every rank (the gradient norm's), so every rank skips together. */
    Attrs zero = {.scalar = 0.0};
    Value *z = emit(g, OP_SCALE, 1, &total, total->dtype, ir_scalar_shape(), &zero, L);
    Value *ab[2] = {gscale, z};
    gscale = emit(g, OP_ADD, 2, ab, total->dtype, ir_scalar_shape(), NULL, L);
  }
  Value *hs[3] = {lr, gscale, step};
  Value *hyper = vec_of(g, step ? 3 : 2, hs, L);

  for (int i = 0; i < np; i++) {
    Node *pn = params[i];
    Value *p = pn->out[0];
    const char *name = pn->a.name;
    int layer_rank = p->shape.rank - (is_stacked(g, p) ? 1 : 0);
    double wd = layer_rank >= 2 ? r.weight_decay : 0.0;
    if (r.optimizer == OPT_ADAMW) {
      Value *mm = add_state(g, arena_printf(A, "adam_m:%s", name), p, pn->loc);
      Value *vv = add_state(g, arena_printf(A, "adam_v:%s", name), p, pn->loc);
      Value *in[5] = {p, grads[i], mm, vv, hyper};
      Node *u = ir_node_new(g, OP_ADAMW_UPDATE, 5, in, 3, pn->loc);
      u->a.beta1 = r.beta1;
      u->a.beta2 = r.beta2;
      u->a.eps = r.eps;
      u->a.weight_decay = wd;
      for (int k = 0; k < 3; k++) {
        u->out[k]->dtype = in[k == 0 ? 0 : k + 1]->dtype;
        u->out[k]->shape = p->shape;
      }
      ir_add_result(g, u->out[0], arena_printf(A, "next:%s", name));
      ir_add_result(g, u->out[1], arena_printf(A, "next:adam_m:%s", name));
      ir_add_result(g, u->out[2], arena_printf(A, "next:adam_v:%s", name));
    } else {
      bool mom = r.momentum != 0;
      Value *mm;
      if (mom) {
        mm = add_state(g, arena_printf(A, "sgd_m:%s", name), p, pn->loc);
      } else {
        Attrs z = {.scalar = 0};
        mm = emit(g, OP_CONST, 0, NULL, p->dtype == DT_F64 ? DT_F64 : DT_F32, p->shape, &z, pn->loc);
      }
      Value *in[4] = {p, grads[i], mm, hyper};
      Node *u = ir_node_new(g, OP_SGD_UPDATE, 4, in, 2, pn->loc);
      u->a.momentum = r.momentum;
      u->a.weight_decay = wd;
      u->out[0]->dtype = p->dtype;
      u->out[0]->shape = p->shape;
      u->out[1]->dtype = mm->dtype;
      u->out[1]->shape = p->shape;
      ir_add_result(g, u->out[0], arena_printf(A, "next:%s", name));
      if (mom) ir_add_result(g, u->out[1], arena_printf(A, "next:sgd_m:%s", name));
    }
  }
  return true;
}
