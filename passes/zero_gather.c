/* passes/zero_gather.c — part of the `zero` pass (passes/zero.c): ZeRO-3's parameters stored split.
 *
 * zero.c's shard_update asks zero_can_split_param whether a parameter may be stored split over the group
 * along d (no repeat carries it, no result names it, not under the persistence threshold) and then
 * zero_split_param rewrites its readers: every reader gathers it right before it reads it (gather_uses)
 * — a plain node its own all_gather; a layer loop that takes the shard as a stacked input the layer's
 * gather at the front of its body (gather_for_readers) or, with the prefetch, the gathered layer carried
 * and the next one's gather in flight through the iteration (prefetch_layer, its nodes before the loop
 * placed once per parameter: passes/zero_before.c); a body that captures it the same rules inside it.
 * The gather moves past the parameter's bf16 cast and past a slice along another dim (a pipeline
 * stage's or chunk's rows), which are kept split. zero.c's header comment describes ZeRO-3 as a whole;
 * a body's captures are found once (passes/zero_captures.c).
 *
 * The pass's questions of the step (the top graph) go to a readers index made when the pass begins (value ->
 * the step's nodes reading it, in order; see `top` below): gather_uses, readers_can_gather, zero_read_as_xs
 * here, and the gradient's in zero.c and zero_sums.c (zero_readers, zero_count_uses, zero_replace_uses).
 */
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "passes.h"
#include "ptrmap.h"
#include "zero.h"

/* ZeRO-3's persistence threshold: a parameter with fewer elements than this (per layer, when
 * stacked) stays whole on every rank (norm gains, biases): gathering it would cost more in
 * latency than it saves in memory (DeepSpeed's stage3_param_persistence_threshold, smaller). */
enum { ZERO3_PERSIST_NUMEL = 1024 };

/* During pass_zero (zero_gather_begin .. zero_gather_end): each body's captures (passes/zero_captures.c),
 * for reads_deep and readers_can_gather; NULL: none. */
static ZeroCaptures *captures;

/* During pass_zero: the top graph's readers index, for gather_uses. For each value the top graph's nodes read
 * (an input, or a capture of the node's body: zero_captures_list), those nodes, each once, in the graph's
 * order, as the pass began. gather_uses walks a value's list instead of the whole step (Llama-3-405B pp 16 x
 * cp 2: 33k-206k nodes, four walks per parameter). It stays the list of the readers of what the pass asks
 * about, p, the casts and slices of it and its gradient, since the rewrites of the parameters before p (their
 * gathers, the prefetch's carries, the gradients' scatters) add no reader of those, remove none, and move none
 * past another (nodes are inserted, the step's order kept): a list is walked in order only where its nodes are
 * found in that order (else the scan), a value whose readers the pass replaces (zero_replace_uses) leaves the
 * index, and SHARDC_VERIFY=audit checks each list, count and answer against the scan. */
static struct {
  const Graph *g;      /* the top graph (NULL: none) */
  PtrMap at;           /* value -> 1 + its list's number (0: it left the index) */
  int *start, *len;    /* list k: node[start[k] .. start[k] + len[k]) */
  const Node **node;
  const Node **yield; /* [nyield]: the top repeats whose bodies yield a capture unchanged (readers_can_gather) */
  int nyield;
  bool audit;
} top;

/* Each value node x of the top graph reads, directly or in its body (its captures), once: f(v, x). */
static void each_read(const Node *x, void (*f)(const Value *, const Node *)) {
  for (int j = 0; j < x->nin; j++) f(x->in[j], x);
  if (!x->body) return;
  int nc;
  const Value *const *c = zero_captures_list(captures, x->body, &nc);
  for (int k = 0; k < nc; k++) f(c[k], x);
}

static int nlists, caplists;
static const Node **last; /* [list]: the node last counted in it (a node reading a value twice: once) */

