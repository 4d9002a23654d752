/* runtime/comm/direct.c — all-reduce, reduce-scatter and all-gather between processes of
 * one host by reading and writing the peers' buffers directly (cross-memory attach:
 * process_vm_readv / process_vm_writev), with a few small messages through the shm
 * endpoint as the only synchronisation.
 *
 * Why: the ring moves every chunk as a message; the shm provider turns each into a
 * command, a CMA copy by the receiver and a response the sender must progress to see,
 * so every chunk costs a round trip through both ranks' progress loops, and with more
 * ranks than cores a step waits for a peer that is not scheduled. Here each rank copies
 * what it needs straight from (or to) where the peer keeps it, whether the peer runs or not:
 *
 *   step 0  every member sends every other one a descriptor of its buffers (RtDirectDesc:
 *           addresses, and for all_reduce_v the address of its member table);
 *   then    reduce-scatter: for each chunk of our block, read each peer's chunk of it into
 *           a staging slab (L2-sized) and reduce into our output;
 *           all-gather (and all-reduce after its reduce-scatter): write our block into
 *           every peer's output (push, the default). No one else reads or writes that part
 *           of a peer's output (in place, its input) any more: only we read it, in our
 *           reduce-scatter, already done. The source is in our cache, and the lines we
 *           write are mostly ones we read last, so little crosses between cores.
 *           With SHARDRT_DIRECT_PUSH=0 all-gather reads each peer's block instead, and
 *           all-reduce needs a round more: a zero-byte "block reduced" to every peer, then
 *           each peer's reduced block is read out of its output;
 *   last    a zero-byte "done" to every peer: we no longer read it and our writes into it
 *           are complete. A member returns only when every peer has said done.
 * The bytes moved per rank equal the ring's ((n-1)/n of the buffer per phase), each block
 * is reduced by one member only (so every member gets identical bits), and all_reduce_v
 * reads and writes its members in place through scatter/gather lists (no packing).
 *
 * A peer's buffer in rt_comm_mem_alloc memory is reached through our mapping of it
 * (shmem.c): memcpy instead of process_vm_*, and the reduction reads the peer's part in
 * place instead of staging it through the slab. Per piece, whichever side it is on.
 *
 * Used when every member is on this host, reached through shm, CMA works between every
 * pair of local ranks (probed once at start-up) and the buffer is at least
 * SHARDRT_DIRECT_MIN bytes (SHARDRT_DIRECT=0 turns it off). Every member takes the same
 * decision from the same facts.
 *
 * Send / receive between two ranks of this host (a pipeline's activations, context parallelism's
 * ring hops), over the shm provider's inject size: pulled. The sender sends its descriptor (an
 * inject-sized message: complete when posted) and waits for a zero-byte "done"; the receiver reads
 * the bytes out of the sender's buffer (its mapping, else process_vm_readv) once it has both the
 * descriptor and its own receive, then sends "done". Why: the shm provider (libfabric 1.17)
 * completes a larger send when the receiver's response comes back and takes its responses in
 * order, so a send that no receive has matched yet (a pipeline's, its receiver busy) holds back the
 * completion of every later send of this rank, whoever they go to; two pipeline stages each
 * holding back the other's ring hop by such a send was a deadlock (pp 2 x cp 2, interleaved: ring
 * sends not completing for ever). Every message here is inject-sized, so no send waits on anything.
 * Without cross-memory attach the sender posts its bytes only after the receiver's zero-byte go-ahead
 * (ring.c, RtReq.cts): no send waits for a receive then either, at the price of the sender's progress.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm_internal.h"

/* A buffer as the concatenation of members: member i holds elements [start[i], start[i+1])
 * at address addr[i] (in this process or a peer's). A plain buffer is one member whose
 * start may be above 0 (a block of a larger whole). */
