/* ir/commreport.c — per-collective notes, per-step communication volumes and their report
 * (see ir/commreport.h for the conventions). */
#include "commreport.h"

#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "mesh.h"
#include "ptrmap.h"

const char *const ir_comm_region_names[CR_COUNT] = {"forward", "backward", "optimizer"};

static int64_t value_bytes(const Value *v) { return ir_numel(&v->shape) * ir_dtype_size(v->dtype); }

int64_t ir_comm_node_bytes(const Node *n) {
  switch (n->op) {
  case OP_ALL_REDUCE: {
    int64_t b = 0;
    for (int i = 0; i < n->nin; i++) b += value_bytes(n->in[i]);
    return b;
  }
  case OP_REDUCE_SCATTER: case OP_BROADCAST: case OP_SEND: case OP_ALL_TO_ALL: return n->nin ? value_bytes(n->in[0]) : 0;
  case OP_ALL_GATHER: case OP_RECV: return n->nout ? value_bytes(n->out[0]) : 0;
  default: return 0;
  }
}

static int comm_kind(OpKind op) {
  switch (op) {
  case OP_ALL_REDUCE: return CK_ALL_REDUCE;
  case OP_REDUCE_SCATTER: return CK_REDUCE_SCATTER;
  case OP_ALL_GATHER: return CK_ALL_GATHER;
  case OP_BROADCAST: return CK_BROADCAST;
  case OP_SEND: case OP_RECV: return CK_SEND_RECV;
  case OP_ALL_TO_ALL: return CK_ALL_TO_ALL;
  default: return -1;
  }
}

double ir_comm_bus_factor(OpKind op, int n) {
  if (n <= 1) return 0;
  switch (op) {
  case OP_ALL_REDUCE: return 2.0 * (n - 1) / n;
  case OP_REDUCE_SCATTER: case OP_ALL_GATHER: case OP_ALL_TO_ALL: return (double)(n - 1) / n;
  case OP_BROADCAST: case OP_SEND: return 1.0;
  default: return 0; /* recv: counted at the sender */
  }
}

int ir_comm_ring_steps(OpKind op, int n) {
  if (n <= 1) return 0;
  switch (op) {
  case OP_ALL_REDUCE: return 2 * (n - 1);
  case OP_REDUCE_SCATTER: case OP_ALL_GATHER: case OP_BROADCAST: case OP_ALL_TO_ALL: return n - 1;
  case OP_SEND: return 1;
  default: return 0;
  }
}

bool ir_comm_async(const Node *n) {
  if (n->op == OP_RECV) return !n->stage; /* a ring shift's (cp), started at the receive; a pipeline's blocks */
  /* the gradient-reduction group: dp (with cp: dp x cp), or cp alone at dp 1 (its gradients'
   * all-reduces and ZeRO's scatters and gathers over cp, passes/shard_cp.c) */
  if (n->a.mesh_axis != RT_AX_DP && !(n->a.mesh_axis == RT_AX_CP && !n->a.mesh_with)) return false;
  /* (a concat: ZeRO-3's coalesced shards, passes/zero_coalesce.c; memplan keeps it live until the wait) */
  if (n->op == OP_ALL_GATHER)
    return n->in[0]->def->op == OP_PARAM || n->in[0]->def->op == OP_ARG || n->in[0]->def->op == OP_CONCAT;
  return n->op == OP_ALL_REDUCE || n->op == OP_REDUCE_SCATTER;
}

int ir_comm_group_size(const Module *m, int axis) {
  if (axis == IR_COMM_DPCP) return ir_comm_group_size(m, RT_AX_DP) * ir_comm_group_size(m, RT_AX_CP);
  if (!m || axis < 0 || axis >= RT_AX_COUNT) return 1;
  return m->mesh ? m->mesh->dim[axis] : 1;
}

int ir_comm_row(const Node *n) {
  if (n->a.mesh_with == 1u << RT_AX_CP && n->a.mesh_axis == RT_AX_DP) return IR_COMM_DPCP;
  if (n->a.mesh_with) die("commreport: a collective over %s with axes 0x%x", rt_mesh_axis_name(n->a.mesh_axis),
                          n->a.mesh_with);
  return n->a.mesh_axis;
}

unsigned ir_comm_row_mask(int row) { return row == IR_COMM_DPCP ? RT_MESH_DP | RT_MESH_CP : 1u << row; }

