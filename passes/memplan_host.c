/* passes/memplan_host.c — the memory plan's host allocation under plan `offload` (memplan.c calls it
 * first: the host values are placed apart from the device's). */
#include "memplan_pack.h"
#include "offload_sched.h"

#define value_bytes memplan_bytes
#define is_update memplan_is_update

/* Plan `offload`: the top graph's host values (passes/zero_offload.c) in the host allocation. The state
 * first (persistent); then the to_host copies, each live from the start of its download (which
 * passes/offload_sched.c moves early: a parameter's at the step's start, a layer gradient's rows
 * inside the backward loop) to its last reader (or, for an update's parameter shard, to the last
 * reader of the update's result, which takes its bytes and is uploaded from them), packed like the
 * device's transients; an update's results on what it updates (in place). */
void memplan_place_host(Graph *g, MemPlan *mp, Arena *tmp) {
  int64_t off = 0;
  for (int i = 0; i < g->nnodes; i++) {
    Value *v = g->nodes[i]->nout ? g->nodes[i]->out[0] : NULL;
    if (!v || !v->host || !(ir_ops[g->nodes[i]->op].flags & F_SOURCE)) continue;
    v->offset = off;
    v->mclass = g->nodes[i]->op == OP_PARAM ? MEM_PARAM : MEM_OPTIM; /* (the f32 master weights: passes/zero.c) */
    off += memplan_align(value_bytes(v));
    if (g->nodes[i]->op == OP_PARAM) mp->host_params += memplan_align(value_bytes(v));
    mp->nvalues++;
  }
  mp->host_state = off;
  Intervals p = {.a = tmp};
  for (int i = 0; i < g->nnodes; i++) { /* (and a bf16 gradient's host cast: from the node) */
    Node *n = g->nodes[i];
    bool cast = n->op == OP_CAST && n->out[0]->host;
    if (n->op != OP_TO_HOST && !cast) continue;
    int from = cast ? i : offload_issue(g, n).after;
    if (cast && i > 0 && g->nodes[i - 1] == n->in[0]->def && is_update(g->nodes[i - 1]->op))
      from = i - 1; /* the bf16 copy of the master the update makes: codegen stores it in the update's pass */
    Interval *it = memplan_add_interval(&p, n->out[0], value_bytes(n->out[0]), from < 0 ? 0 : from, MEM_ACT);
    it->end = i;
    for (int j = i + 1; j < g->nnodes; j++)
      for (int k = 0; k < g->nodes[j]->nin; k++) {
        const Node *u = g->nodes[j];
        if (u->in[k] == n->out[0] && j > it->end) /* (an upload reads it until the device waits for it) */
          it->end = u->op == OP_TO_DEVICE ? offload_upload_wait(g, u) : j;
        if (it->end > g->nnodes - 1) it->end = g->nnodes - 1;
        if (is_update(u->op) && u->in[0] == n->out[0]) /* its result, in place: read after it */
          for (int q = j + 1; q < g->nnodes; q++)
            for (int r = 0; r < g->nodes[q]->nin; r++)
              if (g->nodes[q]->in[r] == u->out[0]) { /* (an upload reads it until the device waits for it) */
                int e = g->nodes[q]->op == OP_TO_DEVICE ? offload_upload_wait(g, g->nodes[q]) : q;
                if (e > g->nnodes - 1) e = g->nnodes - 1;
                if (e > it->end) it->end = e;
              }
      }
  }
  int64_t size = memplan_pack(p.iv, p.n, tmp, NULL);
  for (int i = 0; i < p.n; i++) {
    p.iv[i].v->offset = off + p.iv[i].offset;
    p.iv[i].v->mclass = MEM_ACT;
    mp->nvalues++;
  }
  for (int i = 0; i < g->nnodes; i++) { /* an update's results: on what it updates */
    Node *n = g->nodes[i];
    if (!is_update(n->op) || !n->out[0]->host) continue;
    for (int k = 0; k < n->nout; k++) {
      const Value *x = n->in[k == 0 ? 0 : k + 1]; /* p' <- p, m' <- m, v' <- v */
      n->out[k]->offset = x->offset;
      n->out[k]->mclass = x->mclass;
      mp->nvalues++;
    }
  }
  mp->host_total = off + size;
}
