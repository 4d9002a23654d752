/* tests/passes/test_pp_equiv_cut.c — `zb_w hold(N)`'s cut loops keep their deferred scatter waits across the cut.
 *
 * passes/recompute_split.c cuts each stage's zb F/B/W loops at row C - N into two loops, the first continuing in the
 * second (Node.cont). Under ZeRO-2 over dp the backward loops' reduce-scatters are waited in the next iteration
 * (passes/zero_defer.c); the first loop's last iteration's are waited in the second loop's first iteration, as one
 * loop's would be (memplan_defer.c: Node.defer_last, the two scatters' inputs held in one place from one loop through
 * the other; codegen/emit.c, passes/cost.c). Tiny 8 layers (4 a stage), full recompute, pp 2 x dp 2, zb, zero 2, 4
 * micro-batches, hold(1), hold(2) and hold(3) (the first loop of 1, 2, 3 rows): every deferred scatter of a cut
 * loop waited in its cont's body (check_cut; the plan compiled without zdefer fails it), the deferred scatters' results
 * unpacked once over both loops' rows (check_unpack: the step's column slices and adds as many as without the cut,
 * zb_w recompute's, 96 and 100; before zero_defer.c's defer_pair each half was unpacked on its own: 192 and 172),
 * and two AdamW steps in the fp64 interpreter equal to the single rank within 1e-10 (tb_equiv_micro).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memplan.h"
#include "tb.h"
#include "tb_compile.h"

#define TOL 1e-10

static int failures;

/* Every deferred scatter (Node.defer_wait) of a cut loop's body (Node.cont) waited in its cont's first iteration: its
 * defer_last a node of the cont's body, before which the cont's own scatter's input (the same bytes) is made. */
static int check_cut(const Module *m, const char *what) {
  const Graph *g = m->graph;
  int cut = 0, carried = 0, left = 0, bad = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->op != OP_REPEAT || !n->cont) continue;
    cut++;
    for (int j = 0; j < n->body->nnodes; j++) {
      const Node *s = n->body->nodes[j];
      if (!s->defer_wait) continue;
      if (!s->defer_last) {
        left++;
        continue;
      }
      carried++;
      const Node *s2 = memplan_defer_next(s);
      if (s->defer_last->graph != n->cont->body || !s2 || s2->in[0]->offset != s->in[0]->offset) bad++;
    }
  }
  bool ok = cut > 0 && carried > 0 && !left && !bad;
  fprintf(stderr, "  %s: %d cut loops, %d deferred scatters waited in the next loop's first iteration, %d after their "
          "loop, %d misplaced%s\n", what, cut, carried, left, bad, ok ? "" : " (FAIL: want > 0, > 0, 0, 0)");
  return ok ? 0 : 1;
}

/* The step's top-level column slices (a packed scatter result's unpacking: a slice along a later dim) and adds (the
 * running gradient sums') of m. */
static void count_unpack(const Module *m, int *slices, int *adds) {
  *slices = *adds = 0;
  for (int i = 0; i < m->graph->nnodes; i++) {
    const Node *n = m->graph->nodes[i];
    *slices += n->op == OP_SLICE && n->a.axis > 0;
    *adds += n->op == OP_ADD;
  }
}

/* A cut plan's unpacking costs what the uncut plan's does (none: the plan compiled with zb_w recompute). */
static int check_unpack(const Module *m, const Module *none, const char *what) {
  int s, a, s0, a0;
  count_unpack(m, &s, &a);
  count_unpack(none, &s0, &a0);
  bool ok = s == s0 && a == a0 && s0 > 0 && a0 > 0;
  fprintf(stderr, "  %s: %d column slices and %d adds at the top level, %d and %d without the cut%s\n", what, s, a,
          s0, a0, ok ? "" : " (FAIL: want as many)");
  return ok ? 0 : 1;
}

int main(void) {
  FeDefine d[16] = {{"seq", "8"}, {"d", "32"}, {"heads", "4"}, {"layers", "8"}, {"recompute", "full"}};
  int nd = 5;
  const char *label = "tiny 8 layers, recompute full";
  Arena ra;
  arena_init(&ra);
  Module *ref = tb_compile_ref(&ra, TARGET_CPU, SHARDC_MODELS_DIR "/tiny.model", d, nd, 8, label);
  if (!ref) return 1;
  Tensor tok = tb_randint(tb_shape(2, 8, 8), 101, 0, 256), tgt = tb_randint(tb_shape(2, 8, 8), 102, 0, 256);
  static const char *const hold[] = {"hold:1", "hold:2", "hold:3"};
  d[nd] = (FeDefine){"zero", "2"};
  d[nd + 1] = (FeDefine){"zb_w", "recompute"};
  Arena na;
  arena_init(&na);
  TbPp uncut = {.pp = 2, .dp = 2, .tp = 1, .sched = "zb", .micro = 1, .batch = 8, .import_dir = SHARDC_MODELS_DIR};
  Module *none = tb_compile_pp(&na, TARGET_CPU, SHARDC_MODELS_DIR "/tiny.model", d, nd + 2, &uncut);
  if (!none) {
    fprintf(stderr, "FAIL %s: the plan with zb_w recompute does not compile\n", label);
    return 1;
  }
  for (int p = 0; p < 3; p++) {
    d[nd + 1] = (FeDefine){"zb_w", hold[p]};
    char what[128];
    snprintf(what, sizeof what, "pp 2 x dp 2, zb, zero 2, zb_w %s, 4 micro-batches", hold[p]);
    TbPp pp = {.pp = 2, .dp = 2, .tp = 1, .sched = "zb", .micro = 1, .batch = 8, .import_dir = SHARDC_MODELS_DIR};
    Arena pa;
    arena_init(&pa);
    Module *pm = tb_compile_pp(&pa, TARGET_CPU, SHARDC_MODELS_DIR "/tiny.model", d, nd + 2, &pp);
    if (!pm || !pm->zbw.held || pm->zbw.layers != p + 1) {
      fprintf(stderr, "FAIL %s %s: %s\n", label, what, pm ? "the partial hold missing from the compiled plan" : "does not compile");
      failures++;
    } else {
      failures += check_cut(pm, what);
      failures += check_unpack(pm, none, what);
      failures += tb_check_zb_reads(pm, what); /* the cut W loops take only what they read (passes/pipe_split.c, zero_defer.c) */
      failures += tb_equiv_micro(ref, pm, &tok, &tgt, 4, label, what, TOL, true);
    }
    if (p == 0) { /* the check fails the plan compiled without zdefer (every scatter waited in its own iteration) */
      pp.skip = "zdefer";
      Module *off = tb_compile_pp(&pa, TARGET_CPU, SHARDC_MODELS_DIR "/tiny.model", d, nd + 2, &pp);
      fprintf(stderr, "  without zdefer (expected to fail the check):\n");
      if (!off || check_cut(off, what) == 0) {
        fprintf(stderr, "FAIL %s %s: without zdefer the cut check %s\n", label, what, off ? "passes" : "does not compile");
        failures++;
      }
    }
    arena_free(&pa);
  }
  tensor_free(&tok);
  tensor_free(&tgt);
  arena_free(&na);
  arena_free(&ra);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  fprintf(stderr, "zb_w hold(N): the cut loops' deferred waits carried across the cut, equal to the single rank\n");
  return 0;
}
