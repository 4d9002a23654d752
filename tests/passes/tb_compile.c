/* tests/passes/tb_compile.c — see tb_compile.h. */
#include "tb_compile.h"

#include <string.h>

#include "pipeline.h"

Module *tb_compile(Arena *a, const char *path, const FeDefine *defs, int ndefs, const char *prec, Target target,
                   const char *skip) {
  return tb_compile_on(a, path, defs, ndefs, prec, target, skip, 1);
}

Module *tb_compile_on(Arena *a, const char *path, const FeDefine *defs, int ndefs, const char *prec, Target target,
                      const char *skip, int world) {
  FeDefine d[24] = {{"precision", prec}, {"micro_batch", "2"}, {"batch", "2"}};
  int n = 3;
  for (int i = 0; i < ndefs && n < 24; i++) d[n++] = defs[i];
  FeOptions o = {.defines = d, .ndefines = n, .world = world};
  Module *m = fe_compile(a, path, &o);
  if (!m) return NULL;
  m->target = target;
  m->has_topology = false;
  PipelineOptions po = {.verify = true};
  if (!skip) return pipeline_run(m, &po) ? m : NULL;
  const char *names[64];
  pipeline_pass_names(names, 64);
  for (int i = 0; names[i]; i++)
    if (strcmp(names[i], skip) != 0 && !pipeline_run_pass(m, names[i], &po)) return NULL;
  return m;
}

Module *tb_compile_model(Arena *a, const char *path, const FeDefine *defs, int ndefs, int world, Target target) {
  FeOptions o = {.defines = defs, .ndefines = ndefs, .world = world};
  Module *m = fe_compile(a, path, &o);
  if (!m) return NULL;
  m->target = target;
  PipelineOptions po = {.verify = true};
  return pipeline_run(m, &po) ? m : NULL;
}
