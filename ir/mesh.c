/* ir/mesh.c — the mesh and the batch, decided once (see mesh.h), and the mesh printout.
 *
 * Megatron's order (runtime/mesh.h, which the interpreter and the trainer use too): tp
 * innermost (inside a node, on NVLink), then cp, dp, pp. ir_mesh_resolve resolves `dp auto`,
 * checks that the degrees multiply to the world, refuses a tp group that straddles nodes
 * (unless the plan sets allow_cross_node_tp), and stores the map and the batch sizes in the
 * Module. ir_print_mesh prints the map.
 */
#include "mesh.h"

#include <stdlib.h>
#include <string.h>

#include "diag.h"


static int gcd(int a, int b) {
  while (b) {
    int t = a % b;
    a = b;
    b = t;
  }
  return a;
}

static const char *link_name(const Link *l) { return ir_link_names[l->kind < LINK_COUNT ? l->kind : 0]; }

/* The recipe's `batch` is the global batch: micro_batch x dp x accumulation steps. Not given:
 * one micro-batch per replica (accum 1). */
static bool resolve_batch(Module *m, int dp) {
  const Recipe *r = &m->recipe;
  int64_t per_step = r->micro_batch * dp; /* sequences per micro-step over every replica */
  int64_t accum = 1;
  if (r->batch > 0) {
    if (r->batch % per_step != 0) {
      SrcLoc why[] = {r->batch_loc, r->micro_batch_loc, m->plan.degree_loc[RT_AX_DP]};
      error_at(diag_blame(why, 3, r->batch_loc), "batch %lld is not a multiple of micro_batch %lld x dp %d = %lld",
               (long long)r->batch, (long long)r->micro_batch, dp, (long long)per_step);
      int64_t below = r->batch / per_step * per_step, above = below + per_step;
      if (below > 0)
        note("batch is the global batch, micro_batch x dp x gradient accumulation steps: write batch %lld or %lld",
             (long long)below, (long long)above);
      else
        note("batch is the global batch, micro_batch x dp x gradient accumulation steps: write batch %lld",
             (long long)above);
      return false;
    }
    accum = r->batch / per_step;
  }
  /* pipeline micro-batches are the accumulation's micro-steps: `microbatches N` sets them when no
   * batch is written, and must agree with it otherwise */
  const Plan *p = &m->plan;
  if (p->microbatches > 1 && r->batch <= 0) accum = p->microbatches;
  else if (p->microbatches > 1 && p->microbatches != accum) {
    SrcLoc why[] = {p->opt_loc[PLAN_OPT_MICROBATCHES], r->batch_loc, r->micro_batch_loc, p->degree_loc[RT_AX_DP]};
    error_at(diag_blame(why, 4, p->opt_loc[PLAN_OPT_MICROBATCHES].file ? p->opt_loc[PLAN_OPT_MICROBATCHES] : p->loc), "microbatches %d but batch %lld is %lld micro-batches of micro_batch %lld x dp %d", p->microbatches,
             (long long)r->batch, (long long)accum, (long long)r->micro_batch, dp);
    note("write microbatches %lld, or leave out batch (it is then micro_batch x dp x microbatches)", (long long)accum);
    return false;
  }
  if (p->interleave > 1 && p->schedule != SCHED_INTERLEAVED) {
    /* (interleave sets the schedule's option: opt_loc is where it was written, in the file or by -D) */
    error_at(p->opt_loc[PLAN_OPT_SCHEDULE], "`interleave %d` needs `schedule interleaved`", p->interleave);
    note("write schedule interleaved(v: N), or leave out interleave");
    return false;
  }
  m->batch.micro = r->micro_batch;
  m->batch.accum = accum;
  m->batch.global = r->micro_batch * dp * accum;
  return true;
}

