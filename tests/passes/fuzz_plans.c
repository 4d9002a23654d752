/* tests/passes/fuzz_plans.c — a differential fuzzer of the plan space.
 *
 * Each seed draws a small model and a plan (tests/passes/plan_gen.c: layers, d, heads, kv heads,
 * head dim, seq, vocab, norms, MLPs, tied or untied; dp, tp, sp, cp, pp, schedules, micro-batches,
 * ZeRO, offload, recompute, precision, target, world; valid or not) and compiles it through the
 * front end and the whole pass pipeline, verified after every pass, in a child process. The outcome
 * must be one of
 *   - a clean rejection: the compilation reports errors through the diagnostics (error count > 0),
 *     each at a `file:line:col` or naming the -D override it comes from; no die()/abort(), no
 *     sanitizer report, no hang;
 *   - a verified module. When its ranks are few enough (<= 16), the fp64 interpreter runs it on its
 *     simulated ranks for two optimizer steps next to the single-rank program of the same model,
 *     recipe and global batch, and the loss, the grad norm, every gradient, parameter and optimizer
 *     state must agree within 1e-10 in f32, replicas included, a bf16 weight copy the rounding of
 *     its parameter (tb_equiv_steps). In bf16 the bound is test_pp_equiv's 2^-12 (the ranks round
 *     per micro-batch, sequence chunk or tp partial sum what one rank rounds once), each step from
 *     the same state (tb_equiv_steps_resumed: run on, a parameter on a bf16 rounding boundary makes
 *     the two programs' copies a step apart and the next gradients differ by bf16's own error; seed
 *     1002560, dp 2 x cp 4: 2.4e-6 after step 1, 7.9e-4 after step 2, its f32 program 7.8e-15). There an
 *     AdamW parameter's update that misses the bound is compared with the single rank's update applied
 *     in fp64 to the partitioned program's gradient (itself compared within the bound): the update
 *     lr * m / (sqrt(v) + eps) has slope up to lr / eps in a gradient element near eps, which amplifies
 *     that element's error, small next to its tensor's largest, past 2^-12 of the parameter (seed
 *     10926460, dp 2: b_proj's element 2.3e-6 off by 4e-9 moves the parameter 2.64e-4 of its largest;
 *     the replay of the dp gradient: 0; tb.h tb_equiv_steps_resumed).
 * Anything else is a failure, printed with its reproducer (the seed, the source, the -D overrides).
 * The counts (rejected / compiled / proven equal) and the commonest rejections are printed at the
 * end; --min-equal PCT fails a run whose share of proven samples is below PCT (the generator must
 * keep reaching the equivalence path).
 *
 * usage: fuzz_plans [--from N] [--count N] [--seconds S] [--min-equal PCT] [--seed N (one, in-process)]
 *                   [--emit DIR [--emit-cuda]] [-v]
 * The CTest runs a fixed seed range (passes_fuzz_plans); scripts/fuzz.sh SECONDS 1 plans runs it for
 * longer, built with ASan and UBSan. --emit DIR writes each CPU sample (--emit-cuda: CUDA ones too), f32 or bf16,
 * proven equal on 2 to 4 ranks to DIR/SEED/ (plan.model, ref.model, plan.args, ref.args, shape: what `shardc
 * build` needs and the world, vocabulary, sequence, target and precision), for
 * scripts/fuzz_runs.sh, which builds both trainers and runs them under mpirun (the runtime, its
 * collectives and point-to-point included, which the interpreter does not run).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codegen.h"
#include "cost.h"
#include "diag.h"
#include "frontend.h"
#include "interp.h"
#include "memplan.h"
#include "pipe_sched.h"
#include "pipeline.h"
#include "print.h"
#include "plan_gen.h"
#include "tb.h"

#define TOL 1e-10
#define TOL_BF16 (1.0 / 4096) /* test_pp_equiv's bound for bf16 (1/16 of bf16's unit roundoff) */
enum { MAX_COMPARED_RANKS = 16, SAMPLE_SECONDS = 120 };
enum { OUT_REJECTED = 10, OUT_COMPILED = 11, OUT_EQUAL = 12, OUT_FAILED = 1 };

static bool verbose;
static const char *emit_dir; /* --emit */
static bool emit_cuda;       /* --emit-cuda: the CUDA target's samples too */

