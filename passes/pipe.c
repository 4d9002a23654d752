/* passes/pipe.c — the pipeline schedule as the per-rank program.
 *
 * After stage (passes/stage.c: the layers split over pp), the micro-step region `repeat accum`
 * is replaced by the schedule's instructions (passes/pipe_sched.h, GPipe, 1F1B or interleaved 1F1B, checked by
 * simulation), unrolled in an order every stage can run them in. Each instruction's nodes are
 * clones of the micro-step's, predicated on their stage (Node.stage: the other stages skip them
 * and hold zeros), so one SPMD program serves every stage and the interpreter runs it in
 * lockstep:
 *   F(s, i)  stage 0: the embedding of micro-batch i; stage s > 0: recv of the activation from
 *            s - 1; the stage's layers (the forward loop); stage s < pp - 1: send of its output
 *            to s + 1; the last stage: the head, the loss and their gradient (the backward
 *            loop's carried input);
 *   B(s, i)  stage s < pp - 1: recv of the gradient from s + 1; the backward loop over the
 *            stage's layers, reading the activations F(s, i) kept; stage s > 0: send of the
 *            input gradient to s - 1; stage 0: the embedding's backward.
 * Each stage merges its own part of a micro-batch (its layer gradients into its running sums:
 * run_stage_merges, the merges pipe_stage_merges picks) as soon as it has run its instructions of
 * it, in micro-batch order, on that stage (a layer gradient's merge inside the backward loop making
 * it, where it folds: passes/pipe_fold.c); a stage_select after the last micro-batch gives each
 * stage its sum. What reads several stages' values of a micro-batch (the loss, the head's and the
 * embedding's gradients, the tied embedding's two contributions) runs on every rank once the
 * micro-batch is done: a stage holds zeros in the others' values, so each rank sums its own part. After the last micro-batch, the sums of
 * what is not split over pp (the loss, the gradients of parameters outside the layers held on
 * every stage) are all-reduced over pp; a parameter outside the layers read on one stage only is
 * held there (pipe_owned_params, passes/pipe_class.c: its gradient's sum is whole there), one read on two (a tied
 * embedding) on both, its gradient's parts exchanged between them (pipe_pair_sum, in
 * passes/pipe_owners.c). Transfers are tagged PIPE_TAG + 2 (i pp v + k) for micro-batch i sent by
 * virtual stage k (+1 for gradients). Interleaved (v chunks per stage, passes/stage.c's blocked
 * layout): virtual stage k = c pp + s runs chunk c of stage s's layers (its rows sliced once per
 * step), the wrap from the last stage's chunk c to the first stage's chunk c + 1 is a transfer at
 * offset -(pp - 1), and a layer gradient is its chunks' stage_selects concatenated. Uneven stages
 * (passes/stage.c's S(pp)@0/stages, padded to the largest count): stage s's loops run its own
 * count over a view of its stacks' leading rows (own_rows), its layer gradients padded back with
 * zero rows for the stage_select (pipe_pad_rows); interleaved, each virtual stage its own count over its
 * chunk's leading rows, each chunk padded back before the chunks are concatenated. A parameter outside the layers that every layer reads has
 * its gradient summed over the layers as a second carry of the backward loop: each stage's B carries its
 * own part, merged like a layer gradient (stage_select; interleaved: the chunks' parts added) into a
 * running sum that the all-reduce over pp completes (zb refuses it: its split keeps one carry).
 */
#include <stdlib.h>
#include <string.h>

#include "clone.h"
#include "diag.h"
#include "pipe_internal.h"

/* ---- cloning ------------------------------------------------------------------------------ */

static Value *lookup(Pp *p, PtrMap *stage_map, int mb, Value *v);


/* Micro-batch mb of a stacked step input: slice(x, 0, mb, 1) reshaped to drop the leading dim. */
static Value *mb_input(Pp *p, int mb, int q) {
  return ir_stacked_row(p->g, p->A->in[p->A->a.ncarry + q], mb, p->body->args[p->A->a.ncarry + q]->out[0], p->A->loc);
}

