/* runtime/train/main.c — rt_train_main: the trainer a generated program runs.
 *
 * Flags (flags.c) → ranks (dist.c) → one allocation → init (or --resume / --init-from) → data →
 * the step loop (inputs, p->step, progress line, JSON-lines log, validation, checkpoints) →
 * summary → sampling (eval.c). Every rank runs the same loop (the step's collectives keep them in
 * lockstep); rank 0 prints, logs (log.c) and writes checkpoints; every rank reads its own block of
 * each batch. Weights, batches, checkpoints and dumps are logical tensors; each rank holds its
 * block (layout.c, dist.c, tensors.c). run.h says how a device program's tensors reach the host.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../comm/comm.h"
#include "../kernels/kernels.h"
#include "../ops/ops.h" /* rt_matmul_flops */
#include "../rng.h"
#include "run.h"
#include "trace.h"

static const RtTensor *need_tensor(const RtProgram *p, const char *name, int dtype, int rank, const int64_t *dims) {
  const RtTensor *t = rt_find_tensor(p, name);
  if (!t) rt_bug("the program has no \"%s\" tensor", name);
  int ok = t->dtype == dtype && t->rank == rank;
  for (int i = 0; ok && i < rank; i++)
    ok = t->dims[i] == dims[i];
  if (!ok) rt_bug("the program's \"%s\" tensor has an unexpected dtype or shape", name);
  return t;
}


/* --resume DIR without --save-to: the run goes on saving where it resumed from — the checkpoint root
 * DIR is (it holds step_* directories), or the one a DIR/step_N lies in — rather than into the
 * recipe's directory; said once. A checkpoint directory of another name (a conversion's output)
 * is no root: the recipe's directory stays. */
static void resume_save_to(RtRun *r) {
  RtOpts *o = &r->o;
  const char *dir = o->resume, *base = strrchr(dir, '/');
  base = base ? base + 1 : dir;
  char *root = NULL;
  if (!rt_ckpt_is_complete(dir)) {
    root = rt_xstrdup(dir);
  } else if (!strncmp(base, "step_", 5) && base[5] && strspn(base + 5, "0123456789") == strlen(base + 5)) {
    root = base == dir ? rt_xstrdup(".") : rt_xprintf("%.*s", (int)(base - 1 - dir > 0 ? base - 1 - dir : 1), dir);
  }
  if (!root) return;
  if (strlen(root) < sizeof o->save_buf) {
    char *was = o->save_to ? rt_xprintf("not the recipe's %s", o->save_to) : rt_xstrdup("the recipe names none");
    snprintf(o->save_buf, sizeof o->save_buf, "%s", root);
    o->save_to = o->save_buf;
    if (r->ctx.rank == 0)
      printf("checkpoints: into %s, where --resume's checkpoint is (%s; --save-to DIR sends them elsewhere)\n",
             o->save_to, was);
    free(was);
  }
  free(root);
}

/* Ranks (under mpirun / srun, or for a multi-rank program), threads, the program's inputs and
 * results, the logical batch and a fresh trainer state. */
