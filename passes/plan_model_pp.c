/* passes/plan_model_pp.c — the plan model's pipeline schedules: the lists the pipe pass makes,
 * played with a candidate's stage times (its bubble and span), and their loads in flight; zb's
 * hand-off from B to W; the balanced split of the layers over the stages (plan_model_balance). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "plan_model_int.h"
#include "plan_search.h"

/* ---- the pipeline's memory in flight, from the schedule the compiler unrolls ----------------
 * passes/pipe.c runs the schedule's instructions in pipe_sched_check's order; each stage's
 * backward loops (zb: W's) add its layer gradients of micro-batch i to its running sums layer by
 * layer (passes/pipe_fold.c: no stage gradient held between instructions), an untied head's and
 * embedding's gradients are added to their stage's sums as the F or B making them has run (pp_grads_held),
 * and every rank merges the rest of i (a tied table's two parts) once every stage has run its
 * instructions of i. Until then a stage holds, per micro-batch (chunk): the activations its forward
 * kept for its backward (F .. B; zb: .. W), and every rank a tied table's gradient ([vocab / tp, d]:
 * from the last stage's F, the first stage's B, .. the merge), under zb what B keeps for W. A profile
 * is the Pareto set of (activation chunks, B's awaiting W, head/embedding gradients, the last stage's F
 * just run) over every stage and position: a candidate's peak is the most of their weighted sums
 * (GPT-3 at pp 16, 1f1b: the last stage held 7 micro-batches' layer gradients when the stages
 * merged together, 1 when each merged its own, none inside its loops). */
/* (the types: plan_model_int.h) */

/* A stage's Pareto set of loads (each stage's kept apart: under uneven stages each is priced with its
 * own layers). */
typedef struct {
  PpLoad *v;
  int n, cap;
} LoadSet;

static bool chunks_ge(const PpLoad *x, const PpLoad *y) {
  for (int c = 0; c < PIPE_LOAD_CHUNKS; c++)
    if (x->ac[c] < y->ac[c]) return false;
  return true;
}

static void pareto_add(LoadSet *p, PpLoad x) {
  for (int i = p->n - 1; i >= 0; i--) { /* (the newest first: a schedule's loads repeat, its last the likeliest) */
    const PpLoad *y = &p->v[i];
    if (y->a >= x.a && y->b >= x.b && y->fresh >= x.fresh && y->h >= x.h && y->last >= x.last && y->lastf >= x.lastf && y->first >= x.first && chunks_ge(y, &x)) return;
  }
  int k = 0;
  for (int i = 0; i < p->n; i++) {
    const PpLoad *y = &p->v[i];
    if (!(x.a >= y->a && x.b >= y->b && x.fresh >= y->fresh && x.h >= y->h && x.last >= y->last && x.lastf >= y->lastf && x.first >= y->first && chunks_ge(&x, y)))
      p->v[k++] = *y;
  }
  p->n = k;
  if (p->n == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 16;
    p->v = realloc(p->v, (size_t)p->cap * sizeof *p->v);
    if (!p->v) die("plan model: out of memory");
  }
  p->v[p->n++] = x;
}

/* The stage times a schedule is played with, over a middle stage's F of one chunk, each rounded to
 * 4 significant bits (within 1/16 of itself; under 1/1024 of F: none): the profiles met are kept, and
 * looked up, by them (candidates that share pp, micro-batches, chunks and these share the lists, the
 * play and the memory profile). GPT-3 on p4de-x128: 1/8 of F rounded its transfers of 0.066 F to
 * 0.125 (its pp 32 zb step 23.8 s, compiled 22.4 s). */
double pp_round(double x) {
  if (x < 0) return -pp_round(-x); /* (an uneven split's first or last stage: less than a middle one) */
  if (!(x > 1.0 / 1024)) return 0;
  int ex;
  double m = frexp(x, &ex); /* [0.5, 1) */
  return ldexp(floor(m * 16 + 0.5) / 16, ex);
}

/* zb's lists are made with its stage times to 1/8 of F (the list maker is the profiles' cost: GPT-3's
 * analytic ranking on p4de-x128 took 1.6 CPU s with them to 4 significant bits, 1.0 so). */
static double pp_lkey(double x) { return floor(x * 8 + 0.5) / 8; }

/* zb's lists that do not depend on the times at pp stages and M micro-batches (pipe_sched_zb_fixed), pm's. */
struct PpZbFixed {
  int pp, M;
  PipeZbFixed f;
  struct PpZbFixed *next;
};

static const PipeZbFixed *zb_fixed(PlanModel *pm, int pp, int M) {
  struct PpZbFixed *f = pm->zb_fixed;
  while (f && !(f->pp == pp && f->M == M)) f = f->next;
  if (!f) {
    if (!(f = calloc(1, sizeof *f))) die("plan model: out of memory");
    *f = (struct PpZbFixed){.pp = pp, .M = M, .next = pm->zb_fixed};
    pipe_sched_zb_fixed(pp, M, &f->f);
    pm->zb_fixed = f;
  }
  return &f->f;
}

