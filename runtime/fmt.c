/* runtime/fmt.c — byte counts for people (fmt.h). */
#include "fmt.h"

#include <stdio.h>

void rt_fmt_bytes(char *out, size_t n, double b) {
  if (b < 0)
    snprintf(out, n, "?");
  else if (b < 1024)
    snprintf(out, n, "%.0f B", b);
  else if (b < 1024.0 * 1024)
    snprintf(out, n, "%.1f KiB", b / 1024);
  else if (b < 1024.0 * 1024 * 1024)
    snprintf(out, n, "%.2f MiB", b / (1024.0 * 1024));
  else
    snprintf(out, n, "%.2f GiB", b / (1024.0 * 1024 * 1024));
}
