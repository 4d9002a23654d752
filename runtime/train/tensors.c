/* runtime/train/tensors.c — the run's tensors: parameters initialised, scalar inputs written
 * and results read, each rank's block of a batch, a device program's host copy moved to and from
 * the device, and checkpoints and dumps of the logical tensors (gathered / scattered over ranks).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../comm/comm.h" /* rt_f32_to_bf16 */
#include "../rng.h"
#include "coll.h"
#include "run.h"

static void put_scalar(char *mem, const RtTensor *t, double v) {
  if (!t) return;
  if (t->dtype == RT_F32) {
    float f = (float)v;
    memcpy(mem + t->offset, &f, 4);
  } else if (t->dtype == RT_F64)
    memcpy(mem + t->offset, &v, 8);
  else
    rt_bug("scalar input \"%s\" is neither f32 nor f64", t->name);
}

static double get_scalar(const char *mem, const RtTensor *t) {
  if (!t) return NAN;
  if (t->dtype == RT_F32) {
    float f;
    memcpy(&f, mem + t->offset, 4);
    return f;
  }
  if (t->dtype == RT_F64) {
    double d;
    memcpy(&d, mem + t->offset, 8);
    return d;
  }
  rt_bug("scalar result \"%s\" is neither f32 nor f64", t->name);
}

void rt_init_tensors(const RtProgram *p, char *mem, uint64_t seed, const RtCtx *ctx, int kinds) {
  int coord[RT_AX_COUNT];
  rt_ctx_coords(ctx, coord);
  for (int k = 0; k < p->ntensors; k++) {
    const RtTensor *t = &p->tensors[k];
    int64_t n = rt_tensor_numel(t);
    if (!(kinds >> t->kind & 1)) continue;
    if (!rt_tensor_held(p, t, coord[RT_AX_PP])) continue; /* another stage's: its bytes are other values' here */
    if (t->kind == RT_T_STATE) memset(mem + t->offset, 0, (size_t)n * rt_dtype_size(t->dtype));
    if (t->kind != RT_T_PARAM) continue;
    uint64_t key = rt_rng_key(seed, t->name);
    char *dst = mem + t->offset;
    if (t->init < RT_INIT_ZEROS || t->init > RT_INIT_CONST) rt_bug("parameter %s: unknown init %d", t->name, t->init);
    if (t->dtype != RT_F32 && t->dtype != RT_F64 && t->dtype != RT_BF16)
      rt_bug("parameter %s: dtype %s cannot be initialised", t->name, rt_dtype_st_name(t->dtype));
    int split = rt_tensor_split_mask(p, t) != 0;
      /* element i is a pure function of (key, i): the threads' split changes nothing */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
      double x = 0;
      int64_t li = split ? rt_tensor_logical_index(p, t, coord, i) : i;
      if (li < 0) x = 0; /* a padding row of uneven pipeline stages: nothing */
      else switch (t->init) {
      case RT_INIT_ZEROS: x = 0; break;
      case RT_INIT_ONES: x = 1; break;
      case RT_INIT_CONST: x = t->init_a; break;
      case RT_INIT_NORMAL: x = rt_rng_normal(key, li, t->init_a, t->init_b); break;
      case RT_INIT_UNIFORM: x = t->init_a + (t->init_b - t->init_a) * rt_rng_uniform(key, li); break;
      }
      switch (t->dtype) {
      case RT_F32: ((float *)dst)[i] = (float)x; break;
      case RT_F64: ((double *)dst)[i] = x; break;
      case RT_BF16: ((uint16_t *)dst)[i] = rt_f32_to_bf16((float)x); break;
      }
    }
  }
}

/* ---- a device program's host tensors ---- */

/* The tensor of hp that is p's tensor t (t points into p->tensors). */
static const RtTensor *htensor(const RtRun *r, const RtTensor *t) { return &r->hp->tensors[t - r->p->tensors]; }
char *rt_run_hptr(const RtRun *r, const RtTensor *t) { return r->hmem + htensor(r, t)->offset; }