static void run_init(RtRun *r, int *argc, char ***argv) {
  const RtProgram *p = r->p;
  const RtOpts *o = &r->o;
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
  rt_dist_init(&r->dist, argc, argv, p, &r->ctx);
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
  /* the global batch is the compiler's (Module.batch); the tokens' logical rows must hold exactly it */
  r->gbatch = p->global_batch ? p->global_batch : lbt[0];
  if (r->gbatch != lbt[0])
    rt_bug("the program's global batch %lld is not its tokens' %lld logical rows", (long long)r->gbatch,
           (long long)lbt[0]);
  r->gseq = lbt[1];
  int64_t gbatch = r->gbatch;
  T = r->gseq; /* from here on: the logical sequence length */
  if (r->multi) r->lp = rt_logical_program(p, &r->lbytes);
  r->sharded = r->multi && !(o->ckpt_format && !strcmp(o->ckpt_format, "logical"));
  if (o->batch && o->batch != gbatch) {
    if (p->global_batch)
      rt_user_error("--batch %lld: this program was compiled for a batch of %lld sequences (micro_batch %lld x dp %d x "
                    "%lld accumulation step(s)); recompile with another batch to change it",
                    (long long)o->batch, (long long)gbatch, (long long)p->micro_batch, rt_program_degree(p, RT_AX_DP),
                    (long long)p->accum);
    rt_user_error("--batch %lld: this program was compiled for a batch of %lld sequences; recompile with another batch "
                  "to change it",
                  (long long)o->batch, (long long)gbatch);
  }
  if (o->resume && !strcmp(o->resume, "auto")) { /* the newest complete checkpoint in --save-to, if any */
    if (!o->save_to) rt_user_error("--resume auto resumes from --save-to's newest checkpoint: give --save-to DIR");
    char *dir = rt_ckpt_find(o->save_to);
    if (r->ctx.rank == 0)
      printf("--resume auto: %s%s\n", dir ? "resuming from " : "no checkpoint in ",
             dir ? dir : o->save_to);
    r->auto_resume = dir;
    r->o.resume = dir; /* NULL: a fresh start (or --init-from's weights) */
  }
  if (o->init_from && o->resume && !r->auto_resume)
    rt_user_error("--init-from and --resume exclude each other");
  if (r->auto_resume) r->o.init_from = NULL; /* a restart continues from its checkpoint */
  if (o->resume && !r->auto_resume && !o->save_set) resume_save_to(r);

  r->loss = rt_find_tensor(p, "loss");
  if (!r->loss) rt_bug("the program has no \"loss\" tensor");
  r->lr = rt_find_tensor(p, "lr");
  r->stepno = rt_find_tensor(p, "step");
  r->gnorm = rt_find_tensor(p, "grad_norm");

  /* The trainer state: fresh, or from the checkpoint (read before the data: the seed orders it). */
  r->st = (RtTrainState){.steps = o->steps, .seed = o->seed, .batch = gbatch, .seq = T, .loss = NAN};
  r->st.rng = rt_rng_key(o->seed, "sample");
}

static void run_free(RtRun *r) {
  free(r->auto_resume);
  rt_logical_program_free(r->lp);
  rt_dist_free(&r->dist, &r->ctx);
}

/* Bytes of host memory available now (/proc/meminfo MemAvailable), or -1 when unknown. */
static int64_t host_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  long long kb = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
  fclose(f);
  return kb < 0 ? -1 : (int64_t)kb * 1024;
}

/* Processes of this job on this host, as the launcher says (1 when it does not). */
static int local_procs(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && atoi(v) > 0) return atoi(v);
  }
  return 1;
}

/* The plan against the host's free memory before allocating it (CPU programs; a device
 * program's allocation is checked against the device's free memory where it is made). */
static void check_host_memory(const RtProgram *p, size_t bytes) {
  int64_t avail = host_available();
  int n = local_procs();
  if (avail < 0 || (double)bytes * n <= (double)avail) return;
  rt_user_error("the plan does not fit this host: %.1f MiB per rank (%lld planned + %lld kernel workspace) x %d "
                "rank%s here = %.1f MiB, but %.1f MiB is available (MemAvailable); `shardc plan` shows the memory by "
                "class and the knobs that bring it down",
                (double)bytes / (1 << 20), (long long)p->mem_bytes, (long long)(bytes - (size_t)p->mem_bytes), n,
                n == 1 ? "" : "s", (double)bytes * n / (1 << 20), (double)avail / (1 << 20));
}

/* One allocation (the plan, then the kernels' workspace), 64-byte aligned, touched. Returns 1
 * when the program's device cannot be opened (it said why). */
