/* frontend/frontend.c — reads a .model file and its imports, fills the Module, lowers the model.
 *
 * Imports resolve relative to the importing file's folder, then through the
 * import dirs in order. A file imported twice is read once; a file that imports
 * itself (directly or not) is an error naming the cycle.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../ir/mesh.h"
#include "../ir/plan_options.h"
#include "diag.h"
#include "fe.h"

#define MAX_FILE_BYTES (64 << 20)
#define MAX_IMPORT_DEPTH 64

typedef struct {
  PtrVec loaded; /* canonical paths read so far */
  PtrVec stack;  /* canonical paths being read (for cycles) */
  PtrVec shown;  /* the display names matching stack */
} Loader;

/* Reads a whole file into the arena; NULL (errno set) on failure. */
static char *read_file(Arena *a, const char *path, size_t *len) {
  struct stat st;
  if (stat(path, &st) != 0) return NULL;
  if (!S_ISREG(st.st_mode)) { /* a folder, /dev/stdin, a fifo: never block or read forever */
    errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    return NULL;
  }
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  if (!buf) die("out of memory");
  for (;;) {
    if (n + 1 >= cap) {
      if (cap >= MAX_FILE_BYTES) {
        free(buf);
        fclose(f);
        errno = EFBIG;
        return NULL;
      }
      cap *= 2;
      char *nb = realloc(buf, cap);
      if (!nb) die("out of memory");
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
  }
  int err = ferror(f);
  fclose(f);
  if (err) {
    free(buf);
    errno = EIO;
    return NULL;
  }
  buf[n] = 0;
  char *out = arena_alloc(a, n + 1);
  memcpy(out, buf, n + 1);
  free(buf);
  *len = n;
  return out;
}

static bool is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static const char *dir_of(Arena *a, const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return ".";
  if (slash == path) return "/";
  return arena_strndup(a, path, (size_t)(slash - path));
}

static const char *canonical(Arena *a, const char *path) {
  char buf[PATH_MAX];
  if (!realpath(path, buf)) return arena_strdup(a, path);
  return arena_strdup(a, buf);
}

static bool in_vec(const PtrVec *v, const char *s) {
  for (int i = 0; i < v->n; i++)
    if (strcmp(v->v[i], s) == 0) return true;
  return false;
}

static void load_text(Fe *fe, Loader *ld, const char *shown, const char *canon, const char *text, size_t len);

static void do_import(Fe *fe, Loader *ld, const char *from, const Decl *d) {
  const char *name = d->name;
  if (!*name) {
    error_at(d->loc, "empty import path");
    return;
  }
  PtrVec tried = {0};
  const char *found = NULL;
  if (name[0] == '/') {
    vec_push(fe->a, &tried, (void *)name);
    if (is_file(name)) found = name;
  } else {
    const char *dirs[66];
    int nd = 0;
    dirs[nd++] = dir_of(fe->a, from);
    for (int i = 0; i < fe->opt->nimport_dirs && nd < 66; i++) dirs[nd++] = fe->opt->import_dirs[i];
    for (int i = 0; i < nd && !found; i++) {
      const char *p = strcmp(dirs[i], ".") == 0 ? name : arena_printf(fe->a, "%s/%s", dirs[i], name);
      if (in_vec(&tried, p)) continue; /* (-I of the default directory: it was looked for, and named, twice) */
      vec_push(fe->a, &tried, (void *)p);
      if (is_file(p)) found = p;
    }
  }
  if (!found) {
    error_at(d->loc, "cannot find import \"%s\"", name);
    const char *list = "";
    for (int i = 0; i < tried.n; i++) list = arena_printf(fe->a, "%s%s%s", list, i ? ", " : "", (char *)tried.v[i]);
    note("looked for %s", list);
    return;
  }
  const char *canon = canonical(fe->a, found);
  if (in_vec(&ld->stack, canon)) {
    error_at(d->loc, "import cycle: \"%s\" is already being imported", name);
    const char *chain = "";
    int start = 0;
    for (int i = 0; i < ld->stack.n; i++)
      if (strcmp(ld->stack.v[i], canon) == 0) start = i;
    for (int i = start; i < ld->shown.n; i++) chain = arena_printf(fe->a, "%s%s imports ", chain, (char *)ld->shown.v[i]);
    note("%s%s", chain, found);
    return;
  }
  if (in_vec(&ld->loaded, canon)) return;
  if (ld->stack.n >= MAX_IMPORT_DEPTH) {
    error_at(d->loc, "imports nested more than %d deep", MAX_IMPORT_DEPTH);
    return;
  }
  size_t len;
  char *text = read_file(fe->a, found, &len);
  if (!text) {
    error_at(d->loc, "cannot read \"%s\": %s", found, strerror(errno));
    return;
  }
  load_text(fe, ld, arena_strdup(fe->a, found), canon, text, len);
}

static void add_unique(Fe *fe, Decl **slot, Decl *d, const char *what) {
  if (*slot) {
    error_at(d->loc, "a second %s block", what);
    note("the first is at %s:%d:%d", (*slot)->loc.file, (*slot)->loc.line, (*slot)->loc.col);
    return;
  }
  *slot = d;
}

/* A source is text: a NUL byte (a binary file, a truncated copy) would end it silently. */
static bool text_only(const char *shown, const char *text, size_t len) {
  size_t n = strlen(text);
  if (n == len) return true;
  SrcLoc at = {shown, 1, 1};
  for (const char *p = text; p < text + n; p++) {
    at.col = *p == '\n' ? 1 : at.col + 1;
    at.line += *p == '\n';
  }
  error_at(at, "a NUL byte in the source (byte %zu of %zu): is this a binary file?", n + 1, len);
  return false;
}

static void load_text(Fe *fe, Loader *ld, const char *shown, const char *canon, const char *text, size_t len) {
  vec_push(fe->a, &ld->loaded, (void *)canon);
  vec_push(fe->a, &ld->stack, (void *)canon);
  vec_push(fe->a, &ld->shown, (void *)shown);
  diag_add_source(shown, text);
  if (!text_only(shown, text, len)) return;
  ParseCtx ctx = {fe->a, shown, {0}};
  fe_parse(&ctx, text);
  for (int i = 0; i < ctx.decls.n; i++) {
    Decl *d = ctx.decls.v[i];
    switch (d->kind) {
    case D_IMPORT: do_import(fe, ld, shown, d); break;
    case D_MODEL: add_unique(fe, &fe->model, d, "model"); break;
    case D_LAYER: vec_push(fe->a, &fe->layers, d->layer); break;
    case D_TOPOLOGY: add_unique(fe, &fe->topology, d, "topology"); break;
    case D_PARALLEL: add_unique(fe, &fe->parallel, d, "parallel"); break;
    case D_TRAIN: add_unique(fe, &fe->train, d, "train"); break;
    case D_CONST:
      if (d->stmt) vec_push(fe->a, &fe->consts, d->stmt);
      break;
    }
  }
  ld->stack.n--;
  ld->shown.n--;
}

/* --topology FILE: its topology block replaces the model's. */
static const Decl *load_topology_file(Fe *fe, const char *path) {
  size_t len;
  char *text = read_file(fe->a, path, &len);
  if (!text) {
    error_plain("cannot read topology file \"%s\": %s", path, strerror(errno));
    return NULL;
  }
  const char *shown = arena_strdup(fe->a, path);
  diag_add_source(shown, text);
  if (!text_only(shown, text, len)) return NULL;
  ParseCtx ctx = {fe->a, shown, {0}};
  fe_parse(&ctx, text);
  const Decl *found = NULL;
  for (int i = 0; i < ctx.decls.n; i++) {
    const Decl *d = ctx.decls.v[i];
    if (d->kind == D_TOPOLOGY && !found) found = d;
    else if (d->kind == D_TOPOLOGY) error_at(d->loc, "a second topology block");
    else error_at(d->loc, "a --topology file holds only a topology block");
  }
  if (!found && diag_errors() == 0) error_plain("no topology block in \"%s\"", path);
  return found;
}

static Module *compile(Arena *a, const char *shown, const char *canon, const char *text, size_t len,
                       const FeOptions *o) {
  static const FeOptions none = {0};
  if (!o) o = &none;
  int errors0 = diag_errors();
  Fe fe;
  memset(&fe, 0, sizeof fe);
  fe.a = a;
  fe.opt = o;
  fe.errors0 = errors0;
  fe.define_used = ARENA_ARRAY(a, bool, o->ndefines + 1);
  Module *m = ARENA_NEW(a, Module);
  m->arena = a;
  m->cost_profile = o->profile_file;
  m->cpu_llvm_kernels = o->cpu_llvm_kernels;
  ir_plan_defaults(&m->plan);
  ir_recipe_defaults(&m->recipe);
  m->nsyms = 2;
  m->syms = ARENA_ARRAY(a, const char *, m->nsyms);
  m->syms[0] = "batch";
  m->syms[1] = "seq";
  fe.m = m;
  fe_define_source(&fe);

  Loader ld;
  memset(&ld, 0, sizeof ld);
  load_text(&fe, &ld, shown, canon, text, len);
  /* a syntax error (or an import that failed) lost a declaration, and every use of it would be
   * reported too ("`seq` is not set" x 5 after a stray ','): its errors alone, as Go does */
  if (diag_errors() != errors0) return NULL;

  const Decl *topo = fe.topology;
  if (o->topology_file) topo = load_topology_file(&fe, o->topology_file);
  if (topo) fe_topology(&fe, topo);
  if (fe.parallel) fe_plan(&fe, fe.parallel);
  if (fe.train) fe_recipe(&fe, fe.train);
  fe_apply_defines(&fe);
  ir_plan_check_applied(&m->plan); /* an option no pass applies is refused, at its field */
  fe_check_plan(&fe);
  /* (micro_batch above batch: ir/mesh.c, resolve_batch — batch is not a multiple of micro_batch x dp) */

  if (!fe.model) {
    if (diag_errors() == errors0) error_plain("no model block in \"%s\"", shown);
  } else if (ir_mesh_resolve(m, o->world)) {
    fe_lower(&fe); /* the mesh and the batch are decided: `batch` is m->batch.micro x dp */
  } else {
    return NULL; /* the plan does not fit the world: nothing lowered (and no -D model constant used) */
  }

  for (int i = 0; i < o->ndefines; i++) {
    if (fe.define_used[i]) continue;
    error_at(fe_define_loc(&fe, i, false), "-D %s: no plan or train field or model constant has this name",
             o->defines[i].key);
    PtrVec cands = {0};
    fe_push_setting_keys(&fe, &cands);
    for (int j = 0; j < fe.const_names.n; j++) vec_push(a, &cands, fe.const_names.v[j]);
    const char *hint = diag_nearest(o->defines[i].key, (const char *const *)cands.v, cands.n);
    if (hint) note("did you mean `%s`?", hint);
  }
  return diag_errors() == errors0 ? m : NULL;
}

Module *fe_compile(Arena *a, const char *path, const FeOptions *o) {
  size_t len;
  char *text = read_file(a, path, &len);
  if (!text) {
    error_plain("cannot read \"%s\": %s", path, strerror(errno));
    return NULL;
  }
  return compile(a, arena_strdup(a, path), canonical(a, path), text, len, o);
}

Module *fe_compile_source(Arena *a, const char *name, const char *text, const FeOptions *o) {
  const char *shown = arena_strdup(a, name);
  return compile(a, shown, shown, arena_strdup(a, text), strlen(text), o);
}
