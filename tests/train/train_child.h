/* tests/train/train_child.h — a trainer run in a child process, for the tests that drive
 * rt_train_main directly (tests/train's harness, tests/cudart's train test). */
#ifndef TRAIN_CHILD_H
#define TRAIN_CHILD_H

#include "program.h"

/* rt_train_main(argc, argv, prog) in a child with its stdout and stderr written to the files out and
 * err; returns the child's exit status (128 + the signal when one killed it). Exits 2 when fork or
 * waitpid fail. */
int train_child(const RtProgram *prog, int argc, const char **argv, const char *out, const char *err);

#endif