static int mem_init(RtRun *r) {
  const RtProgram *p = r->p;
  r->base_rss = rt_vm_rss();
  int64_t ws = p->workspace_bytes ? p->workspace_bytes() : 0;
  size_t bytes = ((size_t)(p->mem_bytes + ws > 0 ? p->mem_bytes + ws : 64) + 63) / 64 * 64;
  r->hp = (RtProgram *)p;
  if (p->device) { /* on the device: find it, build its kernels, allocate; host tensors in a compact copy */
    r->dev = p->device;
    if (r->dev->open(p, &r->ctx, (int64_t)bytes, &r->mem) != 0) return 1;
    int64_t hbytes;
    r->hp = rt_host_program(p, &hbytes);
    r->hmem = rt_xcalloc((size_t)hbytes + 64, 1);
    if (p->host_bytes > 0) { /* plan offload: the optimizer step's tensors in host memory, pinned */
      size_t hb = ((size_t)p->host_bytes + 63) / 64 * 64;
      int64_t avail = host_available();
      int n = local_procs();
      if (avail >= 0 && (double)hb * n > (double)avail)
        rt_rank_error("the offloaded optimizer step does not fit this host: %.1f MiB of host memory per "
                      "rank x %d rank%s here = %.1f MiB, but %.1f MiB is available (MemAvailable); `shardc plan` "
                      "shows the host memory the plan needs",
                      (double)hb / (1 << 20), n, n == 1 ? "" : "s", (double)hb * n / (1 << 20),
                      (double)avail / (1 << 20));
      r->ctx.host_mem = aligned_alloc(64, hb);
      if (!r->ctx.host_mem)
        rt_user_error("cannot allocate the planned %lld bytes of host memory (offload)", (long long)p->host_bytes);
      memset(r->ctx.host_mem, 0, hb);
      if (r->dev->pin) r->dev->pin(&r->ctx, r->ctx.host_mem, (int64_t)hb);
    }
  } else {
    check_host_memory(p, bytes);
    /* multi-rank: memory the local peers map (runtime/comm/shmem.c), so the collectives on
     * gradients and activations copy and reduce through mappings, not process_vm_readv */
    r->mem = r->ctx.comm ? rt_comm_mem_alloc(r->ctx.comm, bytes) : aligned_alloc(64, bytes);
    /* every rank's buffers are mapped by its local peers: the direct collectives beat the ring
     * from 16 KiB (2.5 vs 7.9 us for an all-reduce at 2 ranks, docs/performance.md); every rank
     * sets the same value, as rt_comm_tune requires; SHARDRT_DIRECT_MIN still decides */
    const char *dmin = getenv("SHARDRT_DIRECT_MIN");
    if (r->ctx.comm && !(dmin && *dmin)) rt_comm_tune(r->ctx.comm, "direct_min", (size_t)16 << 10);
    /* below some size one round through shared-memory mailboxes beats the direct reads:
     * where, is measured here (a few ms; SHARDRT_MBOX_MAX fixes it; never changes a result) */
    if (r->ctx.comm) rt_comm_autotune(r->ctx.comm, true);
    if (!r->mem)
      rt_user_error("cannot allocate the planned %lld bytes (+ %lld bytes of kernel workspace)",
                    (long long)p->mem_bytes, (long long)ws);
    memset(r->mem, 0, bytes);
    r->hmem = r->mem;
  }
  return 0;
}

static void mem_free(RtRun *r) {
  if (r->dev) {
    if (r->ctx.host_mem && r->dev->unpin) r->dev->unpin(&r->ctx, r->ctx.host_mem);
    r->dev->close(&r->ctx);
    free(r->ctx.host_mem);
    r->ctx.host_mem = NULL;
    free(r->hmem);
    rt_host_program_free(r->hp);
  } else if (r->ctx.comm) {
    rt_comm_mem_free(r->ctx.comm, r->mem); /* (every collective on it has finished on every member) */
  } else {
    free(r->mem);
  }
}

/* The weights and the trainer state: from --resume's newest checkpoint, or initialised (then
 * --init-from's weights). */