static void count_read(const Value *v, const Node *x) {
  intptr_t k;
  if (!ptrmap_get(&top.at, v, &k)) {
    if (nlists == caplists) {
      caplists = caplists ? 2 * caplists : 1024;
      top.start = realloc(top.start, sizeof *top.start * (size_t)caplists);
      top.len = realloc(top.len, sizeof *top.len * (size_t)caplists);
      last = realloc(last, sizeof *last * (size_t)caplists);
      if (!top.start || !top.len || !last) die("out of memory");
    }
    k = ++nlists;
    ptrmap_put(&top.at, v, k);
    top.len[k - 1] = 0, last[k - 1] = NULL;
  }
  if (last[k - 1] != x) top.len[k - 1]++, last[k - 1] = x;
}

static void add_read(const Value *v, const Node *x) {
  intptr_t k;
  ptrmap_get(&top.at, v, &k);
  if (last[k - 1] != x) top.node[top.start[k - 1] + top.len[k - 1]++] = x, last[k - 1] = x;
}

static void index_build(const Graph *g) {
  nlists = caplists = 0;
  for (int i = 0; i < g->nnodes; i++) each_read(g->nodes[i], count_read);
  int total = 0;
  for (int k = 0; k < nlists; k++) top.start[k] = total, total += top.len[k], top.len[k] = 0, last[k] = NULL;
  top.node = malloc(sizeof *top.node * (size_t)(total + 1));
  if (!top.node) die("out of memory");
  for (int i = 0; i < g->nnodes; i++) each_read(g->nodes[i], add_read);
  free(last);
  last = NULL;
  top.yield = malloc(sizeof *top.yield * (size_t)(g->nnodes + 1));
  if (!top.yield) die("out of memory");
  top.nyield = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_REPEAT && zero_captures_yields_outer(captures, g->nodes[i]->body))
      top.yield[top.nyield++] = g->nodes[i];
  const char *e = getenv("SHARDC_VERIFY");
  top.audit = e && strcmp(e, "audit") == 0;
  top.g = g;
}

/* During pass_zero: its ir_use_counts_outer memo (zero.c, for passes/zero_sums.c's counts), whose list of a
 * layer loop's body the gathers below keep: they add nodes to the body and rewire its own values only. */
static IrUseMemo *use_memo;

void zero_gather_begin(Graph *g, IrUseMemo *memo) {
  captures = zero_captures_new(g->arena);
  use_memo = memo;
  index_build(g);
}

void zero_gather_end(void) {
  zero_captures_free(captures);
  captures = NULL;
  ptrmap_free(&top.at);
  free(top.start), free(top.len), free(top.node), free(top.yield);
  memset(&top, 0, sizeof top);
  use_memo = NULL;
}

/* p's list in the readers index (*r; its length), or -1: g is not the top graph or p is not in the index (or
 * left it: zero_replace_uses). */
static int index_list(const Graph *g, const Value *p, const Node *const **r) {
  intptr_t k;
  if (g != top.g || !ptrmap_get(&top.at, p, &k) || k <= 0) return -1;
  *r = top.node + top.start[k - 1];
  return top.len[k - 1];
}

/* SHARDC_VERIFY=audit: every node of g that reads v is in its list r (which may hold a body's reader too). */
static void audit_direct(const Graph *g, const Value *v, const Node *const *r, int nr) {
  for (int i = 0; i < g->nnodes; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++) {
      if (g->nodes[i]->in[j] != v) continue;
      int k = 0;
      while (k < nr && r[k] != g->nodes[i]) k++;
      if (k == nr) die("zero: the readers index of %%%d lost a reader (node %d)", v->id, g->nodes[i]->id);
    }
}

int zero_readers(const Graph *g, const Value *v, const Node *const **r) {
  int nr = index_list(g, v, r);
  if (nr >= 0 && top.audit) audit_direct(g, v, *r, nr);
  return nr;
}

