/* runtime/train/train.h — the trainer's parts (internal to runtime/train/).
 *
 *   util.c   user errors (message, exit 1), checked allocation, clocks, resident memory
 *   json.c   a small JSON reader (safetensors headers, index files)
 *   data.c   token shards (llm.c .bin, uint16 / uint32) and raw bytes, globs, batches
 *   safetensors.c  writing and (defensively) reading safetensors files; NaN / Inf checks
 *   ckpt.c   safetensors checkpoints: atomic directories, per-layer names, resume
 *   dist.c   across ranks: bootstrap, mesh, groups; local (sharded) <-> logical tensors
 *   main.c   rt_train_main (with flags.c, tensors.c, eval.c, log.c: run.h)
 */
#ifndef SHARDRT_TRAIN_H
#define SHARDRT_TRAIN_H

#include <stddef.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "../comm/bootstrap.h"
#include "../mesh.h"
#include "../program.h"
#include "ctx.h"

/* ---- util.c ---- */

/* A user mistake (bad flag, missing or malformed file): prints "error: ..." on stderr and
 * ends the process with status 1. Never returns. */
/* Prints "error: <message>" on stderr (stdout flushed first); rt_user_error then exits 1. */
void rt_error_v(const char *fmt, va_list ap);
_Noreturn void rt_user_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A bug in the runtime or in the program it was handed: prints and aborts. */
_Noreturn void rt_bug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *rt_xmalloc(size_t bytes);
void *rt_xcalloc(size_t n, size_t size);
char *rt_xstrdup(const char *s);
char *rt_xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double rt_now(void);                                  /* seconds, monotonic */
int64_t rt_vm_hwm(void);                              /* peak resident bytes of this process (VmHWM), -1 if unknown */
int64_t rt_vm_rss(void);                              /* resident bytes now (VmRSS), -1 if unknown */
void rt_fmt_bytes(char *out, size_t n, double bytes); /* "123.4 MiB" */
const char *rt_dtype_st_name(int dtype); /* safetensors dtype string: "F32", "BF16", ... */
int rt_dtype_from_st_name(const char *name); /* the RT_* dtype of a safetensors dtype string, -1: none */
int64_t rt_tensor_numel(const RtTensor *t);
const RtTensor *rt_find_tensor(const RtProgram *p, const char *name);

/* ---- json.c ---- */

enum { RT_JSON_NULL, RT_JSON_BOOL, RT_JSON_NUM, RT_JSON_STR, RT_JSON_ARR, RT_JSON_OBJ };

typedef struct RtJson RtJson;
struct RtJson {
  int kind;       /* RT_JSON_* */
  double num;     /* NUM: value; BOOL: 0 / 1 */
  int64_t inum;   /* NUM: value when it is an integer that fits (is_int) */
  int is_int;     /* NUM: the text was an integer in int64 range */
  char *str;      /* STR: the decoded string (NUL-terminated) */
  int n;          /* ARR, OBJ: elements */
  char **keys;    /* OBJ: [n] member names */
  RtJson **items; /* ARR, OBJ: [n] elements / member values */
};

/* Parses text[0..len). Returns NULL and writes a message ("at byte 12: expected ':'") to err
 * when the text is not one JSON value. */
RtJson *rt_json_parse(const char *text, size_t len, char *err, size_t errn);
const RtJson *rt_json_get(const RtJson *obj, const char *key); /* NULL if absent or not an object */
void rt_json_free(RtJson *j);
/* Writes s as a JSON string literal (quotes and escapes). */
void rt_json_write_str(FILE *f, const char *s);

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

/* ---- safetensors.c ---- */

/* One tensor of a file being written. */
typedef struct {
  const char *name;            /* tensor name */
  int dtype;                   /* RT_* */
  int rank;                    /* dims used */
  int64_t dims[RT_MAX_RANK];   /* shape */
  const void *data;            /* bytes bytes; NULL: made by pack */
  int64_t bytes;               /* numel x dtype size */
  void (*pack)(const void *ctx, void *dst); /* writes the piece's bytes into dst (when data is NULL) */
  const void *pack_ctx;
} RtStPiece;

/* Writes path (created or truncated, fsynced, not atomic by itself): the header with `meta` (the
 * text `"__metadata__":{...}`, or NULL) and the pieces, packed in order (a piece without data is
 * packed into one reused buffer just before it is written). Returns the data bytes.
 * I/O failures are user errors naming the file. */
int64_t rt_st_write(const char *path, const RtStPiece *e, int n, const char *meta);

