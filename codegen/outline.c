/* codegen/outline.c — the entry points' equal statement runs written once (codegen/outline.h).
 *
 * An unrolled pipeline schedule (passes/pipe.c) makes the step one run of statements per
 * instruction (emit.c marks where each begins): every stage x micro-batch x F / B / W, the same
 * statements each time up to where the values live in M (the memory plan's offsets), the
 * transfer tags, the stage and the micro-batch in the trace marks. Written as they are, the
 * program grows with the micro-batches (Llama-3-8B, pp 4, 512 of them: 50 MB of C). Here each
 * run's text is read once: its integer literals in code are lifted out, and runs whose remaining
 * text (the "shape") is equal form a group. A group of two or more runs becomes one function,
 * `ol_body_K(M, ctx, a)`, whose literals are those all its runs share and `a[k]` for those that
 * differ (two that differ alike share a k); the runs' values go into one table, `ol_args`, and
 * each entry point runs its outlined runs from a table of (function, arguments) rows, in order.
 * So the code is as large as the number of distinct shapes, which the schedule bounds (its
 * warm-up, steady state and cool-down per stage and kind), not the number of micro-batches; the
 * tables are data (a few numbers per instruction). The statements run are the same, in the same
 * order, on the same bytes: the program computes exactly what it did, sends and receives
 * overlapping its compute as before.
 *
 * Not lifted (part of the shape): numbers in string and character literals, floating literals,
 * suffixed, hex and octal ones, digits inside identifiers, and every number after `static` or
 * `case` on its line (constant expressions). A number in a comment that differs between the
 * runs of a group is written `?` in the function. A run whose braces or parentheses do not
 * balance, or that declares a static variable (not `static const`: each run would lose its own),
 * is left where it is.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "diag.h"
#include "outline.h"

enum { LIT_CODE = 1, LIT_NOTE = 2 }; /* a lifted literal's byte in a shape: in code, in a comment */

typedef struct {
  const char *s; /* the run's text, whole lines, marks excluded */
  size_t n;
  char *shape; /* the text with each lifted literal as one byte, LIT_CODE or LIT_NOTE */
  size_t nshape;
  int64_t *v; /* those literals, in order */
  int nv;
  bool closed;  /* braces and parentheses balance, and no static variable (one per run) is in it:
                   a function body shared by the runs can hold it */
  bool marked;  /* follows a mark (false: an entry point's head, before its first mark) */
  uint64_t h;   /* of the shape */
  int group;    /* its group's index */
  int64_t args; /* outlined: its values' offset in ol_args */
} Run;

typedef struct {
  int rep;      /* its first run */
  int count;    /* runs */
  int fn;       /* ol_body_<fn>; -1: not outlined */
  int *slot;    /* [literal]: the a[] index of a code literal that differs, -1 if shared; a comment's: -2 if it differs */
  int *lifted;  /* [k]: the literal a[k] is first taken from */
  int nslots;
} Group;

typedef struct {
  const char *head; /* `static void NAME(...) {\n` */
  size_t nhead;
  int first, nruns; /* its runs */
} Entry;

typedef struct {
  Arena *a;
  Run *runs;
  int nruns, caprun;
  Group *groups;
  int ngroups, capgroup;
} Outline;

static bool ident_char(char ch) { return isalnum((unsigned char)ch) || ch == '_'; }

/* Appends to the run's shape. */
static void put(char *shape, size_t *k, const char *s, size_t n) {
  memcpy(shape + *k, s, n);
  *k += n;
}

