/* tests/passes/test_verify_hook.c — the verifier after each pass checks only the graphs the pass
 * changed (ir_verify_changed); a pass that breaks a node must still be caught: a hook after `fuse`
 * (PipelineOptions.after_pass) breaks a node of a pipeline schedule's region body, and the compile
 * (in a child process: the verifier's failure aborts) must die naming fuse where the change was
 * recorded (ir_touch); one not recorded after the last pass, naming the final verification of the
 * whole IR; one not recorded after fuse, naming fuse under SHARDC_VERIFY=audit and =full. The same
 * plan with no breakage compiles, and under SHARDC_VERIFY=audit too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "diag.h"
#include "frontend.h"
#include "pipeline.h"
#include "tb.h"

static int failures;

#define EXPECT(c, ...)                                   \
  do {                                                   \
    if (!(c)) {                                          \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                      \
      fputc('\n', stderr);                               \
      failures++;                                        \
    }                                                    \
  } while (0)

static enum { NONE, RECORDED, UNRECORDED } breakage;
static const char *break_after; /* the pass after which the hook breaks a node */

/* The first region body's first computing node reads a value defined after its region in the top graph. */
static void break_node(Module *m, const char *pass) {
  if (breakage == NONE || strcmp(pass, break_after) != 0) return;
  Graph *g = m->graph;
  for (int i = 0; i < g->nnodes; i++) {
    Node *r = g->nodes[i];
    if (!r->body) continue;
    Graph *b = r->body;
    Value *late = g->nodes[g->nnodes - 1]->nout ? g->nodes[g->nnodes - 1]->out[0] : NULL;
    for (int k = 0; k < b->nnodes && late; k++) {
      Node *n = b->nodes[k];
      if (n->nin < 1 || n->op == OP_ARG) continue;
      n->in[0] = late;
      if (breakage == RECORDED) ir_touch(b);
      return;
    }
  }
  die("test: no region body to break");
}

static int compile_plan(void) {
  Arena a;
  arena_init(&a);
  FeDefine d[] = {{"pp", "2"}, {"micro_batch", "1"}, {"batch", "4"}};
  FeOptions o = {.defines = d, .ndefines = 3, .world = 2};
  Module *m = fe_compile(&a, SHARDC_MODELS_DIR "/tiny.model", &o);
  if (!m) return 2;
  PipelineOptions po = {.verify = true, .after_pass = break_node};
  return pipeline_run(m, &po) ? 0 : 3;
}

/* Runs the compile with `b` in a child, its stderr captured into err; returns its wait status. */
static int run_child(int b, const char *after, const char *verify_env, char *err, size_t cap) {
  int fd[2];
  if (pipe(fd) != 0) die("pipe");
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    dup2(fd[1], 2);
    close(fd[0]);
    if (verify_env) setenv("SHARDC_VERIFY", verify_env, 1);
    else unsetenv("SHARDC_VERIFY");
    breakage = b;
    break_after = after;
    _exit(compile_plan());
  }
  close(fd[1]);
  size_t n = 0;
  ssize_t k;
  while ((k = read(fd[0], err + n, cap - 1 - n)) > 0) n += (size_t)k;
  err[n] = 0;
  close(fd[0]);
  int st;
  waitpid(pid, &st, 0);
  return st;
}

int main(void) {
  static char err[1 << 16];
  int st = run_child(NONE, "fuse", NULL, err, sizeof err);
  EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the plan does not compile: %s", err);
  st = run_child(NONE, "fuse", "audit", err, sizeof err);
  EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the plan fails the audit: %s", err);
  st = run_child(RECORDED, "fuse", NULL, err, sizeof err);
  EXPECT(!(WIFEXITED(st) && WEXITSTATUS(st) == 0), "a recorded breakage compiled");
  EXPECT(strstr(err, "IR verification failed after fuse") && strstr(err, "IR invalid after pass fuse"),
         "a recorded breakage not caught after fuse: %s", err);
  /* after the last pass (verify): no pass after it touches the body, the final verification finds it */
  st = run_child(UNRECORDED, "verify", NULL, err, sizeof err);
  EXPECT(!(WIFEXITED(st) && WEXITSTATUS(st) == 0), "an unrecorded breakage compiled");
  EXPECT(strstr(err, "IR invalid after the last pass") && !strstr(err, "IR invalid after pass verify"),
         "an unrecorded breakage not caught by the final verification: %s", err);
  st = run_child(UNRECORDED, "fuse", "audit", err, sizeof err);
  EXPECT(strstr(err, "changed without ir_touch") && strstr(err, "IR invalid after pass fuse"),
         "the audit does not find the unrecorded breakage after fuse: %s", err);
  st = run_child(UNRECORDED, "fuse", "full", err, sizeof err);
  EXPECT(strstr(err, "IR invalid after pass fuse"), "SHARDC_VERIFY=full does not catch it after fuse: %s", err);
  if (failures) return 1;
  printf("test_verify_hook: ok\n");
  return 0;
}
