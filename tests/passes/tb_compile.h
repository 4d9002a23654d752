/* tests/passes/tb_compile.h — a model file compiled through the pipeline for the pass tests. */
#ifndef SHARDC_TESTS_TB_COMPILE_H
#define SHARDC_TESTS_TB_COMPILE_H

#include <stdbool.h>

#include "frontend.h"
#include "module.h"

/* path compiled on one rank with micro_batch 2, batch 2, precision prec and defs after them, for
 * target (no topology), verified; every pass of the pipeline but `skip` (NULL: all). NULL on an error. */
Module *tb_compile(Arena *a, const char *path, const FeDefine *defs, int ndefs, const char *prec, Target target,
                   const char *skip);
/* The same on `world` ranks (defs give the plan: dp, pp, ...). */
Module *tb_compile_on(Arena *a, const char *path, const FeDefine *defs, int ndefs, const char *prec, Target target,
                      const char *skip, int world);

/* path as written (its own topology, batch and precision) with defs, on `world` ranks, for target, through the
 * whole pipeline (verified); NULL when it does not compile or a pass fails. */
Module *tb_compile_model(Arena *a, const char *path, const FeDefine *defs, int ndefs, int world, Target target);

/* A pipelined plan for the pp tests: pp x dp x tp ranks, micro-batches of `micro` to a batch of
 * `batch`, `schedule` sched (with interleaved: `interleave` v), zero 0 and recompute none unless
 * defs say otherwise, tp allowed across nodes; the stages' layers as written (`layers(..)`: nlayers
 * counts) or balanced; the driver's inputs (zb's list times, the balance's memory calibration) as
 * given; every pass but `skip` (NULL: all). NULL when it does not compile or a pass fails (verified). */
typedef struct {
  int pp, dp, tp, v; /* v: interleave's chunks (0: no interleave given) */
  const char *sched;
  int64_t micro, batch;
  const int *layers; /* [nlayers] (the frontend's parse is pp_plan.sh's and the frontend cases') */
  int nlayers;
  bool balanced;     /* `layers(balanced)` */
  const char *import_dir; /* (a model importing the standard library from there; NULL: none) */
  const double *sched_times;    /* Plan.sched_times */
  const int64_t *stage_fixed;   /* Plan.stage_fixed, stage_cap */
  double stage_cap;
  const char *skip;             /* a pass not run (tb_compile's skip), NULL: none */
} TbPp;
Module *tb_compile_pp(Arena *a, Target target, const char *path, const FeDefine *defs, int ndefs, const TbPp *p);

/* The single-rank reference the pp tests compare against: tb_compile_pp on one rank, 1F1B, one micro-batch
 * of `batch` (the models directory for imports); on failure "FAIL label: the single-rank program does not
 * compile" on stderr and NULL. */
Module *tb_compile_ref(Arena *a, Target target, const char *path, const FeDefine *defs, int ndefs, int64_t batch,
                       const char *label);

/* m under `schedule zb` (passes/pipe_split.c, passes/recompute.c): each W instruction's loop (Module.pipe's order)
 * takes no stacked input its body (at any depth) does not read (one B alone reads is freed after B, not held to W),
 * and each F instruction's loop yields no stacked output nothing reads. Prints a FAIL line per loop that does;
 * returns their count (0 for a plan without zb). */
int tb_check_zb_reads(const Module *m, const char *what);

#endif
