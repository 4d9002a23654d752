/* ir/read.c — the textual IR reader (see ir/read.h; the format is in docs/ir.md).
 *
 * A line-oriented recursive-descent parser over the text ir/print.c writes. Values are
 * looked up by their printed number; a region's body is a nested graph parsed between its
 * header line's `{` and the matching `}`. The first error is reported with its location
 * and the reader stops (no cascades); every check the builder would die on (arity, scope,
 * ranks) is made first, so no input aborts. The module header is read by ir/read_header.c,
 * a node line's types, value references and attributes by ir/read_attrs.c, the tokens by
 * ir/read_lex.c.
 */
#include "read.h"

#include <string.h>

#include "diag.h"
#include "ptrmap.h"
#include "read_impl.h"

/* ---- nodes -------------------------------------------------------------------- */

typedef struct {
  int64_t num;    /* printed number */
  const char *at; /* where it is written */
  Value v;        /* dtype, shape, sharding */
} OutDecl;

static bool parse_graph(Reader *r, Graph *g, const char *open_at);

static void set_outputs(Node *n, const OutDecl *outs) {
  for (int i = 0; i < n->nout; i++) {
    n->out[i]->dtype = outs[i].v.dtype;
    n->out[i]->shape = outs[i].v.shape;
    n->out[i]->sharding = outs[i].v.sharding;
    n->out[i]->host = outs[i].v.host;
  }
}

static bool define_outputs(Reader *r, Node *n, const OutDecl *outs) {
  for (int i = 0; i < n->nout; i++)
    if (!rd_define(r, outs[i].at, outs[i].num, n->out[i])) return false;
  return true;
}

/* (%a, %b | %c ...) into *ins; bar positions into seps (regions only). */
static bool parse_inputs(Reader *r, Graph *g, Value ***ins, int *nin, int *seps, int *nseps, bool region) {
  int cap = 0;
  *nin = 0;
  if (rd_eat(r, ')')) return true;
  for (;;) {
    Value *v;
    if (!rd_use(r, g, &v)) return false;
    arena_grow(r->arena, (void **)ins, &cap, *nin + 1, sizeof(Value *));
    (*ins)[(*nin)++] = v;
    if (rd_eat(r, ')')) return true;
    rd_ws(r);
    if (region && *r->p == '|') {
      if (*nseps == 2) return rd_fail(r, r->p, "a repeat's inputs have at most two '|' (carry | xs | captured)");
      seps[(*nseps)++] = *nin;
      r->p++;
    } else if (!rd_expect(r, ',')) {
      return false;
    }
  }
}

/* Is (ncarry c, nxs x) consistent with n's inputs, outputs and body? */
static bool roles_fit(const Node *n, int c, int x) {
  const Graph *b = n->body;
  if (c > n->nout || c + x > n->nin || b->nresults != n->nout) return false;
  for (int i = 0; i < n->nin; i++) {
    const Shape *in = &n->in[i]->shape, *arg = &b->args[i]->out[0]->shape;
    if (i < c || i >= c + x) {
      if (!ir_shape_eq(in, arg)) return false;
    } else {
      if (in->rank != arg->rank + 1 || in->dim[0] != n->a.count) return false;
      for (int d = 0; d < arg->rank; d++)
        if (in->dim[d + 1] != arg->dim[d]) return false;
    }
  }
  for (int i = 0; i < n->nout; i++) {
    const Shape *out = &n->out[i]->shape, *res = &b->results[i]->shape;
    if (i < c) {
      if (!ir_shape_eq(out, &n->in[i]->shape) || !ir_shape_eq(res, out)) return false;
    } else if (out->rank != res->rank + 1 || out->dim[0] != n->a.count) {
      return false;
    }
  }
  return true;
}

/* Which inputs are carried, stacked and captured: the bars print only between non-empty groups. */
static bool repeat_roles(Reader *r, Node *n, const int *seps, int nseps, const char *at) {
  int cand[3][2], nc = 0, nin = n->nin;
  if (nseps == 2) cand[nc][0] = seps[0], cand[nc++][1] = seps[1] - seps[0];
  if (nseps == 1) {
    int s = seps[0];
    cand[nc][0] = s, cand[nc++][1] = 0;
    cand[nc][0] = s, cand[nc++][1] = nin - s;
    cand[nc][0] = 0, cand[nc++][1] = s;
  }
  if (nseps == 0) {
    cand[nc][0] = 0, cand[nc++][1] = 0;
    cand[nc][0] = 0, cand[nc++][1] = nin;
    cand[nc][0] = nin, cand[nc++][1] = 0;
  }
  for (int i = 0; i < nc; i++)
    if (roles_fit(n, cand[i][0], cand[i][1])) {
      n->a.ncarry = cand[i][0];
      n->a.nxs = cand[i][1];
      return true;
    }
  return rd_fail(r, at,
                 "repeat %s: its inputs, outputs and body do not fit as carry | xs | captured (carried values keep "
                 "their shape; xs and ys are stacked on a leading dim of size %lld)",
                 n->a.name, (long long)n->a.count);
}

