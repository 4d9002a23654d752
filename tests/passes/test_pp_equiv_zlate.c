/* tests/passes/test_pp_equiv_zlate.c — the `zlate` pass (passes/zero_late.c) against the single rank.
 *
 * Under pp, zb and ZeRO-2/3, a non-layer gradient's dp reduce-scatter that ends the first stage's B
 * (the embedding's, one per micro-batch) is issued after that stage's W loop, its reader (the running
 * sum's add) a micro-batch later. A Llama-shaped model (untied embedding: its gradient is the first
 * stage's alone) with `bucket 16KiB`, so that the embedding's 16 KiB gradient is scattered alone (with
 * the default bucket the top level's small gradients are one scatter on every stage, which the pass
 * leaves): pp 2 x dp 2, zb, 2 and 4 micro-batches, zero 2 and 3, and zero 2 with full recompute (zb's W
 * holding B's recomputed values). Each plan: every such scatter issued right after its stage's W loop,
 * none left before it (tb_check_zero_late; the same plan compiled without the pass fails that check),
 * and two AdamW steps in the fp64 interpreter equal to the single rank within 1e-10 (tb_equiv_micro:
 * loss, grad norm, every gradient, parameter and optimizer state, replicas agreeing). The schedules
 * without a W loop (1F1B, GPipe, interleaved) under ZeRO-2/3: the last stage's head gradient adds (passes/pipe_class.c's
 * maker merges: right after the F making it; the final norm's too), each waiting on its scatter, moved past the
 * stage's next instruction (every micro-batch's; without the pass, none), the first stage's embedding's left where
 * they are, equal to the single rank; zb under zero 1: the pass changes nothing (the IR printed with and without it
 * the same).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "print.h"
#include "tb.h"
#include "tb_compile.h"
#include "tb_zero.h"

#define TOL 1e-10

static int failures;

static Module *compile(Arena *a, const FeDefine *defs, int ndefs, const char *sched, int64_t M, const char *skip) {
  TbPp p = {.pp = 2, .dp = 2, .tp = 1, .sched = sched, .micro = 8 / (M * 2), .batch = 8,
            .v = strcmp(sched, "interleaved") == 0 ? 2 : 0, .import_dir = SHARDC_MODELS_DIR, .skip = skip};
  return tb_compile_pp(a, TARGET_CPU, SHARDC_MODELS_DIR "/llama3-8b.model", defs, ndefs, &p);
}

/* The top level's non-layer gradient dp reduce-scatters on stage `stage` whose first reader is an add: *late of them
 * with a loop of that stage between the two (waited on after the stage's next instruction), *at with none. */
static void scatter_waits(const Graph *g, int stage, int *at, int *late) {
  *at = *late = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *s = g->nodes[i];
    if (s->op != OP_REDUCE_SCATTER || s->a.mesh_axis != RT_AX_DP || s->stage != stage || s->stageset) continue;
    int rd = i + 1;
    bool loop = false;
    for (bool found = false; rd < g->nnodes && !found; rd += !found) {
      const Node *x = g->nodes[rd];
      for (int j = 0; j < x->nin; j++) found |= x->in[j]->def == s;
      loop |= !found && x->op == OP_REPEAT && x->stage == stage;
    }
    if (rd >= g->nnodes || g->nodes[rd]->op != OP_ADD) continue;
    if (loop) (*late)++;
    else (*at)++;
  }
}

/* g printed (the caller frees it) */
static char *printed(const Graph *g) {
  char *s = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&s, &n);
  ir_print_graph(f, g);
  fclose(f);
  return s;
}

