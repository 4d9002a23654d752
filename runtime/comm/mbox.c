/* runtime/comm/mbox.c — small collectives among the ranks of one node in a single
 * shared-memory round (the latency path), no messages at all.
 *
 * Every rank owns, per group, a mailbox: a memfd region (shmem.c) that its peers map.
 * It holds two slots, used alternately by the group's mailbox collectives k = 0, 1, 2..
 * (slot k % 2). Collective k:
 *
 *   post   once we finished collective k - 1, copy our contribution into slot k % 2
 *          (all-reduce and reduce-scatter: the whole input; all-gather: our block; broadcast:
 *          the root's buffer, nothing from the others, which post the header only), write
 *          its count and signature, then ready = k + 1 (release);
 *   read   once every peer's slot says ready = k + 1 (acquire): check the signatures
 *          (a mismatch is an error naming both calls), then fold or copy straight out of
 *          the peers' slots into our output (broadcast: copy the root's slot).
 *
 * Why slot k % 2 is free at post: the last to use it was collective k - 2. We finished
 * k - 1, so every peer had posted k - 1, which it did only after finishing k - 2 — after
 * reading our slot. No "done" counter, no extra cache line crossing between cores.
 *
 * Reductions fold block b (rt_block) in the order of the direct algorithm (direct.c):
 * member b, b+1, .., b-1, rounding bf16 and scaling avg at the same folds, so the mailbox
 * and the direct reads give the same bits and the size threshold between them (tuned,
 * tune.c) never changes a result. Every rank computes every element of its output
 * itself, reading n slots: cheap for the sizes this path takes (up to `mbox_max` bytes,
 * at most one slot, SHARDRT_MBOX_BYTES, 4 MiB; two per group and rank, in memory only
 * once touched).
 *
 * All-gathers above mbox_max stream through the same slots instead (see "large all-gathers,
 * streamed" below): pushed into the members' outputs, or in chunks through a ring in the slot.
 *
 * Requests advance from the comm's progress loop (rt_mbox_progress) in the group's
 * order; waiting is polling the peers' counters. A peer that died is seen by the
 * watchdog (every peer here runs on this host), a stuck one by its timeout.
 *
 * Finding a peer's mailbox: each rank has a directory region (made at start-up, its
 * descriptor exchanged through the bootstrap) listing its mailboxes by the group's key (a
 * hash of the member list and how many groups with that list this rank created before).
 * A mailbox is made on the group's first mailbox collective and published there; peers
 * look it up (waiting for it to appear) and map it once. Mailboxes live until the comm
 * is freed: a peer may still read one after its owner freed the group.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm_internal.h"

#define MBOX_GROUPS 1024 /* mailboxes a rank can publish (groups using this path) */
#define MBOX_HDR 256     /* bytes before the first slot's data */
#define MBOX_FOLD 8192   /* elements folded over every member before moving on (cache) */

typedef struct {
  _Atomic uint64_t hash; /* the group's member hash | 1; 0: free entry (published last) */
  uint64_t gen;          /* groups with this member list this rank created before it */
  RtRegion reg;          /* the mailbox */
} RtMboxEntry;

struct RtMboxDir {
  RtMboxEntry e[MBOX_GROUPS];
};

/* How a slot holds its owner's contribution: copied in whole; in chunks; not at all (read it
 * where it lies); not at all (the owner writes it into every member's output). */
enum { MB_COPIED, MB_CHUNKS, MB_INPLACE, MB_PUSH };

typedef struct {
  _Atomic uint64_t ready; /* k + 1 once collective k's data is in the slot (streamed: its header) */
  uint64_t count;         /* the call's count */
  uint32_t sig;           /* rt_signature */
  uint32_t mode;          /* MB_*: copied in whole; streamed in chunks; streamed: read it from reg */
  _Atomic uint64_t chunks; /* streamed: chunks of the owner's block in the ring so far */
  uint64_t src;           /* MB_INPLACE: the block's address in the owner */
  RtRegion reg;           /* MB_INPLACE: the owner's rt_comm_mem_alloc region holding it (fd -1: none, use CMA) */
} RtMboxSlot;
_Static_assert(sizeof(RtMboxSlot) <= 64, "a mailbox slot header is one cache line");

/* MB_PUSH: where the owner's output lies (the line after the two slot headers' lines). */
typedef struct {
  uint64_t dst;           /* the output's address in the owner */
  RtRegion reg;           /* its rt_comm_mem_alloc region (fd -1: none, use CMA) */
} RtMboxDst;
_Static_assert(sizeof(RtMboxDst) <= 64, "one cache line");

