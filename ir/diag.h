/* ir/diag.h — diagnostics. Two kinds of error (CONVENTIONS.md §7):
 *   user mistakes: error_at(loc, ...) prints `file:line:col: error: ...`, the source
 *     line and a caret, and counts; the driver exits 1 when diag_errors() > 0.
 *   compiler bugs: die(...) / unreachable() print and abort.
 */
#ifndef SHARDC_DIAG_H
#define SHARDC_DIAG_H

#include <stdio.h>

#include "ir.h"

/* One compilation's diagnostics: where they go, the sources they quote, what they counted. The
 * driver (or a test, or a nested re-plan) owns one and enters it for the compilation it runs; the
 * reporting calls below write to the Diag entered on the calling thread. Without one entered, a
 * thread's own default Diag (stderr, no limit) takes them, so library callers need no set-up. */
enum { DIAG_MAX_SOURCES = 256 };
typedef struct {
  char *file, *text; /* the Diag's own copies (a compilation's arena may die before its messages) */
  int line;          /* line_at: the start of line `line` of text, for quoting in order in O(distance) */
  const char *line_at;
  long line_len; /* that line's length, -1 until measured (once: many errors on one long line) */
} DiagSource;
typedef struct Diag {
  FILE *out;            /* NULL: stderr */
  int max_errors;       /* errors printed before the rest are only counted (0: no limit) */
  int nerrors, nwarnings;
  bool last_hidden;     /* the last error or warning was past the limit: its notes are not shown */
  int nerrors_in_files; /* errors located in a source file (not the command line, not nowhere) */
  int nsources;
  DiagSource sources[DIAG_MAX_SOURCES];
} Diag;

enum { DIAG_DEFAULT_MAX_ERRORS = 50 };
void diag_init(Diag *d, FILE *out, int max_errors);
void diag_free(Diag *d); /* the copies of the sources; d is empty after it */
/* Makes d the calling thread's diagnostics until diag_leave(previous); returns the previous one. */
Diag *diag_enter(Diag *d);
void diag_leave(Diag *previous);
/* The errors counted past max_errors, as one line ("N more errors not shown"); nothing if none. And
 * when errors were located in the model's files while -D definitions changed it (DIAG_CMDLINE), a
 * note naming them: the file's line is quoted, the value that broke it may be the command line's. */
void diag_finish(Diag *d);
/* True once max_errors errors are printed: a parser may stop recovering (the rest would not show). */
bool diag_limit_reached(void);

/* Registers a source text (copied) so diagnostics can quote its lines; a second text of the same
 * file name replaces the first. */
void diag_add_source(const char *file, const char *text);
/* The file name of the command line's definitions (-D KEY=VALUE), one a line in their order, as a
 * source (frontend/settings.c registers it): an error a -D value causes points at that value. */
#define DIAG_CMDLINE "<command line>"
bool diag_loc_is_cmdline(SrcLoc loc);
/* Where an error about several settings points: the -D among locs given last (the command line's
 * word on them), else fallback (where the file wrote them). */
SrcLoc diag_blame(const SrcLoc *locs, int n, SrcLoc fallback);
void error_at(SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void warning_at(SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A one-line note at a location (`file:line:col: note: ...`, no source line): information, not a problem. */
void note_at(SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A note or hint attached to the previous diagnostic ("did you mean `heads`?"); no location line. */
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A plain error with no source location (command line, files). */
void error_plain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int diag_errors(void);
/* Diagnostics printed to another Diag (a quiet compile's, kept as text: replan.c reuses that compile as the
 * plan's own), written again to the current one: text, and the warnings it counted (it counted no errors). */
void diag_replay(const char *text, size_t len, int nwarnings);
int diag_warnings(void);

_Noreturn void die_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define die(...) die_at(__FILE__, __LINE__, __VA_ARGS__)
#define unreachable() die_at(__FILE__, __LINE__, "unreachable")

/* Levenshtein distance, for "did you mean" hints. */
int diag_edit_distance(const char *a, const char *b);
/* The candidate closest to name (distance <= max(1, strlen/3)), or NULL. */
const char *diag_nearest(const char *name, const char *const *cands, int ncands);

#endif