const char *ir_comm_row_name(int row) { return rt_mesh_mask_name(ir_comm_row_mask(row)); }

const char *ir_human_bytes(char *buf, size_t size, double b) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (b < 1024) {
    snprintf(buf, size, "%.0f B", b);
    return buf;
  }
  int u = 0;
  b /= 1024;
  while (b >= 1024 && u < 3) {
    b /= 1024;
    u++;
  }
  snprintf(buf, size, "%.1f %s", b, units[u]);
  return buf;
}

void ir_comm_note(char *buf, size_t size, const Module *m, const Node *n) {
  if (size) buf[0] = 0;
  if (!(ir_ops[n->op].flags & F_COLL)) return;
  int ax = ir_comm_row(n);
  const char *name = ax >= 0 && ax < IR_COMM_ROWS ? ir_comm_row_name(ax) : "?";
  char hb[32];
  ir_human_bytes(hb, sizeof hb, (double)ir_comm_node_bytes(n));
  if (m) snprintf(buf, size, "%s x%d, %s", name, ir_comm_group_size(m, ax), hb);
  else snprintf(buf, size, "%s, %s", name, hb);
}

/* ---- regions ------------------------------------------------------------------- */

/* Every node, at any depth, -> the index of its top-level ancestor in g. */
static void index_tops(PtrMap *top, const Graph *g, int idx) {
  for (int i = 0; i < g->nnodes; i++) {
    ptrmap_put(top, g->nodes[i], idx);
    if (g->nodes[i]->body) index_tops(top, g->nodes[i]->body, idx);
  }
}

static int top_of(const PtrMap *top, const Value *v) {
  intptr_t t;
  return v && v->def && ptrmap_get(top, v->def, &t) ? (int)t : -1;
}

/* A pipeline's send and its receive (passes/pipe.c: top-level nodes, paired by mesh axis and tag)
 * are an edge the graph does not hold: the receive's value comes from the send's input. (Sends
 * inside bodies, cp's ring, pair within their own top node.) */
static const void *pair_key(const Node *n) {
  return (const void *)(uintptr_t)((((uint64_t)(uint32_t)n->a.tag << 8) | (uint8_t)n->a.mesh_axis) + 1);
}

/* g's top-level sends -> their index, keyed by pair_key. */
static void index_sends(PtrMap *sends, const Graph *g) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == OP_SEND) ptrmap_put(sends, pair_key(g->nodes[i]), i);
}

/* Marks, within the subtree of one top node, the top nodes its inputs come from. */
static void mark_inputs(const PtrMap *top, const Node *n, int self, bool *mark) {
  for (int j = 0; j < n->nin; j++) {
    int t = top_of(top, n->in[j]);
    if (t >= 0 && t != self) mark[t] = true;
  }
  if (n->body) {
    for (int i = 0; i < n->body->nnodes; i++) mark_inputs(top, n->body->nodes[i], self, mark);
    for (int i = 0; i < n->body->nresults; i++) {
      int t = top_of(top, n->body->results[i]);
      if (t >= 0 && t != self) mark[t] = true;
    }
  }
}

/* Graphs are topological: a backward sweep closes the marks over inputs (and a top-level
 * receive's send); another one follows only when a receive marked a send after it. */
static void close_marks(const PtrMap *top, const PtrMap *sends, const Graph *g, bool *mark) {
  bool again = true;
  while (again) {
    again = false;
    for (int i = g->nnodes - 1; i >= 0; i--) {
      if (!mark[i]) continue;
      mark_inputs(top, g->nodes[i], i, mark);
      intptr_t s;
      if (g->nodes[i]->op == OP_RECV && ptrmap_get(sends, pair_key(g->nodes[i]), &s) && !mark[s]) {
        mark[s] = true;
        again |= s > i;
      }
    }
  }
}

static bool seed_updates(const PtrMap *top, const Graph *g, bool *mark) {
  bool any = false;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if ((n->op == OP_ADAMW_UPDATE || n->op == OP_SGD_UPDATE) && n->nin > 1) {
      int t = top_of(top, n->in[1]);
      if (t >= 0) mark[t] = true;
      any = true;
    }
    if (n->body) any |= seed_updates(top, n->body, mark);
  }
  return any;
}

