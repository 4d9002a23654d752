/* runtime/train/ckpt_convert.c — `shardc ckpt`: what a checkpoint holds (info) and its conversion
 * between the sharded format (ckpt_shard.c) and a plain single-file one (convert), on files only:
 * no trainer, no model, no ranks.
 *
 *   shardc ckpt info DIR
 *   shardc ckpt convert SRC DST [--format single|sharded]
 *
 * sharded -> single: DST/model.safetensors (the parameters), DST/optimizer.safetensors (the
 * optimizer state) and DST/model.safetensors.index.json (the Hugging Face weight map), the trainer's
 * logical checkpoint exactly: the same names (a tensor the index marks "layers" written per layer,
 * "blocks.3.w"), order and metadata (the index's, with "part" model / optimizer), so that a trainer
 * of any layout resumes it. One tensor at a time: each is assembled from its pieces (pread, the
 * pieces checked to be disjoint, inside the tensor and covering it: ckpt_shard.c's reader) into the
 * writer's one buffer; a tensor written per layer is read once into a second buffer. Memory: at
 * most twice the largest tensor, never the checkpoint.
 * single -> sharded: DST/rank_00000.safetensors holding every entry as one piece, and DST/index.json
 * (world 1). Entries named per layer ("blocks.0.w" .. "blocks.L-1.w", L entries of one dtype and
 * shape, no tensor "blocks.w") become the stacked tensor "blocks.w" [L, ...], one piece per layer.
 * One entry at a time (pread into the writer's buffer): memory at most the largest entry.
 * DST must not exist; it is written as DST.tmp-PID and renamed into place when complete.
 * Bad input (a missing or truncated file, a malformed index or header, pieces that overlap, leave
 * a gap or lie outside their tensor, a wrong dtype or shape) is a user error naming the file and
 * the tensor, exit status 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_tool.h"
#include "files.h"

typedef struct {
  const char *name;
  int kind; /* RT_T_PARAM / RT_T_STATE */
  int dtype;
  int rank;
  int64_t dims[RT_MAX_RANK];
  int layers; /* written per layer in a single file */
} Ten;

static const RtJson *need(const RtJson *o, const char *key, int kind, const char *path, const char *what) {
  const RtJson *v = rt_json_get(o, key);
  if (!v || v->kind != kind) rt_user_error("'%s': malformed index: %s has no \"%s\" of the right type", path, what, key);
  return v;
}

/* The index's tensors, checked (names, kinds, dtypes, shapes). */
static Ten *index_tensors(const RtJson *idx, const char *path, int *n) {
  const RtJson *ts = need(idx, "tensors", RT_JSON_ARR, path, "the index");
  Ten *v = rt_xcalloc((size_t)ts->n + 1, sizeof *v);
  for (int i = 0; i < ts->n; i++) {
    const RtJson *e = ts->items[i];
    if (!e || e->kind != RT_JSON_OBJ) rt_user_error("'%s': malformed index: tensor %d is not an object", path, i);
    Ten *t = &v[i];
    t->name = need(e, "name", RT_JSON_STR, path, "a tensor")->str;
    const char *kind = need(e, "kind", RT_JSON_STR, path, t->name)->str;
    if (strcmp(kind, "param") != 0 && strcmp(kind, "state") != 0)
      rt_user_error("'%s': tensor '%s': kind \"%s\" is neither param nor state", path, t->name, kind);
    t->kind = kind[0] == 'p' ? RT_T_PARAM : RT_T_STATE;
    const char *dt = need(e, "dtype", RT_JSON_STR, path, t->name)->str;
    t->dtype = rt_dtype_from_st_name(dt);
    if (t->dtype < 0) rt_user_error("'%s': tensor '%s': unknown dtype \"%s\"", path, t->name, dt);
    const RtJson *sh = need(e, "shape", RT_JSON_ARR, path, t->name);
    if (sh->n > RT_MAX_RANK) rt_user_error("'%s': tensor '%s' has %d dims (at most %d)", path, t->name, sh->n, RT_MAX_RANK);
    t->rank = sh->n;
    int64_t bytes = (int64_t)rt_dtype_size((RtDType)t->dtype);
    for (int d = 0; d < sh->n; d++) {
      const RtJson *x = sh->items[d];
      if (!x || x->kind != RT_JSON_NUM || !x->is_int || x->inum < 0 || (x->inum > 0 && bytes > INT64_MAX / 2 / x->inum))
        rt_user_error("'%s': tensor '%s': shape entry %d is not a dimension", path, t->name, d);
      t->dims[d] = x->inum;
      bytes *= x->inum;
    }
    const RtJson *l = rt_json_get(e, "layers");
    t->layers = l && l->kind == RT_JSON_BOOL && l->num != 0 && t->rank >= 1;
  }
  *n = ts->n;
  return v;
}

