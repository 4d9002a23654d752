/* tests/passes/tb.c — see tb.h. */
#include "tb.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "infer.h"
#include "passes.h"

Module *tb_module(Arena *a, const char *name) {
  Module *m = ARENA_NEW(a, Module);
  m->arena = a;
  m->name = name;
  m->graph = ir_graph_new(a, NULL);
  ir_plan_defaults(&m->plan);
  m->plan.dp = 1;
  ir_recipe_defaults(&m->recipe);
  m->has_plan = m->has_recipe = true;
  return m;
}

Shape tb_shape(int rank, ...) {
  int64_t d[IR_MAX_RANK] = {0};
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) d[i] = va_arg(ap, int);
  va_end(ap);
  return ir_shape(rank, d);
}

static Value *source(Graph *g, OpKind op, const char *name, DType dt, Shape s) {
  Attrs a = {.name = name};
  return ir_emit(g, op, 0, NULL, dt, s, &a, (SrcLoc){0});
}

Value *tb_param(Graph *g, const char *name, DType dt, Shape s, InitKind init, double a, double b) {
  Value *v = source(g, OP_PARAM, name, dt, s);
  v->def->a.init = init;
  v->def->a.init_a = a;
  v->def->a.init_b = b;
  v->name = name;
  return v;
}

Value *tb_input(Graph *g, const char *name, DType dt, Shape s) { return source(g, OP_INPUT, name, dt, s); }

Node *tb_node(Graph *g, OpKind op, int nin, Value *const *in, int nout, const Attrs *a) {
  Node *n = ir_node_new(g, op, nin, in, nout, (SrcLoc){0});
  if (a) n->a = *a;
  if (!ir_infer(n)) die("tb: cannot infer %s", ir_ops[op].name);
  return n;
}

Value *tb_op(Graph *g, OpKind op, int nin, Value *const *in, const Attrs *a) {
  return tb_node(g, op, nin, in, 1, a)->out[0];
}
Value *tb_op1(Graph *g, OpKind op, Value *x, const Attrs *a) { return tb_op(g, op, 1, &x, a); }
Value *tb_op2(Graph *g, OpKind op, Value *x, Value *y, const Attrs *a) {
  Value *in[2] = {x, y};
  return tb_op(g, op, 2, in, a);
}

Value *tb_shaped(Graph *g, OpKind op, int nin, Value *const *in, DType dt, Shape s, const Attrs *a) {
  Node *n = ir_node_new(g, op, nin, in, 1, (SrcLoc){0});
  if (a) n->a = *a;
  n->out[0]->dtype = dt;
  n->out[0]->shape = s;
  if (!ir_infer(n)) die("tb: cannot infer %s", ir_ops[op].name);
  return n->out[0];
}

Node *tb_repeat(Graph *g, Graph *body, int nin, Value *const *in, int64_t count, int ncarry, int nxs,
                const char *name) {
  Node *n = ir_node_new(g, OP_REPEAT, nin, in, body->nresults, (SrcLoc){0});
  n->body = body;
  body->owner = n;
  n->a.count = count;
  n->a.ncarry = ncarry;
  n->a.nxs = nxs;
  n->a.name = name;
  if (!ir_infer(n)) die("tb: cannot infer repeat");
  return n;
}

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static double unif(uint64_t seed, int64_t i) { return ((double)(mix(seed * 1000003u + (uint64_t)i) >> 11) + 0.5) / 9007199254740992.0; }

Tensor tb_randn(DType dt, Shape s, uint64_t seed, double scale) {
  Tensor t = tensor_new(dt, s);
  for (int64_t i = 0; i < ir_numel(&s); i++) {
    double u1 = unif(seed, 2 * i), u2 = unif(seed, 2 * i + 1);
    t.data[i] = scale * sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
  }
  return t;
}

