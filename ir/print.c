/* ir/print.c — text and Graphviz printers and parameter counts (see ir/print.h; FLOPs: ir/flops.c). */
#include "print.h"
#include "commreport.h"
#include "ptrmap.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "plan_options.h"

#define COMMENT_COL 88 /* column where `# file:line:col` starts */

/* ---- a growing line buffer ------------------------------------------------ */

typedef struct {
  char *s;    /* NUL-terminated text */
  size_t len; /* bytes used */
  size_t cap; /* bytes allocated */
} Buf;

static void bprintf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(Buf *b, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->cap - b->len;
    int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, ap);
    va_end(ap);
    if (n < 0) die("print: formatting failed");
    if (b->s && (size_t)n < room) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + (size_t)n + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) die("print: out of memory");
    b->s = s;
    b->cap = cap;
    b->s[b->len] = 0;
  }
}

static void bclear(Buf *b) {
  b->len = 0;
  if (b->s) b->s[0] = 0;
}

/* ---- value numbering ------------------------------------------------------- */

/* Pointer -> number (ir/ptrmap.h); -1 when absent. */
static void num_put(PtrMap *m, const void *k, int v) { ptrmap_put(m, k, v); }

static int num_get(const PtrMap *m, const void *k) {
  intptr_t v;
  return ptrmap_get(m, k, &v) ? (int)v : -1;
}

typedef struct {
  FILE *f;          /* output */
  const Module *m;  /* for symbols; may be NULL */
  PtrMap num;       /* Value* -> print number */
  int next;         /* next print number */
  Buf line;         /* line being built */
} Printer;

static int vnum(Printer *p, const void *v) { /* a Value, or a Node in DOT output */
  int n = num_get(&p->num, v);
  if (n < 0) {
    n = p->next++;
    num_put(&p->num, v, n);
  }
  return n;
}

/* ---- pieces ------------------------------------------------------------------ */

const char *ir_loc_file_name(const char *file) {
  const char *m = strstr(file, "/models/");
  if (m) return m + 8;
  if (strncmp(file, "models/", 7) == 0) return file + 7;
  const char *s = strrchr(file, '/');
  return s ? s + 1 : file;
}

static void put_sharding(Buf *b, const Value *v);

static void put_type(Buf *b, const Module *m, const Value *v) {
  bprintf(b, "%s[", ir_dtype_name(v->dtype));
  for (int d = 0; d < v->shape.rank; d++) {
    int s = v->shape.sym[d];
    if (d) bprintf(b, ", ");
    if (m && s >= 0 && s < m->nsyms && m->syms[s]) bprintf(b, "%s=", m->syms[s]);
    bprintf(b, "%lld", (long long)v->shape.dim[d]);
  }
  bprintf(b, "]");
  put_sharding(b, v);
  if (v->host) bprintf(b, "@host");
}

static void put_sharding(Buf *b, const Value *v) {
  if (ir_sharding_is_replicated(&v->sharding)) return;
  bprintf(b, "{");
  bool first = true;
  for (int d = 0; d < IR_MAX_RANK; d++) {
    int a = v->sharding.split[d];
    if (a < 0 || a >= RT_AX_COUNT) continue;
    if (v->sharding.blocks[d] == RT_BLOCKS_ZIGZAG) bprintf(b, "%sS(%s)@%d/zigzag", first ? "" : ", ", rt_mesh_axis_name(a), d);
    else if (v->sharding.blocks[d] == RT_BLOCKS_STAGES) bprintf(b, "%sS(%s)@%d/stages", first ? "" : ", ", rt_mesh_axis_name(a), d);
    else if (v->sharding.blocks[d] > 1) bprintf(b, "%sS(%s)@%d/%d", first ? "" : ", ", rt_mesh_axis_name(a), d, v->sharding.blocks[d]);
    else bprintf(b, "%sS(%s)@%d", first ? "" : ", ", rt_mesh_axis_name(a), d);
    int in = v->sharding.inner[d];
    if (in >= 0 && in < RT_AX_COUNT) bprintf(b, ">S(%s)", rt_mesh_axis_name(in));
    first = false;
  }
  for (int a = 0; a < RT_AX_COUNT; a++)
    if (v->sharding.partial & (1u << a)) {
      bprintf(b, "%sP(%s)", first ? "" : ", ", rt_mesh_axis_name(a));
      first = false;
    }
  bprintf(b, "}");
}