static void weights_init(RtRun *r) {
  RtOpts *o = &r->o;
  int64_t gbatch = r->gbatch, T = r->gseq;
  if (o->resume) {
    char *dir = rt_ckpt_find(o->resume);
    if (!dir)
      rt_user_error("--resume: '%s' holds no checkpoint (no step_* directory with a model.safetensors)", o->resume);
    RtTrainState cs;
    double t0 = rt_now();
    rt_run_load(r, dir, 1, &cs);
    double t_load = rt_now() - t0;
    if (o->seed_set && o->seed != cs.seed)
      rt_user_error("--seed %llu differs from the checkpoint's seed %llu ('%s'); a resumed run keeps its seed",
                    (unsigned long long)o->seed, (unsigned long long)cs.seed, dir);
    if (cs.batch != gbatch || cs.seq != T)
      rt_user_error("'%s' was written with batch %lld x %lld tokens, this run has %lld x %lld", dir,
                    (long long)cs.batch, (long long)cs.seq, (long long)gbatch, (long long)T);
    o->seed = cs.seed;
    /* a schedule that ends before the checkpoint's step trains nothing ("at step 40 of 2" was a
     * success); one of another length continues on another learning-rate curve: said */
    if (o->steps_set && o->steps > 0 && o->steps < cs.step)
      rt_user_error("--steps %lld is before the checkpoint's step %lld ('%s'): the run would train nothing; give --steps "
                    "above %lld, or leave --steps out to finish the checkpoint's schedule (%lld steps)",
                    (long long)o->steps, (long long)cs.step, dir, (long long)cs.step, (long long)cs.steps);
    if (o->stop_at_set && o->stop_at > 0 && o->stop_at < cs.step)
      rt_user_error("--stop-at %lld is before the checkpoint's step %lld ('%s'): the run would train nothing",
                    (long long)o->stop_at, (long long)cs.step, dir);
    if (o->steps_set && o->steps > cs.step && o->steps != cs.steps && r->ctx.rank == 0)
      fprintf(stderr,
              "note: --steps %lld: the checkpoint was trained on a schedule of %lld steps; steps %lld..%lld follow the "
              "learning rate of a %lld-step schedule (leave --steps out to continue the checkpoint's own)\n",
              (long long)o->steps, (long long)cs.steps, (long long)cs.step + 1, (long long)o->steps,
              (long long)o->steps);
    if (!o->steps_set) o->steps = cs.steps;
    cs.steps = o->steps;
    r->st = cs;
    if (r->ctx.rank == 0)
      printf("resumed from %s: step %lld, data position %lld (read in %.2f s)\n", dir, (long long)cs.step,
             (long long)cs.data_pos, t_load);
    free(dir);
  } else {
    /* --init-from's file sets every parameter (one it lacks is refused), so they are not
     * initialised first: the state only (zero). Their padding rows (uneven pipeline stages) stay
     * as mem_init left them, zero, as the init writes them. (--resume reads both kinds.) */
    int kinds = 1 << RT_T_STATE | (o->init_from ? 0 : 1 << RT_T_PARAM);
    rt_init_tensors(r->hp, r->hmem, o->seed, &r->ctx, kinds);
    rt_run_kinds_to_dev(r, kinds);
    rt_run_derive_copies(r, NULL); /* (--init-from's load derives them again) */
    if (o->init_from) {
      rt_run_load(r, o->init_from, 0, NULL);
      if (r->ctx.rank == 0) printf("weights from %s\n", o->init_from);
    }
  }
}