/* region[i] for every top-level node of g. */
static void classify(const Graph *g, int *region) {
  int n = g->nnodes;
  PtrMap top = {0};
  for (int i = 0; i < n; i++) {
    ptrmap_put(&top, g->nodes[i], i);
    if (g->nodes[i]->body) index_tops(&top, g->nodes[i]->body, i);
  }
  bool *fwd = calloc((size_t)n + 1, sizeof *fwd), *bwd = calloc((size_t)n + 1, sizeof *bwd);
  if (!fwd || !bwd) die("commreport: out of memory");
  PtrMap sends = {0};
  index_sends(&sends, g);
  bool have_loss = false;
  for (int i = 0; i < g->nresults; i++)
    if (g->result_names && g->result_names[i] && strcmp(g->result_names[i], "loss") == 0) {
      int t = top_of(&top, g->results[i]);
      if (t >= 0) fwd[t] = have_loss = true;
    }
  close_marks(&top, &sends, g, fwd);
  bool have_updates = seed_updates(&top, g, bwd);
  close_marks(&top, &sends, g, bwd);
  for (int i = 0; i < n; i++)
    region[i] = !have_loss || fwd[i] ? CR_FORWARD : bwd[i] || !have_updates ? CR_BACKWARD : CR_OPTIMIZER;
  free(fwd);
  free(bwd);
  ptrmap_free(&sends);
  ptrmap_free(&top);
}

/* Under gradient accumulation (passes/accum.c) the micro-step is one top-level `repeat accum`:
 * its body's nodes are forward when its loss sum needs them, backward otherwise. Returns the
 * body's regions (malloc'd), or NULL when n is no such region. */
static int *classify_accum(const Graph *g, const Node *n) {
  if (n->op != OP_REPEAT || !n->a.name || strcmp(n->a.name, "accum") != 0) return NULL;
  int c = -1;
  for (int i = 0; i < g->nresults; i++) {
    const Value *v = g->results[i];
    if (!g->result_names || !g->result_names[i] || strcmp(g->result_names[i], "loss") != 0) continue;
    if (v->def->op != OP_SCALE) continue;
    const Value *s = v->def->in[0]; /* the sum, or (passes/peel.c) the sum plus the last micro-step's */
    if (s->def->op == OP_ADD && s->def->in[0]->def == n) s = s->def->in[0];
    if (s->def == n) c = s->idx;
  }
  const Graph *b = n->body;
  int *region = malloc(((size_t)b->nnodes + 1) * sizeof *region);
  bool *fwd = calloc((size_t)b->nnodes + 1, sizeof *fwd);
  if (!region || !fwd) die("commreport: out of memory");
  PtrMap top = {0};
  for (int i = 0; i < b->nnodes; i++) {
    ptrmap_put(&top, b->nodes[i], i);
    if (b->nodes[i]->body) index_tops(&top, b->nodes[i]->body, i);
  }
  int t = c >= 0 && c < b->nresults ? top_of(&top, b->results[c]) : -1;
  if (t >= 0) fwd[t] = true;
  PtrMap sends = {0};
  index_sends(&sends, b);
  close_marks(&top, &sends, b, fwd);
  ptrmap_free(&sends);
  for (int i = 0; i < b->nnodes; i++) region[i] = fwd[i] ? CR_FORWARD : CR_BACKWARD;
  free(fwd);
  ptrmap_free(&top);
  return region;
}

/* ---- volumes -------------------------------------------------------------------- */

static void add_cell(CommCell *c, int64_t mult, int64_t bytes, double factor) {
  c->count += mult;
  c->bytes += mult * bytes;
  c->bus_bytes += (double)mult * (double)bytes * factor;
}

void ir_comm_group_place(const Module *m, int row, bool *across, int *members) {
  const MeshMap *mm = m->mesh;
  *across = false;
  *members = ir_comm_group_size(m, row);
  if (!mm) return;
  int *mem = malloc((size_t)mm->world * sizeof *mem);
  if (!mem) die("commreport: out of memory");
  *across = !rt_mesh_group_in_node(mm, ir_comm_row_mask(row));
  int k = rt_mesh_group(mm, 0, ir_comm_row_mask(row), mem), on_first = 0;
  for (int i = 0; i < k; i++) on_first += rt_mesh_node(mm, mem[i]) == rt_mesh_node(mm, mem[0]);
  *members = on_first;
  free(mem);
}

