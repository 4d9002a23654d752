/* runtime/mesh.h — the logical device mesh (dp, pp, cp, tp) mapped onto physical ranks.
 *
 * Pure C, no MPI and no allocation: the compiler (passes/mesh.c) and the runtime both
 * link it, so the plan the compiler prints is the one the trainer runs.
 *
 * Order (Megatron's, the reference interpreter's): tp innermost, then cp, dp, pp:
 *   rank   = ((pp_i * dp + dp_i) * cp + cp_i) * tp + tp_i
 *   node   = rank / devices_per_node
 *   device = rank % devices_per_node
 * A group over a set of axes (a bit mask, RT_MESH_DP | RT_MESH_CP, ...) holds the ranks
 * that share every other coordinate; members are listed in increasing rank order, which
 * is the row-major order of the group's own coordinates.
 */
#ifndef SHARDRT_MESH_H
#define SHARDRT_MESH_H

#include <stdbool.h>
#include <stdint.h>

/* The mesh axes: the one enum of the compiler (Sharding.split, Attrs.mesh_axis), the runtime
 * and the programs codegen writes. */
typedef enum { RT_AX_DP, RT_AX_PP, RT_AX_CP, RT_AX_TP, RT_AX_COUNT } MeshAxis;
/* Axis masks for groups: bit (1 << axis), the same bits as Sharding.partial. */
enum {
  RT_MESH_DP = 1 << RT_AX_DP,
  RT_MESH_PP = 1 << RT_AX_PP,
  RT_MESH_CP = 1 << RT_AX_CP,
  RT_MESH_TP = 1 << RT_AX_TP,
  RT_MESH_ALL = 0xf,
};

enum { RT_MAX_STAGES = 64 }; /* pipeline stages of an uneven split (RT_BLOCKS_STAGES) */

typedef struct MeshMap {
  int dim[RT_AX_COUNT]; /* degree per axis (>= 1), indexed by RT_AX_* */
  int world;            /* ranks: the product of dim[] */
  int devices_per_node; /* ranks per node (>= 1) */
  int nodes;            /* ceil(world / devices_per_node) */
  int stage_rows[RT_MAX_STAGES]; /* uneven pipeline stages: the layers of virtual stage k (passes/stage.c; without
                                    interleaving stage k), for the dims split RT_BLOCKS_STAGES; all 0: none */
  int stage_chunks;              /* ... the chunks per stage (interleaved uneven stages: v; else 0 or 1) */
} MeshMap;

/* Fills m; returns false (m untouched) when a degree or devices_per_node is < 1. */
bool rt_mesh_init(MeshMap *m, int dp, int pp, int cp, int tp, int devices_per_node);
/* Name of an axis ("dp", ...), and of an axis mask ("tp", "dp*cp", "world", "self"). */
const char *rt_mesh_axis_name(int axis);
const char *rt_mesh_mask_name(unsigned mask); /* static storage for the 16 masks */
/* A collective's axis argument naming the group over the axes of mask (bits 1 << MeshAxis), not one
 * axis: the gradient all-reduce over dp x cp (Attrs.mesh_with, passes/shard_core.c). */
#define RT_AX_GROUP(mask) (RT_AX_COUNT + (int)(mask))

int rt_mesh_rank(const MeshMap *m, const int coord[RT_AX_COUNT]);
void rt_mesh_coords(const MeshMap *m, int rank, int coord[RT_AX_COUNT]);
int rt_mesh_node(const MeshMap *m, int rank);
int rt_mesh_device(const MeshMap *m, int rank);

/* Size of every group over the axes in mask (product of their degrees). */
int rt_mesh_group_size(const MeshMap *m, unsigned mask);
/* Writes the members of rank's group over mask into members[] (room for
 * rt_mesh_group_size entries), in increasing rank order; returns the count. */
int rt_mesh_group(const MeshMap *m, int rank, unsigned mask, int *members);
/* rank's position in its group over mask (0 .. size-1). */
int rt_mesh_group_index(const MeshMap *m, int rank, unsigned mask);
/* Which of the world / size groups over mask rank is in (0 .. count-1): ranks with the
 * same colour share the group. */
int rt_mesh_group_color(const MeshMap *m, int rank, unsigned mask);

/* The layout of every sharded tensor (the IR's ir_block_index is this function): along a dim
 * of n_local * degree elements split over an axis of `degree` ranks, made of `blocks` equal
 * blocks each split over the axis (a fused QKV's columns; 0 or 1: one block, a contiguous
 * split), local index l on the rank with coordinate c is logical index
 *   (l / per) * per * degree + c * per + l % per,   per = n_local / blocks. */
