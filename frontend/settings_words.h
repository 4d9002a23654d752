/* frontend/settings_words.h — the words of a settings line (topology, parallel and train blocks,
 * -D overrides): a cursor over them, typed values with their errors, quantities with units, and
 * the walk over a block's lines (frontend/settings.c reads the keys). */
#ifndef SHARDC_SETTINGS_WORDS_H
#define SHARDC_SETTINGS_WORDS_H

#include "fe.h"

typedef struct {
  Fe *fe;
  const PtrVec *w;
  int i;
  SrcLoc end;        /* where to point when a value is missing */
  const Setting *st; /* the line (for its block); NULL for -D */
  bool block_used;
} Cur;

Word *sw_peek(Cur *c);
Word *sw_peek2(Cur *c);
SrcLoc sw_here(Cur *c); /* the next word's place, or the line's end */
bool sw_is_ident(const Word *w, const char *s);
void sw_expected(Cur *c, const char *key, const char *what); /* "`key` needs WHAT, got ..." */
bool sw_get_num(Cur *c, const char *key, double *out);
bool sw_get_int(Cur *c, const char *key, int64_t lo, int64_t hi, int64_t *out);
bool sw_get_int32(Cur *c, const char *key, int lo, int hi, int *out);
bool sw_get_string(Cur *c, const char *key, const char **out);
bool sw_get_bool(Cur *c, const char *key, bool *out);
/* One of names[] (an identifier or a call of that name); returns its index or -1. */
int sw_get_choice(Cur *c, const char *key, const char *const *names, int n);

typedef enum { Q_BYTES, Q_RATE, Q_FLOPS, Q_TIME } QCat;
/* A positive quantity of category cat (units: B .. TiB, bit .. Tbit /s, FLOPS .. PFLOPS, s .. ns), in
 * bytes, bytes/s, FLOP/s or seconds; a plain number is bytes. */
bool sw_get_quantity(Cur *c, const char *key, QCat cat, double *out);

/* Reports an unknown key with a hint from keys[] (NULL-terminated). */
void sw_unknown_key(Cur *c, const Word *w, const char *block, const char *const *keys);
/* The block that ends the line, for keys that take one. */
const PtrVec *sw_take_block(Cur *c, const char *key);
/* A field two keys set, set once in the file (see settings_words.c); true after the error. */
bool sw_set_twice(Cur *c, const char *field, SrcLoc at);

typedef void (*KeyFn)(Cur *c, Word *key, void *ctx);
/* Walks every line of a block, calling fn on each key in turn; block names it (each key once). */
void sw_walk(Fe *fe, const PtrVec *lines, KeyFn fn, void *ctx, const char *block);

#endif
