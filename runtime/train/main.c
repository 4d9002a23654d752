/* runtime/train/main.c — rt_train_main: the trainer a generated program runs.
 *
 * Flags → ranks (dist.c) → data → one allocation → init (or --resume / --init-from) → the step
 * loop (inputs, p->step, progress line, JSON-lines log, validation, checkpoints) → summary →
 * sampling. Every rank runs the same loop (the step's collectives keep them in lockstep); rank 0
 * prints, logs and writes checkpoints; every rank reads its own block of each batch. Weights,
 * batches, checkpoints and dumps are logical tensors; each rank holds its block (dist.c).
 *
 * A device program (p->device, --target cuda) keeps its allocation on the device: `mem` is a
 * device address the trainer never dereferences. Parameters are initialised (the same values as
 * the CPU trainer), inputs written and results, checkpoints, dumps and logits read in a compact
 * host copy of the tensor table (hp / hmem: every tensor once, no activations) and moved with
 * the device's upload / download. For a CPU program hp is p and hmem is mem: nothing moves.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../comm/comm.h"
#include "../device.h"
#include "../kernels/kernels.h"
#include "../ops/coll.h"
#include "../rng.h"
#include "train.h"

#define DEFAULT_VAL_FRACTION 0.1

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
  int64_t stop_at;         /* last step this run executes (0: steps) */
  int64_t batch;           /* global batch, sequences (0: compiled) */
  int64_t eval_every;      /* steps (0: only at the end) */
  int64_t val_batches;     /* batches per validation */
  int64_t sample;          /* tokens to generate */
  int64_t ckpt_every;      /* steps (0: only at the end) */
  int64_t keep;            /* checkpoints kept (0: all) */
  int64_t threads;         /* compute threads */
  uint64_t seed;           /* run seed */
  double temperature;      /* sampling temperature (0: greedy) */
  int steps_set, seed_set; /* given on the command line */
  int data_set, val_set;   /* given on the command line */
  int save_set;            /* --save-to given on the command line */
  int threads_set;         /* --threads given */
} Opts;

typedef struct {
  const char *name;       /* flag without "--" */
  int kind;               /* 0 string, 1 int64 >= 0, 2 uint64, 3 double >= 0, 4 int64 >= 1 */
  void *dst;              /* where the value goes */
  int *set;               /* set to 1 when given (may be NULL) */
  const char *arg, *help; /* usage text */
} Flag;

static void usage(FILE *f, const char *prog, const RtProgram *p, const Flag *flags, int nflags) {
  fprintf(f, "usage: %s [flags]\n", prog);
  fprintf(f, "Trains %s (compiled from %s): %lld parameters, micro-batch %lld x %lld tokens, vocabulary %lld%s.\n\n",
          p->model ? p->model : "?", p->source ? p->source : "?", (long long)p->nparams, (long long)p->batch,
          (long long)p->seq, (long long)p->vocab, p->byte_level ? " (bytes)" : "");
  for (int i = 0; i < nflags; i++) {
    char left[48];
    snprintf(left, sizeof left, "--%s%s%s", flags[i].name, flags[i].arg ? " " : "", flags[i].arg ? flags[i].arg : "");
    fprintf(f, "  %-24s %s\n", left, flags[i].help);
  }
  fprintf(f, "  %-24s %s\n", "--help", "this text");
  fprintf(f, "\nEnvironment: SHARDRT_PEAK_FLOPS=<FLOP/s> sets the peak MFU is measured against (default: measured).\n");
  if (p->device)
    fprintf(f, "SHARDRT_DEVICE=cuda|emu: the GPU (default) or its CPU emulation; SHARDRT_CUBIN_CACHE=DIR: where compiled "
               "kernels are cached (default ~/.cache/shardc/cubin).\n");
}

static void parse_value(const Flag *fl, const char *v) {
  char *end;
  errno = 0;
  switch (fl->kind) {
  case 0: *(const char **)fl->dst = v; break;
  case 1:
  case 4: {
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < (fl->kind == 4 ? 1 : 0))
      rt_user_error("--%s: '%s' is not %s integer", fl->name, v, fl->kind == 4 ? "a positive" : "a non-negative");
    *(int64_t *)fl->dst = x;
    break;
  }
  case 2: {
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || *v == '-') rt_user_error("--%s: '%s' is not a non-negative integer", fl->name, v);
    *(uint64_t *)fl->dst = x;
    break;
  }
  case 3: {
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= 0) || isinf(x))
      rt_user_error("--%s: '%s' is not a non-negative number", fl->name, v);
    *(double *)fl->dst = x;
    break;
  }
  }
  if (fl->set) *fl->set = 1;
}

