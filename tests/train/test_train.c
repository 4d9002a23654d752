/* tests/train/test_train.c — the trainer (runtime/train/) on a hand-made program.
 *
 * The program is a bigram language model written here in plain C over the offsets of one
 * allocation, like generated code: logits[b, t] = wte[tokens[b, t]] + blocks.bias[0] + blocks.bias[1]
 * ("blocks.bias" is stacked: 2 layers), mean softmax cross-entropy, AdamW with bias correction from
 * the "step" input and the "lr" input. It has step, eval and logits functions, a loss and a
 * grad_norm result, so it exercises the whole loop. Each subcommand is one CTest test:
 *
 *   data     shard formats (uint16, uint32), raw bytes, globs, hold-out, order, dp slices
 *   json     the JSON reader
 *   lr       logged learning rates == ir_lr_at() for constant / linear / cosine with warmup
 *   errors   malformed files and flags: exact message, exit status 1
 *   log      JSON-lines fields per step and per validation
 *   resume   20 steps == 10 + save + resume 10 (bit-identical checkpoints), temp dirs, --keep
 *   init     --init-from, --steps 0, sampling determinism
 *   python   the checkpoint read by Python's safetensors, and a Python-written file read by us
 *            (exit 77 = skipped when python3 has no safetensors/numpy)
 *   trainer  runs the trainer on the byte-level program with the remaining arguments
 *
 * rt_train_main runs in a forked child with stdout/stderr sent to files, so its exit status and
 * messages can be checked. The program and the helpers are in harness.c; resume, init and python
 * in test_ckpt.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "module.h"

/* ---- data ---- */

