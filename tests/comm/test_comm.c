/* tests/comm/test_comm.c — collectives against a naive reference, and fault scenarios.
 *
 *   test_comm coll      every collective on sub-groups of a 2x2 mesh (dp 2 x tp 2), a
 *                       3-member group in scrambled order, self and world; sizes 0, 1,
 *                       odd, > one chunk, 64 MiB (a few cases); f32 and bf16; tagged
 *                       send/recv received in another order than sent; all_reduce_v
 *                       over several member layouts (empty members, chunk-crossing ones);
 *                       with SHARDRT_TEST_DIRECT=1 (0) some (no) collective must have run
 *                       by direct reads (runtime/comm/direct.c); SHARDRT_TEST_HIER (went
 *                       node, nodes, node: hier.c), SHARDRT_TEST_RAIL (all-reduced by rails:
 *                       hier.c), SHARDRT_TEST_GATHER (small ones on the
 *                       ring gathered and folded: hier.c) and SHARDRT_TEST_MBOX the same
 *                       for the shared-memory mailboxes (runtime/comm/mbox.c)
 *   test_comm kill      all-reduces forever; rank 1 writes its pid to $SHARDRT_TEST_PIDFILE
 *                       (the driver script kill -9s it), rank 2 to $SHARDRT_TEST_PIDFILE.2 (the
 *                       driver may send it SIGSEGV: fault.sh)
 *   test_comm mismatch  rank 0 calls all_reduce then all_gather, the others the reverse
 *   test_comm count     rank 1 all-reduces one element fewer
 *   test_comm agcount   rank 1 all-gathers two elements fewer
 *   test_comm stall     rank 1 sleeps instead of joining an all-reduce (watchdog: the others
 *                       name rank 1 as the one that has not joined)
 *   test_comm late      rank 1 joins an all-reduce 4 s late (run with SHARDRT_TIMEOUT=2 and
 *                       --enable-recovery): the others time out naming it, and rank 1 must not
 *                       say they died while it waited
 *   test_comm usererr   every rank writes its pid to $SHARDRT_TEST_PIDFILE.<rank>, then rank 0
 *                       exits 1 (as a user error does) while the others wait in an all-reduce
 *   test_comm p2p_order every rank sends each other one a message it will receive only later (a
 *                       pipeline's activation), then exchanges others with it and waits for them (a ring
 *                       hop), then receives the first: over the shm provider this deadlocked (its sends
 *                       complete in order, the first one's receiver busy in the exchange) until the
 *                       receiver pulled them (direct.c); the bytes must arrive intact, at several sizes
 *   test_comm mesh      checks a 2x2 mesh against the launched world (launch-time check)
 *   test_comm tune      rt_comm_autotune: every rank gets the same threshold, within
 *                       [4 KiB, a slot]; collectives on both sides of it still match the
 *                       reference
 *   test_comm tune_nodes  the same on a world over several nodes: the same hierarchical
 *                       thresholds everywhere, collectives right on both sides of them
 *
 * Inputs are multiples of 0.25 in [-2, 2], so sums over 4 members are exact in fp32 and
 * bf16 and the results must equal the reference exactly (tolerance 0); avg is the exact
 * sum times fp32(1/n), rounded once, exactly as the reference computes it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "../check.h" /* CHECK_RANK */

static int failures;
static int me_rank;

static float val(int rank, size_t i, int salt) {
  return (float)((int)((rank * 7919u + i * 31u + (unsigned)salt * 131u) % 17u) - 8) * 0.25f;
}

static void fill(void *buf, RtDType dt, size_t n, int rank, int salt) {
  for (size_t i = 0; i < n; i++) {
    float v = val(rank, i, salt);
    if (dt == RT_F32)
      ((float *)buf)[i] = v;
    else
      ((uint16_t *)buf)[i] = rt_f32_to_bf16(v);
  }
}

static float get(const void *buf, RtDType dt, size_t i) {
  return dt == RT_F32 ? ((const float *)buf)[i] : rt_bf16_to_f32(((const uint16_t *)buf)[i]);
}

/* The naive reference: element i of the reduction over the group's members. */
static float ref_reduce(const RtGroup *g, RtDType dt, RtRedOp op, size_t i, int salt) {
  int n = rt_group_size(g);
  float acc = val(rt_group_member(g, 0), i, salt);
  for (int k = 1; k < n; k++) {
    float v = val(rt_group_member(g, k), i, salt);
    acc = op == RT_MAX ? (v > acc ? v : acc) : acc + v;
  }
  if (op == RT_AVG) acc *= 1.0f / (float)n;
  return dt == RT_F32 ? acc : rt_bf16_to_f32(rt_f32_to_bf16(acc));
}

/* SHARDRT_TEST_MEM: where test buffers live. "shm": rt_comm_mem_alloc (the peers map
 * them); "mixed": shm on even world ranks, malloc on odd ones; else malloc. */
static RtComm *mem_comm; /* non-NULL: this rank allocates through rt_comm_mem_alloc */

