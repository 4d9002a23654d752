/* passes/recompute.c — pass_recompute: activation recompute (checkpointing) of repeat blocks.
 *
 * After autodiff a forward REPEAT F yields, besides its own outputs, the *residuals* its
 * backward REPEAT B reads: per-iteration values of F's body stacked over the layers and read
 * by B as stacked inputs (xs). They live from the forward to the backward of their layer,
 * which is most of a step's activation memory. This pass keeps fewer of them and recomputes
 * the rest inside B's body, from what it keeps, with clones of F's own nodes:
 *
 *   full       keeps only each iteration's carried input (the block's input): B's body
 *              re-runs the block's forward (its collectives too, as Megatron's full
 *              recompute does) before the block's backward (on the CUDA target GELU's
 *              pre-activation before the GEMM whose epilogue computes its backward: dgelu_first);
 *   selective  keeps the outputs of GEMMs, norms, embeddings and collectives and recomputes
 *              the attention core (sdpa; under cp ring its blocks, their merges and hops) and
 *              the cheap ops between them: elementwise ops, rope, and copies (slice, concat,
 *              reshape, transpose, pad, broadcast_to) — Megatron's selective recompute, with
 *              our flash-style sdpa as the core; a GEMM's output is what its epilogue stores
 *              (on the CUDA target; elsewhere would): the bias and residual adds are kept (epi_keep);
 *   none       recomputes nothing but column slices (below) and, on the CUDA target, fused unaries.
 *
 * Fused unaries, on the CUDA target in every mode (fused_unary): a unary elementwise op whose input B
 * reads as a residual anyway and whose output B reads only in elementwise nodes, one of them also reading
 * that input (SwiGLU's silu(g) beside silu_bwd(g, .)): recomputed in B, where it joins their fusion group
 * (passes/fuse_order.c), which loads the input already; F stores it no more (its own group keeps it in
 * registers). Not on the CPU target, which runs node by node (a clone there is one more pass).
 *
 * Column slices, in every mode: a residual that is a last-axis slice of an F-body value X (q, k, v out of
 * the fused QKV projection) is not saved as a copy when the slices B reads of X cover X's every column
 * and each of B's reads takes a row stride (ir_reads_row_stride: sdpa_bwd's q, k, v): F saves X once,
 * B re-slices it, and memplan makes both sides' slices column views (passes/memplan_views.c), so the
 * forward copies nothing into the save stacks and the backward nothing out of them. Where the slices
 * do not cover X (Llama's v, its q and k saved after rope) X stays unsaved: saving it would cost more.
 *
 * A value the recomputation needs that F does not yield yet (a GEMM output under selective,
 * the carried input if the backward did not need it) becomes a new residual; a stacked or
 * captured input of F that B does not read yet becomes a new argument of B. Each clone is
 * placed in B's body right before the first node that reads it, so memplan's liveness keeps
 * a recomputed value only from there to its last use; the residuals no longer read are
 * dropped from F (and what computed only them from F's body). The clones are the same ops
 * with the same attributes, shapes, dtypes and shardings, on the same values, so the loss
 * and the gradients are bit-identical to no recompute.
 *
 * zb's W loops (passes/pipe_split.c's weight-gradient half of a backward loop, after the pipe pass) read
 * the forward's saved values as B does and would recompute the forward a second time. Instead W takes
 * what B's recompute made (from_b): each B loop's memo is kept until its W, and a value W needs that B
 * made is yielded stacked by B and read by W, held from B to W (the memory plan's interval), but for
 * cheap ops (elementwise, copies, rope, norms) whose inputs W has without holding more, which W re-runs:
 * W runs no forward GEMM, attention or collective. `zb_w auto | hold | recompute` (plan option) chooses:
 * auto holds where the driver keeps it (replan.c's auto_memory, with `weight_copy auto` and `defer_waits auto`:
 * the fastest plan that fits; Plan.fit.zbw), else W recomputes from the forward's saved values as any
 * backward; the memory report says which and why (Module.zbw).
 *
 * Where: after `shard` and `buckets`, before `fuse` and `memplan`. It must see the backward
 * graph (autodiff made the residuals), and it works on the per-rank program, so a clone is
 * the very node the forward ran (a tp collective included) and the shard pass needs no rule
 * for recomputed nodes; fuse then groups the recomputed chains and memplan plans them.
 * Limits: a region node inside F's body (a nested repeat) is kept, not recomputed; a
 * REPEAT outside every F/B pair (no backward) is left alone.
 */
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "fit.h"
#include "passes.h"
#include "plan_options.h"
#include "ptrmap.h"
#include "recompute_int.h"

