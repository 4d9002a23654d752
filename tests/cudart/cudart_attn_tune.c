/* tests/cudart/cudart_attn_tune.c — rt_cu_launch_tuned (runtime/cuda/attn_tune.c), the attention tile
 * autotuning's launch, on a hand-made program of five candidates of one kernel, y = y + x over 256
 * floats (y read and written: the timing runs must go to scratch), each also writing its own number to
 * `w` so the test sees which one ran (w is passed after the one output y: not compared, as it differs
 * by design): k0 the compiled default, k1 (slow: a long loop per thread), k2 (another block size; k0
 * and k2 a short loop) and two wrong ones, both faster than any other (no loop): k3 gets the last
 * element wrong (y + 2x there, as a misaligned tail would), k4 does not write it at all; all but k0 inside #ifdef SK_ATTN_TUNE, as the
 * compiler emits them. On the device `which` (emu; cuda on a GPU machine), with SHARDRT_CUBIN_CACHE a
 * fresh directory:
 *   - SHARDRT_ATTN_AUTOTUNE=0, and unset on the emulated device (its default): k0 runs, nothing is
 *     timed or recorded (the candidates not even compiled);
 *   - =1: the four others are checked against k0 (tune_check.c; a run and a compare each), k3 and k4
 *     refused (k4 by the NaN its unwritten element keeps), so only k0..k2 are timed (3 timed runs each),
 *     the slow k1 is not kept, y is y + x exactly (the timing runs wrote scratch), the second launch
 *     times nothing, and the record holds the kept tiles and a "refused" line for each wrong one;
 *   - the record edited to name k1's tiles: a new open launches k1 (honoured though slow), times nothing;
 *   - the record naming tiles that are no candidate: tuned again, k3 and k4 skipped without a run (the
 *     record refused them), a valid choice recorded;
 *   - SHARDRT_ATTN_AUTOTUNE=2 is refused (fatal, in a child);
 *   - rt_cu_tune_agree (the check's tolerance) on its own: agree_case.
 * Checked to fail with the check removed (k3 or k4, the fastest, kept: y wrong).
 */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cu_internal.h"
#include "cuda_ops.h"
#include "cudart_test.h"
#include "device.h"
#include "dtype.h"
#include "program.h"

enum { N = 256 };

static const char *kTuneSource =
    "#include \"shardk.cuh\"\n"
    "extern \"C\" __global__ void k0(float *y, int *w, const float *yi, const float *x) {\n"
    "  int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);\n"
    "  float s = 0.0f;\n"
    "  for (int j = 0; j < 1000; j++) s += x[(i + j) & 255];\n"
    "  if (i < 256) y[i] = yi[i] + x[i];\n"
    "  if (i == 0) w[0] = s < 0.0f ? 9 : 0;\n"
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
    "  float s = 0.0f;\n"
    "  for (int j = 0; j < 1000; j++) s += x[(i + j) & 255];\n"
    "  if (i < 256) y[i] = x[i] + yi[i];\n"
    "  if (i == 0) w[0] = s < 0.0f ? 9 : 2;\n"
    "}\n"
    "SK_EMU_ENTRY(k2, (SK_ARG(0, float *), SK_ARG(1, int *), SK_ARG(2, const float *), SK_ARG(3, const float *)))\n"
    "extern \"C\" __global__ void k3(float *y, int *w, const float *yi, const float *x) {\n"
    "  int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);\n"
    "  if (i < 256) y[i] = yi[i] + (i == 255 ? 2.0f : 1.0f) * x[i];\n"
    "  if (i == 0) w[0] = 3;\n"
    "}\n"
    "SK_EMU_ENTRY(k3, (SK_ARG(0, float *), SK_ARG(1, int *), SK_ARG(2, const float *), SK_ARG(3, const float *)))\n"
    "extern \"C\" __global__ void k4(float *y, int *w, const float *yi, const float *x) {\n"
    "  int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);\n"
    "  if (i < 255) y[i] = yi[i] + x[i];\n"
    "  if (i == 0) w[0] = 4;\n"
    "}\n"
    "SK_EMU_ENTRY(k4, (SK_ARG(0, float *), SK_ARG(1, int *), SK_ARG(2, const float *), SK_ARG(3, const float *)))\n"
    "#endif\n";

static const char *kKey = "test_add N 256";
static const RtCuTileCand kCand[] = {{0, 2, 128, "a", 0}, {1, 2, 128, "slow", 0}, {2, 4, 64, "b", 0},
                                     {3, 2, 128, "wrong", 0}, {4, 2, 128, "holes", 0}};
static const RtCuTuneOut kOut[] = {{RT_F32, 2, 0, 0}}; /* y = yi + x: one sum of two terms */

/* One open of the device: `launches` tuned launches of the key; the number the last kernel wrote, and
 * whether y came out as y0 + launches x exactly. -1 when the open failed. */
