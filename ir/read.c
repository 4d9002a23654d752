/* ir/read.c — the textual IR reader (see ir/read.h; the format is in docs/ir.md).
 *
 * A line-oriented recursive-descent parser over the text ir/print.c writes. Values are
 * looked up by their printed number; a region's body is a nested graph parsed between its
 * header line's `{` and the matching `}`. The first error is reported with its location
 * and the reader stops (no cascades); every check the builder would die on (arity, scope,
 * ranks) is made first, so no input aborts. The module header is read by ir/read_header.c,
 * the tokens by ir/read_lex.c.
 */
#include "read.h"

#include <string.h>

#include "diag.h"
#include "ptrmap.h"
#include "read_impl.h"

#define MAX_ATTRS 16    /* attributes on one node */
#define MAX_NUMEL (1LL << 40) /* elements in one value: keeps byte counts (x inputs) far from overflow */

/* ---- types -------------------------------------------------------------------- */

static int sym_index(Reader *r, const char *name) {
  Module *m = r->m;
  for (int i = 0; i < m->nsyms; i++)
    if (strcmp(m->syms[i], name) == 0) return i;
  arena_grow(r->arena, (void **)&m->syms, &r->capsyms, m->nsyms + 1, sizeof(char *));
  m->syms[m->nsyms] = name;
  return m->nsyms++;
}

static const char *const dtype_names[DT_COUNT] = {"f32", "bf16", "f16", "f64", "i32", "i64"};

static bool parse_dtype(Reader *r, DType *dt) {
  int i;
  if (!rd_choice(r, &i, dtype_names, DT_COUNT, "a dtype (f32, bf16, f16, f64, i32, i64)")) return false;
  *dt = (DType)i;
  return true;
}

/* A block count (2..253), `zigzag` (RT_BLOCKS_ZIGZAG, context parallelism's split) or `stages`
 * (RT_BLOCKS_STAGES, uneven pipeline stages). */
static bool rd_blocks(Reader *r, int *out) {
  const char *at = r->p;
  const char *w = *r->p >= 'a' && *r->p <= 'z' ? rd_word(r) : NULL;
  if (w) {
    if (strcmp(w, "zigzag") != 0 && strcmp(w, "stages") != 0)
      return rd_fail(r, at, "expected a block count, zigzag or stages, found '%s'", w);
    *out = strcmp(w, "zigzag") == 0 ? RT_BLOCKS_ZIGZAG : RT_BLOCKS_STAGES;
    return true;
  }
  return rd_int(r, out, 2, RT_BLOCKS_STAGES - 1, "a block count");
}

/* S(axis)@dim[/blocks] or P(axis), into s; the shape's rank bounds dim. */
static bool parse_shard(Reader *r, Sharding *s, int rank) {
  rd_ws(r);
  const char *at = r->p;
  bool split = *r->p == 'S', partial = *r->p == 'P';
  if (!split && !partial) return rd_fail(r, at, "expected S(axis)@dim or P(axis), found %s", rd_found(r));
  r->p++;
  int ax;
  if (!rd_expect(r, '(') || !rd_axis(r, &ax) ||
      !rd_expect(r, ')'))
    return false;
  if (partial) {
    s->partial |= (uint8_t)(1u << ax);
    return true;
  }
  int d, blocks = 1;
  if (!rd_expect(r, '@')) return false;
  const char *dat = r->p;
  if (!rd_int(r, &d, 0, IR_MAX_RANK - 1, "a dim")) return false;
  if (d >= rank) return rd_fail(r, dat, "sharded dim %d of a rank-%d value", d, rank);
  if (s->split[d] >= 0) return rd_fail(r, dat, "dim %d is split twice", d);
  if (rd_eat(r, '/') && !rd_blocks(r, &blocks)) return false;
  if (rd_eat(r, '>')) { /* an inner split: >S(axis) */
    int in;
    const char *iat = r->p;
    if (!rd_expect(r, 'S') || !rd_expect(r, '(') || !rd_axis(r, &in) || !rd_expect(r, ')')) return false;
    if (in == ax) return rd_fail(r, iat, "dim %d split twice over one mesh axis", d);
    s->inner[d] = (int8_t)in;
  }
  s->split[d] = (int8_t)ax;
  s->blocks[d] = (uint8_t)(blocks > 1 ? blocks : 0);
  return true;
}