typedef struct {
  RecomputeKind kind;
  bool cuda;    /* the CUDA target (fused_unary) */
  PtrMap unary; /* fused_unary's answers (Node* -> 1 or 2: yes or no), asked before B's body is rebuilt */
  bool frozen;  /* B's body is being rebuilt: fused_unary answers from unary alone */
  bool epi;     /* the CUDA target's GEMM epilogues are on (epi_keep's GELUs, dgelu_first) */
  PtrMap epik;  /* selective: the adds a GEMM's epilogue absorbs, kept as its output (epi_keep) */
  PtrMap epig;  /* the GELUs a GEMM's epilogue absorbs (epi_keep; full: dgelu_first) */
  PtrMap cols;  /* the column slices re-sliced in B (cols_of) */
  Node *F, *B;  /* the forward REPEAT and its backward */
  Graph *fb;    /* F's body */
  Graph *bb;    /* B's body */
  PtrMap memo;  /* F-body value -> its value in B's body (a clone, an argument, a direct read) */
  PtrMap recomp; /* B-body ARG value -> the F-body value it will be recomputed as */
  PtrMap *outer; /* value of F's graph -> its reads there (count_uses), kept up to date */
  Node *Bsrc;    /* B is zb's W loop (passes/pipe_split.c): the B loop that hands it its gradients */
  PtrMap *bmemo; /* ... and that loop's memo (F-body value -> its value in Bsrc's body) */
  int held;      /* ... the values W takes from Bsrc, held from B to W */
  int64_t held_bytes; /* ... their bytes, all the loop's layers */
  int hop_next;  /* under cp ring: F's body positions before this one have their ring hops in B (ring_hops) */
} Rc;

/* ---- repeat signature edits --------------------------------------------------------- */

/* Inserts an argument at position pos of REPEAT rep (input x), shifting later ones. */
static Node *insert_arg(Node *rep, int pos, Value *x, const Value *like) {
  Graph *b = rep->body;
  Node *a = ir_add_arg(b, like->dtype, like->shape, like->name); /* appended as the last arg */
  a->out[0]->sharding = like->sharding;
  for (int i = b->nargs - 1; i > pos; i--) {
    b->args[i] = b->args[i - 1];
    b->args[i]->a.index = i;
  }
  b->args[pos] = a;
  a->a.index = pos;
  Value **in = ARENA_ARRAY(b->arena, Value *, rep->nin + 1);
  memcpy(in, rep->in, sizeof(Value *) * (size_t)pos);
  in[pos] = x;
  memcpy(in + pos + 1, rep->in + pos, sizeof(Value *) * (size_t)(rep->nin - pos));
  rep->in = in;
  rep->nin++;
  ir_touch(b);
  ir_touch(rep->graph);
  return a;
}

/* Removes stacked output k of F (read by nothing) and its body result. */
static void remove_output(Node *F, int k) {
  bool *drop = ARENA_ARRAY(F->graph->arena, bool, F->nout + 1);
  memset(drop, 0, sizeof(bool) * (size_t)(F->nout + 1));
  drop[k] = true;
  ir_repeat_remove_outputs(F, drop);
}

/* Reads of v by nodes of g and its nested bodies, plus g's results. */
static int uses(const Graph *g, const Value *v) {
  int c = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++) c += n->in[j] == v;
    if (n->body) c += uses(n->body, v);
  }
  for (int i = 0; i < g->nresults; i++) c += g->results[i] == v;
  return c;
}

/* Adds d to the read count of every value a node of g (or of its nested bodies) or a result of
 * g reads: one walk, so that whether a value of a graph of many regions (an unrolled pipeline
 * schedule) is still read costs a lookup, not a walk per question. */
static void count_uses(const Graph *g, PtrMap *c) {
  intptr_t k;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++) ptrmap_put(c, n->in[j], ptrmap_get(c, n->in[j], &k) ? k + 1 : 1);
    if (n->body) count_uses(n->body, c);
  }
  for (int i = 0; i < g->nresults; i++) ptrmap_put(c, g->results[i], ptrmap_get(c, g->results[i], &k) ? k + 1 : 1);
}

static void add_use(PtrMap *c, const Value *v, intptr_t d) {
  intptr_t k = 0;
  ptrmap_get(c, v, &k);
  ptrmap_put(c, v, k + d);
}

static void replace_deep(Graph *g, const Value *from, Value *to) {
  ir_touch(g);
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++)
      if (n->in[j] == from) n->in[j] = to;
    if (n->body) replace_deep(n->body, from, to);
  }
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == from) g->results[i] = to;
}

/* ---- what to keep ------------------------------------------------------------------------ */

static Value *b_arg_of(const Rc *r, const Value *x, int lo, int hi);

/* B's argument reading F-body value v as a residual (stacked by F), or NULL. */
static Value *residual_arg(const Rc *r, const Value *v) {
  for (int k = r->F->a.ncarry; k < r->fb->nresults; k++)
    if (r->fb->results[k] == v) {
      Value *a = b_arg_of(r, r->F->out[k], r->B->a.ncarry, r->B->a.ncarry + r->B->a.nxs);
      if (a) return a;
    }
  return NULL;
}

/* How many nodes of B's body read a, and how many of them are elementwise (-1: a body or a result reads it). */
static int ew_reads(const Rc *r, const Value *a, int *ew) {
  int n = 0;
  *ew = 0;
  for (int i = 0; i < r->bb->nnodes; i++) {
    const Node *q = r->bb->nodes[i];
    if (q->body && uses(q->body, a)) return -1;
    bool reads = false;
    for (int j = 0; j < q->nin; j++) reads |= q->in[j] == a;
    n += reads;
    *ew += reads && (ir_ops[q->op].flags & F_EW);
  }
  for (int i = 0; i < r->bb->nresults; i++)
    if (r->bb->results[i] == a) return -1;
  return n;
}

