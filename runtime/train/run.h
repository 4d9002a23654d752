/* runtime/train/run.h — one training run: what rt_train_main's files share (internal to
 * runtime/train/; train.h lists the trainer's other parts).
 *
 *   main.c     rt_train_main: the run's init / free pairs and the step loop
 *   flags.c    the command line: flags, their defaults from the recipe, --help
 *   tensors.c  the run's tensors: initialisation, scalar inputs and results, batches, a device
 *              program's host copy, checkpoints and dumps of logical tensors
 *   eval.c     validation loss and sampling
 *   log.c      what rank 0 prints and logs: the start, a line per step and validation, the end
 *
 * A device program (p->device, --target cuda) keeps its allocation on the device: `mem` is a
 * device address the trainer never dereferences. Parameters are initialised (the same values as
 * the CPU trainer), inputs written and results, checkpoints, dumps and logits read in a compact
 * host copy of the tensor table (hp / hmem: every tensor once, no activations) and moved with
 * the device's upload / download. For a CPU program hp is p and hmem is mem: nothing moves.
 */
#ifndef SHARDRT_TRAIN_RUN_H
#define SHARDRT_TRAIN_RUN_H

#include "../device.h"
#include "../ops/coll_count.h"
#include "../ops/kern_count.h"
#include "train.h"

#define DEFAULT_VAL_FRACTION 0.1 /* of the last training file, held out when there is no --val */

/* The command line (flags.c), defaults from the program's recipe. */
typedef struct {
  const char *data, *val;  /* --data / --val specs (NULL: none) */
  const char *init_from;   /* --init-from path */
  const char *save_to;     /* --save-to directory */
  const char *resume;      /* --resume directory */
  const char *log;         /* --log file */
  const char *prompt;      /* --prompt text (byte-level sampling) */
  const char *dump_to;     /* --dump-to directory for --dump-steps */
  int64_t dump_steps;      /* write every tensor after each of the first N steps */
  int64_t steps;           /* schedule length */
  int64_t stop_at;         /* last step this run executes (stop_at_set; else steps) */
  int stop_at_set;         /* --stop-at given (0: no step, as --steps 0) */
  int64_t batch;           /* global batch, sequences (0: compiled) */
  int64_t eval_every;      /* steps (0: only at the end) */
  int64_t val_batches;     /* batches per validation (at most the validation data's: rt_run_val_held) */
  int val_batches_set;     /* --val-batches given */
  int64_t sample;          /* tokens to generate */
  int64_t ckpt_every;      /* steps (0: only at the end) */
  int64_t keep;            /* checkpoints kept (0: all) */
  int64_t threads;         /* compute threads */
  uint64_t seed;           /* run seed */
  double temperature;      /* sampling temperature (0: greedy) */
  int steps_set, seed_set; /* given on the command line */
  int data_set, val_set;   /* given on the command line */
  int save_set;            /* --save-to given on the command line */
  int ckpt_every_set;      /* --ckpt-every given */
  int keep_set, temperature_set; /* --keep, --temperature given */
  int threads_set;         /* --threads given */
  const char *trace;       /* --trace file (Chrome trace JSON), NULL: none */
  const char *compile_kernels; /* --compile-kernels ARCH: the device kernels into the cache, then exit */
  const char *ckpt_format; /* --ckpt-format: "sharded" or "logical" (NULL: sharded under several ranks) */
  const char *on_nonfinite; /* --on-nonfinite: "stop" or "skip" (default: the recipe's) */
  int skip;                /* 1: a step with non-finite gradients is skipped (flags.c decides it) */
  int64_t max_skips;       /* --max-skips: consecutive skipped steps after which the run stops */
  char twice[1024];        /* the warnings of flags given twice with two values (rank 0 prints them) */
  char others[512];        /* the flags given besides --compile-kernels ("--steps, --data"), for its warning */
  char save_buf[4096], resume_buf[4096]; /* --save-to / --resume without their trailing '/' (flags.c) */
} RtOpts;

typedef struct RtCkptWriter RtCkptWriter;

