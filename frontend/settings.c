/* frontend/settings.c — topology, parallel and train blocks, and -D overrides of their fields.
 *
 * A settings line is a flat list of words; each block kind walks it key by key
 * (`memory 40 GiB  bf16 312 TFLOPS` is two settings on one line). Quantities
 * take units and are stored in bytes, bytes/s, FLOP/s and seconds.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "fe.h"
#include "plan_options.h"
#include "settings_words.h"

/* ---- topology ------------------------------------------------------------------ */
static const char *const topo_keys[] = {"nodes", "node", "network", NULL};
static const char *const node_keys[] = {"gpu", "cpu", "link", "host", "pcie", NULL};
static const char *const dev_keys[] = {"memory", "bf16", "f32", "hbm", NULL};

static void get_link(Cur *c, const char *key, Link *l) {
  static const char *const kinds[] = {"nvlink", "pcie", "efa", "infiniband", "ethernet", "shm", "ib", "eth"};
  static const LinkKind kk[] = {LINK_NVLINK, LINK_PCIE, LINK_EFA, LINK_IB, LINK_ETH, LINK_SHM, LINK_IB, LINK_ETH};
  l->loc = c->end;
  int k = sw_get_choice(c, key, kinds, 8);
  if (k < 0) return;
  l->kind = kk[k];
  l->count = 1;
  Word *n = sw_peek(c), *x = sw_peek2(c);
  if (n && n->kind == W_NUM && sw_is_ident(x, "x")) {
    if (!sw_get_int32(c, key, 1, 1 << 20, &l->count)) return;
    c->i++;
  }
  if (!sw_get_quantity(c, key, Q_RATE, &l->bytes_per_s)) return;
  if (sw_is_ident(sw_peek(c), "latency")) {
    c->i++;
    sw_get_quantity(c, "latency", Q_TIME, &l->latency_s);
  }
}

static void dev_key(Cur *c, Word *k, void *ctx) {
  Topology *t = ctx;
  if (sw_is_ident(k, "memory")) sw_get_quantity(c, "memory", Q_BYTES, &t->device_memory);
  else if (sw_is_ident(k, "bf16")) sw_get_quantity(c, "bf16", Q_FLOPS, &t->peak_flops_bf16);
  else if (sw_is_ident(k, "f32")) sw_get_quantity(c, "f32", Q_FLOPS, &t->peak_flops_f32);
  else if (sw_is_ident(k, "hbm")) sw_get_quantity(c, "hbm", Q_RATE, &t->hbm_bytes_per_s);
  else sw_unknown_key(c, k, "device", dev_keys);
}

static void node_key(Cur *c, Word *k, void *ctx) {
  Topology *t = ctx;
  if (sw_is_ident(k, "gpu") || sw_is_ident(k, "cpu")) {
    if (t->devices_per_node) {
      error_at(k->loc, "a node has one kind of device; `%s` given twice", k->s);
      return;
    }
    t->cpu_only = sw_is_ident(k, "cpu");
    t->device = t->cpu_only ? "cpu" : NULL;
    Word *n = sw_peek(c);
    if (n && n->kind == W_IDENT && !sw_is_ident(n, "x")) {
      t->device = n->s;
      c->i++;
    } else if (!t->cpu_only) {
      sw_expected(c, "gpu", "a device name (e.g. `a100_40g`)");
      return;
    }
    int64_t count = 1;
    if (sw_is_ident(sw_peek(c), "x")) {
      c->i++;
      if (!sw_get_int(c, k->s, 1, 1 << 20, &count)) return;
    }
    t->devices_per_node = (int)count;
    const PtrVec *b = sw_take_block(c, k->s);
    if (b) sw_walk(c->fe, b, dev_key, t, "device");
  } else if (sw_is_ident(k, "link")) {
    get_link(c, "link", &t->intra);
  } else if (sw_is_ident(k, "host")) {
    if (!sw_is_ident(sw_peek(c), "memory")) {
      sw_expected(c, "host", "`memory`");
      return;
    }
    c->i++;
    sw_get_quantity(c, "host memory", Q_BYTES, &t->host_memory);
  } else if (sw_is_ident(k, "pcie")) {
    sw_get_quantity(c, "pcie", Q_RATE, &t->pcie_bytes_per_s);
  } else {
    sw_unknown_key(c, k, "node", node_keys);
  }
}