/* In every mode on the CUDA target: a unary elementwise n (not a cast) whose input x B reads as a residual anyway,
 * where only elementwise nodes of B read n's output and one reads x: recomputed from x (SwiGLU's silu(g), read by
 * the backward's mul beside silu_bwd(g, .)), its clone joins their fusion group (passes/fuse_order.c), which
 * loads x already: the forward stores n's output no more and the backward does not load it. */
static bool fused_unary_now(const Rc *r, const Node *n) {
  if (!r->cuda || n->nin != 1 || n->nout != 1 || !(ir_ops[n->op].flags & F_EW) || n->op == OP_CAST) return false;
  const Value *x = n->in[0];
  if (x->def->graph != r->fb || x->def->op == OP_ARG) return false;
  Value *ax = residual_arg(r, x), *ay = residual_arg(r, n->out[0]);
  int ewx, ewy;
  if (!ax || !ay || ew_reads(r, ax, &ewx) < 1 || ewx < 1) return false;
  int ny = ew_reads(r, ay, &ewy);
  return ny >= 1 && ewy == ny;
}

static bool fused_unary(const Rc *r, const Node *n) {
  intptr_t got = 0;
  if (ptrmap_get(&r->unary, n, &got) || r->frozen) return got == 1;
  bool yes = fused_unary_now(r, n);
  ptrmap_put((PtrMap *)&r->unary, n, yes ? 1 : 2);
  return yes;
}

/* Rope and the ops that move or copy rows (a pass over their bytes): recomputed under selective, and re-run
 * by zb's W rather than held. */
static bool moves_rows(OpKind op) {
  switch (op) {
  case OP_ROPE:
  case OP_RESHAPE:
  case OP_TRANSPOSE:
  case OP_SLICE:
  case OP_PAD:
  case OP_CONCAT:
  case OP_BROADCAST_TO: return true;
  default: return false;
  }
}

/* A send or receive of cp's ring attention (passes/shard_cp.c: K, V and their positions one hop on). */
static bool ring_hop(const Node *n) {
  return (n->op == OP_SEND || n->op == OP_RECV) && n->a.mesh_axis == RT_AX_CP;
}

/* Whether the output of n is recomputed in the backward (else kept as a residual). Full and selective recompute
 * re-run cp's ring attention blocks (selective: as it re-runs sdpa at cp 1) and pass K and V around the ring again
 * for them (as Megatron's does under cp), rather than keep every hop's: 2 (cp - 1) of them a layer. */
static bool recomputed(const Rc *r, const Node *n) {
  if (n->op == OP_RECV && ring_hop(n) && r->kind != RECOMPUTE_NONE) return true;
  if (n->body || n->op == OP_SEND || n->op == OP_RECV || (ir_ops[n->op].flags & F_SOURCE)) return false;
  intptr_t one;
  if (ptrmap_get((PtrMap *)&r->cols, n, &one)) return true;
  if (r->kind == RECOMPUTE_NONE) return fused_unary(r, n);
  if (r->kind == RECOMPUTE_FULL) return true;
  if (ptrmap_get((PtrMap *)&r->epik, n, &one)) return false;
  return (ir_ops[n->op].flags & F_EW) || n->op == OP_SDPA || n->op == OP_ATTN_BLOCK || n->op == OP_ATTN_COMBINE ||
         moves_rows(n->op);
}

/* ---- building B's recomputation ------------------------------------------------------------ */

/* B's argument reading outer value x at an index in [lo, hi), or NULL. */
static Value *b_arg_of(const Rc *r, const Value *x, int lo, int hi) {
  for (int i = lo; i < hi; i++)
    if (r->B->in[i] == x) return r->bb->args[i]->out[0];
  return NULL;
}

/* F-body value v kept: B reads it as a residual (stacked by F), made one if it is not yet; where F stacks it
 * already (for another reader: zb's B, where this B is its W, which takes only what its body reads), that stack. */
static Value *residual(Rc *r, Value *v) {
  Node *F = r->F, *B = r->B;
  int nc = B->a.ncarry, nx = B->a.nxs;
  Value *o = NULL;
  for (int k = F->a.ncarry; k < F->body->nresults; k++)
    if (F->body->results[k] == v) {
      Value *a = b_arg_of(r, F->out[k], nc, nc + nx);
      intptr_t rv;
      if (a && !ptrmap_get(&r->recomp, a, &rv)) return a;
      if (!o) o = F->out[k];
    }
  if (!o) o = ir_repeat_add_stacked(F, v);
  Node *a = insert_arg(B, nc + nx, o, v);
  add_use(r->outer, o, 1);
  B->a.nxs++;
  return a->out[0];
}

static Value *materialize(Rc *r, Value *v);
static Value *clone(Rc *r, Value *v);

/* ---- zb's W loop: what B's recompute made, held from B to W ------------------------------- */

/* Ops W re-runs itself rather than hold their output, when their inputs cost W nothing more
 * (held already, the loop's arguments, or saved by F anyway): elementwise ops, copies, rope and
 * norms, a pass over their bytes (a GEMM's, attention's or a collective's output is held). */
static bool cheap(const Node *d) {
  return (ir_ops[d->op].flags & F_EW) || d->op == OP_LAYERNORM || d->op == OP_RMSNORM || moves_rows(d->op);
}