static void test_data(void) {
  RtDataOpts o = {.T = SEQ, .vocab = 64, .byte_level = 0};
  uint32_t *t = token_stream(1000, 64, 1);
  char *u16 = path_of("a_u16.bin"), *u32 = path_of("b_u32.bin");
  write_shard(u16, 20240520, 1, 2, t, 400, -1);
  write_shard(u32, 20240801, 7, 4, t + 400, 600, -1);

  /* one uint16 shard: windows of T+1 at stride T, in file order without shuffle */
  RtData d;
  rt_data_open(&d, "--data", u16, &o);
  CHECK(d.nfiles == 1 && d.ntok == 400 && d.nwin == (400 - 1) / SEQ, "u16: %lld tokens %lld windows", (long long)d.ntok,
        (long long)d.nwin);
  int32_t seq[SEQ + 1];
  rt_data_sequence(&d, 3, seq);
  for (int i = 0; i <= SEQ; i++)
    CHECK(seq[i] == (int32_t)t[3 * SEQ + i], "u16 window 3 token %d", i);
  rt_data_free(&d);

  /* a glob over both (sorted: a_u16 then b_u32) */
  char *glob = path_of("*_u*.bin");
  rt_data_open(&d, "--data", glob, &o);
  CHECK(d.nfiles == 2 && d.ntok == 1000, "glob: %d files %lld tokens", d.nfiles, (long long)d.ntok);
  int64_t w0 = (400 - 1) / SEQ;
  CHECK(d.nwin == w0 + (600 - 1) / SEQ, "glob windows %lld", (long long)d.nwin);
  rt_data_sequence(&d, w0 + 2, seq); /* third window of the uint32 file */
  for (int i = 0; i <= SEQ; i++)
    CHECK(seq[i] == (int32_t)t[400 + 2 * SEQ + i], "u32 window 2 token %d", i);

  /* shuffled: each epoch is a permutation of all windows; deterministic per seed, other per epoch */
  d.shuffle = 1;
  d.seed = 7;
  int64_t W = d.nwin;
  int *seen = rt_xcalloc((size_t)W, sizeof *seen);
  int32_t *first_e0 = rt_xmalloc((size_t)W * sizeof *first_e0), *first_e1 = rt_xmalloc((size_t)W * sizeof *first_e1);
  for (int64_t g = 0; g < W; g++) {
    rt_data_sequence(&d, g, seq);
    first_e0[g] = seq[0];
    /* locate the window by its content: the stream has distinct (file, start) -> first 3 tokens mostly; count starts */
  }
  for (int64_t g = 0; g < W; g++) {
    rt_data_sequence(&d, W + g, seq);
    first_e1[g] = seq[0];
  }
  int differ = 0;
  for (int64_t g = 0; g < W; g++)
    differ += first_e0[g] != first_e1[g];
  CHECK(differ > 0, "epoch 1 has the order of epoch 0");
  /* permutation: d.perm holds epoch 1's order; check it is one */
  for (int64_t g = 0; g < W; g++)
    seen[d.perm[g]]++;
  for (int64_t g = 0; g < W; g++)
    CHECK(seen[g] == 1, "window %lld appears %d times in an epoch", (long long)g, seen[g]);
  /* same seed, same order; dp rank 1 of a batch reads the sequences after rank 0's */
  RtData d2;
  rt_data_open(&d2, "--data", glob, &o);
  d2.shuffle = 1;
  d2.seed = 7;
  int32_t in[MB * SEQ], tg[MB * SEQ];
  rt_data_batch(&d2, 0, 2, 1, in, tg); /* rank 1, B = 2: sequences 2, 3 */
  rt_data_sequence(&d, 2, seq);
  CHECK(memcmp(in, seq, SEQ * 4) == 0 && memcmp(tg, seq + 1, SEQ * 4) == 0, "dp rank 1 reads sequence 2");
  rt_data_sequence(&d, 0, seq);
  CHECK(seq[0] == first_e0[0], "order not deterministic");
  d2.seed = 8;
  d2.perm_epoch = -1;
  int32_t other[SEQ + 1];
  int diff_seed = 0;
  for (int64_t g = 0; g < 8; g++) {
    rt_data_sequence(&d, g, seq);
    rt_data_sequence(&d2, g, other);
    diff_seed += memcmp(seq, other, sizeof seq) != 0;
  }
  CHECK(diff_seed > 0, "another seed gives the same order");
  free(seen);
  free(first_e0);
  free(first_e1);
  rt_data_free(&d2);

  /* hold-out: the last 10% of the last file becomes validation */
  RtData val;
  CHECK(rt_data_hold_out(&d, &val, 0.1, &o) == 1, "no hold-out");
  CHECK(val.ntok == 60 && d.ntok == 940, "hold-out: val %lld train %lld tokens", (long long)val.ntok,
        (long long)d.ntok);
  rt_data_sequence(&val, 0, seq);
  for (int i = 0; i <= SEQ; i++)
    CHECK(seq[i] == (int32_t)t[940 + i], "val token %d", i);
  rt_data_free(&val);
  rt_data_free(&d);

  /* raw bytes for a byte-level model */
  RtDataOpts ob = {.T = SEQ, .vocab = 256, .byte_level = 1};
  char *txt = path_of("text.txt");
  const char *hello = "hello, world. hello, shard.\n";
  write_bytes(txt, hello, strlen(hello));
  rt_data_open(&d, "--data", txt, &ob);
  CHECK(d.files[0].elem == 1 && d.ntok == (int64_t)strlen(hello), "raw bytes: elem %d, %lld tokens", d.files[0].elem,
        (long long)d.ntok);
  rt_data_sequence(&d, 1, seq);
  for (int i = 0; i <= SEQ; i++)
    CHECK(seq[i] == (unsigned char)hello[SEQ + i], "byte %d", i);
  rt_data_free(&d);
  free(t);
  free(u16);
  free(u32);
  free(glob);
  free(txt);
}

/* ---- json ---- */

