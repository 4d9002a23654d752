/* passes/plan_search.c — the candidates, their order and their evaluation (see plan_search.h). */
#include "plan_search.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "diag.h"
#include "fit.h"
#include "mesh.h"
#include "print.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* CPU seconds this process and its waited-for children (the search's compiles) have run: the
 * budget's clock, since on a shared machine wall time measures the load as much as the work. */
static double cpu_s(void) {
  struct rusage self, kids;
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &kids);
  double s = 0;
  const struct timeval *tv[4] = {&self.ru_utime, &self.ru_stime, &kids.ru_utime, &kids.ru_stime};
  for (int i = 0; i < 4; i++) s += (double)tv[i]->tv_sec + 1e-6 * (double)tv[i]->tv_usec;
  return s;
}

const char *const plan_search_pin_keys[PIN_COUNT] = {"tp", "pp", "cp", "dp", "sp", "zero", "recompute", "micro_batch",
                                                     "schedule"};

static const char *const rec_names[] = {"none", "full", "selective"}; /* RecomputeKind order */
static const char *const sched_names[] = {"gpipe", "1f1b", "interleaved", "zb"};

/* Memory rank of a recompute mode: full keeps least, none most. */
static int rec_lean(RecomputeKind r) { return r == RECOMPUTE_FULL ? 0 : r == RECOMPUTE_SELECTIVE ? 1 : 2; }

int plan_cand_overrides(const PlanCand *c, char kv[SEARCH_KV][SEARCH_KV_LEN]) {
  int n = 0;
  snprintf(kv[n++], SEARCH_KV_LEN, "tp=%d", c->tp);
  snprintf(kv[n++], SEARCH_KV_LEN, "pp=%d", c->pp);
  snprintf(kv[n++], SEARCH_KV_LEN, "cp=%d", c->cp);
  snprintf(kv[n++], SEARCH_KV_LEN, "dp=%d", c->dp);
  snprintf(kv[n++], SEARCH_KV_LEN, "sp=%s", c->sp ? "on" : "off");
  snprintf(kv[n++], SEARCH_KV_LEN, "zero=%d", c->zero);
  snprintf(kv[n++], SEARCH_KV_LEN, "recompute=%s", rec_names[c->rec]);
  snprintf(kv[n++], SEARCH_KV_LEN, "micro_batch=%d", c->mb);
  snprintf(kv[n++], SEARCH_KV_LEN, "batch=%lld", (long long)c->mb * c->dp * c->accum); /* (the global batch) */
  if (c->pp > 1) snprintf(kv[n++], SEARCH_KV_LEN, "schedule=%s", sched_names[c->sched]);
  /* always: a file's own `pp N layers(..)` is not the candidate's (at pp 1, an error) */
  snprintf(kv[n++], SEARCH_KV_LEN, "pp_layers=%s", c->bal ? "balanced" : "even");
  return n;
}

void plan_cand_label(const PlanCand *c, char *buf, size_t cap) {
  static const char *const rec_short[] = {"none", "full", "sel"};
  int k = snprintf(buf, cap, "dp %d tp %d%s", c->dp, c->tp, c->sp ? "+sp" : "");
  if (c->pp > 1) k += snprintf(buf + k, cap > (size_t)k ? cap - (size_t)k : 0, " pp %d%s %s", c->pp, c->bal ? " bal" : "",
                               c->sched == SCHED_INTERLEAVED ? "int2" : sched_names[c->sched]);
  if (c->cp > 1) k += snprintf(buf + k, cap > (size_t)k ? cap - (size_t)k : 0, " cp %d", c->cp);
  snprintf(buf + k, cap > (size_t)k ? cap - (size_t)k : 0, " z%d rc %s mb %d", c->zero, rec_short[c->rec], c->mb);
}

/* ---- candidates -------------------------------------------------------------------- */

typedef struct {
  PlanCand *v;
  int n, cap;
} CandList;

