/* ir/verify.c — the structural verifier run after every pass (ir_verify in ir/ir.h; after most
 * passes ir_verify_changed: the same checks on the graphs the pass changed, ir/verify_memo.c).
 *
 * Checks, for the graph and every nested region body:
 *   - each node belongs to the graph that lists it; outputs point back at it (def, idx);
 *   - arity against the op table (variadic ops: concat >= 1 input, regions by signature);
 *   - topological order: every input is an output of a node earlier in this graph, or of a
 *     node of an enclosing graph placed before the region that (transitively) contains the use;
 *   - dtypes and ranks in range; shardings name valid mesh axes on dims < rank;
 *   - region signatures: body present exactly for REPEAT/CALL, body->parent/owner links,
 *     ARG nodes only in bodies and listed in order with matching index, as many args as
 *     inputs, as many results as outputs, REPEAT counts consistent;
 *   - results non-NULL and in scope; no duplicate PARAM/STATE/INPUT names at top level.
 * A failure is a compiler bug: it prints every problem (up to a limit) naming the pass.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "ir.h"
#include "verify_int.h"

#define MAX_REPORTS 20

/* A graph's node positions by node id (ids are unique within a graph and below its next_node_id:
 * ir_node_new and every pass that moves a node keep it so), for the graph being checked and the
 * graphs around it: the regions being checked form a stack, the top one innermost. */
typedef struct {
  const Graph *g;
  int *pos; /* [g->next_node_id]: id -> position, -1: none */
  /* The values checked so far to be outputs of the nodes listed here, by value id: the value and
   * its node's position (an input found here needs no second look at its defining node, long out
   * of the cache in an unrolled pipeline's program; one not found is checked as it always was). */
  const Value **seen; /* [g->next_value_id], NULL: none yet */
  int *seen_at;       /* [g->next_value_id] */
  int nseen;
  int owner_at; /* g->owner's position in the graph below (-1: none, or no position) */
  bool chain;   /* g and the graphs below are each the body of a node of the one below it */
  int cap_pos, cap_seen, cap_seen_at; /* the arrays' room, kept for the next graph at this depth */
} Scope;

typedef struct {
  Scope *scope;      /* [depth]: the top graph first */
  int depth, cap;
  const char *pass;  /* for messages */
  int errors;        /* problems found */
  VMemoList *memos;  /* ir_verify_changed: the memos hashed (unchanged graphs' nodes skipped), nothing printed */
  uint64_t round;    /* ir_verify_changed: this verification's vmemo_round */
  unsigned flags;    /* ir_verify_changed: IR_VERIFY_ALL, IR_VERIFY_AUDIT */
  int dirty_above;   /* ir_verify_changed: graphs on the scope stack verified in full (changed) */
} Verifier;

