/* passes/fuse.c — fusion groups: consecutive elementwise nodes over one shape, for every target.
 *
 * Walking each graph (region bodies too) in node order, a group starts at an elementwise node
 * (an F_EW op, a CONST or a BROADCAST_TO; not a same-dtype CAST, which is a view and computes
 * nothing) and takes the nodes that follow while each one
 *   - is elementwise too, with the group's output shape,
 *   - reads only members of the group or values that broadcast to that shape,
 *   - belongs to the same pipeline stage as the group's first (Node.stage: one stage runs it),
 *   - keeps the group within FUSE_MAX_NODES nodes and FUSE_MAX_INPUTS values read from outside
 *     (an input counted once per node that first reads it, twice when a node reads it twice).
 * The first node that does not fit starts the next group (when it can start one). Members get
 * one Node.group id (unique in the module); a node alone stays in no group (0).
 *
 * The groups say what may run as one kernel, index by index, its intermediates in registers.
 * Whether that is safe also depends on where values live, which this pass does not know:
 * passes/memplan.c cuts a group where the placement would let a member overwrite bytes the
 * group still reads. A target may honour the groups (CUDA: one kernel per group) or ignore
 * them (the CPU target runs node by node).
 *
 * On the CUDA target it first moves each GELU_BWD whose gradient input is a MATMUL's output to just
 * after that matmul (with the REDUCE_SUM of its result that follows it: the bias gradient), over
 * the nodes between (the weight gradient's GEMM), so that the memory plan places its result as
 * written there and passes/epilogue.c can make it the GEMM's DGELU epilogue. Only over nodes of
 * the same stage that are no collectives and own no region; the inputs must exist by then. Then it
 * moves each add of a GEMM's output and a value of its type up to just after that matmul in the
 * same way (passes/epilogue_hoist.c: epilogue.c's residual epilogue without a bias).
 */
#include <string.h>

#include "diag.h"
#include "infer.h"
#include "passes.h"

/* (a node in host memory, plan offload's host cast of a bf16 gradient, runs on the CPU: never fused; nor
 * a cast its readers widen themselves, ir_cast_folded: no kernel makes it) */
static bool elementwise(const Node *n) {
  if ((n->nout && n->out[0]->host) || ir_cast_folded(n)) return false;
  return n->op == OP_CONST || n->op == OP_BROADCAST_TO || (ir_ops[n->op].flags & F_EW) != 0;
}

/* A same-dtype CAST is a view (memplan gives it its input's bytes): it starts no group. */
static bool starts_group(const Node *n) {
  return elementwise(n) && !(n->op == OP_CAST && n->in[0]->dtype == n->out[0]->dtype);
}

typedef struct {
  const Node *mem[FUSE_MAX_NODES]; /* the group's nodes, in order */
  int n;                           /* how many */
  const Value *ext[FUSE_MAX_INPUTS]; /* values it reads from outside, in first-read order */
  int next;                          /* how many */
} Group;

static bool is_member(const Group *r, const Value *v) {
  for (int i = 0; i < r->n; i++)
    if (r->mem[i]->out[0] == v) return true;
  return false;
}

static bool is_ext(const Group *r, const Value *v) {
  for (int i = 0; i < r->next; i++)
    if (r->ext[i] == v) return true;
  return false;
}

/* Adds n to the group if it fits; false leaves the group as it was. */
static bool try_add(Group *r, const Node *n, const Shape *S) {
  if (!elementwise(n) || !ir_shape_eq(&n->out[0]->shape, S) || r->n == FUSE_MAX_NODES) return false;
  if (r->n && ir_node_stages(n) != ir_node_stages(r->mem[0])) return false; /* one pipeline stage's nodes (or none's) */
  const Value *fresh[2];
  int nfresh = 0;
  for (int k = 0; k < n->nin; k++) {
    const Value *v = n->in[k];
    if (is_member(r, v) || is_ext(r, v)) continue;
    if (!ir_broadcasts_to(&v->shape, S)) return false;
    fresh[nfresh++] = v;
  }
  if (r->next + nfresh > FUSE_MAX_INPUTS) return false;
  for (int i = 0; i < nfresh; i++) r->ext[r->next++] = fresh[i];
  r->mem[r->n++] = n;
  return true;
}