static int64_t numel(const int64_t *dims, int rank) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++)
    n *= dims[d];
  return n;
}

/* The "__metadata__":{...} text of m (string values) with "part" set to part. */
static char *meta_text(const RtJson *m, const char *part, const char *path) {
  if (!m || m->kind != RT_JSON_OBJ) rt_user_error("'%s' is not a shardc checkpoint: no __metadata__", path);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) rt_user_error("open_memstream: %s", strerror(errno));
  fputs("\"__metadata__\":{", f);
  int had = 0;
  for (int i = 0; i < m->n; i++) {
    if (!m->items[i] || m->items[i]->kind != RT_JSON_STR)
      rt_user_error("'%s': metadata \"%s\" is not a string", path, m->keys[i]);
    if (i) fputc(',', f);
    rt_json_write_str(f, m->keys[i]);
    fputc(':', f);
    int is_part = !strcmp(m->keys[i], "part");
    rt_json_write_str(f, is_part ? part : m->items[i]->str);
    had |= is_part;
  }
  if (!had) rt_user_error("'%s' is not a shardc checkpoint: no \"part\" in its metadata", path);
  fputc('}', f);
  if (fclose(f) != 0) rt_user_error("building the metadata failed");
  return text;
}

static const char *meta_str(const RtJson *m, const char *key, const char *path) {
  const RtJson *v = rt_json_get(m, key);
  if (!v || v->kind != RT_JSON_STR) rt_user_error("'%s' is not a shardc checkpoint: no \"%s\" in its metadata", path, key);
  return v->str;
}

/* DST must not exist: its temp directory, made fresh. */
static char *make_tmp(const char *dst) {
  struct stat sb;
  if (stat(dst, &sb) == 0) rt_user_error("'%s' exists: shardc ckpt convert writes a new directory", dst);
  char *tmp = rt_xprintf("%s.tmp-%d", dst, (int)getpid());
  if (mkdir(tmp, 0755) != 0) rt_user_error("cannot create directory '%s': %s", tmp, strerror(errno));
  return tmp;
}

static void commit(const char *tmp, const char *dst) {
  rt_fsync_path(tmp, 1);
  if (rename(tmp, dst) != 0) rt_user_error("cannot rename '%s' to '%s': %s", tmp, dst, strerror(errno));
}

/* ---- sharded -> single ---- */

typedef struct {
  RtCkptSrc *src;
  const Ten *t;
  int64_t layer; /* -1: the whole tensor */
  struct Cache {
    const Ten *t; /* the stacked tensor in buf */
    char *buf;
    size_t cap;
  } *cache;
} Out;