/* --data, and --val or the held-out tail of --data. */
static void data_init(RtRun *r, int training) {
  const RtProgram *p = r->p;
  const RtOpts *o = &r->o;
  RtDataOpts dopt = {.T = r->gseq, .vocab = p->vocab, .byte_level = p->byte_level};
  if (!o->data && (training || o->sample)) rt_user_error("no training data: pass --data PATH|GLOB");
  if (o->data) {
    /* a path from the recipe is relative to where the trainer runs: say where it came from */
    const char *what = o->data_set ? "--data" : "data (the model's train block; --data overrides)";
    rt_data_open(&r->train, what, o->data, &dopt);
    r->train.shuffle = 1;
    r->train.seed = o->seed;
  }
  if (o->val) {
    rt_data_open(&r->val, o->val_set ? "--val" : "val (the model's train block; --val overrides)", o->val, &dopt);
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
  /* fewer windows than one step reads: each batch would hold some sequence twice (the corpus is
   * too small, or a wrong file), which trains silently on repeats */
  if (training && r->train.nwin < r->gbatch)
    rt_user_error("%s: '%s' holds %lld sequence(s) of %lld+1 tokens%s, fewer than one global batch of %lld: every step "
                  "would repeat sequences; give more data%s",
                  o->data_set ? "--data" : "data (the model's train block)", o->data, (long long)r->train.nwin,
                  (long long)r->gseq, r->val.files && !o->val ? " after the last 10% held out for validation" : "",
                  (long long)r->gbatch, r->val.files && !o->val ? " (or --val FILE, which holds none out)" : "");
}

static void data_free(RtRun *r) {
  rt_data_free(&r->train);
  rt_data_free(&r->val);
}

/* A number for a message: NaN, Inf, -Inf, or %.6g. */
static void fmt_value(char *out, size_t n, double v) {
  if (isnan(v))
    snprintf(out, n, "NaN");
  else if (isinf(v))
    snprintf(out, n, "%sInf", v < 0 ? "-" : "");
  else
    snprintf(out, n, "%.6g", v);
}

/* NaN / Inf after a step, and a stop asked for by a signal, agreed by every rank in one 16-byte
 * all-reduce (a pipeline's other stages do not see the loss; a rank may get the signal a step
 * after another): STEP_SKIPPED when the step skipped its update (--on-nonfinite skip: the
 * compiled update is gated on the global gradient sum of squares, the all-reduced value behind
 * grad_norm, so every rank skipped or none did — a disagreement is a bug), STEP_BAD when the loss
 * or the gradients are not finite and the step was not skipped. *stop: some rank got SIGTERM /
 * SIGUSR1 (stop.c). */
enum { STEP_OK, STEP_SKIPPED, STEP_BAD };
static int check_finite(RtRun *r, int64_t s, double loss, double gn, int *stop) {
  int bad_grad = r->gnorm && !isfinite(gn);
  int f[RT_TRAINER_FLAGS] = {r->o.skip && bad_grad, r->o.skip && !bad_grad, !isfinite(loss) || bad_grad,
                             rt_stop_signal() != 0};
  rt_dist_any_n(&r->ctx, f, RT_TRAINER_FLAGS);
  if (f[0] && f[1])
    rt_bug("rank %d: the ranks disagree on whether step %lld's gradients are finite (this rank's gradient norm is "
           "%g): some skipped the update and some applied it",
           r->ctx.rank, (long long)s, gn);
  *stop = f[3];
  return f[0] ? STEP_SKIPPED : f[2] ? STEP_BAD : STEP_OK;
}

/* Steps loop->first..loop->stop, with their validations and checkpoints; fills the rest of loop. */
static void train_loop(RtRun *r, RtLoop *loop) {
  const RtProgram *p = r->p;
  const RtOpts *o = &r->o;
  int64_t first = loop->first, stop = loop->stop;
  if (o->skip && !r->gnorm) rt_bug("on_nonfinite skip: the program has no \"grad_norm\" result (passes/optimizer.c)");
  double t_start = rt_now();
  for (int64_t s = first; s <= stop; s++) {
    r->ctx.step = s;
    rt_run_load_batch(r, &r->train, r->st.data_pos);
    /* the optimizer's step: the updates applied so far + 1 — a skipped step advances neither
     * AdamW's bias correction nor the schedule (as Megatron and DeepSpeed skip an overflowed step) */
    int64_t opt_step = s - r->st.skipped;
    double lr = rt_lr_at(p->recipe.lr_schedule, p->recipe.lr, p->recipe.min_lr, p->recipe.warmup, o->steps, opt_step - 1);
    rt_run_put_input(r, r->lr, lr);
    rt_run_put_input(r, r->stepno, (double)opt_step);
    rt_fault_before_step(r, s);
    double t0 = rt_now(), c0 = r->ctx.comm_s;
    RtCollCounts cc0, cc1;
    rt_coll_counts(&cc0);
    uint64_t f0 = rt_matmul_flops();
    int64_t k0[RT_KC_COUNT], k1[RT_KC_COUNT];
    memcpy(k0, rt_kcalls, sizeof k0);
    if (r->dev && r->dev->run)
      r->dev->run(&r->ctx, p->step, r->mem);
    else
      p->step(r->mem, &r->ctx);
    if (r->dev) r->dev->sync(&r->ctx); /* the step's time is the device's */
    rt_coll_counts(&cc1);
    for (int g = 0; g < RT_CC_ROWS; g++)
      for (int k = 0; k < RT_CK_COUNT; k++) cc1.count[g][k] -= cc0.count[g][k], cc1.bytes[g][k] -= cc0.bytes[g][k];
    if (!loop->colls_step) {
      loop->colls = cc1, loop->colls_step = s, loop->gemm_flops = rt_matmul_flops() - f0;
      rt_fault_flops(r, s, &loop->gemm_flops);
    }
    else if (!loop->colls_varied && memcmp(&cc1, &loop->colls, sizeof cc1) != 0) loop->colls_varied = s;
    for (int k = 0; k < RT_KC_COUNT; k++) k1[k] = rt_kcalls[k] - k0[k];
    rt_fault_kcalls(r, s, k1);
    if (s == loop->colls_step) memcpy(loop->kcalls, k1, sizeof k1);
    else if (!loop->kcalls_varied && memcmp(k1, loop->kcalls, sizeof k1) != 0) loop->kcalls_varied = s;
    rt_fault_after_step(r);
    rt_run_check_device_flags(r, "training");
    double dt = rt_now() - t0, dcomm = r->ctx.comm_s - c0;
    rt_trace_span(&r->ctx, RT_TRACE_COMPUTE, "step", -1, -1, -1, t0, t0 + dt);
    int steady = s > first || stop == first; /* the first step warms up, unless it is the only one */
    if (steady) loop->comm_steady += dcomm;
    r->st.data_pos += r->gbatch;
    r->st.step = s;
    double loss = rt_run_get_result(r, r->loss), gn = rt_run_get_result(r, r->gnorm);
    r->st.loss = loss; /* before the dump: its metadata holds this step's loss */
    if (s <= o->dump_steps) {
      const char *dir = o->dump_to ? o->dump_to : "dump";
      if (r->ctx.rank == 0 && mkdir(dir, 0755) != 0 && errno != EEXIST)
        rt_user_error("--dump-to: cannot create '%s': %s", dir, strerror(errno));
      char *path = rt_xprintf("%s/step_%lld.safetensors", dir, (long long)s);
      rt_run_dump(r, path);
      free(path);
    }
    if (steady) loop->t_steady += dt, loop->steady_steps++;
    int stop_asked;
    int verdict = check_finite(r, s, loss, gn, &stop_asked);
    if (verdict == STEP_SKIPPED) r->st.skipped++, r->st.skip_run++; /* (the log line counts this one) */
    else r->st.skip_run = 0;
    RtStepStats st = {.step = s, .loss = loss, .lr = lr, .gnorm = gn, .seconds = dt, .comm_seconds = dcomm,
                      .skipped = verdict == STEP_SKIPPED};
    st.tokens_per_s = (double)(r->gbatch * r->gseq) / dt;
    st.mfu = rt_run_mfu(r, st.tokens_per_s);
    st.eta_s = loop->steady_steps ? loop->t_steady / (double)loop->steady_steps * (double)(stop - s) : NAN;
    st.rss = rt_vm_rss();
    rt_log_step(r, &st);
    if (verdict != STEP_OK) { /* every rank agreed on it: all skip, or all stop before anything is checkpointed */
      char what[256], l[32], g[32];
      fmt_value(l, sizeof l, loss);
      fmt_value(g, sizeof g, gn);
      if (verdict == STEP_SKIPPED && r->ctx.rank == 0) /* the step left every parameter and state as it was */
        fprintf(stderr,
                "warning: step %lld skipped: the gradient norm is %s (loss %s); no parameter or optimizer state "
                "changed and the optimizer stays at step %lld (%lld skipped in a row, at most %lld)\n",
                (long long)s, g, l, (long long)opt_step - 1, (long long)r->st.skip_run, (long long)o->max_skips);
      if (verdict == STEP_BAD)
        snprintf(what, sizeof what, r->gnorm ? "the loss is %s (gradient norm %s)" : "the loss is %s", l, g);
      else if (r->st.skip_run > o->max_skips)
        snprintf(what, sizeof what,
                 "the gradient norm is %s (loss %s): %lld steps in a row with non-finite gradients, more than the "
                 "%lld that may be skipped (max_skips)",
                 g, l, (long long)r->st.skip_run, (long long)o->max_skips);
      if (verdict == STEP_BAD || r->st.skip_run > o->max_skips) rt_run_diverged(r, s, what);
    }
    if (r->has_val && o->eval_every && s % o->eval_every == 0)
      rt_log_eval(r, s, loop->last_val = rt_run_evaluate(r));
    if (o->ckpt_every && s % o->ckpt_every == 0 && s != stop) rt_run_save(r), loop->saved_at = s;
    rt_fault_after_log(r, s, first);
    if (stop_asked && s < stop) { /* every rank agreed: the run ends after this step, checkpointed (rt_train_main) */
      loop->stop = s;
      loop->stopped = 1;
      break;
    }
  }
  loop->t_total = rt_now() - t_start;
  rt_stop_disarm(); /* the ranks have agreed to stop, or trained every step: a signal no longer ends a collective */
}

/* SHARDRT_DONE_FILE (scripts/launch.sh --done-file sets it): rank 0 writes it once the run has
 * completed, so that the launcher tells a finished run from a launcher's status 0 for tasks that never
 * ran (srun's, after "task 0 launch failed", on a real Slurm 22.05). The launcher writes the file
 * ("waiting: ...") before each attempt: a rank 0 that does not see it runs where the launcher's
 * directory is not (another node, no shared file system), and its "done" would never reach the
 * launcher, which would take every completed run for a failed one and train it again: a user error,
 * said before any step (status 1: the launcher does not restart it). */
static void check_done_file(const RtRun *r) {
  const char *path = getenv("SHARDRT_DONE_FILE");
  if (!path || !*path || r->ctx.rank != 0 || access(path, F_OK) == 0) return;
  int err = errno;
  char host[256] = "?";
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
  host[sizeof host - 1] = 0;
  rt_rank_error("SHARDRT_DONE_FILE='%s' (scripts/launch.sh --done-file): rank 0, on host %s, does not see the file the "
                "launcher wrote there before this attempt (%s): the launcher would never see rank 0's 'done' either. "
                "--done-file needs a file system that rank 0 and the launcher share: run the job from a directory on "
                "one (Slurm: sbatch from a shared directory), or give an absolute path on one",
                path, host, strerror(err));
}

static void write_done_file(const RtRun *r) {
  const char *path = getenv("SHARDRT_DONE_FILE");
  if (!path || !*path || r->ctx.rank != 0) return;
  FILE *f = fopen(path, "w");
  bool ok = f && fprintf(f, "done: step %lld\n", (long long)r->st.step) > 0;
  if (f && fclose(f) != 0) ok = false;
  if (!ok) fprintf(stderr, "warning: SHARDRT_DONE_FILE: cannot write '%s': %s (the launcher takes the run for a failed one)\n",
                   path, strerror(errno));
}

int rt_train_main(int argc, char **argv, const RtProgram *p) {
  RtRun run, *r = &run;
  memset(r, 0, sizeof *r);
  r->p = p;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (rt_opts_parse(argc, argv, p, &r->o)) return 0;
  RtOpts *o = &r->o;
  if (o->compile_kernels) { /* no rank, no data, no device: NVRTC into the kernel cache */
    if (!p->device || !p->device->compile)
      rt_user_error("--compile-kernels %s: this trainer runs on the CPU: it has no GPU kernels to compile",
                    o->compile_kernels);
    if (*o->others) /* (they were dropped without a word) */
      fprintf(stderr, "warning: --compile-kernels compiles the kernels and exits: %s do%s nothing\n", o->others,
              strchr(o->others, ',') ? "" : "es");
    return p->device->compile(p, o->compile_kernels) ? 1 : 0;
  }

  run_init(r, &argc, &argv);
  if (o->save_to) rt_ckpt_check_dir(o->save_to); /* a bad --save-to fails now, not after the training */
  check_done_file(r); /* a done file rank 0 cannot share with the launcher fails now, too */
  if (o->init_from && access(o->init_from, R_OK) != 0) /* (the reader's error did not name the flag) */
    rt_user_error("--init-from: cannot open '%s': %s", o->init_from, strerror(errno));
  if (o->sample) rt_run_sample_check(r);         /* so does a --sample the program cannot serve */
  if (mem_init(r) != 0) {
    run_free(r);
    return 1;
  }
  weights_init(r);
  rt_run_snapshot_prepare(r);
  RtLoop loop = {.first = r->st.step + 1, .saved_at = -1, .last_val = NAN};
  loop.stop = o->stop_at_set && o->stop_at < o->steps ? o->stop_at : o->steps; /* (--stop-at 0 trained them all) */
  data_init(r, r->st.step < loop.stop);
  rt_log_init(r, &loop);

  rt_run_trace_open(r);
  if (loop.first <= loop.stop) rt_stop_install(); /* SIGTERM / SIGUSR1: a checkpoint, then RT_EXIT_STOPPED */
  train_loop(r, &loop);
  rt_run_trace_close(r);
  r->ctx.step = 0;
  if (r->has_val && !loop.stopped && !(o->eval_every && r->st.step % o->eval_every == 0 && r->st.step >= loop.first))
    rt_log_eval(r, r->st.step, loop.last_val = rt_run_evaluate(r));
  /* at the end; a fresh run with --steps 0 and --save-to saves its initial (or --init-from) weights as step 0;
   * a resumed one that trains no step saves into a --save-to without that step (a conversion: say
   * sharded -> --ckpt-format logical, or onto another layout's ranks) */
  int trained = r->st.step >= loop.first, convert = 0;
  if (o->save_set && !trained && o->resume) {
    char *here = rt_xprintf("%s/step_%08lld", o->save_to, (long long)r->st.step);
    convert = !rt_ckpt_is_complete(here);
    free(here);
  }
  if (o->save_to && loop.saved_at != r->st.step &&
      (trained || convert || (o->save_set && !o->resume && r->st.step == 0)))
    rt_run_save(r);
  rt_run_writer_free(r); /* the last checkpoint is complete before the run ends */
  /* a signal after the last step: the run is complete (status 0, no --sample); a stopped run keeps the
   * handler to its exit (mpirun ends the other ranks with SIGTERM once one exits non-zero) */
  if (!loop.stopped) rt_stop_uninstall();
  rt_log_done(r, &loop);
  rt_log_colls(r, &loop);
  if (loop.stopped) {
    /* every rank's writer has finished and rank 0 has committed before any rank exits: under mpirun
     * the first rank to exit non-zero has the others killed */
    if (r->ctx.world > 1) rt_dist_barrier(&r->ctx);
    rt_log_stopped(r);
  } else if (o->sample && !rt_stop_signal()) {
    rt_run_sample(r);
  }

  if (!loop.stopped) write_done_file(r);
  rt_log_free(r);
  data_free(r);
  mem_free(r);
  run_free(r);
  return loop.stopped ? RT_EXIT_STOPPED : 0;
}