/* Whether W has F-body value u without holding anything more: made in W already, F's argument
 * (the layer's input, a weight), a constant, or a value F stacks for the backward anyway. */
static bool free_in_w(const Rc *r, const Value *u) {
  intptr_t got;
  const Node *d = u->def;
  if (ptrmap_get((PtrMap *)&r->memo, u, &got) || d->graph != r->fb) return true;
  if (d->op == OP_ARG || d->op == OP_CONST || d->op == OP_IOTA || d->op == OP_AXIS_INDEX) return true;
  if (recomputed(r, d)) return false;
  for (int k = r->F->a.ncarry; k < r->fb->nresults; k++)
    if (r->fb->results[k] == u) return true;
  return false;
}

/* F-body value v, recomputed under the mode, in W's body: B's recompute made it (not an argument of
 * B's body) and W could not re-run it from what it has for free: B yields it stacked, W reads it (held
 * from B to W, the memory plan's interval); else W re-runs its node, its inputs the same way. So W
 * runs no GEMM, attention or collective of the forward again (B has run them), only the cheap ops
 * between what B holds for it and the layer's input (a norm of it, an activation of a held GEMM output). */
static Value *from_b(Rc *r, Value *v) {
  intptr_t got;
  Node *d = v->def;
  if (ptrmap_get(r->bmemo, v, &got)) {
    Value *bv = (Value *)got;
    bool made = bv->def->graph == r->Bsrc->body && bv->def->op != OP_ARG;
    bool rerun = cheap(d);
    for (int j = 0; j < d->nin && rerun; j++) rerun = free_in_w(r, d->in[j]);
    if (made && !rerun) {
      Node *W = r->B;
      Value *o = ir_repeat_add_stacked(r->Bsrc, bv);
      Node *a = insert_arg(W, W->a.ncarry + W->a.nxs, o, v);
      add_use(r->outer, o, 1);
      r->held++;
      r->held_bytes += ir_numel(&o->shape) * (int64_t)ir_dtype_size(o->dtype);
      W->a.nxs++;
      return a->out[0];
    }
  }
  return clone(r, v);
}

/* A node like F-body node d in B's body, reading in: d's attributes, its outputs typed and sharded as d's and
 * memoized as them. */
static Node *clone_node(Rc *r, const Node *d, Value **in) {
  Node *c = ir_node_new(r->bb, d->op, d->nin, in, d->nout, d->loc);
  c->a = d->a;
  for (int k = 0; k < d->nout; k++) {
    Value *o = c->out[k], *f = d->out[k];
    o->dtype = f->dtype;
    o->shape = f->shape;
    o->sharding = f->sharding;
    o->name = f->name;
    o->offset = -1;
    ptrmap_put(&r->memo, f, (intptr_t)o);
  }
  return c;
}

static int position(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  die("recompute: a node not in its graph");
}

/* Recompute under cp ring: F's ring hops before F-body position `upto`, in F's order, into B's body (each
 * send's input materialized first): a block's clone is preceded by the hops F issues before it — the next
 * block's among them, so its transfer runs while this block computes, as in F — and every rank sends and
 * receives the same hops in the same order (their tags are F's: a backward ring reuses them so too). */
static void ring_hops(Rc *r, int upto) {
  while (r->hop_next < upto) {
    Node *n = r->fb->nodes[r->hop_next++];
    if (!ring_hop(n)) continue;
    Value *x = n->op == OP_SEND ? materialize(r, n->in[0]) : NULL;
    clone_node(r, n, n->op == OP_SEND ? &x : NULL);
  }
}

static Value *clone(Rc *r, Value *v) {
  Node *d = v->def;
  if (ring_hop(d) || d->op == OP_ATTN_BLOCK) {
    ring_hops(r, position(r->fb, d) + (d->op == OP_RECV));
    intptr_t got;
    if (d->op == OP_RECV && ptrmap_get(&r->memo, v, &got)) return (Value *)got;
    if (d->op == OP_RECV) die("recompute: a ring hop's receive not met in its forward");
  }
  Value **in = ARENA_ARRAY(r->bb->arena, Value *, d->nin + 1);
  /* (with the CUDA target's epilogues: a GEMM's clone last, right before its reader, which its epilogue may then
   * absorb; a layer's bias cast for the add after it (passes/wcast.c) before the GEMM, not between the two) */
  for (int pass = 0; pass < 2; pass++)
    for (int j = 0; j < d->nin; j++)
      if (pass == (r->epi && d->in[j]->def->op == OP_MATMUL)) in[j] = materialize(r, d->in[j]);
  return clone_node(r, d, in)->out[v->idx];
}

