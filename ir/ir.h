/* ir/ir.h — shardc's graph IR: one node type, values with shape, dtype and sharding.
 *
 * A Graph is a list of Nodes in topological order (the builder appends, so a
 * node's inputs always precede it). A Node has an op from ir/ops.def, input
 * Values, output Values (most ops have one) and Attrs. Region ops (REPEAT,
 * CALL) own a body Graph whose ARG nodes are the region's arguments and whose
 * `results` are what the region yields.
 *
 * All compiler memory comes from one Arena per compilation (ir/arena.h).
 */
#ifndef SHARDC_IR_H
#define SHARDC_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../runtime/dtype.h"
#include "../runtime/mesh.h"
#include "arena.h"
#include "ptrmap.h"

/* ---- ops -------------------------------------------------------------- */
enum {
  F_SOURCE = 1 << 0,
  F_STATE = 1 << 1,
  F_EW = 1 << 2,
  F_COLL = 1 << 3,
  F_GRAD = 1 << 4,
  F_REGION = 1 << 5,
};

typedef enum {
#define OP(name, str, nin, nout, flags) OP_##name,
#include "ops.def"
#undef OP
  OP_COUNT
} OpKind;

typedef struct {
  const char *name; /* lower-case, as printed */
  int nin;          /* -1: variadic */
  int nout;         /* -1: variadic */
  unsigned flags;   /* F_* */
} OpInfo;

extern const OpInfo ir_ops[OP_COUNT];

/* ---- types ------------------------------------------------------------ */
/* The element types: runtime/dtype.h's one table (RT_DTYPES), as DT_* in the compiler; DT_x ==
 * RT_x, checked at compile time in ir/ir.c, so a DType is passed to the runtime as it is. */
typedef enum {
#define RT_DTYPE(id, name, size, is_float) DT_##id,
  RT_DTYPES(RT_DTYPE)
#undef RT_DTYPE
  DT_COUNT
} DType;

const char *ir_dtype_name(DType dt); /* "f32", "bf16", ... */
int ir_dtype_size(DType dt);         /* bytes per element */
bool ir_dtype_is_float(DType dt);

#define IR_MAX_RANK 6

/* A dim may carry a symbol (batch, seq, ...) for printing; its value is always bound. */
typedef struct {
  int rank;
  int64_t dim[IR_MAX_RANK];
  int16_t sym[IR_MAX_RANK]; /* index into Module.syms, or -1 */
} Shape;

int64_t ir_numel(const Shape *s);
bool ir_shape_eq(const Shape *a, const Shape *b); /* dims only, symbols ignored */
Shape ir_shape(int rank, const int64_t *dims);    /* symbols cleared */
Shape ir_scalar_shape(void);
Shape ir_stacked_shape(Shape s, int64_t k); /* [k, s...]: k values of shape s stacked */

/* ---- sharding over the device mesh ------------------------------------- */
/* The mesh axes are runtime/mesh.h's MeshAxis (RT_AX_DP, RT_AX_PP, RT_AX_CP, RT_AX_TP): one enum
 * for the compiler, the runtime and the programs codegen writes; rt_mesh_axis_name names them. */

/* For each tensor dim, which mesh axis splits it (-1: not split); plus the
 * mesh axes over which the value is a partial sum still owed (Partial).
 * All-zero-initialised memory is NOT the replicated sharding: use ir_replicated(). */
typedef struct {
  int8_t split[IR_MAX_RANK];  /* mesh axis or -1 */
  uint8_t blocks[IR_MAX_RANK]; /* split dims: the dim is this many equal blocks, each split over the axis
                                  (a fused QKV's columns); 0 or 1: one block (a contiguous split) */
  int8_t inner[IR_MAX_RANK];  /* a second mesh axis (-1: none) splitting a split dim's local extent
                                 again, contiguously: sequence parallelism's tp inside context
                                 parallelism's cp chunks ({S(cp)@1/zigzag>S(tp)}); the local dim is
                                 logical / (deg(split) x deg(inner)) (ir_sharded_index) */
  uint8_t partial;            /* bit (1 << MeshAxis) per axis */
} Sharding;

/* Logical index along a dim of size n_local * degree split in `blocks` blocks (0: 1), of
 * local index l on the rank with coordinate c: the layout every sharded tensor uses. */
