/* tests/cudart/cudart_train.c — `test_cudart train` and the trainer part of `nogpu` (see
 * test_cudart.c's header): rt_train_main on a device program (bigram.h as one serial kernel per step
 * function) against the same model as a CPU program. */
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cu_internal.h"
#include "cuda_ops.h"
#include "device.h"
#include "dtype.h"
#include "train/train.h"
#include "st_compare.h"
#include "cudart_test.h"
#include "train_child.h"

/* ---- train: a device program through rt_train_main ---- */

#include "bigram_prog.h" /* the model (its CPU side) and its layout */

enum { BG_V = 256, BG_MB = 4, BG_SEQ = 8 };
static BgLayout bl;
static RtTensor btens[BG_NTENSORS];
static RtProgram bprog;

static void cpu_step(char *M, RtCtx *ctx) { bg_step(M, bl); }
static void cpu_eval(char *M, RtCtx *ctx) { bg_eval(M, bl); }
static void cpu_logits(char *M, RtCtx *ctx) { bg_forward(M, bl); }
static void dev_run(int k, char *M, RtCtx *ctx) {
  void *args[] = {&M, &bl};
  rt_cu_launch(ctx, k, 1, 1, 1, 1, 1, 1, 0, args);
}
static void dev_step(char *M, RtCtx *ctx) { dev_run(0, M, ctx); }
static void dev_eval(char *M, RtCtx *ctx) { dev_run(1, M, ctx); }
static void dev_logits(char *M, RtCtx *ctx) { dev_run(2, M, ctx); }

static const char *kBigramKernels =
    "extern \"C\" __global__ void k0(char *M, BgLayout L) { bg_step(M, L); }\n"
    "SK_EMU_ENTRY(k0, (SK_ARG(0, char *), SK_ARG(1, BgLayout)))\n"
    "extern \"C\" __global__ void k1(char *M, BgLayout L) { bg_eval(M, L); }\n"
    "SK_EMU_ENTRY(k1, (SK_ARG(0, char *), SK_ARG(1, BgLayout)))\n"
    "extern \"C\" __global__ void k2(char *M, BgLayout L) { bg_forward(M, L); }\n"
    "SK_EMU_ENTRY(k2, (SK_ARG(0, char *), SK_ARG(1, BgLayout)))\n";

static void make_bigram(int device, RtCudaCode *code) {
  /* something before the first tensor: offsets differ from the host copy's */
  BgShape s = {.V = BG_V, .VP = BG_V + 8, .mb = BG_MB, .seq = BG_SEQ, .base = 4096, .align = 256, .v_stacked = true};
  bg_program(&s, &bl, btens, &bprog);
  bprog.model = "bigram"; /* the same in both: checkpoints carry it */
  bprog.source = "tests/train/bigram.h";
  bprog.byte_level = 1;
  bprog.recipe.lr_schedule = RT_LR_COSINE;
  bprog.recipe.warmup = 2;
  bprog.recipe.steps = 10;
  bprog.step = device ? dev_step : cpu_step;
  bprog.eval = device ? dev_eval : cpu_eval;
  bprog.logits = device ? dev_logits : cpu_logits;
  bprog.device = device ? &rt_cuda_device : NULL;
  bprog.cuda = device ? code : NULL;
}

static char tmpdir[] = "/tmp/cudart-train-XXXXXX";

static char *path_of(const char *name) { return rt_xprintf("%s/%s", tmpdir, name); }

/* rt_train_main(bprog) in a child with the NULL-terminated arguments */
static Result run_trainer(const char *first, ...) {
  va_list ap;
  va_start(ap, first);
  Result r = train_run(&bprog, tmpdir, "test_cudart", first, ap);
  va_end(ap);
  return r;
}

/* The JSON-lines log without its timing fields: "step", "loss", "grad_norm", "val_loss" of each line. */
static char *log_values(const char *path) {
  size_t n;
  char *text = rt_cu_read_file(path, &n), *out = calloc(1, n + 1), *o = out;
  if (!text || !out) return out ? out : strdup("");
  const char *keys[] = {"\"step\":", "\"loss\":", "\"grad_norm\":", "\"val_loss\":", "\"lr\":"};
  for (char *line = text; line && *line;) {
    char *end = strchr(line, '\n');
    if (end) *end = 0;
    for (int k = 0; k < 5; k++) {
      char *at = strstr(line, keys[k]);
      if (!at) continue;
      size_t len = strcspn(at, ",}");
      memcpy(o, at, len);
      o += len;
      *o++ = ' ';
    }
    *o++ = '\n';
    line = end ? end + 1 : NULL;
  }
  free(text);
  return out;
}

