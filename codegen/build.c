/* codegen/build.c — writes the generated C and runs the system C compiler on it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cg_config.h"
#include "codegen.h"
#include "diag.h"

static bool mkdir_p(const char *dir) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", dir);
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(buf, 0755) && errno != EEXIST) return false;
      *p = '/';
    }
  return mkdir(buf, 0755) == 0 || errno == EEXIST;
}

/* Writes dir/<model>.c, and with --cpu-kernels llvm the kernels' dir/<model>.o; the source's path
 * into src, the object's into obj ("" when there is none). */
static bool write_source(const Module *m, const char *dir, const CgOptions *o, char *src, size_t n, char *obj) {
  if (!mkdir_p(dir)) {
    error_plain("cannot create --emit-c directory '%s': %s", dir, strerror(errno));
    return false;
  }
  snprintf(src, n, "%s/%s.c", dir, m->name);
  FILE *f = fopen(src, "w");
  if (!f) {
    error_plain("cannot write '%s': %s", src, strerror(errno));
    return false;
  }
  CgOptions with_obj = *o;
  obj[0] = 0;
  if (o->llvm_kernels) {
    snprintf(obj, n, "%s/%s.o", dir, m->name);
    with_obj.obj_path = obj;
  }
  bool ok = cg_emit_c(f, m, &with_obj);
  if (fclose(f) != 0) ok = false;
  return ok;
}

bool cg_emit_file(const Module *m, const char *dir, const CgOptions *o) {
  char src[4096], obj[4096];
  return write_source(m, dir, o, src, sizeof src, obj);
}

/* s in single quotes for the shell (a path with spaces or quotes stays one word). */
static char *shell_quoted(const char *s) {
  size_t n = 3;
  for (const char *p = s; *p; p++) n += *p == '\'' ? 4 : 1;
  char *q = malloc(n), *w = q;
  if (!q) die("out of memory");
  *w++ = '\'';
  for (const char *p = s; *p; p++) {
    if (*p == '\'') {
      memcpy(w, "'\\''", 4);
      w += 4;
    } else {
      *w++ = *p;
    }
  }
  *w++ = '\'';
  *w = 0;
  return q;
}

/* The trainer's path can be written: its folder exists and is writable, and it is no folder itself
 * (found before compiling, not reported as a compiler failure). */
static bool output_writable(const char *out) {
  struct stat st;
  if (stat(out, &st) == 0 && S_ISDIR(st.st_mode)) {
    error_plain("-o %s: is a directory (name the trainer file to write)", out);
    return false;
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", out);
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == dir) dir[1] = 0;
  else *slash = 0;
  if (access(dir, W_OK) != 0) {
    error_plain("-o %s: cannot write into '%s': %s", out, dir, strerror(errno));
    return false;
  }
  return true;
}

bool cg_build(const Module *m, const char *out, const CgOptions *o) {
  char tmpl[] = "/tmp/shardc-XXXXXX";
  bool cuda = m->target == TARGET_CUDA;
  if (cuda && !CG_HAVE_CUDA) {
    error_plain("--target cuda: this shardc was built without the CUDA toolkit (libshardrt_cuda is missing); "
                "install CUDA and rebuild shardc, or build with --target cpu (`shardc plan --emit-c DIR` still "
                "writes the source)");
    return false;
  }
  if (!output_writable(out)) return false;
  const char *dir = o->emit_dir;
  if (!dir && !(dir = mkdtemp(tmpl))) {
    error_plain("cannot create a temporary directory: %s", strerror(errno));
    return false;
  }
  char src[4096], obj[4096];
  if (!write_source(m, dir, o, src, sizeof src, obj)) return false;

  const char *cc = o->cc ? o->cc : getenv("CC");
  const char *chosen = o->cc ? "--cc" : (cc && *cc ? "CC" : NULL); /* who chose the compiler, if not shardc */
  if (!cc || !*cc) cc = "cc";
  /* -O1: the generated C is the step's glue (calls into the runtime's kernels, BLAS and the LLVM kernels'
   * object), compiled in half -O2's time with the same step time (docs/performance.md, "The trainer's C at -O1") */
  const char *cflags = o->cflags ? o->cflags : "-O1";
  char *qsrc = shell_quoted(src), *qout = shell_quoted(out), *qobj = *obj ? shell_quoted(obj) : NULL;
  /* the runtime's headers and libraries: the install prefix's (the driver found them) or the build tree's */
  const char *inc = o->runtime_include ? o->runtime_include : CG_TREE_RUNTIME_INCLUDE;
  const char *lib = o->runtime_lib ? o->runtime_lib : CG_TREE_RUNTIME_LIB;
  char *qinc = shell_quoted(inc), *qlib = shell_quoted(lib);
  size_t len = strlen(cc) + strlen(cflags) + strlen(qsrc) + (qobj ? strlen(qobj) : 0) + strlen(qout) + 4 * strlen(qinc) + 3 * strlen(qlib) +
               strlen(CG_SYS_INCLUDES) + strlen(CG_LINK_DEPS) + strlen(CG_CUDA_SYS_INCLUDES) +
               strlen(CG_CUDA_SYS_LINK_DEPS) + 256;
  char *cmd = malloc(len);
  if (!cmd) die("out of memory");
  if (cuda)
    snprintf(cmd, len,
             "%s %s -std=gnu11 %s %s -I%s -I%s/ops -I%s/cuda%s%s -o %s %s/libshardrt.a %s %s/libshardrt_cuda.a "
             "%s/libshardrt.a %s",
             cc, cflags, qsrc, qobj ? qobj : "", qinc, qinc, qinc, CG_SYS_INCLUDES, CG_CUDA_SYS_INCLUDES, qout, qlib, CG_LINK_DEPS, qlib,
             qlib, CG_CUDA_SYS_LINK_DEPS);
  else
    snprintf(cmd, len, "%s %s -std=gnu11 %s %s -I%s -I%s/ops%s -o %s %s/libshardrt.a %s", cc, cflags, qsrc,
             qobj ? qobj : "", qinc, qinc, CG_SYS_INCLUDES, qout, qlib, CG_LINK_DEPS);
  free(qinc);
  free(qlib);
  free(qsrc);
  free(qout);
  free(qobj);
  if (o->verbose) fprintf(stderr, "shardc: %s\n", cmd);
  int st = system(cmd);
  free(cmd);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 127)
      error_plain("the C compiler `%s`%s%s%s was not found", cc, chosen ? " (from " : "", chosen ? chosen : "",
                  chosen ? ")" : "");
    else if (chosen || o->cflags)
      error_plain("the C compiler `%s %s` failed on the generated program '%s': check %s%s%s (with the default "
                  "compiler and flags, a failure would be a shardc bug)",
                  cc, cflags, src, chosen ? chosen : "", chosen && o->cflags ? " and " : "", o->cflags ? "--cflags" : "");
    else
      error_plain("the C compiler failed on the generated program '%s' (a shardc bug: please report it with `-v`)",
                  src);
    return false;
  }
  if (!o->emit_dir) {
    unlink(src);
    if (*obj) unlink(obj);
    rmdir(dir);
  }
  return true;
}
