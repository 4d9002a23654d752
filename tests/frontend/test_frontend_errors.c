/* tests/frontend/test_frontend_errors.c — every error path: malformed inputs and their exact diagnostics.
 *
 * usage: test_frontend_errors CASES MODELS_DIR [--print]
 *
 * CASES holds the table (see cases.txt for the format). Each case's source is
 * written as main.model into a scratch folder (with `models` linking to the
 * bundled models and an optional extra.model) and compiled from there, so the
 * file names in the diagnostics are stable. The whole stderr of the front end
 * must equal the case's `want` text, and the compile must fail. --print shows
 * what each case produces instead of checking (to write new cases).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "diag.h"
#include "frontend.h"

typedef struct {
  char *name, *defines, *extra, *src, *want;
} Case;

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s: %s\n", path, strerror(errno));
    exit(2);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) exit(2);
  buf[n] = 0;
  fclose(f);
  return buf;
}

static void spit(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(2);
  }
}

/* Parses the table: "=== name" starts a case; "--- src", "--- want", "--- extra", "--- defines" start sections. */
static int parse_cases(char *text, Case *cs, int max) {
  int n = -1;
  char **sect = NULL;
  for (char *line = text; line && *line;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    if (strncmp(line, "=== ", 4) == 0) {
      if (++n >= max) exit(2);
      memset(&cs[n], 0, sizeof cs[n]);
      cs[n].name = line + 4;
      sect = NULL;
    } else if (n >= 0 && strncmp(line, "--- ", 4) == 0) {
      const char *s = line + 4;
      sect = strcmp(s, "src") == 0       ? &cs[n].src
             : strcmp(s, "want") == 0    ? &cs[n].want
             : strcmp(s, "extra") == 0   ? &cs[n].extra
             : strcmp(s, "defines") == 0 ? &cs[n].defines
                                         : NULL;
      if (!sect) {
        fprintf(stderr, "cases: unknown section '%s'\n", s);
        exit(2);
      }
      *sect = calloc(1, 1);
    } else if (sect) {
      size_t a = strlen(*sect), b = strlen(line);
      *sect = realloc(*sect, a + b + 2);
      memcpy(*sect + a, line, b);
      (*sect)[a + b] = '\n';
      (*sect)[a + b + 1] = 0;
    }
    line = nl ? nl + 1 : NULL;
  }
  /* Blank lines between cases are not part of a section. */
  for (int i = 0; i <= n; i++) {
    char **ss[4] = {&cs[i].src, &cs[i].want, &cs[i].extra, &cs[i].defines};
    for (int k = 0; k < 4; k++) {
      char *t = *ss[k];
      size_t l = t ? strlen(t) : 0;
      while (l >= 2 && t[l - 1] == '\n' && t[l - 2] == '\n') t[--l] = 0;
    }
  }
  return n + 1;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s CASES MODELS_DIR [--print]\n", argv[0]);
    return 2;
  }
  bool print = argc > 3 && strcmp(argv[3], "--print") == 0;
  static Case cs[256];
  int n = parse_cases(slurp(argv[1]), cs, 256);
  char models[4096];
  if (!realpath(argv[2], models)) return 2;
  char dir[] = "/tmp/shardc-fe-XXXXXX";
  if (!mkdtemp(dir) || chdir(dir) != 0 || symlink(models, "models") != 0) {
    perror("scratch folder");
    return 2;
  }
  int failed = 0;
  for (int i = 0; i < n; i++) {
    Case *c = &cs[i];
    if (!c->src) {
      fprintf(stderr, "case %s: no src\n", c->name);
      return 2;
    }
    /* The deep-nesting case is generated: "@@DEEP@@" becomes 3000 lines of '('. */
    char *src = c->src, *deep = strstr(src, "@@DEEP@@");
    if (deep) {
      char *s = malloc(strlen(src) + 6001);
      size_t pre = (size_t)(deep - src);
      memcpy(s, src, pre);
      for (int k = 0; k < 3000; k++) memcpy(s + pre + 2 * k, "(\n", 2);
      strcpy(s + pre + 6000, deep + 8);
      src = s;
    }
    spit("main.model", src);
    if (c->extra) spit("extra.model", c->extra);
    FeDefine defs[16];
    int nd = 0;
    char *dl = c->defines ? strdup(c->defines) : NULL;
    for (char *tok = dl ? strtok(dl, ";\n") : NULL; tok && nd < 16; tok = strtok(NULL, ";\n")) {
      char *eq = strchr(tok, '=');
      if (eq) *eq = 0;
      defs[nd].key = tok;
      defs[nd].value = eq ? eq + 1 : "1";
      nd++;
    }
    const char *dirs[] = {"models"};
    FeOptions o = {dirs, 1, defs, nd, NULL, 0, NULL, false};
    char *out = NULL;
    size_t outn = 0;
    FILE *ms = open_memstream(&out, &outn);
    if (!ms) return 2;
    Diag d; /* this case's own diagnostics, captured, every error shown */
    diag_init(&d, ms, 0);
    Diag *outer = diag_enter(&d);
    Arena a;
    arena_init(&a);
    Module *m = fe_compile(&a, "main.model", &o);
    diag_leave(outer);
  diag_free(&d);
    fclose(ms);
    if (print) {
      printf("=== %s\n%s", c->name, out);
    } else if (m) {
      fprintf(stderr, "FAIL %s: compiled without an error\n", c->name);
      failed++;
    } else if (!c->want || strcmp(out, c->want) != 0) {
      fprintf(stderr, "FAIL %s\n--- want\n%s--- got\n%s", c->name, c->want ? c->want : "(none)\n", out);
      failed++;
    }
    arena_free(&a);
    free(out);
    free(dl);
    if (deep) free(src);
    unlink("extra.model");
    unlink("main.model");
  }
  unlink("models");
  rmdir(dir);
  if (!print) printf("%d cases, %d failed\n", n, failed);
  return failed ? 1 : 0;
}