typedef struct {
  int n;            /* members */
  uint64_t *addr;   /* [n] addresses */
  size_t *start;    /* [n + 1] element offsets */
  uint64_t one_addr;     /* storage for n == 1 */
  size_t one_start[2];   /* storage for n == 1 */
  const RtRegion *reg;   /* a peer's view: the region holding its buffers, mapped here at map */
  char *map;             /* NULL: not mapped (local views, plain memory, mapping failed) */
} RtView;

/* What a member publishes (fixed size: it travels as one message). */
typedef struct {
  uint64_t send;    /* address of the send buffer (nbufs == 0) */
  uint64_t send_lo; /* element offset that send[0] holds */
  uint64_t recv;    /* address of the output (nbufs == 0) */
  uint64_t recv_lo; /* element offset that recv[0] holds */
  uint64_t bufs;    /* all_reduce_v: address of its char *[nbufs] */
  uint64_t starts;  /* all_reduce_v: address of its size_t [nbufs + 1] */
  int64_t nbufs;    /* all_reduce_v members, 0 for a plain buffer */
  uint64_t count;   /* elements of the buffer (a pulled send's bytes: the receiver checks them) */
  RtRegion send_reg; /* the rt_comm_mem_alloc region holding send (all_reduce_v: the first member) */
  RtRegion recv_reg; /* the one holding recv (all_reduce_v: the same) */
} RtDirectDesc;

struct RtDirect {
  RtDirectDesc *desc;  /* [n] received descriptors, ours at [me] */
  RtMsg *msgs;         /* [2n] messages of the current step: recv from p at 2p, send to p at 2p+1 */
  RtView lsend, lrecv; /* our buffers: what is reduced / read by peers, and the output */
  RtView *rsend, *rrecv; /* [n] the peers' views */
  uint64_t *laddr;     /* [nbufs] all_reduce_v: our members' addresses (published) */
  uint64_t **heap;     /* [n] member address tables read from all_reduce_v peers, else NULL */
  size_t **heap_start; /* [n] their offsets */
  bool push;           /* all-gather (phase): write our block into the peers (no "reduced" round) */
};

static int mod(int a, int n) { return ((a % n) + n) % n; }


static void view_one(RtView *v, uint64_t addr, size_t lo, size_t hi) {
  v->n = 1;
  v->one_addr = addr;
  v->one_start[0] = lo;
  v->one_start[1] = hi;
  v->addr = &v->one_addr;
  v->start = v->one_start;
  v->reg = NULL;
  v->map = NULL;
}

/* Where bytes [addr, addr + bytes) of a peer's view lie in our mapping of its region,
 * or NULL (not mapped, or outside the region: then process_vm_* moves them). */
static char *view_map(const RtView *v, uint64_t addr, size_t bytes) {
  if (!v->map || addr < v->reg->base || addr + bytes > v->reg->base + v->reg->size) return NULL;
  return v->map + (addr - v->reg->base);
}

/* The member holding element off (skipping empty members). */
static int view_find(const RtView *v, size_t off) {
  int lo = 0, hi = v->n - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (v->start[mid] <= off) lo = mid;
    else hi = mid - 1;
  }
  while (lo < v->n - 1 && v->start[lo + 1] <= off) lo++;
  return lo;
}

/* Address of element off in the view, and how many elements follow it contiguously. */
static uint64_t view_at(const RtView *v, size_t off, size_t es, size_t *avail) {
  int i = view_find(v, off);
  if (off < v->start[i] || off >= v->start[i + 1])
    rt_fatal(RT_EXIT_COMM, "direct: element %zu outside the buffer [%zu, %zu) (internal error)", off, v->start[0],
             v->start[v->n]);
  *avail = v->start[i + 1] - off;
  return v->addr[i] + (off - v->start[i]) * es;
}