/* Whether body node d reads nothing of a micro-batch (only values from outside the micro-step, or
 * such nodes): a parameter's bf16 cast. Cloned once per step, not once per micro-batch: M copies
 * of a stage's layer weights, each held from its forward to its backward, would be in flight. */
static bool step_invariant(const Pp *p, const Node *d) {
  if (d->op == OP_ARG || d->body) return false;
  for (int j = 0; j < d->nin; j++) {
    const Node *u = d->in[j]->def;
    if (u->graph == p->body && (p->cls[pipe_pos_in(p->body, u)] != C_ALL || !step_invariant(p, u))) return false;
  }
  return true;
}

static Value *lookup(Pp *p, PtrMap *stage_map, int mb, Value *v) {
  intptr_t got;
  if (v->def->graph != p->body) return v;
  if (stage_map && ptrmap_get(stage_map, v, &got)) return (Value *)got;
  if (ptrmap_get(&p->shared[mb], v, &got)) return (Value *)got;
  Node *d = v->def;
  if (d->op == OP_ARG) {
    int i = d->a.index;
    if (i < p->A->a.ncarry) return p->sum[i];
    Value *x = mb_input(p, mb, i - p->A->a.ncarry);
    ptrmap_put(&p->shared[mb], v, (intptr_t)x);
    return x;
  }
  int i = pipe_pos_in(p->body, d);
  if (p->cls[i] == C_ALL) { /* computed on every stage: once per micro-batch, or once per step */
    int at = step_invariant(p, d) ? 0 : mb;
    if (at != mb && ptrmap_get(&p->shared[at], v, &got)) return (Value *)got;
    Value **in = ARENA_ARRAY(p->g->arena, Value *, d->nin + 1);
    for (int j = 0; j < d->nin; j++) in[j] = lookup(p, NULL, at, d->in[j]);
    ir_clone_node(p->g, d, in, &p->shared[at]);
    ptrmap_get(&p->shared[at], v, &got);
    return (Value *)got;
  }
  die("pipe: value %%%d (%s) is read before its instruction ran", v->id, ir_ops[d->op].name);
}


/* Chunk c of a stacked layer value read from outside the micro-step (a parameter, [L/pp, ..]
 * locally): rows [c L/(pp v), (c+1) L/(pp v)), the layers of virtual stage c pp + s. Made once
 * per step, on every rank. */
static Value *chunk_of(Pp *p, int c, Value *x) {
  intptr_t got;
  if (ptrmap_get(&p->chunks[c], x, &got)) return (Value *)got;
  Attrs sa = {0};
  sa.axis = 0;
  sa.start = pipe_chunk_start(p, c);
  sa.len = pipe_chunk_rows(p, c);
  Shape sh = x->shape;
  sh.dim[0] = sa.len;
  Value *y = ir_emit(p->g, OP_SLICE, 1, &x, x->dtype, sh, &sa, x->def->loc);
  y->sharding = x->sharding;
  y->sharding.blocks[0] = 0; /* a chunk holds one contiguous block of the local rows */
  ptrmap_put(&p->chunks[c], x, (intptr_t)y);
  return y;
}

/* Uneven stages: virtual stage vs's rows [0, rows[vs]) of a stacked layer value (interleaved: its
 * chunk's) padded to its chunk's rows (a parameter, its bf16 cast), made once per step on its stage only. */
static Value *own_rows(Pp *p, int vs, Value *x) {
  intptr_t got;
  if (ptrmap_get(&p->own[vs], x, &got)) return (Value *)got;
  Attrs sa = {0};
  sa.axis = 0;
  sa.len = p->rows[vs];
  Shape sh = x->shape;
  sh.dim[0] = p->rows[vs];
  Value *y = ir_emit(p->g, OP_SLICE, 1, &x, x->dtype, sh, &sa, x->def->loc);
  y->def->stage = vs % p->pp + 1;
  y->sharding = x->sharding;
  ptrmap_put(&p->own[vs], x, (intptr_t)y);
  return y;
}