static void topo_key(Cur *c, Word *k, void *ctx) {
  Topology *t = ctx;
  if (sw_is_ident(k, "nodes")) {
    sw_get_int32(c, "nodes", 1, 1 << 20, &t->nodes);
  } else if (sw_is_ident(k, "node")) {
    const PtrVec *b = sw_take_block(c, "node");
    if (b) sw_walk(c->fe, b, node_key, t, "node");
  } else if (sw_is_ident(k, "network")) {
    get_link(c, "network", &t->inter);
  } else {
    sw_unknown_key(c, k, "topology", topo_keys);
  }
}

void fe_topology(Fe *fe, const Decl *d) {
  Topology *t = &fe->m->topo;
  memset(t, 0, sizeof *t);
  t->name = d->name ? d->name : "topology";
  t->nodes = 1;
  t->loc = d->loc;
  int before = diag_errors();
  sw_walk(fe, &d->body, topo_key, t, "topology");
  if (diag_errors() != before) return;
  if (t->devices_per_node == 0) {
    error_at(d->loc, "topology `%s` names no devices: add `gpu NAME x N { ... }` or `cpu x N { ... }` to its `node` block",
             t->name);
    return;
  }
  if (t->device_memory <= 0) error_at(d->loc, "topology `%s` gives no device memory (`memory 80 GiB`)", t->name);
  fe->m->has_topology = true;
}

/* ---- parallel plan ------------------------------------------------------------------ */
static const char *const plan_keys[] = {"tp", "pp", "cp", "dp", "sp", "zero", "offload", "microbatches", "schedule",
                                        "interleave", "recompute", "bucket", "cross_node_tp", "cp_mode",
                                        "weight_copy", "pp_layers", "coalesce", "defer_waits", "zb_w", NULL};

/* Named numeric arguments of a settings call, e.g. adamw(lr: 6e-4, betas: (0.9, 0.95)). */
static bool expr_num(const Expr *e, double *out) {
  if (e->kind == E_NUM) {
    *out = e->num;
    return isfinite(e->num);
  }
  if (e->kind == E_NEG && expr_num(e->a, out)) {
    *out = -*out;
    return true;
  }
  return false;
}

/* Where a recipe number (RecipeNum, by its key) was set; nothing for another field. */
static void recipe_num_at(Recipe *r, const char *field, SrcLoc at) {
  for (int i = 0; field && i < RNUM_COUNT; i++)
    if (strcmp(field, ir_recipe_num_names[i]) == 0) r->num_loc[i] = at;
}

typedef struct {
  const char *name;
  double *out;   /* NULL: a pair, written to out2[0..1] */
  double *out2[2];
  const char *field[2]; /* the field(s) it sets, as the flat key (set_twice); NULL: name */
} CallArg;

static void call_args(Cur *c, const Word *w, CallArg *cas, int n) {
  const char *names[16];
  for (int i = 0; i < n; i++) names[i] = cas[i].name;
  for (int a = 0; a < w->args.n; a++) {
    const Arg *arg = w->args.v[a];
    if (!arg->name) {
      error_at(arg->loc, "arguments of `%s` are named, e.g. `%s(%s: ...)`", w->s, w->s, n ? cas[0].name : "x");
      continue;
    }
    int k = -1;
    for (int i = 0; i < n; i++)
      if (strcmp(arg->name, cas[i].name) == 0) k = i;
    if (k < 0) {
      error_at(arg->loc, "`%s` has no argument `%s`", w->s, arg->name);
      const char *hint = diag_nearest(arg->name, names, n);
      if (hint) note("did you mean `%s`?", hint);
      continue;
    }
    const char *f0 = cas[k].field[0] ? cas[k].field[0] : arg->name;
    if (sw_set_twice(c, f0, arg->loc) || (cas[k].field[1] && sw_set_twice(c, cas[k].field[1], arg->loc))) continue;
    const Expr *e = arg->value;
    if (cas[k].out) {
      if (!expr_num(e, cas[k].out)) error_at(e->loc, "`%s:` needs a number", arg->name);
    } else if (e->kind != E_TUPLE || e->items.n != 2 || !expr_num(e->items.v[0], cas[k].out2[0]) ||
               !expr_num(e->items.v[1], cas[k].out2[1])) {
      error_at(e->loc, "`%s:` needs a pair of numbers, e.g. (0.9, 0.95)", arg->name);
    }
    for (int f = 0; f < 2; f++) /* a recipe number: the optimizer's checks point at the argument (a pair's own) */
      recipe_num_at(&c->fe->m->recipe, f ? cas[k].field[1] : f0,
                    e->kind == E_TUPLE && e->items.n == 2 ? ((const Expr *)e->items.v[f])->loc : e->loc);
  }
}

