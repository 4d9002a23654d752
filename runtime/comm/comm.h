/* runtime/comm/comm.h — one communication interface for every backend.
 *
 *   RtBoot  (bootstrap.h)  who am I: rank, world, local rank, from mpirun / srun / nothing
 *   RtComm                 this process's endpoint, the world's addresses, a watchdog
 *   RtGroup                an ordered list of world ranks; every collective names one
 *   RtReq                  an operation in flight: *_start posts it, rt_wait / rt_test
 *                          progress every operation of the comm and finish it
 *
 * Host memory goes through libfabric (ring algorithms, see ring.c); all-reduce,
 * reduce-scatter, all-gather and broadcast up to mbox_max bytes among ranks of one node (shm) take a
 * single round through shared-memory mailboxes instead (mbox.c; larger all-gathers there
 * stream through the mailboxes), and those of >= 64 KiB
 * (direct_min) among ranks of one host (shm) read and write
 * the peers' buffers directly instead (cross-memory attach, see direct.c, or plain loads and
 * stores where the peer's buffer came from rt_comm_mem_alloc, see shmem.c); a group over
 * several nodes with more members than nodes runs all-reduce, reduce-scatter and all-gather
 * node, nodes, node (inside each node as above, between nodes among one member per node or per
 * rail, see hier.c); a group on which
 * rt_group_use_nccl() (runtime/cuda/nccl.h) was called works on GPU memory through NCCL,
 * with the same calls.
 *
 * Semantics shared by every backend:
 *   - counts are in elements of the dtype; any count, including 0;
 *   - rt_block(count, n, i) is group member i's block of a count-element buffer: the
 *     first count % n blocks have one extra element. reduce_scatter leaves block i of
 *     the reduction in member i's recv; all_gather concatenates every member's block i
 *     (send holds this member's block) into recv, which holds count elements;
 *   - bf16 is reduced in fp32 and rounded to bf16 once per hop (as NCCL does);
 *   - avg = sum / group size; max is elementwise;
 *   - send and recv may alias for all_reduce (in place); all_gather may pass
 *     send == recv + block offset;
 *   - every member of a group must issue the same collectives on it in the same order
 *     (op, count, dtype, reduction, root); a mismatch is reported as an error naming
 *     both sides, never a silent wrong answer;
 *   - an operation not finished within the timeout (RtCommOptions.timeout_s, env
 *     SHARDRT_TIMEOUT, default 60 s) or whose peer died ends the process with a message
 *     naming rank, group, op, size and sequence number (exit status RT_EXIT_COMM).
 */
#ifndef SHARDRT_COMM_H
#define SHARDRT_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bootstrap.h"

#define RT_EXIT_COMM 3 /* exit status of a rank ended by a communication fault */

/* Asked by the watchdog, every tick, about each request this rank waits in (under the comm's lock:
 * it must neither communicate nor block): true ends the process now (status RT_EXIT_COMM) with
 * the message why, the request and what it waits for. t_start: when the request began. The
 * trainer's graceful stop sets it (runtime/train/stop.c: a stop signal, then a collective that does
 * not end); NULL: never. */
extern bool (*rt_comm_end_wait)(double t_start, double now, char *why, size_t n);

#include "../dtype.h" /* RtDType: collectives take RT_F32 and RT_BF16 */
typedef enum { RT_SUM, RT_AVG, RT_MAX, RT_REDOP_COUNT } RtRedOp;
typedef enum {
  RT_OP_ALL_REDUCE,
  RT_OP_REDUCE_SCATTER,
  RT_OP_ALL_GATHER,
  RT_OP_BROADCAST,
  RT_OP_BARRIER,
  RT_OP_SEND,
  RT_OP_RECV,
  RT_OP_COUNT
} RtOpKind;

typedef struct RtComm RtComm;
typedef struct RtGroup RtGroup;
typedef struct RtReq RtReq;

/* Providers are chosen per peer, by the node it runs on (env SHARDRT_NODE, else the host
 * name): peers on this node through the intra-node provider (default shm), peers on
 * other nodes through the inter-node one (default the first of efa, verbs, tcp that
 * offers tagged RDM endpoints; every rank must find the same). `provider` forces one
 * provider for every peer. */
