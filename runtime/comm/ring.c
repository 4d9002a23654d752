/* runtime/comm/ring.c — the algorithms on libfabric, as per-channel step machines.
 *
 * The buffer is cut into n blocks (rt_block), and every block into chunks of
 * `chunk` elements; channel c is chunk c of every block. Channels are independent
 * rings, so up to `window` of them run at once and the transfers of one overlap the
 * reductions of another (the pipeline). Per channel, with right = me+1, left = me-1:
 *
 *   reduce-scatter, step s = 0 .. n-2: send block me-s-1, receive block me-s-2 into a
 *     staging slab and add our own input; after the last step member i holds the
 *     reduction of block i (sends at s > 0 come from the slab reduced at s-1)
 *   all-gather, step t = 0 .. n-2: send block me-t, receive block me-t-1 in place
 *   all-reduce = reduce-scatter then all-gather on the same channel
 *   broadcast: chain from the root, per chunk: receive from left, then send right
 *   barrier: dissemination, step k: empty message to me+2^k, from me-2^k
 *   send / recv: one message
 * A zero-length segment is skipped on both sides (both compute the same lengths).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_internal.h"

static int mod(int a, int n) { return ((a % n) + n) % n; }

/* A pulled send's "done" (direct.c) and a receiver's go-ahead (RtReq.cts): the top bit of a p2p tag's sequence
 * field (p2p sequence numbers are 15 bits: comm.c), so that they meet no descriptor or message of the same pair,
 * tag and number the other way. */
#define RT_P2P_CTRL (1ull << 47)

static uint64_t make_tag(const RtReq *q, uint32_t low16) {
  bool p2p = q->op == RT_OP_SEND || q->op == RT_OP_RECV;
  uint64_t t = (uint64_t)(q->g->id & 0x7fff) << 48 | (uint64_t)q->seq << 32 | (uint64_t)(low16 & 0xffff) << 16;
  if (p2p) t |= 1ull << 63;
  return t | q->sig;
}

/* Segment of block b in channel c: element offset and length. */
static void segment(const RtReq *q, int b, int c, size_t *off, size_t *len) {
  size_t boff, blen;
  rt_block(q->count, q->n, b, &boff, &blen);
  size_t start = (size_t)c * q->chunk;
  *off = boff + start;
  *len = start >= blen ? 0 : (blen - start < q->chunk ? blen - start : q->chunk);
}

/* ---- all_reduce_v: the concatenation of the members, seen through these ---------- */

/* The member holding element off (the last non-empty one starting at or before it). */
static int vmember(const RtReq *q, size_t off) {
  int lo = 0, hi = q->nbufs - 1;
  while (lo < hi) { /* largest i with bufstart[i] <= off */
    int mid = (lo + hi + 1) / 2;
    if (q->bufstart[mid] <= off) lo = mid;
    else hi = mid - 1;
  }
  while (lo < q->nbufs - 1 && q->bufstart[lo + 1] <= off) lo++; /* skip empty members */
  return lo;
}

/* Pointer to elements [off, off+len) of the concatenation when they lie in one member
 * (or len is 0), else NULL. */
static char *vdirect(const RtReq *q, size_t off, size_t len) {
  if (len == 0) return NULL;
  int i = vmember(q, off);
  if (off + len > q->bufstart[i + 1]) return NULL;
  return q->bufs[i] + (off - q->bufstart[i]) * q->esize;
}

/* Walks the pieces of [off, off+len): fn(piece in the member, offset in the range, elements). */
#define VFOR(q, off, len, ptr, at, n, body)                                                     \
  do {                                                                                          \
    size_t at = 0;                                                                              \
    for (int vi_ = vmember(q, off); at < (len); vi_++) {                                        \
      size_t pos_ = (off) + at, end_ = (q)->bufstart[vi_ + 1];                                  \
      if (end_ <= pos_) continue;                                                               \
      size_t n = end_ - pos_ < (len) - at ? end_ - pos_ : (len) - at;                           \
      char *ptr = (q)->bufs[vi_] + (pos_ - (q)->bufstart[vi_]) * (q)->esize;                     \
      body;                                                                                     \
      at += n;                                                                                  \
    }                                                                                           \
  } while (0)

static void vpack(const RtReq *q, size_t off, size_t len, char *dst) {
  VFOR(q, off, len, p, at, n, memcpy(dst + at * q->esize, p, n * q->esize));
}