static const char *axis_name(int a) { return a >= 0 && a < RT_AX_COUNT ? rt_mesh_axis_name(a) : "?"; }

/* " blocks=N" (zigzag: " blocks=zigzag"); nothing for one block. */
static void print_blocks(Buf *b, int blocks) {
  if (blocks == RT_BLOCKS_ZIGZAG) bprintf(b, " blocks=zigzag");
  else if (blocks > 1) bprintf(b, " blocks=%d", blocks);
}

/* One group over several axes (ir.h mesh_with): `with=AXIS` per further axis. */
static void print_with(Buf *b, uint8_t with) {
  for (int x = 0; x < RT_AX_COUNT; x++)
    if (with & (1u << x)) bprintf(b, " with=%s", axis_name(x));
}

static void put_attrs(Buf *b, const Node *n) {
  const Attrs *a = &n->a;
  static const char *const inits[] = {"zeros", "ones", "normal", "uniform", "const"};
  static const char *const reds[] = {"sum", "avg", "max"};
  switch (n->op) {
  case OP_INPUT: case OP_STATE: bprintf(b, "  \"%s\"", a->name ? a->name : "?"); break;
  case OP_PARAM:
    bprintf(b, "  \"%s\" init=%s", a->name ? a->name : "?", inits[a->init]);
    if (a->init == INIT_NORMAL || a->init == INIT_UNIFORM) bprintf(b, "(%g, %g)", a->init_a, a->init_b);
    else if (a->init == INIT_CONST) bprintf(b, "(%g)", a->init_a);
    break;
  case OP_CONST: case OP_SCALE: case OP_ADD_SCALAR: bprintf(b, "  %g", a->scalar); break;
  case OP_IOTA: bprintf(b, "  start=%lld", (long long)a->start); break;
  case OP_AXIS_INDEX: bprintf(b, "  axis=%s", axis_name(a->mesh_axis)); break;
  case OP_SLICE: case OP_PAD:
    bprintf(b, "  axis=%d start=%lld len=%lld", a->axis, (long long)a->start, (long long)a->len);
    break;
  case OP_CONCAT: bprintf(b, "  axis=%d%s", a->axis, a->sumsq_fused ? " sumsq_fused" : ""); break; /* CUDA: fuse_sumsq.c */
  case OP_SUMSQ: if (a->sumsq_fused) bprintf(b, "  sumsq_fused"); break;
  case OP_MATMUL:
    bprintf(b, "  ta=%d tb=%d", a->ta, a->tb);
    if (a->cb) bprintf(b, " cb"); /* the leading dims contracted too (a weight's gradient under cp) */
    if (a->epilogue) bprintf(b, " epilogue=%d", a->epilogue); /* CUDA target (passes/epilogue.c) */
    if (a->hfuse) bprintf(b, " hfuse=%d", a->hfuse);          /* CUDA target (passes/hfuse.c) */
    break;
  case OP_LAYERNORM: case OP_LAYERNORM_BWD: case OP_RMSNORM: case OP_RMSNORM_BWD:
    bprintf(b, "  eps=%g%s", a->eps, a->normres ? " normres" : ""); /* CUDA: passes/fuse_normres.c */
    break;
  case OP_ADD: if (a->normres) bprintf(b, "  normres"); break;
  case OP_ROPE: case OP_ROPE_AT:
    bprintf(b, "  heads=%d theta=%g start=%lld%s", a->heads, a->theta, (long long)a->start, a->inverse ? " inverse" : "");
    break;
  case OP_SDPA: case OP_SDPA_BWD: case OP_ATTN_BLOCK: case OP_ATTN_BLOCK_BWD:
    bprintf(b, "  heads=%d kv_heads=%d causal=%d", a->heads, a->kv_heads, a->causal); break;
  case OP_ATTN_COMBINE: bprintf(b, "  heads=%d", a->heads); break;
  case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_BWD: case OP_CE_LOSS:
    bprintf(b, "  len=%lld%s", (long long)a->len, a->fused_bwd ? " fused_bwd" : ""); /* CUDA: passes/fuse_ce.c */
    break;
  case OP_CE_MAX: case OP_CE_SUMS: case OP_CE_GRAD:
    bprintf(b, "  len=%lld", (long long)a->len);
    if (a->sharded) bprintf(b, " vocab over=%s", axis_name(a->mesh_axis));
    break;
  case OP_EMBED: case OP_EMBED_BWD:
    if (a->sharded) bprintf(b, "  vocab over=%s", axis_name(a->mesh_axis));
    break;
  case OP_SHARD_SLICE:
    bprintf(b, "  over=%s", axis_name(a->mesh_axis));
    print_with(b, a->mesh_with);
    bprintf(b, " axis=%d", a->axis);
    print_blocks(b, a->blocks);
    break;
  case OP_SGD_UPDATE: bprintf(b, "  momentum=%g weight_decay=%g", a->momentum, a->weight_decay); break;
  case OP_ADAMW_UPDATE:
    bprintf(b, "  beta1=%g beta2=%g eps=%g weight_decay=%g", a->beta1, a->beta2, a->eps, a->weight_decay);
    break;
  case OP_ALL_REDUCE:
    bprintf(b, "  over=%s", axis_name(a->mesh_axis));
    print_with(b, a->mesh_with);
    bprintf(b, " reduce=%s", reds[a->reduce]);
    break;
  case OP_REDUCE_SCATTER: case OP_ALL_GATHER:
    bprintf(b, "  over=%s", axis_name(a->mesh_axis));
    print_with(b, a->mesh_with);
    bprintf(b, " axis=%d", a->axis);
    print_blocks(b, a->blocks);
    if (a->skiplast) bprintf(b, " skiplast");
    break;
  case OP_BROADCAST: bprintf(b, "  over=%s root=%lld", axis_name(a->mesh_axis), (long long)a->start); break;
  case OP_ALL_TO_ALL:
    bprintf(b, "  over=%s axis=%d", axis_name(a->mesh_axis), a->axis);
    print_blocks(b, a->blocks);
    bprintf(b, " split=%d", a->split_axis);
    if (a->split_blocks == RT_BLOCKS_ZIGZAG) bprintf(b, " split_blocks=zigzag");
    else if (a->split_blocks > 1) bprintf(b, " split_blocks=%d", a->split_blocks);
    break;
  case OP_SEND: case OP_RECV:
    bprintf(b, "  over=%s offset=%+lld tag=%d", axis_name(a->mesh_axis), (long long)a->start, a->tag);
    break;
  default: break;
  }
}