Tensor tb_randint(Shape s, uint64_t seed, int64_t lo, int64_t hi) {
  Tensor t = tensor_new(DT_I32, s);
  for (int64_t i = 0; i < ir_numel(&s); i++) t.data[i] = (double)(lo + (int64_t)(unif(seed, i) * (double)(hi - lo)));
  return t;
}

/* ---- shape agreement ------------------------------------------------------- */

typedef struct {
  Value **v;
  DType *dt;
  Shape *s;
  int n, cap;
} Saved;

static void save(Saved *sv, const Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body) save(sv, n->body);
    for (int j = 0; j < n->nout; j++) {
      if (sv->n == sv->cap) {
        sv->cap = sv->cap ? 2 * sv->cap : 256;
        sv->v = realloc(sv->v, sizeof(Value *) * (size_t)sv->cap);
        sv->dt = realloc(sv->dt, sizeof(DType) * (size_t)sv->cap);
        sv->s = realloc(sv->s, sizeof(Shape) * (size_t)sv->cap);
        if (!sv->v || !sv->dt || !sv->s) die("out of memory");
      }
      sv->v[sv->n] = n->out[j];
      sv->dt[sv->n] = n->out[j]->dtype;
      sv->s[sv->n++] = n->out[j]->shape;
    }
  }
}

int tb_shapes_stable(Module *m) {
  Saved sv = {0};
  save(&sv, m->graph);
  int bad = 0;
  if (!pass_shape(m)) {
    fprintf(stderr, "FAIL: pass_shape reported errors\n");
    bad++;
  }
  for (int i = 0; i < sv.n; i++) {
    Value *v = sv.v[i];
    if (v->dtype != sv.dt[i] || !ir_shape_eq(&v->shape, &sv.s[i])) {
      if (bad < 10)
        fprintf(stderr, "FAIL: %s #%d output %d: built as %s rank %d, inferred %s rank %d\n",
                ir_ops[v->def->op].name, v->def->id, v->idx, ir_dtype_name(sv.dt[i]), sv.s[i].rank,
                ir_dtype_name(v->dtype), v->shape.rank);
      bad++;
    }
  }
  free(sv.v);
  free(sv.dt);
  free(sv.s);
  return bad;
}

/* ---- finite differences ----------------------------------------------------- */

static double loss_at(Interp *it) {
  if (!interp_step(it)) die("interp_step failed");
  const Tensor *l = interp_get(it, 0, "loss");
  if (!l) die("no loss");
  return l->data[0];
}

