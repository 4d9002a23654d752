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

char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return rt_xstrdup("");
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = rt_xmalloc((size_t)n + 1);
  size_t got = fread(s, 1, (size_t)n, f);
  s[got] = 0;
  fclose(f);
  return s;
}

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

Layout lay;
static RtTensor tens[16];
RtProgram prog;

static void forward(char *M) {
  const int32_t *tok = I32(lay.o_tok);
  const float *wte = F32(lay.o_wte), *bias = F32(lay.o_bias);
  float *lg = F32(lay.o_logits);
  for (int64_t i = 0; i < MB * SEQ; i++) {
    float *row = lg + i * lay.VP;
    for (int64_t v = 0; v < lay.V; v++)
      row[v] = wte[tok[i] * lay.V + v] + bias[v] + bias[lay.V + v];
    for (int64_t v = lay.V; v < lay.VP; v++)
      row[v] = 0;
  }
}

/* Mean cross-entropy; with grad, the logits become d loss / d logits. */
static float xent(char *M, int grad) {
  const int32_t *tgt = I32(lay.o_tgt);
  float *lg = F32(lay.o_logits), loss = 0;
  for (int64_t i = 0; i < MB * SEQ; i++) {
    float *row = lg + i * lay.VP, mx = row[0], sum = 0;
    for (int64_t v = 1; v < lay.V; v++)
      mx = row[v] > mx ? row[v] : mx;
    for (int64_t v = 0; v < lay.V; v++)
      sum += expf(row[v] - mx);
    loss += logf(sum) + mx - row[tgt[i]];
    if (grad) {
      for (int64_t v = 0; v < lay.V; v++)
        row[v] = expf(row[v] - mx) / sum / (MB * SEQ);
      row[tgt[i]] -= 1.0f / (MB * SEQ);
    }
  }
  return loss / (MB * SEQ);
}

static void adamw(float *p, float *g, float *m, float *v, int64_t n, float lr, float t) {
  const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.01f;
  float c1 = 1 - powf(b1, t), c2 = 1 - powf(b2, t);
  for (int64_t i = 0; i < n; i++) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    p[i] -= lr * ((m[i] / c1) / (sqrtf(v[i] / c2) + eps) + wd * p[i]);
  }
}

static void step_fn(char *M, RtCtx *ctx) {
  (void)ctx;
  forward(M);
  *F32(lay.o_loss) = xent(M, 1);
  const int32_t *tok = I32(lay.o_tok);
  float *gw = F32(lay.o_gw), *gb = F32(lay.o_gb), *lg = F32(lay.o_logits);
  memset(gw, 0, (size_t)(lay.V * lay.V) * 4);
  memset(gb, 0, (size_t)(NLAYER * lay.V) * 4);
  for (int64_t i = 0; i < MB * SEQ; i++)
    for (int64_t v = 0; v < lay.V; v++) {
      float d = lg[i * lay.VP + v];
      gw[tok[i] * lay.V + v] += d;
      gb[v] += d;
      gb[lay.V + v] += d;
    }
  double ss = 0;
  for (int64_t i = 0; i < lay.V * lay.V; i++)
    ss += (double)gw[i] * gw[i];
  for (int64_t i = 0; i < NLAYER * lay.V; i++)
    ss += (double)gb[i] * gb[i];
  *F32(lay.o_gn) = (float)sqrt(ss);
  float lr = *F32(lay.o_lr), t = *F32(lay.o_step);
  adamw(F32(lay.o_wte), gw, F32(lay.o_mw), F32(lay.o_vw), lay.V * lay.V, lr, t);
  adamw(F32(lay.o_bias), gb, F32(lay.o_mb), F32(lay.o_vb), NLAYER * lay.V, lr, t);
}

static void eval_fn(char *M, RtCtx *ctx) {
  (void)ctx;
  forward(M);
  *F32(lay.o_loss) = xent(M, 0);
}

static void logits_fn(char *M, RtCtx *ctx) {
  (void)ctx;
  forward(M);
}

static int64_t place(int64_t *top, int64_t bytes) {
  int64_t at = *top;
  *top += (bytes + 63) / 64 * 64;
  return at;
}

static RtTensor tensor(const char *name, int kind, int dtype, int rank, int64_t d0, int64_t d1, int64_t off,
                       int stacked, int init, double a, double b) {
  RtTensor t = {.name = name,
                .kind = kind,
                .dtype = dtype,
                .rank = rank,
                .offset = off,
                .stacked = stacked,
                .init = init,
                .init_a = a,
                .init_b = b};
  t.dims[0] = d0;
  t.dims[1] = d1;
  return t;
}