static _Noreturn void cma_failed(RtReq *q, int peer, int err, bool write) {
  RtComm *c = q->c;
  char mine[256];
  rt_describe_req(q, mine, sizeof mine);
  if (err == ESRCH || rt_peer_gone(c, peer)) {
    rt_fabric_forget_peer(c, peer);
    rt_fatal(RT_EXIT_COMM, "peer lost: rank %d (pid %d on %s) died (killed or crashed) while this rank reads it in %s",
             peer, c->peers[peer].pid, c->peers[peer].host, mine);
  }
  rt_fatal(RT_EXIT_COMM, "%s rank %d's memory (process_vm_%sv) failed in %s: %s", write ? "writing" : "reading", peer,
           write ? "write" : "read", mine, strerror(err));
}

/* Moves every byte the iovecs describe, from the peer (read) or to it (write); the kernel
 * may stop early: go on from there. */
static void xfer_all(RtReq *q, int peer, struct iovec *li, int nl, struct iovec *ri, int nr, bool write) {
  pid_t pid = (pid_t)q->c->peers[peer].pid;
  while (nl > 0 && nr > 0) {
    ssize_t got = write ? process_vm_writev(pid, li, (unsigned long)nl, ri, (unsigned long)nr, 0)
                        : process_vm_readv(pid, li, (unsigned long)nl, ri, (unsigned long)nr, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      cma_failed(q, peer, errno, write);
    }
    if (got == 0) cma_failed(q, peer, EFAULT, write);
    for (size_t left = (size_t)got; left > 0;) { /* drop what was copied */
      size_t k = left < li->iov_len ? left : li->iov_len;
      li->iov_base = (char *)li->iov_base + k;
      li->iov_len -= k;
      left -= k;
      if (li->iov_len == 0) li++, nl--;
    }
    for (size_t left = (size_t)got; left > 0;) {
      size_t k = left < ri->iov_len ? left : ri->iov_len;
      ri->iov_base = (char *)ri->iov_base + k;
      ri->iov_len -= k;
      left -= k;
      if (ri->iov_len == 0) ri++, nr--;
    }
    while (nl > 0 && li->iov_len == 0) li++, nl--;
    while (nr > 0 && ri->iov_len == 0) ri++, nr--;
  }
}

/* Copies elements [ro, ro + k) of world rank peer's view rv into [lo, lo + k) of our view
 * lv (write: the other way), in pieces contiguous on both sides: memcpy through our
 * mapping of the peer's memory where there is one, else process_vm_*, up to 64 pieces a
 * call. */
static void cma_xfer(RtReq *q, int peer, const RtView *lv, size_t lo, const RtView *rv, size_t ro, size_t k, bool write) {
  enum { MAXP = 64 };
  struct iovec li[MAXP], ri[MAXP];
  size_t es = q->esize, done = 0;
  int np = 0;
  while (done < k) {
    size_t la, ra;
    uint64_t lp = view_at(lv, lo + done, es, &la), rp = view_at(rv, ro + done, es, &ra);
    size_t m = k - done;
    if (la < m) m = la;
    if (ra < m) m = ra;
    char *mp = view_map(rv, rp, m * es);
    if (mp) {
      if (write) memcpy(mp, (const void *)(uintptr_t)lp, m * es);
      else memcpy((void *)(uintptr_t)lp, mp, m * es);
      q->c->mapped_bytes += m * es;
      done += m;
      if (np > 0 && done == k) xfer_all(q, peer, li, np, ri, np, write);
      continue;
    }
    li[np].iov_base = (void *)(uintptr_t)lp;
    li[np].iov_len = m * es;
    ri[np].iov_base = (void *)(uintptr_t)rp;
    ri[np].iov_len = m * es;
    np++;
    done += m;
    if (np == MAXP || done == k) {
      xfer_all(q, peer, li, np, ri, np, write);
      np = 0;
    }
  }
}

/* True when elements [o, o + k) of a peer's view all lie in our mapping of its memory. */
static bool view_mapped(const RtView *v, size_t o, size_t k, size_t es) {
  if (!v->map) return false;
  for (size_t at = 0; at < k;) {
    size_t avail;
    uint64_t a = view_at(v, o + at, es, &avail);
    size_t m = k - at < avail ? k - at : avail;
    if (!view_map(v, a, m * es)) return false;
    at += m;
  }
  return true;
}