static void *xmalloc(size_t n) {
  void *p = mem_comm ? rt_comm_mem_alloc(mem_comm, n ? n : 1) : malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

static void xfree(void *p) {
  if (mem_comm) rt_comm_mem_free(mem_comm, p);
  else free(p);
}

static void check_all_reduce(RtGroup *g, size_t n, RtDType dt, RtRedOp op, bool in_place, int salt) {
  size_t es = rt_dtype_size(dt);
  char *in = xmalloc(n * es), *out = in_place ? in : xmalloc(n * es);
  fill(in, dt, n, me_rank, salt);
  rt_all_reduce(g, in, out, n, dt, op);
  for (size_t i = 0; i < n; i++) {
    float want = ref_reduce(g, dt, op, i, salt), got = get(out, dt, i);
    CHECK_RANK(me_rank, got == want, "all_reduce %s %s n=%zu on %s: [%zu] = %g, want %g", rt_dtype_name(dt),
               rt_redop_name(op), n, rt_group_name(g), i, got, want);
    if (got != want) break;
  }
  if (!in_place) xfree(out);
  xfree(in);
}

static void check_reduce_scatter(RtGroup *g, size_t n, RtDType dt, RtRedOp op, int salt) {
  size_t es = rt_dtype_size(dt), off, len;
  rt_block(n, rt_group_size(g), rt_group_rank(g), &off, &len);
  char *in = xmalloc(n * es), *out = xmalloc(len * es);
  fill(in, dt, n, me_rank, salt);
  rt_reduce_scatter(g, in, out, n, dt, op);
  for (size_t i = 0; i < len; i++) {
    float want = ref_reduce(g, dt, op, off + i, salt), got = get(out, dt, i);
    CHECK_RANK(me_rank, got == want, "reduce_scatter %s %s n=%zu on %s: [%zu] = %g, want %g", rt_dtype_name(dt),
               rt_redop_name(op), n, rt_group_name(g), off + i, got, want);
    if (got != want) break;
  }
  xfree(out);
  xfree(in);
}

static void check_all_gather(RtGroup *g, size_t n, RtDType dt, int salt) {
  size_t es = rt_dtype_size(dt), off, len;
  int gn = rt_group_size(g);
  rt_block(n, gn, rt_group_rank(g), &off, &len);
  char *full = xmalloc(n * es), *mine = xmalloc(len * es);
  /* Member k contributes block k of its own fill. */
  char *tmp = xmalloc(n * es);
  fill(tmp, dt, n, me_rank, salt);
  memcpy(mine, tmp + off * es, len * es);
  rt_all_gather(g, mine, full, n, dt);
  for (int k = 0; k < gn; k++) {
    size_t ko, kl;
    rt_block(n, gn, k, &ko, &kl);
    for (size_t i = ko; i < ko + kl; i++) {
      float want = val(rt_group_member(g, k), i, salt);
      float got = get(full, dt, i);
      CHECK_RANK(me_rank, got == want, "all_gather %s n=%zu on %s: [%zu] = %g, want %g", rt_dtype_name(dt), n,
                 rt_group_name(g), i, got, want);
      if (got != want) break;
    }
  }
  xfree(tmp);
  xfree(mine);
  xfree(full);
}

static void check_broadcast(RtGroup *g, size_t n, RtDType dt, int root, int salt) {
  size_t es = rt_dtype_size(dt);
  char *buf = xmalloc(n * es);
  fill(buf, dt, n, me_rank, salt);
  rt_broadcast(g, buf, n, dt, root);
  for (size_t i = 0; i < n; i++) {
    float want = val(rt_group_member(g, root), i, salt), got = get(buf, dt, i);
    CHECK_RANK(me_rank, got == want, "broadcast %s n=%zu root %d on %s: [%zu] = %g, want %g", rt_dtype_name(dt), n,
               root, rt_group_name(g), i, got, want);
    if (got != want) break;
  }
  xfree(buf);
}

/* Every member sends to the next and receives from the previous, both in flight. */
static void check_sendrecv(RtGroup *g, size_t bytes, int tag) {
  int n = rt_group_size(g), me = rt_group_rank(g);
  if (n < 2) return;
  unsigned char *s = xmalloc(bytes), *r = xmalloc(bytes);
  for (size_t i = 0; i < bytes; i++) s[i] = (unsigned char)(me_rank * 37 + i);
  RtReq *rq = rt_recv_start(g, (me + n - 1) % n, r, bytes, tag);
  RtReq *sq = rt_send_start(g, (me + 1) % n, s, bytes, tag);
  rt_wait(sq);
  rt_wait(rq);
  int from = rt_group_member(g, (me + n - 1) % n);
  for (size_t i = 0; i < bytes; i++) {
    CHECK_RANK(me_rank, r[i] == (unsigned char)(from * 37 + i), "recv %zu bytes from %d on %s: [%zu] wrong", bytes,
               from, rt_group_name(g), i);
    if (r[i] != (unsigned char)(from * 37 + i)) break;
  }
  xfree(s);
  xfree(r);
}

/* all_reduce_v: the members' concatenation, element i filled as val(rank, i), must come
 * back reduced into each member exactly as the naive reference. The layouts: empty, only
 * empty members, one member, many small members crossing chunk boundaries (the tests run
 * with 64 KiB chunks), large members with empty ones between. Two requests are in flight
 * at once (the second on a split that differs between ranks, same total). */
static void check_all_reduce_v(RtGroup *g, RtDType dt, RtRedOp op, int salt) {
  static const size_t l_none[1] = {0}, l_empty[3] = {0, 0, 0}, l_one[1] = {1001};
  static size_t l_small[60], l_big[7] = {0, 40000, 0, 1, 70001, 0, 13};
  for (int i = 0; i < 60; i++) l_small[i] = (size_t)(997 + 31 * (i % 5)) * (i % 7 != 3);
  const size_t *layouts[5] = {l_none, l_empty, l_one, l_small, l_big};
  const int nmem[5] = {0, 3, 1, 60, 7};
  size_t es = rt_dtype_size(dt);
  for (int li = 0; li < 5; li++) {
    int nb = nmem[li];
    size_t total = 0;
    for (int k = 0; k < nb; k++) total += layouts[li][k];
    /* A second request with the same total split differently on each rank. */
    size_t split[3] = {total / 3 + (size_t)me_rank % 2, 0, 0};
    if (split[0] > total) split[0] = total;
    split[2] = total - split[0];
    char *flat = xmalloc(total * es), *flat2 = xmalloc(total * es);
    fill(flat, dt, total, me_rank, salt);
    fill(flat2, dt, total, me_rank, salt + 1);
    void *bufs[60], *bufs2[3];
    size_t at = 0;
    for (int k = 0; k < nb; k++) {
      bufs[k] = layouts[li][k] ? xmalloc(layouts[li][k] * es) : NULL;
      if (layouts[li][k]) memcpy(bufs[k], flat + at * es, layouts[li][k] * es);
      at += layouts[li][k];
    }
    at = 0;
    for (int k = 0; k < 3; k++) {
      bufs2[k] = xmalloc(split[k] * es);
      memcpy(bufs2[k], flat2 + at * es, split[k] * es);
      at += split[k];
    }
    RtReq *q1 = rt_all_reduce_v_start(g, bufs, layouts[li], nb, dt, op);
    RtReq *q2 = rt_all_reduce_v_start(g, bufs2, split, 3, dt, op);
    rt_wait(q2);
    rt_wait(q1);
    for (int pass = 0; pass < 2; pass++) {
      int m = pass ? 3 : nb;
      const size_t *cnt = pass ? split : layouts[li];
      void **b = pass ? bufs2 : bufs;
      size_t i0 = 0;
      for (int k = 0; k < m; k++) {
        for (size_t i = 0; i < cnt[k]; i++) {
          float want = ref_reduce(g, dt, op, i0 + i, salt + pass), got = get(b[k], dt, i);
          CHECK_RANK(me_rank, got == want, "all_reduce_v %s %s layout %d.%d on %s: member %d [%zu] = %g, want %g",
                     rt_dtype_name(dt), rt_redop_name(op), li, pass, rt_group_name(g), k, i, got, want);
          if (got != want) break;
        }
        i0 += cnt[k];
      }
    }
    for (int k = 0; k < nb; k++) xfree(bufs[k]);
    for (int k = 0; k < 3; k++) xfree(bufs2[k]);
    xfree(flat);
    xfree(flat2);
  }
}

/* Tags match by (peer, tag), not posting order: every member sends five messages to the
 * next (tags 10, 11, 12, 20, 20, sizes differ) and receives them from the previous in the
 * order 12, 20, 11, 20, 10 — once with the receives posted first, once with the sends
 * posted first and blocking receives. The two tag-20 messages keep their order. */
static void check_p2p_tags(RtGroup *g, size_t base) {
  int n = rt_group_size(g), me = rt_group_rank(g);
  if (n < 2) return;
  static const int stags[5] = {10, 11, 12, 20, 20};
  static const int rorder[5] = {2, 3, 1, 4, 0}; /* indices into stags: 12, 20(1st), 11, 20(2nd), 10 */
  int next = (me + 1) % n, prev = (me + n - 1) % n, from = rt_group_member(g, prev);
  for (int round = 0; round < 2; round++) {
    unsigned char *s[5], *r[5];
    size_t len[5];
    for (int k = 0; k < 5; k++) {
      len[k] = base + (size_t)k * 13;
      s[k] = xmalloc(len[k]);
      r[k] = xmalloc(len[k]);
      for (size_t i = 0; i < len[k]; i++) s[k][i] = (unsigned char)(me_rank * 41 + k * 7 + i);
    }
    RtReq *sq[5], *rq[5];
    if (round == 0) {
      for (int j = 0; j < 5; j++) rq[j] = rt_recv_start(g, prev, r[rorder[j]], len[rorder[j]], stags[rorder[j]]);
      for (int k = 0; k < 5; k++) sq[k] = rt_send_start(g, next, s[k], len[k], stags[k]);
      for (int j = 4; j >= 0; j--) rt_wait(rq[j]);
    } else {
      for (int k = 0; k < 5; k++) sq[k] = rt_send_start(g, next, s[k], len[k], stags[k]);
      for (int j = 0; j < 5; j++) rt_recv(g, prev, r[rorder[j]], len[rorder[j]], stags[rorder[j]]);
    }
    for (int k = 0; k < 5; k++) rt_wait(sq[k]);
    for (int k = 0; k < 5; k++) {
      for (size_t i = 0; i < len[k]; i++) {
        bool ok = r[k][i] == (unsigned char)(from * 41 + k * 7 + i);
        CHECK_RANK(me_rank, ok, "p2p tags round %d on %s: message %d (tag %d, %zu bytes) from %d: [%zu] wrong", round,
                   rt_group_name(g), k, stags[k], len[k], from, i);
        if (!ok) break;
      }
      xfree(s[k]);
      xfree(r[k]);
    }
  }
}

/* Two collectives on different groups in flight at once, waited in reverse order. */
static void check_overlap(RtGroup *a, RtGroup *b, size_t n) {
  float *x = xmalloc(n * 4), *y = xmalloc(n * 4);
  fill(x, RT_F32, n, me_rank, 7);
  fill(y, RT_F32, n, me_rank, 8);
  RtReq *qa = rt_all_reduce_start(a, x, x, n, RT_F32, RT_SUM);
  RtReq *qb = rt_all_reduce_start(b, y, y, n, RT_F32, RT_MAX);
  while (!rt_test(qb)) {
  }
  rt_wait(qb);
  rt_wait(qa);
  for (size_t i = 0; i < n; i++) {
    CHECK_RANK(me_rank, x[i] == ref_reduce(a, RT_F32, RT_SUM, i, 7), "overlapped all_reduce on %s: [%zu]",
               rt_group_name(a), i);
    CHECK_RANK(me_rank, y[i] == ref_reduce(b, RT_F32, RT_MAX, i, 8), "overlapped all_reduce on %s: [%zu]",
               rt_group_name(b), i);
    if (failures) break;
  }
  xfree(x);
  xfree(y);
}

/* Several all-reduces in flight on one group (small, large, all_reduce_v; every dtype and
 * reduction), waited for in reverse order: on a group over several nodes each is
 * hierarchical, its parts finish in any order and must still pair up across ranks. */
static void check_inflight(RtGroup *g) {
  enum { K = 4 };
  static const size_t n[K] = {1001, 300007, 7, 20011};
  static const RtDType dt[K] = {RT_F32, RT_BF16, RT_BF16, RT_F32};
  static const RtRedOp op[K] = {RT_SUM, RT_AVG, RT_MAX, RT_AVG};
  void *in[K], *out[K];
  RtReq *q[K];
  if (!g) return; /* (not a member) */
  for (int k = 0; k < K; k++) {
    size_t es = dt[k] == RT_F32 ? 4 : 2;
    in[k] = xmalloc(n[k] * es);
    out[k] = xmalloc(n[k] * es);
    fill(in[k], dt[k], n[k], me_rank, 40 + k);
  }
  /* the last as all_reduce_v over three members, one of them empty */
  size_t cnt[3] = {n[3] / 3, 0, n[3] - n[3] / 3};
  void *mem[3] = {out[3], NULL, (float *)out[3] + cnt[0]};
  memcpy(out[3], in[3], n[3] * 4);
  for (int k = 0; k < K - 1; k++) q[k] = rt_all_reduce_start(g, in[k], out[k], n[k], dt[k], op[k]);
  q[K - 1] = rt_all_reduce_v_start(g, mem, cnt, 3, dt[K - 1], op[K - 1]);
  for (int k = K - 1; k >= 0; k--) rt_wait(q[k]);
  for (int k = 0; k < K; k++) {
    for (size_t i = 0; i < n[k]; i++) {
      float want = ref_reduce(g, dt[k], op[k], i, 40 + k);
      CHECK_RANK(me_rank, get(out[k], dt[k], i) == want, "in-flight all_reduce %d on %s: [%zu] = %g, want %g", k,
                 rt_group_name(g), i, get(out[k], dt[k], i), want);
      if (failures) break;
    }
    xfree(in[k]);
    xfree(out[k]);
  }
}

/* The mailbox (mbox.c) folds in the direct reads' order, so the two give the same bits on
 * inputs whose sums round (the threshold between them, measured at start-up, must never
 * change a result): all-reduce, reduce-scatter and all_reduce_v on fp32 and bf16 values
 * that are not exact, once forced through each. (Where one of them cannot run, both
 * calls take the same other path.) Leaves both thresholds at the values given. */
static void check_same_bits(RtComm *c, RtGroup *g, size_t mbox_max, size_t direct_min) {
  if (!g) return;
  static const size_t sizes[] = {1, 1001, 30011};
  int gn = rt_group_size(g), salt = 0;
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
    for (int dt = RT_F32; dt <= RT_BF16; dt++)
      for (int op = 0; op < RT_REDOP_COUNT; op++) {
        size_t n = sizes[si], es = rt_dtype_size((RtDType)dt), off, len;
        rt_block(n, gn, rt_group_rank(g), &off, &len);
        char *in = xmalloc(n * es), *out[2][3];
        ++salt;
        for (int way = 0; way < 2; way++) {
          rt_comm_tune(c, "mbox_max", way == 0 ? (size_t)1 << 30 : 0);
          rt_comm_tune(c, "direct_min", 1);
          for (int k = 0; k < 3; k++) out[way][k] = xmalloc(n * es);
          for (size_t i = 0; i < n; i++) { /* thirds and sevenths: sums round */
            float v = (float)((me_rank * 7919u + i * 31u + (unsigned)salt) % 101u) / 3.0f - 17.0f / 7.0f;
            if (dt == RT_F32) ((float *)in)[i] = v;
            else ((uint16_t *)in)[i] = rt_f32_to_bf16(v);
          }
          rt_all_reduce(g, in, out[way][0], n, (RtDType)dt, (RtRedOp)op);
          rt_reduce_scatter(g, in, out[way][1], n, (RtDType)dt, (RtRedOp)op);
          memcpy(out[way][2], in, n * es);
          void *bufs[2] = {out[way][2], out[way][2] + n / 3 * es};
          size_t counts[2] = {n / 3, n - n / 3};
          rt_all_reduce_v(g, bufs, counts, 2, (RtDType)dt, (RtRedOp)op);
        }
        CHECK_RANK(me_rank, memcmp(out[0][0], out[1][0], n * es) == 0,
                   "all_reduce %s %s n=%zu on %s: mailbox and direct differ", rt_dtype_name((RtDType)dt),
                   rt_redop_name((RtRedOp)op), n, rt_group_name(g));
        CHECK_RANK(me_rank, memcmp(out[0][1], out[1][1], len * es) == 0,
                   "reduce_scatter %s %s n=%zu on %s: mailbox and direct differ", rt_dtype_name((RtDType)dt),
                   rt_redop_name((RtRedOp)op), n, rt_group_name(g));
        CHECK_RANK(me_rank, memcmp(out[0][2], out[1][2], n * es) == 0,
                   "all_reduce_v %s %s n=%zu on %s: mailbox and direct differ", rt_dtype_name((RtDType)dt),
                   rt_redop_name((RtRedOp)op), n, rt_group_name(g));
        for (int way = 0; way < 2; way++)
          for (int k = 0; k < 3; k++) xfree(out[way][k]);
        xfree(in);
      }
  rt_comm_tune(c, "mbox_max", mbox_max);
  rt_comm_tune(c, "direct_min", direct_min);
}

static void run_group(RtGroup *g) {
  if (!g) return;
  static const size_t sizes[] = {0, 1, 7, 1001, 300007};
  int salt = 0;
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    size_t n = sizes[si];
    for (int dt = RT_F32; dt <= RT_BF16; dt++) { /* the dtypes collectives take */
      for (int op = 0; op < RT_REDOP_COUNT; op++) {
        check_all_reduce(g, n, (RtDType)dt, (RtRedOp)op, op == RT_SUM, ++salt);
        check_reduce_scatter(g, n, (RtDType)dt, (RtRedOp)op, ++salt);
      }
      check_all_gather(g, n, (RtDType)dt, ++salt);
      check_broadcast(g, n, (RtDType)dt, rt_group_size(g) - 1, ++salt);
    }
    if (si == 0) /* all_reduce_v runs its own sizes: once per group */
      for (int dt = RT_F32; dt <= RT_BF16; dt++)
        for (int op = 0; op < RT_REDOP_COUNT; op++) check_all_reduce_v(g, (RtDType)dt, (RtRedOp)op, 500 + 2 * op);
    check_sendrecv(g, n * 3, (int)si);
    check_p2p_tags(g, n);
    rt_barrier(g);
  }
}

