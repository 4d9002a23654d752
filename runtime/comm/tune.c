/* runtime/comm/tune.c — thresholds measured on the machine (rt_comm_autotune).
 *
 * Where the single shared-memory round (mbox.c) stops beating the direct reads
 * (direct.c) depends on the cores, the caches and the memory the buffers live in, so it
 * is measured at start-up rather than fixed: an all-reduce of the world at sizes from
 * 4 KiB to 1 MiB (x4, at most a mailbox slot), each size timed both ways, alternating,
 * best of 3 calls, stopping at the first size the mailbox loses or after 50 ms (a loaded
 * machine); skipped when the node's ranks outnumber its cores (the times would be the
 * scheduler's).
 * The slowest rank's time counts (an all-reduce of the timings with max), so every rank
 * takes the same decision, as rt_comm_tune requires. The mailbox keeps every size up to
 * the largest at which it won at that size and every smaller one — and never less than
 * direct_min, so a one-node group never falls back to the ring (whose fold order differs
 * from theirs at 3 ranks and more) and the threshold, whatever the measurement says,
 * never changes a result's bits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_internal.h"

#define TUNE_SIZES 5     /* 4 KiB .. 1 MiB */
#define TUNE_REPS 3
#define TUNE_BUDGET_S 0.05 /* stop measuring after this long (slowest rank) */

static double time_all_reduce(RtGroup *g, float *buf, size_t count) {
  double t0 = rt_now();
  rt_all_reduce(g, buf, buf, count, RT_F32, RT_SUM);
  return rt_now() - t0;
}

size_t rt_comm_autotune(RtComm *c, bool mapped) {
  const char *env = getenv("SHARDRT_MBOX_MAX");
  if ((env && *env) || !c->mbox_ok || c->world < 2) return c->mbox_max;
  /* more local ranks than cores: a collective's time is the scheduler's, nothing to learn */
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (ncpu > 0 && c->boot.local_world > ncpu) return c->mbox_max;
  for (int r = 0; r < c->world; r++)
    if (strcmp(c->peers[r].node, c->peers[c->rank].node) != 0) return c->mbox_max;
  size_t sizes[TUNE_SIZES];
  int ns = 0;
  for (size_t b = 4096; b <= c->mbox_cap && ns < TUNE_SIZES; b *= 4) sizes[ns++] = b;
  if (ns == 0) return c->mbox_max;
  size_t cap = sizes[ns - 1];
  float *buf = mapped ? rt_comm_mem_alloc(c, cap) : calloc(1, cap);
  if (!buf) rt_fatal(RT_EXIT_COMM, "out of memory");
  RtGroup *w = c->world_group;
  double t0 = rt_now();
  float best[3 * TUNE_SIZES]; /* [3i] mailbox, [3i+1] the other path, microseconds; [3i+2] seconds so far */
  for (int i = 0; i < ns; i++) {
    size_t count = sizes[i] / sizeof(float);
    best[3 * i] = best[3 * i + 1] = 1e30f;
    for (int rep = 0; rep <= TUNE_REPS; rep++)
      for (int way = 0; way < 2; way++) {
        rt_comm_tune(c, "mbox_max", way == 0 ? sizes[i] : 0);
        float us = (float)(1e6 * time_all_reduce(w, buf, count));
        if (rep > 0 && us < best[3 * i + way]) best[3 * i + way] = us; /* (rep 0 warms up) */
      }
    /* the slowest rank's times decide; once the mailbox lost, larger sizes need no measuring,
     * nor once the budget is spent (a loaded machine: then the sizes measured decide) */
    best[3 * i + 2] = (float)(rt_now() - t0);
    rt_all_reduce(w, &best[3 * i], &best[3 * i], 3, RT_F32, RT_MAX);
    if (best[3 * i] > best[3 * i + 1] || best[3 * i + 2] > TUNE_BUDGET_S) {
      ns = i + 1;
      break;
    }
  }
  size_t keep = c->direct_min < 4096 ? 4096 : c->direct_min;
  for (int i = 0; i < ns && best[3 * i] <= best[3 * i + 1]; i++)
    if (sizes[i] > keep) keep = sizes[i];
  rt_comm_tune(c, "mbox_max", keep);
  if (mapped) rt_comm_mem_free(c, buf);
  else free(buf);
  const char *show = getenv("SHARDRT_TUNE_SHOW");
  if (show && *show && strcmp(show, "0") != 0 && c->rank == 0) {
    fprintf(stderr, "shardrt: tune (%d ranks, %s memory): all-reduce us, mailbox / other:", c->world,
            mapped ? "mapped" : "plain");
    for (int i = 0; i < ns; i++) fprintf(stderr, " %zuK %.1f/%.1f", sizes[i] >> 10, best[3 * i], best[3 * i + 1]);
    fprintf(stderr, "; mbox_max %zu (%.1f ms)\n", c->mbox_max, 1e3 * (rt_now() - t0));
  }
  return c->mbox_max;
}