int64_t ir_block_index(int64_t n_local, int blocks, int degree, int c, int64_t l);

/* Logical index along a dim split over an outer axis (degree `degree`, coordinate c, `blocks`)
 * and then an inner one (degree ideg, coordinate ic; 1: none) of local index l: the inner split
 * cuts the outer's local extent contiguously. */
int64_t ir_sharded_index(int64_t n_local, int blocks, int degree, int c, int ideg, int ic, int64_t l);
/* The sharding of a value with k stacked dims put in front (k > 0, unsplit) or its first -k dims
 * dropped (k < 0): every per-dim field moved. */
Sharding ir_sharding_shift(Sharding h, int k);

Sharding ir_replicated(void);
bool ir_sharding_is_replicated(const Sharding *s);
/* How many ranks of mesh mm split dim d of h (its axis's degree times its inner axis's; 1: none,
 * or no mesh), and the mesh axes splitting some dim (bits 1 << MeshAxis, degree > 1): the runtime's
 * rt_tensor_logical_dims and rt_tensor_split_mask (runtime/train/layout.c) for a table tensor. */
int ir_dim_degree(const Sharding *h, int d, const MeshMap *mm);
unsigned ir_split_mask(const Sharding *h, int rank, const MeshMap *mm);

/* ---- source locations ----------------------------------------------------- */
typedef struct {
  const char *file; /* NULL: no location (compiler-made) */
  int line, col;    /* 1-based */
} SrcLoc;

/* ---- graph -------------------------------------------------------------- */
typedef struct Value Value;
typedef struct Node Node;
typedef struct Graph Graph;

struct Value {
  Node *def;   /* producing node */
  int idx;     /* which output of def */
  int id;      /* number for printing; unique within its graph */
  DType dtype;
  Shape shape;
  Sharding sharding;
  const char *name; /* optional, for printing / checkpoint names */
  bool host;        /* memory space: the rank's host memory (plan `offload` on a device target, decided by
                       passes/zero.c; printed `@host` after the type), not the target's allocation */
  /* Set by passes/memplan.c: where the value lives in its rank's one allocation.
   * Values in a REPEAT body that are stacked ys live at offset + i * stride bytes in
   * iteration i (stride 0: the same place every iteration). offset -1: not placed
   * (an alias: ARGs, values that never need memory); IR_OFFSET_VIEW: a view (reshape, a cast to
   * its own dtype) of a region's argument, or of such a view, at its input's place, whatever
   * binds it. */
  int64_t offset; /* bytes from the rank's base */
#define IR_OFFSET_VIEW ((int64_t)-3)
  int64_t stride; /* bytes per REPEAT iteration */
  int64_t ld;     /* elements between consecutive rows (the last axis's) where the value is a column slice of
                     a wider tensor at offset (memplan's strided views, passes/memplan_views.c); 0: its rows
                     are contiguous */
  int mclass;     /* MemClass (passes/memplan.h) */
  /* A loop's carry kept in the stack its body saves the carry into (memplan_carry_in_stack): in
   * iteration i it lives at offset + i * stride (the stack's slice i + 1, where the next
   * iteration's input is saved), but in the last iteration at last_in (the loop's output). */
  const Value *last_in;
};

typedef enum { INIT_ZEROS, INIT_ONES, INIT_NORMAL, INIT_UNIFORM, INIT_CONST } InitKind;
typedef enum { RED_SUM, RED_AVG, RED_MAX } ReduceOp;