struct RtMboxGroup {
  int entry;         /* our directory entry */
  char *mine;        /* our mailbox */
  size_t hdr;        /* bytes before the first slot's data: MBOX_HDR, then a line per member
                        (streaming: how far we copied out of that member's block), then another
                        (MB_PUSH: we wrote our block into that member's output) */
  char **peer;       /* [n] the members' mailboxes mapped here (ours at me); NULL: not found yet */
  uint64_t issued;   /* mailbox collectives started */
  uint64_t posted;   /* ... whose contribution is in our slot */
  uint64_t finished; /* ... done */
};

static RtMboxSlot *mb_slot(char *m, uint64_t k) { return (RtMboxSlot *)(m + 64 * (k & 1)); }
static char *mb_data(const RtComm *c, const struct RtMboxGroup *mg, char *m, uint64_t k) {
  return m + mg->hdr + (k & 1) * c->mbox_cap;
}
/* In member r's mailbox: how much of member p's block of the streamed all-gathers r has copied
 * out, (k + 1) << 24 | chunks during collective k (ST_ALL: the whole block); only r writes it. */
#define ST_SHIFT 24
#define ST_ALL ((1ull << ST_SHIFT) - 1)
#define RT_ST_DONE UINT64_MAX
static _Atomic uint64_t *mb_used(char *m, int p) { return (_Atomic uint64_t *)(m + MBOX_HDR + 64 * (size_t)p); }
static _Atomic uint64_t *mb_pushed(char *m, int n, int p) {
  return (_Atomic uint64_t *)(m + MBOX_HDR + 64 * (size_t)(n + p));
}
static RtMboxDst *mb_dst(char *m, uint64_t k) { return (RtMboxDst *)(m + 128 + 64 * (k & 1)); }

/* ---- start-up -------------------------------------------------------------------- */

void rt_mbox_init(RtComm *c) {
  /* (the environment's values, read strictly: runtime/base.h) */
  bool want = rt_env_switch("SHARDRT_MBOX", true);
  c->mbox_cap = (size_t)rt_env_u64("SHARDRT_MBOX_BYTES", (size_t)4 << 20, 64, (uint64_t)1 << 40);
  c->mbox_cap = (c->mbox_cap + 63) & ~(size_t)63;
  c->mbox_max = (size_t)rt_env_u64("SHARDRT_MBOX_MAX", (size_t)64 << 10, 0, SIZE_MAX);
  if (c->mbox_max > c->mbox_cap) c->mbox_max = c->mbox_cap;
  c->mbox_stream = rt_env_switch("SHARDRT_MBOX_STREAM", true);
  /* (chunks off by default: under time-sharing they were 0.4-0.6x of pushing at 1-4 MiB in some
   * runs, 1.2x in others; docs/performance.md) */
  c->stream_min = (size_t)rt_env_u64("SHARDRT_STREAM_MIN", (size_t)8 << 20, 0, SIZE_MAX);
  c->stream_max = (size_t)rt_env_u64("SHARDRT_STREAM_MAX", (size_t)8 << 20, 0, SIZE_MAX);
  /* (more local ranks than cores: pushing waits on each peer in turn, which is worse than the single
   * round when they time-share: 64 KiB at 4 ranks on 2 cores 28 us against 11) */
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  bool crowded = ncpu > 0 && c->boot.local_world > ncpu;
  c->mbox_ag_max = (size_t)rt_env_u64("SHARDRT_MBOX_AG_MAX", crowded ? SIZE_MAX : (size_t)32 << 10, 0, SIZE_MAX);
  rt_comm_tune(c, "stream_chunk", (size_t)rt_env_u64("SHARDRT_STREAM_CHUNK", (size_t)128 << 10, 0, SIZE_MAX));
  rt_comm_tune(c, "stream_ring", (size_t)rt_env_u64("SHARDRT_STREAM_RING", c->mbox_cap, 0, SIZE_MAX));
  RtRegion mine = {.fd = -1};
  if (want) {
    c->mbox_dir = rt_shmem_region(c, sizeof(struct RtMboxDir), &mine);
    if (!c->mbox_dir) want = false;
  }
  c->mbox_dirs = calloc((size_t)c->world, sizeof *c->mbox_dirs);
  c->mbox_peer_dir = calloc((size_t)c->world, sizeof *c->mbox_peer_dir);
  if (!c->mbox_dirs || !c->mbox_peer_dir) rt_fatal(RT_EXIT_COMM, "out of memory");
  rt_boot_allgather(&c->boot, &mine, c->mbox_dirs, sizeof mine);
  /* every local peer's directory must map here; every rank must agree */
  int ok = want;
  for (int r = 0; ok && r < c->world; r++) {
    if (r == c->rank || strcmp(c->peers[r].host, c->peers[c->rank].host) != 0) continue;
    c->mbox_peer_dir[r] = (struct RtMboxDir *)rt_shmem_peer(c, r, &c->mbox_dirs[r]);
    if (!c->mbox_peer_dir[r]) ok = 0;
  }
  c->mbox_peer_dir[c->rank] = c->mbox_dir;
  int *all = malloc((size_t)c->world * sizeof *all);
  if (!all) rt_fatal(RT_EXIT_COMM, "out of memory");
  rt_boot_allgather(&c->boot, &ok, all, sizeof ok);
  c->mbox_ok = true;
  for (int r = 0; r < c->world; r++) c->mbox_ok = c->mbox_ok && all[r];
  free(all);
}