int tb_fd_check(Module *m, int nfeed, const TbFeed *feeds, int per_param, double h, double tol, double jitter,
                const char *label) {
  Graph *g = m->graph;
  Interp *it = interp_new(g, NULL, 1234);
  for (int i = 0; jitter > 0 && i < g->nnodes; i++) {
    Node *pn = g->nodes[i];
    if (pn->op != OP_PARAM) continue;
    const Tensor *cur = interp_get(it, 0, pn->a.name);
    if (!cur) die("no initial value for %s", pn->a.name);
    Tensor p = tensor_copy(cur);
    Tensor noise = tb_randn(DT_F64, p.shape, 1000 + (uint64_t)i, jitter);
    for (int64_t e = 0; e < ir_numel(&p.shape); e++) p.data[e] += noise.data[e];
    interp_set_state(it, -1, pn->a.name, &p);
    tensor_free(&p);
    tensor_free(&noise);
  }
  for (int i = 0; i < nfeed; i++) interp_set_input(it, -1, feeds[i].name, &feeds[i].t);
  loss_at(it);
  int fails = 0, checked = 0;
  for (int i = 0; i < g->nnodes; i++) {
    Node *pn = g->nodes[i];
    if (pn->op != OP_PARAM) continue;
    const char *name = pn->a.name;
    char gname[256];
    snprintf(gname, sizeof gname, "grad:%s", name);
    loss_at(it); /* results of the unperturbed point */
    const Tensor *gt = interp_get(it, 0, gname);
    if (!gt) {
      fprintf(stderr, "FAIL %s: no result %s\n", label, gname);
      fails++;
      continue;
    }
    Tensor grad = tensor_copy(gt);
    Tensor p = tensor_copy(interp_get(it, 0, name));
    int64_t n = ir_numel(&p.shape);
    int k = n < per_param ? (int)n : per_param;
    double worst = 0, gmax = 0;
    for (int64_t e = 0; e < n; e++) gmax = fmax(gmax, fabs(grad.data[e]));
    if (!(gmax > 1e-8)) { /* every test model's params reach its loss */
      fprintf(stderr, "FAIL %s: grad:%s is (near) zero everywhere\n", label, name);
      fails++;
    }
    for (int s = 0; s < k; s++) {
      int64_t idx = k == n ? s : (int64_t)((double)s * (double)n / k + (double)(s * 7 % 3));
      if (idx >= n) idx = n - 1;
      double x0 = p.data[idx], step = h * fmax(1.0, fabs(x0));
      p.data[idx] = x0 + step;
      interp_set_state(it, -1, name, &p);
      double lp = loss_at(it);
      p.data[idx] = x0 - step;
      interp_set_state(it, -1, name, &p);
      double lm = loss_at(it);
      p.data[idx] = x0;
      interp_set_state(it, -1, name, &p);
      double fd = (lp - lm) / (2 * step), an = grad.data[idx];
      double err = fabs(fd - an) / fmax(1.0, fabs(an));
      if (err > worst) worst = err;
      checked++;
      if (!(err <= tol)) {
        if (fails < 20)
          fprintf(stderr, "FAIL %s: d loss / d %s[%lld]: autodiff %.12g, finite differences %.12g (err %.3g > %.1g)\n",
                  label, name, (long long)idx, an, fd, err, tol);
        fails++;
      }
    }
    printf("  %-14s %-20s %3d entries, max |grad| %.2e, worst rel err %.2e\n", label, name, k, gmax, worst);
    tensor_free(&grad);
    tensor_free(&p);
  }
  interp_free(it);
  if (checked == 0) {
    fprintf(stderr, "FAIL %s: nothing checked\n", label);
    fails++;
  }
  return fails;
}

/* ---- equivalence of partitioned programs ---- */

double tb_rel_err(const Tensor *ref, const Tensor *t) {
  if (!ir_shape_eq(&ref->shape, &t->shape)) return INFINITY;
  int64_t n = ir_numel(&ref->shape);
  double mx = 0, d = 0;
  for (int64_t i = 0; i < n; i++) {
    double a = fabs(ref->data[i]), e = fabs(ref->data[i] - t->data[i]);
    mx = a > mx ? a : mx;
    d = e > d || e != e ? e : d;
  }
  return mx > 0 ? d / mx : d;
}

int tb_pos_of(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  return -1;
}

int tb_last_use(const Graph *g, const Value *v) {
  for (int r = 0; r < g->nresults; r++)
    if (g->results[r] == v) return g->nnodes;
  int last = tb_pos_of(g, v->def);
  for (int i = 0; i < g->nnodes; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++)
      if (g->nodes[i]->in[j] == v) last = i;
  return last;
}

int64_t tb_bytes_of(const Value *v) { return ir_numel(&v->shape) * ir_dtype_size(v->dtype); }

bool tb_span(const Value *v, int64_t *lo, int64_t *hi) {
  if (v->def->op == OP_ARG || v->offset < 0) return false;
  const Node *r = v->def->graph->owner;
  int64_t iters = v->stride && r && r->op == OP_REPEAT ? r->a.count : 1;
  *lo = v->offset;
  *hi = v->offset + (iters - 1) * v->stride + tb_bytes_of(v);
  return true;
}

static int compare_runs(const Graph *ref, const Interp *ri, const Interp *pi, const Interp *before, const char *what,
                        int step, double tol, bool spread);