static void vunpack(const RtReq *q, size_t off, size_t len, const char *src) {
  VFOR(q, off, len, p, at, n, memcpy(p, src + at * q->esize, n * q->esize));
}

/* The pieces of elements [off, off+len) of the concatenation, as at most max iovecs;
 * -1 when there are more. */
static int viov(const RtReq *q, size_t off, size_t len, struct iovec *iov, int max) {
  int k = 0;
  bool over = false;
  VFOR(q, off, len, p, at, n, {
    if (k == max) {
      over = true;
    } else {
      iov[k].iov_base = p;
      iov[k++].iov_len = n * q->esize;
    }
  });
  return over ? -1 : k;
}

static bool is_rs_step(const RtReq *q, int step) {
  return q->op == RT_OP_REDUCE_SCATTER || (q->op == RT_OP_ALL_REDUCE && step < q->n - 1);
}

/* Where reduce-scatter's last step leaves channel c's chunk of our block. */
static char *rs_final(const RtReq *q, int c) {
  size_t off, len;
  segment(q, q->me, c, &off, &len);
  if (q->op == RT_OP_REDUCE_SCATTER) return q->recv + (size_t)c * q->chunk * q->esize;
  return q->recv + off * q->esize;
}

static void post_msgv(RtReq *q, RtSlot *s, RtMsg *m, bool is_recv, int member, void *buf, size_t bytes, void *desc,
                      const struct iovec *iov, int niov) {
  m->req = q;
  m->niov = niov;
  for (int i = 0; i < niov; i++) m->iov[i] = iov[i];
  m->slot = (int)(s - q->slots);
  m->is_recv = is_recv;
  m->peer = q->g->ranks[member];
  m->bytes = bytes;
  m->mr = NULL;
  m->done = false;
  if (q->op == RT_OP_SEND || q->op == RT_OP_RECV) /* (a pulled one's "done", step 1, direct.c, and a go-ahead: their own tag) */
    m->tag = make_tag(q, (uint32_t)q->utag) |
             ((q->direct && s->step == 1) || (q->cts && (q->op == RT_OP_SEND) == is_recv) ? RT_P2P_CTRL : 0);
  else /* a broadcast chunk is sent at step 1 and received at step 0: index by channel only */
    m->tag = make_tag(q, (uint32_t)((s->chan & 0xff) << 8 | (q->op == RT_OP_BROADCAST ? 0 : s->step & 0xff)));
  s->pending++;
  rt_post(q->c, m, buf, desc);
}

static void post_msg(RtReq *q, RtSlot *s, RtMsg *m, bool is_recv, int member, void *buf, size_t bytes,
                     void *desc) {
  post_msgv(q, s, m, is_recv, member, buf, bytes, desc, NULL, 0);
}

/* A message of elements [off, off+len) of the user's data: straight from / into the
 * buffer (base), or for all_reduce_v from / into the members — one piece, scattered over
 * up to the provider's iov limit, else through a slab (packed here for a send; for a
 * receive unpacked in finish_step). */
static void post_user(RtReq *q, RtSlot *s, RtMsg *m, bool is_recv, int member, char *base, size_t off, size_t len) {
  size_t es = q->esize;
  if (!q->nbufs) {
    post_msg(q, s, m, is_recv, member, base + off * es, len * es, NULL);
    return;
  }
  char *p = vdirect(q, off, len);
  if (p) {
    post_msg(q, s, m, is_recv, member, p, len * es, NULL);
    return;
  }
  RtComm *c = q->c;
  int rank = q->g->ranks[member];
  struct iovec iov[RT_IOV_MAX];
  int k = viov(q, off, len, iov, c->fab[c->peer_fab[rank]].iov_limit);
  if (k > 1) {
    post_msgv(q, s, m, is_recv, member, NULL, len * es, NULL, iov, k);
    return;
  }
  int w = is_recv ? 1 : 0;
  if (!s->pack[w]) s->pack[w] = rt_slab_get(c);
  if (is_recv) s->unpack = true;
  else vpack(q, off, len, s->pack[w]);
  post_msg(q, s, m, is_recv, member, s->pack[w], len * es, rt_slab_desc(c, s->pack[w], rank));
}