/* `pp N layers(a, b, ..)`: each stage's layer count, in stage order (passes/stage.c checks the count
 * against pp, or pp x v virtual stages with interleaving, and the sum against the layer loop); `pp N layers(balanced)`: the stage pass splits them
 * by the cost model's time and memory per layer (passes/pipe_balance.c). */
static void stage_layers(Cur *c, Plan *p) {
  Word *w = sw_peek(c);
  c->i++;
  p->stage_layers_loc = w->loc;
  p->nstage_layers = 0;
  p->stage_balanced = false;
  const Arg *only = w->args.n == 1 ? w->args.v[0] : NULL;
  if (only && !only->name && only->value->kind == E_IDENT) {
    const Expr *e = only->value;
    if (strcmp(e->name, "balanced") == 0) {
      p->stage_balanced = true;
      return;
    }
    error_at(e->loc, "`layers(..)` takes a layer count per stage or `balanced`, not `%s`", e->name);
    const char *words[] = {"balanced"};
    const char *hint = diag_nearest(e->name, words, 1);
    if (hint) note("did you mean `%s`?", hint);
    return;
  }
  if (w->args.n < 1 || w->args.n > PLAN_MAX_STAGE_LAYERS) {
    error_at(w->loc, "`layers(..)` needs a layer count per stage (interleaved: or per virtual stage), between 1 and %d of them", PLAN_MAX_STAGE_LAYERS);
    return;
  }
  for (int a = 0; a < w->args.n; a++) {
    const Arg *arg = w->args.v[a];
    double v;
    if (arg->name || !expr_num(arg->value, &v) || v != floor(v) || v < 1 || v > 1e6) {
      error_at(arg->name ? arg->loc : arg->value->loc,
               "`layers(..)`: stage %d needs a whole number of layers, at least 1 (an empty stage holds nothing)", a);
      return;
    }
    p->stage_layer_loc[p->nstage_layers] = arg->value->loc;
    p->stage_layers[p->nstage_layers++] = (int)v;
  }
}

/* `zb_w auto | hold | hold(N) | recompute` (-D zb_w=hold:N): hold(N), W holding for the last N layers of
 * each stage's loop (passes/recompute_split.c), N a whole number of at least 1. */
static void zb_w_key(Cur *c, Plan *p) {
  Word *w = sw_peek(c);
  p->zb_w_layers = 0;
  if (w && w->kind == W_IDENT && strncmp(w->s, "hold:", 5) == 0) { /* -D's form */
    char *end;
    double v = strtod(w->s + 5, &end);
    c->i++;
    SrcLoc at = w->loc;
    at.col += 5;
    if (end == w->s + 5 || *end || v != floor(v) || v < 1 || v > 1e6) {
      error_at(at, "`zb_w hold:N`: N is the layers of each stage held (its last N), a whole number of at least 1, got `%s`",
               w->s + 5);
      return;
    }
    p->zb_w = ZBW_HOLD, p->zb_w_layers = (int)v;
    return;
  }
  int i = sw_get_choice(c, "zb_w", ir_zb_w_names, 3);
  if (i < 0) return;
  p->zb_w = i;
  if (w->kind != W_CALL) return;
  const Arg *only = w->args.n == 1 ? w->args.v[0] : NULL;
  double v;
  if (i != ZBW_HOLD) error_at(w->loc, "`%s` takes no arguments (`hold(N)` does: W holds for the last N layers of each stage)", w->s);
  else if (!only || only->name || !expr_num(only->value, &v) || v != floor(v) || v < 1 || v > 1e6)
    error_at(only && !only->name ? only->value->loc : w->loc,
             "`zb_w hold(N)`: N is the layers of each stage held (its last N), a whole number of at least 1");
  else p->zb_w_layers = (int)v;
}

