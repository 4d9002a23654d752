/* replan.c — the driver's compiles of the command line's source with a few -D overrides (see replan.h). */
#include "replan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "diag.h"
#include "fit.h"
#include "memplan.h"
#include "pipe_sched.h"
#include "passes.h"
#include "pipeline.h"
#include "print.h"
#include "zero.h"

typedef struct Own Own;
static Module *stage_memory(Replan *r, Arena *a, Arena *check, const char *const *kv, int n, Module *m, Own *own);

/* What the driver decides for a plan from a first compile of it (Plan.sched_times, zb's list times;
 * Plan.stage_fixed / stage_cap, `layers(balanced)` against the device's memory; Plan.fit, the memory
 * auto choices' figures: auto_memory). as_is: compiled with the auto choices these figures leave, not
 * planned again where that does not fit (auto_memory's measuring compiles). */
typedef struct {
  const double *sched_times;
  const int64_t *stage_fixed;
  double stage_cap;
  PlanFit fit;
  bool as_is;
  Own *own; /* a first compile kept as the candidate for the plan's own (first_compile) */
} PlanInputs;

/* The plan's own compile where a check compile of replan_inputs had its inputs (replan_plan): the last first
 * compile (stage_memory's, or auto_memory's own), its inputs, and its passes' diagnostics (buf from `from`,
 * the front end's before it: printed by the plan's own front end). */
struct Own {
  const PipelineOptions *po; /* the plan's: its verifier setting */
  Module *m;
  PlanInputs in;
  char *buf;
  size_t len;
  long from;
  int nwarnings; /* the passes' */
};

/* Whether auto_memory's figures drop zb's W hold, or keep it for some layers only (passes/recompute.c: W
 * recomputes, for all or some layers, its times longer). */
static bool zbw_dropped(const PlanInputs *io) {
  return io->fit.zbw.lost || fit_figure_over((double)io->fit.zbw.total, io->fit.zbw.cap) || io->fit.zbw_layers > 0;
}

static void auto_memory(Replan *r, Arena *a, const char *const *kv, int n, const Module *m, Module *first, PlanInputs *io,
                        Own *own);
static const double *zb_times(Replan *r, Arena *a, const char *const *kv, int n, const Module *m, const PlanInputs *zbw);
static Module *compile_as(Replan *r, Arena *a, const char *const *kv, int n, FILE *diag, const PlanInputs *in);

static void auto_memory_from(Replan *r, Arena *a, Arena *check, const char *const *kv, int n, Module *m, Module *first,
                             Own *own);

/* The check compiles (stage_memory's, auto_memory's) in an arena of their own, freed once their figures are in
 * m->plan: a check compile is as large as the plan's own (Llama-3-405B pp 16 x cp 2: 1.6 GB each). Where
 * stage_memory decides no figures, its compile is auto_memory's first (the same inputs: the same module).
 * zb's list times are measured with the auto choices all taken (zb_w auto: W holding), and again where
 * auto_memory drops the hold (W recomputes: longer). For the plan's own compile (replan_plan), the check compiles
 * go to the driver's arena instead, and the last first compile is kept as the plan's where its inputs are (own_is). */
static Module *inputs(Replan *r, Arena *a, const char *const *kv, int n, Module *m, Own *own, Arena *keep);

void replan_inputs(Replan *r, Arena *a, const char *const *kv, int n, Module *m) {
  inputs(r, a, kv, n, m, NULL, NULL);
}

/* Whether a compile with figure c decides the choice as one with figure p (taken or dropped; the memory
 * report's why aside, made from the figures: *_auto_why). */
static bool same_choice(FitFigure c, FitFigure p) {
  return c.lost == p.lost && fit_figure_over((double)c.total, c.cap) == fit_figure_over((double)p.total, p.cap);
}

/* Whether own's compile is the plan p's: the same inputs, the memory figures deciding the same. */
static bool own_is(const Own *own, const Plan *p) {
  const PlanInputs *c = &own->in;
  return own->m && c->sched_times == p->sched_times && c->stage_fixed == p->stage_fixed && c->stage_cap == p->stage_cap &&
         same_choice(c->fit.wcopy, p->fit.wcopy) && same_choice(c->fit.defer, p->fit.defer) &&
         same_choice(c->fit.zbw, p->fit.zbw) && c->fit.zbw_layers == p->fit.zbw_layers;
}

/* replan_inputs; with own (replan_plan): the check compiles into keep (empty), and where the last first compile is
 * m's own (own_is), that compile, kept there, its figures m's and its whys made from them; else NULL (keep freed). */