void rt_mbox_group_free(RtGroup *g) {
  struct RtMboxGroup *mg = g->mbox;
  if (!mg) return;
  free(mg->peer); /* (the mailbox itself stays until the comm goes: peers may still read it) */
  free(mg);
  g->mbox = NULL;
}

void rt_mbox_close(RtComm *c) {
  for (int i = 0; i < c->nmboxes; i++) rt_comm_mem_free(c, c->mboxes[i]);
  free(c->mboxes);
  c->mboxes = NULL;
  c->nmboxes = 0;
  if (c->mbox_dir) rt_comm_mem_free(c, c->mbox_dir);
  c->mbox_dir = NULL;
  free(c->mbox_dirs);
  free(c->mbox_peer_dir);
  c->mbox_dirs = NULL;
  c->mbox_peer_dir = NULL;
}

uint64_t rt_comm_mbox_count(const RtComm *c) { return c->mbox_count; }
uint64_t rt_comm_stream_count(const RtComm *c) { return c->stream_count; }

/* ---- the decision ------------------------------------------------------------------ */

/* Elements of a streamed chunk, and chunks in the ring (the same on every member). */
static size_t st_chunk(const RtReq *q) {
  size_t b = q->c->stream_chunk < q->c->mbox_cap ? q->c->stream_chunk : q->c->mbox_cap; /* (a slot holds the ring) */
  size_t e = b / q->esize;
  return e ? e : 1;
}
static size_t st_ring(const RtReq *q) {
  size_t r = q->c->stream_ring / (st_chunk(q) * q->esize);
  return r ? r : 1;
}

/* Larger than a single round takes (for all-gather: above mbox_ag_max too, when it can be
 * pushed): an all-gather streamed (the same on every member). */
static bool streams(const RtReq *q) {
  const RtComm *c = q->c;
  size_t bytes = q->count * q->esize;
  bool push_ok = c->direct_ok && c->mbox_stream && q->op == RT_OP_ALL_GATHER && bytes > c->mbox_ag_max;
  if (bytes <= c->mbox_max && bytes <= c->mbox_cap && !push_ok) return false;
  /* (below stream_min every block is read where it lies, which needs CMA where it is not mapped) */
  return c->mbox_stream && q->op == RT_OP_ALL_GATHER && (bytes >= c->stream_min || c->direct_ok) &&
         (q->count / (size_t)q->n + 1) / st_chunk(q) < ST_ALL;
}

bool rt_mbox_usable(const RtReq *q) {
  const RtComm *c = q->c;
  if (!c->mbox_ok || q->g->backend || q->n < 2 || q->count == 0) return false;
  if (q->op != RT_OP_ALL_REDUCE && q->op != RT_OP_REDUCE_SCATTER && q->op != RT_OP_ALL_GATHER &&
      q->op != RT_OP_BROADCAST)
    return false;
  size_t bytes = q->count * q->esize;
  if ((bytes > c->mbox_max || bytes > c->mbox_cap) && !streams(q)) return false;
  return q->g->one_node && strcmp(c->fab[RT_FAB_INTRA].provider, "shm") == 0; /* (not with a provider forced) */
}

