/* passes/pipeline.c — the whole middle of the compiler on one screen.
 *
 *   inline → shape → precision → mesh → autodiff → optimizer → shard → zero → memplan
 *
 * with the verifier after each pass and an optional dump of the IR after any
 * of them (--dump-ir=after:PASS). Later passes (mesh, shard, context,
 * pipeline, zero, recompute, fuse, memplan, schedule, verify) join this list.
 */
#include "pipeline.h"

#include <string.h>
#include <time.h>

#include "diag.h"
#include "passes.h"
#include "print.h"


static int world_for_mesh; /* PipelineOptions.world for the mesh pass */
static bool run_mesh(Module *m) { return pass_mesh(m, world_for_mesh); }

typedef struct {
  const char *name;
  bool (*run)(Module *m);
} Pass;

static const Pass passes[] = {
    {"inline", pass_inline},       /* layers expanded; repeat stays a region */
    {"shape", pass_shape},         /* shapes and dtypes checked against the source */
    {"precision", pass_precision}, /* bf16 compute, f32 master weights (CUDA target) */
    {"mesh", run_mesh},            /* plan bound to the topology: ranks, groups, dp auto */
    {"autodiff", pass_autodiff},   /* backward graph */
    {"optimizer", pass_optimizer}, /* clip, lr, update */
    {"shard", pass_shard},         /* dp/tp/sp: per-rank shapes, collectives */
    {"zero", pass_zero},           /* dp gradient all-reduces overlapped with backward, bucketed */
    {"fuse", pass_fuse},           /* elementwise chains grouped, for every target */
    {"memplan", pass_memplan},     /* every value at a fixed offset per rank */
    {"verify", pass_verify},       /* every rank's collectives match its group peers' */
};
enum { NPASSES = sizeof passes / sizeof passes[0] };

const char *const *pipeline_pass_names(void) {
  static const char *names[NPASSES + 1];
  for (int i = 0; i < NPASSES; i++) names[i] = passes[i].name;
  names[NPASSES] = NULL;
  return names;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool run_one(Module *m, int i, const PipelineOptions *o) {
  double t0 = now();
  bool ok = passes[i].run(m) && diag_errors() == 0;
  if (o->time) fprintf(stderr, "shardc: pass %-10s %8.3f ms\n", passes[i].name, 1e3 * (now() - t0));
  if (!ok) return false;
  if (o->verify && !ir_verify(m->graph, passes[i].name)) die("IR invalid after pass %s", passes[i].name);
  if (o->dump_after && (strcmp(o->dump_after, passes[i].name) == 0 || strcmp(o->dump_after, "all") == 0)) {
    fprintf(o->dump, "# ---- after %s ----\n", passes[i].name);
    ir_print_graph(o->dump, m->graph);
  }
  return true;
}

bool pipeline_run(Module *m, const PipelineOptions *o) {
  world_for_mesh = o->world;
  for (int i = 0; i < NPASSES; i++)
    if (!run_one(m, i, o)) return false;
  return true;
}

/* One pass, for IR-file pass tests (tests/passes/ir_opt.c). A pass after `mesh` in the list
 * finds m->mesh set in the pipeline; here the mesh pass (which leaves the graph alone) runs
 * first when the module read has none. */
bool pipeline_run_pass(Module *m, const char *name, const PipelineOptions *o) {
  int at = -1, mesh = -1;
  for (int i = 0; i < NPASSES; i++) {
    if (strcmp(passes[i].name, name) == 0) at = i;
    if (passes[i].run == run_mesh) mesh = i;
  }
  if (at < 0) {
    error_plain("no pass named '%s'", name);
    return false;
  }
  world_for_mesh = o->world;
  if (mesh >= 0 && mesh < at && !m->mesh && !run_one(m, mesh, o)) return false;
  return run_one(m, at, o);
}