static Module *inputs(Replan *r, Arena *a, const char *const *kv, int n, Module *m, Own *own, Arena *keep) {
  m->plan.sched_times = zb_times(r, a, kv, n, m, NULL);
  Arena local, *check = own ? keep : &local; /* (own: the modules' arena is keep from the start: Module.arena) */
  arena_init(check);
  Module *m0 = stage_memory(r, a, check, kv, n, m, own);
  auto_memory_from(r, a, check, kv, n, m, m0, own);
  if (own && own_is(own, &m->plan)) {
    Module *mo = own->m;
    mo->plan.fit = m->plan.fit;
    if (mo->wcopy.why_fit) mo->wcopy.why = wshadow_auto_why(mo);
    if (mo->defer.why_fit) mo->defer.why = zero_defer_auto_why(mo);
    if (mo->zbw.why_fit) mo->zbw.why = recompute_zbw_auto_why(mo);
    return mo;
  }
  arena_free(check);
  return NULL;
}

Module *replan_plan(Replan *r, Arena *a, Module *m, const PipelineOptions *po, Arena *keep) {
  Own own = {.po = po};
  bool may = !po->dump_after && !po->time && !po->after_pass; /* (those show the passes as they run) */
  Module *mo = inputs(r, a, NULL, 0, m, may ? &own : NULL, keep);
  if (mo) diag_replay(own.buf + own.from, own.len - (size_t)own.from, own.nwarnings);
  free(own.buf);
  if (mo) return mo;
  return pipeline_run(m, po) ? m : NULL;
}

/* Compiles the source again with n extra overrides into arena a, its diagnostics written to
 * `diag` (not the terminal); NULL when it did not compile. The error count is reset after. The
 * plan's inputs from a first compile (replan_inputs: zb's times, the balanced split's memory) are
 * decided as for the command line's plan, or taken from `in` (the first compiles' own). */
/* The front end on the source with the command line's overrides and kv[0..n) after them, into arena a (under
 * the caller's diagnostics), for the command line's target; NULL where there are too many. */
static Module *front(Replan *r, Arena *a, const char *const *kv, int n) {
  enum { MAXD = 160 };
  FeDefine d[MAXD];
  int nd = r->fo->ndefines;
  if (nd + n > MAXD) return NULL;
  for (int i = 0; i < nd; i++) d[i] = r->fo->defines[i];
  for (int i = 0; i < n; i++) {
    const char *eq = strchr(kv[i], '=');
    if (!eq) die("replan: '%s' is not key=value", kv[i]);
    d[nd + i].key = arena_strndup(a, kv[i], (size_t)(eq - kv[i]));
    d[nd + i].value = arena_strdup(a, eq + 1);
  }
  FeOptions o = *r->fo;
  o.defines = d;
  o.ndefines = nd + n;
  Module *m = fe_compile(a, r->input, &o);
  if (m) {
    m->target = r->target;
    m->no_fuse = r->no_fuse;
  }
  return m;
}

static Module *compile_as(Replan *r, Arena *a, const char *const *kv, int n, FILE *diag, const PlanInputs *in) {
  Diag quiet; /* the re-plan's own diagnostics, to `diag` (not the terminal) */
  diag_init(&quiet, diag, 0);
  Diag *outer = diag_enter(&quiet);
  Module *m = front(r, a, kv, n);
  bool ok = m && diag_errors() == 0;
  Own *own = in ? in->own : NULL;
  int warned = diag_warnings();
  diag_leave(outer);
  if (own) { /* the passes' diagnostics from here (the front end's: the plan's own front end prints them) */
    fflush(diag);
    own->from = ftell(diag);
  }
  if (ok) {
    if (in) {
      m->plan.sched_times = in->sched_times;
      m->plan.stage_fixed = in->stage_fixed;
      m->plan.stage_cap = in->stage_cap;
      m->plan.fit = in->fit;
    } else { /* their own quiet compiles, outside this one's diag (the copies' fit: below, from this one) */
      m->plan.sched_times = zb_times(r, a, kv, n, m, NULL);
      Arena check;
      arena_init(&check);
      stage_memory(r, a, &check, kv, n, m, NULL);
      arena_free(&check);
    }
    diag_enter(&quiet);
    PipelineOptions po = {.dump = diag, .verify = own && own->po->verify}; /* (own: as the plan's compile) */
    ok = pipeline_run(m, &po) && diag_errors() == 0;
    if (own) own->nwarnings = diag_warnings() - warned;
    diag_leave(outer);
  }
  fflush(diag);
  diag_free(&quiet);
  /* `weight_copy auto` / `defer_waits auto` / `zb_w auto`: planned with all (where open), which this plan does
   * not fit: planned again with the combination auto_memory picks (one compile where the plan fits) */
  double total = 0, cap = 0;
  if (ok && !in && ((m->plan.weight_copy == WCOPY_AUTO && m->wcopy.persistent) ||
                    (m->plan.defer_waits == DEFER_AUTO && m->defer.taken) ||
                    (m->plan.zb_w == ZBW_AUTO && m->zbw.held && m->zbw.bytes > 0)) &&
      !fit_plan_fits(m, &total, &cap) && cap > 0) {
    PlanInputs again = {.sched_times = m->plan.sched_times, .stage_fixed = m->plan.stage_fixed,
                        .stage_cap = m->plan.stage_cap};
    auto_memory(r, a, kv, n, m, m, &again, NULL);
    if (again.sched_times && zbw_dropped(&again)) again.sched_times = zb_times(r, a, kv, n, m, &again);
    return compile_as(r, a, kv, n, diag, &again);
  }
  return ok ? m : NULL;
}