/* The lists as the pipe pass makes them: zb's with the stage times of key (per stage F, B, W; the
 * first's F and B with the embedding, the last's F with the head; its fixed candidates pm's, NULL: made
 * here), the others' without times. */
static PipeSched pp_lists(PlanModel *pm, PipeSchedule kind, int pp, int M, int v, const double *key, const short *lay) {
  if (kind != SCHED_ZB) return pipe_sched_make(kind, pp, M, v);
  double *t = calloc(3 * (size_t)pp + 1, sizeof *t), k[PK_MERGE], most = 0;
  if (!t) die("plan model: out of memory");
  for (int i = 0; i < PK_MERGE; i++) k[i] = pp_lkey(key[i]);
  for (int st = 0; lay && st < pp; st++) most = fmax(most, lay[st]);
  for (int st = 0; st < pp; st++) {
    double f = most > 0 ? lay[st] / most : 1; /* (uneven: the stage's layers over the largest's) */
    t[st] = f, t[pp + st] = k[PK_B] * f, t[2 * pp + st] = k[PK_W] * f;
  }
  t[0] += k[PK_F0], t[pp] += k[PK_B0], t[pp - 1] += k[PK_FL], t[2 * pp - 1] += k[PK_BL];
  for (int i = 0; i < 3 * pp; i++) t[i] = fmax(t[i], 1.0 / 16); /* (an uneven split's lighter stages) */
  PipeSched s = pm ? pipe_sched_zb_among(pp, M, t, zb_fixed(pm, pp, M)) : pipe_sched_make_timed(kind, pp, M, v, t);
  free(t);
  return s;
}

/* Instruction k of stage st's list: its time with the stage times key; *merge: a finished micro-batch's merge after it
 * (the instruction that ends a micro-batch on the stage, its first chunk's last, and one follows). */
static double instr_time(const PipeSched *s, int st, int k, const double *key, bool *merge) {
  int nvs = s->pp * s->v;
  PipeInstr in = s->list[st][k];
  int vs = in.chunk * s->pp + st;
  double d = in.op == 'F' ? 1 : in.op == 'B' ? key[PK_B] : key[PK_W];
  if (in.op == 'F' && vs == 0) d += key[PK_F0];
  if (in.op == 'B' && vs == 0) d += key[PK_B0];
  if (in.op == 'F' && vs == nvs - 1) d += key[PK_FL];
  if (in.op == 'B' && vs == nvs - 1) d += key[PK_BL];
  *merge = k + 1 < s->len[st] && in.op == (s->kind == SCHED_ZB ? 'W' : 'B') && in.chunk == 0;
  return fmax(d, 1.0 / 64);
}

/* The last stage's instructions of s by what they cost: F, B, W, the last chunk's F and B, merges (PpProfile.nlast). */
static void count_last(const PipeSched *s, int *n) {
  int st = s->pp - 1, nvs = s->pp * s->v;
  for (int k = 0; k < s->len[st]; k++) {
    PipeInstr in = s->list[st][k];
    static const double none[PP_KEYS];
    bool last = in.chunk * s->pp + st == nvs - 1, merge;
    instr_time(s, st, k, none, &merge); /* (its merge) */
    n[in.op == 'F' ? 0 : in.op == 'B' ? 1 : 2]++;
    if (last && in.op != 'W') n[in.op == 'F' ? 3 : 4]++;
    if (merge) n[5]++;
  }
}

/* The last stage's instructions and merges (counted: count_last) with the stage times key, units of F: each
 * instruction's time as instr_time's (floored at 1/64 of F; the first stage's embedding is never the last's). */
static double busy_of(const int *n, const double *key) {
  const double lo = 1.0 / 64;
  return (n[0] - n[3]) + n[3] * fmax(1 + key[PK_FL], lo) + (n[1] - n[4]) * fmax(key[PK_B], lo) +
         n[4] * fmax(key[PK_B] + key[PK_BL], lo) + n[2] * fmax(key[PK_W], lo) + n[5] * key[PK_MERGE];
}

/* Lists s (checked: order) played with key's times: each instruction its stage's F, B or W (a chunk's;
 * the first virtual stage's F and B with the embedding, the last's F with the head, its B with its own
 * layers), the merge of a
 * micro-batch before the stage's instruction after its last one of it (chunk 0's B; zb: W), each
 * receive's latency and copy. */
static double play_lists(const PipeSched *s, const PipeStep *order, const int *nlast, const double *key, double *busy_last,
                         double *bubble) {
  int pp = s->pp, nvs = pp * s->v;
  PipeTimes pt = pipe_times_new(s, true);
  for (int st = 0; st < pp; st++)
    for (int k = 0; k < s->len[st]; k++) {
      PipeInstr in = s->list[st][k];
      int vs = in.chunk * pp + st;
      bool merge;
      pt.dur[st][k] = instr_time(s, st, k, key, &merge);
      if ((in.op == 'F' && vs > 0) || (in.op == 'B' && vs < nvs - 1)) pt.lat[st][k] = key[PK_LAT], pt.recv[st][k] = key[PK_RECV];
      if (merge) pt.pre[st][k + 1] += key[PK_MERGE];
    }
  double b = 0, span = pipe_sched_play_order(s, order, &pt, &b, NULL, NULL);
  if (busy_last) *busy_last = busy_of(nlast, key);
  if (bubble) *bubble = b;
  pipe_times_free(s, &pt);
  return span;
}

