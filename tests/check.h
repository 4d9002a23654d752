/* tests/check.h — the check the C tests share. CHECK(cond, fmt, ...) prints
 *   FILE:LINE: check failed: COND: message
 * to stderr and counts one failure in the int `failures` the including file defines (or declares),
 * and goes on: a test reports every failed check, then exits non-zero when `failures` is. */
#ifndef SHARDC_TESTS_CHECK_H
#define SHARDC_TESTS_CHECK_H

#include <stdio.h>

#define CHECK(cond, ...)                                                                                    \
  do {                                                                                                     \
    if (!(cond)) {                                                                                         \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);                             \
      fprintf(stderr, __VA_ARGS__);                                                                        \
      fputc('\n', stderr);                                                                                 \
      failures++;                                                                                          \
    }                                                                                                      \
  } while (0)

#endif
