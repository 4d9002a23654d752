/* runtime/ops/coll.c — collectives on the mesh axes, local shards, and the vocab-parallel ops
 * (see coll.h). The runtime's collectives (comm/comm.h) work on contiguous member blocks; a
 * gather or scatter along an inner tensor axis, or of a blocked (fused) layout, packs or
 * unpacks through the scratch so member c's chunk is contiguous (the packing itself:
 * coll_pack.c).
 *
 * A device program (coll.h RtCollDevice) goes through the same functions: its copies and its
 * packing are the device's (enqueued block copies), its groups may be the device's (NCCL), and
 * a collective the device orders is not waited for on the host but kept until rt_coll_reap. */
#include "coll.h"
#include "coll_count.h"
#include "coll_internal.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "kernels/kernels.h"
#include "mesh.h"
#include "trace.h"
#include "train/ctx.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Time spent in a collective since t0: counted in ctx->comm_s and traced (--trace) as `what`
 * over axis. Returns the seconds. */
static double spent(RtCtx *ctx, const char *what, int axis, double t0) {
  double t1 = now();
  ctx->comm_s += t1 - t0;
  rt_trace_span(ctx, RT_TRACE_COMM, what, axis, -1, -1, t0, t1);
  return t1 - t0;
}

/* A collective that only moves data carries any dtype as 4-byte (or 2-byte) words. */
static RtDType move_dtype(int dtype, size_t *count) {
  size_t es = rt_dtype_size((RtDType)dtype);
  if (es == 2) return RT_BF16;
  *count *= es / 4;
  return RT_F32;
}

/* ---- device programs ---- */

static const RtCollDevice *dev; /* NULL: host memory */

void rt_coll_set_device(const RtCollDevice *d) { dev = d; }
const RtCollDevice *rt_coll_device(void) { return dev; }

/* dst = src: on the host, or enqueued on the device. */
static void move(RtCtx *ctx, void *dst, const void *src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  if (dev)
    dev->copy(ctx, dst, src, (int64_t)bytes);
  else
    memmove(dst, src, bytes);
}

/* Requests the device ordered (coll.h `then`), freed once finished, in start order. */
static struct {
  RtReq **q; /* [n] */
  int n, cap;
} ordered;

void rt_coll_reap(int all) {
  int k = 0;
  for (int i = 0; i < ordered.n; i++) {
    if (all || rt_test(ordered.q[i]))
      rt_wait(ordered.q[i]); /* returns at once: finished */
    else
      ordered.q[k++] = ordered.q[i];
  }
  ordered.n = k;
}

/* Ends a collective whose results the program reads next: a device orders its later work
 * after it (the host goes on), host memory waits here. */
static void keep_ordered(RtReq *q);

static void complete(RtCtx *ctx, RtReq *q) {
  if (!dev || !dev->then(ctx, q)) {
    rt_wait(q);
    return;
  }
  keep_ordered(q);
}

/* q, which the device ordered its later work after, is freed by rt_coll_reap once finished. */
static void keep_ordered(RtReq *q) {
  rt_coll_reap(0);
  if (ordered.n == ordered.cap) {
    int cap = ordered.cap ? 2 * ordered.cap : 64;
    RtReq **p = realloc(ordered.q, (size_t)cap * sizeof *p);
    if (!p) {
      fprintf(stderr, "shardrt: out of memory\n");
      exit(1);
    }
    ordered.q = p;
    ordered.cap = cap;
  }
  ordered.q[ordered.n++] = q;
}

static RtGroup *group_of(RtCtx *ctx, int axis) {
  if (axis > RT_AX_COUNT && axis < RT_AX_GROUP(16)) { /* the group over several axes (an all-reduce's) */
    RtGroup *g = dev && dev->group ? dev->group(ctx, axis) : NULL;
    return g ? g : ctx->groups[axis - RT_AX_COUNT];
  }
  if (axis < 0 || axis >= RT_AX_COUNT) {
    fprintf(stderr, "shardrt: a collective names mesh axis %d (a bug in the generated program)\n", axis);
    abort();
  }
  RtGroup *g = dev && dev->group ? dev->group(ctx, axis) : NULL;
  if (!g) g = ctx->groups[1u << axis];
  if (!g && rt_ctx_degree(ctx, axis) > 1) {
    fprintf(stderr, "shardrt: no %s group although the axis has degree %d (launch under mpirun)\n",
            rt_mesh_axis_name(axis), rt_ctx_degree(ctx, axis));
    exit(1);
  }
  return g;
}