double plan_pp_play(PipeSchedule kind, int pp, int M, int v, const double *key, PipeSched *lists, double *busy_last,
                    double *bubble) {
  PipeSched s = pp_lists(NULL, kind, pp, M, v, key, NULL);
  int total = 0;
  for (int st = 0; st < pp; st++) total += s.len[st];
  PipeStep *order = calloc((size_t)total + 1, sizeof *order);
  char msg[256];
  if (!order) die("plan model: out of memory");
  if (!pipe_sched_check(&s, 1, order, msg, sizeof msg)) die("plan model: %s", msg);
  int nlast[6] = {0};
  count_last(&s, nlast);
  double span = play_lists(&s, order, nlast, key, busy_last, bubble);
  free(order);
  if (lists) *lists = s;
  else pipe_sched_free(&s);
  return span;
}

/* p's lists (made with key's times under zb), their order and their loads in flight. */
static void pp_loads(PlanModel *pm, PpProfile *p, const double *key) {
  PipeSchedule kind = p->kind;
  int pp = p->pp, M = p->M;
  p->s = pp_lists(pm, kind, pp, M, p->v, key, p->lay[0] ? p->lay : NULL);
  PipeSched s = p->s;
  int total = 0;
  for (int st = 0; st < pp; st++) total += s.len[st];
  PipeStep *order = calloc((size_t)total + 1, sizeof *order);
  int *a = calloc((size_t)pp, sizeof(int)), *left = calloc((size_t)M, sizeof(int));
  int *bw = calloc((size_t)pp, sizeof(int)), *fr = calloc((size_t)pp, sizeof(int)); /* fr: the stage's last a B */
  int *lf = calloc((size_t)pp, sizeof(int)); /* the stage's last instruction the last virtual stage's F */
  char *hm = calloc((size_t)M, 1); /* head / embedding gradients of micro-batch i made, not merged (read for a tied table) */
  short *ac = calloc((size_t)pp * PIPE_LOAD_CHUNKS, sizeof *ac); /* [stage][chunk]: its forwards held */
  LoadSet *set = calloc((size_t)pp, sizeof *set);
  char msg[256];
  if (!order || !a || !left || !hm || !bw || !fr || !lf || !set || !ac) die("plan model: out of memory");
  bool zb = kind == SCHED_ZB;
  if (pipe_sched_check(&s, 1, order, msg, sizeof msg)) {
    int last = pp * s.v - 1, h = 0, done = 0;
    for (int i = 0; i < M; i++) left[i] = (zb ? 3 : 2) * pp * s.v;
    for (int k = 0; k < total; k++) {
      int st = order[k].stage;
      PipeInstr in = s.list[st][order[k].step];
      int vs = in.chunk * pp + st;
      bool all = false; /* every stage's load changed */
      int ch = in.chunk < PIPE_LOAD_CHUNKS ? in.chunk : PIPE_LOAD_CHUNKS - 1; /* (beyond: the last's, never priced) */
      if (in.op == 'F') {
        a[st]++, ac[st * PIPE_LOAD_CHUNKS + ch]++;
        if (vs == last) h++, hm[in.mb]++, all = true;
      } else if (in.op == 'B') {
        if (!zb) a[st]--, ac[st * PIPE_LOAD_CHUNKS + ch]--;
        else bw[st]++;
        if (vs == 0) h++, hm[in.mb]++, all = true;
      } else {
        a[st]--, bw[st]--, ac[st * PIPE_LOAD_CHUNKS + ch]--;
      }
      left[in.mb]--;
      fr[st] = zb && in.op == 'B';
      lf[st] = in.op == 'F' && vs == last;
      for (int q = all ? 0 : st; q <= (all ? pp - 1 : st); q++) {
        PpLoad l = {a[q], bw[q], h, fr[q], q == pp - 1, lf[q], q == 0, q, {0}};
        if (s.v > 1) memcpy(l.ac, ac + q * PIPE_LOAD_CHUNKS, sizeof l.ac); /* (else one chunk: a) */
        pareto_add(&set[q], l);
      }
      while (done < M && left[done] == 0) h -= hm[done], done++; /* the head's and embedding's gradients merged */
    }
  }
  for (int q = 0; q < pp; q++) p->n += set[q].n;
  if (p->n && !(p->load = malloc((size_t)p->n * sizeof *p->load))) die("plan model: out of memory");
  for (int q = 0, k = 0; q < pp; q++) {
    if (set[q].n) memcpy(p->load + k, set[q].v, (size_t)set[q].n * sizeof *p->load);
    k += set[q].n;
    free(set[q].v);
  }
  free(set);
  if (!(p->inflight = calloc((size_t)pp, sizeof(int)))) die("plan model: out of memory");
  pipe_sched_inflight(&s, p->inflight);
  if (s.v > 1 && s.v <= PIPE_LOAD_CHUNKS) { /* (the balance's: passes/pipe_balance.c) */
    p->cload = malloc((size_t)pp * PIPE_LOADS * (size_t)s.v * sizeof *p->cload);
    p->ncload = malloc((size_t)pp * sizeof *p->ncload);
    if (!p->cload || !p->ncload) die("plan model: out of memory");
    for (int st = 0; st < pp; st++) p->ncload[st] = pipe_sched_chunk_loads(&s, st, p->cload + (size_t)st * PIPE_LOADS * (size_t)s.v);
  }
  if (p->n) p->order = order; /* else lists that do not check: no play, no loads */
  else free(order);
  count_last(&p->s, p->nlast);
  free(a), free(left), free(hm), free(bw), free(fr), free(lf), free(ac);
}

