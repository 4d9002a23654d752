/* runtime/base.c — the clock and rt_fatal (see base.h). */
#include "base.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double rt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int rt_log_rank = -1;

static int env_rank_int(const char *name) {
  const char *s = getenv(name);
  if (!s || !*s) return -1;
  char *end;
  long v = strtol(s, &end, 10);
  return *end || v < 0 || v > 1 << 30 ? -1 : (int)v;
}

int rt_launch_kind(void) {
  if (env_rank_int("OMPI_COMM_WORLD_SIZE") >= 1) return 1;
  /* (seen on Slurm 22.05: a 1-rank trainer in a 2-task batch script stopped with "srun says rank 0
     of 2 but MPI says rank 0 of 1": the batch script has SLURM_PROCID and SLURM_NTASKS too) */
  if (env_rank_int("SLURM_NTASKS") >= 1 && env_rank_int("SLURM_PROCID") >= 0 && env_rank_int("SLURM_STEP_NUM_TASKS") >= 1)
    return 2;
  return 0;
}

int rt_launch_rank(int *world) {
  int k = rt_launch_kind(), w = -1, r = -1;
  if (k == 1) w = env_rank_int("OMPI_COMM_WORLD_SIZE"), r = env_rank_int("OMPI_COMM_WORLD_RANK");
  if (k == 2) w = env_rank_int("SLURM_NTASKS"), r = env_rank_int("SLURM_PROCID");
  if (world) *world = w >= 1 ? w : 1;
  return r;
}
void (*rt_fatal_hook)(void);

_Noreturn void rt_fatal(int code, const char *fmt, ...) {
  /* Once a process: two threads that see one failure (the watchdog and the caller, or a crash after
   * a peer's death: watchdog.c) print one line; the second waits for the first's _exit. (The same
   * thread again — its hook failing — goes on.) */
  static atomic_flag ending = ATOMIC_FLAG_INIT;
  static _Thread_local bool mine;
  if (!mine && atomic_flag_test_and_set(&ending))
    for (;;) pause();
  mine = true;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* One write, so lines from several ranks do not interleave. */
  char line[1200];
  int n = rt_log_rank >= 0 ? snprintf(line, sizeof line, "shardrt: rank %d: %s\n", rt_log_rank, msg)
                            : snprintf(line, sizeof line, "shardrt: %s\n", msg); /* (no rank yet, or one process) */
  if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
  ssize_t w = write(STDERR_FILENO, line, (size_t)n);
  (void)w;
  void (*hook)(void) = rt_fatal_hook;
  rt_fatal_hook = NULL; /* once, even if the hook itself fails */
  if (hook) hook();
  _exit(code);
}

uint64_t rt_env_u64(const char *name, uint64_t dflt, uint64_t lo, uint64_t hi) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  errno = 0;
  bool hex = v[0] == '0' && (v[1] == 'x' || v[1] == 'X'); /* (base 0 read "010" as octal 8) */
  unsigned long long x = strtoull(v, &end, hex ? 16 : 10);
  int sh = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
  if (sh) end++;
  bool ok = !errno && end != v && !*end && *v != '-' && *v != '+' && x <= (UINT64_MAX >> sh);
  uint64_t val = ok ? (uint64_t)x << sh : 0;
  if (!ok || val < lo || val > hi)
    rt_fatal(1, "%s='%s': expected a whole number from %llu to %llu (decimal or 0x hex; K, M, G: KiB, MiB, GiB)", name,
             v, (unsigned long long)lo, (unsigned long long)hi);
  return val;
}

double rt_env_num(const char *name, double dflt, double lo, double hi) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !isfinite(x) || x < lo || x > hi)
    rt_fatal(1, "%s='%s': expected a number from %g to %g", name, v, lo, hi);
  return x;
}

bool rt_env_switch(const char *name, bool dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0) return v[0] == '1';
  rt_fatal(1, "%s='%s': expected 0 (off) or 1 (on)", name, v);
}