static void plan_key(Cur *c, Word *k, void *ctx) {
  Plan *p = ctx;
  const char *key = k->kind == W_IDENT ? k->s : "";
  PlanOpt opt = ir_plan_opt_of_key(key);
  if (opt < PLAN_OPT_COUNT) p->opt_loc[opt] = k->loc; /* ir/plan_options.c refuses what no pass implements, here */
  static const char *const degrees[RT_AX_COUNT] = {[RT_AX_DP] = "dp", [RT_AX_PP] = "pp", [RT_AX_CP] = "cp",
                                                   [RT_AX_TP] = "tp"}; /* ir/mesh.c's errors point there */
  for (int ax = 0; ax < RT_AX_COUNT; ax++)
    if (strcmp(key, degrees[ax]) == 0) p->degree_loc[ax] = k->loc;
  if (strcmp(key, "tp") == 0) sw_get_int32(c, key, 1, 1 << 16, &p->tp);
  else if (strcmp(key, "pp") == 0) {
    if (sw_get_int32(c, key, 1, 1 << 16, &p->pp) && sw_peek(c) && sw_peek(c)->kind == W_CALL && strcmp(sw_peek(c)->s, "layers") == 0)
      stage_layers(c, p);
  }
  else if (strcmp(key, "cp") == 0) sw_get_int32(c, key, 1, 1 << 16, &p->cp);
  else if (strcmp(key, "dp") == 0) {
    if (sw_is_ident(sw_peek(c), "auto")) {
      c->i++;
      p->dp = 0;
    } else {
      sw_get_int32(c, key, 1, 1 << 20, &p->dp);
    }
  } else if (strcmp(key, "sp") == 0) sw_get_bool(c, key, &p->sp);
  else if (strcmp(key, "zero") == 0) {
    if (sw_get_int32(c, key, 0, 3, &p->zero) && sw_is_ident(sw_peek(c), "offload")) {
      if (sw_set_twice(c, "offload", sw_peek(c)->loc)) return;
      p->opt_loc[PLAN_OPT_OFFLOAD] = sw_peek(c)->loc;
      c->i++;
      p->offload = true;
    }
  } else if (strcmp(key, "offload") == 0) {
    if (sw_set_twice(c, "offload", k->loc)) return;
    p->opt_loc[PLAN_OPT_OFFLOAD] = k->loc;
    sw_get_bool(c, key, &p->offload);
  }
  else if (strcmp(key, "microbatches") == 0) sw_get_int32(c, key, 1, 1 << 20, &p->microbatches);
  else if (strcmp(key, "interleave") == 0) {
    if (!sw_set_twice(c, "interleave", k->loc)) sw_get_int32(c, key, 1, 1 << 10, &p->interleave);
  }
  else if (strcmp(key, "schedule") == 0) {
    static const char *const names[] = {"gpipe", "1f1b", "interleaved", "zb"};
    static const PipeSchedule ss[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB};
    Word *w = sw_peek(c);
    int i = sw_get_choice(c, key, names, 4);
    if (i < 0) return;
    p->schedule = ss[i];
    if (w->kind == W_CALL) {
      double v = p->interleave > 1 ? p->interleave : 2;
      CallArg ca[] = {{"v", &v, {0}, {"interleave"}}};
      if (ss[i] != SCHED_INTERLEAVED && w->args.n) error_at(w->loc, "`%s` takes no arguments", w->s);
      call_args(c, w, ca, 1);
      if (v < 1 || v > 1024 || v != floor(v)) error_at(w->loc, "`v:` must be an integer between 1 and 1024");
      else p->interleave = (int)v;
    } else if (ss[i] == SCHED_INTERLEAVED && p->interleave < 2) {
      p->interleave = 2;
    }
  } else if (strcmp(key, "recompute") == 0) {
    static const char *const names[] = {"none", "full", "selective"};
    int i = sw_get_choice(c, key, names, 3);
    if (i >= 0) p->recompute = (RecomputeKind)i;
  } else if (strcmp(key, "bucket") == 0) {
    p->bucket_loc = k->loc; /* passes/grad_buckets.c's note at dp 1, cp 1 */
    double b;
    if (sw_get_quantity(c, key, Q_BYTES, &b)) {
      if (b < 1 || b > 1e15) error_at(k->loc, "`bucket` must be between 1 B and 1000 TB");
      else p->bucket_bytes = (int64_t)b;
    }
  } else if (strcmp(key, "coalesce") == 0) { /* passes/zero_coalesce.c */
    int i = sw_get_choice(c, key, ir_coalesce_names, 3);
    if (i >= 0) p->coalesce = i;
  } else if (strcmp(key, "defer_waits") == 0) { /* passes/zero_defer.c */
    int i = sw_get_choice(c, key, ir_defer_waits_names, 3);
    if (i >= 0) p->defer_waits = i;
  } else if (strcmp(key, "zb_w") == 0) { /* passes/recompute.c */
    zb_w_key(c, p);
  } else if (strcmp(key, "cp_mode") == 0) {
    int i = sw_get_choice(c, key, ir_cp_mode_names, 2);
    if (i >= 0) p->cp_mode = (CpMode)i;
  } else if (strcmp(key, "weight_copy") == 0) {
    int i = sw_get_choice(c, key, ir_weight_copy_names, 3);
    if (i >= 0) p->weight_copy = (WeightCopy)i;
  } else if (strcmp(key, "pp_layers") == 0) { /* `pp N layers(balanced)` as one key (`-D pp_layers=balanced`, what
                                                * the plan search's confirmations pass); even: no `layers(..)` */
    static const char *const names[] = {"even", "balanced"};
    SrcLoc at = sw_peek(c) ? sw_peek(c)->loc : k->loc;
    int i = sw_get_choice(c, key, names, 2);
    if (i < 0) return;
    p->stage_layers_loc = at;
    p->nstage_layers = 0;
    p->stage_balanced = i == 1;
  } else if (strcmp(key, "cross_node_tp") == 0) sw_get_bool(c, key, &p->allow_cross_node_tp);
  else sw_unknown_key(c, k, "parallel", plan_keys);
}