/* FNV-1a over n bytes, from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ULL;
  return h;
}

/* pm's profiles by hash: p added to the table (doubled where it holds as many as buckets). */
static void ptab_add(PlanModel *pm, PpProfile *p) {
  if (pm->ptab_n >= pm->ptab_cap) {
    int cap = pm->ptab_cap ? 2 * pm->ptab_cap : 256;
    PpProfile **t = calloc((size_t)cap, sizeof *t);
    if (!t) die("plan model: out of memory");
    for (int b = 0; b < pm->ptab_cap; b++)
      for (PpProfile *q = pm->ptab[b], *n; q; q = n) n = q->hnext, q->hnext = t[q->hash & (uint64_t)(cap - 1)], t[q->hash & (uint64_t)(cap - 1)] = q;
    free(pm->ptab);
    pm->ptab = t, pm->ptab_cap = cap;
  }
  PpProfile **b = &pm->ptab[p->hash & (uint64_t)(pm->ptab_cap - 1)];
  p->hnext = *b, *b = p, pm->ptab_n++;
}

/* The lists of a schedule as the pipe pass makes them (pp_lists), their loads in flight (kept by
 * schedule, pp, micro-batches, chunks and, zb, the times its lists were made with: found by their hash),
 * and their play with the stage times key (kept by key). */
const PpPlay *pp_profile(PlanModel *pm, PipeSchedule kind, int pp, int M, int v, const double *key,
                                const double *list_key, const int64_t *lay, const PpProfile **prof, bool play) {
  double lkey[PP_KEYS] = {0};
  short ly[RT_MAX_STAGES] = {0};
  bool uneven = false;
  if (kind == SCHED_ZB)
    for (int i = 0; i < PK_MERGE; i++) lkey[i] = pp_lkey(list_key[i]);
  for (int st = 0; kind == SCHED_ZB && lay && st < pp && st < RT_MAX_STAGES; st++) ly[st] = (short)lay[st], uneven |= lay[st] != lay[0];
  if (!uneven) memset(ly, 0, sizeof ly); /* (even: the even lists) */
  int head[4] = {(int)kind, pp, M, v};
  uint64_t hash = fnv(fnv(fnv(0xcbf29ce484222325ULL, head, sizeof head), lkey, sizeof lkey), ly, sizeof ly);
  PpProfile *p = pm->ptab_cap ? pm->ptab[hash & (uint64_t)(pm->ptab_cap - 1)] : NULL;
  while (p && !(p->hash == hash && p->kind == kind && p->pp == pp && p->M == M && p->v == v &&
                !memcmp(p->lkey, lkey, sizeof lkey) && !memcmp(p->lay, ly, sizeof ly)))
    p = p->hnext;
  if (!p) {
    if (!(p = calloc(1, sizeof *p))) die("plan model: out of memory");
    *p = (PpProfile){.kind = kind, .pp = pp, .M = M, .v = v, .next = pm->profiles, .hash = hash};
    memcpy(p->lkey, lkey, sizeof lkey);
    memcpy(p->lay, ly, sizeof ly);
    pm->profiles = p;
    ptab_add(pm, p);
    pp_loads(pm, p, lkey);
  }
  *prof = p;
  if (!play) return NULL; /* (the lists alone) */
  for (PpPlay *q = p->plays; q; q = q->next)
    if (!memcmp(q->key, key, sizeof q->key)) return q;
  PpPlay *q = calloc(1, sizeof *q);
  if (!q) die("plan model: out of memory");
  memcpy(q->key, key, sizeof q->key);
  q->next = p->plays;
  p->plays = q;
  if (p->order) q->span = play_lists(&p->s, p->order, p->nlast, key, &q->busy, &q->bubble);
  else q->span = q->busy = (double)M * v * pp * (1 + key[PK_B] + key[PK_W]), q->bubble = 1 - 1.0 / pp; /* one stage at a time */
  return q;
}

double pp_busy_exact(const PpProfile *p, const double *key) {
  if (!p->order) return (double)p->M * p->v * p->pp * (1 + key[PK_B] + key[PK_W]); /* (one stage at a time: as pp_profile) */
  return busy_of(p->nlast, key);
}

