/* ir/arena.c — bump allocator. */
#include "arena.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"

struct ArenaBlock {
  ArenaBlock *next;
  size_t used, size;
  _Alignas(16) unsigned char data[];
};

void arena_init(Arena *a) {
  a->head = NULL;
  a->total = 0;
}

void arena_free(Arena *a) {
  ArenaBlock *b = a->head;
  while (b) {
    ArenaBlock *next = b->next;
    free(b);
    b = next;
  }
  a->head = NULL;
  a->total = 0;
}

/* Every block comes from calloc and a block's bytes are handed out once (no reuse), so what
 * arena_alloc returns is already zero: no memset. The pages of a large block that calloc took from
 * the system (zero by the kernel) are not touched until used, so a sparse table (a per-stage
 * index of which only some slots are ever written: passes/memplan_pack.c) costs no page faults
 * for the rest. An allocation larger than a quarter of a block gets a block of its own, placed
 * behind the head so that the head's free room stays in use. An arena's first block is smaller
 * (ARENA_FIRST): calloc clears a block it reuses from the heap whole, and a short-lived arena that
 * holds a few KB (memplan's per body: thousands of bodies in an unrolled pipeline step) would
 * clear 1 MB each time (GPT-3 175B pp 16 zb: 7 % of its compile in that memset). */
enum { ARENA_BLOCK = 1u << 20, ARENA_FIRST = 1u << 16 };

static ArenaBlock *block_new(size_t size) {
  ArenaBlock *b = calloc(1, sizeof(ArenaBlock) + size);
  if (!b) die("out of memory allocating %zu bytes", size);
  b->size = size;
  return b;
}

void *arena_alloc(Arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  a->total += n;
  if (n > ARENA_BLOCK / 4 && a->head) { /* its own block, behind the head */
    ArenaBlock *b = block_new(n);
    b->used = n;
    b->next = a->head->next;
    a->head->next = b;
    return b->data;
  }
  if (!a->head || a->head->used + n > a->head->size) {
    size_t size = a->head ? ARENA_BLOCK : ARENA_FIRST;
    ArenaBlock *b = block_new(n > size ? n : size);
    b->next = a->head;
    a->head = b;
  }
  void *p = a->head->data + a->head->used;
  a->head->used += n;
  return p;
}

char *arena_strndup(Arena *a, const char *s, size_t n) {
  char *p = arena_alloc(a, n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

char *arena_strdup(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

char *arena_printf(Arena *a, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = arena_alloc(a, (size_t)n + 1);
  vsnprintf(p, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return p;
}

void arena_grow(Arena *a, void **arr, int *cap, int need, size_t elem) {
  if (need <= *cap) return;
  int ncap = *cap ? *cap * 2 : 8;
  while (ncap < need) ncap *= 2;
  void *p = arena_alloc(a, elem * (size_t)ncap);
  if (*arr) memcpy(p, *arr, elem * (size_t)*cap);
  *arr = p;
  *cap = ncap;
}