/* Op attributes. Each op uses the fields its ops.def comment names; the rest stay zero. */
typedef struct {
  const char *name;       /* INPUT/PARAM/STATE name; REPEAT/CALL name */
  int index;              /* ARG: argument index */
  int axis;               /* SLICE/PAD/CONCAT/REDUCE_SCATTER/ALL_GATHER: tensor axis (>= 0) */
  int64_t start, len;     /* SLICE/PAD/ROPE/IOTA/CROSS_ENTROPY/BROADCAST/SEND/RECV */
  int heads, kv_heads;    /* SDPA/ROPE */
  bool causal;            /* SDPA */
  bool ta, tb;            /* MATMUL transposes */
  bool cb;                /* MATMUL: its leading dims are contracted too (ta, not tb, both operands [.., k, *] with
                             one leading shape): y[m, n] = sum over them of A^T B, one GEMM over the rows of both
                             (a weight's gradient whose tokens are split over cp; ir_gemm_dims) */
  bool inverse;           /* ROPE */
  double eps;             /* norms, AdamW */
  double scalar;          /* CONST/SCALE/ADD_SCALAR */
  double theta;           /* ROPE base */
  double beta1, beta2, weight_decay, momentum; /* optimizer updates */
  InitKind init;          /* PARAM */
  double init_a, init_b;  /* PARAM: normal(mean a, std b), uniform(a, b), const a */
  int mesh_axis;          /* collectives, AXIS_INDEX: a MeshAxis */
  uint8_t mesh_with;      /* ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, SHARD_SLICE: further axes (bits 1 << MeshAxis)
                             its group spans with mesh_axis: one collective over their combined group, members in
                             rank order (the gradients' all-reduce over dp x cp; ZeRO's shards over dp x cp, split
                             over dp and then cp: Sharding.inner); 0: mesh_axis alone */
  ReduceOp reduce;        /* ALL_REDUCE */
  int tag;                /* SEND/RECV */
  int64_t count;          /* REPEAT: iterations */
  int ncarry, nxs;        /* REPEAT: carried values, stacked inputs */
  bool reverse;           /* REPEAT: iterate count-1 .. 0 */
  bool next;              /* ARG of a REPEAT's stacked input: iteration i reads row i+1 (reverse: i-1), modulo
                             count, not row i (ZeRO-3's gather of the next layer, passes/zero.c) */
  bool skiplast;          /* ALL_GATHER in a REPEAT's body: not issued on the loop's last iteration, whose
                             output nothing reads then (ZeRO-3's prefetch of the next layer, passes/zero.c:
                             a loop of L layers gathers L - 1 rows; its output is zeros there) */
  bool sharded;           /* EMBED/EMBED_BWD/CE_*: the vocab dim is split over mesh_axis (this rank holds block coord) */
  int blocks;             /* ALL_GATHER/REDUCE_SCATTER/SHARD_SLICE/ALL_TO_ALL: the axis is this many blocks, each split (0: 1) */
  int split_axis;         /* ALL_TO_ALL: the tensor axis scattered (>= 0) */
  int split_blocks;       /* ALL_TO_ALL: its blocks, as `blocks` */
  int epilogue;           /* MATMUL (CUDA target, passes/epilogue.c): how many of the nodes after it
                             (its bias add; then a GELU or a residual add; argument nodes between them not
                             counted) its GEMM computes; 0: none; 3, 4: GELU's backward (EPI_DGELU*);
                             5: a residual add without a bias (EPI_RESIDUAL, passes.h) */
  bool fused_bwd;         /* CROSS_ENTROPY and its CROSS_ENTROPY_BWD (CUDA target, passes/fuse_ce.c): the forward's
                             kernel computes both (fuse_ce_partner pairs them) */
  bool normres;           /* LAYERNORM_BWD / RMSNORM_BWD and the ADD of its dx to the residual gradient's carry right
                             after it (CUDA target, passes/fuse_normres.c): the norm's backward kernel stores the sum
                             in the add's output, dx is never written, the add emits nothing */
  int hfuse;              /* MATMUL (CUDA target, passes/hfuse.c): 1: its GEMM and the sibling's right after it
                             (the same A, B and y of one shape) run as one batched GEMM launch; 2: that sibling,
                             which emits nothing; 0: neither */
  bool sumsq_fused;       /* SUMSQ and the CONCAT its reshape to [1] feeds (CUDA target, passes/fuse_sumsq.c): the
                             concat's kernel computes its members' sums of squares straight into its elements */
} Attrs;

/* A MATMUL over A of shape a and B of shape b (attrs at) as GEMMs: a batch of [m, k] x [k, n] products (B
 * batched or shared by all), k with the leading dims folded in when at->cb (then batch 1). ir/ir.c. */
typedef struct {
  int64_t batch, m, n, k;
  bool b_batched;
} IrGemm;
IrGemm ir_gemm_dims(const Attrs *at, const Shape *a, const Shape *b);
/* Its multiply-adds x 2 (y: the result's shape) */
double ir_gemm_flops(const Attrs *at, const Shape *a, const Shape *y);

