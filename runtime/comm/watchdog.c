/* runtime/comm/watchdog.c — turns a stuck operation or a dead peer into an error.
 *
 * A thread wakes every few hundred milliseconds and looks at the comm's active
 * requests (under the comm's lock; it never touches the fabric):
 *   - a request older than the timeout ends the process, naming rank, group, op,
 *     size and sequence number, and the peer it waits for (a device backend's, NCCL's:
 *     older on the device, counted from when its turn came there, RtGroupBackend.state): one that has not sent its
 *     first message of the request has not joined it (stuck before it, dead, or in
 *     another collective); one that has is waiting in turn further along the ring;
 *   - a member of an active request's group that runs on this host and whose process
 *     is gone (no such pid, or a zombie) for more than a grace period ends the process
 *     with a peer-loss message; a peer that ended without joining the request is not
 *     said to have died during it (it may have given up waiting for this rank).
 *     Peers on other hosts are covered by the provider's errors and by the timeout.
 * And while it runs, a crash guard (below) turns a fault that follows a local peer's death
 * into that peer-loss message.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_internal.h"

#define RT_PEER_GRACE_S 1.0

bool (*rt_comm_end_wait)(double t_start, double now, char *why, size_t n);

/* The peers q waits for (at most 8), and whether each has not joined q yet: the algorithm's
 * answer, through the callback comm.c gave rt_watchdog_start. */
static int waiting(const RtReq *q, int peers[8], bool first[8]) { return q->c->watch_waiting(q, peers, first, 8); }

/* What q waits for: "rank 3 has not joined it (...)", or the peer it waits on further along. */
static void describe_wait(const RtReq *q, char *buf, size_t len) {
  int blocked = atomic_load(&q->c->post_blocked) - 1;
  if (blocked >= 0) { /* the receives' completions wait behind this post: they say nothing */
    snprintf(buf, len,
             ": rank %d takes no message from this rank (its receive queue is full): it has not joined it and is "
             "stuck before it, dead, or issued a different sequence of collectives",
             blocked);
    return;
  }
  int peers[8];
  bool first[8];
  int n = waiting(q, peers, first);
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < n && k + 1 < len; i++) {
    int w = snprintf(buf + k, len - k, "%s rank %d", i ? ";" : ":", peers[i]);
    k += w > 0 ? (size_t)w : 0;
    if (k + 1 >= len) break;
    w = snprintf(buf + k, len - k, first[i] ? " has not joined it (no message from it yet): it is stuck before it, dead, "
                                               "or issued a different sequence of collectives"
                                             : " has joined it but not sent its next piece (it waits in turn for "
                                               "another member)");
    k += w > 0 ? (size_t)w : 0;
  }
  if (!n)
    snprintf(buf, len, "; a peer is stuck, dead, or issued a different sequence of collectives");
}

/* Whether q still waits for the first message of world rank r. */
static bool never_joined(const RtReq *q, int r) {
  int peers[8];
  bool first[8];
  int n = waiting(q, peers, first);
  for (int i = 0; i < n; i++)
    if (peers[i] == r && first[i]) return true;
  return false;
}

/* When q's timeout starts counting (-1: not counting now). A backend's request (RtGroupBackend.state) counts from when
 * the watchdog first sees it running on its device, not while it is queued behind the device's work nor once done
 * there; any other from its start. */
static double device_since(RtReq *q, double now) {
  const RtGroupBackend *b = q->g->backend;
  if (!b || !b->state) return q->t_start;
  RtDevState st = b->state(q);
  if (st != RT_DEV_RUNNING) return -1;
  if (q->t_running == 0) q->t_running = now;
  return q->t_running;
}

static void *watchdog_main(void *arg) {
  RtComm *c = arg;
  double period = c->timeout_s / 4 < 0.2 ? c->timeout_s / 4 : 0.2;
  struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(period * 1e9)};
  double *gone_since = calloc((size_t)c->world, sizeof *gone_since);
  if (!gone_since) rt_fatal(RT_EXIT_COMM, "out of memory");
  while (!atomic_load(&c->stop)) {
    nanosleep(&ts, NULL);
    double now = rt_now();
    pthread_mutex_lock(&c->lock);
    for (RtReq *q = c->active; q; q = q->next) {
      char what[256], wait[600], why[320];
      bool (*end_wait)(double, double, char *, size_t) = rt_comm_end_wait;
      if (end_wait && end_wait(q->t_start, now, why, sizeof why)) {
        rt_describe_req(q, what, sizeof what);
        describe_wait(q, wait, sizeof wait);
        rt_fatal(RT_EXIT_COMM, "%s in %s%s", why, what, wait);
      }
      double since = device_since(q, now);
      if (since >= 0 && now - since > c->timeout_s) {
        rt_describe_req(q, what, sizeof what);
        describe_wait(q, wait, sizeof wait);
        char queued[96] = "";
        if (since > q->t_start) /* (a device's: how long it waited behind the work queued before it) */
          snprintf(queued, sizeof queued, " on the device (queued %.1f s before it began)", since - q->t_start);
        rt_fatal(RT_EXIT_COMM, "watchdog: %s has not completed after %.1f s%s (timeout %.1f s, SHARDRT_TIMEOUT)%s",
                 what, now - since, queued, c->timeout_s, wait);
      }
      for (int i = 0; i < q->g->n; i++) {
        int r = q->g->ranks[i];
        if (!rt_peer_gone(c, r)) {
          gone_since[r] = 0;
          continue;
        }
        if (gone_since[r] == 0) gone_since[r] = now;
        if (now - gone_since[r] > RT_PEER_GRACE_S) {
          rt_describe_req(q, what, sizeof what);
          rt_fabric_forget_peer(c, r);
          if (never_joined(q, r)) /* not necessarily a crash: it may have given up on this rank */
            rt_fatal(RT_EXIT_COMM,
                     "peer lost: rank %d (pid %d on %s) ended without joining %s: it was killed, crashed, or stopped "
                     "on an error of its own (a watchdog timeout waiting for this rank, say: see its message)",
                     r, c->peers[r].pid, c->peers[r].host, what);
          rt_fatal(RT_EXIT_COMM, "peer lost: rank %d (pid %d on %s) died (killed or crashed) while this rank waits in %s",
                   r, c->peers[r].pid, c->peers[r].host, what);
        }
      }
    }
    pthread_mutex_unlock(&c->lock);
  }
  free(gone_since);
  return NULL;
}