static void report(Verifier *vf, const Node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void report(Verifier *vf, const Node *n, const char *fmt, ...) {
  vf->errors++;
  if (vf->errors > MAX_REPORTS || vf->memos) return; /* changed: ir_verify prints the report */
  fprintf(stderr, "shardc: IR verification failed after %s: ", vf->pass ? vf->pass : "?");
  if (n)
    fprintf(stderr, "node #%d (%s%s): ", n->id, ir_ops[n->op].name,
            n->graph && n->graph->parent ? ", in a region body" : "");
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static void *grow(void *p, int *cap, int need, size_t elem) {
  if (need <= *cap) return p;
  *cap = need > 2 * *cap ? need : 2 * *cap;
  p = realloc(p, (size_t)*cap * elem);
  if (!p) die("out of memory verifying the IR");
  return p;
}

static int position(const Verifier *vf, const Node *n);

/* Enters g: its nodes' positions by id, checked to be listed once each under ids of their own. */
static void push_graph(Verifier *vf, const Graph *g) {
  if (vf->depth == vf->cap) {
    int old = vf->cap;
    vf->scope = grow(vf->scope, &vf->cap, vf->cap + 1, sizeof *vf->scope);
    memset(vf->scope + old, 0, (size_t)(vf->cap - old) * sizeof *vf->scope);
  }
  Scope *sc = &vf->scope[vf->depth];
  int ids = g->next_node_id > 0 ? g->next_node_id : 1;
  int *pos = sc->pos = grow(sc->pos, &sc->cap_pos, ids, sizeof *pos);
  memset(pos, 0xff, (size_t)ids * sizeof *pos);
  sc->nseen = g->next_value_id > 0 ? g->next_value_id : 0;
  sc->seen = grow(sc->seen, &sc->cap_seen, sc->nseen, sizeof *sc->seen);
  sc->seen_at = grow(sc->seen_at, &sc->cap_seen_at, sc->nseen, sizeof *sc->seen_at);
  if (sc->nseen) memset(sc->seen, 0, (size_t)sc->nseen * sizeof *sc->seen);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (!n) {
      report(vf, NULL, "graph slot %d is NULL", i);
      continue;
    }
    if (n->id < 0 || n->id >= ids) {
      report(vf, n, "id %d outside its graph's ids [0, %d)", n->id, g->next_node_id);
      continue;
    }
    int old = pos[n->id];
    if (old >= 0)
      report(vf, n, g->nodes[old] == n ? "listed twice (positions %d and %d)" : "shares its id with the node at %d (here %d)",
             old, i);
    else pos[n->id] = i;
  }
  const Scope *below = vf->depth ? &vf->scope[vf->depth - 1] : NULL;
  sc->g = g;
  sc->chain = below ? below->chain && g->parent == below->g && g->owner : !g->parent;
  sc->owner_at = below && g->owner ? position(vf, g->owner) : -1;
  vf->depth++;
}

static void pop_graph(Verifier *vf) { vf->depth--; }

/* Records output j of n, the node at position i of the top graph, as checked (in_scope_seen). */
static void saw_output(Verifier *vf, const Node *n, int i, int j) {
  Scope *sc = &vf->scope[vf->depth - 1];
  const Value *v = n->out[j];
  if (v && v->def == n && v->idx == j && n->graph == sc->g && n->id >= 0 && n->id < sc->g->next_node_id &&
      sc->pos[n->id] == i && v->id >= 0 && v->id < sc->nseen) {
    sc->seen[v->id] = v;
    sc->seen_at[v->id] = i;
  }
}

/* Whether v, read at position `at` of the top graph, is a checked output (saw_output) of a node
 * before it there or before the region holding the use in a graph around it: then what in_scope and
 * the defining-node checks before it would find, found without them. False: not known so (they
 * decide, as they always did). */
static bool in_scope_seen(const Verifier *vf, const Value *v, int at) {
  for (int d = vf->depth - 1; d >= 0; d--) {
    const Scope *sc = &vf->scope[d];
    if (!sc->chain) return false;
    if (v->id >= 0 && v->id < sc->nseen && sc->seen[v->id] == v) return sc->seen_at[v->id] < at;
    if ((at = sc->owner_at) < 0) return false;
  }
  return false;
}

/* n's position in its graph, a graph on the scope stack, or -1. */
static int position(const Verifier *vf, const Node *n) {
  for (int d = vf->depth - 1; d >= 0; d--) {
    const Scope *sc = &vf->scope[d];
    if (sc->g != n->graph) continue;
    if (n->id < 0 || n->id >= sc->g->next_node_id) return -1;
    int p = sc->pos[n->id];
    return p >= 0 && sc->g->nodes[p] == n ? p : -1;
  }
  return -1;
}

/* Is v visible to a use at position `at` of graph g (the top of the scope stack)? */
static bool in_scope(Verifier *vf, const Value *v, const Graph *g, int at) {
  if (!v || !v->def) return false;
  int p = position(vf, v->def);
  if (p < 0) return false;
  for (const Graph *s = g; s; s = s->parent) {
    if (v->def->graph == s) return p < at;
    if (!s->owner) return false;
    if ((at = position(vf, s->owner)) < 0) return false;
  }
  return false;
}

/* Whether check_value finds nothing wrong with v, decided in one walk of its dims (a mesh axis met
 * twice: a bit set twice): most values are well formed, and their check is then this one. Where it
 * says no, check_value's full walk names each problem. */
static bool value_ok(const Value *v) {
  if (v->dtype < 0 || v->dtype >= DT_COUNT || v->shape.rank < 0 || v->shape.rank > IR_MAX_RANK ||
      v->sharding.partial >> RT_AX_COUNT)
    return false;
  unsigned axes = 0; /* the mesh axes splitting a dim so far */
  for (int d = 0; d < IR_MAX_RANK; d++) {
    int s = v->sharding.split[d], in = v->sharding.inner[d], bl = v->sharding.blocks[d];
    if (d < v->shape.rank && v->shape.dim[d] < 0) return false;
    if (s == -1) {
      if (in != -1 || bl > 1) return false;
      continue;
    }
    if (s < -1 || s >= RT_AX_COUNT || d >= v->shape.rank || (axes >> s & 1)) return false;
    axes |= 1u << s;
    if (bl > 1 && v->shape.dim[d] % rt_blocks_count(bl) != 0) return false;
    if (in == -1) continue;
    if (in < -1 || in >= RT_AX_COUNT || in == s || (axes >> in & 1)) return false;
    axes |= 1u << in;
  }
  return true;
}

static void check_value(Verifier *vf, const Node *n, const Value *v) {
  if (value_ok(v)) return;
  if (v->dtype < 0 || v->dtype >= DT_COUNT) report(vf, n, "output %d has bad dtype %d", v->idx, (int)v->dtype);
  if (v->shape.rank < 0 || v->shape.rank > IR_MAX_RANK) {
    report(vf, n, "output %d has bad rank %d", v->idx, v->shape.rank);
    return;
  }
  for (int d = 0; d < v->shape.rank; d++)
    if (v->shape.dim[d] < 0) report(vf, n, "output %d has negative dim %d", v->idx, d);
  for (int d = 0; d < IR_MAX_RANK; d++) {
    int s = v->sharding.split[d];
    if (s < -1 || s >= RT_AX_COUNT) report(vf, n, "output %d: sharding of dim %d names mesh axis %d", v->idx, d, s);
    else if (s >= 0 && d >= v->shape.rank)
      report(vf, n, "output %d: sharding splits dim %d of a rank-%d value", v->idx, d, v->shape.rank);
    int bl = v->sharding.blocks[d];
    if (bl > 1 && (s < 0 || d >= v->shape.rank || v->shape.dim[d] % rt_blocks_count(bl) != 0))
      report(vf, n, "output %d: %d blocks on dim %d that is %s", v->idx, bl, d,
             s < 0 ? "not split" : "not a whole number of blocks");
    for (int e = 0; e < d && s >= 0; e++)
      if (v->sharding.split[e] == s || v->sharding.inner[e] == s)
        report(vf, n, "output %d: mesh axis %s splits two dims", v->idx, rt_mesh_axis_name(s));
    int in = v->sharding.inner[d];
    if (in < -1 || in >= RT_AX_COUNT) report(vf, n, "output %d: inner sharding of dim %d names mesh axis %d", v->idx, d, in);
    else if (in >= 0 && (s < 0 || in == s || d >= v->shape.rank))
      report(vf, n, "output %d: inner split of dim %d %s", v->idx, d,
             s < 0 || d >= v->shape.rank ? "without an outer split" : "over the outer split's axis");
    for (int e = 0; e < d && in >= 0; e++)
      if (v->sharding.split[e] == in || v->sharding.inner[e] == in)
        report(vf, n, "output %d: mesh axis %s splits two dims", v->idx, rt_mesh_axis_name(in));
  }
  if (v->sharding.partial >> RT_AX_COUNT) report(vf, n, "output %d: partial bits 0x%x name no mesh axis", v->idx, v->sharding.partial);
}

static void verify_graph(Verifier *vf, const Graph *g);

/* Memory spaces (Value.host, plan offload): a node computes in one space, the one its outputs
 * live in; it reads values of that space only, except to_host (reads the device, writes the host)
 * and to_device (the reverse). Host values are top-level tensors of the optimizer step: a source
 * (the sharded optimizer state), to_host's copy, and what an update computes from them;
 * collectives and regions run on the device. */
static void check_spaces(Verifier *vf, const Node *n) {
  if (n->nout == 0 && n->nin == 0) return;
  bool host = n->nout ? n->out[0]->host : false;
  for (int j = 1; j < n->nout; j++)
    if (n->out[j]->host != host) report(vf, n, "outputs in two memory spaces");
  bool want_in = n->op == OP_TO_HOST ? false : n->op == OP_TO_DEVICE ? true : host;
  if (n->op == OP_TO_HOST && !host) report(vf, n, "to_host writes a device value");
  if (n->op == OP_TO_DEVICE && host) report(vf, n, "to_device writes a host value");
  for (int j = 0; j < n->nin; j++)
    if (n->in[j] && n->in[j]->host != want_in)
      report(vf, n, "input %d lives in %s memory, the node reads %s memory", j, n->in[j]->host ? "host" : "device",
             want_in ? "host" : "device");
  if (host && ((ir_ops[n->op].flags & (F_COLL | F_REGION)) || n->graph->parent))
    report(vf, n, "a collective, a region or a region's body node in host memory");
}

static void check_region(Verifier *vf, const Graph *g, const Node *n) {
  const Graph *b = n->body;
  if (b->parent != g) report(vf, n, "body's parent is not the graph holding the node");
  if (b->owner != n) report(vf, n, "body's owner is not this node");
  if (b->nargs != n->nin) report(vf, n, "%d inputs but the body takes %d arguments", n->nin, b->nargs);
  for (int i = 0; i < b->nargs; i++) {
    const Node *a = b->args[i];
    if (!a || a->op != OP_ARG || a->graph != b) {
      report(vf, n, "body argument %d is not an ARG node of the body", i);
      continue;
    }
    if (a->a.index != i) report(vf, a, "ARG index %d listed as argument %d", a->a.index, i);
    if (a->a.next && (n->op != OP_REPEAT || i < n->a.ncarry || i >= n->a.ncarry + n->a.nxs))
      report(vf, a, "ARG %d reads the next iteration's row but is not a repeat's stacked input", i);
    if (i < n->nin && n->op == OP_CALL &&
        (a->out[0]->dtype != n->in[i]->dtype || !ir_shape_eq(&a->out[0]->shape, &n->in[i]->shape)))
      report(vf, n, "input %d does not match the body's argument type", i);
  }
  if (b->nresults != n->nout) report(vf, n, "%d outputs but the body yields %d results", n->nout, b->nresults);
  if (n->op == OP_REPEAT) {
    if (n->a.count < 1) report(vf, n, "repeat count %lld", (long long)n->a.count);
    /* a cut loop (passes/recompute_split.c) and the one continuing it: repeats of one graph, linked both ways */
    if (n->cont && (n->cont->op != OP_REPEAT || n->cont->graph != n->graph || n->cont->cont_of != n))
      report(vf, n, "continues in a node that is not a repeat of its graph continuing it (Node.cont)");
    if (n->cont_of && (n->cont_of->op != OP_REPEAT || n->cont_of->graph != n->graph || n->cont_of->cont != n))
      report(vf, n, "continues a node that is not a repeat of its graph it continues (Node.cont_of)");
    if (n->a.ncarry < 0 || n->a.nxs < 0 || n->a.ncarry + n->a.nxs > n->nin || n->a.ncarry > n->nout)
      report(vf, n, "ncarry %d / nxs %d inconsistent with %d inputs, %d outputs", n->a.ncarry, n->a.nxs, n->nin,
             n->nout);
  }
  verify_graph(vf, b);
  for (int i = 0; i < b->nresults && i < n->nout; i++) {
    const Value *r = b->results[i];
    if (!r) continue;
    const Value *o = n->out[i];
    bool stacked = n->op == OP_REPEAT && i >= n->a.ncarry;
    Shape want = r->shape;
    if (stacked && want.rank < IR_MAX_RANK) {
      for (int d = want.rank; d > 0; d--) want.dim[d] = want.dim[d - 1];
      want.rank++;
      want.dim[0] = n->a.count;
    }
    if (o->dtype != r->dtype || !ir_shape_eq(&o->shape, &want))
      report(vf, n, "output %d does not match body result %d%s", i, i, stacked ? " stacked by count" : "");
  }
}

/* ir_verify_changed: whether v, a value another graph defines that g read when last verified, is
 * still what that verification saw (vmemo_sig) and in scope there. */
static void check_ext(Verifier *vf, const VExt *e, const Graph *g) {
  const Value *v = e->v;
  if (!v->def || v->idx < 0 || v->idx >= v->def->nout || !v->def->out || v->def->out[v->idx] != v ||
      vmemo_sig(v) != e->sig || !in_scope(vf, v, g, g->nnodes))
    report(vf, NULL, "a value read across a region's boundary changed");
}

static void verify_nodes(Verifier *vf, const Graph *g);

/* ir_verify_changed: the bodies under `root`, all unchanged (root's subtree), under a graph that
 * changed: what they read from outside the subtree checked again (in scope from root). */
static void check_ext_tree(Verifier *vf, const Graph *root, const Graph *b) {
  const IrVerifyMemo *m = b->vmemo;
  for (int i = 0; i < m->next; i++) {
    const Value *v = m->ext[i].v;
    const Graph *s = v->def ? v->def->graph : NULL;
    while (s && s != root) s = s->parent;
    if (!s) check_ext(vf, &m->ext[i], root); /* defined outside the subtree */
  }
  for (int k = 0; k < m->nkids; k++) check_ext_tree(vf, root, m->kids[k]->body);
}

/* ir_verify_changed hashes each graph as it enters it (vmemo_hash): a changed graph's nodes are
 * verified in full, while in the cache, and its bodies as they come; an unchanged one's nodes are
 * not, and its bodies are hashed first (vmemo_scan): an unchanged subtree is left, but its reads
 * of values defined around it are checked again where a graph around it changed; a changed body
 * is verified with its region's signature. */
static void verify_graph(Verifier *vf, const Graph *g) {
  IrVerifyMemo *m = vf->memos ? vmemo_hash(g, vf->memos, vf->round, vf->flags) : NULL;
  if (m && !m->dirty && !vmemo_scan(g, vf->memos, vf->round, vf->flags)) {
    if (vf->dirty_above) check_ext_tree(vf, g, g);
    return;
  }
  push_graph(vf, g);
  if (m && !m->dirty) {
    if (vf->dirty_above)
      for (int i = 0; i < m->next; i++) check_ext(vf, &m->ext[i], g);
    for (int k = 0; k < m->nkids; k++) {
      const Graph *b = m->kids[k]->body;
      if (b->vmemo->subdirty) check_region(vf, g, m->kids[k]);
      else if (vf->dirty_above) check_ext_tree(vf, b, b);
    }
  } else {
    if (m) m->next = 0, vf->dirty_above++;
    verify_nodes(vf, g);
    if (m) vf->dirty_above--;
  }
  pop_graph(vf);
}

/* Every check of g's own nodes and results (g on top of the scope stack). */
static void verify_nodes(Verifier *vf, const Graph *g) {
  bool memo = vf->memos != NULL;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (!n) continue;
    if (n->op < 0 || n->op >= OP_COUNT) {
      report(vf, NULL, "node at position %d has bad op %d", i, (int)n->op);
      continue;
    }
    const OpInfo *oi = &ir_ops[n->op];
    if (n->graph != g) report(vf, n, "owner graph link is wrong");
    if (oi->nin >= 0 && n->nin != oi->nin) report(vf, n, "has %d inputs, the op takes %d", n->nin, oi->nin);
    if (oi->nout >= 0 && n->nout != oi->nout) report(vf, n, "has %d outputs, the op makes %d", n->nout, oi->nout);
    if (n->op == OP_CONCAT && n->nin < 1) report(vf, n, "concat of nothing");
    for (int j = 0; j < n->nin; j++) {
      const Value *v = n->in[j];
      if (!v) {
        report(vf, n, "input %d is NULL", j);
        continue;
      }
      const Scope *top = &vf->scope[vf->depth - 1]; /* (a body's scope may move the array) */
      if (memo && !(v->id >= 0 && v->id < top->nseen && top->seen[v->id] == v) && v->def && v->def->graph != g)
        vmemo_add_ext(g, v); /* defined in another graph: checked again when that one changes */
      if (in_scope_seen(vf, v, i)) continue;
      if (!v->def || v->idx < 0 || v->idx >= v->def->nout || v->def->out[v->idx] != v)
        report(vf, n, "input %d (%%%d) is not an output of its defining node", j, v->id);
      else if (!in_scope(vf, v, g, i))
        report(vf, n, "input %d (%%%d, from %s #%d) is not defined before its use", j, v->id,
               ir_ops[v->def->op].name, v->def->id);
    }
    for (int j = 0; j < n->nout; j++) {
      const Value *v = n->out[j];
      if (!v) {
        report(vf, n, "output %d is NULL", j);
        continue;
      }
      if (v->def != n || v->idx != j) report(vf, n, "output %d does not point back at its node", j);
      check_value(vf, n, v);
      saw_output(vf, n, i, j);
    }
    check_spaces(vf, n);
    if ((oi->flags & F_REGION) != 0) {
      if (!n->body) report(vf, n, "region without a body");
      else check_region(vf, g, n);
    } else if (n->body) {
      report(vf, n, "non-region op with a body");
    }
    if (n->op == OP_ARG) {
      if (!g->parent) report(vf, n, "ARG in the top graph");
      else if (n->a.index < 0 || n->a.index >= g->nargs || g->args[n->a.index] != n)
        report(vf, n, "ARG index %d is not listed among the body's %d arguments", n->a.index, g->nargs);
    }
    if ((oi->flags & F_COLL) || n->op == OP_AXIS_INDEX)
      if (n->a.mesh_axis < 0 || n->a.mesh_axis >= RT_AX_COUNT) report(vf, n, "names mesh axis %d", n->a.mesh_axis);
    if ((n->op == OP_PARAM || n->op == OP_STATE || n->op == OP_INPUT) && !n->a.name)
      report(vf, n, "source without a name");
    if (n->a.skiplast && (n->op != OP_ALL_GATHER || !g->owner || g->owner->op != OP_REPEAT))
      report(vf, n, "skiplast on a node that is not an all_gather in a repeat's body");
  }
  for (int i = 0; i < g->nresults; i++) {
    const Value *r = g->results[i];
    if (!r) report(vf, g->owner, "result %d is NULL", i);
    else if (!in_scope(vf, r, g, g->nnodes))
      report(vf, g->owner, "result %d (%%%d) is not defined in scope", i, r->id);
    else if (memo && r->def->graph != g)
      vmemo_add_ext(g, r);
  }
}

