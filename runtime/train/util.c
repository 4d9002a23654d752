/* runtime/train/util.c — errors, checked allocation, resident memory, dtypes (the clock: ../base.c). */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "files.h"

/* One line "error: MSG" in one write: stderr's pieces from 4 ranks interleaved ("error: error:
 * --data ..."). */
const char *rt_error_tool;

void rt_error_v(const char *fmt, va_list ap) {
  fflush(stdout);
  size_t tl = rt_error_tool ? strlen(rt_error_tool) : 0;
  char buf[4096];
  va_list aq;
  va_copy(aq, ap);
  int n = vsnprintf(NULL, 0, fmt, aq);
  va_end(aq);
  size_t len = (n > 0 ? (size_t)n : 0) + tl + 9; /* TOOL "error: " MSG "\n" NUL */
  char *line = len <= sizeof buf ? buf : malloc(len);
  if (!line) line = buf, len = sizeof buf; /* (out of memory: the message cut short) */
  if (tl >= len - 9) tl = 0;
  memcpy(line, rt_error_tool ? rt_error_tool : "", tl);
  memcpy(line + tl, "error: ", 7);
  vsnprintf(line + tl + 7, len - tl - 7, fmt, ap);
  size_t m = strlen(line);
  line[m] = '\n';
  for (size_t off = 0; off <= m;) {
    ssize_t w = write(2, line + off, m + 1 - off);
    if (w <= 0) break;
    off += (size_t)w;
  }
  if (line != buf) free(line);
}

/* This process's rank (as the launcher's environment gives it, before the bootstrap too; the
 * bootstrap checked it against MPI's), -1: not launched; *world: the job's ranks. */
static int error_rank(int *world) {
  int r = rt_launch_rank(world);
  return rt_log_rank >= 0 ? rt_log_rank : r;
}

static void error_line(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rt_error_v(fmt, ap);
  va_end(ap);
}

_Thread_local int rt_error_per_rank;

/* ---- the error paths' cleanups (files.h rt_on_error) ---- */

static _Thread_local RtOnError *on_error_top;

void rt_on_error(RtOnError *c, void (*fn)(void *), void *arg) {
  c->fn = fn, c->arg = arg, c->prev = on_error_top;
  on_error_top = c;
}

void rt_on_error_pop(RtOnError *c) {
  if (on_error_top != c) rt_bug("rt_on_error_pop: not the newest cleanup (one above it was not popped)");
  on_error_top = c->prev;
}

/* The message of fmt (into buf, or allocated when longer), formatted before the cleanups free what its
 * arguments point into; msg_end frees it, runs the cleanups and exits 1. */
static char *msg_v(char *buf, size_t n, const char *fmt, va_list ap) {
  va_list aq;
  va_copy(aq, ap);
  int len = vsnprintf(buf, n, fmt, aq);
  va_end(aq);
  if (len < 0 || (size_t)len < n) return buf;
  char *m = malloc((size_t)len + 1);
  if (!m) return buf; /* (out of memory: the message cut short) */
  vsnprintf(m, (size_t)len + 1, fmt, ap);
  return m;
}

static _Noreturn void msg_end(char *msg, const char *buf) {
  if (msg != buf) free(msg);
  while (on_error_top) { /* newest first; each popped before it runs */
    RtOnError *c = on_error_top;
    on_error_top = c->prev;
    c->fn(c->arg);
  }
  exit(1);
}

static volatile sig_atomic_t ended;
static void on_end(int sig) { ended = sig; }

void rt_user_error(const char *fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  char *msg = msg_v(buf, sizeof buf, fmt, ap);
  va_end(ap);
  int world, rank = error_rank(&world);
  if (rt_error_per_rank && rank >= 0 && world > 1) {
    error_line("rank %d: %s", rank, msg);
    msg_end(msg, buf);
  }
  if (rank <= 0) {
    error_line("%s", msg);
    msg_end(msg, buf);
  }
  /* rank 0 prints the same line: wait for the launcher's end of the job (see files.h) */
  fflush(stdout);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_end; /* (no SA_RESTART: the sleep ends on it) */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
  double until = rt_now() + rt_env_num("SHARDRT_ERROR_WAIT", RT_ERROR_WAIT_S, 0, 600);
  while (!ended && rt_now() < until) {
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (!ended) error_line("rank %d: %s", rank, msg);
  msg_end(msg, buf); /* (atexit: the comm's shared-memory regions go) */
}

void rt_rank_error(const char *fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  char *msg = msg_v(buf, sizeof buf, fmt, ap);
  va_end(ap);
  int world, rank = error_rank(&world);
  if (rank >= 0 && world > 1)
    error_line("rank %d: %s", rank, msg);
  else
    error_line("%s", msg);
  msg_end(msg, buf);
}

void rt_bug(const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fputs("shardrt: internal error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
  abort();
}

void *rt_xmalloc(size_t bytes) {
  void *q = malloc(bytes ? bytes : 1);
  if (!q) rt_user_error("out of memory allocating %zu bytes", bytes);
  return q;
}

void *rt_xcalloc(size_t n, size_t size) {
  void *q = calloc(n ? n : 1, size ? size : 1);
  if (!q) rt_user_error("out of memory allocating %zu x %zu bytes", n, size);
  return q;
}

char *rt_xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *q = rt_xmalloc(n);
  memcpy(q, s, n);
  return q;
}

char *rt_xprintf(const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) rt_bug("vsnprintf failed on \"%s\"", fmt);
  char *q = rt_xmalloc((size_t)n + 1);
  vsnprintf(q, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return q;
}

static int64_t proc_status_kb(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  size_t n = strlen(field);
  int64_t kb = -1;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, field, n) == 0 && line[n] == ':') {
      kb = strtoll(line + n + 1, NULL, 10);
      break;
    }
  }
  fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

int64_t rt_vm_hwm(void) { return proc_status_kb("VmHWM"); }
int64_t rt_vm_rss(void) { return proc_status_kb("VmRSS"); }



const char *rt_dtype_st_name(int dtype) {
  switch (dtype) {
  case RT_F32: return "F32";
  case RT_BF16: return "BF16";
  case RT_F16: return "F16";
  case RT_F64: return "F64";
  case RT_I32: return "I32";
  case RT_I64: return "I64";
  }
  rt_bug("unknown dtype %d", dtype);
}

int rt_dtype_from_st_name(const char *name) {
  static const int all[] = {RT_F32, RT_BF16, RT_F16, RT_F64, RT_I32, RT_I64};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (!strcmp(rt_dtype_st_name(all[i]), name)) return all[i];
  return -1;
}

int64_t rt_tensor_numel(const RtTensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++)
    n *= t->dims[i];
  return n;
}

const RtTensor *rt_find_tensor(const RtProgram *p, const char *name) {
  for (int i = 0; i < p->ntensors; i++)
    if (strcmp(p->tensors[i].name, name) == 0) return &p->tensors[i];
  return NULL;
}
