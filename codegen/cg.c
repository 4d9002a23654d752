/* codegen/cg.c — the helpers the emitter (emit.c) and the backends (target_*.c) share: lines of
 * the program, where a value lives in M, C literals, workspace needs, copies, errors, and which
 * members of a fusion group an entry point runs as one kernel. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cg.h"
#include "diag.h"
#include "memplan_views.h" /* memplan_col_at */
#include "passes.h"        /* FUSE_MAX_* */

void cg_line(Cg *c, const char *fmt, ...) {
  for (int i = 0; i < c->indent; i++) fputs("  ", c->f);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(c->f, fmt, ap);
  va_end(ap);
  fputc('\n', c->f);
}

int cg_depth_of(const Graph *g) {
  int d = 0;
  for (; g->parent; g = g->parent) d++;
  return d;
}

/* C expression (char *) for where v lives. */
const char *cg_ptr(Cg *c, const Value *v) {
  if (v->def->op == OP_ARG) {
    for (int i = c->nargs - 1; i >= 0; i--)
      if (c->binds[i].arg == v->def) return c->binds[i].expr;
    die("ARG %%%d has no binding", v->id);
  }
  if (v->offset == IR_OFFSET_VIEW) { /* a view of a region's argument; a column view at its first column, a row view at its first row */
    const char *p = cg_ptr(c, v->def->in[0]);
    int64_t at = memplan_view_at(v->def);
    return v->ld || at ? arena_printf(c->a, "(%s + %" PRId64 ")", p, at) : p;
  }
  if (v->last_in) { /* a carry in its loop's stack: the next slice, and the loop's output in the last iteration */
    int d = cg_depth_of(v->def->graph);
    return arena_printf(c->a, "(i%d < %" PRId64 " ? (M + %" PRId64 " + i%d * %" PRId64 ") : %s)", d,
                        v->def->graph->owner->a.count - 1, v->offset, d, v->stride, cg_ptr(c, v->last_in));
  }
  if (v->offset < 0) die("value %%%d (%s) was not placed by memplan", v->id, ir_ops[v->def->op].name);
  if (v->host) return arena_printf(c->a, "(H + %" PRId64 ")", v->offset); /* plan offload: the host allocation */
  if (v->stride) return arena_printf(c->a, "(M + %" PRId64 " + i%d * %" PRId64 ")", v->offset, cg_depth_of(v->def->graph), v->stride);
  return arena_printf(c->a, "(M + %" PRId64 ")", v->offset);
}

const char *cg_shape_lit(Cg *c, const Shape *s) {
  char buf[256];
  int n = snprintf(buf, sizeof buf, "&(RtShape){%d, {", s->rank);
  for (int i = 0; i < s->rank; i++) n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%" PRId64, i ? ", " : "", s->dim[i]);
  snprintf(buf + n, sizeof buf - (size_t)n, "}}");
  return arena_strdup(c->a, buf);
}

int64_t cg_bytes(const Value *v) { return ir_numel(&v->shape) * ir_dtype_size(v->dtype); }

/* A C string literal for s (or NULL). */
const char *cg_cstr(Cg *c, const char *s) {
  if (!s) return "NULL";
  size_t n = strlen(s);
  char *q = arena_alloc(c->a, 4 * n + 3), *p = q;
  *p++ = '"';
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') {
      *p++ = '\\';
      *p++ = (char)ch;
    } else if (ch < 32 || ch >= 127) {
      p += sprintf(p, "\\%03o", ch);
    } else {
      *p++ = (char)ch;
    }
  }
  *p++ = '"';
  *p = 0;
  return q;
}

/* Records a kernel's workspace need (a C expression); the program's workspace is their max. */
void cg_ws_need(Cg *c, const char *expr) {
  for (int i = 0; i < c->nws; i++)
    if (strcmp(c->ws[i], expr) == 0) return;
  arena_grow(c->a, (void **)&c->ws, &c->capws, c->nws + 1, sizeof(char *));
  c->ws[c->nws++] = expr;
}

void cg_copy_if_moved(Cg *c, const Value *dst, const Value *src) {
  const char *d = cg_ptr(c, dst), *s = cg_ptr(c, src);
  if (strcmp(d, s) != 0) c->t->copy(c, d, s, cg_bytes(src), false);
}

/* One strided block copy: `rows` of `inner` elements from src's rows [sat, sat + rows) of srows
 * into dst's rows [dat, dat + rows) of drows, for each of `outer` blocks. */