static void post_step(RtReq *q, RtSlot *s) {
  if (q->direct) {
    rt_direct_post(q, s, post_msg);
    return;
  }
  RtComm *c = q->c;
  int n = q->n, me = q->me, st = s->step, ch = s->chan;
  size_t es = q->esize;
  int right = mod(me + 1, n), left = mod(me - 1, n);
  size_t soff, slen, roff, rlen;
  switch (q->op) {
  case RT_OP_ALL_REDUCE:
  case RT_OP_REDUCE_SCATTER:
  case RT_OP_ALL_GATHER:
    if (is_rs_step(q, st)) {
      segment(q, mod(me - st - 2, n), ch, &roff, &rlen);
      segment(q, mod(me - st - 1, n), ch, &soff, &slen);
      void *rbuf = s->stage[st & 1];
      if (rlen) post_msg(q, s, &s->recv, true, left, rbuf, rlen * es, rt_slab_desc(c, rbuf, q->g->ranks[left]));
      if (slen) {
        if (st == 0)
          post_user(q, s, &s->send, false, right, (char *)q->send, soff, slen);
        else
          post_msg(q, s, &s->send, false, right, s->stage[(st - 1) & 1], slen * es,
                   rt_slab_desc(c, s->stage[(st - 1) & 1], q->g->ranks[right]));
      }
    } else {
      int t = q->op == RT_OP_ALL_GATHER ? st : st - (n - 1);
      segment(q, mod(me - t - 1, n), ch, &roff, &rlen);
      segment(q, mod(me - t, n), ch, &soff, &slen);
      if (rlen) post_user(q, s, &s->recv, true, left, q->recv, roff, rlen);
      /* Our own block goes out from the caller's send buffer, not from the copy in recv:
       * a peer reading (CMA) lines that this rank has just written, or writes next, pulls
       * them across cores; all-gather at 2 ranks ran 2-3x slower that way. */
      if (slen) {
        if (t == 0 && q->op == RT_OP_ALL_GATHER)
          post_msg(q, s, &s->send, false, right, (char *)q->send + (size_t)ch * q->chunk * es, slen * es, NULL);
        else
          post_user(q, s, &s->send, false, right, q->recv, soff, slen);
      }
    }
    break;
  case RT_OP_BROADCAST: {
    int pos = mod(me - q->root, n);
    size_t off = (size_t)ch * q->chunk;
    size_t len = q->count - off < q->chunk ? q->count - off : q->chunk;
    if (st == 0 && pos > 0) post_msg(q, s, &s->recv, true, left, q->recv + off * es, len * es, NULL);
    if (st == 1 && pos < n - 1) post_msg(q, s, &s->send, false, right, q->recv + off * es, len * es, NULL);
    break;
  }
  case RT_OP_BARRIER: {
    int d = 1 << st;
    post_msg(q, s, &s->recv, true, mod(me - d, n), NULL, 0, NULL);
    post_msg(q, s, &s->send, false, mod(me + d, n), NULL, 0, NULL);
    break;
  }
  case RT_OP_SEND:
    if (q->cts && st == 0) post_msg(q, s, &s->recv, true, q->peer, NULL, 0, NULL); /* the receiver's go-ahead */
    else post_msg(q, s, &s->send, false, q->peer, (void *)q->send, q->count, NULL);
    break;
  case RT_OP_RECV:
    post_msg(q, s, &s->recv, true, q->peer, q->recv, q->count, NULL);
    if (q->cts) post_msg(q, s, &s->send, false, q->peer, NULL, 0, NULL); /* (zero bytes: complete when posted) */
    break;
  case RT_OP_COUNT: break;
  }
}

static void finish_step(RtReq *q, RtSlot *s) {
  int st = s->step, n = q->n;
  if (q->direct) {
    rt_direct_finish_step(q, st);
    return;
  }
  size_t roff, rlen;
  if (q->op == RT_OP_ALL_REDUCE && !is_rs_step(q, st)) {
    /* all_reduce_v: a received chunk that spans members comes out of the slab */
    if (!q->nbufs) return;
    segment(q, mod(q->me - (st - (n - 1)) - 1, n), s->chan, &roff, &rlen);
    if (s->unpack) vunpack(q, roff, rlen, s->pack[1]);
    s->unpack = false;
    return;
  }
  if (!(q->op == RT_OP_ALL_REDUCE || q->op == RT_OP_REDUCE_SCATTER) || !is_rs_step(q, st)) return;
  int rblk = mod(q->me - st - 2, n);
  segment(q, rblk, s->chan, &roff, &rlen);
  if (!rlen) return;
  bool final = st == n - 2;
  float scale = final && q->redop == RT_AVG ? 1.0f / (float)n : 1.0f;
  char *stage = s->stage[st & 1];
  if (q->nbufs) { /* in place over the members: final results go straight back */
    size_t es = q->esize;
    VFOR(q, roff, rlen, p, at, k,
         rt_reduce(final ? (void *)p : stage + at * es, stage + at * es, p, k, q->dt, q->redop, scale));
    return;
  }
  void *dst = final ? rs_final(q, s->chan) : stage;
  rt_reduce(dst, stage, q->send + roff * q->esize, rlen, q->dt, q->redop, scale);
}

