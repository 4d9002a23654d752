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

static bool show_tune(void) {
  return rt_env_switch("SHARDRT_TUNE_SHOW", false);
}

#define TUNE_SIZES 5     /* 4 KiB .. 1 MiB */
#define TUNE_REPS 3
#define TUNE_BUDGET_S 0.05 /* stop measuring after this long (slowest rank) */

static double time_all_reduce(RtGroup *g, float *buf, size_t count) {
  double t0 = rt_now();
  rt_all_reduce(g, buf, buf, count, RT_F32, RT_SUM);
  return rt_now() - t0;
}

bool rt_comm_tuned(const RtComm *c, const char *name, size_t *value) {
  static const char *const names[] = {"direct_min", "mbox_max", "direct_push", "hier", "gather_max",
                                      "mbox_stream", "stream_min", "stream_max", "mbox_ag_max", "stream_chunk",
                                      "stream_ring", "direct_chunk", "hier_ar_max", "hier_rs_max", "hier_ag_max",
                                      "rail_ar_min", "rail_rs_min", "rail_ag_min"};
  const size_t v[] = {c->direct_min, c->mbox_max, c->direct_push, c->hier, c->gather_max,
                      c->mbox_stream, c->stream_min, c->stream_max, c->mbox_ag_max, c->stream_chunk,
                      c->stream_ring, c->direct_chunk, c->hier_max[0], c->hier_max[1], c->hier_max[2],
                      c->rail_min[0], c->rail_min[1], c->rail_min[2]};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(name, names[i]) == 0) {
      *value = v[i];
      return true;
    }
  return false;
}

/* ---- a world over several nodes: hierarchical or the ring over every member -------------
 *
 * Per op (all-reduce, reduce-scatter, all-gather of the world) at 4 KiB, 64 KiB and 1 MiB:
 * the ring over every member against the hierarchical path by the leaders and, where the nodes
 * are of equal size, by rails; best of 2 calls after one to warm up, the slowest rank's times.
 * hier_max[op] becomes the largest size up to which the hierarchical path (the better of its
 * two) won at every size measured (SIZE_MAX when it won at 1 MiB); rail_min[op] the smallest
 * size from which rails won at every larger size. Within a budget of 0.3 s (slowest rank); an
 * op not measured to the end keeps the defaults. */
#define NODE_SIZES 3
#define NODE_BUDGET_S 0.3

static double time_op(RtGroup *g, int op, float *a, float *b, size_t count) {
  double t0 = rt_now();
  if (op == 0) rt_all_reduce(g, a, a, count, RT_F32, RT_SUM);
  if (op == 1) rt_reduce_scatter(g, a, b, count, RT_F32, RT_SUM);
  if (op == 2) rt_all_gather(g, a, b, count, RT_F32);
  return rt_now() - t0;
}