void rt_coll_all_reduce(RtCtx *ctx, int axis, void *y, const void *x, int64_t n, int dtype, int red) {
  RtGroup *g = group_of(ctx, axis);
  if (!g) {
    move(ctx, y, x, (size_t)n * rt_dtype_size((RtDType)dtype));
    return;
  }
  if (dtype != RT_F32 && dtype != RT_BF16) {
    fprintf(stderr, "shardrt: all_reduce of %s is not supported (f32 and bf16 are)\n", rt_dtype_name((RtDType)dtype));
    exit(1);
  }
  rt_coll_count(axis, RT_CK_ALL_REDUCE, n * (int64_t)rt_dtype_size((RtDType)dtype));
  double t0 = now();
  complete(ctx, rt_all_reduce_start(g, x, y, (size_t)n, (RtDType)dtype, (RtRedOp)red));
  spent(ctx, "all_reduce", axis, t0);
}

/* ---- gradient buckets: one collective per bucket, in flight while backward runs ---- */

typedef struct {
  RtReq *req; /* the collective in flight */
  int tag;    /* the generated code's id of the ALL_REDUCE / REDUCE_SCATTER node that started it; a ring
                 shift's: -1 - its id (rt_coll_shift_start) */
  double t0;  /* when it was started (s) */
} Pending;

enum { MODE_ASYNC, MODE_BLOCKING, MODE_MEMBER, MODE_LAZY };

/* The requests in flight, in start order. One table per process: a process runs one
 * generated program, and every request is waited before its entry point returns. */
static struct {
  Pending *p;          /* [n] */
  int n, cap;          /* in flight, capacity */
  int mode;            /* MODE_*, from SHARDRT_DP_COMM; -1 until read */
  int64_t started;     /* asynchronous collectives started */
  int64_t early;       /* of them, finished by rt_coll_progress (before their wait was reached) */
  double inflight_s;   /* sum over them of start -> completion seen (s) */
  double exposed_s;    /* time the caller spent in start / progress / wait (s) */
  double progress_s;   /* of it, in rt_coll_progress (s) */
  double copy_s;       /* of it, copying inputs into outputs before the in-place reduction (s) */
} pend = {.mode = -1};

static void print_stats(void) {
  fprintf(stderr,
          "shardrt: async all-reduces %lld (%lld done before their wait), in flight %.3f s, exposed %.3f s "
          "(progress calls %.3f s, input copies %.3f s)\n",
          (long long)pend.started, (long long)pend.early, pend.inflight_s, pend.exposed_s, pend.progress_s, pend.copy_s);
}

/* SHARDRT_COLL_STATS=1 (coll.h): print runs at exit. */
static void stats_at_exit(void (*print)(void)) {
  if (rt_env_switch("SHARDRT_COLL_STATS", false) && atexit(print) != 0) {
    fprintf(stderr, "shardrt: atexit failed\n");
    exit(1);
  }
}

static int dp_mode(void) {
  if (pend.mode >= 0) return pend.mode;
  const char *s = getenv("SHARDRT_DP_COMM");
  pend.mode = MODE_ASYNC;
  if (s && strcmp(s, "blocking") == 0) pend.mode = MODE_BLOCKING;
  else if (s && strcmp(s, "member") == 0) pend.mode = MODE_MEMBER;
  else if (s && strcmp(s, "lazy") == 0) pend.mode = MODE_LAZY;
  else if (s && *s && strcmp(s, "async") != 0) {
    fprintf(stderr, "shardrt: SHARDRT_DP_COMM=%s: want async, blocking, member or lazy\n", s);
    exit(1);
  }
  stats_at_exit(print_stats);
  return pend.mode;
}

void rt_coll_async_stats(int64_t *started, int64_t *early, double *inflight_s, double *exposed_s) {
  *started = pend.started;
  *early = pend.early;
  *inflight_s = pend.inflight_s;
  *exposed_s = pend.exposed_s;
}

/* Copies the inputs into the outputs; NULL group (one member): that is the whole reduction. */
static RtGroup *bucket_prepare(RtCtx *ctx, int axis, void *const *ys, const void *const *xs, const int64_t *ns,
                               int count, int dtype, size_t *counts) {
  RtGroup *g = group_of(ctx, axis);
  size_t es = rt_dtype_size((RtDType)dtype);
  double t0 = now();
  for (int i = 0; i < count; i++) {
    move(ctx, ys[i], (const void *)xs[i], (size_t)ns[i] * es);
    counts[i] = (size_t)ns[i];
  }
  pend.copy_s += now() - t0;
  if (g) {
    int64_t b = 0;
    for (int i = 0; i < count; i++) b += ns[i] * (int64_t)es;
    rt_coll_count(axis, RT_CK_ALL_REDUCE, b);
  }
  if (g && dtype != RT_F32 && dtype != RT_BF16) {
    fprintf(stderr, "shardrt: all_reduce of %s is not supported (f32 and bf16 are)\n", rt_dtype_name((RtDType)dtype));
    exit(1);
  }
  return g;
}

