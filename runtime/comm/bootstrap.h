/* runtime/comm/bootstrap.h — who am I: rank, world size and local rank.
 *
 * Read from OpenMPI's mpirun (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE), Slurm's
 * srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID) or, with neither, a single process.
 * MPI is initialised only under a launcher, and only for bootstrap exchanges (endpoint
 * names, NCCL unique ids): collectives never go through it.
 */
#ifndef SHARDRT_BOOTSTRAP_H
#define SHARDRT_BOOTSTRAP_H

#include <stdbool.h>
#include <stddef.h>

#include "../base.h" /* rt_fatal, rt_log_rank, rt_now */
#include "mesh.h"

typedef enum { RT_LAUNCH_SINGLE, RT_LAUNCH_MPIRUN, RT_LAUNCH_SRUN } RtLauncher;

typedef struct {
  int rank;            /* 0 .. world-1 */
  int world;           /* processes in the job */
  int local_rank;      /* index among the processes on this host */
  int local_world;     /* processes on this host */
  RtLauncher launcher;
  bool mpi;            /* MPI initialised by rt_boot_init (to be finalised by rt_boot_free) */
  int pid;             /* this process */
  char host[64];       /* this host's name */
} RtBoot;

/* Fills b from the environment; initialises MPI under a launcher. Prints a message
 * and returns false when the launcher's view and MPI's disagree or MPI fails. */
bool rt_boot_init(RtBoot *b, int *argc, char ***argv);
/* The launcher the environment names (not yet checked against MPI): mpirun's variables, else an
 * srun task's — SLURM_PROCID and SLURM_NTASKS with SLURM_STEP_NUM_TASKS, which only srun sets (a
 * Slurm batch script has SLURM_PROCID=0 and SLURM_NTASKS=N too: a trainer run there without srun
 * is a single process, not "rank 0 of N"), else a single process. */
RtLauncher rt_boot_launcher(void);
void rt_boot_free(RtBoot *b);
const char *rt_launcher_name(RtLauncher l);

/* all[i * bytes ..] = rank i's mine (collective over the world). */
void rt_boot_allgather(const RtBoot *b, const void *mine, void *all, size_t bytes);
void rt_boot_barrier(const RtBoot *b);

/* Launch-time check, before any training: the mesh needs exactly the launched world.
 * On mismatch prints (on rank 0, or every rank when unsure) what the plan needs and
 * what was launched, and returns false. */
bool rt_boot_check_mesh(const RtBoot *b, const MeshMap *m);

#endif