/* Ends the line with `# note; file:line:col` (either part may be absent). */
static void emit_line_note(Printer *p, const SrcLoc *loc, const char *note) {
  bool has_loc = loc && loc->file, has_note = note && note[0];
  if (has_loc || has_note) {
    size_t col = p->line.len;
    bprintf(&p->line, "%*s# %s%s", col < COMMENT_COL ? (int)(COMMENT_COL - col) : 2, "", has_note ? note : "",
            has_note && has_loc ? "; " : "");
    if (has_loc) bprintf(&p->line, "%s:%d:%d", ir_loc_file_name(loc->file), loc->line, loc->col);
  }
  fprintf(p->f, "%s\n", p->line.s ? p->line.s : "");
  bclear(&p->line);
}

static void emit_line(Printer *p, const SrcLoc *loc) { emit_line_note(p, loc, NULL); }

static void print_graph(Printer *p, const Graph *g, int depth);

static void print_node(Printer *p, const Node *n, int depth) {
  Buf *b = &p->line;
  bprintf(b, "%*s", 2 * depth, "");
  for (int i = 0; i < n->nout; i++) {
    bprintf(b, "%s%%%d : ", i ? ", " : "", vnum(p, n->out[i]));
    put_type(b, p->m, n->out[i]);
  }
  if (n->nout) bprintf(b, " = ");
  if (n->op == OP_ARG) {
    bprintf(b, "arg %d%s", n->a.index, n->a.next ? " next" : "");
    if (n->out[0]->name) bprintf(b, "  \"%s\"", n->out[0]->name);
    emit_line(p, NULL);
    return;
  }
  bool rep = n->op == OP_REPEAT;
  if (rep)
    bprintf(b, "repeat %s x%lld%s", n->a.name ? n->a.name : "?", (long long)n->a.count, n->a.reverse ? " reverse" : "");
  else if (n->op == OP_CALL)
    bprintf(b, "call %s", n->a.name ? n->a.name : "?");
  else
    bprintf(b, "%s", ir_ops[n->op].name);
  if (n->nin || (ir_ops[n->op].flags & F_REGION)) {
    bprintf(b, rep || n->op == OP_CALL ? " (" : "(");
    for (int i = 0; i < n->nin; i++) {
      const char *sep = i == 0 ? "" : (rep && (i == n->a.ncarry || i == n->a.ncarry + n->a.nxs)) ? " | " : ", ";
      bprintf(b, "%s%%%d", sep, vnum(p, n->in[i]));
    }
    bprintf(b, ")");
  }
  if (n->op == OP_CAST) bprintf(b, "  to=%s", ir_dtype_name(n->out[0]->dtype));
  put_attrs(b, n);
  if (n->stage) bprintf(b, "  stage=%d", n->stage - 1);
  if (n->stageset) bprintf(b, "  stages=%lld", (long long)n->stageset); /* a mask: bit s, stage s */
  if (n->body) {
    bprintf(b, " {");
    emit_line(p, &n->loc);
    print_graph(p, n->body, depth + 1);
    bprintf(b, "%*s}", 2 * depth, "");
    emit_line(p, NULL);
    return;
  }
  char note[64] = ""; /* collectives: group and bytes per rank */
  if (ir_ops[n->op].flags & F_COLL) ir_comm_note(note, sizeof note, p->m, n);
  emit_line_note(p, &n->loc, note);
}