/* With SHARDRT_TEST_EXPECT="INTRA,INTER", every peer on this rank's node must be reached
 * through a provider whose name starts with INTRA, every other one through INTER. */
static void check_providers(RtComm *c, int world) {
  const char *exp = getenv("SHARDRT_TEST_EXPECT");
  if (!exp || !*exp) return;
  char intra[64] = {0}, inter[64] = {0};
  const char *comma = strchr(exp, ',');
  size_t li = comma ? (size_t)(comma - exp) : strlen(exp);
  memcpy(intra, exp, li < 63 ? li : 63);
  snprintf(inter, sizeof inter, "%s", comma ? comma + 1 : intra);
  for (int r = 0; r < world; r++) {
    if (r == me_rank) continue;
    bool local = strcmp(rt_comm_node(c, r), rt_comm_node(c, me_rank)) == 0;
    const char *want = local ? intra : inter, *got = rt_comm_peer_provider(c, r);
    CHECK_RANK(me_rank, strncmp(got, want, strlen(want)) == 0,
               "rank %d (node %s, this rank on %s) is reached through %s, want %s", r, rt_comm_node(c, r),
               rt_comm_node(c, me_rank), got, want);
  }
}

static int mode_coll(RtComm *c, int world) {
  int r = me_rank;
  check_providers(c, world);
  RtGroup *self = rt_group_new(c, &r, 1, "self");
  run_group(self);
  run_group(rt_group_world(c));
  if (world == 4) {
    MeshMap m;
    rt_mesh_init(&m, 2, 1, 1, 2, 2);
    int tp[4], dp[4];
    rt_mesh_group(&m, r, RT_MESH_TP, tp);
    rt_mesh_group(&m, r, RT_MESH_DP, dp);
    RtGroup *gtp = rt_group_new(c, tp, 2, "tp");
    RtGroup *gdp = rt_group_new(c, dp, 2, "dp");
    static const int three[3] = {2, 0, 1};
    RtGroup *g3 = rt_group_new(c, three, 3, "three");
    run_group(gtp);
    run_group(gdp);
    run_group(g3);
    check_overlap(gtp, gdp, 100003);
    /* the world's node part has the tp group's members (nodes a,a,b,b): they must not mix */
    check_overlap(rt_group_world(c), gtp, 1001);
    check_overlap(rt_group_world(c), gtp, 100003);
    check_inflight(rt_group_world(c));
    check_inflight(g3);
    /* 64 MiB: a few cases only (time). */
    size_t big = (64u << 20) / 4;
    check_all_reduce(rt_group_world(c), big, RT_F32, RT_SUM, true, 99);
    check_reduce_scatter(gtp, big * 2, RT_BF16, RT_AVG, 98);
    check_all_gather(gdp, big, RT_F32, 97);
    rt_group_free(g3);
    rt_group_free(gdp);
    rt_group_free(gtp);
  }
  if (world == 2) { /* 64 MiB at 2 ranks: the other dtype and reductions, out of place */
    size_t big = (64u << 20) / 4;
    check_all_reduce(rt_group_world(c), big * 2 + 1, RT_BF16, RT_AVG, false, 96);
    check_reduce_scatter(rt_group_world(c), big + 3, RT_F32, RT_MAX, 95);
    check_all_gather(rt_group_world(c), big * 2 + 1, RT_BF16, 94);
  }
  /* SHARDRT_TEST_DIRECT=1: some collective must have run by direct reads; 0: none. */
  const char *want_direct = getenv("SHARDRT_TEST_DIRECT");
  if (want_direct && *want_direct) {
    uint64_t nd = rt_comm_direct_count(c);
    CHECK_RANK(me_rank, (nd > 0) == (strcmp(want_direct, "1") == 0),
               "%llu collectives ran by direct reads, SHARDRT_TEST_DIRECT=%s", (unsigned long long)nd, want_direct);
  }
  /* SHARDRT_TEST_HIER=1: some all-reduce must have gone node, nodes, node; 0: none. */
  const char *want_hier = getenv("SHARDRT_TEST_HIER");
  if (want_hier && *want_hier) {
    uint64_t nh = rt_comm_hier_count(c);
    CHECK_RANK(me_rank, (nh > 0) == (strcmp(want_hier, "1") == 0),
               "%llu all-reduces went hierarchical, SHARDRT_TEST_HIER=%s", (unsigned long long)nh, want_hier);
  }
  /* SHARDRT_TEST_RAIL=1: some hierarchical all-reduce ran by rails; 0: none. */
  const char *want_rail = getenv("SHARDRT_TEST_RAIL");
  if (want_rail && *want_rail) {
    uint64_t nr = rt_comm_rail_count(c);
    CHECK_RANK(me_rank, (nr > 0) == (strcmp(want_rail, "1") == 0),
               "%llu all-reduces ran by rails, SHARDRT_TEST_RAIL=%s", (unsigned long long)nr, want_rail);
  }
  /* SHARDRT_TEST_GATHER=1: some small all-reduce on the ring gathered and folded; 0: none. */
  const char *want_gather = getenv("SHARDRT_TEST_GATHER");
  if (want_gather && *want_gather) {
    uint64_t ng = rt_comm_gather_count(c);
    CHECK_RANK(me_rank, (ng > 0) == (strcmp(want_gather, "1") == 0), "%llu gathered and folded, SHARDRT_TEST_GATHER=%s",
               (unsigned long long)ng, want_gather);
  }
  /* SHARDRT_TEST_MBOX=1: some collective must have gone through the mailboxes; 0: none. */
  const char *want_mbox = getenv("SHARDRT_TEST_MBOX");
  if (want_mbox && *want_mbox) {
    uint64_t nm = rt_comm_mbox_count(c);
    CHECK_RANK(me_rank, (nm > 0) == (strcmp(want_mbox, "1") == 0),
               "%llu collectives went through the mailboxes, SHARDRT_TEST_MBOX=%s", (unsigned long long)nm, want_mbox);
  }
  /* SHARDRT_TEST_STREAM=1: some all-gather streamed through the mailboxes; 0: none. */
  const char *want_stream = getenv("SHARDRT_TEST_STREAM");
  if (want_stream && *want_stream) {
    uint64_t ns = rt_comm_stream_count(c);
    CHECK_RANK(me_rank, (ns > 0) == (strcmp(want_stream, "1") == 0),
               "%llu all-gathers streamed, SHARDRT_TEST_STREAM=%s", (unsigned long long)ns, want_stream);
  }
  /* SHARDRT_TEST_MAPPED=1: some direct collective must have gone through a mapping of a
   * peer's rt_comm_mem_alloc memory; 0: none did. */
  const char *want_mapped = getenv("SHARDRT_TEST_MAPPED");
  if (want_mapped && *want_mapped) {
    uint64_t mb = rt_comm_mapped_bytes(c);
    CHECK_RANK(me_rank, (mb > 0) == (strcmp(want_mapped, "1") == 0),
               "%llu bytes went through mappings, SHARDRT_TEST_MAPPED=%s", (unsigned long long)mb, want_mapped);
  }
  /* SHARDRT_TEST_SAME_BITS=1: the mailbox and the direct reads agree bit for bit. */
  const char *same = getenv("SHARDRT_TEST_SAME_BITS");
  if (same && strcmp(same, "1") == 0) {
    check_same_bits(c, rt_group_world(c), (size_t)64 << 10, (size_t)64 << 10);
    if (world == 4) {
      static const int three[3] = {3, 1, 2};
      RtGroup *g3 = rt_group_new(c, three, 3, "three'");
      check_same_bits(c, g3, (size_t)64 << 10, (size_t)64 << 10);
      rt_group_free(g3);
    }
  }
  rt_group_free(self);
  return failures;
}

