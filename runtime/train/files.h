/* runtime/train/files.h — the trainer's checkpoint files, without communication: what
 * libshardrt_files holds (runtime/CMakeLists.txt), which `shardc ckpt` links (and libshardrt
 * with the rest of the trainer, train.h). Nothing declared here sends or waits for a message.
 *
 *   util.c         user errors (message once, exit 1), checked allocation, clocks, resident memory
 *   json.c         a small JSON reader (safetensors headers, index files)
 *   safetensors.c  writing and (defensively) reading safetensors files; NaN / Inf checks
 *   ckpt.c         safetensors checkpoints: atomic directories, per-layer names, resume
 *   ckpt_shard.c   sharded checkpoints: each rank's blocks, the index, any layout's loader
 *   ckpt_convert.c shardc ckpt info / convert (ckpt_tool.h)
 *   layout.c       a tensor's layout over the ranks: local <-> logical indices, the logical program
 *   ../base.c ../mesh.c ../dtype.c   the clock and rt_fatal, the mesh, the dtype table
 */
#ifndef SHARDRT_FILES_H
#define SHARDRT_FILES_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../base.h" /* rt_now, rt_fatal */
#include "../mesh.h"
#include "../program.h"

/* ---- util.c ---- */

/* Prints "error: <message>" on stderr (stdout flushed first) in one write. */
void rt_error_v(const char *fmt, va_list ap);
/* What precedes "error: " (NULL: nothing): "shardc ckpt: " for the checkpoint tool. */
extern const char *rt_error_tool;
/* User mistakes (a bad flag, a missing or malformed file) end the process with status 1 and never
 * return. Which of the two a call site uses is decided by who reaches it:
 *
 * rt_user_error: EVERY rank reaches it with the same text (a flag, the recipe, the corpus, a
 * logical checkpoint every rank reads; and every error of a single process or of `shardc ckpt`).
 * Rank 0 (or a process without a launcher) prints "error: <message>" and exits 1. Another rank
 * prints nothing and waits, at most RT_ERROR_WAIT_S (SHARDRT_ERROR_WAIT seconds), for the launcher to end it once rank 0 has
 * exited (mpirun ends the rest of a job when one rank exits non-zero; a SIGTERM, SIGINT or SIGUSR1
 * in the wait ends it with status 1 at once): the message appears once, not once per rank. Should
 * the wait run out (rank 0 did not reach it after all, or a launcher that lets the others run on)
 * it prints "error: rank R: <message>" itself and exits 1: never lost, never a hang.
 *
 * rt_rank_error: only SOME ranks may reach it (a rank's own checkpoint block or file, its own
 * device, its host): printed at once by the rank that hit it, as "error: rank R: <message>" in a
 * launched job of several ranks ("error: <message>" otherwise), exit 1. */
_Noreturn void rt_user_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void rt_rank_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define RT_ERROR_WAIT_S 10
/* Nonzero while the code this thread runs reads or writes what only some ranks do, where
 * rt_user_error's shared readers, writers and checks (safetensors.c, json.c) act as rt_rank_error:
 * a rank's own pieces of a sharded checkpoint (ckpt_shard.c rt_ckpt_load_local), its own file of
 * one (rt_ckpt_shard_write, on the writer thread). Per thread: training goes on beside the writer. */
extern _Thread_local int rt_error_per_rank;
/* The error paths' cleanups: code that holds allocations or descriptors across calls that may end in a user
 * error (the checkpoint loaders: a malformed file is found midway) registers one for them, newest on top,
 * and pops it (without running it) where it frees them itself; rt_user_error and rt_rank_error format their
 * message, then run this thread's registered cleanups, newest first, then exit. A trainer exits anyway; an
 * embedding that returns from the error leaks nothing (tests/fuzz/fuzz_trainer.c: exit wrapped, a longjmp
 * back to the harness, which before grew ~600 bytes an input). c lives in the registering frame. */
typedef struct RtOnError {
  void (*fn)(void *);
  void *arg;
  struct RtOnError *prev;
} RtOnError;
void rt_on_error(RtOnError *c, void (*fn)(void *), void *arg);
void rt_on_error_pop(RtOnError *c); /* c must be the newest (rt_bug otherwise) */
/* A bug in the runtime or in the program it was handed: prints and aborts. */
_Noreturn void rt_bug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *rt_xmalloc(size_t bytes);
void *rt_xcalloc(size_t n, size_t size);
char *rt_xstrdup(const char *s);
char *rt_xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int64_t rt_vm_hwm(void);                              /* peak resident bytes of this process (VmHWM), -1 if unknown */
int64_t rt_vm_rss(void);                              /* resident bytes now (VmRSS), -1 if unknown */
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
/* A logical checkpoint file s holds exactly the layers of stacked tensor t (t->dims[0] entries
 * "blocks.L.w"), or none (t whole, as older checkpoints hold it, or missing: the reader's error);
 * otherwise a user error: it comes from another model, with both layer counts (ckpt.c). */
void rt_ckpt_check_layers(const RtStFile *s, const RtProgram *p, const RtTensor *t);
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
 * --keep, not yet removed). A file SHARDRT_CKPT_STALL_MARK.K.go lets the stalled writer go on
 * (tests/e2e/stop.sh: signals during the save). */
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

/* ---- layout.c ---- */

int rt_program_degree(const RtProgram *p, int axis); /* RT_AX_* degree (>= 1) */
int rt_program_world(const RtProgram *p);            /* ranks the program was compiled for */
/* The logical tensor of t: dims (returns the element count); the mask of the axes splitting it;
 * the logical flat index of local element i on the rank with coordinates coord (-1: a padding row of
 * uneven pipeline stages, RT_BLOCKS_STAGES: no logical element). */
int64_t rt_tensor_logical_dims(const RtProgram *p, const RtTensor *t, int64_t *dims);
int rt_tensor_dim_axis(const RtProgram *p, const RtTensor *t, int d); /* the axis splitting dim d (degree > 1), else -1 */
int rt_tensor_dim_inner(const RtProgram *p, const RtTensor *t, int d); /* the inner axis splitting it again, else -1 */
/* The logical index along dim d of local index l on the rank at coord (not for RT_BLOCKS_STAGES dims). */
int64_t rt_tensor_dim_index(const RtProgram *p, const RtTensor *t, int d, const int coord[RT_AX_COUNT], int64_t l);
/* The same for any dim: -1 for a padding row of uneven pipeline stages. */
int64_t rt_tensor_dim_logical(const RtProgram *p, const RtTensor *t, int d, const int coord[RT_AX_COUNT], int64_t l);
unsigned rt_tensor_split_mask(const RtProgram *p, const RtTensor *t);
/* Whether the ranks of pipeline stage pp_coord hold t (RtTensor.stages): initialise, load, check
 * and checkpoint it. Elsewhere its bytes belong to another stage's values: never touched. */
int rt_tensor_held(const RtProgram *p, const RtTensor *t, int pp_coord);
int64_t rt_tensor_logical_index(const RtProgram *p, const RtTensor *t, const int coord[RT_AX_COUNT], int64_t i);
/* A copy of p whose tensors are the logical ones, packed from offset 0 (bytes: the buffer they
 * need); checkpoints and dumps write it. dist.c's rt_gather_tensors /
 * rt_scatter_tensors move tensors between the two layouts. */
RtProgram *rt_logical_program(const RtProgram *p, int64_t *bytes);
void rt_logical_program_free(RtProgram *lp);

#endif
