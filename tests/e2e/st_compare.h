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

enum { ST_ABS, ST_L2, ST_RMAX }; /* st_compare's modes */

/* Every F32 / BF16 tensor of ref must be in got with the same element count. With ST_ABS an element
 * is off when |got - ref| > tol, and a tensor fails when more than frac of its elements are off; with
 * ST_L2 a tensor fails when ||got - ref|| / ||ref|| > tol; with ST_RMAX when max |got - ref| > tol
 * max |ref|. Prints the worst difference (stdout) and each failure (stderr). Returns the number of
 * failures (1 when a file cannot be read). */
int st_compare(const char *ref, const char *got, double tol, int mode, double frac);

/* AdamW's sensitivity to its gradient: how far one element's update lr m^ / (sqrt(v^) + eps) moves when
 * the gradients behind m^ and v^ move by at most dg (each step's, at this element), sqrt(v^) = vhat the
 * reference's. |m^ - m^'| <= dg and |sqrt(v^) - sqrt(v^')| <= dg (v^ is a weighted sum of squares: the
 * triangle inequality), and |m^'| <= sqrt(v^') (equal at step 1; by Cauchy-Schwarz within 0.04% for two
 * steps of betas (0.9, 0.95), the most the tests compare), so the update moves by at most
 *   |dm| / (vhat + eps) + |m^'| |ds| / ((vhat + eps) (sqrt(v^') + eps)) <= 2 lr dg / (vhat + eps),
 * and never by more than 2 lr (each update is at most lr in size). Near vhat ~ eps a gradient
 * difference far below lr is amplified by lr / eps: the bound says by how much. */
double st_adam_bound(double lr, double dg, double vhat, double eps);

/* The parameters of two runs of `steps` AdamW steps (lr[s] at step s + 1, beta2, eps), whose clipped
 * gradients differ by at most r times the largest of each parameter's at every step: each step's
 * update moves by at most st_adam_bound(lr, r G, sqrt(v^), eps) (G >= the largest |g|). Every
 * element of every F32 tensor of ref must be within tol plus that sum over the steps, v^ taken from
 * ref_opt[s] (the reference's optimizer file after step s + 1, its adam_v:NAME). Prints the largest
 * difference, how many elements are beyond tol, and the one closest to its bound (stdout), each
 * failure (stderr). Returns the number of failures. */
int st_compare_adam(const char *ref, const char *got, const char *const *ref_opt, const double *lr, int steps,
                    double tol, double r, double eps, double beta2);

#endif
