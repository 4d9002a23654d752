/* tests/passes/tb_compile.c — see tb_compile.h. */
#include "tb_compile.h"

#include <stdio.h>
#include <string.h>

#include "pipeline.h"

/* m through every pass of the pipeline but `skip` (NULL: all), verified; NULL where one fails. */
static Module *run_but(Module *m, const char *skip) {
  PipelineOptions po = {.verify = true};
  if (!skip) return pipeline_run(m, &po) ? m : NULL;
  const char *names[64];
  pipeline_pass_names(names, 64);
  for (int i = 0; names[i]; i++)
    if (strcmp(names[i], skip) != 0 && !pipeline_run_pass(m, names[i], &po)) return NULL;
  return m;
}

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
  return run_but(m, skip);
}

Module *tb_compile_model(Arena *a, const char *path, const FeDefine *defs, int ndefs, int world, Target target) {
  FeOptions o = {.defines = defs, .ndefines = ndefs, .world = world};
  Module *m = fe_compile(a, path, &o);
  if (!m) return NULL;
  m->target = target;
  PipelineOptions po = {.verify = true};
  return pipeline_run(m, &po) ? m : NULL;
}

Module *tb_compile_pp(Arena *a, Target target, const char *path, const FeDefine *defs, int ndefs, const TbPp *p) {
  FeDefine d[48];
  int n = 0;
  char spp[16], sdp[16], stp[16], smb[24], sb[24], sv[16];
  if (ndefs > 36) {
    fprintf(stderr, "tb_compile_pp: %d definitions, 36 at most\n", ndefs);
    return NULL;
  }
  d[n++] = (FeDefine){"zero", "0"}; /* the models' own plans: overridden by defs */
  d[n++] = (FeDefine){"recompute", "none"};
  for (int i = 0; i < ndefs; i++) d[n++] = defs[i];
  snprintf(spp, sizeof spp, "%d", p->pp);
  snprintf(sdp, sizeof sdp, "%d", p->dp);
  snprintf(stp, sizeof stp, "%d", p->tp);
  snprintf(smb, sizeof smb, "%lld", (long long)p->micro);
  snprintf(sb, sizeof sb, "%lld", (long long)p->batch);
  snprintf(sv, sizeof sv, "%d", p->v);
  d[n++] = (FeDefine){"pp", spp};
  d[n++] = (FeDefine){"dp", sdp};
  d[n++] = (FeDefine){"tp", stp};
  d[n++] = (FeDefine){"micro_batch", smb};
  d[n++] = (FeDefine){"batch", sb};
  d[n++] = (FeDefine){"schedule", p->sched};
  if (p->v) d[n++] = (FeDefine){"interleave", sv};
  d[n++] = (FeDefine){"cross_node_tp", "on"};
  const char *dirs[] = {p->import_dir};
  FeOptions o = {.defines = d, .ndefines = n, .world = p->pp * p->dp * p->tp, .import_dirs = dirs,
                 .nimport_dirs = p->import_dir ? 1 : 0};
  Module *m = fe_compile(a, path, &o);
  if (!m) return NULL;
  m->target = target;
  m->plan.sched_times = p->sched_times;
  m->plan.stage_fixed = p->stage_fixed;
  m->plan.stage_cap = p->stage_cap;
  m->plan.stage_balanced = p->balanced;
  m->plan.nstage_layers = p->layers ? p->nlayers : 0;
  for (int s = 0; p->layers && s < p->nlayers; s++) m->plan.stage_layers[s] = p->layers[s];
  return run_but(m, p->skip);
}

Module *tb_compile_ref(Arena *a, Target target, const char *path, const FeDefine *defs, int ndefs, int64_t batch,
                       const char *label) {
  TbPp one = {.pp = 1, .dp = 1, .tp = 1, .sched = "1f1b", .micro = batch, .batch = batch,
              .import_dir = SHARDC_MODELS_DIR};
  Module *m = tb_compile_pp(a, target, path, defs, ndefs, &one);
  if (!m) fprintf(stderr, "FAIL %s: the single-rank program does not compile\n", label);
  return m;
}
