/* ir/flops.c — the model's FLOPs per token and tokens per step, counted on logical (unsharded) shapes over
 * what the loss depends on (see ir/print.h). */
#include "print.h"
#include "ptrmap.h"

#include <stdint.h>
#include <stdlib.h>

#include "diag.h"

static bool live_get(const PtrMap *m, const void *k) {
  intptr_t v;
  return ptrmap_get(m, k, &v) && v == 1;
}

/* A send and its transfer's key (tag and mesh axis): every send of the graph, nested ones too,
 * sorted by key, so that a recv made live marks its sends at once (one walk, not one per hop). */
typedef struct {
  int64_t key;
  const Node *send;
} SendKey;

typedef struct {
  PtrMap live; /* Node* -> 1 when the loss depends on it */
  const SendKey *sends;
  int nsends;
  bool more; /* a send became live during the walk: walk again (what feeds it may be behind) */
} Liveness;

static bool is_live(const Liveness *lv, const Node *n) { return live_get(&lv->live, n); }
static void set_live(Liveness *lv, const Node *n) { ptrmap_put(&lv->live, n, 1); }

static bool out_live(const Liveness *lv, const Value *v) { return live_get(&lv->live, v); }
static void set_out_live(Liveness *lv, const Value *v) { ptrmap_put(&lv->live, v, 1); }

/* Graphs are topologically ordered: walking backwards, a node with a live output is live and makes
 * its inputs live (here or in an enclosing graph, all earlier). A live region makes live only the
 * body results of its live outputs (a repeat's outputs are its body's results, in order), and a
 * carried value whose argument is live makes its result live for the iteration before: so a
 * gradient-accumulation region counts the micro-step's forward, not the backward it also holds. */
static void mark_fed_sends(Liveness *lv, const Node *recv);

static void mark_graph(Liveness *lv, const Graph *g, bool top) {
  for (int i = g->nnodes - 1; i >= 0; i--) {
    const Node *n = g->nodes[i];
    bool live = is_live(lv, n);
    for (int j = 0; j < n->nout && !live; j++) live = n->out[j] && out_live(lv, n->out[j]);
    if (!live) continue;
    set_live(lv, n);
    for (int j = 0; j < n->nin; j++) set_out_live(lv, n->in[j]);
    if (top && n->op == OP_RECV) mark_fed_sends(lv, n);
    if (!n->body) continue;
    const Graph *b = n->body;
    bool by_index = n->op == OP_REPEAT && n->nout == b->nresults;
    for (int j = 0; j < b->nresults; j++)
      if (b->results[j] && (!by_index || out_live(lv, n->out[j]))) set_out_live(lv, b->results[j]);
    for (bool more = true; more;) {
      mark_graph(lv, b, false);
      more = false;
      for (int j = 0; by_index && j < n->a.ncarry && j < b->nargs && j < b->nresults; j++)
        if (b->args[j] && is_live(lv, b->args[j]) && b->results[j] && !out_live(lv, b->results[j])) {
          set_out_live(lv, b->results[j]);
          more = true;
        }
    }
  }
}

/* The transfers (tag and mesh axis, as one key) of the live recvs of g, sorted: a send is fed
 * when its key is among them. */
typedef struct {
  int64_t *key;
  int n;
} RecvKeys;

static int64_t transfer_key(const Node *n) { return (int64_t)n->a.tag * RT_AX_COUNT + n->a.mesh_axis; }

static int key_cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static int send_key_cmp(const void *a, const void *b) {
  int64_t x = ((const SendKey *)a)->key, y = ((const SendKey *)b)->key;
  return (x > y) - (x < y);
}

static void collect_sends(const Graph *g, SendKey **v, int *n, int *cap) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *x = g->nodes[i];
    if (x->body) collect_sends(x->body, v, n, cap);
    if (x->op != OP_SEND) continue;
    if (*n == *cap) {
      *cap = *cap ? 2 * *cap : 64;
      *v = realloc(*v, (size_t)*cap * sizeof **v);
      if (!*v) die("out of memory");
    }
    (*v)[(*n)++] = (SendKey){transfer_key(x), x};
  }
}

/* A live recv of the top graph makes the sends of its transfer live, as mark_sends does after a walk. */
static void mark_fed_sends(Liveness *lv, const Node *recv) {
  int64_t key = transfer_key(recv);
  int lo = 0, hi = lv->nsends;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (lv->sends[mid].key < key) lo = mid + 1;
    else hi = mid;
  }
  for (; lo < lv->nsends && lv->sends[lo].key == key; lo++) {
    const Node *s = lv->sends[lo].send;
    if (is_live(lv, s)) continue;
    set_live(lv, s);
    for (int j = 0; j < s->nin; j++) set_out_live(lv, s->in[j]);
    lv->more = true;
  }
}

static void live_recvs(const Liveness *lv, const Graph *g, RecvKeys *k) {
  k->n = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_RECV && is_live(lv, g->nodes[i])) k->key[k->n++] = transfer_key(g->nodes[i]);
  qsort(k->key, (size_t)k->n, sizeof *k->key, key_cmp);
}

/* A live recv makes the sends of its transfer live (same axis and tag: pipeline stages, ring hops):
 * the work before a send feeds the loss through the other rank. Returns true when one became live. */
