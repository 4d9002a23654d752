/* main.c — the shardc command line: .model → front end → passes → (codegen). */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codegen.h"
#include "cost.h"
#include "diag.h"
#include "fit.h"
#include "frontend.h"
#include "memplan.h"
#include "memplan_pack.h"
#include "mesh.h"
#include "passes.h"
#include "pipeline.h"
#include "pipe_sched.h"
#include "plan_compare.h"
#include "plan_search.h"
#include "storage.h"
#include "print.h"
#include "replan.h"
#include "runtime/train/ckpt_tool.h"

#ifndef SHARDC_MODELS_DIR
#define SHARDC_MODELS_DIR "models"
#endif

static void usage(FILE *f, const char *models) {
  fprintf(f,
          "usage: shardc build FILE.model -o TRAINER [options]   compile a trainer executable\n"
          "       shardc plan FILE.model [options]                print the plan (memory, FLOPs, communication)\n"
          "       shardc ckpt info DIR | convert SRC DST [--format single|sharded]   checkpoints (shardc ckpt --help)\n"
          "\n"
          "Compiles a .model file (model, topology, parallel plan, training recipe).\n"
          "\n"
          "options:\n"
          "  -o FILE               the trainer to write (build; default: train_MODEL in this folder)\n"
          "  --target cpu|cuda     what the trainer runs on (default cpu, also on a topology of GPUs: the plan's\n"
          "                        header says which and why): cuda emits GPU kernels (NVRTC at\n"
          "                        start), cuBLASLt GEMMs and bf16 mixed precision when the recipe asks for it\n"
          "  --cpu-kernels c|llvm  the CPU target's elementwise runs (fusion groups), norms and AdamW: kernels\n"
          "                        built by LLVM for this machine's CPU (default where LLVM can) or the\n"
          "                        runtime's C kernels\n"
          "  --no-fuse LIST        CUDA target: turn fusions off to time each one's effect (comma list of\n"
          "                        residual, swiglu, normres, epilogue, groups, ce, sumsq, hfuse; all)\n"
          "  --emit-c DIR          keep the generated C source in DIR (with plan: write it, compile nothing)\n"
          "  --no-outline          write every pipeline instruction out in the trainer's C (the same program,\n"
          "                        as large as the schedule), not its recurring ones once each\n"
          "  --schedule-svg FILE   draw the pipeline schedule (one lane per stage, blocks to scale) as SVG\n"
          "  --cc CC, --cflags F   the C compiler and flags for the trainer (default: $CC or cc, -O1)\n"
          "  -v                    print the C compiler command\n"
          "  -D KEY=VALUE          override a plan/recipe field or a model constant (-D tp=4 -D zero=1)\n"
          "  --topology FILE       use this topology instead of the file's own\n"
          "  --world N             ranks to plan for (default: the topology's devices)\n"
          "  --sbatch FILE         also write a Slurm batch script for the plan (nodes, tasks, GPUs per task,\n"
          "                        srun under the restart launcher; plan: for the trainer -o names)\n"
          "  --max-errors N        errors shown before the rest are only counted (default 50, 0: all)\n"
          "  -I DIR                add an import directory (default: %s)\n"
          "  --ir                  plan: print the program's IR too (each rank class's graph, before the\n"
          "                        parameter table; pipelines unroll it per micro-batch)\n"
          "  --bytes               plan: the memory table's sizes in bytes (and MiB), for scripts\n"
          "  --dump-ir             print the final IR, parameter counts and FLOPs, then stop\n"
          "  --dump-ir=after:PASS  print the IR after PASS (or 'all'); passes:",
          models);
  const char *names[32];
  pipeline_pass_names(names, 32);
  for (const char *const *p = names; *p; p++) fprintf(f, " %s", *p);
  fprintf(f,
          "\n"
          "  --search              rank the plans of the model on the topology by predicted step time\n"
          "                        (dp x tp x pp x cp x sp x zero x recompute x micro-batch x schedule)\n"
          "                        (a knob given with -D stays as given)\n"
          "  --pick                search, then plan / build the fastest plan that fits\n"
          "  --top N, --budget S   rows of the search's table (10); CPU seconds it may compile for (8)\n"
          "  --confirm N           candidates the search compiles at most to confirm its analytic ranking\n"
          "                        (top + 2 x cores)\n"
          "  --compile-limit S     CPU seconds one candidate's compile may take in the search\n"
          "                        (default: the budget left, shared by the batch; at least 1)\n"
          "  --cost                print the predicted step time per rank (docs/planner.md)\n"
          "  --compare SPEC        plans side by side: \"zero=0,1,2,3\", \"tp=1,2 zero=0,3\" or \"b.model c.model\"\n"
          "  --storage GB/s        the traffic and checkpoint-storage report, writes at this bandwidth (10)\n"
          "  --mesh-svg FILE       draw the mesh (nodes, devices, groups by axis) as SVG\n"
          "  --memory-svg FILE     draw memory per rank by class as SVG (with --compare: one bar per plan)\n"
          "  --compare-svg FILE    draw --compare's table as a chart (memory, step, checkpoint writes)\n"
          "  --profile FILE        the device figures the cost model uses (bench/calibrate writes one;\n"
          "                        default: the topology's at fixed efficiencies)\n"
          "  --dump-ir=dot         print the final graph for Graphviz\n"
          "  --dump-ir=mesh        print each rank's coordinates, node, device and groups\n"
          "  --time-passes         print each pass's time (and the IR verifier's, all passes together)\n"
          "  --no-verify           skip the IR verifier between passes (by default it checks the graphs\n"
          "                        each pass changed, then the whole IR after the last; SHARDC_VERIFY=full:\n"
          "                        the whole IR after every pass)\n"
          "  -h, --help            this text\n"
          "An option that takes a value, or a -D key, given twice: the last is used, and a note says so.\n");
}