double ir_comm_link_share(int devices_per_node, bool across, int members) {
  if (!across || devices_per_node <= 0 || members <= 0) return 1;
  return (double)devices_per_node / members;
}

/* m's devices per node (0: no mesh). */
static int per_node(const Module *m) { return m->mesh ? m->mesh->devices_per_node : 0; }

/* One collective's volumes into v. */
static void count_coll(const Module *m, const Node *n, int k, int64_t mult, bool in_repeat, int region, CommVolumes *v) {
  int ax = ir_comm_row(n);
  int64_t bytes = ir_comm_node_bytes(n);
  double f = ir_comm_bus_factor(n->op, v->group_size[ax]);
  add_cell(&v->cell[ax][region][k], mult, bytes, f);
  if (in_repeat) add_cell(&v->in_repeat[ax][region][k], mult, bytes, f);
  v->total_count += mult;
  v->total_bus_bytes += (double)mult * (double)bytes * f;
  /* time: the bandwidth term, plus one latency per ring step */
  int side = v->across_nodes[ax];
  v->side_bus_bytes[side] += (double)mult * (double)bytes * f;
  if (v->link[ax] == LINK_NONE || !m->has_topology) return;
  const Link *l = v->across_nodes[ax] ? &m->topo.inter : &m->topo.intra;
  double bw = (l->count > 1 ? l->count : 1) * l->bytes_per_s;
  double share = ir_comm_link_share(per_node(m), v->across_nodes[ax], v->members_per_node[ax]);
  double t = (double)mult * (double)ir_comm_ring_steps(n->op, v->group_size[ax]) * l->latency_s;
  if (bw > 0) t += (double)mult * (double)bytes * f * share / bw;
  v->side_time_s[side] += t;
}

/* n's collectives (at any depth) into vs[st] for each of the nst stages that runs them: `stages`, the
 * enclosing nodes' stage mask (IR_EVERY_STAGE: every one; without pp nst is 1 and every node counts). */
static void count_node(const Module *m, const Node *n, int64_t mult, bool in_repeat, int region, uint64_t stages,
                       CommVolumes *vs, int nst) {
  uint64_t own = ir_node_stages(n);
  if (nst > 1 && own) stages &= own; /* another pipeline stage's nodes: its ranks run them, not these */
  if (!stages) return;
  if (n->body) {
    bool rep = n->op == OP_REPEAT;
    for (int i = 0; i < n->body->nnodes; i++)
      count_node(m, n->body->nodes[i], rep ? mult * n->a.count : mult, in_repeat || rep, region, stages, vs, nst);
    return;
  }
  const Node *r = n->graph->owner; /* an all_gather `skiplast`: every iteration of its loop but the last */
  if (n->a.skiplast && r && r->op == OP_REPEAT && r->a.count > 0) mult = mult / r->a.count * (r->a.count - 1);
  int k = comm_kind(n->op);
  if (k < 0) return;
  int ax = ir_comm_row(n);
  if (ax < 0 || ax >= IR_COMM_ROWS) die("commreport: collective %s over mesh axis %d", ir_ops[n->op].name, ax);
  for (int st = 0; st < nst; st++)
    if (nst == 1 || (st < 64 && (stages >> st & 1))) count_coll(m, n, k, mult, in_repeat, region, &vs[st]);
}

/* The volumes of the ranks of each of nst pipeline stages (vs[nst]; nst 1: no pipeline, every node). */
void ir_comm_groups(const Module *m, CommVolumes *v) {
  memset(v, 0, sizeof *v);
  v->stage = -1;
  v->nstages = 1;
  for (int a = 0; a < IR_COMM_ROWS; a++) {
    v->group_size[a] = ir_comm_group_size(m, a);
    ir_comm_group_place(m, a, &v->across_nodes[a], &v->members_per_node[a]);
    v->link[a] = !m->has_topology ? LINK_NONE : v->across_nodes[a] ? m->topo.inter.kind : m->topo.intra.kind;
  }
  v->side_link[0] = m->has_topology ? m->topo.intra.kind : LINK_NONE;
  v->side_link[1] = m->has_topology ? m->topo.inter.kind : LINK_NONE;
}

