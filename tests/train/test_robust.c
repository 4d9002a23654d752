/* tests/train/test_robust.c — the trainer refuses what would crash, hang or silently train on
 * garbage (issue 19's probe): --threads beyond the CPUs, a --save-to it cannot write (at the start,
 * before any step), safetensors files whose data_offsets do not tile the data region (shifted,
 * overlapping, trailing bytes), checkpoints holding NaN / Inf, and a run whose loss turns
 * non-finite (it stops with the step and writes no checkpoint of that state); --save-to '' and
 * --resume auto. test_train runs it: robust; and ckpt_fuzz, the checkpoint reader against
 * mutated checkpoints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

/* A safetensors file for the V=64 bigram: wte [64, 64], blocks.0.bias and blocks.1.bias [64],
 * at the given data_offsets, with `data` bytes of data (values 0.001 x index, NaN at wte[nan_at]
 * when nan_at >= 0). */
static void write_st(const char *path, const int64_t off[3][2], int64_t data, int64_t nan_at) {
  char hdr[512];
  int hl = snprintf(hdr, sizeof hdr,
                    "{\"wte\":{\"dtype\":\"F32\",\"shape\":[64,64],\"data_offsets\":[%lld,%lld]},"
                    "\"blocks.0.bias\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[%lld,%lld]},"
                    "\"blocks.1.bias\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[%lld,%lld]}}",
                    (long long)off[0][0], (long long)off[0][1], (long long)off[1][0], (long long)off[1][1],
                    (long long)off[2][0], (long long)off[2][1]);
  size_t n = 8 + (size_t)hl + (size_t)data;
  unsigned char *b = rt_xcalloc(n, 1);
  uint64_t l = (uint64_t)hl;
  memcpy(b, &l, 8);
  memcpy(b + 8, hdr, (size_t)hl);
  float *f = (float *)(b + 8 + hl);
  for (int64_t i = 0; i < data / 4; i++) {
    float v = 0.001f * (float)i;
    memcpy((char *)f + 4 * i, &v, 4);
  }
  if (nan_at >= 0) {
    float v = NAN;
    memcpy((char *)f + off[0][0] + 4 * nan_at, &v, 4);
  }
  write_bytes(path, b, n);
  free(b);
}

static void test_offsets(const char *good) {
  char *p = path_of("offsets.safetensors");
  /* the reference layout loads */
  const int64_t ok[3][2] = {{0, 16384}, {16384, 16640}, {16640, 16896}};
  write_st(p, ok, 16896, -1);
  Result r = run_trainer("--data", good, "--init-from", p, "--steps", "0", NULL);
  expect_ok(&r, "well-formed file");
  free_result(&r);
  /* every tensor shifted by 4 bytes: the first one leaves a gap at the start */
  const int64_t shifted[3][2] = {{4, 16388}, {16388, 16644}, {16644, 16900}};
  write_st(p, shifted, 16900, -1);
  EXPECT_ERROR(rt_xprintf("'%s': tensor 'wte': data_offsets [4, 16388] leave a gap: the data region starts at byte "
                          "0: the tensors must tile the data region exactly (offsets shifted or corrupted)",
                          p),
               "--data", good, "--init-from", p, NULL);
  /* one tensor shifted by 4 bytes inside the region */
  const int64_t gap[3][2] = {{0, 16384}, {16388, 16644}, {16644, 16900}};
  write_st(p, gap, 16900, -1);
  EXPECT_ERROR(rt_xprintf("'%s': tensor 'blocks.0.bias': data_offsets [16388, 16644] leave a gap: tensor 'wte' ends "
                          "at byte 16384: the tensors must tile the data region exactly (offsets shifted or corrupted)",
                          p),
               "--data", good, "--init-from", p, NULL);
  const int64_t overlap[3][2] = {{0, 16384}, {16384, 16640}, {16636, 16892}};
  write_st(p, overlap, 16892, -1);
  EXPECT_ERROR(rt_xprintf("'%s': tensor 'blocks.1.bias': data_offsets [16636, 16892] overlap: tensor "
                          "'blocks.0.bias' ends at byte 16640: the tensors must tile the data region exactly (offsets "
                          "shifted or corrupted)",
                          p),
               "--data", good, "--init-from", p, NULL);
  write_st(p, ok, 16900, -1);
  EXPECT_ERROR(rt_xprintf("'%s': the tensors' data_offsets end at byte 16896, but the data region has 16900 bytes: "
                          "the tensors must tile it exactly (offsets shifted, or the file truncated or padded)",
                          p),
               "--data", good, "--init-from", p, NULL);
  /* NaN weights are refused with the tensor and the element */
  write_st(p, ok, 16896, 77);
  EXPECT_ERROR(rt_xprintf("'%s': tensor 'wte' holds NaN at element 77: a checkpoint with non-finite values is refused "
                          "(the run that wrote it diverged; resume from an earlier checkpoint)",
                          p),
               "--data", good, "--init-from", p, NULL);
  free(p);
}