/* Our mailbox for g: made and published on the group's first mailbox collective. */
static struct RtMboxGroup *group_mbox(RtReq *q) {
  RtGroup *g = q->g;
  RtComm *c = q->c;
  if (g->mbox) return g->mbox;
  struct RtMboxGroup *mg = calloc(1, sizeof *mg);
  if (!mg || !(mg->peer = calloc((size_t)g->n, sizeof *mg->peer))) rt_fatal(RT_EXIT_COMM, "out of memory");
  RtRegion reg;
  mg->hdr = (MBOX_HDR + 128 * (size_t)g->n + 4095) & ~(size_t)4095; /* (data page-aligned) */
  mg->mine = rt_shmem_region(c, mg->hdr + 2 * c->mbox_cap, &reg);
  if (!mg->mine) rt_fatal(RT_EXIT_COMM, "no shared memory for the mailbox of group %s", g->name);
  if (c->nmboxes == c->capmboxes) {
    int cap = c->capmboxes ? 2 * c->capmboxes : 8;
    void **n = realloc(c->mboxes, (size_t)cap * sizeof *n);
    if (!n) rt_fatal(RT_EXIT_COMM, "out of memory");
    c->mboxes = n;
    c->capmboxes = cap;
  }
  c->mboxes[c->nmboxes++] = mg->mine;
  struct RtMboxDir *dir = c->mbox_dir;
  int e = 0;
  while (e < MBOX_GROUPS && atomic_load_explicit(&dir->e[e].hash, memory_order_relaxed)) e++;
  if (e == MBOX_GROUPS)
    rt_fatal(RT_EXIT_COMM, "group %s: more than %d groups used the shared-memory path (SHARDRT_MBOX=0 turns it off)",
             g->name, MBOX_GROUPS);
  dir->e[e].gen = g->gen;
  dir->e[e].reg = reg;
  atomic_store_explicit(&dir->e[e].hash, g->hash | 1, memory_order_release);
  mg->entry = e;
  mg->peer[g->me] = mg->mine;
  g->mbox = mg;
  return mg;
}

/* Member p's mailbox mapped here, or NULL while p has not published it yet. */
static char *peer_mbox(RtReq *q, struct RtMboxGroup *mg, int p) {
  if (mg->peer[p]) return mg->peer[p];
  RtComm *c = q->c;
  int rank = q->g->ranks[p];
  struct RtMboxDir *dir = c->mbox_peer_dir[rank];
  for (int e = 0; e < MBOX_GROUPS; e++) {
    uint64_t h = atomic_load_explicit(&dir->e[e].hash, memory_order_acquire);
    if (!h) break; /* entries are filled in order and never freed */
    if (h != (q->g->hash | 1) || dir->e[e].gen != q->g->gen) continue;
    RtRegion reg = dir->e[e].reg;
    mg->peer[p] = rt_shmem_peer(c, rank, &reg);
    if (!mg->peer[p] && rt_peer_gone(c, rank)) return NULL; /* ended: the watchdog names it, as for any request */
    if (!mg->peer[p]) rt_fatal(RT_EXIT_COMM, "cannot map rank %d's mailbox for group %s", rank, q->g->name);
    return mg->peer[p];
  }
  return NULL;
}

/* ---- the algorithms ----------------------------------------------------------------- */

/* Our contribution into slot k. */
static void post_data(RtReq *q, char *dst) {
  size_t es = q->esize;
  if (q->op == RT_OP_ALL_GATHER) {
    size_t off, len;
    rt_block(q->count, q->n, q->me, &off, &len);
    memcpy(dst, q->send, len * es);
  } else if (q->op == RT_OP_BROADCAST) { /* the root's buffer; the others post no data */
    if (q->me == q->root) memcpy(dst, q->recv, q->count * es);
  } else if (q->nbufs) {
    for (int i = 0; i < q->nbufs; i++)
      if (q->bufstart[i + 1] > q->bufstart[i]) /* (an empty member may be NULL) */
        memcpy(dst + q->bufstart[i] * es, q->bufs[i], (q->bufstart[i + 1] - q->bufstart[i]) * es);
  } else {
    memcpy(dst, q->send, q->count * es);
  }
}

/* Elements [o, o + m) of the result, folded from the n slots in block b's order
 * (b, b+1, .., b-1) into dst, which holds m elements. */
static void fold(RtReq *q, char *const *src, int b, size_t o, size_t m, char *dst) {
  int n = q->n;
  size_t es = q->esize;
  for (int j = 1; j < n; j++) {
    float scale = j == n - 1 && q->redop == RT_AVG ? 1.0f / (float)n : 1.0f;
    const char *a = j == 1 ? src[b] + o * es : dst;
    rt_reduce(dst, a, src[(b + j) % n] + o * es, m, q->dt, q->redop, scale);
  }
}