Value *pipe_pad_rows(Pp *p, int vs, Value *y) {
  int64_t to = pipe_chunk_rows(p, vs / p->pp), st = vs % p->pp;
  if (!p->rows || y->shape.dim[0] >= to) return y; /* (a chunk of its chunks' largest count, or a whole stack) */
  Attrs pa = {0};
  pa.axis = 0;
  pa.len = to;
  Shape sh = y->shape;
  sh.dim[0] = to;
  Value *z = ir_emit(p->g, OP_PAD, 1, &y, y->dtype, sh, &pa, y->def->loc);
  z->def->stage = st + 1;
  z->sharding = y->sharding;
  return z;
}

/* Clones body node d for virtual stage vs's instruction on micro-batch mb, predicated on its stage.
 * A layer loop of an interleaved schedule runs its chunk: L/(pp v) iterations over the chunk's rows. */
static Value *run_node(Pp *p, int vs, int mb, Node *d) {
  PtrMap *sm = pipe_smap(p, vs, mb);
  bool loop = d == p->F || d == p->B || (p->W && d == p->W);
  Value **in = ARENA_ARRAY(p->g->arena, Value *, d->nin + 1);
  for (int j = 0; j < d->nin; j++) {
    in[j] = lookup(p, sm, mb, d->in[j]);
    bool xs = j >= d->a.ncarry && j < d->a.ncarry + d->a.nxs;
    /* a stage's whole stack of layers (a parameter, or its bf16 cast on every stage): the chunk's rows */
    int64_t own = pipe_vs_layers(p, vs), rows = pipe_chunk_rows(p, vs / p->pp);
    if (loop && xs && p->v > 1 && in[j]->shape.dim[0] == p->stack_rows) in[j] = chunk_of(p, vs / p->pp, in[j]);
    if (loop && xs && p->v > 1 && in[j]->shape.dim[0] != rows && in[j]->shape.dim[0] != own)
      die("pipe: the layer loop's stacked input %d is not a chunk of %lld layers", j, (long long)rows);
    if (loop && xs && p->rows && in[j]->shape.dim[0] != own) {
      if (in[j]->shape.dim[0] != rows) die("pipe: the layer loop's stacked input %d has %lld rows", j, (long long)in[j]->shape.dim[0]);
      in[j] = own_rows(p, vs, in[j]);
    }
  }
  Node *c = ir_clone_node(p->g, d, in, sm);
  c->stage = vs % p->pp + 1;
  if (loop && p->v > 1) {
    c->a.count = pipe_chunk_rows(p, vs / p->pp);
    for (int k = c->a.ncarry; k < c->nout; k++) {
      c->out[k]->shape.dim[0] = c->a.count;
      c->out[k]->sharding.blocks[0] = 0;
    }
  }
  if (loop && p->rows) { /* uneven stages: the virtual stage's own layers */
    c->a.count = pipe_vs_layers(p, vs);
    for (int k = c->a.ncarry; k < c->nout; k++) c->out[k]->shape.dim[0] = c->a.count;
  }
  /* a region's body may read outer body values: lookups made them, now point its reads there */
  if (c->body)
    for (int x = 0; x < c->body->nnodes; x++)
      for (int j = 0; j < c->body->nodes[x]->nin; j++) {
        Value *u = c->body->nodes[x]->in[j];
        if (u->def->graph == p->body) c->body->nodes[x]->in[j] = lookup(p, sm, mb, u);
      }
  return c->out[0];
}

/* A transfer of virtual stage vs for micro-batch mb to / from virtual stage peer_vs (its stage's
 * offset along pp: +1 / -1, or across the wrap from the last stage to the first and back).
 * Tagged by the sending virtual stage, so each (micro-batch, chunk, direction) is its own message. */
