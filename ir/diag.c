/* ir/diag.c — error reporting with source lines and carets. */
#include "diag.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* The Diag a thread reports to: the one entered (diag_enter), else the thread's own default. */
static _Thread_local Diag *entered;
static _Thread_local Diag fallback;

static Diag *cur(void) { return entered ? entered : &fallback; }
static FILE *stream(void) { return cur()->out ? cur()->out : stderr; }

void diag_replay(const char *text, size_t len, int nwarnings) {
  fwrite(text, 1, len, stream());
  cur()->nwarnings += nwarnings;
}

int diag_warnings(void) { return cur()->nwarnings; }

void diag_init(Diag *d, FILE *out, int max_errors) {
  memset(d, 0, sizeof *d);
  d->out = out;
  d->max_errors = max_errors;
}

void diag_free(Diag *d) {
  for (int i = 0; i < d->nsources; i++) {
    free(d->sources[i].file);
    free(d->sources[i].text);
  }
  diag_init(d, d->out, d->max_errors);
}

Diag *diag_enter(Diag *d) {
  Diag *prev = entered;
  entered = d;
  return prev;
}

void diag_leave(Diag *previous) { entered = previous; }

void diag_finish(Diag *d) {
  FILE *f = d->out ? d->out : stderr;
  if (d->max_errors > 0 && d->nerrors > d->max_errors) {
    int hidden = d->nerrors - d->max_errors;
    fprintf(f, "shardc: error: %d more error%s not shown (the first %d are above)\n", hidden, hidden == 1 ? "" : "s",
            d->max_errors);
  }
  const DiagSource *cmd = NULL;
  for (int i = 0; i < d->nsources; i++)
    if (strcmp(d->sources[i].file, DIAG_CMDLINE) == 0) cmd = &d->sources[i];
  if (!cmd || !cmd->text[0] || d->nerrors_in_files == 0) return;
  fputs("shardc: note: the model was compiled with", f);
  for (const char *p = cmd->text; *p;) {
    size_t n = strcspn(p, "\n");
    fprintf(f, " -D %.*s", (int)n, p);
    p += n + (p[n] == '\n');
  }
  fputs(" (the command line's definitions override the file's values)\n", f);
}

bool diag_limit_reached(void) {
  Diag *d = cur();
  return d->max_errors > 0 && d->nerrors >= d->max_errors;
}

void diag_add_source(const char *file, const char *text) {
  Diag *d = cur();
  int i = 0;
  while (i < d->nsources && strcmp(d->sources[i].file, file) != 0) i++;
  if (i == DIAG_MAX_SOURCES) return; /* quoting lines is a courtesy */
  char *t = strdup(text);
  if (!t) die("out of memory");
  if (i == d->nsources) {
    d->sources[i].file = strdup(file);
    if (!d->sources[i].file) die("out of memory");
    d->nsources++;
  }
  free(d->sources[i].text);
  d->sources[i].text = t;
  d->sources[i].line = 1;
  d->sources[i].line_at = t;
  d->sources[i].line_len = -1;
}

bool diag_loc_is_cmdline(SrcLoc loc) { return loc.file && strcmp(loc.file, DIAG_CMDLINE) == 0; }

SrcLoc diag_blame(const SrcLoc *locs, int n, SrcLoc fallback) {
  SrcLoc at = fallback;
  bool cmd = false;
  for (int i = 0; i < n; i++)
    if (diag_loc_is_cmdline(locs[i]) && (!cmd || locs[i].line > at.line)) at = locs[i], cmd = true;
  return at;
}

/* The start of line `line` of a source, or NULL. Diagnostics mostly come in source order, so the
 * search goes on from the last line found (the whole file is not rescanned for every error). */
static const char *line_start(DiagSource *s, int line) {
  if (line < s->line) {
    s->line = 1;
    s->line_at = s->text;
    s->line_len = -1;
  }
  const char *p = s->line_at;
  int l = s->line;
  while (l < line) {
    const char *nl = strchr(p, '\n');
    if (!nl) return NULL;
    p = nl + 1;
    l++;
    s->line_len = -1;
  }
  s->line = l;
  s->line_at = p;
  return p;
}

enum { QUOTE_COLS = 160 }; /* a longer line is quoted as a window around the caret */

