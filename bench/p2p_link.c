/* bench/p2p_link.c — the in-node link a pipeline transfer crosses, measured for the cost model's
 * profile: a ping-pong of shardrt's point-to-point messages (rt_send / rt_recv over libfabric,
 * the path of the trainer's rt_coll_send / rt_coll_recv) between 2 ranks.
 *
 *   mpirun --allow-run-as-root --oversubscribe --mca pml ob1 -np 2 p2p_link [PROFILE]
 *
 * One-way time t(S) = round trip / 2, the best of P2P_ROUNDS (default 200) round trips per size
 * (the least disturbed by other load), for S = 64 bytes and 256 KiB: node_latency = t(64 B),
 * node_bandwidth = (256 KiB - 64 B) / (t(256 KiB) - t(64 B)). Rank 0 prints
 * them and, given PROFILE, appends them to it as `node_latency` and `node_bandwidth` lines (the
 * profile's, docs/planner.md: the cost model's in-node link, pipeline transfers and collectives).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

double rt_now(void);

static double one_way(RtGroup *g, int rank, char *buf, size_t bytes, int rounds) {
  double best = 1e30;
  for (int r = 0; r < rounds; r++) {
    double t0 = rt_now();
    if (rank == 0) {
      rt_send(g, 1, buf, bytes, 7);
      rt_recv(g, 1, buf, bytes, 8);
    } else {
      rt_recv(g, 0, buf, bytes, 7);
      rt_send(g, 0, buf, bytes, 8);
    }
    double t = (rt_now() - t0) / 2;
    if (t < best) best = t;
  }
  return best;
}

int main(int argc, char **argv) {
  RtBoot boot;
  if (!rt_boot_init(&boot, &argc, &argv)) return 1;
  if (boot.launcher == RT_LAUNCH_SINGLE || boot.world != 2) {
    fprintf(stderr, "p2p_link: run it under mpirun -np 2\n");
    return 1;
  }
  const char *re = getenv("P2P_ROUNDS");
  int rounds = re && atoi(re) > 0 ? atoi(re) : 200;
  RtComm *c = rt_comm_init(&boot, NULL);
  RtGroup *g = rt_group_world(c);
  const size_t small = 64, big = 256 << 10;
  char *buf = calloc(1, big);
  if (!buf) {
    fprintf(stderr, "p2p_link: out of memory\n");
    return 1;
  }
  one_way(g, boot.rank, buf, big, 5); /* warm-up: the endpoints, the pages */
  double ts = one_way(g, boot.rank, buf, small, rounds), tb = one_way(g, boot.rank, buf, big, rounds);
  double bw = tb > ts ? (double)(big - small) / (tb - ts) : 1e12, lat = ts > 1e-9 ? ts : 1e-9;
  if (boot.rank == 0) {
    printf("p2p one way: %.2f us at 64 B, %.2f us at 256 KiB: latency %.2f us, bandwidth %.3g GB/s\n", ts * 1e6,
           tb * 1e6, lat * 1e6, bw * 1e-9);
    if (argc > 1) {
      FILE *f = fopen(argv[1], "a");
      if (!f) {
        perror(argv[1]);
        return 1;
      }
      fprintf(f, "node_latency     %.4g   # s, p2p_link: shardrt point-to-point one way, best of %d\n", lat, rounds);
      fprintf(f, "node_bandwidth   %.4g   # bytes/s, p2p_link: 256 KiB - 64 B over the difference\n", bw);
      if (fclose(f) != 0) {
        perror(argv[1]);
        return 1;
      }
    }
  }
  free(buf);
  rt_comm_free(c);
  rt_boot_free(&boot);
  return 0;
}