static void pack_out(const void *ctx, void *dst) {
  const Out *o = ctx;
  const Ten *t = o->t;
  if (o->layer < 0) {
    rt_ckpt_src_read(o->src, t->name, t->dtype, t->rank, t->dims, dst);
    return;
  }
  struct Cache *c = o->cache;
  size_t whole = (size_t)numel(t->dims, t->rank) * rt_dtype_size((RtDType)t->dtype);
  if (c->t != t) {
    if (whole > c->cap) {
      free(c->buf);
      c->buf = rt_xmalloc(whole ? whole : 1);
      c->cap = whole;
    }
    rt_ckpt_src_read(o->src, t->name, t->dtype, t->rank, t->dims, c->buf);
    c->t = t;
  }
  size_t per = t->dims[0] ? whole / (size_t)t->dims[0] : 0;
  memcpy(dst, c->buf + (size_t)o->layer * per, per);
}

/* One file of the tensors of `kind`, per layer where marked. Returns the data bytes; *names (kept)
 * the entries' names. */
static int64_t write_single(const char *path, RtCkptSrc *src, const Ten *ts, int nt, int kind, const char *meta,
                            struct Cache *cache, char ***names_out, int *count) {
  int n = 0;
  for (int i = 0; i < nt; i++)
    if (ts[i].kind == kind) n += ts[i].layers ? (int)ts[i].dims[0] : 1;
  RtStPiece *pc = rt_xcalloc((size_t)n + 1, sizeof *pc);
  Out *outs = rt_xcalloc((size_t)n + 1, sizeof *outs);
  char **names = rt_xcalloc((size_t)n + 1, sizeof *names);
  int k = 0;
  for (int i = 0; i < nt; i++) {
    const Ten *t = &ts[i];
    if (t->kind != kind) continue;
    int64_t es = (int64_t)rt_dtype_size((RtDType)t->dtype);
    for (int64_t l = 0; l < (t->layers ? t->dims[0] : 1); l++) {
      char nm[512];
      if (t->layers)
        rt_layer_name(nm, sizeof nm, t->name, l);
      else
        snprintf(nm, sizeof nm, "%s", t->name);
      names[k] = rt_xstrdup(nm);
      int sl = t->layers;
      pc[k] = (RtStPiece){.name = names[k], .dtype = t->dtype, .rank = t->rank - sl,
                          .bytes = numel(t->dims + sl, t->rank - sl) * es, .pack = pack_out, .pack_ctx = &outs[k]};
      memcpy(pc[k].dims, t->dims + sl, (size_t)(t->rank - sl) * sizeof *t->dims);
      outs[k] = (Out){.src = src, .t = t, .layer = t->layers ? l : -1, .cache = cache};
      k++;
    }
  }
  int64_t total = rt_st_write(path, pc, n, meta);
  free(pc), free(outs);
  *names_out = names;
  *count = n;
  return total;
}

static void to_single(const char *srcpath, const char *dst) {
  RtCkptSrc *src = rt_ckpt_src_open(srcpath);
  const char *ipath = rt_ckpt_src_index_path(src);
  int nt;
  Ten *ts = index_tensors(rt_ckpt_src_index(src), ipath, &nt);
  const RtJson *m = rt_json_get(rt_ckpt_src_index(src), "__metadata__");
  char *mm = meta_text(m, "model", ipath), *mo = meta_text(m, "optimizer", ipath);
  const char *step = meta_str(m, "step", ipath);
  char *end;
  long long stepv = strtoll(step, &end, 10);
  if (*end || end == step || stepv < 0) rt_user_error("'%s': metadata \"step\" is \"%s\", not a number", ipath, step);
  char *tmp = make_tmp(dst);
  char *model = rt_xprintf("%s/model.safetensors", tmp), *optim = rt_xprintf("%s/optimizer.safetensors", tmp);
  char *hf = rt_xprintf("%s/model.safetensors.index.json", tmp);
  struct Cache cache = {0};
  char **names;
  int n;
  int64_t total = write_single(model, src, ts, nt, RT_T_PARAM, mm, &cache, &names, &n);
  rt_ckpt_write_hf_index(hf, (const char *const *)names, n, total, stepv);
  for (int i = 0; i < n; i++)
    free(names[i]);
  free(names);
  write_single(optim, src, ts, nt, RT_T_STATE, mo, &cache, &names, &n);
  for (int i = 0; i < n; i++)
    free(names[i]);
  free(names);
  commit(tmp, dst);
  printf("shardc ckpt: wrote %s: model.safetensors, optimizer.safetensors (%d tensors, step %lld) from %s\n", dst, nt,
         stepv, rt_ckpt_src_dir(src));
  free(cache.buf), free(mm), free(mo), free(model), free(optim), free(hf), free(tmp), free(ts);
  rt_ckpt_src_close(src);
}