int tb_equiv_micro(const Module *ref, const Module *pm, const Tensor *tok, const Tensor *tgt, int64_t m,
                   const char *label, const char *what, double tol, bool replicas) {
  Tensor mtok = *tok, mtgt = *tgt;
  mtok.shape = mtgt.shape = tb_shape(3, (int)m, (int)(tok->shape.dim[0] / m), (int)tok->shape.dim[1]);
  return tb_equiv_steps(ref, pm, tok, tgt, &mtok, &mtgt, label, what, tol, replicas);
}

/* tb_equiv_steps' two steps; with `resume`, pm's second step starts from the single rank's state after the
 * first (tb_resumed). */
static int equiv_two_steps(const Module *ref, const Module *pm, const Tensor *tok, const Tensor *tgt, const Tensor *ptok,
                           const Tensor *ptgt, const char *label, const char *what, double tol, bool replicas,
                           bool resume) {
  int failures = 0;
  Interp *ri = interp_new(ref->graph, NULL, 7);
  Interp *pi = interp_new(pm->graph, pm->mesh, 7);
  for (int step = 1; step <= 2; step++) {
    if (resume && step == 2) {
      int missing = 0;
      interp_free(pi);
      pi = tb_resumed(pm, ri, &missing);
      if (missing) {
        fprintf(stderr, "FAIL %s %s: %d parameters or states of the partitioned program not in the single rank's\n",
                label, what, missing);
        failures++;
        break;
      }
    }
    Interp *before = resume ? tb_resumed(ref, ri, NULL) : NULL; /* the state both programs start the step from */
    tb_feed_step(ri, tok, tgt, step);
    tb_feed_step(pi, ptok, ptgt, step);
    if (!interp_step(ri) || !interp_step(pi)) {
      fprintf(stderr, "FAIL %s %s: interpreter error at step %d\n", label, what, step);
      failures++;
      if (before) interp_free(before);
      break;
    }
    failures += compare_runs(ref->graph, ri, pi, before, what, step, tol, replicas);
    if (before) interp_free(before);
  }
  interp_free(ri);
  interp_free(pi);
  return failures;
}

int tb_equiv_steps(const Module *ref, const Module *pm, const Tensor *tok, const Tensor *tgt, const Tensor *ptok,
                   const Tensor *ptgt, const char *label, const char *what, double tol, bool replicas) {
  return equiv_two_steps(ref, pm, tok, tgt, ptok, ptgt, label, what, tol, replicas, false);
}

int tb_equiv_steps_resumed(const Module *ref, const Module *pm, const Tensor *tok, const Tensor *tgt,
                           const Tensor *ptok, const Tensor *ptgt, const char *label, const char *what, double tol,
                           bool replicas) {
  return equiv_two_steps(ref, pm, tok, tgt, ptok, ptgt, label, what, tol, replicas, true);
}

/* The copy `name` (next:bf16:<param>) in it is the bf16 rounding of next:<param>, element by element: 0, else 1 (printed). */
static int copy_rounds(const Interp *it, const char *name, const char *what, int step, const char *whose) {
  char pname[256];
  snprintf(pname, sizeof pname, "next:%s", ir_copy_source(name + 5));
  Tensor c, p;
  if (!interp_get_logical(it, name, &c, NULL)) return 0;
  if (!interp_get_logical(it, pname, &p, NULL)) {
    tensor_free(&c);
    fprintf(stderr, "FAIL %s step %d: %s program has '%s' but no '%s'\n", what, step, whose, name, pname);
    return 1;
  }
  int64_t n = ir_numel(&c.shape), bad = -1;
  if (!ir_shape_eq(&c.shape, &p.shape)) bad = 0;
  for (int64_t i = 0; i < n && bad < 0; i++)
    if (c.data[i] != interp_round(DT_BF16, p.data[i])) bad = i;
  if (bad >= 0)
    fprintf(stderr, "FAIL %s step %d: %s program's '%s'[%lld] = %.9g is not the bf16 rounding of '%s' (%.9g)\n", what,
            step, whose, name, (long long)bad, n ? c.data[bad] : 0.0, pname, n ? p.data[bad] : 0.0);
  tensor_free(&c);
  tensor_free(&p);
  return bad >= 0;
}

