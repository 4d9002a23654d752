/* tests/cudart/cudart_attn_tune.c — rt_cu_launch_tuned (runtime/cuda/attn_tune.c), the attention tile
 * autotuning's launch, on a hand-made program of three candidates of one kernel, y = y + x over 256
 * floats (y read and written: the timing runs must go to scratch), each also writing its own number to
 * `w` so the test sees which one ran: k0 the compiled default, k1 (slow: a long loop per thread) and k2
 * (another block size) inside #ifdef SK_ATTN_TUNE, as the compiler emits them. On the device `which`
 * (emu; cuda on a GPU machine), with SHARDRT_CUBIN_CACHE a fresh directory:
 *   - SHARDRT_ATTN_AUTOTUNE=0, and unset on the emulated device (its default): k0 runs, nothing is
 *     timed or recorded (the candidates not even compiled);
 *   - =1: the three are timed at the key's first launch (3 timed runs each), the slow k1 is not kept, y
 *     is y + x exactly (the timing runs wrote scratch), the second launch times nothing, and the record
 *     file names the kept tiles;
 *   - the record edited to name k1's tiles: a new open launches k1 (honoured though slow), times nothing;
 *   - the record naming tiles that are no candidate: timed again, a valid choice recorded;
 *   - SHARDRT_ATTN_AUTOTUNE=2 is refused (fatal, in a child).
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cu_internal.h"
#include "cuda_ops.h"
#include "cudart_test.h"
#include "device.h"
#include "program.h"

enum { N = 256 };

static const char *kTuneSource =
    "#include \"shardk.cuh\"\n"
    "extern \"C\" __global__ void k0(float *y, int *w, const float *yi, const float *x) {\n"
    "  int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);\n"
    "  if (i < 256) y[i] = yi[i] + x[i];\n"
    "  if (i == 0) w[0] = 0;\n"
    "}\n"
    "SK_EMU_ENTRY(k0, (SK_ARG(0, float *), SK_ARG(1, int *), SK_ARG(2, const float *), SK_ARG(3, const float *)))\n"
    "#ifdef SK_ATTN_TUNE\n"
    "extern \"C\" __global__ void k1(float *y, int *w, const float *yi, const float *x) {\n"
    "  int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);\n"
    "  float s = 0.0f;\n"
    "  for (int j = 0; j < 20000; j++) s += x[(i + j) & 255];\n"
    "  if (i < 256) y[i] = yi[i] + x[i];\n"
    "  if (i == 0) w[0] = s == 1234.5f ? 7 : 1;\n"
    "}\n"
    "SK_EMU_ENTRY(k1, (SK_ARG(0, float *), SK_ARG(1, int *), SK_ARG(2, const float *), SK_ARG(3, const float *)))\n"
    "extern \"C\" __global__ void k2(float *y, int *w, const float *yi, const float *x) {\n"
    "  int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);\n"
    "  if (i < 256) y[i] = x[i] + yi[i];\n"
    "  if (i == 0) w[0] = 2;\n"
    "}\n"
    "SK_EMU_ENTRY(k2, (SK_ARG(0, float *), SK_ARG(1, int *), SK_ARG(2, const float *), SK_ARG(3, const float *)))\n"
    "#endif\n";

static const char *kKey = "test_add N 256";
static const RtCuTileCand kCand[] = {{0, 2, 128, "a", 0}, {1, 2, 128, "slow", 0}, {2, 4, 64, "b", 0}};

/* One open of the device: `launches` tuned launches of the key; the number the last kernel wrote, and
 * whether y came out as y0 + launches x exactly. -1 when the open failed. */
static int run(int launches, int *y_ok) {
  RtCudaCode code = {.source = kTuneSource, .nkernels = 3};
  RtProgram p;
  memset(&p, 0, sizeof p);
  p.model = "cudart-attn-tune";
  p.mem_bytes = 1 << 16;
  p.device = &rt_cuda_device;
  p.cuda = &code;
  RtCtx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.world = 1, ctx.threads = 1;
  char *M = NULL;
  if (rt_cuda_device.open(&p, &ctx, p.mem_bytes, &M) != 0) return -1;
  float y0[N], x[N], y[N];
  for (int i = 0; i < N; i++) y0[i] = (float)i * 0.25f, x[i] = 1.0f + (float)(i % 7);
  char *dy = M, *dw = M + 4 * N, *dx = M + 8 * N;
  rt_cuda_device.upload(&ctx, dy, y0, sizeof y0);
  rt_cuda_device.upload(&ctx, dx, x, sizeof x);
  int w = -1;
  rt_cuda_device.upload(&ctx, dw, &w, sizeof w);
  for (int l = 0; l < launches; l++)
    rt_cu_launch_tuned(&ctx, kKey, 3, kCand, 1, 1, 4, (void *[]){&(char *){dy}, &(char *){dw}, &(char *){dy}, &(char *){dx}},
                       (const long long[]){4 * N, 4, 4 * N, 4 * N}, 2);
  rt_cuda_device.download(&ctx, y, dy, sizeof y);
  rt_cuda_device.download(&ctx, &w, dw, sizeof w);
  rt_cuda_device.close(&ctx);
  *y_ok = 1;
  for (int i = 0; i < N; i++) {
    float want = y0[i];
    for (int l = 0; l < launches; l++) want += x[i];
    if (y[i] != want) *y_ok = 0;
  }
  return w;
}