/* The shape and literals of run r (see the file's comment). */
static void scan(Outline *o, Run *r) {
  const char *s = r->s;
  size_t n = r->n, k = 0;
  r->shape = arena_alloc(o->a, n + 1);
  int cap = 0, depth = 0;
  bool fixed = false, ok = true, note = false;
  for (size_t i = 0; i < n;) {
    if (i == 0 || s[i - 1] == '\n') fixed = false;
    char ch = s[i];
    if (!note && ch == '/' && i + 1 < n && s[i + 1] == '*') {
      note = true;
      put(r->shape, &k, s + i, 2), i += 2;
    } else if (note && ch == '*' && i + 1 < n && s[i + 1] == '/') {
      note = false;
      put(r->shape, &k, s + i, 2), i += 2;
    } else if (!note && (ch == '"' || ch == '\'')) { /* a literal, escapes and all */
      size_t j = i + 1;
      while (j < n && s[j] != ch && s[j] != '\n') j += s[j] == '\\' ? 2 : 1;
      j = j < n ? j + 1 : n;
      put(r->shape, &k, s + i, j - i), i = j;
    } else if (isdigit((unsigned char)ch)) { /* a preprocessing number */
      size_t j = i + 1;
      bool digits = true;
      while (j < n && (ident_char(s[j]) || s[j] == '.' ||
                       ((s[j] == '+' || s[j] == '-') && strchr("eEpP", s[j - 1])))) {
        digits &= isdigit((unsigned char)s[j]) != 0;
        j++;
      }
      bool lift = digits && (j - i == 1 || ch != '0') && j - i <= 18 && (i == 0 || s[i - 1] != '.') && (note || !fixed);
      if (lift) {
        arena_grow(o->a, (void **)&r->v, &cap, r->nv + 1, sizeof *r->v);
        r->v[r->nv++] = strtoll(s + i, NULL, 10);
        r->shape[k++] = note ? LIT_NOTE : LIT_CODE;
      } else {
        put(r->shape, &k, s + i, j - i);
      }
      i = j;
    } else if (ident_char(ch)) { /* digits inside a name stay */
      size_t j = i;
      while (j < n && ident_char(s[j])) j++;
      bool st = !note && j - i == 6 && memcmp(s + i, "static", 6) == 0;
      if (st || (!note && j - i == 4 && memcmp(s + i, "case", 4) == 0)) fixed = true; /* the line's rest is constant */
      if (st) ok &= n - j > 7 && memcmp(s + j, " const ", 7) == 0; /* a static variable: each run's own */
      put(r->shape, &k, s + i, j - i), i = j;
    } else {
      if (!note) {
        if (ch == '{' || ch == '(') depth++;
        if (ch == '}' || ch == ')') ok &= --depth >= 0;
      }
      r->shape[k++] = ch, i++;
    }
  }
  r->nshape = k;
  r->closed = ok && depth == 0 && !note;
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < k; i++) h = (h ^ (unsigned char)r->shape[i]) * 1099511628211ull;
  r->h = h;
}

static void add_run(Outline *o, const char *s, size_t n, bool marked) {
  arena_grow(o->a, (void **)&o->runs, &o->caprun, o->nruns + 1, sizeof *o->runs);
  Run *r = &o->runs[o->nruns++];
  *r = (Run){.s = s, .n = n, .marked = marked, .group = -1, .args = -1};
  scan(o, r);
}

/* Runs of equal shape into groups (a hash table on the shapes). */
static void group_runs(Outline *o) {
  size_t cap = 16;
  while (cap < 2 * (size_t)o->nruns) cap *= 2;
  int *tab = malloc(cap * sizeof *tab);
  if (!tab) die("out of memory");
  for (size_t i = 0; i < cap; i++) tab[i] = -1;
  for (int i = 0; i < o->nruns; i++) {
    Run *r = &o->runs[i];
    if (!r->marked) continue; /* an entry point's head (its locals) stays */
    size_t at = r->h & (cap - 1);
    for (;; at = (at + 1) & (cap - 1)) {
      int g = tab[at];
      if (g < 0) break;
      const Run *p = &o->runs[o->groups[g].rep];
      if (p->h == r->h && p->nshape == r->nshape && memcmp(p->shape, r->shape, r->nshape) == 0) break;
    }
    if (tab[at] < 0) {
      arena_grow(o->a, (void **)&o->groups, &o->capgroup, o->ngroups + 1, sizeof *o->groups);
      o->groups[o->ngroups] = (Group){.rep = i, .fn = -1};
      tab[at] = o->ngroups++;
    }
    r->group = tab[at];
    o->groups[r->group].count++;
  }
  free(tab);
}