static void volumes_of(const Module *m, CommVolumes *vs, int nst) {
  CommVolumes *v = &vs[0];
  ir_comm_groups(m, v);
  v->stage = nst > 1 ? 0 : -1;
  v->nstages = nst;
  for (int st = 1; st < nst; st++) {
    vs[st] = *v; /* the groups and links, no volumes yet */
    vs[st].stage = st;
  }
  const Graph *g = m->graph;
  int *region = malloc(((size_t)g->nnodes + 1) * sizeof *region);
  if (!region) die("commreport: out of memory");
  classify(g, region);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    int *inner = classify_accum(g, n);
    if (!inner) {
      count_node(m, n, 1, false, region[i], IR_EVERY_STAGE, vs, nst);
      continue;
    }
    for (int j = 0; j < n->body->nnodes; j++)
      count_node(m, n->body->nodes[j], n->a.count, false, inner[j], IR_EVERY_STAGE, vs, nst);
    free(inner);
  }
  free(region);
}

/* Under pp each rank runs one stage's nodes (Node.stage, stageset): a rank's volumes are its stage's,
 * and the report's are the busiest stage's (the most time on the links, or without a topology the
 * most bus traffic). Summing every stage's nodes counted a pipeline's layer collectives pp times. */
int ir_comm_stages(const Module *m) {
  int nst = m->pipe && m->mesh && m->mesh->dim[RT_AX_PP] > 1 ? m->mesh->dim[RT_AX_PP] : 1; /* (the pp ranks) */
  if (nst > 64) die("commreport: %d pipeline stages (Node.stageset holds 64)", nst);
  return nst;
}

void ir_comm_stage_volumes(const Module *m, CommVolumes *vs) { volumes_of(m, vs, ir_comm_stages(m)); }

void ir_comm_volumes(const Module *m, CommVolumes *v) {
  int nst = ir_comm_stages(m);
  CommVolumes *vs = malloc((size_t)nst * sizeof *vs);
  if (!vs) die("commreport: out of memory");
  volumes_of(m, vs, nst);
  int best = 0;
  for (int st = 1; st < nst; st++) {
    const CommVolumes *w = &vs[st], *b = &vs[best];
    double tw = w->side_time_s[0] + w->side_time_s[1], tb = b->side_time_s[0] + b->side_time_s[1];
    if (tw > tb || (tw == tb && w->total_bus_bytes > b->total_bus_bytes)) best = st;
  }
  *v = vs[best];
  free(vs);
}

/* ---- printing -------------------------------------------------------------------- */

static const int axis_order[] = {RT_AX_TP, RT_AX_CP, RT_AX_DP, RT_AX_PP, IR_COMM_DPCP}; /* innermost first, as the
                                                                                      mesh prints; then dp x cp */

void ir_print_rank_classes(FILE *f, const Module *m) {
  const MeshMap *mm = m->mesh;
  if (!mm) return;
  if (mm->world == 1) {
    fprintf(f, "# rank class 1 of 1: rank 0 (a single rank, no communication)\n");
    return;
  }
  char coords[128] = "";
  size_t k = 0;
  for (int i = 3; i >= 0; i--) { /* dp before tp: the order of the rank formula's outer axes */
    int a = axis_order[i];
    if (mm->dim[a] > 1 && k < sizeof coords)
      k += (size_t)snprintf(coords + k, sizeof coords - k, "%s%s 0..%d", k ? " x " : "", rt_mesh_axis_name(a),
                            mm->dim[a] - 1);
  }
  fprintf(f, "# rank class 1 of 1: ranks 0..%d (%s): one SPMD program, each rank reads its coordinates at start-up\n",
          mm->world - 1, coords);
}

static const char *link_label(char *buf, size_t size, const Module *m, const CommVolumes *v, int a) {
  if (v->link[a] == LINK_NONE) snprintf(buf, size, "%s", v->across_nodes[a] ? "across nodes" : "in node");
  else snprintf(buf, size, "%s, %s", ir_link_names[v->link[a]], v->across_nodes[a] ? "across nodes" : "in node");
  return buf;
}

/* What the trainer adds outside the program (ops/coll_count.h RT_TRAINER_FLAGS): said, so that the table's
 * collectives are what the trainer counts and checks (RtProgram.coll_plan) and nothing is left out. */
static void trainer_note(FILE *f, const Module *m) {
  if (!m->mesh || m->mesh->world <= 1) return;
  fprintf(f, "#   and the trainer's own, after each step: one all_reduce of %d B over the world's %d ranks (they agree "
             "on non-finite values and stops)\n", RT_TRAINER_FLAGS * 4, m->mesh->world);
}

