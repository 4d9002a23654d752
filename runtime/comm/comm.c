/* runtime/comm/comm.c — the comm object, groups, requests and progress. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm_internal.h"

/* For the watchdog: the world ranks q waits for, from the algorithm that runs it. */
static int req_waiting(const RtReq *q, int *peers, bool *first, int max) {
  if (q->g->backend) return 0;
  return q->mbox ? rt_mbox_waiting(q, peers, first, max) : rt_req_waiting(q, peers, first, max);
}

RtComm *rt_comm_init(const RtBoot *boot, const RtCommOptions *opt) {
  RtComm *c = calloc(1, sizeof *c);
  if (!c) rt_fatal(RT_EXIT_COMM, "out of memory");
  c->boot = *boot;
  c->rank = boot->rank;
  c->world = boot->world;
  RtCommOptions o = {0};
  if (opt) o = *opt;
  /* (the environment's values, read strictly: runtime/base.h) */
  c->timeout_s = o.timeout_s > 0 ? o.timeout_s : rt_env_num("SHARDRT_TIMEOUT", 60.0, 1e-3, 1e9);
  c->chunk_bytes = o.chunk_bytes ? o.chunk_bytes : (size_t)rt_env_u64("SHARDRT_CHUNK_BYTES", 1 << 20, 64, (uint64_t)1 << 40);
  c->chunk_bytes = (c->chunk_bytes + 63) & ~(size_t)63;
  c->window = o.window > 0 ? o.window : (int)rt_env_u64("SHARDRT_WINDOW", 4, 1, 1 << 20);
  rt_hier_init(c);
  /* Empty polls before yielding: with a core per local rank, spin long (a yield hands the
   * core to unrelated load for a time slice, which cost 2-5x on a busy machine); with more
   * local ranks than cores, yield soon (a peer that is not scheduled cannot send). */
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int local = boot->local_world > 0 ? boot->local_world : 1;
  c->spin = (int)rt_env_u64("SHARDRT_SPIN", ncpu > 0 && local <= ncpu ? 20000 : 100, 1, 1 << 30);
  if (pthread_mutex_init(&c->lock, NULL) != 0) rt_fatal(RT_EXIT_COMM, "pthread_mutex_init failed");

  c->peers = calloc((size_t)c->world, sizeof *c->peers);
  if (!c->peers) rt_fatal(RT_EXIT_COMM, "out of memory");
  RtPeer me = {0};
  me.pid = boot->pid;
  memcpy(me.host, boot->host, sizeof me.host);
  const char *node = getenv("SHARDRT_NODE");
  snprintf(me.node, sizeof me.node, "%s", node && *node ? node : boot->host);
  me.probe = rt_direct_probe_addr();
  rt_direct_allow_peers(c); /* (before any peer can probe this rank) */
  rt_boot_allgather(boot, &me, c->peers, sizeof me);
  rt_fabric_open(c, &o);
  rt_shmem_init(c);
  rt_direct_init(c);
  rt_mbox_init(c);

  int *all = malloc((size_t)c->world * sizeof *all);
  if (!all) rt_fatal(RT_EXIT_COMM, "out of memory");
  for (int i = 0; i < c->world; i++) all[i] = i;
  c->world_group = rt_group_new(c, all, c->world, "world");
  free(all);
  rt_watchdog_start(c, req_waiting);
  /* Every endpoint is up before anyone sends. */
  rt_boot_barrier(boot);
  return c;
}

void rt_comm_free(RtComm *c) {
  if (!c) return;
  rt_barrier(c->world_group);
  rt_watchdog_stop(c);
  rt_group_free(c->world_group);
  rt_fabric_close(c);
  rt_direct_close(c);
  rt_mbox_close(c);
  rt_shmem_close(c);
  free(c->gen_hash);
  free(c->gen_count);
  pthread_mutex_destroy(&c->lock);
  free(c->peers);
  free(c);
}