/* Which of a group's literals differ between its runs, and the a[] index of each (literals that
 * differ alike in every run share one). */
static void lift(Outline *o, Group *g) {
  const Run *rep = &o->runs[g->rep];
  int nv = rep->nv;
  g->slot = ARENA_ARRAY(o->a, int, nv + 1);
  g->lifted = ARENA_ARRAY(o->a, int, nv + 1);
  uint64_t *colh = ARENA_ARRAY(o->a, uint64_t, nv + 1);
  bool *differs = ARENA_ARRAY(o->a, bool, nv + 1);
  for (int i = g->rep; i < o->nruns; i++) {
    const Run *r = &o->runs[i];
    if (r->group != g - o->groups) continue;
    for (int p = 0; p < nv; p++) {
      differs[p] |= r->v[p] != rep->v[p];
      colh[p] = (colh[p] ^ (uint64_t)r->v[p]) * 1099511628211ull;
    }
  }
  const char *kind = rep->shape; /* the literals' kinds, in order */
  for (int p = 0; p < nv; p++) {
    while (*kind != LIT_CODE && *kind != LIT_NOTE) kind++;
    bool code = *kind++ == LIT_CODE;
    g->slot[p] = differs[p] ? (code ? -3 : -2) : -1;
    if (g->slot[p] != -3) continue;
    int same = -1;
    for (int k = 0; k < g->nslots && same < 0; k++) { /* a literal already lifted that differs alike */
      int q = g->lifted[k];
      if (colh[q] != colh[p]) continue;
      bool eq = true;
      for (int i = g->rep; i < o->nruns && eq; i++)
        if (o->runs[i].group == g - o->groups) eq = o->runs[i].v[p] == o->runs[i].v[q];
      if (eq) same = k;
    }
    if (same < 0) g->lifted[same = g->nslots++] = p;
    g->slot[p] = same;
  }
}

/* ol_body_<fn>: the group's shape with its shared literals and a[k] for the lifted ones. */
static void write_body(FILE *f, const Outline *o, const Group *g, const char *locals) {
  const Run *rep = &o->runs[g->rep];
  fprintf(f, "static void ol_body_%d(char *M, RtCtx *ctx, const int64_t *a) { /* %d runs */\n", g->fn, g->count);
  fprintf(f, "  (void)M;\n  (void)ctx;\n  (void)a;\n%s", locals);
  int p = 0;
  for (size_t i = 0; i < rep->nshape; i++) {
    char ch = rep->shape[i];
    if (ch != LIT_CODE && ch != LIT_NOTE) {
      fputc(ch, f);
      continue;
    }
    int s = g->slot[p];
    if (s >= 0) fprintf(f, "a[%d]", s);
    else if (s == -2) fputc('?', f);
    else fprintf(f, "%" PRId64, rep->v[p]);
    p++;
  }
  fprintf(f, "}\n\n");
}

/* The definitions ahead of the entry points: the outlined functions and the tables. */
static void write_defs(FILE *f, Outline *o, const char *locals) {
  int nfn = 0;
  for (int i = 0; i < o->ngroups; i++) {
    Group *g = &o->groups[i];
    const Run *rep = &o->runs[g->rep];
    if (g->count < 2 || !rep->closed) continue;
    g->fn = nfn++;
    lift(o, g);
  }
  if (!nfn) return;
  fprintf(f, "/* The runs of statements that recur in the entry points (a pipeline schedule's instructions),\n"
             " * each written once: its integers that differ from one run to the next are its a[] (codegen/outline.c). */\n");
  for (int i = 0; i < o->ngroups; i++)
    if (o->groups[i].fn >= 0) write_body(f, o, &o->groups[i], locals);
  fprintf(f, "static void (*const ol_fn[])(char *, RtCtx *, const int64_t *) = {");
  for (int i = 0, k = 0; i < o->ngroups; i++)
    if (o->groups[i].fn >= 0) fprintf(f, "%sol_body_%d", k++ ? ", " : "", o->groups[i].fn);
  fprintf(f, "};\n\n/* each outlined run's a[] */\nstatic const int64_t ol_args[] = {");
  int64_t at = 0;
  for (int i = 0; i < o->nruns; i++) {
    Run *r = &o->runs[i];
    if (r->group < 0 || o->groups[r->group].fn < 0) continue;
    const Group *g = &o->groups[r->group];
    r->args = at;
    for (int k = 0; k < g->nslots; k++, at++) fprintf(f, "%s%" PRId64, !at ? "\n  " : at % 16 ? ", " : ",\n  ", r->v[g->lifted[k]]);
  }
  if (!at) fprintf(f, "0");
  if (at > INT32_MAX) die("codegen: %" PRId64 " outlined arguments, more than a table holds", at);
  fprintf(f, "\n};\n\n/* the outlined runs in order: {function, its a[] in ol_args} */\nstatic const int32_t ol_rows[][2] = {");
  int row = 0;
  for (int i = 0; i < o->nruns; i++) {
    const Run *r = &o->runs[i];
    if (r->args < 0) continue;
    fprintf(f, "%s{%d, %" PRId64 "}", !row ? "\n  " : row % 8 ? ", " : ",\n  ", o->groups[r->group].fn, r->args);
    row++;
  }
  fprintf(f, "\n};\n\n");
}

