/* runtime/train/dist.c — the trainer across ranks: bootstrap, the program's mesh and groups,
 * and moving tensors between a rank's local (sharded) blocks and the logical ones (the map
 * itself, which communicates nothing, is layout.c's).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../comm/comm.h"
#include "../ops/coll.h"
#include "train.h"

void rt_dist_init(RtDist *d, int *argc, char ***argv, const RtProgram *p, RtCtx *ctx) {
  memset(d, 0, sizeof *d);
  int pw = rt_program_world(p);
  if (rt_boot_launcher() == RT_LAUNCH_SINGLE && pw == 1) return; /* a plain single process: no MPI, no comm */
  if (!rt_boot_init(&d->boot, argc, argv)) rt_user_error("cannot start: the launcher's rank information is invalid");
  d->booted = 1;
  if (!rt_mesh_init(&d->mesh, rt_program_degree(p, RT_AX_DP), rt_program_degree(p, RT_AX_PP),
                    rt_program_degree(p, RT_AX_CP), rt_program_degree(p, RT_AX_TP),
                    d->boot.local_world > 0 ? d->boot.local_world : 1))
    rt_bug("the program's mesh degrees are invalid");
  if (!rt_boot_check_mesh(&d->boot, &d->mesh)) {
    /* every rank ends here; rank 0 said why (the plan's world and the launched one) */
    fflush(stdout);
    exit(1);
  }
  ctx->rank = d->boot.rank;
  ctx->world = d->boot.world;
  ctx->local_rank = d->boot.local_rank;
  if (d->boot.world == 1) return;
  int c[RT_AX_COUNT];
  rt_mesh_coords(&d->mesh, d->boot.rank, c);
  ctx->dp_rank = c[RT_AX_DP], ctx->dp_size = d->mesh.dim[RT_AX_DP];
  ctx->tp_rank = c[RT_AX_TP], ctx->tp_size = d->mesh.dim[RT_AX_TP];
  ctx->pp_rank = c[RT_AX_PP], ctx->pp_size = d->mesh.dim[RT_AX_PP];
  ctx->cp_rank = c[RT_AX_CP], ctx->cp_size = d->mesh.dim[RT_AX_CP];
  d->comm = rt_comm_init(&d->boot, NULL);
  ctx->comm = d->comm;
  ctx->mesh = &d->mesh;
  /* a group over every combination of axes with more than one member (no communication) */
  int *members = rt_xmalloc((size_t)d->mesh.world * sizeof *members);
  for (unsigned mask = 1; mask <= RT_MESH_ALL; mask++) {
    int n = rt_mesh_group(&d->mesh, d->boot.rank, mask, members);
    if (n > 1) ctx->groups[mask] = rt_group_new(d->comm, members, n, rt_mesh_mask_name(mask));
  }
  free(members);
}

void rt_dist_free(RtDist *d, RtCtx *ctx) {
  for (int mask = 0; mask < 16; mask++)
    if (ctx->groups[mask]) rt_group_free(ctx->groups[mask]), ctx->groups[mask] = NULL;
  if (d->comm) rt_comm_free(d->comm); /* a barrier: no rank leaves while another still needs it */
  d->comm = NULL;
  ctx->comm = NULL;
  if (d->booted) rt_boot_free(&d->boot);
  d->booted = 0;
}

void rt_dist_barrier(RtCtx *ctx) {
  if (ctx->groups[RT_MESH_ALL]) rt_barrier(ctx->groups[RT_MESH_ALL]);
}

int rt_dist_any(RtCtx *ctx, int flag) {
  rt_dist_any_n(ctx, &flag, 1);
  return flag;
}

void rt_dist_any_n(RtCtx *ctx, int *flags, int n) {
  float f[8] = {0};
  if (n > 8) rt_bug("rt_dist_any_n: %d flags (at most 8)", n);
  for (int i = 0; i < n; i++) flags[i] = flags[i] != 0, f[i] = (float)flags[i];
  if (!ctx->groups[RT_MESH_ALL]) return;
  rt_all_reduce(ctx->groups[RT_MESH_ALL], f, f, n, RT_F32, RT_MAX);
  for (int i = 0; i < n; i++) flags[i] = f[i] > 0;
}

int64_t rt_dist_bcast_u32(RtCtx *ctx, int64_t v) {
  if (!ctx->groups[RT_MESH_ALL]) return v;
  float f[2] = {0, 0}; /* 16 bits each: exact in f32, and a max over zeros is rank 0's */
  if (ctx->rank == 0) f[0] = (float)(v & 0xffff), f[1] = (float)(v >> 16 & 0xffff);
  rt_all_reduce(ctx->groups[RT_MESH_ALL], f, f, 2, RT_F32, RT_MAX);
  return (int64_t)f[0] | (int64_t)f[1] << 16;
}

/* ---- local <-> logical (the layout: layout.c) ---- */

void rt_ctx_coords(const RtCtx *ctx, int coord[RT_AX_COUNT]) {
  for (int a = 0; a < RT_AX_COUNT; a++) coord[a] = rt_ctx_coord(ctx, a);
}

void rt_tensor_scatter(const RtCtx *ctx, const RtProgram *p, const RtTensor *t, const void *logical, void *local) {
  size_t es = rt_dtype_size((RtDType)t->dtype);
  int64_t n = rt_tensor_numel(t);
  int coord[RT_AX_COUNT];
  rt_ctx_coords(ctx, coord);
  if (!rt_tensor_held(p, t, coord[RT_AX_PP])) return; /* another stage's: its bytes are not t's here */
  if (!rt_tensor_split_mask(p, t)) {
    memmove(local, logical, (size_t)n * es);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    int64_t li = rt_tensor_logical_index(p, t, coord, i);
    if (li < 0) memset((char *)local + (size_t)i * es, 0, es);
    else memcpy((char *)local + (size_t)i * es, (const char *)logical + (size_t)li * es, es);
  }
}

