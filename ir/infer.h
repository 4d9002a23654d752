/* ir/infer.h — shape and dtype rules for every op. */
#ifndef SHARDC_INFER_H
#define SHARDC_INFER_H

#include "ir.h"

/* Computes n's output dtypes and shapes from its inputs and attrs (REPEAT/CALL:
 * from the body's results). On a mismatch the user could have caused, reports
 * error_at(n->loc, ...) naming the op and the offending shapes, and returns false. */
bool ir_infer(Node *n);

/* numpy broadcasting of a and b into *r (dims keep a symbol where one side has it); false on a
 * mismatch, with the offending right-aligned dims in *da, *db. */
bool ir_broadcast(const Shape *a, const Shape *b, Shape *r, int64_t *da, int64_t *db);
/* True when `small` broadcasts to `big` (numpy rules, one direction). */
bool ir_broadcasts_to(const Shape *small, const Shape *big);
/* Elementwise dtype promotion: floats over integers, wider floats first. */
DType ir_promote(DType a, DType b);

#endif
