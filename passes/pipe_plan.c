/* passes/pipe_plan.c — the plan's per-stage figures (PipePlan, passes/pipe_sched.h; printed by
 * passes/pipe_report.c): each stage's layers, FLOPs per micro-batch, the activations an F keeps
 * for its B, the parameters it holds and those it holds but never reads, and the schedule's
 * bubble with times in proportion to FLOPs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "pipe_internal.h"

/* ---- the plan's per-stage figures (pipe_print) ---------------------------------------------- */

/* One rank's FLOPs of a node (local shapes): GEMMs and attention, regions times their count. */
static double local_flops(const Node *n) {
  if (n->body) {
    double t = 0;
    for (int i = 0; i < n->body->nnodes; i++) t += local_flops(n->body->nodes[i]);
    return (n->op == OP_REPEAT ? (double)n->a.count : 1.0) * t;
  }
  if (n->op == OP_MATMUL) return ir_gemm_flops(&n->a, &n->in[0]->shape, &n->out[0]->shape);
  if (n->op == OP_SDPA || n->op == OP_SDPA_BWD) { /* QK^T and AV; the backward about twice that */
    const Shape *q = &n->in[0]->shape, *k = &n->in[1]->shape;
    double f = 4.0 * (double)q->dim[0] * (double)q->dim[1] * (double)k->dim[1] * (double)q->dim[2];
    return n->op == OP_SDPA ? f : 2.0 * f;
  }
  return 0;
}

static double class_flops(const Pp *p, char c) {
  double t = 0;
  for (int i = 0; i < p->body->nnodes; i++)
    if (p->cls[i] == c) t += local_flops(p->body->nodes[i]);
  return t;
}

/* Bytes of the values nodes of class c (or the node only) make that the backward or the merges read. */
int64_t pipe_kept_bytes(const Pp *p, char c, const Node *only) {
  int64_t b = 0;
  const Graph *g = p->body;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *d = g->nodes[i];
    if (only ? d != only : p->cls[i] != c) continue;
    for (int k = 0; k < d->nout; k++) {
      bool kept = false;
      for (int j = 0; j < g->nnodes && !kept; j++) {
        const Node *x = g->nodes[j];
        if (x == p->B || (p->W && x == p->W) || p->cls[j] == C_FIRSTB || p->cls[j] == C_MERGE)
          kept = pipe_reads_value(x, d->out[k]);
      }
      if (kept) b += ir_numel(&d->out[k]->shape) * ir_dtype_size(d->out[k]->dtype);
    }
  }
  return b;
}

/* Per stage: the parameters outside the layers held there (not split over pp, read on several
 * stages: a tied embedding, on every stage) that its instructions never read, with their
 * optimizer states ("<kind>:<name>") and a gradient of their size: the bytes that holding each
 * such parameter on its reader stages only would save there (docs/pipeline.md, "Not yet"). */
static void unused_params(const Pp *p, PipePlan *pl) {
  const Graph *g = p->g;
  int pp = p->pp;
  char **names = calloc((size_t)pp, sizeof(char *));
  size_t *len = calloc((size_t)pp, sizeof(size_t));
  bool *on = calloc((size_t)pp, sizeof(bool));
  if (!names || !len || !on) die("out of memory");
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op != OP_PARAM || n->out[0]->sharding.split[0] == RT_AX_PP || !n->a.name || pipe_owner_of(p, n)) continue;
    memset(on, 0, (size_t)pp * sizeof(bool));
    pipe_reader_stages(p, n->out[0], on);
    int64_t b = 2 * ir_numel(&n->out[0]->shape) * ir_dtype_size(n->out[0]->dtype); /* the parameter, its gradient */
    for (int j = 0; j < g->nnodes; j++) {
      const Node *st = g->nodes[j];
      const char *c = st->op == OP_STATE && st->a.name ? strchr(st->a.name, ':') : NULL;
      if (c && strcmp(c + 1, n->a.name) == 0) b += ir_numel(&st->out[0]->shape) * ir_dtype_size(st->out[0]->dtype);
    }
    for (int s = 0; s < pp; s++) {
      if (on[s]) continue;
      pl->stage[s].unused_bytes += b;
      size_t k = strlen(n->a.name);
      char *t = realloc(names[s], len[s] + k + 3);
      if (!t) die("out of memory");
      names[s] = t;
      len[s] += (size_t)sprintf(t + len[s], "%s%s", len[s] ? ", " : "", n->a.name);
    }
  }
  for (int s = 0; s < pp; s++) {
    pl->stage[s].unused = arena_printf(p->m->arena, "%s", names[s] ? names[s] : "");
    free(names[s]);
  }
  free(names);
  free(len);
  free(on);
}