static bool mark_sends(Liveness *lv, const Graph *g, const RecvKeys *fed_by) {
  bool changed = false;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body) changed |= mark_sends(lv, n->body, fed_by);
    if (n->op != OP_SEND || is_live(lv, n)) continue;
    int64_t key = transfer_key(n);
    if (bsearch(&key, fed_by->key, (size_t)fed_by->n, sizeof key, key_cmp)) {
      set_live(lv, n);
      for (int j = 0; j < n->nin; j++) set_out_live(lv, n->in[j]);
      changed = true;
    }
  }
  return changed;
}

/* On logical (unsharded) shapes, so a partitioned graph reports the model's FLOPs. */
static double node_flops(const Module *m, const Node *n) {
  if (n->op == OP_MATMUL) {
    Shape a = ir_logical_shape(m, n->in[0]), y = ir_logical_shape(m, n->out[0]);
    return ir_gemm_flops(&n->a, &a, &y);
  }
  if (n->op == OP_SDPA) {
    Shape q = ir_logical_shape(m, n->in[0]), k = ir_logical_shape(m, n->in[1]);
    /* QK^T and AV: 2 * 2 * B * S * T * (H * hd) */
    return 4.0 * (double)q.dim[0] * (double)q.dim[1] * (double)k.dim[1] * (double)q.dim[2];
  }
  if (n->op == OP_ATTN_BLOCK) { /* one of cp key blocks (ring attention): a cp-th of the keys */
    Shape q = ir_logical_shape(m, n->in[0]);
    return 4.0 * (double)q.dim[0] * (double)q.dim[1] * (double)n->in[1]->shape.dim[1] * (double)q.dim[2];
  }
  return 0;
}

static double graph_flops(const Module *m, const Graph *g, const Liveness *lv) {
  double total = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (lv && !is_live(lv, n)) continue;
    if (n->body) total += (n->op == OP_REPEAT ? (double)n->a.count : 1.0) * graph_flops(m, n->body, lv);
    else total += node_flops(m, n);
  }
  return total;
}

/* Tokens per step: the targets of every cross-entropy (or ce_loss) the loss depends on, times the counts of the
 * repeats around it (gradient accumulation runs one per micro-step, a peeled or pipelined step one
 * per micro-batch at the top level); without one, the indices of the first embed. */
static int64_t ce_tokens(const Module *m, const Graph *g, const Liveness *lv) {
  int64_t tok = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (lv && !is_live(lv, n)) continue;
    if (n->op == OP_CROSS_ENTROPY || n->op == OP_CE_LOSS) { /* whole, or the last of its parts */
      Shape s = ir_logical_shape(m, n->in[n->op == OP_CE_LOSS ? 2 : 1]);
      tok += ir_numel(&s);
    }
    if (n->body) tok += ce_tokens(m, n->body, lv) * (n->op == OP_REPEAT ? n->a.count : 1);
  }
  return tok;
}
static int64_t embed_tokens(const Module *m, const Graph *g) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op == OP_EMBED) {
      Shape s = ir_logical_shape(m, n->in[1]);
      return ir_numel(&s);
    }
    int64_t t = n->body ? embed_tokens(m, n->body) : 0;
    if (t) return t;
  }
  return 0;
}

/* The forward FLOPs of one step and its tokens (over every rank, on logical shapes). */
static void step_flops(const Module *m, double *fwd, int64_t *tok) {
  const Graph *g = m->graph;
  Liveness lv;
  memset(&lv, 0, sizeof lv);
  bool have_loss = false;
  for (int i = 0; i < g->nresults; i++)
    if (g->result_names && g->result_names[i] && strcmp(g->result_names[i], "loss") == 0 && g->results[i]) {
      set_out_live(&lv, g->results[i]);
      have_loss = true;
    }
  RecvKeys fed = {calloc((size_t)g->nnodes + 1, sizeof(int64_t)), 0};
  SendKey *sends = NULL;
  int nsends = 0, cap = 0;
  if (!fed.key) die("out of memory");
  collect_sends(g, &sends, &nsends, &cap);
  if (nsends) qsort(sends, (size_t)nsends, sizeof *sends, send_key_cmp);
  lv.sends = sends;
  lv.nsends = nsends;
  if (have_loss) do {
      lv.more = false;
      mark_graph(&lv, g, true);
      live_recvs(&lv, g, &fed);
    } while (mark_sends(&lv, g, &fed) || lv.more);
  free(fed.key);
  free(sends);
  *fwd = graph_flops(m, g, have_loss ? &lv : NULL);
  *tok = ce_tokens(m, g, have_loss ? &lv : NULL);
  if (!*tok) *tok = embed_tokens(m, g);
  ptrmap_free(&lv.live);
}

double ir_flops_per_token(const Module *m, bool training) {
  double fwd;
  int64_t tok;
  step_flops(m, &fwd, &tok);
  double per = tok > 0 ? fwd / (double)tok : fwd;
  return training ? 3.0 * per : per;
}

int64_t ir_tokens_per_step(const Module *m) {
  double fwd;
  int64_t tok;
  step_flops(m, &fwd, &tok);
  return tok;
}

double ir_training_flops(const Module *m, int64_t *tokens_per_step) {
  double fwd;
  int64_t tok;
  step_flops(m, &fwd, &tok);
  *tokens_per_step = tok;
  return 3.0 * (tok > 0 ? fwd / (double)tok : fwd);
}