static void print_graph(Printer *p, const Graph *g, int depth) {
  for (int i = 0; i < g->nnodes; i++) print_node(p, g->nodes[i], depth);
  if (g->parent) {
    bprintf(&p->line, "%*syield", 2 * depth, "");
    for (int i = 0; i < g->nresults; i++)
      bprintf(&p->line, "%s%%%d", i ? ", " : " ", g->results[i] ? vnum(p, g->results[i]) : -1);
    emit_line(p, NULL);
  }
}

static void printer_free(Printer *p) {
  ptrmap_free(&p->num);
  free(p->line.s);
}

static void print_top(FILE *f, const Graph *g, const Module *m) {
  Printer p = {.f = f, .m = m};
  fprintf(f, "graph {\n");
  print_graph(&p, g, 1);
  fprintf(f, "}\n");
  if (g->nresults) {
    fprintf(f, "results:\n");
    for (int i = 0; i < g->nresults; i++) {
      const char *nm = g->result_names && g->result_names[i] ? g->result_names[i] : "_";
      fprintf(f, "  %s = %%%d\n", nm, g->results[i] ? vnum(&p, g->results[i]) : -1);
    }
  }
  printer_free(&p);
}

void ir_print_graph(FILE *f, const Graph *g) { print_top(f, g, NULL); }
void ir_print_graph_syms(FILE *f, const Graph *g, const Module *m) { print_top(f, g, m); }

/* ---- parameters ------------------------------------------------------------------ */

Shape ir_logical_shape(const Module *m, const Value *v) {
  Shape s = v->shape;
  for (int d = 0; d < s.rank; d++) s.dim[d] *= ir_dim_degree(&v->sharding, d, m->mesh);
  return s;
}

typedef struct {
  const Node *node; /* the PARAM */
  int64_t mult;     /* product of enclosing repeat counts */
} ParamRef;

static void collect_params(const Graph *g, int64_t mult, ParamRef **out, int *n, int *cap) {
  for (int i = 0; i < g->nnodes; i++) {
    const Node *nd = g->nodes[i];
    if (nd->op == OP_PARAM) {
      if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        ParamRef *r = realloc(*out, sizeof(ParamRef) * (size_t)*cap);
        if (!r) die("print: out of memory");
        *out = r;
      }
      (*out)[(*n)++] = (ParamRef){nd, mult};
    }
    if (nd->body) collect_params(nd->body, nd->op == OP_REPEAT ? mult * nd->a.count : mult, out, n, cap);
  }
}

