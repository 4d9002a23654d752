/* passes/fit.c — the fit check and its knobs (see fit.h). */
#include "fit.h"

#include <stdio.h>
#include <string.h>

#include "cost.h"
#include "diag.h"
#include "memplan.h"
#include "pipe_sched.h"
#include "plan_options.h"

enum { KNOB_KV = 6, KV_LEN = 48 };

/* The -D overrides of one knob applied to m, and its label; returns false when the knob does not
 * apply to this plan (tp already the world, micro_batch 1, ...). */
typedef bool (*KnobMake)(const Module *m, int arg, char kv[KNOB_KV][KV_LEN], int *n, char *label, size_t cap);

typedef struct {
  KnobMake make;
  int arg;      /* the knob's parameter: a factor, a stage, a mode */
  PlanOpt opt;  /* the plan option it needs applied (PLAN_OPT_COUNT: none) */
} Knob;

/* What a knob that changes dp does to the batch: with a recipe `batch`, the global batch stays and
 * the accumulation steps change (passes/accum.c); without one, the global batch follows dp. */
static void keep_batch(const Module *m, int dp, char kv[KNOB_KV][KV_LEN], int *n, char *note, size_t cap) {
  (void)kv, (void)n;
  note[0] = 0;
  if (dp == m->mesh->dim[RT_AX_DP]) return;
  if (m->recipe.batch > 0)
    snprintf(note, cap, ", %lld accumulation steps", (long long)(m->batch.global / (m->batch.micro * dp)));
  else
    snprintf(note, cap, ", global batch %lld", (long long)(m->batch.micro * dp));
}

static bool knob_tp(const Module *m, int f, char kv[KNOB_KV][KV_LEN], int *n, char *label, size_t cap) {
  int tp = m->mesh->dim[RT_AX_TP] * f, world = m->mesh->world, rest = m->mesh->dim[RT_AX_PP] * m->mesh->dim[RT_AX_CP];
  if (tp * rest > world || world % (tp * rest) != 0) return false;
  int dp = world / (tp * rest);
  bool cross = tp > m->mesh->devices_per_node;
  char bn[48];
  snprintf(kv[(*n)++], KV_LEN, "tp=%d", tp);
  snprintf(kv[(*n)++], KV_LEN, "dp=auto");
  if (cross) snprintf(kv[(*n)++], KV_LEN, "cross_node_tp=on");
  keep_batch(m, dp, kv, n, bn, sizeof bn);
  snprintf(label, cap, "-D tp=%d%s (dp %d%s%s)", tp, cross ? " -D cross_node_tp=on" : "", dp,
           cross ? ", tp groups across nodes" : "", bn);
  return true;
}

static bool knob_sp(const Module *m, int arg, char kv[KNOB_KV][KV_LEN], int *n, char *label, size_t cap) {
  (void)arg;
  if (m->plan.sp || m->mesh->dim[RT_AX_TP] < 2) return false;
  snprintf(kv[(*n)++], KV_LEN, "sp=on");
  snprintf(label, cap, "-D sp=on (sequence parallel norms and activations)");
  return true;
}

static bool knob_micro(const Module *m, int f, char kv[KNOB_KV][KV_LEN], int *n, char *label, size_t cap) {
  if (m->batch.micro % f != 0 || m->recipe.batch <= 0) return false; /* no `batch`: it would shrink */
  snprintf(kv[(*n)++], KV_LEN, "micro_batch=%lld", (long long)(m->batch.micro / f));
  snprintf(label, cap, "-D micro_batch=%lld (%lld accumulation steps)", (long long)(m->batch.micro / f),
           (long long)(m->batch.accum * f));
  return true;
}

static bool knob_zero(const Module *m, int stage, char kv[KNOB_KV][KV_LEN], int *n, char *label, size_t cap) {
  if (m->plan.zero >= stage || m->mesh->dim[RT_AX_DP] < 2) return false;
  snprintf(kv[(*n)++], KV_LEN, "zero=%d", stage);
  snprintf(label, cap, "-D zero=%d", stage);
  return true;
}

static bool knob_recompute(const Module *m, int mode, char kv[KNOB_KV][KV_LEN], int *n, char *label, size_t cap) {
  static const char *const names[] = {"none", "full", "selective"}; /* RecomputeKind order */
  if ((int)m->plan.recompute == mode) return false;
  snprintf(kv[(*n)++], KV_LEN, "recompute=%s", names[mode]);
  snprintf(label, cap, "-D recompute=%s", names[mode]);
  return true;
}

