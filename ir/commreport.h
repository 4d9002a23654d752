/* ir/commreport.h — what a partitioned program communicates, per rank and per step.
 *
 * The numbers behind the communication part of `--dump-ir`: every collective node's group
 * and bytes, and a per-step summary per group axis, region and collective kind, plus the
 * traffic and an estimated time per link class of the topology. Tests read the numbers
 * through ir_comm_volumes instead of parsing the text.
 *
 * Conventions (per rank, per step; one step runs the graph once: one micro-batch):
 *   bytes of a collective: all_reduce the local buffer (variadic: the sum of its inputs);
 *     reduce_scatter its input and all_gather its output (the full, unscattered buffer);
 *     broadcast the buffer; send / recv the message; all_to_all its input (what it exchanges).
 *   bus traffic per rank (textbook ring factors over a group of N ranks):
 *     all_reduce 2(N-1)/N x bytes; reduce_scatter and all_gather (N-1)/N x the full buffer;
 *     broadcast 1 x bytes (pipelined chain); send 1 x bytes (recv 0: counted at the sender);
 *     all_to_all (N-1)/N x its input (every chunk but its own leaves the rank).
 *   regions: forward (what the loss depends on), backward (what the optimizer's gradients
 *     depend on, the rest), optimizer (everything after: gradient-norm sums, the update); a
 *     receive depends on its send (the pipeline's, paired by axis and tag);
 *     a repeat region belongs to one region as a whole, and its collectives count `count`
 *     times.
 *   pipeline stages: a rank runs the nodes of its stage (Node.stage, stageset) and those of every
 *     stage; the volumes are one stage's ranks', the busiest stage's (CommVolumes.stage).
 */
#ifndef SHARDC_COMMREPORT_H
#define SHARDC_COMMREPORT_H

#include <stdio.h>

#include "module.h"
#include "ops/coll_count.h"

typedef enum { CR_FORWARD, CR_BACKWARD, CR_OPTIMIZER, CR_COUNT } CommRegion;
/* the runtime's order (runtime/ops/coll_count.h RT_CK_*: what the trainer counts, checked against the plan) */
typedef enum {
  CK_ALL_REDUCE = RT_CK_ALL_REDUCE, CK_REDUCE_SCATTER = RT_CK_REDUCE_SCATTER, CK_ALL_GATHER = RT_CK_ALL_GATHER,
  CK_BROADCAST = RT_CK_BROADCAST, CK_SEND_RECV = RT_CK_SEND_RECV, CK_ALL_TO_ALL = RT_CK_ALL_TO_ALL, CK_COUNT = RT_CK_COUNT
} CommKind;
extern const char *const ir_comm_region_names[CR_COUNT]; /* "forward", "backward", "optimizer" */
#define ir_comm_kind_names rt_coll_kind_names /* "all_reduce", ... (the runtime's names) */

typedef struct {
  int64_t count;    /* collectives per step */
  int64_t bytes;    /* per rank per step, bytes as defined above */
  double bus_bytes; /* per rank per step, ring traffic in bytes */
} CommCell;

/* The groups the volumes are counted by: one per mesh axis (indexed by MeshAxis), then the
 * group over dp x cp (IR_COMM_DPCP: the gradient all-reduce of Attrs.mesh_with). */
enum { IR_COMM_DPCP = RT_CC_DPCP, IR_COMM_ROWS = RT_CC_ROWS }; /* the runtime counts by the same rows */
typedef struct {
  int group_size[IR_COMM_ROWS];                     /* ranks per group of each mesh axis */
  bool across_nodes[IR_COMM_ROWS];                  /* some group of the axis spans nodes */
  int members_per_node[IR_COMM_ROWS];               /* a group's ranks on one node (<= group size) */
  LinkKind link[IR_COMM_ROWS];                      /* intra or inter link of the topology (NONE: unknown) */
  CommCell cell[IR_COMM_ROWS][CR_COUNT][CK_COUNT];  /* everything, per axis, region and kind */
  CommCell in_repeat[IR_COMM_ROWS][CR_COUNT][CK_COUNT]; /* the part inside repeat bodies (already x count) */
  LinkKind side_link[2];                        /* [0] the intra-node link, [1] the inter-node one (NONE: unknown) */
  double side_bus_bytes[2];                     /* per rank per step, bus traffic inside nodes [0], across [1] */
  double side_time_s[2];                        /* estimated seconds per step on each (0: unknown) */
  int64_t total_count;                          /* every collective per step */
  double total_bus_bytes;                       /* per rank per step */
  int stage;   /* under pp: the stage whose ranks these are (the busiest, ir_comm_volumes); -1: no pipeline */
  int nstages; /* pipeline stages (1: none) */
} CommVolumes;