struct Node {
  OpKind op;
  int id;       /* position-independent number for printing */
  int nin, nout;
  Value **in;   /* [nin] */
  Value **out;  /* [nout] */
  Attrs a;
  Graph *body;  /* REPEAT/CALL */
  SrcLoc loc;
  Graph *graph; /* owner */
  int group;    /* fusion group (passes/fuse.c; memplan cuts it where placement needs): the nodes of
                   one group > 0 are consecutive in their graph, elementwise over one shape, and a
                   target may run them as one kernel; 0: in no group */
  int stage;    /* pipeline predicate (passes/pipe.c): 0: every rank runs it; k > 0: only the ranks of
                   pipeline stage k - 1 run it and the others hold zeros in its outputs */
  uint64_t stageset; /* pipeline predicate over several stages (passes/pipe_owners.c: a tied embedding held on the first
                        and the last stage): bit s: stage s runs it, the others hold zeros; 0: `stage` decides. Never
                        both; ir_node_stages reads either */
  bool cast_folded; /* a cast its readers widen themselves (ir_mark_folded_casts): it makes no tensor */
  int instr;    /* pipeline (passes/pipe.c): k > 0: part of the schedule's instruction Module.pipe->order[k - 1]
                   (its receive excepted), which the trainer's --trace times; 0: none */
  /* Set by passes/memplan.c: the node's own scratch in the rank's allocation, live while it runs (a
   * gather's, scatter's or all-to-all's packing buffer, memplan_scratch_bytes): scratch_bytes at
   * offset scratch_at (in a REPEAT body, the same place every iteration); 0 bytes: none. */
  int64_t scratch_at, scratch_bytes;
  /* Set by passes/memplan.c (memplan_defers_wait): an asynchronous reduce-scatter in a loop's body whose
   * iteration does not read its result (passes/zero_defer.c) is waited in the next iteration before the
   * body's node defer_wait (the first that writes its input's bytes, which stay live through the whole
   * body), the last iteration's right after the loop; codegen/emit.c and passes/cost.c read it. NULL: not
   * deferred (waited at its first reader, else at the iteration's end). */
  const Node *defer_wait;
  /* Set by passes/memplan.c (memplan_defer_next): a deferred reduce-scatter (defer_wait) whose loop's last
   * iteration is waited not after the loop but in its `cont` loop's first iteration, before this node of
   * that loop's body (its scatter's input in the same bytes, held from one loop through the other). NULL:
   * right after the loop. */
  const Node *defer_last;
  /* A REPEAT cut by passes/recompute_split.c (`zb_w hold(N)`): the loop over the rows run next, later in
   * the same graph, that continues this one as its next iterations would (the deferred scatter waits of
   * this loop's last iteration may go into cont's first: passes/zero_defer.c, memplan_defer.c). NULL: none.
   * cont_of: the loop this one continues (cont's inverse). */
  Node *cont, *cont_of;
};

struct Graph {
  Arena *arena;
  Node **nodes; /* topological order */
  int nnodes, capnodes;
  Node **args;  /* region bodies: ARG nodes by index */
  int nargs, capargs;
  Value **results; /* region bodies: yielded values; top graph: step outputs */
  const char **result_names; /* top graph: "loss", "grad.<param>", ... (may be NULL per entry) */
  int nresults, capresults;
  Graph *parent; /* enclosing graph for region bodies, else NULL */
  Node *owner;   /* the REPEAT/CALL node owning this body, else NULL */
  int next_value_id, next_node_id;
  uint64_t version; /* bumped by every change of what the verifier checks here (ir_touch) */
  struct IrVerifyMemo *vmemo; /* what ir_verify_changed last found valid here (ir/verify_memo.c); NULL: none */
  uint64_t row_reads_at; /* passes/memplan_views.c: version + 1 when row_reads was found (0: not yet) */
  bool row_reads;        /* a node here reads an input at a row stride (ir_reads_row_stride): column slices may */
};

