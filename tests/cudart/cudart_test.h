/* tests/cudart/cudart_test.h — what test_cudart.c (emu, gpu, nvrtc, nogpu) and cudart_train.c (train,
 * the trainer's no-GPU message) share. */
#ifndef CUDART_TEST_H
#define CUDART_TEST_H

#include <stdio.h>
#include "../check.h" /* CHECK */

extern int failures;
extern const char *kSource; /* the hand-made program's two kernels */

int test_train(void);    /* rt_train_main on a device program against the CPU program */
int trainer_nogpu(void);
void cudart_write_text(const char *path, const char *text); /* replaces path's content (cudart_attn_tune.c) */
int test_gemm_tune(const char *which); /* the GEMM autotuning's record per rank (cudart_gemm_tune.c) */
int test_attn_tune(const char *which); /* rt_cu_launch_tuned on the device which (cudart_attn_tune.c) */ /* the trainer of a device program without a GPU: exit 1, the message */

#endif