/* ---- an AdamW parameter's update, replayed on the partitioned program's gradient ---- */

/* The top-level node of g whose output `out` is the result `name` (NULL: none). */
static const Node *result_def(const Graph *g, const char *name, int out) {
  for (int r = 0; r < g->nresults; r++)
    if (g->result_names && g->result_names[r] && !strcmp(g->result_names[r], name)) {
      const Node *n = g->results[r]->def;
      return n->graph == g && out < n->nout && n->out[out] == g->results[r] ? n : NULL;
    }
  return NULL;
}

static const Value *result_value(const Graph *g, const char *name) {
  for (int r = 0; r < g->nresults; r++)
    if (g->result_names && g->result_names[r] && !strcmp(g->result_names[r], name)) return g->results[r];
  return NULL;
}

/* u's ADAMW_UPDATE (attributes and all) applied by the interpreter to p, g, m, v and the hyper-parameters
 * [lr, gscale, step]: the updated parameter and moments into out[3]. */
static bool adamw_apply(const Node *u, const Tensor *p, const Tensor *g, const Tensor *m, const Tensor *v, double lr,
                        double gscale, int step, Tensor *out) {
  Arena a;
  arena_init(&a);
  Graph *gr = ir_graph_new(&a, NULL);
  const Tensor *vals[5] = {p, g, m, v, NULL};
  static const char *const names[5] = {"p", "g", "m", "v", "h"};
  Tensor h = tensor_new(u->in[4]->dtype, u->in[4]->shape);
  h.data[0] = lr, h.data[1] = gscale, h.data[2] = step;
  vals[4] = &h;
  Value *in[5];
  for (int k = 0; k < 5; k++) in[k] = tb_input(gr, names[k], u->in[k]->dtype, vals[k]->shape);
  Node *n = tb_node(gr, OP_ADAMW_UPDATE, 5, in, 3, &u->a);
  for (int k = 0; k < 3; k++) ir_add_result(gr, n->out[k], NULL);
  bool ok = interp_eval(gr, 5, names, vals, out);
  tensor_free(&h);
  arena_free(&a);
  return ok;
}

static double max_abs_diff(const Tensor *a, const Tensor *b) {
  double d = 0;
  for (int64_t k = 0; k < ir_numel(&a->shape); k++) d = fmax(d, fabs(a->data[k] - b->data[k]));
  return d;
}

/* bf16, AdamW: the relative error of the partitioned program's next:<p> (b) to the single rank's update
 * applied in fp64 to the partitioned program's gradient, from the state both started the step from
 * (`before`); -1 when it does not apply (no AdamW update of a PARAM reading the result grad:<p>, or a
 * gradient that does not compare). See tb.h: the update amplifies a small gradient element's error by
 * up to lr / eps, which the bound relative to the gradient's largest element does not cover. */