static void push(CandList *l, const PlanCand *c) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 256;
    l->v = realloc(l->v, (size_t)l->cap * sizeof *l->v);
    if (!l->v) die("plan search: out of memory");
  }
  l->v[l->n++] = *c;
}

/* Every combination: degrees powers of two (tp inside a node, cp at most 8, pp at most 64), sp
 * on and off when tp > 1, with cp too (each cp rank's sequence split again over tp: sp has the
 * traffic of tp's all-reduces and less memory, so it goes first at equal estimates; sp off is there
 * for plans the compiler refuses sp in), zero up to 3 when dp > 1 (at least 1 under plan offload), the three recompute modes, micro-batches that divide the
 * global batch per replica, and with pp the schedules 1f1b, interleaved (2 chunks) and zb (gpipe
 * has 1f1b's bubble and more activations in flight: dominated). */
static void enumerate(const Module *base, int64_t global, const bool *pin, CandList *out) {
  const MeshMap *mm = base->mesh;
  const Plan *bp = &base->plan;
  int world = mm->world, dpn = mm->devices_per_node > 0 ? mm->devices_per_node : 1;
  int zlo = bp->offload ? 1 : 0; /* plan offload needs ZeRO (frontend/settings.c): at dp 1, zero 1 */
  for (int tp = 1; tp <= dpn && tp <= 64; tp *= 2) {
    if (world % tp || (pin[PIN_TP] && tp != mm->dim[RT_AX_TP])) continue;
    for (int pp = 1; pp <= 64 && world % (tp * pp) == 0; pp *= 2) {
      if (pin[PIN_PP] && pp != mm->dim[RT_AX_PP]) continue;
      for (int cp = 1; cp <= 8 && world % (tp * pp * cp) == 0; cp *= 2) {
        int dp = world / (tp * pp * cp);
        if ((pin[PIN_CP] && cp != mm->dim[RT_AX_CP]) || (pin[PIN_DP] && dp != mm->dim[RT_AX_DP])) continue;
        for (int mb = 1; mb <= global; mb *= 2) {
          if (global % ((int64_t)mb * dp) || (pin[PIN_MICRO] && mb != base->batch.micro)) continue;
          int64_t accum = global / ((int64_t)mb * dp);
          int nsched = pp > 1 ? 3 : 1;
          for (int sp = tp > 1; sp >= 0; sp--) { /* sp on first (sp off: where the compiler refuses it) */
            if (pin[PIN_SP] && sp != bp->sp) continue;
            for (int s = 0; s < nsched; s++)
              for (int zero = zlo; zero <= (dp > 1 ? 3 : zlo); zero++)
                for (int r = 0; r < 3; r++) {
                  static const PipeSchedule scheds[] = {SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB};
                  PlanCand c = {.tp = tp, .pp = pp, .cp = cp, .dp = dp, .zero = zero, .mb = mb, .accum = accum,
                                .sp = sp, .rec = (RecomputeKind)r, .v = 1};
                  c.sched = pp > 1 ? scheds[s] : SCHED_1F1B;
                  if (pin[PIN_SCHEDULE] && pp > 1) {
                    if (s) continue;
                    c.sched = bp->schedule;
                  }
                  if ((pin[PIN_ZERO] && zero != bp->zero) || (pin[PIN_RECOMPUTE] && c.rec != bp->recompute)) continue;
                  if (c.sched == SCHED_INTERLEAVED) c.v = bp->interleave > 1 && pin[PIN_SCHEDULE] ? bp->interleave : 2;
                  push(out, &c);
                }
          }
        }
      }
    }
  }
}

/* Best-first: those the analytic model fits, with those just over the capacity by it that it
 * predicts faster than its best fit (PlanCand.near), by its step, then the rest by their memory over
 * the capacity; at equal estimates the candidate that keeps least memory (so that one that does not
 * fit drops the ones it dominates before they are compiled). */