/* Element range [o, o + m) of the output (the member pieces of all_reduce_v). */
static void fold_out(RtReq *q, char *const *src, int b, size_t o, size_t m) {
  size_t es = q->esize;
  if (!q->nbufs) {
    size_t base = 0, len; /* reduce-scatter's output holds our block only */
    if (q->op == RT_OP_REDUCE_SCATTER) rt_block(q->count, q->n, q->me, &base, &len);
    fold(q, src, b, o, m, q->recv + (o - base) * es);
    return;
  }
  for (int i = 0; i < q->nbufs && m > 0; i++) {
    size_t s = q->bufstart[i], e = q->bufstart[i + 1];
    if (e <= o || s >= o + m) continue;
    size_t lo = o > s ? o : s, hi = o + m < e ? o + m : e;
    fold(q, src, b, lo, hi - lo, q->bufs[i] + (lo - s) * es);
  }
}

void rt_mbox_fold(RtReq *q, char *const *src) {
  int n = q->n;
  size_t es = q->esize;
  if (q->op == RT_OP_BROADCAST) {
    if (q->me != q->root) memcpy(q->recv, src[q->root], q->count * es);
    return;
  }
  if (q->op == RT_OP_ALL_GATHER) {
    for (int p = 0; p < n; p++) {
      size_t off, len;
      rt_block(q->count, n, p, &off, &len);
      if (p == q->me) {
        if (q->send != q->recv + off * es) memmove(q->recv + off * es, q->send, len * es);
      } else {
        memcpy(q->recv + off * es, src[p], len * es);
      }
    }
    return;
  }
  int b0 = q->op == RT_OP_REDUCE_SCATTER ? q->me : 0, b1 = q->op == RT_OP_REDUCE_SCATTER ? q->me + 1 : n;
  for (int b = b0; b < b1; b++) {
    size_t off, len;
    rt_block(q->count, n, b, &off, &len);
    for (size_t o = off; o < off + len; o += MBOX_FOLD) {
      size_t m = off + len - o < MBOX_FOLD ? off + len - o : MBOX_FOLD;
      fold_out(q, src, b, o, m);
    }
  }
}

static void mismatch(RtReq *q, int p, const RtMboxSlot *s) {
  char theirs[64], what[160];
  rt_describe_sig((uint16_t)s->sig, theirs, sizeof theirs);
  if ((s->sig >> 13) != (uint32_t)(q->sig >> 13))
    snprintf(what, sizeof what, "called %s", theirs);
  else
    snprintf(what, sizeof what, "called %s with a different count, dtype, reduction or root", theirs);
  rt_req_mismatch(q, q->g->ranks[p], what);
}

/* ---- large all-gathers, streamed ------------------------------------------------------
 *
 * Collective k, streamed: once we finished k - 1 (slot k % 2 is free, as above), our slot's
 * header goes out (count, signature, mode; chunks = 0; ready = k + 1). Then, interleaved:
 *   post  chunk i of our block into ring position i % R of slot k % 2 (and into our own
 *         output in the same pass, while it is in cache), chunks = i + 1 (release) -- once
 *         every member has copied out chunk i - R (its line for us in its mailbox);
 *   read  every chunk a member has posted, straight into our output, then publish how far
 *         we got in our line for that member.
 * A block in rt_comm_mem_alloc memory, and any block of a collective below stream_min, is
 * not copied in at all (MB_INPLACE): the others read it where it lies (through their mapping
 * of it, else process_vm_readv), and we finish only once every one has said it copied the
 * whole block (ST_ALL). Two copies per byte in the chunked mode, but
 * both are plain memcpy of cache-sized pieces; process_vm_* (the direct path) copies
 * through the kernel a page at a time. Slot k % 2 is reused by collective k + 2 only:
 * every member then finished k + 1, so it finished k, so it copied out all of ours. */

/* bytes between our memory at mine and rank's at theirs: read into mine, or write from it
 * (process_vm_readv / writev). */