static void quote_line(SrcLoc loc) {
  DiagSource *s = NULL;
  Diag *d = cur();
  for (int i = 0; loc.file && i < d->nsources; i++)
    if (strcmp(d->sources[i].file, loc.file) == 0) s = &d->sources[i];
  if (!s || !s->text || loc.line < 1) return;
  const char *p = line_start(s, loc.line);
  if (!p || (!*p && loc.line > 1)) return;
  if (s->line_len < 0) { /* (measured once: the fuzzer's 65,280 errors on one 588 KB line took 39 s) */
    const char *e = strchr(p, '\n');
    s->line_len = e ? (long)(e - p) : (long)strlen(p);
  }
  long len = s->line_len;
  long from = 0, col = loc.col < 1 ? 1 : loc.col;
  if (len > QUOTE_COLS) { /* the caret's window: from QUOTE_COLS/2 before it */
    from = col - 1 > QUOTE_COLS / 2 ? col - 1 - QUOTE_COLS / 2 : 0;
    if (from > len - QUOTE_COLS) from = len - QUOTE_COLS;
  }
  long shown = len - from < QUOTE_COLS ? len - from : (len > QUOTE_COLS ? QUOTE_COLS : len);
  FILE *f = stream();
  fprintf(f, "%5d | %s%.*s%s\n      | ", loc.line, from ? "..." : "", (int)shown, p + from,
          from + shown < len ? "..." : "");
  if (from) fputs("   ", f);
  for (long i = from + 1; i < col && i <= from + shown; i++) fputc(p[i - 1] == '\t' ? '\t' : ' ', f);
  fputs("^\n", f);
}

/* Whether a diagnostic of this kind is printed (errors past the limit are only counted). */
static bool shown(bool is_error) {
  Diag *d = cur();
  if (is_error) d->nerrors++;
  else d->nwarnings++;
  return d->max_errors <= 0 || d->nerrors <= d->max_errors;
}

enum { MESSAGE_CHARS = 1024 }; /* a longer message (a 10 MB name quoted in it) is cut */

/* fmt's message, cut at MESSAGE_CHARS. */
static void vprint(FILE *f, const char *fmt, va_list ap) {
  char msg[MESSAGE_CHARS + 1];
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  fputs(msg, f);
  if (n > MESSAGE_CHARS) fprintf(f, "... (%d more characters)", n - MESSAGE_CHARS);
  fputc('\n', f);
}

static void vreport(SrcLoc loc, const char *kind, const char *fmt, va_list ap) {
  FILE *f = stream();
  if (loc.file)
    fprintf(f, "%s:%d:%d: %s: ", loc.file, loc.line, loc.col, kind);
  else
    fprintf(f, "shardc: %s: ", kind);
  vprint(f, fmt, ap);
  quote_line(loc);
}

void error_at(SrcLoc loc, const char *fmt, ...) {
  if (loc.file && !diag_loc_is_cmdline(loc)) cur()->nerrors_in_files++;
  cur()->last_hidden = !shown(true);
  if (cur()->last_hidden) return;
  va_list ap;
  va_start(ap, fmt);
  vreport(loc, "error", fmt, ap);
  va_end(ap);
}

void warning_at(SrcLoc loc, const char *fmt, ...) {
  cur()->last_hidden = !shown(false) || diag_limit_reached();
  if (cur()->last_hidden) return;
  va_list ap;
  va_start(ap, fmt);
  vreport(loc, "warning", fmt, ap);
  va_end(ap);
}

void note_at(SrcLoc loc, const char *fmt, ...) {
  if (diag_limit_reached()) return;
  va_list ap;
  va_start(ap, fmt);
  FILE *f = stream();
  if (loc.file) fprintf(f, "%s:%d:%d: note: ", loc.file, loc.line, loc.col);
  else fprintf(f, "shardc: note: ");
  vprint(f, fmt, ap);
  va_end(ap);
}

void note(const char *fmt, ...) {
  if (cur()->last_hidden) return;
  va_list ap;
  va_start(ap, fmt);
  FILE *f = stream();
  fputs("      = note: ", f);
  vprint(f, fmt, ap);
  va_end(ap);
}

void error_plain(const char *fmt, ...) {
  cur()->last_hidden = !shown(true);
  if (cur()->last_hidden) return;
  va_list ap;
  va_start(ap, fmt);
  SrcLoc none = {0};
  vreport(none, "error", fmt, ap);
  va_end(ap);
}

int diag_errors(void) { return cur()->nerrors; }

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