/* Inf in a checkpoint's optimizer state: --resume refuses it. */
static void test_resume_inf(const char *good) {
  char *ck = path_of("ckinf");
  Result r = run_trainer("--data", good, "--steps", "2", "--save-to", ck, NULL);
  expect_ok(&r, "checkpoint to corrupt");
  free_result(&r);
  char *opt = rt_xprintf("%s/step_00000002/optimizer.safetensors", ck);
  RtStFile s;
  rt_st_open(&s, opt);
  int64_t dims[2] = {64, 64};
  int64_t off = rt_st_find(&s, "adam_v:wte", RT_F32, dims, 2), at = s.data_start + off + 4 * 10;
  rt_st_close(&s);
  FILE *f = fopen(opt, "r+b");
  float inf = INFINITY;
  CHECK(f && fseek(f, at, SEEK_SET) == 0 && fwrite(&inf, 4, 1, f) == 1, "cannot patch %s", opt);
  if (f) fclose(f);
  char *dir = rt_xprintf("%s/step_00000002/optimizer.safetensors", ck);
  EXPECT_ERROR(rt_xprintf("'%s': tensor 'adam_v:wte' holds Inf at element 10: a checkpoint with non-finite values is "
                          "refused (the run that wrote it diverged; resume from an earlier checkpoint)",
                          dir),
               "--data", good, "--resume", ck, NULL);
  free(dir), free(opt), free(ck);
}

/* A learning rate that blows the weights up: the run stops at the first non-finite loss with the
 * step and the tensor, and writes no checkpoint of that state (the one before it stays). */
static void test_diverge(const char *good) {
  double lr = prog.recipe.lr;
  prog.recipe.lr = 1e30;
  char *ck = path_of("ckdiv");
  Result r = run_trainer("--data", good, "--steps", "6", "--save-to", ck, NULL);
  CHECK(r.status == 1, "diverging run: exit %d, want 1\n%s%s", r.status, r.out, r.err);
  CHECK(strstr(r.err, "error: step 3: the loss is NaN (gradient norm NaN); tensor 'wte' holds NaN at element 0: "
                     "training diverged; stopping without writing a checkpoint of this state (no checkpoint was "
                     "written)\n"),
        "diverging run's message:\n%s", r.err);
  char *s2 = rt_xprintf("%s/step_00000002", ck), *s3 = rt_xprintf("%s/step_00000003", ck),
       *s6 = rt_xprintf("%s/step_00000006", ck);
  CHECK(!exists(s2) && !exists(s3) && !exists(s6), "a checkpoint of the diverged state was written");
  free_result(&r);
  /* with a checkpoint every step: step 2's weights are already Inf / NaN (step 3's loss shows it):
   * its checkpoint is refused; step 1's is kept and named */
  r = run_trainer("--data", good, "--steps", "6", "--save-to", ck, "--ckpt-every", "1", NULL);
  CHECK(r.status == 1, "diverging run with checkpoints: exit %d\n%s", r.status, r.err);
  char *s1 = rt_xprintf("%s/step_00000001", ck),
       *want = rt_xprintf("error: step 2: a parameter or optimizer state about to be checkpointed is not finite; "
                          "tensor 'wte' holds ");
  char *want2 = rt_xprintf("(the newest checkpoint is '%s': resume from it with a lower learning rate)\n", s1);
  CHECK(strstr(r.err, want) && strstr(r.err, want2), "the refused checkpoint's message:\n%s", r.err);
  CHECK(exists(s1) && !exists(s2), "step 1's checkpoint kept, no later one");
  free_result(&r);
  prog.recipe.lr = lr;
  free(s1), free(s2), free(s3), free(s6), free(want), free(want2), free(ck);
}