int64_t rt_block_index(int64_t n_local, int blocks, int degree, int c, int64_t l);
/* A dim split over an outer axis (degree, coordinate c, blocks) and then an inner one (degree ideg,
 * coordinate ic; 1: none), which cuts the outer's local extent contiguously (the IR's
 * Sharding.inner): local index l is logical index rt_block_index(n_local x ideg, blocks, degree, c,
 * ic x n_local + l). With a contiguous outer split (blocks <= 1) that is the contiguous split over
 * the group of both axes, member c x ideg + ic: ZeRO's shards over dp x cp (passes/zero.c). */
int64_t rt_sharded_index(int64_t n_local, int blocks, int degree, int c, int ideg, int ic, int64_t l);
/* blocks == RT_BLOCKS_ZIGZAG: context parallelism's load-balanced split of a sequence dim, the
 * logical dim cut in 2 x degree equal chunks and the rank with coordinate c holding chunks c and
 * 2 degree - 1 - c (in that order), so causal attention costs every rank the same:
 *   l < per: c * per + l;  else (2 degree - 1 - c) * per + l - per,   per = n_local / 2. */
#define RT_BLOCKS_ZIGZAG 255
/* blocks == RT_BLOCKS_STAGES: pipeline stages of unequal layer counts (`pp N layers(a, b, ..)`): the
 * rank with pp coordinate c holds rows[c] layers from logical row rows[0] + .. + rows[c-1] on, each
 * rank's block padded to the largest count: local rows past rows[c] hold nothing (rt_stage_index:
 * -1). The logical dim is the sum of the counts (rt_stage_logical). Interleaved (chunks > 1): rows
 * has degree x chunks counts, one per virtual stage k = j degree + c (chunk j of the rank with
 * coordinate c), each virtual stage's layers from the sum of the earlier ones' on; the rank's block
 * is its chunks in order, chunk j padded to the largest count of the chunks j of all ranks
 * (rt_stage_chunk_rows: its local rows from rt_stage_chunk_start on). chunks 0 or 1: one. */
#define RT_BLOCKS_STAGES 254
int64_t rt_stage_index(const int *rows, int degree, int chunks, int c, int64_t l);
int64_t rt_stage_logical(const int *rows, int degree, int chunks);
int64_t rt_stage_chunk_rows(const int *rows, int degree, int j);
int64_t rt_stage_chunk_start(const int *rows, int degree, int j);
/* The local rows of a stack: the chunks' padded rows summed. */
int64_t rt_stage_local_rows(const int *rows, int degree, int chunks);
/* How many equal local blocks a `blocks` value cuts a dim in (zigzag: 2; 0 or 1: 1). */
int rt_blocks_count(int blocks);

/* The scratch a gather or scatter along a split axis packs (or unpacks) its members' chunks
 * through (runtime/ops/coll.c), for a tensor [outer, n, inner] of whole_bytes gathered (or
 * scattered) along n: none (0) when member c's chunk is one contiguous run of the whole tensor
 * (nothing before the axis and one block); else as many whole rows [1, n, inner] as fit
 * RT_PACK_CHUNK bytes (at least one, at most outer): the collective runs in chunks of that many
 * rows, each member's part of a chunk contiguous in its local tensor, so the scratch of a large
 * tensor (ZeRO's gather of a stacked parameter along dim 1: GPT-3's 27 GiB MLP weight) stays
 * bounded. An all-to-all packs always: a send and a receive buffer of x's bytes each. One rule for
 * the compiler, which plans the scratch (passes/memplan.c), and the runtime, which packs through
 * the planned buffer (rt_pack_rows: the rows of a chunk). */
enum { RT_PACK_CHUNK = 64 << 20 };
int64_t rt_pack_bytes(int64_t outer, int blocks, int64_t whole_bytes);
int64_t rt_pack_rows(int64_t outer, int blocks, int64_t whole_bytes);
int64_t rt_all_to_all_pack_bytes(int64_t x_bytes);

/* True when every group over mask lies inside one node. */
bool rt_mesh_group_in_node(const MeshMap *m, unsigned mask);

/* Whether the ranks of pipeline stage pp_coord (of pp_degree stages) hold a tensor held on the stages
 * of the bit mask stages (RtTensor.stages, the IR's ir_node_stages; 0: every stage). */
bool rt_stage_holds(uint64_t stages, int pp_degree, int pp_coord);
/* Whether the rank at coord writes its block of a tensor into a sharded checkpoint: one replica of
 * each block writes it (runtime/train/ckpt_shard.c writes by this rule, the compiler's storage
 * report, passes/storage.c, counts by it). The tensor is number ti of the trainer's tensor table,
 * split over the axes of split_mask and held on the stages of the mask stages; dim: the mesh's
 * degrees. Along an axis not splitting it the writer has coordinate 0, except along dp, where the
 * replicas take turns by tensor (ti mod dp: data-parallel replicas share the writing), and along
 * pp for a tensor held on some stages only, the first of them; a stage not holding it writes none. */
bool rt_ckpt_writer(const int dim[RT_AX_COUNT], const int coord[RT_AX_COUNT], unsigned split_mask, uint64_t stages,
                    int ti);

#endif