int zero_count_uses(const Graph *g, const Value *v) {
  const Node *const *r;
  int nr = zero_readers(g, v, &r), c = 0;
  if (nr < 0) return ir_count_uses(g, v);
  for (int k = 0; k < nr; k++)
    for (int j = 0; j < r[k]->nin; j++) c += r[k]->in[j] == v;
  if (top.audit && c != ir_count_uses(g, v)) die("zero: the readers index counts %d reads of %%%d, the graph %d", c, v->id, ir_count_uses(g, v));
  return c;
}

void zero_replace_uses(Graph *g, Value *from, Value *to) {
  const Node *const *r;
  int nr = zero_readers(g, from, &r);
  if (nr < 0) {
    ir_replace_uses(g, from, to);
    return;
  }
  bool changed = false;
  for (int k = 0; k < nr; k++) {
    Node *n = (Node *)r[k];
    for (int j = 0; j < n->nin; j++)
      if (n->in[j] == from) n->in[j] = to, changed = true;
  }
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == from) g->results[i] = to, changed = true;
  if (changed) ir_touch(g);
  ptrmap_put(&top.at, from, 0), ptrmap_put(&top.at, to, 0); /* (their lists are not theirs now: the scan) */
  if (top.audit && ir_count_uses(g, from)) die("zero: %%%d still read after its readers index's replacement", from->id);
}

static bool readers_can_gather(const Graph *g, const Value *p, const Node *u, int d);

/* readers_can_gather's question of node n of g: false where n refuses (a repeat carrying p, yielding its
 * argument unchanged, or taking it as xs split at the layer dim), or a reader in its body does. */
static bool node_can_gather(const Node *n, const Value *p, const Node *u, int d) {
  if (n == u || n->op != OP_REPEAT) return true;
  for (int j = 0; j < n->nin; j++) {
    if (n->in[j] != p) continue;
    const Graph *b = n->body;
    bool xs = j >= n->a.ncarry && j < n->a.ncarry + n->a.nxs;
    if (j < n->a.ncarry || (xs && d < 1)) return false;
    for (int k = 0; k < b->nresults; k++)
      if (b->results[k] == b->args[j]->out[0]) return false;
  }
  /* (a body that reads no p and yields no capture unchanged has no reader of p to refuse: skipped) */
  if (captures && !zero_captures_reads(captures, n->body, p) && !zero_captures_yields_outer(captures, n->body))
    return true;
  return readers_can_gather(n->body, p, u, d);
}

static bool can_gather_scan(const Graph *g, const Value *p, const Node *u, int d) {
  for (int i = 0; i < g->nnodes; i++)
    if (!node_can_gather(g->nodes[i], p, u, d)) return false;
  return true;
}

/* Whether every reader of p in g (and in the bodies nested in it, which capture p: the micro-step
 * region) can read it gathered: no repeat carries it or yields it unchanged, no xs split at the
 * layer dim (d < 1), no result names it. In the top graph, the repeats its readers index lists for p and
 * those yielding a capture unchanged are asked, the others having no reader of p (the answer does not
 * depend on the order); SHARDC_VERIFY=audit asks every node too. */
static bool readers_can_gather(const Graph *g, const Value *p, const Node *u, int d) {
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == p) return false;
  const Node *const *r;
  int nr = index_list(g, p, &r);
  if (nr < 0) return can_gather_scan(g, p, u, d);
  bool ok = true;
  for (int k = 0; k < nr && ok; k++) ok = node_can_gather(r[k], p, u, d);
  for (int k = 0; k < top.nyield && ok; k++) ok = node_can_gather(top.yield[k], p, u, d);
  if (top.audit && ok != can_gather_scan(g, p, u, d)) die("zero: the readers index answers %%%d's gather wrongly", p->id);
  return ok;
}

static bool read_as_xs_scan(const Graph *g, const Value *p) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op == OP_CAST && n->in[0] == p && read_as_xs_scan(g, n->out[0])) return true; /* bf16: its copy */
    if (!n->body) continue;
    for (int j = n->a.ncarry; j < n->a.ncarry + n->a.nxs; j++)
      if (n->in[j] == p) return true;
    if (read_as_xs_scan(n->body, p)) return true;
  }
  return false;
}

