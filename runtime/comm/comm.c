/* runtime/comm/comm.c — the comm object, groups, requests and progress. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm_internal.h"

static double env_double(const char *name, double dflt) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char *end;
  double v = strtod(s, &end);
  return *end || v <= 0 ? dflt : v;
}

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
  c->timeout_s = o.timeout_s > 0 ? o.timeout_s : env_double("SHARDRT_TIMEOUT", 60.0);
  c->chunk_bytes = o.chunk_bytes ? o.chunk_bytes : (size_t)env_double("SHARDRT_CHUNK_BYTES", 1 << 20);
  c->chunk_bytes = (c->chunk_bytes + 63) & ~(size_t)63;
  c->window = o.window > 0 ? o.window : (int)env_double("SHARDRT_WINDOW", 4);
  const char *hier = getenv("SHARDRT_HIER");
  c->hier = !(hier && strcmp(hier, "0") == 0);
  const char *gm = getenv("SHARDRT_GATHER_MAX"); /* (0 turns it off: not env_double, which takes 0 as unset) */
  c->gather_max = gm && *gm ? (size_t)strtoull(gm, NULL, 0) : 16384;
  /* Empty polls before yielding: with a core per local rank, spin long (a yield hands the
   * core to unrelated load for a time slice, which cost 2-5x on a busy machine); with more
   * local ranks than cores, yield soon (a peer that is not scheduled cannot send). */
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int local = boot->local_world > 0 ? boot->local_world : 1;
  c->spin = (int)env_double("SHARDRT_SPIN", ncpu > 0 && local <= ncpu ? 20000 : 100);
  if (pthread_mutex_init(&c->lock, NULL) != 0) rt_fatal(RT_EXIT_COMM, "pthread_mutex_init failed");

  c->peers = calloc((size_t)c->world, sizeof *c->peers);
  if (!c->peers) rt_fatal(RT_EXIT_COMM, "out of memory");
  RtPeer me = {0};
  me.pid = boot->pid;
  memcpy(me.host, boot->host, sizeof me.host);
  const char *node = getenv("SHARDRT_NODE");
  snprintf(me.node, sizeof me.node, "%s", node && *node ? node : boot->host);
  me.probe = rt_direct_probe_addr();
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

static bool same_node(const RtComm *c, int a, int b) {
  const RtPeer *p = &c->peers[a], *q = &c->peers[b];
  return strcmp(p->host, q->host) == 0 && strcmp(p->node, q->node) == 0;
}

/* A group over several nodes with more members than nodes gets two parts for the
 * hierarchical all-reduce (hier_begin): its members on our node (node_g), and the first
 * member of each node, in the group's order (lead_g, only on those). Every member makes
 * them here, in the same order of group creation. */
static void hier_groups(RtGroup *g) {
  RtComm *c = g->c;
  int *mine = malloc((size_t)g->n * sizeof *mine), *lead = malloc((size_t)g->n * sizeof *lead);
  if (!mine || !lead) rt_fatal(RT_EXIT_COMM, "out of memory");
  int nmine = 0, nlead = 0;
  for (int i = 0; i < g->n; i++) {
    if (same_node(c, g->ranks[i], c->rank)) mine[nmine++] = g->ranks[i];
    int j = 0;
    while (j < i && !same_node(c, g->ranks[j], g->ranks[i])) j++;
    if (j == i) lead[nlead++] = g->ranks[i];
  }
  if (nlead >= 2 && nlead < g->n) {
    char name[64];
    snprintf(name, sizeof name, "%s/node", g->name);
    g->node_g = rt_group_new(c, mine, nmine, name);
    snprintf(name, sizeof name, "%s/nodes", g->name);
    g->lead_g = rt_group_new(c, lead, nlead, name); /* NULL where we do not lead our node */
  }
  free(mine);
  free(lead);
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
  for (int i = 0; i < n; i++) g->one_node = g->one_node && same_node(c, ranks[i], c->rank);
  hier_groups(g);
  return g;
}

RtGroup *rt_group_world(RtComm *c) { return c->world_group; }