typedef struct {
  const RtProgram *p; /* the program */
  RtOpts o;           /* flags */
  RtCtx ctx;          /* rank coordinates and threads */
  char *mem;          /* the one allocation, mem_bytes */
  const RtTensor *tokens, *targets, *lr, *stepno, *loss,
      *gnorm;         /* inputs and results (lr, step, grad_norm may be NULL) */
  RtData train, val;  /* data; val.nwin == 0: no validation */
  int has_val;        /* 1: val holds windows */
  char val_desc[512]; /* what validation reads */
  FILE *log;          /* --log, rank 0 only */
  RtTrainState st;    /* step, data position, RNG */
  double peak;        /* FLOP/s the MFU is measured against */
  int64_t base_rss;   /* bytes resident before the allocation */
  RtDist dist;        /* ranks, mesh, comm (dist.c); untouched in a single process */
  int multi;          /* 1: the program spans several ranks (tensors are blocks of logical ones) */
  int sharded;        /* multi: checkpoints are written sharded (each rank its blocks; ckpt_shard.c) */
  char *auto_resume;  /* --resume auto: the checkpoint found in --save-to (owned; NULL: none) */
  int pid0;           /* sharded: rank 0's pid (names the checkpoint's temp directory) */
  int64_t gbatch, gseq; /* the logical batch: sequences per step (all dp ranks), tokens per sequence */
  RtProgram *lp;      /* multi: the logical program (checkpoints, dumps) */
  int64_t lbytes;     /* multi: bytes of the logical tensors */
  const RtDevice *dev; /* the program's device (NULL: a CPU program) */
  RtProgram *hp;      /* where tensors live on the host: p itself, or a device program's compact copy */
  char *hmem;         /* host tensors at hp's offsets: mem itself, or the compact copy's buffer */
  RtCkptWriter *writer; /* the background checkpoint writer (ckpt_async.c; NULL: none yet) */
} RtRun;

/* The steps this run executes and what the loop measured, for the summary. */
typedef struct {
  int64_t first, stop;  /* steps first..stop (none when stop < first) */
  double t_total;       /* seconds of the whole loop, validations and checkpoints included */
  double t_steady;      /* seconds in the steady steps (all but the first, unless it is the only one) */
  double comm_steady;   /* of which in the generated code's collectives */
  int64_t steady_steps; /* steps in t_steady */
  double last_val;      /* the last validation loss (NaN: none) */
  int64_t saved_at;     /* step of the last checkpoint written in the loop (-1: none) */
  int stopped;          /* the ranks agreed to stop on a signal (stop.c) after step `stop` */
  RtCollCounts colls;   /* what the first step's collectives moved on this rank (ops/coll_count.h) */
  int64_t colls_step;   /* that step (0: none ran) */
  int64_t colls_varied; /* a later step whose collectives differed from it (0: none) */
  uint64_t gemm_flops;  /* the first step's matmul FLOPs on this rank (ops/ops.h rt_matmul_flops) */
  int64_t kcalls[RT_KC_COUNT]; /* the first step's kernel calls on this rank by class (ops/kern_count.h) */
  int64_t kcalls_varied; /* a later step whose kernel calls differed from them (0: none) */
} RtLoop;

/* What one step printed and logged. */
typedef struct {
  int64_t step;        /* 1-based */
  double loss, lr;     /* the step's loss, the learning rate it used */
  double gnorm;        /* gradient norm (when the program computes it) */
  double seconds;      /* the step's time */
  double comm_seconds; /* of which in collectives */
  int skipped;         /* 1: the update was skipped (non-finite gradients, --on-nonfinite skip) */
  double tokens_per_s; /* global tokens / seconds */
  double mfu;          /* model FLOP utilisation, 0..1 */
  double eta_s;        /* seconds to `stop` (NaN: not known yet) */
  int64_t rss;         /* resident bytes after the step */
} RtStepStats;

/* ---- flags.c ---- */
/* Parses the command line into o (defaults from p's recipe); prints usage on stdout and returns 1
 * for --help. Bad flags are user errors. */
int rt_opts_parse(int argc, char **argv, const RtProgram *p, RtOpts *o);

/* ---- tensors.c ---- */
int64_t rt_tensor_bytes(const RtTensor *t); /* numel x dtype size */
/* The tensors of kinds (a mask of 1 << RT_T_PARAM, 1 << RT_T_STATE): parameters by their init rule
 * (element i of the whole logical tensor, key of its name), state zero. A sharded parameter's local
 * element i is logical element rt_tensor_logical_index(i) of the tensor on this rank: every layout
 * starts from the same logical weights. Each element is a pure function of (seed, name, logical
 * index), no stream: leaving a tensor out changes no other tensor's values. */