/* ---- single -> sharded ---- */

typedef struct {
  const char *name; /* the entry */
  int kind, dtype, rank;
  int64_t dims[RT_MAX_RANK];
  int64_t off, bytes; /* in its file */
  RtStFile *f;
  char *stacked; /* the stacked tensor's name when the entry is one of its layers, else NULL */
  int64_t layer, layers;
} Ent;

/* "adam_m:blocks.3.attention.w" -> "adam_m:blocks.attention.w" and 3 (rt_layer_name's inverse), else NULL. */
static char *unlayer(const char *name, int64_t *layer) {
  const char *base = strrchr(name, ':');
  base = base ? base + 1 : name;
  const char *dot = strchr(base, '.');
  if (!dot || dot[1] < '0' || dot[1] > '9') return NULL;
  const char *q = dot + 1;
  int64_t v = 0;
  while (*q >= '0' && *q <= '9' && v < (1 << 30))
    v = v * 10 + (*q++ - '0');
  if ((*q && *q != '.') || (dot[1] == '0' && q != dot + 2)) return NULL;
  *layer = v;
  return rt_xprintf("%.*s%s", (int)(dot - name), name, q);
}

static void add_entries(RtStFile *f, int kind, Ent **v, int *n) {
  const RtJson *h = f->hdr;
  for (int i = 0; i < h->n; i++) {
    if (!strcmp(h->keys[i], "__metadata__")) continue;
    const RtJson *e = h->items[i], *sh = rt_json_get(e, "shape"), *off = rt_json_get(e, "data_offsets");
    Ent x = {.name = h->keys[i], .kind = kind, .f = f};
    x.dtype = rt_dtype_from_st_name(rt_json_get(e, "dtype")->str);
    if (x.dtype < 0)
      rt_user_error("'%s': tensor '%s' has dtype %s, which shardc checkpoints do not hold", f->path, x.name,
                    rt_json_get(e, "dtype")->str);
    if (sh->n >= RT_MAX_RANK) rt_user_error("'%s': tensor '%s' has %d dims (at most %d)", f->path, x.name, sh->n, RT_MAX_RANK - 1);
    x.rank = sh->n;
    for (int d = 0; d < sh->n; d++)
      x.dims[d] = sh->items[d]->inum; /* checked by rt_st_open */
    x.off = off->items[0]->inum;
    x.bytes = off->items[1]->inum - x.off;
    *v = realloc(*v, (size_t)(*n + 1) * sizeof **v);
    if (!*v) rt_user_error("out of memory");
    (*v)[(*n)++] = x;
  }
}

static int same_shape(const Ent *a, const Ent *b) {
  if (a->dtype != b->dtype || a->rank != b->rank || a->kind != b->kind) return 0;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return 0;
  return 1;
}