/* Frees the schedules' profiles met so far (plan_model_free). */
void pp_profiles_free(PlanModel *pm) {
  for (PpProfile *p = pm->profiles, *n; p; p = n) {
    n = p->next;
    for (PpPlay *q = p->plays, *nq; q; q = nq) nq = q->next, free(q);
    pipe_sched_free(&p->s);
    free(p->order);
    free(p->load);
    free(p->inflight);
    free(p->cload), free(p->ncload);
    free(p);
  }
  free(pm->ptab);
  pm->profiles = NULL, pm->ptab = NULL, pm->ptab_cap = pm->ptab_n = 0;
  for (struct PpZbFixed *f = pm->zb_fixed, *n; f; f = n) {
    n = f->next;
    pipe_sched_zb_fixed_free(&f->f);
    free(f);
  }
  pm->zb_fixed = NULL;
}

/* ---- zb: what B hands W and what B's recompute made for W, per layer --------------------------------- */

/* zb under recompute: what B's recompute made that W reads, held from B to W (passes/recompute.c, from_b),
 * in hidden states per token and layer: full, the inputs of the weight-gradient GEMMs W does not re-run
 * from the layer's input (the first norm it does): attention's output and the second norm's, and what
 * makes the MLP's last GEMM's input (gated: the activated gate and the up projection, 2 x ffn; else the
 * first GEMM's output, ffn; ffn from the layer's last matrix, read after attention); selective:
 * attention's output (its other GEMM inputs F keeps). Compiled, pp 2 x 2 layers: tiny 6 (d 64, ffn 256),
 * the Llama-shaped 2 + 2 x 1.5 (d 64, ffn 96), as these give. */
double zb_held_units(const PlanModel *pm, RecomputeKind r) {
  if (r == RECOMPUTE_SELECTIVE) return 1;
  if (r != RECOMPUTE_FULL) return 0;
  int late = 0;
  double last = 0;
  for (int i = 0; i < pm->nlt; i++)
    if (pm->lt[i].mat && !pm->lt[i].early) late++, last = pm->lt[i].numel;
  if (late < 2 || pm->d <= 0) return 6; /* (not found: a GPT's 2 + 4) */
  return 2 + (late - 2) * last / (pm->d * pm->d);
}

/* zb: what of a micro-batch's forward activations B frees (W does not read them), a layer, in hidden states per token
 * before tp, of kept (what F keeps: the plan's units); rep: of those, the ones replicated over tp without sp (the
 * layer's input and the attention block's residual sum, 2). W takes only the stacked values its body reads
 * (passes/pipe_split.c), the inputs of its weight-gradient GEMMs:
 *   none: the two norms' outputs, the attention's output and the MLP's last GEMM's input (ffn / d: the last late
 *     matrix's): 3 + ffn / d, the rest of kept freed (Llama-3-8B 16 - 6.5 = 9.5, GPT 16 - 7 = 9);
 *   selective, W holding B's recompute: the norms' outputs and the MLP's first GEMMs' outputs (the late matrices'
 *     wider than d: its last GEMM's input re-run from them; attention's output held from B, zb_held_units), so the
 *     layer's input, the residual sum and the attention's inputs (Q, K, V) are freed: kept less 2 + those outputs
 *     (Llama-3-8B 12.5 - 9 = 3.5; GPT 11 - 6 = 5);
 *   selective, W recomputing (`zb_w recompute`, hold(N)'s others: the share unheld of the layers): the layer's
 *     input and the residual sum (2);
 *   full: none (W re-runs the first norm from the layer's input, F's one value).
 * Compiled (Llama-3-8B dp 256 tp 2+sp pp 4 zb z3, the last stage's peak, docs/planner.md "zb: W takes only what it
 * reads"): rc sel 29674 -> 28714 MiB, 1.25 hidden states more freed (the input and V) for 3 micro-batches awaiting W.
 * Not found (no layer tensors): a GPT's. */
double zb_freed_units(const PlanModel *pm, RecomputeKind r, double kept, double unheld, double *rep) {
  *rep = 0;
  if (r == RECOMPUTE_FULL) return 0;
  double first = 0, mlp_in = 0; /* the MLP's first GEMMs' outputs, its last GEMM's input */
  for (int i = 0; pm->d > 0 && i < pm->nlt; i++) {
    const PlanLayerTensor *t = &pm->lt[i];
    if (!t->mat || t->early) continue;
    if (t->out != pm->d) first += t->out / pm->d;
    mlp_in = t->numel / (pm->d * pm->d);
  }
  if (first <= 0 || mlp_in <= 0) first = 4, mlp_in = 4; /* (not found: a GPT's) */
  double u = r == RECOMPUTE_NONE ? kept - 3 - mlp_in : unheld * 2 + (1 - unheld) * (kept - 2 - first);
  if (u <= 0) return 0;
  *rep = u < 2 ? u : 2;
  return u;
}

