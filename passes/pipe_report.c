/* passes/pipe_report.c — `shardc plan`'s pipeline section: each stage's layers, FLOPs, kept
 * activations and parameters, and the schedule's predicted bubble (from passes/pipe.c's PipePlan). */
#include <stdio.h>

#include "memplan.h"
#include "pipe_sched.h"

static double mib(int64_t b) { return (double)b / (1024.0 * 1024.0); }

void pipe_print(FILE *f, const Module *m) {
  const PipePlan *p = m->pipe;
  if (!p) return;
  fprintf(f, "# pipeline: %d stages over the %lld layers of `repeat %s`, schedule %s", p->pp, (long long)p->layers,
          p->loop ? p->loop : "?", pipe_sched_name(p->kind));
  if (p->v > 1) fprintf(f, " (%d chunks per stage)", p->v);
  fprintf(f, ", %d micro-batches per step\n", p->nmb);
  fprintf(f, "#   FLOPs and bytes per rank (its tp share); FLOPs per micro-batch (interleaved: per chunk); activations:\n"
             "#   what a forward keeps for its backward, times the forwards the schedule keeps in flight\n");
  fprintf(f, "#   %-5s %-12s %-15s %12s %12s %13s %9s %15s %11s\n", "stage", "layers", "holds", "fwd FLOP", "bwd FLOP",
          "act/micro", "in flight", "activations", "params");
  for (int s = 0; s < p->pp; s++) {
    const PipeStage *x = &p->stage[s];
    char layers[48] = "", holds[32];
    for (int c = 0, k = 0; c < x->nchunks && k < (int)sizeof layers - 12; c++) {
      int64_t a = x->first_layer + (int64_t)c * p->pp * x->nlayers;
      k += snprintf(layers + k, sizeof layers - (size_t)k, "%s%lld-%lld", c ? "," : "", (long long)a,
                    (long long)(a + x->nlayers - 1));
    }
    snprintf(holds, sizeof holds, "%s%s%s", x->embedding ? "embedding" : "", x->embedding && x->head ? "+" : "",
             x->head ? "head, loss" : x->embedding ? "" : "-");
    fprintf(f, "#   %-5d %-12s %-15s %12.4g %12.4g %9.2f MiB %9d %11.2f MiB %7.2f MiB\n", s, layers, holds, x->fwd_flops,
            x->bwd_flops, mib(x->act_bytes), x->inflight, mib(x->act_bytes * x->inflight), mib(x->param_bytes));
  }
  fprintf(f, "#   bubble: %.1f%% of the step idle (predicted: each stage's forward and backward in proportion to its FLOPs, "
             "transfers free; for equal stages (pp-1)/(vM+pp-1) = %.1f%%)\n",
          100.0 * p->bubble, 100.0 * (p->pp - 1) / (double)(p->v * p->nmb + p->pp - 1));
  fprintf(f, "#   the memory plan below is the worst stage's (values of different stages share bytes); it also holds "
             "what every stage zero-fills for the gradient sums\n");
}