int rt_comm_rank(const RtComm *c) { return c->rank; }
int rt_comm_world(const RtComm *c) { return c->world; }
const char *rt_comm_provider(const RtComm *c) { return c->provider; }
const char *rt_comm_peer_provider(const RtComm *c, int rank) {
  if (rank < 0 || rank >= c->world) return "?";
  return c->fab[c->peer_fab[rank]].provider;
}
const char *rt_comm_node(const RtComm *c, int rank) {
  return rank >= 0 && rank < c->world ? c->peers[rank].node : "?";
}

/* How many groups with this member-list hash were created before (then counts this one). */
static uint64_t group_generation(RtComm *c, uint64_t hash) {
  for (int i = 0; i < c->ngen; i++)
    if (c->gen_hash[i] == hash) return c->gen_count[i]++;
  if (c->ngen == c->capgen) {
    int cap = c->capgen ? 2 * c->capgen : 8;
    uint64_t *h = realloc(c->gen_hash, (size_t)cap * sizeof *h);
    if (h) c->gen_hash = h;
    uint64_t *k = realloc(c->gen_count, (size_t)cap * sizeof *k);
    if (k) c->gen_count = k;
    if (!h || !k) rt_fatal(RT_EXIT_COMM, "out of memory");
    c->capgen = cap;
  }
  c->gen_hash[c->ngen] = hash;
  c->gen_count[c->ngen++] = 1;
  return 0;
}

RtGroup *rt_group_new(RtComm *c, const int *ranks, int n, const char *name) {
  int me = -1;
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= c->world)
      rt_fatal(RT_EXIT_COMM, "group %s: rank %d is outside the world of %d", name, ranks[i], c->world);
    for (int j = 0; j < i; j++)
      if (ranks[j] == ranks[i]) rt_fatal(RT_EXIT_COMM, "group %s: rank %d listed twice", name, ranks[i]);
    if (ranks[i] == c->rank) me = i;
  }
  if (me < 0) return NULL;
  RtGroup *g = calloc(1, sizeof *g);
  if (!g) rt_fatal(RT_EXIT_COMM, "out of memory");
  g->c = c;
  g->n = n;
  g->me = me;
  g->ranks = malloc((size_t)n * sizeof *g->ranks);
  if (!g->ranks) rt_fatal(RT_EXIT_COMM, "out of memory");
  memcpy(g->ranks, ranks, (size_t)n * sizeof *ranks);
  snprintf(g->name, sizeof g->name, "%s", name ? name : "group");
  uint32_t h = 2166136261u;
  for (int i = 0; i < n; i++) {
    h ^= (uint32_t)ranks[i];
    h *= 16777619u;
    h ^= h >> 15;
  }
  uint64_t h64 = 14695981039346656037ull;
  for (int i = 0; i < n; i++) h64 = (h64 ^ (uint64_t)(uint32_t)ranks[i]) * 1099511628211ull;
  g->hash = h64 ^ (uint64_t)n;
  g->gen = group_generation(c, g->hash);
  /* Groups with the same members (a hierarchical group's node part and a user's group, say)
   * must not match each other's messages: a later one's id mixes in its generation. */
  if (g->gen) {
    h ^= (uint32_t)g->gen * 0x9e3779b9u;
    h *= 16777619u;
    h ^= h >> 15;
  }
  g->id = (uint16_t)(h & 0x7fff);
  g->one_node = true;
  for (int i = 0; i < n; i++) g->one_node = g->one_node && rt_same_node(c, ranks[i], c->rank);
  rt_hier_groups(g);
  return g;
}

RtGroup *rt_group_world(RtComm *c) { return c->world_group; }

void rt_group_free(RtGroup *g) {
  if (!g) return;
  if (g->backend && g->backend->group_free) g->backend->group_free(g->backend_state);
  rt_mbox_group_free(g);
  rt_group_free(g->node_g);
  rt_group_free(g->lead_g);
  rt_group_free(g->rail_g);
  rt_group_free(g->node2_g);
  free(g->node_of);
  free(g->local_of);
  free(g->ranks);
  free(g->p2p);
  free(g);
}