/* Bytes of one collective node (see above); 0 for a non-collective. */
int64_t ir_comm_node_bytes(const Node *n);
/* Ring traffic factor of a collective over a group of n ranks (0 when n <= 1). */
double ir_comm_bus_factor(OpKind op, int n);
/* Latency-bound steps of the ring algorithm for one collective over n ranks (send: 1). */
int ir_comm_ring_steps(OpKind op, int n);
/* Whether the trainer runs collective n asynchronously, overlapped with what follows until its
 * first reader (codegen/emit.c): the all-reduces and reduce-scatters over dp (dp x cp) or over cp
 * alone, the all-gathers over those of a parameter (ZeRO-3's, reading the stored shard or a layer
 * loop's slice of it), and the receive of a ring shift (cp's hops). */
bool ir_comm_async(const Node *n);
/* Ranks in a group over mesh axis `axis`: the mesh's degree, else the plan's (1 unknown). */
int ir_comm_group_size(const Module *m, int axis);
/* Where the groups of row `row` (below) sit on m's mesh: whether some group spans nodes
 * (*across) and its ranks on one node (*members; the group size without a mesh). */
void ir_comm_group_place(const Module *m, int row, bool *across, int *members);
/* The part of a link one ring of a group gets, as a factor on its bus time: across nodes the node's
 * network is shared by its devices_per_node / members rings (one per group with ranks on it: `members`
 * of each group on a node), 1 inside a node. Every timing of a collective (the traffic report,
 * passes/cost.c, passes/zero_coalesce.c, plan_model.c's dp link) asks it. */
double ir_comm_link_share(int devices_per_node, bool across, int members);
/* The group a collective runs over (CommVolumes' rows): its mesh axis, or IR_COMM_DPCP; its axis
 * mask; its name ("dp", "dp*cp"). */
int ir_comm_row(const Node *n);
unsigned ir_comm_row_mask(int row);
const char *ir_comm_row_name(int row);
/* "tp x8, 96.0 MiB" for a collective node (m may be NULL: no group size); "" otherwise. */
void ir_comm_note(char *buf, size_t size, const Module *m, const Node *n);
/* The per-step volumes of m's graph, per rank: under pp, of the busiest stage's ranks (CommVolumes.stage). */
void ir_comm_volumes(const Module *m, CommVolumes *out);
/* The pipeline stages whose ranks run different collectives (1: no pipeline), and the volumes of each
 * stage's ranks (vs[ir_comm_stages(m)]): what codegen writes into the trainer for it to check its
 * counted collectives against (RtProgram.coll_plan). */
int ir_comm_stages(const Module *m);
void ir_comm_stage_volumes(const Module *m, CommVolumes *vs);
/* Only the groups of ir_comm_volumes (group_size, across_nodes, members_per_node, link, side_link; stage -1,
 * nstages 1), volumes zero: what timing one collective needs (passes/cost.c), without the graph's walk. */
void ir_comm_groups(const Module *m, CommVolumes *out);
/* "# rank class ..." header: which ranks the one SPMD program serves. */
void ir_print_rank_classes(FILE *f, const Module *m);
/* The per-step communication summary and the per-link-class table. */
void ir_print_comm(FILE *f, const Module *m);
/* 1536 -> "1.5 KiB"; exact bytes under 1 KiB. */
const char *ir_human_bytes(char *buf, size_t size, double bytes);

#endif
