/* codegen/cg.h — the emitter's state, the target interface, and the helpers targets share.
 *
 * codegen/emit.c walks the planned graph and writes the per-rank program, whatever the target:
 * the three entry points (step, eval, logits), a C loop per REPEAT, the collectives (calls of
 * runtime/ops/coll.h) and the waits of the asynchronous ones, the tensor table, the workspace
 * sizing and the RtProgram. What a compute node becomes is its target's: one backend per
 * target (codegen/target_cpu.c: libshardrt's CPU kernels; codegen/target_cuda.c: kernels
 * emitted by codegen/cuda_kernels.c, cuBLASLt GEMMs), reached only through a CgTarget.
 * A backend calls the helpers below (codegen/cg.c) and never another backend; codegen/targets.c
 * maps the module's Target to its backend. So calls go one way: emit.c -> targets.c -> a
 * backend -> cg.c (emit.c reaches a backend's functions only through its CgTarget).
 */
#ifndef SHARDC_CG_H
#define SHARDC_CG_H

#include <stdio.h>

#include "module.h"
#include "ptrmap.h"

typedef struct {
  const Node *arg;  /* an ARG of a body being emitted */
  const char *expr; /* the C pointer expression it stands for */
} ArgBind;

/* An asynchronous collective in flight (a data-parallel all-reduce, or a cp ring shift):
 * rt_coll_wait(ctx, tag) (rt_coll_shift_wait) goes before node `pos` of graph g (pos ==
 * g->nnodes: at the end of g, i.e. of the loop iteration). */
typedef struct {
  int tag;        /* the collective's id (Cg.next_tag when it started) */
  const Graph *g; /* the graph the wait goes in */
  int pos;        /* before this node of g */
  bool shift;     /* a ring shift's (rt_coll_shift_wait) */
  const Node *on; /* a collective some pipeline stages run (Node.stage, Node.stageset): waited on those only; NULL: every rank */
  int upload;     /* > 0: not a collective's but plan offload's upload of copy slot upload - 1 (the device waits) */
  const char *cond; /* non-NULL: waited only where this C condition holds (an all_gather `skiplast`: not started on
                       its loop's last iteration) */
} Wait;

/* Plan offload's copies (passes/offload_sched.c says where each goes; codegen/emit.c emits them). */
typedef enum {
  CG_TO_HOST_START,   /* a download (device -> host allocation) starts */
  CG_TO_DEVICE_START, /* an upload (host allocation -> device) starts */
  CG_HOST_WAIT,       /* the host waits for a slot's downloads */
  CG_DEVICE_WAIT,     /* the device waits for a slot's uploads */
} CgOffload;

/* A to_host of the top graph whose download starts before it (offload_issue, not where it stands). */
typedef struct {
  const Node *n;    /* the to_host */
  int after;        /* OffloadIssue.after */
  const Node *rows; /* OffloadIssue.rows */
} CgEarly;

typedef struct CgTarget CgTarget;

typedef struct Cg {
  FILE *f;              /* the program being written */
  const Module *m;      /* the planned module */
  Arena *a;             /* this emission's memory (strings, tables) */
  const CgTarget *t;    /* the backend */
  void *ts;             /* the backend's own state (its begin() sets it; CUDA: the kernels so far) */
  ArgBind *binds;       /* ARGs bound in the bodies being emitted, innermost last */
  int nargs, capargs;   /* used, allocated */
  const char **ws;      /* C expressions for each kernel's scratch need (bytes) */
  int nws, capws;       /* used, allocated */
  Wait *waits;          /* asynchronous all-reduces started and not yet waited, in emission order */
  int nwaits, capwaits; /* used, allocated */
  int next_tag;         /* id of the next asynchronous all-reduce */
  int pos;              /* position in its graph of the node being emitted */
  const bool *need;     /* the top graph's nodes the entry point being emitted runs (NULL: all) */
  const Node *once;     /* the logits entry under gradient accumulation: the micro-step loop, run for its
                           first micro-step only and of its body only the nodes body_need marks (emit.c) */
  const bool *body_need;
  int indent;           /* of the lines cg_line writes, in steps of two spaces */
  bool ok;              /* false once a node was refused (cg_unsupported) */
  uint64_t *rstage;     /* [top graph value id]: the pipeline stages reading it (ir_reader_stages, a mask) */
  const char *obj_path; /* where a backend that compiles its own kernels writes their object file
                           (CgOptions.obj_path; NULL: nowhere) */
  PtrMap uses;          /* value -> its reads in the module's graph and its bodies (ir_use_counts),
                           built at the first fused run (cg_ew_run): one walk, not one a member */
  PtrMap results;       /* value -> 1 when the graph defining it yields it (cg_ew_run) */
  bool indexed;         /* uses and results are built */
  bool outline;         /* mark a pipeline's instructions, for codegen/outline.c to write the recurring ones once */
  CgEarly *early;       /* plan offload: the downloads started early (passes/offload_sched.c) */
  int nearly;
  PtrMap deferred;      /* a loop body's deferred reduce-scatter (Node.defer_wait) -> 1 + its tag, reserved with its
                           waits when the loop is emitted (emit.c's defer_waits) */
} Cg;