enum { BUCKET_STACK = 64 }; /* members counted on the stack; larger buckets allocate */

static size_t *counts_for(int count, size_t *stack) {
  if (count <= BUCKET_STACK) return stack;
  size_t *c = malloc((size_t)count * sizeof *c);
  if (!c) {
    fprintf(stderr, "shardrt: out of memory\n");
    exit(1);
  }
  return c;
}

void rt_coll_all_reduce_v(RtCtx *ctx, int axis, void *const *ys, const void *const *xs, const int64_t *ns, int count,
                          int dtype, int red) {
  size_t stack[BUCKET_STACK], *counts = counts_for(count, stack);
  double t0 = now();
  RtGroup *g = bucket_prepare(ctx, axis, ys, xs, ns, count, dtype, counts);
  if (g) {
    complete(ctx, rt_all_reduce_v_start(g, ys, counts, count, (RtDType)dtype, (RtRedOp)red));
    spent(ctx, "all_reduce", axis, t0);
  }
  if (counts != stack) free(counts);
}

/* req (started at t0, tag: as Pending's) joins the requests in flight. */
static void pend_push(RtReq *req, int tag, double t0) {
  if (pend.n == pend.cap) {
    int cap = pend.cap ? 2 * pend.cap : 64;
    Pending *p = realloc(pend.p, (size_t)cap * sizeof *p);
    if (!p) {
      fprintf(stderr, "shardrt: out of memory\n");
      exit(1);
    }
    pend.p = p;
    pend.cap = cap;
  }
  pend.p[pend.n++] = (Pending){req, tag, t0};
}

/* An asynchronous collective `what` on axis, req, started at t0: in flight, and its start counted
 * as exposed time. */
static void pend_started(RtCtx *ctx, RtReq *req, int tag, const char *what, int axis, double t0) {
  pend_push(req, tag, t0);
  pend.started++;
  pend.exposed_s += spent(ctx, what, axis, t0);
}

void rt_coll_all_reduce_start(RtCtx *ctx, int axis, int tag, void *const *ys, const void *const *xs,
                              const int64_t *ns, int count, int dtype, int red) {
  int mode = dp_mode();
  if (mode == MODE_BLOCKING) return rt_coll_all_reduce_v(ctx, axis, ys, xs, ns, count, dtype, red);
  if (mode == MODE_MEMBER) {
    for (int i = 0; i < count; i++) rt_coll_all_reduce(ctx, axis, ys[i], xs[i], ns[i], dtype, red);
    return;
  }
  size_t stack[BUCKET_STACK], *counts = counts_for(count, stack);
  double t0 = now();
  RtGroup *g = bucket_prepare(ctx, axis, ys, xs, ns, count, dtype, counts);
  if (g) {
    pend_started(ctx, rt_all_reduce_v_start(g, ys, counts, count, (RtDType)dtype, (RtRedOp)red), tag,
                 "all_reduce start", axis, t0);
  }
  if (counts != stack) free(counts);
}

enum { FINISH_TAG, FINISH_ALL, FINISH_DONE };

/* Finishes, in start order, the requests with the tag (FINISH_TAG), all of them (FINISH_ALL),
 * or those rt_test finds done (FINISH_DONE: one progress call per request tested, stopping at
 * the first unfinished one — requests finish about in start order, and a poll between kernels
 * must stay cheap with many in flight); compacts the table. */
static void finish_where(RtCtx *ctx, int tag, int which) {
  if (!pend.n) return;
  double t0 = now();
  int k = 0;
  bool stop = false;
  for (int i = 0; i < pend.n; i++) {
    Pending *p = &pend.p[i];
    bool finish = which == FINISH_TAG ? p->tag == tag : which == FINISH_ALL ? true : !stop && rt_test(p->req);
    stop |= which == FINISH_DONE && !finish;
    if (!finish) {
      pend.p[k++] = *p;
      continue;
    }
    if (which == FINISH_DONE)
      rt_wait(p->req); /* returns at once: rt_test saw it finished */
    else
      complete(ctx, p->req);
    if (p->tag < 0) continue; /* a ring shift's (rt_coll_shift_start): not an all-reduce's statistics */
    pend.inflight_s += now() - p->t0;
    pend.early += which == FINISH_DONE;
  }
  pend.n = k;
  double dt = which == FINISH_DONE ? now() - t0 : spent(ctx, "all_reduce wait", -1, t0); /* polls: not traced */
  if (which == FINISH_DONE) ctx->comm_s += dt;
  pend.exposed_s += dt;
  if (which == FINISH_DONE) pend.progress_s += dt;
}

