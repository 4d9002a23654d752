/* tests/check.h — the checks the C tests share. CHECK(cond, fmt, ...) prints
 *   FILE:LINE: check failed: COND: message
 * to stderr and counts one failure in the int `failures` the including file defines (or declares),
 * and goes on: a test reports every failed check, then exits non-zero when `failures` is.
 * CHECK_RANK(rank, cond, fmt, ...) is CHECK in a test that runs on several ranks (under mpirun):
 *   rank R: FILE:LINE: check failed: COND: message
 * and the rank exits 1 after CHECK_RANK_MAX failed checks (a collective gone wrong fails every check
 * after it; the first ones say what). */
#ifndef SHARDC_TESTS_CHECK_H
#define SHARDC_TESTS_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                                                    \
  do {                                                                                                     \
    if (!(cond)) {                                                                                         \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);                             \
      fprintf(stderr, __VA_ARGS__);                                                                        \
      fputc('\n', stderr);                                                                                 \
      failures++;                                                                                          \
    }                                                                                                      \
  } while (0)

#define CHECK_RANK_MAX 20
#define CHECK_RANK(rank, cond, ...)                                                                         \
  do {                                                                                                     \
    if (!(cond)) {                                                                                         \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", (rank), __FILE__, __LINE__, #cond);            \
      fprintf(stderr, __VA_ARGS__);                                                                        \
      fputc('\n', stderr);                                                                                 \
      if (++failures > CHECK_RANK_MAX) exit(1);                                                            \
    }                                                                                                      \
  } while (0)

#endif