/* A target: how compute nodes become code. emit.c calls only these; `node` is called for every
 * node that is not a source, a REPEAT, a collective (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER,
 * BROADCAST, SHARD_SLICE) or a CALL, which emit.c emits itself.
 *
 * Fusion groups (Node.group: passes/fuse.c, cut by passes/memplan.c where the placement needs)
 * are the target's to honour or not. A target that fuses runs, when `node` gets a group's member,
 * the members cg_group_run() names as one kernel and returns their number; emit.c then skips
 * them. A target that does not (the CPU target) emits node by node and returns 1. Every value
 * of a group has its bytes either way: a fused kernel stores what is read outside it.
 *
 * A new target (the LLVM CPU kernels) is a new file defining a CgTarget and one line in
 * codegen/targets.c; nodes it does not generate itself (GEMMs, ...) it may hand to another
 * target through that one's CgTarget (cg_target_cpu.node), never by calling its functions. */
struct CgTarget {
  const char *name;    /* "CPU", "CUDA": in "the %s target cannot run OP yet" */
  bool logits_tensor;  /* the program describes its logits (RtProgram.logits_tensor) even on one
                          rank (CUDA: sampling copies them off the device) */
  /* Before anything is written: sets up c->ts. */
  void (*begin)(Cg *c);
  /* The program's runtime headers and declarations; <stdint.h>, <string.h> and, multi-rank,
   * coll.h and mesh.h are already included. Ends with a blank line. */
  void (*prologue)(Cg *c);
  /* Emits node n (position c->pos of its graph): one or more statements, or nothing (a view
   * whose copy is elided). Returns how many nodes from n it emitted: 1, or a fused run's length. */
  int (*node)(Cg *c, Node *n);
  /* A statement copying `bytes` bytes from src to dst (C pointer expressions into M); overlap:
   * the two may overlap. */
  void (*copy)(Cg *c, const char *dst, const char *src, int64_t bytes, bool overlap);
  /* A statement zeroing `bytes` bytes at dst (a C pointer expression into M). */
  void (*zero)(Cg *c, const char *dst, int64_t bytes);
  /* After the three entry points, before workspace_bytes(): the target's definitions (CUDA: the
   * kernels' source) and its remaining workspace needs (cg_ws_need). */
  void (*finish)(Cg *c);
  /* The target's fields of the RtProgram initializer, one "  .field = value,\n" each (or none). */
  void (*program)(Cg *c);
  /* Plan offload's copies: a statement starting a copy of `bytes` from src to dst (C pointer
   * expressions; one in the host allocation) that ends copy slot `slot`, or waiting for a slot
   * (dst, src: NULL). NULL: a target without host values (the CPU's: offload is a no-op there). */
  void (*offload)(Cg *c, CgOffload what, const char *dst, const char *src, int64_t bytes, int slot);
  /* Whether a call of the runtime's `name` (rt_...) that `node` writes is a kernel call, which the program counts
   * (codegen/emit_kcount.c): the CPU's kernels, the CUDA target's launches and GEMMs (CgCall). */
  int (*kernel_call)(const char *name);
};

extern const CgTarget cg_target_cpu;  /* codegen/target_cpu.c */
extern const CgTarget cg_target_cuda; /* codegen/target_cuda.c */
extern const CgTarget cg_target_llvm; /* codegen/target_llvm.c: the CPU target, LLVM-built kernels */
/* What a runtime call a target's `node` writes is (CgTarget.kernel_call): none of the kernel calls the program
 * counts, one, or one with every other call of its name in the node's code (the pieces of a slice, pad or concat,
 * cg_block_copies: one node's copy, as the cost model counts it). */