/* dtype[dims]{shardings} */
static bool parse_type(Reader *r, Value *v) {
  if (!parse_dtype(r, &v->dtype) || !rd_expect(r, '[')) return false;
  Shape s = ir_scalar_shape();
  int64_t numel = 1;
  if (!rd_eat(r, ']')) {
    do {
      rd_ws(r);
      const char *at = r->p;
      if (s.rank == IR_MAX_RANK) return rd_fail(r, at, "more than %d dims", IR_MAX_RANK);
      s.sym[s.rank] = -1;
      const char *sym = rd_word(r);
      if (sym) {
        if (!rd_expect(r, '=')) return false;
        s.sym[s.rank] = (int16_t)sym_index(r, sym);
      }
      if (!rd_i64(r, &s.dim[s.rank], 1, MAX_NUMEL, "a dim size")) return false;
      if (numel > MAX_NUMEL / s.dim[s.rank]) return rd_fail(r, at, "more than 2^40 elements");
      numel *= s.dim[s.rank++];
    } while (rd_eat(r, ','));
    if (!rd_expect(r, ']')) return false;
  }
  v->shape = s;
  v->sharding = ir_replicated();
  if (rd_eat(r, '{')) {
    do
      if (!parse_shard(r, &v->sharding, s.rank)) return false;
    while (rd_eat(r, ','));
    if (!rd_expect(r, '}')) return false;
  }
  v->host = false;
  if (rd_eat(r, '@')) { /* memory space */
    const char *at = r->p, *w = rd_word(r);
    if (!w || strcmp(w, "host") != 0) return rd_fail(r, at, "expected `host` after '@' (a value's memory space)");
    v->host = true;
  }
  return true;
}

/* ---- values ----------------------------------------------------------------- */

static const void *num_key(int64_t n) { return (const void *)(uintptr_t)(n + 1); }

/* %N: the number (the caller defines or looks it up). */
static bool parse_num(Reader *r, int64_t *n) {
  rd_ws(r);
  if (*r->p != '%') return rd_fail(r, r->p, "expected a value (%%N), found %s", rd_found(r));
  r->p++;
  if (*r->p < '0' || *r->p > '9') return rd_fail(r, r->p, "expected a value number after '%%'");
  return rd_i64(r, n, 0, 1 << 30, "a value number");
}

/* A use of %N in graph g: defined, in scope, not an output of a region still open. */
static bool parse_use(Reader *r, Graph *g, Value **out) {
  rd_ws(r);
  const char *at = r->p;
  int64_t n;
  if (!parse_num(r, &n)) return false;
  intptr_t x;
  if (!ptrmap_get(&r->values, num_key(n), &x)) return rd_fail(r, at, "%%%lld is not defined", (long long)n);
  Value *v = (Value *)x;
  bool visible = false;
  for (const Graph *s = g; s && !visible; s = s->parent) visible = v->def->graph == s;
  if (!visible) return rd_fail(r, at, "%%%lld is defined inside another region's body", (long long)n);
  for (int i = 0; i < r->depth; i++)
    if (r->open[i] == v->def) return rd_fail(r, at, "%%%lld is an output of the region it is used in", (long long)n);
  *out = v;
  return true;
}

static bool define(Reader *r, const char *at, int64_t n, Value *v) {
  intptr_t x;
  if (ptrmap_get(&r->values, num_key(n), &x)) return rd_fail(r, at, "%%%lld is defined twice", (long long)n);
  ptrmap_put(&r->values, num_key(n), (intptr_t)v);
  return true;
}

/* ---- attributes --------------------------------------------------------------- */

typedef struct {
  const char *key; /* "name" for a string, "scalar" for a bare number, else the word */
  const char *val; /* where the value starts in the text (NULL: a bare flag) */
  const char *at;  /* where the attribute starts (for errors) */
  const char *str; /* a string's contents */
  bool used;       /* taken by the op */
} RdAttr;

