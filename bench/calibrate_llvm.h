/* bench/calibrate_llvm.h — the LLVM-built elementwise kernels' rates for bench_calibrate (calibrate_llvm.c). */
#ifndef SHARDC_CALIBRATE_LLVM_H
#define SHARDC_CALIBRATE_LLVM_H

#include <stdbool.h>
#include <stdint.h>

/* Seconds per call of f(arg) (calibrate.c's time_call: CPU time, the best of 5 rounds). */
typedef void (*CalFn)(void *);
typedef double (*CalTimer)(CalFn f, void *arg);

/* What is measured: a flat add, gelu, exp (the profile's llvm_elem_flat_s, llvm_elem_tanh_s, llvm_elem_exp_s). */
enum { CAL_LLVM_FLAT, CAL_LLVM_TANH, CAL_LLVM_EXP, CAL_LLVM_COUNT };

/* Seconds per element of the LLVM kernels over x (and b), into y, n floats each; false with the reason in *why
 * (malloc'd) when LLVM cannot build them here. */
bool calibrate_llvm_elem(CalTimer timer, float *x, float *b, float *y, int64_t n, double t[CAL_LLVM_COUNT], char **why);

#endif