int rt_group_size(const RtGroup *g) { return g->n; }
int rt_group_rank(const RtGroup *g) { return g->me; }
int rt_group_member(const RtGroup *g, int i) { return g->ranks[i]; }
const char *rt_group_name(const RtGroup *g) { return g->name; }

/* ---- requests ---------------------------------------------------------------- */

/* A request, with `extra` zeroed bytes after it (all_reduce_v's member lists: one allocation
 * per call, which a small collective's time notices). */
static RtReq *req_new_extra(RtGroup *g, RtOpKind op, const void *send, void *recv, size_t count, RtDType dt,
                            size_t extra) {
  if (dt != RT_F32 && dt != RT_BF16) rt_fatal(RT_EXIT_COMM, "%s on group %s: bad dtype %d", rt_op_name(op), g->name, (int)dt);
  RtReq *q = calloc(1, sizeof *q + extra);
  if (!q) rt_fatal(RT_EXIT_COMM, "out of memory");
  q->c = g->c;
  q->g = g;
  q->op = op;
  q->dt = dt;
  q->send = send;
  q->recv = recv;
  q->count = count;
  q->esize = op == RT_OP_SEND || op == RT_OP_RECV ? 1 : rt_dtype_size(dt);
  q->n = g->n;
  q->me = g->me;
  q->t_start = rt_now();
  return q;
}

RtReq *rt_req_new(RtGroup *g, RtOpKind op, const void *send, void *recv, size_t count, RtDType dt) {
  return req_new_extra(g, op, send, recv, count, dt, 0);
}

/* The counters of (member, tag): a hash table that grows at half load. */
static RtP2pSeq *p2p_seq(RtGroup *g, int member, int tag) {
  uint32_t key = ((uint32_t)member << 16 | (uint32_t)tag) + 1;
  if (2 * (g->p2p_used + 1) > g->p2p_cap) {
    int cap = g->p2p_cap ? 2 * g->p2p_cap : 64;
    RtP2pSeq *t = calloc((size_t)cap, sizeof *t);
    if (!t) rt_fatal(RT_EXIT_COMM, "out of memory");
    for (int i = 0; i < g->p2p_cap; i++) {
      if (!g->p2p[i].key) continue;
      uint32_t h = (g->p2p[i].key * 2654435761u) & (uint32_t)(cap - 1);
      while (t[h].key) h = (h + 1) & (uint32_t)(cap - 1);
      t[h] = g->p2p[i];
    }
    free(g->p2p);
    g->p2p = t;
    g->p2p_cap = cap;
  }
  uint32_t h = (key * 2654435761u) & (uint32_t)(g->p2p_cap - 1);
  while (g->p2p[h].key && g->p2p[h].key != key) h = (h + 1) & (uint32_t)(g->p2p_cap - 1);
  if (!g->p2p[h].key) {
    g->p2p[h].key = key;
    g->p2p_used++;
  }
  return &g->p2p[h];
}

