/* ir/clone.c — copying a node, with its region body, into another graph (see clone.h). */
#include "clone.h"

/* A region body copied for a clone of its owner: outer values stay, the body's own are copies. */
static Graph *clone_body(Graph *parent, const Graph *src, PtrMap *memo) {
  Graph *nb = ir_graph_new(parent->arena, parent);
  for (int a = 0; a < src->nargs; a++) {
    const Value *v = src->args[a]->out[0];
    Node *x = ir_add_arg(nb, v->dtype, v->shape, v->name);
    x->out[0]->sharding = v->sharding;
    x->loc = src->args[a]->loc;
    ptrmap_put(memo, v, (intptr_t)x->out[0]);
  }
  for (int i = 0; i < src->nnodes; i++) {
    const Node *d = src->nodes[i];
    if (d->op == OP_ARG) continue;
    Value **in = ARENA_ARRAY(parent->arena, Value *, d->nin + 1);
    for (int j = 0; j < d->nin; j++) {
      intptr_t got;
      in[j] = ptrmap_get(memo, d->in[j], &got) ? (Value *)got : d->in[j];
    }
    ir_clone_node(nb, d, in, memo);
  }
  for (int r = 0; r < src->nresults; r++) {
    intptr_t got;
    ir_add_result(nb, ptrmap_get(memo, src->results[r], &got) ? (Value *)got : src->results[r], NULL);
  }
  return nb;
}

Node *ir_clone_node(Graph *dst, const Node *d, Value **in, PtrMap *memo) {
  Node *c = ir_node_new(dst, d->op, d->nin, in, d->nout, d->loc);
  c->a = d->a;
  for (int k = 0; k < d->nout; k++) {
    c->out[k]->dtype = d->out[k]->dtype;
    c->out[k]->shape = d->out[k]->shape;
    c->out[k]->sharding = d->out[k]->sharding;
    c->out[k]->name = d->out[k]->name;
    c->out[k]->offset = -1;
    ptrmap_put(memo, d->out[k], (intptr_t)c->out[k]);
  }
  if (d->body) {
    c->body = clone_body(dst, d->body, memo);
    c->body->owner = c;
  }
  return c;
}