/* m's device as the cost model sees it (its topology's, or the profile's), read quietly: false where it
 * cannot say (a profile that cannot be read: said by the caller's own read, where it uses one). */
static bool device_of(Replan *r, const Module *m, CostDevice *dev) {
  FILE *null = fopen("/dev/null", "w");
  if (!null) return false;
  Diag quiet;
  diag_init(&quiet, null, 0);
  Diag *outer = diag_enter(&quiet);
  cost_device_defaults(m, dev);
  bool ok = (!r->fo->profile_file || cost_profile_read(r->fo->profile_file, dev)) && diag_errors() == 0;
  diag_leave(outer);
  diag_free(&quiet);
  fclose(null);
  return ok;
}

/* The cost model's predicted step of m (on device_of's device); 0 where it cannot say. */
static double step_of(Replan *r, const Module *m) {
  CostDevice dev;
  if (!device_of(r, m, &dev)) return 0;
  CostReport rep;
  cost_estimate(m, &dev, &rep);
  return rep.step_s;
}

/* A first compile (stage_memory's, auto_memory's: m's inputs as they are, in), quiet, into arena a; with own
 * (replan_plan, no overrides), kept there as the candidate for the plan's own compile, its diagnostics with it. */
static Module *first_compile(Replan *r, Arena *a, const char *const *kv, int n, const PlanInputs *in, Own *own) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = own && !n ? open_memstream(&buf, &len) : fopen("/dev/null", "w");
  if (!f) return NULL;
  PlanInputs at = *in;
  at.own = own && !n ? own : NULL;
  Module *m0 = compile_as(r, a, kv, n, f, &at);
  fclose(f);
  if (at.own) {
    free(own->buf);
    own->buf = buf, own->len = len, own->m = m0, own->in = *in;
    own->in.own = NULL;
  }
  return m0;
}

/* auto_memory's compiled variants: [0] all taken; keep, the choices taken (AUTO_MEM_* bits). */
typedef struct {
  Replan *r;
  Arena *a;
  const char *const *kv;
  int n;
  FILE *null;
  const PlanInputs *as_is;
  unsigned full; /* the choices open and taken by the first compile */
  bool timed;    /* each variant's step, fitting or not (three open: the singles order the rest) */
  struct { unsigned keep; bool fits; double total, step; } v[8];
  int nv;
} MemVariants;

/* Compiles the variant keeping `keep` (the choices of full not in it dropped) and appends it, measured;
 * false where the compile failed. */
static bool mem_variant(MemVariants *s, unsigned keep) {
  static const char *const drop[3] = {"weight_copy=per_layer", "defer_waits=off", "zb_w=recompute"};
  enum { MAXKV = 64 };
  const char *kv2[MAXKV];
  int n2 = s->n;
  if (s->n + 3 > MAXKV || s->nv >= 8) return false;
  for (int i = 0; i < s->n; i++) kv2[i] = s->kv[i];
  for (int c = 0; c < 3; c++)
    if ((s->full & ~keep) >> c & 1u) kv2[n2++] = drop[c];
  Module *mk = compile_as(s->r, s->a, kv2, n2, s->null, s->as_is);
  if (!mk || !mk->memplan) return false;
  double c2 = 0;
  int i = s->nv++;
  s->v[i].keep = keep, s->v[i].fits = fit_plan_fits(mk, &s->v[i].total, &c2);
  s->v[i].step = s->v[i].fits || s->timed ? step_of(s->r, mk) : 0;
  return true;
}

/* The plan keeping `keep` (of full) with zb's W holding for the last n layers of each stage's loop only
 * (`zb_w=hold:n`), compiled: its total, whether it fits and then its step; false where the compile failed. */