typedef enum { CG_CALL_NONE, CG_CALL_KERNEL, CG_CALL_NODE } CgCall;
/* The CPU targets' kernel_call (codegen/target_cpu.c). */
int cg_cpu_kernel_call(const char *name);
/* The backend of a module's target (codegen/targets.c); llvm_kernels: --cpu-kernels llvm. */
const CgTarget *cg_target_of(Target t, bool llvm_kernels);

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
/* dst = src when they live in different places (the target's copy). */
void cg_copy_if_moved(Cg *c, const Value *dst, const Value *src);
/* OP_SLICE, OP_PAD and OP_CONCAT as strided block copies, each a call of `copy`: the runtime's block
 * copy up to its first argument ("rt_copy_block(" on the CPU, "rt_cu_copy_block(ctx, " on the device),
 * which takes (dst, dst rows, dst at, src, src rows, src at, outer, rows, inner, element bytes); a
 * pad's y zeroed first (the target's zero); a slice that is a view of x: the copy if it moved. */
void cg_block_copies(Cg *c, const Node *n, const char *copy);
/* Reports that the target cannot run n (an error at n's location); emission goes on. */
void cg_unsupported(Cg *c, const Node *n, const char *why);
const char *cg_axis_lit(int axis);
const char *cg_dtype_lit(DType dt);
/* (outer, len, inner) of a tensor axis: the elements before it, its length, after it. */
void cg_axis_split(const Shape *s, int axis, int64_t *outer, int64_t *len, int64_t *inner);
/* How many nodes from n (at c->pos) the entry point being emitted runs as one fused kernel:
 * n's group members from n on, up to the first one the entry point does not run. The memory
 * plan made each whole group safe as one kernel, and so each first part of one; members after
 * a gap (eval and logits skip what they do not need) run together only if they read nothing an
 * earlier member of the group wrote, else one by one. 1 when n is in no group. */
int cg_group_run(const Cg *c, const Node *n);
/* Whether the entry point being emitted runs node i of g (a body: all of them, but Cg.once's). */
bool cg_runs(const Cg *c, const Graph *g, int i);

/* An elementwise node, as passes/fuse.c counts them: an F_EW op, a CONST or a BROADCAST_TO. */
bool cg_elementwise(const Node *n);

enum { CG_EW_MAX = 32 }; /* members and outside inputs of an elementwise run (>= FUSE_MAX_*) */

/* An elementwise run as one kernel: the cg_group_run(c, first) nodes from `first` (c->pos), the
 * values they read from outside in first-read order (as passes/fuse.c counts them), each member's
 * operands, and which members' values the kernel must store (read outside the run, or results). */
typedef struct {
  Node *mem[CG_EW_MAX];   /* the run's nodes, in order */
  int n;                  /* how many */
  Value *ext[CG_EW_MAX];  /* values read from outside */
  int next;               /* how many */
  int in[CG_EW_MAX][2];   /* member i's operand k (k < its arity, at most 2): a member >= 0, or -1 - an ext */
  bool stored[CG_EW_MAX]; /* member i's value is read outside the run */
  int nstored;            /* how many are */
} CgEwRun;
void cg_ew_run(Cg *c, Node *first, CgEwRun *r);

/* The tensor table (codegen/emit_table.c). */
/* The result of g named name, or NULL. */
Value *cg_result(const Graph *g, const char *name);
/* The output of g's node of kind op (PARAM, STATE, INPUT) named name, or NULL. */
Value *cg_find_source(const Graph *g, OpKind op, const char *name);
/* How the trainer sees input v: under gradient accumulation [accum * B, ...] rows of [accum, B, ...]. */
Value cg_trainer_view(const Graph *g, const Value *v);
/* Writes `tensors[]` (and `logits_tensor` when logits is given); returns the table's length. */
int cg_emit_tensor_table(Cg *c, const Value *logits);
/* The plan's collectives per step, per pipeline stage: `coll_plan[]` (emit_coll.c); returns its stages (0: none). */
int cg_emit_coll_plan(Cg *c);
/* Node n's code by emit (the target's `node`, or emit.c's for a shard slice), each line that calls kernels preceded
 * by the count of them (codegen/emit_kcount.c); returns what emit returned. */
int cg_emit_counted(Cg *c, Node *n, int (*emit)(Cg *c, Node *n));
/* The plan's kernel calls per step, per pipeline stage and class: `kern_plan[]` (emit_kcount.c); returns its stages. */
int cg_emit_kern_plan(Cg *c);

#endif