/* One entry point, its outlined runs replaced by loops over their rows (from *row on). */
static void write_entry(FILE *f, const Outline *o, const Entry *e, int *row) {
  fwrite(e->head, 1, e->nhead, f);
  for (int i = e->first; i < e->first + e->nruns;) {
    const Run *r = &o->runs[i];
    if (r->args < 0) {
      fwrite(r->s, 1, r->n, f);
      i++;
      continue;
    }
    int from = *row;
    for (; i < e->first + e->nruns && o->runs[i].args >= 0; i++) (*row)++;
    fprintf(f, "  for (int ol = %d; ol < %d; ol++) /* %d outlined runs */\n", from, *row, *row - from);
    fprintf(f, "    ol_fn[ol_rows[ol][0]](M, ctx, ol_args + ol_rows[ol][1]);\n");
  }
  fprintf(f, "}\n\n");
}

static bool is_mark(const char *s, size_t n) {
  while (n && *s == ' ') s++, n--;
  return n == strlen(CG_OUTLINE_MARK) && memcmp(s, CG_OUTLINE_MARK, n) == 0;
}

void cg_outline_write(FILE *f, const char *text, size_t len, const char *locals) {
  Arena a;
  arena_init(&a);
  Outline o = {.a = &a};
  Entry *es = NULL;
  int nes = 0, capes = 0;
  bool marks = false;
  /* the entry points and their runs, split at the marks */
  for (size_t i = 0; i < len;) {
    const char *eol = memchr(text + i, '\n', len - i);
    size_t next = eol ? (size_t)(eol - text) + 1 : len;
    if (next - i == 1) { /* the blank line after an entry point */
      i = next;
      continue;
    }
    if (strncmp(text + i, "static void ", 12) != 0) die("codegen: an entry point expected at '%.40s'", text + i);
    arena_grow(&a, (void **)&es, &capes, nes + 1, sizeof *es);
    Entry *e = &es[nes++];
    *e = (Entry){.head = text + i, .nhead = next - i, .first = o.nruns};
    size_t start = next;
    bool marked = false;
    for (i = next; i < len;) {
      eol = memchr(text + i, '\n', len - i);
      next = eol ? (size_t)(eol - text) + 1 : len;
      bool end = next - i == 2 && text[i] == '}';
      if (end || is_mark(text + i, (eol ? (size_t)(eol - text) : len) - i)) {
        if (i > start) add_run(&o, text + start, i - start, marked);
        marks |= !end;
        marked = true;
        start = next;
      }
      i = next;
      if (end) break;
    }
    e->nruns = o.nruns - e->first;
  }
  if (!marks) {
    fwrite(text, 1, len, f);
    arena_free(&a);
    return;
  }
  group_runs(&o);
  write_defs(f, &o, locals);
  int row = 0;
  for (int k = 0; k < nes; k++) write_entry(f, &o, &es[k], &row);
  arena_free(&a);
}