/* In the top graph, only p's readers by its readers index (a node that reads p neither directly nor in its
 * body cannot answer yes); SHARDC_VERIFY=audit asks the scan too. */
bool zero_read_as_xs(const Graph *g, const Value *p) {
  const Node *const *r;
  int nr = index_list(g, p, &r);
  if (nr < 0) return read_as_xs_scan(g, p);
  bool got = false;
  for (int k = 0; k < nr && !got; k++) {
    const Node *n = r[k];
    if (n->op == OP_CAST && n->in[0] == p) got = zero_read_as_xs(g, n->out[0]); /* bf16: its copy */
    for (int j = n->body ? n->a.ncarry : 0; n->body && j < n->a.ncarry + n->a.nxs && !got; j++) got = n->in[j] == p;
    if (n->body && !got) got = read_as_xs_scan(n->body, p);
  }
  if (top.audit && got != read_as_xs_scan(g, p)) die("zero: the readers index answers whether %%%d is read as xs wrongly", p->id);
  return got;
}

/* ZeRO-3: can parameter p (updated by u) be stored split along d? Not when a repeat carries it,
 * a result names it, or it is under the persistence threshold (per layer when stacked). */
bool zero_can_split_param(const Graph *g, const Value *p, const Node *u, int d, bool stacked) {
  int64_t per = ir_numel(&p->shape) / (stacked ? p->shape.dim[0] : 1);
  if (per < ZERO3_PERSIST_NUMEL) return false;
  return readers_can_gather(g, p, u, d);
}

/* y = all_gather(x) over dp along d (typed `whole`) in body g, x the argument node `an` binds (a
 * layer's slice of the stored shard): every reader of x in g but the gather reads y. The gather
 * goes to the front of the body, after its arguments (`an` moves there too): codegen starts it
 * asynchronously and waits before its first reader, so a layer's gathers are all in flight while
 * its first operations run (within the iteration: no prefetch of the next layer). */
static void gather_for_readers(Graph *g, Value *x, const Value *whole, int d, ZeroGroup z, Node *an) {
  const Node *first = NULL; /* its location names the gather */
  for (int i = 0; i < g->nnodes && !first; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++)
      if (g->nodes[i]->in[j] == x) first = g->nodes[i];
  if (!first) return;
  int pa = zero_position(g, an);
  memmove(&g->nodes[1], &g->nodes[0], sizeof(Node *) * (size_t)pa);
  g->nodes[0] = an;
  Node *ag = zero_gather_new(g, x, whole, d, z, first->loc)->def;
  int at = 0;
  while (at < g->nnodes - 1 && g->nodes[at]->op == OP_ARG) at++;
  ir_move_last(g, at);
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i] != ag)
      for (int j = 0; j < g->nodes[i]->nin; j++)
        if (g->nodes[i]->in[j] == x) g->nodes[i]->in[j] = ag->out[0];
}

static bool reads_deep(const Graph *g, const Value *p);

/* During zero_split_param: the prefetch's nodes of its graph, placed once it is done (passes/zero_before.c). */
static ZeroBefore *before;

static bool is_result_of(const Graph *g, const Value *v) {
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i] == v) return true;
  return false;
}

/* A fresh output value of n (its index set by the caller), typed like `like`. */
static Value *new_output(Graph *g, Node *n, const Value *like) {
  Value *v = ARENA_NEW(g->arena, Value);
  v->def = n;
  v->id = g->next_value_id++;
  v->dtype = like->dtype;
  v->shape = like->shape;
  v->sharding = like->sharding;
  v->name = like->name;
  v->offset = -1;
  return v;
}

/* Inserts at position at of arr (n long, room for n + 1). */
static void insert_at(void **arr, int n, int at, void *x) {
  memmove(&arr[at + 1], &arr[at], sizeof(void *) * (size_t)(n - at));
  arr[at] = x;
}

