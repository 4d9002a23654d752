/* runtime/train/train.h — the trainer's parts (internal to runtime/train/).
 *
 *   files.h  the checkpoint files, without communication (util.c, json.c, safetensors.c, ckpt.c,
 *            ckpt_shard.c, layout.c: errors, JSON, safetensors, checkpoints, local <-> logical)
 *   data.c   token shards (llm.c .bin, uint16 / uint32) and raw bytes, globs, batches
 *   dist.c   across ranks: bootstrap, mesh, groups; local (sharded) <-> logical tensors moved
 *   main.c   rt_train_main (with flags.c, tensors.c, eval.c, log.c: run.h)
 */
#ifndef SHARDRT_TRAIN_H
#define SHARDRT_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "../comm/bootstrap.h"
#include "ctx.h"
#include "files.h"

/* ---- data.c ---- */

typedef struct {
  char *path;         /* file name as given / globbed */
  unsigned char *map; /* the mapped file, map_bytes long */
  size_t map_bytes;   /* bytes */
  int64_t data_off;   /* bytes: 1024 for shards, 0 for raw bytes */
  int elem;           /* bytes per token: 1 raw byte, 2 uint16, 4 uint32 */
  int64_t ntok;       /* tokens in the file */
} RtDataFile;

typedef struct {
  int file;           /* index into files */
  int64_t begin, end; /* tokens [begin, end) of that file */
  int64_t first_win;  /* windows before this segment (prefix sum) */
  int64_t nwin;       /* windows of T+1 tokens at stride T in it */
} RtSegment;

typedef struct {
  const char *what;  /* "--data" or "--val", for messages */
  RtDataFile *files; /* [nfiles], sorted by name */
  int nfiles;
  RtSegment *segs; /* [nsegs] */
  int nsegs;
  int64_t T;          /* tokens per sequence (targets need T+1) */
  int64_t ntok;       /* tokens in all segments */
  int64_t nwin;       /* windows in all segments */
  int shuffle;        /* 1: order windows by a per-epoch permutation of the seed */
  uint64_t seed;      /* data order seed */
  int64_t perm_epoch; /* epoch perm holds, -1 none */
  int64_t *perm;      /* [nwin] window order of perm_epoch */
} RtData;

typedef struct {
  int64_t T;      /* tokens per sequence */
  int64_t vocab;  /* token ids must be < vocab */
  int byte_level; /* files without a shard magic are raw bytes */
} RtDataOpts;

/* Opens every file the path or glob names (sorted), validates headers and token ids. Errors
 * (no match, unreadable, bad header, token >= vocab, too few tokens) are user errors naming the
 * flag and the file. */
void rt_data_open(RtData *d, const char *what, const char *spec, const RtDataOpts *o);
/* Moves the last frac of the last file of train into val (opened anew on the same file).
 * Returns 0 (val left empty) when the tail would hold no whole window. */
int rt_data_hold_out(RtData *train, RtData *val, double frac, const RtDataOpts *o);
/* Sequence g of the data's global order (epoch g / nwin): tokens[0..T] (T+1 values). */
void rt_data_sequence(RtData *d, int64_t g, int32_t *tokens);
/* The B sequences of this dp rank for the batch that starts at global sequence pos (the global
 * batch is B * dp_size sequences; rank r reads pos + r*B ...): inputs [B, T], targets [B, T]. */
void rt_data_batch(RtData *d, int64_t pos, int64_t B, int dp_rank, int32_t *inputs, int32_t *targets);
void rt_data_free(RtData *d);

/* ---- dist.c ---- */

typedef struct RtComm RtComm;
typedef struct {
  int booted;   /* rt_boot_init ran (launched, or the program needs several ranks) */
  RtBoot boot;  /* rank, world, launcher */
  MeshMap mesh; /* the program's mesh on the launched ranks */
  RtComm *comm; /* NULL in a single process */
} RtDist;

/* Under a launcher or for a multi-rank program: bootstraps, checks the launched world against the
 * program's mesh (a user error naming both, before anything else), opens the comm and every group,
 * fills ctx's rank, coordinates and groups. A plain single process is left untouched. */
void rt_dist_init(RtDist *d, int *argc, char ***argv, const RtProgram *p, RtCtx *ctx);
void rt_dist_free(RtDist *d, RtCtx *ctx); /* a barrier, then closes everything */
void rt_dist_barrier(RtCtx *ctx);
/* Whether flag is non-zero on any rank (collective over the world; a single process: flag). */
int rt_dist_any(RtCtx *ctx, int flag);
/* flags[0..n-1] (n <= 8) each made "non-zero on any rank", in one collective. */
void rt_dist_any_n(RtCtx *ctx, int *flags, int n);
/* Rank 0's v (0 <= v < 2^32) on every rank (collective over the world). */
int64_t rt_dist_bcast_u32(RtCtx *ctx, int64_t v);
void rt_ctx_coords(const RtCtx *ctx, int coord[RT_AX_COUNT]);
/* local = this rank's block of logical; logical = the whole tensor from every rank's local
 * (collective over the group splitting t: every member calls it). */
void rt_tensor_scatter(const RtCtx *ctx, const RtProgram *p, const RtTensor *t, const void *logical, void *local);
void rt_tensor_gather(RtCtx *ctx, const RtProgram *p, const RtTensor *t, const void *local, void *logical);
/* One row of t (its leading dims flattened, the last dim whole): the local row holding logical row
 * `row` on this rank (-1: none here), and the logical row (as f32, the logical last dim's length) on
 * every member of t's group from each member's local row loc (NULL: none). One all-reduce of the row
 * (collective over the group, as rt_tensor_gather), not a gather of the tensor: sampling's logits. */
int64_t rt_tensor_local_row(const RtCtx *ctx, const RtProgram *p, const RtTensor *t, int64_t row);
void rt_tensor_gather_row(RtCtx *ctx, const RtProgram *p, const RtTensor *t, const void *loc, float *out);
/* The tensors of the kinds in `kinds` (bits 1 << RT_T_*) of p's logical program lp
 * (rt_logical_program) moved between the two layouts: gathered (collective) or scattered. */
void rt_gather_tensors(RtCtx *ctx, const RtProgram *p, const RtProgram *lp, const char *mem, char *lmem, int kinds);
void rt_scatter_tensors(const RtCtx *ctx, const RtProgram *p, const RtProgram *lp, const char *lmem, char *mem,
                        int kinds);

#endif
