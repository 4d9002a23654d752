/* passes/inline.c — expands layer CALLs in place and hoists repeat parameters to the top graph.
 *
 * 1. Every CALL node (in the top graph and, recursively, in REPEAT bodies) is
 *    replaced by its body's nodes: body ARG i stands for the call's input i, and
 *    the call's output j becomes body result j.
 * 2. A PARAM left inside a REPEAT body (count N) moves to the enclosing graph as
 *    one stacked parameter of shape [N, ...] with the same name; the REPEAT takes
 *    it as a stacked input (xs) and the body reads this iteration's slice through
 *    a new ARG. Nested repeats stack again ([N1, N2, ...]), so in the end every
 *    PARAM is in the top graph and no CALL remains. The repeat stays one region,
 *    so the work is proportional to the model's text, not to its layer count.
 */
#include <stdint.h>
#include <string.h>

#include "diag.h"
#include "infer.h"
#include "passes.h"
#include "ptrmap.h"

/* ---- Value* -> Value* (ir/ptrmap.h) ------------------------------------------------ */
static void vmap_put(PtrMap *m, const Value *k, Value *v) { ptrmap_put(m, k, (intptr_t)v); }

/* The value v stands for, following chains (an ARG mapped to a call output mapped to ...). */
static Value *vmap_get(const PtrMap *m, Value *v) {
  intptr_t next;
  for (int hops = 0; hops < 1000000 && ptrmap_get(m, v, &next); hops++) v = (Value *)next;
  return v;
}

/* ---- 1. expanding calls ------------------------------------------------------------ */
static void push_node(Graph *g, Node ***list, int *n, int *cap, Node *x) {
  arena_grow(g->arena, (void **)list, cap, *n + 1, sizeof(Node *));
  (*list)[(*n)++] = x;
}

static void adopt(Graph *g, Node *n) {
  n->graph = g;
  n->id = g->next_node_id++;
  for (int i = 0; i < n->nout; i++) n->out[i]->id = g->next_value_id++;
  if (n->body) n->body->parent = g;
}

static void expand_calls(Graph *g, PtrMap *map) {
  Node **list = NULL;
  int n = 0, cap = 0;
  for (int i = 0; i < g->nnodes; i++) {
    Node *x = g->nodes[i];
    for (int j = 0; j < x->nin; j++) x->in[j] = vmap_get(map, x->in[j]);
    if (x->op == OP_REPEAT) {
      expand_calls(x->body, map);
      push_node(g, &list, &n, &cap, x);
    } else if (x->op == OP_CALL) {
      Graph *b = x->body;
      for (int a = 0; a < b->nargs; a++) vmap_put(map, b->args[a]->out[0], x->in[a]);
      expand_calls(b, map); /* nested calls; maps ARG uses to x's inputs */
      for (int k = 0; k < b->nnodes; k++) {
        Node *y = b->nodes[k];
        if (y->op == OP_ARG) continue;
        adopt(g, y);
        push_node(g, &list, &n, &cap, y);
      }
      if (b->nresults != x->nout) die("inline: call %s has %d outputs for %d results", x->a.name, x->nout, b->nresults);
      for (int r = 0; r < x->nout; r++) {
        Value *res = vmap_get(map, b->results[r]);
        if (!res->name && x->out[r]->name) res->name = x->out[r]->name;
        vmap_put(map, x->out[r], res);
      }
    } else {
      push_node(g, &list, &n, &cap, x);
    }
  }
  g->nodes = list;
  g->nnodes = n;
  g->capnodes = cap;
  for (int r = 0; r < g->nresults; r++) g->results[r] = vmap_get(map, g->results[r]);
}

/* ---- 2. hoisting repeat parameters ---------------------------------------------------- */
static bool hoist(Graph *g);