static int by_estimate(const void *pa, const void *pb) {
  const PlanCand *a = pa, *b = pb;
  bool fa = a->ana_fits || a->near, fb = b->ana_fits || b->near;
  if (fa != fb) return fa ? -1 : 1;
  if (!fa && a->ana.total != b->ana.total) return a->ana.total < b->ana.total ? -1 : 1;
  if (a->est_s < b->est_s * (1 - 1e-9)) return -1;
  if (b->est_s < a->est_s * (1 - 1e-9)) return 1;
  if (a->cp != b->cp) return a->cp - b->cp; /* ring attention's transfers: the last resort */
  if (a->sp != b->sp) return b->sp - a->sp;
  if (a->zero != b->zero) return b->zero - a->zero;
  if (a->mb != b->mb) return a->mb - b->mb;
  if (a->tp != b->tp) return b->tp - a->tp;
  return a->pp - b->pp;
}

/* c needs at least the memory of the compiled d, which did not fit: the same degrees and schedule,
 * no more ZeRO, no more recompute, no smaller micro-batch. */
static bool dominated_by(const PlanCand *c, const PlanCand *d) {
  return d->status == CAND_NOFIT && c->tp == d->tp && c->pp == d->pp && c->cp == d->cp && c->sp == d->sp &&
         c->sched == d->sched && c->bal == d->bal && c->zero <= d->zero && rec_lean(c->rec) >= rec_lean(d->rec) && c->mb >= d->mb;
}

void plan_cand_measure(const Module *m, const CostDevice *dev, PlanCand *c) {
  bool fits = fit_plan_fits(m, &c->mem_total, &c->capacity);
  memcpy(c->by_class, m->memplan->by_class, sizeof c->by_class);
  c->largest = memplan_largest_class(m->memplan);
  c->nstages = 0;
  int nv = m->mesh ? m->mesh->dim[RT_AX_PP] * (m->mesh->stage_chunks > 1 ? m->mesh->stage_chunks : 1) : 0;
  if (m->mesh && m->mesh->stage_rows[0] && nv <= (int)(sizeof c->stage_rows / sizeof c->stage_rows[0]))
    for (int k = 0; k < nv; k++) c->stage_rows[c->nstages++] = (short)m->mesh->stage_rows[k];
  cost_estimate(m, dev, &c->cost);
  c->status = fits ? CAND_FITS : CAND_NOFIT;
}

/* Evaluates the candidates idx[0..n) of v at once. */
static void evaluate(const CostDevice *dev, PlanEval eval, void *ctx, PlanCand *v, const int *idx,
                     int n, double limit_s) {
  PlanJob job[SEARCH_JOBS_MAX];
  for (int k = 0; k < n; k++) {
    PlanJob *j = &job[k];
    j->c = &v[idx[k]];
    j->n = plan_cand_overrides(j->c, j->buf);
    for (int i = 0; i < j->n; i++) j->kv[i] = j->buf[i];
    j->c->status = CAND_INVALID;
    j->c->err[0] = 0;
  }
  eval(ctx, dev, job, n, limit_s);
}

static int cmp_step(const void *pa, const void *pb, void *ctx) {
  const PlanCand *v = ctx;
  double a = v[*(const int *)pa].cost.step_s, b = v[*(const int *)pb].cost.step_s;
  return a < b ? -1 : a > b;
}

/* Insertion sort of the ranked indices by predicted step (few hundred at most). */
static void sort_ranked(int *idx, int n, const PlanCand *v) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && cmp_step(&idx[j], &idx[j - 1], (void *)v) < 0; j--) {
      int t = idx[j];
      idx[j] = idx[j - 1];
      idx[j - 1] = t;
    }
}

