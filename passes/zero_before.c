/* passes/zero_before.c — nodes placed right before their readers in one pass over a graph, for the zero
 * pass's prefetch (passes/zero.c, prefetch_layer): each layer loop of the pipelined step that reads a stored
 * shard gets three nodes before it (the first layer's row, its reshape, its gather). Moved into place one
 * loop at a time, each move shifted the step's later nodes (Llama-3-405B pp 16 x cp 2: ~10^5 node pointers,
 * some 770 loops per parameter); recorded here, they are placed once per parameter, each loop's in the order
 * recorded (the order the moves gave). Until then they are the graph's last nodes (zero_before_pending). */
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "ptrmap.h"
#include "zero.h"

void zero_before_add(ZeroBefore *d, Node *anchor, Node *x) {
  if (d->n == d->cap) { /* (malloc'd, freed by zero_before_place: the arena keeps what it is given to the end) */
    d->cap = d->cap ? 2 * d->cap : 256;
    d->anchor = realloc(d->anchor, sizeof *d->anchor * (size_t)d->cap);
    d->node = realloc(d->node, sizeof *d->node * (size_t)d->cap);
    if (!d->anchor || !d->node) die("zero: out of memory");
  }
  d->anchor[d->n] = anchor, d->node[d->n] = x;
  d->n++;
}

int zero_before_pending(const ZeroBefore *d, const Graph *g) { return d && d->g == g ? d->n : 0; }

void zero_before_place(ZeroBefore *d) {
  Graph *g = d->g;
  if (!d->n) {
    free(d->anchor), free(d->node);
    return;
  }
  PtrMap head = {0}, last = {0}; /* anchor -> 1 + its first / last record */
  int *next = malloc(sizeof *next * (size_t)d->n);
  Node **out = malloc(sizeof *out * (size_t)g->nnodes);
  if (!next || !out) die("zero: out of memory");
  for (int k = 0; k < d->n; k++) {
    intptr_t t;
    next[k] = -1;
    if (ptrmap_get(&last, d->anchor[k], &t)) next[t - 1] = k;
    else ptrmap_put(&head, d->anchor[k], k + 1);
    ptrmap_put(&last, d->anchor[k], k + 1);
  }
  int keep = g->nnodes - d->n, w = 0; /* (the recorded nodes: the last d->n, in the order recorded) */
  for (int k = 0; k < d->n; k++)
    if (g->nodes[keep + k] != d->node[k]) die("zero: node %d of %d recorded to place is not where it was made", k, d->n);
  for (int i = 0; i < keep; i++) {
    intptr_t t = 0;
    ptrmap_get(&head, g->nodes[i], &t);
    for (int k = (int)t - 1; k >= 0; k = next[k]) out[w++] = d->node[k];
    out[w++] = g->nodes[i];
  }
  if (w != g->nnodes) die("zero: %d of %d nodes placed (a recorded node's reader is not in the graph)", w, g->nnodes);
  memcpy(g->nodes, out, sizeof(Node *) * (size_t)w);
  ir_touch(g);
  ptrmap_free(&head);
  ptrmap_free(&last);
  free(next), free(out), free(d->anchor), free(d->node);
  *d = (ZeroBefore){.g = g};
}
