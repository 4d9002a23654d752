/* runtime/train/flags.c — the trainer's command line: every flag with its default (the
 * program's recipe), parsing and --help. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run.h"

typedef struct {
  const char *name;       /* flag without "--" */
  int kind;               /* 0 string, 1 int64 >= 0, 2 uint64, 3 double >= 0, 4 int64 >= 1 */
  void *dst;              /* where the value goes */
  int *set;               /* set to 1 when given (may be NULL) */
  const char *arg, *help; /* usage text */
} Flag;

/* Edit distance between a[0..n) and b (insertions, deletions, substitutions), at most 32 long each. */
static int edit_distance(const char *a, size_t n, const char *b) {
  size_t m = strlen(b);
  if (n > 32 || m > 32) return 99;
  int d[33][33];
  for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= n; i++)
    for (size_t j = 1; j <= m; j++) {
      int x = d[i - 1][j] + 1, y = d[i][j - 1] + 1, z = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      d[i][j] = x < y ? (x < z ? x : z) : (y < z ? y : z);
    }
  return d[n][m];
}

static void usage(FILE *f, const char *prog, const RtProgram *p, const Flag *flags, int nflags) {
  fprintf(f, "usage: %s [flags]\n", prog);
  fprintf(f, "Trains %s (compiled from %s): %lld parameters, micro-batch %lld x %lld tokens, vocabulary %lld%s.\n",
          p->model ? p->model : "?", p->source ? p->source : "?", (long long)p->nparams,
          (long long)(p->micro_batch > 0 ? p->micro_batch : p->batch), (long long)p->seq, (long long)p->vocab, p->byte_level ? " (bytes)" : "");
  /* scripts/launch.sh reads this line (an elastic re-plan keeps the global batch) */
  fprintf(f, "Compiled for %d rank(s) (dp %d x pp %d x cp %d x tp %d); global batch %lld sequences per optimizer step "
             "(%lld accumulation micro-step(s)).\n\n",
          rt_program_world(p), rt_program_degree(p, RT_AX_DP), rt_program_degree(p, RT_AX_PP),
          rt_program_degree(p, RT_AX_CP), rt_program_degree(p, RT_AX_TP),
          (long long)(p->global_batch > 0 ? p->global_batch : p->batch), (long long)(p->accum > 0 ? p->accum : 1));
  for (int i = 0; i < nflags; i++) {
    char left[48];
    snprintf(left, sizeof left, "--%s%s%s", flags[i].name, flags[i].arg ? " " : "", flags[i].arg ? flags[i].arg : "");
    fprintf(f, "  %-29s %s\n", left, flags[i].help);
  }
  fprintf(f, "  %-29s %s\n", "--help", "this text");
  /* what a run without the flags does: the recipe's values (a run wrote checkpoints into the
   * recipe's directory, which --help did not name) */
  const RtRecipe *r = &p->recipe;
  fprintf(f, "\nWithout these flags (the model's train block): --steps %lld, --seed %llu",
          (long long)(r->steps > 0 ? r->steps : 1), (unsigned long long)r->seed);
  if (r->data) fprintf(f, ", --data '%s'", r->data);
  if (r->val) fprintf(f, ", --val '%s'", r->val);
  if (r->ckpt_dir)
    fprintf(f, ", --save-to '%s' --ckpt-every %lld --keep %d", r->ckpt_dir, (long long)r->ckpt_every,
            r->ckpt_keep > 0 ? r->ckpt_keep : 0);
  else
    fprintf(f, "; no checkpoints unless --save-to DIR");
  fprintf(f, ".\n");
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

/* DIR without its trailing '/'s (a shell's completion adds one), copied into buf: every checkpoint
 * path is DIR joined to a name, which printed "ck//step_00000010"; "/" stays "/". */
static const char *trim_dir(const char *dir, char *buf, size_t n) {
  size_t len = dir ? strlen(dir) : 0;
  if (len < 2 || dir[len - 1] != '/' || len >= n) return dir;
  memcpy(buf, dir, len + 1);
  while (len > 1 && buf[len - 1] == '/') buf[--len] = 0;
  return buf;
}

int rt_opts_parse(int argc, char **argv, const RtProgram *p, RtOpts *o) {
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
  int seen_help = 0, max_skips_set = 0;
  o->skip = r->on_nonfinite == RT_NONFINITE_SKIP;
  o->max_skips = r->max_skips; /* (a program compiled with skip has it: ir_recipe_defaults) */
  const Flag flags[] = {
      {"data", 0, &o->data, &o->data_set, "PATH|GLOB",
       "training data: llm.c token shards (.bin), or raw bytes for byte-level models ('': none, for a run that trains no step)"},
      {"val", 0, &o->val, &o->val_set, "PATH|GLOB",
       "validation data (default: the last 10% of the last training file)"},
      {"steps", 1, &o->steps, &o->steps_set, "N",
       "steps of the schedule (the lr decays to min_lr at N); 0: no training"},
      {"stop-at", 1, &o->stop_at, &o->stop_at_set, "N", "stop after step N (the schedule still spans --steps)"},
      {"seed", 2, &o->seed, &o->seed_set, "N", "seed of the initialisation and the data order"},
      {"batch", 4, &o->batch, NULL, "N", "global batch in sequences: micro-batch x data-parallel ranks x accumulation steps (fixed at compile time)"},
      {"init-from", 0, &o->init_from, NULL, "FILE",
       "initialise the weights from a .safetensors file or checkpoint dir"},
      {"save-to", 0, &o->save_to, &o->save_set, "DIR",
       "write checkpoints DIR/step_N at the end (and every --ckpt-every); with --steps 0: the initial weights; '': "
       "none"},
      {"ckpt-every", 1, &o->ckpt_every, &o->ckpt_every_set, "N", "also checkpoint every N steps (0: only at the end)"},
      {"keep", 1, &o->keep, &o->keep_set, "K", "keep the newest K checkpoints (0: all)"},
      {"resume", 0, &o->resume, NULL, "DIR|auto",
       "continue from the newest checkpoint in DIR (weights, optimizer, step, data); auto: from --save-to's "
       "newest, or start fresh when it has none (restarts)"},
      {"log", 0, &o->log, NULL, "FILE.jsonl", "one JSON object per step (and per validation)"},
      {"eval-every", 1, &o->eval_every, NULL, "N", "validation loss every N steps (0: only at the end)"},
      {"val-batches", 4, &o->val_batches, &o->val_batches_set, "N",
       "batches per validation (default 20; at most the validation data's)"},
      {"sample", 1, &o->sample, NULL, "N", "generate N tokens after training"},
      {"temperature", 3, &o->temperature, &o->temperature_set, "X", "sampling temperature; 0: greedy (default 0.8)"},
      {"prompt", 0, &o->prompt, NULL, "TEXT", "sampling prompt (byte-level models; default: the data's start)"},
      {"threads", 4, &o->threads, &o->threads_set, "N",
       "compute threads per rank (default: the online CPUs / the ranks on this host)"},
      {"dump-steps", 1, &o->dump_steps, NULL, "N",
       "write every tensor (params, state, inputs, results) after each of the first N steps"},
      {"dump-to", 0, &o->dump_to, NULL, "DIR", "where --dump-steps writes DIR/step_N.safetensors (default: dump)"},
      {"trace", 0, &o->trace, NULL, "FILE.json",
       "write the measured timeline (Chrome trace / Perfetto JSON: per rank the steps, pipeline F/B/W, collectives)"},
      {"on-nonfinite", 0, &o->on_nonfinite, NULL, "stop|skip",
       "a step whose gradients hold NaN / Inf stops the run, or its update is skipped (default: the recipe's "
       "on_nonfinite)"},
      {"max-skips", 4, &o->max_skips, &max_skips_set, "N",
       "with skip: stop after N consecutive skipped steps (default: the recipe's max_skips)"},
      {"compile-kernels", 0, &o->compile_kernels, NULL, "ARCH",
       "GPU programs: compile the kernels for ARCH (sm_90a, sm_80; compute_90: PTX) into the kernel cache and exit, "
       "no GPU needed (fill SHARDRT_CUBIN_CACHE here, carry it to the GPU machines)"},
      {"ckpt-format", 0, &o->ckpt_format, NULL, "sharded|logical",
       "checkpoints of a multi-rank run: each rank writes its blocks (sharded, the default), or rank 0 gathers and "
       "writes whole tensors (logical; one process: always)"},
  };
  int nflags = (int)(sizeof flags / sizeof flags[0]);
  const char *given[sizeof flags / sizeof flags[0]] = {0}; /* each flag's value as given, for a second one */
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
    if (!fl) { /* a hint: the flag the name begins (--save for --save-to), else the nearest within 2 edits (1
                  for names of 3 letters or fewer) */
      const char *near = NULL, *prefix = NULL;
      for (int k = 0; k < nflags && !prefix; k++)
        if (len >= 3 && !strncmp(flags[k].name, name, len)) prefix = flags[k].name;
      int best = len < 4 ? 1 : 2;
      for (int k = 0; k < nflags; k++) {
        int dk = edit_distance(name, len, flags[k].name);
        if (dk <= best) best = dk - 1, near = flags[k].name;
      }
      if (prefix) near = prefix;
      if (near) rt_user_error("unknown flag '%.*s': did you mean '--%s'? (see --help)", (int)(len + 2), a, near);
      rt_user_error("unknown flag '%.*s' (see --help)", (int)(len + 2), a);
    }
    const char *v = eq ? eq + 1 : NULL;
    if (!v) {
      if (i + 1 >= argc) rt_user_error("--%s needs a value (%s)", fl->name, fl->arg);
      v = argv[++i];
    }
    parse_value(fl, v);
    size_t ol = strlen(o->others); /* the flags besides --compile-kernels, which then do nothing */
    if (strcmp(fl->name, "compile-kernels") != 0 && !given[fl - flags] && ol + strlen(fl->name) + 5 < sizeof o->others)
      snprintf(o->others + ol, sizeof o->others - ol, "%s--%s", ol ? ", " : "", fl->name);
    const char **prev = &given[fl - flags]; /* the last wins (a script's shared flags, then its own): said */
    size_t tl = strlen(o->twice); /* (printed by rank 0: log.c) */
    if (*prev && strcmp(*prev, v) != 0 && tl < sizeof o->twice)
      snprintf(o->twice + tl, sizeof o->twice - tl, "warning: --%s given twice ('%.64s', then '%.64s'): the last is used\n",
               fl->name, *prev, v);
    *prev = v;
  }
  if (o->data_set && !o->val_set) o->val = NULL; /* the recipe's val goes with the recipe's data */
  if (o->save_to && !*o->save_to) o->save_to = NULL; /* --save-to '': no checkpoints (not even the recipe's) */
  o->save_to = trim_dir(o->save_to, o->save_buf, sizeof o->save_buf);
  o->resume = trim_dir(o->resume, o->resume_buf, sizeof o->resume_buf);
  /* --data '' / --val '': none (not even the recipe's): a run that trains no step, such as a checkpoint's
   * conversion (--resume CK --stop-at ITS_STEP --save-to OUT), needs no corpus */
  if (o->data && !*o->data) o->data = NULL;
  if (o->val && !*o->val) o->val = NULL;
  if (o->prompt && !*o->prompt && o->sample > 0) /* (sampled the logits before the window: no position to read) */
    rt_user_error("--prompt '': sampling continues a prompt of at least one byte; leave --prompt out to start from the "
                  "data");
  if (o->prompt && o->sample > 0 && !p->byte_level) /* (was: sampled from the data's start, the prompt unread) */
    rt_user_error("--prompt: a prompt is read as bytes, which this model's tokens are not (vocabulary %lld); leave it "
                  "out to sample from the data's start",
                  (long long)p->vocab);
  if (o->ckpt_format && strcmp(o->ckpt_format, "sharded") != 0 && strcmp(o->ckpt_format, "logical") != 0)
    rt_user_error("--ckpt-format: '%s' is neither sharded nor logical", o->ckpt_format);
  if (o->on_nonfinite) {
    if (strcmp(o->on_nonfinite, "stop") != 0 && strcmp(o->on_nonfinite, "skip") != 0)
      rt_user_error("--on-nonfinite: '%s' is neither stop nor skip", o->on_nonfinite);
    int skip = !strcmp(o->on_nonfinite, "skip");
    /* skipping needs the update gated inside the compiled step (passes/optimizer.c) */
    if (skip && r->on_nonfinite != RT_NONFINITE_SKIP)
      rt_user_error("--on-nonfinite skip: this program was compiled with `on_nonfinite stop`, so its optimizer update "
                    "is not gated on finite gradients; recompile with `on_nonfinite skip` in the train block (or -D "
                    "on_nonfinite=skip)");
    o->skip = skip;
  }
  if (max_skips_set && !o->skip)
    rt_user_error("--max-skips %lld: steps are skipped only with --on-nonfinite skip (this run stops at the first "
                  "non-finite step)",
                  (long long)o->max_skips);
  /* more compute threads than CPUs only slow the kernels down (OpenMP's waiting threads spin), and
   * thousands of them exhaust the threads' stacks inside libgomp: refused with the machine's count */
  if (o->threads_set && o->threads > nproc && nproc > 0)
    rt_user_error("--threads %lld: this machine has %ld online CPU%s; compute threads beyond that only slow the kernels "
                  "down (use at most %ld)",
                  (long long)o->threads, nproc, nproc == 1 ? "" : "s", nproc);
  /* a last step past the schedule's would be ignored (the run ends with the schedule): refused */
  if (o->stop_at > o->steps)
    rt_user_error("--stop-at %lld is past the schedule's last step (%lld, %s): the run would end there; raise --steps "
                  "or lower --stop-at",
                  (long long)o->stop_at, (long long)o->steps, o->steps_set ? "--steps" : "the recipe's steps");
  if (seen_help) {
    usage(stdout, argv[0] ? argv[0] : "trainer", p, flags, nflags);
    return 1;
  }
  return 0;
}