/* `repeat NAME xCOUNT [reverse] (ins) {` or `call NAME (ins) {`, its body and `}`. */
static bool parse_region(Reader *r, Graph *g, OpKind op, OutDecl *outs, int nout, const char *op_at) {
  Attrs at = {0};
  rd_ws(r);
  const char *name_at = r->p;
  at.name = rd_token(r, "(");
  if (!at.name) return rd_fail(r, name_at, "expected the region's name, found %s", rd_found(r));
  if (op == OP_REPEAT) {
    rd_ws(r);
    if (*r->p != 'x') return rd_fail(r, r->p, "expected the iteration count xN, found %s", rd_found(r));
    r->p++;
    if (!rd_i64(r, &at.count, 1, 1 << 30, "an iteration count")) return false;
    at.reverse = rd_keyword(r, "reverse");
  }
  if (!rd_expect(r, '(')) return false;
  Value **ins = NULL;
  int nin, seps[2], nseps = 0;
  if (!parse_inputs(r, g, &ins, &nin, seps, &nseps, op == OP_REPEAT)) return false;
  rd_ws(r);
  int stage = 0; /* `stage=S` before the brace: the pipeline stage that runs it (passes/pipe.c) */
  if (!strncmp(r->p, "stage=", 6)) {
    r->p += 6;
    if (!rd_int(r, &stage, 0, 1 << 16, "a pipeline stage")) return false;
    stage++;
    rd_ws(r);
  }
  const char *brace = r->p;
  if (!rd_expect(r, '{')) return false;
  Node *n = ir_node_new(g, op, nin, ins, nout, (SrcLoc){0});
  n->a = at;
  n->stage = stage;
  set_outputs(n, outs);
  if (!rd_end_line(r, &n->loc)) return false;
  if (r->depth == MAX_DEPTH) return rd_fail(r, op_at, "regions nested deeper than %d", MAX_DEPTH);
  n->body = ir_graph_new(r->arena, g);
  n->body->owner = n;
  n->body->args = ARENA_ARRAY(r->arena, Node *, nin > 0 ? nin : 1);
  n->body->nargs = n->body->capargs = nin;
  r->open[r->depth++] = n;
  if (!parse_graph(r, n->body, brace)) return false;
  r->depth--;
  for (int i = 0; i < nin; i++)
    if (!n->body->args[i]) return rd_fail(r, op_at, "the body of %s has no `arg %d`", at.name, i);
  if (n->body->nresults != nout)
    return rd_fail(r, op_at, "%s %s has %d outputs but its body yields %d values", ir_ops[op].name, at.name, nout,
                   n->body->nresults);
  if (op == OP_REPEAT && !repeat_roles(r, n, seps, nseps, op_at)) return false;
  return define_outputs(r, n, outs);
}

/* `%N : type = arg K ["name"]` in a region body. */
static bool parse_arg(Reader *r, Graph *g, OutDecl *outs, int nout, const char *op_at) {
  if (!g->owner) return rd_fail(r, op_at, "arg outside a region body");
  if (nout != 1) return rd_fail(r, op_at, "arg defines one value, not %d", nout);
  rd_ws(r);
  const char *kat = r->p;
  int k;
  if (!rd_int(r, &k, 0, 1 << 20, "an argument index")) return false;
  if (k >= g->nargs) return rd_fail(r, kat, "arg %d of a region with %d inputs", k, g->nargs);
  if (g->args[k]) return rd_fail(r, kat, "arg %d defined twice", k);
  Node *n = ir_node_new(g, OP_ARG, 0, NULL, 1, (SrcLoc){0});
  n->a.index = k;
  n->a.next = rd_keyword(r, "next");
  set_outputs(n, outs);
  g->args[k] = n;
  rd_ws(r);
  if (*r->p == '"') {
    AttrList al = {0};
    if (!rd_attrs(r, &al, 0)) return false;
    RdAttr *s = rd_take(&al, "name");
    if (!s || al.n != 1) return rd_fail(r, al.a[al.n - 1].at, "arg takes only a \"name\"");
    n->out[0]->name = s->str;
  }
  return rd_end_line(r, NULL) && define_outputs(r, n, outs);
}

