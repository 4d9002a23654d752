/* tests/e2e/st_compare.h — compare two safetensors files tensor by tensor (st_compare.c). */
#ifndef ST_COMPARE_H
#define ST_COMPARE_H

#include <stddef.h>

#include "train/train.h" /* RtJson */

/* A safetensors file read whole: its header parsed, the data section's offset. */
typedef struct {
  char *buf;   /* whole file */
  size_t len;  /* bytes */
  RtJson *hdr; /* parsed header */
  size_t data; /* offset of the data section */
} St;

/* 1 when path was read and its header parsed (its length checked against the file); 0 otherwise. */
int st_load(St *s, const char *path);
void st_free(St *s);

/* Every F32 / BF16 tensor of ref must be in got with the same element count. With l2 = 0 an element
 * is off when |got - ref| > tol, and a tensor fails when more than frac of its elements are off; with
 * l2 = 1 a tensor fails when ||got - ref|| / ||ref|| > tol. Prints the worst difference (stdout) and
 * each failure (stderr). Returns the number of failures (1 when a file cannot be read). */
int st_compare(const char *ref, const char *got, double tol, int l2, double frac);

#endif
