/* ir/infer_int.h — what the shape rules' files (infer.c, infer_attn.c) share: formatting a shape
 * for a message, the operands, and the checks that report a mismatch at the node. */
#ifndef SHARDC_INFER_INT_H
#define SHARDC_INFER_INT_H

#include <stdio.h>

#include "diag.h"
#include "infer.h"

/* Formats a shape as "[4, 64, 768]" into one of a few rotating static buffers. */
static inline const char *shp(const Shape *s) {
  static char bufs[8][96];
  static int next;
  char *b = bufs[next++ & 7];
  int o = snprintf(b, 96, "[");
  for (int i = 0; i < s->rank && o < 90; i++)
    o += snprintf(b + o, (size_t)(96 - o), "%s%lld", i ? ", " : "", (long long)s->dim[i]);
  snprintf(b + o, (size_t)(96 - o), "]");
  return b;
}

static inline const char *opname(const Node *n) { return ir_ops[n->op].name; }

static inline Value *in(const Node *n, int i) { return n->in[i]; }
static inline Value *out(const Node *n, int i) { return n->out[i]; }

static inline void set_out(Node *n, int i, DType dt, Shape s) {
  n->out[i]->dtype = dt;
  n->out[i]->shape = s;
}

static inline bool need_float(const Node *n, int i, const char *what) {
  if (ir_dtype_is_float(in(n, i)->dtype)) return true;
  error_at(n->loc, "%s: %s must be a float tensor, got %s%s", opname(n), what,
           ir_dtype_name(in(n, i)->dtype), shp(&in(n, i)->shape));
  return false;
}

static inline bool need_int(const Node *n, int i, const char *what) {
  if (!ir_dtype_is_float(in(n, i)->dtype)) return true;
  error_at(n->loc, "%s: %s must be an integer tensor, got %s%s", opname(n), what,
           ir_dtype_name(in(n, i)->dtype), shp(&in(n, i)->shape));
  return false;
}

static inline bool need_rank_min(const Node *n, int i, int r, const char *what) {
  if (in(n, i)->shape.rank >= r) return true;
  error_at(n->loc, "%s: %s must have rank >= %d, got %s", opname(n), what, r, shp(&in(n, i)->shape));
  return false;
}

static inline bool need_same(const Node *n, int i, int j, const char *wi, const char *wj) {
  if (ir_shape_eq(&in(n, i)->shape, &in(n, j)->shape)) return true;
  error_at(n->loc, "%s: %s and %s shapes differ: %s vs %s", opname(n), wi, wj, shp(&in(n, i)->shape),
           shp(&in(n, j)->shape));
  return false;
}

/* The attention, RoPE and cross-entropy ops' rules (infer_attn.c). */
bool ir_infer_attn(Node *n);

#endif