/* The value of F-body value v in B's body: cloned nodes are appended to B's body here. */
static Value *materialize(Rc *r, Value *v) {
  intptr_t got;
  if (ptrmap_get(&r->memo, v, &got)) return (Value *)got;
  Node *d = v->def, *F = r->F, *B = r->B;
  Value *res;
  if (d->graph != r->fb) {
    res = v; /* an enclosing value read directly: B's body can read it too */
  } else if (d->op == OP_ARG) {
    int i = d->a.index, fc = F->a.ncarry, fx = F->a.nxs;
    int bc = B->a.ncarry, bx = B->a.nxs;
    if (i < fc) {
      res = residual(r, v);
    } else if (i < fc + fx) {
      res = b_arg_of(r, F->in[i], bc, bc + bx);
      if (!res) {
        res = insert_arg(B, bc + bx, F->in[i], v)->out[0];
        add_use(r->outer, F->in[i], 1);
        B->a.nxs++;
      }
    } else {
      res = b_arg_of(r, F->in[i], bc + bx, B->nin);
      if (!res) {
        res = insert_arg(B, B->nin, F->in[i], v)->out[0];
        add_use(r->outer, F->in[i], 1);
      }
    }
  } else if (d->op == OP_CONST || d->op == OP_IOTA || d->op == OP_AXIS_INDEX) {
    res = clone(r, v);
  } else if (recomputed(r, d)) {
    res = r->bmemo ? from_b(r, v) : clone(r, v);
  } else {
    res = residual(r, v);
  }
  ptrmap_put(&r->memo, v, (intptr_t)res);
  return res;
}

/* Whether every read of v in B's body takes a row stride (and there is one: no result, no nested body). */
static bool strided_reads(const Graph *bb, const Value *v) {
  int reads = 0;
  for (int i = 0; i < bb->nnodes; i++) {
    const Node *n = bb->nodes[i];
    if (n->body && uses(n->body, v)) return false;
    for (int j = 0; j < n->nin; j++)
      if (n->in[j] == v) {
        if (!ir_reads_row_stride(n, j)) return false;
        reads++;
      }
  }
  for (int i = 0; i < bb->nresults; i++)
    if (bb->results[i] == v) return false;
  return reads > 0;
}

/* The column slices B re-slices (the header's "Column slices"): the last-axis slices of an F-body value
 * X that F saves for B, when B reads them only at a row stride and they cover X's columns. */
static void cols_of(Rc *r) {
  Node *F = r->F, *B = r->B;
  int nc = B->a.ncarry, nx = B->a.nxs;
  for (int i = nc; i < nc + nx; i++) {
    Value *y = B->in[i];
    if (y->def != F || y->idx < F->a.ncarry) continue;
    Node *d = F->body->results[y->idx]->def, *same[16];
    if (d->op != OP_SLICE || d->graph != F->body || d->in[0]->def->op == OP_ARG) continue;
    const Value *X = d->in[0];
    int ax = X->shape.rank - 1, ns = 0;
    if (d->a.axis != ax) continue;
    int64_t covered = 0;
    bool ok = true;
    for (int j = nc; j < nc + nx && ok; j++) { /* every saved slice of X B reads, each once */
      Value *z = B->in[j];
      if (z->def != F || z->idx < F->a.ncarry) continue;
      Node *e = F->body->results[z->idx]->def;
      if (e->op != OP_SLICE || e->in[0] != X || e->a.axis != ax) continue;
      for (int k = 0; k < ns && ok; k++) ok = same[k] != e;
      if (!ok || ns == 16 || !strided_reads(r->bb, r->bb->args[j]->out[0])) ok = false;
      else same[ns++] = e, covered += e->a.len;
    }
    if (!ok || covered != X->shape.dim[ax]) continue; /* (distinct slices summing to the width: the columns) */
    for (int k = 0; k < ns; k++) ptrmap_put(&r->cols, same[k], 1);
  }
}

/* Selective, on every target: the adds a GEMM's epilogue would absorb (its bias, the residual after it, or the residual
 * alone where it has none: epilogue_reach, in F's body as autodiff left it) are the GEMM's output, kept where B reads
 * them rather than recomputed from the GEMM's own, which B would then keep: as many bytes (each such add is of the
 * GEMM's output type, read once but the last), no recomputed add in B, and on the CUDA target the forward keeps its
 * epilogue (the GEMM's output read by the add alone) and B its DGELU one (GELU's backward reads the kept bias add,
 * made before the GEMM of the incoming gradient). GELU after the bias add stays recomputed (one pass in B). On the
 * CUDA target with the epilogues on, under full recompute too, the GELUs such a GEMM absorbs (epig: dgelu_first's). */
static void epi_keep(Rc *r) {
  if (r->kind == RECOMPUTE_NONE || (!r->epi && r->kind != RECOMPUTE_SELECTIVE)) return;
  PtrMap u = {0};
  count_uses(r->fb, &u);
  for (int i = 0; i < r->fb->nnodes; i++) {
    int at[2], e = r->fb->nodes[i]->op == OP_MATMUL ? epilogue_reach(r->fb, &u, i, at) : 0;
    for (int k = 0; k < e; k++)
      if (r->fb->nodes[at[k]]->op == OP_ADD || (r->epi && r->fb->nodes[at[k]]->op == OP_GELU))
        ptrmap_put(r->fb->nodes[at[k]]->op == OP_ADD ? &r->epik : &r->epig, r->fb->nodes[at[k]], 1);
  }
  ptrmap_free(&u);
}

/* Whether B's nodes from i on (its original ones, `nodes`) or its results read B's argument a (a zb B loop keeps
 * arguments only its W reads: passes/pipe_split.c). */