static void p2p(Pp *p, int vs, int mb, Value *v, int peer_vs, bool grad, Value *body_v) {
  bool send = v != NULL;
  int st = vs % p->pp, from = send ? vs : peer_vs;
  Attrs a = {0};
  a.mesh_axis = RT_AX_PP;
  a.start = peer_vs % p->pp - st;
  a.tag = PIPE_TAG + 2 * (mb * p->pp * p->v + from) + (grad ? 1 : 0);
  if (send) {
    Node *s = ir_node_new(p->g, OP_SEND, 1, &v, 0, v->def->loc);
    s->a = a;
    s->stage = st + 1;
    return;
  }
  Node *r = ir_node_new(p->g, OP_RECV, 0, NULL, 1, body_v->def->loc);
  r->a = a;
  r->stage = st + 1;
  r->out[0]->dtype = body_v->dtype;
  r->out[0]->shape = body_v->shape;
  r->out[0]->sharding = body_v->sharding;
  ptrmap_put(pipe_smap(p, vs, mb), body_v, (intptr_t)r->out[0]);
}

static void run_class(Pp *p, int vs, int mb, char cls) {
  for (int i = 0; i < p->body->nnodes; i++)
    if (p->cls[i] == cls) run_node(p, vs, mb, p->body->nodes[i]);
}

static void run_maker_merges(Pp *p, int mb, char kind);

static void run_instr(Pp *p, int st, PipeInstr in) {
  int mb = in.mb, vs = in.chunk * p->pp + st, last = p->pp * p->v - 1;
  PtrMap *sm = pipe_smap(p, vs, mb);
  intptr_t got;
  if (in.op == 'W') { /* zb: the weight gradients of the stage's layers, after its B */
    run_node(p, vs, mb, p->W);
    pipe_fold_run(p, vs, mb, p->W);
    return;
  }
  if (in.op == 'F') {
    if (vs == 0) run_class(p, vs, mb, C_FIRST);
    else p2p(p, vs, mb, NULL, vs - 1, false, p->F->in[0]);
    run_node(p, vs, mb, p->F);
    if (vs < last) {
      ptrmap_get(sm, p->F->out[0], &got);
      p2p(p, vs, mb, (Value *)got, vs + 1, false, NULL);
    } else {
      run_class(p, vs, mb, C_LAST);
      run_maker_merges(p, mb, C_LAST);
    }
    return;
  }
  if (vs < last) p2p(p, vs, mb, NULL, vs + 1, true, p->B->in[0]);
  else if (!ptrmap_get(sm, p->B->in[0], &got)) die("pipe: the last stage made no gradient for the layers");
  run_node(p, vs, mb, p->B);
  pipe_fold_run(p, vs, mb, p->B);
  if (vs > 0) {
    ptrmap_get(sm, p->B->out[0], &got);
    p2p(p, vs, mb, (Value *)got, vs - 1, true, NULL);
  } else {
    run_class(p, vs, mb, C_FIRSTB);
    run_maker_merges(p, mb, C_FIRSTB);
  }
}

/* Micro-batch mb's loop value u (a layer gradient, or B's carry after the first) of stage st, its
 * chunks in the stage's local row order (interleaved; a carry's chunks added in chunk order), made
 * on that stage (st >= 0), or every stage's own (st < 0: a stage_select of each stage's, on every rank). */
static Value *loop_part(Pp *p, int st, int mb, Value *u, SrcLoc loc) {
  bool carry = u->def == p->B && u->idx < p->B->a.ncarry; /* a gradient summed over the layers: not stacked */
  Value **chunk = ARENA_ARRAY(p->g->arena, Value *, p->v);
  intptr_t got;
  for (int ch = 0; ch < p->v; ch++) {
    if (st >= 0) {
      if (!ptrmap_get(pipe_smap(p, ch * p->pp + st, mb), u, &got)) die("pipe: a loop's value of stage %d missing", st);
      chunk[ch] = carry ? (Value *)got : pipe_pad_rows(p, ch * p->pp + st, (Value *)got);
      continue;
    }
    Value **each = ARENA_ARRAY(p->g->arena, Value *, p->pp);
    for (int s = 0; s < p->pp; s++) {
      if (!ptrmap_get(pipe_smap(p, ch * p->pp + s, mb), u, &got)) die("pipe: a loop's value of stage %d missing", s);
      each[s] = carry ? (Value *)got : pipe_pad_rows(p, ch * p->pp + s, (Value *)got);
    }
    chunk[ch] = ir_emit(p->g, OP_STAGE_SELECT, p->pp, each, each[0]->dtype, each[0]->shape, NULL, loc);
    chunk[ch]->sharding = each[0]->sharding;
  }
  Value *x = chunk[0];
  for (int ch = 1; carry && ch < p->v; ch++) { /* the stage's chunks' parts, summed in chunk order */
    Value *ab[2] = {x, chunk[ch]};
    x = ir_emit(p->g, OP_ADD, 2, ab, u->dtype, u->shape, NULL, loc);
    x->sharding = u->sharding;
    x->def->stage = st + 1;
  }
  if (p->v > 1 && !carry) { /* the stage's chunks, in its local row order */
    Attrs ca = {0};
    ca.axis = 0;
    x = ir_emit(p->g, OP_CONCAT, p->v, chunk, u->dtype, u->shape, &ca, loc);
    x->sharding = u->sharding;
    x->def->stage = st + 1;
  }
  return x;
}