int64_t rt_tensor_bytes(const RtTensor *t) { return rt_tensor_numel(t) * (int64_t)rt_dtype_size(t->dtype); }

char *rt_ctx_host_mem(RtCtx *ctx) { return ctx->host_mem; }

/* A device program's tensor where the program keeps it: to the device or, offloaded (t->host),
 * to its host allocation; and back. */
static void put_tensor(RtRun *r, const RtTensor *t, const void *src) {
  if (t->host) memcpy(r->ctx.host_mem + t->offset, src, (size_t)rt_tensor_bytes(t));
  else r->dev->upload(&r->ctx, r->mem + t->offset, src, rt_tensor_bytes(t));
}
static void get_tensor(RtRun *r, const RtTensor *t, void *dst) {
  if (t->host) {
    r->dev->sync(&r->ctx); /* (the step's host work is done when it returns; its device work too) */
    memcpy(dst, r->ctx.host_mem + t->offset, (size_t)rt_tensor_bytes(t));
  } else {
    r->dev->download(&r->ctx, dst, r->mem + t->offset, rt_tensor_bytes(t));
  }
}

void rt_run_to_dev(RtRun *r, const RtTensor *t) {
  if (r->dev && t && rt_tensor_held(r->p, t, rt_ctx_coord(&r->ctx, RT_AX_PP))) put_tensor(r, t, rt_run_hptr(r, t));
}
static void from_dev(RtRun *r, const RtTensor *t) {
  if (r->dev && t && rt_tensor_held(r->p, t, rt_ctx_coord(&r->ctx, RT_AX_PP))) get_tensor(r, t, rt_run_hptr(r, t));
}
void rt_run_from_dev(RtRun *r, const RtTensor *t) { from_dev(r, t); }
void rt_run_check_device_flags(RtRun *r, const char *what) {
  if (!r->dev || !r->p->workspace_bytes || r->p->workspace_bytes() < 4) return; /* a program without them */
  int32_t flags = 0;
  r->dev->download(&r->ctx, &flags, r->mem + r->p->mem_bytes, 4);
  if (!flags) return;
  rt_rank_error("%s at step %lld: the GPU kernels found %s%s%s (flags 0x%x)", what,
                (long long)r->ctx.step, flags & 1 ? "a token id outside the embedding table" : "",
                (flags & 3) == 3 ? " and " : "", flags & 2 ? "a target outside the vocabulary" : "", (unsigned)flags);
}

void rt_run_derive_copies(RtRun *r, const RtTensor *param) {
  const RtProgram *p = r->p;
  for (int k = 0; k < p->ntensors; k++) {
    const RtTensor *t = &p->tensors[k];
    if (t->kind != RT_T_COPY || (param && &p->tensors[t->copy_of] != param)) continue;
    const RtTensor *src = &p->tensors[t->copy_of];
    int64_t ldims[RT_MAX_RANK], lcopy[RT_MAX_RANK];
    if (src->kind != RT_T_PARAM || src->dtype != RT_F32 || t->dtype != RT_BF16 ||
        rt_tensor_logical_dims(p, src, ldims) != rt_tensor_logical_dims(p, t, lcopy))
      rt_bug("the copy %s is no bf16 copy of an f32 parameter (%s)", t->name, src->name);
    int held = rt_tensor_held(p, t, rt_ctx_coord(&r->ctx, RT_AX_PP));
    const float *x = (const float *)rt_run_hptr(r, src);
    uint16_t *y = (uint16_t *)rt_run_hptr(r, t);
    int64_t n = rt_tensor_numel(t);
    if (rt_tensor_numel(src) != n) {
      /* the f32 master kept as this rank's shard (on the host: plan offload under ZeRO, passes/zero_offload.c;
       * on the device: ZeRO 1 / 2's split masters, passes/zero_master.c),
       * the copy whole over the group: the copy's elements of the gathered logical parameter (a
       * collective: every rank joins it, those of a pipeline stage without the tensor too, as for a
       * checkpoint) */
      float *whole = rt_xmalloc((size_t)rt_tensor_logical_dims(p, src, ldims) * sizeof(float));
      rt_tensor_gather(&r->ctx, p, src, x, whole);
      int coord[RT_AX_COUNT];
      rt_ctx_coords(&r->ctx, coord);
      for (int64_t i = 0; held && i < n; i++) {
        int64_t li = rt_tensor_logical_index(p, t, coord, i);
        y[i] = li < 0 ? 0 : rt_f32_to_bf16(whole[li]);
      }
      free(whole);
      if (!held) continue;
    } else {
      if (!held) continue;
      for (int64_t i = 0; i < n; i++) y[i] = rt_f32_to_bf16(x[i]); /* the device's cast: nearest, ties to even */
    }
    rt_run_to_dev(r, t);
  }
}