/* Marks the entries that are the layers 0..L-1 of one stacked tensor. */
static void group_layers(Ent *v, int n) {
  for (int i = 0; i < n; i++)
    v[i].stacked = unlayer(v[i].name, &v[i].layer);
  for (int i = 0; i < n; i++) {
    if (!v[i].stacked || v[i].layers) continue;
    int64_t count = 0, seen_max = -1;
    int ok = 1;
    for (int j = 0; j < n; j++) {
      if (!strcmp(v[j].name, v[i].stacked)) ok = 0; /* a tensor of that name exists: not layers */
      if (!v[j].stacked || strcmp(v[j].stacked, v[i].stacked) != 0) continue;
      ok &= same_shape(&v[i], &v[j]);
      count++;
      if (v[j].layer > seen_max) seen_max = v[j].layer;
    }
    ok &= seen_max == count - 1; /* names are distinct, so layers 0..count-1 once each */
    for (int j = 0; j < n; j++)
      if (v[j].stacked && !strcmp(v[j].stacked, v[i].stacked)) v[j].layers = ok ? count : -1;
  }
  for (int i = 0; i < n; i++)
    if (v[i].layers <= 0) free(v[i].stacked), v[i].stacked = NULL;
}

static void pack_entry(const void *ctx, void *dst) {
  const Ent *e = ctx;
  rt_st_pread(e->f, e->name, e->off, dst, e->bytes);
  rt_st_check_finite(e->f, e->name, dst, e->dtype, e->bytes / (int64_t)rt_dtype_size((RtDType)e->dtype));
}

static void to_sharded(const char *srcpath, const char *dst) {
  char *dir = rt_ckpt_find(srcpath);
  if (!dir) rt_user_error("'%s' holds no checkpoint (no model.safetensors or index.json)", srcpath);
  char *mpath = rt_xprintf("%s/model.safetensors", dir), *opath = rt_xprintf("%s/optimizer.safetensors", dir);
  RtStFile mf, of;
  rt_st_open(&mf, mpath);
  struct stat sb;
  int have_opt = stat(opath, &sb) == 0;
  if (have_opt) rt_st_open(&of, opath);
  Ent *v = NULL;
  int n = 0;
  add_entries(&mf, RT_T_PARAM, &v, &n);
  if (have_opt) add_entries(&of, RT_T_STATE, &v, &n);
  group_layers(v, n);
  char *meta = meta_text(rt_json_get(mf.hdr, "__metadata__"), "sharded", mpath);
  char *tmp = make_tmp(dst);
  /* the rank file: every entry as it is (a layer with its layer dim, [1, ...]) */
  RtStPiece *pc = rt_xcalloc((size_t)n + 1, sizeof *pc);
  for (int i = 0; i < n; i++) {
    int sl = v[i].stacked != NULL;
    pc[i] = (RtStPiece){.name = v[i].name, .dtype = v[i].dtype, .rank = v[i].rank + sl, .bytes = v[i].bytes,
                        .pack = pack_entry, .pack_ctx = &v[i]};
    pc[i].dims[0] = 1;
    memcpy(pc[i].dims + sl, v[i].dims, (size_t)v[i].rank * sizeof *v[i].dims);
  }
  char *rank = rt_xprintf("%s/rank_00000.safetensors", tmp);
  rt_st_write(rank, pc, n, meta);
  /* the index: each tensor once (a stacked one at its first layer entry), its pieces */
  char *ipath = rt_xprintf("%s/" RT_SHARD_INDEX, tmp);
  FILE *f = fopen(ipath, "w");
  if (!f) rt_user_error("cannot create '%s': %s", ipath, strerror(errno));
  int mesh[4] = {1, 1, 1, 1}, nt = 0;
  rt_shard_index_head(f, meta, 1, mesh);
  for (int i = 0; i < n; i++) {
    int64_t start[RT_MAX_RANK] = {0}, len[RT_MAX_RANK];
    if (!v[i].stacked) {
      rt_shard_index_tensor(f, !nt++, v[i].name, v[i].kind, v[i].dtype, v[i].dims, v[i].rank, 0);
      rt_shard_index_piece(f, 1, "rank_00000.safetensors", v[i].name, start, v[i].dims, v[i].rank);
      continue;
    }
    if (v[i].layer != 0) continue;
    int64_t ld[RT_MAX_RANK] = {v[i].layers};
    memcpy(ld + 1, v[i].dims, (size_t)v[i].rank * sizeof *ld);
    rt_shard_index_tensor(f, !nt++, v[i].stacked, v[i].kind, v[i].dtype, ld, v[i].rank + 1, 1);
    memcpy(len, ld, sizeof ld);
    len[0] = 1;
    for (int64_t l = 0, np = 0; l < v[i].layers; l++)
      for (int j = 0; j < n; j++)
        if (v[j].stacked && !strcmp(v[j].stacked, v[i].stacked) && v[j].layer == l) {
          start[0] = l;
          rt_shard_index_piece(f, !np++, "rank_00000.safetensors", v[j].name, start, len, v[i].rank + 1);
        }
  }
  rt_shard_index_end(f, nt);
  if (fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0)
    rt_user_error("cannot write '%s': %s", ipath, strerror(errno));
  commit(tmp, dst);
  printf("shardc ckpt: wrote %s: a sharded checkpoint of %d tensors (rank_00000.safetensors, index.json) from %s\n", dst,
         nt, dir);
  for (int i = 0; i < n; i++)
    free(v[i].stacked);
  free(v), free(pc), free(rank), free(ipath), free(meta), free(tmp);
  rt_st_close(&mf);
  if (have_opt) rt_st_close(&of);
  free(mpath), free(opath), free(dir);
}

