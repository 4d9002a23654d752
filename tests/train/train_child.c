/* tests/train/train_child.c — see train_child.h. */
#include "train_child.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "train/files.h" /* rt_xmalloc, rt_xprintf */

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

Result train_run(const RtProgram *prog, const char *dir, const char *argv0, const char *first, va_list ap) {
  const char *argv[64];
  int argc = 0;
  argv[argc++] = argv0;
  for (const char *a = first; a && argc < 63; a = va_arg(ap, const char *)) argv[argc++] = a;
  argv[argc] = NULL;
  char *out = rt_xprintf("%s/stdout.txt", dir), *err = rt_xprintf("%s/stderr.txt", dir);
  Result r = {train_child(prog, argc, argv, out, err), read_text(out), read_text(err)};
  free(out);
  free(err);
  return r;
}

char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return rt_xstrdup("");
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = rt_xmalloc((size_t)n + 1);
  size_t got = fread(s, 1, (size_t)n, f);
  s[got] = 0;
  fclose(f);
  return s;
}
