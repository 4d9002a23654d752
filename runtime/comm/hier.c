/* runtime/comm/hier.c — collectives composed of collectives: the hierarchical algorithms of
 * groups over several nodes, and gather-and-fold on the ring.
 *
 * A group over several nodes with more members than nodes has parts (rt_hier_groups, made
 * with the group, no communication): its members on our node (node_g), the first member of
 * each node (lead_g, only on those), and where every node has the same number m >= 2 of
 * members, our rail (rail_g: the member with our index in its node, on every node). The
 * collectives then run node, nodes, node, each part a request of its own on a part:
 *
 *   all-reduce, leader   node all-reduce (the mailbox or the direct reads: no network),
 *                        all-reduce among the leaders (the network: 2(nodes-1) steps instead
 *                        of 2(n-1); small ones gather and fold, one step), node broadcast
 *                        from the leader (the mailbox when small);
 *   all-reduce, rails    (nodes of equal size, from rail_min bytes) node reduce-scatter into m
 *                        blocks, member j all-reduces block j with the j-th members of the
 *                        other nodes (m rails over the network at once, each 1/m of the
 *                        bytes), node all-gather of the blocks;
 *   reduce-scatter       the leader all-reduce into a staging buffer, then our block of it;
 *   all-gather           node all-gather of the node's blocks (consecutive in the group's
 *                        order within a node, and split as rt_block splits their total: the
 *                        group's blocks shrink by at most one element, in order) into the
 *                        node's slot of a staging buffer (a slot per node, as long as the
 *                        longest node's blocks), all-gather of the slots among the leaders,
 *                        the leader unpacks into the output in the group's order and
 *                        broadcasts it in its node.
 * all_reduce_v packs its members into a staging buffer first and unpacks at the end. avg folds
 * as sum and scales once (on the leader before its broadcast; on rails each member scales its
 * block, which every member of the rail holds with the same bits), so every member gets the
 * same bits. Which runs: hierarchical up to hier_max[op] bytes (SHARDRT_HIER_{AR,RS,AG}_MAX,
 * rt_comm_tune "hier_ar_max" .., measured by rt_comm_autotune), rails from rail_min; SHARDRT_HIER=0
 * (rt_comm_tune "hier" 0) runs the ring over every member instead.
 *
 * Sequence numbers of every part are taken when the request starts, so several requests in
 * flight pair up across ranks whatever order their parts finish in; the watchdog sees the
 * parts and names the stuck part's group (world/node, world/nodes, world/rail0) and its
 * missing member.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

enum { H_AR, H_RS, H_AG };                   /* index of hier_max */
enum { K_GATHER, K_LEAD, K_RAIL, K_AGLEAD, K_RSRAIL, K_AGRAIL }; /* what a composed request runs */

struct RtHier {
  int kind;
  int stage;          /* the part in flight: 0 node, 1 nodes (leaders or rail), 2 node, 3 done */
  uint64_t seq[3];    /* each part's sequence number on its group */
  RtReq *sub;         /* the current part's request, NULL when none */
  char *work;         /* the buffer the parts run on: recv, or pack */
  char *pack;         /* staging owned here (all_reduce_v's members, reduce-scatter's whole result,
                         all-gather's node slots, gather-and-fold's inputs), else NULL */
  char *blk;          /* rails: our block of the node's reduce-scatter */
  size_t blen;        /* ... its elements */
  size_t slot;        /* all-gather: elements per node slot in pack; reduce-scatter and all-gather by
                         rails: elements per (padded) block in pack */
  bool waiting;       /* the part of `stage` waits for its turn to start (node2_g) */
};

/* A size from the environment, strictly (runtime/base.h); 0 is a value (it turns a path off). */
static size_t env_size(const char *name, size_t dflt) { return (size_t)rt_env_u64(name, dflt, 0, SIZE_MAX); }