typedef struct {
  const char *path;   /* file (not owned) */
  int fd;
  int64_t data_start; /* bytes: 8 + header length */
  int64_t data_bytes; /* bytes after the header */
  RtJson *hdr;        /* the parsed header */
} RtStFile;

/* Opens and checks a safetensors file: the header parses, every entry has a known dtype and the
 * bytes its shape needs, and the entries tile the data region exactly (no gap, no overlap, no
 * trailing bytes). Violations are user errors naming the file and the tensor. */
void rt_st_open(RtStFile *s, const char *path);
void rt_st_close(RtStFile *s);
/* The data offset of tensor `name`, after checking its dtype and shape (errors name both). */
int64_t rt_st_find(RtStFile *s, const char *name, int dtype, const int64_t *dims, int rank);
/* Reads `bytes` at data offset `off` (of tensor `name`, for messages) into dst. */
void rt_st_pread(RtStFile *s, const char *name, int64_t off, void *dst, int64_t bytes);
/* rt_st_find, read the whole tensor into dst, and refuse it if it holds NaN or Inf. */
void rt_st_read(RtStFile *s, const char *name, int dtype, const int64_t *dims, int rank, void *dst);
/* A user error naming the file, the tensor and the element when data (n elements) is not finite. */
void rt_st_check_finite(const RtStFile *s, const char *name, const void *data, int dtype, int64_t n);
const char *rt_st_meta(const RtStFile *s, const char *key); /* a __metadata__ string (user error if absent) */
uint64_t rt_st_meta_u64_or(const RtStFile *s, const char *key, uint64_t dflt); /* dflt when absent */
uint64_t rt_st_meta_u64(const RtStFile *s, const char *key);
/* The first element of data (n elements of dtype) that is NaN or Inf, or -1 (integers: -1). */
int64_t rt_first_nonfinite(const void *data, int dtype, int64_t n);
const char *rt_nonfinite_name(const void *data, int dtype, int64_t i); /* "NaN" or "Inf" */

/* ---- ckpt.c ---- */

typedef struct {
  int64_t step;     /* steps completed */
  int64_t steps;    /* the schedule's total steps */
  uint64_t seed;    /* run seed (init and data order) */
  int64_t data_pos; /* sequences of the training order consumed (global) */
  uint64_t rng;     /* sampling RNG state */
  int64_t batch;    /* global batch, sequences */
  int64_t seq;      /* sequence length */
  double loss;      /* last training loss (NaN: none) */
  int64_t skipped;  /* steps whose update was skipped (non-finite gradients): the optimizer's step is step - skipped */
  int64_t skip_run; /* of which the last ones in a row */
} RtTrainState;

/* Name of layer `layer` of a stacked tensor: "adam_m:blocks.attention.w" -> "adam_m:blocks.3.attention.w". */
void rt_layer_name(char *out, size_t n, const char *name, int64_t layer);
/* The "__metadata__":{...} text of a checkpoint file of `part` (model, optimizer, dump, ...). Caller frees. */
char *rt_ckpt_meta(const RtProgram *p, const RtTrainState *st, const char *part);
#define RT_SHARD_INDEX "index.json" /* a sharded checkpoint's index (ckpt_shard.c) */
#define RT_SHARD_FORMAT "shardc-sharded-1"
/* Whether dir is a checkpoint: it holds a model.safetensors (logical) or an index.json (sharded). */
int rt_ckpt_is_complete(const char *dir);
/* Makes dir, removes the temp directories a crash left in it, and makes a fresh temp directory
 * DIR/.tmp-step_N-TAG for step's checkpoint. Returns its path (caller frees). */
char *rt_ckpt_prepare(const char *dir, int64_t step, const char *tag);
/* Makes the temp directory tmp DIR/step_N atomically (fsync, rename over a previous one, fsync
 * DIR), then removes all but the newest `keep` checkpoints (0: all). */
void rt_ckpt_commit(const char *dir, const char *tmp, int64_t step, int keep);
/* A test hook (tests/e2e/ckpt_kill.sh): SHARDRT_CKPT_STALL=POINT:STEP:RANK[,POINT:STEP:RANK...]
 * stops rank RANK's checkpoint writer of step STEP at POINT, after creating the file
 * SHARDRT_CKPT_STALL_MARK.K for the list's K-th entry (K from 1; once: an existing mark disarms its
 * entry, so a restarted run writes on and stops at the next entry), so that a test can kill -9
 * the job there. Points in write order: start, piece (half of the rank's file written), file
 * (written, not yet renamed), renamed, index (rank 0: every file there and index.json written),
 * commit (rank 0: step_N renamed into place), keep (rank 0: an old checkpoint moved aside by
 * --keep, not yet removed). */
