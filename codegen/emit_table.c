/* codegen/emit_table.c — the trainer's tensor table: every parameter, state, input and result as
 * an RtTensor initializer (runtime/program.h: name, kind, dtype, shape, offset in M, stacked layers,
 * init, sharding, host, the pipeline stages holding it), as the runtime's initialisation, loaders,
 * checkpoints and data loader read them. Split out of emit.c, which writes the program around it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg.h"
#include "diag.h"

Value *cg_result(const Graph *g, const char *name) {
  for (int i = 0; i < g->nresults; i++)
    if (g->result_names[i] && strcmp(g->result_names[i], name) == 0) return g->results[i];
  return NULL;
}

Value *cg_find_source(const Graph *g, OpKind op, const char *name) {
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->op == op && g->nodes[i]->a.name && strcmp(g->nodes[i]->a.name, name) == 0)
      return g->nodes[i]->out[0];
  return NULL;
}

static bool is_split(const Value *v) {
  for (int d = 0; d < v->shape.rank; d++)
    if (v->sharding.split[d] >= 0) return true;
  return false;
}

/* ", .shard = {1, {split per dim}, {blocks per dim}, {inner axis per dim}}" for a split value; ""
 * when replicated. An inner split (ZeRO's shards over dp x cp) only under a contiguous one: the
 * runtime's layouts and checkpoints read no other (runtime/program.h). */
static const char *shard_init(Cg *c, const Value *v) {
  if (!is_split(v)) return "";
  char sp[128] = "", bl[128] = "", in[128] = "";
  for (int d = 0, ns = 0, nb = 0, ni = 0; d < v->shape.rank; d++) {
    int8_t a = v->sharding.split[d], ia = v->sharding.inner[d];
    if (ia >= 0 && (a < 0 || v->sharding.blocks[d] > 1))
      die("emit: table tensor `%s` with an inner split under %s", v->name ? v->name : "?",
          a < 0 ? "no outer split" : "a split in blocks");
    ns += snprintf(sp + ns, sizeof sp - (size_t)ns, "%s%s", d ? ", " : "", a >= 0 ? cg_axis_lit(a) : "-1");
    nb += snprintf(bl + nb, sizeof bl - (size_t)nb, "%s%d", d ? ", " : "", v->sharding.blocks[d]);
    ni += snprintf(in + ni, sizeof in - (size_t)ni, "%s%s", d ? ", " : "", ia >= 0 && a >= 0 ? cg_axis_lit(ia) : "-1");
  }
  return arena_printf(c->a, ", .shard = {1, {%s}, {%s}, {%s}}", sp, bl, in);
}

/* The pipeline stages holding a table tensor, when not every one does (passes/pipe_owners.c): a
 * parameter's or state's, and a parameter's gradient's (a bit per stage); 0: every stage. */
static uint64_t held_on(const Cg *c, const Value *v, const char *name) {
  if (v->def->op == OP_PARAM || v->def->op == OP_STATE) return ir_node_stages(v->def);
  const Value *p = name && !strncmp(name, "grad:", 5) ? cg_find_source(c->m->graph, OP_PARAM, name + 5) : NULL;
  return p ? ir_node_stages(p->def) : 0;
}

/* One RtTensor initializer, then `end` (",\n" in the table). */
/* copy_of: a persistent bf16 copy's parameter's index in the table (RT_T_COPY), else -1; st: the pipeline
 * stages holding it (held_on; the logits: the stage computing them), 0: every stage */
static void emit_tensor_end(Cg *c, const Value *v, const char *name, const char *kind, const Node *src, bool stacked,
                            int copy_of, uint64_t st, const char *end) {
  fprintf(c->f, "  {%s, %s, %d, %d, {", cg_cstr(c, name), kind, (int)v->dtype, v->shape.rank);
  for (int i = 0; i < v->shape.rank; i++) fprintf(c->f, "%s%" PRId64, i ? ", " : "", v->shape.dim[i]);
  fprintf(c->f, "}, %" PRId64 ", %d, %d, %.17g, %.17g%s%s%s%s}%s", v->offset, stacked, src ? (int)src->a.init : 0,
          src ? src->a.init_a : 0.0, src ? src->a.init_b : 0.0, shard_init(c, v), v->host ? ", .host = 1" : "",
          st ? arena_printf(c->a, ", .stages = 0x%llxull", (unsigned long long)st) : "",
          copy_of >= 0 ? arena_printf(c->a, ", .copy_of = %d", copy_of) : "", end);
}

static void emit_tensor(Cg *c, const Value *v, const char *name, const char *kind, const Node *src, bool stacked) {
  emit_tensor_end(c, v, name, kind, src, stacked, -1, held_on(c, v, name), ",\n");
}

/* A PARAM is stacked when it feeds a REPEAT as one of its xs. */
/* Also through a CAST (mixed precision: the repeat reads the parameter's bf16 copy) or a SLICE of
 * its rows (an interleaved pipeline's chunk), and from inside a region: under gradient accumulation
 * the layers' repeat is in the body of the `accum` repeat (passes/accum.c). The checkpoint's names
 * ("blocks.3.w") are the model's whatever the plan: a 1-rank trainer that accumulates and a 2-rank one
 * that does not must write, and read, the same tensors. */
