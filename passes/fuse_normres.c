/* passes/fuse_normres.c — the norms' backward adds the residual gradient (CUDA target).
 *
 * The backward of a pre-norm block reads, per norm, dx = layernorm_bwd(x, w, dy) (or rmsnorm_bwd) and
 * then r = add(carry, dx) (or add(dx, carry)): the residual stream's gradient gathers each branch's.
 * The add is a kernel of its own that reads dx and the carry and writes r, three passes over the
 * rows (GPT-2 124M: 24 a step at [16384, 768]; the Llama-shaped 509M: 16 at [8192, 2048]). Where the
 * add is the norm's backward's next computing node (only argument nodes between, which compute
 * nothing), dx is read by it alone (and is no result of the graph), the carry, dx and r have one
 * shape and dtype in device memory and both nodes one pipeline stage, both get Attrs.normres: the
 * norm's backward kernel reads the carry as it stores its dx and stores dx + carry in r instead, with
 * the bits of the two nodes (dx rounded to its dtype, the sum in f32, rounded: codegen/cuda_kernels_norm.c,
 * shardk_norm.cuh with_res); dx is never written and the add emits nothing.
 *
 * Where other nodes lie between them (the f32 casts of dw and db where the gradients stay f32: ZeRO, offload),
 * the add moves up to just after the norm's backward if its carry is made before it and no node in between
 * owns a region body or touches r's bytes (r is then written earlier than planned: placed_write_early).
 *
 * Runs after the memory plan, because the kernel now writes r while it reads x, w, dy and the carry:
 * r must meet none of x, w, dy, nor dw / db (written by the second launch, after r), and may meet
 * the carry only as its very tensor, updated index for index (memplan_clobbers: each element of the
 * carry is read by the thread that then stores r's). Where the add sits in a fusion group with other
 * nodes, it is left alone (no regrouping here). The other targets ignore it (nothing is marked for
 * them); the interpreter runs the nodes as written.
 */
#include "diag.h"
#include "memplan.h"
#include "passes.h"
#include "placed.h"

static bool is_norm_bwd(const Node *n) { return n->op == OP_LAYERNORM_BWD || n->op == OP_RMSNORM_BWD; }

/* The carry the add at j adds to the norm's backward n's dx (the add's other operand), or NULL. */
static const Value *carry_of(const Node *n, const Node *add) {
  const Value *dx = n->out[0];
  if (add->op != OP_ADD || add->nin != 2 || add->in[0] == add->in[1]) return NULL;
  return add->in[0] == dx ? add->in[1] : add->in[1] == dx ? add->in[0] : NULL;
}

int fuse_normres_partner(const Graph *g, int i) {
  const Node *n = g->nodes[i];
  if (!n->a.normres) return -1;
  if (is_norm_bwd(n)) {
    int j = ir_next_computing(g, i);
    return j < g->nnodes && g->nodes[j]->a.normres && carry_of(n, g->nodes[j]) ? j : -1;
  }
  int j = i - 1; /* the add: its norm's backward is the computing node before it */
  while (j >= 0 && ir_enters(g->nodes[j])) j--;
  return j >= 0 && is_norm_bwd(g->nodes[j]) && g->nodes[j]->a.normres && carry_of(g->nodes[j], n) ? j : -1;
}

/* Whether the add at j may be computed by the norm's backward at i (uses: ir_use_counts of the module's graph). */
static bool fusable(const Graph *g, const PtrMap *uses, int i, int j) {
  const Node *n = g->nodes[i], *add = g->nodes[j];
  const Value *dx = n->out[0], *carry = carry_of(n, add), *r = add->out[0];
  if (!carry || ir_node_stages(add) != ir_node_stages(n) || epilogue_owner(g, j) >= 0) return false; /* (a GEMM's) */
  intptr_t c = 0;
  ptrmap_get(uses, dx, &c);
  if (c != 1 || ir_is_result(g, dx)) return false;
  if (!ir_same_type(carry, dx) || !ir_same_type(r, dx) || dx->host || carry->host || r->host) return false;
  if (dx->dtype != DT_BF16 && dx->dtype != DT_F32) return false;
  if (add->group && ((j > 0 && g->nodes[j - 1]->group == add->group) ||
                     (j + 1 < g->nnodes && g->nodes[j + 1]->group == add->group)))
    return false; /* in a fusion group with other nodes */
  for (int k = 0; k < n->nin; k++) /* x, w, dy */
    if (placed_meets(r, n->in[k])) return false;
  for (int k = 1; k < n->nout; k++) /* dw, db */
    if (placed_meets(r, n->out[k])) return false;
  return !memplan_clobbers(r, carry);
}

/* The position of the first node after i in g that reads v, or g->nnodes. */
static int reader(const Graph *g, int i, const Value *v) {
  for (int j = i + 1; j < g->nnodes; j++)
    for (int k = 0; k < g->nodes[j]->nin; k++)
      if (g->nodes[j]->in[k] == v) return j;
  return g->nnodes;
}

/* Whether the add at j (a later node than the next computing one) may move to just after the norm's backward at
 * i: its carry is made before i (or outside g), and no node in between owns a region body or reads or writes a
 * byte of its output (placed_write_early: the output is then written earlier than planned). Its inputs are only
 * read earlier, while they already hold their values. */
static bool movable(const Graph *g, int i, int j) {
  const Node *add = g->nodes[j];
  const Value *carry = carry_of(g->nodes[i], add);
  for (int q = i + 1; q < j; q++)
    if (g->nodes[q] == carry->def) return false;
  return placed_write_early(g, add->out[0], i, NULL);
}

static void normres_graph(Graph *g, const PtrMap *uses) {
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->body) normres_graph(n->body, uses);
    if (!is_norm_bwd(n)) continue;
    int j = reader(g, i, n->out[0]), at = ir_next_computing(g, i);
    if (j >= g->nnodes || !fusable(g, uses, i, j) || (j > at && !movable(g, i, j))) continue;
    Node *add = g->nodes[j];
    for (int q = j; q > at; q--) g->nodes[q] = g->nodes[q - 1]; /* (the f32 casts of dw, db: ZeRO, offload) */
    g->nodes[at] = add;
    ir_touch(g);
    n->a.normres = add->a.normres = true;
    add->group = 0;
    i = at;
  }
}

bool pass_fuse_normres(Module *m) {
  if (pass_cuda_fusions_apply(m) && !m->memplan) die("fuse_normres: the memory plan has not run");
  if (!pass_cuda_fusions_apply(m) || !fuse_on(m, FUSE_NORMRES)) return true;
  PtrMap uses = {0}; /* the pass changes no node's inputs: counted once */
  ir_use_counts(m->graph, &uses);
  normres_graph(m->graph, &uses);
  ptrmap_free(&uses);
  return true;
}