static void block_copy(Cg *c, const char *copy, const Value *dst, int64_t drows, int64_t dat, const Value *src,
                       int64_t srows, int64_t sat, int64_t outer, int64_t rows, int64_t inner, int es) {
  cg_line(c, "%s%s, %" PRId64 ", %" PRId64 ", %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %d);",
          copy, cg_ptr(c, dst), drows, dat, cg_ptr(c, src), srows, sat, outer, rows, inner, es);
}

void cg_block_copies(Cg *c, const Node *n, const char *copy) {
  const Value *y = n->out[0], *x = n->in[0];
  const Attrs *a = &n->a;
  int ax = a->axis;
  if (n->op == OP_CONCAT) {
    int64_t outer = cg_prod(&y->shape, 0, ax), inner = cg_prod(&y->shape, ax + 1, y->shape.rank), at = 0;
    int es = ir_dtype_size(y->dtype);
    for (int i = 0; i < n->nin; i++) {
      const Value *in = n->in[i];
      int64_t len = in->shape.dim[ax];
      /* an input the memory plan placed in its column slot (memplan_views.c): its producer wrote it there */
      bool in_slot = ax == y->shape.rank - 1 && in->ld && in->ld == y->shape.dim[ax] && in->offset == y->offset + at * es && in->stride == y->stride;
      /* or a sum of squares the CUDA target's kernel writes there (passes/fuse_sumsq.c) */
      bool written = c->m->target == TARGET_CUDA && fuse_sumsq_piece(n, i);
      if (ax == 0 && memplan_row_placed(n, i)) written = true; /* or in its rows (memplan_views.c, rows in place) */
      if (!in_slot && !written) block_copy(c, copy, y, y->shape.dim[ax], at, in, len, 0, outer, len, inner, es);
      at += len;
    }
    return;
  }
  if (ir_slice_is_view(n)) { /* the leading rows, in place (the memory plan's view) */
    cg_copy_if_moved(c, y, x);
    return;
  }
  if (memplan_row_viewed(n)) return; /* rows in place (the memory plan's row view, memplan_views.c) */
  if (n->op == OP_SLICE && y->ld) return; /* a column view (memplan_views.c): its readers take the row stride */
  const Shape *xs = &x->shape;
  int64_t outer = cg_prod(xs, 0, ax), inner = cg_prod(xs, ax + 1, xs->rank), rows = xs->dim[ax];
  int es = ir_dtype_size(x->dtype);
  if (n->op == OP_SLICE) {
    block_copy(c, copy, y, a->len, 0, x, rows, a->start, outer, a->len, inner, es);
  } else if (ax == 0 && memplan_row_placed(n, 0)) { /* OP_PAD, x in place (memplan_views.c): the rows around it */
    int64_t before = memplan_rows_at(n, 0), after = before + cg_bytes(x);
    if (before) c->t->zero(c, cg_ptr(c, y), before);
    if (after < cg_bytes(y)) c->t->zero(c, arena_printf(c->a, "(%s + %" PRId64 ")", cg_ptr(c, y), after), cg_bytes(y) - after);
  } else { /* OP_PAD: zeros around x's rows */
    c->t->zero(c, cg_ptr(c, y), cg_bytes(y));
    block_copy(c, copy, y, a->len, a->start, x, rows, 0, outer, rows, inner, es);
  }
}

int64_t cg_prod(const Shape *s, int from, int to) {
  int64_t n = 1;
  for (int i = from; i < to; i++) n *= s->dim[i];
  return n;
}

void cg_unsupported(Cg *c, const Node *n, const char *why) {
  error_at(n->loc, "the %s target cannot run %s yet: %s", c->t->name, ir_ops[n->op].name, why);
  c->ok = false;
}

const char *cg_axis_lit(int axis) {
  static const char *const names[RT_AX_COUNT] = {[RT_AX_DP] = "RT_AX_DP", [RT_AX_PP] = "RT_AX_PP",
                                                 [RT_AX_CP] = "RT_AX_CP", [RT_AX_TP] = "RT_AX_TP"};
  if (axis < 0 || axis >= RT_AX_COUNT) die("collective on mesh axis %d", axis);
  return names[axis];
}

const char *cg_dtype_lit(DType dt) {
  static const char *const names[DT_COUNT] = {
#define RT_DTYPE(id, name, size, is_float) [DT_##id] = "RT_" #id,
      RT_DTYPES(RT_DTYPE)
#undef RT_DTYPE
  };
  return names[dt];
}

/* (outer, len, inner) of a tensor axis: the elements before it, its length, after it. */
void cg_axis_split(const Shape *s, int axis, int64_t *outer, int64_t *len, int64_t *inner) {
  *outer = cg_prod(s, 0, axis);
  *len = s->dim[axis];
  *inner = cg_prod(s, axis + 1, s->rank);
}

