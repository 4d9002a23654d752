/* passes/memplan.h — one rank's memory: every value at a fixed offset in one allocation. */
#ifndef SHARDC_MEMPLAN_H
#define SHARDC_MEMPLAN_H

#include <stdio.h>

#include "module.h"

typedef enum {
  MEM_PARAM,     /* parameters */
  MEM_OPTIM,     /* optimizer state */
  MEM_INPUT,     /* per-step inputs (tokens, targets, host scalars) */
  MEM_GRAD,      /* gradients (live from their last contribution to the update) */
  MEM_ACT,       /* activations and other temporaries */
  MEM_WORKSPACE, /* kernel scratch */
  MEM_COMM,      /* communication buffers */
  MEM_COUNT
} MemClass;

extern const char *const memplan_class_names[MEM_COUNT];  /* short: "params", "grads", ... */
extern const char *const memplan_class_labels[MEM_COUNT]; /* for people: "parameters", "gradients", ... */

typedef struct MemPlan {
  int64_t total;                    /* bytes of the rank's one allocation */
  int64_t persistent;               /* bytes at the start that live for the whole run */
  int64_t peak;                     /* max over the step of live bytes (<= total; the rest is fragmentation) */
  int64_t by_class[MEM_COUNT];      /* bytes live at the peak, by class */
  int64_t largest[MEM_COUNT];       /* largest single value, by class */
  int nvalues;                      /* values placed */
  /* plan `offload` on a device target (passes/zero_offload.c): the values marked host, in the rank's host
   * allocation (pinned), apart from `total` */
  int64_t host_total;               /* bytes of the host allocation */
  int64_t host_state;               /* of which the persistent state (the rest: the update's copies) */
  int64_t host_params;              /* of host_state: the f32 master weights (bf16 copies on the device) */
  int nstages;                      /* pipeline parallelism: pp (0 without) */
  bool defer_waits;                 /* zero_defers_plan (Module.defer.taken): a body's unread scatters waited in
                                       the next iteration (memplan_defers_wait); else each in its own */
  int64_t *stage_peak;              /* [nstages]: each stage's peak (peak is the largest); NULL without pp */
  struct PackMemo *pack_memo;       /* during pass_memplan: its packings by interval set (memplan_pack.c); NULL after */
} MemPlan;

enum { MEMPLAN_ALIGN = 64 };

/* Prints m's plan (m->memplan) as a table: the size of each class (KiB, MiB or GiB, runtime/fmt.h rt_fmt_bytes),
 * peak, total, and the total against the topology's device memory when the module has a topology.
 * bytes (`shardc plan --bytes`; the IR tests): each size as exact bytes and MiB instead, for
 * scripts. */
void memplan_print(FILE *f, const Module *m, bool bytes);

/* The memory one rank's plan must fit, in bytes (0: unknown, no topology), and what it is in
 * words (into what): the device's memory; for the CPU target on a GPU topology, the node's host
 * memory divided by its ranks. */
double memplan_capacity(const Module *m, char *what, size_t cap);

/* The bytes v occupies over its graph's iterations: [lo, hi). ARGs (bound to memory of the
 * enclosing graph, live through the whole loop) and unplaced values: none (false). */
/* The stacked result of repeat rep that its carry k is kept in, or -1: the body saves its input
 * (arg k) as stacked result j each iteration, so the carry's next value is written straight into
 * the stack's next slice (the next iteration's input, already saved there) and, in the last
 * iteration, into the loop's output: no copy of the saved input nor of the carry per iteration
 * (a layer loop's residual stream). Forward loops of 2 or more iterations. */
int memplan_carry_in_stack(const Node *rep, int k);

/* The stacked input of repeat rep whose slices its stacked output k takes, in place (the body's
 * result k is sum_l + g_l over arg q's slice, or a chain of in-place ops from it), or -1. */
int memplan_xs_in_place(const Node *rep, int k);

bool memplan_span(const Value *v, int64_t *lo, int64_t *hi);
/* Whether a kernel writing w at every index while reading x at every index can race (w's and x's
 * bytes meet, unless x is w's very tensor updated index for index). */
bool memplan_clobbers(const Value *w, const Value *x);

/* The scratch node n needs while it runs, which the plan places (Node.scratch_at): a gather's or
 * scatter's packing buffer where its members' chunks are not contiguous, an all-to-all's send and
 * receive buffers (runtime/mesh.h rt_pack_bytes: the runtime's rule); 0 for every other node. */
int64_t memplan_scratch_bytes(const Node *n);
/* Whether n is an asynchronous reduce-scatter of a loop's body whose iteration does not read its result
 * (a stacked output only: passes/zero_defer.c): its input lives through the whole body and it is waited in
 * the next iteration (Node.defer_wait, set by memplan_defer_waits once the plan is final;
 * passes/memplan_defer.c). Only where the plan takes them (MemPlan.defer_waits, zero_defers_plan:
 * passes/zero_defer.c's decision, `defer_waits`). */
bool memplan_defers_wait(const Node *n);
/* The deferred scatter of the loop continuing deferred scatter s's loop (Node.cont: a loop `zb_w hold(N)` cut) that
 * takes s's place there (the same one of its body), where s's last iteration may be waited in that loop's first
 * iteration: both inputs held in one place from one loop through the other (passes/memplan.c), nothing reading s's
 * result before that loop; else NULL. The one decision the plan, the waits (Node.defer_last) follow. */
Node *memplan_defer_next(const Node *s);
/* Sets (on) or clears (not on) Node.defer_wait and defer_last of g's loop bodies' scatters. */
void memplan_defer_waits(Graph *g, bool on);

/* The class with the most bytes at the peak. */
MemClass memplan_largest_class(const MemPlan *p);

#endif
