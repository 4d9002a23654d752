/* passes/plan_compare.h — `shardc plan --compare SPEC`: several plans of a model side by side
 * (docs/planner.md): memory per rank by class, traffic per link class and the busiest link, the
 * predicted step and tokens/s, the checkpoint's size and write time.
 *
 * SPEC: whitespace- or ';'-separated items; KEY=V1,V2,... a knob and its values (several knobs:
 * every combination, the first knob slowest), any other item a .model file compiled as it is.
 * "zero=0,1,2,3", "tp=1,2 zero=0,3", "b.model c.model". The command line's -D options apply to
 * every variant, a variant's own after them; with files, the command line's own file is the first. Each variant is compiled in full by the driver (its
 * memory is the memory plan's, its time the cost model's, its checkpoint passes/storage.c's).
 */
#ifndef SHARDC_PLAN_COMPARE_H
#define SHARDC_PLAN_COMPARE_H

#include <stdio.h>

#include "cost.h"
#include "memplan.h"
#include "module.h"
#include "storage.h"

enum { COMPARE_MAX = 16, COMPARE_KV = 4, COMPARE_KV_LEN = 48 };

typedef struct {
  char label[64];                      /* "zero=1 tp=2" or the file's name */
  const char *file;                    /* a .model file (NULL: the command line's, with kv) */
  int nkv;
  char kv[COMPARE_KV][COMPARE_KV_LEN]; /* "zero=1" */
  /* filled by plan_compare_measure, or err */
  bool ok;
  char err[160];                       /* the compiler's first error */
  bool fits;
  double mem_total, capacity;
  int64_t by_class[MEM_COUNT];
  int dim[RT_AX_COUNT];
  CostDevice dev;
  CostReport cost;
  TrafficReport traffic;
  CkptReport ckpt;
} CompareCol;

/* Splits SPEC into variants (at most COMPARE_MAX); false after an error naming what is wrong. */
bool plan_compare_parse(const char *spec, const char *input, CompareCol *cols, int *ncols);
/* Fills col from its compiled module (after pipeline_run) and its device figures. */
void plan_compare_measure(const Module *m, const CostDevice *dev, double storage_Bps, CompareCol *col);
/* The table: one column per variant. */
void plan_compare_print(FILE *f, const Module *first, const CompareCol *cols, int n, double storage_Bps);

#endif