static bool knob_pp(const Module *m, int f, char kv[KNOB_KV][KV_LEN], int *n, char *label, size_t cap) {
  int pp = m->mesh->dim[RT_AX_PP] * f, world = m->mesh->world, rest = m->mesh->dim[RT_AX_TP] * m->mesh->dim[RT_AX_CP];
  if (pp * rest > world || world % (pp * rest) != 0) return false;
  int dp = world / (pp * rest);
  int64_t accum = m->recipe.batch > 0 ? m->batch.global / (m->batch.micro * dp) : m->batch.accum;
  bool gpipe = m->plan.schedule == SCHED_1F1B && accum < pp; /* 1F1B needs pp micro-batches: keep the batch */
  char bn[48];
  snprintf(kv[(*n)++], KV_LEN, "pp=%d", pp);
  snprintf(kv[(*n)++], KV_LEN, "dp=auto");
  if (gpipe) snprintf(kv[(*n)++], KV_LEN, "schedule=gpipe");
  keep_batch(m, dp, kv, n, bn, sizeof bn);
  snprintf(label, cap, "-D pp=%d%s (dp %d%s)", pp, gpipe ? " -D schedule=gpipe" : "", dp, bn);
  return true;
}

static bool knob_offload(const Module *m, int arg, char kv[KNOB_KV][KV_LEN], int *n, char *label, size_t cap) {
  (void)arg;
  if (m->plan.offload) return false;
  snprintf(kv[(*n)++], KV_LEN, "offload=on");
  snprintf(label, cap, "-D offload=on");
  return true;
}

/* The backward loops' deferred scatter waits (passes/zero_defer.c), where the plan took them without
 * the driver's measure (`defer_waits on`: `auto` waits them in their iteration where they do not fit). */
static bool knob_defer(const Module *m, int arg, char kv[KNOB_KV][KV_LEN], int *n, char *label, size_t cap) {
  (void)arg;
  if (!m->defer.taken) return false;
  snprintf(kv[(*n)++], KV_LEN, "defer_waits=off");
  snprintf(label, cap, "-D defer_waits=off");
  return true;
}

/* zb's W hold dropped (arg 0), or kept for the last half of each stage's layers only (arg 2: hold(N)). */
static bool knob_zbw(const Module *m, int arg, char kv[KNOB_KV][KV_LEN], int *n, char *label, size_t cap) {
  if (!m->zbw.held || m->zbw.bytes <= 0) return false;
  if (arg == 2) {
    int half = m->zbw.stage_layers / 2;
    if (m->zbw.layers > 0 || half < 1) return false;
    snprintf(kv[(*n)++], KV_LEN, "zb_w=hold:%d", half);
    snprintf(label, cap, "-D zb_w=hold:%d (the hold for the last %d of each stage's %d layers)", half, half, m->zbw.stage_layers);
    return true;
  }
  snprintf(kv[(*n)++], KV_LEN, "zb_w=recompute");
  snprintf(label, cap, "-D zb_w=recompute");
  return true;
}

/* The knobs, in the order they are offered: add a row when a pass gives the plan a new way down. */
static const Knob knobs[] = {
    {knob_zero, 1, PLAN_OPT_ZERO},          {knob_zero, 2, PLAN_OPT_ZERO},
    {knob_zero, 3, PLAN_OPT_ZERO},          {knob_recompute, RECOMPUTE_SELECTIVE, PLAN_OPT_RECOMPUTE},
    {knob_recompute, RECOMPUTE_FULL, PLAN_OPT_RECOMPUTE},
    {knob_offload, 0, PLAN_OPT_OFFLOAD},    {knob_sp, 0, PLAN_OPT_COUNT},
    {knob_tp, 2, PLAN_OPT_COUNT},           {knob_tp, 4, PLAN_OPT_COUNT},
    {knob_tp, 8, PLAN_OPT_COUNT},           {knob_pp, 2, PLAN_OPT_PP},
    {knob_pp, 4, PLAN_OPT_PP},              {knob_micro, 2, PLAN_OPT_COUNT},
    {knob_micro, 4, PLAN_OPT_COUNT},        {knob_defer, 0, PLAN_OPT_DEFER_WAITS},
    {knob_zbw, 2, PLAN_OPT_ZB_W},           {knob_zbw, 0, PLAN_OPT_ZB_W},
};

static void mib(char *buf, size_t cap, double bytes) {
  /* thousands separators: 352,072 MiB */
  char raw[32];
  double mb = bytes / (1 << 20);
  if (mb < 1024) { /* small plans: one decimal */
    snprintf(buf, cap, "%.1f MiB", mb);
    return;
  }
  snprintf(raw, sizeof raw, "%.0f", mb);
  size_t len = strlen(raw), k = 0;
  for (size_t i = 0; i < len && k + 2 < cap; i++) {
    if (i > 0 && (len - i) % 3 == 0) buf[k++] = ',';
    buf[k++] = raw[i];
  }
  snprintf(buf + k, cap - k, " MiB");
}

