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
 * messages can be checked.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "module.h"
#include "rng.h"
#include "train/train.h"

/* ---- checks ---- */

static int failures;

#define CHECK(cond, ...)                                                                                               \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                                    \
      fputc('\n', stderr);                                                                                             \
      failures++;                                                                                                      \
    }                                                                                                                  \
  } while (0)

static char tmpdir[256];

static char *path_of(const char *name) { return rt_xprintf("%s/%s", tmpdir, name); }

static char *read_text(const char *path) {
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

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(2);
  }
}

/* An llm.c shard: header (magic, version, count) then tokens of elem bytes. count_override >= 0
 * writes that count in the header instead of n. */
static void write_shard(const char *path, int magic, int version, int elem, const uint32_t *tok, int64_t n,
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

enum { NLAYER = 2, MB = 4, SEQ = 8 };

typedef struct {
  int64_t V, VP; /* vocabulary, padded logits width */
  int64_t o_wte, o_bias, o_mw, o_vw, o_mb, o_vb, o_tok, o_tgt, o_lr, o_step, o_loss, o_gn, o_logits, o_gw,
      o_gb; /* bytes */
} Layout;

static Layout lay;
static RtTensor tens[16];
static RtProgram prog;

#define F32(off) ((float *)(M + (off)))
#define I32(off) ((int32_t *)(M + (off)))

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
static void make_program(int64_t V, int schedule, int64_t warmup, int64_t steps) {
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

typedef struct {
  int status;      /* exit status, or 128 + signal */
  char *out, *err; /* captured stdout, stderr */
} Result;

static void free_result(Result *r) {
  free(r->out);
  free(r->err);
}

/* Runs rt_train_main(prog) with the NULL-terminated arguments. */
static Result run_trainer(const char *first, ...) {
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
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(2);
  }
  if (pid == 0) {
    int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0) _exit(99);
    int rc = rt_train_main(argc, (char **)argv, &prog);
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  int ws;
  if (waitpid(pid, &ws, 0) != pid) {
    perror("waitpid");
    exit(2);
  }
  Result r = {WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws), read_text(out), read_text(err)};
  free(out);
  free(err);
  return r;
}

static void expect_ok(Result *r, const char *what) {
  CHECK(r->status == 0, "%s: exit %d\nstderr: %s\nstdout: %s", what, r->status, r->err, r->out);
}

/* The run fails with status 1 and exactly "error: <msg>\n" on stderr. */
static void expect_error(Result r, const char *msg) {
  char *want = rt_xprintf("error: %s\n", msg);
  CHECK(r.status == 1, "exit %d (want 1) for: %s\nstderr: %s", r.status, msg, r.err);
  CHECK(strcmp(r.err, want) == 0, "stderr\n  got:  %s  want: %s", r.err, want);
  free(want);
  free_result(&r);
}

/* Runs the trainer with the arguments and expects the error message msg (computed before the fork). */
#define EXPECT_ERROR(msg, ...)                                                                                         \
  do {                                                                                                                 \
    char *volatile msg_ = (msg);                                                                                       \
    expect_error(run_trainer(__VA_ARGS__), msg_);                                                                      \
    free(msg_);                                                                                                        \
  } while (0)

/* The text after `key` up to the end of its line ("" when absent). */
static char *line_after(const char *text, const char *key) {
  const char *s = strstr(text, key);
  if (!s) return rt_xstrdup("");
  s += strlen(key);
  const char *e = strchr(s, '\n');
  return rt_xprintf("%.*s", (int)(e ? e - s : (long)strlen(s)), s);
}

/* ---- data ---- */

/* A learnable token stream: mostly t -> (3t + 1) mod V, with a deterministic perturbation. */
static uint32_t *token_stream(int64_t n, int64_t V, uint32_t start) {
  uint32_t *t = rt_xmalloc((size_t)n * sizeof *t);
  uint32_t x = start % V;
  for (int64_t i = 0; i < n; i++) {
    t[i] = x;
    x = (i % 7 == 3) ? (x + 5) % (uint32_t)V : (3 * x + 1) % (uint32_t)V;
  }
  return t;
}

/* An English-like byte corpus. */
static char *text_corpus(int64_t n) {
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

/* Reads the JSONL log: fills lr[step-1], loss[step-1] (up to n); returns the step lines. */
static int read_log(const char *path, double *lr, double *loss, int n, int *val_lines) {
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

  EXPECT_ERROR(
      rt_xstrdup("--batch 8: this program was compiled for a micro-batch of 4 sequences x 1 data-parallel rank(s) = 4; "
                 "recompile with another batch to change it"),
      "--data", good, "--batch", "8", NULL);
  EXPECT_ERROR(rt_xstrdup("--steps: 'ten' is not a non-negative integer"), "--data", good, "--steps", "ten", NULL);
  EXPECT_ERROR(rt_xstrdup("unknown flag '--stesp' (see --help)"), "--data", good, "--stesp", "10", NULL);
  EXPECT_ERROR(rt_xstrdup("--data needs a value (PATH|GLOB)"), "--data", NULL);
  EXPECT_ERROR(rt_xstrdup("no training data: pass --data PATH|GLOB"), NULL);

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
  memcpy(b + 8, "{\"wte\": {\"dtype\": \"F32\", \"shape\": [64, 63], \"data_offsets\": [0, 16384]}}", hl);
  write_bytes(p, b, 8 + hl + 16384);
  EXPECT_ERROR(rt_xprintf("'%s': tensor 'wte' has shape [64, 63], the model needs [64, 64]", p), "--data", good,
               "--init-from", p, NULL);
  memcpy(b + 8, "{\"wte\": {\"dtype\": \"F32\", \"shape\": [64, 64], \"data_offsets\": [0, 16384]]}", hl);
  write_bytes(p, b, 8 + hl + 16384);
  EXPECT_ERROR(rt_xprintf("'%s': malformed safetensors header: at byte 70: expected ',' or '}'", p), "--data", good,
               "--init-from", p, NULL);
  free(b);
  free(p);

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
  free(data);
  free(log);
}

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

static void test_resume(void) {
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
  r = run_trainer("--data", data, "--resume", B, "--save-to", B, "--stop-at", "12", NULL);
  expect_ok(&r, "run into B");
  free_result(&r);
  CHECK(!exists(junk), "stale temp directory %s not removed by the next save", junk);
  char *b12 = rt_xprintf("%s/step_00000012/model.safetensors", B);
  CHECK(exists(b12), "no %s", b12);

  free(vA), free(vC), free(b10), free(b12), free(junk), free(junkf), free(stray), free(d5), free(d10), free(d15);
  free(A), free(B), free(C), free(D), free(logA), free(logC), free(data);
}

/* ---- init-from and sampling ---- */

static void test_init(void) {
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

static void test_python(void) {
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

/* ---- main ---- */

static void remove_tmp(void) {
  char *cmd = rt_xprintf("rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  free(cmd);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_train data|json|lr|errors|log|resume|init|python|trainer [args]\n");
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
