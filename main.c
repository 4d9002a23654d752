/* main.c — the shardc command line: .model → front end → passes → (codegen). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codegen.h"
#include "diag.h"
#include "fit.h"
#include "frontend.h"
#include "memplan.h"
#include "mesh.h"
#include "pipeline.h"
#include "pipe_sched.h"
#include "print.h"

#ifndef SHARDC_MODELS_DIR
#define SHARDC_MODELS_DIR "models"
#endif

static void usage(FILE *f) {
  fprintf(f,
          "usage: shardc build FILE.model -o TRAINER [options]   compile a trainer executable\n"
          "       shardc plan FILE.model [options]                print the plan (IR, memory, FLOPs)\n"
          "\n"
          "Compiles a .model file (model, topology, parallel plan, training recipe).\n"
          "\n"
          "options:\n"
          "  -o FILE               the trainer to write (build)\n"
          "  --target cpu|cuda     what the trainer runs on (default cpu): cuda emits GPU kernels (NVRTC at\n"
          "                        start), cuBLASLt GEMMs and bf16 mixed precision when the recipe asks for it\n"
          "  --cpu-kernels c|llvm  the CPU target's elementwise runs (fusion groups) and AdamW: the runtime's\n"
          "                        C kernels (default) or kernels built by LLVM for this machine's CPU\n"
          "  --emit-c DIR          keep the generated C source in DIR (with plan: write it, compile nothing)\n"
          "  --schedule-svg FILE   draw the pipeline schedule (one lane per stage, blocks to scale) as SVG\n"
          "  --cc CC, --cflags F   the C compiler and flags for the trainer (default: $CC or cc, -O2)\n"
          "  -v                    print the C compiler command\n"
          "  -D KEY=VALUE          override a plan/recipe field or a model constant (-D tp=4 -D zero=1)\n"
          "  --topology FILE       use this topology instead of the file's own\n"
          "  --world N             ranks to plan for (default: the topology's devices)\n"
          "  --max-errors N        errors shown before the rest are only counted (default 50, 0: all)\n"
          "  -I DIR                add an import directory (default: %s)\n"
          "  --dump-ir             print the final IR, parameter counts and FLOPs, then stop\n"
          "  --dump-ir=after:PASS  print the IR after PASS (or 'all'); passes:",
          SHARDC_MODELS_DIR);
  const char *names[32];
  pipeline_pass_names(names, 32);
  for (const char *const *p = names; *p; p++) fprintf(f, " %s", *p);
  fprintf(f,
          "\n"
          "  --dump-ir=dot         print the final graph for Graphviz\n"
          "  --dump-ir=mesh        print each rank's coordinates, node, device and groups\n"
          "  --time-passes         print each pass's time\n"
          "  --no-verify           skip the IR verifier between passes\n"
          "  -h, --help            this text\n");
}

/* The fit check's re-planning (passes/fit.h): the same source and options plus a few -D
 * overrides, compiled and planned on a fresh Module, silently. Its Modules stay in the
 * driver's arena (the diagnostics keep pointers to their source texts). */
typedef struct {
  Arena *arena;
  const char *input;    /* the .model path */
  const FeOptions *fo;  /* the command line's front-end options */
  Target target;
} Replan;

static int64_t replan(void *ctx, const char *const *kv, int n) {
  Replan *r = ctx;
  enum { MAXD = 160 };
  FeDefine d[MAXD];
  int nd = r->fo->ndefines;
  if (nd + n > MAXD) return -1;
  for (int i = 0; i < nd; i++) d[i] = r->fo->defines[i];
  for (int i = 0; i < n; i++) {
    const char *eq = strchr(kv[i], '=');
    if (!eq) die("replan: '%s' is not key=value", kv[i]);
    d[nd + i].key = arena_strndup(r->arena, kv[i], (size_t)(eq - kv[i]));
    d[nd + i].value = eq + 1;
  }
  FeOptions o = *r->fo;
  o.defines = d;
  o.ndefines = nd + n;
  FILE *null = fopen("/dev/null", "w");
  if (!null) return -1;
  Diag quiet; /* the re-plan's own diagnostics, unseen: only whether it fits matters */
  diag_init(&quiet, null, 1);
  Diag *outer = diag_enter(&quiet);
  int64_t total = -1;
  Module *m = fe_compile(r->arena, r->input, &o);
  if (m && diag_errors() == 0) {
    m->target = r->target;
    PipelineOptions po = {.dump = null, .verify = false};
    if (pipeline_run(m, &po) && m->memplan) total = m->memplan->total;
  }
  diag_leave(outer);
  diag_free(&quiet);
  fclose(null);
  return total;
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
  char models[4096], include[4096], lib[4096];
  bool installed;
} Home;