static int same_file(const char *a, const char *b) {
  size_t na = 0, nb = 0;
  char *x = rt_cu_read_file(a, &na), *y = rt_cu_read_file(b, &nb);
  int same = x && y && na == nb && !memcmp(x, y, na);
  free(x);
  free(y);
  return same;
}

/* Two logs of log_values: the same keys on the same lines, every number within rel relative (of the larger
 * magnitude, floor 1e-30). Prints the worst relative difference; 0 when they differ beyond it. */
static int logs_close(const char *a, const char *b, double rel) {
  double worst = 0;
  while (*a && *b) {
    size_t ka = strcspn(a, ":\n"), kb = strcspn(b, ":\n");
    if (ka != kb || memcmp(a, b, ka) != 0) return printf("logs: keys differ at '%.20s' / '%.20s'\n", a, b), 0;
    a += ka, b += kb;
    if (*a != ':') {
      if (*a) a++, b++; /* end of line */
      continue;
    }
    char *ea, *eb;
    double x = strtod(a + 1, &ea), y = strtod(b + 1, &eb);
    double m = fabs(x) > fabs(y) ? fabs(x) : fabs(y), r = fabs(x - y) / (m > 1e-30 ? m : 1e-30);
    if (r > worst || r != r) worst = r;
    a = ea, b = eb;
    while (*a == ' ') a++;
    while (*b == ' ') b++;
  }
  printf("logs: worst relative difference %.3g (tolerance %g)\n", worst, rel);
  return !*a && !*b && worst <= rel;
}

static const char *sample_line(const char *out) {
  const char *s = strstr(out, "sample (");
  return s ? s : "(no sample)";
}

