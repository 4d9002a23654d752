/* runtime/train/layout.c — a tensor's layout over the ranks: the program's mesh degrees, which
 * axes split each dim, the logical index of a rank's local element, the logical program.
 *
 * A tensor of a multi-rank program holds, on each rank, its block of the logical tensor
 * (RtTensor.shard, the layout of runtime/mesh.h's rt_block_index). Initialisation, data,
 * checkpoints, dumps and sampling all speak logical tensors: a sharded parameter's local
 * element is generated from its logical index, checkpoints hold logical tensors (pieces of
 * them, each rank its own blocks: ckpt_shard.c) and every rank takes its own block back on
 * resume, so a run resumes under another parallel layout. Pure arithmetic, no communication
 * (dist.c moves tensors between ranks): the checkpoint files library, which `shardc ckpt`
 * links, holds it.
 */
#include <stdlib.h>
#include <string.h>

#include "files.h"

int rt_program_degree(const RtProgram *p, int axis) { return p->mesh[axis] > 0 ? p->mesh[axis] : 1; }

int rt_program_world(const RtProgram *p) {
  int w = 1;
  for (int a = 0; a < RT_AX_COUNT; a++) w *= rt_program_degree(p, a);
  return w;
}

int rt_tensor_dim_axis(const RtProgram *p, const RtTensor *t, int d) {
  if (!t->shard.sharded) return -1;
  int a = t->shard.split[d];
  return a >= 0 && a < RT_AX_COUNT && rt_program_degree(p, a) > 1 ? a : -1;
}

int rt_tensor_dim_inner(const RtProgram *p, const RtTensor *t, int d) {
  if (!t->shard.sharded || t->shard.split[d] < 0) return -1;
  int a = t->shard.inner[d];
  return a >= 0 && a < RT_AX_COUNT && rt_program_degree(p, a) > 1 ? a : -1;
}

/* The mesh degree splitting dim d: its axis's times its inner axis's. */
static int dim_degree(const RtProgram *p, const RtTensor *t, int d) {
  int a = rt_tensor_dim_axis(p, t, d), ia = rt_tensor_dim_inner(p, t, d);
  return (a >= 0 ? rt_program_degree(p, a) : 1) * (ia >= 0 ? rt_program_degree(p, ia) : 1);
}

/* The logical dim d's extent (rt_tensor_logical_dims' per dim). */
static int64_t dim_logical_extent(const RtProgram *p, const RtTensor *t, int d) {
  int a = rt_tensor_dim_axis(p, t, d);
  if (a >= 0 && t->shard.blocks[d] == RT_BLOCKS_STAGES)
    return rt_stage_logical(p->stage_rows, rt_program_degree(p, a), p->stage_chunks);
  return t->dims[d] * dim_degree(p, t, d);
}

int64_t rt_tensor_dim_index(const RtProgram *p, const RtTensor *t, int d, const int coord[RT_AX_COUNT], int64_t l) {
  int a = rt_tensor_dim_axis(p, t, d), ia = rt_tensor_dim_inner(p, t, d);
  if (a < 0 && ia < 0) return l;
  return rt_sharded_index(t->dims[d], t->shard.blocks[d], a >= 0 ? rt_program_degree(p, a) : 1, a >= 0 ? coord[a] : 0,
                          ia >= 0 ? rt_program_degree(p, ia) : 1, ia >= 0 ? coord[ia] : 0, l);
}

int64_t rt_tensor_logical_dims(const RtProgram *p, const RtTensor *t, int64_t *dims) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++)
    n *= dims[d] = dim_logical_extent(p, t, d);
  return n;
}

unsigned rt_tensor_split_mask(const RtProgram *p, const RtTensor *t) {
  unsigned mask = 0;
  for (int d = 0; d < t->rank; d++) {
    int a = rt_tensor_dim_axis(p, t, d), ia = rt_tensor_dim_inner(p, t, d);
    if (a >= 0) mask |= 1u << a;
    if (ia >= 0) mask |= 1u << ia;
  }
  return mask;
}

int rt_tensor_held(const RtProgram *p, const RtTensor *t, int pp_coord) {
  return rt_stage_holds(t->stages, rt_program_degree(p, RT_AX_PP), pp_coord);
}

int64_t rt_tensor_dim_logical(const RtProgram *p, const RtTensor *t, int d, const int coord[RT_AX_COUNT], int64_t l) {
  int a = rt_tensor_dim_axis(p, t, d);
  if (a >= 0 && t->shard.blocks[d] == RT_BLOCKS_STAGES) /* uneven pipeline stages: padding rows are no element */
    return rt_stage_index(p->stage_rows, rt_program_degree(p, a), p->stage_chunks, coord[a], l);
  return rt_tensor_dim_index(p, t, d, coord, l);
}

int64_t rt_tensor_logical_index(const RtProgram *p, const RtTensor *t, const int coord[RT_AX_COUNT], int64_t i) {
  int64_t li = 0, mul = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    int64_t l = rt_tensor_dim_logical(p, t, d, coord, i % t->dims[d]);
    i /= t->dims[d];
    if (l < 0) return -1;
    li += l * mul;
    mul *= dim_logical_extent(p, t, d);
  }
  return li;
}

/* ---- the logical program (checkpoints, dumps) ---- */

RtProgram *rt_logical_program(const RtProgram *p, int64_t *bytes) {
  RtProgram *lp = rt_xmalloc(sizeof *lp);
  *lp = *p;
  RtTensor *ts = rt_xcalloc((size_t)p->ntensors + 1, sizeof *ts);
  int64_t off = 0;
  for (int i = 0; i < p->ntensors; i++) {
    ts[i] = p->tensors[i];
    int64_t n = rt_tensor_logical_dims(p, &p->tensors[i], ts[i].dims);
    memset(&ts[i].shard, 0, sizeof ts[i].shard);
    ts[i].offset = off;
    off += (n * (int64_t)rt_dtype_size((RtDType)ts[i].dtype) + 63) / 64 * 64;
  }
  lp->tensors = ts;
  lp->mesh[0] = lp->mesh[1] = lp->mesh[2] = lp->mesh[3] = 0;
  *bytes = off;
  return lp;
}

void rt_logical_program_free(RtProgram *lp) {
  if (!lp) return;
  free((void *)lp->tensors);
  free(lp);
}

