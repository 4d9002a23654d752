/* runtime/ops/coll.h — the multi-rank ops generated code calls (ir/ops.def "communication",
 * AXIS_INDEX, SHARD_SLICE, and the vocab-parallel EMBED / EMBED_BWD / CE_* ops).
 *
 * Every op names a mesh axis (RT_AX_*); it runs on the RtCtx's group over that axis
 * (ctx->groups[1 << axis]), members in coordinate order. An all-reduce, reduce-scatter, all-gather
 * or shard slice may name the group over several axes instead (RT_AX_GROUP(mask), runtime/mesh.h:
 * the gradients over dp x cp, ZeRO's shards over dp x cp), members in rank order. Where that group has one member
 * (a single process, or a degree-1 axis) a collective is a copy. Collectives here are
 * blocking (start + wait): an op's output is ready when it returns — except the
 * asynchronous bucket all-reduce (rt_coll_all_reduce_start), which data parallelism uses
 * to overlap gradient reduction with the rest of backward.
 *
 * A tensor axis that is split is described by (outer, nl, inner): the elements before the
 * axis, its local length and the elements after it; `blocks` is ops.def's blocks attribute
 * (the layout is rt_block_index, runtime/mesh.h). `ws` is the op's packing scratch, of
 * rt_pack_bytes / rt_all_to_all_pack_bytes (runtime/mesh.h) bytes: a buffer of the memory plan
 * (passes/memplan.c, the class "communication"); NULL where that is 0.
 */
#ifndef SHARDRT_COLL_H
#define SHARDRT_COLL_H

#include <stddef.h>
#include <stdint.h>

typedef struct RtCtx RtCtx;

/* This rank's coordinate along axis, and the axis's degree; for a group over several axes
 * (RT_AX_GROUP(mask), runtime/mesh.h), its index in the group and the group's size. */
int rt_ctx_coord(const RtCtx *ctx, int axis);
int rt_ctx_degree(const RtCtx *ctx, int axis);

/* y = reduce over the axis of x (red: 0 sum, 1 avg, 2 max, the IR's ReduceOp); n elements of
 * dtype (RT_F32 or RT_BF16); y may equal x. */
void rt_coll_all_reduce(RtCtx *ctx, int axis, void *y, const void *x, int64_t n, int dtype, int red);
/* A bucket (a variadic ALL_REDUCE): ys[i] = reduce over the axis of xs[i] (ns[i] elements each,
 * one dtype), as ONE collective over the members' concatenation. xs[i] is copied into ys[i]
 * first (where they differ) and reduced in place there, so an x may be reused as soon as the
 * call returns. rt_coll_all_reduce_v blocks; rt_coll_all_reduce_start returns with the
 * collective in flight: ys stay untouched (not read, not written) until rt_coll_wait(tag)
 * (every request started with that tag) or rt_coll_wait_all; rt_coll_progress, called
 * between kernels, advances what is in flight (the comm layer progresses only when called).
 * Env SHARDRT_DP_COMM picks how a start runs: "async" (default), "blocking" (one blocking
 * collective per bucket), "member" (one blocking all-reduce per member: the pre-bucket
 * behaviour) or "lazy" (async, but rt_coll_progress does nothing: only waits progress), for
 * measurements; results are identical in every mode. */
void rt_coll_all_reduce_v(RtCtx *ctx, int axis, void *const *ys, const void *const *xs, const int64_t *ns, int count,
                          int dtype, int red);
void rt_coll_all_reduce_start(RtCtx *ctx, int axis, int tag, void *const *ys, const void *const *xs,
                              const int64_t *ns, int count, int dtype, int red);
void rt_coll_wait(RtCtx *ctx, int tag);
void rt_coll_wait_all(RtCtx *ctx);
void rt_coll_progress(RtCtx *ctx);
/* Totals since the start (rank-local): collectives started asynchronously, how many of them
 * rt_coll_progress finished (before their wait was reached: overlapped), the seconds they were in
 * flight (start to completion seen, summed over requests) and the seconds the caller spent in
 * start / progress / wait (the exposed part, also added to ctx->comm_s). Env SHARDRT_COLL_STATS=1
 * prints them at exit. */
void rt_coll_async_stats(int64_t *started, int64_t *early, double *inflight_s, double *exposed_s);

/* A ring shift along axis (send / recv, ops.def): x (bytes) goes to the member at coordinate
 * + offset and y receives what the member at coordinate - offset sent, both modulo the degree,
 * with tag; blocking, deadlock-free (the receive is posted before the send). x and y must not
 * overlap. On a GPU: NCCL's grouped send / recv, the device's later work waiting for it. */
void rt_coll_shift(RtCtx *ctx, int axis, int64_t offset, void *y, const void *x, int64_t bytes, int tag);