static void test_json(void) {
  char err[128];
  const char *text =
      "{\"a\": [1, -2.5e1, true, null], \"b\\u00e9\\n\": {\"c\": \"x\\\"y\"}, \"big\": 9007199254740993}";
  RtJson *j = rt_json_parse(text, strlen(text), err, sizeof err);
  CHECK(j && j->kind == RT_JSON_OBJ && j->n == 3, "parse: %s", j ? "" : err);
  if (j) {
    const RtJson *a = rt_json_get(j, "a");
    CHECK(a && a->kind == RT_JSON_ARR && a->n == 4 && a->items[0]->is_int && a->items[0]->inum == 1 &&
              a->items[1]->num == -25 && !a->items[1]->is_int && a->items[2]->kind == RT_JSON_BOOL &&
              a->items[3]->kind == RT_JSON_NULL,
          "array");
    const RtJson *b = rt_json_get(j, "b\xc3\xa9\n");
    CHECK(b && strcmp(rt_json_get(b, "c")->str, "x\"y") == 0, "escapes");
    CHECK(rt_json_get(j, "big")->inum == 9007199254740993LL, "int64 exact");
  }
  rt_json_free(j);
  const char *bad[] = {"{\"a\" 1}", "[1, 2", "{\"a\": 1} x", "\"abc", "{\"a\": tru}", ""};
  for (int i = 0; i < 6; i++) {
    RtJson *b = rt_json_parse(bad[i], strlen(bad[i]), err, sizeof err);
    CHECK(!b, "accepted malformed '%s'", bad[i]);
    rt_json_free(b);
  }
  j = rt_json_parse("{\"a\" 1}", 7, err, sizeof err);
  CHECK(strcmp(err, "at byte 5: expected ':'") == 0, "message '%s'", err);
}

/* ---- lr schedule ---- */

static char *make_token_data(const char *name, int64_t n) {
  char *p = path_of(name);
  uint32_t *t = token_stream(n, 64, 3);
  write_shard(p, 20240520, 1, 2, t, n, -1);
  free(t);
  return p;
}

static void test_lr(void) {
  char *data = make_token_data("lr.bin", 2000), *log = path_of("lr.jsonl");
  const int sched[3] = {RT_LR_CONSTANT, RT_LR_LINEAR, RT_LR_COSINE};
  const LrScheduleKind ir_sched[3] = {LR_CONSTANT, LR_LINEAR, LR_COSINE};
  for (int k = 0; k < 3; k++) {
    make_program(64, sched[k], 3, 12);
    Result r = run_trainer("--data", data, "--log", log, NULL);
    expect_ok(&r, "lr run");
    free_result(&r);
    double lr[12], loss[12];
    int vl;
    int n = read_log(log, lr, loss, 12, &vl);
    CHECK(n == 12, "schedule %d: %d step lines", k, n);
    Recipe rc;
    memset(&rc, 0, sizeof rc);
    rc.lr = 1e-2;
    rc.min_lr = 1e-3;
    rc.warmup = 3;
    rc.steps = 12;
    rc.lr_schedule = ir_sched[k];
    for (int s = 0; s < 12 && s < n; s++) {
      double want = ir_lr_at(&rc, s);
      CHECK(fabs(lr[s] - want) <= 1e-8 * want, "schedule %d step %d: lr %.9g, ir_lr_at %.9g", k, s + 1, lr[s], want);
    }
  }
  free(data);
  free(log);
}

/* ---- errors ---- */