/* One node line: [outs =] op[(ins)] attrs [# loc]. */
static bool parse_node(Reader *r, Graph *g) {
  OutDecl outs_small[8], *outs = outs_small;
  int nout = 0, cap = 8;
  rd_ws(r);
  if (*r->p == '%') {
    do {
      if (nout == cap) {
        OutDecl *o = ARENA_ARRAY(r->arena, OutDecl, cap * 2);
        memcpy(o, outs, sizeof(OutDecl) * (size_t)cap);
        outs = o;
        cap *= 2;
      }
      OutDecl *d = &outs[nout++];
      rd_ws(r);
      d->at = r->p;
      if (!rd_num(r, &d->num) || !rd_expect(r, ':') || !rd_type(r, &d->v)) return false;
      for (int i = 0; i < nout - 1; i++)
        if (outs[i].num == d->num) return rd_fail(r, d->at, "%%%lld is defined twice", (long long)d->num);
    } while (rd_eat(r, ','));
    if (!rd_expect(r, '=')) return false;
  }
  rd_ws(r);
  const char *op_at = r->p;
  const char *w = rd_word(r);
  if (!w) return rd_fail(r, op_at, "expected an op, found %s", rd_found(r));
  if (strcmp(w, "arg") == 0) return parse_arg(r, g, outs, nout, op_at);
  if (strcmp(w, "repeat") == 0) return parse_region(r, g, OP_REPEAT, outs, nout, op_at);
  if (strcmp(w, "call") == 0) return parse_region(r, g, OP_CALL, outs, nout, op_at);
  const char *names[OP_COUNT];
  for (int i = 0; i < OP_COUNT; i++)
    names[i] = i == OP_ARG || i == OP_REPEAT || i == OP_CALL ? NULL : ir_ops[i].name;
  int op = rd_lookup(w, names, OP_COUNT);
  if (op < 0) {
    rd_fail(r, op_at, "unknown op '%s'", w);
    const char *hint = diag_nearest(w, names, OP_COUNT);
    if (hint) note("did you mean '%s'?", hint);
    return false;
  }
  Value **ins = NULL;
  int nin = 0;
  if (*r->p == '(') { /* no blank: `op(` (a blank would start the attributes) */
    r->p++;
    if (!parse_inputs(r, g, &ins, &nin, NULL, NULL, false)) return false;
  }
  const OpInfo *oi = &ir_ops[op];
  if (oi->nin >= 0 && nin != oi->nin) return rd_fail(r, op_at, "%s takes %d inputs, not %d", w, oi->nin, nin);
  if (oi->nout >= 0 && nout != oi->nout) return rd_fail(r, op_at, "%s defines %d values, not %d", w, oi->nout, nout);
  if (op == OP_CONCAT && nin < 1) return rd_fail(r, op_at, "concat needs at least one input");
  if (op == OP_ALL_REDUCE && (nin < 1 || nin != nout))
    return rd_fail(r, op_at, "all_reduce needs as many values as inputs, at least one (has %d and %d)", nout, nin);
  AttrList al = {0};
  if (!rd_attrs(r, &al, 0)) return false;
  Node *n = ir_node_new(g, (OpKind)op, nin, ins, nout, (SrcLoc){0});
  set_outputs(n, outs);
  if (!rd_apply_attrs(r, n, &al, op_at)) return false;
  return rd_end_line(r, &n->loc) && define_outputs(r, n, outs);
}