void rt_ckpt_stall(const char *point, int64_t step, int rank);
int rt_ckpt_stall_armed(const char *point, int64_t step, int rank);
void rt_fsync_path(const char *path, int dir); /* fsync a file (dir 0) or directory (1); user error if it fails */
/* --save-to at the start of a run: makes dir (and its parents) and checks that a file can be
 * created in it; a user error naming it otherwise, before any training. */
void rt_ckpt_check_dir(const char *dir);
/* Writes DIR/step_NNNNNNNN/{model,optimizer}.safetensors and model.safetensors.index.json,
 * atomically (a temp directory, fsync, rename), then removes all but the newest `keep` (0: all). */
void rt_ckpt_save(const RtProgram *p, const char *mem, const char *dir, const RtTrainState *st, int keep);
/* Writes path: the Hugging Face weight map of a single-file checkpoint (every name in model.safetensors). */
void rt_ckpt_write_hf_index(const char *path, const char *const *names, int n, int64_t total, int64_t step);
/* Writes every tensor of the program (params, state, inputs, results), whole, to one
 * safetensors file at path (not atomic: for tests and debugging, --dump-steps). */
void rt_dump_tensors(const RtProgram *p, const char *mem, const char *path, const RtTrainState *st);
/* The newest complete checkpoint directory in dir (a step_* child, or dir itself when it holds a
 * model.safetensors). Returns NULL when there is none. Caller frees. */
char *rt_ckpt_find(const char *dir);
/* Loads the parameters (and with full=1 the optimizer state and the trainer state st) from the
 * checkpoint directory or .safetensors file path. Every parameter must be present with its
 * dtype and shape; errors name the file and the tensor. */
void rt_ckpt_load(const RtProgram *p, char *mem, const char *path, int full, RtTrainState *st);

/* Whether optimizer-state or stacked tensor t is written per layer ("blocks.3.w") in a logical checkpoint. */
int rt_ckpt_per_layer(const RtProgram *p, const RtTensor *t);

/* ---- ckpt_shard.c ---- */

/* One rank's part of a sharded checkpoint (what its writer thread needs; nothing in it communicates). */
typedef struct {
  const RtProgram *p; /* this rank's program: tensors at their offsets in mem */
  const char *mem;    /* the snapshot of this rank's parameters and optimizer state */
  MeshMap mesh;       /* the program's mesh on the launched ranks */
  int rank, world;
  char *dir;          /* --save-to */
  char *tmp;          /* the step's shared temp directory (rt_ckpt_shard_tmp) */
  RtTrainState st;    /* step, data position, ... */
  int keep;           /* --keep */
} RtShardSave;

/* The temp directory of step's sharded checkpoint, DIR/.tmp-step_N-sharded-PID0 (pid0: rank 0's
 * pid, so two runs never share one): rank 0 makes it (after clearing a crash's leftovers); every
 * rank gets its path. Rank 0 calls it before a barrier, the others after. */
char *rt_ckpt_shard_tmp(const char *dir, int64_t step, int rank, int pid0);
/* Writes this rank's file; rank 0 then waits for every rank's, writes index.json and commits. */
void rt_ckpt_shard_write(const RtShardSave *j);
/* Whether the rank at coord writes tensor ti of p into a sharded checkpoint (one replica of each block). */
int rt_ckpt_shard_writes(const RtProgram *p, int ti, const int coord[RT_AX_COUNT]);
int rt_ckpt_is_sharded(const char *path); /* path (a directory) holds, or is, a sharded checkpoint */
/* Loads this rank's blocks (program p, rank at coord; parameters, and with full=1 the optimizer
 * state and the trainer state st) from a sharded or logical checkpoint directory, or a
 * .safetensors file, reading only the pieces that overlap them. */
void rt_ckpt_load_local(const RtProgram *p, char *mem, const int coord[RT_AX_COUNT], const char *path, int full,
                        RtTrainState *st);

/* index.json's text: the head (format, the "__metadata__":{...} text meta, world, mesh), each tensor
 * (layers: 1 when a logical checkpoint names its layers "blocks.3.w") followed by its pieces, the end. */