static bool hold_variant(MemVariants *s, unsigned keep, int64_t n, double *total, bool *fits, double *step) {
  static const char *const drop[2] = {"weight_copy=per_layer", "defer_waits=off"};
  enum { MAXKV = 64 };
  const char *kv2[MAXKV];
  char hold[32];
  int n2 = s->n;
  if (s->n + 3 > MAXKV) return false;
  for (int i = 0; i < s->n; i++) kv2[i] = s->kv[i];
  for (int c = 0; c < 2; c++)
    if ((s->full & ~keep) >> c & 1u) kv2[n2++] = drop[c];
  snprintf(hold, sizeof hold, "zb_w=hold:%lld", (long long)n);
  kv2[n2++] = hold;
  Module *mk = compile_as(s->r, s->a, kv2, n2, s->null, s->as_is);
  if (!mk || !mk->memplan) return false;
  double c2 = 0;
  *fits = fit_plan_fits(mk, total, &c2);
  *step = *fits ? step_of(s->r, mk) : 0;
  return true;
}

/* auto_memory's partial hold: where the choice taken (kept, fitting at total t0, its step step0) drops zb's W
 * hold, whose plan needs t_all, the largest n < layers whose plan (kept, the hold for each stage's last n
 * layers) fits: its memory grows with n, so a bisection over (0, layers), first tried at the n the two
 * totals predict (linearly: confirmed in one compile where the prediction holds, log2(layers) at most);
 * taken where the cost model has it no slower than the choice (the cut's own cost: its loops' overheads; its
 * deferred waits carried across it, passes/memplan_defer.c). 0: none; else its total in *total. */
static int64_t partial_hold(MemVariants *s, unsigned kept, int64_t layers, double t0, double t_all, double cap,
                            double step0, double *total) {
  int64_t lo = 0, hi = layers; /* fits with lo (0: none held); not with hi (all) */
  double best = 0;
  int64_t guess = t_all > t0 ? (int64_t)((cap - t0) / (t_all - t0) * (double)layers) : layers - 1;
  while (hi - lo > 1) {
    int64_t n = guess > lo && guess < hi ? guess : lo + (hi - lo) / 2;
    guess = n + 1; /* (after a fit: the next one up, the prediction's neighbour) */
    double t = 0, step = 0;
    bool fits = false;
    if (!hold_variant(s, kept, n, &t, &fits, &step)) return 0;
    if (fits) lo = n, *total = t, best = step;
    else hi = n, guess = -1;
  }
  return lo > 0 && best > 0 && step0 > 0 && best <= step0 ? lo : 0;
}

/* The memory-dependent `auto` choices, made together (the one decision): `weight_copy auto` (the weights'
 * persistent bf16 copies, passes/wshadow.c), `defer_waits auto` (the backward loops' scatter waits in the
 * next iteration, passes/zero_defer.c) and `zb_w auto` (zb's W holding the GEMM inputs B's recompute made,
 * passes/recompute.c): of the combinations that fit the device (fit_plan_fits), the one the cost model has
 * fastest (its compiled step), each choice costing memory to save time. Compiled in turn, the fewest a
 * plan needs: all taken (where open; `first`, a compile of the plan with the auto choices unmeasured, or
 * compiled here), kept where it fits (one compile) or where only one choice is open (dropped where not);
 * else each dropped alone (one compile each), the fastest of those that fit taken; else (three open, no
 * one dropped fits) the ones keeping one choice, in the order of the step the singles predict (each
 * choice's seconds lost and bytes saved, added), the first that fits taken; else none. The choice goes to
 * the passes as the figures of the plan with each choice, in io->fit (wcopy, defer, zbw; the
 * pass drops a choice whose figure is over the device's memory, or marked lost, and says why in the memory
 * report): a choice taken, the figure of the plan taken (it fits); a choice dropped, that of the fastest
 * compiled plan with it that fits, marked lost (io->fit.kept: what was kept instead), else that of the
 * smallest compiled plan with it (over the device). Nothing where none is open, without a device memory,
 * or when a compile fails (the caller's own compile reports why). */
