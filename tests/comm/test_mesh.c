/* tests/comm/test_mesh.c — the rank mapping (runtime/mesh.c) and the mesh resolved once (ir/mesh.c).
 *
 * The mapping is checked exhaustively against the formula the interpreter uses,
 * rank = ((pp*dp + dp_i)*cp + cp_i)*tp + tp_i, for every combination of degrees in
 * {1,2,3} x {1,2} x {1,2} x {1,2,4}; groups against a brute-force scan of all ranks; a split over dp
 * and then cp (ZeRO's shards under cp) against the dp*cp group's member order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/mesh.h"
#include "diag.h"
#include "../check.h" /* CHECK */

static int failures;
static void check_mapping(int dp, int pp, int cp, int tp, int dpn) {
  MeshMap m;
  CHECK(rt_mesh_init(&m, dp, pp, cp, tp, dpn), "init");
  CHECK(m.world == dp * pp * cp * tp, "world");
  for (int r = 0; r < m.world; r++) {
    int c[RT_AX_COUNT];
    rt_mesh_coords(&m, r, c);
    int want = ((c[RT_AX_PP] * dp + c[RT_AX_DP]) * cp + c[RT_AX_CP]) * tp + c[RT_AX_TP];
    CHECK(want == r, "dp%d pp%d cp%d tp%d: rank %d -> coords -> %d", dp, pp, cp, tp, r, want);
    CHECK(rt_mesh_rank(&m, c) == r, "rank(coords(%d))", r);
    CHECK(rt_mesh_node(&m, r) == r / dpn && rt_mesh_device(&m, r) == r % dpn, "node/device of %d", r);
    for (unsigned mask = 0; mask < 16; mask++) {
      int mem[64], n = rt_mesh_group(&m, r, mask, mem);
      CHECK(n == rt_mesh_group_size(&m, mask), "group size");
      /* Brute force: every rank that agrees with r on the axes outside mask, in rank order. */
      int k = 0, idx = -1;
      for (int s = 0; s < m.world; s++) {
        int d[RT_AX_COUNT];
        rt_mesh_coords(&m, s, d);
        bool same = true;
        for (int ax = 0; ax < RT_AX_COUNT; ax++)
          if (!(mask & (1u << ax)) && d[ax] != c[ax]) same = false;
        if (!same) continue;
        CHECK(k < n && mem[k] == s, "dp%d pp%d cp%d tp%d rank %d group %s member %d: got %d want %d", dp, pp, cp, tp,
              r, rt_mesh_mask_name(mask), k, k < n ? mem[k] : -1, s);
        if (s == r) idx = k;
        k++;
      }
      CHECK(k == n, "group count");
      CHECK(rt_mesh_group_index(&m, r, mask) == idx, "group index of %d in %s", r, rt_mesh_mask_name(mask));
      int col = rt_mesh_group_color(&m, r, mask);
      CHECK(col >= 0 && col < m.world / n, "colour range");
      CHECK(rt_mesh_group_color(&m, mem[n - 1], mask) == col, "colour shared");
    }
    /* ZeRO's shards over dp x cp (passes/zero.c): a dim split over dp and then cp (Sharding.inner,
     * rt_sharded_index) puts rank r's block where the dp*cp group's collectives put member
     * rt_mesh_group_index(r, dp|cp)'s chunk: block dp_i x cp + cp_i */
    int gi = rt_mesh_group_index(&m, r, RT_MESH_DP | RT_MESH_CP);
    CHECK(gi == c[RT_AX_DP] * cp + c[RT_AX_CP], "dp*cp index of %d: %d", r, gi);
    for (int64_t l = 0; l < 3; l++)
      CHECK(rt_sharded_index(3, 0, dp, c[RT_AX_DP], cp, c[RT_AX_CP], l) == gi * 3 + l,
            "dp%d cp%d rank %d: the S(dp)>S(cp) block is not the dp*cp group's chunk %d", dp, cp, r, gi);
  }
}

/* A module with a topology and a plan written in a registered source, for diagnostics. */
static const char *src = "topology t { nodes 4 }\nparallel { tp 16 }\n";

static Module *module(Arena *a, int nodes, int dpn, int dp, int pp, int cp, int tp) {
  Module *m = ARENA_NEW(a, Module);
  m->arena = a;
  m->name = "t";
  m->has_topology = m->has_plan = true;
  m->topo.name = "t";
  m->topo.nodes = nodes;
  m->topo.devices_per_node = dpn;
  m->topo.device = "h100_80g";
  m->topo.intra = (Link){.kind = LINK_NVLINK, .count = 1, .bytes_per_s = 900e9};
  m->topo.inter = (Link){.kind = LINK_EFA, .count = 32, .bytes_per_s = 12.5e9};
  ir_plan_defaults(&m->plan);
  ir_recipe_defaults(&m->recipe);
  m->plan.dp = dp;
  m->plan.pp = pp;
  m->plan.cp = cp;
  m->plan.tp = tp;
  m->plan.loc = (SrcLoc){.file = "plan.model", .line = 2, .col = 12};
  return m;
}

/* Runs the pass with diagnostics captured; returns the pass result, the text in out. */
static bool run_pass(Module *m, int world, char *out, size_t cap) {
  FILE *f = fmemopen(out, cap, "w");
  Diag d;
  diag_init(&d, f, 0);
  Diag *outer = diag_enter(&d);
  diag_add_source("plan.model", src);
  bool ok = ir_mesh_resolve(m, world);
  diag_leave(outer);
  diag_free(&d);
  fclose(f);
  return ok;
}