void rt_hier_init(RtComm *c) {
  c->hier = rt_env_switch("SHARDRT_HIER", true);
  /* (defaults from two simulated nodes on 2 cores, docs/performance.md: from 4 MiB the ring over
   * every member reduce-scattered faster, from 16 MiB it all-gathered faster; rt_comm_autotune
   * measures them where every rank has its core) */
  c->hier_max[H_AR] = env_size("SHARDRT_HIER_AR_MAX", SIZE_MAX);
  c->hier_max[H_RS] = env_size("SHARDRT_HIER_RS_MAX", (size_t)1 << 20);
  c->hier_max[H_AG] = env_size("SHARDRT_HIER_AG_MAX", (size_t)4 << 20);
  /* (all-gather: the leaders were faster below 1 MiB on two simulated nodes, docs/performance.md) */
  size_t rail = env_size("SHARDRT_RAIL_MIN", (size_t)64 << 10);
  c->rail_min[H_AR] = env_size("SHARDRT_RAIL_AR_MIN", rail);
  c->rail_min[H_RS] = env_size("SHARDRT_RAIL_RS_MIN", rail);
  c->rail_min[H_AG] = env_size("SHARDRT_RAIL_AG_MIN", getenv("SHARDRT_RAIL_MIN") && *getenv("SHARDRT_RAIL_MIN") ? rail : (size_t)1 << 20);
  /* (0 turns it off) */
  c->gather_max = env_size("SHARDRT_GATHER_MAX", 16384);
}

bool rt_hier_tune(RtComm *c, const char *name, size_t value) {
  if (strcmp(name, "hier") == 0) c->hier = value != 0;
  else if (strcmp(name, "hier_ar_max") == 0) c->hier_max[H_AR] = value;
  else if (strcmp(name, "hier_rs_max") == 0) c->hier_max[H_RS] = value;
  else if (strcmp(name, "hier_ag_max") == 0) c->hier_max[H_AG] = value;
  else if (strcmp(name, "rail_min") == 0) c->rail_min[H_AR] = c->rail_min[H_RS] = c->rail_min[H_AG] = value;
  else if (strcmp(name, "rail_ar_min") == 0) c->rail_min[H_AR] = value;
  else if (strcmp(name, "rail_rs_min") == 0) c->rail_min[H_RS] = value;
  else if (strcmp(name, "rail_ag_min") == 0) c->rail_min[H_AG] = value;
  else if (strcmp(name, "gather_max") == 0) c->gather_max = value;
  else return false;
  return true;
}

bool rt_same_node(const RtComm *c, int a, int b) {
  const RtPeer *p = &c->peers[a], *q = &c->peers[b];
  return strcmp(p->host, q->host) == 0 && strcmp(p->node, q->node) == 0;
}

/* Every member makes the parts here, in the same order of group creation. */
void rt_hier_groups(RtGroup *g) {
  RtComm *c = g->c;
  int n = g->n;
  int *mine = malloc((size_t)n * sizeof *mine), *lead = malloc((size_t)n * sizeof *lead);
  int *node_of = malloc((size_t)n * sizeof *node_of), *size = calloc((size_t)n, sizeof *size);
  int *local_of = malloc((size_t)n * sizeof *local_of);
  if (!mine || !lead || !node_of || !size || !local_of) rt_fatal(RT_EXIT_COMM, "out of memory");
  int nmine = 0, nlead = 0, my_idx = 0;
  for (int i = 0; i < n; i++) {
    if (rt_same_node(c, g->ranks[i], c->rank)) {
      if (i == g->me) my_idx = nmine;
      mine[nmine++] = g->ranks[i];
    }
    int k = 0;
    while (k < nlead && !rt_same_node(c, lead[k], g->ranks[i])) k++;
    if (k == nlead) lead[nlead++] = g->ranks[i];
    node_of[i] = k;
    local_of[i] = size[k]++;
  }
  if (nlead >= 2 && nlead < n) {
    char name[64];
    snprintf(name, sizeof name, "%s/node", g->name);
    g->node_g = rt_group_new(c, mine, nmine, name);
    snprintf(name, sizeof name, "%s/node'", g->name);
    g->node2_g = rt_group_new(c, mine, nmine, name);
    snprintf(name, sizeof name, "%s/nodes", g->name);
    g->lead_g = rt_group_new(c, lead, nlead, name); /* NULL where we do not lead our node */
    g->node_of = node_of;
    g->local_of = local_of;
    g->nnodes = nlead;
    node_of = local_of = NULL;
    bool equal = size[0] >= 2;
    for (int k = 1; k < nlead; k++) equal = equal && size[k] == size[0];
    if (equal) { /* our rail: the my_idx-th member of every node, in node order */
      int *rail = malloc((size_t)nlead * sizeof *rail);
      if (!rail) rt_fatal(RT_EXIT_COMM, "out of memory");
      for (int i = 0; i < n; i++)
        if (g->local_of[i] == my_idx) rail[g->node_of[i]] = g->ranks[i];
      snprintf(name, sizeof name, "%s/rail%d", g->name, my_idx);
      g->rail_g = rt_group_new(c, rail, nlead, name);
      free(rail);
    }
  }
  free(node_of);
  free(local_of);
  free(size);
  free(mine);
  free(lead);
}