/* Stage st's merges of micro-batch mb (pipe_stage_merges' early ones), on that stage, as soon as
 * it has run all its instructions of mb: its layer gradients added to its own running sums (the
 * chain of local carry c in p->ssum, from zeros made here at its first merge), in micro-batch order
 * as before, so the sums are bit-identical. */
static void run_stage_merges(Pp *p, int st, int mb) {
  Graph *b = p->body;
  int nc = p->A->a.ncarry;
  PtrMap loc = {0};
  intptr_t got;
  for (int i = 0; i < b->nnodes; i++) {
    if (!p->early[i] || p->folded[i]) continue; /* (folded: the loop did it, pipe_fold.c) */
    Node *d = b->nodes[i];
    Value **in = ARENA_ARRAY(p->g->arena, Value *, d->nin + 1);
    for (int j = 0; j < d->nin; j++) {
      Value *u = d->in[j];
      if (ptrmap_get(&loc, u, &got)) {
        in[j] = (Value *)got;
      } else if (u->def->graph == b && u->def->op == OP_ARG && u->def->a.index < nc) {
        int c = u->def->a.index;
        Value **sum = &p->ssum[c * p->pp + st];
        if (!*sum) { /* the stage's first merge: its sum starts here (zeros on its stage, or the carry's start) */
          Value *z = p->A->in[c];
          *sum = z;
          if (z->def->op == OP_CONST && z->def->graph == p->g) {
            *sum = ir_emit(p->g, OP_CONST, 0, NULL, z->dtype, z->shape, &z->def->a, z->def->loc);
            (*sum)->sharding = z->sharding;
            (*sum)->def->stage = st + 1;
          }
        }
        in[j] = *sum;
      } else if (u->def->graph == b && u->def->op != OP_ARG && p->cls[pipe_pos_in(b, u->def)] == C_LOOP) {
        in[j] = loop_part(p, st, mb, u, d->loc);
      } else {
        in[j] = lookup(p, NULL, mb, u);
      }
    }
    ir_clone_node(p->g, d, in, &loc)->stage = st + 1;
  }
  for (int c = 0; c < nc; c++)
    if (p->local[c] && !p->fold[c]) {
      if (!ptrmap_get(&loc, b->results[c], &got)) die("pipe: stage %d made no sum of carry %d", st, c);
      p->ssum[c * p->pp + st] = (Value *)got;
    }
  ptrmap_free(&loc);
}

/* The merges of micro-batch mb into a sum the stage making their values holds alone (pipe_maker_merges: kind C_LAST,
 * the last virtual stage's F has just run; C_FIRSTB, the first's B), there and then: its chain of p->sum, in
 * micro-batch order. */
static void run_maker_merges(Pp *p, int mb, char kind) {
  Graph *b = p->body;
  int vs = kind == C_LAST ? p->pp * p->v - 1 : 0;
  for (int i = 0; i < b->nnodes; i++) {
    if (p->maker[i] != kind) continue;
    Node *d = b->nodes[i];
    Value **in = ARENA_ARRAY(p->g->arena, Value *, d->nin + 1);
    for (int j = 0; j < d->nin; j++) {
      Value *u = d->in[j];
      int k = u->def->graph == b && u->def->op != OP_ARG ? pipe_pos_in(b, u->def) : -1;
      in[j] = lookup(p, k >= 0 && p->cls[k] == kind ? pipe_smap(p, vs, mb) : NULL, mb, u);
    }
    ir_clone_node(p->g, d, in, &p->shared[mb]);
  }
  for (int c = 0; c < p->A->a.ncarry; c++)
    if (p->made[c] && p->maker[pipe_pos_in(b, b->results[c]->def)] == kind) p->sum[c] = lookup(p, NULL, mb, b->results[c]);
}

