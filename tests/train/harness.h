/* tests/train/harness.h — what the trainer's tests (test_train.c, test_ckpt.c) share; harness.c
 * defines it. */
#ifndef SHARDC_TEST_TRAIN_HARNESS_H
#define SHARDC_TEST_TRAIN_HARNESS_H

#include <stdint.h>
#include <stdio.h>

#include "bigram_prog.h"
#include "train_child.h" /* Result, read_text */
#include "train/train.h"
#include "../check.h" /* CHECK */

/* ---- checks ---- */

extern int failures;      /* checks failed so far */
extern char tmpdir[256];  /* this test's temporary folder (main makes it) */

char *path_of(const char *name); /* tmpdir/name */
void write_bytes(const char *path, const void *data, size_t n);
/* An llm.c shard: header (magic, version, count) then tokens of elem bytes. count_override >= 0
 * writes that count in the header instead of n. */
void write_shard(const char *path, int magic, int version, int elem, const uint32_t *tok, int64_t n,
                 int64_t count_override);

/* ---- the bigram program ---- */

enum { NLAYER = BG_LAYERS, MB = 4, SEQ = 8 };

extern BgLayout lay;   /* the program's offsets (make_program) */
extern RtProgram prog; /* the program (make_program) */

#define F32(off) ((float *)(M + (off)))
#define I32(off) ((int32_t *)(M + (off)))

/* Builds the program for vocabulary V (byte-level when V == 256) and a schedule. */
void make_program(int64_t V, int schedule, int64_t warmup, int64_t steps);

/* ---- running the trainer in a child ---- */


void free_result(Result *r);
/* Runs rt_train_main(prog) with the NULL-terminated arguments. */
Result run_trainer(const char *first, ...);
void expect_ok(Result *r, const char *what);
/* The run fails with status 1 and exactly "error: <msg>\n" on stderr. */
void expect_error(Result r, const char *msg);
/* Runs the trainer with the arguments and expects the error message msg (computed before the fork). */
#define EXPECT_ERROR(msg, ...)                                                                                         \
  do {                                                                                                                 \
    char *volatile msg_ = (msg);                                                                                       \
    expect_error(run_trainer(__VA_ARGS__), msg_);                                                                      \
    free(msg_);                                                                                                        \
  } while (0)

/* The text after `key` up to the end of its line ("" when absent). */
char *line_after(const char *text, const char *key);

/* ---- test data ---- */

/* A learnable token stream: mostly t -> (3t + 1) mod V, with a deterministic perturbation. */
uint32_t *token_stream(int64_t n, int64_t V, uint32_t start);
/* An English-like byte corpus. */
char *text_corpus(int64_t n);
/* Reads the JSONL log: fills lr[step-1], loss[step-1] (up to n); returns the step lines. */
int read_log(const char *path, double *lr, double *loss, int n, int *val_lines);

/* ---- test_ckpt.c ---- */
void test_resume(void);
void test_init(void);
void test_python(void);

/* ---- test_robust.c ---- */
void test_robust(void);
void test_ckpt_fuzz(void);

#endif