static void tune_nodes(RtComm *c) {
  static const char *const env[] = {"SHARDRT_HIER",        "SHARDRT_HIER_AR_MAX", "SHARDRT_HIER_RS_MAX",
                                    "SHARDRT_HIER_AG_MAX", "SHARDRT_RAIL_MIN",    "SHARDRT_RAIL_AR_MIN",
                                    "SHARDRT_RAIL_RS_MIN", "SHARDRT_RAIL_AG_MIN"};
  for (size_t i = 0; i < sizeof env / sizeof env[0]; i++)
    if (getenv(env[i]) && *getenv(env[i])) return;
  RtGroup *w = c->world_group;
  if (!w->node_g || !c->hier) return;
  static const char *const max_name[3] = {"hier_ar_max", "hier_rs_max", "hier_ag_max"};
  static const char *const rail_name[3] = {"rail_ar_min", "rail_rs_min", "rail_ag_min"};
  size_t sizes[NODE_SIZES] = {4096, 65536, 1048576}, cap = sizes[NODE_SIZES - 1];
  float *a = calloc(1, cap), *b = calloc(1, cap);
  if (!a || !b) rt_fatal(RT_EXIT_COMM, "out of memory");
  double t0 = rt_now();
  bool over = false;
  for (int op = 0; op < 3 && !over; op++) {
    int ways = w->rail_g ? 3 : 2; /* the ring over every member, the leaders, the rails */
    size_t hmax = SIZE_MAX, rail_keep;
    rt_comm_tuned(c, rail_name[op], &rail_keep);
    size_t rail_from = SIZE_MAX; /* the smallest size of the run of sizes, up to the largest, where rails won */
    bool lost = false;
    int si = 0;
    for (; si < NODE_SIZES && !over; si++) {
      float best[4] = {1e30f, 1e30f, 1e30f, 0};
      for (int rep = 0; rep < 3; rep++)
        for (int way = 0; way < ways; way++) {
          rt_comm_tune(c, max_name[op], way == 0 ? 0 : SIZE_MAX);
          rt_comm_tune(c, rail_name[op], way == 2 ? 0 : SIZE_MAX);
          float us = (float)(1e6 * time_op(w, op, a, b, sizes[si] / sizeof(float)));
          if (rep > 0 && us < best[way]) best[way] = us;
        }
      best[3] = (float)(rt_now() - t0);
      rt_all_reduce(w, best, best, 4, RT_F32, RT_MAX); /* (every rank decides on the same times) */
      over = best[3] > NODE_BUDGET_S;
      float hier = ways == 3 && best[2] < best[1] ? best[2] : best[1];
      if (!lost && hier > best[0]) {
        lost = true;
        hmax = si == 0 ? 0 : sizes[si - 1];
      }
      if (ways == 3 && best[2] < best[1] && rail_from == SIZE_MAX) rail_from = sizes[si];
      if (ways == 3 && best[2] >= best[1]) rail_from = SIZE_MAX;
      if (show_tune() && c->rank == 0)
        fprintf(stderr, "shardrt: tune %s %zu KiB, us: ring %.1f, leaders %.1f, rails %.1f\n", max_name[op] + 5,
                sizes[si] >> 10, best[0], best[1], ways == 3 ? best[2] : -1.0f);
    }
    rt_comm_tune(c, max_name[op], hmax); /* (the budget spent before a loss: hierarchical, the default) */
    rt_comm_tune(c, rail_name[op], ways == 3 && si == NODE_SIZES ? rail_from : rail_keep);
  }
  if (show_tune() && c->rank == 0) {
    size_t v[6];
    for (int op = 0; op < 3; op++) rt_comm_tuned(c, max_name[op], &v[op]), rt_comm_tuned(c, rail_name[op], &v[3 + op]);
    fprintf(stderr, "shardrt: tune (nodes): hier_max ar %zu rs %zu ag %zu, rail_min ar %zu rs %zu ag %zu (%.1f ms)\n", v[0],
            v[1], v[2], v[3], v[4], v[5], 1e3 * (rt_now() - t0));
  }
  free(a);
  free(b);
}

size_t rt_comm_autotune(RtComm *c, bool mapped) {
  /* more local ranks than cores: a collective's time is the scheduler's, nothing to learn
   * (SHARDRT_TUNE_FORCE=1 measures anyway: for tests) */
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (ncpu > 0 && c->boot.local_world > ncpu && !rt_env_switch("SHARDRT_TUNE_FORCE", false)) return c->mbox_max;
  for (int r = 0; r < c->world; r++)
    if (strcmp(c->peers[r].node, c->peers[c->rank].node) != 0) {
      tune_nodes(c);
      return c->mbox_max;
    }
  const char *env = getenv("SHARDRT_MBOX_MAX");
  if ((env && *env) || !c->mbox_ok || c->world < 2) return c->mbox_max;
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
  if (show_tune() && c->rank == 0) {
    fprintf(stderr, "shardrt: tune (%d ranks, %s memory): all-reduce us, mailbox / other:", c->world,
            mapped ? "mapped" : "plain");
    for (int i = 0; i < ns; i++) fprintf(stderr, " %zuK %.1f/%.1f", sizes[i] >> 10, best[3 * i], best[3 * i + 1]);
    fprintf(stderr, "; mbox_max %zu (%.1f ms)\n", c->mbox_max, 1e3 * (rt_now() - t0));
  }
  return c->mbox_max;
}
