/* passes/verify_comm.c — the "verify" pass: every rank's sequence of collectives matches its
 * group peers' (op, group, element count, dtype, order), so no plan the compiler emits can
 * hang or mix up buffers at run time. See verify_comm.h.
 *
 * Ranks are grouped into rank classes, one program per class (today one SPMD program serves
 * every rank; pipeline stages make one class per stage). Each class's program is expanded once
 * into its ordered list of collectives, repeat bodies `count` times: lazily, a top-level repeat's
 * body held once and read `count` times (see Lazy). Then, for every mesh
 * axis and every group over it, the members' classes are compared on the collectives over that
 * axis; a class pair is compared once per axis, so 1024 ranks cost a walk over the groups. A
 * collective over several axes (Attrs.mesh_with: the gradients' all-reduce over dp x cp, ZeRO's
 * reduce-scatters and all-gathers over dp x cp) is one
 * group of its own, the combined one: its members are compared on the collectives over exactly
 * those axes, as a single axis's are (checking it within each dp group, or each cp group, would
 * miss a member of another dp and cp coordinate that disagrees).
 * Sends and receives are matched per (sender, receiver) pair in order, each (class, run, peer
 * class) walked once (check_p2p).
 */
#include "verify_comm.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "passes.h"

/* ---- expansion ------------------------------------------------------------------------ */

static void push(VerifyCollSeq *s, const VerifyColl *c) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 64;
    VerifyColl *e = realloc(s->e, sizeof *e * (size_t)cap);
    if (!e) die("verify: out of memory");
    s->e = e;
    s->cap = cap;
  }
  s->e[s->n++] = *c;
}

static VerifyColl entry(const Node *n, int64_t iter) {
  VerifyColl c = {.op = n->op, .mesh_axis = n->a.mesh_axis, .group = (1u << n->a.mesh_axis) | n->a.mesh_with,
                  .ntensors = 1, .node = n, .iter = iter};
  const Value *v = n->op == OP_ALL_GATHER || n->op == OP_RECV ? n->out[0] : n->in[0];
  c.dtype = v->dtype;
  c.numel = ir_numel(&v->shape);
  switch (n->op) {
  case OP_ALL_REDUCE:
    c.ntensors = n->nin;
    c.reduce = n->a.reduce;
    for (int i = 1; i < n->nin; i++) c.numel += ir_numel(&n->in[i]->shape);
    break;
  case OP_REDUCE_SCATTER: case OP_ALL_GATHER: case OP_ALL_TO_ALL:
    c.axis = n->a.axis;
    c.blocks = n->a.blocks > 1 ? n->a.blocks : 1;
    break;
  case OP_BROADCAST: c.start = n->a.start; break;
  case OP_SEND: case OP_RECV:
    c.start = n->a.start;
    c.tag = n->a.tag;
    break;
  default: break;
  }
  return c;
}

/* A collective's entry, its attributes checked first (a malformed one is a compiler bug). */
static VerifyColl checked_entry(const Node *n, int64_t iter) {
  if (n->a.mesh_axis < 0 || n->a.mesh_axis >= RT_AX_COUNT)
    die("verify: %s (node %d) names mesh axis %d", ir_ops[n->op].name, n->id, n->a.mesh_axis);
  if (n->a.mesh_with >> RT_AX_COUNT ||
      (n->a.mesh_with && n->op != OP_ALL_REDUCE && n->op != OP_REDUCE_SCATTER && n->op != OP_ALL_GATHER))
    die("verify: %s (node %d) spans mesh axes 0x%x with %s", ir_ops[n->op].name, n->id, n->a.mesh_with,
        rt_mesh_axis_name(n->a.mesh_axis));
  if (n->nin + n->nout == 0 || (n->op == OP_ALL_REDUCE && n->nin != n->nout))
    die("verify: %s (node %d) has %d inputs and %d outputs", ir_ops[n->op].name, n->id, n->nin, n->nout);
  return entry(n, iter);
}