typedef struct {
  const char *provider; /* libfabric provider for every peer ("shm", "tcp", "tcp;ofi_rxm",
                           "verbs", "efa"); NULL: env SHARDRT_FABRIC_PROVIDER, else per node */
  double timeout_s;     /* watchdog; 0: env SHARDRT_TIMEOUT (seconds), else 60 */
  size_t chunk_bytes;   /* ring pipeline chunk; 0: env SHARDRT_CHUNK_BYTES, else 1 MiB */
  int window;           /* chunks in flight per operation; 0: env SHARDRT_WINDOW, else 4 */
  const char *provider_intra; /* peers on this node; NULL: env SHARDRT_FABRIC_INTRA, else shm */
  const char *provider_inter; /* peers on other nodes; NULL: env SHARDRT_FABRIC_INTER, else auto */
} RtCommOptions;

const char *rt_redop_name(RtRedOp op);
const char *rt_op_name(RtOpKind op);

/* Element offset and length of member i's block of a count-element buffer split n ways. */
void rt_block(size_t count, int n, int i, size_t *off, size_t *len);

/* Tuning of the direct-read algorithms (direct.c), for benchmarks; every member must set
 * the same values, between collectives. Names (defaults from the environment):
 *   direct_min   bytes: collectives at least this large whose members all run on this
 *                host (shm) read/write the peers' buffers directly instead of running
 *                the ring (SHARDRT_DIRECT_MIN, 64 KiB; SIZE_MAX: never)
 *   direct_push  1: all-gather phases write into the peers, 0: read from them
 *                (SHARDRT_DIRECT_PUSH, 1)
 *   direct_chunk bytes of the reduction staging slab (SHARDRT_DIRECT_CHUNK, 256 KiB)
 *   mbox_max     bytes: all-reduce, reduce-scatter and all-gather up to this size whose
 *                members all run on this node take one round through the members'
 *                mailboxes in shared memory (mbox.c; SHARDRT_MBOX_MAX, 64 KiB; capped
 *                at a mailbox slot, SHARDRT_MBOX_BYTES, 4 MiB; SHARDRT_MBOX=0: never).
 *                Same bits as the direct reads, so moving it never changes a result.
 *   hier         1: all-reduce, all_reduce_v, reduce-scatter and all-gather of a group over
 *                several nodes with more members than nodes go node, nodes, node (hier.c:
 *                inside each node through shared memory, between nodes among one member per
 *                node or per rail, inside the node again); 0: the ring over every member
 *                (SHARDRT_HIER, 1)
 *   hier_ar_max, hier_rs_max, hier_ag_max
 *                bytes: all-reduces (and all_reduce_v), reduce-scatters, all-gathers up to
 *                this size go hierarchically, larger ones take the ring over every member
 *                (SHARDRT_HIER_AR_MAX, .._RS_MAX, .._AG_MAX; defaults: always, 1 MiB, 4 MiB;
 *                measured by rt_comm_autotune on a world over several nodes)
 *   rail_ar_min, rail_rs_min, rail_ag_min (rail_min: all three)
 *                bytes: hierarchical all-reduces, reduce-scatters, all-gathers from this size,
 *                where every node has the same number of members, run by rails (all-reduce: node
 *                reduce-scatter, all-reduce of block J among the members with index J on every
 *                node, node all-gather; reduce-scatter: node, then rail reduce-scatter; all-gather:
 *                rail, then node all-gather) rather than by one leader per node
 *                (SHARDRT_RAIL_MIN, SHARDRT_RAIL_AR_MIN, ..; 64 KiB, all-gather 1 MiB; measured by
 *                rt_comm_autotune)
 *   gather_max   bytes: all-reduces and reduce-scatters up to this size that would take the
 *                ring all-gather every member's input and fold it (n-1 message steps
 *                instead of 2(n-1); SHARDRT_GATHER_MAX, 16384; 0: never)
 *   mbox_stream  1: all-gathers above mbox_max whose members all run on this node stream
 *                through the mailboxes in chunks (each member copies its block into a
 *                ring in its mailbox, the others copy it out as it arrives; a block in
 *                rt_comm_mem_alloc memory is read where it lies instead) rather than taking
 *                the direct reads (SHARDRT_MBOX_STREAM, 1)
 *   mbox_ag_max  bytes: all-gathers above this (and below mbox_max) are streamed (pushed) too
 *                rather than take the single round, where CMA works (SHARDRT_MBOX_AG_MAX, 32 KiB)
 *   stream_min   bytes: all-gathers above mbox_max but below this take the direct reads
 *                (SHARDRT_STREAM_MIN, 8 MiB = stream_max: no chunks by default)
 *   stream_max   bytes: all-gathers from this size up are pushed, not chunked (SHARDRT_STREAM_MAX, 8 MiB)
 *   stream_chunk bytes of one streamed chunk (SHARDRT_STREAM_CHUNK, 128 KiB)
 *   stream_ring  bytes of the ring of chunks (SHARDRT_STREAM_RING, a slot: 4 MiB)
 * Returns false for an unknown name. */