void rt_coll_wait(RtCtx *ctx, int tag) { finish_where(ctx, tag, FINISH_TAG); }
static void dshift_then_all(RtCtx *ctx); /* ring shifts started on a device: ordered before what follows */
void rt_coll_wait_all(RtCtx *ctx) {
  finish_where(ctx, 0, FINISH_ALL);
  dshift_then_all(ctx);
}
void rt_coll_progress(RtCtx *ctx) {
  if (pend.mode != MODE_LAZY) finish_where(ctx, 0, FINISH_DONE);
}

/* The chunks of member c are contiguous in the logical buffer: no packing (runtime/mesh.h's rule,
 * by which the compiler plans the scratch). */
static int contiguous(int64_t outer, int blocks) { return rt_pack_bytes(outer, blocks, 1) == 0; }

/* The planned scratch of a collective that packs: there, or a bug in the generated program. */
static void *scratch(void *ws, const char *what) {
  if (!ws) {
    fprintf(stderr, "shardrt: %s packs its chunks but was given no scratch (a bug in the generated program: "
            "passes/memplan.c plans it)\n", what);
    abort();
  }
  return ws;
}

void rt_coll_all_gather(RtCtx *ctx, int axis, void *y, const void *x, int64_t outer, int64_t nl, int64_t inner,
                        int blocks, int dtype, void *ws) {
  RtGroup *g = group_of(ctx, axis);
  size_t esize = rt_dtype_size((RtDType)dtype), count = (size_t)(outer * nl * inner);
  if (!g) {
    move(ctx, y, x, count * esize);
    return;
  }
  int deg = rt_group_size(g);
  rt_coll_count(axis, RT_CK_ALL_GATHER, (int64_t)(count * (size_t)deg * esize));
  size_t words = count * (size_t)deg;
  RtDType mt = move_dtype(dtype, &words);
  double t0 = now();
  if (contiguous(outer, blocks)) {
    complete(ctx, rt_all_gather_start(g, x, y, words, mt));
  } else { /* in chunks of k rows [k, nl, inner]: gathered into the scratch, unpacked into y's rows */
    ws = scratch(ws, "all_gather");
    size_t row = (size_t)(nl * inner) * esize; /* one member's row */
    int64_t k = rt_pack_rows(outer, blocks, (int64_t)(count * (size_t)deg * esize));
    for (int64_t o = 0; o < outer; o += k) {
      int64_t kk = outer - o < k ? outer - o : k;
      size_t w = (size_t)(kk * nl * inner) * (size_t)deg;
      RtDType wt = move_dtype(dtype, &w);
      complete(ctx, rt_all_gather_start(g, (const char *)x + (size_t)o * row, ws, w, wt));
      char *yo = (char *)y + (size_t)o * row * (size_t)deg;
      rt_coll_permute(ctx, ws, yo, kk, nl, inner, blocks, deg, esize, 0);
    }
  }
  spent(ctx, "all_gather", axis, t0);
}

void rt_coll_reduce_scatter(RtCtx *ctx, int axis, void *y, const void *x, int64_t outer, int64_t nl, int64_t inner,
                            int blocks, int dtype, void *ws) {
  RtGroup *g = group_of(ctx, axis);
  size_t esize = rt_dtype_size((RtDType)dtype), count = (size_t)(outer * nl * inner);
  if (!g) {
    move(ctx, y, x, count * esize);
    return;
  }
  if (dtype != RT_F32 && dtype != RT_BF16) {
    fprintf(stderr, "shardrt: reduce_scatter of %s is not supported (f32 and bf16 are)\n", rt_dtype_name((RtDType)dtype));
    exit(1);
  }
  int deg = rt_group_size(g);
  rt_coll_count(axis, RT_CK_REDUCE_SCATTER, (int64_t)(count * (size_t)deg * esize));
  double t0 = now();
  if (contiguous(outer, blocks)) {
    complete(ctx, rt_reduce_scatter_start(g, x, y, count * (size_t)deg, (RtDType)dtype, RT_SUM));
  } else { /* in chunks of k rows: x's rows packed by member into the scratch, scattered into y's */
    ws = scratch(ws, "reduce_scatter");
    size_t row = (size_t)(nl * inner) * esize; /* one member's row */
    int64_t k = rt_pack_rows(outer, blocks, (int64_t)(count * (size_t)deg * esize));
    for (int64_t o = 0; o < outer; o += k) {
      int64_t kk = outer - o < k ? outer - o : k;
      char *xo = (char *)x + (size_t)o * row * (size_t)deg;
      rt_coll_permute(ctx, ws, xo, kk, nl, inner, blocks, deg, esize, 1);
      complete(ctx, rt_reduce_scatter_start(g, ws, (char *)y + (size_t)o * row, (size_t)(kk * nl * inner) * (size_t)deg,
                                            (RtDType)dtype, RT_SUM));
    }
  }
  spent(ctx, "reduce_scatter", axis, t0);
}

