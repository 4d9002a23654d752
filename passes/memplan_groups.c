/* passes/memplan_groups.c — the memory plan's last step: fusion groups cut where the placement would make
 * their one kernel race (passes/memplan.c's header; memplan_cut_groups in memplan_views.h). */
#include <string.h>

#include "memplan.h"
#include "memplan_views.h"
#include "passes.h"

/* the bytes v spans: a column view's rows lie its source's row apart (Value.ld) */
static int64_t value_bytes(const Value *v) {
  int64_t n = ir_numel(&v->shape), w = v->shape.rank ? v->shape.dim[v->shape.rank - 1] : 1;
  if (v->ld && w > 0 && n > 0) n = (n / w - 1) * v->ld + w;
  return n * ir_dtype_size(v->dtype);
}

/* ---- fusion groups (passes/fuse.c) ----
 * A target runs a group as one kernel: every index at once, intermediates in registers. The plan
 * lets a value reuse the bytes of one that died earlier, which is harmless node by node but not
 * inside one kernel, where a member writing bytes another index still reads races with it. The
 * placement stays as planned; instead a group is cut before a member that would write over a value
 * the group reads from outside (unless it is that very tensor, updated index for index), or that
 * reads from outside a value an earlier member writes over. The rest of the group is a new group,
 * starting at its first member that can start one (not a view); a group left with one node is
 * none. Values inside a group keep their bytes: an entry point that runs only part of a group
 * (codegen's eval and logits) stores them. */

bool memplan_span(const Value *v, int64_t *lo, int64_t *hi) {
  if (v->def->op == OP_ARG || v->offset < 0) return false;
  int64_t iters = 1;
  const Node *r = v->def->graph->owner;
  if (v->stride && r && r->op == OP_REPEAT) iters = r->a.count;
  *lo = v->offset;
  *hi = v->offset + (iters - 1) * v->stride + value_bytes(v);
  return true;
}

bool memplan_clobbers(const Value *w, const Value *x) {
  if (w == x) return false;
  if (w->offset == x->offset && w->stride == x->stride && w->ld == x->ld && w->def->op != OP_ARG && x->def->op != OP_ARG &&
      ir_shape_eq(&w->shape, &x->shape) && ir_dtype_size(w->dtype) == ir_dtype_size(x->dtype))
    return false; /* in place, index for index */
  int64_t wl, wh, xl, xh;
  if (!memplan_span(w, &wl, &wh) || !memplan_span(x, &xl, &xh)) return false;
  return wl < xh && xl < wh;
}

typedef struct {
  Node *mem[FUSE_MAX_NODES];         /* the members kept so far, in order */
  int n;                             /* how many */
  const Value *ext[FUSE_MAX_INPUTS]; /* values they read from outside, as passes/fuse.c counts them */
  int next;                          /* how many */
} Run;

static bool in_run(const Run *r, const Value *v) {
  for (int i = 0; i < r->n; i++)
    if (r->mem[i]->out[0] == v) return true;
  for (int i = 0; i < r->next; i++)
    if (r->ext[i] == v) return true;
  return false;
}

/* Adds n to the run unless that could race (or overflow the inputs); the first member always. */
static bool run_add(Run *r, Node *n) {
  const Value *fresh[2];
  int nfresh = 0;
  for (int k = 0; k < n->nin; k++) {
    const Value *v = n->in[k];
    if (in_run(r, v)) continue;
    for (int i = 0; i < r->n; i++)
      if (memplan_clobbers(r->mem[i]->out[0], v)) return false;
    fresh[nfresh++] = v;
  }
  if (r->next + nfresh > FUSE_MAX_INPUTS) return false;
  if (r->n > 0) {
    const Value *y = n->out[0];
    for (int i = 0; i < r->next; i++)
      if (memplan_clobbers(y, r->ext[i])) return false;
    for (int i = 0; i < nfresh; i++)
      if (memplan_clobbers(y, fresh[i])) return false;
  }
  for (int i = 0; i < nfresh; i++) r->ext[r->next++] = fresh[i];
  r->mem[r->n++] = n;
  return true;
}

static void max_group(const Graph *g, int *id) {
  for (int i = 0; i < g->nnodes; i++) {
    if (g->nodes[i]->group > *id) *id = g->nodes[i]->group;
    if (g->nodes[i]->body) max_group(g->nodes[i]->body, id);
  }
}

static void cut_groups(Graph *g, int *next_id) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) cut_groups(g->nodes[i]->body, next_id);
  for (int i = 0, end; i < g->nnodes; i = end) {
    int id = g->nodes[i]->group;
    end = ir_group_end(g, i);
    if (!id) continue;
    Run r = {0};
    for (int k = i; k < end; k++) {
      Node *n = g->nodes[k];
      if (r.n == 0 && memplan_is_view(n)) {
        n->group = 0; /* a view starts no group: the next member does */
        continue;
      }
      if (run_add(&r, n)) {
        n->group = id;
        continue;
      }
      if (r.n == 1) r.mem[0]->group = 0;
      r = (Run){0};
      id = ++*next_id;
      k--; /* n starts the next group */
    }
    if (r.n == 1) r.mem[0]->group = 0;
  }
}

void memplan_keep_group_reads(const Graph *g, const int *slot, Interval *iv) {
  for (int i = 0, end; i < g->nnodes; i = end) {
    end = ir_group_end(g, i);
    if (!g->nodes[i]->group) continue;
    int64_t numel = ir_numel(&g->nodes[end - 1]->out[0]->shape); /* (the group's shape: fuse.c) */
    for (int k = i; k < end; k++)
      for (int j = 0; j < g->nodes[k]->nin; j++) {
        const Value *u = g->nodes[k]->in[j];
        const Node *d = u->def;
        bool inside = false;
        for (int q = i; q < end && !inside; q++) inside = g->nodes[q] == d;
        if (inside || d->graph != g || !slot[u->id] || ir_numel(&u->shape) >= numel) continue;
        if (iv[slot[u->id] - 1].end < end - 1) iv[slot[u->id] - 1].end = end - 1;
      }
  }
}

void memplan_cut_groups(Graph *g) {
  int next_id = 0;
  max_group(g, &next_id);
  cut_groups(g, &next_id);
}