/* Returns 1 when --help was given. */
static int parse_flags(int argc, char **argv, const RtProgram *p, Opts *o) {
  const RtRecipe *r = &p->recipe;
  memset(o, 0, sizeof *o);
  o->data = r->data;
  o->val = r->val;
  o->steps = r->steps > 0 ? r->steps : 1;
  o->seed = r->seed;
  o->ckpt_every = r->ckpt_every;
  o->save_to = r->ckpt_dir;
  o->keep = r->ckpt_keep > 0 ? r->ckpt_keep : 0;
  o->val_batches = 20;
  o->temperature = 0.8;
  long nproc = sysconf(_SC_NPROCESSORS_ONLN);
  o->threads = nproc > 0 ? nproc : 1;
  int seen_help = 0;
  const Flag flags[] = {
      {"data", 0, &o->data, &o->data_set, "PATH|GLOB",
       "training data: llm.c token shards (.bin), or raw bytes for byte-level models"},
      {"val", 0, &o->val, &o->val_set, "PATH|GLOB",
       "validation data (default: the last 10% of the last training file)"},
      {"steps", 1, &o->steps, &o->steps_set, "N",
       "steps of the schedule (the lr decays to min_lr at N); 0: no training"},
      {"stop-at", 1, &o->stop_at, NULL, "N", "stop after step N (the schedule still spans --steps)"},
      {"seed", 2, &o->seed, &o->seed_set, "N", "seed of the initialisation and the data order"},
      {"batch", 4, &o->batch, NULL, "N", "global batch in sequences: micro-batch x data-parallel ranks"},
      {"init-from", 0, &o->init_from, NULL, "FILE",
       "initialise the weights from a .safetensors file or checkpoint dir"},
      {"save-to", 0, &o->save_to, &o->save_set, "DIR",
       "write checkpoints DIR/step_N at the end (and every --ckpt-every); with --steps 0: the initial weights"},
      {"ckpt-every", 1, &o->ckpt_every, NULL, "N", "also checkpoint every N steps (0: only at the end)"},
      {"keep", 1, &o->keep, NULL, "K", "keep the newest K checkpoints (0: all)"},
      {"resume", 0, &o->resume, NULL, "DIR",
       "continue from the newest checkpoint in DIR (weights, optimizer, step, data)"},
      {"log", 0, &o->log, NULL, "FILE.jsonl", "one JSON object per step (and per validation)"},
      {"eval-every", 1, &o->eval_every, NULL, "N", "validation loss every N steps (0: only at the end)"},
      {"val-batches", 4, &o->val_batches, NULL, "N", "batches per validation (default 20)"},
      {"sample", 1, &o->sample, NULL, "N", "generate N tokens after training"},
      {"temperature", 3, &o->temperature, NULL, "X", "sampling temperature; 0: greedy (default 0.8)"},
      {"prompt", 0, &o->prompt, NULL, "TEXT", "sampling prompt (byte-level models; default: the data's start)"},
      {"threads", 4, &o->threads, &o->threads_set, "N",
       "compute threads per rank (default: the online CPUs / the ranks on this host)"},
      {"dump-steps", 1, &o->dump_steps, NULL, "N",
       "write every tensor (params, state, inputs, results) after each of the first N steps"},
      {"dump-to", 0, &o->dump_to, NULL, "DIR", "where --dump-steps writes DIR/step_N.safetensors (default: dump)"},
  };
  int nflags = (int)(sizeof flags / sizeof flags[0]);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      seen_help = 1;
      continue;
    }
    if (strncmp(a, "--", 2) != 0) rt_user_error("unexpected argument '%s' (see --help)", a);
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const Flag *fl = NULL;
    for (int k = 0; k < nflags; k++)
      if (strlen(flags[k].name) == len && !strncmp(flags[k].name, name, len)) fl = &flags[k];
    if (!fl) rt_user_error("unknown flag '%.*s' (see --help)", (int)(len + 2), a);
    const char *v = eq ? eq + 1 : NULL;
    if (!v) {
      if (i + 1 >= argc) rt_user_error("--%s needs a value (%s)", fl->name, fl->arg);
      v = argv[++i];
    }
    parse_value(fl, v);
  }
  if (o->data_set && !o->val_set) o->val = NULL; /* the recipe's val goes with the recipe's data */
  if (seen_help) {
    usage(stdout, argv[0] ? argv[0] : "trainer", p, flags, nflags);
    return 1;
  }
  return 0;
}

/* ---- tensors in the allocation ---- */

static const RtTensor *need_tensor(const RtProgram *p, const char *name, int dtype, int rank, const int64_t *dims) {
  const RtTensor *t = rt_find_tensor(p, name);
  if (!t) rt_bug("the program has no \"%s\" tensor", name);
  int ok = t->dtype == dtype && t->rank == rank;
  for (int i = 0; ok && i < rank; i++)
    ok = t->dims[i] == dims[i];
  if (!ok) rt_bug("the program's \"%s\" tensor has an unexpected dtype or shape", name);
  return t;
}

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

static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
  u += 0x7fff + ((u >> 16) & 1);                                          /* round to nearest even */
  return (uint16_t)(u >> 16);
}

/* Parameters by their init rule (element i of the whole logical tensor, key of its name), state zero.
 * A sharded parameter's local element i is logical element rt_tensor_logical_index(i) of the
 * tensor on this rank: every layout starts from the same logical weights. */
static void init_tensors(const RtProgram *p, char *mem, uint64_t seed, const RtCtx *ctx) {
  int coord[RT_AX_COUNT];
  rt_ctx_coords(ctx, coord);
  for (int k = 0; k < p->ntensors; k++) {
    const RtTensor *t = &p->tensors[k];
    int64_t n = rt_tensor_numel(t);
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
      switch (t->init) {
      case RT_INIT_ZEROS: x = 0; break;
      case RT_INIT_ONES: x = 1; break;
      case RT_INIT_CONST: x = t->init_a; break;
      case RT_INIT_NORMAL: x = rt_rng_normal(key, li, t->init_a, t->init_b); break;
      case RT_INIT_UNIFORM: x = t->init_a + (t->init_b - t->init_a) * rt_rng_uniform(key, li); break;
      }
      switch (t->dtype) {
      case RT_F32: ((float *)dst)[i] = (float)x; break;
      case RT_F64: ((double *)dst)[i] = x; break;
      case RT_BF16: ((uint16_t *)dst)[i] = f32_to_bf16((float)x); break;
      }
    }
  }
}


/* ---- the run ---- */

typedef struct {
  const RtProgram *p; /* the program */
  Opts o;             /* flags */
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
  int64_t gbatch, gseq; /* the logical batch: sequences per step (all dp ranks), tokens per sequence */
  RtProgram *lp;      /* multi: the logical program (checkpoints, dumps) */
  int64_t lbytes;     /* multi: bytes of the logical tensors */
  const RtDevice *dev; /* the program's device (NULL: a CPU program) */
  RtProgram *hp;      /* where tensors live on the host: p itself, or a device program's compact copy */
  char *hmem;         /* host tensors at hp's offsets: mem itself, or the compact copy's buffer */
} Run;

