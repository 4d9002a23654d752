/* tests/train/test_ckpt.c — checkpoints: bit-identical resume, --keep, --init-from, --steps 0,
 * sampling determinism, and files read and written by Python's safetensors (test_train.c runs
 * them: resume, init, python). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "rng.h"

/* ---- resume ---- */

static int same_file(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  int same = fa && fb;
  while (same) {
    int ca = fgetc(fa), cb = fgetc(fb);
    if (ca != cb) same = 0;
    if (ca == EOF || cb == EOF) break;
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return same;
}

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

void test_resume(void) {
  make_program(256, RT_LR_COSINE, 3, 20);
  char *data = path_of("corpus.txt"), *txt = text_corpus(600); /* 67 training windows: 20 steps x 4 cross an epoch */
  write_bytes(data, txt, 600);
  free(txt);
  char *A = path_of("ckA"), *B = path_of("ckB"), *C = path_of("ckC");
  char *logA = path_of("A.jsonl"), *logC = path_of("C.jsonl");
  Result r = run_trainer("--data", data, "--save-to", A, "--log", logA, "--eval-every", "5", NULL);
  expect_ok(&r, "run A");
  char *vA = line_after(r.out, "done: ");
  free_result(&r);

  r = run_trainer("--data", data, "--stop-at", "10", "--save-to", B, NULL);
  expect_ok(&r, "run B");
  free_result(&r);
  char *b10 = rt_xprintf("%s/step_00000010/model.safetensors", B);
  CHECK(exists(b10), "no %s", b10);

  /* leftovers of a crash mid-write and a stray directory must not disturb resume */
  char *junk = rt_xprintf("%s/.tmp-step_00000015-4242", B), *junkf = rt_xprintf("%s/model.safetensors", junk);
  mkdir(junk, 0755);
  write_bytes(junkf, "garbage", 7);
  char *stray = rt_xprintf("%s/step_00000099", B);
  mkdir(stray, 0755);

  r = run_trainer("--data", data, "--resume", B, "--save-to", C, "--log", logC, "--eval-every", "5", NULL);
  expect_ok(&r, "run C (resume)");
  CHECK(strstr(r.out, "resumed from ") && strstr(r.out, "step_00000010: step 10, data position 40"), "resume line:\n%s",
        r.out);
  CHECK(strstr(r.out, "step 11/20 | loss") != NULL, "resume does not start at step 11:\n%s", r.out);
  char *vC = line_after(r.out, "done: ");
  free_result(&r);

  /* identical final weights and optimizer state, byte for byte (header metadata included) */
  const char *files[] = {"model.safetensors", "optimizer.safetensors", "model.safetensors.index.json"};
  for (int i = 0; i < 3; i++) {
    char *a = rt_xprintf("%s/step_00000020/%s", A, files[i]), *c = rt_xprintf("%s/step_00000020/%s", C, files[i]);
    CHECK(exists(a) && same_file(a, c), "%s differs between the uninterrupted and the resumed run", files[i]);
    free(a);
    free(c);
  }
  /* identical loss trajectory over steps 11..20 */
  double lrA[20], lossA[20], lrC[20], lossC[20];
  for (int i = 0; i < 20; i++)
    lossA[i] = lossC[i] = NAN;
  int vl;
  read_log(logA, lrA, lossA, 20, &vl);
  read_log(logC, lrC, lossC, 20, &vl);
  for (int i = 10; i < 20; i++)
    CHECK(lossA[i] == lossC[i] && lrA[i] == lrC[i], "step %d: loss %.9g vs %.9g", i + 1, lossA[i], lossC[i]);
  /* "done: N step(s) in ...; loss L, val loss V": compare from "loss" on */
  const char *la = strstr(vA, "; loss"), *lc = strstr(vC, "; loss");
  CHECK(la && lc && strcmp(la, lc) == 0, "final loss / val loss: '%s' vs '%s'", vA, vC);

  /* the next save removed the stale temp dir; --keep 2 keeps the newest two */
  char *D = path_of("ckD");
  r = run_trainer("--data", data, "--save-to", D, "--ckpt-every", "5", "--keep", "2", "--stop-at", "15", NULL);
  expect_ok(&r, "run D");
  free_result(&r);
  char *d5 = rt_xprintf("%s/step_00000005", D), *d10 = rt_xprintf("%s/step_00000010", D),
       *d15 = rt_xprintf("%s/step_00000015", D);
  CHECK(!exists(d5) && exists(d10) && exists(d15), "--keep 2 left the wrong checkpoints");
  /* D's step 10 was written in the background while steps 11..15 ran: the same bytes as B's, which
   * ended at step 10 */
  for (int i = 0; i < 2; i++) {
    const char *f = i ? "optimizer.safetensors" : "model.safetensors";
    char *a = rt_xprintf("%s/%s", d10, f), *b = rt_xprintf("%s/step_00000010/%s", B, f);
    CHECK(exists(a) && same_file(a, b), "%s: the checkpoint written during training differs from the final one", a);
    free(a);
    free(b);
  }
  r = run_trainer("--data", data, "--resume", B, "--save-to", B, "--stop-at", "12", NULL);
  expect_ok(&r, "run into B");
  free_result(&r);
  CHECK(!exists(junk), "stale temp directory %s not removed by the next save", junk);
  char *b12 = rt_xprintf("%s/step_00000012/model.safetensors", B);
  CHECK(exists(b12), "no %s", b12);

  /* a schedule that ends before the checkpoint's step trains nothing: refused (it succeeded, "at step
   * 12 of 5"); a DIR/ names its checkpoints without "//"; another --steps than the checkpoint's: a note */
  char *Bs = rt_xprintf("%s/", B), *E = path_of("ckE"), *Es = rt_xprintf("%s//", E);
  EXPECT_ERROR(rt_xprintf("--steps 5 is before the checkpoint's step 12 ('%s/step_00000012'): the run would train "
                          "nothing; give --steps above 12, or leave --steps out to finish the checkpoint's schedule (20 "
                          "steps)",
                          B),
               "--data", data, "--resume", Bs, "--steps", "5", NULL);
  EXPECT_ERROR(rt_xprintf("--stop-at 11 is before the checkpoint's step 12 ('%s/step_00000012'): the run would train "
                          "nothing",
                          B),
               "--data", data, "--resume", B, "--stop-at", "11", NULL);
  r = run_trainer("--data", data, "--resume", Bs, "--steps", "30", "--stop-at", "13", "--save-to", Es, NULL);
  expect_ok(&r, "resume with a longer schedule");
  CHECK(strstr(r.err, "note: --steps 30: the checkpoint was trained on a schedule of 20 steps; steps 13..30 follow "
                      "the learning rate of a 30-step schedule") != NULL,
        "no note of the changed schedule:\n%s", r.err);
  CHECK(!strstr(r.out, "//") && strstr(r.out, "ckE/step_00000013 written"), "checkpoint paths:\n%s", r.out);
  free_result(&r);

  /* --resume without --save-to goes on saving where it resumed from: the root a step_N lies in, or
   * the root given (the recipe names none here: it saved nothing before) */
  char *e13 = rt_xprintf("%s/step_00000013", E), *e14 = rt_xprintf("%s/step_00000014/model.safetensors", E),
       *e15 = rt_xprintf("%s/step_00000015/model.safetensors", E),
       *says = rt_xprintf("checkpoints: into %s, where --resume's checkpoint is (the recipe names none; --save-to DIR "
                          "sends them elsewhere)\n",
                          E);
  r = run_trainer("--data", data, "--resume", e13, "--stop-at", "14", NULL);
  expect_ok(&r, "resume from a step_N without --save-to");
  CHECK(strstr(r.out, says) && exists(e14), "not saved into %s:\n%s", E, r.out);
  free_result(&r);
  r = run_trainer("--data", data, "--resume", Es, "--stop-at", "15", NULL);
  expect_ok(&r, "resume from a root without --save-to");
  CHECK(strstr(r.out, says) && exists(e15), "not saved into %s:\n%s", E, r.out);
  free_result(&r);
  free(e13), free(e14), free(e15), free(says);
  free(Bs), free(E), free(Es);

  free(vA), free(vC), free(b10), free(b12), free(junk), free(junkf), free(stray), free(d5), free(d10), free(d15);
  free(A), free(B), free(C), free(D), free(logA), free(logC), free(data);
}

/* ---- init-from and sampling ---- */

void test_init(void) {
  make_program(256, RT_LR_COSINE, 3, 30);
  char *data = path_of("corpus2.txt"), *txt = text_corpus(20000);
  write_bytes(data, txt, 20000);
  free(txt);
  char *A = path_of("initA");
  Result a = run_trainer("--data", data, "--save-to", A, "--sample", "40", "--temperature", "0", NULL);
  expect_ok(&a, "train + greedy sample");
  char *sampleA = line_after(a.out, "sample (40 tokens, greedy):\n");
  char *valA = line_after(a.out, "val loss ");
  CHECK(strlen(sampleA) > 0, "no sample in:\n%s", a.out);
  free_result(&a);

  /* weights only, no training: the same greedy sample and validation loss */
  char *w = rt_xprintf("%s/step_00000030/model.safetensors", A);
  Result b =
      run_trainer("--data", data, "--init-from", w, "--steps", "0", "--sample", "40", "--temperature", "0", NULL);
  expect_ok(&b, "init-from");
  char *sampleB = line_after(b.out, "sample (40 tokens, greedy):\n"), *valB = line_after(b.out, "val loss ");
  CHECK(strcmp(sampleA, sampleB) == 0, "greedy samples differ:\n  '%s'\n  '%s'", sampleA, sampleB);
  CHECK(strcmp(valA, valB) == 0, "val loss after --init-from: '%s' vs '%s'", valA, valB);
  CHECK(strstr(b.out, "nothing to train") != NULL, "--steps 0 trained:\n%s", b.out);
  free_result(&b);

  /* a directory works too, and --init-from resets step and optimizer: training starts at step 1 */
  Result c = run_trainer("--data", data, "--init-from", A, "--steps", "2", NULL);
  expect_ok(&c, "init-from dir");
  CHECK(strstr(c.out, "step 1/2 | loss") != NULL, "init-from did not start at step 1:\n%s", c.out);
  free_result(&c);

  /* --steps 0 --save-to: the initial weights, element i of each tensor from rt_rng (as the interpreter) */
  char *I = path_of("init0");
  Result z = run_trainer("--data", data, "--steps", "0", "--save-to", I, "--seed", "5", NULL);
  expect_ok(&z, "save initial weights");
  free_result(&z);
  char *Mz = rt_xcalloc((size_t)prog.mem_bytes, 1), *z0 = rt_xprintf("%s/step_00000000", I);
  RtTrainState zst;
  rt_ckpt_load(&prog, Mz, z0, 1, &zst);
  int init_ok = zst.step == 0 && zst.seed == 5;
  uint64_t kw = rt_rng_key(5, "wte"), kb = rt_rng_key(5, "blocks.bias");
  for (int64_t i = 0; i < 256 * 256; i++)
    init_ok &= ((float *)(Mz + lay.o_wte))[i] == (float)rt_rng_normal(kw, i, 0, 0.02);
  for (int64_t i = 0; i < 2 * 256; i++)
    init_ok &= ((float *)(Mz + lay.o_bias))[i] == (float)(-0.01 + 0.02 * rt_rng_uniform(kb, i));
  for (int64_t i = 0; i < 256 * 256; i++)
    init_ok &= ((float *)(Mz + lay.o_mw))[i] == 0;
  CHECK(init_ok, "initial weights differ from rt_rng's normal / uniform (or state not zero)");
  free(Mz), free(z0), free(I);

  /* temperature sampling: deterministic for a seed, different for another */
  const char *key = "sample (60 tokens, temperature 0.8):\n";
  Result s1 = run_trainer("--data", data, "--init-from", w, "--steps", "0", "--sample", "60", NULL);
  Result s2 = run_trainer("--data", data, "--init-from", w, "--steps", "0", "--sample", "60", NULL);
  Result s3 = run_trainer("--data", data, "--init-from", w, "--steps", "0", "--sample", "60", "--seed", "99", NULL);
  expect_ok(&s1, "sample 1");
  char *t1 = line_after(s1.out, key), *t2 = line_after(s2.out, key), *t3 = line_after(s3.out, key);
  CHECK(strlen(t1) > 0 && strcmp(t1, t2) == 0, "sampling not deterministic:\n  '%s'\n  '%s'", t1, t2);
  CHECK(strcmp(t1, t3) != 0, "another seed gave the same sample '%s'", t1);
  Result s4 =
      run_trainer("--data", data, "--init-from", w, "--steps", "0", "--sample", "20", "--prompt", "the cat", NULL);
  expect_ok(&s4, "prompt");
  CHECK(strstr(s4.out, "temperature 0.8):\nthe cat") != NULL, "prompt not printed first:\n%s", s4.out);
  free_result(&s1), free_result(&s2), free_result(&s3), free_result(&s4);
  free(t1), free(t2), free(t3), free(sampleA), free(sampleB), free(valA), free(valB), free(w), free(A), free(data);
}

/* ---- Python's safetensors ---- */

void test_python(void) {
  if (system("python3 -c 'import safetensors, numpy' >/dev/null 2>&1") != 0) {
    printf("skipped: python3 has no safetensors / numpy (scripts/setup.sh installs them)\n");
    exit(77);
  }
  make_program(256, RT_LR_COSINE, 2, 5);
  char *data = path_of("py.txt"), *txt = text_corpus(3000), *A = path_of("pyA");
  write_bytes(data, txt, 3000);
  free(txt);
  Result r = run_trainer("--data", data, "--save-to", A, NULL);
  expect_ok(&r, "python run");
  free_result(&r);

  /* Python reads our checkpoint: names, shapes, dtypes, metadata; prints a few values exactly */
  char *script = path_of("check.py"), *pyout = path_of("py.out");
  FILE *f = fopen(script, "w");
  fprintf(f,
          "import sys, json, numpy as np\n"
          "from safetensors import safe_open\n"
          "from safetensors.numpy import load_file, save_file\n"
          "d = sys.argv[1]\n"
          "m = load_file(d + '/model.safetensors')\n"
          "assert sorted(m) == ['blocks.0.bias', 'blocks.1.bias', 'wte'], sorted(m)\n"
          "assert m['wte'].shape == (256, 256) and m['wte'].dtype == np.float32\n"
          "assert m['blocks.1.bias'].shape == (256,)\n"
          "o = load_file(d + '/optimizer.safetensors')\n"
          "assert sorted(o) == ['adam_m:blocks.0.bias', 'adam_m:blocks.1.bias', 'adam_m:wte', 'adam_v:blocks.0.bias',"
          " 'adam_v:blocks.1.bias', 'adam_v:wte'], sorted(o)\n"
          "with safe_open(d + '/model.safetensors', 'np') as f:\n"
          "    md = f.metadata()\n"
          "assert md['step'] == '5' and md['data_position'] == '20' and md['model'] == 'bigram-bytes', md\n"
          "idx = json.load(open(d + '/model.safetensors.index.json'))\n"
          "assert set(idx['weight_map']) == set(m) and idx['metadata']['total_size'] == 4 * (256 * 256 + 512)\n"
          "print('%%.9g %%.9g %%.9g' %% (m['wte'][3, 7], m['blocks.1.bias'][5], o['adam_v:wte'][32, 104]))\n"
          "w = np.arange(256 * 256, dtype=np.float32).reshape(256, 256) / 1000\n"
          "b = np.stack([np.full(256, 0.5, np.float32), np.full(256, -0.25, np.float32)])\n"
          "save_file({'wte': w, 'blocks.0.bias': b[0], 'blocks.1.bias': b[1], 'extra': np.zeros(3, np.float32)},"
          " sys.argv[2], metadata={'note': 'from python'})\n");
  fclose(f);
  char *py_written = path_of("py.safetensors");
  char *cmd = rt_xprintf("python3 %s %s/step_00000005 %s > %s", script, A, py_written, pyout);
  int rc = system(cmd);
  CHECK(rc == 0, "python check failed (%d): %s", rc, cmd);
  char *vals = read_text(pyout);

  /* the same values through our reader */
  char *M = rt_xcalloc((size_t)prog.mem_bytes, 1);
  RtTrainState st;
  char *dir = rt_xprintf("%s/step_00000005", A);
  rt_ckpt_load(&prog, M, dir, 1, &st);
  char mine[128];
  snprintf(mine, sizeof mine, "%.9g %.9g %.9g\n", F32(lay.o_wte)[3 * 256 + 7], F32(lay.o_bias)[256 + 5],
           F32(lay.o_vw)[32 * 256 + 104]);
  CHECK(strcmp(vals, mine) == 0, "values: python '%s' vs ours '%s'", vals, mine);
  CHECK(st.step == 5 && st.data_pos == 20 && st.seed == 1337, "trainer state from metadata");

  /* a file written by Python's safetensors, read by --init-from's loader */
  memset(M, 0, (size_t)prog.mem_bytes);
  rt_ckpt_load(&prog, M, py_written, 0, NULL);
  int ok = 1;
  for (int64_t i = 0; i < 256 * 256; i++)
    ok &= F32(lay.o_wte)[i] == (float)i / 1000;
  for (int64_t i = 0; i < 256; i++)
    ok &= F32(lay.o_bias)[i] == 0.5f && F32(lay.o_bias)[256 + i] == -0.25f;
  CHECK(ok, "python-written weights read wrongly");
  free(M), free(dir), free(vals), free(cmd), free(py_written), free(script), free(pyout), free(A), free(data);
}

