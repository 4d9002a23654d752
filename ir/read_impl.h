/* ir/read_impl.h — the IR reader's state and token helpers (ir/read_lex.c), shared by ir/read.c (the graph),
 * ir/read_attrs.c (a node line's types, values and attributes) and ir/read_header.c (the module header). Private to the reader: include ir/read.h. */
#ifndef SHARDC_READ_IMPL_H
#define SHARDC_READ_IMPL_H

#include <stdarg.h>

#include "module.h"
#include "ptrmap.h"

#define MAX_DEPTH 32 /* nested regions */

typedef struct {
  Arena *arena;           /* the module's */
  const char *file;       /* the input's name in diagnostics */
  const char *text;       /* the whole input, NUL-terminated (a copy in the arena) */
  const char *p;          /* cursor */
  const char *line_start; /* first character of the cursor's line */
  int line;               /* 1-based line of the cursor */
  Module *m;              /* being read */
  int capsyms;            /* entries allocated in m->syms */
  PtrMap values;          /* printed value number + 1 -> Value* */
  Node *open[MAX_DEPTH];  /* regions whose body is being read, outermost first */
  int depth;              /* entries in open */
} Reader;

SrcLoc rd_loc(const Reader *r, const char *at);
/* Reports `file:line:col: error: ...` at `at` (on the cursor's line); returns false. */
bool rd_fail(Reader *r, const char *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void rd_ws(Reader *r);                 /* skips blanks (not newlines) */
bool rd_eol(Reader *r);                /* at the end of the line or a comment */
const char *rd_found(Reader *r);       /* what is at the cursor, for messages */
bool rd_expect(Reader *r, char c);     /* c, or an error */
bool rd_eat(Reader *r, char c);        /* c if it is next */
const char *rd_word(Reader *r);        /* [A-Za-z_][A-Za-z0-9_.]*, or NULL */
const char *rd_token(Reader *r, const char *stop); /* up to a blank or a char of stop, or NULL */
bool rd_keyword(Reader *r, const char *kw);         /* the word kw if it is next */
bool rd_i64(Reader *r, int64_t *out, int64_t lo, int64_t hi, const char *what);
bool rd_int(Reader *r, int *out, int lo, int hi, const char *what);
bool rd_f64(Reader *r, double *out, const char *what);
int rd_lookup(const char *w, const char *const *names, int n); /* index of w in names, or -1 */
bool rd_choice(Reader *r, int *out, const char *const *names, int n, const char *what);
/* A mesh axis name (dp, pp, cp, tp) into *out (RT_AX_*). */
bool rd_axis(Reader *r, int *out);
bool rd_end_line(Reader *r, SrcLoc *loc); /* optional `# ...; file:line:col`, then the newline */
void rd_skip_line(Reader *r);

/* ---- a node line's pieces (read_attrs.c) ---- */
#define MAX_ATTRS 16 /* attributes on one node */

typedef struct {
  const char *key; /* "name" for a string, "scalar" for a bare number, else the word */
  const char *val; /* where the value starts in the text (NULL: a bare flag) */
  const char *at;  /* where the attribute starts (for errors) */
  const char *str; /* a string's contents */
  bool used;       /* taken by the op */
} RdAttr;

typedef struct {
  RdAttr a[MAX_ATTRS];
  int n;
} AttrList;

bool rd_type(Reader *r, Value *v);                       /* `dtype[dims]{sharding}` (and `@host`) into v */
bool rd_num(Reader *r, int64_t *n);                      /* `%N`: a printed value number */
bool rd_use(Reader *r, Graph *g, Value **out);           /* `%N` of a value defined before, in scope */
bool rd_define(Reader *r, const char *at, int64_t n, Value *v); /* number n names v from here on */
bool rd_attrs(Reader *r, AttrList *al, char stop);       /* a node's attributes, up to stop */
RdAttr *rd_take(AttrList *al, const char *key);          /* the attribute key (marked used), or NULL */
/* The attributes al onto n (its op's, each checked; one left unused is an error). */
bool rd_apply_attrs(Reader *r, Node *n, AttrList *al, const char *op_at);

/* The rest of a `topology`, `plan` or `recipe` line whose keyword starts at `at` (read_header.c). */
bool rd_header_line(Reader *r, const char *at);

#endif