static void finish_req(RtReq *q) {
  rt_req_finished(q); /* out of the watchdog's sight before its slots go */
  for (int i = 0; i < q->nslots; i++)
    for (int k = 0; k < 2; k++) {
      if (q->slots[i].stage[k]) rt_slab_put(q->c, q->slots[i].stage[k]);
      if (q->slots[i].pack[k]) rt_slab_put(q->c, q->slots[i].pack[k]);
    }
  free(q->slots);
  q->slots = NULL;
  rt_direct_free(q);
  q->done = true;
}

int rt_req_waiting(const RtReq *q, int *peers, bool *first, int max) {
  if (q->direct && q->dx) return rt_direct_waiting(q, peers, first, max);
  int k = 0;
  for (int i = 0; q->slots && i < q->nslots && k < max; i++) {
    const RtSlot *s = &q->slots[i];
    if (s->chan < 0 || s->pending == 0 || s->recv.req != q || s->recv.done) continue;
    peers[k] = s->recv.peer;
    first[k++] = q->recvd == 0; /* every receive of a ring step comes from the same peer */
  }
  return k;
}

/* Runs a slot forward until it waits on messages or its channels are exhausted. */
static void run_slot(RtReq *q, RtSlot *s) {
  for (;;) {
    if (s->pending > 0) return;
    if (s->posted) {
      finish_step(q, s);
      s->posted = false;
      s->step++;
    }
    if (s->step == q->nsteps) {
      if (q->next_chan < q->nchan) {
        s->chan = q->next_chan++;
        s->step = 0;
      } else {
        s->chan = -1;
        if (--q->active == 0) finish_req(q);
        return;
      }
    }
    s->posted = true;
    post_step(q, s);
  }
}

static int ceil_log2(int n) {
  int k = 0;
  while ((1 << k) < n) k++;
  return k;
}

/* Group of one, or nothing to move: finish at once. */
static bool trivial(RtReq *q) {
  size_t bytes = q->count * q->esize;
  if (q->op == RT_OP_SEND || q->op == RT_OP_RECV) return false;
  if (q->n > 1 && (q->count > 0 || q->op == RT_OP_BARRIER)) return false;
  if (bytes > 0) {
    if (q->op == RT_OP_ALL_REDUCE || q->op == RT_OP_REDUCE_SCATTER || q->op == RT_OP_ALL_GATHER)
      if (q->send != q->recv) memmove(q->recv, q->send, bytes);
  }
  return true;
}

