/* passes/pipe_internal.h — what the files of the pipe pass share (the pass's contract is passes.h's
 * pass_pipe; how it works is in pipe.c's header).
 *
 *   pipe.c        the pass: the micro-step region replaced by the checked schedule's instructions
 *                 (clones predicated on their stage, the transfers, the merges, the sums over pp)
 *   pipe_class.c  which part of the micro-step each body node is (pipe_classify: the first stage's
 *                 embedding, the last's head, every stage's, the merges) and which stages read and
 *                 hold a parameter outside the layers (pipe_reader_stages, pipe_owned_params)
 *   pipe_plan.c   the plan's per-stage figures (PipePlan: layers, FLOPs, kept activations, parameters,
 *                 the bubble) that passes/pipe_report.c prints
 *   pipe_balance.c the layers' time and memory per stage by the cost model and the split balanced by
 *                 them (PipeBalance: made by the stage pass, applied by `layers(balanced)`)
 *   pipe_owners.c a held parameter's nodes on its stages (pipe_own), a tied gradient's exchange
 *                 (pipe_pair_sum); pipe_split.c zb's B / W split; pipe_sched.c the schedules
 *   pipe_fold.c   a stage's layer gradients summed inside its backward loops (the merges folded)
 * Calls go one way: stage.c -> pipe_balance.c -> pipe_plan.c -> pipe_class.c; pipe.c -> pipe_plan.c,
 * pipe_fold.c.
 */
#ifndef SHARDC_PIPE_INTERNAL_H
#define SHARDC_PIPE_INTERNAL_H

#include "passes.h"
#include "pipe_sched.h"
#include "ptrmap.h"

/* passes/stage.c */
Node *stage_accum_region(Graph *g);
bool stage_layer_loops(Graph *body, Node **fwd, Node **bwd);
/* passes/pipe_split.c */
bool pipe_split_backward(Graph *outer, Node *R, Node **rb, Node **rw);
/* passes/pipe_owners.c */
void pipe_own(Graph *g, Node *update, uint64_t stages);
Value *pipe_pair_sum(Graph *g, Value *x, int a, int b, int tag, int pp, SrcLoc loc);

enum { PIPE_TAG = 1000 };
enum { C_NONE, C_FIRST, C_LAST, C_FIRSTB, C_ALL, C_MERGE, C_LOOP };

typedef struct {
  Module *m;
  Graph *g, *body;
  Node *A, *F, *B;
  Node *W;        /* zb: the weight-gradient loop split from B (passes/pipe_split.c), else NULL */
  int pp, M;
  char *cls;      /* by body node position */
  PtrMap *map;    /* [pp v * M]: body value -> its clone in virtual stage k's instructions for micro-batch i */
  PtrMap *shared; /* [M]: body value -> its clone read by every stage (inputs, ALL, merges) */
  PtrMap *chunks; /* [v]: stacked layer value from outside -> its chunk's rows */
  int v;          /* chunks per stage (interleaved), else 1 */
  int64_t per;    /* layers per chunk: L / (pp v); uneven stages without interleaving: the largest stage's count */
  int64_t stack_rows; /* a layer stack's local rows (the layer loops' count after the stage pass) */
  const int *rows; /* uneven stages (`pp N layers(..)`, RT_BLOCKS_STAGES): each virtual stage's layers
                      (without interleaving each stage's); NULL: even */
  PtrMap *own;    /* uneven stages [pp v]: stacked layer value (a chunk's) -> its virtual stage's rows (padding dropped) */
  Value **sum;    /* [ncarry]: the running sums */
  uint64_t *owner; /* [ncarry]: a sum held on one stage (its bit: the gradient of a parameter only it reads), 0: every stage's */
  Node **owned;    /* [nowned]: the updates of the parameters held on some stages (owned_params) */
  uint64_t *owned_set; /* [nowned]: those stages (one, or two: a tied embedding's first and last) */
  int nowned;
  /* each stage's part of a micro-batch merged as soon as that stage has run its instructions of it
   * (pipe_stage_merges): the merges reading only a stage's own layer gradients, and the sums they
   * make, one running sum per stage (stage_select'ed after the last micro-batch) */
  char *early;    /* by body node position: a merge of one stage's values (pipe_stage_merges) */
  char *maker;    /* by body node position: C_LAST or C_FIRSTB for a merge into a sum one stage holds of values only
                     that class makes, done as the instruction making them has run (pipe_maker_merges), else 0 */
  bool *made;     /* [ncarry]: a sum those merges make (run_merges leaves its chain alone) */
  bool *local;    /* [ncarry]: a sum each stage makes of its own parts (its chain in ssum) */
  Value **ssum;   /* [ncarry * pp]: stage s's running sum of carry c at c pp + s (NULL: none yet) */
  /* the merges folded into the loops making their gradients (pipe_fold_plan) */
  Value **fold;   /* [ncarry]: the body's stacked loop output (B's, zb: W's) whose merge into carry c is folded, or NULL */
  Node **fold_cast; /* [ncarry]: the body's cast of it to the sum's precision, or NULL */
  char *folded;   /* by body node position: a merge node the loop does (run_stage_merges skips it) */
  Value **csum;   /* [ncarry * pp * v]: chunk ch of stage s's running sum of a folded carry c at (c pp + s) v + ch */
} Pp;

