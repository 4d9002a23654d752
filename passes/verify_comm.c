/* passes/verify_comm.c — the "verify" pass: every rank's sequence of collectives matches its
 * group peers' (op, group, element count, dtype, order), so no plan the compiler emits can
 * hang or mix up buffers at run time. See verify_comm.h.
 *
 * Ranks are grouped into rank classes, one program per class (today one SPMD program serves
 * every rank; pipeline stages will make one class per stage). Each class's program is expanded
 * once into its ordered list of collectives, repeat bodies `count` times. Then, for every mesh
 * axis and every group over it, the members' classes are compared on the collectives over that
 * axis; a class pair is compared once per axis, so 1024 ranks cost a walk over the groups. A
 * collective over several axes (Attrs.mesh_with: the gradients' all-reduce over dp x cp, ZeRO's
 * reduce-scatters and all-gathers over dp x cp) is one
 * group of its own, the combined one: its members are compared on the collectives over exactly
 * those axes, as a single axis's are (checking it within each dp group, or each cp group, would
 * miss a member of another dp and cp coordinate that disagrees).
 * Sends and receives are matched per (sender, receiver) pair in order.
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
      if (n->a.mesh_axis < 0 || n->a.mesh_axis >= RT_AX_COUNT)
        die("verify: %s (node %d) names mesh axis %d", ir_ops[n->op].name, n->id, n->a.mesh_axis);
      if (n->a.mesh_with >> RT_AX_COUNT ||
          (n->a.mesh_with && n->op != OP_ALL_REDUCE && n->op != OP_REDUCE_SCATTER && n->op != OP_ALL_GATHER))
        die("verify: %s (node %d) spans mesh axes 0x%x with %s", ir_ops[n->op].name, n->id, n->a.mesh_with,
            rt_mesh_axis_name(n->a.mesh_axis));
      if (n->nin + n->nout == 0 || (n->op == OP_ALL_REDUCE && n->nin != n->nout))
        die("verify: %s (node %d) has %d inputs and %d outputs", ir_ops[n->op].name, n->id, n->nin, n->nout);
      VerifyColl c = entry(n, iter);
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

/* Compares the collectives over the group of mask of two sequences; on a mismatch sets *ia / *ib
 * to the positions (n when a sequence ended), *k to the index among that group's collectives. */
static bool compare_group(const VerifyCollSeq *a, const VerifyCollSeq *b, unsigned mask, int *ia, int *ib, int *k) {
  int i = 0, j = 0;
  for (*k = 0;; (*k)++, i++, j++) {
    while (i < a->n && !on_group(&a->e[i], mask)) i++;
    while (j < b->n && !on_group(&b->e[j], mask)) j++;
    if (i == a->n && j == b->n) return true;
    if (i == a->n || j == b->n || !same(&a->e[i], &b->e[j])) {
      *ia = i;
      *ib = j;
      return false;
    }
  }
}

/* The groups to check: every single axis, and every set of axes a collective of any class spans
 * (bit `mask` of the result). */
static uint32_t group_masks(const VerifyCollSeq *seqs, int nclasses) {
  uint32_t masks = 0;
  for (int axis = 0; axis < RT_AX_COUNT; axis++) masks |= 1u << (1u << axis);
  for (int c = 0; c < nclasses; c++)
    for (int i = 0; i < seqs[c].n; i++)
      if (seqs[c].e[i].op != OP_SEND && seqs[c].e[i].op != OP_RECV) masks |= 1u << seqs[c].e[i].group;
  return masks;
}

