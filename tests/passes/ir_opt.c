/* tests/passes/ir_opt.c — reads a textual IR file, runs passes on it by name, prints the IR.
 *
 *   ir_opt FILE.ir [--pass NAME]... [--world N] [--target cpu|cuda] [--no-verify] [--graph-only]
 *
 * The IR-file pass tests (tests/passes/ir/<pass>/<case>.before.ir -> .expected.ir, run by
 * tests/passes/ir_cases.sh) and the reader's round trip (tests/passes/ir_roundtrip.sh) use
 * it. Passes are found by their names in pipeline_pass_names() (passes/pipeline.c); the mesh
 * is resolved from the header's plan and topology on --world ranks first (ir_mesh_resolve), as
 * the front end does before lowering. The output is the
 * module header when the input had one, a blank line, the graph and its results (the
 * format ir/read.c reads), and the memory plan's summary when memplan ran; with --graph-only
 * or without a header, the graph as --dump-ir=after:PASS prints it.
 * Exit status 1 on a reader or pass error (reported as file:line:col).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "memplan.h"
#include "mesh.h"
#include "pipeline.h"
#include "print.h"
#include "read.h"

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, len = 0;
  char *s = malloc(cap);
  for (size_t n; s && (n = fread(s + len, 1, cap - len - 1, f)) > 0;) {
    len += n;
    if (len + 1 == cap) {
      char *t = realloc(s, cap *= 2);
      if (!t) free(s);
      s = t;
    }
  }
  fclose(f);
  if (s) s[len] = 0;
  return s;
}

int main(int argc, char **argv) {
  const char *input = NULL, *passes[32];
  int npasses = 0;
  PipelineOptions po = {.dump = stdout, .verify = true};
  int world = 0; /* --world: ranks to resolve the plan on (0: the header plan's, else the topology's) */
  Target target = TARGET_CPU;
  bool graph_only = false; /* print as --dump-ir=after:PASS does, even after a module header */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--pass") == 0 && i + 1 < argc && npasses < 32) passes[npasses++] = argv[++i];
    else if (strcmp(a, "--world") == 0 && i + 1 < argc) world = atoi(argv[++i]);
    else if (strcmp(a, "--target") == 0 && i + 1 < argc) target = strcmp(argv[++i], "cuda") == 0 ? TARGET_CUDA : TARGET_CPU;
    else if (strcmp(a, "--no-verify") == 0) po.verify = false;
    else if (strcmp(a, "--graph-only") == 0) graph_only = true;
    else if (a[0] != '-' && !input) input = a;
    else {
      fprintf(stderr, "usage: ir_opt FILE.ir [--pass NAME]... [--world N] [--target cpu|cuda] [--no-verify] [--graph-only]\n");
      return 2;
    }
  }
  if (!input) {
    fprintf(stderr, "ir_opt: no input file\n");
    return 2;
  }
  char *text = slurp(input);
  if (!text) {
    error_plain("cannot read %s", input);
    return 1;
  }
  Arena arena;
  arena_init(&arena);
  Module *m = ir_read_module(&arena, input, text);
  if (!m) return 1;
  m->target = target;
  if (world <= 0 && m->plan.dp > 0) /* the header prints the resolved plan: its ranks are the world */
    world = m->plan.dp * (m->plan.tp > 0 ? m->plan.tp : 1) * (m->plan.pp > 0 ? m->plan.pp : 1) *
            (m->plan.cp > 0 ? m->plan.cp : 1);
  if (!ir_mesh_resolve(m, world)) return 1;
  for (int i = 0; i < npasses; i++)
    if (!pipeline_run_pass(m, passes[i], &po)) return 1;
  if (m->name && !graph_only) { /* as `shardc plan` prints it (less the reports) */
    ir_print_module_header(stdout, m);
    fprintf(stdout, "\n");
    ir_print_graph_syms(stdout, m->graph, m);
  } else { /* as --dump-ir=after:PASS prints it */
    ir_print_graph(stdout, m->graph);
  }
  if (m->memplan) memplan_print(stdout, m, true);
  arena_free(&arena);
  free(text);
  return 0;
}
