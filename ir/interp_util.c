/* ir/interp_util.c — the reference interpreter's leaf helpers: fp64 tensors, a rank's mesh
 * coordinate, runtime errors. Every other interpreter file calls these; they call none of them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "interp_internal.h"

/* ---- tensors ------------------------------------------------------------ */

void *interp_xcalloc(size_t n, size_t sz) {
  void *p = calloc(n ? n : 1, sz);
  if (!p) die("interp: out of memory (%zu x %zu bytes)", n, sz);
  return p;
}

Tensor tensor_new(DType dt, Shape s) {
  Tensor t = {dt, s, NULL};
  t.data = interp_xcalloc((size_t)ir_numel(&s), sizeof(double));
  return t;
}

void tensor_free(Tensor *t) {
  if (!t) return;
  free(t->data);
  t->data = NULL;
}

Tensor tensor_copy(const Tensor *t) {
  Tensor c = tensor_new(t->dtype, t->shape);
  memcpy(c.data, t->data, sizeof(double) * (size_t)ir_numel(&t->shape));
  return c;
}

/* ---- ranks and errors ------------------------------------------------------ */

int interp_coord(const Interp *it, int rank, MeshAxis ax) {
  if ((unsigned)ax >= RT_AX_COUNT) die("interp: bad mesh axis %d", (int)ax);
  int c[RT_AX_COUNT];
  rt_mesh_coords(&it->mesh, rank, c);
  return c[ax];
}

int interp_group(const Interp *it, const Node *n, int rank, int *me, int *members) {
  if ((unsigned)n->a.mesh_axis >= RT_AX_COUNT) die("interp: bad mesh axis %d", n->a.mesh_axis);
  unsigned mask = (1u << n->a.mesh_axis) | (n->a.mesh_with & RT_MESH_ALL);
  *me = rt_mesh_group_index(&it->mesh, rank, mask);
  return members ? rt_mesh_group(&it->mesh, rank, mask, members) : rt_mesh_group_size(&it->mesh, mask);
}

bool interp_error(const Node *n, const char *fmt, ...) {
  if (n && n->loc.file)
    fprintf(stderr, "%s:%d:%d: runtime error: %s: ", n->loc.file, n->loc.line, n->loc.col, ir_ops[n->op].name);
  else
    fprintf(stderr, "interp: runtime error: %s: ", n ? ir_ops[n->op].name : "?");
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return false;
}

bool interp_on_stage(const Interp *it, const Node *n, int rank) {
  return ir_runs_on(n, interp_coord(it, rank, RT_AX_PP));
}