void rt_run_kinds_to_dev(RtRun *r, int kinds) {
  for (int k = 0; r->dev && k < r->p->ntensors; k++)
    if (kinds >> r->p->tensors[k].kind & 1) rt_run_to_dev(r, &r->p->tensors[k]);
}
static void kinds_from_dev(RtRun *r, int kinds) {
  for (int k = 0; r->dev && k < r->p->ntensors; k++)
    if (kinds >> r->p->tensors[k].kind & 1) from_dev(r, &r->p->tensors[k]);
}

RtProgram *rt_host_program(const RtProgram *p, int64_t *bytes) {
  RtProgram *hp = rt_xmalloc(sizeof *hp);
  *hp = *p;
  RtTensor *ts = rt_xmalloc((size_t)(p->ntensors > 0 ? p->ntensors : 1) * sizeof *ts);
  int64_t off = 0;
  for (int k = 0; k < p->ntensors; k++) {
    ts[k] = p->tensors[k];
    ts[k].offset = off;
    off += (rt_tensor_bytes(&ts[k]) + 63) / 64 * 64;
  }
  hp->tensors = ts;
  if (p->logits_tensor && p->logits_tensor >= p->tensors && p->logits_tensor < p->tensors + p->ntensors)
    hp->logits_tensor = &ts[p->logits_tensor - p->tensors];
  *bytes = off;
  return hp;
}

void rt_host_program_free(RtProgram *hp) {
  if (!hp) return;
  free((void *)hp->tensors);
  free(hp);
}

/* ---- batches: each rank's block of the logical [gbatch, gseq] tokens and targets ---- */

/* The plain layout: sequences split over dp along dim 0, whole sequences: rt_data_batch reads
 * this rank's slice directly. */
static int dp_rows_only(const RtProgram *p, const RtTensor *t) {
  if (!t->shard.sharded) return 1;
  unsigned mask = rt_tensor_split_mask(p, t);
  return (mask == 0 || (mask == RT_MESH_DP && t->shard.split[0] == RT_AX_DP && t->shard.blocks[0] <= 1));
}

void rt_run_load_batch(RtRun *r, RtData *d, int64_t pos) {
  const RtProgram *p = r->p;
  int32_t *tok = (int32_t *)rt_run_hptr(r, r->tokens), *tgt = (int32_t *)rt_run_hptr(r, r->targets);
  if (!r->multi) {
    rt_data_batch(d, pos, p->batch, r->ctx.dp_rank, tok, tgt);
    rt_run_to_dev(r, r->tokens);
    rt_run_to_dev(r, r->targets);
    return;
  }
  int dp = rt_tensor_split_mask(p, r->tokens) & RT_MESH_DP ? r->ctx.dp_rank : 0;
  if (dp_rows_only(p, r->tokens) && dp_rows_only(p, r->targets) &&
      rt_tensor_split_mask(p, r->tokens) == rt_tensor_split_mask(p, r->targets)) {
    rt_data_batch(d, pos, r->tokens->dims[0], dp, tok, tgt);
    rt_run_to_dev(r, r->tokens);
    rt_run_to_dev(r, r->targets);
    return;
  }
  /* any other layout (sequence-parallel tokens, ...): the whole batch, then this rank's block */
  size_t n = (size_t)(r->gbatch * r->gseq);
  int32_t *lt = rt_xmalloc(n * sizeof *lt), *lg = rt_xmalloc(n * sizeof *lg);
  rt_data_batch(d, pos, r->gbatch, 0, lt, lg);
  rt_tensor_scatter(&r->ctx, p, r->tokens, lt, tok);
  rt_tensor_scatter(&r->ctx, p, r->targets, lg, tgt);
  rt_run_to_dev(r, r->tokens);
  rt_run_to_dev(r, r->targets);
  free(lt);
  free(lg);
}