bool ir_mesh_resolve(Module *m, int world) {
  if (m->mesh) die("mesh: resolved twice");
  const Plan *p = &m->plan;
  SrcLoc loc = diag_blame(p->degree_loc, RT_AX_COUNT, p->loc); /* the degrees' errors: at a -D that set one, or the block */
  /* the frontend checks every degree (tp, pp, cp >= 1; dp >= 1 or 0 for auto) and the topology's sizes */
  if (p->tp < 1 || p->pp < 1 || p->cp < 1 || p->dp < 0) die("mesh: plan degrees unchecked");
  int dpn = 1, nodes = 1;
  if (m->has_topology) {
    if (m->topo.devices_per_node < 1 || m->topo.nodes < 1) die("mesh: topology sizes unchecked");
    dpn = m->topo.devices_per_node;
    nodes = m->topo.nodes;
  }
  int tp = p->tp, pp = p->pp, cp = p->cp;
  if ((double)tp * pp * cp * (p->dp > 0 ? p->dp : 1) > IR_RANKS_MAX || (double)nodes * dpn > IR_RANKS_MAX) {
    error_at(loc, "the plan (dp %d x tp %d x pp %d x cp %d) or its topology (%d nodes x %d devices) is over %d ranks",
             p->dp, tp, pp, cp, nodes, dpn, IR_RANKS_MAX);
    return false;
  }
  if (world > IR_RANKS_MAX) die("mesh: a world of %d ranks unchecked", world);
  int model = tp * pp * cp; /* ranks holding one replica */
  bool explicit_world = world > 0;
  if (!explicit_world) {
    if (m->has_topology) world = nodes * dpn;
    else world = p->dp > 0 ? p->dp * model : model;
  }
  if (!m->has_topology) dpn = world; /* no cluster described: one machine */
  const char *wsrc = explicit_world ? "the launched world" : "the topology";
  int dp = p->dp;
  if (dp <= 0) {
    if (world % model != 0) {
      error_at(loc, "tp %d x pp %d x cp %d = %d ranks per replica does not divide %s of %d ranks", tp, pp, cp, model,
               wsrc, world);
      note("dp auto needs world / (tp * pp * cp) to be a whole number; pick degrees whose product divides %d", world);
      return false;
    }
    dp = world / model;
  } else if (dp * model != world) {
    error_at(loc, "the plan uses dp %d x tp %d x pp %d x cp %d = %d ranks but %s has %d", dp, tp, pp, cp, dp * model,
             wsrc, world);
    if (world % model == 0) note("use `dp auto` (dp %d) or -D dp=%d", world / model, world / model);
    if (!explicit_world)
      note("or plan for %d ranks with --world %d (ranks past the topology's devices fill more nodes like its own)",
           dp * model, dp * model);
    return false;
  }
  MeshMap *mm = ARENA_NEW(m->arena, MeshMap);
  if (!rt_mesh_init(mm, dp, pp, cp, tp, dpn)) die("mesh: bad degrees");
  if (!rt_mesh_group_in_node(mm, RT_MESH_TP) && !p->allow_cross_node_tp) {
    int alt = gcd(tp, dpn);
    error_at(diag_blame(&p->degree_loc[RT_AX_TP], 1, p->loc),
             "tp %d does not fit in a node of %d devices: its groups would straddle nodes", tp, dpn);
    if (m->has_topology)
      note("tensor parallelism all-reduces activations in every layer, forward and backward; it needs the "
           "intra-node link (%s, %.0f GB/s), not the network between nodes (%s, %d x %.0f GB/s)",
           link_name(&m->topo.intra), m->topo.intra.bytes_per_s / 1e9, link_name(&m->topo.inter),
           m->topo.inter.count > 0 ? m->topo.inter.count : 1, m->topo.inter.bytes_per_s / 1e9);
    else
      note("tensor parallelism all-reduces activations in every layer; it needs the fast link inside a node");
    note("use tp %d with pp %d (or dp auto), which keeps every tp group inside one node; or accept the cost "
         "with -D cross_node_tp=on",
         alt, pp * (tp / alt));
    return false;
  }
  if (!resolve_batch(m, dp)) return false;
  m->mesh = mm;
  return true;
}

/* ---- printing --------------------------------------------------------------- */

/* Members of a group, compact: "[0,1,2,3]" or "[0,8,..,120] (16, stride 8)". */
static void print_members(FILE *f, const int *mem, int n, int width) {
  char buf[160];
  int k = 0;
  bool arith = n > 2;
  for (int i = 2; i < n && arith; i++) arith = mem[i] - mem[i - 1] == mem[1] - mem[0];
  if (n > 6 && arith) {
    k = snprintf(buf, sizeof buf, "[%d,%d,..,%d]/%d", mem[0], mem[1], mem[n - 1], n);
  } else {
    k = snprintf(buf, sizeof buf, "[");
    for (int i = 0; i < n && k < (int)sizeof buf - 24; i++) k += snprintf(buf + k, sizeof buf - (size_t)k, "%s%d", i ? "," : "", mem[i]);
    if (n > 0 && k >= (int)sizeof buf - 24) k += snprintf(buf + k, sizeof buf - (size_t)k, ",..");
    snprintf(buf + k, sizeof buf - (size_t)k, "]");
  }
  if (width > 0) fprintf(f, " %-*s", width, buf);
  else fprintf(f, " %s", buf);
}

/* Group masks worth printing: every axis of degree > 1, and dp*cp when both are
 * (gradients are reduced and ZeRO shards over dp x cp). */