void rt_shard_index_head(FILE *f, const char *meta, int world, const int mesh[4]);
void rt_shard_index_tensor(FILE *f, int first, const char *name, int kind, int dtype, const int64_t *ld, int rank,
                           int layers);
void rt_shard_index_piece(FILE *f, int first, const char *file, const char *entry, const int64_t *start,
                          const int64_t *len, int rank);
void rt_shard_index_end(FILE *f, int ntensors);
/* A sharded checkpoint read one whole logical tensor at a time (shardc ckpt, ckpt_convert.c): its
 * index (parsed, format checked), and tensor `name` (the index's dtype, rank and logical dims)
 * assembled from its pieces into dst — pieces read with pread, checked to be disjoint, inside the
 * tensor and to cover it, their entries' dtype and shape checked; user errors name the file. */
typedef struct RtCkptSrc RtCkptSrc;
RtCkptSrc *rt_ckpt_src_open(const char *path);
const RtJson *rt_ckpt_src_index(const RtCkptSrc *s);
const char *rt_ckpt_src_index_path(const RtCkptSrc *s);
const char *rt_ckpt_src_dir(const RtCkptSrc *s); /* the step directory */
void rt_ckpt_src_read(RtCkptSrc *s, const char *name, int dtype, int rank, const int64_t *dims, void *dst);
void rt_ckpt_src_close(RtCkptSrc *s);

/* ---- dist.c ---- */

typedef struct RtComm RtComm;
typedef struct {
  int booted;   /* rt_boot_init ran (launched, or the program needs several ranks) */
  RtBoot boot;  /* rank, world, launcher */
  MeshMap mesh; /* the program's mesh on the launched ranks */
  RtComm *comm; /* NULL in a single process */
} RtDist;

int rt_program_degree(const RtProgram *p, int axis); /* RT_AX_* degree (>= 1) */
int rt_program_world(const RtProgram *p);            /* ranks the program was compiled for */
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
/* The logical tensor of t: dims (returns the element count); the mask of the axes splitting it;
 * the logical flat index of local element i on the rank with coordinates coord (-1: a padding row of
 * uneven pipeline stages, RT_BLOCKS_STAGES: no logical element). */
int64_t rt_tensor_logical_dims(const RtProgram *p, const RtTensor *t, int64_t *dims);
int rt_tensor_dim_axis(const RtProgram *p, const RtTensor *t, int d); /* the axis splitting dim d (degree > 1), else -1 */
int rt_tensor_dim_inner(const RtProgram *p, const RtTensor *t, int d); /* the inner axis splitting it again, else -1 */
/* The logical index along dim d of local index l on the rank at coord (not for RT_BLOCKS_STAGES dims). */
int64_t rt_tensor_dim_index(const RtProgram *p, const RtTensor *t, int d, const int coord[RT_AX_COUNT], int64_t l);
unsigned rt_tensor_split_mask(const RtProgram *p, const RtTensor *t);
/* Whether the ranks of pipeline stage pp_coord hold t (RtTensor.stages): initialise, load, check
 * and checkpoint it. Elsewhere its bytes belong to another stage's values: never touched. */
int rt_tensor_held(const RtProgram *p, const RtTensor *t, int pp_coord);
int64_t rt_tensor_logical_index(const RtProgram *p, const RtTensor *t, const int coord[RT_AX_COUNT], int64_t i);
void rt_ctx_coords(const RtCtx *ctx, int coord[RT_AX_COUNT]);
/* local = this rank's block of logical; logical = the whole tensor from every rank's local
 * (collective over the group splitting t: every member calls it). */
void rt_tensor_scatter(const RtCtx *ctx, const RtProgram *p, const RtTensor *t, const void *logical, void *local);
void rt_tensor_gather(RtCtx *ctx, const RtProgram *p, const RtTensor *t, const void *local, void *logical);
/* A copy of p whose tensors are the logical ones, packed from offset 0 (bytes: the buffer they
 * need); checkpoints and dumps write it. Tensors of the kinds in `kinds` (bits 1 << RT_T_*) move
 * between the two layouts with rt_gather_tensors (collective) / rt_scatter_tensors. */
RtProgram *rt_logical_program(const RtProgram *p, int64_t *bytes);
void rt_logical_program_free(RtProgram *lp);
void rt_gather_tensors(RtCtx *ctx, const RtProgram *p, const RtProgram *lp, const char *mem, char *lmem, int kinds);
void rt_scatter_tensors(const RtCtx *ctx, const RtProgram *p, const RtProgram *lp, const char *lmem, char *mem,
                        int kinds);

#endif
