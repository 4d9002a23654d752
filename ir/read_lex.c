/* ir/read_lex.c — the IR reader's tokens: blanks, words, numbers, comments and locations,
 * and its error reporting (ir/read_impl.h). The text is read line by line: no token spans a
 * newline, and rd_end_line moves to the next line.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "print.h"
#include "read_impl.h"

/* ---- characters and tokens ------------------------------------------------- */

/* The line and column of `at` (anywhere in the text: errors may point back at a region's header). */
SrcLoc rd_loc(const Reader *r, const char *at) {
  if (at >= r->line_start) return (SrcLoc){r->file, r->line, (int)(at - r->line_start) + 1};
  int line = 1;
  const char *start = r->text;
  for (const char *q = r->text; q < at; q++)
    if (*q == '\n') line++, start = q + 1;
  return (SrcLoc){r->file, line, (int)(at - start) + 1};
}

bool rd_fail(Reader *r, const char *at, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  error_at(rd_loc(r, at), "%s", msg);
  return false;
}

static bool is_word0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_word(char c) { return is_word0(c) || (c >= '0' && c <= '9') || c == '.'; }

void rd_ws(Reader *r) {
  while (*r->p == ' ' || *r->p == '\t' || *r->p == '\r') r->p++;
}

bool rd_eol(Reader *r) {
  rd_ws(r);
  return *r->p == '\n' || *r->p == 0 || *r->p == '#';
}

/* What is at p, for "expected X, found Y". */
const char *rd_found(Reader *r) {
  static const int n = 24;
  if (*r->p == '\n' || *r->p == 0) return "end of line";
  int len = 0;
  while (r->p[len] && r->p[len] != '\n' && r->p[len] != ' ' && len < n) len++;
  return arena_printf(r->arena, "'%.*s'", len ? len : 1, r->p);
}

bool rd_expect(Reader *r, char c) {
  rd_ws(r);
  if (*r->p == c) {
    r->p++;
    return true;
  }
  return rd_fail(r, r->p, "expected '%c', found %s", c, rd_found(r));
}

bool rd_eat(Reader *r, char c) {
  rd_ws(r);
  if (*r->p != c) return false;
  r->p++;
  return true;
}

/* A word: [A-Za-z_][A-Za-z0-9_.]*; NULL (no error) when none is here. */
const char *rd_word(Reader *r) {
  rd_ws(r);
  if (!is_word0(*r->p)) return NULL;
  const char *s = r->p;
  while (is_word(*r->p)) r->p++;
  return arena_strndup(r->arena, s, (size_t)(r->p - s));
}

/* Any run of characters up to a blank or one of stop (names of regions and results). */
const char *rd_token(Reader *r, const char *stop) {
  rd_ws(r);
  const char *s = r->p;
  while (*r->p && *r->p != ' ' && *r->p != '\t' && *r->p != '\n' && *r->p != '\r' && !strchr(stop, *r->p)) r->p++;
  if (r->p == s) return NULL;
  return arena_strndup(r->arena, s, (size_t)(r->p - s));
}

bool rd_keyword(Reader *r, const char *kw) {
  rd_ws(r);
  size_t n = strlen(kw);
  if (strncmp(r->p, kw, n) != 0 || is_word(r->p[n])) return false;
  r->p += n;
  return true;
}

bool rd_i64(Reader *r, int64_t *out, int64_t lo, int64_t hi, const char *what) {
  rd_ws(r);
  const char *s = r->p;
  if (!((*s >= '0' && *s <= '9') || ((*s == '-' || *s == '+') && s[1] >= '0' && s[1] <= '9')))
    return rd_fail(r, s, "expected %s (an integer), found %s", what, rd_found(r));
  errno = 0;
  char *e;
  long long v = strtoll(s, &e, 10);
  if (errno == ERANGE || v < lo || v > hi)
    return rd_fail(r, s, "%s %.*s out of range %lld..%lld", what, (int)(e - s), s, (long long)lo, (long long)hi);
  r->p = e;
  *out = v;
  return true;
}

