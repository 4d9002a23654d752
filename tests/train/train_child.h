/* tests/train/train_child.h — a trainer run in a child process, for the tests that drive
 * rt_train_main directly (tests/train's harness, tests/cudart's train test). */
#ifndef TRAIN_CHILD_H
#define TRAIN_CHILD_H

#include <stdarg.h>

#include "program.h"

typedef struct {
  int status;      /* exit status, or 128 + signal */
  char *out, *err; /* captured stdout, stderr ("" when empty); the caller frees both */
} Result;

/* rt_train_main(argc, argv, prog) in a child with its stdout and stderr written to the files out and
 * err; returns the child's exit status (128 + the signal when one killed it). Exits 2 when fork or
 * waitpid fail. */
int train_child(const RtProgram *prog, int argc, const char **argv, const char *out, const char *err);

/* train_child with argv[0] = argv0 and the NULL-terminated arguments first, ...(ap), its stdout and
 * stderr written to dir/stdout.txt and dir/stderr.txt and returned. */
Result train_run(const RtProgram *prog, const char *dir, const char *argv0, const char *first, va_list ap);

/* The whole file at path ("" when unreadable); the caller frees it. */
char *read_text(const char *path);

#endif