static double adamw_replay_err(const Graph *ref, const Interp *ri, const Interp *pi, const Interp *before,
                               const char *name, const Tensor *b, int step) {
  const Node *u = result_def(ref, name, 0);
  if (!u || u->op != OP_ADAMW_UPDATE || u->in[0]->def->op != OP_PARAM || u->in[2]->def->op != OP_STATE ||
      u->in[3]->def->op != OP_STATE)
    return -1;
  char gname[300], mname[300], vname[300];
  snprintf(gname, sizeof gname, "grad:%s", u->in[0]->def->a.name);
  snprintf(mname, sizeof mname, "next:%s", u->in[2]->def->a.name);
  snprintf(vname, sizeof vname, "next:%s", u->in[3]->def->a.name);
  if (result_value(ref, gname) != u->in[1]) return -1; /* the update reads the compared gradient itself */
  double err = -1;
  Tensor p0 = {0}, m0 = {0}, v0 = {0}, gr = {0}, gp = {0}, pr = {0}, mr = {0}, vr = {0}, o[3] = {0}, q[3] = {0};
  bool have = interp_get_logical(before, u->in[0]->def->a.name, &p0, NULL) &&
              interp_get_logical(before, u->in[2]->def->a.name, &m0, NULL) &&
              interp_get_logical(before, u->in[3]->def->a.name, &v0, NULL) && interp_get_logical(ri, gname, &gr, NULL) &&
              interp_get_logical(pi, gname, &gp, NULL) && interp_get_logical(ri, name, &pr, NULL) &&
              interp_get_logical(ri, mname, &mr, NULL) && interp_get_logical(ri, vname, &vr, NULL);
  if (!have || !ir_shape_eq(&gr.shape, &gp.shape) || !ir_shape_eq(&pr.shape, &b->shape)) goto done;
  /* the single rank's gradient scale (clipping), read back from its first moment at its largest gradient
   * element: m' = beta1 m + (1 - beta1) gscale g */
  int64_t n = ir_numel(&gr.shape), at = 0;
  for (int64_t k = 0; k < n; k++) at = fabs(gr.data[k]) > fabs(gr.data[at]) ? k : at;
  double gscale = gr.data[at] != 0 ? (mr.data[at] - u->a.beta1 * m0.data[at]) / ((1 - u->a.beta1) * gr.data[at]) : 1;
  double scale = 0;
  for (int64_t k = 0; k < n; k++) scale = fmax(scale, fabs(pr.data[k]));
  if (!adamw_apply(u, &p0, &gr, &m0, &v0, TB_LR, gscale, step, o) || !adamw_apply(u, &p0, &gp, &m0, &v0, TB_LR, gscale, step, q))
    goto done;
  /* the replay must be the single rank's update: its own gradient gives its own results */
  double self = fmax(max_abs_diff(&o[0], &pr) / fmax(scale, 1e-300),
                     fmax(max_abs_diff(&o[1], &mr), max_abs_diff(&o[2], &vr) / fmax(1e-300, fabs(vr.data[at]))));
  if (self > 1e-9) {
    fprintf(stderr, "  (the AdamW replay of '%s' does not reproduce the single rank's update: %.3g)\n", name, self);
    goto done;
  }
  err = scale > 0 ? max_abs_diff(&q[0], b) / scale : max_abs_diff(&q[0], b);
done:
  for (int k = 0; k < 3; k++) tensor_free(&o[k]), tensor_free(&q[k]);
  Tensor *all[] = {&p0, &m0, &v0, &gr, &gp, &pr, &mr, &vr};
  for (size_t k = 0; k < sizeof all / sizeof *all; k++) tensor_free(all[k]);
  return err;
}

int tb_compare_runs(const Graph *ref, const Interp *ri, const Interp *pi, const char *what, int step, double tol,
                    bool spread) {
  return compare_runs(ref, ri, pi, NULL, what, step, tol, spread);
}