bool cg_runs(const Cg *c, const Graph *g, int i) {
  if (c->once && g == c->once->body) return c->body_need[i];
  return g->parent || !c->need || c->need[i];
}

int cg_group_run(const Cg *c, const Node *n) {
  const Graph *g = n->graph;
  int p = c->pos, id = n->group;
  if (!id) return 1;
  bool after_gap = p > 0 && g->nodes[p - 1]->group == id;
  if (after_gap && cg_runs(c, g, p - 1)) return 1; /* in a piece emitted node by node */
  int e = p + 1;
  while (e < g->nnodes && g->nodes[e]->group == id && cg_runs(c, g, e)) e++;
  if (after_gap) /* members before p were run apart (or not at all): read one, run node by node */
    for (int k = p; k < e; k++)
      for (int j = 0; j < g->nodes[k]->nin; j++) {
        const Node *d = g->nodes[k]->in[j]->def;
        for (int s = p - 1; s >= 0 && g->nodes[s]->group == id; s--)
          if (g->nodes[s] == d) return 1;
      }
  return e - p;
}

_Static_assert((int)CG_EW_MAX >= (int)FUSE_MAX_NODES && (int)CG_EW_MAX >= (int)FUSE_MAX_INPUTS, "a fusion group fits one run");

bool cg_elementwise(const Node *n) {
  return n->op == OP_CONST || n->op == OP_BROADCAST_TO || (ir_ops[n->op].flags & F_EW) != 0;
}

static int member_of(const CgEwRun *r, const Value *v) {
  for (int i = 0; i < r->n; i++)
    if (r->mem[i]->out[0] == v) return i;
  return -1;
}

static int ext_of(const CgEwRun *r, const Value *v) {
  for (int i = 0; i < r->next; i++)
    if (r->ext[i] == v) return i;
  return -1;
}

/* Adds g's own results (those g defines) and, below it, its bodies' to c->results. */
static void index_results(Cg *c, const Graph *g) {
  for (int i = 0; i < g->nresults; i++)
    if (g->results[i]->def->graph == g) ptrmap_put(&c->results, g->results[i], 1);
  for (int i = 0; i < g->nnodes; i++)
    if (g->nodes[i]->body) index_results(c, g->nodes[i]->body);
}

/* Whether v (defined in its graph) is read more than `inside` times there or below (a value is
 * read only in the graph that defines it and its bodies, so the module-wide count is its
 * ir_count_uses_deep), or is a result of its graph. The counts are the module's as planned:
 * emission changes no graph. */
static bool read_outside(Cg *c, const Value *v, int inside) {
  if (!c->indexed) {
    ir_use_counts(c->m->graph, &c->uses);
    index_results(c, c->m->graph);
    c->indexed = true;
  }
  intptr_t n = 0, r = 0;
  ptrmap_get(&c->uses, v, &n);
  return ptrmap_get(&c->results, v, &r) || n > inside;
}

void cg_ew_run(Cg *c, Node *first, CgEwRun *r) {
  const Graph *g = first->graph;
  int len = cg_group_run(c, first);
  memset(r, 0, sizeof *r);
  if (len > CG_EW_MAX) die("codegen: a fusion group of %d nodes", len);
  for (int j = c->pos; j < c->pos + len; j++) {
    Node *n = g->nodes[j];
    int i = r->n++;
    r->mem[i] = n;
    Value *fresh[2]; /* read from outside for the first time (twice when read twice: fuse.c's count) */
    int nfresh = 0;
    for (int k = 0; k < n->nin && k < 2; k++)
      if (member_of(r, n->in[k]) < 0 && ext_of(r, n->in[k]) < 0) fresh[nfresh++] = n->in[k];
    if (r->next + nfresh > CG_EW_MAX) die("codegen: a fusion group reads over %d values", CG_EW_MAX);
    for (int k = 0; k < nfresh; k++) r->ext[r->next++] = fresh[k];
    for (int k = 0; k < n->nin && k < 2; k++) {
      int mi = member_of(r, n->in[k]);
      r->in[i][k] = mi >= 0 ? mi : -1 - ext_of(r, n->in[k]);
    }
  }
  for (int i = 0; i < r->n; i++) { /* stored when something outside the run reads it */
    const Value *y = r->mem[i]->out[0];
    int inside = 0;
    for (int j = i + 1; j < r->n; j++)
      for (int k = 0; k < r->mem[j]->nin; k++) inside += r->mem[j]->in[k] == y;
    r->stored[i] = read_outside(c, y, inside);
    r->nstored += r->stored[i];
  }
  if (r->nstored == 0) die("codegen: an elementwise run stores nothing");
}