/* --emit: sample s (proven equal: m, its single-rank defines rd) as files for scripts/fuzz_runs.sh. */
static void emit_sample(const PlanSample *s, const Module *m, const FeDefine *rd, int nrd) {
  if (!emit_dir || (s->target != TARGET_CPU && !emit_cuda) || m->mesh->world < 2 || m->mesh->world > 4) return;
  char dir[600], path[700];
  snprintf(dir, sizeof dir, "%s/%llu", emit_dir, (unsigned long long)s->seed);
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) return;
  static const char *const names[] = {"plan.model", "ref.model", "plan.args", "ref.args", "shape"};
  for (int k = 0; k < 5; k++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[k]);
    FILE *f = fopen(path, "w");
    if (!f) return;
    if (k == 0) fputs(s->src, f);
    else if (k == 1) fputs(s->ref_src, f);
    else if (k == 2) {
      for (int i = 0; i < s->ndefs; i++) fprintf(f, "-D\n%s=%s\n", s->defs[i].key, s->defs[i].value);
      fprintf(f, "--world\n%d\n", m->mesh->world);
      if (s->target == TARGET_CUDA) fprintf(f, "--target\ncuda\n"); /* (its single-rank program: the CPU target's) */
    } else if (k == 3) {
      for (int i = 0; i < nrd; i++) fprintf(f, "-D\n%s=%s\n", rd[i].key, rd[i].value);
      fprintf(f, "--world\n1\n");
    } else
      fprintf(f, "world %d vocab %lld seq %lld target %s precision %s\n", m->mesh->world, (long long)s->V,
              (long long)s->S, s->target == TARGET_CUDA ? "cuda" : "cpu", s->bf16 ? "bf16" : "f32");
    fclose(f);
  }
}

/* The diagnostics of one compilation, kept in memory. */
typedef struct {
  Diag d;
  char *text;
  size_t len;
  FILE *f;
  Diag *outer;
} Captured;

static void capture_begin(Captured *c) {
  c->text = NULL;
  c->len = 0;
  c->f = open_memstream(&c->text, &c->len);
  diag_init(&c->d, c->f, 0);
  c->outer = diag_enter(&c->d);
}

static void capture_end(Captured *c) {
  diag_leave(c->outer);
  fflush(c->f);
}

static void capture_free(Captured *c) {
  fclose(c->f);
  free(c->text);
  diag_free(&c->d);
}

static Module *compile(Arena *a, const char *src, const FeDefine *defs, int ndefs, int world, Target target) {
  const char *dirs[] = {SHARDC_MODELS_DIR};
  FeOptions o = {.defines = defs, .ndefines = ndefs, .world = world, .import_dirs = dirs, .nimport_dirs = 1};
  Module *m = fe_compile_source(a, "fz.model", src, &o);
  if (!m) return NULL;
  m->target = target;
  PipelineOptions po = {.verify = true};
  return pipeline_run(m, &po) ? m : NULL;
}

static bool starts_located(const char *line) { /* `file:line:col: error:` (a -D's file: `<command line>`) */
  static const char cmdline[] = "<command line>";
  const char *p = line;
  if (!strncmp(p, cmdline, sizeof cmdline - 1)) p += sizeof cmdline - 1;
  else
    while (*p && *p != ':' && !isspace((unsigned char)*p)) p++;
  if (p == line || *p != ':') return false;
  for (int k = 0; k < 2; k++) {
    if (!isdigit((unsigned char)*++p)) return false;
    while (isdigit((unsigned char)*p)) p++;
    if (*p != ':') return false;
  }
  return strncmp(p, ": error: ", 9) == 0;
}

/* Every error of text is at a location or names the command-line option it comes from; the first
 * error's message, digits as N, goes to first (the counts of the commonest rejections). */
static bool errors_located(const char *text, char *first, size_t cap, char *bad, size_t badcap) {
  bool ok = true;
  first[0] = bad[0] = 0;
  for (const char *l = text; l && *l;) {
    const char *e = strchr(l, '\n');
    size_t len = e ? (size_t)(e - l) : strlen(l);
    const char *err = strstr(l, ": error: ");
    if (err && err < l + len) {
      if (!first[0]) {
        size_t k = 0;
        for (const char *p = err + 9; p < l + len && k + 1 < cap && k < 72; p++)
          if (!isdigit((unsigned char)*p) || (k && first[k - 1] != 'N')) first[k++] = isdigit((unsigned char)*p) ? 'N' : *p;
        first[k] = 0;
      }
      bool located = starts_located(l);
      if (!located) { /* a command-line error: the option is its location (in the message or a note) */
        const char *q = e ? e + 1 : l + len, *end = q;
        while (*end && strncmp(end, "      = note: ", 14) == 0) end = strchr(end, '\n') ? strchr(end, '\n') + 1 : end + strlen(end);
        for (const char *p = l; p < end && !located; p++)
          located = !strncmp(p, "-D ", 3) || !strncmp(p, "--world", 7) || !strncmp(p, "--target", 8);
      }
      if (!located && ok) snprintf(bad, badcap, "%.*s", (int)len, l);
      ok &= located;
    }
    l = e ? e + 1 : NULL;
  }
  return ok;
}

