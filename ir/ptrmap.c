/* ir/ptrmap.c — pointer-keyed hash map. */
#include "ptrmap.h"

#include <stdlib.h>
#include <string.h>

#include "diag.h"

static uint64_t hash_ptr(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

void ptrmap_put(PtrMap *m, const void *key, intptr_t val) {
  if ((m->count + 1) * 2 > m->cap) {
    PtrMap old = *m;
    m->cap = old.cap ? old.cap * 2 : 64;
    m->count = 0;
    m->slots = calloc((size_t)m->cap, sizeof *m->slots);
    if (!m->slots) die("out of memory growing a map to %d slots", m->cap);
    for (int i = 0; i < old.cap; i++)
      if (old.slots[i].key) ptrmap_put(m, old.slots[i].key, old.slots[i].val);
    free(old.slots);
  }
  uint64_t i = hash_ptr(key) & (uint64_t)(m->cap - 1);
  while (m->slots[i].key && m->slots[i].key != key) i = (i + 1) & (uint64_t)(m->cap - 1);
  if (!m->slots[i].key) m->count++;
  m->slots[i] = (PtrSlot){key, val};
}

bool ptrmap_get(const PtrMap *m, const void *key, intptr_t *val) {
  if (!m->cap) return false;
  uint64_t i = hash_ptr(key) & (uint64_t)(m->cap - 1);
  while (m->slots[i].key) {
    if (m->slots[i].key == key) {
      if (val) *val = m->slots[i].val;
      return true;
    }
    i = (i + 1) & (uint64_t)(m->cap - 1);
  }
  return false;
}

void ptrmap_free(PtrMap *m) {
  free(m->slots);
  memset(m, 0, sizeof *m);
}