static uint64_t xs(uint64_t *s) { /* xorshift64 */
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* The checkpoint reader against 400 mutations of a good checkpoint (bytes flipped in the header and
 * the data, digits changed in the offsets and shapes, the header length rewritten, the file cut),
 * each read by rt_ckpt_load (full: model and optimizer) in a child: it must load or end with
 * status 1 and an "error: " line — never a signal, a hang (10 s alarm) or another status. The
 * inputs come from a fixed seed: a failure reproduces. */
void test_ckpt_fuzz(void) {
  make_program(64, RT_LR_COSINE, 2, 10);
  uint32_t *t = token_stream(3000, 64, 1);
  char *good = path_of("fuzz.bin"), *ck = path_of("ckfuzz");
  write_shard(good, 20240520, 1, 2, t, 3000, -1);
  free(t);
  Result r = run_trainer("--data", good, "--steps", "2", "--save-to", ck, NULL);
  expect_ok(&r, "checkpoint to mutate");
  free_result(&r);
  char *dir = rt_xprintf("%s/step_00000002", ck);
  const char *files[2] = {"model.safetensors", "optimizer.safetensors"};
  char *orig[2];
  size_t len[2];
  for (int f = 0; f < 2; f++) {
    char *p = rt_xprintf("%s/%s", dir, files[f]);
    FILE *fp = fopen(p, "rb");
    fseek(fp, 0, SEEK_END);
    len[f] = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    orig[f] = rt_xmalloc(len[f]);
    CHECK(fread(orig[f], 1, len[f], fp) == len[f], "read %s", p);
    fclose(fp);
    free(p);
  }
  uint64_t s = 0x9e3779b97f4a7c15ull;
  int loaded = 0, refused = 0;
  char *M = rt_xcalloc((size_t)prog.mem_bytes, 1), *errp = path_of("fuzz.err");
  for (int it = 0; it < 400; it++) {
    int f = (int)(xs(&s) % 2);
    char *b = rt_xmalloc(len[f]);
    memcpy(b, orig[f], len[f]);
    size_t n = len[f];
    uint64_t hl;
    memcpy(&hl, b, 8);
    int how = (int)(xs(&s) % 5);
    if (how == 0) { /* a digit of the header changed: offsets, shapes, metadata */
      for (int tries = 0; tries < 64; tries++) {
        size_t at = 8 + (size_t)(xs(&s) % hl);
        if (b[at] >= '0' && b[at] <= '9') {
          b[at] = (char)('0' + xs(&s) % 10);
          break;
        }
      }
    } else if (how == 1) {
      b[8 + xs(&s) % hl] = (char)xs(&s); /* any header byte */
    } else if (how == 2) {
      uint64_t v = xs(&s); /* the header length: near the right one, or anything */
      if (v % 4) v = hl + (xs(&s) % 17) - 8;
      memcpy(b, &v, 8);
    } else if (how == 3) {
      n = (size_t)(xs(&s) % len[f]); /* cut */
    } else {
      for (int k = 0; k < 4; k++) /* data bytes: may make NaN / Inf */
        b[8 + hl + xs(&s) % (len[f] - 8 - hl)] = (char)0xff;
    }
    char *p = rt_xprintf("%s/%s", dir, files[f]);
    write_bytes(p, b, n);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      int fe = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fe < 0 || dup2(fe, 2) < 0) _exit(99);
      alarm(10);
      RtTrainState st;
      rt_ckpt_load(&prog, M, dir, 1, &st);
      _exit(0);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    char *err = read_text(errp);
    int ok = WIFEXITED(ws) && (WEXITSTATUS(ws) == 0 || (WEXITSTATUS(ws) == 1 && !strncmp(err, "error: ", 7)));
    CHECK(ok, "mutation %d (kind %d of %s): %s %d\n%s", it, how, files[f], WIFEXITED(ws) ? "exit" : "signal",
          WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws), err);
    if (ok) WEXITSTATUS(ws) ? refused++ : loaded++;
    free(err);
    write_bytes(p, orig[f], len[f]); /* back to the good file */
    free(p);
    free(b);
  }
  printf("checkpoint reader: 400 mutated checkpoints: %d loaded, %d refused with an error, none crashed or hung\n",
         loaded, refused);
  CHECK(refused > 200, "only %d of 400 mutations refused", refused);
  free(M), free(errp), free(orig[0]), free(orig[1]), free(dir), free(ck), free(good);
}

