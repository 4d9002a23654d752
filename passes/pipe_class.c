/* passes/pipe_class.c — the parts of the micro-step (passes/pipe_internal.h): which stage runs each
 * node of the `repeat accum` body (pipe_classify: C_FIRST the embedding, C_LAST the head and loss,
 * C_FIRSTB the embedding's backward, C_ALL what every stage computes, C_LOOP the layer loops,
 * C_MERGE what reads several stages' values), and the stages reading and holding each parameter
 * outside the layers (pipe_reader_stages, pipe_owned_params, pipe_owner_of; docs/pipeline.md). */
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "pipe_internal.h"

int pipe_pos_in(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  return -1;
}

bool pipe_reads_value(const Node *n, const Value *v) {
  for (int j = 0; j < n->nin; j++)
    if (n->in[j] == v) return true;
  if (n->body)
    for (int b = 0; b < n->body->nnodes; b++)
      if (pipe_reads_value(n->body->nodes[b], v)) return true;
  return false;
}

bool pipe_reads_node(const Node *n, const Node *d) {
  for (int k = 0; k < d->nout; k++)
    if (pipe_reads_value(n, d->out[k])) return true;
  return false;
}

/* ---- classes ---------------------------------------------------------------------------- */

static void mark_anc(Pp *p, Value *v, char c, char *on) {
  Node *d = v->def;
  if (d->graph != p->body || d->op == OP_ARG) return;
  int i = pipe_pos_in(p->body, d);
  if (on[i] == c || d == p->F || d == p->B || d == p->W) return;
  on[i] = c;
  for (int j = 0; j < d->nin; j++) mark_anc(p, d->in[j], c, on);
}

/* A parameter's cast (the precision pass's bf16 copy, read by the first stage's embedding and the
 * last's tied head alike): computed on every stage, like the loops' other invariants. */
bool pipe_param_cast(const Node *x) { return x->op == OP_CAST && x->in[0]->def->op == OP_PARAM; }

/* Whether x reads a backward loop's stacked outputs (ys: every layer's parameter gradients, each
 * stage holding its own layers') or B's carries after the first (the gradients of parameters every
 * layer reads, each stage's part): then x is per stage, like the sums those gradients go into. */
static bool reads_layer_grads(const Pp *p, const Node *x) {
  for (int l = 0; l < 2; l++) {
    const Node *r = l == 0 ? p->B : p->W;
    /* (B's carries after the first: the gradients of parameters every layer reads, each stage's part) */
    for (int k = r && l == 0 ? 1 : r ? r->a.ncarry : 0; r && k < r->nout; k++)
      if (pipe_reads_value(x, r->out[k])) return true;
  }
  return false;
}

