/* tests/cudart/cudart_gemm_tune.c — the GEMM autotuning's record (runtime/cuda/tune_rec.c, gemm.c, the
 * emulated device's in emu.c) under several ranks. One f32 GEMM y[128, 128] = A B on the device `which`
 * (emu; cuda on a GPU machine), SHARDRT_GEMM_AUTOTUNE=8, SHARDRT_CUBIN_CACHE a fresh directory, the
 * ranks simulated through RtCtx (rank r of world 2, one device open each, as mpirun's would be):
 *   - world 2: each rank tunes its key and records its own line ("<key> rank R<TAB><choice>"), the
 *     second's save keeping the first's line; y equals the host product;
 *   - resumed: each rank takes its own line, times nothing;
 *   - rank 1's line edited to name no candidate: rank 0 still takes its line, rank 1 times again and
 *     rewrites only its own line (rank 0's kept);
 *   - world 1: one line, no rank suffix, taken by a second world-1 run; the same line in the first
 *     format (a space instead of the tab) still taken;
 *   - (emu) the check: a second candidate, wrong in y's last element (SHARDRT_EMU_WRONG_GEMM=1), refused
 *     (a warning, a "<key> refused 1" line, the first kept); tuned again with only that line: skipped.
 */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cu_internal.h"
#include "cudart_test.h"
#include "device.h"
#include "dtype.h"
#include "program.h"

enum { G = 128 };

/* One open of the device as rank `rank` of `world`: one GEMM; the stats' deltas (tuned, recorded);
 * -1 when the open failed or y is wrong. */
static int gemm_once(int rank, int world, int *tuned, int *recorded) {
  RtCudaCode code = {.source = "", .nkernels = 0};
  RtProgram p;
  memset(&p, 0, sizeof p);
  p.model = "cudart-gemm-tune";
  p.mem_bytes = 3 * G * G * 4;
  p.device = &rt_cuda_device;
  p.cuda = &code;
  RtCtx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.rank = rank, ctx.world = world, ctx.threads = 1;
  char *M = NULL;
  if (rt_cuda_device.open(&p, &ctx, p.mem_bytes, &M) != 0) return -1;
  static float a[G * G], b[G * G], y[G * G];
  for (int i = 0; i < G * G; i++) a[i] = (float)(i % 13) * 0.125f - 0.75f, b[i] = (float)(i % 7) * 0.25f - 0.5f;
  char *da = M, *db = M + G * G * 4, *dy = M + 2 * G * G * 4;
  rt_cuda_device.upload(&ctx, da, a, sizeof a);
  rt_cuda_device.upload(&ctx, db, b, sizeof b);
  int s0, t0, r0, s1, t1, r1;
  rt_cu_tune_stats(&s0, &t0, &r0);
  RtCuDev *d = rt_cu_dev(&ctx);
  int rc = d->ops->matmul(d->be, dy, RT_F32, da, db, RT_F32, 1, G, G, G, 0, 0, 1, 1.0f, 0.0f, NULL);
  rt_cu_tune_stats(&s1, &t1, &r1);
  rt_cuda_device.download(&ctx, y, dy, sizeof y);
  rt_cuda_device.close(&ctx);
  *tuned = s1 - s0, *recorded = r1 - r0;
  double err = 0;
  for (int i = 0; i < G; i++)
    for (int j = 0; j < G; j++) {
      double s = 0;
      for (int k = 0; k < G; k++) s += (double)a[i * G + k] * b[k * G + j];
      err = fmax(err, fabs(s - y[i * G + j]));
    }
  return rc == 0 && err < 1e-3 ? 0 : -1;
}

static char *record(const char *dir, char *path, size_t n) {
  DIR *d = opendir(dir);
  path[0] = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    if (!strncmp(e->d_name, "gemm-tune-", 10)) snprintf(path, n, "%s/%s", dir, e->d_name);
  if (d) closedir(d);
  size_t len = 0;
  return path[0] ? rt_cu_read_file(path, &len) : NULL;
}

static int lines(const char *t) {
  int n = 0;
  for (; t && *t; t++) n += *t == '\n';
  return n;
}

/* A copy of t's whole line holding s (newline included), or NULL. */
static char *line_of(const char *t, const char *s) {
  const char *at = t ? strstr(t, s) : NULL;
  if (!at) return NULL;
  const char *b = at, *e = strchr(at, '\n');
  while (b > t && b[-1] != '\n') b--;
  return strndup(b, (size_t)((e ? e + 1 : at + strlen(at)) - b));
}