static bool read_from(const Rc *r, Node *const *nodes, int i, int n0, const Value *a) {
  for (int j = i; j < n0; j++) {
    for (int k = 0; k < nodes[j]->nin; k++)
      if (nodes[j]->in[k] == a) return true;
    if (nodes[j]->body && uses(nodes[j]->body, a)) return true;
  }
  for (int k = 0; k < r->bb->nresults; k++)
    if (r->bb->results[k] == a) return true;
  return false;
}

/* Full recompute: a GEMM whose output GELU's backward alone reads, with a recomputed pre-activation: that recomputed
 * first, before the GEMM (its epilogue computes GELU's backward as it stores, reading the pre-activation: DGELU), and
 * the GELU of it B reads with it where the forward's GEMM stores both (its GELU_AUX_BIAS epilogue, epi_keep: not
 * where a layer's bias is cast between them, which would only hold the GELU's output longer). */
static void dgelu_first(Rc *r, Node **nodes, int i, int n0, Value **old, int nold) {
  Node *mm = nodes[i];
  if (!r->epi || mm->op != OP_MATMUL) return;
  for (int j = i + 1; j < n0; j++) {
    Node *gb = nodes[j];
    bool reads = false;
    for (int k = 0; k < gb->nin; k++) reads |= gb->in[k] == mm->out[0];
    if (!reads && !(gb->body && uses(gb->body, mm->out[0]))) continue;
    intptr_t fv, gv;
    if (gb->op != OP_GELU_BWD || gb->in[1] != mm->out[0] || gb->in[0] == mm->out[0] || !ptrmap_get(&r->recomp, gb->in[0], &fv))
      return;
    Graph *bb = r->bb;
    int before = bb->nnodes;
    gb->in[0] = materialize(r, (Value *)fv);
    for (int k = 0; k < nold; k++) {
      intptr_t one;
      Value *g = ptrmap_get(&r->recomp, old[k], &gv) ? (Value *)gv : NULL;
      if (g && g->def->in[0] == (Value *)fv && ptrmap_get(&r->epig, g->def, &one) && read_from(r, nodes, i, n0, old[k]))
        materialize(r, g);
    }
    /* the GEMM's operand cast for it alone before the recompute (passes/wcast.c's bf16 weight): after it, not
     * held through it */
    for (int k = 0; k < mm->nin; k++)
      for (int q = before - 1; q >= 0; q--) {
        Node *c = bb->nodes[q];
        if (c != mm->in[k]->def) continue;
        bool stays = c->op != OP_CAST; /* (read since: stays) */
        for (int t = q + 1; t < bb->nnodes && !stays; t++)
          for (int u = 0; u < bb->nodes[t]->nin; u++) stays |= bb->nodes[t]->in[u] == c->out[0];
        if (stays) break;
        memmove(&bb->nodes[q], &bb->nodes[q + 1], sizeof(Node *) * (size_t)(bb->nnodes - q - 1));
        bb->nodes[bb->nnodes - 1] = c;
        break;
      }
    return;
  }
}