void rt_coll_reduce_scatter_start(RtCtx *ctx, int axis, int tag, void *y, const void *x, int64_t outer, int64_t nl,
                                  int64_t inner, int blocks, int dtype, void *ws) {
  int mode = dp_mode();
  RtGroup *g = group_of(ctx, axis);
  if (dev || !g || !contiguous(outer, blocks) || mode == MODE_BLOCKING || mode == MODE_MEMBER ||
      (dtype != RT_F32 && dtype != RT_BF16))
    return rt_coll_reduce_scatter(ctx, axis, y, x, outer, nl, inner, blocks, dtype, ws);
  size_t count = (size_t)(nl * inner) * (size_t)rt_group_size(g);
  rt_coll_count(axis, RT_CK_REDUCE_SCATTER, (int64_t)(count * rt_dtype_size((RtDType)dtype)));
  double t0 = now();
  pend_started(ctx, rt_reduce_scatter_start(g, x, y, count, (RtDType)dtype, RT_SUM), tag, "reduce_scatter start", axis,
               t0);
}

void rt_coll_all_gather_start(RtCtx *ctx, int axis, int tag, void *y, const void *x, int64_t outer, int64_t nl,
                              int64_t inner, int blocks, int dtype, void *ws) {
  int mode = dp_mode();
  RtGroup *g = group_of(ctx, axis);
  if (dev || !g || !contiguous(outer, blocks) || mode == MODE_BLOCKING || mode == MODE_MEMBER)
    return rt_coll_all_gather(ctx, axis, y, x, outer, nl, inner, blocks, dtype, ws);
  size_t words = (size_t)(nl * inner) * (size_t)rt_group_size(g);
  rt_coll_count(axis, RT_CK_ALL_GATHER, (int64_t)(words * rt_dtype_size((RtDType)dtype)));
  RtDType mt = move_dtype(dtype, &words);
  double t0 = now();
  pend_started(ctx, rt_all_gather_start(g, x, y, words, mt), tag, "all_gather start", axis, t0);
}

void rt_coll_broadcast(RtCtx *ctx, int axis, void *y, const void *x, int64_t n, int dtype, int root) {
  RtGroup *g = group_of(ctx, axis);
  size_t bytes = (size_t)n * rt_dtype_size((RtDType)dtype);
  move(ctx, y, x, bytes);
  if (!g) return;
  rt_coll_count(axis, RT_CK_BROADCAST, (int64_t)bytes);
  size_t words = (size_t)n;
  RtDType mt = move_dtype(dtype, &words);
  double t0 = now();
  complete(ctx, rt_broadcast_start(g, y, words, mt, root));
  spent(ctx, "broadcast", axis, t0);
}

/* The members a ring shift by offset along axis sends to and receives from. */
static void ring_peers(RtCtx *ctx, RtGroup *g, int axis, int64_t offset, int *to, int *from) {
  int deg = rt_group_size(g), me = rt_ctx_coord(ctx, axis);
  *to = (int)(((me + offset) % deg + deg) % deg);
  *from = (int)(((me - offset) % deg + deg) % deg);
}

/* A ring shift as the device's exchange (on a GPU: NCCL, ordered with the compute stream); NULL
 * where the group's memory is the host's (no device, the emulated device). */
static void *dev_shift(RtCtx *ctx, RtGroup *g, int axis, int64_t offset, void *y, const void *x, int64_t bytes) {
  if (!dev || !dev->exchange) return NULL;
  int to, from;
  ring_peers(ctx, g, axis, offset, &to, &from);
  return dev->exchange(ctx, g, 1, &to, &x, &from, &y, &bytes);
}