static int hier_op(RtOpKind op) { return op == RT_OP_ALL_REDUCE ? H_AR : op == RT_OP_REDUCE_SCATTER ? H_RS : H_AG; }

bool rt_hier_usable(const RtReq *q) {
  const RtComm *c = q->c;
  if (!c->hier || !q->g->node_g || q->g->backend || q->count == 0) return false;
  if (q->op != RT_OP_ALL_REDUCE && q->op != RT_OP_REDUCE_SCATTER && q->op != RT_OP_ALL_GATHER) return false;
  return q->count * q->esize <= c->hier_max[hier_op(q->op)];
}

/* ---- the parts ------------------------------------------------------------------------ */

/* A part on group h with the sequence number reserved for it, started. */
static RtReq *part(RtReq *q, RtGroup *h, RtOpKind op, const void *send, void *recv, size_t count, uint64_t seq) {
  RtReq *p = rt_req_new(h, op, send, recv, count, q->dt);
  p->redop = q->redop == RT_AVG ? RT_SUM : q->redop;
  p->root = 0; /* (node_g's first member is its node's leader) */
  p->seq_full = seq;
  p->seq_set = true;
  return rt_req_start(p);
}

/* Copies all_reduce_v's members into (to_pack) or out of the work buffer. */
static void vpack(RtReq *q, bool to_pack) {
  for (int i = 0; i < q->nbufs; i++) {
    size_t at = q->bufstart[i] * q->esize, len = (q->bufstart[i + 1] - q->bufstart[i]) * q->esize;
    if (!len) continue;
    if (to_pack) memcpy(q->hier->work + at, q->bufs[i], len);
    else memcpy(q->bufs[i], q->hier->work + at, len);
  }
}

/* Element offset of member i's block within its node's slot (the node's earlier members' blocks). */
static size_t slot_off(const RtReq *q, int i) {
  size_t at = 0, off, len;
  for (int j = 0; j < i; j++)
    if (q->g->node_of[j] == q->g->node_of[i]) {
      rt_block(q->count, q->n, j, &off, &len);
      at += len;
    }
  return at;
}

/* The leader's all-gather result: every member's block from its node's slot into recv. */
static void ag_unpack(RtReq *q) {
  struct RtHier *h = q->hier;
  size_t es = q->esize, *at = calloc((size_t)q->g->nnodes, sizeof *at);
  if (!at) rt_fatal(RT_EXIT_COMM, "out of memory");
  for (int i = 0; i < q->n; i++) {
    int k = q->g->node_of[i];
    size_t off, len;
    rt_block(q->count, q->n, i, &off, &len);
    memcpy(q->recv + off * es, h->pack + ((size_t)k * h->slot + at[k]) * es, len * es);
    at[k] += len;
  }
  free(at);
}

/* Element offset of member i's (padded) block in the rails' staging buffer: rail-major (the
 * members with index J in their node, node by node), so each part is an ordinary collective on a
 * contiguous range. */
static size_t rail_pos(const RtReq *q, int i) {
  return ((size_t)q->g->local_of[i] * (size_t)q->g->nnodes + (size_t)q->g->node_of[i]) * q->hier->slot;
}

/* Does the last part run on node2_g (the mailbox order: see stage)? */
static bool uses_node2(const RtReq *q) { return q->g->node_g->n > 1 && q->hier->kind != K_RSRAIL; }

static void scale(RtReq *q, char *buf, size_t count) {
  if (q->redop == RT_AVG) rt_scale_dt(buf, count, q->dt, 1.0f / (float)q->n);
}

/* Starts the part of stage st that concerns us: 1 started, 0 none (skip the stage), -1 not yet
 * (the last part waits until the parts before it in node2_g's order have started: a mailbox
 * pairs collectives in the order they start, the same on every member). */