/* rt_coll_shift started asynchronously under `tag` (context parallelism's ring hops, issued
 * before the block they overlap): x must stay untouched and y unread until
 * rt_coll_shift_wait(tag) or rt_coll_wait_all (rt_coll_wait's tags are the all-reduces', another
 * space); msg_tag is the shift's message tag. The memory plan keeps x live until the wait
 * (passes/memplan.c). On a GPU it runs on the comm stream while the compute stream goes on, and
 * the wait makes the compute stream wait for it (the host never blocks). The emulated device, a
 * single member, or env SHARDRT_CP_COMM=blocking (for measurements; results are identical)
 * runs rt_coll_shift, done on return. SHARDRT_COLL_STATS=1 prints at exit how many shifts ran
 * and the time spent in them, their starts and their waits (the ring's exposed part; in total and
 * in the training steps after the first). */
void rt_coll_shift_start(RtCtx *ctx, int axis, int64_t offset, int tag, void *y, const void *x, int64_t bytes,
                         int msg_tag);
void rt_coll_shift_wait(RtCtx *ctx, int tag);

/* Pipeline transfers (passes/pipe.c, the IR's send / recv with their offsets): a send goes to
 * the member at coordinate + offset along axis (not modulo: that member exists), asynchronously
 * from a copy (x may be overwritten at once); a receive blocks until what the member at
 * coordinate + offset sent with tag arrives in y (recv offset -1: from the stage before).
 * Sends in flight are finished as they complete, and all by rt_coll_send_wait_all (a step's end). */
void rt_coll_send(RtCtx *ctx, int axis, int64_t offset, const void *x, int64_t bytes, int tag);
void rt_coll_recv(RtCtx *ctx, int axis, int64_t offset, void *y, int64_t bytes, int tag);
void rt_coll_send_wait_all(RtCtx *ctx);

/* x [outer, nl, inner] -> y [outer, nl * degree, inner]: member c's x lands at logical indices
 * rt_block_index(nl, blocks, degree, c, l). ws: rt_pack_bytes(outer, blocks, x bytes * degree). */
void rt_coll_all_gather(RtCtx *ctx, int axis, void *y, const void *x, int64_t outer, int64_t nl, int64_t inner,
                        int blocks, int dtype, void *ws);
/* x [outer, nl * degree, inner] summed over the group -> y [outer, nl, inner], this rank's chunk
 * (rt_block_index). ws: rt_pack_bytes(outer, blocks, x bytes). */
void rt_coll_reduce_scatter(RtCtx *ctx, int axis, void *y, const void *x, int64_t outer, int64_t nl, int64_t inner,
                            int blocks, int dtype, void *ws);
/* rt_coll_reduce_scatter started asynchronously under `tag` (ZeRO-2's data-parallel gradient
 * shards): x must stay untouched and y unread until rt_coll_wait(tag) (the memory plan keeps x
 * live until the wait: passes/memplan.c). Host memory with contiguous chunks (outer 1, one block)
 * and SHARDRT_DP_COMM async or lazy; otherwise (a device program, packing, blocking modes) it is
 * rt_coll_reduce_scatter, done on return. */
void rt_coll_reduce_scatter_start(RtCtx *ctx, int axis, int tag, void *y, const void *x, int64_t outer, int64_t nl,
                                  int64_t inner, int blocks, int dtype, void *ws);
/* rt_coll_all_gather started asynchronously under `tag` (ZeRO's parameter gathers over dp): x
 * must stay untouched and y unread until rt_coll_wait(tag) (the memory plan keeps x live until the
 * wait). Host memory with contiguous chunks (outer 1, one block) and SHARDRT_DP_COMM async or lazy;
 * otherwise (a device program, packing, blocking modes) it is rt_coll_all_gather, done on return. */
void rt_coll_all_gather_start(RtCtx *ctx, int axis, int tag, void *y, const void *x, int64_t outer, int64_t nl,
                              int64_t inner, int blocks, int dtype, void *ws);
/* All-to-all over axis (ops.def ALL_TO_ALL): x has `rank` dims xdims; dim `gather` is gathered
 * (y's is degree times longer: member c's block lands at rt_block_index(xdims[gather], blocks,
 * degree, c, l)) and dim `split` scattered (member c receives x's chunk c of it, rt_block_index
 * with split_blocks). Blocking (a device's later work waits for it). ws: rt_all_to_all_pack_bytes(x bytes). */
void rt_coll_all_to_all(RtCtx *ctx, int axis, void *y, const void *x, int rank, const int64_t *xdims, int gather,
                        int blocks, int split, int split_blocks, int dtype, void *ws);