bool rt_comm_tune(RtComm *c, const char *name, size_t value);
/* The value of a setting rt_comm_tune takes (as it stands now); false for an unknown name. */
bool rt_comm_tuned(const RtComm *c, const char *name, size_t *value);
/* Measures on this machine where the mailbox stops beating the direct reads for an
 * all-reduce of the world (buffers from rt_comm_mem_alloc when `mapped`, else malloc;
 * every rank decides on the slowest rank's times) and sets mbox_max there; a collective
 * over the world, a few milliseconds. Returns the value set (unchanged when the world
 * does not share one node or SHARDRT_MBOX_MAX is set). On a world over several nodes it
 * measures instead where the hierarchical collectives stop beating the ring over every
 * member (hier_ar_max, hier_rs_max, hier_ag_max) and where rails beat the leaders (rail_*_min),
 * unless any SHARDRT_HIER* is set or the node's ranks outnumber its cores. */
size_t rt_comm_autotune(RtComm *c, bool mapped);
/* How many collectives went through the mailboxes (for tests and reports). */
uint64_t rt_comm_mbox_count(const RtComm *c);
/* How many all-gathers streamed through the mailboxes (for tests and reports). */
uint64_t rt_comm_stream_count(const RtComm *c);
/* How many collectives this comm has run by direct reads (for tests and reports). */
uint64_t rt_comm_direct_count(const RtComm *c);
/* Sends and receives this rank pulled from (or let be pulled by) a peer of its host (direct.c). */
uint64_t rt_comm_p2p_pulled(const RtComm *c);
/* How many collectives went node, nodes, node (the hierarchical path; for tests and reports). */
uint64_t rt_comm_hier_count(const RtComm *c);
/* How many of those all-reduced by rails (for tests and reports). */
uint64_t rt_comm_rail_count(const RtComm *c);
/* How many small all-reduces / reduce-scatters on the ring gathered and folded (for tests). */
uint64_t rt_comm_gather_count(const RtComm *c);

/* Memory the local peers can map (a memfd each; shmem.c): the analogue of registering a
 * buffer with the communication library. A direct collective (above) whose peer's buffer
 * lies in such memory copies and reduces through a mapping of it (plain loads and stores,
 * the reduction reading the peer's data in place) instead of process_vm_readv/writev,
 * which copies through the kernel a page at a time. Either side may use it alone; results
 * are the same bits. The trainer allocates its whole memory plan here. Returns zeroed,
 * page-aligned memory, or plain memory when shared memory is unavailable (SHARDRT_SHMEM=0
 * asks for that); NULL when out of memory. Free with rt_comm_mem_free only. */
void *rt_comm_mem_alloc(RtComm *c, size_t bytes);
void rt_comm_mem_free(RtComm *c, void *p);
/* How many bytes of direct collectives went through mappings of peers' memory (the
 * rest went through process_vm_readv/writev): for tests and reports. */
uint64_t rt_comm_mapped_bytes(const RtComm *c);
/* Resident bytes of this rank's mappings of its local peers' memory (the regions the direct
 * and mailbox collectives read and write in place; /proc/self/smaps' Rss of each): pages the
 * peer owns and counts in its own resident size, counted again in this rank's (VmRSS, VmHWM)
 * once touched here. The node's memory does not grow by them. 0 when none are mapped or
 * smaps cannot be read. */
int64_t rt_comm_peer_resident(const RtComm *c);

/* Opens the endpoint and exchanges addresses with every rank (collective over the
 * world). opt may be NULL. Exits with a message on failure. */
RtComm *rt_comm_init(const RtBoot *boot, const RtCommOptions *opt);
/* Waits for every rank (a barrier), stops the watchdog, closes the endpoint. */
void rt_comm_free(RtComm *c);
int rt_comm_rank(const RtComm *c);
int rt_comm_world(const RtComm *c);
const char *rt_comm_provider(const RtComm *c); /* the provider(s) in use, for messages */
/* The provider that carries messages to world rank `rank` ("shm", "tcp;ofi_rxm", ...). */
const char *rt_comm_peer_provider(const RtComm *c, int rank);
const char *rt_comm_node(const RtComm *c, int rank); /* the node id rank runs on */