/* Selective recompute's activations a layer keeps per token and rank (hidden states, before tp): what the
 * layer keeps outside its GEMMs' column-parallel outputs (act_rep_units' 4: the norms' inputs and outputs,
 * the residuals, attention's output) and each of those outputs, which the backward reads and selective does
 * not recompute (a matrix not row-parallel: its output features over d; the attention's score work is what
 * it recomputes). GPT-2: 4 + 3 (QKV) + 4 (the MLP's first GEMM) = 11; a gated MLP keeps both its first
 * GEMMs' outputs (the gate's, the up projection's) and grouped-query attention's K and V are smaller:
 * Llama-3-8B 4 + 1 + 2 x 0.25 + 2 x 3.5 = 12.5. Compiled (`shardc plan --world 1 -D dp=1 -D tp=1 -D pp=1
 * -D zero=0 -D micro_batch=1 -D recompute=selective -D layers=2..4`, the activations' slope a layer):
 * GPT-2 16.5 MiB of 1.5 (11.0), Llama-3-8B 800 MiB of 64 (12.5), Llama-3-405B tp 8+sp 372 MiB of 32 (11.625).
 * Under cp all2all (a2a) one hidden state more: the attention's output after its all-to-all, which selective keeps
 * as a collective's (tiny at the same tokens a rank, the slope a layer: 11.0 at cp 1 and cp 2 ring, 12.06 all2all).
 * Under cp ring none since 2026-11-29: the blocks are recomputed with their hops (passes/recompute.c ring_hops);
 * before, it kept the merged output too (Llama-3-405B dp 128 tp 2+sp pp 2 1f1b cp 4 z3 compiled 12.625 a layer,
 * 11.625 + 1). Not found (no layer tensors): 11. */
double sel_act_units(const PlanModel *pm, bool a2a) {
  if (pm->nlt <= 0 || pm->d <= 0) return a2a ? 12 : 11;
  double u = a2a ? 5 : 4;
  for (int i = 0; i < pm->nlt; i++) {
    const PlanLayerTensor *t = &pm->lt[i];
    if (t->mat && (t->early || t->out != pm->d)) u += t->out / pm->d;
  }
  return u;
}

/* No recompute's activations a layer keeps per token and rank (hidden states, before tp): what every GEMM's backward
 * reads, from the layer's ops as sel_act_units: the hidden states outside the GEMMs (4: the layer's input, its two
 * norms' outputs, the residual between), each GEMM's output that is not row-parallel (its output features over
 * d: the attention's Q, K and V, the MLP's first GEMMs), and each row-parallel GEMM's input (its input features
 * over d: the attention's output, the MLP's activation). GPT-2 4 + (3 + 4) + (1 + 4) = 16; Llama-3-8B 4 + (1 + 2
 * x 0.25 + 2 x 3.5) + (1 + 3.5) = 17: its gated MLP keeps the gate's and the up projection's outputs and their
 * product, the last GEMM's input (compiled, `shardc plan models/llama3-8b.model --target cuda --world 1 -D dp=1
 * -D tp=1 -D pp=1 -D zero=0 -D micro_batch=1 -D recompute=none -D layers=2..4`: 1089 MiB a layer of 64, 17.0; the
 * forward's stacked outputs: x, the norms' outputs, the residual, rope's Q and K, V, attention's output, the gate's,
 * the up projection's and their product, and attention's f32 row statistics, 1 / 64). Not found: 16. */
double none_act_units(const PlanModel *pm) {
  if (pm->nlt <= 0 || pm->d <= 0) return 16;
  double u = 4;
  for (int i = 0; i < pm->nlt; i++) {
    const PlanLayerTensor *t = &pm->lt[i];
    if (!t->mat || t->out <= 0) continue;
    u += t->early || t->out != pm->d ? t->out / pm->d : t->numel / t->out / pm->d;
  }
  return u;
}

/* zb: what B hands W a layer (passes/pipe_split.c's hand-off: the values W's weight gradients read from B),
 * in hidden states per token on a rank: each weight GEMM's output gradient, a column-parallel one's split by
 * tp (its output features / tp: the QKV, the MLP's first GEMMs), a row-parallel one's whole (its output the
 * hidden size, all-gathered over sp in B: the attention's output projection and the MLP's last GEMM, those
 * read after the attention with d outputs), and under sp with tp a row-parallel GEMM's bias's gradient's
 * sp slice besides (a tensor of d elements after it, not a matrix nor a norm's). Compiled (B's stacked
 * outputs, `--dump-ir=after:pipe`): GPT-2 at tp 2+sp 7 / tp + 2 + 2 / tp, Llama-3-8B 8.5 / tp + 2; GPT-3 at
 * tp 8 the 25 / tp this model counted for every model. Not found (no layer tensors): those 25 / tp. */
double zb_handoff_units(const PlanModel *pm, double tp, bool sp) {
  if (pm->nlt <= 0 || pm->d <= 0) return 25 / tp;
  double u = 0;
  for (int i = 0; i < pm->nlt; i++) {
    const PlanLayerTensor *t = &pm->lt[i];
    if (!t->mat) continue;
    bool row = !t->early && t->out == pm->d;
    u += row ? 1 : t->out / pm->d / tp;
    if (row && sp && tp > 1 && i + 1 < pm->nlt && !pm->lt[i + 1].mat && !pm->lt[i + 1].norm &&
        pm->lt[i + 1].numel == pm->d)
      u += 1 / tp;
  }
  return u;
}

/* ---- the balanced split (plan_model_balance): pipe_balance_split on the model's figures, memoised ---- */