void fe_plan(Fe *fe, const Decl *d) {
  fe->m->plan.loc = d->loc;
  fe->m->has_plan = true;
  sw_walk(fe, &d->body, plan_key, &fe->m->plan, "parallel");
}

/* ZeRO's settings, checked once the plan and the -D overrides are in (passes/zero.c applies them). */
void fe_check_plan(Fe *fe) {
  const Plan *p = &fe->m->plan;
  if (p->offload && p->zero == 0)
    error_at(diag_blame((SrcLoc[]){p->opt_loc[PLAN_OPT_OFFLOAD], p->opt_loc[PLAN_OPT_ZERO]}, 2,
                        p->opt_loc[PLAN_OPT_OFFLOAD].file ? p->opt_loc[PLAN_OPT_OFFLOAD] : p->loc),
             "`offload` moves ZeRO's sharded optimizer state to the host: it needs zero 1, 2 or 3 (the plan has "
             "zero 0)");
}

/* ---- training recipe ------------------------------------------------------------------ */
static const char *const recipe_keys[] = {
    "batch",  "micro_batch", "seq",     "optimizer", "lr",         "beta1",      "beta2",     "eps",  "weight_decay",
    "momentum", "lr_schedule", "warmup", "min_lr",   "grad_clip", "precision",   "master",    "steps", "data",
    "val",    "checkpoint",  "ckpt_every", "ckpt_dir", "ckpt_keep", "seed",     "on_nonfinite", "max_skips", NULL};

/* `master f32` (the master weights' type, after `precision` or alone): f32 is what every pass and
 * kernel keeps; `master bf16` was accepted and never read, so it is refused. */
static void master_weights(Cur *c) {
  static const char *const names[] = {"bf16", "f32"};
  Word *w = sw_peek(c);
  int i = sw_get_choice(c, "master", names, 2);
  if (i == 0) {
    error_at(w->loc, "`master bf16`: bf16 master weights are not implemented in shardc (the optimizer keeps f32 "
             "master weights, also under precision bf16)");
    note("write `master f32`, or leave `master` out");
  }
}