/* Recomputes in B's body what B reads of F that the mode does not keep; drops the rest. */
static void recompute_pair(RecomputeKind kind, bool cuda, Node *F, Node *B, PtrMap *outer, Node *Bsrc, PtrMap *bmemo,
                           PtrMap *keep, Module *m) {
  Rc r = {.kind = kind, .cuda = cuda, .F = F, .B = B, .fb = F->body, .bb = B->body, .outer = outer,
          .Bsrc = Bsrc, .bmemo = bmemo, .epi = m->target == TARGET_CUDA && fuse_on(m, FUSE_EPILOGUE)};
  Graph *bb = B->body;
  int nc = B->a.ncarry, nx0 = B->a.nxs;
  cols_of(&r);
  epi_keep(&r);
  /* the residual arguments to replace: stacked outputs of F whose body value is not kept */
  Value **old = ARENA_ARRAY(bb->arena, Value *, nx0 + 1); /* B args replaced */
  int nold = 0;
  for (int i = nc; i < nc + nx0; i++) {
    Value *x = B->in[i];
    if (x->def != F || x->idx < F->a.ncarry) continue;
    Value *v = F->body->results[x->idx];
    Node *d = v->def; /* an argument (the block's input) or a value the mode keeps: stays */
    if (d->graph != F->body || d->op == OP_ARG || !recomputed(&r, d)) continue;
    ptrmap_put(&r.recomp, bb->args[i]->out[0], (intptr_t)v);
    old[nold++] = bb->args[i]->out[0];
  }
  r.frozen = true;
  if (!nold) {
    ptrmap_free(&r.recomp);
    ptrmap_free(&r.cols);
    ptrmap_free(&r.unary);
    ptrmap_free(&r.epik);
    ptrmap_free(&r.epig);
    return;
  }
  /* rebuild B's body: its arguments first (a clone may read any), then its nodes, each
   * recomputed value right before its first reader */
  int n0 = bb->nnodes;
  Node **nodes = ARENA_ARRAY(bb->arena, Node *, n0 + 1);
  memcpy(nodes, bb->nodes, sizeof(Node *) * (size_t)n0);
  bb->nnodes = 0;
  ir_touch(bb);
  for (int i = 0; i < n0; i++)
    if (nodes[i]->op == OP_ARG) bb->nodes[bb->nnodes++] = nodes[i];
  /* selective under cp ring: the attention's re-run ring first, before the layer's backward, not where its
   * output projection's backward first reads it: its hops would stand between the layer's gradients and split
   * their reduce-scatters' runs (passes/zero_coalesce.c: a run ends at a transfer); the merged output is then
   * live through the MLP's backward, in the body's own memory */
  for (int k = 0; r.kind == RECOMPUTE_SELECTIVE && k < nold; k++) {
    intptr_t fv;
    ptrmap_get(&r.recomp, old[k], &fv);
    if (((Value *)fv)->def->op == OP_ATTN_COMBINE || ((Value *)fv)->def->op == OP_ATTN_BLOCK) materialize(&r, (Value *)fv);
  }
  for (int i = 0; i < n0; i++) {
    Node *n = nodes[i];
    if (n->op == OP_ARG) continue;
    dgelu_first(&r, nodes, i, n0, old, nold);
    for (int j = 0; j < n->nin; j++) {
      intptr_t fv;
      if (ptrmap_get(&r.recomp, n->in[j], &fv)) n->in[j] = materialize(&r, (Value *)fv);
    }
    for (int k = 0; n->body && k < nold; k++)
      if (uses(n->body, old[k])) {
        intptr_t fv;
        ptrmap_get(&r.recomp, old[k], &fv);
        replace_deep(n->body, old[k], materialize(&r, (Value *)fv));
      }
    arena_grow(bb->arena, (void **)&bb->nodes, &bb->capnodes, bb->nnodes + 1, sizeof(Node *));
    bb->nodes[bb->nnodes++] = n;
  }
  for (int k = 0; k < bb->nresults; k++) {
    intptr_t fv;
    if (ptrmap_get(&r.recomp, bb->results[k], &fv)) bb->results[k] = materialize(&r, (Value *)fv);
  }
  /* drop B's replaced arguments, then F's outputs nobody reads any more */
  for (int i = B->a.ncarry + B->a.nxs - 1; i >= B->a.ncarry; i--) {
    Value *a = bb->args[i]->out[0];
    intptr_t fv;
    if (!ptrmap_get(&r.recomp, a, &fv) || uses(bb, a)) continue;
    Value *x = B->in[i];
    intptr_t nx = 0;
    ir_repeat_remove_arg(B, i);
    add_use(outer, x, -1);
    B->a.nxs--;
    if (x->def == F && x->idx >= F->a.ncarry && ptrmap_get(outer, x, &nx) && nx == 0) remove_output(F, x->idx);
  }
  ir_remove_dead(F->body);
  if (keep) *keep = r.memo; /* (a zb B loop's, for its W: from_b) */
  else ptrmap_free(&r.memo);
  if (r.held_bytes > m->zbw.bytes) m->zbw.bytes = r.held_bytes, m->zbw.values = r.held; /* (the largest W's) */
  ptrmap_free(&r.recomp);
  ptrmap_free(&r.cols);
  ptrmap_free(&r.unary);
  ptrmap_free(&r.epik);
  ptrmap_free(&r.epig);
}

Node *rc_forward_of(const Node *B) {
  for (int i = B->a.ncarry; i < B->a.ncarry + B->a.nxs; i++) {
    Node *d = B->in[i]->def;
    if (d->op == OP_REPEAT && d != B && d->graph == B->graph && B->in[i]->idx >= d->a.ncarry &&
        d->a.count == B->a.count && d->a.reverse != B->a.reverse)
      return d;
  }
  return NULL;
}

Node *rc_b_of_w(const Node *W, const Node *F) {
  if (W->a.ncarry) return NULL;
  for (int i = 0; i < W->a.nxs; i++) {
    Node *d = W->in[i]->def;
    if (d != F && d->op == OP_REPEAT && d->graph == W->graph && d->a.count == W->a.count && d->a.reverse == W->a.reverse &&
        d->a.ncarry && rc_forward_of(d) == F)
      return d;
  }
  return NULL;
}

/* Pairs in g, and in the bodies of g's other regions (the accumulation region's micro-step holds
 * the layers' forward and backward loops). A zb W loop is recomputed after its B, from what B's
 * recompute made (from_b): B's memo is kept (memos) until its W has been. */