/* stage >= 0: the program of that pipeline stage (nodes of other stages left out, Node.stage) */
static void expand(const Graph *g, int64_t iter, int stage, VerifyCollSeq *s) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (stage >= 0 && !ir_runs_on(n, stage)) continue;
    if (n->body && n->op == OP_REPEAT) {
      VerifyCollSeq body = {0};
      expand(n->body, -1, stage, &body);
      for (int64_t k = 0; k < n->a.count && body.n; k++)
        for (int j = 0; j < body.n; j++) {
          VerifyColl c = body.e[j];
          if (c.node->graph == n->body) c.iter = n->a.reverse ? n->a.count - 1 - k : k;
          push(s, &c);
        }
      verify_seq_free(&body);
    } else if (n->body) {
      expand(n->body, iter, stage, s);
    } else if (ir_ops[n->op].flags & F_COLL) {
      VerifyColl c = checked_entry(n, iter);
      push(s, &c);
    }
  }
}

void verify_expand(const Graph *program, VerifyCollSeq *seq) {
  seq->n = 0;
  expand(program, -1, -1, seq);
}

void verify_seq_free(VerifyCollSeq *seq) {
  free(seq->e);
  *seq = (VerifyCollSeq){0};
}

/* ---- a class's sequence, expanded lazily -------------------------------------------------- *
 * The same sequence as verify_expand's, held as pieces: a top-level repeat's body expanded once
 * (one iteration: its nested repeats expanded) and read `count` times, the iteration of its own
 * entries set as they are read; the collectives between repeats as pieces of one iteration. An
 * accumulation loop of 512 micro-steps over a cp ring's hops is a few thousand entries, not
 * millions (Llama-3-8B cp 32: 8.4 M entries, 670 MB, before). */
typedef struct {
  int at, len;       /* its entries: store.e[at .. at + len) */
  int64_t count;     /* iterations (>= 1) */
  int64_t first;     /* its first entry's position in the whole sequence */
  const Graph *body; /* a repeat's body: its entries' iteration is the iteration read; NULL: as stored */
  bool reverse;
} Piece;

typedef struct {
  VerifyCollSeq store;
  Piece *p;
  int np, cap;
  int64_t n; /* entries in the whole sequence */
} Lazy;

static void lazy_piece(Lazy *L, const VerifyCollSeq *e, int64_t count, const Graph *body, bool reverse) {
  if (!e->n || count < 1) return;
  if (!body && L->np && !L->p[L->np - 1].body && L->p[L->np - 1].at + L->p[L->np - 1].len == L->store.n) {
    L->p[L->np - 1].len += e->n; /* loose collectives: one piece */
  } else {
    if (L->np == L->cap) {
      L->cap = L->cap ? 2 * L->cap : 16;
      L->p = realloc(L->p, sizeof *L->p * (size_t)L->cap);
      if (!L->p) die("verify: out of memory");
    }
    L->p[L->np++] = (Piece){.at = L->store.n, .len = e->n, .count = count, .first = L->n, .body = body, .reverse = reverse};
  }
  for (int i = 0; i < e->n; i++) push(&L->store, &e->e[i]);
  L->n += count * e->n;
}

/* expand()'s walk at the top level (iteration -1), repeats kept as pieces */
static void expand_lazy(const Graph *g, int stage, Lazy *L) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (stage >= 0 && !ir_runs_on(n, stage)) continue;
    if (n->body && n->op == OP_REPEAT) {
      VerifyCollSeq body = {0};
      expand(n->body, -1, stage, &body);
      lazy_piece(L, &body, n->a.count, n->body, n->a.reverse);
      verify_seq_free(&body);
    } else if (n->body) {
      expand_lazy(n->body, stage, L);
    } else if (ir_ops[n->op].flags & F_COLL) {
      VerifyColl c = checked_entry(n, -1);
      lazy_piece(L, &(VerifyCollSeq){.e = &c, .n = 1}, 1, NULL, false);
    }
  }
}

static void lazy_free(Lazy *L) {
  verify_seq_free(&L->store);
  free(L->p);
  *L = (Lazy){0};
}