/* ---- the crash guard ------------------------------------------------------------------------
 * A rank whose peer on this host has just died can fault inside the fabric provider before any
 * error reaches it: libfabric 1.17's tcp;ofi_rxm frees a connection when its peer shuts it, while
 * a message that peer sent still waits unmatched, and the receive that matches it later uses the
 * freed connection (SIGSEGV in fi_trecv, seen in CI; upstream fixed such teardown faults only in
 * 2026). The fault is the peer's loss and is reported as one: on SIGSEGV / SIGBUS / SIGABRT a
 * handler looks for a dead local peer, for up to the grace period (the one whose socket just closed
 * may not be a zombie yet); finding one, it ends the process with the peer-loss message, exit
 * status RT_EXIT_COMM; else the signal goes on to the handler before it (Open MPI's backtrace, or
 * the default: a core). Async-signal-safe but for the message's formatting (rt_fatal), on a
 * process that is ending. */
static RtComm *guarded;
static const int guard_sig[] = {SIGSEGV, SIGBUS, SIGABRT};
static const char *const guard_name[] = {"SIGSEGV", "SIGBUS", "SIGABRT"};
enum { NGUARD = sizeof guard_sig / sizeof guard_sig[0] };
static struct sigaction guard_old[NGUARD];

static void crash_guard(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  RtComm *c = guarded;
  int dead = -1, k = 0;
  while (k < NGUARD - 1 && guard_sig[k] != sig) k++;
  const struct timespec tick = {.tv_sec = 0, .tv_nsec = 50000000};
  for (int t = 0; c && dead < 0 && t <= (int)(RT_PEER_GRACE_S / 0.05); t++) {
    for (int r = 0; r < c->world && dead < 0; r++)
      if (rt_peer_gone(c, r)) dead = r;
    if (dead < 0) nanosleep(&tick, NULL);
  }
  if (dead >= 0) {
    char what[300] = "";
    if (c->active) {
      static const char head[] = " while this rank waits in ";
      memcpy(what, head, sizeof head);
      rt_describe_req(c->active, what + sizeof head - 1, sizeof what - sizeof head + 1);
    }
    rt_fabric_forget_peer(c, dead);
    rt_fatal(RT_EXIT_COMM,
             "peer lost: rank %d (pid %d on %s) died (killed or crashed)%s; this rank then stopped on %s, most "
             "likely the fabric provider's fault on the lost connection (libfabric 1.17's tcp;ofi_rxm makes one)",
             dead, c->peers[dead].pid, c->peers[dead].host, what, guard_name[k]);
  }
  sigaction(sig, &guard_old[k], NULL);
  if (si->si_code <= 0) raise(sig); /* sent (kill, abort): again, to the old handler; a fault recurs by itself */
}

/* (two comms at once: the handlers installed once, the later comm the one looked at; guard_old keeps the
 * handlers from before the first, never this one's: a signal always goes on to another) */
static void guard_start(RtComm *c) {
  bool installed = guarded != NULL;
  guarded = c;
  if (installed) return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = crash_guard;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < NGUARD; i++) sigaction(guard_sig[i], &sa, &guard_old[i]);
}

static void guard_stop(RtComm *c) {
  if (guarded != c) return;
  for (int i = 0; i < NGUARD; i++) sigaction(guard_sig[i], &guard_old[i], NULL);
  guarded = NULL;
}

void rt_watchdog_start(RtComm *c, RtWaitingFn waiting) {
  guard_start(c);
  c->watch_waiting = waiting;
  atomic_store(&c->stop, false);
  if (pthread_create(&c->watchdog, NULL, watchdog_main, c) != 0) rt_fatal(RT_EXIT_COMM, "pthread_create failed");
  c->watchdog_running = true;
}

void rt_watchdog_stop(RtComm *c) {
  guard_stop(c);
  if (!c->watchdog_running) return;
  atomic_store(&c->stop, true);
  if (pthread_join(c->watchdog, NULL) != 0) rt_fatal(RT_EXIT_COMM, "pthread_join failed");
  c->watchdog_running = false;
}
