/* ir/infer.h — shape and dtype rules for every op. */
#ifndef SHARDC_INFER_H
#define SHARDC_INFER_H

#include "ir.h"

/* Computes n's output dtypes and shapes from its inputs and attrs (REPEAT/CALL:
 * from the body's results). On a mismatch the user could have caused, reports
 * error_at(n->loc, ...) naming the op and the offending shapes, and returns false. */
bool ir_infer(Node *n);

#endif
