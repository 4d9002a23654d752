/* tests/codegen/test_kcount.c — codegen/emit_kcount.c's counts on hand-written node code: a count before
 * each line that calls kernels, by class (a matmul entry GEMM, an attention node's calls attention, the
 * rest bandwidth-bound), two calls on a line counted 2, a call a braceless if governs put in braces with
 * its count, a call inside a string or the rank's coordinates not counted, a block copy's pieces one call,
 * lines without calls as they were. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg.h"

static int fails;
static const char *code; /* what the node writes, line by line ('\n'-separated) */

static int write_code(Cg *c, Node *n) {
  (void)n;
  for (const char *s = code; *s;) {
    const char *e = strchr(s, '\n');
    cg_line(c, "%.*s", (int)(e - s), s);
    s = e + 1;
  }
  return 1;
}

static void expect(OpKind op, const char *node_code, const char *want, const char *what) {
  static const CgTarget t = {.name = "test", .kernel_call = cg_cpu_kernel_call};
  char *out = NULL;
  size_t n = 0;
  Cg c = {.t = &t, .indent = 1};
  if (!(c.f = open_memstream(&out, &n))) abort();
  Node node = {.op = op};
  code = node_code;
  cg_emit_counted(&c, &node, write_code);
  fclose(c.f);
  if (strcmp(out, want) != 0) {
    printf("FAIL %s:\n--- got\n%s--- want\n%s", what, out, want);
    fails++;
  }
  free(out);
}

int main(void) {
  expect(OP_ADD, "rt_binary_f32(RT_ADD, a, b);\n/* a comment */\n",
         "  rt_kcalls[RT_KC_MEM] += 1;\n  rt_binary_f32(RT_ADD, a, b);\n  /* a comment */\n", "one call");
  expect(OP_MATMUL, "rt_matmul_f32(y, a, b);\nrt_unary_f32(RT_NEG, y, y);\n",
         "  rt_kcalls[RT_KC_GEMM] += 1;\n  rt_matmul_f32(y, a, b);\n  rt_kcalls[RT_KC_MEM] += 1;\n"
         "  rt_unary_f32(RT_NEG, y, y);\n", "a matmul entry GEMM, the rest of its node bandwidth-bound");
  expect(OP_SDPA, "rt_sdpa_f32(o, q, k, v);\n", "  rt_kcalls[RT_KC_ATTN] += 1;\n  rt_sdpa_f32(o, q, k, v);\n",
         "an attention node's call");
  expect(OP_ADD, "{ void k0(void); rt_par_for(k0, 1, p0); rt_par_for(k1, 1, p1); }\n",
         "  rt_kcalls[RT_KC_MEM] += 2;\n  { void k0(void); rt_par_for(k0, 1, p0); rt_par_for(k1, 1, p1); }\n",
         "two calls on a line");
  expect(OP_ADD, "if (a != b) /* moved */\n  rt_copy_f32(a, b);\nrt_x(1);\n",
         "  if (a != b) /* moved */\n    {\n    rt_kcalls[RT_KC_MEM] += 1;\n    rt_copy_f32(a, b);\n    }\n"
         "  rt_kcalls[RT_KC_MEM] += 1;\n  rt_x(1);\n",
         "a call a braceless if governs, in braces with its count");
  expect(OP_MATMUL, "if (!rt_matmul_ep(y, \"rt_fake(\")) {\n  rt_reduce(y);\n}\n",
         "  rt_kcalls[RT_KC_GEMM] += 1;\n  if (!rt_matmul_ep(y, \"rt_fake(\")) {\n    rt_kcalls[RT_KC_MEM] += 1;\n"
         "    rt_reduce(y);\n  }\n",
         "a call in a string not counted; a fallback's in its block");
  expect(OP_AXIS_INDEX, "*p = rt_ctx_coord(ctx, RT_AX_TP);\n", "  *p = rt_ctx_coord(ctx, RT_AX_TP);\n",
         "the coordinates no kernel");
  expect(OP_CONCAT, "rt_copy_block(y, 3, 0, a);\nrt_copy_block(y, 3, 1, b);\nrt_copy_block(y, 3, 2, c);\n",
         "  rt_kcalls[RT_KC_MEM] += 1;\n  rt_copy_block(y, 3, 0, a);\n  rt_copy_block(y, 3, 1, b);\n"
         "  rt_copy_block(y, 3, 2, c);\n", "a concat's pieces one call");
  if (fails) return 1;
  printf("kernel-call counts: 8 cases as expected\n");
  return 0;
}
