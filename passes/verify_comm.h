/* passes/verify_comm.h — the verify pass's check, callable on hand-made rank classes (tests).
 *
 * Every rank runs the program of its rank class. For each mesh axis, and each set of axes one
 * collective spans (the all-reduce over dp x cp), each group's members must issue the same
 * collectives over that group in the same order: same op, element count,
 * dtype, reduction and layout (tensor axis, blocks, root). Point-to-point sends must meet a
 * receive of the same size, dtype and tag at the peer, in order. A rank whose sequence differs
 * from its group peers' would hang or corrupt data at run time: a compiler bug.
 */
#ifndef SHARDC_VERIFY_COMM_H
#define SHARDC_VERIFY_COMM_H

#include <stddef.h>

#include "../ir/mesh.h"
#include "ir.h"

typedef struct {
  OpKind op;        /* a collective or send/recv */
  int mesh_axis;    /* MeshAxis of its group */
  unsigned group;   /* the mesh axes its group spans (bits 1 << MeshAxis): its axis, and Attrs.mesh_with's
                       (the gradients' all-reduce over dp x cp) */
  DType dtype;      /* of its first tensor */
  int ntensors;     /* all_reduce: tensors in the bucket; else 1 */
  int64_t numel;    /* elements, all tensors (reduce_scatter: input, all_gather: output) */
  int reduce;       /* all_reduce: ReduceOp; else 0 */
  int axis, blocks; /* reduce_scatter / all_gather: tensor axis and blocks; else 0 */
  int64_t start;    /* broadcast: root coordinate; send/recv: peer offset; else 0 */
  int tag;          /* send/recv */
  const Node *node; /* where it comes from */
  int64_t iter;     /* iteration of the innermost enclosing repeat, -1 outside any */
} VerifyColl;

typedef struct {
  VerifyColl *e; /* [n], in execution order */
  int n, cap;
} VerifyCollSeq;

/* The ordered collectives of one program, repeat bodies expanded `count` times. */
void verify_expand(const Graph *program, VerifyCollSeq *seq);
void verify_seq_free(VerifyCollSeq *seq);

/* Checks every group of mm: rank r runs programs[rank_class[r]] (rank_class has mm->world
 * entries, each in 0..nclasses-1). Classes are compared, not ranks: a group whose members
 * share one class is consistent by construction, and each pair of classes is compared once per
 * axis. Returns true when everything matches; else false with the first mismatch described in
 * msg (rank, group, collective index and both entries). */
bool verify_collectives(const MeshMap *mm, const Graph *const *programs, int nclasses, const int *rank_class,
                        char *msg, size_t size);

#endif
