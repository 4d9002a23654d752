/* ir/interp_internal.h — what the reference interpreter's files share (not an API: ir/interp.h is).
 *
 *   interp.c       state, sources, sharded blocks, the graph walk (regions, steps)
 *   interp_ops.c   the op kernels: one rank's evaluation of every local op
 *   interp_attn.c  its attention kernels: rope, sdpa, and ring attention's blocks
 *   interp_coll.c  the simulated collectives and point-to-point messages
 *   interp_util.c  tensors, coordinates, errors (the leaf: calls none of the others)
 * Calls go one way: interp.c -> interp_coll.c -> interp_ops.c -> interp_attn.c -> interp_util.c.
 */
#ifndef SHARDC_INTERP_INTERNAL_H
#define SHARDC_INTERP_INTERNAL_H

#include "interp.h"
#include "ptrmap.h"

typedef struct {
  const Node *node; /* PARAM / STATE / INPUT */
  Tensor *val;      /* [nranks]; data NULL while unset (INPUT) */
} Source;

typedef struct {
  int src, dst, tag; /* ranks, SEND/RECV tag */
  Tensor t;          /* payload */
} Message;

typedef struct {
  const char *name; /* result name (may be NULL) */
  Tensor *val;      /* [nranks] */
} Result;

struct Interp {
  const Graph *g;     /* top graph */
  MeshMap mesh;       /* the simulated ranks' mesh (runtime/mesh.h: the trainer's rank order) */
  int nranks;         /* mesh.world */
  uint64_t seed;      /* PARAM init seed */
  PtrMap pos;         /* Node* -> position, all graphs */
  Source *src;        /* [nsrc] */
  int nsrc;
  Result *res;        /* [nres] results of the last step */
  int nres;
  bool have_results;  /* a step has completed */
  Message *mail;      /* [nmail] in-flight point-to-point messages */
  int nmail, capmail;
};

/* interp_util.c */
void *interp_xcalloc(size_t n, size_t sz); /* calloc that dies when out of memory */
/* Prints "file:line:col: runtime error: op: ..." (the node's source) and returns false. */
bool interp_error(const Node *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The group of collective n (its mesh axis and Attrs.mesh_with's) that rank is in: its size, rank's
 * index in it (*me) and, with members non-NULL, its members in rank order (the group's index order). */
int interp_group(const Interp *it, const Node *n, int rank, int *me, int *members);

/* Whether rank runs n: a node with a pipeline stage (Node.stage) runs only on that stage's ranks. */
bool interp_on_stage(const Interp *it, const Node *n, int rank);

/* interp_ops.c */
/* One rank's value of a non-collective, non-region node: y from inputs x. */
bool interp_eval_local(Interp *it, const Node *n, int rank, Tensor *const *x, Tensor *y);
Tensor interp_slice_of(const Tensor *x, int axis, int64_t start, int64_t len);
/* ---- interp_attn.c ---- */
/* One rank's value of rope, rope_at, sdpa(_bwd), attn_block(_bwd), attn_combine. */
void interp_eval_attn(const Node *n, Tensor *const *x, Tensor *y);

/* This rank's chunk (blocks per ir_block_index) of x along axis; and the inverse over a group. */
Tensor interp_chunk_of(const Tensor *x, int axis, int deg, int c, int blocks, DType dt);
Tensor interp_unchunk_of(const Tensor *const *grp, int deg, int axis, int blocks, DType dt);

/* interp_coll.c: in[r] / out[r] per rank r */
bool interp_eval_coll(Interp *it, const Node *n, int k, const Tensor *in, Tensor *out);
void interp_eval_send(Interp *it, const Node *n, const Tensor *in);
bool interp_eval_recv(Interp *it, const Node *n, Tensor *out);

#endif