void rt_group_free(RtGroup *g) {
  if (!g) return;
  if (g->backend && g->backend->group_free) g->backend->group_free(g->backend_state);
  rt_mbox_group_free(g);
  rt_group_free(g->node_g);
  rt_group_free(g->lead_g);
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

static RtReq *req_new(RtGroup *g, RtOpKind op, const void *send, void *recv, size_t count, RtDType dt) {
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

static void hier_begin(RtReq *q);
static bool gather_usable(const RtReq *q);
static void gather_begin(RtReq *q);

/* The hierarchical all-reduce takes a group over several nodes (hier_groups made its parts),
 * unless turned off (SHARDRT_HIER=0, rt_comm_tune "hier"); the same answer on every member. */
static bool hier_usable(const RtReq *q) {
  return q->c->hier && q->g->node_g && !q->g->backend && q->op == RT_OP_ALL_REDUCE && q->count > 0;
}

static RtReq *req_start(RtReq *q) {
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
  q->seq = (uint16_t)q->seq_full;
  if (hier_usable(q)) { /* (the parts are requests of their own, in the active list) */
    hier_begin(q);
    return q;
  }
  if (gather_usable(q)) { /* (its all-gather is a request of its own) */
    gather_begin(q);
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
static bool hier_progress(RtComm *c);

static bool progress(RtComm *c) {
  RtCqEvent ev[16];
  bool moved = rt_mbox_progress(c);
  /* (nothing but mailbox requests in flight: no message to wait for) */
  int n = c->nactive > c->mbox_active || c->ndeferred > 0 ? rt_poll(c, ev, 16) : 0;
  for (int i = 0; i < n; i++) rt_req_complete_msg((RtMsg *)ev[i].e.op_context, &ev[i]);
  if (c->hier_active) moved = hier_progress(c) || moved;
  if (n > 0 || moved) {
    c->idle_polls = 0;
    return true;
  }
  if (++c->idle_polls > c->spin) sched_yield();
  return false;
}

static void rt_progress(RtComm *c) { progress(c); }

bool rt_test(RtReq *q) {
  if (q->subs) {
    bool all = true;
    for (int i = 0; i < q->nsubs; i++) all = rt_test(q->subs[i]) && all;
    return all;
  }
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

static void req_free(RtReq *q) {
  free(q->subs); /* (bufs and bufstart live in q's allocation) */
  free(q->hier);
  free(q);
}

void rt_wait(RtReq *q) {
  if (q->subs) {
    for (int i = 0; i < q->nsubs; i++) rt_wait(q->subs[i]);
  } else if (q->g->backend) {
    while (!rt_test(q)) sched_yield();
    if (q->g->backend->finish) q->g->backend->finish(q);
  } else {
    while (!q->done) rt_progress(q->c);
  }
  req_free(q);
}

RtReq *rt_all_reduce_start(RtGroup *g, const void *send, void *recv, size_t count, RtDType dt, RtRedOp op) {
  RtReq *q = req_new(g, RT_OP_ALL_REDUCE, send, recv, count, dt);
  q->redop = op;
  return req_start(q);
}

RtReq *rt_reduce_scatter_start(RtGroup *g, const void *send, void *recv, size_t count, RtDType dt, RtRedOp op) {
  RtReq *q = req_new(g, RT_OP_REDUCE_SCATTER, send, recv, count, dt);
  q->redop = op;
  return req_start(q);
}

RtReq *rt_all_gather_start(RtGroup *g, const void *send, void *recv, size_t count, RtDType dt) {
  return req_start(req_new(g, RT_OP_ALL_GATHER, send, recv, count, dt));
}

RtReq *rt_broadcast_start(RtGroup *g, void *buf, size_t count, RtDType dt, int root) {
  if (root < 0 || root >= g->n) rt_fatal(RT_EXIT_COMM, "broadcast on group %s: root %d out of range", g->name, root);
  RtReq *q = req_new(g, RT_OP_BROADCAST, buf, buf, count, dt);
  q->root = root;
  return req_start(q);
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
  if (g->backend) {
    /* A backend (NCCL) gets one all-reduce per non-empty member, on one stream. */
    RtReq *q = calloc(1, sizeof *q);
    int k = 0;
    if (!q || !(q->subs = malloc((size_t)(n > 0 ? n : 1) * sizeof *q->subs))) rt_fatal(RT_EXIT_COMM, "out of memory");
    q->c = g->c;
    q->g = g;
    q->op = RT_OP_ALL_REDUCE;
    for (int i = 0; i < n; i++)
      if (counts[i]) q->subs[k++] = rt_all_reduce_start(g, bufs[i], bufs[i], counts[i], dt, op);
    q->nsubs = k;
    if (k == 0) q->subs[q->nsubs++] = rt_barrier_start(g); /* keep every member's sequence in step */
    return q;
  }
  return req_start(arv_new(g, bufs, counts, n, total, dt, op));
}

RtReq *rt_barrier_start(RtGroup *g) { return req_start(req_new(g, RT_OP_BARRIER, NULL, NULL, 0, RT_F32)); }

RtReq *rt_send_start(RtGroup *g, int peer, const void *buf, size_t bytes, int tag) {
  RtReq *q = req_new(g, RT_OP_SEND, buf, NULL, bytes, RT_F32);
  q->peer = peer;
  q->utag = tag;
  return req_start(q);
}

RtReq *rt_recv_start(RtGroup *g, int peer, void *buf, size_t bytes, int tag) {
  RtReq *q = req_new(g, RT_OP_RECV, NULL, buf, bytes, RT_F32);
  q->peer = peer;
  q->utag = tag;
  return req_start(q);
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

/* ---- the hierarchical all-reduce --------------------------------------------------------
 *
 * A group over several nodes: (1) an all-reduce among the members of each node (the
 * mailbox or the direct reads: no network), (2) an all-reduce among one member per node
 * (the ring over the inter-node fabric, 2(nodes-1) steps instead of 2(n-1)), (3) a
 * broadcast from that member to the others of its node (all_reduce_v: of the members
 * packed into one buffer, as members may be split differently on each rank). avg folds as
 * sum and scales once, on the leader, before (3), so every member gets the leader's bits.
 * The parts are requests of their own on the group's parts (hier_groups): the watchdog
 * names the one that is stuck and its missing member. Their sequence numbers are taken
 * when the request starts, so the parts of several requests in flight pair up whatever
 * order they finish in.
 */
struct RtHier {
  bool gather;          /* a gather-and-fold (below), not a hierarchical all-reduce */
  int stage;            /* the part in flight: 0 node all-reduce, 1 nodes' all-reduce, 2 broadcast, 3 done */
  uint64_t seq_lead;    /* lead_g's sequence number for part 1 */
  uint64_t seq_bcast;   /* node_g's sequence number for part 2 */
  RtReq *sub;           /* the current part's request, NULL when none */
  char *pack;           /* all_reduce_v's members packed for part 2, else NULL */
};

/* Copies all_reduce_v's members into (to_pack) or out of h->pack. */
static void hier_pack(RtReq *q, bool to_pack) {
  for (int i = 0; i < q->nbufs; i++) {
    size_t at = q->bufstart[i] * q->esize, len = (q->bufstart[i + 1] - q->bufstart[i]) * q->esize;
    if (!len) continue;
    if (to_pack) memcpy(q->hier->pack + at, q->bufs[i], len);
    else memcpy(q->bufs[i], q->hier->pack + at, len);
  }
}

/* The part's request on group h (started), with sequence number seq. */
static RtReq *hier_part(RtReq *q, RtGroup *h, RtOpKind op, RtRedOp redop, uint64_t seq) {
  RtReq *p;
  if (op == RT_OP_BROADCAST) {
    char *buf = q->nbufs ? q->hier->pack : q->recv;
    p = req_new(h, op, buf, buf, q->count, q->dt);
  } else if (q->nbufs) {
    p = req_new(h, op, NULL, NULL, q->count, q->dt);
    p->nbufs = q->nbufs; /* (the parent's member lists: the parent outlives its parts) */
    p->bufs = q->bufs;
    p->bufstart = q->bufstart;
  } else {
    p = req_new(h, op, q->hier->stage == 0 ? q->send : q->recv, q->recv, q->count, q->dt);
  }
  p->redop = redop;
  p->root = 0;
  p->seq_full = seq;
  p->seq_set = true;
  return req_start(p);
}

/* Starts the part of stage st that concerns us; false when there is none (skip it). */
static bool hier_stage(RtReq *q, int st) {
  struct RtHier *h = q->hier;
  RtGroup *g = q->g;
  RtRedOp op = q->redop == RT_AVG ? RT_SUM : q->redop;
  h->stage = st;
  h->sub = NULL;
  if (st == 0 && g->node_g->n > 1) {
    h->sub = hier_part(q, g->node_g, RT_OP_ALL_REDUCE, op, g->node_g->seq++);
  } else if (st == 0 && !q->nbufs && q->send != q->recv) {
    memcpy(q->recv, q->send, q->count * q->esize);
  } else if (st == 1 && g->lead_g) {
    h->sub = hier_part(q, g->lead_g, RT_OP_ALL_REDUCE, op, h->seq_lead);
  } else if (st == 2 && g->node_g->n > 1) {
    if (q->nbufs) {
      if (!(h->pack = malloc(q->count * q->esize))) rt_fatal(RT_EXIT_COMM, "out of memory");
      if (g->lead_g) hier_pack(q, true);
    }
    h->sub = hier_part(q, g->node_g, RT_OP_BROADCAST, op, h->seq_bcast);
  }
  return h->sub != NULL;
}

/* After the nodes' all-reduce, on the leader: avg's one scaling. */
static void hier_scale(RtReq *q) {
  if (q->redop != RT_AVG || !q->g->lead_g) return;
  float s = 1.0f / (float)q->n;
  if (!q->nbufs) rt_scale_dt(q->recv, q->count, q->dt, s);
  for (int i = 0; i < q->nbufs; i++) rt_scale_dt(q->bufs[i], q->bufstart[i + 1] - q->bufstart[i], q->dt, s);
}

static void gather_finish(RtReq *q);

/* Moves q to its next stage with work for us (or to done). */
static void hier_advance(RtReq *q) {
  struct RtHier *h = q->hier;
  if (h->gather) gather_finish(q);
  for (int st = h->stage + 1; st < 3 && !h->gather; st++) {
    if (st == 2) hier_scale(q);
    if (hier_stage(q, st)) return;
  }
  if (h->pack && !h->gather && !q->g->lead_g) hier_pack(q, false);
  free(h->pack);
  h->pack = NULL;
  h->stage = 3;
  q->done = true;
  RtComm *c = q->c;
  for (RtReq **p = &c->hier_active; *p; p = &(*p)->hier_next)
    if (*p == q) {
      *p = q->hier_next;
      break;
    }
}

static void hier_begin(RtReq *q) {
  RtGroup *g = q->g;
  struct RtHier *h = calloc(1, sizeof *h);
  if (!h) rt_fatal(RT_EXIT_COMM, "out of memory");
  q->hier = h;
  q->c->hier_count++;
  /* every part's sequence number now (part 0's is taken as it starts, here) */
  if (g->lead_g) h->seq_lead = g->lead_g->seq++;
  hier_stage(q, 0);
  if (g->node_g->n > 1) h->seq_bcast = g->node_g->seq++;
  q->hier_next = q->c->hier_active;
  q->c->hier_active = q;
  if (!h->sub) hier_advance(q);
}

static bool hier_progress(RtComm *c) {
  bool moved = false;
  for (RtReq *q = c->hier_active, *next; q; q = next) {
    next = q->hier_next; /* (hier_advance may unlink q) */
    struct RtHier *h = q->hier;
    if (h->sub && !h->sub->done) continue;
    if (h->sub) req_free(h->sub); /* (an all_reduce_v part's member lists are q's: not freed with it) */
    h->sub = NULL;
    hier_advance(q);
    moved = true;
  }
  return moved;
}

/* ---- gather and fold: small all-reduces and reduce-scatters on the ring -------------------
 *
 * Where the ring would run (tcp, a forced provider, the nodes' part of a hierarchical
 * all-reduce) a small all-reduce is latency: the ring's 2(n-1) message steps. Instead every
 * member's whole input is all-gathered (n-1 steps, one with 2 members) into a staging buffer
 * and each member folds it itself in the mailbox's order (rt_mbox_fold: every member the same
 * bits). The all-gather is a request of its own that carries this request's sequence number
 * and signature, so a mismatch is still named as the call the user made. Up to gather_max
 * bytes (SHARDRT_GATHER_MAX, 16 KiB; rt_comm_tune "gather_max"; 0: never).
 */
static bool gather_usable(const RtReq *q) {
  if (q->g->backend || (q->op != RT_OP_ALL_REDUCE && q->op != RT_OP_REDUCE_SCATTER) || q->n < 2 || q->count == 0)
    return false;
  size_t bytes = q->count * q->esize;
  return bytes <= q->c->gather_max && !rt_mbox_usable(q) && !rt_direct_usable(q);
}

static void gather_begin(RtReq *q) {
  struct RtHier *h = calloc(1, sizeof *h);
  size_t bytes = q->count * q->esize;
  if (!h || !(h->pack = malloc(bytes * (size_t)q->n))) rt_fatal(RT_EXIT_COMM, "out of memory");
  h->gather = true;
  q->hier = h;
  q->c->gather_count++;
  char *mine = h->pack + (size_t)q->me * bytes;
  if (q->nbufs) {
    for (int i = 0; i < q->nbufs; i++)
      if (q->bufstart[i + 1] > q->bufstart[i])
        memcpy(mine + q->bufstart[i] * q->esize, q->bufs[i], (q->bufstart[i + 1] - q->bufstart[i]) * q->esize);
  } else {
    memcpy(mine, q->send, bytes);
  }
  RtReq *p = req_new(q->g, RT_OP_ALL_GATHER, mine, h->pack, q->count * (size_t)q->n, q->dt);
  p->seq_full = q->seq_full;
  p->seq_set = true;
  p->sig_as = rt_signature(q);
  p->user = q;
  h->sub = req_start(p);
  q->hier_next = q->c->hier_active;
  q->c->hier_active = q;
}

/* The all-gather is done: fold (the slot's contribution p is member p's whole input). */
static void gather_finish(RtReq *q) {
  char *src[64] = {NULL}, **srcp = q->n <= 64 ? src : malloc((size_t)q->n * sizeof *srcp);
  if (!srcp) rt_fatal(RT_EXIT_COMM, "out of memory");
  for (int p = 0; p < q->n; p++) srcp[p] = q->hier->pack + (size_t)p * q->count * q->esize;
  rt_mbox_fold(q, srcp);
  if (srcp != src) free(srcp);
}

uint64_t rt_comm_hier_count(const RtComm *c) { return c->hier_count; }
uint64_t rt_comm_gather_count(const RtComm *c) { return c->gather_count; }
