/* runtime/ops/coll_count.h — what the program's collectives moved on this process: calls and bytes
 * by group and kind, counted where the generated code calls them (coll.c), for the trainer to
 * compare with the plan's communication report (ir/commreport.h, whose CommKind is this order).
 *
 * Bytes as the plan counts a collective (ir_comm_node_bytes): all_reduce its buffers (a bucket:
 * their sum); reduce_scatter its input and all_gather its output (the full buffer); broadcast the
 * buffer; a send and a receive the message each (a ring shift is one of each); all_to_all its
 * input. A collective over a group of one member (a copy) is not counted: it moves nothing.
 */
#ifndef SHARDRT_COLL_COUNT_H
#define SHARDRT_COLL_COUNT_H

#include <stdint.h>

#include "mesh.h"

enum { RT_CK_ALL_REDUCE, RT_CK_REDUCE_SCATTER, RT_CK_ALL_GATHER, RT_CK_BROADCAST, RT_CK_SEND_RECV, RT_CK_ALL_TO_ALL,
       RT_CK_COUNT };
/* the kinds' names, as the plan prints them ("all_reduce", ..., "send/recv", "all_to_all") */
extern const char *const rt_coll_kind_names[RT_CK_COUNT];

/* Rows: one per mesh axis (RT_AX_*), then the group over dp x cp (the gradients' all-reduce, ZeRO's
 * shards under cp): the plan's rows (ir/commreport.h IR_COMM_DPCP). */
enum { RT_CC_DPCP = RT_AX_COUNT, RT_CC_ROWS };
typedef struct {
  int64_t count[RT_CC_ROWS][RT_CK_COUNT];
  int64_t bytes[RT_CC_ROWS][RT_CK_COUNT];
} RtCollCounts;

/* The trainer's own collective a step, outside the program (runtime/train/main.c check_finite): the ranks
 * agree on a non-finite loss or gradient, a skipped update and a stop signal, RT_TRAINER_FLAGS f32 values
 * all-reduced (max) over the world; not counted here, and printed apart by the plan. */
enum { RT_TRAINER_FLAGS = 4 };

/* Counts one collective of `kind` over `axis` (RT_AX_*, or RT_AX_GROUP(mask)) moving `bytes`. */
void rt_coll_count(int axis, int kind, int64_t bytes);
/* The counts so far (since the process started). */
void rt_coll_counts(RtCollCounts *out);
/* The mask of row's group (RT_MESH_*), for names (rt_mesh_mask_name). */
unsigned rt_coll_row_mask(int row);

#endif
