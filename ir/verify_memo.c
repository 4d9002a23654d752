/* ir/verify_memo.c — what ir_verify_changed (ir/ir.h) compares to find the graphs a pass
 * changed: per graph, its version (bumped by ir_touch: the IR's functions that change a graph, and
 * a pass that writes a node's fields itself) and the shape of its lists (node, argument and result
 * arrays, counts, next ids), read from the Graph alone, no node touched: a graph is verified again
 * when either moved. SHARDC_VERIFY=audit hashes everything the verifier reads of each graph's own
 * nodes and their output values as well, and finds a graph whose contents changed with its version
 * not (a pass's write without ir_touch).
 *
 * The hashes: (h ^ word) * odd constant per word, a bijection of h for each word, so a graph that
 * differs from its last state in one word always hashes differently; several words' differences
 * collide with odds of about 2^-64.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "verify_int.h"

#define MIX(h, x) ((h) = ((h) ^ (uint64_t)(x)) * 0x100000001b3ull)

static uint64_t ptr(const void *p) { return (uint64_t)(uintptr_t)p; }

static void *grow(void *p, int *cap, int need, size_t elem) {
  if (need <= *cap) return p;
  *cap = need > 2 * *cap ? need : 2 * *cap;
  p = realloc(p, (size_t)*cap * elem);
  if (!p) die("out of memory verifying the IR");
  return p;
}

/* A value's type and links: what the verifier reads of an output (check_value, the back-link,
 * check_spaces, check_region's types), as one hash of its own: a node's values and its other
 * fields are hashed in independent chains, which the CPU runs side by side. */
static uint64_t value_hash(const Value *v) {
  uint64_t h = 0xcbf29ce484222325ull;
  MIX(h, ptr(v));
  if (!v) return h;
  uint64_t w[3] = {0};
  memcpy(w, &v->sharding, sizeof v->sharding < sizeof w ? sizeof v->sharding : sizeof w);
  const int64_t *dim = v->shape.dim;
  MIX(h, ptr(v->def) ^ (uint64_t)(uint32_t)v->idx * 0x9e3779b97f4a7c15ull); /* not v->id: a name, not checked */
  MIX(h, (uint64_t)(uint32_t)v->dtype << 32 | (uint64_t)v->host << 16 | (uint16_t)v->shape.rank);
  MIX(h, (uint64_t)dim[0] ^ (uint64_t)dim[1] * 0x9e3779b97f4a7c15ull);
  MIX(h, (uint64_t)dim[2] ^ (uint64_t)dim[3] * 0x9e3779b97f4a7c15ull);
  MIX(h, (uint64_t)dim[4] ^ (uint64_t)dim[5] * 0x9e3779b97f4a7c15ull);
  MIX(h, w[0] ^ w[1] * 0x9e3779b97f4a7c15ull);
  MIX(h, w[2]);
  return h;
}

uint64_t vmemo_sig(const Value *v) {
  uint64_t h = 0xcbf29ce484222325ull; /* what a reader's checks read of v: no id (messages only) */
  MIX(h, ptr(v));
  MIX(h, ptr(v->def) ^ (uint64_t)(uint32_t)v->idx * 0x9e3779b97f4a7c15ull);
  MIX(h, (uint64_t)(uint32_t)v->dtype << 32 | (uint64_t)v->host << 16 | (uint16_t)v->shape.rank);
  for (int d = 0; d < IR_MAX_RANK; d++) MIX(h, (uint64_t)v->shape.dim[d]);
  if (v->def) {
    MIX(h, (uint32_t)v->def->nout);
    if (v->idx >= 0 && v->idx < v->def->nout && v->def->out) MIX(h, ptr(v->def->out[v->idx]));
  }
  return h;
}

/* One node: its identity, op, arity, links, the attributes the verifier checks, its input and
 * output lists and its outputs' types. */
static uint64_t node_hash(const Node *n) {
  uint64_t h = 0xcbf29ce484222325ull, hin = h, hout = h;
  MIX(h, ptr(n));
  if (!n) return h;
  const Attrs *a = &n->a;
  MIX(h, (uint64_t)(uint32_t)n->op << 32 | (uint32_t)n->id);
  MIX(h, (uint64_t)(uint32_t)n->nin << 32 | (uint32_t)n->nout);
  MIX(h, ptr(n->graph) ^ ptr(n->body) * 0x9e3779b97f4a7c15ull);
  MIX(h, ptr(n->in) ^ ptr(n->out) * 0x9e3779b97f4a7c15ull);
  MIX(h, (uint64_t)(uint32_t)a->index << 32 | (uint32_t)a->mesh_axis);
  MIX(h, (uint64_t)(uint32_t)a->ncarry << 32 | (uint32_t)a->nxs);
  MIX(h, (uint64_t)a->count ^ ((uint64_t)a->next << 8 | (uint64_t)a->skiplast) * 0x9e3779b97f4a7c15ull);
  MIX(h, ptr(a->name));
  MIX(h, ptr(n->cont) ^ ptr(n->cont_of) * 0x9e3779b97f4a7c15ull); /* (a cut loop's links: checked with the region) */
  for (int j = 0; j < n->nin && n->in; j++) MIX(hin, ptr(n->in[j]));
  for (int j = 0; j < n->nout && n->out; j++) MIX(hout, value_hash(n->out[j]));
  MIX(h, hin);
  MIX(h, hout);
  return h;
}