/* A group of world ranks (members in the given order, no duplicates). Needs no
 * communication; every member must create it. Returns NULL when this rank is not a
 * member. name appears in error messages ("tp", "dp*cp", ...). */
RtGroup *rt_group_new(RtComm *c, const int *ranks, int n, const char *name);
RtGroup *rt_group_world(RtComm *c); /* owned by the comm */
void rt_group_free(RtGroup *g);
int rt_group_size(const RtGroup *g);
int rt_group_rank(const RtGroup *g); /* this process's index in the group */
int rt_group_member(const RtGroup *g, int i); /* world rank of member i */
const char *rt_group_name(const RtGroup *g);

/* Asynchronous operations. Buffers must stay untouched until the request finishes. */
RtReq *rt_all_reduce_start(RtGroup *g, const void *send, void *recv, size_t count, RtDType dt, RtRedOp op);
RtReq *rt_reduce_scatter_start(RtGroup *g, const void *send, void *recv, size_t count, RtDType dt,
                               RtRedOp op); /* count: the whole send buffer */
RtReq *rt_all_gather_start(RtGroup *g, const void *send, void *recv, size_t count,
                           RtDType dt); /* count: the whole recv buffer */
RtReq *rt_broadcast_start(RtGroup *g, void *buf, size_t count, RtDType dt, int root); /* root: member index */
/* In-place all-reduce of several buffers as one collective (gradient buckets): the
 * all-reduce of the concatenation bufs[0][0 .. counts[0]) ++ bufs[1][..] ++ ..., each
 * result written back into its buffer. Every member passes the same total count (the
 * split may differ); zero counts (and NULL buffers of zero count) are allowed; the
 * arrays are copied, the buffers must stay untouched until the request finishes. */
RtReq *rt_all_reduce_v_start(RtGroup *g, void *const *bufs, const size_t *counts, int n, RtDType dt, RtRedOp op);
RtReq *rt_barrier_start(RtGroup *g);
/* Point to point with member `peer` of g; a send matches the recv from the same peer
 * with the same tag (0 .. 65535), whatever the order of different tags; messages with
 * equal tags between a pair match in the order they were posted. */
RtReq *rt_send_start(RtGroup *g, int peer, const void *buf, size_t bytes, int tag);
RtReq *rt_recv_start(RtGroup *g, int peer, void *buf, size_t bytes, int tag);

/* Progresses every operation of the comm; true when req has finished (req stays valid
 * until rt_wait). */
bool rt_test(RtReq *req);
/* Progresses until req finishes, then frees it. */
void rt_wait(RtReq *req);

/* Blocking forms: start + wait. */
void rt_all_reduce(RtGroup *g, const void *send, void *recv, size_t count, RtDType dt, RtRedOp op);
void rt_reduce_scatter(RtGroup *g, const void *send, void *recv, size_t count, RtDType dt, RtRedOp op);
void rt_all_gather(RtGroup *g, const void *send, void *recv, size_t count, RtDType dt);
void rt_broadcast(RtGroup *g, void *buf, size_t count, RtDType dt, int root);
void rt_all_reduce_v(RtGroup *g, void *const *bufs, const size_t *counts, int n, RtDType dt, RtRedOp op);
void rt_barrier(RtGroup *g);
void rt_send(RtGroup *g, int peer, const void *buf, size_t bytes, int tag);
void rt_recv(RtGroup *g, int peer, void *buf, size_t bytes, int tag);

/* bf16 <-> f32 (round to nearest even; NaN stays NaN). */
uint16_t rt_f32_to_bf16(float f);
float rt_bf16_to_f32(uint16_t h);
/* dst[i] = op(a[i], b[i]) * scale (scale applied only when != 1), computed in fp32;
 * dst may alias a or b. The reduction every backend uses on the host. */
void rt_reduce(void *dst, const void *a, const void *b, size_t count, RtDType dt, RtRedOp op, float scale);
/* buf[i] *= scale, computed in fp32 (bf16 rounded once). */
void rt_scale_dt(void *buf, size_t count, RtDType dt, float scale);

#endif