static void auto_memory(Replan *r, Arena *a, const char *const *kv, int n, const Module *m, Module *first, PlanInputs *io,
                        Own *own) {
  const Plan *p = &m->plan;
  bool open[3] = {p->weight_copy == WCOPY_AUTO && wshadow_may_persist(m),
                  p->defer_waits == DEFER_AUTO && p->zero >= 2 &&
                      !(m->mesh && !zero_defers_scatters(p->zero, zero_group(m->mesh).deg)),
                  p->zb_w == ZBW_AUTO && p->schedule == SCHED_ZB && p->recompute != RECOMPUTE_NONE && m->mesh &&
                      m->mesh->dim[RT_AX_PP] > 1};
  if (!open[0] && !open[1] && !open[2]) return;
  if (n + 3 > 64) return; /* (mem_variant's room) */
  PlanInputs as_is = {.sched_times = io->sched_times, .stage_fixed = io->stage_fixed, .stage_cap = io->stage_cap,
                      .as_is = true};
  FILE *null = fopen("/dev/null", "w");
  if (!null) return;
  Module *m0 = first ? first : first_compile(r, a, kv, n, &as_is, own); /* auto without the figures: all taken */
  unsigned full = 0;
  if (m0 && m0->memplan)
    full = (open[0] && m0->wcopy.persistent ? AUTO_MEM_COPIES : 0) | (open[1] && m0->defer.taken ? AUTO_MEM_DEFER : 0) |
           (open[2] && m0->zbw.held && m0->zbw.bytes > 0 ? AUTO_MEM_HOLD : 0);
  MemVariants s = {.r = r, .a = a, .kv = kv, .n = n, .null = null, .as_is = &as_is, .full = full, .nv = 1};
  double cap = 0;
  int pick = -1; /* -1: none kept */
  s.v[0].keep = full, s.v[0].fits = full && fit_plan_fits(m0, &s.v[0].total, &cap), s.v[0].step = 0;
  if (!full || cap <= 0) {
    fclose(null);
    return;
  }
  int nfull = (full & 1) + (full >> 1 & 1) + (full >> 2 & 1);
  s.timed = nfull == 3;
  if (s.v[0].fits) pick = 0;
  else if (nfull == 1 && full == AUTO_MEM_HOLD && m0->zbw.stage_layers > 1) { /* the plan without: the partial hold's base */
    if (mem_variant(&s, 0) && s.v[s.nv - 1].fits) pick = s.nv - 1;
  } else if (nfull > 1) {
    for (int k = 0; k < 3; k++)
      if (full >> k & 1u) mem_variant(&s, full & ~(1u << k));
    for (int i = 1; i < s.nv; i++)
      if (s.v[i].fits && (pick < 0 || s.v[i].step < s.v[pick].step)) pick = i;
    if (pick < 0 && nfull == 3 && s.nv == 4) { /* keep one: in the order of the singles' predicted step */
      s.v[0].step = step_of(r, m0);
      double lost[3] = {0, 0, 0}, pred[3];
      for (int i = 1; i < s.nv; i++)
        for (int k = 0; k < 3; k++)
          if (!(s.v[i].keep >> k & 1u)) lost[k] = s.v[i].step - s.v[0].step;
      for (int j = 0; j < 3; j++) pred[j] = lost[0] + lost[1] + lost[2] - lost[j];
      for (int t = 0; t < 3 && pick < 0; t++) {
        int j = 0;
        for (int k = 1; k < 3; k++)
          if (pred[k] < pred[j]) j = k;
        pred[j] = 1e300;
        if (mem_variant(&s, 1u << j) && s.v[s.nv - 1].fits) pick = s.nv - 1;
      }
    }
  }
  unsigned kept = pick >= 0 ? s.v[pick].keep : 0;
  /* the hold dropped, the choice taken fitting: W holds for the last layers of each stage that still fit */
  int64_t layers = full & AUTO_MEM_HOLD && !(kept & AUTO_MEM_HOLD) && pick >= 0 ? m0->zbw.stage_layers : 0, part = 0;
  double part_total = 0;
  int same = -1, least = -1; /* the whole hold's compiled plan keeping the same (the prediction's), else the smallest */
  for (int i = 0; i < s.nv && layers > 1; i++)
    if (s.v[i].keep & AUTO_MEM_HOLD) {
      if (s.v[i].keep == (kept | AUTO_MEM_HOLD)) same = i;
      if (least < 0 || s.v[i].total < s.v[least].total) least = i;
    }
  if (same < 0) same = least;
  if (layers > 1 && same >= 0) part = partial_hold(&s, kept, layers, s.v[pick].total, s.v[same].total, cap, s.v[pick].step, &part_total);
  fclose(null);
  FitFigure *fig[3] = {&io->fit.wcopy, &io->fit.defer, &io->fit.zbw};
  for (int k = 0; k < 3; k++) {
    if (!(full >> k & 1u)) continue;
    int by = -1; /* the plan its figure is from */
    if (kept >> k & 1u) by = pick;
    else {
      for (int i = 0; i < s.nv; i++) /* the fastest that fits with it */
        if (s.v[i].keep >> k & 1u && s.v[i].fits && (by < 0 || s.v[i].step < s.v[by].step)) by = i;
      fig[k]->lost = by >= 0;
      if (by < 0)
        for (int i = 0; i < s.nv; i++) /* the smallest with it */
          if (s.v[i].keep >> k & 1u && (by < 0 || s.v[i].total < s.v[by].total)) by = i;
    }
    fig[k]->total = (int64_t)s.v[by].total, fig[k]->cap = cap;
  }
  io->fit.kept = (unsigned char)kept;
  if (part > 0) { /* the partial hold taken: its plan's figure (it fits), the whole hold's beside it */
    io->fit.zbw_whole = io->fit.zbw.total;
    io->fit.zbw = (FitFigure){.total = (int64_t)part_total, .cap = cap};
    io->fit.zbw_layers = (int)part;
  }
}

