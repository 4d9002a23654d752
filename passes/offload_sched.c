/* passes/offload_sched.c — when plan offload's copies run (passes/zero_offload.c puts them in the IR:
 * to_host of a parameter's and a gradient's shard, the update on the host, to_device of the result).
 *
 * The IR says what is copied; this file says when, as ZeRO-Offload overlaps it:
 *   - a download starts as soon as its value is made: a parameter (a source) at the step's start
 *     (beside the forward), a stacked layer gradient row by row inside the backward loop, at the
 *     end of the iteration that made the row (beside the backward of the earlier layers), any
 *     other value right after the node that makes it (or where it stands when that node is an
 *     asynchronous collective, waited later, or a loop with one in flight);
 *   - the host waits for it where the to_host stands, just before the update reads it; the update
 *     of one parameter runs on the CPU while the downloads of the others are in flight and the
 *     upload of the one before runs;
 *   - an upload starts where the to_device stands, and the compute stream (not the host) waits for
 *     it before the first node that reads the uploaded value, or at the end of the step.
 * A copy runs on the device's copy stream after the device work enqueued before it starts
 * (runtime/cuda/cuda_ops.h). The values' bytes are safe for the whole flight by the IR's own
 * liveness: a to_host's source is live up to the to_host's position, where the host waits; its
 * host buffer is made live from the download's start (passes/memplan.c reads offload_issue). */
#include "offload_sched.h"

#include <stdlib.h>

#include "commreport.h"
#include "diag.h"

static int position(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] == n) return i;
  die("offload_sched: node not in its graph");
}

static bool has_async(const Graph *g) {
  for (int i = 0; i < g->nnodes; i++)
    if (ir_comm_async(g->nodes[i]) || (g->nodes[i]->body && has_async(g->nodes[i]->body))) return true;
  return false;
}

/* The cast of update n's parameter into its persistent bf16 copy (passes/wshadow.c), which moves
 * with the update: the host makes it (passes/zero_offload.c, the master weights on the host). */
static bool copy_cast(const Graph *g, const Node *c, const Node *n) {
  return c->op == OP_CAST && c->in[0] == n->out[0] && ir_copy_written(g, c->out[0]);
}

/* Whether a node of g reads one of n's outputs (its copy's cast aside). */
static bool outputs_read(const Graph *g, const Node *n) {
  for (int i = 0; i < g->nnodes; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++)
      if (g->nodes[i]->in[j]->def == n && !copy_cast(g, g->nodes[i], n)) return true;
  return false;
}

void offload_order(Graph *g, Node **updates, int n) {
  for (int i = 0; i < n; i++)
    if (outputs_read(g, updates[i])) return; /* (ZeRO-1/2 at dp > 1: the all_gather reads it where it is) */
  int *key = calloc((size_t)n + 1, sizeof(int));
  if (!key) die("out of memory");
  for (int i = 0; i < n; i++) key[i] = position(g, updates[i]->in[1]->def);
  for (int i = 1; i < n; i++) /* stable: by when the gradient is made */
    for (int j = i; j > 0 && key[j - 1] > key[j]; j--) {
      int k = key[j];
      key[j] = key[j - 1], key[j - 1] = k;
      Node *u = updates[j];
      updates[j] = updates[j - 1], updates[j - 1] = u;
    }
  free(key);
  ir_touch(g);
  for (int i = 0; i < n; i++) { /* each to the end, in that order (its copy's cast after it) */
    ir_drop_node(g, updates[i]);
    g->nodes[g->nnodes++] = updates[i];
    for (int k = 0; k < g->nnodes - 1; k++)
      if (copy_cast(g, g->nodes[k], updates[i])) {
        Node *c = g->nodes[k];
        ir_drop_node(g, c);
        g->nodes[g->nnodes++] = c;
        break;
      }
  }
}

OffloadIssue offload_issue(const Graph *g, const Node *n) {
  int at = position(g, n);
  OffloadIssue here = {at, NULL};
  const Value *x = n->in[0];
  const Node *d = x->def;
  if (n->op != OP_TO_HOST || d->graph != g || ir_node_stages(n) || ir_node_stages(d)) return here;
  if ((ir_ops[d->op].flags & F_SOURCE) && d->op != OP_CONST && d->op != OP_IOTA) return (OffloadIssue){-1, NULL};
  if (ir_comm_async(d)) return here; /* valid only after its wait, which codegen puts before the to_host */
  int pd = position(g, d);
  if (d->op != OP_REPEAT) return (OffloadIssue){pd, NULL};
  if (has_async(d->body)) return here; /* its stacked outputs may be waited after the loop */
  int k = 0;
  while (k < d->nout && d->out[k] != x) k++;
  bool stacked = k >= d->a.ncarry && d->a.count > 0;
  return (OffloadIssue){pd, stacked ? d : NULL};
}

int offload_slot(const Graph *g, const Node *copy) { return position(g, copy); }

static bool reads(const Node *n, const Value *v) {
  for (int j = 0; j < n->nin; j++)
    if (n->in[j] == v) return true;
  if (n->body)
    for (int i = 0; i < n->body->nnodes; i++)
      if (reads(n->body->nodes[i], v)) return true;
  return false;
}

int offload_upload_wait(const Graph *g, const Node *n) {
  int i = position(g, n) + 1;
  while (i < g->nnodes && !reads(g->nodes[i], n->out[0])) i++;
  while (i > 0 && i < g->nnodes && g->nodes[i]->group && g->nodes[i - 1]->group == g->nodes[i]->group) i--;
  return i;
}