/* The record file in dir (attn-tune-*.txt): its path into out, 0; -1 when there is none. */
static int record_path(const char *dir, char *out, size_t n) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int found = -1;
  for (struct dirent *e; (e = readdir(d)) && found < 0;)
    if (!strncmp(e->d_name, "attn-tune-", 10)) snprintf(out, n, "%s/%s", dir, e->d_name), found = 0;
  closedir(d);
  return found;
}

void cudart_write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

int test_attn_tune(const char *which) {
  { /* the wgmma candidates ("wg..." tiles) are offered only where the device runs them (RtCuOps.wgmma) */
    const RtCuTileCand c[] = {{0, 1, 128, "2x4x64/0", 0}, {1, 1, 256, "wg128x2", 82944}, {2, 1, 128, "1x4x64/0", 0}};
    RtCuTileCand out[4];
    int n0 = rt_cu_tile_avail(c, 3, 0, out, 4), n1;
    CHECK(n0 == 2 && out[0].k == 0 && out[1].k == 2, "without wgmma: %d candidates (want k0 and k2)", n0);
    n1 = rt_cu_tile_avail(c, 3, 1, out, 4);
    CHECK(n1 == 3 && out[1].k == 1 && out[1].smem == 82944, "with wgmma: %d candidates (want all 3)", n1);
  }
  setenv("SHARDRT_DEVICE", which, 1);
  char dir[] = "/tmp/cudart-attn-XXXXXX", rec[4200], line[256];
  if (!mkdtemp(dir)) return 1;
  setenv("SHARDRT_CUBIN_CACHE", dir, 1);
  int tuned0, timed0, rec0, tuned1, timed1, rec1, y_ok = 0;

  int w = 0;
  for (int pass = 0; pass < 2; pass++) { /* off: explicitly, and the emulated device's default (a GPU's is on) */
    if (pass == 0) setenv("SHARDRT_ATTN_AUTOTUNE", "0", 1);
    else if (!strcmp(which, "emu")) unsetenv("SHARDRT_ATTN_AUTOTUNE");
    else break;
    rt_cu_attn_tune_stats(&tuned0, &timed0, &rec0);
    w = run(1, &y_ok);
    rt_cu_attn_tune_stats(&tuned1, &timed1, &rec1);
    CHECK(w == 0 && y_ok, "autotuning off (%s): candidate %d ran (want the default, 0), y %s", pass ? "unset" : "0", w,
          y_ok ? "ok" : "wrong");
    CHECK(tuned1 == tuned0 && timed1 == timed0 && record_path(dir, rec, sizeof rec) != 0,
          "autotuning off (%s): %d kernels tuned, a record written", pass ? "unset" : "0", tuned1 - tuned0);
  }

  setenv("SHARDRT_ATTN_AUTOTUNE", "1", 1);
  w = run(2, &y_ok);
  rt_cu_attn_tune_stats(&tuned0, &timed0, &rec0);
  printf("attn autotune (%s): candidate %d kept, %d timed runs\n", which, w, timed0 - timed1);
  CHECK(w == 0 || w == 2, "the autotuning kept candidate %d (the slow one is 1)", w);
  CHECK(y_ok, "the timing runs changed what the launch read (y is not y0 + 2 x): no scratch for an output it reads");
  CHECK(tuned0 == tuned1 + 1 && timed0 - timed1 == 9, "%d kernels tuned, %d timed runs (want 1 and 3 per candidate)",
        tuned0 - tuned1, timed0 - timed1);
  CHECK(record_path(dir, rec, sizeof rec) == 0, "no record of the choice in %s", dir);
  size_t len = 0;
  char *text = rt_cu_read_file(rec, &len);
  snprintf(line, sizeof line, "%s\t%s\n", kKey, w >= 0 && w < 3 ? kCand[w].tiles : "?");
  CHECK(text && !strcmp(text, line), "the record holds '%s', want '%s'", text ? text : "(nothing)", line);
  free(text);

  snprintf(line, sizeof line, "%s\t%s\n", kKey, kCand[1].tiles); /* the slow one: honoured all the same */
  cudart_write_text(rec, line);
  w = run(1, &y_ok);
  rt_cu_attn_tune_stats(&tuned1, &timed1, &rec1);
  CHECK(w == 1 && y_ok, "the recorded tiles '%s' were not honoured: candidate %d ran", kCand[1].tiles, w);
  CHECK(tuned1 == tuned0 && rec1 == rec0 + 1, "with a record: %d tuned, %d taken from it (want 0 and 1)",
        tuned1 - tuned0, rec1 - rec0);

  snprintf(line, sizeof line, "%s\tnot-a-candidate\n", kKey);
  cudart_write_text(rec, line);
  w = run(1, &y_ok);
  rt_cu_attn_tune_stats(&tuned0, &timed0, &rec0);
  CHECK((w == 0 || w == 2) && y_ok && tuned0 == tuned1 + 1, "a record of no candidate: candidate %d, %d tuned", w,
        tuned0 - tuned1);
  text = rt_cu_read_file(rec, &len);
  CHECK(text && !strstr(text, "not-a-candidate"), "the stale record was kept: %s", text ? text : "");
  free(text);

  setenv("SHARDRT_ATTN_AUTOTUNE", "2", 1); /* refused, not ignored (fatal: in a child) */
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stderr)) _exit(3);
    (void)run(1, &y_ok);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0, "SHARDRT_ATTN_AUTOTUNE=2 was not refused");
  unsetenv("SHARDRT_ATTN_AUTOTUNE");
  char cmd[4300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
  return 0;
}