int64_t ir_param_count(const Module *m) {
  ParamRef *ps = NULL;
  int n = 0, cap = 0;
  collect_params(m->graph, 1, &ps, &n, &cap);
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    Shape s = ir_logical_shape(m, ps[i].node->out[0]);
    total += ir_numel(&s) * ps[i].mult;
  }
  free(ps);
  return total;
}

static const char *commas(char *buf, int64_t x) {
  char tmp[32];
  int len = snprintf(tmp, sizeof tmp, "%lld", (long long)(x < 0 ? -x : x));
  int o = 0;
  if (x < 0) buf[o++] = '-';
  for (int i = 0; i < len; i++) {
    buf[o++] = tmp[i];
    if ((len - 1 - i) % 3 == 0 && i != len - 1) buf[o++] = ',';
  }
  buf[o] = 0;
  return buf;
}

static size_t group_len(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot ? (size_t)(dot - name) : 0;
}

static void print_params(FILE *f, const Module *m) {
  ParamRef *ps = NULL;
  int n = 0, cap = 0;
  collect_params(m->graph, 1, &ps, &n, &cap);
  fprintf(f, "parameters:\n");
  bool *done = calloc((size_t)(n ? n : 1), sizeof(bool));
  if (!done) die("print: out of memory");
  int64_t total = 0;
  char b1[40], b2[40];
  for (int i = 0; i < n; i++) { /* groups in order of first appearance */
    if (done[i]) continue;
    const char *gi = ps[i].node->a.name ? ps[i].node->a.name : "?";
    size_t gl = group_len(gi);
    int64_t gsum = 0;
    for (int j = i; j < n; j++) {
      const char *nj = ps[j].node->a.name ? ps[j].node->a.name : "?";
      if (done[j] || group_len(nj) != gl || strncmp(nj, gi, gl) != 0) continue;
      Shape s = ir_logical_shape(m, ps[j].node->out[0]);
      gsum += ir_numel(&s) * ps[j].mult;
    }
    fprintf(f, "  %-53.*s %16s\n", gl ? (int)gl : 7, gl ? gi : "(model)", commas(b1, gsum));
    for (int j = i; j < n; j++) {
      const char *nj = ps[j].node->a.name ? ps[j].node->a.name : "?";
      if (done[j] || group_len(nj) != gl || strncmp(nj, gi, gl) != 0) continue;
      done[j] = true;
      Value lv = *ps[j].node->out[0];
      lv.shape = ir_logical_shape(m, &lv);
      lv.sharding = ir_replicated();
      Buf t = {0};
      put_type(&t, m, &lv);
      if (ps[j].mult > 1) bprintf(&t, " x%lld", (long long)ps[j].mult);
      int64_t cnt = ir_numel(&lv.shape) * ps[j].mult;
      fprintf(f, "    %-20s %-30s %16s\n", nj + (gl ? gl + 1 : 0), t.s, commas(b2, cnt));
      free(t.s);
      total += cnt;
    }
  }
  fprintf(f, "  total %64s\n", commas(b1, total));
  free(done);
  free(ps);
}

/* ---- module --------------------------------------------------------------------------- */

static const char *const sched_names[] = {"gpipe", "1f1b", "interleaved", "zb"};
static const char *const recompute_names[] = {"none", "full", "selective"};

static void print_link(FILE *f, const char *what, const Link *l) {
  if (l->kind == LINK_NONE) return;
  fprintf(f, ", %s %s", what, ir_link_names[l->kind]);
  if (l->count > 1) fprintf(f, " %dx", l->count);
  fprintf(f, " %g GB/s", l->bytes_per_s / 1e9);
}

static const char *human(char *buf, double x) {
  static const char *const units[] = {"", "K", "M", "G", "T", "P"};
  int u = 0;
  while (x >= 1000 && u < 5) {
    x /= 1000;
    u++;
  }
  snprintf(buf, 32, "%.4g %sFLOP", x, units[u]);
  return buf;
}