/* ---- info ---- */

/* "[2, 64, 192]" into out (n bytes); its length. */
static int fmt_dims(char *out, size_t n, const int64_t *d, int rank) {
  size_t k = (size_t)snprintf(out, n, "[");
  for (int i = 0; i < rank && k < n; i++)
    k += (size_t)snprintf(out + k, n - k, "%s%lld", i ? ", " : "", (long long)d[i]);
  if (k < n) k += (size_t)snprintf(out + k, n - k, "]");
  return (int)(k < n ? k : n - 1);
}

/* What the checkpoint's run was, from its metadata (the fields it has; an older one may lack some):
 * `model gpt2 (models/gpt2-124m.model), batch 4 x 64 tokens, seed 1337, data position 12, loss 10.34`. */
static void print_run(const RtJson *m) {
  static const char *const keys[] = {"model", "source", "batch", "seq", "seed", "data_position", "loss"};
  const char *v[7];
  for (int i = 0; i < 7; i++) {
    const RtJson *e = rt_json_get(m, keys[i]);
    v[i] = e && e->kind == RT_JSON_STR ? e->str : NULL;
  }
  const char *sep = "";
  if (v[0]) printf("model %s", v[0]), sep = ", ";
  if (v[0] && v[1]) printf(" (%s)", v[1]);
  if (v[2] && v[3]) printf("%sbatch %s x %s tokens", sep, v[2], v[3]), sep = ", ";
  if (v[4]) printf("%sseed %s", sep, v[4]), sep = ", ";
  if (v[5]) printf("%sdata position %s", sep, v[5]), sep = ", ";
  if (v[6]) printf("%sloss %s", sep, v[6]), sep = ", ";
  if (*sep) putchar('\n');
}