static void recipe_key(Cur *c, Word *k, void *ctx) {
  Recipe *r = ctx;
  const char *key = k->kind == W_IDENT ? k->s : "";
  static const char *const flat[RECIPE_FLAT_COUNT] = {"beta1", "beta2", "eps", "momentum", "min_lr"};
  for (int i = 0; i < RECIPE_FLAT_COUNT; i++)
    if (strcmp(key, flat[i]) == 0) r->flat_set[i] = true, r->flat_loc[i] = k->loc;
  recipe_num_at(r, key, k->loc);
  static const char *const aliased[] = {"lr",         "beta1",      "beta2",     "eps", "weight_decay", "momentum",
                                        "warmup",     "min_lr",     "max_skips", "val", "ckpt_every",   "ckpt_dir",
                                        "ckpt_keep"}; /* fields a call or a clause sets too */
  for (size_t i = 0; i < sizeof aliased / sizeof aliased[0]; i++)
    if (strcmp(key, aliased[i]) == 0 && sw_set_twice(c, aliased[i], k->loc)) {
      c->i = c->w->n;
      return;
    }
  if (strcmp(key, "batch") == 0) {
    r->batch_loc = k->loc; /* ir/mesh.c: batch = micro_batch x dp x accumulation, checked there */
    sw_get_int(c, key, 1, (int64_t)1 << 40, &r->batch);
  }
  else if (strcmp(key, "micro_batch") == 0) {
    r->micro_batch_loc = k->loc;
    sw_get_int(c, key, 1, (int64_t)1 << 30, &r->micro_batch);
  }
  else if (strcmp(key, "seq") == 0) sw_get_int(c, key, 1, (int64_t)1 << 30, &r->seq);
  else if (strcmp(key, "steps") == 0) {
    if (sw_peek(c) && sw_peek(c)->kind == W_NUM && sw_peek(c)->num == 0) { /* (was accepted: the trainer ran 1 step) */
      error_at(sw_peek(c)->loc, "`steps` is the schedule's length, at least 1, got 0");
      note("a run that trains no step is the trainer's: --steps 0");
      c->i++;
    } else {
      sw_get_int(c, key, 1, (int64_t)1 << 50, &r->steps);
    }
  }
  else if (strcmp(key, "warmup") == 0) sw_get_int(c, key, 0, (int64_t)1 << 50, &r->warmup);
  else if (strcmp(key, "ckpt_every") == 0) sw_get_int(c, key, 0, (int64_t)1 << 50, &r->ckpt_every);
  else if (strcmp(key, "ckpt_keep") == 0) sw_get_int32(c, key, 1, 1 << 20, &r->ckpt_keep);
  else if (strcmp(key, "ckpt_dir") == 0) sw_get_string(c, key, &r->ckpt_dir);
  else if (strcmp(key, "seed") == 0) {
    int64_t s;
    if (sw_get_int(c, key, 0, (int64_t)1 << 53, &s)) r->seed = (uint64_t)s;
  } else if (strcmp(key, "lr") == 0) sw_get_num(c, key, &r->lr);
  else if (strcmp(key, "beta1") == 0) sw_get_num(c, key, &r->beta1);
  else if (strcmp(key, "beta2") == 0) sw_get_num(c, key, &r->beta2);
  else if (strcmp(key, "eps") == 0) sw_get_num(c, key, &r->eps);
  else if (strcmp(key, "weight_decay") == 0) sw_get_num(c, key, &r->weight_decay);
  else if (strcmp(key, "momentum") == 0) sw_get_num(c, key, &r->momentum);
  else if (strcmp(key, "min_lr") == 0) sw_get_num(c, key, &r->min_lr);
  else if (strcmp(key, "grad_clip") == 0) sw_get_num(c, key, &r->grad_clip);
  else if (strcmp(key, "max_skips") == 0) {
    r->max_skips_loc = k->loc; /* passes/optimizer.c refuses it without `on_nonfinite skip` */
    r->max_skips_set = sw_get_int(c, key, 1, (int64_t)1 << 40, &r->max_skips);
  } else if (strcmp(key, "on_nonfinite") == 0) {
    static const char *const names[] = {"stop", "skip"};
    Word *w = sw_peek(c);
    int i = sw_get_choice(c, key, names, 2);
    if (i < 0) return;
    r->on_nonfinite = i == 0 ? NONFINITE_STOP : NONFINITE_SKIP;
    if (w->kind != W_CALL) return;
    if (i == 0) {
      error_at(w->loc, "`stop` takes no arguments (`skip(max: N)` sets the consecutive skips allowed)");
      return;
    }
    double max = NAN;
    CallArg ca[] = {{"max", &max, {0}, {"max_skips"}}};
    call_args(c, w, ca, 1);
    if (isnan(max)) return;
    if (max < 1 || max != floor(max) || max > 1e12)
      error_at(w->loc, "`max:` must be a whole number of consecutive skipped steps, at least 1, got %g", max);
    else r->max_skips = (int64_t)max, r->max_skips_loc = w->loc, r->max_skips_set = true;
  } else if (strcmp(key, "optimizer") == 0) {
    static const char *const names[] = {"adamw", "sgd"};
    Word *w = sw_peek(c);
    int i = sw_get_choice(c, key, names, 2);
    if (i < 0) return;
    r->optimizer = i == 0 ? OPT_ADAMW : OPT_SGD;
    if (w->kind != W_CALL) return;
    if (i == 0) {
      CallArg ca[] = {{"lr", &r->lr, {0}, {0}},
                      {"betas", NULL, {&r->beta1, &r->beta2}, {"beta1", "beta2"}},
                      {"eps", &r->eps, {0}, {0}},
                      {"weight_decay", &r->weight_decay, {0}, {0}}};
      call_args(c, w, ca, 4);
    } else {
      CallArg ca[] = {{"lr", &r->lr, {0}, {0}}, {"momentum", &r->momentum, {0}, {0}},
                      {"weight_decay", &r->weight_decay, {0}, {0}}};
      call_args(c, w, ca, 3);
    }
  } else if (strcmp(key, "lr_schedule") == 0) {
    static const char *const names[] = {"constant", "linear", "cosine"};
    Word *w = sw_peek(c);
    int i = sw_get_choice(c, key, names, 3);
    if (i < 0) return;
    r->lr_schedule = (LrScheduleKind)i;
    if (w->kind != W_CALL) return;
    double warm = (double)r->warmup, min = NAN;
    CallArg ca[] = {{"warmup", &warm, {0}, {0}}, {"min", &min, {0}, {"min_lr"}}};
    call_args(c, w, ca, 2);
    if (warm < 0 || warm != floor(warm) || warm > 1e15) error_at(w->loc, "`warmup:` must be a whole number of steps");
    else r->warmup = (int64_t)warm;
    if (!isnan(min) && i == LR_CONSTANT) { /* was: kept and never read */
      error_at(w->loc, "`constant` keeps lr after the warmup: it takes no `min:`");
      note("write linear(...) or cosine(...) to decay to min, or leave `min:` out");
    } else if (!isnan(min)) {
      r->min_lr = min;
    }
  } else if (strcmp(key, "precision") == 0 || strcmp(key, "master") == 0) {
    static const char *const names[] = {"bf16", "f32"};
    if (strcmp(key, "master") == 0) {
      master_weights(c);
      return;
    }
    int i = sw_get_choice(c, key, names, 2);
    if (i < 0) return;
    r->precision = i == 0 ? PREC_BF16 : PREC_F32;
    r->precision_loc = k->loc; /* passes/precision.c's note on the CPU target */
    if (sw_is_ident(sw_peek(c), "master")) {
      c->i++;
      master_weights(c);
    }
  } else if (strcmp(key, "data") == 0) {
    if (sw_get_string(c, key, &r->data) && sw_is_ident(sw_peek(c), "val")) {
      if (sw_set_twice(c, "val", sw_peek(c)->loc)) return;
      c->i++;
      sw_get_string(c, "val", &r->val);
    }
  } else if (strcmp(key, "val") == 0) sw_get_string(c, key, &r->val);
  else if (strcmp(key, "checkpoint") == 0) {
    bool any = false;
    for (;;) {
      if (sw_is_ident(sw_peek(c), "every")) {
        if (sw_set_twice(c, "ckpt_every", sw_peek(c)->loc)) return;
        c->i++;
        if (!sw_get_int(c, "checkpoint every", 1, (int64_t)1 << 50, &r->ckpt_every)) return;
      } else if (sw_is_ident(sw_peek(c), "to")) {
        if (sw_set_twice(c, "ckpt_dir", sw_peek(c)->loc)) return;
        c->i++;
        if (!sw_get_string(c, "checkpoint to", &r->ckpt_dir)) return;
      } else if (sw_is_ident(sw_peek(c), "keep")) {
        if (sw_set_twice(c, "ckpt_keep", sw_peek(c)->loc)) return;
        c->i++;
        if (!sw_get_int32(c, "checkpoint keep", 1, 1 << 20, &r->ckpt_keep)) return;
      } else {
        /* a misspelt clause read as the next train setting said `unknown train setting `kep``, no hint */
        static const char *const clauses[] = {"every", "to", "keep"};
        const Word *w = sw_peek(c);
        bool setting = false;
        for (int i = 0; w && w->kind == W_IDENT && recipe_keys[i] && !setting; i++)
          setting = !strcmp(w->s, recipe_keys[i]);
        const char *hint = w && w->kind == W_IDENT && !setting ? diag_nearest(w->s, clauses, 3) : NULL;
        if (hint) {
          error_at(w->loc, "unknown `checkpoint` clause `%s`", w->s);
          note("did you mean `%s`? (checkpoint every N to \"dir\" keep K)", hint);
          c->i = c->w->n;
          return;
        }
        break;
      }
      any = true;
    }
    if (!any) sw_expected(c, "checkpoint", "`every N`, `to \"dir\"` or `keep K`");
  } else sw_unknown_key(c, k, "train", recipe_keys);
}