/* The compiler's refusals, learnt while searching. A refusal of a pipeline or a ring is usually
 * true of many candidates ("the 1f1b schedule needs at least pp = 4 micro-batches per step", the
 * same for pp 8): each message, its numbers taken out, keeps the knobs on which all the candidates it refused
 * agree (-1 where they differ); once it refused REFUSALS of them, a candidate of the same kind (pp > 1
 * or not, cp > 1 or not) that agrees with it on those knobs is not compiled. A compile over the time
 * limit (an unrolled schedule or ring of many micro-steps) does the same at once for its pp, cp and
 * sp degrees at as many micro-steps or more (fewer, from a larger micro-batch, compile faster), and
 * a second one at any count; three timeouts count as one message like any other. */
enum { REFUSALS = 3, PATTERNS = 64, NKNOB = 10 };
typedef struct {
  char msg[160];   /* numbers-free; "" for a timeout */
  bool pp1, cp1;   /* pp > 1, cp > 1 */
  int knob[NKNOB]; /* the agreed values (-1: they differ) */
  int refused;
  int64_t accum;   /* a timeout: the fewest micro-steps that took too long (fewer compile faster) */
} Pattern;

static void knobs(const PlanCand *c, int *k) {
  int v[NKNOB] = {c->tp, c->pp, c->cp, c->dp, c->sp, c->zero, (int)c->rec, c->mb, (int)c->sched, c->bal};
  memcpy(k, v, sizeof v);
}

static void shape_msg(char *out, size_t cap, const char *err) {
  size_t k = 0;
  for (const char *p = err; *p && k + 1 < cap; p++)
    if (!(*p >= '0' && *p <= '9')) out[k++] = *p;
  out[k] = 0;
}

static bool pattern_skips(const Pattern *pt, int n, const PlanCand *c) {
  int k[NKNOB];
  knobs(c, k);
  for (int i = 0; i < n; i++) {
    if (pt[i].refused < REFUSALS || pt[i].pp1 != (c->pp > 1) || pt[i].cp1 != (c->cp > 1)) continue;
    bool match = true;
    for (int j = 0; j < NKNOB && match; j++) match = pt[i].knob[j] < 0 || pt[i].knob[j] == k[j];
    if (match && (!pt[i].accum || c->accum >= pt[i].accum)) return true;
  }
  return false;
}

/* Learns c's refusal into the pattern of message msg; exact: a timeout's pattern of c's pp, cp and sp
 * degrees, refusing at once (at as many micro-steps or more; after a second, at any count). */
static void learn(Pattern *pt, int *n, const PlanCand *c, const char *msg, bool exact) {
  int k[NKNOB];
  knobs(c, k);
  int i = 0;
  while (i < *n && !(pt[i].pp1 == (c->pp > 1) && pt[i].cp1 == (c->cp > 1) && strcmp(pt[i].msg, msg) == 0 &&
                     (!exact || (pt[i].knob[1] == c->pp && pt[i].knob[2] == c->cp && pt[i].knob[4] == c->sp))))
    i++;
  bool created = i == *n;
  if (created) {
    if (*n == PATTERNS) return;
    Pattern *q = &pt[(*n)++];
    memset(q, 0, sizeof *q);
    snprintf(q->msg, sizeof q->msg, "%s", msg);
    q->pp1 = c->pp > 1, q->cp1 = c->cp > 1;
    memcpy(q->knob, k, sizeof k);
    if (exact) {
      for (int j = 0; j < NKNOB; j++)
        if (j != 1 && j != 2 && j != 4) q->knob[j] = -1;
      q->refused = REFUSALS;
      q->accum = c->accum;
      return;
    }
  }
  Pattern *q = &pt[i];
  for (int j = 0; j < NKNOB; j++)
    if (q->knob[j] != k[j]) q->knob[j] = -1;
  if (exact) q->accum = 0; /* a second timeout: at every micro-step count */
  else q->refused++;
}

/* A refusal: by its message, numbers aside; a timeout for its degrees at once, and like a message
 * ("over the time limit") for candidates like it after three. */