/* Builds the peer's views from its descriptor (reading its member table when it has one). */
static void peer_views(RtReq *q, int p) {
  struct RtDirect *d = q->dx;
  const RtDirectDesc *pd = &d->desc[p];
  int rank = q->g->ranks[p];
  if (pd->nbufs <= 0) {
    view_one(&d->rsend[p], pd->send, (size_t)pd->send_lo, q->count);
    view_one(&d->rrecv[p], pd->recv, (size_t)pd->recv_lo, q->count);
    d->rsend[p].reg = &pd->send_reg;
    d->rsend[p].map = rt_shmem_peer(q->c, rank, &pd->send_reg);
    d->rrecv[p].reg = &pd->recv_reg;
    d->rrecv[p].map = rt_shmem_peer(q->c, rank, &pd->recv_reg);
    return;
  }
  size_t nb = (size_t)pd->nbufs;
  d->heap[p] = malloc(nb * sizeof *d->heap[p]);
  d->heap_start[p] = malloc((nb + 1) * sizeof *d->heap_start[p]);
  if (!d->heap[p] || !d->heap_start[p]) rt_fatal(RT_EXIT_COMM, "out of memory");
  struct iovec li[2] = {{d->heap[p], nb * sizeof(uint64_t)}, {d->heap_start[p], (nb + 1) * sizeof(size_t)}};
  struct iovec ri[2] = {{(void *)(uintptr_t)pd->bufs, nb * sizeof(uint64_t)},
                        {(void *)(uintptr_t)pd->starts, (nb + 1) * sizeof(size_t)}};
  xfer_all(q, rank, li, 2, ri, 2, false);
  if (d->heap_start[p][nb] != q->count)
    rt_fatal(RT_EXIT_COMM, "all_reduce_v on group %s: rank %d's members hold %zu elements, this rank's %zu",
             q->g->name, rank, d->heap_start[p][nb], q->count);
  RtView v = {.n = (int)nb, .addr = d->heap[p], .start = d->heap_start[p], .reg = &pd->recv_reg};
  v.map = rt_shmem_peer(q->c, rank, &pd->recv_reg);
  d->rsend[p] = v;
  d->rrecv[p] = v;
}

bool rt_direct_usable(const RtReq *q) {
  const RtComm *c = q->c;
  if (!c->direct_ok || q->g->backend || q->n < 2 || q->count == 0) return false;
  if (q->op != RT_OP_ALL_REDUCE && q->op != RT_OP_REDUCE_SCATTER && q->op != RT_OP_ALL_GATHER) return false;
  if (q->count * q->esize < c->direct_min) return false;
  if (strcmp(c->fab[RT_FAB_INTRA].provider, "shm") != 0) return false;
  for (int i = 0; i < q->n; i++) {
    int r = q->g->ranks[i];
    if (c->peer_fab[r] != RT_FAB_INTRA || strcmp(c->peers[r].host, c->peers[c->rank].host) != 0) return false;
  }
  return true;
}

bool rt_p2p_in_order(const RtReq *q) {
  const RtComm *c = q->c;
  if (q->g->backend || (q->op != RT_OP_SEND && q->op != RT_OP_RECV)) return false;
  int r = q->g->ranks[q->peer];
  if (strcmp(c->fab[RT_FAB_INTRA].provider, "shm") != 0 || c->peer_fab[r] != RT_FAB_INTRA ||
      strcmp(c->peers[r].host, c->peers[c->rank].host) != 0)
    return false;
  return q->count > c->fab[RT_FAB_INTRA].inject; /* (up to it the provider's send completes when posted) */
}

bool rt_direct_p2p_usable(const RtReq *q) { return q->c->direct_ok && rt_p2p_in_order(q); }