static void find_home(Home *h) {
  char exe[4000]; /* room for the suffixes below in Home's fields */
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  h->installed = false;
  snprintf(h->models, sizeof h->models, "%s", SHARDC_MODELS_DIR);
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

static int compile(int argc, char **argv, Diag *diag) {
  const char *input = NULL, *topology = NULL, *dump = NULL, *out = NULL, *svg = NULL;
  bool build = false;
  Target target = TARGET_CPU;
  CgOptions cg = {0};
  const char *import_dirs[16];
  int nimport = 0;
  FeDefine defines[128];
  int ndefines = 0;
  PipelineOptions po = {.dump = stdout, .verify = true};
  int world = 0; /* --world: ranks to plan for (0: the topology's) */
  Arena arena;
  arena_init(&arena);

  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "plan") == 0 && !input) {
      dump = dump ? dump : "final";
    } else if (strcmp(a, "build") == 0 && !input) {
      build = true;
    } else if (strcmp(a, "-o") == 0 && i + 1 < argc) {
      out = argv[++i];
    } else if (strcmp(a, "--target") == 0 && i + 1 < argc) {
      const char *t = argv[++i];
      if (strcmp(t, "cpu") == 0) target = TARGET_CPU;
      else if (strcmp(t, "cuda") == 0) target = TARGET_CUDA;
      else error_plain("--target %s: expected cpu or cuda", t);
    } else if (strcmp(a, "--cpu-kernels") == 0 && i + 1 < argc) {
      const char *k = argv[++i];
      if (strcmp(k, "llvm") == 0) cg.llvm_kernels = true;
      else if (strcmp(k, "c") == 0) cg.llvm_kernels = false;
      else error_plain("--cpu-kernels %s: expected c or llvm", k);
    } else if (strcmp(a, "--schedule-svg") == 0 && i + 1 < argc) {
      svg = argv[++i];
    } else if (strcmp(a, "--emit-c") == 0 && i + 1 < argc) {
      cg.emit_dir = argv[++i];
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
      defines[ndefines].key = eq ? arena_strndup(&arena, kv, (size_t)(eq - kv)) : kv;
      defines[ndefines].value = eq ? eq + 1 : "1";
      ndefines++;
    } else if (strcmp(a, "--topology") == 0 && i + 1 < argc) {
      topology = argv[++i];
    } else if (strcmp(a, "--world") == 0 && i + 1 < argc) {
      world = (int)parse_count(argv[++i], "--world", 1, IR_RANKS_MAX);
    } else if (strcmp(a, "--max-errors") == 0 && i + 1 < argc) {
      diag->max_errors = (int)parse_count(argv[++i], "--max-errors", 0, 1 << 30);
    } else if (strcmp(a, "-I") == 0 && i + 1 < argc) {
      if (nimport < 15) import_dirs[nimport++] = argv[++i];
    } else if (strcmp(a, "--dump-ir") == 0) {
      dump = "final";
    } else if (strncmp(a, "--dump-ir=", 10) == 0) {
      dump = a + 10;
    } else if (strcmp(a, "--time-passes") == 0) {
      po.time = true;
    } else if (strcmp(a, "--no-verify") == 0) {
      po.verify = false;
    } else if (a[0] == '-') {
      error_plain("unknown option '%s' (see shardc --help)", a);
    } else if (!input) {
      input = a;
    } else {
      error_plain("more than one input file: '%s' and '%s'", input, a);
    }
  }
  if (!input && diag_errors() == 0) {
    usage(stderr);
    return 1;
  }
  if (diag_errors()) return 1;
  if (cg.llvm_kernels && target != TARGET_CPU) {
    error_plain("--cpu-kernels llvm: the LLVM kernels are the CPU target's; leave it out with --target cuda");
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
  Home home;
  find_home(&home);
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
                  .world = world};
  Module *m = fe_compile(&arena, input, &fo);
  if (!m || diag_errors()) return 1;
  m->target = target;
  if (!pipeline_run(m, &po)) return 1;
  if (dump && strcmp(dump, "final") == 0) {
    ir_print_module(stdout, m);
    pipe_print(stdout, m);
    memplan_print(stdout, m);
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
    if (!sf || !pipe_svg(sf, m) || fclose(sf) != 0) {
      error_plain("--schedule-svg: cannot write '%s'", svg);
      return 1;
    }
  }
  fflush(stdout); /* the plan first: a user wants to read it, fit or not */
  Replan rp = {&arena, input, &fo, target};
  if (!fit_check(m, replan, &rp)) return 1;
  if (!build && !out && cg.emit_dir) { /* plan --emit-c: the source only */
    cg.source_path = input;
    if (!cg_emit_file(m, cg.emit_dir, &cg)) return 1;
  } else if (build || out || cg.emit_dir) {
    cg.source_path = input;
    char def[512];
    if (!out) snprintf(def, sizeof def, "train_%s", m->name);
    if (!cg_build(m, out ? out : def, &cg)) return 1;
    print_launch_hint(m, out ? out : def);
  }
  arena_free(&arena);
  return 0;
}

int main(int argc, char **argv) {
  Diag diag;
  diag_init(&diag, NULL, DIAG_DEFAULT_MAX_ERRORS);
  diag_enter(&diag);
  int rc = compile(argc, argv, &diag);
  diag_finish(&diag);
  diag_leave(NULL);
  diag_free(&diag);
  return rc;
}