static void cma_rw(RtReq *q, int rank, uint64_t theirs, char *mine, size_t bytes, bool write) {
  pid_t pid = (pid_t)q->c->peers[rank].pid;
  while (bytes > 0) {
    struct iovec li = {mine, bytes}, ri = {(void *)(uintptr_t)theirs, bytes};
    ssize_t got = write ? process_vm_writev(pid, &li, 1, &ri, 1, 0) : process_vm_readv(pid, &li, 1, &ri, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      rt_fatal(RT_EXIT_COMM, "rank %d: all_gather on group %s: %s rank %d's memory failed: %s", q->c->rank,
               q->g->name, write ? "writing" : "reading", rank, strerror(got < 0 ? errno : EFAULT));
    mine += got;
    theirs += (uint64_t)got;
    bytes -= (size_t)got;
  }
}

/* Our slot header for streamed collective k. Below stream_min we write our block into every
 * member's output ourselves (MB_PUSH: one copy, through our mapping of its output or
 * process_vm_writev; below a few hundred KiB the kernel's per-page cost is less than a second
 * copy through the mailbox); above it the others read our block where it lies when it is in
 * shared memory, else we stream it in chunks. */
static void stream_post_header(RtReq *q, struct RtMboxGroup *mg, uint64_t k) {
  RtComm *c = q->c;
  size_t off, len, es = q->esize;
  rt_block(q->count, q->n, q->me, &off, &len);
  RtMboxSlot *s = mb_slot(mg->mine, k);
  RtRegion r = rt_shmem_find(c, q->send);
  uint64_t a = (uint64_t)(uintptr_t)q->send;
  bool push = c->direct_ok && (q->count * es < c->stream_min || q->count * es >= c->stream_max); /* (size only: every member the same) */
  bool inplace = !push && c->direct_ok && len > 0 && r.fd >= 0 && a + len * es <= r.base + r.size;
  if (r.fd < 0 || a + len * es > r.base + r.size) r = (RtRegion){.fd = -1};
  if (push) {
    RtMboxDst *d = mb_dst(mg->mine, k);
    d->dst = (uint64_t)(uintptr_t)q->recv;
    d->reg = rt_shmem_find(c, q->recv);
    if (d->reg.fd >= 0 && d->dst + q->count * es > d->reg.base + d->reg.size) d->reg = (RtRegion){.fd = -1};
  }
  s->count = q->count;
  s->sig = q->sig;
  s->mode = push ? MB_PUSH : inplace ? MB_INPLACE : MB_CHUNKS;
  s->src = a;
  s->reg = r;
  atomic_store_explicit(&s->chunks, 0, memory_order_relaxed);
  atomic_store_explicit(&s->ready, k + 1, memory_order_release);
  mg->posted++;
  q->st_posted = true;
  if (inplace && q->send != q->recv + off * es) memmove(q->recv + off * es, q->send, len * es);
  if (push) q->st_put = q->send != q->recv + off * es ? 0 : 1; /* our own copy is still to do */
}

/* Writes our block into member p's output at address dst (through map when not NULL), and
 * the first time also into our own output, a piece at a time: the piece is read from memory
 * once and written twice. */
static void push_block(RtReq *q, int p, uint64_t dst, char *map) {
  RtComm *c = q->c;
  size_t off, len, es = q->esize, piece = c->direct_chunk;
  rt_block(q->count, q->n, q->me, &off, &len);
  char *own = q->st_put ? NULL : q->recv + off * es;
  for (size_t o = 0; o < len * es; o += piece) {
    size_t m = len * es - o < piece ? len * es - o : piece;
    if (map) memcpy(map + off * es + o, q->send + o, m);
    else cma_rw(q, q->g->ranks[p], dst + off * es + o, (char *)q->send + o, m, true);
    if (own) memmove(own + o, q->send + o, m);
  }
  if (map) c->mapped_bytes += len * es;
  q->st_put = 1;
}

/* MB_PUSH: writes our block into every member's output once it has posted its header, and
 * sees who wrote theirs into ours; st_got[p]: 1 pushed to p, 2 p pushed to us. True when
 * something moved. */
static bool stream_push(RtReq *q, struct RtMboxGroup *mg, uint64_t k) {
  RtComm *c = q->c;
  int n = q->n;
  uint64_t all = ((k + 1) << ST_SHIFT) + ST_ALL;
  bool moved = false;
  for (int j = 1; j < n; j++) {
    int p = (q->me + j) % n;
    if (q->st_got[p] == 3 || !peer_mbox(q, mg, p)) continue;
    RtMboxSlot *s = mb_slot(mg->peer[p], k);
    if (atomic_load_explicit(&s->ready, memory_order_acquire) != k + 1) continue;
    if (s->sig != q->sig || s->count != q->count) mismatch(q, p, s);
    if (!(q->st_got[p] & 1)) {
      int rank = q->g->ranks[p];
      RtMboxDst d = *mb_dst(mg->peer[p], k);
      char *map = rt_shmem_peer(c, rank, &d.reg);
      push_block(q, p, d.dst, map ? map + (d.dst - d.reg.base) : NULL);
      atomic_store_explicit(mb_pushed(mg->mine, n, p), all, memory_order_release);
      q->st_got[p] |= 1;
      moved = true;
    }
    if (!(q->st_got[p] & 2) && atomic_load_explicit(mb_pushed(mg->peer[p], n, q->me), memory_order_acquire) >= all) {
      q->st_got[p] |= 2;
      moved = true;
    }
  }
  return moved;
}

/* Posts our next chunk when the ring has room; true when it did. */
static bool stream_post_chunk(RtReq *q, struct RtMboxGroup *mg, uint64_t k) {
  RtComm *c = q->c;
  size_t off, len, es = q->esize, ce = st_chunk(q), ring = st_ring(q), i = q->st_put;
  rt_block(q->count, q->n, q->me, &off, &len);
  if (i * ce >= len) return false;
  if (i >= ring) /* every member copied chunk i - ring out */
    for (int p = 0; p < q->n; p++) {
      if (p == q->me) continue;
      if (!peer_mbox(q, mg, p)) return false;
      uint64_t u = atomic_load_explicit(mb_used(mg->peer[p], q->me), memory_order_acquire);
      if (u < ((k + 1) << ST_SHIFT) + (i - ring + 1)) return false;
    }
  size_t m = len - i * ce < ce ? len - i * ce : ce;
  const char *src = q->send + i * ce * es;
  memcpy(mb_data(c, mg, mg->mine, k) + (i % ring) * ce * es, src, m * es);
  RtMboxSlot *s = mb_slot(mg->mine, k);
  atomic_store_explicit(&s->chunks, i + 1, memory_order_release);
  char *own = q->recv + (off + i * ce) * es;
  if (own != src) memmove(own, src, m * es);
  q->st_put++;
  return true;
}

/* Copies out what member p has posted; true when something moved. */
static bool stream_read(RtReq *q, struct RtMboxGroup *mg, uint64_t k, int p) {
  RtComm *c = q->c;
  if (q->st_got[p] == RT_ST_DONE || !peer_mbox(q, mg, p)) return false;
  char *pm = mg->peer[p];
  RtMboxSlot *s = mb_slot(pm, k);
  if (atomic_load_explicit(&s->ready, memory_order_acquire) != k + 1) return false;
  if (s->sig != q->sig || s->count != q->count) mismatch(q, p, s);
  size_t off, len, es = q->esize, ce = st_chunk(q), ring = st_ring(q);
  rt_block(q->count, q->n, p, &off, &len);
  uint64_t base = (k + 1) << ST_SHIFT;
  _Atomic uint64_t *used = mb_used(mg->mine, p);
  if (s->mode == MB_INPLACE) {
    int rank = q->g->ranks[p];
    RtRegion r = s->reg;
    char *map = rt_shmem_peer(c, rank, &r);
    if (map) {
      memcpy(q->recv + off * es, map + (s->src - r.base), len * es);
      c->mapped_bytes += len * es;
    } else {
      cma_rw(q, rank, s->src, q->recv + off * es, len * es, false);
    }
    q->st_got[p] = RT_ST_DONE;
    atomic_store_explicit(used, base + ST_ALL, memory_order_release);
    return true;
  }
  size_t avail = (size_t)atomic_load_explicit(&s->chunks, memory_order_acquire), got = (size_t)q->st_got[p];
  size_t nch = (len + ce - 1) / ce;
  if (got == avail && got < nch) return false;
  const char *data = mb_data(c, mg, pm, k);
  for (; got < avail; got++) {
    size_t m = len - got * ce < ce ? len - got * ce : ce;
    memcpy(q->recv + (off + got * ce) * es, data + (got % ring) * ce * es, m * es);
    atomic_store_explicit(used, base + got + 1, memory_order_release);
  }
  q->st_got[p] = got == nch ? RT_ST_DONE : got;
  return true;
}

/* A streamed all-gather, as far as the members allow; true when something happened. */
static bool stream_step(RtReq *q) {
  RtComm *c = q->c;
  struct RtMboxGroup *mg = q->g->mbox;
  uint64_t k = q->mbox_k;
  bool moved = false;
  if (!q->st_posted) {
    if (mg->posted != k || mg->finished != k) return false;
    stream_post_header(q, mg, k);
    moved = true;
  }
  const RtMboxSlot *s = mb_slot(mg->mine, k);
  if (s->mode == MB_PUSH) {
    moved = stream_push(q, mg, k) || moved;
    for (int p = 0; p < q->n; p++)
      if (p != q->me && q->st_got[p] != 3) return moved;
  }
  /* every chunk of ours the ring takes, then whatever the others posted: a member that is not
   * running (ranks time-sharing a core) then holds the others up once, not at every chunk */
  for (bool again = s->mode != MB_PUSH; again;) {
    again = false;
    while (stream_post_chunk(q, mg, k)) again = true;
    for (int p = 0; p < q->n; p++)
      if (p != q->me) again = stream_read(q, mg, k, p) || again;
    moved = moved || again;
  }
  size_t off, len;
  rt_block(q->count, q->n, q->me, &off, &len);
  if (s->mode == MB_CHUNKS && q->st_put * st_chunk(q) < len) return moved;
  for (int p = 0; p < q->n && s->mode != MB_PUSH; p++) {
    if (p == q->me) continue;
    if (q->st_got[p] != RT_ST_DONE) return moved;
    /* our block read where it lies: the caller may reuse it only once everyone has it */
    if (s->mode == MB_INPLACE &&
        atomic_load_explicit(mb_used(mg->peer[p], q->me), memory_order_acquire) < ((k + 1) << ST_SHIFT) + ST_ALL)
      return moved;
  }
  free(q->st_got);
  q->st_got = NULL;
  mg->finished++;
  c->mbox_active--;
  q->done = true;
  rt_req_finished(q);
  return true;
}

/* Moves q forward as far as the peers allow; true when something happened. */
static bool step(RtReq *q) {
  if (q->mbox_stream) return stream_step(q);
  RtComm *c = q->c;
  struct RtMboxGroup *mg = q->g->mbox;
  int n = q->n;
  uint64_t k = q->mbox_k;
  bool moved = false;
  if (mg->posted == k && mg->finished == k) { /* (see the top: the slot is free) */
    RtMboxSlot *s = mb_slot(mg->mine, k);
    post_data(q, mb_data(c, mg, mg->mine, k));
    s->count = q->count;
    s->sig = q->sig;
    s->mode = MB_COPIED;
    atomic_store_explicit(&s->ready, k + 1, memory_order_release);
    mg->posted++;
    moved = true;
  }
  if (mg->posted <= k || mg->finished != k) return moved;
  for (int p = 0; p < n; p++)
    if (!peer_mbox(q, mg, p)) return moved;
  char *src[64], **srcp = n <= 64 ? src : malloc((size_t)n * sizeof *srcp);
  if (!srcp) rt_fatal(RT_EXIT_COMM, "out of memory");
  for (int p = 0; p < n; p++) {
    char *m = mg->peer[p];
    RtMboxSlot *s = mb_slot(m, k);
    if (atomic_load_explicit(&s->ready, memory_order_acquire) != k + 1) {
      if (srcp != src) free(srcp);
      return moved;
    }
    if (s->sig != q->sig || s->count != q->count) mismatch(q, p, s);
    srcp[p] = mb_data(c, mg, m, k);
  }
  rt_mbox_fold(q, srcp);
  if (srcp != src) free(srcp);
  mg->finished++;
  c->mbox_active--;
  q->done = true;
  rt_req_finished(q);
  return true;
}

void rt_mbox_begin(RtReq *q) {
  struct RtMboxGroup *mg = group_mbox(q);
  q->mbox = true;
  q->mbox_k = mg->issued++;
  q->c->mbox_active++;
  q->mbox_stream = streams(q);
  if (q->mbox_stream) {
    q->c->stream_count++;
    if (!(q->st_got = calloc((size_t)q->n, sizeof *q->st_got))) rt_fatal(RT_EXIT_COMM, "out of memory");
  } else {
    q->c->mbox_count++;
  }
  step(q);
}

bool rt_mbox_progress(RtComm *c) {
  if (!c->mbox_active) return false;
  bool moved = false;
  for (RtReq *q = c->active, *next; q; q = next) {
    next = q->next; /* (step may unlink q) */
    if (q->mbox && !q->done) moved = step(q) || moved;
  }
  return moved;
}

/* The members whose data for q is not in their mailbox yet (for the watchdog): with one round, a
 * member that has not posted has not joined q. Reads only what step() published (no mapping). */
int rt_mbox_waiting(const RtReq *q, int *peers, bool *first, int max) {
  const struct RtMboxGroup *mg = q->g->mbox;
  int k = 0;
  for (int p = 0; mg && p < q->n && k < max; p++) {
    if (p == q->g->me) continue;
    const char *m = mg->peer[p];
    if (m && atomic_load_explicit(&mb_slot((char *)m, q->mbox_k)->ready, memory_order_acquire) >= q->mbox_k + 1) continue;
    peers[k] = q->g->ranks[p];
    first[k++] = true;
  }
  return k;
}