static bool check_groups(const MeshMap *mm, const VerifyCollSeq *seqs, int nclasses, const int *cls, Msg *m) {
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
        int ia, ib, k;
        if (compare_group(&seqs[ca], &seqs[cb], mask, &ia, &ib, &k)) continue;
        ok = false;
        mprintf(m, "collective sequences differ in ");
        put_group(m, mem, n, mask);
        mprintf(m, " at its collective #%d over %s: ", k, rt_mesh_mask_name(mask));
        put_rank(m, mm, mem[0]);
        mprintf(m, " issues ");
        put_entry(m, ia < seqs[ca].n ? &seqs[ca].e[ia] : NULL);
        mprintf(m, ", ");
        put_rank(m, mm, mem[i]);
        mprintf(m, " issues ");
        put_entry(m, ib < seqs[cb].n ? &seqs[cb].e[ib] : NULL);
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

/* One sequence's transfers by direction, axis and peer offset, each group in order, so that the
 * k-th transfer of a kind is a lookup (an unrolled pipeline schedule has thousands per rank). */
typedef struct {
  OpKind op;
  int axis;
  int64_t start;
  int *at; /* [n]: positions in the sequence */
  int n, cap;
} P2pRun;

typedef struct {
  P2pRun *run;
  int nrun;
  int *k; /* [sequence length]: a transfer's index in its run */
} P2pIndex;

static P2pRun *p2p_run(const P2pIndex *x, OpKind op, int axis, int64_t start) {
  for (int i = 0; i < x->nrun; i++)
    if (x->run[i].op == op && x->run[i].axis == axis && x->run[i].start == start) return &x->run[i];
  return NULL;
}

static void p2p_index(const VerifyCollSeq *s, P2pIndex *x) {
  x->k = calloc((size_t)s->n + 1, sizeof *x->k);
  x->run = calloc((size_t)s->n + 1, sizeof *x->run);
  if (!x->k || !x->run) die("verify: out of memory");
  for (int i = 0; i < s->n; i++) {
    const VerifyColl *c = &s->e[i];
    if (c->op != OP_SEND && c->op != OP_RECV) continue;
    P2pRun *r = p2p_run(x, c->op, c->mesh_axis, c->start);
    if (!r) r = &x->run[x->nrun++], *r = (P2pRun){.op = c->op, .axis = c->mesh_axis, .start = c->start};
    if (r->n == r->cap) {
      r->cap = r->cap ? 2 * r->cap : 16;
      r->at = realloc(r->at, sizeof *r->at * (size_t)r->cap);
      if (!r->at) die("verify: out of memory");
    }
    x->k[i] = r->n;
    r->at[r->n++] = i;
  }
}

static void p2p_index_free(P2pIndex *x) {
  for (int i = 0; i < x->nrun; i++) free(x->run[i].at);
  free(x->run);
  free(x->k);
}

/* The first transfer of run j of class ca that finds no match in class cb, its index in the run
 * (run->n when all match; 0 for cb < 0: no peer). The k-th transfer meets the k-th of the
 * opposite direction, axis and offset at the peer, of the same size, dtype and tag. */
static int p2p_first_bad(const VerifyCollSeq *seqs, const P2pIndex *idx, int ca, int j, int cb) {
  const P2pRun *run = &idx[ca].run[j];
  if (cb < 0) return 0;
  const P2pRun *o = p2p_run(&idx[cb], run->op == OP_SEND ? OP_RECV : OP_SEND, run->axis, -run->start);
  for (int k = 0; k < run->n; k++) {
    if (!o || k >= o->n) return k;
    const VerifyColl *c = &seqs[ca].e[run->at[k]], *d = &seqs[cb].e[o->at[k]];
    if (d->numel != c->numel || d->dtype != c->dtype || d->tag != c->tag) return k;
  }
  return run->n;
}

/* Every send of rank r meets, in order, a receive at its peer from r of the same size, dtype
 * and tag; and every receive meets a send. A rank's peer along a run (direction, axis, offset)
 * is one rank, so what a rank's run finds depends only on (its class, the run, the peer's
 * class): each such triple is walked once (memo), each rank costs a peer lookup per run. The
 * message names the first failing rank and, within it, the first failing transfer in order. */
static bool check_p2p(const MeshMap *mm, const VerifyCollSeq *seqs, int nclasses, const int *cls, Msg *m) {
  P2pIndex *idx = calloc((size_t)nclasses, sizeof *idx);
  int **memo = calloc((size_t)nclasses, sizeof *memo); /* [class][run * (nclasses + 1) + peer class + 1]: -1 unknown */
  if (!idx || !memo) die("verify: out of memory");
  for (int c = 0; c < nclasses; c++) {
    p2p_index(&seqs[c], &idx[c]);
    memo[c] = malloc(sizeof **memo * ((size_t)idx[c].nrun * (size_t)(nclasses + 1) + 1));
    if (!memo[c]) die("verify: out of memory");
    for (size_t i = 0; i < (size_t)idx[c].nrun * (size_t)(nclasses + 1); i++) memo[c][i] = -1;
  }
  bool ok = true;
  for (int r = 0; r < mm->world && ok; r++) {
    int ca = cls[r], bad = -1, p = -1; /* bad: position in r's sequence of its first failing transfer */
    for (int j = 0; j < idx[ca].nrun; j++) {
      const P2pRun *run = &idx[ca].run[j];
      int q = peer_of(mm, r, run->axis, run->start), cb = q >= 0 ? cls[q] : -1;
      int *k = &memo[ca][(size_t)j * (size_t)(nclasses + 1) + (size_t)(cb + 1)];
      if (*k < 0) *k = p2p_first_bad(seqs, idx, ca, j, cb);
      if (*k < run->n && (bad < 0 || run->at[*k] < bad)) bad = run->at[*k], p = q;
    }
    if (bad < 0) continue;
    const VerifyColl *c = &seqs[ca].e[bad];
    int k = idx[ca].k[bad]; /* this entry's index among r's same-direction transfers with that peer */
    const VerifyColl *d = NULL;
    if (p >= 0) {
      const P2pRun *run = p2p_run(&idx[cls[p]], c->op == OP_SEND ? OP_RECV : OP_SEND, c->mesh_axis, -c->start);
      if (run && k < run->n) d = &seqs[cls[p]].e[run->at[k]];
    }
    mprintf(m, "point-to-point transfers do not match: ");
    put_rank(m, mm, r);
    mprintf(m, " issues ");
    put_entry(m, c);
    mprintf(m, " (its #%d with that peer)", k);
    if (p < 0) {
      mprintf(m, ", but no rank lies at that offset along %s", rt_mesh_axis_name(c->mesh_axis));
    } else {
      mprintf(m, ", ");
      put_rank(m, mm, p);
      mprintf(m, " issues ");
      put_entry(m, d);
    }
    ok = false;
  }
  for (int c = 0; c < nclasses; c++) p2p_index_free(&idx[c]), free(memo[c]);
  free(idx);
  free(memo);
  return ok;
}

static bool verify_impl(const MeshMap *mm, const Graph *const *programs, int nclasses, const int *rank_class,
                        bool staged, char *msg, size_t size) {
  Msg m = {msg, size, 0};
  if (size) msg[0] = 0;
  for (int r = 0; r < mm->world; r++)
    if (rank_class[r] < 0 || rank_class[r] >= nclasses) die("verify: rank %d has class %d of %d", r, rank_class[r], nclasses);
  VerifyCollSeq *seqs = calloc((size_t)nclasses, sizeof *seqs);
  if (!seqs) die("verify: out of memory");
  bool any_p2p = false;
  for (int c = 0; c < nclasses; c++) {
    expand(programs[c], -1, staged ? c : -1, &seqs[c]);
    for (int i = 0; i < seqs[c].n; i++) any_p2p |= seqs[c].e[i].op == OP_SEND || seqs[c].e[i].op == OP_RECV;
  }
  bool ok = check_groups(mm, seqs, nclasses, rank_class, &m);
  if (ok && any_p2p) ok = check_p2p(mm, seqs, nclasses, rank_class, &m);
  for (int c = 0; c < nclasses; c++) verify_seq_free(&seqs[c]);
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