/* Whether the source resolves its mesh and batch (the front end only) with these options, silently. */
static bool resolves(Arena *a, const char *input, const FeOptions *fo) {
  FILE *null = fopen("/dev/null", "w");
  if (!null) return true; /* the loud compile that follows says what is wrong */
  Diag quiet;
  diag_init(&quiet, null, 0);
  Diag *outer = diag_enter(&quiet);
  Module *m = fe_compile(a, input, fo);
  bool ok = m && diag_errors() == 0;
  diag_leave(outer);
  diag_free(&quiet);
  fclose(null);
  return ok;
}

/* --search / --pick: the search varies the micro-batch and the parallel degrees (each unless -D pins it), so a
 * file whose own plan cannot reach the world and batch asked for is searched from a base that can: its
 * micro-batch 1, which divides every batch its data-parallel degree does (-D batch=8 --world 4 with micro_batch
 * 8: an elastic restart's re-plan, scripts/launch.sh); else its tp, pp and cp 1 and dp auto (Llama-3-8B's tp 8
 * on --world 4: "find me a plan for 4 GPUs"); else both. Appends those -D (unpinned: after the user's) and
 * says so in a note (true); otherwise changes nothing, and the file's own error is reported as without a search. */
static bool search_base(Arena *a, const char *input, const FeOptions *fo, FeDefine *defines, int *ndefines, int cap) {
  static const FeDefine micro[] = {{"micro_batch", "1"}};
  static const FeDefine degrees[] = {{"tp", "1"}, {"pp", "1"}, {"cp", "1"}, {"dp", "auto"}};
  if (resolves(a, input, fo)) return false;
  for (int t = 1; t < 4; t++) { /* bit 0: the micro-batch, bit 1: the degrees */
    int n = *ndefines;
    FeDefine *d = defines;
    for (int k = 0; k < 2; k++) {
      if (!(t >> k & 1)) continue;
      const FeDefine *add = k ? degrees : micro;
      int nadd = k ? 4 : 1;
      for (int q = 0; q < nadd; q++) {
        bool given = false;
        for (int u = 0; u < *ndefines; u++) given |= strcmp(defines[u].key, add[q].key) == 0;
        if (!given && n < cap) d[n++] = add[q];
      }
    }
    if (n == *ndefines) continue; /* (all pinned: nothing to try) */
    FeOptions o = *fo;
    o.defines = defines;
    o.ndefines = n;
    if (!resolves(a, input, &o)) continue;
    char what[160];
    int w = 0;
    for (int q = *ndefines; q < n && w < (int)sizeof what; q++)
      w += snprintf(what + w, sizeof what - (size_t)w, "%s%s %s", q > *ndefines ? ", " : "", defines[q].key,
                    defines[q].value);
    note_at((SrcLoc){0}, "the plan search starts from %s: the file's own plan does not reach this world and batch", what);
    *ndefines = n;
    return true;
  }
  return false;
}

/* After a build: how many ranks the trainer needs and the command that starts it. */
static void print_launch_hint(const Module *m, const char *trainer) {
  const MeshMap *mm = m->mesh;
  const char *dir = strchr(trainer, '/') ? "" : "./";
  if (mm->world == 1) {
    fprintf(stderr, "shardc: wrote %s, a single-process trainer: run %s%s\n", trainer, dir, trainer);
    return;
  }
  fprintf(stderr,
          "shardc: wrote %s, a trainer for %d ranks (dp %d x pp %d x cp %d x tp %d): run mpirun -np %d %s%s "
          "(--world 1 builds a single-process one)\n",
          trainer, mm->world, mm->dim[RT_AX_DP], mm->dim[RT_AX_PP], mm->dim[RT_AX_CP], mm->dim[RT_AX_TP], mm->world,
          dir, trainer);
}

/* Where shardc's own files are. Installed (`cmake --install`), shardc sits in <prefix>/bin beside
 * <prefix>/share/shardc/models, <prefix>/include/shardc (the runtime's headers) and <prefix>/lib/shardc
 * (libshardrt): found from the executable's own path, so a moved prefix still works. Otherwise it
 * runs from its build tree: the models and runtime of the source tree it was built from. */
