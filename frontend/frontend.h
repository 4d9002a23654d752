/* frontend/frontend.h — .model files to a Module. */
#ifndef SHARDC_FRONTEND_H
#define SHARDC_FRONTEND_H

#include "module.h"

typedef struct {
  const char *key, *value; /* -D key=value (value "1"/"on" for bare -D key) */
} FeDefine;

typedef struct {
  const char *const *import_dirs; /* searched after the importing file's folder */
  int nimport_dirs;
  const FeDefine *defines; /* plan/recipe/const overrides, applied after parsing */
  int ndefines;
  const char *topology_file; /* --topology FILE: replaces any topology block */
  int world; /* --world N: ranks the plan is for (0: the topology's); the mesh is resolved on it (ir/mesh.h) */
  const char *profile_file; /* --profile FILE: the device figures of the passes' cost model (Module.cost_profile) */
  bool cpu_llvm_kernels; /* the CPU trainer's kernels are LLVM's (Module.cpu_llvm_kernels; main.c's --cpu-kernels) */
} FeOptions;

/* Parses `path` and its imports, applies overrides, and lowers the model to IR
 * (layer calls stay CALL nodes until pass_inline). Reports every error it can
 * through ir/diag.h and returns NULL when there was any. */
Module *fe_compile(Arena *a, const char *path, const FeOptions *o);
/* The same from a string (tests, fuzzing); `name` is used in diagnostics. */
Module *fe_compile_source(Arena *a, const char *name, const char *text, const FeOptions *o);

#endif