/* Moves rep's body PARAMs to g (appended to list before rep). */
static bool hoist_repeat(Graph *g, Node *rep, Node ***list, int *n, int *cap) {
  Graph *b = rep->body;
  if (!hoist(b)) return false;
  int np = 0;
  for (int i = 0; i < b->nnodes; i++) np += b->nodes[i]->op == OP_PARAM;
  if (np == 0) return true;

  Arena *a = g->arena;
  PtrMap map = {0};
  Node **params = ARENA_ARRAY(a, Node *, np);
  Node **args = ARENA_ARRAY(a, Node *, np);
  int norig = b->nnodes, k = 0;
  for (int i = 0; i < norig; i++) {
    Node *p = b->nodes[i];
    if (p->op != OP_PARAM) continue;
    Value *v = p->out[0];
    if (v->shape.rank + 1 > IR_MAX_RANK) {
      error_at(p->loc, "parameter `%s` has %d dims; inside `repeat` it gains one more, and tensors have at most %d",
               p->a.name ? p->a.name : "?", v->shape.rank, IR_MAX_RANK);
      ptrmap_free(&map);
      return false;
    }
    Node *arg = ir_node_new(b, OP_ARG, 0, NULL, 1, p->loc); /* appended; placed below */
    arg->out[0]->dtype = v->dtype;
    arg->out[0]->shape = v->shape;
    arg->out[0]->name = v->name;
    vmap_put(&map, v, arg->out[0]);
    params[k] = p;
    args[k] = arg;
    k++;
  }
  /* The body: each PARAM's place taken by its ARG; uses renamed. */
  for (int i = 0, j = 0; i < norig; i++) {
    Node *x = b->nodes[i];
    if (x->op == OP_PARAM) x = args[j++];
    b->nodes[i] = x;
    for (int q = 0; q < x->nin; q++) x->in[q] = vmap_get(&map, x->in[q]);
  }
  b->nnodes = norig;
  for (int r = 0; r < b->nresults; r++) b->results[r] = vmap_get(&map, b->results[r]);
  ptrmap_free(&map);

  /* Body args: (carry.., xs.., new xs.., captured..). */
  int at = rep->a.ncarry + rep->a.nxs, nargs = b->nargs + np;
  Node **nargv = ARENA_ARRAY(a, Node *, nargs);
  Value **nin = ARENA_ARRAY(a, Value *, nargs);
  for (int i = 0, j = 0; i < nargs; i++) {
    if (i >= at && i < at + np) {
      nargv[i] = args[i - at];
      nin[i] = params[i - at]->out[0];
    } else {
      nargv[i] = b->args[j];
      nin[i] = rep->in[j];
      j++;
    }
    nargv[i]->a.index = i;
  }
  b->args = nargv;
  b->nargs = b->capargs = nargs;
  rep->in = nin;
  rep->nin = nargs;
  rep->a.nxs += np;

  /* The PARAMs themselves: stacked [count, ...], now in g, just before rep. */
  for (int i = 0; i < np; i++) {
    Node *p = params[i];
    Value *v = p->out[0];
    Shape s = v->shape;
    for (int d = s.rank; d > 0; d--) {
      s.dim[d] = s.dim[d - 1];
      s.sym[d] = s.sym[d - 1];
    }
    s.rank++;
    s.dim[0] = rep->a.count;
    s.sym[0] = -1;
    v->shape = s;
    adopt(g, p);
    push_node(g, list, n, cap, p);
  }
  if (!ir_infer(rep)) die("inline: repeat %s no longer type-checks after hoisting", rep->a.name ? rep->a.name : "?");
  return true;
}

static bool hoist(Graph *g) {
  Node **list = NULL;
  int n = 0, cap = 0;
  for (int i = 0; i < g->nnodes; i++) {
    Node *x = g->nodes[i];
    if (x->op == OP_REPEAT && !hoist_repeat(g, x, &list, &n, &cap)) return false;
    push_node(g, &list, &n, &cap, x);
  }
  g->nodes = list;
  g->nnodes = n;
  g->capnodes = cap;
  return true;
}

bool pass_inline(Module *m) {
  PtrMap map = {0};
  expand_calls(m->graph, &map);
  ptrmap_free(&map);
  if (!hoist(m->graph)) return false;
  return diag_errors() == 0;
}