/* The stage map of virtual stage vs (chunk vs / pp of stage vs % pp) for micro-batch mb: body value -> its clone. */
static inline PtrMap *pipe_smap(Pp *p, int vs, int mb) { return &p->map[vs * p->M + mb]; }

/* The layers virtual stage vs runs (chunk vs / pp of stage vs % pp; uneven stages: its own count; else
 * every one's), and stage st over all its chunks. */
static inline int64_t pipe_vs_layers(const Pp *p, int vs) { return p->rows ? p->rows[vs] : p->per; }
static inline int64_t pipe_stage_layers(const Pp *p, int st) {
  int64_t n = 0;
  for (int c = 0; c < p->v; c++) n += pipe_vs_layers(p, c * p->pp + st);
  return n;
}
/* The local rows of chunk c of a layer stack (uneven stages: padded to the largest count of the chunks c,
 * runtime/mesh.h) and the first of them. */
static inline int64_t pipe_chunk_rows(const Pp *p, int c) {
  return p->rows && p->v > 1 ? rt_stage_chunk_rows(p->rows, p->pp, c) : p->per;
}
static inline int64_t pipe_chunk_start(const Pp *p, int c) {
  return p->rows && p->v > 1 ? rt_stage_chunk_start(p->rows, p->pp, c) : c * p->per;
}
/* Uneven stages: virtual stage vs's stacked layer value y (its own rows) padded with zero rows to its
 * chunk's rows, on its stage, where a value of every stage's layout is wanted (stage_select, the sums); else
 * y (passes/pipe.c). */
Value *pipe_pad_rows(Pp *p, int vs, Value *y);

/* passes/pipe_class.c */
int pipe_pos_in(const Graph *g, const Node *n);
bool pipe_reads_value(const Node *n, const Value *v);
bool pipe_reads_node(const Node *n, const Node *d);
bool pipe_param_cast(const Node *x);
bool pipe_classify(Pp *p);
void pipe_reader_stages(const Pp *p, const Value *v, bool *on);
int pipe_owned_params(const Pp *p, Node *const *after, int nafter, uint64_t *owner, Node **upd, uint64_t *ust);
uint64_t pipe_owner_of(const Pp *p, const Node *n);
/* Marks p->early and p->local: the merges and sums each stage can do on its own (pipe_class.c). */
void pipe_stage_merges(Pp *p);
/* Marks p->maker and p->made: the merges into an owned sum done right after their values are made (pipe_class.c). */
void pipe_maker_merges(Pp *p);

/* passes/pipe_fold.c: the merges each stage's loops do (p->fold: a local carry's add of a stacked
 * loop output read by it alone, where the lists run the loop's instructions in micro-batch order),
 * each done as virtual stage vs's loop `loop` (a body node) of micro-batch mb has run, and a folded
 * carry's sum of stage st after the last micro-batch (its chunks concatenated; uneven: its own rows) */
void pipe_fold_plan(Pp *p, const PipeSched *s);
void pipe_fold_run(Pp *p, int vs, int mb, const Node *loop);
Value *pipe_fold_sum(Pp *p, int c, int st);

/* passes/pipe_plan.c: m->pipe, the plan's figures of p's stages under schedule s */
void pipe_plan_report(Pp *p, const PipeSched *s);
/* Bytes of the values nodes of class c (or the node only) make that the backward or the merges read. */
int64_t pipe_kept_bytes(const Pp *p, char c, const Node *only);

#endif