void rt_req_begin(RtReq *q) {
  RtComm *c = q->c;
  q->sig = q->sig_as ? q->sig_as : rt_signature(q);
  if (trivial(q)) {
    q->done = true;
    rt_req_finished(q);
    return;
  }
  int n = q->n;
  q->chunk = c->chunk_bytes / q->esize;
  switch (q->op) {
  case RT_OP_ALL_REDUCE:
  case RT_OP_REDUCE_SCATTER:
  case RT_OP_ALL_GATHER: {
    if (rt_direct_usable(q)) { /* (all-gather copies our own block after posting the descriptors) */
      q->direct = true;
      q->nchan = 1;
      q->nsteps = rt_direct_begin(q);
      break;
    }
    if (q->op == RT_OP_ALL_GATHER) {
      size_t off, len;
      rt_block(q->count, n, q->me, &off, &len);
      if (q->send != q->recv + off * q->esize) memmove(q->recv + off * q->esize, q->send, len * q->esize);
    }
    size_t off0, maxlen;
    rt_block(q->count, n, 0, &off0, &maxlen);
    q->nchan = (int)((maxlen + q->chunk - 1) / q->chunk);
    q->nsteps = q->op == RT_OP_ALL_REDUCE ? 2 * (n - 1) : n - 1;
    break;
  }
  case RT_OP_BROADCAST:
    q->nchan = (int)((q->count + q->chunk - 1) / q->chunk);
    q->nsteps = 2;
    break;
  case RT_OP_BARRIER:
    q->nchan = 1;
    q->nsteps = ceil_log2(n);
    break;
  case RT_OP_SEND:
  case RT_OP_RECV:
    q->nchan = 1;
    q->nsteps = 1;
    if (rt_direct_p2p_usable(q)) { /* on this host over shm: pulled by the receiver (direct.c) */
      q->direct = true;
      q->nsteps = rt_direct_begin(q);
    } else if (rt_p2p_in_order(q)) { /* else the bytes only after the receiver's go-ahead */
      q->cts = true;
      q->nsteps = q->op == RT_OP_SEND ? 2 : 1;
    }
    break;
  case RT_OP_COUNT: break;
  }
  if (q->nchan == 0) {
    q->done = true;
    rt_req_finished(q);
    return;
  }
  q->nslots = q->nchan < c->window ? q->nchan : c->window;
  q->slots = calloc((size_t)q->nslots, sizeof *q->slots);
  if (!q->slots) rt_fatal(RT_EXIT_COMM, "out of memory");
  bool reduces = !q->direct && (q->op == RT_OP_ALL_REDUCE || q->op == RT_OP_REDUCE_SCATTER);
  for (int i = 0; i < q->nslots; i++) {
    RtSlot *s = &q->slots[i];
    if (reduces) {
      s->stage[0] = rt_slab_get(c);
      if (n > 2) s->stage[1] = rt_slab_get(c);
    }
    s->chan = q->next_chan++;
    s->step = 0;
  }
  q->active = q->nslots;
  /* Slots may finish the request while we start them: copy the count first. */
  int nslots = q->nslots;
  RtSlot *slots = q->slots;
  for (int i = 0; i < nslots && !q->done; i++) run_slot(q, &slots[i]);
}

void rt_req_complete_msg(RtMsg *m, const RtCqEvent *ev) {
  RtReq *q = m->req;
  if (ev->err) {
    char mine[256];
    rt_describe_req(q, mine, sizeof mine);
    if (m->is_recv && ev->errcode == FI_ETRUNC)
      rt_req_mismatch(q, m->peer, "sent a larger message than this call expects");
    /* A provider error right after a peer died: say so plainly. */
    for (int i = 0; i < 20 && !rt_peer_gone(q->c, m->peer); i++) usleep(50000);
    if (rt_peer_gone(q->c, m->peer)) {
      rt_fabric_forget_peer(q->c, m->peer);
      rt_fatal(RT_EXIT_COMM, "peer lost: rank %d (pid %d on %s) died (killed or crashed) while this rank waits in %s",
               m->peer, q->c->peers[m->peer].pid, q->c->peers[m->peer].host, mine);
    }
    rt_fatal(RT_EXIT_COMM, "%s of %zu bytes %s rank %d failed in %s: %s; the peer may have died", m->is_recv ? "receive" : "send",
             m->bytes, m->is_recv ? "from" : "to", m->peer, mine, fi_strerror(ev->errcode));
  }
  if (m->is_recv) {
    uint16_t got = (uint16_t)(ev->e.tag & 0xffff);
    if (got != (uint16_t)(m->tag & 0xffff)) {
      char theirs[64], what[160];
      rt_describe_sig(got, theirs, sizeof theirs);
      if ((got >> 13) != (m->tag & 0xffff) >> 13)
        snprintf(what, sizeof what, "called %s", theirs);
      else
        snprintf(what, sizeof what, "called %s with a different count, dtype, reduction or root", theirs);
      rt_req_mismatch(q, m->peer, what);
    }
    if ((q->op == RT_OP_RECV) && ((ev->e.tag >> 16) & 0xffff) != (uint64_t)q->utag) {
      char what[96];
      snprintf(what, sizeof what, "sent tag %d (expected tag %d)", (int)((ev->e.tag >> 16) & 0xffff), q->utag);
      rt_req_mismatch(q, m->peer, what);
    }
    if (ev->e.len != m->bytes) {
      char what[96];
      snprintf(what, sizeof what, "sent %zu bytes where %zu were expected", ev->e.len, m->bytes);
      rt_req_mismatch(q, m->peer, what);
    }
  }
  if (m->mr) {
    FI_CHECK(fi_close(&m->mr->fid));
    m->mr = NULL;
  }
  m->done = true;
  if (m->is_recv) q->recvd++;
  RtSlot *s = &q->slots[m->slot];
  s->pending--;
  run_slot(q, s);
}
