/* tests/comm/test_watchdog_dev.c — the watchdog on a device backend's requests (RtGroupBackend.state: NCCL's in
 * runtime/cuda/nccl_comm.c), with a backend of the test's own whose device is a clock: a request is queued for
 * `queued` seconds after its start, then running for `running` seconds (< 0: for ever), then done. One process
 * (a group of one: the backend's requests never touch the fabric); run with SHARDRT_TIMEOUT=1.
 *
 *   test_watchdog_dev queued   queued 2 s, running 0.2 s: it completes (the watchdog must not count the queue:
 *                              a collective behind a long step's compute is not stuck); then one done on the
 *                              device after 0.1 s that the host looks at 2 s later (not stuck either)
 *   test_watchdog_dev stuck    queued 2 s, then running for ever: the watchdog ends the process, its message
 *                              counting from when the request began on the device and saying how long it queued
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_internal.h"

typedef struct {
  double queued, running; /* seconds; running < 0: for ever */
} Clock;

static Clock dev;

static bool fake_start(RtReq *q) {
  (void)q;
  return true; /* (q->t_start is the request's start: the device's clock counts from it) */
}

static RtDevState fake_state(RtReq *q) {
  double t = rt_now() - q->t_start;
  if (t < dev.queued) return RT_DEV_QUEUED;
  if (dev.running < 0 || t < dev.queued + dev.running) return RT_DEV_RUNNING;
  return RT_DEV_DONE;
}

static bool fake_test(RtReq *q) { return fake_state(q) == RT_DEV_DONE; }

static const RtGroupBackend fake = {.name = "fake device", .start = fake_start, .test = fake_test, .state = fake_state};

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "queued";
  RtBoot boot;
  if (!rt_boot_init(&boot, &argc, &argv)) return 1;
  RtComm *c = rt_comm_init(&boot, NULL);
  int me = boot.rank;
  RtGroup *g = rt_group_new(c, &me, 1, "dev");
  g->backend = &fake;
  float x[4] = {1, 2, 3, 4};
  double t0 = rt_now();
  if (strcmp(mode, "queued") == 0) {
    dev = (Clock){2.0, 0.2};
    rt_wait(rt_all_reduce_start(g, x, x, 4, RT_F32, RT_SUM));
    dev = (Clock){0.0, 0.1};
    RtReq *q = rt_all_reduce_start(g, x, x, 4, RT_F32, RT_SUM);
    sleep(2); /* (the host busy elsewhere: the request done on the device, not yet looked at) */
    rt_wait(q);
    printf("test_watchdog_dev queued: ok after %.1f s (timeout %s s)\n", rt_now() - t0,
           getenv("SHARDRT_TIMEOUT") ? getenv("SHARDRT_TIMEOUT") : "unset");
  } else if (strcmp(mode, "stuck") == 0) {
    dev = (Clock){2.0, -1};
    rt_wait(rt_all_reduce_start(g, x, x, 4, RT_F32, RT_SUM));
    fprintf(stderr, "test_watchdog_dev stuck: FAIL: the request completed\n");
    return 1;
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  g->backend = NULL; /* (freed as a host group: no state) */
  rt_group_free(g);
  rt_comm_free(c);
  rt_boot_free(&boot);
  return 0;
}