/* The entry of piece p read at offset o (iteration o / len). */
static VerifyColl piece_entry(const Lazy *L, const Piece *p, int64_t o) {
  VerifyColl c = L->store.e[p->at + (int)(o % p->len)];
  if (p->body && c.node->graph == p->body) c.iter = p->reverse ? p->count - 1 - o / p->len : o / p->len;
  return c;
}

/* A walk over a lazy sequence in order. */
typedef struct {
  const Lazy *L;
  int p;       /* piece */
  int64_t o;   /* offset in it */
  int64_t pos; /* position in the sequence */
} Cursor;

static Cursor cursor(const Lazy *L) { return (Cursor){L, 0, 0, 0}; }

static bool cursor_end(const Cursor *c) { return c->p >= c->L->np; }

static VerifyColl cursor_get(const Cursor *c) { return piece_entry(c->L, &c->L->p[c->p], c->o); }

/* the stored entry under c, its iteration not set: for tests on op, group and the like */
static const VerifyColl *cursor_peek(const Cursor *c) {
  const Piece *p = &c->L->p[c->p];
  return &c->L->store.e[p->at + (int)(c->o % p->len)];
}

static void cursor_next(Cursor *c) {
  if (cursor_end(c)) return;
  c->pos++;
  if (++c->o == c->L->p[c->p].count * c->L->p[c->p].len) c->p++, c->o = 0;
}

/* ---- messages ----------------------------------------------------------------------- */

typedef struct {
  char *s;
  size_t size, len;
} Msg;