bool pipe_classify(Pp *p) {
  Graph *b = p->body;
  int n = b->nnodes;
  char *anc = calloc((size_t)n + 1, 1), *dep = calloc((size_t)n + 1, 1); /* dep bits: 1 F, 2 B, 4 LAST */
  p->cls = calloc((size_t)n + 1, 1);
  if (!anc || !dep || !p->cls) die("out of memory");
  /* what the loops read besides their carries: computed on every stage */
  for (int l = 0; l < 3; l++) {
    Node *r = l == 0 ? p->F : l == 1 ? p->B : p->W;
    if (!r) continue;
    for (int j = r->a.ncarry; j < r->nin; j++) mark_anc(p, r->in[j], C_ALL, anc);
    for (int x = 0; x < r->body->nnodes; x++)
      for (int j = 0; j < r->body->nodes[x]->nin; j++) mark_anc(p, r->body->nodes[x]->in[j], C_ALL, anc);
  }
  for (int j = 0; j < p->F->a.ncarry; j++) mark_anc(p, p->F->in[j], C_FIRST, anc);
  char *sums = calloc((size_t)n + 1, 1); /* reads a running sum (a carry argument), or what does */
  if (!sums) die("out of memory");
  for (int i = 0; i < n; i++) {
    Node *x = b->nodes[i];
    for (int c = 0; c < p->A->a.ncarry && !sums[i]; c++) sums[i] = x->op != OP_ARG && pipe_reads_value(x, b->args[c]->out[0]);
    for (int o = 0; o < i && !sums[i]; o++) sums[i] = sums[o] && pipe_reads_node(x, b->nodes[o]);
  }
  for (int i = 0; i < n; i++) {
    Node *x = b->nodes[i];
    if (x->op == OP_ARG) continue;
    if (x == p->F || x == p->B || (p->W && x == p->W)) {
      p->cls[i] = C_LOOP;
      dep[i] = x == p->F ? 1 : 2;
      continue;
    }
    if (anc[i] == C_ALL || pipe_param_cast(x)) {
      p->cls[i] = C_ALL;
      continue;
    }
    for (int o = 0; o < i; o++)
      if (dep[o] && pipe_reads_node(x, b->nodes[o])) dep[i] |= dep[o] | (p->cls[o] == C_LAST ? 4 : 0);
    if (anc[i] == C_FIRST) p->cls[i] = C_FIRST;
    else if (reads_layer_grads(p, x)) p->cls[i] = C_MERGE; /* each stage's own layers (bf16: their cast) */
    else if (dep[i] & 2) p->cls[i] = dep[i] & 4 ? C_MERGE : C_FIRSTB;
    else if (dep[i] & 1) p->cls[i] = C_LAST;
    else if (sums[i]) p->cls[i] = C_MERGE; /* reads neither loop: the sums' own arguments */
    else p->cls[i] = C_ALL; /* reads neither loop nor a sum (a parameter's bf16 cast): on every stage */
    if (p->cls[i] == C_LAST) dep[i] |= 4;
  }
  /* the sums: every node reading a carry argument merges */
  for (int i = 0; i < n; i++)
    for (int c = 0; c < p->A->a.ncarry; c++)
      if (b->nodes[i]->op != OP_ARG && pipe_reads_value(b->nodes[i], b->args[c]->out[0])) p->cls[i] = C_MERGE;
  bool ok = true;
  for (int i = 0; i < n && ok; i++) { /* stage-only nodes read nothing of another stage's */
    Node *x = b->nodes[i];
    char c = p->cls[i];
    if (c != C_FIRST && c != C_LAST && c != C_FIRSTB) continue;
    for (int o = 0; o < n; o++) {
      char d = p->cls[o];
      if (!pipe_reads_node(x, b->nodes[o])) continue;
      if (d == C_MERGE || (c == C_LAST && (d == C_FIRST || d == C_FIRSTB)) || (c != C_LAST && d == C_LAST)) {
        error_at(x->loc, "pipeline stages: this %s reads a value of another stage's part of the micro-step (%s)",
                 ir_ops[x->op].name, ir_ops[b->nodes[o]->op].name);
        ok = false;
        break;
      }
    }
  }
  free(anc);
  free(dep);
  free(sums);
  return ok;
}

/* Marks on[s] for each stage s whose instructions read value v of the outer graph (a parameter),
 * by the class of each body node reading it: the first stage's, the last's, or every stage's (the
 * loops, what every stage computes); a parameter's bf16 cast (C_ALL) passes on its readers' stages. */
void pipe_reader_stages(const Pp *p, const Value *v, bool *on) {
  const Graph *b = p->body;
  for (int i = 0; i < b->nnodes; i++) {
    const Node *x = b->nodes[i];
    if (!pipe_reads_value(x, v)) continue;
    char c = p->cls[i];
    if (c == C_FIRST || c == C_FIRSTB) on[0] = true;
    else if (c == C_LAST) on[p->pp - 1] = true;
    else if (pipe_param_cast(x)) pipe_reader_stages(p, x->out[0], on);
    else
      for (int s = 0; s < p->pp; s++) on[s] = true;
  }
}

/* The parameters outside the layers held only where they are read (docs/pipeline.md): for each
 * update of such a parameter after the micro-step, its gradient's running sum (the carry the
 * update's gradient comes from) and the stages whose instructions read it (reader_stages). A
 * parameter read on one stage alone is that stage's: its gradient's sum is whole there (the other
 * stages' parts are zeros), so it is not summed over pp; one read on two (a tied embedding: the
 * first stage's lookup, the last's head) is theirs, its gradient summed between the two
 * (pipe_pair_sum). owner[carry]: those stages' bits; pipe_own (passes/pipe_owners.c) then puts the
 * parameter, its state, update and the clip's sum of squares on them. Returns how many; upd[k] is
 * the k-th's update, ust[k] its stages. */