/* What `shardc plan` prints and `shardc build` emits, of the compiled m: the IR, the pipeline's
 * timeline, the memory plan, the cost model's report, the trainer's C (thrown away). False when the
 * emission refused m without an error at a location, or when printing reported errors. */
static bool reports_and_code(const Module *m, char *line, size_t cap) {
  FILE *null = fopen("/dev/null", "w");
  if (!null) return true;
  Captured c;
  capture_begin(&c);
  ir_print_module(null, m, true);
  CostDevice dev;
  cost_device_defaults(m, &dev);
  CostPipe cp;
  bool piped = m->pipe && cost_pipe(m, &dev, &cp);
  pipe_print(null, m, piped ? &cp : NULL, dev.source);
  if (piped) cost_pipe_free(&cp);
  memplan_print(null, m, false);
  CostReport cr;
  cost_estimate(m, &dev, &cr);
  cost_print(null, m, &dev, &cr);
  CgOptions o = {.source_path = "fz.model"};
  bool emitted = cg_emit_c(null, m, &o);
  capture_end(&c);
  fclose(null);
  char first[96], bad[256];
  bool located = errors_located(c.text ? c.text : "", first, sizeof first, bad, sizeof bad);
  bool ok = emitted ? c.d.nerrors == 0 : c.d.nerrors > 0 && located;
  if (!ok) {
    fprintf(stderr, "%s", c.text ? c.text : "");
    snprintf(line, cap, "%s", emitted ? "the reports or the emitted C reported errors" :
             c.d.nerrors ? "codegen refused it without a location" : "codegen refused it without an error");
  }
  capture_free(&c);
  return ok;
}

static bool comparable(const Module *m) { return m->mesh->world <= MAX_COMPARED_RANKS; }

static int input_rank(const Graph *g, const char *name) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_INPUT && g->nodes[i]->a.name && !strcmp(g->nodes[i]->a.name, name))
      return g->nodes[i]->out[0]->shape.rank;
  return -1;
}

/* The sample in this process: its outcome (OUT_*); its one-line summary into line. */
static int run_sample(const PlanSample *s, char *line, size_t cap) {
  Arena a;
  arena_init(&a);
  Captured c;
  capture_begin(&c);
  Module *m = compile(&a, s->src, s->defs, s->ndefs, s->world, s->target);
  capture_end(&c);
  int out;
  if (!m) {
    char first[96], bad[256];
    bool located = errors_located(c.text ? c.text : "", first, sizeof first, bad, sizeof bad);
    if (c.d.nerrors == 0) {
      snprintf(line, cap, "refused without an error");
      out = OUT_FAILED;
    } else if (!located) {
      snprintf(line, cap, "an error without a location: %s", bad);
      out = OUT_FAILED;
    } else {
      snprintf(line, cap, "%s", first);
      out = OUT_REJECTED;
    }
    if (out == OUT_FAILED || verbose) fprintf(stderr, "%s", c.text ? c.text : "");
    capture_free(&c);
    arena_free(&a);
    return out;
  }
  capture_free(&c);
  if (!reports_and_code(m, line, cap)) {
    arena_free(&a);
    return OUT_FAILED;
  }
  if (!comparable(m)) {
    snprintf(line, cap, "compiled (%d ranks: not compared)", m->mesh->world);
    arena_free(&a);
    return OUT_COMPILED;
  }
  Arena ra;
  arena_init(&ra);
  capture_begin(&c);
  int64_t B = m->batch.global, S = s->S, M = m->batch.accum;
  FeDefine rd[PG_MAXDEF + 2];
  int nrd = 0;
  char sb[24];
  snprintf(sb, sizeof sb, "%lld", (long long)B);
  for (int i = 0; i < s->nref_defs; i++) rd[nrd++] = s->ref_defs[i];
  rd[nrd++] = (FeDefine){"micro_batch", sb};
  rd[nrd++] = (FeDefine){"batch", sb};
  Module *ref = compile(&ra, s->ref_src, rd, nrd, 1, s->target);
  capture_end(&c);
  if (!ref) {
    fprintf(stderr, "%s", c.text ? c.text : "");
    snprintf(line, cap, "the plan compiles, its single-rank program does not");
    out = OUT_FAILED;
  } else {
    Tensor tok = tb_randint(tb_shape(2, (int)B, (int)S), s->seed * 2 + 1, 0, s->V);
    Tensor tgt = tb_randint(tb_shape(2, (int)B, (int)S), s->seed * 2 + 2, 0, s->V);
    Tensor ptok = tok, ptgt = tgt;
    bool micro = M > 1 || input_rank(m->graph, "tokens") == 3; /* [M, B / M, S] (a pipeline's: M 1 too) */
    if (micro) ptok.shape = ptgt.shape = tb_shape(3, (int)M, (int)(B / M), (int)S);
    /* an ignored position when the batch is one micro-step: the loss is a mean over the others on
     * every layout (with micro-steps each is a mean over its own positions, averaged) */
    if (!micro && s->seed % 3 == 0) tgt.data[(s->seed / 3) % (uint64_t)(B * S)] = -1;
    char what[160];
    snprintf(what, sizeof what, "seed %llu: dp %d x tp %d x cp %d x pp %d, %lld micro-steps%s",
             (unsigned long long)s->seed, m->mesh->dim[RT_AX_DP], m->mesh->dim[RT_AX_TP], m->mesh->dim[RT_AX_CP], m->mesh->dim[RT_AX_PP], (long long)M,
             s->bf16 ? ", bf16" : "");
    int f = s->bf16 ? tb_equiv_steps_resumed(ref, m, &tok, &tgt, &ptok, &ptgt, "fuzz_plans", what, TOL_BF16, true)
                    : tb_equiv_steps(ref, m, &tok, &tgt, &ptok, &ptgt, "fuzz_plans", what, TOL, true);
    tensor_free(&tok);
    tensor_free(&tgt);
    if (f) snprintf(line, cap, "%d results differ from the single-rank program's", f);
    else snprintf(line, cap, "equal (%d ranks)", m->mesh->world), emit_sample(s, m, rd, nrd);
    out = f ? OUT_FAILED : OUT_EQUAL;
  }
  capture_free(&c);
  arena_free(&ra);
  arena_free(&a);
  return out;
}