static void info(const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0) rt_user_error("cannot open checkpoint '%s': %s", path, strerror(errno));
  if (!rt_ckpt_is_sharded(path)) {
    char *dir = rt_ckpt_find(path);
    if (!dir) rt_user_error("'%s' holds no checkpoint (no model.safetensors or index.json)", path);
    printf("single-file checkpoint %s\n", dir);
    const char *parts[] = {"model.safetensors", "optimizer.safetensors"};
    for (int k = 0; k < 2; k++) {
      char *p = rt_xprintf("%s/%s", dir, parts[k]);
      struct stat sb;
      if (k && stat(p, &sb) != 0) {
        free(p);
        continue;
      }
      RtStFile s;
      rt_st_open(&s, p);
      if (!k) {
        printf("step %s of %s\n", rt_st_meta(&s, "step"), rt_st_meta(&s, "steps"));
        print_run(rt_json_get(s.hdr, "__metadata__"));
      }
      printf("%s: %lld bytes\n", parts[k], (long long)(s.data_start + s.data_bytes));
      int wn = 0; /* the name column's width */
      for (int i = 0; i < s.hdr->n; i++)
        if (strcmp(s.hdr->keys[i], "__metadata__") && (int)strlen(s.hdr->keys[i]) > wn) wn = (int)strlen(s.hdr->keys[i]);
      for (int i = 0; i < s.hdr->n; i++) {
        if (!strcmp(s.hdr->keys[i], "__metadata__")) continue;
        const RtJson *e = s.hdr->items[i], *sh = rt_json_get(e, "shape");
        int64_t d[RT_MAX_RANK + 8];
        int r = sh->n < RT_MAX_RANK + 8 ? sh->n : RT_MAX_RANK + 8;
        for (int j = 0; j < r; j++)
          d[j] = sh->items[j]->inum;
        char dims[256];
        fmt_dims(dims, sizeof dims, d, r);
        printf("  %-*s  %-4s  %s\n", wn, s.hdr->keys[i], rt_json_get(e, "dtype")->str, dims);
      }
      rt_st_close(&s);
      free(p);
    }
    free(dir);
    return;
  }
  RtCkptSrc *src = rt_ckpt_src_open(path);
  const RtJson *idx = rt_ckpt_src_index(src);
  const char *ipath = rt_ckpt_src_index_path(src);
  int nt;
  Ten *ts = index_tensors(idx, ipath, &nt);
  const RtJson *m = rt_json_get(idx, "__metadata__");
  const RtJson *mesh = rt_json_get(idx, "mesh"), *world = rt_json_get(idx, "world");
  printf("sharded checkpoint %s\nstep %s of %s", rt_ckpt_src_dir(src), meta_str(m, "step", ipath),
         meta_str(m, "steps", ipath));
  if (world && world->kind == RT_JSON_NUM) printf(", written by %lld rank(s)", (long long)world->inum);
  if (mesh && mesh->kind == RT_JSON_ARR && mesh->n == 4)
    printf(" (dp %lld x pp %lld x cp %lld x tp %lld)", (long long)mesh->items[0]->inum, (long long)mesh->items[1]->inum,
           (long long)mesh->items[2]->inum, (long long)mesh->items[3]->inum);
  putchar('\n');
  print_run(m);
  /* the files the pieces name, with their sizes */
  const RtJson *tj = rt_json_get(idx, "tensors");
  const char **files = NULL;
  int nf = 0;
  int wn = 0, wd = 0; /* the name and shape columns' widths */
  char dims[256];
  for (int i = 0; i < nt; i++) {
    int l = fmt_dims(dims, sizeof dims, ts[i].dims, ts[i].rank);
    if ((int)strlen(ts[i].name) > wn) wn = (int)strlen(ts[i].name);
    if (l > wd) wd = l;
  }
  for (int i = 0; i < nt; i++) {
    const RtJson *ps = need(tj->items[i], "pieces", RT_JSON_ARR, ipath, ts[i].name);
    fmt_dims(dims, sizeof dims, ts[i].dims, ts[i].rank);
    printf("  %-*s  %-5s  %-4s  %-*s  %d piece(s)%s\n", wn, ts[i].name, ts[i].kind == RT_T_PARAM ? "param" : "state",
           rt_dtype_st_name(ts[i].dtype), wd, dims, ps->n, ts[i].layers ? ", per layer in a single file" : "");
    for (int k = 0; k < ps->n; k++) {
      const char *fl = need(ps->items[k], "file", RT_JSON_STR, ipath, ts[i].name)->str;
      int seen = 0;
      for (int j = 0; j < nf && !seen; j++)
        seen = !strcmp(files[j], fl);
      if (seen) continue;
      files = realloc(files, (size_t)(nf + 1) * sizeof *files);
      if (!files) rt_user_error("out of memory");
      files[nf++] = fl;
    }
  }
  for (int j = 0; j < nf; j++) {
    char *p = rt_xprintf("%s/%s", rt_ckpt_src_dir(src), files[j]);
    struct stat sb;
    if (strchr(files[j], '/') || stat(p, &sb) != 0) rt_user_error("'%s': piece file '%s' is missing", ipath, files[j]);
    printf("file %s: %lld bytes\n", files[j], (long long)sb.st_size);
    free(p);
  }
  free(files), free(ts);
  rt_ckpt_src_close(src);
}