int pipe_owned_params(const Pp *p, Node *const *after, int nafter, uint64_t *owner, Node **upd, uint64_t *ust) {
  int n = 0;
  if (p->pp > 64) return 0; /* (a stage set is a 64-bit mask) */
  bool *on = calloc((size_t)p->pp, sizeof(bool));
  if (!on) die("out of memory");
  for (int i = 0; i < nafter; i++) {
    Node *u = after[i];
    if ((u->op != OP_ADAMW_UPDATE && u->op != OP_SGD_UPDATE) || u->in[0]->def->op != OP_PARAM) continue;
    const Value *pv = u->in[0];
    if (pv->sharding.split[0] == RT_AX_PP && pv->shape.rank > 0) continue;
    Value *gv = u->in[1]; /* back to the running sum: the accumulation's mean, a reduction, casts */
    for (int d = 0; d < 16 && gv->def != p->A && gv->def->graph == p->g && gv->def->nin > 0; d++)
      gv = gv->def->nin == gv->def->nout ? gv->def->in[gv->idx] : gv->def->in[0];
    if (gv->def != p->A || gv->idx >= p->A->a.ncarry) continue;
    memset(on, 0, (size_t)p->pp * sizeof(bool));
    pipe_reader_stages(p, pv, on);
    uint64_t mask = 0;
    int k = 0;
    for (int s = 0; s < p->pp; s++)
      if (on[s]) mask |= 1ull << s, k++;
    if (k < 1 || k > 2 || k == p->pp) continue; /* read on more stages: every stage's */
    owner[gv->idx] = mask;
    ust[n] = mask;
    upd[n++] = u;
  }
  free(on);
  return n;
}

/* The stages holding PARAM node n (owned_params, a bit per stage), or 0: every stage. */
uint64_t pipe_owner_of(const Pp *p, const Node *n) {
  for (int k = 0; k < p->nowned; k++)
    if (p->owned[k]->in[0]->def == n) return p->owned_set[k];
  return 0;
}

/* Whether body value u is a stage's own layer gradient: a backward loop's stacked output (each
 * stage its own layers') or B's carry after the first (a parameter every layer reads, each stage's part). */
static bool stage_grad(const Pp *p, const Value *u) {
  if (u->def == p->B) return u->idx >= 1;
  return p->W && u->def == p->W && u->idx >= p->W->a.ncarry;
}

/* The merges each stage does on its own, as soon as it has run all its instructions of a
 * micro-batch (pipe.c's run_stage_merges), not once every stage has: a merge (C_MERGE) is early
 * when it reads only its stage's layer gradients (stage_grad), early merges, what every stage
 * computes, values from outside the micro-step and the running sums of local carries, and only
 * early merges read it; a carry is local when an early merge makes its sum and only early merges
 * read its argument (the layers' gradients' sums; not the loss's, the head's or the embedding's,
 * which read the first or the last stage's values). A stage then holds its layer gradients of a
 * micro-batch from its backward to its own merge, not to the last stage's end of that micro-batch:
 * GPT-3 175B at pp 16, 1f1b, the last stage held 7 micro-batches' gradients. Greatest fixed point. */
void pipe_stage_merges(Pp *p) {
  Graph *b = p->body;
  int n = b->nnodes, nc = p->A->a.ncarry;
  p->early = ARENA_ARRAY(p->m->arena, char, n + 1);
  p->local = ARENA_ARRAY(p->m->arena, bool, nc + 1);
  for (int i = 0; i < n; i++) p->early[i] = p->cls[i] == C_MERGE && !b->nodes[i]->body;
  for (int c = 0; c < nc; c++) {
    const Node *r = b->results[c]->def;
    p->local[c] = !p->owner[c] && r->graph == b && r->op != OP_ARG && p->early[pipe_pos_in(b, r)];
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = 0; i < n; i++) {
      if (!p->early[i]) continue;
      const Node *x = b->nodes[i];
      bool ok = true;
      for (int j = 0; j < x->nin && ok; j++) {
        const Value *u = x->in[j];
        if (u->def->graph != b) continue;
        if (u->def->op == OP_ARG) {
          ok = u->def->a.index >= nc || p->local[u->def->a.index];
          continue;
        }
        int k = pipe_pos_in(b, u->def);
        ok = p->cls[k] == C_ALL || p->early[k] || (p->cls[k] == C_LOOP && stage_grad(p, u));
      }
      for (int r = 0; r < n && ok; r++) /* read by early merges only */
        if (!p->early[r] && pipe_reads_node(b->nodes[r], x)) ok = false;
      for (int r = 0; r < b->nresults && ok; r++) /* yielded only as a local carry's sum */
        for (int k = 0; k < x->nout; k++)
          if (b->results[r] == x->out[k] && (r >= nc || !p->local[r])) ok = false;
      if (!ok) p->early[i] = 0, changed = true;
    }
    for (int c = 0; c < nc; c++) {
      if (!p->local[c]) continue;
      const Node *r = b->results[c]->def;
      bool ok = r->graph == b && r->op != OP_ARG && p->early[pipe_pos_in(b, r)];
      for (int i = 0; i < n && ok; i++)
        if (!p->early[i] && b->nodes[i]->op != OP_ARG && pipe_reads_value(b->nodes[i], b->args[c]->out[0])) ok = false;
      if (!ok) p->local[c] = false, changed = true;
    }
  }
}