/* Records a change of g: of its node list, argument or result lists, or of one of its nodes' op,
 * inputs, outputs, attributes, or outputs' types, shardings or memory spaces. The functions below
 * that change a graph call it; a pass that writes such a field itself calls it on the graph holding
 * the node (once per graph it changed is enough). The verifier after each pass checks only the
 * graphs that changed (ir_verify_changed); SHARDC_VERIFY=audit finds a change made without it. */
static inline void ir_touch(Graph *g) { g->version++; }

/* ---- building ---------------------------------------------------------- */
Graph *ir_graph_new(Arena *a, Graph *parent);
/* Appends a node; creates nout output Values (dtype/shape left for the caller or
 * the shape pass: ir_node_out(n, i)). in may be NULL when nin == 0. */
Node *ir_node_new(Graph *g, OpKind op, int nin, Value *const *in, int nout, SrcLoc loc);
/* Convenience: a single-output node with its type set. */
Value *ir_emit(Graph *g, OpKind op, int nin, Value *const *in, DType dt, Shape shape,
               const Attrs *attrs, SrcLoc loc);
/* Row `row` of a stacked x [k, ...] appended to g: a slice reshaped to like's type and sharding. */
/* A new output of loop r stacking its body value v every iteration (v a new body result, last) */
Value *ir_repeat_add_stacked(Node *r, Value *v);
/* Removes input and body argument pos of region node r (a REPEAT; nothing in its body reads the argument), the
 * later ones shifted down; a stacked input's count (a.nxs) is the caller's. */
void ir_repeat_remove_arg(Node *r, int pos);
/* Removes the outputs of region node r marked in drop[0 .. r->nout) and their body results (none read). */
void ir_repeat_remove_outputs(Node *r, const bool *drop);
/* Removes the stacked inputs (xs) of loop r whose body argument nothing in its body (nested bodies too) reads nor
 * it yields. Returns how many. */
int ir_repeat_drop_unread_xs(Node *r);
Value *ir_stacked_row(Graph *g, Value *x, int64_t row, const Value *like, SrcLoc loc);
/* Whether slice node n is a view of its input (the same bytes from the same start, no copy: the
 * memory plan gives it its input's offset, codegen copies only if it moved): a pipeline stage's
 * own leading rows of a layer stack padded over uneven stages (passes/pipe.c, Node.stage set). */
bool ir_slice_is_view(const Node *n);
/* Whether input k of n may be read, or output k written, at a row stride (a last-axis column slice of a
 * wider tensor, Value.ld): what every target's kernel of the op takes (sdpa and sdpa_bwd: their
 * token-major operands, on the CPU and CUDA targets). memplan places such views (memplan_views.c). */
bool ir_reads_row_stride(const Node *n, int k);
bool ir_writes_row_stride(const Node *n, int k);
Node *ir_add_arg(Graph *body, DType dt, Shape shape, const char *name);
/* The parameter whose persistent bf16 copy a STATE of this name is ("bf16:<param>", passes/wshadow.c:
 * derived by a cast of it, never checkpointed), or NULL for any other state. */
const char *ir_copy_source(const char *state_name);
/* The persistent bf16 copy (its STATE) that v, a value of g, is the next value of (result
 * "next:bf16:<param>"), or NULL. */
Value *ir_copy_written(const Graph *g, const Value *v);
/* Whether g->nodes[i] is the cast that makes a persistent bf16 copy out of the parameter the update
 * right before it just updated (device values, the copy's STATE written by it, or under ZeRO 1 / 2 with
 * the masters split by an all-gather of it: ir_copy_gathered): the one kernel the
 * update and the cast can be (codegen/target_cuda.c stores the copy in the update's kernel where the
 * memory plan put the cast in the copy's bytes; passes/cost.c charges no second kernel). */
bool ir_update_casts_copy(const Graph *g, int i);
/* Whether node i of g is the host's cast of the host AdamW just before it (plan offload under bf16,
 * passes/zero_offload.c: the bf16 copy it uploads), which the update's own pass stores
 * (codegen/target_cuda.c, rt_adamw_f32_copy; passes/cost.c charges its write only). */
bool ir_host_update_casts_copy(const Graph *g, int i);
/* Whether the CUDA target's attention over dtype dt and head dim hd runs on its tensor-core (flash)
 * kernels, sdpa and ring attention's blocks (attn_block, attn_block_bwd) alike (codegen/cuda_kernels_attn.c:
 * the backward then in two kernels, dQ and dK/dV, else three on CUDA cores; passes/cost_cuda.c counts them). */
