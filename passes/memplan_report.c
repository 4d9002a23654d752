/* passes/memplan_report.c — what passes/memplan.c planned, for people: the memory by class
 * (`shardc plan`), the capacity it must fit, the host memory of an offloaded optimizer step. */
#include <stdio.h>

#include "fit.h"
#include "fmt.h" /* rt_fmt_bytes: the runtime's, one format for both */
#include "memplan.h"

const char *const memplan_class_labels[MEM_COUNT] = {"parameters", "optimizer state", "inputs", "gradients",
                                                     "activations", "workspace", "communication"};

static bool raw_bytes; /* memplan_print's bytes, for its rows */

/* The size column: "     6.97 MiB", or with bytes "   7307712 B         6.97 MiB". */
static void size_col(FILE *f, double b) {
  char s[32];
  rt_fmt_bytes(s, sizeof s, b);
  if (raw_bytes)
    fprintf(f, "%16.0f B %12.2f MiB", b, b / (1 << 20));
  else
    fprintf(f, "%13s", s);
}

static void row(FILE *f, const char *name, int64_t b, const char *what) {
  fprintf(f, "#   %-16s ", name);
  size_col(f, (double)b);
  fprintf(f, "%s%s\n", what ? "  " : "", what ? what : "");
}

void memplan_print(FILE *f, const Module *m, bool bytes) {
  raw_bytes = bytes;
  const MemPlan *p = m->memplan;
  /* the report's order: what the model holds, then what the step makes */
  static const MemClass order[] = {MEM_PARAM, MEM_GRAD, MEM_OPTIM, MEM_ACT, MEM_INPUT, MEM_WORKSPACE, MEM_COMM};
  fprintf(f, "# memory per rank (bytes live at the peak of the step, by class)\n");
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    MemClass c = order[i];
    const char *what = NULL;
    if (c == MEM_WORKSPACE && !p->by_class[c]) what = "kernel scratch is not planned: the trainer adds it at start";
    char buf[128];
    if (c == MEM_COMM && !p->by_class[c]) {
      if (p->largest[c]) {
        snprintf(buf, sizeof buf,
                 "collectives' packing buffers: none live at the peak (the largest, %.2f MiB, is planned where it runs)",
                 (double)p->largest[c] / (1 << 20));
        what = buf;
      } else {
        what = "collectives run in place on planned buffers";
      }
    }
    row(f, memplan_class_labels[c], p->by_class[c], what);
  }
  row(f, "peak", p->peak, NULL);
  row(f, "total", p->total, "the rank's one allocation (peak + fragmentation)");
  char what[96];
  double cap = memplan_capacity(m, what, sizeof what);
  if (cap > 0) {
    fprintf(f, "#   %-16s ", "capacity");
    size_col(f, cap);
    fprintf(f, "  %s: %s (%s of it)\n", what, (double)p->total <= cap ? "fits" : "does not fit",
            fit_share((char[16]){0}, 16, (double)p->total, cap));
  }
  char why[1024];
  if (m->wcopy.why) { /* passes/wshadow.c's decision */
    snprintf(why, sizeof why, "%s: %s",
             m->wcopy.persistent ? "persistent copies (in params), written by the update: one cast a step"
             : p->host_params > 0 /* ZeRO-3's split casts made the host's copies (passes/zero_offload.c) */
                 ? "kept split over dp (in params), written by the host's update (offload); whole, they would hold this"
                 : "cast where read (per layer in the loops); kept, they would hold this",
             m->wcopy.why);
    row(f, "bf16 weights", m->wcopy.bytes, why);
  }
  if (m->wcopy.master_saved > 0) /* passes/zero_master.c */
    row(f, "f32 masters", m->wcopy.master_saved,
        "saved: the f32 master weights stored split over the ZeRO group, the bf16 copies gathered (in parameters: 4 B x "
        "P / group)");
  if (m->zbw.why && m->zbw.held && m->zbw.layers > 0) { /* hold(N): passes/recompute_split.c */
    snprintf(why, sizeof why,
             "a micro-batch's (in activations), held for the last %d layer%s of each stage's loop: there W takes the "
             "weight-gradient GEMMs' inputs B's recompute made, held from B to W; for the stage's other layers W "
             "recomputes them from the forward's saved values: %s",
             m->zbw.layers, m->zbw.layers > 1 ? "s" : "", m->zbw.why);
    row(f, "zb W inputs", m->zbw.bytes, why);
  } else if (m->zbw.why) { /* passes/recompute.c's decision under zb (from_b) */
    snprintf(why, sizeof why, "%s: %s",
             m->zbw.held ? "a micro-batch's (in activations): W takes the weight-gradient GEMMs' inputs B's recompute "
                           "made, held from B to W, and runs no forward again"
                         : "none held: W recomputes its weight-gradient GEMMs' inputs from the forward's saved values "
                           "(the forward's GEMMs and attention again)",
             m->zbw.why);
    row(f, "zb W inputs", m->zbw.bytes, why);
  }
  if (m->defer.why) { /* passes/zero_defer.c's decision */
    snprintf(why, sizeof why, "%s: %s",
             m->defer.taken ? "the backward loops' reduce-scatters waited in the next iteration, their f32 inputs held "
                              "through the body"
                            : "the backward loops' reduce-scatters waited in their own iteration",
             m->defer.why);
    row(f, "deferred waits", m->defer.bytes, why);
  }
  if (p->host_total > 0) { /* plan offload */
    fprintf(f, "# host memory per rank (offload: the optimizer step on the CPU, pinned)\n");
    if (p->host_params > 0) row(f, "parameters", p->host_params, "the f32 master weights of this rank's shard (the device: their bf16 copies)");
    row(f, "optimizer state", p->host_state - p->host_params, "the moments of this rank's shard");
    row(f, "update copies", p->host_total - p->host_state,
        p->host_params > 0 ? "the shards of gradients (and of parameters kept on the device), the bf16 casts uploaded, "
                             "the step's hyper-parameters"
                           : "the shards of parameters and gradients, and the step's hyper-parameters");
    row(f, "host total", p->host_total, NULL);
    int64_t d2h = 0, h2d = 0; /* the step's copies (a stacked gradient's rows: all of them) */
    for (int i = 0; i < m->graph->nnodes; i++) {
      const Node *n = m->graph->nodes[i];
      if (n->op == OP_TO_HOST) d2h += ir_numel(&n->out[0]->shape) * ir_dtype_size(n->out[0]->dtype);
      if (n->op == OP_TO_DEVICE) h2d += ir_numel(&n->out[0]->shape) * ir_dtype_size(n->out[0]->dtype);
    }
    row(f, "copies D2H", d2h, "per step: the gradients' shards (and parameters kept on the device), hyper-parameters");
    row(f, "copies H2D", h2d, p->host_params > 0 ? "per step: the updated shards, cast to bf16 on the host"
                                                  : "per step: the updated parameters' shards");
  }
}

double memplan_capacity(const Module *m, char *what, size_t cap) {
  const Topology *t = &m->topo;
  if (!m->has_topology || t->device_memory <= 0) return 0;
  const char *dev = t->device ? t->device : "device";
  if (m->target == TARGET_CPU && !t->cpu_only && t->host_memory > 0 && t->devices_per_node > 0) {
    /* the CPU target's ranks are host processes: the node's host memory, shared by its ranks */
    snprintf(what, cap, "host memory per rank (%s node / %d; the CPU target runs on the host)", t->name ? t->name : "",
             t->devices_per_node);
    return t->host_memory / t->devices_per_node;
  }
  snprintf(what, cap, "%s memory", dev);
  return t->device_memory;
}

MemClass memplan_largest_class(const MemPlan *p) {
  int best = 0;
  for (int i = 1; i < MEM_COUNT; i++)
    if (p->by_class[i] > p->by_class[best]) best = i;
  return (MemClass)best;
}