/* rt_first_nonfinite (the NaN / Inf screen of every snapshot and checkpoint, by blocks of 4096)
 * against a plain scan: every float dtype, lengths around the block size, NaN, +Inf and -Inf at the
 * start, at both sides of a block boundary and at the end, the largest finite values (which must
 * pass), and two non-finite values (the first one is named). */
static int64_t naive_nonfinite(const unsigned char *d, int es, int64_t n) { /* f32, f64, bf16 */
  for (int64_t i = 0; i < n; i++) {
    uint64_t u = 0;
    memcpy(&u, d + i * es, (size_t)es);
    uint64_t ex = es == 8 ? 0x7ff0000000000000ull : es == 4 ? 0x7f800000u : 0x7f80u;
    if ((u & ex) == ex) return i;
  }
  return -1;
}

static void test_nonfinite_scan(void) {
  static const struct { int dt, es; uint64_t big, nan, inf, ninf; } k[] = {
      {RT_F32, 4, 0x7f7fffffu, 0x7fc00000u, 0x7f800000u, 0xff800000u},
      {RT_F64, 8, 0x7fefffffffffffffull, 0x7ff8000000000000ull, 0x7ff0000000000000ull, 0xfff0000000000000ull},
      {RT_BF16, 2, 0x7f7fu, 0x7fc0u, 0x7f80u, 0xff80u},
  };
  static const int64_t lens[] = {1, 7, 4095, 4096, 4097, 10000};
  unsigned char *d = malloc(10000 * 8);
  CHECK(d, "out of memory");
  for (size_t t = 0; t < sizeof k / sizeof k[0]; t++)
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
      int64_t n = lens[l];
      for (int64_t i = 0; i < n; i++) { /* finite: the largest magnitude every 3rd, either sign */
        uint64_t v = i % 3 ? (uint64_t)(i & 0x3f) : k[t].big | (i % 2 ? (1ull << (8 * k[t].es - 1)) : 0);
        memcpy(d + i * k[t].es, &v, (size_t)k[t].es);
      }
      CHECK(rt_first_nonfinite(d, k[t].dt, n) == -1, "dtype %d, %lld finite values: a non-finite one found", k[t].dt,
            (long long)n);
      const int64_t at[] = {0, 4095, 4096, n - 1};
      const uint64_t bad[] = {k[t].nan, k[t].inf, k[t].ninf};
      for (int a = 0; a < 4; a++)
        for (int b = 0; b < 3; b++) {
          if (at[a] >= n) continue;
          unsigned char keep[8], keep2[8];
          memcpy(keep, d + at[a] * k[t].es, (size_t)k[t].es);
          memcpy(d + at[a] * k[t].es, &bad[b], (size_t)k[t].es);
          int64_t second = at[a] + 4097 < n ? at[a] + 4097 : -1; /* a later one, in another block */
          if (second >= 0) {
            memcpy(keep2, d + second * k[t].es, (size_t)k[t].es);
            memcpy(d + second * k[t].es, &bad[(b + 1) % 3], (size_t)k[t].es);
          }
          int64_t got = rt_first_nonfinite(d, k[t].dt, n), want = naive_nonfinite(d, k[t].es, n);
          CHECK(got == at[a] && want == at[a], "dtype %d, n %lld, value %d at %lld: found %lld (plain scan %lld)",
                k[t].dt, (long long)n, b, (long long)at[a], (long long)got, (long long)want);
          memcpy(d + at[a] * k[t].es, keep, (size_t)k[t].es);
          if (second >= 0) memcpy(d + second * k[t].es, keep2, (size_t)k[t].es);
        }
    }
  /* f16: Inf 0x7c00, NaN 0x7e00; 0x7bff (65504) finite */
  uint16_t h[5000];
  for (int i = 0; i < 5000; i++) h[i] = i % 2 ? 0x7bffu : 0xfbffu;
  CHECK(rt_first_nonfinite(h, RT_F16, 5000) == -1, "f16: finite values refused");
  h[4321] = 0x7e00u;
  CHECK(rt_first_nonfinite(h, RT_F16, 5000) == 4321, "f16: NaN at 4321 not found");
  free(d);
}

