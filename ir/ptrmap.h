/* ir/ptrmap.h — a hash map from pointers (nodes, values) to integers or pointers.
 * A zeroed PtrMap is empty; ptrmap_free releases it. Open addressing, linear probing. */
#ifndef SHARDC_PTRMAP_H
#define SHARDC_PTRMAP_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
  const void *key; /* NULL: an empty slot */
  intptr_t val;
} PtrSlot;

typedef struct {
  PtrSlot *slots; /* [cap]: a key beside its value, so that a hit reads one cache line */
  int cap;        /* slots, a power of two */
  int count;         /* keys stored */
} PtrMap;

void ptrmap_put(PtrMap *m, const void *key, intptr_t val); /* inserts or replaces */
bool ptrmap_get(const PtrMap *m, const void *key, intptr_t *val);
/* Adds delta to key's value (0 when absent) in one probe; returns the sum. */
intptr_t ptrmap_add(PtrMap *m, const void *key, intptr_t delta);
/* Room for n keys in all without growing (a map about to take that many). */
void ptrmap_reserve(PtrMap *m, int n);
void ptrmap_free(PtrMap *m);

#endif