Module *replan_compile(Replan *r, Arena *a, const char *const *kv, int n, FILE *diag) {
  return compile_as(r, a, kv, n, diag, NULL);
}

/* The cost model's seconds of m0's instructions, summed per kind and stage (t[k pp + st], k: F, B,
 * W); false when there is no pipeline to play. */
static bool instr_sums(Replan *r, Module *m0, int pp, double *t, int *cnt) {
  CostDevice dev;
  CostPipe cp;
  if (!device_of(r, m0, &dev) || !cost_pipe(m0, &dev, &cp) || cp.sched.pp != pp) return false;
  for (int i = 0; i < 3 * pp; i++) t[i] = 0, cnt[i] = 0;
  for (int st = 0; st < pp; st++)
    for (int k = 0; k < cp.sched.len[st]; k++) {
      char op = cp.sched.list[st][k].op;
      int i = (op == 'F' ? 0 : op == 'B' ? 1 : 2) * pp + st;
      t[i] += cp.t.dur[st][k], cnt[i]++;
    }
  cost_pipe_free(&cp);
  return true;
}

/* zb's lists made with the cost model's instruction times (ZB-H1 with the stages' own F, B and W,
 * pipe_sched_make_timed; docs/pipeline.md), the one place every compile of the driver takes them
 * from (`plan`, `build`, --pick, the search's confirmations, --compare): m (compiled by the front
 * end with the overrides kv) compiled again quietly with equal-time lists at 1 and at 2 micro-batches
 * (an instruction's nodes do not depend on how many there are, but a stage's first instruction also
 * holds what runs once per step, the weights' casts: GPT-3's stage 0 F is 32.7 ms at 1, 29.8 at 192),
 * each played by the cost model (cost_pipe, on the device the plan is printed for: the topology's,
 * or the profile's); the difference of the two compiles' sums per kind and stage is one
 * instruction's steady time (tiny's stage means the same at 1, 4, 8 and 16). `layers(balanced)`:
 * at min(M, pp) and min(M, pp + 1) micro-batches, where the split's in-flight counts are those of M
 * (its memory weighs them). The compiles are pp x the micro-batches long, not pp x M (GPT-3 at pp 32,
 * 192 micro-batches: 32 and 64 instructions a kind, not 6,144). NULL (equal times) without a zb
 * pipeline, or when a compile fails (the caller's own compile reports why). */
static const double *zb_times(Replan *r, Arena *a, const char *const *kv, int n, const Module *m, const PlanInputs *zbw) {
  if (m->plan.schedule != SCHED_ZB || !m->mesh || m->mesh->dim[RT_AX_PP] < 2 || (m->plan.sched_times && !zbw))
    return NULL;
  enum { MAXKV = 64, MAXPP = 64 };
  int pp = m->mesh->dim[RT_AX_PP];
  int64_t M = m->batch.accum, lo = m->plan.stage_balanced ? (M < pp ? M : pp) : 1, hi = lo < M ? lo + 1 : lo;
  if (n + 2 > MAXKV || pp > MAXPP) return NULL;
  PlanInputs equal = {0}; /* (zb_w auto: W holding, or as auto_memory decided it: zbw) */
  if (zbw) equal.fit.zbw = zbw->fit.zbw, equal.fit.zbw_layers = zbw->fit.zbw_layers;
  double sum[2][3 * MAXPP];
  int cnt[2][3 * MAXPP];
  for (int j = 0; j < (hi > lo ? 2 : 1); j++) {
    int64_t few = j ? hi : lo;
    const char *kv2[MAXKV];
    char bkv[64], mkv[64];
    for (int i = 0; i < n; i++) kv2[i] = kv[i];
    snprintf(bkv, sizeof bkv, "batch=%lld", (long long)(m->batch.global / M * few));
    snprintf(mkv, sizeof mkv, "microbatches=%lld", (long long)few);
    kv2[n] = bkv, kv2[n + 1] = mkv;
    FILE *null = fopen("/dev/null", "w");
    if (!null) return NULL;
    Module *m0 = compile_as(r, a, kv2, n + 2, null, &equal);
    fclose(null);
    if (!m0 || !m0->pipe || !instr_sums(r, m0, pp, sum[j], cnt[j])) return NULL;
  }
  double *t = ARENA_ARRAY(a, double, 3 * (size_t)pp);
  for (int i = 0; i < 3 * pp; i++) {
    bool two = hi > lo && cnt[1][i] > cnt[0][i];
    t[i] = two ? (sum[1][i] - sum[0][i]) / (cnt[1][i] - cnt[0][i]) : cnt[0][i] ? sum[0][i] / cnt[0][i] : 0;
    if (!(t[i] > 0)) return NULL; /* an instruction the model cannot time: equal times */
  }
  return t;
}