void ir_print_module_header(FILE *f, const Module *m) {
  fprintf(f, "module %s\n", m->name ? m->name : "?");
  if (m->has_topology) {
    const Topology *t = &m->topo;
    fprintf(f, "  topology %s: %d node%s x %d %s", t->name ? t->name : "?", t->nodes, t->nodes == 1 ? "" : "s",
            t->devices_per_node, t->cpu_only ? "cpu ranks" : (t->device ? t->device : "?"));
    if (t->device_memory > 0) fprintf(f, " (%g GiB)", t->device_memory / (1024.0 * 1024 * 1024));
    print_link(f, "intra", &t->intra);
    print_link(f, "inter", &t->inter);
    /* --world past (or short of) the topology's devices: the mesh fills nodes like its own (ir/mesh.c) */
    if (m->mesh && m->mesh->nodes != t->nodes)
      fprintf(f, "  # planned on %d node%s like it: --world %d", m->mesh->nodes, m->mesh->nodes == 1 ? "" : "s",
              m->mesh->world);
    fprintf(f, "\n");
  }
  if (m->has_plan) {
    const Plan *p = &m->plan;
    fprintf(f, "  plan: dp ");
    if (m->mesh) fprintf(f, "%d", m->mesh->dim[RT_AX_DP]);
    else if (p->dp > 0) fprintf(f, "%d", p->dp);
    else fprintf(f, "auto");
    /* the micro-batches of a step as resolved (ir/mesh.c: `microbatches`, or batch over micro_batch x
     * dp), what the pipeline section runs; a module read from text keeps the plan's word */
    fprintf(f, " tp %d pp %d cp %d sp %s zero %d%s microbatches %lld schedule %s", p->tp, p->pp, p->cp,
            p->sp ? "on" : "off", p->zero, p->offload ? " offload" : "",
            (long long)(m->batch.accum > 0 ? m->batch.accum : p->microbatches),
            p->schedule <= SCHED_ZB ? sched_names[p->schedule] : "?");
    if (p->schedule == SCHED_INTERLEAVED) fprintf(f, "(v: %d)", p->interleave);
    if (p->schedule == SCHED_ZB && p->sched_times) { /* the stage times zb's lists were made with */
      fprintf(f, "(times:");
      for (int i = 0; i < 3 * p->pp; i++) fprintf(f, " %.17g", p->sched_times[i]);
      fprintf(f, ")");
    }
    fprintf(f, " recompute %s", p->recompute <= RECOMPUTE_SELECTIVE ? recompute_names[p->recompute] : "?");
    if (p->cp_mode != CP_RING) fprintf(f, " cp_mode %s", ir_cp_mode_names[p->cp_mode]); /* (ring: not printed) */
    if (p->weight_copy != WCOPY_AUTO) fprintf(f, " weight_copy %s", ir_weight_copy_names[p->weight_copy]); /* (auto: not) */
    if (p->coalesce != COALESCE_AUTO) fprintf(f, " coalesce %s", ir_coalesce_names[p->coalesce]);            /* (auto: not) */
    if (p->defer_waits != DEFER_AUTO) fprintf(f, " defer_waits %s", ir_defer_waits_names[p->defer_waits]);  /* (auto: not) */
    if (p->zb_w != ZBW_AUTO) fprintf(f, " zb_w %s", ir_zb_w_names[p->zb_w]);                                /* (auto: not) */
    if (p->zb_w == ZBW_HOLD && p->zb_w_layers > 0) fprintf(f, "(%d)", p->zb_w_layers);                    /* hold(N) */
    fprintf(f, "\n");
  }
  if (m->has_recipe) {
    const Recipe *r = &m->recipe;
    static const char *const lrs[] = {"constant", "linear", "cosine"};
    int64_t batch = m->mesh ? m->batch.global : r->batch; /* as decided with the mesh (ir/mesh.c) */
    fprintf(f, "  recipe: batch %lld micro_batch %lld seq %lld %s lr %g", (long long)batch,
            (long long)r->micro_batch, (long long)r->seq, r->optimizer == OPT_SGD ? "sgd" : "adamw", r->lr);
    if (r->optimizer == OPT_ADAMW) fprintf(f, " betas (%g, %g) eps %g", r->beta1, r->beta2, r->eps);
    else fprintf(f, " momentum %g", r->momentum);
    fprintf(f, " weight_decay %g schedule %s warmup %lld", r->weight_decay,
            r->lr_schedule <= LR_COSINE ? lrs[r->lr_schedule] : "?", (long long)r->warmup);
    if (r->grad_clip > 0) fprintf(f, " grad_clip %g", r->grad_clip);
    if (r->on_nonfinite == NONFINITE_SKIP) fprintf(f, " on_nonfinite skip max_skips %lld", (long long)r->max_skips);
    fprintf(f, " precision %s steps %lld seed %llu\n", r->precision == PREC_BF16 ? "bf16" : "f32", (long long)r->steps,
            (unsigned long long)r->seed);
  }
}