/* Builds the program for vocabulary V (byte-level when V == 256) and a schedule. */
void make_program(int64_t V, int schedule, int64_t warmup, int64_t steps) {
  int64_t top = 0;
  lay.V = V;
  lay.VP = (V + 7) / 8 * 8 + 8;
  lay.o_wte = place(&top, V * V * 4);
  lay.o_bias = place(&top, NLAYER * V * 4);
  lay.o_mw = place(&top, V * V * 4);
  lay.o_vw = place(&top, V * V * 4);
  lay.o_mb = place(&top, NLAYER * V * 4);
  lay.o_vb = place(&top, NLAYER * V * 4);
  lay.o_tok = place(&top, MB * SEQ * 4);
  lay.o_tgt = place(&top, MB * SEQ * 4);
  lay.o_lr = place(&top, 4);
  lay.o_step = place(&top, 4);
  lay.o_loss = place(&top, 4);
  lay.o_gn = place(&top, 4);
  lay.o_logits = place(&top, MB * SEQ * lay.VP * 4);
  lay.o_gw = place(&top, V * V * 4);
  lay.o_gb = place(&top, NLAYER * V * 4);
  int n = 0;
  tens[n++] = tensor("wte", RT_T_PARAM, RT_F32, 2, V, V, lay.o_wte, 0, RT_INIT_NORMAL, 0, 0.02);
  tens[n++] = tensor("blocks.bias", RT_T_PARAM, RT_F32, 2, NLAYER, V, lay.o_bias, 1, RT_INIT_UNIFORM, -0.01, 0.01);
  tens[n++] = tensor("adam_m:wte", RT_T_STATE, RT_F32, 2, V, V, lay.o_mw, 0, 0, 0, 0);
  tens[n++] = tensor("adam_v:wte", RT_T_STATE, RT_F32, 2, V, V, lay.o_vw, 0, 0, 0, 0);
  tens[n++] = tensor("adam_m:blocks.bias", RT_T_STATE, RT_F32, 2, NLAYER, V, lay.o_mb, 1, 0, 0, 0);
  /* not flagged stacked (as codegen emits states): written per layer because its parameter is */
  tens[n++] = tensor("adam_v:blocks.bias", RT_T_STATE, RT_F32, 2, NLAYER, V, lay.o_vb, 0, 0, 0, 0);
  tens[n++] = tensor("tokens", RT_T_INPUT, RT_I32, 2, MB, SEQ, lay.o_tok, 0, 0, 0, 0);
  tens[n++] = tensor("targets", RT_T_INPUT, RT_I32, 2, MB, SEQ, lay.o_tgt, 0, 0, 0, 0);
  tens[n++] = tensor("lr", RT_T_INPUT, RT_F32, 0, 0, 0, lay.o_lr, 0, 0, 0, 0);
  tens[n++] = tensor("step", RT_T_INPUT, RT_F32, 0, 0, 0, lay.o_step, 0, 0, 0, 0);
  tens[n++] = tensor("loss", RT_T_RESULT, RT_F32, 0, 0, 0, lay.o_loss, 0, 0, 0, 0);
  tens[n++] = tensor("grad_norm", RT_T_RESULT, RT_F32, 0, 0, 0, lay.o_gn, 0, 0, 0, 0);
  tens[n++] = tensor("grad:wte", RT_T_RESULT, RT_F32, 2, V, V, lay.o_gw, 0, 0, 0, 0);
  tens[n++] = tensor("grad:blocks.bias", RT_T_RESULT, RT_F32, 2, NLAYER, V, lay.o_gb, 1, 0, 0, 0);
  prog = (RtProgram){
      .model = V == 256 ? "bigram-bytes" : "bigram",
      .source = "tests/train/test_train.c",
      .mem_bytes = top,
      .mem_peak = top,
      .batch = MB,
      .seq = SEQ,
      .vocab = V,
      .vocab_padded = lay.VP,
      .byte_level = V == 256,
      .nparams = V * V + NLAYER * V,
      .flops_per_token = 6.0 * (double)(V * V + NLAYER * V),
      .ntensors = n,
      .tensors = tens,
      .logits_offset = lay.o_logits,
      .recipe = {.optimizer = RT_OPT_ADAMW,
                 .lr = 1e-2,
                 .min_lr = 1e-3,
                 .lr_schedule = schedule,
                 .warmup = warmup,
                 .steps = steps,
                 .seed = 1337},
      .step = step_fn,
      .eval = eval_fn,
      .logits = logits_fn,
  };
}

/* ---- running the trainer in a child ---- */

void free_result(Result *r) {
  free(r->out);
  free(r->err);
}

/* Runs rt_train_main(prog) with the NULL-terminated arguments. */
Result run_trainer(const char *first, ...) {
  const char *argv[64];
  int argc = 0;
  argv[argc++] = "test_train";
  va_list ap;
  va_start(ap, first);
  for (const char *a = first; a; a = va_arg(ap, const char *))
    argv[argc++] = a;
  va_end(ap);
  argv[argc] = NULL;
  char *out = path_of("stdout.txt"), *err = path_of("stderr.txt");
  Result r = {train_child(&prog, argc, argv, out, err), read_text(out), read_text(err)};
  free(out);
  free(err);
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
