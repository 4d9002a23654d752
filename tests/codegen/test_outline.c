/* tests/codegen/test_outline.c — codegen/outline.c on hand-written entry points: which integers it
 * lifts into a[] (code literals that differ between the runs of a shape; two that differ alike
 * share one), which it leaves (floating, hex, octal, suffixed literals, strings, characters, digits
 * in names, lines starting `static` or `case`), a comment's differing number written `?`, a run
 * whose braces do not balance or that declares a static variable left in place, the marks removed, and text without marks unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outline.h"

static int fails;

static char *outline(const char *text, const char *locals) {
  char *out = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&out, &n);
  if (!f) abort();
  cg_outline_write(f, text, strlen(text), locals);
  fclose(f);
  return out;
}

static void has(const char *out, const char *want, int times, const char *what) {
  int k = 0;
  for (const char *p = out; (p = strstr(p, want)); p++) k++;
  if (k != times) {
    printf("FAIL %s: '%s' %d times, want %d\n", what, want, k, times);
    fails++;
  }
}

#define RUN(m, s, t, tag)                                                                                     \
  "  /*@outline*/\n"                                                                                          \
  "  f((M + " m "), (M + " s "), 2.5f, 1e-5, \"x " t "\", 'c', 0x10, 010, 3u, c1_0, 64); /* tag " tag " */\n" \
  "  k((M + " m "));\n"                                                                                       \
  "  static const int64_t ns[] = {4, 5};\n"                                                                   \
  "  switch (s) {\n  case 3: break;\n  }\n"

int main(void) {
  const char *text = "static void step(char *M, RtCtx *ctx) {\n"
                     "  (void)ctx;\n"
                     "  head(1);\n" RUN("100", "300", "7", "1000") RUN("200", "500", "7", "1002")
                     "  /*@outline*/\n  g(1); {\n  /*@outline*/\n  g(2); {\n"
                     "  /*@outline*/\n  tail(9);\n"
                     "}\n\n"
                     "static void eval(char *M, RtCtx *ctx) {\n"
                     "  (void)ctx;\n" RUN("600", "700", "7", "1004") "}\n\n";
  char *out = outline(text, "  char *H = rt_ctx_host_mem(ctx);\n");
  has(out, "static void ol_body_0(char *M, RtCtx *ctx, const int64_t *a) { /* 3 runs */\n", 1, "one function");
  has(out, "static void ol_body_1", 0, "only the runs of one shape");
  has(out, "  char *H = rt_ctx_host_mem(ctx);\n", 1, "the locals in the function");
  has(out, "  f((M + a[0]), (M + a[1]), 2.5f, 1e-5, \"x 7\", 'c', 0x10, 010, 3u, c1_0, 64); /* tag ? */\n", 1,
      "the lifted literals");
  has(out, "  k((M + a[0]));\n", 1, "a literal differing alike shares its a[]");
  has(out, "  static const int64_t ns[] = {4, 5};\n  switch (s) {\n  case 3: break;\n", 1, "static and case lines kept");
  has(out, "static const int64_t ol_args[] = {\n  100, 300, 200, 500, 600, 700\n};", 1, "the arguments");
  has(out, "static const int32_t ol_rows[][2] = {\n  {0, 0}, {0, 2}, {0, 4}\n};", 1, "the rows");
  has(out, "  head(1);\n  for (int ol = 0; ol < 2; ol++) /* 2 outlined runs */\n"
           "    ol_fn[ol_rows[ol][0]](M, ctx, ol_args + ol_rows[ol][1]);\n  g(1); {\n  g(2); {\n  tail(9);\n}\n",
      1, "the step: its head, a loop over its rows, the unbalanced runs and the tail in place");
  has(out, "  for (int ol = 2; ol < 3; ol++)", 1, "eval's row");
  has(out, "/*@outline*/", 0, "no mark left");

  /* a literal on a `static` line that differs makes another shape: nothing outlined */
  const char *stat = "static void step(char *M, RtCtx *ctx) {\n  /*@outline*/\n  static const int x[] = {1};\n"
                     "  /*@outline*/\n  static const int x[] = {2};\n}\n\n";
  char *o2 = outline(stat, "");
  has(o2, "ol_body", 0, "a static initializer's literal is not lifted");
  has(o2, "  static const int x[] = {1};\n  static const int x[] = {2};\n}\n", 1, "... and both runs stay");
  /* a static variable is each run's own: runs declaring one stay */
  const char *var = "static void step(char *M, RtCtx *ctx) {\n  /*@outline*/\n  { static int once; f(1, &once); }\n"
                    "  /*@outline*/\n  { static int once; f(2, &once); }\n}\n\n";
  char *o4 = outline(var, "");
  has(o4, "ol_body", 0, "a run declaring a static variable is not outlined");
  free(o4);
  /* text without marks: unchanged */
  const char *plain = "static void step(char *M, RtCtx *ctx) {\n  f(M + 1);\n}\n\nstatic void eval(char *M, RtCtx *ctx) {\n}\n\n";
  char *o3 = outline(plain, "");
  if (strcmp(o3, plain) != 0) printf("FAIL text without marks changed:\n%s", o3), fails++;
  if (fails) printf("---\n%s", out);
  free(out);
  free(o2);
  free(o3);
  printf("%s\n", fails ? "FAIL" : "ok: outline lifts what differs, keeps what must stay constant");
  return fails != 0;
}