/* ZeRO-3's prefetch: layer loop n (in g) reads the stored shard p = n->in[j] as a stacked input,
 * its body's argument x being a layer's shard (split along dl). Instead of gathering x at the
 * front of its own iteration, the loop carries the gathered layer: before the loop, the first
 * layer's row of p is gathered (the carry's initial value); each iteration computes with the
 * carried layer and starts, at its front, the gather of the next layer's row (x becomes an
 * `arg next`: row i+1, reverse i-1), which it yields as the next carry; codegen waits for it at the
 * end of the iteration, so it is in flight while the whole layer computes. The last iteration's
 * gather (the first row again, modulo count) would be unread: it is `skiplast`, not issued there
 * (interpreter, codegen, cost, traffic report), so a loop of L layers gathers L rows. Two layers'
 * gathered parameters are live at once: the carry and the next one. pos: n's position in g. Returns
 * the nodes inserted into g before n (3; 0 where recorded in `before`, placed later), or -1 when the body
 * does not read x. */
static int prefetch_layer(Graph *g, Node *n, int pos, int j, const Value *whole, int dl, ZeroGroup z) {
  Graph *b = n->body;
  Node *an = b->args[j];
  Value *x = an->out[0], *p = n->in[j];
  if (!reads_deep(b, x)) return -1;
  SrcLoc loc = n->loc;
  int nc = n->a.ncarry;
  /* the first layer's gather, before the loop */
  Value *r0 = ir_stacked_row(g, p, n->a.reverse ? n->a.count - 1 : 0, x, loc);
  Value *row = r0->def->in[0]; /* the slice under the reshape */
  Value *w0 = zero_gather_new(g, r0, whole, dl, z, loc);
  int moved = 0; /* the three before n: placed later, all at once, where g is the parameter's (before) */
  if (before && before->g == g) {
    zero_before_add(before, n, row->def), zero_before_add(before, n, r0->def), zero_before_add(before, n, w0->def);
  } else { /* to pos, g's later nodes moved once, not three times */
    memmove(&g->nodes[pos + 3], &g->nodes[pos], sizeof(Node *) * (size_t)(g->nnodes - 3 - pos));
    g->nodes[pos] = row->def, g->nodes[pos + 1] = r0->def, g->nodes[pos + 2] = w0->def;
    ir_touch(g);
    moved = 3;
  }
  /* a new carry, the last one: input w0, output the last gathered layer, body argument wc */
  Arena *A = g->arena;
  Value **in = ARENA_ARRAY(A, Value *, n->nin + 1);
  memcpy(in, n->in, sizeof(Value *) * (size_t)n->nin);
  insert_at((void **)in, n->nin++, nc, w0);
  n->in = in;
  Value **out = ARENA_ARRAY(A, Value *, n->nout + 1);
  memcpy(out, n->out, sizeof(Value *) * (size_t)n->nout);
  insert_at((void **)out, n->nout++, nc, new_output(g, n, whole));
  n->out = out;
  for (int k = 0; k < n->nout; k++) n->out[k]->idx = k;
  Node *wa = ir_node_new(b, OP_ARG, 0, NULL, 1, loc);
  wa->out[0]->dtype = whole->dtype;
  wa->out[0]->shape = whole->shape;
  wa->out[0]->sharding = whole->sharding;
  wa->out[0]->name = whole->name;
  ir_move_last(b, 0);
  Node **args = ARENA_ARRAY(b->arena, Node *, b->nargs + 1);
  memcpy(args, b->args, sizeof(Node *) * (size_t)b->nargs);
  insert_at((void **)args, b->nargs++, nc, wa);
  b->args = args;
  b->capargs = b->nargs;
  for (int k = 0; k < b->nargs; k++) b->args[k]->a.index = k;
  /* the body computes with the carried layer and gathers the next one at its front */
  ir_replace_uses(b, x, wa->out[0]);
  an->a.next = true;
  int pa = zero_position(b, an); /* the argument to the front, the gather right after the arguments */
  memmove(&b->nodes[1], &b->nodes[0], sizeof(Node *) * (size_t)pa);
  b->nodes[0] = an;
  Value *wn = zero_gather_new(b, x, whole, dl, z, loc);
  wn->def->a.skiplast = true; /* the last iteration's gather would be the first row again, unread */
  int at = 0;
  while (at < b->nnodes - 1 && b->nodes[at]->op == OP_ARG) at++;
  ir_move_last(b, at);
  Value **res = ARENA_ARRAY(b->arena, Value *, b->nresults + 1);
  memcpy(res, b->results, sizeof(Value *) * (size_t)b->nresults);
  insert_at((void **)res, b->nresults, nc, wn);
  if (b->result_names) {
    const char **nm = ARENA_ARRAY(b->arena, const char *, b->nresults + 1);
    memcpy(nm, b->result_names, sizeof(char *) * (size_t)b->nresults);
    insert_at((void **)nm, b->nresults, nc, NULL);
    b->result_names = nm;
  }
  b->results = res;
  b->nresults++;
  b->capresults = b->nresults;
  n->a.ncarry++;
  return moved;
}


