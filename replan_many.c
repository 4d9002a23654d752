/* replan_many.c — the driver's runs of many plans (see replan.h): --search's candidates, each compiled
 * and measured in a child process under a CPU-time limit, and --compare's variants side by side. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "diag.h"
#include "memplan_pack.h"
#include "plan_svg.h"
#include "replan.h"

/* The compiler's first error in captured diagnostics, without its "error: " (nothing: ""). */
static void first_error(const char *diag_text, char *out, size_t cap) {
  const char *e = diag_text ? strstr(diag_text, "error: ") : NULL;
  if (e) snprintf(out, cap, "%.*s", (int)strcspn(e + 7, "\n"), e + 7);
}

/* CPU seconds (user + system) process pid has run, from /proc (-1: gone). */
static double proc_cpu_s(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* after the command name: state, then fields 4.. */
  unsigned long long ut = 0, st = 0;
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The plan search's evaluation of candidates (passes/plan_search.h): each compiled and measured in a
 * child process, the result sent back through a pipe; a compile that takes over limit_s of CPU time
 * (the machine may be shared: wall time says more about its load) is stopped and the candidate
 * refused. The child's memory (its arena, the diagnostics' copies of the source texts) goes with it. */
void replan_search_eval(void *ctx, const CostDevice *dev, PlanJob *jobs, int njobs, double limit_s) {
  int fd[SEARCH_JOBS_MAX];
  pid_t pid[SEARCH_JOBS_MAX];
  PlanCand got[SEARCH_JOBS_MAX];
  size_t have[SEARCH_JOBS_MAX] = {0};
  fflush(stdout);
  fflush(stderr);
  for (int k = 0; k < njobs; k++) { /* the children, all at once */
    PlanCand *c = jobs[k].c;
    int fds[2];
    fd[k] = -1;
    pid[k] = -1;
    if (pipe(fds) != 0) {
      snprintf(c->err, sizeof c->err, "pipe: %s", strerror(errno));
      continue;
    }
    pid[k] = fork();
    if (pid[k] < 0) {
      snprintf(c->err, sizeof c->err, "fork: %s", strerror(errno));
      close(fds[0]);
      close(fds[1]);
      continue;
    }
    if (pid[k] == 0) { /* the child: compile, measure, report, exit */
      memplan_pack_set_jobs(1); /* (its CPU seconds are its limit; its siblings have the other cores) */
      close(fds[0]);
      for (int j = 0; j < k; j++)
        if (fd[j] >= 0) close(fd[j]); /* its elder siblings' pipes are the parent's */
      char *buf = NULL;
      size_t len = 0;
      FILE *ms = open_memstream(&buf, &len);
      Arena a;
      arena_init(&a);
      Module *m = ms ? replan_compile(ctx, &a, jobs[k].kv, jobs[k].n, ms) : NULL;
      if (ms) fclose(ms);
      if (m && m->memplan) plan_cand_measure(m, dev, c);
      else first_error(buf, c->err, sizeof c->err);
      ssize_t w = write(fds[1], c, sizeof *c);
      _exit(w == (ssize_t)sizeof *c ? 0 : 1);
    }
    close(fds[1]);
    fd[k] = fds[0];
  }
  /* their answers, until each is complete or ends, or runs over its CPU time (or, never to hang,
   * over 60 s + 30 x that in wall time) */
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  bool late[SEARCH_JOBS_MAX] = {0};
  for (;;) {
    struct pollfd pf[SEARCH_JOBS_MAX];
    int np = 0, which[SEARCH_JOBS_MAX];
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double wall = (double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec);
    for (int k = 0; k < njobs; k++) {
      if (fd[k] < 0) continue;
      if (proc_cpu_s(pid[k]) > limit_s || wall > 60 + 30 * limit_s) { /* stopped at once: the core is the others' */
        late[k] = true;
        kill(pid[k], SIGKILL);
        close(fd[k]);
        fd[k] = -1;
        continue;
      }
      pf[np] = (struct pollfd){.fd = fd[k], .events = POLLIN}, which[np++] = k;
    }
    if (!np) break;
    int got_any = poll(pf, (nfds_t)np, 20); /* a look at the children's CPU time every 20 ms */
    if (got_any < 0) break;
    for (int i = 0; i < np && got_any > 0; i++) {
      if (!pf[i].revents) continue;
      int k = which[i];
      ssize_t r = read(fd[k], (char *)&got[k] + have[k], sizeof got[k] - have[k]);
      if (r > 0) have[k] += (size_t)r;
      if (r <= 0 || have[k] == sizeof got[k]) {
        close(fd[k]);
        fd[k] = -1;
      }
    }
  }
  for (int k = 0; k < njobs; k++) {
    PlanCand *c = jobs[k].c;
    late[k] = late[k] || fd[k] >= 0; /* still open: out of time */
    if (fd[k] >= 0) close(fd[k]);
    if (late[k] && pid[k] > 0) kill(pid[k], SIGKILL);
    if (pid[k] > 0) waitpid(pid[k], NULL, 0);
    if (pid[k] < 0) continue;
    c->timed_out = late[k] && have[k] != sizeof got[k];
    if (have[k] == sizeof got[k]) *c = got[k];
    else snprintf(c->err, sizeof c->err, late[k] ? "its compile took over %.1f s of CPU time (stopped)" : "its compile crashed",
                  limit_s);
  }
}