static int mode_tune(RtComm *c) {
  size_t v = rt_comm_autotune(c, mem_comm != NULL);
  float mine = (float)v, lo = -mine, hi = mine;
  rt_all_reduce(rt_group_world(c), &hi, &hi, 1, RT_F32, RT_MAX);
  rt_all_reduce(rt_group_world(c), &lo, &lo, 1, RT_F32, RT_MAX);
  CHECK_RANK(me_rank, hi == mine && -lo == mine, "autotune gave %zu here, between %g and %g on the ranks", v, -lo, hi);
  CHECK_RANK(me_rank, v >= 4096 && v <= ((size_t)4 << 20), "autotune gave %zu bytes, outside [4 KiB, 4 MiB]", v);
  uint64_t before = rt_comm_mbox_count(c), before_st = rt_comm_stream_count(c);
  for (int k = 0; k < 3; k++) { /* below, at and just above the threshold (in elements) */
    check_all_reduce(rt_group_world(c), k == 0 ? 1001 : v / 4 + (size_t)(k - 1), RT_F32, RT_SUM, true, 40 + k);
    check_all_gather(rt_group_world(c), k == 0 ? 1001 : v / 2 + (size_t)(k - 1), RT_BF16, 50 + k);
  }
  /* the all-gathers of v and v + 2 bytes (above mbox_ag_max) are pushed through the mailboxes where
   * CMA works; without it the one of v bytes takes the single round and the other the ring */
  uint64_t mb = rt_comm_mbox_count(c) - before, st = rt_comm_stream_count(c) - before_st;
  CHECK_RANK(me_rank, (mb == 3 && st == 2) || (mb == 4 && st == 0),
             "%llu of 6 collectives went through the mailboxes and %llu streamed, want 3 and 2 (4 and 0 without CMA)",
             (unsigned long long)mb, (unsigned long long)st);
  return failures;
}

