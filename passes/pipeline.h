/* passes/pipeline.h — the compiler's pass list, run in order with the verifier between. */
#ifndef SHARDC_PIPELINE_H
#define SHARDC_PIPELINE_H

#include <stdio.h>

#include "module.h"

typedef struct {
  const char *dump_after; /* pass name whose output to print, "all", or NULL */
  FILE *dump;             /* where dumps go */
  bool verify;            /* run ir_verify after every pass */
  bool time;              /* print each pass's time to stderr */
  /* Tests only: called after each pass that ran, before the verifier after it (a pass that breaks the
   * IR, which the verification must catch: tests/passes/test_verify_hook.c); NULL: none. */
  void (*after_pass)(Module *m, const char *pass);
} PipelineOptions;

/* Runs every pass on m. Returns false when a pass reported user errors. */
bool pipeline_run(Module *m, const PipelineOptions *o);
/* Runs the pass named `name` alone (the module's mesh must be resolved: ir_mesh_resolve).
 * False when there is no such pass (reported) or it reported errors. */
bool pipeline_run_pass(Module *m, const char *name, const PipelineOptions *o);
/* Writes the pass names in order into names[], NULL-terminated (for --help and --dump-ir
 * validation); cap: room in names[], one more than the passes at least. */
void pipeline_pass_names(const char **names, int cap);

#endif