typedef struct {
  char models[4096], include[4096], lib[4096], launch[4096]; /* launch: the restart launcher (scripts/launch.sh) */
  bool installed;
} Home;

static void find_home(Home *h) {
  char exe[4000]; /* room for the suffixes below in Home's fields */
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  h->installed = false;
  snprintf(h->models, sizeof h->models, "%s", SHARDC_MODELS_DIR);
  snprintf(h->launch, sizeof h->launch, "%s/../scripts/launch.sh", SHARDC_MODELS_DIR);
  if (n <= 0) return;
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (!slash) return;
  *slash = 0; /* <prefix>/bin */
  char probe[4200];
  snprintf(probe, sizeof probe, "%s/../share/shardc/models/std/transformer.model", exe);
  if (access(probe, R_OK) != 0) return;
  snprintf(h->models, sizeof h->models, "%s/../share/shardc/models", exe);
  snprintf(h->include, sizeof h->include, "%s/../include/shardc", exe);
  snprintf(h->lib, sizeof h->lib, "%s/../lib/shardc", exe);
  snprintf(h->launch, sizeof h->launch, "%s/shardc-launch", exe);
  h->installed = true;
}

/* A whole number in [lo, hi] written in decimal digits only ("1e8", "4294967298" and "-1" are
 * refused, not read as 1, 2 or a huge count); -1 after reporting the error. */
static long parse_count(const char *s, const char *flag, long lo, long hi) {
  long v = 0;
  const char *p = s;
  for (; *p >= '0' && *p <= '9' && v <= hi; p++) v = v * 10 + (*p - '0');
  if (p == s || *p || v < lo || v > hi) {
    error_plain("%s needs a whole number from %ld to %ld, got '%s'", flag, lo, hi, s);
    return -1;
  }
  return v;
}

/* Seconds in (0, max]: the whole argument a number ("3abc" was read as 3 by atof). */
static double parse_seconds(const char *s, const char *flag, double max) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end || !(v > 0 && v <= max)) error_plain("%s needs seconds in (0, %g], got '%s'", flag, max, s);
  return v;
}

/* The options compile() reads (those taking a value first: they match only when one follows). */
static const char *const options[] = {"-o", "--target", "--cpu-kernels", "--no-fuse", "--top", "--compile-limit",
                                      "--confirm", "--budget", "--profile", "--compare", "--mesh-svg", "--memory-svg",
                                      "--compare-svg", "--storage", "--sbatch", "--schedule-svg", "--emit-c", "--cc",
                                      "--cflags", "--topology", "--world", "--max-errors", "-I", "--dump-ir", "--search",
                                      "--pick", "--cost", "--no-outline", "--time-passes", "--no-verify", "--ir", "--bytes", "--help"};
enum { NVALUED = 23 }; /* options' first, which take a value */

/* A value option given again (or two --dump-ir=...): the last wins, as a -D does, and a note says so
 * (the first was dropped without a word). -I adds a directory each time. */
static void note_again(const char **given, const char *opt, const char *value) {
  if (*given && strcmp(*given, value) != 0) note_at((SrcLoc){0}, "%s %s replaces the earlier %s %s", opt, value, opt, *given);
  *given = value;
}

/* The cores this process may use: the search's compiles at once, a large memory plan's packing orders side by side. */
static int online_cpus(void) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return cpus > 1 ? (int)cpus : 1;
}

