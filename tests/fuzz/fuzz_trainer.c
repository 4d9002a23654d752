/* tests/fuzz/fuzz_trainer.c — libFuzzer target for the trainer's command line and its checkpoint
 * loaders (issue 19): whatever the input, each ends in a result or in the runtime's user error
 * ("error: ...", exit 1) — never a crash, an out-of-bounds access (ASan), undefined behaviour
 * (UBSan) or a hang. The first byte picks what the rest is:
 *   0  trainer flags: the rest split at NUL / newline into up to 32 arguments for rt_opts_parse
 *   1  a .safetensors file: --init-from FILE through rt_ckpt_load (one process) and
 *      rt_ckpt_load_local (any layout's loader)
 *   2  a sharded checkpoint's index.json, beside a valid rank_00000.safetensors: --resume DIR
 *      through rt_ckpt_load_local (weights, optimizer state and trainer state)
 * The program is a small hand-made one (a [16, 8] embedding, a stacked [2, 8] bias, a [16, 8]
 * AdamW moment). exit() is wrapped (-Wl,--wrap=exit): a user error returns to the harness by
 * longjmp, having freed what the loaders held (runtime/train/files.h rt_on_error: LeakSanitizer checks
 * it, the ctest runs with detect_leaks=1; before, RSS grew ~600 bytes an input), and any descriptor
 * still open is closed; its message goes to /dev/null (the sanitizers' reports to the real stderr).
 * Seeds: tests/fuzz/seeds_trainer (made by the harness itself with FUZZ_TRAINER_SEEDS=DIR). */
#include <fcntl.h>
#include <sanitizer/common_interface_defs.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run.h"

static jmp_buf back;
static int in_target;
static char fd_open[1024]; /* descriptors open before the first input */
static int err_fd = -1, null_fd = -1; /* the real stderr (the sanitizers' reports go there), /dev/null */
static char dir[256], st_path[300], ck_dir[300], index_path[400];

void __real_exit(int code);
void __wrap_exit(int code) {
  if (in_target) longjmp(back, 1);
  __real_exit(code);
}

static const RtTensor tensors[] = {
    {.name = "wte", .kind = RT_T_PARAM, .dtype = RT_F32, .rank = 2, .dims = {16, 8}, .offset = 0},
    {.name = "blocks.bias", .kind = RT_T_PARAM, .dtype = RT_F32, .rank = 2, .dims = {2, 8}, .offset = 512, .stacked = 1},
    {.name = "adam_m:wte", .kind = RT_T_STATE, .dtype = RT_F32, .rank = 2, .dims = {16, 8}, .offset = 576},
};
static const RtProgram prog = {.model = "fuzz", .source = "fuzz.model", .mem_bytes = 1088, .batch = 2, .seq = 4,
                               .global_batch = 2, .micro_batch = 2, .accum = 1, .vocab = 16, .vocab_padded = 16,
                               .ntensors = 3, .tensors = tensors,
                               .recipe = {.optimizer = RT_OPT_ADAMW, .lr = 1e-3, .steps = 10, .seed = 1}};
static char mem[1088];

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) abort();
}

/* A valid sharded checkpoint of prog at ck_dir: rank_00000.safetensors and index.json (written by
 * the runtime's own writer, one rank), whose index the inputs replace. */
static void make_checkpoint(void) {
  for (size_t i = 0; i < sizeof mem / 4; i++) {
    float v = 0.01f * (float)i;
    memcpy(mem + 4 * i, &v, 4);
  }
  RtShardSave j = {.p = &prog, .mem = mem, .rank = 0, .world = 1, .dir = dir, .keep = 0,
                   .st = {.step = 1, .steps = 10, .seed = 1, .batch = 2, .seq = 4}};
  if (!rt_mesh_init(&j.mesh, 1, 1, 1, 1, 1)) abort();
  j.tmp = rt_ckpt_shard_tmp(dir, 1, 0, (int)getpid());
  rt_ckpt_shard_write(&j);
  free(j.tmp);
}