/* The same in g's arena, for the memo's lists (they live as long as the graph; the old room is
 * the arena's until its end, and a list grows by doubling only where the graph did). */
static void *grow_in(Arena *a, void *p, int *cap, int need, size_t elem) {
  if (need <= *cap) return p;
  int nc = need > 2 * *cap ? need : 2 * *cap;
  void *q = arena_alloc(a, (size_t)nc * elem);
  if (*cap) memcpy(q, p, (size_t)*cap * elem);
  *cap = nc;
  return q;
}

static IrVerifyMemo *memo_of(Graph *g) {
  if (!g->vmemo) {
    g->vmemo = ARENA_NEW(g->arena, IrVerifyMemo);
    g->vmemo->graph = g;
  }
  return g->vmemo;
}

uint64_t vmemo_round(void) {
  static _Atomic uint64_t rounds; /* the compiler may verify several modules at once (replan_many.c) */
  return atomic_fetch_add(&rounds, 1) + 1;
}

/* Everything the verifier reads of g's own nodes, arguments and results (SHARDC_VERIFY=audit). */
static uint64_t contents_hash(const Graph *g) {
  uint64_t h = 0xcbf29ce484222325ull;
  MIX(h, g->owner ? (uint64_t)g->owner->op : ~0ull); /* skiplast reads the owner's op */
  for (int i = 0; i < g->nargs; i++) MIX(h, ptr(g->args[i]));
  for (int i = 0; i < g->nresults; i++) MIX(h, ptr(g->results[i]));
  for (int i = 0; i < g->nnodes; i++) MIX(h, node_hash(g->nodes[i]));
  return h;
}

IrVerifyMemo *vmemo_hash(const Graph *cg, VMemoList *list, uint64_t round, unsigned flags) {
  Graph *g = (Graph *)cg; /* the memo is the verifier's bookkeeping, not the IR */
  IrVerifyMemo *m = memo_of(g);
  if (m->round == round) return m;
  m->round = round;
  list->m = grow(list->m, &list->cap, list->n + 1, sizeof *list->m);
  list->m[list->n++] = m;
  uint64_t h = 0xcbf29ce484222325ull; /* the graph's version and its lists' shape: no node read */
  MIX(h, ptr(g));
  MIX(h, g->version);
  MIX(h, ptr(g->parent));
  MIX(h, ptr(g->owner));
  MIX(h, ptr(g->nodes) ^ ptr(g->args) * 0x9e3779b97f4a7c15ull);
  MIX(h, ptr(g->results));
  MIX(h, (uint64_t)(uint32_t)g->nnodes << 32 | (uint32_t)g->nargs);
  MIX(h, (uint64_t)(uint32_t)g->nresults << 32 | (uint32_t)g->next_node_id); /* (not next_value_id: value
                                                                                numbers are names, not checked) */
  m->cur = h;
  m->dirty = h != m->hash || (flags & IR_VERIFY_ALL);
  m->untouched = false;
  if (flags & IR_VERIFY_AUDIT) {
    m->ccur = contents_hash(g);
    if (!m->dirty && m->chash != m->ccur) m->dirty = m->untouched = m->chash != 0; /* 0: not known */
    if (!m->chash) m->dirty = true;
  }
  if (m->dirty) { /* the region nodes, for the verification of its nodes about to run */
    m->nkids = 0;
    for (int i = 0; i < g->nnodes; i++) {
      const Node *n = g->nodes[i];
      if (n && n->body && n->op >= 0 && n->op < OP_COUNT && (ir_ops[n->op].flags & F_REGION)) {
        m->kids = grow_in(g->arena, m->kids, &m->capkids, m->nkids + 1, sizeof *m->kids);
        m->kids[m->nkids++] = n;
      }
    }
  }
  return m;
}

bool vmemo_scan(const Graph *g, VMemoList *list, uint64_t round, unsigned flags) {
  IrVerifyMemo *m = vmemo_hash(g, list, round, flags);
  bool sub = m->dirty;
  for (int k = 0; k < m->nkids; k++) sub |= vmemo_scan(m->kids[k]->body, list, round, flags);
  return m->subdirty = sub;
}

void vmemo_add_ext(const Graph *g, const Value *v) {
  IrVerifyMemo *m = g->vmemo;
  m->ext = grow_in(g->arena, m->ext, &m->capext, m->next + 1, sizeof *m->ext);
  m->ext[m->next++] = (VExt){v, vmemo_sig(v)};
}

void vmemo_finish(VMemoList *list, bool ok, unsigned flags) {
  bool audit = flags & IR_VERIFY_AUDIT;
  for (int i = 0; i < list->n; i++) {
    IrVerifyMemo *m = list->m[i];
    m->hash = ok ? m->cur : 0;
    m->chash = ok && audit ? m->ccur : 0;
  }
  free(list->m);
  *list = (VMemoList){0};
}
