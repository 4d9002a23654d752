/* codegen/emit_kcount.c — the program's kernel calls counted where it makes them, and the plan's count.
 *
 * A compute node run (what a target's `node` writes for one node or a fused run; a shard slice's copy)
 * goes through cg_emit_counted: its statements are written as the target wrote them, each line that
 * calls kernels preceded by `rt_kcalls[CLASS] += k;` (runtime/ops/kern_count.h) with k its kernel calls,
 * in the same block (both in braces after a braceless if), so a call the program skips (a GEMM's
 * fallback when its epilogue ran) is not counted. A kernel call is a runtime entry the target names
 * (CgTarget.kernel_call: the CPU's rt_* kernels and rt_par_for, the LLVM kernels' loop; the CUDA
 * target's launches and cuBLASLt GEMMs, as tests/report/cuda_launches.py counts them); a CPU slice, pad
 * or concat is one call however many pieces it copies (rt_copy_block each: the cost model's one node;
 * the grad clip's concat of 16 sums of squares copies 16). Its class: GEMM for a matmul entry, attention
 * for the run of an attention node (sdpa, ring attention's blocks and their backwards), else
 * bandwidth-bound (passes/cost_op.h cost_op_class, the classes of the cost model's kernels).
 *
 * cg_emit_kern_plan writes the cost model's count for each pipeline stage (passes/cost.c
 * cost_stage_kernels, the count `shardc plan --cost` prints): RtProgram.kern_plan, which the trainer
 * checks its first step's counts against (runtime/train/log.c); and each stage's matmul FLOPs a step
 * (RtProgram.gemm_flop_plan), which the CPU trainer checks the FLOPs its rt_matmul_* calls counted against.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cg.h"
#include "cost.h"
#include "cost_op.h" /* cost_op_class */
#include "diag.h"

/* The kernel calls of one line by class, per the target. */
static void line_calls(const Cg *c, const Node *n, const char *s, size_t len, int calls[RT_KC_COUNT], bool *once) {
  int node_class = cost_op_class(n->op) == T_ATTN ? RT_KC_ATTN : RT_KC_MEM;
  bool quoted = false;
  for (size_t i = 0; i + 3 < len; i++) {
    if (s[i] == '"' && (i == 0 || s[i - 1] != '\\')) quoted = !quoted;
    if (quoted || strncmp(s + i, "rt_", 3) != 0 || (i > 0 && (isalnum((unsigned char)s[i - 1]) || s[i - 1] == '_')))
      continue;
    size_t e = i + 3;
    while (e < len && (isalnum((unsigned char)s[e]) || s[e] == '_')) e++;
    if (e >= len || s[e] != '(') continue;
    char name[64];
    size_t nl = e - i < sizeof name - 1 ? e - i : sizeof name - 1;
    memcpy(name, s + i, nl);
    name[nl] = 0;
    int kind = c->t->kernel_call(name);
    if (kind == CG_CALL_NODE && *once) kind = CG_CALL_NONE; /* (counted at its first) */
    if (kind == CG_CALL_NODE) *once = true;
    if (kind != CG_CALL_NONE) calls[strstr(name, "matmul") ? RT_KC_GEMM : node_class]++;
    i = e;
  }
}

/* Whether line s (len) is a control line without a brace (`if (...)` governing the next statement alone): a count
 * before that statement would take its place. */
static bool braceless(const char *s, size_t len) {
  while (len && *s == ' ') s++, len--;
  const char *end = s + len, *cm = NULL;
  for (const char *p = s; p + 1 < end; p++)
    if (p[0] == '/' && p[1] == '*') {
      cm = p;
      break;
    }
  if (cm) end = cm; /* (a comment after it) */
  while (end > s && end[-1] == ' ') end--;
  bool ctrl = (end - s >= 3 && (!strncmp(s, "if ", 3) || !strncmp(s, "if(", 3))) || (end - s >= 4 && !strncmp(s, "for ", 4)) ||
              (end - s >= 6 && !strncmp(s, "while ", 6)) || (end - s >= 4 && !strncmp(s, "else", 4));
  return ctrl && end > s && end[-1] != '{' && end[-1] != ';' && end[-1] != '}';
}

int cg_emit_counted(Cg *c, Node *n, int (*emit)(Cg *c, Node *n)) {
  FILE *out = c->f;
  char *buf = NULL;
  size_t size = 0;
  if (!(c->f = open_memstream(&buf, &size))) die("codegen: out of memory");
  int k = emit(c, n);
  fclose(c->f);
  c->f = out;
  bool once = false, governed = false; /* governed: the line before is a braceless if, for, while or else */
  for (const char *s = buf; s && *s;) {
    const char *nl = strchr(s, '\n');
    size_t len = nl ? (size_t)(nl - s) : strlen(s);
    int calls[RT_KC_COUNT] = {0};
    line_calls(c, n, s, len, calls, &once);
    size_t ind = 0;
    while (ind < len && s[ind] == ' ') ind++;
    static const char *const lit[RT_KC_COUNT] = {[RT_KC_GEMM] = "RT_KC_GEMM", [RT_KC_ATTN] = "RT_KC_ATTN",
                                                 [RT_KC_MEM] = "RT_KC_MEM"};
    bool any = false;
    for (int cls = 0; cls < RT_KC_COUNT; cls++) any |= calls[cls] > 0;
    if (any && governed) fprintf(out, "%.*s{\n", (int)ind, s); /* the count and the statement, one statement */
    for (int cls = 0; cls < RT_KC_COUNT; cls++)
      if (calls[cls]) fprintf(out, "%.*srt_kcalls[%s] += %d;\n", (int)ind, s, lit[cls], calls[cls]);
    fwrite(s, 1, len, out);
    fputc('\n', out);
    if (any && governed) fprintf(out, "%.*s}\n", (int)ind, s);
    governed = braceless(s, len);
    s += len + (nl ? 1 : 0);
  }
  free(buf);
  return k;
}

int cg_emit_kern_plan(Cg *c) {
  const Module *m = c->m;
  int nst = m->pipe ? m->pipe->pp : 1; /* (cost_stage_kernels' rows) */
  int64_t(*k)[RT_KC_COUNT] = calloc((size_t)nst, sizeof *k);
  double *fl = calloc((size_t)nst, sizeof *fl);
  if (!k || !fl) die("codegen: out of memory");
  CostDevice d;
  cost_device_defaults(m, &d); /* (the counts do not depend on the device's figures) */
  cost_stage_kernels(m, &d, k, fl);
  fprintf(c->f, "static const int64_t kern_plan[] = { /* [stage][class]: kernel calls a step (passes/cost.c) */\n");
  for (int st = 0; st < nst; st++) {
    fprintf(c->f, " ");
    for (int cls = 0; cls < RT_KC_COUNT; cls++) fprintf(c->f, " %" PRId64 ",", k[st][cls]);
    fprintf(c->f, "\n");
  }
  fprintf(c->f, "};\n");
  fprintf(c->f, "static const double gemm_flop_plan[] = { /* [stage]: matmul FLOPs a step (passes/cost.c) */\n ");
  for (int st = 0; st < nst; st++) fprintf(c->f, " %.17g,", fl[st]);
  fprintf(c->f, "\n};\n\n");
  free(k);
  free(fl);
  return nst;
}
