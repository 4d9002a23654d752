/* ir/read_attrs.c — the textual IR reader's pieces of one node line (ir/read.c reads the lines,
 * the regions and the module): value types (dtype, shape, sharding), value references by printed
 * number, and the attributes, checked and applied to the node's Attrs per op. Private to the reader
 * (ir/read_impl.h).
 */
#include <string.h>

#include "diag.h"
#include "ptrmap.h"
#include "read_impl.h"

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
bool rd_type(Reader *r, Value *v) {
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
bool rd_num(Reader *r, int64_t *n) {
  rd_ws(r);
  if (*r->p != '%') return rd_fail(r, r->p, "expected a value (%%N), found %s", rd_found(r));
  r->p++;
  if (*r->p < '0' || *r->p > '9') return rd_fail(r, r->p, "expected a value number after '%%'");
  return rd_i64(r, n, 0, 1 << 30, "a value number");
}

/* A use of %N in graph g: defined, in scope, not an output of a region still open. */
bool rd_use(Reader *r, Graph *g, Value **out) {
  rd_ws(r);
  const char *at = r->p;
  int64_t n;
  if (!rd_num(r, &n)) return false;
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

bool rd_define(Reader *r, const char *at, int64_t n, Value *v) {
  intptr_t x;
  if (ptrmap_get(&r->values, num_key(n), &x)) return rd_fail(r, at, "%%%lld is defined twice", (long long)n);
  ptrmap_put(&r->values, num_key(n), (intptr_t)v);
  return true;
}

/* ---- attributes --------------------------------------------------------------- */


/* `"str"`, a number, `key=value` (value up to a blank, with (...) kept whole) or a word. */
bool rd_attrs(Reader *r, AttrList *al, char stop) {
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

RdAttr *rd_take(AttrList *al, const char *key) {
  for (int i = 0; i < al->n; i++)
    if (strcmp(al->a[i].key, key) == 0) {
      al->a[i].used = true;
      return &al->a[i];
    }
  return NULL;
}

/* An attribute's value parsed with the reader positioned on it (val_take ... val_end); it must use all of it. */
typedef struct {
  Reader *r;
  const char *save; /* where the reader was: val_end puts it back */
  RdAttr *a;        /* the attribute, NULL where absent */
  bool ok;          /* false where the attribute has no value (reported) */
} ValScope;

/* Takes attribute key of al and puts the reader on its value: true, then the caller parses it and closes with
 * val_end; false where there is nothing to parse, vs->ok saying whether that is well (no such attribute) or an error
 * (one without a value: reported). So a reader of one attribute is
 * `val_take(r, al, key, &vs) ? val_end(&vs, parse(r, ...)) : vs.ok`. */
static bool val_take(Reader *r, AttrList *al, const char *key, ValScope *vs) {
  RdAttr *a = rd_take(al, key);
  *vs = (ValScope){.r = r, .save = r->p, .a = a, .ok = true};
  if (!a) return false;
  if (!a->val) return vs->ok = rd_fail(r, a->at, "attribute '%s' needs a value (%s=...)", a->key, a->key);
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
  ValScope vs;
  return val_take(r, al, key, &vs) ? val_end(&vs, rd_i64(r, out, lo, hi, key)) : vs.ok;
}

static bool attr_int(Reader *r, AttrList *al, const char *key, int *out, int lo, int hi) {
  int64_t v = *out;
  if (!attr_i64(r, al, key, &v, lo, hi)) return false;
  *out = (int)v;
  return true;
}

static bool attr_blocks(Reader *r, AttrList *al, const char *key, int *out) {
  ValScope vs;
  return val_take(r, al, key, &vs) ? val_end(&vs, rd_blocks(r, out)) : vs.ok;
}

static bool attr_bool(Reader *r, AttrList *al, const char *key, bool *out) {
  int v = *out;
  if (!attr_int(r, al, key, &v, 0, 1)) return false;
  *out = v;
  return true;
}

static bool attr_f64(Reader *r, AttrList *al, const char *key, double *out) {
  ValScope vs;
  return val_take(r, al, key, &vs) ? val_end(&vs, rd_f64(r, out, key)) : vs.ok;
}

static bool attr_axis(Reader *r, AttrList *al, const char *key, int *out) {
  ValScope vs;
  return val_take(r, al, key, &vs) ? val_end(&vs, rd_axis(r, out)) : vs.ok;
}

static bool attr_flag(AttrList *al, const char *key, bool *out) {
  RdAttr *a = rd_take(al, key);
  if (a && !a->val) *out = true;
  if (a && a->val) a->used = false; /* reported as unexpected below */
  return true;
}

/* init=zeros|ones|normal(a, b)|uniform(a, b)|const(a) */
static bool attr_init(Reader *r, AttrList *al, Attrs *at) {
  static const char *const inits[] = {"zeros", "ones", "normal", "uniform", "const"};
  ValScope vs;
  if (!val_take(r, al, "init", &vs)) return vs.ok;
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
bool rd_apply_attrs(Reader *r, Node *n, AttrList *al, const char *op_at) {
  Attrs *a = &n->a;
  bool ok = true;
  const int64_t BIG = (int64_t)1 << 48;
  switch (n->op) {
  case OP_INPUT: case OP_STATE: case OP_PARAM: {
    RdAttr *s = rd_take(al, "name");
    if (!s) return rd_fail(r, op_at, "%s needs a \"name\"", ir_ops[n->op].name);
    a->name = s->str;
    n->out[0]->name = s->str;
    if (n->op == OP_PARAM) ok = attr_init(r, al, a);
    break;
  }
  case OP_CONST: case OP_SCALE: case OP_ADD_SCALAR: {
    ValScope vs;
    ok = val_take(r, al, "scalar", &vs) ? val_end(&vs, rd_f64(r, &a->scalar, "a number")) : vs.ok;
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
    ok = attr_bool(r, al, "ta", &a->ta) && attr_bool(r, al, "tb", &a->tb) && attr_flag(al, "cb", &a->cb) && attr_int(r, al, "epilogue", &a->epilogue, 0, 5) &&
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
    RdAttr *v = rd_take(al, "vocab"); /* `vocab over=AXIS`: the vocab dim is split over AXIS */
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
    ValScope vs;
    int k = 0;
    if (ok) ok = val_take(r, al, "reduce", &vs) ? val_end(&vs, rd_choice(r, &k, reds, 3, "sum, avg or max")) : vs.ok;
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
    ValScope vs;
    DType dt = n->out[0]->dtype;
    if (!(val_take(r, al, "to", &vs) ? val_end(&vs, parse_dtype(r, &dt)) : vs.ok)) return false;
    if (dt != n->out[0]->dtype)
      return rd_fail(r, vs.a->val, "cast to=%s but its value is %s", ir_dtype_name(dt), ir_dtype_name(n->out[0]->dtype));
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
