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

#endif