static int group_masks(const MeshMap *mm, unsigned *masks) {
  static const unsigned order[] = {RT_MESH_TP, RT_MESH_CP, RT_MESH_DP, RT_MESH_PP, RT_MESH_DP | RT_MESH_CP};
  int n = 0;
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    unsigned mk = order[i];
    bool all_big = true;
    for (int ax = 0; ax < RT_AX_COUNT; ax++)
      if ((mk & (1u << ax)) && mm->dim[ax] <= 1) all_big = false;
    if (all_big) masks[n++] = mk;
  }
  return n;
}

static void print_rank(FILE *f, const MeshMap *mm, int r, const unsigned *masks, int nmasks, int *mem, int width) {
  int c[RT_AX_COUNT];
  rt_mesh_coords(mm, r, c);
  fprintf(f, "  %5d %5d %4d %4d %4d %4d %4d", r, rt_mesh_node(mm, r), rt_mesh_device(mm, r), c[RT_AX_DP],
          c[RT_AX_PP], c[RT_AX_CP], c[RT_AX_TP]);
  for (int i = 0; i < nmasks; i++) {
    int n = rt_mesh_group(mm, r, masks[i], mem);
    print_members(f, mem, n, i + 1 < nmasks ? width : 0); /* no trailing blanks */
  }
  fprintf(f, "\n");
}

void ir_print_mesh(FILE *f, const Module *m) {
  const MeshMap *mm = m->mesh;
  if (!mm) {
    fprintf(f, "# mesh: not mapped (ir_mesh_resolve has not run)\n");
    return;
  }
  fprintf(f, "# mesh: dp %d x pp %d x cp %d x tp %d = %d ranks on %d node%s x %d %s\n", mm->dim[RT_AX_DP],
          mm->dim[RT_AX_PP], mm->dim[RT_AX_CP], mm->dim[RT_AX_TP], mm->world, mm->nodes, mm->nodes == 1 ? "" : "s",
          mm->devices_per_node, m->has_topology && m->topo.device ? m->topo.device : "devices");
  fprintf(f, "# rank = ((pp*%d + dp)*%d + cp)*%d + tp; node = rank / %d; device = rank %% %d\n", mm->dim[RT_AX_DP],
          mm->dim[RT_AX_CP], mm->dim[RT_AX_TP], mm->devices_per_node, mm->devices_per_node);
  unsigned masks[8];
  int nmasks = group_masks(mm, masks);
  int *mem = malloc((size_t)mm->world * sizeof *mem);
  if (!mem) die("out of memory");
  for (int i = 0; i < nmasks; i++) {
    int size = rt_mesh_group_size(mm, masks[i]);
    rt_mesh_group(mm, 0, masks[i], mem);
    int span = rt_mesh_node(mm, mem[size - 1]) - rt_mesh_node(mm, mem[0]) + 1;
    fprintf(f, "# %-6s %d groups of %d ranks, %s\n", rt_mesh_mask_name(masks[i]), mm->world / size, size,
            span == 1 ? "each inside one node" : "each across nodes");
  }
  int width = 10;
  for (int i = 0; i < nmasks; i++) {
    int n = rt_mesh_group(mm, mm->world - 1, masks[i], mem);
    int w = n > 6 ? 22 : 2 + n * 5;
    if (w > width) width = w;
  }
  if (width > 40) width = 40;
  fprintf(f, "  %5s %5s %4s %4s %4s %4s %4s", "rank", "node", "dev", "dp", "pp", "cp", "tp");
  for (int i = 0; i < nmasks; i++) {
    char h[32];
    snprintf(h, sizeof h, "%s group", rt_mesh_mask_name(masks[i]));
    if (i + 1 < nmasks) fprintf(f, " %-*s", width, h);
    else fprintf(f, " %s", h);
  }
  fprintf(f, "\n");
  if (mm->world <= 64) {
    for (int r = 0; r < mm->world; r++) print_rank(f, mm, r, masks, nmasks, mem, width);
  } else {
    /* The first node, the first rank of every following pipeline stage, the last rank. */
    int shown = mm->devices_per_node < 16 ? mm->devices_per_node : 16;
    for (int r = 0; r < shown; r++) print_rank(f, mm, r, masks, nmasks, mem, width);
    fprintf(f, "  ...\n");
    int stage = mm->world / mm->dim[RT_AX_PP];
    for (int s = 1; s < mm->dim[RT_AX_PP] && s <= 8; s++) print_rank(f, mm, s * stage, masks, nmasks, mem, width);
    if (mm->dim[RT_AX_PP] > 1) fprintf(f, "  ...\n");
    print_rank(f, mm, mm->world - 1, masks, nmasks, mem, width);
    fprintf(f, "# %d ranks: %d shown; every rank's row follows from the formula above\n", mm->world,
            shown + (mm->dim[RT_AX_PP] - 1 < 8 ? mm->dim[RT_AX_PP] - 1 : 8) + 1);
  }
  free(mem);
}
