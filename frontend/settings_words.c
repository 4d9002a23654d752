/* frontend/settings_words.c — the words of a settings line (see settings_words.h): typed values,
 * quantities with units, a block's keys walked once each. */
#include "settings_words.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"

Word *sw_peek(Cur *c) { return c->i < c->w->n ? (Word *)c->w->v[c->i] : NULL; }
Word *sw_peek2(Cur *c) { return c->i + 1 < c->w->n ? (Word *)c->w->v[c->i + 1] : NULL; }
SrcLoc sw_here(Cur *c) {
  Word *w = sw_peek(c);
  return w ? w->loc : c->end;
}

bool sw_is_ident(const Word *w, const char *s) { return w && w->kind == W_IDENT && strcmp(w->s, s) == 0; }

static const char *describe(Fe *fe, const Word *w) {
  if (!w) return "end of line";
  switch (w->kind) {
  case W_NUM: return arena_printf(fe->a, "`%g`", w->num);
  case W_IDENT: return arena_printf(fe->a, "`%s`", w->s);
  case W_STR: return arena_printf(fe->a, "\"%s\"", w->s);
  case W_CALL: return arena_printf(fe->a, "`%s(...)`", w->s);
  case W_SLASH: return "`/`";
  }
  return "?";
}

void sw_expected(Cur *c, const char *key, const char *what) {
  error_at(sw_here(c), "`%s` needs %s, got %s", key, what, describe(c->fe, sw_peek(c)));
}

bool sw_get_num(Cur *c, const char *key, double *out) {
  Word *w = sw_peek(c);
  if (!w || w->kind != W_NUM || !isfinite(w->num)) {
    sw_expected(c, key, "a number");
    return false;
  }
  c->i++;
  *out = w->num;
  return true;
}

bool sw_get_int(Cur *c, const char *key, int64_t lo, int64_t hi, int64_t *out) {
  Word *w = sw_peek(c);
  if (!w || w->kind != W_NUM || w->num != floor(w->num)) {
    sw_expected(c, key, "an integer");
    return false;
  }
  if (!(w->num >= (double)lo && w->num <= (double)hi)) {
    error_at(w->loc, "`%s` must be between %lld and %lld, got %g", key, (long long)lo, (long long)hi, w->num);
    c->i++;
    return false;
  }
  c->i++;
  *out = (int64_t)w->num;
  return true;
}

bool sw_get_int32(Cur *c, const char *key, int lo, int hi, int *out) {
  int64_t v;
  if (!sw_get_int(c, key, lo, hi, &v)) return false;
  *out = (int)v;
  return true;
}

bool sw_get_string(Cur *c, const char *key, const char **out) {
  Word *w = sw_peek(c);
  if (!w || (w->kind != W_STR && w->kind != W_IDENT)) {
    sw_expected(c, key, "a string");
    return false;
  }
  c->i++;
  *out = w->s;
  return true;
}

bool sw_get_bool(Cur *c, const char *key, bool *out) {
  Word *w = sw_peek(c);
  if (w && w->kind == W_NUM && (w->num == 0 || w->num == 1)) {
    c->i++;
    *out = w->num == 1;
    return true;
  }
  static const char *const yes[] = {"on", "true", "yes"}, *const no[] = {"off", "false", "no"};
  for (int i = 0; w && w->kind == W_IDENT && i < 3; i++) {
    if (strcmp(w->s, yes[i]) == 0 || strcmp(w->s, no[i]) == 0) {
      c->i++;
      *out = strcmp(w->s, yes[i]) == 0;
      return true;
    }
  }
  sw_expected(c, key, "on or off");
  return false;
}

/* One of names[] (an identifier or a call of that name); returns its index or -1. */
int sw_get_choice(Cur *c, const char *key, const char *const *names, int n) {
  Word *w = sw_peek(c);
  if (w && (w->kind == W_IDENT || w->kind == W_CALL)) {
    for (int i = 0; i < n; i++)
      if (strcmp(w->s, names[i]) == 0) {
        c->i++;
        return i;
      }
    const char *what = "one of";
    for (int i = 0; i < n; i++) what = arena_printf(c->fe->a, "%s%s %s", what, i ? (i == n - 1 ? " or" : ",") : "", names[i]);
    sw_expected(c, key, what);
    const char *hint = diag_nearest(w->s, names, n);
    if (hint) note("did you mean `%s`?", hint);
    return -1;
  }
  const char *what = "one of";
  for (int i = 0; i < n; i++) what = arena_printf(c->fe->a, "%s%s %s", what, i ? (i == n - 1 ? " or" : ",") : "", names[i]);
  sw_expected(c, key, what);
  return -1;
}