/* rt_comm_autotune on a world over several nodes (run with SHARDRT_TUNE_FORCE=1 where ranks
 * outnumber cores): every rank gets the same thresholds, and the collectives on either side of
 * them still match the reference. */
static int mode_tune_nodes(RtComm *c) {
  static const char *const names[6] = {"hier_ar_max", "hier_rs_max", "hier_ag_max",
                                       "rail_ar_min", "rail_rs_min", "rail_ag_min"};
  size_t before[6], v[6];
  for (int i = 0; i < 6; i++)
    CHECK_RANK(me_rank, rt_comm_tuned(c, names[i], &before[i]), "no setting %s", names[i]);
  rt_comm_autotune(c, false);
  for (int i = 0; i < 6; i++) {
    rt_comm_tuned(c, names[i], &v[i]);
    /* (as two floats: the high and low 32 bits, max and -min equal everywhere) */
    float part[4] = {(float)(v[i] >> 32), (float)(v[i] & 0xffffffffu), -(float)(v[i] >> 32), -(float)(v[i] & 0xffffffffu)};
    float mine[4];
    memcpy(mine, part, sizeof mine);
    rt_all_reduce(rt_group_world(c), part, part, 4, RT_F32, RT_MAX);
    CHECK_RANK(me_rank, part[0] == mine[0] && part[1] == mine[1] && -part[2] == mine[0] && -part[3] == mine[1],
               "%s: %zu here, differs between ranks", names[i], v[i]);
    if (me_rank == 0) printf("tune_nodes: %s %zu (before %zu)\n", names[i], v[i], before[i]);
  }
  static const size_t sizes[] = {7, 1001, 65537, 300007};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    check_all_reduce(rt_group_world(c), sizes[k], RT_F32, RT_AVG, false, 60 + (int)k);
    check_reduce_scatter(rt_group_world(c), sizes[k], RT_BF16, RT_SUM, 70 + (int)k);
    check_all_gather(rt_group_world(c), sizes[k], RT_F32, 80 + (int)k);
  }
  CHECK_RANK(me_rank, rt_comm_hier_count(c) > 0, "no collective went hierarchical");
  return failures;
}