static void mprintf(Msg *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void mprintf(Msg *m, const char *fmt, ...) {
  if (!m->size || m->len >= m->size - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(m->s + m->len, m->size - m->len, fmt, ap);
  va_end(ap);
  if (k > 0) m->len += (size_t)k < m->size - m->len ? (size_t)k : m->size - m->len - 1;
}

static void put_entry(Msg *m, const VerifyColl *c) {
  static const char *const reds[] = {"sum", "avg", "max"};
  if (!c) {
    mprintf(m, "nothing (its sequence ends here)");
    return;
  }
  mprintf(m, "%s over %s", ir_ops[c->op].name, rt_mesh_mask_name(c->group));
  if (c->op == OP_ALL_REDUCE) mprintf(m, " %s, %d tensor%s", c->reduce >= 0 && c->reduce <= 2 ? reds[c->reduce] : "?",
                                      c->ntensors, c->ntensors == 1 ? "" : "s");
  mprintf(m, ", %lld x %s", (long long)c->numel, ir_dtype_name(c->dtype));
  if (c->op == OP_REDUCE_SCATTER || c->op == OP_ALL_GATHER) mprintf(m, ", axis %d blocks %d", c->axis, c->blocks);
  if (c->op == OP_BROADCAST) mprintf(m, ", root %lld", (long long)c->start);
  if (c->op == OP_SEND || c->op == OP_RECV) mprintf(m, ", offset %+lld tag %d", (long long)c->start, c->tag);
  mprintf(m, " (node %d", c->node->id);
  if (c->node->graph && c->node->graph->owner && c->node->graph->owner->a.name)
    mprintf(m, " in %s", c->node->graph->owner->a.name);
  if (c->iter >= 0) mprintf(m, ", iteration %lld", (long long)c->iter);
  if (c->node->loc.file) mprintf(m, ", %s:%d", c->node->loc.file, c->node->loc.line);
  mprintf(m, ")");
}

static void put_rank(Msg *m, const MeshMap *mm, int r) {
  int c[RT_AX_COUNT];
  rt_mesh_coords(mm, r, c);
  mprintf(m, "rank %d (dp %d, pp %d, cp %d, tp %d)", r, c[RT_AX_DP], c[RT_AX_PP], c[RT_AX_CP], c[RT_AX_TP]);
}

static void put_group(Msg *m, const int *mem, int n, unsigned mask) {
  mprintf(m, "%s group [", rt_mesh_mask_name(mask));
  for (int i = 0; i < n && i < 8; i++) mprintf(m, "%s%d", i ? "," : "", mem[i]);
  mprintf(m, "%s]", n > 8 ? ",.." : "");
}

/* ---- comparison ------------------------------------------------------------------------ */

static bool same(const VerifyColl *a, const VerifyColl *b) {
  return a->op == b->op && a->group == b->group && a->dtype == b->dtype && a->ntensors == b->ntensors &&
         a->numel == b->numel && a->reduce == b->reduce && a->axis == b->axis && a->blocks == b->blocks &&
         a->start == b->start && a->tag == b->tag;
}

/* Is c a collective over exactly the axes of mask (sends and receives: check_p2p)? */
static bool on_group(const VerifyColl *c, unsigned mask) {
  return c->group == mask && c->op != OP_SEND && c->op != OP_RECV;
}

/* Compares the collectives over the group of mask of two sequences; on a mismatch sets *ea / *eb
 * to the entries (NULL where a sequence ended), *k to the index among that group's collectives. */
static bool compare_group(const Lazy *a, const Lazy *b, unsigned mask, VerifyColl *ea, VerifyColl *eb,
                          bool *enda, bool *endb, int64_t *k) {
  Cursor i = cursor(a), j = cursor(b);
  for (*k = 0;; (*k)++, cursor_next(&i), cursor_next(&j)) {
    while (!cursor_end(&i) && !on_group(cursor_peek(&i), mask)) cursor_next(&i);
    while (!cursor_end(&j) && !on_group(cursor_peek(&j), mask)) cursor_next(&j);
    if (cursor_end(&i) && cursor_end(&j)) return true;
    if (cursor_end(&i) || cursor_end(&j) || !same(cursor_peek(&i), cursor_peek(&j))) {
      if (!(*enda = cursor_end(&i))) *ea = cursor_get(&i);
      if (!(*endb = cursor_end(&j))) *eb = cursor_get(&j);
      return false;
    }
  }
}

/* The groups to check: every single axis, and every set of axes a collective of any class spans
 * (bit `mask` of the result). */
static uint32_t group_masks(const Lazy *seqs, int nclasses) {
  uint32_t masks = 0;
  for (int axis = 0; axis < RT_AX_COUNT; axis++) masks |= 1u << (1u << axis);
  for (int c = 0; c < nclasses; c++)
    for (int i = 0; i < seqs[c].store.n; i++) {
      const VerifyColl *e = &seqs[c].store.e[i];
      if (e->op != OP_SEND && e->op != OP_RECV) masks |= 1u << e->group;
    }
  return masks;
}

static bool check_groups(const MeshMap *mm, const Lazy *seqs, int nclasses, const int *cls, Msg *m) {
  _Static_assert(RT_AX_COUNT <= 5, "a group mask indexes a 32-bit set");
  int *mem = malloc(sizeof *mem * (size_t)mm->world);
  uint32_t *done = calloc((size_t)nclasses * (size_t)nclasses, sizeof *done); /* bit per group mask: pair compared */
  if (!mem || !done) die("verify: out of memory");
  bool ok = true;
  uint32_t masks = group_masks(seqs, nclasses);
  for (unsigned mask = 1; mask < 1u << RT_AX_COUNT && ok; mask++) {
    if (!(masks & (1u << mask))) continue;
    for (int r = 0; r < mm->world && ok; r++) {
      if (rt_mesh_group_index(mm, r, mask) != 0) continue; /* each group once, from its first member */
      int n = rt_mesh_group(mm, r, mask, mem);
      int ca = cls[mem[0]];
      for (int i = 1; i < n && ok; i++) {
        int cb = cls[mem[i]];
        uint32_t *d = &done[(size_t)ca * (size_t)nclasses + (size_t)cb];
        if (cb == ca || (*d & (1u << mask))) continue;
        *d |= 1u << mask;
        VerifyColl ea, eb;
        bool enda, endb;
        int64_t k;
        if (compare_group(&seqs[ca], &seqs[cb], mask, &ea, &eb, &enda, &endb, &k)) continue;
        ok = false;
        mprintf(m, "collective sequences differ in ");
        put_group(m, mem, n, mask);
        mprintf(m, " at its collective #%lld over %s: ", (long long)k, rt_mesh_mask_name(mask));
        put_rank(m, mm, mem[0]);
        mprintf(m, " issues ");
        put_entry(m, enda ? NULL : &ea);
        mprintf(m, ", ");
        put_rank(m, mm, mem[i]);
        mprintf(m, " issues ");
        put_entry(m, endb ? NULL : &eb);
      }
    }
  }
  free(mem);
  free(done);
  return ok;
}

/* The peer of rank r at `offset` along axis, or -1 outside the mesh. Along cp the members form a
 * ring (context parallelism's K/V passing): the offset is taken modulo the degree there; along
 * other axes (a pipeline) a peer before the first or past the last member is a plan bug. */
static int peer_of(const MeshMap *mm, int r, int axis, int64_t offset) {
  int c[RT_AX_COUNT];
  rt_mesh_coords(mm, r, c);
  int64_t d = mm->dim[axis], x = c[axis] + offset;
  if (axis == RT_AX_CP && offset > -d && offset < d) x = (x % d + d) % d;
  if (x < 0 || x >= d) return -1;
  c[axis] = (int)x;
  return rt_mesh_rank(mm, c);
}

/* A class's transfers of one direction, axis and peer offset (a run): the k-th of a run meets
 * the k-th of the opposite run at the peer. */
typedef struct {
  OpKind op;
  int axis;
  int64_t start;
} P2pRun;

static bool in_run(const VerifyColl *c, const P2pRun *r) {
  return c->op == r->op && c->mesh_axis == r->axis && c->start == r->start;
}

/* The runs of a sequence, in the order of their first transfer (from its distinct entries). */
static int p2p_runs(const Lazy *L, P2pRun **out) {
  int n = 0;
  P2pRun *run = NULL;
  for (int i = 0; i < L->store.n; i++) {
    const VerifyColl *c = &L->store.e[i];
    if (c->op != OP_SEND && c->op != OP_RECV) continue;
    P2pRun r = {c->op, c->mesh_axis, c->start};
    int j = 0;
    while (j < n && !(run[j].op == r.op && run[j].axis == r.axis && run[j].start == r.start)) j++;
    if (j < n) continue;
    run = realloc(run, sizeof *run * (size_t)(n + 1));
    if (!run) die("verify: out of memory");
    run[n++] = r;
  }
  *out = run;
  return n;
}

/* What run j of class a finds at a peer of class b (b < 0: no peer): the first transfer without
 * its match (k: its index in the run, pos: its position in a's sequence, -1 when all match) and
 * the peer's k-th transfer of the opposite run (has_d: there is one). */
typedef struct {
  int64_t k, pos;
  bool known, has_d;
  VerifyColl c, d;
} P2pFind;

/* Transfers of run r in one iteration of piece p. */
static int piece_run_count(const Lazy *L, const Piece *p, const P2pRun *r) {
  int n = 0;
  for (int i = 0; i < p->len; i++) n += in_run(&L->store.e[p->at + i], r);
  return n;
}

/* p2p_find over the pieces' bodies instead of their iterations, where that is the same check:
 * when a's run and b's opposite run come in pieces of as many transfers per iteration and as many
 * iterations, piece for piece, the k-th transfers meet in the same iteration at the same place
 * in it, and a piece's iterations repeat its entries unchanged (but for the iteration number, no
 * part of the check): its first iteration decides it, and a mismatch there is the first. The
 * accumulation loop's ring hops are one piece in both. Returns false where the pieces do not line
 * up (then p2p_find walks every transfer). */
static bool p2p_find_pieces(const Lazy *a, const P2pRun *run, const Lazy *b, const P2pRun *o, P2pFind *f) {
  int64_t k = 0;
  for (int pa = 0, pb = 0;; pa++, pb++) {
    int ca = 0, cb = 0;
    while (pa < a->np && !(ca = piece_run_count(a, &a->p[pa], run))) pa++;
    if (pa == a->np) return true; /* every transfer of the run met its match */
    while (pb < b->np && !(cb = piece_run_count(b, &b->p[pb], o))) pb++;
    const Piece *A = &a->p[pa], *B = pb < b->np ? &b->p[pb] : NULL;
    if (B && (ca != cb || A->count != B->count)) return false;
    for (int j = 0, ia = -1, ib = -1; j < ca; j++) {
      while (!in_run(&a->store.e[A->at + ++ia], run)) {}
      if (B)
        while (!in_run(&b->store.e[B->at + ++ib], o)) {}
      const VerifyColl *c = &a->store.e[A->at + ia], *d = B ? &b->store.e[B->at + ib] : NULL;
      if (d && d->numel == c->numel && d->dtype == c->dtype && d->tag == c->tag) continue;
      f->k = k + j;
      f->pos = A->first + ia;
      f->c = piece_entry(a, A, ia);
      if ((f->has_d = d != NULL)) f->d = piece_entry(b, B, ib);
      return true;
    }
    k += (int64_t)ca * A->count;
  }
}

static void p2p_find(const Lazy *a, const P2pRun *run, const Lazy *b, P2pFind *f) {
  P2pRun o = {run->op == OP_SEND ? OP_RECV : OP_SEND, run->axis, -run->start};
  *f = (P2pFind){.known = true, .pos = -1};
  if (b && p2p_find_pieces(a, run, b, &o, f)) return;
  *f = (P2pFind){.known = true, .pos = -1};
  Cursor i = cursor(a), j = b ? cursor(b) : (Cursor){0};
  for (f->k = 0;; f->k++, cursor_next(&i)) {
    while (!cursor_end(&i) && !in_run(cursor_peek(&i), run)) cursor_next(&i);
    if (cursor_end(&i)) return;
    if (b) {
      if (f->k) cursor_next(&j);
      while (!cursor_end(&j) && !in_run(cursor_peek(&j), &o)) cursor_next(&j);
    }
    const VerifyColl *c = cursor_peek(&i), *d = b && !cursor_end(&j) ? cursor_peek(&j) : NULL;
    if (d && d->numel == c->numel && d->dtype == c->dtype && d->tag == c->tag) continue;
    f->pos = i.pos;
    f->c = cursor_get(&i);
    if ((f->has_d = d != NULL)) f->d = cursor_get(&j);
    return;
  }
}

/* Every send of rank r meets, in order, a receive at its peer from r of the same size, dtype
 * and tag; and every receive meets a send. A rank's peer along a run is one rank, so what a
 * rank's run finds depends only on (its class, the run, the peer's class): each such triple is
 * walked once (memo), each rank costs a peer lookup per run. The message names the first failing
 * rank and, within it, its first failing transfer in order. */
static bool check_p2p(const MeshMap *mm, const Lazy *seqs, int nclasses, const int *cls, Msg *m) {
  P2pRun **runs = calloc((size_t)nclasses, sizeof *runs);
  int *nrun = calloc((size_t)nclasses, sizeof *nrun);
  P2pFind **memo = calloc((size_t)nclasses, sizeof *memo); /* [class][run * (nclasses + 1) + peer class + 1] */
  if (!runs || !nrun || !memo) die("verify: out of memory");
  for (int c = 0; c < nclasses; c++) {
    nrun[c] = p2p_runs(&seqs[c], &runs[c]);
    memo[c] = calloc((size_t)nrun[c] * (size_t)(nclasses + 1) + 1, sizeof **memo);
    if (!memo[c]) die("verify: out of memory");
  }
  bool ok = true;
  for (int r = 0; r < mm->world && ok; r++) {
    int ca = cls[r], p = -1;
    const P2pFind *bad = NULL;
    for (int j = 0; j < nrun[ca]; j++) {
      int q = peer_of(mm, r, runs[ca][j].axis, runs[ca][j].start), cb = q >= 0 ? cls[q] : -1;
      P2pFind *f = &memo[ca][(size_t)j * (size_t)(nclasses + 1) + (size_t)(cb + 1)];
      if (!f->known) p2p_find(&seqs[ca], &runs[ca][j], cb >= 0 ? &seqs[cb] : NULL, f);
      if (f->pos >= 0 && (!bad || f->pos < bad->pos)) bad = f, p = q;
    }
    if (!bad) continue;
    mprintf(m, "point-to-point transfers do not match: ");
    put_rank(m, mm, r);
    mprintf(m, " issues ");
    put_entry(m, &bad->c);
    mprintf(m, " (its #%lld with that peer)", (long long)bad->k);
    if (p < 0) {
      mprintf(m, ", but no rank lies at that offset along %s", rt_mesh_axis_name(bad->c.mesh_axis));
    } else {
      mprintf(m, ", ");
      put_rank(m, mm, p);
      mprintf(m, " issues ");
      put_entry(m, bad->has_d ? &bad->d : NULL);
    }
    ok = false;
  }
  for (int c = 0; c < nclasses; c++) free(runs[c]), free(memo[c]);
  free(runs);
  free(nrun);
  free(memo);
  return ok;
}

static bool verify_impl(const MeshMap *mm, const Graph *const *programs, int nclasses, const int *rank_class,
                        bool staged, char *msg, size_t size) {
  Msg m = {msg, size, 0};
  if (size) msg[0] = 0;
  for (int r = 0; r < mm->world; r++)
    if (rank_class[r] < 0 || rank_class[r] >= nclasses) die("verify: rank %d has class %d of %d", r, rank_class[r], nclasses);
  Lazy *seqs = calloc((size_t)nclasses, sizeof *seqs);
  if (!seqs) die("verify: out of memory");
  bool any_p2p = false;
  for (int c = 0; c < nclasses; c++) {
    expand_lazy(programs[c], staged ? c : -1, &seqs[c]);
    for (int i = 0; i < seqs[c].store.n; i++) any_p2p |= seqs[c].store.e[i].op == OP_SEND || seqs[c].store.e[i].op == OP_RECV;
  }
  bool ok = check_groups(mm, seqs, nclasses, rank_class, &m);
  if (ok && any_p2p) ok = check_p2p(mm, seqs, nclasses, rank_class, &m);
  for (int c = 0; c < nclasses; c++) lazy_free(&seqs[c]);
  free(seqs);
  return ok;
}

bool verify_collectives(const MeshMap *mm, const Graph *const *programs, int nclasses, const int *rank_class,
                        char *msg, size_t size) {
  return verify_impl(mm, programs, nclasses, rank_class, false, msg, size);
}

/* ---- the pass ------------------------------------------------------------------------------ */

bool pass_verify(Module *m) {
  MeshMap one;
  const MeshMap *mm = m->mesh;
  if (!mm) {
    if (!rt_mesh_init(&one, 1, 1, 1, 1, 1)) die("verify: mesh init");
    mm = &one;
  }
  /* Rank classes: one SPMD program serves every rank; under pipeline parallelism each stage
   * runs its part of it (Node.stage): class = the rank's pp coordinate. */
  int pp = mm->dim[RT_AX_PP];
  int *cls = calloc((size_t)mm->world, sizeof *cls);
  const Graph **programs = calloc((size_t)pp, sizeof *programs);
  if (!cls || !programs) die("verify: out of memory");
  for (int c = 0; c < pp; c++) programs[c] = m->graph;
  for (int r = 0; r < mm->world; r++) {
    int co[RT_AX_COUNT];
    rt_mesh_coords(mm, r, co);
    cls[r] = co[RT_AX_PP];
  }
  char msg[2048];
  bool ok = verify_impl(mm, programs, pp, cls, pp > 1, msg, sizeof msg);
  free(cls);
  free(programs);
  if (!ok) die("verify: %s", msg);
  return true;
}