int rt_direct_begin(RtReq *q) {
  int n = q->n;
  struct RtDirect *d = calloc(1, sizeof *d);
  if (!d || !(d->desc = calloc((size_t)n, sizeof *d->desc)) || !(d->msgs = calloc(2 * (size_t)n, sizeof *d->msgs)) ||
      !(d->rsend = calloc((size_t)n, sizeof *d->rsend)) || !(d->rrecv = calloc((size_t)n, sizeof *d->rrecv)) ||
      !(d->heap = calloc((size_t)n, sizeof *d->heap)) || !(d->heap_start = calloc((size_t)n, sizeof *d->heap_start)))
    rt_fatal(RT_EXIT_COMM, "out of memory");
  q->dx = d;
  if (q->op == RT_OP_SEND || q->op == RT_OP_RECV) { /* pulled: the sender's descriptor, then "done" */
    RtDirectDesc *my = &d->desc[q->me];
    my->send = (uint64_t)(uintptr_t)q->send;
    my->count = q->count;
    my->send_reg = rt_shmem_find(q->c, q->send);
    q->c->p2p_pulled++;
    return 2;
  }
  q->c->direct_count++;
  size_t off, len;
  rt_block(q->count, n, q->me, &off, &len);
  RtDirectDesc *my = &d->desc[q->me];
  if (q->nbufs) {
    if (!(d->laddr = malloc((size_t)q->nbufs * sizeof *d->laddr))) rt_fatal(RT_EXIT_COMM, "out of memory");
    for (int i = 0; i < q->nbufs; i++) d->laddr[i] = (uint64_t)(uintptr_t)q->bufs[i];
    RtView v = {.n = q->nbufs, .addr = d->laddr, .start = q->bufstart};
    d->lsend = v;
    d->lrecv = v;
    my->nbufs = q->nbufs;
    my->bufs = (uint64_t)(uintptr_t)d->laddr;
    my->starts = (uint64_t)(uintptr_t)q->bufstart;
    int first = 0;
    while (first < q->nbufs - 1 && q->bufstart[first + 1] == q->bufstart[first]) first++; /* skip empty members */
    my->send_reg = my->recv_reg = rt_shmem_find(q->c, q->bufs[first]);
  } else {
    /* all-gather: peers read our block from the caller's send buffer (never written here) */
    size_t send_lo = q->op == RT_OP_ALL_GATHER ? off : 0, recv_lo = q->op == RT_OP_REDUCE_SCATTER ? off : 0;
    view_one(&d->lsend, (uint64_t)(uintptr_t)q->send, send_lo, q->count);
    view_one(&d->lrecv, (uint64_t)(uintptr_t)q->recv, recv_lo, q->count);
    my->send = (uint64_t)(uintptr_t)q->send;
    my->send_lo = send_lo;
    my->recv = (uint64_t)(uintptr_t)q->recv;
    my->recv_lo = recv_lo;
    my->send_reg = rt_shmem_find(q->c, q->send);
    my->recv_reg = rt_shmem_find(q->c, q->recv);
  }
  d->push = q->op != RT_OP_REDUCE_SCATTER && q->c->direct_push;
  return q->op == RT_OP_ALL_REDUCE && !d->push ? 3 : 2;
}