void rt_run_put_input(RtRun *r, const RtTensor *t, double v) {
  if (!t) return;
  put_scalar(r->hmem, htensor(r, t), v);
  rt_run_to_dev(r, t);
}
double rt_run_get_result(RtRun *r, const RtTensor *t) {
  if (!t) return NAN;
  from_dev(r, t);
  return get_scalar(r->hmem, htensor(r, t));
}

/* The writer's snapshot buffer, large enough for the parameters and optimizer state at hp's offsets. */
static char *snapshot_buffer(RtRun *r) {
  const RtProgram *hp = r->hp;
  int64_t end = 0;
  for (int k = 0; k < hp->ntensors; k++) {
    const RtTensor *t = &hp->tensors[k];
    if ((t->kind == RT_T_PARAM || t->kind == RT_T_STATE) && t->offset + rt_tensor_bytes(t) > end)
      end = t->offset + rt_tensor_bytes(t);
  }
  return rt_run_snapshot_buffer(r, (size_t)end + 64);
}

/* Copies n bytes of dtype values and checks the copy for NaN / Inf a cache-sized chunk at a time,
 * while it is still in cache (one pass over memory, not two); 1 when one is found. */
static int copy_checked(char *dst, const char *src, int64_t n, int dtype) {
  int64_t es = (int64_t)rt_dtype_size((RtDType)dtype), chunk = (256 << 10) / es * es;
  int bad = 0;
  for (int64_t o = 0; o < n; o += chunk) {
    int64_t k = n - o < chunk ? n - o : chunk;
    memcpy(dst + o, src + o, (size_t)k);
    if (!bad && rt_first_nonfinite(dst + o, dtype, k / es) >= 0) bad = 1;
  }
  return bad;
}

/* The parameters and optimizer state (with coord: those this rank writes into a sharded
 * checkpoint) at hp's offsets in the writer's snapshot buffer (the rest of it untouched):
 * downloaded straight into it from a device, copied from a CPU program's memory. *bad: whether
 * one holds NaN / Inf. The background writer writes it while training changes the tensors. */
static char *snapshot(RtRun *r, const int *coord, int *bad) {
  const RtProgram *hp = r->hp;
  char *s = snapshot_buffer(r);
  *bad = 0;
  for (int k = 0; k < r->p->ntensors; k++) {
    const RtTensor *t = &r->p->tensors[k], *h = htensor(r, t);
    if (t->kind != RT_T_PARAM && t->kind != RT_T_STATE) continue;
    if (coord && !rt_ckpt_shard_writes(hp, (int)(h - hp->tensors), coord)) continue; /* another rank writes it */
    if (r->dev) {
      get_tensor(r, t, s + h->offset);
      *bad |= rt_first_nonfinite(s + h->offset, h->dtype, rt_tensor_numel(h)) >= 0;
    } else {
      *bad |= copy_checked(s + h->offset, r->hmem + h->offset, rt_tensor_bytes(t), t->dtype);
    }
  }
  return s;
}

void rt_run_snapshot_prepare(RtRun *r) {
  if (!r->o.save_to || rt_ckpt_sync() || (r->multi && !r->sharded)) return;
  double t0 = rt_now();
  char *s = snapshot_buffer(r);
  int coord[RT_AX_COUNT];
  if (r->sharded) rt_ctx_coords(&r->ctx, coord);
  for (int k = 0; k < r->hp->ntensors; k++) { /* the pages a snapshot fills, mapped now rather than in a step */
    const RtTensor *h = &r->hp->tensors[k];
    if ((h->kind == RT_T_PARAM || h->kind == RT_T_STATE) && (!r->sharded || rt_ckpt_shard_writes(r->hp, k, coord)))
      memset(s + h->offset, 0, (size_t)rt_tensor_bytes(h));
  }
  if (r->ctx.rank == 0 && rt_now() - t0 > 0.1)
    printf("checkpoint: snapshot buffer mapped in %.2f s\n", rt_now() - t0);
}