static void pattern_learn(Pattern *pt, int *n, const PlanCand *c) {
  if (c->timed_out) {
    learn(pt, n, c, "", true);
    learn(pt, n, c, "(over the time limit)", false);
    return;
  }
  char msg[160];
  shape_msg(msg, sizeof msg, c->err);
  learn(pt, n, c, msg, false);
}

/* Logical bytes of the PARAM (state: STATE) values of m: local bytes times the degrees of the axes
 * that split them (passes/storage.c's checkpoint counts the same values). */
static double logical_bytes(const Module *m, OpKind op) {
  const Graph *g = m->graph;
  double sum = 0, rows = 0, layers = 0; /* uneven stages: the stacks' logical rows (padded) and the layers */
  if (m->mesh && m->mesh->stage_rows[0]) {
    int pp = m->mesh->dim[RT_AX_PP], ch = m->mesh->stage_chunks > 1 ? m->mesh->stage_chunks : 1, cnt[RT_MAX_STAGES];
    for (int k = 0; k < pp * ch && k < RT_MAX_STAGES; k++) layers += cnt[k] = m->mesh->stage_rows[k];
    rows = (double)rt_stage_local_rows(cnt, pp, ch) * pp;
  }
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    /* (a weight's persistent bf16 copy, passes/wshadow.c, is no optimizer state: the model counts the
     * per-layer casts a plan falls back to where the copies do not fit) */
    if (n->op != op || (op == OP_STATE && ir_copy_source(n->a.name))) continue;
    const Value *v = n->out[0];
    double b = (double)ir_numel(&v->shape) * ir_dtype_size(v->dtype);
    for (int d = 0; d < v->shape.rank; d++) b *= ir_dim_degree(&v->sharding, d, m->mesh);
    if (rows > 0 && v->shape.rank >= 2 && (double)v->shape.dim[0] * ir_dim_degree(&v->sharding, 0, m->mesh) == rows)
      b *= layers / rows; /* (a layer stack: its padding is no parameter) */
    sum += b;
  }
  return sum;
}

/* A lower bound of c's persistent bytes per rank: every parameter and state byte is held by some
 * rank of each tp x pp group (split at most tp x pp ways), and ZeRO splits the state (1, 2) and the
 * parameters too (3) at most dp ways more (dp x cp under cp); the parameters' device share as
 * plan_param_share has it (the bf16 copies beside split or host masters). */
static double memory_bound(const Module *base, const SearchResult *r, PlanCand *c) {
  double split = (double)c->tp * c->pp;
  double zg = plan_zero_group(c);
  bool persistent; /* (auto: the smaller of the two variants, so the bound stays below either) */
  double share = plan_param_share(base, c, base->recipe.precision == PREC_BF16 ? 2 : 4, &persistent);
  c->bound_pshare = share * (c->zero >= 3 ? zg : 1); /* (per the parameters over tp x pp) */
  return r->param_bytes * share / split + r->state_bytes / (split * (c->zero >= 1 ? zg : 1));
}

/* The analytic model's memory error band: its memory (times ana_frag) is held to the capacity with
 * this much over it still compiled, and a candidate over the capacity by at most this much that the
 * model predicts faster than its best fit is confirmed by compiling (PlanCand.near), since the compiled
 * plan may fit. 15 %: the analytic memory has been seen 0.92-1.10 of the compiled peak (GPT-3 175B at
 * pp 8-32 1.03-1.07, tiny's uneven stages 0.92-0.97, Llama-3-405B 0.90-1.06, Meta's plan 1.00:
 * docs/planner.md) and the packing's fragmentation beyond ana_frag's mean up to 1.116 (below);
 * tests/report/planner.sh holds the model to 15 % of the compiled plans of GPT-2 and tiny, and the
 * analytic rows mark a ratio past it with `!`. */