RtReq *rt_req_start(RtReq *q) {
  RtGroup *g = q->g;
  RtComm *c = q->c;
  if (q->op == RT_OP_SEND || q->op == RT_OP_RECV) {
    if (q->peer < 0 || q->peer >= g->n || q->peer == g->me)
      rt_fatal(RT_EXIT_COMM, "%s on group %s: peer %d is not another member", rt_op_name(q->op), g->name, q->peer);
    if (q->utag < 0 || q->utag > 0xffff) rt_fatal(RT_EXIT_COMM, "%s: tag %d outside 0..65535", rt_op_name(q->op), q->utag);
    RtP2pSeq *ps = p2p_seq(g, q->peer, q->utag);
    q->seq_full = q->op == RT_OP_SEND ? ps->sent++ : ps->recvd++;
  } else if (!q->seq_set) {
    q->seq_full = g->seq++;
  }
  /* (a send's or receive's: 15 bits, the tag's 16th a pulled send's "done", ring.c RT_P2P_DONE) */
  q->seq = (uint16_t)(q->op == RT_OP_SEND || q->op == RT_OP_RECV ? q->seq_full & 0x7fff : q->seq_full);
  if (rt_hier_usable(q)) { /* (the parts are requests of their own, in the active list; hier.c) */
    rt_hier_begin(q);
    return q;
  }
  if (rt_gather_usable(q)) { /* (its all-gather is a request of its own; hier.c) */
    rt_gather_begin(q);
    return q;
  }
  pthread_mutex_lock(&c->lock);
  q->next = c->active;
  q->prev = NULL;
  if (c->active) c->active->prev = q;
  c->active = q;
  q->in_list = true;
  c->nactive++;
  pthread_mutex_unlock(&c->lock);
  if (g->backend) {
    q->sig = rt_signature(q);
    if (!g->backend->start(q))
      rt_fatal(RT_EXIT_COMM, "%s is not supported by the %s backend (group %s)", rt_op_name(q->op), g->backend->name,
               g->name);
    return q;
  }
  if (rt_mbox_usable(q)) { /* small, one node: a single round through shared memory (mbox.c) */
    q->sig = rt_signature(q);
    rt_mbox_begin(q);
    return q;
  }
  rt_req_begin(q); /* the direct reads (direct.c) or the ring (ring.c) */
  return q;
}

/* Handles what the completion queue holds. After `spin` empty polls in a row it yields
 * the core on every empty poll: ranks may outnumber cores, and a peer that is not
 * scheduled cannot send (pure spinning was 3-4x slower there), while a short spin keeps
 * small-message latency low when every rank has its core. */

static bool progress(RtComm *c) {
  RtCqEvent ev[16];
  bool moved = rt_mbox_progress(c);
  /* (nothing but mailbox requests in flight: no message to wait for) */
  int n = c->nactive > c->mbox_active || c->ndeferred > 0 ? rt_poll(c, ev, 16) : 0;
  for (int i = 0; i < n; i++) rt_req_complete_msg((RtMsg *)ev[i].e.op_context, &ev[i]);
  if (c->hier_active) moved = rt_hier_progress(c) || moved;
  if (n > 0 || moved) {
    c->idle_polls = 0;
    return true;
  }
  if (++c->idle_polls > c->spin) sched_yield();
  return false;
}

static void rt_progress(RtComm *c) { progress(c); }

bool rt_test(RtReq *q) {
  if (q->g->backend) {
    if (!q->done && q->g->backend->test(q)) {
      q->done = true;
      rt_req_finished(q);
    }
    return q->done;
  }
  if (!q->done) rt_progress(q->c);
  return q->done;
}

void rt_req_free(RtReq *q) {
  /* (bufs and bufstart live in q's allocation) */
  rt_hier_free(q);
  free(q);
}

void rt_wait(RtReq *q) {
  if (q->g->backend) {
    while (!rt_test(q)) sched_yield();
    if (q->g->backend->finish) q->g->backend->finish(q);
  } else {
    while (!q->done) rt_progress(q->c);
  }
  rt_req_free(q);
}

RtReq *rt_all_reduce_start(RtGroup *g, const void *send, void *recv, size_t count, RtDType dt, RtRedOp op) {
  RtReq *q = rt_req_new(g, RT_OP_ALL_REDUCE, send, recv, count, dt);
  q->redop = op;
  return rt_req_start(q);
}

RtReq *rt_reduce_scatter_start(RtGroup *g, const void *send, void *recv, size_t count, RtDType dt, RtRedOp op) {
  RtReq *q = rt_req_new(g, RT_OP_REDUCE_SCATTER, send, recv, count, dt);
  q->redop = op;
  return rt_req_start(q);
}

RtReq *rt_all_gather_start(RtGroup *g, const void *send, void *recv, size_t count, RtDType dt) {
  return rt_req_start(rt_req_new(g, RT_OP_ALL_GATHER, send, recv, count, dt));
}

RtReq *rt_broadcast_start(RtGroup *g, void *buf, size_t count, RtDType dt, int root) {
  if (root < 0 || root >= g->n) rt_fatal(RT_EXIT_COMM, "broadcast on group %s: root %d out of range", g->name, root);
  RtReq *q = rt_req_new(g, RT_OP_BROADCAST, buf, buf, count, dt);
  q->root = root;
  return rt_req_start(q);
}