static void test_errors(void) {
  make_program(64, RT_LR_COSINE, 2, 10);
  char *good = make_token_data("good.bin", 500);
  uint32_t *t = token_stream(300, 64, 1);
  char *p;

  p = path_of("missing.bin");
  EXPECT_ERROR(rt_xprintf("--data: cannot open '%s': No such file or directory", p), "--data", p, NULL);
  free(p);

  p = path_of("nomatch*.bin");
  EXPECT_ERROR(rt_xprintf("--data: no file matches '%s'", p), "--data", p, NULL);
  free(p);

  p = path_of("magic.bin");
  write_shard(p, 12345, 1, 2, t, 300, -1);
  EXPECT_ERROR(rt_xprintf("--data: '%s' is not a token shard: magic 12345 (expected 20240520 for uint16 or 20240801 "
                          "for uint32 tokens)",
                          p),
               "--data", p, NULL);
  free(p);

  p = path_of("short.bin");
  int32_t h[3] = {20240520, 1, 10};
  write_bytes(p, h, sizeof h);
  EXPECT_ERROR(rt_xprintf("--data: '%s': token shard is 12 bytes, shorter than its 1024-byte header", p), "--data", p,
               NULL);
  free(p);

  p = path_of("version.bin");
  write_shard(p, 20240520, 3, 2, t, 300, -1);
  EXPECT_ERROR(rt_xprintf("--data: '%s': unsupported shard version 3 for magic 20240520 (expected 1)", p), "--data", p,
               NULL);
  free(p);

  p = path_of("count.bin");
  write_shard(p, 20240801, 7, 4, t, 300, 301);
  EXPECT_ERROR(
      rt_xprintf("--data: '%s': header says 301 tokens (2228 bytes with the header) but the file has 2224 bytes", p),
      "--data", p, NULL);
  free(p);

  p = path_of("vocab.bin");
  t[123] = 64;
  write_shard(p, 20240520, 1, 2, t, 300, -1);
  EXPECT_ERROR(rt_xprintf("--val: '%s': token 64 at position 123 is not below the model's vocabulary size 64", p),
               "--data", good, "--val", p, NULL);
  t[123] = 1;
  free(p);

  p = path_of("tiny.bin");
  write_shard(p, 20240520, 1, 2, t, 5, -1);
  EXPECT_ERROR(rt_xprintf("--data: '%s' holds 5 tokens in 1 file(s); each sequence needs 9 consecutive tokens "
                          "(sequence length + 1) within one file",
                          p),
               "--data", p, NULL);
  free(p);

  { /* a warmup (2) as long as the schedule: the header says the lr only rises, and to what */
    Result rw = run_trainer("--data", good, "--steps", "2", "--save-to", "", NULL);
    expect_ok(&rw, "--steps 2 under warmup 2");
    CHECK(strstr(rw.out, "(cosine, warmup 2, not shorter than the 2 steps: the lr only rises, to 0.01 at step 2)"),
          "header:\n%s", rw.out);
    free_result(&rw);
  }
  p = path_of("nowhere.safetensors");
  EXPECT_ERROR(rt_xprintf("--init-from: cannot open '%s': No such file or directory", p), "--data", good, "--init-from",
               p, NULL);
  free(p);
  p = path_of("fewer.bin"); /* 3 windows of 8+1 tokens, a batch of 4: every step would repeat one */
  write_shard(p, 20240520, 1, 2, t, 25, -1);
  EXPECT_ERROR(rt_xprintf("--data: '%s' holds 3 sequence(s) of 8+1 tokens, fewer than one global batch of 4: every "
                          "step would repeat sequences; give more data",
                          p),
               "--data", p, NULL);
  { /* a run that trains no step reads no batch: not refused */
    Result rf = run_trainer("--data", p, "--steps", "0", "--save-to", "", NULL);
    expect_ok(&rf, "--steps 0 on a corpus smaller than a batch");
    free_result(&rf);
  }
  free(p);

  EXPECT_ERROR(
      rt_xstrdup("--batch 8: this program was compiled for a batch of 4 sequences; recompile with another batch to "
                 "change it"),
      "--data", good, "--batch", "8", NULL);
  EXPECT_ERROR(rt_xstrdup("--steps: 'ten' is not a non-negative integer"), "--data", good, "--steps", "ten", NULL);
  EXPECT_ERROR(rt_xstrdup("unknown flag '--stesp': did you mean '--steps'? (see --help)"), "--data", good, "--stesp",
               "10", NULL);
  EXPECT_ERROR(rt_xstrdup("unknown flag '--fast' (see --help)"), "--data", good, "--fast", NULL);
  EXPECT_ERROR(rt_xstrdup("unknown flag '--save': did you mean '--save-to'? (see --help)"), "--data", good, "--save",
               "ck", NULL);
  EXPECT_ERROR(rt_xstrdup("--stop-at 12 is past the schedule's last step (10, --steps): the run would end there; raise "
                          "--steps or lower --stop-at"),
               "--data", good, "--steps", "10", "--stop-at", "12", NULL);
  EXPECT_ERROR(rt_xstrdup("--data needs a value (PATH|GLOB)"), "--data", NULL);
  EXPECT_ERROR(rt_xstrdup("no training data: pass --data PATH|GLOB"), NULL);
  { /* --ckpt-every with nowhere to write: a warning (a script's shared flags may turn saving off), not silence */
    Result rc = run_trainer("--data", good, "--steps", "2", "--ckpt-every", "1", "--save-to", "", NULL);
    expect_ok(&rc, "--ckpt-every with --save-to ''");
    CHECK(strstr(rc.err, "warning: --ckpt-every 1 writes nothing: no checkpoint directory") != NULL,
          "--ckpt-every without a directory:\n%s", rc.err);
    free_result(&rc);
  }
  { /* the same for --keep without a directory, --temperature / --prompt without --sample, --dump-to
       without --dump-steps, --ckpt-format sharded on one process (each was ignored without a word) */
    Result rc = run_trainer("--data", good, "--steps", "1", "--save-to", "", "--keep", "2", "--temperature", "0.5",
                            "--dump-to", "nodump", "--ckpt-format", "sharded", NULL);
    expect_ok(&rc, "idle flags");
    CHECK(strstr(rc.err, "warning: --keep 2 keeps nothing: no checkpoint directory") &&
              strstr(rc.err, "warning: --temperature shapes the sampling after training, which --sample N asks for") &&
              strstr(rc.err, "warning: --dump-to nodump writes nothing: --dump-steps N") &&
              strstr(rc.err, "warning: --ckpt-format sharded: one process writes whole tensors"),
          "idle flags:\n%s", rc.err);
    free_result(&rc);
  }
  { /* --val-batches above the validation data's batches was capped without a word: a note with the numbers
       (good.bin's held-out tail: 6 sequences of 8+1 -> 2 batches of 4, the second completed from the start) */
    Result rc = run_trainer("--data", good, "--steps", "1", "--val-batches", "50", NULL);
    expect_ok(&rc, "--val-batches 50");
    CHECK(strstr(rc.err, "note: --val-batches 50: the validation data holds 2 batches of 4 sequences (6 sequences); "
                         "each validation reads those\n") != NULL,
          "--val-batches above the data's:\n%s", rc.err);
    free_result(&rc);
    rc = run_trainer("--data", good, "--steps", "1", "--val-batches", "2", NULL); /* exactly what it holds: nothing to say */
    expect_ok(&rc, "--val-batches 2");
    CHECK(strstr(rc.err, "--val-batches") == NULL, "--val-batches 2 said:\n%s", rc.err);
    free_result(&rc);
  }
  { /* --eval-every / --val-batches with nothing to validate: a warning, as the other idle flags */
    void (*eval)(char *, RtCtx *) = prog.eval;
    prog.eval = NULL;
    Result rc = run_trainer("--data", good, "--steps", "1", "--eval-every", "1", NULL);
    expect_ok(&rc, "--eval-every without an eval function");
    CHECK(strstr(rc.err, "warning: --eval-every 1 validates nothing: this run has no validation data (the program has "
                         "no eval function)") != NULL,
          "--eval-every without validation:\n%s", rc.err);
    free_result(&rc);
    prog.eval = eval;
  }
  setenv("SHARDRT_FAULT_NAN", "3:w:1abc", 1); /* (the rank's trailing characters were ignored) */
  EXPECT_ERROR(rt_xstrdup("SHARDRT_FAULT_NAN='3:w:1abc': expected STEP:TENSOR[:RANK]"), "--data", good, "--steps", "3",
               NULL);
  unsetenv("SHARDRT_FAULT_NAN");
  setenv("SHARDRT_FAULT_KILL", "3:-2", 1);
  EXPECT_ERROR(rt_xstrdup("SHARDRT_FAULT_KILL='3:-2': expected STEP[:RANK]"), "--data", good, "--steps", "3", NULL);
  setenv("SHARDRT_FAULT_KILL", "0", 1);
  EXPECT_ERROR(rt_xstrdup("SHARDRT_FAULT_KILL='0': expected STEP[:RANK]"), "--data", good, "--steps", "3", NULL);
  unsetenv("SHARDRT_FAULT_KILL");
  { /* SHARDRT_DEVICE on a CPU trainer selects nothing: said (was silent) */
    setenv("SHARDRT_DEVICE", "emu", 1);
    Result rc = run_trainer("--data", good, "--steps", "1", NULL);
    unsetenv("SHARDRT_DEVICE");
    expect_ok(&rc, "SHARDRT_DEVICE on a CPU trainer");
    CHECK(strstr(rc.err, "warning: SHARDRT_DEVICE=emu selects a GPU trainer's device; this trainer runs on the CPU") !=
              NULL,
          "SHARDRT_DEVICE on a CPU trainer:\n%s", rc.err);
    free_result(&rc);
  }
  { /* a flag given twice with two values: the last is used, as before, and now said (was silent) */
    Result rc = run_trainer("--data", good, "--steps", "1", "--seed", "3", "--steps", "2", "--seed", "3", NULL);
    expect_ok(&rc, "--steps twice");
    CHECK(strstr(rc.err, "warning: --steps given twice ('1', then '2'): the last is used\n") != NULL &&
              strstr(rc.err, "--seed given twice") == NULL && strstr(rc.out, "steps 1..2 of 2") != NULL,
          "--steps twice:\nstdout:\n%s\nstderr:\n%s", rc.out, rc.err);
    free_result(&rc);
  }
  /* an empty prompt: the sampler read the logits of the position before the window */
  EXPECT_ERROR(rt_xstrdup("--prompt '': sampling continues a prompt of at least one byte; leave --prompt out to start "
                          "from the data"),
               "--data", good, "--sample", "3", "--prompt", "", NULL);
  { /* --stop-at 0: no step, as --steps 0 (0 was read as not given: the whole schedule trained) */
    Result rc = run_trainer("--data", good, "--steps", "2", "--stop-at", "0", NULL);
    expect_ok(&rc, "--stop-at 0");
    CHECK(strstr(rc.out, "nothing to train: at step 0 of 0") != NULL, "--stop-at 0:\n%s", rc.out);
    free_result(&rc);
  }
  /* a prompt is bytes: on a token model (this one's vocabulary is not bytes) it was left unread */
  EXPECT_ERROR(rt_xstrdup("--prompt: a prompt is read as bytes, which this model's tokens are not (vocabulary 64); "
                          "leave it out to sample from the data's start"),
               "--data", good, "--sample", "3", "--prompt", "ab", NULL);
  /* the recipe's data, relative to where the trainer runs: the error says where the path came from */
  prog.recipe.data = "/nonexistent/recipe.bin";
  EXPECT_ERROR(rt_xstrdup("data (the model's train block; --data overrides): cannot open '/nonexistent/recipe.bin': No "
                          "such file or directory"),
               NULL);
  prog.recipe.data = NULL;

  p = path_of("nockpt");
  mkdir(p, 0755);
  EXPECT_ERROR(rt_xprintf("--resume: '%s' holds no checkpoint (no step_* directory with a model.safetensors)", p),
               "--data", good, "--resume", p, NULL);
  free(p);

  /* malformed safetensors for --init-from */
  p = path_of("bad.safetensors");
  write_bytes(p, "\x10\x00\x00\x00\x00\x00\x00\x00{}", 10);
  EXPECT_ERROR(rt_xprintf("'%s' is not a safetensors file: header length 16 does not fit the file (10 bytes)", p),
               "--data", good, "--init-from", p, NULL);
  const char hdr[] = "{\"wte\": {\"dtype\": \"F32\", \"shape\": [64, 64], \"data_offsets\": [0, 16384]}}";
  unsigned char *b = rt_xcalloc(8 + sizeof hdr - 1 + 16384, 1);
  uint64_t hl = sizeof hdr - 1;
  memcpy(b, &hl, 8);
  memcpy(b + 8, hdr, hl);
  write_bytes(p, b, 8 + hl + 16384);
  EXPECT_ERROR(rt_xprintf("'%s': missing tensor 'blocks.0.bias'", p), "--data", good, "--init-from", p, NULL);
  memcpy(b + 8, "{\"wte\": {\"dtype\": \"F32\", \"shape\": [64, 63], \"data_offsets\": [0, 16128]}}", hl);
  write_bytes(p, b, 8 + hl + 16128);
  EXPECT_ERROR(rt_xprintf("'%s': tensor 'wte' has shape [64, 63], the model needs [64, 64]", p), "--data", good,
               "--init-from", p, NULL);
  memcpy(b + 8, "{\"wte\": {\"dtype\": \"F32\", \"shape\": [64, 64], \"data_offsets\": [0, 16384]]}", hl);
  write_bytes(p, b, 8 + hl + 16384);
  EXPECT_ERROR(rt_xprintf("'%s': malformed safetensors header: at byte 70: expected ',' or '}'", p), "--data", good,
               "--init-from", p, NULL);
  free(b);
  free(p);

  /* --sample a program cannot serve (no logits: its loss is not a cross-entropy) is refused at the
   * start, not after the training */
  int64_t lo = prog.logits_offset;
  prog.logits_offset = -1;
  Result rs = run_trainer("--data", good, "--steps", "3", "--sample", "4", "--save-to", "", NULL);
  CHECK(rs.status == 1 && strstr(rs.err, "error: --sample: this program has no logits to sample from") != NULL,
        "--sample without logits: status %d, stderr:\n%s", rs.status, rs.err);
  CHECK(strstr(rs.out, "step ") == NULL, "--sample without logits trained first:\n%s", rs.out);
  free_result(&rs);
  prog.logits_offset = lo;

  /* a byte-level model reads any file as bytes; a text file is not an error there */
  make_program(256, RT_LR_COSINE, 2, 3);
  p = path_of("words.txt");
  char *txt = text_corpus(2000);
  write_bytes(p, txt, 2000);
  Result r = run_trainer("--data", p, NULL);
  expect_ok(&r, "byte-level on text");
  free_result(&r);
  free(txt);
  free(p);
  free(good);
  free(t);
}