void fe_recipe(Fe *fe, const Decl *d) {
  fe->m->recipe.loc = d->loc;
  fe->m->has_recipe = true;
  sw_walk(fe, &d->body, recipe_key, &fe->m->recipe, "train");
}

/* ---- -D overrides ------------------------------------------------------------------------ */
bool fe_parse_number(const char *s, double *out) {
  if (!*s) return false;
  char *end;
  double v = strtod(s, &end);
  if (*end || !isfinite(v)) return false;
  *out = v;
  return true;
}

static bool in_keys(const char *k, const char *const *keys) {
  for (int i = 0; keys[i]; i++)
    if (strcmp(keys[i], k) == 0) return true;
  return false;
}

/* The command line's definitions as a source, `key=value` one a line in their order (DIAG_CMDLINE),
 * so that an error a -D value causes — here or in a later check of the field it set (the mesh, the
 * passes) — quotes it with a caret under the value. */
void fe_define_source(Fe *fe) {
  int n = fe->opt->ndefines;
  if (n == 0) return;
  size_t len = 1;
  for (int i = 0; i < n; i++) len += strlen(fe->opt->defines[i].key) + strlen(fe->opt->defines[i].value) + 2;
  char *text = arena_alloc(fe->a, len), *p = text;
  for (int i = 0; i < n; i++) p += sprintf(p, "%s=%s\n", fe->opt->defines[i].key, fe->opt->defines[i].value);
  diag_add_source(DIAG_CMDLINE, text);
}