void rt_coll_shift(RtCtx *ctx, int axis, int64_t offset, void *y, const void *x, int64_t bytes, int tag) {
  RtGroup *g = group_of(ctx, axis);
  if (!g) {
    move(ctx, y, x, (size_t)bytes);
    return;
  }
  rt_coll_count(axis, RT_CK_SEND_RECV, bytes); /* the send */
  rt_coll_count(axis, RT_CK_SEND_RECV, bytes); /* the receive */
  double t0 = now();
  void *h = dev_shift(ctx, g, axis, offset, y, x, bytes);
  if (h) { /* the device's later work waits for it, the host goes on */
    dev->exchange_then(ctx, h);
    spent(ctx, "shift", axis, t0);
    return;
  }
  int to, from;
  ring_peers(ctx, g, axis, offset, &to, &from);
  RtReq *r = rt_recv_start(g, from, y, (size_t)bytes, tag); /* posted first: every member sends before it waits */
  RtReq *q = rt_send_start(g, to, x, (size_t)bytes, tag);
  rt_wait(q);
  rt_wait(r);
  spent(ctx, "shift", axis, t0);
}

/* ---- ring shifts started asynchronously (context parallelism's hops) ---- */

static struct {
  int mode;          /* 0 async, 1 blocking (env SHARDRT_CP_COMM); -1 until read */
  int64_t started;   /* shifts started */
  double exposed_s;  /* time spent in shift / shift_start / shift_wait (s) */
  double steady_s;   /* of it, in training steps after the first (ctx->step > 1: warmed up) */
  int64_t last_step; /* the last such step seen */
  int64_t steps;     /* how many such steps had shifts */
} ring = {.mode = -1};

/* Ring shifts started on a device (dev_shift), by tag, until their rt_coll_shift_wait. */
static struct {
  struct { void *h; int tag; } *p;
  int n, cap;
} dshift;

static void dshift_then_all(RtCtx *ctx) {
  for (int i = 0; i < dshift.n; i++) dev->exchange_then(ctx, dshift.p[i].h);
  dshift.n = 0;
}

static void print_ring_stats(void) {
  fprintf(stderr, "shardrt: ring shifts %lld, exposed %.3f s; steady: %.3f s over %lld steps\n",
          (long long)ring.started, ring.exposed_s, ring.steady_s, (long long)ring.steps);
}

static void ring_exposed(const RtCtx *ctx, double dt) {
  ring.exposed_s += dt;
  if (ctx->step <= 1) return;
  ring.steady_s += dt;
  if (ctx->step != ring.last_step) ring.steps++;
  ring.last_step = ctx->step;
}

static int cp_blocking(void) {
  if (ring.mode >= 0) return ring.mode;
  const char *s = getenv("SHARDRT_CP_COMM");
  ring.mode = 0;
  if (s && strcmp(s, "blocking") == 0) ring.mode = 1;
  else if (s && *s && strcmp(s, "async") != 0) {
    fprintf(stderr, "shardrt: SHARDRT_CP_COMM=%s: want async or blocking\n", s);
    exit(1);
  }
  stats_at_exit(print_ring_stats);
  return ring.mode;
}

void rt_coll_shift_start(RtCtx *ctx, int axis, int64_t offset, int tag, void *y, const void *x, int64_t bytes,
                         int msg_tag) {
  double t0 = now();
  ring.started++;
  RtGroup *g = group_of(ctx, axis);
  void *h = g && !cp_blocking() ? dev_shift(ctx, g, axis, offset, y, x, bytes) : NULL;
  if (h) { /* a GPU: in flight on the comm stream while the compute stream goes on, until the wait */
    rt_coll_count(axis, RT_CK_SEND_RECV, bytes);
    rt_coll_count(axis, RT_CK_SEND_RECV, bytes);
    if (dshift.n == dshift.cap && !(dshift.p = realloc(dshift.p, (size_t)(dshift.cap += 16) * sizeof *dshift.p))) {
      fprintf(stderr, "shardrt: out of memory\n");
      exit(1);
    }
    dshift.p[dshift.n].h = h;
    dshift.p[dshift.n++].tag = tag;
    ring_exposed(ctx, now() - t0);
    return;
  }
  if (!g || dev || cp_blocking()) { /* (a device here: the emulated one, whose memory is the host's) */
    rt_coll_shift(ctx, axis, offset, y, x, bytes, msg_tag);
    ring_exposed(ctx, now() - t0);
    return;
  }
  rt_coll_count(axis, RT_CK_SEND_RECV, bytes);
  rt_coll_count(axis, RT_CK_SEND_RECV, bytes);
  int to, from;
  ring_peers(ctx, g, axis, offset, &to, &from);
  pend_push(rt_recv_start(g, from, y, (size_t)bytes, msg_tag), -1 - tag, t0);
  pend_push(rt_send_start(g, to, x, (size_t)bytes, msg_tag), -1 - tag, t0);
  double dt = now() - t0;
  ctx->comm_s += dt;
  ring_exposed(ctx, dt);
}

