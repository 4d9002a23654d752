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

bool cg_build(const Module *m, const char *out, const CgOptions *o) {
  char tmpl[] = "/tmp/shardc-XXXXXX";
  bool cuda = m->target == TARGET_CUDA;
  if (cuda && !*CG_CUDA_LINK_DEPS) {
    error_plain("--target cuda: this shardc was built without the CUDA toolkit (libshardrt_cuda is missing); "
                "install CUDA and rebuild shardc, or build with --target cpu (`shardc plan --emit-c DIR` still "
                "writes the source)");
    return false;
  }
  const char *dir = o->emit_dir;
  if (!dir && !(dir = mkdtemp(tmpl))) {
    error_plain("cannot create a temporary directory: %s", strerror(errno));
    return false;
  }
  char src[4096], obj[4096];
  if (!write_source(m, dir, o, src, sizeof src, obj)) return false;

  const char *cc = o->cc ? o->cc : getenv("CC");
  if (!cc || !*cc) cc = "cc";
  const char *cflags = o->cflags ? o->cflags : "-O2";
  const char *xinc = cuda ? CG_CUDA_INCLUDES : "", *xlink = cuda ? CG_CUDA_LINK_DEPS : "";
  size_t len = strlen(cc) + strlen(cflags) + strlen(src) + strlen(obj) + strlen(out) + strlen(CG_INCLUDES) +
               strlen(CG_RUNTIME_LIB) + strlen(CG_LINK_DEPS) + strlen(xinc) + strlen(xlink) + 64;
  char *cmd = malloc(len);
  if (!cmd) die("out of memory");
  snprintf(cmd, len, "%s %s -std=gnu11 %s %s%s%s -o %s %s %s %s", cc, cflags, src, obj, CG_INCLUDES, xinc, out,
           CG_RUNTIME_LIB, CG_LINK_DEPS, xlink);
  if (o->verbose) fprintf(stderr, "shardc: %s\n", cmd);
  int st = system(cmd);
  free(cmd);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    error_plain("the C compiler failed on the generated program '%s' (a shardc bug: please report it)", src);
    return false;
  }
  if (!o->emit_dir) {
    unlink(src);
    if (*obj) unlink(obj);
    rmdir(dir);
  }
  return true;
}
