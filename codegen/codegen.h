/* codegen/codegen.h — a planned Module to a trainer: C host source, then an executable. */
#ifndef SHARDC_CODEGEN_H
#define SHARDC_CODEGEN_H

#include <stdio.h>

#include "module.h"

typedef struct {
  const char *source_path; /* the .model path, recorded in the binary */
  const char *emit_dir;    /* keep the generated C here (--emit-c DIR); NULL: a temporary folder */
  const char *cc;          /* C compiler; NULL: $CC or "cc" */
  const char *cflags;      /* extra flags; NULL: "-O1" */
  bool verbose;            /* print the compiler command */
  const char *runtime_include; /* the runtime's headers (program.h, ops/, cuda/); NULL: the build tree's */
  const char *runtime_lib;     /* the folder of libshardrt.a (and libshardrt_cuda.a); NULL: the build tree's */
  bool llvm_kernels;       /* --cpu-kernels llvm: the CPU target's elementwise runs and AdamW built by LLVM */
  const char *obj_path;    /* where those kernels' object file goes (build.c sets it); NULL: nowhere */
  bool no_outline;         /* --no-outline: a pipeline's instructions each written out (codegen/outline.c) */
} CgOptions;

/* The CPU kernels when --cpu-kernels is not given: LLVM's (true) where LLVM can build for this host,
 * else the C kernels, with a note saying why (codegen/target_llvm.c). */
bool cg_default_llvm_kernels(void);

/* Writes the C host program for m (after pass_memplan) to f. Returns false on
 * an op the CPU target cannot run yet (reported as an error). */
bool cg_emit_c(FILE *f, const Module *m, const CgOptions *o);
/* Writes the C program to dir/<model>.c without compiling it (shardc plan --emit-c DIR). */
bool cg_emit_file(const Module *m, const char *dir, const CgOptions *o);
/* Emits the C program and compiles and links it with libshardrt into `out`. */
bool cg_build(const Module *m, const char *out, const CgOptions *o);
/* Writes the Slurm batch script for m's plan (codegen/sbatch.c): nodes, tasks, GPUs per task, and
 * the restart launcher `launch` running `srun -n WORLD trainer`. false after reporting an error. */
bool cg_write_sbatch(const Module *m, const char *path, const char *trainer, const char *launch, int warn_s,
                     const char *warn_why);

#endif