static void remove_files(void) { /* the checkpoint and the input file, at exit */
  char *rank = rt_xprintf("%s/rank_00000.safetensors", ck_dir);
  unlink(rank), unlink(index_path), unlink(st_path), rmdir(ck_dir), rmdir(dir);
  free(rank);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  snprintf(dir, sizeof dir, "/tmp/fuzz-trainer-%d", (int)getpid());
  mkdir(dir, 0755);
  snprintf(st_path, sizeof st_path, "%s/in.safetensors", dir);
  snprintf(ck_dir, sizeof ck_dir, "%s/step_00000001", dir);
  snprintf(index_path, sizeof index_path, "%s/" RT_SHARD_INDEX, ck_dir);
  make_checkpoint();
  atexit(remove_files);
  const char *seeds = getenv("FUZZ_TRAINER_SEEDS");
  if (seeds) { /* the seed corpus: a good file of each kind */
    char p[600];
    FILE *f = fopen(index_path, "rb");
    char buf[1 << 16];
    buf[0] = 2;
    size_t n = f ? fread(buf + 1, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    snprintf(p, sizeof p, "%s/index.bin", seeds);
    write_file(p, buf, n + 1);
    char *rank = rt_xprintf("%s/rank_00000.safetensors", ck_dir);
    f = fopen(rank, "rb");
    buf[0] = 1;
    n = f ? fread(buf + 1, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    free(rank);
    snprintf(p, sizeof p, "%s/st.bin", seeds); /* a sharded rank file: pieces named "wte[0:16,0:8]" */
    write_file(p, buf, n + 1);
    static const char flags[] = "\0--steps\n100\n--save-to\nck\n--ckpt-every\n10\n--keep\n2\n--resume\nauto\n--threads\n1\n"
                                "--temperature\n0.5\n--ckpt-format\nsharded\n--batch=2\n--seed\n7";
    snprintf(p, sizeof p, "%s/flags.bin", seeds);
    write_file(p, flags, sizeof flags - 1);
  }
  if (!freopen("/dev/null", "w", stdout)) abort(); /* --help's text */
  /* the inputs' "error: ..." lines (thousands) to /dev/null; the sanitizers report on the real stderr */
  err_fd = dup(2);
  null_fd = open("/dev/null", O_WRONLY);
  if (err_fd < 0 || null_fd < 0) abort();
  __sanitizer_set_report_fd((void *)(intptr_t)err_fd);
  return 0;
}

static void close_new_fds(void) {
  for (int fd = 3; fd < 1024; fd++)
    if (!fd_open[fd] && fcntl(fd, F_GETFD) != -1) close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int first = 1;
  if (first) /* after libFuzzer's own descriptors (-close_fd_mask dups stderr before the first input) */
    for (int fd = 0; fd < 1024; fd++) fd_open[fd] = fcntl(fd, F_GETFD) != -1;
  first = 0;
  if (size < 1 || size > (1 << 20)) return 0;
  int mode = data[0] % 3;
  const uint8_t *rest = data + 1;
  size_t n = size - 1;
  char *copy = malloc(n + 1);
  memcpy(copy, rest, n);
  copy[n] = 0;
  char *argv[34] = {"trainer"};
  int argc = 1;
  volatile int stage = 0;
  in_target = 1;
  fflush(stderr);
  dup2(null_fd, 2);
  if (setjmp(back) == 0) {
    if (mode == 0) {
      char *s = copy;
      for (size_t i = 0; i <= n && argc < 33; i++)
        if (i == n || copy[i] == '\n' || copy[i] == 0) {
          copy[i] = 0;
          argv[argc++] = s;
          s = copy + i + 1;
        }
      RtOpts o;
      rt_opts_parse(argc, argv, &prog, &o);
    } else if (mode == 1) {
      write_file(st_path, rest, n);
      RtTrainState st;
      int coord[RT_AX_COUNT] = {0};
      rt_ckpt_load(&prog, mem, st_path, 0, &st);
      stage = 1;
      rt_ckpt_load_local(&prog, mem, coord, st_path, 0, &st);
    } else {
      write_file(index_path, rest, n);
      RtTrainState st;
      int coord[RT_AX_COUNT] = {0};
      rt_ckpt_load_local(&prog, mem, coord, dir, 1, &st);
    }
  } else if (mode == 1 && stage == 0) { /* the one-process loader refused it: the other one too? */
    if (setjmp(back) == 0) {
      RtTrainState st;
      int coord[RT_AX_COUNT] = {0};
      rt_ckpt_load_local(&prog, mem, coord, st_path, 0, &st);
    }
  }
  in_target = 0;
  fflush(stderr);
  dup2(err_fd, 2);
  close_new_fds();
  free(copy);
  return 0;
}