int test_train(void) {
  if (!mkdtemp(tmpdir)) return 2;
  if (!getenv("SHARDRT_DEVICE")) setenv("SHARDRT_DEVICE", "emu", 1);
  int gpu = !strcmp(getenv("SHARDRT_DEVICE"), "cuda");
  /* the kernels: the model's source pasted after shardk.cuh */
  size_t n;
  /* the source tree it was built from, else the tree it runs in (binaries packed for another machine,
   * tests/gpu/pack.sh, run from the repository root there) */
  char *body = rt_cu_read_file(BIGRAM_H, &n);
  if (!body) body = rt_cu_read_file("tests/train/bigram.h", &n);
  CHECK(body != NULL, "cannot read %s (nor tests/train/bigram.h from the working directory)", BIGRAM_H);
  if (!body) return 1;
  char *src = rt_xprintf("#include \"shardk.cuh\"\n#define BG_FN __device__\n%s\n%s", body, kBigramKernels);
  RtCudaCode code = {.source = src, .nkernels = 3};
  /* data: 4 KiB of text */
  char *data = path_of("data.txt");
  FILE *f = fopen(data, "w");
  for (int i = 0; f && i < 100; i++) fprintf(f, "the quick brown fox %d jumps over the lazy dog.\n", i * 7 % 13);
  if (!f || fclose(f) != 0) return 2;

  const char *which[2] = {"cpu", "dev"};
  char *logs[2], *samples[2];
  for (int d = 0; d < 2; d++) {
    make_bigram(d, &code);
    char *log = path_of(d ? "dev.jsonl" : "cpu.jsonl"), *ck = path_of(d ? "ck_dev" : "ck_cpu"),
         *dump = path_of(d ? "dump_dev" : "dump_cpu");
    Result r = run_trainer("--data", data, "--steps", "10", "--eval-every", "5", "--val-batches", "2", "--log", log,
                           "--save-to", ck, "--dump-steps", "1", "--dump-to", dump, "--sample", "24", "--temperature",
                           "0", "--threads", "1", "--prompt", "the quick", NULL);
    CHECK(r.status == 0, "%s run: exit %d\nstderr: %s\nstdout: %s", which[d], r.status, r.err, r.out);
    if (d) {
      printf("%s", r.out);
      CHECK(strstr(r.out, "device: ") != NULL, "no device line in the banner");
    }
    logs[d] = log_values(log);
    samples[d] = strdup(sample_line(r.out));
    free(r.out), free(r.err), free(log), free(ck), free(dump);
  }
  /* The emulated device runs the same C as the CPU: byte for byte. A GPU's expf / logf (2 ulp) and its
   * fused multiply-adds differ in the last bits: every logged number within 1e-5 relative, every
   * parameter, optimizer moment and dumped gradient within 1e-5 absolute (they are <= 0.1 in size, so
   * this is ~100 fp32 roundings of the largest; a wrong kernel is off by far more). */
  CHECK(strlen(logs[0]) > 100, "short log: %s", logs[0]);
  if (!gpu) {
    CHECK(!strcmp(logs[0], logs[1]), "the device run's log differs:\ncpu:\n%s\ndevice:\n%s", logs[0], logs[1]);
    CHECK(!strcmp(samples[0], samples[1]), "samples differ:\ncpu: %s\ndevice: %s", samples[0], samples[1]);
  } else {
    CHECK(logs_close(logs[0], logs[1], 1e-5), "the device run's log differs:\ncpu:\n%s\ndevice:\n%s", logs[0],
          logs[1]);
    CHECK(strstr(samples[1], "sample (") != NULL, "the device run printed no sample");
    printf("samples (greedy; may part where two bytes tie within rounding):\ncpu: %sdevice: %s", samples[0], samples[1]);
  }
  const char *files[] = {"ck_%s/step_00000010/model.safetensors", "ck_%s/step_00000010/optimizer.safetensors",
                         "dump_%s/step_1.safetensors"};
  for (int i = 0; i < 3; i++) {
    char a[256], b[256];
    snprintf(a, sizeof a, files[i], "cpu");
    snprintf(b, sizeof b, files[i], "dev");
    char *pa = path_of(a), *pb = path_of(b);
    if (!gpu)
      CHECK(same_file(pa, pb), "%s and %s differ (or are missing)", pa, pb);
    else
      CHECK(st_compare(pa, pb, 1e-5, 0, 0) == 0, "%s and %s differ by more than 1e-5 (or are missing)", pa, pb);
    free(pa), free(pb);
  }
  /* stop at 5, resume to 10: the same checkpoint as the straight run */
  make_bigram(1, &code);
  char *ck = path_of("ck_res");
  Result r = run_trainer("--data", data, "--steps", "10", "--stop-at", "5", "--save-to", ck, "--threads", "1", NULL);
  CHECK(r.status == 0, "stop-at run: exit %d: %s", r.status, r.err);
  free(r.out), free(r.err);
  r = run_trainer("--resume", ck, "--data", data, "--save-to", ck, "--threads", "1", NULL);
  CHECK(r.status == 0, "resumed run: exit %d: %s", r.status, r.err);
  free(r.out), free(r.err);
  char *a = path_of("ck_res/step_00000010/model.safetensors"), *b = path_of("ck_dev/step_00000010/model.safetensors");
  CHECK(same_file(a, b), "the resumed run's checkpoint differs from the straight run's");
  free(a), free(b), free(ck);
  printf("cpu and device runs: %s losses, grad norms, validation, dump and checkpoints\n%s", gpu ? "close" : "identical",
         samples[1]);
  for (int d = 0; d < 2; d++) free(logs[d]), free(samples[d]);
  char *rm = rt_xprintf("rm -rf '%s'", tmpdir);
  if (system(rm) != 0) fprintf(stderr, "cannot remove %s\n", tmpdir);
  free(rm), free(src), free(body), free(data);
  return 0;
}

/* The trainer of a device program where no GPU opens: exit 1 with the message. */
int trainer_nogpu(void) {
  if (!mkdtemp(tmpdir)) return 2;
  unsetenv("SHARDRT_DEVICE");
  RtCudaCode code = {.source = kSource, .nkernels = 2};
  make_bigram(1, &code);
  Result r = run_trainer("--steps", "0", NULL);
  CHECK(r.status == 1, "exit %d, want 1", r.status);
  CHECK(strstr(r.err, "error: no CUDA GPU: cudaGetDeviceCount returned 35 (cudaErrorInsufficientDriver)") != NULL,
        "stderr: %s", r.err);
  printf("trainer: exit %d: %s", r.status, r.err);
  free(r.out), free(r.err);
  char *rm = rt_xprintf("rm -rf '%s'", tmpdir);
  if (system(rm) != 0) fprintf(stderr, "cannot remove %s\n", tmpdir);
  free(rm);
  return 0;
}