/* The group a gather of t spans: the axes splitting it, and pp where only some stages hold it. */
static RtGroup *gather_group(RtCtx *ctx, const RtProgram *p, const RtTensor *t, int *held) {
  unsigned mask = rt_tensor_split_mask(p, t);
  *held = t->stages && rt_program_degree(p, RT_AX_PP) > 1; /* held on some stages: gathered over pp from them */
  if (*held) mask |= RT_MESH_PP;
  if (!mask) return NULL;
  RtGroup *g = ctx->groups[mask];
  if (!g) rt_bug("tensor %s is split over %s but there is no such group", t->name, rt_mesh_mask_name(mask));
  return g;
}

void rt_tensor_gather(RtCtx *ctx, const RtProgram *p, const RtTensor *t, const void *local, void *logical) {
  size_t es = rt_dtype_size((RtDType)t->dtype);
  int64_t n = rt_tensor_numel(t);
  int held;
  RtGroup *g = gather_group(ctx, p, t, &held);
  if (!g) {
    memmove(logical, local, (size_t)n * es);
    return;
  }
  int size = rt_group_size(g);
  size_t bytes = (size_t)n * es;
  char *all = rt_xmalloc(bytes * (size_t)size);
  /* every dtype moves as 4-byte words (an all-gather only copies; elements are 2, 4 or 8 bytes) */
  if (bytes % 2) rt_bug("tensor %s: odd byte count", t->name);
  if (bytes % 4 == 0)
    rt_all_gather(g, local, all, bytes / 4 * (size_t)size, RT_F32);
  else
    rt_all_gather(g, local, all, bytes / 2 * (size_t)size, RT_BF16);
  const MeshMap *mesh = ctx->mesh;
  for (int k = 0; k < size; k++) {
    int coord[RT_AX_COUNT];
    rt_mesh_coords(mesh, rt_group_member(g, k), coord);
    if (held && !rt_tensor_held(p, t, coord[RT_AX_PP])) continue;
    const char *src = all + (size_t)k * bytes;
    for (int64_t i = 0; i < n; i++) {
      int64_t li = rt_tensor_logical_index(p, t, coord, i);
      if (li >= 0) memcpy((char *)logical + (size_t)li * es, src + (size_t)i * es, es);
    }
  }
  free(all);
}

int64_t rt_tensor_local_row(const RtCtx *ctx, const RtProgram *p, const RtTensor *t, int64_t row) {
  int coord[RT_AX_COUNT];
  rt_ctx_coords(ctx, coord);
  if (!rt_tensor_held(p, t, coord[RT_AX_PP])) return -1;
  int64_t ld[RT_MAX_RANK], vl = t->dims[t->rank - 1], rows = rt_tensor_numel(t) / vl;
  int64_t vp = (rt_tensor_logical_dims(p, t, ld), ld[t->rank - 1]);
  for (int64_t j = 0; j < rows; j++) { /* (a row's first element's logical index / the logical row length) */
    int64_t li = rt_tensor_logical_index(p, t, coord, j * vl);
    if (li >= 0 && li / vp == row) return j;
  }
  return -1;
}

void rt_tensor_gather_row(RtCtx *ctx, const RtProgram *p, const RtTensor *t, const void *loc, float *out) {
  int coord[RT_AX_COUNT], held, d = t->rank - 1;
  rt_ctx_coords(ctx, coord);
  int64_t ld[RT_MAX_RANK];
  rt_tensor_logical_dims(p, t, ld);
  memset(out, 0, (size_t)ld[d] * sizeof *out);
  for (int64_t v = 0; loc && v < t->dims[d]; v++) {
    float x;
    if (t->dtype == RT_BF16) {
      uint16_t h;
      memcpy(&h, (const char *)loc + 2 * v, 2);
      uint32_t u = (uint32_t)h << 16;
      memcpy(&x, &u, 4);
    } else if (t->dtype == RT_F32) {
      memcpy(&x, (const char *)loc + 4 * v, 4);
    } else {
      rt_bug("tensor %s: a row of dtype %s cannot be gathered", t->name, rt_dtype_st_name((RtDType)t->dtype));
    }
    out[rt_tensor_dim_logical(p, t, d, coord, v)] = x;
  }
  RtGroup *g = gather_group(ctx, p, t, &held);
  /* each element is on one member (the others add zeros: exact) */
  if (g) rt_all_reduce(g, out, out, (size_t)ld[d], RT_F32, RT_SUM);
}

/* ---- the logical program's tensors (checkpoints, dumps) ---- */

void rt_gather_tensors(RtCtx *ctx, const RtProgram *p, const RtProgram *lp, const char *mem, char *lmem, int kinds) {
  for (int i = 0; i < p->ntensors; i++)
    if (kinds & (1 << p->tensors[i].kind))
      rt_tensor_gather(ctx, p, &p->tensors[i], mem + p->tensors[i].offset, lmem + lp->tensors[i].offset);
}

void rt_scatter_tensors(const RtCtx *ctx, const RtProgram *p, const RtProgram *lp, const char *lmem, char *mem,
                        int kinds) {
  for (int i = 0; i < p->ntensors; i++)
    if (kinds & (1 << p->tensors[i].kind))
      rt_tensor_scatter(ctx, p, &p->tensors[i], lmem + lp->tensors[i].offset, mem + p->tensors[i].offset);
}