/* An all_reduce_v request over n members, not started. */
static RtReq *arv_new(RtGroup *g, void *const *bufs, const size_t *counts, int n, size_t total, RtDType dt,
                      RtRedOp op) {
  size_t nb = (size_t)(n > 0 ? n : 1);
  RtReq *q = req_new_extra(g, RT_OP_ALL_REDUCE, NULL, NULL, total, dt, nb * sizeof(char *) + (nb + 1) * sizeof(size_t));
  q->redop = op;
  q->nbufs = n;
  q->bufs = (char **)(q + 1);
  q->bufstart = (size_t *)(q->bufs + nb);
  q->bufstart[0] = 0;
  for (int i = 0; i < n; i++) {
    q->bufs[i] = bufs[i];
    q->bufstart[i + 1] = q->bufstart[i] + counts[i];
  }
  return q;
}

RtReq *rt_all_reduce_v_start(RtGroup *g, void *const *bufs, const size_t *counts, int n, RtDType dt, RtRedOp op) {
  if (n < 0) rt_fatal(RT_EXIT_COMM, "all_reduce_v on group %s: %d buffers", g->name, n);
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    if (counts[i] && !bufs[i])
      rt_fatal(RT_EXIT_COMM, "all_reduce_v on group %s: buffer %d is NULL with %zu elements", g->name, i, counts[i]);
    total += counts[i];
  }
  /* (a backend (NCCL) takes the members as one request too: nccl_comm.c issues them as one group) */
  return rt_req_start(arv_new(g, bufs, counts, n, total, dt, op));
}

RtReq *rt_barrier_start(RtGroup *g) { return rt_req_start(rt_req_new(g, RT_OP_BARRIER, NULL, NULL, 0, RT_F32)); }

RtReq *rt_send_start(RtGroup *g, int peer, const void *buf, size_t bytes, int tag) {
  RtReq *q = rt_req_new(g, RT_OP_SEND, buf, NULL, bytes, RT_F32);
  q->peer = peer;
  q->utag = tag;
  return rt_req_start(q);
}

RtReq *rt_recv_start(RtGroup *g, int peer, void *buf, size_t bytes, int tag) {
  RtReq *q = rt_req_new(g, RT_OP_RECV, NULL, buf, bytes, RT_F32);
  q->peer = peer;
  q->utag = tag;
  return rt_req_start(q);
}

void rt_all_reduce(RtGroup *g, const void *send, void *recv, size_t count, RtDType dt, RtRedOp op) {
  rt_wait(rt_all_reduce_start(g, send, recv, count, dt, op));
}
void rt_reduce_scatter(RtGroup *g, const void *send, void *recv, size_t count, RtDType dt, RtRedOp op) {
  rt_wait(rt_reduce_scatter_start(g, send, recv, count, dt, op));
}
void rt_all_gather(RtGroup *g, const void *send, void *recv, size_t count, RtDType dt) {
  rt_wait(rt_all_gather_start(g, send, recv, count, dt));
}
void rt_broadcast(RtGroup *g, void *buf, size_t count, RtDType dt, int root) {
  rt_wait(rt_broadcast_start(g, buf, count, dt, root));
}
void rt_all_reduce_v(RtGroup *g, void *const *bufs, const size_t *counts, int n, RtDType dt, RtRedOp op) {
  rt_wait(rt_all_reduce_v_start(g, bufs, counts, n, dt, op));
}
void rt_barrier(RtGroup *g) { rt_wait(rt_barrier_start(g)); }
void rt_send(RtGroup *g, int peer, const void *buf, size_t bytes, int tag) {
  rt_wait(rt_send_start(g, peer, buf, bytes, tag));
}
void rt_recv(RtGroup *g, int peer, void *buf, size_t bytes, int tag) {
  rt_wait(rt_recv_start(g, peer, buf, bytes, tag));
}