static bool is_stacked(const Graph *g, const Value *v) {
  /* a parameter with a persistent bf16 copy (passes/wshadow.c): the loops read the copy */
  if (v->def->op == OP_PARAM && v->def->graph == g && !g->parent) {
    const Value *cp = cg_find_source(g, OP_STATE, arena_printf(g->arena, "bf16:%s", v->def->a.name));
    if (cp && is_stacked(g, cp)) return true;
  }
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->body && is_stacked(n->body, v)) return true;
    if (n->op == OP_CAST && n->in[0] == v && is_stacked(g, n->out[0])) return true;
    /* an interleaved pipeline's layer loops read chunks of the stacked rows (passes/pipe.c) */
    if (n->op == OP_SLICE && n->a.axis == 0 && n->in[0] == v && is_stacked(g, n->out[0])) return true;
    if (n->op != OP_REPEAT) continue;
    for (int k = n->a.ncarry; k < n->a.ncarry + n->a.nxs; k++)
      if (n->in[k] == v) return true;
  }
  return false;
}

/* How the trainer sees an input. Under gradient accumulation (passes/accum.c) the micro-step's
 * inputs are [accum, B, ...], the xs of the top-level `accum` region; the trainer reads them as
 * [accum * B, ...] rows (the buffer is the same), this rank's rows of the global batch, so dim 0
 * keeps the sharding of the micro-batch dim. Every row is used once per optimizer step whatever
 * micro-step it falls in, so the step's mean gradient is the big batch's. */
Value cg_trainer_view(const Graph *g, const Value *v) {
  Value w = *v;
  bool xs = false;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    /* pipelined (passes/pipe.c): the micro-batches' slices of the stacked input */
    if (n->op == OP_SLICE && n->in[0] == v && n->a.axis == 0 && n->a.len == 1 && v->def->op == OP_INPUT &&
        v->shape.rank >= 3)
      xs = true;
    if (n->op != OP_REPEAT || !n->a.name || strcmp(n->a.name, "accum") != 0) continue;
    for (int k = n->a.ncarry; k < n->a.ncarry + n->a.nxs; k++) { /* (passes/peel.c: its rows 0 .. k-2) */
      const Node *d = n->in[k]->def;
      xs |= n->in[k] == v || (d->op == OP_SLICE && d->a.axis == 0 && d->in[0] == v);
    }
  }
  if (!xs || v->shape.rank < 2) return w;
  w.shape.dim[0] = v->shape.dim[0] * v->shape.dim[1];
  w.shape.sym[0] = v->shape.sym[1];
  for (int d = 1; d + 1 < v->shape.rank; d++) {
    w.shape.dim[d] = v->shape.dim[d + 1];
    w.shape.sym[d] = v->shape.sym[d + 1];
  }
  w.shape.rank--;
  if (v->sharding.split[0] >= 0) die("emit: an accumulated input split along its micro-step dim");
  w.sharding = ir_sharding_shift(v->sharding, -1);
  return w;
}


/* The trainer's tensor table (`tensors[]`: parameters, states, inputs as the trainer sees them,
 * results) and, when logits is given, `logits_tensor`. Returns the table's length. */
int cg_emit_tensor_table(Cg *c, const Value *logits) {
  FILE *f = c->f;
  const Graph *g = c->m->graph;
  fprintf(f, "static const RtTensor tensors[] = {\n");
  int ntensors = 0;
  const char **params = ARENA_ARRAY(c->a, const char *, g->nnodes + 1); /* by table index: a parameter's name */
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->op == OP_PARAM) params[ntensors] = n->a.name;
    if (n->op == OP_PARAM) emit_tensor(c, n->out[0], n->a.name, "RT_T_PARAM", n, is_stacked(g, n->out[0]));
    else if (n->op == OP_STATE && ir_copy_source(n->a.name)) { /* a persistent bf16 copy: derived, not saved */
      int of = -1;
      for (int k = 0; k < ntensors; k++)
        if (params[k] && strcmp(params[k], ir_copy_source(n->a.name)) == 0) of = k;
      if (of < 0) die("emit: the copy %s before its parameter in the table", n->a.name);
      emit_tensor_end(c, n->out[0], n->a.name, "RT_T_COPY", NULL, false, of, held_on(c, n->out[0], n->a.name), ",\n");
    }
    else if (n->op == OP_STATE) emit_tensor(c, n->out[0], n->a.name, "RT_T_STATE", NULL, false);
    else if (n->op == OP_INPUT) {
      Value w = cg_trainer_view(g, n->out[0]);
      emit_tensor(c, &w, n->a.name, "RT_T_INPUT", NULL, false);
    }
    else continue;
    ntensors++;
  }
  for (int r = 0; r < g->nresults; r++) {
    const char *nm = g->result_names[r];
    if (!nm || strncmp(nm, "next:", 5) == 0) continue;
    Value *v = g->results[r];
    if (c->m->target == TARGET_CUDA) v = (Value *)ir_unfold_cast(v); /* a folded cast: its bf16 source's bytes */
    bool stacked = false;
    if (strncmp(nm, "grad:", 5) == 0) {
      Value *p = cg_find_source(g, OP_PARAM, nm + 5);
      stacked = p && is_stacked(g, p);
    }
    emit_tensor(c, v, nm, "RT_T_RESULT", NULL, stacked);
    ntensors++;
  }
  fprintf(f, "};\n\n");
  if (logits) {
    /* (a pipeline's: on the stage computing them, gathered over pp from it too) */
    fprintf(f, "/* the logits the logits() entry leaves, with their sharding (sampling gathers them) */\n");
    fprintf(f, "static const RtTensor logits_tensor =\n");
    uint64_t st = logits->def->graph == c->m->graph ? ir_node_stages(logits->def) : 0;
    emit_tensor_end(c, logits, "logits", "RT_T_RESULT", NULL, false, -1, st, ";\n\n");
  }
  return ntensors;
}