/* ---- the parent: one child per sample ---- */

enum { TOP = 24 };
typedef struct {
  char msg[112];
  int n;
} Reason;

typedef struct {
  int samples, rejected, rejected_meant_valid, compiled, equal, failed;
  Reason reasons[64];
  int nreasons;
  uint64_t failed_seeds[32];
  double slowest;
  uint64_t slowest_seed;
} Counts;

static void count_reason(Counts *c, const char *msg) {
  for (int i = 0; i < c->nreasons; i++)
    if (strcmp(c->reasons[i].msg, msg) == 0) {
      c->reasons[i].n++;
      return;
    }
  if (c->nreasons < 64) {
    snprintf(c->reasons[c->nreasons].msg, sizeof c->reasons[0].msg, "%.100s", msg);
    c->reasons[c->nreasons++].n = 1;
  }
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void dump_file(FILE *f, int max_lines) {
  rewind(f);
  char buf[4096];
  int lines = 0;
  while (fgets(buf, sizeof buf, f)) {
    if (lines++ < max_lines) fputs(buf, stderr);
  }
  if (lines > max_lines) fprintf(stderr, "... (%d more lines)\n", lines - max_lines);
}

static void fuzz_one(uint64_t seed, Counts *c) {
  PlanSample s;
  plan_gen(&s, seed);
  FILE *log = tmpfile();
  int fd[2];
  if (!log || pipe(fd) != 0) {
    perror("fuzz_plans");
    exit(2);
  }
  fflush(stdout);
  fflush(stderr);
  double t0 = now();
  pid_t pid = fork();
  if (pid < 0) {
    perror("fuzz_plans: fork");
    exit(2);
  }
  if (pid == 0) {
    close(fd[0]);
    dup2(fileno(log), 1);
    dup2(fileno(log), 2);
    alarm(SAMPLE_SECONDS);
    char line[512];
    int out = run_sample(&s, line, sizeof line);
    if (write(fd[1], line, strlen(line)) < 0) out = OUT_FAILED;
    fflush(stdout);
    fflush(stderr);
    _exit(out);
  }
  close(fd[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  double dt = now() - t0;
  char line[512] = "";
  ssize_t n = read(fd[0], line, sizeof line - 1);
  line[n > 0 ? n : 0] = 0;
  close(fd[0]);
  int out = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  c->samples++;
  if (dt > c->slowest) c->slowest = dt, c->slowest_seed = seed;
  if (out == OUT_REJECTED) {
    c->rejected++;
    c->rejected_meant_valid += s.meant_valid;
    char tagged[128];
    snprintf(tagged, sizeof tagged, "%s%.100s", s.meant_valid ? "" : "(mistake) ", line);
    count_reason(c, tagged);
  } else if (out == OUT_COMPILED) {
    c->compiled++;
  } else if (out == OUT_EQUAL) {
    c->compiled++, c->equal++;
  } else {
    if (c->failed < 32) c->failed_seeds[c->failed] = seed;
    c->failed++;
    fprintf(stderr, "\nFAIL seed %llu: ", (unsigned long long)seed);
    if (WIFSIGNALED(status))
      fprintf(stderr, "killed by signal %d (%s)%s\n", WTERMSIG(status), strsignal(WTERMSIG(status)),
              WTERMSIG(status) == SIGALRM ? ": a hang" : "");
    else fprintf(stderr, "%s (exit %d)\n", line[0] ? line : "no outcome", out);
    dump_file(log, 60);
    plan_gen_print(&s, stderr);
  }
  if (verbose) fprintf(stderr, "seed %llu: %s (%.2f s)\n", (unsigned long long)seed, line, dt);
  fclose(log);
}

static int by_count(const void *a, const void *b) { return ((const Reason *)b)->n - ((const Reason *)a)->n; }

int main(int argc, char **argv) {
  uint64_t from = 1, count = 0, one = 0;
  double seconds = 0, min_equal = 0;
  bool have_one = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-v")) verbose = true;
    else if (v && !strcmp(a, "--from")) from = strtoull(v, NULL, 10), i++;
    else if (v && !strcmp(a, "--count")) count = strtoull(v, NULL, 10), i++;
    else if (v && !strcmp(a, "--seconds")) seconds = atof(v), i++;
    else if (v && !strcmp(a, "--min-equal")) min_equal = atof(v), i++;
    else if (v && !strcmp(a, "--seed")) one = strtoull(v, NULL, 10), have_one = true, i++;
    else if (v && !strcmp(a, "--emit")) emit_dir = v, i++;
    else if (!strcmp(a, "--emit-cuda")) emit_cuda = true;
    else {
      fprintf(stderr, "usage: fuzz_plans [--from N] [--count N] [--seconds S] [--min-equal PCT] [--seed N] [--emit DIR] "
              "[--emit-cuda] [-v]\n");
      return 2;
    }
  }
  if (have_one) { /* one sample in this process (a debugger's view), its output shown */
    PlanSample s;
    plan_gen(&s, one);
    plan_gen_print(&s, stderr);
    verbose = true;
    char line[512];
    int out = run_sample(&s, line, sizeof line);
    fprintf(stderr, "seed %llu: %s\n", (unsigned long long)one, line);
    return out == OUT_FAILED;
  }
  if (!count && !seconds) count = 100;
  Counts c = {0};
  double t0 = now();
  for (uint64_t seed = from; (!count || seed < from + count) && (!seconds || now() - t0 < seconds); seed++)
    fuzz_one(seed, &c);
  double dt = now() - t0;
  qsort(c.reasons, (size_t)c.nreasons, sizeof c.reasons[0], by_count);
  fprintf(stderr, "\nthe commonest rejections (of samples with a deliberate mistake, marked, and without):\n");
  for (int i = 0; i < c.nreasons && i < TOP; i++) fprintf(stderr, "  %4d  %s\n", c.reasons[i].n, c.reasons[i].msg);
  double pct = c.samples ? 100.0 / c.samples : 0;
  fprintf(stderr,
          "fuzz_plans: seeds %llu..%llu, %d samples in %.1f s (slowest %.2f s, seed %llu): rejected %d (%.0f%%; %d "
          "without a deliberate mistake), compiled %d (%.0f%%), proven equal to one rank %d (%.0f%%), failed %d\n",
          (unsigned long long)from, (unsigned long long)(from + (uint64_t)c.samples - 1), c.samples, dt, c.slowest,
          (unsigned long long)c.slowest_seed, c.rejected, c.rejected * pct, c.rejected_meant_valid, c.compiled,
          c.compiled * pct, c.equal, c.equal * pct, c.failed);
  if (c.failed) {
    fprintf(stderr, "failed seeds:");
    for (int i = 0; i < c.failed && i < 32; i++) fprintf(stderr, " %llu", (unsigned long long)c.failed_seeds[i]);
    fprintf(stderr, "\n");
  }
  if (c.samples && c.equal * pct < min_equal) {
    fprintf(stderr, "FAIL: %.0f%% of the samples proven equal, under --min-equal %.0f%%\n", c.equal * pct, min_equal);
    return 1;
  }
  return c.failed ? 1 : 0;
}