static int stage(RtReq *q, int st) {
  struct RtHier *h = q->hier;
  RtGroup *g = q->g, *node = g->node_g;
  size_t es = q->esize;
  const char *src = q->nbufs ? h->work : q->send; /* (all_reduce_v: packed into work) */
  if (st == 2 && h->stage < 2) { /* once, before the last part: avg's scaling, the leader's unpacking */
    if (h->kind == K_LEAD && g->lead_g) scale(q, h->work, q->count);
    if (h->kind == K_RAIL) scale(q, h->blk, h->blen);
    if (h->kind == K_AGLEAD && g->lead_g) ag_unpack(q);
  }
  h->stage = st;
  h->sub = NULL;
  if (st == 2 && uses_node2(q) && g->node2_g->started != h->seq[2]) return -1;
  switch (h->kind) {
  case K_LEAD: /* all-reduce (reduce-scatter) by the leaders */
    if (st == 0 && node->n > 1) h->sub = part(q, node, RT_OP_ALL_REDUCE, src, h->work, q->count, h->seq[0]);
    else if (st == 0 && src != h->work) memcpy(h->work, src, q->count * es);
    else if (st == 1 && g->lead_g) h->sub = part(q, g->lead_g, RT_OP_ALL_REDUCE, h->work, h->work, q->count, h->seq[1]);
    else if (st == 2 && node->n > 1)
      h->sub = part(q, g->node2_g, RT_OP_BROADCAST, h->work, h->work, q->count, h->seq[2]);
    break;
  case K_RAIL: /* all-reduce by rails (node->n > 1) */
    if (st == 0) h->sub = part(q, node, RT_OP_REDUCE_SCATTER, src, h->blk, q->count, h->seq[0]);
    else if (st == 1) h->sub = part(q, g->rail_g, RT_OP_ALL_REDUCE, h->blk, h->blk, h->blen, h->seq[1]);
    else h->sub = part(q, g->node2_g, RT_OP_ALL_GATHER, h->blk, h->work, q->count, h->seq[2]);
    break;
  case K_AGLEAD: { /* all-gather by the leaders */
    int k = g->node_of[g->me];
    char *myslot = h->pack + (size_t)k * h->slot * es;
    size_t off, len;
    rt_block(q->count, q->n, g->me, &off, &len);
    if (st == 0 && node->n > 1) { /* the node's blocks, consecutive: its members' lengths summed */
      size_t total = 0;
      for (int i = 0; i < q->n; i++)
        if (g->node_of[i] == k) {
          rt_block(q->count, q->n, i, &off, &len);
          total += len;
        }
      h->sub = part(q, node, RT_OP_ALL_GATHER, q->send, myslot, total, h->seq[0]);
    } else if (st == 0) {
      memcpy(myslot + slot_off(q, g->me) * es, q->send, len * es);
    } else if (st == 1 && g->lead_g) {
      h->sub = part(q, g->lead_g, RT_OP_ALL_GATHER, myslot, h->pack, h->slot * (size_t)g->nnodes, h->seq[1]);
    } else if (st == 2 && node->n > 1) {
      h->sub = part(q, g->node2_g, RT_OP_BROADCAST, q->recv, q->recv, q->count, h->seq[2]);
    }
    break;
  }
  case K_RSRAIL: { /* reduce-scatter by rails: node reduce-scatter, rail reduce-scatter */
    size_t span = h->slot * (size_t)g->nnodes; /* a rail's blocks */
    if (st == 0) h->sub = part(q, node, RT_OP_REDUCE_SCATTER, h->pack, h->blk, span * (size_t)node->n, h->seq[0]);
    else if (st == 1) h->sub = part(q, g->rail_g, RT_OP_REDUCE_SCATTER, h->blk, h->blk + span * es, span, h->seq[1]);
    break;
  }
  case K_AGRAIL: { /* all-gather by rails: rail all-gather, node all-gather */
    size_t span = h->slot * (size_t)g->nnodes;
    char *rail = h->pack + (size_t)g->local_of[g->me] * span * es;
    if (st == 1)
      h->sub = part(q, g->rail_g, RT_OP_ALL_GATHER, h->pack + rail_pos(q, g->me) * es, rail, span, h->seq[1]);
    else if (st == 2)
      h->sub = part(q, g->node2_g, RT_OP_ALL_GATHER, rail, h->pack, span * (size_t)node->n, h->seq[2]);
    break;
  }
  }
  if (st == 2 && h->sub) g->node2_g->started++;
  return h->sub != NULL;
}

