/* tests/train/train_child.c — see train_child.h. */
#include "train_child.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int train_child(const RtProgram *prog, int argc, const char **argv, const char *out, const char *err) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(2);
  }
  if (pid == 0) {
    int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0) _exit(99);
    int rc = rt_train_main(argc, (char **)argv, prog);
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  int ws;
  if (waitpid(pid, &ws, 0) != pid) {
    perror("waitpid");
    exit(2);
  }
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}