static _Noreturn void mode_kill(RtComm *c) {
  size_t n = 1u << 20;
  float *x = xmalloc(n * 4);
  fill(x, RT_F32, n, me_rank, 1);
  for (long it = 0;; it++) {
    rt_all_reduce(rt_group_world(c), x, x, n, RT_F32, RT_MAX);
    if (it == 20 && (me_rank == 1 || me_rank == 2)) { /* rank 2 after rank 1 (fault.sh waits for the latter) */
      const char *pf = getenv("SHARDRT_TEST_PIDFILE");
      char path[4096];
      snprintf(path, sizeof path, "%s%s", pf ? pf : "", me_rank == 2 ? ".2" : "");
      FILE *f = pf ? fopen(path, "w") : NULL;
      if (f) {
        fprintf(f, "%d\n", (int)getpid());
        fclose(f);
      }
    }
  }
}

/* p2p_order (above): a send received only after an exchange that waits for its own sends. */
static void mode_p2p_order(RtComm *c, int world) {
  RtGroup *w = rt_group_world(c);
  static const size_t sizes[] = {100, 4096, 4097, 8192, 1 << 20};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    char *early = xmalloc(n), *xs = xmalloc(n);
    char **got = xmalloc((size_t)world * sizeof *got), **xr = xmalloc((size_t)world * sizeof *xr);
    RtReq **se = xmalloc((size_t)world * sizeof *se), **ex = xmalloc(2 * (size_t)world * sizeof *ex);
    for (size_t i = 0; i < n; i++) early[i] = (char)(me_rank * 31 + i * 7 + k), xs[i] = (char)(me_rank * 17 + i * 3 + k);
    for (int p = 0; p < world; p++) /* the early sends, to be received last */
      if (p != me_rank) se[p] = rt_send_start(w, p, early, n, 7);
    for (int p = 0; p < world; p++) {
      got[p] = xmalloc(n), xr[p] = xmalloc(n);
      if (p == me_rank) continue;
      ex[2 * p] = rt_recv_start(w, p, xr[p], n, 8);
      ex[2 * p + 1] = rt_send_start(w, p, xs, n, 8);
    }
    for (int p = 0; p < world; p++)
      if (p != me_rank) rt_wait(ex[2 * p]), rt_wait(ex[2 * p + 1]);
    for (int p = 0; p < world; p++)
      if (p != me_rank) rt_wait(rt_recv_start(w, p, got[p], n, 7));
    for (int p = 0; p < world; p++)
      if (p != me_rank) rt_wait(se[p]);
    int bad = 0;
    for (int p = 0; p < world; p++)
      for (size_t i = 0; p != me_rank && i < n; i++)
        bad += got[p][i] != (char)(p * 31 + i * 7 + k) || xr[p][i] != (char)(p * 17 + i * 3 + k);
    CHECK_RANK(me_rank, !bad, "p2p_order %zu bytes: %d bytes wrong", n, bad);
    /* the path taken: SHARDRT_TEST_PULLED=1, the larger ones pulled by their receivers; 0, none */
    const char *want = getenv("SHARDRT_TEST_PULLED");
    uint64_t pulled = rt_comm_p2p_pulled(c);
    if (want && k == sizeof sizes / sizeof sizes[0] - 1)
      CHECK_RANK(me_rank, *want == '1' ? pulled > 0 : pulled == 0, "p2p_order: %llu sends and receives pulled, want %s",
                 (unsigned long long)pulled, *want == '1' ? "some" : "none");
    for (int p = 0; p < world; p++) free(got[p]), free(xr[p]);
    free(got), free(xr), free(se), free(ex), free(early), free(xs);
  }
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "coll";
  RtBoot boot;
  if (!rt_boot_init(&boot, &argc, &argv)) return 1;
  me_rank = boot.rank;
  if (strcmp(mode, "mesh") == 0 || strcmp(mode, "mesh1") == 0) { /* a 4-rank plan, or a 1-rank one */
    MeshMap m;
    if (strcmp(mode, "mesh1") == 0) rt_mesh_init(&m, 1, 1, 1, 1, 1);
    else rt_mesh_init(&m, 2, 1, 1, 2, 2);
    bool ok = rt_boot_check_mesh(&boot, &m);
    rt_boot_free(&boot);
    return ok ? 0 : 1;
  }
  RtComm *c = rt_comm_init(&boot, NULL);
  const char *mem = getenv("SHARDRT_TEST_MEM");
  if (mem && (strcmp(mem, "shm") == 0 || (strcmp(mem, "mixed") == 0 && me_rank % 2 == 0))) mem_comm = c;
  if (me_rank == 0)
    printf("test_comm %s: %d ranks, provider %s, launcher %s\n", mode, boot.world, rt_comm_provider(c),
           rt_launcher_name(boot.launcher));
  RtGroup *w = rt_group_world(c);
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  if (strcmp(mode, "coll") == 0) {
    mode_coll(c, boot.world);
  } else if (strcmp(mode, "p2p_order") == 0) {
    mode_p2p_order(c, boot.world);
  } else if (strcmp(mode, "tune") == 0) {
    mode_tune(c);
  } else if (strcmp(mode, "tune_nodes") == 0) {
    mode_tune_nodes(c);
  } else if (strcmp(mode, "kill") == 0) {
    mode_kill(c);
  } else if (strcmp(mode, "mismatch") == 0) {
    if (me_rank == 0) {
      rt_all_reduce(w, x, x, 8, RT_F32, RT_SUM);
      rt_all_gather(w, x, x, 8, RT_F32);
    } else {
      rt_all_gather(w, x, x, 8, RT_F32);
      rt_all_reduce(w, x, x, 8, RT_F32, RT_SUM);
    }
  } else if (strcmp(mode, "count") == 0) {
    rt_all_reduce(w, x, x, me_rank == 1 ? 7 : 8, RT_F32, RT_SUM);
  } else if (strcmp(mode, "agcount") == 0) {
    float y[8];
    rt_all_gather(w, x, y, me_rank == 1 ? 6 : 8, RT_F32);
  } else if (strcmp(mode, "stall") == 0) {
    if (me_rank == 1) sleep(60);
    rt_all_reduce(w, x, x, 8, RT_F32, RT_SUM);
  } else if (strcmp(mode, "usererr") == 0) {
    const char *pf = getenv("SHARDRT_TEST_PIDFILE");
    char path[512];
    snprintf(path, sizeof path, "%s.%d", pf ? pf : "/tmp/test_comm_pid", me_rank);
    FILE *f = fopen(path, "w");
    if (f) fprintf(f, "%d\n", (int)getpid()), fclose(f);
    rt_barrier(w);
    if (me_rank == 0) exit(1);
    rt_all_reduce(w, x, x, 8, RT_F32, RT_SUM);
  } else if (strcmp(mode, "late") == 0) {
    if (me_rank == 1) sleep(4);
    rt_all_reduce(w, x, x, 8, RT_F32, RT_SUM);
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  int bad = failures;
  rt_comm_free(c);
  rt_boot_free(&boot);
  if (bad) fprintf(stderr, "rank %d: %d failures\n", me_rank, bad);
  else if (me_rank == 0) printf("test_comm %s: ok\n", mode);
  return bad ? 1 : 0;
}