/* A split made (plan_model_balance), kept by its figures: the times over a layer's forward and
 * backward, the memory over a layer's activations, each rounded as the stage times are (pp_round), and
 * the lists (their micro-batches in flight). */
enum { SPLIT_BUCKETS = 4096, SPLIT_FIG = 7 };
typedef struct PpSplit {
  const PpProfile *lists;
  int nv;
  double fig[SPLIT_FIG];
  bool ok, better;
  int64_t n[RT_MAX_STAGES];
  struct PpSplit *next;
} PpSplit;

/* The balance's figures of c's estimate e (the rounded ones the splits are kept by) and the lists' micro-batches
 * in flight per (virtual) stage (interleaved: shared among a stage's chunks), as pipe_balance_make has them. The
 * stage pass balances before the recompute and zero passes, so e's figures are its: a layer's activations are rc
 * none's (pipe_kept_bytes: the forward's values the backward reads), the head's the logits at the compute precision
 * and the final norm's output, the ends' times without ZeRO-3's gathers and scatters (zero3_pp_edges). With the
 * plan's (Llama-3-8B tp 2+sp pp 4 zb: rc full's 7.5 units a layer and the f32 logits, 9 layers' worth where the
 * compile's 1034 MiB over 656 are 1.6; under ZeRO-3 the head's time 2.25 layers, compiled 1.61) the model took the
 * time-feasible [8, 9, 9, 7]'s 33rd layer off the last stage, [8, 9, 9, 6], where the compile's is [8, 8, 9, 7]. */
static const PpProfile *balance_figures(PlanModel *pm, const PlanCand *c, const PlanEstimate *e, double *fig, int *infv) {
  int pp = c->pp, v = c->sched == SCHED_INTERLEAVED ? c->v : 1, nv = pp * v;
  double u = e->bal_f + e->bal_b;
  const PpProfile *pr;
  pp_profile(pm, c->sched, pp, (int)c->accum, v, e->pp_key, e->pp_key, NULL, &pr, false);
  double f[SPLIT_FIG] = {pp_round(e->bal_f / u), pp_round(e->bal_f0 / u), pp_round(e->bal_b0 / u), pp_round(e->bal_fl / u),
                         pp_round(e->bal_head / e->bal_act), pp_round(e->bal_bytes / e->bal_act), (double)nv};
  memcpy(fig, f, sizeof f);
  for (int k = 0; k < nv; k++) infv[k] = (pr->inflight[k % pp] + v - 1) / v;
  return pr;
}

/* The balance (passes/pipe_balance.c) on the figures (seconds in units of a layer's F + B, bytes of 2^20 per
 * layer's activations). */
static PipeBalance balance_of(const PlanModel *pm, const double *fig, int nv, int v, int *infv, const PpProfile *pr) {
  return (PipeBalance){.pp = nv, .chunks = v, .layers = pm->layers, .layer_f = fig[0], .layer_b = 1 - fig[0],
                       .first_f = fig[1], .first_b = fig[2], .last_f = fig[3], .layer_act = 1 << 20,
                       .last_act = (int64_t)(fig[4] * (1 << 20)), .layer_bytes = (int64_t)(fig[5] * (1 << 20)),
                       .inflight = infv, .cload = v > 1 ? pr->cload : NULL, .ncload = v > 1 ? pr->ncload : NULL};
}

static bool balance_ok(const PlanModel *pm, const PlanCand *c, const PlanEstimate *e) {
  int pp = c->pp, nv = pp * (c->sched == SCHED_INTERLEAVED ? c->v : 1);
  return pp > 1 && nv <= RT_MAX_STAGES && pm->layers >= nv && e->bal_f > 0 && e->bal_act > 0;
}

bool plan_model_balance(PlanModel *pm, const PlanCand *c, const PlanEstimate *e, int64_t *n, bool *better) {
  int pp = c->pp, v = c->sched == SCHED_INTERLEAVED ? c->v : 1, nv = pp * v;
  if (better) *better = false;
  if (!balance_ok(pm, c, e)) return false;
  double fig[SPLIT_FIG];
  int infv[RT_MAX_STAGES];
  const PpProfile *pr = balance_figures(pm, c, e, fig, infv);
  uint64_t h = (uint64_t)(uintptr_t)pr * 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < SPLIT_FIG; i++) h = (h ^ (uint64_t)(fig[i] * 1048576.0)) * 0x100000001B3ull;
  if (!pm->splits && !(pm->splits = calloc(SPLIT_BUCKETS, sizeof *pm->splits))) die("plan model: out of memory");
  PpSplit **slot = &pm->splits[h % SPLIT_BUCKETS], *q = *slot;
  while (q && !(q->lists == pr && q->nv == nv && !memcmp(q->fig, fig, sizeof fig))) q = q->next;
  if (!q) {
    if (!(q = calloc(1, sizeof *q))) die("plan model: out of memory");
    *q = (PpSplit){.lists = pr, .nv = nv, .next = *slot};
    memcpy(q->fig, fig, sizeof fig);
    *slot = q;
    PipeBalance b = balance_of(pm, fig, nv, v, infv, pr);
    b.split = q->n;
    q->ok = pipe_balance_split(&b, q->n);
    if (q->ok && pm->layers % nv == 0) {
      int64_t even[RT_MAX_STAGES];
      for (int k = 0; k < nv; k++) even[k] = pm->layers / nv;
      q->better = pipe_balance_better(&b, even);
    }
  }
  if (!q->ok) return false;
  memcpy(n, q->n, (size_t)nv * sizeof *n);
  if (better) *better = q->better;
  return true;
}

