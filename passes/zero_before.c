/* passes/zero_before.c — nodes placed right before their readers in one pass over a graph, for the zero
 * pass's prefetch (passes/zero_gather.c, prefetch_layer): each layer loop of the pipelined step that reads a stored
 * shard gets three nodes before it (the first layer's row, its reshape, its gather). Moved into place one
 * loop at a time, each move shifted the step's later nodes (Llama-3-405B pp 16 x cp 2: up to ~10^5 node
 * pointers; 8,192 loops per stacked parameter, 16 stages x 256 micro-batches, forward and backward).
 * Recorded here, they are placed once per parameter, each loop's in the order recorded (the order the moves
 * gave). Until then they are the graph's last nodes (zero_before_pending). */
#include <stdlib.h>

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
  PtrMap last = {0}; /* anchor -> 1 + its last record */
  int *prev = malloc(sizeof *prev * (size_t)(d->n + 1)); /* a record -> the one before it of its anchor (-1) */
  if (!prev) die("zero: out of memory");
  for (int k = 0; k < d->n; k++) {
    intptr_t t = 0;
    ptrmap_get(&last, d->anchor[k], &t);
    prev[k] = (int)t - 1;
    ptrmap_put(&last, d->anchor[k], k + 1);
  }
  int keep = g->nnodes - d->n, w = g->nnodes; /* (the recorded nodes: the last d->n, in the order recorded) */
  for (int k = 0; k < d->n; k++)
    if (g->nodes[keep + k] != d->node[k]) die("zero: node %d of %d recorded to place is not where it was made", k, d->n);
  /* in place from the back (a node moves only to a later place: w stays past i), each anchor after its records */
  for (int i = keep - 1; i >= 0; i--) {
    Node *x = g->nodes[i];
    intptr_t t = 0;
    g->nodes[--w] = x;
    ptrmap_get(&last, x, &t);
    for (int k = (int)t - 1; k >= 0; k = prev[k]) g->nodes[--w] = d->node[k];
  }
  if (w != 0) die("zero: %d nodes recorded to place have no reader in the graph", w);
  if (d->n) ir_touch(g);
  ptrmap_free(&last);
  free(prev), free(d->anchor), free(d->node);
  *d = (ZeroBefore){.g = g};
}