/* True when a node of g (or of a body nested in it) reads p. */
static bool reads_deep(const Graph *g, const Value *p) {
  if (captures && g->parent && p->def->graph != g) {
    bool around = true; /* p of a graph around g: one of g's captures */
    for (const Graph *h = p->def->graph; h && around; h = h->parent) around = h != g;
    if (around) return zero_captures_reads(captures, g, p);
  }
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++)
      if (n->in[j] == p) return true;
    if (n->body && reads_deep(n->body, p)) return true; /* (the body's own question: its captures' index) */
  }
  return false;
}

/* ZeRO-3: every reader of p (stored split along d, `whole` its gathered type) in g gathers it
 * right before it reads it: a plain node its own gather (the forward's and the backward's are
 * separate, each freed after its use); a repeat that takes p as an input, per iteration in its
 * body, before the layer's first use of its slice; a body that captures p (the accumulation
 * region reads the parameters directly), the same rules inside it, so per micro-step. */
static void gather_uses(Graph *g, Value *p, const Value *whole, const Node *u, int d, ZeroGroup z, int from);

/* The readers index's list for p in g, from position `from` on (*r, its length), or -1: none (g is not the top
 * graph, p is not in the index, or its nodes are not all there in order). */
static int reader_list(const Graph *g, const Value *p, int from, const Node *const **r) {
  intptr_t k;
  if (g != top.g || !ptrmap_get(&top.at, p, &k)) return -1;
  const Node *const *v = top.node + top.start[k - 1];
  int n = top.len[k - 1], end = g->nnodes - zero_before_pending(before, g);
  for (int q = 0, i = from; q < n; q++, i++) {
    while (i < end && g->nodes[i] != v[q]) i++;
    if (i == end) return -1;
  }
  if (top.audit) { /* the scan's readers: the same nodes */
    int m = 0;
    for (int i = from; i < end; i++) {
      const Node *x = g->nodes[i];
      bool reads = x->body && reads_deep(x->body, p);
      for (int j = 0; j < x->nin && !reads; j++) reads = x->in[j] == p;
      if (reads && (m == n || v[m++] != x))
        die("zero: the readers index of %%%d lost a reader (node %d, position %d)", p->id, x->id, i);
    }
    if (m != n) die("zero: the readers index of %%%d has %d readers, the graph %d", p->id, n, m);
  }
  *r = v;
  return n;
}

/* gather_uses' work at node n, at position i of g: returns n's position after it plus the nodes inserted
 * right after n (the scan goes on after them). */