bool plan_model_balance_fit(PlanModel *pm, const PlanCand *c, const PlanEstimate *e, const double *tot, double frag,
                            double cap, int64_t *n) {
  int pp = c->pp, v = c->sched == SCHED_INTERLEAVED ? c->v : 1, nv = pp * v; /* (interleaved: tot per stage) */
  if (!(cap > 0) || !balance_ok(pm, c, e)) return false;
  int top = 0;
  for (int s = 1; s < pp; s++) top = tot[s] > tot[top] ? s : top;
  if (!(tot[top] > 0) || (tot[top] * frag <= cap && (top != 0 || v > 1))) return false; /* (as pipe_balance_calibrate) */
  double fig[SPLIT_FIG];
  int infv[RT_MAX_STAGES];
  const PpProfile *pr = balance_figures(pm, c, e, fig, infv);
  PipeBalance b = balance_of(pm, fig, nv, v, infv, pr);
  double unit = (double)(1 << 20) / e->bal_act; /* (bytes to the balance's) */
  int64_t fixed[RT_MAX_STAGES], f[RT_MAX_STAGES];
  for (int s = 0; s < pp; s++) fixed[s] = (int64_t)(tot[s] * frag * unit) - pipe_balance_rank_bytes(&b, n, s);
  b.fixed = fixed, b.cap = cap * unit;
  if (v > 1) { /* (the chunks' search, passes/pipe_balance.c's split_fitting_chunks) */
    if (!pipe_balance_split(&b, f) || !pipe_balance_fits(&b, f) || !memcmp(f, n, (size_t)nv * sizeof *n)) return false;
    memcpy(n, f, (size_t)nv * sizeof *n);
    return true;
  }
  /* (none fits where even at the least padding, ceil(layers / pp), the most layers each stage holds within
   * the capacity do not cover the layers: more padding only lowers them; most candidates far over it end
   * here, pipe_balance_split's search not run) */
  int64_t lo = (pm->layers + pp - 1) / pp, room = 0;
  for (int s = 0; s < pp && room < pm->layers; s++) {
    int64_t k = 0, one = pipe_balance_stage_bytes(&b, s, 1, lo) - pipe_balance_stage_bytes(&b, s, 0, lo);
    double left = b.cap - (double)(fixed[s] + pipe_balance_stage_bytes(&b, s, 0, lo));
    if (one > 0 && left >= 0) k = (int64_t)(left / (double)one);
    else if (one <= 0 && left >= 0) k = pm->layers;
    room += k;
  }
  if (room < pm->layers) return false;
  if (!pipe_balance_split(&b, f) || !memcmp(f, n, (size_t)pp * sizeof *n)) return false;
  memcpy(n, f, (size_t)pp * sizeof *n);
  return true;
}

double pp_stage_loads_v(const PpProfile *pr, const int64_t *n, int nv, int pp, double a, double s, double h, GradsHeld held, double head,
                        const double *ends, double pe, double *x, int *peak) {
  double top = 0;
  int v = nv / pp;
  *peak = -1;
  for (int st = 0; st < pp; st++) x[st] = 0;
  for (int i = 0; i < pr->n; i++) {
    const PpLoad *l = &pr->load[i];
    double lay = 0, fw = 0; /* the stage's layers over its chunks (a, s: a layer's over the chunks); its forwards' */
    if (l->stage < 0 || l->stage >= pp) continue;
    for (int k = l->stage, c = 0; k < nv; k += pp, c++) {
      lay += (double)n[k];
      fw += (v > 1 && v <= PIPE_LOAD_CHUNKS ? l->ac[c] * v : (double)l->a) * (double)n[k]; /* (a: over the v chunks) */
    }
    /* (the head's work at every load of the last stage, not only beside its F (PpLoad.lastf): this path's
     * activations a chunk are priced low, GPT-2 pp 2 bal int2 mb 8 0.89 of the compiled with lastf: docs/planner.md) */
    double y = a * fw + l->b * s * lay + pp_grads_held(l, held) * h + l->last * head + (l->first * ends[0] + l->last * ends[1]) * pe;
    x[l->stage] = y > x[l->stage] ? y : x[l->stage];
    if (y > top || *peak < 0) top = y, *peak = i;
  }
  return top;
}

/* Frees the balanced splits made so far (plan_model_free). */
void pp_splits_free(PlanModel *pm) {
  if (pm->splits)
    for (int i = 0; i < SPLIT_BUCKETS; i++)
      for (PpSplit *q = pm->splits[i], *nx; q; q = nx) nx = q->next, free(q);
  free(pm->splits);
  pm->splits = NULL;
}