/* `layers(balanced)` against the device's memory (passes/pipe_balance.c, pipe_balance_calibrate): a
 * quiet compile of the time-balanced split (into arena `check`, the caller's to free; the figures into a);
 * where its plan does not fit the device or its first stage is the largest (the embedding, the most
 * micro-batches in flight and, since each stage merges its own gradients, their sums), each stage's bytes
 * beyond the balance's own model (Plan.stage_fixed) and the device's memory (stage_cap) for the caller's
 * compile. Nothing without `layers(balanced)`, a device memory, or when that compile fails (the caller's
 * own reports why). Returns that compile where it decided no figures (m's inputs are then the ones it was
 * compiled with, the auto choices unmeasured: auto_memory's first compile), else NULL. */
static Module *stage_memory(Replan *r, Arena *a, Arena *check, const char *const *kv, int n, Module *m, Own *own) {
  if (!m->plan.stage_balanced || m->plan.stage_fixed || !m->mesh || m->mesh->dim[RT_AX_PP] < 2) return NULL;
  PlanInputs in = {.sched_times = m->plan.sched_times};
  Module *m0 = first_compile(r, check, kv, n, &in, own);
  double cap = m0 ? memplan_capacity(m0, NULL, 0) : 0;
  const int64_t *fixed = m0 ? pipe_balance_calibrate(m0, cap, a) : NULL;
  if (fixed) {
    m->plan.stage_fixed = fixed;
    m->plan.stage_cap = cap;
    return NULL;
  }
  return m0;
}

/* auto_memory for m, its compiles into arena `check` (the caller's to free), zb's times again into a where it
 * drops the hold; first (NULL: none): a compile with m's inputs as they are (stage_memory's), taken for
 * auto_memory's first. */
static void auto_memory_from(Replan *r, Arena *a, Arena *check, const char *const *kv, int n, Module *m, Module *first,
                             Own *own) {
  Plan *p = &m->plan;
  if (p->fit.wcopy.total || p->fit.defer.total || p->fit.zbw.total || memplan_capacity(m, NULL, 0) <= 0) return;
  PlanInputs io = {.sched_times = p->sched_times, .stage_fixed = p->stage_fixed, .stage_cap = p->stage_cap};
  auto_memory(r, check, kv, n, m, first, &io, own);
  p->fit = io.fit;
  if (p->sched_times && zbw_dropped(&io)) p->sched_times = zb_times(r, a, kv, n, m, &io); /* W recomputes */
}

/* The overrides compiling m's plan at `micro` of its micro-batches: the global batch cut to match (and
 * `microbatches` where the plan writes it). */
typedef struct {
  char b[2][48];
  const char *kv[2];
  int n;
} MicroKv;

static void micro_kv(const Module *m, int64_t micro, MicroKv *k) {
  k->n = 0;
  snprintf(k->b[k->n++], sizeof k->b[0], "batch=%lld", (long long)(m->batch.global / m->batch.accum * micro));
  if (m->plan.microbatches > 1) snprintf(k->b[k->n++], sizeof k->b[1], "microbatches=%lld", (long long)micro);
  k->kv[0] = k->b[0], k->kv[1] = k->b[1];
}

/* The source through the front end with k's overrides, quietly (the command line's plan said what there is to
 * say), into a; NULL where it does not compile. */
static Module *front_at(Replan *r, Arena *a, const MicroKv *k) {
  FILE *null = fopen("/dev/null", "w");
  if (!null) return NULL;
  Diag quiet;
  diag_init(&quiet, null, 0);
  Diag *outer = diag_enter(&quiet);
  Module *x = front(r, a, k->kv, k->n);
  if (diag_errors()) x = NULL;
  diag_leave(outer);
  diag_free(&quiet);
  fclose(null);
  return x;
}

/* The search base's compile of x (front_at's with k, or the command line's m: k NULL): its auto memory choices as
 * its build makes them (auto_memory, k's overrides again), then its passes with po (NULL: quiet). */
static bool base_passes(Replan *r, Arena *a, Module *x, const MicroKv *k, const PipelineOptions *po) {
  Arena check;
  arena_init(&check);
  auto_memory_from(r, a, &check, k ? k->kv : NULL, k ? k->n : 0, x, NULL, NULL);
  arena_free(&check);
  if (po) return pipeline_run(x, po);
  FILE *null = fopen("/dev/null", "w");
  if (!null) return false;
  Diag quiet;
  diag_init(&quiet, null, 0);
  Diag *outer = diag_enter(&quiet);
  PipelineOptions q = {.dump = null};
  bool ok = pipeline_run(x, &q) && !diag_errors();
  diag_leave(outer);
  diag_free(&quiet);
  fclose(null);
  return ok;
}