bool rd_int(Reader *r, int *out, int lo, int hi, const char *what) {
  int64_t v;
  if (!rd_i64(r, &v, lo, hi, what)) return false;
  *out = (int)v;
  return true;
}

bool rd_f64(Reader *r, double *out, const char *what) {
  rd_ws(r);
  const char *s = r->p;
  char *e;
  bool ok = (*s >= '0' && *s <= '9') || *s == '-' || *s == '+' || *s == '.' || *s == 'i' || *s == 'n';
  double v = ok ? strtod(s, &e) : 0;
  if (!ok || e == s || is_word(*e)) return rd_fail(r, s, "expected %s (a number), found %s", what, rd_found(r));
  r->p = e;
  *out = v;
  return true;
}

int rd_lookup(const char *w, const char *const *names, int n) {
  for (int i = 0; w && i < n; i++)
    if (names[i] && strcmp(w, names[i]) == 0) return i;
  return -1;
}

/* One of names (a word here); reports "expected WHAT" with a hint otherwise. */
bool rd_choice(Reader *r, int *out, const char *const *names, int n, const char *what) {
  rd_ws(r);
  const char *at = r->p;
  const char *w = rd_word(r);
  int i = rd_lookup(w, names, n);
  if (i >= 0) {
    *out = i;
    return true;
  }
  r->p = at;
  rd_fail(r, at, "expected %s, found %s", what, rd_found(r));
  const char *hint = w ? diag_nearest(w, names, n) : NULL;
  if (hint) note("did you mean '%s'?", hint);
  return false;
}

bool rd_axis(Reader *r, int *out) {
  const char *names[RT_AX_COUNT];
  for (int i = 0; i < RT_AX_COUNT; i++) names[i] = rt_mesh_axis_name(i);
  return rd_choice(r, out, names, RT_AX_COUNT, "a mesh axis (dp, pp, cp, tp)");
}

/* The rest of the line: an optional `# note; file:line:col` comment (its location is kept in
 * *loc when loc is not NULL), then the newline. */
bool rd_end_line(Reader *r, SrcLoc *loc) {
  rd_ws(r);
  if (*r->p == '#') {
    const char *s = r->p + 1, *e = s;
    while (*e && *e != '\n') e++;
    const char *t = e; /* the comment's last `; `-separated part */
    while (t > s && !(t[-1] == ' ' && t - 2 >= s && t[-2] == ';')) t--;
    while (t < e && *t == ' ') t++;
    const char *c2 = NULL, *c1 = NULL; /* the last two ':' */
    for (const char *q = t; q < e; q++)
      if (*q == ':') c1 = c2, c2 = q;
    /* file:line:col: the file as the printer will show it must read back as itself */
    const char *file = c1 && c1 > t ? arena_printf(r->arena, "models/%.*s", (int)(c1 - t), t) : NULL;
    const char *shown = file ? ir_loc_file_name(file) : "";
    bool stable = shown[0] && shown[0] != ' ' && shown[strlen(shown) - 1] != '/' &&
                  strcmp(ir_loc_file_name(arena_printf(r->arena, "models/%s", shown)), shown) == 0;
    if (loc && stable && strspn(c1 + 1, "0123456789") == (size_t)(c2 - c1 - 1) && c2 > c1 + 1 &&
        strspn(c2 + 1, "0123456789") == (size_t)(e - c2 - 1) && e > c2 + 1 && e - c1 < 24) {
      loc->file = file;
      loc->line = atoi(c1 + 1);
      loc->col = atoi(c2 + 1);
    }
    r->p = e;
  }
  if (*r->p == '\n') {
    r->p++;
    r->line++;
    r->line_start = r->p;
    return true;
  }
  if (*r->p == 0) return true;
  return rd_fail(r, r->p, "unexpected %s at the end of the line", rd_found(r));
}

/* Skips the rest of the line (reports, comments). */
void rd_skip_line(Reader *r) {
  while (*r->p && *r->p != '\n') r->p++;
  rd_end_line(r, NULL);
}