static void gather_finish(RtReq *q);

/* Moves q to its next stage with work for us (or to done); false when it has to wait. */
static bool advance(RtReq *q) {
  struct RtHier *h = q->hier;
  if (h->kind == K_GATHER) {
    gather_finish(q);
  } else {
    for (int st = h->waiting ? h->stage : h->stage + 1; st < 3; st++) {
      int r = stage(q, st);
      h->waiting = r < 0;
      if (r > 0) return true;
      if (r < 0) return false;
    }
    size_t off, len, es = q->esize;
    rt_block(q->count, q->n, q->me, &off, &len);
    if (q->nbufs) vpack(q, false);
    if (h->kind == K_LEAD && q->op == RT_OP_REDUCE_SCATTER) memcpy(q->recv, h->work + off * es, len * es);
    if (h->kind == K_RSRAIL) {
      memcpy(q->recv, h->blk + h->slot * (size_t)q->g->nnodes * es, len * es);
      scale(q, q->recv, len);
    }
    for (int i = 0; h->kind == K_AGRAIL && i < q->n; i++) {
      rt_block(q->count, q->n, i, &off, &len);
      memcpy(q->recv + off * es, h->pack + rail_pos(q, i) * es, len * es);
    }
  }
  free(h->pack);
  free(h->blk);
  h->pack = h->blk = NULL;
  h->stage = 3;
  q->done = true;
  RtComm *c = q->c;
  for (RtReq **p = &c->hier_active; *p; p = &(*p)->hier_next)
    if (*p == q) {
      *p = q->hier_next;
      break;
    }
  return true;
}

static struct RtHier *hier_new(RtReq *q, int kind, size_t pack_elems) {
  struct RtHier *h = calloc(1, sizeof *h);
  if (!h || (pack_elems && !(h->pack = calloc(pack_elems, q->esize)))) rt_fatal(RT_EXIT_COMM, "out of memory");
  h->kind = kind;
  h->stage = -1;
  q->hier = h;
  q->hier_next = q->c->hier_active;
  q->c->hier_active = q;
  return h;
}

void rt_hier_begin(RtReq *q) {
  RtGroup *g = q->g;
  RtComm *c = q->c;
  size_t bytes = q->count * q->esize, es = q->esize;
  bool rails = g->rail_g && bytes >= c->rail_min[hier_op(q->op)];
  int kind = q->op == RT_OP_ALL_GATHER      ? (rails ? K_AGRAIL : K_AGLEAD)
             : q->op == RT_OP_REDUCE_SCATTER ? (rails ? K_RSRAIL : K_LEAD)
                                             : (rails ? K_RAIL : K_LEAD);
  size_t slot = 0, off, len, pack;
  if (kind == K_AGLEAD) { /* a slot per node, as long as the longest node's blocks */
    for (int i = 0; i < q->n; i++) {
      size_t at = slot_off(q, i);
      rt_block(q->count, q->n, i, &off, &len);
      if (at + len > slot) slot = at + len;
    }
    pack = slot * (size_t)g->nnodes;
  } else if (kind == K_RSRAIL || kind == K_AGRAIL) { /* every block padded to the first's length */
    rt_block(q->count, q->n, 0, &off, &slot);
    pack = slot * (size_t)q->n;
  } else {
    pack = q->nbufs || q->op == RT_OP_REDUCE_SCATTER ? q->count : 0;
  }
  struct RtHier *h = hier_new(q, kind, pack);
  h->slot = slot;
  h->work = h->pack ? h->pack : q->recv;
  if (q->nbufs) vpack(q, true);
  if (kind == K_RSRAIL) /* the input in rail-major order */
    for (int i = 0; i < q->n; i++) {
      rt_block(q->count, q->n, i, &off, &len);
      memcpy(h->pack + rail_pos(q, i) * es, q->send + off * es, len * es);
    }
  if (kind == K_AGRAIL) {
    rt_block(q->count, q->n, q->me, &off, &len);
    memcpy(h->pack + rail_pos(q, q->me) * es, q->send, len * es);
  }
  if (kind == K_RAIL || kind == K_RSRAIL) { /* our block of the node's reduce-scatter (and the rail's) */
    if (kind == K_RAIL) rt_block(q->count, g->node_g->n, g->node_g->me, &off, &h->blen);
    else h->blen = slot * (size_t)(g->nnodes + 1);
    if (!(h->blk = malloc(h->blen ? h->blen * es : 1))) rt_fatal(RT_EXIT_COMM, "out of memory");
  }
  if (rails) c->rail_count++;
  c->hier_count++;
  /* every part's sequence number now, in the order the parts run */
  if (g->node_g->n > 1 && kind != K_AGRAIL) h->seq[0] = g->node_g->seq++;
  RtGroup *mid = rails ? g->rail_g : g->lead_g;
  if (mid) h->seq[1] = mid->seq++;
  if (uses_node2(q)) h->seq[2] = g->node2_g->seq++;
  advance(q);
}