static int64_t count_nodes(const Graph *g) {
  int64_t n = g->nnodes;
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) n += count_nodes(g->nodes[i]->body);
  return n;
}

void ir_print_module(FILE *f, const Module *m, bool with_ir) {
  ir_print_module_header(f, m);
  if (m->target_why) fprintf(f, "# target %s: %s\n", m->target == TARGET_CUDA ? "cuda" : "cpu", m->target_why);
  fprintf(f, "\n");
  ir_print_rank_classes(f, m);
  if (with_ir) print_top(f, m->graph, m);
  else /* one line per node, each body's once: what --ir would print */
    fprintf(f, "# the program's IR: %lld nodes (shardc plan --ir prints it)\n", (long long)count_nodes(m->graph));
  fprintf(f, "\n");
  print_params(f, m);
  double fw = ir_flops_per_token(m, false), tr = 3.0 * fw; /* (ir_flops_per_token's training figure: one walk, not two) */
  char h1[32], h2[32];
  fprintf(f, "flops per token: forward %s, training %s (3 x forward)\n", human(h1, fw), human(h2, tr));
  if (m->mesh) ir_print_comm(f, m);
}

/* ---- Graphviz ----------------------------------------------------------------------------- */

static void dot_graph(Printer *p, const Graph *g, int depth);

static void dot_node(Printer *p, const Node *n, int depth) {
  FILE *f = p->f;
  int id = vnum(p, n); /* nodes numbered in the same map as values; keys differ */
  if (n->body) {
    fprintf(f, "%*ssubgraph cluster_%d {\n%*s  label=\"%s %s", 2 * depth, "", id, 2 * depth, "",
            ir_ops[n->op].name, n->a.name ? n->a.name : "");
    if (n->op == OP_REPEAT) fprintf(f, " x%lld%s", (long long)n->a.count, n->a.reverse ? " reverse" : "");
    fprintf(f, "\";\n");
    dot_graph(p, n->body, depth + 1);
    fprintf(f, "%*s}\n", 2 * depth, "");
  }
  Buf t = {0};
  if (n->nout) put_type(&t, p->m, n->out[0]);
  const char *label = n->op == OP_PARAM || n->op == OP_INPUT || n->op == OP_STATE ? n->a.name : NULL;
  fprintf(f, "%*sn%d [label=\"%s%s%s\\n%s\"%s];\n", 2 * depth, "", id, ir_ops[n->op].name, label ? " " : "",
          label ? label : "", t.s ? t.s : "", n->body ? " shape=box3d" : n->op == OP_PARAM ? " shape=box" : "");
  free(t.s);
  for (int i = 0; i < n->nin; i++) fprintf(f, "%*sn%d -> n%d;\n", 2 * depth, "", vnum(p, n->in[i]->def), id);
  if (n->body)
    for (int i = 0; i < n->body->nresults; i++)
      if (n->body->results[i])
        fprintf(f, "%*sn%d -> n%d [style=dashed];\n", 2 * depth, "", vnum(p, n->body->results[i]->def), id);
}

static void dot_graph(Printer *p, const Graph *g, int depth) {
  for (int i = 0; i < g->nnodes; i++) dot_node(p, g->nodes[i], depth);
}

void ir_print_dot(FILE *f, const Module *m) {
  Printer p = {.f = f, .m = m};
  fprintf(f, "digraph \"%s\" {\n  node [fontname=\"monospace\" fontsize=10];\n", m->name ? m->name : "model");
  dot_graph(&p, m->graph, 1);
  fprintf(f, "}\n");
  printer_free(&p);
}