SrcLoc fe_define_loc(const Fe *fe, int i, bool at_value) {
  int col = at_value ? (int)strlen(fe->opt->defines[i].key) + 2 : 1;
  return (SrcLoc){DIAG_CMDLINE, i + 1, col};
}

void fe_apply_defines(Fe *fe) {
  for (int i = 0; i < fe->opt->ndefines; i++) {
    const FeDefine *d = &fe->opt->defines[i];
    bool plan = in_keys(d->key, plan_keys), recipe = in_keys(d->key, recipe_keys);
    if (!plan && !recipe) continue;
    fe->define_used[i] = true;
    /* the key's place is its value's: a field set by -D points there (opt_loc, batch_loc, ...) */
    SrcLoc at = fe_define_loc(fe, i, true), end = at;
    end.col += (int)strlen(d->value);
    Word key = {W_IDENT, at, 0, false, d->key, {0}};
    Word val = {W_IDENT, at, 0, false, d->value, {0}};
    double v;
    if (fe_parse_number(d->value, &v)) {
      val.kind = W_NUM;
      val.num = v;
      val.is_int = v == floor(v);
    }
    PtrVec words = {0};
    vec_push(fe->a, &words, &key);
    vec_push(fe->a, &words, &val);
    Cur c = {fe, &words, 1, end, NULL, false};
    int before = diag_errors();
    if (plan) {
      plan_key(&c, &key, &fe->m->plan);
      fe->m->has_plan = true;
    } else {
      recipe_key(&c, &key, &fe->m->recipe);
      fe->m->has_recipe = true;
    }
    if (diag_errors() == before && c.i < words.n) error_at(at, "-D %s=%s: unexpected value", d->key, d->value);
  }
}

void fe_push_setting_keys(Fe *fe, PtrVec *out) {
  for (int i = 0; plan_keys[i]; i++) vec_push(fe->a, out, (void *)plan_keys[i]);
  for (int i = 0; recipe_keys[i]; i++) vec_push(fe->a, out, (void *)recipe_keys[i]);
}