static void fuse_graph(Graph *g, int *next_id) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) fuse_graph(g->nodes[i]->body, next_id);
  for (int i = 0; i < g->nnodes;) {
    Node *first = g->nodes[i];
    first->group = 0;
    if (!starts_group(first)) {
      i++;
      continue;
    }
    const Shape *S = &first->out[0]->shape;
    Group r = {0};
    if (!try_add(&r, first, S)) die("fuse: %s does not start a group", ir_ops[first->op].name);
    int j = i + 1;
    while (j < g->nnodes && try_add(&r, g->nodes[j], S)) j++;
    if (r.n > 1) {
      int id = ++*next_id;
      for (int k = i; k < j; k++) g->nodes[k]->group = id;
    } else {
      for (int k = i; k < j; k++) g->nodes[k]->group = 0;
    }
    i = j;
  }
}

/* Moves node j of g to position to (< j), shifting those between one place on. */
static void move_up(Graph *g, int j, int to) {
  Node *n = g->nodes[j];
  for (int q = j; q > to; q--) g->nodes[q] = g->nodes[q - 1];
  g->nodes[to] = n;
  ir_touch(g);
}

/* The position of n in g at or after from (-1: none). */
static int find_from(const Graph *g, const Node *n, int from) {
  for (int q = from; q < g->nnodes; q++)
    if (g->nodes[q] == n) return q;
  return -1;
}

static void hoist_gelu_bwd(Graph *g) {
  for (int j = 0; j < g->nnodes; j++) {
    Node *gb = g->nodes[j];
    if (gb->body) hoist_gelu_bwd(gb->body);
    if (gb->op != OP_GELU_BWD || gb->in[1]->def->op != OP_MATMUL || gb->in[1]->def->graph != g) continue;
    int i = j - 1;
    while (i >= 0 && g->nodes[i] != gb->in[1]->def) i--;
    const Node *pre = gb->in[0]->def; /* defined before the matmul's successor, or an ARG that moves too */
    int pp = i >= 0 ? find_from(g, pre, i + 1) : -1;
    bool ok = i >= 0 && i + 1 < j && (pp < 0 || pre->op == OP_ARG);
    for (int q = i + 1; q < j && ok; q++) {
      const Node *n = g->nodes[q];
      ok = !n->body && !(ir_ops[n->op].flags & F_COLL) && n->op != OP_SEND && n->op != OP_RECV && ir_node_stages(n) == ir_node_stages(gb);
    }
    if (!ok) continue;
    int r = j + 1;
    while (r < g->nnodes && (g->nodes[r]->op == OP_ARG || g->nodes[r]->op == OP_PARAM)) r++;
    int at = i + 1;
    if (pp >= 0) move_up(g, pp, at++);
    move_up(g, j, at++);
    if (r < g->nnodes && g->nodes[r]->op == OP_REDUCE_SUM && g->nodes[r]->in[0] == gb->out[0] && ir_node_stages(g->nodes[r]) == ir_node_stages(gb))
      move_up(g, r, at);
  }
}

bool pass_fuse(Module *m) {
  int next_id = 0;
  if (m->target == TARGET_CUDA) { /* (each as shardc --no-fuse leaves it: passes/fuse_off.c) */
    bool epi = fuse_on(m, FUSE_EPILOGUE);
    if (epi) hoist_gelu_bwd(m->graph);
    if (epi && fuse_on(m, FUSE_RESIDUAL))
      epilogue_hoist_adds(m->graph); /* residual adds up to their GEMM (passes/epilogue_hoist.c) */
    ir_mark_folded_casts(m->graph);  /* (before grouping: none of them joins a group) */
    if (fuse_on(m, FUSE_SWIGLU))
      fuse_order(m->graph); /* elementwise nodes next to those they feed, over GEMMs (passes/fuse_order.c) */
  }
  if (m->target != TARGET_CUDA || fuse_on(m, FUSE_GROUPS)) fuse_graph(m->graph, &next_id);
  return true;
}
