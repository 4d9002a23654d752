/* ir/diag.h — diagnostics. Two kinds of error (CONVENTIONS.md §7):
 *   user mistakes: error_at(loc, ...) prints `file:line:col: error: ...`, the source
 *     line and a caret, and counts; the driver exits 1 when diag_errors() > 0.
 *   compiler bugs: die(...) / unreachable() print and abort.
 */
#ifndef SHARDC_DIAG_H
#define SHARDC_DIAG_H

#include <stdio.h>

#include "ir.h"

/* Registers a source text so diagnostics can quote its lines. text must outlive diag use. */
void diag_add_source(const char *file, const char *text);
void diag_set_stream(FILE *f); /* default stderr */
void error_at(SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void warning_at(SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A one-line note at a location (`file:line:col: note: ...`, no source line): information, not a problem. */
void note_at(SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A note or hint attached to the previous diagnostic ("did you mean `heads`?"); no location line. */
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A plain error with no source location (command line, files). */
void error_plain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int diag_errors(void);
void diag_reset(void);

_Noreturn void die_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define die(...) die_at(__FILE__, __LINE__, __VA_ARGS__)
#define unreachable() die_at(__FILE__, __LINE__, "unreachable")

/* Levenshtein distance, for "did you mean" hints. */
int diag_edit_distance(const char *a, const char *b);
/* The candidate closest to name (distance <= max(1, strlen/3)), or NULL. */
const char *diag_nearest(const char *name, const char *const *cands, int ncands);

#endif