static bool is_source(const Node *n) { return n && (n->op == OP_PARAM || n->op == OP_STATE || n->op == OP_INPUT) && n->a.name; }

/* No two sources (PARAM, STATE, INPUT) of g share a name: each reported against the first one of
 * that name, found in a table of the names so far (open addressing over their hashes). */
static void check_names(Verifier *vf, const Graph *g) {
  int k = 0, cap = 16;
  for (int i = 0; i < g->nnodes; i++) k += is_source(g->nodes[i]);
  while (cap < 2 * k) cap *= 2;
  const Node **slot = calloc((size_t)cap, sizeof *slot);
  if (!slot) die("out of memory verifying the IR");
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (!is_source(n)) continue;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *c = n->a.name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
    int at = (int)(h & (uint64_t)(cap - 1));
    while (slot[at] && strcmp(slot[at]->a.name, n->a.name) != 0) at = (at + 1) & (cap - 1);
    if (slot[at]) report(vf, n, "name \"%s\" already used by %s #%d", n->a.name, ir_ops[slot[at]->op].name, slot[at]->id);
    else slot[at] = n;
  }
  free(slot);
}

static void free_verifier(Verifier *vf) {
  for (int d = 0; d < vf->cap; d++) {
    free(vf->scope[d].pos);
    free(vf->scope[d].seen);
    free(vf->scope[d].seen_at);
  }
  free(vf->scope);
}