#define ANA_MEM_TOL 0.15
#define FIRST_COMPILE_S 60.0 /* CPU seconds the default budget's compiles may take, while none fits, past it (plan_search) */
/* The memory plan's allocation over its peak (memplan_pack: the smallest of a few greedy packings) that
 * the analytic memory is taken to: its mean over bench/plan_peaks.sh's plans with figures (2026-11-27,
 * docs/planner.md "The fragmentation allowance"): without pp 16 plans, mean 1.0025 (median 1.000,
 * largest 1.030, Llama-3-8B tp 8 ZeRO-3 on 16384 ranks); under pp (every rank's values and each stage's
 * own packed into one allocation) 25 plans, mean 1.011 (median 1.000; Llama-3-405B's pp 2 interleaved
 * ZeRO-3 plans 1.041 and 1.055, GPT-2 124M's pp 4 zb z1 1.116, a 2.6 GiB plan). The mean, not the
 * largest: the expected allocation of a plan whose peak the model gives (Meta's 405B plan: 78.3 GiB by
 * the model, compiled 78.2 at 1.000 x its peak, fits; x 1.07, the largest but GPT-2's, it was over the
 * 80 GiB); the plans past it are the error band's (ANA_MEM_TOL), and the compile confirms. */
static double ana_frag(const PlanCand *c) { return plan_ana_frag(c->pp); }