/* A host allocation (plan offload) times the ranks of a node within the node's host memory. */
static bool host_fits(const Module *m) {
  const MemPlan *p = m->memplan;
  const Topology *topo = &m->topo;
  return !p || p->host_total <= 0 || !m->has_topology || topo->host_memory <= 0 || topo->devices_per_node <= 0 ||
         (double)p->host_total * topo->devices_per_node <= topo->host_memory;
}

const char *fit_share(char *buf, size_t n, double used, double cap) {
  double pct = cap > 0 ? 100.0 * used / cap : 0;
  if (pct > 0 && pct < 1) snprintf(buf, n, "<1%%");
  else if (pct >= 99 && pct < 101 && pct != 100) snprintf(buf, n, "%.1f%%", pct);
  else snprintf(buf, n, "%.0f%%", pct);
  return buf;
}

bool fit_plan_fits(const Module *m, double *total, double *capacity) {
  const MemPlan *p = m->memplan;
  char capname[96];
  double dev = memplan_capacity(m, capname, sizeof capname);
  if (total) *total = p ? (double)p->total : 0;
  if (capacity) *capacity = dev;
  if (!host_fits(m)) return false;
  return !p || dev <= 0 || !m->mesh || (double)p->total <= dev;
}

bool fit_target_gpus_unused(const Module *m, bool given) {
  return !given && m->target == TARGET_CPU && m->has_topology && !m->topo.cpu_only;
}

const char *fit_target_why(const Module *m, bool given, char *buf, size_t n) {
  const Topology *t = &m->topo;
  if (given)
    snprintf(buf, n, "given with --target");
  else if (fit_target_gpus_unused(m, given))
    snprintf(buf, n, "the default, not topology `%s`'s GPUs (%s): --target cuda plans and builds for them",
             t->name ? t->name : "?", t->device ? t->device : "?");
  else if (m->has_topology)
    snprintf(buf, n, "the default; topology `%s`'s ranks are CPU processes", t->name ? t->name : "?");
  else
    snprintf(buf, n, "the default (no topology)");
  return buf;
}

void fit_note_target(const Module *m) {
  const Topology *t = &m->topo;
  if (m->target != TARGET_CUDA || !m->has_topology || !t->cpu_only) return;
  CostDevice dev; /* the cost model's figures, as it takes them */
  cost_device_defaults(m, &dev);
  bool gib = t->device_memory >= (1 << 30);
  note_at(t->loc,
          "topology `%s` has no GPU (`cpu x %d`): this --target cuda plan's fit check and cost model use its CPU's "
          "figures (%.3g %s of memory and %.3g GFLOPS per rank); the trainer allocates on the GPU it finds at start and "
          "checks the plan against that GPU's free memory there (SHARDRT_DEVICE=emu: host memory, or "
          "SHARDRT_EMU_MEMORY)",
          t->name, t->devices_per_node, t->device_memory / (gib ? 1 << 30 : 1 << 20), gib ? "GiB" : "MiB",
          dev.peak_flops / 1e9);
  note("to plan for a GPU, give its topology: --topology models/topo/h200-x1.topo (one H200), p4d-x1.topo (8 A100s), "
       "... (models/topo/)");
}