typedef struct {
  RdAttr a[MAX_ATTRS];
  int n;
} AttrList;

/* `"str"`, a number, `key=value` (value up to a blank, with (...) kept whole) or a word. */
static bool parse_attrs(Reader *r, AttrList *al, char stop) {
  while (!rd_eol(r) && *r->p != stop) {
    if (al->n == MAX_ATTRS) return rd_fail(r, r->p, "more than %d attributes", MAX_ATTRS);
    RdAttr *a = &al->a[al->n++];
    *a = (RdAttr){.at = r->p};
    char c = *r->p;
    if (c == '"') {
      const char *s = ++r->p;
      while (*r->p && *r->p != '"' && *r->p != '\n') r->p++;
      if (*r->p != '"') return rd_fail(r, a->at, "unterminated string");
      a->key = "name";
      a->str = arena_strndup(r->arena, s, (size_t)(r->p++ - s));
    } else if ((c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || rd_keyword(r, "inf") ||
               rd_keyword(r, "nan")) {
      r->p = a->at;
      a->key = "scalar";
      a->val = r->p;
      double d;
      if (!rd_f64(r, &d, "a number")) return false;
    } else {
      a->key = rd_word(r);
      if (!a->key) return rd_fail(r, a->at, "expected an attribute, found %s", rd_found(r));
      if (*r->p == '=') {
        a->val = ++r->p;
        int paren = 0;
        while (*r->p && *r->p != '\n' && ((*r->p != ' ' && *r->p != '\t') || paren)) {
          paren += *r->p == '(';
          paren -= *r->p == ')';
          r->p++;
        }
        if (r->p == a->val) return rd_fail(r, a->val, "expected a value after '%s='", a->key);
      }
    }
    for (int i = 0; i < al->n - 1; i++)
      if (strcmp(al->a[i].key, a->key) == 0) return rd_fail(r, a->at, "attribute '%s' given twice", a->key);
  }
  return true;
}

static RdAttr *take(AttrList *al, const char *key) {
  for (int i = 0; i < al->n; i++)
    if (strcmp(al->a[i].key, key) == 0) {
      al->a[i].used = true;
      return &al->a[i];
    }
  return NULL;
}

/* Parses an attribute's value with the reader positioned on it; it must use all of it. */
typedef struct {
  Reader *r;
  const char *save;
} ValScope;

static bool val_begin(Reader *r, RdAttr *a, ValScope *vs) {
  vs->r = r;
  vs->save = r->p;
  if (!a->val) return rd_fail(r, a->at, "attribute '%s' needs a value (%s=...)", a->key, a->key);
  r->p = a->val;
  return true;
}

static bool val_end(ValScope *vs, bool ok) {
  Reader *r = vs->r;
  if (ok && *r->p && *r->p != ' ' && *r->p != '\t' && *r->p != '\n' && *r->p != '#')
    ok = rd_fail(r, r->p, "unexpected %s in an attribute value", rd_found(r));
  r->p = vs->save;
  return ok;
}

static bool attr_i64(Reader *r, AttrList *al, const char *key, int64_t *out, int64_t lo, int64_t hi) {
  RdAttr *a = take(al, key);
  ValScope vs;
  if (!a) return true;
  if (!val_begin(r, a, &vs)) return false;
  return val_end(&vs, rd_i64(r, out, lo, hi, key));
}

static bool attr_int(Reader *r, AttrList *al, const char *key, int *out, int lo, int hi) {
  int64_t v = *out;
  if (!attr_i64(r, al, key, &v, lo, hi)) return false;
  *out = (int)v;
  return true;
}

static bool attr_blocks(Reader *r, AttrList *al, const char *key, int *out) {
  RdAttr *a = take(al, key);
  ValScope vs;
  if (!a) return true;
  if (!val_begin(r, a, &vs)) return false;
  return val_end(&vs, rd_blocks(r, out));
}

static bool attr_bool(Reader *r, AttrList *al, const char *key, bool *out) {
  int v = *out;
  if (!attr_int(r, al, key, &v, 0, 1)) return false;
  *out = v;
  return true;
}

static bool attr_f64(Reader *r, AttrList *al, const char *key, double *out) {
  RdAttr *a = take(al, key);
  ValScope vs;
  if (!a) return true;
  if (!val_begin(r, a, &vs)) return false;
  return val_end(&vs, rd_f64(r, out, key));
}

static bool attr_axis(Reader *r, AttrList *al, const char *key, int *out) {
  RdAttr *a = take(al, key);
  ValScope vs;
  if (!a) return true;
  if (!val_begin(r, a, &vs)) return false;
  return val_end(&vs, rd_axis(r, out));
}

static bool attr_flag(AttrList *al, const char *key, bool *out) {
  RdAttr *a = take(al, key);
  if (a && !a->val) *out = true;
  if (a && a->val) a->used = false; /* reported as unexpected below */
  return true;
}

/* init=zeros|ones|normal(a, b)|uniform(a, b)|const(a) */
static bool attr_init(Reader *r, AttrList *al, Attrs *at) {
  static const char *const inits[] = {"zeros", "ones", "normal", "uniform", "const"};
  RdAttr *a = take(al, "init");
  ValScope vs;
  if (!a) return true;
  if (!val_begin(r, a, &vs)) return false;
  int k;
  bool ok = rd_choice(r, &k, inits, 5, "an init (zeros, ones, normal, uniform, const)");
  if (ok) at->init = (InitKind)k;
  if (ok && (k == INIT_NORMAL || k == INIT_UNIFORM))
    ok = rd_expect(r, '(') && rd_f64(r, &at->init_a, "a number") && rd_expect(r, ',') &&
         rd_f64(r, &at->init_b, "a number") && rd_expect(r, ')');
  else if (ok && k == INIT_CONST)
    ok = rd_expect(r, '(') && rd_f64(r, &at->init_a, "a number") && rd_expect(r, ')');
  return val_end(&vs, ok);
}

/* The attributes put_attrs (ir/print.c) prints for n's op; anything else is an error. */
static bool apply_attrs(Reader *r, Node *n, AttrList *al, const char *op_at) {
  Attrs *a = &n->a;
  bool ok = true;
  const int64_t BIG = (int64_t)1 << 48;
  switch (n->op) {
  case OP_INPUT: case OP_STATE: case OP_PARAM: {
    RdAttr *s = take(al, "name");
    if (!s) return rd_fail(r, op_at, "%s needs a \"name\"", ir_ops[n->op].name);
    a->name = s->str;
    n->out[0]->name = s->str;
    if (n->op == OP_PARAM) ok = attr_init(r, al, a);
    break;
  }
  case OP_CONST: case OP_SCALE: case OP_ADD_SCALAR: {
    RdAttr *s = take(al, "scalar");
    ValScope vs;
    if (s) ok = val_begin(r, s, &vs) && val_end(&vs, rd_f64(r, &a->scalar, "a number"));
    break;
  }
  case OP_IOTA: ok = attr_i64(r, al, "start", &a->start, -BIG, BIG); break;
  case OP_AXIS_INDEX: ok = attr_axis(r, al, "axis", &a->mesh_axis); break;
  case OP_SLICE: case OP_PAD:
    ok = attr_int(r, al, "axis", &a->axis, 0, IR_MAX_RANK - 1) && attr_i64(r, al, "start", &a->start, 0, BIG) &&
         attr_i64(r, al, "len", &a->len, 0, BIG);
    break;
  case OP_CONCAT:
    ok = attr_int(r, al, "axis", &a->axis, 0, IR_MAX_RANK - 1) && attr_flag(al, "sumsq_fused", &a->sumsq_fused);
    break;
  case OP_SUMSQ: ok = attr_flag(al, "sumsq_fused", &a->sumsq_fused); break;
  case OP_MATMUL:
    ok = attr_bool(r, al, "ta", &a->ta) && attr_bool(r, al, "tb", &a->tb) && attr_int(r, al, "epilogue", &a->epilogue, 0, 5) &&
         attr_int(r, al, "hfuse", &a->hfuse, 0, 2);
    break;
  case OP_LAYERNORM: case OP_RMSNORM: ok = attr_f64(r, al, "eps", &a->eps); break;
  case OP_LAYERNORM_BWD: case OP_RMSNORM_BWD: ok = attr_f64(r, al, "eps", &a->eps) && attr_flag(al, "normres", &a->normres); break;
  case OP_ADD: ok = attr_flag(al, "normres", &a->normres); break;
  case OP_ROPE: case OP_ROPE_AT:
    ok = attr_int(r, al, "heads", &a->heads, 1, 1 << 20) && attr_f64(r, al, "theta", &a->theta) &&
         attr_i64(r, al, "start", &a->start, 0, BIG) && attr_flag(al, "inverse", &a->inverse);
    break;
  case OP_ATTN_COMBINE: ok = attr_int(r, al, "heads", &a->heads, 1, 1 << 20); break;
  case OP_SDPA: case OP_SDPA_BWD: case OP_ATTN_BLOCK: case OP_ATTN_BLOCK_BWD:
    ok = attr_int(r, al, "heads", &a->heads, 1, 1 << 20) && attr_int(r, al, "kv_heads", &a->kv_heads, 1, 1 << 20) &&
         attr_bool(r, al, "causal", &a->causal);
    break;
  case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_BWD: case OP_CE_LOSS:
    ok = attr_i64(r, al, "len", &a->len, 0, BIG) && attr_flag(al, "fused_bwd", &a->fused_bwd);
    break;
  case OP_CE_MAX: case OP_CE_SUMS: case OP_CE_GRAD: case OP_EMBED: case OP_EMBED_BWD: {
    if (n->op != OP_EMBED && n->op != OP_EMBED_BWD) ok = attr_i64(r, al, "len", &a->len, 0, BIG);
    RdAttr *v = take(al, "vocab"); /* `vocab over=AXIS`: the vocab dim is split over AXIS */
    if (ok && v) {
      if (v->val) return rd_fail(r, v->at, "'vocab' takes no value (vocab over=AXIS)");
      a->sharded = true;
      a->mesh_axis = -1;
      ok = attr_axis(r, al, "over", &a->mesh_axis);
      if (ok && a->mesh_axis < 0) return rd_fail(r, v->at, "'vocab' needs over=AXIS after it");
    }
    break;
  }
  case OP_SHARD_SLICE: case OP_REDUCE_SCATTER: case OP_ALL_GATHER: {
    int with = -1; /* `with=AXIS`: the group spans that axis too (ir.h mesh_with: ZeRO over dp x cp) */
    ok = attr_axis(r, al, "over", &a->mesh_axis) && attr_axis(r, al, "with", &with) &&
         attr_int(r, al, "axis", &a->axis, 0, IR_MAX_RANK - 1) && attr_blocks(r, al, "blocks", &a->blocks);
    if (ok && n->op == OP_ALL_GATHER) {
      const Node *o = n->graph->owner;
      for (int i = 0; i < al->n; i++)
        if (strcmp(al->a[i].key, "skiplast") == 0 && !al->a[i].val && (!o || o->op != OP_REPEAT))
          return rd_fail(r, al->a[i].at, "skiplast outside a repeat's body (it skips the loop's last iteration)");
      ok = attr_flag(al, "skiplast", &a->skiplast);
    }
    if (ok && with >= 0) a->mesh_with = (uint8_t)(1u << with);
    break;
  }
  case OP_SGD_UPDATE:
    ok = attr_f64(r, al, "momentum", &a->momentum) && attr_f64(r, al, "weight_decay", &a->weight_decay);
    break;
  case OP_ADAMW_UPDATE:
    ok = attr_f64(r, al, "beta1", &a->beta1) && attr_f64(r, al, "beta2", &a->beta2) &&
         attr_f64(r, al, "eps", &a->eps) && attr_f64(r, al, "weight_decay", &a->weight_decay);
    break;
  case OP_ALL_REDUCE: {
    static const char *const reds[] = {"sum", "avg", "max"};
    int with = -1; /* `with=AXIS`: the group spans that axis too (ir.h mesh_with) */
    ok = attr_axis(r, al, "over", &a->mesh_axis) && attr_axis(r, al, "with", &with);
    if (ok && with >= 0) a->mesh_with = (uint8_t)(1u << with);
    RdAttr *x = take(al, "reduce");
    ValScope vs;
    int k = 0;
    if (ok && x) ok = val_begin(r, x, &vs) && val_end(&vs, rd_choice(r, &k, reds, 3, "sum, avg or max"));
    a->reduce = (ReduceOp)k;
    break;
  }
  case OP_ALL_TO_ALL:
    ok = attr_axis(r, al, "over", &a->mesh_axis) && attr_int(r, al, "axis", &a->axis, 0, IR_MAX_RANK - 1) &&
         attr_blocks(r, al, "blocks", &a->blocks) && attr_int(r, al, "split", &a->split_axis, 0, IR_MAX_RANK - 1) &&
         attr_blocks(r, al, "split_blocks", &a->split_blocks);
    break;
  case OP_BROADCAST: ok = attr_axis(r, al, "over", &a->mesh_axis) && attr_i64(r, al, "root", &a->start, 0, 1 << 20); break;
  case OP_SEND: case OP_RECV:
    ok = attr_axis(r, al, "over", &a->mesh_axis) && attr_i64(r, al, "offset", &a->start, -(1 << 20), 1 << 20) &&
         attr_int(r, al, "tag", &a->tag, -(1 << 30), 1 << 30);
    break;
  case OP_CAST: {
    RdAttr *x = take(al, "to");
    ValScope vs;
    DType dt = n->out[0]->dtype;
    if (x && !(val_begin(r, x, &vs) && val_end(&vs, parse_dtype(r, &dt)))) return false;
    if (dt != n->out[0]->dtype)
      return rd_fail(r, x->val, "cast to=%s but its value is %s", ir_dtype_name(dt), ir_dtype_name(n->out[0]->dtype));
    break;
  }
  default: break;
  }
  for (int i = 0; ok && i < al->n; i++) /* any op: the pipeline stage that runs it (passes/pipe.c) */
    if (!strcmp(al->a[i].key, "stage")) {
      int st = 0;
      ok = attr_int(r, al, "stage", &st, 0, 1 << 16);
      n->stage = st + 1;
      break;
    }
  for (int i = 0; ok && i < al->n; i++) /* any op: the pipeline stages that run it, a mask (passes/pipe_owners.c) */
    if (!strcmp(al->a[i].key, "stages")) {
      int64_t st = 0;
      ok = attr_i64(r, al, "stages", &st, 1, INT64_MAX);
      n->stageset = (uint64_t)st;
      break;
    }
  if (!ok) return false;
  for (int i = 0; i < al->n; i++)
    if (!al->a[i].used)
      return rd_fail(r, al->a[i].at, "%s takes no attribute '%s'%s", ir_ops[n->op].name, al->a[i].key,
                     al->a[i].val || !strcmp(al->a[i].key, "name") || !strcmp(al->a[i].key, "scalar") ? "" : " here");
  return true;
}

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
    if (!define(r, outs[i].at, outs[i].num, n->out[i])) return false;
  return true;
}

/* (%a, %b | %c ...) into *ins; bar positions into seps (regions only). */
static bool parse_inputs(Reader *r, Graph *g, Value ***ins, int *nin, int *seps, int *nseps, bool region) {
  int cap = 0;
  *nin = 0;
  if (rd_eat(r, ')')) return true;
  for (;;) {
    Value *v;
    if (!parse_use(r, g, &v)) return false;
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
    if (!parse_attrs(r, &al, 0)) return false;
    RdAttr *s = take(&al, "name");
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
      if (!parse_num(r, &d->num) || !rd_expect(r, ':') || !parse_type(r, &d->v)) return false;
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
  if (!parse_attrs(r, &al, 0)) return false;
  Node *n = ir_node_new(g, (OpKind)op, nin, ins, nout, (SrcLoc){0});
  set_outputs(n, outs);
  if (!apply_attrs(r, n, &al, op_at)) return false;
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
          if (!parse_use(r, g, &v)) return false;
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
    if (!rd_expect(r, '=') || !parse_use(r, g, &v)) return false;
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