/* ---- quantities ---------------------------------------------------------------- */
static const struct {
  const char *name;
  QCat cat; /* Q_BYTES units also make rates with "/s"; bit units only make rates */
  double f;
  bool bits;
} units[] = {
    {"B", Q_BYTES, 1, false},         {"KB", Q_BYTES, 1e3, false},     {"MB", Q_BYTES, 1e6, false},
    {"GB", Q_BYTES, 1e9, false},      {"TB", Q_BYTES, 1e12, false},    {"KiB", Q_BYTES, 1024.0, false},
    {"MiB", Q_BYTES, 1048576.0, false}, {"GiB", Q_BYTES, 1073741824.0, false},
    {"TiB", Q_BYTES, 1099511627776.0, false}, {"bit", Q_BYTES, 0.125, true}, {"Kbit", Q_BYTES, 125.0, true},
    {"Mbit", Q_BYTES, 125e3, true},   {"Gbit", Q_BYTES, 125e6, true},  {"Tbit", Q_BYTES, 125e9, true},
    {"FLOPS", Q_FLOPS, 1, false},     {"GFLOPS", Q_FLOPS, 1e9, false}, {"TFLOPS", Q_FLOPS, 1e12, false},
    {"PFLOPS", Q_FLOPS, 1e15, false}, {"s", Q_TIME, 1, false},         {"ms", Q_TIME, 1e-3, false},
    {"us", Q_TIME, 1e-6, false},      {"ns", Q_TIME, 1e-9, false},
};
#define NUNITS ((int)(sizeof units / sizeof units[0]))

static const char *const qexample[] = {"a size (e.g. `40 GiB`)", "a bandwidth (e.g. `600 GB/s`)",
                                       "a compute rate (e.g. `312 TFLOPS`)", "a time (e.g. `2 us`)"};

static int find_unit(const char *s) {
  for (int i = 0; i < NUNITS; i++)
    if (strcmp(units[i].name, s) == 0) return i;
  return -1;
}

bool sw_get_quantity(Cur *c, const char *key, QCat cat, double *out) {
  Word *w = sw_peek(c);
  double v;
  const char *unit = NULL;
  SrcLoc uloc = sw_here(c), vloc = sw_here(c);
  if (w && w->kind == W_IDENT && w->s[0] >= '0' && w->s[0] <= '9') { /* 40GiB written without a blank */
    char *end;
    v = strtod(w->s, &end);
    unit = end;
    c->i++;
  } else if (w && w->kind == W_NUM && isfinite(w->num)) {
    v = w->num;
    c->i++;
    Word *u = sw_peek(c);
    if (u && u->kind == W_IDENT && find_unit(u->s) < 0) { /* a misspelt unit, or the next key */
      const char *names[NUNITS];
      for (int i = 0; i < NUNITS; i++) names[i] = units[i].name;
      if (diag_nearest(u->s, names, NUNITS) && (cat != Q_BYTES || strlen(u->s) > 1)) {
        unit = u->s;
        uloc = u->loc;
        c->i++;
      }
    } else if (u && u->kind == W_IDENT) {
      unit = u->s;
      uloc = u->loc;
      c->i++;
    }
  } else {
    sw_expected(c, key, qexample[cat]);
    return false;
  }
  bool rate = false;
  if (unit && sw_peek(c) && sw_peek(c)->kind == W_SLASH) {
    c->i++;
    if (!sw_is_ident(sw_peek(c), "s")) {
      error_at(sw_here(c), "`%s`: expected `s` after `%s/`", key, unit);
      return false;
    }
    c->i++;
    rate = true;
  }
  if (!(v > 0)) { /* a size, rate or time: 0 or less was read as "not given" (the cost model's default) */
    error_at(vloc, "`%s` must be positive, got %g%s%s%s", key, v, unit ? " " : "", unit ? unit : "", rate ? "/s" : "");
    return false;
  }
  if (!unit) {
    if (cat == Q_BYTES) { /* a plain number of bytes */
      *out = v;
      return true;
    }
    error_at(uloc, "`%s` needs a unit: %s", key, qexample[cat]);
    return false;
  }
  int u = find_unit(unit);
  if (u < 0) {
    const char *names[NUNITS];
    for (int i = 0; i < NUNITS; i++) names[i] = units[i].name;
    error_at(uloc, "unknown unit `%s`", unit);
    const char *hint = diag_nearest(unit, names, NUNITS);
    if (hint) note("did you mean `%s`?", hint);
    return false;
  }
  QCat got = rate ? Q_RATE : units[u].cat;
  if (rate && units[u].cat != Q_BYTES) got = Q_TIME; /* nonsense like TFLOPS/s: reported below */
  if (!rate && units[u].bits) got = Q_RATE; /* Gbit alone: reported below */
  if (got != cat || (rate && units[u].cat != Q_BYTES) || (!rate && units[u].bits)) {
    error_at(uloc, "`%s` needs %s, got `%s%s`", key, qexample[cat], unit, rate ? "/s" : "");
    return false;
  }
  *out = v * units[u].f;
  return true;
}