static int compare_runs(const Graph *ref, const Interp *ri, const Interp *pi, const Interp *before, const char *what,
                        int step, double tol, bool spread) {
  int failures = 0;
  double worst = 0, worst_spread = 0;
  const char *wname = "", *sname = "";
  int checked = 0;
  for (int i = 0; i < ref->nresults; i++) {
    const char *name = ref->result_names ? ref->result_names[i] : NULL;
    if (!name) continue;
    Tensor a, b;
    double sp = 0;
    if (!interp_get_logical(ri, name, &a, NULL)) continue;
    /* a weight's persistent bf16 copy (passes/wshadow.c) is the cast of its next parameter, compared
     * within tol itself: a plan that keeps none (pp, ZeRO-3, per-layer casts) has nothing to compare it
     * with; one that keeps it must hold that parameter's rounding exactly, in each program (compared
     * with the other program's copy within tol, an element whose two parameters lie on either side of
     * a bf16 rounding boundary would differ by a bf16 step, 2^-8 of it) */
    bool copy = !strncmp(name, "next:", 5) && ir_copy_source(name + 5);
    if (copy && !interp_get_logical(pi, name, &b, NULL)) {
      tensor_free(&a);
      continue;
    }
    if (copy) {
      tensor_free(&a);
      tensor_free(&b);
      int bad = copy_rounds(ri, name, what, step, "the single rank") + copy_rounds(pi, name, what, step, "partitioned");
      failures += bad;
      checked += !bad;
      continue;
    }
    if (!interp_get_logical(pi, name, &b, spread ? &sp : NULL)) {
      fprintf(stderr, "FAIL %s step %d: partitioned program has no result '%s'\n", what, step, name);
      failures++;
      tensor_free(&a);
      continue;
    }
    double e = tb_rel_err(&a, &b);
    double scale = 0;
    for (int64_t k = 0; k < ir_numel(&a.shape); k++) scale = fabs(a.data[k]) > scale ? fabs(a.data[k]) : scale;
    double sr = scale > 0 ? sp / scale : sp;
    double re = -1; /* the AdamW replay's error (bf16, resumed steps), where the direct comparison fails */
    if (!(e <= tol) && before && !strncmp(name, "next:", 5)) re = adamw_replay_err(ref, ri, pi, before, name, &b, step);
    if (re >= 0 && re <= tol && sr <= tol) {
      fprintf(stderr, "  %s step %d: '%s' relative error %.3g, %.3g to the single rank's AdamW update of this gradient\n",
              what, step, name, e, re);
      e = re;
    }
    if (e > worst || e != e) worst = e, wname = name;
    if (sr > worst_spread) worst_spread = sr, sname = name;
    if (!(e <= tol) || !(sr <= tol)) {
      fprintf(stderr, "FAIL %s step %d: '%s' relative error %.3g, replica spread %.3g (tolerance %g)\n", what, step,
              name, e, sr, tol);
      failures++;
    }
    checked++;
    tensor_free(&a);
    tensor_free(&b);
  }
  if (checked < 5) {
    fprintf(stderr, "FAIL %s: only %d results compared\n", what, checked);
    failures++;
  }
  if (spread)
    fprintf(stderr, "  %-34s step %d: %3d tensors, worst rel err %.2g (%s), worst replica spread %.2g (%s)\n", what,
            step, checked, worst, wname, worst_spread, sname);
  else
    fprintf(stderr, "  %-34s step %d: %3d tensors, worst rel err %.2g (%s)\n", what, step, checked, worst, wname);
  return failures;
}

void tb_feed_step(Interp *it, const Tensor *tok, const Tensor *tgt, int step) {
  interp_set_input(it, -1, "tokens", tok);
  interp_set_input(it, -1, "targets", tgt);
  Tensor lr = tensor_new(DT_F32, ir_scalar_shape()), st = tensor_new(DT_F32, ir_scalar_shape());
  lr.data[0] = TB_LR;
  st.data[0] = step;
  interp_set_input(it, -1, "lr", &lr);
  if (interp_has_source(it, "step")) interp_set_input(it, -1, "step", &st); /* (AdamW's bias correction; SGD has none) */
  tensor_free(&lr);
  tensor_free(&st);
}

Interp *tb_resumed(const Module *m, const Interp *from, int *missing) {
  Interp *it = interp_new(m->graph, m->mesh, 99); /* another seed: every parameter comes from `from` */
  const Graph *g = m->graph;
  if (missing) *missing = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if ((n->op != OP_PARAM && n->op != OP_STATE) || ir_copy_source(n->a.name)) continue;
    Tensor t;
    if (!interp_get_logical(from, n->a.name, &t, NULL)) {
      if (missing) ++*missing;
      continue;
    }
    interp_set_state(it, -1, n->a.name, &t);
    tensor_free(&t);
  }
  return it;
}
