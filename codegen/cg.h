/* codegen/cg.h — the host-program emitter's state and helpers, shared by the targets.
 *
 * codegen/c.c walks the planned graph and writes the per-rank host program (entry points,
 * loops for REPEATs, the tensor table, the RtProgram); each node becomes runtime calls.
 * On the CPU target those are the kernels of libshardrt; on the CUDA target (codegen/cuda.c)
 * they are launches of kernels emitted by codegen/cuda_kernels.c and cuBLASLt GEMMs.
 */
#ifndef SHARDC_CG_H
#define SHARDC_CG_H

#include <stdio.h>

#include "module.h"

typedef struct {
  const Node *arg;  /* an ARG of a body being emitted */
  const char *expr; /* the C pointer expression it stands for */
} ArgBind;

/* An asynchronous (data-parallel) all-reduce in flight: rt_coll_wait(ctx, tag) goes before
 * node `pos` of graph g (pos == g->nnodes: at the end of g, i.e. of the loop iteration). */
typedef struct {
  int tag;
  const Graph *g;
  int pos;
} Wait;

struct CuK;

typedef struct Cg {
  FILE *f;
  const Module *m;
  Arena *a;
  ArgBind *binds; /* innermost last */
  int nargs, capargs;
  const char **ws;  /* C expressions for each kernel's scratch need (bytes) */
  int nws, capws;
  Wait *waits;      /* asynchronous all-reduces started and not yet waited, in emission order */
  int nwaits, capwaits;
  int next_tag;     /* id of the next asynchronous all-reduce */
  int pos;          /* position in its graph of the node being emitted */
  const bool *need; /* the top graph's nodes the entry point being emitted runs (NULL: all) */
  int indent;
  bool ok;
  bool cuda;        /* the CUDA target: M is device memory, nodes go to codegen/cuda.c */
  struct CuK *k;    /* CUDA: the program's kernels so far */
  const Node **done; /* CUDA: nodes already emitted as part of a fused kernel (this entry point) */
  int ndone, capdone;
} Cg;

void cg_line(Cg *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cg_depth_of(const Graph *g);
/* C expression (char *) for where v lives. */
const char *cg_ptr(Cg *c, const Value *v);
const char *cg_shape_lit(Cg *c, const Shape *s);
int64_t cg_bytes(const Value *v);
int64_t cg_prod(const Shape *s, int from, int to);
const char *cg_cstr(Cg *c, const char *s);
/* Records a kernel's workspace need (a C expression); the program's workspace is their max. */
void cg_ws_need(Cg *c, const char *expr);
/* dst = src when they live in different places (memcpy, or a device copy on CUDA). */
void cg_copy_if_moved(Cg *c, const Value *dst, const Value *src);
/* Reports that the target cannot run n (an error at n's location); emission goes on. */
void cg_unsupported(Cg *c, const Node *n, const char *why);
const char *cg_axis_lit(int axis);
const char *cg_dtype_lit(DType dt);
/* (outer, len, inner) of a tensor axis: the elements before it, its length, after it. */
void cg_axis_split(const Shape *s, int axis, int64_t *outer, int64_t *len, int64_t *inner);

/* An ALL_REDUCE as coll.h calls (data-parallel buckets started asynchronously, their waits
 * placed before the first reader); both targets. */
void cg_all_reduce(Cg *c, Node *n);
/* ALL_GATHER, REDUCE_SCATTER, BROADCAST, SHARD_SLICE: the coll.h call with packing scratch ws
 * (an expression) lying ws_off bytes into the workspace. */
void cg_collective(Cg *c, const Node *n, const char *ws, int ws_off);

/* codegen/cuda.c: one node of the CUDA target's host program. */
void cg_cuda_node(Cg *c, Node *n);
/* Whether n was already emitted inside a fused kernel of the entry point being written. */
bool cg_cuda_done(const Cg *c, const Node *n);

#endif