int test_gemm_tune(const char *which) {
  setenv("SHARDRT_DEVICE", which, 1);
  setenv("SHARDRT_GEMM_AUTOTUNE", "8", 1);
  char dir[] = "/tmp/cudart-gemm-XXXXXX", path[4200];
  if (!mkdtemp(dir)) return 1;
  setenv("SHARDRT_CUBIN_CACHE", dir, 1);
  int tu = 0, re = 0;

  /* world 2: each rank its own line */
  CHECK(gemm_once(0, 2, &tu, &re) == 0, "rank 0 of 2: the GEMM failed or is wrong");
  if (tu == 0 && re == 0 && strcmp(which, "emu")) { /* a GPU whose heuristic offers one algorithm: nothing to tune */
    printf("gemm record (%s): one candidate for the test's GEMM, nothing tuned: skipped\n", which);
    goto done;
  }
  CHECK(tu == 1 && re == 0, "rank 0 of 2, fresh: %d tuned, %d recorded (want 1, 0)", tu, re);
  CHECK(gemm_once(1, 2, &tu, &re) == 0 && tu == 1 && re == 0, "rank 1 of 2, fresh: %d tuned, %d recorded (want 1, 0)",
        tu, re);
  char *t = record(dir, path, sizeof path);
  CHECK(t && lines(t) == 2 && strstr(t, " rank 0\t") && strstr(t, " rank 1\t"),
        "the world-2 record wants a line per rank, holds: %s", t ? t : "(nothing)");
  printf("gemm record (%s), world 2:\n%s", which, t ? t : "");
  free(t);

  /* resumed: each rank its own line */
  for (int r = 0; r < 2; r++)
    CHECK(gemm_once(r, 2, &tu, &re) == 0 && tu == 0 && re == 1, "rank %d of 2, resumed: %d tuned, %d recorded (want 0, 1)",
          r, tu, re);

  /* rank 1's line names no candidate: only rank 1 times again */
  t = record(dir, path, sizeof path);
  char *r1 = t ? strstr(t, " rank 1\t") : NULL, edited[4096];
  if (r1) {
    char *eol = strchr(r1, '\n');
    snprintf(edited, sizeof edited, "%.*s rank 1\t9\n%s", (int)(r1 - t), t, eol ? eol + 1 : "");
    cudart_write_text(path, edited);
  }
  char *rank0 = line_of(t, " rank 0\t");
  free(t);
  CHECK(gemm_once(0, 2, &tu, &re) == 0 && tu == 0 && re == 1, "rank 0 of 2, rank 1 edited: %d tuned, %d recorded", tu,
        re);
  CHECK(gemm_once(1, 2, &tu, &re) == 0 && tu == 1 && re == 0, "rank 1 of 2, its line no candidate: %d tuned, %d recorded",
        tu, re);
  t = record(dir, path, sizeof path);
  CHECK(t && lines(t) == 2 && !strstr(t, "\t9\n") && rank0 && strstr(t, rank0),
        "after rank 1 re-tuned, the record: %s", t ? t : "(nothing)");
  free(t);
  free(rank0);

  /* world 1: no suffix, read back; the first format (no tab) too */
  remove(path);
  CHECK(gemm_once(0, 1, &tu, &re) == 0 && tu == 1 && re == 0, "world 1, fresh: %d tuned, %d recorded", tu, re);
  t = record(dir, path, sizeof path);
  CHECK(t && lines(t) == 1 && !strstr(t, "rank") && strchr(t, '\t'), "the world-1 record: %s", t ? t : "(nothing)");
  CHECK(gemm_once(0, 1, &tu, &re) == 0 && tu == 0 && re == 1, "world 1, resumed: %d tuned, %d recorded", tu, re);
  if (t) {
    *strchr(t, '\t') = ' ';
    cudart_write_text(path, t);
  }
  free(t);
  CHECK(gemm_once(0, 1, &tu, &re) == 0 && tu == 0 && re == 1, "world 1, the first format: %d tuned, %d recorded", tu,
        re);

  /* the check (tune_check.c) on the emulated device: a second, wrong candidate (SHARDRT_EMU_WRONG_GEMM=1,
   * emu.c: y's last element off) refused, the record says so and keeps the first; tuned again with only
   * the refusal left: skipped without a run */
  if (!strcmp(which, "emu")) {
    remove(path);
    setenv("SHARDRT_EMU_WRONG_GEMM", "1", 1);
    int c0, f0, k0, c1, f1, k1;
    rt_cu_tune_checks(&c0, &f0, &k0);
    CHECK(gemm_once(0, 1, &tu, &re) == 0 && tu == 1, "a wrong candidate: the GEMM failed, or %d tuned", tu);
    rt_cu_tune_checks(&c1, &f1, &k1);
    CHECK(c1 - c0 == 1 && f1 - f0 == 1 && k1 == k0, "a wrong candidate: %d checked, %d refused, %d skipped (want 1, 1, 0)",
          c1 - c0, f1 - f0, k1 - k0);
    t = record(dir, path, sizeof path);
    char *ref = line_of(t, " refused 1\toutput 0 (y): |diff| ");
    CHECK(t && lines(t) == 2 && ref && strstr(t, "\t0\n"), "a wrong candidate: the record: %s", t ? t : "(nothing)");
    if (ref) cudart_write_text(path, ref);
    free(t), free(ref);
    rt_cu_tune_checks(&c0, &f0, &k0);
    CHECK(gemm_once(0, 1, &tu, &re) == 0 && tu == 1, "the refusal recorded: the GEMM failed, or %d tuned", tu);
    rt_cu_tune_checks(&c1, &f1, &k1);
    CHECK(c1 == c0 && f1 == f0 && k1 - k0 == 1,
          "the refusal recorded: %d checked, %d refused, %d skipped (want 0, 0, 1: not run again)", c1 - c0, f1 - f0,
          k1 - k0);
    unsetenv("SHARDRT_EMU_WRONG_GEMM");
  }
done:
  unsetenv("SHARDRT_GEMM_AUTOTUNE");
  char cmd[4300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
  return 0;
}