/* y = x of the member with coordinate root. */
void rt_coll_broadcast(RtCtx *ctx, int axis, void *y, const void *x, int64_t n, int dtype, int root);
/* y [outer, nl, inner] = this rank's chunk of x [outer, nl * degree, inner] (no communication). */
void rt_coll_shard_slice(RtCtx *ctx, int axis, void *y, const void *x, int64_t outer, int64_t nl, int64_t inner,
                         int blocks, int esize);

/* ---- device programs (--target cuda) ----
 * Their tensors are device addresses: the device's runtime (runtime/cuda/coll_dev.c) registers
 * how that memory moves and how a collective is ordered with its compute stream, and every op
 * above then works on device memory: copies and the packing of non-contiguous chunks are
 * enqueued on the device (never staged through the host), collectives run on the groups the
 * device gives (NCCL on a GPU) or on ctx->groups (the emulated device, whose memory is host
 * memory). A collective the device orders (`then` returns true) does not block the host: the
 * device's later work waits for it, and its request is freed by rt_coll_reap once finished.
 * NULL (the default): host memory, every op as described above. */
typedef struct RtReq RtReq;
typedef struct RtGroup RtGroup;
typedef struct {
  /* dst = src, bytes long, enqueued in program order */
  void (*copy)(RtCtx *ctx, void *dst, const void *src, int64_t bytes);
  /* for o < outer: len * inner elements of es bytes from src + (o * src_dim + src_at) * inner * es to
   * dst + (o * dst_dim + dst_at) * inner * es (cuda_ops.h rt_cu_copy_block), enqueued */
  void (*copy_block)(RtCtx *ctx, void *dst, int64_t dst_dim, int64_t dst_at, const void *src, int64_t src_dim,
                     int64_t src_at, int64_t outer, int64_t len, int64_t inner, int es);
  /* The group for the program's collectives over axis (NULL: ctx->groups[1 << axis]). */
  RtGroup *(*group)(RtCtx *ctx, int axis);
  /* Makes the device's later work wait for q (just started) without blocking the host; false when
   * it cannot (a host-memory group: the caller waits on the host). */
  int (*then)(RtCtx *ctx, RtReq *q);
  /* Device memory for an asynchronous send's copy of what it sends (released once the send
   * finished); NULL where device memory is host memory (the emulated device: a host copy). */
  void *(*alloc)(RtCtx *ctx, int64_t bytes);
  void (*release)(RtCtx *ctx, void *p);
  /* A point-to-point exchange over g on device memory (a ring hop, an all-to-all): for i < n,
   * send[i] goes to member to[i] and recv[i] comes from member from[i] (bytes[i] each), all at once
   * (deadlock-free), after the device's work so far, without blocking the host; returns a handle
   * that exchange_then orders the device's later work after (and frees). NULL (or no hook): g's
   * memory is the host's (the emulated device), the caller exchanges on the host. */
  void *(*exchange)(RtCtx *ctx, RtGroup *g, int n, const int *to, const void *const *send, const int *from,
                    void *const *recv, const int64_t *bytes);
  void (*exchange_then)(RtCtx *ctx, void *h);
} RtCollDevice;
/* One per process (a process runs one program): set when the device opens, NULL when it closes. */
void rt_coll_set_device(const RtCollDevice *dev);
/* Frees the requests the device ordered: those finished, or (all != 0, after the device was
 * synchronised: they are all finished then) every one. */
void rt_coll_reap(int all);

/* Vocab-parallel embedding (axis < 0: not sharded): the table holds rows [c V, c V + V) of a
 * table of V * degree rows; other ids give zero rows / are skipped. ids must lie in
 * [0, V * degree) (else a user error naming the position). ws: n int32s. */
void rt_embed_shard_f32(RtCtx *ctx, int axis, float *y, const float *table, const int32_t *idx, int64_t n, int64_t d,
                        int64_t V, void *ws);
void rt_embed_bwd_shard_f32(RtCtx *ctx, int axis, float *dtable, const int32_t *idx, const float *dy, int64_t n,
                            int64_t d, int64_t V, void *ws);
size_t rt_embed_shard_ws_bytes(int64_t n);

/* Cross-entropy in parts (ops.def CE_*): logits [rows, V] local; len the logical valid vocabulary
 * (0: all); axis the vocab split (< 0: none). */
void rt_ce_max_f32(RtCtx *ctx, int axis, float *m, const float *logits, int64_t rows, int64_t V, int64_t len);
void rt_ce_sums_f32(RtCtx *ctx, int axis, float *st, const float *logits, const int32_t *targets, const float *m,
                    int64_t rows, int64_t V, int64_t len);
void rt_ce_loss_f32(float *out, const float *st, const float *m, const int32_t *targets, int64_t rows, int64_t len);
void rt_ce_grad_f32(RtCtx *ctx, int axis, float *dlogits, const float *logits, const int32_t *targets, const float *m,
                    const float *st, const float *scale, int64_t rows, int64_t V, int64_t len);

#endif