/* A pipeline's micro-batches unroll in its program: Llama-3-405B dp 4 tp 8 pp 32 zb cp 2 at its batch of 2048,
 * 512 of them, took the search's base 10 minutes (auto_memory's compiles of a plan that does not fit) before
 * the search began. Its calibration reads the last stage's work a step, affine in the micro-batches from 2 pp on
 * (each stage's warm-up, steady state and drain; at pp, 1f1b's steady state is missing): compiled at 4 pp and 2 pp
 * of them and taken to the plan's (plan_model_init_at), it is the whole plan's where the auto choices are the
 * same at both (zb, interleaved: within 0.1 % of each candidate's estimate, hfuse's pairs by where the memory plan
 * puts the weights; tests/passes/test_plan_base.c). */
enum { SEARCH_BASE_ROUNDS = 4 };

Module *replan_search_base(Replan *r, Arena *a, Module *m, const PipelineOptions *po, Module **fewer) {
  int64_t pp = m->mesh ? m->mesh->dim[RT_AX_PP] : 1, at = SEARCH_BASE_ROUNDS * pp;
  *fewer = NULL;
  MicroKv kx, kf;
  micro_kv(m, at, &kx);
  micro_kv(m, at / 2, &kf);
  Module *x = pp > 1 && m->batch.accum > at ? front_at(r, a, &kx) : NULL;
  if (!x) return base_passes(r, a, m, NULL, po) ? m : NULL;
  Module *f = front_at(r, a, &kf);
  if (f && !base_passes(r, a, f, &kf, NULL)) f = NULL;
  if (!base_passes(r, a, x, &kx, po)) return NULL;
  if (f && f->wcopy.persistent == x->wcopy.persistent && f->defer.taken == x->defer.taken &&
      f->zbw.held == x->zbw.held && f->zbw.layers == x->zbw.layers)
    *fewer = f;
  return x;
}

int64_t replan_total(void *ctx, const char *const *kv, int n) {
  Replan *r = ctx;
  FILE *null = fopen("/dev/null", "w");
  if (!null) return -1;
  /* (each knob's compile in an arena of its own, freed when its total is read: the fit check plans a dozen, a
   * pp knob of GPT-3 unrolls its micro-batches; in the caller's arena they stayed to the end, 6 GB) */
  Arena a;
  arena_init(&a);
  Module *m = replan_compile(r, &a, kv, n, null);
  fclose(null);
  int64_t t = m && m->memplan ? m->memplan->total : -1;
  arena_free(&a);
  return t;
}

/* m's final IR as text (malloc'd; NULL on failure). */
static char *final_ir(const Module *m) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return NULL;
  ir_print_graph(f, m->graph);
  fclose(f);
  return buf;
}

/* Whether m's program is the one compiled with the fusion bits `on_bits` turned back on: the same final
 * graph, and the same kernel launches and compute time in the cost model. */
static bool same_with_on(Replan *r, Arena *a, const Module *m, unsigned on_bits) {
  Replan on = *r;
  on.no_fuse &= ~on_bits;
  FILE *sink = fopen("/dev/null", "w");
  if (!sink) return false;
  Module *other = replan_compile(&on, a, NULL, 0, sink);
  fclose(sink);
  if (!other) return false;
  char *x = final_ir(m), *y = final_ir(other);
  bool same = x && y && strcmp(x, y) == 0;
  if (same) { /* (the printed graph does not show every fusion's marks: the elementwise groups') */
    CostDevice d;
    CostReport cm, co;
    cost_device_defaults(m, &d);
    cost_estimate(m, &d, &cm);
    cost_estimate(other, &d, &co);
    same = cm.kernels == co.kernels && cm.compute_s == co.compute_s;
  }
  free(x);
  free(y);
  return same;
}

void replan_fuse_noop_notes(Replan *r, Arena *a, const Module *m) {
  unsigned all = (1u << FUSE_COUNT) - 1;
  if (!r->no_fuse || r->target != TARGET_CUDA) return;
  if ((r->no_fuse & all) == all) {
    if (same_with_on(r, a, m, all)) note_at((SrcLoc){0}, "--no-fuse all: this plan has no fusion to turn off (its program is the same with them on)");
    return;
  }
  for (int k = 0; k < FUSE_COUNT; k++)
    if (r->no_fuse >> k & 1u && same_with_on(r, a, m, 1u << k))
      note_at((SrcLoc){0}, "--no-fuse %s: this plan has no %s fusion to turn off (its program is the same with it on)", fuse_off_name((FuseKind)k),
           fuse_off_name((FuseKind)k));
}