int main(void) {
  FeDefine d[16] = {{"vocab", "128"}, {"seq", "8"},    {"d", "32"},  {"heads", "4"}, {"precision", "f32"},
                    {"kv_heads", "2"}, {"layers", "4"}, {"ffn", "48"}, {"bucket", "16KiB"}, {"sp", "off"}};
  int nd = 10;
  const char *label = "Llama shaped (untied), bucket 16KiB";
  Arena ra;
  arena_init(&ra);
  Module *ref = tb_compile_ref(&ra, TARGET_CPU, SHARDC_MODELS_DIR "/llama3-8b.model", d, nd, 8, label);
  if (!ref) return 1;
  Tensor tok = tb_randint(tb_shape(2, 8, 8), 101, 0, 128), tgt = tb_randint(tb_shape(2, 8, 8), 102, 0, 128);
  /* want: the scatters moved. zb's equal-time lists at pp 2 x 4 run stage 0 as F0 F1 B0 W0 B1 F2 W1 F3 B2
   * W2 B3 W3: B1 is followed by F2, not its W, and B1's scatter stays (it drains during F2) */
  static const struct {
    const char *zero, *rc;
    int64_t M;
    int want;
  } plans[] = {{"2", "none", 2, 2}, {"2", "none", 4, 3}, {"3", "none", 2, 2}, {"3", "none", 4, 3}, {"2", "full", 4, 3}};
  for (int p = 0; p < (int)(sizeof plans / sizeof plans[0]); p++) {
    d[nd] = (FeDefine){"zero", plans[p].zero};
    d[nd + 1] = (FeDefine){"recompute", plans[p].rc};
    char what[128];
    snprintf(what, sizeof what, "pp 2 x dp 2, zb, zero %s, recompute %s, %lld micro-batches", plans[p].zero, plans[p].rc,
             (long long)plans[p].M);
    Arena pa;
    arena_init(&pa);
    Module *pm = compile(&pa, d, nd + 2, "zb", plans[p].M, NULL);
    if (!pm) {
      fprintf(stderr, "FAIL %s %s: does not compile\n", label, what);
      failures++;
    } else {
      failures += tb_check_zero_late(pm, plans[p].want, what);
      failures += tb_check_zb_reads(pm, what); /* W takes only what it reads (passes/pipe_split.c, zero_defer.c) */
      failures += tb_equiv_micro(ref, pm, &tok, &tgt, plans[p].M, label, what, TOL, true);
    }
    if (p == 0) { /* the check fails the plan compiled without the pass */
      Module *off = compile(&pa, d, nd + 2, "zb", plans[p].M, "zlate");
      fprintf(stderr, "  without the pass (expected to fail the check):\n");
      if (!off || tb_check_zero_late(off, plans[p].want, what) == 0) {
        fprintf(stderr, "FAIL %s %s: without zlate the placement check %s\n", label, what, off ? "passes" : "does not compile");
        failures++;
      }
    }
    arena_free(&pa);
  }
  /* no W loop (1F1B, GPipe, interleaved): the adds' waits moved on (and equal to one rank); zero 1: the same IR
   * with and without the pass */
  static const struct {
    const char *sched, *zero;
  } same[] = {{"1f1b", "2"}, {"gpipe", "3"}, {"interleaved", "2"}, {"zb", "1"}};
  d[nd + 1] = (FeDefine){"recompute", "none"};
  for (int p = 0; p < (int)(sizeof same / sizeof same[0]); p++) {
    d[nd] = (FeDefine){"zero", same[p].zero};
    Arena pa;
    arena_init(&pa);
    Module *on = compile(&pa, d, nd + 2, same[p].sched, 2, NULL), *off = compile(&pa, d, nd + 2, same[p].sched, 2, "zlate");
    if (!on || !off) {
      fprintf(stderr, "FAIL %s, zero %s: does not compile\n", same[p].sched, same[p].zero);
      failures++;
      arena_free(&pa);
      continue;
    }
    if (same[p].zero[0] == '1') {
      char *a = printed(on->graph), *b = printed(off->graph);
      bool ok = strcmp(a, b) == 0;
      fprintf(stderr, "  %s, zero %s: the IR %s without zlate\n", same[p].sched, same[p].zero, ok ? "the same as" : "DIFFERS from");
      if (!ok) failures++;
      free(a);
      free(b);
    } else {
      int at, late, at0, late0, f_at, f_late, f_at0, f_late0; /* the last stage's (the head's), the first's */
      scatter_waits(on->graph, 2, &at, &late);
      scatter_waits(off->graph, 2, &at0, &late0);
      scatter_waits(on->graph, 1, &f_at, &f_late);
      scatter_waits(off->graph, 1, &f_at0, &f_late0);
      bool ok = at == 0 && late > 0 && at0 == late && late0 == 0 && f_at == f_at0 && f_late == f_late0 && f_at > 0;
      fprintf(stderr, "  %s%s, zero %s: the last stage's %d scatters waited on after its next instruction, %d in the one making "
              "them (without zlate: %d, %d); the first stage's %d, %d (the same)\n", ok ? "" : "FAIL ", same[p].sched,
              same[p].zero, late, at, late0, at0, f_late, f_at);
      if (!ok) failures++;
      char what[64];
      snprintf(what, sizeof what, "pp 2 x dp 2, %s, zero %s, 2 micro-batches", same[p].sched, same[p].zero);
      failures += tb_equiv_micro(ref, on, &tok, &tgt, 2, label, what, TOL, true);
    }
    arena_free(&pa);
  }
  tensor_free(&tok);
  tensor_free(&tgt);
  arena_free(&ra);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  fprintf(stderr, "zlate: the embedding's scatter after W, the head's add a micro-batch later, equal to the single rank\n");
  return 0;
}