static int gather_reader(Graph *g, Node *n, int i, Value *p, const Value *whole, const Node *u, int d, ZeroGroup z) {
  if (n == u) return i;
  int inserted = 0;
  for (int j = 0; j < n->nin; j++) {
    if (n->in[j] != p) continue;
    if (n->op == OP_REPEAT) {
      Graph *b = n->body;
      Node *an = b->args[j];
      Value *arg = an->out[0], old = *arg;
      uint64_t v0 = b->version; /* (b's reads of the values around it stay: ir_use_memo_keep) */
      bool xs = j >= n->a.ncarry && j < n->a.ncarry + n->a.nxs;
      zero_split_type(arg, &old, xs ? d - 1 : d, z);
      int k = xs ? prefetch_layer(g, n, i + inserted, j, &old, d - 1, z) : -1; /* the next layer's gather in flight */
      if (k >= 0) {
        ir_use_memo_keep(use_memo, b, v0);
        inserted += k;
        j++; /* (the new carry shifted p's input by one) */
        continue;
      }
      gather_for_readers(b, arg, &old, xs ? d - 1 : d, z, an);
      ir_use_memo_keep(use_memo, b, v0);
    } else if (n->op == OP_CAST && readers_can_gather(g, n->out[0], u, d) && !is_result_of(g, n->out[0])) {
      /* the gather moves past a cast (bf16 compute: the loops read the parameter's bf16 copy):
       * the cast of the shard is the shard of the cast, so the copy is kept split and each of
       * its readers gathers it (per layer in the loops, in bf16: half the bytes) */
      Value *y = n->out[0], wy = *y;
      zero_split_type(y, &wy, d, z);
      gather_uses(g, y, &wy, u, d, z, i + 1); /* (y's readers: after its node) */
      break;
    } else if (n->op == OP_SLICE && n->a.axis != d && readers_can_gather(g, n->out[0], u, d) &&
               !is_result_of(g, n->out[0])) {
      /* the gather moves past a slice along another dim (a pipeline stage's rows of the stack:
       * an interleaved chunk's, an uneven stage's count): the slice of the shard is the shard of
       * the slice, so the rows stay split and their loops gather them a layer at a time */
      Value *y = n->out[0], wy = *y;
      zero_split_type(y, &wy, d, z);
      gather_uses(g, y, &wy, u, d, z, i + 1); /* (y's readers: after its node) */
      break;
    } else { /* this reader's own gather, right before it */
      Value *whole_p = zero_gather_new(g, p, whole, d, z, n->loc);
      ir_move_last(g, i++);
      for (int k = 0; k < n->nin; k++)
        if (n->in[k] == p) n->in[k] = whole_p;
      break;
    }
  }
  if (n->body && reads_deep(n->body, p)) gather_uses(n->body, p, whole, u, d, z, 0);
  return i + inserted; /* past the first layers' gathers placed before n */
}

static void gather_uses(Graph *g, Value *p, const Value *whole, const Node *u, int d, ZeroGroup z, int from) {
  const Node *const *r;
  int nr = reader_list(g, p, from, &r);
  if (nr >= 0) { /* the readers index's nodes, each found by its address from the last one's place on */
    for (int k = 0, i = from; k < nr; k++) {
      while (g->nodes[i] != r[k]) i++;
      i = gather_reader(g, g->nodes[i], i, p, whole, u, d, z) + 1;
    }
    return;
  }
  for (int i = from; i < g->nnodes - zero_before_pending(before, g); i++) /* (not the nodes to place later) */
    i = gather_reader(g, g->nodes[i], i, p, whole, u, d, z);
}

/* ZeRO-3: p is stored split along d; every reader gathers it right before it reads it. */
void zero_split_param(Graph *g, Value *p, const Node *u, int d, ZeroGroup z) {
  Value whole = *p;
  zero_split_type(p, &whole, d, z);
  ZeroBefore b = {.g = g};
  before = &b;
  gather_uses(g, p, &whole, u, d, z, 0);
  zero_before_place(&b);
  before = NULL;
}
