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
 * signal is ignored there: the save goes on (and a SIGKILL in it leaves the previous checkpoints
 * whole: a checkpoint is committed by a rename once complete, ckpt.c).
 *
 * A rank that never gets to the step's end — it waits in a collective for a peer that is stuck or
 * gone — would ignore the signal until the watchdog's timeout. So while the steps run (from the
 * install to the end of the step loop, where the ranks have agreed to stop) and no checkpoint save
 * is in flight on this rank (its synchronous part or its writer thread: a signal waits for the
 * atomic commit), the comm's watchdog asks end_wait about each collective the rank waits in: once a
 * stop signal is in, a collective still unfinished SHARDRT_STOP_WAIT seconds (default 30) after the
 * later of the signal, the collective's start and the last save's end — RT_STOP_SECOND_S after a
 * second signal — ends the rank (rt_fatal, status RT_EXIT_COMM) with a message naming the signal,
 * the rank, the collective and whom it waits for; no checkpoint of that step, the newest complete
 * one stays. A single process has no collectives: its signal waits for the step's end. The handler it replaces for the
 * while (the libfabric transport's SIGTERM cleanup of its shm regions, runtime/comm/fabric.c) is
 * not needed then: a stopped process exits normally, and its atexit cleanup runs.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../comm/comm.h"
#include "run.h"

#define RT_STOP_SECOND_S 1.0 /* after a second signal: how long a collective may go on */

static volatile sig_atomic_t stop_sig, nsig;
static _Atomic double t_sig[2]; /* when the first and the second signal came (rt_now) */
static atomic_int armed;        /* the steps run: end_wait may end the rank */
static atomic_int saving;       /* this rank's saves in flight: the synchronous part, the writer thread */
static _Atomic double t_saved;  /* when the last one ended */
static double stop_wait_s;      /* SHARDRT_STOP_WAIT */

static void on_signal(int sig) {
  double now = rt_now(); /* (clock_gettime: async-signal-safe) */
  if (!stop_sig) {
    atomic_store(&t_sig[0], now);
    stop_sig = sig; /* (a later one: counted, not recorded) */
  } else if (nsig == 1) {
    atomic_store(&t_sig[1], now);
  }
  if (nsig < 2) nsig++;
}

/* rt_comm_end_wait (see the top) */
static bool end_wait(double t_start, double now, char *why, size_t n) {
  if (!stop_sig || !atomic_load(&armed) || atomic_load(&saving)) return false;
  int second = nsig >= 2;
  double from = atomic_load(&t_sig[second]), limit = second ? RT_STOP_SECOND_S : stop_wait_s;
  double saved = atomic_load(&t_saved);
  if (t_start > from) from = t_start;
  if (saved > from) from = saved;
  if (now - from <= limit) return false;
  char after[96];
  if (second)
    snprintf(after, sizeof after, "%.1f s after a second signal", now - atomic_load(&t_sig[1]));
  else
    snprintf(after, sizeof after, "%.1f s after it (SHARDRT_STOP_WAIT %g s)", now - atomic_load(&t_sig[0]),
             stop_wait_s);
  snprintf(why, n,
           "stopped on %s without a checkpoint of this step (the newest complete one stays: resume from it): %s this "
           "rank was still",
           rt_stop_signal_name(stop_sig), after);
  return true;
}

static struct sigaction old_term, old_usr1;
static int installed;

void rt_stop_install(void) {
  stop_wait_s = rt_env_num("SHARDRT_STOP_WAIT", 30, 0.1, 86400);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART; /* (a read or a collective's wait goes on) */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGUSR1, &sa, &old_usr1);
  installed = 1;
  atomic_store(&armed, 1);
  rt_comm_end_wait = end_wait;
}

void rt_stop_disarm(void) { atomic_store(&armed, 0); }

void rt_stop_save_begin(void) { atomic_fetch_add(&saving, 1); }
void rt_stop_save_end(void) {
  atomic_store(&t_saved, rt_now());
  atomic_fetch_sub(&saving, 1);
}

void rt_stop_uninstall(void) {
  rt_stop_disarm();
  if (!installed) return;
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGUSR1, &old_usr1, NULL);
  installed = 0;
}

int rt_stop_signal(void) { return stop_sig; }

const char *rt_stop_signal_name(int sig) {
  return sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}
