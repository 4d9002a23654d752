/* runtime/cuda/nccl_comm.h — the NCCL backend behind runtime/comm/comm.h.
 *
 * After rt_group_use_nccl(), a group's collectives (rt_all_reduce_start, ...) take GPU
 * buffers and run on NCCL: one communicator per group, the unique id sent from the
 * group's first member to the others through the bootstrap (MPI). Each operation is
 * enqueued on the group's own communication stream after the work already queued on
 * the compute stream (an event), and records a `done` event that rt_test polls and
 * rt_wait waits for; rt_nccl_then() makes another stream wait for it without blocking
 * the host. The comm's watchdog covers NCCL operations like host ones, timed from when the device reaches
 * them (a collective queued behind a long step's compute is not stuck: RtGroupBackend.state).
 *
 * Semantics are those of comm.h (blocks for reduce-scatter / all-gather, uneven counts,
 * avg, max, bf16), except that send / recv pairs match in posting order only (NCCL
 * has no tags).
 */
#ifndef SHARDRT_NCCL_COMM_H
#define SHARDRT_NCCL_COMM_H

#include <stdbool.h>

#include "comm/comm.h"

/* Collective over the WORLD: every rank calls it, with its group (NULL on ranks outside
 * any group being set up), so that the leaders' unique ids can be exchanged. Uses the
 * current CUDA device. Returns false (with a message) when CUDA or NCCL is unusable,
 * e.g. no GPU or no driver. */
bool rt_group_use_nccl(RtComm *c, RtGroup *g);
/* The stream whose queued work the group's operations wait for (default: the legacy
 * default stream). A cudaStream_t. */
void rt_nccl_set_compute_stream(RtGroup *g, void *stream);
/* Makes stream (a cudaStream_t) wait on device for q to finish (a bucket all-reduce,
 * rt_all_reduce_v_start, is one request: its members in one NCCL group); q stays valid. Returns false, doing nothing, when q is not an NCCL operation. */
bool rt_nccl_then(RtReq *q, void *stream);
/* Point-to-point exchange over g (an NCCL group) on device memory: for i < n, send[i] goes to
 * member to[i] and recv[i] comes from member from[i], bytes[i] each, all in one NCCL group call (so a
 * ring of sends and receives cannot deadlock), on g's comm stream after the compute stream's work so
 * far. Returns an event (a cudaEvent_t) recorded after it, which rt_nccl_exchange_then makes a stream
 * wait for; NULL, doing nothing, when g is not an NCCL group. */
void *rt_nccl_exchange(RtGroup *g, int n, const int *to, const void *const *send, const int *from, void *const *recv,
                       const int64_t *bytes);
/* stream (a cudaStream_t) waits on device for the exchange ev; ev is released. */
void rt_nccl_exchange_then(void *ev, void *stream);

#endif