bool ir_verify_changed(Graph *g, const char *after_pass, unsigned flags) {
  VMemoList list = {0};
  Verifier vf = {.pass = after_pass, .memos = &list, .round = vmemo_round(), .flags = flags};
  verify_graph(&vf, g);
  if (!g->parent && g->vmemo->dirty) check_names(&vf, g);
  free_verifier(&vf);
  bool ok = vf.errors == 0 || ir_verify(g, after_pass); /* the report; a read across a region's
                                                            boundary that changed may still be valid */
  for (int i = 0; i < list.n; i++)
    if (list.m[i]->untouched) { /* a pass's write the verification after it would not have seen */
      const Node *o = list.m[i]->graph->owner;
      char what[160] = "the top graph";
      if (o)
        snprintf(what, sizeof what, "the body of %s #%d%s%s", ir_ops[o->op].name, o->id, o->a.name ? " " : "",
                 o->a.name ? o->a.name : "");
      fprintf(stderr, "shardc: IR verification (audit) after %s: %s changed without ir_touch\n",
              after_pass ? after_pass : "?", what);
      ok = false;
    }
  vmemo_finish(&list, ok && vf.errors == 0, flags);
  return ok;
}

bool ir_verify(const Graph *g, const char *after_pass) {
  Verifier vf = {.pass = after_pass};
  verify_graph(&vf, g);
  if (!g->parent) check_names(&vf, g);
  if (vf.errors > MAX_REPORTS)
    fprintf(stderr, "shardc: IR verification after %s: %d more problems\n", after_pass ? after_pass : "?",
            vf.errors - MAX_REPORTS);
  free_verifier(&vf);
  return vf.errors == 0;
}