bool fit_check(const Module *m, FitReplan replan, void *ctx) {
  const MemPlan *p = m->memplan;
  char capname[96];
  double dev = memplan_capacity(m, capname, sizeof capname);
  if (!host_fits(m)) { /* plan offload: the node's host memory */
    const Topology *topo = &m->topo;
    char hb[32], nb[32], cb[32];
    mib(hb, sizeof hb, (double)p->host_total);
    mib(nb, sizeof nb, (double)p->host_total * topo->devices_per_node);
    mib(cb, sizeof cb, topo->host_memory);
    error_at(m->plan.opt_loc[PLAN_OPT_OFFLOAD].file ? m->plan.opt_loc[PLAN_OPT_OFFLOAD] : m->plan.loc,
             "offload does not fit the host: %s per rank x %d ranks per node = %s, over the node's host memory of %s", hb,
             topo->devices_per_node, nb, cb);
    note("a higher zero stage or more dp splits the optimizer state over more ranks; `offload off` keeps it on the device");
    return false;
  }
  if (fit_plan_fits(m, NULL, NULL)) return true;
  if (diag_errors()) die("fit_check: called on a module with errors");
  /* plan the knobs first (re-planning reports nothing and needs a clean error count) */
  enum { MAXNOTES = 24 };
  char notes[MAXNOTES][224];
  int nnotes = 0;
  char later[256] = "";
  size_t lk = 0;
  bool tp_fits = false; /* the tp rows stop at the first that fits */
  for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++) {
    const Knob *k = &knobs[i];
    char kv[KNOB_KV][KV_LEN], label[160];
    int n = 0;
    if (k->make == knob_tp && tp_fits) continue;
    if (!k->make(m, k->arg, kv, &n, label, sizeof label)) continue;
    if ((k->opt < PLAN_OPT_COUNT && !ir_plan_opt_applied(k->opt))) {
      /* named once per kind, not planned: no pass applies it yet */
      const char *name = label + 3;
      char word[64];
      snprintf(word, sizeof word, "%.*s", (int)strcspn(name, "="), name);
      if (!strstr(later, word) && lk + strlen(word) + 3 < sizeof later)
        lk += (size_t)snprintf(later + lk, sizeof later - lk, "%s%s", lk ? ", " : "", word);
      continue;
    }
    const char *kvp[KNOB_KV];
    for (int j = 0; j < n; j++) kvp[j] = kv[j];
    int64_t t = replan(ctx, kvp, n);
    /* not valid, or no better: under 1% less is no knob (the peak is where that knob does not reach) */
    if (t < 0 || t > p->total - p->total / 100 || nnotes == MAXNOTES) continue;
    char tb[32];
    mib(tb, sizeof tb, (double)t);
    snprintf(notes[nnotes++], sizeof notes[0], "%s: %s per rank, %s", label, tb, (double)t <= dev ? "fits" : "does not fit");
    if (k->make == knob_tp && (double)t <= dev) tp_fits = true;
  }

  char tot[32], dv[32], big[32];
  MemClass lc = memplan_largest_class(p);
  mib(tot, sizeof tot, (double)p->total);
  mib(dv, sizeof dv, dev);
  mib(big, sizeof big, (double)p->by_class[lc]);
  if (m->plan.loc.file)
    error_at(m->plan.loc, "the plan does not fit: %s per rank, over the %s of %s", tot, capname, dv);
  else
    error_plain("the plan does not fit: %s per rank, over the %s of %s", tot, capname, dv);
  note("the largest class is %s: %s (shardc plan prints every class)", memplan_class_labels[lc], big);
  const PipeBalance *pb = m->plan.stage_balanced ? m->pipe_balance : NULL;
  if (pb && pb->fixed && pb->split) /* `layers(balanced)` against the device's memory (passes/pipe_balance.c) */
    note(pb->fits ? "`layers(balanced)`: the split it took fits every stage by the time-balanced split's memory plan, "
                    "not as compiled (shardc plan prints both)"
                  : "`layers(balanced)`: no split of the layers over the %sstages fits every stage by the time-balanced "
                    "split's memory plan: the split by time kept (shardc plan prints it)",
         pb->chunks > 1 ? "virtual " : "");
  if (nnotes) note("knobs that bring it down, each planned again with that change:");
  for (int i = 0; i < nnotes; i++) note("  %s", notes[i]);
  if (!nnotes) note("no knob the compiler applies today brings this plan's memory down");
  if (lk) note("not implemented yet, so not planned: %s (ir/plan_options.c)", later);
  return false;
}

const char *fit_auto_kept(Module *m, unsigned kept) {
  static const char *const name[3] = {"the persistent weight copies", "the deferred waits", "the zb W hold"};
  const char *s = NULL;
  for (int k = 0; k < 3; k++)
    if (kept >> k & 1u) s = s ? arena_printf(m->arena, "%s and %s", s, name[k]) : name[k];
  return s ? s : "the others";
}

const char *fit_auto_why(Module *m, FitFigure f, const char *over, const char *alone, const char *with) {
  const double mib = 1 << 20;
  unsigned kept = m->plan.fit.kept;
  if (fit_figure_over((double)f.total, f.cap))
    return arena_printf(m->arena, "the plan with %s needs %.1f MiB per rank, over the device's %.1f MiB", over,
                        (double)f.total / mib, f.cap / mib);
  if (f.lost)
    return arena_printf(m->arena, "%s alone: %.1f MiB per rank planned with %s, of the device's %.1f MiB; not with %s "
                        "too, which %s the cost model has faster", alone, (double)f.total / mib, with, f.cap / mib,
                        fit_auto_kept(m, kept), kept & (kept - 1) ? "together" : "alone");
  if (f.total > 0)
    return arena_printf(m->arena, "it fits: %.1f MiB per rank planned with %s, of the device's %.1f MiB",
                        (double)f.total / mib, with, f.cap / mib);
  return "auto (no device memory to check it against)";
}
