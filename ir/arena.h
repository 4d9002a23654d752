/* ir/arena.h — bump allocation for the compiler: one arena per compilation, freed once. */
#ifndef SHARDC_ARENA_H
#define SHARDC_ARENA_H

#include <stddef.h>

typedef struct ArenaBlock ArenaBlock;
typedef struct {
  ArenaBlock *head;
  size_t total; /* bytes handed out */
} Arena;

void arena_init(Arena *a);
void arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t n); /* zeroed, 16-byte aligned; never NULL */
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Grows *arr (of *cap elements of size elem) to hold at least need elements. */
void arena_grow(Arena *a, void **arr, int *cap, int need, size_t elem);

#define ARENA_NEW(a, T) ((T *)arena_alloc((a), sizeof(T)))
#define ARENA_ARRAY(a, T, n) ((T *)arena_alloc((a), sizeof(T) * (size_t)(n)))

#endif
