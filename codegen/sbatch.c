/* codegen/sbatch.c — the Slurm batch script for a planned trainer (shardc build/plan --sbatch FILE).
 *
 * The allocation follows the plan and the topology: the plan's ranks (dp x pp x cp x tp) as Slurm
 * tasks, the topology's devices per node as tasks per node (the nodes the mesh resolved), one GPU
 * per task for the CUDA target. The script's one job step is the restart launcher
 * (scripts/launch.sh, installed as bin/shardc-launch) running `srun -n WORLD TRAINER ... --resume
 * auto`: the runtime reads its rank from SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID and a failed
 * step restarts from the newest complete checkpoint. The script's arguments go to the trainer.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen.h"
#include "diag.h"
#include "mesh.h"

/* s in single quotes for the shell ('\'' for a quote inside). */
static void sh_quote(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++)
    if (*s == '\'') fputs("'\\''", f);
    else fputc(*s, f);
  fputc('\'', f);
}

/* path made absolute against the current directory (it need not exist yet); caller frees. */
static char *absolute(const char *path) {
  if (path[0] == '/') return strdup(path);
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof cwd)) return NULL;
  size_t n = strlen(cwd) + strlen(path) + 2;
  char *out = malloc(n);
  if (out) snprintf(out, n, "%s/%s", cwd, path);
  return out;
}

bool cg_write_sbatch(const Module *m, const char *path, const char *trainer, const char *launch, int warn_s,
                     const char *warn_why) {
  const MeshMap *mm = m->mesh;
  if (!mm) {
    error_plain("--sbatch: the plan has no mesh");
    return false;
  }
  char *tr = absolute(trainer), *ln = absolute(launch);
  FILE *f = tr && ln ? fopen(path, "w") : NULL;
  if (!f) {
    error_plain("--sbatch: cannot write '%s': %s", path, strerror(errno));
    free(tr), free(ln);
    return false;
  }
  int world = mm->world, per_node = mm->devices_per_node < world ? mm->devices_per_node : world;
  bool gpu = m->target == TARGET_CUDA;
  const char *ckpt = m->recipe.ckpt_dir;
  fprintf(f, "#!/usr/bin/env bash\n");
  fprintf(f, "# Written by shardc for the trainer %s: model %s, dp %d x pp %d x cp %d x tp %d = %d rank%s", tr, m->name,
          mm->dim[RT_AX_DP], mm->dim[RT_AX_PP], mm->dim[RT_AX_CP], mm->dim[RT_AX_TP], world, world == 1 ? "" : "s");
  fprintf(f, " (global batch %lld = micro-batch %lld x dp %d x %lld accumulation step%s),\n", (long long)m->batch.global,
          (long long)m->batch.micro, mm->dim[RT_AX_DP], (long long)m->batch.accum, m->batch.accum == 1 ? "" : "s");
  fprintf(f, "# on %d node%s of %d %s%s (topology %s).\n", mm->nodes, mm->nodes == 1 ? "" : "s", per_node,
          gpu ? "GPU" : "rank", per_node == 1 ? "" : "s", m->has_topology && m->topo.name ? m->topo.name : "default");
  fprintf(f, "#   sbatch %s [TRAINER FLAGS...]     say --data 'shards/train_*.bin' --steps 20000 --ckpt-every 500\n", path);
  fprintf(f, "# The job step runs the trainer on every task (it reads SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID;\n"
             "# MPI through srun's PMIx); the launcher restarts a failed step from the newest complete checkpoint in\n"
             "# $SHARDC_CKPT (--resume auto), at most $SHARDC_MAX_RESTARTS times. Checkpoints (sharded: every rank\n"
             "# writes its blocks) must be on a file system every node sees. A trainer for another world size\n"
             "# (shardc build ... --world N, the same global batch) takes a changed allocation.\n");
  fprintf(f, "#SBATCH --job-name=shardc-%s\n", m->name);
  fprintf(f, "#SBATCH --nodes=%d\n", mm->nodes);
  fprintf(f, "#SBATCH --ntasks=%d\n", world);
  fprintf(f, "#SBATCH --ntasks-per-node=%d\n", per_node);
  if (gpu) fprintf(f, "#SBATCH --gpus-per-task=1\n");
  fprintf(f, "#SBATCH --output=%%x-%%j.out\n");
  /* a requeued job's run writes the same file, which Slurm truncates by default (JobFileAppend=0):
   * the first run's log, its stop included, was lost on a real Slurm 22.05 (docs/trainer.md) */
  fprintf(f, "#SBATCH --open-mode=append\n");
  /* warn_s before the time limit the launcher gets SIGUSR1, has the ranks stop after a checkpoint
   * (status 75) and requeues the job, which resumes from it (docs/trainer.md, Signals); without this
   * line the limit's SIGTERM does the same, told from scancel's by the job's Reason=TimeLimit, but
   * leaves the checkpoint only Slurm's KillWait (30 s by default). warn_s: the plan's step and
   * checkpoint writes (passes/storage.c storage_stop_warning_s) */
  fprintf(f, "# Slurm's warning before the time limit: %s.\n", warn_why);
  fprintf(f, "#SBATCH --signal=B:USR1@%d\n", warn_s);
  fprintf(f, "#SBATCH --requeue\n");
  fprintf(f, "set -euo pipefail\n");
  fprintf(f, "trainer=${SHARDC_TRAINER:-");
  sh_quote(f, tr);
  fprintf(f, "}\nckpt=${SHARDC_CKPT:-");
  if (ckpt) sh_quote(f, ckpt);
  else fprintf(f, "ckpt/%s", m->name);
  fprintf(f, "}\nexport SHARDRT_TIMEOUT=${SHARDRT_TIMEOUT:-300} # a collective stuck this long ends the step (then a restart)\n");
  fprintf(f, "exec ");
  sh_quote(f, ln);
  /* --done-file: a status 0 of srun whose tasks failed to launch is no completed run (launch.sh) */
  fprintf(f, " --np %d --max-restarts \"${SHARDC_MAX_RESTARTS:-3}\" --requeue --done-file \".shardc-${SLURM_JOB_ID:-$$}.done\" \\\n",
          world);
  fprintf(f, "  --launcher \"${SHARDC_SRUN:-srun --mpi=pmix --kill-on-bad-exit=1}\" -- \"$trainer\" --save-to \"$ckpt\" \"$@\"\n");
  bool ok = fclose(f) == 0;
  if (!ok) error_plain("--sbatch: cannot write '%s'", path);
  free(tr), free(ln);
  return ok;
}
