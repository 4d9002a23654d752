/* passes/storage.c — the traffic and storage report (see storage.h). */
#include "storage.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "commreport.h"
#include "diag.h"
#include "mesh.h"

void storage_traffic(const Module *m, const CostDevice *d, TrafficReport *t) {
  memset(t, 0, sizeof *t);
  CommVolumes v;
  ir_comm_volumes(m, &v);
  int per_node = m->mesh ? m->mesh->devices_per_node : 1;
  if (per_node < 1) per_node = 1;
  t->busiest = -1;
  /* across nodes, a node's network carries one ring edge per group of the axis with members on the
   * node (a group's members on a node are consecutive in its ring): devices_per_node / members per
   * node rings, each a rank's bus bytes (ir_comm_link_share, passes/cost.c's share) */
  double net = 0;
  for (int a = 0; a < RT_AX_COUNT; a++) {
    if (!v.across_nodes[a] || v.members_per_node[a] <= 0) continue;
    double axis = 0;
    for (int r = 0; r < CR_COUNT; r++)
      for (int k = 0; k < CK_COUNT; k++) axis += v.cell[a][r][k].bus_bytes;
    net += axis * ir_comm_link_share(per_node, true, v.members_per_node[a]);
  }
  for (int side = 0; side < 2; side++) {
    t->rank_bytes[side] = v.side_bus_bytes[side];
    t->link_bytes[side] = side ? net : v.side_bus_bytes[side]; /* in node: a rank's own port */
    t->link_Bps[side] = d->link[side].bytes_per_s;
    t->link_s[side] = t->link_bytes[side] > 0 && t->link_Bps[side] > 0 ? t->link_bytes[side] / t->link_Bps[side] : 0;
    if (t->link_bytes[side] > 0 && (t->busiest < 0 || t->link_s[side] > t->link_s[t->busiest])) t->busiest = side;
  }
}

static double local_bytes(const Value *v) { return (double)ir_numel(&v->shape) * ir_dtype_size(v->dtype); }

/* The mesh axes that split v (degree > 1): runtime/train/layout.c's rt_tensor_split_mask. */
static unsigned split_mask(const MeshMap *mm, const Value *v) { return ir_split_mask(&v->sharding, v->shape.rank, mm); }

int storage_stop_warning_s(double step_s, double ckpt_s) {
  double s = 2 * (fmax(step_s, 0) + fmax(ckpt_s, 0)) + 30;
  return s >= 65535 || !isfinite(s) ? 65535 : s <= 120 ? 120 : (int)ceil(s);
}

void storage_ckpt(const Module *m, const CostDevice *d, double storage_Bps, double step_s, CkptReport *c) {
  memset(c, 0, sizeof *c);
  const MeshMap *mm = m->mesh;
  int world = mm ? mm->world : 1;
  double *rank = calloc((size_t)world, sizeof *rank);
  int nodes = mm && mm->nodes > 0 ? mm->nodes : 1;
  double *node = calloc((size_t)nodes, sizeof *node);
  if (!rank || !node) die("storage: out of memory");
  const Graph *g = m->graph;
  int ti = -1; /* the trainer's tensor index (codegen/emit.c's table: PARAM, STATE, INPUT in graph order) */
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op != OP_PARAM && n->op != OP_STATE && n->op != OP_INPUT) continue;
    ti++;
    if (n->op == OP_INPUT || (n->op == OP_STATE && ir_copy_source(n->a.name))) continue; /* (copies: not saved) */
    const Value *v = n->out[0];
    double b = local_bytes(v);
    c->ntensors++;
    c->rank0_own_bytes += b;
    if (!mm) {
      c->total_bytes += b;
      rank[0] += b;
      continue;
    }
    unsigned mask = split_mask(mm, v);
    for (int r = 0; r < world; r++) { /* the trainer's writers (runtime/mesh.h) */
      int coord[RT_AX_COUNT];
      rt_mesh_coords(mm, r, coord);
      if (!rt_ckpt_writer(mm->dim, coord, mask, ir_node_stages(n), ti)) continue;
      rank[r] += b;
      node[rt_mesh_node(mm, r) < nodes ? rt_mesh_node(mm, r) : 0] += b;
      c->total_bytes += b;
    }
  }
  if (!mm) node[0] = rank[0];
  c->min_rank_bytes = -1;
  for (int r = 0; r < world; r++) {
    if (rank[r] <= 0) continue;
    c->writers++;
    if (rank[r] > c->max_rank_bytes) c->max_rank_bytes = rank[r], c->max_rank = r;
    if (c->min_rank_bytes < 0 || rank[r] < c->min_rank_bytes) c->min_rank_bytes = rank[r];
  }
  if (c->min_rank_bytes < 0) c->min_rank_bytes = 0;
  for (int k = 0; k < nodes; k++) {
    if (node[k] > c->max_node_bytes) c->max_node_bytes = node[k];
    c->writer_nodes += node[k] > 0;
  }
  free(rank);
  free(node);
  if (c->rank0_own_bytes > c->total_bytes) c->rank0_own_bytes = c->total_bytes;

  /* the writes: a node reaches the storage over its network (one node: no limit but the storage's) */
  c->storage_Bps = storage_Bps;
  c->node_Bps = nodes > 1 ? d->link[1].bytes_per_s : 0;
  double one_node = c->node_Bps > 0 ? fmin(storage_Bps, c->node_Bps) : storage_Bps;
  c->sharded_s = c->total_bytes / storage_Bps;
  if (c->node_Bps > 0) c->sharded_s = fmax(c->sharded_s, c->max_node_bytes / c->node_Bps);
  double gather_Bps = nodes > 1 ? d->link[1].bytes_per_s : d->link[0].bytes_per_s;
  c->rank0_gather_s = gather_Bps > 0 ? (c->total_bytes - c->rank0_own_bytes) / gather_Bps : 0;
  c->rank0_write_s = c->total_bytes / one_node;
  c->interval_s = m->recipe.ckpt_every > 0 ? (double)m->recipe.ckpt_every * step_s : 0;
  c->keep_bytes = c->total_bytes * (m->recipe.ckpt_keep > 0 ? m->recipe.ckpt_keep : 1);
}