void plan_search(const Module *base, const CostDevice *dev, PlanEval eval, void *ctx, const SearchOptions *o,
                 SearchResult *r) {
  memset(r, 0, sizeof *r);
  r->dev = *dev;
  r->closest = -1;
  double t0 = now_s(), c0 = cpu_s(), budget = o && o->budget_s > 0 ? o->budget_s : 8.0;
  int keep = o && o->top > 0 ? o->top : 10;
  CandList l = {0};
  bool nopin[PIN_COUNT] = {0};
  r->global = o && o->global > 0 ? o->global : base->batch.global;
  enumerate(base, r->global, o ? o->pinned : nopin, &l);
  r->cand = l.v;
  r->n = l.n;
  r->param_bytes = logical_bytes(base, OP_PARAM);
  r->state_bytes = base->plan.offload ? 0 : logical_bytes(base, OP_STATE); /* offload: the state is the host's */
  char what[128];
  r->capacity = memplan_capacity(base, what, sizeof what);
  /* every candidate through the analytic model: its memory and step, no compile */
  plan_model_init_at(&r->model, base, o ? o->fewer : NULL, r->global / (base->batch.global / base->batch.accum), dev);
  /* candidates whose stages (pp x interleaved chunks) do not divide the layers: `layers(balanced)`
   * (passes/pipe_balance.c); dropped: more stages than layers, or uneven ones over SEARCH_UNEVEN_MAX
   * (GPT-3's pp 64 on 96 layers, its schedules played at hundreds of micro-batches, took the analytic
   * ranking from 2 to 9 CPU s), interleaved ones whose micro-batches are not a multiple of
   * pp (the schedule goes in groups of pp) */
  int kept = 0;
  for (int i = 0; i < l.n; i++) {
    PlanCand c = l.v[i];
    int nv = c.pp * (c.sched == SCHED_INTERLEAVED ? c.v : 1);
    if (c.sched == SCHED_INTERLEAVED && c.accum % c.pp) continue;
    if (c.pp > 1 && r->model.layers % nv) {
      if (nv > r->model.layers || nv > SEARCH_UNEVEN_MAX) continue;
      c.bal = true;
    }
    l.v[kept++] = c;
  }
  r->indivisible = l.n - kept;
  l.n = kept;
  /* where the stages divide the layers, the balanced split too where it beats the even one (the plan's
   * suggestion, pipe_balance_better, on the analytic figures: plan_model_balance) */
  int n0 = l.n;
  for (int i = 0; i < n0; i++) {
    PlanCand *c = &l.v[i];
    plan_model_estimate(&r->model, base, dev, c, &c->ana);
    int64_t split[RT_MAX_STAGES];
    bool better;
    if (c->pp > 1 && !c->bal && plan_model_balance(&r->model, c, &c->ana, split, &better) && better) {
      PlanCand b = *c;
      b.bal = true;
      push(&l, &b); /* (may move l.v) */
    }
  }
  for (int i = 0; i < l.n; i++) r->balanced += l.v[i].bal;
  r->cand = l.v;
  r->n = l.n;
  for (int i = 0; i < l.n; i++) {
    PlanCand *c = &l.v[i];
    if (i >= n0) plan_model_estimate(&r->model, base, dev, c, &c->ana);
    c->est_s = c->ana.step_s;
    c->ana_fits = r->capacity <= 0 || c->ana.total * ana_frag(c) <= r->capacity;
    r->ana_fit += c->ana_fits;
    c->bound = memory_bound(base, r, c);
  }
  /* just over the capacity by the model (within its band) and faster than the best it fits: the
   * compile decides (with no analytic fit at all, the closest is compiled instead) */
  double best_fit = -1;
  for (int i = 0; i < l.n; i++)
    if (l.v[i].ana_fits && (best_fit < 0 || l.v[i].est_s < best_fit)) best_fit = l.v[i].est_s;
  for (int i = 0; i < l.n && best_fit > 0 && r->capacity > 0; i++) {
    PlanCand *c = &l.v[i];
    c->near = !c->ana_fits && c->est_s < best_fit && c->bound <= r->capacity &&
              c->ana.total * ana_frag(c) <= r->capacity * (1 + ANA_MEM_TOL);
    r->near += c->near;
  }
  qsort(l.v, (size_t)l.n, sizeof *l.v, by_estimate);
  /* the analytic best fit still goes first (compiled alone, it may take the whole budget: what the
   * model fits is the likelier plan), the candidates just over the capacity faster than it after it */
  int f0 = 0;
  while (f0 < l.n && !l.v[f0].ana_fits) f0++;
  if (f0 > 0 && f0 < l.n) {
    PlanCand b = l.v[f0];
    memmove(l.v + 1, l.v, (size_t)f0 * sizeof *l.v);
    l.v[0] = b;
  }
  r->analytic_s = now_s() - t0;
  if (!r->ana_fit && l.n) r->closest = 0; /* sorted: the least analytic memory first */
  int jobs = o && o->jobs > 1 ? (o->jobs < SEARCH_JOBS_MAX ? o->jobs : SEARCH_JOBS_MAX) : 1, batch[SEARCH_JOBS_MAX];
  int confirm = o && o->confirm > 0 ? o->confirm : keep + 2 * jobs;
  r->rank = malloc(((size_t)l.n + 1) * sizeof *r->rank);
  int *nofit = malloc(((size_t)l.n + 1) * sizeof *nofit), nnofit = 0; /* compiled, not fitting */
  Pattern pat[PATTERNS];
  int npat = 0;
  if (!r->rank || !nofit) die("plan search: out of memory");
  /* with the default budget, the analytic best (compiled first, alone) may run to its end, and while no compiled
   * candidate fits, the next ones after it, one at a time, FIRST_COMPILE_S of CPU time in all: a search that names
   * no plan because that compile outgrew what the analytic ranking left of 8 s (GPT-3's pp 16 schedule, 6-8 CPU s
   * on a loaded machine), or because the analytic best did not fit as compiled (Llama-3-405B's `pp 32 bal zb cp 2
   * mb 1`, 33 CPU s, 0.81 of its compiled memory by the model: docs/planner.md), helps no one; a budget given with
   * --budget is kept to */
  bool deflt = !(o && (o->budget_s > 0 || o->compile_limit_s > 0));
  double grace_s = 0; /* CPU seconds those compiles took */
  for (int i = 0; i < l.n;) {
    bool grace = deflt && r->nranked == 0 && grace_s < FIRST_COMPILE_S;
    /* the next `jobs` candidates worth compiling, by what is known so far; the analytic best alone
     * first (unless the compile limit is given), so that it may take the whole budget */
    int nb = 0, want = (r->compiled == 0 || grace) && !(o && o->compile_limit_s > 0) ? 1 : jobs;
    if (!(o && o->compile_limit_s > 0) && !grace) { /* no more compiles than the budget left gives a second each
                                           * (each gets at least one: 4 on 2 s left overran it by 2 s) */
      double left0 = budget - (cpu_s() - c0);
      int most = left0 > 1 ? (int)left0 : 1;
      if (want > most) want = most;
    }
    for (; i < l.n && nb < want; i++) {
      PlanCand *c = &l.v[i];
      if (r->capacity > 0 && c->bound > r->capacity) {
        c->status = CAND_BOUND;
        r->bound++;
        continue;
      }
      /* over the capacity by the analytic model, past its tolerance: not compiled (with no analytic
       * fit at all, the closest is compiled to show what the compiler makes of it) */
      if (r->capacity > 0 && c->ana.total * ana_frag(c) > r->capacity * (1 + ANA_MEM_TOL) && i != r->closest) {
        c->status = CAND_ANALYTIC;
        r->ana_over++;
        continue;
      }
      /* the confirmation's end: enough compiled, or the table full and no analytic step left that
       * could enter it (within the model's time tolerance) */
      if (r->compiled + nb >= confirm ||
          (r->nranked >= keep && c->est_s * 0.7 > l.v[r->rank[keep - 1]].cost.step_s)) {
        c->status = CAND_UNSEEN;
        continue;
      }
      if (pattern_skips(pat, npat, c)) {
        c->status = CAND_SLOW;
        r->slow++;
        continue;
      }
      bool dom = false;
      for (int j = 0; j < nnofit && !dom; j++) dom = dominated_by(c, &l.v[nofit[j]]);
      if (dom) {
        c->status = CAND_DOMINATED;
        r->dominated++;
        continue;
      }
      if (cpu_s() - c0 > budget && !grace) {
        r->budget_hit = true;
        c->status = CAND_UNSEEN;
        continue;
      }
      batch[nb++] = i;
    }
    if (!nb) continue;
    /* each compile of the batch may take its share of the budget left (at least a second): the
     * analytic best, first, gets most (an unrolled pp 32 schedule of GPT-3 takes a few CPU seconds) */
    double left = budget - (cpu_s() - c0);
    double limit = o && o->compile_limit_s > 0 ? o->compile_limit_s : left / nb > 1 ? left / nb : 1;
    if (grace && limit < FIRST_COMPILE_S - grace_s) limit = FIRST_COMPILE_S - grace_s; /* (above) */
    double e0 = cpu_s();
    evaluate(dev, eval, ctx, l.v, batch, nb, limit);
    if (grace) grace_s += cpu_s() - e0;
    for (int k = 0; k < nb; k++) {
      PlanCand *c = &l.v[batch[k]];
      r->compiled++;
      if (c->status == CAND_INVALID) {
        r->invalid++;
        pattern_learn(pat, &npat, c);
      }
      if (c->status == CAND_FITS || c->status == CAND_NOFIT)
        r->bound_broken += c->mem_total < c->bound; /* the bound must hold for every compiled plan */
      if (c->status == CAND_NOFIT) {
        r->nofit++;
        nofit[nnofit++] = batch[k];
      } else if (c->status == CAND_FITS) {
        r->rank[r->nranked++] = batch[k];
        sort_ranked(r->rank, r->nranked, l.v);
      }
    }
  }
  free(nofit);
  for (int i = 0; i < l.n; i++) r->unseen += l.v[i].status == CAND_UNSEEN;
  r->seconds = now_s() - t0;
  r->cpu_seconds = cpu_s() - c0;
}

void plan_search_free(SearchResult *r) {
  plan_model_free(&r->model);
  free(r->cand);
  free(r->rank);
  memset(r, 0, sizeof *r);
}
