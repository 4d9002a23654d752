/* runtime/ops/ctx.c — a rank's coordinates and the mesh's degrees, from its context (coll.h):
 * below the collectives and the trace recorder, which both ask. */
#include "coll.h"
#include "mesh.h"
#include "train/ctx.h"

/* A group over several axes (RT_AX_GROUP(mask): ZeRO's shards over dp x cp): this rank's index in
 * it and its size (the mesh's; a single process: 0 and 1). */
int rt_ctx_coord(const RtCtx *ctx, int axis) {
  if (axis > RT_AX_COUNT && axis < RT_AX_GROUP(16))
    return ctx->mesh ? rt_mesh_group_index(ctx->mesh, ctx->rank, (unsigned)(axis - RT_AX_COUNT)) : 0;
  switch (axis) {
  case RT_AX_DP: return ctx->dp_rank;
  case RT_AX_PP: return ctx->pp_rank;
  case RT_AX_CP: return ctx->cp_rank;
  case RT_AX_TP: return ctx->tp_rank;
  }
  return 0;
}

int rt_ctx_degree(const RtCtx *ctx, int axis) {
  if (axis > RT_AX_COUNT && axis < RT_AX_GROUP(16))
    return ctx->mesh ? rt_mesh_group_size(ctx->mesh, (unsigned)(axis - RT_AX_COUNT)) : 1;
  int d = 1;
  switch (axis) {
  case RT_AX_DP: d = ctx->dp_size; break;
  case RT_AX_PP: d = ctx->pp_size; break;
  case RT_AX_CP: d = ctx->cp_size; break;
  case RT_AX_TP: d = ctx->tp_size; break;
  }
  return d > 0 ? d : 1;
}