const RtTensor *rt_first_nonfinite_tensor(const RtProgram *hp, const char *mem, int kinds, const int *coord,
                                          int pp_coord, int64_t *elem) {
  for (int k = 0; k < hp->ntensors; k++) {
    const RtTensor *t = &hp->tensors[k];
    if (!(kinds >> t->kind & 1) || (coord && !rt_ckpt_shard_writes(hp, k, coord))) continue;
    if (!rt_tensor_held(hp, t, pp_coord)) continue; /* another stage's bytes */
    int64_t i = rt_first_nonfinite(mem + t->offset, t->dtype, rt_tensor_numel(t));
    if (i >= 0) {
      *elem = i;
      return t;
    }
  }
  return NULL;
}

void rt_run_diverged(RtRun *r, int64_t s, const char *what) {
  rt_run_save_wait(r); /* a checkpoint being written was checked when it was taken: it completes */
  int kinds = 1 << RT_T_PARAM | 1 << RT_T_STATE;
  kinds_from_dev(r, kinds);
  int64_t el = 0;
  const RtTensor *t = rt_first_nonfinite_tensor(r->hp, r->hmem, kinds, NULL, rt_ctx_coord(&r->ctx, RT_AX_PP), &el);
  char tensor[400] = "";
  if (t)
    snprintf(tensor, sizeof tensor, "; %s%stensor '%s' holds %s at element %lld", r->multi ? "on this rank " : "",
             r->multi ? "its block of " : "", t->name, rt_nonfinite_name(r->hmem + t->offset, t->dtype, el),
             (long long)el);
  char *last = r->o.save_to ? rt_ckpt_find(r->o.save_to) : NULL;
  char *newest = last ? rt_xprintf("the newest checkpoint is '%s': resume from it with a lower learning rate", last)
                      : rt_xstrdup("no checkpoint was written");
  if (r->ctx.rank == 0 || t) {
    char rank[32] = "";
    if (r->multi) snprintf(rank, sizeof rank, "rank %d, ", r->ctx.rank);
    fprintf(stderr,
            "error: %sstep %lld: %s%s: training diverged; stopping without writing a checkpoint of this state (%s)\n",
            rank, (long long)s, what, tensor, newest);
  }
  free(newest);
  free(last);
  fflush(stdout);
  fflush(stderr);
  exit(1);
}

static void save(RtRun *r);
void rt_run_save(RtRun *r) {
  if (!r->o.save_to) return;
  rt_stop_save_begin(); /* (a stop signal waits for it: stop.c) */
  save(r);
  rt_stop_save_end();
}

