/* runtime/base.h — the runtime's bottom: the monotonic clock and the fatal error that names the
 * rank. Pure C, no MPI: the checkpoint files library (runtime/train/files.h) uses it as the
 * communication code (runtime/comm/) does.
 */
#ifndef SHARDRT_BASE_H
#define SHARDRT_BASE_H

#include <stdbool.h>
#include <stdint.h>

double rt_now(void); /* seconds, monotonic (CLOCK_MONOTONIC): one clock for the runtime */

/* The rank that runtime error messages name (-1 before rt_boot_init, which sets it). */
extern int rt_log_rank;

/* This process's rank as its launcher's environment gives it, before and without any bootstrap:
 * OMPI_COMM_WORLD_RANK under mpirun (OMPI_COMM_WORLD_SIZE set), SLURM_PROCID under srun
 * (rt_launch_kind) — the variables rt_boot_init reads (runtime/comm/bootstrap.c) — or -1 when
 * not launched (or malformed: rt_boot_init then says so). world (may be NULL): the job's ranks
 * (OMPI_COMM_WORLD_SIZE, SLURM_NTASKS), 1 when not launched. */
int rt_launch_rank(int *world);
/* How this process was started (the one place that decides it; rt_boot_launcher names it): 1
 * mpirun, 2 an srun task (SLURM_STEP_NUM_TASKS set), 0 neither (a single process, or a Slurm batch
 * script itself, which has SLURM_PROCID and SLURM_NTASKS too). */
int rt_launch_kind(void);

/* Prints "shardrt: rank R: <message>" ("shardrt: <message>" before a rank is known) on stderr and ends the process with status code
 * (without MPI_Finalize: the launcher then ends the other ranks). */
_Noreturn void rt_fatal(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Called by rt_fatal before the process ends (the comm removes its shared-memory regions). */
extern void (*rt_fatal_hook)(void);

/* Settings from the environment, read strictly: a value that did not parse was taken as the
 * default, or by its leading digits ("12abc" as 12, "-1" as 2^64 - 1, "no" as on), without a word.
 * Unset or empty: dflt. Otherwise the whole value must parse, or the process ends (status 1) with an
 * error naming the variable, its value and what it takes. */
/* A whole number in [lo, hi]: decimal or 0x hex, with an optional K, M or G suffix (KiB, MiB, GiB). */
uint64_t rt_env_u64(const char *name, uint64_t dflt, uint64_t lo, uint64_t hi);
/* A number in [lo, hi] (60, 0.5, 2e3). */
double rt_env_num(const char *name, double dflt, double lo, double hi);
/* A switch: 0 (off) or 1 (on). */
bool rt_env_switch(const char *name, bool dflt);

#endif