static int recompute_graph(RecomputeKind kind, bool cuda, Graph *g, Module *m, const PtrMap *lo) {
  int nw = 0; /* zb's W loops met */
  PtrMap outer = {0}; /* the reads of g's values, made at the first pair */
  PtrMap memos = {0}; /* a B loop -> its memo (PtrMap *), while its W has not been recomputed */
  bool counted = false;
  for (int i = 0; i < g->nnodes; i++) {
    Node *B = g->nodes[i];
    if (B->op != OP_REPEAT) continue;
    Node *F = rc_forward_of(B);
    if (!F) {
      nw += recompute_graph(kind, cuda, B->body, m, lo);
      continue;
    }
    if (!counted) count_uses(g, &outer);
    counted = true;
    Node *Bsrc = rc_b_of_w(B, F);
    intptr_t got = 0, other;
    bool hold = m->zbw.held && m->plan.schedule == SCHED_ZB && !ptrmap_get(lo, Bsrc ? Bsrc : B, &other); /* (lo: hold(N)'s others) */
    if (Bsrc) nw++;
    if (Bsrc && hold && !ptrmap_get(&memos, Bsrc, &got)) die("recompute: a zb W loop before its B loop");
    PtrMap *bmemo = (PtrMap *)got, *keep = NULL;
    if (hold && !Bsrc && B->a.ncarry) {
      keep = calloc(1, sizeof *keep);
      if (!keep) die("out of memory");
      ptrmap_put(&memos, B, (intptr_t)keep);
    }
    recompute_pair(kind, cuda, F, B, &outer, Bsrc, bmemo, keep, m);
    if (bmemo) { /* (one W per B) */
      ptrmap_free(bmemo);
      free(bmemo);
      ptrmap_put(&memos, Bsrc, 0);
    }
  }
  for (int k = 0; k < memos.cap; k++)
    if (memos.slots[k].key && memos.slots[k].val) {
      ptrmap_free((PtrMap *)memos.slots[k].val);
      free((PtrMap *)memos.slots[k].val);
    }
  ptrmap_free(&memos);
  ptrmap_free(&outer);
  return nw;
}

/* `zb_w auto`'s why, from the driver's figures (Plan.fit.zbw, zbw_layers, zbw_whole) and the hold's cut
 * (m->zbw.layers): the pass's, and the driver's again where it reuses a compile with new figures (replan.c). */
const char *recompute_zbw_auto_why(Module *m) {
  const Plan *p = &m->plan;
  double mib = 1 << 20;
  if (m->zbw.layers > 0) /* auto's partial hold (replan.c, partial_hold) */
    return arena_printf(m->arena, "the plan with the whole hold needs %.1f MiB per rank, over the device's %.1f MiB; "
                              "with the hold for the last %d layers, the most that fit: %.1f MiB",
                              (double)p->fit.zbw_whole / mib, p->fit.zbw.cap / mib, m->zbw.layers, (double)p->fit.zbw.total / mib);
  return fit_auto_why(m, p->fit.zbw, "the hold", "it fits", "the hold");
}

bool pass_recompute(Module *m) {
  /* none: the column slices only (and fused_unary's, on the CUDA target) */
  const Plan *p = &m->plan;
  memset(&m->zbw, 0, sizeof m->zbw);
  /* zb's W under recompute (from_b): held where `zb_w hold`, or auto where the plan with the hold fits the
   * device and no plan without it that fits is faster, as the driver decided it with the other memory-dependent
   * auto choices (replan.c, auto_memory), else recomputed from the forward's saved values */
  bool unfit = fit_figure_over((double)p->fit.zbw.total, p->fit.zbw.cap);
  m->zbw.held = p->zb_w == ZBW_HOLD || (p->zb_w == ZBW_AUTO && !unfit && !p->fit.zbw.lost);
  /* hold(N) (or auto's partial hold): the triples over more than N layers cut, the lo parts recomputing */
  int part = p->zb_w == ZBW_HOLD ? p->zb_w_layers : p->zb_w == ZBW_AUTO ? p->fit.zbw_layers : 0;
  for (int i = 0; i < m->graph->nnodes; i++) { /* (the driver's partial_hold and the fit check's knob read it) */
    Node *W = m->graph->nodes[i], *F = W->op == OP_REPEAT ? rc_forward_of(W) : NULL;
    if (F && rc_b_of_w(W, F) && W->a.count > m->zbw.stage_layers) m->zbw.stage_layers = (int)W->a.count;
  }
  PtrMap lo = {0};
  if (m->zbw.held && part > 0 && p->schedule == SCHED_ZB && p->recompute != RECOMPUTE_NONE && recompute_split_hold(m->graph, part, &lo))
    m->zbw.layers = part;
  int nw = recompute_graph(p->recompute, m->target == TARGET_CUDA && fuse_on(m, FUSE_SWIGLU), m->graph, m, &lo);
  ptrmap_free(&lo);
  if (!nw || p->recompute == RECOMPUTE_NONE) {
    if (p->zb_w != ZBW_AUTO) { /* written, and no W recomputes anything: refused, not ignored */
      error_at(p->opt_loc[PLAN_OPT_ZB_W],
               "`zb_w %s%s`: it chooses whether the zero-bubble schedule's W loops hold what B's recompute made or "
               "recompute it; this plan has %s", ir_zb_w_names[p->zb_w], p->zb_w_layers > 0 ? "(N)" : "",
               nw ? "no recompute (W reads the forward's saved values)" : "no zero-bubble schedule (`schedule zb`)");
      note("leave `zb_w` out (auto) to let shardc choose");
      return false;
    }
    memset(&m->zbw, 0, sizeof m->zbw);
    return true;
  }
  if (p->zb_w == ZBW_HOLD && p->zb_w_layers > 0)
    m->zbw.why = arena_printf(m->arena, "zb_w hold(%d) (the plan)%s", p->zb_w_layers,
                              m->zbw.layers ? "" : ": no stage has more layers, all held");
  else if (p->zb_w != ZBW_AUTO) m->zbw.why = p->zb_w == ZBW_HOLD ? "zb_w hold (the plan)" : "zb_w recompute (the plan)";
  else m->zbw.why = recompute_zbw_auto_why(m), m->zbw.why_fit = true;
  return true;
}