static void save(RtRun *r) {
  double tw = rt_now();
  rt_run_save_wait(r); /* the previous checkpoint is complete first */
  double t0 = rt_now();
  int kinds = 1 << RT_T_PARAM | 1 << RT_T_STATE;
  int64_t el = 0;
  const char *diverged = "a parameter or optimizer state about to be checkpointed is not finite";
  if (r->multi && !r->sharded) { /* logical: gathered whole on every rank, written by rank 0 */
    kinds_from_dev(r, kinds);
    /* never a checkpoint with NaN / Inf: every rank checks its blocks, all stop together */
    if (rt_dist_any(&r->ctx, rt_first_nonfinite_tensor(r->hp, r->hmem, kinds, NULL, rt_ctx_coord(&r->ctx, RT_AX_PP), &el) != NULL))
      rt_run_diverged(r, r->st.step, diverged);
    char *lmem = rt_xcalloc((size_t)r->lbytes + 64, 1);
    rt_gather_tensors(&r->ctx, r->hp, r->lp, r->hmem, lmem, kinds);
    if (r->ctx.rank != 0) {
      free(lmem);
      return;
    }
    rt_run_save_async(r, r->lp, lmem);
  } else {
    /* this rank's tensors only; a synchronous write (SHARDRT_CKPT_SYNC=1) reads them in place */
    int coord[RT_AX_COUNT], *mine = NULL; /* sharded: only the tensors this rank writes (every one is checked by its writer) */
    if (r->sharded) rt_ctx_coords(&r->ctx, coord), mine = coord;
    int bad;
    char *snap = rt_ckpt_sync() && !r->dev ? NULL : snapshot(r, mine, &bad);
    if (!snap) { /* synchronous: written from the training memory itself */
      snap = r->hmem;
      bad = rt_first_nonfinite_tensor(r->hp, snap, kinds, mine, rt_ctx_coord(&r->ctx, RT_AX_PP), &el) != NULL;
    }
    if (r->multi ? rt_dist_any(&r->ctx, bad) : bad) rt_run_diverged(r, r->st.step, diverged);
    if (!r->multi) {
      rt_run_save_async(r, r->hp, snap);
    } else { /* sharded: rank 0 makes the temp directory, then every rank writes its file into it */
      RtShardSave *j = rt_xcalloc(1, sizeof *j);
      *j = (RtShardSave){.p = r->hp, .mem = snap, .mesh = r->dist.mesh, .rank = r->ctx.rank, .world = r->ctx.world,
                         .dir = rt_xstrdup(r->o.save_to), .st = r->st, .keep = (int)r->o.keep};
      if (!r->pid0) r->pid0 = (int)rt_dist_bcast_u32(&r->ctx, (int64_t)getpid());
      if (r->ctx.rank == 0) j->tmp = rt_ckpt_shard_tmp(r->o.save_to, r->st.step, 0, r->pid0);
      rt_dist_barrier(&r->ctx);
      if (r->ctx.rank != 0) j->tmp = rt_ckpt_shard_tmp(r->o.save_to, r->st.step, r->ctx.rank, r->pid0);
      rt_run_save_async_shard(r, j);
      if (r->ctx.rank != 0) return;
    }
  }
  char waited[64] = "";
  if (t0 - tw > 0.01) snprintf(waited, sizeof waited, " (after %.2f s waiting for the previous one)", t0 - tw);
  printf("checkpoint: %s/step_%08lld: %s in %.2f s%s%s%s\n", r->o.save_to, (long long)r->st.step,
         rt_ckpt_sync() ? "snapshot and write" : "snapshot", rt_now() - t0, waited,
         rt_ckpt_sync() ? "" : ", writing in the background", r->sharded ? " (sharded: every rank its blocks)" : "");
  fflush(stdout);
}

void rt_run_load(RtRun *r, const char *path, int full, RtTrainState *st) {
  int kinds = 1 << RT_T_PARAM | (full ? 1 << RT_T_STATE : 0);
  if (!r->multi && !rt_ckpt_is_sharded(path)) {
    rt_ckpt_load(r->hp, r->hmem, path, full, st);
  } else { /* every rank reads the pieces of its blocks, whatever layout wrote them */
    int coord[RT_AX_COUNT];
    rt_ctx_coords(&r->ctx, coord);
    rt_ckpt_load_local(r->hp, r->hmem, coord, path, full, st);
  }
  rt_run_kinds_to_dev(r, kinds);
  rt_run_derive_copies(r, NULL); /* made from the loaded parameters, never read from the checkpoint */
}

void rt_run_dump(RtRun *r, const char *path) {
  kinds_from_dev(r, 0xf);
  if (!r->multi) {
    if (r->ctx.rank == 0) rt_dump_tensors(r->hp, r->hmem, path, &r->st);
    return;
  }
  char *lmem = rt_xcalloc((size_t)r->lbytes + 64, 1);
  rt_gather_tensors(&r->ctx, r->hp, r->lp, r->hmem, lmem, 0xf);
  if (r->ctx.rank == 0) rt_dump_tensors(r->lp, lmem, path, &r->st);
  free(lmem);
}