static int run(int launches, int *y_ok) {
  RtCudaCode code = {.source = kTuneSource, .nkernels = 5};
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
    rt_cu_launch_tuned(&ctx, kKey, 5, kCand, 1, 1, 4, (void *[]){&(char *){dy}, &(char *){dw}, &(char *){dy}, &(char *){dx}},
                       (const long long[]){4 * N, 4, 4 * N, 4 * N}, 1, kOut);
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

/* rt_cu_tune_agree (tune_check.c) itself, on 3 M bf16 elements (the OpenMP path) of values v_i in
 * [1, 2): with terms 1000 and 1 rounding the tolerance is 2^-7 |v_i| + 2 (1000 2^-24 + 2^-9) max |v|.
 * A change of one bf16 ulp (2^-7 at 1..2) on every third passes; 13 ulps (0.1) at element 2,345,678 is
 * refused, found there; a NaN where the default is finite is refused; integers must be equal. */
static void agree_case(void) {
  enum { NE = 3 << 20 };
  uint16_t *d = malloc(NE * 2), *c = malloc(NE * 2);
  if (!d || !c) return;
  for (int i = 0; i < NE; i++) d[i] = (uint16_t)(0x3f80 + i % 128), c[i] = d[i] + (i % 3 == 0); /* +1 ulp */
  RtCuAgree a;
  CHECK(rt_cu_tune_agree(d, c, RT_BF16, NE, 1000, 1, &a) && a.ratio < 1, "one ulp refused: ratio %g at %lld", a.ratio,
        (long long)a.at);
  int at = 2345678;
  c[at] = (uint16_t)(d[at] + 13); /* 13 ulps (2^-7 each at 1..2) away: about 0.1 */
  float want = 0;
  { /* the error there, as a float */
    uint32_t x = (uint32_t)c[at] << 16, y = (uint32_t)d[at] << 16;
    float fx, fy;
    memcpy(&fx, &x, 4), memcpy(&fy, &y, 4);
    want = fx - fy;
  }
  CHECK(!rt_cu_tune_agree(d, c, RT_BF16, NE, 1000, 1, &a) && a.at == at && fabs(a.err - want) < 1e-6,
        "a wrong element not refused or not found: ok %d at %lld err %g (want %d, %g)", a.ok, (long long)a.at, a.err, at,
        want);
  c[at] = d[at], c[17] = 0xffc0; /* NaN */
  CHECK(!rt_cu_tune_agree(d, c, RT_BF16, NE, 1000, 1, &a) && a.at == 17, "a NaN not refused: ok %d at %lld", a.ok,
        (long long)a.at);
  int32_t di[4] = {1, 2, 3, 4}, ci[4] = {1, 2, 3, 5};
  CHECK(!rt_cu_tune_agree(di, ci, RT_I32, 4, 1000, 1, &a) && a.at == 3, "integers not compared exactly");
  free(d), free(c);
}

int test_attn_tune(const char *which) {
  { /* the wgmma candidates ("wg..." tiles, and "ws...": warp-specialized) are offered only where the device
     * runs them (RtCuOps.wgmma) */
    const RtCuTileCand c[] = {{0, 1, 128, "2x4x64/0", 0},
                              {1, 1, 256, "wg128x2", 82944},
                              {2, 1, 128, "1x4x64/0", 0},
                              {3, 1, 384, "ws128x2x3", 115712}};
    RtCuTileCand out[4];
    int n0 = rt_cu_tile_avail(c, 4, 0, out, 4), n1;
    CHECK(n0 == 2 && out[0].k == 0 && out[1].k == 2, "without wgmma: %d candidates (want k0 and k2)", n0);
    n1 = rt_cu_tile_avail(c, 4, 1, out, 4);
    CHECK(n1 == 4 && out[1].k == 1 && out[1].smem == 82944 && out[3].k == 3, "with wgmma: %d candidates (want all 4)", n1);
    setenv("SHARDRT_ATTN_WGMMA", "0", 1); /* the fallback should a wgmma kernel fault on a GPU */
    n1 = rt_cu_tile_avail(c, 4, 1, out, 4);
    CHECK(n1 == 2 && out[0].k == 0 && out[1].k == 2, "SHARDRT_ATTN_WGMMA=0: %d candidates (want k0 and k2)", n1);
    unsetenv("SHARDRT_ATTN_WGMMA");
  }
  agree_case();
  setenv("SHARDRT_DEVICE", which, 1);
  char dir[] = "/tmp/cudart-attn-XXXXXX", rec[4200], line[1400];
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
  int chk0, ref0, skip0, chk1, ref1, skip1;
  double sec;
  rt_cu_attn_tune_checks(&chk0, &ref0, &skip0, &sec, NULL);
  w = run(2, &y_ok);
  rt_cu_attn_tune_stats(&tuned0, &timed0, &rec0);
  rt_cu_attn_tune_checks(&chk1, &ref1, &skip1, &sec, NULL);
  printf("attn autotune (%s): candidate %d kept, %d timed runs, %d checked against the default in %.4f s, %d refused\n",
         which, w, timed0 - timed1, chk1 - chk0, sec, ref1 - ref0);
  CHECK(w == 0 || w == 2, "the autotuning kept candidate %d (the slow one is 1, the wrong ones 3 and 4)", w);
  CHECK(y_ok, "y is not y0 + 2 x: a wrong candidate kept, or the timing runs changed what the launch read (no scratch)");
  CHECK(chk1 - chk0 == 4 && ref1 - ref0 == 2 && skip1 == skip0,
        "%d candidates checked, %d refused, %d skipped (want 4, 2 and 0: k3 and k4 refused)", chk1 - chk0, ref1 - ref0,
        skip1 - skip0);
  CHECK(tuned0 == tuned1 + 1 && timed0 - timed1 == 9,
        "%d kernels tuned, %d timed runs (want 1 and 3 for each of the 3 candidates the check let through)",
        tuned0 - tuned1, timed0 - timed1);
  CHECK(record_path(dir, rec, sizeof rec) == 0, "no record of the choice in %s", dir);
  size_t len = 0;
  char *text = rt_cu_read_file(rec, &len);
  snprintf(line, sizeof line, "%s\t%s\n", kKey, w >= 0 && w < 5 ? kCand[w].tiles : "?");
  CHECK(text && strstr(text, line) && strstr(text, "test_add N 256 refused wrong\toutput 0: |diff| ") &&
            strstr(text, "test_add N 256 refused holes\toutput 0: |diff| inf at element 255"),
        "the record holds '%s', want '%s' and a refused line for 'wrong' and 'holes'", text ? text : "(nothing)", line);
  char refused[1024] = "", *o = refused; /* the record's refusals, kept in the edits below */
  for (char *l = text; l && *l;) {
    char *nl = strchr(l, '\n');
    size_t n = nl ? (size_t)(nl - l + 1) : strlen(l);
    if (n < 1024 - (size_t)(o - refused) && memmem(l, n, " refused ", 9)) memcpy(o, l, n), o += n, *o = 0;
    l += n;
  }
  free(text);

  snprintf(line, sizeof line, "%s%s\t%s\n", refused, kKey, kCand[1].tiles); /* the slow one: honoured all the same */
  cudart_write_text(rec, line);
  w = run(1, &y_ok);
  rt_cu_attn_tune_stats(&tuned1, &timed1, &rec1);
  CHECK(w == 1 && y_ok, "the recorded tiles '%s' were not honoured: candidate %d ran", kCand[1].tiles, w);
  CHECK(tuned1 == tuned0 && rec1 == rec0 + 1, "with a record: %d tuned, %d taken from it (want 0 and 1)",
        tuned1 - tuned0, rec1 - rec0);

  snprintf(line, sizeof line, "%s%s\tnot-a-candidate\n", refused, kKey); /* stale: tuned again, refusals kept */
  cudart_write_text(rec, line);
  rt_cu_attn_tune_checks(&chk0, &ref0, &skip0, &sec, NULL);
  w = run(1, &y_ok);
  rt_cu_attn_tune_stats(&tuned0, &timed0, &rec0);
  rt_cu_attn_tune_checks(&chk1, &ref1, &skip1, &sec, NULL);
  CHECK((w == 0 || w == 2) && y_ok && tuned0 == tuned1 + 1, "a record of no candidate: candidate %d, %d tuned", w,
        tuned0 - tuned1);
  CHECK(skip1 - skip0 == 2 && chk1 - chk0 == 2 && ref1 == ref0,
        "tuned again with the record's refusals: %d skipped, %d checked, %d refused (want 2, 2 and 0: k3 and k4 not run)",
        skip1 - skip0, chk1 - chk0, ref1 - ref0);
  text = rt_cu_read_file(rec, &len);
  CHECK(text && !strstr(text, "not-a-candidate"), "the stale record was kept: %s", text ? text : "");
  free(text);

  /* refused, not ignored (fatal: in a child). The child reads the setting as every device open does
   * (attn_tune.c's state()) without opening a device: CUDA's driver does not survive fork() (a child of
   * a process that initialised it cannot open the GPU: on the H100 of 2026-11-27 the open failed, the
   * child exited 0 and this check failed, while the emulated device, which has no driver, passed). Exit
   * 1 is rt_fatal's: a crash is not a refusal. */
  setenv("SHARDRT_ATTN_AUTOTUNE", "2", 1);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stderr)) _exit(3);
    (void)rt_cu_attn_tune_on(0);
    (void)rt_cu_attn_tune_on(1);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "SHARDRT_ATTN_AUTOTUNE=2 was not refused (child status %d)", status);
  unsetenv("SHARDRT_ATTN_AUTOTUNE");
  char cmd[4300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
  return 0;
}