/* ---- a device program's host tensors ---- */

/* The tensor of hp that is p's tensor t (t points into p->tensors). */
static const RtTensor *htensor(const Run *r, const RtTensor *t) { return &r->hp->tensors[t - r->p->tensors]; }
static char *hptr(const Run *r, const RtTensor *t) { return r->hmem + htensor(r, t)->offset; }

static int64_t tensor_bytes(const RtTensor *t) { return rt_tensor_numel(t) * (int64_t)rt_dtype_size(t->dtype); }

/* Host copy -> device (a CPU program: nothing to do). */
static void to_dev(Run *r, const RtTensor *t) {
  if (r->dev && t) r->dev->upload(&r->ctx, r->mem + t->offset, hptr(r, t), tensor_bytes(t));
}
static void from_dev(Run *r, const RtTensor *t) {
  if (r->dev && t) r->dev->download(&r->ctx, hptr(r, t), r->mem + t->offset, tensor_bytes(t));
}
/* The kernels' error flags (an int at the start of the kernel scratch, runtime/cuda/cuda_ops.h):
 * bit 1, an embedding id outside its table; bit 2, a target outside the vocabulary. */
static void check_device_flags(Run *r, const char *what) {
  if (!r->dev || !r->p->workspace_bytes || r->p->workspace_bytes() < 4) return; /* a program without them */
  int32_t flags = 0;
  r->dev->download(&r->ctx, &flags, r->mem + r->p->mem_bytes, 4);
  if (!flags) return;
  rt_user_error("rank %d, %s at step %lld: the GPU kernels found %s%s%s (flags 0x%x)", r->ctx.rank, what,
                (long long)r->ctx.step, flags & 1 ? "a token id outside the embedding table" : "",
                (flags & 3) == 3 ? " and " : "", flags & 2 ? "a target outside the vocabulary" : "", (unsigned)flags);
}

/* Every tensor of the kinds (bits 1 << RT_T_*). */
static void kinds_to_dev(Run *r, int kinds) {
  for (int k = 0; r->dev && k < r->p->ntensors; k++)
    if (kinds >> r->p->tensors[k].kind & 1) to_dev(r, &r->p->tensors[k]);
}
static void kinds_from_dev(Run *r, int kinds) {
  for (int k = 0; r->dev && k < r->p->ntensors; k++)
    if (kinds >> r->p->tensors[k].kind & 1) from_dev(r, &r->p->tensors[k]);
}

/* A copy of p whose tensors are packed from offset 0, 64-byte aligned (bytes: their buffer). */
static RtProgram *host_program(const RtProgram *p, int64_t *bytes) {
  RtProgram *hp = rt_xmalloc(sizeof *hp);
  *hp = *p;
  RtTensor *ts = rt_xmalloc((size_t)(p->ntensors > 0 ? p->ntensors : 1) * sizeof *ts);
  int64_t off = 0;
  for (int k = 0; k < p->ntensors; k++) {
    ts[k] = p->tensors[k];
    ts[k].offset = off;
    off += (tensor_bytes(&ts[k]) + 63) / 64 * 64;
  }
  hp->tensors = ts;
  if (p->logits_tensor && p->logits_tensor >= p->tensors && p->logits_tensor < p->tensors + p->ntensors)
    hp->logits_tensor = &ts[p->logits_tensor - p->tensors];
  *bytes = off;
  return hp;
}

/* ---- batches: each rank's block of the logical [gbatch, gseq] tokens and targets ---- */

/* The plain layout: sequences split over dp along dim 0, whole sequences: rt_data_batch reads
 * this rank's slice directly. */
static int dp_rows_only(const RtProgram *p, const RtTensor *t) {
  if (!t->shard.sharded) return 1;
  unsigned mask = rt_tensor_split_mask(p, t);
  return (mask == 0 || (mask == RT_MESH_DP && t->shard.split[0] == RT_AX_DP && t->shard.blocks[0] <= 1));
}

static void load_batch(Run *r, RtData *d, int64_t pos) {
  const RtProgram *p = r->p;
  int32_t *tok = (int32_t *)hptr(r, r->tokens), *tgt = (int32_t *)hptr(r, r->targets);
  if (!r->multi) {
    rt_data_batch(d, pos, p->batch, r->ctx.dp_rank, tok, tgt);
    to_dev(r, r->tokens);
    to_dev(r, r->targets);
    return;
  }
  int dp = rt_tensor_split_mask(p, r->tokens) & RT_MESH_DP ? r->ctx.dp_rank : 0;
  if (dp_rows_only(p, r->tokens) && dp_rows_only(p, r->targets) &&
      rt_tensor_split_mask(p, r->tokens) == rt_tensor_split_mask(p, r->targets)) {
    rt_data_batch(d, pos, r->tokens->dims[0], dp, tok, tgt);
    to_dev(r, r->tokens);
    to_dev(r, r->targets);
    return;
  }
  /* any other layout (sequence-parallel tokens, ...): the whole batch, then this rank's block */
  size_t n = (size_t)(r->gbatch * r->gseq);
  int32_t *lt = rt_xmalloc(n * sizeof *lt), *lg = rt_xmalloc(n * sizeof *lg);
  rt_data_batch(d, pos, r->gbatch, 0, lt, lg);
  rt_tensor_scatter(&r->ctx, p, r->tokens, lt, tok);
  rt_tensor_scatter(&r->ctx, p, r->targets, lg, tgt);
  to_dev(r, r->tokens);
  to_dev(r, r->targets);
  free(lt);
  free(lg);
}

/* A scalar input written / a scalar result read (t may be NULL: no such tensor). */
static void put_input(Run *r, const RtTensor *t, double v) {
  if (!t) return;
  put_scalar(r->hmem, htensor(r, t), v);
  to_dev(r, t);
}
static double get_result(Run *r, const RtTensor *t) {
  if (!t) return NAN;
  from_dev(r, t);
  return get_scalar(r->hmem, htensor(r, t));
}