/* ---- log ---- */

static void test_log(void) {
  make_program(64, RT_LR_COSINE, 2, 10);
  prog.recipe.val = "/nonexistent/val.bin"; /* the recipe's val goes with the recipe's data: --data drops it */
  char *data = make_token_data("log.bin", 3000), *log = path_of("log.jsonl");
  Result r = run_trainer("--data", data, "--log", log, "--eval-every", "4", NULL);
  expect_ok(&r, "log run");
  double lr[10], loss[10];
  int vl;
  int n = read_log(log, lr, loss, 10, &vl);
  CHECK(n == 10, "%d step lines", n);
  CHECK(vl == 3, "%d validation lines (want steps 4, 8 and the end)", vl); /* 4, 8, 10 */
  CHECK(loss[9] < loss[0], "loss did not fall: %g -> %g", loss[0], loss[9]);
  /* the progress lines */
  CHECK(strstr(r.out, "step  1/10 | loss ") != NULL, "no progress line in:\n%s", r.out);
  CHECK(strstr(r.out, "tok/s | MFU ") && strstr(r.out, "| ETA "), "progress fields");
  CHECK(strstr(r.out, "step  4/10 | val loss ") != NULL, "no validation line");
  CHECK(strstr(r.out, "memory at start: planned ") && strstr(r.out, "memory at end: planned "), "memory report");
  CHECK(strstr(r.out, "validation: the last 10% of '") != NULL, "hold-out not reported:\n%s", r.out);
  free_result(&r);
  /* --help under accumulation: the micro-batch is one micro-step's rows, not the step's */
  prog.micro_batch = 1, prog.accum = MB, prog.global_batch = MB;
  r = run_trainer("--help", NULL);
  expect_ok(&r, "--help");
  CHECK(strstr(r.out, "micro-batch 1 x 8 tokens") != NULL, "--help's micro-batch:\n%s", r.out);
  CHECK(strstr(r.out, "global batch 4 sequences per optimizer step (4 accumulation micro-step(s))") != NULL,
        "--help's global batch:\n%s", r.out);
  /* the recipe's defaults, the checkpoint directory a plain run writes into among them */
  CHECK(strstr(r.out, "Without these flags (the model's train block): --steps 10, --seed ") &&
            strstr(r.out, ", --val '/nonexistent/val.bin'; no checkpoints unless --save-to DIR.\n"),
        "--help's defaults:\n%s", r.out);
  prog.recipe.ckpt_dir = "ck/bigram", prog.recipe.ckpt_every = 50, prog.recipe.ckpt_keep = 2;
  free_result(&r);
  r = run_trainer("--help", NULL);
  CHECK(strstr(r.out, ", --save-to 'ck/bigram' --ckpt-every 50 --keep 2.\n"), "--help's checkpoint defaults:\n%s", r.out);
  prog.recipe.ckpt_dir = NULL, prog.recipe.ckpt_every = 0, prog.recipe.ckpt_keep = 0;
  free_result(&r);
  r = run_trainer("--data", data, "--steps", "1", "--save-to", "", NULL);
  expect_ok(&r, "accumulation run");
  CHECK(strstr(r.out, "batch 4 x 8 tokens (1 data-parallel rank(s) x 4 accumulation micro-steps x 1)") != NULL,
        "the start line under accumulation:\n%s", r.out);
  free_result(&r);
  prog.micro_batch = 0, prog.accum = 0, prog.global_batch = 0;
  free(data);
  free(log);
}

