/* tests/train/bigram_prog.h — the bigram program (bigram.h's model) as an RtProgram: its tensors laid
 * out in one allocation, and what the trainer reads of it. The trainer's tests (harness.c) and the
 * CUDA runtime's (tests/cudart/cudart_train.c: the same model as a device program) build theirs here;
 * bigram_prog.c defines it. */
#ifndef SHARDC_TESTS_BIGRAM_PROG_H
#define SHARDC_TESTS_BIGRAM_PROG_H

#include <math.h> /* bigram.h */
#include <stdbool.h>

#include "bigram.h"
#include "train/train.h"

enum { BG_LAYERS = 2, BG_NTENSORS = 14 }; /* blocks.bias is stacked over 2 layers */

typedef struct {
  long long V, VP;       /* vocabulary, padded logits width */
  int mb, seq;           /* sequences per step, tokens per sequence */
  long long base, align; /* the first tensor's offset, each tensor's alignment (bytes) */
  bool v_stacked;        /* adam_v:blocks.bias flagged stacked (codegen flags only parameters) */
} BgShape;

/* Lays the program of shape s out into *L, its BG_NTENSORS tensors into tens, and fills *p: the
 * allocation, batch, vocabulary, tensors, logits and an AdamW recipe (lr 1e-2, min_lr 1e-3, seed
 * 1337). The caller sets the rest: model, source, byte_level, the schedule, the step functions,
 * and a device. */
void bg_program(const BgShape *s, BgLayout *L, RtTensor *tens, RtProgram *p);

#endif