static void json_num(FILE *f, const char *key, double v, const char *fmt) {
  fprintf(f, ",\"%s\":", key);
  if (isfinite(v))
    fprintf(f, fmt, v);
  else
    fputs("null", f);
}

static double evaluate(Run *r) {
  const RtProgram *p = r->p;
  int64_t per = r->gbatch;
  int64_t nb = (r->val.nwin + per - 1) / per;
  if (nb > r->o.val_batches) nb = r->o.val_batches;
  if (nb < 1) nb = 1;
  double sum = 0;
  int64_t saved = r->ctx.step;
  r->ctx.step = 0;
  for (int64_t i = 0; i < nb; i++) {
    load_batch(r, &r->val, i * per);
    p->eval(r->mem, &r->ctx);
    check_device_flags(r, "validation");
    sum += get_result(r, r->loss);
  }
  r->ctx.step = saved;
  /* the loss is replicated: the program's own all-reduces made it the mean over every rank's rows */
  return sum / (double)nb;
}

static void log_eval(Run *r, int64_t step, double vloss) {
  if (r->ctx.rank != 0) return;
  printf("step %*lld/%lld | val loss %.4f\n", (int)snprintf(NULL, 0, "%lld", (long long)r->o.steps), (long long)step,
         (long long)r->o.steps, vloss);
  fflush(stdout);
  if (r->log) {
    fprintf(r->log, "{\"step\":%lld", (long long)step);
    json_num(r->log, "val_loss", vloss, "%.9g");
    fputs("}\n", r->log);
    fflush(r->log);
  }
}