void rt_init_tensors(const RtProgram *p, char *mem, uint64_t seed, const RtCtx *ctx, int kinds);
/* A copy of p whose tensors are packed from offset 0, 64-byte aligned (bytes: their buffer). */
RtProgram *rt_host_program(const RtProgram *p, int64_t *bytes);
void rt_host_program_free(RtProgram *hp);
/* The host copy of p's tensor t (t points into p->tensors). */
char *rt_run_hptr(const RtRun *r, const RtTensor *t);
/* Host copy -> device, and back (a CPU program: nothing to do). */
void rt_run_to_dev(RtRun *r, const RtTensor *t);
void rt_run_from_dev(RtRun *r, const RtTensor *t);
/* fault.c: SHARDRT_FAULT_NAN's transient NaN around step s, SHARDRT_FAULT_KILL's lost rank after
 * step s of a run whose first step was `first` (tests). */
void rt_fault_before_step(RtRun *r, int64_t s);
void rt_fault_after_step(RtRun *r);
/* SHARDRT_FAULT_KCALL=STEP:CLASS[:RANK]: one kernel call of CLASS (a kern_count.h name, "GEMM") more in step
 * STEP's counts k (by class) on RANK (every rank without it): a program that ran other kernels than the plan's. */
void rt_fault_kcalls(RtRun *r, int64_t s, int64_t *k);
/* SHARDRT_FAULT_FLOPS=STEP[:RANK]: two matmul FLOPs more in step STEP's count on rank RANK (every rank without
 * it), for the tests of the trainer's check of its matmul FLOPs against the plan's (log.c). */
void rt_fault_flops(RtRun *r, int64_t s, uint64_t *flops);
void rt_fault_after_log(RtRun *r, int64_t s, int64_t first);
/* stop.c: SIGTERM / SIGUSR1 ask for a graceful stop (checkpoint, then exit RT_EXIT_STOPPED). */
#define RT_EXIT_STOPPED 75 /* stopped on a signal after saving a checkpoint: resume it (EX_TEMPFAIL) */
void rt_stop_install(void);   /* for the steps (rt_train_main) */
void rt_stop_uninstall(void); /* the previous handlers back */
void rt_stop_disarm(void);    /* the step loop has ended: a collective is no longer ended on a signal */
/* A checkpoint save in flight on this rank (rt_run_save; the writer thread): a signal does not end
 * a collective then, nor within the wait after its end. One end for each begin. */
void rt_stop_save_begin(void);
void rt_stop_save_end(void);
int rt_stop_signal(void); /* the first signal received, 0 when none */
const char *rt_stop_signal_name(int sig);
/* Every tensor of the kinds (bits 1 << RT_T_*). */
void rt_run_kinds_to_dev(RtRun *r, int kinds);
/* The persistent bf16 copies (RT_T_COPY) of parameter `param` (NULL: of every parameter) cast from
 * its host copy, as the step's update casts them, and sent to the device: after the parameters are
 * initialised, loaded or changed outside the step. A parameter stored split (ZeRO 1 / 2's f32 master
 * shard, passes/zero_master.c) is gathered first: every rank of its group calls this together. */
void rt_run_derive_copies(RtRun *r, const RtTensor *param);
/* The kernels' error flags (an int at the start of the kernel scratch, runtime/cuda/cuda_ops.h):
 * bit 1, an embedding id outside its table; bit 2, a target outside the vocabulary. */
void rt_run_check_device_flags(RtRun *r, const char *what);
/* This rank's block of the logical [gbatch, gseq] tokens and targets of the batch at pos. */
void rt_run_load_batch(RtRun *r, RtData *d, int64_t pos);
/* A scalar input written / a scalar result read (t may be NULL: no such tensor). */
void rt_run_put_input(RtRun *r, const RtTensor *t, double v);
double rt_run_get_result(RtRun *r, const RtTensor *t);
/* The first tensor of the kinds (bits 1 << RT_T_*) in hp's layout at mem holding NaN or Inf, and
 * its element (*elem); NULL when every one is finite. */