static int compile(int argc, char **argv, Diag *diag) {
  const char *input = NULL, *topology = NULL, *dump = NULL, *out = NULL, *svg = NULL, *profile = NULL, *sbatch = NULL;
  const char *compare = NULL; /* --compare SPEC */
  const char *command = NULL; /* plan or build, as given */
  double storage_Bps = 0;     /* --storage GB/s (0: no storage report; --compare's default 10 GB/s) */
  ReplanSvg psvg = {0};
  bool build = false, cost = false, search = false, pick = false;
  bool ir = false, dump_ir = false; /* --ir; --dump-ir (final): the program's IR with the plan */
  bool raw_bytes = false;           /* --bytes: the memory table's sizes in bytes (memplan_print) */
  SearchOptions so = {.top = 10};
  const char *search_flag = NULL; /* the last of --top, --confirm, --budget, --compile-limit: --search's */
  Target target = TARGET_CPU; /* the default on any topology: fit_target_why says why, and the plan's header */
  bool target_given = false;
  CgOptions cg = {0};
  int cpu_kernels = -1; /* --cpu-kernels: 0 c, 1 llvm, -1 not given */
  unsigned no_fuse = 0; /* --no-fuse: Module.no_fuse (passes/fuse_off.c) */
  const char *import_dirs[16];
  int nimport = 0;
  FeDefine defines[128];
  int ndefines = 0;
  PipelineOptions po = {.dump = stdout, .verify = true};
  int world = 0; /* --world: ranks to plan for (0: the topology's) */
  Arena arena, kept; /* kept: the plan's module where it is a check compile's (replan_plan) */
  arena_init(&arena);
  arena_init(&kept);
  Home home; /* installed: <prefix>/share/shardc/models (--help names it), not the build tree's */
  find_home(&home);

  const char *given[NVALUED] = {0}, *dump_given = NULL; /* note_again */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    for (int k = 0; k < NVALUED && i + 1 < argc; k++)
      if (strcmp(a, options[k]) == 0 && strcmp(a, "-I") != 0) note_again(&given[k], a, argv[i + 1]);
    if (strncmp(a, "--dump-ir", 9) == 0 && (!a[9] || a[9] == '=')) {
      if (dump_given && strcmp(dump_given, a) != 0) note_at((SrcLoc){0}, "%s replaces the earlier %s", a, dump_given);
      dump_given = a;
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout, home.models);
      return 0;
    } else if ((strcmp(a, "plan") == 0 || strcmp(a, "build") == 0) && !input && command) {
      /* (`shardc plan build F` built a trainer: the second word read as the command) */
      error_plain("`%s` after `%s`: one command (plan or build), then the .model file", a, command);
      break;
    } else if (strcmp(a, "plan") == 0 && !input) {
      command = a;
      dump = dump ? dump : "final";
    } else if (strcmp(a, "build") == 0 && !input) {
      command = a;
      build = true;
    } else if (strcmp(a, "-o") == 0 && i + 1 < argc) {
      out = argv[++i];
    } else if (strcmp(a, "--target") == 0 && i + 1 < argc) {
      const char *t = argv[++i];
      target_given = true;
      if (strcmp(t, "cpu") == 0) target = TARGET_CPU;
      else if (strcmp(t, "cuda") == 0) target = TARGET_CUDA;
      else error_plain("--target %s: expected cpu or cuda", t);
    } else if (strcmp(a, "--cpu-kernels") == 0 && i + 1 < argc) {
      const char *k = argv[++i];
      if (strcmp(k, "llvm") == 0) cpu_kernels = 1;
      else if (strcmp(k, "c") == 0) cpu_kernels = 0;
      else error_plain("--cpu-kernels %s: expected c or llvm", k);
    } else if (strcmp(a, "--no-fuse") == 0 && i + 1 < argc) {
      if (!fuse_off_parse(argv[++i], &no_fuse)) break;
    } else if (strcmp(a, "--search") == 0) {
      search = true;
    } else if (strcmp(a, "--pick") == 0) {
      search = pick = true;
    } else if (strcmp(a, "--top") == 0 && i + 1 < argc) {
      so.top = (int)parse_count(argv[++i], search_flag = a, 1, 1000);
    } else if (strcmp(a, "--compile-limit") == 0 && i + 1 < argc) {
      so.compile_limit_s = parse_seconds(argv[++i], search_flag = a, 3600);
    } else if (strcmp(a, "--confirm") == 0 && i + 1 < argc) {
      so.confirm = (int)parse_count(argv[++i], search_flag = a, 1, 100000);
    } else if (strcmp(a, "--budget") == 0 && i + 1 < argc) {
      so.budget_s = parse_seconds(argv[++i], search_flag = a, 1e9);
    } else if (strcmp(a, "--cost") == 0) {
      cost = true;
    } else if (strcmp(a, "--profile") == 0 && i + 1 < argc) {
      profile = argv[++i];
      cost = true;
    } else if (strcmp(a, "--compare") == 0 && i + 1 < argc) {
      compare = argv[++i];
    } else if (strcmp(a, "--mesh-svg") == 0 && i + 1 < argc) {
      psvg.mesh = argv[++i];
    } else if (strcmp(a, "--memory-svg") == 0 && i + 1 < argc) {
      psvg.memory = argv[++i];
    } else if (strcmp(a, "--compare-svg") == 0 && i + 1 < argc) {
      psvg.compare = argv[++i];
    } else if (strcmp(a, "--storage") == 0 && i + 1 < argc) {
      char *end;
      storage_Bps = strtod(argv[++i], &end) * 1e9;
      if (*end || !(storage_Bps > 0) || !isfinite(storage_Bps)) /* (1e400 was read as infinite) */
        error_plain("--storage needs a positive bandwidth in GB/s, got '%s'", argv[i]);
    } else if (strcmp(a, "--sbatch") == 0 && i + 1 < argc) {
      sbatch = argv[++i];
    } else if (strcmp(a, "--schedule-svg") == 0 && i + 1 < argc) {
      svg = argv[++i];
    } else if (strcmp(a, "--emit-c") == 0 && i + 1 < argc) {
      cg.emit_dir = argv[++i];
    } else if (strcmp(a, "--no-outline") == 0) {
      cg.no_outline = true;
    } else if (strcmp(a, "--cc") == 0 && i + 1 < argc) {
      cg.cc = argv[++i];
    } else if (strcmp(a, "--cflags") == 0 && i + 1 < argc) {
      cg.cflags = argv[++i];
    } else if (strcmp(a, "-v") == 0) {
      cg.verbose = true;
    } else if (strncmp(a, "-D", 2) == 0) {
      const char *kv = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
      if (!kv) {
        error_plain("-D needs KEY=VALUE");
        break;
      }
      if (ndefines == (int)(sizeof defines / sizeof defines[0])) {
        error_plain("too many -D options");
        break;
      }
      const char *eq = strchr(kv, '=');
      FeDefine d = {eq ? arena_strndup(&arena, kv, (size_t)(eq - kv)) : kv, eq ? eq + 1 : "1"};
      /* the last wins (a script's shared -D then its own): said, not silent as it was */
      for (int k = ndefines - 1; k >= 0; k--)
        if (strcmp(defines[k].key, d.key) == 0) {
          if (strcmp(defines[k].value, d.value) != 0)
            note_at((SrcLoc){0}, "-D %s=%s replaces the earlier -D %s=%s", d.key, d.value, defines[k].key,
                    defines[k].value);
          break;
        }
      defines[ndefines++] = d;
    } else if (strcmp(a, "--topology") == 0 && i + 1 < argc) {
      topology = argv[++i];
    } else if (strcmp(a, "--world") == 0 && i + 1 < argc) {
      world = (int)parse_count(argv[++i], "--world", 1, IR_RANKS_MAX);
    } else if (strcmp(a, "--max-errors") == 0 && i + 1 < argc) {
      diag->max_errors = (int)parse_count(argv[++i], "--max-errors", 0, 1 << 30);
    } else if (strcmp(a, "-I") == 0 && i + 1 < argc) {
      if (nimport == 15) error_plain("-I %s: at most 15 import directories", argv[i + 1]); /* (was: dropped) */
      else import_dirs[nimport++] = argv[i + 1];
      struct stat st; /* (a mistyped one was searched without a word) */
      if (stat(argv[i + 1], &st) != 0 || !S_ISDIR(st.st_mode))
        note_at((SrcLoc){0}, "-I %s: no such directory: nothing is imported from it", argv[i + 1]);
      i++;
    } else if (strcmp(a, "--dump-ir") == 0) {
      dump = "final";
      dump_ir = true;
    } else if (strcmp(a, "--ir") == 0) {
      ir = true;
    } else if (strcmp(a, "--bytes") == 0) {
      raw_bytes = true;
    } else if (strncmp(a, "--dump-ir=", 10) == 0) {
      dump = a + 10;
    } else if (strcmp(a, "--time-passes") == 0) {
      po.time = true;
    } else if (strcmp(a, "--no-verify") == 0) {
      po.verify = false;
    } else if (a[0] == '-') {
      /* the options above (those taking a value match only when one follows) */
      bool needs = false;
      for (int k = 0; k < NVALUED && !needs; k++) needs = !strcmp(a, options[k]);
      if (needs) {
        error_plain("%s needs a value (see shardc --help)", a);
      } else {
        const char *hint = diag_nearest(a, options, (int)(sizeof options / sizeof options[0]));
        error_plain("unknown option '%s'%s%s%s (see shardc --help)", a, hint ? ": did you mean '" : "", hint ? hint : "",
                    hint ? "'?" : "");
      }
      break; /* its value, if any, would read as an input file */
    } else if (!input) {
      size_t al = strlen(a);
      struct stat st;
      if (!command && stat(a, &st) != 0 && (al < 6 || strcmp(a + al - 6, ".model") != 0)) {
        /* (`shardc frob` said it could not read a file "frob") */
        error_plain("unknown command '%s': shardc build | plan FILE.model, or shardc ckpt (see shardc --help)", a);
        break;
      }
      input = a;
    } else {
      error_plain("more than one input file: '%s' and '%s'", input, a);
    }
  }
  if (!input && diag_errors() == 0) {
    if (command) { /* (`shardc plan` printed the whole usage, without saying what was missing) */
      error_plain("`%s` needs a .model file: shardc %s FILE.model [options] (see shardc --help)", command, command);
      return 1;
    }
    usage(stderr, home.models);
    return 1;
  }
  if (diag_errors()) return 1;

  if (cg.no_outline && !build && !out && !cg.emit_dir) {
    error_plain("--no-outline shapes the trainer's C: use it with `shardc build`, -o FILE or --emit-c DIR");
    return 1;
  }
  if ((cg.cc || cg.cflags || cg.verbose) && !build && !out) {
    error_plain("%s compiles the trainer: use it with `shardc build` or -o FILE (plan --emit-c writes the C only)",
                cg.cc ? "--cc" : cg.cflags ? "--cflags" : "-v (the C compiler's command)");
    return 1;
  }
  if (cpu_kernels >= 0 && target != TARGET_CPU) { /* (--cpu-kernels c was kept without a word) */
    error_plain("--cpu-kernels %s: the CPU target's kernels; leave it out with --target cuda", cpu_kernels ? "llvm" : "c");
    return 1;
  }
  if (search_flag && !search) {
    error_plain("%s tunes the plan search: use it with --search or --pick", search_flag);
    return 1;
  }
  if (cpu_kernels < 0) cpu_kernels = target == TARGET_CPU && cg_default_llvm_kernels();
  cg.llvm_kernels = cpu_kernels == 1;
  if (no_fuse && target != TARGET_CUDA) {
    error_plain("--no-fuse turns off the CUDA target's fusions: use it with --target cuda");
    return 1;
  }
  if (ir && (!dump || strcmp(dump, "final") != 0 || search || compare)) {
    error_plain("--ir prints the program's IR in `shardc plan`'s output: use it with `shardc plan FILE`, without "
                "--search, --pick, --compare or --dump-ir=...");
    return 1;
  }
  if (raw_bytes && (!dump || strcmp(dump, "final") != 0 || search || compare)) {
    error_plain("--bytes prints the sizes of `shardc plan`'s memory table in bytes: use it with `shardc plan FILE`, "
                "without --search, --pick, --compare or --dump-ir=...");
    return 1;
  }
  if (dump && strncmp(dump, "after:", 6) == 0) {
    po.dump_after = dump + 6;
    bool known = strcmp(po.dump_after, "all") == 0;
    const char *names[32] = {0}; /* diag_nearest reads all 32 */
    pipeline_pass_names(names, 32);
    for (const char *const *p = names; *p; p++) known |= strcmp(*p, po.dump_after) == 0;
    if (!known) {
      const char *hint = diag_nearest(po.dump_after, names, 32);
      error_plain("--dump-ir=after:%s: no such pass%s%s%s", po.dump_after, hint ? " (did you mean '" : "",
                  hint ? hint : "", hint ? "'?)" : "");
      return 1;
    }
  } else if (dump && strcmp(dump, "final") && strcmp(dump, "dot") && strcmp(dump, "mesh")) {
    error_plain("--dump-ir=%s: expected after:PASS, dot or mesh", dump);
    return 1;
  }
  import_dirs[nimport++] = home.models;
  if (home.installed) {
    cg.runtime_include = home.include;
    cg.runtime_lib = home.lib;
  }

  FeOptions fo = {.import_dirs = import_dirs,
                  .nimport_dirs = nimport,
                  .defines = defines,
                  .ndefines = ndefines,
                  .topology_file = topology,
                  .world = world,
                  .profile_file = profile,
                  .cpu_llvm_kernels = cg.llvm_kernels}; /* (the one decision: the trainer's kernels and the cost model's) */
  int user_defines = ndefines; /* the search pins these (a base's defines below are not pinned: search_base) */
  if (search && !compare && search_base(&arena, input, &fo, defines, &ndefines, (int)(sizeof defines / sizeof defines[0])))
    fo.ndefines = ndefines;
  Module *m = fe_compile(&arena, input, &fo);
  if (!m || diag_errors()) return 1;
  m->target = target;
  m->no_fuse = no_fuse;
  fit_note_target(m); /* a GPU trainer planned on a topology without a GPU: said, once */
  if (psvg.compare && !compare) {
    error_plain("--compare-svg draws --compare's table: give --compare SPEC too");
    return 1;
  }
  if (search && !pick && (build || out || cg.emit_dir)) { /* (was: the table printed, nothing built, exit 0) */
    error_plain("--search ranks the plans and builds none: add --pick to build the fastest, or %s",
                out ? "leave out -o" : cg.emit_dir ? "leave out --emit-c" : "run `shardc plan`");
    return 1;
  }
  if (search && !pick && (storage_Bps > 0 || psvg.mesh || psvg.memory || sbatch)) {
    error_plain("--storage, --mesh-svg, --memory-svg and --sbatch concern one plan: add --pick (the fastest) or leave out "
                "--search");
    return 1;
  }
  /* what shapes one plan's printout or compile: --compare and --search (without --pick) print a table of
   * quiet compiles, where these did nothing without a word */
  const char *one_plan = svg ? "--schedule-svg" : dump_given ? dump_given : !compare ? NULL /* (search: the base's) */
                         : po.time ? "--time-passes" : !po.verify ? "--no-verify" : NULL;
  if (one_plan && (compare || (search && !pick))) {
    error_plain("%s concerns the plan shardc compiles and prints; %s prints a table of quiet compiles: leave it out%s",
                one_plan, compare ? "--compare" : "--search", compare ? "" : " (or add --pick: the fastest plan)");
    return 1;
  }
  if (compare) { /* the file's own plan is not printed: the variants are */
    if (search || psvg.mesh || build || out || cg.emit_dir || sbatch) {
      error_plain(search     ? "--compare and --search: one at a time"
                  : psvg.mesh ? "--mesh-svg draws one plan's mesh: leave out --compare"
                              : "--compare prints a comparison and builds nothing: use `shardc plan`, without -o, "
                                "--emit-c or --sbatch");
      return 1;
    }
    Replan rc = {&arena, input, &fo, target, no_fuse};
    int rc_ = replan_compare(&rc, compare, profile, storage_Bps > 0 ? storage_Bps : 10e9, &psvg);
    arena_free(&arena);
    return rc_;
  }
  if (search) po.dump = NULL; /* the file's own plan is the search's base: not printed */
  Replan rp = {&arena, input, &fo, target, no_fuse};
  if (!search) m = replan_plan(&rp, &arena, m, &po, &kept);
  else { /* the search's base (its analytic model's calibration), perhaps at fewer micro-batches */
    Module *fewer;
    so.global = m->batch.global;
    m = replan_search_base(&rp, &arena, m, &po, &fewer);
    so.fewer = fewer;
  }
  if (!m) return 1;
  if (!search) replan_fuse_noop_notes(&rp, &arena, m);
  CostDevice dev;
  if (storage_Bps > 0) cost = true; /* the storage report needs the predicted step */
  bool timeline = m->pipe && ((dump && strcmp(dump, "final") == 0) || svg); /* the pipeline section or its picture */
  if (search || cost || timeline) { /* a pipeline's timeline is the cost model's too (pipe_print, pipe_svg) */
    cost_device_defaults(m, &dev);
    if (profile && !cost_profile_read(profile, &dev)) return 1;
  }
  if (search) { /* passes/plan_search.c: compile the candidates, rank them, print the table */
    for (int i = 0; i < user_defines; i++)
      for (int k = 0; k < PIN_COUNT; k++) so.pinned[k] |= strcmp(defines[i].key, plan_search_pin_keys[k]) == 0;
    SearchResult sr;
    so.jobs = online_cpus(); /* one compile per core at once */
    plan_search(m, &dev, replan_search_eval, &rp, &so, &sr);
    plan_search_print(stdout, m, &sr, so.top);
    fflush(stdout);
    if (!sr.nranked) {
      if (sr.ana_fit && (sr.budget_hit || sr.invalid))
        error_plain("plan search: no candidate confirmed: %d fit by the analytic model, but none compiled and fit "
                    "within --budget %g CPU s (the table above says why each was refused); a larger --budget or "
                    "--compile-limit gives the compiles more time", sr.ana_fit, so.budget_s > 0 ? so.budget_s : 8.0);
      else
        error_plain("plan search: no candidate plan fits");
      plan_search_free(&sr);
      return 1;
    }
    if (!pick) {
      plan_search_free(&sr);
      arena_free(&arena);
      return 0;
    }
    /* --pick: the fastest, compiled again in the driver's arena with its overrides after the user's */
    char kv[SEARCH_KV][SEARCH_KV_LEN];
    int n = plan_cand_overrides(&sr.cand[sr.rank[0]], kv);
    if (ndefines + n > (int)(sizeof defines / sizeof defines[0])) {
      error_plain("too many -D options for --pick");
      return 1;
    }
    fprintf(stdout, "# picked #1:");
    for (int i = 0; i < n; i++) {
      const char *eq = strchr(kv[i], '=');
      defines[ndefines].key = arena_strndup(&arena, kv[i], (size_t)(eq - kv[i]));
      defines[ndefines].value = arena_strdup(&arena, eq + 1);
      fprintf(stdout, " -D %s", kv[i]);
      ndefines++;
    }
    fprintf(stdout, "\n");
    plan_search_free(&sr);
    fo.ndefines = ndefines;
    po.dump = stdout;
    m = fe_compile(&arena, input, &fo);
    if (!m || diag_errors()) return 1;
    m->target = target;
  m->no_fuse = no_fuse;
    m = replan_plan(&rp, &arena, m, &po, &kept);
    if (!m) return 1;
    if (dump && strcmp(dump, "final") == 0) { /* plan --pick: the table, the choice and its prediction */
      dump = NULL;
      cost = true;
    }
    cost_device_defaults(m, &dev); /* the picked plan's own topology */
    if (profile && !cost_profile_read(profile, &dev)) return 1;
  }
  CostPipe cpipe; /* the pipeline's predicted timeline (passes/cost.c), printed and drawn */
  bool piped = m->pipe && ((dump && strcmp(dump, "final") == 0) || svg) && cost_pipe(m, &dev, &cpipe);
  if (dump && strcmp(dump, "final") == 0) {
    char why[256];
    m->target_why = fit_target_why(m, target_given, why, sizeof why);
    ir_print_module(stdout, m, ir || dump_ir);
    m->target_why = NULL;
    pipe_print(stdout, m, piped ? &cpipe : NULL, dev.source);
    memplan_print(stdout, m, raw_bytes);
  }
  if (cost) { /* the cost model (passes/cost.c): after the plan, before the fit check */
    CostReport cr;
    cost_estimate(m, &dev, &cr);
    cost_print(stdout, m, &dev, &cr);
    if (storage_Bps > 0) { /* passes/storage.c: traffic per link class, the checkpoint's writes */
      TrafficReport tr;
      CkptReport ck;
      storage_traffic(m, &dev, &tr);
      storage_ckpt(m, &dev, storage_Bps, cr.step_s, &ck);
      storage_print(stdout, m, &tr, &ck, cr.step_s);
    }
  }
  else if (dump && strcmp(dump, "dot") == 0)
    ir_print_dot(stdout, m);
  else if (dump && strcmp(dump, "mesh") == 0)
    ir_print_mesh(stdout, m);
  if (svg) { /* the pipeline schedule as a picture (passes/pipe_report.c) */
    FILE *sf = m->pipe ? fopen(svg, "w") : NULL;
    if (!m->pipe) {
      error_plain("--schedule-svg %s: the plan has no pipeline (pp 1): nothing to draw", svg);
      return 1;
    }
    if (!sf || !pipe_svg(sf, m, piped ? &cpipe : NULL, dev.source) || fclose(sf) != 0) {
      error_plain("--schedule-svg: cannot write '%s'", svg);
      return 1;
    }
  }
  if (psvg.mesh && !replan_write_svg(psvg.mesh, "--mesh-svg", m, NULL, 0)) return 1;
  if (psvg.memory) { /* passes/plan_svg.c: this plan's one bar */
    CompareCol col = {.label = "this plan"};
    cost_device_defaults(m, &dev);
    if (profile && !cost_profile_read(profile, &dev)) return 1;
    plan_compare_measure(m, &dev, 10e9, &col);
    if (!replan_write_svg(psvg.memory, "--memory-svg", m, &col, 1)) return 1;
  }
  if (piped) cost_pipe_free(&cpipe);
  fflush(stdout); /* the plan first: a user wants to read it, fit or not */
  if (!fit_check(m, replan_total, &rp)) return 1;
  if (cg.no_outline && !m->pipe) /* (it shapes a pipeline's instructions alone: kept without a word) */
    note_at((SrcLoc){0}, "--no-outline: the plan has no pipeline (pp 1): the trainer's C is the same without it");
  if (!build && !out && cg.emit_dir) { /* plan --emit-c: the source only */
    cg.source_path = input;
    if (!cg_emit_file(m, cg.emit_dir, &cg)) return 1;
  } else if (build || out || cg.emit_dir) {
    cg.source_path = input;
    char def[512];
    if (!out) snprintf(def, sizeof def, "train_%s", m->name);
    if (!cg_build(m, out ? out : def, &cg)) return 1;
    print_launch_hint(m, out ? out : def);
    if (fit_target_gpus_unused(m, target_given))
      note_at((SrcLoc){0}, "%s is a CPU trainer (the default target), not one for topology `%s`'s GPUs (%s): --target "
              "cuda builds for them (--target cpu: this note is not printed)",
              out ? out : def, m->topo.name ? m->topo.name : "?", m->topo.device ? m->topo.device : "?");
  }
  if (sbatch) { /* the Slurm batch script for the trainer -o names (codegen/sbatch.c) */
    char def[512], why[400], a[32], b[32];
    snprintf(def, sizeof def, "train_%s", m->name);
    /* its warning before the time limit: the predicted step and checkpoint (at --storage, else 10 GB/s) */
    CostDevice sd;
    CostReport scr;
    CkptReport sck;
    cost_device_defaults(m, &sd);
    if (profile && !cost_profile_read(profile, &sd)) return 1;
    cost_estimate(m, &sd, &scr);
    double sbps = storage_Bps > 0 ? storage_Bps : 10e9;
    storage_ckpt(m, &sd, sbps, scr.step_s, &sck);
    int warn = storage_stop_warning_s(scr.step_s, sck.sharded_s);
    snprintf(why, sizeof why, "%d s, twice a step (%s predicted) and a checkpoint's writes (%s for %.4g GB at %.4g GB/s%s), "
             "plus 30 s (at least 120)", warn, cost_human_time(a, sizeof a, scr.step_s),
             cost_human_time(b, sizeof b, sck.sharded_s), sck.total_bytes * 1e-9, sbps * 1e-9,
             storage_Bps > 0 ? ", --storage" : "; --storage GB/s gives the file system's");
    if (!cg_write_sbatch(m, sbatch, out ? out : def, home.launch, warn, why)) return 1;
    fprintf(stderr, "shardc: wrote %s: sbatch %s [TRAINER FLAGS...]\n", sbatch, sbatch);
  }
  arena_free(&arena);
  arena_free(&kept);
  return 0;
}

int main(int argc, char **argv) {
  /* The passes build and drop hash maps and tables of every value (ir/ptrmap.c, the memory plan's
   * indexes) many times over a large program: glibc would map each large one afresh and unmap it
   * when freed, so every pass paid the page faults of zeroing it again (GPT-3's pp 32 plan: 420 k
   * faults, a third of its CPU time in the kernel). Freed memory is kept for reuse instead: blocks
   * up to 32 MiB from the heap, which is not trimmed below 1 GiB. */
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  if (argc >= 2 && !strcmp(argv[1], "ckpt")) return rt_ckpt_tool(argc - 2, argv + 2); /* checkpoints: files only */
  memplan_pack_set_jobs(online_cpus());
  Diag diag;
  diag_init(&diag, NULL, DIAG_DEFAULT_MAX_ERRORS);
  diag_enter(&diag);
  int rc = compile(argc, argv, &diag);
  diag_finish(&diag);
  diag_leave(NULL);
  diag_free(&diag);
  return rc;
}