void rt_direct_post(RtReq *q, RtSlot *s, void (*post)(RtReq *, RtSlot *, RtMsg *, bool, int, void *, size_t, void *)) {
  struct RtDirect *d = q->dx;
  if (q->op == RT_OP_SEND || q->op == RT_OP_RECV) { /* step 0: the descriptor; step 1: "done" (ring.c tags it) */
    int p = q->peer;
    bool send = q->op == RT_OP_SEND, desc = s->step == 0;
    if (send == desc) /* the sender's descriptor, the receiver's "done" */
      post(q, s, &d->msgs[2 * p + 1], false, p, desc ? &d->desc[q->me] : NULL, desc ? sizeof *d->desc : 0, NULL);
    else
      post(q, s, &d->msgs[2 * p], true, p, desc ? &d->desc[p] : NULL, desc ? sizeof *d->desc : 0, NULL);
    return;
  }
  for (int j = 1; j < q->n; j++) {
    int p = mod(q->me + j, q->n);
    bool desc = s->step == 0;
    post(q, s, &d->msgs[2 * p], true, p, desc ? &d->desc[p] : NULL, desc ? sizeof *d->desc : 0, NULL);
  }
  for (int j = 1; j < q->n; j++) {
    int p = mod(q->me + j, q->n);
    bool desc = s->step == 0;
    post(q, s, &d->msgs[2 * p + 1], false, p, desc ? &d->desc[q->me] : NULL, desc ? sizeof *d->desc : 0, NULL);
  }
}

int rt_direct_waiting(const RtReq *q, int *peers, bool *first, int max) {
  const struct RtDirect *d = q->dx;
  int k = 0;
  for (int p = 0; p < q->n && k < max; p++) {
    const RtMsg *m = &d->msgs[2 * p];
    if (p == q->me || m->req != q || m->done) continue;
    peers[k] = m->peer;
    first[k++] = q->slots && q->slots[m->slot].step == 0; /* step 0 brings each peer's descriptor */
  }
  return k;
}

/* Reduce-scatter into our block: per chunk, each peer's part is read into the slab and
 * folded into the output (the first fold reads our own input, the last one scales). */
static void direct_reduce(RtReq *q) {
  struct RtDirect *d = q->dx;
  RtComm *c = q->c;
  int n = q->n;
  size_t es = q->esize, off, len;
  rt_block(q->count, n, q->me, &off, &len);
  size_t chunk = c->direct_chunk / es;
  RtView stage;
  view_one(&stage, (uint64_t)(uintptr_t)c->dstage, 0, chunk);
  for (size_t o = off; o < off + len; o += chunk) {
    size_t k = off + len - o < chunk ? off + len - o : chunk;
    for (int j = 1; j < n; j++) {
      int p = mod(q->me + j, n);
      /* the peer's part is read where it lies when we map it, else staged through the slab */
      bool mapped = view_mapped(&d->rsend[p], o, k, es);
      if (!mapped) cma_xfer(q, q->g->ranks[p], &stage, 0, &d->rsend[p], o, k, false);
      else c->mapped_bytes += k * es;
      float scale = j == n - 1 && q->redop == RT_AVG ? 1.0f / (float)n : 1.0f;
      const RtView *a = j == 1 ? &d->lsend : &d->lrecv;
      for (size_t at = 0; at < k;) { /* pieces contiguous in our input, our output (and the peer's input) */
        size_t ka, kd, kr = k - at;
        uint64_t pa = view_at(a, o + at, es, &ka), pd = view_at(&d->lrecv, o + at, es, &kd);
        const char *b = (const char *)c->dstage + at * es;
        if (mapped) {
          uint64_t pr = view_at(&d->rsend[p], o + at, es, &kr);
          b = view_map(&d->rsend[p], pr, (kr < k - at ? kr : k - at) * es);
        }
        size_t m = k - at;
        if (ka < m) m = ka;
        if (kd < m) m = kd;
        if (kr < m) m = kr;
        rt_reduce((void *)(uintptr_t)pd, (const void *)(uintptr_t)pa, b, m, q->dt, q->redop, scale);
        at += m;
      }
    }
    /* all-reduce with push: the chunk goes out to the peers while it is still in our cache
     * (every peer's part of it was read above, so no one reads it there any more) */
    if (q->op == RT_OP_ALL_REDUCE && d->push)
      for (int j = 1; j < n; j++) {
        int p = mod(q->me + j, n);
        cma_xfer(q, q->g->ranks[p], &d->lrecv, o, &d->rrecv[p], o, k, true);
      }
  }
}

/* All-gather by push: our block, from the send buffer, written into every peer's output
 * (the done round covers the writes). */