void rt_coll_shift_wait(RtCtx *ctx, int tag) {
  double t0 = now();
  for (int i = 0; i < dshift.n; i++) {
    if (dshift.p[i].tag != tag) continue;
    dev->exchange_then(ctx, dshift.p[i].h);
    dshift.p[i] = dshift.p[--dshift.n];
    break;
  }
  rt_coll_wait(ctx, -1 - tag);
  ring_exposed(ctx, now() - t0);
}

/* ---- all-to-all (context parallelism's cp_mode all2all) ---- */

/* the p2p tag of its messages (every member issues all-to-alls in one order); the most dims and members */
enum { A2A_TAG = 0xa2a, A2A_MAX_RANK = 8, A2A_MAX_DEG = 256 };

/* The product of dims [from, to) of d. */
static int64_t dims_prod(const int64_t *d, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++) p *= d[i];
  return p;
}

void rt_coll_all_to_all(RtCtx *ctx, int axis, void *y, const void *x, int rank, const int64_t *xdims, int gather,
                        int blocks, int split, int split_blocks, int dtype, void *ws) {
  RtGroup *g = group_of(ctx, axis);
  size_t es = rt_dtype_size((RtDType)dtype);
  size_t bytes = (size_t)dims_prod(xdims, 0, rank) * es;
  if (!g) {
    move(ctx, y, x, bytes);
    return;
  }
  int deg = rt_group_size(g), me = rt_ctx_coord(ctx, axis);
  rt_coll_count(axis, RT_CK_ALL_TO_ALL, (int64_t)bytes);
  if (xdims[split] % deg != 0) {
    fprintf(stderr, "shardrt: all-to-all over %s: dim %d of size %lld does not split %d ways (a bug in the generated "
            "program)\n", rt_mesh_axis_name(axis), split, (long long)xdims[split], deg);
    abort();
  }
  double t0 = now();
  int64_t ydims[A2A_MAX_RANK];
  if (rank > A2A_MAX_RANK || deg > A2A_MAX_DEG) {
    fprintf(stderr, "shardrt: all-to-all of a rank-%d tensor over %d members (at most %d dims, %d members)\n", rank,
            deg, A2A_MAX_RANK, A2A_MAX_DEG);
    exit(1);
  }
  for (int d = 0; d < rank; d++) ydims[d] = xdims[d];
  ydims[split] /= deg;
  ydims[gather] *= deg;
  int64_t ns = xdims[split] / deg, ng = xdims[gather];
  size_t part = bytes / (size_t)deg;
  ws = scratch(ws, "all_to_all");
  char *sendb = ws, *recvb = (char *)ws + bytes;
  /* member c gets chunk c of the scattered dim (part c of sendb: x-shaped, that dim ns long); part c
   * of recvb (the same shape: y-shaped with the gathered dim ng long) is block c of y's gathered dim */
  int64_t so = dims_prod(xdims, 0, split), si = dims_prod(xdims, split + 1, rank);
  int64_t go = dims_prod(ydims, 0, gather), gi = dims_prod(ydims, gather + 1, rank);
  rt_coll_permute(ctx, sendb, (char *)x, so, ns, si, split_blocks, deg, es, 1);
  int peers[A2A_MAX_DEG], n = 0;
  const void *sp[A2A_MAX_DEG];
  void *rp[A2A_MAX_DEG];
  int64_t nb[A2A_MAX_DEG];
  RtReq *reqs[2 * A2A_MAX_DEG];
  for (int c = 0; c < deg; c++) {
    if (c == me) continue;
    peers[n] = c, sp[n] = sendb + (size_t)c * part, rp[n] = recvb + (size_t)c * part, nb[n++] = (int64_t)part;
  }
  move(ctx, recvb + (size_t)me * part, sendb + (size_t)me * part, part);
  void *h = dev && dev->exchange ? dev->exchange(ctx, g, n, peers, sp, peers, rp, nb) : NULL;
  if (h) {
    dev->exchange_then(ctx, h); /* the device's later work (the unpacking) waits for it */
  } else { /* host memory (the emulated device's too) */
    for (int i = 0; i < n; i++) reqs[i] = rt_recv_start(g, peers[i], rp[i], part, A2A_TAG); /* posted before any send */
    for (int i = 0; i < n; i++) reqs[n + i] = rt_send_start(g, peers[i], sp[i], part, A2A_TAG);
    for (int i = 0; i < 2 * n; i++) rt_wait(reqs[i]);
  }
  rt_coll_permute(ctx, recvb, y, go, ng, gi, blocks, deg, es, 0);
  ctx->comm_s += now() - t0;
}

