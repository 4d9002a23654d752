/* runtime/base.c — the clock and rt_fatal (see base.h). */
#include "base.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

double rt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int rt_log_rank = -1;
void (*rt_fatal_hook)(void);

_Noreturn void rt_fatal(int code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* One write, so lines from several ranks do not interleave. */
  char line[1200];
  int n = snprintf(line, sizeof line, "shardrt: rank %d: %s\n", rt_log_rank, msg);
  if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
  ssize_t w = write(STDERR_FILENO, line, (size_t)n);
  (void)w;
  void (*hook)(void) = rt_fatal_hook;
  rt_fatal_hook = NULL; /* once, even if the hook itself fails */
  if (hook) hook();
  _exit(code);
}