static void direct_push(RtReq *q) {
  struct RtDirect *d = q->dx;
  size_t off, len;
  rt_block(q->count, q->n, q->me, &off, &len);
  if (!len) return;
  for (int j = 1; j < q->n; j++) {
    int p = mod(q->me + j, q->n);
    cma_xfer(q, q->g->ranks[p], &d->lsend, off, &d->rrecv[p], off, len, true);
  }
}

/* All-gather: every peer's block, out of its send buffer (all-gather) or its output
 * (all-reduce, after it reduced it). */
static void direct_gather(RtReq *q, bool from_output) {
  struct RtDirect *d = q->dx;
  for (int j = 1; j < q->n; j++) {
    int p = mod(q->me + j, q->n);
    size_t off, len;
    rt_block(q->count, q->n, p, &off, &len);
    if (len) cma_xfer(q, q->g->ranks[p], &d->lrecv, off, from_output ? &d->rrecv[p] : &d->rsend[p], off, len, false);
  }
}

/* The receiver's pull: the sender's bytes (its descriptor) into our buffer. */
static void p2p_pull(RtReq *q) {
  struct RtDirect *d = q->dx;
  const RtDirectDesc *pd = &d->desc[q->peer];
  int rank = q->g->ranks[q->peer];
  if (pd->count != q->count) {
    char what[96];
    snprintf(what, sizeof what, "sent %llu bytes where %zu were expected", (unsigned long long)pd->count, q->count);
    rt_req_mismatch(q, rank, what);
  }
  RtView lv, rv;
  view_one(&lv, (uint64_t)(uintptr_t)q->recv, 0, q->count);
  view_one(&rv, pd->send, 0, q->count);
  rv.reg = &pd->send_reg;
  rv.map = rt_shmem_peer(q->c, rank, &pd->send_reg);
  cma_xfer(q, rank, &lv, 0, &rv, 0, q->count, false);
}

void rt_direct_finish_step(RtReq *q, int step) {
  if (q->op == RT_OP_SEND || q->op == RT_OP_RECV) {
    if (step == 0 && q->op == RT_OP_RECV) p2p_pull(q);
    return;
  }
  if (step == 0) {
    for (int p = 0; p < q->n; p++)
      if (p != q->me) peer_views(q, p);
    if (q->op == RT_OP_ALL_GATHER) {
      /* peers read our block from the send buffer, so our own copy can come last: the
       * descriptors went out first and the peers started without waiting for it */
      if (q->dx->push) direct_push(q);
      else direct_gather(q, false);
      size_t off, len;
      rt_block(q->count, q->n, q->me, &off, &len);
      if (q->send != q->recv + off * q->esize) memmove(q->recv + off * q->esize, q->send, len * q->esize);
    } else {
      direct_reduce(q); /* (all-reduce with push writes each chunk to the peers as it is reduced) */
    }
  } else if (step == 1 && q->op == RT_OP_ALL_REDUCE && !q->dx->push) {
    direct_gather(q, true);
  }
}

void rt_direct_free(RtReq *q) {
  struct RtDirect *d = q->dx;
  if (!d) return;
  for (int p = 0; p < q->n; p++) {
    free(d->heap[p]);
    free(d->heap_start[p]);
  }
  free(d->heap);
  free(d->heap_start);
  free(d->laddr);
  free(d->rsend);
  free(d->rrecv);
  free(d->msgs);
  free(d->desc);
  free(d);
  q->dx = NULL;
}

/* ---- start-up: can this process read its local peers' memory? -------------------- */

static volatile uint64_t probe_word = 0x5348415244525421ull; /* "SHARDRT!" */

uint64_t rt_direct_probe_addr(void) { return (uint64_t)(uintptr_t)&probe_word; }