/* The class (C_LAST, C_FIRSTB) of the values merge node x reads besides its owned sum and what every stage computes,
 * where one class alone and a sum the stage making it holds alone (owner: the last stage for C_LAST, the first for
 * C_FIRSTB); else 0. kind: the candidates' classes so far (0: none). */
static char maker_kind(const Pp *p, const Node *x, const char *kind) {
  const Graph *b = p->body;
  int nc = p->A->a.ncarry;
  char k = 0;
  for (int j = 0; j < x->nin; j++) {
    const Value *u = x->in[j];
    if (u->def->graph != b) continue;
    char want;
    if (u->def->op == OP_ARG) {
      int c = u->def->a.index;
      if (c >= nc) return 0;
      want = p->owner[c] == 1ull << (p->pp - 1) ? C_LAST : p->owner[c] == 1ull ? C_FIRSTB : 0;
    } else {
      int q = pipe_pos_in(b, u->def);
      if (p->cls[q] == C_ALL) continue;
      want = p->cls[q] == C_LAST || p->cls[q] == C_FIRSTB ? p->cls[q] : kind[q];
    }
    if (!want || (k && k != want)) return 0;
    k = want;
  }
  return k;
}

/* The merges into a sum one stage alone holds (pipe_owned_params: an untied head's and final norm's gradients on
 * the last stage, the embedding's on the first) of values only that stage's head (C_LAST: the last virtual stage's
 * F) or embedding backward (C_FIRSTB: the first's B) makes: done on that stage right after the instruction making
 * them (pipe.c's run_maker_merges), not once every stage has run the micro-batch (run_merges). That instruction runs
 * the micro-batches in order, so the sums are the same adds in the same order, and the stage holds no micro-batch's
 * gradient until the others are done with it (Llama-3-405B pp 32 zb cp 2: 32 of the head's, 1002 MiB each, on the
 * last stage; docs/planner.md). Read only by such merges or yielded as their sum's. Greatest fixed point. */
void pipe_maker_merges(Pp *p) {
  Graph *b = p->body;
  int n = b->nnodes, nc = p->A->a.ncarry;
  p->maker = ARENA_ARRAY(p->m->arena, char, n + 1);
  p->made = ARENA_ARRAY(p->m->arena, bool, nc + 1);
  for (int i = 0; i < n; i++) p->maker[i] = p->cls[i] == C_MERGE && !p->early[i] && !b->nodes[i]->body ? C_MERGE : 0;
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = 0; i < n; i++) {
      if (!p->maker[i]) continue;
      const Node *x = b->nodes[i];
      char k = maker_kind(p, x, p->maker);
      for (int r = 0; r < n && k; r++) /* read by such merges only */
        if (r != i && pipe_reads_node(b->nodes[r], x) && b->nodes[r]->op != OP_ARG && !p->maker[r]) k = 0;
      for (int r = 0; r < b->nresults && k; r++) /* yielded only as a sum its stage holds */
        for (int q = 0; q < x->nout; q++)
          if (b->results[r] == x->out[q] && (r >= nc || p->owner[r] != (k == C_LAST ? 1ull << (p->pp - 1) : 1ull))) k = 0;
      if (k != p->maker[i]) p->maker[i] = k, changed = true;
    }
  }
  for (int c = 0; c < nc; c++) {
    const Node *r = b->results[c]->def;
    p->made[c] = r->graph == b && r->op != OP_ARG && p->maker[pipe_pos_in(b, r)];
  }
}