bool replan_write_svg(const char *path, const char *flag, const Module *m, const CompareCol *cols, int n) {
  FILE *f = fopen(path, "w");
  if (f) {
    char title[160];
    snprintf(title, sizeof title, "%s on %s", m->name ? m->name : "model",
             m->has_topology && m->topo.name ? m->topo.name : "no topology");
    if (strcmp(flag, "--mesh-svg") == 0) plan_svg_mesh(f, m);
    else if (strcmp(flag, "--memory-svg") == 0) plan_svg_memory(f, title, cols, n);
    else plan_svg_compare(f, title, cols, n);
  }
  if (!f || ferror(f) || fclose(f) != 0) {
    error_plain("%s: cannot write '%s'", flag, path);
    return false;
  }
  return true;
}

/* `plan --compare` (passes/plan_compare.c): each variant compiled in the driver's arena, measured
 * with the device figures of its own topology (and the profile), printed side by side. */
int replan_compare(Replan *r, const char *spec, const char *profile, double storage_Bps, const ReplanSvg *svg) {
  CompareCol cols[COMPARE_MAX];
  int n = 0;
  if (!plan_compare_parse(spec, r->input, cols, &n)) return 1;
  const Module *first = NULL;
  for (int i = 0; i < n; i++) {
    Replan one = *r;
    if (cols[i].file) one.input = cols[i].file;
    const char *kv[COMPARE_KV];
    for (int k = 0; k < cols[i].nkv; k++) kv[k] = cols[i].kv[k];
    char *buf = NULL;
    size_t len = 0;
    FILE *ms = open_memstream(&buf, &len);
    Module *m = ms ? replan_compile(&one, r->arena, kv, cols[i].nkv, ms) : NULL;
    if (ms) fclose(ms);
    if (m && m->memplan) {
      CostDevice dev;
      cost_device_defaults(m, &dev);
      if (profile && !cost_profile_read(profile, &dev)) return 1;
      plan_compare_measure(m, &dev, storage_Bps, &cols[i]);
      if (!first) first = m;
    } else {
      first_error(buf, cols[i].err, sizeof cols[i].err);
    }
    free(buf);
  }
  if (!first) {
    for (int i = 0; i < n; i++) error_plain("--compare %s: %s", cols[i].label, cols[i].err[0] ? cols[i].err : "does not compile");
    return 1;
  }
  plan_compare_print(stdout, first, cols, n, storage_Bps);
  if (svg->memory && !replan_write_svg(svg->memory, "--memory-svg", first, cols, n)) return 1;
  if (svg->compare && !replan_write_svg(svg->compare, "--compare-svg", first, cols, n)) return 1;
  return 0;
}