/* Reports an unknown key with a hint from keys[]. */
void sw_unknown_key(Cur *c, const Word *w, const char *block, const char *const *keys) {
  if (w->kind != W_IDENT && w->kind != W_CALL) {
    error_at(w->loc, "expected a %s setting, got %s", block, describe(c->fe, w));
    return;
  }
  int n = 0;
  while (keys[n]) n++;
  error_at(w->loc, "unknown %s setting `%s`", block, w->s);
  const char *hint = diag_nearest(w->s, keys, n);
  if (hint) note("did you mean `%s`?", hint);
}

/* The block that ends the line, for keys that take one. */
const PtrVec *sw_take_block(Cur *c, const char *key) {
  if (!c->st || !c->st->has_block) {
    error_at(c->end, "`%s` needs a { ... } block", key);
    return NULL;
  }
  if (c->i != c->w->n) {
    error_at(sw_here(c), "unexpected %s before the block of `%s`", describe(c->fe, sw_peek(c)), key);
    c->i = c->w->n;
  }
  c->block_used = true;
  return &c->st->block;
}

static void finish_line(Cur *c) {
  if (c->st && c->st->has_block && !c->block_used) error_at(c->st->block_loc, "unexpected block");
}

/* A field that two keys set (`lr` and `adamw(lr: ..)`, `ckpt_every` and `checkpoint every`,
 * `interleave` and `interleaved(v: ..)`, `offload` and `zero N offload`, ...) is set once in the
 * file, by either (the second silently replaced the first); -D (DIAG_CMDLINE) overrides it. True, after
 * the error, when the file set it before. */
bool sw_set_twice(Cur *c, const char *field, SrcLoc at) {
  Fe *fe = c->fe;
  if (!at.file || diag_loc_is_cmdline(at)) return false; /* -D overrides the file's */
  for (int i = 0; i < fe->nset; i++)
    if (strcmp(fe->set[i].field, field) == 0) {
      const SrcLoc *f = &fe->set[i].at;
      error_at(at, "`%s` is set twice", field);
      note("the first is at %s:%d:%d; keep one (-D %s=... overrides the file's)", f->file, f->line, f->col, field);
      return true;
    }
  if (fe->nset < (int)(sizeof fe->set / sizeof fe->set[0])) {
    fe->set[fe->nset].field = field;
    fe->set[fe->nset++].at = at;
  }
  return false;
}

/* Walks every line of a block, calling fn on each key in turn. block: the block's name, where each
 * key may be set once (a second `micro_batch`, or a device's
 * second `memory`, silently replaced the first). */
void sw_walk(Fe *fe, const PtrVec *lines, KeyFn fn, void *ctx, const char *block) {
  enum { SEEN_MAX = 64 };
  const Word *seen[SEEN_MAX]; /* the keys set so far without an error */
  int nseen = 0;
  for (int l = 0; l < lines->n; l++) {
    const Setting *st = lines->v[l];
    Cur c = {fe, &st->words, 0, st->loc, st, false};
    while (c.i < c.w->n) {
      Word *k = sw_peek(&c);
      c.end = k->loc;
      c.i++;
      int before = diag_errors();
      const Word *first = NULL;
      for (int i = 0; block && k->kind == W_IDENT && i < nseen && !first; i++)
        if (strcmp(seen[i]->s, k->s) == 0) first = seen[i];
      if (first) {
        error_at(k->loc, "`%s` is set twice in `%s`", k->s, block);
        bool defines = strcmp(block, "parallel") == 0 || strcmp(block, "train") == 0; /* -D reaches these */
        note("the first is at %s:%d:%d; keep one%s%s%s", first->loc.file, first->loc.line, first->loc.col,
             defines ? " (-D " : "", defines ? k->s : "", defines ? "=... overrides the file's)" : "");
        break;
      }
      fn(&c, k, ctx);
      if (diag_errors() != before) break; /* the rest of the line is unreliable */
      if (block && k->kind == W_IDENT && nseen < SEEN_MAX) seen[nseen++] = k;
    }
    finish_line(&c);
  }
}