static const char *gbps(char *buf, size_t n, double Bps) {
  snprintf(buf, n, "%.4g GB/s", Bps * 1e-9);
  return buf;
}

void storage_print(FILE *f, const Module *m, const TrafficReport *t, const CkptReport *c, double step_s) {
  char a[32], b[32], e[32], h[32];
  static const char *const side_name[2] = {"in node", "across nodes"};
  static const char *const link_name[2] = {"a rank's in-node link", "a node's network"};
  const MeshMap *mm = m->mesh;
  fprintf(f, "# traffic per step (bus bytes of the plan's collectives, passes/storage.c)\n");
  for (int s = 0; s < 2; s++) {
    if (t->rank_bytes[s] <= 0) continue;
    fprintf(f, "#   %-13s %12s per rank (%.0f B); %s carries %s (%.0f B): %s at %s (%.1f%% of the predicted step)\n",
            side_name[s], ir_human_bytes(a, sizeof a, t->rank_bytes[s]), t->rank_bytes[s], link_name[s],
            ir_human_bytes(b, sizeof b, t->link_bytes[s]), t->link_bytes[s],
            cost_human_time(e, sizeof e, t->link_s[s]), gbps(h, sizeof h, t->link_Bps[s]),
            step_s > 0 ? 100 * t->link_s[s] / step_s : 0);
  }
  if (t->busiest < 0) fprintf(f, "#   no communication\n");
  else
    fprintf(f, "#   busiest link: %s (%s), %s per step\n", link_name[t->busiest], side_name[t->busiest],
            cost_human_time(a, sizeof a, t->link_s[t->busiest]));
  fprintf(f, "# checkpoint (parameters and optimizer state; payload bytes, runtime/train/ckpt_shard.c's writers)\n");
  fprintf(f, "#   size             %s (%.0f B), %d tensors; kept %d: %s on the storage\n",
          ir_human_bytes(a, sizeof a, c->total_bytes), c->total_bytes, c->ntensors,
          m->recipe.ckpt_keep > 0 ? m->recipe.ckpt_keep : 1, ir_human_bytes(b, sizeof b, c->keep_bytes));
  fprintf(f, "#   writers          %d of %d ranks on %d of %d nodes; per writing rank %s (%.0f B) to %s (%.0f B, rank %d); "
             "busiest node %s\n",
          c->writers, mm ? mm->world : 1, c->writer_nodes, mm && mm->nodes > 0 ? mm->nodes : 1,
          ir_human_bytes(a, sizeof a, c->min_rank_bytes), c->min_rank_bytes, ir_human_bytes(b, sizeof b, c->max_rank_bytes),
          c->max_rank_bytes, c->max_rank, ir_human_bytes(e, sizeof e, c->max_node_bytes));
  if (c->node_Bps > 0)
    fprintf(f, "#   storage          %s aggregate; a node reaches it at %s (its network)\n",
            gbps(a, sizeof a, c->storage_Bps), gbps(b, sizeof b, c->node_Bps));
  else fprintf(f, "#   storage          %s aggregate (one node)\n", gbps(a, sizeof a, c->storage_Bps));
  fprintf(f, "#   all ranks write  %s (%d files written at once)\n", cost_human_time(a, sizeof a, c->sharded_s), c->writers);
  fprintf(f, "#   rank 0 writes    %s: gather %s to rank 0 (%s), then write %s (one file)\n",
          cost_human_time(a, sizeof a, c->rank0_gather_s + c->rank0_write_s),
          ir_human_bytes(b, sizeof b, c->total_bytes - c->rank0_own_bytes), cost_human_time(e, sizeof e, c->rank0_gather_s),
          cost_human_time(h, sizeof h, c->rank0_write_s));
  if (c->interval_s > 0)
    fprintf(f, "#   storage load     every %lld steps (~%s): %s written, %.4g MB/s on average; the writes take %.2f%% "
               "of the interval (all ranks) or %.2f%% (rank 0)\n",
            (long long)m->recipe.ckpt_every, cost_human_time(a, sizeof a, c->interval_s),
            ir_human_bytes(b, sizeof b, c->total_bytes), c->total_bytes / c->interval_s * 1e-6,
            100 * c->sharded_s / c->interval_s, 100 * (c->rank0_gather_s + c->rank0_write_s) / c->interval_s);
  else fprintf(f, "#   storage load     the recipe writes no checkpoint (`checkpoint every N`)\n");
}
