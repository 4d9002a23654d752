/* runtime/base.h — the runtime's bottom: the monotonic clock and the fatal error that names the
 * rank. Pure C, no MPI: the checkpoint files library (runtime/train/files.h) uses it as the
 * communication code (runtime/comm/) does.
 */
#ifndef SHARDRT_BASE_H
#define SHARDRT_BASE_H

double rt_now(void); /* seconds, monotonic (CLOCK_MONOTONIC): one clock for the runtime */

/* The rank that runtime error messages name (-1 before rt_boot_init, which sets it). */
extern int rt_log_rank;

/* Prints "shardrt: rank R: <message>" on stderr and ends the process with status code
 * (without MPI_Finalize: the launcher then ends the other ranks). */
_Noreturn void rt_fatal(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Called by rt_fatal before the process ends (the comm removes its shared-memory regions). */
extern void (*rt_fatal_hook)(void);

#endif