bool ir_attn_flash(DType dt, int64_t hd);
/* Marks (Node.cast_folded) each cast of g's top level that widens a bf16 gradient to f32 only for
 * readers that read bf16 as well and widen it themselves, exactly: a sum of squares (the clip's) and
 * an optimizer update's gradient; not one read by anything else, in a nested body, or on the host.
 * passes/fuse.c marks them on the CUDA target (and groups none of them); there such a cast makes no
 * tensor (passes/memplan.c gives it its source's place, codegen/target_cuda.c hands the readers the
 * source and emits nothing, passes/cost.c charges nothing): the same values, 6 B per element not
 * moved; a result (the gradient "grad:<param>") is its source in the trainer's table
 * (codegen/emit_table.c). */
void ir_mark_folded_casts(Graph *g);
bool ir_cast_folded(const Node *c);
/* The position after the fusion group (Node.group) of g's node i and the members after it: i + 1 where it is in none. */
static inline int ir_group_end(const Graph *g, int i) {
  int end = i + 1;
  while (g->nodes[i]->group && end < g->nnodes && g->nodes[end]->group == g->nodes[i]->group) end++;
  return end;
}
/* v, or the source of the folded cast that makes it (ir_cast_folded). */
const Value *ir_unfold_cast(const Value *v);
/* The persistent bf16 copy (its STATE) that an all-gather of v writes (passes/zero_master.c: v the bf16
 * cast of an updated f32 master shard, gathered into the whole copy), or NULL. */
Value *ir_copy_gathered(const Graph *g, const Value *v);
void ir_add_result(Graph *g, Value *v, const char *name);
bool ir_is_result(const Graph *g, const Value *v); /* v is one of g's results */
bool ir_same_type(const Value *a, const Value *b); /* one dtype, one shape (dims) */
bool ir_enters(const Node *n);                    /* ARG, PARAM, STATE, INPUT: a value entering its graph, no code */
int ir_next_computing(const Graph *g, int i);     /* the first node after i that is no ir_enters (g->nnodes: none) */
/* Replaces every use of `from` with `to` in g (and in nested bodies' captures of g). */
void ir_replace_uses(Graph *g, Value *from, Value *to);
/* ir_replace_uses for n pairs in one walk of g: from[i] -> to[i] (the froms distinct, no to another pair's from; a pair from == to is none). */
void ir_replace_uses_many(Graph *g, int n, Value *const *from, Value *const *to);
/* Every use in g and its bodies (any depth: nodes' inputs, results) of a key of map (Value * -> Value *)
 * replaced by its value, in one walk; each graph changed is touched. */
void ir_replace_uses_map_deep(Graph *g, const PtrMap *map);
/* Moves g's last node (just appended) to position pos, after nodes[pos - 1]. */
void ir_move_last(Graph *g, int pos);
/* Restores topological order after nodes were moved or merged: stable, a node moves only behind
 * what it reads in g (dies on a cycle: a compiler bug). */
void ir_topo_sort(Graph *g);
/* Removes nodes whose outputs are unused and that have no side effects; keeps results. */
void ir_remove_dead(Graph *g);
/* Removes node n from g's node list (its outputs must be unused). */
void ir_drop_node(Graph *g, const Node *n);
/* The pipeline stages running n (Node.stage, Node.stageset): bit s for stage s; 0: every stage. */
static inline uint64_t ir_node_stages(const Node *n) { return n->stage ? 1ull << (n->stage - 1) : n->stageset; }
/* Whether pipeline stage s runs n. */
static inline bool ir_runs_on(const Node *n, int s) {
  uint64_t m = ir_node_stages(n);
  return !m || (s >= 0 && s < 64 && (m >> s & 1));
}
/* Every pipeline stage, as a mask of ir_node_stages's kind (also: read on every rank). */
#define IR_EVERY_STAGE (~0ull)
/* Pipeline stages reading g's values: rmask[id] (room for every id of g's values) becomes the
 * union of the stages of every reader of value id in g (ir_node_stages; a node of every stage:
 * IR_EVERY_STAGE; a stage_select's input j: stage j only, if the select runs there; a read inside
 * a region's body: the region's stages), IR_EVERY_STAGE when g yields the value (but a result
 * "grad:X" of a parameter X held on some stages: read on X's stages; a result "next:X": read by
 * nothing, its write-back runs where its update does), 0 when nothing reads it. */