void ir_print_comm(FILE *f, const Module *m) {
  CommVolumes v;
  ir_comm_volumes(m, &v);
  if (m->batch.accum > 1)
    fprintf(f, "# communication per rank, per step (one step = %lld micro-batches through the graph, one update)\n",
            (long long)m->batch.accum);
  else
    fprintf(f, "# communication per rank, per step (one step = one micro-batch through the graph)\n");
  if (v.nstages > 1)
    fprintf(f, "#   pipeline: a rank runs its stage's collectives; these are stage %d's, the busiest of %d\n", v.stage,
            v.nstages);
  if (v.total_count == 0) {
    fprintf(f, "#   none\n");
    trainer_note(f, m);
    return;
  }
  fprintf(f, "#   bytes: all_reduce its buffers; reduce_scatter / all_gather the full buffer; bus traffic: ring "
             "all_reduce 2(N-1)/N x bytes,\n#   reduce_scatter / all_gather (N-1)/N x bytes, broadcast and send 1 x "
             "bytes\n");
  fprintf(f, "#   %-5s %5s  %-24s %-9s  %-14s %7s %12s %12s\n", "group", "ranks", "link", "region", "collective",
          "count", "bytes", "bus traffic");
  char b1[32], b2[32], lb[48];
  for (int i = 0; i < IR_COMM_ROWS; i++) {
    int a = axis_order[i];
    bool first = true;
    for (int r = 0; r < CR_COUNT; r++)
      for (int k = 0; k < CK_COUNT; k++) {
        const CommCell *c = &v.cell[a][r][k];
        if (!c->count) continue;
        if (first) {
          char sz[16];
          snprintf(sz, sizeof sz, "x%d", v.group_size[a]);
          fprintf(f, "#   %-5s %5s  %-24s ", ir_comm_row_name(a), sz, link_label(lb, sizeof lb, m, &v, a));
        } else {
          fprintf(f, "#   %-5s %5s  %-24s ", "", "", "");
        }
        first = false;
        fprintf(f, "%-9s  %-14s %7lld %12s %12s\n", ir_comm_region_names[r], ir_comm_kind_names[k],
                (long long)c->count, ir_human_bytes(b1, sizeof b1, (double)c->bytes),
                ir_human_bytes(b2, sizeof b2, c->bus_bytes));
      }
  }
  fprintf(f, "#   %-5s %5s  %-24s %-9s  %-14s %7lld %12s %12s\n", "total", "", "", "", "", (long long)v.total_count, "",
          ir_human_bytes(b2, sizeof b2, v.total_bus_bytes));
  trainer_note(f, m);
  fprintf(f, "# per link class, per rank, per step (time: bus traffic at the link's bandwidth, plus its latency per "
             "ring step)\n");
  fprintf(f, "#   %-12s %12s %11s   %s\n", "link", "bus traffic", "time", "bandwidth");
  for (int side = 0; side < 2; side++) {
    if (v.side_bus_bytes[side] <= 0) continue;
    const char *where = side ? "across nodes" : "in node";
    if (v.side_link[side] == LINK_NONE) {
      fprintf(f, "#   %-12s %12s %11s   (no topology: link and time unknown)\n", where,
              ir_human_bytes(b2, sizeof b2, v.side_bus_bytes[side]), "");
      continue;
    }
    const Link *lk = side ? &m->topo.inter : &m->topo.intra;
    char bw[80];
    if (side && m->mesh)
      snprintf(bw, sizeof bw, "%s %d x %g GB/s per node, shared by %d ranks", ir_link_names[lk->kind],
               lk->count > 1 ? lk->count : 1, lk->bytes_per_s / 1e9, m->mesh->devices_per_node);
    else
      snprintf(bw, sizeof bw, "%s %g GB/s per %s", ir_link_names[lk->kind],
               (lk->count > 1 ? lk->count : 1) * lk->bytes_per_s / 1e9, m->topo.cpu_only ? "rank" : "device");
    double t = v.side_time_s[side];
    char ts[32];
    if (t < 1) snprintf(ts, sizeof ts, "~%.3g ms", 1e3 * t);
    else snprintf(ts, sizeof ts, "~%.2f s", t);
    fprintf(f, "#   %-12s %12s %11s   %s\n", where, ir_human_bytes(b2, sizeof b2, v.side_bus_bytes[side]), ts, bw);
  }
}