/* The nodes reading several stages' values of micro-batch mb, on every rank (the early ones are each
 * stage's: run_stage_merges). A stage's value read here is the sum over the stages that may hold it
 * (the others hold zeros). */
static void run_merges(Pp *p, int mb) {
  Graph *b = p->body;
  for (int i = 0; i < b->nnodes; i++) {
    if (p->cls[i] != C_MERGE || p->early[i] || p->maker[i]) continue;
    Node *d = b->nodes[i];
    Value **in = ARENA_ARRAY(p->g->arena, Value *, d->nin + 1);
    for (int j = 0; j < d->nin; j++) {
      Value *u = d->in[j];
      int k = u->def->graph == b && u->def->op != OP_ARG ? pipe_pos_in(b, u->def) : -1;
      char c = k >= 0 ? p->cls[k] : C_NONE;
      if (c == C_FIRST || c == C_FIRSTB) in[j] = lookup(p, pipe_smap(p, 0, mb), mb, u);
      else if (c == C_LAST) in[j] = lookup(p, pipe_smap(p, p->pp * p->v - 1, mb), mb, u);
      else if (c == C_LOOP) in[j] = loop_part(p, -1, mb, u, d->loc); /* each stage's own: no zeros to add */
      else in[j] = lookup(p, NULL, mb, u);
    }
    ir_clone_node(p->g, d, in, &p->shared[mb]);
  }
  for (int c = 0; c < p->A->a.ncarry; c++)
    if (!p->local[c] && !p->made[c]) p->sum[c] = lookup(p, NULL, mb, b->results[c]);
}

