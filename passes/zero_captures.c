/* passes/zero_captures.c — the values each region body reads from the graphs around it (its captures,
 * its nested bodies' included), for the zero pass's question "does a node of body b, or of a body in
 * it, read p?" (passes/zero_gather.c, reads_deep) where p is a value of a graph around b. ZeRO-3 asks it of
 * every body a parameter's readers walk into, per parameter: over a pipelined step (Llama-3-405B
 * pp 16 x cp 2: hundreds of parameters, thousands of region bodies) a walk of each body per question
 * was the pass's largest cost. Each body's captures are found once (a body shared by many nodes, once),
 * sorted, and a question is a binary search. readers_can_gather (zero_gather.c) asks it too, with whether the body
 * yields a capture unchanged (zero_captures_yields_outer), to skip a body with no reader of p.
 *
 * The answers are those of the walk at the time the body was first asked, which the zero pass keeps true:
 * its rewrites add readers of a parameter (the gathers, the prefetch's row) only in graphs that read it
 * already, and a reader it removes (the gathered copy read instead) is of the body being rewritten, after
 * the question. */
#include <stdlib.h>

#include "ptrmap.h"
#include "zero.h"

typedef struct {
  const Value **v; /* ascending by address, each once */
  int n;
  bool yields_outer; /* a result of b, or of a body in it, is a value of a graph around that body */
} Captures;

struct ZeroCaptures {
  Arena *a;
  PtrMap of; /* Graph * -> its Captures * */
};

ZeroCaptures *zero_captures_new(Arena *a) {
  ZeroCaptures *c = ARENA_NEW(a, ZeroCaptures);
  c->a = a;
  return c;
}

void zero_captures_free(ZeroCaptures *c) {
  if (c) ptrmap_free(&c->of);
}

static int ptr_cmp(const void *x, const void *y) {
  uintptr_t p = (uintptr_t) * (const Value *const *)x, q = (uintptr_t) * (const Value *const *)y;
  return (p > q) - (p < q);
}

/* Whether v is a value of a graph around b (not of b itself nor of a body in it). */
static bool outside(const Graph *b, const Value *v) {
  for (const Graph *g = v->def->graph; g; g = g->parent)
    if (g == b) return false;
  return true;
}

static const Captures *captures_of(ZeroCaptures *c, const Graph *b) {
  intptr_t got;
  if (ptrmap_get(&c->of, b, &got)) return (const Captures *)got;
  int n = 0, cap = 16;
  const Value **v = malloc(sizeof *v * (size_t)cap);
  bool yields = false;
  for (int i = 0; i < b->nresults; i++) yields |= b->results[i]->def->graph != b;
  for (int i = 0; i < b->nnodes; i++) {
    const Node *x = b->nodes[i];
    const Captures *inner = x->body ? captures_of(c, x->body) : NULL;
    yields |= inner && inner->yields_outer;
    int more = x->nin + (inner ? inner->n : 0);
    if (n + more > cap) {
      while (n + more > cap) cap *= 2;
      v = realloc(v, sizeof *v * (size_t)cap);
    }
    for (int j = 0; j < x->nin; j++)
      if (x->in[j]->def->graph != b) v[n++] = x->in[j];
    for (int j = 0; inner && j < inner->n; j++)
      if (outside(b, inner->v[j])) v[n++] = inner->v[j];
  }
  qsort(v, (size_t)n, sizeof *v, ptr_cmp);
  Captures *k = ARENA_NEW(c->a, Captures);
  k->v = ARENA_ARRAY(c->a, const Value *, n + 1);
  for (int i = 0; i < n; i++)
    if (!i || v[i] != v[i - 1]) k->v[k->n++] = v[i];
  k->yields_outer = yields;
  free(v);
  ptrmap_put(&c->of, b, (intptr_t)k);
  return k;
}

bool zero_captures_reads(ZeroCaptures *c, const Graph *b, const Value *p) {
  const Captures *k = captures_of(c, b);
  int lo = 0, hi = k->n;
  while (lo < hi) {
    int m = (lo + hi) / 2;
    if ((uintptr_t)k->v[m] < (uintptr_t)p) lo = m + 1;
    else hi = m;
  }
  return lo < k->n && k->v[lo] == p;
}

bool zero_captures_yields_outer(ZeroCaptures *c, const Graph *b) {
  return captures_of(c, b)->yields_outer;
}

const Value *const *zero_captures_list(ZeroCaptures *c, const Graph *b, int *n) {
  const Captures *k = captures_of(c, b);
  *n = k->n;
  return k->v;
}
