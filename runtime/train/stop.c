/* runtime/train/stop.c — a graceful stop on SIGTERM / SIGUSR1 (Slurm's warning before the time limit).
 *
 * The handler is installed for the training steps and their checkpoints (rt_train_main: from the
 * first step to the last checkpoint's completion; before, a signal ends the process as it always
 * did, nothing trained yet is lost; after, the previous handlers are back, so sampling or the
 * summary end on SIGTERM at once). It only records the first signal. The step loop reads it once
 * per step, after the step, and ORs it over the ranks in the all-reduce that already agrees on a
 * non-finite step (main.c check_finite: one more float in a 3-float all-reduce, nothing extra), so
 * a rank that got the signal a step after another still stops at the same step. Every rank then
 * finishes that step, the run saves a checkpoint of it (the normal save path, waited for to
 * completion), skips the final validation and sampling, and exits with RT_EXIT_STOPPED. A second
 * signal is ignored: the save goes on (and a SIGKILL in it leaves the previous checkpoints whole:
 * a checkpoint is committed by a rename once complete, ckpt.c). The handler it replaces for the
 * while (the libfabric transport's SIGTERM cleanup of its shm regions, runtime/comm/fabric.c) is
 * not needed then: a stopped process exits normally, and its atexit cleanup runs.
 */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "run.h"

static volatile sig_atomic_t stop_sig;

static void on_signal(int sig) {
  if (!stop_sig) stop_sig = sig; /* (a later one: ignored) */
}

static struct sigaction old_term, old_usr1;
static int installed;

void rt_stop_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART; /* (a read or a collective's wait goes on) */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGUSR1, &sa, &old_usr1);
  installed = 1;
}

void rt_stop_uninstall(void) {
  if (!installed) return;
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGUSR1, &old_usr1, NULL);
  installed = 0;
}

int rt_stop_signal(void) { return stop_sig; }

const char *rt_stop_signal_name(int sig) {
  return sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}
