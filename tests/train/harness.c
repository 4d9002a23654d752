/* tests/train/harness.c — what the trainer's tests share: checks, the temporary folder and
 * files in it, the hand-made bigram program, running rt_train_main in a child, test data and the
 * JSON-lines log reader. */
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "train_child.h"
#include "rng.h"

/* ---- checks ---- */

int failures;

char tmpdir[256];

char *path_of(const char *name) { return rt_xprintf("%s/%s", tmpdir, name); }

void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(2);
  }
}

/* An llm.c shard: header (magic, version, count) then tokens of elem bytes. count_override >= 0
 * writes that count in the header instead of n. */
void write_shard(const char *path, int magic, int version, int elem, const uint32_t *tok, int64_t n,
                        int64_t count_override) {
  size_t bytes = 1024 + (size_t)n * (size_t)elem;
  unsigned char *b = rt_xcalloc(bytes, 1);
  int32_t h[3] = {magic, version, (int32_t)(count_override >= 0 ? count_override : n)};
  memcpy(b, h, sizeof h);
  for (int64_t i = 0; i < n; i++) {
    if (elem == 2) {
      uint16_t v = (uint16_t)tok[i];
      memcpy(b + 1024 + 2 * i, &v, 2);
    } else
      memcpy(b + 1024 + 4 * i, &tok[i], 4);
  }
  write_bytes(path, b, bytes);
  free(b);
}

/* ---- the bigram program ---- */

BgLayout lay;
static RtTensor tens[BG_NTENSORS];
RtProgram prog;

static void step_fn(char *M, RtCtx *ctx) {
  (void)ctx;
  bg_step(M, lay);
}

static void eval_fn(char *M, RtCtx *ctx) {
  (void)ctx;
  bg_eval(M, lay);
}

static void logits_fn(char *M, RtCtx *ctx) {
  (void)ctx;
  bg_forward(M, lay);
}

/* Builds the program for vocabulary V (byte-level when V == 256) and a schedule. */
void make_program(int64_t V, int schedule, int64_t warmup, int64_t steps) {
  BgShape s = {.V = V, .VP = (V + 7) / 8 * 8 + 8, .mb = MB, .seq = SEQ, .base = 0, .align = 64, .v_stacked = false};
  bg_program(&s, &lay, tens, &prog);
  prog.model = V == 256 ? "bigram-bytes" : "bigram";
  prog.source = "tests/train/test_train.c";
  prog.byte_level = V == 256;
  prog.recipe.lr_schedule = schedule;
  prog.recipe.warmup = warmup;
  prog.recipe.steps = steps;
  prog.step = step_fn;
  prog.eval = eval_fn;
  prog.logits = logits_fn;
}

/* ---- running the trainer in a child ---- */

void free_result(Result *r) {
  free(r->out);
  free(r->err);
}

/* Runs rt_train_main(prog) with the NULL-terminated arguments. */
Result run_trainer(const char *first, ...) {
  va_list ap;
  va_start(ap, first);
  Result r = train_run(&prog, tmpdir, "test_train", first, ap);
  va_end(ap);
  return r;
}

void expect_ok(Result *r, const char *what) {
  CHECK(r->status == 0, "%s: exit %d\nstderr: %s\nstdout: %s", what, r->status, r->err, r->out);
}

/* The run fails with status 1 and exactly "error: <msg>\n" on stderr. */
void expect_error(Result r, const char *msg) {
  char *want = rt_xprintf("error: %s\n", msg);
  CHECK(r.status == 1, "exit %d (want 1) for: %s\nstderr: %s", r.status, msg, r.err);
  CHECK(strcmp(r.err, want) == 0, "stderr\n  got:  %s  want: %s", r.err, want);
  free(want);
  free_result(&r);
}

/* The text after `key` up to the end of its line ("" when absent). */
char *line_after(const char *text, const char *key) {
  const char *s = strstr(text, key);
  if (!s) return rt_xstrdup("");
  s += strlen(key);
  const char *e = strchr(s, '\n');
  return rt_xprintf("%.*s", (int)(e ? e - s : (long)strlen(s)), s);
}

/* A learnable token stream: mostly t -> (3t + 1) mod V, with a deterministic perturbation. */
uint32_t *token_stream(int64_t n, int64_t V, uint32_t start) {
  uint32_t *t = rt_xmalloc((size_t)n * sizeof *t);
  uint32_t x = start % V;
  for (int64_t i = 0; i < n; i++) {
    t[i] = x;
    x = (i % 7 == 3) ? (x + 5) % (uint32_t)V : (3 * x + 1) % (uint32_t)V;
  }
  return t;
}

/* An English-like byte corpus. */
char *text_corpus(int64_t n) {
  static const char *words[] = {"the ", "cat ", "sat ", "on ",  "a ",   "mat", ". ",
                                "dog ", "ran ", "to ",  "the ", "park", ". ",  "\n"};
  char *s = rt_xmalloc((size_t)n + 1);
  int64_t k = 0;
  for (uint64_t i = 0; k < n; i++) {
    const char *w = words[rt_splitmix64(i) % 14 < 12 ? i % 13 : 13];
    for (const char *c = w; *c && k < n; c++)
      s[k++] = *c;
  }
  s[n] = 0;
  return s;
}

/* Reads the JSONL log: fills lr[step-1], loss[step-1] (up to n); returns the step lines. */
int read_log(const char *path, double *lr, double *loss, int n, int *val_lines) {
  char *text = read_text(path), *save = NULL;
  int steps = 0;
  *val_lines = 0;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char err[128];
    RtJson *j = rt_json_parse(line, strlen(line), err, sizeof err);
    CHECK(j && j->kind == RT_JSON_OBJ, "log line not JSON: %s (%s)", line, err);
    if (!j) continue;
    const RtJson *st = rt_json_get(j, "step");
    CHECK(st && st->is_int, "log line without step: %s", line);
    if (rt_json_get(j, "val_loss")) {
      ++*val_lines;
      CHECK(rt_json_get(j, "val_loss")->kind == RT_JSON_NUM, "val_loss not a number: %s", line);
    } else if (st) {
      static const char *keys[] = {"steps",        "loss", "lr",        "grad_norm", "ms",
                                   "tokens_per_s", "mfu",  "mem_bytes", "eta_s"};
      for (int k = 0; k < 9; k++) {
        const RtJson *v = rt_json_get(j, keys[k]);
        CHECK(v && (v->kind == RT_JSON_NUM || (k == 8 && v->kind == RT_JSON_NULL)), "log field %s missing: %s", keys[k],
              line);
      }
      int64_t s = st->inum;
      if (s >= 1 && s <= n && rt_json_get(j, "lr") && rt_json_get(j, "loss")) {
        lr[s - 1] = rt_json_get(j, "lr")->num;
        loss[s - 1] = rt_json_get(j, "loss")->num;
      }
      CHECK(rt_json_get(j, "tokens_per_s") && rt_json_get(j, "tokens_per_s")->num > 0, "tokens_per_s <= 0");
      CHECK(rt_json_get(j, "mfu") && rt_json_get(j, "mfu")->num > 0, "mfu <= 0");
      steps++;
    }
    rt_json_free(j);
  }
  free(text);
  return steps;
}
