/* tests/passes/tb_compile.c — see tb_compile.h. */
#include "tb_compile.h"

#include <stdio.h>
#include <string.h>

#include "pipe_sched.h"
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

/* Whether v is read by a node of g or of a body nested in it, or is a result of one of them. */
static bool read_deep(const Graph *g, const Value *v) {
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == v) return true;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body && read_deep(g->nodes[i]->body, v)) return true;
  return ir_count_uses(g, v) > 0;
}

static int zb_reads_in(const Module *m, const Graph *top, const Graph *g, const char *what) {
  int fails = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *r = g->nodes[i];
    if (r->op != OP_REPEAT) continue;
    if (r->instr <= 0) {
      fails += zb_reads_in(m, top, r->body, what);
      continue;
    }
    char op = m->pipe->order[r->instr - 1].op;
    for (int j = r->a.ncarry; op == 'W' && j < r->a.ncarry + r->a.nxs; j++)
      if (!read_deep(r->body, r->body->args[j]->out[0])) {
        fprintf(stderr, "FAIL %s: the W loop of instruction %d takes stacked input %d (%s), which its body does not read\n",
                what, r->instr, j, r->in[j]->name ? r->in[j]->name : "-");
        fails++;
      }
    for (int k = r->a.ncarry; op == 'F' && k < r->nout; k++)
      if (!read_deep(top, r->out[k])) {
        fprintf(stderr, "FAIL %s: the F loop of instruction %d yields stacked output %d, which nothing reads\n", what,
                r->instr, k);
        fails++;
      }
  }
  return fails;
}

int tb_check_zb_reads(const Module *m, const char *what) {
  if (!m->pipe || m->plan.schedule != SCHED_ZB) return 0;
  return zb_reads_in(m, m->graph, m->graph, what);
}