/* ---- main ---- */

static void remove_tmp(void) {
  char *cmd = rt_xprintf("rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  free(cmd);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_train data|json|lr|errors|log|resume|init|python|robust|ckpt_fuzz|trainer [args]\n");
    return 2;
  }
  if (!strcmp(argv[1], "trainer")) {
    make_program(256, RT_LR_COSINE, 10, 200);
    argv[1] = argv[0];
    return rt_train_main(argc - 1, argv + 1, &prog);
  }
  setenv("SHARDRT_PEAK_FLOPS", "1e11", 1); /* MFU against a fixed peak: no measurement per run */
  snprintf(tmpdir, sizeof tmpdir, "/tmp/test_train_%s_XXXXXX", argv[1]);
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 2;
  }
  if (!strcmp(argv[1], "data"))
    test_data();
  else if (!strcmp(argv[1], "json"))
    test_json();
  else if (!strcmp(argv[1], "lr"))
    test_lr();
  else if (!strcmp(argv[1], "errors"))
    test_errors();
  else if (!strcmp(argv[1], "log"))
    test_log();
  else if (!strcmp(argv[1], "resume"))
    test_resume();
  else if (!strcmp(argv[1], "init"))
    test_init();
  else if (!strcmp(argv[1], "python"))
    test_python();
  else if (!strcmp(argv[1], "robust"))
    test_robust();
  else if (!strcmp(argv[1], "ckpt_fuzz"))
    test_ckpt_fuzz();
  else {
    fprintf(stderr, "unknown test '%s'\n", argv[1]);
    return 2;
  }
  if (failures) {
    fprintf(stderr, "%d check(s) failed; files kept in %s\n", failures, tmpdir);
    return 1;
  }
  remove_tmp();
  printf("ok\n");
  return 0;
}