bool rt_hier_progress(RtComm *c) {
  bool moved = false;
  for (RtReq *q = c->hier_active, *next; q; q = next) {
    next = q->hier_next; /* (advance may unlink q) */
    struct RtHier *h = q->hier;
    if (h->sub && !h->sub->done) continue;
    if (h->sub) {
      rt_req_free(h->sub);
      h->sub = NULL;
      moved = true;
    }
    moved = advance(q) || moved;
  }
  return moved;
}

void rt_hier_free(RtReq *q) {
  if (!q->hier) return;
  free(q->hier->pack);
  free(q->hier->blk);
  free(q->hier);
  q->hier = NULL;
}

/* ---- gather and fold: small all-reduces and reduce-scatters on the ring -------------------
 *
 * Where the ring would run (tcp, a forced provider, the nodes' part of a hierarchical
 * all-reduce) a small all-reduce is latency: the ring's 2(n-1) message steps. Instead every
 * member's whole input is all-gathered (n-1 steps, one with 2 members) into a staging buffer
 * and each member folds it itself in the mailbox's order (rt_mbox_fold: every member the same
 * bits). The all-gather is a request of its own that carries this request's sequence number
 * and signature, so a mismatch is still named as the call the user made. Up to gather_max
 * bytes (SHARDRT_GATHER_MAX, 16 KiB; rt_comm_tune "gather_max"; 0: never); not a reduce-scatter
 * of 2 members (one ring step already, of half the bytes).
 */
bool rt_gather_usable(const RtReq *q) {
  if (q->g->backend || (q->op != RT_OP_ALL_REDUCE && q->op != RT_OP_REDUCE_SCATTER) || q->n < 2 || q->count == 0)
    return false;
  /* (a reduce-scatter of 2 members is one ring step already, of half the bytes) */
  if (q->op == RT_OP_REDUCE_SCATTER && q->n == 2) return false;
  size_t bytes = q->count * q->esize;
  return bytes <= q->c->gather_max && !rt_mbox_usable(q) && !rt_direct_usable(q);
}

void rt_gather_begin(RtReq *q) {
  size_t bytes = q->count * q->esize;
  struct RtHier *h = hier_new(q, K_GATHER, q->count * (size_t)q->n);
  q->c->gather_count++;
  char *mine = h->pack + (size_t)q->me * bytes;
  if (q->nbufs) {
    for (int i = 0; i < q->nbufs; i++)
      if (q->bufstart[i + 1] > q->bufstart[i])
        memcpy(mine + q->bufstart[i] * q->esize, q->bufs[i], (q->bufstart[i + 1] - q->bufstart[i]) * q->esize);
  } else {
    memcpy(mine, q->send, bytes);
  }
  RtReq *p = rt_req_new(q->g, RT_OP_ALL_GATHER, mine, h->pack, q->count * (size_t)q->n, q->dt);
  p->seq_full = q->seq_full;
  p->seq_set = true;
  p->sig_as = rt_signature(q);
  p->user = q;
  h->sub = rt_req_start(p);
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
uint64_t rt_comm_rail_count(const RtComm *c) { return c->rail_count; }
uint64_t rt_comm_gather_count(const RtComm *c) { return c->gather_count; }