static void fmt_eta(char *out, size_t n, double s) {
  if (!isfinite(s) || s < 0) {
    snprintf(out, n, "?");
    return;
  }
  long long t = (long long)(s + 0.5);
  if (t >= 3600)
    snprintf(out, n, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
  else
    snprintf(out, n, "%lld:%02lld", t / 60, t % 60);
}

/* Checkpoints hold logical tensors: a multi-rank run gathers every parameter and optimizer
 * state over the groups that split it (every rank takes part), and rank 0 writes them. */
static void save(Run *r) {
  if (!r->o.save_to) return;
  double t0 = rt_now();
  kinds_from_dev(r, 1 << RT_T_PARAM | 1 << RT_T_STATE);
  if (r->multi) {
    char *lmem = rt_xcalloc((size_t)r->lbytes + 64, 1);
    rt_gather_tensors(&r->ctx, r->hp, r->lp, r->hmem, lmem, 1 << RT_T_PARAM | 1 << RT_T_STATE);
    if (r->ctx.rank == 0) rt_ckpt_save(r->lp, lmem, r->o.save_to, &r->st, (int)r->o.keep);
    free(lmem);
  } else {
    rt_ckpt_save(r->hp, r->hmem, r->o.save_to, &r->st, (int)r->o.keep);
  }
  if (r->ctx.rank != 0) return;
  printf("checkpoint: %s/step_%08lld (%.2f s)\n", r->o.save_to, (long long)r->st.step, rt_now() - t0);
  fflush(stdout);
}

/* Loads a checkpoint (full: with optimizer and trainer state) into every rank's blocks. */
static void load(Run *r, const char *path, int full, RtTrainState *st) {
  int kinds = 1 << RT_T_PARAM | (full ? 1 << RT_T_STATE : 0);
  if (!r->multi) {
    rt_ckpt_load(r->hp, r->hmem, path, full, st);
    kinds_to_dev(r, kinds);
    return;
  }
  char *lmem = rt_xcalloc((size_t)r->lbytes + 64, 1);
  rt_ckpt_load(r->lp, lmem, path, full, st);
  rt_scatter_tensors(&r->ctx, r->hp, r->lp, lmem, r->hmem, kinds);
  kinds_to_dev(r, kinds);
  free(lmem);
}

/* --dump-steps: every tensor, logical (gathered), written by rank 0. */
static void dump(Run *r, const char *path) {
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

/* Model FLOP/s of the whole job (tokens/s over every rank) against the peak of every rank. */
static double job_mfu(const Run *r, const RtProgram *p, double tps) {
  int world = r->ctx.world > 0 ? r->ctx.world : 1;
  return r->peak > 0 ? p->flops_per_token * tps / (r->peak * world) : 0;
}

/* The plan against the measured peak resident size; `base` is the resident size before the
 * allocation (code, libraries, data pages), so the run's own share is visible too. */
static void print_memory(const char *when, const RtProgram *p, int64_t base) {
  char a[32], b[32], c[32], d[32];
  rt_fmt_bytes(a, sizeof a, (double)p->mem_bytes);
  rt_fmt_bytes(b, sizeof b, (double)p->mem_peak);
  int64_t hwm = rt_vm_hwm();
  rt_fmt_bytes(c, sizeof c, (double)hwm);
  printf("memory %s: planned %s (live peak %s), measured peak resident %s (VmHWM)", when, a, b, c);
  if (hwm > 0 && p->mem_bytes > 0) printf(" = %.2fx the plan", (double)hwm / (double)p->mem_bytes);
  if (base > 0 && hwm > 0) {
    rt_fmt_bytes(d, sizeof d, (double)base);
    printf("; %s resident before the allocation", d);
  }
  printf("\n");
}

/* Samples from the logits at row 0, position len-1 of a window of the last T tokens. Every rank
 * runs the logits function (its collectives need them all); a multi-rank program's logits are
 * gathered to the logical [batch, seq, vocab] (vocab-parallel logits are split over tp), and rank
 * 0's choice is broadcast so every rank feeds the same next window. */
static void sample(Run *r) {
  const RtProgram *p = r->p;
  int64_t T = r->gseq, N = r->o.sample, V = p->vocab, VP = p->vocab_padded > 0 ? p->vocab_padded : p->vocab;
  if (!p->logits) rt_user_error("--sample: this program has no logits function");
  int64_t cap = N + T + 64, len = 0;
  int32_t *toks = rt_xmalloc((size_t)cap * sizeof *toks);
  if (r->o.prompt && p->byte_level) {
    size_t n = strlen(r->o.prompt);
    if ((int64_t)n > T) n = (size_t)T; /* only the last T matter; keep the start for printing */
    for (size_t i = 0; i < n; i++)
      toks[len++] = (unsigned char)r->o.prompt[i];
  } else {
    RtData *d = r->has_val ? &r->val : &r->train;
    int shuffle = d->shuffle;
    d->shuffle = 0;
    int32_t *seq = rt_xmalloc((size_t)(T + 1) * sizeof *seq);
    rt_data_sequence(d, 0, seq);
    d->shuffle = shuffle;
    int64_t n = T / 2 < 16 ? T / 2 : 16;
    if (n < 1) n = 1;
    for (int64_t i = 0; i < n; i++)
      toks[len++] = seq[i];
    free(seq);
  }
  int64_t prompt_len = len;
  int32_t *in = (int32_t *)hptr(r, r->tokens);
  const RtTensor *lt = r->multi ? p->logits_tensor : NULL;
  if (r->multi && !lt) rt_user_error("--sample: this program does not describe its logits' layout; recompile it");
  int32_t *win = r->multi ? rt_xmalloc((size_t)(r->gbatch * T) * sizeof *win) : in; /* the logical tokens */
  int64_t ldims[RT_MAX_RANK];
  /* a device program's logits may be bf16; a CPU program's are f32 */
  int ldt = lt ? lt->dtype : r->dev && p->logits_tensor ? p->logits_tensor->dtype : RT_F32;
  size_t les = rt_dtype_size(ldt);
  if (ldt != RT_F32 && ldt != RT_BF16) rt_bug("logits of dtype %s cannot be sampled", rt_dtype_st_name(ldt));
  float *all = lt ? rt_xmalloc((size_t)rt_tensor_logical_dims(p, lt, ldims) * les) : NULL;
  if (lt) VP = ldims[lt->rank - 1];
  float *logits = lt ? all : (float *)(r->mem + p->logits_offset);
  char *lloc = lt && r->dev ? rt_xmalloc((size_t)tensor_bytes(lt)) : NULL; /* the local logits, downloaded */
  float *rowbuf = rt_xmalloc((size_t)VP * sizeof *rowbuf);
  double *prob = rt_xmalloc((size_t)V * sizeof *prob);
  r->ctx.step = 0;
  for (int64_t k = 0; k < N; k++) {
    int64_t L = len < T ? len : T;
    memset(win, 0, (size_t)(r->gbatch * T) * sizeof *win);
    memcpy(win, toks + len - L, (size_t)L * sizeof *win);
    for (int64_t b = 1; b < r->gbatch; b++)
      memcpy(win + b * T, win, (size_t)T * sizeof *win);
    if (r->multi) rt_tensor_scatter(&r->ctx, p, r->tokens, win, in);
    to_dev(r, r->tokens);
    p->logits(r->mem, &r->ctx);
    const float *row;
    if (!r->dev && ldt == RT_F32) { /* a CPU program: as it is */
      if (lt) rt_tensor_gather(&r->ctx, p, lt, r->mem + lt->offset, all);
      row = logits + (L - 1) * VP;
    } else {
      const char *src;
      if (lt) {
        if (r->dev) r->dev->download(&r->ctx, lloc, r->mem + lt->offset, tensor_bytes(lt));
        rt_tensor_gather(&r->ctx, p, lt, r->dev ? lloc : r->mem + lt->offset, all);
        src = (const char *)all + (size_t)((L - 1) * VP) * les;
      } else { /* only the row that is sampled */
        r->dev->download(&r->ctx, rowbuf, r->mem + p->logits_offset + (L - 1) * VP * (int64_t)les, VP * (int64_t)les);
        src = (const char *)rowbuf;
      }
      if (ldt == RT_BF16) /* widen in place, from the end: element v's 2 bytes lie below its 4 */
        for (int64_t v = VP - 1; v >= 0; v--) {
          uint16_t h;
          memcpy(&h, src + 2 * v, 2);
          uint32_t u = (uint32_t)h << 16;
          memcpy(&rowbuf[v], &u, 4);
        }
      else if (src != (const char *)rowbuf)
        memcpy(rowbuf, src, (size_t)VP * sizeof *rowbuf);
      row = rowbuf;
    }
    int64_t next = 0;
    if (r->o.temperature <= 0) {
      for (int64_t v = 1; v < V; v++)
        if (row[v] > row[next]) next = v;
    } else {
      double mx = row[0], sum = 0;
      for (int64_t v = 1; v < V; v++)
        mx = row[v] > mx ? row[v] : mx;
      for (int64_t v = 0; v < V; v++)
        sum += prob[v] = exp(((double)row[v] - mx) / r->o.temperature);
      double u = (double)(rt_splitmix64(r->st.rng++) >> 11) * 0x1.0p-53 * sum, acc = 0;
      next = V - 1;
      for (int64_t v = 0; v < V; v++)
        if ((acc += prob[v]) > u) {
          next = v;
          break;
        }
    }
    if (r->ctx.groups[RT_MESH_ALL]) { /* rank 0 decides (ids < 2^24 are exact in f32) */
      float f = (float)next;
      rt_broadcast(r->ctx.groups[RT_MESH_ALL], &f, 1, RT_F32, 0);
      next = (int64_t)f;
    }
    toks[len++] = (int32_t)next;
  }
  if (r->ctx.rank == 0) {
    char how[48] = "greedy";
    if (r->o.temperature > 0) snprintf(how, sizeof how, "temperature %g", r->o.temperature);
    printf("sample (%lld tokens, %s):\n", (long long)N, how);
    if (p->byte_level) {
      for (int64_t i = 0; i < len; i++) {
        int c = toks[i];
        putchar(c == '\n' || c == '\t' || (c >= 32 && c < 127) ? c : '?');
      }
      putchar('\n');
    } else {
      for (int64_t i = 0; i < len; i++)
        printf("%s%d", i == 0 ? "" : i == prompt_len ? " | " : " ", toks[i]);
      putchar('\n');
    }
    fflush(stdout);
  }
  if (win != in) free(win);
  free(all);
  free(lloc);
  free(rowbuf);
  free(prob);
  free(toks);
}

int rt_train_main(int argc, char **argv, const RtProgram *p) {
  Run run, *r = &run;
  memset(r, 0, sizeof *r);
  r->p = p;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (parse_flags(argc, argv, p, &r->o)) return 0;
  Opts *o = &r->o;

  r->ctx = (RtCtx){.rank = 0,
                   .world = 1,
                   .dp_rank = 0,
                   .dp_size = 1,
                   .tp_size = 1,
                   .pp_size = 1,
                   .cp_size = 1,
                   .threads = (int)o->threads};
  /* Ranks: under mpirun / srun (or for a multi-rank program) bootstrap, check the launched world
   * against the program's mesh before anything else, open the groups. */
  rt_dist_init(&r->dist, &argc, &argv, p, &r->ctx);
  r->multi = rt_program_world(p) > 1;
  if (r->multi && !o->threads_set && r->dist.boot.local_world > 1) { /* share the host's cores */
    r->ctx.threads = (int)(o->threads / r->dist.boot.local_world);
    if (r->ctx.threads < 1) r->ctx.threads = 1;
  }
  rt_set_threads(r->ctx.threads);
  int64_t B = p->batch, T = p->seq;
  int64_t bt[2] = {B, T};
  r->tokens = need_tensor(p, "tokens", RT_I32, 2, bt);
  r->targets = need_tensor(p, "targets", RT_I32, 2, bt);
  int64_t lbt[RT_MAX_RANK];
  rt_tensor_logical_dims(p, r->tokens, lbt);
  r->gbatch = lbt[0];
  r->gseq = lbt[1];
  int64_t gbatch = r->gbatch;
  T = r->gseq; /* from here on: the logical sequence length */
  if (r->multi) r->lp = rt_logical_program(p, &r->lbytes);
  if (o->batch && o->batch != gbatch)
    rt_user_error("--batch %lld: this program was compiled for a micro-batch of %lld sequences x %d data-parallel "
                  "rank(s) = %lld; recompile with another batch to change it",
                  (long long)o->batch, (long long)B, (int)(gbatch / (B ? B : 1)), (long long)gbatch);
  if (o->init_from && o->resume) rt_user_error("--init-from and --resume exclude each other");

  r->loss = rt_find_tensor(p, "loss");
  if (!r->loss) rt_bug("the program has no \"loss\" tensor");
  r->lr = rt_find_tensor(p, "lr");
  r->stepno = rt_find_tensor(p, "step");
  r->gnorm = rt_find_tensor(p, "grad_norm");

  /* The trainer state: fresh, or from the checkpoint (read before the data: the seed orders it). */
  r->st = (RtTrainState){.steps = o->steps, .seed = o->seed, .batch = gbatch, .seq = T, .loss = NAN};
  r->st.rng = rt_rng_key(o->seed, "sample");

  r->base_rss = rt_vm_rss();
  /* One allocation (the plan, then the kernels' workspace), 64-byte aligned, touched. */
  int64_t ws = p->workspace_bytes ? p->workspace_bytes() : 0;
  size_t bytes = ((size_t)(p->mem_bytes + ws > 0 ? p->mem_bytes + ws : 64) + 63) / 64 * 64;
  r->hp = (RtProgram *)p;
  if (p->device) { /* on the device: find it, build its kernels, allocate; host tensors in a compact copy */
    r->dev = p->device;
    if (r->dev->open(p, &r->ctx, (int64_t)bytes, &r->mem) != 0) {
      rt_logical_program_free(r->lp);
      rt_dist_free(&r->dist, &r->ctx);
      return 1;
    }
    int64_t hbytes;
    r->hp = host_program(p, &hbytes);
    r->hmem = rt_xcalloc((size_t)hbytes + 64, 1);
  } else {
    /* multi-rank: memory the local peers map (runtime/comm/shmem.c), so the collectives on
     * gradients and activations copy and reduce through mappings, not process_vm_readv */
    r->mem = r->ctx.comm ? rt_comm_mem_alloc(r->ctx.comm, bytes) : aligned_alloc(64, bytes);
    /* every rank's buffers are mapped by its local peers: the direct collectives beat the ring
     * from 16 KiB (2.5 vs 7.9 us for an all-reduce at 2 ranks, docs/performance.md); every rank
     * sets the same value, as rt_comm_tune requires; SHARDRT_DIRECT_MIN still decides */
    const char *dmin = getenv("SHARDRT_DIRECT_MIN");
    if (r->ctx.comm && !(dmin && *dmin)) rt_comm_tune(r->ctx.comm, "direct_min", (size_t)16 << 10);
    if (!r->mem)
      rt_user_error("cannot allocate the planned %lld bytes (+ %lld bytes of kernel workspace)",
                    (long long)p->mem_bytes, (long long)ws);
    memset(r->mem, 0, bytes);
    r->hmem = r->mem;
  }

  if (o->resume) {
    char *dir = rt_ckpt_find(o->resume);
    if (!dir)
      rt_user_error("--resume: '%s' holds no checkpoint (no step_* directory with a model.safetensors)", o->resume);
    RtTrainState cs;
    load(r, dir, 1, &cs);
    if (o->seed_set && o->seed != cs.seed)
      rt_user_error("--seed %llu differs from the checkpoint's seed %llu ('%s'); a resumed run keeps its seed",
                    (unsigned long long)o->seed, (unsigned long long)cs.seed, dir);
    if (cs.batch != gbatch || cs.seq != T)
      rt_user_error("'%s' was written with batch %lld x %lld tokens, this run has %lld x %lld", dir,
                    (long long)cs.batch, (long long)cs.seq, (long long)gbatch, (long long)T);
    o->seed = cs.seed;
    if (!o->steps_set) o->steps = cs.steps;
    cs.steps = o->steps;
    r->st = cs;
    if (r->ctx.rank == 0)
      printf("resumed from %s: step %lld, data position %lld\n", dir, (long long)cs.step, (long long)cs.data_pos);
    free(dir);
  } else {
    init_tensors(r->hp, r->hmem, o->seed, &r->ctx);
    kinds_to_dev(r, 1 << RT_T_PARAM | 1 << RT_T_STATE);
    if (o->init_from) {
      load(r, o->init_from, 0, NULL);
      if (r->ctx.rank == 0) printf("weights from %s\n", o->init_from);
    }
  }
  int64_t stop = o->stop_at && o->stop_at < o->steps ? o->stop_at : o->steps;

  /* Data. */
  RtDataOpts dopt = {.T = T, .vocab = p->vocab, .byte_level = p->byte_level};
  int training = r->st.step < stop;
  if (!o->data && (training || o->sample)) rt_user_error("no training data: pass --data PATH|GLOB");
  if (o->data) {
    rt_data_open(&r->train, "--data", o->data, &dopt);
    r->train.shuffle = 1;
    r->train.seed = o->seed;
  }
  if (o->val) {
    rt_data_open(&r->val, "--val", o->val, &dopt);
    r->has_val = 1;
    snprintf(r->val_desc, sizeof r->val_desc, "'%s': %d file(s), %lld tokens, %lld sequences", o->val, r->val.nfiles,
             (long long)r->val.ntok, (long long)r->val.nwin);
  } else if (o->data) {
    r->has_val = rt_data_hold_out(&r->train, &r->val, DEFAULT_VAL_FRACTION, &dopt);
    if (r->has_val)
      snprintf(r->val_desc, sizeof r->val_desc, "the last 10%% of '%s': %lld tokens, %lld sequences",
               r->val.files[0].path, (long long)r->val.ntok, (long long)r->val.nwin);
  }
  if (!p->eval) r->has_val = 0;

  if (o->log && r->ctx.rank == 0) {
    r->log = fopen(o->log, o->resume ? "a" : "w");
    if (!r->log) rt_user_error("--log: cannot open '%s': %s", o->log, strerror(errno));
  }
  const char *how = "measured: FMA loop";
  const char *peak_env = getenv("SHARDRT_PEAK_FLOPS");
  if (peak_env && *peak_env) {
    char *end;
    r->peak = strtod(peak_env, &end);
    if (end == peak_env || *end || !(r->peak > 0))
      rt_user_error("SHARDRT_PEAK_FLOPS='%s' is not a positive number of FLOP/s", peak_env);
    how = "from SHARDRT_PEAK_FLOPS";
  } else if (training && r->dev) {
    r->peak = r->dev->peak_flops(&r->ctx);
    how = "measured by the device: a large bf16 GEMM";
  } else if (training) {
    r->peak = rt_measure_peak_flops(r->ctx.threads, 0.1);
  }

  if (r->ctx.rank == 0) {
    printf("model %s (%s): %.2fM parameters, vocabulary %lld%s, batch %lld x %lld tokens", p->model ? p->model : "?",
           p->source ? p->source : "?", (double)p->nparams / 1e6, (long long)p->vocab, p->byte_level ? " (bytes)" : "",
           (long long)gbatch, (long long)T);
    if (r->ctx.dp_size > 1) printf(" (%d data-parallel ranks x %lld)", r->ctx.dp_size, (long long)B);
    printf(", seed %llu\n", (unsigned long long)o->seed);
    if (r->ctx.world > 1)
      printf("ranks: %d (dp %d x pp %d x cp %d x tp %d) via %s, %s; %d thread(s) per rank\n", r->ctx.world,
             r->ctx.dp_size, r->ctx.pp_size, r->ctx.cp_size, r->ctx.tp_size, rt_launcher_name(r->dist.boot.launcher),
             rt_comm_provider(r->dist.comm), r->ctx.threads);
    if (o->data)
      printf("data: '%s': %d file(s), %lld tokens, %lld sequences of %lld+1\n", o->data, r->train.nfiles,
             (long long)r->train.ntok, (long long)r->train.nwin, (long long)T);
    if (r->dev) {
      char desc[512];
      r->dev->describe(&r->ctx, desc, sizeof desc);
      printf("device: %s\n", desc);
    }
    printf("validation: %s\n", r->has_val ? r->val_desc
                               : p->eval  ? "none (no held-out data)"
                                          : "none (no eval function)");
    if (training)
      printf(r->dev ? "steps %lld..%lld of %lld, lr %g -> %g (%s, warmup %lld); %d thread(s); device peak %.1f GFLOP/s "
                      "(%s)\n"
                    : "steps %lld..%lld of %lld, lr %g -> %g (%s, warmup %lld); %d thread(s); fp32 peak %.1f GFLOP/s "
                      "(%s)\n",
             (long long)r->st.step + 1, (long long)stop, (long long)o->steps, p->recipe.lr, p->recipe.min_lr,
             p->recipe.lr_schedule == RT_LR_COSINE   ? "cosine"
             : p->recipe.lr_schedule == RT_LR_LINEAR ? "linear"
                                                     : "constant",
             (long long)p->recipe.warmup, r->ctx.threads, r->peak / 1e9, how);
    print_memory("at start", p, r->base_rss);
  }

  /* The loop. */
  double t_start = rt_now(), t_steady = 0, last_val = NAN, comm_steady = 0;
  int64_t steady_steps = 0, first = r->st.step + 1, saved_at = -1;
  int width = snprintf(NULL, 0, "%lld", (long long)o->steps);
  for (int64_t s = first; s <= stop; s++) {
    r->ctx.step = s;
    load_batch(r, &r->train, r->st.data_pos);
    double lr = rt_lr_at(p->recipe.lr_schedule, p->recipe.lr, p->recipe.min_lr, p->recipe.warmup, o->steps, s - 1);
    put_input(r, r->lr, lr);
    put_input(r, r->stepno, (double)s);
    double t0 = rt_now(), c0 = r->ctx.comm_s;
    p->step(r->mem, &r->ctx);
    if (r->dev) r->dev->sync(&r->ctx); /* the step's time is the device's */
    check_device_flags(r, "training");
    double dt = rt_now() - t0, dcomm = r->ctx.comm_s - c0;
    if (s > first || stop == first) comm_steady += dcomm;
    r->st.data_pos += gbatch;
    r->st.step = s;
    double loss = get_result(r, r->loss), gn = get_result(r, r->gnorm);
    r->st.loss = loss; /* before the dump: its metadata holds this step's loss */
    if (s <= o->dump_steps) {
      const char *dir = o->dump_to ? o->dump_to : "dump";
      if (r->ctx.rank == 0 && mkdir(dir, 0755) != 0 && errno != EEXIST)
        rt_user_error("--dump-to: cannot create '%s': %s", dir, strerror(errno));
      char *path = rt_xprintf("%s/step_%lld.safetensors", dir, (long long)s);
      dump(r, path);
      free(path);
    }
    if (s > first || stop == first) t_steady += dt, steady_steps++;
    double tps = (double)(gbatch * T) / dt, mfu = job_mfu(r, p, tps);
    double eta = steady_steps ? t_steady / (double)steady_steps * (double)(stop - s) : NAN;
    int64_t rss = rt_vm_rss();
    if (r->ctx.rank == 0) {
      char mem_s[32], eta_s[32];
      rt_fmt_bytes(mem_s, sizeof mem_s, (double)rss);
      fmt_eta(eta_s, sizeof eta_s, eta);
      printf("step %*lld/%lld | loss %.4f | lr %.2e", width, (long long)s, (long long)o->steps, loss, lr);
      if (r->gnorm) printf(" | norm %.3f", gn);
      printf(" | %.1f ms", dt * 1e3);
      if (r->ctx.world > 1) printf(" (comm %.0f%%)", dt > 0 ? 100 * dcomm / dt : 0.0);
      printf(" | %.0f tok/s | MFU %.1f%% | mem %s | ETA %s\n", tps, 100 * mfu, mem_s, eta_s);
      if (r->log) {
        fprintf(r->log, "{\"step\":%lld,\"steps\":%lld", (long long)s, (long long)o->steps);
        json_num(r->log, "loss", loss, "%.9g");
        json_num(r->log, "lr", lr, "%.9g");
        if (r->gnorm) json_num(r->log, "grad_norm", gn, "%.9g");
        json_num(r->log, "ms", dt * 1e3, "%.3f");
        if (r->ctx.world > 1) json_num(r->log, "comm_ms", dcomm * 1e3, "%.3f");
        json_num(r->log, "tokens_per_s", tps, "%.1f");
        json_num(r->log, "mfu", mfu, "%.6f");
        fprintf(r->log, ",\"mem_bytes\":%lld", (long long)rss);
        json_num(r->log, "eta_s", eta, "%.1f");
        fputs("}\n", r->log);
        fflush(r->log);
      }
    }
    if (r->has_val && o->eval_every && s % o->eval_every == 0) log_eval(r, s, last_val = evaluate(r));
    if (o->ckpt_every && s % o->ckpt_every == 0 && s != stop) save(r), saved_at = s;
  }
  double t_total = rt_now() - t_start;
  r->ctx.step = 0;
  if (r->has_val && !(o->eval_every && r->st.step % o->eval_every == 0 && r->st.step >= first))
    log_eval(r, r->st.step, last_val = evaluate(r));
  /* at the end; a fresh run with --steps 0 and --save-to saves its initial (or --init-from) weights as step 0 */
  if (o->save_to && saved_at != r->st.step && (r->st.step >= first || (o->save_set && !o->resume && r->st.step == 0)))
    save(r);

  if (r->ctx.rank == 0) {
    int64_t ran = stop >= first ? stop - first + 1 : 0;
    if (ran > 0) {
      double tps = steady_steps ? (double)(gbatch * T) * (double)steady_steps / t_steady : 0;
      printf("done: %lld step(s) in %.2f s, %.0f tok/s, MFU %.1f%%; loss %.4f", (long long)ran, t_total, tps,
             100 * job_mfu(r, p, tps), r->st.loss);
      if (r->ctx.world > 1 && steady_steps)
        printf("; %.1f ms/step, of which communication %.1f ms (%.0f%%, rank 0)", 1e3 * t_steady / (double)steady_steps,
               1e3 * comm_steady / (double)steady_steps, t_steady > 0 ? 100 * comm_steady / t_steady : 0.0);
      if (isfinite(last_val)) printf(", val loss %.4f", last_val);
      printf("\n");
    } else {
      printf("nothing to train: at step %lld of %lld\n", (long long)r->st.step, (long long)stop);
    }
    print_memory("at end", p, r->base_rss);
  }
  if (o->sample) sample(r);

  if (r->log && fclose(r->log) != 0) rt_user_error("--log: cannot write '%s'", o->log);
  rt_data_free(&r->train);
  rt_data_free(&r->val);
  if (r->dev) {
    r->dev->close(&r->ctx);
    free(r->hmem);
    free((void *)r->hp->tensors);
    free(r->hp);
  } else if (r->ctx.comm) {
    rt_comm_mem_free(r->ctx.comm, r->mem); /* (every collective on it has finished on every member) */
  } else {
    free(r->mem);
  }
  rt_logical_program_free(r->lp);
  rt_dist_free(&r->dist, &r->ctx);
  return 0;
}