void ir_reader_stages(const Graph *g, uint64_t *rmask, int nids);
/* Number of uses of v within g (not counting results). */
int ir_count_uses(const Graph *g, const Value *v);
/* The same in g and in the region bodies g's nodes own (a body reads enclosing values directly:
 * a gradient-accumulation loop reads the backward's seed, a constant of the top graph). */
int ir_count_uses_deep(const Graph *g, const Value *v);
/* Whether a node of g or of a region body nested in it reads v (ir_count_uses_deep(g, v) > 0, stopping at the first). */
bool ir_reads_deep(const Graph *g, const Value *v);
/* Both for n values in one walk of g: uses[k] = ir_count_uses(g, v[k]) and, unless deep is NULL,
 * deep[k] = ir_count_uses_deep(g, v[k]) (a value may be NULL: counted 0). */
void ir_count_uses_n(const Graph *g, int n, const Value *const *v, int *uses, int *deep);
/* The same for every value at once, in one walk: adds each read by a node of g or of a body nested
 * in it to counts[value] (a PtrMap; a value read nowhere stays absent). A value defined in g is read
 * only in g and below it, so its count is ir_count_uses_deep(g, v); the lookups of a pass that asks
 * for many values cost O(1) each instead of a walk of g each (issue 18). */
void ir_use_counts(const Graph *g, PtrMap *counts);
/* ir_use_counts's count for each value not defined in a body below g (g's own values, and those of
 * the graphs around it), each body's reads of the values around it found once (a body many nodes
 * share, as the pipeline's instructions do: once, added per owner) and, with a memo, kept from one
 * call to the next while the body's version (ir_touch) and its nested bodies' stay: a pass that asks
 * about many values between changes walks only g's own nodes and the bodies changed since (its
 * changes recorded by ir_touch no later than its next call). only_keys: only the values already keys
 * of counts are counted (the rest stay absent). memo: from ir_use_memo_new, or NULL (this call's). */
typedef struct IrUseMemo IrUseMemo;
IrUseMemo *ir_use_memo_new(void);
void ir_use_memo_free(IrUseMemo *m);
void ir_use_counts_outer(const Graph *g, PtrMap *counts, bool only_keys, IrUseMemo *memo);
/* The caller changed body b since its version v0 without changing what b reads of the values around it (nodes
 * added and inputs rewired among b's own values; no node with a body added or removed): the memo's list for b,
 * if current at v0, is current still (not walked again). SHARDC_VERIFY=audit checks it at the next count. */
void ir_use_memo_keep(IrUseMemo *m, const Graph *b, uint64_t v0);

/* ---- checking and printing ------------------------------------------- */
/* Structural verifier: topological order, arity, dtypes/shape rank sanity, region
 * signatures, shardings against the mesh. Returns false and prints what is wrong
 * (naming `after_pass`) on failure. A failure is a compiler bug. */
bool ir_verify(const Graph *g, const char *after_pass);
/* The same verdict as ir_verify, checking again only the graphs (the top one, region bodies) that
 * changed since its last call on g that passed: each graph's memo (ir/verify_memo.c) holds its
 * version (ir_touch) and the shape of its lists then; a graph where either moved is verified in
 * full, one where neither did is not, but what it reads from the graphs around it (a captured value
 * and its type) is checked again where those changed. flags: IR_VERIFY_ALL: every graph verified
 * (after a change not recorded by ir_touch), the memos renewed; IR_VERIFY_AUDIT: each graph's
 * contents hashed as well, and a graph whose contents changed with no ir_touch is an error (a
 * change the verification would not have seen). On a failure it runs ir_verify, whose messages
 * are the report (naming `after_pass`). */
enum { IR_VERIFY_ALL = 1, IR_VERIFY_AUDIT = 2 };
bool ir_verify_changed(Graph *g, const char *after_pass, unsigned flags);

#endif