bool pass_pipe(Module *m) {
  int pp = m->mesh ? m->mesh->dim[RT_AX_PP] : 1;
  if (pp <= 1) return true;
  Pp p = {.m = m, .g = m->graph, .pp = pp};
  p.A = stage_accum_region(p.g);
  if (!p.A || !stage_layer_loops(p.A->body, &p.F, &p.B)) die("pipe: no micro-step region (stage runs first)");
  p.body = p.A->body;
  p.M = (int)p.A->a.count;
  if (p.F->a.ncarry != 1 || p.B->a.ncarry < 1) {
    error_at(p.F->loc, "pipeline stages pass one activation between stages: this layer loop carries %d values",
             p.F->a.ncarry);
    return false;
  }
  /* the backward loop's carries after the gradient passed between stages: the gradients of parameters
   * outside the layers that every layer reads, summed over the layers; each stage sums its own */
  if (p.B->a.ncarry > 1 && m->plan.schedule == SCHED_ZB) {
    error_at(p.F->loc, "the zero-bubble schedule splits a backward layer loop that carries one gradient: this one "
             "also carries the gradients of %d parameters every layer reads", p.B->a.ncarry - 1);
    note("write schedule 1f1b, gpipe or interleaved");
    return false;
  }
  PipeSchedule kind = m->plan.schedule;
  p.v = kind == SCHED_INTERLEAVED ? m->plan.interleave : 1;
  p.stack_rows = p.F->a.count;
  p.per = p.F->a.count / p.v; /* (uneven interleaved: see pipe_chunk_rows) */
  p.rows = m->mesh->stage_rows[0] ? m->mesh->stage_rows : NULL;
  if ((int64_t)PIPE_TAG + 2 * (int64_t)p.M * pp * p.v > 0xffff) { /* the runtime's tags are 16 bits */
    error_at(m->plan.opt_loc[PLAN_OPT_MICROBATCHES].file ? m->plan.opt_loc[PLAN_OPT_MICROBATCHES] : m->plan.loc,
             "%d micro-batches x %d virtual stages need more pipeline transfer tags than the runtime has (%d)", p.M,
             pp * p.v, (0xffff - PIPE_TAG) / 2);
    note("use fewer micro-batches per step (a smaller batch or a larger micro_batch)");
    return false;
  }
  PipeSched s = pipe_sched_make_timed(kind, pp, p.M, p.v, m->plan.sched_times);
  int total = 0;
  for (int st = 0; st < pp; st++) total += s.len[st];
  PipeStep *order = calloc((size_t)total + 1, sizeof *order);
  char msg[1024];
  if (!order) die("out of memory");
  if (!pipe_sched_check(&s, m->mesh->world / pp, order, msg, sizeof msg)) die("pipe: %s", msg);
  if (kind == SCHED_ZB && !pipe_split_backward(p.body, p.B, &p.B, &p.W)) return false;
  if (!pipe_classify(&p)) {
    free(order);
    pipe_sched_free(&s);
    return false;
  }
  { /* the parameters outside the layers that one stage alone reads: held there only */
    int ia = pipe_pos_in(p.g, p.A), nafter = p.g->nnodes - ia - 1;
    p.owner = ARENA_ARRAY(m->arena, uint64_t, p.A->a.ncarry + 1);
    p.owned = ARENA_ARRAY(m->arena, Node *, nafter + 1);
    p.owned_set = ARENA_ARRAY(m->arena, uint64_t, nafter + 1);
    p.nowned = pipe_owned_params(&p, &p.g->nodes[ia + 1], nafter, p.owner, p.owned, p.owned_set);
  }
  pipe_stage_merges(&p);
  pipe_maker_merges(&p);
  pipe_fold_plan(&p, &s);
  pipe_plan_report(&p, &s);
  p.map = calloc((size_t)(pp * p.v * p.M), sizeof(PtrMap));
  p.chunks = calloc((size_t)p.v, sizeof(PtrMap));
  p.own = calloc((size_t)(pp * p.v), sizeof(PtrMap));
  if (!p.own) die("out of memory");
  p.shared = calloc((size_t)p.M, sizeof(PtrMap));
  int nc = p.A->a.ncarry;
  p.sum = ARENA_ARRAY(m->arena, Value *, nc + 1);
  p.ssum = ARENA_ARRAY(m->arena, Value *, nc * pp + 1);
  int *left = calloc((size_t)p.M, sizeof(int));
  int *sleft = calloc((size_t)(pp * p.M), sizeof(int)), *sdone = calloc((size_t)pp, sizeof(int)); /* per stage */
  if (!p.map || !p.shared || !p.chunks || !left || !sleft || !sdone) die("out of memory");
  for (int c = 0; c < nc; c++) p.sum[c] = p.A->in[c];
  for (int i = 0; i < p.M; i++) left[i] = (p.W ? 3 : 2) * pp * p.v;
  for (int i = 0; i < pp * p.M; i++) sleft[i] = (p.W ? 3 : 2) * p.v;

  /* the graph: what came before the region, the instructions, the sums over pp, the rest */
  Graph *g = p.g;
  int ia = pipe_pos_in(g, p.A), nn = g->nnodes;
  Node **after = ARENA_ARRAY(m->arena, Node *, nn + 1);
  int nafter = 0;
  for (int i = ia + 1; i < nn; i++) after[nafter++] = g->nodes[i];
  g->nnodes = ia;
  ir_touch(g);
  int done = 0; /* micro-batches merged, in order */
  m->pipe->norder = total;
  m->pipe->order = ARENA_ARRAY(m->arena, PipeInstr, total + 1);
  m->pipe->order_stage = ARENA_ARRAY(m->arena, int, total + 1);
  for (int k = 0; k < total; k++) {
    PipeInstr in = s.list[order[k].stage][order[k].step];
    int n0 = g->nnodes;
    run_instr(&p, order[k].stage, in);
    m->pipe->order[k] = in;
    m->pipe->order_stage[k] = order[k].stage;
    for (int q = n0; q < g->nnodes; q++) /* its nodes, for the trace (a receive is a wait: apart) */
      if (g->nodes[q]->op != OP_RECV) g->nodes[q]->instr = k + 1;
    left[in.mb]--;
    int st = order[k].stage, *sd = &sdone[st];
    sleft[st * p.M + in.mb]--;
    while (*sd < p.M && sleft[st * p.M + *sd] == 0) run_stage_merges(&p, st, (*sd)++);
    while (done < p.M && left[done] == 0) run_merges(&p, done++);
  }
  for (int c = 0; c < nc; c++) /* each stage's sum of its parts: its own */
    if (p.local[c]) {
      Value **each = &p.ssum[c * pp];
      for (int st = 0; st < pp && p.fold[c]; st++) each[st] = pipe_pad_rows(&p, st, pipe_fold_sum(&p, c, st));
      p.sum[c] = ir_emit(g, OP_STAGE_SELECT, pp, each, each[0]->dtype, each[0]->shape, NULL, p.A->loc);
      p.sum[c]->sharding = each[0]->sharding;
    }
  /* the sums not split over pp: each stage holds its part (zeros elsewhere); the loss (a scalar)
   * apart from the gradients, so that the forward alone (the eval entry) reaches it */
  for (int pass = 0; pass < 2; pass++) {
    Value **part = ARENA_ARRAY(m->arena, Value *, nc + 1);
    int *which = ARENA_ARRAY(m->arena, int, nc + 1);
    int npart = 0;
    for (int c = 0; c < nc; c++) {
      bool split = p.A->out[c]->sharding.split[0] == RT_AX_PP && p.A->out[c]->shape.rank > 0;
      if (!split && !p.owner[c] && (p.sum[c]->shape.rank == 0) == (pass == 0)) {
        which[npart] = c;
        part[npart++] = p.sum[c];
      }
    }
    if (!npart) continue;
    Node *ar = ir_node_new(g, OP_ALL_REDUCE, npart, part, npart, p.A->loc);
    ar->a.mesh_axis = RT_AX_PP;
    ar->a.reduce = RED_SUM;
    for (int q = 0; q < npart; q++) {
      int c = which[q];
      ar->out[q]->dtype = p.sum[c]->dtype;
      ar->out[q]->shape = p.sum[c]->shape;
      ar->out[q]->sharding = p.sum[c]->sharding;
      p.sum[c] = ar->out[q];
    }
  }
  for (int c = 0, k = 0; c < nc; c++) /* a gradient held on two stages: summed between them */
    if (p.owner[c] & (p.owner[c] - 1)) {
      int tag = PIPE_TAG + 2 * (p.M * pp * p.v + k++);
      if (tag + 1 > 0xffff) {
        error_at(p.A->loc, "the pipeline's transfers need more tags than the runtime has (%d)", 0xffff - PIPE_TAG);
        note("use fewer micro-batches per step");
        return false;
      }
      p.sum[c] = pipe_pair_sum(g, p.sum[c], __builtin_ctzll(p.owner[c]), 63 - __builtin_clzll(p.owner[c]), tag, pp, p.A->loc);
    }
  for (int i = 0; i < nafter; i++) {
    arena_grow(g->arena, (void **)&g->nodes, &g->capnodes, g->nnodes + 1, sizeof(Node *));
    g->nodes[g->nnodes++] = after[i];
  }
  ir_replace_uses_many(g, nc, p.A->out, p.sum); /* (the results too) */
  for (int k = 0; k < p.nowned; k++) pipe_own(g, p.owned[k], p.owned_set[k]);
  for (int i = 0; i < pp * p.v * p.M; i++) ptrmap_free(&p.map[i]);
  for (int i = 0; i < p.v; i++) ptrmap_free(&p.chunks[i]);
  for (int i = 0; i < pp * p.v; i++) ptrmap_free(&p.own[i]);
  free(p.own);
  free(p.chunks);
  for (int i = 0; i < p.M; i++) ptrmap_free(&p.shared[i]);
  free(p.map);
  free(p.shared);
  free(p.cls);
  free(left);
  free(sleft);
  free(sdone);
  free(order);
  pipe_sched_free(&s);
  ir_remove_dead(g);
  return true;
}