const RtTensor *rt_first_nonfinite_tensor(const RtProgram *hp, const char *mem, int kinds, const int *coord, int pp_coord,
                                          int64_t *elem);
/* Training diverged at step s (loss or gradient norm non-finite on some rank, or a parameter
 * about to be checkpointed): waits for the checkpoint being written, names the first non-finite
 * tensor of this rank, says where the newest checkpoint is, and ends every rank with status 1
 * without writing one (collective: every rank calls it). */
_Noreturn void rt_run_diverged(RtRun *r, int64_t s, const char *what);
/* Checkpoints hold logical tensors: a multi-rank run gathers every parameter and optimizer
 * state over the groups that split it (every rank takes part), and rank 0 writes them. */
void rt_run_save(RtRun *r);

/* ---- ckpt_async.c ---- */
/* Writes this rank's part of a sharded checkpoint (j and its snapshot owned by the writer) on the
 * writer thread, after waiting for the previous one. */
void rt_run_save_async_shard(RtRun *r, RtShardSave *j);
/* Maps the writer's snapshot buffer before the first step (with --save-to), so that the first
 * checkpoint's snapshot costs a step no more than the later ones. */
void rt_run_snapshot_prepare(RtRun *r);
int rt_ckpt_sync(void); /* SHARDRT_CKPT_SYNC=1: checkpoints written on the training thread (a benchmark's baseline) */
/* Writes the snapshot (tensors at p's offsets: the writer's own buffer, or a buffer it frees when
 * written) as the checkpoint of r->st under --save-to on a writer thread, after waiting for the
 * previous one. */
void rt_run_save_async(RtRun *r, const RtProgram *p, char *snapshot);
/* The writer's reusable snapshot buffer of at least `bytes` (zeroed when new), once the previous
 * checkpoint is written. */
char *rt_run_snapshot_buffer(RtRun *r, size_t bytes);
/* Waits until the checkpoint being written is complete (prints its line); nothing when none is. */
void rt_run_save_wait(RtRun *r);
void rt_run_writer_free(RtRun *r); /* waits, then frees the writer */
/* Loads a checkpoint (full: with optimizer and trainer state) into every rank's blocks. */
void rt_run_load(RtRun *r, const char *path, int full, RtTrainState *st);
/* --dump-steps: every tensor, logical (gathered), written by rank 0. */
void rt_run_dump(RtRun *r, const char *path);

/* ---- eval.c ---- */
/* The batches of the validation data (global batch each, the last one completed from its start, at
 * least 1): a validation reads min(this, --val-batches). */
int64_t rt_run_val_held(const RtRun *r);
/* The mean validation loss over --val-batches batches (every rank takes part). */
double rt_run_evaluate(RtRun *r);
/* --sample: generates o.sample tokens; rank 0 prints them. */
void rt_run_sample(RtRun *r);
/* --sample's program requirements (a logits entry and logits, their layout), checked at
 * the start so that a run is not refused after its training. */
void rt_run_sample_check(const RtRun *r);

/* ---- log.c ---- */
/* Opens --log (rank 0), decides the peak FLOP/s (when training), prints the start. */
void rt_log_init(RtRun *r, const RtLoop *loop);
/* Closes --log (a failed write is a user error). */
void rt_log_free(RtRun *r);
void rt_log_step(RtRun *r, const RtStepStats *s);
void rt_log_eval(RtRun *r, int64_t step, double vloss);
void rt_log_done(RtRun *r, const RtLoop *loop);
/* The collectives a step ran on this rank (counted, loop->colls) against the plan's for its pipeline stage
 * (RtProgram.coll_plan): rank 0 prints its line; a rank whose counts differ warns with what differs. */
void rt_log_colls(RtRun *r, const RtLoop *loop);
/* The run stopped on a signal (stop.c) after r->st.step: the line, and {"step", "stopped", ...} in --log. */
void rt_log_stopped(RtRun *r);
/* Model FLOP/s of the whole job (tokens/s over every rank) against the peak of every rank. */
double rt_run_mfu(const RtRun *r, double tps);

/* --trace FILE (trace_out.c): open checks FILE is writable and starts the recorder (a barrier:
 * one time base); close writes FILE (rank 0, every rank's events) and frees it. */
void rt_run_trace_open(RtRun *r);
void rt_run_trace_close(RtRun *r);

#endif
