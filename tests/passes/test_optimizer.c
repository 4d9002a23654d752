/* tests/passes/test_optimizer.c — pass_optimizer against a hand-written reference, and ir_lr_at.
 *
 * A small model (a matrix and a bias at top level, a stacked matrix and a stacked bias
 * in a REPEAT) is differentiated and given an optimizer; three steps run in the fp64
 * interpreter with lr = ir_lr_at(recipe, step - 1) and step = 1, 2, 3. After each step
 * the new params and moments must equal the reference update below, computed in plain C
 * from the step's gradients, within 1e-12 relative. Covered: AdamW with clipping active,
 * AdamW without clipping, SGD with momentum and clipping, plain SGD. Weight decay must be
 * applied to matrices only (per-layer rank >= 2). With `on_nonfinite skip` (AdamW with and
 * without clipping, SGD with momentum) step 2's input holds a NaN: its loss and gradients are NaN,
 * grad_norm is NaN, and the params and moments stay exactly as after step 1; step 3 (fed the
 * optimizer step 2 and the schedule at 1, as the trainer does) matches the reference update of
 * a run that never had step 2. The schedules are checked against hand-computed values within 1e-12.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "diag.h"
#include "passes.h"
#include "tb.h"

#define D DT_F64
#define TOL 1e-12

static int fails;

static void check(bool ok, const char *fmt, const char *what, double got, double want) {
  if (ok) return;
  fprintf(stderr, "FAIL: ");
  fprintf(stderr, fmt, what);
  fprintf(stderr, ": got %.15g, want %.15g\n", got, want);
  fails++;
}

static bool close(double a, double b) { return fabs(a - b) <= TOL * fmax(1.0, fabs(b)); }

static const char *const pnames[4] = {"W", "b", "Ws", "bs"};
static const bool decayed[4] = {true, false, true, false};

static void build(Module *m) {
  Graph *g = m->graph;
  Value *x = tb_input(g, "x", D, tb_shape(2, 2, 3));
  Value *W = tb_param(g, "W", D, tb_shape(2, 3, 4), INIT_NORMAL, 0, 0.5);
  Value *b = tb_param(g, "b", D, tb_shape(1, 4), INIT_NORMAL, 0, 0.5);
  Value *Ws = tb_param(g, "Ws", D, tb_shape(3, 2, 3, 3), INIT_NORMAL, 0, 0.5);
  Value *bs = tb_param(g, "bs", D, tb_shape(2, 2, 3), INIT_NORMAL, 0, 0.5);
  Graph *body = ir_graph_new(g->arena, g);
  Value *z = ir_add_arg(body, D, tb_shape(2, 2, 3), "z")->out[0];
  Value *w = ir_add_arg(body, D, tb_shape(2, 3, 3), "Ws")->out[0];
  Value *c = ir_add_arg(body, D, tb_shape(1, 3), "bs")->out[0];
  ir_add_result(body, tb_op1(body, OP_TANH, tb_op2(body, OP_ADD, tb_op2(body, OP_MATMUL, z, w, NULL), c, NULL), NULL), NULL);
  Value *in[3] = {x, Ws, bs};
  Value *zf = tb_repeat(g, body, 3, in, 2, 1, 2, "layers")->out[0];
  Value *y = tb_op2(g, OP_ADD, tb_op2(g, OP_MATMUL, zf, W, NULL), b, NULL);
  Value *y2 = tb_op2(g, OP_MUL, y, y, NULL);
  Attrs s = {.scalar = 3.0};
  ir_add_result(g, tb_op1(g, OP_SCALE, tb_op1(g, OP_SUM, y2, NULL), &s), "loss");
}

static Tensor scalar(double v) {
  Tensor t = tensor_new(D, ir_scalar_shape());
  t.data[0] = v;
  return t;
}

static const Tensor *get(Interp *it, const char *fmt, const char *p) {
  char name[128];
  snprintf(name, sizeof name, fmt, p);
  const Tensor *t = interp_get(it, 0, name);
  if (!t) die("no value %s", name);
  return t;
}

static void run(const char *label, OptimizerKind opt, double clip, double momentum, bool skip) {
  Arena arena;
  arena_init(&arena);
  Module *m = tb_module(&arena, label);
  Recipe *r = &m->recipe;
  r->optimizer = opt;
  r->lr = 0.05;
  r->beta1 = 0.8;
  r->beta2 = 0.9;
  r->eps = 1e-6;
  r->weight_decay = 0.1;
  r->momentum = momentum;
  r->grad_clip = clip;
  r->warmup = 2;
  r->steps = 5;
  r->lr_schedule = LR_COSINE;
  r->min_lr = 0.01;
  r->on_nonfinite = skip ? NONFINITE_SKIP : NONFINITE_STOP;
  build(m);
  if (!pass_autodiff(m) || !pass_optimizer(m) || !ir_verify(m->graph, "optimizer")) {
    fprintf(stderr, "FAIL %s: passes or verify\n", label);
    fails++;
    arena_free(&arena);
    return;
  }
  if (tb_shapes_stable(m)) fails++;
  /* weight decay on matrices only */
  Graph *g = m->graph;
  int nupd = 0;
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->op != OP_ADAMW_UPDATE && n->op != OP_SGD_UPDATE) continue;
    const char *pn = n->in[0]->def->a.name;
    for (int k = 0; k < 4; k++)
      if (strcmp(pn, pnames[k]) == 0)
        check(n->a.weight_decay == (decayed[k] ? r->weight_decay : 0.0), "%s: weight decay", pn, n->a.weight_decay,
              decayed[k] ? r->weight_decay : 0.0);
    nupd++;
  }
  check(nupd == 4, "%s: update nodes", label, nupd, 4);

  Interp *it = interp_new(g, NULL, 99);
  Tensor x = tb_randn(D, tb_shape(2, 2, 3), 5, 1.0);
  interp_set_input(it, -1, "x", &x);
  Tensor ref[4], mom[4], vel[4];
  for (int k = 0; k < 4; k++) {
    ref[k] = tensor_copy(get(it, "%s", pnames[k]));
    mom[k] = tensor_new(D, ref[k].shape);
    vel[k] = tensor_new(D, ref[k].shape);
  }
  bool clipped = false;
  Tensor xnan = tensor_copy(&x);
  xnan.data[0] = NAN;
  int applied = 0; /* updates applied so far: the optimizer's step is applied + 1 */
  for (int step = 1; step <= 3; step++) {
    bool poison = skip && step == 2;
    double lr = ir_lr_at(r, applied);
    Tensor tl = scalar(lr), ts = scalar(applied + 1);
    interp_set_input(it, -1, "lr", &tl);
    if (opt == OPT_ADAMW) interp_set_input(it, -1, "step", &ts);
    interp_set_input(it, -1, "x", poison ? &xnan : &x);
    if (!interp_step(it)) die("interp_step");
    if (poison) { /* skipped: grad_norm NaN, nothing changed */
      const Tensor *gn = get(it, "%s", "grad_norm");
      check(isnan(gn->data[0]), "%s: grad_norm of the NaN step", label, gn->data[0], NAN);
      for (int k = 0; k < 4; k++) {
        const Tensor *np = get(it, "%s", pnames[k]);
        const Tensor *nm = opt == OPT_ADAMW ? get(it, "adam_m:%s", pnames[k]) : momentum ? get(it, "sgd_m:%s", pnames[k]) : NULL;
        const Tensor *nv = opt == OPT_ADAMW ? get(it, "adam_v:%s", pnames[k]) : NULL;
        for (int64_t e = 0; e < ir_numel(&np->shape); e++) {
          check(np->data[e] == ref[k].data[e], "%s: param changed by the skipped step", pnames[k], np->data[e], ref[k].data[e]);
          if (nm) check(nm->data[e] == mom[k].data[e], "%s: first moment changed by the skipped step", pnames[k], nm->data[e], mom[k].data[e]);
          if (nv) check(nv->data[e] == vel[k].data[e], "%s: second moment changed by the skipped step", pnames[k], nv->data[e], vel[k].data[e]);
        }
      }
      tensor_free(&tl);
      tensor_free(&ts);
      continue;
    }
    applied++;
    /* reference: global norm and scale */
    double ss = 0;
    for (int k = 0; k < 4; k++) {
      const Tensor *gr = get(it, "grad:%s", pnames[k]);
      for (int64_t e = 0; e < ir_numel(&gr->shape); e++) ss += gr->data[e] * gr->data[e];
    }
    double norm = sqrt(ss), gs = 1.0;
    if (clip > 0) {
      gs = fmin(1.0, clip / (norm + 1e-6));
      clipped |= gs < 1;
    }
    if (clip > 0 || skip) { /* skip reports the norm without clipping too */
      const Tensor *gn = get(it, "%s", "grad_norm");
      check(close(gn->data[0], norm), "%s: grad_norm", label, gn->data[0], norm);
    }
    for (int k = 0; k < 4; k++) {
      const Tensor *gr = get(it, "grad:%s", pnames[k]);
      double wd = decayed[k] ? r->weight_decay : 0.0;
      for (int64_t e = 0; e < ir_numel(&gr->shape); e++) {
        double gg = gs * gr->data[e], p = ref[k].data[e];
        if (opt == OPT_ADAMW) {
          mom[k].data[e] = r->beta1 * mom[k].data[e] + (1 - r->beta1) * gg;
          vel[k].data[e] = r->beta2 * vel[k].data[e] + (1 - r->beta2) * gg * gg;
          double mh = mom[k].data[e] / (1 - pow(r->beta1, applied)), vh = vel[k].data[e] / (1 - pow(r->beta2, applied));
          ref[k].data[e] = p - lr * (mh / (sqrt(vh) + r->eps) + wd * p);
        } else {
          gg += wd * p;
          mom[k].data[e] = momentum * mom[k].data[e] + gg;
          ref[k].data[e] = p - lr * mom[k].data[e];
        }
      }
      const Tensor *np = get(it, "%s", pnames[k]);
      const Tensor *nm = opt == OPT_ADAMW ? get(it, "adam_m:%s", pnames[k]) : momentum ? get(it, "sgd_m:%s", pnames[k]) : NULL;
      const Tensor *nv = opt == OPT_ADAMW ? get(it, "adam_v:%s", pnames[k]) : NULL;
      for (int64_t e = 0; e < ir_numel(&gr->shape); e++) {
        check(close(np->data[e], ref[k].data[e]), "%s: param", pnames[k], np->data[e], ref[k].data[e]);
        if (nm) check(close(nm->data[e], mom[k].data[e]), "%s: first moment", pnames[k], nm->data[e], mom[k].data[e]);
        if (nv) check(close(nv->data[e], vel[k].data[e]), "%s: second moment", pnames[k], nv->data[e], vel[k].data[e]);
      }
    }
    tensor_free(&tl);
    tensor_free(&ts);
  }
  if (clip > 0) check(clipped, "%s: clipping never engaged", label, 0, 1);
  printf("  %-18s 3 steps match the reference%s\n", label, skip ? " (step 2 NaN, skipped)" : "");
  tensor_free(&xnan);
  for (int k = 0; k < 4; k++) {
    tensor_free(&ref[k]);
    tensor_free(&mom[k]);
    tensor_free(&vel[k]);
  }
  tensor_free(&x);
  interp_free(it);
  arena_free(&arena);
}