double pipe_plan_instr_flops(const PipePlan *p, int st, int c, char op) {
  const PipeStage *x = &p->stage[st];
  double mean = 0; /* the stage's mean chunk's layers */
  for (int k = 0; k < x->nchunks; k++) mean += (double)x->chunk_layers[k];
  double dn = (double)x->chunk_layers[c] - mean / x->nchunks, w = x->wgt_flops + p->layer_wgt * dn;
  if (op == 'W') return w > 0 ? w : 0;
  double t = op == 'F' ? x->fwd_flops + p->layer_fwd * dn : x->bwd_flops - x->wgt_flops + p->layer_bwd * dn;
  return t > 0 ? t : 1;
}

void pipe_plan_report(Pp *p, const PipeSched *s) {
  Module *m = p->m;
  PipePlan *pl = ARENA_NEW(m->arena, PipePlan);
  pl->kind = s->kind;
  pl->pp = p->pp;
  pl->nmb = p->M;
  pl->times = m->plan.sched_times;
  pl->loop = p->F->a.name;
  pl->layers = 0;
  for (int st = 0; st < p->pp; st++) pl->layers += pipe_stage_layers(p, st);
  pl->v = p->v;
  pl->stage = ARENA_ARRAY(m->arena, PipeStage, p->pp);
  int *infl = calloc((size_t)p->pp, sizeof(int));
  if (!infl) die("out of memory");
  int64_t params = 0; /* every stage's; and each stage's own (owner_of) */
  int64_t *own = calloc((size_t)p->pp, sizeof(int64_t));
  if (!own) die("out of memory");
  for (int i = 0; i < p->g->nnodes; i++)
    if (p->g->nodes[i]->op == OP_PARAM) {
      int64_t b = ir_numel(&p->g->nodes[i]->out[0]->shape) * ir_dtype_size(p->g->nodes[i]->out[0]->dtype);
      uint64_t o = pipe_owner_of(p, p->g->nodes[i]);
      for (int s = 0; s < p->pp; s++)
        if (o >> s & 1) own[s] += b;
      if (!o) params += b;
    }
  double all = class_flops(p, C_ALL);
  double count = (double)p->F->a.count;
  pl->layer_fwd = local_flops(p->F) / count;
  pl->layer_wgt = p->W ? local_flops(p->W) / count : 0;
  pl->layer_bwd = local_flops(p->B) / count;
  for (int st = 0; st < p->pp; st++) {
    PipeStage *x = &pl->stage[st];
    bool first = st == 0, last = st == p->pp - 1;
    double n = (double)pipe_stage_layers(p, st); /* the stage's layers (all its chunks) */
    int64_t *cf = ARENA_ARRAY(m->arena, int64_t, p->v), *cl = ARENA_ARRAY(m->arena, int64_t, p->v);
    for (int c = 0; c < p->v; c++) { /* virtual stage c pp + st: after every earlier one's layers */
      cl[c] = pipe_vs_layers(p, c * p->pp + st);
      for (int o = 0; o < c * p->pp + st; o++) cf[c] += pipe_vs_layers(p, o);
    }
    x->chunk_first = cf;
    x->chunk_layers = cl;
    x->first_layer = cf[0];
    x->nlayers = p->v > 1 && p->rows ? (int64_t)n : cl[0];
    x->nchunks = p->v;
    x->embedding = first;
    x->head = last;
    x->fwd_flops = all + pl->layer_fwd * n + (first ? class_flops(p, C_FIRST) : 0) + (last ? class_flops(p, C_LAST) : 0);
    x->wgt_flops = pl->layer_wgt * n;
    x->bwd_flops = pl->layer_bwd * n + x->wgt_flops + (first ? class_flops(p, C_FIRSTB) : 0);
    x->act_bytes = (int64_t)((double)pipe_kept_bytes(p, 0, p->F) * n / count) +
                   (first ? pipe_kept_bytes(p, C_FIRST, NULL) : 0) + (last ? pipe_kept_bytes(p, C_LAST, NULL) : 0);
    x->param_bytes = params + own[st];
    /* interleaved: an instruction is one of v chunks (the embedding and head spread over them) */
    x->fwd_flops /= p->v;
    x->bwd_flops /= p->v;
    x->wgt_flops /= p->v;
    x->act_bytes /= p->v;
  }
  unused_params(p, pl);
  { /* the schedule played with each instruction's FLOPs, transfers free (pipe_sched_timeline's, per chunk) */
    PipeTimes t = pipe_times_new(s, false);
    for (int st = 0; st < p->pp; st++)
      for (int k = 0; k < s->len[st]; k++)
        t.dur[st][k] = p->W || s->list[st][k].op != 'W'
                         ? pipe_plan_instr_flops(pl, st, s->list[st][k].chunk, s->list[st][k].op) : 0;
    pipe_sched_play(s, &t, &pl->bubble, NULL, NULL);
    pipe_sched_inflight(s, infl);
    pipe_times_free(s, &t);
  }
  for (int st = 0; st < p->pp; st++) pl->stage[st].inflight = infl[st];
  m->pipe = pl;
  free(own);
  free(infl);
}