void rt_direct_allow_peers(RtComm *c) {
  c->direct_want = rt_env_switch("SHARDRT_DIRECT", true); /* (read strictly: runtime/base.h) */
  /* Under Yama's ptrace_scope 1 (Ubuntu's default) a process may read only its descendants' memory, so
   * sibling ranks' process_vm_readv fails and the probe below would turn the direct paths off (and with them
   * the sends pulled by their receivers): let any process of this user attach, as MPI libraries do for
   * cross-memory attach. (Without Yama: EINVAL, nothing to allow.) */
  if (c->direct_want) (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
}

void rt_direct_init(RtComm *c) {
  bool want = c->direct_want;
  c->direct_min = (size_t)rt_env_u64("SHARDRT_DIRECT_MIN", (size_t)64 << 10, 0, SIZE_MAX);
  c->direct_chunk = (size_t)rt_env_u64("SHARDRT_DIRECT_CHUNK", (size_t)256 << 10, 1, (uint64_t)1 << 40);
  c->direct_chunk = (c->direct_chunk + 63) & ~(size_t)63;
  c->direct_push = rt_env_switch("SHARDRT_DIRECT_PUSH", true);
  /* Every local peer's probe word must read back; every rank must agree. */
  int ok = want;
  for (int r = 0; ok && r < c->world; r++) {
    if (r == c->rank || strcmp(c->peers[r].host, c->peers[c->rank].host) != 0) continue;
    uint64_t got = 0;
    struct iovec li = {&got, sizeof got}, ri = {(void *)(uintptr_t)c->peers[r].probe, sizeof got};
    if (process_vm_readv((pid_t)c->peers[r].pid, &li, 1, &ri, 1, 0) != (ssize_t)sizeof got || got != probe_word) ok = 0;
  }
  int *all = malloc((size_t)c->world * sizeof *all);
  if (!all) rt_fatal(RT_EXIT_COMM, "out of memory");
  rt_boot_allgather(&c->boot, &ok, all, sizeof ok);
  c->direct_ok = true;
  for (int r = 0; r < c->world; r++) c->direct_ok = c->direct_ok && all[r];
  free(all);
  if (c->direct_ok && posix_memalign(&c->dstage, 64, c->direct_chunk) != 0)
    rt_fatal(RT_EXIT_COMM, "out of memory for staging");
}

void rt_direct_close(RtComm *c) {
  free(c->dstage);
  c->dstage = NULL;
}

bool rt_comm_tune(RtComm *c, const char *name, size_t value) {
  if (strcmp(name, "direct_min") == 0) c->direct_min = value;
  else if (strcmp(name, "mbox_max") == 0) c->mbox_max = value < c->mbox_cap ? value : c->mbox_cap;
  else if (strcmp(name, "direct_push") == 0) c->direct_push = value != 0;
  else if (strcmp(name, "mbox_stream") == 0) c->mbox_stream = value != 0;
  else if (strcmp(name, "stream_min") == 0) c->stream_min = value;
  else if (strcmp(name, "stream_max") == 0) c->stream_max = value;
  else if (strcmp(name, "mbox_ag_max") == 0) c->mbox_ag_max = value;
  else if (strcmp(name, "stream_chunk") == 0) c->stream_chunk = value < 64 ? 64 : (value + 63) & ~(size_t)63;
  else if (strcmp(name, "stream_ring") == 0) c->stream_ring = value < c->mbox_cap ? value : c->mbox_cap;
  else if (strcmp(name, "direct_chunk") == 0) {
    size_t b = value < 64 ? 64 : (value + 63) & ~(size_t)63;
    if (b != c->direct_chunk && c->dstage) {
      free(c->dstage);
      if (posix_memalign(&c->dstage, 64, b) != 0) rt_fatal(RT_EXIT_COMM, "out of memory for staging");
    }
    c->direct_chunk = b;
  }
  else return rt_hier_tune(c, name, value);
  return true;
}

uint64_t rt_comm_direct_count(const RtComm *c) { return c->direct_count; }
uint64_t rt_comm_p2p_pulled(const RtComm *c) { return c->p2p_pulled; }