void test_robust(void) {
  test_nonfinite_scan();
  make_program(64, RT_LR_COSINE, 2, 10);
  uint32_t *t = token_stream(3000, 64, 1);
  char *good = path_of("robust.bin");
  write_shard(good, 20240520, 1, 2, t, 3000, -1);
  free(t);

  /* --threads beyond the CPUs: refused before anything starts (100000 crashed in libgomp, 1024
   * crawled on 2 cores) */
  long nproc = sysconf(_SC_NPROCESSORS_ONLN);
  EXPECT_ERROR(rt_xprintf("--threads 100000: this machine has %ld online CPU%s; compute threads beyond that only slow "
                          "the kernels down (use at most %ld)",
                          nproc, nproc == 1 ? "" : "s", nproc),
               "--data", good, "--threads", "100000", NULL);
  char *many = rt_xprintf("%ld", nproc + 1);
  Result r = run_trainer("--data", good, "--threads", many, NULL);
  CHECK(r.status == 1 && strstr(r.err, "online CPU"), "--threads %s: exit %d", many, r.status);
  free_result(&r);
  free(many);

  /* --save-to that cannot be written: at the start, before step 1 */
  char *file = path_of("a_file");
  write_bytes(file, "x", 1);
  EXPECT_ERROR(rt_xprintf("--save-to: '%s' is not a directory", file), "--data", good, "--save-to", file, NULL);
  char *under = rt_xprintf("%s/ck", file);
  EXPECT_ERROR(rt_xprintf("--save-to: cannot create directory '%s': Not a directory", under), "--data", good,
               "--save-to", under, NULL);
  EXPECT_ERROR(rt_xstrdup("--save-to: cannot create directory '/proc/shardc-ck': No such file or directory"), "--data",
               good, "--save-to", "/proc/shardc-ck", NULL);
  free(under), free(file);

  /* --save-to '': no checkpoint, not even the recipe's; --resume auto needs --save-to and starts
   * fresh when it holds nothing yet, then resumes from its newest */
  char *rdir = path_of("recipe_ck");
  prog.recipe.ckpt_dir = rdir;
  r = run_trainer("--data", good, "--steps", "2", "--save-to", "", NULL);
  expect_ok(&r, "--save-to ''");
  CHECK(!exists(rdir), "--save-to '' still wrote the recipe's checkpoint directory");
  free_result(&r);
  prog.recipe.ckpt_dir = NULL;
  free(rdir);
  EXPECT_ERROR(rt_xstrdup("--resume auto resumes from --save-to's newest checkpoint: give --save-to DIR"), "--data",
               good, "--resume", "auto", NULL);
  char *ad = path_of("auto_ck");
  r = run_trainer("--data", good, "--steps", "6", "--stop-at", "3", "--save-to", ad, "--resume", "auto", NULL);
  expect_ok(&r, "--resume auto, nothing yet");
  CHECK(strstr(r.out, "--resume auto: no checkpoint in ") && strstr(r.out, "step 1/6 | loss"), "fresh start:\n%s",
        r.out);
  free_result(&r);
  r = run_trainer("--data", good, "--steps", "6", "--save-to", ad, "--resume", "auto", NULL);
  expect_ok(&r, "--resume auto, from step 3");
  CHECK(strstr(r.out, "--resume auto: resuming from ") && strstr(r.out, "step 4/6 | loss"), "auto resume:\n%s", r.out);
  free_result(&r);
  free(ad);

  test_offsets(good);
  test_resume_inf(good);
  test_diverge(good);
  free(good);
}
