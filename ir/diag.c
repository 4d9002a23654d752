/* ir/diag.c — error reporting with source lines and carets. */
#include "diag.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SOURCES 256

static struct {
  const char *file, *text;
} sources[MAX_SOURCES];
static int nsources;
static int nerrors;
static FILE *out;

static FILE *stream(void) { return out ? out : stderr; }

void diag_set_stream(FILE *f) { out = f; }

void diag_add_source(const char *file, const char *text) {
  for (int i = 0; i < nsources; i++)
    if (strcmp(sources[i].file, file) == 0) {
      sources[i].text = text;
      return;
    }
  if (nsources < MAX_SOURCES) {
    sources[nsources].file = file;
    sources[nsources].text = text;
    nsources++;
  }
}

static const char *source_of(const char *file) {
  for (int i = 0; i < nsources; i++)
    if (strcmp(sources[i].file, file) == 0) return sources[i].text;
  return NULL;
}

static void quote_line(SrcLoc loc) {
  const char *text = loc.file ? source_of(loc.file) : NULL;
  if (!text || loc.line < 1) return;
  const char *p = text;
  for (int l = 1; l < loc.line && *p; p++)
    if (*p == '\n') l++;
  if (!*p && loc.line > 1 && p > text && p[-1] != '\n') return;
  const char *e = strchr(p, '\n');
  int len = e ? (int)(e - p) : (int)strlen(p);
  FILE *f = stream();
  fprintf(f, "%5d | %.*s\n      | ", loc.line, len, p);
  for (int i = 1; i < loc.col && i <= len; i++) fputc(p[i - 1] == '\t' ? '\t' : ' ', f);
  fputs("^\n", f);
}

static void vreport(SrcLoc loc, const char *kind, const char *fmt, va_list ap) {
  FILE *f = stream();
  if (loc.file)
    fprintf(f, "%s:%d:%d: %s: ", loc.file, loc.line, loc.col, kind);
  else
    fprintf(f, "shardc: %s: ", kind);
  vfprintf(f, fmt, ap);
  fputc('\n', f);
  quote_line(loc);
}

void error_at(SrcLoc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(loc, "error", fmt, ap);
  va_end(ap);
  nerrors++;
}

void warning_at(SrcLoc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(loc, "warning", fmt, ap);
  va_end(ap);
}

void note_at(SrcLoc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  FILE *f = stream();
  if (loc.file) fprintf(f, "%s:%d:%d: note: ", loc.file, loc.line, loc.col);
  else fprintf(f, "shardc: note: ");
  vfprintf(f, fmt, ap);
  fputc('\n', f);
  va_end(ap);
}

void note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  FILE *f = stream();
  fputs("      = note: ", f);
  vfprintf(f, fmt, ap);
  fputc('\n', f);
  va_end(ap);
}

void error_plain(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  SrcLoc none = {0};
  vreport(none, "error", fmt, ap);
  va_end(ap);
  nerrors++;
}

int diag_errors(void) { return nerrors; }
void diag_reset(void) { nerrors = 0; }

_Noreturn void die_at(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "shardc: internal compiler error at %s:%d: ", file, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

int diag_edit_distance(const char *a, const char *b) {
  int la = (int)strlen(a), lb = (int)strlen(b);
  if (la > 64 || lb > 64) return 1000;
  int d[65][65];
  for (int i = 0; i <= la; i++) d[i][0] = i;
  for (int j = 0; j <= lb; j++) d[0][j] = j;
  for (int i = 1; i <= la; i++)
    for (int j = 1; j <= lb; j++) {
      int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
      d[i][j] = c;
    }
  return d[la][lb];
}

const char *diag_nearest(const char *name, const char *const *cands, int ncands) {
  int limit = (int)strlen(name) / 3;
  if (limit < 1) limit = 1;
  const char *best = NULL;
  int bestd = limit + 1;
  for (int i = 0; i < ncands; i++) {
    if (!cands[i]) continue;
    int d = diag_edit_distance(name, cands[i]);
    if (d < bestd) {
      bestd = d;
      best = cands[i];
    }
  }
  return best;
}
