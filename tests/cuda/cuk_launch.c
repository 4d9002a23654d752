/* tests/cuda/cuk_launch.c — see cuk_launch.h. */
#include "cuk_launch.h"

#include <stdio.h>
#include <string.h>

int cukl_parse(const char *stmt, CukLaunch *out, int max) {
  int n = 0;
  const char *s = stmt;
  while ((s = strstr(s, "rt_cu_launch(")) != NULL) {
    if (n >= max) return -1;
    CukLaunch *L = &out[n];
    memset(L, 0, sizeof *L);
    int used = 0;
    if (sscanf(s, "rt_cu_launch(ctx, %d, %u, %u, %u, %u, %u, %u, %u, (void *[]){%n", &L->kernel, &L->grid[0],
               &L->grid[1], &L->grid[2], &L->block[0], &L->block[1], &L->block[2], &L->smem, &used) != 8 ||
        used == 0)
      return -1;
    s += used;
    while (*s == '&') {
      const char *open = strchr(s, '{');
      if (!open || L->nargs >= CUKL_MAX_ARGS) return -1;
      L->is_int[L->nargs] = strncmp(s, "&(long long)", 12) == 0;
      const char *p = open + 1;
      int depth = 0;
      while (*p && !(depth == 0 && *p == '}')) {
        depth += *p == '(' || *p == '{';
        depth -= *p == ')' || *p == '}';
        p++;
      }
      if (!*p || p - open - 1 >= 127) return -1;
      memcpy(L->expr[L->nargs], open + 1, (size_t)(p - open - 1));
      L->expr[L->nargs][p - open - 1] = 0;
      L->nargs++;
      s = p + 1;
      if (*s == ',') s++;
      while (*s == ' ') s++;
    }
    if (strncmp(s, "});", 3) != 0) return -1;
    n++;
  }
  return n;
}