static void check_pass(void) {
  Arena a;
  arena_init(&a);
  char out[8192];

  /* 4 nodes x 8: tp 8, pp 2, dp auto -> dp 2. */
  Module *m = module(&a, 4, 8, 0, 2, 1, 8);
  CHECK(run_pass(m, 0, out, sizeof out), "tp8 pp2 dp auto: %s", out);
  CHECK(m->mesh && m->mesh->dim[RT_AX_DP] == 2 && m->mesh->world == 32 && m->mesh->nodes == 4, "dp auto resolved to %d",
        m->mesh ? m->mesh->dim[RT_AX_DP] : 0);
  CHECK(m->plan.dp == 0, "the plan stays as written (dp auto)");
  CHECK(m->batch.micro == 1 && m->batch.global == 2, "batch: micro %lld, global %lld", (long long)m->batch.micro,
        (long long)m->batch.global);

  /* tp 16 on nodes of 8: refused at the plan's location, with the reason and an alternative. */
  m = module(&a, 4, 8, 0, 1, 1, 16);
  CHECK(!run_pass(m, 0, out, sizeof out), "tp 16 accepted");
  CHECK(strstr(out, "plan.model:2:12: error: tp 16 does not fit in a node of 8 devices") != NULL, "message: %s", out);
  CHECK(strstr(out, "nvlink") && strstr(out, "efa"), "names the links: %s", out);
  CHECK(strstr(out, "use tp 8 with pp 2") != NULL, "alternative: %s", out);
  CHECK(strstr(out, "parallel { tp 16 }") != NULL, "quotes the line: %s", out);
  CHECK(m->mesh == NULL, "no mesh on error");

  /* ... unless allowed. */
  m = module(&a, 4, 8, 0, 1, 1, 16);
  m->plan.allow_cross_node_tp = true;
  CHECK(run_pass(m, 0, out, sizeof out), "allow_cross_node_tp: %s", out);
  CHECK(m->mesh && m->mesh->dim[RT_AX_DP] == 2, "dp with cross-node tp");

  /* tp 4 on nodes of 6 straddles too (ranks 4..7). */
  m = module(&a, 2, 6, 0, 1, 1, 4);
  CHECK(!run_pass(m, 0, out, sizeof out) && strstr(out, "use tp 2"), "tp 4 on 6: %s", out);

  /* Degrees that do not divide the world. */
  m = module(&a, 1, 8, 0, 3, 1, 1);
  CHECK(!run_pass(m, 0, out, sizeof out) && strstr(out, "does not divide the topology of 8 ranks"), "pp 3: %s", out);
  m = module(&a, 1, 8, 2, 1, 1, 2);
  CHECK(!run_pass(m, 0, out, sizeof out) && strstr(out, "= 4 ranks but the topology has 8") &&
            strstr(out, "dp auto` (dp 4)"),
        "dp 2: %s", out);
  /* An explicit world (e.g. the launched one) overrides the topology's. */
  m = module(&a, 1, 8, 0, 1, 1, 2);
  CHECK(run_pass(m, 4, out, sizeof out) && m->mesh->dim[RT_AX_DP] == 2, "world 4: %s", out);

  /* The printout: small world in full. */
  m = module(&a, 1, 4, 0, 1, 1, 2);
  CHECK(run_pass(m, 0, out, sizeof out), "2x2");
  FILE *f = fmemopen(out, sizeof out, "w");
  ir_print_mesh(f, m);
  fclose(f);
  CHECK(strstr(out, "# mesh: dp 2 x pp 1 x cp 1 x tp 2 = 4 ranks on 1 node x 4 h100_80g") != NULL, "header: %s", out);
  CHECK(strstr(out, "# tp     2 groups of 2 ranks, each inside one node") != NULL, "tp summary: %s", out);
  /* rank 3: node 0, device 3, dp 1, tp 1, tp group [2,3], dp group [1,3]. */
  CHECK(strstr(out, "      3     0    3    1    0    0    1 [2,3]        [1,3]\n") != NULL, "rank 3 row:\n%s", out);

  /* Big world: compact. 32 nodes x 8, tp 8, pp 4, cp 2 -> dp 4. */
  m = module(&a, 32, 8, 0, 4, 2, 8);
  CHECK(run_pass(m, 0, out, sizeof out), "superpod");
  f = fmemopen(out, sizeof out, "w");
  ir_print_mesh(f, m);
  fclose(f);
  int lines = 0;
  for (const char *p = out; *p; p++) lines += *p == '\n';
  CHECK(lines < 40, "compact print has %d lines", lines);
  CHECK(strstr(out, "dp*cp  32 groups of 8 ranks, each across nodes") != NULL, "dp*cp summary:\n%s", out);
  CHECK(strstr(out, "[0,8,..,56]/8\n") != NULL, "strided members:\n%s", out);
  if (failures) fputs(out, stderr);
  arena_free(&a);
}

int main(void) {
  static const int dps[] = {1, 2, 3}, pps[] = {1, 2}, cps[] = {1, 2}, tps[] = {1, 2, 4};
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 2; b++)
      for (int c = 0; c < 2; c++)
        for (int d = 0; d < 3; d++) check_mapping(dps[a], pps[b], cps[c], tps[d], 4);
  MeshMap m;
  CHECK(!rt_mesh_init(&m, 0, 1, 1, 1, 1), "degree 0 refused");
  rt_mesh_init(&m, 2, 1, 1, 8, 4);
  CHECK(!rt_mesh_group_in_node(&m, RT_MESH_TP), "tp 8 on 4-device nodes straddles");
  rt_mesh_init(&m, 2, 2, 1, 4, 8);
  CHECK(rt_mesh_group_in_node(&m, RT_MESH_TP) && !rt_mesh_group_in_node(&m, RT_MESH_PP), "in-node");
  check_pass();
  if (failures) {
    fprintf(stderr, "test_mesh: %d failures\n", failures);
    return 1;
  }
  printf("test_mesh: ok\n");
  return 0;
}