/* Node lines up to the `}` closing the graph (a body's last line before it is `yield`). */
static bool parse_graph(Reader *r, Graph *g, const char *open_at) {
  bool yielded = false;
  for (;;) {
    rd_ws(r);
    if (*r->p == 0) return rd_fail(r, open_at, "this '{' is never closed");
    if (*r->p == '\n' || *r->p == '#') {
      rd_skip_line(r);
      continue;
    }
    if (*r->p == '}') {
      if (g->parent && !yielded) return rd_fail(r, r->p, "a region body ends with `yield`");
      r->p++;
      return rd_end_line(r, NULL);
    }
    if (yielded) return rd_fail(r, r->p, "nothing may follow `yield` in a body");
    const char *at = r->p;
    if (rd_keyword(r, "yield")) {
      if (!g->parent) return rd_fail(r, at, "`yield` outside a region body (the graph's outputs are `results:`)");
      yielded = true;
      if (!rd_eol(r)) do {
          Value *v;
          if (!rd_use(r, g, &v)) return false;
          ir_add_result(g, v, NULL);
        } while (rd_eat(r, ','));
      if (!rd_end_line(r, NULL)) return false;
      continue;
    }
    if (!parse_node(r, g)) return false;
  }
}

/* `results:` then `  NAME = %N` lines (NAME `_`: unnamed). */
static bool parse_results(Reader *r) {
  Graph *g = r->m->graph;
  if (!rd_end_line(r, NULL)) return false;
  while (*r->p == ' ' || *r->p == '\t') {
    rd_ws(r);
    if (rd_eol(r)) {
      rd_skip_line(r);
      continue;
    }
    const char *at = r->p;
    const char *name = rd_token(r, "=");
    Value *v;
    if (!name) return rd_fail(r, at, "expected a result name, found %s", rd_found(r));
    if (!rd_expect(r, '=') || !rd_use(r, g, &v)) return false;
    ir_add_result(g, v, strcmp(name, "_") == 0 ? NULL : name);
    if (!rd_end_line(r, NULL)) return false;
  }
  return true;
}

/* ---- the module ------------------------------------------------------------------- */

Module *ir_read_module(Arena *a, const char *file, const char *text) {
  Reader r = {.arena = a, .file = file};
  r.text = arena_strdup(a, text);
  r.p = r.line_start = r.text;
  r.line = 1;
  diag_add_source(r.file, r.text);
  Module *m = ARENA_NEW(a, Module);
  m->arena = a;
  ir_plan_defaults(&m->plan);
  ir_recipe_defaults(&m->recipe);
  r.m = m;
  bool ok = true, header = false, results = false;
  int before = diag_errors();
  const char *graph_at = NULL;
  while (ok && *r.p) {
    rd_ws(&r);
    const char *at = r.p;
    if (rd_eol(&r)) {
      rd_skip_line(&r);
    } else if (rd_keyword(&r, "module")) {
      if (header || graph_at) ok = rd_fail(&r, at, "a second `module` line");
      header = true;
      m->name = rd_token(&r, "");
      if (ok && !m->name) ok = rd_fail(&r, r.p, "expected the module's name");
      ok = ok && rd_end_line(&r, NULL);
    } else if (rd_keyword(&r, "topology") || rd_keyword(&r, "plan") || rd_keyword(&r, "recipe")) {
      if (!header || graph_at) ok = rd_fail(&r, at, "a %.*s line belongs in the module header, before the graph",
                                            (int)(r.p - at), at);
      ok = ok && rd_header_line(&r, at);
    } else if (rd_keyword(&r, "graph")) {
      if (graph_at) ok = rd_fail(&r, at, "a second graph (one graph per file; split --dump-ir=after:all dumps)");
      graph_at = at;
      m->graph = ir_graph_new(a, NULL);
      rd_ws(&r);
      const char *brace = r.p;
      ok = ok && rd_expect(&r, '{') && rd_end_line(&r, NULL) && parse_graph(&r, m->graph, brace);
    } else if (rd_keyword(&r, "results")) {
      if (!graph_at || results) ok = rd_fail(&r, at, "`results:` comes once, after the graph");
      results = true;
      ok = ok && rd_expect(&r, ':') && parse_results(&r);
    } else if (rd_keyword(&r, "parameters") || rd_keyword(&r, "flops")) { /* reports: skipped */
      rd_skip_line(&r);
      while (*r.p == ' ') rd_skip_line(&r);
    } else {
      ok = rd_fail(&r, at, "expected `module`, `graph {` or `results:`, found %s", rd_found(&r));
    }
  }
  if (ok && !graph_at) ok = rd_fail(&r, r.p, "no `graph { ... }` in the input");
  ptrmap_free(&r.values);
  if (!ok || diag_errors() != before) return NULL;
  if (!ir_verify(m->graph, "the IR reader")) {
    error_at((SrcLoc){r.file, 1, 1}, "the graph read from %s is not valid IR (the verifier's messages are above)",
             file);
    return NULL;
  }
  return m;
}
