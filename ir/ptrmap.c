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

/* The slot arrays of large maps freed last, kept for the next maps of their size: a pass builds and
 * drops a map of every value of a large program many times over, and a fresh array from the system
 * costs a page fault per 4 KiB to zero (GPT-3's pp 32 plan: 2^21 slots, 32 MiB, past what glibc keeps
 * in its heap). Zeroing a kept one touches pages already there. */
enum { SPARE_SLOTS = 4, SPARE_MIN_BYTES = 1 << 20 };
static _Thread_local struct {
  PtrSlot *p;
  int cap;
} spare[SPARE_SLOTS];

static PtrSlot *slots_new(int cap) {
  for (int i = 0; i < SPARE_SLOTS; i++)
    if (spare[i].p && spare[i].cap == cap) {
      PtrSlot *p = spare[i].p;
      spare[i].p = NULL;
      memset(p, 0, (size_t)cap * sizeof *p);
      return p;
    }
  PtrSlot *p = calloc((size_t)cap, sizeof *p);
  if (!p) die("out of memory growing a map to %d slots", cap);
  return p;
}

static void slots_free(PtrSlot *p, int cap) {
  if (!p) return;
  if ((size_t)cap * sizeof *p < SPARE_MIN_BYTES) {
    free(p);
    return;
  }
  int k = 0; /* an empty place, else the smallest kept */
  for (int i = 0; i < SPARE_SLOTS; i++) {
    if (!spare[i].p) {
      k = i;
      break;
    }
    if (spare[i].cap < spare[k].cap) k = i;
  }
  if (spare[k].p && spare[k].cap > cap) {
    free(p);
    return;
  }
  free(spare[k].p);
  spare[k].p = p, spare[k].cap = cap;
}

/* Room for `need` keys at most half the slots (rehashed into a larger array when short). */
static void grow_for(PtrMap *m, int need) {
  if (need * 2 <= m->cap) return;
  PtrMap old = *m;
  int cap = old.cap ? old.cap : 64;
  while (need * 2 > cap) cap *= 2;
  m->cap = cap;
  m->count = 0;
  m->slots = slots_new(m->cap);
  for (int i = 0; i < old.cap; i++)
    if (old.slots[i].key) ptrmap_put(m, old.slots[i].key, old.slots[i].val);
  slots_free(old.slots, old.cap);
}

/* key's slot: its own, or the empty one where it goes. */
static PtrSlot *slot_of(const PtrMap *m, const void *key) {
  uint64_t i = hash_ptr(key) & (uint64_t)(m->cap - 1);
  while (m->slots[i].key && m->slots[i].key != key) i = (i + 1) & (uint64_t)(m->cap - 1);
  return &m->slots[i];
}

void ptrmap_reserve(PtrMap *m, int n) { grow_for(m, n); }

void ptrmap_put(PtrMap *m, const void *key, intptr_t val) {
  grow_for(m, m->count + 1);
  PtrSlot *sl = slot_of(m, key);
  if (!sl->key) m->count++;
  *sl = (PtrSlot){key, val};
}

intptr_t ptrmap_add(PtrMap *m, const void *key, intptr_t delta) {
  grow_for(m, m->count + 1);
  PtrSlot *sl = slot_of(m, key);
  if (!sl->key) m->count++, *sl = (PtrSlot){key, 0};
  return sl->val += delta;
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
  slots_free(m->slots, m->cap);
  memset(m, 0, sizeof *m);
}