static int tool_usage(FILE *f) {
  fprintf(f, "usage: shardc ckpt info DIR                                     what a checkpoint holds\n"
             "       shardc ckpt convert SRC DST [--format single|sharded]   sharded <-> single file\n"
             "  --format single   (default) DST/model.safetensors + optimizer.safetensors (Hugging Face style)\n"
             "  --format sharded  DST/index.json + rank_00000.safetensors, for any layout to resume\n");
  return f == stdout ? 0 : 2;
}

int rt_ckpt_tool(int argc, char **argv) {
  rt_error_tool = "shardc ckpt: "; /* every error below, and the readers': "shardc ckpt: error: ..." */
  if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) return tool_usage(argc < 1 ? stderr : stdout);
  if (!strcmp(argv[0], "info")) {
    if (argc != 2) {
      fprintf(stderr, "shardc ckpt: error: info takes one checkpoint directory (got %d argument(s))\n", argc - 1);
      return tool_usage(stderr);
    }
    info(argv[1]);
    return 0;
  }
  if (strcmp(argv[0], "convert") != 0) {
    fprintf(stderr, "shardc ckpt: error: unknown command '%s'\n", argv[0]);
    return tool_usage(stderr);
  }
  const char *pos[2] = {NULL, NULL}, *format = "single", *given = NULL;
  int np = 0;
  for (int i = 1; i < argc; i++) {
    const char *f = NULL;
    if (!strcmp(argv[i], "--format")) {
      if (i + 1 >= argc) rt_user_error("convert: --format needs single or sharded");
      f = argv[++i];
    } else if (!strncmp(argv[i], "--format=", 9)) {
      f = argv[i] + 9;
    }
    if (f) { /* (a second one replaced the first without a word) */
      if (given && strcmp(given, f) != 0)
        rt_user_error("convert: --format given twice ('%s', then '%s'); give it once", given, f);
      format = given = f;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      rt_user_error("convert: unknown option '%s'", argv[i]);
    } else if (np < 2) {
      pos[np++] = argv[i];
    } else {
      rt_user_error("convert: one SRC and one DST (got '%s' too)", argv[i]);
    }
  }
  if (np != 2) {
    fprintf(stderr, "shardc ckpt: error: convert needs SRC and DST (got %d)\n", np);
    return tool_usage(stderr);
  }
  if (strcmp(format, "single") != 0 && strcmp(format, "sharded") != 0)
    rt_user_error("convert: --format '%s' is neither single nor sharded", format);
  struct stat sb;
  if (stat(pos[0], &sb) != 0) rt_user_error("cannot open checkpoint '%s': %s", pos[0], strerror(errno));
  char *found = rt_ckpt_find(pos[0]);
  if (!found) rt_user_error("'%s' holds no checkpoint (no model.safetensors or index.json)", pos[0]);
  free(found);
  int sharded = rt_ckpt_is_sharded(pos[0]);
  if (!strcmp(format, "single")) {
    if (!sharded) rt_user_error("'%s' is not a sharded checkpoint (no index.json): it is already a single file", pos[0]);
    to_single(pos[0], pos[1]);
  } else {
    if (sharded) rt_user_error("'%s' is already a sharded checkpoint", pos[0]);
    to_sharded(pos[0], pos[1]);
  }
  return 0;
}
