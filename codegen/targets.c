/* codegen/targets.c — which backend emits a module's target (codegen/cg.h CgTarget). */
#include "cg.h"
#include "diag.h"

const CgTarget *cg_target_of(Target t, bool llvm_kernels) {
  switch (t) {
  case TARGET_CPU: return llvm_kernels ? &cg_target_llvm : &cg_target_cpu;
  case TARGET_CUDA: return &cg_target_cuda;
  }
  die("codegen: no backend for target %d", (int)t);
}
