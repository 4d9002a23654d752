/* tests/passes/plan_gen.h — the plan-space fuzzer's sampler (tests/passes/fuzz_plans.c): from a seed,
 * a small model source and a plan (the `parallel` block, the recipe's batch, -D overrides, the world
 * and the target), valid or not, and the single-rank program of the same global batch. */
#ifndef SHARDC_TESTS_PLAN_GEN_H
#define SHARDC_TESTS_PLAN_GEN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "frontend.h"
#include "module.h"

enum { PG_SRC = 4096, PG_MAXDEF = 40, PG_WORD = 48 };

typedef struct {
  uint64_t seed;
  char src[PG_SRC];     /* the plan's source: the model, its `parallel` block, its recipe */
  char ref_src[PG_SRC]; /* the single-rank program's source: the same model and recipe, an empty plan */
  FeDefine defs[PG_MAXDEF], ref_defs[PG_MAXDEF]; /* ref_defs: the model's -D overrides (room for 2 more) */
  int ndefs, nref_defs;
  char words[2 * PG_MAXDEF][2][PG_WORD]; /* the defines' keys and values */
  int nwords;
  int world;
  Target target;
  /* what the sampler meant (the compiler decides; these only steer the counts and the comparison) */
  bool meant_valid; /* no deliberate mistake was put in */
  const char *mistake; /* the deliberate mistake, if any */
  int dp, tp, cp, pp;
  bool bf16, sp;
  int64_t S, V; /* the sequence, the vocabulary (the tokens fed) */
} PlanSample;

/* Draws sample `seed` (deterministic: the same seed, the same sample on every machine). */
void plan_gen(PlanSample *s, uint64_t seed);
/* Prints the reproducer: the seed, the source and a shardc command line. */
void plan_gen_print(const PlanSample *s, FILE *f);

#endif