/* ---- pipeline sends and receives ---- */

static struct {
  RtReq **q;   /* [n] sends in flight */
  void **copy; /* [n] what each sends: host memory, or the device's (dev->alloc) */
  bool *ondev; /* [n] copy[i] is the device's */
  RtCtx *ctx;  /* the program's context (for dev->release) */
  int n, cap;
} sends;

static void reap_sends(int all) {
  int k = 0;
  for (int i = 0; i < sends.n; i++) {
    if (all || rt_test(sends.q[i])) {
      rt_wait(sends.q[i]);
      if (sends.ondev[i]) dev->release(sends.ctx, sends.copy[i]);
      else free(sends.copy[i]);
    } else {
      sends.q[k] = sends.q[i];
      sends.ondev[k] = sends.ondev[i];
      sends.copy[k++] = sends.copy[i];
    }
  }
  sends.n = k;
}

/* The group of a pipeline transfer along axis (the device's, NCCL on a GPU) and the peer's index
 * in it: this rank's coordinate + offset. */
static RtGroup *p2p_group(RtCtx *ctx, int axis, int64_t offset, int *peer) {
  RtGroup *g = group_of(ctx, axis);
  int deg = rt_ctx_degree(ctx, axis);
  *peer = rt_ctx_coord(ctx, axis) + (int)offset;
  if (!g || *peer < 0 || *peer >= deg) {
    fprintf(stderr, "shardrt: a pipeline transfer to coordinate %d along %s, which has %d members (a bug in the "
            "generated program)\n", *peer, rt_mesh_axis_name(axis), deg);
    abort();
  }
  return g;
}

void rt_coll_send(RtCtx *ctx, int axis, int64_t offset, const void *x, int64_t bytes, int tag) {
  int peer;
  RtGroup *g = p2p_group(ctx, axis, offset, &peer);
  rt_coll_count(axis, RT_CK_SEND_RECV, bytes);
  double t0 = now();
  reap_sends(0);
  if (sends.n == sends.cap) {
    int cap = sends.cap ? 2 * sends.cap : 16;
    RtReq **q = realloc(sends.q, (size_t)cap * sizeof *q);
    if (q) sends.q = q;
    void **c = q ? realloc(sends.copy, (size_t)cap * sizeof *c) : NULL;
    if (c) sends.copy = c;
    bool *d = c ? realloc(sends.ondev, (size_t)cap * sizeof *d) : NULL;
    if (!d) {
      fprintf(stderr, "shardrt: out of memory\n");
      exit(1);
    }
    sends.ondev = d;
    sends.cap = cap;
  }
  /* a copy, so that x's bytes may be reused at once: in device memory on a GPU (the device's copy
   * is ordered before the send), else (host memory, the emulated device's too) in the host's */
  void *copy = dev ? dev->alloc(ctx, bytes > 0 ? bytes : 1) : NULL;
  bool ondev = copy != NULL;
  if (ondev) {
    dev->copy(ctx, copy, x, bytes);
  } else {
    copy = malloc(bytes > 0 ? (size_t)bytes : 1);
    if (!copy) {
      fprintf(stderr, "shardrt: out of memory\n");
      exit(1);
    }
    memcpy(copy, x, (size_t)bytes);
  }
  sends.ctx = ctx;
  sends.ondev[sends.n] = ondev;
  sends.copy[sends.n] = copy;
  sends.q[sends.n++] = rt_send_start(g, peer, copy, (size_t)bytes, tag);
  spent(ctx, "send", axis, t0);
}

void rt_coll_recv(RtCtx *ctx, int axis, int64_t offset, void *y, int64_t bytes, int tag) {
  int peer;
  RtGroup *g = p2p_group(ctx, axis, offset, &peer);
  rt_coll_count(axis, RT_CK_SEND_RECV, bytes);
  double t0 = now();
  RtReq *r = rt_recv_start(g, peer, y, (size_t)bytes, tag);
  if (dev && dev->then(ctx, r)) { /* a GPU: its later work waits for the receive, the host goes on */
    keep_ordered(r);
    ctx->comm_s += now() - t0;
    return;
  }
  while (!rt_test(r)) reap_sends(0); /* the sends in flight move on while this one waits */
  rt_wait(r);
  spent(ctx, "recv", axis, t0);
}

void rt_coll_send_wait_all(RtCtx *ctx) {
  double t0 = now();
  reap_sends(1);
  spent(ctx, "send wait", -1, t0);
}