static void schedules(void) {
  Recipe r;
  ir_recipe_defaults(&r);
  r.lr = 1.0;
  r.min_lr = 0.1;
  r.warmup = 10;
  r.steps = 111; /* 0-based steps 10..110 decay: t = (s - 10) / 100 */
  static const struct {
    LrScheduleKind k;
    int64_t step;
    double want;
  } t[] = {
      {LR_COSINE, 0, 0.1},   {LR_COSINE, 4, 0.5},    {LR_COSINE, 9, 1.0},         {LR_COSINE, 10, 1.0},
      {LR_COSINE, 35, 0.1 + 0.45 * (1 + 0.70710678118654752)}, {LR_COSINE, 60, 0.55},
      {LR_COSINE, 109, 0.1 + 0.45 * (1 + cos(M_PI * 0.99))},  {LR_COSINE, 110, 0.1}, /* the last step: min */
      {LR_COSINE, 500, 0.1}, {LR_LINEAR, 0, 0.1},    {LR_LINEAR, 10, 1.0},        {LR_LINEAR, 35, 0.775},
      {LR_LINEAR, 60, 0.55}, {LR_LINEAR, 110, 0.1},  {LR_CONSTANT, 3, 0.4},       {LR_CONSTANT, 10, 1.0},
      {LR_CONSTANT, 110, 1.0},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    r.lr_schedule = t[i].k;
    double got = ir_lr_at(&r, t[i].step);
    char what[64];
    snprintf(what, sizeof what, "schedule %d at step %lld", (int)t[i].k, (long long)t[i].step);
    check(close(got, t[i].want), "%s", what, got, t[i].want);
  }
  r.warmup = 0; /* no warmup: starts at lr */
  r.lr_schedule = LR_COSINE;
  check(close(ir_lr_at(&r, 0), 1.0), "%s", "cosine without warmup at 0", ir_lr_at(&r, 0), 1.0);
  check(close(ir_lr_at(&r, 55), 0.55), "%s", "cosine without warmup at 55", ir_lr_at(&r, 55), 0.55);
  /* the case: 10 steps from 1e-3 to 1e-4, no warmup: step 10 of 10 runs at 1e-4 */
  r.lr = 1e-3, r.min_lr = 1e-4, r.steps = 10;
  check(close(ir_lr_at(&r, 9), 1e-4), "%s", "cosine at the last of 10 steps", ir_lr_at(&r, 9), 1e-4);
  r.steps = 1; /* one step, no warmup: it is the last one */
  check(close(ir_lr_at(&r, 0), 1e-4), "%s", "cosine with one step", ir_lr_at(&r, 0), 1e-4);
  printf("  schedules match\n");
}

int main(void) {
  run("adamw+clip", OPT_ADAMW, 0.5, 0, false);
  run("adamw", OPT_ADAMW, 0, 0, false);
  run("sgd+momentum+clip", OPT_SGD, 0.5, 0.9, false);
  run("sgd", OPT_SGD, 0, 0, false);
  run("adamw+clip skip", OPT_ADAMW, 0.5, 0, true);
  run("adamw skip", OPT_ADAMW, 0, 0, true);
  run("sgd+momentum skip", OPT_SGD, 0, 0.9, true);
  schedules();
  printf("%d failures (tolerance %g relative)\n", fails, TOL);
  return fails ? 1 : 0;
}
